"""The relative terms inside attention: their C gathers alone and whole."""

from __future__ import annotations

import numpy as np
from common import Case, _gemm_floor, _rmw_of, torch

import posenc
from posenc import reference


def _recorded_gathers(term):
    """The C gathers one call of `term` makes, to be replayed alone: each
    call's map, scores view and thread rule as the term made them, its
    products (made by BLAS a block at a time, just before, in the term) one
    buffer per shape, read again by every call of that shape, so in cache
    as the term's own are."""
    from posenc import _core, relative

    calls, buffers = [], {}
    real = _core.rel_gather_add

    def buffer(products):
        key = (products.shape, products.strides, products.dtype.str)
        if key not in buffers:  # the same layout (rows padded as the term pads them,
            # starting at the same byte of a cache line)
            row = products.strides[-2] // products.itemsize
            shape = products.shape[:-1] + (max(row, products.shape[-1]),)
            size = int(np.prod(shape))
            flat = np.full(size + 64, 0.5, products.dtype)
            skip = (products.ctypes.data - flat.ctypes.data) % 64 // products.itemsize
            base = flat[skip : skip + size].reshape(shape)
            buffers[key] = base[..., : products.shape[-1]]
        return buffers[key]

    def record(products, index, scores, by_key, single=False, *key_products):
        # key_products: a second term by key, in the same pass (DeBERTa's p2c)
        calls.append(
            (buffer(products), index, scores, by_key, single)
            + tuple(buffer(p) for p in key_products)
        )
        return real(products, index, scores, by_key, single, *key_products)

    relative._core.rel_gather_add = record
    try:
        term()
    finally:
        relative._core.rel_gather_add = real

    def replay(calls=calls):
        for call in calls:
            real(*call)

    return replay, calls


def _rel_case(name, scores, passes, term, numpy, torch_fn, note, floor=None):
    """Two cases for one term: its C gathers alone (replayed with their
    products in cache, as the term makes them) against the read-modify-write
    of the scores once for each of the `passes` terms added, and the whole
    term (BLAS products + gathers) against the NumPy twin and torch as
    transformers writes it, and against `floor` where given (else the same
    read-modify-write)."""
    rmw = _rmw_of(scores, passes)
    replay, calls = _recorded_gathers(term)
    return [
        Case(
            name=f"{name}: C gathers into scores {scores.shape}",
            nbytes=scores.nbytes,
            posenc=replay,
            memory=rmw,
            note=f"{len(calls)} gathers, products of about 2 MiB or less each, in cache; memory: "
            f"{passes} x the read-modify-write of the scores (uint64 += 0 over their bytes); "
            "target <= 1.3x",
        ),
        Case(
            name=f"{name}: whole term, scores=",
            nbytes=scores.nbytes,
            posenc=term,
            memory=floor or rmw,
            numpy=numpy,
            torch=torch_fn,
            note=note,
        ),
    ]


