"""The default kube-scheduler image's tag: the release of the cluster, whatever its vendor adds."""

from __future__ import annotations

import pytest

from kubeherd.scheduler.core.images import scheduler_image
from kubeherd.scheduler.core.versions import release_version


@pytest.mark.parametrize(
    ("git_version", "release"),
    [
        ("v1.37.2", "v1.37.2"),  # upstream, kubeadm, kind, AKS
        ("v1.30.6", "v1.30.6"),  # AKS reports the plain release
        ("v1.31.4-eks-a737599", "v1.31.4"),  # EKS
        ("v1.31.5-gke.1233000", "v1.31.5"),  # GKE
        ("v1.31.4+k3s1", "v1.31.4"),  # k3s
        ("v1.31.4+rke2r1", "v1.31.4"),  # RKE2
        ("v1.32.0-rc.1", "v1.32.0"),  # a release candidate: its release's image
        ("1.33.1", "v1.33.1"),
    ],
)
def test_the_image_tag_is_the_release_of_the_servers_version(
    git_version: str, release: str
) -> None:
    assert release_version(git_version) == release
    assert scheduler_image({}, release) == f"registry.k8s.io/kube-scheduler:{release}"


@pytest.mark.parametrize(
    "git_version",
    ["", "v0.0.0-master+$Format:%H$", "v1.31", "latest", "v1.31.4 extra", "vX.Y.Z"],
)
def test_a_version_that_names_no_release_gives_no_tag(git_version: str) -> None:
    assert release_version(git_version) is None
