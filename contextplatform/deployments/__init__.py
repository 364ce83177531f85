"""Deployments: a tenant's upstream models (where the gateway and the judge send calls)."""
