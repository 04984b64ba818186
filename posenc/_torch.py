"""PyTorch tensors in, PyTorch tensors out (calls routed by posenc._interop).

A call with a torch object (a tensor, a ``torch.dtype``, a ``torch.device``)
or ``device=`` comes here (``import posenc`` never imports torch) and takes
one of two paths.  **Direct** (eager, nothing to differentiate): CPU tensors
are seen as NumPy arrays without a copy (bfloat16 as posenc's bits dtype),
the NumPy function runs and its arrays come back as tensors without a copy;
``out=`` and ``scores=`` are written in place, their version counters bumped
as torch's in-place ops bump them.  **The operator** ``torch.ops.posenc.call``
(one ``torch.library.custom_op`` for every function with arrays in its
record): under ``torch.compile`` and ``torch.export``, and when autograd must
record the call; ``out=`` and ``scores=`` are then torch's own ``copy_`` /
``add_``.  The direct path exists because the dispatcher's fixed cost (about
20 us a call) is more than a whole decoding-step rotation.

Gradients are the records' rules (posenc._grad).  Refused with a TypeError
naming the tensor, never silently cut from the graph or copied: a tensor
that requires grad where posenc gives none (indices get none), one read
inside a torch.func transform (grad, vmap, ...), one on another device.
"""

import inspect
from typing import Any, Dict, List, Optional

import numpy as np
import torch

if not (hasattr(torch.library, "custom_op") and hasattr(torch.compiler, "is_compiling")):
    raise ImportError(
        f"posenc takes torch tensors from torch 2.4 on (torch {torch.__version__} is installed); "
        "with this one, hand it NumPy arrays (tensor.numpy()) and wrap its results "
        "(torch.from_numpy)"
    )

from torch._subclasses.fake_tensor import DataDependentOutputException  # noqa: E402
from torch.autograd.graph import increment_version  # noqa: E402
from torch.fx.experimental.symbolic_shapes import optimization_hint  # noqa: E402

from . import _blas, _dtypes, _grad, _options, _records, _validate  # noqa: E402
from ._options import decode  # noqa: E402

# ---------------------------------------------------------------- dtypes, devices

#: Tests set this to run, on the CPU, the code path of another device (torch's
#: ops on the tensors' device, the tables moved there): the code CUDA runs.
#: Read at each call by the modules of posenc.torch.
force_device_path = False

_NAME_OF_TORCH = {getattr(torch, n): n for n in ("float16", "bfloat16", "float32", "float64")}
_FLOATS = tuple(_NAME_OF_TORCH)
#: NumPy's dtype for each torch dtype that has one (bfloat16: posenc's bits)
_NUMBERS = "float16 float32 float64 complex64 complex128 bool int8 int16 int32 int64 uint8"
_NUMPY_DTYPES = {getattr(torch, n): np.dtype(n) for n in _NUMBERS.split()}
_NUMPY_DTYPES[torch.bfloat16] = _dtypes.BFLOAT16_BITS
_TORCH_DTYPES = {dtype: t for t, dtype in _NUMPY_DTYPES.items()}

_Tensor = torch.Tensor
_BFLOAT16 = torch.bfloat16
_is_grad_enabled = torch.is_grad_enabled
_inference_mode = torch.is_inference_mode_enabled

# tensors read directly; any other class (FakeTensor, FunctionalTensor of a
# tracing mode, a subclass) goes to the operators when the function has one
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _not_float(name, dtype, verb="be"):
    return TypeError(f"{name} must {verb} float16, bfloat16, float32 or float64, not {dtype}")


def _dtype_name(value, name="dtype"):
    """A float dtype given any way (torch, NumPy, a name) as its name."""
    if not isinstance(value, torch.dtype):
        return _dtypes.float_name(value, name)
    if value not in _NAME_OF_TORCH:
        raise _not_float(name, value)
    return _NAME_OF_TORCH[value]


def _cpu(t, name):
    if t.device.type != "cpu":
        raise TypeError(
            f"{name} is on device {t.device}: posenc computes on the CPU and does not copy "
            f"tensors between devices; move it with .cpu() (and the result back with "
            f".to({str(t.device)!r}))"
        )
    return t


