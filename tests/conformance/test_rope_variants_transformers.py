"""RoPE variants beyond the five classic families, against the transformers
class of a model that uses each.

- proportional (p-RoPE): ``ROPE_INIT_FUNCTIONS["proportional"]`` and
  Gemma 4's ``Gemma4TextRotaryEmbedding`` + ``apply_rotary_pos_emb`` on its
  full-attention layers, read from a ``Gemma4TextConfig`` object whose
  full-attention layers have their own head_dim (``per_layer_config``).
"""

import types

import numpy as np
import pytest

import posenc
from posenc import reference


def _gemma4_config(hf, head_dim=64, global_head_dim=128, fraction=0.25, theta=1e6):
    return hf.Gemma4TextConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        global_head_dim=global_head_dim,
        num_hidden_layers=6,
        intermediate_size=512,
        vocab_size=128,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": fraction,
                "rope_theta": theta,
            },
        },
    )


def _llama_proportional(hf, head_dim, params):
    return hf.LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        num_hidden_layers=1,
        intermediate_size=64,
        vocab_size=32,
        rope_parameters=dict(params),
    )


def _expected_frequencies(dim, base, fraction, factor):
    """The head's own frequencies for the first floor(fraction * dim / 2)
    pairs, 0 for the rest, over the factor: written from the definition."""
    kept = int(np.floor(fraction * dim / 2))
    i = np.arange(dim // 2, dtype=np.float64)
    return np.where(i < kept, base ** (-2 * i / dim), 0.0) / factor


@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("factor", [None, 8.0])
def test_proportional_frequencies_equal_transformers(hf, dim, fraction, factor):
    params = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": fraction}
    if factor is not None:
        params["factor"] = factor
    config = _llama_proportional(hf, dim, params)
    want, want_att = hf.init_functions["proportional"](config)
    want = want.double().numpy()
    exact = _expected_frequencies(dim, 1e6, fraction, factor or 1.0)
    for scaling in (dict(params), config):
        got, att = posenc.rope_frequencies(dim, scaling=scaling)
        assert att == want_att == 1.0
        # transformers forms them in float32: zeros exactly where it has them
        np.testing.assert_array_equal(got == 0, want == 0)
        np.testing.assert_allclose(got, want, rtol=2e-7, atol=0)
        np.testing.assert_allclose(got, exact, rtol=1e-15, atol=0)
    np.testing.assert_allclose(
        reference.rope_frequencies(dim, scaling=params)[0], exact, rtol=1e-15, atol=0
    )


def _gemma4_rotation(hf, config, x, position_ids, layer_type):
    torch = hf.torch
    rotary = hf.gemma4.Gemma4TextRotaryEmbedding(config)
    xt = torch.from_numpy(x)
    cos, sin = rotary(xt, torch.from_numpy(position_ids), layer_type)
    return hf.gemma4.apply_rotary_pos_emb(xt, cos, sin, unsqueeze_dim=1).numpy()


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_gemma4_full_attention_layers_rotate_as_transformers(hf, fraction):
    config = _gemma4_config(hf, fraction=fraction)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 12, 128)).astype(np.float32)
    # left padding: the second sequence starts three tokens late
    ids = np.stack([np.arange(12), np.maximum(np.arange(12) - 3, 0)]).astype(np.int64)
    want = _gemma4_rotation(hf, config, x, ids, "full_attention")
    got = posenc.apply_rope(x, ids, scaling=config, layer_type="full_attention")
    # transformers' float32 phase at positions < 12: a few float32 ulps
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    # the pairs past the fraction pass through unchanged, in both halves
    kept = int(fraction * 128 // 2)
    np.testing.assert_array_equal(got[..., kept:64], x[..., kept:64])
    np.testing.assert_array_equal(got[..., 64 + kept :], x[..., 64 + kept :])
    # read as partial rotary (the frequencies of a 32-wide head) it is wrong
    partial = posenc.apply_rope(x, ids, base=1e6, rotary_dim=int(fraction * 128))
    assert np.abs(partial - want).max() > 0.5


def test_gemma4_sliding_layers_read_their_own_head_dim(hf):
    config = _gemma4_config(hf)
    x = np.random.default_rng(5).standard_normal((1, 4, 9, 64)).astype(np.float32)
    ids = np.arange(9, dtype=np.int64)[None]
    want = _gemma4_rotation(hf, config, x, ids, "sliding_attention")
    got = posenc.apply_rope(x, ids, scaling=config, layer_type="sliding_attention")
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def test_gemma4_config_needs_a_layer_type_and_its_head_dim(hf):
    config = _gemma4_config(hf)
    # transformers itself refuses to give one head_dim for every layer
    with pytest.raises(ValueError, match="full_attention"):
        posenc.rope_frequencies(128, scaling=config)
    # the full-attention layers' head_dim is global_head_dim (128), not 64
    with pytest.raises(ValueError, match="128"):
        posenc.apply_rope(np.zeros((1, 4, 3, 64)), scaling=config, layer_type="full_attention")
    inv, _ = posenc.rope_frequencies(128, scaling=config, layer_type="full_attention")
    np.testing.assert_allclose(inv, _expected_frequencies(128, 1e6, 0.25, 1.0), rtol=1e-15)


def test_proportional_rotary_dim_must_be_the_whole_head(hf):
    params = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25}
    x = np.random.default_rng(6).standard_normal((1, 2, 3, 64))
    np.testing.assert_array_equal(
        posenc.apply_rope(x, scaling=params, rotary_dim=64), posenc.apply_rope(x, scaling=params)
    )
    with pytest.raises(ValueError, match="rotary_dim"):
        posenc.apply_rope(x, scaling=params, rotary_dim=16)
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        posenc.rope_frequencies(64, scaling=dict(params, partial_rotary_factor=1.5))


