"""The checkpoint file formats posenc reads, each bounded and checked before
anything of a declared size is made: ``.npy``, ``.npz``, ``.safetensors``,
torch checkpoints, their ``.index.json`` indexes and model directories
(:func:`_open_path`), the bounded JSON reader (:func:`_read_json`), and
the choice of the table among a checkpoint's keys (:func:`choose_key`).

posenc.probe.checkpoints finds a table in them; posenc.probe.hub, the
attention, bias and RoPE probes read their tensors through them.  The names
keep the underscore they had in posenc.probe.checkpoints, but for
:func:`choose_key`, which the table loader and the Hub's downloads share.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import Tuple

import numpy as np

# ---------------------------------------------------------------- loading a table

#: Names of position-embedding tables in Hugging Face checkpoints: GPT-2
#: (``wpe``), BERT/RoBERTa/ELECTRA (``embeddings.position_embeddings``),
#: BART/OPT/Whisper/XGLM (``embed_positions``); any prefix before them.
KNOWN_KEYS: Tuple[str, ...] = (
    "wpe.weight",
    "embeddings.position_embeddings.weight",
    "embed_positions.weight",
)

_TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
_INDEX_SUFFIX = ".index.json"  # model.safetensors.index.json, pytorch_model.bin.index.json

#: Bound on a safetensors header and a checkpoint index, in bytes: the bound the
#: safetensors format itself sets on its header.
_JSON_MAX_BYTES = 100_000_000
#: Deepest nesting of ``[`` and ``{`` read in such JSON (a valid header needs 3).
_JSON_MAX_DEPTH = 64
#: Deepest nesting of the dicts of a checkpoint (``{"model": {"encoder": ...}}``).
_MAX_NESTING = 64

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
# Bytes per element of every fixed-size dtype the safetensors format names
# (read or not): what checks that a tensor's offsets match its shape.
_SAFETENSORS_ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
}


# ---------------------------------------------------------------- files, safely


def _kind(mode):
    """What a non-regular file is, for a message."""
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _not_regular(path, mode):
    return ValueError(
        f"source: {path} is {_kind(mode)}, not a regular file; "
        "give a checkpoint file or a model directory"
    )


def _regular_size(path):
    """The size of `path`, which must be a regular file (symbolic links
    followed).  Found with ``os.stat``, so a FIFO, a device or a socket is
    refused without being opened: opening a FIFO waits for a writer, and
    reading a device may never end."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(path, info.st_mode)
    return info.st_size


def _open_regular(path):
    """`path` opened to read bytes, refused unless it is a regular file.

    Checked before opening (:func:`_regular_size`), and again on the open
    descriptor in case the path was swapped in between; the open itself does
    not wait (``O_NONBLOCK``) should it meet a FIFO after all."""
    _regular_size(path)
    flags = os.O_RDONLY
    for name in ("O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC", "O_BINARY"):
        flags |= getattr(os, name, 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, info.st_mode)
        if flags & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)  # reads of a regular file do not wait anyway
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_exactly(f, nbytes, what):
    """Exactly `nbytes` bytes of `f`, as an aligned uint8 array (a ValueError
    when the file ends first).  Used where `nbytes` was checked against the
    file's size first."""
    out = np.empty(nbytes, dtype=np.uint8)
    view = memoryview(out)
    done = 0
    while done < nbytes:
        got = f.readinto(view[done:])
        if not got:
            raise ValueError(f"{what}: the data ends after {done} of {nbytes} bytes")
        done += got
    return out


def _read_stream(f, nbytes, what):
    """Exactly `nbytes` bytes of a stream whose length is not known (a
    compressed member): memory grows only as data arrives, so a header that
    declares more than the stream holds costs no more than what it holds, and
    nothing past `nbytes` is decompressed."""
    data = bytearray()
    while len(data) < nbytes:
        chunk = f.read(min(nbytes - len(data), 1 << 22))
        if not chunk:
            raise ValueError(f"{what}: the data ends after {len(data)} of {nbytes} bytes")
        data += chunk
    return np.frombuffer(data, dtype=np.uint8)


