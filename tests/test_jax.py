"""posenc with JAX arrays: types, copies, devices, dtypes, jax.jit, jax.vmap and jax.grad.

The witnesses are formulas written here (the rotation, the sinusoid and the
biases in NumPy float64, the rotation and T5's lookup in jax.numpy, with JAX's
own autodiff through them for the gradients), posenc.reference, and posenc's
NumPy functions on the same values.  jax is required under
POSENC_REQUIRE_CONFORMANCE=1 (as CI sets it) and the tests are skipped
without it otherwise, as the conformance tests are.
"""

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from optional import require

import posenc
from posenc import reference

jax = require("jax")
jnp = require("jax.numpy")
ml_dtypes = require("ml_dtypes")

from posenc import _jax as pjx  # noqa: E402  (imports jax)

BF16 = np.dtype(ml_dtypes.bfloat16)

# float64 in JAX, as a context (jax.enable_x64 in newer JAX)
if hasattr(jax, "enable_x64"):
    x64 = jax.enable_x64
else:  # pragma: no cover - depends on the JAX version
    from jax.experimental import enable_x64 as x64


@pytest.fixture(params=["buffer_callback", "pure_callback"])
def callback(request, monkeypatch):
    """Traced calls through each of posenc's two callbacks: XLA's buffers in
    place where JAX has buffer_callback, pure_callback (copies) elsewhere."""
    if request.param == "buffer_callback":
        if pjx._buffer_callback() is None:
            pytest.skip("this JAX has no buffer_callback")
    else:
        monkeypatch.setattr(pjx, "_BUFFER_CALLBACK", [None])
    return request.param


