"""What has a position embedding learned?  The probes of Wang & Chen (2020).

Wang & Chen, "What Do Position Embeddings Learn?  An Empirical Study of
Pre-Trained Language Model Positional Encoding" (EMNLP 2020), ask of a
position-embedding matrix ``E`` of shape ``(n_positions, dim)``:

- can a linear map read the absolute position back from ``E[p]``?
  (:func:`absolute_position_regression`, mean absolute error in positions);
- can a linear classifier tell the order of two positions from
  ``[E[i], E[j]]``?  (:func:`relative_order_classification`, error rate);
- how alike are the positions (:func:`cosine_similarity`), and how many
  directions carry the table (:func:`informativeness`)?

:func:`report` runs all of them over several seeds and sets the figures
beside the published ones (:data:`PUBLISHED`); :func:`load_position_embeddings`
finds the table in a checkpoint file or a model.  Two helpers come from the
same line of work: :func:`skip_positions` (the skip-position attack) and
:func:`rope_long_term_decay` (RoFormer's bound on the rotary inner product).

The probes follow the published protocol exactly, so that a figure computed
here can be set beside the paper's: the linear models are scikit-learn's
(``LinearRegression``; ``LogisticRegression`` with its defaults), fitted in
float64.  scikit-learn and matplotlib are needed only by the probes and the
plot, and are imported when those run: ``pip install "posenc[probe]"``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .. import _validate as v

__all__ = [
    "PUBLISHED",
    "AbsolutePositionResult",
    "Informativeness",
    "ProbeReport",
    "PublishedRow",
    "RelativeOrderResult",
    "absolute_position_regression",
    "cosine_similarity",
    "informativeness",
    "load_position_embeddings",
    "relative_order_classification",
    "report",
    "rope_long_term_decay",
    "skip_positions",
]


@dataclass(frozen=True)
class PublishedRow:
    """One published row of Wang & Chen's linear probes (512 positions x 768 dims)."""

    embedding: str
    mae: float
    error_rate: float


#: The published figures: absolute-position MAE (linear regression) and
#: relative-order error rate (logistic regression), 512 positions.
PUBLISHED = (
    PublishedRow("BERT", 34.14, 0.1972),
    PublishedRow("RoBERTa", 6.06, 0.0723),
    PublishedRow("GPT-2", 1.03, 0.0156),
    PublishedRow("sinusoid", 0.0, 0.0508),
)

_CITATION = "Wang & Chen 2020"


# ---------------------------------------------------------------- optional dependencies


def _require(module, purpose):
    """Import `module` (part of the ``probe`` extra) or say how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0].replace("sklearn", "scikit-learn")
        raise ImportError(
            f"{purpose} needs {package}, which comes with posenc's 'probe' extra: "
            'pip install "posenc[probe]"'
        ) from exc


def _one_thread():
    """BLAS and OpenMP on one thread while the probes fit.

    The problems are small (a few hundred rows of ``2 * dim`` features):
    threaded BLAS on them spends its time waking and waiting for threads, up
    to a hundred times slower on a busy machine, and its reduction order
    changes with the thread count.  One thread is faster and gives the same
    figures on every machine.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=1)


# ---------------------------------------------------------------- argument checks


