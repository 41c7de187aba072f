"""Daemon pods never borrow the operator's identity: its ServiceAccount and its own Secrets, in
its own namespace. Anything else of a namespace stays usable, as for a native DaemonSet."""

from __future__ import annotations

from typing import Any

import pytest

from kubeherd.daemonset.core.template import OperatorIdentity, borrowed_identity, checked_pod

OPERATOR = OperatorIdentity("kubeherd-system", "kubeherd", frozenset({"kubeherd-webhook-tls"}))


def pod_in(namespace: str, **template_spec: Any) -> dict[str, Any]:
    return checked_pod(
        {
            "metadata": {"name": "agent", "namespace": namespace, "uid": "u-1"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "a", "image": "busybox"}], **template_spec},
                },
            },
        }
    )


@pytest.mark.parametrize("field", ["serviceAccountName", "serviceAccount"])
def test_the_operators_service_account_is_refused_in_its_namespace(field: str) -> None:
    refusal = borrowed_identity(pod_in("kubeherd-system", **{field: "kubeherd"}), OPERATOR)

    assert refusal is not None
    assert refusal.startswith("spec.template.spec.serviceAccountName: kubeherd is the kubeherd")


def test_an_account_of_the_same_name_elsewhere_is_another_account() -> None:
    assert borrowed_identity(pod_in("team-a", serviceAccountName="kubeherd"), OPERATOR) is None


def test_other_accounts_of_the_operators_namespace_stay_usable() -> None:
    assert (
        borrowed_identity(pod_in("kubeherd-system", serviceAccountName="agent"), OPERATOR) is None
    )
    assert borrowed_identity(pod_in("kubeherd-system"), OPERATOR) is None


def test_an_operator_running_as_default_refuses_pods_without_an_account() -> None:
    as_default = OperatorIdentity("ops", "default")

    assert borrowed_identity(pod_in("ops"), as_default) is not None


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "tls", "secret": {"secretName": "kubeherd-webhook-tls"}},
        {"name": "tls", "projected": {"sources": [{"secret": {"name": "kubeherd-webhook-tls"}}]}},
    ],
)
def test_the_operators_secret_may_not_be_mounted(volume: dict[str, Any]) -> None:
    refusal = borrowed_identity(pod_in("kubeherd-system", volumes=[volume]), OPERATOR)

    assert refusal == (
        "spec.template.spec.volumes[0]: the Secret kubeherd-webhook-tls is the kubeherd "
        "operator's own: its pods may not mount it"
    )


@pytest.mark.parametrize(
    ("username", "expected"),
    [
        ("system:serviceaccount:kubeherd-system:kubeherd", ("kubeherd-system", "kubeherd")),
        ("kubernetes-admin", ("", "")),
        ("system:serviceaccount:broken", ("", "")),
    ],
)
def test_the_identity_is_read_from_the_api_servers_name_for_the_operator(
    username: str, expected: tuple[str, str]
) -> None:
    identity = OperatorIdentity.of_user(username)

    assert (identity.namespace, identity.service_account) == expected


def test_a_developers_own_user_lends_pods_nothing() -> None:
    developer = OperatorIdentity.of_user("kubernetes-admin")

    assert borrowed_identity(pod_in("default", serviceAccountName="default"), developer) is None
