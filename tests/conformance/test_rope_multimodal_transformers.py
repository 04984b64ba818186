"""Multimodal and vision RoPE against the transformers classes of the models
that use them (configs built from transformers' config classes, no weights).

- M-RoPE: Qwen2-VL's ``Qwen2VLRotaryEmbedding`` and Qwen2.5-VL's
  ``Qwen2_5_VLRotaryEmbedding`` (sections in turn, their
  ``recomposition_frequencies``), Qwen3-VL's ``Qwen3VLTextRotaryEmbedding``
  (interleaved sections), each with its module's ``apply_rotary_pos_emb``.
- 2-D vision RoPE: Qwen2-VL's and Qwen3-VL's vision towers
  (``Qwen2VLVisionRotaryEmbedding``, ``Qwen3VLVisionRotaryEmbedding``, the
  patch order of ``transformers.vision_utils.get_vision_position_ids``,
  ``apply_rotary_pos_emb_vision``), and Llama 4's vision encoder
  (``Llama4VisionRotaryEmbedding`` and ``vision_apply_rotary_emb``).

transformers forms the phases in float32.  The float64 comparisons feed the
classes' own recomposition and rotation functions with cos and sin formed
in float64 from the definition; the float32 ones run the classes whole.
"""

import numpy as np
import pytest

import posenc
from posenc import reference

# ---------------------------------------------------------------- M-RoPE


def _text_model(hf, name):
    """(config, rotary class, its module) of a model's text tower at its real
    head size and sections (transformers' config classes, no weights)."""
    if name in ("qwen2_vl", "qwen2_5_vl"):  # the same text tower, two classes
        prefix = {"qwen2_vl": "Qwen2VL", "qwen2_5_vl": "Qwen2_5_VL"}[name]
        config = getattr(hf.t, f"{prefix}TextConfig")(
            hidden_size=256,
            num_attention_heads=2,
            num_key_value_heads=1,
            rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24], "rope_theta": 1e6},
        )
        module = getattr(hf, name)
        return config, getattr(module, f"{prefix}RotaryEmbedding"), module
    config = hf.t.Qwen3VLTextConfig(
        hidden_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        rope_parameters={
            "rope_type": "default",
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
            "rope_theta": 5e6,
        },
    )
    return config, hf.qwen3_vl.Qwen3VLTextRotaryEmbedding, hf.qwen3_vl


def _prompt_ids():
    """A real two-sequence prompt: text, an image, text, a video, text; the
    second sequence left-padded, with an image of its own."""
    types_a = [0] * 3 + [1] * 6 + [0] * 5 + [2] * 12 + [0] * 2
    types_b = [0] * 1 + [1] * 3 + [0] * 4
    types_b = [0] * (len(types_a) - len(types_b)) + types_b
    mask = [[1] * len(types_a), [0] * (len(types_a) - 8) + [1] * 8]
    ids, _ = posenc.mrope_position_ids(
        [types_a, types_b],
        image_grids=[[1, 4, 6], [1, 6, 2]],
        video_grids=[[3, 4, 4]],
        attention_mask=mask,
    )
    return ids


def _mrope64(hf, rotary, ids, base, head_dim):
    """cos, sin (batch, seq, head_dim) as the class recomposes them, from
    float64 angles ids * base**(-2i/head_dim) (the frequencies as
    rope_frequencies gives them: the same to an ulp, which at position 1e5
    would move the phase by 1e-11)."""
    torch = hf.torch
    inv_freq, _ = posenc.rope_frequencies(head_dim, base=base)
    exact = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    np.testing.assert_allclose(inv_freq, exact, rtol=4e-16)
    np.testing.assert_allclose(rotary.inv_freq.numpy(), exact, rtol=4e-7)  # its float32
    angles = ids[..., None].astype(np.float64) * inv_freq
    cos = rotary.recomposition_frequencies(torch.from_numpy(np.cos(angles)))
    sin = rotary.recomposition_frequencies(torch.from_numpy(np.sin(angles)))
    return cos, sin