# ---------------------------------------------------------------- around RoPE


@pytest.mark.parametrize("n_heads,head_dim,cols", [(1, 2, 3), (4, 16, 8), (2, 64, 0)])
def test_permute_rope_weight_equals_transformers_conversion(hf, n_heads, head_dim, cols):
    from transformers.core_model_loading import PermuteForRope

    rng = np.random.default_rng(7)
    shape = (n_heads * head_dim, cols) if cols else (n_heads * head_dim,)
    w = rng.standard_normal(shape)
    config = types.SimpleNamespace(num_attention_heads=n_heads)
    to_half = PermuteForRope()._permute_for_rope(hf.torch.from_numpy(w), config).numpy()
    back = PermuteForRope(inverse=True)._permute_for_rope(hf.torch.from_numpy(to_half), config)
    np.testing.assert_array_equal(posenc.permute_rope_weight(w, n_heads), to_half)
    np.testing.assert_array_equal(
        posenc.permute_rope_weight(to_half, n_heads, to="interleaved"), back.numpy()
    )
    np.testing.assert_array_equal(back.numpy(), w)


def test_a_permuted_checkpoint_gives_the_same_scores_in_the_half_layout():
    # scores of q and k rotated in the interleaved layout with the original
    # weights equal those rotated in the half layout with permuted weights
    rng = np.random.default_rng(8)
    n_heads, head_dim, hidden, seq = 3, 8, 12, 5
    wq, wk = rng.standard_normal((2, n_heads * head_dim, hidden))
    h = rng.standard_normal((seq, hidden))

    def scores(wq, wk, layout):
        q = (h @ wq.T).reshape(seq, n_heads, head_dim).transpose(1, 0, 2)
        k = (h @ wk.T).reshape(seq, n_heads, head_dim).transpose(1, 0, 2)
        q, k = posenc.apply_rope(q, layout=layout), posenc.apply_rope(k, layout=layout)
        return q @ k.transpose(0, 2, 1)

    want = scores(wq, wk, "interleaved")
    got = scores(
        posenc.permute_rope_weight(wq, n_heads), posenc.permute_rope_weight(wk, n_heads), "half"
    )
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_permute_rope_weight_refuses_what_it_cannot_split():
    with pytest.raises(ValueError, match="n_heads"):
        posenc.permute_rope_weight(np.zeros((12, 4)), 4)  # head_dim 3 is odd
    with pytest.raises(ValueError, match="to"):
        posenc.permute_rope_weight(np.zeros((8, 4)), 2, to="meta")
    with pytest.raises(ValueError, match="weight"):
        posenc.permute_rope_weight(np.zeros((2, 8, 4)), 2)