def _to_numpy(value):
    """`value` as a NumPy array; torch tensors (with grad, bfloat16) included."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach"):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()  # NumPy has no bfloat16; float32 holds it exactly
        return tensor.numpy()
    return np.asarray(value)


def _table(E, name="E", *, min_rows=2):
    """A finite 2-D real table as C-contiguous float64."""
    try:
        arr = _to_numpy(E)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name} must be a 2-D array of real numbers: {exc}") from exc
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers, not dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (n_positions, dim) array, got shape {arr.shape}")
    if arr.shape[0] < min_rows:
        raise ValueError(
            f"{name} must have at least {min_rows} rows (positions), got {arr.shape[0]}"
        )
    if arr.shape[1] < 1:
        raise ValueError(f"{name} must have at least one column, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite (found nan or inf)")
    return arr


def _folds(folds, n, what):
    folds = v.integer(folds, "folds", minimum=2)
    if folds > n:
        raise ValueError(f"folds must be <= the number of {what} ({n}), got {folds}")
    return folds


def _fold_slices(n, folds):
    """Contiguous folds as scikit-learn's ``KFold(folds)`` (no shuffle) cuts
    them: the first ``n % folds`` folds one longer."""
    sizes = np.full(folds, n // folds)
    sizes[: n % folds] += 1
    stops = np.cumsum(sizes)
    return [slice(int(b - s), int(b)) for s, b in zip(sizes, stops)]


def _train_mask(n, test):
    mask = np.ones(n, dtype=bool)
    mask[test] = False
    return mask


def _short(values, fmt):
    return "[" + ", ".join(format(float(x), fmt) for x in values) + "]"


# ---------------------------------------------------------------- linear probes


@dataclass(frozen=True, repr=False)
class AbsolutePositionResult:
    """Result of :func:`absolute_position_regression`.

    Attributes
    ----------
    mae : float
        Mean absolute error in positions, averaged over the folds.
    fold_mae : ndarray of shape (folds,)
        The mean absolute error of each fold.
    predictions : ndarray of shape (n_positions,)
        ``predictions[p]``: the rounded position predicted for row ``p`` by
        the model that did not see it (so ``|predictions - arange(n)|`` are the
        scored errors).
    seed : int
        The seed of the shuffle.
    """

    mae: float
    fold_mae: np.ndarray
    predictions: np.ndarray
    seed: int

    def __repr__(self):
        return (
            f"AbsolutePositionResult(mae={self.mae:.4g}, "
            f"fold_mae={_short(self.fold_mae, '.4g')}, seed={self.seed})"
        )


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
    """

    error_rate: float
    fold_errors: np.ndarray
    pairs: np.ndarray
    seed: int

    def __repr__(self):
        return (
            f"RelativeOrderResult(error_rate={self.error_rate:.4f}, "
            f"fold_errors={_short(self.fold_errors, '.4f')}, "
            f"pairs={len(self.pairs)}, seed={self.seed})"
        )


