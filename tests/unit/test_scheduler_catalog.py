"""The scheduler catalogs: loading them, choosing one for an image, and the checks that differ
between minors because their catalogs differ.

Two small fixture catalogs (tests/unit/scheduler_catalogs, of made-up minors 1.40 and 1.41, in
the shipped catalogs' format) stand for an older and a newer minor: 1.41 has an extension point,
a plugin and an args field 1.40 lacks, and turns on a feature gate 1.40 has off. The shipped
catalogs are generated (hack/schedcatalog); the last tests only check that each of them loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubeherd.scheduler.core.catalog import (
    Catalog,
    CatalogError,
    Catalogs,
    catalog_from_json,
    image_catalog,
    shipped,
)
from kubeherd.scheduler.core.godecoding import FLOAT64, INT64, GoList, GoMap, GoStruct
from kubeherd.scheduler.core.validation import validate_spec

FIXTURES = Path(__file__).parent / "scheduler_catalogs"
OFFICIAL = "registry.k8s.io/kube-scheduler"


def fixtures() -> Catalogs:
    return Catalogs(
        [path.name for path in FIXTURES.iterdir()], lambda name: (FIXTURES / name).read_text()
    )


def older() -> Catalog:
    return fixtures().get("1.40")


def newer() -> Catalog:
    return fixtures().get("1.41")


def one_profile(**fields: Any) -> dict[str, Any]:
    return {"profiles": [{"schedulerName": "a", **fields}]}


def test_the_minors_are_the_catalog_files_in_version_order() -> None:
    catalogs = Catalogs(["1.9.json", "1.10.json", "README.md", "1.34.json"], lambda name: "")

    assert catalogs.minors == ("1.9", "1.10", "1.34")


def test_a_catalog_is_read_with_its_plugins_defaults_and_args_types() -> None:
    catalog = older()

    assert catalog.name == "kube-scheduler 1.40"
    assert catalog.kubernetes == "v1.40.3"
    assert catalog.plugins["PrioritySort"] == {"queueSort"}
    assert catalog.default_plugins["multiPoint"][1] == ("NodeResourcesFit", 1)
    assert catalog.removed_plugins == {"EBSLimits"}
    volume_binding = catalog.args_types["VolumeBinding"]
    assert volume_binding.fields["bindTimeoutSeconds"] == INT64
    shape = volume_binding.fields["shape"]
    assert isinstance(shape, GoList)
    assert isinstance(shape.item, GoStruct)
    assert shape.item.name == "UtilizationShapePoint"
    assert catalog.args_types["InterPodAffinity"].fields["weights"] == GoMap(FLOAT64)
    assert not catalog.gate("StorageCapacityScoring")
    assert newer().gate("StorageCapacityScoring")


def test_each_catalog_is_read_once() -> None:
    reads: list[str] = []

    def read(name: str) -> str:
        reads.append(name)
        return (FIXTURES / name).read_text()

    catalogs = Catalogs(["1.40.json"], read)
    catalogs.get("1.40")
    catalogs.get("1.40")

    assert reads == ["1.40.json"]


@pytest.mark.parametrize(
    ("spelled", "problem"),
    [("uint8", "'uint8' is not one kubeherd can decode"), ({"set": "string"}, "not a type")],
)
def test_a_type_the_reader_cannot_decode_stops_the_load(spelled: Any, problem: str) -> None:
    catalog = json.loads((FIXTURES / "1.40.json").read_text())
    catalog["argsTypes"]["VolumeBinding"]["fields"]["odd"] = spelled

    with pytest.raises(CatalogError, match=problem):
        catalog_from_json(catalog)


def test_a_catalog_filed_under_another_minor_is_refused() -> None:
    catalogs = Catalogs(["1.39.json"], lambda name: (FIXTURES / "1.40.json").read_text())

    with pytest.raises(CatalogError, match=r"1\.39\.json holds the catalog of 1\.40"):
        catalogs.get("1.39")


def test_an_official_image_is_judged_by_its_minors_catalog() -> None:
    choice = image_catalog(f"{OFFICIAL}:v1.40.9", fixtures())

    assert choice.catalog is not None
    assert choice.catalog.minor == "1.40"
    assert not choice.problems
    assert not choice.by_image


def test_an_official_image_older_than_every_catalog_is_refused_naming_the_minors() -> None:
    choice = image_catalog(f"{OFFICIAL}:v1.39.2", fixtures())

    assert choice.catalog is None
    (problem,) = choice.problems
    assert problem.field == "spec.image"
    assert "v1.39.2 is Kubernetes 1.39" in problem.message
    assert "validates configurations for 1.40, 1.41" in problem.message


def test_an_official_image_newer_than_every_catalog_is_left_to_the_image() -> None:
    choice = image_catalog(f"{OFFICIAL}:v1.42.0", fixtures())

    assert choice.catalog is None
    assert not choice.problems
    assert "Kubernetes 1.42, newer than the minors" in choice.by_image


def test_a_custom_image_is_left_to_the_image() -> None:
    choice = image_catalog("example.com/scheduler-plugins/kube-scheduler:v1.40.3", fixtures())

    assert choice.catalog is None
    assert not choice.problems
    assert "not the official kube-scheduler image" in choice.by_image


def test_an_official_image_of_no_release_is_refused() -> None:
    (problem,) = image_catalog(f"{OFFICIAL}:latest", fixtures()).problems

    assert "'latest' is not a release version" in problem.message


def test_a_plugin_a_minor_lacks_is_refused_naming_the_minors_that_have_it() -> None:
    spec = one_profile(plugins={"permit": {"enabled": [{"name": "GangScheduling"}]}})

    assert validate_spec(spec, newer()).valid
    (problem,) = validate_spec(spec, older()).errors
    assert problem.field == "spec.profiles[0].plugins.permit.enabled[0]"
    assert problem.message.startswith(
        "GangScheduling is not a plugin of kube-scheduler 1.40 (it is in 1.41)"
    )


def test_an_extension_point_a_minor_lacks_is_refused_naming_the_minor() -> None:
    spec = one_profile(plugins={"placementGenerate": {"disabled": [{"name": "*"}]}})

    assert validate_spec(spec, newer()).valid
    (problem,) = validate_spec(spec, older()).errors
    assert problem.field == "spec.profiles[0].plugins.placementGenerate"
    assert problem.message == (
        "placementGenerate is not an extension point of kube-scheduler 1.40 (it is in 1.41): "
        "remove it"
    )


def test_an_empty_plugin_set_at_a_point_a_minor_lacks_is_not_written_so_not_refused() -> None:
    assert validate_spec(one_profile(plugins={"placementGenerate": {}}), older()).valid


def test_an_args_field_a_minor_lacks_is_refused_naming_the_minors_that_have_it() -> None:
    spec = one_profile(
        pluginConfig=[{"name": "DynamicResources", "args": {"bindingTimeout": "5s"}}]
    )

    assert validate_spec(spec, newer()).valid
    (problem,) = validate_spec(spec, older()).errors
    assert problem.field == "spec.profiles[0].pluginConfig[0].args.bindingTimeout"
    assert (
        "DynamicResourcesArgs has no field 'bindingTimeout' in kube-scheduler 1.40 (it is in 1.41)"
        in problem.message
    )


def test_a_field_checked_only_behind_a_gate_is_refused_where_the_gate_is_off() -> None:
    spec = one_profile(
        pluginConfig=[
            {"name": "VolumeBinding", "args": {"shape": [{"utilization": 0, "score": 10}]}}
        ]
    )

    assert validate_spec(spec, newer()).valid
    (problem,) = validate_spec(spec, older()).errors
    assert problem.field == "spec.profiles[0].pluginConfig[0].args.shape"
    assert "StorageCapacityScoring feature gate is off by default in kube-scheduler 1.40" in (
        problem.message
    )


def test_a_plugin_a_minor_cannot_build_is_refused_with_the_frameworks_reason() -> None:
    spec = one_profile(plugins={"multiPoint": {"enabled": [{"name": "DeferredPodScheduling"}]}})

    (problem,) = validate_spec(spec, older()).errors

    assert problem.message.startswith(
        "DeferredPodScheduling cannot run in kube-scheduler 1.40 with its default feature gates "
        '(plugin "DeferredPodScheduling" is disabled'
    )


def test_without_a_catalog_only_the_checks_that_need_none_are_made() -> None:
    spec = one_profile(
        schedulerName="default-scheduler",
        plugins={"filter": {"enabled": [{"name": "NoSuchPlugin"}]}},
        pluginConfig=[{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": "x"}}],
    )

    verdict = validate_spec(spec, None, by_image="a custom image")

    assert verdict.judge_by_image
    assert verdict.by_image == "a custom image"
    assert [problem.field for problem in verdict.errors] == ["spec.profiles[0].schedulerName"]
    (warning,) = verdict.warnings
    assert "NoSuchPlugin is not an in-tree plugin of any kube-scheduler kubeherd knows" in (
        warning.message
    )


def test_a_catalog_judges_the_spec_itself() -> None:
    verdict = validate_spec(one_profile(), older(), by_image="unused")

    assert not verdict.judge_by_image
    assert verdict.by_image == ""


def test_kubeherd_ships_a_catalog_for_every_minor_it_names_and_each_loads() -> None:
    catalogs = shipped()

    assert catalogs.minors, "no catalog in operator/kubeherd/scheduler/catalogs"
    for minor in catalogs.minors:
        catalog = catalogs.get(minor)
        assert catalog.kubernetes.startswith(f"v{minor}.")
        assert "queueSort" in catalog.plugins["PrioritySort"]
        assert all(name in catalog.plugins for name, _ in catalog.default_plugins["multiPoint"])
