"""posenc's benchmark suite.

Every case times four things on the same machine in the same run:

- ``posenc``: the C kernel;
- ``numpy``: the pure-NumPy twin in ``posenc.reference``;
- ``torch``: the same computation in PyTorch on the CPU, written the way
  Hugging Face writes it (only when torch is importable);
- ``compiled``: that PyTorch code under ``torch.compile`` (Inductor, its
  default settings): what a user would otherwise compile;
- ``jit``: the same formulas written in ``jax.numpy`` under ``jax.jit`` (XLA
  on the CPU, its own threads), on JAX arrays: what a JAX user would
  otherwise compile (only when jax is importable);
- ``memory``: the machine's limit for the bytes involved, ``ndarray.fill`` of
  the output for a generator, ``np.copyto`` of the same bytes for a transform.

Each is timed as the median of several repeats after a warm-up.  The table
gives times in milliseconds and the ratios ``posenc / memory`` (1.0 is the
bandwidth floor), ``numpy / posenc``, ``torch / posenc`` and
``compiled / posenc``, ``jit / posenc`` (speed-ups).  The ``torch`` group calls
posenc with torch tensors: a decoding step (the round trip through posenc
included), posenc's operators under torch.compile, and autograd; the ``jax``
group with JAX arrays: eagerly, under jax.jit, and under jax.grad.

    python benchmarks/run.py                 # all cases, 1 and 2 threads
    python benchmarks/run.py --quick         # smaller, well under a minute
    python benchmarks/run.py -k rope --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import posenc
from posenc import reference

try:  # the comparison only; never a dependency of posenc
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

try:  # likewise
    import jax
    import jax.numpy as jnp
except ImportError:  # pragma: no cover - depends on the machine
    jax = jnp = None


@dataclass
class Case:
    """One benchmark: callables for each contender, built for a thread count."""

    name: str
    nbytes: int
    posenc: object
    memory: object
    numpy: object = None
    torch: object = None
    compiled: object = None  # None: torch.compile of `torch`
    jit: object = None  # the jax.numpy formula under jax.jit
    note: str = ""
    extra: dict = field(default_factory=dict)


CASES = []


def case(group):
    """Register a function ``make(quick) -> list[Case]`` under `group`."""

    def register(make):
        CASES.append((group, make))
        return make

    return register


def timeit(fn, repeats, min_time=0.2):
    """Median seconds of `fn()`, after one warm-up call; at least `repeats`
    calls, more for fast functions so that the total is ~`min_time`."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(repeats, min(200, int(min_time / once)))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def copyto_of(shape, dtype):
    src = np.ones(shape, dtype)
    dst = np.empty(shape, dtype)
    return lambda: np.copyto(dst, src)


# ---------------------------------------------------------------- the jax.numpy formulas
#
# Each returns a callable timing one call of the jitted function on JAX
# arrays, result ready; the arrays it computes from are arguments (not
# constants XLA could fold while compiling).


def _ready(fn, *args):
    return lambda: fn(*args).block_until_ready()


def _jax_sinusoid(n, dim, dtype):
    """The sinusoid as transformers and most JAX code write it: float32
    angles, sines and cosines interleaved.  Not float64: JAX holds 32 bits
    unless jax_enable_x64 is set."""
    if jax is None or np.dtype(dtype) == np.float64:
        return None

    @jax.jit
    def table(positions):
        div = jnp.exp(jnp.arange(0, dim, 2, dtype=jnp.float32) * (-np.log(10000.0) / dim))
        angle = positions[:, None] * div
        return jnp.stack([jnp.sin(angle), jnp.cos(angle)], axis=-1).reshape(n, dim).astype(dtype)

    return _ready(table, jnp.arange(n, dtype=jnp.float32))


def _jax_rope(x, seq_axis=-2):
    """``q * cos + rotate_half(q) * sin`` with cos/sin cached outside the
    timed call, as for torch."""
    if jax is None:
        return None
    n, dim = x.shape[seq_axis], x.shape[-1]
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, dim, 2, dtype=np.float32) / dim)
    freqs = np.arange(n, dtype=np.float32)[:, None] * inv_freq
    emb = np.concatenate([freqs, freqs], axis=-1)
    shape = (n, dim) if seq_axis == -2 else (n, 1, dim)
    cos = jnp.asarray(np.cos(emb).reshape(shape), dtype=x.dtype)
    sin = jnp.asarray(np.sin(emb).reshape(shape), dtype=x.dtype)

    @jax.jit
    def rotate(q, cos, sin):
        half = q.shape[-1] // 2
        return q * cos + jnp.concatenate([-q[..., half:], q[..., :half]], axis=-1) * sin

    return _ready(rotate, jnp.asarray(x), cos, sin)


def _jax_alibi_of(n_heads, q_len, k_len):
    """ALiBi as BLOOM builds it (slope x key position, one row per head),
    broadcast over the queries, plus the causal mask: a jitted function of
    the slopes."""

    def bias(slopes):
        alibi = slopes[:, None, None] * jnp.arange(k_len, dtype=jnp.float32)[None, None, :]
        qpos = k_len - q_len + jnp.arange(q_len)[:, None]
        future = jnp.arange(k_len)[None, :] > qpos
        return jnp.where(future[None], -jnp.inf, alibi)

    return bias


def _jax_alibi(n_heads, q_len, k_len, scores=None):
    if jax is None:
        return None
    slopes = jnp.asarray(posenc.alibi_slopes(n_heads), dtype=jnp.float32)
    bias = _jax_alibi_of(n_heads, q_len, k_len)
    if scores is None:
        return _ready(jax.jit(bias), slopes)
    return _ready(jax.jit(lambda s, slopes: s + bias(slopes)), jnp.asarray(scores), slopes)


def _jax_t5_bias_of(num_buckets, q_len, k_len, max_distance=128):
    """T5's bias written from its definition in jax.numpy (bidirectional:
    half of the buckets per direction, half of those exact distances, the
    rest logarithmic up to max_distance), the table gathered by bucket."""

    def bias(table):
        rel = jnp.arange(k_len)[None, :] - jnp.arange(q_len)[:, None]  # posenc's q_offset=0
        half = num_buckets // 2
        exact = half // 2
        side = jnp.where(rel > 0, half, 0)
        dist = jnp.abs(rel)
        log = exact + (
            jnp.log(jnp.maximum(dist, 1).astype(jnp.float32) / exact)
            / np.log(max_distance / exact)
            * (half - exact)
        ).astype(jnp.int32)
        buckets = side + jnp.where(dist < exact, dist, jnp.minimum(log, half - 1))
        return jnp.moveaxis(table[buckets], -1, 0)

    return bias


def _jax_t5(table, q_len, k_len, scores=None):
    if jax is None:
        return None
    bias = _jax_t5_bias_of(table.shape[0], q_len, k_len)
    if scores is None:
        return _ready(jax.jit(bias), jnp.asarray(table))
    return _ready(jax.jit(lambda s, t: s + bias(t)), jnp.asarray(scores), jnp.asarray(table))


# ---------------------------------------------------------------- sinusoid


@case("sinusoid")
def sinusoid_cases(quick):
    n, dim = (16384, 256) if quick else (65536, 256)
    cases = []
    for dtype in ("float32", "float16", "float64"):
        out = np.empty((n, dim), dtype)
        tdtype = getattr(torch, dtype) if torch is not None else None

        def hf_torch(n=n, dim=dim, tdtype=tdtype):
            # transformers' sinusoidal table (create_sinusoidal_embeddings)
            pos = torch.arange(n, dtype=torch.float32)[:, None]
            div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-np.log(10000.0) / dim))
            table = torch.empty(n, dim, dtype=torch.float32)
            table[:, 0::2] = torch.sin(pos * div)
            table[:, 1::2] = torch.cos(pos * div)
            return table.to(tdtype)

        cases.append(
            Case(
                name=f"sinusoid({n}, {dim}) {dtype}, out=",
                nbytes=out.nbytes,
                posenc=lambda out=out, n=n, dim=dim: posenc.sinusoid(n, dim, out=out),
                memory=lambda out=out: out.fill(0.5),
                numpy=lambda n=n, dim=dim, dtype=dtype: reference.sinusoid(n, dim, dtype=dtype),
                torch=hf_torch if torch is not None else None,
                jit=_jax_sinusoid(n, dim, dtype),
            )
        )
    cases.append(
        Case(
            name=f"sinusoid({n}, {dim}) float32, new array",
            nbytes=n * dim * 4,
            posenc=lambda: posenc.sinusoid(n, dim),
            memory=lambda: np.empty((n, dim), np.float32).fill(0.5),
            note="allocation and page faults included on both sides",
        )
    )
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 2**20, n)
    out = np.empty((n, dim), np.float32)
    cases.append(
        Case(
            name=f"sinusoid(random {n} positions, {dim}) float32, out=",
            nbytes=out.nbytes,
            posenc=lambda: posenc.sinusoid(pos, dim, out=out),
            memory=lambda: out.fill(0.5),
            numpy=lambda: reference.sinusoid(pos, dim),
            note="uneven positions: every element computed directly",
        )
    )
    return cases


