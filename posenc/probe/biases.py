"""What a model's attention biases say about position: ALiBi's slopes and
the distance each head's bias reaches (:func:`alibi_windows`), and T5's
learned bucket biases, per layer and head, expanded to distances with
posenc's own T5 kernels (:func:`t5_bucket_biases`).  Both read only a
model's ``config.json`` (and, for T5, its ``relative_attention_bias``
weights): a Hub name, a model directory, a config dict or a transformers
config or model.

ALiBi (Press et al., ICLR 2022) adds ``-m_h * d`` to head ``h``'s logit of
a key ``d`` positions back.  Its *effective window* is the first distance
at which that bias reaches ``threshold`` times the typical spread of the
logits (``logit_spread``: the standard deviation of the content logits
``q . k / sqrt(head_dim)``; 1 by default, that of unit-variance queries and
keys): ``W_h = ceil(threshold * logit_spread / m_h)``.  Past it the bias
outweighs the content's usual differences, so a key there is reached only
by a logit ``threshold`` spreads above the others.

T5 (Raffel et al., JMLR 2020) learns one bias per bucket of relative
distance ``d = key - query``, per head.  Expanded over ``d`` in
``[-reach, reach]`` (``[-reach, 0]`` for a decoder), the bias alone gives a
query the attention ``p_h(d) = softmax_d(b_h(d))``; the figures per head are

- ``local_mass``: the mass of ``p_h`` within ``|d| <= radius``;
- ``mean_distance``: the mean of ``|d|`` under ``p_h``;
- ``backward_mass``, ``forward_mass``: the mass on keys before the query
  (``d < 0``) and after it (``d > 0``);
- ``decay``: ``b_h(0)`` minus the mean bias of the distances
  ``|d| >= max_distance`` (the farthest buckets; ``|d| = reach`` when
  ``reach < max_distance``):
  positive when the bias falls with distance;
- ``head_type``: ``"local"`` when ``local_mass >= 0.5``; else
  ``"backward"`` (``"forward"``) when the backward (forward) mass exceeds
  the other by at least 0.2; else ``"global"``.  A decoder's heads see no
  keys ahead: each is local or global.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .._typing import PathLike
from ._common import APPLIES as APPLIES  # the --analyses names that fit each kind
from ._common import not_this_kind, token_texts

#: The head types of :class:`T5BucketBiases`, in the order the docs define them.
HEAD_TYPES: Tuple[str, ...] = ("local", "global", "backward", "forward")

_ALIBI_TYPES = ("bloom", "mpt", "falcon")
_T5_TYPES = ("t5", "mt5", "umt5", "longt5")
_RELATIVE_TYPES = ("deberta-v2", "deberta", "xlnet")
_ROPE_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
    "gemma2", "gemma3_text", "phi", "phi3", "gptj", "gpt_neox", "olmo", "olmo2", "stablelm",
    "cohere", "starcoder2", "internlm2", "deepseek_v2", "deepseek_v3", "roformer",
    "modernbert", "esm", "persimmon", "codegen", "glm", "granite", "nemotron",
)  # fmt: skip


# ---------------------------------------------------------------- a model's kind


def _get(config: Any, key: str) -> Any:
    if isinstance(config, dict):
        return config.get(key)
    return getattr(config, key, None)


def model_kind(config: Any) -> str:
    """How a model's config says it encodes positions: ``"alibi"``, ``"t5"``,
    ``"relative"`` (DeBERTa, XLNet), ``"rope"`` or ``"absolute"`` (anything
    else: a learned or sinusoidal table, or none posenc knows).

    Parameters
    ----------
    config : dict or transformers config
        A ``config.json`` as a dict, or a ``PretrainedConfig``.

    Examples
    --------
    >>> from posenc.probe import model_kind
    >>> model_kind({"model_type": "bloom"}), model_kind({"model_type": "llama"})
    ('alibi', 'rope')
    >>> model_kind({"model_type": "falcon", "alibi": False})  # Falcon's default: rotary
    'rope'
    """
    model_type = str(_get(config, "model_type") or "")
    if model_type == "falcon":
        return "alibi" if _get(config, "alibi") else "rope"
    if model_type in _ALIBI_TYPES:
        return "alibi"
    if model_type in _T5_TYPES:
        return "t5"
    if model_type in _RELATIVE_TYPES:
        return "relative"
    rope_keys = ("rope_theta", "rope_parameters", "rope_scaling", "rotary_dim", "rotary_pct")
    if model_type in _ROPE_TYPES or any(_get(config, k) is not None for k in rope_keys):
        return "rope"
    return "absolute"


def _config_of(source: Any) -> Tuple[Any, str, Optional[Any]]:
    """``(config, where, reader)`` of a Hub name, a model directory, a config
    dict or a transformers config/model (reader: the tensors, if any)."""
    from . import hub
    from ._readers import _open_path, _read_json

    if isinstance(source, dict):
        return source, "config", None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isdir(path):
            config_path = os.path.join(path, "config.json")
            if not os.path.isfile(config_path):
                raise ValueError(f"source: {path} has no config.json")
            config = _read_json(config_path, f"source: {config_path} is not valid JSON")
            return config, path, _LazyReader(lambda: _open_path(path))
        if hub.is_hub_name(path):
            reader = hub.HubTensors(path)
            return reader.config, f"{reader.repo_id}@{reader.revision} on the Hub", reader
        raise ValueError(f"source: {path} is not a model directory nor a Hub name")
    config = getattr(source, "config", None)
    if config is not None and hasattr(source, "state_dict"):
        state = source.state_dict()
        return config, type(source).__name__, state
    if hasattr(source, "model_type") or hasattr(source, "to_dict"):
        return source, type(source).__name__, None
    raise TypeError(
        "source must be a Hub name, a model directory, a config dict or a transformers "
        f"config or model, not {type(source).__name__}"
    )


class _LazyReader:
    def __init__(self, opener: Any) -> None:
        self._opener, self._reader = opener, None

    def _get(self) -> Any:
        if self._reader is None:
            self._reader = self._opener()
        return self._reader

    def keys(self) -> List[str]:
        return list(self._get().keys())

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]


def _read(reader: Any, key: str) -> np.ndarray:
    from . import hub
    from ._tables import _to_numpy

    value = reader.read(key) if isinstance(reader, hub.HubTensors) else reader[key]
    return np.asarray(_to_numpy(value), dtype=np.float64)


# ---------------------------------------------------------------- ALiBi


@dataclass(frozen=True)
class AlibiWindows:
    """ALiBi's slope and effective window per head: the result of
    :func:`alibi_windows`.

    Attributes
    ----------
    name : str
    slopes : ndarray of shape (heads,), float64
        ``m_h``: the bias of a key ``d`` positions back is ``-m_h * d``.
    windows : ndarray of shape (heads,), int64
        ``ceil(threshold * logit_spread / m_h)``: the first distance at
        which the bias reaches ``threshold`` logit spreads.
    threshold : float
    logit_spread : float or ndarray of shape (heads,)
        The spread assumed (or measured, by :func:`alibi_logit_spread`).
    max_bias : float
        The slopes' exponent scale (8 in BLOOM and Falcon; MPT's
        ``alibi_bias_max``).
    """

    name: str
    slopes: np.ndarray
    windows: np.ndarray
    threshold: float
    logit_spread: Any
    max_bias: float

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values."""
        return {
            "name": self.name,
            "max_bias": self.max_bias,
            "threshold": self.threshold,
            "logit_spread": np.asarray(self.logit_spread).tolist(),
            "slopes": self.slopes.tolist(),
            "windows": [int(w) for w in self.windows],
        }

    def summary(self) -> str:
        """One sentence: the range of the slopes and windows."""
        return (
            f"ALiBi ({len(self.slopes)} heads, max_bias {self.max_bias:g}): slopes "
            f"{self.slopes.min():.3g} to {self.slopes.max():.3g}; the bias reaches "
            f"{self.threshold:g} x logit spread {self._spread()} at {int(self.windows.min())} "
            f"to {int(self.windows.max())} positions (median {float(np.median(self.windows)):g})."
        )

    def _spread(self) -> str:
        spread = np.asarray(self.logit_spread)
        if spread.ndim == 0:
            return f"{float(spread):g}"
        return f"{spread.min():.3g} to {spread.max():.3g} (measured, per head)"

    def to_markdown(self) -> str:
        """A Markdown table, a row per head: slope and window."""
        lines = ["| head | slope | window |", "|---:|---:|---:|"]
        for h, (m, w) in enumerate(zip(self.slopes, self.windows)):
            lines.append(f"| {h} | {m:.4g} | {int(w)} |")
        lines += ["", self.summary()]
        return "\n".join(lines)

    def plot(self, path: Optional[PathLike] = None, *, dpi: float = 110) -> Any:
        """Two panels: the slope per head (log scale) and the window per
        head (log scale).  Without `path` the Figure is returned; with one it
        is written in the format its extension names and `path` returned."""
        from ._plots import _figure

        def draw(fig: Any) -> None:
            heads = np.arange(len(self.slopes))
            ax = fig.add_subplot(1, 2, 1)
            ax.semilogy(heads, self.slopes, "o-")
            ax.set_xlabel("head")
            ax.set_ylabel("slope m")
            ax.set_title(f"{self.name}: ALiBi slope per head")
            ax = fig.add_subplot(1, 2, 2)
            ax.semilogy(heads, self.windows, "o-", color="C1")
            ax.set_xlabel("head")
            ax.set_ylabel("window (positions)")
            ax.set_title(f"bias reaches {self.threshold:g} x spread {self._spread()}")

        return _figure(path, dpi, (11, 4), draw)


