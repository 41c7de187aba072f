"""The one place that talks to the API server: a shared client, rate-limited writes, events."""
