"""posenc.hf.patch on transformers' own, unmodified models.

Tiny random-weight models built from the configs of tests/tiny_models.py
(2 layers, small hidden sizes).  The witness is the same model unpatched (transformers' own rotary
modules, ALiBi and T5 bias), and where transformers is less exact than
posenc, float64 values written out here with NumPy.
"""

import copy
import importlib
import inspect
import io
import pickle
import warnings

import numpy as np
import pytest
import tiny_models
from conftest import require
from rotary_classes import default_configs, rotary_classes


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


VOCAB = 97


def _build(tf, name, **overrides):
    """A tiny model of family `name` (tiny_models.patch_families, 64 wide),
    random weights seeded."""
    import torch

    config_class, model_class, kwargs = tiny_models.patch_families(64, VOCAB)[name]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(tf, model_class)(getattr(tf, config_class)(**dict(kwargs, **overrides)))
    return model.eval()


def _inputs(torch, name, length=24, batch=2):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    ids[0, :3] = 0
    kwargs = {"input_ids": ids, "attention_mask": mask}
    if name in SEQ2SEQ:
        kwargs["decoder_input_ids"] = ids[:, :9].clone()
    return kwargs


def _logits(model, inputs):
    import torch

    with torch.no_grad():
        return model(**inputs).logits


def _patch_quietly(hf, model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hf.patch(model, **kwargs)


ROTARY = ["llama", "qwen2", "llama3", "dynamic", "gemma3", "phi3", "neox", "gptj", "codegen",
          "gptoss"]  # fmt: skip
ALL = ROTARY + ["bloom", "mpt", "falcon", "t5", "mt5", "umt5", "longt5"]
SEQ2SEQ = ("t5", "mt5", "umt5", "longt5", "longt5_tglobal")
# what patch replaces in each: the part's name in patched_parts
PARTS = {"bloom": "BLOOM ALiBi", "mpt": "MPT ALiBi", "falcon": "Falcon ALiBi", "t5": "T5 bias",
         "mt5": "T5 bias", "umt5": "T5 bias", "longt5": "LongT5 local bias",
         "deberta": "DeBERTa-v2 relative attention",
         "xlnet": "XLNet relative attention"}  # fmt: skip
# transformers exact there: the patched logits are the same bits
EXACT = ("bloom", "mpt", "t5", "mt5", "umt5", "longt5")


# -- logits --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_patched_logits_float32_and_unpatch_restores(tf, hf, name):
    import torch

    model = _build(tf, name)
    other = _build(tf, name)
    inputs = _inputs(torch, name, length=40)  # past max_position_embeddings (16 where set)
    want = _logits(model, inputs)
    other_want = _logits(other, inputs)
    modules_before = dict(model.named_modules())
    keys_before = list(model.state_dict())
    hf.patch(model)
    assert list(model.state_dict()) == keys_before  # checkpoints load and save as before
    parts = hf.patched_parts(model)
    assert any(PARTS.get(name, "RotaryEmbedding") in p for p in parts), parts
    got = _logits(model, inputs)
    # transformers' float32 angles and tables: within 1e-5 of the logits' scale
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 1e-5 * scale
    if name in EXACT:
        assert torch.equal(got, want)
    # another instance of the same class is untouched
    assert torch.equal(_logits(other, inputs), other_want)
    hf.unpatch(model)
    assert dict(model.named_modules()) == modules_before
    assert all("forward" not in m.__dict__ and "compute_bias" not in m.__dict__
               for m in model.modules())  # fmt: skip
    assert torch.equal(_logits(model, inputs), want)


@pytest.mark.parametrize("name", ["llama", "gemma3", "neox"])
def test_patched_float64_model_forms_its_angles_in_float64(tf, hf, name):
    import torch

    model = _build(tf, name).double()
    inputs = _inputs(torch, name)
    want = _logits(model, inputs)
    with pytest.warns(UserWarning, match="angles formed in float32 in a float64 model"):
        hf.patch(model)
    got = _logits(model, inputs)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    # the patched tables are the float64 values, written out here
    rotary = model.base_model.rotary_emb
    ids = torch.arange(3000)[None]
    kwargs = {"layer_type": "sliding_attention"} if name == "gemma3" else {}
    cos, _ = rotary(torch.zeros(1, dtype=torch.float64), ids, **kwargs)
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rotary_dim = cos.shape[-1]
    params = config.rope_parameters
    theta = (params.get("sliding_attention") or params)["rope_theta"]
    inv_freq = 1.0 / theta ** (np.arange(0, rotary_dim, 2) / rotary_dim)
    angles = np.arange(3000)[:, None] * inv_freq
    assert rotary_dim <= head_dim
    np.testing.assert_allclose(cos[0].numpy(), np.cos(np.concatenate([angles, angles], -1)),
                               rtol=0, atol=1e-12)  # fmt: skip


def test_dynamic_ntk_patched_mid_stream_keeps_the_grown_frequencies(tf, hf):
    import torch

    model = _build(tf, "dynamic")  # max_position_embeddings 16
    long, short = _inputs(torch, "dynamic", length=40), _inputs(torch, "dynamic", length=20)
    _logits(model, long)  # transformers' module grows its frequencies for 40 positions
    twin = copy.deepcopy(model)
    want = _logits(twin, short)  # and keeps them for a 20-token call
    fresh = _logits(_build(tf, "dynamic"), short)
    assert not torch.allclose(want, fresh, rtol=0, atol=1e-4)  # the state matters here
    _patch_quietly(hf, model)
    got = _logits(model, short)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())


