"""Values read the way Go and Kubernetes read them: Go's strict JSON decoding into typed
structs, Go durations, and Kubernetes label keys and values. Pure.

kube-scheduler decodes a configuration with Go's JSON decoder in strict mode: a field a struct
does not have (names are case-sensitive), a string where it wants a number, a bool where it wants
an int, a number that is not a whole one or does not fit in int32/int64 all stop it. It reads
its file with go-yaml first, which turns a whole float (5.0) into a JSON integer: so 5.0 is an
integer here as well, and 5.5 is not. A JSON null leaves a field unset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.scheduler.core.problems import Problem

# Every kind's apiVersion and kind: not worth listing among the fields a user may mean.
_TYPE_META_FIELDS = frozenset({"apiVersion", "kind"})


@dataclass(frozen=True)
class GoInt:
    bits: int

    @property
    def name(self) -> str:
        return f"int{self.bits}"


@dataclass(frozen=True)
class GoScalar:
    name: str  # "string", "bool", "float64" or "duration"


@dataclass(frozen=True)
class GoList:
    item: GoType


@dataclass(frozen=True)
class GoMap:
    value: GoType


@dataclass(frozen=True)
class GoStruct:
    name: str
    fields: Mapping[str, GoType]


GoType = GoInt | GoScalar | GoList | GoMap | GoStruct

# Which other decoder has a field (struct name, field name) that this one lacks, said as help:
# "it is in 1.35, 1.36", or "".
FieldHelp = Callable[[str, str], str]

INT32, INT64 = GoInt(32), GoInt(64)
STRING, BOOL, DURATION = GoScalar("string"), GoScalar("bool"), GoScalar("duration")
FLOAT64 = GoScalar("float64")
STRINGS = GoList(STRING)


def json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


_WANTED = {
    "int32": "a whole number from -2147483648 to 2147483647, without quotes",
    "int64": "a whole number without quotes",
    "string": "a string (quote it)",
    "bool": "true or false, without quotes",
    "float64": "a number without quotes",
    "duration": "a duration string such as 10s",
}


class GoDecoder:
    """Go's strict JSON decoding into a GoType: the decoded value (null as the zero value or
    None), with a Problem for every value Go would refuse."""

    def __init__(
        self, *, decoder: str = "kube-scheduler", elsewhere: FieldHelp | None = None
    ) -> None:
        self.problems: list[Problem] = []
        # Who decodes (`kube-scheduler 1.34`), and where else a field it lacks exists.
        self.decoder = decoder
        self.elsewhere = elsewhere

    def refuse(self, where: str, value: Any, wanted: str) -> None:
        self.problems.append(
            Problem(
                where, f"{json_kind(value)} cannot be decoded here: kube-scheduler wants {wanted}"
            )
        )

    def decode(self, where: str, value: Any, go_type: GoType) -> Any:
        if value is None:
            return None
        if isinstance(go_type, GoInt):
            return self._int(where, value, go_type)
        if isinstance(go_type, GoScalar):
            return self._scalar(where, value, go_type)
        if isinstance(go_type, GoList):
            if not isinstance(value, (list, tuple)):
                self.refuse(where, value, f"a list ({_WANTED.get(_name(go_type.item), 'items')})")
                return None
            return [
                _zero(go_type.item)
                if item is None
                else self.decode(f"{where}[{i}]", item, go_type.item)
                for i, item in enumerate(value)
            ]
        if isinstance(go_type, GoMap):
            if not isinstance(value, Mapping):
                self.refuse(where, value, "an object of strings")
                return None
            return {
                str(key): self.decode(f"{where}.{key}", item, go_type.value)
                for key, item in value.items()
            }
        return self._struct(where, value, go_type)

    def _int(self, where: str, value: Any, go_type: GoInt) -> int | None:
        whole: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            whole = value
        elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
            whole = int(value)
        limit = 2 ** (go_type.bits - 1)
        if whole is None or not -limit <= whole < limit:
            self.refuse(where, value, _WANTED[go_type.name])
            return None
        return whole

    def _scalar(self, where: str, value: Any, go_type: GoScalar) -> Any:
        if go_type.name == "bool":
            if isinstance(value, bool):
                return value
            self.refuse(where, value, _WANTED["bool"])
            return None
        if go_type.name == "float64":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                try:
                    number = float(value)
                except OverflowError:  # a whole number past float64's range
                    number = math.inf
                if math.isfinite(number):
                    return number
            self.refuse(where, value, _WANTED["float64"])
            return None
        if not isinstance(value, str):
            self.refuse(where, value, _WANTED[go_type.name])
            return None
        if go_type.name == "duration":
            try:
                return go_duration_seconds(value)
            except ValueError:
                self.problems.append(
                    Problem(
                        where, f"{value!r} is not a Go duration: write one such as 10s or 1m30s"
                    )
                )
                return None
        return value

    def _struct(self, where: str, value: Any, go_type: GoStruct) -> dict[str, Any] | None:
        if not isinstance(value, Mapping):
            self.refuse(where, value, f"an object ({go_type.name})")
            return None
        decoded: dict[str, Any] = {}
        for key, item in value.items():
            field_type = go_type.fields.get(str(key))
            if field_type is None:
                known = ", ".join(sorted(set(go_type.fields) - _TYPE_META_FIELDS))
                other = self.elsewhere(go_type.name, str(key)) if self.elsewhere else ""
                self.problems.append(
                    Problem(
                        f"{where}.{key}",
                        f"{go_type.name} has no field {key!r} in {self.decoder}"
                        f"{f' ({other})' if other else ''} (field names are case-sensitive; it "
                        f"has {known}): kube-scheduler refuses unknown fields, remove or rename it",
                    )
                )
                continue
            field_value = self.decode(f"{where}.{key}", item, field_type)
            if field_value is not None:
                decoded[str(key)] = field_value
        return decoded


def _name(go_type: GoType) -> str:
    return go_type.name if isinstance(go_type, (GoInt, GoScalar)) else ""


def _zero(go_type: GoType) -> Any:
    """What Go leaves in a list element given as null."""
    if isinstance(go_type, GoInt):
        return 0
    if isinstance(go_type, GoScalar):
        return {"string": "", "bool": False, "float64": 0.0}.get(go_type.name)
    if isinstance(go_type, GoStruct):
        return {}
    return None


_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
# As time.ParseDuration reads it: a number may start or end with its dot (".5s", "5.s"), and
# nothing around it is trimmed (" 2s" is refused).
_DURATION_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_DURATION_UNIT = r"(?:ns|us|µs|μs|ms|s|m|h)"
_GO_DURATION = re.compile(rf"([+-]?)((?:{_DURATION_NUMBER}{_DURATION_UNIT})+|0)")
_MAX_DURATION_SECONDS = (2**63 - 1) / 1e9


def go_duration_seconds(text: str) -> float:
    """A Go duration (time.ParseDuration) in seconds; ValueError if it is not one."""
    match = _GO_DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 15s or 1m30s")
    parts = re.findall(rf"({_DURATION_NUMBER})({_DURATION_UNIT})", match.group(2))
    seconds = sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
    if seconds > _MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is longer than a Go duration can be (about 292 years)")
    return -seconds if match.group(1) == "-" else seconds


_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_key_problems(key: str) -> list[str]:
    """What IsQualifiedName says about a label key (an optional DNS subdomain prefix and '/', then
    a name of at most 63 characters)."""
    parts = key.split("/")
    if len(parts) > 2:
        return ["a label key has at most one '/' (prefix/name, e.g. example.com/MyName)"]
    problems = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("the prefix before '/' must not be empty")
        elif len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            problems.append("the prefix before '/' must be a lower-case DNS subdomain")
    name = parts[-1]
    if not name:
        problems.append("the name part must not be empty")
    else:
        if len(name) > 63:
            problems.append("the name part must be at most 63 characters")
        if not _LABEL_NAME.fullmatch(name):
            problems.append(
                "the name part must consist of alphanumeric characters, '-', '_' or '.', and "
                "start and end with an alphanumeric character"
            )
    return problems


def label_value_problems(value: str) -> list[str]:
    problems = []
    if len(value) > 63:
        problems.append("a label value must be at most 63 characters")
    if value and not _LABEL_NAME.fullmatch(value):
        problems.append(
            "a label value must be empty or consist of alphanumeric characters, '-', '_' or '.', "
            "and start and end with an alphanumeric character"
        )
    return problems


def struct_named(go_type: GoType, name: str) -> Mapping[str, GoType] | None:
    """The fields of the struct called `name` within `go_type`, if there is one."""
    if isinstance(go_type, GoStruct):
        if go_type.name == name:
            return go_type.fields
        for field_type in go_type.fields.values():
            found = struct_named(field_type, name)
            if found is not None:
                return found
        return None
    if isinstance(go_type, (GoList, GoMap)):
        return struct_named(go_type.item if isinstance(go_type, GoList) else go_type.value, name)
    return None
