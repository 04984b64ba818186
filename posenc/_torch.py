"""PyTorch tensors in, PyTorch tensors out (calls routed by posenc._interop).

posenc._interop sends here every call whose arguments include a torch object
(a tensor, a ``torch.dtype``, a ``torch.device``) or a ``device=`` keyword.
This module is imported only then, so ``import posenc`` never imports torch.

A call takes one of two paths:

- **Direct** (eager, nothing to differentiate): each CPU tensor is seen as a
  NumPy array without a copy (``Tensor.numpy()``; bfloat16 through
  :data:`posenc._dtypes.BFLOAT16_BITS`), the NumPy function runs, and the
  arrays it returns come back as tensors without a copy
  (``torch.from_numpy``).  ``out=`` and ``scores=`` tensors are written
  where they are; their version counters are bumped as a torch in-place op
  bumps them, so autograd notices if they had been saved for a backward.
- **Operators** ``torch.ops.posenc.*`` (``torch.library.custom_op``, with
  fake implementations and autograd formulas): under ``torch.compile`` and
  ``torch.export``, and in eager mode when autograd must record the call
  (a tensor that posenc differentiates requires grad while grad mode is
  on).  ``out=`` and ``scores=`` then become torch's own in-place
  ``copy_`` / ``add_`` of the operator's result, so torch's rules for
  in-place ops (version counters, leaves that require grad) apply as they
  are.  The eager direct path exists because the dispatcher's fixed cost
  (about 20 us a call) is more than a whole decoding-step rotation.

Gradients: ``apply_rope`` with respect to ``x`` (the backward is the inverse
rotation by the same positions and configuration, with xPos the inverse of
the other role's transform: exact, nothing saved but the positions);
``t5_bias`` with respect to ``table`` (the backward scatter-adds the
incoming gradient into the table by bucket); the relative terms with
respect to their arrays (posenc._relative_grad, one operator for all of
them); ``scores=`` of ``t5_bias``, ``alibi_bias`` and the relative terms
receives the incoming gradient unchanged.
Positions are indices: they get no gradient.  Any other tensor that
requires grad while grad mode is on is refused with a TypeError rather than
silently cut from the graph.  torch.func's transforms (grad, vmap, jacrev,
jvp, ...) are not supported: a tensor read inside one is refused with a
TypeError naming it and pointing to torch.autograd and leading batch axes.

Devices: posenc's kernels run on the CPU.  A tensor on any other device
(CUDA, MPS, meta) is refused with a TypeError naming the argument and the
device; nothing is copied between devices behind the caller's back.
"""

import functools
import inspect
import json
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

if not (hasattr(torch.library, "custom_op") and hasattr(torch.compiler, "is_compiling")):
    raise ImportError(
        f"posenc takes torch tensors from torch 2.4 on (torch {torch.__version__} is installed); "
        "with this one, hand it NumPy arrays (tensor.numpy()) and wrap its results "
        "(torch.from_numpy)"
    )

from torch.autograd.graph import increment_version  # noqa: E402

from . import _dtypes, _interop, _records, _validate
from . import _grad as _relative_grad
from . import relative as _relative
from . import rope_scaling as _rope_scaling
from ._dtypes import BFLOAT16_BITS

_RELATIVE_ARGS = {n: _records.RECORDS[n].differentiable for n in _records.RELATIVE}

# ---------------------------------------------------------------- dtypes

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: NumPy's dtype for each torch dtype that has one (bfloat16: posenc's bits)
_NUMPY_DTYPES = {
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.bfloat16: BFLOAT16_BITS,
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}

_TORCH_BY_NAME = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
_NAME_OF_TORCH = {dtype: name for name, dtype in _TORCH_BY_NAME.items()}

_Tensor = torch.Tensor
_BFLOAT16 = torch.bfloat16
_is_grad_enabled = torch.is_grad_enabled
_inference_mode = torch.is_inference_mode_enabled

# tensors read directly; any other class (FakeTensor, FunctionalTensor of a
# tracing mode, a subclass) goes to the operators when the function has one
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def numpy_dtype(value, name="dtype"):
    """A dtype argument for the NumPy functions: torch dtypes mapped to
    NumPy's (bfloat16 to posenc's bits dtype, so that no ml_dtypes is
    needed), bfloat16 by name likewise, anything else as it is."""
    if isinstance(value, torch.dtype):
        try:
            return _NUMPY_DTYPES[value]
        except KeyError:
            raise TypeError(
                f"{name} must be float16, bfloat16, float32 or float64, not {value}"
            ) from None
    if _dtypes.is_bfloat16_name(value):
        return BFLOAT16_BITS
    return value


def _dtype_name(value, name="dtype"):
    """A float dtype given any way (torch, NumPy, a name) as its name."""
    if isinstance(value, torch.dtype):
        if value in _NAME_OF_TORCH:
            return _NAME_OF_TORCH[value]
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, not {value}")
    if isinstance(value, str) and value in _TORCH_BY_NAME:
        return value
    if _dtypes.is_bfloat16_name(value):
        return "bfloat16"
    try:
        dt = np.dtype(value)
    except TypeError as exc:
        raise TypeError(
            f"{name} must be float16, bfloat16, float32 or float64, not {value!r}"
        ) from exc
    if _dtypes.is_bfloat16(dt):
        return "bfloat16"
    dt = dt.newbyteorder("=")
    if dt.name not in _TORCH_BY_NAME:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, not {dt}")
    return dt.name


def _numpy_dtype_of_name(name):
    return BFLOAT16_BITS if name == "bfloat16" else np.dtype(name)