# ---------------------------------------------------------------- rope


def _torch_of(x):
    """A NumPy array as a torch tensor sharing its memory; bfloat16 (ml_dtypes') by its bits."""
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def _rope_torch(x, seq_axis):
    """transformers' formulation, cos/sin cached outside the timed call:
    ``q * cos + rotate_half(q) * sin`` (LlamaRotaryEmbedding + apply_rotary_pos_emb)."""
    if torch is None:
        return None
    n, dim = x.shape[seq_axis], x.shape[-1]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    tdtype = getattr(torch, x.dtype.name)
    shape = (1, 1, n, dim) if seq_axis == -2 else (1, n, 1, dim)
    cos, sin = emb.cos().to(tdtype).reshape(shape), emb.sin().to(tdtype).reshape(shape)
    q = _torch_of(x)

    def rotate_half(t):
        t1, t2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
        return torch.cat((-t2, t1), dim=-1)

    return lambda: q * cos + rotate_half(q) * sin


@case("rope")
def rope_cases(quick):
    seq = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    cases = []
    for dtype in ("float32", "float16"):
        for shape, seq_axis in [((1, 32, seq, 128), -2), ((1, seq, 32, 128), -3)]:
            x = rng.standard_normal(shape).astype(dtype)
            out = np.empty_like(x)
            y = x.copy()
            label = f"apply_rope{shape} {dtype} seq_axis={seq_axis}"

            def numpy_ref(x=x, a=seq_axis):
                return reference.apply_rope(x, seq_axis=a)

            torch_ref = _rope_torch(x, seq_axis)
            cases.append(
                Case(
                    name=f"{label}, out=",
                    nbytes=x.nbytes,
                    posenc=lambda x=x, out=out, a=seq_axis: posenc.apply_rope(
                        x, seq_axis=a, out=out
                    ),
                    memory=copyto_of(shape, dtype),
                    numpy=numpy_ref,
                    torch=torch_ref,
                    jit=_jax_rope(x, seq_axis),
                )
            )
            cases.append(
                Case(
                    name=f"{label}, in place",
                    nbytes=x.nbytes,
                    posenc=lambda y=y, a=seq_axis: posenc.apply_rope(y, seq_axis=a, out=y),
                    memory=copyto_of(shape, dtype),
                    numpy=numpy_ref,
                    torch=torch_ref,
                    jit=_jax_rope(x, seq_axis),
                    note="numpy, torch and jit: out of place, as they are written",
                )
            )
    x = rng.standard_normal((1, 32, seq, 128)).astype(np.float32)
    cases.append(
        Case(
            name=f"apply_rope{x.shape} float32, new array",
            nbytes=x.nbytes,
            posenc=lambda x=x: posenc.apply_rope(x),
            memory=lambda x=x: np.copyto(np.empty_like(x), x),
            torch=_rope_torch(x, -2),
            jit=_jax_rope(x),
            note="allocation and page faults included on all sides",
        )
    )
    # one decoding step: the fixed cost of a call shows
    x = rng.standard_normal((1, 32, 1, 128)).astype(np.float32)
    out = np.empty_like(x)
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32, offset=4096, out= (decoding)",
            nbytes=x.nbytes,
            posenc=lambda x=x, out=out: posenc.apply_rope(x, offset=4096, out=out),
            memory=copyto_of(x.shape, x.dtype),
            torch=_rope_torch(x, -2),
            jit=_jax_rope(x),
            note="torch, jit: the cached cos/sin of one position, as a KV-cache step uses them",
        )
    )
    # a projection (NumPy's BLAS, its own threads) and the rotation, in turn,
    # as a NumPy model runs them: the kernel's threads must not hold the
    # cores BLAS wants next (see posenc/_openmp.py, GOMP_SPINCOUNT)
    tokens = 512 if quick else 2048
    h = rng.standard_normal((tokens, 1024)).astype(np.float32)
    w_q = rng.standard_normal((1024, 1024)).astype(np.float32)
    proj = np.empty((tokens, 1024), np.float32)
    heads_view = proj.reshape(1, tokens, 16, 64)

    def project():
        np.matmul(h, w_q, out=proj)

    def project_rotate():
        np.matmul(h, w_q, out=proj)
        posenc.apply_rope(heads_view, seq_axis=-3, out=heads_view)

    cases.append(
        Case(
            name=f"x @ W_q then apply_rope in place, {tokens} tokens x 16 heads x 64",
            nbytes=proj.nbytes,
            posenc=project_rotate,
            memory=project,
            note="memory: the BLAS product alone; posenc/memory - 1 is what the rotation adds",
        )
    )
    # how the time grows with the number of positions
    for n in [1024, 4096, 16384] if quick else [1024, 4096, 16384, 65536]:
        x = rng.standard_normal((1, 8, n, 128)).astype(np.float32)
        out = np.empty_like(x)
        cases.append(
            Case(
                name=f"apply_rope(1, 8, {n}, 128) float32, out=",
                nbytes=x.nbytes,
                posenc=lambda x=x, out=out: posenc.apply_rope(x, out=out),
                memory=copyto_of(x.shape, x.dtype),
                torch=_rope_torch(x, -2),
                extra={"positions": n},
            )
        )
    return cases


# ---------------------------------------------------------------- multimodal and vision RoPE


def _qwen_prompt(seq):
    """The M-RoPE position ids of a Qwen2-VL prompt of `seq` tokens: a
    little text, one large image (merge 2), text to the end."""
    h, w = 2 * 48, 2 * 64  # 3072 merged patches
    text = seq - h * w // 4
    types = [0] * (text // 4) + [1] * (h * w // 4) + [0] * (text - text // 4)
    ids, _ = posenc.mrope_position_ids(np.asarray([types]), image_grids=[[1, h, w]])
    return ids


def _hf_mrope(x, ids, sections):
    """transformers' Qwen2-VL text attention: cos/sin from
    Qwen2VLRotaryEmbedding (sections recomposed) made once outside the timed
    call, as a forward pass shares them among its layers, then its
    apply_rotary_pos_emb on q."""
    if torch is None:
        return None
    try:
        from transformers import Qwen2VLTextConfig
        from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen
    except ImportError:  # pragma: no cover - depends on the machine
        return None
    dim = x.shape[-1]
    config = Qwen2VLTextConfig(
        hidden_size=dim * 2,
        num_attention_heads=2,
        num_key_value_heads=1,
        rope_scaling={"type": "mrope", "mrope_section": list(sections), "rope_theta": 10000.0},
    )
    q = _torch_of(x)
    cos, sin = qwen.Qwen2VLRotaryEmbedding(config)(q, torch.from_numpy(ids))
    return lambda: qwen.apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=1)[0]


def _hf_vision(x, ids):
    """transformers' Qwen2-VL vision tower: Qwen2VLVisionRotaryEmbedding's
    cos/sin made once outside the timed call, then apply_rotary_pos_emb_vision
    on q."""
    if torch is None:
        return None
    try:
        from transformers import Qwen2VLVisionConfig
        from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen
    except ImportError:  # pragma: no cover - depends on the machine
        return None
    heads, dim = x.shape[-2:]
    config = Qwen2VLVisionConfig(embed_dim=heads * dim, num_heads=heads, depth=1)
    q = _torch_of(x)
    cos, sin = qwen.Qwen2VLVisionRotaryEmbedding(config)(q, torch.from_numpy(ids.T.copy()))
    return lambda: qwen.apply_rotary_pos_emb_vision(q, q, cos, sin)[0]


