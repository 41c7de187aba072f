"""`--metrics-secure` against the real API server: an operator that runs as the chart's
ServiceAccount (so the chart's metrics RBAC is what lets it ask) serves /metrics over HTTPS, and
the API server's own TokenReview and SubjectAccessReview decide who reads it."""

from __future__ import annotations

import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from tests.conftest import RELEASE
from tests.helpers import REPO, OperatorProcess, eventually

pytestmark = [pytest.mark.cluster]

READER_ROLE = f"{RELEASE}-metrics-reader"


@pytest.fixture
def secure_operator(
    local_cluster: LocalCluster, operator_kubeconfig: Path, namespace: str
) -> Iterator[OperatorProcess]:
    """It watches only the test's namespace, which holds no CustomDaemonSet: the session's
    operator, if it runs, is the only one acting on the other tests' objects."""
    process = OperatorProcess(
        local_cluster,
        name="metrics-secure",
        arguments=("--metrics-secure", f"--namespace={namespace}"),
        kubeconfig=operator_kubeconfig,
    )
    process.start()
    try:
        # /healthz answers first; the metrics server follows once its certificate is made.
        eventually(
            lambda: accepts_connections(process.metrics_port),
            timeout=30,
            what="the metrics server to listen",
        )
        yield process
    finally:
        process.stop()


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def account_token(core_v1: client.CoreV1Api, namespace: str, name: str) -> str:
    core_v1.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    request = {"spec": {"audiences": [], "expirationSeconds": 3600}}
    token: str = core_v1.create_namespaced_service_account_token(
        name, namespace, request
    ).status.token
    return token


@pytest.fixture
def reader_binding(api_client: client.ApiClient, namespace: str) -> Iterator[dict[str, str]]:
    """The ServiceAccount `reader` of the test's namespace, bound to the chart's role."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    name = f"{namespace}-reader"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": READER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        }
    )
    try:
        yield {"name": "reader", "namespace": namespace}
    finally:
        try:
            rbac.delete_cluster_role_binding(name)
        except ApiException as error:
            if error.status != 404:
                raise


def scrape(port: int, token: str | None) -> tuple[int, str]:
    # The operator made its certificate at start: there is nothing to verify it against.
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=unverified) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def review_creates(text: str) -> float:
    """The operator's successful creates (201): here, only the reviews it asked for."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "kubeherd_api_requests_total"
        and sample.labels == {"verb": "create", "code": "201"}
    )


def test_only_a_token_allowed_to_get_metrics_reads_them(
    secure_operator: OperatorProcess,
    core_v1: client.CoreV1Api,
    namespace: str,
    reader_binding: dict[str, str],
) -> None:
    reader = account_token(core_v1, namespace, reader_binding["name"])
    stranger = account_token(core_v1, namespace, "stranger")
    port = secure_operator.metrics_port

    assert scrape(port, None)[0] == 401
    assert scrape(port, "not-a-token")[0] == 401
    status, refusal = scrape(port, stranger)
    assert status == 403
    assert f"system:serviceaccount:{namespace}:stranger" in refusal
    status, text = scrape(port, reader)
    assert status == 200
    assert "kubeherd_active 1.0" in text
    # Plain HTTP is not served at all.
    with pytest.raises(ConnectionResetError):  # the TLS server hangs up on plain HTTP
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)

    # Decisions are remembered: many more requests with the same tokens ask the API server
    # nothing more (the operator watches an empty namespace, so it creates nothing else).
    before = review_creates(scrape(port, reader)[1])
    for _ in range(20):
        assert scrape(port, stranger)[0] == 403
        assert scrape(port, "not-a-token")[0] == 401
        assert scrape(port, reader)[0] == 200
    assert review_creates(scrape(port, reader)[1]) == before


def helm_template(binaries: Binaries, *values: str) -> list[dict[str, Any]]:
    rendered = subprocess.run(
        [
            str(binaries.path("helm")),
            "template",
            "kh",
            str(REPO / "charts" / "kubeherd"),
            "--namespace=ops",
            *values,
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


def metrics_security(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = (d for d in documents if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    monitors = [d for d in documents if d["kind"] == "ServiceMonitor"]
    return {
        "args": [a for a in container["args"] if a.startswith("--metrics")],
        "roles": {
            d["metadata"]["name"]: d["rules"]
            for d in documents
            if d["kind"] == "ClusterRole" and "-metrics-" in d["metadata"]["name"]
        },
        "bindings": {
            d["metadata"]["name"]: (d["roleRef"]["name"], d["subjects"])
            for d in documents
            if d["kind"] == "ClusterRoleBinding" and "-metrics-" in d["metadata"]["name"]
        },
        "endpoint": {
            key: value
            for key, value in monitors[0]["spec"]["endpoints"][0].items()
            if key in ("scheme", "bearerTokenFile", "tlsConfig")
        }
        if monitors
        else None,
    }


def test_the_chart_serves_metrics_securely_by_default(binaries: Binaries) -> None:
    secure = metrics_security(
        helm_template(
            binaries,
            "--set=metrics.serviceMonitor.enabled=true",
            "--set=metrics.readers[0].name=prometheus-k8s",
            "--set=metrics.readers[0].namespace=monitoring",
        )
    )
    assert secure == {
        "args": ["--metrics-address=:8081", "--metrics-secure"],
        "roles": {
            "kh-kubeherd-metrics-reader": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
            "kh-kubeherd-metrics-auth": [
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["tokenreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["subjectaccessreviews"],
                    "verbs": ["create"],
                },
            ],
        },
        "bindings": {
            "kh-kubeherd-metrics-reader": (
                "kh-kubeherd-metrics-reader",
                [{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}],
            ),
            "kh-kubeherd-metrics-auth": (
                "kh-kubeherd-metrics-auth",
                [{"kind": "ServiceAccount", "name": "kh-kubeherd", "namespace": "ops"}],
            ),
        },
        "endpoint": {
            "scheme": "https",
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "tlsConfig": {"insecureSkipVerify": True},
        },
    }
    # No readers named: the role is there for a binding of the user's own.
    assert "kh-kubeherd-metrics-reader" not in metrics_security(helm_template(binaries))["bindings"]
    plain = metrics_security(
        helm_template(
            binaries, "--set=metrics.secure=false", "--set=metrics.serviceMonitor.enabled=true"
        )
    )
    assert plain == {
        "args": ["--metrics-address=:8081"],
        "roles": {},
        "bindings": {},
        "endpoint": {},
    }


def test_a_reader_that_is_not_a_service_account_name_is_refused(binaries: Binaries) -> None:
    refused = subprocess.run(
        [
            str(binaries.path("helm")),
            "template",
            "kh",
            str(REPO / "charts" / "kubeherd"),
            "--set=metrics.readers[0].name=Prometheus",
            "--set=metrics.readers[0].namespace=monitoring",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "metrics.readers.0.name" in refused.stderr.replace("/", ".")