def _json_depth(raw, chunk=1 << 20):
    """The deepest nesting of ``[`` and ``{`` outside strings in the JSON
    text `raw` (exact for valid JSON), counted in linear time without
    recursion, a chunk of bytes at a time; ``json.loads`` recurses once per
    level, and deep enough nesting exhausts its stack."""
    codes = np.frombuffer(raw, dtype=np.uint8)
    deepest = depth = 0
    inside = False  # within a string at the end of the previous chunk
    run = 0  # backslashes that ended the previous chunk
    for start in range(0, len(codes), chunk):
        c = codes[start : start + chunk]
        index = np.arange(len(c))
        backslash = c == ord("\\")
        # backslashes ending at each byte: since the last other byte (or the
        # previous chunk's run, when the chunk so far is all backslashes)
        last_other = np.maximum.accumulate(np.where(backslash, -1, index))
        ending = index - last_other + np.where(last_other < 0, run, 0)
        before = np.concatenate(([run], ending[:-1]))  # backslashes just before each byte
        quote = (c == ord('"')) & (before % 2 == 0)
        in_string = (np.cumsum(quote) + inside) % 2 == 1
        opening = (c == ord("[")) | (c == ord("{"))
        closing = (c == ord("]")) | (c == ord("}"))
        steps = np.where(in_string, 0, opening.astype(np.int8) - closing.astype(np.int8))
        levels = np.cumsum(steps, dtype=np.int64) + depth
        deepest = max(deepest, int(levels.max()))
        depth, inside, run = int(levels[-1]), bool(in_string[-1]), int(ending[-1])
    return deepest


def _parse_json(raw, where):
    """JSON text `raw` (UTF-8 bytes), or a ValueError starting with `where`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where} (not UTF-8: {exc})") from exc
    if _json_depth(raw) > _JSON_MAX_DEPTH:
        raise ValueError(f"{where} (JSON nested more than {_JSON_MAX_DEPTH} deep)")
    try:
        return json.loads(text)
    except RecursionError as exc:  # not reached after the depth check; kept as a guard
        raise ValueError(f"{where} (JSON nested too deeply)") from exc
    except ValueError as exc:
        raise ValueError(f"{where} ({exc})") from exc


def _is_count(x):
    return type(x) is int and x >= 0


# ---------------------------------------------------------------- .npy, .npz


def _npy_header(f, where):
    """``(shape, fortran_order, dtype)`` from the header of an .npy stream."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"npy format version {version[0]}.{version[1]} is not read here")
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
    if dtype.hasobject:
        raise ValueError(f"{where}: it holds Python objects (a pickle), which are not read")
    if dtype.itemsize == 0:
        raise ValueError(f"{where}: dtype {dtype} has no size")
    return tuple(shape), bool(fortran), dtype


def _npy_array(data, shape, fortran, dtype):
    arr = data.view(dtype)
    if fortran:
        return arr.reshape(shape[::-1]).T
    return arr.reshape(shape)


class _NpyFile:
    """An ``.npy`` file: its header read at once, its data on :meth:`read`.

    The data the header declares must be in the file, so a header that
    declares a huge array in a small file is refused before any memory is
    taken."""

    def __init__(self, path):
        self.path = path
        self.where = f"source: cannot read {path} as .npy"
        size = _regular_size(path)
        with _open_regular(path) as f:
            self.shape, self.fortran, self.dtype = _npy_header(f, self.where)
            self.offset = f.tell()
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        if self.offset + self.nbytes > size:
            raise ValueError(
                f"{self.where}: its header declares shape {self.shape} of {self.dtype} "
                f"({self.nbytes} bytes), but the file holds {size - self.offset}"
            )

    def read(self):
        with _open_regular(self.path) as f:
            f.seek(self.offset)
            data = _read_exactly(f, self.nbytes, self.where)
        return _npy_array(data, self.shape, self.fortran, self.dtype)