def randn(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def same(a, b):
    """Same shape, dtype and values (NaN equal to NaN): bit for bit."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    np.testing.assert_array_equal(a, b)


def rope64(x, positions, *, base=10000.0, layout="half", rotary_dim=None, inverse=False):
    """The rotation in float64: x (..., dim), positions broadcasting against x.shape[:-1]."""
    x = np.asarray(x, dtype=np.float64)
    r = rotary_dim or x.shape[-1]
    freq = base ** (-np.arange(0, r, 2, dtype=np.float64) / r)
    angle = np.asarray(positions, dtype=np.float64)[..., None] * freq
    c, s = np.cos(angle), np.sin(angle) * (-1.0 if inverse else 1.0)
    out = x.copy()
    a_idx = np.arange(r // 2) if layout == "half" else np.arange(0, r, 2)
    b_idx = a_idx + r // 2 if layout == "half" else a_idx + 1
    a, b = x[..., a_idx], x[..., b_idx]
    out[..., a_idx] = a * c - b * s
    out[..., b_idx] = b * c + a * s
    return out


def rope_jnp(x, positions, base=10000.0):
    """The half-layout rotation written in jax.numpy (differentiable by JAX itself)."""
    dim = x.shape[-1]
    freq = base ** (-jnp.arange(0, dim, 2, dtype=x.dtype) / dim)
    angle = jnp.asarray(positions, dtype=x.dtype)[..., None] * freq
    c, s = jnp.cos(angle), jnp.sin(angle)
    a, b = x[..., : dim // 2], x[..., dim // 2 :]
    return jnp.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def sinusoid64(positions, dim, base=10000.0):
    angle = np.asarray(positions, np.float64)[..., None] * base ** (-np.arange(0, dim, 2) / dim)
    out = np.empty(angle.shape[:-1] + (dim,))
    out[..., 0::2], out[..., 1::2] = np.sin(angle), np.cos(angle)
    return out


def alibi64(n_heads, q_len, k_len):
    """Press et al.'s causal bias for a power-of-two number of heads, queries the newest."""
    slopes = 2.0 ** (-8.0 * np.arange(1, n_heads + 1) / n_heads)
    qpos = (k_len - q_len + np.arange(q_len))[:, None]
    dist = qpos - np.arange(k_len)[None, :]
    return np.where(dist >= 0, -slopes[:, None, None] * dist, -np.inf)


def t5_lookup(table, q_len, k_len, q_offset=0):
    buckets = reference.relative_position_bucket(
        np.arange(k_len)[None, :] - (q_offset + np.arange(q_len))[:, None]
    )
    return np.moveaxis(np.asarray(table)[buckets], -1, 0)


def run_python(code, env=None):
    """`code` in a fresh interpreter; its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# ---------------------------------------------------------------- imports


def test_import_posenc_and_numpy_calls_leave_jax_unimported():
    out = run_python(
        """
        import sys
        import numpy as np
        import posenc
        posenc.apply_rope(np.ones((1, 2, 4, 8), np.float32))
        posenc.sinusoid(4, 8)
        posenc.rope_cos_sin(4, 8)
        posenc.alibi_bias(2, 3)
        posenc.t5_bias(np.ones((32, 2), np.float32), 3)
        print(sorted(m for m in sys.modules if m.partition('.')[0] in ('jax', 'jaxlib')))
        import jax.numpy as jnp
        posenc.sinusoid(jnp.arange(3.0), 8)
        print('posenc._jax' in sys.modules)
        """
    )
    assert out.split("\n")[:2] == ["[]", "True"]


def test_jit_caching_is_stable_from_a_cold_start():
    """The first jitted call is posenc's first JAX call: nothing it sets up
    (the callback it picks, the plans and result shapes it caches, JAX's
    backend) makes a second call trace again."""
    out = run_python(
        """
        import jax, jax.numpy as jnp, posenc
        traces = []

        def f(x, ids, q):
            traces.append(1)
            cos, _ = posenc.rope_cos_sin(ids, 16, mrope_section=[2, 3, 3], dtype=jnp.bfloat16)
            y = jax.vmap(lambda x, p: posenc.apply_rope(x, p, mrope_section=[2, 3, 3]))(x, ids)
            r = jnp.concatenate([x[0, 0], x[1, 0]])
            g = jax.grad(lambda q: jnp.sum(posenc.xl_position_term(q, r, k_len=4)))(q)
            return cos, y, g

        g = jax.jit(f)
        x, ids, q = jnp.ones((3, 2, 4, 16)), jnp.ones((3, 3, 4), jnp.int32), jnp.ones((2, 4, 16))
        for i in range(3):
            jax.block_until_ready(g(x + i, ids + i, q + i))
        print(len(traces))
        """
    )
    assert out.split() == ["1"]


# ---------------------------------------------------------------- eager calls


def scalar(m, value):
    return np.int32(value) if m is np.asarray else jnp.int32(value)


def _eager_cases():
    x = randn(2, 4, 16, 8)
    table = randn(32, 4)
    return [
        ("apply_rope", lambda m: posenc.apply_rope(m(x))),
        ("apply_rope ids", lambda m: posenc.apply_rope(m(x), m(np.arange(32).reshape(2, 16)))),
        # a 0-d JAX array is a number, as NumPy's scalar is
        ("apply_rope offset", lambda m: posenc.apply_rope(m(x), offset=scalar(m, 7))),
        ("sinusoid length", lambda m: posenc.sinusoid(scalar(m, 5), 8)),
        ("sinusoid", lambda m: posenc.sinusoid(m(np.arange(5.0) * 3), 8)),
        ("rope_cos_sin", lambda m: posenc.rope_cos_sin(m(np.arange(6)), 8)),
        ("alibi slopes", lambda m: posenc.alibi_bias(4, 3, 5, slopes=m(np.ones(4, np.float32)))),
        ("t5_bias", lambda m: posenc.t5_bias(m(table), 5, 7)),
        ("bucket", lambda m: posenc.relative_position_bucket(m(np.arange(-9, 9)))),
        ("deberta", lambda m: posenc.deberta_log_bucket(m(np.arange(-300, 300, 7)), 256, 512)),
    ]


@pytest.mark.parametrize("label, call", _eager_cases(), ids=[c[0] for c in _eager_cases()])
def test_jax_arrays_in_give_jax_arrays_out_with_the_numpy_numbers(label, call):
    expected = call(np.asarray)
    got = call(jnp.asarray)
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for g, e in pairs:
        assert isinstance(g, jax.Array) and not isinstance(g, np.ndarray)
        assert {d.platform for d in g.devices()} == {"cpu"}
        # JAX holds 32-bit integers without jax_enable_x64
        same(g, e.astype(np.int32) if e.dtype == np.int64 else e)


def test_numpy_in_stays_numpy_with_jax_imported():
    assert type(posenc.apply_rope(randn(1, 2, 4, 8))) is np.ndarray
    assert type(posenc.sinusoid(4, 8, dtype=jnp.dtype("float32"))) is np.ndarray


def test_apply_rope_equals_the_float64_rotation():
    x = randn(2, 4, 16, 64, seed=1)
    ids = np.array([[0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14], np.arange(16) + 900])
    for kwargs, positions in [
        ({}, np.arange(16)),
        ({"offset": 4096}, 4096 + np.arange(16)),
        ({"positions": jnp.asarray(ids)}, ids[:, None, :]),
        ({"layout": "interleaved", "rotary_dim": 32}, np.arange(16)),
        ({"inverse": True, "offset": 3}, 3 + np.arange(16)),
    ]:
        got = posenc.apply_rope(jnp.asarray(x), **kwargs)
        opts = {k: kwargs[k] for k in ("layout", "rotary_dim", "inverse") if k in kwargs}
        want = rope64(x, positions, **opts)
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=4e-6 * np.abs(x).max())


def test_tables_equal_their_formulas():
    got = posenc.sinusoid(jnp.arange(64.0) * 3.0, 32)
    np.testing.assert_allclose(np.asarray(got), sinusoid64(np.arange(64.0) * 3, 32), atol=2e-7)
    cos, sin = posenc.rope_cos_sin(jnp.arange(10), 8)
    angle = np.arange(10)[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(np.asarray(cos), np.cos(np.concatenate([angle] * 2, -1)), atol=1e-7)
    np.testing.assert_allclose(np.asarray(sin), np.sin(np.concatenate([angle] * 2, -1)), atol=1e-7)
    bias = posenc.alibi_bias(8, 5, 9, dtype=jnp.float32)
    assert isinstance(bias, jax.Array)
    np.testing.assert_allclose(np.asarray(bias), alibi64(8, 5, 9), rtol=1e-7)
    table = randn(32, 4)
    np.testing.assert_array_equal(
        np.asarray(posenc.t5_bias(jnp.asarray(table), 6, 9, q_offset=2)),
        t5_lookup(table, 6, 9, q_offset=2),
    )


def test_a_jax_dtype_gives_a_jax_table():
    for dtype in (jnp.float16, jnp.bfloat16, jnp.float32):
        pe = posenc.sinusoid(16, 8, dtype=dtype)
        assert isinstance(pe, jax.Array) and pe.dtype == dtype
        same(pe, posenc.sinusoid(16, 8, dtype=np.dtype(dtype)))


def test_float64_without_x64_warns_and_gives_float32():
    with pytest.warns(UserWarning, match="jax_enable_x64") as record:
        pe = posenc.sinusoid(jnp.arange(5.0), 8, dtype="float64")
    assert record[0].filename == __file__  # the warning points at the caller
    assert pe.dtype == jnp.float32
    same(pe, sinusoid64(np.arange(5.0), 8).astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        posenc.sinusoid(jnp.arange(5.0), 8)  # no dtype asked for: no warning


def test_float64_with_x64():
    x = randn(2, 3, 20, 16, dtype=np.float64, seed=4)
    with x64(True):
        got = posenc.apply_rope(jnp.asarray(x), offset=1000)
        jitted = jax.jit(lambda x: posenc.apply_rope(x, offset=1000))(jnp.asarray(x))
        pe = posenc.sinusoid(jnp.arange(7.0), 8, dtype="float64")
    assert got.dtype == jitted.dtype == pe.dtype == jnp.float64
    want = rope64(x, 1000 + np.arange(20))  # float64 phases still exact to ~1e-13
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-13)
    same(jitted, got)
    np.testing.assert_allclose(np.asarray(pe), sinusoid64(np.arange(7.0), 8), rtol=0, atol=1e-15)


# ---------------------------------------------------------------- copies


def test_eager_reads_the_array_in_place_and_xla_adopts_a_large_result(monkeypatch):
    x = jnp.asarray(randn(1, 8, 128, 128))  # 512 KiB: above ZERO_COPY_BYTES
    posenc.apply_rope(x)
    plan = next(p for p in pjx._PLANS.values() if p.name == "apply_rope")
    seen = {}
    numpy_fn = plan.fn

    def recording(*args, **kwargs):
        seen["x"] = args[0].ctypes.data
        seen["out"] = kwargs["out"].ctypes.data
        return numpy_fn(*args, **kwargs)

    monkeypatch.setattr(plan, "fn", recording)
    y = posenc.apply_rope(x)
    assert seen["x"] == x.unsafe_buffer_pointer()
    assert seen["out"] == y.unsafe_buffer_pointer()
    same(y, numpy_fn(np.asarray(x)))


@pytest.mark.parametrize(
    "call",
    [
        lambda: posenc.sinusoid(jnp.arange(4096.0), 64),
        lambda: posenc.sinusoid(4096, 64, dtype=jnp.float16),
        lambda: posenc.alibi_bias(4, 128, 256, slopes=jnp.ones(4)),
        lambda: posenc.t5_bias(jnp.ones((32, 4)), 128, 256),
        lambda: posenc.apply_rope(jnp.ones((1, 4, 512, 64), jnp.bfloat16)),
    ],
)
def test_large_results_are_adopted_by_xla_without_a_copy(call, monkeypatch):
    buffers = []
    real = pjx._aligned_empty

    def recording(shape, dtype):
        buffers.append(real(shape, dtype))
        return buffers[-1]

    monkeypatch.setattr(pjx, "_aligned_empty", recording)
    result = call()
    assert len(buffers) == 1 and buffers[0].nbytes >= pjx.ZERO_COPY_BYTES
    assert result.unsafe_buffer_pointer() == buffers[0].ctypes.data
    same(result, buffers[0])


def test_jit_reads_and_writes_xla_buffers_in_place(monkeypatch):
    if pjx._buffer_callback() is None:
        pytest.skip("this JAX has no buffer_callback: pure_callback copies")
    x = jnp.asarray(randn(1, 4, 64, 32))
    posenc.apply_rope(x)
    plan = next(p for p in pjx._PLANS.values() if p.name == "apply_rope")
    seen = {}
    numpy_fn = plan.fn

    def recording(*args, **kwargs):
        if isinstance(kwargs.get("x"), np.ndarray) and kwargs["x"].strides[0]:
            seen["x"] = kwargs["x"].ctypes.data  # not the zero-stride stand-in of tracing
            seen["out"] = kwargs["out"].ctypes.data
        return numpy_fn(*args, **kwargs)

    monkeypatch.setattr(plan, "fn", recording)
    y = jax.jit(lambda x: posenc.apply_rope(x, offset=1))(x)
    assert seen["x"] == x.unsafe_buffer_pointer()
    assert seen["out"] == y.unsafe_buffer_pointer()
    same(y, numpy_fn(np.asarray(x), offset=1))


# ---------------------------------------------------------------- out= and scores=


def test_out_and_scores_refuse_jax_arrays():
    x = jnp.asarray(randn(1, 2, 4, 8))
    with pytest.raises(TypeError, match=r"^out is a JAX array.*use the array it returns"):
        posenc.apply_rope(x, out=x)
    with pytest.raises(TypeError, match=r"^out is a JAX array"):
        posenc.sinusoid(4, 8, out=jnp.zeros((4, 8)))
    scores = jnp.zeros((2, 4, 4))
    with pytest.raises(TypeError, match=r"^scores is a JAX array.*scores \+ posenc\.alibi_bias"):
        posenc.alibi_bias(2, 4, scores=scores)
    with pytest.raises(TypeError, match=r"^scores is a JAX array.*scores \+ posenc\.t5_bias"):
        posenc.t5_bias(np.ones((32, 2), np.float32), 4, scores=scores)
    with pytest.raises(TypeError, match=r"^out= cannot be written under jax.jit"):
        jax.jit(lambda x: posenc.apply_rope(x, out=np.empty((1, 2, 4, 8), np.float32)))(x)
    with pytest.raises(TypeError, match=r"^scores is a JAX array"):
        jax.jit(lambda s: posenc.alibi_bias(2, 4, scores=s))(scores)


def test_out_numpy_with_jax_input_is_written_and_returned():
    x = randn(1, 2, 4, 8)
    out = np.zeros_like(x)
    got = posenc.apply_rope(jnp.asarray(x), out=out)
    assert got is out
    same(out, posenc.apply_rope(x))
    scores = randn(1, 2, 4, 4)
    want = scores + posenc.t5_bias(randn(32, 2, seed=3), 4)
    got = posenc.t5_bias(jnp.asarray(randn(32, 2, seed=3)), 4, scores=scores)
    assert got is scores
    np.testing.assert_array_equal(scores, want)


# ---------------------------------------------------------------- devices


class _Device:
    platform = "gpu"

    def __str__(self):
        return "cuda:0"


def test_an_array_on_another_device_is_refused_naming_it(monkeypatch):
    class OnGpu:
        def devices(self):
            return {_Device()}

    with pytest.raises(TypeError, match=r"^table is on device cuda:0 \(gpu\): posenc computes on"):
        pjx.check_cpu(OnGpu(), "table")
    # every JAX array of a call goes through that check, under its argument's name
    checked = []
    real = pjx.check_cpu

    def spy(value, name):
        checked.append(name)
        return real(value, name)

    monkeypatch.setattr(pjx, "check_cpu", spy)
    posenc.t5_bias(jnp.ones((32, 2)), 3, q_offset=jnp.int32(1))
    posenc.apply_rope(jnp.ones((1, 2, 4, 8)), positions=jnp.arange(4))
    assert checked == ["table", "q_offset", "x", "positions"]


def test_device_argument():
    pe = posenc.sinusoid(4, 8, device=jax.devices("cpu")[0])
    assert isinstance(pe, jax.Array) and pe.devices() == {jax.devices("cpu")[0]}
    cos, sin = posenc.rope_cos_sin(jnp.arange(4), 8, device="cpu")
    assert isinstance(cos, jax.Array) and isinstance(sin, jax.Array)
    with pytest.raises(TypeError, match="device must be a jax.Device or 'cpu'"):
        posenc.sinusoid(jnp.arange(4.0), 8, device="cuda")


def test_results_stay_on_the_device_of_their_input():
    out = run_python(
        """
        import jax, jax.numpy as jnp, numpy as np, posenc
        cpu1 = jax.devices('cpu')[1]
        x = jax.device_put(jnp.ones((1, 2, 600, 128)), cpu1)     # large: adopted in place
        t = jax.device_put(jnp.ones((32, 2)), cpu1)
        print(posenc.apply_rope(x).devices() == {cpu1}, posenc.t5_bias(t, 3).devices() == {cpu1})
        print(posenc.sinusoid(4, 8, device=cpu1).devices() == {cpu1})
        print(posenc.apply_rope(jnp.ones((1, 2, 4, 8))).committed)   # uncommitted in and out
        """,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"},
    )
    assert out.split() == ["True", "True", "True", "False"]


# ---------------------------------------------------------------- jax.jit


def test_jit_traces_the_encodings_and_gives_the_eager_numbers(callback):
    x = jnp.asarray(randn(2, 4, 16, 8))
    table = jnp.asarray(randn(32, 4))
    ids = jnp.asarray(np.arange(32).reshape(2, 16) % 11)

    def layer(x, table, ids, step):
        q = posenc.apply_rope(x, ids)
        k = posenc.apply_rope(x, offset=step, layout="interleaved")
        pe = posenc.sinusoid(ids.astype(jnp.float32) * 2.5, 8)
        cos, sin = posenc.rope_cos_sin(ids, 8)
        scores = q @ jnp.swapaxes(k, -1, -2)
        scores = scores + posenc.alibi_bias(4, 16, q_offset=step)
        scores = scores + posenc.t5_bias(table, 16, q_offset=step)
        return scores, pe, cos, sin

    traces = []

    def counted(*args):
        traces.append(1)
        return layer(*args)

    jitted = jax.jit(counted)
    for step in (0, 5, 4000):  # traced offsets: one trace for all
        got = jitted(x, table, ids, step)
        want = layer(x, table, ids, step)
        for g, w in zip(got, want):
            same(g, w)
    assert len(traces) == 1
    # and the eager numbers are NumPy's
    np_x, np_ids = np.asarray(x), np.asarray(ids)
    q = posenc.apply_rope(np_x, np_ids)
    k = posenc.apply_rope(np_x, offset=4000, layout="interleaved")
    scores = q @ np.swapaxes(k, -1, -2) + posenc.alibi_bias(4, 16, q_offset=4000)
    scores = scores + posenc.t5_bias(np.asarray(table), 16, q_offset=4000)
    np.testing.assert_allclose(np.asarray(got[0]), scores, rtol=1e-6, atol=1e-5)


def test_jit_with_a_transformers_config_dict_and_bfloat16():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
    x = jnp.asarray(randn(1, 4, 8, 64)).astype(jnp.bfloat16)
    f = jax.jit(lambda x, o: posenc.apply_rope(x, scaling=scaling, base=500000.0, offset=o))
    got = f(x, 2**20)
    assert got.dtype == jnp.bfloat16
    same(got, posenc.apply_rope(np.asarray(x), scaling=scaling, base=500000.0, offset=2**20))


def test_what_must_be_static_under_jit_is_named():
    with pytest.raises(TypeError, match=r"^dim is traced \(posenc.sinusoid under jax.jit"):
        jax.jit(lambda d: posenc.sinusoid(jnp.arange(3.0), d))(8)
    with pytest.raises(TypeError, match=r"^positions is traced"):  # an int scalar: a length
        jax.jit(lambda n: posenc.sinusoid(n, 8))(4)
    with pytest.raises(TypeError, match=r"^q_len is traced"):
        jax.jit(lambda n: posenc.alibi_bias(4, n))(4)
    with pytest.raises(TypeError, match="positions_from_cu_seqlens cannot be traced"):
        jax.jit(lambda c: posenc.positions_from_cu_seqlens(c))(jnp.array([0, 3, 5]))
    # a float scalar position and a traced offset are values: fine
    same(jax.jit(lambda p: posenc.sinusoid(p, 8))(2.5), posenc.sinusoid(2.5, 8))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: posenc.sinusoid(m(np.arange(3.0)), 7),
        lambda m: posenc.sinusoid(m(np.arange(3.0)), 8, layout="halves"),
        lambda m: posenc.apply_rope(m(randn(1, 2, 4, 7))),
        lambda m: posenc.apply_rope(m(randn(1, 2, 4, 8)), m(np.arange(5))),
        lambda m: posenc.apply_rope(m(randn(1, 2, 4, 8)), rotary_dim=10),
        lambda m: posenc.apply_rope(m(np.ones((2, 4), np.int32))),
        lambda m: posenc.t5_bias(m(randn(32, 2)), 3, max_distance=0),
        lambda m: posenc.t5_bias(m(randn(32)), 3),
        lambda m: posenc.alibi_bias(2, 3, slopes=m(np.ones(3, np.float32))),
        lambda m: posenc.rope_cos_sin(m(np.arange(3)), 8, scaling={"rope_type": "nope"}),
    ],
)
def test_bad_input_raises_the_numpy_error_eagerly_and_while_tracing(call):
    with pytest.raises((TypeError, ValueError)) as numpy_error:
        call(np.asarray)
    with pytest.raises(numpy_error.type) as eager_error:
        call(jnp.asarray)
    with pytest.raises(numpy_error.type) as traced_error:
        jax.jit(lambda: call(jnp.asarray))()  # the arrays are constants of the trace
    with pytest.raises(numpy_error.type) as tracer_error:
        jax.vmap(lambda _: call(jnp.asarray))(jnp.arange(2))
    assert str(eager_error.value) == str(numpy_error.value)
    assert str(traced_error.value) == str(numpy_error.value)
    assert str(tracer_error.value) == str(numpy_error.value)


def test_a_bad_value_inside_jit_fails_with_posencs_message(callback):
    f = jax.jit(lambda p: posenc.sinusoid(p, 8))
    with pytest.raises(Exception, match="positions must be finite"):
        f(jnp.array([0.0, np.nan])).block_until_ready()
    same(f(jnp.array([0.0, 1.0])), posenc.sinusoid(np.array([0.0, 1.0], np.float32), 8))


_BAD_TRACED = [
    # (function of traced arrays, the arrays, the argument the NumPy error names)
    (lambda x: posenc.apply_rope(x), [np.ones((2, 4), np.int32)], "x"),
    (lambda x: posenc.apply_rope(x), [randn(2, 4, 7)], "x.shape"),
    (lambda x, p: posenc.apply_rope(x, p), [randn(2, 4, 8), np.arange(5)], "positions"),
    (lambda x, p: posenc.apply_rope(x, p), [randn(2, 4, 8), np.ones(4, bool)], "positions"),
    (lambda x, o: posenc.apply_rope(x, offset=o), [randn(2, 4, 8), True], "offset"),
    (
        lambda x, p: posenc.apply_rope(x, p, mrope_section=[2, 1, 1]),
        [randn(2, 4, 8), np.zeros((2, 4), np.int32)],
        "positions",
    ),
    (lambda p: posenc.rope_cos_sin(p, 8, axial=2), [np.zeros((3, 4), np.int32)], "positions"),
    (lambda p: posenc.sinusoid(p, 8), [np.zeros(3, np.complex64)], "positions"),
    (lambda t: posenc.t5_bias(t, 3), [randn(32)], "table"),
    (lambda s: posenc.alibi_bias(2, 3, slopes=s), [np.ones(3, np.float32)], "slopes"),
    (lambda q, r: posenc.xl_position_term(q, r), [randn(2, 3, 4, 8), randn(5, 6)], "r"),
]


@pytest.mark.parametrize("index", range(len(_BAD_TRACED)))
def test_bad_shapes_and_dtypes_of_traced_arrays_raise_posencs_error_while_tracing(index):
    fn, arrays, name = _BAD_TRACED[index]
    with pytest.raises((TypeError, ValueError), match=name) as numpy_error:
        fn(*arrays)
    batched = [np.stack([a, a]) for a in arrays]
    for traced, values in ((jax.jit(fn), arrays), (jax.jit(jax.vmap(fn)), batched)):
        with pytest.raises(numpy_error.type) as traced_error:
            traced(*[jnp.asarray(a) for a in values])
        assert str(traced_error.value) == str(numpy_error.value)


def test_a_bad_value_seen_by_the_callback_is_posencs_error(callback):
    bad = np.array([0.0, np.nan], np.float32)
    with pytest.raises(ValueError) as numpy_error:
        posenc.sinusoid(bad, 8)
    message = str(numpy_error.value)
    assert "positions" in message
    # the callback runs inside the call (eager jax.vmap, jax.grad): posenc's
    # own error, as the NumPy call raises it
    with pytest.raises(ValueError) as vmap_error:
        jax.vmap(lambda p: posenc.sinusoid(p, 8))(jnp.asarray(bad)[None])
    assert str(vmap_error.value) == message
    with pytest.raises(ValueError) as grad_error:
        jax.grad(lambda x, p: jnp.sum(posenc.apply_rope(x, p)))(jnp.ones((2, 8)), jnp.asarray(bad))
    assert str(grad_error.value) == message
    # under jax.jit it runs when the compiled function does, and JAX's error
    # ends with posenc's, naming the function
    with pytest.raises(Exception) as jit_error:
        jax.jit(lambda p: posenc.sinusoid(p, 8))(jnp.asarray(bad)).block_until_ready()
    assert (
        str(jit_error.value)
        .rstrip()
        .endswith(
            f"ValueError: posenc.sinusoid refused a value it was given when the compiled function "
            f"ran: {message}"
        )
    )


def test_zero_size_arrays(callback):
    x = jnp.zeros((2, 0, 8))
    same(posenc.apply_rope(x), np.zeros((2, 0, 8), np.float32))
    same(jax.jit(posenc.apply_rope)(x), np.zeros((2, 0, 8), np.float32))
    same(jax.jit(lambda p: posenc.sinusoid(p, 4))(jnp.zeros((0,))), np.zeros((0, 4), np.float32))


_EMPTY_TERMS = {
    # q_len = 0 (and TENER's self-attention, k_len = 0 too), or head_dim = 0
    "xl_position_term": ({"q": (2, 0, 4), "r": (5, 4)}, {"k_len": 5}),
    "xl_position_term head_dim 0": ({"q": (2, 3, 0), "r": (8, 0)}, {"k_len": 5}),
    "tener_position_term": ({"q": (2, 0, 4), "k": (2, 0, 4), "table": (2, 4)}, {}),
    "tener_scores": ({"q": (2, 0, 4), "k": (2, 0, 4), "table": (2, 4)}, {}),
    "deberta_attention_bias": (
        {"q": (2, 0, 4), "k": (2, 5, 4), "pos_key": (8, 4), "pos_query": (8, 4)},
        {"max_relative_positions": 4},
    ),
    "shaw_key_term": ({"q": (2, 0, 4), "rel_keys": (5, 4)}, {"max_distance": 2, "k_len": 5}),
    "xl_content_bias": ({"k": (2, 0, 4), "bias": (2, 4)}, {}),
}


@pytest.mark.parametrize("case", sorted(_EMPTY_TERMS))
def test_zero_size_relative_terms_and_their_gradients(case, callback):
    name = case.split()[0]
    shapes, options = _EMPTY_TERMS[case]
    arrays = [randn(*s, seed=i) for i, s in enumerate(shapes.values())]

    def f(*a):
        return getattr(posenc, name)(**dict(zip(shapes, a)), **options)

    want = f(*arrays)
    jarrays = [jnp.asarray(a) for a in arrays]
    same(f(*jarrays), want)
    same(jax.jit(f)(*jarrays), want)
    same(jax.vmap(f)(*[jnp.stack([a, a]) for a in jarrays]), np.stack([want, want]))
    # nothing comes out (or nothing goes in): every gradient is zero
    argnums = tuple(range(len(arrays)))
    grad = jax.grad(lambda *a: jnp.sum(f(*a) ** 2), argnums=argnums)
    for got in (grad(*jarrays), jax.jit(grad)(*jarrays)):
        for g, a in zip(got, arrays):
            same(g, np.zeros_like(a))


def test_zero_size_rope_under_vmap_and_grad(callback):
    x = jnp.zeros((2, 0, 16))
    ids = jnp.zeros((3, 0), jnp.int32)
    same(jax.vmap(posenc.apply_rope)(jnp.zeros((0, 2, 4, 16))), np.zeros((0, 2, 4, 16), np.float32))
    same(
        jax.jit(jax.vmap(lambda p: posenc.rope_cos_sin(p, 16, mrope_section=[2, 3, 3])[0]))(
            jnp.zeros((0, 3, 4), jnp.int32)
        ),
        np.zeros((0, 4, 16), np.float32),
    )
    grad = jax.grad(lambda x: jnp.sum(posenc.apply_rope(x, ids, mrope_section=[2, 3, 3]) ** 2))
    same(grad(x), np.zeros((2, 0, 16), np.float32))
    same(jax.jit(grad)(x), np.zeros((2, 0, 16), np.float32))


# ---------------------------------------------------------------- jax.vmap


def _stack(fn, n):
    return np.stack([np.asarray(fn(i)) for i in range(n)])


def test_vmap_gives_each_elements_numbers(callback):
    x = randn(3, 4, 16, 8)
    jx = jnp.asarray(x)
    ids = np.arange(48).reshape(3, 16) % 13
    A = posenc.apply_rope
    # batched data, positions, both, offsets; negative and positive seq_axis
    same(jax.vmap(A)(jx), _stack(lambda i: A(x[i]), 3))
    same(jax.vmap(lambda x: A(x, seq_axis=1))(jx), _stack(lambda i: A(x[i], seq_axis=1), 3))
    same(
        jax.vmap(lambda p: A(jx[0], p))(jnp.asarray(ids)),
        _stack(lambda i: A(x[0], ids[i]), 3),
    )
    same(
        jax.vmap(lambda x, p: A(x, p, layout="interleaved"))(jx, jnp.asarray(ids)),
        _stack(lambda i: A(x[i], ids[i], layout="interleaved"), 3),
    )
    same(jax.vmap(lambda p: A(jx[0], p))(jnp.arange(3)), _stack(lambda i: A(x[0], i), 3))
    same(
        jax.vmap(lambda o: A(jx, offset=o))(jnp.array([0, 7, 4096])),
        np.stack([A(x, offset=o) for o in (0, 7, 4096)]),
    )
    # dynamic NTK scaling takes max(position) + 1 per element
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8}
    longer = ids * (1 + np.arange(3))[:, None]
    same(
        jax.vmap(lambda p: A(jx[0], p, scaling=dynamic))(jnp.asarray(longer)),
        _stack(lambda i: A(x[0], longer[i], scaling=dynamic), 3),
    )
    # nested
    same(
        jax.vmap(jax.vmap(lambda x, o: A(x, offset=o), in_axes=(0, None)), in_axes=(None, 0))(
            jx, jnp.arange(2)
        ),
        np.stack([_stack(lambda i, o=o: A(x[i], offset=o), 3) for o in range(2)]),
    )


def test_vmap_makes_one_call_per_batch_where_the_function_broadcasts(monkeypatch):
    x = jnp.asarray(randn(4, 2, 8, 16))
    calls = []
    posenc.apply_rope(x)
    posenc.sinusoid(jnp.arange(3.0), 8)
    for plan in pjx._PLANS.values():
        if plan.name in ("apply_rope", "sinusoid"):
            numpy_fn = plan.fn

            def counting(*args, _fn=numpy_fn, **kwargs):
                calls.append(kwargs.get("x", kwargs.get("positions")))
                return _fn(*args, **kwargs)

            monkeypatch.setattr(plan, "fn", counting)

    def ran():  # the calls made when the compiled function ran (not the tracing's)
        return [c for c in calls if isinstance(c, np.ndarray) and all(c.strides)]

    jax.jit(jax.vmap(posenc.apply_rope))(x).block_until_ready()
    assert len(ran()) == 1
    calls.clear()
    jax.jit(jax.vmap(lambda p: posenc.sinusoid(p, 8)))(jnp.ones((4, 3))).block_until_ready()
    assert len(ran()) == 1
    calls.clear()
    jax.jit(jax.vmap(lambda o: posenc.apply_rope(x[0], offset=o)))(
        jnp.arange(4)
    ).block_until_ready()
    assert len(calls) == 1 + 4  # one on the stand-ins while tracing, then one per element


def test_vmap_of_tables_and_biases(callback):
    pos = np.arange(12.0).reshape(3, 4) * 1.5
    same(
        jax.vmap(lambda p: posenc.sinusoid(p, 8))(jnp.asarray(pos)),
        _stack(lambda i: posenc.sinusoid(pos[i].astype(np.float32), 8), 3),
    )
    got = jax.vmap(lambda p: posenc.rope_cos_sin(p, 8))(jnp.asarray(pos))
    for j in range(2):
        want = _stack(lambda i, j=j: posenc.rope_cos_sin(pos[i].astype(np.float32), 8)[j], 3)
        same(got[j], want)
    tables = randn(3, 32, 4)
    same(
        jax.vmap(lambda t: posenc.t5_bias(t, 5, 7))(jnp.asarray(tables)),
        _stack(lambda i: posenc.t5_bias(tables[i], 5, 7), 3),
    )
    same(
        jax.vmap(lambda q: posenc.alibi_bias(4, 3, 8, q_offset=q))(jnp.arange(3)),
        _stack(lambda i: posenc.alibi_bias(4, 3, 8, q_offset=i), 3),
    )
    same(
        jax.vmap(posenc.relative_position_bucket)(jnp.arange(-40, 40)),
        posenc.relative_position_bucket(np.arange(-40, 40)).astype(np.int32),
    )


def _per_element(fn, arrays, in_axes):
    """fn's NumPy results on each element, stacked: what jax.vmap must give."""
    n = next(a.shape[ax] for a, ax in zip(arrays, in_axes) if ax is not None)
    results = [
        fn(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(arrays, in_axes)])
        for i in range(n)
    ]
    if isinstance(results[0], tuple):
        return tuple(np.stack(r) for r in zip(*results))
    return np.stack(results)


