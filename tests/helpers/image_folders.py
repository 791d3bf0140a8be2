"""Folders of images as people keep them, for ``data=image_folder``: written with PIL.

``write_image_folder(root)`` writes one sub-folder of images per class (or, with
``classes=()``, the images directly in ``root``). With ``mixed=True`` the images cycle through
the formats, PIL modes and sizes in ``MIXED`` (PNG with alpha, palette and 16-bit grey, grey
JPEG, GIF, TIFF, WebP, BMP; smaller and larger than the sizes tests read, portrait and
landscape); otherwise every image is an RGB PNG of ``size``. Image i is filled with a
pattern of its own (``picture``), so tests can tell images apart.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

# (extension, PIL mode, (width, height)) that the mixed folders cycle through
MIXED = (
    ("png", "RGB", (20, 14)),
    ("png", "RGBA", (9, 31)),
    ("png", "P", (16, 16)),
    ("png", "I;16", (12, 18)),
    ("jpg", "L", (40, 25)),
    ("jpeg", "RGB", (33, 33)),
    ("gif", "P", (18, 11)),
    ("tif", "RGB", (7, 7)),
    ("webp", "RGB", (24, 16)),
    ("bmp", "RGB", (15, 21)),
)
FORMATS = {"png": "PNG", "jpg": "JPEG", "jpeg": "JPEG", "gif": "GIF", "tif": "TIFF", "webp": "WEBP", "bmp": "BMP"}


def picture(index: int, size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    """A smooth pattern of its own for image ``index`` (smooth, so lossy formats keep it), in
    ``mode``; 16-bit grey spans 0..65535."""
    width, height = size
    rows, cols = np.mgrid[0:height, 0:width]
    base = (rows * 7 + cols * 5 + index * 37) % 256
    rgb = np.stack([base, (base + 85) % 256, (255 - base + 3 * index) % 256], axis=-1).astype(np.uint8)
    if mode == "I;16":
        return Image.fromarray((base.astype(np.uint16) * 257).astype(np.uint16))
    img = Image.fromarray(rgb)
    if mode == "RGBA":
        img.putalpha(Image.fromarray(((rows * 11) % 256).astype(np.uint8)))
        return img
    if mode == "P":
        return img.quantize(16)
    return img.convert(mode)


def save(img: Image.Image, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, FORMATS[path.suffix.lstrip(".").lower()])
    return path


def write_image_folder(
    root: Path,
    classes: tuple[str, ...] = ("cat", "dog"),
    per_class: int = 4,
    mixed: bool = False,
    size: tuple[int, int] = (12, 10),
) -> Path:
    """``per_class`` images in each of ``classes``' sub-folders of ``root`` (or, with
    ``classes=()``, ``per_class`` images directly in ``root``); returns ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    index = 0
    for folder in [root / c for c in classes] or [root]:
        for k in range(per_class):
            ext, mode, shape = MIXED[index % len(MIXED)] if mixed else ("png", "RGB", size)
            save(picture(index, shape, mode), folder / f"img{k:03d}.{ext}")
            index += 1
    return root
