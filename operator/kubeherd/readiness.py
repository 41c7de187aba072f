"""Whether the operator can do its work, as `/readyz`, the metrics and the alert tell it.

A replica is ready once its start-up is done and each of its watches (kubeherd's of nodes and
daemon pods; Kopf's of CustomDaemonSets and SchedulerProfiles, on the active replica) has its
first listing in store, and while none of them has been failing for longer than a grace
period. Until the node and pod watches have listed, no CustomDaemonSet gets a pass: an operator
whose watches cannot list (a proxy that refuses it, a certificate the API server does not take,
RBAC that forbids the listing) would otherwise look healthy while it does nothing.

Pure: the reflectors report to it, the health server and the metrics read it; time comes from
the clock it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# How long a watch that had listed may fail before the replica stops being ready. Longer than
# the restart of an API server (a control-plane upgrade), so that a routine restart does not
# take every replica out of its Services at once.
FAILING_GRACE_SECONDS = 120.0
# What /readyz and the logs quote of a failure.
ERROR_LENGTH = 300


@dataclass
class WatchHealth:
    """One watch: whether it has listed, and whether (since when, why) it is failing now."""

    resource: str
    # The namespace watched; "" for all of them (or a cluster-scoped kind).
    namespace: str = ""
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    listed: bool = False
    # Failed attempts to list or watch, over the whole run.
    failures: int = 0
    # When the current run of failures began; None while the watch works.
    failing_since: float | None = None
    last_error: str = ""
    # Whether the replica needs this watch now: Kopf lists and watches kubeherd's kinds only
    # on the active replica, never on a standby.
    needed: Callable[[], bool] = field(default=lambda: True, repr=False)

    @property
    def name(self) -> str:
        return f"{self.resource} in {self.namespace}" if self.namespace else self.resource

    def failed(self, error: BaseException | str) -> None:
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = self.clock()
        text = error if isinstance(error, str) else (str(error) or type(error).__name__)
        self.last_error = " ".join(text.split())[:ERROR_LENGTH]

    def worked(self) -> None:
        """A listing or a watch event came through: the watch works (again)."""
        self.failing_since = None

    def has_listed(self) -> None:
        self.listed = True
        self.failing_since = None

    def failing_seconds(self) -> float:
        """How long the watch has been failing without a success in between; 0 while it works."""
        if self.failing_since is None:
            return 0.0
        return max(0.0, self.clock() - self.failing_since)


@dataclass(frozen=True)
class Verdict:
    ready: bool
    # One line per check: "[+]watch nodes ok", "[-]watch nodes: not listed yet; ...".
    lines: tuple[str, ...]

    def text(self) -> str:
        """As the API server's own /readyz?verbose words it."""
        last = "readyz check passed" if self.ready else "readyz check failed"
        return "\n".join((*self.lines, last)) + "\n"


class Readiness:
    """The checks behind `/readyz`: start-up done, and every watch listed and not failing for
    longer than `grace` seconds."""

    def __init__(
        self,
        *,
        grace: float = FAILING_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grace = grace
        self.clock = clock
        self.started = False
        self.watches: list[WatchHealth] = []

    def watch(
        self, resource: str, namespace: str = "", needed: Callable[[], bool] | None = None
    ) -> WatchHealth:
        """The record of one more watch, which the readiness now waits for (while `needed`
        says so, if given)."""
        health = WatchHealth(resource, namespace, clock=self.clock)
        if needed is not None:
            health.needed = needed
        self.watches.append(health)
        return health

    def needed_watches(self) -> list[WatchHealth]:
        return [watch for watch in self.watches if watch.needed()]

    def watch_ok(self, watch: WatchHealth) -> bool:
        return watch.listed and watch.failing_seconds() <= self.grace

    def verdict(self) -> Verdict:
        lines = ["[+]started ok" if self.started else "[-]started: start-up is not done yet"]
        needed = self.needed_watches()
        lines += [self._line(watch) for watch in needed]
        ready = self.started and all(self.watch_ok(watch) for watch in needed)
        return Verdict(ready, tuple(lines))

    def ready(self) -> bool:
        return self.verdict().ready

    def _line(self, watch: WatchHealth) -> str:
        failing = watch.failing_seconds()
        if self.watch_ok(watch):
            return f"[+]watch {watch.name} ok"
        why = [] if watch.listed else ["not listed yet"]
        if watch.failing_since is not None:
            failures = f"{watch.failures} failures"
            why.append(f"failing for {failing:.0f}s ({failures}), last: {watch.last_error}")
        return f"[-]watch {watch.name}: {'; '.join(why)}"
