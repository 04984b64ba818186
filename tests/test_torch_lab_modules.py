"""posenc.torch's modules of the absolute embeddings and the learned biases
(SinusoidalEmbedding, LearnedPositionEmbedding, ComplexOrderEmbedding,
KerpleBias, SandwichBias, FireBias, CoPE).

Each module is checked, in float32 and float64, against the posenc function
it wraps called directly with the same parameters (the same bits), and
against the paper's formula written here in plain torch ops and
differentiated by torch's autograd (values and the gradient of every
parameter); its other device's path (torch's ops, forced on the CPU)
against both; its state_dict round trip, its casts, the meta device, and
its arguments refused by name.  x-transformers' CoPE, scaled sinusoid and
absolute embedding are witnesses where it is installed.  torch is required
under POSENC_REQUIRE_CONFORMANCE=1 (as CI sets it) and the tests are skipped
without it otherwise.
"""

import io
import json

import numpy as np
import pytest
from optional import require

import posenc
from posenc.complex_order import complex_order_embedding
from posenc.cope import cope_bias
from posenc.functional_bias import fire_bias, kerple_bias, sandwich_bias

torch = require("torch")

import posenc._torch_modules as tm  # noqa: E402
import posenc.torch as pt  # noqa: E402

DTYPES = [torch.float32, torch.float64]
INF = float("-inf")

#: the largest difference seen by each comparison (relative to the largest
#: magnitude compared), kept for a look after a run
MEASURED: dict = {}


@pytest.fixture(params=[False, True], ids=["cpu-path", "device-path"])
def path(request, monkeypatch):
    """Each module's two paths: posenc's function (the CPU), and torch's ops
    (another device's path, forced on the CPU)."""
    monkeypatch.setattr(posenc._torch, "force_device_path", request.param)
    return request.param


_PATHS = {False: "cpu path", True: "device path"}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _close(got, want, dtype, what, *, grad=False, sums=False):
    """`got` (of `dtype`) against `want` (float64): the same infinities, the
    finite values within one rounding to `dtype` of each other (a sum of
    two values rounded each, `sums`: also within one rounding of the largest
    value; a gradient summed over many terms: within 1e-6 of its largest
    value in float32)."""
    got, want = got.detach(), want.detach()
    assert got.shape == want.shape, what
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), finite), what
    assert torch.equal(got[~finite].double(), want[~finite]), what
    g, w = got[finite].double(), want[finite].double()
    scale = float(w.abs().max()) if w.numel() else 0.0
    diff = float((g - w).abs().max()) if w.numel() else 0.0
    MEASURED[what] = max(MEASURED.get(what, 0.0), diff / scale if scale else diff)
    if dtype == torch.float64:
        rtol, atol = 1e-12, 1e-13 * max(scale, 1.0)
    else:
        rtol, atol = (1e-6, 1e-6 * scale) if grad else (2.4e-7, sums * 1.2e-7 * scale)
    torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=what)


def _loss(out, seed):
    """A scalar of `out` whose gradient is a fixed random tensor on the finite entries."""
    g = torch.randn(out.shape, generator=_gen(seed), dtype=torch.float64)
    return torch.where(torch.isfinite(out), out.double() * g, 0.0).sum()


def _grads(params):
    return {name: p.grad.detach().clone() for name, p in params.items()}


def _round_trip(module, fresh, *args, **kwargs):
    """The module's state_dict saved, loaded into `fresh`: the same outputs."""
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    buf.seek(0)
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    with torch.no_grad():
        a, b = module(*args, **kwargs), fresh(*args, **kwargs)
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    for x, y in zip(a, b):
        assert torch.equal(x, y)


# -- the names of the contract ----------------------------------------------------------------


def test_the_modules_are_posenc_torchs_with_the_agreed_signatures():
    names = ["SinusoidalEmbedding", "LearnedPositionEmbedding", "ComplexOrderEmbedding",
             "KerpleBias", "SandwichBias", "FireBias", "CoPE"]  # fmt: skip
    for name in names:
        assert name in pt.__all__ and getattr(pt, name) is getattr(tm, name)
    pt.SinusoidalEmbedding(8, base=10000.0)
    pt.LearnedPositionEmbedding(4, 8, init="random", freeze=False, key=None)
    pt.ComplexOrderEmbedding(10, 8)
    pt.KerpleBias(2, kind="power", causal=False)
    pt.SandwichBias(2, 8, causal=False)
    pt.FireBias(2, hidden=8, causal=False)
    pt.CoPE(2, 8, 16, causal=False)
    b = pt.KerpleBias(2).bias(3, 5, q_offset=2, dtype=torch.float64, device="cpu")
    assert b.shape == (2, 3, 5) and b.dtype == torch.float64


# -- SinusoidalEmbedding --------------------------------------------------------------------------


