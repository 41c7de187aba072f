"""Which code a benchmark ran: read when the run starts, as a branch may move while a long run
goes on, and recorded in its results."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def commit() -> str:
    """The checkout's commit as `git describe` names it ("-dirty": with uncommitted changes)."""
    described = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=REPO
    )
    return described.stdout.strip() or "unknown"
