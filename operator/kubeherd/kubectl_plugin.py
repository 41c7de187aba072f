"""`kubectl kubeherd ...`: the kubectl plugin, an executable named `kubectl-kubeherd` that the
package installs. kubectl runs it, with the arguments after `kubeherd`, when it is on PATH.

It has the commands of kubeherd that a user runs next to kubectl (`rollout status|history|undo`
and `rollout canary validate|pause|unpause|fail`),
and behaves as kubectl's own: its flags, its messages and its exit codes (every error, usage
errors included, is `error: ...` and exit 1). It never imports Kopf, so it starts quickly.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from kubeherd import __version__
from kubeherd.command import run_command

PROG = "kubectl kubeherd"


class KubectlStyleParser(argparse.ArgumentParser):
    """Reports a usage error as kubectl does: on stderr, with exit code 1."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"error: {message}\nSee '{self.prog} --help' for usage.\n")


def _rollout(options: argparse.Namespace) -> int:
    if options.action == "canary":
        from kubeherd import rollout_canary

        return rollout_canary.run(options)
    from kubeherd import rollouts

    return rollouts.run(options.action, options)


def _duration(text: str) -> float:
    from kubeherd.rollouts import parse_duration

    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_rollout(commands: Any) -> None:
    """The `rollout` subcommand, with kubectl's login flags, under `commands`."""
    rollout = commands.add_parser(
        "rollout",
        help="rollout status, history, undo and canary of a CustomDaemonSet (like kubectl rollout)",
    )
    actions = rollout.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("resource", help="cds/NAME")
    common.add_argument(
        "-n", "--namespace", help="default: the kubeconfig context's namespace, else default"
    )
    common.add_argument(
        "--kubeconfig",
        help="default: KUBECONFIG's files, else ~/.kube/config, else the pod's service account",
    )
    common.add_argument(
        "--context", help="the kubeconfig context to use; default: its current-context"
    )

    status = actions.add_parser(
        "status",
        parents=[common],
        help="wait until the rollout is done; fail when it is stuck",
    )
    status.add_argument(
        "--timeout",
        type=_duration,
        default=0.0,
        help="give up after this long (90s, 5m, 1h); default: wait forever",
    )
    history = actions.add_parser("history", parents=[common], help="list the revisions")
    history.add_argument(
        "--revision", type=int, default=0, help="show this revision's pod template"
    )
    undo = actions.add_parser(
        "undo", parents=[common], help="bring back the previous (or a given) template"
    )
    undo.add_argument(
        "--to-revision", type=int, default=0, help="the revision to go back to; default: previous"
    )
    canary = actions.add_parser(
        "canary", help="validate, pause, unpause or fail the canary of the current template"
    )
    verbs = canary.add_subparsers(dest="verb", required=True)
    for verb, text in (
        ("validate", "let the rollout go on to every node now"),
        ("pause", "hold the rollout at the canary"),
        ("unpause", "watch the canary again; its restarts so far are acknowledged"),
        ("fail", "stop the rollout (and roll the canary back, with autoFail.rollback)"),
    ):
        verbs.add_parser(verb, parents=[common], help=text)
    rollout.set_defaults(handler=_rollout)


def build_parser() -> argparse.ArgumentParser:
    parser = KubectlStyleParser(prog=PROG, description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_rollout(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
