"""One call for a loaded transformers model: its positions computed by posenc.

``patch(model)`` makes that model instance (not its class, not its modeling
module) compute its positions with posenc; ``unpatch(model)`` restores it
exactly; ``with patched(model): ...`` does both.  What is patched:

- rotary modules built from transformers' rope init functions (the
  ``*RotaryEmbedding`` modules holding ``inv_freq`` and ``rope_type``, per
  layer type too): replaced by :class:`posenc.torch.RotaryEmbedding` built
  from the module's own config as it is when patched (GPT-OSS's, whose
  tables hold each pair's angle once: the first half of posenc's);
- GPT-J's and CodeGen's rotary modules (a table of sin and cos, the pairs
  interleaved): replaced by posenc's tables of the same form;
- BLOOM's ALiBi (``BloomModel.build_alibi_tensor``), MPT's
  (``MptModel.build_mpt_alibi_tensor``) and Falcon's (the model instance
  gets a ``forward`` of its own: the class's code reading posenc's ALiBi);
- T5, MT5, UMT5 and LongT5's relative bias (``compute_bias`` of the
  attention modules that hold a table; LongT5's local attention by blocks);
- DeBERTa-v2 and v3's relative attention (``disentangled_attention_bias``
  of each attention module: c2p and p2c gathered by posenc);
- XLNet's relative attention (``rel_attn_core`` of each attention module:
  the position term shifted by posenc).

Every replacement is built and checked against the module it replaces (on
a few positions, before anything is changed, every module's ``training``
flag left as it was); a model posenc cannot patch (nothing it knows, or a
module whose numbers it would not reproduce) gets a ValueError naming what
it found and why, and is left as it was.  Where transformers computes a
quantity less exactly than posenc (a bfloat16 ``inv_freq`` after
``model.to(torch.bfloat16)``, angles formed in float32 in a float64 model,
ALiBi slopes rounded to float32 or bfloat16), the patched model is exact,
and ``patch`` says so once with a warning naming the quantity and the size
of the difference measured on those positions; ``patch(model,
exact=False)`` keeps transformers' rounding instead.

``patch(model, scaling="yarn:4")`` (a short string, a rope dict or a
config) makes the rotary modules compute their tables with another
context-extension family, as the same weights in a model whose config
carries it compute them (see :func:`patch`).

A patched model pickles, saves with ``torch.save`` and deep-copies: the
copy is patched by itself, and ``unpatch`` restores transformers' code in
it.  Every replacement is an object of a class of this module holding its
state as attributes.

transformers is imported only by the functions of this module, when used.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import types
import warnings
from typing import Any, Iterator, List, Optional, Tuple

from . import _hf_scaling
from ._model_config import config_value, layer_config

__all__ = ["SUPPORTED", "PreparedPatch", "patch", "patched", "patched_parts", "prepare", "unpatch"]

SUPPORTED = (
    "rotary modules built from transformers' rope init functions (Llama, Mistral, Qwen2/3, "
    "Gemma 1-3, Phi-3, GPT-NeoX, GPT-OSS, ... : *RotaryEmbedding with inv_freq and rope_type)",
    "GPT-J's and CodeGen's rotary tables (*RotaryEmbedding with embed_positions)",
    "BLOOM's ALiBi (BloomModel.build_alibi_tensor)",
    "MPT's ALiBi (MptModel.build_mpt_alibi_tensor)",
    "Falcon's ALiBi (FalconModel with alibi=True)",
    "T5 / MT5 / UMT5 / LongT5 (local attention) relative attention bias (compute_bias of the "
    "attention modules)",
    "DeBERTa-v2 / v3 relative attention (DisentangledSelfAttention.disentangled_attention_bias)",
    "XLNet relative attention (XLNetRelativeAttention.rel_attn_core: the position term)",
)

_STATE = "_posenc_patch"
_PROBE = 16  # positions 0 .. _PROBE - 1 on which each replacement is checked


class _Change:
    """One reversible change to one object: its attribute `attr` set to
    `value` (a submodule through ``setattr``, anything else in the instance's
    ``__dict__``).  Data, not closures: ``copy.deepcopy`` of a patched model
    copies its changes onto the copy's own objects, so that the copy is
    patched and unpatched by itself."""

    def __init__(self, what: str, obj: Any, attr: str, value: Any, module: bool) -> None:
        self.what, self.obj, self.attr, self.value, self.module = what, obj, attr, value, module
        self.had = attr in obj.__dict__
        self.before = getattr(obj, attr) if module else obj.__dict__.get(attr)

    def in_place(self) -> bool:
        """Whether the object still holds what it held when this change was made."""
        if self.module:
            return getattr(self.obj, self.attr, None) is self.before
        return (self.attr in self.obj.__dict__) == self.had and (
            self.obj.__dict__.get(self.attr) is self.before
        )

    def apply(self) -> None:
        if self.module:
            setattr(self.obj, self.attr, self.value)
        else:
            self.obj.__dict__[self.attr] = self.value

    def undo(self) -> None:
        if self.module:
            # the module back in its place with the flag its replacement has
            # there now (a model.train() or .eval() while patched set that one)
            self.before.training = getattr(self.obj, self.attr).training
            setattr(self.obj, self.attr, self.before)
        elif self.had:
            self.obj.__dict__[self.attr] = self.before
        else:
            self.obj.__dict__.pop(self.attr, None)


def _supported_text() -> str:
    return "; ".join(SUPPORTED)


def _max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


# -- rotary ---------------------------------------------------------------------


def _rotary_layer_types(module: Any) -> List[Optional[str]]:
    rope_type = getattr(module, "rope_type", None)
    if isinstance(rope_type, dict):
        return list(rope_type)
    return [None]


def _is_rotary(module: Any) -> bool:
    if not type(module).__name__.endswith("RotaryEmbedding"):
        return False
    if getattr(module, "config", None) is None or not hasattr(module, "rope_type"):
        return False
    names = dict(module.named_buffers(recurse=False))
    return any(n == "inv_freq" or n.endswith("_inv_freq") for n in names)


def _inv_freq(module: Any, layer_type: Optional[str]) -> Any:
    prefix = "" if layer_type is None else f"{layer_type}_"
    return getattr(module, f"{prefix}inv_freq", None)


def _head_dims(config: Any, layer_type: Optional[str]) -> List[int]:
    """The head dimensions the config may mean, the config's own first."""
    config = layer_config(config, layer_type)
    dims = []
    head_dim = config_value(config, "head_dim")
    if isinstance(head_dim, int):
        dims.append(head_dim)
    heads = config_value(config, "num_attention_heads")
    hidden = config_value(config, "hidden_size")
    if isinstance(hidden, int) and isinstance(heads, int) and heads:
        dims.append(hidden // heads)
    for key in ("qk_rope_head_dim", "rotary_dim"):
        value = config_value(config, key)
        if isinstance(value, int):
            dims.append(value)
    return [d for d in dict.fromkeys(dims) if d > 0]


def _probe_rotary(
    original: Any, layer_type: Optional[str], torch: Any, private: bool = False
) -> Tuple[Any, Any, Any, Any]:
    """(x, position ids, cos, sin) of a copy of `original` on the probe
    positions (the model's own module keeps its state): three rows of
    different positions for an M-RoPE module (one holding ``mrope_section``,
    its config's or its class's own), so that the rows' sections are
    checked; on the CPU, from a module built anew from its config, for one
    on the meta device (which has no values to compare).  `private`: the
    module is the caller's own, run as it is."""
    inv_freq = _inv_freq(original, layer_type)
    device = inv_freq.device
    on_meta = device.type == "meta"
    if on_meta:
        device = torch.device("cpu")
    # the probe's dtype: float64 where the module holds float64 (to see what
    # transformers makes of a float64 model), float32 otherwise
    dtype = torch.float64 if inv_freq.dtype == torch.float64 else torch.float32
    x = torch.zeros(1, dtype=dtype, device=device)
    ids = torch.arange(_PROBE, device=device)[None]
    params = getattr(original.config, "rope_parameters", None) or {}
    if layer_type is not None and isinstance(params, dict):
        params = params.get(layer_type) or {}
    sections = getattr(original, "mrope_section", None)
    if isinstance(sections, dict):
        sections = sections.get(layer_type)
    if sections is not None or (isinstance(params, dict) and params.get("mrope_section")):
        ids = torch.stack([ids, ids // 4, ids % 7])
    if on_meta:
        try:
            with torch.device("cpu"):
                twin = type(original)(original.config)
        except Exception as exc:  # a module not built from its config alone
            raise ValueError(
                "it is on the meta device (no values to check posenc's tables against), and "
                f"building it anew on the CPU from its config failed ({type(exc).__name__}: "
                f"{exc}); patch the model once its weights are loaded"
            ) from exc
    else:
        twin = original if private else copy.deepcopy(original)
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    try:
        with torch.no_grad():
            out = twin(x, ids, **kwargs)
    except Exception as exc:  # not a module driven by (x, position_ids) this way
        raise ValueError(
            f"it does not run on position ids of shape {tuple(ids.shape)} "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(f"{type(original).__name__} does not return (cos, sin)")
    return x, ids, out[0], out[1]


def _rotary_replacement(
    name: str, original: Any, torch: Any, notes: List[str], exact: bool = True
) -> Tuple[Any, str]:
    """A posenc RotaryEmbedding for `original`, checked on the probe (None
    with ``exact=False`` where transformers rounds differently: the module
    is then kept, transformers' rounding with it)."""
    from .torch import RotaryEmbedding

    config = original.config
    layer_types = _rotary_layer_types(original)
    if not layer_types:
        raise ValueError(f"{name} ({type(original).__name__}) has no layer types to patch")
    problems = []
    # the tables' layout: transformers' "half", or each angle twice in a row
    # (Cohere's, GLM's repeat_interleave)
    candidates = [
        (d, lay) for lay in ("half", "interleaved") for d in _head_dims(config, layer_types[0])
    ]
    # M-RoPE's sections as the module holds them: its config's, or its
    # class's own where the config states none (Qwen2-VL's [16, 24, 24])
    sections = getattr(original, "mrope_section", None)
    given = list(sections) if isinstance(sections, (list, tuple)) else None
    for dim, layout in candidates:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = RotaryEmbedding(
                    dim, config=config, layer_type=None, layout=layout, mrope_section=given
                )
        except (TypeError, ValueError) as exc:
            problems.append(f"head_dim {dim} ({layout}): {exc}")
            continue
        # dynamic NTK: the length transformers' module has grown its
        # frequencies for so far, carried over
        for layer_type in layer_types:
            prefix = "" if layer_type is None else f"{layer_type}_"
            cached: Any = getattr(original, f"{prefix}max_seq_len_cached", None)
            cached = getattr(original, "max_seq_len_cached", None) if cached is None else cached
            start = getattr(original, "original_max_seq_len", None)
            if torch.is_tensor(cached):  # transformers keeps it as a tensor once grown
                cached = int(cached.item())
            if isinstance(cached, int) and isinstance(start, int) and cached > start:
                module._grown[layer_type] = cached
        worst = 0.0
        ok = True
        for layer_type in layer_types:
            try:
                x, ids, cos, sin = _probe_rotary(original, layer_type, torch)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mine = module(x, ids, layer_type=layer_type)
            except (TypeError, ValueError, RuntimeError) as exc:
                problems.append(f"head_dim {dim}, layer type {layer_type}: {exc}")
                ok = False
                break
            if mine[0].shape != cos.shape:
                problems.append(
                    f"head_dim {dim}, layer type {layer_type}: transformers' tables have shape "
                    f"{tuple(cos.shape)}, posenc's {tuple(mine[0].shape)}"
                )
                ok = False
                break
            diff = max(_max_diff(mine[0], cos), _max_diff(mine[1], sin))
            # a reading of the config other than transformers' moves the
            # tables by far more than transformers' own rounding does
            if diff > 0.05:
                problems.append(
                    f"head_dim {dim}, layer type {layer_type}: posenc's tables differ from "
                    f"transformers' by {diff:.3g}"
                )
                ok = False
                break
            worst = max(worst, diff)
        if not ok:
            continue
        inv = _inv_freq(original, layer_types[0])
        exact_limit = 1e-12 if inv.dtype == torch.float64 else 1e-5
        if worst > exact_limit:
            if inv.dtype == torch.float64:
                quantity = "angles formed in float32 in a float64 model"
            elif inv.dtype in (torch.bfloat16, torch.float16):
                quantity = f"inv_freq held in {str(inv.dtype).replace('torch.', '')}"
            else:
                quantity = "cos and sin"
            if not exact:  # transformers' own rounding: its module stays
                return None, f"{name}: kept ({quantity})"
            notes.append(
                f"{name}: transformers' {quantity} moves cos/sin by up to {worst:.3g} at "
                f"positions 0..{_PROBE - 1}; the patched model uses the exact values "
                "(patch(model, exact=False) keeps transformers' module there)"
            )
        return module, f"{name} ({type(original).__name__}, head_dim {dim}, {layout})"
    raise ValueError(
        f"{name} ({type(original).__name__}) cannot be reproduced by posenc: "
        + "; ".join(problems or ["no head dimension in its config"])
    )


# -- what stands in for transformers' code ---------------------------------------------
#
# Every replacement is an object of a class of this module holding its state as
# attributes (no closure, no bound method of a function): a patched model
# pickles, saves with torch.save and deep-copies, and the copy is patched by
# itself.


class _Replacement:
    """Base of the callables that stand in for a method of one module
    instance (set in that instance's ``__dict__``)."""

    __slots__ = ()


class _BloomAlibi(_Replacement):
    """``BloomModel.build_alibi_tensor`` by posenc: ``(batch * heads, 1,
    k_len)``, each key's slope times its position over the mask.

    Exact: posenc's slopes and products in float64, rounded once to
    `dtype`.  Otherwise transformers' rounding: its float32 slopes (read
    from its own function), the products rounded to float32 and then to
    `dtype`."""

    __slots__ = ("alibi", "exact")

    def __init__(self, alibi: Any, exact: bool) -> None:
        self.alibi, self.exact = alibi, exact

    def __call__(self, attention_mask: Any, num_heads: int, dtype: Any) -> Any:
        import torch

        if num_heads != self.alibi.n_heads:
            raise ValueError(
                f"num_heads is {num_heads}, the patched model has {self.alibi.n_heads}"
            )
        if self.exact:
            bias = self.alibi.key_bias(attention_mask, dtype=dtype)  # (batch, heads, 1, k)
        else:
            bias = self.alibi.key_bias(attention_mask, dtype=torch.float32).to(dtype)
        return bias.reshape(-1, 1, bias.shape[-1])


class _MptAlibi(_Replacement):
    """``MptModel.build_mpt_alibi_tensor`` by posenc: ``(heads, 1,
    sequence_length)``, ``-slope * (sequence_length - 1 - j)``.

    Exact: posenc's float64 slopes and products rounded once, to float32 as
    transformers gives the bias (float64 in a float64 model).  Otherwise
    transformers' float32 slopes (read from its own function) and float32
    products."""

    __slots__ = ("alibi", "owner", "exact")

    def __init__(self, alibi: Any, owner: Any, exact: bool) -> None:
        self.alibi, self.owner, self.exact = alibi, owner, exact

    def __call__(
        self, num_heads: int, sequence_length: int, alibi_bias_max: float = 8, device: Any = None
    ) -> Any:
        import torch

        n = self.alibi.n_heads
        if num_heads != n or alibi_bias_max != 8:
            raise ValueError(
                f"the patched MPT ALiBi has {n} heads and alibi_bias_max 8, got {num_heads} "
                f"and {alibi_bias_max}"
            )
        dtype = torch.float32
        if self.exact:
            weight = next(iter(self.owner.parameters()), None)
            if weight is not None and weight.dtype == torch.float64:
                dtype = torch.float64
        return self.alibi.bias(1, sequence_length, dtype=dtype, device=device or "cpu")


class _FalconAlibi(_Replacement):
    """Falcon's ``build_alibi_tensor`` by posenc, as :class:`_BloomAlibi`;
    otherwise transformers' rounding: bfloat16 slopes times positions, the
    products in bfloat16."""

    __slots__ = ("alibi", "rounded", "exact")

    def __init__(self, alibi: Any, rounded: Any, exact: bool) -> None:
        self.alibi, self.rounded, self.exact = alibi, rounded, exact

    def __call__(self, attention_mask: Any, num_heads: int, dtype: Any) -> Any:
        import torch

        if num_heads != self.alibi.n_heads:
            raise ValueError(
                f"num_heads is {num_heads}, the patched model has {self.alibi.n_heads}"
            )
        if self.exact:
            bias = self.alibi.key_bias(attention_mask, dtype=dtype)
        else:
            bias = self.rounded.key_bias(attention_mask, dtype=torch.bfloat16).to(dtype)
        return bias.reshape(-1, 1, bias.shape[-1])


def _falcon_function(cls: Any, build_alibi: Any) -> Any:
    """The function of ``cls.forward`` (and each of its decorators' wrappers)
    made again with `build_alibi` in the name ``build_alibi_tensor`` of its
    modeling module's globals.  ValueError where that cannot be done."""
    import sys

    chain = [cls.forward]
    while hasattr(chain[-1], "__wrapped__"):
        chain.append(chain[-1].__wrapped__)
    inner = chain[-1]
    home = sys.modules.get(getattr(inner, "__module__", None) or "")
    code = getattr(inner, "__code__", None)
    if (
        getattr(home, "build_alibi_tensor", None) is None
        or code is None
        or "build_alibi_tensor" not in code.co_names
    ):
        raise ValueError(f"{cls.__name__}.forward does not call build_alibi_tensor")
    scope = dict(inner.__globals__)
    scope["build_alibi_tensor"] = build_alibi
    fn: Any = types.FunctionType(
        inner.__code__, scope, inner.__name__, inner.__defaults__, inner.__closure__
    )
    fn.__kwdefaults__ = inner.__kwdefaults__
    fn = functools.update_wrapper(fn, inner)
    # each decorator's wrapper around it, its cell now holding the new one
    for wrapper, wrapped in zip(reversed(chain[:-1]), reversed(chain[1:])):
        cells = tuple(
            types.CellType(fn) if cell.cell_contents is wrapped else cell
            for cell in (getattr(wrapper, "__closure__", None) or ())
        )
        if not any(c.cell_contents is fn for c in cells):
            raise ValueError(f"cannot rebuild the decorators of {cls.__name__}.forward")
        new = types.FunctionType(
            wrapper.__code__, wrapper.__globals__, wrapper.__name__, wrapper.__defaults__, cells
        )
        new.__kwdefaults__ = wrapper.__kwdefaults__
        fn = functools.update_wrapper(new, fn)
    return fn


class _FalconForward(_Replacement):
    """``FalconModel.forward`` of one instance: the class's code reading
    posenc's ALiBi (:class:`_FalconAlibi`) where it calls
    ``build_alibi_tensor``.

    The function is made from the class's code objects, which do not
    pickle: it is kept out of the pickled (and deep-copied) state and made
    again on the first call after loading."""

    __slots__ = ("owner", "build_alibi", "_fn")

    def __init__(self, owner: Any, build_alibi: _FalconAlibi) -> None:
        self.owner, self.build_alibi = owner, build_alibi
        self._fn: Any = None

    def __getstate__(self) -> Any:
        return (None, {"owner": self.owner, "build_alibi": self.build_alibi})

    def __setstate__(self, state: Any) -> None:
        slots = state[1]
        self.owner, self.build_alibi, self._fn = slots["owner"], slots["build_alibi"], None

    def function(self) -> Any:
        if self._fn is None:
            self._fn = _falcon_function(type(self.owner), self.build_alibi)
        return self._fn

    @property
    def __signature__(self) -> Any:  # the forward's own, as a bound method's
        import inspect

        sig = inspect.signature(self.function())
        return sig.replace(parameters=list(sig.parameters.values())[1:])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function()(self.owner, *args, **kwargs)


class _T5Bias(_Replacement):
    """``T5Attention.compute_bias`` by posenc: ``(1, heads, q, k)`` from a
    :class:`posenc.torch.T5RelativeBias` holding the module's own table."""

    __slots__ = ("bias",)

    def __init__(self, bias: Any) -> None:
        self.bias = bias

    def __call__(
        self, query_length: int, key_length: int, device: Any = None, past_seen_tokens: int = 0
    ) -> Any:
        out = self.bias(int(query_length), int(key_length), q_offset=int(past_seen_tokens))
        return out if device is None else out.to(device)


class _LongT5BlockBias(_Replacement):
    """``LongT5LocalAttention.compute_bias`` by posenc: ``(1, 1, heads,
    block_length, 3 * block_length)``, the bias of a block's queries (at
    ``block_length .. 2 block_length - 1``) on the three blocks of keys
    around them (``0 .. 3 block_length - 1``)."""

    __slots__ = ("bias",)

    def __init__(self, bias: Any) -> None:
        self.bias = bias

    def __call__(self, block_length: int) -> Any:
        n = int(block_length)
        return self.bias(n, 3 * n, q_offset=n)[:, None]


class _DebertaBias(_Replacement):
    """DeBERTa-v2's ``DisentangledSelfAttention.disentangled_attention_bias``
    by posenc for one attention module (`owner`): the relative embeddings
    projected as transformers projects them, the gather by distance and
    the scaling in posenc's kernels.  ``relative_pos`` is the model's own
    (``build_relative_position`` with the module's buckets), which posenc
    forms itself."""

    __slots__ = ("owner",)

    def __init__(self, owner: Any) -> None:
        self.owner = owner

    def __call__(
        self,
        query_layer: Any,
        key_layer: Any,
        relative_pos: Any,
        rel_embeddings: Any,
        scale_factor: Any,
    ) -> Any:
        from .torch import DebertaRelativeBias

        att = self.owner
        heads = att.num_attention_heads
        span = att.pos_ebd_size
        rel = rel_embeddings[: 2 * span, :].unsqueeze(0)
        pos_key = pos_query = None
        if "c2p" in att.pos_att_type:
            proj = att.key_proj if att.share_att_key else att.pos_key_proj
            pos_key = att.transpose_for_scores(proj(rel), heads)  # (heads, 2 span, d)
        if "p2c" in att.pos_att_type:
            proj = att.query_proj if att.share_att_key else att.pos_query_proj
            pos_query = att.transpose_for_scores(proj(rel), heads)
        term = DebertaRelativeBias(
            position_buckets=att.position_buckets,
            max_relative_positions=att.max_relative_positions,
            n_heads=heads,
            layout="(bh)sd",
        )
        return term(query_layer, key_layer, pos_key, pos_query, scale_factor=int(scale_factor))


class _XLNetAttentionCore(_Replacement):
    """XLNet's ``XLNetRelativeAttention.rel_attn_core`` for one attention
    module (`owner`), its position term ``(q + r_r_bias) . k_head_r``
    shifted by posenc (no product of the full ``(q_len, k_len + q_len)``
    grid, no shifted copy); the content and segment terms, the mask and the
    softmax as transformers writes them.

    ``k_head_r`` is the table of the model's ``attn_type``: ``"bi"``'s
    ``k_len + q_len`` rows, or ``"uni"``'s ``k_len + 1`` (distances ``k_len``
    down to 0), which has none for the keys after each query.  With that one
    the position term of those keys is left 0 (``causal=True``): the model
    masks them (``attn_type="uni"`` always passes its causal mask), where
    transformers' shift reads the next query's row there.  The two tables
    have the same rows for one query (the newest: no key after it)."""

    __slots__ = ("owner",)

    def __init__(self, owner: Any) -> None:
        self.owner = owner

    def __call__(
        self,
        q_head: Any,
        k_head_h: Any,
        v_head_h: Any,
        k_head_r: Any,
        seg_mat: Any = None,
        attn_mask: Any = None,
        output_attentions: bool = False,
    ) -> Any:
        import torch

        from .torch import XLPositionTerm

        att = self.owner
        ac = torch.einsum("ibnd,jbnd->bnij", q_head + att.r_w_bias, k_head_h)
        # XLNet holds q and r as (len, batch, heads, head_dim): layout "ibnd"
        k_len = ac.shape[3]
        uni = k_head_r.shape[0] == k_len + 1  # "uni"'s table (bi's too for one query)
        bd = XLPositionTerm(att.r_r_bias, layout="ibnd")(q_head, k_head_r, k_len=k_len, causal=uni)
        if seg_mat is None:
            ef: Any = 0
        else:
            ef = torch.einsum("ibnd,snd->ibns", q_head + att.r_s_bias, att.seg_embed)
            ef = torch.einsum("ijbs,ibns->bnij", seg_mat, ef)
        attn_score = (ac + bd + ef) * att.scale
        if attn_mask is not None:
            if attn_mask.dtype == torch.float16:
                attn_score = attn_score - 65500 * torch.einsum("ijbn->bnij", attn_mask)
            else:
                attn_score = attn_score - 1e30 * torch.einsum("ijbn->bnij", attn_mask)
        attn_prob = torch.nn.functional.softmax(attn_score, dim=3)
        attn_prob = att.dropout(attn_prob)
        attn_vec = torch.einsum("bnij,jbnd->ibnd", attn_prob, v_head_h)
        if output_attentions:
            return attn_vec, torch.einsum("bnij->ijbn", attn_prob)
        return attn_vec


# the replacements that are torch modules: made when first asked for
# (importing posenc.hf imports no torch), under their names in this module,
# where pickle finds them
_TORCH_CLASSES = ("_HalfWidthRotary", "_SinCosRotary")


def __getattr__(name: str) -> Any:
    if name in _TORCH_CLASSES:
        _define_torch_classes()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _define_torch_classes() -> None:
    if all(name in globals() for name in _TORCH_CLASSES):
        return
    import torch

    class _HalfWidthRotary(torch.nn.Module):
        """A rotary module whose tables hold each pair's angle once
        (GPT-OSS's: ``(batch, seq, rotary_dim / 2)``): the first half of a
        :class:`posenc.torch.RotaryEmbedding`'s ``"half"`` tables."""

        def __init__(self, rotary: Any) -> None:
            super().__init__()
            self.rotary = rotary

        def forward(
            self, x: Any, position_ids: Any, layer_type: Optional[str] = None
        ) -> Tuple[Any, Any]:
            cos, sin = self.rotary(x, position_ids, layer_type=layer_type)
            half = cos.shape[-1] // 2
            return cos[..., :half].contiguous(), sin[..., :half].contiguous()

    class _SinCosRotary(torch.nn.Module):
        """GPT-J's and CodeGen's rotary module by posenc: ``forward(x,
        position_ids)`` gives ``(sin, cos)``, each ``(batch, seq, rotary_dim
        / 2)`` (each pair's angle once: the attention repeats it for the
        interleaved pairs), in ``x``'s dtype (GPT-J's) or in the dtype the
        model holds its table in (CodeGen's, `follows_x` False: an empty
        buffer that the model's ``.to()`` casts keeps it)."""

        def __init__(self, rotary_dim: int, follows_x: bool, dtype: Any) -> None:
            super().__init__()
            from .torch import RotaryEmbedding

            self.rotary = RotaryEmbedding(rotary_dim, base=10000.0)
            self.follows_x = follows_x
            self.register_buffer("like", torch.zeros(0, dtype=dtype), persistent=False)

        def forward(self, x: Any, position_ids: Any) -> Tuple[Any, Any]:
            like = x if self.follows_x else x.new_zeros(0, dtype=self.like.dtype)
            cos, sin = self.rotary(like, position_ids)
            half = cos.shape[-1] // 2
            return sin[..., :half].contiguous(), cos[..., :half].contiguous()

    for cls in (_HalfWidthRotary, _SinCosRotary):
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
        globals()[cls.__name__] = cls


# -- ALiBi ------------------------------------------------------------------------

_ALIBI_PROBE = 1024  # keys 0 .. _ALIBI_PROBE - 1 on which the ALiBi biases are measured


def _alibi_note(
    model: str, name: str, apart: Tuple[float, float], notes: List[str], where: str
) -> None:
    notes.append(
        f"{name}: transformers forms {model}'s ALiBi slopes and products in float32; its "
        f"float32 bias differs from the exact values rounded once by up to {apart[0]:.3g} "
        f"(relative {apart[1]:.2g}) at {where}; the patched model uses the exact values "
        "(patch(model, exact=False) rounds them as transformers does)"
    )


def _alibi_apart(name: str, model: str, mine: Any, theirs: Any) -> Tuple[float, float]:
    """The largest difference of posenc's bias from transformers', absolute
    and relative; a ValueError if any value is further off than float32's
    rounding of the slopes and products can put it (16 ulps)."""
    if mine.shape != theirs.shape:
        raise ValueError(
            f"{name}: posenc's ALiBi has shape {tuple(mine.shape)}, {model}'s {tuple(theirs.shape)}"
        )
    apart = (mine.double() - theirs.double()).abs()
    size = theirs.double().abs()
    if bool((apart > 2.0**-20 * size).any()):
        raise ValueError(
            f"{name}: posenc's ALiBi differs from {model}'s by {float(apart.max()):.3g}, more "
            "than float32's rounding of its slopes and products"
        )
    if not apart.numel():
        return 0.0, 0.0
    return float(apart.max()), float((apart / size.clamp(min=1e-300)).max())


def _same_bits(a: Any, b: Any) -> bool:
    return bool(a.shape == b.shape and a.dtype == b.dtype and (a == b).all())


def _bloom_change(name: str, module: Any, torch: Any, exact: bool, notes: List[str]) -> _Change:
    from .torch import ALiBi

    n = module.num_heads
    original = module.build_alibi_tensor
    mask = torch.ones(2, _ALIBI_PROBE, dtype=torch.long)
    mask[0, :3] = 0
    theirs = original(mask, n, torch.float32)
    replacement = _BloomAlibi(ALiBi(n), exact=True)
    diff = _alibi_apart(name, "BLOOM", replacement(mask, n, torch.float32), theirs)
    if not exact:
        # transformers' float32 slopes: its bias at position 1
        slopes = original(torch.ones(1, 2, dtype=torch.long), n, torch.float32)[:, 0, 1]
        replacement = _BloomAlibi(ALiBi(n, slopes=slopes.double().tolist()), exact=False)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            if not _same_bits(replacement(mask, n, dtype), original(mask, n, dtype)):
                raise ValueError(f"{name}: posenc does not reproduce BLOOM's rounding of its ALiBi")
    elif diff[0] > 0:
        _alibi_note("BLOOM", name, diff, notes, f"positions 0..{_ALIBI_PROBE - 1}")
    return _instance_attr_change(module, "build_alibi_tensor", replacement, f"{name} (BLOOM ALiBi)")


def _mpt_change(name: str, module: Any, torch: Any, exact: bool, notes: List[str]) -> _Change:
    import numpy as np

    from .torch import ALiBi

    n = module.num_heads
    # MPT's slopes: 2 ** -(8 (i + 1) / n2) for the power of two n2 >= n, the
    # odd-numbered ones first when n is not a power of two
    n2 = 1 << (n - 1).bit_length()
    slopes = 2.0 ** (-(np.arange(1, n2 + 1, dtype=np.float64) * (8.0 / n2)))
    if n2 != n:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:n]
    original = module.build_mpt_alibi_tensor
    theirs = original(n, _ALIBI_PROBE)
    replacement = _MptAlibi(ALiBi(n, slopes=slopes), module, exact=True)
    mine = replacement(n, _ALIBI_PROBE)
    diff = _alibi_apart(name, "MPT", mine.to(theirs.dtype), theirs)
    if not exact:
        # transformers' float32 slopes: minus its bias at distance 1
        rounded = (-original(n, 2)[:, 0, 0]).double().tolist()
        replacement = _MptAlibi(ALiBi(n, slopes=rounded), module, exact=False)
        if not _same_bits(replacement(n, _ALIBI_PROBE), theirs):
            raise ValueError(f"{name}: posenc does not reproduce MPT's rounding of its ALiBi")
    elif diff[0] > 0:
        _alibi_note("MPT", name, diff, notes, f"distances 0..{_ALIBI_PROBE - 1}")
    return _instance_attr_change(
        module, "build_mpt_alibi_tensor", replacement, f"{name} (MPT ALiBi)"
    )


def _falcon_change(name: str, module: Any, torch: Any, exact: bool, notes: List[str]) -> _Change:
    """Falcon's model calls its modeling file's ``build_alibi_tensor``: this
    instance gets its own ``forward``, the class's code with posenc's ALiBi
    in that name (the class, its module and other instances untouched)."""
    import sys

    from .torch import ALiBi

    alibi = ALiBi(module.num_heads)
    rounded = ALiBi(module.num_heads, slopes=alibi.slopes.to(torch.bfloat16).double().tolist())
    build_alibi = _FalconAlibi(alibi, rounded, exact)
    home = sys.modules.get(getattr(type(module).forward, "__module__", None) or "")
    original = getattr(home, "build_alibi_tensor", None)
    if original is None:
        raise ValueError(f"{name}: its forward does not call build_alibi_tensor")
    mask = torch.ones(2, _ALIBI_PROBE, dtype=torch.long)
    mask[0, :2] = 0
    theirs = original(mask, module.num_heads, torch.float32)
    mine = _FalconAlibi(alibi, rounded, True)(mask, module.num_heads, torch.float32)
    if mine.shape != theirs.shape:
        raise ValueError(f"{name}: posenc's ALiBi has shape {tuple(mine.shape)}, Falcon's "
                         f"{tuple(theirs.shape)}")  # fmt: skip
    diff = _max_diff(mine, theirs)
    # transformers' bfloat16 slopes and products: within 2**-7 of the bias
    if diff > float(theirs.abs().max()) / 64:
        raise ValueError(f"{name}: posenc's ALiBi differs from Falcon's by {diff:.3g}")
    if exact and diff > 0:
        notes.append(
            f"{name}: transformers forms Falcon's ALiBi in bfloat16 (slopes.bfloat16() * "
            f"positions) in every dtype, {diff:.3g} off the exact bias at positions "
            f"0..{_ALIBI_PROBE - 1}; the patched model uses the exact bias (patch(model, "
            "exact=False) rounds it as transformers does)"
        )
    try:
        forward = _FalconForward(module, build_alibi)
        forward.function()
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc
    return _instance_attr_change(module, "forward", forward, f"{name} (Falcon ALiBi)")


# -- relative biases and terms ----------------------------------------------------------


def _t5_change(name: str, module: Any, torch: Any) -> _Change:
    from .torch import T5RelativeBias

    cls = type(module).__name__
    if callable(getattr(module, "compute_side_bias", None)):
        raise ValueError(
            f"{name} ({cls}) is not supported: LongT5's transient-global attention adds, besides "
            "its relative bias by blocks, a bias to each block's summary token by the distance "
            "between blocks (compute_side_bias, its own table), which posenc does not compute"
        )
    try:
        bias = T5RelativeBias(
            bidirectional=not module.is_decoder,
            max_distance=module.relative_attention_max_distance,
            weight=module.relative_attention_bias.weight,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} ({cls}): {exc}") from exc
    if module.relative_attention_bias.weight.shape[0] != module.relative_attention_num_buckets:
        raise ValueError(f"{name}: its table's rows are not its relative_attention_num_buckets")
    original = module.compute_bias
    if isinstance(getattr(module, "block_len", None), int):
        # LongT5's local attention: the bias of one block on the blocks around it
        replacement: Any = _LongT5BlockBias(bias)
        calls: Tuple[Tuple[Any, ...], ...] = ((1,), (3,), (module.block_len,))
        what = "LongT5 local bias"
    else:
        replacement = _T5Bias(bias)
        calls = ((5, 7, None, 0), (1, 9, None, 8))
        what = "T5 bias"
    with torch.no_grad():
        for args in calls:
            try:
                mine, theirs = replacement(*args), original(*args)
            except TypeError as exc:  # a compute_bias of another form
                raise ValueError(
                    f"{name} ({cls}) is not supported: its compute_bias is not T5's "
                    f"compute_bias(query_length, key_length, device, past_seen_tokens) "
                    f"({exc})"
                ) from exc
            if mine.shape != theirs.shape:
                raise ValueError(
                    f"{name} ({cls}): posenc's bias has shape {tuple(mine.shape)}, "
                    f"transformers' {tuple(theirs.shape)}"
                )
            diff = _max_diff(mine, theirs)
            if diff != 0.0:
                raise ValueError(f"{name}: posenc's T5 bias differs from transformers' by {diff}")
    return _instance_attr_change(module, "compute_bias", replacement, f"{name} ({what})")


def _check_same(name: str, module: Any, what: str, mine: Any, theirs: Any, torch: Any) -> None:
    """Run ``mine()`` and ``theirs()`` (posenc's replacement and the module's
    own) without gradients: a TypeError or ValueError of either names the
    module, results apart by more than 1e-4 of their size raise."""
    try:
        with torch.no_grad():
            a, b = mine(), theirs()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} ({type(module).__name__}): {exc}") from exc
    if a.shape != b.shape or _max_diff(a, b) > 1e-4 * (float(b.abs().max()) + 1):
        raise ValueError(f"{name}: posenc's {what} differs from transformers'")


def _deberta_change(name: str, module: Any, torch: Any) -> _Change:
    replacement = _DebertaBias(module)
    heads = module.num_attention_heads
    d = module.attention_head_size
    g = torch.Generator().manual_seed(0)
    dtype = next(iter(module.parameters())).dtype
    q = torch.randn(2 * heads, 7, d, generator=g).to(dtype)
    k = torch.randn(2 * heads, 7, d, generator=g).to(dtype)
    rel = torch.randn(2 * module.pos_ebd_size, heads * d, generator=g).to(dtype)
    factor = 1 + len(module.pos_att_type)
    _check_same(
        name,
        module,
        "DeBERTa bias",
        lambda: replacement(q, k, None, rel, factor),
        lambda: module.disentangled_attention_bias(q, k, None, rel, factor),
        torch,
    )
    return _instance_attr_change(
        module, "disentangled_attention_bias", replacement,
        f"{name} (DeBERTa-v2 relative attention)",
    )  # fmt: skip


@contextlib.contextmanager
def _evaluating(module: Any) -> Iterator[None]:
    """`module` and its submodules in eval mode inside, each one's
    ``training`` flag as it was after."""
    flags = [(m, m.training) for m in module.modules()]
    try:
        for m, _ in flags:
            m.training = False
        yield
    finally:
        for m, flag in flags:
            m.training = flag


def _xlnet_change(name: str, module: Any, torch: Any) -> _Change:
    replacement = _XLNetAttentionCore(module)
    n, d = module.n_head, module.d_head
    g = torch.Generator().manual_seed(0)
    dtype = module.r_r_bias.dtype
    q_len, k_len, b = 5, 8, 2

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(dtype)

    q, kh, vh = rand(q_len, b, n, d), rand(k_len, b, n, d), rand(k_len, b, n, d)
    seg = torch.nn.functional.one_hot(torch.randint(0, 2, (q_len, k_len, b), generator=g), 2)
    seg = seg.to(dtype)
    # "bi": every key of every query; "uni": the table of k_len + 1 rows, with
    # the causal mask the model passes with it (queries the newest q_len keys)
    future = torch.ones(q_len, k_len).triu(k_len - q_len + 1).to(dtype)[:, :, None, None]
    with _evaluating(module):  # no dropout in the comparison
        for kr, mask in ((rand(k_len + q_len, b, n, d), None), (rand(k_len + 1, b, n, d), future)):
            _check_same(
                name,
                module,
                "XLNet attention",
                functools.partial(replacement, q, kh, vh, kr, seg_mat=seg, attn_mask=mask),
                functools.partial(module.rel_attn_core, q, kh, vh, kr, seg_mat=seg, attn_mask=mask),
                torch,
            )
    return _instance_attr_change(
        module, "rel_attn_core", replacement, f"{name} (XLNet relative attention)"
    )


def _instance_attr_change(obj: Any, attr: str, value: Any, what: str) -> _Change:
    return _Change(what, obj, attr, value, module=False)


# -- rotary tables of other forms ---------------------------------------------------------


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _table_outcome(
    name: str, what: str, worst: float, dtype: Any, torch: Any, notes: List[str], exact: bool
) -> bool:
    """Whether a replacement whose tables are `worst` off transformers'
    (held in `dtype`) is used (False with ``exact=False`` where
    transformers rounds them otherwise: its module is then kept), noting
    the difference where it is more than float32's rounding."""
    limit = 1e-12 if dtype == torch.float64 else 1e-5
    if worst <= limit:
        return True
    if dtype == torch.float64:
        quantity = "angles formed in float32 in a float64 model"
    elif dtype in (torch.bfloat16, torch.float16):
        quantity = f"{what} held in {str(dtype).replace('torch.', '')}"
    else:
        quantity = what
    if not exact:
        return False
    notes.append(
        f"{name}: transformers' {quantity} moves its tables by up to {worst:.3g} at positions "
        f"0..{_PROBE - 1}; the patched model uses the exact values (patch(model, exact=False) "
        "keeps transformers' module there)"
    )
    return True


def _half_width_rotary(
    name: str, original: Any, torch: Any, notes: List[str], exact: bool
) -> Optional[Tuple[Any, str]]:
    """A replacement for a rotary module whose tables hold each pair's angle
    once (GPT-OSS's, ``(..., rotary_dim / 2)``), checked on the probe; None
    when the module's tables are not of that width."""
    from .torch import RotaryEmbedding

    layer_types = _rotary_layer_types(original)
    inv = _inv_freq(original, layer_types[0]) if layer_types else None
    if inv is None:
        return None
    try:
        probes = [_probe_rotary(original, lt, torch) for lt in layer_types]
    except ValueError:
        return None
    if any(cos.shape[-1] != inv.numel() for _, _, cos, _ in probes):
        return None
    problems = []
    for dim in _head_dims(original.config, layer_types[0]):
        try:
            inner = _quietly(RotaryEmbedding, dim, config=original.config, layout="half")
        except (TypeError, ValueError) as exc:
            problems.append(f"head_dim {dim}: {exc}")
            continue
        _carry_growth(inner, original, layer_types, torch)
        _define_torch_classes()
        module = globals()["_HalfWidthRotary"](inner)
        worst = 0.0
        for layer_type, (x, ids, cos, sin) in zip(layer_types, probes):
            try:
                mine = _quietly(module, x, ids, layer_type=layer_type)
            except (TypeError, ValueError, RuntimeError) as exc:
                problems.append(f"head_dim {dim}, layer type {layer_type}: {exc}")
                worst = math.inf
                break
            if mine[0].shape != cos.shape:
                problems.append(
                    f"head_dim {dim}: transformers' tables have shape {tuple(cos.shape)}, "
                    f"posenc's {tuple(mine[0].shape)}"
                )
                worst = math.inf
                break
            worst = max(worst, _max_diff(mine[0], cos), _max_diff(mine[1], sin))
        if worst > 0.05:
            if worst < math.inf:
                problems.append(f"head_dim {dim}: posenc's tables differ by {worst:.3g}")
            continue
        if not _table_outcome(name, "cos and sin", worst, inv.dtype, torch, notes, exact):
            return None, f"{name}: kept"
        inner.config = copy.deepcopy(inner.config)  # the config as it is now
        cls = type(original).__name__
        return module, f"{name} ({cls}, head_dim {dim}, one angle per pair)"
    raise ValueError(
        f"{name} ({type(original).__name__}) cannot be reproduced by posenc: its tables hold "
        "each pair's angle once; " + "; ".join(problems or ["no head dimension in its config"])
    )


def _carry_growth(module: Any, original: Any, layer_types: List[Optional[str]], torch: Any) -> None:
    """Dynamic NTK: the length transformers' module has grown its
    frequencies for so far, carried over to posenc's."""
    for layer_type in layer_types:
        prefix = "" if layer_type is None else f"{layer_type}_"
        cached: Any = getattr(original, f"{prefix}max_seq_len_cached", None)
        cached = getattr(original, "max_seq_len_cached", None) if cached is None else cached
        start = getattr(original, "original_max_seq_len", None)
        if torch.is_tensor(cached):
            cached = int(cached.item())
        if isinstance(cached, int) and isinstance(start, int) and cached > start:
            module._grown[layer_type] = cached


def _rounding_apart_only(name: str, original: Any, replacement: Any, torch: Any) -> None:
    """A ValueError if a rotary module holding float32 or float64
    frequencies is further from posenc's reading of its config than
    float32's rounding puts it (1e-4 on the probe): a module that does not
    follow its config as it is now (edited after the model was built), which
    transformers keeps on computing as built."""
    layer_types = _rotary_layer_types(original)
    inv = _inv_freq(original, layer_types[0]) if layer_types else None
    if inv is None or inv.dtype not in (torch.float32, torch.float64):
        return  # bfloat16 and float16 frequencies: far apart, said in the warning
    for layer_type in layer_types:
        x, ids, cos, sin = _probe_rotary(original, layer_type, torch)
        mine = _quietly(replacement, x, ids, layer_type=layer_type)
        worst = max(_max_diff(mine[0], cos), _max_diff(mine[1], sin))
        if worst > 1e-4:
            raise ValueError(
                f"{name} ({type(original).__name__}): its tables differ from posenc's reading "
                f"of its config by {worst:.3g} at positions 0..{_PROBE - 1}, more than float32's "
                "rounding: the module does not follow its config as it is now (a config edited "
                "after the model was built?)"
            )


def _is_sincos_table(module: Any) -> bool:
    """GPT-J's and CodeGen's rotary module: one table of sin and cos
    (``embed_positions``) looked up by position."""
    if not type(module).__name__.endswith("RotaryEmbedding"):
        return False
    table = dict(module.named_buffers(recurse=False)).get("embed_positions")
    return (
        table is not None
        and table.ndim == 2
        and isinstance(getattr(module, "pos_embd_dim", None), int)
        and table.shape[1] == module.pos_embd_dim
    )


def _sincos_change(
    name: str, original: Any, torch: Any, notes: List[str], exact: bool
) -> Optional[Tuple[Any, str]]:
    """GPT-J's and CodeGen's rotary module replaced: ``(sin, cos)`` of each
    pair's angle, the pairs interleaved (transformers' ``rotate_every_two``),
    base 10000.  None with ``exact=False`` where transformers rounds its
    table otherwise (its module kept)."""
    cls = type(original).__name__
    table = original.embed_positions
    dim = original.pos_embd_dim
    n = min(_PROBE, table.shape[0])
    ids = torch.arange(n, device=table.device)[None]
    twin = copy.deepcopy(original)
    other = torch.float64 if table.dtype != torch.float64 else torch.float32
    try:
        with torch.no_grad():
            theirs = twin(torch.zeros(1, dtype=table.dtype, device=table.device), ids)
            follows = twin(torch.zeros(1, dtype=other, device=table.device), ids)[0].dtype
    except Exception as exc:  # not driven by (x, position_ids) this way
        raise ValueError(
            f"{name} ({cls}) is not supported: it does not run on position ids of shape "
            f"{tuple(ids.shape)} ({type(exc).__name__}: {exc})"
        ) from exc
    if follows not in (other, table.dtype) or dim % 2:
        raise ValueError(f"{name} ({cls}) is not supported: its tables are not GPT-J's")
    _define_torch_classes()
    module = globals()["_SinCosRotary"](dim, follows == other, table.dtype)
    module = module.to(table.device)
    mine = _quietly(module, torch.zeros(1, dtype=table.dtype, device=table.device), ids)
    if not (isinstance(theirs, tuple) and len(theirs) == 2) or any(
        a.shape != b.shape or a.dtype != b.dtype for a, b in zip(mine, theirs)
    ):
        raise ValueError(
            f"{name} ({cls}) is not supported: it does not return (sin, cos) of shape "
            f"{tuple(mine[0].shape)} (GPT-J's interleaved pairs of rotary_dim {dim})"
        )
    worst = max(_max_diff(mine[0], theirs[0]), _max_diff(mine[1], theirs[1]))
    # float32's rounding, or a bfloat16 or float16 table's
    if worst > (1e-4 if table.dtype in (torch.float32, torch.float64) else 0.05):
        raise ValueError(
            f"{name} ({cls}) is not supported: posenc's sin and cos (interleaved pairs, rotary "
            f"dim {dim}, base 10000) differ from its table by {worst:.3g} at positions "
            f"0..{n - 1}, more than its dtype's rounding"
        )
    if not _table_outcome(name, "sin and cos table", worst, table.dtype, torch, notes, exact):
        return None
    return module, f"{name} ({cls}, rotary_dim {dim}, interleaved pairs)"


# -- scaling=: another context-extension family -----------------------------------


def _scaled_rotary(
    name: str,
    original: Any,
    unscaled: Any,
    req: _hf_scaling.Request,
    torch: Any,
    notes: List[str],
    said: List[str],
) -> Tuple[Any, str, _hf_scaling.Scaled]:
    """The replacement of `original` whose tables are those of `req`'s
    family: built as `unscaled` (its head dimension, layout and M-RoPE
    sections, checked against `original`) from a copy of the module's config
    carrying the family, and checked against transformers' own module built
    from that copy where transformers has the family.  What it inferred goes
    to `said`."""
    from .torch import RotaryEmbedding

    layer_types = _rotary_layer_types(original)
    scaled = _hf_scaling.scaled_config(original.config, layer_types, req, name)
    half_width = not isinstance(unscaled, RotaryEmbedding)
    inner = unscaled.rotary if half_width else unscaled
    sections = getattr(original, "mrope_section", None)
    given = list(sections) if isinstance(sections, (list, tuple)) else None
    try:
        rotary = _quietly(
            RotaryEmbedding,
            inner.head_dim,
            config=scaled.config,
            layout=inner.layout,
            mrope_section=None if half_width else given,
        )
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: scaling {req.label} cannot apply: {exc}") from exc
    if half_width:
        _define_torch_classes()
        module = globals()["_HalfWidthRotary"](rotary)
    else:
        module = rotary
    _check_scaled(name, original, module, scaled.config, layer_types, req, torch, notes)
    parts = []
    for layer_type in layer_types:
        if layer_type in scaled.params:
            family = scaled.params[layer_type]["rope_type"]
            found = _hf_scaling.described(
                scaled, layer_type, rotary._rotary_dims[layer_type], rotary.head_dim
            )
            where = "" if layer_type is None else f"{layer_type}: "
            parts.append(f"{where}{family} with " + ", ".join(found))
        else:
            own = _hf_scaling.layer_family(original.config, layer_type)
            parts.append(f"{layer_type} kept as it is ({own})")
    said.append(f"{name}: " + "; ".join(parts))
    what = f"{name} ({type(original).__name__}, head_dim {inner.head_dim}, scaling {req.label})"
    return module, what, scaled


def _check_scaled(
    name: str,
    original: Any,
    module: Any,
    config: Any,
    layer_types: List[Optional[str]],
    req: _hf_scaling.Request,
    torch: Any,
    notes: List[str],
) -> None:
    """`module`'s tables against those of transformers' own module of
    `original`'s class built from `config` (the scaled copy), on the probe
    positions, in the dtype `original` holds its frequencies in: a
    ValueError where they are further apart than that dtype's rounding, a
    note where transformers' rounding moves them.  Nothing where
    transformers cannot build that module (a family only posenc has, such
    as ntk_alpha outside HunYuan's models, or resonance)."""
    inv = _inv_freq(original, layer_types[0])
    dtype = inv.dtype if inv.device.type != "meta" else torch.float32
    try:
        with torch.device("cpu"):
            twin = _quietly(type(original), copy.deepcopy(config))
        twin = twin.to(dtype=dtype)
    except Exception:  # transformers has no rope init function for this family here
        return
    worst = 0.0
    for layer_type in layer_types:
        x, ids, cos, sin = _probe_rotary(twin, layer_type, torch, private=True)
        try:
            mine = _quietly(module, x, ids, layer_type=layer_type)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{name}: scaling {req.label} cannot apply: {exc}") from exc
        if mine[0].shape != cos.shape:
            raise ValueError(
                f"{name}: with scaling {req.label}, transformers' tables have shape "
                f"{tuple(cos.shape)}, posenc's {tuple(mine[0].shape)}"
            )
        worst = max(worst, _max_diff(mine[0], cos), _max_diff(mine[1], sin))
    exact = dtype in (torch.float32, torch.float64)
    if worst > (1e-4 if exact else 0.05):
        raise ValueError(
            f"{name}: with scaling {req.label}, posenc's tables differ from those of "
            f"transformers' {type(original).__name__} built with that config by {worst:.3g} at "
            f"positions 0..{_PROBE - 1}, more than its rounding"
        )
    if worst > (1e-12 if dtype == torch.float64 else 1e-5):
        quantity = (
            "angles formed in float32 in a float64 model"
            if dtype == torch.float64
            else f"inv_freq held in {str(dtype).replace('torch.', '')}"
            if not exact
            else "cos and sin"
        )
        notes.append(
            f"{name}: transformers' {quantity} would move cos/sin by up to {worst:.3g} at "
            f"positions 0..{_PROBE - 1}; the patched model uses the exact values"
        )


def _attention_scale_change(name: str, module: Any, scaled: dict) -> Optional[_Change]:
    """DeepSeek-V2/V3's attention (and the attention built on theirs):
    its ``scaling``, which its constructor multiplies by YaRN's ``mscale``
    squared from its config's rope parameters, set to what the scaled rope
    parameters give (None where that is what it holds)."""
    cls = type(module).__name__
    config = getattr(module, "config", None)
    qk = getattr(module, "qk_head_dim", None)
    current = getattr(module, "scaling", None)
    new = scaled.get(id(config))
    if new is None or not isinstance(qk, int) or not isinstance(current, float):
        raise ValueError(
            f"{name} ({cls}): its attention multiplies by YaRN's mscale from its config's rope "
            "parameters, and patch finds no rotary module of that config, or no qk_head_dim "
            "and scaling, to follow it with"
        )
    base = qk ** (-0.5)
    old = _hf_scaling.attention_scale(config_value(config, "rope_parameters"), base)
    if old != current:
        raise ValueError(
            f"{name} ({cls}): its attention scale {current!r} is not {old!r}, what its config's "
            "rope parameters give (a config edited after the model was built?)"
        )
    value = _hf_scaling.attention_scale(new, base)
    if value is None:
        raise ValueError(
            f"{name} ({cls}): scaling states mscale_all_dim without a factor, which its "
            "attention multiplies by"
        )
    if value == current:
        return None
    what = f"{name} ({cls}): attention scale {current:.6g} -> {value:.6g} (YaRN's mscale_all_dim)"
    return _Change(what, module, "scaling", value, module=False)


# -- the public calls --------------------------------------------------------------


def _already_patched(name: str, module: Any) -> Optional[str]:
    """Why `module` (named `name` in the model being patched, "" for the
    model itself) shows a patch already, or None."""
    cls = type(module)
    label = name or cls.__name__
    if _STATE in module.__dict__:
        return f"{label} is patched already: unpatch it first"
    if cls.__module__ in (__name__, "posenc.torch") or any(
        isinstance(v, _Replacement) for v in module.__dict__.values()
    ):
        return (
            f"{label} ({cls.__name__}) is posenc's already: a model holding it is patched "
            "(unpatch that model first)"
        )
    return None


def _plan(
    model: Any, torch: Any, exact: bool, req: Optional[_hf_scaling.Request] = None
) -> Tuple[List[_Change], List[str], List[str]]:
    """The changes that patch `model`, the notes of where it is more exact
    than transformers, and, with `req` (``scaling=``), what was inferred
    for each rotary module."""
    from .torch import RotaryEmbedding

    changes: List[_Change] = []
    notes: List[str] = []
    found: List[str] = []
    kept: List[str] = []
    said: List[str] = []
    scaled_rope: dict = {}  # id(a rotary module's config) -> its scaled rope parameters
    rotary: List[_Change] = []  # the changes of rotary modules

    def submodule_change(name: str, replacement: Any, what: str) -> _Change:
        if not name:
            raise ValueError(f"patch takes the model holding a {what}, not the module itself")
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        replacement.train(getattr(parent, child).training)  # the flag of the module it replaces
        return _Change(what, parent, child, replacement, module=True)

    for name, module in list(model.named_modules()):
        cls = type(module).__name__
        why = _already_patched(name, module)
        if why is not None:
            raise ValueError(f"posenc cannot patch this {type(model).__name__}: {why}")
        if _is_rotary(module):
            # with scaling=, the module's own tables are read first (its head
            # dimension, layout and sections, checked), their notes dropped
            own_notes = notes if req is None else []
            try:
                replacement, what = _rotary_replacement(
                    name or cls, module, torch, own_notes, exact
                )
            except ValueError:
                # tables holding each pair's angle once (GPT-OSS's)
                half = _half_width_rotary(name or cls, module, torch, own_notes, exact)
                if half is None:
                    raise
                replacement, what = half
            if replacement is None:
                kept.append(what)
                continue
            _rounding_apart_only(name or cls, module, replacement, torch)
            if req is not None:
                replacement, what, scaled = _scaled_rotary(
                    name or cls, module, replacement, req, torch, notes, said
                )
                scaled_rope[id(module.config)] = scaled.config.rope_parameters
            if getattr(replacement, "config", None) is not None and not isinstance(
                replacement,
                RotaryEmbedding,  # which keeps its own copy
            ):
                # the tables of the config as it is now, as transformers' module
                # holds its frequencies (a config edited later moves neither)
                replacement.config = copy.deepcopy(replacement.config)
            changes.append(submodule_change(name, replacement, what))
            rotary.append(changes[-1])
        elif _is_sincos_table(module):
            if req is not None:
                raise ValueError(
                    f"posenc cannot patch this {type(model).__name__} with scaling=: {name} "
                    f"({cls}) is a table of sin and cos made with base 10000 and no rope "
                    "parameters; scaling= applies to rotary modules built from rope parameters"
                )
            sincos = _sincos_change(name or cls, module, torch, notes, exact)
            if sincos is None:
                kept.append(name)
                continue
            changes.append(submodule_change(name, *sincos))
        elif cls == "DisentangledSelfAttention" and type(module).__module__.endswith(
            "deberta_v2.modeling_deberta_v2"
        ):
            if getattr(module, "relative_attention", False):
                changes.append(_deberta_change(name or cls, module, torch))
        elif cls == "XLNetRelativeAttention" and callable(getattr(module, "rel_attn_core", None)):
            changes.append(_xlnet_change(name or cls, module, torch))
        elif cls.startswith("Bloom") and callable(getattr(module, "build_alibi_tensor", None)):
            changes.append(_bloom_change(name or cls, module, torch, exact, notes))
        elif cls.startswith("Mpt") and callable(getattr(module, "build_mpt_alibi_tensor", None)):
            changes.append(_mpt_change(name or cls, module, torch, exact, notes))
        elif (
            getattr(module, "has_relative_attention_bias", False)
            and callable(getattr(module, "compute_bias", None))
            and hasattr(module, "relative_attention_bias")
            and hasattr(module, "relative_attention_max_distance")
        ):
            changes.append(_t5_change(name or cls, module, torch))
        elif "alibi" in cls.lower() or "RotaryEmbedding" in cls or "RelativePosition" in cls:
            found.append(f"{name} ({cls})")
        elif cls.startswith("Falcon") and getattr(module, "use_alibi", False):
            changes.append(_falcon_change(name or cls, module, torch, exact, notes))
    if found or not (changes or kept):
        # nothing, or a part posenc does not patch: never a half-patched model
        what = ", ".join(dict.fromkeys(found)) or "no position encoding posenc knows"
        raise ValueError(
            f"posenc cannot patch this {type(model).__name__}: found {what}. "
            f"Supported: {_supported_text()}"
        )
    if req is not None:
        # the parts scaling= does not apply to
        other = [c.what for c in changes if not any(c is r for r in rotary)]
        if other or not said:
            raise ValueError(
                f"posenc cannot patch this {type(model).__name__} with scaling=: it changes "
                "the tables of rotary modules, and this model's positions are not rotary ("
                + ", ".join(other or ["no rotary module"])
                + ")"
            )
        for name, module in model.named_modules():
            # the attention whose constructor multiplies its scale by YaRN's
            # mscale from the rope parameters (DeepSeek-V2/V3's yarn_apply_mscale)
            init = getattr(type(module).__init__, "__code__", None)
            if init is not None and "yarn_apply_mscale" in init.co_names:
                change = _attention_scale_change(name or type(module).__name__, module, scaled_rope)
                if change is not None:
                    changes.append(change)
    return changes, notes, said


def patch(model: Any, *, exact: bool = True, scaling: Any = None) -> Any:
    """Make `model` (this instance) compute its positions with posenc.

    With ``exact=False``, transformers' rounding is reproduced where it
    differs from the exact values: BLOOM's, MPT's and Falcon's ALiBi are
    rounded as transformers rounds them (float32 slopes and products for
    BLOOM and MPT, bfloat16 for Falcon: the same bits), and a rotary module
    whose tables transformers rounds otherwise (a bfloat16 ``inv_freq``,
    float32 angles in a float64 model) is left in place.

    With `scaling`, the rotary modules compute their tables with that
    context-extension family instead of the one their config names: the
    numbers of the same weights in a model whose config carries `scaling`
    (transformers' own model built from such a config is the witness).
    `scaling` is a short string of the table below, a ``rope_parameters``
    dict (``{"rope_type": "yarn", "factor": 4.0, ...}``; one dict per layer
    type, ``{"full_attention": {...}}``, scales those layer types only), or a
    transformers config (its rope parameters, and its
    ``max_position_embeddings`` and ``original_max_position_embeddings``, as
    transformers reads them; of a composite config, pass its
    ``text_config``).

    ============================  ===============================================
    ``scaling=``                  the rope parameters it means; what is inferred
    ============================  ===============================================
    ``"none"``                    ``{"rope_type": "default"}``
    ``"linear:F"``                ``{"rope_type": "linear", "factor": F}``
    ``"dynamic:F"``, ``"ntk:F"``  ``{"rope_type": "dynamic", "factor": F}``;
                                  grows past the model's
                                  ``max_position_embeddings``
    ``"ntk_alpha:A"``             ``{"rope_type": "ntk_alpha", "alpha": A}``
    ``"yarn:F"``                  ``{"rope_type": "yarn", "factor": F}``; (b),
                                  attention_factor ``0.1 ln(F) + 1``
                                  (``mscale`` over ``mscale_all_dim`` where
                                  both are given), beta_fast 32, beta_slow 1
    ``"llama3:F"``                ``{"rope_type": "llama3", "factor": F,
                                  "low_freq_factor": 1, "high_freq_factor":
                                  4}``; (b)
    a dict only                   ``{"rope_type": "longrope", "short_factor":
                                  [...], "long_factor": [...]}``; (b), factor
                                  ``max_position_embeddings / (b)`` where not
                                  given, attention_factor ``sqrt(1 +
                                  ln(factor) / ln(b))``, the long factors once
                                  positions pass (b)
    ``"resonance"``               ``{"rope_type": "resonance"}``
    ============================  ===============================================

    Every family infers (a): ``rope_theta``, ``partial_rotary_factor`` (the
    rotary dimension) and M-RoPE's ``mrope_section``, from the module's own
    rope parameters (a dict stating another ``partial_rotary_factor`` or
    ``mrope_section`` is refused: those choose which features rotate, not
    the context), and ``head_dim`` from its config.  (b):
    ``original_max_position_embeddings``,
    the config's own attribute where it has one (Phi-3's; transformers reads
    it before the dict's, and a dict stating another value is refused), else
    the model's ``max_position_embeddings``.  patch says in one warning line
    what it inferred.  A flat dict on a model with rope parameters per layer
    type scales every layer type but ``sliding_attention`` (as transformers'
    Gemma 3 config puts a flat ``rope_scaling`` on its full-attention layers).
    A model whose attention multiplies by YaRN's ``mscale`` itself
    (DeepSeek-V2/V3's ``yarn_apply_mscale``) gets its attention's scale set
    as the scaled rope parameters give it; elsewhere the attention factor
    is in cos and sin, as transformers puts it.  Before anything is
    changed, each scaled module is checked against transformers' own module
    of its class built from the scaled config, where transformers has the
    family.  The model's config is never changed (each rotary module reads
    a copy), and :func:`unpatch` restores the model exactly.  A dict key
    that the family does not read is refused (a misspelt key would be
    ignored), and so is ``max_position_embeddings`` in a dict (transformers
    reads it from the model's config).

    Returns `model`.  Raises ValueError, leaving the model as it was, when
    it holds nothing posenc can patch or a module whose numbers posenc would
    not reproduce, or is patched already (or holds a patched part), or when
    `scaling` cannot apply (a key the family requires missing, named; a
    model whose positions are not rotary; with ``exact=False``); TypeError
    when `model` is not a torch module or `scaling` not a string, dict or
    config.
    """
    return _prepare(model, exact, scaling, 3).apply()


class PreparedPatch:
    """A patch of one model built and checked, not yet applied: the result
    of :func:`prepare`.

    ``apply()`` patches the model (as :func:`patch` would) and returns it;
    after :func:`unpatch`, it may be applied again: the same replacement
    modules, with whatever state they hold (a dynamic family's grown tables),
    as if the model had stayed patched.  It refuses, with a ValueError, a
    model that is patched already or whose parts are no longer those it was
    prepared from.
    """

    def __init__(self, model: Any, changes: List[_Change], label: str) -> None:
        self.model = model
        self._changes = changes
        self.label = label

    def __repr__(self) -> str:
        return f"PreparedPatch({type(self.model).__name__}, {self.label})"

    @property
    def parts(self) -> List[str]:
        """What :meth:`apply` replaces (as :func:`patched_parts` names them)."""
        return [c.what for c in self._changes]

    def apply(self) -> Any:
        """Patch the model; returns it."""
        model = self.model
        if _STATE in model.__dict__:
            raise ValueError(f"this {type(model).__name__} is already patched: unpatch it first")
        for change in self._changes:
            if not change.in_place():
                raise ValueError(
                    f"this {type(model).__name__} has changed since the patch was prepared "
                    f"({change.what} is no longer the part it replaces): prepare it again"
                )
        for change in self._changes:
            change.apply()
        model.__dict__[_STATE] = list(self._changes)
        return model


def prepare(model: Any, *, exact: bool = True, scaling: Any = None) -> PreparedPatch:
    """Build and check the patch of `model` without applying it.

    Everything :func:`patch` does before it changes the model: the
    replacements built and checked against the parts they replace, a bad
    `scaling` refused, what was inferred said once.  ``prepare(model,
    scaling=m).apply()`` is ``patch(model, scaling=m)``.  Preparing several
    methods first refuses a bad one before any of them runs, and applying
    each in turn (unpatching in between) builds nothing twice: what
    :func:`posenc.context.compare` does.  `exact` and `scaling` as
    :func:`patch` takes them, and the same errors.
    """
    return _prepare(model, exact, scaling, 3)


def _prepare(model: Any, exact: Any, scaling: Any, stacklevel: int) -> PreparedPatch:
    """:func:`prepare`, its warnings attributed `stacklevel` frames up."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(exact, bool):
        raise TypeError(f"exact must be a bool, got {type(exact).__name__}")
    req = None if scaling is None else _hf_scaling.request(scaling)
    if req is not None and not exact:
        raise ValueError(
            "exact=False keeps transformers' rotary modules where they round otherwise, and "
            "scaling= replaces them: pass one or the other"
        )
    if _STATE in model.__dict__:
        raise ValueError(f"this {type(model).__name__} is already patched: unpatch it first")
    changes, notes, said = _plan(model, torch, exact, req)
    if said:
        assert req is not None
        warnings.warn(
            f"posenc.hf.patch: scaling {req.label} inferred for " + "; for ".join(said),
            UserWarning,
            stacklevel=stacklevel,
        )
    if notes:
        warnings.warn(
            "posenc.hf.patch: the patched model is more exact than transformers here: "
            + "; ".join(notes),
            UserWarning,
            stacklevel=stacklevel,
        )
    return PreparedPatch(model, changes, "exact" if req is None else req.label)


def unpatch(model: Any) -> Any:
    """Restore a model patched by :func:`patch` exactly; returns it."""
    changes = model.__dict__.pop(_STATE, None) if hasattr(model, "__dict__") else None
    if changes is None:
        raise ValueError(f"this {type(model).__name__} is not patched by posenc.hf.patch")
    for change in reversed(changes):
        change.undo()
    return model


def patched_parts(model: Any) -> List[str]:
    """What :func:`patch` replaced in `model` (empty if not patched)."""
    return [c.what for c in model.__dict__.get(_STATE, [])]


@contextlib.contextmanager
def patched(model: Any, *, exact: bool = True, scaling: Any = None) -> Iterator[Any]:
    """``with patched(model):`` the model patched inside, restored after
    (`exact` and `scaling` as :func:`patch` takes them)."""
    patch(model, exact=exact, scaling=scaling)
    try:
        yield model
    finally:
        unpatch(model)
