"""The report of every analysis of one table: :func:`report`, :class:`ProbeReport`
(its table, JSON and plot), the published figures it is set beside, and the
progress bar drawn while the seeds run.
"""

from __future__ import annotations

import html
import sys
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Tuple,
    TypeVar,
    overload,
)

import numpy as np

from .. import _validate as v
from .._typing import ArrayLike, PathLike
from ._fits import absolute_position_fit
from ._plots import _figure as _figure  # rope_usage.py imports it from here
from ._plots import _figure_class
from ._tables import _table
from .analyses import (
    MAX_POSITIONS,
    AbsolutePositionResult,
    Informativeness,
    RelativeOrderResult,
    cosine_similarity,
    informativeness,
    relative_order_classification,
)
from .locality import attention_locality_symmetry, position_attention
from .properties import position_properties, toeplitz_fit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_PathT = TypeVar("_PathT", bound=PathLike)


@dataclass(frozen=True)
class PublishedRow:
    """One published row of Wang & Chen's linear probes (512 positions x 768 dims)."""

    embedding: str
    mae: float
    error_rate: float


#: The published figures: absolute-position MAE (linear regression) and
#: relative-order error rate (logistic regression), 512 positions.
PUBLISHED: Tuple[PublishedRow, ...] = (
    PublishedRow("BERT", 34.14, 0.1972),
    PublishedRow("RoBERTa", 6.06, 0.0723),
    PublishedRow("GPT-2", 1.03, 0.0156),
    PublishedRow("sinusoid", 0.0, 0.0508),
)

_CITATION = "Wang & Chen 2020"

#: What :func:`report` calls a table given no ``name``.
DEFAULT_NAME = "embedding"

_COLUMNS = ("embedding", "absolute MAE", "order error")


# ---------------------------------------------------------------- the report