class _NpzFile:
    """The arrays of an ``.npz`` file, read one at a time.

    Only the member asked for is decompressed, and of it only the bytes its
    ``.npy`` header declares: another member, or data past the declared
    array (a zip bomb), is never read."""

    def __init__(self, path):
        self.path = path
        self.where = f"source: cannot read {path} as .npz"
        with self._zip() as archive:
            names = [info.filename for info in archive.infolist()]
        self.members = {}
        for name in names:
            self.members.setdefault(name[:-4] if name.endswith(".npy") else name, name)

    @contextlib.contextmanager
    def _zip(self):
        with _open_regular(self.path) as f:
            try:
                archive = zipfile.ZipFile(f)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
                raise ValueError(f"{self.where}: {exc}") from exc
            with archive:
                yield archive

    def keys(self):
        return list(self.members)

    def _member(self, key, header_only):
        where = f"{self.where} (member {self.members[key]})"
        with self._zip() as archive:
            try:
                with archive.open(self.members[key]) as member:
                    shape, fortran, dtype = _npy_header(member, where)
                    if header_only:
                        return shape
                    data = _read_stream(member, math.prod(shape) * dtype.itemsize, where)
            except (
                zipfile.BadZipFile,
                zlib.error,
                NotImplementedError,
                RuntimeError,
                OSError,
                EOFError,
            ) as exc:  # a damaged, encrypted or oddly compressed member
                raise ValueError(f"{where}: {exc}") from exc
        return _npy_array(data, shape, fortran, dtype)

    def shape(self, key):
        return self._member(key, header_only=True)

    def __getitem__(self, key):
        return self._member(key, header_only=False)


# ---------------------------------------------------------------- safetensors


class _SafetensorsFile:
    """The tensors of a ``.safetensors`` file, read one at a time.

    The format is an 8-byte little-endian header length, a JSON header
    ``{name: {dtype, shape, data_offsets}}`` and the raw bytes; reading it
    here takes no dependency, reads only the tensor asked for (not a whole
    checkpoint), and handles bfloat16, which NumPy has no dtype for.

    The header is checked as the format requires before anything else is
    read: at most 100 MB and inside the file, a JSON object (nested at most
    :data:`_JSON_MAX_DEPTH` deep) of objects with a ``dtype`` string, a
    ``shape`` of non-negative integers and ``data_offsets`` inside the data
    area whose span is the shape's size in that dtype.
    """

    def __init__(self, path):
        self.path = path
        bad = f"source: {path} is not a safetensors file"
        size = _regular_size(path)
        with _open_regular(path) as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(f"{bad} (too short)")
            (length,) = struct.unpack("<Q", raw)
            if length > _JSON_MAX_BYTES:
                raise ValueError(
                    f"{bad} (bad header: it declares {length} bytes, above the format's "
                    f"bound of {_JSON_MAX_BYTES})"
                )
            if 8 + length > size:
                raise ValueError(
                    f"{bad} (bad header: it declares {length} bytes, past the end of the "
                    f"{size}-byte file)"
                )
            header = _parse_json(f.read(length), bad)
        self.data_start = 8 + length
        self.entries = _check_safetensors_header(header, size - self.data_start, bad)

    def keys(self):
        return list(self.entries)

    def shape(self, key):
        return self.entries[key][1]

    def __getitem__(self, key):
        dtype_name, shape, begin, end = self.entries[key]
        dtype = _SAFETENSORS_DTYPES.get(dtype_name)
        if dtype is None:
            raise ValueError(f"{key}: safetensors dtype {dtype_name} is not supported")
        with _open_regular(self.path) as f:
            f.seek(self.data_start + begin)
            data = _read_exactly(f, end - begin, f"source: {self.path}, tensor {key}")
        return _decode_safetensors(data, dtype_name, shape, key)


def _decode_safetensors(data, dtype_name, shape, key):
    """A tensor from its raw bytes (an aligned uint8 array) as a safetensors
    file stores them: little-endian, bfloat16 widened to float32."""
    dtype = _SAFETENSORS_DTYPES.get(dtype_name)
    if dtype is None:
        raise ValueError(f"{key}: safetensors dtype {dtype_name} is not supported")
    arr = data.view(dtype)
    if dtype_name == "BF16":
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr.reshape(shape)