@case("multimodal")
def multimodal_cases(quick):
    seq = 4096  # the image takes 3072 of them
    rng = np.random.default_rng(0)
    cases = []
    ids = _qwen_prompt(seq)
    sections = (16, 24, 24)
    dtypes = ["float32"]
    try:
        import ml_dtypes

        dtypes.append(np.dtype(ml_dtypes.bfloat16))
    except ImportError:  # pragma: no cover - depends on the machine
        print("multimodal: ml_dtypes is not installed, bfloat16 left out", file=sys.stderr)
    for dtype in dtypes:
        shape = (1, 32, seq, 128)
        x = rng.standard_normal(shape).astype(dtype)
        out = np.empty_like(x)
        name = np.dtype(dtype).name
        cases.append(
            Case(
                name=f"M-RoPE apply_rope{shape} {name}, Qwen2-VL prompt, out=",
                nbytes=x.nbytes,
                posenc=lambda x=x, out=out: posenc.apply_rope(
                    x, ids, mrope_section=sections, out=out
                ),
                memory=copyto_of(shape, np.float16 if name == "bfloat16" else dtype),
                numpy=lambda x=x: reference.apply_rope(x, ids, mrope_section=sections),
                torch=_hf_mrope(x, ids, sections),
                note="torch: transformers' Qwen2-VL apply_rotary_pos_emb, cos/sin cached",
            )
        )
        cases.append(
            Case(
                name=f"plain apply_rope{shape} {name}, positions 0..{seq - 1}, out= (beside it)",
                nbytes=x.nbytes,
                posenc=lambda x=x, out=out: posenc.apply_rope(x, out=out),
                memory=copyto_of(shape, np.float16 if name == "bfloat16" else dtype),
            )
        )
    # Qwen2-VL's vision tower: head_dim 80, 16 heads, a 1344 x 1792 image
    grid = [[1, 96, 128]]
    vids = posenc.vision_position_ids(grid, spatial_merge_size=2)
    x = rng.standard_normal((vids.shape[1], 16, 80)).astype(np.float32)
    out = np.empty_like(x)
    cases.append(
        Case(
            name=f"2-D vision apply_rope{x.shape} float32, axial=2, out=",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(x, vids, axial=2, seq_axis=-3, out=out),
            memory=copyto_of(x.shape, x.dtype),
            numpy=lambda: reference.apply_rope(x, vids, axial=2, seq_axis=-3),
            torch=_hf_vision(x, vids),
            note="torch: transformers' apply_rotary_pos_emb_vision, cos/sin cached",
        )
    )
    cases.append(
        Case(
            name=f"plain apply_rope{x.shape} float32, seq_axis=-3, out= (beside it)",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(x, seq_axis=-3, out=out),
            memory=copyto_of(x.shape, x.dtype),
        )
    )
    return cases


# ---------------------------------------------------------------- xPos and DeepSeek-V3's layout


