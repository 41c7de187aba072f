"""Daemon pod construction, with plain data: the pod the controller creates for one node."""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubeherd.daemonset.core.eligibility import (
    NodeInfo,
    default_daemon_tolerations,
    node_should_run,
)
from kubeherd.daemonset.core.pods import (
    NODE_ANNOTATION,
    OWNER_LABEL,
    REVISION_LABEL,
    DaemonPodMaker,
    build_daemon_pod,
    daemon_pod_name,
    target_node,
    template_hash,
)

CONTAINERS = [{"name": "agent", "image": "agent:1"}]
DEFAULT_TOLERATIONS = [t.to_dict() for t in default_daemon_tolerations(False)]
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def custom_daemon_set(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {"name": "agent", "namespace": "ops", "uid": "uid-1"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "agent"}, "annotations": {"team": "infra"}},
                "spec": {"containers": CONTAINERS, **spec},
            }
        },
    }


def pin(node: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}


def requiring(*terms: dict[str, Any]) -> dict[str, Any]:
    """An affinity whose required node affinity is the given terms."""
    node_selector = {"nodeSelectorTerms": list(terms)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": node_selector}}


def required_terms(pod: dict[str, Any]) -> Any:
    node_affinity = pod["spec"]["affinity"]["nodeAffinity"]
    return node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


# the spec


def test_the_pod_is_pinned_to_its_node_by_required_node_affinity() -> None:
    pod = build_daemon_pod(custom_daemon_set(), "n1", "r1")

    assert pod["spec"]["affinity"] == requiring(pin("n1"))


def test_the_templates_required_node_affinity_is_replaced_not_merged() -> None:
    disk = {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
    affinity = requiring(disk)

    pod = build_daemon_pod(custom_daemon_set(affinity=affinity), "n1", "r1")

    assert required_terms(pod) == [pin("n1")]


def test_preferred_node_affinity_and_pod_affinity_and_anti_affinity_are_kept() -> None:
    preferred = [
        {"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}}
    ]
    pod_terms = [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    ]
    affinity = {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pod_terms},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pod_terms},
    }

    pod = build_daemon_pod(custom_daemon_set(affinity=affinity), "n1", "r1")

    assert pod["spec"]["affinity"] == {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [pin("n1")]},
        },
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pod_terms},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pod_terms},
    }


def test_default_tolerations_follow_the_templates_own() -> None:
    own = {
        "key": "node-role.kubernetes.io/control-plane",
        "operator": "Exists",
        "effect": "NoSchedule",
    }

    pod = build_daemon_pod(custom_daemon_set(tolerations=[own]), "n1", "r1")

    assert pod["spec"]["tolerations"] == [own, *DEFAULT_TOLERATIONS]


def test_a_default_toleration_in_the_template_is_not_duplicated() -> None:
    own = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}

    pod = build_daemon_pod(custom_daemon_set(tolerations=[own]), "n1", "r1")

    assert pod["spec"]["tolerations"] == DEFAULT_TOLERATIONS


def test_host_network_pods_also_tolerate_an_unavailable_network() -> None:
    pod = build_daemon_pod(custom_daemon_set(hostNetwork=True), "n1", "r1")

    assert pod["spec"]["tolerations"][-1] == {
        "key": "node.kubernetes.io/network-unavailable",
        "operator": "Exists",
        "effect": "NoSchedule",
    }


def test_building_from_a_built_pods_spec_changes_nothing() -> None:
    first = build_daemon_pod(custom_daemon_set(hostNetwork=True), "n1", "r1")

    second = build_daemon_pod(custom_daemon_set(**first["spec"]), "n1", "r1")

    assert second["spec"] == first["spec"]


def test_the_rest_of_the_spec_is_kept_as_it_is() -> None:
    rest = {
        "schedulerName": "custom-scheduler",
        "nodeSelector": {"disk": "ssd"},
        "priorityClassName": "system-node-critical",
        "volumes": [{"name": "logs", "hostPath": {"path": "/var/log"}}],
    }

    pod = build_daemon_pod(custom_daemon_set(**rest), "n1", "r1")

    assert {k: v for k, v in pod["spec"].items() if k not in ("affinity", "tolerations")} == {
        "containers": CONTAINERS,
        **rest,
    }