def _sinusoid_by_hand(positions, dim, base, layout):
    """The paper's table in float64: sin and cos of p * base ** (-2i / dim)."""
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = positions.double()[..., None] * freq
    s, c = torch.sin(angles), torch.cos(angles)
    if layout == "concat":
        return torch.cat([s, c], -1)
    return torch.stack([s, c], -1).flatten(-2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_sinusoid_equals_posenc_and_the_papers_formula(dtype, layout):
    module = pt.SinusoidalEmbedding(16, base=500.0, layout=layout)
    for positions in (torch.arange(40).reshape(2, 20), torch.tensor([0.5, 3.25, 1000.0]),
                      torch.tensor(7), torch.arange(5, dtype=torch.int32) * 3):  # fmt: skip
        got = module(positions, dtype=dtype)
        assert got.shape == positions.shape + (16,) and got.dtype == dtype
        want = posenc.sinusoid(positions.reshape(-1), 16, base=500.0, layout=layout, dtype=dtype)
        assert torch.equal(got, want.reshape(got.shape))
        _close(got, _sinusoid_by_hand(positions, 16, 500.0, layout), dtype, f"sinusoid {dtype}")
    assert torch.equal(module(6, dtype=dtype), module(torch.arange(6), dtype=dtype))


def test_sinusoid_follows_the_modules_dtype_and_has_no_state():
    module = pt.SinusoidalEmbedding(8)
    assert module.state_dict() == {}
    _round_trip(module, pt.SinusoidalEmbedding(8), torch.arange(5))
    assert module(4).dtype == torch.float32
    assert module.double()(4).dtype == torch.float64  # cast as a module with parameters
    assert module.to(torch.float16)(4).dtype == torch.float16
    assert module(4, dtype=torch.float32).dtype == torch.float32  # asked for
    # float positions (the skip-position attack) take no gradient: a constant
    x = torch.arange(3.0, requires_grad=True)
    assert not module(x).requires_grad


# -- LearnedPositionEmbedding --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_learned_lookup_and_gradient_against_indexing(dtype):
    module = pt.LearnedPositionEmbedding(12, 6, dtype=dtype)
    assert module.weight.dtype == dtype and module.weight.requires_grad
    ids = torch.tensor([[0, 3, 3, 11], [5, 1, 0, 2]])
    out = module(ids)
    assert torch.equal(out, torch.nn.functional.embedding(ids, module.weight))
    _loss(out, 1).backward()
    table = module.weight.detach().double().requires_grad_()
    want = table[ids]  # the table's rows, by plain indexing
    _close(out, want, dtype, f"learned {dtype}")
    _loss(want, 1).backward()
    _close(module.weight.grad, table.grad, dtype, f"learned grad {dtype}", grad=True)
    for small in (torch.int32, torch.int16, torch.uint8):
        assert torch.equal(module(ids.to(small)), out)


def test_learned_inits_random_sinusoid_and_tables(tmp_path):
    torch.manual_seed(0)
    random = pt.LearnedPositionEmbedding(512, 64)
    assert abs(float(random.weight.detach().std()) - 0.02) < 0.001  # BERT's and GPT-2's init
    assert (
        abs(float(pt.LearnedPositionEmbedding(512, 64, std=1.0).weight.detach().std()) - 1) < 0.05
    )
    sin = pt.LearnedPositionEmbedding(50, 8, init="sinusoid", dtype=torch.float64)
    assert torch.equal(
        sin.weight.detach(), torch.from_numpy(posenc.sinusoid(50, 8, dtype="float64"))
    )
    table = np.random.default_rng(0).standard_normal((20, 4))
    for init in (table, torch.from_numpy(table), torch.from_numpy(table).to(torch.bfloat16)):
        m = pt.LearnedPositionEmbedding(16, 4, init=init, dtype=torch.float64)
        want = torch.as_tensor(np.asarray(torch.as_tensor(init).double()))[:16]  # the first rows
        assert torch.equal(m.weight.detach(), want)
    frozen = pt.LearnedPositionEmbedding(20, 4, init=table, freeze=True)
    assert not frozen.weight.requires_grad and frozen.weight.dtype == torch.float32
    assert not frozen(torch.arange(3)).requires_grad
    # files: an .npy, a .safetensors with its key
    np.save(tmp_path / "t.npy", table)
    m = pt.LearnedPositionEmbedding(20, 4, init=str(tmp_path / "t.npy"), dtype=torch.float64)
    assert torch.equal(m.weight.detach(), torch.from_numpy(table))
    st = require("safetensors.numpy")
    st.save_file({"a": table[:, :2].copy(), "b.weight": table}, str(tmp_path / "m.safetensors"))
    m = pt.LearnedPositionEmbedding(20, 4, init=str(tmp_path / "m.safetensors"), key="b.weight",
                                    dtype=torch.float64)  # fmt: skip
    assert torch.equal(m.weight.detach(), torch.from_numpy(table))
    assert m.init == "table" and m.init_note == ""


def _model_folder(folder, config, table, key):
    st = require("safetensors.numpy")
    folder.mkdir()
    st.save_file({key: table, "other.weight": np.zeros((3, 3))}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_learned_from_a_model_takes_the_rows_its_config_makes_positions(tmp_path):
    table = np.arange(36.0).reshape(9, 4)
    roberta = _model_folder(tmp_path / "roberta", {"model_type": "roberta", "pad_token_id": 1},
                            table, "roberta.embeddings.position_embeddings.weight")  # fmt: skip
    for source in (roberta, roberta / "model.safetensors"):
        m = pt.LearnedPositionEmbedding(7, 4, init=str(source), dtype=torch.float64)
        assert torch.equal(m.weight.detach(), torch.from_numpy(table[2:]))  # padding_idx + 1
        assert "padding_idx" in m.init_note
    with pytest.raises(ValueError, match="init has 7 positions from row 2"):
        pt.LearnedPositionEmbedding(8, 4, init=str(roberta))
    m = pt.LearnedPositionEmbedding(8, 4, init=str(roberta), first_row=0, dtype=torch.float64)
    assert torch.equal(m.weight.detach(), torch.from_numpy(table[:8]))  # as asked
    bert = _model_folder(tmp_path / "bert", {"model_type": "bert"}, table,
                         "bert.embeddings.position_embeddings.weight")  # fmt: skip
    m = pt.LearnedPositionEmbedding(9, 4, init=str(bert), dtype=torch.float64)
    assert torch.equal(m.weight.detach(), torch.from_numpy(table))


def test_learned_from_a_hub_name_takes_the_rows_its_config_makes_positions(tmp_path, monkeypatch):
    require("huggingface_hub")
    st = require("safetensors.numpy")
    from hub_server import HubServer, Repo, use_local_hub

    table = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)
    files = {
        "model.safetensors": st.save({"model.decoder.embed_positions.weight": table}),
        "config.json": json.dumps({"model_type": "opt", "pad_token_id": 1}).encode(),
    }
    server = HubServer({"org/tiny-opt": Repo(files)}).start()
    try:
        use_local_hub(monkeypatch, server, tmp_path / "cache")
        m = pt.LearnedPositionEmbedding(8, 4, init="org/tiny-opt")
    finally:
        server.stop()
    assert torch.equal(m.weight.detach(), torch.from_numpy(table[2:]))  # OPT's offset of 2
    assert "2" in m.init_note


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(init=np.zeros((20, 5))), ValueError, "init is 5 wide"),
        (dict(init=np.zeros((15, 4))), ValueError, "init has 15 positions"),
        (dict(init=np.zeros(16)), ValueError, "init must be a"),
        (dict(init=np.full((16, 4), np.nan)), ValueError, "init must be finite"),
        (dict(init=np.zeros((16, 4), bool)), TypeError, "init must be a table of real"),
        (dict(init=3), TypeError, "init must be"),
        (dict(init=torch.zeros(16, 4, device="meta")), ValueError, "init is on the meta"),
        (dict(init=np.zeros((16, 4)), key="x"), ValueError, "key"),
        (dict(key=3), TypeError, "key"),
        (dict(init="no/such/file.npy"), FileNotFoundError, "no/such/file.npy"),
        (dict(first_row=-1), ValueError, "first_row"),
        (dict(freeze="no"), TypeError, "freeze"),
        (dict(std=0), ValueError, "std"),
        (dict(dtype=torch.int64), TypeError, "dtype"),
        (dict(dtype="float32"), TypeError, "dtype"),
    ],
)
def test_learned_refuses_bad_arguments_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        pt.LearnedPositionEmbedding(16, 4, **kwargs)


def test_learned_refuses_positions_it_cannot_look_up():
    module = pt.LearnedPositionEmbedding(8, 4)
    for bad, match in ((torch.tensor([0, 8]), "found 8"), (torch.tensor([-1]), "found -1")):
        with pytest.raises(ValueError, match="positions must be in 0 .. 7.*" + match):
            module(bad)
    with pytest.raises(TypeError, match="positions must be an integer tensor"):
        module(torch.tensor([0.0, 1.0]))
    with pytest.raises(TypeError, match="positions must be an integer tensor"):
        module(torch.tensor([True]))
    with pytest.raises(TypeError, match="positions must be a torch tensor"):
        module([0, 1])
    with pytest.raises(ValueError, match="num_positions"):
        pt.LearnedPositionEmbedding(0, 2)
    with pytest.raises(TypeError, match="dim"):
        pt.LearnedPositionEmbedding(4, 2.0)


