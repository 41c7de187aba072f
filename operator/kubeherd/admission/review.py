"""What the webhook answers, worked out from plain data: which requests it checks, and a
SchedulerProfile's review from the controller's verdict (a CustomDaemonSet's comes from the
API server's answer about its pod: kubeherd.daemonset.core.template).

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeherd.daemonset.core.template import Review, as_api_list
from kubeherd.scheduler.core.problems import Verdict


def spec_changed(operation: str, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether the request changes what the controllers act on. A finalizer, label or status
    change to an object that is already invalid must go through: the controller's own
    finalizer patches and its removal at deletion would otherwise be refused forever."""
    if (new.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if operation == "CREATE" or old is None:
        return True
    return operation == "UPDATE" and old.get("spec") != new.get("spec")


def profile_review(verdict: Verdict) -> Review:
    """A SchedulerProfile's review: the controller's verdict, each problem with its field."""
    warnings = tuple(str(warning) for warning in verdict.warnings)
    if verdict.valid:
        return Review(warnings=warnings)
    return Review(
        refusal=as_api_list([str(problem) for problem in verdict.errors]), warnings=warnings
    )
