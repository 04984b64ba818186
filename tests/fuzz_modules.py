"""A bounded fuzzer of posenc.torch's modules.

    python tests/fuzz_api.py --surfaces modules --seconds 30 [--seed 0] [--verbose]

Each round builds one of the modules (RotaryEmbedding from a head
dimension, or from one of transformers' config classes in the forms their
checkpoints carry; ALiBi, T5RelativeBias, XLPositionTerm,
DebertaRelativeBias) or calls apply_rotary, with constructor arguments and
inputs drawn valid or awkward one way: wrong types, bool where an int is
expected, NaN and infinities, zero and negative sizes, odd head dimensions,
float / bool / small-integer dtypes, the meta device, positions up to
2**62, empty and non-contiguous tensors.  A call must give the oracle's
result (a NumPy float64 formula written here, posenc.reference's NumPy
twin, or transformers' own rotary module, stateful calls in the same
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


# -- the driver ---------------------------------------------------------------------------------

GENERATORS = {
    "RotaryEmbedding": gen_rotary,
    "RotaryEmbedding(config)": gen_rotary_config,
    "apply_rotary": gen_apply_rotary,
    "ALiBi": gen_alibi,
    "T5RelativeBias": gen_t5,
    "XLPositionTerm": gen_xl,
    "DebertaRelativeBias": gen_deberta,
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
