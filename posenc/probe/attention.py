"""The four terms of a first-layer attention logit: word-word, word-position,
position-word and position-position (:func:`logit_decomposition`,
:class:`LogitDecomposition`), for a BERT-family encoder read from its weights.

Ke, He & Liu, "Rethinking Positional Encoding in Language Pre-training"
(TUPE, ICLR 2021) write the input of the first layer as ``e_i = w_i + p_i``
and expand the logit::

    (w_i + p_i) W_Q W_K^T (w_j + p_j)^T
        = w_i W_Q W_K^T w_j^T  +  w_i W_Q W_K^T p_j^T      (word-word, word-position)
        + p_i W_Q W_K^T w_j^T  +  p_i W_Q W_K^T p_j^T      (position-word, position-position)

A BERT encoder puts a LayerNorm between the sum and the attention, and adds
biases.  Here the LayerNorm is taken as TUPE takes it: linear, once each
token's own statistics are fixed.  With ``mu_i`` and ``s_i`` the mean and
standard deviation (``sqrt(var + eps)``) of the whole sum ``e_i``, and
``gamma``, ``beta`` the LayerNorm's weight and bias,

    LayerNorm(e_i) = gamma * (w_i - mean(w_i)) / s_i  +  beta      (the word part)
                   + gamma * (p_i - mean(p_i)) / s_i                (the position part)

exactly, since centring is linear.  The word part takes what does not depend
on the position: the token-type embedding (added to the word), the
LayerNorm's bias and the query's and key's biases.  The position part is the
position embedding alone, scaled by the token's ``1 / s_i`` (which depends
on its word too: the one non-linear step, frozen).  With those parts the
four terms sum exactly, up to rounding, to the model's layer-0 logits
``q_i . k_j / sqrt(head_dim)`` (before the attention mask), head by head.

The terms are computed in float64 from the stored weights; no model is run.
For models whose positions enter the attention itself, the position terms
of every layer's logits on texts are :func:`posenc.probe.rope_logit_share`
(RoPE) and :func:`posenc.probe.relative_share` (DeBERTa-v2/v3, XLNet).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, TypeVar, overload

import numpy as np

from .._typing import ArrayLike, NDArray, PathLike
from ._readers import _flatten, _open_path
from ._tables import _to_numpy

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_PathT = TypeVar("_PathT", bound=PathLike)

#: The four terms, in the order of :attr:`LogitDecomposition.terms`.
TERMS: Tuple[str, ...] = ("word-word", "word-position", "position-word", "position-position")

#: The weights read, by the end of their names (any prefix before them, as ``bert.``).
_WEIGHTS = {
    "word": "embeddings.word_embeddings.weight",
    "position": "embeddings.position_embeddings.weight",
    "token_type": "embeddings.token_type_embeddings.weight",
    "ln_weight": "embeddings.LayerNorm.weight",
    "ln_bias": "embeddings.LayerNorm.bias",
    "q_weight": "encoder.layer.0.attention.self.query.weight",
    "q_bias": "encoder.layer.0.attention.self.query.bias",
    "k_weight": "encoder.layer.0.attention.self.key.weight",
    "k_bias": "encoder.layer.0.attention.self.key.bias",
}
_OPTIONAL = ("token_type",)


@dataclass(frozen=True, repr=False)
class LogitDecomposition:
    """The four terms of every layer-0 attention logit of one token sequence:
    the result of :func:`logit_decomposition`.

    Attributes
    ----------
    name : str
        What was decomposed.
    token_ids : ndarray of shape (n,)
        The tokens, at positions ``0 .. n-1``.
    terms : ndarray of shape (4, heads, n, n), float64
        ``terms[t, h, i, j]``: term :data:`TERMS` ``[t]`` of head ``h``'s
        logit of query ``i`` for key ``j`` (scaled by ``1 / sqrt(head_dim)``
        as the logit is).
    mean_abs : ndarray of shape (heads, 4)
        Mean of ``|term|`` over the ``n x n`` pairs, per head.
    share : ndarray of shape (heads, 4)
        ``mean_abs`` over its sum across the four terms: each term's share
        of the logit's magnitude.
    correlation : ndarray of shape (heads, 4)
        Pearson correlation, over the ``n x n`` pairs, of each term with the
        whole logit (``nan`` for a constant term).
    """

    name: str
    token_ids: np.ndarray
    terms: np.ndarray
    mean_abs: np.ndarray = field(init=False)
    share: np.ndarray = field(init=False)
    correlation: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        heads = self.terms.shape[1]
        flat = self.terms.reshape(4, heads, -1)
        mean_abs = np.abs(flat).mean(axis=2).T
        total = flat.sum(axis=0)
        corr = np.full((heads, 4), np.nan)
        for h in range(heads):
            for t in range(4):
                a, b = flat[t, h] - flat[t, h].mean(), total[h] - total[h].mean()
                denominator = np.sqrt((a * a).sum() * (b * b).sum())
                if denominator > 0:
                    corr[h, t] = (a * b).sum() / denominator
        object.__setattr__(self, "mean_abs", mean_abs)
        object.__setattr__(self, "share", mean_abs / mean_abs.sum(axis=1, keepdims=True))
        object.__setattr__(self, "correlation", corr)

    @property
    def heads(self) -> int:
        """The number of heads."""
        return int(self.terms.shape[1])

    @property
    def logits(self) -> NDArray[np.float64]:
        """The four terms summed: the layer-0 logits, shape ``(heads, n, n)``."""
        return self.terms.sum(axis=0)

    def __repr__(self) -> str:
        n = self.terms.shape[2]
        shares = ", ".join(f"{t} {s:.0%}" for t, s in zip(TERMS, self.share.mean(axis=0)))
        return f"LogitDecomposition({self.name!r}: {n} tokens, {self.heads} heads; {shares})"

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (``json.dumps`` takes it; a
        correlation that is not defined is ``None``)."""

        def rows(values: np.ndarray) -> List[List[Optional[float]]]:
            return [[None if np.isnan(x) else float(x) for x in row] for row in values]

        return {
            "name": self.name,
            "token_ids": [int(t) for t in self.token_ids],
            "heads": self.heads,
            "terms": list(TERMS),
            "mean_abs": rows(self.mean_abs),
            "share": rows(self.share),
            "correlation": rows(self.correlation),
        }

    def to_markdown(self) -> str:
        """A Markdown table, a row per head and one for their mean: each
        term's mean ``|term|``, its share and its correlation with the logit."""
        lines = [
            "| head | " + " | ".join(TERMS) + " |",
            "|---:|" + "---:|" * 4,
        ]

        def cells(mean_abs: np.ndarray, share: np.ndarray, corr: np.ndarray) -> str:
            return " | ".join(
                f"{m:.2f} ({s:.0%}, r {c:+.2f})" for m, s, c in zip(mean_abs, share, corr)
            )

        for h in range(self.heads):
            lines.append(f"| {h} | {cells(self.mean_abs[h], self.share[h], self.correlation[h])} |")
        lines.append(
            "| mean | "
            + cells(
                self.mean_abs.mean(axis=0),
                self.share.mean(axis=0),
                np.nanmean(self.correlation, axis=0),
            )
            + " |"
        )
        n = self.terms.shape[2]
        lines += [
            "",
            f"{self.name}, layer 0, {n} tokens: mean |term| over the {n} x {n} logits "
            "(share of the four, correlation r with the whole logit).",
        ]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    @overload
    def plot(
        self, path: None = None, *, head: Optional[int] = None, dpi: float = 110
    ) -> Figure: ...

    @overload
    def plot(self, path: _PathT, *, head: Optional[int] = None, dpi: float = 110) -> _PathT: ...

    def plot(
        self, path: Optional[PathLike] = None, *, head: Optional[int] = None, dpi: float = 110
    ) -> Any:
        """One figure: the four terms as heatmaps (of one head, or averaged
        over the heads), each term's share per head, and its correlation
        with the logit per head.

        Drawn without pyplot, as :meth:`ProbeReport.plot`: without `path`
        the Figure is returned; with one it is written in the format its
        extension names and `path` is returned.
        """
        from ._plots import _figure

        if head is not None and not (
            isinstance(head, (int, np.integer)) and 0 <= head < self.heads
        ):
            raise ValueError(f"head must be None or an integer in [0, {self.heads}), got {head!r}")

        def draw(fig: Any) -> None:
            n = self.terms.shape[2]
            which = "mean over heads" if head is None else f"head {head}"
            fig.suptitle(f"{self.name}: layer-0 logit in four terms ({n} tokens, {which})")
            grid = fig.add_gridspec(2, 4)
            maps = self.terms.mean(axis=1) if head is None else self.terms[:, head]
            limit = float(np.abs(maps).max()) or 1.0
            for t in range(4):
                ax = fig.add_subplot(grid[0, t])
                im = ax.imshow(maps[t], cmap="RdBu_r", vmin=-limit, vmax=limit)
                ax.set_title(TERMS[t])
                ax.set_xlabel("key position j")
                if t == 0:
                    ax.set_ylabel("query position i")
            fig.colorbar(im, ax=fig.axes[:4], shrink=0.8)

            heads = np.arange(self.heads)
            ax = fig.add_subplot(grid[1, :2])
            bottom = np.zeros(self.heads)
            for t in range(4):
                ax.bar(heads, self.share[:, t], bottom=bottom, label=TERMS[t], color=f"C{t}")
                bottom += self.share[:, t]
            ax.set_ylim(0, 1.15)
            ax.set_xticks(heads)
            ax.set_xlabel("head")
            ax.set_ylabel("share of mean |term|")
            ax.set_title("each term's share of the logit's magnitude")
            ax.legend(fontsize=8, loc="upper center", ncol=4)

            ax = fig.add_subplot(grid[1, 2:])
            for t in range(4):
                ax.plot(heads, self.correlation[:, t], "o-", label=TERMS[t], color=f"C{t}")
            ax.axhline(0, color="grey", linewidth=0.8)
            ax.set_ylim(-1.05, 1.05)
            ax.set_xticks(heads)
            ax.set_xlabel("head")
            ax.set_ylabel("Pearson r with the logit")
            ax.set_title("each term's correlation with the logit")

        return _figure(path, dpi, (14, 8), draw)