# ---------------------------------------------------------------- tensors <-> arrays


def device_error(name, device):
    return TypeError(
        f"{name} is on device {device}: posenc computes on the CPU and does not copy tensors "
        f"between devices; move it with .cpu() (and the result back with .to({str(device)!r}))"
    )


def check_device(device, name="device"):
    """``device=``: None or the CPU (a string, a torch.device)."""
    if device is None:
        return
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, (str, int)) and not isinstance(device, bool):
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise TypeError(
                f"{name} must be a torch.device or a device name, not {device!r}"
            ) from exc
    else:
        raise TypeError(
            f"{name} must be a torch.device or a device name, not {type(device).__name__}"
        )
    if dev.type != "cpu":
        raise TypeError(
            f"{name} = {str(dev)!r}: posenc computes on the CPU and does not copy tensors between "
            f"devices; make the result on the CPU and move it with .to({str(dev)!r})"
        )


def transform_error(name, function):
    """The error for a tensor read inside a torch.func transform (grad,
    vmap, ...), which posenc's functions do not support: a tensor has no
    memory to read there (its data is the transform's), the operators'
    autograd formulas are torch.library's, which those transforms refuse,
    and they have no batching rules."""
    return TypeError(
        f"{name} is read inside a torch.func transform (grad, vmap, jacrev, jvp, ...), which "
        f"posenc.{function} does not support: for gradients use torch.autograd "
        "(loss.backward(), torch.autograd.grad), which it supports, and instead of vmap pass "
        "the batch as leading axes or call it in a loop"
    )


def _in_transform():
    """Whether a torch.func transform is running."""
    return torch._C._are_functorch_transforms_active()


def array(t, name, function=None):
    """The CPU tensor `t` seen as a NumPy array (no copy), detached."""
    if not t.is_cpu:
        raise device_error(name, t.device)
    if t.requires_grad:
        t = t.detach()
    try:
        if t.dtype is torch.bfloat16:
            return t.view(torch.int16).numpy().view(BFLOAT16_BITS)
        return t.numpy()
    except (TypeError, RuntimeError) as exc:
        if function is not None and _in_transform():
            raise transform_error(name, function) from None
        raise TypeError(
            f"{name}: a tensor of dtype {t.dtype} and layout {t.layout} cannot be read as an "
            f"array in place ({exc})"
        ) from None


def tensor(r):
    """The NumPy array `r` as a CPU tensor (no copy when torch can share it)."""
    dt = r.dtype
    if dt.kind == "V" and _dtypes.is_bfloat16(dt):
        return torch.from_numpy(np.ascontiguousarray(r).view(np.int16)).view(torch.bfloat16)
    if not (dt.isnative and r.flags.writeable):  # torch shares only writeable native memory
        r = np.array(r, dtype=dt.newbyteorder("="))
    return torch.from_numpy(r)


def _result(value):
    if isinstance(value, np.ndarray):
        return tensor(value)
    if isinstance(value, tuple):
        return tuple(_result(v) for v in value)
    return value


# ---------------------------------------------------------------- the direct path

#: arguments a function writes into in place
SINKS = ("out", "scores")
#: arguments that are indices: read without their gradient, which they do not get
INDEXES = frozenset({"positions", "relative_position", "relative_pos"})
#: the arguments with respect to which each function is differentiable
DIFFERENTIABLE = {
    "apply_rope": frozenset({"x"}),
    "t5_bias": frozenset({"table", "scores"}),
    "alibi_bias": frozenset({"scores"}),
    **{name: frozenset(args) for name, args in _RELATIVE_ARGS.items()},
}


class _UseOperators(Exception):
    """Raised while reading the arguments: this call needs the operators."""


