"""posenc.hf.patch(model, scaling=...): a loaded model's rotary modules
compute their tables with another context-extension family.

The witness is transformers' own model built from a config that carries the
family (its rope parameters written out here as the short forms mean them),
with the weights of the patched model loaded into it: its logits, and its
greedy tokens past max_position_embeddings (32 here), are what the patched
model must give.  Where transformers has no such family (ntk_alpha outside
HunYuan's models, resonance), the witness is transformers' default RoPE
with the frequencies the family's formula gives, written out here.  Tiny
random-weight models (1 or 2 layers, hidden 32) built from configs.
"""

import copy
import math
import warnings

import pytest
from conftest import require

MAX_POS = 32
LENGTH = 48  # past MAX_POS: dynamic grows, longrope takes its long factors
VOCAB = 97


@pytest.fixture(scope="module")
def tf():
    require("torch")
    transformers = require("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


@pytest.fixture(scope="module")
def hf(tf):
    import posenc.hf

    return posenc.hf


def _text(**overrides):
    """The text model's sizes: 1 layer, hidden 32, 2 heads of 16 dims (8
    pairs), 1 key/value head; weights 10 times transformers' initial scale,
    so that attention is sharp enough for the positions to move the logits."""
    kwargs = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                  max_position_embeddings=MAX_POS, pad_token_id=0,
                initializer_range=0.2)  # fmt: skip
    kwargs.update(overrides)
    return kwargs


PHI3_LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.25, 1.5, 2.0],
                 "long_factor": [1.0, 3.0, 6.0, 12.0]}  # fmt: skip
DEEPSEEK_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0,
                 "mscale_all_dim": 1.0}  # fmt: skip
# (config class, model class, config kwargs, rope kwargs of the model's own)
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", _text(), {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", _text(), {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", _text(sliding_window=None), {}),
    # a sliding layer and a full one (rope_theta 10000 and 1e6)
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               _text(num_hidden_layers=2, sliding_window=8,
                     layer_types=["sliding_attention", "full_attention"]), {}),
    # partial rotary (8 of 16 features) and LongRoPE of its own, trained on 16 positions
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             _text(num_key_value_heads=2, partial_rotary_factor=0.5,
                   original_max_position_embeddings=16),
             {"rope_parameters": PHI3_LONGROPE}),
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration", _text(),
                 {"rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3]}}),
    # tables that hold each pair's angle once, YaRN of its own
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                _text(num_local_experts=2, num_experts_per_tok=1), {}),
    # attention that multiplies by YaRN's mscale itself (yarn_apply_mscale)
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    _text(num_key_value_heads=2, moe_intermediate_size=16, n_routed_experts=2,
                          num_experts_per_tok=1, n_group=1, topk_group=1, q_lora_rank=None,
                          kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                          v_head_dim=16, head_dim=8),
                    {"rope_parameters": DEEPSEEK_YARN}),
}  # fmt: skip

# scaling= as passed to patch, and the rope dict it means, written out (None:
# the witness is made by hand, see _witness)
FAMILIES = {
    "none": ("none", {"rope_type": "default"}),
    "linear": ("linear:4", {"rope_type": "linear", "factor": 4.0}),
    "dynamic": ("dynamic:4", {"rope_type": "dynamic", "factor": 4.0}),
    "yarn": ("yarn:4", {"rope_type": "yarn", "factor": 4.0}),
    "yarn-dict": (
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "mscale": 1.0,
            "mscale_all_dim": 0.5,
            "beta_fast": 16,
            "beta_slow": 2,
        },
        None,
    ),  # fmt: skip
    "llama3": (
        "llama3:8",
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    ),
    "longrope": (None, None),  # lists of the model's rotary_dim // 2 (see _scaling)
    "ntk_alpha": ({"rope_type": "ntk_alpha", "alpha": 4.0}, None),
    "resonance": ("resonance", None),
}


def _rotary_dim(name):
    kwargs = MODELS[name][2]
    if name == "deepseek_v3":
        return kwargs["qk_rope_head_dim"]
    return int(kwargs["head_dim"] * kwargs.get("partial_rotary_factor", 1.0))


