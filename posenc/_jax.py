"""JAX arrays in, JAX arrays out (calls routed by posenc._interop).

posenc._interop sends here every call whose arguments include a JAX object:
a ``jax.Array``, a tracer of ``jax.jit`` / ``jax.vmap`` / ``jax.grad``, or
a JAX dtype (``jnp.bfloat16``).  This module is imported only then, so
``import posenc`` never imports jax or jaxlib.

What runs where.  posenc's kernels are C on the host CPU; JAX does not see
inside them.  A call takes one of two paths:

- **Eager** (concrete arrays, nothing traced): each array is read where it
  lies as a NumPy array (``np.asarray`` of a CPU array: no copy), the NumPy
  function runs, and its result becomes a JAX array on the CPU with
  ``jax.device_put``: without a copy when the array is large (posenc then
  writes into a 64-byte aligned buffer, which XLA adopts as it is), with
  one small copy otherwise.  An array on another device (a GPU, a TPU) is
  refused with a TypeError naming the argument and the device: nothing is
  moved between devices behind the caller's back.
- **Traced** (under ``jax.jit``, ``jax.vmap``, ``jax.grad``): the call
  becomes a callback whose result shape and dtype come from running the
  NumPy function once, at trace time, on stand-ins of the traced arguments
  (zero-filled arrays of their shapes and dtypes that take no memory: every
  check of the arguments runs then, and a bad call fails while tracing,
  with posenc's own message).  When the compiled program runs, XLA calls
  back into Python on the host.  With ``buffer_callback``
  (``jax.experimental``, where JAX has it, and a CPU backend) the C kernel
  reads XLA's input buffers and writes into XLA's output buffer in place
  (``out=``); otherwise it is a ``jax.pure_callback``, whose inputs JAX
  copies to the host and whose result it copies back (and, for a jit that
  runs on a GPU, moves between the device and the host).  Checks that
  depend on values (a NaN position) run in the callback.  Where it runs
  inside the call (eager ``jax.vmap`` and ``jax.grad``: concrete values)
  such a refusal is posenc's own TypeError/ValueError, as the NumPy call
  raises it; under ``jax.jit`` it runs when the compiled function does, and
  the error JAX raises for a failed callback ends with posenc's message,
  naming the function.

Under ``jax.vmap`` the callback is called once per batch (``vmap_method=
"expand_dims"``) and loops over the batch on the host, one call of the
NumPy function per element: the same numbers as calling it on each element
(a batched ``apply_rope``, ``sinusoid`` or ``rope_cos_sin`` whose options
do not depend on other elements is one call, the batch axes placed where
the function's position rule reads an element's own axes: after the rows'
axis of positions in rows, in front of x's and plain positions' axes).
An empty result or argument has a zero gradient without a callback.

Gradients (reverse mode: ``jax.grad``, ``jax.vjp``): ``apply_rope`` with
respect to ``x`` (its backward is the inverse rotation by the same
positions, with xPos the inverse of the other role's transform, itself a
posenc call) and ``t5_bias`` with respect to
``table`` (a scatter-add of the incoming gradient by bucket); the relative
terms with respect to their arrays (posenc._grad, one callback
for all of them); ``complex_order_embedding`` with respect to its tables
and float positions, through its pair or its complex result (whose
cotangent, ``d/d real - i d/d imag`` as JAX defines it, is read as the
pair's).  Any other
argument that JAX differentiates (float positions, ALiBi slopes, a
sinusoid's positions) raises a TypeError naming it, never a silent zero;
forward mode (``jax.jvp``, ``jax.jacfwd``) is refused by JAX itself.

Values that must be static under tracing: lengths and sizes (``dim``,
``n_heads``, ``q_len``...), options and dtypes.  Traced values may be the
arrays, ``offset`` and ``q_offset`` (a decoding position inside a jitted
loop), and a single position.  ``out=`` and ``scores=`` cannot take a JAX
array (JAX arrays are immutable): use the return value.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from numbers import Integral
from typing import Any, Dict

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from . import _dtypes, _grad, _records, rope_scaling
from . import _validate as v
from ._rope_plan import channel_plan, resolve_rotary
from ._rope_positions import named_seq_axis

if "vmap_method" not in inspect.signature(jax.pure_callback).parameters:
    raise ImportError(
        f"posenc takes JAX arrays from jax 0.4.36 on (jax {jax.__version__} is installed); with "
        "this one, hand it NumPy arrays (np.asarray(x)) and wrap its results (jnp.asarray)"
    )

_Tracer = jax.core.Tracer
_Array = jax.Array

#: results at least this large are handed to XLA without a copy (smaller
#: ones are copied: jnp.asarray of a small array costs less than adopting it)
ZERO_COPY_BYTES = 1 << 18
_ALIGN = 64  # XLA adopts a host buffer without a copy when it is this aligned


# ---------------------------------------------------------------- conversions


def _is_bfloat16(dtype):
    return dtype.kind == "V" and _dtypes.is_bfloat16(dtype)


def device_error(name, device):
    return TypeError(
        f"{name} is on device {device} ({device.platform}): posenc computes on the CPU and does "
        f"not copy arrays between devices; move it with jax.device_put({name}, "
        f"jax.devices('cpu')[0]) (and the result back with jax.device_put(result, device))"
    )


def check_cpu(value, name):
    """The devices of the concrete JAX array `value`, all CPUs, else TypeError."""
    devices = value.devices()
    for device in devices:
        if device.platform != "cpu":
            raise device_error(name, device)
    return devices


def _sink_error(fn_name, name):
    if name == "scores":
        return TypeError(
            f"scores is a JAX array, which cannot be written in place (JAX arrays are immutable): "
            f"add the bias yourself, scores + posenc.{fn_name}(...) without scores=, or use the "
            f"value posenc.{fn_name}(..., scores=numpy_array) returns"
        )
    return TypeError(
        f"{name} is a JAX array, which cannot be written in place (JAX arrays are immutable): "
        f"call posenc.{fn_name} without {name}= and use the array it returns"
    )


def _traced_sink_error(fn_name, name):
    return TypeError(
        f"{name}= cannot be written under jax.jit, jax.vmap or jax.grad (posenc.{fn_name} is "
        f"traced there): call it without {name}= and use the array it returns"
        + (" (scores + the bias)" if name == "scores" else "")
    )


def _numpy_dtype(value, name):
    """A JAX dtype argument (``jnp.float32``, ``jnp.bfloat16``) as NumPy's dtype."""
    try:
        return np.dtype(value)
    except TypeError as exc:
        raise TypeError(
            f"{name} must be float16, bfloat16, float32 or float64, not {value!r}"
        ) from exc