def test_the_scheduler_binds_the_pod_so_no_node_name_is_set() -> None:
    pod = build_daemon_pod(custom_daemon_set(), "n1", "r1")

    assert "nodeName" not in pod["spec"]
    assert "schedulerName" not in pod["spec"]


def test_a_template_node_name_is_kept() -> None:
    pod = build_daemon_pod(custom_daemon_set(nodeName="n1"), "n1", "r1")

    assert pod["spec"]["nodeName"] == "n1"


def test_the_pod_is_eligible_on_its_node_only() -> None:
    spec = build_daemon_pod(custom_daemon_set(), "n1", "r1")["spec"]

    assert node_should_run(spec, NodeInfo("n1", {}, ())).should_run
    assert not node_should_run(spec, NodeInfo("n2", {}, ())).should_run


# the metadata


def test_the_pod_is_a_v1_pod_in_the_custom_daemon_sets_namespace() -> None:
    pod = build_daemon_pod(custom_daemon_set(), "n1", "r1")

    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert pod["metadata"]["namespace"] == "ops"
    assert re.fullmatch(r"agent-[a-z0-9]{5}", pod["metadata"]["name"])


def test_labels_are_the_templates_plus_owner_and_revision() -> None:
    pod = build_daemon_pod(custom_daemon_set(), "n1", "r1")

    assert pod["metadata"]["labels"] == {"app": "agent", OWNER_LABEL: "agent", REVISION_LABEL: "r1"}


def test_annotations_are_the_templates_plus_the_node() -> None:
    pod = build_daemon_pod(custom_daemon_set(), "n1", "r1")

    assert pod["metadata"]["annotations"] == {"team": "infra", NODE_ANNOTATION: "n1"}


def test_a_template_without_metadata_still_gets_owner_revision_and_node() -> None:
    cds = custom_daemon_set()
    del cds["spec"]["template"]["metadata"]

    metadata = build_daemon_pod(cds, "n1", "r1")["metadata"]

    assert metadata["labels"] == {OWNER_LABEL: "agent", REVISION_LABEL: "r1"}
    assert metadata["annotations"] == {NODE_ANNOTATION: "n1"}


def test_the_custom_daemon_set_is_the_controlling_owner() -> None:
    pod = build_daemon_pod(custom_daemon_set(), "n1", "r1")

    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeherd.io/v1alpha1",
            "kind": "CustomDaemonSet",
            "name": "agent",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_template_finalizers_are_copied_as_upstream_does() -> None:
    cds = custom_daemon_set()
    cds["spec"]["template"]["metadata"]["finalizers"] = ["example.com/keep"]

    assert build_daemon_pod(cds, "n1", "r1")["metadata"]["finalizers"] == ["example.com/keep"]
    assert "finalizers" not in build_daemon_pod(custom_daemon_set(), "n1", "r1")["metadata"]


def test_building_a_pod_does_not_change_the_custom_daemon_set() -> None:
    affinity = requiring()
    cds = custom_daemon_set(affinity=affinity, tolerations=[{"operator": "Exists"}])
    original = copy.deepcopy(cds)

    build_daemon_pod(cds, "n1", "r1")

    assert cds == original


def test_the_pod_shares_nothing_with_the_custom_daemon_set() -> None:
    cds = custom_daemon_set(volumes=[{"name": "logs", "emptyDir": {}}])
    original = copy.deepcopy(cds)
    pod = build_daemon_pod(cds, "n1", "r1")

    pod["metadata"]["labels"]["app"] = "changed"
    pod["spec"]["containers"][0]["image"] = "changed"
    pod["spec"]["volumes"][0]["emptyDir"]["medium"] = "Memory"

    assert cds == original


# names and hashes


def test_every_pod_gets_a_name_of_its_own() -> None:
    names = {daemon_pod_name("agent") for _ in range(200)}

    assert len(names) == 200


def test_the_pod_name_is_the_custom_daemon_set_name_and_five_characters() -> None:
    assert re.fullmatch(r"agent-[a-z0-9]{5}", daemon_pod_name("agent"))