def _ids(*shape, seed=0):
    return np.random.default_rng(seed).integers(0, 60, shape).astype(np.int32)


A, C = posenc.apply_rope, posenc.rope_cos_sin
M = [2, 3, 3]  # M-RoPE's sections: 8 pairs of a 16-wide head

_ROWS_CASES = {
    # M-RoPE: an element is x (2, 4, 16) and (temporal, height, width) rows (3, 4)
    "mrope": (lambda x, p: A(x, p, mrope_section=M), [(3, 2, 4, 16), (3, 3, 4)], (0, 0)),
    "mrope batch of 2": (lambda x, p: A(x, p, mrope_section=M), [(2, 2, 4, 16), (2, 3, 4)], (0, 0)),
    "mrope keywords": (
        lambda x, p: A(x=x, positions=p, mrope_section=[4, 2, 2], mrope_interleaved=True),
        [(3, 2, 4, 16), (3, 3, 4)],
        (0, 0),
    ),
    "mrope in_axes (1, 2)": (
        lambda x, p: A(x, p, mrope_section=M),
        [(2, 3, 4, 16), (3, 4, 3)],
        (1, 2),
    ),
    "mrope rows of (batch, seq)": (
        lambda x, p: A(x, p, mrope_section=M, seq_axis=-3),
        [(2, 3, 4, 2, 16), (3, 3, 2, 4)],
        (1, 0),
    ),
    "mrope x batched": (
        lambda x, p: A(x, p, mrope_section=M),
        [(2, 2, 4, 16), (3, 2, 4)],
        (0, None),
    ),
    "mrope positions batched": (
        lambda x, p: A(x, p, mrope_section=M),
        [(2, 4, 16), (3, 3, 4)],
        (None, 0),
    ),
    "mrope from a config": (
        lambda x, p: A(
            x, p, scaling={"rope_type": "default", "mrope_section": M, "mrope_interleaved": False}
        ),
        [(3, 2, 4, 16), (3, 3, 4)],
        (0, 0),
    ),
    # 2-D vision RoPE: (row, column) rows (2, n_patches)
    "axial": (lambda x, p: A(x, p, axial=2), [(3, 2, 4, 16), (3, 2, 4)], (0, 0)),
    "axial batch of 2": (lambda x, p: A(x, p, axial=2), [(2, 2, 4, 16), (2, 2, 4)], (0, 0)),
    "axial x batched": (lambda x, p: A(x, p, axial=[3, 5]), [(2, 3, 4, 16), (2, 4)], (0, None)),
    "axial one position a row": (lambda x, p: A(x, p, axial=2), [(2, 4, 16), (3, 2)], (None, 0)),
    # plain positions: as many dimensions as x.shape[:-1], fewer, one
    "plain (heads, seq) x batched": (lambda x, p: A(x, p), [(2, 2, 4, 16), (2, 4)], (0, None)),
    "plain (heads, seq) both": (lambda x, p: A(x, p), [(3, 2, 4, 16), (3, 2, 4)], (0, 0)),
    "plain (seq,) in_axes 1": (lambda x, p: A(x, p), [(3, 2, 4, 16), (4, 3)], (0, 1)),
    "plain seq_axis=0": (lambda x, p: A(x, p, seq_axis=0), [(2, 4, 3, 16), (4,)], (0, None)),
    "xpos": (
        lambda x, p: A(x, p, xpos="key", xpos_centre=30.0),
        [(3, 2, 4, 16), (3, 4)],
        (0, 0),
    ),
    # tables of positions in rows
    "rope_cos_sin mrope": (lambda p: C(p, 16, mrope_section=M), [(3, 3, 4)], (0,)),
    "rope_cos_sin mrope batch of 2": (lambda p: C(p, 16, mrope_section=M), [(2, 3, 4)], (0,)),
    "rope_cos_sin axial in_axes 2": (lambda p: C(p, 16, axial=2), [(2, 4, 3)], (2,)),
    "rope_cos_sin xpos": (lambda p: C(p, 16, xpos="query"), [(3, 4)], (0,)),
    "sinusoid in_axes 1": (lambda p: posenc.sinusoid(p, 8), [(4, 3)], (1,)),
}


