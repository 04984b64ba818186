"""posenc.relative against transformers' XLNet and DeBERTa, on random weights.

- XLNet: ``XLNetModel.relative_positional_encoding`` (bi and uni attention,
  bi_data, clamp_len), ``XLNetRelativeAttention.rel_shift_bnij`` of the
  position scores, and ``rel_attn_core`` end to end (content term with
  ``r_w_bias``, position term with ``r_r_bias``, the scale, the softmax).
- DeBERTa v2/v3: ``make_log_bucket_position`` over every distance up to
  2**17 (float32, as transformers; the float64 option against the authors'
  formula, including the (256, 512) divergence from |d| = 65317),
  ``build_relative_position``, ``DisentangledSelfAttention.
  disentangled_attention_bias`` (c2p and p2c, shared and separate position
  projections, with and without buckets); DeBERTa v1's
  ``build_relative_position``.
- Gradients, under torch's autograd: XLNet's ``rel_attn_core`` (of the
  queries, keys, values, relative keys and both biases) and DeBERTa-v2's
  ``disentangled_attention_bias`` (of the hidden states, the relative
  embeddings and the projections), in float64.
"""

import math

import numpy as np
import pytest

import posenc


def _nn_init(torch, module, seed):
    torch.manual_seed(seed)
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return module.eval()


# ---------------------------------------------------------------- XLNet


@pytest.mark.parametrize(
    "attn_type, bi_data, clamp_len",
    [("bi", False, -1), ("bi", True, -1), ("uni", False, -1), ("bi", True, 4)],
)
def test_xl_table_equals_xlnet_relative_positional_encoding(
    transformers, torch, attn_type, bi_data, clamp_len
):
    sizes = dict(d_model=32, n_head=2, d_inner=16, n_layer=1, vocab_size=10)
    cfg = transformers.XLNetConfig(
        **sizes, attn_type=attn_type, bi_data=bi_data, clamp_len=clamp_len
    )
    model = transformers.XLNetModel(cfg)
    for q_len, k_len in [(5, 5), (6, 19), (1, 40)]:
        want = model.relative_positional_encoding(q_len, k_len, bsz=2 if bi_data else None).numpy()
        want = np.stack([want[:, 0], want[:, 1]]) if bi_data else want[:, 0]
        got = posenc.xl_relative_table(
            q_len, k_len, 32, attn_type=attn_type, bi_data=bi_data, clamp_len=clamp_len
        )
        assert got.shape == want.shape and got.dtype == np.float32
        # transformers forms the angles in float32: its own precision at these positions
        np.testing.assert_allclose(got, want, rtol=0, atol=4e-6)
        # its positional_embedding in float64, on the same positions, to 1e-15
        pos = torch.arange(k_len, -q_len if attn_type == "bi" else -1, -1.0, dtype=torch.float64)
        if clamp_len > 0:
            pos = pos.clamp(-clamp_len, clamp_len)
        inv = 1 / torch.pow(10000, torch.arange(0, 32, 2.0, dtype=torch.float64) / 32)
        exact = model.positional_embedding(pos, inv)[:, 0].numpy()
        got64 = posenc.xl_relative_table(
            q_len,
            k_len,
            32,
            attn_type=attn_type,
            bi_data=bi_data,
            clamp_len=clamp_len,
            dtype="float64",
        )
        np.testing.assert_allclose(got64[0] if bi_data else got64, exact, rtol=0, atol=1e-15)


def _xlnet_attention(transformers, torch, dtype):
    cfg = transformers.XLNetConfig(d_model=24, n_head=3, d_inner=16, dropout=0.0)
    att = transformers.models.xlnet.modeling_xlnet.XLNetRelativeAttention(cfg).to(dtype)
    return _nn_init(torch, att, 3)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("q_len, mem_len", [(6, 0), (4, 7), (1, 12)])