def check_device(device, name="device"):
    """``device=``: None or the CPU (a string, a torch.device)."""
    if device is None:
        return
    given = device
    try:  # a torch.device, a name, an index
        device = None if isinstance(given, bool) else torch.device(given)
    except (RuntimeError, TypeError, ValueError):
        device = None
    if device is None:
        raise TypeError(f"{name} must be a torch.device or a device name, not {given!r}")
    if device.type != "cpu":
        raise TypeError(
            f"{name} = {str(device)!r}: posenc computes on the CPU and does not copy tensors "
            f"between devices; make the result on the CPU and move it with .to({str(device)!r})"
        )


def transform_error(name, function):
    """For a tensor read inside a torch.func transform: it has no memory to
    read there, and the operators' autograd formulas are torch.library's,
    which the transforms refuse (nor have they batching rules)."""
    return TypeError(
        f"{name} is read inside a torch.func transform (grad, vmap, jacrev, jvp, ...), which "
        f"posenc.{function} does not support: for gradients use torch.autograd "
        "(loss.backward(), torch.autograd.grad), which it supports, and instead of vmap pass "
        "the batch as leading axes or call it in a loop"
    )


_in_transform = torch._C._are_functorch_transforms_active


# ---------------------------------------------------------------- tensors <-> arrays


def array(t, name, function=None):
    """The CPU tensor `t` seen as a NumPy array (no copy), detached."""
    if _cpu(t, name).requires_grad:
        t = t.detach()
    try:
        if t.dtype is torch.bfloat16:
            return t.view(torch.int16).numpy().view(_dtypes.BFLOAT16_BITS)
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


# ---------------------------------------------------------------- the direct path


def plain_arrays(x, positions):
    """``(x, positions)`` as NumPy arrays (views, no copy) for a call that
    needs neither autograd nor an operator: `x` a CPU float tensor that asks
    for no gradient, outside torch.compile, `positions` None, a number, an
    array or such a tensor; None otherwise."""
    if (
        type(x) is not _Tensor
        or not x.is_cpu
        or (x.requires_grad and _is_grad_enabled())
        or torch.compiler.is_compiling()
    ):
        return None
    if type(positions) is _Tensor:
        if not positions.is_cpu or positions.requires_grad:
            return None
        positions = positions.numpy() if positions.ndim else positions.item()
    elif positions is not None and not isinstance(positions, (int, float, np.ndarray)):
        return None
    try:
        return array(x, "x"), positions
    except TypeError:  # a sparse tensor, ...: the routed call says so
        return None


class _UseOperators(Exception):
    """Raised while reading the arguments: this call needs the operators."""


