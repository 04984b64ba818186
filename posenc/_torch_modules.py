"""torch modules of the absolute embeddings and the learned biases, each
wrapping posenc's function of it; re-exported by :mod:`posenc.torch`.

- :class:`SinusoidalEmbedding`: :func:`posenc.sinusoid` of any positions.
- :class:`LearnedPositionEmbedding`: a table as an ``nn.Parameter``, drawn
  at random, the sinusoid's, or any table
  :func:`posenc.probe.load_position_embeddings` reads.
- :class:`ComplexOrderEmbedding`: :func:`posenc.complex_order_embedding`
  with its three tables as parameters.
- :class:`KerpleBias`, :class:`SandwichBias`, :class:`FireBias`: the
  biases of :mod:`posenc.functional_bias`, their parameters (KERPLE's ``r1,
  r2``, FIRE's MLP, ``c`` and threshold) as the authors' modules hold them.
- :class:`CoPE`: :func:`posenc.cope_bias` with its position table as a
  parameter.

On the CPU each module calls posenc's function, whose values are formed in
float64 and rounded once and whose backward is posenc's.  On another device
(CUDA, MPS, ...) the learned ones (complex order, KERPLE, FIRE, CoPE) run
the same formula in torch's own ops there, in float64 (float32 on MPS,
which has no float64), differentiated by torch's autograd; the sinusoid and
Sandwich, which learn nothing, are made on the CPU and moved.  Both paths
check the same arguments and refuse the same ones.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
import torch
from torch import nn

from . import _distance_bias, _torch, _validate
from ._torch_args import device as _device
from ._torch_args import float_tensor as _float_tensor
from ._torch_args import on_meta as _on_meta
from ._torch_args import scores as _scores
from ._torch_args import tensor as _tensor
from ._torch_args import to as _to
from .complex_order import complex_order_embedding
from .cope import cope_bias
from .functional_bias import fire_bias, kerple_bias, sandwich_bias
from .sinusoid import sinusoid

__all__ = [
    "CoPE",
    "ComplexOrderEmbedding",
    "FireBias",
    "KerpleBias",
    "LearnedPositionEmbedding",
    "SandwichBias",
    "SinusoidalEmbedding",
]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


# ---------------------------------------------------------------- arguments


def _integer_tensor(value: Any, name: str) -> torch.Tensor:
    t = _tensor(value, name)
    if t.dtype not in _INTEGER_DTYPES:
        raise TypeError(f"{name} must be an integer tensor, got {t.dtype}")
    return t


def _dtype(value: Any, name: str = "dtype") -> torch.dtype:
    if not isinstance(value, torch.dtype) or value not in _FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be torch.float16, torch.bfloat16, torch.float32 or torch.float64, "
            f"not {value!r}"
        )
    return value


def _on_device_path(*tensors: Optional[torch.Tensor]) -> bool:
    """Whether torch's ops compute the module's formula (a tensor off the CPU)."""
    return _torch.force_device_path or any(
        t is not None and t.device.type != "cpu" for t in tensors
    )


def _work_dtype(device: torch.device) -> torch.dtype:
    """The dtype the device path computes in: float64, but on MPS (which has none)."""
    return torch.float32 if device.type == "mps" else torch.float64


def _one_device(tensors: Tuple[Tuple[str, torch.Tensor], ...]) -> torch.device:
    """The device all of `tensors` are on (a ValueError naming them if not one)."""
    devices = {t.device for _, t in tensors}
    if len(devices) > 1:
        where = ", ".join(f"{name} on {t.device}" for name, t in tensors)
        raise ValueError(f"the tensors must be on one device, got {where}")
    return next(iter(devices))


def _wide(t: torch.Tensor) -> torch.Tensor:
    """`t`, or float32 for bfloat16 (exactly), which posenc's functions read as float32."""
    return t.float() if t.dtype == torch.bfloat16 else t


