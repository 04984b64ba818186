"""What the torch operator's options and fake implementation are made of,
on the NumPy side: posenc._options (decode_numpy, carried) and
posenc._records.on_stand_ins; and what dtype= gives on every path, the
NumPy call the witness of torch's and JAX's (those tests need them, and
skip without them as the others do)."""

import numpy as np
import pytest
from optional import require

import posenc
from posenc import _dtypes, _options, _records

# ---------------------------------------------------------------- decode_numpy


def test_decode_numpy_gives_the_numpy_dtype_of_a_dtype_name():
    spec, floats, ints = _options.encode({"dtype": "bfloat16", "base": 10000.0, "n": 3})
    assert _options.decode_numpy(spec, floats, ints) == {
        "dtype": _dtypes.BFLOAT16_BITS,
        "base": 10000.0,
        "n": 3,
    }
    for name in ("float16", "float32", "float64"):
        decoded = _options.decode_numpy(*_options.encode({"dtype": name}))
        assert decoded["dtype"] == np.dtype(name) and isinstance(decoded["dtype"], np.dtype)


def test_decode_numpy_gives_a_fresh_dict_each_time():
    spec, floats, ints = _options.encode({"n": 3, "layout": "half"})
    first = _options.decode_numpy(spec, floats, ints)
    first["n"] = 4
    del first["layout"]
    assert _options.decode_numpy(spec, floats, ints) == {"n": 3, "layout": "half"}


# ---------------------------------------------------------------- carried


def test_carried_makes_the_arrays_lists_and_leaves_the_rest():
    scaling = {"rope_type": "linear", "factor": 2.0}
    options = {
        "sections": np.array([16, 24, 24]),
        "offset": np.array(3),  # 0-d: a number, left to the encoder
        "scaling": scaling,
        "layer_type": None,
    }
    carried = _options.carried(options, (np.ndarray,))
    assert carried["sections"] == [16, 24, 24] and type(carried["sections"]) is list
    assert carried["offset"] is options["offset"] and carried["scaling"] is scaling
    assert "scaling_json" not in carried and carried["layer_type"] is None


def test_carried_gives_a_config_object_as_the_text_decode_reads_back():
    LlamaConfig = pytest.importorskip("transformers").LlamaConfig

    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        rope_parameters={"rope_type": "linear", "rope_theta": 500000.0, "factor": 4.0},
    )
    carried = _options.carried({"scaling": config, "layer_type": None}, (np.ndarray,))
    assert "layer_type" not in carried and carried["scaling_json"] is True
    decoded = _options.decode(*_options.encode(carried))
    assert "scaling_json" not in decoded
    # the same frequencies as the config itself gives: base 500000, divided by 4
    params = decoded["scaling"]["rope_parameters"]
    assert params["rope_type"] == "linear" and params["factor"] == 4.0
    want = 1.0 / 500000.0 ** (np.arange(0, 16, 2) / 16) / 4.0
    got = posenc.rope_frequencies(16, scaling=decoded["scaling"])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---------------------------------------------------------------- on_stand_ins


def test_on_stand_ins_gives_the_result_of_a_call_on_arrays_of_those_shapes():
    f32 = np.dtype(np.float32)
    result = _records.on_stand_ins("alibi_bias", {"n_heads": 4, "q_len": 3, "k_len": 5}, {})
    assert result.shape == (4, 3, 5) and result.dtype == f32
    # kerple_bias refuses zeros (its parameters must be positive): ones then
    arrays = {"r1": ((2,), f32), "r2": ((2,), f32)}
    result = _records.on_stand_ins("kerple_bias", {"q_len": 3, "k_len": 5}, arrays)
    assert result.shape == (2, 3, 5) and result.dtype == f32
    with pytest.raises(ValueError, match="r1 must be > 0"):
        posenc.kerple_bias(np.zeros(2, f32), np.ones(2, f32), 3, 5)


def test_on_stand_ins_passes_on_what_ones_do_not_fix():
    f32 = np.dtype(np.float32)
    arrays = {"r1": ((2,), f32), "r2": ((3,), f32)}
    with pytest.raises(ValueError, match="r2"):
        _records.on_stand_ins("kerple_bias", {"q_len": 3, "k_len": 5}, arrays)


