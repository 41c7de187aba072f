"""kubeherd on a cluster of the oldest pinned Kubernetes minor, as on most managed clusters.

Every other test runs on the newest minor. Here a second local cluster runs the oldest minor's
control plane (built before pytest starts, see `make test-tools`), with kwok nodes; the chart
installs with its default values and the operator runs against it as a process, as in the
session's tests. Every example then rolls out: each CustomDaemonSet runs on its nodes, and each
SchedulerProfile is Valid, its Deployment rolls out, and that minor's kube-scheduler runs the
rendered configuration (standing in for one of the Deployment's kwok pods, which run nothing)
and binds the pods that name it. What that minor's kube-scheduler does not have is refused
with a message that names the minor.
"""

from __future__ import annotations

import copy
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from kubeherd.scheduler.core.images import is_custom_image
from localcluster.binaries import Binaries, kubernetes_version, oldest_minor
from localcluster.cluster import COMPONENTS, LocalCluster
from tests.conftest import RELEASE, RELEASE_NAMESPACE, cluster_dir_for_tests, on_kind
from tests.conftest import temporary_namespace as new_namespace
from tests.helpers import (
    REPO,
    Kubectl,
    OperatorProcess,
    TrackedFakeNodes,
    eventually,
    service_account_kubeconfig,
)
from tests.integration.daemonsets import DaemonSets
from tests.integration.schedulers import (
    LocalScheduler,
    SchedulerProfiles,
    condition,
    scheduled_by,
    scheduler_pods,
    scheduler_profile,
)
from tests.integration.test_chart import CHART, helm
from tests.integration.test_transport import Audit, streaming_listings

pytestmark = [pytest.mark.cluster]

MINOR = oldest_minor()
EXAMPLES = REPO / "examples"
CLUSTER_SCOPED = {"PriorityClass"}
# Node labels an example's own comment asks for before its daemon pods start anywhere.
EXAMPLE_NODE_LABELS = {"monitoring-agent.yaml": {"worker-1": {"monitoring": "enabled"}}}


@pytest.fixture(scope="module", autouse=True)
def not_on_kind(request: pytest.FixtureRequest) -> None:
    if on_kind(request.config):
        pytest.skip("a local cluster of the oldest minor: kind runs a node image of its own")


@pytest.fixture(scope="module")
def minor_binaries(binaries_of: Callable[[str], Binaries]) -> Binaries:
    return binaries_of(MINOR)


@pytest.fixture(scope="module")
def cluster(minor_binaries: Binaries) -> Iterator[LocalCluster]:
    cluster = LocalCluster(cluster_dir_for_tests(f"-{MINOR}"), minor_binaries, nodes=3)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def api(cluster: LocalCluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def kubectl_here(cluster: LocalCluster, minor_binaries: Binaries) -> Kubectl:
    return Kubectl(minor_binaries.path("kubectl"), cluster.kubeconfig)


@pytest.fixture(scope="module")
def chart(cluster: LocalCluster, minor_binaries: Binaries, kubectl_here: Kubectl) -> str:
    """`helm upgrade --install` with the chart's default values, as a user would; its output."""
    installed = helm(
        minor_binaries,
        f"--kubeconfig={cluster.kubeconfig}",
        "upgrade", "--install", RELEASE, str(CHART),
        f"--namespace={RELEASE_NAMESPACE}", "--create-namespace",
    )  # fmt: skip
    for crd in ("customdaemonsets", "schedulerprofiles"):
        kubectl_here(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}.kubeherd.io"
        )
    return installed.stdout


@pytest.fixture(scope="module")
def operator_here(
    cluster: LocalCluster, core: client.CoreV1Api, chart: str
) -> Iterator[OperatorProcess]:
    """`kubeherd run` against this cluster with a token of the chart's ServiceAccount."""
    token = service_account_kubeconfig(
        cluster, core, RELEASE_NAMESPACE, RELEASE, cluster.logs / "operator"
    )
    operator = OperatorProcess(cluster, name="kubeherd", kubeconfig=token)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


@pytest.fixture
def namespace(core: client.CoreV1Api, request: pytest.FixtureRequest) -> Iterator[str]:
    # A parametrized test's id tells its namespaces apart: the example, or what is refused.
    callspec = getattr(request.node, "callspec", None)
    name = callspec.id if callspec else request.node.name
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-")
    with new_namespace(core, f"t-{slug}-{secrets.token_hex(3)}") as name:
        yield name


