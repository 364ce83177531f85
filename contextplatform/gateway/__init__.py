"""The gateway: OpenAI- and Anthropic-compatible endpoints that resolve context, forward the
rewritten request to the route's deployment and return the provider's answer, so an application
changes only its client's ``base_url`` (vLLM Semantic Router's context plugin, run as a gateway).

``views`` parses and presents; ``calls`` reads the route, user and session from a request;
``upstreams`` finds the route's deployment; ``forward`` talks to it; ``streams`` follows the text
of a stream as it passes; ``protocol`` words errors in each provider's shape."""
