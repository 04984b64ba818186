"""RoPE frequencies, their context-extension families, and how a
transformers configuration names them.

Each family is one small function ``family(dim, base, params, seq_len)`` that
returns ``(inv_freq, attention_factor)``: `inv_freq` a float64 array of
``dim // 2`` inverse frequencies for a rotary dimension `dim`, and the factor
by which cos and sin are multiplied.  A :class:`Family` record holds the
function, whether it depends on the sequence length, and the keys it reads;
:data:`FAMILIES` maps the names used in Hugging Face's ``rope_scaling`` /
``rope_parameters`` dicts to them.  Adding a family is adding a function and
a record.

:func:`read` turns what a user hands over into one plain parameter dict:
such a dict as it is (``rope_type`` or the older ``type``), a whole config
(a transformers ``PretrainedConfig`` object, duck-typed, or a config.json
dict), per-layer-type parameters with ``layer_type``, and the dialects
transformers rewrites when it loads a checkpoint.  The numbers are those of
transformers' ``modeling_rope_utils`` init functions for the same
parameters, formed in float64 where transformers uses float32; the
attention factors are the same Python floats.  Two values transformers
takes from the model config rather than the dict are read from the config
(or, for a bare dict, from the dict):

- ``max_position_embeddings``: the context length at which ``dynamic``
  starts to grow the base, and the numerator of the implied ``factor`` of
  ``yarn`` and ``longrope`` when the dict has none;
- ``partial_rotary_factor``: the rotary dimension is
  ``int(head_dim * partial_rotary_factor)``, handled by :func:`resolve`.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

import numpy as np

from . import _validate as v
from ._frequencies import frequency_powers, inv_frequencies
from ._model_config import config_value, layer_config
from ._typing import Float64Array, RopeScaling

#: A family's parameters: a ``rope_scaling`` / ``rope_parameters`` dict.
Params = Mapping[str, Any]
#: What a family's function returns: ``(inv_freq, attention_factor)``.
Frequencies = Tuple[Float64Array, float]

DEFAULT_BASE = 10000.0


def _number(
    params: Params, key: str, family: str, *, required: bool = True, positive: bool = False
) -> Any:
    """``params[key]`` as a float (None when it is missing and not
    required); a ValueError naming the key when it is required and missing,
    a TypeError when it is not a real number."""
    value = params.get(key)
    if value is None:
        if required:
            raise ValueError(f"scaling: rope_type {family!r} requires the key {key!r}")
        return None
    return v.real(value, f"scaling[{key!r}]", positive=positive)


def _factor_list(params: Params, key: str, family: str, n: int) -> Float64Array:
    """A list of `n` positive real numbers, as a float64 array."""
    if params.get(key) is None:
        raise ValueError(f"scaling: rope_type {family!r} requires the key {key!r}")
    try:
        arr = np.asarray(params[key], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"scaling[{key!r}] must be a list of numbers") from exc
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"scaling[{key!r}] must have dim // 2 = {n} values, got shape {arr.shape}")
    if not (np.isfinite(arr).all() and (arr > 0).all()):
        raise ValueError(f"scaling[{key!r}] must hold finite values > 0")
    return arr


def _implied_factor(params: Params, family: str, original: float) -> float:
    """``factor``, or ``max_position_embeddings / original`` when the dict has
    no factor (transformers takes the numerator from the model config)."""
    factor = _number(params, "factor", family, required=False, positive=True)
    if factor is not None:
        return factor
    if params.get("max_position_embeddings") is None:
        raise ValueError(
            f"scaling: rope_type {family!r} requires the key 'factor' "
            "(or 'max_position_embeddings' to derive it)"
        )
    return _number(params, "max_position_embeddings", family, positive=True) / original


def _in_range(
    inv_freq: Float64Array, family: str, key: str, value: Any, rotated: Optional[int] = None
) -> Float64Array:
    """`inv_freq`, or a ValueError naming `key` (the parameter whose
    `value` made them) when some of them (of the first `rotated`) left
    float64's range: infinite or NaN, or 0 (or below) where the formula
    gives a positive frequency.  Either would rotate wrongly: NaN tables,
    or pairs that do not turn."""
    part = inv_freq if rotated is None else inv_freq[:rotated]
    if np.isfinite(part).all() and (part > 0).all():
        return inv_freq
    if np.isnan(part).any():
        what = "NaN"
    elif np.isinf(part).any():
        what = "overflow to inf"
    else:
        what = "underflow to 0"
    raise ValueError(
        f"{key} must keep rope_type {family!r}'s inverse frequencies finite and > 0 in "
        f"float64; {value} makes them {what}"
    )


def _theta(dim: int, base: float, family: str) -> Float64Array:
    """``base ** (-2i/dim)``, or a ValueError naming the base when they
    leave float64's range (a base so close to 0 that they overflow)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        theta = inv_frequencies(dim, base)
    return _in_range(theta, family, "base (rope_theta)", base)