def _aligned_empty(shape, dtype):
    """An uninitialised C-contiguous array whose data is _ALIGN-byte aligned."""
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def to_jax(result, device):
    """A NumPy result of posenc's as a JAX array (on `device`, or JAX's
    default device when None).  64-bit values follow JAX's rules: without
    ``jax_enable_x64`` they become 32-bit, as ``jnp.asarray`` makes them."""
    if isinstance(result, np.ndarray):
        if device is None and result.nbytes < ZERO_COPY_BYTES:
            return jnp.asarray(result)
        return jax.device_put(result, device)
    if isinstance(result, tuple):
        return tuple(to_jax(r, device) for r in result)
    return result


def x64_enabled():
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def _canonical(dtype):
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


# ---------------------------------------------------------------- results XLA adopts


def _float_array(value):
    return isinstance(value, np.ndarray) and (
        value.dtype in v.FLOAT_DTYPES or _is_bfloat16(value.dtype)
    )


def _length(value):
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise TypeError


def _layout(record, a):
    """The shape and dtype of a function's result from its NumPy arguments
    (its record's rule), raising when they do not say."""
    shape = tuple(_length(n) for n in record.shape(a))
    if record.dtype_from == "dtype":
        dtype = a.get("dtype")
        return shape, np.dtype(np.float32) if dtype is None else v.float_dtype(dtype, bfloat16=True)
    source = a[record.dtype_from]
    if not _float_array(source):
        raise TypeError
    return shape, source.dtype