class _Plan:
    """How one public function reads its arguments on the direct path."""

    __slots__ = ("fn", "name", "names", "grads", "builder", "sinks")

    def __init__(self, fn, signature):
        self.fn = fn
        self.name = fn.__name__
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.names = tuple(p.name for p in signature.parameters.values() if p.kind in positional)
        self.grads = DIFFERENTIABLE.get(self.name, frozenset())
        self.builder = BUILDERS.get(self.name)
        self.sinks = tuple(key for key in SINKS if key in signature.parameters)

    def arg(self, name, value, grad):
        """`value` of argument `name` as the NumPy function takes it."""
        if (  # the common cases, quickly
            type(value) is _Tensor
            and not (grad and value.requires_grad)
            and value.is_cpu
            and value.dtype is not _BFLOAT16
        ):
            try:
                if name in SINKS:
                    if not value.is_inference() or _inference_mode():
                        return value.numpy()
                elif value.ndim:
                    return value.numpy()
            except (TypeError, RuntimeError):  # a sparse tensor, ...: said below
                pass
        if isinstance(value, torch.Tensor):
            if type(value) not in _PLAIN_TENSORS and self.builder is not None:
                raise _UseOperators  # a tensor of a tracing mode (fake, functional)
            if value.requires_grad and grad:
                if name in self.grads or (name in SINKS and self.builder is not None):
                    if not value.is_cpu:
                        raise device_error(name, value.device)
                    raise _UseOperators
                if name not in INDEXES:
                    raise TypeError(
                        f"{name} requires grad, and posenc.{self.name} does not compute gradients "
                        f"with respect to {name}"
                        + (f" (only {', '.join(sorted(self.grads))})" if self.grads else "")
                        + f"; pass {name}.detach(), or call it under torch.no_grad()"
                    )
            if value.ndim == 0 and name not in SINKS:
                if not value.is_cpu:
                    raise device_error(name, value.device)
                try:
                    return value.item()  # a length, a scalar option: as a Python number
                except RuntimeError:
                    if _in_transform():
                        raise transform_error(name, self.name) from None
                    raise
            arr = array(value, name, self.name)
            if name in SINKS:
                if value.is_inference() and not torch.is_inference_mode_enabled():
                    raise ValueError(
                        f"{name} is an inference tensor: torch allows writing into it in place "
                        "only inside torch.inference_mode()"
                    )
            return arr
        if isinstance(value, torch.dtype):
            return numpy_dtype(value, name)
        if name == "dtype" and _dtypes.is_bfloat16_name(value):
            return BFLOAT16_BITS
        if isinstance(value, torch.Size):
            return tuple(value)
        return value

    def __call__(self, args, kwargs):
        grad = _is_grad_enabled()
        try:
            np_args = list(args)
            i = 0
            for value in args:
                if type(value) not in _PASS:
                    np_args[i] = self.arg(self.name_of(i), value, grad)
                i += 1
            np_kwargs = kwargs
            for key, value in kwargs.items():
                if type(value) not in _PASS or key == "device" or key == "dtype":
                    np_kwargs = self.kwargs(kwargs, grad)
                    break
        except _UseOperators:
            if _in_transform():
                self.refuse_transform(args, kwargs)
            return self.builder(*args, **kwargs)
        result = self.fn(*np_args, **np_kwargs)
        if type(result) is np.ndarray:
            if kwargs and self.sinks:
                for key in self.sinks:
                    if key in kwargs and result is np_kwargs[key]:
                        return _written(kwargs[key])
            return tensor(result)
        return _result(result)

    def refuse_transform(self, args, kwargs):
        """Under a torch.func transform, a TypeError naming the first
        argument that would take an operator's autograd formula
        (torch.library's, which the transforms refuse); in-place writes
        into out= and scores= are torch's own and are left to run."""
        for i, value in enumerate(args):
            self.refuse_traced(self.name_of(i), value)
        for key, value in kwargs.items():
            self.refuse_traced(key, value)

    def refuse_traced(self, name, value):
        if isinstance(value, torch.Tensor) and value.requires_grad and name in self.grads:
            if name not in SINKS or self.name in _RELATIVE_ARGS:
                raise transform_error(name, self.name)

    def name_of(self, i):
        return self.names[i] if i < len(self.names) else f"argument {i + 1}"

    def kwargs(self, kwargs, grad):
        np_kwargs = {}
        for key, value in kwargs.items():
            if key == "device":
                check_device(value)
            elif type(value) in _PASS and key != "dtype":
                np_kwargs[key] = value
            else:
                np_kwargs[key] = self.arg(key, value, grad)
        return np_kwargs


def _written(sink):
    """`sink` (out=, scores=) after the NumPy function wrote into it."""
    if isinstance(sink, torch.Tensor):
        increment_version(sink)  # as torch's in-place ops do
    return sink


# values handed to the NumPy functions as they are
_PASS = frozenset({int, float, str, bool, type(None)})


_PLANS: Dict[Any, _Plan] = {}


def call(fn, signature, args, kwargs):
    """`fn` (a NumPy function of posenc's) called with torch objects."""
    if torch.compiler.is_compiling():
        builder = BUILDERS.get(fn.__name__)
        if builder is None:
            # no operator for this function: a graph break, and it runs eagerly
            return torch.compiler.disable(_direct)(fn, signature, args, kwargs)
        return builder(*args, **kwargs)
    plan = _PLANS.get(fn)
    if plan is None:
        plan = _plan(fn, signature)
    return plan(args, kwargs)


def _direct(fn, signature, args, kwargs):
    return _plan(fn, signature)(args, kwargs)


def _plan(fn, signature):
    plan = _PLANS[fn] = _Plan(fn, signature)
    return plan


# ---------------------------------------------------------------- options of the operators
#
# The operators take their keyword options as JSON text in which every
# number is a placeholder ({"#f": i} for floats[i], {"#i": i} for ints[i]),
# and the numbers beside it.  Under torch.compile the text is a constant of
# the graph and the numbers may be symbolic; the encoder uses only string
# operations on constants, which Dynamo traces.


def encode(options):
    """``(spec, floats, ints)`` of a dict of keyword options."""
    floats = []
    ints = []
    return _encode(options, floats, ints), floats, ints


def _quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _encode(value, floats, ints):
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, np.bool_):
        return "true" if value else "false"
    if isinstance(value, torch.Tensor):
        if value.ndim != 0:
            raise TypeError(f"a tensor of shape {tuple(value.shape)} where a number was expected")
        value = value.item()
    if isinstance(value, (int, np.integer, torch.SymInt)) and not isinstance(value, bool):
        ints.append(value if isinstance(value, (int, torch.SymInt)) else int(value))
        return '{"#i":' + str(len(ints) - 1) + "}"
    if isinstance(value, (float, np.floating, torch.SymFloat)):
        floats.append(value if isinstance(value, (float, torch.SymFloat)) else float(value))
        return '{"#f":' + str(len(floats) - 1) + "}"
    if isinstance(value, torch.dtype):
        return _quote(_dtype_name(value))
    if isinstance(value, dict):
        parts = []
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"option keys must be strings, not {type(key).__name__}")
            parts.append(_quote(key) + ":" + _encode(value[key], floats, ints))
        return "{" + ",".join(parts) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join([_encode(item, floats, ints) for item in value]) + "]"
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


