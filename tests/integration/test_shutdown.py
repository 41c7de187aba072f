"""`kubeherd run` stops when told to: on SIGTERM, as Kubernetes stops a pod, and on SIGINT, as
Ctrl-C in a terminal, it runs its cleanup and exits 0 within seconds.

Both signals once left the process running forever after Kopf had stopped (its stop flag was a
threading.Event, waited for in a thread that asyncio.run joined at exit); the tests' own
KubeherdProcess.stop hid it with a silent SIGKILL. It now fails when it has to kill.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster
from tests.helpers import OperatorProcess, eventually

pytestmark = [pytest.mark.cluster]

# Kubernetes kills a pod's container 30 s after SIGTERM (terminationGracePeriodSeconds); kubeherd
# needs far less: once stopping, Kopf waits at most 5 s for leftover tasks, then cancels them.
EXIT_WITHIN = 10.0


@pytest.fixture
def own_operator(
    local_cluster: LocalCluster, operator_kubeconfig: Path, namespace: str
) -> Iterator[OperatorProcess]:
    """An operator of the test's own beside the session's one: it watches only the test's empty
    namespace, so that it has nothing to do that the session's operator does."""
    process = OperatorProcess(
        local_cluster,
        name=f"kubeherd-{namespace}",
        arguments=("--namespace", namespace),
        kubeconfig=operator_kubeconfig,
    )
    yield process
    process.kill()  # only if a failed test left it running


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_the_operator_exits_promptly_on_sigterm_and_sigint(
    own_operator: OperatorProcess, stop_signal: signal.Signals
) -> None:
    own_operator.start()
    # Stopped while it watches, as a pod that has been running is.
    eventually(
        lambda: "Starting the watch-stream for" in own_operator.output(),
        what="the operator's watch streams (Kopf logs their start with --verbose)",
    )

    signalled = time.monotonic()
    own_operator.stop(signal=stop_signal, timeout=EXIT_WITHIN)  # fails if it had to be killed
    took = time.monotonic() - signalled

    output = own_operator.output()
    assert own_operator.returncode == 0, f"exit code {own_operator.returncode}:\n{output[-3000:]}"
    assert f"Signal {stop_signal.name} is received" in output
    assert "Activity 'stop' succeeded" in output  # kubeherd's cleanup handler ran
    assert took < EXIT_WITHIN