def relative_cases(quick):
    from posenc import relative as rel

    rng = np.random.default_rng(0)
    n, heads, d = (512, 12, 64) if quick else (1024, 16, 64)
    f4 = np.float32
    scores = rng.standard_normal((1, heads, n, n)).astype(f4)
    q = rng.standard_normal((1, heads, n, d)).astype(f4)
    k = rng.standard_normal((1, heads, n, d)).astype(f4)
    bias = rng.standard_normal((heads, d)).astype(f4)
    have_torch = torch is not None
    tq, tk, tscores = (torch.from_numpy(x) for x in (q, k, scores)) if have_torch else (None,) * 3
    cases = []

    # Transformer-XL / XLNet: the bi table of 2n rows, shifted by indexing
    r = rng.standard_normal((heads, 2 * n, d)).astype(f4)

    def torch_xl():
        # XLNet's rel_attn_core: bd = einsum(q + r_r_bias, k_head_r), rel_shift_bnij
        from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

        bd = torch.einsum("bnid,njd->bnij", tq + tbias[:, None], tr)
        return tscores.add_(XLNetRelativeAttention.rel_shift_bnij(bd, klen=n))

    tbias = torch.from_numpy(bias) if have_torch else None
    tr = torch.from_numpy(r) if have_torch else None
    cases += _rel_case(
        "xl_position_term",
        scores,
        1,
        lambda: rel.xl_position_term(q, r, bias=bias, scores=scores),
        lambda: reference.xl_position_term(q, r, bias=bias, scores=scores),
        torch_xl if have_torch else None,
        "memory: the GEMM of the products it needs (q @ k_len rows of r, float32) + the "
        "read-modify-write of the scores; target <= 1.3x. torch: einsum + XLNet's "
        "rel_shift_bnij + add",
        floor=_gemm_floor([(q, r[:, :n])], _rmw_of(scores)),
    )
    if have_torch:  # the same term on bfloat16 tensors, as a bfloat16 XLNet has them
        bq, br, bb, bs = (torch.from_numpy(x).bfloat16() for x in (q, r, bias, scores))

        def torch_xl_bf16():
            from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

            bd = torch.einsum("bnid,njd->bnij", bq + bb[:, None], br)
            return bs.add_(XLNetRelativeAttention.rel_shift_bnij(bd, klen=n))

        cases.append(
            Case(
                name=f"xl_position_term: bfloat16 tensors, scores {tuple(bs.shape)}",
                nbytes=bs.numel() * 2,
                posenc=lambda: rel.xl_position_term(bq, br, bias=bb, scores=bs),
                memory=_gemm_floor([(q, r[:, :n])], _rmw_of(bs.view(torch.int16).numpy())),
                torch=torch_xl_bf16,
                note="memory: the float32 GEMM of the products it needs + the read-modify-write "
                "of the bfloat16 scores; posenc: products in float32 from the bfloat16 values, "
                "rounded once into the scores; torch: XLNet's einsum in bfloat16 + rel_shift_bnij "
                "+ add",
            )
        )

    # DeBERTa v3: 256 buckets, 512 positions, c2p and p2c
    span = 256
    pk = rng.standard_normal((heads, 2 * span, d)).astype(f4)
    pq = rng.standard_normal((heads, 2 * span, d)).astype(f4)

    def torch_deberta():
        # DisentangledSelfAttention.disentangled_attention_bias (heads folded into the batch)
        from transformers.models.deberta_v2 import modeling_deberta_v2 as m

        ql, kl = tq.reshape(heads, n, d), tk.reshape(heads, n, d)
        rp = m.build_relative_position(ql, kl, bucket_size=span, max_position=512)
        scale = m.scaled_size_sqrt(ql, 3)
        pos = torch.clamp(rp + span, 0, 2 * span - 1).squeeze(0).expand(heads, n, n)
        c2p_att = torch.gather(torch.bmm(ql, tpk.transpose(-1, -2)), -1, pos)
        p2c_att = torch.gather(torch.bmm(kl, tpq.transpose(-1, -2)), -1, pos).transpose(-1, -2)
        return tscores.add_((c2p_att / scale + p2c_att / scale).reshape(1, heads, n, n))

    tpk = torch.from_numpy(pk) if have_torch else None
    tpq = torch.from_numpy(pq) if have_torch else None
    cases += _rel_case(
        "deberta_attention_bias (256 buckets)",
        scores,
        2,
        lambda: rel.deberta_attention_bias(
            q, k, pk, pq, position_buckets=span, max_relative_positions=512, scores=scores
        ),
        lambda: reference.deberta_attention_bias(
            q, k, pk, pq, position_buckets=span, max_relative_positions=512, scores=scores
        ),
        torch_deberta if have_torch else None,
        "memory: the GEMMs of the products it needs (q @ pos_key^T and k @ pos_query^T, "
        f"{2 * span} columns a head, float32) + the read-modify-write of the scores; target "
        "<= 1.3x. torch: transformers' c2p and p2c gathers + add",
        floor=_gemm_floor([(q, pk), (k, pq)], _rmw_of(scores)),
    )

    # Shaw et al.: clip 16, a table shared by the heads
    a_k = rng.standard_normal((33, d)).astype(f4)
    ta_k = torch.from_numpy(a_k) if have_torch else None

    def torch_shaw():
        # tensor2tensor's _relative_attention_inner: embeddings (n, n, d), then x_t z^T
        idx = torch.clamp(torch.arange(n)[None, :] - torch.arange(n)[:, None], -16, 16) + 16
        z = ta_k[idx]
        x_t = tq[0].permute(1, 0, 2)
        return tscores.add_(torch.matmul(x_t, z.transpose(1, 2)).permute(1, 0, 2)[None])

    cases += _rel_case(
        "shaw_key_term (clip 16)",
        scores,
        1,
        lambda: rel.shaw_key_term(q, a_k, max_distance=16, scores=scores),
        lambda: reference.shaw_key_term(q, a_k, max_distance=16, scores=scores),
        torch_shaw if have_torch else None,
        "torch: tensor2tensor's relations_keys gather + matmul",
    )

    # TENER: both shifted terms
    table = posenc.tener_relative_table(n, d)
    ttable = torch.from_numpy(table) if have_torch else None

    def torch_tener():
        # TENER's RelativeMultiHeadAttn: B_ + D_, _shift, E_, _transpose_shift
        bd = torch.einsum("bnqd,ld->bnql", tq + tbias[:, None], ttable)
        e = torch.einsum("bnqd,ld->bnql", tk, ttable)
        b_, h_, m_, _ = bd.shape
        pad = bd.new_zeros(b_, h_, m_, 1)
        bd = torch.cat([bd, pad], dim=-1).view(b_, h_, -1, m_)[:, :, :-1].view(b_, h_, m_, -1)
        e = torch.cat([e, pad], dim=-1).view(b_, h_, -1, m_)
        e = e.index_select(index=torch.arange(m_) * 2 + 1, dim=-2).transpose(-1, -2)
        return tscores.add_(bd[:, :, :, m_:] + e)

    cases += _rel_case(
        "tener_position_term",
        scores,
        2,
        lambda: rel.tener_position_term(q, k, table, v=bias, scores=scores),
        lambda: reference.tener_position_term(q, k, table, v=bias, scores=scores),
        torch_tener if have_torch else None,
        "memory: the GEMMs of the products it needs, one a score for each of its two terms "
        "((q + v) @ and k @ k_len rows of the table^T, float32) + the read-modify-write of the "
        "scores; target <= 1.3x. torch: TENER's einsums, _shift and _transpose_shift + add",
        floor=_gemm_floor([(q + bias[:, None], table[:n]), (k, table[:n])], _rmw_of(scores)),
    )

    # the terms that are not gathers: Shaw's relative values (a C scatter of
    # the weights by clipped distance, then one matmul), XLNet's content
    # bias and TUPE's untied positional bias (BLAS and one add)
    weights = rng.random((1, heads, n, n), dtype=f4)
    a_v = rng.standard_normal((33, d)).astype(f4)
    ta_v, tweights = (torch.from_numpy(x) for x in (a_v, weights)) if have_torch else (None,) * 2

    def torch_shaw_values():
        # tensor2tensor's _relative_attention_inner for values: x (n, heads, n) @ z (n, n, d)
        idx = torch.clamp(torch.arange(n)[None, :] - torch.arange(n)[:, None], -16, 16) + 16
        z = ta_v[idx]
        x = tweights[0].permute(1, 0, 2)
        return torch.matmul(x, z).permute(1, 0, 2)[None]

    cases.append(
        Case(
            name=f"shaw_value_term (clip 16): weights {weights.shape}",
            nbytes=weights.nbytes,
            posenc=lambda: rel.shaw_value_term(weights, a_v, max_distance=16),
            memory=lambda: weights.sum(),
            numpy=lambda: reference.shaw_value_term(weights, a_v, max_distance=16),
            torch=torch_shaw_values if have_torch else None,
            note="memory: one read of the weights (their sum); "
            "torch: tensor2tensor's relations_values gather + matmul",
        )
    )
    rmw = _rmw_of(scores)

    def torch_content():
        # XLNet's rel_attn_core: the r_w_bias part of einsum(q + r_w_bias, k_head_h)
        return tscores.add_(torch.einsum("nd,bnjd->bnj", tbias, tk)[:, :, None, :])

    cases.append(
        Case(
            name="xl_content_bias: scores=",
            nbytes=scores.nbytes,
            posenc=lambda: rel.xl_content_bias(k, bias, scores=scores),
            memory=rmw,
            numpy=lambda: reference.xl_content_bias(k, bias, scores=scores),
            torch=torch_content if have_torch else None,
            note="memory: the read-modify-write of the scores; torch: XLNet's einsum of "
            "r_w_bias with the keys, added",
        )
    )
    if have_torch:  # into bfloat16 scores, as a bfloat16 XLNet holds them
        bk, bb, bs = (torch.from_numpy(x).bfloat16() for x in (k, bias, scores))

        def torch_content_bf16():
            return bs.add_(torch.einsum("nd,bnjd->bnj", bb, bk)[:, :, None, :])

        cases.append(
            Case(
                name=f"xl_content_bias: bfloat16 tensors, scores {tuple(bs.shape)}",
                nbytes=bs.numel() * 2,
                posenc=lambda: rel.xl_content_bias(bk, bb, scores=bs),
                memory=_rmw_of(bs.view(torch.int16).numpy()),
                torch=torch_content_bf16,
                note="posenc: u . k in float32 from the bfloat16 values, each sum rounded once "
                "into the scores; torch: the einsum in bfloat16, added",
            )
        )

    # TUPE: 512 positions and [CLS], 12 heads, 32 buckets up to 128
    tn, th = (256, 12) if quick else (512, 12)
    pos_q = rng.standard_normal((th, tn + 1, d)).astype(f4)
    pos_k = rng.standard_normal((th, tn + 1, d)).astype(f4)
    rel_table = rng.standard_normal((33, th)).astype(f4)
    tupe_scores = rng.standard_normal((1, th, tn, tn)).astype(f4)
    tpos_q, tpos_k, trel, ttupe = (
        (torch.from_numpy(x) for x in (pos_q, pos_k, rel_table, tupe_scores))
        if have_torch
        else (None,) * 4
    )

    def torch_tupe():
        # TUPE's fairseq encoder: bmm of the scaled positional queries and keys,
        # [CLS] untied, plus the T5 bucket embedding (the last row to [CLS])
        from transformers.models.t5.modeling_t5 import T5Attention

        bias = torch.bmm(tpos_q * (2 * d) ** -0.5, tpos_k.transpose(1, 2))
        cls_to_others, others_to_cls = bias[:, 0, 0], bias[:, 1, 1]
        bias = bias[:, 1:, 1:].clone()
        bias[:, :, 0] = others_to_cls[:, None]
        bias[:, 0, :] = cls_to_others[:, None]
        pos = torch.arange(tn)
        buckets = T5Attention._relative_position_bucket(
            pos[None, :] - pos[:, None], bidirectional=True, num_buckets=32, max_distance=128
        )
        buckets[:, 0] = 32
        buckets[0, :] = 16
        return ttupe.add_(torch.nn.functional.embedding(buckets, trel).permute(2, 0, 1) + bias)

    cases.append(
        Case(
            name=f"tupe_bias ({th} heads, {tn} positions + [CLS]): scores=",
            nbytes=tupe_scores.nbytes,
            posenc=lambda: rel.tupe_bias(pos_q, pos_k, rel_table=rel_table, scores=tupe_scores),
            memory=_rmw_of(tupe_scores),
            numpy=lambda: reference.tupe_bias(
                pos_q, pos_k, rel_table=rel_table, scores=tupe_scores
            ),
            torch=torch_tupe if have_torch else None,
            note="memory: the read-modify-write of the scores; torch: TUPE's bmm, untied "
            "[CLS] and T5 buckets (transformers' bucketing) + add",
        )
    )
    return cases
