"""Inputs as transformers and PyTorch users hand them over: (batch, seq)
position ids, seq_axis with explicit positions, config objects and dicts in
the dialects checkpoints use, 0-d lengths, unaligned buffers.

Expected values come from posenc.reference called one sequence at a time
(the old, unambiguous 1-D position rule), from parameter dicts merged by
hand, or from the formulas written out here.  tests/conformance compares the
same inputs with transformers' own modules.
"""

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import posenc
from posenc import reference

LAYOUTS = ["half", "interleaved"]


def _per_sequence(x, ids, seq_axis, **kw):
    """reference.apply_rope one batch row at a time, with 1-D positions."""
    out = np.empty(x.shape, np.float64)
    for b in range(x.shape[0]):
        out[b] = reference.apply_rope(x[b].astype(np.float64), ids[b], seq_axis=seq_axis, **kw)
    return out


def _left_padded_ids(batch, seq, rng):
    pads = rng.integers(0, seq // 2, batch)
    mask = np.arange(seq)[None, :] >= pads[:, None]
    return np.clip(np.cumsum(mask, axis=1) - 1, 0, None)


# ---------------------------------------------------------------- position ids


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seq_axis", [-2, -3])
def test_batch_seq_position_ids_rotate_each_sequence_by_its_own_ids(rng, layout, seq_axis):
    # transformers' position_ids (batch, seq) on (batch, kv_heads, seq, head_dim):
    # they used to broadcast along the heads axis (error 9.0 on (8, 8, 16, 128))
    batch, heads, seq, dim = 8, 8, 16, 128
    shape = (batch, heads, seq, dim) if seq_axis == -2 else (batch, seq, heads, dim)
    x = rng.standard_normal(shape)
    ids = _left_padded_ids(batch, seq, rng)
    ids[3] = np.r_[np.arange(6), np.arange(10)]  # a packed row with a restart
    got = posenc.apply_rope(x, ids, layout=layout, seq_axis=seq_axis)
    want = _per_sequence(x, ids, seq_axis, layout=layout)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_batch_seq_ids_equal_the_full_rank_form(rng):
    x = rng.standard_normal((3, 4, 10, 32)).astype(np.float32)
    ids = rng.integers(0, 5000, (3, 10))
    np.testing.assert_array_equal(posenc.apply_rope(x, ids), posenc.apply_rope(x, ids[:, None, :]))


def test_explicit_positions_follow_seq_axis_when_seq_equals_heads(rng):
    # (batch, seq, heads, dim) with seq == heads: the positions belong on seq
    x = rng.standard_normal((2, 6, 6, 16))
    pos = np.array([0, 5, 11, 20, 33, 40])
    got = posenc.apply_rope(x, pos, seq_axis=-3)
    want = reference.apply_rope(x, pos[None, :, None])  # full rank: (1, seq, 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # one token at a time, by hand: token s of every head rotated by pos[s]
    for s in range(6):
        one = reference.apply_rope(x[:, s], np.full((2, 6), pos[s]))
        np.testing.assert_allclose(got[:, s], one, rtol=0, atol=1e-12)


def test_positions_none_and_arange_agree_for_both_seq_axes(rng):
    x = rng.standard_normal((2, 7, 3, 8)).astype(np.float32)
    np.testing.assert_array_equal(
        posenc.apply_rope(x, seq_axis=-3, offset=4),
        posenc.apply_rope(x, np.arange(7) + 4, seq_axis=-3),
    )


@pytest.mark.parametrize(
    "shape,ids_shape,seq_axis",
    [
        ((3, 8, 16, 64), (3, 15), -2),  # wrong sequence length
        ((3, 8, 16, 64), (2, 16), -2),  # wrong batch
        ((3, 16, 8, 64), (3, 8), -3),  # (batch, heads) given for (batch, seq)
        ((3, 8, 16, 64), (3, 8, 1, 16), -2),  # more dimensions than x's rows
        ((8, 16, 64), (2, 8, 16), -2),  # more leading axes than x has before seq
        ((2, 9, 3, 32), (9, 1), -3),  # (seq, 1): read as (batch, seq), does not fit
    ],
)
def test_positions_the_rule_cannot_place_raise_naming_the_expected_shape(
    rng, shape, ids_shape, seq_axis
):
    x = rng.standard_normal(shape).astype(np.float32)
    before = x.copy()
    with pytest.raises(ValueError, match="expected"):
        posenc.apply_rope(x, np.zeros(ids_shape, np.int64), seq_axis=seq_axis, out=x)
    np.testing.assert_array_equal(x, before)


def test_a_one_dimensional_x_takes_a_scalar_position(rng):
    x = rng.standard_normal(8)
    got = posenc.apply_rope(x, 3)
    a, b = x[:4], x[4:]
    theta = 10000.0 ** (-np.arange(4) / 4) * 3
    want = np.r_[a * np.cos(theta) - b * np.sin(theta), b * np.cos(theta) + a * np.sin(theta)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)


# ---------------------------------------------------------------- configs


def _llama_like(**rope):
    return SimpleNamespace(
        rope_parameters={"rope_theta": 500000.0, **rope},
        max_position_embeddings=256,
        hidden_size=512,
        num_attention_heads=8,
        head_dim=64,
    )


@pytest.mark.parametrize(
    "rope,merged",
    [
        ({"rope_type": "default"}, {}),
        ({"rope_type": "linear", "factor": 4.0}, {"factor": 4.0}),
        ({"rope_type": "dynamic", "factor": 2.0}, {"factor": 2.0, "max_position_embeddings": 256}),
        (
            {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32},
            {"factor": 8.0, "original_max_position_embeddings": 32},
        ),
        (
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 64},
            {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 64},
        ),
    ],
)  # fmt: skip
def test_a_config_object_reads_what_transformers_reads(rng, rope, merged):
    config = _llama_like(**rope)
    params = {"rope_type": rope["rope_type"], "rope_theta": 500000.0, **merged}
    ids = rng.integers(0, 700, (2, 12))  # past max_position_embeddings: dynamic grows
    x = rng.standard_normal((2, 4, 12, 64))
    got = posenc.apply_rope(x, ids, scaling=config)
    want = _per_sequence(x, ids, -2, scaling=dict(params, max_position_embeddings=256))
    if rope["rope_type"] == "dynamic":  # the sequence length is the batch's, not a row's
        seq_len = int(ids.max()) + 1
        inv, _ = reference.rope_frequencies(64, scaling=params, seq_len=seq_len)
        want = _per_sequence(x, ids, -2, base=1.0, scaling={"rope_type": "default"})
        angles = ids[:, None, :, None] * inv
        cos, sin = np.cos(angles), np.sin(angles)
        a, b = x[..., :32], x[..., 32:]
        want = np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    inv, att = posenc.rope_frequencies(64, scaling=config)
    inv_want, att_want = reference.rope_frequencies(64, scaling=params)
    np.testing.assert_allclose(inv, inv_want, rtol=1e-14)
    assert att == att_want


