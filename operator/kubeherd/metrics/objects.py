"""Per-object gauges, built from the bodies the controllers hold when Prometheus scrapes.

For each CustomDaemonSet, every gauge kube-state-metrics has for a DaemonSet, named with
`kubeherd_customdaemonset_` for its `kube_daemonset_` and labelled `namespace` and
`customdaemonset`, so that dashboards and alerts written for DaemonSets carry over by renaming.
Like kube-state-metrics, a status field not yet written reads 0. Nothing is labelled per node or
per pod: the series grow with the objects, not with the cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from kubeherd.api.customdaemonset_reasons import IneligibleReason
from kubeherd.meta import parse_time
from kubeherd.metrics.health import INSTRUMENTS
from kubeherd.readiness import Readiness

Body = Mapping[str, Any]

CDS_PREFIX = "kubeherd_customdaemonset_"
CDS_LABELS = ["namespace", "customdaemonset"]
# (the name after the prefix, the status field, the help), as kube-state-metrics has them.
CDS_STATUS_GAUGES = (
    ("status_current_number_scheduled", "currentNumberScheduled",
     "Nodes running a daemon pod that should."),
    ("status_desired_number_scheduled", "desiredNumberScheduled",
     "Nodes that should run the daemon pod."),
    ("status_number_available", "numberAvailable",
     "Nodes whose daemon pod has been ready for minReadySeconds."),
    ("status_number_misscheduled", "numberMisscheduled",
     "Nodes running a daemon pod that should not."),
    ("status_number_ready", "numberReady", "Nodes whose daemon pod is Ready."),
    ("status_number_unavailable", "numberUnavailable",
     "Nodes that should run the daemon pod and have none available."),
    ("status_updated_number_scheduled", "updatedNumberScheduled",
     "Nodes running a daemon pod of the current template."),
    ("status_observed_generation", "observedGeneration",
     "The generation the controller last acted on."),
)  # fmt: skip

CANARY_PHASES = ("Running", "Paused", "Failed", "Passed")

SP_PREFIX = "kubeherd_schedulerprofile_"
SP_LABELS = ["namespace", "schedulerprofile"]


def _identity(body: Body) -> tuple[str, str]:
    metadata = body.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _number(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _condition_true(body: Body, type_: str) -> bool:
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def customdaemonset_metrics(bodies: Iterable[Body]) -> list[Metric]:
    gauges = {
        suffix: GaugeMetricFamily(CDS_PREFIX + suffix, text, labels=CDS_LABELS)
        for suffix, _, text in CDS_STATUS_GAUGES
    }
    generation = GaugeMetricFamily(
        CDS_PREFIX + "metadata_generation", "The spec's generation.", labels=CDS_LABELS
    )
    created = GaugeMetricFamily(
        CDS_PREFIX + "created", "Unix creation timestamp.", labels=CDS_LABELS
    )
    ineligible = GaugeMetricFamily(
        CDS_PREFIX + "ineligible_nodes",
        "Nodes without a daemon pod because they are not eligible, by reason (status."
        "ineligibleNodes); kubeherd's own, with no kube-state-metrics counterpart.",
        labels=[*CDS_LABELS, "reason"],
    )
    canary = GaugeMetricFamily(
        CDS_PREFIX + "canary",
        "1 for the phase the current template's canary is in (status.canary.phase: Running, "
        "Paused, Failed or Passed), 0 for the others; no series without a canary. kubeherd's "
        "own.",
        labels=[*CDS_LABELS, "phase"],
    )
    for body in bodies:
        identity = list(_identity(body))
        status = body.get("status") or {}
        recorded = status.get("canary") or {}
        if recorded and recorded.get("revision") == status.get("updateRevision"):
            for phase in CANARY_PHASES:
                canary.add_metric([*identity, phase], float(recorded.get("phase") == phase))
        for suffix, field, _ in CDS_STATUS_GAUGES:
            gauges[suffix].add_metric(identity, _number(status.get(field)))
        metadata = body.get("metadata") or {}
        generation.add_metric(identity, _number(metadata.get("generation")))
        timestamp = parse_time(metadata.get("creationTimestamp"))
        if timestamp is not None:
            created.add_metric(identity, timestamp)
        by_reason = dict.fromkeys((reason.value for reason in IneligibleReason), 0.0)
        for group in status.get("ineligibleNodes") or []:
            reason = str(group.get("reason") or "")
            by_reason[reason] = by_reason.get(reason, 0.0) + _number(group.get("count"))
        for reason, count in by_reason.items():
            ineligible.add_metric([*identity, reason], count)
    return [*gauges.values(), generation, created, ineligible, canary]


def leader_expected(body: Body) -> bool:
    """A Lease holder is expected: leader election on (the default) and a replica asked for."""
    spec = body.get("spec") or {}
    election = spec.get("leaderElection") or {}
    return bool(election.get("leaderElect", True)) and _number(spec.get("replicas", 1)) > 0


def schedulerprofile_metrics(bodies: Iterable[Body]) -> list[Metric]:
    replicas = GaugeMetricFamily(
        SP_PREFIX + "spec_replicas", "Scheduler pods asked for.", labels=SP_LABELS
    )
    ready = GaugeMetricFamily(
        SP_PREFIX + "status_ready_replicas", "Ready scheduler pods.", labels=SP_LABELS
    )
    leader = GaugeMetricFamily(
        SP_PREFIX + "leader",
        "1 while a scheduler pod holds the Lease, else 0; only where leader election is on "
        "and a replica is asked for.",
        labels=SP_LABELS,
    )
    valid = GaugeMetricFamily(
        SP_PREFIX + "valid",
        "1 while the Valid condition is True (the spec passed every check), else 0.",
        labels=SP_LABELS,
    )
    for body in bodies:
        identity = list(_identity(body))
        spec, status = body.get("spec") or {}, body.get("status") or {}
        replicas.add_metric(identity, _number(spec.get("replicas", 1)))
        ready.add_metric(identity, _number(status.get("readyReplicas")))
        if leader_expected(body):
            leader.add_metric(identity, 1.0 if status.get("leader") else 0.0)
        valid.add_metric(identity, 1.0 if _condition_true(body, "Valid") else 0.0)
    return [replicas, ready, leader, valid]


class ObjectCollector(Collector):
    """Gauges computed at each scrape from what `bodies` returns then."""

    def __init__(
        self, bodies: Callable[[], Iterable[Body]], build: Callable[[Iterable[Body]], list[Metric]]
    ) -> None:
        self._bodies = bodies
        self._build = build

    def collect(self) -> Iterator[Metric]:
        yield from self._build(list(self._bodies()))

    def snapshot(self) -> ObjectCollector:
        # Only the list is copied, not the bodies: the controllers never change a body in
        # place, they replace it (a new dict for each watch event and each status written), so
        # the bodies listed now read the same from any thread later.
        bodies = list(self._bodies())
        return ObjectCollector(lambda: bodies, self._build)


class OperatorCollector(Collector):
    """Whether this replica works or stands by, and the work waiting in each controller."""

    def __init__(
        self,
        active: Callable[[], bool],
        waiting: Callable[[], Mapping[str, tuple[int, int]]],
    ) -> None:
        self._active = active
        self._waiting = waiting

    def collect(self) -> Iterator[Metric]:
        active = GaugeMetricFamily(
            "kubeherd_active",
            "1 on the replica that works, 0 on one that stands by (peering).",
            value=1.0 if self._active() else 0.0,
        )
        depth = GaugeMetricFamily(
            "kubeherd_workqueue_depth",
            "Objects marked for a pass that has not started yet, by kind.",
            labels=["kind"],
        )
        dirty = GaugeMetricFamily(
            "kubeherd_dirty_nodes",
            "Nodes marked for a pass that has not started yet, summed over the objects, by kind.",
            labels=["kind"],
        )
        for kind, (objects, nodes) in self._waiting().items():
            depth.add_metric([kind], float(objects))
            dirty.add_metric([kind], float(nodes))
        yield from (active, depth, dirty)

    def snapshot(self) -> OperatorCollector:
        active, waiting = self._active(), dict(self._waiting())
        return OperatorCollector(lambda: active, lambda: waiting)


WATCH_LABELS = ["resource", "watched_namespace"]


def readiness_metrics(readiness: Readiness) -> list[Metric]:
    """What /readyz says, and each watch's part in it. The watched namespace is empty for a
    watch of all namespaces (a label named `namespace` would clash with the target's own)."""
    ready = GaugeMetricFamily(
        "kubeherd_ready",
        "1 while /readyz answers 200: started, every watch listed and none failing for long.",
        value=1.0 if readiness.ready() else 0.0,
    )
    listed = GaugeMetricFamily(
        "kubeherd_watch_listed",
        "1 once the watch has its first listing; nothing is reconciled before.",
        labels=WATCH_LABELS,
    )
    failing = GaugeMetricFamily(
        "kubeherd_watch_failing_seconds",
        "How long the watch's listing or watching has been failing, without a success "
        "between; 0 while it works.",
        labels=WATCH_LABELS,
    )
    failures = CounterMetricFamily(
        "kubeherd_watch_failures",
        "Failed attempts to list or watch, each followed by a retry.",
        labels=WATCH_LABELS,
    )
    # A watch the replica does not need now (Kopf's, on a standby) is left out: it has no
    # listing, by design, and the alert would take that for a failure.
    for watch in readiness.needed_watches():
        labels = [watch.resource, watch.namespace]
        listed.add_metric(labels, 1.0 if watch.listed else 0.0)
        failing.add_metric(labels, watch.failing_seconds())
        failures.add_metric(labels, float(watch.failures))
    return [ready, listed, failing, failures]


class ReadinessCollector(Collector):
    """The readiness and the watches' health (kubeherd.readiness), read on the event loop."""

    def __init__(self, readiness: Readiness) -> None:
        self._readiness = readiness

    def collect(self) -> Iterator[Metric]:
        yield from readiness_metrics(self._readiness)

    def snapshot(self) -> Collector:
        metrics = readiness_metrics(self._readiness)
        return _Fixed(metrics)


class _Fixed(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics


@runtime_checkable
class LoopStateCollector(Protocol):
    """A collector of state that only the event loop may read (the controllers' dicts, which
    the loop changes between any two of its steps): `snapshot`, called on the loop, copies
    what it needs, cheaply, into a collector that any thread may collect."""

    def snapshot(self) -> Collector: ...


class OperatorRegistry(CollectorRegistry):
    """The health instruments and the per-object collectors of one operator's run.

    Collected as it is, it reads the controllers' state directly, which is only safe on the
    event loop. `snapshot` (on the loop) gives a registry that a worker thread may collect and
    render while the loop goes on: the instruments as they are, since prometheus_client locks
    their values, and a snapshot of each collector of loop state."""

    def __init__(self, collectors: Iterable[Collector]) -> None:
        super().__init__(auto_describe=True)
        self._collectors = (*INSTRUMENTS, *collectors)
        for collector in self._collectors:
            self.register(collector)

    def snapshot(self) -> CollectorRegistry:
        # No auto_describe: it would collect each collector once more, to learn its names.
        frozen = CollectorRegistry(auto_describe=False)
        for collector in self._collectors:
            if isinstance(collector, LoopStateCollector):
                frozen.register(collector.snapshot())
            else:
                frozen.register(collector)
        return frozen


def operator_registry(*collectors: Collector) -> OperatorRegistry:
    """A registry of the health instruments and these collectors, for one operator's run."""
    return OperatorRegistry(collectors)
