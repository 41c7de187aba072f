"""What the SchedulerProfile tests create and look at, and kube-scheduler as a local process.

kwok runs no containers, so the scheduler Deployment's pods never schedule anything here. A test
runs the built kube-scheduler instead, exactly as a Deployment pod would: the configuration from
the ConfigMap the Deployment's template mounts, the identity of the ServiceAccount kubeherd made
(a token from the TokenRequest API), and the hostname of one of the Deployment's (kwok) pods, in
a UTS namespace of its own: kube-scheduler's Lease identity is `<hostname>_<uuid>`, which is how
kubeherd tells its own pods from another holder. Its RBAC and its leader election are therefore
the real ones.
"""

from __future__ import annotations

import copy
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubeherd.scheduler.core.config import CONFIG_KEY
from kubeherd.scheduler.core.owner import OWNER_UID_LABEL
from localcluster.cluster import LocalCluster
from localcluster.operator import free_port
from tests.helpers import eventually, service_account_kubeconfig

GROUP, VERSION, PLURAL = "kubeherd.io", "v1alpha1", "schedulerprofiles"


def scheduler_profile(name: str, *profiles: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SchedulerProfile",
        "metadata": {"name": name},
        "spec": {"profiles": list(profiles), **spec},
    }


def condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


class SchedulerProfiles:
    """A test's SchedulerProfiles in its namespace. Deleted at the end and waited for: the
    operator must remove what they made while it still runs."""

    def __init__(self, custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str) -> None:
        self.custom = custom
        self.core = core
        self.namespace = ns
        self.created: list[tuple[str, str]] = []

    def create(self, manifest: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        where = namespace or self.namespace
        body: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, where, PLURAL, copy.deepcopy(manifest)
        )
        self.created.append((where, manifest["metadata"]["name"]))
        return body

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace or self.namespace, PLURAL, name
        )
        return found

    def patch(self, name: str, patch: Any) -> None:
        """A merge patch (lists are replaced whole)."""
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, patch
        )

    def delete(self, name: str, namespace: str | None = None) -> None:
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace or self.namespace, PLURAL, name
        )

    def wait_until_gone(self, name: str, namespace: str | None = None) -> None:
        def gone() -> bool:
            try:
                self.get(name, namespace)
            except ApiException as error:
                return bool(error.status == 404)
            return False

        eventually(gone, timeout=60, what=f"SchedulerProfile {name} to be deleted")

    def wait_for(
        self,
        name: str,
        type_: str,
        status: str,
        reason: str | None = None,
        *,
        namespace: str | None = None,
        timeout: float = 60,
        **fields: Any,
    ) -> dict[str, Any]:
        """The resource once its `type_` condition has `status` (and `reason`) for the current
        generation, and its status has `fields`."""

        def matches() -> dict[str, Any] | None:
            body = self.get(name, namespace)
            found = condition(body, type_)
            current = found.get("observedGeneration") == body["metadata"]["generation"]
            status_now = body.get("status") or {}
            wanted = all(status_now.get(k) == v for k, v in fields.items())
            right_reason = reason is None or found.get("reason") == reason
            if current and found.get("status") == status and right_reason and wanted:
                return body
            return None

        what = f"{name} {type_}={status} {reason or ''} {fields}"
        return eventually(matches, timeout=timeout, what=what)

    def events(self, name: str, reason: str | None = None) -> list[Any]:
        selector = f"involvedObject.kind=SchedulerProfile,involvedObject.name={name}"
        events = self.core.list_namespaced_event(self.namespace, field_selector=selector).items
        return [e for e in events if reason is None or e.reason == reason]

    def wait_for_event(self, name: str, reason: str, containing: str = "") -> Any:
        def found() -> Any:
            return next(
                (e for e in self.events(name, reason) if containing in (e.message or "")), None
            )

        return eventually(found, timeout=60, what=f"a {reason} event of {name} ({containing})")

    def clean_up(self) -> None:
        for namespace, name in reversed(self.created):
            try:
                self.delete(name, namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
        for namespace, name in self.created:
            self.wait_until_gone(name, namespace)


def owned_versions(api_client: client.ApiClient, uid: str) -> dict[str, str]:
    """Every object of a kind kubeherd makes for a SchedulerProfile that carries its uid, with
    its resourceVersion."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    selector = f"{OWNER_UID_LABEL}={uid}"
    listings = {
        "ConfigMap": core.list_config_map_for_all_namespaces,
        "PodDisruptionBudget": client.PolicyV1Api(
            api_client
        ).list_pod_disruption_budget_for_all_namespaces,
        "NetworkPolicy": client.NetworkingV1Api(api_client).list_network_policy_for_all_namespaces,
        "ServiceAccount": core.list_service_account_for_all_namespaces,
        "Deployment": apps.list_deployment_for_all_namespaces,
        "Role": rbac.list_role_for_all_namespaces,
        "RoleBinding": rbac.list_role_binding_for_all_namespaces,
        "ClusterRoleBinding": rbac.list_cluster_role_binding,
    }
    return {
        f"{kind} {item.metadata.namespace or ''}/{item.metadata.name}": str(
            item.metadata.resource_version
        )
        for kind, listing in listings.items()
        for item in listing(label_selector=selector).items
    }


def owned_by_uid(api_client: client.ApiClient, uid: str) -> list[str]:
    return list(owned_versions(api_client, uid))


class LocalScheduler:
    """The built kube-scheduler, run with a SchedulerProfile's configuration and as its
    ServiceAccount, serving /readyz on a port of its own."""

    def __init__(
        self,
        binary: Path,
        cluster: LocalCluster,
        core: client.CoreV1Api,
        folder: Path,
        *,
        namespace: str,
        profile: str,
        pod: str,
    ) -> None:
        self.binary = binary
        self.pod = pod
        self.cluster = cluster
        self.core = core
        self.folder = folder
        self.namespace = namespace
        self.profile = profile
        self.port = free_port()
        self.log = folder / f"kube-scheduler-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def _configuration(self, kubeconfig: Path) -> Path:
        """The ConfigMap's configuration, with the kubeconfig file in place of the in-cluster
        service account."""
        apps = client.AppsV1Api(self.core.api_client)
        template = apps.read_namespaced_deployment(self.profile, self.namespace).spec.template
        (volume,) = (v for v in template.spec.volumes if v.config_map is not None)
        config_map = self.core.read_namespaced_config_map(volume.config_map.name, self.namespace)
        configuration = yaml.safe_load(config_map.data[CONFIG_KEY])
        assert configuration["clientConnection"] == {"kubeconfig": ""}
        configuration["clientConnection"]["kubeconfig"] = str(kubeconfig)
        path = self.folder / f"scheduler-{self.port}.yaml"
        path.write_text(yaml.safe_dump(configuration))
        return path

    def start(self, *, wait_until_ready: bool = True) -> LocalScheduler:
        self.folder.mkdir(parents=True, exist_ok=True)
        kubeconfig = service_account_kubeconfig(
            self.cluster, self.core, self.namespace, self.profile, self.folder
        )
        # The pod's hostname (its name), as the kubelet gives it: in a UTS namespace of its own.
        as_root = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        hostname = ["unshare", *as_root, "--uts", "sh", "-c", 'hostname "$0" && exec "$@"']
        command = [
            *hostname,
            self.pod,
            str(self.binary),
            f"--config={self._configuration(kubeconfig)}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
        ]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        if wait_until_ready:
            eventually(self.ready, timeout=60, what=f"kube-scheduler on {self.port} to be ready")
        return self

    def ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            pytest.fail(f"kube-scheduler exited; its log ends with:\n{self.log_text()[-3000:]}")
        context = ssl.create_default_context()
        # Its serving certificate is self-signed, made in memory at start, as in the pod.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            url = f"https://127.0.0.1:{self.port}/readyz"
            with urllib.request.urlopen(url, timeout=1, context=context) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def leads(self) -> bool:
        return "Successfully acquired lease" in self.log_text()

    def identity_prefix(self) -> str:
        """The start of its Lease holder identity."""
        return f"{self.pod}_"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """As a crashed pod: no chance to release the Lease."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_for_binding(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    """The node the pod was bound to."""

    def bound() -> str | None:
        node = core.read_namespaced_pod(pod, namespace).spec.node_name
        return str(node) if node else None

    return eventually(bound, timeout=60, what=f"pod {pod} to be bound")


def scheduled_by(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    """Who reported the pod's Scheduled event: kube-scheduler reports as the profile's
    schedulerName."""

    def reporter() -> str | None:
        selector = f"involvedObject.name={pod},reason=Scheduled"
        events = core.list_namespaced_event(namespace, field_selector=selector).items
        return next((str(e.reporting_component) for e in events if e.reporting_component), None)

    return eventually(reporter, timeout=30, what=f"the Scheduled event of {pod}")


def wait_briefly(seconds: float) -> None:
    """For asserting that something does *not* happen: there is no event to wait for."""
    time.sleep(seconds)


def scheduler_pods(core: client.CoreV1Api, namespace: str, profile: str) -> list[str]:
    """The names of a SchedulerProfile's scheduler pods (kwok's), oldest first."""
    selector = f"app.kubernetes.io/name=kube-scheduler,app.kubernetes.io/instance={profile}"
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    return [p.metadata.name for p in sorted(live, key=lambda p: p.metadata.creation_timestamp)]
