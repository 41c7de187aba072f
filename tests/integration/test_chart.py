"""The Helm chart: lint, render, install, upgrade and uninstall, and the operator's identity.

Every other test of the session already runs the operator with a token of the chart's
ServiceAccount (see tests/conftest.py), so the ClusterRole is proven sufficient there. Here: it
is also narrow, and the chart's lifecycle works on a cluster of its own.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from localcluster.nodes import fake_node_manifest
from tests.helpers import (
    REPO,
    Kubectl,
    OperatorProcess,
    TrackedFakeNodes,
    eventually,
    service_account_kubeconfig,
)
from tests.integration.daemonsets import FLUENTD, DaemonSets

pytestmark = [pytest.mark.cluster]

CHART = REPO / "charts" / "kubeherd"
CRDS = ("customdaemonsets.kubeherd.io", "schedulerprofiles.kubeherd.io")


def helm(
    binaries: Binaries, *arguments: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.path("helm")), *arguments],
        capture_output=True,
        text=True,
        check=check,
        timeout=180,
    )


def test_helm_lint_is_clean(binaries: Binaries) -> None:
    linted = helm(binaries, "lint", "--strict", str(CHART))

    assert "1 chart(s) linted, 0 chart(s) failed" in linted.stdout


def test_the_chart_renders_the_operator_crds_and_rbac(binaries: Binaries) -> None:
    rendered = helm(binaries, "template", "kubeherd", str(CHART), "--namespace", "ops").stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]

    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert {
        ("ClusterRole", "kubeherd"),
        ("ClusterRoleBinding", "kubeherd"),
        ("ClusterRole", "kubeherd-edit"),
        ("ClusterRole", "kubeherd-view"),
        ("CustomResourceDefinition", "customdaemonsets.kubeherd.io"),
        ("CustomResourceDefinition", "schedulerprofiles.kubeherd.io"),
        ("Deployment", "kubeherd"),
        ("Role", "kubeherd-webhook"),
        ("RoleBinding", "kubeherd-webhook"),
        ("Service", "kubeherd-webhook"),
        ("Service", "kubeherd-metrics"),
        ("ServiceAccount", "kubeherd"),
        *(
            (kind, f"kubeherd-{policy}")
            for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
            for policy in (
                "schedulerprofile-grants",
                "customdaemonset-identity",
                "operator-writes-its-own",
            )
        ),
    } <= kinds
    crds = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
    assert sorted(d["metadata"]["name"] for d in crds) == sorted(CRDS)
    assert all(d["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"} for d in crds)
    (role,) = (d for d in documents if operator_cluster_role(d))
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
    (deployment,) = (d for d in documents if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert "--health-address=:8080" in container["args"]
    (metrics,) = (d for d in documents if d["metadata"]["name"] == "kubeherd-metrics")
    assert metrics["spec"]["publishNotReadyAddresses"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["limits"]["memory"] == "256Mi"


def operator_cluster_role(document: dict[str, Any]) -> bool:
    """The operator's own ClusterRole, not those the chart makes for its users and scrapers."""
    users = ("-edit", "-view", "-metrics-reader", "-metrics-auth")
    return bool(
        document["kind"] == "ClusterRole" and not document["metadata"]["name"].endswith(users)
    )


