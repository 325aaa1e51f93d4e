#!/usr/bin/env python3
"""Writes the small test pictures in tests/data/images/ (committed; re-run only to change them).

    scripts/env.sh python tests/data/gen_images.py

Needs Pillow (pinned in scripts/requirements.txt). The pictures, for the image pipeline (src/vision)
and the DeepStack endpoint tests:
  red_64x48.jpg        solid red JPEG, 64x48
  green_40x30.png      solid green PNG, 40x30 (lossless: every pixel is exactly (0, 255, 0))
  red_320x240.jpg      solid red JPEG, 320x240: the letterbox test picture for image_detector
                       (scale 0.1, 4 rows of padding above and below at 32x32)
  exif6_320x240.jpg    a 320x240 JPEG (stored pixels) with EXIF orientation 6 ("rotate 90° clockwise
                       to display"): displayed as 240x320. Left half red, right half blue as stored, so
                       once rotated the top half is red and the bottom half blue.
  corrupt.jpg          the first 100 bytes of red_64x48.jpg followed by garbage: a JPEG header cut short
"""

from __future__ import annotations

import io
import os

from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "images")

RED = (255, 0, 0)
GREEN = (0, 255, 0)
BLUE = (0, 0, 255)


def jpeg(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90, **kw)
    return buf.getvalue()


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    files = {}
    files["red_64x48.jpg"] = jpeg(Image.new("RGB", (64, 48), RED))
    files["green_40x30.png"] = png(Image.new("RGB", (40, 30), GREEN))
    files["red_320x240.jpg"] = jpeg(Image.new("RGB", (320, 240), RED))

    rotated = Image.new("RGB", (320, 240), RED)
    rotated.paste(Image.new("RGB", (160, 240), BLUE), (160, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: the 0th row is the visual right side, the 0th column the top
    files["exif6_320x240.jpg"] = jpeg(rotated, exif=exif.tobytes())

    files["corrupt.jpg"] = files["red_64x48.jpg"][:100] + b"\x00garbage\xff\xd9"
    for name, data in sorted(files.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"wrote {name} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