def test_learned_casts_round_trips_and_draws_again():
    module = pt.LearnedPositionEmbedding(10, 4)
    ids = torch.arange(10)
    _round_trip(module, pt.LearnedPositionEmbedding(10, 4), ids)
    assert module.double().weight.dtype == torch.float64 and module(ids).dtype == torch.float64
    before = module.weight.detach().clone()
    module.reset_parameters()
    assert not torch.equal(before, module.weight)
    sin = pt.LearnedPositionEmbedding(6, 4, init="sinusoid")
    sin.weight.data.zero_()
    sin.reset_parameters()
    assert torch.equal(sin.weight.detach(), torch.from_numpy(posenc.sinusoid(6, 4)))
    with pytest.raises(ValueError, match="init was a table"):
        pt.LearnedPositionEmbedding(2, 2, init=np.ones((2, 2))).reset_parameters()


# -- ComplexOrderEmbedding ------------------------------------------------------------------------


def _complex_order_by_hand(ids, positions, r, w, theta):
    """Wang et al.'s word functions: r[t] cos(w[t] pos + theta[t]), r[t] sin(...)."""
    phase = positions.double()[..., None] * w[ids] + theta[ids]
    return r[ids] * torch.cos(phase), r[ids] * torch.sin(phase)


@pytest.mark.parametrize("dtype", DTYPES)
def test_complex_order_equals_posenc_and_the_papers_formula(dtype, path):
    torch.manual_seed(3)
    module = pt.ComplexOrderEmbedding(30, 8, output="pair").to(dtype)
    ids = torch.tensor([[1, 4, 4, 29, 0], [7, 7, 2, 3, 1]])
    real, imag = module(ids)
    assert real.shape == (2, 5, 8) and real.dtype == dtype
    tables = dict(amplitude=module.amplitude, frequency=module.frequency, phase=module.phase)
    pos = torch.arange(1, 6)  # the authors count from 1
    want = complex_order_embedding(ids, pos, *(t.detach() for t in tables.values()))
    if not path:
        assert torch.equal(real, want[0]) and torch.equal(imag, want[1])
    hand_tables = {k: t.detach().double().requires_grad_() for k, t in tables.items()}
    hand = _complex_order_by_hand(ids, pos, *hand_tables.values())
    for got, h, part in zip((real, imag), hand, ("real", "imag")):
        _close(got, h, dtype, f"complex order {part} {dtype} {_PATHS[path]}")
    (_loss(real, 4) + _loss(imag, 5)).backward()
    (_loss(hand[0], 4) + _loss(hand[1], 5)).backward()
    for name, p in tables.items():
        what = f"complex order d{name} {dtype} {_PATHS[path]}"
        _close(p.grad, hand_tables[name].grad, dtype, what, grad=True)
    # float positions take their gradient too
    fpos = torch.tensor([0.5, 2.0, 7.25, 1.0, 3.0], dtype=dtype, requires_grad=True)
    hpos = fpos.detach().double().requires_grad_()
    _loss(module(ids, fpos)[0], 6).backward()
    _loss(_complex_order_by_hand(ids, hpos, *hand_tables.values())[0], 6).backward()
    what = f"complex order dpositions {dtype} {_PATHS[path]}"
    _close(fpos.grad, hpos.grad, dtype, what, grad=True)


def test_complex_order_output_forms_and_state():
    torch.manual_seed(4)
    pair = pt.ComplexOrderEmbedding(10, 4, output="pair")
    ids = torch.tensor([[3, 1, 2]])
    real, imag = pair(ids)
    concat = pt.ComplexOrderEmbedding(10, 4)
    concat.load_state_dict(pair.state_dict())
    assert torch.equal(concat(ids), torch.cat([real, imag], -1))
    cplx = pt.ComplexOrderEmbedding(10, 4, output="complex")
    cplx.load_state_dict(pair.state_dict())
    got = cplx(ids)
    assert got.dtype == torch.complex64 and torch.equal(got.real, real)
    assert torch.equal(got.imag, imag)
    assert set(pair.state_dict()) == {"amplitude", "frequency", "phase"}
    _round_trip(concat, pt.ComplexOrderEmbedding(10, 4), ids)
    double = concat.double()
    assert double.amplitude.dtype == torch.float64 and double(ids).dtype == torch.float64
    # nn.Embedding's init, N(0, 1), as the authors' three tables
    big = pt.ComplexOrderEmbedding(400, 64)
    for t in (big.amplitude, big.frequency, big.phase):
        t = t.detach()
        assert abs(float(t.std()) - 1) < 0.02 and abs(float(t.mean())) < 0.02


def test_complex_order_refuses_bad_arguments_by_name(path):
    module = pt.ComplexOrderEmbedding(10, 4)
    for call, error, match in (
        (lambda: module(torch.tensor([[1.0, 2.0]])), TypeError, "input_ids"),
        (lambda: module(torch.tensor([[1, 10]])), ValueError, "input_ids must be in 0 .. 9"),
        (lambda: module(torch.tensor([[-1, 0]])), ValueError, "input_ids must be in 0 .. 9"),
        (lambda: module(torch.tensor(3)), ValueError, "positions must be given"),
        (lambda: module(torch.tensor([[1, 2]]), torch.arange(3)), ValueError, "positions"),
        (lambda: module(torch.tensor([[1, 2]]), [1, 2]), TypeError, "positions"),
        (lambda: module(torch.tensor([[1, 2]]), torch.tensor([1.0, float("nan")])), ValueError,
         "positions"),
    ):  # fmt: skip
        with pytest.raises(error, match=match):
            call()
    for kwargs, error, name in ((dict(vocab_size=0, dim=2), ValueError, "vocab_size"),
                                (dict(vocab_size=2, dim=True), TypeError, "dim")):  # fmt: skip
        with pytest.raises(error, match=name):
            pt.ComplexOrderEmbedding(**kwargs)
    with pytest.raises(ValueError, match="output"):
        pt.ComplexOrderEmbedding(2, 2, output="real")


# -- KerpleBias ------------------------------------------------------------------------------------


def _kerple_by_hand(r1, r2, kind, q_len, k_len, q_offset, causal):
    """The paper's kernels, -r1 log(1 + r2 |i - j|) and -r1 |i - j| ** r2, in float64."""
    i = torch.arange(q_len, dtype=torch.float64)[:, None] + q_offset
    j = torch.arange(k_len, dtype=torch.float64)[None, :]
    d = (i - j).abs()
    a, b = r1[:, None, None], r2[:, None, None]
    values = -a * torch.log(1 + b * d) if kind == "log" else -a * d**b
    return torch.where(j <= i, values, INF) if causal else values


