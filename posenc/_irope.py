"""Llama 4's interleaved RoPE ("iRoPE"): which layers rotate, and the chunked mask.

Llama 4 leaves one decoder layer in ``no_rope_layer_interval`` (4) without
rotary embedding (a NoPE layer, attending over the whole context with the
query temperature of ``attn_temperature_tuning``) and lets the others
(RoPE layers) attend only within fixed chunks of ``attention_chunk_size``
tokens.  transformers spells it in ``Llama4TextConfig``:

* ``no_rope_layers[i]`` is 1 where layer ``i`` *uses* RoPE and 0 where it is
  NoPE (the name says the opposite); when it is missing or empty it is
  ``int((i + 1) % no_rope_layer_interval != 0)``, so layers 3, 7, 11, ...
  (counted from 0) are NoPE;
* ``layer_types[i]`` is ``"chunked_attention"`` for a RoPE layer when
  ``attention_chunk_size`` is set, ``"full_attention"`` otherwise, unless
  the config lists its own;
* ``moe_layers`` is ``range(interleave_moe_layer_step - 1, layers, step)``
  unless listed.

:func:`irope_layers` reads a config (object or dict) into that per-layer
pattern and :func:`chunked_causal_mask` gives the boolean mask of the
chunked layers, as transformers' ``create_chunked_causal_mask`` builds it
(``masking_utils.chunked_causal_mask_function``): key ``j`` is seen by
query ``i`` when ``j <= q_offset + i`` and both fall in the same chunk,
``j // chunk_size == (q_offset + i) // chunk_size``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from numbers import Integral
from typing import Any, Optional

import numpy as np

from . import _validate
from ._typing import NDArray

__all__ = ["IRoPELayers", "chunked_causal_mask", "irope_layers"]

# Llama4TextConfig's defaults for the keys read here (transformers 5).
_DEFAULTS = {
    "num_hidden_layers": 48,
    "no_rope_layers": None,
    "no_rope_layer_interval": 4,
    "attention_chunk_size": 8192,
    "layer_types": None,
    "moe_layers": None,
    "interleave_moe_layer_step": 1,
    "use_qk_norm": True,
    "attn_temperature_tuning": True,
    "floor_scale": 8192,
    "attn_scale": 0.1,
}
_LAYER_TYPES = ("full_attention", "chunked_attention")
# The most layers a config may have: the pattern is made layer by layer, in
# Python (a tuple per field), and transformers' models have at most hundreds.
_MAX_LAYERS = 1 << 16


@dataclass(frozen=True)
class IRoPELayers:
    """The per-layer pattern of a Llama 4 text model.

    Attributes
    ----------
    rope : tuple of bool
        Per layer: True where the layer applies RoPE, False for NoPE.
    layer_types : tuple of str
        Per layer: ``"chunked_attention"`` or ``"full_attention"`` (the mask
        the layer receives).
    attention_chunk_size : int or None
        The chunk of the chunked layers.
    qk_norm : tuple of bool
        Per layer: whether queries and keys are L2-normalised after the
        rotation (``use_qk_norm`` on RoPE layers only).
    temperature_tuning : tuple of bool
        Per layer: whether queries are scaled by
        ``1 + attn_scale * log1p(floor((pos + 1) / floor_scale))``
        (``attn_temperature_tuning`` on NoPE layers only).
    moe : tuple of bool
        Per layer: whether its feed-forward is the mixture of experts.
    floor_scale, attn_scale : float
        The temperature's constants.
    """

    rope: tuple[bool, ...]
    layer_types: tuple[str, ...]
    attention_chunk_size: int | None
    qk_norm: tuple[bool, ...]
    temperature_tuning: tuple[bool, ...]
    moe: tuple[bool, ...]
    floor_scale: float
    attn_scale: float

    @property
    def nope_layers(self) -> tuple[int, ...]:
        """Indices of the NoPE layers."""
        return tuple(i for i, r in enumerate(self.rope) if not r)

    def __str__(self) -> str:
        marks = "".join("R" if r else "N" for r in self.rope)
        return f"IRoPELayers({len(self.rope)} layers, chunk {self.attention_chunk_size}: {marks})"


def _read(config):
    """The keys of a text config as a dict, with transformers' defaults."""
    if isinstance(config, Mapping):
        if "text_config" in config:  # a Llama4Config dict: its text part
            config = config["text_config"]
            if not isinstance(config, Mapping):
                return _read(config)
        return {key: config.get(key, default) for key, default in _DEFAULTS.items()}
    if hasattr(config, "text_config") and not hasattr(config, "no_rope_layers"):
        return _read(config.text_config)
    if not hasattr(config, "num_hidden_layers"):
        raise TypeError(
            "config must be a Llama4TextConfig, a Llama4Config or a dict of its keys, "
            f"not {type(config).__name__}"
        )
    return {key: getattr(config, key, default) for key, default in _DEFAULTS.items()}


