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
    real = pt._rope.Rope.cos_sin

    def counting(self, *args, **kwargs):
        calls.append(args[0].shape)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pt._rope.Rope, "cos_sin", counting)
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
    monkeypatch.setattr(posenc._torch, "force_device_path", True)
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
    monkeypatch.setattr(posenc._torch, "force_device_path", device_path)
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


def _as_meta(*tensors):
    return [None if t is None else t.to("meta") for t in tensors]


@pytest.mark.parametrize("layout", ["ibnd", "bnid", "bind"])
def test_xl_position_term_on_the_meta_device_has_the_shape_it_has_on_the_cpu(layout):
    # it raised TypeError: a meta tensor is not on the CPU
    g = torch.Generator().manual_seed(5)
    n, d = 3, 8
    order = {"ibnd": (2, 0, 1, 3), "bnid": (0, 1, 2, 3), "bind": (0, 2, 1, 3)}[layout]
    cases = [(2, 11, dict(k_len=7)), (1, 8, dict(k_len=7, causal=True)),
             (2, 10, dict(k_len=6, q_offset=2, causal=True)), (1, 11, {})]  # fmt: skip
    for b_r, rows, kw in cases:
        for dtype in (torch.float64, torch.bfloat16):
            q = torch.randn(2, n, 4, d, generator=g).to(dtype).permute(order)
            r = torch.randn(b_r, n, rows, d, generator=g).to(dtype).permute(order)
            term = pt.XLPositionTerm(torch.randn(n, d, generator=g).to(dtype), layout=layout)
            want = term(q, r, **kw)
            for q_, r_ in ((q.to("meta"), r.to("meta")), (q, r.to("meta"))):
                got = term(q_, r_, **kw)
                assert got.device.type == "meta"
                assert (got.shape, got.dtype) == (want.shape, want.dtype)
            got = term.to("meta")(q, r, **kw)  # the bias on the meta device
            assert got.device.type == "meta" and got.shape == want.shape
    # refused as on the CPU, the shapes named as given
    term = pt.XLPositionTerm(None, layout="bnid")
    q, r = torch.zeros(2, n, 4, d), torch.zeros(2, n, 8, d)
    for kw, args in ((dict(k_len=7), (q, r)), (dict(k_len=7), (q, torch.zeros(2, n + 1, 11, d))),
                     ({}, (q, torch.zeros(3, n, 11, d)))):  # fmt: skip
        with pytest.raises((TypeError, ValueError)) as cpu:
            term(*args, **kw)
        with pytest.raises(cpu.type) as meta:
            term(*_as_meta(*args), **kw)
        assert str(meta.value) == str(cpu.value)
    # sizes whose scores would take terabytes on the CPU: their shape alone
    big = term(*_as_meta(torch.zeros(64, n, 2**15, d), torch.zeros(64, n, 2**16, d)))
    assert big.device.type == "meta" and big.shape == (64, n, 2**15, 2**15)


def test_deberta_relative_bias_on_the_meta_device_has_the_shape_it_has_on_the_cpu():
    g = torch.Generator().manual_seed(6)
    b, h, n, d, span = 2, 3, 6, 8, 4
    q, k = torch.randn(2, b, h, n, d, generator=g, dtype=torch.float64)
    pos_key, pos_query = torch.randn(2, h, 2 * span, d, generator=g, dtype=torch.float64)
    kwargs = dict(position_buckets=span, max_relative_positions=16)
    flat = pt.DebertaRelativeBias(n_heads=h, layout="(bh)sd", **kwargs)
    four = pt.DebertaRelativeBias(**kwargs)
    for module, q_, k_ in ((flat, q.reshape(b * h, n, d), k.reshape(b * h, n, d)), (four, q, k)):
        for terms in ((pos_key, pos_query), (pos_key, None), (None, pos_query)):
            for dtype in (torch.float64, torch.float16):
                args = [None if t is None else t.to(dtype) for t in (q_, k_, *terms)]
                want = module(*args, scale_factor=2)
                got = module(*_as_meta(*args), scale_factor=2)
                assert got.device.type == "meta"
                assert (got.shape, got.dtype) == (want.shape, want.dtype)
    # refused as on the CPU
    for args in ((q, k, pos_key[:, 1:]), (q, k[:, :2], pos_key), (q, k)):
        with pytest.raises((TypeError, ValueError)) as cpu:
            four(*args)
        with pytest.raises(cpu.type) as meta:
            four(*_as_meta(*args))
        assert str(meta.value) == str(cpu.value)