def _check_safetensors_header(header, data_size, bad):
    """``{name: (dtype, shape, begin, end)}`` from a parsed header, checked."""
    if not isinstance(header, dict):
        raise ValueError(f"{bad} (bad header: a JSON {type(header).__name__}, not an object)")
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict):
                raise ValueError(f"{bad} (bad header: __metadata__ is not an object)")
            continue
        if not isinstance(info, dict):
            raise ValueError(f"{bad} (bad header: the entry {name!r} is not an object)")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str):
            raise ValueError(f"{bad} (bad header: {name!r} has no dtype string)")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise ValueError(
                f"{bad} (bad header: the shape of {name!r} is not a list of non-negative "
                f"integers: {shape!r:.80})"
            )
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_is_count(o) for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise ValueError(
                f"{bad} (bad header: the data_offsets of {name!r} are not [begin, end] "
                f"with 0 <= begin <= end: {offsets!r:.80})"
            )
        begin, end = offsets
        if end > data_size:
            raise ValueError(
                f"{bad} (bad header: the data_offsets of {name!r} end at {end}, past the "
                f"{data_size}-byte data area)"
            )
        itemsize = _SAFETENSORS_ITEMSIZE.get(dtype)
        if itemsize is not None and math.prod(shape) * itemsize != end - begin:
            raise ValueError(
                f"{bad} (bad header: {name!r} spans {end - begin} bytes, but shape {shape} "
                f"of {dtype} needs {math.prod(shape) * itemsize})"
            )
        entries[name] = (dtype, tuple(shape), begin, end)
    return entries


class _ShardedTensors:
    """Several safetensors shards seen as one mapping (a sharded checkpoint)."""

    def __init__(self, files):
        self.where = {}
        for f in files:
            for k in f.keys():
                self.where.setdefault(k, f)

    def keys(self):
        return list(self.where)

    def shape(self, key):
        return self.where[key].shape(key)

    def __getitem__(self, key):
        return self.where[key][key]


# ---------------------------------------------------------------- torch, indexes


def _flatten(mapping, prefix="", depth=0):
    """Nested checkpoint dicts (``{"model": {...}}``) as one dotted mapping."""
    if depth > _MAX_NESTING:
        raise ValueError(
            f"the checkpoint's dicts are nested more than {_MAX_NESTING} deep (or hold themselves)"
        )
    flat = {}
    for k, value in mapping.items():
        name = f"{prefix}{k}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + ".", depth + 1))
        else:
            flat[name] = value
    return flat


def _torch_load(path):
    with _open_regular(path) as f:  # a FIFO or a device refused before torch is needed
        torch = _require_torch(path)
        try:
            obj = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many kinds for a file it cannot read
            lines = str(exc).strip().splitlines()
            message = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
            raise ValueError(f"source: cannot read {path} with torch.load ({message})") from exc
    if not isinstance(obj, Mapping):
        if hasattr(obj, "shape"):
            return {"": obj}
        raise ValueError(f"source: {path} holds a {type(obj).__name__}, not a state dict")
    try:
        return _flatten(obj)
    except ValueError as exc:
        raise ValueError(f"source: {path}: {exc}") from exc


def _require_torch(path):
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise ImportError(f"reading {path} needs torch (pip install torch)") from exc


def _is_known(key):
    return any(key == s or key.endswith("." + s) for s in KNOWN_KEYS)


class _TorchFiles:
    """The torch checkpoints of a directory without an index, read shard by
    shard: only the tables under a known name are kept, any other tensor is
    read again from its shard if asked for."""

    def __init__(self, paths):
        self.where, self.kept = {}, {}
        for path in paths:
            for k, value in _torch_load(path).items():
                if k not in self.where:
                    self.where[k] = path
                    if _is_known(k):
                        self.kept[k] = value

    def keys(self):
        return list(self.where)

    def __getitem__(self, key):
        if key in self.kept:
            return self.kept[key]
        return _torch_load(self.where[key])[key]


class _Indexed:
    """A sharded checkpoint read through its index (``model.safetensors.index.json``,
    ``pytorch_model.bin.index.json``): the keys come from the index's
    ``weight_map``, and only the shard holding the tensor asked for is read."""

    def __init__(self, index, reader):
        self.index, self.reader = index, reader
        folder = os.path.dirname(index)
        data = _read_json(index, f"source: {index} is not a checkpoint index")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict):
            raise ValueError(f"source: {index} is not a checkpoint index (no weight_map object)")
        self.where = {}
        for key, shard in weight_map.items():
            if (
                not isinstance(shard, str)
                or shard in ("", ".", "..")
                or shard != os.path.basename(shard)
                or "/" in shard
                or "\\" in shard
            ):
                raise ValueError(
                    f"source: {index} places {key!r} in {shard!r}, which is not the name of "
                    "a file beside the index"
                )
            self.where[key] = os.path.join(folder, shard)
        self.shards = {}

    def _shard(self, key):
        path = self.where[key]
        if path not in self.shards:
            self.shards = {path: self.reader(path)}  # one shard held at a time
        shard = self.shards[path]
        if key not in shard.keys():
            raise ValueError(f"source: {self.index} places {key!r} in {path}, which lacks it")
        return shard

    def keys(self):
        return list(self.where)

    def shape(self, key):
        shard = self._shard(key)
        return shard.shape(key) if hasattr(shard, "shape") else None

    def __getitem__(self, key):
        return self._shard(key)[key]