def _xpos_tables_torch(n, dim, tdtype, centre, scale_base=512.0):
    """cos, sin (n, dim/2) in float32 and the xPos scale, as flash-attn's
    RotaryEmbedding(scale_base=...) caches them."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    t = torch.arange(n, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    zeta = (torch.arange(0, dim, 2, dtype=torch.float32) + 0.4 * dim) / (1.4 * dim)
    scale = zeta ** ((t - centre) / scale_base)[:, None]
    return freqs, scale


def _xpos_torch_cached(x, centre):
    """flash-attn's torch path with its cached xPos tables (half layout):
    ``q * cos_scaled + rotate_half(q) * sin_scaled``."""
    if torch is None:
        return None
    n, dim = x.shape[-2], x.shape[-1]
    tdtype = getattr(torch, x.dtype.name)
    freqs, scale = _xpos_tables_torch(n, dim, tdtype, centre)
    cos = torch.cat([torch.cos(freqs) * scale] * 2, dim=-1).to(tdtype)
    sin = torch.cat([torch.sin(freqs) * scale] * 2, dim=-1).to(tdtype)
    q = _torch_of(x)

    def rotate_half(t):
        t1, t2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
        return torch.cat((-t2, t1), dim=-1)

    return lambda: q * cos + rotate_half(q) * sin


def _xpos_torch_lucidrains(x, centre):
    """rotary-embedding-torch's apply_rotary_emb with use_xpos (interleaved
    pairs; freqs and scale cached, cos and sin taken in the call, as it
    does): ``t * freqs.cos() * scale + rotate_every_two(t) * freqs.sin() * scale``."""
    if torch is None:
        return None
    n, dim = x.shape[-2], x.shape[-1]
    tdtype = getattr(torch, x.dtype.name)
    freqs, scale = _xpos_tables_torch(n, dim, tdtype, centre)
    freqs = freqs.repeat_interleave(2, dim=-1)
    scale = scale.repeat_interleave(2, dim=-1).to(tdtype)
    q = _torch_of(x)

    def rotate_every_two(t):
        t = t.unflatten(-1, (-1, 2))
        return torch.stack((-t[..., 1], t[..., 0]), dim=-1).flatten(-2)

    return lambda: q * freqs.cos() * scale + rotate_every_two(q) * freqs.sin() * scale


def _deepseek_torch(x):
    """transformers' apply_rotary_pos_emb_interleave, cos/sin cached (the
    first half of the full tables, as it slices them)."""
    if torch is None:
        return None
    n, dim = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq
    tdtype = getattr(torch, x.dtype.name)
    cos, sin = freqs.cos().to(tdtype), freqs.sin().to(tdtype)
    q = _torch_of(x)

    def rotate():
        q1, q2 = q[..., 0::2], q[..., 1::2]
        return torch.cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], dim=-1)

    return rotate


def _dtype_of(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _dtypes():
    try:
        import ml_dtypes  # noqa: F401

        return ("float32", "bfloat16")
    except ImportError:  # pragma: no cover - depends on the machine
        return ("float32",)


@case("xpos")
def xpos_cases(quick):
    seq = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    cases = []
    shape = (1, 32, seq, 128)
    for name in _dtypes():
        x = rng.standard_normal(shape).astype(_dtype_of(name))
        out = np.empty_like(x)
        mem = copyto_of(shape, np.float16 if name == "bfloat16" else name)
        kw = dict(xpos="query", xpos_centre=seq // 2)
        cases.append(
            Case(
                name=f"apply_rope{shape} {name}, xpos='query', out=",
                nbytes=x.nbytes,
                posenc=lambda x=x, out=out, kw=kw: posenc.apply_rope(x, out=out, **kw),
                memory=mem,
                numpy=lambda x=x, kw=kw: reference.apply_rope(x, **kw),
                torch=_xpos_torch_cached(x, seq // 2),
                note="torch: flash-attn's cached xPos cos/sin (times the scale), "
                "q * cos + rotate_half(q) * sin",
            )
        )
        kw = dict(xpos="key", xpos_centre=seq // 2, layout="interleaved")
        cases.append(
            Case(
                name=f"apply_rope{shape} {name}, xpos='key', interleaved, out=",
                nbytes=x.nbytes,
                posenc=lambda x=x, out=out, kw=kw: posenc.apply_rope(x, out=out, **kw),
                memory=mem,
                numpy=lambda x=x, kw=kw: reference.apply_rope(x, **kw),
                torch=_xpos_torch_lucidrains(x, seq // 2),
                note="torch: rotary-embedding-torch's apply_rotary_emb with use_xpos "
                "(cos and sin of the cached angles taken in the call)",
            )
        )
    return cases


@case("deepseek")
def deepseek_cases(quick):
    seq = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    cases = []
    # a 128-wide head, and DeepSeek-V3's own: 128 heads of a 64-wide rope part
    for shape in ((1, 32, seq, 128), (1, 128, seq, 64)):
        for name in _dtypes():
            x = rng.standard_normal(shape).astype(_dtype_of(name))
            out = np.empty_like(x)
            cases.append(
                Case(
                    name=f"apply_rope{shape} {name}, layout='interleaved_to_half', out=",
                    nbytes=x.nbytes,
                    posenc=lambda x=x, out=out: posenc.apply_rope(
                        x, layout="interleaved_to_half", out=out
                    ),
                    memory=copyto_of(shape, np.float16 if name == "bfloat16" else name),
                    numpy=lambda x=x: reference.apply_rope(x, layout="interleaved_to_half"),
                    torch=_deepseek_torch(x),
                    note="torch: transformers' apply_rotary_pos_emb_interleave, cos/sin cached",
                )
            )
    return cases


# ---------------------------------------------------------------- attention biases


def _hf_alibi(n_heads, q_len, k_len):
    """transformers' ALiBi for a causal model: BLOOM's build_alibi_tensor
    (slope * key position, one row per head) broadcast over the queries, plus
    the causal mask."""
    closest = 2 ** int(np.floor(np.log2(n_heads)))
    base = torch.tensor(2 ** (-(2 ** -(np.log2(closest) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != n_heads:
        extra = torch.tensor(2 ** (-(2 ** -(np.log2(2 * closest) - 3))), dtype=torch.float32)
        rest = torch.arange(1, 1 + 2 * (n_heads - closest), 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra, rest)])
    mask = torch.ones(1, k_len, dtype=torch.long)
    positions = ((mask.cumsum(dim=-1) - 1) * mask)[:, None, :]
    alibi = (slopes[..., None] * positions).reshape(n_heads, 1, k_len)
    causal = torch.full((q_len, k_len), float("-inf")).triu(k_len - q_len + 1)
    return alibi, causal


def _hf_t5_bias(table, q_len, k_len):
    """transformers' T5Attention.compute_bias: bucket the (q, k) relative
    positions (the queries the newest q of the k positions), look the
    buckets up, heads first."""
    from transformers.models.t5.modeling_t5 import T5Attention

    context = torch.arange(k_len - q_len, k_len, dtype=torch.long)[:, None]
    memory = torch.arange(k_len, dtype=torch.long)[None, :]
    buckets = T5Attention._relative_position_bucket(
        memory - context, bidirectional=True, num_buckets=table.shape[0], max_distance=128
    )
    return torch.nn.functional.embedding(buckets, table).permute([2, 0, 1])


@case("bias")
def bias_cases(quick):
    n_heads, n = (16, 1024) if quick else (16, 2048)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((32, n_heads)).astype(np.float32)
    try:  # the T5 comparison calls transformers' own bucketing
        import transformers  # noqa: F401

        have_hf = torch is not None
    except ImportError:  # pragma: no cover - depends on the machine
        have_hf = False
    cases = []

    out = np.empty((n_heads, n, n), np.float32)
    if torch is not None:

        def torch_alibi():
            alibi, causal = _hf_alibi(n_heads, n, n)
            return alibi + causal

    cases.append(
        Case(
            name=f"alibi_bias({n_heads}, {n}) float32, out=",
            nbytes=out.nbytes,
            posenc=lambda: posenc.alibi_bias(n_heads, n, out=out),
            memory=lambda: out.fill(0.5),
            numpy=lambda: reference.alibi_bias(n_heads, n),
            torch=torch_alibi if torch is not None else None,
            jit=_jax_alibi(n_heads, n, n),
            note="torch, jit: BLOOM's build_alibi_tensor + causal mask, materialised",
        )
    )

    ttable = torch.from_numpy(table) if torch is not None else None
    cases.append(
        Case(
            name=f"t5_bias(({table.shape[0]}, {n_heads}) table, {n}) float32, out=",
            nbytes=out.nbytes,
            posenc=lambda: posenc.t5_bias(table, n, out=out),
            memory=lambda: out.fill(0.5),
            numpy=lambda: reference.t5_bias(table, n),
            torch=(lambda: _hf_t5_bias(ttable, n, n).contiguous()) if have_hf else None,
            jit=_jax_t5(table, n, n),
            note="torch: T5Attention's bucketing + embedding lookup, made contiguous; "
            "jit: the same in jax.numpy",
        )
    )

    scores = rng.standard_normal((1, n_heads, n, n)).astype(np.float32)
    alibi = posenc.alibi_bias(n_heads, n)
    tscores = torch.from_numpy(scores.copy()) if torch is not None else None
    if torch is not None:

        def torch_alibi_add():
            a, causal = _hf_alibi(n_heads, n, n)
            return tscores.add_(a[None]).add_(causal)

    cases.append(
        Case(
            name=f"alibi_bias({n_heads}, {n}, scores=) float32 (1, {n_heads}, {n}, {n})",
            nbytes=scores.nbytes,
            posenc=lambda: posenc.alibi_bias(n_heads, n, scores=scores),
            memory=lambda: np.add(scores, alibi, out=scores),
            numpy=lambda: reference.alibi_bias(n_heads, n, scores=scores),
            torch=torch_alibi_add if torch is not None else None,
            jit=_jax_alibi(n_heads, n, n, scores=scores),
            note="memory: scores += precomputed bias; torch: scores += alibi (broadcast) + mask; "
            "jit: scores + bias, a new array",
        )
    )

    # one decoding step over a long cache: the bias of one query, per head
    k = 8192 if quick else 32768
    step = np.empty((n_heads, 1, k), np.float32)
    if torch is not None:

        def torch_alibi_step():
            a, causal = _hf_alibi(n_heads, 1, k)
            return a + causal

    cases.append(
        Case(
            name=f"alibi_bias({n_heads}, 1, {k}) float32, out= (decoding)",
            nbytes=step.nbytes,
            posenc=lambda: posenc.alibi_bias(n_heads, 1, k, out=step),
            memory=lambda: step.fill(0.5),
            numpy=lambda: reference.alibi_bias(n_heads, 1, k),
            torch=torch_alibi_step if torch is not None else None,
            jit=_jax_alibi(n_heads, 1, k),
            note="torch: BLOOM's build_alibi_tensor + causal mask",
        )
    )
    cases.append(
        Case(
            name=f"t5_bias(({table.shape[0]}, {n_heads}) table, 1, {k}) float32, out= (decoding)",
            nbytes=step.nbytes,
            posenc=lambda: posenc.t5_bias(table, 1, k, out=step),
            memory=lambda: step.fill(0.5),
            numpy=lambda: reference.t5_bias(table, 1, k),
            torch=(lambda: _hf_t5_bias(ttable, 1, k).contiguous()) if have_hf else None,
            jit=_jax_t5(table, 1, k),
            note="torch: T5Attention's bucketing + embedding lookup",
        )
    )

    t5 = posenc.t5_bias(table, n)
    cases.append(
        Case(
            name=f"t5_bias(({table.shape[0]}, {n_heads}) table, {n}, scores=) float32",
            nbytes=scores.nbytes,
            posenc=lambda: posenc.t5_bias(table, n, scores=scores),
            memory=lambda: np.add(scores, t5, out=scores),
            numpy=lambda: reference.t5_bias(table, n, scores=scores),
            torch=(lambda: tscores.add_(_hf_t5_bias(ttable, n, n))) if have_hf else None,
            jit=_jax_t5(table, n, n, scores=scores),
            note="memory: scores += precomputed bias; torch: scores += compute_bias(...); "
            "jit: scores + bias, a new array",
        )
    )
    return cases


# ---------------------------------------------------------------- bfloat16


def _rmw_of(arr, passes=1):
    """The read-modify-write of `arr`'s bytes in place (as uint64 += 0),
    `passes` times: one read and one write each, what as many adds into it
    cannot go below."""
    words = arr.reshape(-1).view(np.uint64)

    def rmw():
        for _ in range(passes):
            np.add(words, np.uint64(0), out=words)

    return rmw


@case("bfloat16")
def bfloat16_cases(quick):
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - depends on the machine
        print("bfloat16: ml_dtypes is not installed, cases left out", file=sys.stderr)
        return []
    bf16 = np.dtype(ml_dtypes.bfloat16)
    seq = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    cases = []
    shape = (1, 32, seq, 128)
    x = rng.standard_normal(shape).astype(bf16)
    out, y = np.empty_like(x), x.copy()
    cases.append(
        Case(
            name=f"apply_rope{shape} bfloat16, out=",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(x, out=out),
            memory=copyto_of(shape, np.float16),  # the same bytes
            numpy=lambda: reference.apply_rope(x),
            torch=_rope_torch(x, -2),
            note="torch: transformers' formula in bfloat16, cos/sin cached",
        )
    )
    cases.append(
        Case(
            name=f"apply_rope{shape} bfloat16, in place",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(y, out=y),
            memory=copyto_of(shape, np.float16),
            torch=_rope_torch(x, -2),
            note="torch: out of place",
        )
    )

    n_heads, n = (16, 1024) if quick else (16, 2048)
    scores = rng.standard_normal((1, n_heads, n, n)).astype(bf16)
    table = rng.standard_normal((32, n_heads)).astype(np.float32)
    tscores = _torch_of(scores.copy()) if torch is not None else None
    if torch is not None:

        def torch_alibi_add():
            a, causal = _hf_alibi(n_heads, n, n)
            return tscores.add_((a[None] + causal).to(torch.bfloat16))

    cases.append(
        Case(
            name=f"alibi_bias({n_heads}, {n}, scores=) bfloat16 (1, {n_heads}, {n}, {n})",
            nbytes=scores.nbytes,
            posenc=lambda: posenc.alibi_bias(n_heads, n, scores=scores),
            memory=_rmw_of(scores),
            torch=torch_alibi_add if torch is not None else None,
            note="memory: one read and one write of the scores; torch: + alibi + mask",
        )
    )
    try:  # the T5 comparison calls transformers' own bucketing
        import transformers  # noqa: F401

        have_hf = torch is not None
    except ImportError:  # pragma: no cover - depends on the machine
        have_hf = False
    ttable = torch.from_numpy(table).to(torch.bfloat16) if have_hf else None
    cases.append(
        Case(
            name=f"t5_bias((32, {n_heads}) table, {n}, scores=) bfloat16",
            nbytes=scores.nbytes,
            posenc=lambda: posenc.t5_bias(table, n, scores=scores),
            memory=_rmw_of(scores),
            torch=(lambda: tscores.add_(_hf_t5_bias(ttable, n, n))) if have_hf else None,
            note="memory: one read and one write of the scores; torch: + compute_bias(...)",
        )
    )
    return cases


# ---------------------------------------------------------------- T5's backward pass


@case("t5_grad")
def t5_grad_cases(quick):
    from posenc.bias import t5_bias_table_grad

    n_heads, n = (16, 512) if quick else (16, 1024)
    grad = np.random.default_rng(0).standard_normal((1, n_heads, n, n)).astype(np.float32)
    words = grad.reshape(-1).view(np.uint64)
    torch_grad = None
    try:
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention

        config = T5Config(d_model=16, d_kv=4, num_heads=n_heads, num_layers=1)
        attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
        weight = attention.relative_attention_bias.weight
        bias = attention.compute_bias(n, n)  # the graph of the forward, kept
        tgrad = torch.from_numpy(grad)

        def torch_grad():
            return torch.autograd.grad(bias, weight, tgrad, retain_graph=True)

    except ImportError:  # pragma: no cover - depends on the machine
        pass
    return [
        Case(
            name=f"t5_bias_table_grad((1, {n_heads}, {n}, {n}) float32, 32 buckets)",
            nbytes=grad.nbytes,
            posenc=lambda: t5_bias_table_grad(grad, 32),
            memory=lambda: np.max(words),
            numpy=lambda: reference.t5_bias_table_grad(grad, 32),
            torch=torch_grad if torch is not None else None,
            note="memory: one read of the gradient; numpy: np.add.at; "
            "torch: autograd through T5Attention.compute_bias (backward only)",
        )
    ]


# ---------------------------------------------------------------- relative terms inside attention


def _recorded_gathers(term):
    """The C gathers one call of `term` makes, to be replayed alone: each
    call's map, scores view and thread rule as the term made them, its
    products (made by BLAS a block at a time, just before, in the term) one
    buffer per shape, read again by every call of that shape, so in cache
    as the term's own are."""
    from posenc import _core, relative

    calls, buffers = [], {}
    real = _core.rel_gather_add

    def record(products, index, scores, by_key, single=False):
        key = (products.shape, products.strides, products.dtype.str)
        if key not in buffers:  # the same layout (rows padded as the term pads them,
            # starting at the same byte of a cache line)
            row = products.strides[-2] // products.itemsize
            shape = products.shape[:-1] + (max(row, products.shape[-1]),)
            size = int(np.prod(shape))
            flat = np.full(size + 64, 0.5, products.dtype)
            skip = (products.ctypes.data - flat.ctypes.data) % 64 // products.itemsize
            base = flat[skip : skip + size].reshape(shape)
            buffers[key] = base[..., : products.shape[-1]]
        buf = buffers[key]
        calls.append((buf, index, scores, by_key, single))
        return real(products, index, scores, by_key, single)

    relative._core.rel_gather_add = record
    try:
        term()
    finally:
        relative._core.rel_gather_add = real

    def replay(calls=calls):
        for call in calls:
            real(*call)

    return replay, calls