def test_a_config_dict_like_config_json_is_read_as_a_config():
    config_json = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "max_position_embeddings": 1024,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
    }
    inv, _ = posenc.rope_frequencies(64, scaling=config_json, seq_len=4096)
    grown = 10000.0 * (2.0 * 4096 / 1024 - 1.0) ** (64 / 62)
    np.testing.assert_allclose(inv, grown ** (-np.arange(32) / 32), rtol=1e-14)


def test_partial_rotary_factor_of_a_config_sets_the_rotary_dimension(rng):
    config = SimpleNamespace(
        rope_scaling=None, rope_theta=10000.0, partial_rotary_factor=0.25, head_dim=64,
        max_position_embeddings=2048,
    )  # fmt: skip
    x = rng.standard_normal((1, 2, 5, 64))
    got = posenc.apply_rope(x, scaling=config)
    np.testing.assert_allclose(got, reference.apply_rope(x, rotary_dim=16), rtol=0, atol=1e-13)
    assert posenc.rope_frequencies(64, scaling=config)[0].shape == (8,)


def test_a_config_head_dim_other_than_x_is_refused(rng):
    with pytest.raises(ValueError, match="head dimension 64"):
        posenc.apply_rope(rng.standard_normal((1, 2, 5, 128)), scaling=_llama_like())
    with pytest.raises(ValueError, match="head dimension 64"):
        posenc.rope_frequencies(128, scaling=_llama_like())


def test_parameters_per_layer_type_need_layer_type(rng):
    config = SimpleNamespace(
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
        head_dim=32,
        max_position_embeddings=4096,
    )
    x = rng.standard_normal((1, 2, 9, 32))
    with pytest.raises(ValueError, match="'full_attention', 'sliding_attention'"):
        posenc.apply_rope(x, scaling=config)
    with pytest.raises(ValueError, match="full_attention"):
        posenc.rope_frequencies(32, scaling=config.rope_parameters)
    with pytest.raises(ValueError, match="layer_type must be one of"):
        posenc.apply_rope(x, scaling=config, layer_type="local")
    full = posenc.apply_rope(x, scaling=config, layer_type="full_attention")
    sliding = posenc.apply_rope(x, scaling=config, layer_type="sliding_attention")
    np.testing.assert_allclose(
        full, reference.apply_rope(x, np.arange(9) / 8.0, base=1e6), atol=1e-13
    )
    np.testing.assert_allclose(sliding, reference.apply_rope(x), atol=1e-13)
    with pytest.raises(ValueError, match="one set of RoPE parameters"):
        posenc.apply_rope(x, scaling=_llama_like(), layer_type="full_attention")


