"""posenc.Rope: a RoPE configuration read once, and the plans apply_rope and
rope_cos_sin keep for their options.

The witnesses are posenc.reference (NumPy, float64, written apart from the
kernels and the plan), and with torch installed transformers' own rotation
(``apply_rotary_pos_emb`` on ``LlamaRotaryEmbedding``'s tables).
"""

import pickle
import threading
import warnings

import numpy as np
import pytest
from optional import require

import posenc
from posenc import reference
from posenc import rope as rope_module

CONFIGS = [
    {},
    {"scaling": {"rope_type": "linear", "factor": 4.0}},
    {"scaling": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}},
    {
        "scaling": {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 64,
        }
    },
    {"layout": "interleaved", "rotary_dim": 8},
    {"xpos": "query", "xpos_scale_base": 64.0},
    {"xpos": "key", "xpos_scale_base": 64.0, "xpos_centre": 20.0},
]


def _x(shape=(2, 3, 40, 16), dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("options", CONFIGS)
def test_apply_is_the_reference_rotation(options):
    x = _x()
    plan = posenc.Rope(16, **options)
    positions = np.arange(40) * 3 + 1
    for pos, offset in ((None, 0), (None, 7), (positions, 0), (positions, 2.5)):
        expected = reference.apply_rope(x, pos, offset=offset, **options)
        got = plan.apply(x, pos, offset=offset)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        # and the same bits as apply_rope's call with these options
        assert np.array_equal(got, posenc.apply_rope(x, pos, offset=offset, **options))


@pytest.mark.parametrize("options", [o for o in CONFIGS if "rotary_dim" not in o])
def test_cos_sin_are_the_reference_tables(options):
    plan = posenc.Rope(16, **options)
    positions = np.array([[0, 5, 17], [3, 1000, 65537 if "xpos" not in options else 4000]])
    cos, sin = plan.cos_sin(positions, dtype="float64")
    ref_cos, ref_sin = reference.rope_cos_sin(positions, 16, dtype="float64", **options)
    np.testing.assert_allclose(cos, ref_cos, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sin, ref_sin, rtol=1e-12, atol=1e-12)


def test_decoding_steps_are_the_whole_sequence_rotated():
    # a KV cache's steps, one position at a time, against one call on all
    x = _x((1, 4, 12, 32), np.float32)
    plan = posenc.Rope(32)
    whole = plan.apply(x)
    out = np.empty_like(x[:, :, :1])
    for p in range(12):
        step = plan.apply(x[:, :, p : p + 1], offset=p, out=out)
        assert step is out
        assert np.array_equal(step, whole[:, :, p : p + 1])


def test_attributes_and_frequencies():
    plan = posenc.Rope(10, scaling={"rope_type": "linear", "factor": 2.0}, rotary_dim=6)
    assert (plan.head_dim, plan.rotary_dim, plan.layout, plan.family) == (10, 6, "half", "linear")
    inv_freq, factor = plan.frequencies()
    np.testing.assert_allclose(inv_freq, 10000.0 ** (-np.arange(0, 6, 2) / 6) / 2.0, rtol=1e-15)
    assert factor == 1.0
    assert "linear" in repr(plan)
    with pytest.raises(ValueError, match="read-only"):
        inv_freq[0] = 1.0
    # a family's parameters are read when the plan is built
    with pytest.raises(ValueError, match="factor"):
        posenc.Rope(8, scaling={"rope_type": "linear", "factor": -1.0})


def test_a_plan_cannot_be_changed():
    plan = posenc.Rope(8)
    with pytest.raises(AttributeError, match="cannot be changed"):
        plan.base = 500.0
    with pytest.raises(AttributeError, match="cannot be changed"):
        del plan.head_dim
    with pytest.raises(AttributeError):
        plan.anything = 1


def test_a_plan_reads_a_copy_of_its_config():
    scaling = {"rope_type": "linear", "factor": 4.0}
    plan = posenc.Rope(16, scaling=scaling)
    scaling["factor"] = 1.0  # the caller's dict edited afterwards
    x = _x()
    expected = reference.apply_rope(x, scaling={"rope_type": "linear", "factor": 4.0})
    np.testing.assert_allclose(plan.apply(x), expected, rtol=1e-12, atol=1e-12)


def test_apply_rope_follows_an_edited_dict():
    # the plan kept for a dict's values is not the one for its new values
    scaling = {"rope_type": "linear", "factor": 4.0}
    x = _x()
    first = posenc.apply_rope(x, scaling=scaling)
    scaling["factor"] = 2.0
    second = posenc.apply_rope(x, scaling=scaling)
    np.testing.assert_allclose(
        first,
        reference.apply_rope(x, scaling={"rope_type": "linear", "factor": 4.0}),
        rtol=1e-12,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        second, reference.apply_rope(x, scaling=scaling), rtol=1e-12, atol=1e-12
    )


def test_kept_plans_do_not_mix_values_that_compare_equal():
    x = _x()
    # an int factor and a float one are the same numbers; a bool is refused,
    # also after a plan for the int 1 is kept
    a = posenc.apply_rope(x, scaling={"rope_type": "linear", "factor": 2})
    b = posenc.apply_rope(x, scaling={"rope_type": "linear", "factor": 2.0})
    assert np.array_equal(a, b)
    posenc.apply_rope(x, scaling={"rope_type": "linear", "factor": 1})
    with pytest.raises(TypeError, match="factor"):
        posenc.apply_rope(x, scaling={"rope_type": "linear", "factor": True})
    posenc.apply_rope(x, rotary_dim=8)
    with pytest.raises(TypeError, match="rotary_dim"):
        posenc.apply_rope(x, rotary_dim=8.0)


def test_unknown_keys_warn_on_every_call():
    x = _x()
    scaling = {"rope_type": "linear", "factor": 2.0, "not_a_key": 1}
    for _ in range(2):
        with pytest.warns(UserWarning, match="not_a_key"):
            posenc.apply_rope(x, scaling=scaling)


def test_the_kept_plans_are_bounded():
    x = _x((1, 1, 2, 4))
    for factor in range(1, 3 * rope_module._PLANS_KEPT):
        posenc.apply_rope(x, scaling={"rope_type": "linear", "factor": float(factor)})
    assert len(rope_module._PLANS) <= rope_module._PLANS_KEPT


def test_threads_share_the_kept_plans():
    x = _x((1, 2, 9, 16))
    factors = [1.0 + i / 8 for i in range(24)]
    expected = {
        f: reference.apply_rope(x, scaling={"rope_type": "linear", "factor": f}) for f in factors
    }
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for f in rng.choice(factors, 60):
            got = posenc.apply_rope(x, scaling={"rope_type": "linear", "factor": float(f)})
            if not np.allclose(got, expected[float(f)], rtol=1e-12, atol=1e-12):
                failures.append(float(f))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_pickled_plan_rotates_the_same():
    plan = posenc.Rope(
        16,
        scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
        xpos="key",
    )
    again = pickle.loads(pickle.dumps(plan))
    x = _x()
    assert np.array_equal(again.apply(x, offset=3), plan.apply(x, offset=3))
    assert repr(again) == repr(plan)


def test_bad_input_is_named():
    plan = posenc.Rope(16)
    x = _x()
    with pytest.raises(ValueError, match="head_dim 16"):
        plan.apply(_x((2, 5, 8)))
    with pytest.raises(TypeError, match="offset"):
        plan.apply(x, offset="3")
    with pytest.raises(TypeError, match="inverse"):
        plan.apply(x, inverse=1)
    with pytest.raises(TypeError, match="x must have dtype"):
        plan.apply(x.astype(np.int32))
    with pytest.raises(ValueError, match="head_dim must be >= 1"):
        posenc.Rope(0)
    with pytest.raises(ValueError, match="rotary_dim defaults to head_dim = 7"):
        posenc.Rope(7)
    with pytest.raises(ValueError, match="layout"):
        posenc.Rope(8, layout="halves")
    with pytest.raises(ValueError, match="full=True"):
        posenc.Rope(8, mrope_section=[2, 1, 1]).cos_sin(np.zeros((3, 2, 4), int), full=False)
    # the plan's tables take the two layouts of rope_cos_sin
    with pytest.raises(ValueError, match="layout must be one of"):
        posenc.Rope(8, layout="interleaved_to_half").cos_sin(4)
    # values that are neither NumPy's nor another library's are refused by name
    with pytest.raises(TypeError, match="dtype"):
        posenc.rope_cos_sin(0, 8, dtype=1 + 2j)
    with pytest.raises(TypeError, match="dtype"):
        plan.cos_sin(4, dtype=complex)
    with pytest.raises(TypeError, match="out"):
        plan.apply(x, out=[0.0])
    with pytest.raises(TypeError, match="positions"):
        plan.apply(x, np.array(["a"] * 40))
    before = x.copy()
    with pytest.raises(ValueError):
        plan.apply(x, np.arange(7))
    assert np.array_equal(x, before)


def test_torch_tensors_as_transformers_rotates_them():
    torch = require("torch")
    transformers = require("transformers")
    from transformers.models.llama import modeling_llama

    config = transformers.LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    )
    hf = modeling_llama.LlamaRotaryEmbedding(config)
    plan = posenc.Rope(16, scaling=config)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 16, dtype=torch.float64, generator=gen)
    ids = torch.tensor([[0, 1, 2, 3, 4], [9, 10, 11, 12, 13]])
    cos, sin = hf(q, ids)
    expected, _ = modeling_llama.apply_rotary_pos_emb(q, q, cos, sin)
    got = plan.apply(q, ids[:, None, :])
    assert type(got) is torch.Tensor and got.dtype == torch.float64
    # (transformers forms its frequencies in float32, posenc in float64)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    # one decoding step at position 4096 in float32 (transformers' angles
    # there are float32's, off by ~1e-5: the float64 reference is the witness)
    step = q[:1, :, :1].float()
    expected = reference.apply_rope(step.numpy(), offset=4096, scaling=config.rope_parameters)
    got = plan.apply(step, offset=4096)
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-6)
    # tables as the module gives them
    ours = plan.cos_sin(ids, dtype=torch.float32)
    theirs = hf(q.float(), ids)
    torch.testing.assert_close(ours[0], theirs[0], rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(ours[1], theirs[1], rtol=2e-6, atol=2e-6)


def test_torch_gradient_and_bfloat16_take_the_routed_path():
    torch = require("torch")
    plan = posenc.Rope(8)
    x = torch.randn(1, 2, 6, 8, dtype=torch.float64, requires_grad=True)
    y = plan.apply(x, offset=3)
    assert y.requires_grad
    grad = torch.randn(y.shape, dtype=torch.float64)
    y.backward(grad)
    # the rotation is orthogonal: its gradient is the inverse rotation
    expected = reference.apply_rope(grad.numpy(), offset=3, inverse=True)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12, atol=1e-12)
    xb = torch.randn(1, 2, 6, 8).bfloat16()
    got = plan.apply(xb)
    assert got.dtype == torch.bfloat16
    exact = reference.apply_rope(xb.float().numpy())
    np.testing.assert_allclose(got.float().numpy(), exact, rtol=2**-7, atol=2**-7)
    # out= a tensor: written in place, as apply_rope writes it
    out = torch.empty(1, 2, 6, 8, dtype=torch.float64)
    with torch.no_grad():
        assert plan.apply(x, out=out) is out
    np.testing.assert_allclose(
        out.numpy(), reference.apply_rope(x.detach().numpy()), rtol=1e-12, atol=1e-12
    )


def test_no_warning_for_a_known_dict():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        posenc.apply_rope(
            _x(),
            scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
