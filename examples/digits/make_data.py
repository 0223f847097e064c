"""Write scikit-learn's bundled digits (1,797 8x8 images) as files: DEST/<label>/<n>.pgm.

The images ship inside scikit-learn, so this works offline. Each is a plain
binary PGM (8x8, 16 grey levels scaled to 0-255) that any image tool opens.
"""

import sys
from pathlib import Path

from sklearn.datasets import load_digits


def main(dest: str) -> None:
    root = Path(dest)
    digits = load_digits()
    for i, (image, label) in enumerate(zip(digits.images, digits.target)):
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        pixels = bytes(int(v * 255 / 16) for v in image.flatten())
        (folder / f"{i:04d}.pgm").write_bytes(b"P5\n8 8\n255\n" + pixels)
    print(f"wrote {len(digits.images)} images to {root}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "digits-data")
