"""The names of kubeherd's own API, in one place: its group and version, and the plural and kind
of each resource. (Labels, annotations and finalizers are each defined once, next to the code
that owns them: daemonset/core/pods.py, scheduler/core/owner.py, settings.py.)
"""

from __future__ import annotations

GROUP = "kubeherd.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

CUSTOMDAEMONSETS = "customdaemonsets"
CUSTOMDAEMONSET = "CustomDaemonSet"
SCHEDULERPROFILES = "schedulerprofiles"
SCHEDULERPROFILE = "SchedulerProfile"
