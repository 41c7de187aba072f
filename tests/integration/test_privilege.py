"""Nobody gets through kubeherd what they could not do themselves: real RBAC on the local
cluster, users impersonated with `kubectl --as`, and the chart's admission policies judged by
the API server itself."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.conftest import RELEASE, RELEASE_NAMESPACE
from tests.helpers import Kubectl, Operator, eventually
from tests.integration.daemonsets import agent
from tests.integration.test_customdaemonset_api import apply

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds_installed")]

SCHEDULER_ROLES = ("system:kube-scheduler", "system:volume-scheduler")


def daemonset(name: str = "agent", **template_spec: Any) -> dict[str, Any]:
    # No node has the label: these tests are about who may create what, not about pods.
    return agent(name, nodeSelector={"kubeherd.io/no-such-node": "true"}, **template_spec)


def schedulerprofile(name: str = "extra", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": name},
        "spec": {"profiles": [{"schedulerName": f"{name}-scheduler"}], **spec},
    }


def may(kubectl: Kubectl, namespace: str, verb: str, resource: str) -> bool:
    answer = kubectl("auth", "can-i", verb, resource, "-n", namespace, check=False)
    return answer.stdout.strip() == "yes"


@pytest.fixture
def editor(kubectl: Kubectl, namespace: str) -> Kubectl:
    """A team member with the cluster's `edit` role in the test's namespace, and nothing else."""
    user = f"editor-{secrets.token_hex(3)}"
    kubectl(
        "-n", namespace, "create", "rolebinding", "editors", "--clusterrole=edit", f"--user={user}"
    )
    as_editor = kubectl.impersonating(user)
    # The chart's roles reach `edit` through the controller manager's aggregation.
    eventually(
        lambda: may(as_editor, namespace, "create", "customdaemonsets.kubeherd.io"),
        what="edit to include customdaemonsets",
    )
    return as_editor


@pytest.fixture
def scheduler_admin(kubectl: Kubectl, editor: Kubectl) -> Iterator[Kubectl]:
    """The editor, also granted `bind` on the scheduler's roles, as RBAC would require of
    anyone binding them."""
    name = f"bind-scheduler-roles-{editor.user}"
    kubectl(
        "create",
        "clusterrole",
        name,
        "--verb=bind",
        "--resource=clusterroles.rbac.authorization.k8s.io",
        *(f"--resource-name={role}" for role in SCHEDULER_ROLES),
    )
    kubectl("create", "clusterrolebinding", name, f"--clusterrole={name}", f"--user={editor.user}")
    yield editor
    kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found")


@pytest.fixture(params=["running", "stopped"])
def operator_state(request: pytest.FixtureRequest) -> Iterator[str]:
    """The rules hold whether an operator runs or not: they are the API server's own."""
    running: Operator = request.getfixturevalue("operator")
    if request.param == "stopped":
        running.stop()
    yield request.param
    if request.param == "stopped":
        running.start()


def test_an_editor_may_create_a_customdaemonset_but_no_schedulerprofile(
    editor: Kubectl, namespace: str, kubectl: Kubectl, operator_state: str
) -> None:
    created = apply(editor, namespace, daemonset())
    assert created.returncode == 0, created.stderr

    refused = apply(editor, namespace, schedulerprofile())

    assert refused.returncode != 0
    assert (
        "binds its scheduler to the ClusterRoles system:kube-scheduler and "
        "system:volume-scheduler, and you may not bind both yourself"
    ) in refused.stderr
    assert kubectl("-n", namespace, "get", "sp", "-o", "name").stdout == ""


def test_who_may_bind_the_scheduler_roles_may_create_a_schedulerprofile(
    scheduler_admin: Kubectl, namespace: str, kubectl: Kubectl
) -> None:
    created = apply(scheduler_admin, namespace, schedulerprofile())

    assert created.returncode == 0, created.stderr


def test_an_extra_role_needs_its_own_bind_right(
    scheduler_admin: Kubectl, namespace: str, kubectl: Kubectl
) -> None:
    refused = apply(scheduler_admin, namespace, schedulerprofile(extraClusterRoles=["view"]))

    assert refused.returncode != 0
    assert "spec.extraClusterRoles binds the scheduler to view, and you may not bind" in (
        refused.stderr
    )


@pytest.mark.parametrize("who", ["scheduler_admin", "cluster_admin"])
def test_cluster_admin_is_never_bound_to_a_scheduler(
    who: str, namespace: str, kubectl: Kubectl, request: pytest.FixtureRequest
) -> None:
    author = request.getfixturevalue("scheduler_admin") if who == "scheduler_admin" else kubectl

    refused = apply(author, namespace, schedulerprofile(extraClusterRoles=["cluster-admin"]))

    assert refused.returncode != 0
    assert "a scheduler may not be bound to them" in refused.stderr


