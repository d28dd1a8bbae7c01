"""Write ``sparsify/cli/demo/digits.npz``, the data set ``sparsify demo`` trains on (run once; the file is committed).

The data: the 8x8 "Optical Recognition of Handwritten Digits" set (E. Alpaydin, C. Kaynak, 1998; UCI Machine
Learning Repository, https://doi.org/10.24432/C50P49, licensed CC BY 4.0), as scikit-learn bundles it
(``sklearn.datasets.load_digits``: its test part, 1,797 images from 13 writers). The file holds ``x``
(1797 x 64, uint8 pixel counts 0..16) and ``y`` (1797, uint8 labels 0..9), compressed (about 45 KB), so the
demo needs only NumPy to read it, not scikit-learn. ``sparsify/cli/demo/DATA.md`` says the same for users.

    python scripts/make_demo_digits.py          # needs scikit-learn; rewrites the file
"""
from __future__ import annotations

import os

import numpy as np
from sklearn.datasets import load_digits

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sparsify", "cli", "demo", "digits.npz")


def main() -> None:
    """Load scikit-learn's bundled digits and write them as a compressed ``.npz``."""
    x, y = load_digits(return_X_y=True)
    assert x.shape == (1797, 64) and x.min() == 0 and x.max() == 16 and np.array_equal(x, np.round(x))
    np.savez_compressed(os.path.normpath(OUT), x=x.astype(np.uint8), y=y.astype(np.uint8))
    print(f"wrote {os.path.normpath(OUT)}: {x.shape[0]} images, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