def _scaling(name, family):
    """(scaling= for patch, the rope dict of the witness's config)."""
    given, written = FAMILIES[family]
    if family == "longrope":
        pairs = _rotary_dim(name) // 2
        given = {"rope_type": "longrope", "short_factor": [1.0 + i / 4 for i in range(pairs)],
                 "long_factor": [2.0 + 3 * i for i in range(pairs)]}  # fmt: skip
    if written is None and isinstance(given, dict):
        written = given
    return given, copy.deepcopy(written)


def _build(tf, name, rope=None, seed=0):
    """Model `name` with its own rope parameters, or `rope` (a flat rope
    dict, as its config carries it)."""
    import torch

    config_class, model_class, kwargs, own = MODELS[name]
    kwargs = dict(kwargs, **own)
    if rope is not None:
        kwargs.pop("rope_parameters", None)
        if name == "gemma3":
            kwargs["rope_scaling"] = rope  # transformers puts it on the full-attention layers
        else:
            kwargs["rope_parameters"] = rope
    if name == "qwen2_vl":
        kwargs.setdefault("rope_parameters", {"rope_type": "default"})
        kwargs["rope_parameters"] = dict(kwargs["rope_parameters"], mrope_section=[2, 3, 3])
        vision = dict(depth=1, hidden_size=32, embed_dim=32, num_heads=2, intermediate_size=32,
                      out_hidden_size=kwargs["hidden_size"])  # fmt: skip
        kwargs = dict(text_config=kwargs, vision_config=vision)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(tf, config_class)(**kwargs)
        return getattr(tf, model_class)(config).eval()


def _language(model):
    """The part patch takes: the language model of a vision-language model."""
    inner = getattr(model, "model", None)
    return getattr(inner, "language_model", None) or model


def _rotary(model):
    """The text model's rotary module."""
    return next(m for n, m in model.named_modules() if n.endswith("rotary_emb") and "vis" not in n)


def _rope_of(model):
    """The model's text config's rope parameters (of the full-attention layers)."""
    config = getattr(model.config, "text_config", None) or model.config
    rope = config.rope_parameters
    return rope.get("full_attention", rope)


def _witness(tf, name, family, model):
    """transformers' model whose config carries the family, `model`'s weights
    loaded into it."""
    import torch

    given, written = _scaling(name, family)
    own = _rope_of(model)
    if family == "ntk_alpha":  # a default RoPE of base theta * alpha ** (d / (d - 2))
        d = _rotary_dim(name)
        written = {"rope_type": "default", "rope_theta": own["rope_theta"] * 4.0 ** (d / (d - 2))}
    if family == "resonance":
        written = {"rope_type": "default"}
    if written is not None and "partial_rotary_factor" in own:
        written.setdefault("partial_rotary_factor", own["partial_rotary_factor"])
    if name == "phi3":  # Phi-3's config class takes no family but default and longrope
        witness = _build(tf, name, seed=1)
        config = witness.config
        config.rope_parameters = {"rope_theta": own["rope_theta"], **written}
        config.standardize_rope_params()  # as transformers fills a config's rope parameters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            witness = type(witness)(config).eval()
    else:
        witness = _build(tf, name, rope=written, seed=1)
    witness.load_state_dict(model.state_dict())
    if family == "resonance":  # each wavelength rounded to a whole number of positions
        rotary = _rotary(witness)
        prefix = "full_attention_" if name == "gemma3" else ""
        inv_freq = getattr(rotary, f"{prefix}inv_freq").double()
        values = (2 * math.pi / torch.round(2 * math.pi / inv_freq)).float()
        rotary.register_buffer(f"{prefix}inv_freq", values, persistent=False)
        setattr(rotary, f"{prefix}original_inv_freq", values.clone())
    return witness


def _inputs(torch, length=LENGTH, batch=2):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    ids[0, :3] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _logits(model, inputs):
    import torch

    with torch.no_grad():
        return model(**inputs).logits


def _patch(hf, model, scaling):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hf.patch(_language(model), scaling=scaling)


def _apart(a, b):
    return float((a.double() - b.double()).abs().max())


CASES = [(m, f) for m in MODELS for f in FAMILIES]
# the cases whose family is the model's own: the witness is then the model
SAME = {("llama", "none"), ("qwen2", "none"), ("mistral", "none"), ("gemma3", "none"),
        ("qwen2_vl", "none")}  # fmt: skip


