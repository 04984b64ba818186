"""The lab's model: a small pre-LN Transformer whose position encoding is
chosen by name.

:class:`LabModel` is a decoder language model (causal attention, a logit per
token) or an encoder classifier (bidirectional attention, mean or first-token
pooling, a classification head).  Attention is written out,
``softmax(q k^T / sqrt(d) + mask + position term) v``, so that every encoding
plugs in at its own point:

- added to the input: ``sinusoid``, ``learned``; ``complex_order`` is the
  token embedding itself;
- q and k rotated before their product: ``rope`` and its variants;
- added to the scores, after the mask: ``alibi``, ``t5``, ``kerple_log``,
  ``kerple_power``, ``sandwich``, ``fire``, ``xl`` (the term ``(q + v) .
  r[i - j]`` and the content bias ``u . k``, both scaled as the scores are),
  ``cope`` (its gates are read from the masked logits, as the authors do).

The scale and the mask (0 or ``-inf``, made once per forward pass) go into
the logits in one pass; a bias of positions ``0 .. n-1`` is added to the
mask first (``heads x n x n``) and goes in with them.  ALiBi's and T5's
bias, the same in every layer, is made once per forward pass (T5's table
and its gradient by bucket once per step).

Position ids are ``0 .. n-1`` unless a call gives its own (a training-time
sampler's, or the skip-position attack's ``k * i``): absolute encodings read
them directly, RoPE rotates by them, and the score encodings take the term of
the positions' own distances (the term for ``0 .. max + 1`` is made, then the
rows and columns of the ids are read from it).  Under bfloat16 autocast the
tables, rotations and score terms are formed in float32.

The model is deterministic on the CPU for a seed: ``torch.manual_seed(s)``
before it is built fixes every parameter; nothing in the forward pass draws
random numbers (dropout is 0 by default).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from .. import _torch
from .. import _validate as v
from ..bias import alibi_bias
from ..rope import Rope
from ..torch import apply_rotary
from . import encodings as _enc
from .encodings import Encoding, head_dim_of

__all__ = ["LabModel"]

# tables kept per encoding (positions 0..n-1 of a length, device and dtype)
_CACHE_ENTRIES = 16


def _off_host(device: torch.device) -> bool:
    """Whether tensors on `device` take the path of a device other than the
    CPU: tables made on the host and copied there, Transformer-XL's term by
    torch's own ops (posenc's kernels run on the CPU only); tests take it on
    the CPU through ``posenc._torch.force_device_path``, as posenc.torch's
    modules do."""
    return device.type != "cpu" or _torch.force_device_path


@dataclass(frozen=True)
class Positions:
    """The position ids of a forward pass.

    Attributes
    ----------
    ids : LongTensor (rows, n)
        On the model's device; ``rows`` is 1 (every sequence alike) or the batch.
    host : ndarray (rows, n)
        The same ids on the host (posenc makes its tables there).
    contiguous : bool
        ``ids`` is ``0 .. n-1`` for every row.
    span : int
        ``max(ids) + 1``.
    memo : dict
        What the layers of one forward pass share of these positions (the
        rotary tables, the relative table), made by the first that needs it.
    """

    ids: torch.Tensor
    host: np.ndarray
    contiguous: bool
    span: int
    memo: Dict[Any, Any] = field(default_factory=dict, compare=False)


def positions_of(positions: Any, batch: int, n: int, device: torch.device) -> Positions:
    """`positions` (None, or integer ids of shape ``(n,)``, ``(1, n)`` or
    ``(batch, n)``) checked and read into :class:`Positions`."""
    if positions is None:
        host = np.arange(n, dtype=np.int64)[None]
        return Positions(torch.from_numpy(host).to(device), host, True, n)
    if torch.is_tensor(positions):
        if positions.dtype == torch.bool or positions.is_floating_point():
            raise TypeError(f"positions must be integer ids, got {positions.dtype}")
        host = positions.detach().cpu().numpy()
    else:
        host = np.asarray(positions)
        if host.dtype == np.bool_ or not np.issubdtype(host.dtype, np.integer):
            raise TypeError(f"positions must be integer ids, got an array of {host.dtype}")
    host = np.ascontiguousarray(host, dtype=np.int64)
    if host.ndim == 1:
        host = host[None]
    if host.ndim != 2 or host.shape[1] != n or host.shape[0] not in (1, batch):
        raise ValueError(
            f"positions must have shape ({n},), (1, {n}) or ({batch}, {n}) for tokens of shape "
            f"({batch}, {n}), got {tuple(host.shape)}"
        )
    if host.size and host.min() < 0:
        raise ValueError(f"positions must be >= 0, got {int(host.min())}")
    contiguous = bool(np.array_equal(host, np.broadcast_to(np.arange(n), host.shape)))
    if contiguous:
        host = host[:1]
    ids = torch.from_numpy(host).to(device)
    return Positions(ids, host, contiguous, int(host.max()) + 1 if host.size else 0)


def _cached(cache: OrderedDict[Any, torch.Tensor], key: Any, make: Any) -> Any:
    found = cache.get(key)
    if found is None:
        found = make()
        cache[key] = found
        while len(cache) > _CACHE_ENTRIES:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return found


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` (a copy on the forced path)."""
    if device.type == "cpu":
        return t.clone() if _torch.force_device_path else t
    return t.to(device)


