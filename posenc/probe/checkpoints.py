"""Finding a position-embedding table in a checkpoint file, a model directory,
a state dict or a model: :func:`load_position_embeddings` and the file formats
it reads (``.npy``, ``.npz``, ``.safetensors``, torch checkpoints).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Optional, Tuple

import numpy as np

from .._typing import NDArray
from ._readers import KNOWN_KEYS as KNOWN_KEYS  # the tables' names, public here
from ._readers import _flatten, _is_known, _NpyFile, _open_path, _shown
from ._tables import _check_rows, _to_numpy

# ---------------------------------------------------------------- the table's key


def _list_keys(keys, limit=12):
    keys = [_shown(k) for k in keys]
    # The keys a person is looking for first: those that mention positions.
    keys.sort(key=lambda k: (("pos" not in k.lower()) and ("embed" not in k.lower()), k))
    shown = ", ".join(keys[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"{shown}{more}" if keys else "(none)"


def _choose(keys, key, where):
    """The name of the table: `key`, or the one known key among `keys`."""
    if key is not None:
        if not isinstance(key, str):
            raise TypeError(f"key must be a string, not {type(key).__name__}")
        if key not in keys:
            raise ValueError(f"key {key!r} not found in {where}; keys seen: {_list_keys(keys)}")
        return key
    found = [k for k in keys if _is_known(k)]
    if len(found) == 1:
        return found[0]
    if len(keys) == 1 and len(found) == 0:
        return keys[0]
    if found:
        raise ValueError(
            f"{where} holds several position tables ({', '.join(map(_shown, found))}); "
            "choose one with key (--key on the command line)"
        )
    raise ValueError(
        f"no position-embedding table found in {where} (looked for keys ending in "
        f"{', '.join(KNOWN_KEYS)}){_without_table(keys)}; name it with key (--key on the "
        f"command line). Keys seen: {_list_keys(keys)}"
    )


def _without_table(keys):
    """What a checkpoint without a table holds instead, by its keys: T5's
    relative biases, or per-layer query projections (a RoPE model's)."""
    import re

    if any(k.endswith("relative_attention_bias.weight") for k in keys):
        return (
            ": it is a T5-style model, whose positions are learned relative attention "
            "biases (…relative_attention_bias.weight), not a table of absolute positions"
        )
    if any(re.search(r"layers\.\d+\.self_attn\.q_proj\.weight$", k) for k in keys):
        return (
            ": it has per-layer q_proj weights and no table, as a RoPE model (Llama-like) "
            "has; if it is one, --analyses rope_usage (probe.rope_frequency_usage_from_checkpoint) "
            "measures how its heads use the rotary frequencies"
        )
    return ""


def _load(
    source: Any,
    key: Optional[str] = None,
    *,
    max_rows: Optional[int] = None,
    **hub_limits: Any,
) -> Tuple[Any, Optional[str]]:
    """``(table, key_used)``; `key_used` is None for a bare array.

    With `max_rows`, a file whose header gives the table's shape (``.npy``,
    ``.npz``, ``.safetensors``) is refused before its data is read when the
    table has more rows (the command line's bound).  `hub_limits`
    (``timeout``, ``deadline``, ``max_bytes``) are a Hub name's, checked
    whatever the source."""
    from . import hub

    hub._check_limits(**hub_limits)
    if isinstance(source, str) and _hub_name(source):
        fetched = hub.fetch(source, key=key, max_rows=max_rows, **hub_limits)
        return fetched.table, fetched.key
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        stored = _open_path(path)
        where = path
        if isinstance(stored, _NpyFile):
            if key is not None:
                raise ValueError(f"key: {path} holds a single array, so key must be None")
            _check_declared_rows(stored.shape, f"the table in {path}", max_rows)
            return stored.read(), None
    elif isinstance(source, Mapping):
        stored, where = _flatten(source), "the state dict"
    elif callable(getattr(source, "state_dict", None)):
        stored, where = source.state_dict(), f"the {type(source).__name__}'s state dict"
    elif isinstance(source, np.ndarray) or hasattr(source, "__array__"):
        if key is not None:
            raise ValueError("key: source is an array, so key must be None")
        return source, None
    else:
        raise TypeError(
            "source must be a path, a state dict, a model with state_dict() or an array, "
            f"not {type(source).__name__}"
        )
    used = _choose(list(stored.keys()), key, where)
    if max_rows is not None and callable(getattr(stored, "shape", None)):
        _check_declared_rows(stored.shape(used), f"the table in {where} [{used}]", max_rows)
    return stored[used], used


def _hub_name(source):
    from .hub import is_hub_name

    return is_hub_name(source)


def _check_declared_rows(shape, name, max_rows):
    if shape is not None and len(shape) == 2:
        _check_rows(shape[0], name, max_rows)


def load_position_embeddings(
    source: object,
    *,
    key: Optional[str] = None,
    timeout: Optional[float] = None,
    deadline: Optional[float] = None,
    max_bytes: Optional[int] = None,
) -> NDArray[Any]:
    """Find the position-embedding table in a file, a state dict or a model.

    Parameters
    ----------
    source : str, os.PathLike, mapping, model or array
        - a ``.npy`` file (the table itself) or a ``.npz`` file;
        - a ``.safetensors`` file, or a model directory holding
          ``*.safetensors`` files (sharded checkpoints included);
        - a torch checkpoint (``.bin``, ``.pt``, ``.pth``, ``.ckpt``; needs
          torch, loaded with ``weights_only=True``), or a directory of them;
        - a sharded checkpoint's index (``model.safetensors.index.json``,
          ``pytorch_model.bin.index.json``), which a model directory holding
          one is read through: only the shard holding the table is read;
        - an in-memory state dict (nested dicts are flattened with dots), or
          any object with ``state_dict()`` such as a transformers model;
        - an array or tensor, returned as it is (checked to be 2-D);
        - the name of a model on the Hugging Face Hub (``"gpt2"``,
          ``"org/name"``, ``"org/name@revision"``: a string that is not an
          existing path), read through ``huggingface_hub`` (``pip install
          "posenc[hub]"``): only the safetensors header and the table's
          bytes are fetched, by HTTP range requests, and cached so that a
          second run works offline.
    key : str, optional
        The name of the table.  By default the one key ending in
        ``wpe.weight`` (GPT-2), ``embeddings.position_embeddings.weight``
        (BERT, RoBERTa) or ``embed_positions.weight`` (BART, OPT), with any
        prefix; a source holding a single array needs none.
    timeout : float, optional
        A Hub name only: the seconds each HTTP request may wait to connect
        and for its next bytes.  Default: ``HF_HUB_ETAG_TIMEOUT`` for the
        model info, ``HF_HUB_DOWNLOAD_TIMEOUT`` for the files (whole
        seconds, as huggingface_hub reads them), else 10.
    deadline : float, optional
        A Hub name only: the seconds the whole load may take, however the
        server stalls or trickles.  Default: ``POSENC_HUB_DEADLINE``, else
        120.
    max_bytes : int, optional
        A Hub name only: the largest table fetched, by its declared shape
        and dtype (and data offsets), checked before any of its bytes are
        asked for.  Default: ``POSENC_HUB_MAX_BYTES``, else 256 MiB.

    Returns
    -------
    ndarray of shape (n_positions, dim)
        The stored values (bfloat16 widened to float32).

    Raises
    ------
    FileNotFoundError
        The path does not exist.
    OSError
        A Hub model that cannot be read (:class:`~posenc.probe.HubError`:
        missing, gated, no safetensors weights, no network or offline with
        nothing cached, no answer within `timeout`, past the `deadline`, a
        redirect loop, an answer that is not what was asked for); the
        message is one line naming the repository and what to do.
    ValueError
        Not a regular file (a FIFO, a device or a socket is refused without
        being opened, in a model directory too), not a readable or valid
        file (a safetensors header out of bounds or inconsistent, an ``.npy``
        header declaring more data than the file holds, an index naming a
        shard outside its directory), no table found (the message lists the
        keys seen), several candidates, or not 2-D; a Hub name or revision
        that is not one, a Hub table declared larger than `max_bytes`.
    TypeError
        `timeout`, `deadline` or `max_bytes` not a number.

    Notes
    -----
    Only the table is read: one member of an ``.npz`` (and of it only the
    bytes its header declares, so a compressed member cannot inflate past
    its shape), one tensor of a ``.safetensors`` file, one shard of an
    indexed checkpoint.  A torch file is read whole by ``torch.load``.


    RoBERTa-family and BART/OPT tables keep two reserved rows before
    position 0 (RoBERTa-base has 514 rows for 512 positions): probe
    ``E[2:]`` to compare with the paper's 512 positions.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "weights.npz")
    >>> np.savez(path, **{"embeddings.position_embeddings.weight": np.eye(4, 3)})
    >>> load_position_embeddings(path)
    array([[1., 0., 0.],
           [0., 1., 0.],
           [0., 0., 1.],
           [0., 0., 0.]])
    """
    table, used = _load(source, key, timeout=timeout, deadline=deadline, max_bytes=max_bytes)
    arr = _to_numpy(table)
    if arr.ndim != 2:
        what = f"the table under {used!r}" if used else "the table"
        raise ValueError(f"{what} must be 2-D (n_positions, dim), got shape {arr.shape}")
    return arr
