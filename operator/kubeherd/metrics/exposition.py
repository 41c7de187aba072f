"""The per-object gauges written straight as exposition text, a slice of the loop's time at once.

With thousands of CustomDaemonSets a page holds about a hundred thousand samples. prometheus_client
builds a named tuple and a label dict for each one before it writes a line, which made a page
cost more than a second of pure Python; and any collection of that size, on the event loop or
in a thread that shares the interpreter with it, delayed the controllers. Here each object's
label set is escaped once, each sample is one formatted line, lines are joined (and compressed)
in pieces as they come, and the writer hands the loop back whenever its slice of time is used
up: the loop waits at most one slice for a scrape, whatever the number of objects.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import utils

Body = Mapping[str, Any]
# One sample of an object: the values of the family's own labels (after the object's), its value.
Sample = tuple[tuple[str, ...], float]

# A value as prometheus_client writes it (Go's notation), so the page reads as it always did.
value_text: Callable[[float], str] = utils.floatToGoString
# How long the writer may keep the loop before it lets other callbacks run.
DEFAULT_SLICE_SECONDS = 0.001
# Lines joined into one piece of the page; the slice's clock is read once per piece.
LINES_PER_PIECE = 256
# The gzip container (not a bare zlib stream), as `Content-Encoding: gzip` means.
GZIP_WINDOW_BITS = 16 + zlib.MAX_WBITS
GZIP_LEVEL = 6


def escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def escape_help(text: str, *, openmetrics: bool) -> str:
    escaped = text.replace("\\", r"\\").replace("\n", r"\n")
    return escaped.replace('"', r"\"") if openmetrics else escaped


def label_text(names: Sequence[str], values: Sequence[str]) -> str:
    """`name="value",…` for these labels, in the order given, without the braces."""
    return ",".join(
        f'{name}="{escape_label_value(value)}"' for name, value in zip(names, values, strict=True)
    )


@dataclass(frozen=True)
class ObjectGauge:
    """One gauge family of per-object samples: its own labels follow the object's, and
    `samples` says which series one object has and their values."""

    name: str
    help: str
    samples: Callable[[Body], Iterable[Sample]]
    own_labels: tuple[str, ...] = ()

    def header(self, *, openmetrics: bool) -> str:
        return (
            f"# HELP {self.name} {escape_help(self.help, openmetrics=openmetrics)}\n"
            f"# TYPE {self.name} gauge\n"
        )


class Pacer:
    """Hands the loop back once `slice_seconds` have gone since the last time it did."""

    def __init__(self, slice_seconds: float = DEFAULT_SLICE_SECONDS) -> None:
        self._slice = slice_seconds
        self._since = time.perf_counter()
        self.pauses = 0

    async def pause_if_due(self) -> None:
        if time.perf_counter() - self._since >= self._slice:
            await asyncio.sleep(0)
            self.pauses += 1
            self._since = time.perf_counter()


class PageWriter:
    """The page's bytes as they are written, gzip-compressed piece by piece if asked."""

    def __init__(self, *, gzipped: bool) -> None:
        self._pieces: list[bytes] = []
        self._compressor = (
            zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WINDOW_BITS) if gzipped else None
        )

    def write(self, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        if self._compressor is not None:
            data = self._compressor.compress(data)
        if data:
            self._pieces.append(data)

    def body(self) -> bytes:
        if self._compressor is not None:
            self._pieces.append(self._compressor.flush())
            self._compressor = None
        return b"".join(self._pieces)


async def write_object_gauges(
    writer: PageWriter,
    gauges: Iterable[ObjectGauge],
    identities: Sequence[str],
    bodies: Sequence[Body],
    pacer: Pacer,
    *,
    openmetrics: bool,
) -> None:
    """Each gauge's header and its lines for every object, `identities[i]` being the rendered
    label set of `bodies[i]`; a family's lines stay together, as the formats require."""
    for gauge in gauges:
        writer.write(gauge.header(openmetrics=openmetrics))
        # The rendered `,name="value"` of each set of own label values: few (reasons, phases).
        own_texts: dict[tuple[str, ...], str] = {}
        piece: list[str] = []
        for identity, body in zip(identities, bodies, strict=True):
            for own, value in gauge.samples(body):
                own_text = own_texts.get(own)
                if own_text is None:
                    own_text = "," + label_text(gauge.own_labels, own) if own else ""
                    own_texts[own] = own_text
                piece.append(f"{gauge.name}{{{identity}{own_text}}} {value_text(value)}\n")
            if len(piece) >= LINES_PER_PIECE:
                writer.write("".join(piece))
                piece.clear()
                await pacer.pause_if_due()
        writer.write("".join(piece))
        await pacer.pause_if_due()
