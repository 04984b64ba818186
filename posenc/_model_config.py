"""Values read from a model's configuration as transformers holds it.

A configuration comes as a transformers config object (read by attribute,
transformers never imported) or as a config.json dict (read by key);
:func:`config_value` reads one value from either, and :func:`layer_config`
picks one layer type's view of a heterogeneous config.  posenc.rope_scaling,
posenc.torch and posenc.hf read configurations through these two.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Optional


def config_value(config: Any, key: str, *, strict: bool = False) -> Any:
    """``config[key]`` of a dict or ``config.key`` of a config object, None
    where it has none.  An attribute that raises when read (a per-layer
    value of a heterogeneous config) is None, or with `strict` a ValueError
    that says to choose a layer type."""
    if isinstance(config, Mapping):
        return config.get(key)
    try:
        return getattr(config, key, None)
    except Exception as exc:  # a config property that raises
        if not strict:
            return None
        raise ValueError(
            f"scaling.{key} cannot be read from the config ({exc}); pass layer_type= to read "
            "the values of one layer type"
        ) from exc


def layer_config(config: Any, layer_type: Optional[str]) -> Any:
    """The config of one layer type: transformers' per-layer view of a
    heterogeneous config (Gemma 4's full-attention layers have their own
    head_dim), else `config` itself."""
    if layer_type is None or isinstance(config, Mapping):
        return config
    try:
        return config.per_layer_config[layer_type]
    except Exception:  # no per-layer configs, or none for this layer type
        return config


def copied(config: Any, name: str) -> Any:
    """A private deep copy of `config` (argument `name`), whose reader later
    edits of the caller's config (or of its dicts) do not reach; a
    TypeError naming `name` for one that cannot be copied."""
    try:
        return copy.deepcopy(config)
    except Exception as exc:
        raise TypeError(
            f"{name}: a {type(config).__name__} that cannot be copied ({exc}); pass a dict"
        ) from exc