# ---------------------------------------------------------------- the encodings


class PositionEncoding(nn.Module):
    """Where an encoding plugs into :class:`LabModel`; this base is NoPE.

    ``embed(tokens, positions)`` gives the input of an ``"embedding"``
    encoding, ``add_input(x, positions)`` adds an ``"input"`` one,
    ``rotate(q, k, positions)`` rotates q and k (``(batch, heads, n,
    head_dim)``), and ``add_scores(layer, scores, q, k, positions)`` adds a
    ``"scores"`` one to layer `layer`'s masked, scaled logits.
    """

    def __init__(self, spec: Encoding) -> None:
        super().__init__()
        self.spec = spec
        self.kind = spec.kind

    def embed(self, tokens: torch.Tensor, positions: Positions) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover - the "embedding" kind's own

    def add_input(self, x: torch.Tensor, positions: Positions) -> torch.Tensor:
        return x

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: Positions
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def add_scores(
        self,
        layer: int,
        scores: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: Positions,
    ) -> torch.Tensor:
        return scores

    def check_positions(self, positions: Positions) -> None:
        """A ValueError where these positions cannot be read."""

    def scores(
        self,
        layer: int,
        logits: torch.Tensor,
        scale: float,
        mask: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: Positions,
    ) -> torch.Tensor:
        """Layer `layer`'s scores of a ``"scores"`` encoding from its logits
        ``q k^T``: scaled, the additive mask `mask` (0 or ``-inf``) added in
        the same pass, then :meth:`add_scores`."""
        return self.add_scores(layer, torch.add(mask, logits, alpha=scale), q, k, positions)


class _Sinusoid(PositionEncoding):
    def __init__(self, spec: Encoding, dim: int) -> None:
        super().__init__(spec)
        if dim % 2:
            raise ValueError(f"sinusoid needs an even dim, got {dim}")
        cls = _enc.torch_module("sinusoid")
        self.table = cls(dim, base=float(spec.option("base", 10000.0)))
        self._cache: OrderedDict[Any, torch.Tensor] = OrderedDict()

    def add_input(self, x: torch.Tensor, positions: Positions) -> torch.Tensor:
        def make() -> torch.Tensor:
            return self.table(positions.ids, dtype=torch.float32)

        if positions.contiguous:
            key = (positions.host.shape[1], x.device)
            table = _cached(self._cache, key, make)
        else:
            table = make()
        return x + table.to(x.dtype)


