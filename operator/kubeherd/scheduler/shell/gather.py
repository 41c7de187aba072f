"""What a SchedulerProfile pass reads before it decides (`gather`), and after its writes, for
the status (`observe`). Each read is one the plan needs; which ones, the plan's own pure
helpers say (core/converge.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from kubeherd.kube.client import Kube
from kubeherd.kube.outcomes import KubeError
from kubeherd.scheduler.core.claims import Claim
from kubeherd.scheduler.core.converge import config_map_prune_due
from kubeherd.scheduler.core.images import scheduler_image
from kubeherd.scheduler.core.judging import judged_by_image
from kubeherd.scheduler.core.model import Given, Listed
from kubeherd.scheduler.core.objects import SCHEDULER_NAMES_ANNOTATION
from kubeherd.scheduler.core.owner import OWNER_UID_LABEL, Owner, owned_selector, selector_labels
from kubeherd.scheduler.core.report import Seen, is_scheduler_pod
from kubeherd.scheduler.core.status import holder_hostname, lease_leader, running_config_hash
from kubeherd.scheduler.core.versions import release_version
from kubeherd.scheduler.shell.kinds import (
    CONFIG_MAP,
    DEPLOYMENT,
    LEASE,
    POD,
    REPLICA_SET,
    prunable_places,
)
from kubeherd.scheduler.state import ProfileState


async def profile_image(kube: Kube, spec: Mapping[str, Any]) -> tuple[str | None, str]:
    """The image a SchedulerProfile runs: the spec's, else the official one of the cluster's
    release; or None and why not (the API server's version unread, or naming no release: a
    guessed tag would be an image that does not exist, or a scheduler of another version)."""
    if spec.get("image"):
        return scheduler_image(spec), ""
    try:
        git_version = await kube.server_version()
    except (KubeError, OSError) as error:
        return None, f"reading the API server's /version failed ({error})"
    release = release_version(git_version)
    if release is None:
        return None, f"the API server's version {git_version!r} names no Kubernetes release"
    return scheduler_image(spec, release), ""


async def own_deployment(kube: Kube, owner: Owner) -> dict[str, Any] | None:
    deployment = await kube.get_object(DEPLOYMENT, owner.namespace, owner.name)
    if deployment is None:
        return None
    labels = deployment["metadata"].get("labels") or {}
    return deployment if labels.get(OWNER_UID_LABEL) == owner.uid else None


class ClaimSource(Protocol):
    """Every SchedulerProfile's claims on scheduler names and Leases (the handlers' index)."""

    def claims(self) -> Iterable[Claim]: ...


async def gather(
    kube: Kube, state: ProfileState, claims: ClaimSource, *, now: float, cluster_wide: bool
) -> Given:
    """What the pass decides from: the Deployment always; for a converge, the image, the judge
    pods and the objects an earlier spec may have left; for a pruning, the ConfigMaps and the
    ReplicaSets that may mount them."""
    owner = state.owner
    ours = owned_selector(owner)
    places = prunable_places(owner, cluster_wide=cluster_wide)
    deployment = await own_deployment(kube, owner)
    given = Given(
        body=state.body,
        now=now,
        converging=state.converge_due(now),
        applied=state.applied,
        running=state.running,
        rendered_hash=state.rendered_hash,
        verdicts=dict(state.judging.verdicts),
        judging_hash=state.judging.config_hash,
        judge_pods_may_exist=state.judging.pods_may_exist,
        judge_retry_in=state.judging.next_delay(),
        pruned_shape=state.pruning.shape,
        pruned_at=state.pruning.at,
        deployment=deployment,
    )
    if given.converging:
        image, problem = await profile_image(kube, given.spec)
        judge = judged_by_image(given.body, image)
        given = replace(
            given,
            claims=list(claims.claims()),
            image=image,
            image_problem=problem,
            judge_pod=await kube.get_object(POD, owner.namespace, judge) if judge else None,
            judge_pods=await kube.list_objects(POD, ours, owner.namespace),
            placed=[
                Listed(kind.kind, existing)
                for kind, namespace in places
                for existing in await kube.list_objects(kind, ours, namespace)
            ],
        )
    if config_map_prune_due(given):
        selector = ",".join(f"{k}={v}" for k, v in selector_labels(owner).items())
        given = replace(
            given,
            replica_sets=await kube.list_objects(REPLICA_SET, selector, owner.namespace)
            if deployment is not None
            else [],
            config_maps=await kube.list_objects(CONFIG_MAP, ours, owner.namespace),
        )
    return given


async def observe(
    kube: Kube, state: ProfileState, deployment: Mapping[str, Any] | None, *, now: float
) -> Seen:
    """What the report decides from, beside the Deployment as the pass leaves it: the names of
    a configuration every pod runs that kubeherd did not just apply (an older one a rollout
    undo brought back: its ConfigMap says them), and the Lease's holder while its lease runs
    with whether it is one of the resource's scheduler pods (looked up once per holder)."""
    owner, lock = state.owner, state.lock
    running_hash = running_config_hash(deployment)
    names = ""
    if running_hash not in (None, state.running.config_hash, state.applied.config_hash):
        config_map = await kube.get_object(
            CONFIG_MAP, owner.namespace, owner.config_map(str(running_hash))
        )
        annotations = ((config_map or {}).get("metadata") or {}).get("annotations") or {}
        names = str(annotations.get(SCHEDULER_NAMES_ANNOTATION) or "")
    leader = lease_leader(await kube.get_object(LEASE, lock.namespace, lock.name), now)
    if leader and state.holder_checked[0] != leader:
        pod = await kube.get_object(POD, owner.namespace, holder_hostname(leader))
        state.holder_checked = (leader, is_scheduler_pod(pod, owner))
    return Seen(
        state.body,
        state.validity,
        state.applied,
        state.running,
        converged=state.handled_generation is not None,
        deployment=deployment,
        running_names=names,
        lock=lock,
        leader=leader,
        leader_is_ours=state.holder_checked[1] if leader else True,
        now=now,
    )
