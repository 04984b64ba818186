"""The position encodings of the lab, chosen by name, and where each plugs in.

An encoding is named by a short string or a dict (:func:`encoding` reads
both into an :class:`Encoding`):

- ``"nope"``: no position information (causal attention alone);
- ``"sinusoid"`` (Vaswani et al. 2017), ``"learned"`` (a table, initialised
  ``"random"``, ``"sinusoid"`` or from any table
  :func:`posenc.probe.load_position_embeddings` reads: ``"learned:gpt2"``,
  ``"learned:table.npy"``; ``"learned:sinusoid:freeze"`` keeps it fixed),
  ``"complex_order"`` (Wang et al. 2020): absolute, added to the input (the
  complex-order embedding replaces the token embedding: its real and
  imaginary parts side by side);
- ``"rope"`` (Su et al. 2021) and its variants: ``"rope:xpos"`` (Sun et al.
  2022), ``"rope:p:0.75"`` (p-RoPE, Barbero et al. 2025: the fastest 75 % of
  the frequencies rotate, the rest do not), ``"rope:yarn:4"``,
  ``"rope:linear:4"``, ``"rope:ntk:4"``, ``"rope:dynamic:4"``,
  ``"rope:llama3:8"``, ``"rope:ntk_alpha:2"``, ``"rope:resonance"`` (the
  scaling families, as :func:`posenc.hf.patch` spells them), ``"rope:base=500"``:
  q and k rotated;
- ``"alibi"`` (Press et al. 2022), ``"t5"`` (Raffel et al. 2020),
  ``"kerple_log"``, ``"kerple_power"`` (Chi et al. 2022), ``"sandwich"`` (Chi
  et al. 2023), ``"fire"`` (Li et al. 2023), ``"cope"`` (Golovneva et al.
  2024), ``"xl"`` (Dai et al. 2019): added to the attention scores.

Options follow the name after colons, ``key=value`` or the short words above
(``"t5:num_buckets=16:max_distance=64"``), and a training-time position
sampler after a plus: ``"sinusoid+randomized"`` (Ruoss et al. 2023),
``"rope+pose"`` (Zhu et al. 2023), ``"alibi+randomized:512"`` (positions drawn
from ``range(512)``; without a number, from the longest evaluation length).
The sampler changes the positions of the training batches only: evaluation
runs at positions ``0 .. n-1``.  The dict form holds the same:
``{"name": "rope", "scaling": "yarn:4", "sampler": "pose", "max_len": 256}``.

A RoPE scaling family is a context extension: by default the model trains
with plain RoPE and the family applies at evaluation
(``original_max_position_embeddings`` = the training length), as one would
extend a trained model; ``scaling_at="always"`` trains with it too.  p-RoPE
is an encoding of its own and applies always.

Parameters of the score encodings (KERPLE's, Sandwich's, FIRE's, CoPE's,
Transformer-XL's projection and biases) belong to each attention layer; T5's
bucket table is shared by the layers, as T5 shares it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .. import _hf_scaling
from .. import _validate as v

__all__ = ["ENCODINGS", "SAMPLERS", "Encoding", "encoding"]

#: The encodings of the lab, by name.
ENCODINGS: Tuple[str, ...] = (
    "nope",
    "sinusoid",
    "learned",
    "complex_order",
    "rope",
    "alibi",
    "t5",
    "kerple_log",
    "kerple_power",
    "sandwich",
    "fire",
    "cope",
    "xl",
)

#: The training-time position samplers (:mod:`posenc.positions`).
SAMPLERS: Tuple[str, ...] = ("randomized", "pose")

#: Where each encoding plugs in: ``"none"``, ``"input"`` (added to the token
#: embeddings), ``"embedding"`` (the token embedding itself), ``"rotary"``
#: (q and k rotated), ``"scores"`` (added to the attention logits).
KINDS: Dict[str, str] = {
    "nope": "none",
    "sinusoid": "input",
    "learned": "input",
    "complex_order": "embedding",
    "rope": "rotary",
    "alibi": "scores",
    "t5": "scores",
    "kerple_log": "scores",
    "kerple_power": "scores",
    "sandwich": "scores",
    "fire": "scores",
    "cope": "scores",
    "xl": "scores",
}

# the RoPE families spelt after "rope:" (posenc.hf.patch's short forms)
_ROPE_FORMS = tuple(_hf_scaling.SHORT_FORMS)
_SCALING_AT = ("eval", "always")


def _positive(value: Any, name: str) -> float:
    return float(v.real(value, name, positive=True))


def _count(minimum: int) -> Callable[[Any, str], int]:
    return lambda value, name: v.integer(value, name, minimum=minimum)


def _flag(value: Any, name: str) -> bool:
    return v.flag(value, name)


def _fraction(value: Any, name: str) -> float:
    p = float(v.real(value, name))
    if not 0.0 < p <= 1.0:
        raise ValueError(f"{name} must be in (0, 1] (the share of the frequencies that rotate), "
                         f"got {value!r}")  # fmt: skip
    return p


def _init(value: Any, name: str) -> Any:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{name} must name 'random', 'sinusoid' or a table, got ''")
        return value.strip()
    if isinstance(value, bool) or value is None:
        raise TypeError(f"{name} must be 'random', 'sinusoid', a table or a path, not {value!r}")
    return value  # an array, a tensor or a path: the module reads it


def _scaling(value: Any, name: str) -> Any:
    if isinstance(value, str):
        return dict(_hf_scaling.request(value).params or {})
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{name} must be a short form ('yarn:4') or a rope dict, not {value!r}")


def _choice(choices: Tuple[str, ...]) -> Callable[[Any, str], str]:
    return lambda value, name: v.choice(value, name, choices)


#: Each encoding's options: {key: checker(value, name) -> value}.
_OPTIONS: Dict[str, Dict[str, Callable[[Any, str], Any]]] = {
    "nope": {},
    "sinusoid": {"base": _positive},
    "learned": {"init": _init, "freeze": _flag},
    "complex_order": {},
    "rope": {
        "base": _positive,
        "scaling": _scaling,
        "scaling_at": _choice(_SCALING_AT),
        "xpos": _flag,
        "xpos_scale_base": _positive,
        "p": _fraction,
    },
    "alibi": {"max_bias": _positive},
    "t5": {"num_buckets": _count(2), "max_distance": _count(1)},
    "kerple_log": {},
    "kerple_power": {},
    "sandwich": {},
    "fire": {"hidden": _count(1)},
    "cope": {"max_positions": _count(1)},
    "xl": {},
}


@dataclass(frozen=True)
class Encoding:
    """A position encoding of the lab: its name, options and position sampler.

    Attributes
    ----------
    name : str
        One of :data:`ENCODINGS`.
    options : dict
        Its options, checked (see the module's text).
    sampler : {"randomized", "pose"} or None
        The training-time position sampler.
    max_len : int or None
        The sampler's range (``randomized``: positions drawn from
        ``range(max_len)``; ``pose``: its target length); None: the longest
        evaluation length.
    label : str
        What tables and plots call it: the string it was read from, or one
        made from the dict.
    """

    name: str
    options: Dict[str, Any] = field(default_factory=dict)
    sampler: Optional[str] = None
    max_len: Optional[int] = None
    label: str = ""

    @property
    def kind(self) -> str:
        """Where it plugs in (:data:`KINDS`)."""
        return KINDS[self.name]

    @property
    def takes_positions(self) -> bool:
        """Whether position ids change what the model computes (not for
        NoPE, nor for CoPE, which counts its positions from the gates)."""
        return self.name not in ("nope", "cope")

    def option(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)

    def to_dict(self) -> Dict[str, Any]:
        """Plain values for JSON (a table given as an array is said by its shape)."""
        options = {}
        for k, value in sorted(self.options.items()):
            if hasattr(value, "shape") and not isinstance(value, (str, bytes)):
                value = f"<table of shape {tuple(value.shape)}>"
            options[k] = value
        return {
            "name": self.name,
            "label": self.label,
            "options": options,
            "sampler": self.sampler,
            "max_len": self.max_len,
        }


def _value(text: str) -> Any:
    """A value of a ``key=value`` option: a bool, an int, a float or the text."""
    low = text.strip().lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    try:
        return int(low)
    except ValueError:
        pass
    try:
        return float(low)
    except ValueError:
        return text.strip()


def _rope_words(words: List[str], spec: str) -> Dict[str, Any]:
    """The options of ``rope:...`` from its words."""
    options: Dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i].strip().lower()
        if "=" in word:
            key, _, value = words[i].partition("=")
            options[key.strip().lower()] = _value(value)
        elif word == "xpos":
            options["xpos"] = True
        elif word in ("p", "p-rope", "prope"):
            if i + 1 >= len(words):
                raise ValueError(
                    f"encoding {spec!r}: 'p' takes the fraction after it ('rope:p:0.75')"
                )
            options["p"] = _value(words[i + 1])
            i += 1
        elif word in _ROPE_FORMS:
            if "scaling" in options:
                raise ValueError(f"encoding {spec!r} names two scaling families")
            number = _hf_scaling.SHORT_FORMS[word][1]
            if number is not None:
                if i + 1 >= len(words):
                    raise ValueError(
                        f"encoding {spec!r}: {word!r} takes its {number} after it ('rope:{word}:4')"
                    )
                options["scaling"] = f"{word}:{words[i + 1].strip()}"
                i += 1
            else:
                options["scaling"] = word
        else:
            raise ValueError(
                f"encoding {spec!r}: {words[i]!r} is not a RoPE option (xpos, p:FRACTION, a "
                f"scaling family of {', '.join(_ROPE_FORMS)} with its number, or key=value)"
            )
        i += 1
    return options


def _words(name: str, words: List[str], spec: str) -> Dict[str, Any]:
    """The options of a short string's words after the name."""
    if name == "rope":
        return _rope_words(words, spec)
    options: Dict[str, Any] = {}
    for word in words:
        if "=" in word:
            key, _, value = word.partition("=")
            options[key.strip().lower()] = _value(value)
        elif name == "learned" and word.strip().lower() == "freeze":
            options["freeze"] = True
        elif name == "learned" and "init" not in options:
            options["init"] = word.strip()
        else:
            raise ValueError(
                f"encoding {spec!r}: {word!r} is not an option of {name!r} "
                f"({', '.join(_OPTIONS[name]) or 'it takes none'}; as key=value)"
            )
    return options


