"""What a measurement at a context length needs in memory, estimated from
the config before anything is loaded, and the memory the machine has free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from .. import _validate as v
from .._model_config import config_value

#: Bytes per element of the dtypes a model is loaded in.
DTYPE_BYTES: Dict[str, int] = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class MemoryEstimate:
    """The bytes a measurement at `length` tokens takes, by part.

    Attributes
    ----------
    length : int
        The context length.
    weights : int
        The parameters, in the dtype they are loaded in.
    kv_cache : int
        Keys and values of every layer for ``length`` tokens and the passkey's
        answer (``2 * layers * kv_heads * head_dim`` per token).
    logits : int
        The logits of a window (``length * vocab`` in the model's dtype) and
        the float32 log-probabilities of its loss.
    activations : int
        A layer's hidden states and feed-forward (``length * (4 * hidden +
        3 * intermediate)`` in the model's dtype); attention by a fused
        kernel (SDPA), without a ``length x length`` matrix of scores, or,
        with ``eager=True``, a layer's scores and weights as transformers'
        eager attention holds them (``heads * length**2`` in the model's
        dtype twice and float32 once) and their float64 reduction by
        :func:`~posenc.context.attention_by_distance` (``heads *
        length**2`` float64).
    """

    length: int
    weights: int
    kv_cache: int
    logits: int
    activations: int

    @property
    def total(self) -> int:
        """All of it, in bytes."""
        return self.weights + self.kv_cache + self.logits + self.activations

    def describe(self) -> str:
        """``about 3.2 GiB (weights 2.5 GiB, KV cache ..., ...)``."""
        parts = (
            ("weights", self.weights),
            ("KV cache", self.kv_cache),
            ("logits", self.logits),
            ("activations", self.activations),
        )
        inner = ", ".join(f"{name} {gib(b)}" for name, b in parts if b)
        return f"about {gib(self.total)} ({inner})"


def gib(n: float) -> str:
    """Bytes as GiB (MiB below one GiB), for messages."""
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.1f} MiB"


def dtype_bytes(dtype: Any) -> int:
    """The bytes per element of `dtype` (a name or a torch dtype)."""
    name = str(dtype).replace("torch.", "")
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[name]


def _text_config(config: Any) -> Any:
    if isinstance(config, dict):
        inner = config.get("text_config")
        return inner if isinstance(inner, dict) else config
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _int(config: Any, key: str, default: Optional[int] = None) -> int:
    value = config_value(config, key)
    if value is None:
        if default is None:
            raise ValueError(f"config: no {key}, which the memory estimate reads")
        return default
    return int(value)


def _sizes(config: Any) -> Tuple[int, int, int, int, int, int, int]:
    """``(hidden, layers, heads, kv_heads, head_dim, ffn, vocab)`` of a
    (text) config, with transformers' defaults where it states none."""
    c = _text_config(config)
    hidden, layers = _int(c, "hidden_size"), _int(c, "num_hidden_layers")
    heads = _int(c, "num_attention_heads")
    kv = _int(c, "num_key_value_heads", heads)
    head_dim = _int(c, "head_dim", hidden // heads)
    return (
        hidden,
        layers,
        heads,
        kv,
        head_dim,
        _int(c, "intermediate_size", 4 * hidden),
        _int(c, "vocab_size"),
    )


def parameters_of(config: Any) -> int:
    """The parameters of a Llama-shaped decoder with this config: the
    embedding (and an untied head), per layer the attention's q, k, v and
    o projections, a gated feed-forward and two norms."""
    hidden, layers, heads, kv, head_dim, ffn, vocab = _sizes(config)
    tied = bool(config_value(_text_config(config), "tie_word_embeddings"))
    attention = hidden * head_dim * (2 * heads + 2 * kv)
    per_layer = attention + 3 * hidden * ffn + 2 * hidden
    return vocab * hidden * (1 if tied else 2) + layers * per_layer + hidden


def estimate_memory(
    config: Any,
    length: int,
    *,
    dtype: Any = "float32",
    parameters: Optional[int] = None,
    new_tokens: int = 10,
    eager: bool = False,
) -> MemoryEstimate:
    """What one measurement at `length` tokens takes, from a transformers
    config (or config.json dict): see :class:`MemoryEstimate`.

    Parameters
    ----------
    config : transformers config or dict
        The model's (a multimodal one's text config is read).
    length : int
        The context length.
    dtype : str or torch dtype
        The dtype the model runs in.
    parameters : int, optional
        The model's parameter count, if known (else estimated from the
        config as a Llama-shaped decoder's; 0 leaves the weights out, for a
        model already loaded).
    new_tokens : int
        The tokens generated past `length` (the passkey's answer).
    eager : bool
        Attention by transformers' eager code, its weights read (what
        :func:`~posenc.context.attention_by_distance` runs).
    """
    length = v.integer(length, "length", minimum=1)
    eager = v.flag(eager, "eager")
    size = dtype_bytes(dtype)
    hidden, layers, heads, kv, head_dim, ffn, vocab = _sizes(config)
    scores = heads * length * length * (2 * size + 4 + 8) if eager else 0
    params = parameters_of(config) if parameters is None else int(parameters)
    return MemoryEstimate(
        length=length,
        weights=params * size,
        kv_cache=2 * layers * kv * head_dim * (length + new_tokens) * size,
        logits=length * vocab * (size + 4),
        activations=length * (4 * hidden + 3 * ffn) * size + scores,
    )


def _meminfo_available() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_available() -> Optional[int]:
    """The room left under a cgroup v2 memory limit (a container's), if any."""
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


def free_memory(device: Any = "cpu") -> Optional[int]:
    """The bytes free on `device` now: a CUDA device's free memory, or the
    machine's available memory (``MemAvailable``, within a container's
    cgroup limit) for the CPU; None where it cannot be known (then no
    length is refused for it)."""
    kind = str(getattr(device, "type", device)).split(":")[0]
    if kind == "cuda":
        from ._common import torch_module

        torch = torch_module("free_memory")
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    if kind != "cpu":
        return None
    found = [n for n in (_meminfo_available(), _cgroup_available()) if n is not None]
    if not found and hasattr(os, "sysconf"):
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            pass
    return min(found) if found else None
