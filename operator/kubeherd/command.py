"""How kubeherd's command lines end: the exit codes and the last words of every subcommand.

Shared by `kubeherd` and the kubectl plugin `kubectl-kubeherd`, so that both end as kubectl
does: `error: ...` and exit 1 for a login that cannot work, and death by SIGPIPE, silently, when
the reader of their output has gone (`kubeherd crds | head`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from kubeherd.kube.login import ConfigError

Check = Callable[[argparse.ArgumentParser, argparse.Namespace], None]


def run_command(
    parser: argparse.ArgumentParser, argv: list[str] | None, check: Check | None = None
) -> int:
    """Parse `argv`, run the chosen subcommand's handler and return its exit code; `check`
    refuses combinations of arguments that argparse cannot express (with `parser.error`)."""
    try:
        try:
            options = parser.parse_args(argv)
            if check is not None:
                check(parser, options)
            result: int = options.handler(options)
        finally:
            # Output still buffered (--help's too, before its SystemExit) would meet a closed
            # pipe at interpreter exit, where Python can only print "Exception ignored":
            # flushing here lets the handler below see it.
            sys.stdout.flush()
    except BrokenPipeError:
        die_of_closed_pipe()
    except ConfigError as error:
        # A kubeconfig that cannot work, or an exec plugin that failed: the user's to fix, so
        # one line that says what, as kubectl prints it, and never a traceback.
        sys.stderr.write(f"error: {error}\n")
        return 1
    return result


def die_of_closed_pipe() -> NoReturn:
    """End as kubectl and coreutils end when their reader has gone: killed by SIGPIPE, with
    nothing on stderr. Shells (and `set -o pipefail`) then see the same status as with them.

    Python ignores SIGPIPE so that a socket closed by its peer raises instead of killing the
    process; the default action is restored only here, at the end."""
    # What is left in stdout's buffer must not be flushed into the closed pipe again at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    # Not reached on Linux, where the signal is delivered before kill returns; the status a
    # shell would report for that death otherwise.
    raise SystemExit(128 + signal.SIGPIPE)


def end_process(status: int) -> NoReturn:
    """Exit with `status` now, once everything the process started has stopped: logs and
    output flushed, without the interpreter's teardown. That teardown frees every object one
    at a time, which with a long-running operator's stores of thousands of nodes and pods
    took seconds of the grace period Kubernetes gives a pod after SIGTERM, for nothing."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)
