"""Finding a position-embedding table in a checkpoint file, a model directory,
a state dict or a model: :func:`load_position_embeddings` and the file formats
it reads (``.npy``, ``.npz``, ``.safetensors``, torch checkpoints).
"""

from __future__ import annotations

import importlib
import json
import os
import struct
from collections.abc import Mapping

import numpy as np

from .analyses import _to_numpy

# ---------------------------------------------------------------- loading a table

#: Names of position-embedding tables in Hugging Face checkpoints: GPT-2
#: (``wpe``), BERT/RoBERTa/ELECTRA (``embeddings.position_embeddings``),
#: BART/OPT/Whisper/XGLM (``embed_positions``); any prefix before them.
KNOWN_KEYS = ("wpe.weight", "embeddings.position_embeddings.weight", "embed_positions.weight")

_TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
_SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",  # widened to float32 below
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
}


class _SafetensorsFile:
    """The tensors of a ``.safetensors`` file, read one at a time.

    The format is an 8-byte little-endian header length, a JSON header
    ``{name: {dtype, shape, data_offsets}}`` and the raw bytes; reading it
    here takes no dependency, reads only the tensor asked for (not a whole
    checkpoint), and handles bfloat16, which NumPy has no dtype for.
    """

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(f"source: {path} is not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", raw)
            if length > 100_000_000:
                raise ValueError(f"source: {path} is not a safetensors file (bad header)")
            try:
                header = json.loads(f.read(length))
            except (UnicodeDecodeError, ValueError) as exc:
                raise ValueError(f"source: {path} is not a safetensors file ({exc})") from exc
        if not isinstance(header, dict):
            raise ValueError(f"source: {path} is not a safetensors file (bad header)")
        header.pop("__metadata__", None)
        self.header = header
        self.data_start = 8 + length

    def keys(self):
        return list(self.header)

    def __getitem__(self, key):
        info = self.header[key]
        dtype = _SAFETENSORS_DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise ValueError(f"{key}: safetensors dtype {info.get('dtype')} is not supported")
        begin, end = info["data_offsets"]
        with open(self.path, "rb") as f:
            f.seek(self.data_start + begin)
            data = f.read(end - begin)
        arr = np.frombuffer(data, dtype=dtype)
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr.astype(arr.dtype.newbyteorder("="), copy=True).reshape(info["shape"])


class _ShardedTensors:
    """Several safetensors shards seen as one mapping (a sharded checkpoint)."""

    def __init__(self, files):
        self.where = {}
        for f in files:
            for k in f.keys():
                self.where.setdefault(k, f)

    def keys(self):
        return list(self.where)

    def __getitem__(self, key):
        return self.where[key][key]


def _flatten(mapping, prefix=""):
    """Nested checkpoint dicts (``{"model": {...}}``) as one dotted mapping."""
    flat = {}
    for k, value in mapping.items():
        name = f"{prefix}{k}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _torch_load(path):
    torch = _require_torch(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a file it cannot read
        lines = str(exc).strip().splitlines()
        message = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        raise ValueError(f"source: cannot read {path} with torch.load ({message})") from exc
    if not isinstance(obj, Mapping):
        if hasattr(obj, "shape"):
            return {"": obj}
        raise ValueError(f"source: {path} holds a {type(obj).__name__}, not a state dict")
    return _flatten(obj)


def _require_torch(path):
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise ImportError(f"reading {path} needs torch (pip install torch)") from exc


def _open_path(path):
    """A mapping of the tensors stored at `path` (file or model directory)."""
    if os.path.isdir(path):
        entries = sorted(os.listdir(path))
        tensors = [e for e in entries if e.endswith(".safetensors")]
        if tensors:
            return _ShardedTensors([_SafetensorsFile(os.path.join(path, e)) for e in tensors])
        torch_files = [e for e in entries if e.endswith(_TORCH_SUFFIXES)]
        if torch_files:
            merged = {}
            for e in torch_files:
                merged.update(_torch_load(os.path.join(path, e)))
            return merged
        raise ValueError(f"source: no .safetensors, .bin, .pt or .pth file in the directory {path}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"source: no such file or directory: {path}")
    lower = path.lower()
    if lower.endswith(".npy"):
        try:
            return np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"source: cannot read {path} as .npy: {exc}") from exc
    if lower.endswith(".npz"):
        try:
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"source: cannot read {path} as .npz: {exc}") from exc
    if lower.endswith(".safetensors"):
        return _SafetensorsFile(path)
    if lower.endswith(_TORCH_SUFFIXES):
        return _torch_load(path)
    raise ValueError(
        f"source: {path} is not a .npy, .npz, .safetensors or torch (.bin, .pt, .pth, .ckpt) "
        "file, nor a model directory"
    )


