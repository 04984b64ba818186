"""posenc.hf.patch and posenc.torch.RotaryEmbedding on M-RoPE's text models:
Qwen2-VL, Qwen2.5-VL and Qwen3-VL (interleaved sections).

Tiny random-weight models built from transformers' config classes with the
forms of mrope_section their checkpoints carry (the legacy ``rope_scaling =
{"type": "mrope", ...}``, ``rope_parameters``, Qwen3-VL's
``mrope_interleaved``, none at all: the rotary module's class default).  The
language model of each ForConditionalGeneration is patched; the witness is
the same model unpatched (transformers' own rotary module), on text, on
three rows of different positions, and in generate() with its KV cache.
"""

import warnings

import pytest
import test_hf_patch
from test_hf_patch import VOCAB, _generate_unpatched_and_patched, _inputs, _logits, _patch_quietly

# test_hf_patch's fixtures: transformers (quiet) and posenc.hf
tf, hf = test_hf_patch.tf, test_hf_patch.hf

# (config class, model class, the text config's rope keys); head_dim 16:
# 8 pairs, whose sections the forms share among the 3 rows
FORMS = {
    "qwen2_vl-rope_scaling": (
        "Qwen2VLConfig",
        "Qwen2VLForConditionalGeneration",
        dict(rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
    ),
    "qwen2_5_vl-rope_scaling": (
        "Qwen2_5_VLConfig",
        "Qwen2_5_VLForConditionalGeneration",
        dict(rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
    ),
    "qwen2_5_vl-rope_parameters": (
        "Qwen2_5_VLConfig",
        "Qwen2_5_VLForConditionalGeneration",
        dict(
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 100.0,
                "mrope_section": [4, 2, 2],
            }
        ),
    ),
    "qwen3_vl-interleaved": (
        "Qwen3VLConfig",
        "Qwen3VLForConditionalGeneration",
        dict(
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 5e5,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            }
        ),
    ),  # fmt: skip
    # no sections in the config: the module's class default ([16, 24, 24],
    # [24, 20, 20]), which needs head_dim 128
    "qwen2_5_vl-class-default": (
        "Qwen2_5_VLConfig",
        "Qwen2_5_VLForConditionalGeneration",
        dict(head_dim=128, hidden_size=256, num_attention_heads=2, num_key_value_heads=1),
    ),
    "qwen3_vl-class-default": (
        "Qwen3VLConfig",
        "Qwen3VLForConditionalGeneration",
        dict(head_dim=128, hidden_size=256, num_attention_heads=2, num_key_value_heads=1),
    ),
}


def _build(tf, form, **text):
    """A tiny ForConditionalGeneration of `form` (random weights, seeded)."""
    import torch

    config_class, model_class, rope = FORMS[form]
    text_config = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, pad_token_id=0, max_position_embeddings=64)  # fmt: skip
    text_config.update(rope, **text)
    vision = dict(depth=1, hidden_size=32, embed_dim=32, num_heads=2, intermediate_size=32,
                  out_hidden_size=text_config["hidden_size"])  # fmt: skip
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(tf, config_class)(text_config=text_config, vision_config=vision)
        model = getattr(tf, model_class)(config)
    return model.eval()


def _rows(torch, batch, length):
    """Three rows of different positions, as an image's grid gives them: the
    time row running on, the height and width rows each their own pattern."""
    t = torch.arange(length)
    rows = torch.stack([t, t // 4 + 2 * (t % 3), (t * 5) % 11])
    return rows[:, None, :].expand(3, batch, length).clone()


@pytest.mark.parametrize("form", sorted(FORMS))
def test_patched_mrope_logits_equal_transformers(tf, hf, form):
    import torch

    model = _build(tf, form)
    inputs = _inputs(torch, "qwen", length=24)
    rows = _rows(torch, 2, 24)
    want = _logits(model, inputs)
    want_rows = _logits(model, dict(inputs, position_ids=rows))
    # the rows move the logits: the sections are checked, not only text
    assert float((want_rows - want).abs().max()) > 1e-3 * float(want.abs().max())
    language = model.model.language_model
    rotary = language.rotary_emb
    _patch_quietly(hf, language)
    assert language.rotary_emb is not rotary
    assert any("RotaryEmbedding" in p for p in hf.patched_parts(language))
    for inputs_, theirs in ((inputs, want), (dict(inputs, position_ids=rows), want_rows)):
        got = _logits(model, inputs_)
        # transformers' float32 angles: within 1e-5 of the logits' scale
        assert float((got - theirs).abs().max()) <= 1e-5 * float(theirs.abs().max())
    hf.unpatch(language)
    assert language.rotary_emb is rotary


@pytest.mark.parametrize("form", sorted(FORMS))
def test_patched_mrope_generate_gives_transformers_tokens(tf, hf, form):
    import torch

    model = _build(tf, form)
    inputs = _inputs(torch, "qwen", length=6)  # left padding in the first row
    want, got = _generate_unpatched_and_patched(hf, model, inputs, model.model.language_model)
    assert want.shape[1] >= 26
    assert torch.equal(got, want)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_rotary_embedding_takes_transformers_position_id_shapes(tf, form):
    import torch

    from posenc.torch import RotaryEmbedding

    model = _build(tf, form)
    theirs = model.model.language_model.rotary_emb
    config = model.config.text_config
    sections = list(theirs.mrope_section)
    if config.rope_parameters.get("mrope_section") is None:
        # a config of an M-RoPE model without sections: refused, naming what to pass
        with pytest.raises(ValueError, match="mrope_section"):
            RotaryEmbedding(config=config)
    mine = RotaryEmbedding(config=config, mrope_section=sections)
    x = torch.zeros(1)
    rows = _rows(torch, 2, 40)
    for ids in (rows, rows[:1], rows[0], torch.arange(40)[None]):
        with torch.no_grad():
            want = theirs(x, ids)
        got = mine(x, ids)
        assert got[0].shape == want[0].shape == (ids.shape[-2], 40, config.head_dim)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            assert float((a - b).abs().max()) <= 1e-5  # transformers' float32 angles
    # shapes transformers' module does not take either: refused by name
    for bad in (torch.arange(40), rows[:2], rows[None]):
        with pytest.raises(ValueError, match="position_ids"):
            mine(x, bad)
    with pytest.raises(ValueError, match="mrope_section"):
        RotaryEmbedding(config=config, mrope_section=[1, 2, 3, 2])  # 4 rows, not 3


def test_a_config_whose_default_sections_do_not_fit_is_refused_at_patch_time(tf, hf):
    """Without sections in the config, Qwen2.5-VL's module uses [16, 24, 24]
    (64 pairs), which a head of 16 cannot hold: transformers' model fails on
    its first forward; patch refuses it by name, leaving it as it was."""
    import torch

    model = _build(tf, "qwen2_5_vl-class-default", head_dim=16, hidden_size=64,
                   num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    language = model.model.language_model
    rotary = language.rotary_emb
    with pytest.raises(Exception):  # noqa: B017 - transformers' own failure, whatever it is
        _logits(model, _inputs(torch, "qwen", length=8))
    with pytest.raises(ValueError, match=r"rotary_emb \(Qwen2_5_VLRotaryEmbedding\)"):
        _patch_quietly(hf, language)
    assert language.rotary_emb is rotary and not hf.patched_parts(language)