def _weights(source: Any) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
    """The weights of :data:`_WEIGHTS` in `source`, and its config (what of
    it is found: a model directory's ``config.json``, a model's ``config``)."""
    config: Dict[str, Any] = {}
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        stored: Any = _open_path(path)
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        config_file = os.path.join(folder, "config.json")
        if os.path.isfile(config_file):
            with open(config_file, encoding="utf-8") as f:
                loaded = json.load(f)
            if isinstance(loaded, dict):
                config = loaded
        where = path
    elif isinstance(source, Mapping):
        stored, where = _flatten(source), "the state dict"
    elif callable(getattr(source, "state_dict", None)):
        stored, where = source.state_dict(), f"the {type(source).__name__}'s state dict"
        model_config = getattr(source, "config", None)
        if model_config is not None:
            config = {
                k: getattr(model_config, k)
                for k in ("num_attention_heads", "layer_norm_eps")
                if hasattr(model_config, k)
            }
    else:
        raise TypeError(
            "source must be a path, a state dict or a model with state_dict(), "
            f"not {type(source).__name__}"
        )
    keys = list(stored.keys())
    found: Dict[str, np.ndarray] = {}
    for part, suffix in _WEIGHTS.items():
        matches = [k for k in keys if k == suffix or k.endswith("." + suffix)]
        if len(matches) > 1:
            raise ValueError(f"{where} holds several weights ending in {suffix}: {matches}")
        if not matches:
            if part in _OPTIONAL:
                continue
            raise ValueError(
                f"{where} has no weight ending in {suffix}; logit_decomposition reads "
                "a BERT-family encoder (word and position embeddings, a LayerNorm, "
                "layer 0's query and key)"
            )
        found[part] = np.asarray(_to_numpy(stored[matches[0]]), dtype=np.float64)
    return found, config