_SHAPES = [(6, 6, None), (1, 9, None), (3, 8, 2), (4, 4, 0)]  # q_len, k_len, q_offset


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["log", "power"])
@pytest.mark.parametrize("causal", [True, False])
def test_kerple_equals_posenc_and_the_papers_kernel(dtype, kind, causal, path):
    torch.manual_seed(5)
    module = pt.KerpleBias(3, kind=kind, causal=causal).to(dtype)
    for q_len, k_len, q_offset in _SHAPES:
        module.zero_grad()
        scores = torch.randn(2, 3, q_len, k_len, dtype=dtype, generator=_gen(q_len))
        out = module(scores, q_offset=q_offset)
        assert out.dtype == dtype
        offset = k_len - q_len if q_offset is None else q_offset
        direct = kerple_bias(module.r1.detach(), module.r2.detach(), q_len, k_len, kind=kind,
                             causal=causal, q_offset=q_offset, dtype=dtype)  # fmt: skip
        if not path:
            assert torch.equal(out, scores + direct)
        bias = module.bias(q_len, k_len, q_offset=q_offset, dtype=dtype)
        assert torch.equal(out, scores + bias)
        r1 = module.r1.detach().double().requires_grad_()
        r2 = module.r2.detach().double().requires_grad_()
        hand = _kerple_by_hand(r1, r2, kind, q_len, k_len, offset, causal)
        what = f"kerple {kind} {dtype} {_PATHS[path]}"
        _close(bias, hand, dtype, what)
        _loss(out, 7).backward()
        _loss(scores.double() + hand, 7).backward()
        _close(module.r1.grad, r1.grad, dtype, what + " dr1", grad=True)
        _close(module.r2.grad, r2.grad, dtype, what + " dr2", grad=True)


@pytest.mark.parametrize("kind", ["log", "power"])
def test_kerple_draws_and_clamps_as_the_authors(kind):
    torch.manual_seed(6)
    module = pt.KerpleBias(4000, kind=kind)
    top1, top2 = (2.0, 1.0) if kind == "log" else (1.0, 2.0)
    for p, top in ((module.r1.detach(), top1), (module.r2.detach(), top2)):
        assert 0 <= float(p.min()) and float(p.max()) < top
        assert abs(float(p.mean()) - top / 2) < 0.03 * top  # uniform in [0, top)
    small = pt.KerpleBias(3, kind=kind)
    with torch.no_grad():
        small.r1.copy_(torch.tensor([-1.0, 0.001, 0.5]))
        small.r2.copy_(torch.tensor([0.5, 3.0, 0.0]))
    small.bias(4)
    assert small.r1.tolist() == pytest.approx([0.01, 0.01, 0.5])
    want_r2 = [0.5, 2.0 if kind == "power" else 3.0, 0.01]
    assert small.r2.tolist() == pytest.approx(want_r2)
    with torch.no_grad():
        small.r1[0] = float("nan")
    with pytest.raises(ValueError, match="r1 must not be nan"):
        small.bias(4)


def test_kerple_state_dict_casts_and_meta():
    torch.manual_seed(7)
    module = pt.KerpleBias(2, kind="power")
    scores = torch.randn(1, 2, 5, 5)
    _round_trip(module, pt.KerpleBias(2, kind="power"), scores)
    assert set(module.state_dict()) == {"r1", "r2"}
    double = pt.KerpleBias(2, kind="power")
    double.load_state_dict(module.state_dict())
    double.double()  # parameters cast; the bias in the scores' dtype still
    assert double.r1.dtype == torch.float64
    out = double(scores)
    assert out.dtype == torch.float32 and torch.equal(out, module(scores))
    out[torch.isfinite(out)].sum().backward()
    assert double.r1.grad.dtype == torch.float64
    assert module.bias(3, 4, dtype=torch.bfloat16).dtype == torch.bfloat16
    with torch.device("meta"):
        meta = pt.KerpleBias(2)
    got = meta(torch.empty(3, 2, 5, 7, device="meta", dtype=torch.float16))
    assert got.device.type == "meta" and got.shape == (3, 2, 5, 7) and got.dtype == torch.float16
    assert meta.bias(5, 7).device.type == "meta"
    meta.to_empty(device="cpu")
    meta.reset_parameters()
    assert torch.isfinite(meta(torch.zeros(1, 2, 3, 3))).any()


def _bias_module_errors(module, n_heads):
    return [
        (lambda: module(torch.zeros(1, n_heads, 3, 3, dtype=torch.long)), TypeError, "scores"),
        (lambda: module(np.zeros((1, n_heads, 3, 3))), TypeError, "scores"),
        (lambda: module(torch.zeros(1, n_heads + 1, 3, 3)), ValueError, "scores"),
        (lambda: module(torch.zeros(n_heads, 3, 3)), ValueError, "scores"),
        (lambda: module(torch.zeros(1, n_heads, 0, 3)), ValueError, "scores"),
        (lambda: module(torch.zeros(1, n_heads, 4, 3)), ValueError, "q_offset"),
        (lambda: module(torch.zeros(1, n_heads, 3, 3), q_offset=1.5), TypeError, "q_offset"),
        (lambda: module(torch.zeros(1, n_heads, 3, 3), q_offset=2**70), ValueError, "q_offset"),
        (lambda: module.bias(0), ValueError, "q_len"),
        (lambda: module.bias(3, 0), ValueError, "k_len"),
        (lambda: module.bias(3.0), TypeError, "q_len"),
        (lambda: module.bias(3, dtype=torch.int32), TypeError, "dtype"),
        (lambda: module.bias(3, dtype="float32"), TypeError, "dtype"),
        (lambda: module.bias(3, device=3), TypeError, "device"),
        (lambda: module.bias(3, device="no-such-device"), ValueError, "device"),
    ]


@pytest.mark.parametrize(
    "make, n_heads",
    [
        (lambda: pt.KerpleBias(2), 2),
        (lambda: pt.SandwichBias(2, 8), 2),
        (lambda: pt.FireBias(2, hidden=4), 2),
    ],  # fmt: skip
    ids=["kerple", "sandwich", "fire"],
)
def test_bias_call_arguments_are_refused_by_name_on_both_paths(make, n_heads, path):
    for call, error, match in _bias_module_errors(make(), n_heads):
        with pytest.raises(error, match=match):
            call()


