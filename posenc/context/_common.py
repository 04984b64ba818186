"""What the measurements share: torch and transformers imported when used,
the arguments read (token ids, lengths, methods), a rotary model found, the
model's device, and the progress bar drawn on a terminal.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, TypeVar, overload

import numpy as np

from .. import _validate as v
from .._typing import PathLike
from ..probe._optional import require
from ..probe._plots import _figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_PathT = TypeVar("_PathT", bound=PathLike)


def torch_module(purpose: str) -> ModuleType:
    """torch (of posenc's ``context`` extra), or an ImportError saying how to get it."""
    return require("torch", purpose, extra="context")


# ---------------------------------------------------------------- arguments


def token_ids(tokens: Any, name: str = "tokens", vocab: Optional[int] = None) -> np.ndarray:
    """`tokens` as a 1-D int64 array: a sequence of ints, a NumPy array or a
    torch tensor (of one row); each id in ``[0, vocab)`` when `vocab` is known."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"{name} must be token ids (a sequence of ints), not text")
    if hasattr(tokens, "detach"):  # a torch tensor
        tokens = tokens.detach().cpu().numpy()
    ids = np.asarray(tokens)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
        raise TypeError(
            f"{name} must be a 1-D sequence of integer token ids, got an array of shape "
            f"{ids.shape} and dtype {ids.dtype}"
        )
    ids = ids.astype(np.int64)
    if ids.size and (ids.min() < 0 or (vocab is not None and ids.max() >= vocab)):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise ValueError(f"{name}: token id {bad} is outside the model's vocabulary [0, {vocab})")
    return ids


def lengths_of(lengths: Any, minimum: int = 2) -> Tuple[int, ...]:
    """`lengths` checked: one int or a sequence of distinct ints >= `minimum`, sorted."""
    if isinstance(lengths, (int, np.integer)) and not isinstance(lengths, bool):
        lengths = [lengths]
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be an int or a sequence of ints, not {lengths!r}")
    out = [v.integer(n, "lengths", minimum=minimum) for n in lengths]
    if not out:
        raise ValueError("lengths must hold at least one length")
    if len(set(out)) != len(out):
        raise ValueError(f"lengths must be distinct, got {out}")
    return tuple(sorted(out))


def method_label(method: Any) -> str:
    """What a scaling method is called in tables and plots: a string as it
    is, a rope dict by its type and keys, a config by its class and rope type."""
    if isinstance(method, str):
        return method
    if isinstance(method, Mapping):
        kind = method.get("rope_type", method.get("type", "?"))
        rest = ",".join(
            f"{k}={method[k]}" for k in sorted(method) if k not in ("rope_type", "type")
        )
        return f"{kind}:{rest}" if rest else str(kind)
    params = getattr(method, "rope_parameters", None) or getattr(method, "rope_scaling", None)
    kind = params.get("rope_type", "?") if isinstance(params, Mapping) else "?"
    return f"{type(method).__name__}({kind})"


def methods_of(methods: Any) -> Dict[str, Any]:
    """``{label: method}``: a sequence of methods (each labelled by
    :func:`method_label`), or a mapping of labels to methods."""
    if isinstance(methods, (str, Mapping)) and not _is_label_map(methods):
        methods = [methods]
    if _is_label_map(methods):
        out = {str(k): m for k, m in methods.items()}
    else:
        if not hasattr(methods, "__iter__"):
            raise TypeError(f"methods must be a sequence of scaling methods, not {methods!r}")
        out = {}
        for m in methods:
            label = method_label(m)
            if label in out:
                raise ValueError(f"methods: {label!r} is given twice")
            out[label] = m
    if not out:
        raise ValueError('methods must hold at least one method ("none": the model as loaded)')
    for label, m in out.items():
        if not isinstance(m, (str, Mapping)) and not hasattr(m, "to_dict"):
            raise TypeError(
                f"methods: {label!r} must be a string ('yarn:4'), a rope dict or a "
                f"transformers config, not {type(m).__name__}"
            )
    return out


def _is_label_map(methods: Any) -> bool:
    """A mapping of labels to methods (not one rope dict, which has ``rope_type``)."""
    return (
        isinstance(methods, Mapping)
        and "rope_type" not in methods
        and "type" not in methods
        and all(isinstance(m, (str, Mapping)) or hasattr(m, "to_dict") for m in methods.values())
    )


# ---------------------------------------------------------------- the model


def device_of(model: Any) -> Any:
    """The device of the model's first parameter (the CPU without any)."""
    for p in model.parameters():
        return p.device
    return torch_module("posenc.context").device("cpu")


def vocab_size(model: Any) -> Optional[int]:
    """The rows of the model's input embedding (None where it has none)."""
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    n = getattr(emb, "num_embeddings", None)
    return int(n) if isinstance(n, int) else None


def rotary_modules(model: Any) -> List[str]:
    """The names of the model's rotary modules (``*RotaryEmbedding``)."""
    return [
        name
        for name, m in model.named_modules()
        if type(m).__name__.endswith(("RotaryEmbedding", "RotaryEmbeddings"))
    ]


def check_rotary(model: Any, where: str = "model") -> None:
    """A ValueError naming what `model` holds when it has no rotary module."""
    if rotary_modules(model):
        return
    raise ValueError(not_rotary(getattr(model, "config", None), where))


def not_rotary(config: Any, where: str) -> str:
    """The one line of a model that is not rotary: its type and its position code."""
    from ..probe.biases import model_kind

    model_type = getattr(config, "model_type", None)
    if isinstance(config, Mapping):
        model_type = config.get("model_type")
    kind = model_kind(config) if config is not None else "absolute"
    found = {
        "alibi": "ALiBi biases",
        "t5": "T5's relative bucket biases",
        "relative": "relative position terms (DeBERTa, XLNet)",
        "absolute": "no rotary module (a learned or fixed position table, or none)",
        "rope": "a rotary config but no *RotaryEmbedding module posenc can patch",
    }[kind]
    return (
        f"{where} ({model_type or 'unknown type'}) has {found}; the context measurements "
        "apply to rotary (RoPE) models, whose scaling they change"
    )


def max_positions(model: Any) -> Optional[int]:
    """The config's ``max_position_embeddings`` (None without one)."""
    n = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else None


# ---------------------------------------------------------------- progress


def is_terminal(stream: Any) -> bool:
    """Whether `stream` is a terminal (a progress bar is drawn only there)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """A one-line progress bar on stderr, drawn only when `enabled` and
    stderr is a terminal; :meth:`step` advances it, saying what runs."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done = max(1, total), 0
        self.enabled = bool(enabled) and is_terminal(sys.stderr)

    def step(self, what: str, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        width = 24
        filled = width * min(self.done, self.total) // self.total
        bar = "#" * filled + "." * (width - filled)
        sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {what[:50]:<50}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def floats(values: Any) -> List[Optional[float]]:
    """Plain floats for JSON, NaN as None."""
    return [None if not np.isfinite(x) else float(x) for x in values]


class evaluating:
    """Within this block `model` is in eval mode (no dropout); its own
    ``training`` flags are restored after."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.flags: List[Tuple[Any, bool]] = []

    def __enter__(self) -> Any:
        self.flags = [(m, m.training) for m in self.model.modules()]
        self.model.eval()
        return self.model

    def __exit__(self, *exc: Any) -> None:
        for m, flag in self.flags:
            m.training = flag


class Plotted:
    """The ``plot`` of a result: its :meth:`_draw` on a figure of
    ``_size`` inches."""

    _size: Tuple[float, float] = (6.4, 4.8)

    def _draw(self, fig: Any) -> None:  # pragma: no cover - each result has its own
        raise NotImplementedError

    @overload
    def plot(self, path: None = None, *, dpi: float = 110) -> Figure: ...

    @overload
    def plot(self, path: _PathT, *, dpi: float = 110) -> _PathT: ...

    def plot(self, path: Optional[PathLike] = None, *, dpi: float = 110) -> Any:
        """The result's figure (its class says what it shows), or the figure
        written to `path` (as :meth:`posenc.probe.ProbeReport.plot`)."""
        return _figure(path, dpi, self._size, self._draw)