def default(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""Original RoPE (Su et al., 2021): :math:`\theta_i = b^{-2i/d}`, attention factor 1."""
    return _theta(dim, base, "default"), 1.0


def linear(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""Position interpolation (Chen et al., 2023; kaiokendev): positions divided by
    the factor :math:`s`, i.e. :math:`\theta_i = b^{-2i/d} / s`.

    Keys: ``factor``.
    """
    factor = _number(params, "factor", "linear", positive=True)
    with np.errstate(over="ignore", under="ignore"):
        inv_freq = _theta(dim, base, "linear") / factor
    return _in_range(inv_freq, "linear", "scaling['factor']", factor), 1.0


def dynamic(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""Dynamic NTK-aware scaling (bloc97, emozilla): the base grows with the
    sequence length :math:`n` once it exceeds the trained length :math:`L`,

    .. math:: b' = b \left(\frac{s\,n}{L} - (s - 1)\right)^{d/(d-2)},
              \quad n \leftarrow \max(n, L),

    and :math:`\theta_i = b'^{-2i/d}`.

    Keys: ``factor`` (:math:`s`) and :math:`L` as ``max_position_embeddings``
    (the model config's, as transformers reads it) or, failing that,
    ``original_max_position_embeddings``.  `seq_len` is :math:`n`; None means
    :math:`L` (no growth).
    """
    factor = _number(params, "factor", "dynamic", positive=True)
    key = "max_position_embeddings"
    if params.get(key) is None:
        key = "original_max_position_embeddings"
        if params.get(key) is None:
            raise ValueError(
                "scaling: rope_type 'dynamic' requires the key 'max_position_embeddings' "
                "(or 'original_max_position_embeddings')"
            )
    length = params[key]
    _number(params, key, "dynamic", positive=True)
    if dim < 4:
        raise ValueError(f"dim must be >= 4 for rope_type 'dynamic' (d/(d-2)), got {dim}")
    n = length if seq_len is None else max(seq_len, length)
    if isinstance(n, int) and n.bit_length() > 1000:  # past any float (and its formatting)
        n = math.inf
    try:
        grown = base * ((factor * n / length) - (factor - 1)) ** (dim / (dim - 2))
    except OverflowError:  # a float's power past float64, or an int past a float
        grown = math.inf
    if not math.isfinite(grown):
        raise ValueError(
            f"positions: rope_type 'dynamic' grows its base with the sequence length "
            f"(seq_len, or max(positions) + 1), and {n:.6g} grows it past float64's range "
            f"(scaling['factor'] = {factor:g}, {key} = {length}): such positions cannot be "
            "rotated by it"
        )
    with np.errstate(under="ignore"):
        inv_freq = inv_frequencies(dim, grown)
    return _in_range(inv_freq, "dynamic", "the sequence length (positions)", n), 1.0


def ntk_alpha(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""NTK-aware scaling with a fixed :math:`\alpha` (HunYuan): the base is
    stretched once, :math:`b' = b\,\alpha^{d/(d-2)}`, whatever the sequence
    length, and :math:`\theta_i = b'^{-2i/d}`.

    HunYuan's checkpoints write it as ``{"type": "dynamic", "alpha": ...}``;
    transformers' HunYuan models read such a dict this way (not as
    ``dynamic``), and so does :func:`read`.

    Keys: ``alpha``.
    """
    alpha = _number(params, "alpha", "ntk_alpha", positive=True)
    if dim < 4:
        raise ValueError(f"dim must be >= 4 for rope_type 'ntk_alpha' (d/(d-2)), got {dim}")
    try:
        grown = base * alpha ** (dim / (dim - 2))
    except OverflowError:
        grown = math.inf
    if not (math.isfinite(grown) and grown > 0):
        raise ValueError(
            f"scaling['alpha'] must keep rope_type 'ntk_alpha''s base * alpha ** (dim / (dim - 2)) "
            f"finite and > 0 in float64; {alpha:g} makes it {grown:g}"
        )
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        inv_freq = inv_frequencies(dim, grown)
    return _in_range(inv_freq, "ntk_alpha", "scaling['alpha']", alpha), 1.0


def yarn(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""YaRN (Peng et al., 2023): NTK-by-parts interpolation plus an attention factor.

    For a pair :math:`i` with :math:`\theta_i = b^{-2i/d}`, the dimension that
    turns :math:`r` times over the trained length :math:`L` is
    :math:`c(r) = d \ln(L / (2\pi r)) / (2 \ln b)`; with
    :math:`lo = \lfloor c(\beta_{fast}) \rfloor`, :math:`hi = \lceil c(\beta_{slow}) \rceil`
    (unrounded if ``truncate`` is false) clamped to :math:`[0, d-1]`, the ramp
    :math:`\gamma_i = \mathrm{clip}((i - lo) / (hi - lo), 0, 1)` mixes
    interpolation and extrapolation:

    .. math:: \theta'_i = \gamma_i \frac{\theta_i}{s} + (1 - \gamma_i)\,\theta_i .

    Attention factor: ``attention_factor`` if given, else
    :math:`m(s, \mu) / m(s, \mu_{all})` when ``mscale`` and ``mscale_all_dim``
    are both set, else :math:`m(s, 1)`, with
    :math:`m(s, \mu) = 0.1\,\mu \ln s + 1` for :math:`s > 1`, 1 otherwise.

    Keys: ``factor`` (:math:`s`; or ``max_position_embeddings`` to derive it),
    ``original_max_position_embeddings`` (:math:`L`), optional ``beta_fast``
    (32), ``beta_slow`` (1), ``mscale``, ``mscale_all_dim``,
    ``attention_factor``, ``truncate`` (True).
    """
    original = _number(params, "original_max_position_embeddings", "yarn", positive=True)
    factor = _implied_factor(params, "yarn", original)

    def mscale_of(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = _number(params, "attention_factor", "yarn", required=False, positive=True)
    if attention is None:
        m = _number(params, "mscale", "yarn", required=False)
        m_all = _number(params, "mscale_all_dim", "yarn", required=False)
        if m and m_all:
            num, den = mscale_of(factor, m), mscale_of(factor, m_all)
            attention = float(num / den) if den else math.inf
            if not (math.isfinite(attention) and attention > 0):
                raise ValueError(
                    f"scaling['mscale'] = {m:g} and scaling['mscale_all_dim'] = {m_all:g} must "
                    "make rope_type 'yarn''s attention factor (0.1 mscale ln(factor) + 1) / "
                    f"(0.1 mscale_all_dim ln(factor) + 1) finite and > 0; with factor "
                    f"{factor:g} it is {num:g} / {den:g}"
                )
        else:
            attention = mscale_of(factor)
    # transformers takes a missing (or zero) beta as the paper's default
    beta_fast = _number(params, "beta_fast", "yarn", required=False) or 32
    beta_slow = _number(params, "beta_slow", "yarn", required=False) or 1
    for key, beta in (("beta_fast", beta_fast), ("beta_slow", beta_slow)):
        if beta < 0:
            raise ValueError(
                f"scaling[{key!r}] must be > 0 (a number of rotations; 0 or None for the "
                f"default), got {beta:g}"
            )
    if base == 1:
        raise ValueError(
            "base (rope_theta) must not be 1 for rope_type 'yarn' (its ramp divides by ln(base))"
        )

    def correction_dim(rotations: float, key: str) -> float:
        turns = original / (rotations * 2 * math.pi)
        if not 0 < turns < math.inf:
            raise ValueError(
                f"scaling[{key!r}] = {rotations:g} with original_max_position_embeddings = "
                f"{original:g} puts rope_type 'yarn''s ramp out of float64's range "
                f"(original_max_position_embeddings / (2 pi {key}) = {turns:g})"
            )
        return (dim * math.log(turns)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast, "beta_fast"), correction_dim(beta_slow, "beta_slow")
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    theta = _theta(dim, base, "yarn")
    extrapolation = 1.0 - ramp
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        inv_freq = (theta / factor) * (1.0 - extrapolation) + theta * extrapolation
    return _in_range(inv_freq, "yarn", "scaling['factor']", factor), attention


def llama3(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""Llama 3.1's frequency-dependent interpolation.

    With wavelength :math:`\lambda_i = 2\pi / \theta_i`, trained length
    :math:`L`, :math:`\lambda_{lo} = L / f_{lo}` and :math:`\lambda_{hi} = L / f_{hi}`:
    pairs with :math:`\lambda_i < \lambda_{hi}` keep :math:`\theta_i`, pairs with
    :math:`\lambda_i > \lambda_{lo}` get :math:`\theta_i / s`, and those between
    are mixed with :math:`\mu = (L / \lambda_i - f_{lo}) / (f_{hi} - f_{lo})`:
    :math:`(1 - \mu)\,\theta_i / s + \mu\,\theta_i`.  Attention factor 1.

    Keys: ``factor`` (:math:`s`), ``low_freq_factor``, ``high_freq_factor``,
    ``original_max_position_embeddings``.
    """
    factor = _number(params, "factor", "llama3", positive=True)
    low_ff = _number(params, "low_freq_factor", "llama3", positive=True)
    high_ff = _number(params, "high_freq_factor", "llama3", positive=True)
    original = _number(params, "original_max_position_embeddings", "llama3", positive=True)
    theta = _theta(dim, base, "llama3")
    low_wavelen, high_wavelen = original / low_ff, original / high_ff
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        wavelen = 2 * math.pi / theta
        scaled = np.where(wavelen > low_wavelen, theta / factor, theta)
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        if medium.any():  # the band is empty when high_freq_factor <= low_freq_factor
            if high_ff == low_ff:  # ... but for a wavelength exactly on its edge: 0 / 0
                raise ValueError(
                    f"scaling['high_freq_factor'] must differ from scaling['low_freq_factor'] "
                    f"(both {low_ff:g}): a pair's wavelength falls on the band's edge, where "
                    "rope_type 'llama3' divides by their difference"
                )
            mu = (original / wavelen[medium] - low_ff) / (high_ff - low_ff)
            scaled[medium] = (1 - mu) * scaled[medium] / factor + mu * scaled[medium]
    return _in_range(scaled, "llama3", "scaling['factor']", factor), 1.0


def longrope(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""LongRoPE (Ding et al., 2024; Phi-3): a rescale factor per pair,
    :math:`\theta_i = 1 / (\lambda_i\, b^{2i/d})`, with :math:`\lambda` the
    ``long_factor`` list when the sequence length exceeds the trained length
    :math:`L`, ``short_factor`` otherwise.

    Attention factor: ``attention_factor`` if given, else
    :math:`\sqrt{1 + \ln s / \ln L}` for :math:`s > 1` (1 otherwise), where
    :math:`s` is ``factor`` or ``max_position_embeddings / L``.

    Keys: ``short_factor``, ``long_factor`` (``dim // 2`` values each),
    ``original_max_position_embeddings``, ``factor`` (or
    ``max_position_embeddings``), optional ``attention_factor``.
    `seq_len` None selects the short factors.
    """
    original = _number(params, "original_max_position_embeddings", "longrope", positive=True)
    short = _factor_list(params, "short_factor", "longrope", dim // 2)
    long = _factor_list(params, "long_factor", "longrope", dim // 2)
    attention = _number(params, "attention_factor", "longrope", required=False, positive=True)
    if attention is None:
        factor = _implied_factor(params, "longrope", original)
        if factor <= 1.0:
            attention = 1.0
        else:
            square = 1 + math.log(factor) / math.log(original) if original != 1 else -math.inf
            if not (0 < square < math.inf):
                raise ValueError(
                    f"scaling['original_max_position_embeddings'] = {original:g} with factor "
                    f"{factor:g} leaves rope_type 'longrope''s attention factor sqrt(1 + "
                    "ln(factor) / ln(original_max_position_embeddings)) undefined: it must be "
                    "> 1 (a context length)"
                )
            attention = math.sqrt(square)
    key = "long_factor" if seq_len and seq_len > original else "short_factor"
    ext = long if key == "long_factor" else short
    _theta(dim, base, "longrope")
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        inv_freq = 1.0 / (ext * frequency_powers(dim, base))
    values = f"[{float(ext.min()):g} .. {float(ext.max()):g}]"
    return _in_range(inv_freq, "longrope", f"scaling[{key!r}]", values), attention


def proportional(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""Proportional RoPE (p-RoPE; Gemma 4's full-attention layers): the
    whole head is rotated in the half layout's pairs :math:`(i, i + d/2)`,
    the first :math:`k = \lfloor p\,d / 2 \rfloor` pairs with the frequencies
    of the full head, :math:`\theta_i = b^{-2i/d} / s`, the others by angle 0
    (passed through unchanged).  Unlike partial rotary, the frequencies are
    those of :math:`d`, not of :math:`p\,d`.  Attention factor 1.

    Keys: ``partial_rotary_factor`` (:math:`p`, 1 by default), optional
    ``factor`` (:math:`s`, 1).
    """
    fraction = _number(params, "partial_rotary_factor", "proportional", required=False)
    fraction = 1.0 if fraction is None else fraction
    if not 0 <= fraction <= 1:
        raise ValueError(f"scaling['partial_rotary_factor'] must be in [0, 1], got {fraction}")
    factor = _number(params, "factor", "proportional", required=False, positive=True) or 1.0
    rotated = int(fraction * dim // 2)  # transformers' expression
    inv_freq = np.zeros(dim // 2, dtype=np.float64)
    inv_freq[:rotated] = _theta(dim, base, "proportional")[:rotated]
    with np.errstate(over="ignore", under="ignore"):
        inv_freq /= factor
    return _in_range(inv_freq, "proportional", "scaling['factor']", factor, rotated), 1.0


def resonance(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""Resonance RoPE (Wang et al., 2024): each pair's wavelength
    :math:`\lambda_i = 2\pi / \theta_i`, :math:`\theta_i = b^{-2i/d}`, rounded to
    the nearest integer, :math:`\tilde\theta_i = 2\pi / \mathrm{round}(\lambda_i)`,
    so that every pair repeats after a whole number of positions.  Attention
    factor 1.  No keys.
    """
    with np.errstate(over="ignore"):
        wavelength = np.rint(2 * math.pi / _theta(dim, base, "resonance"))
    return 2 * math.pi / wavelength, 1.0


def axial(dim: int, base: float, params: Params, seq_len: Optional[int]) -> Frequencies:
    r"""2-D (axial) RoPE of the Qwen2-VL to Qwen3-VL vision towers
    (``rope_type: "axial"``): the pairs in two halves, the first rotated by
    a patch's row and the second by its column (positions in two rows,
    :func:`posenc.apply_rope`'s ``axial=2``), each half with the
    frequencies of a rotary part of :math:`d/2` features,
    :math:`\theta_j = b^{-2j/(d/2)}`, :math:`j < d/4`.  The frequencies of
    the :math:`d/2` pairs in order (that ladder twice; transformers' buffer
    holds it once).  Attention factor 1.
    """
    if dim % 4:
        raise ValueError(
            f"rope_type 'axial' splits the head's pairs between rows and columns: its "
            f"dimension must be a multiple of 4, got {dim}"
        )
    ladder = _theta(dim // 2, base, "axial")
    return np.concatenate([ladder, ladder]), 1.0


@dataclass(frozen=True)
class Family:
    """A RoPE family: its function, whether its frequencies depend on the
    sequence length, the parameter keys it reads, and whether it reads
    ``partial_rotary_factor`` itself (rotating the whole head) instead of
    rotating only ``int(dim * partial_rotary_factor)`` features."""

    name: str
    function: Callable[[int, float, Params, Optional[int]], Frequencies]
    keys: FrozenSet[str]
    needs_seq_len: bool = False
    whole_head: bool = False
    rows: int = 0  # positions come in this many rows (axial: 2)


_TRAINED = "original_max_position_embeddings"
_FAMILY_LIST = (
    Family("default", default, frozenset()),
    Family("linear", linear, frozenset({"factor"})),
    Family(
        "dynamic",
        dynamic,
        frozenset({"factor", "max_position_embeddings", _TRAINED}),
        needs_seq_len=True,
    ),
    Family("ntk_alpha", ntk_alpha, frozenset({"alpha"})),
    Family(
        "yarn",
        yarn,
        frozenset(
            {"factor", "max_position_embeddings", _TRAINED, "beta_fast", "beta_slow", "mscale"}
            | {"mscale_all_dim", "attention_factor", "truncate"}
        ),
    ),
    Family(
        "llama3", llama3, frozenset({"factor", "low_freq_factor", "high_freq_factor", _TRAINED})
    ),
    Family(
        "longrope",
        longrope,
        frozenset(
            {"short_factor", "long_factor", _TRAINED, "factor", "max_position_embeddings"}
            | {"attention_factor"}
        ),
        needs_seq_len=True,
    ),
    Family("proportional", proportional, frozenset({"factor"}), whole_head=True),
    Family("resonance", resonance, frozenset()),
    Family("axial", axial, frozenset(), rows=2),
)
FAMILIES = {f.name: f for f in _FAMILY_LIST}

# keys every family may carry: the family's name, the base, the rotary part,
# M-RoPE's sections (which choose positions, not frequencies: see sections())
_COMMON_KEYS = frozenset(
    {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
    | {"mrope_section", "mrope_interleaved"}
)

# keys that change transformers' numbers in ways posenc does not implement:
# refused, never ignored
_UNSUPPORTED_KEYS = {
    "short_mscale": "PhiMoE's attention scale of the short factors",
    "long_mscale": "PhiMoE's attention scale of the long factors",
    "llama_4_scaling_beta": "Llama 4's position-dependent query scaling",
}

# every key posenc knows; others get a warning naming them (as transformers gives)
_KNOWN_KEYS = frozenset().union(_COMMON_KEYS, _UNSUPPORTED_KEYS, *(f.keys for f in _FAMILY_LIST))

# legacy family names whose checkpoints only one reading fits
_LONGROPE_ONLY = frozenset({"short_factor", "long_factor"})
_YARN_ONLY = frozenset({"beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"})

# How each model's rotary code (transformers' *RotaryEmbedding) shares the
# pairs among M-RoPE's position rows, whatever its config's mrope_interleaved
# says: in runs of mrope_section[c] pairs (False) or interleaved (True).
# Other models with sections (Ernie 4.5 VL, HunYuan-VL, ...) lay them out
# otherwise, and a config of any model not listed is refused.
_MROPE_LAYOUT = {
    **dict.fromkeys(
        ("qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_5_omni_text")
        + ("glm4v", "glm4v_text", "glm4v_moe", "glm4v_moe_text", "glm_image", "glm_image_text")
        + ("glm_ocr", "glm_ocr_text", "paddleocr_vl", "paddleocr_vl_text"),
        False,
    ),
    **dict.fromkeys(
        ("qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text", "qwen3_5")
        + ("qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_omni_moe_text")
        + ("qwen4_exp", "qwen4_exp_text", "cosmos3_edge", "cosmos3_edge_text", "hy_v4_vl")
        + ("hy_v4_vl_text", "cohere_compass_text"),
        True,
    ),
}

# The vision towers whose rope_type "axial" is Qwen2-VL's (the pairs in two
# halves, rows then columns, each half a ladder of d/2 features): other
# towers' "axial" (Pixtral's, Gemma 4's, Kimi-K2.5's, ...) is another scheme
_AXIAL_AS_QWEN2_VL = frozenset(
    ("qwen2_vl_vision", "qwen2_5_vl_vision", "qwen2_5_omni_vision_encoder", "qwen3_vl_vision")
    + ("qwen3_vl_moe_vision", "qwen3_5_vision", "qwen3_5_moe_vision", "qwen4_exp_vision")
    + ("qwen3_omni_moe_vision_encoder", "glm4v_vision", "glm4v_moe_vision", "glm_ocr_vision")
    + ("glm5_next_vision", "paddleocr_vl_vision", "ernie4_5_vl_moe_vision", "exaone4_5_vision")
    + ("cohere_compass_vision", "dots3_note_vision_encoder", "lfm3_vl_vision", "mlcd_vision_model")
    + ("muse_glimmer_vision", "muse_spark_vision", "video_llama_3_vision")
)

# How the models whose code does not turn the halves Llama's code turns
# their pairs: apply_rope with their config and layout "half" would rotate
# the wrong features, so it is refused, naming the layout to pass.
_PAIRS: Dict[str, str] = {
    # interleaved pairs (x[2i], x[2i + 1]), as GPT-J (their cos and sin tables
    # are each model's own: some are laid out as Llama's and interleaved inside
    # their apply_rotary_pos_emb, so rope_cos_sin takes either)
    **dict.fromkeys(
        ("blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder", "cohere")
        + ("cohere2", "cohere2_moe", "deepseek_v2", "ernie4_5", "ernie4_5_moe")
        + ("ernie4_5_vl_moe_text", "glm", "glm4", "glm4v", "glm4v_text", "glm_ocr")
        + ("glm_ocr_text", "helium", "hy_v4_vl", "hy_v4_vl_text", "llama4", "llama4_text")
        + ("moonshine", "moonshine_streaming", "moonshine_streaming_encoder")
        + ("openai_privacy_filter", "pe_audio_encoder", "pe_audio_video_encoder")
        + ("pe_video_encoder",),
        "interleaved",
    ),
    # the attention always turns them as DeepSeek-V3's does with its
    # rope_interleave flag set (interleaved pairs, the result in the half
    # layout), whatever the config says; DeepSeek-V3.2 and A.X K2 turn halves
    # in their indexer, whose rotation is the rope dict's
    **dict.fromkeys(
        ("axk2", "bailing_hybrid", "deepseek_v32", "dots3_note_text", "glm_moe_dsa")
        + ("longcat_flash", "mistral_large4", "mistral_large4_text"),
        "interleaved_to_half",
    ),
    # each pair by minus its angle (NanoChat's rotate_half flips its signs):
    # posenc's rotation of theirs is the inverse one
    "nanochat": "negative",
    # the last channels of each head, not the first ones a partial rotary
    # turns (DeepSeek-V4: its qk_rope_head_dim, in interleaved pairs)
    "deepseek_v4": "trailing",
}

# The models whose rotary module makes its cos and sin tables interleaved
# (each value twice in a row), and those that order them their own way (Ernie
# 4.5 VL: the frequencies of height and width on alternating pairs, time's
# last, put back in order inside its apply_rotary_pos_emb)
_TABLES = {
    **dict.fromkeys(
        ("blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder", "cohere")
        + ("cohere2", "cohere2_moe", "glm4v", "glm4v_text", "glm_ocr", "glm_ocr_text"),
        "interleaved",
    ),
    **dict.fromkeys(("ernie4_5_vl_moe", "ernie4_5_vl_moe_text"), "own"),
}

# keys of older config.json files that transformers rewrites when it loads
# them (into partial_rotary_factor, rope_theta): not read by posenc, so a
# config.json dict that has them without the key they became is refused
_LEGACY_CONFIG_KEYS = {
    "rotary_pct": "partial_rotary_factor",
    "rotary_emb_fraction": "partial_rotary_factor",
    "rotary_dim": "partial_rotary_factor",
    "rotary_emb_base": "rope_theta",
}


@dataclass(frozen=True)
class Rope:
    """A RoPE configuration as posenc reads it: the family, its parameters
    (a plain dict, the config's values merged in) and the head dimension
    the config states (None when it states none)."""

    family: Family
    params: Dict[str, Any]
    head_dim: Optional[int] = None
    #: read from a whole config (not a bare rope dict), and its model_type if it states one
    whole_config: bool = False
    model_type: Optional[str] = None
    #: the config's DeepSeek-V3 ``rope_interleave`` flag is set
    rope_interleave: bool = False
    #: the keys read with a warning that they are ignored (unknown to posenc)
    ignored: Tuple[Any, ...] = ()

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def pairs(self) -> Optional[str]:
        """The layout apply_rope needs where the model's code turns
        interleaved pairs ("interleaved", or "interleaved_to_half" for
        DeepSeek-V3's ``rope_interleave`` and the models that always turn
        them so), "negative" where it turns them by minus the angle,
        "trailing" where it turns the last channels of a head; None where
        its code turns halves as Llama's or is unknown."""
        if self.rope_interleave:
            return "interleaved_to_half"  # DeepSeek-V3's apply_rotary_pos_emb_interleave
        return _PAIRS.get(self.model_type or "")

    def plain_params(self) -> Dict[str, Any]:
        """The parameters (copies) that name the same family and values in a
        bare ``rope_parameters`` dict: those posenc reads, without M-RoPE's
        sections (a caller's, given apart)."""
        keep = _KNOWN_KEYS - {"mrope_section", "mrope_interleaved"}
        return {k: copy.deepcopy(value) for k, value in self.params.items() if k in keep}

    @property
    def model_mrope_layout(self) -> Optional[bool]:
        """How the rotary code of the config's model shares M-RoPE's pairs
        among the position rows (True interleaved, False in runs), None for
        a bare dict or a model posenc does not list."""
        return _MROPE_LAYOUT.get(self.model_type or "") if self.whole_config else None

    @property
    def tables(self) -> Optional[str]:
        """How the model's rotary module lays out its cos and sin tables
        where that is not as Llama's: "interleaved", or "own" (an order of
        its own)."""
        return _TABLES.get(self.model_type or "")


def _is_config(scaling: object) -> bool:
    """A whole model config (object or config.json dict), not a rope dict."""
    if isinstance(scaling, Mapping):
        return any(k in scaling for k in ("rope_parameters", "rope_scaling", "model_type"))
    return any(hasattr(scaling, k) for k in ("rope_parameters", "rope_scaling", "rope_theta"))


def _is_nested(params: Params) -> bool:
    """Per-layer-type parameters: ``{"full_attention": {...}, ...}``."""
    return bool(params) and all(
        isinstance(value, Mapping) or value is None for value in params.values()
    )


def _head_dim(config: Any, axial: bool = False) -> Optional[int]:
    """The head dimension a config states, as transformers derives it (a
    vision tower with axial RoPE from its ``embed_dim`` when it has one, as
    Qwen2-VL's)."""
    head_dim = config_value(config, "head_dim", strict=True)
    if head_dim is None and axial and config_value(config, "embed_dim", strict=True) is not None:
        heads = config_value(config, "num_attention_heads", strict=True) or config_value(
            config, "num_heads", strict=True
        )
        if heads:
            head_dim = config_value(config, "embed_dim", strict=True) // heads
    if head_dim is None:
        hidden = config_value(config, "hidden_size", strict=True)
        heads = config_value(config, "num_attention_heads", strict=True)
        if hidden is None or not heads:
            return None
        head_dim = hidden // heads
    return v.integer(head_dim, "scaling.head_dim", minimum=1)


def _select_layer(params: Params, layer_type: Optional[str], where: str) -> Params:
    """The parameters of `layer_type` when `params` are given per layer type."""
    if not _is_nested(params):
        if layer_type is not None:
            raise ValueError(
                f"layer_type = {layer_type!r} was given, but {where} holds one set of RoPE "
                "parameters for every layer, not one per layer type"
            )
        return params
    types = tuple(params)
    if layer_type is None:
        raise ValueError(
            f"{where} holds RoPE parameters per layer type {types}; pass layer_type= one of them"
        )
    if not isinstance(layer_type, str):
        raise TypeError(f"layer_type must be a string, not {type(layer_type).__name__}")
    if layer_type not in params:
        raise ValueError(f"layer_type must be one of {types}, got {layer_type!r}")
    if params[layer_type] is None:
        raise ValueError(f"{where} has no RoPE parameters for layer_type {layer_type!r}")
    return params[layer_type]


def _from_config(config: Any, layer_type: Optional[str]) -> Tuple[Dict[str, Any], Optional[int]]:
    """The parameter dict of a whole config, with the values transformers
    reads from the config itself merged in as transformers merges them."""
    rope = config_value(config, "rope_parameters", strict=True)
    if rope is None:
        rope = config_value(config, "rope_scaling", strict=True)
    if rope is None and config_value(config, "rope_theta", strict=True) is None:
        _refuse_composite(config)
    if rope is not None and not isinstance(rope, Mapping):
        raise TypeError(f"scaling.rope_parameters must be a dict, not {type(rope).__name__}")
    params = dict(_select_layer(dict(rope or {}), layer_type, "the config"))
    config = layer_config(config, layer_type)
    for key in ("rope_theta", "partial_rotary_factor"):
        value = config_value(config, key, strict=True)
        if value is not None:
            params.setdefault(key, value)
    length = config_value(config, "max_position_embeddings", strict=True)
    if length is not None:
        params["max_position_embeddings"] = length
    trained = config_value(config, _TRAINED, strict=True)
    if trained is not None:
        # Phi-3 keeps the pretraining length beside its rope dict; transformers
        # gives it priority over the dict's
        params[_TRAINED] = trained
    # a config object has been through transformers' rewrite (a key it keeps,
    # such as MiniMax-M3-VL's rotary_dim, its model does not read)
    legacy = _LEGACY_CONFIG_KEYS.items() if isinstance(config, Mapping) else ()
    for key, modern in legacy:
        if config.get(key) is not None and params.get(modern) is None:
            raise ValueError(
                f"scaling.{key}: a config with {key} and no {modern} is an older config.json "
                f"that transformers rewrites as it loads it; posenc does not read {key}: pass "
                "the config transformers loads (AutoConfig.from_pretrained), or state "
                f"{modern} in it"
            )
    axial_rope = params.get("rope_type", params.get("type")) == "axial"
    return params, _head_dim(config, axial_rope)


def _model_type(config: Any) -> Optional[str]:
    model_type = config_value(config, "model_type", strict=True)
    return model_type if isinstance(model_type, str) and model_type else None


def _refuse_composite(config: Any) -> None:
    """A ValueError for a config whose RoPE lies in its sub-configs
    (a vision-language model's text_config and vision_config)."""
    subs = [
        k
        for k in ("text_config", "vision_config")
        if config_value(config, k, strict=True) is not None
    ]
    if subs:
        which = " or ".join(f"config.{k}" for k in subs)
        raise ValueError(
            f"scaling is a composite {_model_type(config) or 'model'} config: its RoPE "
            f"parameters are in its sub-configs; pass {which}"
        )


def _family_of(params: Params) -> Tuple[Family, Tuple[Any, ...]]:
    """The family a parameter dict names, after transformers' dialects, and
    the keys it ignores (with a warning naming them)."""
    name = params.get("rope_type", params.get("type", "default"))
    if name is None:
        name = "default"
    if not isinstance(name, str):
        raise TypeError(f"scaling['rope_type'] must be a string, not {type(name).__name__}")
    present = {k for k, value in params.items() if value is not None}
    if name == "su":  # Phi-3's first checkpoints
        name = "longrope"
    elif name == "yarn" and present & _LONGROPE_ONLY:
        # Phi-3's legacy "yarn" is LongRoPE (transformers' Phi3Config rewrites it)
        if present & _YARN_ONLY:
            raise ValueError(
                "scaling: rope_type 'yarn' with both LongRoPE keys "
                f"{sorted(present & _LONGROPE_ONLY)} and YaRN keys {sorted(present & _YARN_ONLY)} "
                "is neither Phi-3's legacy LongRoPE nor YaRN; give rope_type explicitly"
            )
        name = "longrope"
    elif name == "mrope":
        # Qwen2-VL's checkpoints: "mrope" with its sections is the default
        # frequencies (transformers' Qwen2VLConfig rewrites it)
        name = "default"
    elif name == "dynamic" and params.get("alpha"):
        name = "ntk_alpha"  # HunYuan's fixed-alpha NTK, as transformers' HunYuan reads it
    for key in sorted(present & set(_UNSUPPORTED_KEYS)):
        raise ValueError(
            f"scaling[{key!r}] ({_UNSUPPORTED_KEYS[key]}) changes the numbers in transformers "
            "and is not implemented by posenc; it is refused rather than ignored"
        )
    if name not in FAMILIES:
        raise ValueError(
            f"scaling: rope_type {name!r} is not implemented by posenc (it implements "
            f"{tuple(FAMILIES)}); its numbers would be wrong, so it is refused"
        )
    unknown = sorted(k for k in params if not isinstance(k, str) or k not in _KNOWN_KEYS)
    if unknown:
        warnings.warn(
            f"scaling: unknown RoPE parameter(s) {unknown} ignored (rope_type {name!r} reads "
            f"{sorted(FAMILIES[name].keys | {'rope_theta', 'partial_rotary_factor'})})",
            UserWarning,
            stacklevel=4,
        )
    return FAMILIES[name], tuple(unknown)


def read(scaling: Optional[RopeScaling], layer_type: Optional[str] = None) -> Rope:
    """What `scaling` means, as a :class:`Rope`.

    `scaling` is None, a ``rope_scaling`` / ``rope_parameters`` dict (flat,
    or per layer type with `layer_type`), or a whole config: a transformers
    config object (any object with ``rope_parameters``, ``rope_scaling`` or
    ``rope_theta``; transformers is not imported) or a config.json dict
    (one with ``rope_parameters``, ``rope_scaling`` or ``model_type``).
    """
    if scaling is None:
        if layer_type is not None:
            raise ValueError("layer_type was given without scaling (a config to choose from)")
        return _DEFAULT
    whole = _is_config(scaling)
    if whole:
        params, head_dim = _from_config(scaling, layer_type)
    elif isinstance(scaling, Mapping):
        params, head_dim = dict(_select_layer(scaling, layer_type, "scaling")), None
    else:
        _refuse_composite(scaling)
        raise TypeError(
            "scaling must be None, a dict like transformers' rope_scaling / rope_parameters, "
            f"or a transformers config, not {type(scaling).__name__}"
        )
    family, ignored = _family_of(params)
    model_type = _model_type(scaling) if whole else None
    interleave = whole and config_value(scaling, "rope_interleave", strict=True) is True
    rope = Rope(family, params, head_dim, whole, model_type, interleave, ignored)
    sections(rope)  # M-RoPE's keys are checked whoever reads them
    if family.rows and model_type not in _AXIAL_AS_QWEN2_VL:
        source = f"a {model_type!r} config" if model_type else "scaling"
        raise ValueError(
            f"rope_type 'axial' of {source}: the vision towers that name their 2-D RoPE "
            "'axial' lay it out in different ways (Qwen2-VL's halves of rows and columns, "
            "Pixtral's, Gemma 4's, Kimi-K2.5's, ...), and posenc implements Qwen2-VL's, which "
            f"it reads from the configs of {', '.join(sorted(_AXIAL_AS_QWEN2_VL)[:3])}, ... "
            "only; for another tower whose scheme is Qwen2-VL's, pass axial=2 without scaling"
        )
    if family.name in ("llama3", "yarn", "longrope") and params.get(_TRAINED) is None:
        # transformers' default for the pretraining length
        if params.get("max_position_embeddings") is not None:
            params[_TRAINED] = params["max_position_embeddings"]
    return rope


def sections(rope: Rope) -> Optional[Tuple[Tuple[int, ...], bool]]:
    """M-RoPE's ``(mrope_section, mrope_interleaved)`` of the parameters
    (checked by :func:`mrope_channels` where they are used), or None."""
    section = rope.params.get("mrope_section")
    interleaved = rope.params.get("mrope_interleaved")
    if section is None:
        if interleaved and rope.model_mrope_layout is None:
            raise ValueError(
                "scaling['mrope_interleaved'] is set without scaling['mrope_section'] "
                "(the pairs of each of M-RoPE's position rows)"
            )
        mrope_layout(rope)  # a whole config's flag is checked against its model
        return None
    section = section_list(section, "scaling['mrope_section']")
    stated = None if interleaved is None else flag(interleaved, "scaling['mrope_interleaved']")
    if rope.whole_config:
        # the model's rotary code decides, not the flag (which it does not read)
        layout = _MROPE_LAYOUT.get(rope.model_type or "")
        if layout is None:
            raise ValueError(
                f"M-RoPE's mrope_section in the config of model type {rope.model_type!r}: posenc "
                "does not know how this model's rotary code shares the pairs among the position "
                "rows (Qwen2-VL's runs, Qwen3-VL's interleaving, or another scheme); if it is one "
                "of those two, pass the rope dict with mrope_interleaved stated"
            )
        if stated is not None and stated != layout:
            raise ValueError(
                f"scaling['mrope_interleaved'] = {stated}, but {rope.model_type}'s rotary code "
                f"{'interleaves' if layout else 'does not interleave'} M-RoPE's sections"
            )
        return section, layout
    if stated is None:
        if rope.params.get("type") == "mrope" or rope.params.get("rope_type") == "mrope":
            return section, False  # Qwen2-VL's own dialect
        raise ValueError(
            "scaling has mrope_section but not mrope_interleaved: Qwen2-VL and Qwen2.5-VL "
            "share the pairs among the rows in runs (False), Qwen3-VL and later models "
            "interleave them (True); state which, or pass the model's config"
        )
    return section, stated


def mrope_layout(rope: Rope) -> Optional[bool]:
    """How `rope`'s model shares M-RoPE's pairs among the position rows,
    whichever sections it is given (its own or the caller's): True
    interleaved (Qwen3-VL), False in runs (Qwen2-VL), None where the
    parameters do not say.  A whole config says it by its model type (the
    rotary code decides, transformers reads no flag; a stated
    ``mrope_interleaved`` that contradicts it is refused), a bare dict by its
    ``mrope_interleaved`` (Qwen2-VL's ``"mrope"`` dialect: runs)."""
    stated = rope.params.get("mrope_interleaved")
    if stated is not None:
        stated = flag(stated, "scaling['mrope_interleaved']")
    if rope.whole_config:
        layout = _MROPE_LAYOUT.get(rope.model_type or "")
        if layout is not None and stated is not None and stated != layout:
            raise ValueError(
                f"scaling['mrope_interleaved'] = {stated}, but {rope.model_type}'s rotary code "
                f"{'interleaves' if layout else 'does not interleave'} M-RoPE's sections"
            )
        return layout
    if stated is not None:
        return stated
    if rope.params.get("type") == "mrope" or rope.params.get("rope_type") == "mrope":
        return False  # Qwen2-VL's own dialect
    return None


def section_list(value: Any, name: str) -> Tuple[int, ...]:
    """A list of pair counts (non-negative integers, at least one)."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a list of integers, not {type(value).__name__}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise ValueError(f"{name} must be a flat list of integers, got shape {value.shape}")
    out = tuple(v.integer(item, f"{name}[{i}]", minimum=0) for i, item in enumerate(value))
    if not out:
        raise ValueError(f"{name} must hold at least one section")
    return out


def flag(value: Any, name: str) -> bool:
    """A bool option (None: False)."""
    if value is None:
        return False
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return bool(value)


def rotary_dimension(dim: int, rope: Rope) -> int:
    """``int(dim * partial_rotary_factor)`` (transformers' expression) when
    the parameters have that key and the family does not read it itself,
    else `dim`; a ValueError unless positive and even."""
    if rope.params.get("partial_rotary_factor") is None or rope.family.whole_head:
        return dim
    factor = _number(rope.params, "partial_rotary_factor", rope.name, positive=True)
    if factor > 1:
        raise ValueError(f"scaling['partial_rotary_factor'] must be <= 1, got {factor}")
    rotary = int(dim * factor)
    if rotary <= 0 or rotary % 2:
        raise ValueError(
            f"scaling['partial_rotary_factor'] = {factor} makes the rotary dimension "
            f"int({dim} * {factor}) = {rotary}, which must be a positive even number"
        )
    return rotary


def base_of(base: float, rope: Rope) -> float:
    """`base`, or ``rope_theta`` when the parameters have it; a ValueError
    when `base` was given another value than its default and the two
    disagree."""
    theta = _number(rope.params, "rope_theta", rope.name, required=False, positive=True)
    if theta is None:
        if rope.whole_config and base == DEFAULT_BASE:
            raise ValueError(
                "scaling is a config that states no rope_theta: its model class's default "
                "applies, which posenc cannot know; pass the config transformers loads "
                "(AutoConfig.from_pretrained fills it in), state rope_theta in it, or pass base="
            )
        return base
    if base != DEFAULT_BASE and base != theta:
        raise ValueError(f"base = {base} disagrees with scaling['rope_theta'] = {theta}")
    return theta


def check_layout(layout: str, rope: Rope) -> None:
    """A ValueError for apply_rope's layout "half" with the config of a model
    whose code turns interleaved pairs, and for any call with the config of
    one that turns its pairs by minus the angle or its last channels."""
    if rope.pairs == "negative":
        raise ValueError(
            f"a {rope.model_type!r} config: that model turns each pair by minus its angle (its "
            "rotate_half flips the signs), which is posenc's inverse rotation: pass its rope "
            "dict (scaling=config.rope_parameters) with inverse=True"
        )
    if rope.pairs == "trailing":
        raise ValueError(
            f"a {rope.model_type!r} config: that model rotates the last channels of each head "
            "(qk_rope_head_dim of them, in interleaved pairs, with frequencies over those "
            "channels), where posenc's partial rotary turns the first ones; rotate "
            "x[..., -qk_rope_head_dim:] with base=rope_theta and layout='interleaved', "
            "without scaling"
        )
    if layout == "half" and rope.pairs is not None:
        raise ValueError(
            f"layout = 'half' with a {rope.model_type or 'model'!r} config: that model turns "
            f"interleaved pairs (x[2i], x[2i + 1]); pass layout={rope.pairs!r} (for the half "
            "layout, as in weights permuted to it or DeepSeek-V3.2's indexer, pass the rope "
            "dict instead of the config)"
        )


def check_table_layout(layout: str, rope: Rope) -> None:
    """A ValueError for rope_cos_sin's tables where they would not be those
    of the config's model: layout "half" for a model whose rotary module
    makes them interleaved, any layout for one that orders them its own way."""
    if rope.tables == "own":
        raise ValueError(
            f"rope_cos_sin with a {rope.model_type!r} config: that model's rotary module orders "
            "its cos and sin its own way (height's and width's frequencies on alternating "
            "pairs, time's last), which posenc's tables do not follow; apply_rope with "
            "layout='interleaved' rotates its text tokens as the model does"
        )
    if layout == "half" and rope.tables == "interleaved":
        raise ValueError(
            f"layout = 'half' with a {rope.model_type!r} config: that model's rotary module "
            "makes its cos and sin interleaved (each value twice in a row); pass "
            "layout='interleaved'"
        )


def check_head_dim(dim: int, rope: Rope, name: str) -> None:
    """A ValueError when the config states another head dimension than `dim`."""
    if rope.head_dim is not None and rope.head_dim != dim:
        raise ValueError(
            f"{name} = {dim} disagrees with the config's head dimension {rope.head_dim}"
        )


def resolve(
    dim: int, base: float, scaling: Optional[RopeScaling], layer_type: Optional[str] = None
) -> Tuple[int, float, Rope]:
    """``(rotary_dim, base, rope)`` that a call with head dimension `dim`,
    `base`, `scaling` and `layer_type` means (see :func:`read`,
    :func:`rotary_dimension`, :func:`base_of`)."""
    v.shape_size((dim // 2,), "dim (its dim // 2 frequencies)")
    rope = read(scaling, layer_type)
    check_head_dim(dim, rope, "dim")
    return rotary_dimension(dim, rope), base_of(base, rope), rope


_DEFAULT = Rope(FAMILIES["default"], {})


@lru_cache(maxsize=256)
def _plain_frequencies(dim: int, base: float) -> Float64Array:
    """The frequencies without scaling, made once per (dim, base): a decoding
    step calls for the same ones every time."""
    inv_freq = np.ascontiguousarray(_theta(dim, base, "default"), dtype=np.float64)
    inv_freq.setflags(write=False)
    return inv_freq


def frequencies(dim: int, base: float, rope: Rope, seq_len: Optional[int]) -> Frequencies:
    """``(inv_freq, attention_factor)`` of `rope` (see :func:`read`) for
    rotary dimension `dim` and base `base` (a read-only array)."""
    if rope.family.name == "default":
        return _plain_frequencies(dim, base), 1.0
    inv_freq, attention = rope.family.function(dim, base, rope.params, seq_len)
    inv_freq, attention = np.ascontiguousarray(inv_freq, dtype=np.float64), float(attention)
    # each family refuses the parameters that take it out of range, naming them; this
    # is the guarantee that none is missed
    if not (0 < attention < math.inf and np.isfinite(inv_freq).all() and (inv_freq >= 0).all()):
        raise ValueError(
            f"scaling: rope_type {rope.name!r} with parameters {dict(rope.params)} gives "
            f"inverse frequencies or an attention factor ({attention:g}) that are not finite "
            "and > 0 in float64"
        )
    return inv_freq, attention
