"""`kubeherd render schedulerprofile -f FILE`: the configuration without a cluster.

The file is read as `kubectl apply` would send it: first as strictly as the API server reads
it (a field the CRD does not have, a string or a bool where it has a number, are refused, not
coerced or dropped), then the schema (ranges, defaults) through the pydantic model, then the
CRD's CEL rules and kube-scheduler's own checks, with the messages the operator would give:
those of the minor of spec.image, else of --kubernetes-version, else the newest minor kubeherd
knows. What is rendered is what was written. Nothing is contacted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pydantic
import yaml

from kubeherd.api.crd import SCHEDULER_PROFILE, openapi_schema
from kubeherd.api.identifiers import (
    DNS_LABEL_LENGTH,
    DNS_SUBDOMAIN_LENGTH,
    is_dns_label,
    is_dns_subdomain,
)
from kubeherd.api.schedulerprofile import SchedulerProfile, SchedulerProfileSpec
from kubeherd.names import SCHEDULERPROFILE
from kubeherd.scheduler.core.catalog import CatalogChoice, image_catalog, shipped
from kubeherd.scheduler.core.claims import lock_problems
from kubeherd.scheduler.core.config import (
    Lock,
    configuration_hash,
    configuration_yaml,
    foreign_lock_namespace,
    lease_lock,
    render_configuration,
)
from kubeherd.scheduler.core.images import scheduler_image
from kubeherd.scheduler.core.static_pod import (
    STATIC_CONFIG_ROOT,
    STATIC_POD_KUBECONFIG,
    STATIC_POD_PORT,
    static_config_dir,
    static_pod,
    static_pod_name,
)
from kubeherd.scheduler.core.validation import Problem, validate_spec
from kubeherd.scheduler.core.versions import release_version

# Where kube-system's system::leader-locking-kube-scheduler Role lets the node's
# system:kube-scheduler take any Lease.
LEADER_LOCKING_NAMESPACE = "kube-system"


class RenderError(Exception):
    pass


def load_profiles(path: Path) -> list[dict[str, Any]]:
    """Every SchedulerProfile in the file, with the API server's defaults filled in."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    except (OSError, yaml.YAMLError) as error:
        raise RenderError(f"cannot read {path}: {error}") from None
    profiles = [doc for doc in documents if doc.get("kind") == SCHEDULERPROFILE]
    if not profiles:
        raise RenderError(f"{path} holds no SchedulerProfile")
    loaded = []
    schema = openapi_schema(SCHEDULER_PROFILE)
    for document in profiles:
        strict = structural_problems(document, schema, "")
        if strict:
            raise RenderError("; ".join(strict))
        try:
            model = SchedulerProfile.model_validate(document)
        except pydantic.ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in error.errors()
            )
            raise RenderError(problems) from None
        _check_metadata(document.get("metadata") or {})
        loaded.append(model.model_dump(by_alias=True, exclude_none=True, mode="json"))
    return loaded


def schema_checked_spec(raw_spec: Any) -> tuple[dict[str, Any] | None, list[Problem]]:
    """A spec as the API server stores it (its schema's defaults filled in), or None and what
    its schema refuses (unknown fields, JSON types, ranges, patterns; the CEL rules are in
    validation.schema_problems)."""
    schema = openapi_schema(SCHEDULER_PROFILE)["properties"]["spec"]
    strict = structural_problems(raw_spec, schema, "spec")
    if strict:
        return None, [Problem(*problem.split(": ", 1)) for problem in strict]
    try:
        model = SchedulerProfileSpec.model_validate(raw_spec)
    except pydantic.ValidationError as error:
        return None, [
            Problem(".".join(["spec", *(str(part) for part in e["loc"])]), e["msg"])
            for e in error.errors()
        ]
    return model.model_dump(by_alias=True, exclude_none=True, mode="json"), []


