"""What kubeherd says about a SchedulerProfile's spec before anything runs, with plain data.
(tests/integration/test_scheduler_validation.py checks the verdicts against kube-scheduler.)"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kubeherd.scheduler.core.catalog import shipped
from kubeherd.scheduler.core.claims import lock_problems
from kubeherd.scheduler.core.config import Lock
from kubeherd.scheduler.core.plugin_sets import effective_plugins
from kubeherd.scheduler.core.render import schema_checked_spec
from kubeherd.scheduler.core.validation import go_duration_seconds, validate_spec
from tests.helpers import REPO

# The checks of one minor, read from its shipped catalog (test_scheduler_catalog.py checks what
# differs between minors; tests/integration/test_scheduler_validation.py checks every minor
# against its own kube-scheduler).
V1_37 = shipped().get("1.37")


def spec_of(example: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / example).read_text())["spec"]
    return spec


def test_seed_000s_custom_plugin_is_refused_with_the_stock_image() -> None:
    verdict = validate_spec(spec_of("schedulerprofile-three-profiles.yaml"), V1_37)

    assert [str(problem) for problem in verdict.errors] == [
        "spec.profiles[1].plugins.filter.enabled[0]: MyCustomPlugin is not a plugin of "
        "kube-scheduler 1.37: check the spelling, or set spec.image to a scheduler build "
        "that has it"
    ]


def test_seed_000s_custom_plugin_is_accepted_with_a_warning_for_a_custom_image() -> None:
    verdict = validate_spec(spec_of("schedulerprofile-three-profiles.yaml"), None)

    assert verdict.valid
    assert verdict.judge_by_image
    assert [problem.field for problem in verdict.warnings] == [
        "spec.profiles[1].plugins.filter.enabled[0]"
    ]


def test_a_scheduler_name_used_by_another_profile_is_refused_naming_it() -> None:
    verdict = validate_spec(
        {"profiles": [{"schedulerName": "packer"}]},
        V1_37,
        taken_names={"packer": "SchedulerProfile ops/packing"},
    )

    (problem,) = verdict.errors
    assert problem.field == "spec.profiles[0].schedulerName"
    assert "SchedulerProfile ops/packing" in problem.message


def test_a_plugin_at_a_point_it_does_not_implement_says_where_it_fits() -> None:
    verdict = validate_spec(
        {
            "profiles": [
                {
                    "schedulerName": "a",
                    "plugins": {"bind": {"enabled": [{"name": "ImageLocality"}]}},
                }
            ]
        },
        V1_37,
    )

    assert [p.message for p in verdict.errors] == [
        "ImageLocality does not implement bind in kube-scheduler 1.37 (it implements score): "
        "enable it at one of those, or under multiPoint"
    ]


def test_disabling_the_only_binder_is_refused() -> None:
    verdict = validate_spec(
        {"profiles": [{"schedulerName": "a", "plugins": {"bind": {"disabled": [{"name": "*"}]}}}]},
        V1_37,
    )

    assert [p.field for p in verdict.errors] == ["spec.profiles[0].plugins.bind"]


def test_the_defaults_spread_to_the_points_their_plugins_implement() -> None:
    effective = effective_plugins(None, V1_37)

    assert effective["queueSort"] == ["PrioritySort"]
    assert effective["bind"] == ["DefaultBinder"]
    assert "NodeResourcesFit" in effective["filter"]
    assert "ImageLocality" not in effective["filter"]


def test_scoring_off_leaves_filtering_alone() -> None:
    off = {"preScore": {"disabled": [{"name": "*"}]}, "score": {"disabled": [{"name": "*"}]}}

    effective = effective_plugins(off, V1_37)

    assert effective["score"] == []
    assert effective["preScore"] == []
    assert effective["filter"] == effective_plugins(None, V1_37)["filter"]


def test_a_plugin_listed_at_its_point_replaces_its_multi_point_default() -> None:
    effective = effective_plugins(
        {"score": {"enabled": [{"name": "ImageLocality", "weight": 5}]}}, V1_37
    )

    assert effective["score"].count("ImageLocality") == 1


def test_the_catalog_knows_points_found_by_reflection_and_no_internal_ones() -> None:
    # The 1.37 framework's own placement of each plugin, as the generator reads it.
    assert "podGroupPostFilter" in V1_37.plugins["DefaultPreemption"]
    assert V1_37.plugins["GangScheduling"] == {"preEnqueue", "permit"}
    assert "preScore" not in V1_37.plugins["DynamicResources"]


def test_durations_are_read_as_go_reads_them() -> None:
    assert go_duration_seconds("1m30s") == 90
    assert go_duration_seconds("-1s") == -1
    assert go_duration_seconds("0") == 0
    # Go allows a number to start or end with its dot, and trims nothing.
    assert go_duration_seconds(".5s") == 0.5
    assert go_duration_seconds("1.s") == 1
    for refused in ("15", " 2s", "2s ", ".s"):
        with pytest.raises(ValueError, match="not a duration"):
            go_duration_seconds(refused)


def test_a_duration_without_a_unit_is_named_with_its_field() -> None:
    spec = {"profiles": [{"schedulerName": "a"}], "leaderElection": {"leaseDuration": "15"}}

    problems = [str(p) for p in validate_spec(spec, V1_37).errors]

    assert problems == [
        "spec.leaderElection.leaseDuration: '15' is not a duration such as 15s or 1m30s"
    ]


def test_args_a_plugin_does_not_have_are_refused_with_the_ones_it_has() -> None:
    spec = {
        "profiles": [
            {
                "schedulerName": "a",
                "pluginConfig": [{"name": "InterPodAffinity", "args": {"hardWeight": 5}}],
            }
        ]
    }

    (problem,) = validate_spec(spec, V1_37).errors

    assert problem.field == "spec.profiles[0].pluginConfig[0].args.hardWeight"
    assert "InterPodAffinityArgs has no field 'hardWeight'" in problem.message
    assert "it has hardPodAffinityWeight, ignorePreferredTermsOfExistingPods" in problem.message


@pytest.mark.parametrize(
    "component", ["kube-scheduler", "kube-controller-manager", "cloud-controller-manager"]
)
def test_the_leases_of_the_clusters_own_control_plane_are_refused(component: str) -> None:
    (problem,) = lock_problems(Lock(component, "kube-system"))

    assert problem.field == "spec.leaderElection.resourceName"
    assert f"kube-system/{component}" in problem.message


@pytest.mark.parametrize(
    "lock", [Lock("kube-scheduler", "team-a"), Lock("my-scheduler", "kube-system")]
)
def test_other_locks_are_accepted(lock: Lock) -> None:
    assert lock_problems(lock) == []


MINIMAL = {"profiles": [{"schedulerName": "extra-scheduler"}]}


@pytest.mark.parametrize(
    "flag",
    [
        "--leader-elect-resource-namespace=kube-system",
        "--leader_elect_resource_name=kube-scheduler",
        "--lock-object-namespace=kube-system",
        "--kubeconfig=/etc/kubernetes/scheduler.conf",
        "--authentication-skip-lookup",
        "--requestheader-client-ca-file=/ca.crt",
        "--config",
    ],
)
def test_a_command_flag_that_moves_the_lease_or_the_credentials_is_refused(flag: str) -> None:
    verdict = validate_spec({**MINIMAL, "command": ["kube-scheduler", "--v=2", flag]}, V1_37)

    (problem,) = verdict.errors
    assert problem.field == "spec.command[2]"
    assert "remove --leader-elect*" in problem.message


def test_a_command_with_harmless_flags_is_accepted() -> None:
    verdict = validate_spec(
        {**MINIMAL, "command": ["kube-scheduler", "--v=4", "--secure-port=10260"]},
        V1_37,
    )

    assert verdict.valid


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("cluster-admin", False),
        ("admin", False),
        ("edit", False),
        ("system:controller:job-controller", False),
        ("system:kube-scheduler", True),
        ("system:volume-scheduler", True),
        ("scheduler-plugins-podgroups", True),
    ],
)
def test_extra_cluster_roles_may_not_reach_past_scheduling(role: str, allowed: bool) -> None:
    verdict = validate_spec({**MINIMAL, "extraClusterRoles": [role]}, V1_37)

    assert verdict.valid is allowed
    assert [problem.field for problem in verdict.errors] == (
        [] if allowed else ["spec.extraClusterRoles[0]"]
    )


@pytest.mark.parametrize(
    "spec",
    [
        {
            "profiles": [
                {
                    "schedulerName": "x",
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {"scoringStrategy": "MostAllocated"}}
                    ],
                }
            ]
        },
        {
            "profiles": [
                {
                    "schedulerName": "x",
                    "pluginConfig": [
                        {"name": "PodTopologySpread", "args": {"defaultConstraints": {"a": 1}}}
                    ],
                }
            ]
        },
        {"profiles": [{"schedulerName": "x", "plugins": "nope"}]},
        {"profiles": "nope"},
    ],
)
def test_args_of_an_unexpected_shape_are_refused_not_raised(spec: dict[str, Any]) -> None:
    verdict = validate_spec(spec, V1_37)

    assert not verdict.valid
    assert verdict.summary()


def test_a_schedulerprofile_that_elects_claims_its_lease_beside_its_names() -> None:
    from kubeherd.scheduler.core.claims import claims_of

    def body(election: dict[str, Any]) -> dict[str, Any]:
        return {
            "metadata": {"name": "p", "namespace": "ops", "creationTimestamp": "t"},
            "spec": {"profiles": [{"schedulerName": "s"}], "leaderElection": election},
        }

    electing = {claim.scheduler_name for claim in claims_of(body({"resourceName": "lock"}))}
    assert electing == {"s", "Lease ops/lock"}
    alone = {claim.scheduler_name for claim in claims_of(body({"leaderElect": False}))}
    assert alone == {"s"}


def _one_profile(**fields: Any) -> dict[str, Any]:
    return {"profiles": [{"schedulerName": "a", **fields}]}


def test_a_bool_is_not_an_integer_in_plugin_args() -> None:
    spec = _one_profile(
        pluginConfig=[{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": True}}]
    )

    (problem,) = validate_spec(spec, V1_37).errors

    assert problem.field == "spec.profiles[0].pluginConfig[0].args.hardPodAffinityWeight"
    assert "a bool cannot be decoded here" in problem.message


def test_a_whole_float_is_an_integer_as_go_yaml_reads_it() -> None:
    spec = _one_profile(
        pluginConfig=[{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 5.0}}]
    )

    assert validate_spec(spec, V1_37).valid


def test_a_renew_deadline_within_the_leader_electors_jitter_is_refused() -> None:
    spec = {**_one_profile(), "leaderElection": {"renewDeadline": "10s", "retryPeriod": "9s"}}

    (problem,) = validate_spec(spec, V1_37).errors

    assert problem.field == "spec.leaderElection"
    assert "renewDeadline must be longer than 1.2 times retryPeriod" in problem.message


def test_an_empty_queue_sort_is_the_same_as_none_across_profiles() -> None:
    spec = {
        "profiles": [
            {"schedulerName": "a", "plugins": {"queueSort": {}}},
            {"schedulerName": "b", "plugins": {"queueSort": {"disabled": []}}},
            {"schedulerName": "c"},
        ]
    }

    assert validate_spec(spec, V1_37).valid


def test_args_for_a_removed_plugin_are_refused() -> None:
    (problem,) = validate_spec(_one_profile(pluginConfig=[{"name": "EBSLimits"}]), V1_37).errors

    assert problem.field == "spec.profiles[0].pluginConfig[0].name"
    assert "EBSLimits was removed" in problem.message


def _queue_sort_args(*args: Any) -> dict[str, Any]:
    """Profiles with the default queueSort, each giving PrioritySort these args (None: no
    pluginConfig entry)."""
    return {
        "profiles": [
            {"schedulerName": f"p{index}"}
            | ({} if a is None else {"pluginConfig": [{"name": "PrioritySort", "args": a}]})
            for index, a in enumerate(args)
        ]
    }


@pytest.mark.parametrize(
    "args", [({"a": 1}, None), (None, {}), ({"a": 1}, {"a": 2}), (None, None, {"a": True})]
)
def test_queue_sort_args_that_differ_between_profiles_are_refused(args: tuple[Any, ...]) -> None:
    (problem,) = validate_spec(_queue_sort_args(*args), V1_37).errors

    assert problem.field == f"spec.profiles[{len(args) - 1}].pluginConfig"
    assert "the args of the queueSort plugin PrioritySort must be the same" in problem.message


@pytest.mark.parametrize(
    "args", [(None, None), ({"a": 1}, {"a": 1.0}), ({"a": 1, "b": [2]}, {"b": [2], "a": 1})]
)
def test_queue_sort_args_kube_scheduler_reads_alike_are_one_configuration(
    args: tuple[Any, ...],
) -> None:
    assert validate_spec(_queue_sort_args(*args), V1_37).valid


@pytest.mark.parametrize(
    ("fields", "valid"),
    [
        ({"podMaxBackoffSeconds": 2**63 - 1}, True),
        ({"podMaxBackoffSeconds": 2**63}, False),
        ({"podInitialBackoffSeconds": 2**64, "podMaxBackoffSeconds": 2**64}, False),
        ({"parallelism": 2**31 - 1}, True),
        ({"parallelism": 2**31}, False),
    ],
)
def test_whole_numbers_must_fit_the_width_kube_scheduler_decodes_them_into(
    fields: dict[str, int], valid: bool
) -> None:
    spec, problems = schema_checked_spec({**_one_profile(), **fields})

    assert (spec is not None) is valid
    assert all(
        "less than or equal to" in problem.message or "past the int64 range" in problem.message
        for problem in problems
    )
