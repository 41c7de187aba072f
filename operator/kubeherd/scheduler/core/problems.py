"""A refusal or a warning about one field of a SchedulerProfile, and the range check every
args check makes. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def out_of_range(
    problems: list[Problem], where: str, value: int, low: int, high: int | None, what: str
) -> None:
    if value < low or (high is not None and value > high):
        upper = f"to {high}" if high is not None else "or more"
        problems.append(Problem(where, f"{value}: {what} must be from {low} {upper}"))


@dataclass
class Verdict:
    errors: list[Problem] = field(default_factory=list)
    # Accepted, but worth a Warning event (out-of-tree plugins in a custom image).
    warnings: list[Problem] = field(default_factory=list)
    # No catalog applied (a custom image, a minor newer than every catalog): only the checks
    # that need none were made, and the image itself must judge the configuration. `by_image`
    # says why.
    judge_by_image: bool = False
    by_image: str = ""

    @property
    def valid(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        return "; ".join(str(problem) for problem in self.errors)
