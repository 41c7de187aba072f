"""Rendering a SchedulerProfile as a KubeSchedulerConfiguration, with plain data."""

from __future__ import annotations

from typing import Any

import yaml

from kubeherd.scheduler.core.config import (
    configuration_hash,
    configuration_yaml,
    foreign_lock_namespace,
    lease_lock,
    render_configuration,
)
from tests.helpers import REPO


def example_spec(name: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((REPO / "examples" / name).read_text())
    spec: dict[str, Any] = manifest["spec"]
    return spec


def test_the_lock_is_the_resource_own_lease_never_the_default_schedulers() -> None:
    # Prefixed: a resource named like another component (kube-scheduler, cluster-autoscaler)
    # must not elect on that component's Lease by default.
    rendered = render_configuration({"profiles": [{"schedulerName": "a"}]}, "extra", "ops")

    assert rendered["leaderElection"] == {
        "leaderElect": True,
        "leaseDuration": "15s",
        "renewDeadline": "10s",
        "retryPeriod": "2s",
        "resourceLock": "leases",
        "resourceName": "kubeherd-extra",
        "resourceNamespace": "ops",
    }
    kube_scheduler = lease_lock({}, "kube-scheduler", "kube-system")
    assert (kube_scheduler.name, kube_scheduler.namespace) == (
        "kubeherd-kube-scheduler",
        "kube-system",
    )


def test_a_lock_named_in_the_spec_is_used() -> None:
    spec = {"leaderElection": {"resourceName": "lock", "resourceNamespace": "locks"}}

    lock = lease_lock(spec, "extra", "ops")

    assert (lock.name, lock.namespace) == ("lock", "locks")


def test_a_lock_outside_the_resources_namespace_is_refused() -> None:
    def election(**fields: str) -> dict[str, Any]:
        return {"leaderElection": fields}

    assert foreign_lock_namespace({}, "ops") == ""
    assert foreign_lock_namespace(election(resourceName="lock"), "ops") == ""
    assert foreign_lock_namespace(election(resourceNamespace="ops"), "ops") == ""
    message = foreign_lock_namespace(election(resourceNamespace="cert-manager"), "ops")
    assert message.startswith("the Lease must be in the SchedulerProfile's own namespace ops")


def test_the_two_profile_example_renders_both_profiles_with_scoring_off_in_one() -> None:
    rendered = render_configuration(example_spec("schedulerprofile-two-profiles.yaml"), "t", "n")

    assert [p["schedulerName"] for p in rendered["profiles"]] == [
        "my-scheduler",
        "my-scheduler-no-scoring",
    ]
    assert "plugins" not in rendered["profiles"][0]
    assert rendered["profiles"][1]["plugins"] == {
        "preScore": {"disabled": [{"name": "*"}]},
        "score": {"disabled": [{"name": "*"}]},
    }


def test_plugin_args_and_weights_are_passed_as_written() -> None:
    rendered = render_configuration(example_spec("schedulerprofile-packing.yaml"), "p", "n")

    (profile,) = rendered["profiles"]
    assert profile["pluginConfig"] == [
        {
            "name": "NodeResourcesFit",
            "args": {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                }
            },
        }
    ]


def test_the_global_fields_and_the_kubeconfig_are_set_only_when_given() -> None:
    spec = {"profiles": [{"schedulerName": "a"}], "parallelism": 8}

    rendered = render_configuration(spec, "x", "n", kubeconfig="/etc/kubernetes/scheduler.conf")

    assert rendered["parallelism"] == 8
    assert "podMaxBackoffSeconds" not in rendered
    assert rendered["clientConnection"] == {"kubeconfig": "/etc/kubernetes/scheduler.conf"}


def test_the_hash_follows_the_configuration() -> None:
    one = configuration_yaml(render_configuration({"profiles": [{"schedulerName": "a"}]}, "x", "n"))
    two = configuration_yaml(render_configuration({"profiles": [{"schedulerName": "b"}]}, "x", "n"))

    assert configuration_hash(one) == configuration_hash(one)
    assert configuration_hash(one) != configuration_hash(two)
