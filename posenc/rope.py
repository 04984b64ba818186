"""Rotary position embedding (Su et al., RoFormer, 2021).

A pair of features ``(a, b)`` of a query or key at position ``p`` is rotated
by the angle ``p * theta_i``; the dot product of a rotated query and key then
depends on their positions only through ``m - n``.  The frequencies
``theta_i`` and the context-extension families are in
:mod:`posenc.rope_scaling`.
"""

from __future__ import annotations

import functools
import math
from typing import Literal, Optional, Tuple

import numpy as np

from . import _core, rope_scaling
from . import _validate as v
from ._interop import accepts_tensors
from ._rope_plan import channel_plan, resolve_rotary, sequence_length
from ._rope_positions import (
    broadcast_positions,
    channel_positions,
    named_seq_axis,
    placed_positions,
)
from ._typing import NDArray, RopeScaling

#: the layouts of the cos/sin tables (rope_cos_sin)
_LAYOUTS = _core.ROPE_LAYOUTS
#: apply_rope's: those, and DeepSeek-V3's rotation that changes layout
_APPLY_LAYOUTS = dict(_LAYOUTS, interleaved_to_half=_core.ROPE_INTERLEAVED_TO_HALF)
_XPOS_ROLES = ("query", "key")

ApplyLayout = Literal["half", "interleaved", "interleaved_to_half"]
XposRole = Literal["query", "key"]