def test_xl_position_term_equals_xlnet_rel_shift(transformers, torch, dtype, q_len, mem_len):
    tdtype = getattr(torch, dtype)
    att = _xlnet_attention(transformers, torch, tdtype)
    k_len, b, n, d = q_len + mem_len, 2, 3, 8
    torch.manual_seed(4)
    q_head = torch.randn(q_len, b, n, d, dtype=tdtype)
    k_head_r = torch.randn(k_len + q_len, b, n, d, dtype=tdtype)
    with torch.no_grad():
        bd = torch.einsum("ibnd,jbnd->bnij", q_head + att.r_r_bias, k_head_r)
        want = att.rel_shift_bnij(bd, klen=k_len).numpy()
    got = posenc.xl_position_term(
        q_head.permute(1, 2, 0, 3).numpy(),
        k_head_r.permute(1, 2, 0, 3).numpy(),
        bias=att.r_r_bias.detach().numpy(),
    )
    tol = 1e-12 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_xl_terms_give_xlnet_rel_attn_core(transformers, torch, dtype):
    tdtype = getattr(torch, dtype)
    att = _xlnet_attention(transformers, torch, tdtype)
    q_len, mem_len, b, n, d = 5, 6, 2, 3, 8
    k_len = q_len + mem_len
    torch.manual_seed(5)
    q_head = torch.randn(q_len, b, n, d, dtype=tdtype)
    k_head_h = torch.randn(k_len, b, n, d, dtype=tdtype)
    v_head_h = torch.randn(k_len, b, n, d, dtype=tdtype)
    k_head_r = torch.randn(k_len + q_len, b, n, d, dtype=tdtype)
    with torch.no_grad():
        vec, prob = att.rel_attn_core(q_head, k_head_h, v_head_h, k_head_r, output_attentions=True)
    q, k, v = (x.permute(1, 2, 0, 3).numpy() for x in (q_head, k_head_h, v_head_h))
    r = k_head_r.permute(1, 2, 0, 3).numpy()
    scores = q @ np.swapaxes(k, -1, -2)
    posenc.xl_content_bias(k, att.r_w_bias.detach().numpy(), scores=scores)
    posenc.xl_position_term(q, r, bias=att.r_r_bias.detach().numpy(), scores=scores)
    scores *= 1 / math.sqrt(d)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(p, prob.permute(2, 3, 0, 1).numpy(), rtol=0, atol=tol)
    np.testing.assert_allclose(
        np.transpose(p @ v, (2, 0, 1, 3)), vec.numpy(), rtol=0, atol=tol * 10
    )


# ---------------------------------------------------------------- DeBERTa


@pytest.fixture(scope="module")
def deberta_v2(transformers):
    return transformers.models.deberta_v2.modeling_deberta_v2