def test_exact_false_keeps_transformers_rounding_of_rotary_tables(tf, hf):
    import torch

    model = _build(tf, "llama").double()
    inputs = _inputs(torch, "llama")
    want = _logits(model, inputs)
    original = model.model.rotary_emb
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: nothing made more exact
        hf.patch(model, exact=False)
    assert model.model.rotary_emb is original
    assert torch.equal(_logits(model, inputs), want)
    hf.unpatch(model)


def test_bfloat16_inv_freq_is_warned_about_and_not_reproduced(tf, hf):
    import torch

    model = _build(tf, "llama").to(torch.bfloat16)
    original = model.model.rotary_emb
    assert original.inv_freq.dtype == torch.bfloat16  # what .to(bfloat16) does to transformers
    with pytest.warns(UserWarning, match=r"inv_freq held in bfloat16 moves cos/sin by up to"):
        hf.patch(model)
    ids = torch.arange(320)[None]
    x = torch.zeros(1, dtype=torch.bfloat16)
    theirs, _ = original(x, ids)
    mine, _ = model.model.rotary_emb(x, ids)
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16)
    angles = np.arange(320)[:, None] * inv_freq
    exact = np.cos(np.concatenate([angles, angles], -1))
    # posenc's: the float64 values rounded once to bfloat16 (half an ulp, 2**-9)
    assert np.abs(mine[0].double().numpy() - exact).max() <= 2.0**-9
    # transformers': off by far more below position 320
    assert np.abs(theirs[0].double().numpy() - exact).max() > 0.05


def test_falcon_alibi_exact_by_default_transformers_rounding_on_request(tf, hf):
    import torch

    model = _build(tf, "falcon")
    inputs = _inputs(torch, "falcon", length=300)
    want = _logits(model, inputs)
    signature = inspect.signature(model.transformer.forward)
    with pytest.warns(UserWarning, match=r"Falcon's ALiBi in bfloat16"):
        hf.patch(model)
    # the instance's own forward: the class's signature, as its bound method's
    assert "forward" in vars(model.transformer)
    assert inspect.signature(model.transformer.forward) == signature
    exact_logits = _logits(model, inputs)
    hf.unpatch(model)
    # the bias posenc adds, against float64 slopes times positions written out
    mask = inputs["attention_mask"]
    slopes = 2.0 ** (-8.0 * np.arange(1, 5) / 4)
    slopes = np.concatenate([slopes, 2.0 ** (-8.0 * np.array([1, 3]) / 8)])
    positions = (np.cumsum(mask.numpy(), -1) - 1) * mask.numpy()
    exact_bias = slopes[None, :, None] * positions[:, None, :]
    theirs = importlib.import_module(type(model).__module__).build_alibi_tensor(
        mask, 6, torch.float32
    )
    assert np.abs(theirs.view(2, 6, -1).double().numpy() - exact_bias).max() >= 0.25
    assert not torch.equal(exact_logits, want)
    hf.patch(model, exact=False)  # transformers' bfloat16 rounding, reproduced
    assert torch.equal(_logits(model, inputs), want)
    hf.unpatch(model)


def _bloom_slopes(n):
    """ALiBi's slopes for `n` heads in float64, written out: 2 ** (-8 i / m)
    for the power of two m <= n (i = 1 .. m), then the odd-numbered ones of
    2 m heads', 2 ** (-8 j / 2 m) for j = 1, 3, ..."""
    m = 1 << (n.bit_length() - 1)
    extra = np.arange(1, 2 * (n - m), 2)
    return np.concatenate(
        [2.0 ** (-8.0 * np.arange(1, m + 1) / m), 2.0 ** (-8.0 * extra / (2 * m))]
    )


