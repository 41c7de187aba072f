"""What kubeherd exposes to Prometheus on `/metrics` (docs/metrics.md).

`health`: the operator's own instruments (requests, passes, events), which the client, the
runner and the event recorder update as they work. `objects`: the per-object gauges, read from
the controllers when Prometheus scrapes, so a deleted object's series go with it. `server`: the
HTTP endpoint.
"""
