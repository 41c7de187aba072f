"""What the API server itself refuses in a SchedulerProfile at `kubectl apply`, from the CRD."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.helpers import Kubectl
from tests.integration.test_customdaemonset_api import apply, refused

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds_installed")]


def valid() -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": "extra"},
        "spec": {"profiles": [{"schedulerName": "extra-scheduler"}]},
    }


def with_spec(**fields: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(valid())
    manifest["spec"].update(fields)
    return manifest


def test_a_minimal_profile_is_stored_with_the_defaults(kubectl: Kubectl, namespace: str) -> None:
    assert apply(kubectl, namespace, valid()).returncode == 0

    stored = json.loads(kubectl("-n", namespace, "get", "sp", "extra", "-o", "json").stdout)

    assert stored["spec"]["leaderElection"] == {
        "leaderElect": True,
        "leaseDuration": "15s",
        "renewDeadline": "10s",
        "retryPeriod": "2s",
    }
    assert (stored["spec"]["replicas"], stored["spec"]["parallelism"]) == (1, 16)
    assert (stored["spec"]["podInitialBackoffSeconds"], stored["spec"]["podMaxBackoffSeconds"]) == (
        1,
        10,
    )


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"profiles": []}, "profiles"),
        ({"profiles": [{"schedulerName": "default-scheduler"}]}, "cluster's own scheduler"),
        (
            {"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]},
            "Duplicate value",
        ),
        ({"profiles": [{"schedulerName": "Not_A_Name"}]}, "schedulerName"),
        ({"replicas": 2, "leaderElection": {"leaderElect": False}}, "more than one replica"),
        (
            {"leaderElection": {"leaseDuration": "10s", "renewDeadline": "15s"}},
            "leaseDuration must be longer than renewDeadline",
        ),
        ({"leaderElection": {"retryPeriod": "-1s"}}, "retryPeriod must not be negative"),
        (
            {"leaderElection": {"leaseDuration": "0s", "renewDeadline": "20s"}},
            "a duration of 0s is kube-scheduler's default",
        ),
        ({"leaderElection": {"resourceLock": "endpoints"}}, "resourceLock must be leases"),
        ({"podMaxBackoffSeconds": 2**63}, "podMaxBackoffSeconds"),
        (
            {"leaderElection": {"renewDeadline": "10s", "retryPeriod": "9s"}},
            "renewDeadline must be longer than 1.2 times retryPeriod",
        ),
        (
            {"leaderElection": {"renewDeadline": "12000ms", "retryPeriod": "10s"}},
            "renewDeadline must be longer than 1.2 times retryPeriod",
        ),
        ({"leaderElection": {"leaseDuration": "fifteen"}}, "leaseDuration"),
        ({"percentageOfNodesToScore": 101}, "percentageOfNodesToScore"),
        (
            {"podInitialBackoffSeconds": 20, "podMaxBackoffSeconds": 10},
            "podMaxBackoffSeconds must be at least podInitialBackoffSeconds",
        ),
        ({"parallelism": 0}, "parallelism"),
        (
            {
                "profiles": [
                    {
                        "schedulerName": "a",
                        "pluginConfig": [
                            {"name": "NodeResourcesFit"},
                            {"name": "NodeResourcesFit"},
                        ],
                    }
                ]
            },
            "Duplicate value",
        ),
        (
            {
                "profiles": [
                    {
                        "schedulerName": "a",
                        "plugins": {"score": {"enabled": [{"name": "X", "weight": -1}]}},
                    }
                ]
            },
            "weight",
        ),
        *(
            ({"command": ["kube-scheduler", flag]}, "kubeherd sets the scheduler's leader election")
            for flag in (
                "--leader-elect-resource-namespace=kube-system",
                "--leader_elect_resource_name=kube-scheduler",
                "--leader-elect=false",
                "--kubeconfig=/etc/kubernetes/admin.conf",
                "--master=https://10.0.0.1",
                "--authorization-always-allow-paths=/metrics",
                "--config=/tmp/other.yaml",
            )
        ),
        *(
            ({"extraClusterRoles": [role]}, "a scheduler may not be bound to them")
            for role in ("cluster-admin", "admin", "edit", "system:controller:job-controller")
        ),
    ],
)
def test_a_configuration_kube_scheduler_would_refuse_is_refused_at_apply(
    kubectl: Kubectl, namespace: str, spec: dict[str, Any], complaint: str
) -> None:
    assert complaint in refused(kubectl, namespace, with_spec(**spec))


def test_kubectl_get_shows_the_scheduler_columns(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, valid())

    header = kubectl("-n", namespace, "get", "sp").stdout.splitlines()[0].split()

    assert header == ["NAME", "SCHEDULERS", "READY", "LEADER", "VALID", "AGE"]


@pytest.mark.parametrize(
    "election",
    [
        {"leaseDuration": "1m", "renewDeadline": ".5m", "retryPeriod": "2.s"},
        {"leaseDuration": "+20s", "renewDeadline": "12001ms", "retryPeriod": "10s"},
        {"leaseDuration": "1h0m0.5s", "renewDeadline": "1m", "retryPeriod": "49.999s"},
    ],
)
def test_lease_timings_kube_scheduler_accepts_are_stored(
    kubectl: Kubectl, namespace: str, election: dict[str, str]
) -> None:
    result = apply(kubectl, namespace, with_spec(leaderElection=election))

    assert result.returncode == 0, result.stderr


def test_flags_that_keep_the_scheduler_on_its_own_lease_are_stored(
    kubectl: Kubectl, namespace: str
) -> None:
    manifest = with_spec(
        command=["/usr/local/bin/kube-scheduler", "--v=4", "--secure-port=10260"],
        extraClusterRoles=["system:kube-scheduler", "podgroup-reader"],
    )

    assert apply(kubectl, namespace, manifest).returncode == 0


def test_a_schedulerprofile_named_default_is_refused(kubectl: Kubectl, namespace: str) -> None:
    manifest = valid()
    manifest["metadata"]["name"] = "default"

    assert "metadata.name may not be default" in refused(kubectl, namespace, manifest)
