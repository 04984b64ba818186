"""The PyTorch code the benchmarks time posenc against: each function
builds what it needs (cos/sin tables, configs) outside the timed call and
returns the callable to time, written as transformers, flash-attn or the
authors write it."""

from __future__ import annotations

import numpy as np
from common import _torch_of, torch


def _inv_freq(dim):
    """RoPE's float32 frequencies ``10000 ** (-2i / dim)`` as transformers computes them."""
    return 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def _rotate_half(t):
    """transformers' rotate_half: the halves (t1, t2) of the last axis made (-t2, t1)."""
    t1, t2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
    return torch.cat((-t2, t1), dim=-1)


def _llama_cos_sin(n, dim, tdtype, start=0):
    """LlamaRotaryEmbedding's cos and sin (n, dim) of the positions start..start+n-1."""
    freqs = (start + torch.arange(n, dtype=torch.float32))[:, None] * _inv_freq(dim)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(tdtype), emb.sin().to(tdtype)


def _rope_torch(x, seq_axis):
    """transformers' formulation, cos/sin cached outside the timed call:
    ``q * cos + rotate_half(q) * sin`` (LlamaRotaryEmbedding + apply_rotary_pos_emb)."""
    if torch is None:
        return None
    n, dim = x.shape[seq_axis], x.shape[-1]
    shape = (1, 1, n, dim) if seq_axis == -2 else (1, n, 1, dim)
    cos, sin = (t.reshape(shape) for t in _llama_cos_sin(n, dim, getattr(torch, x.dtype.name)))
    q = _torch_of(x)
    return lambda: q * cos + _rotate_half(q) * sin


def _hf_mrope(x, ids, sections):
    """transformers' Qwen2-VL text attention: cos/sin from
    Qwen2VLRotaryEmbedding (sections recomposed) made once outside the timed
    call, as a forward pass shares them among its layers, then its
    apply_rotary_pos_emb on q."""
    if torch is None:
        return None
    try:
        from transformers import Qwen2VLTextConfig
        from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen
    except ImportError:  # pragma: no cover - depends on the machine
        return None
    dim = x.shape[-1]
    config = Qwen2VLTextConfig(
        hidden_size=dim * 2,
        num_attention_heads=2,
        num_key_value_heads=1,
        rope_scaling={"type": "mrope", "mrope_section": list(sections), "rope_theta": 10000.0},
    )
    q = _torch_of(x)
    cos, sin = qwen.Qwen2VLRotaryEmbedding(config)(q, torch.from_numpy(ids))
    return lambda: qwen.apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=1)[0]


def _hf_vision(x, ids):
    """transformers' Qwen2-VL vision tower: Qwen2VLVisionRotaryEmbedding's
    cos/sin made once outside the timed call, then apply_rotary_pos_emb_vision
    on q."""
    if torch is None:
        return None
    try:
        from transformers import Qwen2VLVisionConfig
        from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen
    except ImportError:  # pragma: no cover - depends on the machine
        return None
    heads, dim = x.shape[-2:]
    config = Qwen2VLVisionConfig(embed_dim=heads * dim, num_heads=heads, depth=1)
    q = _torch_of(x)
    cos, sin = qwen.Qwen2VLVisionRotaryEmbedding(config)(q, torch.from_numpy(ids.T.copy()))
    return lambda: qwen.apply_rotary_pos_emb_vision(q, q, cos, sin)[0]


def _xpos_tables_torch(n, dim, tdtype, centre, scale_base=512.0):
    """cos, sin (n, dim/2) in float32 and the xPos scale, as flash-attn's
    RotaryEmbedding(scale_base=...) caches them."""
    t = torch.arange(n, dtype=torch.float32)
    freqs = torch.outer(t, _inv_freq(dim))
    zeta = (torch.arange(0, dim, 2, dtype=torch.float32) + 0.4 * dim) / (1.4 * dim)
    scale = zeta ** ((t - centre) / scale_base)[:, None]
    return freqs, scale


