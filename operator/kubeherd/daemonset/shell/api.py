"""The CustomDaemonSet controller's view of the API server: the requests only it makes (its
ControllerRevisions, its daemon pods, the dry-run of a template's pod) over the generic client,
and the generic ones it uses as they are. The controller and its shell talk to this, never to
`kube.client.Kube` itself; the scenario tests put their in-memory cluster in its place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from kubeherd.kube.client import Kube
from kubeherd.kube.kinds import KINDS, Kind
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.outcomes import DryRun, Outcome
from kubeherd.kube.wire import json_for_yaml

PODS = KINDS[("v1", "Pod")]
REVISIONS = KINDS[("apps/v1", "ControllerRevision")]
# Revisions per page of a listing: each holds a whole pod template, and at a restart every
# CustomDaemonSet lists its own at once.
REVISION_PAGE_SIZE = 10


class DaemonSetApi:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @property
    def limits(self) -> WriteLimits:
        return self.kube.limits

    # Daemon pods --------------------------------------------------------------------------

    async def dry_run_pod(self, namespace: str, pod: Mapping[str, Any]) -> DryRun:
        return await self.kube.dry_run_create(PODS, namespace, pod)

    async def create_pod(self, namespace: str, pod: dict[str, Any]) -> Outcome:
        return await self.kube.write("POST", PODS.path(namespace), body=pod)

    async def resize_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> Outcome:
        """A strategic-merge patch of the pod's `resize` subresource: its containers' CPU and
        memory, which the kubelet then applies to the running containers."""
        return await self.kube.write(
            "PATCH",
            PODS.path(namespace, name) + "/resize",
            body=patch,
            content_type="application/strategic-merge-patch+json",
            with_version=True,
        )

    async def delete_pod(self, namespace: str, name: str, uid: str) -> Outcome:
        # The uid precondition makes a late or repeated delete harmless: it can never remove
        # a newer pod that took the same name.
        body = {"preconditions": {"uid": uid}}
        return await self.kube.write("DELETE", PODS.path(namespace, name), body=body)

    # ControllerRevisions ------------------------------------------------------------------

    async def list_controller_revisions(
        self, namespace: str, label_selector: str
    ) -> list[dict[str, Any]]:
        return await self.kube.list_objects(REVISIONS, label_selector, namespace)

    def controller_revision_pages(
        self, namespace: str, label_selector: str
    ) -> AsyncIterator[list[dict[str, Any]]]:
        return self.kube.list_pages(REVISIONS, label_selector, namespace, REVISION_PAGE_SIZE)

    async def get_controller_revision(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.kube.get_object(REVISIONS, namespace, name)

    async def create_controller_revision(self, namespace: str, body: dict[str, Any]) -> Outcome:
        """Create a revision whose `data` the API server stores in its own canonical form.

        A revision's data is immutable and kept as the bytes received; any later patch (a
        label, a new revision number) has the API server re-encode it compactly with sorted
        keys, which it refuses as a change unless the stored bytes are that form already. Sent
        as YAML (JSON is YAML), the body is converted by the API server itself, so the stored
        bytes are exactly what its re-encoding gives."""
        return await self.kube.write(
            "POST",
            REVISIONS.path(namespace),
            body=json_for_yaml(body),
            content_type="application/yaml",
        )

    async def patch_controller_revision(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> Outcome:
        return await self.kube.patch_object(
            REVISIONS, namespace, name, patch, content_type="application/merge-patch+json"
        )

    async def delete_controller_revision(self, namespace: str, name: str, uid: str) -> Outcome:
        body = {"preconditions": {"uid": uid}} if uid else None
        return await self.kube.write("DELETE", REVISIONS.path(namespace, name), body=body)

    # The generic requests the controller makes ----------------------------------------------

    async def list_objects(
        self, kind: Kind, label_selector: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        return await self.kube.list_objects(kind, label_selector, namespace)

    async def get_object(self, kind: Kind, namespace: str | None, name: str) -> Any:
        return await self.kube.get_object(kind, namespace, name)

    async def patch_object(
        self, kind: Kind, namespace: str | None, name: str, patch: Any
    ) -> Outcome:
        return await self.kube.patch_object(kind, namespace, name, patch)

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> Outcome:
        return await self.kube.patch_status(plural, namespace, name, status)

    def post_event_soon(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str
    ) -> None:
        self.kube.post_event_soon(involved, type_=type_, reason=reason, message=message)
