"""posenc.torch: the modules for one's own torch model.

The witnesses are NumPy float64 formulas written here, posenc.reference, and
posenc's own C kernels through posenc.apply_rope (which this module's torch
ops do not call).  torch is required under POSENC_REQUIRE_CONFORMANCE=1 (as CI
sets it) and the tests are skipped without it otherwise.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from optional import require

import posenc
from posenc import reference

torch = require("torch")

import posenc.torch as pt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(posenc.__file__))


def _cos_sin_by_hand(positions, head_dim, base=10000.0, rotary_dim=None):
    """float64 cos and sin, the "half" layout, written out (partial rotary:
    the frequencies of a head of `rotary_dim`, as GPT-NeoX's)."""
    rotary = head_dim if rotary_dim is None else rotary_dim
    inv_freq = 1.0 / base ** (np.arange(0, rotary, 2, dtype=np.float64) / rotary)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * inv_freq
    angles = np.concatenate([angles, angles], -1)
    return np.cos(angles), np.sin(angles)


# -- imports ----------------------------------------------------------------------


def test_import_posenc_imports_neither_torch_nor_transformers():
    code = (
        "import posenc, sys; "
        "assert 'torch' not in sys.modules, 'torch'; "
        "assert 'transformers' not in sys.modules, 'transformers'; "
        "import posenc.hf; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'hf'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- RotaryEmbedding -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_rotary_tables_are_float64_rounded_once(dtype):
    rotary = pt.RotaryEmbedding(16, base=500.0)
    ids = torch.tensor([[0, 0, 1, 2, 3], [0, 1, 2, 3, 4]]) * 1000  # left padding, far positions
    cos, sin = rotary(torch.zeros(1, dtype=dtype), ids)
    assert cos.shape == (2, 5, 16) and cos.dtype == dtype and sin.dtype == dtype
    want_cos, want_sin = _cos_sin_by_hand(ids.numpy(), 16, base=500.0)
    if dtype == torch.float64:  # the hand formula's own float64 angle rounding
        np.testing.assert_allclose(cos.numpy(), want_cos, rtol=0, atol=1e-12)
        np.testing.assert_allclose(sin.numpy(), want_sin, rtol=0, atol=1e-12)
    else:  # the float64 values rounded once
        np_dtype = np.float16 if dtype == torch.float16 else np.float32
        np.testing.assert_array_equal(cos.numpy(), want_cos.astype(np_dtype))
        np.testing.assert_array_equal(sin.numpy(), want_sin.astype(np_dtype))


def test_rotary_decode_steps_reuse_the_tables(monkeypatch):
    rotary = pt.RotaryEmbedding(8)
    calls = []
    real = pt._rope.rope_cos_sin

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(pt._rope, "rope_cos_sin", counting)
    x = torch.zeros(1)
    rotary(x, torch.arange(10)[None])
    assert len(calls) == 1
    for step in range(10, 40):  # a decoding loop: no new table
        cos, _ = rotary(x, torch.tensor([[step]]))
        want, _ = _cos_sin_by_hand([[step]], 8)
        np.testing.assert_array_equal(cos.numpy(), want.astype(np.float32))
    assert len(calls) == 1
    rotary(x, torch.arange(5000)[None])  # past the table: grown once
    assert len(calls) == 2
    rotary(x, torch.arange(10)[None].double().long())
    rotary(torch.zeros(1, dtype=torch.float64), torch.arange(10)[None])  # a new dtype
    assert len(calls) == 3


def test_rotary_from_config_dict_partial_rotary():
    config = {"rope_parameters": {"rope_type": "default", "rope_theta": 1000.0,
                                  "partial_rotary_factor": 0.5},
              "head_dim": 16, "max_position_embeddings": 64}  # fmt: skip
    rotary = pt.RotaryEmbedding(config=config)
    assert rotary.head_dim == 16 and rotary.rotary_dim == 8
    cos, sin = rotary(torch.zeros(1), torch.arange(7)[None])
    want_cos, want_sin = _cos_sin_by_hand(np.arange(7)[None], 16, base=1000.0, rotary_dim=8)
    np.testing.assert_allclose(cos.numpy(), want_cos, rtol=0, atol=1e-7)
    np.testing.assert_allclose(sin.numpy(), want_sin, rtol=0, atol=1e-7)


def test_rotary_refuses_bad_position_ids():
    rotary = pt.RotaryEmbedding(8)
    with pytest.raises(TypeError, match="position_ids"):
        rotary(torch.zeros(1), torch.arange(4.0)[None])
    with pytest.raises(ValueError, match="position_ids"):
        rotary(torch.zeros(1), torch.tensor([[-1, 0, 1]]))
    with pytest.raises(TypeError, match="head_dim or config"):
        pt.RotaryEmbedding()
    with pytest.raises(ValueError, match="dim"):
        pt.RotaryEmbedding(7)


def test_rotary_device_path_gives_the_cpu_numbers(monkeypatch):
    ids = torch.tensor([[3, 4, 5, 6]])
    want = pt.RotaryEmbedding(16)(torch.zeros(1), ids)
    monkeypatch.setattr(pt, "_FORCE_DEVICE_PATH", True)
    got = pt.RotaryEmbedding(16)(torch.zeros(1), ids)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# -- apply_rotary ---------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_apply_rotary_against_apply_rope_heads_equal_seq(layout):
    # heads == seq: the layout name, not the sizes, says which axis is seq
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3]])
    q = torch.randn(2, 4, 4, 16, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 4, 16, generator=g, dtype=torch.float64)
    if layout == "bshd":
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    rotary = pt.RotaryEmbedding(16)
    cos, sin = rotary(q, ids)
    q2, k2 = pt.apply_rotary(q, k, cos, sin, layout=layout)
    seq_axis = -2 if layout == "bhsd" else -3
    torch.testing.assert_close(q2, posenc.apply_rope(q, ids, seq_axis=seq_axis), rtol=0, atol=1e-12)
    torch.testing.assert_close(k2, posenc.apply_rope(k, ids, seq_axis=seq_axis), rtol=0, atol=1e-12)
    q3, k3 = rotary.rotate(q, k, ids, layout=layout)
    torch.testing.assert_close((q3, k3), (q2, k2), rtol=0, atol=0)


