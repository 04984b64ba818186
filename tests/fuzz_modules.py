"""A bounded fuzzer of posenc.torch's modules.

    python tests/fuzz_api.py --surfaces modules --seconds 30 [--seed 0] [--verbose]

Each round builds one of the modules (RotaryEmbedding from a head
dimension, or from one of transformers' config classes in the forms their
checkpoints carry; ALiBi, T5RelativeBias, XLPositionTerm,
DebertaRelativeBias; SinusoidalEmbedding, LearnedPositionEmbedding,
ComplexOrderEmbedding, KerpleBias, SandwichBias, FireBias, CoPE, on the
CPU path and the device path forced on the CPU) or calls apply_rotary,
with constructor arguments, parameters and inputs drawn valid or awkward
one way: wrong types, bool where an int is expected, NaN and infinities,
zero, negative and huge sizes, odd dimensions, float16 / bfloat16 / bool /
small-integer dtypes, the meta device, positions and offsets up to 2**62,
empty and non-contiguous tensors, mismatched shapes, tables of the wrong
shape or past their dtype's range.  A call must give the oracle's result
(a NumPy float64 formula written here after the paper, posenc.reference's
NumPy twin, or transformers' own rotary module, stateful calls in the same
order) within its dtype's tolerance, or raise TypeError or ValueError
where the input is refused; an awkward input the oracle says is refused
must be refused, and any other exception (or a NumPy RuntimeWarning) is a
failure.  Failures are collected in tests/fuzz_api.py's Failures, one line
per (module, perturbation, what happened); the exit status is 1 if there is
any.  transformers is used when installed (its configs and modules).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuzz_api  # noqa: E402

from posenc import reference  # noqa: E402

SURFACE = "modules"

# what a case may do: give a value (checked), be refused (TypeError or
# ValueError), either of the two
VALUE, REFUSED, EITHER = "value", "refused", "either"


class Case:
    """One call: `run()` gives the result, `check(result)` None or what is
    wrong with it, `expect` whether it must give a value, be refused, or
    either."""

    def __init__(self, name, perturbation, run, check=None, expect=VALUE):
        self.name, self.perturbation, self.run = name, perturbation, run
        self.check = check or (lambda result: None)
        self.expect = expect


@contextlib.contextmanager
def _device_path(forced):
    """posenc.torch's device path (torch's own ops) forced on the CPU, or not."""
    from posenc import _torch  # (imports torch)

    was = _torch.force_device_path
    _torch.force_device_path = forced
    try:
        yield
    finally:
        _torch.force_device_path = was


def _pick(rng, items):
    return items[int(rng.integers(len(items)))]


def _tol(torch, dtype):
    return {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-6,
            torch.float64: 1e-12}[dtype]  # fmt: skip


def _compare(torch, got, want, atol, what="values"):
    """None if `got` (a tensor) holds `want` (float64 NumPy) within atol
    (infinities equal), else why not."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.device.type == "meta":
        return "a meta tensor for real inputs"
    g = got.detach().double().cpu().numpy()
    if not np.array_equal(np.isinf(g), np.isinf(want)) or not np.array_equal(
        np.isnan(g), np.isnan(want)
    ):
        return f"{what}: infinities or NaN where the oracle has none (or not where it has)"
    finite = np.isfinite(want)
    if finite.any():
        err = float(np.abs(g[finite] - want[finite]).max())
        if not err <= atol:
            return f"{what} off by {err:.3g} (tolerance {atol:.3g})"
    if (np.isinf(want) & (np.sign(g) != np.sign(want))).any():
        return f"{what}: an infinity of the wrong sign"
    return None


def _cos_sin(positions, head, base, layout, rotary=None):
    """float64 cos and sin of the plain frequencies, written out."""
    rotary = head if rotary is None else rotary
    inv = 1.0 / base ** (np.arange(0, rotary, 2, dtype=np.float64) / rotary)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * inv
    angles = np.concatenate([angles, angles], -1) if layout == "half" else np.repeat(angles, 2, -1)
    return np.cos(angles), np.sin(angles), float(np.abs(angles).max()) if angles.size else 0.0


# -- the pools -----------------------------------------------------------------------------

_BAD_INTS = [0, -2, True, 8.0, "8", None, [8], 2**70, np.float32(8)]
_BAD_REALS = ["abc", float("nan"), float("inf"), -1.0, 0.0, True, None, [1.0], 10**400]


def _position_ids(torch, rng):
    """(perturbation, ids, expect, their values for the oracle or None)."""
    kind = _pick(
        rng,
        ["valid"] * 6
        + ["one-d", "zero-d", "empty", "huge", "negative", "strided", "dtype", "bool"]
        + ["float", "meta", "wrong-type"],
    )
    batch, seq = int(rng.integers(1, 3)), int(rng.integers(1, 6))
    values = rng.integers(0, 300, size=(batch, seq))
    expect = VALUE
    if kind == "one-d":
        values = values[0]
    elif kind == "zero-d":
        values = values[0, 0]
    elif kind == "empty":
        values = np.zeros(_pick(rng, [(0,), (2, 0), (0, 3)]), dtype=np.int64)
    elif kind == "huge":
        values = values + _pick(rng, [10**7, 2**31, 2**40, 2**53, 2**62 - 400])
    elif kind == "negative":
        values = values.copy()
        values.flat[int(rng.integers(values.size))] = -1
        expect = REFUSED
    values = np.asarray(values, dtype=np.int64)
    if kind == "dtype":
        values = values % 100
        ids = torch.tensor(values, dtype=_pick(rng, [torch.int8, torch.int16, torch.int32,
                                                     torch.uint8]))  # fmt: skip
    else:
        ids = torch.tensor(values)
    if kind == "strided":  # a view with stride 2
        ids = torch.stack([ids, ids], -1).flatten(-2)[..., ::2]
    elif kind == "bool":
        ids = ids % 2 == 1
        expect = REFUSED
    elif kind == "float":
        ids = ids.float()
        expect = REFUSED
    elif kind == "meta":
        ids = ids.to("meta")
    elif kind == "wrong-type":
        ids = _pick(rng, [ids.numpy(), ids.tolist(), None, 3])
        expect = REFUSED
    return kind, ids, expect, values if expect == VALUE and kind != "meta" else None


