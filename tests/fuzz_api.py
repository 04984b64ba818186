"""A bounded fuzzer of the public functions.

    python tests/fuzz_api.py --seconds 60 [--seed 0] [--surfaces numpy,torch,jax,modules,patch,hub]
                             [--mode both|random|check] [--verbose]

Random mode: each round picks a function and calls it with arguments drawn
from a pool of awkward values (wrong types, NaN and infinities, huge and
negative sizes, empty, zero-d, strided, byte-swapped, read-only and object
arrays, ...), positionally and by keyword.  Every call must return or raise
TypeError or ValueError (MemoryError only for sizes that cannot be
allocated) without a NumPy RuntimeWarning.

Checking mode: structured, mostly valid calls of the relative encodings,
the RoPE variants (M-RoPE, axial, xPos) and the RoPE tools, in float16,
float32, float64 and bfloat16, each perturbed one way: byte-swapped,
strided (negative strides), Fortran-order and zero-stride inputs; out= and
scores= byte-swapped, strided, or overlapping / zero-stride (writeable
views of as_strided); zero-length axes; huge sizes (2**31 .. 2**64, under
an address-space cap, so that a call mapping gigabytes fails); NaN and
infinities in data, positions and parameters.  A call must give
posenc.reference's result (or a NumPy oracle's) within its dtype's
tolerance and the canonical call's (native-order contiguous copies of the
same values), or raise TypeError/ValueError leaving out=/scores= as they
were; any other exception, a NumPy RuntimeWarning or a refusal of a layout
the canonical call takes is a failure.  The torch surface makes the same
calls with tensors (and a few torch.compile(fullgraph=True) wrappers,
compiled once) against the NumPy results; the JAX surface with arrays
eagerly, under jax.jit, jax.vmap (against the loop of unbatched calls) and
both.  torch and JAX are imported only when their surface is chosen.

Failures are collected and printed one line each, deduplicated by
(surface, function, perturbation, what happened); the exit status is 1 if
there is any.  CI runs the NumPy surface on the build with
AddressSanitizer and UndefinedBehaviorSanitizer, where a memory error
aborts the run, and the torch and JAX surfaces in a plain environment.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import math
import os
import sys
import time
import warnings

import numpy as np

import posenc
from posenc import probe
from posenc._validate import memory_limit


def value_pool(rng):
    """Candidate values for any argument."""
    base = rng.standard_normal(24) * 100
    pool = [
        None,
        True,
        False,
        0,
        1,
        2,
        3,
        4,
        7,
        8,
        16,
        64,
        -1,
        -2,
        2**62,
        -(2**63),
        2**70,
        0.0,
        -0.0,
        0.5,
        2.5,
        1e308,
        -1e308,
        float("nan"),
        float("inf"),
        float("-inf"),
        np.int64(6),
        "query",
        "key",
        "interleaved_to_half",
        np.float32(2.0),
        np.float16(1.0),
        1 + 2j,
        "",
        "a",
        "float32",
        "half",
        "interleaved",
        "concat",
        "float16",
        "float64",
        "int8",
        b"x",
        [],
        [1, 2],
        [[1.0]],
        {},
        {"rope_type": "linear"},
        (2, 2),
        object(),
        slice(1),
        np.dtype("f4"),
        np.array(3.0),
        np.array([]),
        np.zeros((0, 4)),
        base,
        base.astype(np.float32),
        base.astype(np.float16),
        base.astype(">f8"),
        base.astype(np.int32),
        base.astype(np.uint8),
        base.astype(bool),
        base.astype(complex),
        base[::-3],
        base.reshape(4, 6),
        base.reshape(4, 6).T,
        base.reshape(2, 3, 4),
        base.reshape(2, 3, 4)[:, ::-1],
        np.broadcast_to(base[:6], (4, 6)),
        np.full((4, 6), np.nan),
        np.array(["x", "y"]),
        np.array([1, "a"], dtype=object),
        np.zeros((4, 6), np.float32),
        np.zeros((6, 4), np.float64),
        np.zeros((2, 4, 4)),
        np.zeros((1, 2, 4, 8), np.float32),
        np.zeros((1, 2, 4, 8), np.float16),
    ]
    ro = np.zeros((4, 6), np.float32)
    ro.flags.writeable = False
    pool.append(ro)
    return pool


def _positional(fn):
    """The names of fn's parameters before its keyword-only ones."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds]


# the functions the random mode calls and the keywords it draws for each (the
# positional parameters are all of the signature's)
KEYWORDS = {
    posenc.sinusoid: ["base", "layout", "dtype", "out"],
    posenc.rope_frequencies: ["base", "scaling", "seq_len"],
    posenc.rope_cos_sin: [
        "base",
        "scaling",
        "layout",
        "dtype",
        "full",
        "xpos",
        "xpos_scale_base",
        "xpos_centre",
        "mrope_section",
        "axial",
    ],
    posenc.apply_rope: [
        "base",
        "scaling",
        "layout",
        "rotary_dim",
        "offset",
        "seq_axis",
        "inverse",
        "out",
        "xpos",
        "xpos_scale_base",
        "xpos_centre",
        "mrope_section",
        "mrope_interleaved",
        "axial",
    ],
    posenc.alibi_slopes: ["max_bias"],
    posenc.alibi_bias: ["slopes", "max_bias", "causal", "q_offset", "dtype", "scores", "out"],
    posenc.relative_position_bucket: ["bidirectional", "num_buckets", "max_distance"],
    posenc.t5_bias: ["bidirectional", "max_distance", "q_offset", "scores", "out"],
    posenc.relative_positions: ["max_distance", "q_offset"],
    posenc.xl_relative_table: ["attn_type", "bi_data", "clamp_len", "base", "dtype"],
    posenc.xl_position_term: ["bias", "k_len", "q_offset", "causal", "scores"],
    posenc.xl_content_bias: ["scores"],
    posenc.tener_relative_table: ["base", "dtype"],
    posenc.tener_position_term: ["v", "key_term", "scores"],
    posenc.tener_scores: ["u", "v", "scale", "key_term"],
    posenc.deberta_log_bucket: ["precision"],
    posenc.deberta_relative_positions: ["bucket_size", "max_position", "q_offset", "precision"],
    posenc.deberta_attention_bias: [
        "position_buckets",
        "max_relative_positions",
        "q_offset",
        "scale_factor",
        "precision",
        "scores",
    ],
    posenc.shaw_key_term: ["max_distance", "k_len", "q_offset", "scores"],
    posenc.shaw_value_term: ["max_distance", "q_offset"],
    posenc.tupe_bias: ["rel_table", "max_distance", "untie_cls", "scores"],
    posenc.positions_from_cu_seqlens: ["start"],
    posenc.attention_temperature: ["floor_scale", "attn_scale"],
    posenc.permute_rope_weight: ["to"],
    posenc.mrope_position_ids: [
        "image_grids",
        "video_grids",
        "spatial_merge_size",
        "attention_mask",
    ],
    posenc.vision_position_ids: ["spatial_merge_size", "convention"],
    posenc.set_num_threads: [],
    probe.cosine_similarity: [],
    probe.informativeness: ["center"],
    probe.skip_positions: [],
    probe.rope_long_term_decay: ["base"],
}

# name -> (function, positional parameter names, keyword names)
TARGETS = {fn.__name__: (fn, _positional(fn), keywords) for fn, keywords in KEYWORDS.items()}

# valid leading arguments, drawn half of the time to reach the deeper checks
VALID = {
    "sinusoid": lambda rng: [int(rng.integers(0, 9)), 2 * int(rng.integers(1, 9))],
    "apply_rope": lambda rng: [np.ones((1, 2, 3, 8), rng.choice(["f2", "f4", "f8"]))],
    "alibi_bias": lambda rng: [int(rng.integers(1, 5)), int(rng.integers(1, 6))],
    "t5_bias": lambda rng: [np.ones((8, 3), np.float32), int(rng.integers(1, 6))],
    "relative_positions": lambda rng: [int(rng.integers(1, 6))],
    "rope_cos_sin": lambda rng: [int(rng.integers(0, 6)), 2 * int(rng.integers(1, 6))],
    # the relative terms: (1, 2, 4, 8) queries and keys, tables that fit them
    "xl_relative_table": lambda rng: [int(rng.integers(0, 6)), int(rng.integers(0, 6)), 8],
    "xl_position_term": lambda rng: [np.ones((1, 2, 4, 8), np.float32), np.ones((2, 8, 8))],
    "xl_content_bias": lambda rng: [np.ones((1, 2, 4, 8), np.float32), np.ones((2, 8))],
    "tener_relative_table": lambda rng: [int(rng.integers(0, 6)), 2 * int(rng.integers(1, 5))],
    "tener_position_term": lambda rng: [np.ones((1, 2, 4, 8), np.float16)] * 2 + [np.ones((8, 8))],
    "tener_scores": lambda rng: [np.ones((1, 2, 4, 8))] * 2 + [np.ones((8, 8), np.float32)],
    "deberta_log_bucket": lambda rng: [np.arange(-9, 9), int(rng.integers(1, 8))],
    "deberta_relative_positions": lambda rng: [int(rng.integers(0, 6)), int(rng.integers(0, 6))],
    "deberta_attention_bias": lambda rng: (
        [np.ones((1, 2, 4, 8), np.float32)] * 2
        + [np.ones((2, 1024, 8), np.float32)]  # 2 x 512 rows
    ),
    "shaw_key_term": lambda rng: [np.ones((1, 2, 4, 8), np.float32), np.ones((9, 8))],
    "shaw_value_term": lambda rng: [np.ones((1, 2, 4, 4), np.float32), np.ones((9, 8))],
    "tupe_bias": lambda rng: [np.ones((2, 5, 8), np.float32)] * 2,
}


