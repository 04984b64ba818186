"""Position-id samplers (randomized positions, PoSE) and Llama 4's iRoPE
pattern and chunked mask: against the twins, the papers' definitions,
transformers' Llama4 config and masking utilities; bad input refused."""

import numpy as np
import pytest

import posenc
from posenc import _reference_newer as reference
from posenc._irope import IRoPELayers, chunked_causal_mask, irope_layers
from posenc._samplers import pose_position_ids, randomized_position_ids

# --- randomized positional encodings (Ruoss et al. 2023) ----------------------


def test_randomized_matches_reference_row_by_row():
    got = randomized_position_ids(6, 40, batch=3, seed=7)
    rng = np.random.default_rng(7)
    want = np.stack([reference.randomized_position_ids(6, 40, rng) for _ in range(3)])
    assert got.dtype == np.int64 and got.shape == (3, 6)
    np.testing.assert_array_equal(got, want)


def test_randomized_is_sorted_distinct_and_in_range():
    ids = randomized_position_ids(50, 64, batch=20, seed=1)
    assert (np.diff(ids, axis=-1) > 0).all()
    assert ids.min() >= 0 and ids.max() < 64


def test_randomized_full_draw_is_every_position():
    np.testing.assert_array_equal(randomized_position_ids(9, 9, seed=0), np.arange(9))
    assert randomized_position_ids(0, 5, seed=0).shape == (0,)


def test_randomized_covers_the_whole_range():
    # Positions are drawn from all of range(max_len), not only the first n.
    ids = randomized_position_ids(3, 30, batch=200, seed=2)
    assert set(np.unique(ids)) == set(range(30))


def test_randomized_deterministic_given_seed_and_generator():
    a = randomized_position_ids(5, 100, batch=2, seed=123)
    b = randomized_position_ids(5, 100, batch=2, seed=123)
    np.testing.assert_array_equal(a, b)
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    np.testing.assert_array_equal(
        randomized_position_ids(5, 100, seed=g1), randomized_position_ids(5, 100, seed=g2)
    )
    # The caller's generator is advanced: a second draw differs.
    assert not np.array_equal(
        randomized_position_ids(5, 100, seed=g1), randomized_position_ids(5, 100, seed=5)
    )