@pytest.fixture
def profiles(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str
) -> Iterator[SchedulerProfiles]:
    found = SchedulerProfiles(custom, core, namespace)
    yield found
    # Deleted while the operator still runs: it removes what they made, cluster-scoped too.
    found.clean_up()


@pytest.fixture
def stand_ins(
    cluster: LocalCluster,
    core: client.CoreV1Api,
    namespace: str,
    kube_scheduler_of: Callable[[str], Path],
) -> Iterator[Callable[[str], LocalScheduler]]:
    """The minor's kube-scheduler, run as one of a SchedulerProfile's (kwok) pods would."""
    started: list[LocalScheduler] = []

    def start(profile: str) -> LocalScheduler:
        pod = eventually(
            lambda: next(iter(scheduler_pods(core, namespace, profile)), None),
            what=f"a scheduler pod of {profile}",
        )
        scheduler = LocalScheduler(
            kube_scheduler_of(MINOR),
            cluster,
            core,
            cluster.logs / namespace,
            namespace=namespace,
            profile=profile,
            pod=pod,
        )
        started.append(scheduler)
        return scheduler.start()

    yield start
    for scheduler in started:
        scheduler.stop()


def test_the_control_plane_runs_the_oldest_minors_pinned_release(
    cluster: LocalCluster, api: client.ApiClient
) -> None:
    release = kubernetes_version(MINOR)

    assert client.VersionApi(api).get_code().git_version == release
    running = cluster.running_components()
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        executable = Path(f"/proc/{running[component]}/exe")
        answer = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, check=True
        )
        assert answer.stdout.strip() == f"Kubernetes {release}", component
    assert set(COMPONENTS) <= set(running)


def test_the_chart_installs_with_its_default_values(
    cluster: LocalCluster, minor_binaries: Binaries, api: client.ApiClient, chart: str
) -> None:
    status = helm(
        minor_binaries, f"--kubeconfig={cluster.kubeconfig}", "status", RELEASE,
        f"--namespace={RELEASE_NAMESPACE}",
    ).stdout  # fmt: skip

    assert "STATUS: deployed" in status
    policies = client.AdmissionregistrationV1Api(api).list_validating_admission_policy().items
    assert {p.metadata.name for p in policies} >= {"kubeherd-schedulerprofile-grants"}
    apps = client.AppsV1Api(api)
    assert apps.read_namespaced_deployment(RELEASE, RELEASE_NAMESPACE).spec.replicas == 1


def example_documents(name: str, namespace: str) -> list[dict[str, Any]]:
    """The example's objects, namespaced ones moved into `namespace`, its Namespace dropped,
    and its scheduler names (cluster-wide) made the test's own."""
    suffix = namespace.rsplit("-", 1)[-1]
    documents = [
        d
        for d in yaml.safe_load_all((EXAMPLES / name).read_text())
        if d and d["kind"] != "Namespace"
    ]
    renamed: dict[str, str] = {}
    for document in documents:
        if document["kind"] not in CLUSTER_SCOPED:
            document["metadata"]["namespace"] = namespace
        if document["kind"] == "SchedulerProfile":
            for profile in document["spec"]["profiles"]:
                renamed[profile["schedulerName"]] = f"{profile['schedulerName']}-{suffix}"
                profile["schedulerName"] = renamed[profile["schedulerName"]]
    for document in documents:
        if document["kind"] == "CustomDaemonSet":
            pod_spec = document["spec"]["template"]["spec"]
            if "schedulerName" in pod_spec:
                pod_spec["schedulerName"] = renamed.get(
                    pod_spec["schedulerName"], pod_spec["schedulerName"]
                )
    return documents


def of_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def wait_for_rollout(daemonsets: DaemonSets, name: str) -> dict[str, Any]:
    """The CustomDaemonSet once its current generation runs and is available on every eligible
    node, and there is at least one."""

    def rolled_out() -> dict[str, Any] | None:
        body = daemonsets.get(name)
        status = body.get("status") or {}
        progressing = daemonsets.progressing(name)
        complete = (
            progressing.get("reason") == "RolloutComplete"
            and progressing.get("observedGeneration") == body["metadata"]["generation"]
        )
        desired = status.get("desiredNumberScheduled") or 0
        return (
            body if complete and desired > 0 and status.get("numberAvailable") == desired else None
        )

    return eventually(rolled_out, timeout=120, what=f"{name} rolled out")


def verdict(profiles: SchedulerProfiles, name: str) -> dict[str, Any]:
    """The SchedulerProfile once its Valid condition speaks of its current generation."""

    def judged() -> dict[str, Any] | None:
        body = profiles.get(name)
        valid = condition(body, "Valid")
        current = valid.get("observedGeneration") == body["metadata"]["generation"]
        return body if current and valid.get("status") in ("True", "False") else None

    return eventually(judged, what=f"a verdict on {name}")