def _is_terminal(stream: Any) -> bool:
    """Whether `stream` is a terminal (a progress bar is drawn only there)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class _Progress:
    """A one-line progress bar on stderr, redrawn with carriage returns."""

    def __init__(self, label: str, total: int, enabled: bool) -> None:
        self.label, self.total, self.enabled = label, total, enabled
        self.stream = sys.stderr
        self.draw(0)

    def draw(self, done: int) -> None:
        if not self.enabled:
            return
        width = 24
        filled = width * done // self.total
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r{self.label}: [{bar}] seed {done}/{self.total}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _mean_std(values: Iterable[float]) -> Tuple[float, float]:
    values = np.asarray(list(values), dtype=np.float64)
    return float(values.mean()), float(values.std())


@dataclass(frozen=True, repr=False)
class ProbeReport:
    """Every analysis of one table: the result of :func:`report`.

    In a notebook a report shows itself as its table (``_repr_html_``,
    ``_repr_markdown_``), and ``plot()`` returns the figure.

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
    properties : PositionProperties or None
        :func:`position_properties` of the table (Wang et al. 2021:
        monotonicity, translation invariance, symmetry of the dot product);
        its own ``plot()`` draws it.  None when not asked for.
    toeplitz : ToeplitzFit or None
        :func:`toeplitz_fit` of the Gram matrix ``E @ E.T`` (Wennberg &
        Henter 2021); ``toeplitz.plot(E @ E.T)`` draws it.
    locality : LocalitySymmetry or None
        :func:`attention_locality_symmetry` of :func:`position_attention`
        of the table (Chen et al. 2023: locality and symmetry of
        ``softmax(E E^T / sqrt(dim))``); its own ``plot()`` draws it.
    baselines : dict or None
        ``{kind: {measure: Baseline}}`` (:mod:`posenc.probe.baselines`):
        each figure on a random table with the same row norms
        (``"random"``) and on the table's rows shuffled (``"shuffled"``),
        over the same seeds.  None when not asked for.
    mae, mae_std, error_rate, error_rate_std : float
        Mean and standard deviation (``ddof=0``) over the seeds.
    """

    name: str
    shape: Tuple[int, int]
    absolute: Tuple[AbsolutePositionResult, ...]
    order: Tuple[RelativeOrderResult, ...]
    cosine: np.ndarray
    informativeness: Informativeness
    properties: Optional[Any] = None  # PositionProperties (Wang et al. 2021)
    toeplitz: Optional[Any] = None  # ToeplitzFit of E @ E.T (Wennberg & Henter 2021)
    locality: Optional[Any] = None  # LocalitySymmetry (Chen et al. 2023)
    #: {kind: {measure: Baseline}}: every figure on tables without positions
    baselines: Optional[Dict[str, Dict[str, Any]]] = None
    mae: float = field(init=False)
    mae_std: float = field(init=False)
    error_rate: float = field(init=False)
    error_rate_std: float = field(init=False)

    def __post_init__(self) -> None:
        mae, mae_std = _mean_std([r.mae for r in self.absolute])
        err, err_std = _mean_std([r.error_rate for r in self.order])
        object.__setattr__(self, "mae", mae)
        object.__setattr__(self, "mae_std", mae_std)
        object.__setattr__(self, "error_rate", err)
        object.__setattr__(self, "error_rate_std", err_std)

    def protocol(self) -> Dict[str, Any]:
        """Every setting that produced the figures, with posenc's version: what
        :func:`report` needs to rerun them."""
        from .._version import __version__

        extras = [
            e
            for e, r in (
                ("properties", self.properties),
                ("toeplitz", self.toeplitz),
                ("locality", self.locality),
            )
            if r is not None
        ]
        return {
            "posenc_version": __version__,
            "seeds": len(self.seeds),
            "split": self.absolute[0].split,
            "regressor": self.absolute[0].regressor,
            "folds": len(self.absolute[0].fold_mae),
            "pairs": len(self.order[0].pairs),
            "extras": extras,
            "baselines": self.baselines is not None,
        }

    @property
    def seeds(self) -> Tuple[int, ...]:
        """The seeds the probes ran with."""
        return tuple(r.seed for r in self.absolute)

    def _headline(self) -> str:
        n, d = self.shape
        return (
            f"absolute MAE {self.mae:.2f} ± {self.mae_std:.2f}, "
            f"order error {100 * self.error_rate:.2f}% ± {100 * self.error_rate_std:.2f}% "
            f"({n} positions x {d} dims, {len(self.seeds)} seeds)"
        )

    def __repr__(self) -> str:
        return f"ProbeReport({self.name!r}: {self._headline()})"

    def __str__(self) -> str:
        info = self.informativeness
        return (
            f"{self.name}: {self._headline()}; "
            f"90% of the spectrum in {info.rank_for(0.9)} components, "
            f"99% in {info.rank_for(0.99)}"
        )

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (``json.dumps`` takes it)."""
        info = self.informativeness
        return {
            "name": self.name,
            "n_positions": int(self.shape[0]),
            "dim": int(self.shape[1]),
            "seeds": list(self.seeds),
            "protocol": self.protocol(),
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
            "position_properties": (None if self.properties is None else self.properties.to_dict()),
            "toeplitz": None if self.toeplitz is None else self.toeplitz.to_dict(),
            "locality_symmetry": None if self.locality is None else self.locality.to_dict(),
            "baselines": (
                None
                if self.baselines is None
                else {
                    kind: {m: b.to_dict() for m, b in figures.items()}
                    for kind, figures in self.baselines.items()
                }
            ),
            "published": [
                {"embedding": r.embedding, "mae": r.mae, "error_rate": r.error_rate}
                for r in PUBLISHED
            ],
        }

    def summaries(self) -> List[str]:
        """One sentence per analysis run beside the paper's probes."""
        lines = []
        if self.properties is not None:
            lines.append(self.properties.summary())
            lines += self._noise(_PROPERTY_MEASURES)
        if self.toeplitz is not None:
            lines.append(self.toeplitz.summary())
            lines += self._noise(("toeplitz_r2",))
        if self.locality is not None:
            lines.append(self.locality.summary())
            lines += self._noise(("locality", "attention_symmetry"))
        return lines

    def _noise(self, measures: Tuple[str, ...]) -> List[str]:
        """The line under a sentence: its figures on the tables without positions."""
        if not self.baselines:
            return []
        from .baselines import KIND_NAMES

        parts = []
        for kind, figures in self.baselines.items():
            shown = ", ".join(
                f"{m} {figures[m].mean:.3f} ± {figures[m].std:.3f}"
                for m in measures
                if m in figures
            )
            parts.append(f"{KIND_NAMES[kind]}: {shown}")
        return [f"  noise (same measure, seeds {self._span()}): " + "; ".join(parts) + "."]

    def _span(self) -> str:
        seeds = self.seeds
        return f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"

    def _rows(self, published: bool) -> List[Tuple[str, str, str, str]]:
        """The table's rows, as text: the name, where the figures come from,
        absolute MAE, order error."""
        seeds = self.seeds
        span = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
        rows = [
            (
                self.name,
                f"posenc, {span}",
                f"{self.mae:.2f} ± {self.mae_std:.2f}",
                f"{100 * self.error_rate:.2f}% ± {100 * self.error_rate_std:.2f}%",
            )
        ]
        if self.baselines:
            from .baselines import KIND_NAMES

            for kind, figures in self.baselines.items():
                mae, err = figures["mae"], figures["order_error"]
                rows.append(
                    (
                        f"noise: {KIND_NAMES[kind]}",
                        f"posenc, {span}",
                        f"{mae.mean:.2f} ± {mae.std:.2f}",
                        f"{100 * err.mean:.2f}% ± {100 * err.std:.2f}%",
                    )
                )
        if published:
            rows += [
                (r.embedding, _CITATION, f"{r.mae:.2f}", f"{100 * r.error_rate:.2f}%")
                for r in PUBLISHED
            ]
        return rows

    def _note(self) -> str:
        """The line under the table: the table's size, the protocol, informativeness."""
        n, d = self.shape
        info = self.informativeness
        seeds = len(self.seeds)
        p = self.protocol()
        family = "linear probes" if p["regressor"] == "linear" else f"{p['regressor']} probes"
        split = "the paper's split" if p["split"] == "paper" else "held-out positions"
        return (
            f"{n} positions x {d} dims; {family}, {p['folds']}-fold cross-validation "
            f"({split}), mean ± std over {seeds} seed{'s' if seeds > 1 else ''}. "
            f"Informativeness: 90% of sum(s**2) in the top {info.rank_for(0.9)} "
            f"components, 99% in {info.rank_for(0.99)}"
            + (
                ""
                if not self.baselines
                else " (random table, row norms kept: "
                f"{self.baselines['random']['rank_90'].mean:.1f} and "
                f"{self.baselines['random']['rank_99'].mean:.1f})"
            )
            + "."
        )

    def _markdown(self, published: bool, name_cell: Callable[[str], str]) -> str:
        """The Markdown table, the names written by `name_cell`."""
        lines = [
            "| " + " | ".join(_COLUMNS) + " |",
            "|---|---:|---:|",
            *(
                f"| {name_cell(name)} ({source}) | {mae} | {err} |"
                for name, source, mae, err in self._rows(published)
            ),
            "",
            self._note(),
        ]
        return "\n".join(lines)

    def to_markdown(self, *, published: bool = True) -> str:
        """A Markdown table of the two probes, with the paper's rows below.

        The name is written as it is, but for ``|`` (written ``\\|``, which
        would end the cell) and line breaks (spaces).
        """
        return self._markdown(published, _table_cell)

    def _repr_markdown_(self) -> str:
        """The table in Markdown for a notebook: every punctuation mark of the
        name escaped, so that it renders as it is."""
        return self._markdown(True, _markdown_cell)

    def to_html(self, *, published: bool = True) -> str:
        """An HTML table of the two probes, with the paper's rows below (the
        text escaped, so the name shows as it is)."""
        head = "".join(
            f'<th style="text-align: {align}">{html.escape(c)}</th>'
            for c, align in zip(_COLUMNS, ("left", "right", "right"))
        )
        body = "".join(
            f'<tr><td style="text-align: left">{html.escape(f"{name} ({source})")}</td>'
            f'<td style="text-align: right">{html.escape(mae)}</td>'
            f'<td style="text-align: right">{html.escape(err)}</td></tr>'
            for name, source, mae, err in self._rows(published)
        )
        return (
            f'<div class="posenc-probe-report"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table><p>{html.escape(self._note())}</p></div>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    @overload
    def plot(self, path: None = None, *, dpi: float = 110) -> Figure: ...

    @overload
    def plot(self, path: _PathT, *, dpi: float = 110) -> _PathT: ...

    def plot(self, path: Optional[PathLike] = None, *, dpi: float = 110) -> Any:
        """One figure: cosine heatmap, informativeness, predictions, fold errors.

        Drawn on matplotlib's Agg canvas directly (no ``pyplot``), so the
        global backend and pyplot's open figures are left alone, and a
        notebook shows a returned figure once.  Above ``_HEATMAP_POSITIONS``
        (1024) positions the heatmap shows every k-th position, which is all
        a panel of a few hundred pixels can show.

        Parameters
        ----------
        path : str or os.PathLike, optional
            Where to write the figure, in the format its extension names
            (``.png``, ``.pdf``, ``.svg``, ...: any that matplotlib writes);
            a PNG when it has none.  An unknown extension is refused before
            anything is drawn.  Without it the figure is returned.
        dpi : float
            Resolution (of the file, and of the figure returned).

        Returns
        -------
        path, or matplotlib.figure.Figure without one
            The figure, not registered with pyplot: a notebook shows it as a
            PNG (it has ``_repr_png_``, with or without pyplot imported);
            ``fig.savefig(...)`` writes it.
        """
        return _figure(path, dpi, (12, 9.6), self._draw)

    def _draw(self, fig: Any) -> None:
        """Draws the figure of :meth:`plot` on `fig`."""
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
        for col, (per_seed, label, scale, total) in enumerate(
            (
                ([r.fold_mae for r in self.absolute], "absolute MAE", 1.0, self.mae),
                ([r.fold_errors for r in self.order], "order error (%)", 100.0, self.error_rate),
            )
        ):
            ax = fig.add_subplot(inner[0, col])
            values = np.asarray(per_seed) * scale
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


#: The most positions a side of the plotted cosine heatmap shows.
_HEATMAP_POSITIONS = 1024

# the markdown cells: "|" would end one (GFM tables), a line break the row
_TABLE_CELL = str.maketrans({"|": "\\|", "\n": " ", "\r": " "})
# CommonMark: any ASCII punctuation may be backslash-escaped, and then stands for itself
_MARKDOWN_CELL = str.maketrans(
    {c: "\\" + c for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"} | {"\n": " ", "\r": " "}
)


def _table_cell(text: str) -> str:
    return text.translate(_TABLE_CELL)


def _markdown_cell(text: str) -> str:
    return text.translate(_MARKDOWN_CELL)


def __getattr__(name: str) -> Any:
    # the figure class is made on first use (matplotlib is optional); found
    # here by that name too, so that pickle finds it
    if name == "ProbeFigure":
        return _figure_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _run_seeds(
    table: np.ndarray, seeds: int, bar: _Progress, protocol: Optional[Dict[str, Any]] = None
) -> Tuple[List[AbsolutePositionResult], List[RelativeOrderResult]]:
    """The two probes for seeds ``0 .. seeds-1``, on up to
    ``posenc.get_num_threads()`` threads at once (the fits release the GIL;
    each runs its BLAS on one thread, so the figures are those of a run one
    seed after the other).

    Seed 0 runs first: where the QR certificate refuses one of its folds,
    the other seeds' folds skip the QR attempt (see
    ``absolute_position_fit``), the same choice on any thread count.
    """
    from concurrent.futures import ThreadPoolExecutor

    from .._config import get_num_threads
    from ._common import FOLDS
    from ._optional import one_thread

    p = {
        "folds": FOLDS,
        "pairs": None,
        "split": "paper",
        "regressor": "linear",
        **(protocol or {}),
    }
    folds, how = p["folds"], (p["split"], p["regressor"])
    order_kw = {"pairs": p["pairs"], "folds": folds, "split": how[0], "regressor": how[1]}
    workers = max(1, min(seeds, get_num_threads()))
    absolute: List[AbsolutePositionResult] = []
    order: List[RelativeOrderResult] = []

    def collect(a: AbsolutePositionResult, o: RelativeOrderResult) -> None:
        absolute.append(a)
        order.append(o)
        bar.draw(len(absolute))

    try:
        # one thread for BLAS set once around the pool: the probes' own
        # settings inside it then find and restore that same value
        with one_thread(), ThreadPoolExecutor(max_workers=workers) as pool:
            # seed 0 alone first: its verdict on QR is the other seeds', and
            # the libraries' first calls are made from one thread (first
            # calls from two at once left a first report spinning twenty
            # times as long)
            first, refused = absolute_position_fit(table, folds, 0, True, *how)
            collect(first, relative_order_classification(table, seed=0, **order_kw))
            futures = [
                (
                    pool.submit(absolute_position_fit, table, folds, s, not refused, *how),
                    pool.submit(relative_order_classification, table, seed=s, **order_kw),
                )
                for s in range(1, seeds)
            ]
            for a, o in futures:
                collect(a.result()[0], o.result())
    finally:
        bar.close()
    return absolute, order


def plot_reports(
    reports: Iterable[ProbeReport], path: Optional[PathLike] = None, *, dpi: float = 110
) -> Any:
    """Several reports in one figure: a cosine map per table (top row), and
    below one panel per analysis with a line per table: informativeness, the
    absolute probe's predictions (first seed), and, where every report has
    it, the mean position attention per offset.

    Parameters
    ----------
    reports : iterable of ProbeReport
        At least one.
    path, dpi
        As :meth:`ProbeReport.plot`.

    Returns
    -------
    path, or matplotlib.figure.Figure without one

    Examples
    --------
    >>> from posenc.probe import plot_reports, report
    >>> tables = {"sinusoid": posenc.sinusoid(32, 16, dtype="float64"),
    ...           "noise": np.random.default_rng(0).normal(size=(32, 16))}
    >>> reports = [report(E, name=n, seeds=1, progress=False, baselines=False)
    ...            for n, E in tables.items()]
    >>> fig = plot_reports(reports)
    >>> sum(len(ax.images) for ax in fig.axes)  # a cosine map per table
    2
    """
    reports = list(reports)
    if not reports or not all(isinstance(r, ProbeReport) for r in reports):
        raise TypeError("reports must be a non-empty sequence of ProbeReport")
    locality = all(r.locality is not None for r in reports)
    columns = max(len(reports), 3 if locality else 2)

    def draw(fig: Any) -> None:
        grid = fig.add_gridspec(2, columns)
        for k, r in enumerate(reports):
            ax = fig.add_subplot(grid[0, k])
            n = r.shape[0]
            step = -(-n // _HEATMAP_POSITIONS)
            ax.imshow(
                r.cosine[::step, ::step],
                cmap="RdBu_r",
                vmin=-1,
                vmax=1,
                extent=(-0.5, n - 0.5, n - 0.5, -0.5),
            )
            ax.set_title(f"{r.name}: cosine", fontsize=9)
        ax = fig.add_subplot(grid[1, 0])
        for r in reports:
            share = r.informativeness.cumulative_share
            ax.plot(np.arange(1, len(share) + 1), share, label=r.name)
        ax.set_xscale("log")
        ax.set_title("informativeness (cumulative share)", fontsize=9)
        ax.legend(fontsize=7)
        ax = fig.add_subplot(grid[1, 1])
        for r in reports:
            n = r.shape[0]
            ax.plot(np.arange(n), r.absolute[0].predictions, label=r.name, linewidth=0.8)
        ax.set_title("absolute probe: predicted position (seed 0)", fontsize=9)
        ax.set_xlabel("position")
        ax.legend(fontsize=7)
        if locality:
            ax = fig.add_subplot(grid[1, 2])
            for r in reports:
                loc: Any = r.locality
                ax.plot(loc.offsets, loc.mean_by_offset, label=r.name)
            ax.set_title("position attention: mean weight per offset", fontsize=9)
            ax.legend(fontsize=7)

    return _figure(path, dpi, (4 * columns, 8), draw)


#: The analyses :func:`report` runs beside the paper's probes, by default all:
#: Wang et al.'s properties, the Toeplitz share of the Gram matrix, Chen et
#: al.'s locality and symmetry of the position attention.
EXTRAS: Tuple[str, ...] = ("properties", "toeplitz", "locality")


def _extras(extras: Any) -> Tuple[str, ...]:
    if isinstance(extras, str) or not isinstance(extras, (tuple, list, set, frozenset)):
        raise TypeError(f"extras must be a sequence of names from {EXTRAS}, not {extras!r}")
    for e in extras:
        if e not in EXTRAS:
            raise ValueError(f"extras: unknown analysis {e!r}; choose from {', '.join(EXTRAS)}")
    return tuple(e for e in EXTRAS if e in extras)


def report(
    E: ArrayLike,
    *,
    name: Optional[str] = None,
    seeds: int = 10,
    progress: bool = True,
    extras: Iterable[str] = EXTRAS,
    baselines: bool = True,
    split: str = "paper",
    regressor: str = "linear",
    folds: int = 5,
    pairs: Optional[int] = None,
) -> ProbeReport:
    """Every analysis of one position-embedding table, the probes over seeds.

    Parameters
    ----------
    E : array_like of shape (n_positions, dim)
        The table (learned or generated), row ``p`` for position ``p``: at
        least 5 and at most :data:`MAX_POSITIONS` (8192) rows, as the report
        holds the ``n x n`` cosine map (512 MiB of float64 at 8192).  Slice a
        taller table (``E[:8192]``, ``E[::k]``).
    name : str, optional
        What it is (shown in the table and the plot); ``"embedding"`` by
        default.
    seeds : int
        The probes run with seeds ``0 .. seeds-1``; the report gives the mean
        and standard deviation over them.
    progress : bool
        Draw a progress bar on stderr while the seeds run.
    extras : sequence of str
        The analyses run beside the paper's probes (:data:`EXTRAS`, all by
        default): ``"properties"`` (:func:`position_properties`),
        ``"toeplitz"`` (:func:`toeplitz_fit` of ``E @ E.T``), ``"locality"``
        (:func:`attention_locality_symmetry` of :func:`position_attention`).
    baselines : bool
        Also take every measure on two tables without positions, for each
        seed (:mod:`posenc.probe.baselines`: a random table with the same
        row norms, and the table's rows shuffled), printed beside the
        figures; about three times the run's time.
    split : {"paper", "heldout"}
        The probes' folds (:mod:`posenc.probe.protocol`): the paper's, or
        test positions no training row or pair has.
    regressor : {"linear", "ridge", "mlp", "knn"}
        The family of both probes; ``"linear"`` is the paper's.
    folds : int
        The cross-validation folds of both probes.
    pairs : int, optional
        The order probe's pairs (``n_positions`` by default).

    Returns
    -------
    ProbeReport
        With ``.to_dict()``, ``.to_markdown()``, ``.to_html()`` and
        ``.plot(path)``; a notebook shows it as its table, and ``.plot()``
        returns the figure.

    Raises
    ------
    ValueError
        Fewer than 5 or more than :data:`MAX_POSITIONS` rows (checked before
        any probe runs), or a table that is not finite.

    Examples
    --------
    >>> from posenc.probe import report
    >>> r = report(posenc.sinusoid(64, 32, dtype="float64"), name="sinusoid", seeds=2,
    ...            progress=False)
    >>> r.shape, float(r.mae)  # the absolute-position probe, mean over the seeds
    ((64, 32), 0.0)
    >>> r.informativeness.rank_for(0.9), round(float(r.toeplitz.r2), 6)
    (7, 1.0)
    >>> print(r.to_markdown().splitlines()[0])  # its row is set beside the paper's
    | embedding | absolute MAE | order error |
    """
    if name is None:
        name = DEFAULT_NAME
    elif not isinstance(name, str):
        raise TypeError(f"name must be a string or None, not {type(name).__name__}")
    seeds = v.integer(seeds, "seeds", minimum=1)
    chosen = _extras(extras)
    table = _table(E, min_rows=5, max_rows=MAX_POSITIONS)
    baselines = v.flag(baselines, "baselines")
    from ._common import check_folds
    from .protocol import check_regressor, check_split

    n = table.shape[0]
    protocol: Dict[str, Any] = {
        "split": check_split(split),
        "regressor": check_regressor(regressor),
        "folds": check_folds(folds, n, "positions (rows of E)"),
        "pairs": None if pairs is None else v.integer(pairs, "pairs", minimum=2, maximum=n * n),
    }
    bar = _Progress(f"probing {name}", seeds, bool(progress) and _is_terminal(sys.stderr))
    absolute, order = _run_seeds(table, seeds, bar, protocol)
    noise = None
    if baselines:
        from .baselines import measure_baselines

        noise = measure_baselines(
            table, range(seeds), lambda t, seed: _measures(t, seed, chosen, protocol)
        )
    return ProbeReport(
        name=name,
        shape=(int(table.shape[0]), int(table.shape[1])),
        absolute=tuple(absolute),
        order=tuple(order),
        cosine=cosine_similarity(table),
        informativeness=informativeness(table),
        properties=position_properties(table) if "properties" in chosen else None,
        toeplitz=toeplitz_fit(table @ table.T) if "toeplitz" in chosen else None,
        locality=(
            attention_locality_symmetry(position_attention(table)) if "locality" in chosen else None
        ),
        baselines=noise,
    )


#: The figures of :func:`position_properties` the baselines take.
_PROPERTY_MEASURES = (
    "monotonicity_forward",
    "monotonicity_backward",
    "translation_invariance",
    "symmetry",
)


def _measures(
    table: np.ndarray, seed: int, extras: Tuple[str, ...], protocol: Dict[str, Any]
) -> Dict[str, float]:
    """Every figure of the report of `table` for one `seed`, by name."""
    how = (protocol["split"], protocol["regressor"])
    info = informativeness(table)
    order = relative_order_classification(
        table,
        seed=seed,
        pairs=protocol["pairs"],
        folds=protocol["folds"],
        split=how[0],
        regressor=how[1],
    )
    out = {
        "mae": absolute_position_fit(table, protocol["folds"], seed, False, *how)[0].mae,
        "order_error": order.error_rate,
        "rank_90": float(info.rank_for(0.9)),
        "rank_99": float(info.rank_for(0.99)),
    }
    out.update(_extra_measures(table, extras))
    return out


def _extra_measures(table: np.ndarray, extras: Tuple[str, ...]) -> Dict[str, float]:
    """The figures of the analyses `extras` of `table`, by name (no seed: they
    are deterministic)."""
    out: Dict[str, float] = {}
    if "properties" in extras:
        props = position_properties(table)
        out.update({m: float(getattr(props, m)) for m in _PROPERTY_MEASURES})
    if "toeplitz" in extras:
        out["toeplitz_r2"] = float(toeplitz_fit(table @ table.T).r2)
    if "locality" in extras:
        loc = attention_locality_symmetry(position_attention(table))
        out["locality"] = loc.locality
        out["attention_symmetry"] = loc.symmetry
    return out


def noise_lines(
    table: ArrayLike, extras: Iterable[str], seeds: int
) -> Tuple[Dict[str, Dict[str, Any]], List[str]]:
    """The baselines of the analyses `extras` alone (without the probes), for
    seeds ``0 .. seeds-1``: ``({kind: {measure: Baseline}}, lines)``, a line
    per analysis as :meth:`ProbeReport.summaries` prints them."""
    from .baselines import measure_baselines

    chosen = _extras(list(extras))
    checked = _table(table, min_rows=5, max_rows=MAX_POSITIONS)
    seeds = v.integer(seeds, "seeds", minimum=1)
    noise = measure_baselines(checked, range(seeds), lambda t, _: _extra_measures(t, chosen))
    shell = ProbeReport(
        name="",
        shape=(int(checked.shape[0]), int(checked.shape[1])),
        absolute=tuple(
            AbsolutePositionResult(0.0, np.zeros(1), np.zeros(1), s) for s in range(seeds)
        ),
        order=(RelativeOrderResult(0.0, np.zeros(1), np.zeros((1, 2), np.int64), 0),),
        cosine=np.zeros((1, 1)),
        informativeness=Informativeness(np.ones(1), np.ones(1), False),
        baselines=noise,
    )
    groups = {
        "properties": _PROPERTY_MEASURES,
        "toeplitz": ("toeplitz_r2",),
        "locality": ("locality", "attention_symmetry"),
    }
    return noise, [line for e in chosen for line in shell._noise(groups[e])]
