"""p-RoPE, Llama 4's chunked mask, complex-order embeddings and the sampled positions.

Each case is timed beside what its users would otherwise run: p-RoPE
(Gemma 4's ``proportional`` RoPE) beside transformers' own rotation with the
cos/sin of its frequencies (the unrotated pairs at angle 0); the chunked
causal mask of iRoPE's RoPE layers beside the comparison transformers makes
of chunk numbers and positions; complex-order embeddings beside the authors'
formula as torch ops (three gathers, the angle, cos and sin); the
randomized and PoSE position ids beside the NumPy twins of
``posenc.reference`` (one batch row at a time, as the papers state them).
The NumPy twins of the mask and the embeddings, one element or token at a
time, are left out.
"""

from __future__ import annotations

import numpy as np
from common import Case, copyto_of, have_transformers, torch

import posenc
from posenc import reference


def _p_rope_case(seq):
    shape, dim = (1, 16, seq, 128), 128
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    out = np.empty_like(x)
    scaling = {"rope_type": "proportional", "partial_rotary_factor": 0.25}
    rotate = None
    if have_transformers():
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        # cos/sin as transformers' rotary embedding forms them from the
        # family's inv_freq (zeros for the pairs left as they are)
        inv_freq = torch.from_numpy(posenc.rope_frequencies(dim, scaling=scaling)[0]).float()
        angles = torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos()[None], emb.sin()[None]
        tx = torch.from_numpy(x)

        def rotate():
            return apply_rotary_pos_emb(tx, tx, cos, sin)[0]

    return Case(
        name=f"apply_rope{shape} float32, p-RoPE (proportional, p = 0.25), out=",
        nbytes=x.nbytes,
        posenc=lambda: posenc.apply_rope(x, scaling=scaling, out=out),
        memory=copyto_of(shape, np.float32),
        numpy=lambda: reference.apply_rope(x, scaling=scaling),
        torch=rotate,
        note="torch: transformers' apply_rotary_pos_emb with the family's cos/sin made beforehand",
    )


def _chunked_mask_case(n, chunk):
    out_bytes = n * n

    def hf_mask():
        # transformers' chunked_causal_mask_function: same chunk, key not after query
        q = torch.arange(n)[:, None]
        k = torch.arange(n)[None, :]
        return (k <= q) & (q // chunk == k // chunk)

    return Case(
        name=f"chunked_causal_mask({n}, chunk_size={chunk}) bool",
        nbytes=out_bytes,
        posenc=lambda: posenc.chunked_causal_mask(n, chunk_size=chunk),
        memory=lambda: np.empty((n, n), np.bool_).fill(True),
        torch=hf_mask if torch is not None else None,
        note="memory: a new bool array filled; torch: transformers' chunk and causal "
        "comparisons; numpy: left out (one element at a time)",
    )


def _complex_order_case(batch, n, vocab, dim):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (batch, n))
    pos = np.broadcast_to(np.arange(n), (batch, n))
    amp, freq, phase = (rng.standard_normal((vocab, dim)).astype(np.float32) for _ in range(3))
    out_bytes = 2 * batch * n * dim * 4
    authors = None
    if torch is not None:
        t_ids, t_pos = torch.from_numpy(ids), torch.from_numpy(np.ascontiguousarray(pos))
        t_amp, t_freq, t_phase = map(torch.from_numpy, (amp, freq, phase))

        def authors():
            # the paper's embedding: amplitude, frequency and phase looked up
            # per token, the angle w pos + theta, its cos and sin times r
            angle = t_freq[t_ids] * t_pos[..., None].float() + t_phase[t_ids]
            r = t_amp[t_ids]
            return r * torch.cos(angle), r * torch.sin(angle)

    return Case(
        name=f"complex_order_embedding(({batch}, {n}) ids, vocab {vocab}, dim {dim}) float32",
        nbytes=out_bytes,
        posenc=lambda: posenc.complex_order_embedding(ids, pos, amp, freq, phase),
        memory=lambda: np.empty(out_bytes // 4, np.float32).fill(0.5),
        torch=authors,
        note="memory: the two outputs' bytes filled; numpy: left out (one token at a time)",
    )


def _sampler_cases(batch, n, span):
    def one_row_at_a_time(sample):
        rng = np.random.default_rng(0)
        return lambda: np.stack([sample(n, span, rng) for _ in range(batch)])

    return [
        Case(
            name=f"{name}(n={n}, {span}, batch={batch}) int64",
            nbytes=batch * n * 8,
            posenc=lambda fn=fn: fn(n, span, batch=batch, seed=0),
            numpy=one_row_at_a_time(getattr(reference, name)),
            note="numpy: posenc.reference's sampler, one batch row at a time",
        )
        for name, fn in (
            ("randomized_position_ids", posenc.randomized_position_ids),
            ("pose_position_ids", posenc.pose_position_ids),
        )
    ]


def newer_cases(quick):
    seq = 1024 if quick else 4096
    return [
        _p_rope_case(seq),
        _chunked_mask_case(seq, 1024 if quick else 2048),
        _complex_order_case(2 if quick else 8, 512, 32000, 256),
        *_sampler_cases(16 if quick else 64, 2048, 16384 if quick else 65536),
    ]