def _run_eager(plan, args, kwargs):
    """The NumPy function on NumPy arguments; a large result written into a
    buffer that XLA can adopt."""
    fn = plan.fn
    if plan.record.shape is not None and kwargs.get("out") is None and kwargs.get("scores") is None:
        named = dict(zip(plan.positional, args))
        named.update(kwargs)
        try:
            shape, dtype = _layout(plan.record, named)
            nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.float64))
        except Exception:  # the arguments do not say: fn allocates (or reports them)
            nbytes = 0
        if ZERO_COPY_BYTES <= nbytes < 1 << 62:
            buffer = _aligned_empty(shape, dtype)
            try:
                return fn(*args, **kwargs, out=buffer)
            except (TypeError, ValueError):
                pass  # reported by the call as the user made it, below
    return fn(*args, **kwargs)


# ---------------------------------------------------------------- the eager path


class _Plan:
    """What posenc._jax knows of one public function."""

    def __init__(self, fn, signature):
        self.fn = fn
        self.name = fn.__name__
        self.signature = signature
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.positional = tuple(
            p.name for p in signature.parameters.values() if p.kind in positional
        )
        self.record = _records.record(self.name)
        # what JAX may differentiate (not a sink: JAX arrays are never written)
        self.grads = frozenset(self.record.differentiable) - set(self.record.sinks)

    def bind(self, args, kwargs):
        try:
            return dict(self.signature.bind(*args, **kwargs).arguments)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None

    def name_of(self, i):
        return self.positional[i] if i < len(self.positional) else f"argument {i + 1}"


_PLANS: Dict[Any, _Plan] = {}


def call(fn, signature, args, kwargs):
    """`fn` (a NumPy function of posenc's) called with JAX objects."""
    plan = _PLANS.get(fn)
    if plan is None:
        plan = _PLANS[fn] = _Plan(fn, signature)
    device = _device_argument(kwargs.pop("device")) if "device" in kwargs else None
    for value in (*args, *kwargs.values()):
        if isinstance(value, _Tracer):
            return _traced(plan, plan.bind(args, kwargs))
    return _eager(plan, args, kwargs, device)


def _device_argument(device):
    if isinstance(device, str) and device == "cpu":
        return jax.devices("cpu")[0]
    if isinstance(device, jax.Device):
        if device.platform != "cpu":
            raise TypeError(
                f"device = {device} ({device.platform}): posenc computes on the CPU and does not "
                "copy arrays between devices; make the result on the CPU and move it with "
                "jax.device_put(result, device)"
            )
        return device
    raise TypeError(f"device must be a jax.Device or 'cpu', not {device!r}")


class _Placement:
    """The one device the JAX arrays of a call are committed to, if any."""

    __slots__ = ("device", "one")

    def __init__(self):
        self.device = None
        self.one = True

    def add(self, value, name):
        devices = check_cpu(value, name)
        if self.one and value.committed and len(devices) == 1:
            (device,) = devices
            if self.device is None or self.device == device:
                self.device = device
            else:
                self.one = False


def _eager_arg(plan, name, value, placement):
    """One argument of an eager call as the NumPy function takes it."""
    if isinstance(value, _Array):
        if name in plan.record.sinks:
            raise _sink_error(plan.name, name)
        placement.add(value, name)
        arr = np.asarray(value)  # a CPU array: its buffer, read-only, no copy
        if arr.ndim == 0 and not _is_bfloat16(arr.dtype):
            return arr.item()  # a length, an offset: a Python number
        return arr
    if name == "dtype" and value is not None and type(value).__module__.startswith("jax"):
        return _numpy_dtype(value, name)
    return value


