"""Which rotary frequencies a model uses (Barbero et al., "Round and Round We
Go! What Makes Rotary Positional Encodings Useful?", ICLR 2025): from its
q/k projection weights (:func:`rope_frequency_usage`; layer by layer from a
checkpoint or a Hub model, :func:`rope_frequency_usage_from_checkpoint`),
or from the queries and keys of a forward pass on a text
(:func:`rope_activation_usage`); :class:`RopeFrequencyUsage` holds the
norms.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _validate as v
from ._common import noise_line
from ._tables import _table

#: The most rows (layer, head) a usage heat map draws one by one; above it
#: each layer's heads are averaged into one row (and, above it still, blocks
#: of consecutive layers).
MAX_HEATMAP_ROWS = 192

#: The most pixels a usage heat map has on either side.
MAX_HEATMAP_PIXELS = 4096

#: The baselines of the rotary usage, and what the report calls them:
#: ``"random"``, the model run with each ``q_proj`` and ``k_proj`` weight
#: replaced by Gaussian rows of the same norms (:func:`random_projections`;
#: what the rows' norms alone give); ``"shuffled"``, each head's pair norms
#: in a seeded order (:meth:`RopeFrequencyUsage.pairs_shuffled`: the same
#: norms, their frequencies forgotten).
ROPE_KINDS: Dict[str, str] = {
    "random": "q/k projections random, row norms kept",
    "shuffled": "pairs shuffled",
}


def _heat_rows(share: np.ndarray) -> Tuple[np.ndarray, str]:
    """The rows a heat map of `share` (layers, heads, pairs) draws, and their
    label: one per (layer, head) up to :data:`MAX_HEATMAP_ROWS`, else the mean
    over each layer's heads, over blocks of layers where they are too many."""
    n_layers, n_heads, n_pairs = share.shape
    if n_layers * n_heads <= MAX_HEATMAP_ROWS:
        return share.reshape(n_layers * n_heads, n_pairs), "layer x head"
    per_layer = share.mean(axis=1)
    if n_layers <= MAX_HEATMAP_ROWS:
        return per_layer, f"layer (mean over its {n_heads} heads)"
    block = -(-n_layers // MAX_HEATMAP_ROWS)
    starts = np.arange(0, n_layers, block)
    rows = (
        np.add.reduceat(per_layer, starts, axis=0) / np.diff(np.append(starts, n_layers))[:, None]
    )
    return rows, f"layers, {block} a row (mean over their {n_heads} heads)"


def _bounded(figsize: Tuple[float, float], dpi: float) -> Tuple[float, float]:
    """`figsize` scaled down, if need be, to at most :data:`MAX_HEATMAP_PIXELS`
    pixels a side at `dpi`."""
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float)) or not dpi > 0:
        return figsize  # the figure refuses it, by name
    most = (MAX_HEATMAP_PIXELS - 1) / float(dpi)
    scale = min(1.0, most / max(figsize))
    return (figsize[0] * scale, figsize[1] * scale)


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
    what : str
        What was measured (``"q_proj weight rows"``, ``"queries"``, ...).
    bytes_fetched : int or None
        For a Hub model, the bytes received to compute it.
    """

    usage: np.ndarray
    frequencies: np.ndarray
    layout: str
    what: str = "q_proj weight rows"
    bytes_fetched: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values."""
        return {
            "what": self.what,
            "layout": self.layout,
            "frequencies": self.frequencies.tolist(),
            "usage": self.usage.tolist(),
            "share": self.share().tolist(),
            "bytes_fetched": self.bytes_fetched,
        }

    def summary(self) -> str:
        """One sentence: how the norm spreads between the fast and slow halves
        of the pairs, averaged over the layers and heads."""
        share = self.share().mean(axis=(0, 1))
        half = len(share) // 2
        n_layers, n_heads, n_pairs = self.usage.shape
        return (
            f"RoPE frequency usage ({self.what}, {n_layers} layers x {n_heads} heads x "
            f"{n_pairs} pairs): {100 * share[:half].sum():.1f}% of the norm² on the "
            f"fastest half of the frequencies, {100 * share[half:].sum():.1f}% on the slowest; "
            f"the slowest pair {100 * share[-1]:.1f}%."
        )

    def to_markdown(self) -> str:
        """A Markdown table, a row per layer and head: the share of the
        head's norm² on the fastest and the slowest half of the pairs, and on
        the slowest pair."""
        share = self.share()
        half = share.shape[-1] // 2
        lines = [
            "| layer | head | fastest half | slowest half | slowest pair |",
            "|---:|---:|---:|---:|---:|",
        ]
        for layer in range(share.shape[0]):
            for h in range(share.shape[1]):
                s = share[layer, h]
                lines.append(
                    f"| {layer} | {h} | {100 * s[:half].sum():.1f}% | "
                    f"{100 * s[half:].sum():.1f}% | {100 * s[-1]:.1f}% |"
                )
        lines += ["", self.summary()]
        return "\n".join(lines)

    def share(self) -> np.ndarray:
        """``usage ** 2`` normalised to sum to 1 over the pairs of each head."""
        energy = self.usage**2
        total = energy.sum(axis=-1, keepdims=True)
        return np.divide(energy, total, out=np.zeros_like(energy), where=total > 0)

    def slow_half(self) -> float:
        """The share of the norm² on the slowest half of the pairs, mean over
        the layers and heads (the figure :meth:`summary` gives)."""
        share = self.share().mean(axis=(0, 1))
        return float(share[len(share) // 2 :].sum())

    def pairs_shuffled(self, seed: int) -> RopeFrequencyUsage:
        """The ``"shuffled"`` baseline for `seed`: each head's pair norms in
        an order of their own (``numpy.random.default_rng([seed,
        1]).permuted`` along the pairs), the frequencies they went with
        forgotten."""
        usage = np.random.default_rng([seed, 1]).permuted(self.usage, axis=-1)
        return RopeFrequencyUsage(usage, self.frequencies, self.layout, self.what)

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """A heatmap: rows are (layer, head), columns the pairs from the
        fastest frequency to the slowest; the colour is :meth:`share`."""
        from ._plots import _figure

        rows, label = _heat_rows(self.share())

        def draw(fig: Any) -> None:
            ax = fig.add_subplot(1, 1, 1)
            im = ax.imshow(rows, aspect="auto", cmap="viridis")
            ax.set_xlabel("rotary pair k (frequency base^(-2k/d): fast to slow)")
            ax.set_ylabel(label)
            ax.set_title(f"share of each head's norm² per rotary pair ({self.what})")
            fig.colorbar(im, ax=ax)

        return _figure(path, dpi, _bounded((8, 2 + 0.15 * len(rows)), dpi), draw)


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

    Examples
    --------
    >>> from posenc.probe import rope_frequency_usage
    >>> W = np.ones((2 * 8, 32))  # a q projection: 2 heads of head_dim 8, d_model 32
    >>> W[[0, 4]] = 0  # head 0's pair 0 ("half" layout: rows 0 and 0 + 8 / 2)
    >>> usage = rope_frequency_usage([W], n_heads=2)  # one layer
    >>> usage.usage.shape  # (layers, heads, head_dim // 2)
    (1, 2, 4)
    >>> usage.usage[0, 0].tolist()  # the norm of each pair's two rows: sqrt(2 * 32)
    [0.0, 8.0, 8.0, 8.0]
    >>> usage.frequencies.tolist()  # base ** (-2k / head_dim), radians per position
    [1.0, 0.1, 0.01, 0.001]
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


# ---------------------------------------------------------------- a model's config


def _config_get(config: Any, key: str) -> Any:
    if isinstance(config, dict):
        return config.get(key)
    return getattr(config, key, None)


def _rope_layout(config: Any) -> Tuple[np.ndarray, str, int, int, int]:
    """``(inv_freq, layout, head_dim, n_heads, n_kv_heads)`` of a RoPE model's
    config (a config.json dict or a transformers config)."""
    from .. import rope_scaling
    from ..rope import rope_frequencies

    n_heads = _config_get(config, "num_attention_heads")
    if not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError("config: no num_attention_heads; is this a RoPE decoder (Llama-like)?")
    n_kv = _config_get(config, "num_key_value_heads") or n_heads
    head_dim = _config_get(config, "head_dim")
    if not isinstance(head_dim, int):
        hidden = _config_get(config, "hidden_size")
        if not isinstance(hidden, int):
            raise ValueError("config: neither head_dim nor hidden_size is given")
        head_dim = hidden // n_heads
    try:
        inv_freq, _ = rope_frequencies(head_dim, scaling=config)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"config: its rotary frequencies cannot be read: {exc}") from exc
    if 2 * len(inv_freq) != head_dim:
        raise ValueError(
            f"config: only {2 * len(inv_freq)} of the {head_dim} channels of a head are "
            "rotated (partial_rotary_factor); the usage of a partly rotated head is not "
            "measured"
        )
    pairs = rope_scaling.read(config).pairs
    if pairs not in (None, "interleaved"):
        raise ValueError(
            f"config: this model turns its pairs as {pairs!r}; the usage is measured for "
            "Llama's halves and GPT-J's interleaved pairs only"
        )
    return np.asarray(inv_freq), pairs or "half", head_dim, n_heads, int(n_kv)


_LAYER_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.([qk])_proj\.weight$")


def _projection_keys(
    keys: Sequence[str], projection: str, where: str, config: Any = None
) -> List[str]:
    found: Dict[int, str] = {}
    for key in keys:
        m = _LAYER_KEY.search(key)
        if m and m.group(2) == projection:
            layer = int(m.group(1))
            if layer in found:
                raise ValueError(
                    f"{where}: two tensors for layer {layer}'s {projection}_proj: "
                    f"{found[layer]!r} and {key!r}"
                )
            found[layer] = key
    if not found:
        from .biases import APPLIES, model_kind

        kind = model_kind(config or {})
        model_type = _config_get(config or {}, "model_type") or "no model_type"
        if any(k.endswith("relative_attention_bias.weight") for k in keys):
            why = (
                f"this is not a RoPE model ({model_type}, t5): a T5-style model, whose positions "
                "are learned relative attention biases (…relative_attention_bias.weight), has no "
                f"rotary pairs to measure: try --analyses {APPLIES['t5']}"
            )
        elif kind == "rope":
            why = "fused projections (qkv_proj, query_key_value) are not read"
        else:
            why = f"this is not a RoPE model ({model_type}, {kind}): try --analyses {APPLIES[kind]}"
        raise ValueError(
            f"{where}: no {projection}_proj weights (…layers.N.self_attn.{projection}_proj.weight) "
            f"in the checkpoint; {why}"
        )
    layers = sorted(found)
    if layers != list(range(len(layers))):
        missing = sorted(set(range(layers[-1] + 1)) - set(layers))
        raise ValueError(f"{where}: no {projection}_proj weight for layers {missing[:8]}")
    return [found[layer] for layer in layers]


def rope_frequency_usage_from_checkpoint(
    source: str, *, projection: str = "q"
) -> RopeFrequencyUsage:
    """:func:`rope_frequency_usage` of a RoPE model's checkpoint, read layer by layer.

    Parameters
    ----------
    source : str
        A Hub model (``org/name[@revision]``; only the safetensors headers and
        the projection weights of each layer are fetched, by HTTP range
        requests, one layer held at a time) or a local model directory
        (its ``config.json`` and safetensors or torch checkpoint).
    projection : {"q", "k"}
        Which projection: ``self_attn.q_proj`` (split into
        ``num_attention_heads``) or ``k_proj`` (``num_key_value_heads``).

    Returns
    -------
    RopeFrequencyUsage
        With the model's own frequencies (its ``rope_theta`` and scaling)
        and layout, and for a Hub model the bytes fetched.

    Raises
    ------
    ValueError
        No per-layer ``q_proj``/``k_proj`` weights (fused projections), a
        config without heads, a partly rotated head, or a projection whose
        rows do not split into the config's heads.

    Examples
    --------
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from posenc.probe import rope_frequency_usage_from_checkpoint
    >>> LlamaForCausalLM(LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    ...                              num_key_value_heads=2, intermediate_size=64, vocab_size=50,
    ...                              rope_theta=500000.0)).save_pretrained("tiny-llama")
    >>> usage = rope_frequency_usage_from_checkpoint("tiny-llama", projection="k")
    >>> usage.usage.shape  # (layers, key/value heads, head_dim // 2)
    (2, 2, 4)
    >>> bool(np.allclose(usage.frequencies, 500000.0 ** (-np.arange(0, 8, 2) / 8)))  # its theta
    True
    """
    from . import hub
    from ._readers import _open_path, _read_json

    projection = v.choice(projection, "projection", ("q", "k"))
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a Hub name or a path, not {type(source).__name__}")
    source = os.fspath(source)
    reader: Any
    if hub.is_hub_name(source):
        reader = hub.HubTensors(source)
        config = reader.config
        where = f"{reader.repo_id}@{reader.revision} on the Hub"
    else:
        if not os.path.isdir(source):
            raise ValueError(f"source: {source} is not a model directory nor a Hub name")
        reader = _open_path(source)
        config_path = os.path.join(source, "config.json")
        if not os.path.isfile(config_path):
            raise ValueError(f"source: {source} has no config.json (heads, rope_theta)")
        config = _read_json(config_path, f"source: {config_path} is not valid JSON")
        where = source
    keys = _projection_keys(list(reader.keys()), projection, where, config)
    inv_freq, layout, head_dim, n_heads, n_kv = _rope_layout(config)
    heads = n_heads if projection == "q" else n_kv
    per_layer = []
    for key in keys:
        weight = reader.read(key) if isinstance(reader, hub.HubTensors) else reader[key]
        weight = _to_array(weight)
        if weight.ndim != 2 or weight.shape[0] != heads * head_dim:
            raise ValueError(
                f"{where}: {key} has shape {tuple(weight.shape)}, not ({heads} heads x "
                f"{head_dim}, d_model) as the config says"
            )
        per_layer.append(rope_frequency_usage([weight], heads, layout=layout).usage[0])
        del weight
    fetched = reader.bytes_fetched if isinstance(reader, hub.HubTensors) else None
    return RopeFrequencyUsage(
        np.stack(per_layer), inv_freq, layout, f"{projection}_proj weight rows", fetched
    )


def _to_array(value: Any) -> np.ndarray:
    from ._tables import _to_numpy

    return np.asarray(_to_numpy(value))


# ---------------------------------------------------------------- from activations


@dataclass(frozen=True)
class RopeActivationUsage:
    """The norms of the queries' and keys' rotary pairs in forward passes:
    the result of :func:`rope_activation_usage`.

    Attributes
    ----------
    queries, keys : RopeFrequencyUsage
        ``usage[l, h, k]``: the mean norm of pair ``k`` of head ``h``'s
        query (key) in layer ``l``, as the rotation receives it (after any
        q/k norm; the rotation keeps it): the mean over each text's tokens,
        then over the texts.
    n_tokens : int
        The tokens of all the texts.
    n_texts : int
    queries_share_std, keys_share_std : ndarray of shape (layers, heads, pairs)
        The standard deviation across the texts of each text's
        :meth:`RopeFrequencyUsage.share` (zeros for one text).
    baselines : dict
        ``{kind: {"queries": (figure per seed, ...), "keys": (...)}}``: the
        slowest half's share (:meth:`RopeFrequencyUsage.slow_half`) on
        usages without frequencies (:data:`ROPE_KINDS`), for seeds ``0 ..
        len - 1``; empty without.
    """

    queries: RopeFrequencyUsage
    keys: RopeFrequencyUsage
    n_tokens: int
    n_texts: int = 1
    queries_share_std: Optional[np.ndarray] = None
    keys_share_std: Optional[np.ndarray] = None
    baselines: Dict[str, Dict[str, Tuple[float, ...]]] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "n_tokens": self.n_tokens,
            "n_texts": self.n_texts,
            "queries": self.queries.to_dict(),
            "keys": self.keys.to_dict(),
        }
        if self.queries_share_std is not None and self.keys_share_std is not None:
            out["queries"]["share_std"] = self.queries_share_std.tolist()
            out["keys"]["share_std"] = self.keys_share_std.tolist()
        out["slow_half"] = {"queries": self.queries.slow_half(), "keys": self.keys.slow_half()}
        out["baselines"] = {
            kind: {
                what: {
                    "mean": float(np.mean(per_seed)),
                    "std": float(np.std(per_seed)),
                    "per_seed": [float(x) for x in per_seed],
                }
                for what, per_seed in figures.items()
            }
            for kind, figures in self.baselines.items()
        }
        return out

    def noise_line(self) -> str:
        """The baselines of the slowest half's share in one line (empty without)."""
        if not self.baselines:
            return ""
        shown = {
            kind: ", ".join(
                f"{what} {100 * np.mean(per_seed):.1f}% ± {100 * np.std(per_seed):.1f}"
                for what, per_seed in figures.items()
            )
            for kind, figures in self.baselines.items()
        }
        seeds = len(next(iter(next(iter(self.baselines.values())).values())))
        return noise_line("the slowest half's share, {}", seeds, ROPE_KINDS, shown)

    def summary(self) -> str:
        """Two sentences, the queries' and the keys' (as
        :meth:`RopeFrequencyUsage.summary`), with the texts' spread of the
        slowest half's share."""
        lines = []
        for usage, std in (
            (self.queries, self.queries_share_std),
            (self.keys, self.keys_share_std),
        ):
            line = usage.summary()
            if std is not None and self.n_texts > 1:
                half = usage.usage.shape[-1] // 2
                spread = _slow_half_spread(usage, std, half)
                line = line[:-1] + (
                    f" ({self.n_texts} texts; the slowest half's share varies by ± "
                    f"{100 * spread:.1f} points across them)."
                )
            lines.append(line)
        return " ".join(lines)

    def to_markdown(self) -> str:
        """The queries' and the keys' tables (:meth:`RopeFrequencyUsage.to_markdown`),
        each under a heading, and the summary."""
        return "\n".join(
            [
                "Queries:",
                "",
                self.queries.to_markdown(),
                "",
                "Keys:",
                "",
                self.keys.to_markdown(),
                "",
                self.summary(),
            ]
        )

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """Two heatmaps, queries and keys: rows (layer, head), columns the
        pairs from fast to slow, colour the share of the head's norm²."""
        from ._plots import _figure

        panels = [
            (*_heat_rows(usage.share()), title)
            for usage, title in ((self.queries, "queries"), (self.keys, "keys"))
        ]
        tallest = max(len(rows) for rows, _, _ in panels)

        def draw(fig: Any) -> None:
            for col, (rows, label, title) in enumerate(panels):
                ax = fig.add_subplot(1, 2, col + 1)
                im = ax.imshow(rows, aspect="auto", cmap="viridis")
                ax.set_xlabel("rotary pair k (fast to slow)")
                ax.set_ylabel(label)
                ax.set_title(
                    f"{title}: share of norm² per pair ({self.n_texts} texts, "
                    f"{self.n_tokens} tokens)"
                )
                fig.colorbar(im, ax=ax)

        return _figure(path, dpi, _bounded((12, 2 + 0.15 * tallest), dpi), draw)


