"""torch modules for one's own model: rotary tables, attention biases, embeddings.

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
- :class:`SinusoidalEmbedding`, :class:`LearnedPositionEmbedding`,
  :class:`ComplexOrderEmbedding`: absolute embeddings (the learned table
  initialisable from any table :func:`posenc.probe.load_position_embeddings`
  reads).
- :class:`KerpleBias`, :class:`SandwichBias`, :class:`FireBias`,
  :class:`CoPE`: the biases of :mod:`posenc.functional_bias` and
  :func:`posenc.cope_bias` with their parameters as the authors' modules
  hold them.

Every function that takes q or k names its layout: ``"bhsd"`` (batch,
heads, seq, head_dim: transformers) or ``"bshd"`` (batch, seq, heads,
head_dim: flash-attn); the tables are put on the sequence axis of that
layout, never guessed from the sizes.

Tables are computed on the CPU by posenc's kernels and moved to the
tensor's device once (cached per device and dtype); on any device, the
lookup, the rotation and the bias add are torch's own ops there.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import torch
from torch import nn

from . import _distance_bias, _relative_terms, _t5_bias, _torch, _validate
from . import bias as _bias
from . import rope as _rope
from . import rope_scaling as _rope_scaling
from ._model_config import config_value, copied
from ._torch_args import device as _device
from ._torch_args import float_tensor as _float_tensor
from ._torch_args import on_meta as _on_meta
from ._torch_args import scores as _scores
from ._torch_args import tensor as _tensor
from ._torch_args import to as _to
from ._torch_modules import (
    ComplexOrderEmbedding,
    CoPE,
    FireBias,
    KerpleBias,
    LearnedPositionEmbedding,
    SandwichBias,
    SinusoidalEmbedding,
)

__all__ = [
    "ALiBi",
    "CoPE",
    "ComplexOrderEmbedding",
    "DebertaRelativeBias",
    "FireBias",
    "KerpleBias",
    "LearnedPositionEmbedding",
    "RotaryEmbedding",
    "SandwichBias",
    "SinusoidalEmbedding",
    "T5RelativeBias",
    "XLPositionTerm",
    "apply_rotary",
]

_LAYOUTS = ("bhsd", "bshd")
# the smallest table a module grows (positions); it doubles beyond, up to
# _TABLE_BYTES a table (cos and sin together): positions past that are
# computed for the ids a call gives, as transformers' modules compute them
_MIN_TABLE = 256
_TABLE_BYTES = 8 << 20
# the tables a module keeps at once (one per layer type, dtype, device and
# LongRoPE's short or long factors), the least recently used dropped first
_CACHE_ENTRIES = 8
_CACHE_BYTES = 32 << 20
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# the dtypes whose tables posenc's NumPy functions give directly
_NUMPY_FLOATS = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}
# the ids nn.functional.embedding takes as they are
_INDEX_DTYPES = (torch.int32, torch.int64)


def _layout(layout: Any, name: str = "layout") -> str:
    if not isinstance(layout, str):
        raise TypeError(f"{name} must be a string, 'bhsd' or 'bshd', not {type(layout).__name__}")
    if layout not in _LAYOUTS:
        raise ValueError(
            f"{name} must be 'bhsd' (batch, heads, seq, head_dim: transformers) or 'bshd' "
            f"(batch, seq, heads, head_dim: flash-attn), got {layout!r}"
        )
    return layout


def _real(value: Any, name: str) -> float:
    """A finite positive real, by name (an int past float's range is refused
    as such)."""
    return float(_validate.real(value, name, positive=True))


def _layer_types(config: Any) -> list:
    """The layer types of a config holding rope parameters per layer type
    (Gemma 3's ``{"full_attention": {...}, "sliding_attention": {...}}``),
    else ``[None]``."""
    if config is None:
        return [None]
    params = config_value(config, "rope_parameters")
    if (
        isinstance(params, dict)
        and params
        and all(isinstance(p, dict) or p is None for p in params.values())
    ):
        return [k for k, p in params.items() if p is not None]
    return [None]


def _head_dim_of(config: Any) -> int:
    head_dim = config_value(config, "head_dim")
    if isinstance(head_dim, int) and not isinstance(head_dim, bool) and head_dim > 0:
        return head_dim
    hidden = config_value(config, "hidden_size")
    heads = config_value(config, "num_attention_heads")
    if (
        isinstance(hidden, int)
        and isinstance(heads, int)
        and not isinstance(heads, bool)
        and heads > 0
    ):
        return hidden // heads
    raise ValueError(
        "config has neither head_dim nor hidden_size and num_attention_heads: pass head_dim"
    )


def _snapshot(config: Any) -> Any:
    """A private copy of `config`: the module reads it once, and later edits
    of the caller's config (or of its dicts) change nothing."""
    if config is None:
        return None
    if isinstance(config, (str, bytes)) or not (
        isinstance(config, dict) or hasattr(config, "__dict__")
    ):
        raise TypeError(
            "config must be a transformers config or a dict (config.json's, or a "
            f"rope_parameters dict), not {type(config).__name__}"
        )
    return copied(config, "config")


class _Reading:
    """What the module reads from its config for one layer type, once: how
    posenc's tables are asked for, the rows positions come in and the
    family's sequence-length rule."""

    def __init__(
        self,
        module: RotaryEmbedding,
        layer_type: Optional[str],
        mrope_section: Any,
        mrope_interleaved: Any,
    ) -> None:
        config = module.config
        rope = _rope_scaling.read(config, layer_type)  # raises, naming the key
        self.family = rope.family.name
        self.needs_seq_len = rope.family.needs_seq_len
        params = rope.params
        stated = _rope_scaling.sections(rope)
        mrope_model = rope.model_mrope_layout
        if mrope_section is not None:
            sections = _rope_scaling.section_list(mrope_section, "mrope_section")
            if mrope_interleaved is None and stated is None and rope.whole_config:
                if mrope_model is None:
                    raise ValueError(
                        f"mrope_section with a config of model type {rope.model_type!r}: posenc "
                        "does not know how its rotary code shares the pairs among the rows; "
                        "pass mrope_interleaved= (False: Qwen2-VL's runs, True: Qwen3-VL's "
                        "interleaving)"
                    )
                mrope_interleaved = mrope_model
        elif stated is not None:
            sections = stated[0]
        else:
            sections = None
            if mrope_interleaved:
                raise ValueError(
                    "mrope_interleaved=True needs mrope_section= (the pairs of each row)"
                )
        if sections is None and mrope_model is not None and rope.whole_config:
            raise ValueError(
                f"the config (model type {rope.model_type!r}) states no mrope_section: that "
                "model's rotary module takes positions in 3 rows and shares the pairs among "
                "them by its class's default sections, which posenc does not guess; pass "
                "mrope_section= (the module's mrope_section)"
            )
        if sections is not None and mrope_model is not None and len(sections) != 3:
            raise ValueError(
                f"mrope_section {list(sections)}: the rotary code of {rope.model_type!r} "
                "reads 3 rows of positions (and 3 sections); posenc would read "
                f"{len(sections)} rows"
            )
        #: positions in rows: M-RoPE's (transformers' (3, batch, seq), a
        #: (batch, seq) for every row) or axial RoPE's (rows first)
        self.mrope = sections is not None
        self.rows = len(sections) if sections is not None else (rope.family.rows or 1)
        # the trained lengths of the length-dependent families
        self.start = _length(params.get("max_position_embeddings"))
        self.original = _length(params.get("original_max_position_embeddings"))
        if self.start is None:
            self.start = self.original
        if self.original is None:
            self.original = self.start
        mrope_kwargs: Dict[str, Any] = {}
        if mrope_section is not None:
            mrope_kwargs["mrope_section"] = list(sections or ())
        if mrope_interleaved is not None:
            mrope_kwargs["mrope_interleaved"] = mrope_interleaved
        # the call as it reads the config (slow: a transformers config's
        # attributes), and the same numbers from a plain dict (fast), used
        # when the probe finds them equal
        self.kwargs: Dict[str, Any] = dict(base=module.base, layout=module.layout, **mrope_kwargs)
        if config is not None:
            self.kwargs["scaling"] = config
        if layer_type is not None:
            self.kwargs["layer_type"] = layer_type
        probe = self._probe_positions()
        cos = module._compute(probe[0], self.kwargs, None, torch.float64)[0]
        self.rotary_dim = int(cos.shape[-1])
        fast = self._fast_kwargs(module, rope, sections, mrope_interleaved)
        if fast is not None and self._same(module, fast, probe):
            self.kwargs = fast
        #: the configuration read once, for the tables made eagerly
        self.plan = _rope.Rope(module.head_dim, **self.kwargs)

    def _probe_positions(self) -> List[torch.Tensor]:
        # int64 ids on the CPU, whatever device a model is built on
        ids = torch.tensor([0, 1, 7, 1000, 12345, 65537], dtype=torch.int64, device="cpu")
        if self.rows == 1:
            return [ids[:1], ids]
        rows = torch.stack([ids // (r + 1) + r for r in range(self.rows)])
        return [rows[:, :1], rows]

    def _fast_kwargs(
        self,
        module: RotaryEmbedding,
        rope: Any,
        sections: Optional[Sequence[int]],
        interleaved: Any,
    ) -> Optional[Dict[str, Any]]:
        """The call's options with the config's rope parameters as a plain
        dict (None for the families a bare dict does not name)."""
        if rope.family.rows:
            return None
        try:
            base = _rope_scaling.base_of(module.base, rope)
        except (TypeError, ValueError):
            return None
        params = rope.plain_params()
        params["rope_theta"] = base
        kwargs: Dict[str, Any] = {"scaling": params, "layout": module.layout}
        if sections is not None:
            if interleaved is None:
                stated = _rope_scaling.sections(rope)
                interleaved = stated[1] if stated is not None else False
            kwargs["mrope_section"] = list(sections)
            kwargs["mrope_interleaved"] = bool(interleaved)
        return kwargs

    def _same(self, module: RotaryEmbedding, fast: Dict[str, Any], probe: list) -> bool:
        lengths: List[Optional[int]] = [None]
        if self.needs_seq_len:
            known = [n for n in (self.start, self.original) if n is not None]
            lengths = [1, *(n + 1 for n in known), *(2 * n + 3 for n in known)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for seq_len in lengths:
                    a = module._compute(probe[1], self.kwargs, seq_len, torch.float64)
                    b = module._compute(probe[1], fast, seq_len, torch.float64)
                    if not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])):
                        return False
        except (TypeError, ValueError):
            return False
        return True


def _length(value: Any) -> Optional[int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


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
        family, partial rotary, M-RoPE sections (positions in rows).  The
        module reads a copy taken when it is built: later edits of the
        config change nothing, as a transformers module keeps the
        frequencies it was built with.
    layer_type : str, optional
        The layer type whose parameters to use (Gemma 3's
        ``"full_attention"`` / ``"sliding_attention"``); a call may also
        name one (``forward(x, position_ids, layer_type=...)``, as
        transformers' per-layer-type modules take it).
    layout : {"half", "interleaved"}
        The table layout (``"half"``: transformers' ``rotate_half``).
    mrope_section, mrope_interleaved : optional
        M-RoPE's sections where the config states none (transformers'
        Qwen2-VL modules fall back on their class's own, ``[16, 24, 24]``,
        which the module holds as ``mrope_section``), and whether they are
        interleaved (Qwen3-VL) rather than in runs (Qwen2-VL); with a
        config, its model type decides that.  A config of an M-RoPE model
        that states no sections needs `mrope_section`.

    Notes
    -----
    ``forward(x, position_ids)`` returns ``(cos, sin)`` of shape
    ``position_ids.shape + (rotary_dim,)`` in ``x``'s dtype on ``x``'s
    device.  ``position_ids`` may be of any integer dtype (bool is refused).
    With M-RoPE (a config with ``mrope_section``, Qwen2-VL, Qwen2.5-VL,
    Qwen3-VL) they are transformers' ``(3, batch, seq)`` (or ``(1, batch,
    seq)``), or ``(batch, seq)`` for the same positions in every row, as
    transformers' modules expand them; the tables are then ``(batch, seq,
    rotary_dim)``.  Axial RoPE's (a vision tower's config) come as ``(2,
    ...)``, rows first.

    The tables of positions ``0 .. n-1`` are formed by posenc (angles in
    float64, rounded once to the dtype) and kept per device, dtype and
    layer type, so that a decoding step looks up what an earlier step
    computed; a table stays within ``_TABLE_BYTES`` (8 MiB), the module
    keeps at most ``_CACHE_ENTRIES`` (8) of them and ``_CACHE_BYTES`` (32
    MiB) in all, and positions past a table are computed for the ids given
    alone: a step at position ``10**7`` makes no table, and takes tens of
    microseconds, as one at 10 does.
    M-RoPE's tables are computed for the ids given.  ``dynamic`` NTK keeps
    transformers' state (the frequencies grown for the longest call until a
    call within the trained length resets them) and switches where
    transformers' module switches; ``longrope`` switches between its short
    and long factors at ``original_max_position_embeddings``, as
    transformers does.  Under ``torch.compile`` a call computes its tables
    with posenc's operator (the same numbers, no graph break); the dynamic
    family then grows its frequencies for the call's own length, as a fresh
    transformers module does.  On the ``meta`` device (a model built under
    ``torch.device("meta")``) a call gives empty meta tensors of the
    tables' shape and dtype.
    """

    def __init__(
        self,
        head_dim: Optional[int] = None,
        base: float = 10000.0,
        *,
        config: Any = None,
        layer_type: Optional[str] = None,
        layout: str = "half",
        mrope_section: Optional[Sequence[int]] = None,
        mrope_interleaved: Optional[bool] = None,
    ) -> None:
        super().__init__()
        if config is None and head_dim is None:
            raise TypeError("RotaryEmbedding needs head_dim or config")
        config = _snapshot(config)
        if head_dim is None:
            head_dim = _head_dim_of(config)
        self.head_dim = _validate.even_dim(head_dim, "head_dim")
        self.base = _real(base, "base")
        self.layout = _validate.choice(layout, "layout", ("half", "interleaved"))
        if layer_type is not None and not isinstance(layer_type, str):
            raise TypeError(f"layer_type must be a string, not {type(layer_type).__name__}")
        if mrope_interleaved is not None:
            mrope_interleaved = _validate.flag(mrope_interleaved, "mrope_interleaved")
        #: the module's own copy of the config, read when it was built
        self.config = config
        self.layer_type = layer_type
        # the layer types of per-layer parameters (Gemma 3's), None otherwise
        self.layer_types = _layer_types(config) if layer_type is None else [layer_type]
        # raises here, naming the argument, on anything posenc does not read
        self._reading = {
            lt: _Reading(self, lt, mrope_section, mrope_interleaved) for lt in self.layer_types
        }
        self._rotary_dims = {lt: r.rotary_dim for lt, r in self._reading.items()}
        self.rotary_dim = self._rotary_dims[self.layer_types[0]]
        self._cache: OrderedDict[Any, Tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        # transformers' dynamic-NTK state per layer type: the length the
        # frequencies were grown for (0: not grown)
        self._grown: Dict[Optional[str], int] = {}

    # -- the tables ------------------------------------------------------------
    def _compute(
        self,
        positions: torch.Tensor,
        kwargs: Dict[str, Any],
        seq_len: Optional[int],
        dtype: torch.dtype,
        plan: Optional[_rope.Rope] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """posenc's cos and sin of `positions` (on the CPU, ids flat or in
        rows), ``positions.shape (without the rows) + (rotary_dim,)``: by
        `plan` (`kwargs` read once) where given, outside torch.compile."""
        np_dtype = _NUMPY_FLOATS.get(dtype)
        if (
            np_dtype is not None
            and type(positions) is torch.Tensor
            and not torch.compiler.is_compiling()
        ):
            # NumPy in and out: a decoding step without the dispatcher's cost
            if plan is not None:
                cos, sin = plan.cos_sin(positions.numpy(), dtype=np_dtype, seq_len=seq_len)
            else:
                cos, sin = _rope.rope_cos_sin(
                    positions.numpy(), self.head_dim, dtype=np_dtype, seq_len=seq_len, **kwargs
                )
            return torch.from_numpy(cos), torch.from_numpy(sin)
        out = _rope.rope_cos_sin(positions, self.head_dim, dtype=dtype, seq_len=seq_len, **kwargs)
        return cast(Tuple[torch.Tensor, torch.Tensor], out)

    def _store(self, key: Any, tables: Tuple[torch.Tensor, torch.Tensor]) -> None:
        self._cache[key] = tables
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHE_ENTRIES or self._cache_bytes() > _CACHE_BYTES:
            self._cache.popitem(last=False)

    def _cache_bytes(self) -> int:
        """The bytes of the tables the module keeps."""
        return sum(t.numel() * t.element_size() for pair in self._cache.values() for t in pair)

    def _limit(self, reading: _Reading, grown: int, dtype: torch.dtype) -> int:
        """The positions a cached table may hold: its bytes' bound, and the
        length that decides the frequencies of the length-dependent
        families when they are not grown."""
        itemsize = torch.empty((), dtype=dtype, device="cpu").element_size()
        limit = max(1, _TABLE_BYTES // (2 * reading.rotary_dim * itemsize))
        if reading.family == "dynamic" and not grown and reading.start is not None:
            limit = min(limit, reading.start)
        if reading.family == "longrope" and not grown and reading.original is not None:
            limit = min(limit, reading.original)
        return limit

    def _lookup(
        self,
        ids: torch.Tensor,
        reading: _Reading,
        layer_type: Optional[str],
        n: int,
        grown: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """The tables of `ids` (all below `n`) from a cached table of
        positions 0 .. >= n-1, or None when such a table would be past its
        bound."""
        limit = self._limit(reading, grown, dtype)
        if n > limit:
            return None
        key = (layer_type, grown, dtype, device)
        tables = self._cache.get(key)
        if tables is None or tables[0].shape[0] < n:
            have = 0 if tables is None else tables[0].shape[0]
            length = min(limit, max(n, _MIN_TABLE, 2 * have))
            positions = torch.arange(length, dtype=torch.int64, device="cpu")
            cos, sin = self._compute(positions, reading.kwargs, self._seq_len(reading, grown),
                                     dtype, reading.plan)  # fmt: skip
            if device.type != "cpu" or _torch.force_device_path:
                cos, sin = cos.to(device, copy=True), sin.to(device, copy=True)
            tables = (cos, sin)
            self._store(key, tables)
        else:
            self._cache.move_to_end(key)
        if ids.device != device:
            ids = ids.to(device)
        if ids.dtype not in _INDEX_DTYPES:
            ids = ids.long()
        return nn.functional.embedding(ids, tables[0]), nn.functional.embedding(ids, tables[1])

    @staticmethod
    def _seq_len(reading: _Reading, grown: int) -> Optional[int]:
        """rope_cos_sin's seq_len: the grown length, 1 (within the trained
        one) for the length-dependent families not grown."""
        if not reading.needs_seq_len:
            return None
        return grown or 1

    def _state(self, reading: _Reading, seq_len: int, layer_type: Optional[str]) -> int:
        """The grown length transformers' module would use for a call whose
        positions reach `seq_len` (0: not grown), updating its state."""
        if reading.family == "longrope":
            original = cast(int, reading.original)
            # one long table for every long call
            return original + 1 if seq_len > original else 0
        if reading.family != "dynamic":
            return 0
        # transformers' dynamic_frequency_update: grows past the longest call
        # seen (from max_position_embeddings), resets below the trained length
        start = cast(int, reading.start)
        cached = self._grown.get(layer_type, 0) or start
        if seq_len > cached:
            cached = seq_len
        if seq_len < start and cached > start:
            cached = start
        self._grown[layer_type] = cached if cached > start else 0
        return self._grown[layer_type]

    def _rows(self, reading: _Reading, ids: torch.Tensor) -> torch.Tensor:
        """M-RoPE's and axial RoPE's ids with their rows first, as transformers
        expands them; a ValueError for a shape it would not take."""
        rows = reading.rows
        if reading.mrope:
            if ids.ndim == 2:  # (batch, seq): the same positions in every row
                return ids[None].expand(rows, -1, -1)
            if ids.ndim == 3 and ids.shape[0] in (1, rows):
                return ids.expand(rows, -1, -1)
            raise ValueError(
                f"position_ids of M-RoPE must be ({rows}, batch, seq) (or (batch, seq), the "
                f"same positions in every row), got shape {tuple(ids.shape)}"
            )
        if ids.ndim == 0 or ids.shape[0] != rows:
            raise ValueError(
                f"position_ids of axial RoPE must have a leading axis of {rows} rows, got shape "
                f"{tuple(ids.shape)}"
            )
        return ids

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: Optional[str] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` for `position_ids` (integers, transformers' shapes), in
        ``x``'s dtype on ``x``'s device."""
        x = _float_tensor(x, "x")
        ids = _tensor(position_ids, "position_ids")
        if ids.dtype == torch.bool:
            raise TypeError(
                "position_ids must be an integer tensor, got torch.bool (a mask, not positions)"
            )
        if ids.is_floating_point() or ids.is_complex():
            raise TypeError(f"position_ids must be an integer tensor, got {ids.dtype}")
        if layer_type is None:
            layer_type = self.layer_type
        elif not isinstance(layer_type, str):
            raise TypeError(f"layer_type must be a string, not {type(layer_type).__name__}")
        reading = self._reading.get(layer_type)
        if reading is None:
            raise ValueError(
                f"layer_type must be one of {[t for t in self.layer_types if t is not None]} "
                f"(the config's parameters per layer type), got {layer_type!r}"
                if self.layer_types != [None]
                else f"layer_type: this config has no parameters per layer type, got {layer_type!r}"
            )
        dtype, device = x.dtype, x.device
        if reading.rows > 1:
            ids = self._rows(reading, ids)
        shape = tuple(ids.shape[1:] if reading.rows > 1 else ids.shape) + (reading.rotary_dim,)
        if device.type == "meta" or ids.device.type == "meta":
            # the tables' shape and dtype (the ids checked where they have values)
            if ids.device.type != "meta" and ids.numel() and int(ids.min()) < 0:
                raise ValueError(f"position_ids must be >= 0, got {int(ids.min())}")
            empty = torch.empty(shape, dtype=dtype, device="meta")
            return empty, torch.empty_like(empty)
        if torch.compiler.is_compiling():
            return self._direct(ids, reading, None, shape, dtype, device)
        n = ids.numel()
        if n == 0:
            empty = torch.empty(shape, dtype=dtype, device=device)
            return empty, empty.clone()
        if n <= 64:  # a decoding step: the few ids read at once
            values = ids.flatten().tolist()
            lo, hi = min(values), max(values)
        else:
            lo_t, hi_t = torch.aminmax(ids)
            lo, hi = int(lo_t), int(hi_t)
        if lo < 0:
            raise ValueError(f"position_ids must be >= 0, got {lo}")
        grown = self._state(reading, hi + 1, layer_type) if reading.needs_seq_len else 0
        if reading.rows == 1 and not (reading.family == "dynamic" and grown):
            found = self._lookup(ids, reading, layer_type, hi + 1, grown, dtype, device)
            if found is not None:
                return found
        return self._direct(ids, reading, self._seq_len(reading, grown), shape, dtype, device)

    def _direct(
        self,
        ids: torch.Tensor,
        reading: _Reading,
        seq_len: Optional[int],
        shape: Tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """posenc's tables for exactly these ids (computed on the CPU)."""
        if ids.device.type != "cpu":
            ids = ids.cpu()
        flat = ids.reshape(reading.rows, -1) if reading.rows > 1 else ids.reshape(-1)
        if flat.dtype != torch.int64:
            flat = flat.long()
        cos, sin = self._compute(flat, reading.kwargs, seq_len, dtype, reading.plan)
        cos, sin = cos.reshape(shape), sin.reshape(shape)
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

    Raises
    ------
    TypeError
        q, k, cos or sin not a float tensor; a layout not a string.
    ValueError
        Shapes that do not fit `layout`, tensors on different devices.
    """
    layout = _layout(layout)
    rope_layout = _validate.choice(rope_layout, "rope_layout", ("half", "interleaved"))
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        _float_tensor(t, name)
    devices = {t.device for t in (q, k, cos, sin)}
    if len(devices) > 1:
        raise ValueError(
            f"q, k, cos and sin must be on one device, got {sorted(map(str, devices))}"
        )
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
        if cos.shape[-1] > t.shape[-1] or cos.shape[-1] % 2 or not cos.shape[-1]:
            raise ValueError(
                f"cos has {cos.shape[-1]} columns: a positive even number at most {name}'s "
                f"head_dim {t.shape[-1]}"
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

    Parameters
    ----------
    n_heads : int
        The heads, >= 1.
    max_bias : float
        The slopes' exponent scale (8 in the paper, BLOOM, MPT, Falcon), > 0;
        not with `slopes`.
    slopes : sequence of n_heads finite floats, optional
        The slopes themselves.
    """

    def __init__(
        self, n_heads: int, *, max_bias: float = 8.0, slopes: Optional[Sequence[float]] = None
    ) -> None:
        super().__init__()
        n_heads = _validate.integer(n_heads, "n_heads", minimum=1)
        max_bias = _real(max_bias, "max_bias")
        if slopes is None:
            values = _bias.alibi_slopes(n_heads, max_bias=max_bias)
        else:
            if max_bias != 8.0:
                raise ValueError("give slopes or max_bias, not both")
            given: Any = slopes
            if torch.is_tensor(given):
                if given.device.type == "meta":
                    raise ValueError("slopes are on the meta device: they have no values")
                given = given.detach().cpu()
                if given.dtype == torch.bfloat16:
                    given = given.float()
            try:
                array = np.asarray(given)
            except (TypeError, ValueError) as exc:  # ragged, or not numbers
                raise TypeError(f"slopes must be a sequence of {n_heads} floats ({exc})") from exc
            values = _validate.real_array(array, "slopes").astype(np.float64)
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
        target = _device(device)
        slopes = self.slopes.numpy() if self._given else None
        out = cast(torch.Tensor, _bias.alibi_bias(
            self.n_heads, q_len, k_len, slopes=slopes, max_bias=self.max_bias,
            q_offset=q_offset, dtype=dtype,
        ))  # fmt: skip
        return out if target.type == "cpu" else _to(out, target)

    def key_bias(self, attention_mask: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
        mask = _tensor(attention_mask, "attention_mask")
        if mask.ndim != 2:
            raise ValueError(
                f"attention_mask must be a (batch, k_len) tensor, got shape {tuple(mask.shape)}"
            )
        if mask.device.type == "meta":
            if dtype not in _FLOAT_DTYPES:
                raise TypeError(
                    f"dtype must be float16, bfloat16, float32 or float64, got {dtype!r}"
                )
            shape = (mask.shape[0], self.n_heads, 1, mask.shape[1])
            return torch.empty(shape, dtype=dtype, device="meta")
        cpu = mask if mask.device.type == "cpu" else mask.cpu()
        out = cast(torch.Tensor, _bias.alibi_key_bias(
            cpu, self.n_heads, slopes=self.slopes.numpy() if self._given else None,
            max_bias=self.max_bias if not self._given else 8.0, dtype=dtype,
        ))  # fmt: skip
        return out if mask.device.type == "cpu" else out.to(mask.device)

    def forward(self, scores: torch.Tensor, *, q_offset: Optional[int] = None) -> torch.Tensor:
        scores = _scores(scores, self.n_heads)
        b = self.bias(scores.shape[2], scores.shape[3], q_offset=q_offset, dtype=scores.dtype,
                      device=scores.device)  # fmt: skip
        return scores + b


class T5RelativeBias(nn.Module):
    """T5's bucketed relative attention bias with its table as a parameter.

    ``forward(q_len, k_len=None, q_offset=0)`` gives ``(1, heads, q_len,
    k_len)`` (as ``T5Attention.compute_bias``) from :func:`posenc.t5_bias`,
    whose backward adds the gradient into the table by bucket.

    Parameters
    ----------
    num_buckets, n_heads : int, optional
        The table's shape (32 and 8 without `weight`; with it, its shape,
        which they must match when given).
    bidirectional : bool
        True for encoders, False for decoders.
    max_distance : int
        As :func:`posenc.relative_position_bucket` takes it.
    weight : float tensor of shape (num_buckets, n_heads), optional
        The table (transformers' ``relative_attention_bias.weight``); zeros
        without it.

    Notes
    -----
    On a device other than the CPU, the buckets of the ``q_len + k_len - 1``
    distances come from posenc (on the CPU; the last 32 kept per lengths,
    offset, bucket options and device) and the gather and its gradient are
    torch's own ops there; both paths take the same arguments and refuse the
    same ones.
    """

    def __init__(
        self,
        num_buckets: Optional[int] = None,
        n_heads: Optional[int] = None,
        *,
        bidirectional: bool = True,
        max_distance: int = 128,
        weight: Optional[torch.Tensor] = None,
    ) -> None:
        super().__init__()
        bidirectional = _validate.flag(bidirectional, "bidirectional")
        if num_buckets is not None:
            num_buckets = _validate.integer(num_buckets, "num_buckets", minimum=2)
        if n_heads is not None:
            n_heads = _validate.integer(n_heads, "n_heads", minimum=1)
        if weight is None:
            num_buckets = 32 if num_buckets is None else num_buckets
            n_heads = 8 if n_heads is None else n_heads
            _validate.shape_size((num_buckets, n_heads), "num_buckets and n_heads", 4)
        else:
            weight = _float_tensor(weight, "weight")
            if weight.ndim != 2 or weight.shape[1] < 1:
                raise ValueError(
                    f"weight must be a (num_buckets, n_heads) table, got shape "
                    f"{tuple(weight.shape)}"
                )
            for name, given, have in (
                ("num_buckets", num_buckets, weight.shape[0]),
                ("n_heads", n_heads, weight.shape[1]),
            ):
                if given is not None and given != have:
                    raise ValueError(f"{name} = {given}, but weight has shape "
                                     f"{tuple(weight.shape)}")  # fmt: skip
            num_buckets = weight.shape[0]
        num_buckets, max_distance = _t5_bias.checked_options(
            bidirectional, num_buckets, max_distance
        )
        if weight is None:
            weight = torch.zeros(num_buckets, cast(int, n_heads))
        self.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight)
        self.bidirectional = bidirectional
        self.max_distance = max_distance
        self._bucket_cache: OrderedDict[Any, torch.Tensor] = OrderedDict()

    def forward(self, q_len: int, k_len: Optional[int] = None, q_offset: int = 0) -> torch.Tensor:
        weight = self.weight
        # t5_bias's checks, made here for both paths (and before its
        # operator sees a size it cannot hold)
        _float_tensor(weight, "weight")
        if weight.ndim != 2 or weight.shape[0] < 2 or weight.shape[1] < 1:
            raise ValueError(
                "weight must have num_buckets >= 2 rows and at least one column (head), "
                f"not shape {tuple(weight.shape)}"
            )
        bidirectional = _validate.flag(self.bidirectional, "bidirectional")
        num_buckets, max_distance = _t5_bias.checked_options(
            bidirectional, weight.shape[0], self.max_distance
        )
        q_len, k_len = _distance_bias.lengths(q_len, k_len)
        q_offset = _distance_bias.offset(q_offset)
        if not torch.compiler.is_compiling():  # (t5_bias's operator checks it there)
            _validate.shape_size(
                (weight.shape[1], q_len, k_len), _t5_bias.SIZES, weight.element_size()
            )
        if weight.device.type == "cpu" and not _torch.force_device_path:
            out = _bias.t5_bias(
                weight, q_len, k_len, bidirectional=bidirectional, max_distance=max_distance,
                q_offset=q_offset,
            )  # fmt: skip
            return out[None]
        # another device: the buckets of the distances from posenc (on the
        # CPU), the gather and its gradient torch's own ops there
        key = (num_buckets, bidirectional, max_distance, q_len, k_len, q_offset, weight.device)
        buckets = self._bucket_cache.get(key)
        if buckets is None:
            # distance j - (q_offset + i) at index j - i + q_len - 1
            span = q_len + k_len - 1
            rel = np.arange(span, dtype=np.int64) - (q_len - 1 + q_offset)
            found = _bias.relative_position_bucket(
                rel, bidirectional=bidirectional, num_buckets=num_buckets,
                max_distance=max_distance,
            )  # fmt: skip
            buckets = torch.from_numpy(np.ascontiguousarray(found, dtype=np.int64))
            buckets = buckets.to(weight.device)
            if span <= _BUCKETS_KEPT_LENGTH:
                self._bucket_cache[key] = buckets
                while len(self._bucket_cache) > _BUCKETS_KEPT:
                    self._bucket_cache.popitem(last=False)
        else:
            self._bucket_cache.move_to_end(key)
        # values by distance, then each query's row of them: out[h, i, j] =
        # values[j - i + q_len - 1], windows of the reversed values
        values = nn.functional.embedding(buckets, weight)  # (span, heads)
        windows = values.flip(0).transpose(0, 1).unfold(1, k_len, 1)  # (heads, q_len, k_len)
        return windows.flip(-1)[None]


# the buckets a T5RelativeBias keeps on another device: the last 32 calls'
# lengths, each of at most 2**16 distances (512 KiB)
_BUCKETS_KEPT = 32
_BUCKETS_KEPT_LENGTH = 1 << 16


class XLPositionTerm(nn.Module):
    """Transformer-XL / XLNet's position term ``(q_i + v) . r[i - j]``,
    shifted by posenc (:func:`posenc.xl_position_term`).

    ``forward(q, r, k_len=None, *, q_offset=None, causal=False)`` with q and
    r in `layout`: ``"ibnd"`` (XLNet's and Transformer-XL's ``(len, batch,
    heads, head_dim)``), ``"bnid"`` (``(batch, heads, len, head_dim)``) or
    ``"bind"`` (``(batch, len, heads, head_dim)``).  r is XLNet's
    ``k_head_r``, the table of :func:`posenc.xl_relative_table` projected:
    row ``t`` holds distance ``k_len - t``.  XLNet's ``"bi"`` table has
    ``k_len + q_len`` rows (distances ``k_len`` down to ``1 - q_len``: every
    key of every query); its ``"uni"`` table ``k_len + 1`` (``k_len`` down
    to 0), which has no rows for the keys after each query: give
    ``causal=True`` (those scores are masked; they are left 0 here).  Queries
    are the newest ``q_len`` of ``k_len`` tokens unless `q_offset` says
    where the first sits.  Returns ``(batch, heads, q_len, k_len)``, the
    scores' layout of both models.  `bias` (``r_r_bias``, ``(heads,
    head_dim)``) is a parameter of the module, or None.  With a tensor on
    the ``meta`` device the result is an empty meta tensor of its shape and
    dtype, the arguments checked as on the CPU.
    """

    _PERMUTE = {"ibnd": (1, 2, 0, 3), "bnid": (0, 1, 2, 3), "bind": (0, 2, 1, 3)}

    def __init__(self, bias: Optional[torch.Tensor] = None, *, layout: str = "ibnd") -> None:
        super().__init__()
        self.layout = _validate.choice(layout, "layout", tuple(sorted(self._PERMUTE)))
        if bias is not None:
            bias = _float_tensor(bias, "bias")
            if bias.ndim != 2:
                raise ValueError(f"bias must be (heads, head_dim), got shape {tuple(bias.shape)}")
        self.bias = None if bias is None else (
            bias if isinstance(bias, nn.Parameter) else nn.Parameter(bias)
        )  # fmt: skip

    def forward(
        self,
        q: torch.Tensor,
        r: torch.Tensor,
        k_len: Optional[int] = None,
        *,
        q_offset: Optional[int] = None,
        causal: bool = False,
    ) -> Any:
        from . import relative

        order = self._PERMUTE[self.layout]
        for name, t in (("q", q), ("r", r)):
            _float_tensor(t, name)
            if t.ndim != 4:
                raise ValueError(
                    f"{name} must be 4-d in layout {self.layout!r}, got shape {tuple(t.shape)}"
                )
        q, r = q.permute(order), r.permute(order)
        if _on_meta(q, r, self.bias):
            return _meta_term(
                relative.xl_position_term, {"q": q, "r": r}, {"bias": self.bias},
                k_len=k_len, q_offset=q_offset, causal=causal,
            )  # fmt: skip
        return relative.xl_position_term(
            q, r, bias=self.bias, k_len=k_len, q_offset=q_offset, causal=causal
        )


class DebertaRelativeBias(nn.Module):
    """DeBERTa's disentangled attention bias (c2p and p2c) by posenc
    (:func:`posenc.deberta_attention_bias`).

    ``forward(q, k, pos_key=None, pos_query=None, *, scale_factor=None)``: q
    and k in `layout`, ``"(bh)sd"`` (DeBERTa-v2's ``query_layer``: ``(batch
    * heads, len, head_dim)``; give `n_heads`) or ``"bhsd"``; ``pos_key`` /
    ``pos_query`` the relative embeddings projected per head, ``(heads, 2 *
    span, head_dim)`` (None: no c2p / p2c term).  Returns the bias in q's
    layout's scores form, ``(batch * heads, q_len, k_len)`` or ``(batch,
    heads, q_len, k_len)``, each term over ``sqrt(head_dim *
    scale_factor)``.  `scale_factor` is by default 1 + the number of terms
    given (3 with both), what DeBERTa-v2 passes for its ``pos_att_type``
    (``1 + len(["c2p", "p2c"])``).  With a tensor on the ``meta`` device
    the result is an empty meta tensor of its shape and dtype, the
    arguments checked as on the CPU.

    Parameters
    ----------
    position_buckets, max_relative_positions : int
        The config's values (see :func:`posenc.deberta_attention_bias`):
        ``span = position_buckets`` when > 0, else
        ``max_relative_positions`` (>= 1: a config's -1 stands for its
        ``max_position_embeddings``, to be passed as such).
    n_heads : int, optional
        The heads (>= 1), needed by layout ``"(bh)sd"``.
    layout : {"bhsd", "(bh)sd"}
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
        layout = _validate.choice(layout, "layout", ("bhsd", "(bh)sd"))
        position_buckets, max_relative_positions = _relative_terms.checked_buckets(
            position_buckets, max_relative_positions, ("position_buckets", "max_relative_positions")
        )
        if position_buckets <= 0 and max_relative_positions < 1:
            raise ValueError(
                f"max_relative_positions must be >= 1, got {max_relative_positions}"
                + _relative_terms.UNRESOLVED
            )
        if n_heads is not None:
            n_heads = _validate.integer(n_heads, "n_heads", minimum=1)
        elif layout == "(bh)sd":
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
        scale_factor: Optional[float] = None,
    ) -> Any:
        from . import relative

        if scale_factor is not None:
            scale_factor = _real(scale_factor, "scale_factor")
        for name, t in (("q", q), ("k", k), ("pos_key", pos_key), ("pos_query", pos_query)):
            if t is not None or name in ("q", "k"):
                _float_tensor(t, name)
        if self.layout == "(bh)sd":
            h = cast(int, self.n_heads)
            for name, t in (("q", q), ("k", k)):
                if t.ndim != 3 or t.shape[0] % h:
                    raise ValueError(
                        f"{name} must be (batch * {h}, len, head_dim) in layout '(bh)sd', "
                        f"got shape {tuple(t.shape)}"
                    )
            if q.shape[0] != k.shape[0]:
                raise ValueError(
                    f"q and k must have the same batch * heads, got shapes {tuple(q.shape)} and "
                    f"{tuple(k.shape)}"
                )
            bh, q_len, d = q.shape
            k_len = k.shape[1]
            q4 = q.reshape(bh // h, h, q_len, d)
            k4 = k.reshape(bh // h, h, k_len, k.shape[2])
        else:
            q4, k4 = q, k
        options: Dict[str, Any] = dict(
            position_buckets=self.position_buckets,
            max_relative_positions=self.max_relative_positions,
            scale_factor=scale_factor,
        )
        if _on_meta(q4, k4, pos_key, pos_query):
            terms = {"q": q4, "k": k4, "pos_key": pos_key, "pos_query": pos_query}
            out = _meta_term(relative.deberta_attention_bias, terms, {}, **options)
        else:
            out = relative.deberta_attention_bias(q4, k4, pos_key, pos_query, **options)
        return out.reshape(-1, *out.shape[-2:]) if self.layout == "(bh)sd" else out


def _meta_term(
    fn: Any, terms: Dict[str, Optional[torch.Tensor]], others: Dict[str, Any], **options: Any
) -> torch.Tensor:
    """The relative term `fn` (of :mod:`posenc.relative`) of tensors some of
    which are on the meta device: an empty meta tensor of its result's shape
    and dtype.  `fn` makes its checks on CPU stand-ins that hold nothing:
    each of `terms` (``(..., heads, len, head_dim)``) with one empty leading
    axis in place of its own, each of `others` (a bias, ``(heads,
    head_dim)``) zeros of its shape; the result's leading axes are the
    terms' broadcast."""
    leads = {k: tuple(t.shape[:-3]) for k, t in terms.items() if t is not None and t.ndim >= 3}
    try:
        lead = tuple(torch.broadcast_shapes(*leads.values()))
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) axes of {', '.join(leads)} do not broadcast: "
            f"{tuple(leads.values())}"
        ) from None

    def nothing(t: Optional[torch.Tensor], empty: bool) -> Optional[torch.Tensor]:
        if t is None:
            return None
        if empty and t.ndim >= 3:
            return torch.empty((0, *t.shape[-3:]), dtype=t.dtype)
        return torch.zeros((), dtype=t.dtype).expand(t.shape)  # (a shape the function refuses)

    stand_ins = {k: nothing(t, True) for k, t in terms.items()}
    stand_ins.update({k: nothing(t, False) for k, t in others.items()})
    try:
        with torch.no_grad():
            out = fn(**stand_ins, **options)
    except (TypeError, ValueError) as exc:  # said of the shapes given, not the stand-ins'
        text = str(exc)
        for key, t in terms.items():
            stand_in = stand_ins[key]
            if t is not None and stand_in is not None and t.ndim >= 3:
                text = text.replace(str(tuple(stand_in.shape)), str(tuple(t.shape)))
        raise type(exc)(text) from None
    return torch.empty(lead + tuple(out.shape[1:]), dtype=out.dtype, device="meta")