def _distances(
    q_len: int, k_len: int, q_offset: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """``qpos - j`` (q_len, k_len) with ``qpos = q_offset + i``, exact in float64."""
    qpos = torch.arange(q_len, device=device, dtype=dtype) + float(q_offset)
    keys = torch.arange(k_len, device=device, dtype=dtype)
    return qpos[:, None] - keys[None, :]


def _masked_future(values: torch.Tensor, delta: torch.Tensor, causal: bool) -> torch.Tensor:
    """`values` (heads, q, k) with -inf at the keys after the query when causal."""
    if not causal:
        return values
    return values.masked_fill(delta < 0, float("-inf"))


def _bias_result(module: nn.Module, dtype: Any, device: Any) -> Tuple[torch.dtype, torch.device]:
    """The checked dtype and target device of a ``bias()`` call: `device` None
    is the module's (its parameters', else the CPU)."""
    dtype = _dtype(dtype)
    if device is None:
        first = next(iter(module.parameters()), None)
        return dtype, first.device if first is not None else torch.device("cpu")
    return dtype, _device(device)


def _check_size(shape: Tuple[int, ...], name: str, itemsize: int) -> None:
    _validate.shape_size(shape, name, itemsize)


# ---------------------------------------------------------------- absolute embeddings


class SinusoidalEmbedding(nn.Module):
    """The sinusoidal position embedding of "Attention Is All You Need"
    (:func:`posenc.sinusoid`), as a module.

    ``forward(positions, *, dtype=None)`` gives ``(*positions.shape, dim)``:
    positions an integer or float tensor of any shape (float positions for
    the skip-position attack or interpolation; an int ``n`` is positions
    ``0 .. n - 1``), each angle formed in float64 and rounded once.  The
    result is on the positions' device (made on the CPU and moved) and of
    `dtype`: by default float32, or the dtype the module was cast to
    (``.double()``, ``.half()``, ``.to(torch.float64)``, as for a module
    with parameters).  It learns nothing: no gradient reaches the
    positions, and the ``state_dict`` is empty.

    Parameters
    ----------
    dim : int
        The width, a positive even integer.
    base : float
        The wavelength base (10000 in the paper), > 0.
    layout : {"interleaved", "concat"}
        ``"interleaved"`` (the paper, transformers): ``sin, cos`` of each
        frequency side by side; ``"concat"``: all sines, then all cosines
        (x-transformers' ``ScaledSinusoidalEmbedding``).
    """

    def __init__(self, dim: int, *, base: float = 10000.0, layout: str = "interleaved") -> None:
        super().__init__()
        self.dim = _validate.even_dim(dim, "dim")
        self.base = float(_validate.real(base, "base", positive=True))
        self.layout = _validate.choice(layout, "layout", ("interleaved", "concat"))
        # holds nothing: the dtype and device the module is cast and moved to
        self.register_buffer("_anchor", torch.empty(0), persistent=False)

    def forward(self, positions: Any, *, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        dtype = self._anchor.dtype if dtype is None else _dtype(dtype)
        if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool):
            n = _validate.integer(positions, "positions", minimum=0)
            _check_size((n, self.dim), "positions and dim", torch.finfo(dtype).bits // 8)
            positions = torch.arange(n, device=self._anchor.device)
        t = _tensor(positions, "positions")
        if t.dtype not in _INTEGER_DTYPES and t.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"positions must be an integer or float tensor, got {t.dtype}")
        shape = tuple(t.shape) + (self.dim,)
        if _on_meta(t):
            _check_size(shape, "positions and dim", torch.finfo(dtype).bits // 8)
            return torch.empty(shape, dtype=dtype, device="meta")
        cpu = t.detach()
        if cpu.device.type != "cpu":
            cpu = cpu.cpu()
        if cpu.dtype == torch.bfloat16:
            cpu = cpu.float()  # (exactly)
        out = sinusoid(cpu.reshape(-1), self.dim, base=self.base, layout=self.layout,
                       dtype=dtype)  # fmt: skip
        return _to(out.reshape(shape), t.device)

    def extra_repr(self) -> str:
        return f"{self.dim}, base={self.base}, layout={self.layout!r}"


def _local_config(path: str) -> Optional[dict]:
    """The ``config.json`` of a model directory, or beside a file, or None."""
    from .probe._loading import local_config

    try:
        return local_config(path)
    except ValueError as exc:
        raise ValueError(f"init: {exc}") from exc


def _read_table(source: str, key: Optional[str]) -> Tuple[Any, Optional[dict]]:
    """The table `source` names (a file, a model directory or a Hub name) and
    the model's config where one is found (a model directory's
    ``config.json``, or the one beside a checkpoint file, or the Hub
    model's; none for an ``.npy`` or ``.npz`` file, a table as saved)."""
    from .probe import hub, load_position_embeddings

    if hub.is_hub_name(source):
        # the function load_position_embeddings reads a Hub name with, for
        # the model's config as well as its table
        fetched = hub.fetch(source, key=key)
        return fetched.table, dict(fetched.config)
    table = load_position_embeddings(source, key=key)
    if source.lower().endswith((".npy", ".npz")):
        return table, None  # the table itself, as saved: no model's rows
    return table, _local_config(source)


def _first_row(config: Optional[dict]) -> Tuple[int, str]:
    """The table row of position 0 by the model's config, and why."""
    if not config:
        return 0, ""
    from .probe.offsets import position_rule

    rule = position_rule(config)
    return rule.first_row, rule.why


class LearnedPositionEmbedding(nn.Module):
    """A learned absolute position embedding: a ``(num_positions, dim)``
    table as an ``nn.Parameter`` (``weight``), looked up by position.

    ``forward(positions)`` gives ``(*positions.shape, dim)``, the table's
    rows at the integer positions, on the table's device and in its dtype;
    a position outside ``0 .. num_positions - 1`` is a ValueError naming
    `positions` (an index past an ``nn.Embedding`` would crash, or on CUDA
    stop the device).

    Parameters
    ----------
    num_positions, dim : int
        The table's shape, each >= 1.
    init : "random", "sinusoid", array, tensor or str
        ``"random"``: normal with standard deviation `std` (BERT's and
        GPT-2's ``initializer_range``, 0.02).  ``"sinusoid"``:
        :func:`posenc.sinusoid`'s table (``dim`` even).  An array, a tensor
        or a list of rows: that table.  Any other string: a file, a model
        directory or a Hub name, read by
        :func:`posenc.probe.load_position_embeddings` (a Hub name needs
        ``pip install "posenc[hub]"`` and, the first time, the network).
        A table must be ``dim`` wide and hold at least
        ``num_positions`` rows from its first position: its first
        ``num_positions`` rows from there are taken (a longer table is cut,
        a shorter one or another width is a ValueError naming `init`; no
        table is padded).  A value of those rows past `dtype`'s range
        (float16's 65504) is a ValueError naming `init`, not an infinity.
    freeze : bool
        True: the table is not trained (``weight.requires_grad`` False, as
        ``nn.Embedding.from_pretrained(freeze=True)``).
    key : str, optional
        The table's name in the checkpoint `init` names (see
        :func:`~posenc.probe.load_position_embeddings`); with a string
        `init` only.
    first_row : int, optional
        The table row of position 0, for a table `init` only.  By default
        that of the model's config when `init` names a model (a Hub name, a
        model directory or a checkpoint file with ``config.json`` beside it;
        not an ``.npy`` or ``.npz`` file): RoBERTa's family numbers positions
        from ``pad_token_id + 1``, OPT's and BART's from row 2
        (:func:`posenc.probe.offsets.position_rule`); else 0.  The rule
        used is in ``self.init_note``.
    std : float
        The standard deviation of ``init="random"``, > 0.
    dtype : torch dtype, optional
        The table's dtype; by default torch's default dtype (float32), as a
        module's parameters, whatever the dtype `init` came in.

    Notes
    -----
    ``reset_parameters()`` draws the random table again or makes the
    sinusoid's again; a module initialised from a table has no draw to
    repeat (a ValueError naming `init`): load its ``state_dict``.
    """

    def __init__(
        self,
        num_positions: int,
        dim: int,
        *,
        init: Any = "random",
        freeze: bool = False,
        key: Optional[str] = None,
        first_row: Optional[int] = None,
        std: float = 0.02,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        self.num_positions = _validate.integer(num_positions, "num_positions", minimum=1)
        self.dim = _validate.integer(dim, "dim", minimum=1)
        freeze = _validate.flag(freeze, "freeze")
        self.std = float(_validate.real(std, "std", positive=True))
        dtype = torch.get_default_dtype() if dtype is None else _dtype(dtype)
        if first_row is not None:
            first_row = _validate.integer(first_row, "first_row", minimum=0)
            if isinstance(init, str) and init in ("random", "sinusoid"):
                raise ValueError(f"first_row is a row of a table: init={init!r} has none")
        if key is not None:
            if not isinstance(key, str):
                raise TypeError(f"key must be a string, not {type(key).__name__}")
            if not isinstance(init, str) or init in ("random", "sinusoid"):
                raise ValueError(
                    "key names a table in the checkpoint init names: give it with init as a "
                    "path or a Hub name only"
                )
        self.init = init if isinstance(init, str) and init in ("random", "sinusoid") else "table"
        self.init_note = ""
        _validate.shape_size((self.num_positions, self.dim), "num_positions and dim", 4)
        weight = torch.empty(self.num_positions, self.dim, dtype=dtype)
        if self.init == "table":
            weight = self._table(init, key, first_row, dtype)
        self.weight = nn.Parameter(weight, requires_grad=not freeze)
        if self.init != "table":
            self.reset_parameters()

    def _table(
        self, init: Any, key: Optional[str], first_row: Optional[int], dtype: torch.dtype
    ) -> torch.Tensor:
        """The rows of the table `init` (an array, tensor or source) from its first position."""
        config = None
        if isinstance(init, str):
            table, config = _read_table(init, key)
        elif isinstance(init, (np.ndarray, torch.Tensor, list, tuple)) or hasattr(
            init, "__array__"
        ):
            table = init
        else:
            raise TypeError(
                "init must be 'random', 'sinusoid', an array, a tensor or a path or Hub name "
                f"of a table, not {type(init).__name__}"
            )
        if torch.is_tensor(table):
            if table.device.type == "meta":
                raise ValueError("init is on the meta device: it has no values")
            table = table.detach().cpu()
            if table.dtype == torch.bfloat16:
                table = table.float()
            table = table.numpy()
        table = np.asarray(table)
        if table.dtype.kind not in "iuf":
            if table.dtype.name == "bfloat16":  # ml_dtypes' (exactly widened)
                table = table.astype(np.float32)
            else:
                raise TypeError(f"init must be a table of real numbers, not dtype {table.dtype}")
        if table.ndim != 2:
            raise ValueError(
                f"init must be a (positions, dim) table, got shape {tuple(table.shape)}"
            )
        rows, width = table.shape
        if first_row is None:
            first_row, why = _first_row(config)
            self.init_note = why
        else:
            self.init_note = f"positions from row {first_row} (first_row)"
        if width != self.dim:
            raise ValueError(f"init is {width} wide, the module's dim is {self.dim}")
        if rows - first_row < self.num_positions:
            where = f" from row {first_row}" if first_row else ""
            raise ValueError(
                f"init has {max(rows - first_row, 0)} positions{where} ({rows} rows), fewer "
                f"than num_positions = {self.num_positions}: a table is never padded"
            )
        taken = table[first_row : first_row + self.num_positions]
        if not np.isfinite(taken).all():
            raise ValueError("init must be finite (found nan or inf in the rows taken)")
        weight = torch.tensor(np.array(taken, dtype=np.float64), dtype=dtype)
        if not torch.isfinite(weight).all():
            raise ValueError(
                f"init holds values past {dtype}'s range (largest {torch.finfo(dtype).max:.4g}) "
                "in the rows taken: give a wider dtype"
            )
        return weight

    def reset_parameters(self) -> None:
        """The random table drawn again, or the sinusoid's made again."""
        if self.init == "table":
            raise ValueError(
                "init was a table: it has no draw to repeat (load the module's state_dict)"
            )
        with torch.no_grad():
            if self.init == "random":
                self.weight.normal_(0.0, self.std)
            elif self.weight.device.type != "meta":
                table = sinusoid(self.num_positions, self.dim, dtype=np.float64)
                self.weight.copy_(torch.from_numpy(table))

    def forward(self, positions: Any) -> torch.Tensor:
        ids = _integer_tensor(positions, "positions")
        weight = self.weight
        if ids.device != weight.device:
            if not _on_meta(ids, weight):
                ids = _to(ids, weight.device)
        if not _on_meta(ids) and ids.numel():
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= self.num_positions:
                bad = low if low < 0 else high
                raise ValueError(
                    f"positions must be in 0 .. {self.num_positions - 1} (num_positions = "
                    f"{self.num_positions}), found {bad}"
                )
        if _on_meta(ids, weight):
            return torch.empty(tuple(ids.shape) + (self.dim,), dtype=weight.dtype, device="meta")
        if ids.dtype not in (torch.int32, torch.int64):
            ids = ids.long()
        return nn.functional.embedding(ids, weight)

    def extra_repr(self) -> str:
        frozen = ", freeze=True" if not self.weight.requires_grad else ""
        return f"{self.num_positions}, {self.dim}, init={self.init!r}{frozen}"


class ComplexOrderEmbedding(nn.Module):
    """Complex-order word embeddings (Wang et al., 2020): word ``t`` at
    position ``pos`` is ``r[t] exp(i (w[t] pos + theta[t]))`` feature by
    feature (:func:`posenc.complex_order_embedding`), with the amplitude,
    frequency and phase tables as parameters (``amplitude``, ``frequency``,
    ``phase``, each ``(vocab_size, dim)``, drawn from N(0, 1) as the
    authors' three ``nn.Embedding``).

    ``forward(input_ids, positions=None)``: `input_ids` an integer tensor of
    any shape, ``0 <= id < vocab_size``; `positions` broadcastable to it
    (ints or floats; a float tensor that requires grad gets its gradient),
    by default ``1 .. n`` along the last axis, as the authors count.  The
    result, in the tables' dtype on their device, by `output`:
    ``"concat"`` (the default) one tensor ``(*input_ids.shape, 2 * dim)``,
    the real parts then the imaginary ones, for a real-valued model of
    width ``2 * dim``; ``"pair"`` the tuple ``(real, imag)`` as the
    authors' module returns it; ``"complex"`` one complex tensor.

    Parameters
    ----------
    vocab_size, dim : int
        The tables' shape, each >= 1.
    output : {"concat", "pair", "complex"}
        The form of the result (above).

    Notes
    -----
    The authors' module takes the phase modulo ``2 pi`` at each call,
    which changes no value; the phase here is left as it is learned.  The
    parts are formed in float64 and rounded once to the tables' dtype
    (bfloat16 tables: through float32).
    """

    def __init__(self, vocab_size: int, dim: int, *, output: str = "concat") -> None:
        super().__init__()
        self.vocab_size = _validate.integer(vocab_size, "vocab_size", minimum=1)
        self.dim = _validate.integer(dim, "dim", minimum=1)
        self.output = _validate.choice(output, "output", ("concat", "pair", "complex"))
        _validate.shape_size((self.vocab_size, self.dim), "vocab_size and dim", 12)
        self.amplitude = nn.Parameter(torch.empty(self.vocab_size, self.dim))
        self.frequency = nn.Parameter(torch.empty(self.vocab_size, self.dim))
        self.phase = nn.Parameter(torch.empty(self.vocab_size, self.dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The three tables drawn from N(0, 1) again (``nn.Embedding``'s init)."""
        with torch.no_grad():
            for table in (self.amplitude, self.frequency, self.phase):
                table.normal_()

    def forward(self, input_ids: Any, positions: Any = None) -> Any:
        ids = _integer_tensor(input_ids, "input_ids")
        tables = (self.amplitude, self.frequency, self.phase)
        if positions is None:
            if ids.ndim == 0:
                raise ValueError(
                    "positions must be given for a 0-d input_ids (by default they run along "
                    "its last axis)"
                )
            positions = torch.arange(1, ids.shape[-1] + 1, device=ids.device)
        pos = _tensor(positions, "positions")
        if pos.dtype not in _INTEGER_DTYPES and pos.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"positions must be an integer or float tensor, got {pos.dtype}")
        try:
            fits = torch.broadcast_shapes(tuple(pos.shape), tuple(ids.shape)) == ids.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"positions of shape {tuple(pos.shape)} do not broadcast to input_ids' "
                f"{tuple(ids.shape)}"
            )
        if not _on_meta(ids) and ids.numel():
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= self.vocab_size:
                raise ValueError(
                    f"input_ids must be in 0 .. {self.vocab_size - 1} (vocab_size = "
                    f"{self.vocab_size}), found {low if low < 0 else high}"
                )
        dtype = torch.promote_types(torch.promote_types(tables[0].dtype, tables[1].dtype),
                                    tables[2].dtype)  # fmt: skip
        shape = tuple(ids.shape) + (self.dim,)
        if _on_meta(ids, pos, *tables):
            real = torch.empty(shape, dtype=dtype, device="meta")
            return self._form(real, torch.empty_like(real))
        if _on_device_path(ids, pos, *tables):
            real, imag = self._by_torch(ids, pos, dtype)
        else:
            if pos.dtype == torch.bfloat16:
                pos = pos.float()
            # bfloat16 tables through float32 (exactly), the parts rounded to it after
            real, imag = complex_order_embedding(ids, pos, *(_wide(t) for t in tables))
            real, imag = real.to(dtype), imag.to(dtype)
        return self._form(real, imag)

    def _by_torch(
        self, ids: torch.Tensor, pos: torch.Tensor, dtype: torch.dtype
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The formula in torch's ops on the tables' device (the device path)."""
        device = _one_device((("input_ids", ids), ("positions", pos),
                              ("the tables", self.amplitude)))  # fmt: skip
        if not torch.isfinite(pos).all():
            raise ValueError("positions must be finite (found nan or inf)")
        work = _work_dtype(device)
        index = ids.long()
        r, w, theta = (nn.functional.embedding(index, t).to(work)
                       for t in (self.amplitude, self.frequency, self.phase))  # fmt: skip
        for name, rows in (("amplitude", r), ("frequency", w), ("phase", theta)):
            if not torch.isfinite(rows).all():
                raise ValueError(
                    f"{name} must be finite in the rows input_ids use (found nan or inf)"
                )
        phi = pos.to(work)[..., None] * w + theta
        return (r * torch.cos(phi)).to(dtype), (r * torch.sin(phi)).to(dtype)

    def _form(self, real: torch.Tensor, imag: torch.Tensor) -> Any:
        if self.output == "pair":
            return real, imag
        if self.output == "complex":
            if real.dtype in (torch.float16, torch.bfloat16):
                real, imag = real.float(), imag.float()
            return torch.complex(real, imag)
        return torch.cat([real, imag], dim=-1)

    def extra_repr(self) -> str:
        return f"{self.vocab_size}, {self.dim}, output={self.output!r}"


# ---------------------------------------------------------------- biases


class _DistanceBias(nn.Module):
    """What the biases by distance share: ``forward(scores)`` adds
    ``bias(q_len, k_len)`` into ``(batch, heads, q, k)`` scores."""

    n_heads: int
    causal: bool

    def bias(
        self,
        q_len: int,
        k_len: Optional[int] = None,
        *,
        q_offset: Optional[int] = None,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
    ) -> torch.Tensor:
        """The ``(n_heads, q_len, k_len)`` bias of dtype `dtype` on `device`
        (by default the module's): query ``i`` at position ``q_offset + i``
        (by default ``k_len - q_len``, the newest of the keys), ``-inf`` at
        the keys after it when the module is causal."""
        dtype, target = _bias_result(self, dtype, device)
        q_len, k_len, q_offset, causal = _distance_bias.distance_args(
            q_len, k_len, q_offset, self.causal
        )
        shape = (self.n_heads, q_len, k_len)
        _check_size(shape, "n_heads, q_len and k_len", torch.finfo(dtype).bits // 8)
        params = list(self.parameters())
        if target.type == "meta" or _on_meta(*params):
            return torch.empty(shape, dtype=dtype, device="meta")
        return _to(self._bias(q_len, k_len, q_offset, causal, dtype), target)

    def _bias(
        self, q_len: int, k_len: int, q_offset: int, causal: bool, dtype: torch.dtype
    ) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, scores: Any, *, q_offset: Optional[int] = None) -> torch.Tensor:
        """``scores + bias``: `scores` a float ``(batch, n_heads, q_len,
        k_len)`` tensor; the result in its dtype, on its device (parameters
        on the meta device: a meta tensor of the scores' shape and dtype)."""
        scores = _scores(scores, self.n_heads)
        b = self.bias(scores.shape[2], scores.shape[3], q_offset=q_offset, dtype=scores.dtype,
                      device=scores.device)  # fmt: skip
        if b.device.type == "meta" and scores.device.type != "meta":
            # parameters on the meta device: the result's shape and dtype, as CoPE's
            return torch.empty(scores.shape, dtype=scores.dtype, device="meta")
        return scores + b


class KerpleBias(_DistanceBias):
    """KERPLE's attention bias (Chi et al., 2022) with its per-head ``r1,
    r2`` as parameters (:func:`posenc.kerple_bias`).

    ``kind="log"``: ``-r1 log(1 + r2 |qpos - j|)``; ``kind="power"``:
    ``-r1 |qpos - j| ** r2``.  ``bias(q_len, k_len=None, *, q_offset=None,
    dtype=torch.float32, device=None)`` gives ``(n_heads, q_len, k_len)``;
    ``forward(scores, *, q_offset=None)`` returns ``scores + bias`` in the
    scores' dtype, on their device.  ``causal=True`` gives ``-inf`` to the
    keys after each query (the bias also masks); ``causal=False`` the
    symmetric kernel, for encoders.  `q_offset` places the queries among the
    keys when decoding (by default the newest).

    The parameters are drawn and kept positive as the authors' modules do
    (``ParallelKerpleLog``, ``ParallelKerplePower`` in their GPT-NeoX):
    ``r1`` and ``r2`` are ``(n_heads,)``, the log kernel's ``r1`` (their
    ``bias_p``) uniform in ``[0, 2)`` and ``r2`` (``bias_a``) in ``[0,
    1)``; the power kernel's ``r1`` (``bias_a``) in ``[0, 1)`` and its
    exponent ``r2`` (``bias_p``) in ``[0, 2)``.  Before each use, values
    below `eps` (0.01) are raised to it, and the power kernel's ``r2`` above
    2 lowered to 2, in place (the authors' clamp of the parameters' data at
    each forward; an autograd error follows if a graph that used the old
    values is then differentiated).  NaN is refused, naming the parameter,
    as is an infinity the clamp leaves, or a value <= 0 where `eps` is 0
    in the parameters' dtype (1e-8 in float16) and cannot keep it positive.

    Parameters
    ----------
    n_heads : int
        The heads, >= 1.
    kind : {"log", "power"}
    causal : bool
    eps : float
        The least value of the parameters, > 0.

    Notes
    -----
    The values are formed in float64 and rounded once to the dtype asked
    for, whatever the parameters' dtype: ``.double()`` casts the
    parameters (their gradients are then float64), the bias stays in the
    scores' dtype.
    """

    def __init__(
        self, n_heads: int, *, kind: str = "log", causal: bool = True, eps: float = 1e-2
    ) -> None:
        super().__init__()
        self.n_heads = _validate.integer(n_heads, "n_heads", minimum=1)
        self.kind = _validate.choice(kind, "kind", ("log", "power"))
        self.causal = _validate.flag(causal, "causal")
        self.eps = float(_validate.real(eps, "eps", positive=True))
        if self.kind == "power" and self.eps > 2:
            raise ValueError(f"eps must be <= 2 for kind='power' (r2 lies in [eps, 2]), got {eps}")
        _validate.shape_size((self.n_heads,), "n_heads", 4, count=2)
        self.r1 = nn.Parameter(torch.empty(self.n_heads))
        self.r2 = nn.Parameter(torch.empty(self.n_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``r1`` and ``r2`` drawn again as the authors draw them."""
        scale1, scale2 = (2.0, 1.0) if self.kind == "log" else (1.0, 2.0)
        with torch.no_grad():
            self.r1.uniform_(0.0, scale1)
            self.r2.uniform_(0.0, scale2)

    def _project(self) -> None:
        """The authors' clamp: r1, r2 >= eps (and r2 <= 2 for the power
        kernel), in place, only where a value is outside."""
        top = 2.0 if self.kind == "power" else None
        with torch.no_grad():
            for name, p, high in (("r1", self.r1, None), ("r2", self.r2, top)):
                if torch.isnan(p).any():
                    raise ValueError(f"{name} must not be nan")
                outside = (p < self.eps) if high is None else (p < self.eps) | (p > high)
                if outside.any():
                    p.clamp_(min=self.eps, max=high)
                if not (p > 0).all():  # only where eps is 0 in the parameters' dtype
                    raise ValueError(
                        f"{name} must be > 0: eps = {self.eps} is 0 in {p.dtype}, the clamp "
                        "cannot keep it positive (give a larger eps)"
                    )

    def _bias(
        self, q_len: int, k_len: int, q_offset: int, causal: bool, dtype: torch.dtype
    ) -> torch.Tensor:
        self._project()
        if not _on_device_path(self.r1, self.r2):
            return kerple_bias(self.r1, self.r2, q_len, k_len, kind=self.kind, causal=causal,
                               q_offset=q_offset, dtype=dtype)  # fmt: skip
        device = _one_device((("r1", self.r1), ("r2", self.r2)))
        for name, p in (("r1", self.r1), ("r2", self.r2)):
            if not torch.isfinite(p).all():
                raise ValueError(f"{name} must be finite (found nan or inf)")
        work = _work_dtype(device)
        delta = _distances(q_len, k_len, q_offset, device, work)
        d = delta.abs()
        r1 = self.r1.to(work)[:, None, None]
        r2 = self.r2.to(work)[:, None, None]
        values = -r1 * (torch.log1p(r2 * d) if self.kind == "log" else torch.pow(d, r2))
        return _masked_future(values + 0.0, delta, causal).to(dtype)

    def extra_repr(self) -> str:
        return f"{self.n_heads}, kind={self.kind!r}, causal={self.causal}"


class SandwichBias(_DistanceBias):
    """Sandwich's attention bias (Chi et al., 2023; :func:`posenc.sandwich_bias`):
    ``(sum_{k=1}^{dim/2} cos((qpos - j) 10000 ** (-2k / dim)) - dim / 2) /
    ((h + 1) * 8 / n_heads)``.

    ``bias(q_len, k_len=None, *, q_offset=None, dtype=torch.float32,
    device=None)`` and ``forward(scores, *, q_offset=None)`` as
    :class:`KerpleBias`'s.  It learns nothing: the bias is made on the CPU
    (float64, rounded once) and moved to the scores' device; the
    ``state_dict`` is empty.

    Parameters
    ----------
    n_heads : int
        The heads, >= 1.
    dim : int
        ``d'`` of the paper (NeMo's ``hidden_size``), a positive even
        integer up to 65536.
    causal : bool
        True: ``-inf`` for the keys after each query; False: the symmetric
        bias, for encoders.
    """

    def __init__(self, n_heads: int, dim: int, *, causal: bool = True) -> None:
        super().__init__()
        self.n_heads = _validate.integer(n_heads, "n_heads", minimum=1)
        self.dim = _validate.even_dim(dim, "dim")
        if self.dim > 1 << 16:
            raise ValueError(
                f"dim must be <= 65536 (each distance takes dim / 2 cosines), got {dim}"
            )
        self.causal = _validate.flag(causal, "causal")
        # holds nothing: the device the module is moved to
        self.register_buffer("_anchor", torch.empty(0), persistent=False)

    def bias(
        self,
        q_len: int,
        k_len: Optional[int] = None,
        *,
        q_offset: Optional[int] = None,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
    ) -> torch.Tensor:
        """As :meth:`KerpleBias.bias`; `device` None is the module's."""
        return super().bias(
            q_len, k_len, q_offset=q_offset, dtype=dtype,
            device=self._anchor.device if device is None else device,
        )  # fmt: skip

    def _bias(
        self, q_len: int, k_len: int, q_offset: int, causal: bool, dtype: torch.dtype
    ) -> torch.Tensor:
        return sandwich_bias(self.n_heads, q_len, k_len, dim=self.dim, causal=causal,
                             q_offset=q_offset, dtype=dtype)  # fmt: skip

    def extra_repr(self) -> str:
        return f"{self.n_heads}, {self.dim}, causal={self.causal}"


class FireBias(_DistanceBias):
    """FIRE's attention bias (Li et al., 2024) with its MLP and scalars as
    parameters (:func:`posenc.fire_bias`): ``x = log(|c| d + 1) /
    (log(|c| max(qpos, L) + 1) + eps)`` with ``d = |qpos - j|``, the bias of
    head ``h`` the MLP's output ``h`` at ``x``.

    The parameters are the authors' module's (the paper's appendix), by
    their names: ``mlp``, ``Sequential(Linear(1, hidden), ReLU(),
    Linear(hidden, n_heads))`` in torch's default init; ``c``, the scale of
    the distances, initially `init_c` (0.1); ``L_multiplier``, initially 1,
    learned; ``init_L`` (a buffer), `init_L` (512); the threshold ``L =
    |L_multiplier * init_L|``.  A ``state_dict`` of the authors' module
    loads as it is.

    ``bias(q_len, k_len=None, *, q_offset=None, dtype=torch.float32,
    device=None)`` and ``forward(scores, *, q_offset=None)`` as
    :class:`KerpleBias`'s; ``causal=True`` (the paper's decoders) gives
    ``-inf`` to the keys after each query, ``causal=False`` the formula at
    ``|qpos - j|`` everywhere.  Values formed in float64, rounded once.

    Parameters
    ----------
    n_heads : int
        The heads, >= 1.
    hidden : int
        The MLP's width (32 in the paper), >= 1.
    causal : bool
    init_c, init_L : float
        The initial ``c`` (any finite real; only ``|c|`` matters) and the
        initial threshold (>= 0).
    eps : float
        Added to the normaliser (1e-6 as the authors), > 0.
    """

    def __init__(
        self,
        n_heads: int,
        *,
        hidden: int = 32,
        causal: bool = True,
        init_c: float = 0.1,
        init_L: float = 512.0,  # noqa: N803 - the authors' name
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.n_heads = _validate.integer(n_heads, "n_heads", minimum=1)
        self.hidden = _validate.integer(hidden, "hidden", minimum=1)
        self.causal = _validate.flag(causal, "causal")
        self.init_c = float(_validate.real(init_c, "init_c"))
        init_L = float(_validate.real(init_L, "init_L"))  # noqa: N806
        if init_L < 0:
            raise ValueError(f"init_L must be >= 0, got {init_L}")
        self.eps = float(_validate.real(eps, "eps", positive=True))
        # the MLP's weights and biases, at most (n_heads + 2) * (hidden + 1) floats
        _validate.shape_size((self.n_heads + 2, self.hidden + 1), "n_heads and hidden", 4)
        self.mlp = nn.Sequential(
            nn.Linear(1, self.hidden), nn.ReLU(), nn.Linear(self.hidden, self.n_heads)
        )
        self.c = nn.Parameter(torch.tensor(self.init_c))
        self.register_buffer("init_L", torch.tensor(init_L))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))

    def reset_parameters(self) -> None:
        """The MLP drawn again (torch's init), ``c`` and ``L_multiplier`` reset."""
        self.mlp[0].reset_parameters()
        self.mlp[2].reset_parameters()
        with torch.no_grad():
            self.c.fill_(self.init_c)
            self.L_multiplier.fill_(1.0)

    def threshold(self) -> torch.Tensor:
        """``L = |L_multiplier * init_L|``, differentiable."""
        return torch.abs(self.L_multiplier * self.init_L)

    def _bias(
        self, q_len: int, k_len: int, q_offset: int, causal: bool, dtype: torch.dtype
    ) -> torch.Tensor:
        w1, b1 = self.mlp[0].weight, self.mlp[0].bias
        w2, b2 = self.mlp[2].weight, self.mlp[2].bias
        threshold = self.threshold()
        if not _on_device_path(w1, b1, w2, b2, self.c, threshold):
            return fire_bias(w1, b1, w2, b2, self.c, threshold, q_len, k_len, eps=self.eps,
                             causal=causal, q_offset=q_offset, dtype=dtype)  # fmt: skip
        device = _one_device((("mlp", w1), ("c", self.c), ("L_multiplier", threshold)))
        for name, t in (("mlp", w1), ("mlp", b1), ("mlp", w2), ("mlp", b2), ("c", self.c),
                        ("L_multiplier", self.L_multiplier)):  # fmt: skip
            if not torch.isfinite(t).all():
                raise ValueError(f"{name} must be finite (found nan or inf)")
        work = _work_dtype(device)
        delta = _distances(q_len, k_len, q_offset, device, work)
        qpos = delta[:, 0]  # qpos - 0
        scale = self.c.to(work).abs()
        norm = torch.log1p(scale * torch.maximum(qpos, threshold.to(work))) + self.eps
        x = torch.log1p(scale * delta.abs()) / norm[:, None]
        hidden = torch.relu(x[..., None] * w1.to(work)[:, 0] + b1.to(work))
        values = (hidden @ w2.to(work).T + b2.to(work)).permute(2, 0, 1)
        return _masked_future(values, delta, causal).to(dtype)

    def extra_repr(self) -> str:
        return f"{self.n_heads}, hidden={self.hidden}, causal={self.causal}, eps={self.eps}"


class CoPE(nn.Module):
    """Contextual position encoding (Golovneva et al., 2024) with its
    position table as a parameter (:func:`posenc.cope_bias`).

    ``forward(query, attn_logits, *, q_offset=None)`` returns
    ``attn_logits + z``, ``z_ij`` the position logit of key ``j`` for query
    ``i`` (the gates ``sigmoid(attn_logits)`` summed from the key to the
    query, clipped at ``max_positions - 1``, the logits ``query . e[p]`` of
    the integer positions interpolated there), in the logits' dtype on their
    device.  `attn_logits` is ``(batch, n_heads, q_len, k_len)`` (``q
    k^T / sqrt(head_dim)``, the authors' input; ``-inf`` marks a masked
    key), `query` ``(batch, n_heads, q_len, head_dim)`` in layout
    ``"bhsd"`` or ``(batch, q_len, n_heads, head_dim)`` in ``"bshd"``.
    ``causal=True``: the gates of the keys after each query are 0 and those
    keys get ``-inf`` in the result (it also masks, as :class:`KerpleBias`);
    ``causal=False``: every key counts (an encoder).  `q_offset` is the
    position of the first query among the keys (by default ``k_len -
    q_len``).

    The parameter ``pos_emb`` is the authors' (the paper's appendix and
    their training code): ``(1, head_dim, max_positions)``, zeros at first,
    shared by the heads; a ``state_dict`` of their module loads as it is.

    Parameters
    ----------
    n_heads, head_dim, max_positions : int
        The heads, their width, and the positions ``0 .. max_positions -
        1`` (``npos_max``; the authors' training code takes the block size
        + 1), each >= 1.
    causal : bool
    layout : {"bhsd", "bshd"}
        Of `query`.
    """

    def __init__(
        self,
        n_heads: int,
        head_dim: int,
        max_positions: int,
        *,
        causal: bool = True,
        layout: str = "bhsd",
    ) -> None:
        super().__init__()
        self.n_heads = _validate.integer(n_heads, "n_heads", minimum=1)
        self.head_dim = _validate.integer(head_dim, "head_dim", minimum=1)
        self.max_positions = _validate.integer(max_positions, "max_positions", minimum=1)
        self.causal = _validate.flag(causal, "causal")
        self.layout = _validate.choice(layout, "layout", ("bhsd", "bshd"))
        _validate.shape_size((self.head_dim, self.max_positions), "head_dim and max_positions", 4)
        self.pos_emb = nn.Parameter(torch.zeros(1, self.head_dim, self.max_positions))

    def reset_parameters(self) -> None:
        """``pos_emb`` zeros again (the authors' init)."""
        with torch.no_grad():
            self.pos_emb.zero_()

    def forward(
        self, query: Any, attn_logits: Any, *, q_offset: Optional[int] = None
    ) -> torch.Tensor:
        q = _float_tensor(query, "query")
        logits = _float_tensor(attn_logits, "attn_logits")
        h, d = self.n_heads, self.head_dim
        if q.ndim != 4:
            raise ValueError(f"query must be 4-d in layout {self.layout!r}, got shape "
                             f"{tuple(q.shape)}")  # fmt: skip
        if self.layout == "bshd":
            q = q.transpose(1, 2)
        if q.shape[1] != h or q.shape[3] != d:
            want = (
                "(batch, {h}, q_len, {d})" if self.layout == "bhsd" else "(batch, q_len, {h}, {d})"
            )
            raise ValueError(
                f"query must be {want.format(h=h, d=d)} in layout {self.layout!r}, got shape "
                f"{tuple(query.shape)}"
            )
        if logits.ndim != 4 or logits.shape[:3] != q.shape[:3] or not logits.shape[3]:
            raise ValueError(
                f"attn_logits must be (batch, {h}, q_len, k_len) with query's batch "
                f"{q.shape[0]} and q_len {q.shape[2]}, k_len >= 1; got shape "
                f"{tuple(logits.shape)}"
            )
        q_len, k_len = logits.shape[2], logits.shape[3]
        if q_offset is None:
            q_offset = k_len - q_len
        else:
            q_offset = _validate.integer(q_offset, "q_offset")
        if _on_meta(q, logits, self.pos_emb):
            return torch.empty(logits.shape, dtype=logits.dtype, device="meta")
        if _on_device_path(q, logits, self.pos_emb):
            z = self._by_torch(q, logits, q_offset)
        else:
            z = cope_bias(_wide(q), _wide(logits), _wide(self.pos_emb), causal=self.causal,
                          q_offset=q_offset)  # fmt: skip
        # z is this call's own (and nothing its backward reads): the logits
        # and the mask go into it in place, z + logits being logits + z bit
        # for bit
        out = z.to(logits.dtype).add_(logits)
        if not self.causal:
            return out
        visible = self._visible(q_len, k_len, q_offset, logits.device)
        return out.masked_fill_(~visible, float("-inf"))

    @staticmethod
    def _visible(q_len: int, k_len: int, q_offset: int, device: torch.device) -> torch.Tensor:
        """(q_len, k_len) True where key ``j <= q_offset + i``."""
        first = min(max(q_offset, -q_len), k_len)  # the same keys seen, within int64
        i = torch.arange(q_len, device=device)[:, None] + first
        return torch.arange(k_len, device=device)[None, :] <= i

    def _by_torch(self, q: torch.Tensor, logits: torch.Tensor, q_offset: int) -> torch.Tensor:
        """The formula in torch's ops on the tensors' device (the device path)."""
        device = _one_device((("query", q), ("attn_logits", logits), ("pos_emb", self.pos_emb)))
        for name, t in (("query", q), ("pos_emb", self.pos_emb)):
            if not torch.isfinite(t).all():
                raise ValueError(f"{name} must be finite (found nan or inf)")
        if torch.isnan(logits).any() or torch.isposinf(logits).any():
            raise ValueError("attn_logits must be finite or -inf (masked), found nan or +inf")
        work = _work_dtype(device)
        gates = torch.sigmoid(logits.to(work))
        if self.causal:
            visible = self._visible(logits.shape[2], logits.shape[3], q_offset, device)
            gates = gates.masked_fill(~visible, 0.0)
        pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.max_positions - 1)
        low = pos.detach().floor()
        high = pos.detach().ceil().long()
        w = pos - low
        z = q.to(work) @ self.pos_emb[0].to(work)  # (batch, heads, q_len, max_positions)
        return z.gather(-1, high) * w + z.gather(-1, low.long()) * (1.0 - w)

    def extra_repr(self) -> str:
        return (f"{self.n_heads}, {self.head_dim}, {self.max_positions}, causal={self.causal}, "
                f"layout={self.layout!r}")  # fmt: skip
