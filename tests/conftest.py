"""Fixtures shared by every test that needs the local control plane.

`local_cluster` starts one cluster per test session in `.cluster/pytest/` (logs in its `logs/`)
and stops it at the end. With KUBEHERD_REUSE_CLUSTER=1 the tests use the cluster that
`make cluster-up` left running in `.cluster/` instead, and leave it running.

With `--on-kind` (`make test-kind`), the same suite runs on a kind cluster that pytest-kind
makes: the operator image is loaded into it, the chart runs it as a real pod, and kwok runs here
against the kind cluster for the fake nodes. Everything else only takes a kubeconfig.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from localcluster.binaries import (
    MINOR_CONTROL_PLANE,
    Binaries,
    binaries_at,
    ensure_binaries,
    prebuilt_minor_binaries,
)
from localcluster.cluster import KWOK_NODE_GRACE, AttachedCluster, LocalCluster
from tests.helpers import (
    REPO,
    InClusterOperator,
    Kubectl,
    Operator,
    OperatorProcess,
    TrackedFakeNodes,
    service_account_kubeconfig,
)

# Set by `make test-kind`: the operator image it built, to load into the kind cluster.
KIND_OPERATOR_IMAGE = "KUBEHERD_KIND_OPERATOR_IMAGE"
# Keeps kind's own (real) nodes out of the tests' node sets: no test pod tolerates it.
REAL_NODE_TAINT = {"key": "kubeherd.io/not-a-test-node", "effect": "NoSchedule"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--on-kind",
        action="store_true",
        help="run on a kind cluster made by pytest-kind, the operator in a pod (make test-kind)",
    )


def on_kind(config: pytest.Config) -> bool:
    return bool(config.getoption("--on-kind"))


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    return ensure_binaries()


def prebuilt(minor: str, names: tuple[str, ...]) -> dict[str, Path]:
    """`minor`'s binaries as `make test` built them before pytest started: a test never compiles
    them, since a cold build can outlast its timeout."""
    found = prebuilt_minor_binaries(minor, names)
    if found is None:
        pytest.fail(
            f"{', '.join(names)} of Kubernetes {minor} is not built: `make test` builds it "
            "before pytest starts; for pytest alone, run `make test-tools` first"
        )
    return found


@pytest.fixture(scope="session")
def kube_scheduler_of() -> Callable[[str], Path]:
    """kube-scheduler of a pinned minor, prebuilt: `kube_scheduler_of("1.34")`."""
    return lambda minor: prebuilt(minor, ("kube-scheduler",))["kube-scheduler"]


@pytest.fixture(scope="session")
def binaries_of(binaries: Binaries) -> Callable[[str], Binaries]:
    """The binaries of a cluster at a pinned minor (that minor's control plane, prebuilt; the
    rest as the session's): `LocalCluster(folder, binaries_of("1.34"))`."""
    return lambda minor: binaries_at(binaries, minor, prebuilt(minor, MINOR_CONTROL_PLANE))


def cluster_dir_for_tests(suffix: str = "") -> Path:
    """The folder of the session's cluster, or with `suffix`, of another the tests start."""
    folder = Path(os.environ.get("KUBEHERD_TEST_CLUSTER_DIR", REPO / ".cluster" / "pytest"))
    return folder.with_name(folder.name + suffix)


@pytest.fixture(scope="session")
def local_cluster(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    if on_kind(request.config):
        yield from kind_cluster_with_fake_nodes(binaries, request)
        return
    if os.environ.get("KUBEHERD_REUSE_CLUSTER") == "1":
        shared = LocalCluster(REPO / ".cluster", binaries)
        if not shared.is_up():
            pytest.fail("KUBEHERD_REUSE_CLUSTER=1 but no cluster runs: run `make cluster-up`")
        yield shared
        return
    cluster = LocalCluster(
        cluster_dir_for_tests(), binaries, nodes=3, node_monitor_grace=KWOK_NODE_GRACE
    )
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


def kind_cluster_with_fake_nodes(
    binaries: Binaries, request: pytest.FixtureRequest
) -> Iterator[LocalCluster]:
    image = os.environ.get(KIND_OPERATOR_IMAGE)
    if not image:
        pytest.fail(f"--on-kind needs {KIND_OPERATOR_IMAGE}: run it with `make test-kind`")
    kind = request.getfixturevalue("kind_cluster")  # pytest-kind's: created once per session
    kind.load_docker_image(image)
    cluster = AttachedCluster(
        REPO / ".cluster" / "pytest-kind", binaries, Path(kind.kubeconfig_path), nodes=3
    )
    cluster.up()
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    for node in core.list_node().items:
        if "kwok.x-k8s.io/node" not in (node.metadata.annotations or {}):
            taints = [t.to_dict() for t in node.spec.taints or []]
            core.patch_node(node.metadata.name, {"spec": {"taints": [*taints, REAL_NODE_TAINT]}})
    try:
        yield cluster
    finally:
        cluster.down()


def kind_chart_values(folder: Path) -> list[str]:
    """helm arguments that run the loaded image on kind's real node (kwok pods run nothing)."""
    repository, _, tag = os.environ[KIND_OPERATOR_IMAGE].rpartition(":")
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        # As the local process the session runs otherwise (tests/helpers.py OperatorProcess):
        # the tests specify the controllers and create what the webhook would refuse.
        "webhook": {"enabled": False},
        "tolerations": [{"operator": "Exists"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "type", "operator": "NotIn", "values": ["kwok"]}
                            ]
                        }
                    ]
                }
            }
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "kind-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return [f"--values={path}"]