def _eager(plan, args, kwargs, device):
    placement = _Placement()
    np_args = [_eager_arg(plan, plan.name_of(i), a, placement) for i, a in enumerate(args)]
    np_kwargs = {k: _eager_arg(plan, k, a, placement) for k, a in kwargs.items()}
    if "dtype" in np_kwargs and not x64_enabled():
        _warn_x64(plan.name, np_kwargs["dtype"])
    if device is None and placement.one:
        device = placement.device
    result = _run_eager(plan, np_args, np_kwargs)
    for sink in plan.record.sinks:
        if np_kwargs.get(sink) is not None and result is np_kwargs[sink]:
            return result  # a NumPy out= or scores=, written in place
    return to_jax(result, device)


def _warn_x64(fn_name, dtype):
    try:
        wide = dtype is not None and v.float_dtype(dtype, bfloat16=True) == np.float64
    except TypeError:
        return  # reported by the function
    if wide:
        warnings.warn(
            f"posenc.{fn_name}: dtype float64 was asked for, and JAX without jax_enable_x64 "
            "holds float32: the float64 table is rounded to float32 (set "
            "jax.config.update('jax_enable_x64', True) to keep float64)",
            UserWarning,
            stacklevel=5,  # the line that called posenc
        )


# ---------------------------------------------------------------- the traced path


def _check_traced_scalar(plan, name, tracer):
    dtype = np.dtype(tracer.dtype)
    record = plan.record
    if name in record.traced_scalars or (name in record.float_scalars and dtype.kind == "f"):
        return
    raise TypeError(
        f"{name} is traced (posenc.{plan.name} under jax.jit, jax.vmap or jax.grad), and it must "
        f"be a static value there: it decides a shape or an option. Pass a Python value, or mark "
        f"it static (jax.jit(..., static_argnums=...)); the arrays and offset / q_offset may be "
        f"traced"
    )


