"""kubeherd's verdict against kube-scheduler's own, for every Kubernetes minor kubeherd has a
catalog of: the built kube-scheduler of that minor reads each rendered configuration, no cluster
needed, and kubeherd, judging with that minor's catalog, must accept exactly what it accepts.

How kube-scheduler is asked (it has no dry-run flag): phase 1 runs it with `--write-config-to`
against a dead API server, which decodes the file strictly, defaults and validates it, builds
every profile's plugins and exits 0 (anything else is a refusal). Phase 2, for configurations
that elect a leader, runs it again with `delayCacheUntilActive: true` and without
`--write-config-to`, so that it reaches the leader elector (which has a check of its own):
"Attempting to acquire leader lease" in its log means accepted, an exit means refused.

Besides the hand-written cases, a seeded generator (verdict_cases.py) makes about a thousand
specs, valid and subtly invalid, the same for every minor. A spec first meets the SchedulerProfile
schema, as `kubectl apply` and `kubeherd render` read it; a spec the schema refuses is still
given to kube-scheduler, as written, since the schema's refusals count as kubeherd's. Per minor,
the comparison fails on any case kubeherd calls Valid and kube-scheduler refuses, any exception,
any configuration rendered differently from what was written or read differently by
kube-scheduler, and any refusal of a configuration kube-scheduler accepts that is not one of the
DELIBERATE refusals below. It prints the counts and the time per minor.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeherd.scheduler.core.catalog import Catalog, shipped
from kubeherd.scheduler.core.config import configuration_yaml, render_configuration
from kubeherd.scheduler.core.pluginargs import go_duration_seconds
from kubeherd.scheduler.core.render import schema_checked_spec
from kubeherd.scheduler.core.validation import Problem, validate_spec
from tests.helpers import REPO, Kubectl
from tests.integration.verdict_cases import generated_cases

DEAD_API_SERVER = "http://127.0.0.1:1"
# Its leader elector's first line: "attempting ..." up to 1.34, "Attempting ..." after.
LEADER_ELECTOR_STARTED = "attempting to acquire leader lease"
WORKERS = 2  # the machine's cores
PHASE_TWO_ATTEMPTS = 2
MINORS = shipped().minors
# What kube-scheduler puts in place of a duration of 0.
LEADER_ELECTION_DEFAULTS = {"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"}
# Spec fields that are not kube-scheduler's: how kubeherd runs it.
RUN_FIELDS = frozenset(
    {
        "replicas",
        "image",
        "command",
        "resources",
        "nodeSelector",
        "tolerations",
        "priorityClassName",
        "imagePullSecrets",
        "extraClusterRoles",
    }
)


def example(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / name).read_text())["spec"]
    return spec


def profile(**fields: Any) -> dict[str, Any]:
    return {"profiles": [{"schedulerName": "checked", **fields}]}


def plugins(**points: Any) -> dict[str, Any]:
    return profile(plugins=points)


def plugin_args(plugin: str, **args: Any) -> dict[str, Any]:
    return profile(pluginConfig=[{"name": plugin, "args": args}])


def fit_args(**args: Any) -> dict[str, Any]:
    return plugin_args("NodeResourcesFit", **args)


def spread(*constraints: dict[str, Any], **args: Any) -> dict[str, Any]:
    return plugin_args("PodTopologySpread", defaultConstraints=list(constraints), **args)


ZONE_SPREAD = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}


VALID = {
    "minimal": profile(),
    "two profiles (seed 002)": example("schedulerprofile-two-profiles.yaml"),
    "MostAllocated packing": example("schedulerprofile-packing.yaml"),
    "LeastAllocated": fit_args(scoringStrategy={"type": "LeastAllocated"}),
    "a resource weight of 0 (read as 1)": fit_args(
        scoringStrategy={"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 0}]}
    ),
    "RequestedToCapacityRatio": fit_args(
        scoringStrategy={
            "type": "RequestedToCapacityRatio",
            "resources": [{"name": "cpu", "weight": 1}],
            "requestedToCapacityRatio": {
                "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
            },
        }
    ),
    "a default's weight changed": plugins(
        score={"enabled": [{"name": "TaintToleration", "weight": 9}]}
    ),
    "all defaults off but sort and bind": plugins(
        multiPoint={
            "disabled": [{"name": "*"}],
            "enabled": [{"name": "PrioritySort"}, {"name": "DefaultBinder"}],
        }
    ),
    "filter plugins re-listed (seed 000's first profile)": plugins(
        filter={
            "enabled": [{"name": "NodeResourcesFit"}, {"name": "NodeName"}],
            "disabled": [{"name": "TaintToleration"}],
        }
    ),
    "the same queueSort in every profile": {
        "profiles": [
            {
                "schedulerName": "a",
                "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}},
            },
            {
                "schedulerName": "b",
                "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}},
            },
        ]
    },
    "preemption from 0 % but at least 50 nodes": plugin_args(
        "DefaultPreemption", minCandidateNodesPercentage=0, minCandidateNodesAbsolute=50
    ),
    "hard pod affinity weight 0": plugin_args("InterPodAffinity", hardPodAffinityWeight=0),
    "listed spread constraints": spread(ZONE_SPREAD, defaultingType="List"),
    "an empty spread defaulting type (read as System)": plugin_args(
        "PodTopologySpread", defaultingType=""
    ),
    "a Go duration starting with its dot": plugin_args("DynamicResources", filterTimeout=".5s"),
    "balanced allocation weight 0 (read as 1)": plugin_args(
        "NodeResourcesBalancedAllocation", resources=[{"name": "cpu", "weight": 0}]
    ),
    "a DRA filter timeout of 0s": plugin_args("DynamicResources", filterTimeout="0s"),
    "args for a plugin that takes none": plugin_args("TaintToleration", anything=1),
}
INVALID = {
    "preemption with no candidates": plugin_args(
        "DefaultPreemption", minCandidateNodesPercentage=0, minCandidateNodesAbsolute=0
    ),
    "preemption above 100 %": plugin_args("DefaultPreemption", minCandidateNodesPercentage=101),
    "an unknown preemption arg": plugin_args("DefaultPreemption", minCandidates=1),
    "hard pod affinity weight 101": plugin_args("InterPodAffinity", hardPodAffinityWeight=101),
    "an unknown spread defaulting type": spread(defaultingType="Zonal"),
    "a Go duration with a space": plugin_args("DynamicResources", filterTimeout=" 1s"),
    "spread constraints with System defaulting": spread(ZONE_SPREAD),
    "a spread constraint with skew 0": spread({**ZONE_SPREAD, "maxSkew": 0}, defaultingType="List"),
    "a spread constraint with a selector": spread(
        {**ZONE_SPREAD, "labelSelector": {}}, defaultingType="List"
    ),
    "two spread constraints on one key": spread(
        ZONE_SPREAD, {**ZONE_SPREAD, "maxSkew": 2}, defaultingType="List"
    ),
    "balanced allocation weight 2": plugin_args(
        "NodeResourcesBalancedAllocation", resources=[{"name": "cpu", "weight": 2}]
    ),
    "a negative volume bind timeout": plugin_args("VolumeBinding", bindTimeoutSeconds=-1),
    "a DRA binding timeout under 1s": plugin_args("DynamicResources", bindingTimeout="0s"),
    "no bind plugin": plugins(bind={"disabled": [{"name": "DefaultBinder"}]}),
    "no queueSort plugin": plugins(queueSort={"disabled": [{"name": "*"}]}),
    "queueSort differs between profiles": {
        "profiles": [
            {"schedulerName": "a"},
            {
                "schedulerName": "b",
                "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}},
            },
        ]
    },
    "an unknown plugin": plugins(filter={"enabled": [{"name": "NoSuchPlugin"}]}),
    "seed 000's MyCustomPlugin with the stock image": plugins(
        filter={"enabled": [{"name": "MyCustomPlugin"}], "disabled": [{"name": "TaintToleration"}]}
    ),
    "a plugin at a point it does not implement": plugins(
        filter={"enabled": [{"name": "ImageLocality"}]}
    ),
    "a removed plugin": plugins(filter={"enabled": [{"name": "EBSLimits"}]}),
    "a plugin enabled twice": plugins(
        score={"enabled": [{"name": "ImageLocality"}, {"name": "ImageLocality"}]}
    ),
    "an unknown scoring strategy": fit_args(scoringStrategy={"type": "Fullest"}),
    "a resource weight of 101": fit_args(
        scoringStrategy={"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 101}]}
    ),
    "an unknown Fit arg": fit_args(scoringStrateg={"type": "MostAllocated"}),
}


# The cases above hold for every minor. These differ between minors: each with its verdict per
# minor, as that minor's kube-scheduler gives it (a minor not named: refused).
RATIO = {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}
BY_MINOR: dict[str, tuple[dict[str, Any], set[str]]] = {
    "GangScheduling (a plugin since 1.35)": (
        plugins(permit={"enabled": [{"name": "GangScheduling"}]}),
        {"1.35", "1.36", "1.37"},
    ),
    "DeferredPodScheduling (a plugin since 1.37)": (
        plugins(multiPoint={"enabled": [{"name": "DeferredPodScheduling"}]}),
        {"1.37"},
    ),
    "DynamicResources scoring (since 1.35)": (
        plugins(score={"enabled": [{"name": "DynamicResources", "weight": 3}]}),
        {"1.35", "1.36", "1.37"},
    ),
    "TaintToleration at preFilter (since 1.37)": (
        plugins(preFilter={"enabled": [{"name": "TaintToleration"}]}),
        {"1.37"},
    ),
    "placementGenerate (an extension point since 1.36)": (
        plugins(placementGenerate={"disabled": [{"name": "*"}]}),
        {"1.36", "1.37"},
    ),
    "NodeResourcesFit at placementScore (since 1.36)": (
        plugins(placementScore={"enabled": [{"name": "NodeResourcesFit"}]}),
        {"1.36", "1.37"},
    ),
    "podGroupPostFilter (an extension point since 1.37)": (
        plugins(podGroupPostFilter={"disabled": [{"name": "DefaultPreemption"}]}),
        {"1.37"},
    ),
    "DRA bindingTimeout (a field since 1.35, its gates on since 1.36)": (
        plugin_args("DynamicResources", bindingTimeout="5m"),
        {"1.36", "1.37"},
    ),
    "VolumeBinding shape (StorageCapacityScoring on since 1.37)": (
        plugin_args("VolumeBinding", shape=RATIO["shape"]),
        {"1.37"},
    ),
    "requestedToCapacityRatio with MostAllocated (refused since 1.36)": (
        fit_args(scoringStrategy={"type": "MostAllocated", "requestedToCapacityRatio": RATIO}),
        {"1.34", "1.35"},
    ),
}


# Refusals kubeherd makes on purpose although kube-scheduler would start, each a rule of the CRD
# (the API server refuses the resource before kubeherd sees it, so these never reach a cluster),
# with the reason a user is given in docs/schedulerprofile.md.
DELIBERATE: Mapping[str, Callable[[Problem], bool]] = {
    # kube-scheduler names a profile without a name, or the one it adds to an empty list, so.
    "default-scheduler is the cluster's own scheduler's name (CEL rule, at least one profile)": (
        lambda p: (
            "default-scheduler is the cluster's own scheduler" in p.message
            or (p.field == "spec.profiles" and "at least 1 item" in p.message)
            or (p.field.endswith(".schedulerName") and "required" in p.message.lower())
        )
    ),
    "a schedulerName pods can name: a DNS subdomain (CRD pattern)": lambda p: (
        p.field.endswith(".schedulerName") and "pattern" in p.message
    ),
    "KubeSchedulerConfiguration fields a SchedulerProfile does not offer (CRD fields)": lambda p: (
        p.field in ("spec.enableProfiling", "spec.delayCacheUntilActive")
        and "unknown field" in p.message
    ),
    "pluginConfig args that are not an object, even where ignored (CRD type)": lambda p: (
        p.field.endswith(".args") and "is not of type object" in p.message
    ),
}


@dataclass
class Outcome:
    name: str
    kubeherd_valid: bool = False
    kubeherd_says: str = ""
    accepted: bool = False
    log: str = ""
    schema_refused: bool = False
    rewrites: list[str] | None = None
    error: str = ""
    deliberate: str = ""


def run_kube_scheduler(binary: Path, configuration: Mapping[str, Any]) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="verdict-") as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(configuration_yaml(configuration))
        completed = Path(folder) / "completed.yaml"
        first = subprocess.run(
            [
                str(binary),
                f"--config={config}",
                f"--write-config-to={completed}",
                "--secure-port=0",
                f"--master={DEAD_API_SERVER}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if first.returncode != 0:
            return False, first.stderr[-1500:]
        written = completed.read_text()
        if not yaml.safe_load(written)["leaderElection"]["leaderElect"]:
            return True, written
        config.write_text(configuration_yaml({**configuration, "delayCacheUntilActive": True}))
        # A process that neither exits nor reaches its leader elector in time gave no verdict
        # (it happens, rarely, on a loaded machine): it is asked once more before that counts.
        for _attempt in range(PHASE_TWO_ATTEMPTS):
            accepted, log = _until_leader_elector(binary, config)
            if accepted is not None:
                return accepted, written if accepted else log
        return False, f"{log} ({PHASE_TWO_ATTEMPTS} times)"


def _until_leader_elector(binary: Path, config: Path) -> tuple[bool | None, str]:
    """Phase 2: whether kube-scheduler gets to its leader elector (then it is stopped), or None
    when it neither gets there nor exits within the deadline."""
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            [str(binary), f"--config={config}", "--secure-port=0", f"--master={DEAD_API_SERVER}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                log.seek(0)
                text = log.read()
                if LEADER_ELECTOR_STARTED in text.lower():
                    return True, text
                if process.poll() is not None:
                    log.seek(0)
                    return False, log.read()[-1500:]
                time.sleep(0.02)
            return None, "neither reached the leader elector nor exited within 30 s"
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    # Not a cleanup to hide: a kube-scheduler that ignores SIGTERM is a failure
                    # of the comparison (judge reports it as one).
                    process.kill()
                    process.wait()
                    raise RuntimeError(
                        "kube-scheduler did not exit within 10 s of SIGTERM"
                    ) from None


def raw_configuration(raw_spec: Mapping[str, Any]) -> dict[str, Any]:
    """What kube-scheduler would read of a spec the SchedulerProfile schema refuses: its
    configuration fields as written, beside the connection and lock kubeherd sets."""
    configuration = render_configuration({"profiles": []}, "checked", "default")
    del configuration["profiles"]
    election = raw_spec.get("leaderElection")
    configuration |= {
        key: value
        for key, value in raw_spec.items()
        if key not in RUN_FIELDS and key != "leaderElection"
    }
    if isinstance(election, Mapping):
        configuration["leaderElection"] = {**configuration["leaderElection"], **election}
    return configuration


def _without_empty(value: Any) -> Any:
    """Plugin sets written as {} mean what an absent one means; nulls are unset fields."""
    if isinstance(value, dict):
        kept = {key: _without_empty(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (None, {})}
    if isinstance(value, list):
        return [_without_empty(item) for item in value]
    return value


def _same_scalar(written: Any, completed: Any) -> bool:
    if isinstance(written, bool) or isinstance(completed, bool):
        return written is completed
    if isinstance(written, (int, float)) and isinstance(completed, (int, float)):
        return float(written) == float(completed)
    if isinstance(written, str) and isinstance(completed, str) and written != completed:
        try:  # in nanoseconds, as Go holds a Duration
            nanoseconds = round(go_duration_seconds(written) * 1e9)
            return nanoseconds == round(go_duration_seconds(completed) * 1e9)
        except ValueError:
            return False
    return bool(written == completed)


def _missing(written: Any, completed: Any, where: str) -> list[str]:
    """Where what was written is not in kube-scheduler's completed configuration (a zero value
    may have been defaulted, as kube-scheduler does)."""
    if written in (None, 0, "", False, [], {}):
        return []
    if isinstance(written, dict):
        if not isinstance(completed, dict):
            return [where]
        return [
            m for k, v in written.items() for m in _missing(v, completed.get(k), f"{where}.{k}")
        ]
    if isinstance(written, list):
        if not isinstance(completed, list) or len(completed) != len(written):
            return [where]
        return [
            m for i, v in enumerate(written) for m in _missing(v, completed[i], f"{where}[{i}]")
        ]
    return [] if _same_scalar(written, completed) else [f"{where}: {written!r} -> {completed!r}"]


def rewrites(
    spec: Mapping[str, Any], rendered: Mapping[str, Any], completed: str, catalog: Catalog
) -> list[str]:
    """How the rendered configuration, and kube-scheduler's reading of it, differ from `spec`."""
    found = []
    read_back = yaml.safe_load(configuration_yaml(rendered))
    for index, written in enumerate(spec["profiles"]):
        if _without_empty(read_back["profiles"][index]) != _without_empty(written):
            found.append(f"render rewrote profiles[{index}]: {read_back['profiles'][index]!r}")
    if not completed:
        return found
    result = yaml.safe_load(completed)
    for index, written in enumerate(spec["profiles"]):
        profile = result["profiles"][index]
        if profile["schedulerName"] != written["schedulerName"]:
            found.append(f"kube-scheduler read schedulerName {profile['schedulerName']!r}")
        configured = {e["name"]: e.get("args") for e in profile.get("pluginConfig") or []}
        for entry in written.get("pluginConfig") or []:
            # kube-scheduler keeps args only for the plugins it runs.
            kept = entry["name"] in configured
            typed = entry["name"] in catalog.args_types
            if kept and typed and isinstance(entry.get("args"), dict):
                found += _missing(
                    entry["args"],
                    configured.get(entry["name"]),
                    f"profiles[{index}].{entry['name']}",
                )
    election = result["leaderElection"]
    for key, default in LEADER_ELECTION_DEFAULTS.items():
        written_duration = spec["leaderElection"][key]
        # A duration of 0 is kube-scheduler's default, as its defaulting fills it in.
        expected = default if go_duration_seconds(written_duration) == 0 else written_duration
        if not _same_scalar(expected, election[key]):
            found.append(f"leaderElection.{key} {written_duration!r} read as {election[key]!r}")
    return found