def _slow_half_spread(usage: RopeFrequencyUsage, std: np.ndarray, half: int) -> float:
    """The mean over layers and heads of the std of the slowest half's
    summed share (bounded by the sum of the pairs' stds)."""
    return float(std[..., half:].sum(axis=-1).mean())


def _rope_modules(model: Any) -> Tuple[Any, Dict[str, Any]]:
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError("model must be a transformers model (it has no config)")
    modules = {
        type(m).__module__
        for m in model.modules()
        if type(m).__name__.endswith("Attention")
        and callable(getattr(sys.modules.get(type(m).__module__), "apply_rotary_pos_emb", None))
    }
    if not modules:
        from .biases import APPLIES, model_kind

        kind = model_kind(config)
        raise ValueError(
            "model: no attention module of a modeling file with apply_rotary_pos_emb, so no "
            f"rotary queries and keys to read; this one ({getattr(config, 'model_type', None)}) "
            f"is {'an' if kind[0] in 'aeiou' else 'a'} {kind} model: try --analyses "
            f"{APPLIES[kind]}"
        )
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return text_config, {name: sys.modules[name] for name in modules}


def _ids_list(input_ids: Any) -> List[np.ndarray]:
    """One text (a sequence of ints) or several (a sequence of such)."""
    if isinstance(input_ids, (str, bytes)):
        raise TypeError("input_ids must be token ids, not a string")
    if hasattr(input_ids, "detach"):
        input_ids = input_ids.detach().cpu().numpy()
    if isinstance(input_ids, np.ndarray):
        items = [input_ids.reshape(-1)] if input_ids.ndim <= 1 else list(input_ids)
    else:
        items = list(input_ids)
        if not items or np.ndim(items[0]) == 0:
            items = [items]
    out = []
    for i, item in enumerate(items):
        ids = np.asarray(item)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"input_ids[{i}] must hold integer token ids, not {ids.dtype}")
        if ids.ndim != 1 or ids.size < 1:
            raise ValueError(
                "input_ids must hold at least 1 token"
                + (f" in every text (text {i} has none)" if len(items) > 1 else "")
            )
        out.append(ids.astype(np.int64))
    return out