def test_peering_is_rendered_only_for_several_replicas(binaries: Binaries) -> None:
    def render(*values: str) -> list[dict[str, Any]]:
        rendered = helm(binaries, "template", "kubeherd", str(CHART), *values).stdout
        return [d for d in yaml.safe_load_all(rendered) if d and not is_hook(d)]

    def peering_parts(documents: list[dict[str, Any]]) -> dict[str, Any]:
        (deployment,) = (d for d in documents if d["kind"] == "Deployment")
        (role,) = (d for d in documents if operator_cluster_role(d))
        return {
            "strategy": deployment["spec"]["strategy"]["type"],
            "args": [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                     if a.startswith("--peering")],
            "rbac": [r["resources"] for r in role["rules"] if r["apiGroups"] == ["kopf.dev"]],
            "crds": sorted(d["metadata"]["name"] for d in documents
                           if d["kind"] == "CustomResourceDefinition"
                           and d["spec"]["group"] == "kopf.dev"),
        }  # fmt: skip

    assert peering_parts(render()) == {"strategy": "Recreate", "args": [], "rbac": [], "crds": []}
    assert peering_parts(render("--set", "replicaCount=3")) == {
        "strategy": "RollingUpdate",
        "args": ["--peering=kubeherd", "--peering-lifetime=60"],
        "rbac": [["clusterkopfpeerings"]],
        "crds": ["clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"],
    }
    # An operator of one namespace peers in a KopfPeering there: its Role has the rights.
    namespaced = render("--set", "replicaCount=2", "--set", "operator.namespace=team")
    assert peering_parts(namespaced)["rbac"] == []
    (team_role,) = (
        d
        for d in namespaced
        if (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        == ("Role", "team", "kubeherd")
    )
    assert [r["resources"] for r in team_role["rules"] if r["apiGroups"] == ["kopf.dev"]] == [
        ["kopfpeerings"]
    ]
    shared = render("--set", "replicaCount=2", "--set", "peering.installCRDs=false")
    assert peering_parts(shared)["crds"] == []


def test_every_replica_gets_its_pod_name_as_identity(binaries: Binaries) -> None:
    """POD_ID, from which Kopf takes the operator's identity, with one replica (the default) as
    with several: once only peered replicas got it, and the single one crashed in the image,
    whose uid has no passwd entry for Kopf's fallback."""
    pod_id = {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    for values in ([], ["--set", "replicaCount=1"], ["--set", "replicaCount=3"]):
        rendered = helm(binaries, "template", "kubeherd", str(CHART), *values).stdout
        (deployment,) = (d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]

        assert pod_id in container.get("env", []), values


def render_chart(binaries: Binaries, *values: str, hooks: bool = False) -> list[dict[str, Any]]:
    """`helm template` of the chart as release kh in namespace ops, with `--set`s: the release's
    objects, and with `hooks` also those of `helm test`."""
    rendered = helm(binaries, "template", "kh", str(CHART), "-n", "ops", *values).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    return [d for d in documents if hooks or not is_hook(d)]


def is_hook(document: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (document["metadata"].get("annotations") or {})


def test_the_webhook_is_on_by_default_and_can_be_turned_off(binaries: Binaries) -> None:
    def webhook_parts(documents: list[dict[str, Any]]) -> dict[str, Any]:
        (deployment,) = (d for d in documents if d["kind"] == "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        (role,) = (d for d in documents if operator_cluster_role(d))
        return {
            "args": [a for a in container["args"] if a.startswith("--webhook")],
            "ports": [p["name"] for p in container["ports"]],
            "configuration": [r for r in role["rules"]
                              if r["resources"] == ["validatingwebhookconfigurations"]],
            "services": [d["metadata"]["name"] for d in documents if d["kind"] == "Service"],
            "secrets": [r for d in documents if d["kind"] == "Role" for r in d["rules"]],
        }  # fmt: skip

    on = webhook_parts(render_chart(binaries))
    assert on == {
        "args": [
            "--webhook-listen=:9443",
            "--webhook-service=ops/kh-kubeherd-webhook",
            "--webhook-configuration=kh-kubeherd",
            "--webhook-owner=kh-kubeherd",
        ],
        "ports": ["health", "metrics", "webhook"],
        # Its own configuration only, by name.
        "configuration": [
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations"],
                "verbs": ["get", "create", "patch", "delete"],
                "resourceNames": ["kh-kubeherd"],
            }
        ],
        "services": ["kh-kubeherd-metrics", "kh-kubeherd-webhook"],
        "secrets": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get", "update"],
                "resourceNames": ["kh-kubeherd-webhook-tls"],
            },
        ],
    }
    off = webhook_parts(render_chart(binaries, "--set", "webhook.enabled=false"))
    assert off == {
        # Off: the configuration an earlier release's operator wrote is deleted.
        "args": ["--webhook-listen=", "--webhook-configuration=kh-kubeherd"],
        "ports": ["health", "metrics"],
        "configuration": on["configuration"],
        "services": ["kh-kubeherd-metrics"],
        "secrets": [],
    }


def test_metrics_are_served_by_default_and_monitoring_objects_are_opt_in(
    binaries: Binaries,
) -> None:
    def metrics_parts(documents: list[dict[str, Any]]) -> dict[str, Any]:
        (deployment,) = (d for d in documents if d["kind"] == "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return {
            "args": [a for a in container["args"] if a.startswith("--metrics")],
            "ports": [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"],
            "services": [
                (d["metadata"]["name"], d["spec"]["ports"][0]["targetPort"])
                for d in documents
                if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics")
            ],
            "monitoring": sorted(
                d["kind"] for d in documents if d["apiVersion"].startswith("monitoring.coreos")
            ),
        }

    assert metrics_parts(render_chart(binaries)) == {
        "args": ["--metrics-address=:8081", "--metrics-secure"],
        "ports": [8081],
        "services": [("kh-kubeherd-metrics", "metrics")],
        "monitoring": [],
    }
    scheduler_monitor = render_chart(
        binaries,
        "--set=schedulerProfiles.podMonitor.enabled=true",
        "--set=schedulerProfiles.namespaces={kube-system}",
        "--set=schedulerProfiles.podMonitor.scrapeClass=kube-scheduler",
    )
    assert metrics_parts(scheduler_monitor)["monitoring"] == ["PodMonitor"]
    (reader,) = (
        d
        for d in scheduler_monitor
        if d["metadata"]["name"] == "kh-kubeherd-scheduler-metrics" and d["kind"] == "ClusterRole"
    )
    # The token Prometheus sends may read /metrics and nothing else.
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert metrics_parts(render_chart(binaries, "--set", "metrics.enabled=false")) == {
        "args": ["--metrics-address="],
        "ports": [],
        "services": [],
        "monitoring": [],
    }
    documents = render_chart(
        binaries,
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.labels.release=prom",
    )
    assert metrics_parts(documents)["monitoring"] == ["PrometheusRule", "ServiceMonitor"]
    (monitor,) = (d for d in documents if d["kind"] == "ServiceMonitor")
    (service,) = (d for d in documents if d["metadata"]["name"] == "kh-kubeherd-metrics")
    # The ServiceMonitor selects the metrics Service only, not the webhook's.
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    assert "kubeherd.io/metrics" in selected
    (rule,) = (d for d in documents if d["kind"] == "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prom"
    rules = yaml.safe_load((CHART / "rules" / "kubeherd-alerts.yaml").read_text())
    assert rule["spec"] == rules


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("operator.qsp=10", "additional properties 'qsp' not allowed"),
        ("podSecurityContext.runAsUsr=1000", "additional properties 'runAsUsr' not allowed"),
        (
            "securityContext.readOnlyRootFileSystem=true",
            "additional properties 'readOnlyRootFileSystem' not allowed",
        ),
        ("podDisruptionBudget.minAvailabel=1", "additional properties 'minAvailabel' not allowed"),
        ("extraEnv[0].nmae=HTTPS_PROXY", "additional properties 'nmae' not allowed"),
        ("envFrom[0].configMap.name=proxy", "additional properties 'configMap' not allowed"),
        ("topologySpreadConstraints[0].maxSkew=1", "missing properties"),
        # A tag where a digest belongs.
        ("image.digest=latest", "image/digest"),
    ],
)
def test_a_mistyped_value_is_refused(binaries: Binaries, value: str, complaint: str) -> None:
    refused = helm(binaries, "template", "kubeherd", str(CHART), "--set", value, check=False)

    assert refused.returncode != 0
    assert complaint in refused.stderr


def operator_pod(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = (d for d in documents if d["kind"] == "Deployment")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_extra_args_and_environment_come_after_the_charts_own(binaries: Binaries) -> None:
    documents = render_chart(
        binaries,
        "--set=extraArgs={--max-create-backoff=300,--verbose}",
        "--set=extraEnv[0].name=HTTPS_PROXY",
        "--set=extraEnv[0].value=http://proxy:3128",
        "--set=extraEnv[1].name=NO_PROXY",
        "--set=extraEnv[1].valueFrom.configMapKeyRef.name=proxy",
        "--set=extraEnv[1].valueFrom.configMapKeyRef.key=no-proxy",
        "--set=envFrom[0].secretRef.name=proxy-credentials",
    )
    (container,) = operator_pod(documents)["containers"]

    assert container["args"][0] == "run"
    assert container["args"][-2:] == ["--max-create-backoff=300", "--verbose"]
    assert [e["name"] for e in container["env"]] == ["POD_ID", "HTTPS_PROXY", "NO_PROXY"]
    assert container["env"][1] == {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}
    assert container["env"][2]["valueFrom"] == {
        "configMapKeyRef": {"name": "proxy", "key": "no-proxy"}
    }
    assert container["envFrom"] == [{"secretRef": {"name": "proxy-credentials"}}]
    (default,) = operator_pod(render_chart(binaries))["containers"]
    assert "envFrom" not in default
    assert [e["name"] for e in default["env"]] == ["POD_ID"]


def images(documents: list[dict[str, Any]]) -> set[str]:
    """Every image the chart runs: the operator's and `helm test`'s pod."""
    pods = [operator_pod(documents)] + [d["spec"] for d in documents if d["kind"] == "Pod"]
    return {c["image"] for pod in pods for c in pod["containers"]}


def test_an_image_digest_wins_over_the_tag(binaries: Binaries) -> None:
    digest = "sha256:" + "0123456789abcdef" * 4

    assert images(render_chart(binaries, hooks=True)) == {"kubeherd:0.1.0"}
    assert images(render_chart(binaries, "--set=image.tag=v2", hooks=True)) == {"kubeherd:v2"}
    pinned = render_chart(
        binaries, "--set=image.tag=v2", f"--set=image.digest={digest}", hooks=True
    )
    assert images(pinned) == {f"kubeherd@{digest}"}


def test_security_contexts_are_values_restricted_by_default(binaries: Binaries) -> None:
    """Restricted by default, without a fixed user: the image's (65532) runs it, and OpenShift's
    restricted-v2 may pick one from the namespace's range. Each field can be changed."""
    pod = operator_pod(render_chart(binaries))

    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    pinned = operator_pod(
        render_chart(
            binaries,
            "--set=podSecurityContext.runAsUser=65532",
            "--set=podSecurityContext.runAsGroup=1000",
            "--set=securityContext.readOnlyRootFilesystem=false",
        )
    )
    assert pinned["securityContext"]["runAsUser"] == 65532
    assert pinned["securityContext"]["runAsGroup"] == 1000
    assert pinned["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    # A default removed with null, as Helm removes any.
    unconfined = operator_pod(
        render_chart(binaries, "--set=podSecurityContext.seccompProfile=null")
    )
    assert unconfined["securityContext"] == {"runAsNonRoot": True}
    # The `helm test` pod runs as the operator does.
    (test_pod,) = (d for d in render_chart(binaries, hooks=True) if d["kind"] == "Pod")
    assert test_pod["spec"]["securityContext"] == pod["securityContext"]
    assert (
        test_pod["spec"]["containers"][0]["securityContext"]
        == (pod["containers"][0]["securityContext"])
    )


def test_a_disruption_budget_only_for_several_replicas(binaries: Binaries) -> None:
    def budgets(*values: str) -> list[dict[str, Any]]:
        return [d for d in render_chart(binaries, *values) if d["kind"] == "PodDisruptionBudget"]

    assert budgets() == []
    assert budgets("--set=replicaCount=2", "--set=podDisruptionBudget.enabled=false") == []
    (budget,) = budgets("--set=replicaCount=2")
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "kubeherd",
                "app.kubernetes.io/instance": "kh",
            }
        },
    }
    (half,) = budgets("--set=replicaCount=4", "--set=podDisruptionBudget.maxUnavailable=50%")
    assert half["spec"]["maxUnavailable"] == "50%"


