"""Which pods and ControllerRevisions a CustomDaemonSet claims, as the native controller claims
them: by its selector and by controller reference. An object matching the selector with no
controller is adopted; one it controls that no longer matches is released.

Pure: plain data in, plain data out (label selectors as the API server reads them, the JSON
patches that adopt or release, and which objects a pass adopts or releases).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.api.identifiers import LABEL_KEY_TEXT, LABEL_VALUE_TEXT, is_label_key, is_label_value
from kubeherd.daemonset.core.pods import OWNER_LABEL, REVISION_LABEL, target_node


class InvalidSelectorError(ValueError):
    """A selector the API server's ValidateLabelSelector would refuse. No query is built from
    it: a key such as `a,b` or a value such as `x),!app,(y` would read there as requirements
    other than the one written, and a release query could then match every daemon pod."""


_OPERATORS_WITH_VALUES = {"In", "NotIn"}
_OPERATORS_WITHOUT_VALUES = {"Exists", "DoesNotExist"}


def selector_problems(selector: Mapping[str, Any]) -> list[str]:
    """What ValidateLabelSelector would say about the selector; empty when it is valid."""
    problems: list[str] = []

    def check_key(where: str, key: Any) -> None:
        if not isinstance(key, str) or not is_label_key(key):
            problems.append(f"{where}: {key!r} is not a label key ({LABEL_KEY_TEXT})")

    def check_value(where: str, value: Any) -> None:
        if not isinstance(value, str) or not is_label_value(value):
            problems.append(f"{where}: {value!r} is not a label value ({LABEL_VALUE_TEXT})")

    for key, value in (selector.get("matchLabels") or {}).items():
        check_key("matchLabels", key)
        check_value(f"matchLabels[{key!r}]", value)
    for index, expression in enumerate(selector.get("matchExpressions") or ()):
        where = f"matchExpressions[{index}]"
        check_key(f"{where}.key", expression.get("key"))
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator in _OPERATORS_WITH_VALUES and not values:
            problems.append(f"{where}.values: must be given for {operator}")
        elif operator in _OPERATORS_WITHOUT_VALUES and values:
            problems.append(f"{where}.values: must be empty for {operator}")
        elif operator not in _OPERATORS_WITH_VALUES | _OPERATORS_WITHOUT_VALUES:
            problems.append(
                f"{where}.operator: {operator!r} is not In, NotIn, Exists or DoesNotExist"
            )
        for position, value in enumerate(values):
            check_value(f"{where}.values[{position}]", value)
    return problems


def _requirements(selector: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
    """The selector as (key, operator, values), matchLabels as `In` with one value."""
    found = [
        (key, "In", [str(value)]) for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or ():
        values = [str(value) for value in expression.get("values") or ()]
        found.append((str(expression.get("key")), str(expression.get("operator")), values))
    return found


def _query_requirements(selector: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
    """The requirements, once they are known to read back as written in a query."""
    problems = selector_problems(selector)
    if problems:
        raise InvalidSelectorError(f"invalid selector: {'; '.join(problems)}")
    return _requirements(selector)


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether labels match a label selector (matchLabels and matchExpressions)."""
    for key, operator, values in _requirements(selector):
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _requirement_text(key: str, operator: str, values: list[str]) -> str:
    listed = ",".join(values)
    return {
        "In": f"{key} in ({listed})",
        "NotIn": f"{key} notin ({listed})",
        "Exists": key,
        "DoesNotExist": f"!{key}",
    }[operator]


_NEGATION = {"In": "NotIn", "NotIn": "In", "Exists": "DoesNotExist", "DoesNotExist": "Exists"}


def selector_text(selector: Mapping[str, Any]) -> str:
    """The selector as a `labelSelector` query (`app in (agent),tier notin (x)`);
    InvalidSelectorError if it is not one the API server accepts."""
    return ",".join(
        _requirement_text(*requirement) for requirement in _query_requirements(selector)
    )


def outside_selector_texts(selector: Mapping[str, Any]) -> list[str]:
    """Queries that together find every object the selector does not match: one per
    requirement, negated (`notin` also matches an object without the label); InvalidSelectorError
    if it is not one the API server accepts."""
    return [
        _requirement_text(key, _NEGATION[operator], values)
        for key, operator, values in _query_requirements(selector)
    ]