class _Op:
    """One traced call: the NumPy function, its static arguments, the names
    of its traced ones, and the shapes and dtypes of its result."""

    def __init__(self, plan, static, names, shapes, leaves, tree, direct):
        self.plan = plan
        self.static = static
        self.names = names
        self.shapes = shapes  # each traced argument's shape when traced (vmap adds axes)
        self.ndims = tuple(len(s) for s in shapes)
        self.spec = leaves[0] if tree is None else leaves
        self.leaves = leaves  # the result's ShapeDtypeStructs, flattened
        self.tree = tree  # None: one array; else the tuple's length
        self.direct = direct  # the function writes its result into XLA's buffer (out=)
        self._rows = _UNKNOWN  # positions in rows (M-RoPE, axial RoPE): see rows()
        self.failure = None  # (kind, message) of a refusal in the callback

    def __call__(self, *values):
        if _buffer_callback() is not None:
            return _buffer_callback()(self.in_buffers, self.spec, vmap_method="expand_dims")(
                *values
            )
        return jax.pure_callback(self.host, self.spec, *values, vmap_method="expand_dims")

    def in_buffers(self, ctx, out, *buffers):
        """The callback of buffer_callback: XLA's input and output buffers,
        seen as NumPy arrays where they are (no copy either way)."""
        outs = [np.asarray(out)] if self.tree is None else [np.asarray(o) for o in out]
        self.checked([np.asarray(b) for b in buffers], outs)

    def host(self, *arrays):
        """The callback of pure_callback: the inputs' values in, the result out."""
        arrays = [np.asarray(a) for a in arrays]
        extra = arrays[0].ndim - self.ndims[0] if arrays else 0
        batch = np.broadcast_shapes(*(a.shape[:extra] for a in arrays)) if extra else ()
        outs = [np.empty(batch + s.shape, s.dtype) for s in self.leaves]
        self.checked(arrays, outs)
        return outs[0] if self.tree is None else tuple(outs)

    def checked(self, arrays, outs):
        """compute(), a refusal kept (its kind and message: no frames, no
        buffers) for _apply to raise as it is where the callback ran inside
        the call (eager jax.vmap and jax.grad), and raised again naming the
        function: under jax.jit, JAX reports the callback's exception inside
        its own error, and this is the line it ends with."""
        try:
            self.compute(arrays, outs)
        except (TypeError, ValueError) as exc:
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            self.failure = (kind, str(exc))
            raise kind(
                f"posenc.{self.plan.name} refused a value it was given when the compiled "
                f"function ran: {exc}"
            ) from exc

    def compute(self, arrays, outs):
        """The result into `outs`.  Under jax.vmap (expand_dims) every
        argument has the same number of leading batch axes, of size 1 where
        it is not batched, and `outs` the whole batch's."""
        extra = arrays[0].ndim - self.ndims[0] if arrays else 0
        if extra == 0:
            self.run(arrays, outs)
            return
        batch = outs[0].shape[:extra]
        try:
            if self.whole_batch(arrays, extra, batch, outs):
                return
        except (TypeError, ValueError):
            pass  # the elements one by one: the refusal, if any, is an element's own
        for index in np.ndindex(*batch):
            one = [
                a[tuple(i if n != 1 else 0 for i, n in zip(index, a.shape[:extra]))] for a in arrays
            ]
            self.run(one, [o[index + (Ellipsis,)] for o in outs])  # views, 0-d too

    def run(self, values, outs, **changed):
        arguments = dict(self.static)
        for name, value in zip(self.names, values):
            if value.ndim == 0 and not _is_bfloat16(value.dtype):
                value = value.item()
            arguments[name] = value
        arguments.update(changed)
        if self.direct:
            self.plan.fn(**arguments, out=outs[0])
            return
        result = self.plan.fn(**arguments)
        for out, r in zip(outs, (result,) if self.tree is None else result):
            out[...] = r  # cast where JAX holds a narrower dtype (int64 -> int32)

    def whole_batch(self, arrays, extra, batch, outs):
        """The batch in one call, where the function's own broadcasting
        gives each element's result: apply_rope on batched data, sinusoid
        and rope_cos_sin on batched positions.  False: call per element.

        The batch axes go where the function's position rule reads an
        element's axes: in front of x's, in front of plain positions' (whose
        leading axes go on x's leading axes), and after the leading axis of
        positions in rows (M-RoPE's sections, axial RoPE), which stays
        first."""
        name = self.plan.name
        traced = dict(zip(self.names, arrays))
        if name == "apply_rope":
            if set(traced) - {"x", "positions"} or not _seq_free(self.static):
                return False
            if "x" in traced:
                x = traced["x"]
                shape = batch + x.shape[extra:]
            else:
                x = np.asarray(self.static["x"])
                shape = batch + x.shape
            rows = self.rows(shape[-1])
            if rows is None:
                return False
            changed = {"x": np.broadcast_to(x, shape)}
            positions = _batched_positions(
                traced.get("positions", self.static.get("positions")),
                extra,
                rows,
                "positions" in traced,
            )
            if positions is False:
                return False
            changed["positions"] = positions
            axis = self.static.get("seq_axis")
            axes = self.static.get("axes")
            if isinstance(axes, str):  # the layout by name: its axes after the batch's
                axis = named_seq_axis(axes, axis, len(axes))
                changed["axes"] = None
            if axis is None:
                axis = -2
            if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and axis >= 0:
                changed["seq_axis"] = axis + extra
            self.run([traced.get(n) for n in self.names], outs, **changed)
            return True
        if name in ("sinusoid", "rope_cos_sin") and set(traced) == {"positions"}:
            positions = np.broadcast_to(arrays[0], batch + self.shapes[0])
            if name == "rope_cos_sin":
                if not _seq_free(self.static):
                    return False
                rows = self.rows(None)
                if rows is None:
                    return False
                positions = _batched_positions(positions, extra, rows, True)
                if positions is False:
                    return False
            self.run([traced["positions"]], outs, positions=positions)
            return True
        return False

    def rows(self, dim):
        """Whether apply_rope (x.shape[-1] = `dim`) or rope_cos_sin takes
        positions in rows with these options; None when they do not say
        (the call per element then reports them)."""
        if self._rows is _UNKNOWN:
            self._rows = _positions_in_rows(self.plan, self.static, dim)
        return self._rows


_UNKNOWN = object()