# -- RotaryEmbedding: its cache, its copy of the config, the meta device, ids --------------


def test_rotary_cache_stays_within_its_bounds():
    # float64, head 256: 4 KiB a position, so 2048 positions make a table's 8 MiB
    head = 256
    limit = pt._TABLE_BYTES // (2 * head * 8)
    rotary = pt.RotaryEmbedding(head)
    x = torch.zeros(1, dtype=torch.float64)
    for step in (10, limit - 1, limit, 5000, 10**7):
        ids = torch.tensor([[3, step]])
        cos, sin = rotary(x, ids)
        want_cos, want_sin = _cos_sin_by_hand(ids.numpy(), head)
        # the hand formula's own float64 angles: within 2**-52 of 10**7 radians
        np.testing.assert_allclose(cos.numpy(), want_cos, rtol=0, atol=1e-8)
        np.testing.assert_allclose(sin.numpy(), want_sin, rtol=0, atol=1e-8)
        assert all(t.shape[0] <= limit for pair in rotary._cache.values() for t in pair)
    # a step far past the table computes its ids alone: the table is as it was
    assert rotary._cache_bytes() == 2 * limit * head * 8
    cos, _ = rotary(x, torch.tensor([[2**40]]))
    want = posenc.rope_cos_sin(np.array([[2**40]]), head, dtype="float64")[0]
    np.testing.assert_array_equal(cos.numpy(), want)
    assert rotary._cache_bytes() == 2 * limit * head * 8
    # 4 dtypes x 3 layer types, each table as large as it may be: at most
    # _CACHE_ENTRIES tables and _CACHE_BYTES in all
    config = {"rope_parameters": {name: {"rope_type": "default", "rope_theta": theta}
                                  for name, theta in (("a", 1e4), ("b", 1e5), ("c", 1e6))},
              "head_dim": head}  # fmt: skip
    rotary = pt.RotaryEmbedding(config=config)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        size = torch.zeros((), dtype=dtype).element_size()
        for layer_type in "abc":
            last = pt._TABLE_BYTES // (2 * head * size) - 1
            rotary(torch.zeros(1, dtype=dtype), torch.tensor([[last]]), layer_type=layer_type)
            assert len(rotary._cache) <= pt._CACHE_ENTRIES
            assert rotary._cache_bytes() <= pt._CACHE_BYTES
    assert rotary._cache_bytes() == pt._CACHE_BYTES  # full, and no more


def test_rotary_reads_its_config_once():
    config = {"rope_parameters": {"rope_type": "default", "rope_theta": 1000.0},
              "head_dim": 16, "max_position_embeddings": 64}  # fmt: skip
    rotary = pt.RotaryEmbedding(config=config)
    x = torch.zeros(1, dtype=torch.float64)
    first, _ = rotary(x, torch.arange(5)[None])
    # the caller's config edited: rope_theta, the dict's family, the lengths
    config["rope_parameters"]["rope_theta"] = 10.0
    config["rope_parameters"].update(rope_type="linear", factor=4.0)
    config["max_position_embeddings"] = 8
    config["head_dim"] = 32
    cos, sin = rotary(x, torch.arange(3000)[None])  # past the first table: made anew
    want_cos, want_sin = _cos_sin_by_hand(np.arange(3000)[None], 16, base=1000.0)
    np.testing.assert_allclose(cos.numpy(), want_cos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sin.numpy(), want_sin, rtol=0, atol=1e-12)
    assert torch.equal(cos[:, :5], first)
    assert rotary.config is not config