@pytest.mark.parametrize(
    "make, error, name",
    [
        (lambda: pt.KerpleBias(0), ValueError, "n_heads"),
        (lambda: pt.KerpleBias(2.0), TypeError, "n_heads"),
        (lambda: pt.KerpleBias(2, kind="exp"), ValueError, "kind"),
        (lambda: pt.KerpleBias(2, causal=1), TypeError, "causal"),
        (lambda: pt.KerpleBias(2, eps=0), ValueError, "eps"),
        (lambda: pt.KerpleBias(2, kind="power", eps=3), ValueError, "eps"),
        (lambda: pt.SandwichBias(0, 8), ValueError, "n_heads"),
        (lambda: pt.SandwichBias(2, 7), ValueError, "dim"),
        (lambda: pt.SandwichBias(2, 2**17), ValueError, "dim"),
        (lambda: pt.SandwichBias(2, 8, causal="yes"), TypeError, "causal"),
        (lambda: pt.FireBias(0), ValueError, "n_heads"),
        (lambda: pt.FireBias(2, hidden=0), ValueError, "hidden"),
        (lambda: pt.FireBias(2, init_c=float("nan")), ValueError, "init_c"),
        (lambda: pt.FireBias(2, init_L=-1.0), ValueError, "init_L"),
        (lambda: pt.FireBias(2, eps=0.0), ValueError, "eps"),
        (lambda: pt.FireBias(2, causal=None), TypeError, "causal"),
        (lambda: pt.CoPE(0, 4, 8), ValueError, "n_heads"),
        (lambda: pt.CoPE(2, 0, 8), ValueError, "head_dim"),
        (lambda: pt.CoPE(2, 4, 0), ValueError, "max_positions"),
        (lambda: pt.CoPE(2, 4, 8, layout="bsdh"), ValueError, "layout"),
        (lambda: pt.CoPE(2, 4, 8, causal=0), TypeError, "causal"),
        (lambda: pt.SinusoidalEmbedding(7), ValueError, "dim"),
        (lambda: pt.SinusoidalEmbedding(8, base=0), ValueError, "base"),
        (lambda: pt.SinusoidalEmbedding(8, layout="sin"), ValueError, "layout"),
    ],
)
def test_every_constructor_argument_is_checked_by_name(make, error, name):
    with pytest.raises(error, match=name):
        make()


# -- SandwichBias -------------------------------------------------------------------------------