def authors_log_bucket(relative_pos, bucket_size, max_position):
    """DeBERTa's own make_log_bucket_position (NumPy, float64)."""
    sign = np.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = np.where((relative_pos < mid) & (relative_pos > -mid), mid - 1, np.abs(relative_pos))
    log_pos = np.ceil(np.log(abs_pos / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    return np.where(abs_pos <= mid, relative_pos, log_pos * sign).astype(np.int64)


@pytest.mark.parametrize(
    "bucket_size, max_position", [(256, 512), (32, 128), (64, 512), (10, 20), (256, 1024)]
)
def test_deberta_log_buckets_equal_transformers_and_the_authors(
    torch, deberta_v2, bucket_size, max_position
):
    rel = np.arange(-(2**17), 2**17 + 1)
    want = deberta_v2.make_log_bucket_position(torch.from_numpy(rel), bucket_size, max_position)
    want = want.to(torch.long).numpy()
    np.testing.assert_array_equal(posenc.deberta_log_bucket(rel, bucket_size, max_position), want)
    authors = authors_log_bucket(rel, bucket_size, max_position)
    np.testing.assert_array_equal(
        posenc.deberta_log_bucket(rel, bucket_size, max_position, precision="float64"), authors
    )


def test_deberta_float32_and_float64_buckets_part_at_65317_for_256_512(torch, deberta_v2):
    rel = np.arange(0, 2**17)
    f32 = posenc.deberta_log_bucket(rel, 256, 512)
    f64 = posenc.deberta_log_bucket(rel, 256, 512, precision="float64")
    first = int(np.flatnonzero(f32 != f64)[0])
    assert first == 65317
    t = deberta_v2.make_log_bucket_position(torch.tensor([first, -first]), 256, 512)
    np.testing.assert_array_equal(t.to(torch.long).numpy(), f32[[first, first]] * [1, -1])
    np.testing.assert_array_equal(authors_log_bucket(np.array([first]), 256, 512), f64[[first]])


@pytest.mark.filterwarnings("error")
def test_deberta_log_buckets_refused_exactly_where_transformers_are_not_finite(torch, deberta_v2):
    # float32: ln((max_position - 1) / mid) is 0 where the ratio rounds to 1
    # (max_position - 1 - mid <= mid * 2**-24), and transformers' buckets past
    # mid are inf or nan; one step further they are finite and posenc's
    # (transformers' distances up to mid are float32's: those past 2**24 rounded)
    refused = 0
    for mid in [2**23, 2**24 - 1, 2**24, 2**24 + 1, 2**25 + 5, 2**30]:
        near = [min(mid, 2**24), -min(mid, 2**24)]
        for gap in range(1, 130, 3):
            top = mid + gap + 1
            far = [mid + 1, -2 * mid, 2**40]
            want = deberta_v2.make_log_bucket_position(torch.tensor(near + far), 2 * mid, top)
            if torch.isfinite(want).all():
                got = posenc.deberta_log_bucket(near + far, 2 * mid, top)
                np.testing.assert_array_equal(got, want.to(torch.long).numpy())
            else:
                refused += 1
                with pytest.raises(ValueError, match=f"bucket_size {2 * mid} and max_position"):
                    posenc.deberta_log_bucket([mid + 1], 2 * mid, top)
                # distances up to mid: transformers' own, finite
                want = deberta_v2.make_log_bucket_position(torch.tensor(near), 2 * mid, top)
                assert torch.isfinite(want).all()
                got = posenc.deberta_log_bucket(near, 2 * mid, top)
                np.testing.assert_array_equal(got, want.to(torch.long).numpy())
    assert 0 < refused < 6 * 43
    # float64 (transformers' formula in torch's float64): the bucket of
    # 3200779275216 for (2**31, 2**30 + 2) is below 2**63, that of the next past it
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        last = 3200779275216
        want = deberta_v2.make_log_bucket_position(
            torch.tensor([last, -last, last + 1]), 2**31, 2**30 + 2
        )
    finally:
        torch.set_default_dtype(before)
    assert want.dtype == torch.float64 and abs(want[0].item()) < 2**63 <= want[2].item()
    got = posenc.deberta_log_bucket([last, -last], 2**31, 2**30 + 2, precision="float64")
    np.testing.assert_array_equal(got, want[:2].to(torch.long).numpy())
    with pytest.raises(ValueError, match="past int64"):
        posenc.deberta_log_bucket([last + 1], 2**31, 2**30 + 2, precision="float64")


def test_deberta_float32_distances_within_a_large_mid_are_transformers_rounded_ones(
    torch, deberta_v2
):
    # transformers returns a distance |d| <= mid as a float32 value: past 2**24
    # (mid > 2**24) it is rounded to float32's nearest, and so is posenc's
    for mid in [2**24 + 1, 2**25 + 5, 2**30]:
        d = [2**24 + 1, -(2**24 + 3), 2**25 + 1, mid - 1, -mid, mid + 1, 2**24, 7]
        d = [x for x in d if abs(x) <= mid + 1]
        want = deberta_v2.make_log_bucket_position(torch.tensor(d), 2 * mid, 4 * mid)
        got = posenc.deberta_log_bucket(d, 2 * mid, 4 * mid)
        np.testing.assert_array_equal(got, want.to(torch.long).numpy())
        np.testing.assert_array_equal(posenc.reference.deberta_log_bucket(d, 2 * mid, 4 * mid), got)
        # within mid alone (the logarithm not read), the same rounding
        within = [x for x in d if abs(x) <= mid]
        want = deberta_v2.make_log_bucket_position(torch.tensor(within), 2 * mid, 4 * mid)
        got = posenc.deberta_log_bucket(within, 2 * mid, 4 * mid)
        np.testing.assert_array_equal(got, want.to(torch.long).numpy())
    # float64, as the authors' code: the distances as they are
    got = posenc.deberta_log_bucket([2**24 + 1], 2**27, 2**28, precision="float64")
    assert got.tolist() == [2**24 + 1]


@pytest.mark.parametrize(
    "q_len, k_len, buckets, max_pos", [(9, 9, -1, -1), (7, 12, 8, 32), (30, 30, 256, 512)]
)
def test_deberta_relative_positions_equal_build_relative_position(
    torch, transformers, deberta_v2, q_len, k_len, buckets, max_pos
):
    q, k = torch.zeros(1, q_len, 4), torch.zeros(1, k_len, 4)
    want = deberta_v2.build_relative_position(q, k, bucket_size=buckets, max_position=max_pos)
    got = posenc.deberta_relative_positions(q_len, k_len, bucket_size=buckets, max_position=max_pos)
    np.testing.assert_array_equal(got, want[0].numpy())
    if buckets < 0:  # DeBERTa v1
        v1 = transformers.models.deberta.modeling_deberta.build_relative_position(q, k)
        np.testing.assert_array_equal(got, v1[0].numpy())


def _deberta_attention(
    transformers, torch, deberta_v2, dtype, buckets, max_rel, terms, share=False
):
    """transformers' DeBERTa-v2 DisentangledSelfAttention of 2 heads of 8, in
    `dtype`, on random weights."""
    cfg = transformers.DebertaV2Config(
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        relative_attention=True,
        position_buckets=buckets,
        max_relative_positions=max_rel,
        pos_att_type=list(terms),
        share_att_key=share,
        max_position_embeddings=64,
    )
    return _nn_init(torch, deberta_v2.DisentangledSelfAttention(cfg).to(dtype), 1)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    "buckets, max_rel, share, terms",
    [
        (8, 16, False, ("c2p", "p2c")),
        (-1, 6, False, ("c2p", "p2c")),
        (4, 20, True, ("c2p", "p2c")),
        (256, 512, False, ("c2p", "p2c")),
        (8, 16, False, ("c2p",)),
        (8, 16, False, ("p2c",)),
    ],
)
def test_deberta_attention_bias_equals_disentangled_attention_bias(
    transformers, torch, deberta_v2, dtype, buckets, max_rel, share, terms
):
    tdtype = getattr(torch, dtype)
    att = _deberta_attention(
        transformers, torch, deberta_v2, tdtype, buckets, max_rel, terms, share
    )
    batch, length, heads = 2, 37, 2
    span = att.pos_ebd_size
    torch.manual_seed(2)
    hidden = torch.randn(batch, length, 16, dtype=tdtype)
    rel_emb = torch.randn(2 * span, 16, dtype=tdtype)
    with torch.no_grad():
        ql = att.transpose_for_scores(att.query_proj(hidden), heads)
        kl = att.transpose_for_scores(att.key_proj(hidden), heads)
        rel_pos = deberta_v2.build_relative_position(
            ql, kl, bucket_size=att.position_buckets, max_position=att.max_relative_positions
        )
        want = att.disentangled_attention_bias(ql, kl, rel_pos, rel_emb, 1 + len(terms))
        want = want.numpy().reshape(batch, heads, length, length)

        def per_head(proj):
            return proj(rel_emb).reshape(2 * span, heads, -1).permute(1, 0, 2).numpy()

        pk = per_head(att.key_proj if share else att.pos_key_proj) if "c2p" in terms else None
        pq = per_head(att.query_proj if share else att.pos_query_proj) if "p2c" in terms else None
    q = ql.numpy().reshape(batch, heads, length, -1)
    k = kl.numpy().reshape(batch, heads, length, -1)
    got = posenc.deberta_attention_bias(
        q, k, pk, pq, position_buckets=buckets, max_relative_positions=max_rel
    )
    assert got.dtype == np.dtype(dtype)
    d = q.shape[-1]
    # transformers rounds its scale sqrt(d * factor) to float32 even in float64
    # models; posenc forms it in the working precision
    exact = math.sqrt(d * (1 + len(terms)))
    rescale = exact / float(np.float32(exact)) if dtype == "float64" else 1.0
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(got * rescale, want, rtol=0, atol=tol * np.abs(want).max())


def test_deberta_v3_configs_max_relative_positions_of_minus_one_is_refused_not_guessed(
    transformers, torch, deberta_v2
):
    # DeBERTa-v3's configs hold max_relative_positions = -1, which
    # DisentangledSelfAttention replaces by max_position_embeddings; passed
    # as it is, posenc would have to guess, so it refuses it, and the value
    # transformers uses gives transformers' bias
    att = _deberta_attention(transformers, torch, deberta_v2, torch.float64, 8, -1, ("c2p",))
    assert att.max_relative_positions == 64  # the factory's max_position_embeddings
    torch.manual_seed(3)
    length, heads = 40, 2
    hidden = torch.randn(1, length, 16, dtype=torch.float64)
    rel_emb = torch.randn(2 * att.pos_ebd_size, 16, dtype=torch.float64)
    with torch.no_grad():
        ql = att.transpose_for_scores(att.query_proj(hidden), heads)
        kl = att.transpose_for_scores(att.key_proj(hidden), heads)
        rel_pos = deberta_v2.build_relative_position(
            ql, kl, bucket_size=att.position_buckets, max_position=att.max_relative_positions
        )
        want = att.disentangled_attention_bias(ql, kl, rel_pos, rel_emb, 2).numpy()
        pk = att.pos_key_proj(rel_emb).reshape(-1, heads, 8).permute(1, 0, 2).numpy()
    q, k = ql.numpy().reshape(1, heads, length, 8), kl.numpy().reshape(1, heads, length, 8)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        posenc.deberta_attention_bias(q, k, pk, position_buckets=8, max_relative_positions=-1)
    got = posenc.deberta_attention_bias(q, k, pk, position_buckets=8, max_relative_positions=64)
    exact = math.sqrt(8 * 2)
    got *= exact / float(np.float32(exact))  # transformers' scale is rounded to float32
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=0, atol=1e-12 * abs(want).max())