def test_rotary_on_the_meta_device_gives_the_tables_shape():
    rotary = pt.RotaryEmbedding(16, config={"partial_rotary_factor": 0.5})
    meta_x = torch.empty(2, 5, 16, dtype=torch.bfloat16, device="meta")
    for x, ids in ((meta_x, torch.arange(5, device="meta")[None]), (meta_x, torch.arange(5)[None]),
                   (torch.zeros(1), torch.arange(5, device="meta")[None])):  # fmt: skip
        cos, sin = rotary(x, ids)
        assert cos.device.type == sin.device.type == "meta"
        assert cos.shape == sin.shape == (1, 5, 8) and cos.dtype == x.dtype
    mrope = pt.RotaryEmbedding(16, config={"rope_type": "default", "mrope_section": [2, 3, 3],
                                           "mrope_interleaved": False})  # fmt: skip
    for ids in (torch.zeros(3, 2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long)):
        cos, _ = mrope(meta_x, ids.to("meta"))
        assert cos.device.type == "meta" and cos.shape == (2, 5, 16)
    with pytest.raises(ValueError, match="position_ids"):  # shapes checked all the same
        mrope(meta_x, torch.zeros(5, dtype=torch.long, device="meta"))
    # a layer built under torch.device("meta"), run there
    with torch.device("meta"):
        layer = torch.nn.Module()
        layer.rotary = pt.RotaryEmbedding(16)
        layer.proj = torch.nn.Linear(16, 16)
        h = layer.proj(torch.empty(1, 5, 16))[:, None]
        q, k = layer.rotary.rotate(h, h, torch.arange(5)[None])
    assert q.device.type == k.device.type == "meta" and q.shape == (1, 1, 5, 16)
    # and on real tensors, its numbers: the meta calls kept nothing
    assert not layer.rotary._cache
    cos, _ = layer.rotary(torch.zeros(1, dtype=torch.float64), torch.arange(5)[None])
    np.testing.assert_allclose(cos.numpy(), _cos_sin_by_hand(np.arange(5)[None], 16)[0],
                               rtol=0, atol=1e-12)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
@pytest.mark.parametrize("path", ["table", "direct", "mrope"])
def test_rotary_takes_position_ids_of_every_integer_dtype(monkeypatch, dtype, path):
    ids = torch.tensor([[0, 3, 100, 127]], dtype=dtype)
    x = torch.zeros(1, dtype=torch.float64)
    if path == "direct":  # no table: every id computed alone
        monkeypatch.setattr(pt, "_TABLE_BYTES", 1)
    config = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": False}
    rotary = pt.RotaryEmbedding(16, config=config if path == "mrope" else None)
    cos, sin = rotary(x, ids)
    want_cos, want_sin = _cos_sin_by_hand(ids.numpy().astype(np.int64), 16)
    np.testing.assert_allclose(cos.numpy(), want_cos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sin.numpy(), want_sin, rtol=0, atol=1e-12)


def test_rotary_refuses_bool_position_ids_naming_them():
    rotary = pt.RotaryEmbedding(8)
    with pytest.raises(TypeError, match="position_ids must be an integer tensor, got torch.bool"):
        rotary(torch.zeros(1), torch.tensor([[True, False]]))
    with pytest.raises(TypeError, match="x must be a float16"):
        rotary(torch.zeros(1, dtype=torch.int32), torch.tensor([[0, 1]]))


# -- every constructor argument, checked by name ------------------------------------------------


