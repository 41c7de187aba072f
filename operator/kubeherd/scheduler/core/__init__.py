"""The SchedulerProfile controller's pure core: plain data in, plain data out (no API client,
Kopf or event loop; import-linter holds it). Checks, rendering, owned objects, the converge plan
and the status. The I/O that feeds and carries out the plan is in ../shell."""
