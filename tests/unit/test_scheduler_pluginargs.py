"""Plugin args read as kube-scheduler reads them: whatever the args hold, a verdict, never an
exception (tests/integration/test_scheduler_validation.py compares the verdicts with
kube-scheduler's own)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubeherd.scheduler.core.catalog import Catalog, shipped
from kubeherd.scheduler.core.godecoding import GoList, GoMap, GoStruct, GoType, label_key_problems
from kubeherd.scheduler.core.pluginargs import plugin_args_problems
from kubeherd.scheduler.core.validation import validate_spec

CATALOGS = [shipped().get(minor) for minor in shipped().minors]
PLUGINS_WITH_ARGS = sorted({plugin for catalog in CATALOGS for plugin in catalog.args_types})


def _field_names(go_type: GoType, names: set[str]) -> set[str]:
    if isinstance(go_type, GoStruct):
        for name, field_type in go_type.fields.items():
            names.add(name)
            _field_names(field_type, names)
    elif isinstance(go_type, GoList):
        _field_names(go_type.item, names)
    elif isinstance(go_type, GoMap):
        _field_names(go_type.value, names)
    return names


FIELD_NAMES = sorted(
    set().union(*(_field_names(t, set()) for c in CATALOGS for t in c.args_types.values()))
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(
        ["", "cpu", "10s", "-1s", "In", "List", "zone", "a/b", "RequestedToCapacityRatio"]
    )
    | st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


def _nowhere(_struct: str, _field: str) -> str:
    return ""


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CATALOGS), st.sampled_from(PLUGINS_WITH_ARGS), json_values, st.booleans())
def test_any_args_get_a_verdict_with_field_paths_never_an_exception(
    catalog: Catalog, plugin: str, args: Any, built: bool
) -> None:
    problems = plugin_args_problems(
        "args", plugin, args, built=built, catalog=catalog, elsewhere=_nowhere
    )

    assert all(problem.field.startswith("args") and problem.message for problem in problems)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CATALOGS), st.sampled_from(PLUGINS_WITH_ARGS), json_values)
def test_validate_spec_answers_for_any_args_without_falling_back(
    catalog: Catalog, plugin: str, args: Any
) -> None:
    spec = {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": plugin, "args": args}]}]}

    verdict = validate_spec(spec, catalog)

    assert not any("would not decode" in problem.message for problem in verdict.errors)


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("zone", True),
        ("topology.kubernetes.io/zone", True),
        ("Zone_1.a-b", True),
        ("x" * 63, True),
        ("x" * 64, False),
        ("-zone", False),
        ("bad key", False),
        ("/zone", False),
        ("a/b/c", False),
        ("UPPER.example/zone", False),
        ("", False),
        ("zone\n", False),
    ],
)
def test_label_keys_are_read_as_kubernetes_reads_qualified_names(key: str, valid: bool) -> None:
    assert (label_key_problems(key) == []) == valid