@pytest.mark.parametrize("case", sorted(_ROWS_CASES))
def test_vmap_of_positions_in_rows_and_placed_positions_is_each_elements(case, callback):
    fn, shapes, in_axes = _ROWS_CASES[case]
    # apply_rope's x, then integer positions
    arrays = [
        randn(*s, seed=i) if i == 0 and len(shapes) == 2 else _ids(*s, seed=i)
        for i, s in enumerate(shapes)
    ]
    want = _per_element(fn, arrays, in_axes)
    jarrays = [jnp.asarray(a) for a in arrays]
    for vmapped in (jax.vmap(fn, in_axes), jax.jit(jax.vmap(fn, in_axes))):
        got = vmapped(*jarrays)
        if isinstance(want, tuple):
            for g, w in zip(got, want):
                same(g, w)
        else:
            same(got, want)


def test_vmap_of_the_relative_terms_and_biases_with_other_axes(callback):
    q, r, k = randn(2, 3, 5, 8, seed=1), randn(12, 8, seed=2), randn(3, 2, 7, 8, seed=3)
    cases = [
        (lambda q, r: posenc.xl_position_term(q, r, k_len=7), [q, r], (1, None)),
        (lambda q, k: posenc.shaw_key_term(q, k[0, :5], max_distance=2), [q, k], (0, 1)),
        (lambda t: posenc.t5_bias(t, 3, 5), [randn(32, 2, 3, seed=4)], (2,)),
        (lambda s: posenc.alibi_bias(2, 3, 4, slopes=s), [randn(2, 3, seed=5) ** 2], (1,)),
    ]
    for fn, arrays, in_axes in cases:
        want = _per_element(fn, arrays, in_axes)
        same(jax.jit(jax.vmap(fn, in_axes))(*[jnp.asarray(a) for a in arrays]), want)


