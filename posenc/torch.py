"""torch modules for one's own model: rotary tables, ALiBi and T5's bias.

Importing this module imports torch (``import posenc`` alone does not).

- :class:`RotaryEmbedding`: built from ``head_dim`` / ``base`` or from a
  transformers config; ``forward(x, position_ids)`` returns ``(cos, sin)``
  as transformers' rotary modules return them (``(batch, seq, rotary_dim)``
  in ``x``'s dtype, on ``x``'s device), formed by posenc in float64 and
  rounded once.  :func:`apply_rotary` (and :meth:`RotaryEmbedding.rotate`)
  rotates q and k together.
- :class:`ALiBi`: ALiBi's bias in the query-by-key form (``(heads, q, k)``)
  and in the per-key form BLOOM and Falcon add (``(batch, heads, 1, k)``).
- :class:`T5RelativeBias`: T5's bucket table as an ``nn.Parameter``,
  trainable through posenc's backward.

Every function that takes q or k names its layout: ``"bhsd"`` (batch,
heads, seq, head_dim: transformers) or ``"bshd"`` (batch, seq, heads,
head_dim: flash-attn); the tables are put on the sequence axis of that
layout, never guessed from the sizes.

Tables are computed on the CPU by posenc's kernels and moved to the
tensor's device once (cached per device and dtype); on any device, the
lookup, the rotation and the bias add are torch's own ops there.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, cast

import numpy as np
import torch
from torch import nn

from . import bias as _bias
from . import rope as _rope

__all__ = [
    "ALiBi",
    "DebertaRelativeBias",
    "RotaryEmbedding",
    "T5RelativeBias",
    "XLPositionTerm",
    "apply_rotary",
]

_LAYOUTS = ("bhsd", "bshd")
# the smallest table a module grows (positions); it doubles beyond
_MIN_TABLE = 256


def _layout(layout: Any, name: str = "layout") -> str:
    if not isinstance(layout, str) or layout not in _LAYOUTS:
        raise ValueError(
            f"{name} must be 'bhsd' (batch, heads, seq, head_dim: transformers) or 'bshd' "
            f"(batch, seq, heads, head_dim: flash-attn), got {layout!r}"
        )
    return layout


def _rope_params(config: Any, layer_type: Optional[str]) -> Dict[str, Any]:
    """The rope parameters of a transformers config (or config dict) for
    `layer_type`: transformers 5's ``rope_parameters`` or the older
    ``rope_scaling`` (empty for the default family)."""
    get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    params = get("rope_parameters", None) or get("rope_scaling", None) or {}
    if not isinstance(params, dict):
        return {}
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        return params[layer_type]
    return params


def _config_value(config: Any, key: str) -> Any:
    if isinstance(config, dict):
        return config.get(key)
    try:
        return getattr(config, key, None)
    except Exception:  # a config property that raises: not there
        return None


def _layer_types(config: Any) -> list:
    """The layer types of a config holding rope parameters per layer type
    (Gemma 3's ``{"full_attention": {...}, "sliding_attention": {...}}``),
    else ``[None]``."""
    if config is None:
        return [None]
    params = _config_value(config, "rope_parameters")
    if (
        isinstance(params, dict)
        and params
        and all(isinstance(p, dict) or p is None for p in params.values())
    ):
        return [k for k, p in params.items() if p is not None]
    return [None]


def _head_dim_of(config: Any) -> int:
    head_dim = _config_value(config, "head_dim")
    if isinstance(head_dim, int) and head_dim > 0:
        return head_dim
    hidden = _config_value(config, "hidden_size")
    heads = _config_value(config, "num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    raise ValueError(
        "config has neither head_dim nor hidden_size and num_attention_heads: pass head_dim"
    )


class RotaryEmbedding(nn.Module):
    """Rotary cos and sin tables, as transformers' rotary modules give them.

    Parameters
    ----------
    head_dim : int, optional
        The head dimension (the config's ``head_dim``, or ``hidden_size //
        num_attention_heads``, when `config` is given and this is not).
    base : float
        The rotary base (theta) without a config.
    config : transformers config or dict, optional
        Read as :func:`posenc.rope_cos_sin`'s ``scaling=`` reads it: every
        family, partial rotary, M-RoPE sections (positions in three rows).
    layer_type : str, optional
        The layer type whose parameters to use (Gemma 3's
        ``"full_attention"`` / ``"sliding_attention"``); a call may also
        name one (``forward(x, position_ids, layer_type=...)``, as
        transformers' per-layer-type modules take it).
    layout : {"half", "interleaved"}
        The table layout (``"half"``: transformers' ``rotate_half``).

    Notes
    -----
    ``forward(x, position_ids)`` returns ``(cos, sin)`` of shape
    ``position_ids.shape + (rotary_dim,)`` (M-RoPE: ``position_ids.shape[1:]
    + (rotary_dim,)``) in ``x``'s dtype on ``x``'s device.  The tables for
    positions ``0 .. n-1`` are formed once by posenc (angles in float64,
    rounded once to the dtype) and kept per device, dtype and layer type, so
    a decoding step looks up what an earlier step computed.  ``dynamic``
    NTK keeps transformers' state (the frequencies grown for the longest
    call until a call within the trained length resets them) and switches
    where transformers' module switches; ``longrope`` switches between its
    short and long factors at ``original_max_position_embeddings``, as
    transformers does.  Under ``torch.compile`` a call computes its tables
    with posenc's operator (the same numbers, no graph break); the dynamic
    family then grows its frequencies for the call's own length, as a fresh
    transformers module does.
    """

    def __init__(
        self,
        head_dim: Optional[int] = None,
        base: float = 10000.0,
        *,
        config: Any = None,
        layer_type: Optional[str] = None,
        layout: str = "half",
    ) -> None:
        super().__init__()
        if config is None and head_dim is None:
            raise TypeError("RotaryEmbedding needs head_dim or config")
        if head_dim is None:
            head_dim = _head_dim_of(config)
        if not isinstance(head_dim, int) or isinstance(head_dim, bool):
            raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
        self.head_dim = head_dim
        self.base = float(base)
        self.config = config
        self.layer_type = layer_type
        self.layout = layout
        # the layer types of per-layer parameters (Gemma 3's), None otherwise
        self.layer_types = _layer_types(config) if layer_type is None else [layer_type]
        # raises here, naming the argument, on anything posenc does not read
        self._rotary_dims = {
            lt: int(self._tables_np(np.arange(1), lt, np.float64)[0].shape[-1])
            for lt in self.layer_types
        }
        self.rotary_dim = self._rotary_dims[self.layer_types[0]]
        # per layer type: the family and whether positions come in rows,
        # read once (a transformers config's attributes are slow to read)
        self._info = {lt: (self._family(lt), self._mrope(lt)) for lt in self.layer_types}
        self._cache: Dict[Any, Tuple[int, torch.Tensor, torch.Tensor]] = {}
        # transformers' dynamic-NTK state per layer type: the length the
        # frequencies were grown for
        self._grown: Dict[Optional[str], int] = {}

    # -- what the config says -------------------------------------------------
    def _params(self, layer_type: Optional[str]) -> Dict[str, Any]:
        return {} if self.config is None else _rope_params(self.config, layer_type)

    def _family(self, layer_type: Optional[str]) -> str:
        params = self._params(layer_type)
        family = params.get("rope_type", params.get("type", "default"))
        return str(family)

    def _mrope(self, layer_type: Optional[str]) -> bool:
        params = self._params(layer_type)
        return params.get("mrope_section") is not None

    def _original_max(self, layer_type: Optional[str]) -> int:
        params = self._params(layer_type)
        value = params.get("original_max_position_embeddings")
        if value is None:
            value = _config_value(self.config, "original_max_position_embeddings")
        if value is None:
            value = _config_value(self.config, "max_position_embeddings")
        return int(value)

    def _kwargs(self, layer_type: Optional[str]) -> Dict[str, Any]:
        kwargs: Dict[str, Any] = {"base": self.base, "layout": self.layout}
        if self.config is not None:
            kwargs["scaling"] = self.config
        if layer_type is not None:
            kwargs["layer_type"] = layer_type
        return kwargs

    def _tables_np(self, positions: Any, layer_type: Optional[str], dtype: Any) -> Any:
        return _rope.rope_cos_sin(positions, self.head_dim, dtype=dtype, **self._kwargs(layer_type))

    # -- the tables ------------------------------------------------------------
    def _table(
        self,
        n: int,
        grown: int,
        layer_type: Optional[str],
        dtype: torch.dtype,
        device: torch.device,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Tables for positions 0 .. >= n-1 with the frequencies of sequence
        length `grown` (0: the frequencies of any length within the trained
        one), in `dtype` on `device`."""
        # one entry per layer type, dtype, device and short/long table: a
        # dynamic table grown anew replaces the one before
        key = (layer_type, bool(grown), dtype, device)
        entry = self._cache.get(key)
        cached = entry[1:] if entry is not None and entry[0] == grown else None
        if cached is not None and cached[0].shape[0] >= n:
            return cached
        if dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise TypeError(
                f"x must be a float16, bfloat16, float32 or float64 tensor, got {dtype}"
            )
        length = max(n, _MIN_TABLE, 2 * (cached[0].shape[0] if cached is not None else 0))
        family = self._family(layer_type)
        if "dynamic" in family or family == "longrope":
            # the families whose frequencies depend on the length: never past
            # the length that decides them
            length = max(n, min(length, grown or self._original_max(layer_type)))
        positions = torch.arange(length, dtype=torch.int64)
        cos, sin = _rope.rope_cos_sin(
            positions, self.head_dim, dtype=dtype, seq_len=grown or None,
            **self._kwargs(layer_type),
        )  # fmt: skip
        if device.type != "cpu" or _FORCE_DEVICE_PATH:
            cos, sin = cos.to(device, copy=True), sin.to(device, copy=True)
        self._cache[key] = (grown, cos, sin)
        return cos, sin

    def _state(self, seq_len: int, layer_type: Optional[str]) -> int:
        """The grown length transformers' module would use for a call whose
        positions reach `seq_len` (0: not grown), updating its state."""
        family = self._family(layer_type)
        original = self._original_max(layer_type)
        if family == "longrope":
            return seq_len if seq_len > original else 0
        if "dynamic" not in family:
            return 0
        # transformers' dynamic_frequency_update: grows past the longest call
        # seen (from max_position_embeddings), resets below the trained length
        start = int(_config_value(self.config, "max_position_embeddings") or original)
        cached = self._grown.get(layer_type, 0) or start
        if seq_len > cached:
            cached = seq_len
        if seq_len < start and cached > start:
            cached = start
        self._grown[layer_type] = cached if cached > start else 0
        return self._grown[layer_type]

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: Optional[str] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` for `position_ids` (int, transformers' shapes), in
        ``x``'s dtype on ``x``'s device."""
        if not torch.is_tensor(x):
            raise TypeError(f"x must be a torch tensor, got {type(x).__name__}")
        if not torch.is_tensor(position_ids):
            raise TypeError(
                f"position_ids must be a torch tensor, got {type(position_ids).__name__}"
            )
        if position_ids.is_floating_point() or position_ids.is_complex():
            raise TypeError(f"position_ids must be an integer tensor, got {position_ids.dtype}")
        layer_type = self.layer_type if layer_type is None else layer_type
        info = self._info.get(layer_type)
        if info is None:
            raise ValueError(
                f"layer_type must be one of {[t for t in self.layer_types if t is not None]} "
                f"(the config's parameters per layer type), got {layer_type!r}"
                if self.layer_types != [None]
                else f"layer_type: this config has no parameters per layer type, got {layer_type!r}"
            )
        family, mrope = info
        dtype, device = x.dtype, x.device
        if mrope or torch.compiler.is_compiling():
            return self._direct(position_ids, layer_type, dtype, device)
        n = position_ids.numel()
        if n == 0:
            shape = tuple(position_ids.shape) + (self._rotary_dims[layer_type],)
            empty = torch.empty(shape, dtype=dtype, device=device)
            return empty, empty.clone()
        if n <= 64:  # a decoding step: the few ids read at once
            values = position_ids.flatten().tolist()
            lo_i, hi_i = min(values), max(values)
        else:
            lo, hi = torch.aminmax(position_ids)
            lo_i, hi_i = int(lo), int(hi)
        if lo_i < 0:
            raise ValueError(f"position_ids must be >= 0, got {lo_i}")
        seq_len = hi_i + 1
        grown = 0
        if family != "default":
            grown = self._state(seq_len, layer_type)
            if family == "longrope" and grown:
                grown = self._original_max(layer_type) + 1  # one long table for every long call
        cos, sin = self._table(seq_len, grown, layer_type, dtype, device)
        ids = position_ids if position_ids.device == device else position_ids.to(device)
        return nn.functional.embedding(ids, cos), nn.functional.embedding(ids, sin)

    def _direct(
        self,
        position_ids: torch.Tensor,
        layer_type: Optional[str],
        dtype: torch.dtype,
        device: torch.device,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """posenc's tables for exactly these positions (computed on the CPU)."""
        ids = position_ids if position_ids.device.type == "cpu" else position_ids.cpu()
        cos, sin = _rope.rope_cos_sin(ids, self.head_dim, dtype=dtype, **self._kwargs(layer_type))
        if device.type != "cpu":
            cos, sin = cos.to(device), sin.to(device)
        return cos, sin

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        layout: str = "bhsd",
        layer_type: Optional[str] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """q and k rotated by `position_ids` (``(batch, seq)`` or ``(seq,)``),
        both in `layout`."""
        cos, sin = self(q, position_ids, layer_type=layer_type)
        return apply_rotary(q, k, cos, sin, layout=layout, rope_layout=self.layout)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, layout={self.layout!r}"


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_interleaved(x: torch.Tensor) -> torch.Tensor:
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def _rotate_one(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope_layout: str
) -> torch.Tensor:
    rotary = cos.shape[-1]
    turn = _rotate_half if rope_layout == "half" else _rotate_interleaved
    if rotary == x.shape[-1]:
        return x * cos + turn(x) * sin
    head, rest = x[..., :rotary], x[..., rotary:]
    return torch.cat((head * cos + turn(head) * sin, rest), dim=-1)


def apply_rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str = "bhsd",
    rope_layout: str = "half",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """q and k rotated by the tables of :class:`RotaryEmbedding` (or of a
    transformers rotary module).

    Parameters
    ----------
    q, k : tensor, 4-d
        In `layout`: ``"bhsd"`` (batch, heads, seq, head_dim) or ``"bshd"``
        (batch, seq, heads, head_dim).  q and k may have different numbers of
        heads (grouped-query attention).
    cos, sin : tensor of shape (batch or 1, seq, rotary_dim) or (seq, rotary_dim)
        ``rotary_dim <= head_dim``: the first ``rotary_dim`` features are
        rotated, the rest pass unchanged (partial rotary).
    rope_layout : {"half", "interleaved"}
        The pairing the tables were made for.

    Returns
    -------
    (q, k) rotated, new tensors (q * cos + rotate(q) * sin, torch's ops on
    the tensors' device).
    """
    layout = _layout(layout)
    if rope_layout not in ("half", "interleaved"):
        raise ValueError(f"rope_layout must be 'half' or 'interleaved', got {rope_layout!r}")
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        if not torch.is_tensor(t):
            raise TypeError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have the same shape, got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")  # fmt: skip
    if cos.ndim not in (2, 3):
        raise ValueError(
            "cos must be (batch, seq, rotary_dim) or (seq, rotary_dim), got shape "
            f"{tuple(cos.shape)}"
        )
    seq_axis = 2 if layout == "bhsd" else 1
    for name, t in (("q", q), ("k", k)):
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-d ({layout}), got shape {tuple(t.shape)}")
        if t.shape[seq_axis] != cos.shape[-2]:
            raise ValueError(
                f"{name} has {t.shape[seq_axis]} positions on its seq axis ({layout}: axis "
                f"{seq_axis}), cos has {cos.shape[-2]}"
            )
        if cos.ndim == 3 and cos.shape[0] not in (1, t.shape[0]):
            raise ValueError(
                f"cos has batch {cos.shape[0]}, {name} has batch {t.shape[0]} "
                f"(shape {tuple(t.shape)})"
            )
        if cos.shape[-1] > t.shape[-1] or cos.shape[-1] % 2:
            raise ValueError(
                f"cos has {cos.shape[-1]} columns: an even number at most {name}'s head_dim "
                f"{t.shape[-1]}"
            )
    if cos.ndim == 2:
        cos, sin = cos[None], sin[None]
    heads_axis = 1 if layout == "bhsd" else 2
    cos, sin = cos.unsqueeze(heads_axis), sin.unsqueeze(heads_axis)
    return _rotate_one(q, cos, sin, rope_layout), _rotate_one(k, cos, sin, rope_layout)


class ALiBi(nn.Module):
    """ALiBi's attention bias (Press et al., 2022), slopes from
    :func:`posenc.alibi_slopes` (or given), products formed in float64 and
    rounded once to the scores' dtype.

    ``bias(q_len, k_len)`` is ``(heads, q_len, k_len)``: ``-slope * (i -
    j)`` with queries the newest `q_len` of `k_len` tokens.
    ``key_bias(attention_mask)`` is ``(batch, heads, 1, k_len)``:
    ``slope * position of key j`` counted over the mask's ones (0 at
    padding), the form BLOOM and Falcon add (equal after the softmax).
    ``forward(scores)`` adds ``bias`` into ``(batch, heads, q, k)`` scores.
    """

    def __init__(
        self, n_heads: int, *, max_bias: float = 8.0, slopes: Optional[Sequence[float]] = None
    ) -> None:
        super().__init__()
        if slopes is None:
            values = _bias.alibi_slopes(n_heads, max_bias=max_bias)
        else:
            values = np.asarray(slopes, dtype=np.float64)
            if values.shape != (n_heads,):
                raise ValueError(f"slopes must have shape ({n_heads},), got {values.shape}")
        self.n_heads = n_heads
        self.max_bias = max_bias
        # float64 for the products; never cast with the model (not a buffer)
        self.slopes = torch.from_numpy(np.array(values, dtype=np.float64))
        self._given = slopes is not None

    def bias(
        self,
        q_len: int,
        k_len: Optional[int] = None,
        *,
        q_offset: Optional[int] = None,
        dtype: torch.dtype = torch.float32,
        device: Any = "cpu",
    ) -> torch.Tensor:
        slopes = self.slopes.numpy() if self._given else None
        out = cast(torch.Tensor, _bias.alibi_bias(
            self.n_heads, q_len, k_len, slopes=slopes, max_bias=self.max_bias,
            q_offset=q_offset, dtype=dtype,
        ))  # fmt: skip
        return out if torch.device(device).type == "cpu" else out.to(device)

    def key_bias(self, attention_mask: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
        if not torch.is_tensor(attention_mask) or attention_mask.ndim != 2:
            raise ValueError("attention_mask must be a (batch, k_len) tensor")
        mask = attention_mask if attention_mask.device.type == "cpu" else attention_mask.cpu()
        out = cast(torch.Tensor, _bias.alibi_key_bias(
            mask, self.n_heads, slopes=self.slopes.numpy() if self._given else None,
            max_bias=self.max_bias if not self._given else 8.0, dtype=dtype,
        ))  # fmt: skip
        return out if attention_mask.device.type == "cpu" else out.to(attention_mask.device)

    def forward(self, scores: torch.Tensor, *, q_offset: Optional[int] = None) -> torch.Tensor:
        if not torch.is_tensor(scores) or scores.ndim != 4 or scores.shape[1] != self.n_heads:
            raise ValueError(
                f"scores must be a (batch, {self.n_heads}, q_len, k_len) tensor, got "
                f"{tuple(scores.shape) if torch.is_tensor(scores) else type(scores).__name__}"
            )
        b = self.bias(scores.shape[2], scores.shape[3], q_offset=q_offset, dtype=scores.dtype,
                      device=scores.device)  # fmt: skip
        return scores + b


class T5RelativeBias(nn.Module):
    """T5's bucketed relative attention bias with its table as a parameter.

    ``forward(q_len, k_len, q_offset=0)`` gives ``(1, heads, q_len, k_len)``
    (as ``T5Attention.compute_bias``) from :func:`posenc.t5_bias`, whose
    backward adds the gradient into the table by bucket.
    """

    def __init__(
        self,
        num_buckets: int = 32,
        n_heads: int = 8,
        *,
        bidirectional: bool = True,
        max_distance: int = 128,
        weight: Optional[torch.Tensor] = None,
    ) -> None:
        super().__init__()
        if weight is None:
            weight = torch.zeros(num_buckets, n_heads)
        self.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight)
        self.bidirectional = bool(bidirectional)
        self.max_distance = int(max_distance)
        self._bucket_cache: Dict[Any, torch.Tensor] = {}

    def forward(self, q_len: int, k_len: Optional[int] = None, q_offset: int = 0) -> torch.Tensor:
        weight = self.weight
        if weight.device.type == "cpu" and not _FORCE_DEVICE_PATH:
            out = _bias.t5_bias(
                weight, q_len, k_len, bidirectional=self.bidirectional,
                max_distance=self.max_distance, q_offset=q_offset,
            )  # fmt: skip
            return out[None]
        # another device: the buckets from posenc (on the CPU, once per shape),
        # the gather and its gradient torch's own ops there
        buckets = self._buckets(q_len, q_len if k_len is None else k_len, q_offset, weight.device)
        return nn.functional.embedding(buckets, weight).permute(2, 0, 1)[None]

    def _buckets(self, q_len: int, k_len: int, q_offset: int, device: torch.device) -> torch.Tensor:
        key = (q_len, k_len, q_offset, device)
        cached = self._bucket_cache.get(key)
        if cached is None:
            rel = np.arange(k_len)[None, :] - (np.arange(q_len)[:, None] + q_offset)
            buckets = _bias.relative_position_bucket(
                rel, bidirectional=self.bidirectional, num_buckets=self.weight.shape[0],
                max_distance=self.max_distance,
            )  # fmt: skip
            cached = torch.from_numpy(np.ascontiguousarray(buckets)).to(device)
            if len(self._bucket_cache) > 64:
                self._bucket_cache.clear()
            self._bucket_cache[key] = cached
        return cached


class XLPositionTerm(nn.Module):
    """Transformer-XL / XLNet's position term ``(q_i + v) . r[i - j]``,
    shifted by posenc (:func:`posenc.xl_position_term`).

    ``forward(q, r, k_len=None)`` with q and r in `layout`: ``"ibnd"``
    (XLNet's and Transformer-XL's ``(len, batch, heads, head_dim)``),
    ``"bnid"`` (``(batch, heads, len, head_dim)``) or ``"bind"``
    (``(batch, len, heads, head_dim)``); r holds ``k_len + q_len`` rows
    (XLNet's ``"bi"`` table projected, ``k_head_r``) or ``k_len`` (the
    ``"uni"`` table; give ``k_len``).  Returns ``(batch, heads, q_len,
    k_len)``, the scores' layout of both models.  `bias` (``r_r_bias``,
    ``(heads, head_dim)``) is a parameter of the module, or None.
    """

    _PERMUTE = {"ibnd": (1, 2, 0, 3), "bnid": (0, 1, 2, 3), "bind": (0, 2, 1, 3)}

    def __init__(self, bias: Optional[torch.Tensor] = None, *, layout: str = "ibnd") -> None:
        super().__init__()
        if layout not in self._PERMUTE:
            raise ValueError(f"layout must be one of {sorted(self._PERMUTE)}, got {layout!r}")
        self.layout = layout
        self.bias = None if bias is None else (
            bias if isinstance(bias, nn.Parameter) else nn.Parameter(bias)
        )  # fmt: skip

    def forward(self, q: torch.Tensor, r: torch.Tensor, k_len: Optional[int] = None) -> Any:
        from . import relative

        order = self._PERMUTE[self.layout]
        for name, t in (("q", q), ("r", r)):
            if not torch.is_tensor(t) or t.ndim != 4:
                raise ValueError(f"{name} must be a 4-d tensor in layout {self.layout!r}")
        return relative.xl_position_term(
            q.permute(order), r.permute(order), bias=self.bias, k_len=k_len
        )


class DebertaRelativeBias(nn.Module):
    """DeBERTa's disentangled attention bias (c2p and p2c) by posenc
    (:func:`posenc.deberta_attention_bias`).

    ``forward(q, k, pos_key=None, pos_query=None)``: q and k in `layout`,
    ``"(bh)sd"`` (DeBERTa-v2's ``query_layer``: ``(batch * heads, len,
    head_dim)``; give `n_heads`) or ``"bhsd"``; ``pos_key`` / ``pos_query``
    the relative embeddings projected per head, ``(heads, 2 * span,
    head_dim)`` (None: no c2p / p2c term).  Returns the bias in q's layout's
    scores form, ``(batch * heads, q_len, k_len)`` or ``(batch, heads,
    q_len, k_len)``, each term over ``sqrt(head_dim * scale_factor)``.
    """

    def __init__(
        self,
        *,
        position_buckets: int = -1,
        max_relative_positions: int = 512,
        n_heads: Optional[int] = None,
        layout: str = "bhsd",
    ) -> None:
        super().__init__()
        if layout not in ("bhsd", "(bh)sd"):
            raise ValueError(f"layout must be 'bhsd' or '(bh)sd', got {layout!r}")
        if layout == "(bh)sd" and not isinstance(n_heads, int):
            raise TypeError("n_heads must be given (an int) with layout '(bh)sd'")
        self.position_buckets = position_buckets
        self.max_relative_positions = max_relative_positions
        self.n_heads = n_heads
        self.layout = layout

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        pos_key: Optional[torch.Tensor] = None,
        pos_query: Optional[torch.Tensor] = None,
        *,
        scale_factor: Optional[int] = None,
    ) -> Any:
        from . import relative

        if self.layout == "(bh)sd":
            h = cast(int, self.n_heads)
            for name, t in (("q", q), ("k", k)):
                if t.ndim != 3 or t.shape[0] % h:
                    raise ValueError(
                        f"{name} must be (batch * {h}, len, head_dim) in layout '(bh)sd', "
                        f"got shape {tuple(t.shape)}"
                    )
            bh, q_len, d = q.shape
            k_len = k.shape[1]
            q4, k4 = q.reshape(bh // h, h, q_len, d), k.reshape(bh // h, h, k_len, d)
        else:
            q4, k4 = q, k
        out = relative.deberta_attention_bias(
            q4, k4, pos_key, pos_query, position_buckets=self.position_buckets,
            max_relative_positions=self.max_relative_positions, scale_factor=scale_factor,
        )  # fmt: skip
        return out.reshape(-1, *out.shape[-2:]) if self.layout == "(bh)sd" else out


# Tests set this to run the non-CPU code path (torch's ops on the tables
# moved to the tensor's device) on the CPU: the same code CUDA runs.
_FORCE_DEVICE_PATH = False