def _rel_case(name, scores, passes, term, numpy, torch_fn, note):
    """Two cases for one term: its C gathers alone (replayed with their
    products in cache, as the term makes them) against the read-modify-write
    of the scores once for each of the `passes` terms added, and the whole
    term (BLAS products + gathers) against the NumPy twin and torch as
    transformers writes it."""
    rmw = _rmw_of(scores, passes)
    replay, calls = _recorded_gathers(term)
    return [
        Case(
            name=f"{name}: C gathers into scores {scores.shape}",
            nbytes=scores.nbytes,
            posenc=replay,
            memory=rmw,
            note=f"{len(calls)} gathers, products of about 2 MiB or less each, in cache; memory: "
            f"{passes} x the read-modify-write of the scores (uint64 += 0 over their bytes); "
            "target <= 1.3x",
        ),
        Case(
            name=f"{name}: whole term, scores=",
            nbytes=scores.nbytes,
            posenc=term,
            memory=rmw,
            numpy=numpy,
            torch=torch_fn,
            note=note,
        ),
    ]


@case("relative")
def relative_cases(quick):
    from posenc import relative as rel

    rng = np.random.default_rng(0)
    n, heads, d = (512, 12, 64) if quick else (1024, 16, 64)
    f4 = np.float32
    scores = rng.standard_normal((1, heads, n, n)).astype(f4)
    q = rng.standard_normal((1, heads, n, d)).astype(f4)
    k = rng.standard_normal((1, heads, n, d)).astype(f4)
    bias = rng.standard_normal((heads, d)).astype(f4)
    have_torch = torch is not None
    tq, tk, tscores = (torch.from_numpy(x) for x in (q, k, scores)) if have_torch else (None,) * 3
    cases = []

    # Transformer-XL / XLNet: the bi table of 2n rows, shifted by indexing
    r = rng.standard_normal((heads, 2 * n, d)).astype(f4)

    def torch_xl():
        # XLNet's rel_attn_core: bd = einsum(q + r_r_bias, k_head_r), rel_shift_bnij
        from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

        bd = torch.einsum("bnid,njd->bnij", tq + tbias[:, None], tr)
        return tscores.add_(XLNetRelativeAttention.rel_shift_bnij(bd, klen=n))

    tbias = torch.from_numpy(bias) if have_torch else None
    tr = torch.from_numpy(r) if have_torch else None
    cases += _rel_case(
        "xl_position_term",
        scores,
        1,
        lambda: rel.xl_position_term(q, r, bias=bias, scores=scores),
        lambda: reference.xl_position_term(q, r, bias=bias, scores=scores),
        torch_xl if have_torch else None,
        "torch: einsum + XLNet's rel_shift_bnij + add",
    )
    if have_torch:  # the same term on bfloat16 tensors, as a bfloat16 XLNet has them
        bq, br, bb, bs = (torch.from_numpy(x).bfloat16() for x in (q, r, bias, scores))

        def torch_xl_bf16():
            from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

            bd = torch.einsum("bnid,njd->bnij", bq + bb[:, None], br)
            return bs.add_(XLNetRelativeAttention.rel_shift_bnij(bd, klen=n))

        cases.append(
            Case(
                name=f"xl_position_term: bfloat16 tensors, scores {tuple(bs.shape)}",
                nbytes=bs.numel() * 2,
                posenc=lambda: rel.xl_position_term(bq, br, bias=bb, scores=bs),
                memory=_rmw_of(bs.view(torch.int16).numpy()),
                torch=torch_xl_bf16,
                note="posenc: products in float32 from the bfloat16 values, rounded once into "
                "the scores; torch: XLNet's einsum in bfloat16 + rel_shift_bnij + add",
            )
        )

    # DeBERTa v3: 256 buckets, 512 positions, c2p and p2c
    span = 256
    pk = rng.standard_normal((heads, 2 * span, d)).astype(f4)
    pq = rng.standard_normal((heads, 2 * span, d)).astype(f4)

    def torch_deberta():
        # DisentangledSelfAttention.disentangled_attention_bias (heads folded into the batch)
        from transformers.models.deberta_v2 import modeling_deberta_v2 as m

        ql, kl = tq.reshape(heads, n, d), tk.reshape(heads, n, d)
        rp = m.build_relative_position(ql, kl, bucket_size=span, max_position=512)
        scale = m.scaled_size_sqrt(ql, 3)
        pos = torch.clamp(rp + span, 0, 2 * span - 1).squeeze(0).expand(heads, n, n)
        c2p_att = torch.gather(torch.bmm(ql, tpk.transpose(-1, -2)), -1, pos)
        p2c_att = torch.gather(torch.bmm(kl, tpq.transpose(-1, -2)), -1, pos).transpose(-1, -2)
        return tscores.add_((c2p_att / scale + p2c_att / scale).reshape(1, heads, n, n))

    tpk = torch.from_numpy(pk) if have_torch else None
    tpq = torch.from_numpy(pq) if have_torch else None
    cases += _rel_case(
        "deberta_attention_bias (256 buckets)",
        scores,
        2,
        lambda: rel.deberta_attention_bias(
            q, k, pk, pq, position_buckets=span, max_relative_positions=512, scores=scores
        ),
        lambda: reference.deberta_attention_bias(
            q, k, pk, pq, position_buckets=span, max_relative_positions=512, scores=scores
        ),
        torch_deberta if have_torch else None,
        "torch: transformers' c2p and p2c gathers + add",
    )

    # Shaw et al.: clip 16, a table shared by the heads
    a_k = rng.standard_normal((33, d)).astype(f4)
    ta_k = torch.from_numpy(a_k) if have_torch else None

    def torch_shaw():
        # tensor2tensor's _relative_attention_inner: embeddings (n, n, d), then x_t z^T
        idx = torch.clamp(torch.arange(n)[None, :] - torch.arange(n)[:, None], -16, 16) + 16
        z = ta_k[idx]
        x_t = tq[0].permute(1, 0, 2)
        return tscores.add_(torch.matmul(x_t, z.transpose(1, 2)).permute(1, 0, 2)[None])

    cases += _rel_case(
        "shaw_key_term (clip 16)",
        scores,
        1,
        lambda: rel.shaw_key_term(q, a_k, max_distance=16, scores=scores),
        lambda: reference.shaw_key_term(q, a_k, max_distance=16, scores=scores),
        torch_shaw if have_torch else None,
        "torch: tensor2tensor's relations_keys gather + matmul",
    )

    # TENER: both shifted terms
    table = posenc.tener_relative_table(n, d)
    ttable = torch.from_numpy(table) if have_torch else None

    def torch_tener():
        # TENER's RelativeMultiHeadAttn: B_ + D_, _shift, E_, _transpose_shift
        bd = torch.einsum("bnqd,ld->bnql", tq + tbias[:, None], ttable)
        e = torch.einsum("bnqd,ld->bnql", tk, ttable)
        b_, h_, m_, _ = bd.shape
        pad = bd.new_zeros(b_, h_, m_, 1)
        bd = torch.cat([bd, pad], dim=-1).view(b_, h_, -1, m_)[:, :, :-1].view(b_, h_, m_, -1)
        e = torch.cat([e, pad], dim=-1).view(b_, h_, -1, m_)
        e = e.index_select(index=torch.arange(m_) * 2 + 1, dim=-2).transpose(-1, -2)
        return tscores.add_(bd[:, :, :, m_:] + e)

    cases += _rel_case(
        "tener_position_term",
        scores,
        2,
        lambda: rel.tener_position_term(q, k, table, v=bias, scores=scores),
        lambda: reference.tener_position_term(q, k, table, v=bias, scores=scores),
        torch_tener if have_torch else None,
        "torch: TENER's einsums, _shift and _transpose_shift + add",
    )

    # the terms that are not gathers: Shaw's relative values (a C scatter of
    # the weights by clipped distance, then one matmul), XLNet's content
    # bias and TUPE's untied positional bias (BLAS and one add)
    weights = rng.random((1, heads, n, n), dtype=f4)
    a_v = rng.standard_normal((33, d)).astype(f4)
    ta_v, tweights = (torch.from_numpy(x) for x in (a_v, weights)) if have_torch else (None,) * 2

    def torch_shaw_values():
        # tensor2tensor's _relative_attention_inner for values: x (n, heads, n) @ z (n, n, d)
        idx = torch.clamp(torch.arange(n)[None, :] - torch.arange(n)[:, None], -16, 16) + 16
        z = ta_v[idx]
        x = tweights[0].permute(1, 0, 2)
        return torch.matmul(x, z).permute(1, 0, 2)[None]

    cases.append(
        Case(
            name=f"shaw_value_term (clip 16): weights {weights.shape}",
            nbytes=weights.nbytes,
            posenc=lambda: rel.shaw_value_term(weights, a_v, max_distance=16),
            memory=lambda: weights.sum(),
            numpy=lambda: reference.shaw_value_term(weights, a_v, max_distance=16),
            torch=torch_shaw_values if have_torch else None,
            note="memory: one read of the weights (their sum); "
            "torch: tensor2tensor's relations_values gather + matmul",
        )
    )
    rmw = _rmw_of(scores)

    def torch_content():
        # XLNet's rel_attn_core: the r_w_bias part of einsum(q + r_w_bias, k_head_h)
        return tscores.add_(torch.einsum("nd,bnjd->bnj", tbias, tk)[:, :, None, :])

    cases.append(
        Case(
            name="xl_content_bias: scores=",
            nbytes=scores.nbytes,
            posenc=lambda: rel.xl_content_bias(k, bias, scores=scores),
            memory=rmw,
            numpy=lambda: reference.xl_content_bias(k, bias, scores=scores),
            torch=torch_content if have_torch else None,
            note="memory: the read-modify-write of the scores; torch: XLNet's einsum of "
            "r_w_bias with the keys, added",
        )
    )
    if have_torch:  # into bfloat16 scores, as a bfloat16 XLNet holds them
        bk, bb, bs = (torch.from_numpy(x).bfloat16() for x in (k, bias, scores))

        def torch_content_bf16():
            return bs.add_(torch.einsum("nd,bnjd->bnj", bb, bk)[:, :, None, :])

        cases.append(
            Case(
                name=f"xl_content_bias: bfloat16 tensors, scores {tuple(bs.shape)}",
                nbytes=bs.numel() * 2,
                posenc=lambda: rel.xl_content_bias(bk, bb, scores=bs),
                memory=_rmw_of(bs.view(torch.int16).numpy()),
                torch=torch_content_bf16,
                note="posenc: u . k in float32 from the bfloat16 values, each sum rounded once "
                "into the scores; torch: the einsum in bfloat16, added",
            )
        )

    # TUPE: 512 positions and [CLS], 12 heads, 32 buckets up to 128
    tn, th = (256, 12) if quick else (512, 12)
    pos_q = rng.standard_normal((th, tn + 1, d)).astype(f4)
    pos_k = rng.standard_normal((th, tn + 1, d)).astype(f4)
    rel_table = rng.standard_normal((33, th)).astype(f4)
    tupe_scores = rng.standard_normal((1, th, tn, tn)).astype(f4)
    tpos_q, tpos_k, trel, ttupe = (
        (torch.from_numpy(x) for x in (pos_q, pos_k, rel_table, tupe_scores))
        if have_torch
        else (None,) * 4
    )

    def torch_tupe():
        # TUPE's fairseq encoder: bmm of the scaled positional queries and keys,
        # [CLS] untied, plus the T5 bucket embedding (the last row to [CLS])
        from transformers.models.t5.modeling_t5 import T5Attention

        bias = torch.bmm(tpos_q * (2 * d) ** -0.5, tpos_k.transpose(1, 2))
        cls_to_others, others_to_cls = bias[:, 0, 0], bias[:, 1, 1]
        bias = bias[:, 1:, 1:].clone()
        bias[:, :, 0] = others_to_cls[:, None]
        bias[:, 0, :] = cls_to_others[:, None]
        pos = torch.arange(tn)
        buckets = T5Attention._relative_position_bucket(
            pos[None, :] - pos[:, None], bidirectional=True, num_buckets=32, max_distance=128
        )
        buckets[:, 0] = 32
        buckets[0, :] = 16
        return ttupe.add_(torch.nn.functional.embedding(buckets, trel).permute(2, 0, 1) + bias)

    cases.append(
        Case(
            name=f"tupe_bias ({th} heads, {tn} positions + [CLS]): scores=",
            nbytes=tupe_scores.nbytes,
            posenc=lambda: rel.tupe_bias(pos_q, pos_k, rel_table=rel_table, scores=tupe_scores),
            memory=_rmw_of(tupe_scores),
            numpy=lambda: reference.tupe_bias(
                pos_q, pos_k, rel_table=rel_table, scores=tupe_scores
            ),
            torch=torch_tupe if have_torch else None,
            note="memory: the read-modify-write of the scores; torch: TUPE's bmm, untied "
            "[CLS] and T5 buckets (transformers' bucketing) + add",
        )
    )
    return cases