def _sandwich_by_hand(n_heads, dim, q_len, k_len, q_offset, causal):
    """sum_k cos((i - j) 10000 ** (-2k / d')) - d'/2, over (h + 1) * 8 / heads."""
    i = torch.arange(q_len, dtype=torch.float64)[:, None] + q_offset
    j = torch.arange(k_len, dtype=torch.float64)[None, :]
    k = torch.arange(1, dim // 2 + 1, dtype=torch.float64)
    angles = (i - j)[..., None] * 10000.0 ** (-2 * k / dim)
    base = torch.cos(angles).sum(-1) - dim / 2
    scale = torch.arange(1, n_heads + 1, dtype=torch.float64)[:, None, None] * 8 / n_heads
    values = base / scale
    return torch.where(j <= i, values, INF) if causal else values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_sandwich_equals_posenc_and_the_papers_formula(dtype, causal):
    module = pt.SandwichBias(4, 32, causal=causal)
    for q_len, k_len, q_offset in _SHAPES:
        scores = torch.randn(2, 4, q_len, k_len, dtype=dtype, generator=_gen(q_len))
        scores.requires_grad_()
        out = module(scores, q_offset=q_offset)
        direct = sandwich_bias(4, q_len, k_len, dim=32, causal=causal, q_offset=q_offset,
                               dtype=dtype)  # fmt: skip
        assert torch.equal(out, scores + direct)
        offset = k_len - q_len if q_offset is None else q_offset
        hand = _sandwich_by_hand(4, 32, q_len, k_len, offset, causal)
        bias = module.bias(q_len, k_len, q_offset=q_offset, dtype=dtype)
        assert torch.equal(bias, direct)
        _close(bias, hand, dtype, f"sandwich {dtype}")
        _loss(out, 8).backward()  # the scores' gradient passes through
        g = torch.randn(out.shape, generator=_gen(8), dtype=torch.float64)
        assert torch.equal(scores.grad, torch.where(torch.isfinite(out), g, 0.0).to(dtype))
    assert module.state_dict() == {} and list(module.parameters()) == []
    _round_trip(module, pt.SandwichBias(4, 32, causal=causal), torch.zeros(1, 4, 3, 3))
    with torch.device("meta"):
        meta = pt.SandwichBias(4, 32)
    assert meta(torch.empty(1, 4, 3, 5, device="meta")).device.type == "meta"
    assert module.double()(torch.zeros(1, 4, 2, 2)).dtype == torch.float32  # the scores'


# -- FireBias -----------------------------------------------------------------------------------


def _fire_by_hand(params, q_len, k_len, q_offset, causal, eps):
    """The authors' module (the paper's appendix code) written out, over
    queries at q_offset + i: the MLP of log(|c d| + 1) / (log(|c max(i, L)|
    + 1) + eps), L = |L_multiplier * init_L|."""
    w1, b1, w2, b2, c, multiplier, init_l = params
    qpos = torch.arange(q_len, dtype=torch.float64) + q_offset
    keys = torch.arange(k_len, dtype=torch.float64)
    rel = qpos[:, None] - keys[None, :]
    threshold = torch.abs(multiplier * init_l)
    normalizer = torch.max(qpos, threshold)[:, None]
    x = torch.log(torch.abs(c * rel) + 1) / (torch.log(torch.abs(c * normalizer) + 1) + eps)
    hidden = torch.relu(x[..., None] @ w1.T + b1)
    values = (hidden @ w2.T + b2).permute(2, 0, 1)
    return torch.where(rel >= 0, values, INF) if causal else values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_fire_equals_posenc_and_the_papers_module(dtype, causal, path):
    torch.manual_seed(9)
    # a threshold of 3.5: queries before it and past it
    module = pt.FireBias(3, hidden=8, causal=causal, init_c=-0.3, init_L=3.5).to(dtype)
    with torch.no_grad():
        module.L_multiplier.fill_(1.25)
    named = {"mlp.0.weight": module.mlp[0].weight, "mlp.0.bias": module.mlp[0].bias,
             "mlp.2.weight": module.mlp[2].weight, "mlp.2.bias": module.mlp[2].bias,
             "c": module.c, "L_multiplier": module.L_multiplier}  # fmt: skip
    for q_len, k_len, q_offset in _SHAPES + [(2, 12, 6)]:
        module.zero_grad()
        scores = torch.randn(2, 3, q_len, k_len, dtype=dtype, generator=_gen(q_len))
        out = module(scores, q_offset=q_offset)
        assert out.dtype == dtype
        threshold = torch.abs(module.L_multiplier * module.init_L).detach()
        direct = fire_bias(*(p.detach() for p in list(named.values())[:5]), threshold, q_len,
                           k_len, causal=causal, q_offset=q_offset, dtype=dtype)  # fmt: skip
        if not path:
            assert torch.equal(out, scores + direct)
        hand_params = {k: p.detach().double().requires_grad_() for k, p in named.items()}
        offset = k_len - q_len if q_offset is None else q_offset
        hand = _fire_by_hand((*hand_params.values(), module.init_L.double()), q_len, k_len,
                             offset, causal, 1e-6)  # fmt: skip
        what = f"fire {dtype} {_PATHS[path]}"
        bias = module.bias(q_len, k_len, q_offset=q_offset, dtype=dtype)
        assert torch.equal(out, scores + bias)
        _close(bias, hand, dtype, what)
        _loss(out, 10).backward()
        _loss(scores.double() + hand, 10).backward()
        for name, p in named.items():
            _close(p.grad, hand_params[name].grad, dtype, f"{what} d{name}", grad=True)


def test_fire_init_state_dict_and_the_authors_keys():
    torch.manual_seed(10)
    module = pt.FireBias(4)
    assert module.mlp[0].weight.shape == (32, 1) and module.mlp[2].weight.shape == (4, 32)
    assert float(module.c.detach()) == pytest.approx(0.1)
    assert float(module.L_multiplier.detach()) == 1.0
    assert float(module.init_L) == 512.0 and not any(
        p is module.init_L for p in module.parameters()
    )
    assert float(module.threshold().detach()) == 512.0 and module.eps == 1e-6
    # the authors' module's state_dict, by its keys, loads as it is
    authors = {"mlp.0.weight": torch.randn(32, 1), "mlp.0.bias": torch.randn(32),
               "mlp.2.weight": torch.randn(4, 32), "mlp.2.bias": torch.randn(4),
               "c": torch.tensor(0.2), "init_L": torch.tensor(64.0),
               "L_multiplier": torch.tensor(0.5)}  # fmt: skip
    module.load_state_dict(authors)
    assert float(module.threshold().detach()) == 32.0
    scores = torch.zeros(1, 4, 6, 40)
    _round_trip(module, pt.FireBias(4), scores)
    double = pt.FireBias(4)
    double.load_state_dict(module.state_dict())
    double.double()
    assert double.c.dtype == torch.float64 and double.init_L.dtype == torch.float64
    out = double(scores)
    assert out.dtype == torch.float32 and torch.equal(out, module(scores))
    module.reset_parameters()
    assert float(module.c.detach()) == pytest.approx(0.1)
    assert float(module.L_multiplier.detach()) == 1.0
    with torch.device("meta"):
        meta = pt.FireBias(4)
    assert meta(torch.empty(2, 4, 3, 9, device="meta")).shape == (2, 4, 3, 9)


# -- CoPE ------------------------------------------------------------------------------------------


def _cope_by_hand(query, logits, pos_emb, causal, q_offset):
    """The authors' CoPE (the paper's appendix) on logits whose future keys
    are masked with -inf (as their attention does when causal), its output
    added to the logits, the future keys -inf in the result."""
    q_len, k_len = logits.shape[-2:]
    i = torch.arange(q_len)[:, None] + q_offset
    future = torch.arange(k_len)[None, :] > i
    masked = logits.masked_fill(future, INF) if causal else logits
    gates = torch.sigmoid(masked)
    pos = gates.flip(-1).cumsum(dim=-1).flip(-1)
    pos = pos.clamp(max=pos_emb.shape[-1] - 1)
    pos_ceil, pos_floor = pos.ceil().long(), pos.floor().long()
    logits_int = torch.matmul(query, pos_emb)
    w = pos - pos_floor
    bias = logits_int.gather(-1, pos_ceil) * w + logits_int.gather(-1, pos_floor) * (1 - w)
    out = logits + bias
    return out.masked_fill(future, INF) if causal else out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_cope_equals_posenc_and_the_authors_module(dtype, causal, path):
    torch.manual_seed(11)
    module = pt.CoPE(2, 8, 5, causal=causal).to(dtype)  # 5 positions: some clipped
    with torch.no_grad():
        module.pos_emb.normal_()
    for q_len, k_len, q_offset in _SHAPES:
        module.zero_grad()
        query = torch.randn(3, 2, q_len, 8, dtype=dtype, requires_grad=True)
        logits = (2 * torch.randn(3, 2, q_len, k_len, dtype=dtype)).requires_grad_()
        out = module(query, logits, q_offset=q_offset)
        assert out.dtype == dtype and out.shape == logits.shape
        offset = k_len - q_len if q_offset is None else q_offset
        direct = cope_bias(query.detach(), logits.detach(), module.pos_emb.detach(),
                           causal=causal, q_offset=q_offset)  # fmt: skip
        want = logits.detach() + direct
        if causal:
            want = want.masked_fill(torch.arange(k_len) > torch.arange(q_len)[:, None] + offset,
                                    INF)  # fmt: skip
        if not path:
            assert torch.equal(out, want)
        leaves = [t.detach().double().requires_grad_() for t in (query, logits, module.pos_emb)]
        hand = _cope_by_hand(*leaves, causal, offset)
        what = f"cope {dtype} {_PATHS[path]}"
        _close(out, hand, dtype, what, sums=True)
        _loss(out, 12).backward()
        _loss(hand, 12).backward()
        for name, got, leaf in zip(("query", "attn_logits", "pos_emb"),
                                   (query, logits, module.pos_emb), leaves):  # fmt: skip
            _close(got.grad, leaf.grad, dtype, f"{what} d{name}", grad=True)


def test_cope_layouts_state_and_the_authors_parameter():
    torch.manual_seed(12)
    module = pt.CoPE(2, 4, 6)
    assert module.pos_emb.shape == (1, 4, 6) and not module.pos_emb.any()  # zeros, as theirs
    with torch.no_grad():
        module.pos_emb.normal_()
    query = torch.randn(1, 2, 5, 4)
    logits = torch.randn(1, 2, 5, 5)
    out = module(query, logits)
    bshd = pt.CoPE(2, 4, 6, layout="bshd")
    bshd.load_state_dict(module.state_dict())  # the authors' (1, head_dim, npos_max) as it is
    assert torch.equal(bshd(query.transpose(1, 2), logits), out)
    _round_trip(module, pt.CoPE(2, 4, 6), query, logits)
    double = pt.CoPE(2, 4, 6)
    double.load_state_dict(module.state_dict())
    double.double()
    assert double.pos_emb.dtype == torch.float64
    got = double(query, logits)  # float64 position logits, added in the logits' dtype
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, out, rtol=1e-6, atol=1e-6)
    bf = module(query.bfloat16(), logits.bfloat16())
    assert bf.dtype == torch.bfloat16
    module.reset_parameters()
    assert not module.pos_emb.any()
    with torch.device("meta"):
        meta = pt.CoPE(2, 4, 6)
    got = meta(torch.empty(1, 2, 5, 4, device="meta"), torch.empty(1, 2, 5, 7, device="meta"))
    assert got.device.type == "meta" and got.shape == (1, 2, 5, 7)


