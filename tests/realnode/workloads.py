"""What the real-node tests run: CustomDaemonSets of the test image on the real node, in
namespaces of their own."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from localcluster.images import TESTBOX_IMAGE
from localcluster.realnode import REAL_NODE_LABEL
from tests.conftest import temporary_namespace
from tests.integration.daemonsets import agent

if TYPE_CHECKING:
    from tests.realnode.conftest import RealCluster

ON_REAL_NODE = {REAL_NODE_LABEL: "true"}


@contextlib.contextmanager
def real_namespace(real: RealCluster, purpose: str) -> Iterator[str]:
    with temporary_namespace(real.core, f"real-{purpose}-{secrets.token_hex(3)}") as name:
        yield name


def box_container(command: str, **container: Any) -> dict[str, Any]:
    return {
        "name": "box",
        "image": TESTBOX_IMAGE,
        # Built here and loaded into the node: there is no registry to pull from.
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
        **container,
    }


def box_daemonset(
    name: str, command: str, *, container: dict[str, Any] | None = None, **pod_spec: Any
) -> dict[str, Any]:
    """A CustomDaemonSet of the test image on the real node only, running `command` in sh."""
    settings: dict[str, Any] = {
        "nodeSelector": ON_REAL_NODE,
        "terminationGracePeriodSeconds": 5,
        "containers": [box_container(command, **(container or {}))],
        **pod_spec,
    }
    return agent(name, **settings)