def _positions_in_rows(plan, static, dim):
    """rope.py's own reading of the options: whether `positions` has a
    leading axis of rows (M-RoPE's sections, axial RoPE), or None."""
    given = {
        p.name: p.default
        for p in plan.signature.parameters.values()
        if p.default is not inspect.Parameter.empty
    }
    given.update(static)
    try:
        base = v.real(given["base"], "base", positive=True)
        if plan.name == "apply_rope":
            rotary, base, rope = resolve_rotary(
                dim, given["rotary_dim"], base, given["scaling"], given["layer_type"]
            )
        else:
            dim = v.even_dim(given["dim"], "dim")
            rotary, base, rope = rope_scaling.resolve(
                dim, base, given["scaling"], given["layer_type"]
            )
        chan = channel_plan(
            rotary, base, rope, given["mrope_section"], given["mrope_interleaved"], given["axial"]
        )
    except Exception:
        return None
    return chan is not None


def _batched_positions(positions, extra, rows, traced):
    """An element's positions as the whole batch's: with `extra` batch axes
    where the position rule places an element's own axes (False: an
    element's positions give the batch axes no place, call per element).

    `traced`: `positions` is the batch's, its batch axes leading (as
    vmap's expand_dims lays them, of size 1 where not batched); else one
    element's, the same for all."""
    if positions is None:
        return None
    if traced:
        arr = positions
        own = arr.ndim - extra  # an element's dimensions
        if own - rows < 1:
            return False  # one position (per row): no axis of x to put it on
        if rows:  # the rows' axis first, then the batch's
            return np.moveaxis(arr, extra, 0)
        return arr
    if isinstance(positions, (Integral, np.integer, float, np.floating)):
        return positions  # one position for all, or a length
    arr = np.asarray(positions)
    if arr.ndim - rows < 1:
        return arr
    lead = arr.shape[:1] if rows else ()
    return arr.reshape(lead + (1,) * extra + arr.shape[len(lead) :])


_BUFFER_CALLBACK: list = []


def _buffer_callback():
    """jax.experimental.buffer_callback.buffer_callback where JAX has it and
    computes on the CPU (the callback then reads and writes XLA's buffers in
    place), else None (jax.pure_callback: a copy of the inputs and of the
    result)."""
    if not _BUFFER_CALLBACK:
        try:
            from jax.experimental.buffer_callback import buffer_callback
        except ImportError:
            buffer_callback = None
        if jax.default_backend() != "cpu":
            buffer_callback = None
        _BUFFER_CALLBACK.append(buffer_callback)
    return _BUFFER_CALLBACK[0]


def _seq_free(static):
    """Whether the RoPE options give frequencies that do not depend on the
    positions' values (dynamic and longrope take max(positions) + 1): then a
    batch of elements is one call."""
    scaling = static.get("scaling")
    if scaling is None:
        return True
    try:
        rope = rope_scaling.read(scaling, static.get("layer_type"))
    except Exception:
        return False
    return not rope.family.needs_seq_len


_SPECS: Dict[Any, Any] = {}


def _result_spec(plan, static, names, tracers):
    """The ShapeDtypeStructs of the result, from a call on stand-ins (cached
    when the static arguments are hashable)."""
    key = (
        plan.fn,
        x64_enabled(),  # the dtypes JAX holds
        tuple((n, t.shape, np.dtype(t.dtype)) for n, t in zip(names, tracers)),
        tuple((n, type(s), s) for n, s in static.items()),
    )
    try:
        hit = _SPECS.get(key)
    except TypeError:  # an unhashable option (a dict, an array): not cached
        key = hit = None
    if hit is not None:
        return hit
    arrays = {name: (tuple(t.shape), np.dtype(t.dtype)) for name, t in zip(names, tracers)}
    result = _records.on_stand_ins(plan.fn, static, arrays, scalars=True)
    if isinstance(result, np.ndarray):
        leaves, tree = (result,), None
    elif isinstance(result, tuple) and all(isinstance(r, np.ndarray) for r in result):
        leaves, tree = result, len(result)
    else:
        raise TypeError(
            f"posenc.{plan.name} cannot be traced by JAX: it returns {type(result).__name__}, "
            "not arrays; call it outside the traced function"
        )
    structs = tuple(jax.ShapeDtypeStruct(r.shape, _canonical(r.dtype)) for r in leaves)
    # the function can write into XLA's buffer when JAX holds its own dtype
    direct = (
        tree is None and "out" in plan.signature.parameters and structs[0].dtype == result.dtype
    )
    found = (structs, tree, direct)
    if key is not None:
        if len(_SPECS) > 512:
            _SPECS.clear()
        _SPECS[key] = found
    return found