def controller_uid(body: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller, or None when it has none (an orphan)."""
    for reference in (body.get("metadata") or {}).get("ownerReferences") or ():
        if reference.get("controller"):
            return str(reference.get("uid") or "")
    return None


def _escaped(label: str) -> str:
    return label.replace("~", "~0").replace("/", "~1")


def adoption_patch(
    body: Mapping[str, Any], reference: Mapping[str, Any], owner_name: str
) -> list[dict[str, Any]]:
    """A JSON patch making `reference` the controller of the orphan `body`, and giving it the
    owner label kubeherd watches by. Its `test`s make it fail if the object changed meanwhile
    (another controller adopted it first)."""
    metadata = body.get("metadata") or {}
    references = metadata.get("ownerReferences")
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": metadata.get("uid")},
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": metadata.get("resourceVersion"),
        },
    ]
    if references:
        operations.append(
            {"op": "add", "path": "/metadata/ownerReferences/-", "value": dict(reference)}
        )
    else:
        operations.append(
            {"op": "add", "path": "/metadata/ownerReferences", "value": [dict(reference)]}
        )
    if metadata.get("labels") is None:
        operations.append({"op": "add", "path": "/metadata/labels", "value": {}})
    operations.append(
        {"op": "add", "path": f"/metadata/labels/{_escaped(OWNER_LABEL)}", "value": owner_name}
    )
    return operations


def release_patch(body: Mapping[str, Any], owner_uid: str) -> list[dict[str, Any]]:
    """A JSON patch removing the owner's controller reference and the owner label."""
    metadata = body.get("metadata") or {}
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": metadata.get("uid")},
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": metadata.get("resourceVersion"),
        },
    ]
    for index, reference in enumerate(metadata.get("ownerReferences") or ()):
        if reference.get("uid") == owner_uid:
            operations.append({"op": "remove", "path": f"/metadata/ownerReferences/{index}"})
            break
    if OWNER_LABEL in (metadata.get("labels") or {}):
        operations.append({"op": "remove", "path": f"/metadata/labels/{_escaped(OWNER_LABEL)}"})
    return operations


def revision_adoptable(body: Mapping[str, Any]) -> bool:
    """A ControllerRevision kubeherd can take as one of its own: no controller, and a
    template hash label to recognise its pods by."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    return controller_uid(body) is None and bool(labels.get(REVISION_LABEL))


@dataclass(frozen=True)
class Claim:
    """One adoption or release: the object's name and the JSON patch that does it. An adopted
    pod's node and revision: until the watch shows the pod as this CustomDaemonSet's, its node
    must not get a second one."""

    name: str
    patch: list[dict[str, Any]]
    node: str | None = None
    revision: str = ""


@dataclass(frozen=True)
class PodCandidates:
    """The pods a claim may concern, as a pass read them: orphans its selector matches, and
    pods carrying its owner label that some requirement of its selector no longer matches."""

    orphans: tuple[Mapping[str, Any], ...] = ()
    outside: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class PodClaims:
    adopt: tuple[Claim, ...] = ()
    release: tuple[Claim, ...] = ()


def plan_pod_claims(
    candidates: PodCandidates, owner: Mapping[str, Any], reference: Mapping[str, Any]
) -> PodClaims:
    """Adopt the orphans (no controller, not being deleted), release the pods the owner
    controls outside its selector, as the native controller does. A pod found outside more
    than one requirement is released once."""
    name, uid = owner["metadata"]["name"], owner["metadata"]["uid"]
    adopt = []
    for orphan in candidates.orphans:
        metadata = orphan.get("metadata") or {}
        if controller_uid(orphan) is not None or metadata.get("deletionTimestamp"):
            continue
        revision = str((metadata.get("labels") or {}).get(REVISION_LABEL, ""))
        patch = adoption_patch(orphan, reference, name)
        adopt.append(Claim(metadata["name"], patch, target_node(orphan), revision))
    release: dict[str, Claim] = {}
    for found in candidates.outside:
        pod_name = found["metadata"]["name"]
        if controller_uid(found) == uid and pod_name not in release:
            release[pod_name] = Claim(pod_name, release_patch(found, uid))
    return PodClaims(tuple(adopt), tuple(release.values()))


def revision_adoptions(
    orphans: Iterable[Mapping[str, Any]], reference: Mapping[str, Any], owner_name: str
) -> list[Claim]:
    """The adoptions of orphan ControllerRevisions its selector found (`revision_adoptable`)."""
    return [
        Claim(orphan["metadata"]["name"], adoption_patch(orphan, reference, owner_name))
        for orphan in orphans
    ]
