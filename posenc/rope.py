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
from ._interop import accepts_tensors, library
from ._model_config import copied
from ._rope_plan import channel_plan, resolve_rotary, sequence_length
from ._rope_positions import (
    broadcast_positions,
    channel_positions,
    named_seq_axis,
    offset_positions,
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
    v.choice(layout, "layout", tuple(_LAYOUTS))
    plan = _cached_plan(
        dim,
        "dim",
        (base, scaling, layout, None, layer_type),
        (mrope_section, mrope_interleaved, axial),
        (xpos, xpos_scale_base, xpos_centre),
    )
    return plan._tables(positions, dtype, full, seq_len)


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
    plan = _cached_plan(
        x.shape[-1],
        "x.shape[-1]",
        (base, scaling, layout, rotary_dim, layer_type),
        (mrope_section, mrope_interleaved, axial),
        (xpos, xpos_scale_base, xpos_centre),
    )
    return plan._rotate(x, dtype, positions, offset, seq_axis, axes, inverse, out)


def _same_view(a, b):
    """Same first element, shape and strides (in-place rotation)."""
    if a.shape != b.shape or a.__array_interface__["data"][0] != b.__array_interface__["data"][0]:
        return False
    return all(n <= 1 or sa == sb for n, sa, sb in zip(a.shape, a.strides, b.strides))


class Rope:
    """A RoPE configuration read once: frequencies, channel plan and checks.

    What :func:`apply_rope` and :func:`rope_cos_sin` resolve from their
    options on every call (the family and its frequencies, the rotary
    dimension, M-RoPE's or axial RoPE's rows, xPos) is resolved here when
    the plan is built; :meth:`apply` and :meth:`cos_sin` then take only
    what changes from call to call.  ``apply_rope`` and ``rope_cos_sin``
    are this object's methods on a plan they keep for their options.

    Parameters
    ----------
    head_dim : int
        The head dimension: the last axis of the queries and keys
        :meth:`apply` rotates, and the dimension :meth:`cos_sin`'s tables
        are for (as :func:`rope_cos_sin`'s `dim`).
    base, scaling, layer_type
        As in :func:`rope_frequencies`.  The plan reads a copy of
        `scaling` taken when it is built: later edits of the caller's
        config change nothing.
    layout, rotary_dim, mrope_section, mrope_interleaved, axial
        As in :func:`apply_rope` (:meth:`cos_sin` takes the layouts
        ``"half"`` and ``"interleaved"``).
    xpos, xpos_scale_base, xpos_centre
        As in :func:`apply_rope`: a plan rotates queries (``"query"``) or
        keys (``"key"``); build one of each.

    Raises
    ------
    TypeError, ValueError
        Naming the argument or configuration key posenc cannot read
        exactly, as :func:`apply_rope` does.

    Notes
    -----
    A plan is immutable, can be shared between threads and pickled.  The
    frequencies of the families that do not depend on a length are formed
    once; ``dynamic`` and ``longrope`` form theirs per call from the
    positions (``max(positions) + 1``), as transformers does.

    Examples
    --------
    >>> rope = posenc.Rope(8)
    >>> q = np.random.default_rng(0).standard_normal((1, 2, 5, 8)).astype(np.float32)
    >>> np.array_equal(rope.apply(q), posenc.apply_rope(q))
    True
    >>> step = rope.apply(q[:, :, :1], offset=5)  # a decoding step at position 5
    >>> cos, sin = rope.cos_sin(np.array([5]))
    >>> cos.shape
    (1, 8)
    """

    __slots__ = (
        "head_dim",
        "rotary_dim",
        "base",
        "layout",
        "_rope",
        "_layout_code",
        "_chan",
        "_role",
        "_scale_base",
        "_centre",
        "_static",
        "_apply_error",
        "_table_error",
        "_arguments",
    )

    head_dim: int
    rotary_dim: int
    base: float
    layout: str

    def __init__(
        self,
        head_dim,
        *,
        base=10000.0,
        scaling=None,
        layout="half",
        rotary_dim=None,
        layer_type=None,
        mrope_section=None,
        mrope_interleaved=None,
        axial=None,
        xpos=None,
        xpos_scale_base=512.0,
        xpos_centre=0.0,
    ):
        head_dim = v.integer(head_dim, "head_dim", minimum=1)
        self._build(
            head_dim,
            "head_dim",
            (base, _snapshot(scaling), layout, rotary_dim, layer_type),
            (mrope_section, mrope_interleaved, axial),
            (xpos, xpos_scale_base, xpos_centre),
        )
        if not self._rope.family.needs_seq_len:
            self._frequencies_of(None)  # the parameters' errors here, not at a call

    def _build(self, dim, dim_name, config, rows, xpos_options):
        """Resolve the options (the head dimension `dim` named `dim_name` in
        messages): everything a call would check that does not depend on
        its data.  The options come in three groups, as ``Rope()`` takes
        them: ``(base, scaling, layout, rotary_dim, layer_type)``, the rows
        ``(mrope_section, mrope_interleaved, axial)`` and ``(xpos,
        xpos_scale_base, xpos_centre)``."""
        base, scaling, layout, rotary_dim, layer_type = config
        mrope_section, mrope_interleaved, axial = rows
        xpos, xpos_scale_base, xpos_centre = xpos_options
        set_ = object.__setattr__
        given_base = v.real(base, "base", positive=True)
        layout = v.choice(layout, "layout", tuple(_APPLY_LAYOUTS))
        role, scale_base, centre = _xpos_options(xpos, xpos_scale_base, xpos_centre)
        rotary, base, rope = resolve_rotary(
            dim, rotary_dim, given_base, scaling, layer_type, dim_name
        )
        chan = channel_plan(rotary, base, rope, mrope_section, mrope_interleaved, axial)
        if chan is not None and role is not None:
            raise ValueError(
                "xpos is not defined for positions in rows (mrope_section, axial): pass xpos=None"
            )
        apply_error = table_error = None
        try:
            rope_scaling.check_layout(layout, rope)
        except ValueError as exc:
            apply_error = str(exc)
        try:
            v.choice(layout, "layout", tuple(_LAYOUTS))
            rope_scaling.check_table_layout(layout, rope)
        except ValueError as exc:
            table_error = str(exc)
        if apply_error is not None and table_error is not None:
            raise ValueError(apply_error)
        static = None  # the frequencies that depend on no length: formed on first use
        for name, value in (
            ("head_dim", dim),
            ("rotary_dim", rotary),
            ("base", base),
            ("layout", layout),
            ("_rope", rope),
            ("_layout_code", _APPLY_LAYOUTS[layout]),
            ("_chan", chan),
            ("_role", role),
            ("_scale_base", scale_base),
            ("_centre", centre),
            ("_static", static),
            ("_apply_error", apply_error),
            ("_table_error", table_error),
        ):
            set_(self, name, value)
        # the options as given (scaling the plan's own copy): what a call
        # with torch or JAX objects hands to the routed functions, and
        # what a pickled plan is built again from
        arguments = dict(
            base=given_base,
            scaling=scaling,
            layout=layout,
            rotary_dim=rotary_dim,
            layer_type=layer_type,
            mrope_section=mrope_section,
            mrope_interleaved=mrope_interleaved,
            axial=axial,
            xpos=xpos,
            xpos_scale_base=xpos_scale_base,
            xpos_centre=xpos_centre,
        )
        set_(self, "_arguments", arguments)

    def __setattr__(self, name, value):
        raise AttributeError(f"a posenc.Rope cannot be changed (tried to set {name!r})")

    def __delattr__(self, name):
        raise AttributeError(f"a posenc.Rope cannot be changed (tried to delete {name!r})")

    def __reduce__(self):
        return (_rebuild, (self.head_dim, self._arguments))

    def __repr__(self):
        extra = "".join(
            f", {key}={value!r}"
            for key, value in self._arguments.items()
            if value is not None
            and key not in ("base", "layout", "xpos_scale_base")
            and not (key == "xpos_centre" and not self._role)
        )
        return (
            f"posenc.Rope({self.head_dim}, base={self.base!r}, layout={self.layout!r}, "
            f"rotary_dim={self.rotary_dim}, family={self.family!r}{extra})"
        )

    @property
    def family(self):
        """The context-extension family the configuration names
        (``"default"``, ``"linear"``, ``"yarn"``, ...)."""
        return self._rope.family.name

    def frequencies(self, seq_len=None):
        """``(inv_freq, attention_factor)`` as :func:`rope_frequencies` gives
        them (float64; read-only where the plan keeps them, for the families
        that depend on no length), for the families that do at `seq_len`;
        with positions in rows, the frequency each pair turns by."""
        if seq_len is not None:
            seq_len = v.integer(seq_len, "seq_len", minimum=0)
        if self._static is not None:
            return self._static
        if self._chan is not None:
            return self._chan.frequencies(self.rotary_dim, self.base, self._rope, seq_len)
        return rope_scaling.frequencies(self.rotary_dim, self.base, self._rope, seq_len)

    def _frequencies_of(self, pos, seq_len=None):
        if self._static is not None:
            return self._static
        if not self._rope.family.needs_seq_len:
            # formed once, on the first call (the same values whichever thread
            # forms them): a call too large is refused before they are made
            inv_freq, attention = self.frequencies()
            if inv_freq.flags.writeable:
                inv_freq = inv_freq.copy()
                inv_freq.flags.writeable = False
            object.__setattr__(self, "_static", (inv_freq, attention))
            return self._static
        if seq_len is None:
            seq_len = sequence_length(pos, self._rope)
        return self.frequencies(seq_len)

    def _routed(self, function, *args, **kwargs):
        """A call with torch or JAX objects: the routed public function with
        the plan's options (its autograd, torch.compile and JAX rules)."""
        options = dict(self._arguments)
        if function is rope_cos_sin:
            del options["rotary_dim"]  # (rope_cos_sin takes the config's)
            if self._arguments["rotary_dim"] is not None:
                raise TypeError(
                    "cos_sin with torch or JAX objects: a plan built with rotary_dim= makes its "
                    "tables with NumPy only; pass NumPy positions and convert the tables"
                )
        return function(*args, **options, **kwargs)

    def apply(
        self,
        x,
        positions=None,
        *,
        offset=0,
        seq_axis=None,
        axes=None,
        inverse=False,
        out=None,
        device=None,
    ):
        """Rotate queries or keys `x` (``(..., head_dim)``) by their positions.

        The arguments are :func:`apply_rope`'s that change from call to call;
        the result is that of ``apply_rope`` with the plan's options.
        Torch tensors and JAX arrays are taken as ``apply_rope`` takes them.
        """
        if (
            type(x) is not np.ndarray
            or device is not None
            or (
                not (positions is None and (out is None or type(out) is np.ndarray))
                and _foreign(positions, out)
            )
        ):
            if device is None and out is None:
                direct = _direct_torch(self, x, positions, offset, seq_axis, axes, inverse)
                if direct is not None:
                    return direct
            return self._routed(
                apply_rope,
                x,
                positions,
                offset=offset,
                seq_axis=seq_axis,
                axes=axes,
                inverse=inverse,
                out=out,
                device=device,
            )
        return self._rotate(
            x,
            _KERNEL_DTYPES.get(x.dtype) or v.float_array_dtype(x, "x", bfloat16=True),
            positions,
            offset,
            seq_axis,
            axes,
            inverse,
            out,
        )

    def _rotate(self, x, dtype, positions, offset, seq_axis, axes, inverse, out):
        """apply_rope on a NumPy array `x` of float dtype `dtype`."""
        if self._apply_error is not None:
            raise ValueError(self._apply_error)
        if x.ndim < 1:
            raise ValueError("x must have at least one dimension (..., dim)")
        dim, lead = x.shape[-1], x.shape[:-1]
        if dim != self.head_dim:
            raise ValueError(f"x.shape[-1] = {dim} is not the plan's head_dim {self.head_dim}")
        if out is None:  # x may take less memory than its shape (broadcast): the result does not
            v.shape_size(x.shape, "x", dtype.itemsize)
        if type(offset) is not int or not -_EXACT <= offset <= _EXACT:
            offset = v.real(offset, "offset")
        if type(inverse) is not bool:
            if not isinstance(inverse, np.bool_):
                raise TypeError(f"inverse must be a bool, not {type(inverse).__name__}")
            inverse = bool(inverse)
        chan = self._chan
        seq_axis = named_seq_axis(axes, seq_axis, x.ndim)
        if positions is None and chan is None and lead:
            pos, view = offset_positions(lead, offset, seq_axis)
        else:
            pos = placed_positions(positions, lead, offset, seq_axis, chan)
            view = broadcast_positions(pos, lead, chan is not None)
        inv_freq, attention = self._static or self._frequencies_of(pos)
        xpos_args = _NO_XPOS
        if self._role is not None:
            xpos_args = _xpos_kernel_args(
                self._role, self._scale_base, self._centre, self.rotary_dim, pos, dtype, True
            )
        out_ready = True
        if out is not None:
            flags = out.flags if type(out) is np.ndarray else None
            if not (
                flags is not None
                and out.shape == x.shape
                and out.dtype == dtype
                and flags.writeable
                and flags.c_contiguous
                and flags.aligned
                and out.dtype.isnative
            ):  # (else ready as it is)
                v.out_array(out, x.shape, dtype, "out")
                out_ready = v.kernel_ready(out)
        ready = v.kernel_ready(x)
        if not ready:
            v.shape_size(x.shape, "x (a copy of it)", dtype.itemsize)
        src = x if ready else v.native_copy(x, dtype)
        if out is None:
            result = target = np.empty(x.shape, dtype)
        else:
            # written directly unless its layout is odd, or it overlaps x other
            # than as x itself (in place): then through a temporary
            result = target = out
            relayout = self._layout_code == _core.ROPE_INTERLEAVED_TO_HALF
            if (relayout and np.may_share_memory(out, src)) or (
                out is not src
                and (not out_ready or (np.may_share_memory(out, src) and not _same_view(out, src)))
            ):
                v.shape_size(x.shape, "out (a copy of it)", dtype.itemsize)
                target = np.empty(x.shape, dtype)
        if x.size:
            args = (
                v.for_kernel(src),
                view,
                inv_freq,
                v.for_kernel(target),
                self._layout_code,
                attention,
                inverse,
                *xpos_args,
            )
            if chan is None:
                _core.rope_apply(*args)
            else:
                _core.rope_apply(*args, chan.channel)
        if target is not result:
            np.copyto(result, target, casting="unsafe")
        return result

    def cos_sin(self, positions, *, dtype="float32", full=True, seq_len=None, device=None):
        """cos and sin tables of the plan's configuration for `positions`.

        The arguments are :func:`rope_cos_sin`'s that change from call to
        call; the tables are those of ``rope_cos_sin`` with the plan's
        options (``rotary_dim`` wide, or ``rotary_dim // 2`` if not `full`).
        """
        if device is not None or _foreign(positions, dtype):
            return self._routed(
                rope_cos_sin,
                positions,
                self.head_dim,
                dtype=dtype,
                full=full,
                seq_len=seq_len,
                device=device,
            )
        return self._tables(positions, dtype, full, seq_len)

    def _tables(self, positions, dtype, full, seq_len):
        """rope_cos_sin's tables, of NumPy positions (never routed)."""
        if self._table_error is not None:
            raise ValueError(self._table_error)
        dtype = v.float_dtype(dtype, "dtype", bfloat16=True)
        if seq_len is not None:
            seq_len = v.integer(seq_len, "seq_len", minimum=0)
        full = _flag(full, "full")
        chan = self._chan
        if chan is not None and not full:
            raise ValueError(
                "positions in rows (mrope_section, axial) give full tables without xpos: "
                "pass full=True and xpos=None"
            )
        rotary = self.rotary_dim
        width = rotary if full else rotary // 2

        def tables(shape):  # cos and sin, checked before the positions are made
            v.shape_size(shape + (width,), "positions and dim", dtype.itemsize, count=2)

        if chan is None:
            pos, shape = v.positions(positions, "positions", result=tables)
        else:
            arr = channel_positions(positions, chan)
            shape = arr.shape[1:]
            tables(shape)
            v.shape_size(arr.shape, "positions")
            pos = np.array(arr, dtype=np.float64, order="C").reshape(chan.n, -1)
        inv_freq, attention = self._frequencies_of(pos, seq_len)
        xpos_args = _NO_XPOS
        if self._role is not None:
            xpos_args = _xpos_kernel_args(
                self._role, self._scale_base, self._centre, rotary, pos, dtype, False
            )
        cos = np.empty(shape + (width,), dtype)
        sin = np.empty(shape + (width,), dtype)
        args = (
            pos,
            inv_freq,
            v.for_kernel(cos.reshape(-1, width)),
            v.for_kernel(sin.reshape(-1, width)),
            _LAYOUTS[self.layout],
            attention,
            *xpos_args,
            full,
        )
        if chan is None:
            _core.rope_table(*args)
        else:
            _core.rope_table(*args, chan.channel)
        return cos, sin


_NO_XPOS = (None, 0.0, 0.0)
_EXACT = 2**53  # the ints that are floats exactly
#: the native dtypes an array is rotated in as it is (the others: checked)
_KERNEL_DTYPES = {np.dtype(t): np.dtype(t) for t in (np.float16, np.float32, np.float64)}


def _foreign(*values):
    """Whether any of `values` is a torch or JAX object: a call the routed
    functions take (as posenc._interop routes one)."""
    return any(value is not None and library(value) is not None for value in values)


def _direct_torch(plan, x, positions, offset, seq_axis, axes, inverse):
    """plan.apply on a CPU torch tensor that asks for no gradient, outside
    torch.compile, through NumPy views (a decoding step without the
    dispatcher's cost); None for any other call."""
    if library(x) != "torch":
        return None
    from . import _torch

    arrays = _torch.plain_arrays(x, positions)
    if arrays is None:
        return None
    x_np, pos_np = arrays
    result = plan._rotate(
        x_np,
        v.float_array_dtype(x_np, "x", bfloat16=True),
        pos_np,
        offset,
        seq_axis,
        axes,
        inverse,
        None,
    )
    return _torch.tensor(result)


def _snapshot(scaling):
    """The plan's own copy of `scaling`: later edits of the caller's config
    (or of its dicts) change nothing."""
    if scaling is None or isinstance(scaling, (str, bytes)):
        return scaling  # (a string is refused by name when it is read)
    return copied(scaling, "scaling")


def _rebuild(head_dim, arguments):
    return Rope(head_dim, **arguments)


# ---------------------------------------------------------------- apply_rope's and
# rope_cos_sin's plans, kept for the options they are called with

_PLANS: dict = {}
_PLANS_KEPT = 128


class _NoKey(Exception):
    """An option without a hashable stand-in: the call builds its own plan."""


def _frozen(value):
    """A hashable stand-in for an option, its type kept (True, 1 and 1.0
    read differently), or _NoKey for a value that has none (a config
    object, an array)."""
    kind = type(value)
    if value is None or kind in _KEY_SCALARS:
        return (kind, value)
    if kind is list or kind is tuple:
        return (kind, tuple(_frozen(item) for item in value))
    if kind is dict:
        return (kind, tuple((_frozen(k), _frozen(item)) for k, item in value.items()))
    raise _NoKey


_KEY_SCALARS = frozenset({int, float, str, bool, type(None)})


def _cached_plan(dim, dim_name, config, rows, xpos_options):
    """The plan of a call's options (grouped as :meth:`Rope._build` takes
    them): one kept for the same options (scaling None or a plain dict,
    whose reading warns of nothing), or a new one."""
    try:
        key = (dim, dim_name, _frozen(config), _frozen(rows), _frozen(xpos_options))
    except _NoKey:
        key = None
    if key is not None:
        plan = _PLANS.get(key)
        if plan is not None:
            return plan
    plan = Rope.__new__(Rope)
    if key is not None:  # the plan's own copy of a dict the caller may edit
        config = config[:1] + (_snapshot(config[1]),) + config[2:]
    plan._build(dim, dim_name, config, rows, xpos_options)
    if key is not None and not plan._rope.ignored:  # (a plan read with a warning warns again)
        if len(_PLANS) >= _PLANS_KEPT:
            try:
                del _PLANS[next(iter(_PLANS))]
            except (KeyError, RuntimeError, StopIteration):  # another thread's change
                pass
        _PLANS[key] = plan
    return plan