def absolute_position_regression(E, *, folds=5, seed=0):
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

    Returns
    -------
    AbsolutePositionResult
        ``mae``, ``fold_mae``, ``predictions``, ``seed``.

    Notes
    -----
    With ``n_positions <= dim`` the training folds are underdetermined and
    least squares returns the minimum-norm solution, as in the paper.  A
    model that guesses scores about ``n/3`` (175 for a random Gaussian
    512 x 768 table); the 512 x 768 sinusoid scores 0.
    """
    table = _table(E)
    n = table.shape[0]
    folds = _folds(folds, n, "positions (rows of E)")
    seed = v.integer(seed, "seed", minimum=0)
    linear_model = _require("sklearn.linear_model", "absolute_position_regression")

    order = np.random.default_rng(seed).permutation(n)
    X, y = table[order], order.astype(np.float64)
    predictions = np.empty(n)
    fold_mae = np.empty(folds)
    with _one_thread():
        for k, test in enumerate(_fold_slices(n, folds)):
            train = _train_mask(n, test)
            model = linear_model.LinearRegression().fit(X[train], y[train])
            rounded = np.rint(model.predict(X[test]))
            predictions[order[test]] = rounded
            fold_mae[k] = np.mean(np.abs(rounded - y[test]))
    return AbsolutePositionResult(
        mae=float(np.mean(fold_mae)), fold_mae=fold_mae, predictions=predictions, seed=seed
    )


def _draw_pairs(n, count, seed):
    """`count` distinct cells of the n x n grid, uniformly, as (i, j) rows."""
    cells = np.random.default_rng(seed).choice(n * n, size=count, replace=False)
    return np.stack(np.divmod(cells, n), axis=1)


def relative_order_classification(E, *, pairs=None, folds=5, seed=0):
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

    Returns
    -------
    RelativeOrderResult
        ``error_rate``, ``fold_errors``, ``pairs``, ``seed``.

    Notes
    -----
    The figure varies from one draw of pairs to the next by about a point:
    the 512 x 768 sinusoid gives 5.9% +- 1.4% over seeds 0-9 (the paper's
    5.08% is one draw).  Chance is about 50%.
    """
    table = _table(E)
    n = table.shape[0]
    if pairs is None:
        count = n
    else:
        count = v.integer(pairs, "pairs", minimum=2, maximum=n * n)
    folds = _folds(folds, count, "pairs")
    seed = v.integer(seed, "seed", minimum=0)
    linear_model = _require("sklearn.linear_model", "relative_order_classification")

    index = _draw_pairs(n, count, seed)
    X = np.concatenate([table[index[:, 0]], table[index[:, 1]]], axis=1)
    y = index[:, 1] > index[:, 0]
    splits = [(_train_mask(count, test), test) for test in _fold_slices(count, folds)]
    for k, (train, _) in enumerate(splits):
        if y[train].all() or not y[train].any():
            raise ValueError(
                f"pairs: the training pairs of fold {k} all have the same order; "
                "use more pairs (or a table with more positions)"
            )
    fold_errors = np.empty(folds)
    with _one_thread():
        for k, (train, test) in enumerate(splits):
            model = linear_model.LogisticRegression(max_iter=1000).fit(X[train], y[train])
            fold_errors[k] = np.mean(model.predict(X[test]) != y[test])
    return RelativeOrderResult(
        error_rate=float(np.mean(fold_errors)), fold_errors=fold_errors, pairs=index, seed=seed
    )


# ---------------------------------------------------------------- geometry of the table


def cosine_similarity(E):
    """Cosine similarity between every two positions.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)

    Returns
    -------
    ndarray of shape (n_positions, n_positions), float64
        ``S[i, j] = <E[i], E[j]> / (|E[i]| |E[j]|)``; a row of zeros has
        cosine 0 with everything (as scikit-learn's ``cosine_similarity``).
    """
    table = _table(E, min_rows=1)
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

    singular_values: np.ndarray
    cumulative_share: np.ndarray
    centered: bool

    def rank_for(self, share):
        """Smallest number of components ``k`` whose share reaches `share`.

        Parameters
        ----------
        share : float in (0, 1]
        """
        share = v.real(share, "share", positive=True)
        if share > 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        return int(np.searchsorted(self.cumulative_share, share, side="left")) + 1

    def __repr__(self):
        return (
            f"Informativeness(rank_for(0.9)={self.rank_for(0.9)}, "
            f"rank_for(0.99)={self.rank_for(0.99)}, of {len(self.singular_values)} components, "
            f"centered={self.centered})"
        )


def informativeness(E, *, center=False):
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
    """
    table = _table(E, min_rows=1)
    center = v.flag(center, "center")
    if center:
        table = table - table.mean(axis=0)
    s = np.linalg.svd(table, compute_uv=False)
    energy = np.cumsum(s**2)
    if energy[-1] == 0:
        raise ValueError("E is all zeros" + (" after centring" if center else ""))
    # Dividing by the last partial sum (not a separately rounded total) ends
    # the curve at exactly 1.
    return Informativeness(s, energy / energy[-1], center)


def skip_positions(n, k):
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
    """
    largest = int(np.iinfo(np.int64).max)
    n = v.integer(n, "n", minimum=0, maximum=largest)
    k = v.integer(k, "k", minimum=1, maximum=largest)
    if n > 1 and (n - 1) * k > largest:
        raise ValueError(f"skip_positions: (n-1)*k = {(n - 1) * k} overflows int64")
    return np.arange(n, dtype=np.int64) * k


def rope_long_term_decay(dim, max_distance, *, base=10000.0):
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