def _forward_with(model: Any, files: Dict[str, Any], wrap: Any, ids: np.ndarray) -> None:
    torch = importlib.import_module("torch")
    originals = {name: files[name].apply_rotary_pos_emb for name in files}
    device = next(model.parameters()).device
    try:
        for name, original in originals.items():
            files[name].apply_rotary_pos_emb = wrap(original)
        with torch.no_grad():
            model(input_ids=torch.as_tensor(ids)[None].to(device))
    finally:
        for name, original in originals.items():
            files[name].apply_rotary_pos_emb = original


def random_projections(model: Any, seed: int) -> Any:
    """A context within which every ``q_proj`` and ``k_proj`` ``Linear`` of
    `model` holds Gaussian rows of its own rows' norms (the ``m``-th such
    weight, in the order of ``model.named_modules()``, drawn from
    ``numpy.random.default_rng([seed, 2, m])``); restored after."""
    import contextlib

    torch = importlib.import_module("torch")
    linears = [
        m
        for name, m in model.named_modules()
        if name.rsplit(".", 1)[-1] in ("q_proj", "k_proj") and isinstance(m, torch.nn.Linear)
    ]

    @contextlib.contextmanager
    def swapped() -> Any:
        saved = [m.weight.detach().clone() for m in linears]
        try:
            with torch.no_grad():
                for index, m in enumerate(linears):
                    W = m.weight.detach().double().cpu().numpy()
                    g = np.random.default_rng([seed, 2, index]).standard_normal(W.shape)
                    norms = np.linalg.norm(g, axis=1)
                    norms[norms == 0] = 1.0
                    g *= (np.linalg.norm(W, axis=1) / norms)[:, None]
                    m.weight.copy_(torch.from_numpy(g).to(m.weight.dtype))
            yield
        finally:
            with torch.no_grad():
                for m, w in zip(linears, saved):
                    m.weight.copy_(w)

    return swapped()


