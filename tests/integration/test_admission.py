"""The admission webhook of an operator run as a local process (the API server reaches it on
127.0.0.1 by URL): what the API server would refuse in a DaemonSet's pod template, and what
kube-scheduler would refuse in a SchedulerProfile, is refused at `kubectl apply`; with the
operator down, applies go through and the controller's conditions say what is wrong."""

from __future__ import annotations

import copy
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.cluster import LocalCluster
from localcluster.operator import free_port
from tests.conftest import RELEASE, RELEASE_NAMESPACE, on_kind
from tests.helpers import Kubectl, OperatorProcess, eventually
from tests.integration.schedulers import SchedulerProfiles, condition, scheduler_profile
from tests.integration.test_customdaemonset_api import apply
from tests.integration.test_customdaemonset_api import valid as valid_cds

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

CONFIGURATION = "kubeherd"  # the chart's release name: its RBAC allows this one only
DENIED = 'admission webhook "customdaemonsets.kubeherd.io" denied the request: '
DENIED_SP = 'admission webhook "schedulerprofiles.kubeherd.io" denied the request: '


def with_template(**changes: Any) -> dict[str, Any]:
    manifest = valid_cds()
    manifest["spec"]["template"]["spec"].update(copy.deepcopy(changes))
    return manifest


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "agent", "image": "registry.k8s.io/pause:3.10", **fields}


FOO_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "Foo", "values": ["a"]}]}
            ]
        }
    }
}
INVALID_TEMPLATES = {
    "duplicate-container-names": with_template(
        containers=[container(), container(image="busybox")]
    ),
    "a-mount-of-no-volume": with_template(
        containers=[container(volumeMounts=[{"name": "nowhere", "mountPath": "/x"}])]
    ),
    "a-port-out-of-range": with_template(containers=[container(ports=[{"containerPort": 70000}])]),
    "a-node-affinity-operator-foo": with_template(affinity=FOO_AFFINITY),
    "several-at-once": with_template(
        containers=[container(ports=[{"containerPort": 0}]), container()]
    ),
}


