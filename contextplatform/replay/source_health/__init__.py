"""Each source's health per route: outcome rates over the last hour against the week before, and
the alerts they raise (``rules``), kept as per-minute counts updated when replay records are
written (``aggregate``), read by the API, the dashboard and ``/metrics``."""
