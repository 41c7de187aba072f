"""In-place updates as plain data: which templates may update a pod in place, the patch that
does it, how a pod reads while its kubelet restarts it, and the rolling update's choice between
updating and replacing within maxUnavailable."""

from __future__ import annotations

import json
from typing import Any

from kubeherd.daemonset.core.in_place import (
    IN_PLACE_ANNOTATION,
    Target,
    compatible_revisions,
    in_place_key,
    qos_class,
    quantity,
    resize_patch,
    update_patch,
    update_status,
)
from kubeherd.daemonset.core.model import PodInfo
from kubeherd.daemonset.core.pods import REVISION_LABEL
from kubeherd.daemonset.core.rollout import plan_rolling_update
from tests.unit.test_planning import NOW, node, pod, record_for

STARTED = "2026-11-26T10:00:00Z"


def template(image: str = "agent:1", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "agent", **labels}},
        "spec": {
            "containers": [
                {"name": "agent", "image": image, "args": ["--verbose"]},
                {"name": "sidecar", "image": "proxy:1"},
            ]
        },
    }


def test_templates_that_differ_in_images_only_share_an_in_place_key() -> None:
    assert in_place_key(template("agent:1")) == in_place_key(template("agent:2"))
    assert in_place_key(template("agent:1")) != in_place_key(template("agent:1", tier="a"))
    changed_args = template("agent:2")
    changed_args["spec"]["containers"][0]["args"] = ["--quiet"]
    assert in_place_key(template("agent:1")) != in_place_key(changed_args)


def sized(cpu: str | None, memory: str | None = "64Mi", limits: bool = False) -> dict[str, Any]:
    shaped = template()
    values = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources = {"requests": values, **({"limits": values} if limits else {})}
    shaped["spec"]["containers"][0]["resources"] = resources
    return shaped


def guaranteed(cpu: str) -> dict[str, Any]:
    """Limits on every container, requests equal (by default) to them."""
    shaped = sized(cpu, "64Mi", limits=True)
    shaped["spec"]["containers"][1]["resources"] = {"limits": {"cpu": "1000m", "memory": "1Mi"}}
    return shaped


def test_new_cpu_and_memory_of_the_same_qos_class_keep_the_in_place_key() -> None:
    assert in_place_key(sized("100m")) == in_place_key(sized("250m", "128Mi"))
    # BestEffort to Burstable, Burstable to Guaranteed: a running pod cannot change its class.
    assert in_place_key(template()) != in_place_key(sized("100m"))
    assert in_place_key(sized("100m")) != in_place_key(guaranteed("100m"))
    assert in_place_key(guaranteed("100m")) == in_place_key(guaranteed("200m"))
    ephemeral = sized("100m")
    ephemeral["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "1Gi"
    assert in_place_key(sized("100m")) != in_place_key(ephemeral)


def test_quantities_and_qos_classes_read_as_kubernetes_reads_them() -> None:
    assert quantity("100m") == quantity("0.1") == quantity("1e-1")
    assert quantity("64Mi") == 64 * 1024**2
    assert quantity("2k") == 2000
    assert quantity("ten") is None
    assert qos_class(template()["spec"]) == "BestEffort"
    assert qos_class(sized("100m")["spec"]) == "Burstable"
    assert qos_class(guaranteed("1")["spec"]) == "Guaranteed"
    assert qos_class(sized("1", "64Mi", limits=True)["spec"]) == "Burstable"  # the sidecar


def test_the_resize_sends_only_the_containers_whose_cpu_or_memory_change() -> None:
    pod_body = live_pod({"agent": "agent:1", "sidecar": "proxy:1"}, {})
    pod_body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "0.1"}}
    unchanged = Target.of(sized("100m", None))
    grown = Target.of(sized("250m", None))

    assert resize_patch(pod_body, unchanged) is None
    assert resize_patch(pod_body, grown) == {
        "spec": {"containers": [{"name": "agent", "resources": {"requests": {"cpu": "250m"}}}]}
    }


def test_a_resized_pod_is_not_ready_until_its_kubelet_reports_the_new_resources() -> None:
    body = updated_pod(restarts=4)
    record = {"revision": "r2", "restartCounts": {}, "resized": ["agent"]}
    body["metadata"]["annotations"][IN_PLACE_ANNOTATION] = json.dumps(record)
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "250m"}}
    body["status"]["containerStatuses"][0]["resources"] = {"requests": {"cpu": "100m"}}

    assert not PodInfo.from_body(body).ready
    body["status"]["containerStatuses"][0]["resources"] = {"requests": {"cpu": "0.25"}}
    assert PodInfo.from_body(body).ready
    body["status"]["conditions"].append({"type": "PodResizeInProgress", "status": "True"})
    assert not PodInfo.from_body(body).ready