@pytest.mark.parametrize("name,family", CASES)
def test_patched_logits_are_those_of_a_model_whose_config_carries_the_scaling(tf, hf, name, family):
    import torch

    model = _build(tf, name)
    inputs = _inputs(torch)
    own = _logits(model, inputs)
    witness = _witness(tf, name, family, model)
    want = _logits(witness, inputs)
    if (name, family) not in SAME:  # the family moves the logits: the test can tell
        assert _apart(own, want) > 1e-3 * float(want.abs().max())
    _patch(hf, model, _scaling(name, family)[0])
    got = _logits(model, inputs)
    # transformers' float32 angles: within 1e-5 of the logits' scale
    assert _apart(got, want) <= 1e-5 * float(want.abs().max())
    if name == "gpt_oss":
        return  # its experts' grouped products take no float64
    # float64: the same weights, transformers' angles still formed in float32
    hf.unpatch(_language(model))
    model, witness = model.double(), witness.double()
    want = _logits(witness, inputs)
    _patch(hf, model, _scaling(name, family)[0])
    got = _logits(model, inputs)
    assert _apart(got, want) <= 1e-5 * float(want.abs().max())


@pytest.mark.parametrize("name,family", CASES)
def test_greedy_generate_past_max_positions_gives_the_witness_tokens(tf, hf, name, family):
    import torch

    model = _build(tf, name)
    witness = _witness(tf, name, family, model)
    inputs = _inputs(torch, length=6)
    kwargs = dict(max_new_tokens=MAX_POS + 8, do_sample=False, use_cache=True, pad_token_id=0)
    with torch.no_grad():
        want = witness.generate(**inputs, **kwargs)
        _patch(hf, model, _scaling(name, family)[0])
        got = model.generate(**inputs, **kwargs)
    assert want.shape[1] == 6 + MAX_POS + 8
    assert torch.equal(got, want)


def _state(model):
    """What a patch may change: the modules, and every module's own attributes."""
    return {n: (m, {k: v for k, v in vars(m).items() if not k.startswith("_")})
            for n, m in model.named_modules()}  # fmt: skip


def _same_state(before, after):
    assert before.keys() == after.keys()
    for name, (module, attrs) in before.items():
        assert after[name][0] is module, name
        assert after[name][1].keys() == attrs.keys(), name
        for key, value in attrs.items():
            assert after[name][1][key] is value or after[name][1][key] == value, (name, key)


@pytest.mark.parametrize("name", ["phi3", "gemma3", "gpt_oss", "deepseek_v3"])
def test_the_config_is_not_changed_unpatch_restores_and_another_instance_is_untouched(tf, hf, name):
    import torch

    model, other = _build(tf, name), _build(tf, name)
    inputs = _inputs(torch)
    want, other_want = _logits(model, inputs), _logits(other, inputs)
    config = copy.deepcopy(model.config.to_dict())
    before = _state(model)
    scaling = _scaling(name, "yarn-dict")[0]
    _patch(hf, model, scaling)
    got = _logits(model, inputs)
    with torch.no_grad():
        model.generate(**_inputs(torch, length=6), max_new_tokens=MAX_POS, do_sample=False)
    assert not torch.allclose(got, want, rtol=0, atol=1e-3)
    assert model.config.to_dict() == config  # read, never written
    assert torch.equal(_logits(other, inputs), other_want)
    if name == "deepseek_v3":  # its attention's scale followed the scaling
        attention = model.model.layers[0].self_attn
        assert attention.scaling != before["model.layers.0.self_attn"][1]["scaling"]
        assert any("attention scale" in p for p in hf.patched_parts(model))
    # a deep copy is patched by itself, and restored by itself
    twin = copy.deepcopy(model)
    assert torch.equal(_logits(twin, inputs), _logits(model, inputs))
    hf.unpatch(twin)
    assert torch.equal(_logits(twin, inputs), want)
    hf.unpatch(model)
    _same_state(before, _state(model))
    assert torch.equal(_logits(model, inputs), want)
    assert model.config.to_dict() == config