# ---------------------------------------------------------------- jax.grad


def test_grad_of_apply_rope_is_jaxs_own_through_the_formula():
    x = randn(2, 3, 10, 16, dtype=np.float64, seed=5)
    w = randn(2, 3, 10, 16, dtype=np.float64, seed=6)
    positions = np.arange(10) + 123
    with x64(True):
        x, w = jnp.asarray(x), jnp.asarray(w)
        got = jax.grad(lambda x: jnp.sum(w * posenc.apply_rope(x, jnp.asarray(positions))))(x)
        want = jax.grad(lambda x: jnp.sum(w * rope_jnp(x, positions)))(x)
        jitted = jax.jit(jax.grad(lambda x: jnp.sum(w * posenc.apply_rope(x, offset=123))))(x)
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-13)
    same(jitted, got)


def test_grad_of_a_norm_and_its_second_derivative(callback):
    # |R x|^2 = |x|^2: its gradient is 2x, and the derivative of <v, 2x> is 2v
    x = jnp.asarray(randn(2, 4, 16, 32, seed=7))
    v = jnp.asarray(randn(2, 4, 16, 32, seed=8))

    def f(x):
        return jnp.sum(posenc.apply_rope(x, offset=1000, layout="interleaved") ** 2)

    np.testing.assert_allclose(np.asarray(jax.grad(f)(x)), 2 * np.asarray(x), rtol=1e-5, atol=1e-5)
    hv = jax.grad(lambda x: jnp.vdot(v, jax.grad(f)(x)))(x)
    np.testing.assert_allclose(np.asarray(hv), 2 * np.asarray(v), rtol=1e-5, atol=1e-5)
    # per-example gradients
    per = jax.vmap(jax.grad(f))(x)
    np.testing.assert_allclose(np.asarray(per), 2 * np.asarray(x), rtol=1e-5, atol=1e-5)