# ---------------------------------------------------------------- the report


class _Progress:
    """A one-line progress bar on stderr, redrawn with carriage returns."""

    def __init__(self, label, total, enabled):
        self.label, self.total, self.enabled = label, total, enabled
        self.stream = sys.stderr
        self.draw(0)

    def draw(self, done):
        if not self.enabled:
            return
        width = 24
        filled = width * done // self.total
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r{self.label}: [{bar}] seed {done}/{self.total}")
        self.stream.flush()

    def close(self):
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _mean_std(values):
    values = np.asarray(values, dtype=np.float64)
    return float(values.mean()), float(values.std())


@dataclass(frozen=True, repr=False)
class ProbeReport:
    """Every analysis of one table: the result of :func:`report`.

    Attributes
    ----------
    name : str
        What was probed.
    shape : tuple
        ``(n_positions, dim)``.
    absolute : tuple of AbsolutePositionResult
        One per seed.
    order : tuple of RelativeOrderResult
        One per seed.
    cosine : ndarray of shape (n_positions, n_positions)
        :func:`cosine_similarity` of the table.
    informativeness : Informativeness
        :func:`informativeness` of the table (uncentred, as in the paper).
    mae, mae_std, error_rate, error_rate_std : float
        Mean and standard deviation (``ddof=0``) over the seeds.
    """

    name: str
    shape: tuple
    absolute: tuple
    order: tuple
    cosine: np.ndarray
    informativeness: Informativeness
    mae: float = field(init=False)
    mae_std: float = field(init=False)
    error_rate: float = field(init=False)
    error_rate_std: float = field(init=False)

    def __post_init__(self):
        mae, mae_std = _mean_std([r.mae for r in self.absolute])
        err, err_std = _mean_std([r.error_rate for r in self.order])
        object.__setattr__(self, "mae", mae)
        object.__setattr__(self, "mae_std", mae_std)
        object.__setattr__(self, "error_rate", err)
        object.__setattr__(self, "error_rate_std", err_std)

    @property
    def seeds(self):
        """The seeds the probes ran with."""
        return tuple(r.seed for r in self.absolute)

    def _headline(self):
        n, d = self.shape
        return (
            f"absolute MAE {self.mae:.2f} ± {self.mae_std:.2f}, "
            f"order error {100 * self.error_rate:.2f}% ± {100 * self.error_rate_std:.2f}% "
            f"({n} positions x {d} dims, {len(self.seeds)} seeds)"
        )

    def __repr__(self):
        return f"ProbeReport({self.name!r}: {self._headline()})"

    def __str__(self):
        info = self.informativeness
        return (
            f"{self.name}: {self._headline()}; "
            f"90% of the spectrum in {info.rank_for(0.9)} components, "
            f"99% in {info.rank_for(0.99)}"
        )

    def to_dict(self):
        """The figures as plain Python values (``json.dumps`` takes it)."""
        info = self.informativeness
        return {
            "name": self.name,
            "n_positions": int(self.shape[0]),
            "dim": int(self.shape[1]),
            "seeds": list(self.seeds),
            "absolute_position": {
                "mae": self.mae,
                "mae_std": self.mae_std,
                "mae_per_seed": [r.mae for r in self.absolute],
                "fold_mae_per_seed": [r.fold_mae.tolist() for r in self.absolute],
                "predictions": self.absolute[0].predictions.tolist(),
                "predictions_seed": self.absolute[0].seed,
            },
            "relative_order": {
                "error_rate": self.error_rate,
                "error_rate_std": self.error_rate_std,
                "error_rate_per_seed": [r.error_rate for r in self.order],
                "fold_errors_per_seed": [r.fold_errors.tolist() for r in self.order],
                "pairs": len(self.order[0].pairs),
            },
            "informativeness": {
                "centered": info.centered,
                "rank_90": info.rank_for(0.9),
                "rank_99": info.rank_for(0.99),
                "singular_values": info.singular_values.tolist(),
                "cumulative_share": info.cumulative_share.tolist(),
            },
            "published": [
                {"embedding": r.embedding, "mae": r.mae, "error_rate": r.error_rate}
                for r in PUBLISHED
            ],
        }

    def to_markdown(self, *, published=True):
        """A Markdown table of the two probes, with the paper's rows below."""
        seeds = self.seeds
        span = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
        lines = [
            "| embedding | absolute MAE | order error |",
            "|---|---:|---:|",
            f"| {self.name} (posenc, {span}) | {self.mae:.2f} ± {self.mae_std:.2f} | "
            f"{100 * self.error_rate:.2f}% ± {100 * self.error_rate_std:.2f}% |",
        ]
        if published:
            lines += [
                f"| {r.embedding} ({_CITATION}) | {r.mae:.2f} | {100 * r.error_rate:.2f}% |"
                for r in PUBLISHED
            ]
        n, d = self.shape
        info = self.informativeness
        lines += [
            "",
            f"{n} positions x {d} dims; linear probes, 5-fold cross-validation, "
            f"mean ± std over {len(seeds)} seed{'s' if len(seeds) > 1 else ''}. "
            f"Informativeness: 90% of sum(s**2) in the top {info.rank_for(0.9)} "
            f"components, 99% in {info.rank_for(0.99)}.",
        ]
        return "\n".join(lines)

    def plot(self, path, *, dpi=110):
        """Write one PNG: cosine heatmap, informativeness, predictions, fold errors.

        Uses matplotlib's Agg canvas directly (no ``pyplot``), so the global
        backend and any open figures are left alone.

        Parameters
        ----------
        path : str or os.PathLike
            Where to write the PNG.
        dpi : int
            Resolution.

        Returns
        -------
        path
        """
        figure_mod = _require("matplotlib.figure", "ProbeReport.plot")
        agg = _require("matplotlib.backends.backend_agg", "ProbeReport.plot")
        fig = figure_mod.Figure(figsize=(12, 9.6), layout="constrained")
        agg.FigureCanvasAgg(fig)
        n, d = self.shape
        fig.suptitle(f"{self.name}: {n} positions x {d} dims", fontsize=14)
        grid = fig.add_gridspec(2, 2)

        ax = fig.add_subplot(grid[0, 0])
        im = ax.imshow(self.cosine, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_title("cosine similarity between positions")
        ax.set_xlabel("position")
        ax.set_ylabel("position")
        fig.colorbar(im, ax=ax, shrink=0.85)

        ax = fig.add_subplot(grid[0, 1])
        info = self.informativeness
        k = np.arange(1, len(info.cumulative_share) + 1)
        ax.plot(k, info.cumulative_share, color="C0")
        for share, style in ((0.9, "--"), (0.99, ":")):
            r = info.rank_for(share)
            ax.axhline(share, color="grey", linestyle=style, linewidth=0.8)
            ax.plot([r], [info.cumulative_share[r - 1]], "o", color="C3")
            ax.annotate(
                f"{share:.0%} at k={r}",
                (r, info.cumulative_share[r - 1]),
                textcoords="offset points",
                xytext=(8, -14),
            )
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_title("informativeness: share of sum(s²) in the top k components")
        ax.set_xlabel("k (top components, log scale)")
        ax.set_ylabel("cumulative share")

        ax = fig.add_subplot(grid[1, 0])
        first = self.absolute[0]
        pos = np.arange(n)
        ax.plot([0, n - 1], [0, n - 1], color="grey", linestyle="--", linewidth=0.8)
        # A few wild predictions (a special first position, say) would squash
        # the rest into a line: draw those at the edge of the chart instead.
        low, high = -0.15 * n, 1.15 * n
        inside = (first.predictions >= low) & (first.predictions <= high)
        ax.scatter(pos[inside], first.predictions[inside], s=4, color="C0")
        if not inside.all():
            clipped = np.clip(first.predictions[~inside], low, high)
            ax.scatter(pos[~inside], clipped, s=30, marker="^", color="C3")
            ax.text(
                0.98,
                0.03,
                f"{(~inside).sum()} prediction(s) off the chart (triangles)",
                transform=ax.transAxes,
                ha="right",
                color="C3",
            )
        ax.set_ylim(low - 0.02 * n, high + 0.02 * n)
        ax.set_title(
            f"absolute position, seed {first.seed}: MAE {first.mae:.2f} "
            f"(all seeds {self.mae:.2f} ± {self.mae_std:.2f})"
        )
        ax.set_xlabel("true position")
        ax.set_ylabel("predicted position (rounded)")

        inner = grid[1, 1].subgridspec(1, 2)
        seeds = np.array(self.seeds)
        for col, (values, label, scale, total) in enumerate(
            (
                ([r.fold_mae for r in self.absolute], "absolute MAE", 1.0, self.mae),
                ([r.fold_errors for r in self.order], "order error (%)", 100.0, self.error_rate),
            )
        ):
            ax = fig.add_subplot(inner[0, col])
            values = np.asarray(values) * scale
            for f in range(values.shape[1]):
                ax.scatter(seeds, values[:, f], s=10, color="C0", alpha=0.6)
            ax.plot(seeds, values.mean(axis=1), "_", color="C3", markersize=14, mew=2)
            ax.axhline(total * scale, color="C3", linewidth=0.8, linestyle="--")
            low, high = min(0.0, values.min()), values.max()
            span = high - low if high > low else 1.0  # all zero: a scale of one unit
            ax.set_ylim(low - 0.04 * span, max(high, low + span) + 0.08 * span)
            ax.set_title(f"per fold: {label}")
            ax.set_xlabel("seed")
            ax.set_xticks(seeds if len(seeds) <= 12 else seeds[:: max(1, len(seeds) // 10)])
            if col == 0:
                ax.set_ylabel("dots: folds, bars: seed mean, dashed: mean")
        fig.savefig(os.fspath(path), dpi=dpi)
        return path


def report(E, *, name, seeds=10, progress=True):
    """Every analysis of one position-embedding table, the probes over seeds.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
        The table (learned or generated), row ``p`` for position ``p``.
    name : str
        What it is (shown in the table and the plot).
    seeds : int
        The probes run with seeds ``0 .. seeds-1``; the report gives the mean
        and standard deviation over them.
    progress : bool
        Draw a progress bar on stderr while the seeds run.

    Returns
    -------
    ProbeReport
        With ``.to_dict()``, ``.to_markdown()`` and ``.plot(path)``.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, not {type(name).__name__}")
    seeds = v.integer(seeds, "seeds", minimum=1)
    table = _table(E, min_rows=5)
    bar = _Progress(f"probing {name}", seeds, bool(progress))
    absolute, order = [], []
    try:
        for s in range(seeds):
            absolute.append(absolute_position_regression(table, seed=s))
            order.append(relative_order_classification(table, seed=s))
            bar.draw(s + 1)
    finally:
        bar.close()
    return ProbeReport(
        name=name,
        shape=table.shape,
        absolute=tuple(absolute),
        order=tuple(order),
        cosine=cosine_similarity(table),
        informativeness=informativeness(table),
    )


# ---------------------------------------------------------------- loading a table

#: Names of position-embedding tables in Hugging Face checkpoints: GPT-2
#: (``wpe``), BERT/RoBERTa/ELECTRA (``embeddings.position_embeddings``),
#: BART/OPT/Whisper/XGLM (``embed_positions``); any prefix before them.
KNOWN_KEYS = ("wpe.weight", "embeddings.position_embeddings.weight", "embed_positions.weight")

_TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
_SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",  # widened to float32 below
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
}


class _SafetensorsFile:
    """The tensors of a ``.safetensors`` file, read one at a time.

    The format is an 8-byte little-endian header length, a JSON header
    ``{name: {dtype, shape, data_offsets}}`` and the raw bytes; reading it
    here takes no dependency, reads only the tensor asked for (not a whole
    checkpoint), and handles bfloat16, which NumPy has no dtype for.
    """

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(f"source: {path} is not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", raw)
            if length > 100_000_000:
                raise ValueError(f"source: {path} is not a safetensors file (bad header)")
            try:
                header = json.loads(f.read(length))
            except (UnicodeDecodeError, ValueError) as exc:
                raise ValueError(f"source: {path} is not a safetensors file ({exc})") from exc
        if not isinstance(header, dict):
            raise ValueError(f"source: {path} is not a safetensors file (bad header)")
        header.pop("__metadata__", None)
        self.header = header
        self.data_start = 8 + length

    def keys(self):
        return list(self.header)

    def __getitem__(self, key):
        info = self.header[key]
        dtype = _SAFETENSORS_DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise ValueError(f"{key}: safetensors dtype {info.get('dtype')} is not supported")
        begin, end = info["data_offsets"]
        with open(self.path, "rb") as f:
            f.seek(self.data_start + begin)
            data = f.read(end - begin)
        arr = np.frombuffer(data, dtype=dtype)
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr.astype(arr.dtype.newbyteorder("="), copy=True).reshape(info["shape"])


class _ShardedTensors:
    """Several safetensors shards seen as one mapping (a sharded checkpoint)."""

    def __init__(self, files):
        self.where = {}
        for f in files:
            for k in f.keys():
                self.where.setdefault(k, f)

    def keys(self):
        return list(self.where)

    def __getitem__(self, key):
        return self.where[key][key]


def _flatten(mapping, prefix=""):
    """Nested checkpoint dicts (``{"model": {...}}``) as one dotted mapping."""
    flat = {}
    for k, value in mapping.items():
        name = f"{prefix}{k}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _torch_load(path):
    torch = _require_torch(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a file it cannot read
        lines = str(exc).strip().splitlines()
        message = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        raise ValueError(f"source: cannot read {path} with torch.load ({message})") from exc
    if not isinstance(obj, Mapping):
        if hasattr(obj, "shape"):
            return {"": obj}
        raise ValueError(f"source: {path} holds a {type(obj).__name__}, not a state dict")
    return _flatten(obj)


def _require_torch(path):
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise ImportError(f"reading {path} needs torch (pip install torch)") from exc


def _open_path(path):
    """A mapping of the tensors stored at `path` (file or model directory)."""
    if os.path.isdir(path):
        entries = sorted(os.listdir(path))
        tensors = [e for e in entries if e.endswith(".safetensors")]
        if tensors:
            return _ShardedTensors([_SafetensorsFile(os.path.join(path, e)) for e in tensors])
        torch_files = [e for e in entries if e.endswith(_TORCH_SUFFIXES)]
        if torch_files:
            merged = {}
            for e in torch_files:
                merged.update(_torch_load(os.path.join(path, e)))
            return merged
        raise ValueError(f"source: no .safetensors, .bin, .pt or .pth file in the directory {path}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"source: no such file or directory: {path}")
    lower = path.lower()
    if lower.endswith(".npy"):
        try:
            return np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"source: cannot read {path} as .npy: {exc}") from exc
    if lower.endswith(".npz"):
        try:
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"source: cannot read {path} as .npz: {exc}") from exc
    if lower.endswith(".safetensors"):
        return _SafetensorsFile(path)
    if lower.endswith(_TORCH_SUFFIXES):
        return _torch_load(path)
    raise ValueError(
        f"source: {path} is not a .npy, .npz, .safetensors or torch (.bin, .pt, .pth, .ckpt) "
        "file, nor a model directory"
    )


def _list_keys(keys, limit=12):
    keys = list(keys)
    # The keys a person is looking for first: those that mention positions.
    keys.sort(key=lambda k: (("pos" not in k.lower()) and ("embed" not in k.lower()), k))
    shown = ", ".join(keys[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"{shown}{more}" if keys else "(none)"


def _select(tensors, key, where):
    """The table under `key`, or under the one known key the mapping holds."""
    keys = list(tensors.keys())
    if key is not None:
        if not isinstance(key, str):
            raise TypeError(f"key must be a string, not {type(key).__name__}")
        if key not in keys:
            raise ValueError(f"key {key!r} not found in {where}; keys seen: {_list_keys(keys)}")
        return tensors[key], key
    found = [k for k in keys if any(k == s or k.endswith("." + s) for s in KNOWN_KEYS)]
    if len(found) == 1:
        return tensors[found[0]], found[0]
    if len(keys) == 1 and len(found) == 0:
        return tensors[keys[0]], keys[0]
    if found:
        raise ValueError(
            f"{where} holds several position tables ({', '.join(found)}); "
            "choose one with key (--key on the command line)"
        )
    raise ValueError(
        f"no position-embedding table found in {where} (looked for keys ending in "
        f"{', '.join(KNOWN_KEYS)}); name it with key (--key on the command line). "
        f"Keys seen: {_list_keys(keys)}"
    )


def _load(source, key=None):
    """``(table, key_used)``; `key_used` is None for a bare array."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        stored = _open_path(path)
        where = path
        if isinstance(stored, np.ndarray):
            if key is not None:
                raise ValueError(f"key: {path} holds a single array, so key must be None")
            return stored, None
    elif isinstance(source, Mapping):
        stored, where = _flatten(source), "the state dict"
    elif callable(getattr(source, "state_dict", None)):
        stored, where = source.state_dict(), f"the {type(source).__name__}'s state dict"
    elif isinstance(source, np.ndarray) or hasattr(source, "__array__"):
        if key is not None:
            raise ValueError("key: source is an array, so key must be None")
        return source, None
    else:
        raise TypeError(
            "source must be a path, a state dict, a model with state_dict() or an array, "
            f"not {type(source).__name__}"
        )
    table, used = _select(stored, key, where)
    return table, used


def load_position_embeddings(source, *, key=None):
    """Find the position-embedding table in a file, a state dict or a model.

    Parameters
    ----------
    source : str, os.PathLike, mapping, model or array
        - a ``.npy`` file (the table itself) or a ``.npz`` file;
        - a ``.safetensors`` file, or a model directory holding
          ``*.safetensors`` files (sharded checkpoints included);
        - a torch checkpoint (``.bin``, ``.pt``, ``.pth``, ``.ckpt``; needs
          torch, loaded with ``weights_only=True``);
        - an in-memory state dict (nested dicts are flattened with dots), or
          any object with ``state_dict()`` such as a transformers model;
        - an array or tensor, returned as it is (checked to be 2-D).
    key : str, optional
        The name of the table.  By default the one key ending in
        ``wpe.weight`` (GPT-2), ``embeddings.position_embeddings.weight``
        (BERT, RoBERTa) or ``embed_positions.weight`` (BART, OPT), with any
        prefix; a source holding a single array needs none.

    Returns
    -------
    ndarray of shape (n_positions, dim)
        The stored values (bfloat16 widened to float32).

    Raises
    ------
    FileNotFoundError
        The path does not exist.
    ValueError
        Not a readable file, no table found (the message lists the keys
        seen), several candidates, or not 2-D.

    Notes
    -----
    RoBERTa-family and BART/OPT tables keep two reserved rows before
    position 0 (RoBERTa-base has 514 rows for 512 positions): probe
    ``E[2:]`` to compare with the paper's 512 positions.
    """
    table, used = _load(source, key)
    arr = _to_numpy(table)
    if arr.ndim != 2:
        what = f"the table under {used!r}" if used else "the table"
        raise ValueError(f"{what} must be 2-D (n_positions, dim), got shape {arr.shape}")
    return arr
