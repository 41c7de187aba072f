"""What the long-running operator process loads: every module it imports stays in its memory for
as long as it runs, so the libraries only the command line or a short-lived helper needs must not
be among them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

# What `kubeherd run` imports before it starts Kopf.
OPERATOR_ENTRY_POINT = "kubeherd.main"


def modules_loaded_by(module: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after importing `module`."""
    listing = (
        f"import sys, {module}; "
        "print('\\n'.join(sorted({name.partition('.')[0] for name in sys.modules})))"
    )
    paths = [str(REPO / "operator"), os.environ.get("PYTHONPATH", "")]
    printed = subprocess.run(
        [sys.executable, "-c", listing],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr
    return set(printed.stdout.split())


@pytest.fixture(scope="module")
def operator_modules() -> set[str]:
    return modules_loaded_by(OPERATOR_ENTRY_POINT)


def test_the_listing_sees_what_the_operator_loads(operator_modules: set[str]) -> None:
    assert {"kopf", "aiohttp", "kubeherd"} <= operator_modules


@pytest.mark.parametrize(
    "library",
    [
        # The CRD models: only the CRD generator and `kubeherd scheduler render` need them.
        "pydantic",
        "pydantic_core",
        # X.509: certificates are made and read by a child process that exits once done.
        "cryptography",
    ],
)
def test_the_operator_process_does_not_load(library: str, operator_modules: set[str]) -> None:
    assert library not in operator_modules
