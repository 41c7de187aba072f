"""The API server's verdict on a CustomDaemonSet's pod template, from a dry-run create of the
pod the controller would make: which pod is asked about, how the answer reads as a review
(refused, with each field named as the template's, or allowed with warnings), and what a pass
takes from it (`template_verdict`). Used by the controller and by the admission webhook.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeherd.daemonset.core.pods import DaemonPodMaker

# The node the checked pod is pinned to. The dry run never binds it; a name no node has, so
# that the pod's name (derived from it, as the controller derives it) never meets a real one.
CHECKED_NODE = "kubeherd-admission-check"
CHECKED_REVISION = "admission"
# How the API server begins an admission webhook's refusal.
ADMISSION_WEBHOOK = 'admission webhook "'


@dataclass(frozen=True)
class Review:
    """The answer to one admission request: refused (with the message `kubectl apply` shows)
    or allowed, with warnings kubectl prints either way."""

    refusal: str = ""
    warnings: tuple[str, ...] = ()


ALLOWED = Review()


def checked_pod(cds: Mapping[str, Any]) -> dict[str, Any]:
    """The daemon pod the controller would create for the CustomDaemonSet, built as it builds
    them, but with the template's own affinity. The controller replaces the required node
    affinity with a term naming the node, which is always valid; the template's own terms
    decide which nodes are eligible, and the API server refuses a DaemonSet whose terms it
    cannot read (an operator `Foo`): they are checked as the user wrote them."""
    body = copy.deepcopy(dict(cds))
    metadata = body.setdefault("metadata", {})
    # A CREATE under review may lack them: the owner reference needs a uid, any will do.
    metadata.setdefault("uid", "00000000-0000-0000-0000-000000000000")
    metadata.setdefault("namespace", "default")
    pod = DaemonPodMaker.of(body, CHECKED_REVISION).pod(CHECKED_NODE)
    template_spec = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
    if "affinity" in template_spec:
        pod["spec"]["affinity"] = template_spec["affinity"]
    else:
        del pod["spec"]["affinity"]
    return pod


@dataclass(frozen=True)
class OperatorIdentity:
    """Who the operator runs as, and the Secrets that are its own: daemon pods, which it
    creates in their CustomDaemonSet's namespace, may borrow neither."""

    namespace: str = ""
    service_account: str = ""
    secrets: frozenset[str] = frozenset()

    @classmethod
    def of_user(cls, username: str, secrets: frozenset[str] = frozenset()) -> OperatorIdentity:
        """From the name the API server knows the operator by; a user that is no
        ServiceAccount (a developer's kubeconfig) lends pods nothing."""
        prefix, _, rest = username.partition("system:serviceaccount:")
        namespace, _, name = rest.partition(":")
        if prefix or not namespace or not name:
            return cls()
        return cls(namespace, name, secrets)


# An operator known by no ServiceAccount (a developer's own kubeconfig): nothing to borrow.
NO_IDENTITY = OperatorIdentity()


