"""The operator's defaults, in one place: `kubeherd run`'s options, the settings and the
controllers all take them from here. (The write limits' are WriteLimits' own, in kube/client.py.)
"""

from __future__ import annotations

# The longest wait between retries of pod creates the API server refused (quota...), seconds.
MAX_CREATE_BACKOFF = 60.0
# The longest wait before a node's failed daemon pod is replaced, as the native controller's.
MAX_FAILED_POD_BACKOFF = 900.0
# How often each SchedulerProfile's Deployment and Lease are read for its status, seconds.
SCHEDULER_STATUS_INTERVAL = 5.0
# `kubeherd run --health-address`: /healthz and /readyz, on all interfaces for the kubelet.
DEFAULT_HEALTH_ADDRESS = "0.0.0.0:8080"
# `kubeherd run --metrics-address`: all interfaces, next to the health endpoints.
DEFAULT_METRICS_ADDRESS = "0.0.0.0:8081"
# The CRD's bound on spec.revisionHistoryLimit: the controller lists and keeps a record of every
# revision it keeps. The native DaemonSet's default is 10, and nobody rolls back 100 templates.
MAX_HISTORY_LIMIT = 100
# The longest wait between dry-runs of a template the API server gave no verdict on, seconds.
TEMPLATE_CHECK_LIMIT = 30.0
# The CustomDaemonSet API's defaults: the CRD's schema (api/customdaemonset.py) and the
# controller's reading of a spec (daemonset/spec.py) both take them from here. The native
# DaemonSet's are the same.
DEFAULT_HISTORY_LIMIT = 10
DEFAULT_PROGRESS_DEADLINE = 600
DEFAULT_MAX_UNAVAILABLE = 1
DEFAULT_MAX_SURGE = 0
# A canary's defaults (ExtendedDaemonSet's, which kubeherd's canary follows): one node, watched
# for ten minutes once available; paused beyond 2 restarts of a canary pod, or when one is not
# available ten minutes after it started; failed beyond 5 restarts.
DEFAULT_CANARY_REPLICAS = 1
DEFAULT_CANARY_DURATION = 600
DEFAULT_CANARY_PAUSE_RESTARTS = 2
DEFAULT_CANARY_SLOW_START = 600
DEFAULT_CANARY_FAIL_RESTARTS = 5
