"""The tenant admin's live dashboard: source outcomes of ``/ws/metrics/`` drawn as they arrive."""