def test_topology_spread_selects_the_operators_pods_unless_told(binaries: Binaries) -> None:
    spread = "--set=topologySpreadConstraints[{}].{}"
    pod = operator_pod(
        render_chart(
            binaries,
            spread.format(0, "maxSkew=1"),
            spread.format(0, "topologyKey=topology.kubernetes.io/zone"),
            spread.format(0, "whenUnsatisfiable=ScheduleAnyway"),
            spread.format(1, "maxSkew=1"),
            spread.format(1, "topologyKey=kubernetes.io/hostname"),
            spread.format(1, "whenUnsatisfiable=DoNotSchedule"),
            spread.format(1, "labelSelector.matchLabels.tier=control"),
        )
    )

    zone, host = pod["topologySpreadConstraints"]
    assert zone == {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "kubeherd",
                "app.kubernetes.io/instance": "kh",
            }
        },
    }
    assert host["labelSelector"] == {"matchLabels": {"tier": "control"}}
    assert "topologySpreadConstraints" not in operator_pod(render_chart(binaries))


def test_peering_crds_are_kept_when_a_values_change_drops_them(binaries: Binaries) -> None:
    """Helm deletes what a release no longer renders, unless it is kept: scaling to one replica
    would delete the kinds, and every other Kopf operator's peering objects with them."""
    documents = render_chart(binaries, "--set=replicaCount=2")
    peering = [
        d
        for d in documents
        if d["kind"] == "CustomResourceDefinition" and d["spec"]["group"] == "kopf.dev"
    ]

    assert len(peering) == 2
    for crd in peering:
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