def config_text(config, layer_type):
    """A transformers config object's RoPE parameters (for `layer_type`) as
    the JSON text of an equivalent config.json dict: what the operators can
    carry.  Under torch.compile this runs once, at trace time, on the object
    itself (guarded by its identity)."""
    rope = _rope_scaling.read(config, layer_type)
    params = dict(rope.params)
    params["rope_type"] = rope.family.name
    params.pop("type", None)
    sections = _rope_scaling.sections(rope)
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


def _scaling_options(options, scaling, layer_type):
    """`scaling` and `layer_type` into `options`: a dict or None as they are,
    a config object as its JSON text."""
    if scaling is None or isinstance(scaling, dict):
        options["scaling"] = scaling
        options["layer_type"] = layer_type
    else:
        options["scaling"] = config_text(scaling, layer_type)
        options["scaling_json"] = True
        options["layer_type"] = None
    return options


# ---------------------------------------------------------------- checks shared by the operators


def _float_tensor(t, name):
    if t.dtype not in _FLOATS:
        raise TypeError(
            f"{name} must have dtype float16, bfloat16, float32 or float64, not {t.dtype}"
        )


def _index_tensor(t, name):
    if t is not None and (t.dtype is torch.bool or t.is_complex()):
        raise TypeError(f"{name} must hold integers or real floats, not dtype {t.dtype}")


def _concrete(*values):
    return all(isinstance(v, int) for v in values)


def _input(value, name):
    """A data argument of an operator as a CPU tensor."""
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value)
    if value.device.type != "cpu":
        raise device_error(name, value.device)
    return value


def _index(value, name):
    """Positions: None, or a CPU tensor without its gradient."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be numbers, not bool")
    value = _input(value, name)
    return value.detach() if value.requires_grad else value


def _size(value, name):
    """An integer argument (a length, an offset) of an operator."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, not bool")
    if isinstance(value, torch.Tensor):
        if value.ndim == 0 and not (value.is_floating_point() or value.is_complex()):
            if value.dtype is torch.bool:
                raise TypeError(f"{name} must be an integer, not bool")
            return int(value.item())
        raise TypeError(f"{name} must be an integer, not a tensor of {value.dtype}")
    if isinstance(value, (int, torch.SymInt)):
        return value
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"{name} must be an integer, not {type(value).__name__}")


def _sink(value, name):
    """`out=` / `scores=` of an operator call: a CPU tensor torch lets us
    write into in place, its elements apart."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch tensor when the call is recorded by autograd or traced by "
            f"torch.compile, not {type(value).__name__}"
        )
    if value.device.type != "cpu":
        raise device_error(name, value.device)
    if value.requires_grad and value.is_leaf and torch.is_grad_enabled():
        raise ValueError(
            f"{name} is a leaf tensor that requires grad: torch does not allow writing into it in "
            "place while grad mode is on"
        )
    if not value.is_contiguous():  # the rule of the NumPy functions' out= and scores=
        _validate.elements_apart(tuple(value.shape), value.stride(), 1, name)
    return value


def _into(out, result, name="out"):
    """`result` written into `out` by torch's own in-place copy (autograd
    and the version counter see it), or `result` when `out` is None."""
    if out is None:
        return result
    out = _sink(out, name)
    if tuple(out.shape) != tuple(result.shape):
        raise ValueError(f"{name} must have shape {tuple(result.shape)}, not {tuple(out.shape)}")
    if out.dtype != result.dtype:
        raise TypeError(f"{name} must have dtype {result.dtype}, not {out.dtype}")
    return out.copy_(result)


def _add_into(scores, bias):
    """`bias` (heads, q, k) added into `scores` (..., heads, q, k) by torch's
    own in-place add."""
    if scores.dim() < 3 or tuple(scores.shape[-3:]) != tuple(bias.shape):
        dims = ", ".join(str(n) for n in bias.shape)
        raise ValueError(f"scores must have shape (..., {dims}), not {tuple(scores.shape)}")
    return scores.add_(bias)


def _scores_tensor(scores):
    scores = _sink(scores, "scores")
    _float_tensor(scores, "scores")
    return scores


def _table_dtype(dtype, out, scores=None):
    """The dtype name of a generated table: `dtype`, else `out`'s, else float32."""
    if dtype is not None:
        return _dtype_name(dtype)
    if isinstance(out, torch.Tensor) and out.dtype in _FLOATS:
        return _NAME_OF_TORCH[out.dtype]
    return "float32"


# ---------------------------------------------------------------- the operators

from .bias import alibi_bias as _alibi_bias  # noqa: E402
from .bias import t5_bias as _t5_bias  # noqa: E402
from .rope import apply_rope as _apply_rope  # noqa: E402
from .rope import rope_cos_sin as _rope_cos_sin  # noqa: E402
from .sinusoid import sinusoid as _sinusoid  # noqa: E402


def _numpy_function(fn: Any) -> Callable[..., Any]:
    """The NumPy function a public function wraps (see posenc._interop)."""
    return fn.__wrapped_numpy__


_np_apply_rope = _numpy_function(_apply_rope)
_np_rope_cos_sin = _numpy_function(_rope_cos_sin)
_np_sinusoid = _numpy_function(_sinusoid)
_np_alibi_bias = _numpy_function(_alibi_bias)
_np_t5_bias = _numpy_function(_t5_bias)


def _np_options(spec, floats, ints):
    """Decoded options for a NumPy function (dtype names as NumPy dtypes),
    made once per distinct options (a compiled decoding loop asks for the
    same ones every step): a fresh dict each time, its values shared."""
    return dict(_np_options_of(spec, tuple(floats), tuple(ints)))


