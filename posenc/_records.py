"""What the torch and JAX adapters know of each routed function, written once.

One :class:`Record` per public function that ``posenc._interop.accepts_tensors``
wraps (and one for ``t5_bias_table_grad``, t5_bias's backward, which the
adapters call as they call a routed function): which arguments it writes
into, which are indices, which 0-d arguments may be traced, with respect
to which it is differentiable and by which rule of :mod:`posenc._grad`,
and the shape of its result where the arguments alone say it.

The registry beside them holds the NumPy functions themselves, by name:
``accepts_tensors`` registers each one as it wraps it, and the adapters look a
function up here (:func:`function`) instead of importing the public
modules, which import ``posenc._interop`` themselves.  The one function
that no public function routes to, ``t5_bias_table_grad``, is imported
from the core layer (posenc._t5_bias).  Nothing here imports a public
module.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from . import _t5_bias
from ._dtypes import is_bfloat16

#: the indices of the position functions: read without their gradient
_POSITIONS = frozenset({"positions"})
_Q_OFFSET = frozenset({"q_offset"})


@dataclass(frozen=True)
class Record:
    """The adapters' facts about one routed function."""

    name: str
    #: the array arguments of its torch operator, in the operator's order
    #: (empty: no operator, torch.compile runs it eagerly at a graph break)
    arrays: Tuple[str, ...] = ()
    #: arguments it writes into in place
    sinks: Tuple[str, ...] = ()
    #: integer indices: read without a gradient, which they never get
    indexes: frozenset = frozenset()
    #: 0-d arguments that may be traced (values that decide no shape)
    traced_scalars: frozenset = frozenset()
    #: 0-d arguments that may be traced when they are floats (an integer
    #: there is a length)
    float_scalars: frozenset = frozenset()
    #: the arguments it is differentiable with respect to, in order
    differentiable: Tuple[str, ...] = ()
    #: the name of its backward rule in posenc._grad
    backward: Optional[str] = None
    #: the shape of its result depends on the values of its arguments
    value_shaped: bool = False
    #: the shape of its result from its arguments (see the rules below)
    shape: Optional[Callable[..., tuple]] = None
    #: whose dtype the result has: an array argument, or "dtype" (float32 if None)
    dtype_from: Optional[str] = None
    #: for a function no wrapper registers: the routed function beside it
    beside: Optional[str] = None
    #: how many real arrays its result is: a tuple of them (a complex array
    #: counts as two, its real and imaginary parts); with more than one its
    #: backward rule gets a tuple, the gradient of each (None for zero)
    outputs: int = 1


# ---------------------------------------------------------------- result shapes
#
# From the arguments as the NumPy function takes them (arrays, or tensors of
# a torch trace whose sizes may be symbolic), and perhaps `found`, the shape
# of a call on stand-ins; they may raise where the arguments do not say
# (the caller then finds out otherwise).


def _lengths(a):
    q_len = a["q_len"]
    k_len = a.get("k_len")
    return q_len, q_len if k_len is None else k_len


def _sinusoid_shape(a, found=None):
    positions = a["positions"]
    shape = tuple(getattr(positions, "shape", ()))
    return (shape if shape else (positions,)) + (a["dim"],)


def _alibi_shape(a, found=None):
    return (a["n_heads"], *_lengths(a))


def _t5_shape(a, found=None):
    return (a["table"].shape[1], *_lengths(a))


def _t5_grad_shape(a, found=None):
    return (a["num_buckets"], a["grad"].shape[-3])


def _heads_shape(of):
    """(heads, q_len, k_len), the heads counted by the first axis of `of`."""

    def shape(a, found=None):
        return (a[of].shape[0], *_lengths(a))

    return shape


def _logits_shape(a, found=None):
    return tuple(a["attn_logits"].shape)


def _rope_shape(a, found=None):
    return tuple(a["x"].shape)


def _complex_order_shape(a, found=None):
    return (*a["token_ids"].shape, a["amplitude"].shape[1])