@pytest.mark.parametrize("name", ["llama", "deepseek_v3"])
def test_a_prepared_patch_changes_nothing_until_applied_and_applies_again(tf, hf, name):
    import torch

    model = _build(tf, name)
    inputs = _inputs(torch)
    want = _logits(model, inputs)
    before = _state(model)
    witness = _witness(tf, name, "yarn", model)
    scaled = _logits(witness, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ready = hf.prepare(_language(model), scaling=_scaling(name, "yarn")[0])
    _same_state(before, _state(model))  # built and checked, nothing changed
    assert hf.patched_parts(model) == [] and torch.equal(_logits(model, inputs), want)
    for _ in range(2):  # applied, removed, applied again: the witness's logits each time
        assert ready.apply() is _language(model)
        assert hf.patched_parts(_language(model)) == ready.parts
        assert _apart(_logits(model, inputs), scaled) <= 1e-5 * float(scaled.abs().max())
        with pytest.raises(ValueError, match="already patched"):
            ready.apply()
        hf.unpatch(_language(model))
        _same_state(before, _state(model))
        assert torch.equal(_logits(model, inputs), want)


def test_a_prepared_patch_refuses_a_model_that_changed_since(tf, hf):
    model = _build(tf, "llama")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ready = hf.prepare(model, scaling="linear:4")
    model.model.rotary_emb = copy.deepcopy(model.model.rotary_emb)
    with pytest.raises(ValueError, match=r"changed since the patch was prepared \(model\.rotary"):
        ready.apply()
    assert hf.patched_parts(model) == []


def test_a_transformers_config_as_scaling_is_read_as_transformers_reads_it(tf, hf):
    import torch

    inputs = _inputs(torch)
    # Phi-3: its original_max_position_embeddings (16) before max_position_embeddings
    # (48 here: the config's own, which sets longrope's factor 3 and attention factor)
    model = _build(tf, "phi3")
    other = _build(tf, "phi3", seed=1)
    other.config.max_position_embeddings = 48
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        witness = type(other)(other.config).eval()
    witness.load_state_dict(model.state_dict())
    assert _rotary(witness).attention_scaling == math.sqrt(1 + math.log(3) / math.log(16))
    want = _logits(witness, inputs)
    _patch(hf, model, witness.config)
    assert _apart(_logits(model, inputs), want) <= 1e-5 * float(want.abs().max())
    # Gemma 3: rope parameters per layer type, yarn on the sliding layers too
    model = _build(tf, "gemma3")
    per_layer = {"sliding_attention": {"rope_type": "linear", "factor": 2.0},
                 "full_attention": {"rope_type": "yarn", "factor": 4.0}}  # fmt: skip
    config = tf.Gemma3TextConfig(**dict(MODELS["gemma3"][2], rope_parameters=per_layer))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        witness = tf.Gemma3ForCausalLM(config).eval()
    witness.load_state_dict(model.state_dict())
    want = _logits(witness, inputs)
    _patch(hf, model, config)
    assert _apart(_logits(model, inputs), want) <= 1e-5 * float(want.abs().max())
    hf.unpatch(model)
    # the same as a dict per layer type
    _patch(hf, model, copy.deepcopy(per_layer))
    assert _apart(_logits(model, inputs), want) <= 1e-5 * float(want.abs().max())


def test_a_dict_per_layer_type_scales_those_layer_types_only(tf, hf):
    import torch

    model = _build(tf, "gemma3")
    inputs = _inputs(torch)
    rope = {"sliding_attention": {"rope_type": "dynamic", "factor": 4.0}}
    witness = _build(tf, "gemma3", seed=1)
    config = witness.config
    config.rope_parameters["sliding_attention"].update(rope["sliding_attention"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        witness = tf.Gemma3ForCausalLM(config).eval()
    witness.load_state_dict(model.state_dict())
    assert witness.config.rope_parameters["full_attention"]["rope_type"] == "default"
    want = _logits(witness, inputs)
    with pytest.warns(UserWarning, match=r"full_attention kept as it is \(default, rope_theta 1e"):
        hf.patch(model, scaling=rope)
    assert _apart(_logits(model, inputs), want) <= 1e-5 * float(want.abs().max())


def _inferred(hf, model, scaling):
    """The one warning line patch gives of what it inferred."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        hf.patch(_language(model), scaling=scaling)
    lines = [str(w.message) for w in record if "inferred" in str(w.message)]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    return lines[0]


def test_one_warning_line_says_what_was_inferred_as_transformers_infers_it(tf, hf):
    model = _build(tf, "llama")
    witness = _witness(tf, "llama", "yarn", model)
    line = _inferred(hf, model, "yarn:4")
    yarn = witness.config.rope_parameters
    # transformers' own inference, in the witness's config and rotary module
    assert f"original_max_position_embeddings {yarn['original_max_position_embeddings']} " in line
    assert yarn["original_max_position_embeddings"] == MAX_POS
    assert f"attention_factor {_rotary(witness).attention_scaling:.6g} " in line
    assert "beta_fast 32, beta_slow 1" in line and "rope_theta 10000 (the model's)" in line
    assert "rotary dim 16 of head_dim 16" in line
    # Phi-3: the config's own original_max_position_embeddings (16, not 32)
    model = _build(tf, "phi3")
    witness = _witness(tf, "phi3", "llama3", model)
    line = _inferred(hf, model, "llama3:8")
    assert witness.config.rope_parameters["original_max_position_embeddings"] == 16
    assert "original_max_position_embeddings 16 (the config's own" in line
    assert "low_freq_factor 1 and high_freq_factor 4 (the short form 'llama3': Llama 3.1's)" in line
    assert "rotary dim 8 of head_dim 16 (partial_rotary_factor 0.5, the model's)" in line
    # LongRoPE: its factor from the lengths, its attention factor, its switch
    model = _build(tf, "llama")
    scaling = _scaling("llama", "longrope")[0]
    witness = _witness(tf, "llama", "longrope", model)
    line = _inferred(hf, model, scaling)
    assert "factor 1 (max_position_embeddings / original_max_position_embeddings)" in line
    assert f"attention_factor {_rotary(witness).attention_scaling:.6g} " in line
    assert "long_factor once positions pass 32" in line
    # dynamic: the length it grows past; Gemma 3's sliding layers kept
    model = _build(tf, "gemma3")
    line = _inferred(hf, model, "ntk:4")
    assert "full_attention: dynamic with rope_theta 1e+06 (the model's)" in line
    assert "growing past max_position_embeddings 32 (the model's)" in line
    assert "sliding_attention kept as it is (default, rope_theta 10000)" in line


def test_the_short_forms_are_the_dicts_of_the_table(tf, hf):
    import torch

    inputs = _inputs(torch)
    for short, written in [
        ("ntk:2", {"rope_type": "dynamic", "factor": 2.0}),
        (" YaRN:2.5 ", {"rope_type": "yarn", "factor": 2.5}),
        ("default", {"rope_type": "default"}),
        ("ntk_alpha:3", {"rope_type": "ntk_alpha", "alpha": 3.0}),
    ]:
        model, twin = _build(tf, "llama"), _build(tf, "llama")
        _patch(hf, model, short)
        _patch(hf, twin, written)
        assert torch.equal(_logits(model, inputs), _logits(twin, inputs)), short


def _unchanged(hf, model, before, **kwargs):
    """patch(model, **kwargs) refused, the model as it was."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.patch(_language(model), **kwargs)


@pytest.mark.parametrize(
    "name,scaling,error,match",
    [
        ("llama", 4, TypeError, "scaling must be a short string"),
        ("llama", ["yarn", 4], TypeError, "scaling must be a short string"),
        ("llama", "yarn", ValueError, "'yarn' takes its factor after a colon"),
        ("llama", "yarn:four", ValueError, "factor must be a number"),
        ("llama", "yarn:-2", ValueError, "factor must be finite and > 0"),
        ("llama", "linear:inf", ValueError, "factor must be finite and > 0"),
        ("llama", "none:2", ValueError, "'none' takes no number"),
        ("llama", "rope:4", ValueError, "none of the short forms"),
        ("llama", "longrope:4", ValueError, "longrope needs the model's own short_factor"),
        ("llama", {}, ValueError, "empty dict"),
        ("llama", {"rope_type": "longrope"}, ValueError, "requires the key 'short_factor'"),
        ("llama", {"rope_type": "longrope", "short_factor": [1.0] * 8}, ValueError,
         "requires the key 'long_factor'"),
        ("llama", {"rope_type": "longrope", "short_factor": [1.0] * 3, "long_factor": [2.0] * 3},
         ValueError, r"short_factor'\] must have dim // 2 = 8 values"),
        ("llama", {"rope_type": "yarn"}, ValueError, "requires the key 'factor'"),
        ("llama", {"rope_type": "llama3", "factor": 8.0}, ValueError,
         "requires the key 'low_freq_factor'"),
        ("llama", {"rope_type": "yarn", "factor": 4.0, "beta_fst": 16}, ValueError,
         r"does not read \['beta_fst'\]"),
        ("llama", {"rope_type": "linear", "factor": 4.0, "max_position_embeddings": 64},
         ValueError, "reads it from the model's config"),
        ("llama", {"rope_type": "linear", "factor": "4"}, TypeError, "must be a real number"),
        ("llama", {"rope_type": "proportional"}, ValueError, "not a context-extension family"),
        ("llama", {"rope_type": "su_typo", "factor": 2.0}, ValueError, "not implemented by posenc"),
        ("llama", {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5},
         ValueError, r"scaling\['partial_rotary_factor'\] = 0.5 differs from the model's 1.0"),
        ("phi3", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
         ValueError, "has its own original_max_position_embeddings = 16"),
        ("qwen2_vl", {"rope_type": "linear", "factor": 2.0, "mrope_section": [4, 2, 2]},
         ValueError, "mrope_section"),
        ("llama", {"full_attention": {"rope_type": "linear", "factor": 2.0}}, ValueError,
         "holds one set for every layer"),
        ("gemma3", {"global": {"rope_type": "linear", "factor": 2.0}}, ValueError,
         r"layer type\(s\) \['global'\]"),
        ("llama", "composite", ValueError, "pass config.text_config"),
    ],
)  # fmt: skip
def test_a_scaling_that_cannot_apply_is_refused_whole_by_name(tf, hf, name, scaling, error, match):
    import torch

    if scaling == "composite":
        scaling = _build(tf, "qwen2_vl").config
    model = _build(tf, name)
    inputs = _inputs(torch)
    want = _logits(model, inputs)
    config = copy.deepcopy(model.config.to_dict())
    before = _state(model)
    with pytest.raises(error, match=match):
        _unchanged(hf, model, before, scaling=scaling)
    _same_state(before, _state(model))
    assert hf.patched_parts(_language(model)) == []
    assert model.config.to_dict() == config
    assert torch.equal(_logits(model, inputs), want)


def test_scaling_is_refused_where_positions_are_not_rotary_or_kept_as_transformers_rounds(tf, hf):
    bloom = tf.BloomForCausalLM(tf.BloomConfig(vocab_size=VOCAB, hidden_size=16, n_layer=1,
                                               n_head=2)).eval()  # fmt: skip
    with pytest.raises(
        ValueError, match=r"with scaling=: .* not rotary \(transformer \(BLOOM ALiBi\)\)"
    ):
        hf.patch(bloom, scaling="yarn:4")
    gptj = tf.GPTJForCausalLM(tf.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2,
                                            rotary_dim=8, n_positions=64)).eval()  # fmt: skip
    with pytest.raises(ValueError, match="table of sin and cos made with base 10000"):
        hf.patch(gptj, scaling="yarn:4")
    model = _build(tf, "llama").double()
    with pytest.raises(ValueError, match="exact=False keeps transformers' rotary modules"):
        hf.patch(model, scaling="yarn:4", exact=False)
    for part in (bloom, gptj, model):
        assert hf.patched_parts(part) == []
    # a float64 model: the exact tables, said once, as without scaling
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        hf.patch(model, scaling="linear:2")
    said = [str(w.message) for w in record if "posenc.hf.patch" in str(w.message)]
    assert len(said) == 2 and "angles formed in float32 in a float64 model" in said[1]
    hf.unpatch(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hf.patched(model, scaling="linear:2"):
            assert "scaling 'linear:2'" in hf.patched_parts(model)[0]
    assert hf.patched_parts(model) == []


def test_a_scaled_module_transformers_would_compute_otherwise_is_refused(tf, hf, monkeypatch):
    import torch
    from transformers import modeling_rope_utils

    linear = modeling_rope_utils.ROPE_INIT_FUNCTIONS["linear"]

    def halved(*args, **kwargs):  # transformers' linear family, its factor doubled
        inv_freq, attention = linear(*args, **kwargs)
        return inv_freq / 2, attention

    model = _build(tf, "llama")
    inputs = _inputs(torch)
    want = _logits(model, inputs)
    before = _state(model)
    monkeypatch.setitem(modeling_rope_utils.ROPE_INIT_FUNCTIONS, "linear", halved)
    with pytest.raises(ValueError, match="differ from those of transformers' LlamaRotaryEmbedding"):
        hf.patch(model, scaling="linear:4")
    _same_state(before, _state(model))
    assert torch.equal(_logits(model, inputs), want)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.patch(model, scaling="yarn:2")  # another family: transformers' own again
    hf.unpatch(model)