@accepts_tensors
def rope_frequencies(
    dim: int,
    *,
    base: float = 10000.0,
    scaling: Optional[RopeScaling] = None,
    seq_len: Optional[int] = None,
    layer_type: Optional[str] = None,
) -> Tuple[NDArray[np.float64], float]:
    """Inverse frequencies and attention factor of a RoPE configuration.

    Parameters
    ----------
    dim : int
        Head dimension, a positive even number.  With a
        ``partial_rotary_factor`` in `scaling` (as transformers stores it) the
        rotary dimension is ``int(dim * partial_rotary_factor)``.
    base : float
        The wavelength base (``rope_theta``); ``scaling["rope_theta"]``, when
        present, is used instead (they must agree if both are given).
    scaling : transformers config, or dict, optional
        The model's config as transformers loads it (``model.config``: its
        ``rope_parameters``, or ``rope_scaling`` and ``rope_theta``, with
        ``max_position_embeddings``, ``partial_rotary_factor`` and
        ``head_dim`` read from it as transformers reads them), a config.json
        dict, or a ``rope_scaling`` / ``rope_parameters`` dict as it is,
        naming its family with ``rope_type`` (or the older ``type``):
        ``"default"``, ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"llama3"``,
        ``"longrope"``, ``"ntk_alpha"`` (HunYuan), ``"proportional"``
        (Gemma 4: the whole head is rotated, its pairs past
        ``partial_rotary_factor`` by angle 0), ``"resonance"`` (Resonance
        RoPE: each wavelength rounded to a whole number of positions) or
        ``"axial"`` (the Qwen2-VL to
        Qwen3-VL vision towers: two ladders of ``dim // 4`` frequencies, for
        a patch's row and column; positions in two rows, see
        :func:`apply_rope`'s `axial`); see :mod:`posenc.rope_scaling` for
        the keys each reads.  A bare dict carries the values transformers
        takes from the model config itself: ``max_position_embeddings``
        (needed by ``dynamic``, and by ``yarn`` / ``longrope`` without a
        ``factor``) and ``partial_rotary_factor``.  The dialects transformers
        rewrites on load are read as it reads them: Phi-3's ``"su"`` and
        ``"yarn"`` (with short and long factors) are LongRoPE, HunYuan's
        ``"dynamic"`` with ``alpha`` is NTK-alpha, Qwen2-VL's ``"mrope"`` is
        the default frequencies (M-RoPE's ``mrope_section`` chooses
        positions, not frequencies: see :func:`apply_rope`).  Parameters
        that change transformers' numbers in ways posenc does not implement
        (other families) raise ValueError; unknown keys give a warning
        naming them.
    seq_len : int, optional
        Current sequence length, for ``dynamic`` (base growth past the trained
        length) and ``longrope`` (long factors past it).
    layer_type : str, optional
        For configs with parameters per layer type (Gemma 3's
        ``"full_attention"`` and ``"sliding_attention"``): which to use.
        Required there, refused elsewhere.  A config object whose values
        differ per layer (Gemma 4's ``per_layer_config``) is read for that
        layer type (its own ``head_dim``).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    inv_freq : ndarray of float64, shape ``(rotary_dim // 2,)``
        ``base ** (-2i/rotary_dim)`` after scaling.
    attention_factor : float
        Factor on cos and sin (1.0 except for ``yarn`` and ``longrope``).

    Raises
    ------
    TypeError, ValueError
        Naming the argument or configuration key that is missing, of the wrong
        kind, or asks for what posenc does not implement.

    Notes
    -----
    The values equal those of transformers' ``ROPE_INIT_FUNCTIONS`` for the
    same dict to float32 precision (transformers forms them in float32,
    posenc in float64); the attention factor is the same float.

    The families and variants of RoPE posenc computes, and models that use
    them (transformers' model code is the witness of each):

    - ``default``: ``base ** (-2i/d)`` (RoFormer, GPT-NeoX, Llama 1-2,
      Mistral, Qwen2, Gemma's sliding layers, and most models).
    - ``linear``: positions divided by ``factor`` (position interpolation;
      Llama-2 long-context fine-tunes, Gemma 3's global layers).
    - ``dynamic``: NTK-aware base growth past the trained length (Falcon
      and Llama-family configs that ask for it).
    - ``yarn``: DeepSeek-V2/V3 (with its ``mscale``), Qwen2.5 long-context
      configs, gpt-oss, Mistral Large 3.
    - ``llama3``: Llama 3.1, 3.2 and 3.3.
    - ``longrope``: Phi-3, Phi-3.5, Phi-4-mini (Phi-3's ``"su"``).
    - ``proportional`` (p-RoPE): Gemma 4's full-attention layers.
    - ``resonance``: Resonance RoPE (Wang et al., 2024), each wavelength
      rounded to a whole number of positions.
    - ``ntk_alpha``: HunYuan (``alpha``: ``base * alpha ** (d/(d-2))``).
    - M-RoPE (``mrope_section``, Qwen3-VL's ``mrope_interleaved``; position
      ids of shape ``(3, batch, seq)``, see
      :func:`posenc.positions.mrope_position_ids`): Qwen2-VL, Qwen2.5-VL,
      Qwen3-VL.
    - 2-D (axial) vision RoPE, by the row and column of a patch: the
      vision towers of Qwen2-VL and Llama 4.
    - Partial rotary (``partial_rotary_factor`` / ``rotary_dim``: the
      leading features rotated, the rest passed through): GPT-NeoX, Phi-1/2,
      GLM, StableLM, Persimmon.
    - Layouts (``apply_rope``'s ``layout``): ``"half"`` (GPT-NeoX, Llama in
      transformers), ``"interleaved"`` (GPT-J, CodeGen, RoFormer, Meta's
      Llama checkpoints), ``"interleaved_to_half"`` (DeepSeek-V3's
      ``rope_interleave``: read interleaved, written half).
    - xPos (``apply_rope``'s and ``rope_cos_sin``'s ``xpos``): per-pair
      decay ``zeta_i ** ((p - c) / scale_base)``, queries multiplied, keys
      divided (Sun et al.'s LeX Transformer, torchscale, flash-attn's
      ``scale_base``, rotary-embedding-torch's ``use_xpos``).

    Examples
    --------
    >>> inv_freq, factor = posenc.rope_frequencies(8)
    >>> inv_freq.tolist(), factor
    ([1.0, 0.1, 0.01, 0.001], 1.0)
    >>> posenc.rope_frequencies(8, scaling={"rope_type": "linear", "factor": 2.0})[0].tolist()
    [0.5, 0.05, 0.005, 0.0005]
    """
    dim = v.even_dim(dim, "dim")
    base = v.real(base, "base", positive=True)
    if seq_len is not None:
        seq_len = v.integer(seq_len, "seq_len", minimum=0)
    rotary, base, rope = rope_scaling.resolve(dim, base, scaling, layer_type)
    return rope_scaling.frequencies(rotary, base, rope, seq_len)


