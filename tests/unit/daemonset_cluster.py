"""An in-memory cluster for the CustomDaemonSet controller's scenario tests: it answers at the
`Kube` boundary as the API server would (objects, resourceVersions, AlreadyExists, programmable
refusals), records every write and event, and plays the watches back to the controller (the
node and pod sources, the CustomDaemonSet's own events), all on the virtual clock."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kubeherd.daemonset.controller import DaemonSetController
from kubeherd.daemonset.core.eligibility import NodeInfo
from kubeherd.daemonset.core.model import PodInfo
from kubeherd.daemonset.core.pods import OWNER_LABEL, target_node
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.daemonset.shell.state import Key
from kubeherd.kube.kinds import Kind
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.outcomes import DryRun, Outcome
from kubeherd.meta import iso_time
from tests.unit.virtual_time import wall_clock

REVISION_PAGE_SIZE = 2

NAMESPACE = "ops"


@dataclass(frozen=True)
class Write:
    verb: str
    kind: str
    name: str
    body: Any = None


@dataclass(frozen=True)
class PostedEvent:
    type: str
    reason: str
    message: str


def matches(labels: Mapping[str, str], selector: str) -> bool:
    """Label selectors as kubeherd writes them: `k=v`, `k`, `!k`, joined by commas."""
    for term in filter(None, selector.split(",")):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


class FakeCluster:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.revisions: dict[str, dict[str, Any]] = {}
        self.daemonset: dict[str, Any] = {}
        self.writes: list[Write] = []
        self.events: list[PostedEvent] = []
        self.dry_runs = 0
        # Revision LISTs read (each a page at a time), and the revisions read one by one.
        self.revision_pages_read = 0
        self.revisions_read: list[str] = []
        # What the controller reads of the client's limits; and, when set, how long a create
        # takes to be answered, with the most creates seen waiting for an answer at once.
        self.limits = WriteLimits(max_concurrent=4)
        self.create_latency = 0.0
        # How long each of the next creates takes instead, in the order they are sent.
        self.create_latencies: list[float] = []
        # When set, the namespace's quota of pods: a create answered once that many pods exist
        # is refused, as the API server's quota admission refuses it.
        self.pod_quota: int | None = None
        self.creates_in_flight = 0
        self.most_creates_in_flight = 0
        # Per verb: the outcomes its next calls get, in order, before it behaves normally.
        self.refusals: dict[str, list[Outcome]] = {}
        # Whether JSON patches of pods are applied (and watched), or only recorded.
        self.apply_pod_patches = False
        # Per pod uid: the image each container last started with (restart_changed_containers).
        self._running_images: dict[str, dict[str, str]] = {}
        self.controller: DaemonSetController | None = None
        self._versions = itertools.count(100)
        self._uids = itertools.count(1)

    # Setting up, and what the tests do to the cluster ------------------------------------

    def start(
        self,
        daemonset: dict[str, Any],
        ready: Callable[[], Awaitable[None]] | None = None,
        **options: Any,
    ) -> DaemonSetController:
        """The controller, with the CustomDaemonSet; its first pass awaits `ready` if given."""
        self.daemonset = copy.deepcopy(daemonset)
        self.daemonset["metadata"].setdefault("uid", "uid-cds")
        self.daemonset["metadata"].setdefault("generation", 1)
        self.daemonset["metadata"]["namespace"] = NAMESPACE
        self._bump(self.daemonset)
        self.controller = DaemonSetController(
            cast(DaemonSetApi, self), self, self, clock=wall_clock, **options
        )
        self.controller.daemonset_changed(copy.deepcopy(self.daemonset), ready)
        return self.controller

    def add_nodes(self, *names: str, **labels: str) -> None:
        for name in names:
            self.nodes[name] = NodeInfo(
                name=name, labels={"kubernetes.io/hostname": name, **labels}, taints=()
            )
            if self.controller is not None:
                self.controller.node_changed(name)

    def update_spec(self, **spec: Any) -> None:
        self.daemonset["spec"] = {**self.daemonset["spec"], **spec}
        self.daemonset["metadata"]["generation"] += 1
        self._bump(self.daemonset)
        self._watch_daemonset()

    def run_pods(self, ready: bool = True, nodes: Iterable[str] | None = None) -> None:
        """The scheduler binds and the kubelet runs the pending pods (of `nodes`, or all),
        Ready or not."""
        wanted = None if nodes is None else set(nodes)
        for pod in self.pods.values():
            if pod["status"].get("phase") == "Pending" and (
                wanted is None or target_node(pod) in wanted
            ):
                pod["spec"]["nodeName"] = target_node(pod)
                condition = {"type": "Ready", "status": "True" if ready else "False"}
                condition["lastTransitionTime"] = iso_time(wall_clock())
                pod["status"] = {"phase": "Running", "conditions": [condition]}
                self._watch_pod(pod)

    def kubelets_catch_up(self) -> None:
        """The kubelets carry out their pods' specs: a container whose image changed since it
        started restarts, and each container's resources are reported as the spec's (an
        in-place update and a resize make them do this)."""
        for pod in self.pods.values():
            ran = self._running_images.setdefault(pod["metadata"]["uid"], {})
            statuses = pod["status"].setdefault("containerStatuses", [])
            changed = False
            for container in pod["spec"]["containers"]:
                name, image = container["name"], container["image"]
                status = next((s for s in statuses if s["name"] == name), None)
                if status is None:
                    status = {"name": name, "restartCount": 0}
                    statuses.append(status)
                if ran.setdefault(name, image) != image:
                    ran[name] = image
                    status["restartCount"] += 1
                    status["state"] = {"running": {"startedAt": iso_time(wall_clock())}}
                    changed = True
                resources = copy.deepcopy(container.get("resources") or {})
                changed |= status.get("resources") != resources
                status["resources"] = resources
            if changed:
                self._bump(pod)
                self._watch_pod(pod)

    def delete_pod_now(self, name: str) -> None:
        pod = self.pods.pop(name)
        self._watch_pod(pod)

    def refuse(self, verb: str, *outcomes: Outcome) -> None:
        self.refusals.setdefault(verb, []).extend(outcomes)

    def pods_by_node(self) -> dict[str, list[dict[str, Any]]]:
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in self.pods.values():
            by_node.setdefault(str(target_node(pod)), []).append(pod)
        return by_node

    def images(self) -> dict[str, str]:
        return {
            node: pods[0]["spec"]["containers"][0]["image"]
            for node, pods in self.pods_by_node().items()
        }

    def status(self) -> dict[str, Any]:
        return dict(self.daemonset.get("status") or {})

    def condition(self, type_: str) -> dict[str, Any]:
        """The status condition of that type; empty when there is none."""
        conditions = self.status().get("conditions") or []
        return next((c for c in conditions if c["type"] == type_), {})

    def reasons(self) -> list[str]:
        return [event.reason for event in self.events]

    def messages(self, reason: str) -> list[str]:
        return [event.message for event in self.events if event.reason == reason]

    def verbs(self) -> list[str]:
        return [f"{write.verb} {write.kind}" for write in self.writes]

    # The sources the controller reads (the watches' stores) ------------------------------

    def get(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)

    def names(self) -> Iterable[str]:
        return list(self.nodes)

    def on_node(self, key: Key, node: str) -> tuple[PodInfo, ...]:
        return tuple(
            PodInfo.from_body(pod)
            for pod in self.pods.values()
            if target_node(pod) == node and pod["metadata"]["labels"].get(OWNER_LABEL) == key[1]
        )

    def nodes_with_pods(self, key: Key) -> set[str]:
        return {str(target_node(pod)) for pod in self.pods.values()}

    # The Kube boundary --------------------------------------------------------------------

    def _refused(self, verb: str) -> Outcome | None:
        queue = self.refusals.get(verb)
        return queue.pop(0) if queue else None

    async def dry_run_pod(self, namespace: str, pod: Mapping[str, Any]) -> DryRun:
        self.dry_runs += 1
        refused = self._refused("dry_run_pod")
        if refused is not None:
            return DryRun(refused.status, {"message": refused.message})
        quota = self._quota_refusal(pod)
        if quota is not None:
            # Quota admission judges a dry run as the create itself (checked, not charged).
            return DryRun(quota.status, {"message": quota.message})
        return DryRun(201, {"kind": "Pod"})

    def _quota_refusal(self, pod: Mapping[str, Any]) -> Outcome | None:
        if self.pod_quota is None or len(self.pods) < self.pod_quota:
            return None
        return Outcome(
            403,
            f'pods "{pod["metadata"]["name"]}" is forbidden: exceeded quota: pods, '
            f"requested: pods=1, used: pods={len(self.pods)}, limited: pods={self.pod_quota}",
        )

    async def create_pod(self, namespace: str, pod: dict[str, Any]) -> Outcome:
        self.writes.append(Write("create", "Pod", pod["metadata"]["name"], pod))
        latency = self.create_latencies.pop(0) if self.create_latencies else self.create_latency
        if latency:
            self.creates_in_flight += 1
            self.most_creates_in_flight = max(self.most_creates_in_flight, self.creates_in_flight)
            await asyncio.sleep(latency)
            self.creates_in_flight -= 1
        refused = self._refused("create_pod")
        if refused is not None:
            return refused
        quota = self._quota_refusal(pod)
        if quota is not None:
            return quota
        if pod["metadata"]["name"] in self.pods:
            return Outcome(409, "AlreadyExists")
        stored = copy.deepcopy(pod)
        stored["metadata"].update(
            uid=f"uid-{next(self._uids)}", creationTimestamp=iso_time(wall_clock())
        )
        stored["status"] = {"phase": "Pending"}
        self._bump(stored)
        self.pods[pod["metadata"]["name"]] = stored
        self._watch_pod(stored)
        return Outcome(201)

    async def delete_pod(self, namespace: str, name: str, uid: str) -> Outcome:
        self.writes.append(Write("delete", "Pod", name))
        pod = self.pods.get(name)
        if pod is None or pod["metadata"]["uid"] != uid:
            return Outcome(404, "NotFound")
        self.delete_pod_now(name)
        return Outcome(200)

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> Outcome:
        self.writes.append(Write("patch-status", "CustomDaemonSet", name, status))
        self.daemonset["status"] = {**(self.daemonset.get("status") or {}), **status}
        version = self._bump(self.daemonset)
        self._watch_daemonset()
        return Outcome(200, resource_version=version)

    async def list_controller_revisions(
        self, namespace: str, label_selector: str
    ) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(body)
            for body in self.revisions.values()
            if matches(body["metadata"].get("labels") or {}, label_selector)
        ]

    async def controller_revision_pages(
        self, namespace: str, label_selector: str
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Two revisions a page, as a LIST with a small limit pages them."""
        found = await self.list_controller_revisions(namespace, label_selector)
        self.revision_pages_read += 1
        for start in range(0, len(found), REVISION_PAGE_SIZE):
            yield found[start : start + REVISION_PAGE_SIZE]
        if not found:
            yield []

    async def get_controller_revision(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.revisions_read.append(name)
        return copy.deepcopy(self.revisions.get(name))

    async def create_controller_revision(self, namespace: str, body: dict[str, Any]) -> Outcome:
        name = body["metadata"]["name"]
        self.writes.append(Write("create", "ControllerRevision", name, body))
        refused = self._refused("create_controller_revision")
        if refused is not None:
            return refused
        if name in self.revisions:
            return Outcome(409, "AlreadyExists")
        stored = copy.deepcopy(body)
        stored["metadata"]["uid"] = f"uid-{next(self._uids)}"
        self.revisions[name] = stored
        return Outcome(201)

    async def patch_controller_revision(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> Outcome:
        self.writes.append(Write("patch", "ControllerRevision", name, patch))
        self.revisions[name].update(patch)
        return Outcome(200)

    async def delete_controller_revision(self, namespace: str, name: str, uid: str) -> Outcome:
        self.writes.append(Write("delete", "ControllerRevision", name))
        return Outcome(200) if self.revisions.pop(name, None) else Outcome(404, "NotFound")

    async def list_objects(
        self, kind: Kind, label_selector: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(pod)
            for pod in self.pods.values()
            if matches(pod["metadata"].get("labels") or {}, label_selector)
        ]

    async def get_object(self, kind: Kind, namespace: str | None, name: str) -> Any:
        return copy.deepcopy(self.pods.get(name))

    async def patch_object(
        self, kind: Kind, namespace: str | None, name: str, patch: Any, content_type: str = ""
    ) -> Outcome:
        self.writes.append(Write("patch", kind.kind, name, patch))
        pod = self.pods.get(name)
        if not self.apply_pod_patches or kind.kind != "Pod" or pod is None:
            return Outcome(200)
        for operation in patch:
            *parents, last = [
                part.replace("~1", "/").replace("~0", "~")
                for part in operation["path"].split("/")[1:]
            ]
            target: Any = pod
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target[part]
            key: Any = int(last) if isinstance(target, list) else last
            if operation["op"] == "test" and target.get(key) != operation["value"]:
                return Outcome(422, "testing value failed: test failed")
            if operation["op"] in ("add", "replace"):
                target[key] = copy.deepcopy(operation["value"])
        self._bump(pod)
        self._watch_pod(pod)
        return Outcome(200)

    async def resize_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> Outcome:
        self.writes.append(Write("resize", "Pod", name, patch))
        refused = self._refused("resize_pod")
        if refused is not None:
            return refused
        pod = self.pods.get(name)
        if pod is None:
            return Outcome(404, "NotFound")
        for change in patch["spec"]["containers"]:
            for container in pod["spec"]["containers"]:
                if container["name"] == change["name"]:
                    container["resources"] = copy.deepcopy(change["resources"])
        version = self._bump(pod)
        self._watch_pod(pod)
        return Outcome(200, resource_version=version)

    def post_event_soon(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str
    ) -> None:
        self.events.append(PostedEvent(type_, reason, message))

    # The watches ----------------------------------------------------------------------------

    def _bump(self, body: dict[str, Any]) -> str:
        version = str(next(self._versions))
        body["metadata"]["resourceVersion"] = version
        return version

    def _watch_pod(self, pod: Mapping[str, Any]) -> None:
        # Watch events come a moment after the write, as from the API server.
        owner = pod["metadata"]["labels"].get(OWNER_LABEL)
        node, name = target_node(pod), pod["metadata"]["name"]
        controller = self.controller
        if controller is not None:
            asyncio.get_running_loop().call_soon(
                controller.pod_changed, (NAMESPACE, owner), node, name
            )

    def _watch_daemonset(self) -> None:
        controller, body = self.controller, copy.deepcopy(self.daemonset)
        if controller is not None:
            asyncio.get_running_loop().call_soon(controller.daemonset_changed, body)