# ---------------------------------------------------------------- gradients (autograd)


def _grads(torch, loss, tensors):
    return torch.autograd.grad(loss, tensors, retain_graph=True)  # shared projections


def test_xlnet_rel_attn_core_gradients(transformers, torch):
    att = _xlnet_attention(transformers, torch, torch.float64)
    q_len, mem_len, b, n, d = 5, 6, 2, 3, 8
    k_len = q_len + mem_len
    torch.manual_seed(5)
    q_head, k_head_h, v_head_h = (
        torch.randn(length, b, n, d, dtype=torch.float64, requires_grad=True)
        for length in (q_len, k_len, k_len)
    )
    k_head_r = torch.randn(k_len + q_len, b, n, d, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(q_len, b, n, d, dtype=torch.float64)
    leaves = (q_head, k_head_h, v_head_h, k_head_r, att.r_w_bias, att.r_r_bias)

    vec = att.rel_attn_core(q_head, k_head_h, v_head_h, k_head_r)
    want = _grads(torch, (vec * weight).sum(), leaves)

    q, k, v, r = (x.permute(1, 2, 0, 3) for x in (q_head, k_head_h, v_head_h, k_head_r))
    scores = q @ k.transpose(-1, -2)
    scores = posenc.xl_content_bias(k, att.r_w_bias, scores=scores)
    scores = posenc.xl_position_term(q, r, bias=att.r_r_bias, scores=scores)
    p = torch.softmax(scores / math.sqrt(d), dim=-1)
    got = _grads(torch, ((p @ v).permute(2, 0, 1, 3) * weight).sum(), leaves)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=0, atol=1e-12 * w.abs().max())


