"""The database engine: django-tenants' schema-per-tenant backend over a PostgreSQL backend that
counts statements for ``/metrics``, with what a request pays per connection checkout cut to what is
needed (``base``)."""