def _traced(plan, arguments):
    if plan.record.value_shaped:
        raise TypeError(
            f"posenc.{plan.name} cannot be traced by jax.jit, jax.vmap or jax.grad: the shape of "
            "its result depends on the values of its arguments; call it on concrete arrays "
            "outside the traced function and pass its result in"
        )
    static = {}
    names = []
    tracers = []
    for name, value in arguments.items():
        if isinstance(value, _Tracer):
            if name in plan.record.sinks:
                raise _sink_error(plan.name, name)
            if value.ndim == 0:
                _check_traced_scalar(plan, name, value)
            names.append(name)
            tracers.append(value)
        elif isinstance(value, _Array):
            if name in plan.record.sinks:
                raise _sink_error(plan.name, name)
            check_cpu(value, name)
            arr = np.asarray(value)
            static[name] = arr.item() if arr.ndim == 0 and not _is_bfloat16(arr.dtype) else arr
        elif name in plan.record.sinks and value is not None:
            raise _traced_sink_error(plan.name, name)
        elif name == "dtype" and value is not None and type(value).__module__.startswith("jax"):
            static[name] = _numpy_dtype(value, name)
        elif isinstance(value, np.ndarray):
            static[name] = value.copy()  # its values as of tracing, as jit keeps constants
        else:
            static[name] = value
    if static.get("dtype") is not None and not x64_enabled():
        _warn_x64(plan.name, static["dtype"])
    return _apply(plan, static, tuple(names), tracers)


def _apply(plan, static, names, values):
    """The traced call of `plan` with `values` for the arguments `names`."""
    structs, tree, direct = _result_spec(plan, static, names, values)
    shapes = tuple(tuple(np.shape(t)) for t in values)
    op = _Op(plan, static, names, shapes, structs, tree, direct)
    try:
        return _differentiable(plan, op, static, names)(*values)
    except Exception:
        # the callback ran here (concrete values: eager jax.vmap, jax.grad)
        # and refused them: posenc's own error, as the NumPy call raises it
        failure, op.failure = op.failure, None
        if failure is None:
            raise
        raise failure[0](failure[1]) from None


def _differentiable(plan, op, static, names):
    """`op` as a function JAX can differentiate where posenc can (a
    custom_vjp), and refuses to elsewhere."""

    def fwd(*primals):
        for name, p in zip(names, primals):
            if p.perturbed and name not in plan.grads:
                raise TypeError(_grad_error(plan, name))
        values = tuple(p.value for p in primals)
        # f itself, not op: differentiated again (a gradient's gradient), it
        # is f's rule that applies; the residuals arrays (a traced Python
        # number, a position, has no shape)
        return f(*values), tuple(jnp.asarray(v) for v in values)

    def bwd(values, cotangent):
        got = {}
        cotangent = _incoming(plan.record, cotangent)
        if cotangent is not None:
            traced = dict(zip(names, values))
            # (an integer argument has no gradient: JAX's own rule)
            wanted = [n for n in names if n in plan.grads and _inexact(traced[n].dtype)]
            size = min(np.size(c) for c in _present(cotangent))
            # an empty result (q_len = 0) or argument has a zero gradient, without a call
            for key in wanted:
                if size == 0 or traced[key].size == 0:
                    got[key] = jnp.zeros(traced[key].shape, traced[key].dtype)
            wanted = [key for key in wanted if key not in got]
            rules = _grad.backward(plan.name, {**static, **traced}, cotangent, wanted)
            host = tuple(key for key in wanted if rules[key] is _grad.HOST)
            if host:  # one callback for all of them
                got.update(zip(host, _host_grads(plan, static, names, values, cotangent, host)))
            for key, rule in rules.items():
                if isinstance(rule, _grad.Call):
                    result = _run(rule).astype(traced[key].dtype)
                    got[key] = jnp.broadcast_to(result, traced[key].shape)
        return tuple(got.get(name) for name in names)

    def traced(*values):
        return op(*values)

    f = jax.custom_vjp(traced)
    f.defvjp(fwd, bwd, symbolic_zeros=True)
    return f


