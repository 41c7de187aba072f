"""The operator's one connection to the API server, against the real thing: TLS with client
certificates, an SNI name, insecure-skip-tls-verify, a CONNECT proxy the test can watch, exec
plugins and impersonation. What the tests look at is what a user sees (a CustomDaemonSet rolled
out or not) and what the API server's audit log recorded about who asked, from where and how.

Every test runs `kubeherd run --kubeconfig F --context C` as its own process, cluster-wide, with
the session's operator stopped for the module."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import pytest
from kubernetes import client

from localcluster.cluster import LocalCluster
from localcluster.pki import issue_client_certificate
from tests.conftest import RELEASE, on_kind
from tests.helpers import REPO, Operator, OperatorProcess, eventually
from tests.integration.daemonsets import WORKERS, DaemonSets, agent

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds_installed")]

# A proxied request reaches the API server from this address, so its audit log tells proxied
# requests from direct ones: the proxy sees only CONNECT lines, the rest is TLS.
PROXY_SOURCE_ADDRESS = "127.0.0.3"
# An address of this machine that the serving certificate does not name.
ADDRESS_NOT_IN_CERTIFICATE = "127.0.0.2"
# Named by the serving certificate (hack/localcluster/pki.py).
NAME_IN_CERTIFICATE = "kubernetes.default.svc"
PROXY_VARIABLES = {"http_proxy", "https_proxy", "no_proxy", "all_proxy"}
# The stated lifetime of the expiring exec credential: short, so that renewals show within the
# test; the token behind it is revoked when that lifetime ends.
EXEC_LIFETIME = 10.0
WRITES = {"create", "update", "patch", "delete"}


# Loopback servers --------------------------------------------------------------------------


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class LoopbackServers:
    """An event loop in a thread of its own, serving the test's proxy and forwarder."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._servers: list[asyncio.Server] = []

    def serve(self, handler: Handler, host: str) -> int:
        """Serve `handler` on a free port of `host`; the port."""
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(handler, host, 0), self.loop
        )
        server = started.result(timeout=10)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def close(self) -> None:
        async def shut_down() -> None:
            for server in self._servers:
                server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shut_down(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


@dataclass
class ConnectProxy:
    """An HTTP CONNECT proxy on loopback that records every target it is asked for; it
    tunnels from PROXY_SOURCE_ADDRESS, or with `refuse`, answers 403 to everything."""

    servers: LoopbackServers
    refuse: bool = False
    targets: list[str] = field(default_factory=list)
    port: int = 0

    def start(self) -> ConnectProxy:
        self.port = self.servers.serve(self._handle, "127.0.0.1")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        method, target, _ = head.split(b"\r\n", 1)[0].decode(errors="replace").split(" ", 2)
        self.targets.append(f"{method} {target}")
        if self.refuse or method != "CONNECT":
            writer.write(
                b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            await writer.drain()
            writer.close()
            return
        host, port = target.rsplit(":", 1)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                host.strip("[]"), int(port), local_addr=(PROXY_SOURCE_ADDRESS, 0)
            )
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


def forward(servers: LoopbackServers, host: str, to_port: int) -> int:
    """Forward TCP from a free port of `host` to the API server: a way to reach it at an
    address its certificate does not name."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", to_port)
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    return servers.serve(handle, host)


@pytest.fixture(scope="module")
def servers() -> Iterator[LoopbackServers]:
    running = LoopbackServers()
    yield running
    running.close()


# The audit log -----------------------------------------------------------------------------


class Audit:
    """The API server's audit log from a point on: what a test's operator asked."""

    def __init__(self, cluster: LocalCluster, *, from_the_start: bool = False) -> None:
        self.path = cluster.audit_log
        if not self.path.exists():
            pytest.fail(f"the local cluster writes no audit log at {self.path}")
        self.start = 0 if from_the_start else self.path.stat().st_size

    def events(self, username: str) -> list[dict[str, Any]]:
        """The requests authenticated as `username` since this object was made, each in its
        last stage so far: a watch that is still open has only started."""
        with self.path.open("rb") as log:
            log.seek(self.start)
            lines = log.read().decode(errors="replace").splitlines()
        found: dict[str, dict[str, Any]] = {}
        for line in lines:
            if not line.endswith("}"):
                continue  # being written
            event = json.loads(line)
            if event["user"].get("username") == username:
                found[event["auditID"]] = event
        return list(found.values())


def resource_of(event: dict[str, Any]) -> str:
    return str((event.get("objectRef") or {}).get("resource", ""))


def watches(events: list[dict[str, Any]]) -> set[str]:
    return {resource_of(e) for e in events if e["verb"] == "watch"}


def streaming_listings(events: list[dict[str, Any]]) -> dict[str, set[int]]:
    """Per resource, the status codes the API server answered its streaming listings with
    (watches that start with every object: `sendInitialEvents`)."""
    found: dict[str, set[int]] = {}
    for event in events:
        if event["verb"] == "watch" and "sendInitialEvents=true" in event["requestURI"]:
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            found.setdefault(resource_of(event), set()).add(code)
    return found


def source(event: dict[str, Any]) -> str:
    return str(event["sourceIPs"][0])


# Identities and the kubeconfig -------------------------------------------------------------


@dataclass(frozen=True)
class Identities:
    operator_user: str
    impersonator: str
    impersonated_user: str
    impersonated_group: str
    exec_account: str
    exec_namespace: str
    kubeconfig: Path
    folder: Path

    @property
    def exec_username(self) -> str:
        return f"system:serviceaccount:{self.exec_namespace}:{self.exec_account}"


EXEC_PLUGIN = """\
import datetime, fcntl, json, sys, time
from pathlib import Path

folder, lifetime = Path(sys.argv[1]), float(sys.argv[2])
with (folder / "calls.log").open("a+") as calls:
    fcntl.flock(calls, fcntl.LOCK_EX)
    calls.seek(0)
    index = len(calls.read().splitlines())
    expiry = time.time() + lifetime
    calls.write(f"{index} {expiry}\\n")
tokens = json.loads((folder / "tokens.json").read_text())
stamp = datetime.datetime.fromtimestamp(expiry, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
status = {"token": tokens[min(index, len(tokens) - 1)], "expirationTimestamp": stamp}
credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
print(json.dumps({**credential, "status": status}))
"""

FAILING_PLUGIN = """\
import sys

print("the session has expired: run `cloud login` again", file=sys.stderr)
sys.exit(1)
"""


def exec_user(script: Path, *arguments: str) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script), *arguments],
            "interactiveMode": "Never",
        }
    }


def write_kubeconfig(
    path: Path,
    clusters: dict[str, dict[str, Any]],
    users: dict[str, dict[str, Any]],
    contexts: dict[str, dict[str, str]],
    current: str,
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": body} for name, body in clusters.items()],
        "users": [{"name": name, "user": body} for name, body in users.items()],
        "contexts": [{"name": name, "context": body} for name, body in contexts.items()],
        "current-context": current,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


def certificate_user(cluster: LocalCluster, folder: Path, name: str) -> dict[str, str]:
    certificate, key = issue_client_certificate(cluster.pki, folder / name, name, None)
    return {"client-certificate": str(certificate), "client-key": str(key)}


@pytest.fixture(scope="module")
def identities(
    local_cluster: LocalCluster,
    api_client: client.ApiClient,
    core_v1: client.CoreV1Api,
    servers: LoopbackServers,
) -> Iterator[Identities]:
    """Users of the tests' own, with the chart's ClusterRole (so audit events are theirs alone),
    and one kubeconfig with a context per way of reaching the API server."""
    suffix = secrets.token_hex(3)
    folder = local_cluster.logs / f"transport-{suffix}"
    folder.mkdir(parents=True)
    rbac = client.RbacAuthorizationV1Api(api_client)
    ids = Identities(
        operator_user=f"transport-operator-{suffix}",
        impersonator=f"transport-impersonator-{suffix}",
        impersonated_user=f"transport-impersonated-{suffix}",
        impersonated_group=f"transport-operators-{suffix}",
        exec_account="exec-operator",
        exec_namespace=f"transport-{suffix}",
        kubeconfig=folder / "kubeconfig",
        folder=folder,
    )
    core_v1.create_namespace({"metadata": {"name": ids.exec_namespace}})
    core_v1.create_namespaced_service_account(
        ids.exec_namespace, {"metadata": {"name": ids.exec_account}}
    )
    # The impersonated user's rights come from its group only: a dropped `as-groups` fails.
    operator_binding = f"transport-operator-{suffix}"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": operator_binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": RELEASE,
            },
            "subjects": [
                {"kind": "User", "name": ids.operator_user},
                {"kind": "Group", "name": ids.impersonated_group},
                {
                    "kind": "ServiceAccount",
                    "name": ids.exec_account,
                    "namespace": ids.exec_namespace,
                },
            ],
        }
    )
    # The impersonator may impersonate and nothing else: a dropped `as` is refused.
    impersonate = f"transport-impersonate-{suffix}"
    rbac.create_cluster_role(
        {
            "metadata": {"name": impersonate},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["users"],
                    "verbs": ["impersonate"],
                    "resourceNames": [ids.impersonated_user],
                },
                {
                    "apiGroups": [""],
                    "resources": ["groups"],
                    "verbs": ["impersonate"],
                    "resourceNames": [ids.impersonated_group],
                },
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": impersonate},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": impersonate,
            },
            "subjects": [{"kind": "User", "name": ids.impersonator}],
        }
    )

    ports = local_cluster.ports()
    assert ports is not None
    server = f"https://127.0.0.1:{ports.apiserver}"
    ca = str(local_cluster.pki.ca_cert)
    sni_port = forward(servers, ADDRESS_NOT_IN_CERTIFICATE, ports.apiserver)
    (folder / "exec.py").write_text(EXEC_PLUGIN)
    (folder / "failing.py").write_text(FAILING_PLUGIN)
    write_kubeconfig(
        ids.kubeconfig,
        clusters={
            "verified": {"server": server, "certificate-authority": ca},
            "sni": {
                "server": f"https://{ADDRESS_NOT_IN_CERTIFICATE}:{sni_port}",
                "certificate-authority": ca,
                "tls-server-name": NAME_IN_CERTIFICATE,
            },
            "insecure": {"server": server, "insecure-skip-tls-verify": True},
        },
        users={
            "operator": certificate_user(local_cluster, folder, ids.operator_user),
            "impersonator": {
                **certificate_user(local_cluster, folder, ids.impersonator),
                "as": ids.impersonated_user,
                "as-groups": [ids.impersonated_group],
            },
            "exec-expiring": exec_user(folder / "exec.py", str(folder), str(EXEC_LIFETIME)),
            "exec-failing": exec_user(folder / "failing.py"),
        },
        contexts={
            "verified": {"cluster": "verified", "user": "operator"},
            "sni": {"cluster": "sni", "user": "operator"},
            "insecure": {"cluster": "insecure", "user": "operator"},
            "impersonating": {"cluster": "verified", "user": "impersonator"},
            "exec-expiring": {"cluster": "verified", "user": "exec-expiring"},
            "exec-failing": {"cluster": "verified", "user": "exec-failing"},
        },
        # Not one the tests use: each names its context.
        current="exec-failing",
    )
    yield ids
    for binding in (operator_binding, impersonate):
        rbac.delete_cluster_role_binding(binding)
    rbac.delete_cluster_role(impersonate)
    core_v1.delete_namespace(ids.exec_namespace)


# The operator ------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def only_the_tests_operators(request: pytest.FixtureRequest) -> Iterator[None]:
    """The session's operator would roll out the tests' CustomDaemonSets too."""
    if on_kind(request.config):
        pytest.skip("needs the local cluster's CA and audit log")
    session: Operator = request.getfixturevalue("operator")
    session.stop()
    yield
    session.start()


class ContextOperator(OperatorProcess):
    """`kubeherd run --kubeconfig F --context C`, with the proxy variables of the test only."""

    def __init__(
        self,
        cluster: LocalCluster,
        identities: Identities,
        context: str,
        environment: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            cluster,
            name=f"{identities.folder.name}-{context}",
            arguments=(f"--kubeconfig={identities.kubeconfig}", f"--context={context}"),
            kubeconfig=identities.kubeconfig,
        )
        self.extra_environment = environment or {}

    def environment(self) -> dict[str, str]:
        inherited = super().environment()
        unproxied = {k: v for k, v in inherited.items() if k.lower() not in PROXY_VARIABLES}
        return {**unproxied, **self.extra_environment}

    def readiness(self) -> int:
        """The status of /readyz on the health port; 0 when nothing answers."""
        try:
            url = f"http://127.0.0.1:{self.port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            return 0


@pytest.fixture
def run_operator(
    local_cluster: LocalCluster, identities: Identities
) -> Iterator[Callable[..., ContextOperator]]:
    started: list[ContextOperator] = []

    def start(
        context: str, environment: dict[str, str] | None = None, *, wait: bool = True
    ) -> ContextOperator:
        process = ContextOperator(local_cluster, identities, context, environment)
        started.append(process)
        if wait:
            process.start()
        else:
            process.spawn()
        return process

    yield start
    for process in started:
        with contextlib.suppress(TimeoutError):
            process.stop()


def rolled_out(daemonsets: DaemonSets) -> list[Any]:
    name = daemonsets.create(agent())
    return daemonsets.wait_for_nodes(name, WORKERS, timeout=60)


def assert_kopf_and_kubeherd_watched(events: list[dict[str, Any]]) -> None:
    """Kopf watches the custom resources, kubeherd's reflectors the nodes and pods."""
    assert {"customdaemonsets", "nodes", "pods"} <= watches(events), watches(events)


# TLS ---------------------------------------------------------------------------------------


def test_client_certificate_rollout_is_written_by_kubeherd(
    run_operator: Callable[..., ContextOperator],
    local_cluster: LocalCluster,
    identities: Identities,
    daemonsets: DaemonSets,
) -> None:
    audit = Audit(local_cluster)
    run_operator("verified")

    pods = rolled_out(daemonsets)

    # The status is kwok's, which stands in for the kubelet.
    managers = {
        entry.manager
        for pod in pods
        for entry in pod.metadata.managed_fields or []
        if entry.subresource != "status"
    }
    assert managers == {"kubeherd"}
    events = audit.events(identities.operator_user)
    assert_kopf_and_kubeherd_watched(events)
    # Nodes and daemon pods are listed by watches that start with every object.
    assert streaming_listings(events) == {"nodes": {200}, "pods": {200}}
    assert not [e for e in events if e["verb"] == "list" and resource_of(e) == "nodes"]
    agents = {e["userAgent"] for e in events}
    assert not [agent for agent in agents if "Python" in agent], agents
    pod_creates = [e for e in events if e["verb"] == "create" and resource_of(e) == "pods"]
    assert len(pod_creates) >= len(WORKERS)
    assert all(e["userAgent"].startswith("kubeherd/") for e in pod_creates), pod_creates


def test_sni_name_verifies_a_server_reached_at_another_address(
    run_operator: Callable[..., ContextOperator],
    local_cluster: LocalCluster,
    identities: Identities,
    daemonsets: DaemonSets,
) -> None:
    audit = Audit(local_cluster)
    run_operator("sni")

    rolled_out(daemonsets)

    assert_kopf_and_kubeherd_watched(audit.events(identities.operator_user))


def test_insecure_skip_tls_verify_still_sends_the_client_certificate(
    run_operator: Callable[..., ContextOperator],
    local_cluster: LocalCluster,
    identities: Identities,
    daemonsets: DaemonSets,
) -> None:
    audit = Audit(local_cluster)
    run_operator("insecure")

    rolled_out(daemonsets)

    events = audit.events(identities.operator_user)
    assert_kopf_and_kubeherd_watched(events)
    assert audit.events("system:anonymous") == []


# Proxies -----------------------------------------------------------------------------------


def test_https_proxy_carries_every_watch(
    run_operator: Callable[..., ContextOperator],
    local_cluster: LocalCluster,
    identities: Identities,
    servers: LoopbackServers,
    daemonsets: DaemonSets,
) -> None:
    proxy = ConnectProxy(servers).start()
    audit = Audit(local_cluster)
    run_operator("verified", {"HTTPS_PROXY": proxy.url})

    rolled_out(daemonsets)

    ports = local_cluster.ports()
    assert ports is not None
    assert set(proxy.targets) == {f"CONNECT 127.0.0.1:{ports.apiserver}"}
    events = audit.events(identities.operator_user)
    assert_kopf_and_kubeherd_watched(events)
    assert {source(e) for e in events} == {PROXY_SOURCE_ADDRESS}, "requests around the proxy"


def test_no_proxy_cidr_bypasses_the_proxy(
    run_operator: Callable[..., ContextOperator],
    local_cluster: LocalCluster,
    identities: Identities,
    servers: LoopbackServers,
    daemonsets: DaemonSets,
) -> None:
    proxy = ConnectProxy(servers).start()
    audit = Audit(local_cluster)
    run_operator("verified", {"HTTPS_PROXY": proxy.url, "NO_PROXY": "example.com,127.0.0.0/8"})

    rolled_out(daemonsets)

    assert proxy.targets == []
    events = audit.events(identities.operator_user)
    assert_kopf_and_kubeherd_watched(events)
    assert {source(e) for e in events} == {"127.0.0.1"}


def kopf_retry_budget() -> float:
    """How long Kopf, by default, retries a request that cannot connect before it fails."""
    backoffs = kopf.OperatorSettings().networking.error_backoffs
    return float(sum(backoffs)) if isinstance(backoffs, Iterable) else float(backoffs)


def test_a_refusing_proxy_stops_everything_and_shows(
    run_operator: Callable[..., ContextOperator],
    local_cluster: LocalCluster,
    identities: Identities,
    servers: LoopbackServers,
    daemonsets: DaemonSets,
) -> None:
    proxy = ConnectProxy(servers, refuse=True).start()
    audit = Audit(local_cluster)
    operator = run_operator("verified", {"HTTPS_PROXY": proxy.url}, wait=False)
    name = daemonsets.create(agent())

    eventually(lambda: len(proxy.targets) >= 2, timeout=30, what="the operator to try the proxy")
    eventually(lambda: operator.readiness() == 503, timeout=30, what="/readyz to answer 503")
    # Past the time Kopf retries a request before it gives up: the operator keeps trying, and
    # keeps saying that it is not ready, rather than exit (and restart) with nothing to show.
    deadline = time.monotonic() + kopf_retry_budget() + 5
    while time.monotonic() < deadline:
        assert not operator.exited(), operator.log_tail()
        assert operator.readiness() == 503
        time.sleep(1)

    assert daemonsets.pods(name) == []
    # Kopf's requests too: nothing of the operator's reached the API server another way.
    assert audit.events(identities.operator_user) == []


# Exec plugins ------------------------------------------------------------------------------


@dataclass
class TokenIssuer:
    """Real tokens of the exec account, each bound to a Secret of its own: deleting the Secret
    revokes the token, which the test does when the plugin's stated lifetime for it ends."""

    core: client.CoreV1Api
    identities: Identities
    count: int = 24
    revoked: set[int] = field(default_factory=set)

    def issue(self) -> None:
        ids = self.identities
        tokens = []
        for index in range(self.count):
            secret = self.core.create_namespaced_secret(
                ids.exec_namespace, {"metadata": {"name": f"exec-token-{index}"}}
            )
            request = {
                "spec": {
                    "audiences": [],
                    "expirationSeconds": 600,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "name": secret.metadata.name,
                        "uid": secret.metadata.uid,
                    },
                }
            }
            answer = self.core.create_namespaced_service_account_token(
                ids.exec_account, ids.exec_namespace, request
            )
            tokens.append(answer.status.token)
        (ids.folder / "tokens.json").write_text(json.dumps(tokens))
        (ids.folder / "calls.log").write_text("")

    def calls(self) -> list[tuple[int, float]]:
        """Which token each call of the plugin handed out (the last one over and over once
        all are used), and until when it said the token was good."""
        lines = (self.identities.folder / "calls.log").read_text().splitlines()
        return [
            (min(int(index), self.count - 1), float(expiry))
            for index, expiry in (line.split() for line in lines)
        ]

    def revoke_expired(self) -> None:
        for index, expiry in self.calls():
            if expiry < time.time() and index not in self.revoked:
                self.core.delete_namespaced_secret(
                    f"exec-token-{index}", self.identities.exec_namespace
                )
                self.revoked.add(index)


def assert_not_renewed_on_every_request(calls: list[tuple[int, float]], elapsed: float) -> None:
    """Renewed as its lifetime runs out, by one owner for Kopf's and kubeherd's requests: not
    on every request, nor on two schedules (`run` asks once more before it starts)."""
    allowed = elapsed / (EXEC_LIFETIME / 2) + 2
    assert len(calls) <= allowed, f"{len(calls)} plugin calls in {elapsed:.0f} s"


def test_an_expiring_exec_credential_is_renewed_once_for_everyone(
    run_operator: Callable[..., ContextOperator],
    local_cluster: LocalCluster,
    identities: Identities,
    core_v1: client.CoreV1Api,
    daemonsets: DaemonSets,
) -> None:
    issuer = TokenIssuer(core_v1, identities)
    issuer.issue()
    audit = Audit(local_cluster)
    stop = threading.Event()

    def revoke() -> None:
        while not stop.wait(0.2):
            issuer.revoke_expired()

    revoker = threading.Thread(target=revoke, daemon=True)
    revoker.start()
    try:
        started = time.monotonic()
        run_operator("exec-expiring")
        name = daemonsets.create(agent())
        daemonsets.wait_for_nodes(name, WORKERS, timeout=60)
        assert_not_renewed_on_every_request(issuer.calls(), time.monotonic() - started)
        # Past two lifetimes, every token handed out so far is revoked: the next revision
        # rolls out only with a renewed one.
        time.sleep(max(0.0, 2 * EXEC_LIFETIME + 1 - (time.monotonic() - started)))
        handed_out = {index for index, _ in issuer.calls()}
        eventually(lambda: handed_out <= issuer.revoked, timeout=10, what="those tokens revoked")
        template = {"metadata": {"labels": {"app": "agent", "revision": "2"}}}
        daemonsets.patch_spec(name, {"template": template})

        def replaced() -> bool:
            pods = daemonsets.pods(name)
            return len(pods) == len(WORKERS) and all(
                (pod.metadata.labels or {}).get("revision") == "2" and pod.status.phase == "Running"
                for pod in pods
            )

        eventually(replaced, timeout=60, what="the second revision on every worker")
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        revoker.join(timeout=5)

    calls = issuer.calls()
    assert [index for index, _ in calls if index not in handed_out], "never renewed"
    assert_not_renewed_on_every_request(calls, elapsed)
    events = audit.events(identities.exec_username)
    assert_kopf_and_kubeherd_watched(events)
    refused = [(e["verb"], resource_of(e)) for e in events if e["responseStatus"]["code"] == 401]
    assert not refused, "requests sent with a revoked token"


def test_a_failing_exec_plugin_is_a_clear_error(
    run_operator: Callable[..., ContextOperator],
    identities: Identities,
    namespace: str,
) -> None:
    operator = run_operator("exec-failing", wait=False)

    eventually(operator.exited, timeout=30, what="the operator to exit")

    operator.stop()
    output = operator.output()
    assert operator.returncode != 0
    assert "exec plugin" in output, output
    assert "Traceback" not in output, output

    rollout = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubeherd.cli",
            *("rollout", "status", "cds/agent", f"--namespace={namespace}"),
            f"--kubeconfig={identities.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert rollout.returncode != 0
    assert "exec plugin" in rollout.stderr, rollout.stderr
    assert "Traceback" not in rollout.stderr, rollout.stderr


# Impersonation -----------------------------------------------------------------------------


def test_an_impersonating_context_acts_as_the_impersonated_user(
    run_operator: Callable[..., ContextOperator],
    local_cluster: LocalCluster,
    identities: Identities,
    daemonsets: DaemonSets,
) -> None:
    audit = Audit(local_cluster)
    run_operator("impersonating")

    rolled_out(daemonsets)

    events = audit.events(identities.impersonator)
    assert_kopf_and_kubeherd_watched(events)
    acting = {(e.get("impersonatedUser") or {}).get("username") for e in events}
    assert acting == {identities.impersonated_user}
    groups = {g for e in events for g in (e.get("impersonatedUser") or {}).get("groups", [])}
    assert identities.impersonated_group in groups
    assert [e for e in events if e["verb"] == "create" and resource_of(e) == "pods"]
