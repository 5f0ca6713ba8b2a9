"""Diagram problems in the format of the hiyouga/geometry3k dataset, drawn locally.

Columns: `images` (a list with one PNG), `problem` (text with the "<image>" mark) and
`answer` (a string). Each diagram is a figure (segment, triangle, rectangle, angle,
square, equilateral triangle) plus one number label, so the answer can only be read
from the image: a read-off problem asks for the labelled value, a perimeter problem
for 3 or 4 times it.

The images suit the trained zoo model tiny-llama-geo: IMAGE_SIZE x IMAGE_SIZE RGB seen
as PATCH x PATCH patches. The label's digits are seven-segment strokes drawn pixel by
pixel (no fonts, so no dependence on Pillow's text rendering), each digit alone in one
patch of a row the figure leaves free; the figure is drawn with ImageDraw.line at
integer coordinates (1 px). PNGs are written by harness.inputs.images.encode_png, so the
bytes are the same on every machine.

The answer text the trained model gives (also what it is trained on):
  read-off:   "#### 7"
  perimeter:  "4 * 7 = 28\n#### 28"
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

IMAGE_SIZE = 32
PATCH = 8
TEST_SEED = 2001
TRAINING_SEED = 2003

#            a  b  c  d  e  f  g   (top, top-right, bottom-right, bottom, bottom-left, top-left, middle)
SEGMENTS = {
    0: "1111110",
    1: "0110000",
    2: "1101101",
    3: "1111001",
    4: "0110011",
    5: "1011011",
    6: "1011111",
    7: "1110000",
    8: "1111111",
    9: "1111011",
}
COLORS = [(0, 0, 200), (0, 130, 0), (170, 0, 0), (120, 0, 150), (0, 110, 140)]

# kind -> (problems, multiplier): multiplier 1 is a read-off, 3/4 a perimeter
KINDS = {
    "segment": (["<image>Find the length of the segment.", "<image>Find x."], 1),
    "triangle": (["<image>Find x.", "<image>Find the length of the marked side."], 1),
    "rectangle": (["<image>Find x.", "<image>Find the length of the marked side."], 1),
    "angle": (["<image>Find the measure of the angle.", "<image>Find x."], 1),
    "square": (["<image>Find the perimeter of the square."], 4),
    "equilateral": (["<image>The triangle is equilateral. Find its perimeter."], 3),
}
KIND_NAMES = list(KINDS)


def draw_digit(rgb: np.ndarray, digit: int, x: int, y: int) -> None:
    """Seven-segment `digit` in black in the 8x8 cell at (x, y): strokes 1 px, 4 wide, 7 tall."""
    x0, x1, y0, ym, y1 = x + 2, x + 5, y + 1, y + 4, y + 7
    strokes = [
        (x0, x1, y0, y0),
        (x1, x1, y0, ym),
        (x1, x1, ym, y1),
        (x0, x1, y1, y1),
        (x0, x0, ym, y1),
        (x0, x0, y0, ym),
        (x0, x1, ym, ym),
    ]
    for on, (xa, xb, ya, yb) in zip(SEGMENTS[digit], strokes):
        if on == "1":
            rgb[ya : yb + 1, xa : xb + 1] = 0


def draw_label(rgb: np.ndarray, value: int, row: int, col: int) -> None:
    """`value` (0..99) in the cells (row, col) and (row, col + 1); one digit: left cell only."""
    digits = [int(d) for d in str(value)]
    for k, d in enumerate(digits):
        draw_digit(rgb, d, (col + k) * PATCH, row * PATCH)


def draw_figure(kind: str, rng: np.random.Generator, top: int, height: int) -> np.ndarray:
    """The figure on white, within rows top..top+height-1 (a 1 px margin kept)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    color = COLORS[int(rng.integers(len(COLORS)))]
    lo_y, hi_y = top + 1, top + height - 2
    lo_x, hi_x = 1, IMAGE_SIZE - 2

    def ri(a, b):  # integer in [a, b]
        return int(rng.integers(a, b + 1))

    if kind == "segment":
        y = ri(lo_y + 2, hi_y - 2)
        xa, xb = ri(lo_x, lo_x + 8), ri(hi_x - 8, hi_x)
        draw.line([(xa, y), (xb, y)], fill=color)
        draw.line([(xa, y - 2), (xa, y + 2)], fill=color)
        draw.line([(xb, y - 2), (xb, y + 2)], fill=color)
    elif kind in ("triangle", "equilateral"):
        if kind == "equilateral":
            w = ri(14, 26)
            xa = ri(lo_x, hi_x - w)
            base, apex = hi_y - ri(0, 2), (xa + w // 2, lo_y + ri(0, 2))
            pts = [(xa, base), (xa + w, base), apex]
        else:
            pts = [
                (ri(lo_x, lo_x + 8), ri(hi_y - 6, hi_y)),
                (ri(hi_x - 8, hi_x), ri(hi_y - 6, hi_y)),
                (ri(lo_x + 4, hi_x - 4), ri(lo_y, lo_y + 6)),
            ]
        draw.line(pts + [pts[0]], fill=color)
    elif kind in ("rectangle", "square"):
        if kind == "square":
            s = ri(10, height - 4)
            w = h = s
        else:
            w, h = ri(14, 28), ri(8, height - 4)
        xa, ya = ri(lo_x, hi_x - w), ri(lo_y, hi_y - h)
        draw.rectangle([xa, ya, xa + w, ya + h], outline=color)
        if kind == "square":  # tick marks: all sides equal
            draw.line([(xa + w // 2, ya - 1), (xa + w // 2, ya + 1)], fill=color)
            draw.line([(xa - 1, ya + h // 2), (xa + 1, ya + h // 2)], fill=color)
    elif kind == "angle":
        vx, vy = ri(lo_x, lo_x + 6), ri(hi_y - 4, hi_y)
        draw.line([(vx, vy), (ri(hi_x - 6, hi_x), vy)], fill=color)
        draw.line([(vx, vy), (ri(vx + 4, hi_x - 4), ri(lo_y, lo_y + 6))], fill=color)
        draw.arc([vx - 5, vy - 5, vx + 5, vy + 5], start=300, end=360, fill=color)
    else:
        raise ValueError(kind)
    return np.asarray(img, dtype=np.uint8).copy()


def make_item(rng: np.random.Generator, png: bool = True) -> dict:
    """{"png": bytes, "pixels": [S, S, 3] uint8, "problem", "answer", "target", "kind", "label"}.
    `target` is the answer text the model is trained to produce."""
    kind = KIND_NAMES[int(rng.integers(len(KIND_NAMES)))]
    problems, mult = KINDS[kind]
    problem = problems[int(rng.integers(len(problems)))]
    if mult == 1:
        label = int(rng.integers(10, 91)) if kind == "angle" else int(rng.integers(1, 100))
    else:
        label = int(rng.integers(1, 10))
    label_row = int(rng.choice([0, IMAGE_SIZE // PATCH - 1]))
    label_col = int(rng.integers(0, IMAGE_SIZE // PATCH - 1))
    top = PATCH if label_row == 0 else 0
    rgb = draw_figure(kind, rng, top, IMAGE_SIZE - PATCH)
    draw_label(rgb, label, label_row, label_col)
    from harness.inputs.images import encode_png

    value = label * mult
    target = f"#### {value}" if mult == 1 else f"{mult} * {label} = {value}\n#### {value}"
    return {
        "png": encode_png(rgb) if png else None,
        "pixels": rgb,
        "problem": problem,
        "answer": str(value),
        "target": target,
        "kind": kind,
        "label": label,
    }


def item_key(item: dict) -> str:
    """Identity of an item: its problem text and image pixels."""
    return hashlib.sha256(item["problem"].encode() + item["pixels"].tobytes()).hexdigest()


def stream(seed: int, exclude: set[str] | frozenset = frozenset(), png: bool = True) -> Iterator[dict]:
    """An endless stream of items, those whose item_key is in `exclude` skipped."""
    rng = np.random.default_rng(seed)
    while True:
        item = make_item(rng, png)
        if item_key(item) not in exclude:
            yield item


def unique_set(seed: int, n: int) -> list[dict]:
    seen, items = set(), []
    for item in stream(seed):
        key = item_key(item)
        if key not in seen:
            seen.add(key)
            items.append(item)
            if len(items) == n:
                return items
    raise AssertionError("unreachable")


def heldout_set(n: int = 300, seed: int = TEST_SEED) -> list[dict]:
    return unique_set(seed, n)


def write_parquet(items: list[dict], path: Path) -> None:
    """The geometry3k layout: images as Sequence(Image()), problem and answer strings."""
    from datasets import Dataset, Features, Image, Sequence, Value

    features = Features({"images": Sequence(Image()), "problem": Value("string"), "answer": Value("string")})
    data = {
        "images": [[{"bytes": it["png"], "path": None}] for it in items],
        "problem": [it["problem"] for it in items],
        "answer": [it["answer"] for it in items],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_dict(data, features=features).to_parquet(str(path))


def write_sets(out: Path, n_test: int = 300, seed: int = TEST_SEED) -> None:
    write_parquet(heldout_set(n_test, seed), Path(out) / "test.parquet")