def test_apply_rotary_partial_and_interleaved():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 5, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 5, 16, generator=g, dtype=torch.float64)
    ids = torch.arange(5)[None]
    cos, sin = pt.RotaryEmbedding(16, config={"partial_rotary_factor": 0.5})(q, ids)
    q2, _ = pt.apply_rotary(q, k, cos, sin)
    want = posenc.apply_rope(q, ids, rotary_dim=8)
    torch.testing.assert_close(q2, want, rtol=0, atol=1e-12)
    rotary = pt.RotaryEmbedding(16, layout="interleaved")
    q3, _ = rotary.rotate(q, k, ids)
    torch.testing.assert_close(q3, posenc.apply_rope(q, ids, layout="interleaved"), rtol=0,
                               atol=1e-12)  # fmt: skip


def test_apply_rotary_refuses_what_it_cannot_place():
    q = torch.zeros(1, 4, 6, 8)
    cos = sin = torch.zeros(1, 6, 8)
    with pytest.raises(ValueError, match="layout"):
        pt.apply_rotary(q, q, cos, sin, layout="bsd")
    with pytest.raises(ValueError, match="seq axis"):  # (1, 4, 6, 8) read as bshd: seq 4
        pt.apply_rotary(q, q, cos, sin, layout="bshd")
    with pytest.raises(ValueError, match="columns"):
        pt.apply_rotary(q, q, torch.zeros(1, 6, 10), torch.zeros(1, 6, 10))
    with pytest.raises(ValueError, match="batch"):
        pt.apply_rotary(q, q, torch.zeros(3, 6, 8), torch.zeros(3, 6, 8))
    with pytest.raises(TypeError, match="k must be a torch tensor"):
        pt.apply_rotary(q, np.zeros((1, 4, 6, 8)), cos, sin)


# -- ALiBi -------------------------------------------------------------------------------


def test_alibi_bias_and_key_bias_against_hand():
    alibi = pt.ALiBi(6)
    slopes = reference.alibi_slopes(6)
    got = alibi.bias(3, 5, dtype=torch.float64)
    i = np.arange(2, 5)[:, None]  # the newest 3 of 5
    j = np.arange(5)[None, :]
    want = np.where(j <= i, -(i - j) * slopes[:, None, None], -np.inf)
    np.testing.assert_array_equal(got.numpy(), want)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    key = alibi.key_bias(mask, dtype=torch.float32)
    positions = (np.cumsum(mask.numpy(), -1) - 1) * mask.numpy()
    want_key = (slopes[None, :, None] * positions[:, None, :])[:, :, None, :]
    assert key.shape == (2, 6, 1, 5)
    np.testing.assert_array_equal(key.numpy(), want_key.astype(np.float32))
    scores = torch.zeros(2, 6, 3, 5, dtype=torch.float64)
    np.testing.assert_array_equal(alibi(scores).numpy(), np.broadcast_to(want, (2, 6, 3, 5)))
    with pytest.raises(ValueError, match="scores"):
        alibi(torch.zeros(2, 5, 3, 5))
    with pytest.raises(ValueError, match="slopes"):
        pt.ALiBi(6, slopes=[0.5, 0.25])


