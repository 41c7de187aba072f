"""Readiness that tells the truth, against the real API server: an operator whose RBAC lets
Kopf read its custom resources but forbids listing nodes never turns ready. /readyz says which
watch and why, /metrics shows it, and the chart's alert holds on the series of that scrape
(promtool); once the listing is allowed, the operator turns ready by itself. Kopf's own watches
count too: forbidden to list SchedulerProfiles, the operator is not ready either."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster.cluster import LocalCluster
from tests.alerts import scrape, watch_failing_fires
from tests.conftest import RELEASE
from tests.helpers import OperatorProcess, eventually, service_account_kubeconfig

pytestmark = [pytest.mark.cluster]

ACCOUNT = "no-nodes"


def without(rules: list[Any], group: str, resource: str) -> list[dict[str, Any]]:
    """The chart's operator rules, but no right on `resource` of `group`; namespaces may be
    listed (Kopf resolves --namespace against them)."""
    kept = []
    for rule in rules:
        rule = client.ApiClient().sanitize_for_serialization(rule)
        if rule.get("apiGroups") == [group]:
            rule["resources"] = [r for r in rule["resources"] if r != resource]
        if rule.get("resources") or rule.get("nonResourceURLs"):
            kept.append(rule)
    kept.append({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]})
    return kept


@pytest.fixture
def account_without(
    api_client: client.ApiClient,
    core_v1: client.CoreV1Api,
    local_cluster: LocalCluster,
    crds_installed: None,
    namespace: str,
    tmp_path: Path,
) -> Iterator[Callable[[str, str], tuple[Path, client.RbacAuthorizationV1Api, str]]]:
    """`account_without(group, resource)`: a ServiceAccount of the test's namespace bound to a
    copy of the chart's ClusterRole without that resource, and a kubeconfig with its token."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    role = f"{namespace}-{ACCOUNT}"
    made: list[str] = []

    def make(group: str, resource: str) -> tuple[Path, client.RbacAuthorizationV1Api, str]:
        chart_role = rbac.read_cluster_role(RELEASE)
        rules = without(chart_role.rules, group, resource)
        rbac.create_cluster_role({"metadata": {"name": role}, "rules": rules})
        made.append(role)
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": role},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
            }
        )
        core_v1.create_namespaced_service_account(namespace, {"metadata": {"name": ACCOUNT}})
        kubeconfig = service_account_kubeconfig(
            local_cluster, core_v1, namespace, ACCOUNT, tmp_path
        )
        return kubeconfig, rbac, role

    try:
        yield make
    finally:
        for name in made:
            rbac.delete_cluster_role_binding(name)
            rbac.delete_cluster_role(name)


def test_an_operator_that_may_not_list_nodes_is_never_ready_and_says_why(
    account_without: Callable[[str, str], tuple[Path, client.RbacAuthorizationV1Api, str]],
    local_cluster: LocalCluster,
    namespace: str,
    tmp_path: Path,
) -> None:
    kubeconfig, rbac, role = account_without("", "nodes")
    operator = OperatorProcess(
        local_cluster,
        name=f"readiness-{namespace}",
        arguments=(f"--namespace={namespace}",),
        kubeconfig=kubeconfig,
    )
    operator.start()
    try:
        # Alive (the kubelet would not restart it), but not ready, saying why.
        assert operator.healthy()

        answers: list[int] = []

        def refused_four_times() -> str | None:
            status, text = operator.readyz()
            answers.append(status)
            return text if "(4 failures)" in text else None

        # Some seconds of retries (they back off), and never ready in between.
        reason = eventually(refused_four_times, timeout=60, what="/readyz to say nodes fail")
        assert set(answers) == {503}, answers
        assert "[+]started ok" in reason
        assert f"[+]watch pods in {namespace} ok" in reason
        assert f"[+]watch customdaemonsets in {namespace} ok" in reason
        assert "[-]watch nodes: not listed yet; failing for " in reason
        # The listing is a streaming watch: the API server names the watch it refused.
        assert (
            f'User "system:serviceaccount:{namespace}:{ACCOUNT}" cannot watch resource "nodes"'
            in (reason)
        )
        assert reason.endswith("readyz check failed\n")

        metrics = f"http://127.0.0.1:{operator.metrics_port}/metrics"
        found = scrape(metrics)
        nodes = (("resource", "nodes"), ("watched_namespace", ""))
        pods = (("resource", "pods"), ("watched_namespace", namespace))
        assert found[("kubeherd_ready", ())] == 0
        assert found[("kubeherd_watch_listed", nodes)] == 0
        assert found[("kubeherd_watch_failures_total", nodes)] >= 2
        assert found[("kubeherd_watch_failing_seconds", nodes)] > 0
        assert found[("kubeherd_watch_listed", pods)] == 1
        assert found[("kubeherd_watch_failing_seconds", pods)] == 0
        assert found[("kubeherd_active", ())] == 1

        # The chart's alert, on the series of this very scrape held for ten minutes.
        ran = watch_failing_fires(found, tmp_path, ["nodes"])
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "Not ready: watch nodes: not listed yet" in operator.output()

        # Allowed now: the next retry lists, and the operator turns ready without a restart.
        allowed = copy.deepcopy(rbac.read_cluster_role(role))
        allowed.rules.append(
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
        )
        rbac.replace_cluster_role(role, allowed)

        def ready() -> str | None:
            status, text = operator.readyz()
            return text if status == 200 else None

        text = eventually(ready, timeout=90, what="/readyz to turn 200")
        assert "[+]watch nodes ok" in text
        after = scrape(metrics)
        assert after[("kubeherd_ready", ())] == 1
        assert after[("kubeherd_watch_listed", nodes)] == 1
        assert after[("kubeherd_watch_failing_seconds", nodes)] == 0
        assert "Ready: started, and every watch has listed and works" in operator.output()
    finally:
        operator.stop()


def test_an_operator_whose_kopf_may_not_list_schedulerprofiles_is_not_ready(
    account_without: Callable[[str, str], tuple[Path, client.RbacAuthorizationV1Api, str]],
    local_cluster: LocalCluster,
    namespace: str,
) -> None:
    # Kopf lists and watches kubeherd's kinds itself: its watch that cannot list counts as
    # kubeherd's own do, though kubeherd's node and pod watches work.
    kubeconfig, _, _ = account_without("kubeherd.io", "schedulerprofiles")
    operator = OperatorProcess(
        local_cluster,
        name=f"readiness-kopf-{namespace}",
        arguments=(f"--namespace={namespace}",),
        kubeconfig=kubeconfig,
    )
    operator.start()
    try:

        def refused_twice() -> str | None:
            status, text = operator.readyz()
            assert status == 503, text
            return text if "[+]watch nodes ok" in text and "(2 failures)" in text else None

        reason = eventually(refused_twice, timeout=60, what="/readyz to say Kopf's list fails")
        assert f"[+]watch customdaemonsets in {namespace} ok" in reason
        assert f"[-]watch schedulerprofiles in {namespace}: not listed yet; failing for " in reason
        assert "the API server answered 403" in reason
        found = scrape(f"http://127.0.0.1:{operator.metrics_port}/metrics")
        sps = (("resource", "schedulerprofiles"), ("watched_namespace", namespace))
        assert found[("kubeherd_ready", ())] == 0
        assert found[("kubeherd_watch_listed", sps)] == 0
        assert found[("kubeherd_watch_failures_total", sps)] >= 2
    finally:
        operator.stop()