def rope_activation_usage(model: Any, input_ids: Any, *, baselines: int = 0) -> RopeActivationUsage:
    """Per layer, head and rotary pair, the mean norm of the queries and keys
    a transformers RoPE model rotates when run on texts (Barbero et al.'s
    measure from activations).

    The queries and keys are taken where the model's attention hands them to
    its ``apply_rotary_pos_emb`` (so after any q/k norm, as Qwen3 applies
    it); the norm of a pair is the same before and after its rotation.
    Each text is run on its own; the usage is the mean over its tokens, then
    over the texts, and the spread of each text's share is kept.

    Parameters
    ----------
    model : transformers RoPE model
        A Llama-like model (``LlamaForCausalLM``, ``Qwen2Model``, ...) whose
        attention calls its modeling module's ``apply_rotary_pos_emb`` once
        per layer; run in eval mode, without gradients.
    input_ids : sequence of int, 1-D tensor, or a sequence of them
        One text, tokenised (at least 1 token), or several.
    baselines : int
        Also the slowest half's share on usages without frequencies
        (:data:`ROPE_KINDS`), for seeds ``0 .. baselines-1``: the model run
        again with random q/k projections of the same row norms, and the
        pairs of each head shuffled.

    Raises
    ------
    ValueError
        A model whose attention does not call ``apply_rotary_pos_emb`` once
        per layer (a fused kernel, or no RoPE: the message names the
        analyses that fit the model), or a config as
        :func:`rope_frequency_usage_from_checkpoint` refuses.

    Examples
    --------
    >>> from transformers import LlamaConfig, LlamaModel
    >>> from posenc.probe import rope_activation_usage
    >>> llama = LlamaModel(LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    ...                                num_key_value_heads=2, intermediate_size=64,
    ...                                vocab_size=50)).eval()  # random weights, head_dim 8
    >>> usage = rope_activation_usage(llama, list(range(12)))
    >>> usage.queries.usage.shape, usage.keys.usage.shape  # (layers, heads, head_dim // 2)
    ((2, 4, 4), (2, 2, 4))
    >>> usage.n_tokens
    12
    >>> several = rope_activation_usage(llama, [list(range(12)), list(range(20, 40))])
    >>> several.n_texts, several.n_tokens, several.queries_share_std.shape
    (2, 32, (2, 4, 4))
    """
    text_config, files = _rope_modules(model)
    inv_freq, layout, head_dim, n_heads, n_kv = _rope_layout(text_config)
    texts = _ids_list(input_ids)
    baselines = v.integer(baselines, "baselines", minimum=0)
    shape = (head_dim, n_heads, n_kv)
    per_text_q, per_text_k = _activation_norms(model, files, texts, layout, shape, text_config)
    q_texts = [RopeFrequencyUsage(q, inv_freq, layout, "queries") for q in per_text_q]
    k_texts = [RopeFrequencyUsage(k, inv_freq, layout, "keys") for k in per_text_k]
    queries = RopeFrequencyUsage(np.mean(per_text_q, axis=0), inv_freq, layout, "queries")
    keys = RopeFrequencyUsage(np.mean(per_text_k, axis=0), inv_freq, layout, "keys")
    noise: Dict[str, Dict[str, Tuple[float, ...]]] = {}
    if baselines:
        runs: Dict[str, List[float]] = {"queries": [], "keys": []}
        for seed in range(baselines):
            with random_projections(model, seed):
                q, k = _activation_norms(model, files, texts, layout, shape, text_config)
            for what, norms in (("queries", q), ("keys", k)):
                usage = RopeFrequencyUsage(np.mean(norms, axis=0), inv_freq, layout)
                runs[what].append(usage.slow_half())
        noise["random"] = {what: tuple(figures) for what, figures in runs.items()}
        noise["shuffled"] = {
            what: tuple(u.pairs_shuffled(s).slow_half() for s in range(baselines))
            for what, u in (("queries", queries), ("keys", keys))
        }
    return RopeActivationUsage(
        queries,
        keys,
        int(sum(t.size for t in texts)),
        len(texts),
        np.std([u.share() for u in q_texts], axis=0),
        np.std([u.share() for u in k_texts], axis=0),
        noise,
    )


