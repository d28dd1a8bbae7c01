"""SparseGPT: one-shot pruning of a linear layer by reconstruction from its inputs' Hessian.

Frantar & Alistarh (2023), "SparseGPT: Massive Language Models Can Be Accurately
Pruned in One-Shot". For a layer ``y = W x`` and calibration inputs ``X`` the
loss of a change ``dW`` is ``tr(dW H dWᵀ)`` with ``H = 2 X Xᵀ / n``. The columns
of ``W`` (input channels) are visited left to right; a pruned entry's error is
spread over the row's later columns by the optimal-brain-surgeon update, read
off the upper Cholesky factor ``U`` of ``H⁻¹`` (``Uᵀ U = H⁻¹``):
``err = w_c / U_cc``, ``W[:, c:] -= err ⊗ U[c, c:]``. Updates of the columns
after a block of ``block_size`` columns are batched into one matrix product
(the paper's lazy batch updates).

Mask selection (the paper's adaptive mask selection) scores an entry by
``w² / U_cc²`` with the weights as compensated so far:

* unstructured: at the start of each block, over all rows of the block at once.
  The layer prunes exactly ``k = sparsify.exact_prune_count(s, out * in)``
  entries (docs/design.md, rule 5): ``k`` is shared among the blocks in
  proportion to their sizes (whole counts by largest remainder, an equal
  remainder going to the earlier block), so every block prunes its share and the
  layer its exact count. Ties: the lower flat index of the layer is pruned first
  (rule 6; within a block that is row-major order).
* N:M (``nm=(n, m)``: ``n`` of every ``m`` consecutive weights along the input
  axis pruned, rule 4; ``"2:4"`` is ``(2, 4)``): at the first column of each
  group, the ``n`` lowest scores of each row within the group, ties to the lower
  column.

``H`` gets ``dampening * mean(diag(H))`` added to its diagonal; a factorization
that still fails is retried with ten times the dampening (three times) before a
``ValueError`` naming the layer. An input channel that never fired (zero
diagonal) gets a diagonal of one: it is decoupled from the rest, scored by its
weight alone, and its weights are left as they are where kept.

All arithmetic is float64 NumPy.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> acc = HessianAccumulator(8)
    >>> acc.add(rng.normal(size=(64, 8)))
    >>> w = rng.normal(size=(4, 8))
    >>> new_w, mask = sparsegpt_prune(w, acc.hessian(), sparsity=0.5, block_size=4)
    >>> int((~mask).sum()), bool(np.all(new_w[~mask] == 0))
    (16, True)
    >>> new_w, mask = sparsegpt_prune(w, acc.hessian(), nm=(2, 4))
    >>> mask.reshape(4, 2, 4).sum(axis=-1).tolist()
    [[2, 2], [2, 2], [2, 2], [2, 2]]
"""
from __future__ import annotations

import functools
import warnings
from typing import Optional, Tuple

import numpy as np

from .patterns.ninm import PatternNInM
from .selection.lowest_k import exact_prune_count
from .selection.tie_order import lowest_k_flags

__all__ = ["HessianAccumulator", "sparsegpt_prune", "reconstruction_error", "block_prune_counts",
           "sparsegpt_options", "sparsegpt_target", "ONESHOT_METHODS", "oneshot_method_options"]

#: The one-shot methods of every adapter's ``prune_oneshot``.
ONESHOT_METHODS = ("criterion", "sparsegpt")

_RETRIES = 3


