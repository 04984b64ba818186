"""The report of every analysis of one table: :func:`report`, :class:`ProbeReport`
(its table, JSON and plot), the published figures it is set beside, and the
progress bar drawn while the seeds run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import numpy as np

from .. import _validate as v
from .analyses import (
    MAX_POSITIONS,
    Informativeness,
    _require,
    _table,
    absolute_position_regression,
    cosine_similarity,
    informativeness,
    relative_order_classification,
)


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
        """Write one figure: cosine heatmap, informativeness, predictions, fold errors.

        Uses matplotlib's Agg canvas directly (no ``pyplot``), so the global
        backend and any open figures are left alone.  Above
        ``_HEATMAP_POSITIONS`` (1024) positions the heatmap shows every k-th
        position, which is all a panel of a few hundred pixels can show.

        Parameters
        ----------
        path : str or os.PathLike
            Where to write the figure, in the format its extension names
            (``.png``, ``.pdf``, ``.svg``, ...: any that matplotlib writes);
            a PNG when it has none.  An unknown extension is refused before
            anything is drawn.
        dpi : int
            Resolution.

        Returns
        -------
        path
        """
        fmt = _plot_format(path)
        figure_mod = _require("matplotlib.figure", "ProbeReport.plot")
        agg = _require("matplotlib.backends.backend_agg", "ProbeReport.plot")
        fig = figure_mod.Figure(figsize=(12, 9.6), layout="constrained")
        agg.FigureCanvasAgg(fig)
        n, d = self.shape
        fig.suptitle(f"{self.name}: {n} positions x {d} dims", fontsize=14)
        grid = fig.add_gridspec(2, 2)

        ax = fig.add_subplot(grid[0, 0])
        step = -(-n // _HEATMAP_POSITIONS)  # ceil: at most _HEATMAP_POSITIONS shown a side
        im = ax.imshow(
            self.cosine[::step, ::step],
            cmap="RdBu_r",
            vmin=-1,
            vmax=1,
            extent=(-0.5, n - 0.5, n - 0.5, -0.5),  # axes in positions, whatever the step
        )
        title = "cosine similarity between positions"
        ax.set_title(title if step == 1 else f"{title} (one position in {step})")
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
        fig.savefig(os.fspath(path), dpi=dpi, format=fmt)
        return path


#: The most positions a side of the plotted cosine heatmap shows.
_HEATMAP_POSITIONS = 1024


def _plot_formats():
    """The file formats matplotlib can write (its canvas's list), lower case."""
    figure_mod = _require("matplotlib.figure", "ProbeReport.plot")
    return sorted(figure_mod.Figure().canvas.get_supported_filetypes())


def _plot_format(path, what="plot"):
    """The format of the plot file `path`, from its extension (``png`` when it
    has none); a ValueError naming the formats matplotlib writes when it is
    not one of them."""
    name = os.fspath(path)
    extension = os.path.splitext(name)[1]
    if extension in ("", "."):
        return "png"
    fmt = extension[1:].lower()
    formats = _plot_formats()
    if fmt not in formats:
        raise ValueError(
            f"{what}: matplotlib cannot write {extension} files ({name}); "
            f"name a file ending in one of: {', '.join('.' + f for f in formats)}"
        )
    return fmt


def report(E, *, name, seeds=10, progress=True):
    """Every analysis of one position-embedding table, the probes over seeds.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
        The table (learned or generated), row ``p`` for position ``p``: at
        least 5 and at most :data:`MAX_POSITIONS` (8192) rows, as the report
        holds the ``n x n`` cosine map (512 MiB of float64 at 8192).  Slice a
        taller table (``E[:8192]``, ``E[::k]``).
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

    Raises
    ------
    ValueError
        Fewer than 5 or more than :data:`MAX_POSITIONS` rows (checked before
        any probe runs), or a table that is not finite.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, not {type(name).__name__}")
    seeds = v.integer(seeds, "seeds", minimum=1)
    table = _table(E, min_rows=5, max_rows=MAX_POSITIONS)
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