class _Plan:
    """How one public function reads its arguments on the direct path."""

    __slots__ = ("fn", "name", "names", "grads", "builder", "sinks", "record")

    def __init__(self, fn, signature):
        self.fn, self.name = fn, fn.__name__
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.names = tuple(p.name for p in signature.parameters.values() if p.kind in positional)
        self.record = _records.record(self.name)
        self.grads = frozenset(self.record.differentiable)
        self.builder = BUILDERS.get(self.name)
        self.sinks = self.record.sinks

    def arg(self, name, value, grad):
        """`value` of argument `name` as the NumPy function takes it."""
        sink = name in self.sinks
        if (  # the common cases, quickly
            type(value) is _Tensor
            and not (grad and value.requires_grad)
            and value.is_cpu
            and value.dtype is not _BFLOAT16
        ):
            try:  # a sink written in place, any other array (a 0-d one is a number)
                if (not value.is_inference() or _inference_mode()) if sink else value.ndim:
                    return value.numpy()
            except (TypeError, RuntimeError):  # a sparse tensor, ...: said below
                pass
        if isinstance(value, torch.Tensor):
            if type(value) not in _PLAIN_TENSORS and self.builder is not None:
                raise _UseOperators  # a tensor of a tracing mode (fake, functional)
            if value.requires_grad and grad:
                if name in self.grads or (sink and self.builder is not None):
                    _cpu(value, name)
                    raise _UseOperators
                if name not in self.record.indexes:
                    raise grad_error(name, self.name, self.grads)
            if value.ndim == 0 and not sink:
                try:
                    return _cpu(value, name).item()  # a length, a scalar option: a number
                except RuntimeError:
                    if _in_transform():
                        raise transform_error(name, self.name) from None
                    raise
            arr = array(value, name, self.name)
            if sink and value.is_inference() and not _inference_mode():
                raise ValueError(
                    f"{name} is an inference tensor: torch allows writing into it in place "
                    "only inside torch.inference_mode()"
                )
            return arr
        if isinstance(value, torch.dtype):  # bfloat16 as posenc's bits: no ml_dtypes needed
            if value not in _NUMPY_DTYPES:
                raise _not_float(name, value)
            return _NUMPY_DTYPES[value]
        if name == "dtype" and _dtypes.is_bfloat16_name(value):
            return _dtypes.BFLOAT16_BITS
        return tuple(value) if isinstance(value, torch.Size) else value

    def __call__(self, args, kwargs):
        grad = _is_grad_enabled()
        try:
            np_args = list(args)
            for i, value in enumerate(args):
                if type(value) not in _PASS:
                    np_args[i] = self.arg(self.name_of(i), value, grad)
            np_kwargs = {}
            for key, value in kwargs.items():
                if key == "device":
                    check_device(value)
                elif type(value) in _PASS and key != "dtype":
                    np_kwargs[key] = value
                else:
                    np_kwargs[key] = self.arg(key, value, grad)
        except _UseOperators:
            if _in_transform():
                self.refuse_transform(args, kwargs)
            return self.builder(*args, **kwargs)
        with _blas.one_thread():  # beside torch's threads (posenc._blas)
            result = self.fn(*np_args, **np_kwargs)
        if type(result) is np.ndarray:
            for key in self.sinks:
                if result is np_kwargs.get(key):  # written into
                    if isinstance(kwargs[key], torch.Tensor):
                        increment_version(kwargs[key])  # as torch's in-place ops do
                    return kwargs[key]
            return tensor(result)
        if type(result) is tuple:  # (cos, sin), ...
            return tuple(tensor(r) if isinstance(r, np.ndarray) else r for r in result)
        return result

    def refuse_transform(self, args, kwargs):
        """Under a torch.func transform, a TypeError naming the first argument
        that would take an operator's autograd formula (torch's own in-place
        writes into out= and scores= are left to run)."""
        for name, value in [*((self.name_of(i), a) for i, a in enumerate(args)), *kwargs.items()]:
            # (not scores= of a bias: torch's own add_ into it)
            if name in self.grads and name in self.record.arrays:
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    raise transform_error(name, self.name)

    def name_of(self, i):
        return self.names[i] if i < len(self.names) else f"argument {i + 1}"


# values handed to the NumPy functions as they are
_PASS = frozenset({int, float, str, bool, type(None)})
_PLANS: Dict[Any, _Plan] = {}


def call(fn, signature, args, kwargs):
    """`fn` (a NumPy function of posenc's) called with torch objects."""
    if torch.compiler.is_compiling():
        builder = BUILDERS.get(fn.__name__)
        if builder is not None:
            return builder(*args, **kwargs)
        # no operator for this function: a graph break, and it runs eagerly
        return torch.compiler.disable(call)(fn, signature, args, kwargs)
    plan = _PLANS.get(fn)
    if plan is None:
        plan = _PLANS[fn] = _Plan(fn, signature)
    return plan(args, kwargs)


# ---------------------------------------------------------------- the operators' arguments


def _plain(value):
    """A torch value among the options as the encoder takes it."""
    if isinstance(value, torch.Tensor):
        if value.ndim != 0:
            raise TypeError(f"a tensor of shape {tuple(value.shape)} where a number was expected")
        return value.item()
    return _dtype_name(value) if isinstance(value, torch.dtype) else value


def encode(options):
    """``(spec, floats, ints)`` of a dict of keyword options (posenc._options)."""
    return _options.encode(options, torch.SymInt, torch.SymFloat, _plain)


def _input(value, name):
    """A data argument of an operator as a CPU tensor (a Python number or
    list read as NumPy reads it, in float64 or int64, as the direct path
    and a NumPy call read it: not in torch's default float32)."""
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value if isinstance(value, np.ndarray) else np.asarray(value))
    return _cpu(value, name)