def judge(binary: Path, catalog: Catalog, name: str, raw_spec: Mapping[str, Any]) -> Outcome:
    outcome = Outcome(name)
    try:
        spec, problems = schema_checked_spec(raw_spec)
        if spec is None:
            outcome.schema_refused = True
            configuration = raw_configuration(raw_spec)
        else:
            verdict = validate_spec(spec, catalog)
            problems = verdict.errors
            outcome.kubeherd_valid = verdict.valid
            configuration = render_configuration(spec, "checked", "default")
        outcome.kubeherd_says = "; ".join(str(problem) for problem in problems)
        reasons = {
            reason
            for problem in problems
            for reason, matches in DELIBERATE.items()
            if matches(problem)
        }
        if problems and all(any(m(p) for m in DELIBERATE.values()) for p in problems):
            outcome.deliberate = ", ".join(sorted(reasons))
        outcome.accepted, outcome.log = run_kube_scheduler(binary, configuration)
        if spec is not None:
            # kube-scheduler's reading matters for what kubeherd would roll out (a zero it
            # refuses, such as leaseDuration 0, kube-scheduler would default).
            completed = outcome.log if outcome.accepted and outcome.kubeherd_valid else ""
            outcome.rewrites = rewrites(spec, configuration, completed, catalog)
    except Exception as error:  # reported as a failure of the comparison
        outcome.error = f"{type(error).__name__}: {error}"
    return outcome


