"""One call for a loaded transformers model: its positions computed by posenc.

``patch(model)`` makes that model instance (not its class, not its modeling
module) compute its positions with posenc; ``unpatch(model)`` restores it
exactly; ``with patched(model): ...`` does both.  What is patched:

- rotary modules built from transformers' rope init functions (the
  ``*RotaryEmbedding`` modules holding ``inv_freq`` and ``rope_type``, per
  layer type too): replaced by :class:`posenc.torch.RotaryEmbedding` built
  from the module's own config;
- BLOOM's ALiBi (``BloomModel.build_alibi_tensor``), MPT's
  (``MptModel.build_mpt_alibi_tensor``) and Falcon's (the model instance
  gets a ``forward`` of its own: the class's code reading posenc's ALiBi);
- T5, MT5 and UMT5's relative bias (``compute_bias`` of the attention
  modules that hold a table);
- DeBERTa-v2 and v3's relative attention (``disentangled_attention_bias``
  of each attention module: c2p and p2c gathered by posenc);
- XLNet's relative attention (``rel_attn_core`` of each attention module:
  the position term shifted by posenc).

Every replacement is built and checked against the module it replaces (on
a few positions, before anything is changed); a model posenc cannot patch
(nothing it knows, or a module whose numbers it would not reproduce) gets a
ValueError naming what it found and what is supported, and is left as it
was.  Where transformers computes a quantity less exactly than posenc (a
bfloat16 ``inv_freq`` after ``model.to(torch.bfloat16)``, angles formed in
float32 in a float64 model), the patched model is exact, and ``patch``
says so once with a warning naming the quantity and the size of the
difference measured on those positions.

transformers is imported only by the functions of this module, when used.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import types
import warnings
from typing import Any, Iterator, List, Optional, Tuple

__all__ = ["SUPPORTED", "patch", "patched", "patched_parts", "unpatch"]

SUPPORTED = (
    "rotary modules built from transformers' rope init functions (Llama, Mistral, Qwen2/3, "
    "Gemma 1-3, Phi-3, GPT-NeoX, ... : *RotaryEmbedding with inv_freq and rope_type)",
    "BLOOM's ALiBi (BloomModel.build_alibi_tensor)",
    "MPT's ALiBi (MptModel.build_mpt_alibi_tensor)",
    "Falcon's ALiBi (FalconModel with alibi=True)",
    "T5 / MT5 / UMT5 relative attention bias (compute_bias of the attention modules)",
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

    def apply(self) -> None:
        if self.module:
            setattr(self.obj, self.attr, self.value)
        else:
            self.obj.__dict__[self.attr] = self.value

    def undo(self) -> None:
        if self.module:
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
    from .rope_scaling import _layer_config
    from .torch import _config_value

    config = _layer_config(config, layer_type)
    dims = []
    head_dim = _config_value(config, "head_dim")
    if isinstance(head_dim, int):
        dims.append(head_dim)
    heads = _config_value(config, "num_attention_heads")
    hidden = _config_value(config, "hidden_size")
    if isinstance(hidden, int) and isinstance(heads, int) and heads:
        dims.append(hidden // heads)
    for key in ("qk_rope_head_dim", "rotary_dim"):
        value = _config_value(config, key)
        if isinstance(value, int):
            dims.append(value)
    return [d for d in dict.fromkeys(dims) if d > 0]


def _probe_rotary(
    original: Any, layer_type: Optional[str], torch: Any
) -> Tuple[Any, Any, Any, Any]:
    """(x, position ids, cos, sin) of a copy of `original` on the probe
    positions (the model's own module keeps its state): three rows of
    different positions for an M-RoPE module (one holding ``mrope_section``,
    its config's or its class's own), so that the rows' sections are
    checked; on the CPU, from a module built anew from its config, for one
    on the meta device (which has no values to compare)."""
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
        twin = copy.deepcopy(original)
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


# -- ALiBi ------------------------------------------------------------------------


def _bloom_change(name: str, module: Any, torch: Any) -> _Change:
    from .torch import ALiBi

    alibi = ALiBi(module.num_heads)

    def build_alibi_tensor(attention_mask: Any, num_heads: int, dtype: Any) -> Any:
        if num_heads != alibi.n_heads:
            raise ValueError(f"num_heads is {num_heads}, the patched model has {alibi.n_heads}")
        bias = alibi.key_bias(attention_mask, dtype=dtype)  # (batch, heads, 1, k)
        return bias.reshape(-1, 1, bias.shape[-1])

    original = module.build_alibi_tensor
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    for dtype in (torch.float32, torch.bfloat16):
        diff = _max_diff(build_alibi_tensor(mask, module.num_heads, dtype),
                         original(mask, module.num_heads, dtype))  # fmt: skip
        if diff != 0.0:
            raise ValueError(f"{name}: posenc's ALiBi differs from BLOOM's by {diff:.3g}")
    return _instance_attr_change(
        module, "build_alibi_tensor", build_alibi_tensor, f"{name} (BLOOM ALiBi)"
    )


def _mpt_change(name: str, module: Any, torch: Any) -> _Change:
    import numpy as np

    from .torch import ALiBi

    n = module.num_heads
    # MPT's slopes: 2 ** -(8 (i + 1) / n2) for the power of two n2 >= n, the
    # odd-numbered ones first when n is not a power of two
    n2 = 1 << (n - 1).bit_length()
    slopes = 2.0 ** (-(np.arange(1, n2 + 1, dtype=np.float64) * (8.0 / n2)))
    if n2 != n:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:n]
    alibi = ALiBi(n, slopes=slopes)
    model_dtype = next(iter(module.parameters())).dtype

    def build_mpt_alibi_tensor(
        num_heads: int, sequence_length: int, alibi_bias_max: float = 8, device: Any = None
    ) -> Any:
        if num_heads != n or alibi_bias_max != 8:
            raise ValueError(
                f"the patched MPT ALiBi has {n} heads and alibi_bias_max 8, got {num_heads} "
                f"and {alibi_bias_max}"
            )
        # float32 as transformers gives it, float64 in a float64 model
        dtype = torch.float64 if model_dtype == torch.float64 else torch.float32
        return alibi.bias(1, sequence_length, dtype=dtype, device=device or "cpu")

    original = module.build_mpt_alibi_tensor
    mine = build_mpt_alibi_tensor(n, 8)
    theirs = original(n, 8)
    if mine.shape != theirs.shape or _max_diff(mine, theirs) > 1e-6:
        raise ValueError(f"{name}: posenc's ALiBi differs from MPT's")
    return _instance_attr_change(
        module, "build_mpt_alibi_tensor", build_mpt_alibi_tensor, f"{name} (MPT ALiBi)"
    )


def _falcon_change(name: str, module: Any, torch: Any, exact: bool, notes: List[str]) -> _Change:
    """Falcon's model calls its modeling file's ``build_alibi_tensor``: this
    instance gets its own ``forward``, the class's code with posenc's ALiBi
    in that name (the class, its module and other instances untouched)."""
    import sys

    from .torch import ALiBi

    alibi = ALiBi(module.num_heads)
    rounded = ALiBi(module.num_heads, slopes=alibi.slopes.to(torch.bfloat16).double().tolist())

    def build_alibi_tensor(attention_mask: Any, num_heads: int, dtype: Any) -> Any:
        if num_heads != alibi.n_heads:
            raise ValueError(f"num_heads is {num_heads}, the patched model has {alibi.n_heads}")
        if exact:
            bias = alibi.key_bias(attention_mask, dtype=dtype)
        else:  # transformers' rounding: bfloat16 slopes times positions, in bfloat16
            bias = rounded.key_bias(attention_mask, dtype=torch.bfloat16).to(dtype)
        return bias.reshape(-1, 1, bias.shape[-1])

    outer = type(module).forward
    chain = [outer]
    while hasattr(chain[-1], "__wrapped__"):
        chain.append(chain[-1].__wrapped__)
    inner = chain[-1]
    home = sys.modules[inner.__module__]
    if getattr(home, "build_alibi_tensor", None) is None or "build_alibi_tensor" not in (
        inner.__code__.co_names
    ):
        raise ValueError(f"{name}: its forward does not call build_alibi_tensor")
    original = home.build_alibi_tensor
    mask = torch.ones(2, 1024, dtype=torch.long)
    mask[0, :2] = 0
    theirs = original(mask, module.num_heads, torch.float32)
    mine = build_alibi_tensor(mask, module.num_heads, torch.float32)
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
            f"positions) in every dtype, {diff:.3g} off the exact bias at positions 0..1023; the "
            "patched model uses the exact bias (patch(model, exact=False) rounds it as "
            "transformers does)"
        )
    # the innermost function again, reading posenc's build_alibi_tensor
    scope = dict(inner.__globals__)
    scope["build_alibi_tensor"] = build_alibi_tensor
    fn: Any = types.FunctionType(
        inner.__code__, scope, inner.__name__, inner.__defaults__, inner.__closure__
    )
    fn.__kwdefaults__ = inner.__kwdefaults__
    fn = functools.update_wrapper(fn, inner)
    # and each decorator's wrapper around it, its cell now holding the new one
    for wrapper, wrapped in zip(reversed(chain[:-1]), reversed(chain[1:])):
        cells = tuple(
            types.CellType(fn) if cell.cell_contents is wrapped else cell
            for cell in (wrapper.__closure__ or ())
        )
        if not any(c.cell_contents is fn for c in cells):
            raise ValueError(f"{name}: cannot rebuild the decorators of its forward")
        new = types.FunctionType(
            wrapper.__code__, wrapper.__globals__, wrapper.__name__, wrapper.__defaults__, cells
        )
        new.__kwdefaults__ = wrapper.__kwdefaults__
        fn = functools.update_wrapper(new, fn)
    return _instance_attr_change(
        module, "forward", types.MethodType(fn, module), f"{name} (Falcon ALiBi)"
    )


def _t5_change(name: str, module: Any, torch: Any) -> _Change:
    from .torch import T5RelativeBias

    try:
        return _t5_checked(name, module, torch, T5RelativeBias)
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(name):
            raise
        raise ValueError(f"{name} ({type(module).__name__}): {exc}") from exc


def _deberta_bias(
    self: Any,
    query_layer: Any,
    key_layer: Any,
    relative_pos: Any,
    rel_embeddings: Any,
    scale_factor: Any,
) -> Any:
    """DeBERTa-v2's ``DisentangledSelfAttention.disentangled_attention_bias``
    by posenc (bound to the attention module): the relative embeddings
    projected as transformers projects them, the gather by distance and the
    scaling in posenc's kernels.  ``relative_pos`` is the model's own
    (``build_relative_position`` with the module's buckets), which posenc
    forms itself."""
    from .torch import DebertaRelativeBias

    heads = self.num_attention_heads
    span = self.pos_ebd_size
    rel = rel_embeddings[: 2 * span, :].unsqueeze(0)
    pos_key = pos_query = None
    if "c2p" in self.pos_att_type:
        proj = self.key_proj if self.share_att_key else self.pos_key_proj
        pos_key = self.transpose_for_scores(proj(rel), heads)  # (heads, 2 span, d)
    if "p2c" in self.pos_att_type:
        proj = self.query_proj if self.share_att_key else self.pos_query_proj
        pos_query = self.transpose_for_scores(proj(rel), heads)
    term = DebertaRelativeBias(
        position_buckets=self.position_buckets,
        max_relative_positions=self.max_relative_positions,
        n_heads=heads,
        layout="(bh)sd",
    )
    return term(query_layer, key_layer, pos_key, pos_query, scale_factor=int(scale_factor))


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
    method = types.MethodType(_deberta_bias, module)
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
        lambda: method(q, k, None, rel, factor),
        lambda: module.disentangled_attention_bias(q, k, None, rel, factor),
        torch,
    )
    return _instance_attr_change(
        module, "disentangled_attention_bias", method, f"{name} (DeBERTa-v2 relative attention)"
    )


def _xlnet_rel_attn_core(
    self: Any,
    q_head: Any,
    k_head_h: Any,
    v_head_h: Any,
    k_head_r: Any,
    seg_mat: Any = None,
    attn_mask: Any = None,
    output_attentions: bool = False,
) -> Any:
    """XLNet's ``XLNetRelativeAttention.rel_attn_core`` with its position
    term ``(q + r_r_bias) . k_head_r`` shifted by posenc (no product of the
    full ``(q_len, k_len + q_len)`` grid, no shifted copy); the content and
    segment terms, the mask and the softmax as transformers writes them."""
    import torch

    from .torch import XLPositionTerm

    ac = torch.einsum("ibnd,jbnd->bnij", q_head + self.r_w_bias, k_head_h)
    # XLNet holds q and r as (len, batch, heads, head_dim): layout "ibnd"
    bd = XLPositionTerm(self.r_r_bias, layout="ibnd")(q_head, k_head_r, k_len=ac.shape[3])
    if seg_mat is None:
        ef: Any = 0
    else:
        ef = torch.einsum("ibnd,snd->ibns", q_head + self.r_s_bias, self.seg_embed)
        ef = torch.einsum("ijbs,ibns->bnij", seg_mat, ef)
    attn_score = (ac + bd + ef) * self.scale
    if attn_mask is not None:
        if attn_mask.dtype == torch.float16:
            attn_score = attn_score - 65500 * torch.einsum("ijbn->bnij", attn_mask)
        else:
            attn_score = attn_score - 1e30 * torch.einsum("ijbn->bnij", attn_mask)
    attn_prob = torch.nn.functional.softmax(attn_score, dim=3)
    attn_prob = self.dropout(attn_prob)
    attn_vec = torch.einsum("bnij,jbnd->ibnd", attn_prob, v_head_h)
    if output_attentions:
        return attn_vec, torch.einsum("bnij->ijbn", attn_prob)
    return attn_vec


def _xlnet_change(name: str, module: Any, torch: Any) -> _Change:
    method = types.MethodType(_xlnet_rel_attn_core, module)
    n, d = module.n_head, module.d_head
    g = torch.Generator().manual_seed(0)
    dtype = module.r_r_bias.dtype
    q_len, k_len, b = 5, 8, 2

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(dtype)

    q, kh, vh = rand(q_len, b, n, d), rand(k_len, b, n, d), rand(k_len, b, n, d)
    kr = rand(k_len + q_len, b, n, d)
    seg = torch.nn.functional.one_hot(torch.randint(0, 2, (q_len, k_len, b), generator=g), 2)
    seg = seg.to(dtype)
    was = module.training
    module.eval()
    try:
        _check_same(
            name,
            module,
            "XLNet attention",
            lambda: method(q, kh, vh, kr, seg_mat=seg),
            lambda: module.rel_attn_core(q, kh, vh, kr, seg_mat=seg),
            torch,
        )
    finally:
        module.train(was)
    return _instance_attr_change(
        module, "rel_attn_core", method, f"{name} (XLNet relative attention)"
    )


def _t5_compute_bias(
    bias: Any, query_length: int, key_length: int, device: Any = None, past_seen_tokens: int = 0
) -> Any:
    """T5Attention.compute_bias, by posenc (bound to a T5RelativeBias)."""
    out = bias(int(query_length), int(key_length), q_offset=int(past_seen_tokens))
    return out if device is None else out.to(device)


def _t5_checked(name: str, module: Any, torch: Any, T5RelativeBias: Any) -> _Change:
    bias = T5RelativeBias(
        bidirectional=not module.is_decoder,
        max_distance=module.relative_attention_max_distance,
        weight=module.relative_attention_bias.weight,
    )
    if module.relative_attention_bias.weight.shape[0] != module.relative_attention_num_buckets:
        raise ValueError(f"{name}: its table's rows are not its relative_attention_num_buckets")

    # a method of the bias module (holding the model's own table): a deep
    # copy of the model copies it with the copy's table
    compute_bias = types.MethodType(_t5_compute_bias, bias)
    original = module.compute_bias
    with torch.no_grad():
        for args in ((5, 7, None, 0), (1, 9, None, 8)):
            diff = _max_diff(compute_bias(*args), original(*args))
            if diff != 0.0:
                raise ValueError(f"{name}: posenc's T5 bias differs from transformers' by {diff}")
    return _instance_attr_change(module, "compute_bias", compute_bias, f"{name} (T5 bias)")


def _instance_attr_change(obj: Any, attr: str, value: Any, what: str) -> _Change:
    return _Change(what, obj, attr, value, module=False)


# -- the public calls --------------------------------------------------------------


def _plan(model: Any, torch: Any, exact: bool) -> Tuple[List[_Change], List[str]]:
    changes: List[_Change] = []
    notes: List[str] = []
    found: List[str] = []
    kept: List[str] = []
    for name, module in list(model.named_modules()):
        cls = type(module).__name__
        if _is_rotary(module):
            replacement, what = _rotary_replacement(name or cls, module, torch, notes, exact)
            if replacement is None:
                kept.append(what)
                continue

            if not name:
                raise ValueError("patch takes the model holding a rotary module, not the module")
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            changes.append(_Change(what, parent, child, replacement, module=True))
        elif cls == "DisentangledSelfAttention" and type(module).__module__.endswith(
            "deberta_v2.modeling_deberta_v2"
        ):
            if getattr(module, "relative_attention", False):
                changes.append(_deberta_change(name or cls, module, torch))
        elif cls == "XLNetRelativeAttention" and callable(getattr(module, "rel_attn_core", None)):
            changes.append(_xlnet_change(name or cls, module, torch))
        elif cls.startswith("Bloom") and callable(getattr(module, "build_alibi_tensor", None)):
            changes.append(_bloom_change(name or cls, module, torch))
        elif cls.startswith("Mpt") and callable(getattr(module, "build_mpt_alibi_tensor", None)):
            changes.append(_mpt_change(name or cls, module, torch))
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
    return changes, notes


def patch(model: Any, *, exact: bool = True) -> Any:
    """Make `model` (this instance) compute its positions with posenc.

    With ``exact=False``, transformers' rounding is reproduced where it
    differs from the exact values: Falcon's ALiBi is rounded as transformers
    rounds it (slopes and products in bfloat16), and a rotary module whose
    tables transformers rounds otherwise (a bfloat16 ``inv_freq``, float32
    angles in a float64 model) is left in place.

    Returns `model`.  Raises ValueError, leaving the model as it was, when
    it holds nothing posenc can patch or a module whose numbers posenc would
    not reproduce; TypeError when `model` is not a torch module.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if _STATE in model.__dict__:
        raise ValueError(f"this {type(model).__name__} is already patched: unpatch it first")
    changes, notes = _plan(model, torch, exact)
    for change in changes:
        change.apply()
    model.__dict__[_STATE] = changes
    if notes:
        warnings.warn(
            "posenc.hf.patch: the patched model is more exact than transformers here: "
            + "; ".join(notes),
            UserWarning,
            stacklevel=2,
        )
    return model


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
def patched(model: Any, *, exact: bool = True) -> Iterator[Any]:
    """``with patched(model):`` the model patched inside, restored after."""
    patch(model, exact=exact)
    try:
        yield model
    finally:
        unpatch(model)
