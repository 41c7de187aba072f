"""The metrics: what Prometheus reads on /metrics, built from plain objects and from the
client's, runner's and event recorder's counts."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.events import EventBudget, EventRecorder
from kubeherd.kube.client import Kube
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.wire import request_verb
from kubeherd.metrics.exposition import Pacer
from kubeherd.metrics.health import (
    API_REQUESTS,
    API_RETRIES,
    EVENTS_DROPPED,
    PASS_DURATION,
)
from kubeherd.metrics.objects import (
    OperatorCollector,
    OperatorRegistry,
    customdaemonsets,
    operator_registry,
    schedulerprofiles,
)
from kubeherd.metrics.server import MetricsServer, parse_address
from kubeherd.runner import KeyedRunner, Marks
from tests.unit.test_throttling import Answer, Server

# Every interface, as an empty host means.
ALL = "0.0.0.0"  # noqa: S104

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(registry: OperatorRegistry) -> Samples:
    page = registry.page(generate_latest, openmetrics=False, gzipped=False, pacer=Pacer())
    text = asyncio.run(page).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def cds(name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "kube-system",
            "name": name,
            "generation": 3,
            "creationTimestamp": "2026-11-25T10:00:00Z",
        },
        "status": status,
    }


def labels(name: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"namespace": "kube-system", "customdaemonset": name, **more}.items()))


def test_a_customdaemonset_has_every_daemonset_gauge_of_kube_state_metrics() -> None:
    bodies = [
        cds(
            "agent",
            desiredNumberScheduled=5,
            currentNumberScheduled=4,
            numberMisscheduled=1,
            numberReady=3,
            numberAvailable=2,
            numberUnavailable=3,
            updatedNumberScheduled=4,
            observedGeneration=2,
            ineligibleNodes=[
                {"reason": "UntoleratedTaint", "detail": "a", "count": 2},
                {"reason": "UntoleratedTaint", "detail": "b", "count": 1},
                {"reason": "NodeSelectorMismatch", "count": 7},
            ],
        )
    ]
    registry = operator_registry(customdaemonsets(lambda: bodies))
    found = samples(registry)
    prefix = "kubeherd_customdaemonset_"
    expected = {
        "status_desired_number_scheduled": 5,
        "status_current_number_scheduled": 4,
        "status_number_misscheduled": 1,
        "status_number_ready": 3,
        "status_number_available": 2,
        "status_number_unavailable": 3,
        "status_updated_number_scheduled": 4,
        "status_observed_generation": 2,
        "metadata_generation": 3,
        "created": 1795600800,
    }
    for suffix, value in expected.items():
        assert found[(prefix + suffix, labels("agent"))] == value, suffix
    ineligible = prefix + "ineligible_nodes"
    assert found[(ineligible, labels("agent", reason="UntoleratedTaint"))] == 3
    assert found[(ineligible, labels("agent", reason="NodeSelectorMismatch"))] == 7
    assert found[(ineligible, labels("agent", reason="NodeAffinityMismatch"))] == 0


def test_a_status_not_written_yet_reads_zero_and_a_deleted_object_has_no_series() -> None:
    bodies = [cds("agent"), cds("gone", desiredNumberScheduled=2)]
    registry = operator_registry(customdaemonsets(lambda: bodies))
    desired = "kubeherd_customdaemonset_status_desired_number_scheduled"
    assert samples(registry)[(desired, labels("agent"))] == 0
    assert (desired, labels("gone")) in samples(registry)

    bodies.pop()

    assert not [key for key in samples(registry) if ("customdaemonset", "gone") in key[1]]


def test_the_current_templates_canary_has_one_series_per_phase() -> None:
    paused = {"revision": "agent-r2", "phase": "Paused"}
    bodies = [
        cds("agent", updateRevision="agent-r2", canary=paused),
        cds("older", updateRevision="older-r3", canary={"revision": "older-r2", "phase": "Failed"}),
        cds("none", updateRevision="none-r1"),
    ]
    registry = operator_registry(customdaemonsets(lambda: bodies))
    found = samples(registry)
    canary = "kubeherd_customdaemonset_canary"

    assert {
        labels_["phase"]: value
        for (name, key), value in found.items()
        if name == canary and (labels_ := dict(key))["customdaemonset"] == "agent"
    } == {"Running": 0, "Paused": 1, "Failed": 0, "Passed": 0}
    # A canary of an older template, or none: no series.
    assert not [
        key for name, key in found if name == canary and ("customdaemonset", "agent") not in key
    ]


def profile(name: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ops", "name": name}, "spec": spec, "status": status}


def test_a_schedulerprofile_has_its_replicas_leader_and_validity() -> None:
    valid = {"conditions": [{"type": "Valid", "status": "True"}]}
    bodies = [
        profile("led", {"replicas": 2}, {**valid, "readyReplicas": 2, "leader": "led-abc"}),
        profile("leaderless", {}, {**valid, "readyReplicas": 1}),
        profile("no-election", {"leaderElection": {"leaderElect": False}}, valid),
        profile("scaled-down", {"replicas": 0}, valid),
        profile("invalid", {}, {"conditions": [{"type": "Valid", "status": "False"}]}),
    ]
    registry = operator_registry(schedulerprofiles(lambda: bodies))
    found = samples(registry)

    def get(metric: str, name: str) -> float | None:
        key = (
            "kubeherd_schedulerprofile_" + metric,
            (("namespace", "ops"), ("schedulerprofile", name)),
        )
        return found.get(key)

    assert get("status_ready_replicas", "led") == 2
    assert get("spec_replicas", "led") == 2
    assert get("leader", "led") == 1
    assert get("leader", "leaderless") == 0
    # No Lease holder expected: no series, so no alert.
    assert get("leader", "no-election") is None
    assert get("leader", "scaled-down") is None
    assert get("valid", "led") == 1
    assert get("valid", "invalid") == 0


def test_the_operator_says_whether_it_works_and_what_waits() -> None:
    active = [True]
    collector = OperatorCollector(
        lambda: active[0], lambda: {"CustomDaemonSet": (2, 40), "SchedulerProfile": (0, 0)}
    )
    registry = operator_registry(collector)
    found = samples(registry)
    assert found[("kubeherd_active", ())] == 1
    assert found[("kubeherd_workqueue_depth", (("kind", "CustomDaemonSet"),))] == 2
    assert found[("kubeherd_dirty_nodes", (("kind", "CustomDaemonSet"),))] == 40

    active[0] = False

    assert samples(registry)[("kubeherd_active", ())] == 0


def test_the_verb_of_a_request_is_the_api_servers() -> None:
    assert request_verb("GET", "/api/v1/namespaces/a/pods") == "list"
    assert request_verb("GET", "/api/v1/nodes") == "list"
    assert request_verb("GET", "/api/v1/namespaces") == "list"
    assert request_verb("GET", "/api/v1/namespaces/a") == "get"
    assert request_verb("GET", "/api/v1/nodes/n1") == "get"
    assert request_verb("GET", "/apis/apps/v1/namespaces/a/deployments/d") == "get"
    assert request_verb("GET", "/apis/kubeherd.io/v1alpha1/customdaemonsets") == "list"
    assert request_verb("GET", "/api/v1/pods", [("watch", "true")]) == "watch"
    assert request_verb("POST", "/api/v1/namespaces/a/pods") == "create"
    assert request_verb("PUT", "/api/v1/namespaces/a/pods/p") == "update"
    assert request_verb("PATCH", "/apis/kubeherd.io/v1alpha1/namespaces/a/x/y/status") == "patch"
    assert request_verb("DELETE", "/api/v1/namespaces/a/pods/p") == "delete"
    assert request_verb("DELETE", "/api/v1/namespaces/a/pods") == "deletecollection"


def count(counter: Any, *label_values: str) -> float:
    return float(counter.labels(*label_values)._value.get())


def test_requests_are_counted_by_verb_and_code_and_throttled_retries_by_reason(
    monkeypatch: Any,
) -> None:
    async def no_sleep(seconds: float) -> None:
        pass

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    before = (
        count(API_REQUESTS, "create", "429"),
        count(API_REQUESTS, "create", "201"),
        count(API_RETRIES, "create", "throttled"),
    )
    kube = Kube(Server(Answer(429, "1"), Answer(201)), WriteLimits())

    asyncio.run(DaemonSetApi(kube).create_pod("default", {"metadata": {"name": "agent"}}))

    after = (
        count(API_REQUESTS, "create", "429"),
        count(API_REQUESTS, "create", "201"),
        count(API_RETRIES, "create", "throttled"),
    )
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 1]


def test_each_pass_is_timed_under_its_kind() -> None:
    def passes() -> float:
        return sum(
            sample.value
            for metric in PASS_DURATION.collect()
            for sample in metric.samples
            if sample.name.endswith("_count") and sample.labels["kind"] == "Test"
        )

    before = passes()

    async def scenario() -> None:
        async def run_pass(key: str, marks: Marks) -> None:
            await asyncio.sleep(0)

        runner: KeyedRunner[str] = KeyedRunner(run_pass, what="Test")
        runner.mark("a")
        runner.mark("b", nodes=("n1", "n2"))
        assert runner.waiting() == (2, 2)
        await asyncio.sleep(0.05)
        assert runner.waiting() == (0, 0)
        await runner.stop()

    asyncio.run(scenario())
    assert passes() - before == 2


def test_events_over_the_budget_are_counted_as_dropped() -> None:
    class Sink:
        def post_event_soon(self, involved: dict[str, Any], **_: Any) -> None:
            pass

    recorder = EventRecorder(Sink(), "Dropping", budget=EventBudget(burst=2), clock=lambda: 0.0)
    before = count(EVENTS_DROPPED, "Dropping")
    body = {"metadata": {"namespace": "a", "name": "b", "uid": "u"}}
    for _ in range(5):
        recorder.record(body, "Normal", "SuccessfulCreate", "Created pod")
    assert count(EVENTS_DROPPED, "Dropping") - before == 3


def test_the_endpoint_serves_the_registry_over_http() -> None:
    registry = operator_registry(customdaemonsets(lambda: [cds("agent", desiredNumberScheduled=1)]))

    async def scrape() -> str:
        server = MetricsServer(registry, "127.0.0.1:0")
        await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{server.port}/metrics"
                async with session.get(url) as response:
                    assert response.status == 200
                    assert response.content_type == "text/plain"
                    return await response.text()
        finally:
            await server.stop()

    text = asyncio.run(scrape())
    assert (
        'kubeherd_customdaemonset_status_desired_number_scheduled{customdaemonset="agent",'
        'namespace="kube-system"} 1.0' in text
    )
    assert "# TYPE kubeherd_api_requests_total counter" in text
    assert "# TYPE kubeherd_pass_duration_seconds histogram" in text


@pytest.mark.parametrize(
    ("address", "parsed"),
    [("127.0.0.1:8081", ("127.0.0.1", 8081)), ("[::1]:9", ("::1", 9)), (":8081", (ALL, 8081))],
)
def test_an_address_is_host_and_port(address: str, parsed: tuple[str, int]) -> None:
    assert parse_address(address) == parsed


@pytest.mark.parametrize("address", ["8081", "host:", "host:http", "host:70000"])
def test_an_address_without_a_port_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_address(address)
