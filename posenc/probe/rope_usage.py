"""Which rotary frequencies a model uses, from its weights alone (Barbero et
al., "Round and Round We Go! What Makes Rotary Positional Encodings Useful?",
ICLR 2025): :func:`rope_frequency_usage` and :class:`RopeFrequencyUsage`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from .. import _validate as v
from .analyses import _table


@dataclass(frozen=True)
class RopeFrequencyUsage:
    """The norm of each rotary pair's projection rows, per layer and head.

    Attributes
    ----------
    usage : ndarray of shape (n_layers, n_heads, head_dim // 2)
        ``usage[l, h, k]``: the Frobenius norm of the two rows of layer
        ``l``'s projection that make pair ``k`` of head ``h`` (the rows the
        rotation at frequency ``base ** (-2k / head_dim)`` turns together).
        A pair whose rows are small contributes little to the logits
        whatever its rotation.
    frequencies : ndarray of shape (head_dim // 2,)
        ``base ** (-2k / head_dim)``, radians per position.
    layout : str
        ``"half"`` (pair ``k`` is rows ``k`` and ``k + head_dim / 2`` of a
        head, transformers' Llama) or ``"interleaved"`` (rows ``2k, 2k + 1``).
    """

    usage: np.ndarray
    frequencies: np.ndarray
    layout: str

    def share(self) -> np.ndarray:
        """``usage ** 2`` normalised to sum to 1 over the pairs of each head."""
        energy = self.usage**2
        total = energy.sum(axis=-1, keepdims=True)
        return np.divide(energy, total, out=np.zeros_like(energy), where=total > 0)

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """A heatmap: rows are (layer, head), columns the pairs from the
        fastest frequency to the slowest; the colour is :meth:`share`."""
        from .report import _new_figure, _plot_format

        fmt = None if path is None else _plot_format(path)
        n_layers, n_heads, n_pairs = self.usage.shape
        fig = _new_figure(figsize=(8, 2 + 0.15 * n_layers * n_heads), dpi=dpi)
        ax = fig.add_subplot(1, 1, 1)
        im = ax.imshow(
            self.share().reshape(n_layers * n_heads, n_pairs), aspect="auto", cmap="viridis"
        )
        ax.set_xlabel("rotary pair k (frequency base^(-2k/d): fast to slow)")
        ax.set_ylabel("layer x head")
        ax.set_title("share of each head's projection norm² per rotary pair")
        fig.colorbar(im, ax=ax)
        if path is None:
            return fig
        fig.savefig(os.fspath(path), dpi=dpi, format=fmt)
        return path


def rope_frequency_usage(
    weights: Sequence[Any],
    n_heads: int,
    *,
    layout: str = "half",
    base: float = 10000.0,
) -> RopeFrequencyUsage:
    """Per layer, head and rotary pair, the norm of a q (or k) projection's rows.

    Parameters
    ----------
    weights : sequence of array_like, each of shape (n_heads * head_dim, d_model)
        One projection weight per layer, output features first (as torch's
        ``Linear`` stores them: ``model.layers[l].self_attn.q_proj.weight``);
        a single 2-D array is one layer.
    n_heads : int
        The heads the output features split into (the key/value heads for a
        k projection with grouped queries).
    layout : {"half", "interleaved"}
        How a head's rows pair up (see :class:`RopeFrequencyUsage`).
    base : float
        The rotary base, for :attr:`RopeFrequencyUsage.frequencies`.

    Raises
    ------
    ValueError
        The layers' shapes differ, the rows do not split into `n_heads`
        heads of an even size, or `layout` is not one of the two.
    """
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    n_heads = v.integer(n_heads, "n_heads", minimum=1)
    if not isinstance(base, (int, float)) or not np.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number above 1, got {base!r}")
    if isinstance(weights, np.ndarray) and weights.ndim == 2:
        weights = [weights]
    layers = [_table(w, f"weights[{i}]", min_rows=2) for i, w in enumerate(weights)]
    if not layers:
        raise ValueError("weights must hold at least one layer")
    rows, cols = layers[0].shape
    for i, w in enumerate(layers):
        if w.shape != (rows, cols):
            raise ValueError(f"weights[{i}] has shape {w.shape}, weights[0] {(rows, cols)}")
    if rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(
            f"weights: {rows} rows do not split into n_heads={n_heads} heads of an even size"
        )
    head_dim = rows // n_heads
    pairs = head_dim // 2
    stacked = np.stack(layers).reshape(len(layers), n_heads, head_dim, cols)
    if layout == "half":
        first, second = stacked[:, :, :pairs], stacked[:, :, pairs:]
    else:
        first, second = stacked[:, :, 0::2], stacked[:, :, 1::2]
    usage = np.sqrt((first**2).sum(axis=-1) + (second**2).sum(axis=-1))
    frequencies = float(base) ** (-2.0 * np.arange(pairs) / head_dim)
    return RopeFrequencyUsage(usage, frequencies, layout)