def compare(binary: Path, minor: str, cases: list[tuple[str, dict[str, Any]]]) -> list[Outcome]:
    catalog = shipped().get(minor)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(lambda case: judge(binary, catalog, *case), cases))


def disagreements(outcomes: list[Outcome]) -> tuple[Counter[str], list[str]]:
    counts: Counter[str] = Counter()
    failures = []
    for o in outcomes:
        if o.error:
            counts["exception"] += 1
            failures.append(f"{o.name}: kubeherd raised {o.error}")
        elif o.kubeherd_valid and not o.accepted:
            counts["Valid, but kube-scheduler refuses"] += 1
            failures.append(f"{o.name}: kubeherd says Valid, kube-scheduler refuses: {o.log}")
        elif not o.kubeherd_valid and o.accepted and o.deliberate:
            counts["deliberate refusal"] += 1
        elif not o.kubeherd_valid and o.accepted:
            counts["refused, but kube-scheduler accepts (undocumented)"] += 1
            failures.append(
                f"{o.name}: kubeherd refuses what kube-scheduler accepts: {o.kubeherd_says}"
            )
        elif o.schema_refused:
            counts["refused by the schema and by kube-scheduler"] += 1
        else:
            counts["agree: valid" if o.accepted else "agree: invalid"] += 1
        if o.rewrites:
            counts["silent rewrite"] += 1
            failures.append(f"{o.name}: rewritten: {'; '.join(o.rewrites)}")
    return counts, failures


