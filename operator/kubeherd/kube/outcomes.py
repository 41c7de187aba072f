"""What the API server answered a request: an outcome, a dry run's answer, a refusal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Outcome:
    """What the API server answered: its status code and, on failure, its own message."""

    status: int
    message: str = ""
    # The written object's resourceVersion, when the caller asked for it.
    resource_version: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def already_exists(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def namespace_terminating(self) -> bool:
        return self.status == 403 and "because it is being terminated" in self.message


@dataclass(frozen=True)
class DryRun:
    """The API server's answer to a dry-run create: the status code and the body (the object
    on success, a Status on refusal)."""

    status: int
    body: Mapping[str, Any]


class KubeError(Exception):
    """A request the API server refused; the message is its own."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome
