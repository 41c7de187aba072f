"""What the Dockerfile installs into the image: the runtime dependencies of uv.lock only."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO

DOCKERFILE = REPO / "Dockerfile"


def normalized(name: str) -> str:
    """A package name as uv.lock and uv export spell it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def instructions(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, each on one line (continuations joined, comments out)."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    return [
        line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")
    ]


def export_command(dockerfile: str) -> tuple[list[str], list[str]]:
    """The `uv export` command of the Dockerfile's build stage, and the files copied into its
    working directory before it runs."""
    copied: list[str] = []
    for instruction in instructions(dockerfile):
        keyword, _, rest = instruction.partition(" ")
        if keyword == "COPY" and "--from" not in rest:
            copied += shlex.split(rest)[:-1]
        if keyword == "RUN":
            for command in rest.split("&&"):
                words = shlex.split(command)
                if words[:2] == ["uv", "export"]:
                    return words, copied
    raise AssertionError("the Dockerfile runs no `uv export`")


def find_uv() -> str:
    """uv as `make` finds it: `uv run` names itself in UV; else PATH; else the private copy of
    `make tools`, of the version the Dockerfile pins too."""
    version = re.search(r"pip install uv==(\S+)", DOCKERFILE.read_text())
    assert version, "the Dockerfile pins no uv version"
    cache = Path(os.environ.get("KUBEHERD_CACHE", Path.home() / ".cache" / "kubeherd"))
    pinned = cache / f"uv-{version[1]}" / "bin" / "uv"
    for candidate in (os.environ.get("UV"), shutil.which("uv"), str(pinned)):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("no uv: run `make tools` (or `make deps`)")


def run_export(command: list[str], folder: Path) -> str:
    """Run the Dockerfile's `uv export` in `folder`; its requirements, from the file it names."""
    completed = subprocess.run(
        [find_uv(), *command[1:]], cwd=folder, check=True, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    for option in ("-o", "--output-file"):
        if option in command:
            return (folder / command[command.index(option) + 1]).read_text()
    return completed.stdout


def closure(lock: dict[str, Any], roots: Iterable[dict[str, Any]]) -> set[str]:
    """Every package of uv.lock that the dependency entries `roots` bring, themselves included
    (all versions and environment markers: a superset of what one platform installs)."""
    entries: dict[str, list[dict[str, Any]]] = {}
    for package in lock["package"]:
        entries.setdefault(normalized(package["name"]), []).append(package)
    found: set[str] = set()
    pending = list(roots)
    while pending:
        dependency = pending.pop()
        name = normalized(dependency["name"])
        extras = dependency.get("extra", [])
        if name in found and not extras:
            continue
        found.add(name)
        for package in entries.get(name, []):
            pending += package.get("dependencies", [])
            for extra in extras:
                pending += package.get("optional-dependencies", {}).get(extra, [])
    return found


def test_the_image_gets_no_package_of_the_dev_or_bench_groups(tmp_path: Path) -> None:
    """pyproject.toml's `default-groups` makes uv export the bench group unless told not to;
    it once put matplotlib, numpy, pillow and py-spy into the image."""
    command, copied = export_command(DOCKERFILE.read_text())
    for name in copied:
        shutil.copy(REPO / name, tmp_path / name)
    exported = {
        normalized(line.split("==")[0])
        for line in run_export(command, tmp_path).splitlines()
        if re.match(r"[A-Za-z0-9]", line)
    }

    lock = tomllib.loads((REPO / "uv.lock").read_text())
    (project,) = (p for p in lock["package"] if p["name"] == "kubeherd")
    runtime = closure(lock, project["dependencies"])
    groups = project["dev-dependencies"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert set(groups) == set(pyproject["dependency-groups"]) >= {"dev", "bench"}
    development_only = closure(lock, (d for group in groups.values() for d in group)) - runtime

    assert {"kopf", "aiohttp", "pydantic", "pyyaml"} <= exported
    # kubeherd talks to the API server itself: no generated client in the image.
    assert not exported & {"kubernetes", "kubernetes-asyncio"}
    assert {"matplotlib", "py-spy", "pytest", "mypy"} <= development_only
    leaked = sorted(exported & development_only)
    assert not leaked, f"the image would get packages only the dependency groups need: {leaked}"
    assert exported <= runtime