def test_positions_from_cu_seqlens_give_transformers_boundaries_back(hf):
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    cu = np.array([0, 5, 6, 13, 20], dtype=np.int32)
    pos = posenc.positions_from_cu_seqlens(cu)
    np.testing.assert_array_equal(pos, [0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6])
    (cu_q, cu_k), _ = prepare_fa_kwargs_from_position_ids(hf.torch.from_numpy(pos)[None])
    np.testing.assert_array_equal(cu_q.numpy(), cu)
    np.testing.assert_array_equal(posenc.positions_from_cu_seqlens(cu, start=2), pos + 2)
    # a packed row rotates as its sequences would apart
    x = np.random.default_rng(9).standard_normal((2, 20, 16))
    packed = posenc.apply_rope(x, pos)
    for a, b in zip(cu[:-1], cu[1:]):
        np.testing.assert_array_equal(packed[:, a:b], posenc.apply_rope(x[:, a:b]))


def test_positions_from_cu_seqlens_refuses_bad_boundaries():
    with pytest.raises(ValueError, match="start at 0"):
        posenc.positions_from_cu_seqlens([1, 4])
    with pytest.raises(ValueError, match="non-decreasing"):
        posenc.positions_from_cu_seqlens([0, 4, 2])
    with pytest.raises(TypeError, match="cu_seqlens"):
        posenc.positions_from_cu_seqlens([0.0, 4.0])
    assert posenc.positions_from_cu_seqlens([0]).shape == (0,)


def test_attention_temperature_equals_llama4s_formula(hf):
    torch = hf.torch
    from transformers import Llama4TextConfig

    config = Llama4TextConfig()
    positions = np.array([0, 1, 8190, 8191, 8192, 20000, 2**20 - 1, 10**7])
    # Llama4TextAttention's expression, in float64
    p = torch.from_numpy(positions).double()
    want = torch.log1p(torch.floor((p + 1.0) / config.floor_scale)) * config.attn_scale + 1.0
    got = posenc.attention_temperature(
        positions, floor_scale=config.floor_scale, attn_scale=config.attn_scale
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-15)
    # hand-derived: 1 below floor_scale - 1, 1 + 0.1 log 2 from there
    assert got[0] == got[2] == 1.0 and got[3] == 1.0 + 0.1 * np.log(2.0)
    assert posenc.attention_temperature(4).shape == (4,)


# ---------------------------------------------------------------- M-RoPE position ids


def _qwen_index(hf, module, cls, merge, tokens_per_second=None):
    """transformers' get_rope_index of `cls`, on a stand-in with the config
    values it reads (no weights)."""
    torch = hf.torch
    vision = types.SimpleNamespace(spatial_merge_size=merge, tokens_per_second=tokens_per_second)
    fake = types.SimpleNamespace(config=types.SimpleNamespace(vision_config=vision))
    fake.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, fake)

    def index(types_, images=None, videos=None, mask=None, **kw):
        t = torch.from_numpy(np.asarray(types_, dtype=np.int64))
        pos, delta = cls.get_rope_index(
            fake,
            torch.zeros_like(t),
            t,
            image_grid_thw=None if images is None else torch.tensor(images),
            video_grid_thw=None if videos is None else torch.tensor(videos),
            attention_mask=None if mask is None else torch.from_numpy(np.asarray(mask)),
            **kw,
        )
        return pos.numpy(), delta.numpy()

    return index