class HessianAccumulator:
    """Running ``H = 2 X Xᵀ / n`` of a layer's inputs, accumulated over calibration batches.

    Args:
        n_features: the layer's input width (``in`` of a ``(out, in)`` weight).
        name: the layer's name, used in error messages.

    Example:
        >>> acc = HessianAccumulator(2)
        >>> acc.add(np.array([[1.0, 0.0], [1.0, 2.0]]))
        >>> acc.n_samples, acc.hessian().tolist()
        (2, [[2.0, 2.0], [2.0, 4.0]])
    """

    def __init__(self, n_features: int, name: str = "layer") -> None:
        if not isinstance(n_features, (int, np.integer)) or isinstance(n_features, bool) or n_features <= 0:
            raise ValueError(f"n_features must be a positive integer, got {n_features!r} (layer {name!r})")
        self.name = name
        self.n_features = int(n_features)
        self.n_samples = 0
        self._sum = np.zeros((self.n_features, self.n_features), dtype=np.float64)

    def add(self, inputs: np.ndarray) -> None:
        """Add a batch of inputs, shape ``(n, in)`` (one row per token or sample).

        Raises:
            ValueError: the inputs are not 2-D with ``in`` columns, or hold NaN or inf.
        """
        x = np.asarray(inputs, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"inputs of layer {self.name!r} must have shape (n, {self.n_features}), "
                             f"got {tuple(x.shape)}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"inputs of layer {self.name!r} hold NaN or inf")
        self._sum += x.T @ x
        self.n_samples += x.shape[0]

    def hessian(self) -> np.ndarray:
        """``2 X Xᵀ / n`` over every input added so far.

        Raises:
            ValueError: no input was added.
        """
        if self.n_samples == 0:
            raise ValueError(f"layer {self.name!r} saw no calibration input: no Hessian to return")
        return 2.0 * self._sum / self.n_samples


def reconstruction_error(weight: np.ndarray, new_weight: np.ndarray, hessian: np.ndarray) -> float:
    """The layer-wise loss ``tr((W' - W) H (W' - W)ᵀ)`` that SparseGPT minimizes.

    Example:
        >>> reconstruction_error(np.ones((1, 2)), np.zeros((1, 2)), np.eye(2))
        2.0
    """
    d = np.asarray(new_weight, dtype=np.float64) - np.asarray(weight, dtype=np.float64)
    return float(np.einsum("ij,jk,ik->", d, np.asarray(hessian, dtype=np.float64), d))


def block_prune_counts(k: int, widths: list[int], rows: int) -> list[int]:
    """Share ``k`` pruned entries among column blocks of ``widths`` columns and ``rows`` rows.

    In proportion to the blocks' sizes; whole counts by largest remainder, an equal
    remainder to the earlier block.

    Example:
        >>> block_prune_counts(5, [2, 2, 2], 1)
        [2, 2, 1]
    """
    total = sum(widths) * rows
    exact = [k * w * rows / total for w in widths]
    counts = [int(np.floor(e)) for e in exact]
    order = sorted(range(len(widths)), key=lambda b: (-(exact[b] - counts[b]), b))
    for b in order[:k - sum(counts)]:
        counts[b] += 1
    return counts


def _checked(weight: np.ndarray, hessian: np.ndarray, name: str) -> Tuple[np.ndarray, np.ndarray]:
    """Float64 copies of ``weight`` (out, in) and ``hessian`` (in, in), or a ``ValueError`` naming the layer."""
    w = np.array(weight, dtype=np.float64)
    h = np.array(hessian, dtype=np.float64)
    if w.ndim != 2 or w.size == 0:
        raise ValueError(f"weight of layer {name!r} must be a non-empty 2-D (out, in) array, got shape {w.shape}")
    if h.shape != (w.shape[1], w.shape[1]):
        raise ValueError(f"hessian of layer {name!r} must have shape {(w.shape[1], w.shape[1])} for a weight of "
                         f"shape {w.shape}, got {h.shape}")
    for what, arr in (("weight", w), ("hessian", h)):
        if np.isnan(arr).any():
            raise ValueError(f"{what} of layer {name!r} holds NaN")
        if np.isinf(arr).any():
            raise ValueError(f"{what} of layer {name!r} holds inf")
    return w, h


def _check_options(w: np.ndarray, sparsity: Optional[float], nm: Optional[Tuple[int, int]], block_size: int,
                   dampening: float, name: str) -> None:
    """``ValueError`` naming the parameter, its value and what is allowed."""
    if (sparsity is None) == (nm is None):
        raise ValueError(f"layer {name!r}: pass exactly one of sparsity= and nm=, got sparsity={sparsity!r}, "
                         f"nm={nm!r}")
    if sparsity is not None and not (isinstance(sparsity, (int, float)) and 0.0 <= float(sparsity) < 1.0):
        raise ValueError(f"sparsity must be a number in [0, 1), got {sparsity!r} (layer {name!r})")
    if not isinstance(block_size, (int, np.integer)) or isinstance(block_size, bool) or block_size <= 0:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r} (layer {name!r})")
    if not (isinstance(dampening, (int, float)) and np.isfinite(dampening) and dampening >= 0):
        raise ValueError(f"dampening must be a finite number >= 0, got {dampening!r} (layer {name!r})")
    if nm is not None:
        ok = (isinstance(nm, (tuple, list)) and len(nm) == 2 and all(isinstance(v, (int, np.integer)) for v in nm)
              and 0 < nm[0] < nm[1])
        if not ok:
            raise ValueError(f"nm must be (n, m) with 0 < n < m (n of every m pruned), got {nm!r} (layer {name!r})")
        if w.shape[1] % nm[1] or block_size % nm[1]:
            raise ValueError(f"nm={tuple(nm)} needs the input width ({w.shape[1]}) and block_size ({block_size}) "
                             f"to be multiples of m={nm[1]} (layer {name!r})")


