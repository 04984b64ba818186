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
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _validate as v
from ._tables import _table


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

    def share(self) -> np.ndarray:
        """``usage ** 2`` normalised to sum to 1 over the pairs of each head."""
        energy = self.usage**2
        total = energy.sum(axis=-1, keepdims=True)
        return np.divide(energy, total, out=np.zeros_like(energy), where=total > 0)

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """A heatmap: rows are (layer, head), columns the pairs from the
        fastest frequency to the slowest; the colour is :meth:`share`."""
        from .report import _figure

        n_layers, n_heads, n_pairs = self.usage.shape

        def draw(fig: Any) -> None:
            ax = fig.add_subplot(1, 1, 1)
            im = ax.imshow(
                self.share().reshape(n_layers * n_heads, n_pairs), aspect="auto", cmap="viridis"
            )
            ax.set_xlabel("rotary pair k (frequency base^(-2k/d): fast to slow)")
            ax.set_ylabel("layer x head")
            ax.set_title(f"share of each head's norm² per rotary pair ({self.what})")
            fig.colorbar(im, ax=ax)

        return _figure(path, dpi, (8, 2 + 0.15 * n_layers * n_heads), draw)


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


def _projection_keys(keys: Sequence[str], projection: str, where: str) -> List[str]:
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
        raise ValueError(
            f"{where}: no {projection}_proj weights (…layers.N.self_attn.{projection}_proj.weight) "
            "in the checkpoint; fused projections (qkv_proj, query_key_value) are not read"
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
    """
    from . import hub
    from .checkpoints import _open_path, _read_json

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
    keys = _projection_keys(list(reader.keys()), projection, where)
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
    """The norms of the queries' and keys' rotary pairs in a forward pass:
    the result of :func:`rope_activation_usage`.

    Attributes
    ----------
    queries, keys : RopeFrequencyUsage
        ``usage[l, h, k]``: the mean over the text's tokens of the norm of
        pair ``k`` of head ``h``'s query (key) in layer ``l``, as the
        rotation receives it (after any q/k norm; the rotation keeps it).
    n_tokens : int
    """

    queries: RopeFrequencyUsage
    keys: RopeFrequencyUsage
    n_tokens: int

    def to_dict(self) -> Dict[str, Any]:
        return {
            "n_tokens": self.n_tokens,
            "queries": self.queries.to_dict(),
            "keys": self.keys.to_dict(),
        }

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """Two heatmaps, queries and keys: rows (layer, head), columns the
        pairs from fast to slow, colour the share of the head's norm²."""
        from .report import _figure

        n_layers, n_heads, _ = self.queries.usage.shape

        def draw(fig: Any) -> None:
            for col, (usage, title) in enumerate(((self.queries, "queries"), (self.keys, "keys"))):
                ax = fig.add_subplot(1, 2, col + 1)
                L, H, K = usage.usage.shape
                im = ax.imshow(usage.share().reshape(L * H, K), aspect="auto", cmap="viridis")
                ax.set_xlabel("rotary pair k (fast to slow)")
                ax.set_ylabel("layer x head")
                ax.set_title(f"{title}: share of norm² per pair ({self.n_tokens} tokens)")
                fig.colorbar(im, ax=ax)

        return _figure(path, dpi, (12, 2 + 0.15 * n_layers * n_heads), draw)


def rope_activation_usage(model: Any, input_ids: Any) -> RopeActivationUsage:
    """Per layer, head and rotary pair, the mean norm of the queries and keys
    a transformers RoPE model rotates when run on a text (Barbero et al.'s
    measure from activations).

    The queries and keys are taken where the model's attention hands them to
    its ``apply_rotary_pos_emb`` (so after any q/k norm, as Qwen3 applies
    it); the norm of a pair is the same before and after its rotation.

    Parameters
    ----------
    model : transformers RoPE model
        A Llama-like model (``LlamaForCausalLM``, ``Qwen2Model``, ...) whose
        attention calls its modeling module's ``apply_rotary_pos_emb`` once
        per layer; run in eval mode, without gradients.
    input_ids : sequence of int or 1-D tensor
        The text, tokenised (at least 1 token).

    Raises
    ------
    ValueError
        A model whose attention does not call ``apply_rotary_pos_emb`` once
        per layer (a fused kernel, or no RoPE), or a config as
        :func:`rope_frequency_usage_from_checkpoint` refuses.
    """
    torch = importlib.import_module("torch")
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
        raise ValueError(
            "model: no attention module of a modeling file with apply_rotary_pos_emb; "
            "the queries and keys of this model cannot be read"
        )
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    inv_freq, layout, head_dim, n_heads, n_kv = _rope_layout(text_config)
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long).reshape(-1)
    n = int(ids.numel())
    if n < 1:
        raise ValueError("input_ids must hold at least 1 token")
    captured: List[Tuple[np.ndarray, np.ndarray]] = []

    def norms(x: Any) -> np.ndarray:
        x = x.detach().double()
        first, second = (
            (x[..., : head_dim // 2], x[..., head_dim // 2 :])
            if layout == "half"
            else (x[..., 0::2], x[..., 1::2])
        )
        pair = torch.sqrt(first * first + second * second)  # (batch, heads, seq, pairs)
        return pair.mean(dim=(0, 2)).cpu().numpy()

    files: Dict[str, Any] = {name: sys.modules[name] for name in modules}
    originals = {name: files[name].apply_rotary_pos_emb for name in modules}

    def wrap(original: Any) -> Any:
        def capture(q: Any, k: Any, *args: Any, **kwargs: Any) -> Any:
            if q.shape[-1] != head_dim or k.shape[-1] != head_dim:
                raise ValueError(
                    f"model: the queries reach the rotation with {q.shape[-1]} channels "
                    f"a head, not the config's head_dim {head_dim}"
                )
            captured.append((norms(q), norms(k)))
            return original(q, k, *args, **kwargs)

        return capture

    device = next(model.parameters()).device
    try:
        for name, original in originals.items():
            files[name].apply_rotary_pos_emb = wrap(original)
        with torch.no_grad():
            model(input_ids=ids[None].to(device))
    finally:
        for name, original in originals.items():
            files[name].apply_rotary_pos_emb = original
    n_layers = _config_get(text_config, "num_hidden_layers")
    if not captured or (isinstance(n_layers, int) and len(captured) != n_layers):
        raise ValueError(
            f"model: its attention rotated queries and keys {len(captured)} times in a forward "
            f"pass, not once per layer ({n_layers}); it does not call apply_rotary_pos_emb "
            "as Llama's attention does"
        )
    q = np.stack([c[0] for c in captured])
    k = np.stack([c[1] for c in captured])
    if q.shape[1] != n_heads or k.shape[1] != n_kv:
        raise ValueError(
            f"model: {q.shape[1]} query and {k.shape[1]} key heads, the config says "
            f"{n_heads} and {n_kv}"
        )
    return RopeActivationUsage(
        RopeFrequencyUsage(q, inv_freq, layout, "queries"),
        RopeFrequencyUsage(k, inv_freq, layout, "keys"),
        n,
    )