def _cos_sin_shape(a, found=None):
    """Known from the positions' axes (a row axis of M-RoPE's left out) and
    the last axis of `found`, the shape of a call on stand-ins."""
    if found is None:
        raise TypeError("rope_cos_sin's last axis is known from a call")
    positions = a["positions"]
    lead = tuple(getattr(positions, "shape", (positions,)))
    return lead[len(lead) - len(found) + 1 :] + tuple(found[-1:])


# ---------------------------------------------------------------- the records


def _relative(name, differentiable, indexes=(), traced=()):
    """A term of posenc.relative: its operator takes the differentiable
    arrays and indices; scores= gets the incoming gradient as it is."""
    return Record(
        name,
        arrays=differentiable + indexes,
        sinks=("scores",) if "scores" in differentiable else (),
        indexes=frozenset(indexes),
        traced_scalars=frozenset(traced),
        differentiable=differentiable,
        backward="relative",
    )


def _bias(name, arrays=(), backward="scores", **fields):
    """A bias added into scores= (which gets the incoming gradient as it
    is) or written into out=, with q_offset traced: its operator takes
    `arrays`, and unless its rule is the pass-through "scores" it is
    differentiable with respect to them too.  `fields`: its other
    Record fields (shape, and sinks and dtype_from where they differ)."""
    fields.setdefault("sinks", ("scores", "out"))
    fields.setdefault("dtype_from", "dtype")
    differentiable = ("scores",)
    if backward != "scores":
        differentiable = tuple(dict.fromkeys(arrays + differentiable))
    return Record(
        name,
        arrays,
        traced_scalars=_Q_OFFSET,
        differentiable=differentiable,
        backward=backward,
        **fields,
    )


_RECORDS = (
    Record(
        "apply_rope",
        arrays=("x", "positions"),
        sinks=("out",),
        indexes=_POSITIONS,
        traced_scalars=frozenset({"offset", "positions"}),
        differentiable=("x",),
        backward="rope",
        shape=_rope_shape,
        dtype_from="x",
    ),
    Record(
        "rope_cos_sin",
        arrays=("positions",),
        indexes=_POSITIONS,
        float_scalars=_POSITIONS,
        shape=_cos_sin_shape,
    ),
    Record("rope_frequencies"),
    Record(
        "sinusoid",
        arrays=("positions",),
        sinks=("out",),
        indexes=_POSITIONS,
        float_scalars=_POSITIONS,
        shape=_sinusoid_shape,
        dtype_from="dtype",
    ),
    _bias("alibi_bias", ("slopes",), shape=_alibi_shape),
    Record("alibi_key_bias"),
    Record("alibi_slopes"),
    _bias("t5_bias", ("table",), "t5", shape=_t5_shape, dtype_from="table"),
    Record(
        "t5_bias_table_grad",
        arrays=("grad",),
        traced_scalars=_Q_OFFSET,
        differentiable=("grad",),
        backward="t5_table",
        shape=_t5_grad_shape,
        beside="t5_bias",
    ),
    Record(
        "relative_position_bucket",
        indexes=frozenset({"relative_position"}),
        traced_scalars=frozenset({"relative_position"}),
    ),
    Record("relative_positions", traced_scalars=_Q_OFFSET),
    _relative("xl_position_term", ("q", "r", "bias", "scores"), traced=_Q_OFFSET),
    _relative("xl_content_bias", ("k", "bias", "scores")),
    _relative("tener_position_term", ("q", "k", "table", "v", "scores")),
    _relative("tener_scores", ("q", "k", "table", "u", "v")),
    _relative(
        "deberta_attention_bias", ("q", "k", "pos_key", "pos_query", "scores"), traced=_Q_OFFSET
    ),
    _relative("shaw_key_term", ("q", "rel_keys", "scores"), traced=_Q_OFFSET),
    _relative("shaw_value_term", ("weights", "rel_values"), traced=_Q_OFFSET),
    _relative("tupe_bias", ("pos_q", "pos_k", "rel_table", "scores")),
    _bias("kerple_bias", ("r1", "r2"), "host", shape=_heads_shape("r1")),
    _bias("sandwich_bias", shape=_alibi_shape),
    _bias(
        "fire_bias",
        ("w1", "b1", "w2", "b2", "c", "threshold"),
        "host",
        shape=_heads_shape("w2"),
    ),
    _bias(
        "cope_bias",
        ("query", "attn_logits", "pos_emb", "scores"),
        "host",
        shape=_logits_shape,
        sinks=("scores",),
        dtype_from=None,
    ),
    Record(
        "complex_order_embedding",
        arrays=("token_ids", "positions", "amplitude", "frequency", "phase"),
        indexes=frozenset({"token_ids"}),
        traced_scalars=frozenset({"token_ids", "positions"}),
        differentiable=("positions", "amplitude", "frequency", "phase"),
        backward="host",
        shape=_complex_order_shape,
        outputs=2,
    ),
    Record("xl_relative_table"),
    Record("tener_relative_table"),
    Record(
        "deberta_log_bucket",
        indexes=frozenset({"relative_pos"}),
        traced_scalars=frozenset({"relative_pos"}),
    ),
    Record("deberta_relative_positions", traced_scalars=_Q_OFFSET),
    Record("positions_from_cu_seqlens", value_shaped=True),
    Record("permute_rope_weight"),
    Record("attention_temperature", indexes=_POSITIONS, float_scalars=_POSITIONS),
    Record("mrope_position_ids", value_shaped=True),
    Record("vision_position_ids", value_shaped=True),
)