PHI3_SHORT = [1.0 + 0.05 * i for i in range(16)]
PHI3_LONG = [2.0 + 0.5 * i for i in range(16)]


@pytest.mark.parametrize("legacy", ["su", "yarn"])
@pytest.mark.parametrize("seq_len", [100, 5000])
def test_phi3_legacy_types_are_longrope(legacy, seq_len):
    params = {
        "type": legacy,
        "short_factor": PHI3_SHORT,
        "long_factor": PHI3_LONG,
        "original_max_position_embeddings": 4096,
        "max_position_embeddings": 131072,
    }
    inv, att = posenc.rope_frequencies(32, scaling=params, seq_len=seq_len)
    ext = np.array(PHI3_LONG if seq_len > 4096 else PHI3_SHORT)
    np.testing.assert_allclose(inv, 1.0 / (ext * 10000.0 ** (np.arange(16) / 16)), rtol=1e-14)
    assert att == math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))


def test_a_yarn_dict_with_both_longrope_and_yarn_keys_is_refused():
    with pytest.raises(ValueError, match="neither"):
        posenc.rope_frequencies(
            32, scaling={"type": "yarn", "short_factor": PHI3_SHORT, "beta_fast": 32, "factor": 2.0}
        )


def test_hunyuan_dynamic_with_alpha_is_ntk_alpha():
    params = {"type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32, "rope_theta": 1e4}
    for seq_len in (None, 100, 10**6):  # no dependence on the sequence length
        inv, att = posenc.rope_frequencies(128, scaling=params, seq_len=seq_len)
        base = 1e4 * 1000.0 ** (128 / 126)
        np.testing.assert_allclose(inv, base ** (-np.arange(64) / 64), rtol=1e-14)
        assert att == 1.0


@pytest.mark.parametrize(
    "params,name",
    [
        ({"rope_type": "default", "mrope_interleaved": True}, "mrope_interleaved"),
        ({"rope_type": "longrope", "short_factor": PHI3_SHORT, "long_factor": PHI3_LONG,
          "original_max_position_embeddings": 4096, "short_mscale": 1.1}, "short_mscale"),
    ],
)  # fmt: skip
def test_parameters_posenc_does_not_implement_are_refused_by_name(params, name):
    with pytest.raises(ValueError, match=name):
        posenc.rope_frequencies(32, scaling=params)
    config = SimpleNamespace(rope_parameters=params, head_dim=32, max_position_embeddings=8192)
    with pytest.raises(ValueError, match=name):
        posenc.apply_rope(np.zeros((1, 4, 32)), scaling=config)


@pytest.mark.parametrize(
    "params,model_type",
    [
        ({"rope_type": "default", "mrope_section": [4, 6, 6], "mrope_interleaved": False}, None),
        ({"type": "mrope", "mrope_section": [4, 6, 6]}, "qwen2_vl"),  # Qwen2-VL's config.json
        (
            {"rope_type": "default", "mrope_section": [8, 4, 4], "mrope_interleaved": True},
            "qwen3_vl_text",
        ),
    ],
)
def test_mrope_configs_need_positions_in_three_rows(params, model_type):
    # the frequencies are the plain ones of the head: M-RoPE only chooses positions
    inv, att = posenc.rope_frequencies(32, scaling=params)
    np.testing.assert_allclose(inv, 10000.0 ** (-np.arange(16) / 16), rtol=1e-15)
    assert att == 1.0
    config = SimpleNamespace(
        rope_parameters=params, head_dim=32, max_position_embeddings=8192, rope_theta=10000.0,
        model_type=model_type or "qwen2_5_vl_text",
    )  # fmt: skip
    x = np.zeros((2, 4, 5, 32))
    for scaling in (params, config):
        for positions in (None, np.arange(5), np.zeros((2, 5)), np.zeros((2, 2, 5))):
            with pytest.raises(ValueError, match="mrope_section .* leading axis of 3 rows"):
                posenc.apply_rope(x, positions, scaling=scaling)
        for positions in (5, np.arange(5), np.zeros((2, 5))):
            with pytest.raises(ValueError, match="mrope_section .* leading axis of 3 rows"):
                posenc.rope_cos_sin(positions, 32, scaling=scaling)
        # three rows are read as M-RoPE's
        ids = np.tile(np.arange(5), (3, 2, 1))
        np.testing.assert_array_equal(
            posenc.apply_rope(x + 1, ids, scaling=scaling), posenc.apply_rope(x + 1)
        )


def test_unknown_keys_give_a_warning_naming_them():
    params = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    with pytest.warns(UserWarning, match="beta_fst"):
        got = posenc.rope_frequencies(32, scaling=dict(params, beta_fst=16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = posenc.rope_frequencies(32, scaling=params)
    np.testing.assert_array_equal(got[0], want[0])


def test_config_objects_are_not_changed(rng):
    rope = {"rope_type": "yarn", "factor": 4.0}
    config = _llama_like(**rope)
    posenc.apply_rope(rng.standard_normal((1, 3, 64)), scaling=config)
    assert config.rope_parameters == {"rope_theta": 500000.0, **rope}


def test_other_objects_are_refused_as_scaling():
    with pytest.raises(TypeError, match="scaling"):
        posenc.rope_frequencies(32, scaling=[("rope_type", "linear")])


# ---------------------------------------------------------------- 0-d lengths


@pytest.mark.parametrize("make", [int, np.int64, np.array, lambda n: np.array(n, np.uint16)])
def test_a_0d_integer_is_a_length(make):
    want = reference.sinusoid(8, 6, dtype="float64")
    np.testing.assert_array_equal(posenc.sinusoid(make(8), 6, dtype="float64").shape, (8, 6))
    np.testing.assert_allclose(posenc.sinusoid(make(8), 6, dtype="float64"), want, atol=1e-15)
    assert posenc.rope_cos_sin(make(8), 6)[0].shape == (8, 6)


def test_a_0d_torch_integer_tensor_is_a_length():
    torch = pytest.importorskip("torch")
    assert posenc.sinusoid(torch.tensor(8), 4).shape == (8, 4)
    assert posenc.sinusoid(torch.tensor(8.0), 4).shape == (4,)


@pytest.mark.parametrize("value", [8.0, np.float32(8.0), np.array(8.0)])
def test_a_float_scalar_is_one_position(value):
    got = posenc.sinusoid(value, 4, dtype="float64")
    np.testing.assert_allclose(got, reference.sinusoid(np.arange(9), 4, dtype="float64")[8])


def test_a_0d_bool_is_refused():
    with pytest.raises(TypeError, match="positions"):
        posenc.sinusoid(np.array(True), 4)


# ---------------------------------------------------------------- unaligned buffers


def _unaligned(values):
    values = np.ascontiguousarray(values)
    buf = bytearray(values.nbytes + 1)
    arr = np.frombuffer(buf, dtype=values.dtype, offset=1, count=values.size).reshape(values.shape)
    arr[...] = values
    assert not arr.flags.aligned
    return arr


def test_unaligned_inputs_are_copied_not_refused(rng):
    x = rng.standard_normal((2, 3, 8, 16)).astype(np.float32)
    np.testing.assert_array_equal(posenc.apply_rope(_unaligned(x)), posenc.apply_rope(x))
    table = rng.standard_normal((32, 4)).astype(np.float32)
    np.testing.assert_array_equal(posenc.t5_bias(_unaligned(table), 6), posenc.t5_bias(table, 6))
    pos = rng.uniform(0, 100, 7)
    np.testing.assert_array_equal(posenc.sinusoid(_unaligned(pos), 8), posenc.sinusoid(pos, 8))
    np.testing.assert_array_equal(
        posenc.apply_rope(x, _unaligned(pos[:3])[None, :, None]),
        posenc.apply_rope(x, pos[None, :3, None]),
    )
    slopes = posenc.alibi_slopes(3)
    np.testing.assert_array_equal(
        posenc.alibi_bias(3, 5, slopes=_unaligned(slopes)), posenc.alibi_bias(3, 5)
    )
    rel = rng.integers(-200, 200, 50)
    np.testing.assert_array_equal(
        posenc.relative_position_bucket(_unaligned(rel)), posenc.relative_position_bucket(rel)
    )


def test_an_unaligned_out_is_written(rng):
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    out = _unaligned(np.zeros_like(x))
    assert posenc.apply_rope(x, out=out) is out
    np.testing.assert_array_equal(out, posenc.apply_rope(x))
    table = _unaligned(np.zeros((5, 8), np.float32))
    posenc.sinusoid(5, 8, out=table)
    np.testing.assert_array_equal(table, posenc.sinusoid(5, 8))
