"""The command lines as a user runs them: the installed console scripts, as processes."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import kubeherd

# The console scripts that installing the package puts next to the interpreter.
SCRIPTS = Path(sys.executable).parent


def run_script(name: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / name), *arguments], capture_output=True, text=True, timeout=60, check=False
    )


def test_version_prints_the_installed_packages_version() -> None:
    printed = run_script("kubeherd", "--version")

    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == f"kubeherd {version('kubeherd')}\n"
    assert kubeherd.__version__ == version("kubeherd")
