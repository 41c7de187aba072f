"""Derive the scheduler catalogs, operator/kubeherd/scheduler/catalogs/<minor>.json, from the source
of each Kubernetes minor pinned under hack/k8s, with the Go program in hack/schedcatalog.

The program is built against each minor's wrapper module in turn (`go run -modfile=...`), so a
catalog always comes from that minor's own k8s.io/kubernetes. Its packages are kube-scheduler's:
with that minor's kube-scheduler already built, a run only links; otherwise it compiles them all.

`python -m localcluster.catalogs [MINOR...]` (`make catalogs`) writes the catalogs;
tests/integration/test_catalogs.py derives them again and fails on any difference.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from localcluster.binaries import (
    HACK_DIR,
    KUBERNETES_TAGS,
    Report,
    kubernetes_minors,
    kubernetes_module_dir,
    required_version,
    run_go_verbose,
)

CATALOG_PROGRAM = HACK_DIR / "schedcatalog"
CATALOGS_DIR = HACK_DIR.parent / "operator" / "kubeherd" / "scheduler" / "catalogs"


def catalog_path(minor: str) -> Path:
    return CATALOGS_DIR / f"{minor}.json"


def kubernetes_version(minor: str) -> str:
    return required_version(kubernetes_module_dir(minor), "k8s.io/kubernetes")


def _report_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def derive_catalog(minor: str, report: Report = _report_to_stderr) -> str:
    """The catalog of `minor` as the program derives it now: JSON text, as committed."""
    go_mod = (kubernetes_module_dir(minor) / "go.mod").resolve()
    # kube-scheduler's own flags: the catalog describes the binary as built, and its packages are
    # then already in the Go build cache.
    tags = ",".join(KUBERNETES_TAGS)
    command = ["go", "run", "-v", "-trimpath", f"-tags={tags}", f"-modfile={go_mod}", "."]
    # The catalog comes on stdout (into a file, so that it never blocks the program).
    with tempfile.TemporaryFile("w+") as catalog:
        run_go_verbose(command, CATALOG_PROGRAM, f"catalog {minor}", report, stdout=catalog)
        catalog.seek(0)
        return catalog.read()


def write_catalogs(minors: tuple[str, ...], report: Report = _report_to_stderr) -> None:
    CATALOGS_DIR.mkdir(parents=True, exist_ok=True)
    for minor in minors:
        report(
            f"catalog {minor}: deriving from k8s.io/kubernetes {kubernetes_version(minor)} "
            "(a cold run compiles kube-scheduler's packages: minutes)"
        )
        started = time.monotonic()
        derived = derive_catalog(minor, report)
        path = catalog_path(minor)
        before = path.read_text() if path.exists() else None
        path.write_text(derived)
        outcome = "unchanged" if derived == before else "written"
        report(f"catalog {minor}: {outcome} {path} in {time.monotonic() - started:.0f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.catalogs", description=__doc__)
    parser.add_argument(
        "minors", nargs="*", help="the minors to derive (default: every one under hack/k8s)"
    )
    options = parser.parse_args(argv)
    pinned = kubernetes_minors()
    unknown = [minor for minor in options.minors if minor not in pinned]
    if unknown:
        parser.error(
            f"not pinned under hack/k8s: {', '.join(unknown)}; pinned: {', '.join(pinned)}"
        )
    try:
        write_catalogs(tuple(options.minors) or pinned)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
