"""The SchedulerProfile controller: validate, roll out, report, and clean up on delete.

One task per resource runs every step for it in turn, so two steps never race to write its
status. A pass:
- on deletion, removes every object kubeherd made for it (the cluster-scoped ones and those in
  other namespaces have no owner reference the garbage collector could follow), then its
  finalizer;
- on a new generation (and once at start), validates the spec. An invalid spec sets Valid=False
  and posts a Warning event, and nothing already running is touched. A valid one is rendered
  and its objects are applied: only those missing or different from what kubeherd last applied
  (a hash in an annotation), so a restart writes nothing;
- every pass reads the Deployment and the Lease and writes the status when it changed, with an
  event when the leader changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubeherd.kube.client import KINDS, Kind, Kube, KubeError, kind_of
from kubeherd.kube.ratelimit import Backoff
from kubeherd.meta import involved_object, now_iso, status_changed
from kubeherd.scheduler.config import (
    Lock,
    configuration_hash,
    configuration_yaml,
    lease_lock,
    render_configuration,
)
from kubeherd.scheduler.objects import (
    KIND,
    MANIFEST_HASH_ANNOTATION,
    OWNER_UID_LABEL,
    Owner,
    is_custom_image,
    owned_objects,
    scheduler_image,
)
from kubeherd.scheduler.status import Applied, Validity, build_status, lease_leader
from kubeherd.scheduler.validation import (
    Claim,
    Problem,
    Verdict,
    lease_claim,
    lock_problems,
    names_taken_before,
    validate_spec,
)
from kubeherd.scheduler.versions import release_version

logger = logging.getLogger(__name__)

PLURAL = "schedulerprofiles"
FINALIZER = "kubeherd.io/scheduler-cleanup"
Key = tuple[str, str]  # (namespace, name)
DEPLOYMENT = KINDS[("apps/v1", "Deployment")]
LEASE = KINDS[("coordination.k8s.io/v1", "Lease")]
# Kinds kubeherd may have left outside the resource's namespace (or outside any namespace).
SPREAD_KINDS = (
    KINDS[("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")],
    KINDS[("rbac.authorization.k8s.io/v1", "RoleBinding")],
    KINDS[("rbac.authorization.k8s.io/v1", "Role")],
)
LOCAL_KINDS = (
    DEPLOYMENT,
    KINDS[("v1", "ConfigMap")],
    KINDS[("v1", "ServiceAccount")],
)


class ClaimSource(Protocol):
    def claims(self) -> Iterable[Claim]: ...


def _describe(manifest: Mapping[str, Any]) -> str:
    metadata = manifest["metadata"]
    where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{manifest['kind']} {where}{metadata['name']}"


@dataclass
class ProfileState:
    body: Mapping[str, Any]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # The generation last validated (and, if valid, rolled out); None: not yet since start.
    handled_generation: int | None = None
    validity: Validity = field(
        default_factory=lambda: Validity("Unknown", "Validating", "not checked yet")
    )
    applied: Applied = field(default_factory=Applied)
    backoff: Backoff = field(default_factory=lambda: Backoff(limit=60.0))
    retry_at: float = 0.0
    # (generation, reason) of the Warning events already posted for a spec.
    warned: set[tuple[int, str]] = field(default_factory=set)

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
        status_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.claims = claims
        self.status_interval = status_interval
        self.clock = clock
        self._states: dict[Key, ProfileState] = {}

    # Inputs: called from the watch handlers -----------------------------------------------

    def profile_changed(self, body: Mapping[str, Any]) -> None:
        metadata = body["metadata"]
        key = (metadata["namespace"], metadata["name"])
        state = self._states.get(key)
        if state is None:
            state = ProfileState(body=body, applied=_applied_from(body.get("status") or {}))
            self._states[key] = state
            state.task = asyncio.get_running_loop().create_task(self._run(key, state))
            return
        before = state.body
        state.body = body
        # Our own status writes come back as events too: only a new spec or a deletion matters,
        # and to the others, a change of the names this one runs.
        new_spec = metadata.get("generation") != before["metadata"].get("generation")
        # A new spec may free a Lease another one was refused for.
        if new_spec or _running_names(body) != _running_names(before):
            self._recheck_refused(key)
        if new_spec or (
            metadata.get("deletionTimestamp") and not before["metadata"].get("deletionTimestamp")
        ):
            state.wake.set()

    def profile_deleted(self, key: Key) -> None:
        state = self._states.pop(key, None)
        if state is not None and state.task is not None:
            state.task.cancel()
        self._recheck_refused(key)

    def _recheck_refused(self, changed: Key) -> None:
        """A resource that gave up or changed its scheduler names may free a name another one
        was refused for."""
        for key, state in self._states.items():
            if key != changed and state.validity.status == "False":
                state.handled_generation = None
                state.wake.set()

    async def stop(self) -> None:
        tasks = [state.task for state in self._states.values() if state.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # The runner --------------------------------------------------------------------------

    async def _run(self, key: Key, state: ProfileState) -> None:
        while self._states.get(key) is state:
            state.wake.clear()
            try:
                finished = await self._pass(key, state)
            except Exception:
                # Never let one resource's failure stop the others: retry it later.
                logger.exception("SchedulerProfile %s/%s: pass failed; retrying", *key)
                finished = False
                state.retry_at = self.clock() + state.backoff.next_delay()
            if finished:
                return
            timeout = self.status_interval
            if state.handled_generation != state.generation:
                timeout = min(timeout, max(0.0, state.retry_at - self.clock()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.wake.wait(), timeout)

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
        verdict = profile_verdict(body, self.claims.claims())
        for warning in verdict.warnings:
            self._warn_once(state, "UnverifiedPlugin", str(warning))
        if not verdict.valid:
            message = verdict.summary()
            if state.applied.config_hash:
                message += f"; configuration {state.applied.config_hash} keeps running"
            state.validity = Validity("False", "InvalidSpec", message)
            self._warn_once(state, "InvalidSpec", message)
            state.handled_generation = generation
            return
        state.validity = Validity(
            "True", "Valid", "the configuration passed kube-scheduler's checks"
        )
        image = await self._image(state, spec)
        if image is None:
            return
        text = configuration_yaml(render_configuration(spec, owner.name, owner.namespace))
        config_hash = configuration_hash(text)
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
        await self._prune(state, desired)
        names = ", ".join(str(p["schedulerName"]) for p in spec.get("profiles") or [])
        state.applied = Applied(config_hash, names)
        state.handled_generation = generation
        state.backoff.reset()

    async def _image(self, state: ProfileState, spec: Mapping[str, Any]) -> str | None:
        """The image to run: the spec's, else the official one of the cluster's release. None
        (with the failure in the status and a retry planned) when that release is unknown: a
        guessed tag would be an image that does not exist, or a scheduler of another version."""
        if spec.get("image"):
            return scheduler_image(spec)
        try:
            git_version = await self.kube.server_version()
        except (KubeError, OSError) as error:
            problem = f"reading the API server's /version failed ({error})"
        else:
            release = release_version(git_version)
            if release is not None:
                return scheduler_image(spec, release)
            problem = f"the API server's version {git_version!r} names no Kubernetes release"
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
            annotations = existing["metadata"].get("annotations") or {}
            wanted = metadata["annotations"][MANIFEST_HASH_ANNOTATION]
            if annotations.get(MANIFEST_HASH_ANNOTATION) == wanted:
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
        another namespace leaves a Role and RoleBinding behind)."""
        wanted = {
            (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in desired
        }
        for kind in SPREAD_KINDS:
            for existing in await self._labelled(kind, state.owner):
                metadata = existing["metadata"]
                identity = (kind.kind, metadata.get("namespace"), metadata["name"])
                if identity not in wanted:
                    await self._delete(state, kind, existing)

    # Deletion ----------------------------------------------------------------------------

    async def _clean_up(self, state: ProfileState) -> bool:
        """Delete everything kubeherd made for the resource; False if something is left."""
        complete = True
        for kind in (*SPREAD_KINDS, *LOCAL_KINDS):
            namespace = state.owner.namespace if kind in LOCAL_KINDS else None
            for existing in await self._labelled(kind, state.owner, namespace):
                complete &= await self._delete(state, kind, existing)
        return complete

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
        outcome = await self.kube.json_patch(PLURAL, owner.namespace, owner.name, operations)
        if not outcome.ok and not outcome.not_found:
            # A concurrent change: the next watch event brings the current list.
            logger.info("%s/%s: finalizers not written: %s", *state_key(state), outcome.message)

    # Status ------------------------------------------------------------------------------

    async def _report(self, state: ProfileState) -> None:
        owner, lock = state.owner, state.lock
        deployment = await self.kube.get_object(DEPLOYMENT, owner.namespace, owner.name)
        if deployment is not None:
            labels = deployment["metadata"].get("labels") or {}
            if labels.get(OWNER_UID_LABEL) != owner.uid:
                deployment = None
        rolled_out = state.applied.config_hash and state.handled_generation is not None
        if deployment is None and rolled_out and state.validity.status == "True":
            # Someone deleted what runs the scheduler: roll it out again on the next pass.
            state.handled_generation = None
            state.wake.set()
        lease = await self.kube.get_object(LEASE, lock.namespace, lock.name)
        leader = lease_leader(lease, time.time())
        previous = state.body.get("status") or {}
        status = build_status(
            previous,
            generation=state.generation,
            validity=state.validity,
            applied=state.applied,
            deployment=deployment,
            leader=leader,
            lock=f"{lock.namespace}/{lock.name}",
            now=now_iso(),
        )
        if not status_changed(previous, status):
            return
        self._report_leader(state, previous.get("leader") or "", leader, lock)
        outcome = await self.kube.patch_status(PLURAL, owner.namespace, owner.name, status)
        if outcome.ok:
            # Remember what we wrote: the watch event with it may come after our next pass.
            state.body = {**state.body, "status": {**previous, **status}}
        elif not outcome.not_found:
            logger.warning("%s/%s: status not written: %s", *state_key(state), outcome.message)

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
        """One Warning per spec and reason: a pass repeated every few seconds must not post
        the same complaint again."""
        if (state.generation, reason) in state.warned:
            return
        state.warned.add((state.generation, reason))
        self._event(state, "Warning", reason, message)

    def _event(self, state: ProfileState, type_: str, reason: str, message: str) -> None:
        logger.info("%s/%s: %s: %s", *state_key(state), reason, message)
        self.kube.post_event_soon(
            involved_object(state.body, KIND), type_=type_, reason=reason, message=message
        )


def state_key(state: ProfileState) -> Key:
    owner = state.owner
    return (owner.namespace, owner.name)


def _running_names(body: Mapping[str, Any]) -> set[str]:
    names = str((body.get("status") or {}).get("schedulerNames") or "")
    return {name.strip() for name in names.split(",") if name.strip()}


def profile_verdict(body: Mapping[str, Any], claims: Iterable[Claim]) -> Verdict:
    """kubeherd's verdict on a SchedulerProfile: kube-scheduler's own checks, the scheduler
    names and Lease other SchedulerProfiles (`claims`, which may include this one's) hold first,
    and the Leases kubeherd never takes. The controller and the admission webhook both give it,
    so that what `kubectl apply` refuses is exactly what would be reported Valid=False."""
    metadata = body["metadata"]
    spec: Mapping[str, Any] = body.get("spec") or {}
    lock = lease_lock(spec, str(metadata["name"]), str(metadata.get("namespace") or ""))
    taken = names_taken_before(claims, claims_of(body))
    verdict = validate_spec(spec, custom_image=is_custom_image(spec), taken_names=taken)
    verdict.errors += lock_problems(lock)
    lock_holder = taken.get(lease_claim(lock))
    if lock_holder:
        verdict.errors.append(
            Problem(
                "spec.leaderElection.resourceName",
                f"{lease_claim(lock)} is the lock of SchedulerProfile {lock_holder}: "
                "two schedulers on one Lease take turns, one always idle; choose another "
                "resourceName",
            )
        )
    return verdict


def claims_of(body: Mapping[str, Any]) -> list[Claim]:
    """The scheduler names a SchedulerProfile's spec claims, and its Lease when it elects."""
    metadata = body["metadata"]
    created = str(metadata.get("creationTimestamp") or "")
    owner = f"{metadata.get('namespace')}/{metadata['name']}"
    running = _running_names(body)
    spec = body.get("spec") or {}
    profiles = spec.get("profiles") or []
    names = [str(p["schedulerName"]) for p in profiles if p.get("schedulerName")]
    claims = [Claim(created, owner, name, running=name in running) for name in names]
    if (spec.get("leaderElection") or {}).get("leaderElect", True):
        # Two schedulers on one Lease take turns: one of them idles, both report it as leader.
        lock = lease_lock(spec, str(metadata["name"]), str(metadata.get("namespace") or ""))
        rolled_out = bool((body.get("status") or {}).get("configHash"))
        claims.append(Claim(created, owner, lease_claim(lock), running=rolled_out))
    return claims


def _applied_from(status: Mapping[str, Any]) -> Applied:
    """What runs, as the status written before a restart says."""
    return Applied(str(status.get("configHash") or ""), str(status.get("schedulerNames") or ""))
