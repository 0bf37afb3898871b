"""The packing grid's plot, drawn without a plotting library: a PNG of one bar per cell.

Each bar is dynmig's refused GPU-work over the best baseline's in that cell (held-out seeds), on a
scale from 0 to 1.5×, with a whisker across its end for the ratio's bootstrap interval over the
seeds; marks at 0.7× (the median target), 0.8× (the target for uniform pools with ≥ 10 % whole-GPU
demand) and 1.0× (no worse than the best baseline). Green bars meet their cell's
target, red ones do not. Labels are in a 5×7 pixel font, upper case.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

# 5×7 glyphs, one row per 5-bit number (most significant bit on the left)
_FONT = {
    "A": (14, 17, 17, 31, 17, 17, 17),
    "B": (30, 17, 17, 30, 17, 17, 30),
    "C": (14, 17, 16, 16, 16, 17, 14),
    "D": (30, 17, 17, 17, 17, 17, 30),
    "E": (31, 16, 16, 30, 16, 16, 31),
    "F": (31, 16, 16, 30, 16, 16, 16),
    "G": (14, 17, 16, 23, 17, 17, 15),
    "H": (17, 17, 17, 31, 17, 17, 17),
    "I": (14, 4, 4, 4, 4, 4, 14),
    "J": (7, 2, 2, 2, 2, 18, 12),
    "K": (17, 18, 20, 24, 20, 18, 17),
    "L": (16, 16, 16, 16, 16, 16, 31),
    "M": (17, 27, 21, 21, 17, 17, 17),
    "N": (17, 17, 25, 21, 19, 17, 17),
    "O": (14, 17, 17, 17, 17, 17, 14),
    "P": (30, 17, 17, 30, 16, 16, 16),
    "Q": (14, 17, 17, 17, 21, 18, 13),
    "R": (30, 17, 17, 30, 20, 18, 17),
    "S": (15, 16, 16, 14, 1, 1, 30),
    "T": (31, 4, 4, 4, 4, 4, 4),
    "U": (17, 17, 17, 17, 17, 17, 14),
    "V": (17, 17, 17, 17, 17, 10, 4),
    "W": (17, 17, 17, 21, 21, 21, 10),
    "X": (17, 17, 10, 4, 10, 17, 17),
    "Y": (17, 17, 10, 4, 4, 4, 4),
    "Z": (31, 1, 2, 4, 8, 16, 31),
    "0": (14, 17, 19, 21, 25, 17, 14),
    "1": (4, 12, 4, 4, 4, 4, 14),
    "2": (14, 17, 1, 2, 4, 8, 31),
    "3": (31, 2, 4, 2, 1, 17, 14),
    "4": (2, 6, 10, 18, 31, 2, 2),
    "5": (31, 16, 30, 1, 1, 17, 14),
    "6": (6, 8, 16, 30, 17, 17, 14),
    "7": (31, 1, 2, 4, 8, 8, 8),
    "8": (14, 17, 17, 14, 17, 17, 14),
    "9": (14, 17, 17, 15, 1, 2, 12),
    " ": (0,) * 7,
    ".": (0, 0, 0, 0, 0, 12, 12),
    "/": (1, 1, 2, 4, 8, 16, 16),
    "%": (24, 25, 2, 4, 8, 19, 3),
    "-": (0, 0, 0, 31, 0, 0, 0),
    "+": (0, 4, 4, 31, 4, 4, 0),
    "(": (2, 4, 8, 8, 8, 4, 2),
    ")": (8, 4, 2, 2, 2, 4, 8),
    ":": (0, 12, 12, 0, 12, 12, 0),
    ",": (0, 0, 0, 0, 12, 4, 8),
    "=": (0, 0, 31, 0, 31, 0, 0),
    "<": (2, 4, 8, 16, 8, 4, 2),
    ">": (8, 4, 2, 1, 2, 4, 8),
}
WHITE, BLACK, GREY = (255, 255, 255), (30, 30, 30), (170, 170, 170)
GREEN, RED, BLUE = (60, 160, 80), (210, 60, 50), (70, 110, 200)
SCALE_MAX = 1.5


class Canvas:
    def __init__(self, width: int, height: int):
        self.w, self.h = width, height
        self.px = [bytearray(WHITE * width) for _ in range(height)]

    def rect(self, x0: int, y0: int, x1: int, y1: int, colour: tuple[int, int, int]) -> None:
        for y in range(max(0, y0), min(self.h, y1)):
            row = self.px[y]
            for x in range(max(0, x0), min(self.w, x1)):
                row[3 * x : 3 * x + 3] = bytes(colour)

    def text(self, x: int, y: int, text: str, colour: tuple[int, int, int] = BLACK) -> None:
        for ch in text.upper():
            glyph = _FONT.get(ch, _FONT[" "])
            for dy, bits in enumerate(glyph):
                for dx in range(5):
                    if bits >> (4 - dx) & 1:
                        self.rect(x + dx, y + dy, x + dx + 1, y + dy + 1, colour)
            x += 6

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(row) for row in self.px)

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        head = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", head)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def target(summary: dict) -> float:
    """The cell's own target: 0.8× for a uniform pool with ≥ 10 % whole-GPU arrivals, else 1.0×."""
    return 0.8 if summary["uniform"] and summary["whole_share"] >= 0.10 else 1.0