@pytest.mark.parametrize("buckets, max_rel, share", [(8, 16, False), (-1, 6, True)])
def test_deberta_disentangled_attention_bias_gradients(
    transformers, torch, deberta_v2, buckets, max_rel, share
):
    terms = ("c2p", "p2c")
    att = _deberta_attention(
        transformers, torch, deberta_v2, torch.float64, buckets, max_rel, terms, share
    )
    batch, length, heads = 2, 23, 2
    span = att.pos_ebd_size
    torch.manual_seed(2)
    hidden = torch.randn(batch, length, 16, dtype=torch.float64, requires_grad=True)
    rel_emb = torch.randn(2 * span, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(batch * heads, length, length, dtype=torch.float64)
    leaves = [hidden, rel_emb, att.query_proj.weight, att.key_proj.weight]
    if not share:
        leaves += [att.pos_key_proj.weight, att.pos_query_proj.weight]

    ql = att.transpose_for_scores(att.query_proj(hidden), heads)
    kl = att.transpose_for_scores(att.key_proj(hidden), heads)
    rel_pos = deberta_v2.build_relative_position(
        ql, kl, bucket_size=att.position_buckets, max_position=att.max_relative_positions
    )
    bias = att.disentangled_attention_bias(ql, kl, rel_pos, rel_emb, 3)
    want = _grads(torch, (bias * weight).sum(), leaves)

    def per_head(proj):
        return proj(rel_emb).reshape(2 * span, heads, -1).permute(1, 0, 2)

    pk = per_head(att.key_proj if share else att.pos_key_proj)
    pq = per_head(att.query_proj if share else att.pos_query_proj)
    q, k = ql.reshape(batch, heads, length, -1), kl.reshape(batch, heads, length, -1)
    got_bias = posenc.deberta_attention_bias(
        q, k, pk, pq, position_buckets=buckets, max_relative_positions=max_rel
    )
    # transformers rounds its scale sqrt(d * 3) to float32; posenc's is exact
    exact = math.sqrt(8 * 3)
    rescale = exact / float(np.float32(exact))
    got = _grads(torch, (got_bias.reshape(weight.shape) * weight).sum() * rescale, leaves)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=0, atol=1e-12 * w.abs().max())


