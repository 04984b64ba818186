"""The properties of a position embedding that Wang et al. define in "On
Position Embeddings in BERT" (ICLR 2021): monotonicity, translation
invariance and symmetry of the proximity ``phi(x, y) = E[x] W E[y]^T``
(the dot product when ``W`` is the identity), measured on a table:
:func:`position_properties` and :class:`PositionProperties`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional

import numpy as np

from .. import _validate as v
from ._tables import _diagonal_means, _plain, _table
from .analyses import MAX_POSITIONS


@dataclass(frozen=True)
class PositionProperties:
    """Wang et al.'s three properties of a table, as numbers.

    1 means the property holds exactly.

    Attributes
    ----------
    monotonicity_forward, monotonicity_backward : float
        The mean over positions ``x`` of Spearman's rank correlation between
        the offset ``m`` and ``-phi(x, x + m)`` for ``m = 1 .. max_offset``
        (forward) and between ``m`` and ``-phi(x, x - m)`` (backward), over
        the rows with at least 3 such offsets: 1 when the proximity falls
        strictly as the distance grows (the property "m > n <=> phi(x, x+m) <
        phi(x, x+n)"), -1 when it strictly rises.
    translation_invariance : float
        The share of the variance of ``phi(x, x + m)`` over the pairs with
        ``1 <= |m| <= max_offset`` that the offset ``m`` explains:
        ``1 - sum_m sum_x (phi(x, x+m) - mean_m)^2 / sum (phi - mean)^2``
        (``m`` signed: ``+m`` and ``-m`` are separate groups),
        1 when ``phi(x1, x1 + m) = phi(x2, x2 + m)`` for every ``x1, x2, m``
        (a Toeplitz matrix), near 0 when the offset tells nothing.
    symmetry : float
        ``<M, M^T> / <M, M>`` for the matrix ``M[x, y] = phi(x, y)``: 1 when
        ``phi(x, y) = phi(y, x)`` (always so for the dot product), -1 when
        ``phi(x, y) = -phi(y, x)``.
    max_offset : int
        The largest ``|m|`` taken.
    offsets : ndarray of int
        ``-max_offset .. max_offset`` without 0.
    mean_by_offset, std_by_offset : ndarray
        The mean and standard deviation (``ddof=0``) of ``phi(x, x + m)``
        over ``x``, for each offset (what :meth:`plot` draws).
    """

    monotonicity_forward: float
    monotonicity_backward: float
    translation_invariance: float
    symmetry: float
    max_offset: int
    offsets: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=int))
    mean_by_offset: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    std_by_offset: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values."""
        return _plain(self, tuple(f.name for f in fields(self)))

    def summary(self) -> str:
        """One sentence of the four figures."""
        return (
            f"Wang et al. 2021 properties (|offset| <= {self.max_offset}): monotonicity "
            f"{self.monotonicity_forward:.3f} forward, {self.monotonicity_backward:.3f} "
            f"backward; translation invariance {self.translation_invariance:.3f}; "
            f"symmetry {self.symmetry:.3f}."
        )

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """The proximity against the offset: its mean over positions, and the
        band of one standard deviation (narrow for a translation-invariant
        table, falling on both sides for a monotone one).  Returns the figure
        without `path`, else writes it there (format by extension) and
        returns `path`."""
        from ._plots import _figure

        def draw(fig: Any) -> None:
            ax = fig.add_subplot(1, 1, 1)
            for side in (self.offsets < 0, self.offsets > 0):
                m, mean, std = (
                    self.offsets[side],
                    self.mean_by_offset[side],
                    self.std_by_offset[side],
                )
                ax.fill_between(m, mean - std, mean + std, color="C0", alpha=0.25, linewidth=0)
                ax.plot(m, mean, color="C0")
            ax.set_xlabel("offset m = y - x")
            ax.set_ylabel("phi(x, x + m): mean ± std over x")
            ax.set_title(
                f"monotonicity {self.monotonicity_forward:.2f}/{self.monotonicity_backward:.2f}, "
                f"translation invariance {self.translation_invariance:.2f}, "
                f"symmetry {self.symmetry:.2f}"
            )

        return _figure(path, dpi, (7, 4.2), draw)


def _masked_ranks(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Ranks 1..k of each row's valid entries (the first ``k`` of the row),
    ties given their mean rank; the invalid entries get ranks past ``k``."""
    rows, n = values.shape
    keyed = np.where(valid, values, np.inf)  # after every valid entry
    order = np.argsort(keyed, axis=1, kind="stable")
    s = np.take_along_axis(keyed, order, axis=1)
    start = np.ones((rows, n), dtype=bool)
    start[:, 1:] = s[:, 1:] != s[:, :-1]  # a new run of equal values
    flat = start.ravel()
    firsts = np.flatnonzero(flat)
    lasts = np.r_[firsts[1:], flat.size] - 1
    column = np.arange(flat.size) % n
    mean_rank = (column[firsts] + column[lasts]) / 2.0 + 1.0  # 1-based
    by_sorted = np.repeat(mean_rank, lasts - firsts + 1).reshape(rows, n)
    ranks = np.empty((rows, n))
    np.put_along_axis(ranks, order, by_sorted, axis=1)
    return ranks


def bilinear_products(table: np.ndarray, W: Optional[Any]) -> np.ndarray:
    """``E W E^T`` of a checked table (``E E^T`` without `W`), `W` checked
    against the table's width."""
    if W is None:
        return table @ table.T
    d = table.shape[1]
    w = _table(W, "W", min_rows=1)
    if w.shape != (d, d):
        raise ValueError(f"W must have shape ({d}, {d}) to match E, got {w.shape}")
    return table @ w @ table.T


def _monotonicity(M: np.ndarray, max_offset: int) -> float:
    """The mean over rows ``x`` with ``k = min(max_offset, n - 1 - x) >= 3`` of
    Spearman's correlation between ``m = 1..k`` and ``-M[x, x + m]``."""
    n = M.shape[0]
    x = np.arange(n)
    k = np.minimum(max_offset, n - 1 - x)
    x, k = x[k >= 3], k[k >= 3]
    if not len(x):
        return float("nan")
    m = np.arange(1, int(k.max()) + 1)
    valid = m[None, :] <= k[:, None]
    values = -M[x[:, None], np.minimum(x[:, None] + m[None, :], n - 1)]
    centre = (k[:, None] + 1) / 2.0
    ra = np.where(valid, m[None, :] - centre, 0.0)  # the offsets' ranks are the offsets
    rb = np.where(valid, _masked_ranks(values, valid) - centre, 0.0)
    denom = np.sqrt((ra * ra).sum(axis=1) * (rb * rb).sum(axis=1))
    scores = np.divide((ra * rb).sum(axis=1), denom, out=np.full(len(x), np.nan), where=denom > 0)
    finite = scores[np.isfinite(scores)]
    return float(finite.mean()) if len(finite) else float("nan")


def position_properties(
    E: Any, *, W: Optional[Any] = None, max_offset: Optional[int] = None
) -> PositionProperties:
    """Monotonicity, translation invariance and symmetry of a table (Wang et
    al., "On Position Embeddings in BERT", ICLR 2021).

    The proximity of positions ``x`` and ``y`` is ``phi(x, y) = E[x] W
    E[y]^T``: the dot product by default, or through ``W`` (say ``W_Q
    W_K^T`` of an attention head, for the position-position term of its
    logits).  The paper defines the properties: *monotonicity*, ``m > n <=>
    phi(x, x + m) < phi(x, x + n)``; *translation invariance*, ``phi(x1, x1 +
    m) = phi(x2, x2 + m)``; *symmetry*, ``phi(x, y) = phi(y, x)``.  Each is
    measured here as a number that is 1 exactly when the property holds (see
    :class:`PositionProperties`).

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
        The table, row ``p`` for position ``p``: at least 5 and at most
        :data:`MAX_POSITIONS` rows.
    W : array_like of shape (dim, dim), optional
        The bilinear form; the identity (the dot product) by default.
    max_offset : int, optional
        The largest distance ``|m|`` taken (the paper looks at local
        monotonicity); ``n_positions - 1`` by default.

    Returns
    -------
    PositionProperties

    Raises
    ------
    ValueError
        A table with fewer than 5 or more than :data:`MAX_POSITIONS` rows, or
        not finite; ``W`` not of shape ``(dim, dim)`` or not finite;
        ``max_offset`` below 3 (the least a rank correlation over offsets
        needs).

    Examples
    --------
    >>> from posenc.probe import position_properties
    >>> props = position_properties(posenc.sinusoid(64, 128, dtype="float64"), max_offset=8)
    >>> round(float(props.monotonicity_forward), 6)  # E[x] . E[x + m] falls as m grows
    1.0
    >>> round(float(props.translation_invariance), 6), round(float(props.symmetry), 6)
    (1.0, 1.0)
    >>> noise = np.random.default_rng(0).normal(size=(64, 128))
    >>> bool(position_properties(noise).translation_invariance < 0.5)
    True
    """
    table = _table(E, "E", min_rows=5, max_rows=MAX_POSITIONS)
    n = table.shape[0]
    if max_offset is None:
        max_offset = n - 1
    max_offset = v.integer(max_offset, "max_offset", minimum=3)
    max_offset = min(max_offset, n - 1)
    M = bilinear_products(table, W)
    forward = _monotonicity(M, max_offset)
    backward = _monotonicity(M[::-1, ::-1], max_offset)  # row x: phi(n-1-x, n-1-x - m)

    # one group per signed offset m: the diagonals of M above and below
    offsets = np.array([m for m in range(-max_offset, max_offset + 1) if m != 0])
    diagonals = [np.diagonal(M, m) for m in offsets]
    all_values = np.concatenate(diagonals)
    total = float(((all_values - all_values.mean()) ** 2).sum())
    within = float(sum(((g - g.mean()) ** 2).sum() for g in diagonals))
    invariance = 1.0 - within / total if total > 0 else 1.0

    norm = float((M * M).sum())
    symmetry = float((M * M.T).sum()) / norm if norm > 0 else 1.0
    return PositionProperties(
        forward,
        backward,
        invariance,
        symmetry,
        int(max_offset),
        offsets,
        np.array([g.mean() for g in diagonals]),
        np.array([g.std() for g in diagonals]),
    )


@dataclass(frozen=True)
class ToeplitzFit:
    """Result of :func:`toeplitz_fit`.

    How much of a square matrix is a function of ``i - j`` alone.

    Attributes
    ----------
    r2 : float
        ``1 - ||M - T||^2 / ||M - mean(M)||^2``, the coefficient of
        determination of the best Toeplitz matrix ``T`` (least squares: each
        diagonal replaced by its mean); 1 for a Toeplitz matrix.
    offsets : ndarray of int
        ``j - i`` from ``-(n - 1)`` to ``n - 1``.
    diagonal_means : ndarray
        The mean of each diagonal ``j - i = offset``: ``T``'s values.
    toeplitz : ndarray of shape (n, n)
        ``T``.
    """

    r2: float
    offsets: np.ndarray = field(repr=False)
    diagonal_means: np.ndarray = field(repr=False)
    toeplitz: np.ndarray = field(repr=False)

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (the fitted matrix left out)."""
        return _plain(self, ("r2", "offsets", "diagonal_means"))

    def summary(self, what: str = "E @ E.T") -> str:
        """One sentence: the share of the matrix (`what`) that is Toeplitz."""
        return f"Wennberg & Henter 2021: Toeplitz share of {what}, R² {self.r2:.3f}."

    def plot(self, M: Any, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """The matrix `M` that was fitted, its Toeplitz fit and the residual,
        side by side.  Returns the figure without `path`, else writes it."""
        from ._plots import _figure

        def draw(fig: Any) -> None:
            m = np.asarray(M, dtype=np.float64)
            if m.shape != self.toeplitz.shape:
                raise ValueError(
                    f"M must have the fitted shape {self.toeplitz.shape}, got {m.shape}"
                )
            lim = _colour_limit(m)
            for k, (data, title) in enumerate(
                ((m, "matrix"), (self.toeplitz, "Toeplitz fit"), (m - self.toeplitz, "residual"))
            ):
                ax = fig.add_subplot(1, 3, k + 1)
                im = ax.imshow(data, cmap="RdBu_r", vmin=-lim, vmax=lim)
                ax.set_title(title if k else f"{title} (Toeplitz R² {self.r2:.3f})")
                ax.set_xlabel("j")
                ax.set_ylabel("i")
            fig.suptitle(
                f"colour range ±{lim:.3g}: the 99th percentile of |off-diagonal| "
                "(larger entries, such as the diagonal's, saturate)",
                fontsize=9,
            )
            fig.colorbar(im, ax=fig.axes, shrink=0.8)

        return _figure(path, dpi, (12, 4), draw)


#: The percentile of the off-diagonal magnitudes that sets a matrix plot's
#: colour range.
COLOUR_PERCENTILE = 99.0


def _colour_limit(m: np.ndarray) -> float:
    """The colour range ``±lim`` of a plot of the square `m`: the
    :data:`COLOUR_PERCENTILE` of its off-diagonal magnitudes, so that a
    diagonal far larger than the rest (a learned table's Gram matrix) does not
    leave the rest blank; the largest magnitude where that is 0."""
    n = m.shape[0]
    off = np.abs(m[~np.eye(n, dtype=bool)])
    lim = float(np.percentile(off, COLOUR_PERCENTILE)) if off.size else 0.0
    return lim or float(np.abs(m).max()) or 1.0


def toeplitz_fit(M: Any) -> ToeplitzFit:
    """How Toeplitz a square matrix is (Wennberg & Henter, "The Case for
    Translation-Invariant Self-Attention in Transformer-Based Language
    Models", ACL 2021): the share of it that is a function of ``i - j``
    alone.

    Parameters
    ----------
    M : array_like of shape (n, n)
        A Gram matrix ``E @ E.T`` of a position table, or a head's
        position-position attention logits, ``n >= 2``.

    Returns
    -------
    ToeplitzFit
        ``r2`` (1 for a Toeplitz matrix), the diagonal means and the fit.

    Raises
    ------
    ValueError
        `M` not square, smaller than 2 x 2, or not finite.

    Examples
    --------
    >>> from posenc.probe import toeplitz_fit
    >>> E = posenc.sinusoid(32, 16, dtype="float64")
    >>> round(float(toeplitz_fit(E @ E.T).r2), 9)  # sin/cos: E[i] . E[j] depends on i - j alone
    1.0
    >>> noise = np.random.default_rng(0).normal(size=(32, 16))
    >>> bool(toeplitz_fit(noise @ noise.T).r2 < 0.5)
    True
    """
    m = _table(M, "M", min_rows=2)
    n = m.shape[0]
    if m.shape != (n, n):
        raise ValueError(f"M must be a square matrix, got shape {m.shape}")
    offsets, means = _diagonal_means(m)
    i = np.arange(n)
    fit = means[(i[None, :] - i[:, None]) + (n - 1)]
    total = float(((m - m.mean()) ** 2).sum())
    residual = float(((m - fit) ** 2).sum())
    r2 = 1.0 - residual / total if total > 0 else 1.0
    return ToeplitzFit(r2, offsets, means, fit)
