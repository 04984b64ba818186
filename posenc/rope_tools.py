"""What users need around a rotary embedding: checkpoint weights converted
between the two RoPE layouts, and Llama 4's attention temperature on its
layers without RoPE.  The position ids of packed sequences, multimodal
prompts and vision patches are in :mod:`posenc.positions` (and importable
from here, where they were first)."""

from __future__ import annotations

import math

import numpy as np

from . import _validate as v
from ._interop import accepts_tensors
from .positions import mrope_position_ids as mrope_position_ids
from .positions import positions_from_cu_seqlens as positions_from_cu_seqlens
from .positions import vision_position_ids as vision_position_ids

_LAYOUTS = ("half", "interleaved")


@accepts_tensors
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
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (a new array) of weight's shape and dtype.

    Raises
    ------
    TypeError, ValueError
        Naming the argument: `weight` not 1- or 2-dimensional, or its rows not
        `n_heads` times an even head_dim; an unknown `to`.


    Examples
    --------
    >>> posenc.permute_rope_weight(np.arange(8), 1).tolist()
    [0, 2, 4, 6, 1, 3, 5, 7]
    >>> w = np.arange(24.0).reshape(8, 3)
    >>> back = posenc.permute_rope_weight(posenc.permute_rope_weight(w, 2), 2, to="interleaved")
    >>> np.array_equal(back, w)
    True
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
    v.shape_size(w.shape, "weight", w.dtype.itemsize)  # a broadcast view takes less memory
    # interleaved -> half: feature 2i + j of a head goes to j * half + i
    split = (half, 2) if to == "half" else (2, half)
    heads = w.reshape(n_heads, *split, *w.shape[1:])
    return np.ascontiguousarray(np.swapaxes(heads, 1, 2)).reshape(w.shape)


@accepts_tensors
def attention_temperature(positions, *, floor_scale=8192, attn_scale=0.1):
    """Llama 4's query scale on its layers without RoPE (attention
    temperature tuning): ``1 + attn_scale * log(1 + floor((pos + 1) /
    floor_scale))``, which grows with the distance from the start.

    Parameters
    ----------
    positions : int or array_like
        Positions, >= 0 (an int n means ``arange(n)``): the tokens' cache
        positions.  A negative one is refused: the formula gives ``-inf``
        or NaN for nearly all of them (``log`` of 0 or of a negative
        number), as transformers' Llama 4 computes it.
    floor_scale, attn_scale
        The config's ``floor_scale`` (8192) and ``attn_scale`` (0.1).
        Values for which the factor of the largest position overflows are
        refused.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of float64, the shape of `positions`
        The factor to multiply the queries by, computed in float64 (the
        model computes it in float32).

    Raises
    ------
    TypeError, ValueError
        Naming the argument: negative or non-finite positions, a factor that
        overflows float64.


    Examples
    --------
    >>> [round(s, 4) for s in posenc.attention_temperature([0, 8191, 100000]).tolist()]
    [1.0, 1.0693, 1.2565]
    """
    floor_scale = v.real(floor_scale, "floor_scale", positive=True)
    attn_scale = v.real(attn_scale, "attn_scale")
    pos, shape = v.positions(
        positions, result=lambda shape: v.shape_size(shape, "positions", count=2)
    )
    if pos.size:
        # the factor grows with the position: the largest decides whether it overflows
        low, high = float(pos.min()), float(pos.max())
        if low < 0:
            raise ValueError(
                f"positions must be >= 0 (the tokens' cache positions), got {low:g}: "
                "log(1 + floor((pos + 1) / floor_scale)) is -inf or NaN below -1"
            )
        ratio = (high + 1.0) / floor_scale
        if not math.isfinite(ratio):
            raise ValueError(
                f"floor_scale = {floor_scale:g} is too small for positions up to {high:g}: "
                "(pos + 1) / floor_scale overflows float64"
            )
        if not math.isfinite(math.log1p(math.floor(ratio)) * attn_scale):
            raise ValueError(
                f"attn_scale = {attn_scale:g} makes the factor of position {high:g} overflow "
                "float64"
            )
    scale = np.log1p(np.floor((pos + 1.0) / floor_scale)) * attn_scale + 1.0
    return scale.reshape(shape)