@case("relative_grad")
def relative_grad_cases(quick):
    """The backward of the gathered terms in torch: posenc's operator (the
    C scatter of the incoming gradient by column, then BLAS) against
    autograd through the same term as transformers and the authors write
    it.  Backward only: both forwards are recorded once."""
    if torch is None:
        return []
    from transformers.models.deberta_v2 import modeling_deberta_v2 as m
    from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

    rng = np.random.default_rng(0)
    n, heads, d, span = (512, 12, 64, 256) if quick else (1024, 16, 64, 256)

    def t(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_()

    q, k, r, bias = t(1, heads, n, d), t(1, heads, n, d), t(heads, 2 * n, d), t(heads, d)
    pk, pq, a_k = t(heads, 2 * span, d), t(heads, 2 * span, d), t(33, d)
    grad = torch.from_numpy(rng.standard_normal((1, heads, n, n)).astype(np.float32))
    rmw = _rmw_of(grad.numpy())

    def backward(term, inputs):
        return lambda: torch.autograd.grad(term, inputs, grad, retain_graph=True)

    ql, kl = q.reshape(heads, n, d), k.reshape(heads, n, d)
    rp = m.build_relative_position(ql, kl, bucket_size=span, max_position=512)
    pos = torch.clamp(rp + span, 0, 2 * span - 1).squeeze(0).expand(heads, n, n)
    scale = m.scaled_size_sqrt(ql, 3)
    c2p = torch.gather(torch.bmm(ql, pk.transpose(-1, -2)), -1, pos)
    p2c = torch.gather(torch.bmm(kl, pq.transpose(-1, -2)), -1, pos).transpose(-1, -2)
    idx = torch.clamp(torch.arange(n)[None, :] - torch.arange(n)[:, None], -16, 16) + 16
    terms = {
        "xl_position_term": (
            posenc.xl_position_term(q, r, bias=bias),
            XLNetRelativeAttention.rel_shift_bnij(
                torch.einsum("bnid,njd->bnij", q + bias[:, None], r), klen=n
            ),
            (q, r, bias),
            "XLNet's einsum + rel_shift_bnij",
        ),
        "deberta_attention_bias (256 buckets)": (
            posenc.deberta_attention_bias(
                q, k, pk, pq, position_buckets=span, max_relative_positions=512
            ),
            ((c2p / scale + p2c / scale).reshape(1, heads, n, n)),
            (q, k, pk, pq),
            "transformers' c2p and p2c gathers",
        ),
        "shaw_key_term (clip 16)": (
            posenc.shaw_key_term(q, a_k, max_distance=16),
            torch.matmul(q[0].permute(1, 0, 2), a_k[idx].transpose(1, 2)).permute(1, 0, 2)[None],
            (q, a_k),
            "tensor2tensor's relations_keys gather + matmul",
        ),
    }
    return [
        Case(
            name=f"{name}: backward, gradient {tuple(grad.shape)}",
            nbytes=grad.numel() * 4,
            posenc=backward(mine, inputs),
            memory=rmw,
            torch=backward(theirs, inputs),
            note=f"memory: the read-modify-write of the gradient; torch: autograd through {how}",
        )
        for name, (mine, theirs, inputs, how) in terms.items()
    ]


# ---------------------------------------------------------------- torch tensors


def _hf_rope_step(q, position):
    """transformers' formula on the tensor q (batch, heads, seq, dim), with
    the cos/sin of `position` (+ arange(seq)) computed beforehand, as a
    KV-cache step finds them."""
    n, dim = q.shape[-2], q.shape[-1]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = (position + torch.arange(n, dtype=torch.float32))[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)

    def rotate_half(t):
        t1, t2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
        return torch.cat((-t2, t1), dim=-1)

    return lambda q: q * cos + rotate_half(q) * sin


@case("torch")
def torch_cases(quick):
    if torch is None:
        print("torch: torch is not installed, cases left out", file=sys.stderr)
        return []
    cases = []
    gen = torch.Generator().manual_seed(0)

    # one decoding step: a tensor in, a tensor out
    q = torch.randn(1, 32, 1, 128, generator=gen)
    out = torch.empty_like(q)
    step = _hf_rope_step(q, 4096)
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32 tensor, offset=4096 (decoding)",
            nbytes=q.numel() * 4,
            posenc=lambda: posenc.apply_rope(q, offset=4096),
            memory=copyto_of(tuple(q.shape), np.float32),
            torch=lambda: step(q),
            note="posenc: tensor in, tensor out; torch: cos/sin of the position cached",
        )
    )
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32 tensor, offset=4096, out= (decoding)",
            nbytes=q.numel() * 4,
            posenc=lambda: posenc.apply_rope(q, offset=4096, out=out),
            memory=copyto_of(tuple(q.shape), np.float32),
            torch=lambda: step(q),
            note="torch: out of place, as it is written",
        )
    )
    traced = torch.compile(lambda: posenc.apply_rope(q, offset=4096), fullgraph=True)
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32 under torch.compile (decoding)",
            nbytes=q.numel() * 4,
            posenc=traced,
            memory=copyto_of(tuple(q.shape), np.float32),
            torch=lambda: step(q),
            note="posenc: the operator torch.ops.posenc.apply_rope in a compiled graph",
        )
    )

    seq = 1024 if quick else 4096
    x = torch.randn(1, 32, seq, 128, generator=gen)
    whole = _hf_rope_step(x, 0)
    cases.append(
        Case(
            name=f"apply_rope(1, 32, {seq}, 128) float32 tensor, new tensor",
            nbytes=x.numel() * 4,
            posenc=lambda: posenc.apply_rope(x),
            memory=lambda: torch.empty_like(x).copy_(x),
            torch=lambda: whole(x),
            note="allocation and page faults included on all sides",
        )
    )

    # autograd: the forward and backward of a training step's rotation
    xg = x.clone().requires_grad_()
    grad = torch.randn(x.shape, generator=gen)

    def posenc_train():
        posenc.apply_rope(xg).backward(grad)
        xg.grad = None

    def torch_train(rotate=whole):
        rotate(xg).backward(grad)
        xg.grad = None

    compiled_rotate = torch.compile(whole)

    def two_copies():  # a forward's and a backward's new tensor, each written once
        torch.empty_like(x).copy_(x)
        torch.empty_like(x).copy_(x)

    def compiled_train():
        torch_train(compiled_rotate)

    cases.append(
        Case(
            name=f"apply_rope(1, 32, {seq}, 128) float32, forward + backward",
            nbytes=2 * x.numel() * 4,
            posenc=posenc_train,
            memory=two_copies,
            torch=torch_train,
            compiled=compiled_train,
            note="backward: posenc the inverse rotation; torch autograd through the formula",
        )
    )

    n_heads, n = (16, 512) if quick else (16, 1024)
    table = torch.randn(32, n_heads, generator=gen, requires_grad=True)
    tgrad = torch.randn(n_heads, n, n, generator=gen)

    def posenc_t5_train():
        posenc.t5_bias(table, n).backward(tgrad)
        table.grad = None

    def torch_t5_train(bias=_hf_t5_bias):
        bias(table, n, n).backward(tgrad)
        table.grad = None

    compiled_bias = torch.compile(_hf_t5_bias)
    try:
        import transformers  # noqa: F401

        have_hf = True
    except ImportError:  # pragma: no cover - depends on the machine
        have_hf = False
    cases.append(
        Case(
            name=f"t5_bias((32, {n_heads}) table, {n}) float32, forward + backward",
            nbytes=2 * n_heads * n * n * 4,
            posenc=posenc_t5_train,
            memory=lambda: tgrad.clone(),
            torch=torch_t5_train if have_hf else None,
            compiled=(lambda: torch_t5_train(compiled_bias)) if have_hf else None,
            note="backward: posenc a scatter-add by bucket; torch embedding's backward",
        )
    )
    return cases