def _prompt(parts):
    """token types of text runs (int) and vision items ((kind, t, h, w), merge 2)."""
    out = []
    for part in parts:
        if isinstance(part, int):
            out += [0] * part
        else:
            kind, t, h, w = part
            out += [kind] * (t * h * w // 4)
    return out


def test_mrope_position_ids_equal_qwen2_vl(hf):
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    index = _qwen_index(hf, None, Qwen2VLModel, 2)
    a = _prompt([3, (1, 1, 4, 6), 5, (2, 3, 4, 4), 2])
    b = _prompt([1, (1, 1, 6, 2), 4])
    b = [0] * (len(a) - len(b)) + b  # left padding
    mask = [
        [1] * len(a),
        [0] * (len(a) - len(_prompt([1, (1, 1, 6, 2), 4])))
        + [1] * len(_prompt([1, (1, 1, 6, 2), 4])),
    ]
    images, videos = [[1, 4, 6], [1, 6, 2]], [[3, 4, 4]]
    want, want_delta = index([a, b], images, videos, mask)
    got, delta = posenc.mrope_position_ids(
        [a, b], image_grids=images, video_grids=videos, attention_mask=mask
    )
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(delta, want_delta)
    # one sequence, hand-checked start: text 0..2, then an image at 3
    one, d = posenc.mrope_position_ids(_prompt([3, (1, 1, 4, 4), 1]), image_grids=[[1, 4, 4]])
    np.testing.assert_array_equal(
        one, [[0, 1, 2, 3, 3, 3, 3, 5], [0, 1, 2, 3, 3, 4, 4, 5], [0, 1, 2, 3, 4, 3, 4, 5]]
    )
    assert d.tolist() == [6 - 8]


def test_mrope_position_ids_equal_qwen2_5_vl_time_intervals(hf):
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    index = _qwen_index(hf, None, Qwen2_5_VLModel, 2, tokens_per_second=25)
    a = _prompt([2, (2, 3, 4, 2), 3, (1, 1, 2, 2), 1, (2, 2, 2, 2), 2])
    seconds = hf.torch.tensor([0.5, 1 / 3], dtype=hf.torch.float32)
    want, want_delta = index([a], [[1, 2, 2]], [[3, 4, 2], [2, 2, 2]], second_per_grid_ts=seconds)
    got, delta = posenc.mrope_position_ids(
        [a],
        image_grids=[[1, 2, 2]],
        video_grids=[[3, 4, 2], [2, 2, 2]],
        video_time_intervals=25 * seconds.numpy(),
    )
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(delta, want_delta)


def test_mrope_position_ids_equal_qwen3_vl_frames_apart(hf):
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    index = _qwen_index(hf, None, Qwen3VLModel, 2)
    # a video of 3 frames, each frame its own run after a timestamp
    a = _prompt([2, (2, 1, 4, 4), 1, (2, 1, 4, 4), 1, (2, 1, 4, 4), 3])
    want, want_delta = index([a], None, [[3, 4, 4]])
    got, delta = posenc.mrope_position_ids([a], video_grids=[[3, 4, 4]], video_frames_apart=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(delta, want_delta)


def test_mrope_position_ids_refuse_prompts_that_do_not_add_up():
    with pytest.raises(ValueError, match="makes 4"):
        posenc.mrope_position_ids([0, 1, 1, 1, 0], image_grids=[[1, 4, 4]])
    with pytest.raises(ValueError, match="image_grids gives 2"):
        posenc.mrope_position_ids(_prompt([1, (1, 1, 4, 4)]), image_grids=[[1, 4, 4], [1, 2, 2]])
    with pytest.raises(ValueError, match="more images"):
        posenc.mrope_position_ids(
            _prompt([1, (1, 1, 4, 4), 1, (1, 1, 2, 2)]), image_grids=[[1, 4, 4]]
        )
    with pytest.raises(ValueError, match="0 \\(text\\)"):
        posenc.mrope_position_ids([0, 3])
    with pytest.raises(ValueError, match="spatial_merge_size"):
        posenc.mrope_position_ids([1] * 3, image_grids=[[1, 1, 3]])
    with pytest.raises(ValueError, match="video_time_intervals"):
        posenc.mrope_position_ids([2] * 4, video_grids=[[1, 4, 4]], video_time_intervals=[1, 2])