# -- T5RelativeBias -------------------------------------------------------------------------


@pytest.mark.parametrize("device_path", [False, True])
def test_t5_relative_bias_values_and_gradient(monkeypatch, device_path):
    monkeypatch.setattr(pt, "_FORCE_DEVICE_PATH", device_path)
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(32, 4, generator=g, dtype=torch.float64)
    module = pt.T5RelativeBias(weight=weight.clone(), bidirectional=False, max_distance=20)
    out = module(3, 40, q_offset=37)
    rel = np.arange(40)[None, :] - (np.arange(3)[:, None] + 37)
    buckets = reference.relative_position_bucket(
        rel, bidirectional=False, num_buckets=32, max_distance=20
    )
    want = weight.numpy()[buckets].transpose(2, 0, 1)[None]
    np.testing.assert_array_equal(out.detach().numpy(), want)
    upstream = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (out * upstream).sum().backward()
    want_grad = np.zeros((32, 4))
    np.add.at(want_grad, buckets.reshape(-1), upstream[0].permute(1, 2, 0).reshape(-1, 4).numpy())
    np.testing.assert_allclose(module.weight.grad.numpy(), want_grad, rtol=0, atol=1e-12)


# -- relative terms in the models' layouts ---------------------------------------------------


@pytest.mark.parametrize("layout", ["ibnd", "bnid", "bind"])
def test_xl_position_term_in_the_models_layouts(layout):
    g = torch.Generator().manual_seed(3)
    b, n, q_len, k_len, d = 2, 3, 4, 7, 8
    q = torch.randn(b, n, q_len, d, generator=g, dtype=torch.float64)  # bnid
    r = torch.randn(b, n, k_len + q_len, d, generator=g, dtype=torch.float64)
    bias = torch.randn(n, d, generator=g, dtype=torch.float64)
    order = {"ibnd": (2, 0, 1, 3), "bnid": (0, 1, 2, 3), "bind": (0, 2, 1, 3)}[layout]
    term = pt.XLPositionTerm(bias.clone(), layout=layout)
    got = term(q.permute(order), r.permute(order), k_len=k_len)
    want = reference.xl_position_term(q.numpy(), r.numpy(), bias=bias.numpy(), k_len=k_len)
    assert got.shape == (b, n, q_len, k_len)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=1e-12)
    got.sum().backward()
    assert term.bias.grad is not None and term.bias.grad.shape == (n, d)
    with pytest.raises(ValueError, match="layout"):
        pt.XLPositionTerm(layout="bsd")


def test_deberta_relative_bias_flat_heads_layout():
    g = torch.Generator().manual_seed(4)
    b, h, n, d, span = 2, 3, 6, 8, 4
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    pos_key = torch.randn(h, 2 * span, d, generator=g, dtype=torch.float64)
    pos_query = torch.randn(h, 2 * span, d, generator=g, dtype=torch.float64)
    kwargs = dict(position_buckets=span, max_relative_positions=16)
    want = reference.deberta_attention_bias(
        q.numpy(), k.numpy(), pos_key.numpy(), pos_query.numpy(), scale_factor=3, **kwargs
    )
    flat = pt.DebertaRelativeBias(n_heads=h, layout="(bh)sd", **kwargs)
    got = flat(q.reshape(b * h, n, d), k.reshape(b * h, n, d), pos_key, pos_query,
               scale_factor=3)  # fmt: skip
    assert got.shape == (b * h, n, n)
    np.testing.assert_allclose(got.numpy().reshape(b, h, n, n), want, rtol=0, atol=1e-12)
    got4 = pt.DebertaRelativeBias(**kwargs)(q, k, pos_key, pos_query, scale_factor=3)
    np.testing.assert_allclose(got4.numpy(), want, rtol=0, atol=1e-12)
    with pytest.raises(TypeError, match="n_heads"):
        pt.DebertaRelativeBias(layout="(bh)sd")
    with pytest.raises(ValueError, match="q must be"):
        flat(q.reshape(b * h * n, 1, d)[:5], k.reshape(b * h, n, d), pos_key, pos_query)
