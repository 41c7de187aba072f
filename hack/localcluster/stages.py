"""The kwok stages the local cluster runs: kwokctl's defaults plus one for images that cannot
be pulled, and one for SchedulerProfiles' judge pods.

kwok starts every pod it is given, whatever the image. Tests of stuck rollouts need pods that
never become ready, as a real kubelet leaves them when the image does not exist. Images under
the reserved `.invalid` top-level domain (RFC 2606) cannot be pulled on a real node either, so
here such pods stay Pending with `ImagePullBackOff`, and the usual stage skips them.

A judge pod runs a custom image's kube-scheduler on a configuration and ends: a fake node runs
no image, so here it ends as kube-scheduler does with a configuration it accepts. The refusals
are seen where images really run, on the real node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

UNPULLABLE_REGISTRY = "unpullable.invalid/"
_ANY_UNPULLABLE = f'.spec.containers.[].image | startswith("{UNPULLABLE_REGISTRY}")'


def _pod_stage(name: str, phase: str, *matches: dict[str, Any], status: str) -> dict[str, Any]:
    """A kwok Stage for pods not being deleted, in `phase`, that also match `matches`: their
    status becomes the `status` template."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": [phase]},
                    *matches,
                ]
            },
            "next": {"statusTemplate": status},
        },
    }


_IMAGE_PULL_BACKOFF_STAGE = _pod_stage(
    "pod-image-pull-backoff",
    "Pending",
    {"key": _ANY_UNPULLABLE, "operator": "In", "values": ["true"]},
    {
        "key": ".status.containerStatuses.[].state.waiting.reason",
        "operator": "NotIn",
        "values": ["ImagePullBackOff"],
    },
    status="""\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: Ready
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  state:
    waiting:
      reason: ImagePullBackOff
      message: {{ printf "Back-off pulling image %q" .image | Quote }}
{{ end }}
phase: Pending
""",
)


_JUDGE_ACCEPTS_STAGE = _pod_stage(
    "pod-judge-accepts",
    "Running",
    {"key": '.metadata.labels["kubeherd.io/judge"]', "operator": "Exists"},
    status="""\
{{ $now := Now }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: Succeeded
""",
)


# How many pods kwok v0.8 moves through their stages at once unless told otherwise.
KWOK_DEFAULT_POD_WORKERS = 4

# kwok v0.8's defaults for the options it defaults.
_KWOK_DEFAULT_OPTIONS: dict[str, Any] = {
    "cidr": "10.0.0.0/24",
    "manageAllNodes": False,
    "enableDebuggingHandlers": True,
    "enableContentionProfiling": False,
    "enableProfilingHandler": True,
    "podPlayStageParallelism": KWOK_DEFAULT_POD_WORKERS,
    "nodePlayStageParallelism": 4,
    "nodeLeaseParallelism": 4,
    "podsOnNodeSyncParallelism": 1,
    "enablePodsOnNodeSyncListPager": True,
    "enablePodsOnNodeSyncStreamWatch": False,
}


def write_stages(defaults: Path, target: Path, *, pod_stage_workers: int = 0) -> Path:
    """Write kwokctl's default stages from `defaults`, adjusted as described above, to `target`;
    with `pod_stage_workers`, also how many pods kwok moves through their stages at once (kwok's
    own default turns about 20 pods a second Running on a loaded 2-core machine)."""
    stages = [stage for stage in yaml.safe_load_all(defaults.read_text()) if stage]
    for stage in stages:
        if stage["metadata"]["name"] == "pod-ready":
            stage["spec"]["selector"]["matchExpressions"].append(
                {"key": _ANY_UNPULLABLE, "operator": "NotIn", "values": ["true"]}
            )
    stages += [_IMAGE_PULL_BACKOFF_STAGE, _JUDGE_ACCEPTS_STAGE]
    if pod_stage_workers:
        # kwok applies its defaults only when it is given no KwokConfiguration at all, so this
        # one spells out every defaulted option (flags still override it).
        options = {**_KWOK_DEFAULT_OPTIONS, "podPlayStageParallelism": pod_stage_workers}
        stages.append(
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                "options": options,
            }
        )
    target.write_text(yaml.safe_dump_all(stages, sort_keys=False))
    return target