def _mpt_slopes(n):
    """MPT's: 2 ** (-8 i / m) for the power of two m >= n, the odd-numbered
    ones first when n is not a power of two."""
    m = 1 << (n - 1).bit_length()
    slopes = 2.0 ** (-8.0 * np.arange(1, m + 1) / m)
    return slopes if m == n else np.concatenate([slopes[1::2], slopes[::2]])[:n]


def _one_warning(hf, model, match, **kwargs):
    """patch(model), returning the text of the one warning it gives."""
    with pytest.warns(UserWarning, match=match) as record:
        hf.patch(model, **kwargs)
    ours = [str(w.message) for w in record if "posenc.hf.patch" in str(w.message)]
    assert len(ours) == 1, ours
    return ours[0]


def _masks(torch, length):
    """Left padding, a hole in the middle, no padding: (2, length)."""
    mask = torch.ones(2, length, dtype=torch.long)
    mask[0, :3] = 0
    mask[1, length // 2 : length // 2 + 2] = 0
    return [mask, torch.ones(1, length, dtype=torch.long)]


def _bits(t):
    """A float tensor's bits (-0.0 apart from 0.0)."""
    import torch

    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("heads", [12, 16, 112])
def test_bloom_alibi_above_8_heads_exact_by_default_transformers_rounding_on_request(tf, hf, heads):
    import torch

    model = _build(tf, "bloom", hidden_size=2 * heads, n_head=heads)  # 2 dims a head
    inputs = _inputs(torch, "bloom", length=64)
    want = _logits(model, inputs)
    home = importlib.import_module(type(model).__module__)
    slopes = _bloom_slopes(heads)
    # transformers' float32 bias against the exact values rounded once, positions 0..1023
    theirs = home.build_alibi_tensor(torch.ones(1, 1024, dtype=torch.long), heads, torch.float32)
    exact = (slopes[:, None] * np.arange(1024)).astype(np.float32)
    apart = np.abs(theirs[:, 0].double().numpy() - exact).max()
    assert apart > 0  # transformers rounds its slopes: not the exact values
    text = _one_warning(hf, model, r"BLOOM's ALiBi slopes and products in float32")
    assert f"by up to {apart:.3g} " in text
    got = _logits(model, inputs)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    # the patched bias: the exact values rounded once
    for mask in _masks(torch, 300):
        mine = model.transformer.build_alibi_tensor(mask, heads, torch.float32)
        positions = (np.cumsum(mask.numpy(), -1) - 1) * mask.numpy()
        bias = (slopes[None, :, None] * positions[:, None, :]).astype(np.float32)
        np.testing.assert_array_equal(mine.view(len(mask), heads, -1).numpy(), bias)
    hf.unpatch(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing made more exact: nothing to say
        hf.patch(model, exact=False)
    for mask in _masks(torch, 1500):
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            mine = model.transformer.build_alibi_tensor(mask, heads, dtype)
            theirs = home.build_alibi_tensor(mask, heads, dtype)
            assert mine.dtype == theirs.dtype and torch.equal(_bits(mine), _bits(theirs))
    assert torch.equal(_logits(model, inputs), want)
    hf.unpatch(model)
    assert torch.equal(_logits(model, inputs), want)


def test_mpt_alibi_of_12_heads_exact_by_default_transformers_rounding_on_request(tf, hf):
    import torch

    model = _build(tf, "mpt12")
    inputs = _inputs(torch, "mpt", length=64)
    want = _logits(model, inputs)
    home = importlib.import_module(type(model).__module__)
    slopes = _mpt_slopes(12)
    theirs = home.build_mpt_alibi_tensor(12, 1024)  # (heads, 1, 1024)
    exact = (-slopes[:, None] * (1023 - np.arange(1024))).astype(np.float32)
    apart = np.abs(theirs[:, 0].double().numpy() - exact).max()
    assert apart > 0
    text = _one_warning(hf, model, r"MPT's ALiBi slopes and products in float32")
    assert f"by up to {apart:.3g} " in text
    got = _logits(model, inputs)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    np.testing.assert_array_equal(model.transformer.build_mpt_alibi_tensor(12, 1024)[:, 0], exact)
    hf.unpatch(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hf.patch(model, exact=False)
    for length in (1, 7, 64, 1500):
        mine = model.transformer.build_mpt_alibi_tensor(12, length)
        theirs = home.build_mpt_alibi_tensor(12, length)
        assert mine.dtype == theirs.dtype and torch.equal(_bits(mine), _bits(theirs))
    assert torch.equal(_logits(model, inputs), want)
    hf.unpatch(model)


def _mistral_bfloat16_errors(tf, hf, initializer_range):
    """A one-layer Mistral (hidden 128, 4 heads of 32) reading 1024 tokens at
    positions 2048..3071 in bfloat16, unpatched and patched: the largest and
    the mean |logits - float64 logits| of each (the float64 model
    transformers' own)."""
    import torch

    config = tf.MistralConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
        sliding_window=None, initializer_range=initializer_range,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )  # fmt: skip
    torch.manual_seed(0)
    base = tf.MistralForCausalLM(config).eval()
    ids = torch.randint(1, 512, (1, 1024), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(2048, 3072)[None]

    def logits(model):
        with torch.no_grad():
            return model(ids, position_ids=positions, use_cache=False).logits.double()

    want = logits(copy.deepcopy(base).double())
    bf16 = base.to(torch.bfloat16)
    unpatched = logits(bf16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hf.patched(bf16):
            patched = logits(bf16)
    return [(float(d.max()), float(d.mean())) for d in ((unpatched - want).abs(),
                                                        (patched - want).abs())]  # fmt: skip


def test_bfloat16_patched_is_closer_to_float64_over_a_long_context_with_sharp_attention(tf, hf):
    # sharp attention (weights drawn with a large initializer_range): the
    # unpatched model's bfloat16 frequencies move its scores by the distance
    (u_max, u_mean), (p_max, p_mean) = _mistral_bfloat16_errors(tf, hf, 0.2)
    assert u_max >= 2 * p_max and u_mean >= 2 * p_mean, (u_max, u_mean, p_max, p_mean)
    # transformers' default weights: nearly uniform attention, the two alike
    (u_max, u_mean), (p_max, p_mean) = _mistral_bfloat16_errors(tf, hf, 0.02)
    assert 1 / 1.5 <= u_mean / p_mean <= 1.5 and 1 / 1.5 <= u_max / p_max <= 1.5


# -- generate, gradients, compile -------------------------------------------------------


def _generate_unpatched_and_patched(hf, model, inputs, part=None):
    """model.generate's tokens (20 more, greedy, with its KV cache) unpatched,
    and with `part` (the whole model by default) patched."""
    import torch

    kwargs = dict(max_new_tokens=20, do_sample=False, use_cache=True, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(**inputs, **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with hf.patched(model if part is None else part):
                got = model.generate(**inputs, **kwargs)
    return want, got


@pytest.mark.parametrize("name", ALL)
def test_generate_with_cache_and_left_padding_past_max_positions(tf, hf, name):
    import torch

    model = _build(tf, name)
    inputs = _inputs(torch, name, length=6)
    inputs.pop("decoder_input_ids", None)
    want, got = _generate_unpatched_and_patched(hf, model, inputs)
    assert want.shape[1] >= 20
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["llama", "gemma3", "t5", "bloom"])
def test_training_step_gradients(tf, hf, name):
    import torch

    # dropout off, so that the two passes are comparable
    no_dropout = {"t5": {"dropout_rate": 0.0},
                  "bloom": {"hidden_dropout": 0.0, "attention_dropout": 0.0}}  # fmt: skip
    model = _build(tf, name, **no_dropout.get(name, {})).train()
    inputs = _inputs(torch, name, length=20)
    labels = inputs.get("decoder_input_ids", inputs["input_ids"])

    def grads():
        model.zero_grad()
        model(**inputs, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want = grads()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hf.patched(model):
            got = grads()
    assert want.keys() == got.keys() and want
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-6, msg=key)


@pytest.mark.parametrize("name", ["llama", "t5"])
def test_compiled_patched_model_has_no_graph_break(tf, hf, name):
    import torch

    # one layer: compiling costs tens of seconds a layer on a small CPU
    layers = {"num_layers": 1} if name == "t5" else {"num_hidden_layers": 1}
    model = _build(tf, name, **layers)
    inputs = _inputs(torch, name, length=12)
    want = _logits(model, inputs)
    _patch_quietly(hf, model)
    # one graph of the whole patched forward (fullgraph), posenc's operators
    # traced on fake tensors (aot_eager); inductor's code for them is
    # test_torch.py's, its code for a whole model here tens of seconds more
    compiled = torch.compile(model, fullgraph=True, dynamic=False, backend="aot_eager")
    with torch.no_grad():
        got = compiled(**inputs).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    hf.unpatch(model)


@pytest.mark.parametrize("name", ["t5", "llama"])
def test_a_deep_copy_of_a_patched_model_is_patched_on_its_own(tf, hf, name):
    import torch

    model = _build(tf, name)
    inputs = _inputs(torch, name, length=20)
    _patch_quietly(hf, model)
    want = _logits(model, inputs)
    twin = copy.deepcopy(model)
    assert hf.patched_parts(twin) == hf.patched_parts(model)
    assert torch.equal(_logits(twin, inputs), want)
    with torch.no_grad():  # the copy's weights are its own, the patched parts' too
        for p in twin.parameters():
            p.mul_(0.5)
    assert not torch.allclose(_logits(twin, inputs), want)
    assert torch.equal(_logits(model, inputs), want)
    if name == "t5":  # distance 0 is bucket 0: the copy's own table's row
        attention = twin.encoder.block[0].layer[0].SelfAttention
        with torch.no_grad():
            bias = attention.compute_bias(2, 2)
        assert torch.equal(bias[0, :, 0, 0], attention.relative_attention_bias.weight[0])
    hf.unpatch(twin)  # restores the copy's own modules, not the model's
    assert hf.patched_parts(model) and not hf.patched_parts(twin)
    assert torch.equal(_logits(model, inputs), want)
    for m_twin, m_model in zip(twin.modules(), model.modules()):
        assert m_twin is not m_model
    hf.unpatch(model)


# every kind of model patch supports
KINDS = ALL + ["bloom12", "mpt12", "deberta", "xlnet"]


def _saved_and_loaded(model):
    import torch

    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _holds_posenc(model):
    """Whether any module of `model` is posenc's or holds a posenc object in
    its own attributes."""
    return any(
        type(m).__module__.startswith("posenc")
        or any(type(v).__module__.startswith("posenc") for v in vars(m).values())
        for m in model.modules()
    )


@pytest.mark.parametrize("name", KINDS)
def test_a_patched_model_pickles_saves_and_deep_copies(tf, hf, name):
    import torch

    model = _build(tf, name)
    inputs = _inputs(torch, name, length=20)
    want = _logits(model, inputs)
    _patch_quietly(hf, model)
    parts = hf.patched_parts(model)
    patched_want = _logits(model, inputs)
    ways = {"pickle": lambda m: pickle.loads(pickle.dumps(m)), "torch.save": _saved_and_loaded,
            "deepcopy": copy.deepcopy}  # fmt: skip
    for way, copy_of in ways.items():
        twin = copy_of(model)
        assert hf.patched_parts(twin) == parts, way
        assert torch.equal(_logits(twin, inputs), patched_want), way
        hf.unpatch(twin)  # transformers' own code again: the unpatched model's bits
        assert not _holds_posenc(twin), way
        assert torch.equal(_logits(twin, inputs), want), way
        assert hf.patched_parts(model) == parts
    assert torch.equal(_logits(model, inputs), patched_want)
    hf.unpatch(model)
    assert torch.equal(_logits(model, inputs), want)


def _patched_equals_unpatched(hf, model, forward):
    """The logits of forward() and the gradients of their mean square, model
    as it is and then patched (2 parts): the same within float32's rounding.
    Returns the unpatched logits, their largest size and the run (the model
    left patched)."""
    import torch

    def run():
        model.zero_grad()
        logits = forward()
        logits.square().mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logits.detach(), grads

    want, want_grads = run()
    hf.patch(model)
    assert len(hf.patched_parts(model)) == 2
    got, got_grads = run()
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 1e-5 * scale
    for key in want_grads:
        torch.testing.assert_close(got_grads[key], want_grads[key], rtol=1e-3, atol=1e-5,
                                   msg=key)  # fmt: skip
    return want, scale, run


@pytest.mark.parametrize(
    "buckets",
    [dict(position_buckets=8, max_relative_positions=16, share_att_key=True),
     dict(position_buckets=-1, max_relative_positions=-1, share_att_key=False)],
)  # fmt: skip
def test_deberta_v2_relative_attention_patched(tf, hf, buckets):
    import torch

    torch.manual_seed(0)
    config = tf.DebertaV2Config(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, relative_attention=True,
        pos_att_type=["c2p", "p2c"], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        **buckets,
    )  # fmt: skip
    model = tf.DebertaV2ForMaskedLM(config).train()
    with torch.no_grad():  # weights large enough for the relative terms to matter
        for p in model.parameters():
            p.normal_(0, 0.5)
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
    ids = torch.randint(1, VOCAB, (2, 30), generator=torch.Generator().manual_seed(3))
    want, scale, _ = _patched_equals_unpatched(hf, model, lambda: model(ids).logits)
    hf.unpatch(model)
    # the relative terms move these logits by far more than that
    for m in model.modules():
        if type(m).__name__ == "DisentangledSelfAttention":
            m.__dict__["disentangled_attention_bias"] = lambda *args: 0
    with torch.no_grad():
        assert float((model(ids).logits - want).abs().max()) > 0.1 * scale


def _xlnet_with_memory(tf, **overrides):
    """A 2-layer XLNet keeping 8 tokens of memory, in training mode (no
    dropout), its weights large enough for the position term to matter."""
    import torch

    torch.manual_seed(0)
    config = tf.XLNetConfig(vocab_size=VOCAB, d_model=32, n_layer=2, n_head=4, d_inner=64,
                            dropout=0.0, mem_len=8, **overrides)  # fmt: skip
    model = tf.XLNetLMHeadModel(config).train()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model


def test_xlnet_relative_attention_patched_with_memory(tf, hf, monkeypatch):
    import torch

    import posenc.relative

    model = _xlnet_with_memory(tf)
    g = torch.Generator().manual_seed(3)
    first, second = torch.randint(1, VOCAB, (2, 2, 10), generator=g)
    types = torch.randint(0, 2, (2, 10), generator=g)

    def forward():
        with torch.no_grad():
            mems = model(first, token_type_ids=types, use_mems=True).mems
        # a segment after a memory: 10 queries, 18 keys
        return model(second, token_type_ids=types, mems=mems, use_mems=True).logits

    want, scale, run = _patched_equals_unpatched(hf, model, forward)
    # the position term moves these logits by far more than that
    zero = lambda q, r, **kw: torch.zeros(q.shape[:-1] + (kw["k_len"],))  # noqa: E731
    monkeypatch.setattr(posenc.relative, "xl_position_term", zero)
    without, _ = run()
    assert float((without - want).abs().max()) > 0.1 * scale
    hf.unpatch(model)


@pytest.mark.parametrize("attn_type", ["uni", "bi"])
def test_xlnet_of_either_attention_type_patched_with_and_without_memory(tf, hf, attn_type):
    # "uni"'s table has k_len + 1 rows (no distances for the keys after each
    # query, which its causal mask hides): the patched model failed at forward
    import torch

    model = _xlnet_with_memory(tf, attn_type=attn_type)
    g = torch.Generator().manual_seed(4)
    first, second = torch.randint(1, VOCAB, (2, 2, 10), generator=g)
    # the query stream too: every query blind to the last token, predicting 3
    perm = torch.zeros(1, 10, 10)
    perm[:, :, -1] = 1
    target = torch.zeros(1, 3, 10)
    target[0, [0, 1, 2], [9, 0, 4]] = 1

    def forward():
        plain = model(first).logits
        with torch.no_grad():
            mems = model(first, use_mems=True).mems
        # a segment after a memory: 10 queries, 18 keys
        after = model(second, mems=mems, use_mems=True).logits
        stream = model(first[:1], perm_mask=perm, target_mapping=target).logits
        return torch.cat([plain.flatten(), after.flatten(), stream.flatten()])

    want, scale, _ = _patched_equals_unpatched(hf, model, forward)
    hf.unpatch(model)
    # the position term moves these logits by far more than that
    for layer in model.transformer.layer:
        layer.rel_attn.r_r_bias.data.zero_()
        layer.rel_attn.r.data.zero_()
    with torch.no_grad():
        assert float((forward() - want).abs().max()) > 0.1 * scale


# -- what patch refuses -------------------------------------------------------------------


def test_patch_refuses_whole_models_it_cannot_patch(tf, hf):
    import torch

    torch.manual_seed(0)
    bert = tf.BertModel(tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=64))  # fmt: skip
    with pytest.raises(ValueError, match="no position encoding posenc knows.*Supported"):
        hf.patch(bert)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        hf.patch(object())
    with pytest.raises(TypeError, match="exact must be a bool, got str"):
        hf.patch(_build(tf, "bloom"), exact="no")
    model = _build(tf, "llama")
    with pytest.raises(ValueError, match="not patched"):
        hf.unpatch(model)
    _patch_quietly(hf, model)
    with pytest.raises(ValueError, match="already patched"):
        hf.patch(model)
    hf.unpatch(model)


def test_a_module_posenc_does_not_reproduce_leaves_the_model_untouched(tf, hf):
    import torch

    model = _build(tf, "llama")
    rotary = model.model.rotary_emb
    # a rotary module whose numbers do not follow its config: refused, by name
    rotary.inv_freq.mul_(1.5)
    rotary.original_inv_freq.mul_(1.5)
    state = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=r"model.rotary_emb \(LlamaRotaryEmbedding\)"):
        hf.patch(model)
    assert model.model.rotary_emb is rotary
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("name", KINDS)
def test_patch_leaves_every_training_flag_as_it_was(tf, hf, name):
    model = _build(tf, name)
    for i, module in enumerate(model.modules()):  # eval under train, train under eval
        module.training = i % 3 != 1
    flags = {n: m.training for n, m in model.named_modules()}
    _patch_quietly(hf, model)
    # a replaced module's replacement has its flag (a replacement's parts theirs)
    after = {n: m.training for n, m in model.named_modules()}
    assert {n: after[n] for n in flags} == flags
    assert all(after[n] == flags[n.rpartition(".")[0]] for n in after.keys() - flags.keys())
    hf.unpatch(model)
    assert {n: m.training for n, m in model.named_modules()} == flags


def test_a_module_put_back_takes_the_flag_set_while_patched(tf, hf):
    model = _build(tf, "llama")  # eval
    original = model.model.rotary_emb
    hf.patch(model)
    model.train()  # the replacement in train mode, with the rest
    hf.unpatch(model)
    assert model.model.rotary_emb is original
    assert all(m.training for m in model.modules())


def test_a_refused_xlnet_patch_leaves_every_training_flag_as_it_was(tf, hf):
    model = _build(tf, "xlnet").train()
    model.transformer.layer[0].rel_attn.dropout.eval()
    flags = [m.training for m in model.modules()]

    def refuses(*args, **kwargs):
        raise ValueError("not this one")

    # the second layer's check fails after the first one's has run
    model.transformer.layer[1].rel_attn.__dict__["rel_attn_core"] = refuses
    with pytest.raises(ValueError, match=r"layer.1.rel_attn \(XLNetRelativeAttention\)"):
        hf.patch(model)
    assert [m.training for m in model.modules()] == flags
    assert not _holds_posenc(model)


def test_longt5_transient_global_attention_is_refused_saying_why(tf, hf):
    model = _build(tf, "longt5_tglobal")
    with pytest.raises(
        ValueError,
        match=r"TransientGlobalSelfAttention \(LongT5TransientGlobalAttention\) is not "
        r"supported: LongT5's transient-global attention .*compute_side_bias",
    ):
        hf.patch(model)
    assert not _holds_posenc(model)


def test_longt5_local_attention_bias_is_posencs_by_blocks(tf, hf):
    import torch

    model = _build(tf, "longt5")  # local_radius 3: blocks of 4 tokens
    attention = model.encoder.block[0].layer[0].LocalSelfAttention
    hf.patch(model)
    bias = attention.compute_bias(4)
    assert bias.shape == (1, 1, 4, 4, 12)
    # block queries at 4..7, keys at 0..11: the table's row of each distance's bucket
    table = attention.relative_attention_bias.weight
    buckets = _t5_buckets(np.arange(12)[None, :] - np.arange(4, 8)[:, None], table.shape[0])
    with torch.no_grad():
        assert torch.equal(bias[0, 0], table[torch.from_numpy(buckets)].permute(2, 0, 1))
    hf.unpatch(model)


def _t5_buckets(relative, num_buckets, max_distance=20):
    """T5's bidirectional buckets written out (Raffel et al.): half the
    buckets a side, exact below half of those, logarithmic to max_distance."""
    half = num_buckets // 2
    out = (relative > 0) * half
    n = np.abs(relative)
    exact = half // 2
    large = exact + (np.log(np.maximum(n, 1) / exact) / np.log(max_distance / exact)
                     * (half - exact)).astype(np.int64)  # fmt: skip
    return out + np.where(n < exact, n, np.minimum(large, half - 1))


@pytest.mark.parametrize("name", ["gptj", "codegen"])
def test_gptj_tables_float64_exact_and_exact_false_keeps_transformers_module(tf, hf, name):
    import torch

    model = _build(tf, name).double()
    inputs = _inputs(torch, name)
    want = _logits(model, inputs)
    original = model.transformer.rotary_emb
    _one_warning(hf, model, "angles formed in float32 in a float64 model")
    got = _logits(model, inputs)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    rotary = model.transformer.rotary_emb
    assert rotary is not original
    # (sin, cos) of each pair's angle: the float64 values, past the model's 64 positions
    sin, cos = rotary(torch.zeros(1, dtype=torch.float64), torch.arange(3000)[None])
    angles = np.arange(3000)[:, None] / 10000.0 ** (np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(sin[0].numpy(), np.sin(angles), rtol=0, atol=1e-12)
    np.testing.assert_allclose(cos[0].numpy(), np.cos(angles), rtol=0, atol=1e-12)
    # the dtype of transformers' module: x's (GPT-J), its table's (CodeGen)
    ids = torch.arange(5)[None]
    for x in (torch.zeros(1), torch.zeros(1, dtype=torch.float64)):
        assert rotary(x, ids)[0].dtype == original(x, ids)[0].dtype
    hf.unpatch(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hf.patch(model, exact=False)  # transformers' rounding: its module kept
    assert model.transformer.rotary_emb is original
    assert torch.equal(_logits(model, inputs), want)
    hf.unpatch(model)


def test_a_gptj_table_apart_from_its_formula_is_refused(tf, hf):
    model = _build(tf, "gptj")
    model.transformer.rotary_emb.embed_positions.mul_(1.001)
    with pytest.raises(ValueError, match=r"transformer.rotary_emb \(GPTJRotaryEmbedding\) is not "
                       r"supported: .* more than its dtype's rounding"):  # fmt: skip
        hf.patch(model)
    assert not _holds_posenc(model)


def test_a_part_of_a_patched_model_is_not_patched_again(tf, hf):
    import torch

    model = _build(tf, "bloom")
    inputs = _inputs(torch, "bloom")
    want = _logits(model, inputs)
    hf.patch(model)
    with pytest.raises(ValueError, match=r"BloomModel \(BloomModel\) is posenc's already"):
        hf.patch(model.transformer)
    hf.unpatch(model)
    hf.patch(model.transformer)
    with pytest.raises(ValueError, match="transformer is patched already: unpatch it first"):
        hf.patch(model)
    hf.unpatch(model.transformer)
    assert not _holds_posenc(model)
    assert torch.equal(_logits(model, inputs), want)


@pytest.mark.parametrize("name", ["llama", "gemma3", "gptoss"])
def test_a_config_edited_after_patch_moves_neither_model(tf, hf, name):
    import torch

    model = _build(tf, name)
    inputs = _inputs(torch, name, length=300)  # past the tables the patch's check made
    want = _logits(model, inputs)
    _patch_quietly(hf, model)
    # transformers' rotary modules hold their frequencies from their config as it was
    params = model.config.rope_parameters
    for p in params.values() if "full_attention" in params else [params]:
        p["rope_theta"] = 3.0
    got = _logits(model, inputs)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    hf.unpatch(model)
    assert torch.equal(_logits(model, inputs), want)


def test_a_rotary_module_apart_from_its_config_is_refused(tf, hf):
    # llama3's scaled frequencies move little at positions 0..15: a theta
    # edited after the model was built stays within any looser check there
    model = _build(tf, "llama3")
    model.config.rope_parameters["rope_theta"] *= 3
    with pytest.raises(ValueError, match=r"model.rotary_emb \(LlamaRotaryEmbedding\): its tables "
                       r"differ .* does not follow its config as it is now"):  # fmt: skip
        _patch_quietly(hf, model)
    assert not _holds_posenc(model)


# -- every rotary class of transformers ---------------------------------------------------------


def _same_tables(torch, original, patched):
    """The patched module's tables against transformers' module's on 48
    positions (three rows for M-RoPE; within a table's rows where the
    module looks its tables up), every layer type: within transformers'
    float32 rounding."""
    config = getattr(original, "config", None)
    rope_type = getattr(original, "rope_type", None)
    layer_types = list(rope_type) if isinstance(rope_type, dict) else [None]
    for layer_type in layer_types:
        params = (config.rope_parameters or {}) if config is not None else {}
        params = params.get(layer_type) or {} if layer_type is not None else params
        table = getattr(original, "embed_positions", None)
        ids = torch.arange(48 if table is None else min(48, table.shape[0]))[None]
        if params.get("mrope_section") is not None:
            ids = torch.stack([ids, ids // 4, ids % 7])
        kwargs = {} if layer_type is None else {"layer_type": layer_type}
        x = torch.zeros(1)
        with torch.no_grad():
            want = copy.deepcopy(original)(x, ids, **kwargs)
            got = patched(x, ids, **kwargs)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype
            err = float((a.double() - b.double()).abs().max())
            assert err <= 1e-4, f"{type(original).__name__} {layer_type}: off by {err}"


def test_every_rotary_class_is_patched_or_refused_by_name(tf, hf, capsys):
    import torch

    outcomes = {}
    for module, cls in rotary_classes(tf):
        if "config" not in inspect.signature(cls.__init__).parameters:
            continue
        built = None
        for config in default_configs(tf, module, cls):
            try:
                built = cls(config)
                break
            except Exception:
                continue
        if built is None:
            outcomes[cls.__name__] = "not built"
            continue
        holder = torch.nn.Module()
        holder.rotary_emb = built
        try:
            _patch_quietly(hf, holder)
        except ValueError as exc:
            assert "rotary_emb" in str(exc) or "Supported" in str(exc), str(exc)
            outcomes[cls.__name__] = "refused"
            continue
        assert not isinstance(holder.rotary_emb, cls)
        _same_tables(torch, built, holder.rotary_emb)
        hf.unpatch(holder)
        assert holder.rotary_emb is built
        outcomes[cls.__name__] = "patched"
    tally = {k: sum(v == k for v in outcomes.values()) for k in set(outcomes.values())}
    with capsys.disabled():
        print(f"\nposenc.hf.patch over transformers' rotary classes: {tally}")
        print("refused: " + ", ".join(sorted(k for k, v in outcomes.items() if v == "refused")))
    assert tally.get("patched", 0) >= 100, tally