def _checked(name: str, options: Mapping[str, Any], where: str) -> Dict[str, Any]:
    allowed = _OPTIONS[name]
    out: Dict[str, Any] = {}
    for key, value in options.items():
        if key not in allowed:
            raise ValueError(
                f"encoding {where}: {key!r} is not an option of {name!r} "
                f"({', '.join(sorted(allowed)) or 'it takes none'})"
            )
        out[key] = allowed[key](value, f"{name} option {key!r}")
    if name == "rope":
        if "p" in out and "scaling" in out:
            raise ValueError(
                f"encoding {where}: p-RoPE ('p') and a scaling family are two RoPE families; "
                "give one"
            )
        if "p" in out and "scaling_at" in out and out["scaling_at"] != "always":
            raise ValueError(f"encoding {where}: p-RoPE applies always (scaling_at='always')")
        if "scaling_at" in out and "scaling" not in out:
            raise ValueError(f"encoding {where}: scaling_at without a scaling family")
        scaling = out.get("scaling")
        if scaling is not None and scaling.get("rope_type", scaling.get("type")) in (
            None,
            "default",
        ):
            del out["scaling"]  # "rope:none": plain RoPE
            out.pop("scaling_at", None)
    return out


def _sampler(text: str, spec: str) -> Tuple[str, Optional[int]]:
    name, colon, number = text.strip().lower().partition(":")
    if name not in SAMPLERS:
        raise ValueError(
            f"encoding {spec!r}: {name!r} is not a position sampler ({', '.join(SAMPLERS)})"
        )
    if not colon:
        return name, None
    try:
        max_len = int(number)
    except ValueError:
        raise ValueError(
            f"encoding {spec!r}: the sampler's range after {name}: must be a whole number, "
            f"got {number!r}"
        ) from None
    return name, v.integer(max_len, "max_len", minimum=1)


