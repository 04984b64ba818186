"""The jax.numpy formulas the benchmarks time posenc against.

Each returns a callable timing one call of the jitted function on JAX
arrays, result ready; the arrays it computes from are arguments (not
constants XLA could fold while compiling)."""

from __future__ import annotations

import numpy as np
from common import jax, jnp

import posenc


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