#: every record, by the function's name
RECORDS: Dict[str, Record] = {record.name: record for record in _RECORDS}

#: the relative terms: one operator and one backward for all of them
RELATIVE = tuple(r.name for r in _RECORDS if r.backward == "relative")


def record(name: str) -> Record:
    """The record of the function `name` (a bare one for a name without)."""
    found = RECORDS.get(name)
    return Record(name) if found is None else found


# ---------------------------------------------------------------- the registry

_FUNCTIONS: Dict[str, Callable[..., Any]] = {}

#: the functions with a record that no wrapper registers (see Record.beside)
_BESIDE: Dict[str, Callable[..., Any]] = {
    "t5_bias_table_grad": _t5_bias.t5_bias_table_grad,
}


def with_device(signature: inspect.Signature) -> inspect.Signature:
    """`signature` with a keyword-only ``device=None`` last (if it has none):
    the signature of a routed function as its callers see it."""
    if "device" in signature.parameters:
        return signature
    device = inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None)
    return signature.replace(parameters=[*signature.parameters.values(), device])


def register(fn: Callable[..., Any]) -> None:
    """Called by posenc._interop.accepts_tensors with each NumPy function it wraps."""
    _FUNCTIONS[fn.__name__] = fn


def function(name: str) -> Callable[..., Any]:
    """The NumPy function `name` (a routed one, or one beside it)."""
    fn = _FUNCTIONS.get(name)
    return _BESIDE[name] if fn is None else fn


def on_stand_ins(
    fn: Any, options: Dict[str, Any], arrays: Dict[str, Any], scalars: bool = False
) -> Any:
    """The function `fn` (a routed function's name, or a function) called
    with `options` and, for each of `arrays` (``{argument: (shape,
    dtype)}``), a stand-in that takes no memory: zeros, or ones where zeros
    are refused (KERPLE's positive parameters); scores=, which the function
    writes into, real zeros.  With `scalars`, a 0-d stand-in is a Python
    number (a bfloat16 one stays an array), as JAX's callbacks pass them."""
    if isinstance(fn, str):
        fn = function(fn)

    def stand_in(shape, dtype, fill):
        value = fill((), dtype)
        if scalars and shape == () and not (dtype.kind == "V" and is_bfloat16(dtype)):
            return value.item()
        return np.broadcast_to(value, shape)

    def stand_ins(fill):
        return {
            k: np.zeros(s, d) if k == "scores" else stand_in(s, d, fill)
            for k, (s, d) in arrays.items()
        }

    try:
        return fn(**options, **stand_ins(np.zeros))
    except (TypeError, ValueError):
        return fn(**options, **stand_ins(np.ones))
