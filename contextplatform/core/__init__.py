"""The kernel every app builds on: API errors and validation, the base API view, form-error mapping,
metrics, token estimation, the guarded outbound HTTP client and the LLM client. It imports no app."""
