"""RoPE frequencies and their context-extension families.

Each family is one small function ``family(dim, base, params, seq_len)`` that
returns ``(inv_freq, attention_factor)``: `inv_freq` a float64 array of
``dim // 2`` inverse frequencies for a rotary dimension `dim`, and the factor
by which cos and sin are multiplied.  :data:`FAMILIES` maps the names used in
Hugging Face's ``rope_scaling`` / ``rope_parameters`` dicts to them; adding a
family is adding a function and an entry.

`params` is such a dict as it is (``rope_type`` or the older ``type``, and
the keys transformers reads).  The numbers are those of transformers'
``modeling_rope_utils`` init functions for the same dict, formed in float64
where transformers uses float32; the attention factors are the same Python
floats.  Two values transformers takes from the model config rather than the
dict are read from the dict here:

- ``max_position_embeddings`` (``config.max_position_embeddings``): the
  context length at which ``dynamic`` starts to grow the base, and the
  numerator of the implied ``factor`` of ``yarn`` and ``longrope`` when the
  dict has none;
- ``partial_rotary_factor``: the rotary dimension is
  ``int(head_dim * partial_rotary_factor)``, handled by :func:`resolve`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from . import _validate as v
from .absolute import frequency_powers, inv_frequencies

DEFAULT_BASE = 10000.0


def _number(params, key, family, *, required=True, positive=False):
    """``params[key]`` as a float (None when it is missing and not
    required); a ValueError naming the key when it is required and missing,
    a TypeError when it is not a real number."""
    value = params.get(key)
    if value is None:
        if required:
            raise ValueError(f"scaling: rope_type {family!r} requires the key {key!r}")
        return None
    return v.real(value, f"scaling[{key!r}]", positive=positive)


def _factor_list(params, key, family, n):
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


def _implied_factor(params, family, original):
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


def default(dim, base, params, seq_len):
    r"""Original RoPE (Su et al., 2021): :math:`\theta_i = b^{-2i/d}`, attention factor 1."""
    return inv_frequencies(dim, base), 1.0


def linear(dim, base, params, seq_len):
    r"""Position interpolation (Chen et al., 2023; kaiokendev): positions divided by
    the factor :math:`s`, i.e. :math:`\theta_i = b^{-2i/d} / s`.

    Keys: ``factor``.
    """
    factor = _number(params, "factor", "linear", positive=True)
    return inv_frequencies(dim, base) / factor, 1.0


def dynamic(dim, base, params, seq_len):
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
    grown = base * ((factor * n / length) - (factor - 1)) ** (dim / (dim - 2))
    return inv_frequencies(dim, grown), 1.0


def yarn(dim, base, params, seq_len):
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

    def mscale_of(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = _number(params, "attention_factor", "yarn", required=False)
    if attention is None:
        m = _number(params, "mscale", "yarn", required=False)
        m_all = _number(params, "mscale_all_dim", "yarn", required=False)
        if m and m_all:
            attention = float(mscale_of(factor, m) / mscale_of(factor, m_all))
        else:
            attention = mscale_of(factor)
    # transformers takes a missing (or zero) beta as the paper's default
    beta_fast = _number(params, "beta_fast", "yarn", required=False) or 32
    beta_slow = _number(params, "beta_slow", "yarn", required=False) or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    theta = inv_frequencies(dim, base)
    extrapolation = 1.0 - ramp
    inv_freq = (theta / factor) * (1.0 - extrapolation) + theta * extrapolation
    return inv_freq, attention


def llama3(dim, base, params, seq_len):
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
    theta = inv_frequencies(dim, base)
    low_wavelen, high_wavelen = original / low_ff, original / high_ff
    wavelen = 2 * math.pi / theta
    scaled = np.where(wavelen > low_wavelen, theta / factor, theta)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    if medium.any():  # the band is empty when high_freq_factor <= low_freq_factor
        mu = (original / wavelen[medium] - low_ff) / (high_ff - low_ff)
        scaled[medium] = (1 - mu) * scaled[medium] / factor + mu * scaled[medium]
    return scaled, 1.0


def longrope(dim, base, params, seq_len):
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
    attention = _number(params, "attention_factor", "longrope", required=False)
    if attention is None:
        factor = _implied_factor(params, "longrope", original)
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = long if seq_len and seq_len > original else short
    return 1.0 / (ext * frequency_powers(dim, base)), attention


FAMILIES = {
    "default": default,
    "linear": linear,
    "dynamic": dynamic,
    "yarn": yarn,
    "llama3": llama3,
    "longrope": longrope,
}

# the families whose frequencies depend on the sequence length
SEQ_LEN_FAMILIES = frozenset({"dynamic", "longrope"})


def family_name(scaling):
    """The family a ``rope_scaling`` dict names (``rope_type``, else ``type``,
    else ``"default"``, as transformers reads it); a ValueError if unknown."""
    if scaling is None:
        return "default"
    if not isinstance(scaling, Mapping):
        raise TypeError(
            f"scaling must be None or a dict like transformers' rope_scaling, "
            f"not {type(scaling).__name__}"
        )
    name = scaling.get("rope_type", scaling.get("type", "default"))
    if name not in FAMILIES:
        raise ValueError(f"scaling: unknown rope_type {name!r}; expected one of {tuple(FAMILIES)}")
    return name


def rotary_dimension(dim, scaling, name):
    """``int(dim * partial_rotary_factor)`` (transformers' expression) when
    `scaling` has that key, else `dim`; a ValueError unless positive and even."""
    if scaling is None or scaling.get("partial_rotary_factor") is None:
        return dim
    factor = _number(scaling, "partial_rotary_factor", name, positive=True)
    if factor > 1:
        raise ValueError(f"scaling['partial_rotary_factor'] must be <= 1, got {factor}")
    rotary = int(dim * factor)
    if rotary <= 0 or rotary % 2:
        raise ValueError(
            f"scaling['partial_rotary_factor'] = {factor} makes the rotary dimension "
            f"int({dim} * {factor}) = {rotary}, which must be a positive even number"
        )
    return rotary


def base_of(base, scaling, name):
    """`base`, or ``scaling["rope_theta"]`` when present; a ValueError when
    `base` was given another value than its default and the two disagree."""
    theta = (
        None
        if scaling is None
        else _number(scaling, "rope_theta", name, required=False, positive=True)
    )
    if theta is None:
        return base
    if base != DEFAULT_BASE and base != theta:
        raise ValueError(f"base = {base} disagrees with scaling['rope_theta'] = {theta}")
    return theta


def resolve(dim, base, scaling):
    """``(rotary_dim, base, family)`` that a call with head dimension `dim`,
    `base` and `scaling` means (see :func:`rotary_dimension`, :func:`base_of`)."""
    name = family_name(scaling)
    return rotary_dimension(dim, scaling, name), base_of(base, scaling, name), name


def frequencies(dim, base, scaling, seq_len, name):
    """``(inv_freq, attention_factor)`` of family `name` (see
    :func:`family_name`) for rotary dimension `dim` and base `base`."""
    inv_freq, attention = FAMILIES[name](dim, base, scaling if scaling is not None else {}, seq_len)
    return np.ascontiguousarray(inv_freq, dtype=np.float64), float(attention)
