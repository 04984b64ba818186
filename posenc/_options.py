"""The options of posenc's torch operators, as values an operator can take.

An operator (posenc._torch) takes a call's keyword options as JSON text
in which every number is a placeholder (``{"#f": i}`` for ``floats[i]``,
``{"#i": i}`` for ``ints[i]``; an int past int64 is written in the text
itself), and the numbers beside it.  Under
torch.compile the text is a constant of the graph and the numbers may be
symbolic; the encoder uses only string operations on constants, which
Dynamo traces.  A transformers config object becomes the JSON text of an
equivalent config.json dict (:func:`config_text`).
"""

from __future__ import annotations

import functools
import json

import numpy as np

from . import _dtypes, rope_scaling

_PLAIN = (type(None), bool, int, float, str, dict, list, tuple, np.generic)


def encode(options, int_type=int, float_type=float, plain=None):
    """``(spec, floats, ints)`` of a dict of keyword options.  `int_type`
    and `float_type`: a library's symbolic numbers, kept as they are;
    `plain`: its other values (a 0-d tensor, a dtype) as plain ones."""
    floats = []
    ints = []
    kinds = ((int, np.integer, int_type), (float, np.floating, float_type))
    return _encode(options, floats, ints, kinds, plain), floats, ints


def _quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _encode(value, floats, ints, kinds, plain):
    if plain is not None and not isinstance(value, _PLAIN):
        value = plain(value)
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, kinds[0]):
        value = int(value) if isinstance(value, np.integer) else value
        if type(value) is int and not -(2**63) <= value < 2**63:
            return str(value)  # past the operators' int64: in the text (JSON's ints are exact)
        ints.append(value)
        return '{"#i":' + str(len(ints) - 1) + "}"
    if isinstance(value, kinds[1]):
        floats.append(float(value) if isinstance(value, np.floating) else value)
        return '{"#f":' + str(len(floats) - 1) + "}"
    if isinstance(value, dict):
        parts = []
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"option keys must be strings, not {type(key).__name__}")
            parts.append(_quote(key) + ":" + _encode(value[key], floats, ints, kinds, plain))
        return "{" + ",".join(parts) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join([_encode(item, floats, ints, kinds, plain) for item in value]) + "]"
    raise TypeError(
        f"{type(value).__name__} cannot be an option of posenc's torch operators (numbers, "
        "strings, bools, None, and lists and dicts of them can)"
    )


@functools.lru_cache(maxsize=1024)
def _parsed(spec):
    return json.loads(spec, strict=False)


def _fill(value, floats, ints):
    if isinstance(value, dict):
        if len(value) == 1:
            if "#f" in value:
                return floats[value["#f"]]
            if "#i" in value:
                return ints[value["#i"]]
        return {key: _fill(item, floats, ints) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, floats, ints) for item in value]
    return value


def decode(spec, floats, ints):
    """The keyword options `encode` made `spec`, `floats` and `ints` of."""
    options = _fill(_parsed(spec), list(floats), list(ints))
    if options.pop("scaling_json", False):
        options["scaling"] = json.loads(options["scaling"])
    return options


def decode_numpy(spec, floats, ints):
    """`decode`'s options for a NumPy function (a dtype's name as NumPy's
    dtype, bfloat16 as posenc's bits; ``dtype=None`` as it is, which the
    function reads as its default, not as NumPy's float64), made once per
    distinct options (a
    compiled decoding loop asks for the same ones every step): a fresh dict
    each time, its values shared."""
    return dict(_decoded_numpy(spec, tuple(floats), tuple(ints)))


@functools.lru_cache(maxsize=256)
def _decoded_numpy(spec, floats, ints):
    options = decode(spec, floats, ints)
    name = options.get("dtype")
    if name is not None:  # None stays None: the function's default, as when left out
        options["dtype"] = _dtypes.BFLOAT16_BITS if name == "bfloat16" else np.dtype(name)
    return options


def carried(options, arrays):
    """`options` as an operator carries them (changed in place): a config
    object given as scaling= as the JSON text of its RoPE parameters
    (`decode` reads it back), the `arrays` among them (M-RoPE's sections,
    ...) as lists."""
    scaling = options.get("scaling")
    if scaling is not None and not isinstance(scaling, dict):
        options["scaling"] = config_text(scaling, options.pop("layer_type", None))
        options["scaling_json"] = True
    for key, value in options.items():
        if isinstance(value, arrays) and value.ndim > 0:
            options[key] = value.tolist()
    return options


def config_text(config, layer_type):
    """A transformers config object's RoPE parameters (for `layer_type`) as
    the JSON text of an equivalent config.json dict: what the operators can
    carry.  Under torch.compile this runs once, at trace time, on the object
    itself (guarded by its identity)."""
    rope = rope_scaling.read(config, layer_type)
    params = dict(rope.params)
    params["rope_type"] = rope.family.name
    params.pop("type", None)
    sections = rope_scaling.sections(rope)
    if sections is not None:  # M-RoPE's layout as the model reads it
        params["mrope_interleaved"] = sections[1]
    plain = {"rope_parameters": params, "head_dim": rope.head_dim}
    if rope.model_type is not None:
        plain["model_type"] = rope.model_type
    if rope.rope_interleave:
        plain["rope_interleave"] = True  # DeepSeek-V3's flag, read by the layout check
    try:
        return json.dumps(plain, default=_plain_number)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"scaling: the config's RoPE parameters are not plain values ({exc})"
        ) from None


def _plain_number(value):
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a number")


# What torch.compiler.assume_constant_result(config_text) does, without
# importing Dynamo (a second) before a compilation needs it: Dynamo then
# calls config_text on the real object and keeps the text as a constant.
config_text._dynamo_marked_constant = True  # type: ignore[attr-defined]
