"""`kubeherd run` as a process of its own, without a cluster: an API server address that refuses
connections is enough for it to start (its liveness endpoint answers while Kopf retries) and to
be stopped."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import yaml

from localcluster.operator import KubeherdProcess, free_port

# `kubeherd run` as the image runs it: the user has no passwd entry (uid 65532 there), and no
# USER or LOGNAME tells its name. pwd.getpwuid raises what it raises for such a uid.
AS_AN_UNLISTED_UID = """
import pwd
import runpy

def getpwuid(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")

pwd.getpwuid = getpwuid
runpy.run_module("kubeherd.cli", run_name="__main__", alter_sys=True)
"""


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose API server refuses connections (nothing listens on its port)."""
    path = tmp_path / "kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "unused"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class WithoutPasswdEntry(KubeherdProcess):
    def command(self) -> list[str]:
        python, _, _, *arguments = super().command()  # python -m kubeherd.cli run ...
        return [python, "-c", AS_AN_UNLISTED_UID, *arguments]

    def environment(self) -> dict[str, str]:
        # getpass.getuser() asks pwd only if none of these names the user; no POD_ID either,
        # which the chart once set only for peered replicas.
        unset = ("LOGNAME", "USER", "LNAME", "USERNAME", "POD_ID")
        return {k: v for k, v in super().environment().items() if k not in unset}


def test_kubeherd_runs_as_a_user_without_a_passwd_entry(
    unreachable_kubeconfig: Path, tmp_path: Path
) -> None:
    """Kopf's default identity asks for the user's name, and crashed the operator in the image
    (KeyError: 'getpwuid(): uid not found: 65532')."""
    process = WithoutPasswdEntry(unreachable_kubeconfig, tmp_path / "kubeherd.log")
    try:
        process.start(timeout=60)  # fails with the log's tail if the process exits

        assert not process.exited()
    finally:
        process.kill()


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_kubeherd_exits_promptly_on_sigterm_and_sigint(
    unreachable_kubeconfig: Path, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    """Kubernetes stops a pod with SIGTERM, a terminal with SIGINT. Both once left the process
    hanging after Kopf had stopped: asyncio.run joined the thread in which Kopf waited for the
    threading.Event that was its stop flag, and that was never set."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = KubeherdProcess(
        unreachable_kubeconfig, tmp_path / "kubeherd.log", environment={"TMPDIR": str(temporary)}
    )
    process.start(timeout=60)
    # Started in full (its certificates made, its servers up): what follows is the stop of a
    # running operator.
    deadline = time.monotonic() + 30
    while "Activity 'start' succeeded" not in process.output():
        assert time.monotonic() < deadline, process.log_tail()
        time.sleep(0.1)

    signalled = time.monotonic()
    process.stop(signal=stop_signal, timeout=10)  # kills it and fails if it is still running
    took = time.monotonic() - signalled

    assert process.returncode == 0, process.log_tail()
    assert f"Signal {stop_signal.name} is received" in process.output()
    assert "Activity 'stop' succeeded" in process.output()  # kubeherd's cleanup handler ran
    # The webhook never served (no API server to configure): no key file was left behind.
    assert list(temporary.iterdir()) == []
    print(f"kubeherd exited {took:.1f}s after {stop_signal.name}")


def test_kubeherd_stopped_while_starting_stops_what_had_started(
    unreachable_kubeconfig: Path, tmp_path: Path
) -> None:
    """A pod deleted as it starts gets SIGTERM while its certificates are being made: Kopf runs
    no cleanup activity after a cancelled start-up, so kubeherd stops its parts itself."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = KubeherdProcess(
        unreachable_kubeconfig, tmp_path / "kubeherd.log", environment={"TMPDIR": str(temporary)}
    )
    process.start(timeout=60)  # /healthz answers first, while the rest starts
    process.stop(signal=signal.SIGTERM, timeout=10)

    assert process.returncode == 0, process.log_tail()
    output = process.output()
    assert (
        "Stopped while starting: stopping what had started" in output
        or "Activity 'stop' succeeded" in output
    ), process.log_tail()
    assert list(temporary.iterdir()) == []
