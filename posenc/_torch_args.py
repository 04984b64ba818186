"""The arguments of posenc.torch's modules, checked: tensors by kind,
devices, and a tensor moved to a device, each error naming the argument.

Shared by ``posenc/torch.py`` and ``posenc/_torch_modules.py`` (torch is
imported here: only the modules import this file).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def tensor(value: Any, name: str) -> torch.Tensor:
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be a torch tensor, got {type(value).__name__}")
    return value


def float_tensor(value: Any, name: str) -> torch.Tensor:
    t = tensor(value, name)
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a float16, bfloat16, float32 or float64 tensor, got {t.dtype}"
        )
    return t


def device(value: Any) -> torch.device:
    """`device=`: a torch.device or a string torch reads as one."""
    if isinstance(value, torch.device):
        return value
    if not isinstance(value, str):
        raise TypeError(f"device must be a string or a torch.device, not {type(value).__name__}")
    try:
        return torch.device(value)
    except RuntimeError as exc:
        raise ValueError(f"device {value!r} is not a device torch knows ({exc})") from exc


def to(t: torch.Tensor, target: torch.device) -> torch.Tensor:
    """`t` on `target` (differentiably: autograd follows the copy)."""
    if t.device == target:
        return t
    try:
        return t.to(target)
    except (RuntimeError, AssertionError) as exc:  # a device this torch cannot use
        raise ValueError(f"device {str(target)!r} cannot be used here ({exc})") from exc


def on_meta(*tensors: Optional[torch.Tensor]) -> bool:
    return any(t is not None and t.device.type == "meta" for t in tensors)


def scores(value: Any, n_heads: int) -> torch.Tensor:
    """`scores=` checked: a float (batch, n_heads, q_len >= 1, k_len >= 1) tensor."""
    t = float_tensor(value, "scores")
    if t.ndim != 4 or t.shape[1] != n_heads:
        raise ValueError(
            f"scores must be a (batch, {n_heads}, q_len, k_len) tensor, got shape {tuple(t.shape)}"
        )
    if not (t.shape[2] and t.shape[3]):
        raise ValueError(f"scores must have q_len >= 1 and k_len >= 1, got shape {tuple(t.shape)}")
    return t


def available_device(name: str) -> torch.device:
    """`name` as a torch device this machine has (a ValueError saying what it lacks)."""
    try:
        found = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"device {name!r} is not a torch device ({exc})") from None
    has = {
        "cpu": lambda: True,
        "cuda": lambda: torch.cuda.is_available(),
        "mps": lambda: torch.backends.mps.is_available(),
    }.get(found.type, lambda: True)
    if not has():
        raise ValueError(f"device {name!r}: this machine's torch has no {found.type} device")
    return found