def _flags(values, name, layers):
    """A list of 0/1 (or bool) per layer, at least `layers` long."""
    if len(values) < layers:
        raise ValueError(
            f"{name} must have at least num_hidden_layers ({layers}) entries, got {len(values)}"
        )
    out = []
    for v in islice(values, layers):  # not the rest: a list may be longer
        if not isinstance(v, (Integral, np.integer, bool, np.bool_)) or int(v) not in (0, 1):
            raise ValueError(f"{name} must hold only 0 and 1, got {v!r}")
        out.append(bool(v))
    return out


def _flag(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return bool(value)


def irope_layers(config: Any) -> IRoPELayers:
    """Which layers of a Llama 4 text model use RoPE, and their masks.

    Parameters
    ----------
    config : Llama4TextConfig, Llama4Config or dict
        transformers' config (its ``text_config`` is read from a
        ``Llama4Config``), or a dict of its keys (``config.json``'s
        ``text_config`` or the dict itself); a key a dict leaves out takes
        ``Llama4TextConfig``'s default (``num_hidden_layers`` 48,
        ``no_rope_layer_interval`` 4, ``attention_chunk_size`` 8192, ...).
        ``num_hidden_layers`` is at most 65536, and
        ``moe_layers`` lists at most as many: the pattern is made layer
        by layer.

    Returns
    -------
    IRoPELayers
        ``rope[i]`` False for the NoPE layers, ``layer_types[i]`` the mask
        each layer receives, and the rest of the per-layer pattern.

    Examples
    --------
    >>> import posenc
    >>> layers = posenc.irope_layers({"num_hidden_layers": 8, "attention_chunk_size": 8192})
    >>> layers.nope_layers  # every fourth layer attends without RoPE
    (3, 7)
    >>> print(layers)
    IRoPELayers(8 layers, chunk 8192: RRRNRRRN)
    """
    c = _read(config)
    layers = _validate.integer(c["num_hidden_layers"], "num_hidden_layers", minimum=1)
    if layers > _MAX_LAYERS:
        raise ValueError(
            f"num_hidden_layers must be <= {_MAX_LAYERS} (the pattern is made layer by layer), "
            f"got {layers}"
        )
    chunk = c["attention_chunk_size"]
    if chunk is not None:
        chunk = _validate.integer(chunk, "attention_chunk_size", minimum=1)
    given_rope = c["no_rope_layers"]
    if given_rope is not None and (
        isinstance(given_rope, (str, bytes)) or not hasattr(given_rope, "__len__")
    ):
        raise TypeError(
            f"no_rope_layers must be a list of 0 and 1, not {type(given_rope).__name__}"
        )
    if given_rope is not None and len(given_rope):  # transformers: an empty list takes the default
        rope = _flags(given_rope, "no_rope_layers", layers)
        if c["layer_types"] is None and len(c["no_rope_layers"]) != layers:
            # transformers derives layer_types from it and refuses a length other than the layers'
            raise ValueError(
                f"no_rope_layers must have num_hidden_layers ({layers}) entries when layer_types "
                f"is not given, got {len(c['no_rope_layers'])}"
            )
    else:
        interval = _validate.integer(
            c["no_rope_layer_interval"], "no_rope_layer_interval", minimum=1
        )
        rope = [(i + 1) % interval != 0 for i in range(layers)]
    if c["layer_types"] is None:
        types = ["chunked_attention" if r and chunk is not None else "full_attention" for r in rope]
    else:
        given = c["layer_types"]
        if isinstance(given, (str, bytes)) or not hasattr(given, "__len__"):
            raise TypeError(f"layer_types must be a list of strings, not {type(given).__name__}")
        if len(given) != layers:  # as transformers' validate_layer_type
            raise ValueError(
                f"layer_types must have num_hidden_layers ({layers}) entries, got {len(given)}"
            )
        types = [_validate.choice(t, "layer_types", _LAYER_TYPES) for t in given]
        if chunk is None and "chunked_attention" in types:
            raise ValueError(
                "layer_types has chunked_attention layers but attention_chunk_size is None"
            )
    if c["moe_layers"] is None:
        step = _validate.integer(
            c["interleave_moe_layer_step"], "interleave_moe_layer_step", minimum=1
        )
        moe_set = set(range(step - 1, layers, step))
    else:  # indices past the layers are left out, as transformers' `layer_idx in moe_layers`
        given = c["moe_layers"]
        if isinstance(given, (str, bytes)) or not hasattr(given, "__iter__"):
            raise TypeError(
                f"moe_layers must be a list of layer indices, not {type(given).__name__}"
            )
        listed = list(islice(given, _MAX_LAYERS + 1))
        if len(listed) > _MAX_LAYERS:
            raise ValueError(f"moe_layers must list at most {_MAX_LAYERS} layers")
        moe_set = {_validate.integer(i, "moe_layers") for i in listed}
    qk_norm = _flag(c["use_qk_norm"], "use_qk_norm")
    tuning = _flag(c["attn_temperature_tuning"], "attn_temperature_tuning")
    return IRoPELayers(
        rope=tuple(rope),
        layer_types=tuple(types),
        attention_chunk_size=chunk,
        qk_norm=tuple(qk_norm and r for r in rope),
        temperature_tuning=tuple(tuning and not r for r in rope),
        moe=tuple(i in moe_set for i in range(layers)),
        floor_scale=_validate.real(c["floor_scale"], "floor_scale", positive=True),
        attn_scale=_validate.real(c["attn_scale"], "attn_scale"),
    )


def chunked_causal_mask(
    q_len: int,
    k_len: Optional[int] = None,
    *,
    chunk_size: int,
    q_offset: Optional[int] = None,
) -> NDArray[np.bool_]:
    """The boolean mask of Llama 4's chunked-attention (RoPE) layers.

    ``mask[i, j]`` is True where query ``i`` (at position ``q_offset + i``)
    may attend to key ``j`` (at position ``j``): ``j <= q_offset + i`` and
    ``j // chunk_size == (q_offset + i) // chunk_size``.  It is
    transformers' ``chunked_causal_mask_function`` without left padding
    (each row's chunks counted from its first token) and with the keys
    counted from position 0 (a cache that keeps every key).

    Parameters
    ----------
    q_len : int
        Number of queries, >= 1.
    k_len : int, optional
        Number of keys, >= 1; defaults to ``q_offset + q_len``.
    chunk_size : int
        ``attention_chunk_size``, >= 1.
    q_offset : int, optional
        Position of the first query (the tokens already in the cache when
        decoding); defaults to ``k_len - q_len`` (0 without `k_len`).

    Returns
    -------
    numpy.ndarray of bool, shape ``(q_len, k_len)``

    Examples
    --------
    >>> import posenc
    >>> posenc.chunked_causal_mask(4, chunk_size=2).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [0, 0, 1, 0],
           [0, 0, 1, 1]])
    """
    q_len = _validate.integer(q_len, "q_len", minimum=1)
    chunk_size = _validate.integer(chunk_size, "chunk_size", minimum=1)
    if q_offset is not None:
        q_offset = _validate.integer(q_offset, "q_offset", minimum=0)
    if k_len is None:
        k_len = q_len + (q_offset or 0)
    else:
        k_len = _validate.integer(k_len, "k_len", minimum=1)
    if q_offset is None:
        if k_len < q_len:
            raise ValueError(
                f"k_len must be >= q_len ({q_len}) when q_offset is not given, got {k_len}"
            )
        q_offset = k_len - q_len
    # the mask and one more of its size (the second comparison, or the triangles)
    _validate.shape_size((q_len, k_len), "q_len and k_len", 1, count=2)
    first, last = q_offset // chunk_size, (q_offset + q_len - 1) // chunk_size
    last = min(last, (k_len - 1) // chunk_size)  # no key in the later chunks
    if last - first > 64:  # many small chunks: the comparisons, element by element
        # (q_offset < k_len here: the positions are well within int64)
        qpos = q_offset + np.arange(q_len, dtype=np.int64)[:, None]
        kpos = np.arange(k_len, dtype=np.int64)[None, :]
        mask = np.less_equal(kpos, qpos)
        return np.logical_and(mask, kpos // chunk_size == qpos // chunk_size, out=mask)
    mask = np.zeros((q_len, k_len), dtype=bool)
    for chunk in range(first, last + 1):  # a lower triangle on the diagonal of each
        start = chunk * chunk_size
        r0, r1 = max(start - q_offset, 0), min(start + chunk_size - q_offset, q_len)
        width = min(chunk_size, k_len - start)
        # row i: the query at start + (q_offset + r0 - start) + i, keys start + j, j <= that
        mask[r0:r1, start : start + width] = np.tri(r1 - r0, width, q_offset + r0 - start, bool)
    return mask
