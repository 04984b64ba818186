"""Perplexity by context length, by sliding windows, and the loss by position.

:func:`perplexity_by_length` runs the standard sliding-window evaluation of
Hugging Face's guide ("Perplexity of fixed-length models") at each length
``L``: windows of ``L`` tokens whose starts are ``stride`` apart, the last
one ending with the text, each scoring only the tokens no window before it
scored (a window's first token is never scored: nothing before it in the
window predicts it).  No token is scored twice: with a stride below ``L``
every token but the text's first is scored, with up to ``L - 1`` tokens of
context; with windows side by side (the default) every token but each
window's first.  The perplexity is ``exp`` of the mean
negative log-likelihood over the scored tokens, each token's loss the
cross-entropy of the model's logits (in their own dtype, at least float32,
as transformers' loss takes them), summed in float64.

The same forward passes give the loss by position: the mean loss of the
token at each position ``p`` of a window (predicted from the ``p`` tokens
before it), over every window of that length, all its tokens counted
whether the perplexity scored them or not.  Where a length is past what a
model was trained on, this is the curve that shows where it breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, TypeVar

import numpy as np

from .. import _validate as v
from .._typing import PathLike
from . import _methods
from ._common import (
    Plotted,
    Progress,
    device_of,
    evaluating,
    floats,
    lengths_of,
    method_label,
    token_ids,
    torch_module,
    vocab_size,
)
from ._methods import NONE

if TYPE_CHECKING:
    pass

_PathT = TypeVar("_PathT", bound=PathLike)

#: The position bins of :meth:`PerplexityByLength.loss_by_position` by default.
BINS = 32


def windows(n: int, length: int, stride: int) -> List[Tuple[int, int, int]]:
    """The windows of the sliding evaluation of `n` tokens at `length`:
    ``(begin, end, first)`` each, the window ``tokens[begin:end]`` scoring
    the tokens ``first .. end - 1`` (those no window before it scored).

    Examples
    --------
    >>> windows(10, 4, 2)
    [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    """
    out = []
    prev_end = 0
    for begin in range(0, n, stride):
        end = min(begin + length, n)
        out.append((begin, end, max(prev_end, begin + 1)))
        prev_end = end
        if end == n:
            break
    return out


def token_losses(model: Any, ids: Any, torch: Any) -> np.ndarray:
    """``(len(ids) - 1,)`` float64: the loss of each token of the row of ids
    `ids` (a 1-D tensor on the model's device) but the first, from one
    forward pass of the model (its own position ids, no cache)."""
    with torch.no_grad():
        logits = model(input_ids=ids[None], use_cache=False).logits[0, :-1]
        if logits.dtype not in (torch.float32, torch.float64):
            logits = logits.float()
        loss = torch.nn.functional.cross_entropy(logits, ids[1:], reduction="none")
    return loss.double().cpu().numpy()


def bin_edges(length: int, bins: int) -> np.ndarray:
    """The edges of at most `bins` bins of equal width over the positions
    ``1 .. length - 1`` of a window (position 0 has no loss)."""
    return np.unique(np.rint(np.linspace(1, length, bins + 1)).astype(np.int64))


@dataclass(frozen=True, repr=False)
class PerplexityByLength(Plotted):
    """Perplexity at each context length and the loss by position: the
    result of :func:`perplexity_by_length`.

    Attributes
    ----------
    lengths : tuple of int
        The context lengths (window sizes), ascending.
    strides : tuple of int
        The stride of each length's windows.
    nll : ndarray of shape (n_lengths,)
        Mean negative log-likelihood (nats) of the scored tokens.
    scored : ndarray of shape (n_lengths,)
        How many tokens each length scored.
    windows : ndarray of shape (n_lengths,)
        How many windows (forward passes) each length ran.
    position_sum, position_count : tuple of ndarray of shape (length,)
        Per length, the summed loss of the token at each window position
        and how many windows had one there (position 0: none).
    n_tokens : int
        The tokens of the text evaluated.
    method : str
        The scaling method the model ran with (``"none"``: as loaded).
    bins : int
        The position bins :meth:`loss_by_position` makes by default.
    perplexity : ndarray of shape (n_lengths,)
        ``exp(nll)``.
    """

    lengths: Tuple[int, ...]
    strides: Tuple[int, ...]
    nll: np.ndarray
    scored: np.ndarray
    windows: np.ndarray
    position_sum: Tuple[np.ndarray, ...]
    position_count: Tuple[np.ndarray, ...]
    n_tokens: int
    method: str = NONE
    bins: int = BINS
    perplexity: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "perplexity", np.exp(self.nll))

    def __repr__(self) -> str:
        cells = ", ".join(f"{n}: {p:.4g}" for n, p in zip(self.lengths, self.perplexity))
        return f"PerplexityByLength({self.method!r}, {self.n_tokens} tokens; {cells})"

    def _index(self, length: int) -> int:
        if length not in self.lengths:
            raise ValueError(f"length {length} was not measured; the lengths: {self.lengths}")
        return self.lengths.index(length)

    def position_loss(self, length: int) -> np.ndarray:
        """``(length,)``: the mean loss at each window position (NaN where no
        window had a token: position 0)."""
        i = self._index(length)
        count = self.position_count[i]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, self.position_sum[i] / np.maximum(count, 1), np.nan)

    def loss_by_position(
        self, length: int, bins: Optional[int] = None
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(edges, mean_loss, count)`` of the window positions of `length`
        in at most `bins` bins of equal width (:attr:`bins` by default):
        bin ``b`` holds the positions ``edges[b] .. edges[b + 1] - 1``, its
        mean loss over every token there of every window, and their count."""
        i = self._index(length)
        bins = self.bins if bins is None else v.integer(bins, "bins", minimum=1)
        edges = bin_edges(length, bins)
        total = np.add.reduceat(self.position_sum[i], edges[:-1])
        count = np.add.reduceat(self.position_count[i], edges[:-1])
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        return edges, mean, count

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (``json.dumps`` takes them): the
        loss by position in :attr:`bins` bins per length."""
        by_position = {}
        for n in self.lengths:
            edges, mean, count = self.loss_by_position(n)
            by_position[str(n)] = {
                "edges": edges.tolist(),
                "mean_loss": floats(mean),
                "count": count.astype(np.int64).tolist(),
            }
        return {
            "method": self.method,
            "n_tokens": int(self.n_tokens),
            "lengths": list(self.lengths),
            "strides": list(self.strides),
            "perplexity": floats(self.perplexity),
            "nll": floats(self.nll),
            "scored": self.scored.astype(np.int64).tolist(),
            "windows": self.windows.astype(np.int64).tolist(),
            "loss_by_position": by_position,
        }

    def to_markdown(self) -> str:
        """A Markdown table: a row per length."""
        lines = [
            f"Sliding-window perplexity ({self.method}, {self.n_tokens} tokens):",
            "",
            "| length | stride | perplexity | NLL (nats) | windows | tokens scored |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for k, n in enumerate(self.lengths):
            lines.append(
                f"| {n} | {self.strides[k]} | {self.perplexity[k]:.4g} | {self.nll[k]:.4f} "
                f"| {int(self.windows[k])} | {int(self.scored[k])} |"
            )
        return "\n".join(lines)

    _size = (11.0, 4.2)

    def _draw(self, fig: Any) -> None:
        """Perplexity against length, and the loss by position (a line per
        length)."""
        ax1, ax2 = fig.subplots(1, 2)
        draw_perplexity(ax1, {self.method: self})
        for n in self.lengths:
            edges, mean, _ = self.loss_by_position(n)
            ax2.plot((edges[:-1] + edges[1:] - 1) / 2, mean, marker=".", label=f"{n}")
        ax2.set_xlabel("position in the window")
        ax2.set_ylabel("mean loss (nats)")
        ax2.set_title(f"loss by position ({self.method})", fontsize=10)
        ax2.legend(title="length", fontsize=7)


def draw_perplexity(ax: Any, results: Dict[str, PerplexityByLength]) -> None:
    """Perplexity against length on `ax`, a line per method."""
    for i, (label, r) in enumerate(results.items()):
        ax.plot(r.lengths, r.perplexity, marker="o", color=f"C{i % 10}", label=label)
    ax.set_xscale("log", base=2)
    values = np.concatenate([r.perplexity for r in results.values()])
    values = values[np.isfinite(values) & (values > 0)]
    if values.size and values.max() > 10 * values.min():  # a model past its length: log scale
        ax.set_yscale("log")
    lengths = sorted({n for r in results.values() for n in r.lengths})
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("perplexity")
    ax.set_title("sliding-window perplexity", fontsize=10)
    ax.legend(fontsize=7)


def checked_strides(stride: Any, lengths: Sequence[int]) -> Tuple[int, ...]:
    """Each length's stride: `stride` (an int up to the shortest length), or
    the length itself (windows side by side) when None."""
    if stride is None:
        return tuple(lengths)
    s = v.integer(stride, "stride", minimum=1)
    if s > min(lengths):
        raise ValueError(
            f"stride must be at most the shortest length ({min(lengths)}), got {s}: a longer "
            "stride would leave tokens between the windows unscored"
        )
    return tuple(s for _ in lengths)


def prepared_tokens(model: Any, tokens: Any, lengths: Sequence[int], max_tokens: Any) -> np.ndarray:
    """The token ids evaluated: `tokens` checked against the model's
    vocabulary, cut to `max_tokens`, at least as many as the longest length."""
    ids = token_ids(tokens, vocab=vocab_size(model))
    if max_tokens is not None:
        ids = ids[: v.integer(max_tokens, "max_tokens", minimum=2)]
    if ids.size < max(lengths):
        raise ValueError(
            f"tokens: {ids.size} tokens, fewer than the longest length {max(lengths)}; give a "
            "longer text or shorter lengths"
        )
    return ids


def measure(
    model: Any,
    ids: np.ndarray,
    lengths: Tuple[int, ...],
    strides: Tuple[int, ...],
    bins: int,
    label: str,
    bar: Progress,
) -> PerplexityByLength:
    """The evaluation at every length of the model as it is (no method applied here)."""
    torch = torch_module("perplexity_by_length")
    row = torch.as_tensor(ids, device=device_of(model))
    nll, scored, count_w, sums, counts = [], [], [], [], []
    with evaluating(model):
        for length, stride in zip(lengths, strides):
            total, n_scored = 0.0, 0
            position_sum = np.zeros(length)
            position_count = np.zeros(length, dtype=np.int64)
            spans = windows(ids.size, length, stride)
            for begin, end, first in spans:
                losses = token_losses(model, row[begin:end], torch)
                total += float(losses[first - begin - 1 :].sum())
                n_scored += end - first
                position_sum[1 : end - begin] += losses
                position_count[1 : end - begin] += 1
                bar.step(f"{label}: perplexity at {length}")
            nll.append(total / n_scored)
            scored.append(n_scored)
            count_w.append(len(spans))
            sums.append(position_sum)
            counts.append(position_count)
    return PerplexityByLength(
        lengths=lengths,
        strides=strides,
        nll=np.array(nll),
        scored=np.array(scored, dtype=np.int64),
        windows=np.array(count_w, dtype=np.int64),
        position_sum=tuple(sums),
        position_count=tuple(counts),
        n_tokens=int(ids.size),
        method=label,
        bins=bins,
    )


def window_count(n: int, lengths: Sequence[int], strides: Sequence[int]) -> int:
    """The forward passes of the evaluation of `n` tokens (for a progress bar)."""
    return sum(len(windows(n, length, s)) for length, s in zip(lengths, strides))


def perplexity_by_length(
    model: Any,
    tokens: Any,
    lengths: Any,
    *,
    stride: Optional[int] = None,
    method: Any = NONE,
    bins: int = BINS,
    max_tokens: Optional[int] = None,
    progress: bool = False,
) -> PerplexityByLength:
    """Sliding-window perplexity at each context length, and the loss by position.

    Parameters
    ----------
    model : transformers causal LM
        A loaded model (``AutoModelForCausalLM``), run on its own device in
        eval mode (its flags restored after), without gradients.
    tokens : sequence of int, ndarray or tensor
        The text's token ids (one sequence: join documents before, as
        Hugging Face's recipe joins a data set's texts with blank lines), at
        least as many as the longest length.
    lengths : int or sequence of int
        The context lengths: each evaluation runs windows of this many tokens.
    stride : int, optional
        The distance between window starts (at most the shortest length);
        by default each length's own, windows side by side.  A smaller
        stride gives every scored token more context, at more forward passes.
    method : str, dict or transformers config
        The scaling method the model runs with (``"none"``: as loaded;
        ``"yarn:4"``, a rope dict, a config: applied by
        ``posenc.hf.patch(model, scaling=method)`` for the run, removed after).
    bins : int
        The position bins of the loss by position in the result's table,
        JSON and plot (the sums per position are kept whole).
    max_tokens : int, optional
        Only the first `max_tokens` tokens are evaluated (at every length).
    progress : bool
        A progress bar on stderr, when it is a terminal.

    Returns
    -------
    PerplexityByLength
    """
    lengths = lengths_of(lengths)
    strides = checked_strides(stride, lengths)
    bins = v.integer(bins, "bins", minimum=1)
    ids = prepared_tokens(model, tokens, lengths, max_tokens)
    bar = Progress(window_count(ids.size, lengths, strides), progress)
    try:
        with _methods.with_method(model, _methods.prepared(model, method)) as run:
            return measure(run, ids, lengths, strides, bins, method_label(method), bar)
    finally:
        bar.close()