def test_a_long_custom_daemon_set_name_is_cut_so_the_pod_name_fits_a_hostname() -> None:
    name = daemon_pod_name("a" * 200)

    assert len(name) == 63
    assert name.startswith("a" * 58)


DNS_LABELS = r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?){0,2}"


@given(st.from_regex(DNS_LABELS, fullmatch=True))
def test_the_pod_name_of_a_valid_custom_daemon_set_name_is_a_dns_subdomain(cds_name: str) -> None:
    name = daemon_pod_name(cds_name)

    assert DNS_SUBDOMAIN.fullmatch(name)
    assert len(name) == min(len(cds_name) + 6, 63)


def test_template_hash_is_ten_lowercase_letters_or_digits() -> None:
    assert re.fullmatch(r"[a-z0-9]{10}", template_hash(custom_daemon_set()["spec"]["template"]))


def test_template_hash_does_not_depend_on_key_order() -> None:
    forward = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": CONTAINERS}}
    backward = {"spec": {"containers": CONTAINERS}, "metadata": {"labels": {"b": "2", "a": "1"}}}

    assert template_hash(forward) == template_hash(backward)


def test_template_hash_changes_when_the_template_changes() -> None:
    template = custom_daemon_set()["spec"]["template"]
    changed = copy.deepcopy(template)
    changed["spec"]["containers"][0]["image"] = "agent:2"

    assert template_hash(changed) != template_hash(template)


# target node


def test_a_scheduled_pod_targets_its_node_name() -> None:
    pod = build_daemon_pod(custom_daemon_set(), "n1", "r1")
    pod["spec"]["nodeName"] = "n1"

    assert target_node(pod) == "n1"


def test_a_pending_pod_targets_the_node_its_affinity_pins_it_to() -> None:
    assert target_node(build_daemon_pod(custom_daemon_set(), "n1", "r1")) == "n1"


def test_a_pod_neither_scheduled_nor_pinned_targets_no_node() -> None:
    label_only = {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
    affinity = requiring(label_only)

    assert target_node({"spec": {}}) is None
    assert target_node({"spec": {"affinity": affinity}}) is None


def test_a_pin_naming_several_nodes_targets_no_node() -> None:
    several = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}
    affinity = requiring(several)

    assert target_node({"spec": {"affinity": affinity}}) is None


# one maker, many pods


def without_name(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod but its generated name, which differs from pod to pod by design."""
    pod = copy.deepcopy(pod)
    del pod["metadata"]["name"]
    return pod


def test_pods_of_one_maker_are_the_pods_built_one_by_one() -> None:
    cds = custom_daemon_set(affinity=requiring(pin("n9")), hostNetwork=True)
    maker = DaemonPodMaker.of(cds, "r1")
    assert [without_name(maker.pod(node)) for node in ("n1", "n2")] == [
        without_name(build_daemon_pod(cds, node, "r1")) for node in ("n1", "n2")
    ]


def test_pods_of_one_maker_do_not_share_what_differs_per_node() -> None:
    maker = DaemonPodMaker.of(custom_daemon_set(), "r1")
    first, second = maker.pod("n1"), maker.pod("n2")

    first["metadata"]["labels"]["extra"] = "x"
    first["metadata"]["annotations"]["extra"] = "x"
    first["metadata"]["ownerReferences"][0]["name"] = "other"
    first["spec"]["hostNetwork"] = True
    required_terms(first).append(pin("n3"))

    assert without_name(second) == without_name(build_daemon_pod(custom_daemon_set(), "n2", "r1"))
    assert without_name(maker.pod("n1")) == without_name(
        build_daemon_pod(custom_daemon_set(), "n1", "r1")
    )


def test_a_maker_keeps_its_own_copy_of_the_template() -> None:
    cds = copy.deepcopy(custom_daemon_set())
    maker = DaemonPodMaker.of(cds, "r1")
    cds["spec"]["template"]["spec"]["containers"][0]["image"] = "agent:2"
    cds["spec"]["template"]["metadata"]["labels"]["app"] = "changed"

    pod = maker.pod("n1")

    assert pod["spec"]["containers"][0]["image"] == "agent:1"
    assert pod["metadata"]["labels"]["app"] == "agent"