def _length(value, name):
    """An integer scalar given where positions are taken (a length), else None."""
    if isinstance(value, torch.Tensor) and value.ndim == 0:
        if not (value.is_floating_point() or value.is_complex()):
            value = value.item()  # an integer or a bool
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or an array of positions, not bool")
    if isinstance(value, (int, np.integer)):
        return int(value)
    return value if isinstance(value, torch.SymInt) else None


def _sink(value, name):
    """`out=` / `scores=` of an operator call: a CPU tensor torch lets us
    write into in place, its elements apart."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch tensor when the call is recorded by autograd or traced by "
            f"torch.compile, not {type(value).__name__}"
        )
    if _cpu(value, name).requires_grad and value.is_leaf and torch.is_grad_enabled():
        raise ValueError(
            f"{name} is a leaf tensor that requires grad: torch does not allow writing into it in "
            "place while grad mode is on"
        )
    if not value.is_contiguous():  # the rule of the NumPy functions' out= and scores=
        _validate.elements_apart(tuple(value.shape), value.stride(), 1, name)
    if name == "scores" and value.dtype not in _FLOATS:
        raise _not_float(name, value.dtype, "have dtype")
    return value


def grad_error(name, function, grads):
    """The error for a tensor that requires grad where posenc gives none."""
    only = f" (only {', '.join(sorted(grads))})" if grads else ""
    return TypeError(
        f"{name} requires grad, and posenc.{function} does not compute gradients with respect "
        f"to {name}{only}; pass {name}.detach(), or call it under torch.no_grad()"
    )


# ---------------------------------------------------------------- the operator
#
# posenc::call: its tensors are the record's `arrays` (None where not given or
# a length), its options the caller's other arguments (`encode`).  Its fake
# runs the NumPy function on stand-ins that take no memory (every check, the
# result's shape and dtype; with symbolic sizes the shape is the record's rule,
# or the sizes are made concrete); its autograd formula is the record's rule.
# scores= of a relative term goes into the operator (a copy, added into: the
# bits of the direct path) and torch's copy_ puts it back; that of alibi_bias
# and t5_bias is torch's own add_ of the operator's bias.

_SLOTS = max(len(r.arrays) for r in _records.RECORDS.values())


def _given(name, tensors):  # an operator call's tensors by argument name
    return {k: t for k, t in zip(_records.RECORDS[name].arrays, tensors) if t is not None}


def _results(result):
    return list(result) if isinstance(result, tuple) else [result]


@torch.library.custom_op("posenc::call", mutates_args=())
def call_op(
    name: str,
    t0: Optional[torch.Tensor],
    t1: Optional[torch.Tensor],
    t2: Optional[torch.Tensor],
    t3: Optional[torch.Tensor],
    t4: Optional[torch.Tensor],
    t5: Optional[torch.Tensor],
    spec: str,
    floats: List[float],
    ints: List[int],
) -> List[torch.Tensor]:
    """The routed function `name` as an operator (see above)."""
    arguments = _options.decode_numpy(spec, floats, ints)
    for key, t in _given(name, (t0, t1, t2, t3, t4, t5)).items():
        arguments[key] = array(t, key).copy() if key == "scores" else array(t, key)
    with _blas.one_thread():
        results = _results(_records.function(name)(**arguments))
    return [tensor(r) for r in results]


def _hint(value):
    return value if isinstance(value, (int, float)) else optimization_hint(value)


@call_op.register_fake
def _call_fake(name, t0, t1, t2, t3, t4, t5, spec, floats, ints):
    record = _records.RECORDS[name]
    slots = _given(name, (t0, t1, t2, t3, t4, t5))
    sizes = [*floats, *ints, *(n for t in slots.values() for n in t.shape)]
    symbolic = not all(isinstance(n, (int, float)) for n in sizes)
    options = _options.decode_numpy(spec, [_hint(f) for f in floats], [_hint(i) for i in ints])
    arrays = {}
    for key, t in slots.items():
        if t.dtype not in _NUMPY_DTYPES:
            raise TypeError(f"{key} must be a float tensor, not {t.dtype}")
        arrays[key] = (tuple(_hint(n) for n in t.shape), _NUMPY_DTYPES[t.dtype])
    try:
        results = _results(_records.on_stand_ins(name, options, arrays))
    except (TypeError, ValueError) as exc:
        # refused: a graph break, and the call made eagerly raises it itself
        refused = DataDependentOutputException(torch.ops.posenc.call.default)
        refused.args = (f"posenc.{name}: {exc}",)
        raise refused from None
    shapes = [r.shape for r in results]
    if symbolic and "scores" in slots:
        shapes = [slots["scores"].shape]
    elif symbolic and record.shape is not None:
        shapes = [record.shape({**decode(spec, floats, ints), **slots}, shapes[0])] * len(results)
    elif symbolic:  # no rule: the sizes concrete (guarded), as they were read
        for n in sizes:
            int(n) if isinstance(n, torch.SymInt) else float(n)
    return [torch.empty(s, dtype=_TORCH_DTYPES[r.dtype]) for s, r in zip(shapes, results)]


def _setup(ctx, inputs, output):
    name, *tensors, spec, floats, ints = inputs
    record = _records.RECORDS[name]
    given = _given(name, tensors)
    ctx.wanted = [k for k, t in given.items() if t.requires_grad and k in record.differentiable]
    # what the rule reads (scores= never): else a stand-in of its shape and dtype
    values = _grad.reads_values(record.backward)
    ctx.saved = saved = [k for k in given if k != "scores" and (values or k in record.indexes)]
    ctx.save_for_backward(*[given[k] for k in saved])
    ctx.shapes = {k: t.new_zeros(()).expand(t.shape) for k, t in given.items() if k not in saved}
    ctx.call = (name, spec, floats, ints)
    if record.outputs > 1:  # an output no loss reads: its gradient None, not zeros
        ctx.set_materialize_grads(False)


def _parts(g):
    """A complex output's gradient as its real and imaginary parts (torch's
    gradient of a complex tensor holds that of its real part in its real
    part, of its imaginary part in its imaginary part)."""
    return (None, None) if g is None else (g.real, g.imag)


def _backward(ctx, grads):
    name, spec, floats, ints = ctx.call
    record = _records.RECORDS[name]
    given = {**dict(zip(ctx.saved, ctx.saved_tensors)), **ctx.shapes}
    # each output's gradient as the rule takes it (complex ones count twice)
    parts = _parts if len(grads) != record.outputs else lambda g: (g,)
    grad = _grad.outputs_grad(record.outputs, grads, parts)
    wanted = ctx.wanted if grad is not None else ()
    rules = _grad.backward(name, {**decode(spec, floats, ints), **given}, grad, wanted)
    got = {}
    host = [key for key, rule in rules.items() if rule is _grad.HOST]
    if host:
        tensors = [given.get(k) for k in record.arrays]
        wanted = [k in host for k in record.arrays]
        stacked = _grad.stacked(grad, torch.zeros_like, torch.stack)
        computed = torch.ops.posenc.relative_grad(
            name, tensors, stacked, wanted, spec, floats, ints
        )
        got.update(zip([k for k in record.arrays if k in host], computed))
    for key, rule in rules.items():
        if isinstance(rule, _grad.Call):
            rule = _run(rule.name, dict(rule.arguments))
        if rule is not _grad.HOST:
            got[key] = rule.to(given[key].dtype).expand(given[key].shape)
    slots = [got.get(k) for k in record.arrays]
    slots += [None] * (_SLOTS - len(slots))
    # (an empty list of options is a list of no tensors to autograd: its grads are [])
    return None, *slots, None, None if floats else [], None if ints else []


call_op.register_autograd(_backward, setup_context=_setup)


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
    """The gradients of a relative term with respect to the arguments
    `wanted` marks (each of its dtype; scores= is read for its shape only,
    and gets none): posenc._grad.grads on the host."""
    given = _given(name, tensors)
    keys = [key for key, want in zip(_records.RECORDS[name].arrays, wanted) if want]
    arrays = {k: array(t, k) for k, t in given.items()}
    if "scores" in arrays:  # read for its shape
        arrays["scores"] = np.broadcast_to(np.float32(0), arrays["scores"].shape)
    options = _options.decode_numpy(spec, floats, ints)
    with _blas.one_thread():
        grads = _grad.grads(name, array(grad, "grad"), keys, (), {**arrays, **options})
    return [torch.from_numpy(grads[key]).to(given[key].dtype) for key in keys]


@relative_grad_op.register_fake
def _relative_grad_fake(name, tensors, grad, wanted, spec, floats, ints):
    return [torch.empty_like(t) for t, want in zip(tensors, wanted) if want]


# ---------------------------------------------------------------- the calls that use it


def _run(name, arguments):
    """The call of routed function `name` with the `arguments` the caller
    gave (by name), through posenc::call."""
    record = _records.RECORDS[name]
    out = arguments.pop("out", None)
    scores = arguments.get("scores")
    if scores is not None:
        if out is not None:
            raise ValueError("give scores (to add into) or out (to write), not both")
        arguments["scores"] = scores = _sink(scores, "scores")
    added = scores is not None and "scores" not in record.arrays  # torch's add_
    if added:
        del arguments["scores"]
        source = record.dtype_from
        if source == "dtype":  # the bias in the scores' dtype
            dtype = arguments.get("dtype")
            if dtype is not None and _dtype_name(dtype) != _NAME_OF_TORCH[scores.dtype]:
                raise TypeError(
                    f"dtype must be scores' dtype ({scores.dtype}) or None, not {dtype}"
                )
            arguments["dtype"] = scores.dtype
        else:  # as NumPy's: the array in the scores' dtype, then added
            t = _input(arguments[source], source)
            if t.dtype not in _FLOATS:
                raise _not_float(source, t.dtype, "have dtype")
            arguments[source] = t.to(scores.dtype)
    if arguments.get("dtype") is not None:
        arguments["dtype"] = _dtype_name(arguments["dtype"])
    elif isinstance(out, torch.Tensor) and out.dtype in _FLOATS and record.dtype_from == "dtype":
        arguments["dtype"] = _NAME_OF_TORCH[out.dtype]
    tensors = []
    for key in record.arrays:
        value = arguments.pop(key, None)
        if key in record.float_scalars and (n := _length(value, key)) is not None:
            arguments[key], value = n, None  # a length: an option, not a tensor
        if value is None:
            tensors.append(None)
            continue
        if key in record.indexes and isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{key} must be numbers, not bool")
        t = _input(value, key)
        if t.requires_grad and (key in record.indexes or not torch.is_grad_enabled()):
            t = t.detach()
        elif t.requires_grad and key not in record.differentiable:
            raise grad_error(key, name, record.differentiable)
        tensors.append(t)
    tensors += [None] * (_SLOTS - len(tensors))
    options = encode(_options.carried(arguments, (np.ndarray, torch.Tensor)))
    results = torch.ops.posenc.call(name, *tensors, *options)
    result = results[0] if len(results) == 1 else tuple(results)
    # out= and scores= written by torch's own in-place ops: autograd and the
    # version counters see them
    if added:  # the bias (heads, q, k) into scores (..., heads, q, k)
        if scores.dim() < 3 or tuple(scores.shape[-3:]) != tuple(result.shape):
            dims = ", ".join(str(n) for n in result.shape)
            raise ValueError(f"scores must have shape (..., {dims}), not {tuple(scores.shape)}")
        return scores.add_(result)
    if scores is not None:
        return scores.copy_(result)
    if out is None:
        return result
    out = _sink(out, "out")
    if tuple(out.shape) != tuple(result.shape):
        raise ValueError(f"out must have shape {tuple(result.shape)}, not {tuple(out.shape)}")
    if out.dtype != result.dtype:
        raise TypeError(f"out must have dtype {result.dtype}, not {out.dtype}")
    return out.copy_(result)


def _builder(name):
    """The call of routed function `name` through the operator, with the
    public function's signature (plus device=)."""
    signature = inspect.signature(_records.function(name))

    def call(*args, device=None, **kwargs):
        check_device(device)
        try:
            arguments = dict(signature.bind(*args, **kwargs).arguments)
        except TypeError as exc:
            raise TypeError(f"{name}(): {exc}") from None
        return _run(name, arguments)

    call.__signature__ = _records.with_device(signature)
    call.__name__ = f"_{name}_call"
    return call


#: the public functions that have an operator, by name
BUILDERS = {
    name: _builder(name)
    for name, record in _records.RECORDS.items()
    if (record.arrays or record.differentiable) and record.beside is None
}
