"""`kubeherd render schedulerprofile -f FILE`: the configuration without a cluster.

The file is read as `kubectl apply` would send it: first as strictly as the API server reads
it (a field the CRD does not have, a string or a bool where it has a number, are refused, not
coerced or dropped), then the schema (ranges, defaults) through the pydantic model, then the
CRD's CEL rules and kube-scheduler's own checks, with the messages the operator would give.
What is rendered is what was written. Nothing is contacted.
"""

from __future__ import annotations

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
from kubeherd.api.schedulerprofile import SchedulerProfile
from kubeherd.scheduler.config import (
    configuration_yaml,
    foreign_lock_namespace,
    lease_lock,
    render_configuration,
)
from kubeherd.scheduler.objects import (
    STATIC_POD_KUBECONFIG,
    STATIC_POD_PORT,
    is_custom_image,
    static_config_dir,
    static_pod,
)
from kubeherd.scheduler.validation import Problem, lock_problems, validate_spec
from kubeherd.scheduler.versions import release_version


class RenderError(Exception):
    pass


def load_profiles(path: Path) -> list[dict[str, Any]]:
    """Every SchedulerProfile in the file, with the API server's defaults filled in."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    except (OSError, yaml.YAMLError) as error:
        raise RenderError(f"cannot read {path}: {error}") from None
    profiles = [doc for doc in documents if doc.get("kind") == "SchedulerProfile"]
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
        # The API server takes a whole float (5.0) for an integer, as its validator does.
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
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
) -> None:
    for profile in load_profiles(path):
        metadata = profile.get("metadata") or {}
        name = str(metadata["name"])
        spec = profile["spec"]
        verdict = validate_spec(spec, custom_image=is_custom_image(spec))
        namespace = str(metadata.get("namespace") or "default")
        verdict.errors += lock_problems(lease_lock(spec, name, namespace))
        if elsewhere := foreign_lock_namespace(spec, namespace):
            verdict.errors.append(Problem("spec.leaderElection.resourceNamespace", elsewhere))
        if not verdict.valid:
            raise RenderError(f"SchedulerProfile {name} is invalid: {verdict.summary()}")
        for problem in verdict.warnings:
            warn.write(f"warning: {problem}\n")
        if static:
            version = _static_pod_version(spec, kubernetes_version, kubeconfig)
            out.write(
                f"# kube-scheduler {name} as a static Pod: save this in the node's "
                "/etc/kubernetes/manifests/,\n"
                f"# and its configuration in {static_config_dir(name)}/config.yaml:\n"
                f"#   kubeherd render schedulerprofile -f {path} "
                f"--kubeconfig {kubeconfig}\n"
                "# With leader election, the node's system:kube-scheduler user also needs "
                "get and update on its Lease.\n"
            )
            pod = static_pod(spec, name, version, port=port, kubeconfig=kubeconfig)
            out.write(yaml.safe_dump(pod, sort_keys=False))
        else:
            out.write(configuration_yaml(render_configuration(spec, name, namespace, kubeconfig)))
        out.write("---\n")


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