def test_the_revisions_a_template_can_update_in_place_are_those_of_its_key() -> None:
    key = in_place_key(template("agent:2"))
    kept = [("r1", in_place_key(template("agent:1"))), ("r0", in_place_key(template(tier="a")))]

    assert compatible_revisions(kept, key) == frozenset({"r1"})


def live_pod(images: dict[str, str], restarts: dict[str, int], **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "agent-x",
            "uid": "uid-x",
            "resourceVersion": "41",
            "labels": {REVISION_LABEL: "r1"},
            **metadata,
        },
        "spec": {"containers": [{"name": n, "image": i} for n, i in images.items()]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-26T09:00:00Z"}
            ],
            "containerStatuses": [
                {"name": n, "restartCount": c, "state": {"running": {"startedAt": STARTED}}}
                for n, c in restarts.items()
            ],
        },
    }


def test_the_patch_changes_only_the_changed_images_and_records_their_restart_counts() -> None:
    pod_body = live_pod({"agent": "agent:1", "sidecar": "proxy:1"}, {"agent": 3, "sidecar": 0})

    target = Target({"agent": "agent:2", "sidecar": "proxy:1"}, {})
    operations = update_patch(pod_body, target, "r2")

    assert operations is not None
    assert operations[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    assert {"op": "replace", "path": "/spec/containers/0/image", "value": "agent:2"} in operations
    assert not any(op["path"].startswith("/spec/containers/1") for op in operations)
    assert {"op": "add", "path": "/metadata/annotations", "value": {}} in operations
    label = next(op for op in operations if op["path"].startswith("/metadata/labels/"))
    assert label["path"] == "/metadata/labels/controller-revision-hash"
    assert (label["op"], label["value"]) == ("add", "r2")
    record = next(op for op in operations if op["path"].endswith("in-place-update"))
    assert record["path"] == "/metadata/annotations/kubeherd.io~1in-place-update"
    assert json.loads(record["value"]) == {"revision": "r2", "restartCounts": {"agent": 3}}


def test_a_pod_without_a_container_of_the_template_cannot_be_updated_in_place() -> None:
    pod_body = live_pod({"agent": "agent:1"}, {"agent": 0})

    target = Target({"agent": "agent:2", "sidecar": "proxy:2"}, {})
    assert update_patch(pod_body, target, "r2") is None


def updated_pod(restarts: int) -> dict[str, Any]:
    record = json.dumps({"revision": "r2", "restartCounts": {"agent": 3}})
    body = live_pod({"agent": "agent:2"}, {"agent": restarts}, annotations={})
    body["metadata"]["labels"][REVISION_LABEL] = "r2"
    body["metadata"]["annotations"][IN_PLACE_ANNOTATION] = record
    return body


def test_an_updated_pod_is_not_ready_until_its_kubelet_restarted_the_container() -> None:
    waiting = PodInfo.from_body(updated_pod(restarts=3))
    restarted = PodInfo.from_body(updated_pod(restarts=4))

    assert (waiting.revision, waiting.ready) == ("r2", False)
    assert restarted.ready
    # Ready counts from the restart, not from the condition that stayed True across it.
    status = update_status(updated_pod(restarts=4))
    assert status is not None
    assert restarted.ready_since == status.started_at


def test_an_update_record_of_another_revision_is_ignored() -> None:
    body = updated_pod(restarts=3)
    body["metadata"]["labels"][REVISION_LABEL] = "r3"

    assert update_status(body) is None
    assert PodInfo.from_body(body).ready


def test_the_rolling_update_updates_in_place_within_max_unavailable() -> None:
    ledger = {
        name: record_for(node(name), [pod(f"p{name}", name, revision="r1")])
        for name in ("a", "b", "c")
    }
    ledger["d"] = record_for(node("d"), [pod("pd", "d", revision="r0")])

    step = plan_rolling_update(
        ledger, "r2", {"maxUnavailable": 2}, 0, NOW, set(), in_place_from=frozenset({"r1", "r2"})
    )

    # r1 pods are updated in place, r0's (another shape) is replaced: two in all, the budget.
    assert [(u.node, u.pod.name) for u in step.updates] == [("a", "pa"), ("b", "pb")]
    assert step.deletes == []
    step = plan_rolling_update(
        ledger, "r2", {"maxUnavailable": 4}, 0, NOW, set(), in_place_from=frozenset({"r1"})
    )
    assert [u.node for u in step.updates] == ["a", "b", "c"]
    assert [d.node for d in step.deletes] == ["d"]


def test_an_update_in_flight_spends_the_budget_until_the_watch_shows_it() -> None:
    ledger = {
        name: record_for(node(name), [pod(f"p{name}", name, revision="r1")]) for name in ("a", "b")
    }

    step = plan_rolling_update(
        ledger, "r2", {"maxUnavailable": 1}, 0, NOW, {"uid-pa"}, in_place_from=frozenset({"r1"})
    )

    assert step.updates == []
    assert step.deletes == []