def _xpos_torch_cached(x, centre):
    """flash-attn's torch path with its cached xPos tables (half layout):
    ``q * cos_scaled + rotate_half(q) * sin_scaled``."""
    if torch is None:
        return None
    n, dim = x.shape[-2], x.shape[-1]
    tdtype = getattr(torch, x.dtype.name)
    freqs, scale = _xpos_tables_torch(n, dim, tdtype, centre)
    cos = torch.cat([torch.cos(freqs) * scale] * 2, dim=-1).to(tdtype)
    sin = torch.cat([torch.sin(freqs) * scale] * 2, dim=-1).to(tdtype)
    q = _torch_of(x)
    return lambda: q * cos + _rotate_half(q) * sin


def _xpos_torch_lucidrains(x, centre):
    """rotary-embedding-torch's apply_rotary_emb with use_xpos (interleaved
    pairs; freqs and scale cached, cos and sin taken in the call, as it
    does): ``t * freqs.cos() * scale + rotate_every_two(t) * freqs.sin() * scale``."""
    if torch is None:
        return None
    n, dim = x.shape[-2], x.shape[-1]
    tdtype = getattr(torch, x.dtype.name)
    freqs, scale = _xpos_tables_torch(n, dim, tdtype, centre)
    freqs = freqs.repeat_interleave(2, dim=-1)
    scale = scale.repeat_interleave(2, dim=-1).to(tdtype)
    q = _torch_of(x)

    def rotate_every_two(t):
        t = t.unflatten(-1, (-1, 2))
        return torch.stack((-t[..., 1], t[..., 0]), dim=-1).flatten(-2)

    return lambda: q * freqs.cos() * scale + rotate_every_two(q) * freqs.sin() * scale


def _deepseek_torch(x):
    """transformers' apply_rotary_pos_emb_interleave, cos/sin cached (the
    first half of the full tables, as it slices them)."""
    if torch is None:
        return None
    n, dim = x.shape[-2], x.shape[-1]
    freqs = torch.arange(n, dtype=torch.float32)[:, None] * _inv_freq(dim)
    tdtype = getattr(torch, x.dtype.name)
    cos, sin = freqs.cos().to(tdtype), freqs.sin().to(tdtype)
    q = _torch_of(x)

    def rotate():
        q1, q2 = q[..., 0::2], q[..., 1::2]
        return torch.cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], dim=-1)

    return rotate


def _hf_alibi(n_heads, q_len, k_len):
    """transformers' ALiBi for a causal model: BLOOM's build_alibi_tensor
    (slope * key position, one row per head) broadcast over the queries, plus
    the causal mask."""
    closest = 2 ** int(np.floor(np.log2(n_heads)))
    base = torch.tensor(2 ** (-(2 ** -(np.log2(closest) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != n_heads:
        extra = torch.tensor(2 ** (-(2 ** -(np.log2(2 * closest) - 3))), dtype=torch.float32)
        rest = torch.arange(1, 1 + 2 * (n_heads - closest), 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra, rest)])
    mask = torch.ones(1, k_len, dtype=torch.long)
    positions = ((mask.cumsum(dim=-1) - 1) * mask)[:, None, :]
    alibi = (slopes[..., None] * positions).reshape(n_heads, 1, k_len)
    causal = torch.full((q_len, k_len), float("-inf")).triu(k_len - q_len + 1)
    return alibi, causal


def _hf_t5_bias(table, q_len, k_len):
    """transformers' T5Attention.compute_bias: bucket the (q, k) relative
    positions (the queries the newest q of the k positions), look the
    buckets up, heads first."""
    from transformers.models.t5.modeling_t5 import T5Attention

    context = torch.arange(k_len - q_len, k_len, dtype=torch.long)[:, None]
    memory = torch.arange(k_len, dtype=torch.long)[None, :]
    buckets = T5Attention._relative_position_bucket(
        memory - context, bidirectional=True, num_buckets=table.shape[0], max_distance=128
    )
    return torch.nn.functional.embedding(buckets, table).permute([2, 0, 1])


def _hf_rope_step(q, position):
    """transformers' formula on the tensor q (batch, heads, seq, dim), with
    the cos/sin of `position` (+ arange(seq)) computed beforehand, as a
    KV-cache step finds them."""
    cos, sin = _llama_cos_sin(q.shape[-2], q.shape[-1], q.dtype, start=position)
    return lambda q: q * cos + _rotate_half(q) * sin