def fuzz(seconds, seed, fails=None):
    """The random mode: any call returns or raises TypeError or ValueError
    (MemoryError only for sizes that cannot be allocated) without a NumPy
    RuntimeWarning."""
    fails = Failures() if fails is None else fails
    rng = np.random.default_rng(seed)
    pool = value_pool(rng)
    # a call may write into a pool array (out=, scores=: alibi_bias leaves
    # -inf in it); each is set back after every call, so that the pool stays
    # what value_pool made and a failure reproduces from its printed call
    writable = [x for x in pool if isinstance(x, np.ndarray) and x.flags.writeable]
    pristine = [x.copy() for x in writable]
    names = sorted(TARGETS)
    deadline = time.monotonic() + seconds
    calls = 0
    counts = {}
    with warnings.catch_warnings():
        # a NumPy RuntimeWarning (overflow, invalid) marks an edge not handled
        warnings.simplefilter("error", RuntimeWarning)
        while time.monotonic() < deadline:
            name = names[rng.integers(len(names))]
            fn, positional, keywords = TARGETS[name]
            args = [pool[rng.integers(len(pool))] for _ in positional]
            if name in VALID and rng.random() < 0.5:
                valid = VALID[name](rng)
                args[: len(valid)] = valid
            kwargs = {k: pool[rng.integers(len(pool))] for k in keywords if rng.random() < 0.3}
            try:
                fn(*args, **kwargs)
                kind = "ok"
            except (TypeError, ValueError) as exc:
                kind = type(exc).__name__
            except MemoryError:
                kind = "MemoryError"
            except Exception as exc:  # noqa: BLE001 - reported, one line per kind
                kind = type(exc).__name__
                call = " ".join(f"{name}(*{args!r}, **{kwargs!r})".split())
                fails.add("numpy", name, "random", kind, f"{str(exc)[:80]}; {call[:160]}")
            finally:
                posenc.set_num_threads(0)
                for x, saved in zip(writable, pristine):
                    np.copyto(x, saved)
            calls += 1
            counts[(name, kind)] = counts.get((name, kind), 0) + 1
    return fails, counts, calls


# ============================================================== checking mode
#
# Structured, mostly valid calls of the relative encodings, the RoPE
# variants and the RoPE tools, perturbed one way at a time.  A call must
# give posenc.reference's result (or a hand-written NumPy one) within a
# tolerance for its dtype AND the result of the canonical call (the same
# values as native-order, contiguous copies), or raise TypeError or
# ValueError, leaving its out=/scores= untouched.  Failures are collected,
# one line per (surface, function, perturbation, what happened).

DTYPES = ("float16", "float32", "float64", "bfloat16")
HUGE = (2**31, 2**40, 2**62, 2**63, 2**64)
MEMORY_CAP = 2 << 30  # bytes a call may map beyond what the process has


def _dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _is_bf16(dt):
    return dt.itemsize == 2 and dt.name == "bfloat16"


def _unit(dt):
    """Unit roundoff of a float dtype."""
    dt = np.dtype(dt)
    if _is_bf16(dt):
        return 2.0**-8
    return float(np.finfo(dt).eps) / 2


def _f64(a):
    a = np.asarray(a)
    if _is_bf16(a.dtype):
        return a.astype(np.float32).astype(np.float64)
    return a.astype(np.float64)


def randn(rng, shape, dt):
    """Normal values on a grid of 1/8 (|x| < 8): products and short sums are
    exact in float32, whatever order BLAS sums them in."""
    v = np.clip(np.round(rng.standard_normal(shape) * 8), -63, 63) / 8
    return v.astype(_dtype(dt))


class Case:
    """One call: `params` by name, `positional` the names passed by position;
    `kinds` tags each array parameter ("data": floats, "pos": positions,
    "index": structural integers); `sink` the out=/scores= parameter;
    `sizes` the parameters whose huge value must be refused, `bigs` those
    where it may be valid; `reals` the float parameters and `tol` how the
    result is compared with the oracle."""

    def __init__(
        self,
        name,
        positional,
        params,
        *,
        kinds=None,
        sink=None,
        sizes=(),
        bigs=(),
        reals=(),
        tol="exact",
        oracle=None,
        pmax=0.0,
        finite=False,
    ):
        self.name, self.positional, self.params = name, positional, dict(params)
        self.kinds = dict(kinds or {})
        self.sink, self.sizes, self.bigs, self.reals = sink, sizes, bigs, reals
        self.tol, self.oracle, self.pmax, self.finite = tol, oracle, pmax, finite

    def split(self, params=None):
        params = self.params if params is None else params
        args = [params[n] for n in self.positional]
        kwargs = {k: val for k, val in params.items() if k not in self.positional}
        return args, kwargs


def _canonical_value(x):
    if isinstance(x, np.ndarray):
        c = np.array(x, order="C", copy=True)
        if c.dtype.byteorder not in "=|":
            c = c.astype(c.dtype.newbyteorder("="))
        return c
    return x


def _canonical(params):
    return {k: _canonical_value(val) for k, val in params.items()}


# ---------------------------------------------------------------- case generators


class _Sizes:
    def __init__(self, rng, zero):
        self.rng, self.zero = rng, zero

    def __call__(self, lo, hi):
        if self.zero and self.rng.random() < 0.4:
            return 0
        return int(self.rng.integers(lo, hi + 1))


def _generate(rng, name, zero, dtypes=DTYPES):
    """A case of `name` (sizes drawn again until the generator can use them)."""
    for _ in range(20):
        try:
            return GENERATORS[name](rng, _Sizes(rng, zero), _pick(rng, dtypes))
        except ValueError:  # an empty range drawn from: sizes of 0
            continue
    return GENERATORS[name](rng, _Sizes(rng, False), _pick(rng, dtypes))


def _other(rng, dt):
    """The dtype of a second array: any but bfloat16, which goes with itself only
    (NumPy does not promote ml_dtypes' bfloat16 with float16)."""
    return dt if dt == "bfloat16" else _pick(rng, ("float16", "float32", "float64"))


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _maybe(rng, p=0.5):
    return rng.random() < p


def _scores(rng, shape):
    dt = _pick(rng, ("float16", "float32", "float64"))
    return rng.standard_normal(shape).astype(_dtype(dt))


def g_xl_relative_table(rng, n, dt):
    q, k = n(0, 6), n(0, 6)
    p = {"q_len": q, "k_len": k, "dim": 2 * n(1, 5)}
    if _maybe(rng):
        p["attn_type"] = _pick(rng, ["bi", "uni"])
    if _maybe(rng, 0.3):
        p["bi_data"] = True
    if _maybe(rng, 0.3):
        p["clamp_len"] = int(rng.integers(0, 4))
    if _maybe(rng, 0.3):
        p["base"] = float(_pick(rng, [100.0, 10000.0, 2.5]))
    if dt != "bfloat16" or _maybe(rng):
        p["dtype"] = dt
    return Case(
        "xl_relative_table",
        ["q_len", "k_len", "dim"],
        p,
        # a "uni" table has rows for the distances k_len .. 0 whatever q_len is
        sizes=("k_len", "dim") if p.get("attn_type") == "uni" else ("q_len", "k_len", "dim"),
        bigs=("clamp_len",),
        reals=("base",),
        tol="table",
        pmax=q + k,
    )


def _term(name, positional, params, kinds=None, sink=None, **kwargs):
    """The Case of a relative term (its positional arguments data unless
    `kinds` says otherwise): compared with the oracle within the terms'
    tolerance."""
    if kinds is None:
        kinds = {key: "data" for key in positional}
    return Case(name, positional, params, kinds=kinds, sink=sink, tol="term", **kwargs)


def _maybe_scores(rng, p, shape):
    """Sometimes (0.4) scores= of `shape` (a callable: drawn only then) into
    `p`: the sink's name, else None."""
    if not _maybe(rng, 0.4):
        return None
    p["scores"] = _scores(rng, shape() if callable(shape) else shape)
    return "scores"


def g_xl_position_term(rng, n, dt):
    b, h, q, k, d = n(1, 2), n(1, 3), n(0, 5), n(0, 7), 2 * n(1, 4)
    rows = k + q + int(rng.integers(0, 3))
    p = {"q": randn(rng, (b, h, q, d), dt)}
    p["r"] = randn(rng, (h, rows, d) if _maybe(rng) else (rows, d), _other(rng, dt))
    kinds = {"q": "data", "r": "data"}
    if _maybe(rng):
        p["bias"], kinds["bias"] = randn(rng, (h, d), dt), "data"
    if _maybe(rng):
        p["k_len"] = k
    if _maybe(rng, 0.3):
        p["q_offset"] = int(rng.integers(0, max(1, rows - q)))
    if _maybe(rng, 0.3):
        p["causal"] = True
    sink = _maybe_scores(rng, p, (b, h, q, k))
    return _term(
        "xl_position_term", ["q", "r"], p, kinds, sink, sizes=("k_len",), bigs=("q_offset",)
    )


def g_xl_content_bias(rng, n, dt):
    b, h, k, d = n(1, 2), n(1, 3), n(0, 6), 2 * n(1, 4)
    p = {"k": randn(rng, (b, h, k, d), dt), "bias": randn(rng, (h, d), _other(rng, dt))}
    sink = _maybe_scores(rng, p, lambda: (b, h, n(1, 3), k))
    return _term("xl_content_bias", ["k", "bias"], p, sink=sink)


def g_tener_relative_table(rng, n, dt):
    length = n(0, 8)
    p = {"length": length, "dim": 2 * n(2, 5)}
    if _maybe(rng, 0.3):
        p["base"] = float(_pick(rng, [100.0, 10000.0]))
    if dt != "bfloat16" or _maybe(rng):
        p["dtype"] = dt
    return Case(
        "tener_relative_table",
        ["length", "dim"],
        p,
        sizes=("length", "dim"),
        reals=("base",),
        tol="table",
        pmax=length,
    )