def borrowed_identity(pod: Mapping[str, Any], operator: OperatorIdentity) -> str | None:
    """Why the daemon pod would run with the operator's own rights, or None. As a native
    DaemonSet's pods may use any ServiceAccount of their namespace, so may these, except the
    operator's: that would give whoever may write a CustomDaemonSet there everything the
    operator may do, cluster-wide."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if not operator.namespace or metadata.get("namespace") != operator.namespace:
        return None
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    if account == operator.service_account:
        return (
            f"spec.template.spec.serviceAccountName: {account} is the kubeherd operator's own "
            "ServiceAccount: its pods may not run as it; choose another"
        )
    for index, volume in enumerate(spec.get("volumes") or ()):
        named = [(volume.get("secret") or {}).get("secretName")]
        named += [
            (source.get("secret") or {}).get("name")
            for source in (volume.get("projected") or {}).get("sources") or ()
        ]
        for secret in set(named) & operator.secrets:
            return (
                f"spec.template.spec.volumes[{index}]: the Secret {secret} is the kubeherd "
                "operator's own: its pods may not mount it"
            )
    return None


def template_field(field: str) -> str:
    """A field of the checked pod, named as the field of the CustomDaemonSet it comes from."""
    for pod_part, template_part in (
        ("spec", "spec.template.spec"),
        ("metadata.labels", "spec.template.metadata.labels"),
        ("metadata.annotations", "spec.template.metadata.annotations"),
        ("metadata.finalizers", "spec.template.metadata.finalizers"),
    ):
        if field == pod_part or field.startswith((f"{pod_part}.", f"{pod_part}[")):
            return template_part + field[len(pod_part) :]
    # The pod's name is the CustomDaemonSet's name and a suffix: the daemon pods' own field.
    return f"{field} (of the daemon pods)" if field else field


_QUOTED_POD_FIELD = re.compile(r'"((?:spec|metadata)[.\[][^"]*)"')


def no_verdict(status_code: int) -> bool:
    """Whether a dry-run's answer says nothing about the pod itself: the request failed, or
    the API server was overloaded, timed out or could not reach a webhook it must ask."""
    return status_code == 0 or status_code == 429 or status_code >= 500


def pod_template_review(status_code: int, status: Mapping[str, Any]) -> Review:
    """The review of a CustomDaemonSet from the API server's answer to its dry-run pod.

    Refused: what the API server finds invalid in the pod itself (422 Invalid, with one cause
    per field) or cannot decode (400, e.g. an unknown field, which `kubectl apply` of a
    DaemonSet refuses too). Allowed with a warning: a 403 Forbidden, which is admission of the
    namespace's present state (a ResourceQuota, a LimitRange, Pod Security, a ServiceAccount or
    PriorityClass not created yet), as the API server accepts such a DaemonSet and its pods
    wait; the same for another admission webhook's refusal of the pod; and any failure of the
    check itself, as an operator that cannot check never blocks.
    """
    if 200 <= status_code < 300 or status_code == 409:
        return ALLOWED
    message = str(status.get("message") or f"HTTP {status_code}")
    if ADMISSION_WEBHOOK in message:
        # Another webhook's verdict on pods (a policy engine's, or one that cannot dry-run):
        # the cluster's present policy, not the API server's own checks.
        return Review(warnings=(f"the daemon pods would be refused now: {message}",))
    if status_code == 422:
        causes = (status.get("details") or {}).get("causes") or []
        if causes:
            return Review(refusal=as_api_list([_cause_text(cause) for cause in causes]))
        return Review(refusal=_template_message(message))
    if status_code == 400:
        return Review(refusal=_template_message(message))
    if status_code == 403:
        return Review(
            warnings=(f"the daemon pods would be refused in this namespace now: {message}",)
        )
    return Review(warnings=(f"kubeherd could not check the pod template: {message}",))


def _cause_text(cause: Mapping[str, Any]) -> str:
    field = template_field(str(cause.get("field") or ""))
    text = str(cause.get("message") or cause.get("reason") or "")
    return f"{field}: {text}" if field else text


def _template_message(message: str) -> str:
    """The API server's message with the pod's fields named as the template's."""
    message = message.replace('Pod in version "v1" cannot be handled as a Pod', "pod template")
    return _QUOTED_POD_FIELD.sub(lambda m: f'"{template_field(m.group(1))}"', message)


def as_api_list(texts: Sequence[str]) -> str:
    """Several errors one per line, as kubectl shows the API server's own refusal of a
    DaemonSet with several invalid fields; one error as is."""
    if len(texts) == 1:
        return texts[0]
    return "".join(f"\n* {text}" for text in texts)


def judged_valid_before(body: Mapping[str, Any]) -> bool:
    """Whether the status says the template of this generation was accepted already: a status
    for this generation is written only once the API server judged its template, and it carries
    TemplateValid only while the template is refused. A restarted operator then sends no
    dry-run for templates that already run. A status written while the selector was refused
    (SelectorValid) says nothing about the template: it was not judged."""
    status = body.get("status") or {}
    if status.get("observedGeneration") != body["metadata"].get("generation"):
        return False
    unjudged = {"TemplateValid", "SelectorValid"}
    return not any(c.get("type") in unjudged for c in status.get("conditions") or ())


@dataclass(frozen=True)
class TemplateAnswer:
    """What a pass learned of its template from the API server: that the operator's own
    identity is not known yet, the identity the template would borrow (then nothing is asked:
    the API server would accept it), or the answer to the dry-run create."""

    template_hash: str
    identity_known: bool = True
    borrowed: str | None = None
    status: int = 0
    body: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TemplateVerdict:
    template_hash: str
    # Why the API server refuses the template; None: it accepts it (or gave no verdict).
    problem: str | None = None
    # Why there is no verdict yet; None: there is one.
    no_verdict: str | None = None
    # Whether the API server admitted the pod outright, as it would admit the real create:
    # its admission (quota, webhooks, policies) judges a dry run as the create itself. Not
    # so for a refusal the template is let through despite (a quota full now), nor for a
    # verdict a status recorded earlier.
    admitted: bool = False


def template_verdict(answer: TemplateAnswer) -> TemplateVerdict:
    """The verdict an answer gives. Not knowing is no yes: an invalid node affinity would read
    as "no node matches" and delete every pod, so a failed check is no verdict."""
    if not answer.identity_known:
        return TemplateVerdict(
            answer.template_hash, no_verdict="the operator's own identity is not known yet"
        )
    if answer.borrowed is not None:
        return TemplateVerdict(answer.template_hash, problem=answer.borrowed)
    if no_verdict(answer.status):
        message = str(answer.body.get("message") or f"HTTP {answer.status}")
        return TemplateVerdict(answer.template_hash, no_verdict=message)
    refusal = pod_template_review(answer.status, answer.body).refusal or None
    return TemplateVerdict(
        answer.template_hash, problem=refusal, admitted=200 <= answer.status < 300
    )
