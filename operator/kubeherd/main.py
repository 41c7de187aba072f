"""The operator's entry module: activities and the handlers of every kind, in one registry."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

import aiohttp
import kopf

# Imported for their decorators, which register the handlers of each kind.
import kubeherd.admission.webhook
import kubeherd.daemonset.handlers
import kubeherd.scheduler.handlers  # noqa: F401
from kubeherd.admission.certificates import CertificateWorkerError
from kubeherd.admission.configuration import WebhookOptions
from kubeherd.admission.webhook import (
    AUTO,
    ConfigurationKeeper,
    IdleServer,
    in_cluster,
    is_loopback_url,
    remove_configuration,
    start_webhook,
)
from kubeherd.daemonset.controller import DaemonSetController
from kubeherd.daemonset.core.template import OperatorIdentity
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.daemonset.shell.reads import IdentityLookup
from kubeherd.daemonset.shell.watches import Watches
from kubeherd.kopf_adapter import CLUSTER_PEERING, NAMESPACED_PEERING
from kubeherd.kopf_watches import KopfWatches
from kubeherd.kube import config
from kubeherd.kube.client import Kube
from kubeherd.kube.http import ApiSession
from kubeherd.kube.kinds import Kind
from kubeherd.kube.limits import pool_size
from kubeherd.kube.outcomes import KubeError
from kubeherd.metrics.auth import TokenAuthorizer
from kubeherd.metrics.objects import (
    OperatorCollector,
    ReadinessCollector,
    customdaemonsets,
    operator_registry,
    schedulerprofiles,
)
from kubeherd.metrics.server import MetricsServer, tls_context
from kubeherd.names import CUSTOMDAEMONSET, SCHEDULERPROFILE
from kubeherd.peering import PeeringWatch
from kubeherd.probes import HealthServer
from kubeherd.readiness import Readiness
from kubeherd.scheduler.controller import SchedulerProfileController
from kubeherd.scheduler.handlers import IndexedClaims
from kubeherd.settings import OperatorOptions, configure

logger = logging.getLogger(__name__)
# `--webhook-listen=auto` on a machine that runs the API server: loopback, any free port.
LOCAL_LISTEN = "127.0.0.1:0"


@dataclasses.dataclass(frozen=True)
class Parts:
    """What start-up makes, all at once."""

    kube: Kube
    watches: Watches
    daemonsets: DaemonSetController
    schedulers: SchedulerProfileController
    scheduler_claims: IndexedClaims


@dataclasses.dataclass
class Runtime:
    """Kopf's memo: the one object the handlers share, typed. Kopf hands each object's handlers
    a shallow copy, made after start-up, so they all see the same parts. The handler modules
    each name what they read of it (a Protocol), so that neither imports the other."""

    options: OperatorOptions = dataclasses.field(default_factory=OperatorOptions)
    parts: Parts | None = None
    webhook: ConfigurationKeeper | None = None
    peering: PeeringWatch | None = None
    metrics: MetricsServer | None = None
    # What /readyz answers: the watches report to it, the metrics read it.
    readiness: Readiness = dataclasses.field(default_factory=Readiness)
    health: HealthServer | None = None
    transport: ApiSession | None = None
    kopf_watches: KopfWatches | None = None

    def api_session(self) -> ApiSession:
        """The one transport to the API server, for Kopf and kubeherd alike: made by whichever
        of the login and start-up handlers runs first (Kopf may run either first)."""
        if self.transport is None:
            options = self.options
            login = config.load(options.kubeconfig, options.context)
            self.transport = ApiSession(login, pool_size(options.limits, len(options.namespaces)))
        return self.transport

    def watched_by_kopf(self) -> KopfWatches:
        """Kopf's watches of kubeherd's kinds, in the readiness: made once, kept through Kopf's
        logins again."""
        if self.kopf_watches is None:
            self.kopf_watches = KopfWatches(self.readiness, self.options.namespaces, self.active)
        return self.kopf_watches

    def active(self) -> bool:
        """Works (1 in kubeherd_active) or stands by: with peering, as the peering object says."""
        return self.peering is None or bool(self.peering.active)

    @property
    def started(self) -> Parts:
        if self.parts is None:
            raise RuntimeError("kubeherd has not started")
        return self.parts

    @property
    def kube(self) -> Kube:
        return self.started.kube

    @property
    def watches(self) -> Watches:
        return self.started.watches

    @property
    def daemonsets(self) -> DaemonSetController:
        return self.started.daemonsets

    @property
    def schedulers(self) -> SchedulerProfileController:
        return self.started.schedulers

    @property
    def scheduler_claims(self) -> IndexedClaims:
        return self.started.scheduler_claims


@kopf.on.login()
async def login(memo: Runtime, **_: Any) -> kopf.AiohttpSession:
    """Kopf's requests go through kubeherd's transport: a session of Kopf's own (it closes it
    when it logs in again) on the same connections, TLS, proxy and credential renewal."""
    transport = memo.api_session()
    # An exec plugin that fails shows here, in Kopf's login, rather than in every watch.
    await transport.authenticate()
    return kopf.AiohttpSession(
        aiohttp_session=transport.client_session(observe=memo.watched_by_kopf().observe),
        server=transport.server_url,
        default_namespace=transport.login.namespace,
    )


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: Runtime, **_: Any) -> None:
    options = memo.options
    configure(settings, options.peering)
    if options.health_address and memo.health is None:
        # First: the kubelet's probes get an answer while the rest starts (not ready yet).
        memo.health = await serve_health(options.health_address, memo.readiness)
    kube = Kube(memo.api_session(), options.limits)
    try:
        if options.peering is not None:
            memo.peering = await watch_peering(kube, options, settings.peering.clusterwide)
    except BaseException:
        await kube.close()
        raise
    try:
        await start_parts(settings, memo, kube)
    except asyncio.CancelledError:
        # Stopped while starting (a pod deleted as it starts): Kopf runs no cleanup activity
        # after a cancelled start-up, so what already runs is stopped here.
        logger.info("Stopped while starting: stopping what had started")
        await stop_operator(memo)
        if memo.parts is None:
            await kube.close()
        raise


async def start_parts(settings: kopf.OperatorSettings, memo: Runtime, kube: Kube) -> None:
    options = memo.options
    watches = Watches(kube, options.namespaces, memo.readiness)
    watches.controller = DaemonSetController(
        DaemonSetApi(kube),
        watches.nodes,
        watches.pods,
        max_create_backoff=options.max_create_backoff,
        operator=operator_identity(kube, options.webhook),
    )
    claims = IndexedClaims()
    memo.parts = Parts(
        kube=kube,
        watches=watches,
        daemonsets=watches.controller,
        schedulers=SchedulerProfileController(
            kube,
            claims,
            status_interval=options.scheduler_status_interval,
            cluster_wide=not options.namespaces,
        ),
        scheduler_claims=claims,
    )
    watches.start()
    if options.metrics_address:
        memo.metrics = await serve_metrics(options, memo)
    settings.admission.server = await admission_server(kube, options.webhook, memo)
    if options.webhook is None and options.stale_webhook_configuration:
        await remove_configuration(kube, options.stale_webhook_configuration)
    memo.readiness.started = True


async def serve_health(address: str, readiness: Readiness) -> HealthServer:
    server = HealthServer(readiness, address)
    try:
        await server.start()
    except OSError as error:
        raise kopf.PermanentError(f"cannot serve /healthz on {address}: {error}") from error
    return server


SELF_SUBJECT_REVIEW = Kind(
    "/apis/authentication.k8s.io/v1", "selfsubjectreviews", "SelfSubjectReview", namespaced=False
)


def operator_identity(kube: Kube, webhook: WebhookOptions | None) -> IdentityLookup:
    """Who the API server knows this process as (any authenticated user may ask), and the
    webhook's certificate Secret: what no daemon pod may borrow. Asked when first needed, and
    again until the API server answers, which it may not do at start-up."""
    known: list[OperatorIdentity] = []
    secret = webhook.certificate_secret if webhook is not None else None

    async def lookup() -> OperatorIdentity | None:
        if not known:
            review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
            try:
                answer = await kube.create_review(SELF_SUBJECT_REVIEW, review)
            except KubeError as error:
                logger.warning("Cannot learn the operator's own identity yet: %s", error)
                return None
            user = (answer.get("status") or {}).get("userInfo") or {}
            username = str(user.get("username") or "")
            logger.info("Running as %s", username or "an unnamed user")
            identity = OperatorIdentity.of_user(username)
            # Daemon pods are checked in the account's own namespace only: a Secret in another
            # one is out of their reach by name.
            if secret is not None and secret.namespace == identity.namespace:
                identity = dataclasses.replace(identity, secrets=frozenset({secret.name}))
            known.append(identity)
        return known[0]

    return lookup


async def serve_metrics(options: OperatorOptions, memo: Runtime) -> MetricsServer:
    address, parts = options.metrics_address, memo.started
    registry = operator_registry(
        customdaemonsets(parts.daemonsets.bodies),
        schedulerprofiles(parts.schedulers.bodies),
        ReadinessCollector(memo.readiness),
        OperatorCollector(
            memo.active,
            lambda: {
                CUSTOMDAEMONSET: parts.daemonsets.runner.waiting(),
                SCHEDULERPROFILE: parts.schedulers.runner.waiting(),
            },
        ),
    )
    secure = options.metrics_secure
    cert_dir = Path(options.metrics_cert_dir) if options.metrics_cert_dir else None
    try:
        # Made (without a folder) by a child process: waited for in a thread, not on the loop.
        tls = await asyncio.to_thread(tls_context, cert_dir) if secure else None
        server = MetricsServer(
            registry,
            address,
            authorizer=TokenAuthorizer(parts.kube) if secure else None,
            tls=tls,
        )
        await server.start()
    except (OSError, CertificateWorkerError) as error:
        # As a port another process holds, or a certificate that cannot be read or made: asked
        # for, so not silently left out.
        raise kopf.PermanentError(f"cannot serve metrics on {address}: {error}") from error
    return server


async def admission_server(
    kube: Kube, options: WebhookOptions | None, memo: Runtime
) -> kopf.WebhookServerProtocol:
    """Kopf's admission server: the webhook's, or (turned off) one that serves nothing."""
    if options is not None and options.listen == AUTO:
        # The API server must be able to dial this process: only sure when it runs on this
        # machine and the operator does not run in a pod (the chart names its Service).
        local = not in_cluster() and is_loopback_url(kube.server_url)
        options = dataclasses.replace(options, listen=LOCAL_LISTEN) if local else None
    if options is None:
        logger.info("The admission webhook is off: applies are checked by the controllers only")
        return IdleServer()
    try:
        server = await start_webhook(kube, options)
    except (KubeError, OSError, RuntimeError, TimeoutError, aiohttp.ClientError) as error:
        # Its certificate could not be read or stored: the controllers still work, and the
        # webhook's absence only lets bad input through to their conditions. (An API server
        # out of reach, as behind a proxy that refuses it, must not fail the start-up: Kopf
        # would run it again, and /readyz must be there to say what fails.)
        logger.error("The admission webhook is off: no certificate to serve it (%s)", error)
        return IdleServer()
    memo.webhook = server.keeper
    return server


async def watch_peering(kube: Kube, options: OperatorOptions, clusterwide: bool) -> PeeringWatch:
    assert options.peering is not None
    # Kopf keeps one ClusterKopfPeering when it serves all namespaces, else one KopfPeering in
    # each namespace it serves.
    locations: list[tuple[Kind, str | None]] = (
        [(CLUSTER_PEERING, None)]
        if clusterwide
        else [(NAMESPACED_PEERING, namespace) for namespace in options.namespaces]
    )

    def demoted(leader: str) -> None:
        logger.error(
            "Replica %s outranks this one, which was active: exiting, so that only one works"
            " (Kubernetes restarts this one as a standby).",
            leader,
        )
        options.demote()  # asyncio.Events: this runs in Kopf's loop, as it must

    watch = PeeringWatch(kube, options.peering, locations, demoted)
    await watch.ensure_objects()
    watch.start()
    return watch


@kopf.on.cleanup()
async def stop(memo: Runtime, **_: Any) -> None:
    await stop_operator(memo)


async def stop_operator(memo: Runtime) -> None:
    """Stop kubeherd's own tasks and end Kopf's wait on the stop flag."""
    memo.options.stopping.set()
    # Out of the Services at once: a stopping replica takes no more webhook calls.
    memo.readiness.started = False
    if memo.metrics is not None:
        await memo.metrics.stop()
    if memo.webhook is not None:
        await memo.webhook.stop()
    if memo.peering is not None:
        await memo.peering.stop()
    parts = memo.parts
    if parts is not None:
        await parts.watches.stop()
        await parts.daemonsets.stop()
        await parts.schedulers.stop()
        await parts.kube.close()
    if memo.health is not None:
        await memo.health.stop()
    if memo.transport is not None:
        # Kopf's sessions are closed after this; the connections they share are closed here.
        await memo.transport.close()