def _tener_common(rng, n, dt):
    b, h, length, d = n(1, 2), n(1, 3), n(0, 5), 2 * n(1, 4)
    m = length + int(rng.integers(0, 3))
    p = {"q": randn(rng, (b, h, length, d), dt), "k": randn(rng, (b, h, length, d), dt)}
    p["table"] = randn(rng, (2 * m, d), _other(rng, dt))
    return p, (b, h, length, d), {"q": "data", "k": "data", "table": "data"}


def g_tener_position_term(rng, n, dt):
    p, (b, h, length, d), kinds = _tener_common(rng, n, dt)
    if _maybe(rng):
        p["v"], kinds["v"] = randn(rng, (h, d), dt), "data"
    if _maybe(rng, 0.3):
        p["key_term"] = False
    sink = _maybe_scores(rng, p, (b, h, length, length))
    return _term("tener_position_term", ["q", "k", "table"], p, kinds, sink)


def g_tener_scores(rng, n, dt):
    p, (b, h, length, d), kinds = _tener_common(rng, n, dt)
    for name in ("u", "v"):
        if _maybe(rng):
            p[name], kinds[name] = randn(rng, (h, d), dt), "data"
    if _maybe(rng):
        p["scale"] = True
    if _maybe(rng, 0.3):
        p["key_term"] = False
    return _term("tener_scores", ["q", "k", "table"], p, kinds)


def _buckets(rng):
    mid = int(rng.integers(1, 9))
    return 2 * mid, int(rng.integers(mid + 2, 4 * mid + 64))


def g_deberta_log_bucket(rng, n, dt):
    size, maxpos = _buckets(rng)
    rel = rng.integers(-3 * maxpos, 3 * maxpos, size=(n(0, 4), n(0, 9)))
    rel = rel.astype(_pick(rng, ["i8", "i4", "i2"]))
    p = {"relative_pos": rel, "bucket_size": size, "max_position": maxpos}
    if _maybe(rng):
        p["precision"] = _pick(rng, ["float32", "float64"])
    return Case(
        "deberta_log_bucket",
        ["relative_pos", "bucket_size", "max_position"],
        p,
        kinds={"relative_pos": "pos"},
        bigs=("bucket_size", "max_position"),
    )


def g_deberta_relative_positions(rng, n, dt):
    p = {"q_len": n(0, 7), "k_len": n(0, 7)}
    if _maybe(rng):
        p["bucket_size"], p["max_position"] = _buckets(rng)
    if _maybe(rng, 0.3):
        p["q_offset"] = int(rng.integers(0, 9))
    if _maybe(rng, 0.3):
        p["precision"] = _pick(rng, ["float32", "float64"])
    return Case(
        "deberta_relative_positions",
        ["q_len", "k_len"],
        p,
        sizes=("q_len", "k_len"),
        bigs=("q_offset", "bucket_size", "max_position"),
    )


def g_deberta_attention_bias(rng, n, dt):
    b, h, q, k, d = n(1, 2), n(1, 3), n(0, 5), n(0, 6), 2 * n(1, 4)
    p = {"q": randn(rng, (b, h, q, d), dt), "k": randn(rng, (b, h, k, d), dt)}
    kinds = {"q": "data", "k": "data"}
    if _maybe(rng):
        size, maxpos = _buckets(rng)
        p["position_buckets"], p["max_relative_positions"] = size // 2, maxpos
        span = size // 2
    else:
        span = int(rng.integers(1, 9))
        p["max_relative_positions"] = span
    which = int(rng.integers(3))
    for i, name in enumerate(("pos_key", "pos_query")):
        if which == i or which == 2:
            shape = (h, 2 * span, d) if _maybe(rng) else (2 * span, d)
            p[name], kinds[name] = randn(rng, shape, _other(rng, dt)), "data"
        else:
            p[name] = None
    if _maybe(rng, 0.3):
        p["q_offset"] = int(rng.integers(0, 9))
    if _maybe(rng, 0.3):
        p["scale_factor"] = float(_pick(rng, [1.0, 2.0, 3.0]))
    if _maybe(rng, 0.3):
        p["precision"] = _pick(rng, ["float32", "float64"])
    sink = _maybe_scores(rng, p, (b, h, q, k))
    return _term(
        "deberta_attention_bias",
        ["q", "k", "pos_key", "pos_query"],
        p,
        kinds,
        sink,
        bigs=("q_offset",),
        reals=("scale_factor",),
    )


def g_shaw_key_term(rng, n, dt):
    b, h, q, k, d, m = n(1, 2), n(1, 3), n(0, 5), n(0, 7), 2 * n(1, 4), int(rng.integers(0, 4))
    p = {"q": randn(rng, (b, h, q, d), dt), "max_distance": m}
    p["rel_keys"] = randn(
        rng, (h, 2 * m + 1, d) if _maybe(rng) else (2 * m + 1, d), _other(rng, dt)
    )
    p["k_len"] = k
    if _maybe(rng, 0.3):
        p["q_offset"] = int(rng.integers(0, 9))
    sink = _maybe_scores(rng, p, (b, h, q, k))
    return _term(
        "shaw_key_term", ["q", "rel_keys"], p, sink=sink, sizes=("k_len",), bigs=("q_offset",)
    )


def g_shaw_value_term(rng, n, dt):
    b, h, q, k, d, m = n(1, 2), n(1, 3), n(0, 5), n(0, 7), 2 * n(1, 4), int(rng.integers(0, 4))
    w = (np.round(rng.random((b, h, q, k)) * 8) / 8).astype(_dtype(dt))
    p = {
        "weights": w,
        "rel_values": randn(rng, (2 * m + 1, d), _other(rng, dt)),
        "max_distance": m,
    }
    if _maybe(rng, 0.3):
        p["q_offset"] = int(rng.integers(0, 9))
    return _term("shaw_value_term", ["weights", "rel_values"], p, bigs=("q_offset",))