def test_an_editor_may_label_a_schedulerprofile_but_not_change_what_it_runs(
    editor: Kubectl, namespace: str, kubectl: Kubectl
) -> None:
    assert apply(kubectl, namespace, schedulerprofile()).returncode == 0

    labelled = editor("-n", namespace, "label", "sp", "extra", "team=a", check=False)
    changed = apply(editor, namespace, schedulerprofile(replicas=2))

    assert labelled.returncode == 0, labelled.stderr
    assert changed.returncode != 0
    assert "you may not bind" in changed.stderr


def test_a_customdaemonset_may_not_run_as_the_operator(kubectl: Kubectl) -> None:
    name = f"borrower-{secrets.token_hex(3)}"
    as_operator = daemonset(name, serviceAccountName=RELEASE)
    with_its_key = daemonset(
        name, volumes=[{"name": "tls", "secret": {"secretName": f"{RELEASE}-webhook-tls"}}]
    )

    for manifest, complaint in (
        (as_operator, "may not run as kubeherd, the kubeherd operator's own ServiceAccount"),
        (with_its_key, "may not mount the Secret kubeherd-webhook-tls"),
    ):
        refused = apply(kubectl, RELEASE_NAMESPACE, manifest)
        assert refused.returncode != 0
        assert complaint in refused.stderr

    daemon_pods = kubectl(
        "-n", RELEASE_NAMESPACE, "get", "pods", "-l", "kubeherd.io/customdaemonset", "-o", "name"
    )
    assert daemon_pods.stdout == ""
    assert kubectl("-n", RELEASE_NAMESPACE, "get", "cds", "-o", "name").stdout == ""


def test_the_operators_token_cannot_change_what_kubeherd_does_not_own(
    kubectl: Kubectl, namespace: str, operator_kubeconfig: Path
) -> None:
    kubectl("-n", namespace, "create", "role", "team", "--verb=get", "--resource=pods")
    apply(
        kubectl,
        namespace,
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
        },
    )
    apply(
        kubectl,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "workload", "labels": {"app": "workload"}},
            "spec": {
                # Pending: kwok nodes do not declare resize support, which the API server
                # checks before admission for a pod on a node.
                "schedulerName": "no-scheduler",
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m"}},
                    }
                ],
            },
        },
    )
    stolen = kubectl.as_user(operator_kubeconfig)
    patch = '{"metadata":{"labels":{"stolen":"yes"}}}'

    attempts = [
        stolen("-n", namespace, "patch", kind, name, "--type=merge", f"-p={patch}", check=False)
        for kind, name in (("pod", "workload"), ("role", "team"), ("networkpolicy", "default-deny"))
    ]
    attempts += [
        stolen("-n", namespace, "delete", kind, name, "--wait=false", check=False)
        for kind, name in (("role", "team"), ("networkpolicy", "default-deny"))
    ]
    # RBAC lets the operator resize pods (in-place updates of its daemon pods): only the policy
    # stops a stolen token from resizing a workload. kubectl reads pods/resize before it
    # patches, which the operator may not: the client sends the patch alone, as kubeherd does.
    as_operator = client.CoreV1Api(config.new_client_from_config(str(operator_kubeconfig)))
    resize = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m"}}}]}}
    with pytest.raises(ApiException) as resize_refused:
        as_operator.patch_namespaced_pod_resize("workload", namespace, resize)
    assert resize_refused.value.status == 403, resize_refused.value.body
    assert "kubeherd's operator writes only" in str(resize_refused.value.body)
    # RBAC lets the operator bind this role (it binds it for every scheduler): only the
    # policy stops a stolen token from granting it to anyone.
    grant = f"stolen-{namespace}"
    attempts.append(
        stolen(
            "create",
            "clusterrolebinding",
            grant,
            "--clusterrole=system:kube-scheduler",
            "--user=intruder",
            check=False,
        )
    )

    for attempt in attempts:
        assert attempt.returncode != 0
        assert "kubeherd's operator writes only" in attempt.stderr, attempt.stderr
    assert kubectl(
        "-n", namespace, "get", "role,networkpolicy,pod", "-o", "name"
    ).stdout.split() == [
        "role.rbac.authorization.k8s.io/team",
        "networkpolicy.networking.k8s.io/default-deny",
        "pod/workload",
    ]
    workload = json.loads(kubectl("-n", namespace, "get", "pod", "workload", "-o", "json").stdout)
    assert "stolen" not in workload["metadata"]["labels"]
    assert workload["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m"}
    assert kubectl("get", "clusterrolebinding", grant, check=False).returncode != 0