def _activation_norms(
    model: Any,
    files: Dict[str, Any],
    texts: List[np.ndarray],
    layout: str,
    shape: Tuple[int, int, int],
    text_config: Any,
) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """For each text, the mean norm of each pair of the queries and of the
    keys, per layer and head: ``([(layers, heads, pairs)], [...])``."""
    torch = importlib.import_module("torch")
    head_dim, n_heads, n_kv = shape

    def norms(x: Any) -> np.ndarray:
        x = x.detach().double()
        first, second = (
            (x[..., : head_dim // 2], x[..., head_dim // 2 :])
            if layout == "half"
            else (x[..., 0::2], x[..., 1::2])
        )
        pair = torch.sqrt(first * first + second * second)  # (batch, heads, seq, pairs)
        return pair.mean(dim=(0, 2)).cpu().numpy()

    n_layers = _config_get(text_config, "num_hidden_layers")
    per_text_q, per_text_k = [], []
    for ids in texts:
        captured: List[Tuple[np.ndarray, np.ndarray]] = []

        def wrap(original: Any, captured: List[Any] = captured) -> Any:
            def capture(q: Any, k: Any, *args: Any, **kwargs: Any) -> Any:
                _check_head_dim(q, k, head_dim)
                captured.append((norms(q), norms(k)))
                return original(q, k, *args, **kwargs)

            return capture

        _forward_with(model, files, wrap, ids)
        _check_layers(len(captured), n_layers)
        q_norms = np.stack([c[0] for c in captured])
        k_norms = np.stack([c[1] for c in captured])
        if q_norms.shape[1] != n_heads or k_norms.shape[1] != n_kv:
            raise ValueError(
                f"model: {q_norms.shape[1]} query and {k_norms.shape[1]} key heads, the config "
                f"says {n_heads} and {n_kv}"
            )
        per_text_q.append(q_norms)
        per_text_k.append(k_norms)
    return per_text_q, per_text_k


def _check_head_dim(q: Any, k: Any, head_dim: int) -> None:
    if q.shape[-1] != head_dim or k.shape[-1] != head_dim:
        raise ValueError(
            f"model: the queries reach the rotation with {q.shape[-1]} channels "
            f"a head, not the config's head_dim {head_dim}"
        )


def _check_layers(calls: int, n_layers: Any) -> None:
    if not calls or (isinstance(n_layers, int) and calls != n_layers):
        raise ValueError(
            f"model: its attention rotated queries and keys {calls} times in a forward "
            f"pass, not once per layer ({n_layers}); it does not call apply_rotary_pos_emb "
            "as Llama's attention does"
        )


def rope_logit_share(
    model: Any, input_ids: Any, *, causal: bool = True, name: Optional[str] = None
) -> Any:
    """The positional part of each head's attention logits in a RoPE model,
    on texts: the logit ``q_i . R_{j-i} k_j / sqrt(d)`` split into
    ``content``, ``q_i . k_j / sqrt(d)`` (the logit without the rotation),
    and ``position``, what the rotation adds, ``q_i . (R_{j-i} - I) k_j /
    sqrt(d)``; their mean magnitudes and shares per layer and head, as a
    :class:`posenc.probe.LogitShare`.

    The queries and keys are those the model hands its
    ``apply_rotary_pos_emb`` and the rotated ones it gets back (a key head
    shared by several query heads counts for each); ``sqrt(d)`` is
    ``sqrt(head_dim)`` whatever scale the model's attention applies (the
    shares do not depend on it).

    Parameters
    ----------
    model : transformers RoPE model
        As :func:`rope_activation_usage` takes.
    input_ids : sequence of int, or a sequence of them
        One text or several, each at least 2 tokens.
    causal : bool
        Average over the pairs ``j <= i`` only (a decoder's); False: all.
    name : str, optional

    Raises
    ------
    ValueError
        As :func:`rope_activation_usage`.

    Examples
    --------
    >>> from transformers import Qwen3Config, Qwen3Model
    >>> from posenc.probe import rope_logit_share
    >>> qwen3 = Qwen3Model(Qwen3Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    ...                                num_key_value_heads=2, head_dim=8, intermediate_size=64,
    ...                                vocab_size=50)).eval()  # q and k normed, then rotated
    >>> r = rope_logit_share(qwen3, [list(range(12)), list(range(20, 40))])
    >>> r.terms, r.share.shape  # (layers, query heads, terms)
    (('content', 'position'), (2, 4, 2))
    """
    from ._common import mean_abs
    from .relative_share import LogitShare

    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, not {type(causal).__name__}")
    text_config, files = _rope_modules(model)
    torch = importlib.import_module("torch")
    _, _, head_dim, n_heads, n_kv = _rope_layout(text_config)
    texts = _ids_list(input_ids)
    for i, ids in enumerate(texts):
        if ids.size < 2:
            raise ValueError(f"input_ids: text {i} has {ids.size} token; at least 2 are needed")
    n_layers = _config_get(text_config, "num_hidden_layers")
    per_text = []
    for ids in texts:
        captured: List[np.ndarray] = []

        def wrap(original: Any, captured: List[Any] = captured) -> Any:
            def capture(q: Any, k: Any, *args: Any, **kwargs: Any) -> Any:
                _check_head_dim(q, k, head_dim)
                out = original(q, k, *args, **kwargs)
                q_rot, k_rot = out[0], out[1]
                groups = q.shape[1] // k.shape[1]
                scale = 1.0 / np.sqrt(head_dim)
                qd, kd = q[0].double(), k[0].double().repeat_interleave(groups, dim=0)
                qr, kr = q_rot[0].double(), k_rot[0].double().repeat_interleave(groups, dim=0)
                content = torch.matmul(qd, kd.transpose(-1, -2)) * scale
                position = torch.matmul(qr, kr.transpose(-1, -2)) * scale - content
                captured.append(
                    np.stack([mean_abs(content, causal), mean_abs(position, causal)], axis=-1)
                )
                return out

            return capture

        _forward_with(model, files, wrap, ids)
        _check_layers(len(captured), n_layers)
        per_text.append(np.stack(captured))
    return LogitShare(
        name or type(model).__name__,
        ("content", "position"),
        np.stack(per_text),
        [int(t.size) for t in texts],
    )
