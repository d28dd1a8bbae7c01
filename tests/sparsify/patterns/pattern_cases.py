"""Shared inputs for the pattern tests."""
import numpy as np
from hypothesis import strategies as st

A = np.array([[0.9, 0.1, 0.5, 0.3],
              [0.2, 0.8, 0.7, 0.05],
              [0.6, 0.4, 0.0, 1.0],
              [0.35, 0.45, 0.25, 0.15]])


def as_int(m):
    return m.astype(int).tolist()


SHAPES = st.sampled_from([(8,), (4, 8), (8, 4), (16, 8), (4, 4, 3, 3), (8, 2, 1, 2), (4, 2, 2, 2, 2)])