def test_cope_refuses_bad_arguments_by_name(path):
    module = pt.CoPE(2, 4, 6)
    q, a = torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 3)
    for call, error, match in (
        (lambda: module(q.long(), a), TypeError, "query"),
        (lambda: module(q, a.numpy()), TypeError, "attn_logits"),
        (lambda: module(q[0], a), ValueError, "query"),
        (lambda: module(torch.zeros(1, 3, 3, 4), a), ValueError, "query"),
        (lambda: module(torch.zeros(1, 2, 3, 5), a), ValueError, "query"),
        (lambda: module(q, torch.zeros(1, 2, 4, 3)), ValueError, "attn_logits"),
        (lambda: module(q, torch.zeros(1, 2, 3, 0)), ValueError, "attn_logits"),
        (lambda: module(q, a, q_offset=0.5), TypeError, "q_offset"),
        (lambda: module(q, torch.full((1, 2, 3, 3), float("nan"))), ValueError, "attn_logits"),
        (lambda: module(q, torch.full((1, 2, 3, 3), float("inf"))), ValueError, "attn_logits"),
        (lambda: module(torch.full((1, 2, 3, 4), float("inf")), a), ValueError, "query"),
    ):  # fmt: skip
        with pytest.raises(error, match=match):
            call()


# -- .to(dtype) as nn.Module users expect ----------------------------------------------------------


def test_casts_reach_every_parameter_and_buffer():
    modules = [pt.LearnedPositionEmbedding(4, 2), pt.ComplexOrderEmbedding(4, 2),
               pt.KerpleBias(2), pt.FireBias(2, hidden=4), pt.CoPE(2, 4, 4)]  # fmt: skip
    for module in modules:
        for cast in (lambda m: m.to(torch.float64), lambda m: m.double()):
            cast(module)
            tensors = list(module.parameters()) + list(module.buffers())
            assert tensors and all(t.dtype == torch.float64 for t in tensors), module
        module.float()
        assert all(p.dtype == torch.float32 for p in module.parameters())


# -- the device path: the same numbers as posenc's -------------------------------------------------


def test_device_path_gives_the_cpu_paths_numbers(monkeypatch):
    torch.manual_seed(13)
    cases = [
        (pt.KerpleBias(3, kind="log"), (torch.randn(1, 3, 5, 9),), {}),
        (pt.KerpleBias(3, kind="power", causal=False), (torch.randn(1, 3, 5, 9),), {}),
        (pt.FireBias(3, hidden=6, init_L=4.0), (torch.randn(1, 3, 5, 9),), {"q_offset": 2}),
        (pt.CoPE(3, 4, 7), (torch.randn(2, 3, 5, 4), 3 * torch.randn(2, 3, 5, 9)), {}),
        (pt.ComplexOrderEmbedding(9, 4), (torch.randint(0, 9, (2, 6)),), {}),
    ]
    with torch.no_grad():
        cases[3][0].pos_emb.normal_()
    for module, args, kwargs in cases:
        module.double()
        got = []
        for forced in (False, True):
            monkeypatch.setattr(posenc._torch, "force_device_path", forced)
            with torch.no_grad():
                got.append(module(*(a.double() if a.is_floating_point() else a for a in args),
                                  **kwargs))  # fmt: skip
        finite = torch.isfinite(got[0])
        assert torch.equal(finite, torch.isfinite(got[1]))
        diff = float((got[0][finite] - got[1][finite]).abs().max())
        MEASURED[f"device path {type(module).__name__}"] = diff
        torch.testing.assert_close(got[1], got[0], rtol=1e-13, atol=1e-13)


# -- x-transformers, where it is installed ---------------------------------------------------------


def test_x_transformers_cope_sinusoid_and_absolute_embedding_agree():
    xt = require("x_transformers.x_transformers")
    torch.manual_seed(14)
    # CoPE: x-transformers' pos_emb is (max_pos, dim), the transpose of the authors'
    theirs = xt.CoPE(dim=8, heads=2, max_pos=6).double()
    ours = pt.CoPE(2, 8, 6).double()
    with torch.no_grad():
        ours.pos_emb.normal_()
        theirs.pos_emb.copy_(ours.pos_emb[0].T)
    query = torch.randn(2, 2, 7, 8, dtype=torch.float64)
    logits = 2 * torch.randn(2, 2, 7, 7, dtype=torch.float64)
    future = torch.ones(7, 7, dtype=torch.bool).triu(1)
    # its Attend masks the future with -finfo.max before CoPE: a gate of 0
    masked = logits.masked_fill(future, -torch.finfo(torch.float64).max)
    with torch.no_grad():
        want = logits + theirs(query, masked)
        got = ours(query, logits)
    MEASURED["x-transformers CoPE"] = float((got - want)[~future.expand_as(got)].abs().max())
    torch.testing.assert_close(got[..., ~future], want[..., ~future], rtol=1e-13, atol=1e-13)
    assert torch.isneginf(got[..., future]).all()
    # ScaledSinusoidalEmbedding: the concat layout, times its learned scale (float32 angles)
    scaled = xt.ScaledSinusoidalEmbedding(16)
    x = torch.zeros(1, 50, 16)
    with torch.no_grad():
        want = scaled(x)
    got = pt.SinusoidalEmbedding(16, layout="concat")(50) * scaled.scale
    MEASURED["x-transformers ScaledSinusoidalEmbedding"] = float((got - want).abs().max())
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    # AbsolutePositionalEmbedding: an nn.Embedding scaled by dim ** -0.5
    absolute = xt.AbsolutePositionalEmbedding(16, 20)
    learned = pt.LearnedPositionEmbedding(20, 16, init=absolute.emb.weight)
    with torch.no_grad():
        assert torch.equal(learned(torch.arange(12)) * 16**-0.5, absolute(x[:, :12]))


def test_the_embeddings_on_the_meta_device_give_their_shapes():
    with torch.device("meta"):
        sin = pt.SinusoidalEmbedding(8)
        learned = pt.LearnedPositionEmbedding(10, 8)
        complex_order = pt.ComplexOrderEmbedding(10, 4)
    ids = torch.zeros(2, 5, dtype=torch.long, device="meta")
    cases = [(sin(5), (5, 8)), (sin(ids), (2, 5, 8)), (learned(ids), (2, 5, 8)),
             (learned(torch.arange(3)), (3, 8)), (complex_order(ids), (2, 5, 8))]  # fmt: skip
    for got, shape in cases:
        assert got.device.type == "meta" and got.shape == shape
    with pytest.raises(TypeError, match="positions"):
        learned(torch.zeros(3, device="meta"))
    learned.to_empty(device="cpu")
    learned.reset_parameters()
    assert learned(torch.arange(10)).shape == (10, 8)


def test_learned_takes_lists_and_reads_no_model_rule_for_a_bare_table(tmp_path):
    rows = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    m = pt.LearnedPositionEmbedding(3, 2, init=rows, dtype=torch.float64)
    assert m.weight.tolist() == rows
    # an .npy beside a RoBERTa config is the table as saved: its rows from 0
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    np.save(tmp_path / "cut.npy", np.array(rows))
    m = pt.LearnedPositionEmbedding(3, 2, init=str(tmp_path / "cut.npy"), dtype=torch.float64)
    assert m.weight.tolist() == rows
    with pytest.raises(ValueError, match="first_row"):
        pt.LearnedPositionEmbedding(3, 2, init="random", first_row=1)