def _name(text: Any, where: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"encoding {where}: the name must be a string, not {type(text).__name__}")
    name = text.strip().lower()
    if name not in KINDS:
        raise ValueError(
            f"encoding {where}: {text!r} is not an encoding of the lab ({', '.join(ENCODINGS)})"
        )
    return name


def encoding(spec: Any) -> Encoding:
    """An :class:`Encoding` from a short string, a dict or an Encoding.

    Parameters
    ----------
    spec : str, dict or Encoding
        ``"name[:option...][+sampler[:max_len]]"`` (``"rope:yarn:4"``,
        ``"learned:sinusoid:freeze"``, ``"alibi+randomized:256"``), or
        ``{"name": ..., "sampler": ..., "max_len": ..., "label": ..., **options}``.

    Raises
    ------
    TypeError, ValueError
        An unknown name, option or sampler, or an option's value out of
        range, naming it.

    Examples
    --------
    >>> from posenc.lab import encoding
    >>> e = encoding("rope:yarn:4+randomized:256")
    >>> e.name, e.options["scaling"]["rope_type"], e.sampler, e.max_len
    ('rope', 'yarn', 'randomized', 256)
    """
    if isinstance(spec, Encoding):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        body, plus, rest = text.partition("+")
        words = body.split(":")
        name = _name(words[0], repr(spec))
        options = _checked(name, _words(name, words[1:], spec), repr(spec))
        sampler, max_len = _sampler(rest, spec) if plus else (None, None)
        label = text
    elif isinstance(spec, Mapping):
        given = dict(spec)
        if "name" not in given:
            raise ValueError(f"encoding {given!r} has no 'name'")
        name = _name(given.pop("name"), repr(spec))
        sampler = given.pop("sampler", None)
        max_len = given.pop("max_len", None)
        label = given.pop("label", None)
        if sampler is not None:
            sampler = v.choice(sampler, "sampler", SAMPLERS)
        if max_len is not None:
            max_len = v.integer(max_len, "max_len", minimum=1)
        options = _checked(name, given, repr(spec))
        if label is None:
            shown = ":".join(f"{k}={_shown(options[k])}" for k in sorted(options))
            label = name + (f":{shown}" if shown else "") + (f"+{sampler}" if sampler else "")
            if max_len is not None:
                label += f":{max_len}"
        elif not isinstance(label, str) or not label.strip():
            raise TypeError(f"encoding {spec!r}: label must be a non-empty string")
    else:
        raise TypeError(
            "an encoding must be a string ('rope:yarn:4'), a dict ({'name': 'rope', ...}) or an "
            f"Encoding, not {type(spec).__name__}"
        )
    if sampler is None and max_len is not None:
        raise ValueError(f"encoding {spec!r}: max_len without a sampler")
    if sampler is not None and name in ("nope", "cope"):
        raise ValueError(
            f"encoding {spec!r}: {name} takes no position ids "
            f"({'it has no positions' if name == 'nope' else 'it counts its own from the gates'}),"
            f" so the {sampler} sampler would change nothing"
        )
    return Encoding(name=name, options=options, sampler=sampler, max_len=max_len, label=label)


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        kind = value.get("rope_type", value.get("type", "?"))
        number = value.get("factor", value.get("alpha"))
        return f"{kind}" + ("" if number is None else f"/{number:g}")
    if hasattr(value, "shape") and not isinstance(value, str):
        return f"table{tuple(value.shape)}"
    return str(value)


