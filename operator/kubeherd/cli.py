"""`kubeherd run` starts the operator; `kubeherd rollout` follows, lists and undoes
CustomDaemonSet rollouts (also as `kubectl kubeherd rollout`); `kubeherd crds` prints the
CustomResourceDefinitions."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kubeherd import __version__
from kubeherd.cli_run import add_run, check_run
from kubeherd.command import run_command
from kubeherd.kubectl_plugin import add_rollout


def _crds(options: argparse.Namespace) -> int:
    from kubeherd.api.crd import render_crds_yaml

    try:
        sys.stdout.write(render_crds_yaml(options.plurals))
    except ValueError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    return 0


def _reference(options: argparse.Namespace) -> int:
    from kubeherd.api.markdown import render_reference

    sys.stdout.write(render_reference())
    return 0


def _render(options: argparse.Namespace) -> int:
    from pathlib import Path

    from kubeherd.scheduler.core.render import RenderError, render

    try:
        render(
            Path(options.filename),
            static=options.static_pod,
            kubeconfig=options.kubeconfig,
            out=sys.stdout,
            warn=sys.stderr,
            kubernetes_version=options.kubernetes_version,
            port=options.port,
            config_root=options.config_root,
        )
    except RenderError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    return 0


def _add_render(commands: Any) -> None:
    render = commands.add_parser(
        "render", help="print what a resource renders to, without a cluster"
    )
    kinds = render.add_subparsers(dest="kind", required=True)
    profile = kinds.add_parser(
        "schedulerprofile",
        aliases=["sp"],
        help="the KubeSchedulerConfiguration of a SchedulerProfile (checked first)",
    )
    profile.add_argument("-f", "--filename", required=True, help="a SchedulerProfile YAML file")
    profile.add_argument(
        "--static-pod",
        action="store_true",
        help="print a static Pod manifest for a kubeadm control-plane node instead",
    )
    profile.add_argument(
        "--kubeconfig",
        default="",
        help="clientConnection.kubeconfig in the configuration; default: the pod's service "
        "account. Required with --static-pod (the node's /etc/kubernetes/scheduler.conf), "
        "and the same for the configuration of that Pod",
    )
    profile.add_argument(
        "--kubernetes-version",
        default="",
        help="the cluster's Kubernetes version (with --static-pod: the node's, as kubelet "
        "--version prints it): the configuration is checked for its minor, and a static Pod "
        "runs its official kube-scheduler image. Default: checked for the newest minor kubeherd "
        "knows; required with --static-pod unless spec.image is set",
    )
    profile.add_argument(
        "--port",
        type=int,
        default=10260,
        help="with --static-pod: the secure port in the host's network; one per static "
        "scheduler on a node (the node's own kube-scheduler has 10259); the next "
        "SchedulerProfiles of the file get the next ports (default: %(default)s)",
    )
    profile.add_argument(
        "--config-root",
        default="/etc/kubernetes/kubeherd",
        metavar="DIR",
        help="with --static-pod: the node's folder of static schedulers' configurations, each "
        "in DIR/<name>/config.yaml (default: %(default)s)",
    )
    render.set_defaults(handler=_render)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubeherd", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    add_run(commands)
    crds = commands.add_parser("crds", help="print the CustomResourceDefinitions as YAML")
    crds.add_argument(
        "plurals",
        nargs="*",
        metavar="PLURAL",
        help="only these (customdaemonsets, schedulerprofiles); default: all",
    )
    crds.set_defaults(handler=_crds)
    reference = commands.add_parser(
        "reference", help="print the CRDs' field reference as Markdown (docs/reference.md)"
    )
    reference.set_defaults(handler=_reference)
    add_rollout(commands)
    _add_render(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv, check_run)


if __name__ == "__main__":
    sys.exit(main())
