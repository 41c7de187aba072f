"""The benchmark harness's own logic: how it stops on a signal, when B4's idle window may
start, and which writes the audit log says a client made in it."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import local_cluster_settings, scheduler_client
from bench.idle import caught_up, describe, rollout_done, writes_between
from bench.stopping import Stopper, StopSignalError

KUBEHERD_USER = "system:serviceaccount:kubeherd-system:kubeherd"
WINDOW_START = datetime.datetime(2026, 11, 26, 22, 0, 0, tzinfo=datetime.UTC)
WINDOW_END = WINDOW_START + datetime.timedelta(seconds=60)


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_cancels_the_benchmark_and_its_clean_up_runs(
    stop_signal: signal.Signals,
) -> None:
    stopper = Stopper()
    stopper.install()
    cleaned_up = []

    async def benchmark() -> None:
        try:
            asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), stop_signal)
            await asyncio.sleep(30)
        finally:
            cleaned_up.append(True)

    try:
        with pytest.raises(StopSignalError, match=stop_signal.name):
            asyncio.run(stopper.run(benchmark()))
        assert cleaned_up == [True]
        assert stopper.exit_status == 128 + stop_signal
    finally:
        for restored in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(restored, signal.SIG_DFL)


def test_a_stop_signal_outside_the_loop_raises_and_one_during_clean_up_is_only_noted() -> None:
    stopper = Stopper()
    stopper.install()
    try:
        with pytest.raises(StopSignalError):
            signal.raise_signal(signal.SIGTERM)
        cleaning = Stopper()
        cleaning.install()
        cleaning.cleaning_up()
        signal.raise_signal(signal.SIGHUP)
        assert cleaning.received == signal.SIGHUP
    finally:
        for restored in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(restored, signal.SIG_DFL)


def _daemonset(generation: int, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "cost-1", "generation": generation}, "status": status}


def test_a_rollout_is_done_when_its_status_counts_every_node_up_to_date_and_available() -> None:
    done = {
        "observedGeneration": 2,
        "desiredNumberScheduled": 3,
        "updatedNumberScheduled": 3,
        "numberAvailable": 3,
    }
    assert rollout_done(_daemonset(2, **done), nodes=3)
    assert not rollout_done(_daemonset(3, **done), nodes=3)
    assert not rollout_done(_daemonset(2, **{**done, "numberAvailable": 2}), nodes=3)
    assert not rollout_done(_daemonset(2, **{**done, "updatedNumberScheduled": 2}), nodes=3)
    assert not rollout_done(_daemonset(2, **done), nodes=4)
    assert not rollout_done({"metadata": {"name": "new", "generation": 1}}, nodes=3)
    # Caught up, but a pod is not Ready: the status may be right, the pods will tell.
    assert caught_up(_daemonset(2, **{**done, "numberAvailable": 2}), nodes=3)
    assert not caught_up(_daemonset(3, **done), nodes=3)


def _audit_event(seconds: float, verb: str, resource: str, **extra: Any) -> str:
    received = WINDOW_START + datetime.timedelta(seconds=seconds)
    sent = extra.pop("sent", None)
    event: dict[str, Any] = {
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": extra.pop("user", KUBEHERD_USER)},
        "objectRef": {"resource": resource, "namespace": "bench", "name": "cost-1", **extra},
        "responseStatus": {"code": 200},
        "requestReceivedTimestamp": received.isoformat().replace("+00:00", "Z"),
    }
    if sent is not None:
        event["requestObject"] = {"status": sent}
    return json.dumps(event) + "\n"


def test_the_writes_in_a_window_are_the_clients_by_verb_and_resource(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver-audit.log"
    rotated = tmp_path / "kube-apiserver-audit-2026-11-26T21-59-00.000.log"
    rotated.write_text(_audit_event(1, "patch", "customdaemonsets", subresource="status"))
    log.write_text(
        _audit_event(-1, "patch", "customdaemonsets", subresource="status")
        + _audit_event(2, "patch", "customdaemonsets", subresource="status")
        + _audit_event(3, "create", "events")
        + _audit_event(4, "get", "customdaemonsets")
        + _audit_event(5, "create", "pods", user="admin")
        + _audit_event(61, "create", "events")
    )
    writes = writes_between(log, KUBEHERD_USER, WINDOW_START, WINDOW_END)
    assert [(w["verb"], w["resource"], w["subresource"], w["count"]) for w in writes] == [
        ("patch", "customdaemonsets", "status", 2),
        ("create", "events", "", 1),
    ]
    assert writes[0]["examples"] == ["bench/cost-1 at 1.0s", "bench/cost-1 at 2.0s"]
    assert describe(writes).startswith("2 patch customdaemonsets/status (200, e.g. bench/cost-1")
    assert describe([]) == "none"


def test_status_patches_say_which_fields_they_changed_since_the_objects_last_one(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kube-apiserver-audit.log"
    counts = {"numberReady": 3, "numberAvailable": 3, "observedGeneration": 1}

    def status_patch(seconds: float, **sent: Any) -> str:
        return _audit_event(seconds, "patch", "customdaemonsets", subresource="status", sent=sent)

    log.write_text(
        # Before the window: the last status sent is what the first patch in it is compared to.
        status_patch(-5, **counts)
        + status_patch(1, **{**counts, "numberReady": 2, "numberAvailable": 2})
        + status_patch(2, **{**counts, "numberReady": 2, "numberAvailable": 2})
        + status_patch(3, **{**counts, "numberReady": 3, "numberAvailable": 2})
    )
    [patches] = writes_between(log, KUBEHERD_USER, WINDOW_START, WINDOW_END)
    assert patches["count"] == 3
    assert patches["changed"] == {"numberReady": 2, "numberAvailable": 1, "(nothing)": 1}
    assert "fields changed: numberReady 2, numberAvailable 1, (nothing) 1" in describe([patches])


def test_the_scheduler_keeps_its_default_client_unless_given_a_rate() -> None:
    assert scheduler_client(None) is None
    assert scheduler_client(200) == (200, 400)
    default = local_cluster_settings(None, 0)
    assert (default["scheduler_qps"], default["scheduler_burst"]) == (50.0, 100)
    assert default["scheduler_client"] == "default"
    assert default["kwok_pod_workers"] == "default (4)"
    given = local_cluster_settings(300, 32)
    assert (given["scheduler_burst"], given["kwok_pod_workers"]) == (600, 32)