NAMESPACED_KINDS = {
    "pods", "configmaps", "serviceaccounts", "secrets", "events", "deployments", "replicasets",
    "controllerrevisions", "poddisruptionbudgets", "networkpolicies", "roles", "rolebindings",
    "leases", "kopfpeerings",
}  # fmt: skip


def test_an_operator_of_one_namespace_gets_no_cluster_wide_writes(binaries: Binaries) -> None:
    """operator.namespace: what it writes in namespaces is granted by Roles, there and in
    kube-system (a scheduler's authentication reader); cluster-wide, it only reads its own kinds."""
    documents = render_chart(binaries, "--set=operator.namespace=team", "--set=replicaCount=2")
    cluster_roles = [d for d in documents if operator_cluster_role(d)]

    for role in cluster_roles:
        for rule in role["rules"]:
            resources = {r.split("/")[0] for r in rule.get("resources", [])}
            assert not resources & NAMESPACED_KINDS, rule
            if resources & {"customdaemonsets", "schedulerprofiles"}:
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    roles = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in documents
             if d["kind"] == "Role"}  # fmt: skip
    assert roles == {
        ("team", "kh-kubeherd"),
        ("kube-system", "kh-kubeherd"),
        ("ops", "kh-kubeherd-webhook"),
    }
    (team,) = (
        d
        for d in documents
        if (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        == ("Role", "team", "kh-kubeherd")
    )
    granted = {r for rule in team["rules"] for r in rule["resources"]}
    assert {"pods", "deployments", "roles", "rolebindings", "kopfpeerings"} <= granted


def test_helm_test_checks_the_operator_with_a_narrow_identity(binaries: Binaries) -> None:
    def hooks(*values: str) -> dict[str, dict[str, Any]]:
        return {
            d["kind"]: d
            for d in render_chart(binaries, *values, hooks=True)
            if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"
        }

    default = hooks()
    assert set(default) == {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Pod"}
    assert default["Role"]["metadata"]["namespace"] == "ops"
    assert default["Role"]["rules"] == [
        {
            "apiGroups": ["kubeherd.io"],
            "resources": ["customdaemonsets"],
            "verbs": ["create", "get", "delete"],
        }
    ]
    pod = default["Pod"]["spec"]
    assert pod["serviceAccountName"] == default["ServiceAccount"]["metadata"]["name"]
    script = default["ConfigMap"]["data"]["helm_test.py"]
    assert script == (CHART / "files" / "helm_test.py").read_text()
    # Not counted as an operator pod by its Services, budget or NetworkPolicy.
    assert default["Pod"]["metadata"]["labels"]["app.kubernetes.io/name"] == "kubeherd-test"
    namespaced = hooks("--set=operator.namespace=team")
    assert namespaced["Role"]["metadata"]["namespace"] == "team"
    (env,) = (e for e in namespaced["Pod"]["spec"]["containers"][0]["env"]
              if e["name"] == "CHECK_NAMESPACE")  # fmt: skip
    assert env["value"] == "team"


def test_the_operators_identity_may_not_touch_nodes_or_secrets(
    kubectl: Kubectl, operator_kubeconfig: Path
) -> None:
    as_operator = kubectl.as_user(operator_kubeconfig)

    patched = as_operator(
        "patch", "node", "worker-1", "-p", '{"metadata":{"labels":{"x":"y"}}}', check=False
    )

    assert patched.returncode != 0
    assert "Forbidden" in patched.stderr or "forbidden" in patched.stderr
    answers = {
        question: as_operator("auth", "can-i", *question.split(), check=False).stdout.strip()
        for question in (
            "patch nodes",
            "get secrets -A",
            "delete customresourcedefinitions",
            "create pods -n default",
            "watch nodes",
        )
    }
    assert answers == {
        "patch nodes": "no",
        "get secrets -A": "no",
        "delete customresourcedefinitions": "no",
        "create pods -n default": "yes",
        "watch nodes": "yes",
    }


@pytest.fixture(scope="module")
def own_cluster(binaries: Binaries) -> Iterator[LocalCluster]:
    """A cluster for the chart alone: the session's cluster already has the release the tests
    run with, and its CRDs may not be uninstalled."""
    cluster = LocalCluster(REPO / ".cluster" / "pytest-chart", binaries, nodes=1)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


def test_install_upgrade_and_uninstall_keep_the_crds(
    binaries: Binaries, own_cluster: LocalCluster, tmp_path: Path
) -> None:
    kubeconfig = f"--kubeconfig={own_cluster.kubeconfig}"
    api = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    extensions = client.ApiextensionsV1Api(api)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)

    installed = helm(
        binaries, kubeconfig, "install", "kubeherd", str(CHART), "-n", "ops", "--create-namespace"
    )

    assert "kubectl -n ops rollout status deployment/kubeherd" in installed.stdout  # NOTES.txt
    deployment = apps.read_namespaced_deployment("kubeherd", "ops")
    assert deployment.spec.template.spec.service_account_name == "kubeherd"
    core.read_namespaced_service_account("kubeherd", "ops")
    rbac.read_cluster_role("kubeherd")
    rbac.read_cluster_role_binding("kubeherd")
    for name in CRDS:
        extensions.read_custom_resource_definition(name)

    # A new version of the chart whose CRD has a new printer column.
    changed = tmp_path / "kubeherd"
    shutil.copytree(CHART, changed)
    crd_file = changed / "files" / "crds" / "customdaemonsets.kubeherd.io.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    crd["spec"]["versions"][0]["additionalPrinterColumns"].append(
        {"name": "PAUSED", "type": "boolean", "jsonPath": ".spec.paused"}
    )
    crd_file.write_text(yaml.safe_dump(crd))
    helm(binaries, kubeconfig, "upgrade", "kubeherd", str(changed), "-n", "ops")

    upgraded = extensions.read_custom_resource_definition(CRDS[0])
    columns = [c.name for c in upgraded.spec.versions[0].additional_printer_columns]
    assert "PAUSED" in columns

    uninstalled = helm(binaries, kubeconfig, "uninstall", "kubeherd", "-n", "ops")

    assert "These resources were kept due to the resource policy" in uninstalled.stdout
    reads: list[tuple[Callable[..., Any], tuple[str, ...]]] = [
        (apps.read_namespaced_deployment, ("kubeherd", "ops")),
        (core.read_namespaced_service_account, ("kubeherd", "ops")),
        (rbac.read_cluster_role, ("kubeherd",)),
        (rbac.read_cluster_role_binding, ("kubeherd",)),
    ]
    for read, arguments in reads:
        with pytest.raises(ApiException) as gone:
            read(*arguments)
        assert gone.value.status == 404
    for name in CRDS:
        extensions.read_custom_resource_definition(name)