def _inexact(dtype):
    return jnp.issubdtype(dtype, jnp.inexact)


def _present(cotangent):
    """The cotangents of a call's outputs that are not None."""
    return [c for c in cotangent if c is not None] if isinstance(cotangent, tuple) else [cotangent]


def _incoming(record, cotangent):
    """The cotangent of a call's result as the backward rule takes it
    (``_grad.outputs_grad``), a complex output's as the gradients of its
    real and imaginary parts (JAX's cotangent of a complex array is their
    difference, ``d/d real - i d/d imag``); None when all are zero."""

    def parts(c):
        if isinstance(c, SymbolicZero):
            return (None, None) if jnp.issubdtype(c.aval.dtype, jnp.complexfloating) else (None,)
        return (c.real, -c.imag) if jnp.iscomplexobj(c) else (c,)

    grads = cotangent if isinstance(cotangent, tuple) else (cotangent,)
    return _grad.outputs_grad(record.outputs, grads, parts)


def _grad_error(plan, name):
    which = ", ".join(sorted(plan.grads))
    return (
        f"jax.grad through posenc.{plan.name} with respect to {name}: posenc does not compute "
        f"that gradient"
        + (f" (only with respect to {which})" if which else "")
        + f"; wrap it in jax.lax.stop_gradient({name}) if it needs none"
    )


# ---------------------------------------------------------------- gradients


def _plan_of(fn):
    plan = _PLANS.get(fn)
    if plan is None:
        plan = _PLANS[fn] = _Plan(fn, inspect.signature(fn))
    return plan


def _run(call):
    """A backward rule's call of a routed function (posenc._grad.Call),
    traced as that function's own call: differentiable in its turn."""
    static, names, values = {}, [], []
    for name, value in call.arguments.items():
        if isinstance(value, (_Tracer, _Array)):
            names.append(name)
            values.append(value)
        else:
            static[name] = value
    return _apply(_plan_of(_records.function(call.name)), static, tuple(names), values)


def _host_grads(plan, static, names, values, cotangent, keys):
    """The backward of a relative term with respect to its arguments `keys`
    at once (posenc._grad, in one callback: the incoming gradient
    is summed by column once for all of them)."""
    grad_plan = _RELATIVE_GRAD_PLANS.get((plan.name, keys))
    if grad_plan is None:
        grad_plan = _RELATIVE_GRAD_PLANS[plan.name, keys] = _RelativeGradPlan(plan, keys)
    stacked = _grad.stacked(cotangent, jnp.zeros_like, jnp.stack)
    result = _apply(grad_plan, static, ("grad", *names), [stacked, *values])
    traced = dict(zip(names, values))
    return tuple(r.astype(traced[key].dtype) for r, key in zip(result, keys))


class _RelativeGradPlan(_Plan):
    """The gradients of a relative term with respect to some of its
    arguments, as a function of the incoming gradient and the term's own
    arguments."""

    def __init__(self, plan, keys):
        self.fn = functools.partial(_grad.grads_of, plan.name, keys)
        self.name = f"{plan.name} (its gradient with respect to {', '.join(keys)})"
        self.signature = plan.signature
        self.record = _records.Record(self.name)
        self.grads = frozenset()


_RELATIVE_GRAD_PLANS: Dict[Any, _Plan] = {}
