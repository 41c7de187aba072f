"""Per-object gauges, built from the bodies the controllers hold when Prometheus scrapes.

For each CustomDaemonSet, every gauge kube-state-metrics has for a DaemonSet, named with
`kubeherd_customdaemonset_` for its `kube_daemonset_` and labelled `namespace` and
`customdaemonset`, so that dashboards and alerts written for DaemonSets carry over by renaming.
Like kube-state-metrics, a status field not yet written reads 0. Nothing is labelled per node or
per pod: the series grow with the objects, not with the cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from kubeherd.api.customdaemonset_reasons import IneligibleReason
from kubeherd.meta import parse_time
from kubeherd.metrics.exposition import (
    LINES_PER_PIECE,
    Body,
    ObjectGauge,
    Pacer,
    PageWriter,
    Sample,
    label_text,
    write_object_gauges,
)
from kubeherd.metrics.health import INSTRUMENTS
from kubeherd.readiness import Readiness

# How prometheus_client writes its collectors in the format asked for (`choose_encoder`).
Encoder = Callable[[CollectorRegistry], bytes]
OPENMETRICS_END = b"# EOF\n"

CDS_PREFIX = "kubeherd_customdaemonset_"
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


def _number(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _condition_true(body: Body, type_: str) -> bool:
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def _status_field(field: str) -> Callable[[Body], Iterable[Sample]]:
    def sample(body: Body) -> Iterable[Sample]:
        return (((), _number((body.get("status") or {}).get(field))),)

    return sample


def _generation(body: Body) -> Iterable[Sample]:
    return (((), _number((body.get("metadata") or {}).get("generation"))),)


def _created(body: Body) -> Iterable[Sample]:
    timestamp = parse_time((body.get("metadata") or {}).get("creationTimestamp"))
    return () if timestamp is None else (((), timestamp),)


def _ineligible_by_reason(body: Body) -> Iterable[Sample]:
    by_reason = dict.fromkeys((reason.value for reason in IneligibleReason), 0.0)
    for group in (body.get("status") or {}).get("ineligibleNodes") or []:
        reason = str(group.get("reason") or "")
        by_reason[reason] = by_reason.get(reason, 0.0) + _number(group.get("count"))
    return [((reason,), count) for reason, count in by_reason.items()]


def _canary_phase(body: Body) -> Iterable[Sample]:
    status = body.get("status") or {}
    recorded = status.get("canary") or {}
    if not recorded or recorded.get("revision") != status.get("updateRevision"):
        return ()
    return [((phase,), float(recorded.get("phase") == phase)) for phase in CANARY_PHASES]


CUSTOMDAEMONSET_GAUGES = (
    *(
        ObjectGauge(CDS_PREFIX + suffix, text, _status_field(field))
        for suffix, field, text in CDS_STATUS_GAUGES
    ),
    ObjectGauge(CDS_PREFIX + "metadata_generation", "The spec's generation.", _generation),
    ObjectGauge(CDS_PREFIX + "created", "Unix creation timestamp.", _created),
    ObjectGauge(
        CDS_PREFIX + "ineligible_nodes",
        "Nodes without a daemon pod because they are not eligible, by reason (status."
        "ineligibleNodes); kubeherd's own, with no kube-state-metrics counterpart.",
        _ineligible_by_reason,
        ("reason",),
    ),
    ObjectGauge(
        CDS_PREFIX + "canary",
        "1 for the phase the current template's canary is in (status.canary.phase: Running, "
        "Paused, Failed or Passed), 0 for the others; no series without a canary. kubeherd's "
        "own.",
        _canary_phase,
        ("phase",),
    ),
)


def leader_expected(body: Body) -> bool:
    """A Lease holder is expected: leader election on (the default) and a replica asked for."""
    spec = body.get("spec") or {}
    election = spec.get("leaderElection") or {}
    return bool(election.get("leaderElect", True)) and _number(spec.get("replicas", 1)) > 0


def _replicas(body: Body) -> Iterable[Sample]:
    return (((), _number((body.get("spec") or {}).get("replicas", 1))),)


def _leader(body: Body) -> Iterable[Sample]:
    if not leader_expected(body):
        return ()
    return (((), 1.0 if (body.get("status") or {}).get("leader") else 0.0),)


def _valid(body: Body) -> Iterable[Sample]:
    return (((), 1.0 if _condition_true(body, "Valid") else 0.0),)


SCHEDULERPROFILE_GAUGES = (
    ObjectGauge(SP_PREFIX + "spec_replicas", "Scheduler pods asked for.", _replicas),
    ObjectGauge(
        SP_PREFIX + "status_ready_replicas", "Ready scheduler pods.", _status_field("readyReplicas")
    ),
    ObjectGauge(
        SP_PREFIX + "leader",
        "1 while a scheduler pod holds the Lease, else 0; only where leader election is on "
        "and a replica is asked for.",
        _leader,
    ),
    ObjectGauge(
        SP_PREFIX + "valid",
        "1 while the Valid condition is True (the spec passed every check), else 0.",
        _valid,
    ),
)


@dataclass(frozen=True)
class ObjectCollector:
    """The gauges of one kind's objects, from the bodies `bodies` returns at each scrape, each
    labelled `namespace` and `kind_label` (its name)."""

    bodies: Callable[[], Iterable[Body]]
    gauges: tuple[ObjectGauge, ...]
    kind_label: str

    @cached_property
    def _namespace_first(self) -> bool:
        # Labels sorted by name, as prometheus_client writes them.
        return self.kind_label > "namespace"

    def identity(self, body: Body) -> str:
        """The object's label set, without braces."""
        metadata = body.get("metadata") or {}
        namespace = ("namespace", str(metadata.get("namespace") or ""))
        name = (self.kind_label, str(metadata.get("name") or ""))
        first, second = (namespace, name) if self._namespace_first else (name, namespace)
        return label_text((first[0], second[0]), (first[1], second[1]))


