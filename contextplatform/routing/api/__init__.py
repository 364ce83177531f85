"""The HTTP API of routes, resolve, replay and the compression preview."""