def _bad_constructions():
    t5_weight = torch.zeros(32, 4)
    return [
        (lambda: pt.RotaryEmbedding(16, base="abc"), TypeError, "base"),
        (lambda: pt.RotaryEmbedding(16, base=float("nan")), ValueError, "base"),
        (lambda: pt.RotaryEmbedding(16, base=float("inf")), ValueError, "base"),
        (lambda: pt.RotaryEmbedding(16, base=0.0), ValueError, "base"),
        (lambda: pt.RotaryEmbedding(16, base=True), TypeError, "base"),
        (lambda: pt.RotaryEmbedding(0), ValueError, "head_dim"),
        (lambda: pt.RotaryEmbedding(-4), ValueError, "head_dim"),
        (lambda: pt.RotaryEmbedding(7), ValueError, "head_dim"),
        (lambda: pt.RotaryEmbedding(True), TypeError, "head_dim"),
        (lambda: pt.RotaryEmbedding(16.0), TypeError, "head_dim"),
        (lambda: pt.RotaryEmbedding(16, layout="x"), ValueError, "layout"),
        (lambda: pt.RotaryEmbedding(16, layout=1), TypeError, "layout"),
        (lambda: pt.RotaryEmbedding(16, config=3), TypeError, "config"),
        (lambda: pt.RotaryEmbedding(16, config="llama"), TypeError, "config"),
        (lambda: pt.RotaryEmbedding(16, config={"rope_theta": 1e4}, layer_type=3), TypeError,
         "layer_type"),
        (lambda: pt.RotaryEmbedding(16, mrope_section=[2, 3, 2]), ValueError, "mrope_section"),
        (lambda: pt.RotaryEmbedding(16, mrope_section="233"), TypeError, "mrope_section"),
        (lambda: pt.RotaryEmbedding(16, mrope_section=[2, 3, 3], mrope_interleaved="yes"),
         TypeError, "mrope_interleaved"),
        (lambda: pt.RotaryEmbedding(16, mrope_interleaved=True), ValueError, "mrope_section"),
        (lambda: pt.ALiBi(2, slopes=["a", "b"]), TypeError, "slopes"),
        (lambda: pt.ALiBi(2, slopes=[float("nan"), 0.5]), ValueError, "slopes"),
        (lambda: pt.ALiBi(2, slopes=[0.5]), ValueError, "slopes"),
        (lambda: pt.ALiBi(2, slopes=[[0.5], [0.25, 1.0]]), TypeError, "slopes"),
        (lambda: pt.ALiBi(2, slopes=[0.5, 0.25], max_bias=4.0), ValueError, "slopes or max_bias"),
        (lambda: pt.ALiBi(0), ValueError, "n_heads"),
        (lambda: pt.ALiBi(True), TypeError, "n_heads"),
        (lambda: pt.ALiBi(2.0), TypeError, "n_heads"),
        (lambda: pt.ALiBi(4, max_bias=float("nan")), ValueError, "max_bias"),
        (lambda: pt.ALiBi(4, max_bias=0), ValueError, "max_bias"),
        (lambda: pt.ALiBi(4, max_bias="8"), TypeError, "max_bias"),
        (lambda: pt.T5RelativeBias(1, 4), ValueError, "num_buckets"),
        (lambda: pt.T5RelativeBias(True, 4), TypeError, "num_buckets"),
        (lambda: pt.T5RelativeBias(32, 0), ValueError, "n_heads"),
        (lambda: pt.T5RelativeBias(32, 4.0), TypeError, "n_heads"),
        (lambda: pt.T5RelativeBias(32, 4, max_distance=0), ValueError, "max_distance"),
        (lambda: pt.T5RelativeBias(32, 4, max_distance=8), ValueError, "max_distance"),
        (lambda: pt.T5RelativeBias(32, 4, max_distance=1.5), TypeError, "max_distance"),
        (lambda: pt.T5RelativeBias(32, 4, bidirectional="no"), TypeError, "bidirectional"),
        (lambda: pt.T5RelativeBias(weight=np.zeros((32, 4))), TypeError, "weight"),
        (lambda: pt.T5RelativeBias(weight=torch.zeros(32, 4, dtype=torch.long)), TypeError,
         "weight"),
        (lambda: pt.T5RelativeBias(weight=torch.zeros(32)), ValueError, "weight"),
        (lambda: pt.T5RelativeBias(16, weight=t5_weight), ValueError, "num_buckets"),
        (lambda: pt.T5RelativeBias(n_heads=8, weight=t5_weight), ValueError, "n_heads"),
        (lambda: pt.XLPositionTerm(layout=3), TypeError, "layout"),
        (lambda: pt.XLPositionTerm(layout="bsd"), ValueError, "layout"),
        (lambda: pt.XLPositionTerm(np.zeros((2, 4))), TypeError, "bias"),
        (lambda: pt.XLPositionTerm(torch.zeros(2, 4, 1)), ValueError, "bias"),
        (lambda: pt.DebertaRelativeBias(n_heads=0), ValueError, "n_heads"),
        (lambda: pt.DebertaRelativeBias(n_heads=0, layout="(bh)sd"), ValueError, "n_heads"),
        (lambda: pt.DebertaRelativeBias(n_heads=True), TypeError, "n_heads"),
        (lambda: pt.DebertaRelativeBias(position_buckets="a"), TypeError, "position_buckets"),
        (lambda: pt.DebertaRelativeBias(position_buckets=2), ValueError, "position_buckets"),
        (lambda: pt.DebertaRelativeBias(max_relative_positions=-1), ValueError,
         "max_relative_positions"),
        (lambda: pt.DebertaRelativeBias(max_relative_positions=1.5), TypeError,
         "max_relative_positions"),
        (lambda: pt.DebertaRelativeBias(position_buckets=256, max_relative_positions=100),
         ValueError, "max_relative_positions"),
        (lambda: pt.DebertaRelativeBias(layout="x"), ValueError, "layout"),
        (lambda: pt.DebertaRelativeBias(layout=None), TypeError, "layout"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(len(_bad_constructions())))
def test_every_constructor_argument_is_checked_by_name(case):
    make, error, name = _bad_constructions()[case]
    with pytest.raises(error, match=name):
        make()


def test_call_arguments_are_checked_by_name():
    q = torch.zeros(1, 2, 3, 8)
    cos = torch.zeros(3, 8)
    with pytest.raises(TypeError, match="q must be a float16"):
        pt.apply_rotary(q.long(), q, cos, cos)
    with pytest.raises(TypeError, match="rope_layout"):
        pt.apply_rotary(q, q, cos, cos, rope_layout=None)
    with pytest.raises(TypeError, match="layout"):
        pt.apply_rotary(q, q, cos, cos, layout=2)
    alibi = pt.ALiBi(2)
    with pytest.raises(TypeError, match="scores must be a float16"):
        alibi(torch.zeros(1, 2, 3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="scores must have q_len >= 1"):
        alibi(torch.zeros(1, 2, 0, 3))
    with pytest.raises(TypeError, match="attention_mask must be a torch tensor"):
        alibi.key_bias(np.ones((1, 3)), dtype=torch.float32)
    with pytest.raises(TypeError, match="device"):
        alibi.bias(2, device=3)
    with pytest.raises(ValueError, match="device"):
        alibi.bias(2, device="no-such-device")
    with pytest.raises(TypeError, match="q must be a torch tensor"):
        pt.DebertaRelativeBias()(
            np.zeros((1, 2, 3, 4)), torch.zeros(1, 2, 3, 4), torch.zeros(2, 8, 4)
        )
    with pytest.raises(TypeError, match="r must be a float16"):
        pt.XLPositionTerm()(q, q.long())
    with pytest.raises(TypeError, match="layer_type"):
        pt.RotaryEmbedding(8)(torch.zeros(1), torch.arange(3), layer_type=["a"])


# -- T5RelativeBias's two paths -------------------------------------------------------------------


def test_t5_device_path_agrees_with_the_cpu_path(monkeypatch):
    g = torch.Generator().manual_seed(5)
    module = pt.T5RelativeBias(32, 4, weight=torch.randn(32, 4, generator=g, dtype=torch.float64))

    def both(*args, **kwargs):
        outs = []
        for forced in (False, True):
            monkeypatch.setattr(posenc._torch, "force_device_path", forced)
            outs.append(module(*args, **kwargs))
        return outs

    cpu, device = both(5, 40, q_offset=3)
    assert torch.equal(cpu, device)
    # a smaller table in its place: its own buckets, not those kept for 32
    module.weight = torch.nn.Parameter(torch.randn(8, 4, generator=g, dtype=torch.float64))
    module.max_distance = 16
    for bidirectional in (True, False):
        module.bidirectional = bidirectional
        cpu, device = both(5, 40, q_offset=3)
        rel = np.arange(40)[None, :] - (np.arange(5)[:, None] + 3)
        buckets = reference.relative_position_bucket(
            rel, bidirectional=bidirectional, num_buckets=8, max_distance=16
        )
        want = module.weight.detach().numpy()[buckets].transpose(2, 0, 1)[None]
        np.testing.assert_array_equal(cpu.detach().numpy(), want)
        np.testing.assert_array_equal(device.detach().numpy(), want)
    # the same arguments refused on both paths, by name
    for args, match in (((0,), "q_len"), ((3, 0), "k_len"), ((3, 4, 2**70), "q_offset"),
                        ((3.0,), "q_len")):  # fmt: skip
        for forced in (False, True):
            monkeypatch.setattr(posenc._torch, "force_device_path", forced)
            with pytest.raises((TypeError, ValueError), match=match):
                module(*args)
    module.max_distance = 2  # not past the exact buckets
    for forced in (False, True):
        monkeypatch.setattr(posenc._torch, "force_device_path", forced)
        with pytest.raises(ValueError, match="max_distance"):
            module(3)
    # the buckets kept are bounded
    module.max_distance = 16
    monkeypatch.setattr(posenc._torch, "force_device_path", True)
    for n in range(1, 3 * pt._BUCKETS_KEPT):
        module(n, n + 1)
    assert len(module._bucket_cache) <= pt._BUCKETS_KEPT


# -- XLPositionTerm's "uni" table -----------------------------------------------------------------


def test_xl_position_term_takes_the_uni_table_with_causal():
    g = torch.Generator().manual_seed(6)
    b, n, q_len, mem, d = 2, 3, 4, 5, 8
    k_len = mem + q_len
    q = torch.randn(q_len, b, n, d, generator=g, dtype=torch.float64)
    r = torch.randn(k_len + 1, b, n, d, generator=g, dtype=torch.float64)  # distances k_len .. 0
    bias = torch.randn(n, d, generator=g, dtype=torch.float64)
    term = pt.XLPositionTerm(bias.clone(), layout="ibnd")
    with pytest.raises(ValueError, match=r"causal=True"):  # what the module takes
        term(q, r, k_len=k_len)
    got = term(q, r, k_len=k_len, causal=True)
    assert got.shape == (b, n, q_len, k_len)
    want = np.zeros((b, n, q_len, k_len))
    qn, rn, vn = q.numpy(), r.numpy(), bias.numpy()
    for i in range(q_len):
        for j in range(k_len):
            distance = (mem + i) - j
            if distance >= 0:  # a past key: row k_len - distance
                want[:, :, i, j] = np.einsum("bnd,bnd->bn", qn[i] + vn, rn[k_len - distance])
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=1e-12)
    # q_offset: the queries placed elsewhere among the keys
    got = term(q, r, k_len=k_len, q_offset=2, causal=True)
    want_00 = float((qn[0, 0, 0] + vn[0]) @ rn[k_len, 0, 0])  # distance 0: row k_len
    assert float(got[0, 0, 0, 2].detach()) == pytest.approx(want_00, rel=1e-12)


def test_rotary_under_torch_compile_gives_the_eager_tables():
    config = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": False}
    plain, mrope = pt.RotaryEmbedding(16), pt.RotaryEmbedding(16, config=config)
    x = torch.zeros(1)
    ids = torch.tensor([[0, 3, 9, 5000]])
    rows = torch.stack([ids, ids // 2, ids % 5])

    def tables(ids, rows):
        return plain(x, ids), mrope(x, rows), mrope(x, ids)  # (batch, seq): every row

    compiled = torch.compile(tables, fullgraph=True, dynamic=False)
    got, want = compiled(ids, rows), tables(ids, rows)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    c, _ = want[2]  # the same positions in every row: the plain tables
    torch.testing.assert_close(c, want[0][0], rtol=0, atol=0)