MODELS = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("start", [0, 100000])
def test_mrope_equals_transformers_in_float64(hf, name, start):
    torch = hf.torch
    config, cls, module = _text_model(hf, name)
    rotary = cls(config)
    base = config.rope_parameters["rope_theta"]
    ids = _prompt_ids() + start  # start: decoding far into a long context
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 3, ids.shape[-1], 128))
    k = rng.standard_normal((2, 1, ids.shape[-1], 128))
    cos, sin = _mrope64(hf, rotary, ids, base, 128)
    want_q, want_k = module.apply_rotary_pos_emb(
        torch.from_numpy(q), torch.from_numpy(k), cos, sin, unsqueeze_dim=1
    )
    for x, want in ((q, want_q.numpy()), (k, want_k.numpy())):
        got = posenc.apply_rope(x, ids, scaling=config)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.abs(x).max())
        # the twin forms its own frequencies: an ulp of one moves a phase by
        # up to position * 2**-53
        phase = 1e-13 + 4 * np.abs(ids).max() * 2.0**-53
        np.testing.assert_allclose(
            reference.apply_rope(x, ids, scaling=dict(config.rope_parameters)),
            want,
            rtol=0,
            atol=phase * np.abs(x).max(),
        )
    c64, s64 = posenc.rope_cos_sin(ids, 128, scaling=config, dtype="float64")
    np.testing.assert_allclose(c64, cos.numpy(), rtol=0, atol=1e-13)
    np.testing.assert_allclose(s64, sin.numpy(), rtol=0, atol=1e-13)
    # the same sections given as keywords, and the (batch, seq, heads, dim) layout
    sections = config.rope_parameters["mrope_section"]
    interleaved = name == "qwen3_vl"
    got = posenc.apply_rope(
        np.swapaxes(q, 1, 2),
        ids,
        base=base,
        mrope_section=sections,
        mrope_interleaved=interleaved,
        seq_axis=-3,
    )
    np.testing.assert_allclose(
        np.swapaxes(got, 1, 2), want_q.numpy(), rtol=0, atol=1e-13 * np.abs(q).max()
    )
    # float32: within a float32 rounding or two of the float64 value
    q32 = q.astype(np.float32)
    want32 = module.apply_rotary_pos_emb(
        torch.from_numpy(q32.astype(np.float64)), torch.from_numpy(k), cos, sin, unsqueeze_dim=1
    )[0].numpy()
    got32 = posenc.apply_rope(q32, ids, scaling=config)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want32, rtol=0, atol=2**-22 * 2 * np.abs(q32).max())
    c32, s32 = posenc.rope_cos_sin(ids, 128, scaling=config)
    np.testing.assert_allclose(c32, cos.numpy(), rtol=2**-24, atol=2**-25)
    np.testing.assert_allclose(s32, sin.numpy(), rtol=2**-24, atol=2**-25)