@functools.lru_cache(maxsize=256)
def _np_options_of(spec, floats, ints):
    options = decode(spec, floats, ints)
    if "dtype" in options:
        options["dtype"] = _numpy_dtype_of_name(options["dtype"])
    return options


def _maybe_array(t, name):
    return None if t is None else array(t, name)


@torch.library.custom_op("posenc::apply_rope", mutates_args=())
def apply_rope_op(
    x: torch.Tensor,
    positions: Optional[torch.Tensor],
    spec: str,
    floats: List[float],
    ints: List[int],
) -> torch.Tensor:
    """posenc.apply_rope as an operator (options: see `encode`)."""
    options = _np_options(spec, floats, ints)
    return tensor(_np_apply_rope(array(x, "x"), _maybe_array(positions, "positions"), **options))


@apply_rope_op.register_fake
def _apply_rope_fake(x, positions, spec, floats, ints):
    _float_tensor(x, "x")
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (..., dim)")
    _index_tensor(positions, "positions")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@functools.lru_cache(maxsize=256)
def _inverse_spec(spec):
    """The options of apply_rope's backward: the inverse rotation; with xPos
    the other role too (a query's transform, scaled by zeta ** t, has as its
    transpose the inverse rotation scaled by the same factor: the inverse of
    a key's)."""
    options = json.loads(spec, strict=False)
    options["inverse"] = not options["inverse"]
    if options.get("xpos") is not None:
        options["xpos"] = {"query": "key", "key": "query"}.get(options["xpos"], options["xpos"])
    return json.dumps(options)


def _apply_rope_setup(ctx, inputs, output):
    _, positions, spec, floats, ints = inputs
    ctx.has_positions = positions is not None
    if positions is not None:
        ctx.save_for_backward(positions)
    ctx.options = (_inverse_spec(spec), floats, ints)


def _apply_rope_backward(ctx, grad):
    # the rotation is orthogonal: its transpose is the inverse rotation
    positions = ctx.saved_tensors[0] if ctx.has_positions else None
    return torch.ops.posenc.apply_rope(grad, positions, *ctx.options), None, None, None, None


apply_rope_op.register_autograd(_apply_rope_backward, setup_context=_apply_rope_setup)


@torch.library.custom_op("posenc::t5_bias", mutates_args=())
def t5_bias_op(
    table: torch.Tensor,
    q_len: int,
    k_len: int,
    q_offset: int,
    spec: str,
    floats: List[float],
    ints: List[int],
) -> torch.Tensor:
    """posenc.t5_bias (without scores=) as an operator."""
    options = _np_options(spec, floats, ints)
    return tensor(_np_t5_bias(array(table, "table"), q_len, k_len, q_offset=q_offset, **options))


@t5_bias_op.register_fake
def _t5_bias_fake(table, q_len, k_len, q_offset, spec, floats, ints):
    _float_tensor(table, "table")
    if table.dim() != 2:
        raise ValueError(
            f"table must be 2-dimensional (num_buckets, n_heads), not {tuple(table.shape)}"
        )
    for value, name in ((q_len, "q_len"), (k_len, "k_len")):
        if _concrete(value) and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    return table.new_empty((table.shape[1], q_len, k_len))


def _t5_bias_setup(ctx, inputs, output):
    table, _, _, q_offset, spec, floats, ints = inputs
    ctx.grad_args = (table.shape[0], q_offset, spec, floats, ints)


def _t5_bias_backward(ctx, grad):
    # each table entry's gradient: the sum of the incoming gradient over the
    # (query, key) pairs of its bucket, per head
    return (
        torch.ops.posenc.t5_bias_table_grad(grad, *ctx.grad_args),
        None,
        None,
        None,
        None,
        None,
        None,
    )


t5_bias_op.register_autograd(_t5_bias_backward, setup_context=_t5_bias_setup)


@torch.library.custom_op("posenc::t5_bias_table_grad", mutates_args=())
def t5_bias_table_grad_op(
    grad: torch.Tensor,
    num_buckets: int,
    q_offset: int,
    spec: str,
    floats: List[float],
    ints: List[int],
) -> torch.Tensor:
    """The gradient of t5_bias with respect to its table, as an operator."""
    from .bias import t5_bias_table_grad

    options = _np_options(spec, floats, ints)
    result = tensor(
        t5_bias_table_grad(array(grad, "grad"), num_buckets, q_offset=q_offset, **options)
    )
    return result if result.dtype == grad.dtype else result.to(grad.dtype)


@t5_bias_table_grad_op.register_fake
def _t5_bias_table_grad_fake(grad, num_buckets, q_offset, spec, floats, ints):
    _float_tensor(grad, "grad")
    if grad.dim() != 3:
        raise ValueError(
            f"grad must be 3-dimensional (n_heads, q_len, k_len), not {tuple(grad.shape)}"
        )
    return grad.new_empty((num_buckets, grad.shape[0]))


def _t5_grad_setup(ctx, inputs, output):
    grad, _, q_offset, spec, floats, ints = inputs
    ctx.bias_args = (grad.shape[1], grad.shape[2], q_offset, spec, floats, ints)


def _t5_grad_backward(ctx, grad_table):
    # the scatter-add is linear in the incoming gradient; its transpose is the gather
    return torch.ops.posenc.t5_bias(grad_table, *ctx.bias_args), None, None, None, None, None