class _Learned(PositionEncoding):
    def __init__(self, spec: Encoding, dim: int, max_positions: int) -> None:
        super().__init__(spec)
        cls = _enc.torch_module("learned")
        self.table = cls(
            max_positions,
            dim,
            init=spec.option("init", "random"),
            freeze=bool(spec.option("freeze", False)),
        )
        self.rows = max_positions

    def check_positions(self, positions: Positions) -> None:
        if positions.span > self.rows:
            raise ValueError(
                f"position {positions.span - 1} is past the learned table's {self.rows} rows: "
                f"build the model with max_positions >= {positions.span}"
            )

    def add_input(self, x: torch.Tensor, positions: Positions) -> torch.Tensor:
        return x + self.table(positions.ids).to(x.dtype)


class _ComplexOrder(PositionEncoding):
    def __init__(self, spec: Encoding, vocab_size: int, dim: int) -> None:
        super().__init__(spec)
        if dim % 2:
            raise ValueError(
                f"complex_order needs an even dim (real and imaginary parts), got {dim}"
            )
        cls = _enc.torch_module("complex_order")
        # the real parts then the imaginary ones: a real model of width dim
        self.embedding = cls(vocab_size, dim // 2, output="concat")

    def embed(self, tokens: torch.Tensor, positions: Positions) -> torch.Tensor:
        return self.embedding(tokens, positions.ids.expand(tokens.shape))


def _rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x rotated by tables of the "half" layout (x's first rotary_dim features)."""
    rotary = cos.shape[-1]
    head, rest = x[..., :rotary], x[..., rotary:]
    half = rotary // 2
    turned = torch.cat((-head[..., half:], head[..., :half]), dim=-1)
    out = head * cos + turned * sin
    return out if rest.shape[-1] == 0 else torch.cat((out, rest), dim=-1)


class _Rope(PositionEncoding):
    def __init__(self, spec: Encoding, head_dim: int, train_length: Optional[int]) -> None:
        super().__init__(spec)
        if head_dim % 2:
            raise ValueError(f"rope needs an even head dimension (dim // heads), got {head_dim}")
        needs_length = spec.option("scaling") is not None
        if needs_length and train_length is None:
            raise ValueError(f"{spec.label!r}: a RoPE scaling family needs the training length")
        params, in_training = _enc.rope_scaling(spec, train_length or 1)
        base = float(spec.option("base", 10000.0))
        self.xpos = bool(spec.option("xpos", False))
        scale_base = float(spec.option("xpos_scale_base", 512.0))

        def plans(scaling: Any) -> Tuple[Rope, Optional[Rope]]:
            if not self.xpos:
                return Rope(head_dim, base=base, scaling=scaling), None
            return (
                Rope(
                    head_dim, base=base, scaling=scaling, xpos="query", xpos_scale_base=scale_base
                ),
                Rope(head_dim, base=base, scaling=scaling, xpos="key", xpos_scale_base=scale_base),
            )

        scaled = plans(params)
        self._plans = {"eval": scaled, "train": scaled if in_training else plans(None)}
        self._cache: OrderedDict[Any, Any] = OrderedDict()

    def _tables(self, which: str, positions: Positions, device: torch.device) -> Any:
        def make() -> Any:
            out: List[Any] = []
            for plan in self._plans[which]:
                if plan is None:
                    out.append(None)
                    continue
                cos, sin = plan.cos_sin(positions.host, dtype="float32")
                out.append((_to(torch.from_numpy(cos), device), _to(torch.from_numpy(sin), device)))
            return out

        if not positions.contiguous:
            key = ("rope", which, device)
            if key not in positions.memo:
                positions.memo[key] = make()
            return positions.memo[key]
        key = (which, positions.host.shape[1], device)
        return _cached(self._cache, key, make)

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: Positions
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        which = "train" if self.training else "eval"
        query, key = self._tables(which, positions, q.device)
        cos, sin = query
        if key is None:
            dtype = torch.promote_types(q.dtype, cos.dtype)
            return apply_rotary(
                q.to(dtype), k.to(dtype), cos.to(dtype), sin.to(dtype), layout="bhsd"
            )
        cos, sin = cos[:, None], sin[:, None]  # (rows, 1, n, rotary): over the heads
        kcos, ksin = key[0][:, None], key[1][:, None]
        return _rotate_half(q, cos, sin), _rotate_half(k, kcos, ksin)


class _Bias(PositionEncoding):
    """An encoding added to the scores that depends on positions alone:
    ``term(layer, q_len, k_len, dtype, device)`` gives ``(heads, q, k)``
    (or with a leading 1) for positions ``0 .. n-1``; other positions read
    the rows and columns of their ids from the term of ``0 .. max``."""

    def __init__(self, spec: Encoding, heads: int) -> None:
        super().__init__(spec)
        self.heads = heads

    def term(
        self, layer: int, q_len: int, k_len: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover - each bias's own

    #: whether the term is the same in every layer (made once per forward pass)
    shared = False

    def scores(
        self,
        layer: int,
        logits: torch.Tensor,
        scale: float,
        mask: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: Positions,
    ) -> torch.Tensor:
        """For positions ``0 .. n-1``: the term and the mask added first (at
        most ``(heads, n, n)``, or the batch's with a padding mask), then to
        the scaled logits in one pass over them; the term of a shared bias
        made once per forward pass."""
        if not positions.contiguous:
            return super().scores(layer, logits, scale, mask, q, k, positions)
        n = logits.shape[-1]

        def make() -> torch.Tensor:
            term = self.term(layer, n, n, torch.float32, logits.device)
            return term.reshape(1, self.heads, n, n) + mask

        if self.shared:
            key = ("bias", n, logits.device, id(mask))
            if key not in positions.memo:
                positions.memo[key] = (make(), mask)  # (the mask kept: its id is the key's)
            term = positions.memo[key][0]
        else:
            term = make()
        return torch.add(term, logits, alpha=scale)

    def add_scores(
        self,
        layer: int,
        scores: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: Positions,
    ) -> torch.Tensor:
        n = scores.shape[-1]
        if positions.contiguous:
            bias = self.term(layer, n, n, torch.float32, scores.device).reshape(self.heads, n, n)
            return scores + bias
        span = positions.span
        full = self.term(layer, span, span, torch.float32, scores.device)
        full = full.reshape(self.heads, span, span)
        ids = positions.ids
        picked = full[:, ids[:, :, None], ids[:, None, :]]  # (heads, rows, n, n)
        return scores + picked.transpose(0, 1)


class _ALiBi(_Bias):
    shared = True

    def __init__(self, spec: Encoding, heads: int, causal: bool) -> None:
        super().__init__(spec, heads)
        self.causal = causal
        self.max_bias = float(spec.option("max_bias", 8.0))
        self._cache: OrderedDict[Any, torch.Tensor] = OrderedDict()

    def term(
        self, layer: int, q_len: int, k_len: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        def make() -> torch.Tensor:
            out = alibi_bias(
                self.heads, q_len, k_len, max_bias=self.max_bias, causal=self.causal,
                dtype=dtype,
            )  # fmt: skip
            return _to(out, device)

        return _cached(self._cache, (q_len, k_len, dtype, device), make)


class _T5(_Bias):
    shared = True  # one table for all layers, as T5

    def __init__(self, spec: Encoding, heads: int, causal: bool) -> None:
        super().__init__(spec, heads)
        cls = _enc.torch_module("t5")
        self.table = cls(
            spec.option("num_buckets", 32),
            heads,
            bidirectional=not causal,
            max_distance=spec.option("max_distance", 128),
        )

    def term(
        self, layer: int, q_len: int, k_len: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        return self.table(q_len, k_len)


class _PerLayerBias(_Bias):
    """KERPLE, Sandwich, FIRE: a module per layer, ``.bias(q_len, k_len,
    dtype=, device=)``.  Modules that learn nothing (Sandwich's) give every
    layer the same bias: it is made once per length, device and dtype."""

    def __init__(self, spec: Encoding, heads: int, layers: int, make: Any) -> None:
        super().__init__(spec, heads)
        self.layers = nn.ModuleList([make() for _ in range(layers)])
        self.shared = not any(True for _ in self.layers.parameters())
        self._cache: OrderedDict[Any, torch.Tensor] = OrderedDict()

    def term(
        self, layer: int, q_len: int, k_len: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        def make() -> torch.Tensor:
            return self.layers[layer].bias(q_len, k_len, dtype=dtype, device=device)

        if not self.shared:
            return make()
        return _cached(self._cache, (q_len, k_len, dtype, device), make)


class _CoPE(PositionEncoding):
    def __init__(
        self, spec: Encoding, heads: int, head_dim: int, layers: int, npos: int, causal: bool
    ) -> None:
        super().__init__(spec)
        cls = _enc.torch_module("cope")
        self.layers = nn.ModuleList(
            [cls(heads, head_dim, npos, causal=causal) for _ in range(layers)]
        )

    def add_scores(
        self,
        layer: int,
        scores: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: Positions,
    ) -> torch.Tensor:
        dtype = torch.promote_types(q.dtype, scores.dtype)
        return self.layers[layer](q.to(dtype), scores.to(dtype))


class _XLLayer(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.project = nn.Linear(dim, heads * head_dim, bias=False)  # W_R
        self.u = nn.Parameter(torch.zeros(heads, head_dim))  # content bias, r_w_bias
        cls = _enc.torch_module("xl")
        self.term = cls(torch.zeros(heads, head_dim), layout="bnid")  # its bias: r_r_bias


class _XL(PositionEncoding):
    """Transformer-XL's position term ``(q_i + v) . W_R R[i - j]`` and content
    bias ``u . k_j``, each scaled as the scores are; R is the relative sinusoid
    table of :func:`posenc.xl_relative_table` (of the model's width)."""

    def __init__(
        self, spec: Encoding, dim: int, heads: int, head_dim: int, layers: int, causal: bool
    ) -> None:
        super().__init__(spec)
        if dim % 2:
            raise ValueError(f"xl needs an even dim (its sinusoid table), got {dim}")
        self.dim, self.heads, self.head_dim = dim, heads, head_dim
        self.causal = causal
        self.scale = _enc.scale_of(head_dim)
        self.layers = nn.ModuleList([_XLLayer(dim, heads, head_dim) for _ in range(layers)])
        self._cache: OrderedDict[Any, torch.Tensor] = OrderedDict()

    def _table(self, n: int, device: torch.device) -> torch.Tensor:
        """The relative table of a span `n`: row ``t`` holds distance ``n - t``."""
        from ..relative import xl_relative_table

        def make() -> torch.Tensor:
            kind = "uni" if self.causal else "bi"
            table = xl_relative_table(n, n, self.dim, attn_type=kind, dtype=np.float32)
            return _to(torch.from_numpy(np.ascontiguousarray(table)), device)

        return _cached(self._cache, (n, device), make)

    def add_scores(
        self,
        layer: int,
        scores: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: Positions,
    ) -> torch.Tensor:
        part = self.layers[layer]
        n = q.shape[-2]
        span = n if positions.contiguous else positions.span
        table = self._table(span, q.device)
        weight = part.project.weight
        r = nn.functional.linear(table.to(weight.dtype), weight)  # (rows, heads * head_dim)
        r = r.reshape(1, -1, self.heads, self.head_dim).transpose(1, 2)  # (1, heads, rows, hd)
        dtype = torch.promote_types(q.dtype, r.dtype)
        q, r = q.to(dtype), r.to(dtype)
        content = torch.einsum("hd,bhjd->bhj", part.u.to(dtype), k.to(dtype))[:, :, None, :]
        if positions.contiguous and not _off_host(q.device):
            term = part.term(q, r, n, causal=self.causal)
        else:
            term = self._gathered(q, r, part.term.bias, positions, span)
        return scores + (term + content) * self.scale

    def _gathered(
        self,
        q: torch.Tensor,
        r: torch.Tensor,
        bias: Optional[torch.Tensor],
        positions: Positions,
        span: int,
    ) -> torch.Tensor:
        """The term by torch's own ops, for any positions: ``(q_i + v) . r[t]``
        for every row t, then row ``span - (pos_i - pos_j)`` of each pair read."""
        if bias is not None:
            q = q + bias.to(q.dtype)[None, :, None, :]
        products = q @ r.transpose(-1, -2)  # (batch, heads, n, rows)
        ids = positions.ids
        rows = products.shape[-1]
        index = span - (ids[:, :, None] - ids[:, None, :])  # (rows?, n, n)
        index = index.clamp(0, rows - 1)  # the keys after a query ("uni" rows): masked
        index = index[:, None].expand(q.shape[0], q.shape[1], -1, -1)
        return products.gather(-1, index)


def build(
    spec: Any,
    *,
    vocab_size: int,
    dim: int,
    heads: int,
    layers: int,
    causal: bool,
    max_positions: int,
    train_length: Optional[int],
) -> PositionEncoding:
    """The encoding `spec` (a name, dict or :class:`Encoding`) for a model of
    these sizes."""
    enc = _enc.encoding(spec)
    head_dim = head_dim_of(dim, heads)
    name = enc.name
    if name == "nope":
        return PositionEncoding(enc)
    if name == "sinusoid":
        return _Sinusoid(enc, dim)
    if name == "learned":
        return _Learned(enc, dim, max_positions)
    if name == "complex_order":
        return _ComplexOrder(enc, vocab_size, dim)
    if name == "rope":
        return _Rope(enc, head_dim, train_length)
    if name == "alibi":
        return _ALiBi(enc, heads, causal)
    if name == "t5":
        return _T5(enc, heads, causal)
    if name in ("kerple_log", "kerple_power"):
        cls = _enc.torch_module(name)
        kind = name.partition("_")[2]
        return _PerLayerBias(enc, heads, layers, lambda: cls(heads, kind=kind, causal=causal))
    if name == "sandwich":
        cls = _enc.torch_module(name)
        return _PerLayerBias(enc, heads, layers, lambda: cls(heads, dim, causal=causal))
    if name == "fire":
        cls = _enc.torch_module(name)
        hidden = enc.option("hidden", 32)
        return _PerLayerBias(enc, heads, layers, lambda: cls(heads, hidden=hidden, causal=causal))
    if name == "cope":
        # the authors' training code: the block size + 1
        npos = enc.option("max_positions", (train_length or max_positions) + 1)
        return _CoPE(enc, heads, head_dim, layers, npos, causal)
    if name == "xl":
        return _XL(enc, dim, heads, head_dim, layers, causal)
    raise AssertionError(name)  # pragma: no cover - encoding() knows every name


# ---------------------------------------------------------------- the model


def _widened(t: torch.Tensor) -> torch.Tensor:
    """float16 and bfloat16 as float32; wider types as they are."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _additive_mask(allowed: torch.Tensor, positions: Positions) -> torch.Tensor:
    """`allowed` (True where a query sees a key) as a float32 mask to add,
    0 or ``-inf``: made once per forward pass (the layers share it)."""
    key = ("mask", id(allowed))
    found = positions.memo.get(key)
    if found is None:
        mask = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
        found = positions.memo[key] = (mask.masked_fill(~allowed, float("-inf")), allowed)
    return found[0]


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = _enc.scale_of(self.head_dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        layer: int,
        encoding: PositionEncoding,
        positions: Positions,
        allowed: torch.Tensor,
    ) -> torch.Tensor:
        b, n, dim = x.shape
        q, k, v_ = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = encoding.rotate(q, k, positions)
        logits = q @ k.transpose(-1, -2)
        mask = _additive_mask(allowed, positions)
        if encoding.kind == "scores":
            # the position terms in float32 at least, autocast or not
            with torch.autocast(x.device.type, enabled=False):
                q, k, logits = (_widened(t) for t in (q, k, logits))
                scores = encoding.scores(layer, logits, self.scale, mask, q, k, positions)
        else:
            # scaled and masked in one pass (float32: the mask's)
            scores = torch.add(mask, logits, alpha=self.scale)
        weights = torch.softmax(scores.float(), dim=-1).to(v_.dtype)
        out = (weights @ v_).transpose(1, 2).reshape(b, n, dim)
        return self.out(out)


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = _Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        layer: int,
        encoding: PositionEncoding,
        positions: Positions,
        allowed: torch.Tensor,
    ) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.norm1(x), layer, encoding, positions, allowed))
        return x + self.dropout(self.ffn(self.norm2(x)))


class LabModel(nn.Module):
    """A small pre-LN Transformer with the position encoding `encoding`.

    Parameters
    ----------
    vocab_size : int
        The tokens' ids are in ``[0, vocab_size)``.
    encoding : str, dict or Encoding
        The position encoding (:func:`posenc.lab.encoding`; :data:`posenc.lab.ENCODINGS`).
    dim, layers, heads : int
        The width, the number of blocks and of attention heads (``dim`` a
        multiple of ``heads``).
    ffn : int, optional
        The feed-forward width (GELU); ``4 * dim`` by default.
    kind : {"decoder", "encoder"}
        A causal language model (``forward`` gives ``(batch, n, vocab_size)``
        logits) or a bidirectional classifier (``(batch, n_classes)``).
    n_classes : int, optional
        The encoder's classes.
    pooling : {"mean", "first"}
        The encoder's pooling: the mean over the tokens that are not
        padding, or the first token.
    pad_id : int, optional
        The encoder's padding token: padded keys are masked and left out of
        the mean.
    max_positions : int
        The largest position id + 1 the model will be given: the learned
        table's rows (and CoPE's positions when neither its option nor
        `train_length` says).
    train_length : int, optional
        The training length: a RoPE scaling family's
        ``original_max_position_embeddings``, and CoPE's number of positions
        by default.
    dropout : float
        After attention and the feed-forward layer (0 by default, so that a
        run is the same whatever the number of processes).

    Notes
    -----
    ``forward(tokens, positions=None)``: `tokens` ``(batch, n)`` integer
    ids; `positions` None (``0 .. n-1``) or integer ids of shape ``(n,)``,
    ``(1, n)`` or ``(batch, n)``.
    """

    def __init__(
        self,
        vocab_size: int,
        encoding: Any = "nope",
        *,
        dim: int = 32,
        layers: int = 2,
        heads: int = 4,
        ffn: Optional[int] = None,
        kind: str = "decoder",
        n_classes: Optional[int] = None,
        pooling: str = "mean",
        pad_id: Optional[int] = None,
        max_positions: int = 512,
        train_length: Optional[int] = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        vocab_size = v.integer(vocab_size, "vocab_size", minimum=1)
        dim = v.integer(dim, "dim", minimum=2)
        layers = v.integer(layers, "layers", minimum=1)
        heads = v.integer(heads, "heads", minimum=1)
        ffn = 4 * dim if ffn is None else v.integer(ffn, "ffn", minimum=1)
        self.kind = v.choice(kind, "kind", ("decoder", "encoder"))
        self.pooling = v.choice(pooling, "pooling", ("mean", "first"))
        max_positions = v.integer(max_positions, "max_positions", minimum=1)
        if train_length is not None:
            train_length = v.integer(train_length, "train_length", minimum=1)
        dropout = float(v.real(dropout, "dropout"))
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if self.kind == "encoder":
            if n_classes is None:
                raise ValueError("an encoder classifier needs n_classes")
            n_classes = v.integer(n_classes, "n_classes", minimum=2)
        elif n_classes is not None:
            raise ValueError("n_classes is for kind='encoder' (a decoder predicts tokens)")
        if pad_id is not None:
            pad_id = v.integer(pad_id, "pad_id", minimum=0)
            if pad_id >= vocab_size:
                raise ValueError(f"pad_id {pad_id} is not below vocab_size {vocab_size}")
        head_dim_of(dim, heads)
        self.vocab_size, self.dim, self.heads = vocab_size, dim, heads
        self.n_classes, self.pad_id = n_classes, pad_id
        self.max_positions, self.train_length = max_positions, train_length
        spec = _enc.encoding(encoding)
        # the blocks and the head first: for a seed they start alike whatever
        # the encoding, whose parameters (and the token embedding) come after
        self.blocks = nn.ModuleList([_Block(dim, heads, ffn, dropout) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size if n_classes is None else n_classes)
        if spec.kind != "embedding":
            self.embed = nn.Embedding(vocab_size, dim)
        self.encoding = build(
            spec,
            vocab_size=vocab_size,
            dim=dim,
            heads=heads,
            layers=layers,
            causal=self.kind == "decoder",
            max_positions=max_positions,
            train_length=train_length,
        )
        self.spec: Encoding = spec

    def settings(self) -> Dict[str, Any]:
        """The model's arguments as plain values."""
        return {
            "kind": self.kind,
            "encoding": self.spec.to_dict(),
            "vocab_size": self.vocab_size,
            "dim": self.dim,
            "layers": len(self.blocks),
            "heads": self.heads,
            "ffn": self.blocks[0].ffn[0].out_features,
            "n_classes": self.n_classes,
            "pooling": self.pooling if self.kind == "encoder" else None,
            "pad_id": self.pad_id,
            "max_positions": self.max_positions,
            "train_length": self.train_length,
            "dropout": self.blocks[0].dropout.p,
        }

    def forward(self, tokens: torch.Tensor, positions: Any = None) -> torch.Tensor:
        if not torch.is_tensor(tokens) or tokens.dtype not in (torch.int32, torch.int64):
            raise TypeError("tokens must be an int64 or int32 tensor of shape (batch, n)")
        if tokens.ndim != 2 or tokens.shape[1] < 1:
            raise ValueError(f"tokens must have shape (batch, n), got {tuple(tokens.shape)}")
        b, n = tokens.shape
        device = tokens.device
        pos = positions_of(positions, b, n, device)
        self.encoding.check_positions(pos)
        if self.encoding.kind == "embedding":
            x = self.encoding.embed(tokens, pos)
        else:
            x = self.encoding.add_input(self.embed(tokens), pos)
        keys = None
        if self.kind == "decoder":
            allowed = torch.ones(n, n, dtype=torch.bool, device=device).tril()[None, None]
        elif self.pad_id is not None:
            keys = tokens != self.pad_id  # (batch, n)
            allowed = keys[:, None, None, :]
        else:
            allowed = torch.ones(1, 1, 1, n, dtype=torch.bool, device=device)
        for i, block in enumerate(self.blocks):
            x = block(x, i, self.encoding, pos, allowed)
        x = self.norm(x)
        if self.kind == "decoder":
            return self.head(x)
        if self.pooling == "first":
            pooled = x[:, 0]
        elif keys is None:
            pooled = x.mean(dim=1)
        else:
            weights = keys.to(x.dtype)[..., None]
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(pooled)
