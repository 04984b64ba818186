"""What users need around a rotary embedding: position ids of packed
sequences, checkpoint weights converted between the two RoPE layouts, and
Llama 4's attention temperature on its layers without RoPE."""

from __future__ import annotations

import numpy as np

from . import _validate as v
from ._interop import foreign

_LAYOUTS = ("half", "interleaved")


@foreign
def positions_from_cu_seqlens(cu_seqlens, *, start=0):
    """Position ids of packed sequences, from their boundaries.

    Parameters
    ----------
    cu_seqlens : array_like of int, shape (n + 1,)
        The cumulative lengths of `n` sequences packed into one row, as
        flash-attn's varlen functions take them: ``cu_seqlens[0] == 0``,
        non-decreasing, sequence ``k`` holding tokens
        ``cu_seqlens[k]:cu_seqlens[k + 1]``.
    start : int
        The first position of every sequence (0; RoBERTa-like models start
        at ``padding_idx + 1``).

    Returns
    -------
    ndarray of int64, shape (cu_seqlens[-1],)
        ``start + t - cu_seqlens[k]`` for token ``t`` of sequence ``k``: each
        sequence restarts at `start`, so one ``apply_rope`` call rotates a
        packed batch as if its sequences were apart.
    """
    cu = np.asarray(cu_seqlens)
    if cu.dtype.kind not in "iu":
        raise TypeError(f"cu_seqlens must hold integers, not dtype {cu.dtype}")
    if cu.ndim != 1 or cu.shape[0] < 1:
        raise ValueError(f"cu_seqlens must be 1-dimensional, at least (0,), not {cu.shape}")
    start = v.integer(start, "start")
    cu = cu.astype(np.int64)
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, not {cu[0]}")
    lengths = np.diff(cu)
    if (lengths < 0).any():
        raise ValueError("cu_seqlens must be non-decreasing")
    total = int(cu[-1])
    v.shape_size((total,), "cu_seqlens[-1]")
    # each token's index minus the start of its sequence
    return np.arange(total, dtype=np.int64) - np.repeat(cu[:-1], lengths) + start


@foreign
def permute_rope_weight(weight, n_heads, *, to="half"):
    """A q or k projection converted between the interleaved and half layouts.

    A checkpoint trained with interleaved RoPE pairs (Meta's Llama, GPT-J)
    works with the half layout (transformers' Llama) once the output
    features of each head are reordered so that pair ``(2i, 2i + 1)``
    becomes ``(i, i + head_dim / 2)``; transformers converts Meta's
    checkpoints this way.  The attention scores are unchanged: q and k are
    permuted alike, and the rotation of each pair is the same.

    Parameters
    ----------
    weight : array_like, shape (n_heads * head_dim, ...) or (n_heads * head_dim,)
        The projection's weight (output features first, as torch's Linear
        stores them) or its bias.
    n_heads : int
        Number of heads the output features split into (the key/value heads
        for a k projection with grouped queries).
    to : {"half", "interleaved"}
        The layout to convert to; the other is the one `weight` is in.

    Returns
    -------
    ndarray (a new array) of weight's shape and dtype.
    """
    w = np.asarray(weight)
    if w.ndim not in (1, 2):
        raise ValueError(f"weight must be 1- or 2-dimensional, not {w.ndim}-dimensional")
    n_heads = v.integer(n_heads, "n_heads", minimum=1)
    to = v.choice(to, "to", _LAYOUTS)
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise ValueError(
            f"weight.shape[0] = {rows} must be n_heads = {n_heads} times an even head_dim"
        )
    half = rows // n_heads // 2
    # interleaved -> half: feature 2i + j of a head goes to j * half + i
    split = (half, 2) if to == "half" else (2, half)
    heads = w.reshape(n_heads, *split, *w.shape[1:])
    return np.ascontiguousarray(np.swapaxes(heads, 1, 2)).reshape(w.shape)


@foreign
def attention_temperature(positions, *, floor_scale=8192, attn_scale=0.1):
    """Llama 4's query scale on its layers without RoPE (attention
    temperature tuning): ``1 + attn_scale * log(1 + floor((pos + 1) /
    floor_scale))``, which grows with the distance from the start.

    Parameters
    ----------
    positions : int or array_like
        Positions (an int n means ``arange(n)``).
    floor_scale, attn_scale
        The config's ``floor_scale`` (8192) and ``attn_scale`` (0.1).

    Returns
    -------
    ndarray of float64, the shape of `positions`
        The factor to multiply the queries by, computed in float64 (the
        model computes it in float32).
    """
    pos, shape = v.positions(positions)
    floor_scale = v.real(floor_scale, "floor_scale", positive=True)
    attn_scale = v.real(attn_scale, "attn_scale")
    scale = np.log1p(np.floor((pos + 1.0) / floor_scale)) * attn_scale + 1.0
    return scale.reshape(shape)
