"""The probes of Wang & Chen (2020) and the geometry of a table, with their results.

:func:`absolute_position_regression` and :func:`relative_order_classification`
are the two linear probes, fitted with scikit-learn as published;
:func:`cosine_similarity` and :func:`informativeness` describe the table;
:func:`skip_positions` and :func:`rope_long_term_decay` come from the same
line of work.  A table is read and checked by :mod:`._tables`, the optional
dependencies imported by :mod:`._optional`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .. import _validate as v
from .._typing import ArrayLike, NDArray
from ._common import FOLDS as _FOLDS
from ._common import check_folds, fold_slices, format_floats, train_mask
from ._fits import AbsolutePositionResult as AbsolutePositionResult
from ._fits import absolute_position_fit
from ._optional import one_thread as _one_thread
from ._optional import require as _require
from ._tables import _table
from .protocol import (
    check_regressor,
    check_split,
    heldout_pairs,
    make_classifier,
)

# ---------------------------------------------------------------- argument checks


#: The most positions (rows) :func:`cosine_similarity` and :func:`report` take.
#: The cosine map is an ``n x n`` float64 matrix: 512 MiB at 8192 rows, 2 GiB at
#: 16384.  The paper probes 512 positions, and the learned tables of common
#: checkpoints have at most a few thousand (GPT-2 1024, BigBird 4096, Longformer
#: 4098); probe a slice (``E[:8192]``) or every k-th row (``E[::k]``) of a taller
#: one, such as LED's 16386 rows.
MAX_POSITIONS: int = 8192


# ---------------------------------------------------------------- linear probes


@dataclass(frozen=True, repr=False)
class RelativeOrderResult:
    """Result of :func:`relative_order_classification`.

    Attributes
    ----------
    error_rate : float
        Share of misclassified pairs, averaged over the folds (0.05 = 5%).
    fold_errors : ndarray of shape (folds,)
        The error rate of each fold.
    pairs : ndarray of shape (n_pairs, 2)
        The ``(i, j)`` index pairs drawn, in fold order; the label is ``j > i``.
    seed : int
        The seed of the draw.
    split, regressor : str
        The protocol (:mod:`posenc.probe.protocol`); with ``split="heldout"``
        `pairs` are the test pairs, fold after fold.
    """

    error_rate: float
    fold_errors: NDArray[np.float64]
    pairs: NDArray[np.int64]
    seed: int
    split: str = "paper"
    regressor: str = "linear"

    def __repr__(self) -> str:
        return (
            f"RelativeOrderResult(error_rate={self.error_rate:.4f}, "
            f"fold_errors={format_floats(self.fold_errors, '.4f')}, pairs={len(self.pairs)}, "
            f"seed={self.seed})"
        )


def absolute_position_regression(
    E: ArrayLike,
    *,
    folds: int = _FOLDS,
    seed: int = 0,
    split: str = "paper",
    regressor: str = "linear",
) -> AbsolutePositionResult:
    """Can a linear map read the absolute position back from its embedding?

    Wang & Chen's first probe, with their protocol: the rows of `E` are
    shuffled by a seeded permutation, the shuffled rows are cut into `folds`
    contiguous folds, and for each fold an ordinary least-squares regression
    with an intercept (scikit-learn's ``LinearRegression``) is fitted on the
    other folds to map ``E[p]`` to ``p``.  Its predictions on the held-out
    fold are rounded to the nearest integer (halves to even) and scored by
    the mean of ``|round(pred) - p|``; the score is the mean over folds.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
        The position-embedding table, row ``p`` for position ``p``; any real
        dtype (fitted in float64), torch tensors included.
    folds : int
        Number of cross-validation folds (at least 2, at most ``n_positions``).
    seed : int
        Seed of the shuffle (``numpy.random.default_rng(seed).permutation``).
    split : {"paper", "heldout"}
        ``"heldout"``: contiguous blocks of positions as folds, unshuffled
        (:mod:`posenc.probe.protocol`).
    regressor : {"linear", "ridge", "mlp", "knn"}
        The probe; ``"linear"`` is the paper's.

    Returns
    -------
    AbsolutePositionResult
        ``mae``, ``fold_mae``, ``predictions``, ``seed``.

    Notes
    -----
    With ``n_positions <= dim`` the training folds are underdetermined and
    least squares returns the minimum-norm solution, as in the paper.  A
    random Gaussian 512 x 768 table scores 176.6 +- 8.4 (seeds 0-9); the
    512 x 768 sinusoid scores 0.

    Examples
    --------
    >>> from posenc.probe import absolute_position_regression
    >>> E = posenc.sinusoid(64, 32, dtype="float64")
    >>> result = absolute_position_regression(E)  # 5 folds of the shuffled rows
    >>> float(result.mae)  # the sinusoid's positions are read back exactly
    0.0
    >>> noise = np.random.default_rng(0).normal(size=(64, 32))
    >>> absolute_position_regression(noise).mae > 10  # a table without positions
    True
    """
    table = _table(E)
    folds = check_folds(folds, table.shape[0], "positions (rows of E)")
    seed = v.integer(seed, "seed", minimum=0)
    split, regressor = check_split(split), check_regressor(regressor)
    return absolute_position_fit(table, folds, seed, True, split, regressor)[0]


def _draw_pairs(n: int, count: int, seed: int) -> NDArray[np.int64]:
    """`count` distinct cells of the n x n grid, uniformly, as (i, j) rows."""
    cells = np.random.default_rng(seed).choice(n * n, size=count, replace=False)
    return np.stack(np.divmod(cells, n), axis=1)


def relative_order_classification(
    E: ArrayLike,
    *,
    pairs: Optional[int] = None,
    folds: int = _FOLDS,
    seed: int = 0,
    split: str = "paper",
    regressor: str = "linear",
) -> RelativeOrderResult:
    """Can a linear classifier tell which of two positions comes first?

    Wang & Chen's second probe, with their protocol: `pairs` distinct
    ordered index pairs ``(i, j)`` are drawn uniformly from the ``n x n``
    grid (cells ``i == j`` included, labelled "not after"), each pair is the
    concatenation ``[E[i], E[j]]`` labelled ``j > i``, and a logistic
    regression with scikit-learn's defaults (L2 penalty, ``C=1``, an
    intercept, lbfgs; up to 1000 iterations) is cross-validated over `folds`
    contiguous folds of the drawn pairs.  The score is the error rate,
    averaged over folds.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
        The position-embedding table; any real dtype (fitted in float64).
    pairs : int, optional
        Number of pairs to draw; ``n_positions`` by default (512 pairs for a
        512-position table, as in the paper).  At most ``n_positions ** 2``.
    folds : int
        Number of cross-validation folds.
    seed : int
        Seed of the draw (``numpy.random.default_rng(seed).choice`` of grid
        cells without replacement).
    split : {"paper", "heldout"}
        ``"heldout"``: test pairs of positions no training pair has
        (:mod:`posenc.probe.protocol`).
    regressor : {"linear", "ridge", "mlp", "knn"}
        The classifier; ``"linear"`` (logistic regression) is the paper's.

    Returns
    -------
    RelativeOrderResult
        ``error_rate``, ``fold_errors``, ``pairs``, ``seed``.

    Notes
    -----
    The figure varies from one draw of pairs to the next by about a point:
    the 512 x 768 sinusoid gives 5.9% +- 1.4% over seeds 0-9 (the paper's
    5.08% is one draw).  Chance is not 50%: the test pairs share their
    positions with training pairs, and a random 512 x 768 table scores
    37.4% +- 3.1% (seeds 0-9); :func:`report` prints that noise beside it.

    Examples
    --------
    >>> from posenc.probe import relative_order_classification
    >>> result = relative_order_classification(posenc.sinusoid(64, 32, dtype="float64"))
    >>> result.pairs.shape  # 64 pairs (i, j) drawn, as many as positions
    (64, 2)
    >>> bool(result.error_rate < 0.25)  # a random table: about 0.37
    True
    """
    table = _table(E)
    n = table.shape[0]
    if pairs is None:
        count = n
    else:
        count = v.integer(pairs, "pairs", minimum=2, maximum=n * n)
    folds = check_folds(folds, count, "pairs")
    seed = v.integer(seed, "seed", minimum=0)
    split, regressor = check_split(split), check_regressor(regressor)
    _require("sklearn.linear_model", "relative_order_classification")

    def features(index: NDArray[np.int64]) -> Tuple[NDArray[np.float64], NDArray[np.bool_]]:
        X = np.concatenate([table[index[:, 0]], table[index[:, 1]]], axis=1)
        return X, index[:, 1] > index[:, 0]

    if split == "paper":
        index = _draw_pairs(n, count, seed)
        X, y = features(index)
        cut = [(train_mask(count, test), test) for test in fold_slices(count, folds)]
        sets = [(X[train], y[train], X[test], y[test]) for train, test in cut]
    else:
        if folds > n // 2:
            raise ValueError(
                f"folds must be at most half the positions ({n // 2}) with split='heldout', "
                f"got {folds}"
            )
        drawn = heldout_pairs(n, count, folds, seed)
        index = np.concatenate([test for _, test in drawn])
        sets = [(*features(train), *features(test)) for train, test in drawn]
    for k, (_, y_train, _, _) in enumerate(sets):
        if y_train.all() or not y_train.any():
            raise ValueError(
                f"pairs: the training pairs of fold {k} all have the same order; "
                "use more pairs (or a table with more positions)"
            )
    fold_errors = np.empty(folds)
    with _one_thread():
        for k, (X_train, y_train, X_test, y_test) in enumerate(sets):
            model = make_classifier(regressor, seed).fit(X_train, y_train)
            fold_errors[k] = np.mean(model.predict(X_test) != y_test)
    return RelativeOrderResult(
        error_rate=float(np.mean(fold_errors)),
        fold_errors=fold_errors,
        pairs=index,
        seed=seed,
        split=split,
        regressor=regressor,
    )


# ---------------------------------------------------------------- geometry of the table


def cosine_similarity(E: ArrayLike) -> NDArray[np.float64]:
    """Cosine similarity between every two positions.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
        At most :data:`MAX_POSITIONS` (8192) rows: the result is ``n x n``
        float64, 512 MiB at 8192.  Slice a taller table (``E[:8192]``,
        ``E[::k]``).

    Returns
    -------
    ndarray of shape (n_positions, n_positions), float64
        ``S[i, j] = <E[i], E[j]> / (|E[i]| |E[j]|)``; a row of zeros has
        cosine 0 with everything (as scikit-learn's ``cosine_similarity``).

    Raises
    ------
    ValueError
        More than :data:`MAX_POSITIONS` rows (before any memory is taken).

    Examples
    --------
    >>> from posenc.probe import cosine_similarity
    >>> S = cosine_similarity(posenc.sinusoid(64, 32, dtype="float64"))
    >>> S.shape, float(S[5, 5])
    ((64, 64), 1.0)
    >>> bool(S[0, 1] > S[0, 2] > S[0, 3])  # near positions are more alike
    True
    """
    table = _table(E, min_rows=1, max_rows=MAX_POSITIONS)
    norms = np.linalg.norm(table, axis=1)
    norms[norms == 0] = 1.0
    unit = table / norms[:, None]
    return unit @ unit.T


@dataclass(frozen=True, repr=False)
class Informativeness:
    """Result of :func:`informativeness`.

    Attributes
    ----------
    singular_values : ndarray
        Singular values of the (centred, if asked) table, largest first.
    cumulative_share : ndarray
        ``cumulative_share[k-1]``: the share of ``sum(s**2)`` held by the top
        ``k`` components; non-decreasing, the last value exactly 1.
    centered : bool
        Whether the column means were removed first.
    """

    singular_values: NDArray[np.float64]
    cumulative_share: NDArray[np.float64]
    centered: bool

    def rank_for(self, share: float) -> int:
        """Smallest number of components ``k`` whose share reaches `share`.

        Parameters
        ----------
        share : float in (0, 1]
        """
        share = v.real(share, "share", positive=True)
        if share > 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        return int(np.searchsorted(self.cumulative_share, share, side="left")) + 1

    def __repr__(self) -> str:
        return (
            f"Informativeness(rank_for(0.9)={self.rank_for(0.9)}, "
            f"rank_for(0.99)={self.rank_for(0.99)}, of {len(self.singular_values)} components, "
            f"centered={self.centered})"
        )


def informativeness(E: ArrayLike, *, center: bool = False) -> Informativeness:
    """How many directions carry the table: its spectrum, as a cumulative share.

    Wang & Chen's informativeness analysis: the singular values ``s`` of `E`,
    and the share of the eigenvalues ``s**2`` (of ``E^T E``) held by the top
    ``k`` components, for every ``k``.  A table that a few directions explain
    (the sinusoid, GPT-2) reaches 90% at small ``k``; BERT's needs many.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
    center : bool
        Remove the column means first (principal components) instead of
        taking the raw table (the paper's analysis).

    Returns
    -------
    Informativeness
        ``singular_values``, ``cumulative_share``, ``centered``, and
        ``rank_for(share)``.

    Examples
    --------
    >>> from posenc.probe import informativeness
    >>> info = informativeness(posenc.sinusoid(64, 32, dtype="float64"))
    >>> info.singular_values.shape
    (32,)
    >>> info.rank_for(0.9)  # the directions that hold 90% of the spectrum
    7
    >>> float(info.cumulative_share[-1])
    1.0
    """
    table = _table(E, min_rows=1)
    center = v.flag(center, "center")
    if center:
        table = table - table.mean(axis=0)
    with _one_thread():  # as the probes: threads only wait on a matrix this size
        s = np.linalg.svd(table, compute_uv=False).astype(np.float64, copy=False)
    energy = np.cumsum(s**2)
    if energy[-1] == 0:
        raise ValueError("E is all zeros" + (" after centring" if center else ""))
    # Dividing by the last partial sum (not a separately rounded total) ends
    # the curve at exactly 1.
    return Informativeness(s, energy / energy[-1], center)


def skip_positions(n: int, k: int) -> NDArray[np.int64]:
    """Positions ``0, k, 2k, ..., (n-1)k`` of the skip-position attack.

    Wang & Chen feed a model ``z_i = WE(x_i) + PE(i*k)`` to ask whether it
    uses absolute positions (robust to the skip) or only local ones.  Use the
    result as the positions of ``posenc.sinusoid(skip_positions(n, k), dim)``
    or to index a learned table (``E[skip_positions(n, k)]``, which needs
    ``(n-1)*k < len(E)``).

    Parameters
    ----------
    n : int
        Number of positions (>= 0).
    k : int
        The skip (>= 1; 1 gives ``0..n-1``).

    Returns
    -------
    ndarray of shape (n,), int64

    Examples
    --------
    >>> from posenc.probe import skip_positions
    >>> skip_positions(5, 3).tolist()
    [0, 3, 6, 9, 12]
    >>> posenc.sinusoid(skip_positions(5, 3), 8).shape  # the table at those positions
    (5, 8)
    """
    largest = int(np.iinfo(np.int64).max)
    n = v.integer(n, "n", minimum=0, maximum=largest)
    k = v.integer(k, "k", minimum=1, maximum=largest)
    if n > 1 and (n - 1) * k > largest:
        raise ValueError(f"skip_positions: (n-1)*k = {(n - 1) * k} overflows int64")
    return np.arange(n, dtype=np.int64) * k


def rope_long_term_decay(
    dim: int, max_distance: int, *, base: float = 10000.0
) -> NDArray[np.float64]:
    """RoFormer's upper bound on the rotary inner product against distance.

    Su et al. (RoFormer, section 3.4.3) write the rotary score of a query and
    a key ``m`` positions apart as ``sum_i h_i e^{i m theta_i}`` over the
    ``dim/2`` pairs, ``theta_i = base**(-2i/dim)``; by Abel summation its
    modulus is at most ``max_i |h_{i+1} - h_i| * sum_j |S_j|`` with the
    partial sums ``S_j = sum_{i<j} e^{i m theta_i}``.  Their Figure 2 plots
    the relative upper bound ``(1/(dim/2)) * sum_{j=1}^{dim/2} |S_j|``,
    which decays as ``m`` grows; this returns it.

    Parameters
    ----------
    dim : int
        Rotary dimension, a positive even number.
    max_distance : int
        Largest relative distance ``m`` (>= 0).
    base : float
        The wavelength base.

    Returns
    -------
    ndarray of shape (max_distance + 1,), float64
        The bound at distances ``0, 1, ..., max_distance``; at distance 0 it
        is ``(dim/2 + 1) / 2``.

    Examples
    --------
    >>> from posenc.probe import rope_long_term_decay
    >>> bound = rope_long_term_decay(128, 4096)
    >>> float(bound[0])  # (dim/2 + 1) / 2 at distance 0
    32.5
    >>> bool(bound[1000] < bound[10] < bound[0])  # it decays with the distance
    True
    """
    dim = v.even_dim(dim, "dim")
    max_distance = v.integer(max_distance, "max_distance", minimum=0)
    base = v.real(base, "base", positive=True)
    half = dim // 2
    theta = base ** (-np.arange(half, dtype=np.float64) * 2.0 / dim)
    out = np.empty(max_distance + 1)
    rows = max(1, (1 << 19) // half)  # bounds the complex temporaries at ~8 MB
    for start in range(0, max_distance + 1, rows):
        m = np.arange(start, min(start + rows, max_distance + 1), dtype=np.float64)
        partial = np.cumsum(np.exp(1j * (m[:, None] * theta)), axis=1)
        out[start : start + len(m)] = np.abs(partial).mean(axis=1)
    return out