def test_grad_of_t5_bias_is_jaxs_own_through_the_lookup(callback):
    table = jnp.asarray(randn(32, 4, seed=9))
    w = jnp.asarray(randn(2, 4, 6, 9, seed=10))
    buckets = reference.relative_position_bucket(
        np.arange(9)[None, :] - (3 + np.arange(6))[:, None]
    )

    def lookup(t):
        return jnp.moveaxis(t[buckets], -1, 0)

    got = jax.grad(lambda t: jnp.sum(w * posenc.t5_bias(t, 6, 9, q_offset=3)))(table)
    want = jax.grad(lambda t: jnp.sum(w * lookup(t)))(table)
    assert got.shape == table.shape and got.dtype == table.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    traced_offset = jax.jit(
        jax.grad(lambda t, q: jnp.sum(w * posenc.t5_bias(t, 6, 9, q_offset=q))), static_argnums=()
    )(table, 3)
    np.testing.assert_allclose(np.asarray(traced_offset), np.asarray(got), rtol=1e-6, atol=1e-6)


def test_gradients_posenc_does_not_compute_are_errors_not_zeros():
    x = jnp.asarray(randn(1, 2, 4, 8))
    with pytest.raises(TypeError, match=r"apply_rope with respect to positions.*only .* x"):
        jax.grad(lambda p: jnp.sum(posenc.apply_rope(x, p)))(jnp.arange(4.0))
    with pytest.raises(TypeError, match=r"sinusoid with respect to positions"):
        jax.grad(lambda p: jnp.sum(posenc.sinusoid(p, 8)))(jnp.arange(4.0))
    with pytest.raises(TypeError, match=r"alibi_bias with respect to slopes"):
        jax.grad(lambda s: jnp.sum(posenc.alibi_bias(2, 3, slopes=s)))(jnp.ones(2))
    with pytest.raises(TypeError):  # forward mode: refused by JAX for a custom VJP
        jax.jvp(lambda x: posenc.apply_rope(x), (x,), (x,))
    # a gradient with respect to something else passes through posenc's tables
    g = jax.grad(lambda s: jnp.sum(s * posenc.sinusoid(jnp.arange(4.0), 8)))(jnp.ones((4, 8)))
    same(g, posenc.sinusoid(np.arange(4.0, dtype=np.float32), 8))
    # stop_gradient, as the message says, works
    jax.grad(lambda p: jnp.sum(posenc.apply_rope(x, jax.lax.stop_gradient(p))))(jnp.arange(4.0))


