"""Kopf's own watches of kubeherd's kinds, in the readiness.

Kopf lists and then watches CustomDaemonSets and SchedulerProfiles itself. Its requests go
through kubeherd's transport, which shows each of them here: a listing that answers makes the
kind listed, a watch that starts shows the kind works, and a request that fails or is refused
(RBAC without `list`, a proxy in the way) counts as a failure until one answers again. Where the
CRDs are not installed, Kopf never asks, and the kind stays "not listed yet".

Kopf lists and watches only on the active replica; a standby does not need these watches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from yarl import URL

from kubeherd.names import CUSTOMDAEMONSETS, GROUP, SCHEDULERPROFILES, VERSION
from kubeherd.readiness import Readiness, WatchHealth

KOPF_WATCHED = (CUSTOMDAEMONSETS, SCHEDULERPROFILES)
_PREFIX = ("", "apis", GROUP, VERSION)


class KopfWatches:
    """The health of each of Kopf's watches, one per kind and served namespace ("" for all)."""

    def __init__(
        self, readiness: Readiness, namespaces: Sequence[str], needed: Callable[[], bool]
    ) -> None:
        self._health: dict[tuple[str, str], WatchHealth] = {
            (resource, namespace): readiness.watch(resource, namespace, needed)
            for resource in KOPF_WATCHED
            for namespace in (namespaces or ("",))
        }

    def observe(self, method: str, url: URL, outcome: int | BaseException) -> None:
        """One of Kopf's requests, answered with a status or failed with an error."""
        if method != "GET":
            return
        health = self._health.get(_collection(url))
        if health is None:
            return
        if isinstance(outcome, BaseException):
            health.failed(outcome)
        elif outcome >= 300:
            health.failed(f"the API server answered {outcome} to {method} {url.path}")
        elif url.query.get("watch") in ("true", "1"):
            health.worked()
        else:
            health.has_listed()


def _collection(url: URL) -> tuple[str, str]:
    """(resource, namespace) of a request for a whole collection of kubeherd's kinds, else
    ("", "")."""
    parts = url.path.rstrip("/").split("/")
    if tuple(parts[:4]) != _PREFIX:
        return ("", "")
    rest = parts[4:]
    if len(rest) == 1:
        return (rest[0], "")
    if len(rest) == 3 and rest[0] == "namespaces":
        return (rest[2], rest[1])
    return ("", "")
