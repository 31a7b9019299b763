"""The night's lineages as a PNG: true val_bpb of the kept lineage over the night, both loops.

numpy only (no matplotlib in the project's environment): the chart is drawn into an RGB array
(lines, dashes, a 5x7 capital font scaled 2x) and written as a PNG with zlib.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

# A 5x7 font: each glyph is seven rows, the top first, bit 4 the leftmost pixel.
FONT: dict[str, tuple[int, ...]] = {
    "0": (0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110),
    "1": (0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110),
    "2": (0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111),
    "3": (0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110),
    "4": (0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010),
    "5": (0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110),
    "6": (0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110),
    "7": (0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000),
    "8": (0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110),
    "9": (0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100),
    "A": (0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001),
    "B": (0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110),
    "C": (0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110),
    "D": (0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100),
    "E": (0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111),
    "F": (0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000),
    "G": (0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111),
    "H": (0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001),
    "I": (0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110),
    "J": (0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100),
    "K": (0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001),
    "L": (0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111),
    "M": (0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001),
    "N": (0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001),
    "O": (0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110),
    "P": (0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000),
    "Q": (0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101),
    "R": (0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001),
    "S": (0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110),
    "T": (0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100),
    "U": (0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110),
    "V": (0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100),
    "W": (0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010),
    "X": (0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001),
    "Y": (0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100),
    "Z": (0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111),
    ".": (0, 0, 0, 0, 0, 0b01100, 0b01100),
    ",": (0, 0, 0, 0, 0b01100, 0b00100, 0b01000),
    "-": (0, 0, 0, 0b11111, 0, 0, 0),
    "+": (0, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0),
    "(": (0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010),
    ")": (0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000),
    "/": (0, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0),
    "_": (0, 0, 0, 0, 0, 0, 0b11111),
    ":": (0, 0b01100, 0b01100, 0, 0b01100, 0b01100, 0),
    "%": (0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011),
    " ": (0, 0, 0, 0, 0, 0, 0),
}
Color = tuple[int, int, int]
BLACK: Color = (0, 0, 0)
GREY: Color = (215, 215, 215)
ORANGE: Color = (225, 110, 20)
BLUE: Color = (30, 90, 200)


class Canvas:
    """An RGB image with the few primitives a line chart needs."""

    def __init__(self, width: int, height: int) -> None:
        self.pixels = np.full((height, width, 3), 255, dtype=np.uint8)

    def dot(self, x: int, y: int, color: Color, size: int = 1) -> None:
        h, w, _ = self.pixels.shape
        y0, x0 = max(0, y - size // 2), max(0, x - size // 2)
        self.pixels[y0 : min(h, y0 + size), x0 : min(w, x0 + size)] = color

    def line(
        self, a: tuple[float, float], b: tuple[float, float], color: Color, width: int = 1, dash: int = 0
    ) -> None:
        """A straight line from a to b, in steps of half a pixel; with `dash`, on and off every
        `dash` pixels."""
        length = max(abs(b[0] - a[0]), abs(b[1] - a[1]), 1.0)
        for i in range(int(2 * length) + 1):
            t = i / (2 * length)
            if dash and int(t * length / dash) % 2:
                continue
            self.dot(round(a[0] + t * (b[0] - a[0])), round(a[1] + t * (b[1] - a[1])), color, width)

    def text(self, x: int, y: int, words: str, color: Color = BLACK, scale: int = 2) -> None:
        """Capitals, digits and a few signs at (x, y), the top left corner."""
        for k, char in enumerate(words.upper()):
            for row, bits in enumerate(FONT.get(char, FONT[" "])):
                for col in range(5):
                    if bits >> (4 - col) & 1:
                        left, top = x + (6 * k + col) * scale, y + row * scale
                        self.pixels[top : top + scale, left : left + scale] = color

    def png(self) -> bytes:
        height, width, _ = self.pixels.shape
        raw = b"".join(b"\x00" + self.pixels[row].tobytes() for row in range(height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


class HasLineage(Protocol):
    @property
    def lineage(self) -> list[tuple[float, float]]: ...


def step_points(lineage: Sequence[tuple[float, float]], end: float) -> list[tuple[float, float]]:
    """A lineage's (hour, value) keeps as the corners of its step function up to `end`."""
    points: list[tuple[float, float]] = []
    for hour, value in lineage:
        if points:
            points.append((hour, points[-1][1]))
        points.append((hour, value))
    points.append((end, points[-1][1]))
    return points


def chart(
    series: Mapping[str, tuple[Sequence[tuple[float, float]], Color, int]],
    hours: float,
    title: str,
    width: int = 960,
    height: int = 600,
) -> Canvas:
    """Step lines of (hour, val_bpb) per label: its points, color and dash (0: solid)."""
    canvas = Canvas(width, height)
    left, right, top, bottom = 110, width - 20, 60, height - 70
    values = [v for points, _, _ in series.values() for _, v in points]
    low, high = min(values), max(values)
    pad = (high - low) * 0.05 or 0.001
    low, high = low - pad, high + pad

    def xy(hour: float, value: float) -> tuple[float, float]:
        return left + (right - left) * hour / hours, bottom - (bottom - top) * (value - low) / (high - low)

    for i in range(6):
        value = low + (high - low) * i / 5
        y = round(xy(0, value)[1])
        canvas.line((left, y), (right, y), GREY)
        canvas.text(8, y - 7, f"{value:.4f}")
    for hour in range(int(hours) + 1):
        x = round(xy(hour, low)[0])
        canvas.line((x, top), (x, bottom), GREY)
        canvas.text(x - 5, bottom + 10, str(hour))
    canvas.line((left, bottom), (right, bottom), BLACK, 2)
    canvas.line((left, top), (left, bottom), BLACK, 2)
    canvas.text(left + (right - left) // 2 - 30, height - 30, "HOURS")
    canvas.text(left, 16, title)
    for k, (label, (points, color, dash)) in enumerate(series.items()):
        steps = step_points(points, hours)
        for a, b in itertools.pairwise(steps):
            canvas.line(xy(*a), xy(*b), color, 3, dash)
        y = top + 12 + 26 * k
        canvas.line((right - 420, y + 6), (right - 370, y + 6), color, 3, dash)
        canvas.text(right - 360, y, label)
    return canvas


def plot_lineages(
    results: Mapping[tuple[int, str], Sequence[Mapping[str, HasLineage]]],
    seed_index: int,
    path: Path,
    hours: float,
    rule: str,
) -> None:
    """The lineages of one seed's nights under `rule`: (a) orange, (b) blue; the smallest GPU
    count solid, the next dashed (two counts at most, for legibility)."""
    counts = sorted({gpus for gpus, name in results if name == rule and gpus > 1})[-2:] or [1]
    series: dict[str, tuple[Sequence[tuple[float, float]], Color, int]] = {}
    for gpus, dash in zip(counts, (0, 10), strict=False):
        outcome = results[(gpus, rule)][seed_index]
        series[f"(A) AUTORESEARCH, {gpus} GPUS"] = (outcome["autoresearch"].lineage, ORANGE, dash)
        series[f"(B) SERVER, {gpus} GPUS"] = (outcome["server"].lineage, BLUE, dash)
    canvas = chart(series, hours, "TRUE VAL_BPB OF THE KEPT LINEAGE")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(canvas.png())