@pytest.mark.parametrize("name", MODELS)
def test_a_real_prompt_rotates_as_the_model_level_rotary_class(hf, name):
    """ids from posenc.mrope_position_ids -> apply_rope, against the model's
    rotary class run whole in float32 (its forward) and its
    apply_rotary_pos_emb."""
    torch = hf.torch
    config, cls, module = _text_model(hf, name)
    ids = _prompt_ids()
    rng = np.random.default_rng(8)
    q = rng.standard_normal((2, 4, ids.shape[-1], 128)).astype(np.float32)
    qt = torch.from_numpy(q)
    cos, sin = cls(config)(qt, torch.from_numpy(ids))
    want, _ = module.apply_rotary_pos_emb(qt, qt, cos, sin, unsqueeze_dim=1)
    got = posenc.apply_rope(q, ids, scaling=config)
    # transformers' float32 phases at positions below 40: a few float32 ulps of 40
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-5 * np.abs(q).max())
    # the class's cos and sin are those of rope_cos_sin (within its float32 phase)
    c, s = posenc.rope_cos_sin(ids, 128, scaling=config)
    np.testing.assert_allclose(c, cos.numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(s, sin.numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_text_tokens_rotate_as_plain_rope(hf, name):
    # three equal rows (a text-only prompt): M-RoPE is RoPE, bit for bit
    config, _, _ = _text_model(hf, name)
    ids, _ = posenc.mrope_position_ids(np.zeros((2, 50), np.int64))
    assert (ids == ids[:1]).all()
    rng = np.random.default_rng(9)
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal((2, 3, 50, 128)).astype(dtype)
        got = posenc.apply_rope(x, ids + 1000, scaling=config)
        plain = posenc.apply_rope(x, ids[0] + 1000, base=config.rope_parameters["rope_theta"])
        np.testing.assert_array_equal(got, plain)
    c, s = posenc.rope_cos_sin(ids, 128, scaling=config)
    c1, s1 = posenc.rope_cos_sin(ids[0], 128, base=config.rope_parameters["rope_theta"])
    np.testing.assert_array_equal(c, c1)
    np.testing.assert_array_equal(s, s1)


def test_mrope_config_with_plain_positions_is_refused(hf):
    config, _, _ = _text_model(hf, "qwen2_vl")
    x = np.zeros((2, 2, 8, 128))
    for positions in (None, np.arange(8), np.zeros((2, 8), np.int64)):
        with pytest.raises(ValueError, match="mrope_section .* leading axis of 3 rows"):
            posenc.apply_rope(x, positions, scaling=config)
    with pytest.raises(ValueError, match="mrope_section .* leading axis of 3 rows"):
        posenc.rope_cos_sin(8, 128, scaling=config)
    # three rows without sections: not guessed
    ids = np.zeros((3, 2, 8), np.int64)
    with pytest.raises(ValueError, match="mrope_section="):
        posenc.apply_rope(x, ids)
    # a Qwen2-VL config without sections (transformers' class would assume
    # [16, 24, 24]): not guessed either
    bare = hf.t.Qwen2VLTextConfig(hidden_size=256, num_attention_heads=2, num_key_value_heads=1)
    assert "mrope_section" not in bare.rope_parameters
    with pytest.raises(ValueError, match="mrope_section="):
        posenc.apply_rope(x, ids, scaling=bare)


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen3_vl"])
def test_sections_given_with_a_config_without_them_take_its_models_layout(hf, name):
    # a text config that states no sections (the class uses its default ones),
    # the sections passed as mrope_section=: the config's model decides how
    # the rows share the pairs (read as Qwen2-VL's runs, Qwen3-VL's cos
    # differed by up to 2.0)
    torch = hf.torch
    if name == "qwen2_vl":
        config = hf.t.Qwen2VLTextConfig(
            hidden_size=256, num_attention_heads=2, num_key_value_heads=1,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        )  # fmt: skip
        cls, module = hf.qwen2_vl.Qwen2VLRotaryEmbedding, hf.qwen2_vl
    else:
        config = hf.t.Qwen3VLTextConfig(
            hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
            rope_parameters={"rope_type": "default", "rope_theta": 5e6},
        )  # fmt: skip
        cls, module = hf.qwen3_vl.Qwen3VLTextRotaryEmbedding, hf.qwen3_vl
    assert "mrope_section" not in config.rope_parameters
    rotary = cls(config)
    sections = list(rotary.mrope_section)  # the class's default sections
    ids = _prompt_ids()
    rng = np.random.default_rng(10)
    q = rng.standard_normal((2, 4, ids.shape[-1], 128)).astype(np.float32)
    qt = torch.from_numpy(q)
    cos, sin = rotary(qt, torch.from_numpy(ids))
    want, _ = module.apply_rotary_pos_emb(qt, qt, cos, sin, unsqueeze_dim=1)
    c, s = posenc.rope_cos_sin(ids, 128, scaling=config, mrope_section=sections)
    np.testing.assert_allclose(c, cos.numpy(), rtol=0, atol=1e-5)  # float32 phases below 40
    np.testing.assert_allclose(s, sin.numpy(), rtol=0, atol=1e-5)
    got = posenc.apply_rope(q, ids, scaling=config, mrope_section=sections)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-5 * np.abs(q).max())
    # the same through the torch operator (the config carried as JSON)
    c_t, _ = posenc.rope_cos_sin(torch.from_numpy(ids), 128, scaling=config, mrope_section=sections)
    np.testing.assert_array_equal(c_t.numpy(), c)
    got_t = posenc.apply_rope(qt, torch.from_numpy(ids), scaling=config, mrope_section=sections)
    np.testing.assert_array_equal(got_t.numpy(), got)
    # the layout stated as the model has it is accepted, the other refused
    interleaved = name == "qwen3_vl"
    c2, _ = posenc.rope_cos_sin(
        ids, 128, scaling=config, mrope_section=sections, mrope_interleaved=interleaved
    )
    np.testing.assert_array_equal(c2, c)
    for call in (
        lambda: posenc.rope_cos_sin(
            ids, 128, scaling=config, mrope_section=sections, mrope_interleaved=not interleaved
        ),
        lambda: posenc.apply_rope(
            q, ids, scaling=config, mrope_section=sections, mrope_interleaved=not interleaved
        ),
    ):
        with pytest.raises(ValueError, match="mrope_interleaved = .* disagrees with scaling"):
            call()
    # the config's flag without its sections: read against the model's code
    stated = dict(config.to_dict())
    stated["rope_parameters"] = dict(stated["rope_parameters"], mrope_interleaved=interleaved)
    c3, _ = posenc.rope_cos_sin(ids, 128, scaling=stated, mrope_section=sections)
    np.testing.assert_array_equal(c3, c)
    stated["rope_parameters"]["mrope_interleaved"] = not interleaved
    with pytest.raises(ValueError, match="scaling\\['mrope_interleaved'\\] = .* rotary code"):
        posenc.rope_cos_sin(ids, 128, scaling=stated, mrope_section=sections)
    # posenc.torch.RotaryEmbedding with the sections: the model's layout too
    from posenc.torch import RotaryEmbedding

    module = RotaryEmbedding(config=config, mrope_section=sections)
    c_m, _ = module(qt, torch.from_numpy(ids))
    np.testing.assert_allclose(c_m.numpy(), cos.numpy(), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="mrope_interleaved = .* disagrees with scaling"):
        RotaryEmbedding(config=config, mrope_section=sections, mrope_interleaved=not interleaved)
    # a model's rotary code reads three rows
    with pytest.raises(ValueError, match="reads 3 rows"):
        posenc.rope_cos_sin(ids[:2], 128, scaling=config, mrope_section=[32, 32])


def test_sections_given_with_a_config_of_another_model_need_their_layout(hf):
    # a config whose model has no M-RoPE does not say how the rows share the pairs
    config = hf.t.LlamaConfig(
        hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=128
    )
    ids = _prompt_ids()
    with pytest.raises(ValueError, match="mrope_section with a config of model type 'llama'"):
        posenc.rope_cos_sin(ids, 128, scaling=config, mrope_section=[24, 20, 20])
    with pytest.raises(ValueError, match="pass mrope_interleaved="):
        posenc.apply_rope(np.zeros((2, 1, ids.shape[-1], 128)), ids, scaling=config,
                          mrope_section=[24, 20, 20])  # fmt: skip
    # stated, it is read as stated: the same as without the config
    base = config.rope_parameters["rope_theta"]
    for interleaved in (False, True):
        kw = dict(mrope_section=[24, 20, 20], mrope_interleaved=interleaved)
        c, _ = posenc.rope_cos_sin(ids, 128, scaling=config, **kw)
        np.testing.assert_array_equal(c, posenc.rope_cos_sin(ids, 128, base=base, **kw)[0])


# ---------------------------------------------------------------- 2-D vision RoPE


def _vision_model(hf, name):
    """(config, rotary class, module, head_dim) of a vision tower at its real size."""
    if name == "qwen2_vl":
        config = hf.t.Qwen2VLVisionConfig(embed_dim=1280, num_heads=16, depth=1)
        return config, hf.qwen2_vl.Qwen2VLVisionRotaryEmbedding, hf.qwen2_vl, 80
    config = hf.t.Qwen3VLVisionConfig(hidden_size=1152, num_heads=16, depth=1)
    return config, hf.qwen3_vl.Qwen3VLVisionRotaryEmbedding, hf.qwen3_vl, 72


GRIDS = [[1, 8, 12], [2, 4, 6], [1, 2, 2]]


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen3_vl"])
def test_vision_position_ids_equal_get_vision_position_ids(hf, name):
    torch = hf.torch
    want = hf.vision_utils.get_vision_position_ids(torch.tensor(GRIDS), 2).numpy()
    got = posenc.vision_position_ids(GRIDS, spatial_merge_size=2)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want.T)
    one = hf.vision_utils.get_vision_position_ids(torch.tensor([[1, 3, 5]]), 1).numpy()
    np.testing.assert_array_equal(posenc.vision_position_ids([1, 3, 5]), one.T)


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen3_vl"])
def test_vision_rope_equals_qwen_vision_towers(hf, name):
    torch = hf.torch
    config, cls, module, head_dim = _vision_model(hf, name)
    rotary = cls(config)
    base = config.rope_parameters["rope_theta"]
    ids = posenc.vision_position_ids(GRIDS, spatial_merge_size=2)
    n = ids.shape[1]
    rng = np.random.default_rng(10)
    q = rng.standard_normal((n, 16, head_dim))  # the tower's (seq, heads, head_dim)
    # float64: the class's recomposition of float64 cos/sin, the module's rotation
    spatial = head_dim // 2
    inv_freq, _ = posenc.rope_frequencies(spatial, base=base)
    exact = base ** (-np.arange(0, spatial, 2, dtype=np.float64) / spatial)
    np.testing.assert_allclose(inv_freq, exact, rtol=4e-16)
    np.testing.assert_allclose(rotary.inv_freq.numpy(), exact, rtol=4e-7)  # its float32
    angles = ids.T[..., None].astype(np.float64) * inv_freq  # (seq, 2, head_dim // 4)
    cos = rotary.recomposition_frequencies(torch.from_numpy(np.cos(angles)))
    sin = rotary.recomposition_frequencies(torch.from_numpy(np.sin(angles)))
    qt = torch.from_numpy(q)
    want, _ = module.apply_rotary_pos_emb(qt, qt, cos, sin, unsqueeze_dim=1)
    got = posenc.apply_rope(q, ids, axial=2, seq_axis=-3, base=base)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-13 * np.abs(q).max())
    np.testing.assert_allclose(
        reference.apply_rope(q, ids, axial=2, seq_axis=-3, base=base),
        want.numpy(),
        rtol=0,
        atol=1e-13 * np.abs(q).max(),
    )
    c, s = posenc.rope_cos_sin(ids, head_dim, axial=2, base=base, dtype="float64")
    np.testing.assert_allclose(c, cos.numpy(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(s, sin.numpy(), rtol=0, atol=1e-14)
    # float32 against the float64 value
    q32 = q.astype(np.float32)
    want32, _ = module.apply_rotary_pos_emb(
        torch.from_numpy(q32.astype(np.float64)), qt, cos, sin, unsqueeze_dim=1
    )
    got32 = posenc.apply_rope(q32, ids, axial=2, seq_axis=-3, base=base)
    np.testing.assert_allclose(got32, want32.numpy(), rtol=0, atol=2**-21 * np.abs(q32).max())
    # the tower's own float32 path: the class's forward and apply_rotary_pos_emb_vision
    cos32, sin32 = rotary(torch.from_numpy(q32), torch.from_numpy(ids.T.copy()))
    q32t = torch.from_numpy(q32)
    tower, _ = module.apply_rotary_pos_emb_vision(q32t, q32t, cos32, sin32)
    np.testing.assert_allclose(got32, tower.numpy(), rtol=0, atol=4e-6 * np.abs(q32).max())


def _llama4(hf):
    config = hf.t.Llama4VisionConfig(
        hidden_size=1408, num_attention_heads=16, image_size=336, patch_size=14
    )
    return config, hf.llama4.Llama4VisionRotaryEmbedding(config)


def test_llama4_vision_position_ids_are_the_class_positions(hf):
    config, rotary = _llama4(hf)
    side = config.image_size // config.patch_size
    ids = posenc.vision_position_ids(side, convention="llama4")
    assert ids.shape == (2, side * side + 1)
    # the class's angles of its slowest pair in each half give its positions
    # (column + 1, row + 1, and 0 for the class token) back exactly
    freqs = rotary.freqs_ci.numpy()[:, 0, :]  # (tokens, head_dim // 2), complex64
    half = freqs.shape[-1] // 2
    slow = config.rope_parameters["rope_theta"] ** (-(half - 1) * 2 / (2 * half))
    for row, pair in ((0, half - 1), (1, 2 * half - 1)):
        recovered = np.angle(freqs[:, pair].astype(np.complex128)) / slow
        np.testing.assert_allclose(recovered, ids[row], rtol=0, atol=1e-3)
    np.testing.assert_array_equal(ids[:, -1], [0, 0])


def test_llama4_vision_rope_equals_vision_apply_rotary_emb(hf):
    torch = hf.torch
    config, rotary = _llama4(hf)
    side = config.image_size // config.patch_size
    ids = posenc.vision_position_ids(side, convention="llama4")
    base = config.rope_parameters["rope_theta"]
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, ids.shape[1], 16, 88)).astype(np.float32)  # (b, seq, heads, d)
    qt = torch.from_numpy(q)
    want, _ = hf.llama4.vision_apply_rotary_emb(qt, qt, rotary.freqs_ci)
    options = dict(axial=2, layout="interleaved", seq_axis=-3, base=base)
    got = posenc.apply_rope(q, ids, **options)
    # the class forms everything in float32 (angles up to 25 radians)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=4e-6 * np.abs(q).max())
    # its complex table: posenc's float64 cos/sin within its float32 rounding
    c, s = posenc.rope_cos_sin(ids, 88, axial=2, layout="interleaved", base=base, dtype="float64")
    freqs = rotary.freqs_ci.numpy()[:, 0, :]
    np.testing.assert_allclose(c[:, ::2], freqs.real, rtol=0, atol=3e-6)
    np.testing.assert_allclose(s[:, ::2], freqs.imag, rtol=0, atol=3e-6)
    # the class token is not rotated
    np.testing.assert_array_equal(got[:, -1], q[:, -1])
    # float64 against the float64 twin
    q64 = q.astype(np.float64)
    np.testing.assert_allclose(
        posenc.apply_rope(q64, ids, **options),
        reference.apply_rope(q64, ids, **options),
        rtol=0,
        atol=1e-13 * np.abs(q64).max(),
    )


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen3_vl"])
def test_a_vision_config_is_read_as_axial_rope(hf, name):
    # rope_type "axial" (the towers' configs): axial=2, the head dimension as
    # the class derives it (Qwen2-VL's from embed_dim, not hidden_size)
    torch = hf.torch
    config, cls, module, head_dim = _vision_model(hf, name)
    assert config.rope_parameters["rope_type"] == "axial"
    rotary = cls(config)
    inv_freq, factor = posenc.rope_frequencies(head_dim, scaling=config)
    # the ladder of the class's buffer, once per axis
    np.testing.assert_allclose(inv_freq, np.tile(rotary.inv_freq.double().numpy(), 2), rtol=4e-7)
    assert factor == rotary.attention_scaling == 1.0
    ids = posenc.vision_position_ids(GRIDS, spatial_merge_size=2)
    q = np.random.default_rng(12).standard_normal((ids.shape[1], 16, head_dim)).astype(np.float32)
    got = posenc.apply_rope(q, ids, scaling=config, seq_axis=-3)
    np.testing.assert_array_equal(got, posenc.apply_rope(q, ids, axial=2, seq_axis=-3))
    q64 = q.astype(np.float64)
    np.testing.assert_allclose(
        posenc.apply_rope(q64, ids, scaling=config, seq_axis=-3),
        reference.apply_rope(q64, ids, scaling=dict(config.rope_parameters), seq_axis=-3),
        rtol=0,
        atol=1e-13 * np.abs(q).max(),
    )
    cos, sin = rotary(torch.from_numpy(q), torch.from_numpy(ids.T.copy()))
    qt = torch.from_numpy(q)
    tower, _ = module.apply_rotary_pos_emb_vision(qt, qt, cos, sin)
    np.testing.assert_allclose(got, tower.numpy(), rtol=0, atol=4e-6 * np.abs(q).max())
    c, _ = posenc.rope_cos_sin(ids, head_dim, scaling=config)
    np.testing.assert_allclose(c, cos.numpy(), rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match="axial .* 2 rows"):
        posenc.apply_rope(q, seq_axis=-3, scaling=config)
    with pytest.raises(ValueError, match="head dimension"):
        posenc.apply_rope(q[..., :64], ids, seq_axis=-3, scaling=config)