def logit_decomposition(
    source: object,
    token_ids: ArrayLike,
    *,
    token_type_ids: Optional[ArrayLike] = None,
    heads: Optional[int] = None,
    layer_norm_eps: Optional[float] = None,
    name: Optional[str] = None,
) -> LogitDecomposition:
    """The four terms of every layer-0 attention logit of a BERT-family encoder.

    Word-word, word-position, position-word and position-position, as TUPE
    (Ke et al. 2021) plots them, with the embedding LayerNorm taken linearly
    at each token's own scale (the module's docstring gives the algebra):
    the four sum, up to rounding, to the model's layer-0 logits
    ``q_i . k_j / sqrt(head_dim)`` before the attention mask.

    Parameters
    ----------
    source : str, os.PathLike, mapping or model
        A model directory or checkpoint file (as :func:`load_position_embeddings`
        reads them), a state dict, or a model with ``state_dict()`` (as
        transformers' ``BertModel``).  Read: the word, position and
        (optional) token-type embeddings, the embedding LayerNorm, and the
        first layer's query and key; any prefix before their names
        (``bert.``) is allowed.
    token_ids : array_like of int, shape (n,)
        The tokens, at positions ``0 .. n-1``.
    token_type_ids : array_like of int, shape (n,), optional
        Segment ids (zeros by default); their embedding is added to the word.
    heads : int, optional
        The number of attention heads; by default ``num_attention_heads``
        of the directory's ``config.json`` or of the model's config.
    layer_norm_eps : float, optional
        The LayerNorm's epsilon; by default the config's ``layer_norm_eps``,
        else ``1e-12`` (BERT's).
    name : str, optional
        What is decomposed (shown in the table and the plot).

    Returns
    -------
    LogitDecomposition
        The terms (float64, shape ``(4, heads, n, n)``), per-head mean
        ``|term|``, shares and correlations, ``.to_markdown()`` and ``.plot()``.

    Raises
    ------
    ValueError
        A weight missing (or several candidates), no head count found or one
        that does not divide the width, token ids out of the vocabulary or
        past the position table.

    Examples
    --------
    >>> from transformers import BertConfig, BertModel
    >>> from posenc.probe import TERMS, logit_decomposition
    >>> bert = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1,
    ...                             num_attention_heads=2, intermediate_size=64)).eval()
    >>> d = logit_decomposition(bert, [2, 7, 1, 8, 2, 8])
    >>> d.terms.shape  # (term, head, query, key)
    (4, 2, 6, 6)
    >>> TERMS
    ('word-word', 'word-position', 'position-word', 'position-position')
    >>> d.share.sum(axis=1).round(6).tolist()  # the four shares of each head's logits
    [1.0, 1.0]
    """
    weights, config = _weights(source)
    if heads is None:
        heads = config.get("num_attention_heads")
        if heads is None:
            raise ValueError("heads: no config gives num_attention_heads; pass heads=")
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
        raise ValueError(f"heads must be a positive integer, got {heads!r}")
    heads = int(heads)
    eps = layer_norm_eps if layer_norm_eps is not None else config.get("layer_norm_eps", 1e-12)
    eps = float(eps)
    if not (eps >= 0 and np.isfinite(eps)):
        raise ValueError(f"layer_norm_eps must be finite and >= 0, got {eps!r}")
    word_table, position_table = weights["word"], weights["position"]
    dim = word_table.shape[1]
    if dim % heads:
        raise ValueError(f"heads: {heads} heads do not divide the width {dim}")

    ids = _ids(token_ids, "token_ids", word_table.shape[0])
    n = len(ids)
    if n > position_table.shape[0]:
        raise ValueError(
            f"token_ids: {n} tokens, but the position table has {position_table.shape[0]} rows"
        )
    word = word_table[ids]
    if "token_type" in weights:
        types = np.zeros(n, dtype=np.int64)
        if token_type_ids is not None:
            types = _ids(token_type_ids, "token_type_ids", weights["token_type"].shape[0])
            if len(types) != n:
                raise ValueError(f"token_type_ids: {len(types)} ids for {n} tokens")
        word = word + weights["token_type"][types]
    elif token_type_ids is not None:
        raise ValueError("token_type_ids: the model has no token-type embedding")
    position = position_table[:n]

    # LayerNorm at each token's own statistics, split into its word and position parts
    total = word + position
    scale = 1.0 / np.sqrt(total.var(axis=1, keepdims=True) + eps)
    gamma, beta = weights["ln_weight"], weights["ln_bias"]
    word_part = gamma * (word - word.mean(axis=1, keepdims=True)) * scale + beta
    position_part = gamma * (position - position.mean(axis=1, keepdims=True)) * scale

    head_dim = dim // heads

    def project(x: np.ndarray, w: str, b: Optional[str]) -> np.ndarray:
        y = x @ weights[w].T  # torch Linear: x W^T + b
        if b is not None:
            y = y + weights[b]
        return y.reshape(n, heads, head_dim).transpose(1, 0, 2)  # (heads, n, head_dim)

    q_word = project(word_part, "q_weight", "q_bias")
    q_pos = project(position_part, "q_weight", None)
    k_word = project(word_part, "k_weight", "k_bias")
    k_pos = project(position_part, "k_weight", None)
    scaling = 1.0 / np.sqrt(head_dim)
    terms = np.stack(
        [
            q_word @ k_word.transpose(0, 2, 1),
            q_word @ k_pos.transpose(0, 2, 1),
            q_pos @ k_word.transpose(0, 2, 1),
            q_pos @ k_pos.transpose(0, 2, 1),
        ]
    )
    terms *= scaling
    if name is None:
        name = "model"
    elif not isinstance(name, str):
        raise TypeError(f"name must be a string or None, not {type(name).__name__}")
    return LogitDecomposition(name=name, token_ids=ids.copy(), terms=terms)


def _ids(values: ArrayLike, what: str, vocabulary: int) -> np.ndarray:
    arr = np.asarray(_to_numpy(values))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D sequence, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{what} must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.min() < 0 or arr.max() >= vocabulary:
        raise ValueError(f"{what} must lie in [0, {vocabulary}), got {arr.min()}..{arr.max()}")
    return arr
