"""Numpy drawing helpers for ``rgb_array`` pictures ((H, W, 3) uint8, (row, col) pixels,
row 0 at the top, clipped to the image) and `write_png` (matplotlib)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

Color = tuple[int, int, int]


def canvas(height: int, width: int, color: Color = (255, 255, 255)) -> np.ndarray:
    """A new (height, width, 3) uint8 image filled with `color`."""
    image = np.empty((height, width, 3), dtype=np.uint8)
    image[:, :] = color
    return image


def fill_rect(image: np.ndarray, row0: float, col0: float, row1: float, col1: float,
              color: Color) -> None:
    """Fill the pixels with row in [row0, row1) and col in [col0, col1)."""
    height, width = image.shape[:2]
    r0, r1 = max(0, int(round(row0))), min(height, int(round(row1)))
    c0, c1 = max(0, int(round(col0))), min(width, int(round(col1)))
    if r0 < r1 and c0 < c1:
        image[r0:r1, c0:c1] = color


def fill_disk(image: np.ndarray, row: float, col: float, radius: float, color: Color) -> None:
    """Fill the disk of `radius` pixels centred on (row, col)."""
    height, width = image.shape[:2]
    r0, r1 = max(0, int(np.floor(row - radius))), min(height, int(np.ceil(row + radius)) + 1)
    c0, c1 = max(0, int(np.floor(col - radius))), min(width, int(np.ceil(col + radius)) + 1)
    if r0 >= r1 or c0 >= c1:
        return
    rows, cols = np.ogrid[r0:r1, c0:c1]
    mask = (rows - row) ** 2 + (cols - col) ** 2 <= radius**2
    image[r0:r1, c0:c1][mask] = color


def draw_line(image: np.ndarray, start: tuple[float, float], end: tuple[float, float],
              color: Color, thickness: float = 1.0) -> None:
    """Draw a straight segment from `start` to `end` ((row, col) pairs) `thickness` px wide."""
    (row0, col0), (row1, col1) = start, end
    length = float(np.hypot(row1 - row0, col1 - col0))
    samples = max(2, int(np.ceil(length * 2)) + 1)
    radius = max(0.5, thickness / 2)
    for t in np.linspace(0.0, 1.0, samples):
        fill_disk(image, row0 + t * (row1 - row0), col0 + t * (col1 - col0), radius, color)


def draw_arrow(image: np.ndarray, start: tuple[float, float], end: tuple[float, float],
               color: Color, thickness: float = 2.0, head: float = 6.0) -> None:
    """Draw a segment from `start` to `end` with an arrow head at `end`."""
    draw_line(image, start, end, color, thickness)
    direction = np.array(end, dtype=float) - np.array(start, dtype=float)
    norm = float(np.hypot(*direction))
    if norm == 0:
        return
    direction /= norm
    normal = np.array([-direction[1], direction[0]])
    base = np.array(end, dtype=float) - head * direction
    for side in (1, -1):
        wing = base + side * head * 0.6 * normal
        draw_line(image, end, (float(wing[0]), float(wing[1])), color, thickness)


def write_png(path: str | Path, image: np.ndarray) -> Path:
    """Write an (H, W, 3) uint8 image as a PNG (matplotlib) and return the path."""
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(
            f"image has dtype {array.dtype} and shape {array.shape}; expected uint8 (H, W, 3)"
        )
    import matplotlib.image  # here: importing matplotlib would slow every environment import

    target = Path(path)
    matplotlib.image.imsave(target, array, format="png")
    return target
