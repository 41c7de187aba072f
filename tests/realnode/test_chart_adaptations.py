"""The chart as users adapt it, on the real node: a budget for two replicas, Kopf's peering CRDs
kept when the release scales back to one, `helm test`, and a cluster that refuses a fixed user id
outside the namespace's range, as OpenShift's restricted-v2 does."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.helpers import eventually
from tests.realnode.conftest import (
    CHART,
    RELEASE,
    RELEASE_NAMESPACE,
    RealCluster,
    chart_values,
    operator_pods,
    wait_for_ready_operators,
)

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

POLICY = "openshift-like-uid-range"
# The range OpenShift writes on a project (first uid / size); restricted-v2 refuses a runAsUser
# outside it, and gives a pod that sets none the first uid of it.
UID_RANGE_ANNOTATION = "openshift.io/sa.scc.uid-range"
FIRST_UID, RANGE_SIZE = 1000680000, 10000
PEERING_CRDS = ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")


def uid_range_policy() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy refusing pods whose runAsUser (pod or container) lies outside
    their namespace's uid range, bound to namespaces labelled as OpenShift-like."""
    uids = (
        "(has(object.spec.securityContext) && has(object.spec.securityContext.runAsUser)"
        " ? [object.spec.securityContext.runAsUser] : [])"
        " + object.spec.containers.filter(c, has(c.securityContext)"
        " && has(c.securityContext.runAsUser)).map(c, c.securityContext.runAsUser)"
    )
    uid_range = f"namespaceObject.metadata.annotations['{UID_RANGE_ANNOTATION}'].split('/')"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "variables": [
                {"name": "uids", "expression": uids},
                {"name": "first", "expression": f"int({uid_range}[0])"},
                {"name": "last", "expression": f"int({uid_range}[0]) + int({uid_range}[1]) - 1"},
            ],
            "validations": [
                {
                    "expression": (
                        "variables.uids.all(u, u >= variables.first && u <= variables.last)"
                    ),
                    "messageExpression": (
                        "'runAsUser: must be in the ranges: [' + string(variables.first) + ', '"
                        " + string(variables.last) + ']'"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {POLICY: "true"}}},
        },
    }
    return [policy, binding]


def apply(real: RealCluster, documents: list[dict[str, Any]]) -> None:
    subprocess.run(
        real.kubectl.command("apply", "-f", "-"),
        input=yaml.safe_dump_all(documents),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


@pytest.fixture(scope="module")
def openshift_like(chart_operator: RealCluster) -> Iterator[RealCluster]:
    """The release namespace with a uid range and the policy that enforces it; afterwards, the
    release back at its default values and the namespace as it was."""
    real = chart_operator
    real.kubectl(
        "annotate",
        "namespace",
        RELEASE_NAMESPACE,
        f"{UID_RANGE_ANNOTATION}={FIRST_UID}/{RANGE_SIZE}",
    )
    real.kubectl("label", "namespace", RELEASE_NAMESPACE, f"{POLICY}=true")
    apply(real, uid_range_policy())
    # The API server applies a new policy once its informers have it: a pod with a fixed uid
    # outside the range is refused (server-side dry run: nothing is stored).
    eventually(lambda: refusal_of_fixed_uid(real) is not None, what="the policy to apply")
    try:
        yield real
    finally:
        real.kubectl("delete", "validatingadmissionpolicybinding", POLICY, check=False)
        real.kubectl("delete", "validatingadmissionpolicy", POLICY, check=False)
        real.kubectl("label", "namespace", RELEASE_NAMESPACE, f"{POLICY}-")
        real.kubectl("annotate", "namespace", RELEASE_NAMESPACE, f"{UID_RANGE_ANNOTATION}-")
        real.install_chart()
        wait_for_ready_operators(real, 1)


def refusal_of_fixed_uid(real: RealCluster) -> str | None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fixed-uid", "namespace": RELEASE_NAMESPACE},
        "spec": {
            "securityContext": {"runAsUser": 65532},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    created = subprocess.run(
        real.kubectl.command("create", "--dry-run=server", "-f", "-"),
        input=yaml.safe_dump(pod),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return created.stderr if created.returncode != 0 else None


def exists(real: RealCluster, *resource: str) -> bool:
    return real.kubectl("get", *resource, "-o", "name", check=False).returncode == 0


def test_two_replicas_get_a_budget_and_scaling_to_one_keeps_the_peering_crds(
    openshift_like: RealCluster,
) -> None:
    real = openshift_like
    # Admitted with the default values, which fix no user id.
    real.install_chart(replicaCount=2)
    wait_for_ready_operators(real, 2)

    def budget() -> dict[str, Any] | None:
        found = real.kubectl(
            "get", "poddisruptionbudget", "-n", RELEASE_NAMESPACE, RELEASE, "-o", "json"
        )
        status: dict[str, Any] = json.loads(found.stdout).get("status") or {}
        return status if status.get("currentHealthy") == 2 else None

    status = eventually(budget, what="the budget to count two healthy replicas")
    assert status["disruptionsAllowed"] == 1
    # Another Kopf operator's peering object, of the kinds this release installed.
    apply(
        real,
        [
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfPeering",
                "metadata": {"name": "another-operator", "namespace": "default"},
            }
        ],
    )
    try:
        real.install_chart(replicaCount=1)
        wait_for_ready_operators(real, 1)

        for crd in PEERING_CRDS:
            assert exists(real, "customresourcedefinition", crd), crd
        assert exists(real, "kopfpeering", "-n", "default", "another-operator")
        assert not exists(real, "poddisruptionbudget", "-n", RELEASE_NAMESPACE, RELEASE)
    finally:
        real.kubectl("delete", "kopfpeering", "-n", "default", "another-operator", check=False)


def failed_creates(real: RealCluster) -> list[str]:
    events = real.kubectl(
        "get", "events", "-n", RELEASE_NAMESPACE, "--field-selector=reason=FailedCreate",
        "-o", "json",
    )  # fmt: skip
    return [event["message"] for event in json.loads(events.stdout)["items"]]


def test_the_operator_runs_under_an_assigned_uid_and_a_fixed_one_is_refused(
    openshift_like: RealCluster,
) -> None:
    real = openshift_like
    # A user id fixed outside the range (the image's own): the ReplicaSet cannot create the pod.
    real.helm(
        "upgrade", RELEASE, str(CHART), f"--namespace={RELEASE_NAMESPACE}",
        *chart_values(**{"podSecurityContext.runAsUser": 65532}),
    )  # fmt: skip

    refusals = eventually(
        lambda: [m for m in failed_creates(real) if POLICY in m], what="the pod to be refused"
    )
    assert f"runAsUser: must be in the ranges: [{FIRST_UID}, " in refusals[0]

    # What restricted-v2 gives a pod that fixes none: the first uid of the range.
    real.install_chart(**{"podSecurityContext.runAsUser": FIRST_UID})
    (pod,) = wait_for_ready_operators(real, 1)
    ids = real.kubectl(
        "exec", "-n", RELEASE_NAMESPACE, pod.metadata.name, "--",
        "python", "-c", "import os; print(os.getuid(), os.getgid())",
    )  # fmt: skip
    assert ids.stdout.split()[0] == str(FIRST_UID)
    # The operator works under it: `helm test` sees it reconcile a CustomDaemonSet.
    tested = real.helm("test", RELEASE, f"--namespace={RELEASE_NAMESPACE}", check=False)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert re.search(r"Phase:\s+Succeeded", tested.stdout), tested.stdout
    assert operator_pods(real)[0].metadata.uid == pod.metadata.uid
