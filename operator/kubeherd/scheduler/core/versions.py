"""Which kube-scheduler release matches the cluster. Pure.

The API server's gitVersion is the release plus whatever the distribution appends:
`v1.31.4-eks-a737599` (EKS), `v1.31.5-gke.1233000` (GKE), `v1.31.4+k3s1` (k3s),
`v1.31.4+rke2r1` (RKE2). registry.k8s.io tags only the release (`v1.31.4`), and `+` is not
even allowed in an image tag, so the default image is tagged with the release alone.
"""

from __future__ import annotations

import re

# vMAJOR.MINOR.PATCH, then optionally a pre-release (-...) or build (+...) suffix.
_GIT_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+][0-9A-Za-z.+-]*)?")


def release_version(git_version: str) -> str | None:
    """`vMAJOR.MINOR.PATCH` of a server's gitVersion, or None when it names no release."""
    match = _GIT_VERSION.fullmatch(git_version.strip())
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return f"v{major}.{minor}.{patch}"
