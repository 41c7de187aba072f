"""Each committed scheduler catalog is exactly what hack/schedcatalog derives from its source.

The catalogs are generated, never edited by hand: a catalog that drifted from its Kubernetes
release (an edit, a re-pin without `make catalogs`, a change to the program) fails here. No
cluster is needed; each minor's derivation builds the program against that minor's module.
"""

from __future__ import annotations

import difflib

import pytest

from localcluster.binaries import kubernetes_minors
from localcluster.catalogs import catalog_path, derive_catalog

# Enough lines of a diff to see what drifted without flooding the report.
DIFF_LINES_SHOWN = 60


@pytest.mark.parametrize("minor", kubernetes_minors())
def test_committed_catalog_is_what_the_source_derives(minor: str) -> None:
    path = catalog_path(minor)
    assert path.exists(), f"{path} is missing: run `make catalogs`"
    committed = path.read_text()

    derived = derive_catalog(minor)

    if committed != derived:
        diff = list(
            difflib.unified_diff(
                committed.splitlines(),
                derived.splitlines(),
                fromfile=f"{path.name} (committed)",
                tofile=f"{path.name} (derived from the {minor} source)",
                lineterm="",
            )
        )
        shown = "\n".join(diff[:DIFF_LINES_SHOWN])
        hidden = len(diff) - DIFF_LINES_SHOWN
        more = f"\n... {hidden} more lines" if hidden > 0 else ""
        pytest.fail(
            f"{path} differs from what hack/schedcatalog derives; catalogs are generated, not "
            f"edited: run `make catalogs` and commit the result.\n{shown}{more}",
            pytrace=False,
        )