# ---------------------------------------------------------------- what a config means


def _rotary_class(hf, package, name):
    import importlib

    return getattr(
        importlib.import_module(f"transformers.models.{package}.modeling_{package}"), name
    )


MROPE_BY_MODEL = {  # configs whose sections come without mrope_interleaved
    "cosmos3_edge": lambda t: t.Cosmos3EdgeTextConfig(),
    "hy_v4_vl": lambda t: t.HYV4VLTextConfig(),
    "qwen3_vl": lambda t: t.Qwen3VLTextConfig(
        hidden_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        rope_parameters={"rope_type": "default", "mrope_section": [24, 20, 20], "rope_theta": 5e6},
    ),
}
ROTARY_CLASSES = {
    "cosmos3_edge": "Cosmos3EdgeTextRotaryEmbedding",
    "hy_v4_vl": "HYV4VLRotaryEmbedding",
    "qwen3_vl": "Qwen3VLTextRotaryEmbedding",
}


@pytest.mark.parametrize("name", sorted(MROPE_BY_MODEL))
def test_a_config_without_mrope_interleaved_rotates_as_its_model_does(hf, name):
    # the model's rotary code interleaves the sections whatever the config says
    # (read as Qwen2-VL's runs, the rows' cos differed by up to 2.0)
    config = MROPE_BY_MODEL[name](hf.t)
    assert "mrope_interleaved" not in config.rope_parameters
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    ids = np.arange(64)[None]
    rows = np.stack([ids, ids // 4, ids % 7])  # three different rows
    rotary = _rotary_class(hf, name, ROTARY_CLASSES[name])(config)
    cos, sin = rotary(hf.torch.zeros(1), hf.torch.from_numpy(rows))
    c, s = posenc.rope_cos_sin(rows, head_dim, scaling=config)
    np.testing.assert_allclose(c, cos.numpy(), rtol=0, atol=1e-5)  # float32 phases below 64
    np.testing.assert_allclose(s, sin.numpy(), rtol=0, atol=1e-5)
    # the same from its config.json dict; a flag that says otherwise is refused
    config_json = config.to_dict()
    c_json, _ = posenc.rope_cos_sin(rows, head_dim, scaling=config_json)
    np.testing.assert_array_equal(c_json, c)
    config_json["rope_parameters"]["mrope_interleaved"] = False
    with pytest.raises(ValueError, match="rotary code interleaves"):
        posenc.rope_cos_sin(rows, head_dim, scaling=config_json)
    # a bare rope dict cannot say which model it is: it must state the layout
    bare = dict(config.rope_parameters)
    with pytest.raises(ValueError, match="state which"):
        posenc.rope_cos_sin(rows, head_dim, scaling=bare)
    c_bare, _ = posenc.rope_cos_sin(rows, head_dim, scaling=dict(bare, mrope_interleaved=True))
    np.testing.assert_array_equal(c_bare, c)


def test_sections_of_a_model_posenc_does_not_know_are_refused(hf):
    # Ernie 4.5 VL puts height and width on alternating pairs and time last
    config = hf.t.Ernie4_5_VLMoeTextConfig(
        rope_parameters={"rope_type": "default", "rope_theta": 5e5, "mrope_section": [22, 22, 20]}
    )
    with pytest.raises(ValueError, match="ernie4_5_vl_moe_text"):
        posenc.rope_frequencies(128, scaling=config)
    # a Qwen2-VL config whose flag says interleaved: its model does not interleave
    qwen2, _, _ = _text_model(hf, "qwen2_vl")
    with pytest.raises(ValueError, match="does not interleave"):
        posenc.rope_frequencies(
            128, scaling=dict(qwen2.to_dict(), rope_parameters=dict(
                qwen2.rope_parameters, mrope_interleaved=True))
        )  # fmt: skip


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.PixtralVisionConfig(),
        lambda t: t.Gemma4VisionConfig(),
        lambda t: t.Kimi_K25VisionConfig(),
    ],
)
def test_vision_configs_whose_axial_rope_is_another_scheme_are_refused(hf, make):
    # their "axial" is not Qwen2-VL's: read as it, Pixtral's inv_freq was off by
    # a third, and every tower's rotation by up to 5
    config = make(hf.t)
    assert config.rope_parameters["rope_type"] == "axial"
    with pytest.raises(ValueError, match="rope_type 'axial' of a '.*' config"):
        posenc.rope_frequencies(64, scaling=config)
    with pytest.raises(ValueError, match="rope_type 'axial' of scaling"):
        posenc.rope_frequencies(64, scaling=dict(config.rope_parameters))


