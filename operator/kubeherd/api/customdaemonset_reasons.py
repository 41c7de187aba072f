"""Reasons the CustomDaemonSet API names, kept free of pydantic: the operator reads them at run
time, and the models in customdaemonset.py (which only the CRD generator and the CLI load)
describe them from here, so the schema and the code share one list.
"""

from __future__ import annotations

from enum import StrEnum

# The waiting reasons of a container that pause a canary at once (`Canary.autoPause`).
CANARY_PAUSE_REASONS = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)


class IneligibleReason(StrEnum):
    """Why a node has no daemon pod: the status groups nodes by it, and the metrics label by it."""

    NODE_NAME = "NodeNameMismatch"
    NODE_SELECTOR = "NodeSelectorMismatch"
    NODE_AFFINITY = "NodeAffinityMismatch"
    UNTOLERATED_TAINT = "UntoleratedTaint"
