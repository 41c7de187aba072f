"""Generated SchedulerProfile specs for the comparison with kube-scheduler's own verdict.

Deterministic (one seeded Random): valid and subtly invalid specs for every check kubeherd makes
before a rollout, and for what its schema and CEL rules refuse. Each case is only a spec; which
of them kube-scheduler accepts is what the test asks the real binary of each minor, never what
this module assumes. The same specs go to every minor, and they name every plugin, extension
point and args field of any minor's catalog, so that what one minor has and another lacks is
exercised.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from kubeherd.api.schedulerprofile_rules import EXTENSION_POINTS
from kubeherd.scheduler.core.catalog import Catalog, shipped

SEED = 16
Case = tuple[str, dict[str, Any]]
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def _catalogs() -> list[Catalog]:
    return [shipped().get(minor) for minor in shipped().minors]


def _every_plugin() -> list[str]:
    """Every plugin any minor has, builds or not, in a stable order."""
    names = {n for c in _catalogs() for n in (*c.plugins, *c.unbuildable_plugins)}
    return sorted(names)


def _removed_plugins() -> list[str]:
    return sorted({name for catalog in _catalogs() for name in catalog.removed_plugins})


def profile(name: str = "checked", **fields: Any) -> dict[str, Any]:
    return {"schedulerName": name, **fields}


def spec(*profiles: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"profiles": list(profiles) or [profile()], **fields}


def with_args(plugin: str, args: Any, **fields: Any) -> dict[str, Any]:
    return spec(profile(pluginConfig=[{"name": plugin, "args": args}], **fields))


# Values a Go decoder reads differently from Python: bools are not ints, quoted numbers are
# strings, whole floats are ints (via go-yaml), others are not; int32/int64 bounds.
INT_VALUES: tuple[Any, ...] = (0, 1, 5, 5.0, 5.5, "5", True, -1, 2**31 - 1, 2**31, 2**63, None)
STRING_VALUES: tuple[Any, ...] = ("", "System", 5, True, None, ["a"])
DURATIONS = ("0s", "1s", ".5s", "1m30s", "500ms", "-1s", "10", "1 s", "", "5.s", "1h", "0")
LABEL_KEYS = (
    "zone",
    "topology.kubernetes.io/zone",
    "Zone_1",
    "bad key",
    "-zone",
    "a/b/c",
    "/zone",
    "UPPER.example/zone",
    "x" * 63,
    "x" * 64,
    "example.com/" + "x" * 63,
    "y",
    "1e3",
)
RESOURCES_NAMES = ("cpu", "memory", "example.com/gpu", "bad name", "nvidia.com", "a/b/c")


def _args_cases(rng: random.Random) -> Iterator[Case]:
    for value in INT_VALUES:
        yield (
            f"hardPodAffinityWeight {value!r}",
            with_args("InterPodAffinity", {"hardPodAffinityWeight": value}),
        )
    for value in (101, 100, -1):
        yield (
            f"hardPodAffinityWeight {value}",
            with_args("InterPodAffinity", {"hardPodAffinityWeight": value}),
        )
    for value in (True, "true", 1, None):
        yield (
            f"ignorePreferredTerms {value!r}",
            with_args("InterPodAffinity", {"ignorePreferredTermsOfExistingPods": value}),
        )
    for percentage in (0, 10, 100, 101, -1, 5.0, "10"):
        for absolute in (0, 100, -1):
            yield (
                f"preemption {percentage!r}% {absolute!r}",
                with_args(
                    "DefaultPreemption",
                    {
                        "minCandidateNodesPercentage": percentage,
                        "minCandidateNodesAbsolute": absolute,
                    },
                ),
            )
    yield "preemption only 0 %", with_args("DefaultPreemption", {"minCandidateNodesPercentage": 0})
    yield (
        "preemption only 0 nodes",
        with_args("DefaultPreemption", {"minCandidateNodesAbsolute": 0}),
    )
    for value in (0, 600, -1, 2**31, 2**63, 1.5, "600"):
        yield (
            f"bindTimeoutSeconds {value!r}",
            with_args("VolumeBinding", {"bindTimeoutSeconds": value}),
        )
    for shape in _shapes(rng):
        yield f"volume shape {shape!r}", with_args("VolumeBinding", {"shape": shape})
    yield "volume shape null", with_args("VolumeBinding", {"shape": None})
    for name in ("filterTimeout", "bindingTimeout"):
        for duration in DURATIONS:
            yield f"DRA {name} {duration!r}", with_args("DynamicResources", {name: duration})
        yield f"DRA {name} as a number", with_args("DynamicResources", {name: 10})
    yield from _fit_cases(rng)
    yield from _spread_cases(rng)
    yield from _balanced_cases()
    yield from _affinity_cases(rng)
    yield from _type_meta_cases()


def _shapes(rng: random.Random) -> Iterator[list[Any]]:
    yield []
    yield [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
    yield [{"utilization": 100, "score": 10}, {"utilization": 0, "score": 0}]
    yield [{"utilization": 50, "score": 5}, {"utilization": 50, "score": 6}]
    yield [{"utilization": 0, "score": 11}]
    yield [{"utilization": 101, "score": 0}]
    yield [{"utilization": -1, "score": 0}]
    yield [{"utilization": "0", "score": 0}]
    yield [{"utilization": 0, "score": 0, "weight": 1}]
    for _ in range(4):
        points = sorted(rng.sample(range(0, 101), rng.randint(1, 4)))
        yield [{"utilization": u, "score": rng.randint(0, 11)} for u in points]


def _fit_cases(rng: random.Random) -> Iterator[Case]:
    def fit(args: Any) -> dict[str, Any]:
        return with_args("NodeResourcesFit", args)

    yield "fit no args", fit(None)
    yield "fit empty args", fit({})
    yield "fit empty scoringStrategy", fit({"scoringStrategy": {}})
    yield "fit null scoringStrategy", fit({"scoringStrategy": None})
    yield "fit scoringStrategy a string", fit({"scoringStrategy": "MostAllocated"})
    yield (
        "fit strategy without type",
        fit({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1}]}}),
    )
    for kind in ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio", "Fullest", ""):
        for shape in (None, *list(_shapes(rng))[:5]):
            strategy: dict[str, Any] = {"type": kind}
            if shape is not None:
                strategy["requestedToCapacityRatio"] = {"shape": shape}
            yield f"fit {kind} shape {shape!r}", fit({"scoringStrategy": strategy})
    yield (
        "fit RTC with an empty ratio",
        fit(
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {},
                }
            }
        ),
    )
    for weight in (0, 1, 100, 101, -1, 5.0, "1", True):
        yield (
            f"fit resource weight {weight!r}",
            fit(
                {
                    "scoringStrategy": {
                        "type": "MostAllocated",
                        "resources": [{"name": "cpu", "weight": weight}],
                    }
                }
            ),
        )
    for name in RESOURCES_NAMES:
        yield f"fit ignoredResources {name!r}", fit({"ignoredResources": [name]})
        yield f"fit ignoredResourceGroups {name!r}", fit({"ignoredResourceGroups": [name]})
    yield "fit ignoredResources a string", fit({"ignoredResources": "cpu"})
    yield "fit unknown field", fit({"scoringStrateg": {"type": "MostAllocated"}})
    yield "fit field of another case", fit({"ScoringStrategy": {"type": "MostAllocated"}})
    disabled_fit = {
        "multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]},
    }
    yield (
        "bad fit args on a disabled plugin",
        spec(
            profile(
                plugins=disabled_fit,
                pluginConfig=[{"name": "NodeResourcesFit", "args": {"scoringStrategy": {}}}],
            )
        ),
    )
    yield (
        "undecodable fit args on a disabled plugin",
        spec(
            profile(
                plugins=disabled_fit,
                pluginConfig=[{"name": "NodeResourcesFit", "args": {"scoringStrategy": 5}}],
            )
        ),
    )


def _spread_cases(rng: random.Random) -> Iterator[Case]:
    def constraint(**fields: Any) -> dict[str, Any]:
        return {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            **fields,
        }

    def spread(*constraints: Any, defaulting: Any = "List") -> dict[str, Any]:
        return with_args(
            "PodTopologySpread",
            {"defaultConstraints": list(constraints), "defaultingType": defaulting},
        )

    for defaulting in ("List", "System", "", "Zonal", None, 5):
        yield f"spread defaulting {defaulting!r}", spread(constraint(), defaulting=defaulting)
        yield (
            f"spread defaulting {defaulting!r} alone",
            with_args("PodTopologySpread", {"defaultingType": defaulting}),
        )
    for key in LABEL_KEYS:
        yield f"spread topologyKey {key!r}", spread(constraint(topologyKey=key))
    for skew in (0, 1, -1, 2.0, "1", True):
        yield f"spread maxSkew {skew!r}", spread(constraint(maxSkew=skew))
    for action in ("DoNotSchedule", "ScheduleAnyway", "", "Never", None):
        yield f"spread whenUnsatisfiable {action!r}", spread(constraint(whenUnsatisfiable=action))
    yield "spread with a selector", spread(constraint(labelSelector={}))
    yield "spread with a null selector", spread(constraint(labelSelector=None))
    yield (
        "spread with minDomains",
        spread(constraint(minDomains=2, whenUnsatisfiable="DoNotSchedule")),
    )
    yield "spread with matchLabelKeys", spread(constraint(matchLabelKeys=["app"]))
    yield "spread with an unknown field", spread(constraint(maxskew=1))
    yield "spread twice on one key", spread(constraint(), constraint(maxSkew=2))
    yield (
        "spread on one key, both actions",
        spread(constraint(), constraint(whenUnsatisfiable="DoNotSchedule")),
    )
    yield (
        "spread constraints a mapping",
        with_args("PodTopologySpread", {"defaultConstraints": {"a": 1}, "defaultingType": "List"}),
    )
    yield (
        "spread without skew",
        spread({"topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}),
    )
    for _ in range(6):
        picked = [
            constraint(
                topologyKey=rng.choice(LABEL_KEYS[:4]),
                whenUnsatisfiable=rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
                maxSkew=rng.randint(0, 3),
            )
            for _ in range(rng.randint(1, 3))
        ]
        yield f"spread random {picked!r}", spread(*picked)


def _balanced_cases() -> Iterator[Case]:
    def balanced(resources: Any) -> dict[str, Any]:
        return with_args("NodeResourcesBalancedAllocation", {"resources": resources})

    for weight in (None, 0, 1, 2, -1, 1.0, "1"):
        resource = {"name": "cpu"} if weight is None else {"name": "cpu", "weight": weight}
        yield f"balanced weight {weight!r}", balanced([resource])
    yield "balanced duplicate resources", balanced([{"name": "cpu"}, {"name": "cpu"}])
    yield "balanced two resources", balanced([{"name": "cpu"}, {"name": "memory"}])
    yield "balanced no resources", balanced([])
    yield "balanced resources a mapping", balanced({"cpu": 1})


def _affinity_cases(rng: random.Random) -> Iterator[Case]:
    def required(*expressions: Any, fields: Any = None) -> dict[str, Any]:
        term: dict[str, Any] = {"matchExpressions": list(expressions)}
        if fields is not None:
            term["matchFields"] = fields
        return with_args(
            "NodeAffinity",
            {
                "addedAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
        )

    operators = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Foo", "")
    value_sets: tuple[Any, ...] = ([], ["a"], ["1"], ["a", "b"], ["-5"], ["bad value"], ["x" * 64])
    for operator in operators:
        for values in value_sets:
            yield (
                f"affinity {operator} {values!r}",
                required({"key": "zone", "operator": operator, "values": values}),
            )
    for key in LABEL_KEYS:
        yield f"affinity key {key!r}", required({"key": key, "operator": "Exists"})
    for operator in ("In", "NotIn", "Exists"):
        for values in ([], ["node-1"], ["a", "b"]):
            yield (
                f"affinity field {operator} {values!r}",
                required(fields=[{"key": "metadata.name", "operator": operator, "values": values}]),
            )
    yield (
        "affinity field with any key",
        required(fields=[{"key": "spec.whatever", "operator": "In", "values": ["x"]}]),
    )
    for weight in (0, 1, 100, -5):
        yield (
            f"affinity preferred weight {weight}",
            with_args(
                "NodeAffinity",
                {
                    "addedAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": weight,
                                "preference": {
                                    "matchExpressions": [{"key": "zone", "operator": "Foo"}]
                                },
                            }
                        ]
                    }
                },
            ),
        )
    yield "affinity an empty term", required()
    yield "affinity unknown field", with_args("NodeAffinity", {"addedAffinity": {"required": {}}})
    yield "affinity values a string", required({"key": "zone", "operator": "In", "values": "a"})
    for _ in range(6):
        expression = {
            "key": rng.choice(LABEL_KEYS),
            "operator": rng.choice(operators),
            "values": rng.choice(value_sets),
        }
        yield f"affinity random {expression!r}", required(expression)


def _type_meta_cases() -> Iterator[Case]:
    for plugin in ("InterPodAffinity", "NodeResourcesFit", "VolumeBinding"):
        for api_version, kind in (
            ("kubescheduler.config.k8s.io/v1", f"{plugin}Args"),
            ("", ""),
            ("kubescheduler.config.k8s.io/v1beta3", f"{plugin}Args"),
            ("v1", f"{plugin}Args"),
            ("kubescheduler.config.k8s.io/v1", "NodeAffinityArgs"),
            (None, "Foo"),
            (None, 5),
        ):
            args: dict[str, Any] = {}
            if api_version is not None:
                args["apiVersion"] = api_version
            args["kind"] = kind
            yield f"{plugin} args {api_version!r} {kind!r}", with_args(plugin, args)
    yield "args a string", with_args("InterPodAffinity", "x")
    yield "args a list", with_args("InterPodAffinity", [])
    yield "args null", with_args("InterPodAffinity", None)
    yield "args of a plugin without args kind", with_args("TaintToleration", {"anything": 1})
    yield "args a string for a plugin without args kind", with_args("ImageLocality", "x")
    yield "args for an unknown plugin", with_args("NoSuchPlugin", {"a": 1})
    for removed in _removed_plugins():
        yield f"args for removed {removed}", with_args(removed, {})
    yield (
        "two pluginConfig entries for one plugin",
        spec(profile(pluginConfig=[{"name": "InterPodAffinity"}, {"name": "InterPodAffinity"}])),
    )


def _plugin_cases() -> Iterator[Case]:
    points = [point for point in EXTENSION_POINTS if point != "multiPoint"]
    plugin_sets: tuple[dict[str, Any], ...] = ({}, {"enabled": []}, {"disabled": [{"name": "*"}]})
    for point in EXTENSION_POINTS:  # some minors lack some points
        for plugin_set in plugin_sets:
            yield (
                f"point {point} {plugin_set!r}",
                spec(profile(plugins={point: plugin_set})),
            )
    for name in _every_plugin():
        for point in points:
            yield (
                f"{name} at {point}",
                spec(profile(plugins={point: {"enabled": [{"name": name}]}})),
            )
        yield (
            f"{name} under multiPoint",
            spec(profile(plugins={"multiPoint": {"enabled": [{"name": name}]}})),
        )
        yield (
            f"{name} disabled everywhere",
            spec(profile(plugins={"multiPoint": {"disabled": [{"name": name}]}})),
        )
    for removed in _removed_plugins():
        yield (
            f"removed {removed} at filter",
            spec(profile(plugins={"filter": {"enabled": [{"name": removed}]}})),
        )
    yield "an unknown plugin", spec(profile(plugins={"filter": {"enabled": [{"name": "Nope"}]}}))
    yield (
        "a plugin twice at one point",
        spec(
            profile(
                plugins={
                    "score": {"enabled": [{"name": "ImageLocality"}, {"name": "ImageLocality"}]}
                }
            )
        ),
    )
    for weight in (0, 1, 100, 1_000_000, 1_000_001, INT32_MAX, 2**31, -1):
        yield (
            f"score weight {weight}",
            spec(
                profile(
                    plugins={"score": {"enabled": [{"name": "ImageLocality", "weight": weight}]}}
                )
            ),
        )
    yield "no queueSort", spec(profile(plugins={"queueSort": {"disabled": [{"name": "*"}]}}))
    yield "no bind", spec(profile(plugins={"bind": {"disabled": [{"name": "*"}]}}))
    yield (
        "no bind via multiPoint",
        spec(profile(plugins={"multiPoint": {"disabled": [{"name": "DefaultBinder"}]}})),
    )
    yield (
        "all defaults off but sort and bind",
        spec(
            profile(
                plugins={
                    "multiPoint": {
                        "disabled": [{"name": "*"}],
                        "enabled": [{"name": "PrioritySort"}, {"name": "DefaultBinder"}],
                    }
                }
            )
        ),
    )
    yield (
        "preemption off at podGroupPostFilter",
        spec(
            profile(plugins={"podGroupPostFilter": {"disabled": [{"name": "DefaultPreemption"}]}})
        ),
    )
    yield from _queue_sort_cases()


def _queue_sort_cases() -> Iterator[Case]:
    sort = {"enabled": [{"name": "PrioritySort"}]}
    variants: tuple[Any, ...] = (
        None,
        {},
        {"enabled": []},
        {"disabled": []},
        {"enabled": [], "disabled": []},
        sort,
        {"enabled": [{"name": "PrioritySort", "weight": 0}]},
        {"enabled": [{"name": "PrioritySort", "weight": 1}]},
        {"disabled": [{"name": "*"}], "enabled": [{"name": "PrioritySort"}]},
    )
    for first in variants:
        for second in variants:
            profiles = []
            for name, plugin_set in (("a", first), ("b", second)):
                plugins = {} if plugin_set is None else {"queueSort": plugin_set}
                profiles.append(profile(name, plugins=plugins))
            yield f"queueSort {first!r} then {second!r}", spec(*profiles)
    for args_a, args_b in (
        (None, None),
        (None, {}),
        ({}, {}),
        ({"a": 1}, {"a": 1}),
        ({"a": 1}, None),
    ):
        profiles = [
            profile(
                name,
                plugins={"queueSort": sort},
                pluginConfig=[{"name": "PrioritySort", "args": args}],
            )
            for name, args in (("a", args_a), ("b", args_b))
        ]
        yield f"queueSort args {args_a!r} then {args_b!r}", spec(*profiles)
    yield from _queue_sort_args_cases()


def _queue_sort_args_cases() -> Iterator[Case]:
    """The default queueSort (PrioritySort under multiPoint) with args in some profiles: all
    profiles share one queue, so kube-scheduler wants one configuration of its sorter."""
    absent = object()
    variants: tuple[tuple[Any, Any], ...] = (
        (absent, absent),
        (None, absent),
        ({}, absent),
        (absent, {}),
        ({"a": 1}, absent),
        (absent, {"a": 1}),
        ({"a": 1}, {"a": 1}),
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1, "b": [2]}, {"b": [2], "a": 1}),
        ({"a": 1}, {"a": 2}),
        ({"a": True}, {"a": 1}),
        ({}, {}),
        ([], []),
    )
    for args_a, args_b in variants:
        profiles = []
        for name, args in (("a", args_a), ("b", args_b)):
            entries = [] if args is absent else [{"name": "PrioritySort", "args": args}]
            profiles.append(profile(name, pluginConfig=entries) if entries else profile(name))
        shown = [None if args is absent else args for args in (args_a, args_b)]
        yield f"default queueSort args {shown[0]!r} then {shown[1]!r}", spec(*profiles)
    yield (
        "default queueSort args in the third profile only",
        spec(
            profile("a"),
            profile("b"),
            profile("c", pluginConfig=[{"name": "PrioritySort", "args": {"a": 1}}]),
        ),
    )


def _election_cases(rng: random.Random) -> Iterator[Case]:
    pairs = [
        ("10s", "2s"),
        ("10s", "8s"),
        ("10s", "9s"),
        ("12s", "10s"),
        ("1200ms", "1s"),
        ("1201ms", "1s"),
        ("6s", "5s"),
        ("10s", "8333ms"),
        ("10s", "8334ms"),
        ("1m", "10s"),
    ]
    for renew, retry in pairs:
        for elect in (True, False):
            yield (
                f"election renew {renew} retry {retry} elect {elect}",
                spec(
                    leaderElection={
                        "leaderElect": elect,
                        "leaseDuration": "2m",
                        "renewDeadline": renew,
                        "retryPeriod": retry,
                    }
                ),
            )
    for _ in range(8):
        retry_ms = rng.randint(100, 5000)
        renew_ms = rng.randint(retry_ms, retry_ms * 2)
        yield (
            f"election random {renew_ms}ms/{retry_ms}ms",
            spec(
                leaderElection={
                    "leaseDuration": f"{renew_ms + 1000}ms",
                    "renewDeadline": f"{renew_ms}ms",
                    "retryPeriod": f"{retry_ms}ms",
                }
            ),
        )
    yield (
        "election lease not above renew, elect off",
        spec(leaderElection={"leaderElect": False, "leaseDuration": "5s"}),
    )
    yield (
        "election durations with dots",
        spec(leaderElection={"leaseDuration": "15.s", "renewDeadline": ".5m", "retryPeriod": "2s"}),
    )
    for lease, renew, retry in (
        ("+1m", "30s", "5s"),
        ("1h0m0.5s", "1m", "1m30ms"),
        ("2m", "1m", "50000000000ns"),
        ("2m", "1m", "-1s"),
        ("0", "10s", "2s"),
    ):
        yield (
            f"election {lease}/{renew}/{retry}",
            spec(
                leaderElection={
                    "leaseDuration": lease,
                    "renewDeadline": renew,
                    "retryPeriod": retry,
                }
            ),
        )


def _zero_and_unelected_cases() -> Iterator[Case]:
    """Durations of 0 (kube-scheduler's defaults replace them), timings that only matter with
    leader election, and the lock kind."""
    for key in ("leaseDuration", "renewDeadline", "retryPeriod"):
        for zero in ("0s", "0", "0ms", "-0s"):
            for elect in (True, False):
                yield (
                    f"election {key} {zero} elect {elect}",
                    spec(leaderElection={"leaderElect": elect, key: zero}),
                )
    for lease, renew, retry in (
        ("0s", "12s", "2s"),
        ("0s", "20s", "2s"),
        ("9s", "0s", "2s"),
        ("20s", "0s", "9s"),
        ("20s", "2s", "0s"),
        ("0s", "0s", "0s"),
        ("5s", "10s", "2s"),
        ("15s", "-1s", "2s"),
        ("15s", "10s", "-1s"),
        ("-1s", "10s", "2s"),
        ("15s", "10s", "9s"),
    ):
        for elect in (True, False):
            yield (
                f"election {lease}/{renew}/{retry} elect {elect}",
                spec(
                    leaderElection={
                        "leaderElect": elect,
                        "leaseDuration": lease,
                        "renewDeadline": renew,
                        "retryPeriod": retry,
                    }
                ),
            )
    for lock in ("leases", "endpoints", "endpointsleases", "configmaps", "", "Leases", 5):
        for elect in (True, False):
            yield (
                f"election resourceLock {lock!r} elect {elect}",
                spec(leaderElection={"leaderElect": elect, "resourceLock": lock}),
            )


def _int_range_cases() -> Iterator[Case]:
    """Whole numbers at and past the widths kube-scheduler decodes them into."""
    for value in (INT64_MAX, 2**63, 2**64, 2**31, 10**30):
        yield (
            f"podMaxBackoffSeconds {value}",
            spec(podInitialBackoffSeconds=1, podMaxBackoffSeconds=value),
        )
        yield (
            f"both backoffs {value}",
            spec(podInitialBackoffSeconds=value, podMaxBackoffSeconds=value),
        )
    for value in (1025, INT32_MAX, 2**31):
        yield f"parallelism {value}", spec(parallelism=value)
    for value in (101, 2**31):
        yield f"percentageOfNodesToScore {value}", spec(percentageOfNodesToScore=value)
        yield f"profile percentage {value}", spec(profile(percentageOfNodesToScore=value))


def _offered_elsewhere_cases() -> Iterator[Case]:
    """KubeSchedulerConfiguration fields a SchedulerProfile does not offer."""
    yield "enableProfiling", spec(enableProfiling=False)
    yield "delayCacheUntilActive", spec(delayCacheUntilActive=True)
    yield "an empty profile list", {"profiles": []}
    yield "a profile without a name", spec({})
    yield "schedulerName in upper case", spec(profile("Upper"))
    yield "args a string", with_args("PrioritySort", "x")


def _global_cases() -> Iterator[Case]:
    for parallelism in (1, 16, 1024):
        yield f"parallelism {parallelism}", spec(parallelism=parallelism)
    for initial, maximum in ((1, 10), (5, 5), (10, 1)):
        yield (
            f"backoff {initial}/{maximum}",
            spec(podInitialBackoffSeconds=initial, podMaxBackoffSeconds=maximum),
        )
    for percentage in (0, 50, 100):
        yield f"percentageOfNodesToScore {percentage}", spec(percentageOfNodesToScore=percentage)
        yield f"profile percentage {percentage}", spec(profile(percentageOfNodesToScore=percentage))
    for name in ("y", "n", "on", "1e3", "a.b", "default-scheduler"):
        yield f"schedulerName {name!r}", spec(profile(name))
    yield "two profiles", spec(profile("a"), profile("b"))
    yield "two profiles with one name", spec(profile("a"), profile("a"))


def generated_cases() -> list[Case]:
    rng = random.Random(SEED)  # noqa: S311 (test data, not secrets)
    cases = [
        *_args_cases(rng),
        *_plugin_cases(),
        *_election_cases(rng),
        *_zero_and_unelected_cases(),
        *_int_range_cases(),
        *_offered_elsewhere_cases(),
        *_global_cases(),
    ]
    # Unique names (a random pick may repeat a fixed one): numbered in order.
    return [(f"{index:03d} {name}", case) for index, (name, case) in enumerate(cases)]
