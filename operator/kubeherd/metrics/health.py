"""The operator's health: API requests, passes, dropped events. Each instrument belongs to no
registry until the operator's start registers it (`objects.operator_registry`), so importing
this module registers nothing twice and the tests can read the instruments directly."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

API_REQUESTS = Counter(
    "kubeherd_api_requests",
    "Requests to the API server, by verb and HTTP status code ('error': no answer).",
    ["verb", "code"],
    registry=None,
)
API_RETRIES = Counter(
    "kubeherd_api_retries",
    "Requests sent again: 'throttled' after a 429 (or a 5xx) and its Retry-After, 'lost_answer' "
    "after a create whose answer never came, 'name_taken' for a pod name another pod had.",
    ["verb", "reason"],
    registry=None,
)
PASS_DURATION = Histogram(
    "kubeherd_pass_duration_seconds",
    "How long each controller pass took, by kind; its _count is the number of passes.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    registry=None,
)
PASS_ERRORS = Counter(
    "kubeherd_pass_errors",
    "Passes that raised, by kind; the object is looked at again after a backoff.",
    ["kind"],
    registry=None,
)
EVENTS_DROPPED = Counter(
    "kubeherd_events_dropped",
    "Events logged but not posted: over the spam filter's budget for the object and reason.",
    ["kind"],
    registry=None,
)

INSTRUMENTS = (API_REQUESTS, API_RETRIES, PASS_DURATION, PASS_ERRORS, EVENTS_DROPPED)