def rope_scaling(enc: Encoding, train_length: int) -> Tuple[Optional[Dict[str, Any]], bool]:
    """The rope dict of a RoPE encoding and whether it applies in training
    (``(None, True)`` for plain RoPE), the lengths filled in: the family's
    ``original_max_position_embeddings`` is the training length."""
    if enc.name != "rope":
        raise ValueError(f"{enc.label!r} is not a RoPE encoding")
    p = enc.option("p")
    if p is not None:
        return {"rope_type": "proportional", "partial_rotary_factor": p}, True
    scaling = enc.option("scaling")
    if scaling is None:
        return None, True
    params = dict(scaling)
    params.setdefault("original_max_position_embeddings", int(train_length))
    return params, enc.option("scaling_at", "eval") == "always"


def head_dim_of(dim: int, heads: int) -> int:
    """The head dimension, ``dim // heads``, checked."""
    if dim % heads:
        raise ValueError(f"dim ({dim}) must be a multiple of heads ({heads})")
    return dim // heads


def scale_of(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


#: The posenc.torch module each encoding is built on (where it has one).
MODULES: Dict[str, str] = {
    "sinusoid": "SinusoidalEmbedding",
    "learned": "LearnedPositionEmbedding",
    "complex_order": "ComplexOrderEmbedding",
    "t5": "T5RelativeBias",
    "kerple_log": "KerpleBias",
    "kerple_power": "KerpleBias",
    "sandwich": "SandwichBias",
    "fire": "FireBias",
    "cope": "CoPE",
    "xl": "XLPositionTerm",
}


def torch_module(name: str) -> Any:
    """The posenc.torch class encoding `name` is built on (:data:`MODULES`)."""
    from .. import torch as pt

    return {
        "sinusoid": pt.SinusoidalEmbedding,
        "learned": pt.LearnedPositionEmbedding,
        "complex_order": pt.ComplexOrderEmbedding,
        "t5": pt.T5RelativeBias,
        "kerple_log": pt.KerpleBias,
        "kerple_power": pt.KerpleBias,
        "sandwich": pt.SandwichBias,
        "fire": pt.FireBias,
        "cope": pt.CoPE,
        "xl": pt.XLPositionTerm,
    }[name]
