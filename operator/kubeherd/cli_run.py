"""`kubeherd run`: its options, checked before anything starts, and the operator started
under Kopf with them."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any, NoReturn

from kubeherd import __version__
from kubeherd.admission.configuration import SecretName, ServiceEndpoint, WebhookOptions
from kubeherd.command import end_process
from kubeherd.defaults import (
    DEFAULT_HEALTH_ADDRESS,
    DEFAULT_METRICS_ADDRESS,
    MAX_CREATE_BACKOFF,
    SCHEDULER_STATUS_INTERVAL,
)
from kubeherd.kube.http import limit_tls_read_buffers
from kubeherd.kube.limits import WriteLimits
from kubeherd.metrics.server import parse_address
from kubeherd.peering import PeeringOptions
from kubeherd.settings import OperatorOptions

logger = logging.getLogger(__name__)


def _run(options: argparse.Namespace) -> int:
    import asyncio

    import kopf

    from kubeherd.kopf_adapter import run_identity
    from kubeherd.kube import config
    from kubeherd.kube.credentials import exec_credential
    from kubeherd.kube.http import check_login
    from kubeherd.kube.login import ConfigError
    from kubeherd.main import Runtime  # importing it registers the handlers
    from kubeherd.peering import own_identity

    # Every line from here on is in the chosen format, kubeherd's and the libraries' alike: Kopf
    # puts its handler on the root logger.
    kopf.configure(
        debug=options.debug,
        verbose=options.verbose,
        log_format=kopf.LogFormat[options.log_format.upper()],
    )
    # Warnings of the libraries, too, rather than lines of their own on stderr.
    logging.captureWarnings(True)
    if not (options.debug or options.verbose):
        # Kopf logs every handler call at INFO: thousands of lines a minute on a big cluster.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logger.info("Starting kubeherd %s", __version__)
    # What the login cannot do (a SOCKS proxy, a missing context, an exec plugin that fails)
    # is said now, once, as a ConfigError, rather than by Kopf's login retried forever.
    try:
        login = config.load(options.kubeconfig, options.context)
        check_login(login, os.environ)
        if login.exec_plugin is not None:
            asyncio.run(exec_credential(login.exec_plugin))
    except ConfigError as error:
        if options.log_format != "json":
            raise  # the command's `error: ...` line
        # A log pipeline reading JSON gets the reason as one more object, not a plain line.
        logger.error("Cannot start: %s", error)
        return 1
    defaults = WriteLimits()
    operator_options = OperatorOptions(
        kubeconfig=options.kubeconfig,
        context=options.context,
        limits=WriteLimits(
            qps=options.qps if options.qps is not None else defaults.qps,
            burst=options.burst if options.burst is not None else defaults.burst,
            max_concurrent=options.max_concurrent_writes or defaults.max_concurrent,
        ),
        max_create_backoff=options.max_create_backoff,
        scheduler_status_interval=options.scheduler_status_interval,
        peering=PeeringOptions(options.peering, options.peering_lifetime)
        if options.peering
        else None,
        namespaces=tuple(options.namespace or ()),
        health_address=options.health_address,
        metrics_address=options.metrics_address,
        metrics_secure=options.metrics_secure,
        metrics_cert_dir=options.metrics_cert_dir,
        webhook=webhook_options(options),
        # Named with the webhook off: the configuration an earlier run left, to delete.
        stale_webhook_configuration=""
        if options.webhook_listen
        else (options.webhook_configuration or ""),
    )
    limit_tls_read_buffers()
    kopf.run(
        # Without --peering this is the only instance (the chart's single replica): no peering
        # objects needed. With it, Kopf pauses every replica but the highest-ranked one.
        standalone=not options.peering,
        peering_name=options.peering or None,
        priority=operator_options.peering.priority if operator_options.peering else None,
        # Ours, not Kopf's default, which crashes for a uid without a passwd entry (the image's).
        identity=run_identity(own_identity()),
        clusterwide=not options.namespace,
        namespaces=options.namespace or (),
        # kubeherd serves /healthz and /readyz itself (--health-address): Kopf's /healthz was
        # green while kubeherd's own watches could not list.
        liveness_endpoint=None,
        memo=Runtime(options=operator_options),
        stop_flag=operator_options.stopping,
    )
    # A replica that was outranked after it had been active exits non-zero, to be restarted.
    return 1 if operator_options.demoted.is_set() else 0


def _run_to_the_end(options: argparse.Namespace) -> NoReturn:
    """`kubeherd run`, then the process's end: once Kopf has returned, kubeherd's cleanup has
    stopped its watches and servers and released its peering entry, and nothing is left to do
    but exit."""
    end_process(_run(options))


def _address(text: str) -> str:
    if text:
        try:
            parse_address(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return text


def webhook_options(options: argparse.Namespace) -> WebhookOptions | None:
    if not options.webhook_listen:
        return None
    return WebhookOptions(
        listen=options.webhook_listen,
        service=options.webhook_service,
        configuration=options.webhook_configuration or WebhookOptions.configuration,
        owner=options.webhook_owner,
        secret=options.webhook_secret,
    )


def _service(text: str) -> ServiceEndpoint:
    try:
        return ServiceEndpoint.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _secret(text: str) -> SecretName:
    try:
        return SecretName.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_webhook(run: argparse.ArgumentParser) -> None:
    webhook = run.add_argument_group(
        "admission webhook",
        "refuses invalid CustomDaemonSets and SchedulerProfiles at kubectl apply "
        "(failurePolicy Ignore: an operator that is down blocks nothing)",
    )
    webhook.add_argument(
        "--webhook-listen",
        default=os.environ.get("KUBEHERD_WEBHOOK_LISTEN", "auto"),
        metavar="HOST:PORT",
        help="where to serve it; port 0: any free port; empty: no webhook; 'auto' (default): "
        "on 127.0.0.1 when the API server is on this machine (the local cluster), else off "
        "(env KUBEHERD_WEBHOOK_LISTEN)",
    )
    webhook.add_argument(
        "--webhook-service",
        type=_service,
        metavar="NAMESPACE/NAME[:PORT]",
        help="the Service the API server calls it through (the chart's); its replicas share "
        "a certificate in the Secret NAME-tls; default: by URL, at the listen address",
    )
    webhook.add_argument(
        "--webhook-secret",
        type=_secret,
        metavar="NAMESPACE/NAME",
        help="by URL: keep the certificate in this Secret (created if missing), so that a "
        "restart on the same listen address serves the same CA and leaves the configuration "
        "as it is; default: a new certificate at each start. Not with --webhook-service, "
        "whose Secret is NAME-tls",
    )
    webhook.add_argument(
        "--webhook-configuration",
        metavar="NAME",
        help="the ValidatingWebhookConfiguration kubeherd keeps (default: kubeherd); with "
        "--webhook-listen= (off), the one to delete if an earlier run left it",
    )
    webhook.add_argument(
        "--webhook-owner",
        default="",
        metavar="CLUSTERROLE",
        help="a ClusterRole that owns the configuration, so that deleting it (helm "
        "uninstall) deletes the configuration",
    )


def add_run(commands: Any) -> None:
    """`kubeherd run`, its options and its handler."""
    run = commands.add_parser(
        "run", help="run the operator with the current kubeconfig (KUBECONFIG honoured)"
    )
    run.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="the kubeconfig to log in with; default: KUBECONFIG, else the pod's service "
        "account, else ~/.kube/config",
    )
    run.add_argument(
        "--context", metavar="NAME", help="the kubeconfig's context; default: its current one"
    )
    run.add_argument(
        "-n",
        "--namespace",
        action="append",
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    run.add_argument(
        "--health-address",
        type=_address,
        default=DEFAULT_HEALTH_ADDRESS,
        help="HOST:PORT to serve /healthz (liveness) and /readyz (readiness: every watch has "
        "listed and none keeps failing) on (default: %(default)s; empty to disable)",
    )
    run.add_argument(
        "--metrics-address",
        type=_address,
        default=DEFAULT_METRICS_ADDRESS,
        help="HOST:PORT to serve Prometheus metrics on at /metrics (default: %(default)s; "
        "empty to disable)",
    )
    run.add_argument(
        "--metrics-secure",
        action="store_true",
        help="serve /metrics over HTTPS, only to bearer tokens the API server allows to get "
        "/metrics (TokenReview, then SubjectAccessReview); default: plain HTTP, to anyone",
    )
    run.add_argument(
        "--metrics-cert-dir",
        default="",
        metavar="DIR",
        help="with --metrics-secure: the folder with the serving certificate and key (tls.crt, "
        "tls.key); default: a self-signed certificate made at start, kept in memory",
    )
    run.add_argument(
        "--qps",
        type=float,
        help="client-side write rate limit; 0 (default) leaves pacing to the API server's "
        "priority and fairness",
    )
    run.add_argument(
        "--burst",
        type=int,
        help=f"client-side write burst, with --qps (default: {WriteLimits().burst})",
    )
    run.add_argument(
        "--max-concurrent-writes",
        type=int,
        help=f"writes in flight at once (default: {WriteLimits().max_concurrent})",
    )
    run.add_argument(
        "--max-create-backoff",
        type=float,
        default=MAX_CREATE_BACKOFF,
        help="longest wait, in seconds, between retries of refused pod creates "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--scheduler-status-interval",
        type=float,
        default=SCHEDULER_STATUS_INTERVAL,
        help="seconds between reads of each SchedulerProfile's Deployment and Lease "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--peering",
        default="",
        metavar="NAME",
        help="run as one of several replicas, only the oldest live one active, coordinated by "
        "Kopf's peering object NAME (created if missing; its CRD must exist); default: alone",
    )
    run.add_argument(
        "--peering-lifetime",
        type=int,
        default=60,
        help="seconds a replica counts as alive after its last renewal: the longest a standby "
        "waits to take over from one that died (default: %(default)s)",
    )
    _add_webhook(run)
    run.add_argument(
        "--log-format",
        choices=("plain", "full", "json"),
        default="full",
        help="plain: the message only; full: with time, logger and level; json: one JSON "
        "object per line, for log collectors (default: %(default)s)",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="log more")
    run.add_argument("--debug", action="store_true", help="log everything")
    run.set_defaults(handler=_run_to_the_end)


def check_run(parser: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    if getattr(options, "metrics_cert_dir", "") and not options.metrics_secure:
        # A certificate given for plain HTTP would be ignored: a mistake worth saying.
        parser.error("--metrics-cert-dir needs --metrics-secure")
    service = getattr(options, "webhook_service", None)
    if getattr(options, "webhook_secret", None) and service is not None:
        # Replicas behind a Service find their Secret by the Service's name (so does the
        # chart's RBAC): another name would split them.
        kept = WebhookOptions(service=service).certificate_secret
        parser.error(
            "--webhook-secret is for a webhook reached by URL: with --webhook-service, "
            f"the certificate is kept in the Secret {kept}"
        )