def test_randomized_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="n must be <= max_len"):
        randomized_position_ids(11, 10)
    with pytest.raises(ValueError, match="max_len"):
        randomized_position_ids(0, 0)
    with pytest.raises(ValueError, match="n"):
        randomized_position_ids(-1, 10)
    with pytest.raises(TypeError, match="n"):
        randomized_position_ids(2.0, 10)
    with pytest.raises(ValueError, match="batch"):
        randomized_position_ids(2, 10, batch=0)
    with pytest.raises(TypeError, match="seed"):
        randomized_position_ids(2, 10, seed="x")
    with pytest.raises(ValueError, match="seed"):
        randomized_position_ids(2, 10, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        randomized_position_ids(2, 10, seed=np.random.RandomState(0))


# --- PoSE (Zhu et al. 2023) ---------------------------------------------------


def test_pose_matches_reference_row_by_row():
    got = pose_position_ids(8, 50, batch=4, seed=3)
    rng = np.random.default_rng(3)
    want = np.stack([reference.pose_position_ids(8, 50, rng) for _ in range(4)])
    assert got.dtype == np.int64 and got.shape == (4, 8)
    np.testing.assert_array_equal(got, want)


def _chunks(row):
    """(length of the first chunk, skip of the second) of one PoSE row."""
    jumps = np.flatnonzero(np.diff(row) != 1)
    assert len(jumps) <= 1, row
    first = int(jumps[0]) + 1 if len(jumps) else len(row)
    return first, int(row[-1] - (len(row) - 1))


def test_pose_two_chunks_as_train_pose_draws_them():
    n, target = 9, 30
    ids = pose_position_ids(n, target, batch=400, seed=4)
    assert (ids[:, 0] == 0).all()  # the first chunk's skip is 0
    assert (np.diff(ids, axis=-1) >= 1).all() and ids.max() <= target - 1
    firsts, skips = zip(*(_chunks(r) for r in ids))
    # A row whose skip is 0 is one run, so its first chunk is not seen.
    seen = {f for f, s in zip(firsts, skips) if s}
    assert seen == set(range(1, (n + 1) // 2 + 1))  # randint(1, (n + 1) // 2)
    assert set(skips) == set(range(0, target - n + 1))  # randint(0, target - n)


def test_pose_hand_derived_edges():
    # n == target: no room to skip, the ids are 0..n-1.
    np.testing.assert_array_equal(pose_position_ids(5, 5, seed=0), np.arange(5))
    # n == 1: one token at 0 (first chunk of 1, empty second chunk).
    np.testing.assert_array_equal(
        pose_position_ids(1, 100, batch=3, seed=0), np.zeros((3, 1), np.int64)
    )


def test_pose_deterministic_given_seed():
    np.testing.assert_array_equal(
        pose_position_ids(16, 256, seed=9), pose_position_ids(16, 256, seed=9)
    )


def test_pose_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="n must be <= target_len"):
        pose_position_ids(10, 9)
    with pytest.raises(ValueError, match="n"):
        pose_position_ids(0, 9)
    with pytest.raises(TypeError, match="target_len"):
        pose_position_ids(4, "9")
    with pytest.raises(ValueError, match="batch"):
        pose_position_ids(4, 9, batch=-2)


# --- the ids work as positions -------------------------------------------------


@pytest.mark.parametrize("sampler", [randomized_position_ids, pose_position_ids])
def test_sampled_ids_work_as_positions(sampler):
    ids = sampler(6, 64, batch=2, seed=10)
    x = np.random.default_rng(11).normal(size=(2, 3, 6, 8))
    got = posenc.apply_rope(x, ids)
    want = posenc.reference.apply_rope(x, ids[:, None, :])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    table = posenc.sinusoid(ids[0], 8, dtype=np.float64)
    np.testing.assert_allclose(
        table, posenc.reference.sinusoid(ids[0].astype(float), 8), atol=1e-12
    )
    rel = ids[0][None, :] - ids[0][:, None]
    buckets = posenc.relative_position_bucket(
        rel, bidirectional=True, num_buckets=32, max_distance=64
    )
    want_b = posenc.reference.relative_position_bucket(
        rel, bidirectional=True, num_buckets=32, max_distance=64
    )
    np.testing.assert_array_equal(buckets, want_b)
    np.testing.assert_array_equal(
        posenc.deberta_log_bucket(rel, 8, 64), posenc.reference.deberta_log_bucket(rel, 8, 64)
    )


# --- Llama 4's iRoPE pattern ---------------------------------------------------


def _text_config(**kwargs):
    transformers = pytest.importorskip("transformers")
    base = dict(
        hidden_size=16,
        intermediate_size=32,
        intermediate_size_mlp=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        num_local_experts=2,
        vocab_size=32,
    )
    base.update(kwargs)
    return transformers.Llama4TextConfig(**base)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_hidden_layers=8),
        dict(num_hidden_layers=7, no_rope_layer_interval=3),
        dict(num_hidden_layers=5, no_rope_layers=[1, 0, 0, 1, 1]),
        dict(
            num_hidden_layers=3,
            no_rope_layers=[0, 1, 1, 0],
            layer_types=["full_attention", "chunked_attention", "full_attention"],
        ),
        dict(num_hidden_layers=4, attention_chunk_size=None),
        dict(num_hidden_layers=6, interleave_moe_layer_step=2, use_qk_norm=False),
        dict(num_hidden_layers=4, no_rope_layers=[]),
    ],
)
def test_irope_layers_match_transformers_config_and_modules(kwargs):
    pytest.importorskip("torch")
    from transformers.models.llama4 import modeling_llama4

    config = _text_config(**kwargs)
    got = irope_layers(config)
    assert isinstance(got, IRoPELayers)
    layers = config.num_hidden_layers
    attn = [modeling_llama4.Llama4TextAttention(config, i) for i in range(layers)]
    assert got.rope == tuple(bool(a.use_rope) for a in attn)
    assert got.qk_norm == tuple(hasattr(a, "qk_norm") for a in attn)
    assert got.temperature_tuning == tuple(
        a.attn_temperature_tuning and not a.use_rope for a in attn
    )
    assert got.layer_types == tuple(config.layer_types[:layers])
    assert got.moe == tuple(i in config.moe_layers for i in range(layers))
    assert got.attention_chunk_size == config.attention_chunk_size
    # the same from the dict of its keys, and from the twin
    assert irope_layers(kwargs | {"num_hidden_layers": layers}) == got
    flags, nope = reference.irope_rope_layers(
        layers, kwargs.get("no_rope_layers"), kwargs.get("no_rope_layer_interval", 4)
    )
    assert list(got.rope) == flags and list(got.nope_layers) == nope


def test_irope_layers_of_llama4_config_reads_text_config():
    transformers = pytest.importorskip("transformers")
    text = _text_config(num_hidden_layers=8, no_rope_layer_interval=2)
    full = transformers.Llama4Config(text_config=text.to_dict())
    assert irope_layers(full) == irope_layers(text)
    assert irope_layers(
        {"text_config": {"num_hidden_layers": 8, "no_rope_layer_interval": 2}}
    ) == irope_layers(text)