def grid_plot(summaries: list[dict], path: Path, title: str) -> None:
    label_w, bar_w, row_h, top = 290, 420, 11, 34
    width, height = label_w + bar_w + 110, top + row_h * len(summaries) + 30
    c = Canvas(width, height)
    c.text(6, 6, title.replace("×", "X").replace("'", ""))
    keys = ["BAR: DYNMIG / BEST BASELINE (REFUSED GPU-WORK)"]
    if any("ratio_interval" in s for s in summaries):
        keys.append("WHISKER: 90% INTERVAL OVER THE SEEDS")
    if any("ratio_nodes" in s for s in summaries):  # the arm with node slots priced, beside dynmig
        keys.append("BLUE TICK: DYNMIG+NODES")
    c.text(6, 18, ", ".join(keys) + ". MARKS AT 0.7, 0.8, 1.0", GREY)

    def x_of(r: float) -> int:
        return label_w + round(min(r, SCALE_MAX) / SCALE_MAX * bar_w)

    for n, s in enumerate(summaries):
        y = top + n * row_h
        c.text(6, y + 2, s["cell"].replace("×", "x"))
        r = s["ratio"]
        c.rect(label_w, y + 2, x_of(r), y + row_h - 1, GREEN if r <= target(s) else RED)
        right = x_of(r)
        if "ratio_interval" in s:  # the 90 % interval over the seeds, as a whisker across the bar's end
            lo, hi = x_of(s["ratio_interval"][0]), x_of(s["ratio_interval"][1])
            mid = y + row_h // 2
            c.rect(lo, mid, hi + 1, mid + 1, BLACK)
            c.rect(lo, mid - 2, lo + 1, mid + 3, BLACK)
            c.rect(hi, mid - 2, hi + 1, mid + 3, BLACK)
            right = max(right, hi)
        label = "INF" if r == float("inf") else f"{r:.2f}"
        if "ratio_nodes" in s:  # dynmig+nodes on the same best baseline, a tick across the row
            x = x_of(s["ratio_nodes"])
            c.rect(x, y + 1, x + 2, y + row_h, BLUE)
            right = max(right, x + 2)
            label += f" / {s['ratio_nodes']:.2f}"
        c.text(right + 4, y + 2, label)
    for mark, colour in ((0.7, BLUE), (0.8, BLUE), (1.0, BLACK)):
        x = x_of(mark)
        c.rect(x, top - 2, x + 1, top + row_h * len(summaries), colour)
        c.text(x - 8, top + row_h * len(summaries) + 4, f"{mark:.1f}", colour)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(c.png())
