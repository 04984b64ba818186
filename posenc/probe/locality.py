"""Locality and symmetry of an attention matrix over positions (Chen,
Varoquaux & Suchanek, "The Locality and Symmetry of Positional Encodings",
Findings of EMNLP 2023): :func:`attention_locality_symmetry`,
:func:`position_attention` and :class:`LocalitySymmetry`.

For a row-stochastic attention matrix ``A`` (row ``i``: the weights query
position ``i`` gives the key positions), the authors define

- *locality* ``(1/n) sum_i sum_j A[i, j] 2^(-|i - j|)``: 1 when every
  position attends only to itself, smaller the further the weight spreads;
- *symmetry* ``1 - mean d'``, where for each row ``i`` and distance
  ``k = 1 .. min(i, n - 1 - i)``, ``d[i, k] = |A[i, i - k] - A[i, i + k]|``
  and ``d'`` is ``d`` min-max scaled within its row as scikit-learn's
  ``MinMaxScaler`` scales it (``(d - min) / (max - min)``, divided by 1
  instead where ``max - min`` is below 10 eps); the mean is over
  every ``(i, k)``: 1 when each position weighs the same distance to its left
  and right alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import numpy as np

from .. import _validate as v
from ._tables import _diagonal_means, _plain, _table
from .analyses import MAX_POSITIONS
from .properties import bilinear_products

#: Differences ``|A[i, i-k] - A[i, i+k]|`` below this share of row ``i``'s
#: largest weight count as 0 in the symmetry (rounding noise, which the
#: authors' per-row min-max scaling would otherwise blow up to 1).
SYMMETRY_TOLERANCE = 1e-6


@dataclass(frozen=True)
class LocalitySymmetry:
    """Result of :func:`attention_locality_symmetry`.

    Chen et al.'s locality and symmetry of one attention matrix.

    Attributes
    ----------
    locality : float
        ``(1/n) sum_i sum_j A[i, j] 2^(-|i-j|)`` (1: all weight on the
        diagonal).
    symmetry : float
        One minus the mean of the per-row min-max scaled differences between
        the weights at the same distance to the left and to the right (1:
        symmetric about the diagonal).
    n_positions : int
        The side of ``A``.
    offsets : ndarray of int
        ``j - i`` from ``-(n - 1)`` to ``n - 1``.
    mean_by_offset : ndarray
        The mean weight on each diagonal ``j - i`` (what :meth:`plot` draws
        beside the matrix).
    attention : ndarray of shape (n, n)
        The matrix measured.
    """

    locality: float
    symmetry: float
    n_positions: int
    offsets: np.ndarray = field(repr=False)
    mean_by_offset: np.ndarray = field(repr=False)
    attention: np.ndarray = field(repr=False)

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (the matrix left out)."""
        names = ("locality", "symmetry", "n_positions", "offsets", "mean_by_offset")
        return _plain(self, names)

    def summary(self) -> str:
        """One sentence of the two figures."""
        return (
            f"Chen et al. 2023 position attention: locality {self.locality:.3f}, "
            f"symmetry {self.symmetry:.3f}."
        )

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """The attention matrix and its mean weight per offset ``j - i``.
        Returns the figure without `path`, else writes it there (format by
        extension) and returns `path`."""
        from ._plots import _figure

        def draw(fig: Any) -> None:
            ax = fig.add_subplot(1, 2, 1)
            im = ax.imshow(self.attention, cmap="viridis")
            ax.set_title(f"attention (locality {self.locality:.3f}, symmetry {self.symmetry:.3f})")
            ax.set_xlabel("key position j")
            ax.set_ylabel("query position i")
            fig.colorbar(im, ax=ax, shrink=0.85)
            ax = fig.add_subplot(1, 2, 2)
            ax.plot(self.offsets, self.mean_by_offset, color="C0")
            ax.set_xlabel("offset j - i")
            ax.set_ylabel("mean attention weight")
            ax.set_title("mean weight per offset")

        return _figure(path, dpi, (11, 4.4), draw)


