"""posenc's attention biases against transformers' own functions.

BLOOM's build_alibi_tensor for ALiBi's slopes, T5Attention's
_relative_position_bucket and compute_bias for T5.  A tiny T5Attention is
built from a config with a random table: no weights are downloaded.
"""

import numpy as np
import pytest
from t5_models import BUCKET_CONFIGS, t5_attention

import posenc
from posenc import reference


def bloom_slopes(torch, n_heads):
    """BLOOM's slope of each head: its ALiBi tensor at key position 1."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    mask = torch.ones(1, 2, dtype=torch.long)
    return build_alibi_tensor(mask, n_heads, torch.float32)[:, 0, 1].numpy()


def bloom_powers(n_heads):
    """The power BLOOM raises its float32 base to for each head (1, 2, .. then 1, 3, ..)."""
    c = 1 << (n_heads.bit_length() - 1)
    return np.concatenate([np.arange(1, c + 1), np.arange(1, 2 * c, 2)[: n_heads - c]])


def test_alibi_slopes_equal_blooms_for_every_head_count_up_to_128(torch, transformers):
    for n in range(1, 129):
        ours = posenc.alibi_slopes(n)
        theirs = bloom_slopes(torch, n).astype(np.float64)
        # BLOOM raises a float32 base (rounded by up to 2**-24) to the power p
        # in float32: its slope is within about (p + 1) * 2**-24 of the exact one
        bound = (bloom_powers(n) + 2) * 2.0**-24 * ours
        assert (np.abs(theirs - ours) <= bound).all(), n
        if n in (1, 2, 4, 8):  # exact powers of two: no rounding anywhere
            np.testing.assert_array_equal(theirs, ours)


def test_causal_alibi_rows_differ_from_blooms_by_a_constant_per_row(torch, transformers):
    # BLOOM adds slope * j to every query and relies on softmax's shift
    # invariance; the causal bias slope * (j - i) is that minus slope * i
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    n_heads, n = 12, 40
    theirs = build_alibi_tensor(torch.ones(1, n, dtype=torch.long), n_heads, torch.float32)
    theirs = theirs[:, 0, :].numpy().astype(np.float64)
    ours = posenc.alibi_bias(n_heads, n, dtype="float64")
    slopes = posenc.alibi_slopes(n_heads)
    for i in range(n):
        shift = ours[:, i, : i + 1] - theirs[:, : i + 1]
        np.testing.assert_allclose(
            shift, np.broadcast_to(-slopes[:, None] * i, shift.shape), rtol=0, atol=1e-5 * n
        )


@pytest.mark.parametrize("n_heads", [1, 2, 4, 6, 8, 12, 16, 32])
def test_alibi_key_bias_equals_blooms_build_alibi_tensor(torch, transformers, n_heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    mask = torch.ones(3, 50, dtype=torch.long)
    mask[0, :7] = 0  # left padding
    mask[1, 20:] = 0  # right padding
    mask[2, 5:9] = 0  # a hole
    got = posenc.alibi_key_bias(mask, n_heads)
    assert got.dtype == torch.float32 and got.shape == (3, n_heads, 1, 50)
    want = build_alibi_tensor(mask, n_heads, torch.float32).reshape(3, n_heads, 1, 50)
    if n_heads <= 8:  # BLOOM's float32 slopes are exact: bit for bit
        assert torch.equal(got, want)
    else:  # its slopes are powers of a rounded float32 root: within its slope's error
        slopes = torch.as_tensor(posenc.alibi_slopes(n_heads))
        bound = (torch.as_tensor(bloom_powers(n_heads)) + 2) * 2.0**-24 * slopes * 50
        assert ((got - want).abs().double() <= bound[None, :, None, None] + 1e-12).all()
    # the float64 value written out: slope * (cumsum - 1) * mask
    m = mask.numpy().astype(np.float64)
    pos = (np.cumsum(m, -1) - 1) * m
    exact = posenc.alibi_slopes(n_heads)[None, :, None, None] * pos[:, None, None, :]
    np.testing.assert_array_equal(posenc.alibi_key_bias(mask.numpy(), n_heads, dtype="float64"),
                                  exact)  # fmt: skip
    np.testing.assert_array_equal(got.numpy(), exact.astype(np.float32))


def test_alibi_key_bias_bfloat16_rounds_once(torch, transformers):
    # Falcon's bfloat16 slopes times the positions, rounded once to bfloat16,
    # is what transformers' Falcon computes (in bfloat16 arithmetic)
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    mask = torch.ones(2, 300, dtype=torch.long)
    mask[0, :4] = 0
    n_heads = 6
    want = build_alibi_tensor(mask, n_heads, torch.bfloat16).reshape(2, n_heads, 1, 300)
    bf16_slopes = torch.as_tensor(posenc.alibi_slopes(n_heads)).bfloat16().double().numpy()
    got = posenc.alibi_key_bias(mask, n_heads, slopes=bf16_slopes, dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    # against float64 rounded by hand (round to nearest even, from the
    # exact float32 products: slopes of 8 bits times positions below 2**16)
    exact = posenc.alibi_key_bias(mask, n_heads, slopes=bf16_slopes, dtype=torch.float64)
    assert torch.equal(got, exact.float().bfloat16())


@pytest.mark.parametrize("config", BUCKET_CONFIGS)
def test_relative_position_bucket_equals_t5s_for_every_distance_up_to_4096(
    torch, transformers, config
):
    from transformers.models.t5.modeling_t5 import T5Attention

    bidirectional, num_buckets, max_distance = config
    rel = np.arange(-4096, 4097)
    theirs = T5Attention._relative_position_bucket(
        torch.from_numpy(rel),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    ).numpy()
    ours = posenc.relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (64, 300)])
def test_t5_bias_equals_t5_attention_compute_bias(
    torch, transformers, is_decoder, num_buckets, max_distance
):
    table = np.random.default_rng(3).standard_normal((num_buckets, 6)).astype(np.float32)
    attention = t5_attention(torch, is_decoder, num_buckets, max_distance, table=table)
    for q_len, k_len, past in [(50, 50, 0), (1, 700, 699), (37, 300, 263), (200, 120, 0)]:
        with torch.no_grad():
            theirs = attention.compute_bias(q_len, k_len, past_seen_tokens=past)[0].numpy()
        ours = posenc.t5_bias(
            table,
            q_len,
            k_len,
            bidirectional=not is_decoder,
            max_distance=max_distance,
            q_offset=past,
        )
        np.testing.assert_array_equal(ours, theirs)


def test_t5_scores_add_equals_adding_compute_bias(torch, transformers):
    table = np.random.default_rng(4).standard_normal((32, 4)).astype(np.float32)
    attention = t5_attention(torch, False, 32, 128, table=table)
    scores = torch.randn(2, 4, 33, 180)
    with torch.no_grad():
        theirs = (scores + attention.compute_bias(33, 180)).numpy()
    ours = posenc.t5_bias(table, 33, 180, scores=scores.numpy().copy())
    np.testing.assert_array_equal(ours, theirs)


def test_alibi_scores_add_writes_into_a_cpu_tensor_in_place(torch):
    scores = torch.zeros(1, 2, 3, 3)
    posenc.alibi_bias(2, 3, scores=scores)
    expected = torch.from_numpy(reference.alibi_bias(2, 3))[None]
    assert torch.equal(scores, expected)