def _check_metadata(metadata: dict[str, Any]) -> None:
    """The API server's checks of a name and namespace. A static Pod's configuration directory
    on the node is named after the profile, so a name such as `../../pki` must never get as
    far as a manifest."""
    name = str(metadata.get("name") or "")
    if not name:
        raise RenderError("metadata.name is required")
    if not is_dns_subdomain(name):
        raise RenderError(
            f"metadata.name {name!r} is not a DNS-1123 subdomain: lower-case letters, digits, "
            "'-' and '.', starting and ending with a letter or digit, at most "
            f"{DNS_SUBDOMAIN_LENGTH} characters"
        )
    namespace = metadata.get("namespace")
    if namespace is not None and not is_dns_label(str(namespace)):
        raise RenderError(
            f"metadata.namespace {namespace!r} is not a DNS-1123 label: lower-case letters, "
            f"digits and '-', starting and ending with a letter or digit, at most "
            f"{DNS_LABEL_LENGTH} characters"
        )


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def _type_problem(value: Any, schema: dict[str, Any], where: str) -> str | None:
    wanted = schema.get("type")
    if wanted is None or schema.get("x-kubernetes-int-or-string"):
        return None
    if wanted in ("integer", "number"):
        # The API server takes a whole float (5.0) for an integer, as its validator does, and
        # holds an integer as an int64: a wider one is a float to it, and not an integer.
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if isinstance(value, int) and not -(2**63) <= value < 2**63 and wanted == "integer":
            return f"{where or '.'}: {value!r} is past the int64 range of an integer"
        if is_number and (wanted == "number" or float(value).is_integer()):
            return None
    elif isinstance(value, _JSON_TYPES[wanted]):
        return None
    return f"{where or '.'}: {value!r} is not of type {wanted}: write it as one, without quotes"