@pytest.mark.parametrize("minor", MINORS)
def test_kubeherd_and_kube_scheduler_agree_on_generated_specs(
    minor: str, kube_scheduler_of: Callable[[str], Path]
) -> None:
    cases = generated_cases()
    started = time.monotonic()
    outcomes = compare(kube_scheduler_of(minor), minor, cases)
    counts, failures = disagreements(outcomes)

    electing = sum(
        1
        for case in cases
        if (case[1].get("leaderElection") or {}).get("leaderElect", True) is not False
    )
    release = shipped().get(minor).kubernetes
    print(
        f"\nkube-scheduler {minor} ({release}) vs kubeherd, {len(cases)} generated specs "
        f"({electing} electing a leader) in {time.monotonic() - started:.0f} s:"
    )
    for what in (
        "agree: valid",
        "agree: invalid",
        "refused by the schema and by kube-scheduler",
        "deliberate refusal",
        "Valid, but kube-scheduler refuses",
        "exception",
        "silent rewrite",
        "refused, but kube-scheduler accepts (undocumented)",
    ):
        print(f"  {what}: {counts[what]}")
    assert not failures, "\n".join(failures[:40])


def _hand_written() -> list[Any]:
    params = []
    for minor in MINORS:
        for name, spec in VALID.items():
            params.append(pytest.param(minor, spec, True, id=f"{minor}-valid-{name}"))
        for name, spec in INVALID.items():
            params.append(pytest.param(minor, spec, False, id=f"{minor}-invalid-{name}"))
        for name, (spec, valid_in) in BY_MINOR.items():
            params.append(pytest.param(minor, spec, minor in valid_in, id=f"{minor}-{name}"))
    return params