@accepts_tensors
def rope_cos_sin(
    positions,
    dim,
    *,
    base=10000.0,
    scaling=None,
    layout="half",
    dtype="float32",
    layer_type=None,
    seq_len=None,
    mrope_section=None,
    mrope_interleaved=None,
    axial=None,
    full=True,
    xpos=None,
    xpos_scale_base=512.0,
    xpos_centre=0.0,
):
    """cos and sin tables of RoPE for given positions, attention factor applied.

    For feeding a torch, JAX or NumPy model of one's own: ``x * cos +
    rotate(x) * sin`` with the rotation of the matching layout.

    Parameters
    ----------
    positions : int or array_like
        An int ``n`` (or a 0-d integer array) for positions ``0..n-1``, or an
        array of positions of any shape (ints or floats).
    dim : int
        Head dimension, a positive even number (see :func:`rope_frequencies`
        for ``partial_rotary_factor``).
    base, scaling, layer_type
        As in :func:`rope_frequencies`.  ``dynamic`` and ``longrope`` take the
        sequence length as ``max(positions) + 1``, as transformers does.
    seq_len : int, optional
        The sequence length that decides the frequencies of ``dynamic`` and
        ``longrope`` (as :func:`rope_frequencies`' `seq_len`) instead of
        ``max(positions) + 1``: the length a transformers module has grown
        to (a dynamic module keeps the frequencies of the longest call it
        has seen), for tables of positions below it.  Ignored by the other
        families, whose frequencies do not depend on a length.
    layout : {"half", "interleaved"}
        ``"half"`` (GPT-NeoX, Llama in transformers): the ``dim // 2`` angles
        repeated as two halves.  ``"interleaved"`` (GPT-J, RoFormer, Meta's
        Llama): each angle twice in a row.
    dtype : float16, bfloat16, float32 or float64
        float32 when omitted or None.  ``"bfloat16"`` (or ``"bf16"``, or
        ml_dtypes' ``bfloat16``) gives arrays of ml_dtypes' bfloat16
        (``pip install 'posenc[bfloat16]'``).
    mrope_section, mrope_interleaved, axial
        Positions in rows, as for :func:`apply_rope`: `positions` is then an
        array whose first axis holds the rows (M-RoPE's ``(3, batch, seq)``,
        ``(2, n_patches)`` for 2-D vision RoPE), and each pair's cos and sin
        are those of its row's position.
    full : bool
        True: each angle twice, ``rotary_dim`` columns in `layout`.  False:
        each angle once, ``rotary_dim // 2`` columns (pair ``i`` in column
        ``i``), as flash-attn's rotary kernels take them (``cos(pos *
        inv_freq)`` without duplication); the same values as the first half
        of the ``"half"`` layout's full table.
    xpos, xpos_scale_base, xpos_centre
        xPos tables (as flash-attn's ``scale_base`` caches them: the query's
        ``cos * scale``, or with ``xpos="key"`` the key's ``cos / scale``):
        see :func:`apply_rope`.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    cos, sin : ndarray, each of shape ``positions.shape + (rotary_dim,)``
        (``positions.shape[1:] + (rotary_dim,)`` with positions in rows: the
        tables M-RoPE's models recompose from their three; ``(rotary_dim //
        2,)`` last if not `full`).

    Raises
    ------
    TypeError, ValueError
        Naming the argument: as for :func:`rope_frequencies`, and positions,
        rows or options the tables cannot take.

    Notes
    -----
    Angles are formed and reduced in float64, multiplied by the attention
    factor (and the xPos factor, formed in float64) and rounded once:
    float32 tables are within 1 ulp of the float64 values at positions up
    to 2**24 and beyond (float16 and bfloat16 tables too, in their own
    ulps).

    Examples
    --------
    >>> cos, sin = posenc.rope_cos_sin(5, 8)
    >>> cos.shape, cos.dtype
    ((5, 8), dtype('float32'))
    >>> np.array_equal(cos[:, :4], cos[:, 4:])  # "half": the angles repeated
    True
    >>> cos, sin = posenc.rope_cos_sin(np.array([0, 3]), 8, full=False, dtype="float64")
    >>> np.allclose(cos, np.cos(np.outer([0, 3], 10000.0 ** (-np.arange(0, 8, 2) / 8))))
    True
    """
    dim = v.even_dim(dim, "dim")
    base = v.real(base, "base", positive=True)
    layout_code = _LAYOUTS[v.choice(layout, "layout", tuple(_LAYOUTS))]
    dtype = v.float_dtype(dtype, "dtype", bfloat16=True)
    if seq_len is not None:
        seq_len = v.integer(seq_len, "seq_len", minimum=0)
    full = _flag(full, "full")
    role, scale_base, centre = _xpos_options(xpos, xpos_scale_base, xpos_centre)
    rotary, base, rope = rope_scaling.resolve(dim, base, scaling, layer_type)
    rope_scaling.check_table_layout(layout, rope)
    chan = channel_plan(rotary, base, rope, mrope_section, mrope_interleaved, axial)
    if chan is not None and (role is not None or not full):
        raise ValueError(
            "positions in rows (mrope_section, axial) give full tables without xpos: "
            "pass full=True and xpos=None"
        )
    width = rotary if full else rotary // 2

    def tables(shape):  # cos and sin, checked before the positions are made
        v.shape_size(shape + (width,), "positions and dim", dtype.itemsize, count=2)

    if chan is None:
        pos, shape = v.positions(positions, "positions", result=tables)
        if seq_len is None:
            seq_len = sequence_length(pos, rope)
        inv_freq, attention = rope_scaling.frequencies(rotary, base, rope, seq_len)
    else:
        arr = channel_positions(positions, chan)
        shape = arr.shape[1:]
        tables(shape)
        v.shape_size(arr.shape, "positions")
        pos = np.array(arr, dtype=np.float64, order="C").reshape(chan.n, -1)
        if seq_len is None:
            seq_len = sequence_length(pos, rope)
        inv_freq, attention = chan.frequencies(rotary, base, rope, seq_len)
    xpos_args = _xpos_kernel_args(role, scale_base, centre, rotary, pos, dtype, False)
    cos = np.empty(shape + (width,), dtype)
    sin = np.empty(shape + (width,), dtype)
    args = (
        pos,
        inv_freq,
        v.for_kernel(cos.reshape(-1, width)),
        v.for_kernel(sin.reshape(-1, width)),
        layout_code,
        attention,
        *xpos_args,
        full,
    )
    if chan is None:
        _core.rope_table(*args)
    else:
        _core.rope_table(*args, chan.channel)
    return cos, sin