# ---------------------------------------------------------------- bfloat16


def _bf16_step(x):
    """The spacing of bfloat16 at |x| (float64 array): 2**(e - 7) for
    2**e <= |x| < 2**(e + 1), 2**-133 below the normal range."""
    e = np.floor(np.log2(np.maximum(np.abs(x), 2.0**-126)))
    return np.exp2(e - 7)


def _check_bfloat16(got, want, exact, size):
    """posenc's bfloat16 term `got` is the exact term rounded once (within
    half a step, plus float32's rounding of its sums); the model's own
    bfloat16 term `want` rounds its inputs' sum, products and quotients, each
    by up to 2**-9 of the term's size (the sum of the |products|), and the
    two differ by no more than that."""
    got, want = got.double().numpy(), want.double().numpy()
    step = _bf16_step(exact)
    assert np.all(np.abs(got - exact) <= 0.5 * step + 2.0**-20 * size)
    assert np.all(np.abs(want - exact) <= 2.0**-7 * size + 0.5 * step)
    assert np.all(np.abs(got - want) <= 2.0**-7 * size + step)
    assert np.abs(got - exact).max() < np.abs(want - exact).max()  # one rounding, not several


def test_xl_position_term_in_bfloat16_is_xlnets_within_its_own_roundings(transformers, torch):
    att = _xlnet_attention(transformers, torch, torch.bfloat16)
    q_len, mem_len, b, n, d = 6, 5, 2, 3, 8
    k_len = q_len + mem_len
    torch.manual_seed(6)
    q_head = torch.randn(q_len, b, n, d).bfloat16()
    k_head_r = torch.randn(k_len + q_len, b, n, d).bfloat16()
    bias = att.r_r_bias.detach()
    with torch.no_grad():
        bd = torch.einsum("ibnd,jbnd->bnij", q_head + att.r_r_bias, k_head_r)
        want = att.rel_shift_bnij(bd, klen=k_len)
    q, r = q_head.permute(1, 2, 0, 3), k_head_r.permute(1, 2, 0, 3)
    got = posenc.xl_position_term(q, r, bias=bias)
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    qb = (q.double() + bias.double()[:, None]).numpy()
    exact = posenc.xl_position_term(qb, r.double().numpy())
    size = posenc.xl_position_term(np.abs(qb), np.abs(r.double().numpy()))
    _check_bfloat16(got, want, exact, size)


def test_deberta_attention_bias_in_bfloat16_is_debertas_within_its_own_roundings(
    transformers, torch, deberta_v2
):
    att = _deberta_attention(transformers, torch, deberta_v2, torch.bfloat16, 8, 16, ("c2p", "p2c"))
    batch, length, heads, span = 2, 29, 2, att.pos_ebd_size
    torch.manual_seed(2)
    hidden = torch.randn(batch, length, 16).bfloat16()
    rel_emb = torch.randn(2 * span, 16).bfloat16()
    with torch.no_grad():
        ql = att.transpose_for_scores(att.query_proj(hidden), heads)
        kl = att.transpose_for_scores(att.key_proj(hidden), heads)
        rel_pos = deberta_v2.build_relative_position(
            ql, kl, bucket_size=att.position_buckets, max_position=att.max_relative_positions
        )
        want = att.disentangled_attention_bias(ql, kl, rel_pos, rel_emb, 3)
        want = want.reshape(batch, heads, length, length)
        pk = att.pos_key_proj(rel_emb).reshape(2 * span, heads, -1).permute(1, 0, 2)
        pq = att.pos_query_proj(rel_emb).reshape(2 * span, heads, -1).permute(1, 0, 2)
    q, k = ql.reshape(batch, heads, length, -1), kl.reshape(batch, heads, length, -1)
    opts = dict(position_buckets=8, max_relative_positions=16)
    got = posenc.deberta_attention_bias(q, k, pk, pq, **opts)
    assert got.dtype == torch.bfloat16
    wide = [x.double().numpy() for x in (q, k, pk, pq)]
    exact = posenc.deberta_attention_bias(*wide, **opts)
    size = posenc.deberta_attention_bias(*[np.abs(x) for x in wide], **opts)
    _check_bfloat16(got, want, exact, size)
