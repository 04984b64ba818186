"""posenc called on JAX arrays: eagerly, under jax.jit, under jax.grad."""

from __future__ import annotations

import sys

import numpy as np
from baselines_jax import _jax_rope, _ready, _xla_fill
from common import Case, copyto_of, jax, jnp

import posenc


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