# ---------------------------------------------------------------- dtype=None on every path
#
# dtype=None is what leaving dtype out means, on the NumPy path, torch's
# direct path (no grad), its operator (autograd, torch.compile) and JAX's
# (eager, jit): float32, whatever the dtype of the parameters; an explicit
# dtype is that dtype on every path.  The witness is the NumPy call with
# dtype left out (float32 by SPEC's convention), and the same call's
# values: every path rounds the same float64 values once.


def test_decode_numpy_keeps_a_dtype_of_none():
    decoded = _options.decode_numpy(*_options.encode({"dtype": None, "n": 3}))
    # not np.dtype(None), which is float64 (and compares equal to None)
    assert decoded["dtype"] is None and decoded == {"dtype": None, "n": 3}


def _fire_arrays(dtype):
    rng = np.random.default_rng(3)
    shapes = ((6, 1), (6,), (2, 6), (2,))
    return [rng.normal(size=s).astype(dtype) for s in shapes]


#: every public function with dtype=: (call, its array arguments in a dtype);
#: a function without arrays is routed to torch by device="cpu"
DTYPE_CALLS = {
    "sinusoid": (
        lambda p, **kw: posenc.sinusoid(p, 8, **kw),
        lambda dt: [np.arange(5, dtype=dt) * 3.5],
    ),
    "rope_cos_sin": (
        lambda p, **kw: posenc.rope_cos_sin(p, 8, **kw),
        lambda dt: [np.arange(5, dtype=dt) * 3.5],
    ),
    "alibi_bias": (
        lambda s, **kw: posenc.alibi_bias(2, 3, 4, slopes=s, **kw),
        lambda dt: [np.array([0.3, 0.7], dt)],
    ),
    "alibi_key_bias": (
        lambda m, **kw: posenc.alibi_key_bias(m, 2, **kw),
        lambda dt: [np.array([[0, 1, 1, 1]], dt)],
    ),
    "kerple_bias": (
        lambda a, b, **kw: posenc.kerple_bias(a, b, 3, 4, **kw),
        lambda dt: [np.array([1.3, 0.4], dt), np.array([0.6, 1.1], dt)],
    ),
    "sandwich_bias": (lambda **kw: posenc.sandwich_bias(2, 3, 4, dim=8, **kw), lambda dt: []),
    "fire_bias": (
        lambda w1, b1, w2, b2, **kw: posenc.fire_bias(w1, b1, w2, b2, 0.3, 2.0, 3, 4, **kw),
        _fire_arrays,
    ),
    "xl_relative_table": (
        lambda **kw: posenc.xl_relative_table(3, 4, 8, **kw),
        lambda dt: [],
    ),
    "tener_relative_table": (
        lambda **kw: posenc.tener_relative_table(5, 8, **kw),
        lambda dt: [],
    ),
}

#: dtype= as each path is given it: (NumPy's, torch's, JAX's), None for left out
DTYPE_SPECS = {
    "left out": ("omit", "omit", "omit"),
    "None": (None, None, None),
    "float32": ("float32", "torch.float32", "jnp.float32"),
    "float64": ("float64", "torch.float64", "jnp.float64"),
    "float16": ("float16", "torch.float16", "jnp.float16"),
    "bfloat16": ("bfloat16", "torch.bfloat16", "jnp.bfloat16"),
}


def _spec(given, modules):
    """The keyword arguments of one dtype= as a path takes it."""
    if given == "omit":
        return {}
    if isinstance(given, str) and "." in given:
        module, name = given.split(".")
        return {"dtype": getattr(modules[module], name)}
    return {"dtype": given}


def _numbers(result):
    """The results of a call (a tuple or one array) as (dtype names, float64 values)."""
    results = result if isinstance(result, tuple) else (result,)
    names, values = [], []
    for r in results:
        names.append(str(r.dtype).replace("torch.", ""))
        if hasattr(r, "detach"):  # a tensor
            r = r.detach().double().numpy()
        values.append(np.asarray(r).astype(np.float64))
    return names, values


def _expected(name, spec, param_dtype):
    call, arrays = DTYPE_CALLS[name]
    return _numbers(call(*arrays(param_dtype), **_spec(DTYPE_SPECS[spec][0], {})))


def _same(got, want):
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        np.testing.assert_array_equal(g, w)