@pytest.fixture(scope="session")
def api_client(local_cluster: LocalCluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(local_cluster.kubeconfig))


@pytest.fixture(scope="session")
def core_v1(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def apps_v1(api_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


@pytest.fixture(scope="session")
def kubectl(local_cluster: LocalCluster, binaries: Binaries) -> Kubectl:
    return Kubectl(binaries.path("kubectl"), local_cluster.kubeconfig)


@contextlib.contextmanager
def temporary_namespace(core_v1: client.CoreV1Api, name: str) -> Iterator[str]:
    core_v1.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        try:
            core_v1.delete_namespace(name)
        except ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture
def namespace(core_v1: client.CoreV1Api, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own, named after it, deleted afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    with temporary_namespace(core_v1, f"t-{slug}-{secrets.token_hex(3)}") as name:
        yield name


@pytest.fixture
def other_namespace(core_v1: client.CoreV1Api, namespace: str) -> Iterator[str]:
    """A second namespace of the test, for what lives outside the first."""
    with temporary_namespace(core_v1, f"{namespace[:50]}-b") as name:
        yield name


@pytest.fixture
def fake_nodes(core_v1: client.CoreV1Api) -> Iterator[TrackedFakeNodes]:
    nodes = TrackedFakeNodes(core_v1)
    yield nodes
    nodes.restore()


RELEASE, RELEASE_NAMESPACE = "kubeherd", "kubeherd-system"


@pytest.fixture(scope="session")
def crds_installed(
    binaries: Binaries,
    local_cluster: LocalCluster,
    kubectl: Kubectl,
    request: pytest.FixtureRequest,
) -> None:
    """The chart installed as a user would (`helm upgrade --install`): the CRDs, and the
    operator's ServiceAccount and ClusterRole, which the tests' operator runs as. It takes over
    CRDs that `make run` applied with kubectl. The chart's operator Deployment runs in a kwok
    pod, which runs nothing."""
    subprocess.run(
        [
            str(binaries.path("helm")),
            f"--kubeconfig={local_cluster.kubeconfig}",
            "upgrade",
            "--install",
            RELEASE,
            str(REPO / "charts" / "kubeherd"),
            f"--namespace={RELEASE_NAMESPACE}",
            "--create-namespace",
            "--take-ownership",
            "--force-conflicts",
            *(kind_chart_values(local_cluster.folder) if on_kind(request.config) else []),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for crd in ("customdaemonsets", "schedulerprofiles"):
        kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}.kubeherd.io")


@pytest.fixture(scope="session")
def operator_kubeconfig(
    local_cluster: LocalCluster, core_v1: client.CoreV1Api, crds_installed: None
) -> Path:
    """A kubeconfig with a token of the chart's ServiceAccount: the operator the tests run has
    exactly the chart's permissions, so every test also proves the ClusterRole suffices."""
    return service_account_kubeconfig(
        local_cluster, core_v1, RELEASE_NAMESPACE, RELEASE, local_cluster.logs / "operator"
    )


@pytest.fixture(scope="session")
def operator(
    local_cluster: LocalCluster,
    crds_installed: None,
    operator_kubeconfig: Path,
    kubectl: Kubectl,
    request: pytest.FixtureRequest,
) -> Iterator[Operator]:
    """`kubeherd run` as a real process against the cluster, for the whole session; on kind, the
    chart's Deployment."""
    process: Operator = (
        InClusterOperator(kubectl, RELEASE_NAMESPACE, RELEASE)
        if on_kind(request.config)
        else OperatorProcess(local_cluster, name="kubeherd", kubeconfig=operator_kubeconfig)
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()