def test_complex_order_in_bfloat16_through_float32():
    torch.manual_seed(15)
    module = pt.ComplexOrderEmbedding(6, 4, output="pair").bfloat16()
    ids = torch.tensor([[1, 5, 0]])
    got = module(ids)
    tables = [t.detach().double() for t in (module.amplitude, module.frequency, module.phase)]
    want = _complex_order_by_hand(ids, torch.arange(1, 4), *tables)
    for g, w in zip(got, want):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.double(), w, rtol=2**-8 * 1.001, atol=1e-30)  # a rounding


# -- what the modules' fuzz (tests/fuzz_modules.py) found ------------------------------------------


def test_sinusoid_refuses_a_length_it_cannot_make():
    module = pt.SinusoidalEmbedding(8)
    for n in (2**45, 2**70):  # (n, 8) float32: past any memory
        with pytest.raises(ValueError, match="positions"):
            module(n)
    with torch.device("meta"):
        meta = pt.SinusoidalEmbedding(8)
    with pytest.raises(ValueError, match="positions"):
        meta(2**70)
    assert meta(5).shape == (5, 8) and meta(5).device.type == "meta"


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: pt.KerpleBias(2**40), "n_heads"),
        (lambda: pt.KerpleBias(2**70), "n_heads"),
        (lambda: pt.FireBias(2**40), "n_heads"),
        (lambda: pt.FireBias(2, hidden=2**40), "hidden"),
        (lambda: pt.FireBias(2**70, hidden=2), "n_heads"),
    ],
)
def test_bias_modules_refuse_parameters_past_memory_by_name(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_bias_modules_on_the_meta_device_trace_cpu_scores():
    """A module whose parameters are on the meta device has no values: the
    scores' shape and dtype on the meta device, as CoPE's and the
    embeddings'; Sandwich holds nothing and adds its bias on the CPU."""
    scores = torch.randn(2, 3, 4, 6, dtype=torch.float64)
    for module in (pt.KerpleBias(3), pt.FireBias(3, hidden=4)):
        out = module.to("meta")(scores)
        assert out.device.type == "meta" and out.shape == scores.shape
        assert out.dtype == torch.float64
    sandwich = pt.SandwichBias(3, 8)
    got = sandwich.to("meta")(scores)
    want = scores + sandwich_bias(3, 4, 6, dim=8, dtype=torch.float64)
    assert got.device.type == "cpu" and torch.equal(got, want)


def test_kerple_refuses_infinite_parameters_on_both_paths(path):
    for kind, name in (("log", "r1"), ("log", "r2"), ("power", "r1")):
        module = pt.KerpleBias(2, kind=kind)
        with torch.no_grad():
            getattr(module, name)[1] = float("inf")
        with pytest.raises(ValueError, match=f"{name} must be finite"):
            module.bias(3)
    # the authors' clamp: -inf raised to eps, the power kernel's exponent lowered to 2
    module = pt.KerpleBias(2, kind="power")
    with torch.no_grad():
        module.r1[0] = float("-inf")
        module.r2[1] = float("inf")
    got = module.bias(3, dtype=torch.float64)
    r1, r2 = module.r1.detach().double(), module.r2.detach().double()
    assert float(r1[0]) == pytest.approx(0.01) and float(r2[1]) == 2.0
    _close(got, _kerple_by_hand(r1, r2, "power", 3, 3, 0, True), torch.float64, "kerple clamped")


def test_complex_order_refuses_tables_not_finite_on_both_paths(path):
    module = pt.ComplexOrderEmbedding(5, 3)
    ids = torch.tensor([[0, 2, 2]])
    for name in ("amplitude", "frequency", "phase"):
        for bad in (float("nan"), float("inf")):
            module.reset_parameters()
            with torch.no_grad():
                getattr(module, name)[2, 1] = bad
            with pytest.raises(ValueError, match=f"{name} must be finite"):
                module(ids)
    # a row no token uses may hold anything
    module.reset_parameters()
    with torch.no_grad():
        module.phase[4] = float("nan")
    assert torch.isfinite(module(ids)).all()


def test_complex_order_refuses_positions_broadcast_past_the_ids(path):
    module = pt.ComplexOrderEmbedding(5, 3)
    ids = torch.tensor([[0, 1, 2, 3]])
    for positions in (torch.zeros(2, 4), torch.zeros(3, 1, 4), torch.zeros(5)):
        with pytest.raises(ValueError, match="positions"):
            module(ids, positions)
        with pytest.raises(ValueError, match="positions"):
            module(torch.tensor(1), positions)
    with pytest.raises(ValueError, match="positions"):
        module.to("meta")(ids, torch.zeros(2, 4))
    assert module(ids, torch.tensor(3)).shape == (1, 4, 6)  # to the ids' shape: taken


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_learned_refuses_a_table_its_dtype_cannot_hold(dtype):
    table = np.zeros((4, 2))
    table[3, 1] = 4.0 * float(torch.finfo(dtype).max)  # finite, past the dtype's largest
    with pytest.raises(ValueError, match="init"):
        pt.LearnedPositionEmbedding(4, 2, init=table, dtype=dtype)
    # rows not taken may hold it; float64 holds it
    m = pt.LearnedPositionEmbedding(3, 2, init=table, dtype=dtype)
    assert torch.equal(m.weight.detach(), torch.zeros(3, 2, dtype=dtype))
    m = pt.LearnedPositionEmbedding(4, 2, init=table, dtype=torch.float64)
    assert float(m.weight[3, 1]) == table[3, 1]


def test_kerple_refuses_an_eps_its_dtype_rounds_to_zero_on_both_paths(path):
    module = pt.KerpleBias(2, eps=1e-8).half()  # 1e-8 is 0 in float16
    with torch.no_grad():
        module.r1.copy_(torch.tensor([0.5, 1.0]))
        module.r2.copy_(torch.tensor([0.25, 0.5]))
    want = module.bias(3, dtype=torch.float64)  # nothing to clamp: the kernel as it is
    r1, r2 = module.r1.detach().double(), module.r2.detach().double()
    _close(want, _kerple_by_hand(r1, r2, "log", 3, 3, 0, True), torch.float64, "kerple half")
    for name, low in (("r1", -1.0), ("r1", 0.0), ("r2", 0.0)):  # 0: not below eps's 0
        with torch.no_grad():
            getattr(module, name)[0] = low
        with pytest.raises(ValueError, match=f"{name} must be > 0: eps = 1e-08 is 0 in "
                                             "torch.float16"):  # fmt: skip
            module.bias(3)
        with torch.no_grad():
            getattr(module, name)[0] = 0.5