def structural_problems(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    """What the API server's strict field validation refuses in `value` under the CRD's
    structural `schema`: unknown fields and values of another JSON type (no coercion)."""
    if value is None:
        return []
    problem = _type_problem(value, schema, where)
    if problem is not None:
        return [problem]
    problems: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            at = f"{where}.{key}" if where else str(key)
            if properties is not None and key in properties:
                problems += structural_problems(item, properties[key], at)
            elif isinstance(extra, dict):
                problems += structural_problems(item, extra, at)
            elif properties is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                problems.append(f"{at}: unknown field {key!r} (check its spelling and case)")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            problems += structural_problems(item, schema["items"], f"{where}[{index}]")
    return problems


def render(
    path: Path,
    *,
    static: bool,
    kubeconfig: str,
    out: TextIO,
    warn: TextIO,
    kubernetes_version: str = "",
    port: int = STATIC_POD_PORT,
    config_root: str = STATIC_CONFIG_ROOT,
) -> None:
    for index, profile in enumerate(load_profiles(path)):
        metadata = profile.get("metadata") or {}
        name = str(metadata["name"])
        spec = profile["spec"]
        choice = _catalog_choice(spec, kubernetes_version)
        verdict = validate_spec(spec, choice.catalog, by_image=choice.by_image)
        verdict.errors += choice.problems
        namespace = str(metadata.get("namespace") or "default")
        verdict.errors += lock_problems(lease_lock(spec, name, namespace))
        if elsewhere := foreign_lock_namespace(spec, namespace):
            verdict.errors.append(Problem("spec.leaderElection.resourceNamespace", elsewhere))
        if not verdict.valid:
            raise RenderError(f"SchedulerProfile {name} is invalid: {verdict.summary()}")
        for problem in verdict.warnings:
            warn.write(f"warning: {problem}\n")
        configuration = configuration_yaml(render_configuration(spec, name, namespace, kubeconfig))
        if static:
            node = StaticNode(kubeconfig, config_root, port + index, kubernetes_version)
            out.write(_static_manifest(path, profile, configuration, node, warn))
        else:
            out.write(configuration)
        out.write("---\n")


@dataclass(frozen=True)
class StaticNode:
    """The node a static scheduler runs on: where it finds its files, its port there, and the
    node's Kubernetes version."""

    kubeconfig: str
    config_root: str
    port: int
    kubernetes_version: str


def _static_manifest(
    path: Path, profile: dict[str, Any], configuration: str, node: StaticNode, warn: TextIO
) -> str:
    """The static Pod of a checked SchedulerProfile, after comments that say what to do."""
    metadata, spec = profile["metadata"], profile["spec"]
    name, namespace = str(metadata["name"]), str(metadata.get("namespace") or "default")
    version = _static_pod_version(spec, node.kubernetes_version, node.kubeconfig)
    _check_static_name(name)
    lock = lease_lock(spec, name, namespace)
    if _leads(spec) and lock.namespace != LEADER_LOCKING_NAMESPACE:
        warn.write(f"warning: {_lease_rights(lock)}\n")
    pod = static_pod(
        spec,
        name,
        version,
        port=node.port,
        kubeconfig=node.kubeconfig,
        config_root=node.config_root,
        config_hash=configuration_hash(configuration),
    )
    return _static_pod_header(path, name, lock, node) + yaml.safe_dump(pod, sort_keys=False)


def _leads(spec: dict[str, Any]) -> bool:
    return bool((spec.get("leaderElection") or {}).get("leaderElect", True))


def _static_pod_header(path: Path, name: str, lock: Lock, node: StaticNode) -> str:
    """The steps on the node, as comments the kubelet ignores."""
    config_dir = static_config_dir(name, node.config_root)
    pod = static_pod_name(name)
    return (
        f"# kube-scheduler {name} as a static Pod (kube-system/{pod}-<node name>). On the node,\n"
        "# first its configuration, which this manifest names by its hash:\n"
        f"#   mkdir -p {config_dir}\n"
        f"#   kubeherd render schedulerprofile -f {path} --kubeconfig {node.kubeconfig} \\\n"
        f"#     > {config_dir}/config.yaml\n"
        f"# then this manifest, as {pod}.yaml in the kubelet's static Pod folder\n"
        "# (/etc/kubernetes/manifests on kubeadm). Render and write both again after a change:\n"
        "# the new hash makes the kubelet restart it. Delete the manifest to stop it.\n"
        f"# Lease: {lock.namespace}/{lock.name}; health: https://127.0.0.1:{node.port}/livez\n"
    )


def _lease_rights(lock: Lock) -> str:
    """kube-system's system::leader-locking-kube-scheduler Role lets system:kube-scheduler take
    any Lease there; elsewhere its ClusterRole allows create, and get and update only on the
    Lease named kube-scheduler. Without get the scheduler stands by forever, Ready."""
    role = f"{lock.name}-lease"
    return (
        f"the Lease {lock.namespace}/{lock.name} is outside {LEADER_LOCKING_NAMESPACE}, where "
        "the node's scheduler user (system:kube-scheduler with kubeadm's scheduler.conf) may "
        "not get or update it, and so never leads. Grant it, or give the SchedulerProfile "
        f"metadata.namespace: {LEADER_LOCKING_NAMESPACE}:\n"
        f"  kubectl -n {lock.namespace} create role {role} --verb=get,update "
        f"--resource=leases.coordination.k8s.io --resource-name={lock.name}\n"
        f"  kubectl -n {lock.namespace} create rolebinding {role} --role={role} "
        "--user=system:kube-scheduler"
    )


def _check_static_name(name: str) -> None:
    """The kubelet names the mirror pod <pod>-<node name> and refuses a name past a DNS
    subdomain's length; room is left for a node name as long as a hostname label."""
    longest = DNS_SUBDOMAIN_LENGTH - len(static_pod_name("")) - len("-") - DNS_LABEL_LENGTH
    if len(name) > longest:
        raise RenderError(
            f"metadata.name is {len(name)} characters, a static Pod's at most {longest}: the "
            f"kubelet names its pod {static_pod_name('<name>')}-<node name>, which must fit "
            f"{DNS_SUBDOMAIN_LENGTH} characters with a node name of up to {DNS_LABEL_LENGTH}"
        )


def _catalog_choice(spec: dict[str, Any], kubernetes_version: str) -> CatalogChoice:
    """The minor whose checks apply: that of spec.image, else of --kubernetes-version (the
    cluster's), else the newest kubeherd knows."""
    if spec.get("image"):
        return image_catalog(str(spec["image"]))
    if not kubernetes_version:
        return CatalogChoice(shipped().newest())
    release = release_version(kubernetes_version)
    if release is None:
        raise RenderError(f"--kubernetes-version {kubernetes_version!r} names no release")
    return image_catalog(scheduler_image(spec, release))


def _static_pod_version(spec: dict[str, Any], kubernetes_version: str, kubeconfig: str) -> str:
    """The release whose official image the static Pod runs; the checks a static Pod needs
    because nothing corrects it later."""
    if not kubeconfig:
        raise RenderError(
            "a static Pod has no service account to log in with: give --kubeconfig (the "
            f"node's scheduler kubeconfig, {STATIC_POD_KUBECONFIG} on kubeadm)"
        )
    release = release_version(kubernetes_version) if kubernetes_version else None
    if kubernetes_version and release is None:
        raise RenderError(f"--kubernetes-version {kubernetes_version!r} names no release")
    if release is None and not spec.get("image"):
        raise RenderError(
            "give --kubernetes-version (the node's, as `kubelet --version` prints it) or "
            "spec.image: the scheduler must match the node's control plane"
        )
    return release or ""