def xl_position_jnp(q, r, bias, k_len):
    """Transformer-XL's position term in jax.numpy: (q + v) @ r^T, row i
    read from column k_len - (k_len - q_len + i) + j (the relative shift)."""
    q_len = q.shape[-2]
    products = (q + bias[:, None]) @ jnp.swapaxes(r, -1, -2)
    i, j = np.arange(q_len)[:, None], np.arange(k_len)[None, :]
    column = np.broadcast_to(q_len - i + j, products.shape[:-2] + (q_len, k_len))
    return jnp.take_along_axis(products, jnp.asarray(column), axis=-1)


def deberta_jnp(q, k, pk, pq, span, q_offset, scale):
    """DeBERTa's c2p + p2c in jax.numpy, without buckets: score (i, j)
    reads column clip(span + q_offset + i - j) of query i's row of q @ pk^T
    and of key j's row of k @ pq^T."""
    i, j = np.arange(q.shape[-2])[:, None], np.arange(k.shape[-2])[None, :]
    column = np.clip(span + q_offset + i - j, 0, 2 * span - 1)
    rows_i, rows_j = np.broadcast_to(i, column.shape), np.broadcast_to(j, column.shape)
    c2p = (q @ jnp.swapaxes(pk, -1, -2))[..., rows_i, column]
    p2c = (k @ jnp.swapaxes(pq, -1, -2))[..., rows_j, column]
    return (c2p + p2c) / scale


def test_grad_of_the_relative_terms_is_jaxs_own_through_the_formula():
    q, r, bias = randn(2, 3, 5, 8, seed=12), randn(3, 12, 8, seed=13), randn(3, 8, seed=14)
    k, pk, pq = randn(2, 3, 7, 8, seed=15), randn(3, 6, 8, seed=16), randn(3, 6, 8, seed=17)
    w = randn(2, 3, 5, 7, seed=18)
    xl = {"bias": None, "k_len": 7}
    de = {"max_relative_positions": 3, "q_offset": 1}
    with x64(True):
        q, r, bias, k, pk, pq, w = (jnp.asarray(a, jnp.float64) for a in (q, r, bias, k, pk, pq, w))

        def grads(f, *args):
            return jax.grad(lambda *a: jnp.sum(w * f(*a)), argnums=tuple(range(len(args))))(*args)

        def mine(q, r, b):
            return posenc.xl_position_term(q, r, **{**xl, "bias": b})

        cases = [
            (grads(mine, q, r, bias), grads(lambda *a: xl_position_jnp(*a, 7), q, r, bias)),
            (jax.jit(lambda *a: grads(mine, *a))(q, r, bias), None),
            (
                grads(lambda *a: posenc.deberta_attention_bias(*a, **de), q, k, pk, pq),
                grads(lambda *a: deberta_jnp(*a, 3, 1, np.sqrt(24.0)), q, k, pk, pq),
            ),
        ]
    for got, want in cases:
        for a, b in zip(got, want or cases[0][0]):
            assert a.dtype == jnp.float64 and a.shape == b.shape
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-12)


