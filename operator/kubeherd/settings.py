"""Kopf settings, set on purpose in one place (applied by the startup handler)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import kopf

from kubeherd.admission.configuration import WebhookOptions
from kubeherd.daemonset.core.pods import OWNER_LABEL
from kubeherd.defaults import (
    DEFAULT_HEALTH_ADDRESS,
    DEFAULT_METRICS_ADDRESS,
    MAX_CREATE_BACKOFF,
    SCHEDULER_STATUS_INTERVAL,
)
from kubeherd.kube.event_posting import REPORTING_COMPONENT
from kubeherd.kube.limits import WriteLimits
from kubeherd.names import GROUP
from kubeherd.peering import PeeringOptions

# The longest wait between Kopf's retries of a request that found no API server (seconds), as
# kubeherd's own watches wait at most.
MAX_REQUEST_RETRY_DELAY = 30.0
# Objects per page of Kopf's first listings.
LISTING_CHUNK = 50
# Seconds Kopf's worker for an object waits, idle, for its next event before it ends.
IDLE_WORKER_SECONDS = 0.5


@dataclass(frozen=True)
class OperatorOptions:
    """What `kubeherd run` lets a user choose."""

    limits: WriteLimits = field(default_factory=WriteLimits)
    # The login (`--kubeconfig`, `--context`): None looks as controller-runtime does
    # (KUBECONFIG, the pod's service account, ~/.kube/config; see kubeherd.kube.config.load).
    kubeconfig: str | None = None
    context: str | None = None
    # Ceiling of the delay between retries when the API server refuses pod creates (quota...).
    max_create_backoff: float = MAX_CREATE_BACKOFF
    # How often each SchedulerProfile's Deployment and Lease are read for its status (seconds).
    scheduler_status_interval: float = SCHEDULER_STATUS_INTERVAL
    # Active/standby replicas (`--peering`); None: this is the only instance (standalone).
    peering: PeeringOptions | None = None
    # Where `/healthz` and `/readyz` are served (`--health-address`, HOST:PORT); empty: nowhere.
    health_address: str = DEFAULT_HEALTH_ADDRESS
    # Where `/metrics` is served (`--metrics-address`, HOST:PORT); empty: nowhere.
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    # HTTPS, and only for tokens allowed to get /metrics (`--metrics-secure`); its certificate
    # and key from this folder (`--metrics-cert-dir`), else made at start.
    metrics_secure: bool = False
    metrics_cert_dir: str = ""
    # The namespaces watched (`--namespace`); empty: all of them.
    namespaces: tuple[str, ...] = ()
    # The admission webhook (`--webhook-*`); None: off. listen "auto": on when the API server
    # runs on this machine (see main.admission_server).
    webhook: WebhookOptions | None = field(default_factory=lambda: WebhookOptions(listen="auto"))
    # With the webhook off: a configuration of kubeherd's to delete (the chart's, once turned
    # off), so that the API server stops calling a webhook nobody serves.
    stale_webhook_configuration: str = ""
    # kopf.run's stop flag: set when a peer outranks this replica (see `demoted`), and by the
    # cleanup handler when a signal stops the operator. An asyncio.Event, which Kopf awaits in
    # its loop; a threading.Event Kopf waits for in an executor thread, which asyncio.run joins
    # at exit: after SIGTERM or SIGINT, with the flag never set, the process never exited. And
    # Kopf gives its waiter on the flag 5 s to end after a signal: setting it at cleanup ends
    # it at once. The event binds to Kopf's loop when first awaited, so it may be made before
    # kopf.run starts that loop.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when a peer outranked this replica after it had been active: it exits non-zero.
    demoted: asyncio.Event = field(default_factory=asyncio.Event)

    def demote(self) -> None:
        self.demoted.set()
        self.stopping.set()


class RetryForever:
    """Kopf's delays between retries of a request that failed for want of an API server
    (connection errors, 5xx, a proxy's refusal): doubling up to a ceiling, without end. Kopf's
    own tuple ends after about a minute, and its resource scan at start then failed the whole
    operator, which exited: a replica that cannot reach the API server is to stay up, not
    ready, saying why (/readyz), as controller-runtime's keep trying. Iterated afresh for each
    request."""

    def __iter__(self) -> Iterator[float]:
        delay = 1.0
        while True:
            yield delay
            delay = min(delay * 2, MAX_REQUEST_RETRY_DELAY)


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """Kopf builds a diff base (a deep copy of the object, trimmed) for every watch event of every
    kind, for change handlers (on.create, on.update, on.field ...). kubeherd has none: only raw
    events and indices. Each pod event paid for one anyway: 8 % of the operator's CPU in a
    rollout (py-spy, 1,000 pods). tests/unit/test_settings.py fails if a change handler is added.
    """

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()


def configure(settings: kopf.OperatorSettings, peering: PeeringOptions | None = None) -> None:
    if peering is not None:
        # How long a replica's entry counts as alive without a renewal: the longest a standby
        # waits to take over from a replica that died without removing its entry.
        settings.peering.lifetime = peering.lifetime
    # Our own names on anything Kopf might write to objects we own (never to Nodes: the node
    # handlers are raw events and indices, which persist nothing).
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP, v1=False)
    settings.persistence.diffbase_storage = NoDiffBase(
        prefix=GROUP, key="last-handled-configuration", v1=False
    )
    # Events kubeherd posts itself; Kopf's own ones (handler failures) carry our name too.
    settings.posting.reporting_component = REPORTING_COMPONENT
    settings.posting.level = logging.WARNING
    # Watch only the pods we made: the API server filters, so memory does not grow with the
    # number of other pods in the cluster.
    settings.watching.label_selectors["v1", "pods"] = OWNER_LABEL
    # Kopf's first listing of each kind a page at a time: CustomDaemonSets can be large, and
    # all of them at once were the peak of a restart.
    settings.watching.chunk_size = LISTING_CHUNK
    # Kopf's worker for an object holds the object's last raw body while it waits for the next
    # event (5 s by default): at a restart, every CustomDaemonSet's whole body at once.
    # kubeherd's handlers take what they keep of a body when called, so a worker waiting
    # longer saves nothing but spawning it again for the next event, which is cheap and rare
    # (a CustomDaemonSet changes at most about once a second, with its status).
    settings.queueing.idle_timeout = IDLE_WORKER_SECONDS
    # Explicit timeouts: a watch is restarted by the server every 10 minutes at most, and a
    # silent stream is detected by Kopf's inactivity timeout (bookmarks arrive every minute).
    settings.watching.server_timeout = 600
    settings.watching.client_timeout = 660
    settings.watching.connect_timeout = 30
    settings.watching.inactivity_timeout = 180
    settings.networking.error_backoffs = RetryForever()
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 30
    settings.execution.default_backoff = 10
    # Every handler is async; should a sync one ever be added, it runs in a small, bounded pool.
    settings.execution.max_workers = 4
    # kubeherd keeps its webhook configuration itself (kubeherd/admission): Kopf's would set a
    # 30 s timeout, and each replica would write its own CA.
    settings.admission.managed = None
