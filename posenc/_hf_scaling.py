"""What ``posenc.hf.patch(model, scaling=...)`` reads: the context-extension
family asked for, and each rotary module's config carrying it.

:func:`request` reads ``scaling=`` (a short string of :data:`SHORT_FORMS`, a
``rope_parameters`` dict, flat or per layer type, or a whole transformers
config) into a :class:`Request`.  :func:`scaled_config` makes, for one rotary
module, a copy of its config whose rope parameters are the request's, the
values transformers would infer filled in as transformers fills them when it
builds a model from such a config (``rope_theta``, ``partial_rotary_factor``
and M-RoPE's sections from the module's own parameters,
``original_max_position_embeddings`` from the config's own
``original_max_position_embeddings`` or ``max_position_embeddings``), and
says what it inferred; :func:`described` adds what the family's own
defaults make of them (YaRN's and LongRoPE's attention factor, YaRN's
betas, LongRoPE's factor and its switch to the long factors).
:func:`attention_scale` is the attention scale of the models whose
attention, not their rotary module, multiplies by YaRN's ``mscale``
(DeepSeek-V2/V3 and the models built on their attention).

transformers is never imported here; the model's config is never changed
(every change is made on a deep copy).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import _validate as v
from . import rope_scaling
from ._model_config import config_value

_TRAINED = "original_max_position_embeddings"

#: The short forms of ``scaling=``: ``"name:number"`` (``"none"`` and
#: ``"resonance"`` without a number) -> (rope_type, the key the number is,
#: the keys the form fixes besides it).
SHORT_FORMS: Dict[str, Tuple[str, Optional[str], Dict[str, Any]]] = {
    "none": ("default", None, {}),
    "default": ("default", None, {}),
    "linear": ("linear", "factor", {}),
    "dynamic": ("dynamic", "factor", {}),
    "ntk": ("dynamic", "factor", {}),
    "ntk_alpha": ("ntk_alpha", "alpha", {}),
    "yarn": ("yarn", "factor", {}),
    # Llama 3.1's published values (transformers has no default for them)
    "llama3": ("llama3", "factor", {"low_freq_factor": 1.0, "high_freq_factor": 4.0}),
    "resonance": ("resonance", None, {}),
}

#: The families ``scaling=`` applies (posenc's others change which features
#: rotate or how positions come: proportional, axial)
FAMILIES = ("default", "linear", "dynamic", "ntk_alpha", "yarn", "llama3", "longrope", "resonance")

# keys every family carries beside its own; M-RoPE's sections are the model's
_COMMON = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})
_SECTIONS = ("mrope_section", "mrope_interleaved")
# the keys transformers requires in a rope dict of each family (its config
# validation refuses the dict without them)
_REQUIRED = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor"),
    "ntk_alpha": ("alpha",),
}
# the windowed layers a flat request leaves as they are (as transformers'
# Gemma 3 config puts a flat rope_scaling on its full-attention layers only)
_WINDOWED = ("sliding_attention",)


def _short_table() -> str:
    return (
        "'none', 'linear:F', 'dynamic:F' (or 'ntk:F'), 'ntk_alpha:A', 'yarn:F', 'llama3:F', "
        "'resonance'"
    )


@dataclass(frozen=True)
class Request:
    """``scaling=`` read: one flat rope dict (`params`) for every layer type
    but the windowed ones, or one per layer type (`per_layer`, None for a
    layer type kept as it is); `lengths`, a config's own
    ``max_position_embeddings`` and ``original_max_position_embeddings``
    (a config carries its lengths, a dict takes the model's); `fixed`, the
    keys a short form set and why."""

    label: str
    params: Optional[Dict[str, Any]] = None
    per_layer: Optional[Dict[str, Optional[Dict[str, Any]]]] = None
    from_config: bool = False
    lengths: Dict[str, Any] = field(default_factory=dict)
    fixed: Dict[str, str] = field(default_factory=dict)


def _number(text: str, form: str, key: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"scaling = {form!r}: {key} must be a number after the colon, got {text!r}"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"scaling = {form!r}: {key} must be finite and > 0, got {text!r}")
    return value


def _from_string(text: str) -> Request:
    name, colon, number = text.strip().lower().partition(":")
    name = name.strip()
    if name == "longrope":
        raise ValueError(
            f"scaling = {text!r}: longrope needs the model's own short_factor and long_factor "
            "lists (rotary_dim // 2 values each); pass a dict "
            "{'rope_type': 'longrope', 'short_factor': [...], 'long_factor': [...]}"
        )
    if name not in SHORT_FORMS:
        raise ValueError(
            f"scaling = {text!r} is none of the short forms {_short_table()}; pass a rope dict "
            "or a transformers config for the others"
        )
    rope_type, key, fixed = SHORT_FORMS[name]
    params: Dict[str, Any] = {"rope_type": rope_type}
    if key is None:
        if colon:
            raise ValueError(f"scaling = {text!r}: {name!r} takes no number")
    else:
        if not colon:
            raise ValueError(
                f"scaling = {text!r}: {name!r} takes its {key} after a colon, as in '{name}:4'"
            )
        params[key] = _number(number.strip(), text, key)
    params.update(fixed)
    why = {k: f"the short form {name!r}: Llama 3.1's" for k in fixed}  # one reason for all
    return Request(label=repr(text), params=params, fixed=why)


def _is_config(scaling: Any) -> bool:
    """A whole config (object or config.json dict), a composite one too."""
    keys = ("rope_parameters", "rope_scaling", "rope_theta", "text_config", "model_type")
    if isinstance(scaling, Mapping):
        return any(k in scaling for k in keys if k != "rope_theta")
    return not isinstance(scaling, str) and any(hasattr(scaling, k) for k in keys)


def _family(params: Mapping[str, Any], where: str) -> str:
    """The family a rope dict names (transformers' dialects read as
    :func:`posenc.rope_scaling.read` reads them), one of :data:`FAMILIES`."""
    plain = {k: val for k, val in params.items() if k not in _SECTIONS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unknown keys: refused below, by name
        name = rope_scaling.read(plain).name
    if name not in FAMILIES:
        raise ValueError(
            f"{where}: rope_type {name!r} is not a context-extension family patch applies "
            f"(it applies {FAMILIES}); {name!r} changes which features rotate or how positions "
            "come, not the context"
        )
    return name


def _checked(params: Any, where: str, strict: bool) -> Dict[str, Any]:
    """A flat rope dict of the request, its family named by ``rope_type``;
    with `strict` (a dict or string of the caller's), a ValueError naming
    any key the family does not read (transformers would ignore it) or that
    transformers reads from the config rather than the dict."""
    if not isinstance(params, Mapping):
        raise TypeError(f"{where} must be a dict, not {type(params).__name__}")
    out = copy.deepcopy(dict(params))
    name = _family(out, where)
    out.pop("type", None)
    out["rope_type"] = name
    if strict:
        if "max_position_embeddings" in out:
            raise ValueError(
                f"{where}['max_position_embeddings']: transformers reads it from the model's "
                "config, not from the rope dict; patch takes the model's (pass a whole config "
                "as scaling= to give another)"
            )
        reads = set(rope_scaling.FAMILIES[name].keys | _COMMON | set(_SECTIONS))
        reads.discard("max_position_embeddings")
        unread = sorted(str(k) for k in out if k not in reads)
        if unread:
            raise ValueError(
                f"{where}: rope_type {name!r} does not read {unread} (it reads "
                f"{sorted(reads - {'type'})}); a misspelt key would be ignored, so it is refused"
            )
    for key in _REQUIRED.get(name, ()):
        if out.get(key) is None:
            raise ValueError(f"{where}: rope_type {name!r} requires the key {key!r}")
    return out


def _nested(params: Mapping[str, Any]) -> bool:
    return bool(params) and all(isinstance(p, Mapping) or p is None for p in params.values())


def _from_config(config: Any) -> Request:
    """A whole config: its rope parameters, and its lengths, as transformers
    reads them when it builds a model from it."""
    rope = config_value(config, "rope_parameters")
    if rope is None:
        rope = config_value(config, "rope_scaling")
    if rope is None:
        for sub in ("text_config", "language_config"):
            if config_value(config, sub) is not None:
                raise ValueError(
                    f"scaling is a composite config: its rope parameters are in its {sub}; "
                    f"pass config.{sub}"
                )
        if config_value(config, "rope_theta") is None:
            raise ValueError("scaling is a config that states no rope parameters")
        rope = {"rope_type": "default"}
    if not isinstance(rope, Mapping):
        raise TypeError(f"scaling.rope_parameters must be a dict, not {type(rope).__name__}")
    lengths = {key: config_value(config, key) for key in ("max_position_embeddings", _TRAINED)}
    theta = config_value(config, "rope_theta")
    partial = config_value(config, "partial_rotary_factor")

    def one(params: Mapping[str, Any], where: str) -> Dict[str, Any]:
        out = _checked(params, where, strict=False)
        if theta is not None:
            out.setdefault("rope_theta", theta)
        if partial is not None:
            out.setdefault("partial_rotary_factor", partial)
        if out["rope_type"] in ("yarn", "llama3", "longrope"):
            # transformers' priority: the config's own attribute (Phi-3's), the
            # dict's, the config's max_position_embeddings
            if lengths[_TRAINED] is not None:
                out[_TRAINED] = lengths[_TRAINED]
            elif out.get(_TRAINED) is None and lengths["max_position_embeddings"] is not None:
                out[_TRAINED] = lengths["max_position_embeddings"]
        return out

    label = f"a {type(config).__name__}"
    if _nested(rope):
        per_layer = {
            str(lt): None if p is None else one(p, f"scaling.rope_parameters[{lt!r}]")
            for lt, p in rope.items()
        }
        return Request(label=label, per_layer=per_layer, from_config=True, lengths=lengths)
    return Request(
        label=label, params=one(rope, "scaling.rope_parameters"), from_config=True, lengths=lengths
    )


def request(scaling: Any) -> Request:
    """What ``scaling=`` asks for; TypeError or ValueError naming it."""
    if isinstance(scaling, str):
        return _from_string(scaling)
    if _is_config(scaling):
        return _from_config(scaling)
    if isinstance(scaling, Mapping):
        if not scaling:
            raise ValueError("scaling must not be an empty dict (scaling='none': no extension)")
        if _nested(scaling):
            per_layer = {
                str(lt): None if p is None else _checked(p, f"scaling[{lt!r}]", strict=True)
                for lt, p in scaling.items()
            }
            return Request(label="a rope dict per layer type", per_layer=per_layer)
        params = _checked(scaling, "scaling", strict=True)
        return Request(label=f"rope_type {params['rope_type']!r}", params=params)
    raise TypeError(
        "scaling must be a short string (" + _short_table() + "), a rope_parameters dict or a "
        f"transformers config, not {type(scaling).__name__}"
    )


@dataclass
class Scaled:
    """One rotary module's config copy carrying the request (`config`), the
    flat rope dict of each layer type it scales (`params`), the layer types
    it keeps, and what it inferred, per scaled layer type."""

    config: Any
    params: Dict[Optional[str], Dict[str, Any]]
    kept: List[str]
    inferred: Dict[Optional[str], List[str]]


def _current(config: Any, layer_type: Optional[str], where: str) -> Dict[str, Any]:
    rope = config_value(config, "rope_parameters")
    if rope is None:
        rope = config_value(config, "rope_scaling")
    if layer_type is not None and isinstance(rope, Mapping):
        rope = rope.get(layer_type)
    if not isinstance(rope, Mapping):
        raise ValueError(f"{where}: its config holds no rope parameters to replace")
    return dict(rope)


def layer_family(config: Any, layer_type: Optional[str]) -> str:
    """A layer type's own family and base, as messages name them."""
    current = _current(config, layer_type, "the module")
    name = current.get("rope_type", current.get("type", "default"))
    theta = current.get("rope_theta")
    return f"{name}, rope_theta {theta:g}" if isinstance(theta, (int, float)) else str(name)


def _targets(
    req: Request, layer_types: List[Optional[str]], where: str
) -> Dict[Optional[str], Optional[Dict[str, Any]]]:
    """The request's rope dict for each of the module's layer types (None:
    kept as it is)."""
    if req.per_layer is not None:
        if layer_types == [None]:
            raise ValueError(
                f"scaling gives rope parameters per layer type {sorted(req.per_layer)}, but "
                f"{where} holds one set for every layer; pass one flat dict"
            )
        unknown = sorted(set(req.per_layer) - {str(lt) for lt in layer_types})
        if unknown:
            raise ValueError(
                f"scaling names layer type(s) {unknown} that {where} does not have (it has "
                f"{[lt for lt in layer_types if lt is not None]})"
            )
        return {lt: req.per_layer.get(str(lt)) for lt in layer_types}
    if layer_types == [None]:
        return {None: req.params}
    targets = {lt: None if lt in _WINDOWED else req.params for lt in layer_types}
    if all(p is None for p in targets.values()):
        raise ValueError(
            f"{where} has only windowed layer types {layer_types}, which a flat scaling leaves "
            "as they are; pass a dict per layer type to scale them"
        )
    return targets


def _carried(
    new: Dict[str, Any], current: Mapping[str, Any], config: Any, key: str, where: str
) -> None:
    """`key` of the module's own parameters (or its config's, as
    transformers fills them in) carried into `new`; a ValueError when the
    request states another value (these choose which features rotate and
    how, not the context)."""
    mine = current.get(key)
    if key == "partial_rotary_factor" and mine is None:
        mine = config_value(config, key)
        if mine is None and key in new:
            mine = 1.0
    if key in new and new[key] != mine:
        raise ValueError(
            f"{where}: scaling[{key!r}] = {new[key]!r} differs from the model's {mine!r}; "
            f"scaling changes the context extension, not {key}"
        )
    if mine is not None:
        new[key] = copy.deepcopy(mine)


def scaled_config(
    config: Any, layer_types: List[Optional[str]], req: Request, where: str
) -> Scaled:
    """`config` (a rotary module's) copied, its rope parameters the request's
    for the layer types it scales, inferred as transformers infers them."""
    targets = _targets(req, layer_types, where)
    mpe = config_value(config, "max_position_embeddings")
    own_trained = config_value(config, _TRAINED)
    if req.from_config and req.lengths.get("max_position_embeddings") is not None:
        mpe = req.lengths["max_position_embeddings"]
    params: Dict[Optional[str], Dict[str, Any]] = {}
    inferred: Dict[Optional[str], List[str]] = {}
    kept: List[str] = []
    trained_attr = own_trained
    for lt, asked in targets.items():
        label = where if lt is None else f"{where}, layer type {lt!r}"
        current = _current(config, lt, label)
        if asked is None:
            kept.append(str(lt))
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            own = rope_scaling.read(
                {k: val for k, val in current.items() if k not in _SECTIONS}
            ).family
        if own.whole_head or own.rows:
            raise ValueError(
                f"{label}: its rope_type {own.name!r} rotates the whole head by its own rule; "
                "another family would change which features rotate, so it is not scaled"
            )
        new = copy.deepcopy(asked)
        notes: List[str] = []
        if new.get("rope_theta") is None:
            theta = current.get("rope_theta")
            if theta is None:
                theta = config_value(config, "rope_theta")
            if theta is None:
                raise ValueError(f"{label}: its config states no rope_theta to keep")
            new["rope_theta"] = theta
            notes.append(f"rope_theta {theta:g} (the model's)")
        for key in ("partial_rotary_factor", *_SECTIONS):
            _carried(new, current, config, key, label)
        family = new["rope_type"]
        if family in ("yarn", "llama3", "longrope"):
            if req.from_config:
                trained_attr = new[_TRAINED] if own_trained is not None else None
            elif own_trained is not None:
                if new.get(_TRAINED) is not None and new[_TRAINED] != own_trained:
                    raise ValueError(
                        f"{label}: scaling['{_TRAINED}'] = {new[_TRAINED]!r}, but the model's "
                        f"config has its own {_TRAINED} = {own_trained!r}, which transformers "
                        "reads before the rope dict's; pass it as the config's value"
                    )
                if new.get(_TRAINED) is None:
                    notes.append(
                        f"{_TRAINED} {own_trained} (the config's own {_TRAINED}, which "
                        "transformers reads first)"
                    )
                new[_TRAINED] = own_trained
            elif new.get(_TRAINED) is None:
                if mpe is None:
                    raise ValueError(
                        f"{label}: rope_type {family!r} requires the key {_TRAINED!r} (the "
                        "config has no max_position_embeddings to infer it from)"
                    )
                said = current.get(_TRAINED)
                hint = f"; its rope parameters said {said}" if said not in (None, mpe) else ""
                new[_TRAINED] = mpe
                notes.append(f"{_TRAINED} {mpe} (the model's max_position_embeddings{hint})")
        if family == "dynamic":
            if mpe is None:
                raise ValueError(
                    f"{label}: rope_type 'dynamic' grows past max_position_embeddings, which "
                    "the config does not state"
                )
            whose = "the config's" if req.from_config else "the model's"
            notes.append(f"growing past max_position_embeddings {mpe} ({whose})")
        if req.fixed:
            keys = " and ".join(f"{key} {new[key]:g}" for key in req.fixed)
            notes.append(f"{keys} ({next(iter(req.fixed.values()))})")
        params[lt] = new
        inferred[lt] = notes
    # the copy: the module's config with the new rope parameters
    rope = config_value(config, "rope_parameters")
    if layer_types == [None]:
        new_rope: Any = params[None]
    else:
        new_rope = {
            lt: copy.deepcopy(params[lt]) if lt in params else copy.deepcopy(rope.get(lt))
            for lt in (rope if isinstance(rope, Mapping) else layer_types)
        }
    scaled = copy.deepcopy(config)
    _set(scaled, "rope_parameters", copy.deepcopy(new_rope))
    if req.from_config and mpe is not None:
        _set(scaled, "max_position_embeddings", mpe)
    if trained_attr is not None and trained_attr != own_trained:
        _set(scaled, _TRAINED, trained_attr)
    return Scaled(scaled, params, kept, inferred)


def _set(config: Any, key: str, value: Any) -> None:
    if isinstance(config, dict):
        config[key] = value
    else:
        setattr(config, key, value)


def described(
    scaled: Scaled, layer_type: Optional[str], rotary_dim: int, head_dim: int
) -> List[str]:
    """What the family's defaults make of the parameters (attention factor,
    betas, LongRoPE's factor and switch), and the rotary dimension used."""
    params = scaled.params[layer_type]
    family = params["rope_type"]
    notes = list(scaled.inferred[layer_type])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rope = rope_scaling.read(scaled.config, layer_type)
        base = float(rope.params["rope_theta"])
        _, attention = rope_scaling.frequencies(rotary_dim, base, rope, None)
    if family == "yarn":
        if params.get("attention_factor") is None:
            how = (
                "mscale / mscale_all_dim"
                if params.get("mscale") and params.get("mscale_all_dim")
                else "0.1 ln(factor) + 1"
            )
            notes.append(f"attention_factor {attention:.6g} ({how}, on cos and sin)")
        for key, default in (("beta_fast", 32), ("beta_slow", 1)):
            if not params.get(key):
                notes.append(f"{key} {default}")
    if family == "longrope":
        trained = rope.params[_TRAINED]
        if params.get("factor") is None and params.get("attention_factor") is None:
            factor = rope.params["max_position_embeddings"] / trained
            notes.append(f"factor {factor:g} (max_position_embeddings / {_TRAINED})")
        if params.get("attention_factor") is None:
            notes.append(f"attention_factor {attention:.6g} (sqrt(1 + ln(factor) / ln({trained})))")
        notes.append(f"long_factor once positions pass {trained}, short_factor below")
    fraction = params.get("partial_rotary_factor")
    dims = f"rotary dim {rotary_dim} of head_dim {head_dim}"
    if fraction is not None and fraction != 1:
        dims += f" (partial_rotary_factor {fraction:g}, the model's)"
    notes.append(dims)
    return notes


def attention_scale(params: Any, base: float) -> Optional[float]:
    """The attention scale of the models whose attention multiplies by
    YaRN's ``mscale`` squared (DeepSeek-V2/V3's ``yarn_apply_mscale``):
    `base` (``qk_head_dim ** -0.5``) times ``(0.1 mscale_all_dim ln(factor)
    + 1) ** 2`` for a rope dict other than the default that states
    ``mscale_all_dim`` (and factor > 1), else `base`; None where the dict
    states ``mscale_all_dim`` without a factor."""
    if not isinstance(params, Mapping) or params.get("rope_type", "default") == "default":
        return base
    m_all = params.get("mscale_all_dim", 0)
    if not m_all:
        return base
    factor = params.get("factor")
    if factor is None:
        return None
    v.real(factor, "scaling['factor']")
    mscale = 1.0 if factor <= 1 else 0.1 * m_all * math.log(factor) + 1.0
    return base * mscale * mscale