def g_tupe_bias(rng, n, dt):
    h, length, d = n(1, 3), n(1, 6), 2 * n(1, 4)
    untie = bool(_maybe(rng))
    p = {
        "pos_q": randn(rng, (h, length, d), dt),
        "pos_k": randn(rng, (h, length, d), dt),
        "untie_cls": untie,
    }
    kinds = {"pos_q": "data", "pos_k": "data"}
    if _maybe(rng):
        nb = 2 * int(rng.integers(1, 9))
        p["rel_table"] = randn(rng, (nb + untie, h), _other(rng, dt))
        kinds["rel_table"] = "data"
        p["max_distance"] = int(rng.integers(nb // 2 + 1, 4 * nb + 2))
    size = max(0, length - 1) if untie else length
    sink = _maybe_scores(rng, p, lambda: (n(1, 2), h, size, size))
    return _term("tupe_bias", ["pos_q", "pos_k"], p, kinds, sink, bigs=("max_distance",))


def _rope_variant(rng, n, half):
    """Options of a RoPE variant for `half` pairs and the rows of positions
    it takes (0: none)."""
    kind = _pick(rng, ["plain", "plain", "mrope", "mrope_interleaved", "axial", "xpos"])
    if kind in ("mrope", "mrope_interleaved") and half >= 3:
        a = int(rng.integers(1, half - 1))
        b = int(rng.integers(1, half - a))
        opts = {"mrope_section": [a, b, half - a - b]}
        if kind == "mrope_interleaved":
            opts["mrope_interleaved"] = True
        return opts, 3
    if kind == "axial" and half % 2 == 0:
        return {"axial": 2}, 2
    if kind == "xpos":
        opts = {"xpos": _pick(rng, ["query", "key"])}
        if _maybe(rng):
            opts["xpos_scale_base"] = float(_pick(rng, [64.0, 512.0]))
        return opts, 0
    return {}, 0


def g_apply_rope(rng, n, dt):
    b, h, s, d = n(1, 2), n(1, 3), n(0, 6), 2 * n(1, 6)
    p = {"x": randn(rng, (b, h, s, d), dt)}
    opts, rows = _rope_variant(rng, n, d // 2)
    p.update(opts)
    kinds = {"x": "data"}
    if rows:
        pos = rng.integers(0, 50, size=(rows, b, s) if rows == 3 else (rows, s))
        p["positions"], kinds["positions"] = pos, "pos"
    elif _maybe(rng, 0.7):
        pos = rng.integers(0, 1000, size=_pick(rng, [(s,), (b, s), (b, h, s)]))
        if _maybe(rng, 0.3):
            pos = pos + rng.random(pos.shape)
        p["positions"], kinds["positions"] = pos, "pos"
    if not opts and _maybe(rng, 0.3):
        p["layout"] = _pick(rng, ["half", "interleaved", "interleaved_to_half"])
    if "xpos" in opts and _maybe(rng):
        p["layout"] = "interleaved"
    if not rows and d and _maybe(rng, 0.2):
        p["rotary_dim"] = 2 * int(rng.integers(1, d // 2 + 1))
    if _maybe(rng, 0.2):
        p["offset"] = int(rng.integers(0, 100))
    if _maybe(rng, 0.3):
        p["inverse"] = True
    if _maybe(rng, 0.2):
        p["base"] = float(_pick(rng, [500.0, 10000.0, 1e6]))
    sink = None
    if _maybe(rng, 0.3):
        p["out"], sink = np.zeros_like(p["x"]), "out"
    pmax = 1000 + p.get("offset", 0)
    return Case(
        "apply_rope",
        ["x", "positions"] if "positions" in p else ["x"],
        p,
        kinds=kinds,
        sink=sink,
        sizes=("rotary_dim",),
        bigs=("offset",),
        reals=("base", "xpos_scale_base"),
        tol="rope",
        pmax=pmax,
    )


def g_rope_cos_sin(rng, n, dt):
    d = 2 * n(1, 6)
    opts, rows = _rope_variant(rng, n, d // 2)
    p = {"dim": d, **opts}
    kinds = {}
    if rows:
        shape = (rows, n(1, 2), n(0, 5)) if rows == 3 else (rows, n(0, 6))
        p["positions"], kinds["positions"] = rng.integers(0, 50, size=shape), "pos"
    elif _maybe(rng, 0.3):
        p["positions"] = n(0, 6)
    else:
        pos = rng.integers(0, 1000, size=(n(0, 3), n(0, 5)))
        if _maybe(rng, 0.3):
            pos = pos + rng.random(pos.shape)
        p["positions"], kinds["positions"] = pos, "pos"
    if not opts and _maybe(rng, 0.3):
        p["layout"] = "interleaved"
    if not rows and _maybe(rng, 0.2):
        p["full"] = False
    if _maybe(rng, 0.2):
        p["base"] = float(_pick(rng, [500.0, 10000.0, 1e6]))
    p["dtype"] = dt
    sizes = ("positions", "dim") if isinstance(p["positions"], int) else ("dim",)
    return Case(
        "rope_cos_sin",
        ["positions", "dim"],
        p,
        kinds=kinds,
        sizes=sizes,
        reals=("base", "xpos_scale_base"),
        tol="rope",
        pmax=1000,
    )


# the tools: hand-written oracles


def o_positions_from_cu_seqlens(cu_seqlens, *, start=0):
    cu = [int(c) for c in np.asarray(cu_seqlens)]
    out = [start + t - cu[k] for k in range(len(cu) - 1) for t in range(cu[k], cu[k + 1])]
    return np.array(out, dtype=np.int64)


def g_positions_from_cu_seqlens(rng, n, dt):
    lengths = [n(0, 5) for _ in range(n(0, 4))]
    cu = np.cumsum([0] + lengths).astype(_pick(rng, ["i8", "i4", "u4", "i2"]))
    p = {"cu_seqlens": cu}
    if _maybe(rng, 0.3):
        p["start"] = int(rng.integers(0, 5))
    return Case(
        "positions_from_cu_seqlens",
        ["cu_seqlens"],
        p,
        kinds={"cu_seqlens": "index"},
        bigs=("start",),
        oracle=o_positions_from_cu_seqlens,
        finite=True,
    )


def o_attention_temperature(positions, *, floor_scale=8192, attn_scale=0.1):
    pos = np.asarray(positions)
    pos = np.arange(int(pos)) if pos.ndim == 0 and pos.dtype.kind in "iu" else pos
    out = [
        1 + attn_scale * math.log(1 + math.floor((float(x) + 1) / floor_scale))
        for x in np.asarray(pos, dtype=np.float64).ravel()
    ]
    return np.array(out, dtype=np.float64).reshape(np.shape(pos))


def g_attention_temperature(rng, n, dt):
    if _maybe(rng, 0.3):
        p = {"positions": n(0, 9)}
        kinds = {}
    else:
        p = {"positions": rng.integers(0, 40000, size=(n(0, 3), n(0, 5)))}
        kinds = {"positions": "pos"}
    if _maybe(rng):
        p["floor_scale"] = float(_pick(rng, [8192.0, 16.0, 1.5]))
    if _maybe(rng):
        p["attn_scale"] = float(_pick(rng, [0.1, 1.0, -0.5]))
    sizes = ("positions",) if isinstance(p["positions"], int) else ()
    return Case(
        "attention_temperature",
        ["positions"],
        p,
        kinds=kinds,
        sizes=sizes,
        reals=("floor_scale", "attn_scale"),
        tol="float64",
        oracle=o_attention_temperature,
        finite=True,
    )


def o_permute_rope_weight(weight, n_heads, *, to="half"):
    w = np.asarray(weight)
    head = w.shape[0] // n_heads
    half = head // 2
    out = np.empty_like(w)
    for hd in range(n_heads):
        for i in range(half):
            for j in range(2):  # interleaved feature 2i + j <-> half feature j * half + i
                a, b = hd * head + 2 * i + j, hd * head + j * half + i
                if to == "half":
                    out[b] = w[a]
                else:
                    out[a] = w[b]
    return out


def g_permute_rope_weight(rng, n, dt):
    heads, head = n(1, 3), 2 * n(1, 4)
    shape = (heads * head,) if _maybe(rng, 0.3) else (heads * head, n(0, 5))
    p = {"weight": randn(rng, shape, dt), "n_heads": heads}
    if _maybe(rng):
        p["to"] = _pick(rng, ["half", "interleaved"])
    return Case(
        "permute_rope_weight",
        ["weight", "n_heads"],
        p,
        kinds={"weight": "data"},
        sizes=("n_heads",),
        oracle=o_permute_rope_weight,
    )


def g_mrope_position_ids(rng, n, dt):
    merge = int(_pick(rng, [1, 2]))
    batch = n(1, 2)
    rows, images, videos = [], [], []
    for _ in range(batch):
        row = []
        for _ in range(int(rng.integers(0, 4))):
            kind = int(rng.integers(0, 3))
            if kind == 0:
                row += [0] * int(rng.integers(1, 4))
                continue
            t, h, w = (
                int(rng.integers(1, 3)),
                merge * int(rng.integers(1, 3)),
                merge * int(rng.integers(1, 3)),
            )
            (images if kind == 1 else videos).append((t if kind == 2 else 1, h, w))
            t = t if kind == 2 else 1
            row += [kind] * (t * (h // merge) * (w // merge))
            row += [0]  # a text token between two images
        rows.append(row)
    seq = max((len(r) for r in rows), default=0)
    types = np.zeros((batch, seq), dtype=_pick(rng, ["i8", "i4", "u1"]))
    mask = np.zeros((batch, seq), dtype=np.int64)
    for i, row in enumerate(rows):  # left padding
        types[i, seq - len(row) :] = row
        mask[i, seq - len(row) :] = 1
    p = {"token_types": types, "spatial_merge_size": merge}
    kinds = {"token_types": "index"}
    if images:
        p["image_grids"], kinds["image_grids"] = np.array(images, np.int64), "index"
    if videos:
        p["video_grids"], kinds["video_grids"] = np.array(videos, np.int64), "index"
        if _maybe(rng):
            p["video_time_intervals"] = rng.random(len(videos)) * 3
            kinds["video_time_intervals"] = "real"
        if _maybe(rng, 0.3):
            p["video_frames_apart"] = True
    if _maybe(rng) or any(len(r) < seq for r in rows):
        p["attention_mask"], kinds["attention_mask"] = mask, "index"
    return Case("mrope_position_ids", ["token_types"], p, kinds=kinds, oracle="finite", finite=True)


def g_vision_position_ids(rng, n, dt):
    if _maybe(rng, 0.3):
        grids = np.array([n(1, 4), n(1, 4)]) if _maybe(rng) else np.array(n(1, 4))
        p = {"grids": grids, "convention": "llama4"}
    else:
        merge = int(_pick(rng, [1, 2]))
        grids = [(n(1, 2), merge * n(1, 3), merge * n(1, 3)) for _ in range(n(0, 3))]
        p = {"grids": np.array(grids, np.int64).reshape(-1, 3), "spatial_merge_size": merge}
    return Case(
        "vision_position_ids", ["grids"], p, kinds={"grids": "index"}, oracle="finite", finite=True
    )


def g_rope_frequencies(rng, n, dt):
    d = 2 * n(1, 8)
    p = {"dim": d}
    if _maybe(rng):
        p["scaling"] = _pick(
            rng,
            [
                {"rope_type": "linear", "factor": 2.0},
                {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
            ],
        )
    if _maybe(rng, 0.3):
        p["base"] = float(_pick(rng, [500.0, 1e6]))
    return Case("rope_frequencies", ["dim"], p, sizes=("dim",), reals=("base",), tol="float64")


GENERATORS = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("g_")}


# ---------------------------------------------------------------- results and oracles


class Failures:
    """Failures, one per (surface, function, perturbation, what happened)."""

    def __init__(self):
        self.seen = {}

    def add(self, surface, name, perturbation, what, detail=""):
        key = (surface, name, perturbation, what)
        if key in self.seen:
            self.seen[key][1] += 1
        else:
            self.seen[key] = [detail, 1]

    def __len__(self):
        return len(self.seen)

    def report(self, file=sys.stdout):
        for (surface, name, pert, what), (detail, n) in sorted(self.seen.items()):
            line = f"FAIL {surface}: {name} [{pert}] {what}"
            if detail:
                line += f": {detail}"
            print(line[:300] + (f" (x{n})" if n > 1 else ""), file=file)


def _arrays(result):
    if isinstance(result, tuple):
        out = []
        for r in result:
            out.extend(_arrays(r))
        return out
    return [np.asarray(result)]


def _values(a):
    """An array's values as a native NumPy array (bfloat16 as float32)."""
    a = np.asarray(a)
    if _is_bf16(a.dtype):
        return a.astype(np.float32)
    if a.dtype.byteorder not in "=|":
        return a.astype(a.dtype.newbyteorder("="))
    return a


def _pairs(got, want, count, other):
    """(why not, []) if the arrays of two results differ in number, shape or
    dtype (byte order aside), the second's `count` of results and `other`
    shape or dtype named so; else (None, their pairs)."""
    g, w = _arrays(got), _arrays(want)
    if len(g) != len(w):
        return f"{len(g)} results, {count} {len(w)}", []
    for a, b in zip(g, w):
        if a.shape != b.shape:
            return f"shape {a.shape}, {other} {b.shape}", []
        if np.dtype(a.dtype).newbyteorder("=") != np.dtype(b.dtype).newbyteorder("="):
            return f"dtype {a.dtype}, {other} {b.dtype}", []
    return None, list(zip(g, w))


def _same(got, want):
    """None if the two results hold the same values (NaN where NaN), else why not."""
    why, pairs = _pairs(got, want, "expected", "expected")
    if why is not None:
        return why
    for a, b in pairs:
        va, vb = _values(a), _values(b)
        if not np.array_equal(va, vb, equal_nan=va.dtype.kind in "fc"):
            bad = np.flatnonzero(
                ~(
                    (va == vb) | (np.isnan(va) & np.isnan(vb))
                    if va.dtype.kind in "fc"
                    else va == vb
                ).ravel()
            )
            i = int(bad[0])
            return (
                f"{bad.size} of {va.size} values differ, e.g. at {i}: "
                f"{va.ravel()[i]!r} vs {vb.ravel()[i]!r}"
            )
    return None


def _tolerance(case, params, want):
    dt = want.dtype
    if dt.kind in "iub":
        return 0.0
    u_out = _unit(dt)
    finite = _f64(want)[np.isfinite(_f64(want))]
    scale = max(1.0, float(np.abs(finite).max(initial=0.0)))
    if case.tol == "float64":
        return 4e-15 * scale
    if case.tol == "table":
        return 4 * u_out + 1e-14 * (1 + case.pmax)
    if case.tol == "rope":
        x = params.get("x")
        if x is not None:
            xs = _f64(x)
            scale = max(scale, float(np.abs(xs[np.isfinite(xs)]).max(initial=0.0)))
        pmax = case.pmax + abs(params.get("offset", 0) or 0)
        if dt == np.float64:
            return 16e-16 * scale * (1.0 + pmax)
        f32 = 8 * 2.0**-24 * scale * (1.0 + pmax * 2.0**-26)
        return f32 if dt == np.float32 else 4 * u_out * scale + f32
    # the relative terms
    # (reference.tupe_bias works in float32 for float16/32 inputs whatever the
    # scores' dtype; the other twins, like posenc, in float64 for float64 scores)
    wide = any(
        isinstance(val, np.ndarray) and val.dtype == np.float64
        for k, val in params.items()
        if not (case.name == "tupe_bias" and k == "scores")
    )
    u_work = 2.0**-53 if wide else 2.0**-24
    return (8 * u_out + 64 * u_work) * scale


def _close(case, params, got, want):
    """None if `got` is the oracle's result within the dtype's tolerance."""
    why, pairs = _pairs(got, want, "the oracle", "the oracle's")
    if why is not None:
        return why
    for a, b in pairs:
        va, vb = _f64(a), _f64(b)
        if va.dtype.kind not in "fc" and not np.array_equal(va, vb):
            return "values differ from the oracle's"
        nan_a, nan_b = np.isnan(va), np.isnan(vb)
        if not np.array_equal(nan_a, nan_b):
            return f"NaN at {int(np.flatnonzero(nan_a != nan_b)[0])} in one and not the other"
        inf = np.isinf(va) | np.isinf(vb)
        if not np.array_equal(va[inf], vb[inf]):
            return "infinities differ from the oracle's"
        ok = ~(nan_a | inf)
        err = np.abs(va[ok] - vb[ok])
        tol = _tolerance(case, params, b)
        if err.size and err.max() > tol:
            i = int(np.argmax(err))
            return (
                f"max error {err.max():.3g} > {tol:.3g} (dtype {b.dtype}): "
                f"{va[ok][i]!r} vs the oracle's {vb[ok][i]!r}"
            )
    return None


def _oracle(case, params):
    """The oracle's result for `params` (canonical), or None if there is none."""
    oracle = case.oracle
    if oracle == "finite":
        return None
    if oracle is None:
        oracle = getattr(posenc.reference, case.name)
    args, kwargs = case.split(params)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return oracle(*args, **kwargs)


def _rss_mapped():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


@functools.cache
def _can_fail_allocations():
    """Whether an allocation past the cap fails with MemoryError: not under
    AddressSanitizer, unless allocator_may_return_null=1 (it aborts)."""
    try:
        with open("/proc/self/maps") as f:
            asan = "libasan" in f.read()
    except OSError:
        asan = "libasan" in os.environ.get("LD_PRELOAD", "")
    return not asan or "allocator_may_return_null=1" in os.environ.get("ASAN_OPTIONS", "")


def _fits_the_machine(label):
    """Whether the huge size of `label` ("huge k=2**31") times 8 bytes fits
    in the memory posenc allows a result (its shape_size rule): such a
    call may allocate it, which the fuzz's cap turns into a MemoryError."""
    value = 2 ** int(label.split("=2**")[1].split()[0])
    return value * 8 <= memory_limit()[0]


class capped:
    """Address space limited to what the process maps now plus MEMORY_CAP
    (the soft limit, set back afterwards): a call that maps gigabytes
    fails with MemoryError instead of swapping the machine."""

    def __enter__(self):
        try:
            import resource

            self.saved = resource.getrlimit(resource.RLIMIT_AS)
            limit = _rss_mapped() + MEMORY_CAP
            hard = self.saved[1]
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
            self.resource = resource
        except (ImportError, OSError, ValueError):
            self.resource = None
        return self

    def __exit__(self, *exc):
        if self.resource is not None:
            self.resource.setrlimit(self.resource.RLIMIT_AS, self.saved)
        return False


def _call(fn, args, kwargs):
    """(result, None) or (None, exception)."""
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - every kind is judged by the caller
        return None, exc
    finally:
        posenc.set_num_threads(0)


def _buffer(a):
    """A copy of every byte of an array's memory (through its base)."""
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
    return base, np.frombuffer(base.tobytes(order="A"), np.uint8).copy() if base.size else b""


def _snapshot(params):
    """The bytes under every array argument, to tell whether a call wrote them."""
    return {k: _buffer(a) for k, a in params.items() if isinstance(a, np.ndarray)}


def _changed(snap, skip=None):
    for k, (base, saved) in snap.items():
        if k == skip:
            continue
        now = np.frombuffer(base.tobytes(order="A"), np.uint8) if base.size else b""
        if not np.array_equal(now, saved):
            return k
    return None


def _variant(case, label):
    """`label`, with the RoPE variant the call uses."""
    for key in ("mrope_interleaved", "mrope_section", "axial", "xpos"):
        if case.params.get(key) is not None:
            return f"{label} ({key})"
    return label


def _what(exc):
    return type(exc).__name__


# ---------------------------------------------------------------- perturbations


def _strided(rng, a, reverse=True):
    """The values of `a` in a non-contiguous view (negative strides for data)."""
    if a.ndim == 0 or a.size == 0:
        return a
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
    view = big[..., 1::2]
    view[...] = a
    if reverse:
        axis = int(rng.integers(a.ndim))
        flipped = np.flip(view, axis)
        flipped[...] = a  # the same values, read backwards from memory
        return flipped
    return view


def _byteswapped(a):
    if a.dtype.kind not in "iuf" or a.dtype.itemsize == 1 or _is_bf16(a.dtype):
        return a
    return a.astype(a.dtype.newbyteorder(">" if a.dtype.byteorder in "=<" else "<"))


def _zero_stride(rng, a):
    """A read-only view repeating one slice of `a` along an axis (stride 0)."""
    axes = [i for i in range(a.ndim) if a.shape[i] > 1]
    if not axes:
        return a
    axis = _pick(rng, axes)
    return np.broadcast_to(np.take(a, [0], axis=axis), a.shape)


def _aliasing(rng, a):
    """A writeable view of `a`'s shape whose elements overlap (a zero stride,
    or two axes with the same stride)."""
    if a.ndim == 0 or a.size < 2:
        return None
    store = np.zeros(a.size + 16, a.dtype)
    strides = list(np.empty(a.shape, a.dtype).strides)
    axes = [i for i in range(a.ndim) if a.shape[i] > 1]
    if not axes:
        return None
    axis = _pick(rng, axes)
    if _maybe(rng) or a.ndim < 2:
        strides[axis] = 0
    else:
        strides[axis] = a.itemsize  # rows that overlap the next ones
        if axis == a.ndim - 1:
            return None
    offsets = sum(np.indices(a.shape).reshape(a.ndim, -1)[i] * strides[i] for i in range(a.ndim))
    if np.unique(offsets).size == a.size:  # rows of length one: apart after all
        return None
    view = np.lib.stride_tricks.as_strided(store, a.shape, strides, writeable=True)
    view[...] = a[(0,) * a.ndim]
    return view


def _nonfinite(rng, case, params):
    """`params` with a NaN or an infinity in one float array or parameter;
    None if the case has none."""
    value = _pick(rng, [np.nan, np.inf, -np.inf])
    arrays = [
        k
        for k, kind in case.kinds.items()
        if kind in ("data", "pos", "real")
        and isinstance(params.get(k), np.ndarray)
        and params[k].size
    ]
    reals = [k for k in case.reals if k in params] + [
        k for k in case.reals if k not in params and rng.random() < 0.5
    ]
    choices = arrays + reals
    if not choices:
        return None, None
    k = _pick(rng, choices)
    params = dict(params)
    if k in arrays:
        a = params[k]
        if a.dtype.kind != "f" and not _is_bf16(a.dtype):
            a = a.astype(np.float64)
        else:
            a = a.copy()
        a.reshape(-1)[int(rng.integers(a.size))] = value
        params[k] = a
    else:
        params[k] = float(value)
    return params, f"nonfinite {k}={value}"


PERTURBATIONS = (
    "byteswap",
    "strided",
    "fortran",
    "zero-stride",
    "sink-layout",
    "sink-alias",
    "huge",
    "nonfinite",
    "zero-size",
)


def _perturb(rng, case, kind):
    """(params, label, expectation) for one perturbation of `case`, or None.
    expectation: "same" (the canonical result), "refuse" (TypeError or
    ValueError), "refuse-size" (likewise; a result is a failure) or
    "oracle" (the oracle's result, or a refusal)."""
    p = dict(case.params)
    arrays = [k for k in case.kinds if isinstance(p.get(k), np.ndarray)]
    if kind == "byteswap":
        swapped = [k for k in arrays if _byteswapped(p[k]) is not p[k]]
        if not swapped:
            return None
        for k in swapped:
            p[k] = _byteswapped(p[k])
        return p, "byteswap " + ",".join(swapped), "same"
    if kind == "strided":
        if not arrays:
            return None
        for k in arrays:
            p[k] = _strided(rng, p[k], reverse=case.kinds[k] != "index")
        return p, "strided", "same"
    if kind == "fortran":
        if not arrays:
            return None
        for k in arrays:
            p[k] = np.array(p[k], order="F")
        return p, "fortran", "same"
    if kind == "zero-stride":
        data = [k for k in arrays if case.kinds[k] == "data"]
        if not data:
            return None
        k = _pick(rng, data)
        p[k] = _zero_stride(rng, p[k])
        return p, f"zero-stride {k}", "same"
    if kind == "sink-layout":
        if case.sink is None:
            return None
        s = p[case.sink]
        how = _pick(rng, ["byteswap", "fortran", "strided"])
        p[case.sink] = {
            "byteswap": _byteswapped,
            "fortran": lambda a: np.array(a, order="F"),
            "strided": lambda a: _strided(rng, a, reverse=True),
        }[how](s)
        return p, f"{case.sink} {how}", "same"
    if kind == "sink-alias":
        if case.sink is None:
            return None
        view = _aliasing(rng, p[case.sink])
        if view is None:
            return None
        p[case.sink] = view
        return p, f"{case.sink} overlapping/zero-stride", "refuse"
    if kind == "huge":
        if not _can_fail_allocations():
            return None
        names = [k for k in case.sizes + case.bigs if k in p or k in case.sizes]
        if not names:
            return None
        k = _pick(rng, names)
        value = _pick(rng, HUGE)
        if k == "positions" or k == "grids":
            p[k] = value
        else:
            p[k] = value
        if k in case.sizes:
            return p, f"huge {k}=2**{value.bit_length() - 1}", "refuse-size"
        return p, f"huge {k}=2**{value.bit_length() - 1}", "oracle"
    if kind == "nonfinite":
        p, label = _nonfinite(rng, case, p)
        if p is None:
            return None
        return p, label, "oracle"
    return None


# ---------------------------------------------------------------- the NumPy surface


def _sink_copy(case, params):
    if case.sink is None or params.get(case.sink) is None:
        return params
    params = dict(params)
    params[case.sink] = _canonical_value(params[case.sink])
    return params


def _check_canonical(fails, case, fn, label="canonical"):
    """The canonical call against the oracle: (params, result, exception)."""
    params = _canonical(case.params)
    snap = _snapshot(params)
    res, exc = _call(fn, *case.split(params))
    if exc is not None:
        if not isinstance(exc, (TypeError, ValueError)):
            fails.add("numpy", case.name, label, _what(exc), str(exc)[:120])
        elif _changed(snap) is not None:
            fails.add("numpy", case.name, label, "wrote before refusing", _changed(snap))
        return params, None, exc
    moved = _changed(snap, skip=case.sink)
    if moved is not None:
        fails.add("numpy", case.name, label, "modified its input", moved)
    try:
        want = _oracle(case, _canonical(dict(case.params)))
    except Exception:  # noqa: BLE001 - the oracle does not take these (dtype mixes)
        return params, res, None
    if want is not None:
        why = _close(case, params, res, want)
        if why:
            fails.add("numpy", case.name, label, "differs from the oracle", why)
    else:
        for a in _arrays(res):
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                fails.add("numpy", case.name, label, "non-finite result")
    return params, res, None


def _check_perturbed(fails, rng, case, fn, kind, base_res, base_exc):
    made = _perturb(rng, case, kind)
    if made is None:
        return
    params, label, expect = made
    label = _variant(case, label)
    snap = _snapshot(params)
    sink_before = None
    if case.sink is not None and isinstance(params.get(case.sink), np.ndarray):
        sink_before = params[case.sink].copy()
    # the canonical call of these very values, before the call writes its sink
    pristine = _canonical(params)
    canon = _canonical(pristine)
    ctx = capped() if kind == "huge" else contextlib.nullcontext()
    with ctx:
        res, exc = _call(fn, *case.split(params))
    if exc is not None:
        if isinstance(exc, MemoryError) and kind == "huge" and _fits_the_machine(label):
            return  # an honest result of some GiB, refused by the fuzz's own cap
        if not isinstance(exc, (TypeError, ValueError)):
            fails.add("numpy", case.name, label, _what(exc), str(exc)[:120])
            return
        moved = _changed(snap)
        if moved is not None:
            fails.add("numpy", case.name, label, "wrote before refusing", moved)
        if expect == "same" and base_exc is None:
            fails.add(
                "numpy",
                case.name,
                label,
                "refused what the canonical call takes",
                f"{_what(exc)}: {str(exc)[:100]}",
            )
        return
    moved = _changed(snap, skip=case.sink)
    if moved is not None:
        fails.add("numpy", case.name, label, "modified its input", moved)
    if expect in ("refuse", "refuse-size"):
        shapes = [a.shape for a in _arrays(res)]
        huge = params.get(label.split()[1].split("=")[0]) if expect == "refuse-size" else None
        if huge is not None and any(huge in s for s in shapes):
            return  # an empty result of the declared size (another axis is 0)
        fails.add("numpy", case.name, label, "returned instead of refusing", f"shapes {shapes}")
        if sink_before is not None:
            pass
        return
    cres, cexc = _call(fn, *case.split(canon))
    if cexc is not None:
        if expect == "same":
            fails.add(
                "numpy",
                case.name,
                label,
                "took what the canonical call refuses",
                f"{_what(cexc)}: {str(cexc)[:100]}",
            )
        return
    why = _same(res, cres)
    if why:
        fails.add("numpy", case.name, label, "differs from the canonical call", why)
    if case.sink is not None and isinstance(params.get(case.sink), np.ndarray):
        why = _same(_values(params[case.sink]), _values(canon[case.sink]))
        if why:
            fails.add("numpy", case.name, label, f"{case.sink} differs from the canonical", why)
    if expect == "oracle":
        try:
            with capped():
                want = _oracle(case, _canonical(pristine))
        except Exception:  # noqa: BLE001 - no oracle for these values
            want = None
        # reference.shaw_value_term sums through a one-hot matrix: an
        # infinite weight times its zeros makes NaN in every bucket of its row
        if case.name == "shaw_value_term" and "weights" in label:
            want = None
        if want is not None:
            why = _close(case, canon, res, want)
            if why:
                fails.add("numpy", case.name, label, "differs from the oracle", why)
        if case.finite:  # the tools: positions and factors are finite
            for a in _arrays(res):
                if a.dtype.kind == "f" and not np.isfinite(a).all():
                    fails.add("numpy", case.name, label, "non-finite result")


def _check_deberta_extremes(fails, rng):
    """deberta_log_bucket at the ends of what it takes (+-2**62), with small
    and with the largest bucket sizes: odd (f(-d) = -f(d)), of d's sign and
    non-decreasing in d."""
    size, maxpos = _buckets(rng)
    big = int(_pick(rng, [2**31, 2**30, 2**20]))
    rel = np.array([-(2**62), -(2**40), -(2**31), -1, 0, 1, 2**31, 2**40, 2**62])
    for bucket_size, max_position in ((size, maxpos), (big, big // 2 + 2)):
        for precision in ("float32", "float64"):
            label = f"extreme int64, bucket_size={bucket_size} ({precision})"
            args = (rel, bucket_size, max_position)
            res, exc = _call(posenc.deberta_log_bucket, args, {"precision": precision})
            if exc is not None:
                if not isinstance(exc, (TypeError, ValueError)):
                    fails.add("numpy", "deberta_log_bucket", label, _what(exc), str(exc)[:100])
                continue
            odd = np.array_equal(res, -res[::-1])
            signs = np.array_equal(np.sign(res), np.sign(rel))
            if not (odd and signs and (np.diff(res) >= 0).all()):
                fails.add(
                    "numpy",
                    "deberta_log_bucket",
                    label,
                    "not odd, of the wrong sign or decreasing",
                    f"max_position={max_position}: {res.tolist()}",
                )


def check_numpy(seconds, rng, fails, counts):
    names = sorted(GENERATORS)
    deadline = time.monotonic() + seconds
    _check_deberta_extremes(fails, rng)
    while time.monotonic() < deadline:
        name = _pick(rng, names)
        kind = _pick(rng, ("canonical",) + PERTURBATIONS)
        zero = kind == "zero-size"
        case = _generate(rng, name, zero)
        fn = getattr(posenc, name)
        label = _variant(case, "zero-size" if zero else "canonical")
        _, res, exc = _check_canonical(fails, case, fn, label)
        key = (name, "ok" if exc is None else _what(exc))
        counts[key] = counts.get(key, 0) + 1
        if kind not in ("canonical", "zero-size"):
            _check_perturbed(fails, rng, case, fn, kind, res, exc)


# ---------------------------------------------------------------- the torch surface


def _to_torch(torch, a):
    if not isinstance(a, np.ndarray):
        return a
    a = _canonical_value(a)
    if _is_bf16(a.dtype):
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    if a.dtype.kind == "u" and a.dtype.itemsize > 1:
        a = a.astype(np.int64)
    return torch.from_numpy(a)


def _from_torch(torch, result):
    if isinstance(result, tuple):
        return tuple(_from_torch(torch, r) for r in result)
    if isinstance(result, torch.Tensor):
        t = result.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    return np.asarray(result)


def _torch_noncontig(torch, t):
    if t.ndim == 0 or t.numel() == 0:
        return t
    big = torch.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype)
    big[..., ::2] = t
    return big[..., ::2]


def _torch_expand(rng, torch, t):
    axes = [i for i in range(t.ndim) if t.shape[i] > 1]
    if not axes:
        return t
    axis = _pick(rng, axes)
    return t.narrow(axis, 0, 1).expand(t.shape)


def _numpy_twin(params):
    """The NumPy arguments of a torch call: the same values."""
    return {
        k: (
            _values(val).copy()
            if isinstance(val, np.ndarray) and _is_bf16(val.dtype) and False
            else _canonical_value(val)
        )
        for k, val in params.items()
    }


def _check_torch_case(torch, fails, rng, case, fn, kind):
    np_params = _canonical(case.params)
    want, wexc = _call(fn, *case.split(_canonical(np_params)))
    tp = {k: _to_torch(torch, val) for k, val in np_params.items()}
    label = _variant(case, kind)
    if kind == "noncontig":
        tp = {
            k: (_torch_noncontig(torch, val) if k in case.kinds else val) for k, val in tp.items()
        }
    elif kind == "expand":
        data = [
            k
            for k, kd in case.kinds.items()
            if kd == "data" and isinstance(tp.get(k), torch.Tensor)
        ]
        if not data:
            return
        k = _pick(rng, data)
        tp[k] = _torch_expand(rng, torch, tp[k])
        # the NumPy call sees the same values
        values = tp[k].contiguous()
        values = values.float().numpy() if values.dtype == torch.bfloat16 else values.numpy()
        np_params[k] = values.astype(np_params[k].dtype)
        want, wexc = _call(fn, *case.split(_canonical(np_params)))
        label = f"expand {k}"
    elif kind == "grad":
        _check_torch_grad(torch, fails, case, fn, tp)
        return
    elif kind == "sink-alias":
        if case.sink is None:
            return
        s = tp[case.sink]
        if s.ndim == 0 or s.numel() < 2:
            return
        axes = [i for i in range(s.ndim) if s.shape[i] > 1]
        strides = list(s.contiguous().stride())
        strides[_pick(rng, axes)] = 0
        store = torch.zeros(s.numel() + 16, dtype=s.dtype)
        tp[case.sink] = torch.as_strided(store, s.shape, strides)
        before = store.clone()
        res, exc = _call(fn, *case.split(tp))
        label = f"{case.sink} zero-stride"
        if exc is None:
            fails.add("torch", case.name, label, "returned instead of refusing")
        elif not isinstance(exc, (TypeError, ValueError)):
            fails.add("torch", case.name, label, _what(exc), str(exc)[:120])
        elif not torch.equal(store, before):
            fails.add("torch", case.name, label, "wrote before refusing")
        return
    res, exc = _call(fn, *case.split(tp))
    if exc is not None:
        if not isinstance(exc, (TypeError, ValueError)):
            fails.add("torch", case.name, label, _what(exc), str(exc)[:120])
        elif wexc is None:
            fails.add(
                "torch",
                case.name,
                label,
                "refused what NumPy takes",
                f"{_what(exc)}: {str(exc)[:100]}",
            )
        return
    if wexc is not None:
        fails.add(
            "torch",
            case.name,
            label,
            "took what NumPy refuses",
            f"{_what(wexc)}: {str(wexc)[:100]}",
        )
        return
    why = _same(_values_all(_from_torch(torch, res)), _values_all(want))
    if why:
        fails.add("torch", case.name, label, "differs from the NumPy result", why)


def _values_all(result):
    if isinstance(result, tuple):
        return tuple(_values_all(r) for r in result)
    return _values(result)


def _compiled_checks(torch):
    """(name, compiled function, make inputs, eager NumPy twin): compiled
    once each, fullgraph, then called with fresh values of the same shapes."""

    def rope(x, p):
        return posenc.apply_rope(x, p, layout="interleaved")

    def mrope(p):
        return posenc.rope_cos_sin(p, 16, mrope_section=[4, 2, 2])

    def xl(q, r, b):
        return posenc.xl_position_term(q, r, bias=b, k_len=5)

    def deberta(q, k, pk):
        return posenc.deberta_attention_bias(
            q, k, pk, pk, position_buckets=4, max_relative_positions=16
        )

    def args_rope(rng):
        return randn(rng, (2, 2, 5, 8), "float32"), rng.integers(0, 9000, size=(2, 5))

    def args_mrope(rng):
        return (rng.integers(0, 50, size=(3, 2, 5)),)

    def args_xl(rng):
        return (
            randn(rng, (1, 2, 4, 8), "float32"),
            randn(rng, (2, 9, 8), "float32"),
            randn(rng, (2, 8), "float32"),
        )

    def args_deberta(rng):
        return (
            randn(rng, (1, 2, 4, 8), "float32"),
            randn(rng, (1, 2, 6, 8), "float32"),
            randn(rng, (2, 8, 8), "float32"),
        )

    return [
        ("apply_rope", rope, args_rope),
        ("rope_cos_sin mrope", mrope, args_mrope),
        ("xl_position_term", xl, args_xl),
        ("deberta_attention_bias", deberta, args_deberta),
    ]


class _Compiled:
    def __init__(self, torch, name, fn, make):
        self.torch, self.name, self.fn, self.make = torch, name, fn, make
        self.compiled = torch.compile(fn, fullgraph=True)
        self.calls = 0
        self.graphs = None

    def check(self, fails, rng):
        torch = self.torch
        from torch._dynamo.utils import counters

        arrays = self.make(rng)
        want, wexc = _call(self.fn, arrays, {})
        before = counters["stats"]["unique_graphs"]
        res, exc = _call(self.compiled, tuple(_to_torch(torch, a) for a in arrays), {})
        graphs = counters["stats"]["unique_graphs"] - before
        self.calls += 1
        label = "torch.compile fullgraph"
        if exc is not None:
            fails.add("torch", self.name, label, _what(exc), str(exc)[:160])
            return
        why = _same(_values_all(_from_torch(torch, res)), _values_all(want))
        if why:
            fails.add("torch", self.name, label, "differs from the eager NumPy result", why)
        if self.calls > 1 and graphs:
            fails.add(
                "torch",
                self.name,
                label,
                "recompiled for the same shapes",
                f"call {self.calls}: {graphs} more graph(s)",
            )


def _grad_inputs(case, params, is_float):
    return [
        k
        for k, kind in case.kinds.items()
        if kind == "data" and k != case.sink and is_float(params.get(k))
    ]


def _check_torch_grad(torch, fails, case, fn, tp):
    """Backward through a relative term or apply_rope (zero-size too): it
    runs or refuses with TypeError/ValueError, and its gradients are finite
    for finite inputs, of their inputs' shapes."""
    if case.tol not in ("term", "rope") or case.sink is not None:
        return
    names = _grad_inputs(
        case,
        tp,
        lambda t: isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float64),
    )
    if case.name == "apply_rope":
        names = [k for k in names if k == "x"]
    if not names:
        return
    for k in names:
        tp[k] = tp[k].detach().clone().requires_grad_(True)
    label = _variant(
        case,
        "grad"
        + (
            " zero-size"
            if any(t.numel() == 0 for t in tp.values() if isinstance(t, torch.Tensor))
            else ""
        ),
    )

    def backward():
        out = fn(*case.split(tp)[0], **case.split(tp)[1])
        out.float().sum().backward()

    _, exc = _call(backward, (), {})
    if exc is not None:
        if not isinstance(exc, (TypeError, ValueError)):
            fails.add("torch", case.name, label, _what(exc), str(exc)[:120])
        return
    for k in names:
        g = tp[k].grad
        if g is None:
            fails.add("torch", case.name, label, f"no gradient for {k}")
        elif g.shape != tp[k].shape or not torch.isfinite(g).all():
            fails.add("torch", case.name, label, f"gradient of {k} wrong shape or non-finite")


TORCH_KINDS = ("canonical", "noncontig", "expand", "sink-alias", "zero-size", "grad", "grad-zero")


def check_torch(seconds, rng, fails, counts):
    import torch

    # compiled first, so that the first compile sees posenc cold, and called
    # twice (a second call of the same shapes must not compile again); the
    # others compile when first drawn.  The first compile is not counted in
    # the surface's time
    compiled = [_Compiled(torch, *c) for c in _compiled_checks(torch)]
    compiled[0].check(fails, rng)
    compiled[0].check(fails, rng)
    deadline = time.monotonic() + seconds
    names = sorted(GENERATORS)
    while time.monotonic() < deadline:
        if rng.random() < 0.05:
            _pick(rng, compiled).check(fails, rng)
            continue
        name = _pick(rng, names)
        kind = _pick(rng, TORCH_KINDS)
        case = _generate(rng, name, kind in ("zero-size", "grad-zero"))
        kind = "grad" if kind == "grad-zero" else kind
        _check_torch_case(torch, fails, rng, case, getattr(posenc, name), kind)
        counts[(name, "torch")] = counts.get((name, "torch"), 0) + 1


# ---------------------------------------------------------------- the JAX surface


def _jax_params(case):
    """The case's arguments as JAX takes them without x64: float64 as float32,
    int64 as int32; no out=/scores= (JAX arrays are immutable)."""
    p = {}
    for k, val in _canonical(case.params).items():
        if k == case.sink:
            continue
        if isinstance(val, np.ndarray):
            if val.dtype == np.float64:
                val = val.astype(np.float32)
            elif val.dtype.kind in "iu":
                val = val.astype(np.int32)
        p[k] = val
    if p.get("dtype") == "float64":
        p["dtype"] = "float32"
    return p


def _is_refusal(exc):
    """TypeError/ValueError, or JAX's error for a failed callback with one inside."""
    if isinstance(exc, (TypeError, ValueError)):
        return True
    text = str(exc)
    return type(exc).__name__ in ("JaxRuntimeError", "XlaRuntimeError") and (
        "ValueError" in text or "TypeError" in text
    )


def _vmap_variant(case, params, k):
    """Element k of a batch: data scaled, positions shifted, the rest as is."""
    out = dict(params)
    for name, kind in case.kinds.items():
        val = params.get(name)
        if not isinstance(val, np.ndarray):
            continue
        if kind == "data":
            out[name] = (_f64(val) * (1 + 0.5 * k)).astype(val.dtype)
        elif kind == "pos":
            out[name] = val + np.asarray(k, val.dtype)
    return out


def _check_jax_grad(jax, jnp, fails, case, fn, params):
    """jax.grad of the sum of a relative term or of apply_rope with respect
    to its float32 data (zero-size too): it runs or refuses, and the
    gradient is finite, of the input's shape."""
    if case.tol not in ("term", "rope"):
        return
    names = _grad_inputs(
        case, params, lambda a: isinstance(a, np.ndarray) and a.dtype == np.float32
    )
    if case.name == "apply_rope":
        names = [k for k in names if k == "x"]
    if not names:
        return
    k = names[0]
    zero = any(isinstance(a, np.ndarray) and a.size == 0 for a in params.values())
    label = _variant(case, f"grad {k}" + (" zero-size" if zero else ""))

    def total(a):
        p = dict(params)
        p[k] = a
        return fn(*case.split(p)[0], **case.split(p)[1]).astype(jnp.float32).sum()

    g, exc = _call(lambda: np.asarray(jax.grad(total)(jnp.asarray(params[k]))), (), {})
    if exc is not None:
        if not _is_refusal(exc):
            fails.add("jax", case.name, label, _what(exc), str(exc).splitlines()[0][:160])
        return
    if g.shape != params[k].shape or not np.isfinite(g).all():
        fails.add("jax", case.name, label, "gradient of wrong shape or non-finite")


def _check_jax_case(jax, jnp, fails, rng, case, fn, kind):
    params = _jax_params(case)
    arrays = [k for k in case.kinds if isinstance(params.get(k), np.ndarray)]
    if not arrays:
        return
    if kind == "grad":
        _check_jax_grad(jax, jnp, fails, case, fn, params)
        return
    want, wexc = _call(fn, *case.split(params))

    def bound(*values, base=params):
        p = dict(base)
        p.update(zip(arrays, values))
        return fn(*case.split(p)[0], **case.split(p)[1])

    label = _variant(case, kind)
    if kind in ("eager", "jit"):
        values = [jnp.asarray(params[k]) for k in arrays]
        call = bound if kind == "eager" else jax.jit(bound)
        res, exc = _call(lambda: jax.block_until_ready(call(*values)), (), {})
    else:  # vmap: a batch of B elements against B calls
        batch = int(rng.integers(1, 4))
        elements = [_vmap_variant(case, params, k) for k in range(batch)]
        wants = [_call(fn, *case.split(e)) for e in elements]
        if any(e is not None for _, e in wants):
            wexc = next(e for _, e in wants if e is not None)
            want = None
        else:
            wexc = None
            want = _stack([w for w, _ in wants])
        values = [jnp.asarray(np.stack([e[k] for e in elements])) for k in arrays]
        call = jax.vmap(bound) if kind == "vmap" else jax.jit(jax.vmap(bound))
        res, exc = _call(lambda: jax.block_until_ready(call(*values)), (), {})
    if exc is not None:
        if not _is_refusal(exc):
            fails.add("jax", case.name, label, _what(exc), str(exc).splitlines()[0][:160])
        elif wexc is None and kind in ("eager", "vmap") and "cannot be traced" not in str(exc):
            fails.add(
                "jax",
                case.name,
                label,
                "refused what NumPy takes",
                f"{_what(exc)}: {str(exc).splitlines()[0][:120]}",
            )
        return
    if wexc is not None:
        fails.add(
            "jax", case.name, label, "took what NumPy refuses", f"{_what(wexc)}: {str(wexc)[:100]}"
        )
        return
    got = jax.tree_util.tree_map(lambda a: np.asarray(a), res)
    if isinstance(got, list):
        got = tuple(got)
    want = _jax_dtypes(jax, want)
    why = _same(_values_all(got), _values_all(want))
    if why:
        fails.add(
            "jax",
            case.name,
            label,
            "differs from the NumPy result"
            + (" (loop of unbatched calls)" if "vmap" in kind else ""),
            why,
        )


def _jax_dtypes(jax, result):
    """A NumPy result in the dtypes JAX holds it in (int32 and float32 without x64)."""
    if isinstance(result, tuple):
        return tuple(_jax_dtypes(jax, r) for r in result)
    a = np.asarray(result)
    return a.astype(jax.dtypes.canonicalize_dtype(a.dtype))


def _stack(results):
    if isinstance(results[0], tuple):
        return tuple(_stack([r[i] for r in results]) for i in range(len(results[0])))
    return np.stack([np.asarray(r) for r in results])


JAX_KINDS = ("eager", "jit", "vmap", "jit-vmap", "grad")


def check_jax(seconds, rng, fails, counts):
    import jax
    import jax.numpy as jnp

    deadline = time.monotonic() + seconds
    # each jit compiles: the RoPE functions, whose rows of positions meet
    # vmap's batch axis, drawn more often
    names = sorted(GENERATORS) + ["apply_rope", "rope_cos_sin"] * 3
    while time.monotonic() < deadline:
        name = _pick(rng, names)
        kind = _pick(rng, JAX_KINDS)
        case = _generate(rng, name, rng.random() < 0.15, ("float16", "float32", "bfloat16"))
        _check_jax_case(jax, jnp, fails, rng, case, getattr(posenc, name), kind)
        counts[(name, "jax " + kind)] = counts.get((name, "jax " + kind), 0) + 1


def _surface_of(module_name):
    """A surface whose fuzzer is a module of its own beside this file
    (``tests/fuzz_<name>.py``: ``run(seconds, seed, fails)`` returns its
    counts by (function, outcome)), imported when the surface is chosen."""

    def check_module(seconds, rng, fails, counts):
        import importlib

        module = importlib.import_module(module_name)
        for key, n in module.run(seconds, int(rng.integers(2**31)), fails).items():
            counts[key] = counts.get(key, 0) + n

    return check_module


SURFACES = {
    "numpy": check_numpy,
    "torch": check_torch,
    "jax": check_jax,
    # the torch modules of posenc.torch, posenc.hf.patch on tiny transformers
    # models, and the Hub path against a hostile loopback server
    "modules": _surface_of("fuzz_modules"),
    "patch": _surface_of("fuzz_patch"),
    "hub": _surface_of("fuzz_hub"),
}


def check(seconds, seed, surfaces=("numpy",), file=sys.stdout):
    """The checking mode: `seconds` shared among `surfaces`; the failures
    (a Failures) and the calls made by (function, outcome)."""
    fails, counts = Failures(), {}
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        # a NumPy RuntimeWarning (overflow, invalid) marks an edge not handled
        warnings.simplefilter("error", RuntimeWarning)
        for surface in surfaces:
            SURFACES[surface](seconds / len(surfaces), rng, fails, counts)
    return fails, counts


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="the whole run's time, shared among the surfaces",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--surfaces",
        default="numpy",
        help="comma-separated: numpy, torch, jax, modules, patch, hub (torch, JAX and "
        "transformers are imported only when a surface needs them)",
    )
    parser.add_argument(
        "--mode",
        choices=("both", "random", "check"),
        default="both",
        help="random: awkward values anywhere; check: structured calls "
        "against the oracle; both (the default): a quarter of the NumPy "
        "surface's time random",
    )
    parser.add_argument("--verbose", action="store_true", help="calls made, by outcome")
    args = parser.parse_args(argv)
    surfaces = [s for s in args.surfaces.split(",") if s]
    unknown = set(surfaces) - set(SURFACES)
    if unknown or not surfaces:
        parser.error(f"--surfaces: choose among {sorted(SURFACES)}")
    fails, counts, calls = Failures(), {}, 0
    seconds = args.seconds
    if "numpy" in surfaces and args.mode != "check":
        share = seconds / len(surfaces) * (1.0 if args.mode == "random" else 0.25)
        _, random_counts, calls = fuzz(share, args.seed, fails)
        counts.update({(n, "random " + k): c for (n, k), c in random_counts.items()})
        seconds -= share
        if args.mode == "random":
            surfaces = [s for s in surfaces if s != "numpy"]
    if surfaces and args.mode != "random":
        more, checked = check(seconds, args.seed, surfaces)
        for key, val in more.seen.items():
            fails.seen[key] = val
        counts.update(checked)
    calls += sum(n for (_, k), n in counts.items() if not k.startswith("random "))
    if args.verbose:
        for (name, kind), n in sorted(counts.items()):
            print(f"{name:28s} {kind:20s} {n}")
    fails.report()
    print(
        f"{calls} calls in {args.seconds:g} s ({args.surfaces}, seed {args.seed}): "
        f"{len(fails)} distinct failure(s)"
    )
    return 1 if len(fails) else 0


if __name__ == "__main__":
    sys.exit(main())
