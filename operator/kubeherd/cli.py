"""`kubeherd run` starts the operator; `kubeherd crds` prints the CustomResourceDefinitions."""

from __future__ import annotations

import argparse
import logging
import sys

from kubeherd.kube.client import WriteLimits
from kubeherd.settings import OperatorOptions


def _run(options: argparse.Namespace) -> int:
    import kopf

    import kubeherd.main  # noqa: F401  (registers the handlers)

    kopf.configure(debug=options.debug, verbose=options.verbose)
    if not (options.debug or options.verbose):
        # Kopf logs every handler call at INFO: thousands of lines a minute on a big cluster.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    defaults = WriteLimits()
    operator_options = OperatorOptions(
        limits=WriteLimits(
            qps=options.qps if options.qps is not None else defaults.qps,
            burst=options.burst if options.burst is not None else defaults.burst,
            max_concurrent=options.max_concurrent_writes or defaults.max_concurrent,
        ),
        max_create_backoff=options.max_create_backoff,
    )
    kopf.run(
        # One instance per cluster (the chart runs one replica): no peering objects needed.
        standalone=True,
        clusterwide=not options.namespace,
        namespaces=options.namespace or (),
        liveness_endpoint=options.liveness or None,
        memo=kopf.Memo(options=operator_options),
    )
    return 0


def _crds(_options: argparse.Namespace) -> int:
    from kubeherd.api.crd import render_crds_yaml

    sys.stdout.write(render_crds_yaml())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubeherd", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="run the operator with the current kubeconfig (KUBECONFIG honoured)"
    )
    run.add_argument(
        "-n",
        "--namespace",
        action="append",
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    run.add_argument(
        "--liveness",
        default="http://0.0.0.0:8080/healthz",
        help="liveness endpoint URL (default: %(default)s; empty to disable)",
    )
    run.add_argument("--qps", type=float, help="client-side write rate limit (default: 50)")
    run.add_argument("--burst", type=int, help="client-side write burst (default: 100)")
    run.add_argument(
        "--max-concurrent-writes", type=int, help="writes in flight at once (default: 16)"
    )
    run.add_argument(
        "--max-create-backoff",
        type=float,
        default=60.0,
        help="longest wait, in seconds, between retries of refused pod creates "
        "(default: %(default)s)",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="log more")
    run.add_argument("--debug", action="store_true", help="log everything")
    run.set_defaults(handler=_run)

    crds = commands.add_parser("crds", help="print the CustomResourceDefinitions as YAML")
    crds.set_defaults(handler=_crds)
    return parser


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    result: int = options.handler(options)
    return result


if __name__ == "__main__":
    sys.exit(main())