def _read_json(path, where):
    """A JSON file of at most :data:`_JSON_MAX_BYTES` bytes (a regular file)."""
    size = _regular_size(path)
    if size > _JSON_MAX_BYTES:
        raise ValueError(f"{where} ({size} bytes, above the bound of {_JSON_MAX_BYTES})")
    with _open_regular(path) as f:
        raw = f.read(_JSON_MAX_BYTES + 1)
    return _parse_json(raw, where)


def _index_reader(name):
    """How to read the shards an index file names, from its name; None if it
    is not an index."""
    if not name.endswith(_INDEX_SUFFIX):
        return None
    stem = name[: -len(_INDEX_SUFFIX)].lower()
    if stem.endswith(".safetensors"):
        return _SafetensorsFile
    if stem.endswith(_TORCH_SUFFIXES):
        return _torch_load
    return None


# ---------------------------------------------------------------- a path


def _open_path(path):
    """The tensors stored at `path` (file or model directory): an :class:`_NpyFile`
    or a mapping with ``keys()`` and ``[key]`` (and ``shape(key)`` where the
    format tells the shape before the data)."""
    if os.path.isdir(path):
        return _open_directory(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"source: no such file or directory: {path}")
    _regular_size(path)
    lower = path.lower()
    reader = _index_reader(lower)
    if reader is not None:
        return _Indexed(path, reader)
    if lower.endswith(".npy"):
        return _NpyFile(path)
    if lower.endswith(".npz"):
        return _NpzFile(path)
    if lower.endswith(".safetensors"):
        return _SafetensorsFile(path)
    if lower.endswith(_TORCH_SUFFIXES):
        return _torch_load(path)
    raise ValueError(
        f"source: {path} is not a .npy, .npz, .safetensors or torch (.bin, .pt, .pth, .ckpt) "
        "file, a checkpoint index (.index.json), nor a model directory"
    )


def _open_directory(path):
    """A model directory: its safetensors checkpoint, or else its torch
    checkpoint, each read through its index when it has one."""
    entries = sorted(os.listdir(path))
    for safetensors, suffixes in ((True, (".safetensors",)), (False, _TORCH_SUFFIXES)):
        indexes = [
            e
            for e in entries
            if e.endswith(_INDEX_SUFFIX) and e[: -len(_INDEX_SUFFIX)].lower().endswith(suffixes)
        ]
        if len(indexes) > 1:
            raise ValueError(
                f"source: the directory {path} holds several checkpoint indexes "
                f"({', '.join(indexes)}); give one of them as the source"
            )
        if indexes:
            return _Indexed(os.path.join(path, indexes[0]), _index_reader(indexes[0]))
        files = [os.path.join(path, e) for e in entries if e.endswith(suffixes)]
        if files and safetensors:
            return _ShardedTensors([_SafetensorsFile(f) for f in files])
        if files:
            return _TorchFiles(files)
    raise ValueError(f"source: no .safetensors, .bin, .pt or .pth file in the directory {path}")


def _shown(name, limit=100):
    """A name read from a file, for a one-line message: as it is when it is
    printable, else its repr; at most `limit` characters."""
    text = name if isinstance(name, str) and name.isprintable() else repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- the table's key


def _list_keys(keys, limit=12):
    keys = [_shown(k) for k in keys]
    # The keys a person is looking for first: those that mention positions.
    keys.sort(key=lambda k: (("pos" not in k.lower()) and ("embed" not in k.lower()), k))
    shown = ", ".join(keys[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"{shown}{more}" if keys else "(none)"


def choose_key(keys, key, where):
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