def test_a_relative_terms_gradient_has_no_gradient_of_its_own():
    q, r = jnp.ones((1, 2, 3, 4)), jnp.ones((2, 8, 4))

    def f(q):
        return jnp.sum(posenc.xl_position_term(q, r) ** 2)

    with pytest.raises(TypeError, match=r"xl_position_term \(its gradient with respect to q\)"):
        jax.grad(lambda q: jnp.sum(jax.grad(f)(q)))(q)


@pytest.mark.parametrize(
    "name, arrays, options",
    [
        ("xl_content_bias", {"k": (2, 2, 6, 4), "bias": (2, 4)}, {}),
        (
            "tener_scores",
            {"q": (2, 2, 5, 4), "k": (2, 2, 5, 4), "table": None, "u": (2, 4), "v": (2, 4)},
            {"scale": True},
        ),
        ("shaw_key_term", {"q": (2, 2, 5, 4), "rel_keys": (5, 4)}, {"max_distance": 2, "k_len": 7}),
        (
            "shaw_value_term",
            {"weights": (2, 2, 5, 7), "rel_values": (2, 5, 4)},
            {"max_distance": 2},
        ),
        (
            "tupe_bias",
            {"pos_q": (2, 6, 4), "pos_k": (2, 6, 4), "rel_table": (9, 2)},
            {"max_distance": 8},
        ),
    ],
)
def test_grad_of_every_relative_term_by_finite_differences(name, arrays, options):
    from jax.test_util import check_grads

    rng = np.random.default_rng(len(name))
    table = posenc.tener_relative_table(6, 4, dtype="float64")  # None: this table
    values = [table if s is None else rng.standard_normal(s) for s in arrays.values()]
    with x64(True):

        def f(*a):
            return getattr(posenc, name)(**dict(zip(arrays, a)), **options)

        check_grads(f, tuple(jnp.asarray(a) for a in values), order=1, modes=["rev"])


# ---------------------------------------------------------------- bfloat16 and float16


def _ulps_off(got, exact, dtype):
    """|got - exact| in units of the spacing of `dtype` at |exact|."""
    exact = np.asarray(exact, np.float64)
    mant = {np.dtype(np.float16): 10, BF16: 7}[np.dtype(dtype)]
    floor = {np.dtype(np.float16): -14, BF16: -126}[np.dtype(dtype)]
    exponent = np.maximum(np.floor(np.log2(np.maximum(np.abs(exact), 1e-300))), floor)
    return np.abs(np.asarray(got, np.float64) - exact) / 2.0 ** (exponent - mant)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_half_precision_rope_is_within_one_rounding_of_the_exact_rotation(dtype):
    x = jnp.asarray(randn(1, 4, 32, 64, seed=11)).astype(dtype)
    for offset in (0, 2**20):
        got = posenc.apply_rope(x, offset=offset)
        assert got.dtype == dtype
        same(got, posenc.apply_rope(np.asarray(x), offset=offset))  # ml_dtypes' path
        same(jax.jit(lambda x, o=offset: posenc.apply_rope(x, offset=o))(x), got)
        exact = rope64(np.asarray(x).astype(np.float64), offset + np.arange(32))
        assert _ulps_off(got, exact, dtype).max() <= 1.0


def test_bfloat16_tables_are_the_float64_values_rounded_once():
    pos = np.arange(256.0) * 97.0
    pe = posenc.sinusoid(jnp.asarray(pos), 64, dtype=jnp.bfloat16)
    assert pe.dtype == jnp.bfloat16
    assert _ulps_off(pe, sinusoid64(pos, 64), BF16).max() <= 0.5 + 1e-9
    table = jnp.asarray(randn(32, 4)).astype(jnp.bfloat16)
    bias = posenc.t5_bias(table, 5, 7)
    assert bias.dtype == jnp.bfloat16
    same(bias, t5_lookup(np.asarray(table), 5, 7))


# ---------------------------------------------------------------- M-RoPE and axial RoPE


def mrope_jnp(x, ids, sections, base=10000.0):
    """M-RoPE written in jax.numpy: pair i rotated by its section's row."""
    half = x.shape[-1] // 2
    row = np.repeat(np.arange(len(sections)), sections)
    inv = base ** (-np.arange(0, 2 * half, 2, dtype=np.float64) / (2 * half))
    pos = jnp.moveaxis(jnp.asarray(ids, dtype=x.dtype)[row], 0, -1)[:, None]  # (b, 1, s, half)
    angle = pos * jnp.asarray(inv, dtype=x.dtype)
    c, s = jnp.cos(angle), jnp.sin(angle)
    a, b = x[..., :half], x[..., half:]
    return jnp.concatenate([a * c - b * s, b * c + a * s], -1)


def test_mrope_and_axial_rope_with_jax_arrays_jit_and_grad(callback):
    sections = [4, 2, 2]
    x = randn(2, 3, 9, 16, dtype=np.float64, seed=21)
    w = randn(2, 3, 9, 16, dtype=np.float64, seed=22)
    ids = np.random.default_rng(23).integers(0, 40, (3, 2, 9))
    want = reference.apply_rope(x, ids, mrope_section=sections)
    with x64(True):
        xj, wj, idj = jnp.asarray(x), jnp.asarray(w), jnp.asarray(ids)
        eager = posenc.apply_rope(xj, idj, mrope_section=sections)
        jitted = jax.jit(lambda x, p: posenc.apply_rope(x, p, mrope_section=sections))(xj, idj)
        got = jax.grad(lambda x: jnp.sum(wj * posenc.apply_rope(x, idj, mrope_section=sections)))
        own = jax.grad(lambda x: jnp.sum(wj * mrope_jnp(x, idj, sections)))
        g, g_own = got(xj), own(xj)
        cos, _ = jax.jit(lambda p: posenc.rope_cos_sin(p, 16, axial=2, dtype="float64"))(
            jnp.asarray(posenc.vision_position_ids([[1, 4, 4]], spatial_merge_size=2))
        )
    assert isinstance(eager, jax.Array)
    np.testing.assert_allclose(np.asarray(eager), want, rtol=0, atol=1e-14)
    same(jitted, eager)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_own), rtol=0, atol=1e-13)
    vision = posenc.vision_position_ids([[1, 4, 4]], spatial_merge_size=2)
    want_cos = reference.rope_cos_sin(vision, 16, axial=2, dtype=np.float64)[0]
    np.testing.assert_allclose(np.asarray(cos), want_cos, atol=1e-15)


def test_mrope_errors_are_the_same_while_tracing(callback):
    with pytest.raises(ValueError, match="leading axis of 3 rows"):
        jax.jit(lambda x: posenc.apply_rope(x, mrope_section=[4, 2, 2]))(jnp.zeros((2, 5, 16)))
    with pytest.raises(ValueError, match="add up"):
        jax.jit(lambda x, p: posenc.apply_rope(x, p, mrope_section=[4, 2, 1]))(
            jnp.zeros((2, 5, 16)), jnp.zeros((3, 5), jnp.int32)
        )
