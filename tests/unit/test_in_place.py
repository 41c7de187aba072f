"""In-place updates as plain data: which templates may update a pod in place, the patch that
does it, how a pod reads while its kubelet restarts it, and the rolling update's choice between
updating and replacing within maxUnavailable."""

from __future__ import annotations

import json
from typing import Any

from kubeherd.daemonset.core.in_place import (
    IN_PLACE_ANNOTATION,
    compatible_revisions,
    in_place_key,
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

    operations = update_patch(pod_body, {"agent": "agent:2", "sidecar": "proxy:1"}, "r2")

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

    assert update_patch(pod_body, {"agent": "agent:2", "sidecar": "proxy:2"}, "r2") is None


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