def _flag(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return bool(value)


def _xpos_options(xpos, scale_base, centre):
    """xPos's role (None: no xPos), scale base and centre, checked."""
    if xpos is not None:
        v.choice(xpos, "xpos", _XPOS_ROLES + (None,))
    scale_base = v.real(scale_base, "xpos_scale_base", positive=True)
    centre = v.real(centre, "xpos_centre")
    return xpos, scale_base, centre


@functools.lru_cache(maxsize=64)
def _xpos_log_zeta(r):
    """The logarithms of xPos's per-pair bases ``zeta_i = (2i + 0.4 r) /
    (1.4 r)``, ``i < r/2`` (``r`` the rotary dimension), float64, read-only:
    ``zeta_i`` lies between ``0.4 / 1.4`` and 1."""
    log_zeta = np.log((2.0 * np.arange(r // 2) + 0.4 * r) / (1.4 * r))
    log_zeta.flags.writeable = False
    return log_zeta


def _xpos_kernel_args(role, scale_base, centre, rotary, pos, dtype, compute):
    """The kernels' xPos arguments ``(log_zeta, centre, rate)`` (log_zeta
    None for none), after checking that the factors stay within `dtype`'s range (the
    float32 the rotation computes in for float16 / bfloat16 data if
    `compute`)."""
    if role is None:
        return (None, 0.0, 0.0)
    log_zeta = _xpos_log_zeta(rotary)
    if pos.size:
        lo = hi = float(pos.flat[0])
        if pos.size > 1:
            lo, hi = float(pos.min()), float(pos.max())
        far = hi if abs(hi - centre) >= abs(lo - centre) else lo
        exponent = abs(float(log_zeta[0])) * abs(far - centre) / scale_base
        if dtype == np.float64:
            kind, top = "float64", float(np.finfo(np.float64).max)
        elif compute or dtype == np.float32:
            kind, top = "float32", float(np.finfo(np.float32).max)
        elif dtype == np.float16:
            kind, top = "float16", 65504.0
        else:
            kind, top = "bfloat16", 3.3895313892515355e38
        limit = math.log(top)
        if exponent > limit:
            raise ValueError(
                f"xpos: at position {far:g} the factor zeta ** ((position - xpos_centre) / "
                f"xpos_scale_base) is {math.exp(min(exponent, 709.0)):.3g} (or its inverse), past "
                f"the range of {kind}: use an xpos_centre "
                f"nearer the positions (now {centre:g}) or a larger xpos_scale_base (now "
                f"{scale_base:g})"
            )
    rate = (1.0 if role == "query" else -1.0) / scale_base
    return (log_zeta, centre, rate)


@accepts_tensors
def apply_rope(
    x,
    positions=None,
    *,
    base=10000.0,
    scaling=None,
    layout="half",
    rotary_dim=None,
    offset=0,
    seq_axis=None,
    axes=None,
    inverse=False,
    out=None,
    layer_type=None,
    mrope_section=None,
    mrope_interleaved=None,
    axial=None,
    xpos=None,
    xpos_scale_base=512.0,
    xpos_centre=0.0,
):
    """Rotate queries or keys by their positions (rotary position embedding).

    Parameters
    ----------
    x : array_like of float16, bfloat16, float32 or float64, shape ``(..., dim)``
        E.g. transformers' ``(batch, heads, seq, head_dim)``; another layout
        is named by `axes`.  bfloat16: ml_dtypes' ``bfloat16``.
    positions : array_like, optional
        Positions (ints or floats); None: ``offset + arange(seq)``.  Its last
        axis goes on the sequence axis, its leading axes on x's (the guide's
        "Where the positions go"): transformers' ``(batch, seq)`` ids fit.
    base, scaling, layer_type
        As in :func:`rope_frequencies`; a config's head_dim is ``x.shape[-1]``.
    layout : {"half", "interleaved", "interleaved_to_half"}
        Pairs ``(x[i], x[i + r/2])`` (GPT-NeoX, transformers' Llama) or
        ``(x[2i], x[2i+1])`` (GPT-J, Meta's Llama); or read interleaved and
        written half (DeepSeek-V3's ``rope_interleave``).
    rotary_dim : int, optional
        The ``r`` leading features rotated (even, ``<= dim``), the rest passed
        through; default ``dim``, or the config's ``partial_rotary_factor``.
    offset : int or float
        Added to the positions (a KV-cache offset).
    seq_axis : int, optional
        The sequence axis of `x` (not the last), -2 by default.
    axes : str, optional
        x's layout by name (``"bhsd"``, ``"bshd"``, ``"bsd"``, ...); sets
        `seq_axis`.  Name it whenever `x` is not ``(..., seq, dim)``: a
        ``(batch, seq, heads, dim)`` x with ``seq == heads`` would otherwise
        be rotated along its heads.
    inverse : bool
        Rotate by the negative angle: the inverse and the backward pass.
    out : ndarray, optional
        Where to write, of x's shape and dtype; may be `x` itself.
    mrope_section, mrope_interleaved, axial
        Positions in rows (M-RoPE's ``(3, batch, seq)``, 2-D vision RoPE's
        ``(2, n_patches)``), each row rotating its own pairs; read from a
        config that has them, never guessed (guide: "Multimodal and vision
        RoPE").  Sections given with a config that has none are shared among
        the rows as that config's model shares them (Qwen3-VL's
        interleaving); with the config of a model without M-RoPE,
        `mrope_interleaved` is needed.
    xpos, xpos_scale_base, xpos_centre
        xPos: a ``"query"`` multiplied, a ``"key"`` divided by ``zeta_i **
        ((p - xpos_centre) / xpos_scale_base)``, one centre for all that meet
        (guide: "DeepSeek-V3's layout and xPos").
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of x's shape and dtype (`out` if given).

    Raises
    ------
    TypeError, ValueError
        Naming the argument that cannot be taken exactly.

    Examples
    --------
    >>> q = np.random.default_rng(0).standard_normal((1, 2, 5, 8)).astype(np.float32)
    >>> r = posenc.apply_rope(q, np.arange(5))
    >>> cos, sin = posenc.rope_cos_sin(5, 8)
    >>> np.allclose(r, q * cos + np.concatenate([-q[..., 4:], q[..., :4]], -1) * sin, atol=1e-6)
    True
    >>> np.allclose(posenc.apply_rope(r, inverse=True), q, atol=1e-6)
    True
    """
    x = x if isinstance(x, np.ndarray) else np.asarray(x)
    dtype = v.float_array_dtype(x, "x", bfloat16=True)
    if x.ndim < 1:
        raise ValueError("x must have at least one dimension (..., dim)")
    dim = x.shape[-1]
    lead = x.shape[:-1]
    if out is None:  # x may take less memory than its shape (broadcast): the result does not
        v.shape_size(x.shape, "x", dtype.itemsize)
    base = v.real(base, "base", positive=True)
    layout_code = _APPLY_LAYOUTS[v.choice(layout, "layout", tuple(_APPLY_LAYOUTS))]
    relayout = layout_code == _core.ROPE_INTERLEAVED_TO_HALF
    offset = v.real(offset, "offset")
    if not isinstance(inverse, (bool, np.bool_)):
        raise TypeError(f"inverse must be a bool, not {type(inverse).__name__}")
    seq_axis = named_seq_axis(axes, seq_axis, x.ndim)
    role, scale_base, centre = _xpos_options(xpos, xpos_scale_base, xpos_centre)
    rotary, base, rope = resolve_rotary(dim, rotary_dim, base, scaling, layer_type)
    rope_scaling.check_layout(layout, rope)
    chan = channel_plan(rotary, base, rope, mrope_section, mrope_interleaved, axial)
    if chan is not None and role is not None:
        raise ValueError(
            "xpos is not defined for positions in rows (mrope_section, axial): pass xpos=None"
        )
    if chan is None:
        pos = placed_positions(positions, lead, offset, seq_axis)
        inv_freq, attention = rope_scaling.frequencies(
            rotary, base, rope, sequence_length(pos, rope)
        )
    else:
        pos = placed_positions(positions, lead, offset, seq_axis, chan)
        inv_freq, attention = chan.frequencies(rotary, base, rope, sequence_length(pos, rope))
    xpos_args = _xpos_kernel_args(role, scale_base, centre, rotary, pos, dtype, True)
    if out is not None:
        v.out_array(out, x.shape, dtype, "out")

    if not v.kernel_ready(x):
        v.shape_size(x.shape, "x (a copy of it)", dtype.itemsize)
    src = x if v.kernel_ready(x) else v.native_copy(x, dtype)
    if out is None:
        result = target = np.empty(x.shape, dtype)
    else:
        # written directly unless its layout is odd, or it overlaps x other
        # than as x itself (in place): then through a temporary
        result = target = out
        if (relayout and np.may_share_memory(out, src)) or (
            out is not src
            and (
                not v.kernel_ready(out)
                or (np.may_share_memory(out, src) and not _same_view(out, src))
            )
        ):
            v.shape_size(x.shape, "out (a copy of it)", dtype.itemsize)
            target = np.empty(x.shape, dtype)
    if x.size:
        args = (
            v.for_kernel(src),
            broadcast_positions(pos, lead, chan is not None),
            inv_freq,
            v.for_kernel(target),
            layout_code,
            attention,
            bool(inverse),
            *xpos_args,
        )
        if chan is None:
            _core.rope_apply(*args)
        else:
            _core.rope_apply(*args, chan.channel)
    if target is not result:
        np.copyto(result, target, casting="unsafe")
    return result


def _same_view(a, b):
    """Same first element, shape and strides (in-place rotation)."""
    if a.shape != b.shape or a.__array_interface__["data"][0] != b.__array_interface__["data"][0]:
        return False
    return all(n <= 1 or sa == sb for n, sa, sb in zip(a.shape, a.strides, b.strides))