def _inverse_cholesky(h: np.ndarray, dampening: float, name: str) -> np.ndarray:
    """Upper ``U`` with ``Uᵀ U = (H + λ I)⁻¹``, ``λ = dampening * mean(diag H)``; retried with 10x dampening."""
    h = h.copy()
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    mean_diag = float(np.mean(np.diag(h)))
    damp = dampening
    for attempt in range(_RETRIES + 1):
        hd = h + (damp * mean_diag) * np.eye(h.shape[0])
        try:
            lower = np.linalg.cholesky(hd)
            inv_lower = np.linalg.solve(lower, np.eye(h.shape[0]))
            u = np.linalg.cholesky(inv_lower.T @ inv_lower).T
        except np.linalg.LinAlgError:
            damp = max(damp, 1e-6) * 10.0
            continue
        if attempt:
            warnings.warn(f"layer {name!r}: the Hessian was not positive definite with dampening={dampening}; "
                          f"used dampening={damp}", RuntimeWarning, stacklevel=3)
        return u
    raise ValueError(f"layer {name!r}: the Hessian of its inputs is not positive definite even with "
                     f"dampening={damp} (asked for {dampening}); pass a larger dampening or more calibration data")


def _lowest_in_block(scores: np.ndarray, k: int) -> np.ndarray:
    """Pruned flags of the ``k`` lowest ``scores`` (2-D block), ties to the lower row-major index."""
    if not k:
        return np.zeros(scores.shape, dtype=bool)
    return lowest_k_flags(np.ascontiguousarray(scores).reshape(-1), k).reshape(scores.shape)


def _nm_group(scores: np.ndarray, n: int) -> np.ndarray:
    """Pruned flags of the ``n`` lowest scores in each row of ``scores`` (rows, m), ties to the lower column."""
    return _group_pattern(n, scores.shape[1]).smallest_in_group(scores)[0]


@functools.lru_cache(maxsize=16)
def _group_pattern(n: int, m: int) -> PatternNInM:
    """The N:M pattern whose group ranker :func:`_nm_group` uses (kept: its ranker's tables are built once)."""
    return PatternNInM(n_pruned=n, group_size=m)


