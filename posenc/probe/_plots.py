"""The scaffolding of every probe plot, on matplotlib (imported when used).

:func:`figure` is what each result's ``plot`` does around its drawing: the
file format checked first (:func:`plot_format`), a figure on an Agg canvas
that pyplot does not know (of :func:`_figure_class`, which a notebook shows
as a PNG), then the figure returned or written to its path.
"""

from __future__ import annotations

import io
import os
from typing import Any, Callable, List, Optional, Tuple

from .._typing import PathLike
from ._optional import require

_FIGURE_CLASS: Any = None


def _figure_class() -> Any:
    """matplotlib's Figure with ``_repr_png_``, made once matplotlib is imported.

    A Figure made without pyplot has no canvas manager, so IPython shows it
    through its formatter for Figure only once pyplot's inline backend has
    registered that; ``_repr_png_`` shows it either way (the formatter, where
    registered, takes precedence: one image).
    """
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        figure_mod = require("matplotlib.figure", "ProbeReport.plot")

        class ProbeFigure(figure_mod.Figure):  # type: ignore[name-defined]
            """A matplotlib Figure of a :class:`ProbeReport` that a notebook shows as a PNG."""

            def _repr_png_(self) -> bytes:
                buffer = io.BytesIO()
                self.savefig(buffer, format="png")
                return buffer.getvalue()

        # pickle finds it in posenc.probe.report (whose __getattr__ makes it)
        ProbeFigure.__module__ = "posenc.probe.report"
        ProbeFigure.__qualname__ = "ProbeFigure"
        _FIGURE_CLASS = ProbeFigure
    return _FIGURE_CLASS


def _new_figure(figsize: Tuple[float, float], dpi: float) -> Any:
    """A Figure on an Agg canvas, not known to pyplot."""
    agg = require("matplotlib.backends.backend_agg", "ProbeReport.plot")
    fig = _figure_class()(figsize=figsize, dpi=dpi, layout="constrained")
    agg.FigureCanvasAgg(fig)
    return fig


def _finish(fig: Any, path: Optional[PathLike], dpi: float, fmt: Optional[str]) -> Any:
    """The figure without `path`; else written there (format `fmt`) and `path`."""
    if path is None:
        return fig
    fig.savefig(os.fspath(path), dpi=dpi, format=fmt)
    return path


def _figure(
    path: Optional[PathLike], dpi: float, figsize: Tuple[float, float], draw: Callable[[Any], None]
) -> Any:
    """What every probe's ``plot`` does around its drawing: the format of
    `path` checked before anything is drawn, a figure of `figsize` on an Agg
    canvas that `draw` fills, then the figure returned (no `path`) or written
    to `path` and `path` returned."""
    fmt = None if path is None else _plot_format(path)
    fig = _new_figure(figsize=figsize, dpi=dpi)
    draw(fig)
    return _finish(fig, path, dpi, fmt)


def _plot_formats() -> List[str]:
    """The file formats matplotlib can write (its canvas's list), lower case."""
    figure_mod = require("matplotlib.figure", "ProbeReport.plot")
    return sorted(figure_mod.Figure().canvas.get_supported_filetypes())


def _plot_format(path: PathLike, what: str = "plot") -> str:
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