def position_attention(E: Any, *, W: Optional[Any] = None, scale: Optional[float] = None) -> Any:
    """The attention positions alone give: ``softmax(E W E^T * scale)`` by rows.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
        The position table (at most :data:`MAX_POSITIONS` rows).
    W : array_like of shape (dim, dim), optional
        ``W_Q W_K^T`` of a head (its position-position term); the identity
        by default.
    scale : float, optional
        The logits' factor; ``1 / sqrt(dim)`` by default, as in attention.

    Returns
    -------
    ndarray of shape (n_positions, n_positions), float64
        Each row sums to 1.

    Examples
    --------
    >>> from posenc.probe import position_attention
    >>> A = position_attention(posenc.sinusoid(32, 16, dtype="float64"))
    >>> A.shape, bool(np.allclose(A.sum(axis=1), 1.0))
    ((32, 32), True)
    >>> int(A[10].argmax())  # each position attends most to itself
    10
    """
    table = _table(E, "E", min_rows=2, max_rows=MAX_POSITIONS)
    n, d = table.shape
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    else:
        scale = v.real(scale, "scale")
        if not np.isfinite(scale):
            raise ValueError(f"scale must be finite, got {scale!r}")
    logits = bilinear_products(table, W)
    logits *= scale
    logits -= logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def _symmetry(A: np.ndarray, tolerance: float) -> float:
    n = A.shape[0]
    half = (n - 1) // 2  # the largest distance any row has on both sides
    i = np.arange(n)[:, None]
    k = np.arange(1, half + 1)[None, :]
    valid = k <= np.minimum(i, n - 1 - i)
    left = A[i, np.clip(i - k, 0, n - 1)]
    right = A[i, np.clip(i + k, 0, n - 1)]
    d = np.abs(left - right)
    d[d < tolerance * np.abs(A).max(axis=1, keepdims=True)] = 0.0
    low = np.where(valid, d, np.inf).min(axis=1, keepdims=True)
    high = np.where(valid, d, -np.inf).max(axis=1, keepdims=True)
    span = high - low
    # scikit-learn's MinMaxScaler (the authors' scaling) takes a range below
    # 10 eps as no range, and divides by 1 instead: the differences are then
    # left as they are, a few eps above 0, not blown up to 1
    span[span < 10 * np.finfo(np.float64).eps] = 1.0
    scaled = np.divide(d - low, span, out=np.zeros_like(d), where=valid)
    return float(1.0 - scaled[valid].mean())


def attention_locality_symmetry(
    A: Any, *, tolerance: float = SYMMETRY_TOLERANCE
) -> LocalitySymmetry:
    """Locality and symmetry of an attention matrix over positions (Chen,
    Varoquaux & Suchanek, Findings of EMNLP 2023).

    Parameters
    ----------
    A : array_like of shape (n, n)
        Attention weights, row ``i`` those of query position ``i`` (rows
        summing to 1, as a softmax gives them: a head's attention averaged
        over texts, or :func:`position_attention` of a table); ``n >= 3``,
        at most :data:`MAX_POSITIONS`.
    tolerance : float
        Differences below this share of a row's largest weight count as
        equal in the symmetry (see :data:`SYMMETRY_TOLERANCE`); 0 for the
        authors' measure as written.

    Returns
    -------
    LocalitySymmetry

    Raises
    ------
    ValueError
        `A` not square, smaller than 3 x 3, not finite, with a negative
        weight or a row that does not sum to 1 (within 1e-6); `tolerance`
        negative.

    Examples
    --------
    >>> from posenc.probe import attention_locality_symmetry, position_attention
    >>> A = position_attention(posenc.sinusoid(32, 16, dtype="float64"), scale=1.0)
    >>> result = attention_locality_symmetry(A)
    >>> result.n_positions
    32
    >>> bool(0 < result.locality < 1), round(float(result.symmetry), 3)
    (True, 1.0)
    >>> float(attention_locality_symmetry(np.eye(8)).locality)  # each position on itself
    1.0
    >>> uniform = np.full((8, 8), 1 / 8)  # every key alike
    >>> round(float(attention_locality_symmetry(uniform).locality), 3)
    0.313
    """
    a = _table(A, "A", min_rows=3, max_rows=MAX_POSITIONS)
    n = a.shape[0]
    if a.shape != (n, n):
        raise ValueError(f"A must be a square matrix, got shape {a.shape}")
    tolerance = v.real(tolerance, "tolerance")
    if not (0 <= tolerance < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    if (a < 0).any():
        raise ValueError("A must hold attention weights (>= 0); it has a negative entry")
    sums = a.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1) > 1e-6)
    if bad.size:
        raise ValueError(
            f"A's rows must sum to 1 (attention weights); row {bad[0]} sums to {sums[bad[0]]!r} "
            "(softmax the logits first, e.g. probe.position_attention(E))"
        )
    i = np.arange(n)
    distance = np.abs(i[:, None] - i[None, :])
    locality = float((a * np.exp2(-distance.astype(np.float64))).sum() / n)
    offsets, means = _diagonal_means(a)
    return LocalitySymmetry(locality, _symmetry(a, tolerance), n, offsets, means, a)