def _prune_block(w1: np.ndarray, u1: np.ndarray, pruned: Optional[np.ndarray],
                 nm: Optional[Tuple[int, int]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prune one block of columns in place of ``w1``; returns (pruned flags, errors, pruned weights)."""
    cols = w1.shape[1]
    diag = np.diag(u1)
    if pruned is None:
        pruned = np.zeros(w1.shape, dtype=bool)
    err = np.zeros_like(w1)
    for i in range(cols):
        if nm is not None and i % nm[1] == 0:
            sl = slice(i, i + nm[1])
            pruned[:, sl] = _nm_group(w1[:, sl] ** 2 / diag[sl] ** 2, nm[0])
        col = w1[:, i]
        q = np.where(pruned[:, i], 0.0, col)
        e = (col - q) / diag[i]
        w1[:, i:] -= np.outer(e, u1[i, i:])
        w1[:, i] = q
        err[:, i] = e
    return pruned, err, w1


def sparsegpt_prune(weight: np.ndarray, hessian: np.ndarray, sparsity: Optional[float] = None, *,
                    nm: Optional[Tuple[int, int]] = None, block_size: int = 128, dampening: float = 0.01,
                    name: str = "layer") -> Tuple[np.ndarray, np.ndarray]:
    """Prune a ``(out, in)`` weight with SparseGPT; returns ``(new_weight, mask)``.

    Args:
        weight: the layer's weight in canonical layout ``(out, in)``.
        hessian: ``(in, in)``, e.g. :meth:`HessianAccumulator.hessian`.
        sparsity: unstructured fraction pruned per layer, in ``[0, 1)`` (exact count, rule 5).
        nm: ``(n, m)``: ``n`` of every ``m`` consecutive input weights pruned. Exactly one of the two.
        block_size: columns per lazy-update block (and per mask selection, unstructured).
        dampening: fraction of the mean diagonal of ``H`` added to the diagonal.
        name: the layer's name, for error messages.

    Returns:
        ``new_weight`` (float64, zeros where pruned, the kept weights compensated) and the bool
        ``mask`` (True = kept).

    Raises:
        ValueError: bad shapes or options, NaN/inf, or a Hessian not positive definite after dampening.

    Example:
        >>> w = np.array([[1.0, -3.0, 0.5, 2.0]])
        >>> new_w, mask = sparsegpt_prune(w, np.eye(4), 0.5)   # H = I: magnitude pruning, no compensation
        >>> mask.tolist(), new_w.tolist()
        ([[False, True, False, True]], [[0.0, -3.0, 0.0, 2.0]])
    """
    w, h = _checked(weight, hessian, name)
    _check_options(w, sparsity, nm, block_size, dampening, name)
    rows, cols = w.shape
    u = _inverse_cholesky(h, float(dampening), name)
    starts = list(range(0, cols, int(block_size)))
    widths = [min(int(block_size), cols - s) for s in starts]
    counts = None
    if sparsity is not None:
        counts = block_prune_counts(exact_prune_count(float(sparsity), rows * cols), widths, rows)
    pruned = np.zeros(w.shape, dtype=bool)
    for b, (i1, width) in enumerate(zip(starts, widths)):
        i2 = i1 + width
        w1 = w[:, i1:i2].copy()
        u1 = u[i1:i2, i1:i2]
        chosen = None
        if counts is not None:
            chosen = _lowest_in_block(w1 ** 2 / np.diag(u1) ** 2, counts[b])
        flags, err, q = _prune_block(w1, u1, chosen, None if nm is None else (int(nm[0]), int(nm[1])))
        w[:, i1:i2] = q
        pruned[:, i1:i2] = flags
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return w, ~pruned


def sparsegpt_options(dampening: Optional[float] = None, block_size: Optional[int] = None,
                      sequential: Optional[bool] = None) -> dict:
    """The one-shot entry points' SparseGPT keyword arguments with their defaults, validated (every adapter).

    Example:
        >>> sparsegpt_options(block_size=4)
        {'dampening': 0.01, 'block_size': 4, 'sequential': True}
    """
    damp = 0.01 if dampening is None else dampening
    if isinstance(damp, bool) or not isinstance(damp, (int, float)) or not damp >= 0 or damp == float("inf"):
        raise ValueError(f"dampening must be a finite number >= 0 (a fraction of the Hessian's mean diagonal), "
                         f"got {dampening!r}")
    size = 128 if block_size is None else block_size
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"block_size must be a positive integer (columns per block), got {block_size!r}")
    seq = True if sequential is None else sequential
    if not isinstance(seq, bool):
        raise ValueError(f"sequential must be True or False, got {sequential!r}")
    return {"dampening": float(damp), "block_size": size, "sequential": seq}


def sparsegpt_target(config: object) -> dict:
    """``sparsity=`` or ``nm=`` for :func:`sparsegpt_prune` from a :class:`sparsify.PruningConfig`, or a
    ``ValueError`` for what SparseGPT does not do (every adapter).

    Example:
        >>> from sparsify import PruningConfig
        >>> sparsegpt_target(PruningConfig(target_sparsity=0.5, pattern="2:4"))
        {'nm': (2, 4)}
        >>> sparsegpt_target(PruningConfig(target_sparsity=0.6))
        {'sparsity': 0.6}
    """
    from .patterns import PatternNInM

    cfg = config
    if cfg.pruning_scope != "local":
        raise ValueError(f"method='sparsegpt' prunes every layer to the same ratio: pruning_scope must be 'local', "
                         f"got {cfg.pruning_scope!r}")
    if cfg.criterion != "magnitude":
        raise ValueError(f"method='sparsegpt' scores weights by its own reconstruction error: leave criterion at "
                         f"'magnitude' (the default), got {cfg.criterion!r}")
    target = float(cfg.target_sparsity or 0.0)
    pattern = cfg.pattern_obj()
    if isinstance(pattern, PatternNInM):
        if abs(target - pattern.N / pattern.M) > 1e-12:
            raise ValueError(f"method='sparsegpt' with pattern {cfg.pattern!r} prunes every group: target_sparsity "
                             f"must be N/M = {pattern.N / pattern.M}, got {cfg.target_sparsity!r}")
        return {"nm": (pattern.N, pattern.M)}
    if cfg.pattern != "1x1":
        raise ValueError(f"method='sparsegpt' supports pattern '1x1' (unstructured) or 'N:M', got {cfg.pattern!r}")
    return {"sparsity": target}


def oneshot_method_options(method: str, dampening: Optional[float] = None, block_size: Optional[int] = None,
                           sequential: Optional[bool] = None) -> Optional[dict]:
    """``prune_oneshot``'s ``method`` and its options, validated: :func:`sparsegpt_options` for
    ``"sparsegpt"``, None for ``"criterion"`` (which takes none of them).

    Example:
        >>> oneshot_method_options("criterion") is None, oneshot_method_options("sparsegpt")["block_size"]
        (True, 128)
    """
    if method not in ONESHOT_METHODS:
        raise ValueError(f"method must be one of {list(ONESHOT_METHODS)}, got {method!r}")
    if method == "sparsegpt":
        return sparsegpt_options(dampening, block_size, sequential)
    for key, value in (("dampening", dampening), ("block_size", block_size), ("sequential", sequential)):
        if value is not None:
            raise ValueError(f"{key}={value!r} applies to method='sparsegpt' only, got method={method!r}")
    return None