def _list_keys(keys, limit=12):
    keys = list(keys)
    # The keys a person is looking for first: those that mention positions.
    keys.sort(key=lambda k: (("pos" not in k.lower()) and ("embed" not in k.lower()), k))
    shown = ", ".join(keys[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"{shown}{more}" if keys else "(none)"


def _select(tensors, key, where):
    """The table under `key`, or under the one known key the mapping holds."""
    keys = list(tensors.keys())
    if key is not None:
        if not isinstance(key, str):
            raise TypeError(f"key must be a string, not {type(key).__name__}")
        if key not in keys:
            raise ValueError(f"key {key!r} not found in {where}; keys seen: {_list_keys(keys)}")
        return tensors[key], key
    found = [k for k in keys if any(k == s or k.endswith("." + s) for s in KNOWN_KEYS)]
    if len(found) == 1:
        return tensors[found[0]], found[0]
    if len(keys) == 1 and len(found) == 0:
        return tensors[keys[0]], keys[0]
    if found:
        raise ValueError(
            f"{where} holds several position tables ({', '.join(found)}); "
            "choose one with key (--key on the command line)"
        )
    raise ValueError(
        f"no position-embedding table found in {where} (looked for keys ending in "
        f"{', '.join(KNOWN_KEYS)}); name it with key (--key on the command line). "
        f"Keys seen: {_list_keys(keys)}"
    )


def _load(source, key=None):
    """``(table, key_used)``; `key_used` is None for a bare array."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        stored = _open_path(path)
        where = path
        if isinstance(stored, np.ndarray):
            if key is not None:
                raise ValueError(f"key: {path} holds a single array, so key must be None")
            return stored, None
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
    table, used = _select(stored, key, where)
    return table, used


def load_position_embeddings(source, *, key=None):
    """Find the position-embedding table in a file, a state dict or a model.

    Parameters
    ----------
    source : str, os.PathLike, mapping, model or array
        - a ``.npy`` file (the table itself) or a ``.npz`` file;
        - a ``.safetensors`` file, or a model directory holding
          ``*.safetensors`` files (sharded checkpoints included);
        - a torch checkpoint (``.bin``, ``.pt``, ``.pth``, ``.ckpt``; needs
          torch, loaded with ``weights_only=True``);
        - an in-memory state dict (nested dicts are flattened with dots), or
          any object with ``state_dict()`` such as a transformers model;
        - an array or tensor, returned as it is (checked to be 2-D).
    key : str, optional
        The name of the table.  By default the one key ending in
        ``wpe.weight`` (GPT-2), ``embeddings.position_embeddings.weight``
        (BERT, RoBERTa) or ``embed_positions.weight`` (BART, OPT), with any
        prefix; a source holding a single array needs none.

    Returns
    -------
    ndarray of shape (n_positions, dim)
        The stored values (bfloat16 widened to float32).

    Raises
    ------
    FileNotFoundError
        The path does not exist.
    ValueError
        Not a readable file, no table found (the message lists the keys
        seen), several candidates, or not 2-D.

    Notes
    -----
    RoBERTa-family and BART/OPT tables keep two reserved rows before
    position 0 (RoBERTa-base has 514 rows for 512 positions): probe
    ``E[2:]`` to compare with the paper's 512 positions.
    """
    table, used = _load(source, key)
    arr = _to_numpy(table)
    if arr.ndim != 2:
        what = f"the table under {used!r}" if used else "the table"
        raise ValueError(f"{what} must be 2-D (n_positions, dim), got shape {arr.shape}")
    return arr
