"""The command lines as a user runs them: the installed console scripts, as processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

import kubeherd
from localcluster.operator import free_port
from tests.helpers import REPO

# The console scripts that installing the package puts next to the interpreter.
SCRIPTS = Path(sys.executable).parent


def run_script(
    name: str, *arguments: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / name), *arguments],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_version_prints_the_installed_packages_version() -> None:
    printed = run_script("kubeherd", "--version")

    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == f"kubeherd {version('kubeherd')}\n"
    assert kubeherd.__version__ == version("kubeherd")


def into_a_closed_pipe(name: str, *arguments: str) -> subprocess.CompletedProcess[bytes]:
    """Run the script with its output piped into a reader that has already exited, as `head`
    or `grep -q` have once they have seen enough."""
    reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)
    assert reader.stdin is not None
    reader.wait(timeout=10)  # the only read end of the pipe is closed now
    try:
        return subprocess.run(
            [str(SCRIPTS / name), *arguments],
            stdout=reader.stdin,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        reader.stdin.close()


@pytest.mark.parametrize(
    "arguments",
    [
        ("crds",),
        ("reference",),
        ("render", "sp", "-f", str(REPO / "examples" / "schedulerprofile-packing.yaml")),
    ],
    ids=" ".join,
)
def test_output_into_a_closed_pipe_ends_quietly_as_kubectl_does(arguments: tuple[str]) -> None:
    ended = into_a_closed_pipe("kubeherd", *arguments)

    assert ended.stderr == b""
    # Killed by SIGPIPE, as kubectl and coreutils are: a shell reports 141.
    assert ended.returncode == -signal.SIGPIPE


@pytest.mark.parametrize(
    "arguments", [("--help",), ("rollout", "status", "--help"), ("--version",)], ids=" ".join
)
def test_help_into_a_closed_pipe_ends_quietly(arguments: tuple[str]) -> None:
    ended = into_a_closed_pipe("kubeherd", *arguments)

    assert ended.stderr == b""
    # argparse drops what it cannot write and exits as after printing it.
    assert ended.returncode == 0


def kubeconfig_of(folder: Path, server: str, user: dict[str, Any]) -> Path:
    path = folder / "kubeconfig"
    body = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.fixture
def failing_exec_plugin(tmp_path: Path) -> Path:
    """A kubeconfig whose exec credential plugin fails, as an expired cloud login does."""
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "/bin/sh",
        "args": ["-c", "echo 'the login has expired' >&2; exit 3"],
        "interactiveMode": "Never",
    }
    return kubeconfig_of(tmp_path, f"https://127.0.0.1:{free_port()}", {"exec": plugin})


@pytest.mark.parametrize("script", ["kubeherd", "kubectl-kubeherd"])
@pytest.mark.parametrize("action", ["status", "history", "undo"])
def test_a_failing_exec_plugin_is_an_error_line_not_a_traceback(
    failing_exec_plugin: Path, script: str, action: str
) -> None:
    ended = run_script(
        script, "rollout", action, "cds/agent", "--kubeconfig", str(failing_exec_plugin)
    )

    assert ended.returncode == 1
    assert "Traceback" not in ended.stderr
    # The plugin's own words come first, as kubectl passes them through; then the error.
    assert "the login has expired" in ended.stderr
    last = ended.stderr.splitlines()[-1]
    assert last.startswith("error: ")
    assert last.endswith("exec plugin sh failed with exit code 3")
    assert ended.stdout == ""


def test_rollout_context_picks_the_kubeconfig_context(failing_exec_plugin: Path) -> None:
    missing = run_script(
        "kubectl-kubeherd",
        "rollout",
        "status",
        "cds/agent",
        "--context",
        "elsewhere",
        env={"KUBECONFIG": str(failing_exec_plugin)},
    )
    named = run_script(
        "kubectl-kubeherd",
        "rollout",
        "status",
        "cds/agent",
        "--context",
        "c",
        env={"KUBECONFIG": str(failing_exec_plugin)},
    )

    assert missing.returncode == 1
    assert missing.stderr == (
        f"error: cannot use --context: context 'elsewhere' is not in {failing_exec_plugin}\n"
    )
    # The named context is used: its user's plugin ran (and failed).
    assert named.stderr.splitlines()[-1].endswith("exec plugin sh failed with exit code 3")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("rollout", "status"), "error: the following arguments are required: resource"),
        (("rollout", "status", "cds/a", "--nope"), "error: unrecognized arguments: --nope"),
        (("rollout", "status", "cds/a", "--timeout", "soon"), "error: argument --timeout: "),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else "",
)
def test_kubectl_plugin_usage_errors_exit_1_as_kubectl_does(
    arguments: tuple[str, ...], message: str
) -> None:
    ended = run_script("kubectl-kubeherd", *arguments)

    assert ended.returncode == 1
    first, see = ended.stderr.splitlines()[-2:]
    assert first.startswith(message)
    assert see.startswith("See 'kubectl kubeherd ")
    assert see.endswith(" --help' for usage.")


def test_kubectl_plugin_version() -> None:
    printed = run_script("kubectl-kubeherd", "--version")

    assert (printed.returncode, printed.stdout) == (0, f"kubectl kubeherd {version('kubeherd')}\n")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=str)
def test_rollout_status_stopped_by_a_signal_exits_1_quietly(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """kubectl rollout status exits 1, printing nothing, on SIGINT, SIGTERM and SIGHUP."""
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        server = f"https://127.0.0.1:{silent.getsockname()[1]}"
        kubeconfig = kubeconfig_of(tmp_path, server, {"token": "unused"})
        waiting = subprocess.Popen(
            [str(SCRIPTS / "kubectl-kubeherd"), "rollout", "status", "cds/agent"],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        silent.settimeout(30)
        connection, _ = silent.accept()  # it is waiting for the API server now
        waiting.send_signal(stop)
        stdout, stderr = waiting.communicate(timeout=30)
        connection.close()

    assert (waiting.returncode, stdout, stderr) == (1, "", "")


def test_run_with_a_failing_exec_plugin_ends_with_an_error_line(failing_exec_plugin: Path) -> None:
    ended = run_script(
        "kubeherd", "run", "--kubeconfig", str(failing_exec_plugin), "--webhook-listen="
    )

    assert ended.returncode == 1
    assert "Traceback" not in ended.stderr
    assert ended.stderr.splitlines()[-1] == "error: exec plugin sh failed with exit code 3"


def test_run_with_log_format_json_reports_a_failing_login_as_json(
    failing_exec_plugin: Path,
) -> None:
    ended = run_script(
        "kubeherd",
        "run",
        "--log-format=json",
        "--kubeconfig",
        str(failing_exec_plugin),
        "--webhook-listen=",
    )

    records = [json.loads(line) for line in ended.stderr.splitlines()]
    assert ended.returncode == 1
    assert records[-1]["severity"] == "error"
    assert records[-1]["message"] == "Cannot start: exec plugin sh failed with exit code 3"
    # The plugin's own words, as a record of their own.
    assert any("the login has expired" in record["message"] for record in records)


def test_the_operators_last_step_flushes_its_output_and_skips_the_interpreters_teardown() -> None:
    """`kubeherd run` ends with end_process once Kopf and kubeherd's cleanup have stopped: what
    it logged and printed is out, and the interpreter's teardown (freeing every object of the
    stores, seconds at scale) never runs, which an exit hook's silence shows."""
    program = (
        "import atexit, logging, sys\n"
        "from kubeherd.command import end_process\n"
        "logging.basicConfig(stream=sys.stderr, format='%(message)s')\n"
        "atexit.register(lambda: print('teardown ran', file=sys.stderr))\n"
        "sys.stdout.write('still buffered')\n"
        "logging.getLogger('kubeherd').warning('last words')\n"
        "end_process(3)\n"
    )
    ended = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )

    assert ended.returncode == 3
    assert ended.stdout == "still buffered"
    assert ended.stderr == "last words\n"