def test_composite_and_older_configs_are_refused_rather_than_read_with_defaults(hf):
    # a vision-language model's config: the RoPE is in its sub-configs (read as
    # a config.json dict, it gave base 10000's frequencies for Qwen3-VL's 5e5)
    config = hf.t.Qwen3VLConfig()
    for scaling in (config, config.to_dict()):
        with pytest.raises(ValueError, match="config.text_config or config.vision_config"):
            posenc.rope_frequencies(128, scaling=scaling)
    inv, _ = posenc.rope_frequencies(128, scaling=config.text_config)
    np.testing.assert_allclose(
        inv[1], config.text_config.rope_parameters["rope_theta"] ** -(2 / 128)
    )
    # a config.json without rope_theta: its class's default, which differs by model
    llama_json = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}
    with pytest.raises(ValueError, match="states no rope_theta"):
        posenc.rope_frequencies(64, scaling=llama_json)
    want = hf.t.LlamaConfig(**{k: v for k, v in llama_json.items() if k != "model_type"})
    np.testing.assert_array_equal(
        posenc.rope_frequencies(64, scaling=dict(llama_json, rope_theta=10000.0))[0],
        posenc.rope_frequencies(64, scaling=want)[0],
    )
    # GPT-NeoX's older config.json: rotary_pct (0.25 by its class's default)
    neox_json = {"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4}
    neox_json.update(rotary_pct=0.25, rotary_emb_base=10000)
    with pytest.raises(ValueError, match="rotary_pct"):
        posenc.rope_frequencies(64, scaling=neox_json)
    neox = hf.t.GPTNeoXConfig(**{k: v for k, v in neox_json.items() if k != "model_type"})
    assert neox.rope_parameters["partial_rotary_factor"] == 0.25  # what transformers makes of it
    assert posenc.rope_frequencies(64, scaling=neox)[0].shape == (8,)