def _alibi_config(config: Any, where: str) -> Tuple[int, float]:
    """``(heads, max_bias)`` of an ALiBi model's config."""
    if model_kind(config) != "alibi":
        raise not_this_kind(
            model_kind(config), config, where, "ALiBi (BLOOM, MPT, Falcon with alibi)", "alibi"
        )
    model_type = _get(config, "model_type")
    max_bias = 8.0
    if model_type == "mpt":
        heads = _get(config, "n_heads")
        attn = _get(config, "attn_config") or {}
        if not isinstance(attn, dict):
            attn = attn.to_dict() if hasattr(attn, "to_dict") else vars(attn)
        if attn.get("alibi") is False:
            raise ValueError(f"{where}: this MPT model has attn_config.alibi false: no ALiBi")
        max_bias = float(attn.get("alibi_bias_max", 8))
    else:
        heads = _get(config, "n_head")
        if heads is None:
            heads = _get(config, "num_attention_heads")
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ValueError(f"{where}: the config gives no number of heads ({heads!r})")
    return heads, max_bias


def alibi_windows(source: Any, *, threshold: float = 3.0, logit_spread: Any = 1.0) -> AlibiWindows:
    """ALiBi's slopes and effective windows per head, from a model's config.

    The slopes are :func:`posenc.alibi_slopes` of the config's heads (and
    MPT's ``alibi_bias_max``), as BLOOM's, MPT's and Falcon's attention
    computes them.

    Parameters
    ----------
    source : str, path, dict, transformers config or model
        A Hub name (only ``config.json`` and the safetensors headers are
        fetched), a model directory, a ``config.json`` dict, or a config or
        model of transformers' BLOOM, MPT or Falcon (with ``alibi=True``).
    threshold : float
        How many logit spreads the bias must reach (> 0).
    logit_spread : float or array_like of shape (heads,)
        The typical spread (standard deviation) of the content logits (> 0),
        one for all heads or one per head (:func:`alibi_logit_spread`
        measures it on texts).

    Raises
    ------
    ValueError
        A model without ALiBi (naming the analyses that fit it), a config
        without heads, a threshold or spread not a positive finite number.

    Examples
    --------
    >>> from posenc.probe import alibi_windows
    >>> w = alibi_windows({"model_type": "bloom", "n_head": 4})
    >>> w.slopes.tolist(), w.windows.tolist()  # window: ceil(3 * 1 / slope)
    ([0.25, 0.0625, 0.015625, 0.00390625], [12, 48, 192, 768])
    """
    from ..bias import alibi_slopes

    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)):
        raise TypeError(f"threshold must be a number, not {type(threshold).__name__}")
    if not (math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a positive finite number, got {threshold!r}")
    if isinstance(logit_spread, (bool, str, bytes)) or not isinstance(
        logit_spread, (int, float, np.floating, np.ndarray, list, tuple)
    ):
        raise TypeError(
            f"logit_spread must be a number or one per head, not {type(logit_spread).__name__}"
        )
    spread = np.asarray(logit_spread, dtype=np.float64)
    if not (np.isfinite(spread).all() and (spread > 0).all()):
        raise ValueError(f"logit_spread must be positive finite numbers, got {logit_spread!r}")
    config, where, _ = _config_of(source)
    heads, max_bias = _alibi_config(config, where)
    if spread.shape not in ((), (heads,)):
        raise ValueError(
            f"logit_spread must be one number or one per head ({heads}), got shape {spread.shape}"
        )
    slopes = np.asarray(alibi_slopes(heads, max_bias=max_bias), dtype=np.float64)
    windows = np.ceil(float(threshold) * spread / slopes).astype(np.int64)
    name = where if isinstance(source, (str, os.PathLike)) else str(_get(config, "model_type"))
    kept = float(spread) if spread.ndim == 0 else spread
    return AlibiWindows(name, slopes, windows, float(threshold), kept, max_bias)


def alibi_logit_spread(model: Any, texts: Any) -> np.ndarray:
    """The typical spread of an ALiBi model's content logits, per layer and
    head, measured on texts: for each query (with at least 2 keys), the
    standard deviation over its keys of the logit without the ALiBi bias,
    averaged over the queries and then the texts.

    The logits are read back from the attention probabilities the model
    returns (``output_attentions``): ``log p_ij + m_h * (i - j)`` is the
    content logit up to a constant per query, which the standard deviation
    over the keys does not see.

    Parameters
    ----------
    model : transformers BLOOM, MPT or Falcon (``alibi``) model
        Loaded with ``attn_implementation="eager"`` (the attentions are
        returned only then); run in eval mode, without gradients.
    texts : sequence of int, or sequence of sequences of int
        One tokenised text or several (each at least 2 tokens).

    Returns
    -------
    ndarray of shape (layers, heads)
        Pass its mean over the layers to :func:`alibi_windows` as
        ``logit_spread`` for windows from the measured spread.

    Raises
    ------
    ValueError
        A model without ALiBi (naming the analyses that fit it), a model
        that returns no attentions, or probabilities that underflow to 0.

    Examples
    --------
    >>> from transformers import BloomConfig, BloomForCausalLM
    >>> from posenc.probe import alibi_logit_spread, alibi_windows
    >>> bloom = BloomForCausalLM(BloomConfig(vocab_size=40, hidden_size=24, n_layer=2, n_head=6,
    ...                                      attn_implementation="eager")).eval()
    >>> spread = alibi_logit_spread(bloom, [list(range(10)), list(range(3, 20))])
    >>> spread.shape  # (layers, heads)
    (2, 6)
    >>> w = alibi_windows(bloom, logit_spread=spread.mean(axis=0))  # a window per head
    >>> bool((w.windows == np.ceil(3 * spread.mean(axis=0) / w.slopes)).all())
    True
    """
    import importlib

    from ..bias import alibi_slopes

    torch = importlib.import_module("torch")
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError("model must be a transformers model (it has no config)")
    heads, max_bias = _alibi_config(config, type(model).__name__)
    slopes = np.asarray(alibi_slopes(heads, max_bias=max_bias), dtype=np.float64)
    per_text = []
    device = next(model.parameters()).device
    for ids in token_texts(texts):
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor(ids)[None].to(device), output_attentions=True)
        attentions = getattr(out, "attentions", None)
        if not attentions or any(a is None for a in attentions):
            raise ValueError(
                "model: it returns no attention probabilities; load it with "
                'attn_implementation="eager"'
            )
        n = ids.size
        layers = []
        for a in attentions:
            p = a[0].detach().double().cpu().numpy()  # (heads, n, n)
            rows = []
            for i in range(1, n):
                keys = p[:, i, : i + 1]
                if (keys <= 0).any():
                    raise ValueError(
                        "model: an attention probability underflows to 0; its content "
                        "logits cannot be read back"
                    )
                content = np.log(keys) + slopes[:, None] * (i - np.arange(i + 1))
                rows.append(content.std(axis=-1))
            layers.append(np.mean(rows, axis=0))
        per_text.append(np.stack(layers))
    return np.mean(per_text, axis=0)