def customdaemonsets(bodies: Callable[[], Iterable[Body]]) -> ObjectCollector:
    return ObjectCollector(bodies, CUSTOMDAEMONSET_GAUGES, "customdaemonset")


def schedulerprofiles(bodies: Callable[[], Iterable[Body]]) -> ObjectCollector:
    return ObjectCollector(bodies, SCHEDULERPROFILE_GAUGES, "schedulerprofile")


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


class OperatorRegistry:
    """The health instruments and the collectors of one operator's run, and the per-object
    gauges. Everything is read on the event loop, where the controllers change their state:
    the small collectors at once, through prometheus_client; the objects' bodies listed at
    once (the controllers replace a body, never change one in place, so the list reads the
    same later) and written a slice of the loop's time at a time (metrics.exposition)."""

    def __init__(self, collectors: Iterable[Collector | ObjectCollector]) -> None:
        self._collected = CollectorRegistry(auto_describe=True)
        objects: list[ObjectCollector] = []
        for collector in (*INSTRUMENTS, *collectors):
            if isinstance(collector, ObjectCollector):
                objects.append(collector)
            else:
                self._collected.register(collector)
        self._objects = tuple(objects)

    async def page(
        self, encode: Encoder, *, openmetrics: bool, gzipped: bool, pacer: Pacer
    ) -> bytes:
        """The whole page in the format of `encode` (OpenMetrics, or Prometheus' text format),
        gzip-compressed if asked."""
        listed = [(objects, list(objects.bodies())) for objects in self._objects]
        writer = PageWriter(gzipped=gzipped)
        # OpenMetrics ends the page with a marker: the objects' gauges go before it.
        writer.write(encode(self._collected).removesuffix(OPENMETRICS_END))
        for objects, bodies in listed:
            identities = []
            for body in bodies:
                identities.append(objects.identity(body))
                if len(identities) % LINES_PER_PIECE == 0:
                    await pacer.pause_if_due()
            await write_object_gauges(
                writer, objects.gauges, identities, bodies, pacer, openmetrics=openmetrics
            )
        if openmetrics:
            writer.write(OPENMETRICS_END)
        return writer.body()


def operator_registry(*collectors: Collector | ObjectCollector) -> OperatorRegistry:
    """A registry of the health instruments and these collectors, for one operator's run."""
    return OperatorRegistry(collectors)