def test_two_peered_replicas_one_works_and_the_standby_takes_over(
    binaries: Binaries, own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The chart with replicaCount=2, and two `kubeherd run --peering` processes (kwok pods run
    nothing, so the replicas run here, with a token of the chart's ServiceAccount)."""
    kubeconfig = f"--kubeconfig={own_cluster.kubeconfig}"
    api = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    helm(
        binaries, kubeconfig, "upgrade", "--install", "kubeherd", str(CHART), "-n", "ha",
        "--create-namespace", "--take-ownership", "--set", "replicaCount=2",
        "--set", "peering.lifetime=10",
    )  # fmt: skip
    token = service_account_kubeconfig(own_cluster, core, "ha", "kubeherd", tmp_path)
    peered = ("--peering=kubeherd", "--peering-lifetime=10")
    first = OperatorProcess(own_cluster, name="replica-1", arguments=peered, kubeconfig=token)
    second = OperatorProcess(own_cluster, name="replica-2", arguments=peered, kubeconfig=token)
    nodes = TrackedFakeNodes(core)
    core.create_namespace({"metadata": {"name": "agents"}})
    try:
        first.start()
        eventually(lambda: "Active: no live replica" in first.output(), what="replica 1 active")
        second.start()
        eventually(lambda: "Standing by: replica" in second.output(), what="replica 2 waiting")

        def peering_entries() -> int:
            peering = custom.get_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", "kubeherd"
            )
            return len(peering.get("status") or {})

        # Both replicas renew their entries; replica 2 may log that it stands by (it read
        # replica 1's entry) a moment before Kopf writes its own.
        eventually(lambda: peering_entries() == 2, timeout=20, what="both peering entries")

        daemonsets = DaemonSets(custom, core, client.AppsV1Api(api), "agents")
        daemonsets.create(FLUENTD)
        (node,) = (n.metadata.name for n in core.list_node().items)
        daemonsets.wait_for_nodes("fluentd-elasticsearch", {node})

        created = "agents/fluentd-elasticsearch: SuccessfulCreate"
        assert created in first.output()
        assert "fluentd-elasticsearch" not in second.output()  # the standby did nothing

        first.kill()  # no goodbye: replica 2 waits for replica 1's entry to expire
        eventually(
            lambda: "Active: no live replica" in second.output(), timeout=40, what="takeover"
        )
        nodes.create([fake_node_manifest("joined-after-takeover", zone="zone-a")])
        daemonsets.wait_for_nodes("fluentd-elasticsearch", {node, "joined-after-takeover"})
        assert created in second.output()
    finally:
        first.stop()
        second.stop()
        nodes.restore()
        core.delete_namespace("agents")
        helm(binaries, kubeconfig, "uninstall", "kubeherd", "-n", "ha", check=False)


def test_the_operators_pods_take_traffic_only_on_their_own_ports(binaries: Binaries) -> None:
    def policy(*values: str) -> dict[str, Any] | None:
        documents = render_chart(binaries, *values)
        found = [d for d in documents if d["kind"] == "NetworkPolicy"]
        return found[0] if found else None

    default = policy()
    assert default is not None
    assert default["spec"]["policyTypes"] == ["Ingress"]
    ports = [rule["ports"][0]["port"] for rule in default["spec"]["ingress"]]
    assert ports == ["health", "webhook", "metrics"]
    monitoring = {"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}
    narrowed = policy(
        "--set", "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring"
    )
    assert narrowed is not None
    (metrics_rule,) = (r for r in narrowed["spec"]["ingress"] if r["ports"][0]["port"] == "metrics")
    assert metrics_rule["from"] == [monitoring]
    assert policy("--set", "networkPolicy.enabled=false") is None