t5_bias_table_grad_op.register_autograd(_t5_grad_backward, setup_context=_t5_grad_setup)


@torch.library.custom_op("posenc::alibi_bias", mutates_args=())
def alibi_bias_op(
    slopes: Optional[torch.Tensor],
    n_heads: int,
    q_len: int,
    k_len: int,
    q_offset: Optional[int],
    spec: str,
    floats: List[float],
    ints: List[int],
) -> torch.Tensor:
    """posenc.alibi_bias (without scores=) as an operator."""
    options = _np_options(spec, floats, ints)
    slopes_arr = _maybe_array(slopes, "slopes")
    return tensor(
        _np_alibi_bias(n_heads, q_len, k_len, slopes=slopes_arr, q_offset=q_offset, **options)
    )


@alibi_bias_op.register_fake
def _alibi_bias_fake(slopes, n_heads, q_len, k_len, q_offset, spec, floats, ints):
    for value, name in ((n_heads, "n_heads"), (q_len, "q_len"), (k_len, "k_len")):
        if _concrete(value) and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    _index_tensor(slopes, "slopes")
    dtype = _TORCH_BY_NAME[decode(spec, floats, ints)["dtype"]]
    return torch.empty((n_heads, q_len, k_len), dtype=dtype)


@torch.library.custom_op("posenc::sinusoid", mutates_args=())
def sinusoid_op(
    positions: Optional[torch.Tensor],
    n: int,
    dim: int,
    spec: str,
    floats: List[float],
    ints: List[int],
) -> torch.Tensor:
    """posenc.sinusoid as an operator: the table of `positions`, or of
    0..n-1 when `positions` is None."""
    options = _np_options(spec, floats, ints)
    pos = n if positions is None else array(positions, "positions")
    return tensor(_np_sinusoid(pos, dim, **options))


def _positions_shape(positions, n, name="positions"):
    if positions is None:
        if _concrete(n) and n < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
        return (n,)
    _index_tensor(positions, name)
    return tuple(positions.shape)


@sinusoid_op.register_fake
def _sinusoid_fake(positions, n, dim, spec, floats, ints):
    if _concrete(dim) and (dim <= 0 or dim % 2):
        raise ValueError(f"dim must be a positive even integer, got {dim}")
    dtype = _TORCH_BY_NAME[decode(spec, floats, ints)["dtype"]]
    return torch.empty(_positions_shape(positions, n) + (dim,), dtype=dtype)


@torch.library.custom_op("posenc::rope_cos_sin", mutates_args=())
def rope_cos_sin_op(
    positions: Optional[torch.Tensor],
    n: int,
    dim: int,
    spec: str,
    floats: List[float],
    ints: List[int],
) -> Tuple[torch.Tensor, torch.Tensor]:
    """posenc.rope_cos_sin as an operator (positions as for sinusoid_op)."""
    options = _np_options(spec, floats, ints)
    pos = n if positions is None else array(positions, "positions")
    cos, sin = _np_rope_cos_sin(pos, dim, **options)
    return tensor(cos), tensor(sin)


@rope_cos_sin_op.register_fake
def _rope_cos_sin_fake(positions, n, dim, spec, floats, ints):
    options = decode(spec, [float(f) for f in floats], [int(i) for i in ints])
    rotary, _, rope = _rope_scaling.resolve(
        int(dim), float(options["base"]), options["scaling"], options["layer_type"]
    )
    shape = _positions_shape(positions, n)
    channels = options.get("mrope_section") is not None or options.get("axial") is not None
    if channels or _rope_scaling.sections(rope) is not None:
        if positions is None or not shape:  # refused as the function refuses it
            _np_rope_cos_sin(
                n if positions is None else 0.0, int(dim), **_np_options(spec, floats, ints)
            )
        shape = shape[1:]
    full = options.get("full", True)
    shape = shape + (rotary if full is not False else rotary // 2,)
    dtype = _TORCH_BY_NAME[options["dtype"]]
    return torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype)


# ---------------------------------------------------------------- the calls that use them
#
# Each builder has the signature of its public function (plus device=) and
# turns a call into operator calls; tests check that the signatures agree.


def _channel_options(mrope_section, mrope_interleaved, axial):
    """M-RoPE's and axial RoPE's options, lists as lists (an array or a
    tensor of sections as its values), left out when not given."""
    options = {}
    for name, value in (
        ("mrope_section", mrope_section),
        ("mrope_interleaved", mrope_interleaved),
        ("axial", axial),
    ):
        if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim > 0:
            value = value.tolist()
        if value is not None:
            options[name] = value
    return options


def _length_or_positions(positions):
    """``(n, None)`` for a length, ``(0, tensor)`` for an array of positions."""
    if isinstance(positions, (bool, np.bool_)):
        raise TypeError("positions must be an int or an array of positions, not bool")
    if isinstance(positions, (int, np.integer, torch.SymInt)):
        return _size(positions, "positions"), None
    if isinstance(positions, torch.Tensor) and positions.ndim == 0:
        if not (positions.is_floating_point() or positions.is_complex()):
            return _size(positions, "positions"), None
    return 0, _index(positions, "positions")


def _apply_rope_call(
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
    device=None,
):
    check_device(device)
    x = _input(x, "x")
    positions = _index(positions, "positions")
    options = {
        "base": base,
        "layout": layout,
        "rotary_dim": rotary_dim,
        "offset": offset,
        "seq_axis": -2 if seq_axis is None and axes is None else seq_axis,
        "inverse": inverse,
        **_channel_options(mrope_section, mrope_interleaved, axial),
        "xpos": xpos,
        "xpos_scale_base": xpos_scale_base,
        "xpos_centre": xpos_centre,
    }
    if axes is not None:  # the layout by name (left out otherwise: the default's options)
        options["axes"] = axes
    spec, floats, ints = encode(_scaling_options(options, scaling, layer_type))
    return _into(out, torch.ops.posenc.apply_rope(x, positions, spec, floats, ints))