def as_daemonset(cds: dict[str, Any]) -> dict[str, Any]:
    """The same template in a native DaemonSet."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": cds["metadata"]["name"]},
        "spec": copy.deepcopy(cds["spec"]),
    }


def after(marker: str, text: str) -> str:
    assert marker in text, text
    return text.split(marker, 1)[1].strip()


@pytest.fixture
def webhook(
    local_cluster: LocalCluster,
    operator_kubeconfig: Path,
    kubectl: Kubectl,
    other_namespace: str,
) -> Iterator[OperatorProcess]:
    """A second operator with the webhook on, as `make run` starts it. It watches a namespace
    no test uses, so that only the session's operator acts on the tests' resources; its webhook
    serves every namespace. It runs as the chart's ServiceAccount: the chart's RBAC suffices."""
    process = OperatorProcess(
        local_cluster,
        name="webhook",
        arguments=("--webhook-listen=auto", f"--namespace={other_namespace}"),
        kubeconfig=operator_kubeconfig,
    )
    process.start()
    try:
        eventually(
            lambda: (
                "ValidatingWebhookConfiguration kubeherd points at https://127.0.0.1:"
                in process.output()
            ),
            what="the webhook configuration",
        )
        yield process
    finally:
        process.stop()
        kubectl("delete", "validatingwebhookconfiguration", CONFIGURATION, "--ignore-not-found")


def test_the_webhook_private_key_is_removed_when_the_operator_stops(
    local_cluster: LocalCluster,
    operator_kubeconfig: Path,
    kubectl: Kubectl,
    other_namespace: str,
    tmp_path: Path,
) -> None:
    """The serving key Kopf loads from a file is written to a temporary folder: a stopped
    operator must not leave it there (each start on a laptop or CI machine made one more)."""
    process = OperatorProcess(
        local_cluster,
        name="webhook-key",
        arguments=("--webhook-listen=auto", f"--namespace={other_namespace}"),
        kubeconfig=operator_kubeconfig,
        environment={"TMPDIR": str(tmp_path)},
    )
    process.start()
    try:
        eventually(lambda: "points at https://127.0.0.1:" in process.output(), what="serving")
        (folder,) = tmp_path.glob("kubeherd-webhook-*")
        assert sorted(path.name for path in folder.iterdir()) == ["tls.crt", "tls.key"]
    finally:
        process.stop()
        kubectl("delete", "validatingwebhookconfiguration", CONFIGURATION, "--ignore-not-found")

    assert process.returncode == 0, process.log_tail()
    assert list(tmp_path.glob("kubeherd-webhook-*")) == []


def test_restarted_on_the_same_address_with_its_secret_it_leaves_the_configuration_alone(
    local_cluster: LocalCluster,
    operator_kubeconfig: Path,
    kubectl: Kubectl,
    other_namespace: str,
    request: pytest.FixtureRequest,
) -> None:
    """`--webhook-secret`: the certificate outlives the process, so a restart on the same port
    serves the same CA at the same URL, and the API server sees no write to the configuration
    (its resourceVersion stays)."""
    if on_kind(request.config):
        pytest.skip("kind's chart runs with the webhook off: no Role for the webhook's Secret")
    arguments = (
        f"--webhook-listen=127.0.0.1:{free_port()}",
        # The one Secret the chart's Role lets its ServiceAccount read and update.
        f"--webhook-secret={RELEASE_NAMESPACE}/{RELEASE}-webhook-tls",
        f"--namespace={other_namespace}",
    )

    started: list[OperatorProcess] = []

    def serve() -> dict[str, Any]:
        """Start an operator, wait until it has kept the configuration, and stop it: what the
        configuration then is."""
        process = OperatorProcess(
            local_cluster,
            name="webhook-secret",
            arguments=arguments,
            kubeconfig=operator_kubeconfig,
        )
        started.append(process)
        process.start()
        eventually(lambda: "points at https://127.0.0.1:" in process.output(), what="serving")
        process.stop()
        listed = kubectl("get", "validatingwebhookconfiguration", CONFIGURATION, "-o", "json")
        return dict(json.loads(listed.stdout))

    try:
        before = serve()
        after = serve()
    finally:
        for process in started:
            process.stop()
        kubectl("delete", "validatingwebhookconfiguration", CONFIGURATION, "--ignore-not-found")
        kubectl(
            "-n",
            RELEASE_NAMESPACE,
            "delete",
            "secret",
            f"{RELEASE}-webhook-tls",
            "--ignore-not-found",
        )

    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["webhooks"] == before["webhooks"]


def refused_once_served(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> str:
    """kubectl's complaint, once the API server calls the new webhook (its informer of webhook
    configurations takes a moment)."""

    def complaint() -> str | None:
        result = apply(kubectl, namespace, manifest)
        return result.stderr if result.returncode != 0 else None

    return eventually(complaint, timeout=20, what="the webhook to refuse")


@pytest.mark.parametrize("case", sorted(INVALID_TEMPLATES))
def test_a_template_the_api_server_refuses_in_a_daemonset_is_refused_with_its_message(
    webhook: OperatorProcess, kubectl: Kubectl, namespace: str, case: str
) -> None:
    manifest = INVALID_TEMPLATES[case]
    daemonset = apply(kubectl, namespace, as_daemonset(manifest))
    assert daemonset.returncode != 0, "the API server accepted the DaemonSet"

    complaint = refused_once_served(kubectl, namespace, manifest)

    assert after(DENIED, complaint) == after("is invalid: ", daemonset.stderr)
    gone = kubectl("-n", namespace, "get", "cds", "-o", "name").stdout
    assert gone.strip() == ""


def test_a_valid_template_is_accepted_and_runs(
    webhook: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    refused_once_served(kubectl, namespace, INVALID_TEMPLATES["duplicate-container-names"])

    accepted = apply(kubectl, namespace, valid_cds())

    assert accepted.returncode == 0, accepted.stderr


def test_a_quota_of_the_namespace_only_warns(
    webhook: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    """The API server accepts a DaemonSet whatever the namespace's quota: so does the webhook,
    and the controller reports the refused creates (FailedCreate) until the quota allows."""
    refused_once_served(kubectl, namespace, INVALID_TEMPLATES["duplicate-container-names"])
    kubectl("-n", namespace, "create", "quota", "none", "--hard=pods=0")
    eventually(
        lambda: (
            json.loads(kubectl("-n", namespace, "get", "quota", "none", "-o", "json").stdout)
            .get("status", {})
            .get("hard")
        ),
        what="the quota to be counted",
    )

    accepted = apply(kubectl, namespace, valid_cds())

    assert accepted.returncode == 0, accepted.stderr
    assert "exceeded quota" in accepted.stderr  # kubectl prints the webhook's warning


def test_a_metadata_change_of_an_invalid_resource_goes_through(
    webhook: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    """Created while no webhook served, an invalid resource keeps taking finalizer and label
    changes (the controller's own finalizer, its removal at deletion), and can be deleted."""
    webhook.stop()
    created = apply(kubectl, namespace, INVALID_TEMPLATES["a-port-out-of-range"])
    assert created.returncode == 0, created.stderr
    webhook.start()
    refused_once_served(kubectl, namespace, INVALID_TEMPLATES["duplicate-container-names"])

    labelled = kubectl("-n", namespace, "label", "cds", "agent", "team=a", check=False)
    deleted = kubectl("-n", namespace, "delete", "cds", "agent", "--wait=true", check=False)

    assert labelled.returncode == 0, labelled.stderr
    assert deleted.returncode == 0, deleted.stderr


def test_a_schedulerprofile_kube_scheduler_refuses_is_refused_with_the_field(
    webhook: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    unknown_plugin = scheduler_profile(
        "bad",
        {
            "schedulerName": f"bad-{namespace}",
            "plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}},
        },
    )

    complaint = refused_once_served(kubectl, namespace, unknown_plugin)

    assert "spec.profiles[0].plugins.score.enabled[0]: NoSuchPlugin is not a plugin" in after(
        DENIED_SP, complaint
    )


def test_the_lease_of_the_clusters_scheduler_is_refused_at_apply(
    webhook: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    borrower = scheduler_profile(
        "borrower",
        {"schedulerName": f"borrower-{namespace}"},
        leaderElection={
            "leaderElect": True,
            "resourceName": "kube-scheduler",
            "resourceNamespace": "kube-system",
        },
    )

    complaint = refused_once_served(kubectl, namespace, borrower)

    # Both refusals, one per line: the Lease is the cluster's scheduler's, and in another
    # namespace than the SchedulerProfile's.
    assert (
        "* spec.leaderElection.resourceName: Lease kube-system/kube-scheduler belongs to the "
        "cluster's own kube-scheduler"
    ) in complaint
    assert "* spec.leaderElection.resourceNamespace: " in complaint


def test_with_the_operator_down_applies_go_through_and_the_controller_says_why(
    webhook: OperatorProcess,
    kubectl: Kubectl,
    namespace: str,
    schedulerprofiles: SchedulerProfiles,
) -> None:
    unknown_plugin = scheduler_profile(
        "bad",
        {
            "schedulerName": f"bad-{namespace}",
            "plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}},
        },
    )
    refused_once_served(kubectl, namespace, unknown_plugin)

    webhook.stop()  # its configuration still names it: the API server cannot reach it
    accepted = apply(kubectl, namespace, unknown_plugin)
    schedulerprofiles.created.append((namespace, "bad"))

    assert accepted.returncode == 0, accepted.stderr
    invalid = schedulerprofiles.wait_for("bad", "Valid", "False")
    assert "NoSuchPlugin is not a plugin" in condition(invalid, "Valid")["message"]


def test_an_operator_with_the_webhook_turned_off_deletes_the_configuration_left(
    webhook: OperatorProcess,
    local_cluster: LocalCluster,
    operator_kubeconfig: Path,
    kubectl: Kubectl,
    other_namespace: str,
) -> None:
    """As the chart runs it with webhook.enabled=false: the API server stops calling a webhook
    nobody serves."""
    webhook.stop()
    assert (
        kubectl("get", "validatingwebhookconfiguration", CONFIGURATION, check=False).returncode == 0
    )
    turned_off = OperatorProcess(
        local_cluster,
        name="webhook-off",
        arguments=(f"--webhook-configuration={CONFIGURATION}", f"--namespace={other_namespace}"),
        kubeconfig=operator_kubeconfig,
    )
    turned_off.start()
    try:
        eventually(
            lambda: (
                kubectl(
                    "get", "validatingwebhookconfiguration", CONFIGURATION, check=False
                ).returncode
                != 0
            ),
            what="the configuration to be deleted",
        )
    finally:
        turned_off.stop()
    assert f"deleted ValidatingWebhookConfiguration {CONFIGURATION}" in turned_off.output()


def forged_review(url: str, namespace: str) -> tuple[int, dict[str, Any]]:
    """POST an AdmissionReview as any pod could: about a CustomDaemonSet in `namespace`,
    unauthenticated, trusting whatever certificate answers."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "kubeherd.io", "version": "v1alpha1", "kind": "CustomDaemonSet"},
            "resource": {
                "group": "kubeherd.io",
                "version": "v1alpha1",
                "resource": "customdaemonsets",
            },
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:admin", "groups": ["system:masters"]},
            "object": {**valid_cds(), "metadata": {"name": "probe", "namespace": namespace}},
            "dryRun": False,
        },
    }
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    body, headers = json.dumps(review).encode(), {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=body, headers=headers)  # noqa: S310 - https
    try:
        with urllib.request.urlopen(request, context=insecure, timeout=10) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {}


def test_a_forged_review_learns_nothing_of_another_namespace(
    webhook: OperatorProcess, kubectl: Kubectl, other_namespace: str
) -> None:
    """The webhook's caller is not authenticated (the API server does not present itself), so
    it answers on a path only the configuration names: a pod that knows the kind's path, but
    not the configuration, gets no dry-run of a pod in a namespace it cannot read."""
    kubectl("-n", other_namespace, "create", "quota", "none", "--hard=pods=0")
    configuration = json.loads(
        kubectl("get", "validatingwebhookconfiguration", CONFIGURATION, "-o", "json").stdout
    )
    (configured,) = (
        w["clientConfig"]["url"]
        for w in configuration["webhooks"]
        if w["name"] == "customdaemonsets.kubeherd.io"
    )
    listening = urllib.parse.urlsplit(configured)
    guessed = f"{listening.scheme}://{listening.netloc}/customdaemonsets.kubeherd.io"

    status, answer = forged_review(guessed, other_namespace)

    assert (status, answer) == (404, {})

    # What the configured path gives away (the namespace's quota) to whoever knows it:
    def answered() -> str | None:
        status, answer = forged_review(configured, other_namespace)
        warnings = answer.get("response", {}).get("warnings") or []
        return " ".join(warnings) if status == 200 and "quota" in " ".join(warnings) else None

    assert "exceeded quota" in eventually(answered, timeout=20, what="the quota to be counted")