def test_the_dtype_calls_cover_every_function_with_a_dtype():
    import inspect

    with_dtype = {
        name
        for name in _records.RECORDS
        if "dtype" in inspect.signature(_records.function(name)).parameters
    }
    assert with_dtype == set(DTYPE_CALLS)


@pytest.mark.parametrize("param_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(DTYPE_CALLS))
def test_numpy_dtype_none_is_dtype_left_out(name, param_dtype):
    want = _expected(name, "left out", param_dtype)
    assert want[0] == ["float32"] * len(want[0])  # the default, whatever the parameters'
    _same(_expected(name, "None", param_dtype), want)


#: the functions that torch.compile traces into posenc's operator (the
#: others break the graph, and run as the direct path)
_COMPILED = ("sinusoid", "rope_cos_sin", "alibi_bias", "kerple_bias", "sandwich_bias", "fire_bias")


def _torch_paths(name, param_dtype):
    """The results of one call with each of DTYPE_SPECS on torch's paths:
    direct (no grad), the operator eagerly (autograd, when the function
    records it) and under torch.compile(fullgraph=True), by path and spec."""
    torch = require("torch")
    call, arrays = DTYPE_CALLS[name]
    specs = {spec: _spec(given[1], {"torch": torch}) for spec, given in DTYPE_SPECS.items()}
    if not arrays(param_dtype):
        specs = {spec: {**kwargs, "device": "cpu"} for spec, kwargs in specs.items()}

    def tensors(grad=False):
        made = [torch.tensor(a) for a in arrays(param_dtype)]
        return [t.requires_grad_() if grad else t for t in made]

    paths = {}
    with torch.no_grad():
        paths["no grad"] = {spec: call(*tensors(), **kw) for spec, kw in specs.items()}
    if _records.RECORDS[name].backward == "host":  # differentiable in its parameters
        paths["autograd"] = {}
        for spec, kwargs in specs.items():
            params = tensors(grad=True)
            paths["autograd"][spec] = result = call(*params, **kwargs)
            result.float().sum().backward()
            assert [p.grad.dtype for p in params] == [p.dtype for p in params]
    if name in _COMPILED:  # one graph that makes the call with every dtype
        torch._dynamo.reset()
        every = torch.compile(
            lambda *ts: [call(*ts, **kwargs) for kwargs in specs.values()], fullgraph=True
        )
        paths["compile"] = dict(zip(specs, every(*tensors())))
    return paths


@pytest.mark.parametrize("param_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(DTYPE_CALLS))
def test_torch_paths_give_the_numpy_dtype_and_values(name, param_dtype):
    for path, results in _torch_paths(name, param_dtype).items():
        for spec, result in results.items():
            want = _expected(name, spec, param_dtype)
            got = _numbers(result)
            assert got[0] == want[0], (path, spec)
            _same(got, want)


@pytest.mark.parametrize("param_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(n for n, (_, a) in DTYPE_CALLS.items() if a(np.float32)))
def test_jax_eager_and_jit_give_the_numpy_dtype_and_values(name, param_dtype):
    jax = require("jax")
    jnp = require("jax.numpy")
    x64 = jax.enable_x64 if hasattr(jax, "enable_x64") else require("jax.experimental").enable_x64
    call, arrays = DTYPE_CALLS[name]
    specs = {spec: _spec(given[2], {"jnp": jnp}) for spec, given in DTYPE_SPECS.items()}
    with x64(True):  # float64 parameters and results held as such
        params = [jnp.asarray(a) for a in arrays(param_dtype)]
        eager = {spec: call(*params, **kwargs) for spec, kwargs in specs.items()}
        every = jax.jit(lambda *ps: [call(*ps, **kwargs) for kwargs in specs.values()])
        jitted = dict(zip(specs, every(*params)))
        if _records.RECORDS[name].backward == "host":  # gradients in the parameters' dtype
            loss = jax.grad(lambda *ps: call(*ps).sum(), argnums=tuple(range(len(params))))
            assert [g.dtype for g in loss(*params)] == [p.dtype for p in params]
    for path, results in (("eager", eager), ("jit", jitted)):
        for spec, result in results.items():
            want = _expected(name, spec, param_dtype)
            got = _numbers(result)
            assert got[0] == want[0], (path, spec)
            _same(got, want)