def _rope_cos_sin_call(
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
    device=None,
):
    check_device(device)
    n, positions = _length_or_positions(positions)
    options = {
        "base": base,
        "layout": layout,
        "dtype": _dtype_name(dtype),
        **({} if seq_len is None else {"seq_len": seq_len}),
        **_channel_options(mrope_section, mrope_interleaved, axial),
        "full": full,
        "xpos": xpos,
        "xpos_scale_base": xpos_scale_base,
        "xpos_centre": xpos_centre,
    }
    spec, floats, ints = encode(_scaling_options(options, scaling, layer_type))
    return torch.ops.posenc.rope_cos_sin(positions, n, _size(dim, "dim"), spec, floats, ints)


def _sinusoid_call(
    positions, dim, *, base=10000.0, layout="interleaved", dtype=None, out=None, device=None
):
    check_device(device)
    n, positions = _length_or_positions(positions)
    options = {"base": base, "layout": layout, "dtype": _table_dtype(dtype, out)}
    spec, floats, ints = encode(options)
    return _into(
        out, torch.ops.posenc.sinusoid(positions, n, _size(dim, "dim"), spec, floats, ints)
    )


def _alibi_bias_call(
    n_heads,
    q_len,
    k_len=None,
    *,
    slopes=None,
    max_bias=8.0,
    causal=True,
    q_offset=None,
    dtype=None,
    scores=None,
    out=None,
    device=None,
):
    check_device(device)
    n_heads = _size(n_heads, "n_heads")
    q_len = _size(q_len, "q_len")
    k_len = q_len if k_len is None else _size(k_len, "k_len")
    q_offset = None if q_offset is None else _size(q_offset, "q_offset")
    if slopes is not None:
        slopes = _input(slopes, "slopes")
        if slopes.requires_grad and torch.is_grad_enabled():
            raise TypeError(
                "slopes requires grad, and posenc.alibi_bias does not compute gradients with "
                "respect to slopes; pass slopes.detach(), or call it under torch.no_grad()"
            )
    if scores is not None:
        if out is not None:
            raise ValueError("give scores (to add into) or out (to write), not both")
        scores = _scores_tensor(scores)
        name = _NAME_OF_TORCH[scores.dtype]
        if dtype is not None and _dtype_name(dtype) != name:
            raise TypeError(f"dtype must be scores' dtype ({scores.dtype}) or None, not {dtype}")
        dtype = name
    options = {"max_bias": max_bias, "causal": causal, "dtype": _table_dtype(dtype, out)}
    spec, floats, ints = encode(options)
    bias = torch.ops.posenc.alibi_bias(slopes, n_heads, q_len, k_len, q_offset, spec, floats, ints)
    if scores is not None:
        return _add_into(scores, bias)
    return _into(out, bias)


def _t5_bias_call(
    table,
    q_len,
    k_len=None,
    *,
    bidirectional=True,
    max_distance=128,
    q_offset=0,
    scores=None,
    out=None,
    device=None,
):
    check_device(device)
    table = _input(table, "table")
    q_len = _size(q_len, "q_len")
    k_len = q_len if k_len is None else _size(k_len, "k_len")
    q_offset = _size(q_offset, "q_offset")
    spec, floats, ints = encode({"bidirectional": bidirectional, "max_distance": max_distance})
    if scores is not None:
        if out is not None:
            raise ValueError("give scores (to add into) or out (to write), not both")
        scores = _scores_tensor(scores)
        _float_tensor(table, "table")
        if table.dtype != scores.dtype:  # as NumPy's: the table in scores' dtype, then added
            table = table.to(scores.dtype)
        bias = torch.ops.posenc.t5_bias(table, q_len, k_len, q_offset, spec, floats, ints)
        return _add_into(scores, bias)
    bias = torch.ops.posenc.t5_bias(table, q_len, k_len, q_offset, spec, floats, ints)
    return _into(out, bias)


# ---------------------------------------------------------------- the relative terms
#
# One operator for all of posenc.relative's functions: its tensors are the
# function's array arguments (those it is differentiable with respect to,
# in _RELATIVE_ARGS's order, None after the last: five
# arguments of their own, as autograd sees no tensor in a list of optional
# ones), its options the others.  With scores=, the operator adds into a
# copy of the scores and returns it (the bits of the direct path), and the
# call copies that back into the scores with torch's copy_; the scores'
# gradient is the incoming one.


_RELATIVE_SLOTS = 5
assert max(map(len, _RELATIVE_ARGS.values())) <= _RELATIVE_SLOTS


def _relative_arrays(name, tensors):
    return {
        key: None if t is None else array(t, key)
        for key, t in zip(_RELATIVE_ARGS[name], tensors)
    }


@torch.library.custom_op("posenc::relative", mutates_args=())
def relative_op(
    name: str,
    t0: Optional[torch.Tensor],
    t1: Optional[torch.Tensor],
    t2: Optional[torch.Tensor],
    t3: Optional[torch.Tensor],
    t4: Optional[torch.Tensor],
    spec: str,
    floats: List[float],
    ints: List[int],
) -> torch.Tensor:
    """A function of posenc.relative as an operator (see above)."""
    arrays = _relative_arrays(name, (t0, t1, t2, t3, t4))
    if arrays.get("scores") is not None:
        arrays["scores"] = arrays["scores"].copy()
    fn = _numpy_function(getattr(_relative, name))
    return tensor(fn(**arrays, **_np_options(spec, floats, ints)))