# ---------------------------------------------------------------- JAX arrays


def _xla_fill(x):
    """The floor of a host kernel inside a jitted function: a callback that
    fills XLA's new output buffer (ndarray.fill), where JAX has
    buffer_callback; else a jitted x * 1.5, XLA's own pass."""
    try:
        from jax.experimental.buffer_callback import buffer_callback
    except ImportError:  # pragma: no cover - depends on the JAX version
        return _ready(jax.jit(lambda q: q * 1.5), x)

    def fill(ctx, out, q):
        np.asarray(out).fill(0.5)

    return _ready(jax.jit(buffer_callback(fill, jax.ShapeDtypeStruct(x.shape, x.dtype))), x)


@case("jax")
def jax_cases(quick):
    if jax is None:
        print("jax: jax is not installed, cases left out", file=sys.stderr)
        return []
    cases = []
    rng = np.random.default_rng(0)

    # one decoding step: a JAX array in, a JAX array out
    x = rng.standard_normal((1, 32, 1, 128)).astype(np.float32)
    q = jnp.asarray(x)
    cos_sin_step = _jax_rope(x)  # cos/sin of the one position cached

    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32 JAX array, offset=4096 (decoding)",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(q, offset=4096).block_until_ready(),
            memory=copyto_of(x.shape, x.dtype),
            jit=cos_sin_step,
            note="posenc: array in, array out, eagerly; jit: the formula, cos/sin cached",
        )
    )
    step = jax.jit(lambda q, o: posenc.apply_rope(q, offset=o))
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32 under jax.jit, traced offset (decoding)",
            nbytes=x.nbytes,
            posenc=_ready(step, q, 4096),
            memory=copyto_of(x.shape, x.dtype),
            jit=cos_sin_step,
            note="posenc: a callback of the compiled function into the C kernel",
        )
    )

    seq = 1024 if quick else 4096
    x = rng.standard_normal((1, 32, seq, 128)).astype(np.float32)
    whole = jnp.asarray(x)
    formula = _jax_rope(x)
    cases.append(
        Case(
            name=f"apply_rope(1, 32, {seq}, 128) float32 JAX array, new array",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(whole).block_until_ready(),
            memory=lambda: np.copyto(np.empty_like(x), x),
            jit=formula,
            note="posenc: read in place, the result adopted by XLA without a copy",
        )
    )
    cases.append(
        Case(
            name=f"apply_rope(1, 32, {seq}, 128) float32 under jax.jit",
            nbytes=x.nbytes,
            posenc=_ready(jax.jit(lambda q: posenc.apply_rope(q)), whole),
            memory=_xla_fill(whole),
            jit=formula,
            note="posenc: the kernel on XLA's buffers in place (buffer_callback); "
            "memory: the host filling XLA's new output buffer from the same kind of callback",
        )
    )

    # the forward and backward of a training step's rotation
    n = whole.shape[-2]
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, 128, 2, dtype=np.float32) / 128)
    emb = np.concatenate([np.arange(n, dtype=np.float32)[:, None] * inv_freq] * 2, axis=-1)
    cos, sin = jnp.asarray(np.cos(emb)), jnp.asarray(np.sin(emb))
    weight = jnp.asarray(rng.standard_normal(x.shape).astype(np.float32))

    def rotate(q):
        return q * cos + jnp.concatenate([-q[..., 64:], q[..., :64]], axis=-1) * sin

    posenc_grad = jax.jit(jax.grad(lambda q: jnp.vdot(weight, posenc.apply_rope(q))))
    formula_grad = jax.jit(jax.grad(lambda q: jnp.vdot(weight, rotate(q))))
    cases.append(
        Case(
            name=f"apply_rope(1, 32, {seq}, 128) float32, jax.jit(jax.grad(...))",
            nbytes=2 * x.nbytes,
            posenc=_ready(posenc_grad, whole),
            memory=lambda: np.copyto(np.empty_like(x), x),
            jit=_ready(formula_grad, whole),
            note="the loss <w, rope(q)>: forward + backward; posenc's backward the inverse "
            "rotation; jit: JAX's autodiff through the formula",
        )
    )
    return cases


