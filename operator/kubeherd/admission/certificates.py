"""The webhook's own CA and serving certificate: the API server only calls webhooks over TLS
and checks the certificate against the caBundle of the webhook configuration.

Making and reading certificates takes cryptography, which would stay in the operator's memory
for as long as it runs: that work is done by a child process (admission/certificate_worker.py)
that exits once it has answered. The calls here block until it has: async callers run them in a
thread (asyncio.to_thread).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubeherd

# The module the child process runs (a test may point it elsewhere).
WORKER = "kubeherd.admission.certificate_worker"
# Making a key pair takes milliseconds; a worker that has not answered by then never will.
WORKER_TIMEOUT = 60.0
# The end of the worker's stderr that an error quotes: the last lines of a traceback.
STDERR_QUOTED = 2000


class CertificateWorkerError(RuntimeError):
    """The child process that makes and reads certificates failed, or did not answer."""


@dataclass(frozen=True)
class ServingCertificate:
    """PEM texts: the CA the API server trusts, and the certificate and key the server uses."""

    ca: bytes
    certificate: bytes
    key: bytes

    def serves(self, hostnames: Iterable[str], now: datetime.datetime) -> bool:
        """Whether it is valid for all the names (DNS names or IP addresses) for a while yet."""
        answer = _ask_worker(
            {
                "action": "serves",
                "certificate": self.certificate.decode(),
                "hostnames": list(hostnames),
                "now": now.isoformat(),
            }
        )
        return bool(answer["serves"])

    @property
    def path_secret(self) -> str:
        """A URL path segment only the API server (told it by the webhook configuration) and
        the certificate's holders know. The API server does not authenticate itself to a
        webhook, so the server answers requests on this path only: a pod that forges an
        AdmissionReview gets a 404, not a dry-run as the operator. Derived from the key, so
        every replica sharing the certificate serves the same path, and a new key a new one."""
        digest = hmac.new(self.key, b"kubeherd webhook path", hashlib.sha256).hexdigest()
        return digest[:32]


def issue(hostnames: list[str], now: datetime.datetime) -> ServingCertificate:
    """A new CA and a certificate it signs for the names (the first one is the common name)."""
    if not hostnames:
        raise ValueError("a serving certificate needs at least one hostname")
    answer = _ask_worker({"action": "issue", "hostnames": hostnames, "now": now.isoformat()})
    return ServingCertificate(
        ca=answer["ca"].encode(),
        certificate=answer["certificate"].encode(),
        key=answer["key"].encode(),
    )


def _ask_worker(request: dict[str, Any]) -> dict[str, Any]:
    """The worker's answer to one request; ValueError when it found the request invalid."""
    try:
        finished = subprocess.run(
            # -P: the working folder's files must not stand in for kubeherd's modules.
            [sys.executable, "-P", "-m", WORKER],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT,
            env=_worker_environment(),
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise CertificateWorkerError(
            f"{WORKER} did not answer within {WORKER_TIMEOUT:g} s"
        ) from error
    except OSError as error:
        raise CertificateWorkerError(f"{WORKER} could not be started: {error}") from error
    if finished.returncode != 0:
        raise CertificateWorkerError(
            f"{WORKER} failed (exit status {finished.returncode}): "
            f"{finished.stderr.strip()[-STDERR_QUOTED:]}"
        )
    try:
        answer: dict[str, Any] = json.loads(finished.stdout)
    except ValueError as error:
        raise CertificateWorkerError(
            f"{WORKER} answered no JSON: {finished.stdout[:STDERR_QUOTED]!r}"
        ) from error
    if "invalid" in answer:
        raise ValueError(answer["invalid"])
    return answer


def _worker_environment() -> dict[str, str]:
    """The operator's environment; when this kubeherd comes from a source tree rather than the
    installed packages, that tree goes first on the path, so that the worker runs the same
    kubeherd. (The installed packages are not put there: they would come before the standard
    library.)"""
    source = Path(kubeherd.__file__).resolve().parent.parent
    installed = {Path(sysconfig.get_path(name)).resolve() for name in ("purelib", "platlib")}
    if source in installed:
        return dict(os.environ)
    path = os.environ.get("PYTHONPATH")
    folders = [str(source), path] if path else [str(source)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(folders)}