EXAMPLE_FILES = sorted(path.name for path in EXAMPLES.glob("*.yaml"))


@pytest.mark.usefixtures("operator_here")
@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_example_rolls_out(
    example: str,
    namespace: str,
    kubectl_here: Kubectl,
    custom: client.CustomObjectsApi,
    core: client.CoreV1Api,
    api: client.ApiClient,
    profiles: SchedulerProfiles,
    stand_ins: Callable[[str], LocalScheduler],
    tmp_path: Path,
) -> None:
    documents = example_documents(example, namespace)
    nodes = TrackedFakeNodes(core)
    for node, labels in EXAMPLE_NODE_LABELS.get(example, {}).items():
        nodes.label(node, labels)
    moved = tmp_path / example
    moved.write_text(yaml.safe_dump_all(documents))
    try:
        kubectl_here("apply", "-f", str(moved))
        profiles.created += [
            (namespace, d["metadata"]["name"]) for d in of_kind(documents, "SchedulerProfile")
        ]

        for profile in of_kind(documents, "SchedulerProfile"):
            name = profile["metadata"]["name"]
            valid = condition(verdict(profiles, name), "Valid")
            assert valid["status"] == "True", valid["message"]
            body = profiles.wait_for(name, "Progressing", "True", "RolledOut", timeout=120)
            assert body["status"]["readyReplicas"] == body["status"]["replicas"] >= 1
            if not is_custom_image(profile["spec"]):
                # The minor's own kube-scheduler takes the rendered configuration.
                stand_ins(name)
        daemonsets = DaemonSets(custom, core, client.AppsV1Api(api), namespace)
        for daemonset in of_kind(documents, "CustomDaemonSet"):
            name = daemonset["metadata"]["name"]
            wait_for_rollout(daemonsets, name)
            scheduler = daemonset["spec"]["template"]["spec"].get("schedulerName")
            if scheduler:
                for pod in daemonsets.pods(name):
                    assert scheduled_by(core, namespace, pod.metadata.name) == scheduler
    finally:
        for document in of_kind(documents, "PriorityClass"):
            kubectl_here(
                "delete", "priorityclass", document["metadata"]["name"], "--ignore-not-found"
            )
        nodes.restore()


# What kube-scheduler of the oldest minor does not have, in a profile that newer minors take.
NEWER_THAN_THE_OLDEST: dict[str, tuple[dict[str, Any], str]] = {
    # Plugins added after 1.34.
    "plugin GangScheduling": (
        {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}},
        "GangScheduling",
    ),
    "plugin NodeDeclaredFeatures": (
        {"plugins": {"multiPoint": {"enabled": [{"name": "NodeDeclaredFeatures"}]}}},
        "NodeDeclaredFeatures",
    ),
    # An args field added after 1.34.
    "DynamicResources bindingTimeout": (
        {"pluginConfig": [{"name": "DynamicResources", "args": {"bindingTimeout": "60s"}}]},
        "bindingTimeout",
    ),
}


@pytest.mark.usefixtures("operator_here")
@pytest.mark.parametrize("what", sorted(NEWER_THAN_THE_OLDEST))
def test_what_the_oldest_minor_lacks_is_refused_naming_the_minor(
    what: str, namespace: str, profiles: SchedulerProfiles, api: client.ApiClient
) -> None:
    fields, named = NEWER_THAN_THE_OLDEST[what]
    suffix = namespace.rsplit("-", 1)[-1]
    profiles.create(
        scheduler_profile("newer", {"schedulerName": f"newer-{suffix}", **copy.deepcopy(fields)})
    )

    refused = profiles.wait_for("newer", "Valid", "False", "InvalidSpec")

    message = condition(refused, "Valid")["message"]
    assert MINOR in message
    assert named in message
    profiles.wait_for_event("newer", "InvalidSpec", named)
    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
    assert deployments == []


def test_nodes_and_daemon_pods_are_listed_by_streaming_watches(
    cluster: LocalCluster, operator_here: OperatorProcess
) -> None:
    """WatchList is on by default from 1.34: the operator's listings of nodes and daemon pods
    are watches that start with every object, and this minor's API server answers them."""
    operator_user = f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}"
    events = Audit(cluster, from_the_start=True).events(operator_user)
    assert streaming_listings(events) == {"nodes": {200}, "pods": {200}}
    assert "does not stream" not in operator_here.output()