def _compile_column(case, torch_ok, compile_ok):
    """The callable timed in the compiled column: the case's own, else
    torch.compile of its torch callable (compiled on its first call)."""
    if not (torch_ok and compile_ok):
        return None
    if case.compiled is not None:
        return case.compiled
    return torch.compile(case.torch) if case.torch is not None else None


# ---------------------------------------------------------------- driver


def run(selected, threads, repeats, quick, torch_ok, compile_ok=True, jax_ok=True):
    rows = []
    for group, make in CASES:
        if selected and not any(k in group for k in selected):
            continue
        for c in make(quick):
            compiled = _compile_column(c, torch_ok, compile_ok)
            for nt in threads:
                posenc.set_num_threads(nt)
                if torch_ok:
                    torch.set_num_threads(nt)
                row = {
                    "group": group,
                    "case": c.name,
                    "threads": nt,
                    "bytes": c.nbytes,
                    "note": c.note,
                    **c.extra,
                }
                row["posenc_ms"] = timeit(c.posenc, repeats) * 1e3
                row["memory_ms"] = timeit(c.memory, repeats) * 1e3
                row["numpy_ms"] = (
                    timeit(c.numpy, max(3, repeats // 4)) * 1e3
                    if c.numpy is not None and nt == threads[0]
                    else None
                )
                row["torch_ms"] = (
                    timeit(c.torch, repeats) * 1e3 if c.torch is not None and torch_ok else None
                )
                row["compiled_ms"] = timeit(compiled, repeats) * 1e3 if compiled else None
                row["jit_ms"] = timeit(c.jit, repeats) * 1e3 if c.jit and jax_ok else None
                rows.append(row)
                print(format_row(row), file=sys.stderr, flush=True)
    posenc.set_num_threads(0)
    # the NumPy reference runs on one thread whatever is set: one figure per case
    by_case = {}
    for row in rows:
        by_case.setdefault(row["case"], row["numpy_ms"])
        if row["numpy_ms"] is None:
            row["numpy_ms"] = by_case[row["case"]]
    for row in rows:
        row["vs_memory"] = row["posenc_ms"] / row["memory_ms"]
        row["numpy_speedup"] = row["numpy_ms"] / row["posenc_ms"] if row["numpy_ms"] else None
        row["torch_speedup"] = row["torch_ms"] / row["posenc_ms"] if row["torch_ms"] else None
        row["compiled_speedup"] = (
            row["compiled_ms"] / row["posenc_ms"] if row["compiled_ms"] else None
        )
        row["jit_speedup"] = row["jit_ms"] / row["posenc_ms"] if row["jit_ms"] else None
    return rows


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def format_row(row):
    return (
        f"{row['case']} [{row['threads']} thr]: posenc {row['posenc_ms']:.2f} ms, "
        f"memory {row['memory_ms']:.2f} ms"
    )


def markdown(rows):
    head = (
        "| case | thr | MiB | posenc ms | memory ms | numpy ms | torch ms | compiled ms | jit ms "
        "| posenc/memory | numpy/posenc | torch/posenc | compiled/posenc | jit/posenc |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['threads']} | {r['bytes'] / 2**20:.0f} | {r['posenc_ms']:.2f} "
            f"| {r['memory_ms']:.2f} | {fmt(r['numpy_ms'], '.1f')} | {fmt(r['torch_ms'], '.2f')} "
            f"| {fmt(r['compiled_ms'], '.2f')} | {fmt(r['jit_ms'], '.2f')} "
            f"| {r['vs_memory']:.2f}x | {fmt(r['numpy_speedup'], '.1f')}x "
            f"| {fmt(r['torch_speedup'], '.2f')}x | {fmt(r['compiled_speedup'], '.2f')}x "
            f"| {fmt(r['jit_speedup'], '.2f')}x |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("-k", action="append", default=[], help="only groups containing this")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    parser.add_argument(
        "--no-compile", action="store_true", help="leave the torch.compile column out"
    )
    parser.add_argument("--no-jax", action="store_true", help="leave the jax.jit column out")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    repeats = args.repeats or (5 if args.quick else 15)
    torch_ok = torch is not None and not args.no_torch
    jax_ok = jax is not None and not args.no_jax
    rows = run(args.k, threads, repeats, args.quick, torch_ok, not args.no_compile, jax_ok)
    info = {
        **posenc.config(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__ if torch_ok else None,
        "jax": jax.__version__ if jax_ok else None,
        "quick": args.quick,
    }
    print(
        f"posenc {info['posenc']}, simd {info['simd']}, numpy {info['numpy']}, "
        f"torch {info['torch']}, jax {info['jax']}, {info['cpus']} cpus\n"
    )
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": info, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