@pytest.mark.parametrize(("minor", "spec", "valid"), _hand_written())
def test_kubeherd_accepts_exactly_what_kube_scheduler_accepts(
    minor: str, spec: dict[str, Any], valid: bool, kube_scheduler_of: Callable[[str], Path]
) -> None:
    outcome = judge(kube_scheduler_of(minor), shipped().get(minor), "case", spec)

    assert not outcome.error
    assert outcome.accepted == valid, (
        f"kube-scheduler {minor} {'refused' if valid else 'accepted'} it: {outcome.log}"
    )
    assert outcome.kubeherd_valid == valid, f"kubeherd said: {outcome.kubeherd_says or 'valid'}"
    assert not outcome.rewrites


@pytest.mark.cluster
def test_the_static_pod_is_a_pod_the_api_server_accepts(kubectl: Kubectl) -> None:
    manifest = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubeherd.cli",
            "render",
            "schedulerprofile",
            "-f",
            str(REPO / "examples" / "schedulerprofile-packing.yaml"),
            "--static-pod",
            "--kubeconfig=/etc/kubernetes/scheduler.conf",
            "--kubernetes-version=v1.37.2",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    applied = subprocess.run(
        kubectl.command("apply", "--dry-run=server", "-f", "-"),
        input=manifest,
        capture_output=True,
        text=True,
        check=False,
    )

    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "pod/kubeherd-packing created (server dry run)"