# ---------------------------------------------------------------- T5


_T5_KEY = re.compile(
    r"(?:^|\.)(encoder|decoder)\.block\.(\d+)\.layer\.0\.(\w+)\.relative_attention_bias\.weight$"
)


@dataclass(frozen=True)
class T5BucketBiases:
    """T5's learned relative biases per layer and head, expanded to
    distances: the result of :func:`t5_bucket_biases`.

    Attributes
    ----------
    name : str
    layers : list of str
        ``"encoder.0"``, ``"decoder.0"``, ... : the attentions that hold a
        ``relative_attention_bias`` (T5, MT5, LongT5: the first block of each
        stack; UMT5: every block).
    distances : ndarray of shape (2 * reach + 1,), int64
        ``d = key - query`` from ``-reach`` to ``reach``.
    bias : ndarray of shape (layers, heads, 2 * reach + 1), float64
        ``bias[l, h, i]``: the bias of ``distances[i]``, by
        :func:`posenc.t5_bias` (``nan`` at ``d > 0`` for a decoder's layer,
        whose queries see no key ahead).
    tables : list of ndarray of shape (num_buckets, heads)
        The weights read.
    bidirectional : ndarray of shape (layers,), bool
    local_mass, mean_distance, backward_mass, forward_mass, decay : ndarray of shape (layers, heads)
        As the module's docstring defines them.
    head_type : ndarray of shape (layers, heads), str
        One of :data:`HEAD_TYPES`.
    radius, max_distance : int
    """

    name: str
    layers: List[str]
    distances: np.ndarray
    bias: np.ndarray
    tables: List[np.ndarray]
    bidirectional: np.ndarray
    local_mass: np.ndarray
    mean_distance: np.ndarray
    backward_mass: np.ndarray
    forward_mass: np.ndarray
    decay: np.ndarray
    head_type: np.ndarray
    radius: int
    max_distance: int

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (the expanded bias as lists,
        ``None`` where a decoder sees no key)."""

        def rows(a: np.ndarray) -> Any:
            return [[None if np.isnan(x) else float(x) for x in r] for r in a]

        return {
            "name": self.name,
            "layers": list(self.layers),
            "radius": self.radius,
            "max_distance": self.max_distance,
            "distances": self.distances.tolist(),
            "bidirectional": self.bidirectional.tolist(),
            "bias": [rows(b) for b in self.bias],
            "local_mass": self.local_mass.tolist(),
            "mean_distance": self.mean_distance.tolist(),
            "backward_mass": self.backward_mass.tolist(),
            "forward_mass": self.forward_mass.tolist(),
            "decay": self.decay.tolist(),
            "head_type": self.head_type.tolist(),
        }

    def buckets_shuffled(self, seed: int) -> Dict[str, float]:
        """The ``"shuffled"`` baseline for `seed`: each head's bucket biases
        in an order of their own (``numpy.random.default_rng([seed,
        1]).permuted`` along the buckets of each table, one generator for
        all), expanded and measured as the tables are: ``{"local_mass": ...,
        "decay": ...}``, each the mean over attentions and heads."""
        from ..bias import t5_bias

        rng = np.random.default_rng([seed, 1])
        reach = int(self.distances[-1])
        bias = np.full(self.bias.shape, np.nan)
        for li, (table, both) in enumerate(zip(self.tables, self.bidirectional)):
            row = t5_bias(
                rng.permuted(np.asarray(table, dtype=np.float64), axis=0),
                1,
                2 * reach + 1,
                bidirectional=bool(both),
                max_distance=self.max_distance,
                q_offset=reach,
            )[:, 0, :]
            bias[li] = row if both else np.where(self.distances <= 0, row, np.nan)
        local, _, _, _, decay, _ = _t5_figures(
            bias, self.distances, self.radius, min(self.max_distance, reach), self.bidirectional
        )
        return {"local_mass": float(local.mean()), "decay": float(decay.mean())}

    def summary(self) -> str:
        """One sentence: the head types counted per attention."""
        parts = []
        for layer, types in zip(self.layers, self.head_type):
            counts = ", ".join(f"{int((types == t).sum())} {t}" for t in HEAD_TYPES)
            parts.append(f"{layer}: {counts}")
        return (
            f"T5 bucket biases ({len(self.layers)} attentions x {self.bias.shape[1]} heads, "
            f"local = half the bias-only attention within {self.radius} positions): "
            + "; ".join(parts)
            + "."
        )

    def to_markdown(self) -> str:
        """A Markdown table, a row per attention and head."""
        lines = [
            "| layer | head | type | local mass | mean distance | backward | forward | decay |",
            "|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for li, layer in enumerate(self.layers):
            for h in range(self.bias.shape[1]):
                lines.append(
                    f"| {layer} | {h} | {self.head_type[li, h]} | {self.local_mass[li, h]:.3f} | "
                    f"{self.mean_distance[li, h]:.1f} | {self.backward_mass[li, h]:.3f} | "
                    f"{self.forward_mass[li, h]:.3f} | {self.decay[li, h]:+.3f} |"
                )
        lines += ["", self.summary()]
        return "\n".join(lines)

    def plot(self, path: Optional[PathLike] = None, *, dpi: float = 110) -> Any:
        """A panel per attention: each head's bias against the distance
        ``key - query``.  Without `path` the Figure is returned; with one it
        is written in the format its extension names and `path` returned."""
        from ._plots import _figure

        n = len(self.layers)
        cols = min(n, 4)
        rows = -(-n // cols)

        def draw(fig: Any) -> None:
            fig.suptitle(f"{self.name}: T5 relative bias per head")
            for li, layer in enumerate(self.layers):
                ax = fig.add_subplot(rows, cols, li + 1)
                for h in range(self.bias.shape[1]):
                    ax.plot(self.distances, self.bias[li, h], linewidth=0.8)
                ax.axvline(0, color="grey", linewidth=0.6)
                ax.set_title(layer)
                ax.set_xlabel("distance key - query")
                if li % cols == 0:
                    ax.set_ylabel("bias")

        return _figure(path, dpi, (4 * cols, 3.2 * rows + 0.6), draw)


def _t5_config(config: Any, where: str) -> Tuple[int, int]:
    if model_kind(config) != "t5":
        raise not_this_kind(
            model_kind(config), config, where, "T5-style (T5, MT5, UMT5, LongT5)", "t5_biases"
        )
    buckets = _get(config, "relative_attention_num_buckets") or 32
    max_distance = _get(config, "relative_attention_max_distance") or 128
    return int(buckets), int(max_distance)


def t5_bucket_biases(
    source: Any, *, radius: int = 8, reach: Optional[int] = None
) -> T5BucketBiases:
    """T5's learned bucket biases per layer and head, with their locality,
    direction, decay and head type (see the module's docstring).

    Every ``relative_attention_bias`` of the checkpoint's self-attentions is
    read (``encoder.block.N.layer.0.*`` and ``decoder.block.N.layer.0.*``)
    and expanded to distances by :func:`posenc.t5_bias`, bidirectionally for
    the encoder and causally for the decoder, with the config's
    ``relative_attention_num_buckets`` and ``relative_attention_max_distance``.

    Parameters
    ----------
    source : str, path or transformers model
        A Hub name (only the headers and the bias tables are fetched), a
        model directory, or a transformers T5/MT5/UMT5/LongT5 model.
    radius : int
        The distance within which attention counts as local (>= 1).
    reach : int, optional
        The distances expanded: ``[-reach, reach]``; default twice the
        config's ``relative_attention_max_distance``.

    Raises
    ------
    ValueError
        A model that is not T5-style (naming the analyses that fit it), no
        ``relative_attention_bias`` in the checkpoint, or a table whose shape
        disagrees with the config.

    Examples
    --------
    >>> from transformers import T5Config, T5Model
    >>> from posenc.probe import t5_bucket_biases
    >>> t5 = T5Model(T5Config(d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2,
    ...                       vocab_size=40))
    >>> r = t5_bucket_biases(t5)
    >>> r.layers, r.bias.shape  # (attentions, heads, distances -256 .. 256)
    (['encoder.0', 'decoder.0'], (2, 2, 513))
    """
    from .. import _validate as v
    from ..bias import t5_bias

    radius = v.integer(radius, "radius", minimum=1)
    config, where, reader = _config_of(source)
    buckets, max_distance = _t5_config(config, where)
    reach = 2 * max_distance if reach is None else v.integer(reach, "reach", minimum=1)
    if reader is None:
        raise ValueError(f"{where}: a config alone holds no bias tables; give the model")
    found: List[Tuple[int, int, str]] = []
    for key in reader.keys():
        m = _T5_KEY.search(key)
        if m and "EncDecAttention" not in m.group(3):
            found.append((0 if m.group(1) == "encoder" else 1, int(m.group(2)), key))
    if not found:
        raise ValueError(
            f"{where}: no relative_attention_bias weights "
            "(…block.N.layer.0.SelfAttention.relative_attention_bias.weight) in the checkpoint"
        )
    found.sort()
    tables, names, directions = [], [], []
    for stack, block, key in found:
        table = _read(reader, key)
        if table.ndim != 2 or table.shape[0] != buckets:
            raise ValueError(
                f"{where}: {key} has shape {table.shape}, not ({buckets} buckets, heads) as "
                "the config says"
            )
        tables.append(table)
        names.append(f"{'encoder' if stack == 0 else 'decoder'}.{block}")
        directions.append(stack == 0)
    heads = tables[0].shape[1]
    if any(t.shape[1] != heads for t in tables):
        raise ValueError(f"{where}: the bias tables have different numbers of heads")
    distances = np.arange(-reach, reach + 1)
    bias = np.full((len(tables), heads, distances.size), np.nan)
    for li, (table, both) in enumerate(zip(tables, directions)):
        # one query at position reach, keys 0 .. 2 * reach: d = j - reach
        row = t5_bias(
            table, 1, 2 * reach + 1, bidirectional=both, max_distance=max_distance, q_offset=reach
        )[:, 0, :]
        bias[li] = row if both else np.where(distances <= 0, row, np.nan)
    local, mean_d, back, fwd, decay, types = _t5_figures(
        bias, distances, radius, min(max_distance, reach), np.array(directions)
    )
    name = where if isinstance(source, (str, os.PathLike)) else type(source).__name__
    return T5BucketBiases(
        name,
        names,
        distances,
        bias,
        tables,
        np.array(directions),
        local,
        mean_d,
        back,
        fwd,
        decay,
        types,
        radius,
        max_distance,
    )


def _t5_figures(
    bias: np.ndarray, distances: np.ndarray, radius: int, far_from: int, both: np.ndarray
) -> Tuple[np.ndarray, ...]:
    seen = ~np.isnan(bias)
    logits = np.where(seen, bias, -np.inf)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    near = np.abs(distances) <= radius
    local = (p * near).sum(axis=-1)
    mean_d = (p * np.abs(distances)).sum(axis=-1)
    back = (p * (distances < 0)).sum(axis=-1)
    fwd = (p * (distances > 0)).sum(axis=-1)
    far = np.abs(distances) >= far_from
    centre = bias[..., distances == 0][..., 0]
    far_bias = np.where(seen & far, bias, 0.0).sum(axis=-1) / np.maximum(
        (seen & far).sum(axis=-1), 1
    )
    decay = centre - far_bias
    lean = both[:, None]  # a decoder's heads lean no way: every key is behind
    types = np.where(
        local >= 0.5,
        "local",
        np.where(
            lean & (back - fwd >= 0.2),
            "backward",
            np.where(lean & (fwd - back >= 0.2), "forward", "global"),
        ),
    )
    return local, mean_d, back, fwd, decay, types