def test_irope_layers_hand_derived_scout_defaults():
    # Llama4TextConfig's defaults: 48 layers, every 4th NoPE, chunks of 8192.
    got = irope_layers({})
    assert got.nope_layers == tuple(range(3, 48, 4))
    assert got.layer_types[:4] == ("chunked_attention",) * 3 + ("full_attention",)
    assert got.attention_chunk_size == 8192
    assert str(got).endswith("RRRN" * 12 + ")")


def test_irope_layers_bad_config_names_the_key():
    with pytest.raises(TypeError, match="config"):
        irope_layers(42)
    with pytest.raises(ValueError, match="no_rope_layers"):
        irope_layers({"num_hidden_layers": 4, "no_rope_layers": [1, 0]})
    with pytest.raises(ValueError, match="no_rope_layers"):
        irope_layers({"num_hidden_layers": 2, "no_rope_layers": [1, 2]})
    with pytest.raises(ValueError, match="attention_chunk_size"):
        irope_layers({"num_hidden_layers": 2, "attention_chunk_size": 0})
    with pytest.raises(ValueError, match="layer_types"):
        irope_layers(
            {"num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"]}
        )
    with pytest.raises(ValueError, match="attention_chunk_size"):
        irope_layers(
            {
                "num_hidden_layers": 1,
                "attention_chunk_size": None,
                "layer_types": ["chunked_attention"],
            }
        )
    with pytest.raises(ValueError, match="no_rope_layers"):
        irope_layers({"num_hidden_layers": 2, "no_rope_layers": [1, 0, 1]})
    with pytest.raises(ValueError, match="layer_types"):
        irope_layers({"num_hidden_layers": 2, "layer_types": ["full_attention"] * 3})
    with pytest.raises(ValueError, match="no_rope_layer_interval"):
        irope_layers({"num_hidden_layers": 2, "no_rope_layer_interval": 0})


# --- the chunked mask -----------------------------------------------------------


@pytest.mark.parametrize("q_len,chunk", [(1, 1), (7, 3), (12, 4), (5, 8)])
def test_chunked_mask_matches_transformers_prefill(q_len, chunk):
    torch = pytest.importorskip("torch")
    from transformers.masking_utils import create_chunked_causal_mask

    config = _text_config(num_hidden_layers=4, attention_chunk_size=chunk)
    config._attn_implementation = "eager"
    embeds = torch.zeros(1, q_len, 16)
    mask = create_chunked_causal_mask(
        config=config,
        inputs_embeds=embeds,
        attention_mask=None,
        cache=None,
        position_ids=torch.arange(q_len)[None],
    )
    want = (mask[0, 0] == 0).numpy()  # eager: 0 where seen, -inf where not
    got = chunked_causal_mask(q_len, chunk_size=chunk)
    assert got.dtype == np.bool_ and got.shape == (q_len, q_len)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, reference.chunked_causal_mask(q_len, q_len, chunk, 0))


@pytest.mark.parametrize("q_len,k_len,chunk", [(1, 9, 4), (3, 11, 4), (2, 5, 2), (1, 8, 8)])
def test_chunked_mask_decoding_matches_transformers_mask_function(q_len, k_len, chunk):
    torch = pytest.importorskip("torch")
    from transformers.masking_utils import chunked_causal_mask_function, sdpa_mask

    q_offset = k_len - q_len
    fn = chunked_causal_mask_function(chunk, torch.zeros(1, dtype=torch.long))
    want = sdpa_mask(
        batch_size=1,
        q_length=q_len,
        kv_length=k_len,
        q_offset=q_offset,
        kv_offset=0,
        mask_function=fn,
        allow_is_causal_skip=False,
    )[0, 0].numpy()
    np.testing.assert_array_equal(chunked_causal_mask(q_len, k_len, chunk_size=chunk), want)
    np.testing.assert_array_equal(
        chunked_causal_mask(q_len, chunk_size=chunk, q_offset=q_offset), want
    )


def test_chunked_mask_hand_derived():
    want = np.array(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 0, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 0, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(chunked_causal_mask(5, chunk_size=2), want)
    np.testing.assert_array_equal(chunked_causal_mask(2, 5, chunk_size=2), want[3:])


def test_chunked_mask_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_causal_mask(3, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size"):
        chunked_causal_mask(3, chunk_size=2.0)
    with pytest.raises(ValueError, match="q_len"):
        chunked_causal_mask(0, chunk_size=2)
    with pytest.raises(ValueError, match="k_len"):
        chunked_causal_mask(4, 3, chunk_size=2)
    with pytest.raises(ValueError, match="q_offset"):
        chunked_causal_mask(4, chunk_size=2, q_offset=-1)
    with pytest.raises(ValueError, match="q_len"):
        chunked_causal_mask(2**40, chunk_size=2)