def _rows(torch, rng, kind, ids, expect):
    """M-RoPE's ids from 1-row ones: 3 rows of different positions, 1 row,
    or (batch, seq) as they are (transformers expands those); other shapes
    refused."""
    if not torch.is_tensor(ids) or expect == REFUSED:
        return kind, ids, expect
    how = _pick(rng, ["rows", "rows", "as is", "one row", "two rows"])
    if ids.ndim == 2 and how == "rows":
        ids = torch.stack([ids, ids // 4, (ids * 5) % 11])
    elif ids.ndim == 2 and how == "one row":
        ids = ids[None]
    elif ids.ndim == 2 and how == "two rows":
        ids = torch.stack([ids, ids])
        return f"{kind} two rows", ids, REFUSED
    if ids.ndim not in (2, 3):
        return f"{kind} {ids.ndim}-d", ids, REFUSED
    return f"{kind} {how}", ids, expect


def _float_x(torch, rng):
    """(perturbation, x, expect)."""
    kind = _pick(rng, ["valid"] * 8 + ["int", "bool", "complex", "meta", "wrong-type"])
    dtype = _pick(rng, [torch.float32, torch.float32, torch.float64, torch.float16, torch.bfloat16])
    if kind == "valid":
        return kind, torch.zeros(1, 2, dtype=dtype), VALUE
    if kind == "meta":
        return kind, torch.empty(3, dtype=dtype, device="meta"), VALUE
    if kind == "int":
        return kind, torch.zeros(1, dtype=torch.int32), REFUSED
    if kind == "bool":
        return kind, torch.zeros(1, dtype=torch.bool), REFUSED
    if kind == "complex":
        return kind, torch.zeros(1, dtype=torch.complex64), REFUSED
    return kind, np.zeros(1, np.float32), REFUSED


# -- RotaryEmbedding from a head dimension ----------------------------------------------------


def gen_rotary(torch, rng, pt):
    head = _pick(rng, [2, 4, 8, 16, 32, 128])
    base = _pick(rng, [10000.0, 500.0, 1e6, 2.0, 10000, np.float32(100.0)])
    layout = _pick(rng, ["half", "interleaved"])
    ctor = "valid"
    if rng.random() < 0.25:
        which = _pick(rng, ["head_dim", "base", "layout"])
        ctor = f"bad {which}"
        if which == "head_dim":
            head = _pick(rng, _BAD_INTS + [7])
        elif which == "base":
            base = _pick(rng, _BAD_REALS)
        else:
            layout = _pick(rng, ["x", 1, None, "HALF"])

        def build():
            return pt.RotaryEmbedding(head, base, layout=layout)

        return Case("RotaryEmbedding", ctor, build, expect=REFUSED)
    x_kind, x, x_expect = _float_x(torch, rng)
    id_kind, ids, id_expect, values = _position_ids(torch, rng)
    calls = int(rng.integers(1, 4))
    expect = REFUSED if REFUSED in (x_expect, id_expect) else VALUE

    def run():
        module = pt.RotaryEmbedding(head, base, layout=layout)
        warm = x.dtype if torch.is_tensor(x) and x.is_floating_point() else torch.float32
        for _ in range(calls - 1):  # earlier steps: the tables the last one may read
            module(torch.zeros(1, dtype=warm), torch.arange(int(rng.integers(1, 400)))[None])
        return module(x, ids)

    def check(result):
        cos, sin = result
        shape = tuple(ids.shape) + (head,)
        for t in (cos, sin):
            if tuple(t.shape) != shape or t.dtype != x.dtype:
                return f"shape {tuple(t.shape)} {t.dtype}, expected {shape} {x.dtype}"
            if t.device != x.device and not (ids.device.type == "meta" and t.device.type == "meta"):
                return f"on {t.device}, x on {x.device}"
        if values is None or x.device.type == "meta":
            return None
        want_cos, want_sin, top = _cos_sin(values, head, float(base), layout)
        if top > 2**45:  # float64's angles themselves past a radian's precision
            return None
        atol = _tol(torch, x.dtype) + top * 4e-16
        return _compare(torch, cos, want_cos, atol, "cos") or _compare(torch, sin, want_sin, atol,
                                                                       "sin")  # fmt: skip

    return Case("RotaryEmbedding", f"{x_kind}/{id_kind}", run, check, expect)


# -- RotaryEmbedding from transformers' configs -------------------------------------------------


def _configs(tf):
    """(label, make config, transformers' rotary module class or None,
    rows of its position ids, posenc refuses it, M-RoPE)."""
    from transformers.models.gemma3 import modeling_gemma3
    from transformers.models.gpt_neox import modeling_gpt_neox
    from transformers.models.llama import modeling_llama
    from transformers.models.phi3 import modeling_phi3
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
    from transformers.models.qwen2_vl import modeling_qwen2_vl
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    small = dict(hidden_size=64, num_attention_heads=4, max_position_embeddings=16)

    def llama(**rope):
        return lambda: tf.LlamaConfig(**small, rope_parameters=dict(rope_theta=10000.0, **rope))

    qwen = dict(small, num_key_value_heads=2, head_dim=16)
    return [
        ("llama", llama(rope_type="default"), modeling_llama.LlamaRotaryEmbedding, 1, False),
        ("linear", llama(rope_type="linear", factor=2.0), modeling_llama.LlamaRotaryEmbedding, 1,
         False),
        ("dynamic", llama(rope_type="dynamic", factor=2.0), modeling_llama.LlamaRotaryEmbedding,
         1, False),
        ("yarn", llama(rope_type="yarn", factor=4.0, original_max_position_embeddings=16),
         modeling_llama.LlamaRotaryEmbedding, 1, False),
        ("llama3", llama(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=8),
         modeling_llama.LlamaRotaryEmbedding, 1, False),
        ("longrope", lambda: tf.Phi3Config(
            **dict(small, max_position_embeddings=64), original_max_position_embeddings=16,
            rope_scaling={"type": "longrope", "short_factor": [1.0] * 8,
                          "long_factor": [1.5 + i for i in range(8)]}),
         modeling_phi3.Phi3RotaryEmbedding, 1, False),
        ("gemma3", lambda: tf.Gemma3TextConfig(**small, head_dim=16, sliding_window=4),
         modeling_gemma3.Gemma3RotaryEmbedding, 1, False),
        ("neox-partial", lambda: tf.GPTNeoXConfig(**small, rotary_pct=0.25),
         modeling_gpt_neox.GPTNeoXRotaryEmbedding, 1, False),
        ("qwen2_vl-rope_scaling", lambda: tf.Qwen2VLTextConfig(
            **qwen, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
         modeling_qwen2_vl.Qwen2VLRotaryEmbedding, 3, False),
        ("qwen2_5_vl", lambda: tf.Qwen2_5_VLTextConfig(**qwen, rope_parameters={
            "rope_type": "default", "rope_theta": 100.0, "mrope_section": [4, 2, 2]}),
         modeling_qwen2_5_vl.Qwen2_5_VLRotaryEmbedding, 3, False),
        ("qwen3_vl", lambda: tf.Qwen3VLTextConfig(**qwen, rope_parameters={
            "rope_type": "default", "rope_theta": 100.0, "mrope_section": [4, 2, 2],
            "mrope_interleaved": True}),
         modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding, 3, False),
        ("qwen2_5_vl-no-section", lambda: tf.Qwen2_5_VLTextConfig(**qwen),
         modeling_qwen2_5_vl.Qwen2_5_VLRotaryEmbedding, 3, True),
    ]  # fmt: skip


_BREAK_CONFIG = {
    "rope_theta nan": lambda p: p.update(rope_theta=float("nan")),
    "rope_theta -1": lambda p: p.update(rope_theta=-1.0),
    "rope_theta str": lambda p: p.update(rope_theta="1e4"),
    "rope_type unknown": lambda p: p.update(rope_type="no-such-family"),
    "factor 0": lambda p: p.update(rope_type="linear", factor=0.0),
    "factor nan": lambda p: p.update(rope_type="linear", factor=float("nan")),
    "mrope_section sum": lambda p: p.update(mrope_section=[1, 1, 1], mrope_interleaved=False),
    "mrope_section str": lambda p: p.update(mrope_section="233", mrope_interleaved=False),
    "partial_rotary_factor 0": lambda p: p.update(partial_rotary_factor=0.0),
    "partial_rotary_factor 2": lambda p: p.update(partial_rotary_factor=2.0),
}


def gen_rotary_config(torch, rng, pt, tf, configs):
    if tf is None:
        return gen_rotary(torch, rng, pt)
    label, make, module_class, rows, refused = _pick(rng, configs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = make()
    if rng.random() < 0.15:
        what = _pick(rng, sorted(_BREAK_CONFIG))
        params = config.rope_parameters
        if "full_attention" in params:  # per layer type: break one
            params = params["full_attention"]
        _BREAK_CONFIG[what](params)

        def build():
            return pt.RotaryEmbedding(config=config)

        return Case("RotaryEmbedding(config)", f"{label}: {what}", build, expect=REFUSED)
    if refused:
        return Case("RotaryEmbedding(config)", f"{label}",
                    lambda: pt.RotaryEmbedding(config=config), expect=REFUSED)  # fmt: skip
    layer_types = list(config.rope_parameters) if label == "gemma3" else [None]
    layer_type = _pick(rng, layer_types)
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    mrope = rows == 3
    steps = []  # the ids of each call, in order: the family's state matters
    for _ in range(int(rng.integers(1, 4))):
        last = int(_pick(rng, [5, 15, 16, 17, 40, 100, 300]))
        ids = torch.arange(last + 1)[None] if rng.random() < 0.5 else torch.tensor([[last]])
        if mrope and rng.random() < 0.6:
            ids = torch.stack([ids, ids // 4, (ids * 5) % 11])
        steps.append(ids)
    kind = "valid"
    expect = VALUE
    if rng.random() < 0.3:  # an awkward last call
        kind, ids, expect, _ = _position_ids(torch, rng)
        if mrope:
            kind, ids, expect = _rows(torch, rng, kind, ids, expect)
        steps.append(ids)
    x_kind, x, x_expect = ("valid", torch.zeros(1), VALUE)
    if rng.random() < 0.2:
        x_kind, x, x_expect = _float_x(torch, rng)
    if x_expect == REFUSED:
        expect = REFUSED

    def run():
        mine = pt.RotaryEmbedding(config=config)
        theirs = module_class(config)
        out = []
        for ids in steps:
            got = mine(x, ids, **kwargs)
            want = None
            # transformers' module where it takes the ids ((batch, seq), M-RoPE's
            # rows) and float32 holds them
            shaped = ids.ndim == 2 or (mrope and ids.ndim == 3)
            if shaped and ids.device.type != "meta" and ids.numel() and int(ids.max()) < 4096:
                with torch.no_grad():
                    want = theirs(torch.zeros(1), ids.long(), **kwargs)
            out.append((ids, got, want))
        return out

    def check(result):
        for ids, got, want in result:
            shape = tuple(ids.shape[1:] if mrope and ids.ndim == 3 else ids.shape)
            for t in got:
                if t.dtype != x.dtype or tuple(t.shape[:-1]) != shape:
                    return f"{tuple(t.shape)} {t.dtype} for ids {tuple(ids.shape)}"
            if want is None or x.device.type == "meta":
                continue
            top = float(ids.max()) + 1
            atol = 2e-6 * top + _tol(torch, x.dtype)
            for a, b, what in zip(got, want, ("cos", "sin")):
                why = _compare(torch, a, b.double().numpy(), atol, what)
                if why:
                    return f"{why} at ids {tuple(ids.shape)} up to {int(ids.max())}"
        return None

    return Case("RotaryEmbedding(config)", f"{label} {x_kind}/{kind}", run, check, expect)


# -- apply_rotary -----------------------------------------------------------------------------


def gen_apply_rotary(torch, rng, pt):
    layout = _pick(rng, ["bhsd", "bshd"])
    rope_layout = _pick(rng, ["half", "interleaved"])
    b, h, s = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(0, 5))
    d = int(_pick(rng, [2, 4, 8, 16]))
    r = int(_pick(rng, [d, d, max(2, d // 2)]))
    dtype = _pick(rng, [torch.float32, torch.float64])
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    q = torch.randn(b, h, s, d, generator=g, dtype=dtype)
    k = torch.randn(b, 1, s, d, generator=g, dtype=dtype)
    cos = torch.randn(_pick(rng, [b, 1]), s, r, generator=g, dtype=dtype)
    sin = torch.randn(cos.shape, generator=g, dtype=dtype)
    if rng.random() < 0.3:
        cos, sin = cos[0], sin[0]
    if layout == "bshd":
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # non-contiguous views
    kind, expect = "valid", VALUE
    if rng.random() < 0.35:
        kind = _pick(rng, ["odd columns", "too many columns", "seq", "int", "meta", "layout",
                           "rope_layout", "wrong-type", "3-d"])  # fmt: skip
        expect = REFUSED
        if kind == "odd columns":
            cos = sin = torch.zeros(s, 3, dtype=dtype)
        elif kind == "too many columns":
            cos = sin = torch.zeros(s, d + 2, dtype=dtype)
        elif kind == "seq":
            cos = sin = torch.zeros(s + 1, r, dtype=dtype)
        elif kind == "int":
            q = q.long()
        elif kind == "meta":
            q = q.to("meta")
        elif kind == "layout":
            layout = _pick(rng, ["bsd", 2, None])
        elif kind == "rope_layout":
            rope_layout = _pick(rng, ["full", None])
        elif kind == "wrong-type":
            k = k.numpy()
        else:
            q = q[0]

    def run():
        return pt.apply_rotary(q, k, cos, sin, layout=layout, rope_layout=rope_layout)

    def check(result):
        c = cos.double().numpy()
        sn = sin.double().numpy()
        if c.ndim == 2:
            c, sn = c[None], sn[None]
        for got, t in zip(result, (q, k)):
            x = t.double().numpy()
            if layout == "bshd":
                x = x.transpose(0, 2, 1, 3)
            head, rest = x[..., :r], x[..., r:]
            if rope_layout == "half":
                turned = np.concatenate([-head[..., r // 2 :], head[..., : r // 2]], -1)
            else:
                pairs = head.reshape(head.shape[:-1] + (r // 2, 2))
                turned = np.stack([-pairs[..., 1], pairs[..., 0]], -1).reshape(head.shape)
            want = np.concatenate([head * c[:, None] + turned * sn[:, None], rest], -1)
            if layout == "bshd":
                want = want.transpose(0, 2, 1, 3)
            why = _compare(torch, got, want, 1e-5 if dtype == torch.float32 else 1e-12)
            if why:
                return why
        return None

    return Case("apply_rotary", kind, run, check, expect)


# -- ALiBi ---------------------------------------------------------------------------------------


def _largest(values):
    """The largest finite magnitude (at least 1): the scale of a tolerance."""
    finite = np.abs(values[np.isfinite(values)])
    return max(1.0, float(finite.max())) if finite.size else 1.0


def _alibi_bias(slopes, q_len, k_len, q_offset):
    i = q_offset + np.arange(q_len)[:, None]
    j = np.arange(k_len)[None, :]
    with np.errstate(invalid="ignore"):
        bias = -slopes[:, None, None] * (i - j).astype(np.float64)
    return np.where(j <= i, bias, -np.inf)


def gen_alibi(torch, rng, pt):
    n = int(_pick(rng, [1, 2, 3, 6, 8, 12]))
    max_bias = _pick(rng, [8.0, 8.0, 1.0, 16, 0.5])
    slopes = None
    if rng.random() < 0.3:
        slopes = list(rng.uniform(0.01, 1.0, n))
        max_bias = 8.0
    if rng.random() < 0.25:
        which = _pick(rng, ["n_heads", "max_bias", "slopes"])
        if which == "n_heads":
            n = _pick(rng, [0, -1, True, 2.0, "4", None])
        elif which == "max_bias":
            max_bias = _pick(rng, [float("nan"), 0, -1.0, "8", float("inf"), None])
        else:
            slopes = _pick(rng, [["a"] * 2, [float("nan")] * 3, [0.5] * (n + 1),
                                 [[0.5], [0.25, 1.0]], torch.zeros(3, device="meta"),
                                 "slopes"])  # fmt: skip

        def build():
            return pt.ALiBi(n, max_bias=max_bias, slopes=slopes)

        return Case("ALiBi", f"bad {which}", build, expect=REFUSED)
    want_slopes = (
        np.asarray(slopes, np.float64)
        if slopes is not None
        else reference.alibi_slopes(n, max_bias=float(max_bias))
    )
    call = _pick(rng, ["bias", "bias", "key_bias", "forward"])
    dtype = _pick(rng, [torch.float32, torch.float64, torch.float16, torch.bfloat16])
    tol = {torch.float32: 1e-6, torch.float64: 0.0, torch.float16: 1e-3, torch.bfloat16: 8e-3}[
        dtype
    ]
    kind, expect = "valid", VALUE
    if call == "bias":
        q_len, k_len = int(rng.integers(1, 6)), _pick(rng, [None, 4, 9])
        q_offset = _pick(rng, [None, None, 0, 3, 100, -2])
        device = "cpu"
        if rng.random() < 0.3:
            kind = _pick(rng, ["q_len", "q_offset", "dtype", "device", "meta"])
            if kind == "q_len":
                q_len = _pick(rng, [0, -1, True, 2.5])
                expect = REFUSED
            elif kind == "q_offset":
                q_offset = _pick(rng, [2**70, 1.5, "0"])
                expect = REFUSED
            elif kind == "dtype":
                dtype = _pick(rng, [torch.int32, "float32x", torch.complex64])
                expect = REFUSED
            elif kind == "device":
                device = _pick(rng, [3, "no-such-device", None])
                expect = REFUSED
            else:
                device = "meta"
        k = q_len if k_len is None else k_len
        if expect == VALUE and q_offset is None and q_len > k:
            expect = REFUSED

        def run():
            alibi = pt.ALiBi(n, max_bias=max_bias, slopes=slopes)
            return alibi.bias(q_len, k_len, q_offset=q_offset, dtype=dtype, device=device)

        def check(out):
            if device == "meta":
                ok = out.device.type == "meta" and tuple(out.shape) == (n, q_len, k)
                return None if ok else f"{out.device} {tuple(out.shape)}"
            offset = k - q_len if q_offset is None else q_offset
            if out.dtype != dtype:
                return f"dtype {out.dtype}"
            want = _alibi_bias(want_slopes, q_len, k, offset)
            return _compare(torch, out, want, tol * _largest(want))

    elif call == "key_bias":
        batch, k = int(rng.integers(1, 3)), int(rng.integers(1, 7))
        mask = torch.tensor(rng.integers(0, 2, size=(batch, k)))
        if rng.random() < 0.3:
            kind = _pick(rng, ["mask values", "mask 1-d", "mask numpy", "meta", "bool", "float"])
            if kind == "mask values":
                mask = mask + 2
                expect = REFUSED
            elif kind == "mask 1-d":
                mask = mask[0]
                expect = REFUSED
            elif kind == "mask numpy":
                mask = mask.numpy()
                expect = REFUSED
            elif kind == "meta":
                mask = mask.to("meta")
            elif kind == "bool":
                mask = mask == 1
            else:
                mask = mask.float()

        def run():
            alibi = pt.ALiBi(n, max_bias=max_bias, slopes=slopes)
            return alibi.key_bias(mask, dtype=dtype)

        def check(out):
            if mask.device.type == "meta":
                ok = out.device.type == "meta" and tuple(out.shape) == (batch, n, 1, k)
                return None if ok else f"{out.device} {tuple(out.shape)}"
            m = mask.double().numpy()
            positions = (np.cumsum(m, -1) - 1) * m
            want = (want_slopes[None, :, None] * positions[:, None, :])[:, :, None, :]
            return _compare(torch, out, want, tol * _largest(want))

    else:
        batch, q_len, k = int(rng.integers(0, 3)), int(rng.integers(1, 5)), int(rng.integers(4, 8))
        scores = torch.randn(batch, n, q_len, k, dtype=dtype)
        if rng.random() < 0.3:
            kind = _pick(rng, ["heads", "int", "empty q", "wrong-type", "3-d"])
            expect = REFUSED
            if kind == "heads":
                scores = torch.zeros(batch, n + 1, q_len, k, dtype=dtype)
            elif kind == "int":
                scores = scores.long()
            elif kind == "empty q":
                scores = scores[:, :, :0]
            elif kind == "wrong-type":
                scores = scores.numpy() if dtype != torch.bfloat16 else None
            else:
                scores = scores.reshape(-1, q_len, k)  # 3-d

        def run():
            return pt.ALiBi(n, max_bias=max_bias, slopes=slopes)(scores)

        def check(out):
            want = scores.double().numpy() + _alibi_bias(want_slopes, q_len, k, k - q_len)
            return _compare(torch, out, want, 2 * tol * _largest(want))

    return Case("ALiBi", f"{call} {kind}", run, check, expect)


# -- T5RelativeBias -----------------------------------------------------------------------------


def gen_t5(torch, rng, pt):
    num_buckets = int(_pick(rng, [32, 8, 16, 4]))
    n_heads = int(_pick(rng, [1, 2, 4]))
    bidirectional = bool(rng.random() < 0.5)
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    max_distance = int(_pick(rng, [128, 20, exact + 1, 1000]))
    dtype = _pick(rng, [torch.float32, torch.float64, torch.bfloat16])
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    weight = torch.randn(num_buckets, n_heads, generator=g).to(dtype)
    if rng.random() < 0.2:
        which = _pick(rng, ["num_buckets", "n_heads", "max_distance", "bidirectional", "weight"])
        args = dict(bidirectional=bidirectional, max_distance=max_distance)
        nb, nh, w = num_buckets, n_heads, None
        if which == "num_buckets":
            nb = _pick(rng, [1, 0, True, 3.0, "32"])
        elif which == "n_heads":
            nh = _pick(rng, [0, -1, True, 2.5])
        elif which == "max_distance":
            args["max_distance"] = _pick(rng, [0, -1, 1.5, exact, "128", None])
        elif which == "bidirectional":
            args["bidirectional"] = _pick(rng, ["no", 1, None])
        else:
            w = _pick(rng, [weight.numpy() if dtype != torch.bfloat16 else [[1.0]],
                            weight.long(), weight[0], torch.zeros(num_buckets, 0)])  # fmt: skip
            nb = nh = None

        def build():
            return pt.T5RelativeBias(nb, nh, weight=w, **args)

        return Case("T5RelativeBias", f"bad {which}", build, expect=REFUSED)
    q_len, k_len = int(rng.integers(1, 8)), _pick(rng, [None, int(rng.integers(1, 30))])
    q_offset = int(_pick(rng, [0, 0, 3, -4, 10**6]))
    path = _pick(rng, ["cpu", "device", "meta"])
    kind, expect = "valid", VALUE
    if rng.random() < 0.3:
        kind = _pick(rng, ["q_len", "k_len", "q_offset"])
        expect = REFUSED
        if kind == "q_len":
            q_len = _pick(rng, [0, -1, True, 2.5])
        elif kind == "k_len":
            k_len = _pick(rng, [0, -3, 1.0])
        else:
            q_offset = _pick(rng, [2**70, 0.5, "1"])
    k = q_len if k_len is None else k_len

    def run():
        module = pt.T5RelativeBias(num_buckets, n_heads, bidirectional=bidirectional,
                                   max_distance=max_distance, weight=weight.clone())  # fmt: skip
        if path == "meta":
            module = module.to("meta")
        with _device_path(path == "device"):
            module(2, 3)  # an earlier call's buckets, kept
            return module(q_len, k_len, q_offset)

    def check(out):
        if path == "meta":
            ok = out.device.type == "meta" and tuple(out.shape) == (1, n_heads, q_len, k)
            return None if ok else f"{out.device} {tuple(out.shape)}"
        rel = np.arange(k)[None, :] - (np.arange(q_len)[:, None] + q_offset)
        buckets = reference.relative_position_bucket(
            rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
        )
        want = weight.double().numpy()[buckets].transpose(2, 0, 1)[None]
        if out.dtype != dtype:
            return f"dtype {out.dtype}"
        return _compare(torch, out, want, 0.0)

    return Case("T5RelativeBias", f"{path} {kind}", run, check, expect)


# -- XLPositionTerm -----------------------------------------------------------------------------

_XL_ORDER = {"ibnd": (2, 0, 1, 3), "bnid": (0, 1, 2, 3), "bind": (0, 2, 1, 3)}


def gen_xl(torch, rng, pt):
    layout = _pick(rng, sorted(_XL_ORDER))
    b, n, d = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(_pick(rng, [1, 4, 8]))
    q_len, mem = int(rng.integers(1, 5)), int(rng.integers(0, 5))
    k_len = q_len + mem
    table = _pick(rng, ["bi", "uni", "other"])
    rows = {"bi": k_len + q_len, "uni": k_len + 1, "other": int(rng.integers(0, 12))}[table]
    causal = table == "uni" or rng.random() < 0.2
    q_offset = _pick(rng, [None, None, 0, mem + 1, -1])
    give_k = table != "bi" or rng.random() < 0.5
    dtype = _pick(rng, [torch.float32, torch.float64])
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    q = torch.randn(b, n, q_len, d, generator=g, dtype=dtype)
    r = torch.randn(b, n, rows, d, generator=g, dtype=dtype)
    bias = torch.randn(n, d, generator=g, dtype=dtype) if rng.random() < 0.7 else None
    if rng.random() < 0.15:
        which = _pick(rng, ["layout", "bias"])
        lay, bb = layout, bias
        if which == "layout":
            lay = _pick(rng, ["bsd", 3, None])
        else:
            bb = _pick(rng, [np.zeros((n, d)), torch.zeros(n, d, 1), torch.zeros(n, d).long()])

        def build():
            return pt.XLPositionTerm(bb, layout=lay)

        return Case("XLPositionTerm", f"bad {which}", build, expect=REFUSED)
    kind = "valid"
    qq, rr = q.permute(_XL_ORDER[layout]), r.permute(_XL_ORDER[layout])
    if rng.random() < 0.15:
        kind = _pick(rng, ["q 3-d", "r int", "wrong-type", "meta"])
        if kind == "q 3-d":
            qq = qq[0]
        elif kind == "r int":
            rr = rr.long()
        elif kind == "wrong-type":
            qq = qq.numpy()
        else:
            qq, rr = qq.to("meta"), rr.to("meta")
    # the oracle: which rows the scores read, and their values
    keys = k_len if give_k else rows - q_len
    offset = keys - q_len if q_offset is None else q_offset
    expect = VALUE
    want = None
    if kind not in ("valid", "meta") or keys < (0 if give_k else 1):
        expect = REFUSED
    else:
        qn, rn = q.double().numpy(), r.double().numpy()
        qb = qn + (0 if bias is None else bias.double().numpy()[:, None, :])
        want = np.zeros((b, n, q_len, keys))
        for i in range(q_len):
            for j in range(keys):
                dist = offset + i - j
                if causal and dist < 0:
                    continue
                row = keys - dist
                if not 0 <= row < rows:
                    expect = REFUSED
                    break
                want[:, :, i, j] = np.einsum("bnd,bnd->bn", qb[:, :, i], rn[:, :, row])
        if expect == REFUSED:
            want = None

    def run():
        term = pt.XLPositionTerm(None if bias is None else bias.clone(), layout=layout)
        return term(qq, rr, k_len=keys if give_k else None, q_offset=q_offset, causal=causal)

    def check(out):
        if kind == "meta":  # the result's shape and dtype, checked as on the CPU
            if out.device.type != "meta" or out.dtype != dtype:
                return f"{out.dtype} on {out.device.type}, expected {dtype} on meta"
            return None if tuple(out.shape) == want.shape else f"shape {tuple(out.shape)}"
        return _compare(torch, out, want, 1e-5 if dtype == torch.float32 else 1e-12)

    return Case("XLPositionTerm", f"{table} {kind}", run, check, expect)


# -- DebertaRelativeBias -------------------------------------------------------------------------


def gen_deberta(torch, rng, pt):
    buckets, maximum = _pick(rng, [(-1, 16), (-1, 4), (8, 16), (4, 64), (0, 8), (256, 512)])
    layout = _pick(rng, ["bhsd", "(bh)sd"])
    b, h, d = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(_pick(rng, [1, 4, 8]))
    n_heads = h if layout == "(bh)sd" or rng.random() < 0.5 else None
    if rng.random() < 0.2:
        which = _pick(rng, ["n_heads", "position_buckets", "max_relative_positions", "layout"])
        args = dict(position_buckets=buckets, max_relative_positions=maximum, n_heads=n_heads,
                    layout=layout)  # fmt: skip
        if which == "n_heads":
            args["n_heads"] = _pick(rng, [0, -1, True, 2.0])
        elif which == "position_buckets":
            args["position_buckets"] = _pick(rng, [2, "a", 1.5, 2**40])
        elif which == "max_relative_positions":
            args["max_relative_positions"] = _pick(rng, [-1, 0, 1.5, "512"])
        else:
            args["layout"] = _pick(rng, ["x", None, "bshd"])

        def build():
            return pt.DebertaRelativeBias(**args)

        return Case("DebertaRelativeBias", f"bad {which}", build, expect=REFUSED)
    span = buckets if buckets > 0 else maximum
    q_len, k_len = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    dtype = _pick(rng, [torch.float32, torch.float64])
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    q = torch.randn(b, h, q_len, d, generator=g, dtype=dtype)
    k = torch.randn(b, h, k_len, d, generator=g, dtype=dtype)
    pos_key = torch.randn(h, 2 * span, d, generator=g, dtype=dtype) if rng.random() < 0.7 else None
    pos_query = torch.randn(h, 2 * span, d, generator=g, dtype=dtype)
    if rng.random() < 0.3:
        pos_query = None
    scale_factor = _pick(rng, [None, None, 1, 3, 2.5])
    kind, expect = "valid", VALUE
    if pos_key is None and pos_query is None:
        kind, expect = "no terms", REFUSED
    if rng.random() < 0.2:
        kind = _pick(rng, ["scale_factor", "rows", "int", "wrong-type"])
        expect = REFUSED
        if kind == "scale_factor":
            scale_factor = _pick(rng, [0, -1, float("nan"), "3", True])
        elif kind == "rows":
            pos_query = torch.zeros(h, 2 * span + 1, d, dtype=dtype)
        elif kind == "int":
            k = k.long()
        else:
            q = q.numpy()
    qq, kk = q, k
    if layout == "(bh)sd" and torch.is_tensor(q) and torch.is_tensor(k):
        qq, kk = q.reshape(b * h, q_len, d), k.reshape(b * h, k_len, d)
    meta = rng.random() < 0.1 and torch.is_tensor(qq) and torch.is_tensor(kk)
    if meta:  # refused as on the CPU, or the result's shape on the meta device
        kind += " meta"
        qq, kk = qq.to("meta"), kk.to("meta")

    def run():
        module = pt.DebertaRelativeBias(position_buckets=buckets, max_relative_positions=maximum,
                                        n_heads=n_heads, layout=layout)  # fmt: skip
        return module(qq, kk, pos_key, pos_query, scale_factor=scale_factor)

    def check(out):
        def np_of(t):
            return None if t is None else t.double().numpy()

        want = reference.deberta_attention_bias(
            np_of(q), np_of(k), np_of(pos_key), np_of(pos_query), position_buckets=buckets,
            max_relative_positions=maximum, scale_factor=scale_factor,
        )  # fmt: skip
        if layout == "(bh)sd":
            want = want.reshape(b * h, q_len, k_len)
        if meta:
            if out.device.type != "meta" or out.dtype != dtype:
                return f"{out.dtype} on {out.device.type}, expected {dtype} on meta"
            return None if tuple(out.shape) == want.shape else f"shape {tuple(out.shape)}"
        scale = max(1.0, float(np.abs(want).max()))
        return _compare(torch, out, want, (1e-5 if dtype == torch.float32 else 1e-11) * scale)

    return Case("DebertaRelativeBias", f"{layout} {kind}", run, check, expect)


# -- shared by the modules of the absolute embeddings and the learned biases ---------------------


def _floats(torch):
    """The float dtypes drawn: float32 most often."""
    return [torch.float32, torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _in_range(torch, want, dtype):
    """`want` (float64) as a rounding to `dtype` leaves its magnitudes: an
    infinity past the dtype's largest number."""
    top = float(torch.finfo(dtype).max)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(want) > top, np.sign(want) * np.inf, want)


def _seeded(torch, rng):
    return torch.Generator().manual_seed(int(rng.integers(2**31)))


def _set(param, values):
    """A parameter's data replaced by `values` (float64, rounded to its dtype)."""
    import torch

    with torch.no_grad():
        param.copy_(torch.as_tensor(np.asarray(values, np.float64)).to(param.dtype))


def _np(t):
    """A CPU tensor's values as float64 NumPy."""
    return t.detach().double().cpu().numpy()


def _bad_ctor(name, perturbation, build, use=None, value=None):
    """A constructor call with one bad argument: refused.  A size no call
    can use (`value` an int >= 2**40) may instead be refused by the first
    call, `use(module)`, where the module makes nothing of that size."""
    late = use is not None and type(value) is int and value >= 2**40

    def run():
        module = build()
        return use(module) if late else module

    return Case(name, f"bad {perturbation}", run, expect=REFUSED)


def _strided(torch, t):
    """`t`'s values in a view with stride 2 along its last axis."""
    if t.ndim == 0:
        return t
    return torch.stack([t, t], -1).flatten(-2)[..., ::2]


_NOT_DRAWN = object()


# -- SinusoidalEmbedding ------------------------------------------------------------------------


def gen_sinusoid(torch, rng, pt):
    dim = int(_pick(rng, [2, 4, 6, 8, 16]))
    base = _pick(rng, [10000.0, 500.0, 2.0, 1e6, 10000, np.float32(100.0), 1.5])
    layout = _pick(rng, ["interleaved", "concat"])
    if rng.random() < 0.2:
        which = _pick(rng, ["dim", "base", "layout"])
        if which == "dim":
            dim = _pick(rng, _BAD_INTS + [7, 1, 2**40])
        elif which == "base":
            base = _pick(rng, _BAD_REALS)
        else:
            layout = _pick(rng, ["sin", 1, None, "Concat"])
        return _bad_ctor("SinusoidalEmbedding", which,
                         lambda: pt.SinusoidalEmbedding(dim, base=base, layout=layout),
                         lambda m: m(torch.arange(2)), dim)  # fmt: skip
    cast = _pick(rng, [None, None, torch.float64, torch.float16, torch.bfloat16, "meta"])
    asked = _pick(rng, [None, None, None, torch.float32, torch.float64, torch.float16,
                        torch.bfloat16])  # fmt: skip
    kind = _pick(rng, ["valid"] * 5 + ["n", "float", "zero-d", "empty", "huge", "negative",
                                       "strided", "small int", "meta", "nan", "inf", "bool",
                                       "complex", "wrong-type", "bad dtype", "bad n"])  # fmt: skip
    expect = VALUE
    values = rng.integers(0, 300, size=_pick(rng, [(3,), (2, 3), (1, 4)])).astype(np.float64)
    positions = _NOT_DRAWN
    if kind == "n":
        positions = _pick(rng, [0, 1, 5, np.int64(4)])
        values = np.arange(int(positions), dtype=np.float64)
    elif kind == "bad n":
        positions = _pick(rng, [-1, True, 3.0, 2**70])
        expect = REFUSED
    elif kind == "float":
        fdtype = _pick(rng, _floats(torch))
        positions = (torch.tensor(rng.uniform(-50, 50, size=(2, 3))) * 4).to(fdtype)
        values = _np(positions)
    elif kind == "zero-d":  # one position (an int n is a length; a tensor, positions)
        positions = torch.tensor(_pick(rng, [7.5, -2.25, 7, 0]))
        values = _np(positions)
    elif kind == "empty":
        positions = torch.zeros(_pick(rng, [(0,), (2, 0)]), dtype=torch.long)
        values = np.zeros(tuple(positions.shape))
    elif kind == "huge":
        values = values + _pick(rng, [2**24 + 1, 2**31, 2**40, 2**62])
        positions = torch.tensor(values.astype(np.int64))
        values = positions.double().numpy()
    elif kind == "negative":
        values = -values
    elif kind == "small int":
        values = values % 100
        positions = torch.tensor(values.astype(np.int64)).to(
            _pick(rng, [torch.int8, torch.int16, torch.int32, torch.uint8]))  # fmt: skip
    elif kind in ("nan", "inf"):
        positions = torch.tensor(values)
        positions.view(-1)[0] = float("nan") if kind == "nan" else -float("inf")
        positions = positions.to(_pick(rng, [torch.float32, torch.float16, torch.bfloat16]))
        expect = REFUSED
    elif kind == "bool":
        positions = torch.tensor(values % 2 == 1)
        expect = REFUSED
    elif kind == "complex":
        positions = torch.tensor(values).to(torch.complex64)
        expect = REFUSED
    elif kind == "wrong-type":
        positions = _pick(rng, [values, values.tolist(), None, "3"])
        expect = REFUSED
    elif kind == "bad dtype":
        asked = _pick(rng, [torch.int32, "float32", torch.complex64, np.float32])
        expect = REFUSED
    if positions is _NOT_DRAWN:
        positions = torch.tensor(values.astype(np.int64))
        if kind == "strided":
            positions = _strided(torch, positions)
        elif kind == "meta":
            positions = positions.to("meta")

    def run():
        module = pt.SinusoidalEmbedding(dim, base=base, layout=layout)
        if cast is not None:
            module = module.to(cast)
        return module(positions, dtype=asked)

    def check(out):
        own = torch.float32 if cast in (None, "meta") else cast
        dtype = own if asked is None else asked
        shape = tuple(values.shape) + (dim,)
        if out.dtype != dtype or tuple(out.shape) != shape:
            return f"{out.dtype} {tuple(out.shape)}, expected {dtype} {shape}"
        meta = (kind == "meta") or (cast == "meta" and not torch.is_tensor(positions))
        if meta or out.device.type == "meta":
            return None if meta and out.device.type == "meta" else f"on {out.device}"
        top = float(np.abs(values).max()) if values.size else 0.0
        if top > 2**45:  # float64's angles themselves past a radian's precision
            return None
        want = reference.sinusoid(values, dim, base=float(base), layout=layout, dtype=np.float64)
        return _compare(torch, out, want, _tol(torch, dtype) + top * 4e-16)

    return Case("SinusoidalEmbedding", f"{kind} {cast}/{asked}", run, check, expect)


# -- LearnedPositionEmbedding -------------------------------------------------------------------


def gen_learned(torch, rng, pt):
    num, dim = int(rng.integers(1, 9)), int(_pick(rng, [1, 2, 3, 4, 8]))
    dtype = _pick(rng, [None] + _floats(torch))
    init = _pick(rng, ["random", "sinusoid", "array", "array", "tensor", "list"])
    extra = int(_pick(rng, [0, 0, 1, 3]))
    table = rng.standard_normal((num + extra, dim)) * _pick(rng, [1.0, 1.0, 100.0])
    first_row = _pick(rng, [None, None, 0, extra]) if init not in ("random", "sinusoid") else None
    start = 0 if first_row is None else first_row
    args = dict(init=init, freeze=bool(rng.random() < 0.3), std=_pick(rng, [0.02, 1.0, 1e-3]),
                dtype=dtype, first_row=first_row)  # fmt: skip
    if init == "array":
        args["init"] = table if rng.random() < 0.7 else table.astype(np.float32)
    elif init == "tensor":
        t = torch.tensor(table).to(_pick(rng, _floats(torch)))
        if rng.random() < 0.3:  # a view, columns strided
            t = t.T.contiguous().T
        args["init"] = t.requires_grad_(bool(rng.random() < 0.3))  # another module's, say
    elif init == "list":
        args["init"] = table.tolist()
    expect = VALUE
    ctor = "valid"
    if init == "sinusoid" and dim % 2:
        ctor, expect = "sinusoid odd dim", REFUSED
    if rng.random() < 0.3:
        ctor = _pick(rng, ["num_positions", "dim", "narrow", "wide", "short", "1-d", "3-d",
                           "bool table", "complex table", "str table", "nan taken", "nan left",
                           "inf taken", "meta table", "first_row past", "first_row -1",
                           "first_row random", "key", "key type", "freeze", "std", "dtype",
                           "init type", "ragged", "past the dtype", "int table"])  # fmt: skip
        expect = REFUSED
        bad = table.copy()
        if ctor == "num_positions":
            num = _pick(rng, _BAD_INTS + [2**40])
        elif ctor == "dim":
            dim = _pick(rng, _BAD_INTS)
        elif ctor == "narrow":
            bad = table[:, :-1] if dim > 1 else table[:, :0]
        elif ctor == "wide":
            bad = np.concatenate([table, table[:, :1]], 1)
        elif ctor == "short":
            bad = table[: start + num - 1]
        elif ctor == "1-d":
            bad = table[:, 0]
        elif ctor == "3-d":
            bad = table[None]
        elif ctor == "bool table":
            bad = table > 0
        elif ctor == "complex table":
            bad = table.astype(np.complex128)
        elif ctor == "str table":
            bad = table.astype(str)
        elif ctor in ("nan taken", "inf taken"):
            bad[start + int(rng.integers(num)), int(rng.integers(dim))] = (
                np.nan if ctor == "nan taken" else -np.inf
            )
        elif ctor == "nan left":  # a row the module does not take: no matter
            bad = np.concatenate([table, np.full((1, dim), np.nan)])
            expect = VALUE
        elif ctor == "meta table":
            bad = torch.tensor(table).to("meta")
        elif ctor == "first_row past":
            args["first_row"] = extra + 1
        elif ctor == "first_row -1":
            args["first_row"] = _pick(rng, [-1, True, 1.0])
        elif ctor == "first_row random":
            bad, args["first_row"] = _pick(rng, ["random", "sinusoid"]), 0
        elif ctor == "key":
            args["key"] = "weight"
        elif ctor == "key type":
            args["key"] = _pick(rng, [3, b"weight"])
        elif ctor == "freeze":
            args["freeze"] = _pick(rng, ["no", 1, None])
        elif ctor == "std":
            args["std"] = _pick(rng, _BAD_REALS)
        elif ctor == "dtype":
            args["dtype"] = _pick(rng, [torch.int64, "float32", np.float32, torch.complex64])
        elif ctor == "init type":
            bad = _pick(rng, [3, None, {"weight": table}, 2.5])
        elif ctor == "ragged":
            bad = [[0.0] * dim] * (num + extra) + [[0.0] * (dim + 1)]
        elif ctor == "past the dtype":  # a finite table the dtype cannot hold
            args["dtype"] = _pick(rng, [torch.float16, torch.float32, torch.bfloat16])
            bad[start, 0] = float(torch.finfo(args["dtype"]).max) * 4
        else:  # integers: a table of them is read as it is
            bad = np.rint(table * 10).astype(_pick(rng, [np.int64, np.int8, np.uint8]))
            table = bad.astype(np.float64)
            expect = VALUE
        args["init"] = bad
        init = "array"
        if ctor in ("num_positions", "dim", "std"):
            args["init"], args["first_row"] = "random", None
    weight_dtype = torch.float32 if args["dtype"] is None else args["dtype"]
    if expect == REFUSED or not isinstance(weight_dtype, torch.dtype):

        def build():
            return pt.LearnedPositionEmbedding(num, dim, **args)

        return Case("LearnedPositionEmbedding", f"bad {ctor}", build, expect=REFUSED)
    where = _pick(rng, ["cpu", "cpu", "meta module"])
    kind = _pick(rng, ["valid"] * 5 + ["1-d", "zero-d", "empty", "strided", "small int", "meta",
                                       "past", "negative", "huge", "float", "bool",
                                       "wrong-type"])  # fmt: skip
    ids_values = rng.integers(0, num, size=_pick(rng, [(2, 3), (4,), (1, 1)]))
    call_expect = VALUE
    if kind == "1-d":
        ids_values = ids_values.reshape(-1)
    elif kind == "zero-d":
        ids_values = ids_values.reshape(-1)[0]
    elif kind == "empty":
        ids_values = np.zeros(_pick(rng, [(0,), (2, 0)]), np.int64)
    elif kind in ("past", "negative", "huge"):
        ids_values = ids_values.copy()
        ids_values.flat[0] = {"past": num, "negative": -1, "huge": 2**62}[kind]
        call_expect = REFUSED
    ids = torch.tensor(np.asarray(ids_values, np.int64))
    if kind == "strided":
        ids = _strided(torch, ids)
    elif kind == "small int":
        ids = ids.to(_pick(rng, [torch.int8, torch.int16, torch.int32, torch.uint8]))
    elif kind == "meta":
        ids = ids.to("meta")
    elif kind == "float":
        ids = ids.to(_pick(rng, [torch.float32, torch.float16]))
        call_expect = REFUSED
    elif kind == "bool":
        ids = ids % 2 == 1
        call_expect = REFUSED
    elif kind == "wrong-type":
        ids = _pick(rng, [ids.numpy(), ids.tolist(), None])
        call_expect = REFUSED
    if isinstance(args["init"], np.ndarray) and args["init"].dtype.kind in "iu":
        taken = table[start : start + num]
    elif init == "sinusoid":
        taken = reference.sinusoid(num, dim, dtype=np.float64)
    elif init == "random":
        taken = None
    else:
        given = args["init"]
        given = given if not torch.is_tensor(given) else _np(given)
        taken = np.asarray(given, np.float64)[start : start + num]

    def run():
        module = pt.LearnedPositionEmbedding(num, dim, **args)
        if where == "meta module":
            module = module.to("meta")
        return module, module(ids)

    def check(result):
        module, out = result
        weight = module.weight
        if weight.dtype != weight_dtype or tuple(weight.shape) != (num, dim):
            return f"weight {weight.dtype} {tuple(weight.shape)}"
        if weight.requires_grad == args["freeze"]:
            return f"weight.requires_grad {weight.requires_grad} with freeze={args['freeze']}"
        shape = tuple(ids.shape) + (dim,)
        if out.dtype != weight_dtype or tuple(out.shape) != shape:
            return f"{out.dtype} {tuple(out.shape)}, expected {weight_dtype} {shape}"
        if where == "meta module" or kind == "meta":
            return None if out.device.type == "meta" else f"on {out.device}"
        table_now = _np(weight)
        if taken is None:  # drawn: finite, and what the lookup reads
            if not np.isfinite(table_now).all():
                return "a drawn table that is not finite"
            want = table_now
        else:
            want = _in_range(torch, taken, weight_dtype)
            why = _compare(torch, weight, want, _tol(torch, weight_dtype) * _largest(want),
                           "weight")  # fmt: skip
            if why:
                return why
        rows = want[ids.long().numpy()]
        return _compare(torch, out, rows, _tol(torch, weight_dtype) * _largest(want))

    return Case("LearnedPositionEmbedding", f"{init} {where} {ctor}/{kind}", run, check,
                call_expect)  # fmt: skip


# -- ComplexOrderEmbedding ----------------------------------------------------------------------


def _complex_order_np(ids, positions, r, w, theta):
    """Wang et al.'s r[t] cos(w[t] pos + theta[t]) and r[t] sin(...), float64."""
    phase = positions[..., None] * w[ids] + theta[ids]
    return r[ids] * np.cos(phase), r[ids] * np.sin(phase)


def gen_complex_order(torch, rng, pt):
    vocab, dim = int(rng.integers(1, 8)), int(_pick(rng, [1, 2, 3, 4]))
    output = _pick(rng, ["concat", "pair", "complex"])
    if rng.random() < 0.15:
        which = _pick(rng, ["vocab_size", "dim", "output"])
        v, d, o = vocab, dim, output
        if which == "vocab_size":
            v = _pick(rng, _BAD_INTS + [2**40])
        elif which == "dim":
            d = _pick(rng, _BAD_INTS)
        else:
            o = _pick(rng, ["real", None, 1, "Concat"])
        return _bad_ctor("ComplexOrderEmbedding", which,
                         lambda: pt.ComplexOrderEmbedding(v, d, output=o))  # fmt: skip
    cast = _pick(rng, [None, None, torch.float64, torch.float16, torch.bfloat16])
    tables = [rng.standard_normal((vocab, dim)),
              rng.standard_normal((vocab, dim)) * _pick(rng, [1.0, 0.01, 30.0]),
              rng.standard_normal((vocab, dim)) * _pick(rng, [1.0, 100.0])]  # fmt: skip
    path = _pick(rng, ["cpu", "cpu", "device", "meta"])
    shape = _pick(rng, [(3,), (2, 3), (1, 4), (), (0,), (2, 0)])
    id_values = rng.integers(0, vocab, size=shape)
    ids = torch.tensor(np.asarray(id_values, np.int64))
    positions = None
    kind, expect = "valid", VALUE
    if shape == ():
        kind, expect = "zero-d ids", REFUSED  # no axis to count along
        if rng.random() < 0.5:
            kind, expect = "zero-d ids, positions", VALUE
            positions = torch.tensor(3)
    if rng.random() < 0.5 and expect == VALUE:
        kind = _pick(rng, ["int positions", "float positions", "broadcast", "huge", "strided",
                           "small int ids", "meta ids", "meta positions", "past", "negative id",
                           "huge id", "float ids", "bool ids", "wrong-type ids", "nan", "inf",
                           "bool positions", "complex positions", "wrong-type positions",
                           "shape", "nan table", "nan unused", "inf table"])  # fmt: skip
        if kind == "int positions":
            positions = torch.tensor(rng.integers(-20, 1000, size=shape))
        elif kind == "float positions":  # (their gradient asked for, or not)
            positions = (torch.tensor(rng.uniform(-30, 30, size=shape)) * 4).to(
                _pick(rng, _floats(torch))).requires_grad_(bool(rng.random() < 0.5))  # fmt: skip
        elif kind == "broadcast":
            positions = torch.tensor(rng.integers(0, 50, size=shape[-1:]))
            if rng.random() < 0.5:
                positions = torch.tensor(7)
        elif kind == "huge":
            positions = torch.tensor(rng.integers(0, 9, size=shape)) + _pick(
                rng, [2**24 + 1, 2**40, 2**53 - 9])  # fmt: skip
        elif kind == "strided":
            ids = _strided(torch, ids)
            positions = _strided(torch, torch.tensor(rng.integers(0, 50, size=shape)))
        elif kind == "small int ids":
            ids = ids.to(_pick(rng, [torch.int8, torch.int16, torch.int32, torch.uint8]))
        elif kind == "meta ids":
            ids = ids.to("meta")
        elif kind == "meta positions":
            positions = torch.tensor(rng.integers(0, 50, size=shape)).to("meta")
        elif kind in ("past", "negative id", "huge id"):
            if ids.numel():
                ids = ids.clone()
                ids.view(-1)[0] = {"past": vocab, "negative id": -1, "huge id": 2**62}[kind]
                expect = REFUSED
        elif kind == "float ids":
            ids, expect = ids.float(), REFUSED
        elif kind == "bool ids":
            ids, expect = ids % 2 == 1, REFUSED
        elif kind == "wrong-type ids":
            ids, expect = _pick(rng, [ids.numpy(), ids.tolist(), None]), REFUSED
        elif kind in ("nan", "inf"):
            positions = torch.tensor(rng.uniform(0, 9, size=shape))
            if positions.numel():
                positions.view(-1)[0] = float("nan") if kind == "nan" else float("inf")
                expect = REFUSED
            positions = positions.to(_pick(rng, [torch.float32, torch.float64, torch.float16]))
        elif kind == "bool positions":
            positions, expect = torch.ones(shape, dtype=torch.bool), REFUSED
        elif kind == "complex positions":
            positions, expect = torch.ones(shape, dtype=torch.complex64), REFUSED
        elif kind == "wrong-type positions":
            positions, expect = _pick(rng, [np.ones(shape), [1, 2, 3], 2.0]), REFUSED
        elif kind == "shape":  # not broadcastable, or to a larger shape than the ids'
            more = _pick(rng, [(2,) + shape, shape[:-1] + (shape[-1] + 2,) if shape else (2,)])
            positions, expect = torch.zeros(more, dtype=torch.long), REFUSED
        elif kind in ("nan table", "inf table"):  # in a row a token uses
            if id_values.size:
                t = _pick(rng, [0, 1, 2])
                tables[t][int(id_values.flat[0]), int(rng.integers(dim))] = (
                    np.nan if kind == "nan table" else np.inf
                )
                expect = REFUSED
        else:  # in a row no token uses: no matter
            unused = sorted(set(range(vocab)) - set(np.asarray(id_values).reshape(-1).tolist()))
            if unused:
                tables[int(rng.integers(3))][unused[0], 0] = np.nan
    if path == "meta" and kind in ("nan", "inf", "nan table", "inf table"):
        expect = EITHER  # the tables' values are not there to see
    ids_np = np.asarray(ids.long().numpy()) if torch.is_tensor(ids) and ids.device.type != "meta" \
        else None  # fmt: skip

    def run():
        module = pt.ComplexOrderEmbedding(vocab, dim, output=output)
        if cast is not None:
            module = module.to(cast)
        for param, values in zip((module.amplitude, module.frequency, module.phase), tables):
            _set(param, values)
        if path == "meta":
            module = module.to("meta")
        with _device_path(path == "device"):
            return module, module(ids, positions)

    def check(result):
        module, out = result
        dtype = module.amplitude.dtype
        parts = out if output == "pair" else (out,)
        want_shape = tuple(ids.shape) + ((2 * dim,) if output == "concat" else (dim,))
        want_dtype = dtype
        if output == "complex":
            want_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        for p in parts:
            if p.dtype != want_dtype or tuple(p.shape) != want_shape:
                return f"{p.dtype} {tuple(p.shape)}, expected {want_dtype} {want_shape}"
        meta = path == "meta" or kind in ("meta ids", "meta positions")
        if meta or any(p.device.type == "meta" for p in parts):
            return None if all(p.device.type == "meta" for p in parts) and meta else "meta?"
        r, w, theta = (_np(t) for t in (module.amplitude, module.frequency, module.phase))
        if positions is None:
            pos = np.arange(1, ids.shape[-1] + 1, dtype=np.float64)
        else:
            pos = _np(positions)
        pos = np.broadcast_to(pos, tuple(ids.shape))
        real, imag = _complex_order_np(ids_np, pos, r, w, theta)
        if output == "concat":
            got, want = (out,), (np.concatenate([real, imag], -1),)
        elif output == "pair":
            got, want = out, (real, imag)
        else:
            got, want = (out.real, out.imag), (real, imag)
        # the parts rounded once to the tables' dtype (then widened for "complex")
        atol = _tol(torch, dtype) * _largest(np.abs(r))
        for g, wnt, what in zip(got, want, ("real", "imag")):
            why = _compare(torch, g, wnt, atol, what)
            if why:
                return why
        return None

    return Case("ComplexOrderEmbedding", f"{path} {output} {cast} {kind}", run, check, expect)


# -- KerpleBias, SandwichBias, FireBias: biases by distance ---------------------------------------

_MAX_OFFSET = 2**53  # the largest |q_offset| a bias by distance takes


def _distance_case(
    torch, rng, name, label, make, n_heads, oracle, path, expect, after=None, holds=True
):
    """A call of a bias by distance: ``bias(q_len, k_len, q_offset=, dtype=,
    device=)`` or ``forward(scores, q_offset=)`` of the module `make()`
    makes (moved to the meta device for `path` "meta"; on the device path
    for "device"), valued by `oracle(module, q_len, k_len, q_offset)`, float64
    ``(n_heads, q_len, k_len)`` with ``-inf`` where the bias masks;
    `after(module)` None or what is wrong with the module after the call.
    A module that `holds` no parameter makes the bias of CPU scores on the
    CPU when it is on the meta device; one that holds some, a meta result."""
    given, expect = expect, VALUE  # what the parameters make of it; what the call does
    call = _pick(rng, ["bias", "forward"])
    dtype = _pick(rng, _floats(torch))
    q_len, k_len = int(rng.integers(1, 6)), _pick(rng, [None, int(rng.integers(1, 9))])
    q_offset = _pick(rng, [None, None, None, 0, 2, -3, np.int64(3), 10**6, 2**40, _MAX_OFFSET,
                           -_MAX_OFFSET])  # fmt: skip
    device = _pick(rng, [None, None, "cpu", torch.device("cpu"), "meta"])
    if path == "meta":
        device = _pick(rng, [None, "meta"])
    kind = "valid"
    scores = None
    perturb = rng.random() < 0.35
    if call == "bias" and perturb:
        kind = _pick(rng, ["q_len", "k_len", "q_offset", "dtype", "device"])
        expect = REFUSED
        if kind == "q_len":
            q_len = _pick(rng, [0, -1, True, 2.5, "3", None])
        elif kind == "k_len":
            k_len = _pick(rng, [0, -3, 1.0, True])
        elif kind == "q_offset":
            q_offset = _pick(rng, [_MAX_OFFSET + 1, -_MAX_OFFSET - 1, 2**70, 0.5, "1", True])
        elif kind == "dtype":
            dtype = _pick(rng, [torch.int32, "float32", torch.complex64, None, np.float32])
        else:
            device = _pick(rng, [3, "no-such-device"] + (["cuda:7"] if path != "meta" else []))
    k = q_len if k_len is None else k_len
    if call == "forward":
        batch = int(_pick(rng, [1, 2, 0]))
        k = int(rng.integers(1, 9)) if k_len is None else k_len
        g = _seeded(torch, rng)
        scores = torch.randn(batch, n_heads, k, q_len, generator=g, dtype=torch.float64) * 3
        scores = scores.to(dtype).transpose(-1, -2)  # a non-contiguous view
        if rng.random() < 0.5:
            scores = scores.contiguous()
        if perturb:
            kind = _pick(rng, ["heads", "3-d", "empty q", "empty k", "int", "bool", "wrong-type",
                               "q_offset", "meta", "nan scores", "inf scores"])  # fmt: skip
            expect = REFUSED if kind not in ("meta", "nan scores", "inf scores") else VALUE
            if kind == "heads":
                scores = torch.zeros(batch, n_heads + 1, q_len, k, dtype=dtype)
            elif kind == "3-d":
                scores = scores[0] if batch else torch.zeros(n_heads, q_len, k, dtype=dtype)
            elif kind == "empty q":
                scores = scores[:, :, :0]
            elif kind == "empty k":
                scores = scores[..., :0]
            elif kind == "int":
                scores = scores.long()
            elif kind == "bool":
                scores = scores > 0
            elif kind == "wrong-type":
                scores = _pick(rng, [scores.double().numpy(), None, scores.tolist()])
            elif kind == "q_offset":
                q_offset = _pick(rng, [_MAX_OFFSET + 1, 2**70, 1.5, "0"])
            elif kind == "meta":
                scores = scores.to("meta")
            elif batch:
                scores = scores.clone()
                scores[0, 0, 0, 0] = float("nan") if kind == "nan scores" else float("-inf")
    if expect == VALUE and q_offset is None and q_len > k:
        kind += " q_len > k_len"
        expect = REFUSED  # the default q_offset would put queries before the first key
    if expect == VALUE:
        traced = kind == "meta" or (call == "bias" and device == "meta")
        # a meta result is a shape's trace: the parameters' values are not read
        expect = EITHER if traced and given == REFUSED else given
    tol = _tol(torch, dtype) if dtype in _floats(torch) else 0.0

    def run():
        module = make()
        if path == "meta":
            module = module.to("meta")
        with _device_path(path == "device"):
            if call == "bias":
                out = module.bias(q_len, k_len, q_offset=q_offset, dtype=dtype, device=device)
            else:
                out = module(scores, q_offset=q_offset)
        return module, out

    def check(result):
        module, out = result
        shape = (n_heads, q_len, k) if call == "bias" else tuple(scores.shape)
        if out.dtype != dtype or tuple(out.shape) != shape:
            return f"{out.dtype} {tuple(out.shape)}, expected {dtype} {shape}"
        meta = kind == "meta" or (call == "bias" and (device == "meta" or path == "meta"))
        meta = meta or (call == "forward" and path == "meta" and holds)
        if meta or out.device.type == "meta":
            return None if meta and out.device.type == "meta" else f"on {out.device}"
        offset = k - q_len if q_offset is None else q_offset
        bias = oracle(module, q_len, k, offset)
        if bias is None:  # past what float64's distances resolve
            return None
        bias = _in_range(torch, bias, dtype)
        if call == "bias":
            why = _compare(torch, out, bias, tol * _largest(bias))
        else:
            s = scores.double().numpy()
            with np.errstate(invalid="ignore"):
                want = _in_range(torch, s + bias, dtype)
                scale = _largest(np.abs(s) + np.abs(bias))
            why = _compare(torch, out, want, 2 * tol * scale)
        return why or (after(module) if after is not None else None)

    return Case(name, f"{label} {path} {call} {kind}", run, check, expect)


def _distances_np(q_len, k_len, q_offset):
    """(qpos - j) as float64 (q_len, k_len), qpos = q_offset + i: exact
    integers rounded once."""
    i = np.arange(q_len, dtype=np.int64)[:, None] + np.int64(q_offset)
    return (i - np.arange(k_len, dtype=np.int64)[None, :]).astype(np.float64)


def _masked(values, rel, causal):
    return np.where(rel >= 0, values, -np.inf) if causal else values


def gen_kerple(torch, rng, pt):
    n = int(_pick(rng, [1, 2, 3]))
    kind = _pick(rng, ["log", "power"])
    causal = bool(rng.random() < 0.6)
    eps = _pick(rng, [1e-2, 1e-2, 0.5, 1.5, 1e-8])
    if rng.random() < 0.15:
        which = _pick(rng, ["n_heads", "kind", "causal", "eps"])
        args = dict(kind=kind, causal=causal, eps=eps)
        nh = n
        if which == "n_heads":
            nh = _pick(rng, _BAD_INTS + [2**40])
        elif which == "kind":
            args["kind"] = _pick(rng, ["exp", None, 1, "LOG"])
        elif which == "causal":
            args["causal"] = _pick(rng, ["yes", 1, None])
        else:
            args["eps"] = _pick(rng, _BAD_REALS + [3.0 if kind == "power" else -0.5])
        return _bad_ctor("KerpleBias", which, lambda: pt.KerpleBias(nh, **args))
    cast = _pick(rng, [None, None, torch.float64, torch.float16, torch.bfloat16])
    top1, top2 = (2.0, 1.0) if kind == "log" else (1.0, 2.0)
    r1, r2 = rng.uniform(0.05, top1, n), rng.uniform(0.05, top2, n)
    params, expect = "drawn", VALUE
    if rng.random() < 0.3:
        params = _pick(rng, ["r1 low", "r2 low", "r2 high", "r1 nan", "r2 nan", "r1 inf",
                             "r2 inf"])  # fmt: skip
        which, what = params.split()
        vec = r1 if which == "r1" else r2
        vec[int(rng.integers(n))] = {"low": _pick(rng, [0.0, -0.5, 1e-4]), "high": 3.0,
                                     "nan": np.nan, "inf": np.inf}[what]  # fmt: skip
        if what == "nan" or (what == "inf" and not (which == "r2" and kind == "power")):
            expect = REFUSED  # (the power kernel's r2 above 2 is lowered to 2: inf too)
    path = _pick(rng, ["cpu", "cpu", "device", "meta"])
    if path == "meta" and expect == REFUSED:
        expect = EITHER  # the parameters' values are not there to see
    pdtype = torch.float32 if cast is None else cast

    def effective():
        """r1, r2 as the module holds them, raised to eps (and r2 lowered to 2
        for the power kernel) as the authors clamp them, in their dtype."""
        low = float(torch.tensor(eps, dtype=pdtype))
        out = []
        for name, vec in (("r1", r1), ("r2", r2)):
            held = torch.tensor(vec).to(pdtype).double().numpy()
            held = np.where(held < low, low, held)
            if name == "r2" and kind == "power":
                held = np.minimum(held, 2.0)
            out.append(held)
        return out

    if expect == VALUE and min(float(v.min()) for v in effective()) <= 0:
        params += " eps 0 in its dtype"  # the clamp cannot keep it positive
        expect = REFUSED if path != "meta" else EITHER

    def make():
        module = pt.KerpleBias(n, kind=kind, causal=causal, eps=eps)
        if cast is not None:
            module = module.to(cast)
        _set(module.r1, r1)
        _set(module.r2, r2)
        return module

    def oracle(module, q_len, k_len, q_offset):
        a, b = effective()
        rel = _distances_np(q_len, k_len, q_offset)
        d = np.abs(rel)
        a, b = a[:, None, None], b[:, None, None]
        with np.errstate(over="ignore"):
            values = -a * np.log1p(b * d) if kind == "log" else -a * d**b
        return _masked(values, rel, causal)

    def after(module):
        for name, held in zip(("r1", "r2"), effective()):
            if not np.array_equal(_np(getattr(module, name)), held):
                return f"{name} after the call {_np(getattr(module, name))}, expected {held}"
        return None

    return _distance_case(torch, rng, "KerpleBias", f"{kind} {cast} {params}", make, n, oracle,
                          path, expect, after)  # fmt: skip


def gen_sandwich(torch, rng, pt):
    n = int(_pick(rng, [1, 2, 3, 4]))
    dim = int(_pick(rng, [2, 4, 6, 8, 16, 64]))
    causal = bool(rng.random() < 0.6)
    if rng.random() < 0.15:
        which = _pick(rng, ["n_heads", "dim", "causal"])
        nh, d, c = n, dim, causal
        if which == "n_heads":
            nh = _pick(rng, _BAD_INTS + [2**40])
        elif which == "dim":
            d = _pick(rng, _BAD_INTS + [7, 1, 2**16 + 2, 2**40])
        else:
            c = _pick(rng, ["yes", 1, None])
        return _bad_ctor("SandwichBias", which, lambda: pt.SandwichBias(nh, d, causal=c),
                         lambda m: m.bias(1), nh)  # fmt: skip
    path = _pick(rng, ["cpu", "cpu", "meta"])

    def oracle(module, q_len, k_len, q_offset):
        rel = _distances_np(q_len, k_len, q_offset)
        top = float(np.abs(rel).max())
        if top > 2**45:  # the angles themselves past a radian's precision
            return None
        k = np.arange(1, dim // 2 + 1, dtype=np.float64)
        angles = np.abs(rel)[..., None] * 10000.0 ** (-2 * k / dim)
        base = np.cos(angles).sum(-1) - dim / 2
        scale = np.arange(1, n + 1, dtype=np.float64)[:, None, None] * 8 / n
        # sums of dim / 2 cosines, each within a few ulp of its angle's
        return _masked(base / scale, rel, causal)

    return _distance_case(torch, rng, "SandwichBias", f"{dim}", lambda: pt.SandwichBias(
        n, dim, causal=causal), n, oracle, path, VALUE, holds=False)  # fmt: skip


def gen_fire(torch, rng, pt):
    n, hidden = int(_pick(rng, [1, 2, 3])), int(_pick(rng, [1, 2, 4]))
    causal = bool(rng.random() < 0.6)
    init_c = _pick(rng, [0.1, -0.3, 0.0, 2.0, 1e-9])
    init_l = _pick(rng, [512.0, 3.5, 0.0, 6, 2.0])
    eps = _pick(rng, [1e-6, 1e-3, 1.0])
    args = dict(hidden=hidden, causal=causal, init_c=init_c, init_L=init_l, eps=eps)
    if rng.random() < 0.15:
        which = _pick(rng, ["n_heads", "hidden", "causal", "init_c", "init_L", "eps"])
        nh = n
        if which == "n_heads":
            nh = _pick(rng, _BAD_INTS + [2**40])
        elif which == "hidden":
            args["hidden"] = _pick(rng, _BAD_INTS + [2**40])
        elif which == "causal":
            args["causal"] = _pick(rng, ["yes", 1, None])
        elif which == "init_c":
            args["init_c"] = _pick(rng, ["abc", float("nan"), float("inf"), True, None, 10**400])
        elif which == "init_L":
            args["init_L"] = _pick(rng, _BAD_REALS[:4] + [-1.0, True, None])
        else:
            args["eps"] = _pick(rng, _BAD_REALS)
        return _bad_ctor("FireBias", which, lambda: pt.FireBias(nh, **args))
    cast = _pick(rng, [None, None, torch.float64, torch.float16, torch.bfloat16])
    multiplier = _pick(rng, [1.0, 1.25, 0.5, -2.0])  # |multiplier * init_L| exact in any dtype
    w1, b1 = rng.standard_normal((hidden, 1)), rng.standard_normal(hidden)
    w2, b2 = rng.standard_normal((n, hidden)), rng.standard_normal(n)
    c = init_c if rng.random() < 0.5 else float(rng.uniform(-2, 2))
    params, expect = "drawn", VALUE
    if rng.random() < 0.2:
        params = _pick(rng, ["c nan", "c inf", "L_multiplier nan", "L_multiplier inf",
                             "mlp nan", "mlp inf"])  # fmt: skip
        bad = np.nan if params.endswith("nan") else np.inf
        if params.startswith("c"):
            c = bad
        elif params.startswith("L"):
            multiplier = bad
        else:
            _pick(rng, [w1, b1, w2, b2]).flat[0] = bad
        expect = REFUSED
    path = _pick(rng, ["cpu", "cpu", "device", "meta"])
    if path == "meta" and expect == REFUSED:
        expect = EITHER  # the parameters' values are not there to see

    def make():
        module = pt.FireBias(n, **args)
        if cast is not None:
            module = module.to(cast)
        for param, values in ((module.mlp[0].weight, w1), (module.mlp[0].bias, b1),
                              (module.mlp[2].weight, w2), (module.mlp[2].bias, b2),
                              (module.c, c), (module.L_multiplier, multiplier)):  # fmt: skip
            _set(param, values)
        return module

    def oracle(module, q_len, k_len, q_offset):
        a1, c1, a2, c2, scale = (_np(t) for t in (module.mlp[0].weight, module.mlp[0].bias,
                                                  module.mlp[2].weight, module.mlp[2].bias,
                                                  module.c))  # fmt: skip
        threshold = abs(multiplier * float(init_l))
        rel = _distances_np(q_len, k_len, q_offset)
        qpos = rel[:, 0]
        norm = np.log1p(np.abs(scale) * np.maximum(qpos, threshold)) + eps
        x = np.log1p(np.abs(scale) * np.abs(rel)) / norm[:, None]
        h = np.maximum(x[..., None] * a1[:, 0] + c1, 0.0)
        values = (h @ a2.T + c2).transpose(2, 0, 1)
        return _masked(values, rel, causal)

    return _distance_case(torch, rng, "FireBias", f"{cast} {params}", make, n, oracle, path,
                          expect)  # fmt: skip


# -- CoPE -----------------------------------------------------------------------------------------


def _sigmoid(a):
    """float64 sigmoid without overflow (0 at -inf)."""
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _cope_np(query, logits, emb, causal, q_offset):
    """The authors' CoPE (the paper's appendix) in float64, added to the
    logits, the keys after each query -inf when causal: query (b, h, q, d),
    logits (b, h, q, k), emb (d, npos)."""
    q_len, k_len = logits.shape[-2:]
    first = min(max(q_offset, -q_len - 1), k_len + 1)  # the same keys seen, within int64
    future = np.arange(k_len)[None, :] > np.arange(q_len)[:, None] + first
    gates = _sigmoid(logits)
    if causal:
        gates = np.where(future, 0.0, gates)
    pos = np.minimum(np.flip(np.cumsum(np.flip(gates, -1), -1), -1), emb.shape[1] - 1)
    low, high = np.floor(pos), np.ceil(pos)
    z = query @ emb  # (b, h, q, npos)
    w = pos - low
    bias = np.take_along_axis(z, high.astype(np.intp), -1) * w + np.take_along_axis(
        z, low.astype(np.intp), -1
    ) * (1 - w)
    out = logits + bias
    return (np.where(future, -np.inf, out) if causal else out), bias


def gen_cope(torch, rng, pt):
    h, d, npos = int(_pick(rng, [1, 2, 3])), int(_pick(rng, [1, 2, 3, 4])), int(
        _pick(rng, [1, 2, 3, 5, 8]))  # fmt: skip
    causal = bool(rng.random() < 0.6)
    layout = _pick(rng, ["bhsd", "bshd"])
    if rng.random() < 0.15:
        which = _pick(rng, ["n_heads", "head_dim", "max_positions", "causal", "layout"])
        a = [h, d, npos]
        kw = dict(causal=causal, layout=layout)
        if which in ("n_heads", "head_dim", "max_positions"):
            a[["n_heads", "head_dim", "max_positions"].index(which)] = _pick(
                rng, _BAD_INTS + [2**40])  # fmt: skip
        elif which == "causal":
            kw["causal"] = _pick(rng, ["yes", 1, None])
        else:
            kw["layout"] = _pick(rng, ["bsdh", None, 1, "BHSD"])
        return _bad_ctor(
            "CoPE",
            which,
            lambda: pt.CoPE(*a, **kw),
            lambda m: m(torch.zeros(1, 1, 1, d), torch.zeros(1, 1, 1, 1)),
            a[0],
        )
    cast = _pick(rng, [None, None, torch.float64, torch.float16, torch.bfloat16])
    emb = rng.standard_normal((1, d, npos))
    b, q_len = int(_pick(rng, [1, 2, 0])), int(rng.integers(1, 5))
    k_len = _pick(rng, [q_len, int(rng.integers(1, 7))])
    qdtype = _pick(rng, _floats(torch))
    ldtype = qdtype if rng.random() < 0.7 else _pick(rng, _floats(torch))
    g = _seeded(torch, rng)
    query = torch.randn(b, h, q_len, d, generator=g, dtype=torch.float64).to(qdtype)
    scale = _pick(rng, [1.0, 3.0, 20.0])
    logits = torch.randn(b, h, q_len, k_len, generator=g, dtype=torch.float64) * scale
    logits = logits.to(ldtype)
    if rng.random() < 0.3 and b:  # masked keys
        logits = logits.masked_fill(torch.rand(logits.shape, generator=g) < 0.3, float("-inf"))
    q_offset = _pick(rng, [None, None, None, 0, 2, -2, np.int64(1), 10**6, 2**62, -(2**62),
                           2**70])  # fmt: skip
    path = _pick(rng, ["cpu", "cpu", "device", "meta"])
    kind, expect = "valid", VALUE
    if rng.random() < 0.35:
        kind = _pick(rng, ["query int", "logits int", "logits bool", "query wrong-type",
                           "logits wrong-type", "query 3-d", "logits 3-d", "heads", "head_dim",
                           "batch", "q_len", "k_len 0", "q_offset", "query nan", "query inf",
                           "logits nan", "logits +inf", "pos_emb nan", "strided",
                           "meta inputs"])  # fmt: skip
        expect = REFUSED
        if kind == "query int":
            query = query.long()
        elif kind == "logits int":
            logits = logits.long()
        elif kind == "logits bool":
            logits = logits > 0
        elif kind == "query wrong-type":
            query = _pick(rng, [query.double().numpy(), None])
        elif kind == "logits wrong-type":
            logits = _pick(rng, [logits.double().numpy(), logits.tolist()])
        elif kind == "query 3-d":
            query = query.reshape(-1, q_len, d)
        elif kind == "logits 3-d":
            logits = logits.reshape(-1, q_len, k_len)
        elif kind in ("heads", "head_dim", "batch", "q_len"):
            shape = [b, h, q_len, d]
            shape[["batch", "heads", "q_len", "head_dim"].index(kind)] += 1
            query = torch.zeros(shape, dtype=qdtype)
        elif kind == "k_len 0":
            logits = logits[..., :0]
        elif kind == "q_offset":
            q_offset = _pick(rng, [0.5, "1", True, 2.0])
        elif kind in ("query nan", "query inf", "logits nan", "logits +inf"):
            if b:
                bad = float("nan") if kind.endswith("nan") else float("inf")
                if kind.startswith("query"):
                    query = query.clone()
                    query[0, 0, 0, 0] = bad
                else:
                    logits = logits.clone()
                    logits[0, 0, 0, 0] = bad
            else:
                expect = VALUE  # nothing to hold it
        elif kind == "pos_emb nan":
            emb[0, 0, int(rng.integers(npos))] = np.nan
        elif kind == "strided":  # views: a query of stride 2, logits transposed
            query = _strided(torch, torch.cat([query, query], -1))[..., :d]
            logits = logits.transpose(-1, -2).contiguous().transpose(-1, -2)
            expect = VALUE
        else:
            query, logits = query.to("meta"), logits.to("meta")
            expect = VALUE
    if path == "meta" and kind in ("query nan", "query inf", "logits nan", "logits +inf",
                                   "pos_emb nan"):  # fmt: skip
        expect = EITHER  # a shape's trace: the values are not read
    if layout == "bshd" and torch.is_tensor(query) and query.ndim == 4:
        query = query.transpose(1, 2)  # (batch, q_len, heads, head_dim), a view

    def run():
        module = pt.CoPE(h, d, npos, causal=causal, layout=layout)
        if cast is not None:
            module = module.to(cast)
        _set(module.pos_emb, emb)
        if path == "meta":
            module = module.to("meta")
        with _device_path(path == "device"):
            return module, module(query, logits, q_offset=q_offset)

    def check(result):
        module, out = result
        if out.dtype != logits.dtype or tuple(out.shape) != tuple(logits.shape):
            return f"{out.dtype} {tuple(out.shape)}, expected {logits.dtype} {tuple(logits.shape)}"
        meta = path == "meta" or kind == "meta inputs"
        if meta or out.device.type == "meta":
            return None if meta and out.device.type == "meta" else f"on {out.device}"
        q = _np(query)
        if layout == "bshd":
            q = q.transpose(0, 2, 1, 3)
        a = _np(logits)
        offset = k_len - q_len if q_offset is None else q_offset
        want, bias = _cope_np(q, a, _np(module.pos_emb)[0], causal, offset)
        tol = _tol(torch, logits.dtype)
        scale = _largest(np.abs(np.where(np.isfinite(a), a, 0.0)) + np.abs(bias))
        return _compare(torch, out, _in_range(torch, want, logits.dtype), 2 * tol * scale)

    return Case("CoPE", f"{path} {layout} {cast} {qdtype}/{ldtype} {kind}", run, check, expect)


# -- the driver ---------------------------------------------------------------------------------

GENERATORS = {
    "RotaryEmbedding": gen_rotary,
    "RotaryEmbedding(config)": gen_rotary_config,
    "apply_rotary": gen_apply_rotary,
    "ALiBi": gen_alibi,
    "T5RelativeBias": gen_t5,
    "XLPositionTerm": gen_xl,
    "DebertaRelativeBias": gen_deberta,
    "SinusoidalEmbedding": gen_sinusoid,
    "LearnedPositionEmbedding": gen_learned,
    "ComplexOrderEmbedding": gen_complex_order,
    "KerpleBias": gen_kerple,
    "SandwichBias": gen_sandwich,
    "FireBias": gen_fire,
    "CoPE": gen_cope,
}


def _attempt(fails, case):
    """Run one case; its outcome's name."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' and posenc's notes
            warnings.simplefilter("error", RuntimeWarning)  # an edge NumPy met unhandled
            result = case.run()
    except (TypeError, ValueError) as exc:
        if case.expect == VALUE:
            fails.add(SURFACE, case.name, case.perturbation, "refused a valid call",
                      f"{type(exc).__name__}: {exc}")  # fmt: skip
            return "refused?"
        return "refused"
    except Exception as exc:  # noqa: BLE001 - any other exception is what is looked for
        fails.add(SURFACE, case.name, case.perturbation, f"raised {type(exc).__name__}",
                  str(exc).splitlines()[0] if str(exc) else "")  # fmt: skip
        return "crashed"
    if case.expect == REFUSED:
        fails.add(SURFACE, case.name, case.perturbation, "accepted what it must refuse")
        return "accepted?"
    try:
        why = case.check(result)
    except Exception as exc:  # noqa: BLE001 - a result the oracle cannot read
        why = f"the result cannot be checked ({type(exc).__name__}: {exc})"
    if why:
        fails.add(SURFACE, case.name, case.perturbation, "differs from the oracle", why)
        return "differs"
    return "ok"


def run(seconds: float, seed: int, fails) -> dict:
    """Fuzz the modules for `seconds` with `seed`; failures into `fails` (a
    fuzz_api.Failures), returns the calls made by (module, outcome)."""
    import torch

    import posenc.torch as pt

    try:
        import transformers as tf

        tf.logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - depends on the machine
        tf = None
    # transformers' modules imported before the clock starts
    configs = _configs(tf) if tf is not None else []
    rng = np.random.default_rng(seed)
    counts: dict = {}
    names = sorted(GENERATORS)
    deadline = time.monotonic() + seconds
    turn = 0
    while time.monotonic() < deadline or turn < len(names):
        # every module first, then at random
        name = names[turn] if turn < len(names) else _pick(rng, names)
        turn += 1
        generate = GENERATORS[name]
        try:
            if generate is gen_rotary_config:
                case = generate(torch, rng, pt, tf, configs)
            else:
                case = generate(torch, rng, pt)
        except Exception as exc:  # noqa: BLE001 - the fuzzer's own fault, reported as such
            fails.add(SURFACE, name, "generator", f"raised {type(exc).__name__}", str(exc))
            continue
        outcome = _attempt(fails, case)
        key = (case.name, outcome)
        counts[key] = counts.get(key, 0) + 1
    return counts


if __name__ == "__main__":  # tests/fuzz_api.py's command line, this surface chosen
    sys.exit(fuzz_api.main(["--surfaces", "modules", *sys.argv[1:]]))