@relative_op.register_fake
def _relative_fake(name, t0, t1, t2, t3, t4, spec, floats, ints):
    # the NumPy function on zeros of the tensors' shapes and dtypes (inputs
    # that take no memory, writeable scores): its checks, and its result's
    # shape and dtype (the scores' when given)
    stand_ins = {}
    for key, t in zip(_RELATIVE_ARGS[name], (t0, t1, t2, t3, t4)):
        if t is not None:
            dtype = _NUMPY_DTYPES.get(t.dtype)
            if dtype is None:
                raise TypeError(f"{key} must be a float tensor, not {t.dtype}")
            shape = tuple(int(n) for n in t.shape)
            zero = np.zeros((), dtype)
            t = np.zeros(shape, dtype) if key == "scores" else np.broadcast_to(zero, shape)
        stand_ins[key] = t
    fn = _numpy_function(getattr(_relative, name))
    result = fn(**stand_ins, **_np_options(spec, floats, ints))
    return torch.empty(result.shape, dtype=_TORCH_BY_NAME[_dtype_name(result.dtype)])


@torch.library.custom_op("posenc::relative_grad", mutates_args=())
def relative_grad_op(
    name: str,
    tensors: List[Optional[torch.Tensor]],
    grad: torch.Tensor,
    wanted: List[bool],
    spec: str,
    floats: List[float],
    ints: List[int],
) -> List[torch.Tensor]:
    """The gradients of posenc::relative with respect to the arguments
    `wanted` marks (each of its dtype; scores= is read for its shape only,
    and gets none)."""
    names = _RELATIVE_ARGS[name]
    keys = [key for key, want in zip(names, wanted) if want]
    arrays = _relative_arrays(name, tensors)
    if arrays.get("scores") is not None:  # read for its shape
        arrays["scores"] = np.broadcast_to(np.float32(0), arrays["scores"].shape)
    options = _np_options(spec, floats, ints)
    grads = _relative_grad.grads(name, array(grad, "grad"), keys, (), {**arrays, **options})
    dtypes = {key: t.dtype for key, t in zip(names, tensors) if t is not None}
    return [torch.from_numpy(grads[key]).to(dtypes[key]) for key in keys]


@relative_grad_op.register_fake
def _relative_grad_fake(name, tensors, grad, wanted, spec, floats, ints):
    return [torch.empty_like(t) for t, want in zip(tensors, wanted) if want]


def _relative_setup(ctx, inputs, output):
    name, *tensors, spec, floats, ints = inputs
    names = _RELATIVE_ARGS[name]
    ctx.wanted = [k for k, t in zip(names, tensors) if t is not None and t.requires_grad]
    ctx.saved = [k for k, t in zip(names, tensors) if t is not None and k != "scores"]
    ctx.save_for_backward(*[t for k, t in zip(names, tensors) if k in ctx.saved])
    scores = dict(zip(names, tensors)).get("scores")
    ctx.scores = None if scores is None else scores.new_zeros(()).expand(scores.shape)
    ctx.call = (name, spec, floats, ints)


def _relative_backward(ctx, grad):
    name, spec, floats, ints = ctx.call
    names = _RELATIVE_ARGS[name]
    saved = dict(zip(ctx.saved, ctx.saved_tensors))
    tensors = [ctx.scores if k == "scores" else saved.get(k) for k in names]
    wanted = [k in ctx.wanted and k != "scores" for k in names]
    computed = []
    if any(wanted):
        computed = torch.ops.posenc.relative_grad(name, tensors, grad, wanted, spec, floats, ints)
    grads = dict(zip([k for k, want in zip(names, wanted) if want], computed))
    if "scores" in ctx.wanted:
        grads["scores"] = grad
    slots = [grads.get(k) for k in names]
    slots += [None] * (_RELATIVE_SLOTS - len(slots))
    return None, *slots, None, None, None


relative_op.register_autograd(_relative_backward, setup_context=_relative_setup)


def _relative_builder(name):
    """The call of posenc.relative's function `name` through posenc::relative."""
    fn = getattr(_relative, name)
    signature = inspect.signature(_numpy_function(fn))
    names = _RELATIVE_ARGS[name]

    def call(*args, device=None, **kwargs):
        check_device(device)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}(): {exc}") from None
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        scores = arguments.get("scores")
        if scores is not None:
            arguments["scores"] = scores = _scores_tensor(scores)
        tensors = [arguments.pop(k) for k in names]
        tensors = [None if t is None else _input(t, k) for k, t in zip(names, tensors)]
        tensors += [None] * (_RELATIVE_SLOTS - len(tensors))
        result = torch.ops.posenc.relative(name, *tensors, *encode(arguments))
        return result if scores is None else scores.copy_(result)

    call.__signature__ = _interop.with_device(signature)
    call.__name__ = f"_{name}_call"
    return call


#: the public functions that have operators, by name
BUILDERS = {
    "apply_rope": _apply_rope_call,
    "rope_cos_sin": _rope_cos_sin_call,
    "sinusoid": _sinusoid_call,
    "alibi_bias": _alibi_bias_call,
    "t5_bias": _t5_bias_call,
    **{name: _relative_builder(name) for name in _RELATIVE_ARGS},
}
