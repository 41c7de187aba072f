"""The SchedulerProfile controller: validate, roll out, report, and clean up on delete.

One task per resource runs every step for it in turn, so two steps never race to write its
status. A pass:
- on deletion, removes every object kubeherd made for it (the cluster-scoped ones and those in
  other namespaces have no owner reference the garbage collector could follow), then its
  finalizer;
- on a new generation (and once at start), validates the spec. An invalid spec sets Valid=False
  and posts a Warning event, and nothing already running is touched. A valid one is rendered
  and its objects are applied: only those missing or different from what kubeherd last applied
  (a hash in a label), so a restart writes nothing. Each configuration has a ConfigMap of its
  own, kept while the Deployment or one of its ReplicaSets mounts it;
- a configuration no catalog covers (a custom image's) is first judged by the image itself, in
  a judge pod (judge.py). Until it has judged, Valid is Unknown and the pass looks again in a
  moment; its refusal is handled as an invalid spec's; a judge that could not run is tried
  again after a doubling delay. Nothing is rolled out without a verdict;
- every pass reads the Deployment and the Lease and writes the status when it changed, with an
  event when the leader changes.

A spec is applied once: kubeherd does not undo a `kubectl rollout undo` of the scheduler
Deployment (the old template brings back the old configuration's ConfigMap, which is kept for
it); the status says so, and the next change of the SchedulerProfile's spec rolls forward.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubeherd.defaults import SCHEDULER_STATUS_INTERVAL
from kubeherd.events import EventRecorder
from kubeherd.kube.client import KINDS, Kind, Kube, KubeError, kind_of
from kubeherd.kube.ratelimit import Backoff
from kubeherd.meta import conditions_by_type, iso_time, status_changed
from kubeherd.names import SCHEDULERPROFILE, SCHEDULERPROFILES
from kubeherd.runner import KeyedRunner, Marks
from kubeherd.scheduler.core.catalog import CatalogChoice, image_catalog
from kubeherd.scheduler.core.claims import Claim, running_names
from kubeherd.scheduler.core.config import (
    Lock,
    configuration_hash,
    configuration_yaml,
    lease_lock,
    render_configuration,
)
from kubeherd.scheduler.core.images import scheduler_image
from kubeherd.scheduler.core.judge import (
    Judgement,
    Outcome,
    judge_key,
    judge_pod,
    judge_pod_name,
    read_judgement,
    template_judge_key,
)
from kubeherd.scheduler.core.objects import (
    SCHEDULER_NAMES_ANNOTATION,
    config_map,
    config_maps_in_use,
    owned_objects,
    scheduler_command,
    scheduler_names,
)
from kubeherd.scheduler.core.owner import (
    MANIFEST_HASH_LABEL,
    OWNER_UID_LABEL,
    Owner,
    selector_labels,
)
from kubeherd.scheduler.core.rbac import AUTHENTICATION_NAMESPACE
from kubeherd.scheduler.core.status import (
    Applied,
    Running,
    Validity,
    build_status,
    holder_hostname,
    lease_leader,
    running_config_hash,
)
from kubeherd.scheduler.core.verdict import profile_verdict
from kubeherd.scheduler.core.versions import release_version

logger = logging.getLogger(__name__)

FINALIZER = "kubeherd.io/scheduler-cleanup"
Key = tuple[str, str]  # (namespace, name)
DEPLOYMENT = KINDS[("apps/v1", "Deployment")]
REPLICA_SET = KINDS[("apps/v1", "ReplicaSet")]
CONFIG_MAP = KINDS[("v1", "ConfigMap")]
POD = KINDS[("v1", "Pod")]
LEASE = KINDS[("coordination.k8s.io/v1", "Lease")]
# The runner's timer of the regular look at the Deployment and the Lease.
LOOK_AGAIN_TIMER = "look-again"
# The Deployment controller deletes ReplicaSets beyond its history a sync after a rollout ends,
# which changes nothing kubeherd watches: their ConfigMaps are looked at again this often.
CONFIG_MAP_PRUNE_INTERVAL = 60.0
# Kinds kubeherd may have left outside the resource's namespace (or outside any namespace).
SPREAD_KINDS = (
    KINDS[("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")],
    KINDS[("rbac.authorization.k8s.io/v1", "RoleBinding")],
    KINDS[("rbac.authorization.k8s.io/v1", "Role")],
)
LOCAL_KINDS = (
    DEPLOYMENT,
    CONFIG_MAP,
    POD,  # judge pods: the scheduler pods are the Deployment's
    KINDS[("v1", "ServiceAccount")],
    KINDS[("policy/v1", "PodDisruptionBudget")],
    KINDS[("networking.k8s.io/v1", "NetworkPolicy")],
)
# Kinds in the resource's namespace that a spec may stop needing (no budget for one replica).
OPTIONAL_LOCAL_KINDS = (KINDS[("policy/v1", "PodDisruptionBudget")],)


# How often a pass looks at a judge pod that has not given its verdict yet.
JUDGE_LOOK_INTERVAL = 2.0
# A judge that could not run is tried again after a doubling delay, up to this.
JUDGE_RETRY_LIMIT = 300.0
# The images' verdicts kept per resource: enough for edits back and forth.
JUDGE_VERDICTS_KEPT = 16
VALID = Validity("True", "Valid", "the configuration passed kube-scheduler's checks")


class ClaimSource(Protocol):
    def claims(self) -> Iterable[Claim]: ...


def _describe(manifest: Mapping[str, Any]) -> str:
    metadata = manifest["metadata"]
    where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{manifest['kind']} {where}{metadata['name']}"


@dataclass
class Judging:
    """A SchedulerProfile's judges: the verdicts given while the operator runs (by judge key, so
    that a configuration is judged once), and the judge under way."""

    verdicts: dict[str, Judgement] = field(default_factory=dict)
    # The configuration a judge pod judges ("" for none): its ConfigMap stays while it does.
    config_hash: str = ""
    # Whether judge pods may exist; at start, an earlier run of the operator may have left some.
    pods_may_exist: bool = True
    backoff: Backoff = field(default_factory=lambda: Backoff(limit=JUDGE_RETRY_LIMIT))

    def remember(self, key: str, judgement: Judgement) -> None:
        self.verdicts.pop(key, None)
        self.verdicts[key] = judgement
        while len(self.verdicts) > JUDGE_VERDICTS_KEPT:
            del self.verdicts[next(iter(self.verdicts))]


@dataclass
class ProfileState:
    body: Mapping[str, Any]
    # The generation last validated (and, if valid, rolled out); None: not yet since start.
    handled_generation: int | None = None
    validity: Validity = field(
        default_factory=lambda: Validity("Unknown", "Validating", "not checked yet")
    )
    applied: Applied = field(default_factory=Applied)
    # The configuration the spec renders to, once rendered (its ConfigMap is kept).
    rendered_hash: str = ""
    # What every scheduler pod runs (the status's configHash and schedulerNames).
    running: Running = field(default_factory=Running)
    # The Lease holder last looked up, and whether it is one of this resource's pods.
    holder_checked: tuple[str, bool] = ("", True)
    # When, and for which state of the Deployment, unused ConfigMaps were last removed.
    config_maps_pruned: tuple[Any, ...] = ()
    config_maps_pruned_at: float = 0.0
    # Failed rollouts (an apply refused, an unknown server version, a cleanup left undone)
    # are tried again after a doubling delay; a pass that raises, after the runner's own.
    backoff: Backoff = field(default_factory=lambda: Backoff(limit=60.0))
    retry_at: float = 0.0
    judging: Judging = field(default_factory=Judging)

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation", 0))

    @property
    def owner(self) -> Owner:
        return Owner.of(self.body)

    @property
    def lock(self) -> Lock:
        owner = self.owner
        return lease_lock(self.body.get("spec") or {}, owner.name, owner.namespace)


class SchedulerProfileController:
    def __init__(
        self,
        kube: Kube,
        claims: ClaimSource,
        *,
        status_interval: float = SCHEDULER_STATUS_INTERVAL,
        clock: Callable[[], float] = time.time,
        cluster_wide: bool = True,
    ) -> None:
        self.kube = kube
        self.claims = claims
        # An operator of some namespaces only holds its rights on Roles and RoleBindings there
        # (and in kube-system): it looks for its own where it may make them, not cluster-wide.
        self.cluster_wide = cluster_wide
        self.status_interval = status_interval
        self.clock = clock
        self.events = EventRecorder(kube, SCHEDULERPROFILE, clock=clock)
        self.runner: KeyedRunner[Key] = KeyedRunner(self._run_pass, what=SCHEDULERPROFILE)
        self._states: dict[Key, ProfileState] = {}

    # Inputs: called from the watch handlers -----------------------------------------------

    def profile_changed(self, body: Mapping[str, Any]) -> None:
        metadata = body["metadata"]
        key = (metadata["namespace"], metadata["name"])
        state = self._states.get(key)
        if state is None:
            # What was applied before a restart is known again once the spec is converged
            # (at the first pass); what runs, the status says.
            state = ProfileState(body=body, running=_running_from(body.get("status") or {}))
            self._states[key] = state
            self.runner.mark(key)
            return
        before = state.body
        state.body = body
        # Our own status writes come back as events too: only a new spec or a deletion matters,
        # and to the others, a change of the names this one runs.
        new_spec = metadata.get("generation") != before["metadata"].get("generation")
        # A new spec may free a Lease another one was refused for.
        if new_spec or running_names(body) != running_names(before):
            self._recheck_refused(key)
        if new_spec:
            # A new spec is tried at once, not after the last one's retry delay (a judge that
            # could not pull its image waits minutes; the edit may fix the image's name).
            state.retry_at = 0.0
        if new_spec or (
            metadata.get("deletionTimestamp") and not before["metadata"].get("deletionTimestamp")
        ):
            self.runner.mark(key)

    def bodies(self) -> list[Mapping[str, Any]]:
        """Each SchedulerProfile as last seen (for metrics)."""
        return [state.body for state in self._states.values()]

    def profile_deleted(self, key: Key) -> None:
        self._states.pop(key, None)
        self.runner.forget(key)
        self.events.forget(key)
        self._recheck_refused(key)

    def _recheck_refused(self, changed: Key) -> None:
        """A resource that gave up or changed its scheduler names may free a name another one
        was refused for."""
        for key, state in self._states.items():
            if key != changed and state.validity.status == "False":
                state.handled_generation = None
                self.runner.mark(key)

    async def stop(self) -> None:
        await self.runner.stop()

    # The runner --------------------------------------------------------------------------

    async def _run_pass(self, key: Key, marks: Marks) -> None:
        state = self._states.get(key)
        if state is None:
            return
        if await self._pass(key, state):
            return  # deleted and cleaned up: nothing to look at again
        # Nothing marks the moments a Deployment rolls or a Lease changes hands: look again.
        delay = self.status_interval
        if state.handled_generation != state.generation:
            delay = min(delay, max(0.0, state.retry_at - self.clock()))
        self.runner.wake_later(key, LOOK_AGAIN_TIMER, delay)

    async def _pass(self, key: Key, state: ProfileState) -> bool:
        """One look at the resource; True when it is gone and the task can end."""
        metadata = state.body["metadata"]
        finalizers = list(metadata.get("finalizers") or [])
        if metadata.get("deletionTimestamp"):
            if FINALIZER in finalizers:
                if not await self._clean_up(state):
                    state.retry_at = self.clock() + state.backoff.next_delay()
                    return False
                await self._patch_finalizers(state, [f for f in finalizers if f != FINALIZER])
            return True
        if FINALIZER not in finalizers:
            await self._patch_finalizers(state, [*finalizers, FINALIZER])
        if state.handled_generation != state.generation and self.clock() >= state.retry_at:
            await self._converge(state)
        await self._report(state)
        return False

    # Validation and rollout --------------------------------------------------------------

    async def _converge(self, state: ProfileState) -> None:
        body, generation, owner = state.body, state.generation, state.owner
        spec: Mapping[str, Any] = body.get("spec") or {}
        # The checks are those of the minor of the image that runs: its catalog, or none (a
        # custom image, a minor newer than every catalog), or a refusal (an older minor).
        image = await self._image(state, spec)
        choice = image_catalog(image) if image is not None else CatalogChoice(None)
        verdict = profile_verdict(body, self.claims.claims(), choice)
        if image is None and verdict.valid:
            return  # which minor judges it is not known yet: retried (see _image)
        for warning in verdict.warnings:
            self._warn_once(state, "UnverifiedPlugin", str(warning))
        if not verdict.valid:
            if state.judging.pods_may_exist:
                await self._dismiss_judges(state)
            self._refuse(state, "InvalidSpec", verdict.summary())
            return
        if image is None:
            return
        text = configuration_yaml(render_configuration(spec, owner.name, owner.namespace))
        config_hash = configuration_hash(text)
        if verdict.judge_by_image:
            judgement = await self._judgement(
                state, spec, image, text, config_hash, why=verdict.by_image
            )
            if judgement.outcome is Outcome.REFUSED:
                self._refuse(
                    state,
                    "RefusedByImage",
                    f"kube-scheduler of image {image} refused configuration {config_hash}: "
                    f"{judgement.message}",
                )
                return
            if judgement.outcome is not Outcome.ACCEPTED:
                return  # the validity says why; a pass looks again
            state.validity = Validity(
                "True", "Valid", f"kube-scheduler of image {image} accepted the configuration"
            )
        else:
            if state.judging.pods_may_exist:
                await self._dismiss_judges(state)
            state.validity = VALID
        state.rendered_hash = config_hash
        desired = owned_objects(
            spec,
            owner,
            state.lock,
            image=image,
            configuration_text=text,
            config_hash=config_hash,
        )
        for manifest in desired:
            failure = await self._apply(state, manifest, config_hash)
            if failure:
                state.applied = Applied(
                    state.applied.config_hash,
                    state.applied.scheduler_names,
                    failure=failure[1],
                    failure_reason=failure[0],
                )
                state.retry_at = self.clock() + state.backoff.next_delay()
                return
        state.applied = Applied(config_hash, scheduler_names(spec))
        await self._prune(state, desired)
        state.handled_generation = generation
        state.backoff.reset()

    def _refuse(self, state: ProfileState, reason: str, message: str) -> None:
        """Valid=False and a Warning: nothing already running is touched."""
        if state.running.config_hash:
            message += f"; configuration {state.running.config_hash} keeps running"
        state.validity = Validity("False", reason, message)
        self._warn_once(state, reason, message)
        state.handled_generation = state.generation

    # Judges -------------------------------------------------------------------------------

    async def _judgement(
        self,
        state: ProfileState,
        spec: Mapping[str, Any],
        image: str,
        text: str,
        config_hash: str,
        *,
        why: str,
    ) -> Judgement:
        """The image's verdict on the configuration: one given before, or its judge pod's, which
        is started if there is none. Without a verdict yet, Valid=Unknown says why (and `why`
        no catalog judges it), and the pass is planned again."""
        judging, owner = state.judging, state.owner
        key = judge_key(image, scheduler_command(spec), config_hash)
        known = judging.verdicts.get(key)
        if known is None and template_judge_key(await self._own_deployment(owner)) == key:
            # It runs already: judged when it was rolled out (before a restart of the operator,
            # or this edit of the spec changes nothing the scheduler runs).
            known = Judgement(Outcome.ACCEPTED)
        if known is not None:
            if judging.pods_may_exist:
                await self._dismiss_judges(state)
            return known
        name = judge_pod_name(owner, key)
        pod = await self.kube.get_object(POD, owner.namespace, name)
        if pod is None:
            judgement = await self._start_judge(state, spec, image, text, config_hash)
        elif not _is_owned(pod, owner):
            judgement = Judgement(
                Outcome.FAILED, f"pod {name} exists and is not this SchedulerProfile's"
            )
            pod = None
        elif pod["metadata"].get("deletionTimestamp"):
            judgement = Judgement(Outcome.WAITING, "the previous judge pod is being deleted")
        else:
            judgement = read_judgement(pod, self.clock())
        what = f"kube-scheduler of image {image}"
        if judgement.final:
            judging.remember(key, judgement)
            judging.backoff.reset()
            await self._dismiss_judges(state)
            if judgement.outcome is Outcome.REFUSED:
                await self._drop_config(state, config_hash)
            if judgement.outcome is Outcome.ACCEPTED:
                self._event(
                    state,
                    "Normal",
                    "AcceptedByImage",
                    f"{what} accepted configuration {config_hash}",
                )
            return judgement
        keeps = (
            f"; configuration {state.running.config_hash} keeps running"
            if state.running.config_hash
            else ""
        )
        if judgement.outcome is Outcome.FAILED:
            delay = judging.backoff.next_delay()
            message = (
                f"{what} could not judge configuration {config_hash} (pod {name}): "
                f"{judgement.message}; trying again in {delay:.0f} s"
            )
            self._event(state, "Warning", "JudgeFailed", message)
            state.validity = Validity("Unknown", "JudgeFailed", message + keeps)
            if pod is not None:
                await self._delete(state, POD, pod)
            state.retry_at = self.clock() + delay
            return judgement
        message = f"{what} is judging configuration {config_hash} in pod {name}"
        if judgement.message:
            message += f", which cannot run yet: {judgement.message}"
            self._warn_once(state, "JudgeCannotRun", message)
        if why:
            message += f" ({why})"
        state.validity = Validity("Unknown", "Judging", message + keeps)
        state.retry_at = self.clock() + JUDGE_LOOK_INTERVAL
        return judgement

    async def _start_judge(
        self, state: ProfileState, spec: Mapping[str, Any], image: str, text: str, config_hash: str
    ) -> Judgement:
        """The configuration's ConfigMap (the one its scheduler pods will mount), then the judge
        pod reading it; any other judge pod of the resource goes."""
        owner = state.owner
        state.judging.config_hash = config_hash
        failure = await self._apply(
            state, config_map(owner, text, config_hash, scheduler_names(spec)), config_hash
        )
        if failure:
            return Judgement(Outcome.FAILED, failure[1])
        pod = judge_pod(spec, owner, image=image, config_hash=config_hash)
        name = pod["metadata"]["name"]
        await self._dismiss_judges(state, keep=name)
        outcome = await self.kube.create_object(POD, pod)
        if not outcome.ok and not outcome.already_exists:
            return Judgement(Outcome.FAILED, f"could not create pod {name}: {outcome.message}")
        state.judging.pods_may_exist = True
        self._event(
            state,
            "Normal",
            "Judging",
            f"kube-scheduler of image {image} judges configuration {config_hash} in pod {name}",
        )
        return Judgement(Outcome.WAITING)

    async def _drop_config(self, state: ProfileState, config_hash: str) -> None:
        """A refused configuration's ConfigMap goes now, unless something mounts or needs it."""
        owner = state.owner
        deployment = await self._own_deployment(owner)
        if deployment is not None:
            await self._prune_config_maps(state, deployment)
            return
        if config_hash in (state.applied.config_hash, state.rendered_hash):
            return
        existing = await self.kube.get_object(
            CONFIG_MAP, owner.namespace, owner.config_map(config_hash)
        )
        if existing is not None and _is_owned(existing, owner):
            await self._delete(state, CONFIG_MAP, existing)

    async def _dismiss_judges(self, state: ProfileState, keep: str = "") -> None:
        """Delete the resource's judge pods but `keep`: they have given their verdicts, or judge
        configurations the spec no longer renders. Its pods with kubeherd's owner label are
        judges: the scheduler pods carry the Deployment's labels only."""
        complete = True
        for pod in await self._labelled(POD, state.owner, state.owner.namespace):
            metadata = pod["metadata"]
            if metadata["name"] != keep and not metadata.get("deletionTimestamp"):
                complete &= await self._delete(state, POD, pod)
        state.judging.pods_may_exist = bool(keep) or not complete
        if not keep:
            state.judging.config_hash = ""

    async def _image(self, state: ProfileState, spec: Mapping[str, Any]) -> str | None:
        """The image to run (see profile_image). None (with the failure in the status and a
        retry planned) when the cluster's release is unknown."""
        image, problem = await profile_image(self.kube, spec)
        if image is not None:
            return image
        state.applied = Applied(
            state.applied.config_hash,
            state.applied.scheduler_names,
            failure=f"{problem}: no kube-scheduler image to run (set spec.image); retrying",
            failure_reason="UnknownServerVersion",
        )
        state.retry_at = self.clock() + state.backoff.next_delay()
        return None

    async def _apply(
        self, state: ProfileState, manifest: Mapping[str, Any], config_hash: str
    ) -> tuple[str, str] | None:
        """Apply one object unless it is already as wanted; (reason, message) on failure."""
        metadata = manifest["metadata"]
        kind = kind_of(manifest)
        existing = await self.kube.get_object(kind, metadata.get("namespace"), metadata["name"])
        what = _describe(manifest)
        if existing is not None:
            labels = existing["metadata"].get("labels") or {}
            if labels.get(OWNER_UID_LABEL) != state.owner.uid:
                message = (
                    f"{what} already exists and is not this SchedulerProfile's: "
                    "kubeherd leaves it alone; delete it or rename the SchedulerProfile"
                )
                self._warn_once(state, "NameConflict", message)
                return ("NameConflict", message)
            if labels.get(MANIFEST_HASH_LABEL) == metadata["labels"][MANIFEST_HASH_LABEL]:
                return None
        outcome = await self.kube.apply(manifest)
        if not outcome.ok:
            message = f"could not apply {what}: {outcome.message}"
            self._warn_once(state, "FailedApply", message)
            return ("ApplyFailed", message)
        if existing is None:
            self._event(state, "Normal", "Created", f"created {what}")
        elif manifest["kind"] == "Deployment":
            self._event(
                state,
                "Normal",
                "Updated",
                f"updated {what}: rolling to configuration {config_hash}",
            )
        else:
            self._event(state, "Normal", "Updated", f"updated {what}")
        return None

    async def _prune(self, state: ProfileState, desired: list[dict[str, Any]]) -> None:
        """Remove objects an earlier spec needed and this one does not (a Lease moved to
        another namespace leaves a Role and RoleBinding behind), and the ConfigMaps of
        configurations nothing mounts any more."""
        wanted = {
            (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in desired
        }
        owner = state.owner
        for kind, namespace in (
            *self._spread_places(owner),
            *((kind, owner.namespace) for kind in OPTIONAL_LOCAL_KINDS),
        ):
            for existing in await self._labelled(kind, owner, namespace):
                metadata = existing["metadata"]
                identity = (kind.kind, metadata.get("namespace"), metadata["name"])
                if identity not in wanted:
                    await self._delete(state, kind, existing)
        deployment = await self._own_deployment(owner)
        if deployment is not None:
            await self._prune_config_maps(state, deployment)

    async def _prune_config_maps(self, state: ProfileState, deployment: Mapping[str, Any]) -> None:
        """Delete the ConfigMaps that neither the Deployment nor any of its ReplicaSets mounts
        (nor the spec's, which a Deployment not yet synced may not show). A ReplicaSet kept in
        the history keeps its configuration, for `kubectl rollout undo`."""
        owner = state.owner
        selector = ",".join(f"{k}={v}" for k, v in selector_labels(owner).items())
        replica_sets = [
            replica_set
            for replica_set in await self.kube.list_objects(REPLICA_SET, selector, owner.namespace)
            if any(
                reference.get("uid") == deployment["metadata"]["uid"]
                for reference in replica_set["metadata"].get("ownerReferences") or []
            )
        ]
        templates = [
            (item.get("spec") or {}).get("template") or {} for item in [deployment, *replica_sets]
        ]
        in_use = config_maps_in_use(templates)
        # The spec's, even before the Deployment names it (its apply may have failed).
        kept = (state.applied.config_hash, state.rendered_hash, state.judging.config_hash)
        in_use |= {owner.config_map(h) for h in kept if h}
        for existing in await self._labelled(CONFIG_MAP, owner, owner.namespace):
            if existing["metadata"]["name"] not in in_use:
                await self._delete(state, CONFIG_MAP, existing)
        state.config_maps_pruned_at = self.clock()

    async def _own_deployment(self, owner: Owner) -> dict[str, Any] | None:
        deployment = await self.kube.get_object(DEPLOYMENT, owner.namespace, owner.name)
        if deployment is None:
            return None
        labels = deployment["metadata"].get("labels") or {}
        return deployment if labels.get(OWNER_UID_LABEL) == owner.uid else None

    # Deletion ----------------------------------------------------------------------------

    async def _clean_up(self, state: ProfileState) -> bool:
        """Delete everything kubeherd made for the resource; False if something is left."""
        complete = True
        owner = state.owner
        for kind, namespace in (
            *self._spread_places(owner),
            *((kind, owner.namespace) for kind in LOCAL_KINDS),
        ):
            for existing in await self._labelled(kind, owner, namespace):
                complete &= await self._delete(state, kind, existing)
        return complete

    def _spread_places(self, owner: Owner) -> list[tuple[Kind, str | None]]:
        """Where the resource's RBAC objects may be: ClusterRoleBindings, and Roles and
        RoleBindings in any namespace (an earlier version put a Lease's elsewhere), or for an
        operator of some namespaces, where it makes them: the Lease's Role and RoleBinding in
        the resource's own namespace, the authentication reader's RoleBinding in kube-system."""
        if self.cluster_wide:
            return [(kind, None) for kind in SPREAD_KINDS]
        cluster_role_binding, role_binding, role = SPREAD_KINDS
        return [
            (cluster_role_binding, None),
            *((role_binding, ns) for ns in sorted({owner.namespace, AUTHENTICATION_NAMESPACE})),
            (role, owner.namespace),
        ]

    async def _labelled(
        self, kind: Kind, owner: Owner, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        return await self.kube.list_objects(kind, f"{OWNER_UID_LABEL}={owner.uid}", namespace)

    async def _delete(self, state: ProfileState, kind: Kind, existing: Mapping[str, Any]) -> bool:
        metadata = existing["metadata"]
        outcome = await self.kube.delete_object(
            kind, metadata.get("namespace"), metadata["name"], metadata["uid"]
        )
        if outcome.ok or outcome.not_found:
            return True
        what = f"{kind.kind} {metadata.get('namespace', '')}/{metadata['name']}"
        self._event(state, "Warning", "FailedDelete", f"could not delete {what}: {outcome.message}")
        return False

    async def _patch_finalizers(self, state: ProfileState, finalizers: list[str]) -> None:
        owner = state.owner
        # Only on the version we looked at: never drop a finalizer someone added meanwhile.
        version = state.body["metadata"]["resourceVersion"]
        operations: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
        ]
        outcome = await self.kube.json_patch(
            SCHEDULERPROFILES, owner.namespace, owner.name, operations
        )
        if not outcome.ok and not outcome.not_found:
            # A concurrent change: the next watch event brings the current list.
            logger.info("%s/%s: finalizers not written: %s", *state_key(state), outcome.message)

    # Status ------------------------------------------------------------------------------

    async def _report(self, state: ProfileState) -> None:
        owner, lock = state.owner, state.lock
        spec: Mapping[str, Any] = state.body.get("spec") or {}
        deployment = await self._own_deployment(owner)
        await self._follow_rollout(state, deployment)
        rolled_out = state.applied.config_hash and state.handled_generation is not None
        if deployment is None and rolled_out and state.validity.status == "True":
            # Someone deleted what runs the scheduler: roll it out again on the next pass.
            state.handled_generation = None
            self.runner.mark(state_key(state))
        lease = await self.kube.get_object(LEASE, lock.namespace, lock.name)
        leader = lease_leader(lease, self.clock())
        previous = state.body.get("status") or {}
        status = build_status(
            previous,
            generation=state.generation,
            validity=state.validity,
            applied=state.applied,
            running=state.running,
            deployment=deployment,
            leader=leader,
            lock=f"{lock.namespace}/{lock.name}",
            now=iso_time(self.clock()),
            leader_is_ours=await self._is_own_pod(state, leader) if leader else True,
            elects=bool((spec.get("leaderElection") or {}).get("leaderElect", True)),
        )
        if not status_changed(previous, status):
            return
        self._report_leader(state, previous.get("leader") or "", leader, lock)
        self._report_rollback(previous, status, state)
        outcome = await self.kube.patch_status(
            SCHEDULERPROFILES, owner.namespace, owner.name, status
        )
        if outcome.ok:
            # Remember what we wrote: the watch event with it may come after our next pass.
            state.body = {**state.body, "status": {**previous, **status}}
        elif not outcome.not_found:
            logger.warning("%s/%s: status not written: %s", *state_key(state), outcome.message)

    async def _follow_rollout(
        self, state: ProfileState, deployment: Mapping[str, Any] | None
    ) -> None:
        """Take the configuration every pod now runs as the running one, and remove the
        ConfigMaps no ReplicaSet mounts any more once a rollout is over."""
        running_hash = running_config_hash(deployment)
        if deployment is None or running_hash is None:
            return
        if running_hash != state.running.config_hash:
            state.running = Running(running_hash, await self._names_of(state, running_hash))
        shape = (
            deployment["metadata"].get("uid"),
            deployment["metadata"].get("generation"),
            running_hash,
        )
        due = self.clock() - state.config_maps_pruned_at >= CONFIG_MAP_PRUNE_INTERVAL
        if shape != state.config_maps_pruned or due:
            await self._prune_config_maps(state, deployment)
            state.config_maps_pruned = shape

    async def _names_of(self, state: ProfileState, config_hash: str) -> str:
        """The scheduler names of a configuration kubeherd made (the spec's, or an older one a
        rollout undo brought back)."""
        if config_hash == state.applied.config_hash:
            return state.applied.scheduler_names
        owner = state.owner
        config_map = await self.kube.get_object(
            CONFIG_MAP, owner.namespace, owner.config_map(config_hash)
        )
        annotations = ((config_map or {}).get("metadata") or {}).get("annotations") or {}
        return str(annotations.get(SCHEDULER_NAMES_ANNOTATION) or "")

    async def _is_own_pod(self, state: ProfileState, holder: str) -> bool:
        """Whether the Lease's holder is one of this resource's scheduler pods: another program
        on the same Lease would otherwise be reported as this scheduler leading."""
        if state.holder_checked[0] != holder:
            owner = state.owner
            pod = await self.kube.get_object(POD, owner.namespace, holder_hostname(holder))
            labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
            ours = pod is not None and all(
                labels.get(key) == value for key, value in selector_labels(owner).items()
            )
            state.holder_checked = (holder, ours)
        return state.holder_checked[1]

    def _report_rollback(
        self, previous: Mapping[str, Any], status: Mapping[str, Any], state: ProfileState
    ) -> None:
        """One event when the Deployment stops running the spec's template (rollout undo)."""
        before = conditions_by_type(previous).get("Progressing", {}).get("reason")
        after = conditions_by_type(status).get("Progressing", {})
        if after.get("reason") == "RolledBack" and before != "RolledBack":
            self._event(state, "Normal", "RolledBack", str(after.get("message") or ""))

    def _report_leader(self, state: ProfileState, before: str, after: str, lock: Lock) -> None:
        if before == after:
            return
        lease = f"Lease {lock.namespace}/{lock.name}"
        if after:
            self._event(state, "Normal", "LeaderElected", f"{after} leads: it holds {lease}")
        else:
            self._event(
                state,
                "Warning",
                "NoLeader",
                f"no scheduler holds {lease} any more (last: {before}): pods of "
                f"{state.applied.scheduler_names or 'its profiles'} wait until one takes it",
            )

    # Events ------------------------------------------------------------------------------

    def _warn_once(self, state: ProfileState, reason: str, message: str) -> None:
        self.events.warn_once(state.body, reason, message)

    def _event(self, state: ProfileState, type_: str, reason: str, message: str) -> None:
        self.events.record(state.body, type_, reason, message)


def state_key(state: ProfileState) -> Key:
    owner = state.owner
    return (owner.namespace, owner.name)


def _is_owned(existing: Mapping[str, Any], owner: Owner) -> bool:
    labels = (existing.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(OWNER_UID_LABEL) == owner.uid)


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


def _running_from(status: Mapping[str, Any]) -> Running:
    """What runs, as the status written before a restart says."""
    return Running(str(status.get("configHash") or ""), str(status.get("schedulerNames") or ""))
