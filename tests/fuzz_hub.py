"""A bounded fuzzer of the Hub path against a hostile local Hub.

    python tests/fuzz_api.py --surfaces hub --seconds 60 [--seed 0] [--verbose]

Each round puts up one repository on tests/hub_server.py's local Hub (a
safetensors checkpoint holding a position table, in one file or sharded,
with or without config.json), honest or perturbed one way: the checkpoint
lies (its header length past the file or short of the JSON, offsets out of
range or overlapping, dtype and shape that disagree, a dtype posenc does
not read, a 3-D table, a size declared at a tebibyte over an endless body,
keys that are not printable, an index naming files the repository does not
hold), the server does (held answers, trickled or endless bodies, bodies
without a length, a lying Content-Length or Content-Range, no ranges,
redirect loops, redirects to another host, to a closed port, to a file:
URL or nowhere, 401/403/404/429/500/503 with and without an error code),
its model info does (not JSON, 20 MiB of it, a sha that is not a commit
id, no list of files, file names that are not file names), or the name
does (revisions and repository ids git and the Hub refuse, revisions the
repository lacks).

Then it reads the table through ``probe.load_position_embeddings``,
``probe.hub.HubTensors`` or ``posenc probe``.  Each call must give what the
checkpoint holds (the table, bit for bit, decoded independently here), or
refuse cleanly: a ``HubError``/``OSError`` or ``ValueError`` (the command
line: exit status 1) whose message is one printable line naming the
repository, within the call's deadline and a margin.  A call that returns
where only a refusal is right, returns other values, raises anything else,
writes several lines, or overruns, is a failure; so is a table fetched
past the size limit.  Failures are printed one line each, deduplicated by
(function, perturbation, what happened); the exit status is 1 if there is
any.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import socket
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hub_server import HubServer, Repo  # noqa: E402

#: Seconds a call may run past its deadline (a shared, loaded machine).
MARGIN = 3.0
#: The limits of the calls: generous where time is not what is tested, so
#: that a busy machine does not turn an honest answer into a refusal.
EASY = {"timeout": 5.0, "deadline": 3.0}
TIGHT = {"timeout": 0.25, "deadline": 0.5}

_CODES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I32": "<i4", "BF16": "<u2"}
_KEYS = ("wpe.weight", "embeddings.position_embeddings.weight", "model.embed_positions.weight")
#: The names load_position_embeddings looks for (its docstring's).
_KNOWN = ("wpe.weight", "embeddings.position_embeddings.weight", "embed_positions.weight")


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# ---------------------------------------------------------------- checkpoints


@dataclass
class Checkpoint:
    """A checkpoint as files, and what reading its table must give."""

    files: Dict[str, bytes]
    key: str
    table: Optional[np.ndarray]  # what the table decodes to; None: no right answer
    table_bytes: int  # its declared size
    model_type: Optional[str]
    info: Optional[bytes] = None
    server: Dict[str, Any] = field(default_factory=dict)
    limits: Dict[str, Any] = field(default_factory=lambda: dict(EASY))
    name_suffix: str = ""  # "@revision"
    name: Optional[str] = None  # the whole name instead of the repository's
    expect: str = "table"  # "table", "refuse", "either" (the table or a refusal)
    two_loads: bool = False  # load once honestly, then perturbed (the cache answers)
    tensor: Optional[np.ndarray] = None  # what HubTensors.read gives, where not the table
    tensors_may_refuse: bool = False  # HubTensors reads config.json, the table's loader not
    cli_may_refuse: bool = False  # posenc probe wants 5 rows at least


def _decode(raw: bytes, dtype: str, shape: List[int]) -> Optional[np.ndarray]:
    """The tensor as a reader must give it: little-endian, bfloat16 widened
    (None for a dtype posenc does not read)."""
    if dtype not in _CODES:
        return None
    a = np.frombuffer(raw, dtype=_CODES[dtype])
    if dtype == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(a.dtype.newbyteorder("=")).reshape(shape)


def _layout(tensors: List[Tuple[str, str, List[int], bytes]]) -> Tuple[Dict[str, Any], bytes]:
    header, blobs, at = {}, [], 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    return header, b"".join(blobs)


def _file(header: Any, data: bytes, length: Optional[int] = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def _honest(rng: random.Random, shard_names: Tuple[str, str] = ("", "")) -> Checkpoint:
    """A checkpoint holding a position table and a few other tensors, in
    one file or sharded through an index (its shards' names: `shard_names`,
    else the usual ones)."""
    n, d = rng.randint(8, 40), rng.randint(1, 8)
    dtype = rng.choice(["F32", "F32", "F16", "F64", "BF16"])
    values = np.random.default_rng(rng.randrange(2**32)).standard_normal((n, d))
    if dtype == "BF16":
        raw = (values.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    else:
        raw = values.astype(_CODES[dtype]).tobytes()
    key = rng.choice(_KEYS)
    tensors = [(key, dtype, [n, d], raw)]
    for i in range(rng.randint(0, 3)):
        shape = [rng.randint(1, 4), rng.randint(1, 4)]
        tensors.append((f"h.{i}.w", "F32", shape, np.ones(shape, "<f4").tobytes()))
    rng.shuffle(tensors)
    model_type = rng.choice([None, "gpt2", "bert", "roberta", "opt"])
    files: Dict[str, bytes] = {}
    if model_type is not None:
        files["config.json"] = json.dumps({"model_type": model_type}).encode()
    if len(tensors) > 1 and rng.random() < 0.3:
        weight_map = {}
        for i, tensor in enumerate(tensors):
            shard = shard_names[i % 2] or f"model-0000{i % 2 + 1}-of-00002.safetensors"
            weight_map[tensor[0]] = shard
        for shard in sorted(set(weight_map.values())):
            header, data = _layout([t for t in tensors if weight_map[t[0]] == shard])
            files[shard] = _file(header, data)
        files["model.safetensors.index.json"] = json.dumps({"weight_map": weight_map}).encode()
    else:
        header, data = _layout(tensors)
        files["model.safetensors"] = _file(header, data)
    return Checkpoint(files, key, _decode(raw, dtype, [n, d]), len(raw), model_type)


def _table_file(c: Checkpoint) -> str:
    if "model.safetensors" in c.files:
        return "model.safetensors"
    index = json.loads(c.files["model.safetensors.index.json"])
    return str(index["weight_map"][c.key])


def _parts(c: Checkpoint) -> Tuple[str, Dict[str, Any], bytes]:
    name = _table_file(c)
    raw = c.files[name]
    (n,) = struct.unpack("<Q", raw[:8])
    return name, json.loads(raw[8 : 8 + n]), raw[8 + n :]


# ---------------------------------------------------------------- perturbations
#
# Each takes the honest checkpoint and a random stream and changes them in
# place: what the server serves, and what a call must then give; one that
# returns False does not apply to this checkpoint (and changed nothing).


def p_honest(c: Checkpoint, rng: random.Random) -> None:
    pass


def p_revision_commit(c: Checkpoint, rng: random.Random) -> None:
    c.name_suffix = "@" + Repo(dict(c.files)).commit


def p_header_length_past_the_file(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    raw = json.dumps(header).encode()
    c.files[name] = _file(raw, data, len(raw) + len(data) + rng.choice([1, 100, 2**30, 2**63]))
    c.table, c.expect = None, "refuse"


def p_header_length_short(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    raw = json.dumps(header).encode()
    c.files[name] = _file(raw, data, rng.randrange(0, len(raw)))
    c.table, c.expect = None, "refuse"


def p_header_length_long(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    raw = json.dumps(header).encode()
    c.files[name] = _file(raw, data, len(raw) + rng.randint(1, max(1, len(data))))
    # the JSON then holds data bytes: not JSON, or (spaces) the last
    # tensor's offsets end past the data area that is left
    c.table, c.expect = None, "refuse"


def p_odd_file_names(c: Checkpoint, rng: random.Random) -> None:
    names = ["model 1.safetensors", "modèle%20.safetensors", "a#b?.safetensors", "ü/x.safetensors"]
    rng.shuffle(names)
    honest = _honest(rng, (names[0], names[1]))
    c.__dict__.update(honest.__dict__)  # a checkpoint sharded (or not) under these names


def p_empty_table(c: Checkpoint, rng: random.Random) -> Optional[bool]:
    if "model.safetensors" not in c.files:
        return False
    name, header, data = _parts(c)
    begin, end = header[c.key]["data_offsets"]
    d = header[c.key]["shape"][1]
    header[c.key].update(shape=[0, d], data_offsets=[begin, begin])
    c.files[name] = _file(header, data)  # the table's old bytes now belong to no tensor
    assert c.table is not None
    c.table = c.table[:0]
    c.cli_may_refuse = True
    return None


def p_body_longer_than_the_range(c: Checkpoint, rng: random.Random) -> None:
    c.server["range_extra"] = rng.choice([1, 100, 2**20])
    c.server["tail"] = 2**20
    c.table, c.expect = None, "refuse"


def p_header_padded(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)  # as the safetensors writer pads it, to 8 bytes
    raw = json.dumps(header).encode()
    c.files[name] = _file(raw + b" " * (-len(raw) % 8 + 8 * rng.randint(0, 2)), data)


def p_offsets_past_the_data(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    begin, end = header[c.key]["data_offsets"]
    shift = len(data) - begin + rng.choice([0, 1, 2**40])
    header[c.key]["data_offsets"] = [begin + shift, end + shift]
    c.files[name] = _file(header, data)
    c.table, c.expect = None, "refuse"


def p_offsets_overlap(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    begin, end = header[c.key]["data_offsets"]
    header["overlapping"] = {"dtype": "U8", "shape": [end - begin], "data_offsets": [begin, end]}
    c.files[name] = _file(header, data)
    c.expect = "either"


def p_offsets_reversed(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    begin, end = header[c.key]["data_offsets"]
    header[c.key]["data_offsets"] = rng.choice(
        [[end, begin], [begin], [begin, end, end], [-1, end]]
    )
    c.files[name] = _file(header, data)
    c.table, c.expect = None, "refuse"


def p_shape_disagrees(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    n, d = header[c.key]["shape"]
    header[c.key]["shape"] = rng.choice([[n + 1, d], [n, d + 1], [n * 2, d], [10**30, d]])
    c.files[name] = _file(header, data)
    c.table, c.expect = None, "refuse"


def p_dtype_disagrees(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    size = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
    old = header[c.key]["dtype"]
    new = rng.choice([t for t in size if size[t] != size[old]])
    header[c.key]["dtype"] = new
    c.files[name] = _file(header, data)
    c.table, c.expect = None, "refuse"


def p_dtype_same_size(c: Checkpoint, rng: random.Random) -> Optional[bool]:
    name, header, data = _parts(c)
    entry = header[c.key]
    if entry["dtype"] != "F32":
        return False
    entry["dtype"] = "I32"  # the same bytes, another type: that is what the file holds
    begin, end = entry["data_offsets"]
    c.files[name] = _file(header, data)
    c.table = _decode(data[begin:end], "I32", entry["shape"])


def p_dtype_not_read(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    entry = header[c.key]
    begin, end = entry["data_offsets"]
    entry["dtype"], entry["shape"] = rng.choice(
        [("U32", [(end - begin) // 4]), ("F8_E4M3", [end - begin]), ("Q4", [1]), ("", [1])]
    )
    if entry["dtype"] in ("U32", "F8_E4M3"):
        entry["shape"] = [1, entry["shape"][0]]
    c.files[name] = _file(header, data)
    c.table, c.expect = None, "refuse"


def p_three_dimensional(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    n, d = header[c.key]["shape"]
    header[c.key]["shape"] = [n, d, 1]
    c.files[name] = _file(header, data)
    assert c.table is not None
    c.tensor = c.table.reshape(n, d, 1)  # a tensor as good as any: HubTensors gives it
    c.table, c.expect = None, "refuse"


def p_declared_a_tebibyte(c: Checkpoint, rng: random.Random) -> None:
    header = {c.key: {"dtype": "F32", "shape": [2**28, 1024], "data_offsets": [0, 2**40]}}
    c.files = {"model.safetensors": _file(header, b""), "config.json": b"{}"}
    c.server["tail"] = 2**40  # an endless body of zeros
    c.table, c.expect, c.table_bytes = None, "refuse", 2**40


def p_above_max_bytes(c: Checkpoint, rng: random.Random) -> None:
    c.limits["max_bytes"] = rng.randint(1, c.table_bytes - 1)
    c.table, c.expect = None, "refuse"


def p_header_not_an_object(c: Checkpoint, rng: random.Random) -> None:
    name, header, data = _parts(c)
    raw = rng.choice([b"[]", b"null", b"\xff\xfe", b"[" * 5000, b'{"a": ' * 100 + b"1"])
    c.files[name] = _file(raw, data)
    c.table, c.expect = None, "refuse"


def p_keys_not_printable(c: Checkpoint, rng: random.Random) -> Optional[bool]:
    if "model.safetensors" not in c.files:
        return False
    name, header, data = _parts(c)
    odd = "x\n\r\x00\u2028" + rng.choice(["", "."]) + c.key
    header[odd] = header.pop(c.key)
    c.files[name] = _file(header, data)
    c.key, c.tensor = odd, c.table  # HubTensors reads it by its name
    # the documented choice: the one key ending in a known name, else the
    # only tensor there is; else no table can be chosen
    known = [k for k in header if any(k == s or k.endswith("." + s) for s in _KNOWN)]
    if len(known) != 1 and not (len(header) == 1 and not known):
        c.table, c.expect = None, "refuse"
    return None


def p_index_names_another_file(c: Checkpoint, rng: random.Random) -> Optional[bool]:
    names = ["../x.safetensors", "missing.safetensors", "", 5, "/model.safetensors"]
    index = {"weight_map": {c.key: rng.choice(names)}}
    if "model.safetensors.index.json" in c.files and rng.random() < 0.5:
        index = json.loads(c.files["model.safetensors.index.json"])
        shards = sorted(set(index["weight_map"].values()))
        other = [f for f in shards if f != index["weight_map"][c.key]]
        if not other:
            return False
        index["weight_map"][c.key] = other[0]  # a shard that does not hold it
    c.files["model.safetensors.index.json"] = json.dumps(index).encode()
    c.table, c.expect = None, "refuse"
    return None


def p_index_not_a_map(c: Checkpoint, rng: random.Random) -> None:
    c.files["model.safetensors.index.json"] = rng.choice([b"[]", b'{"weight_map": 3}', b"{"])
    c.table, c.expect = None, "refuse"


def p_config_not_json(c: Checkpoint, rng: random.Random) -> None:
    c.files["config.json"] = rng.choice([b"{", b"\xff", b"[" * 1000, b"3"])
    c.model_type = None  # no model type: the table as stored
    c.tensors_may_refuse = True  # HubTensors needs the config


def p_config_huge(c: Checkpoint, rng: random.Random) -> None:
    c.files.setdefault("config.json", b"{}")
    c.server["json_tail"] = 20 * 2**20  # spaces: valid JSON, past posenc's bound
    c.table, c.expect = None, "refuse"


def p_stall(c: Checkpoint, rng: random.Random) -> None:
    c.server["delay"] = 30.0
    c.limits = dict(TIGHT)
    c.table, c.expect = None, "refuse"


def p_stall_then_cache(c: Checkpoint, rng: random.Random) -> None:
    c.two_loads = True
    c.server["delay"] = 30.0
    c.limits = dict(TIGHT)  # the second load times out and takes the cache's table


def p_trickle(c: Checkpoint, rng: random.Random) -> None:
    c.server["trickle"] = rng.choice([0.01, 0.05])
    c.limits = dict(TIGHT)
    c.expect = "either"


def p_endless_body(c: Checkpoint, rng: random.Random) -> None:
    c.server["tail"] = 2**40  # the ranges asked for hold the checkpoint: the tail is not read
    c.server["no_length"] = rng.random() < 0.5


def p_no_length(c: Checkpoint, rng: random.Random) -> None:
    c.server["no_length"] = True


def p_length_lie(c: Checkpoint, rng: random.Random) -> None:
    c.server["length_lie"] = rng.choice([-3, -1, 1, 1000])
    c.table, c.expect = None, "refuse"


def p_range_lie(c: Checkpoint, rng: random.Random) -> None:
    if rng.random() < 0.3:
        c.server["no_content_range"] = True
    else:
        c.server["range_lie"] = rng.choice([1, -1, 8, 2**40])
    c.table, c.expect = None, "refuse"


def p_no_ranges(c: Checkpoint, rng: random.Random) -> None:
    c.server["ranges"] = False
    c.table, c.expect = None, "refuse"


def p_redirect_loop(c: Checkpoint, rng: random.Random) -> None:
    c.server["redirect"] = "loop"
    c.table, c.expect = None, "refuse"


def p_redirect_other_host(c: Checkpoint, rng: random.Random) -> None:
    c.server["redirect"] = "other-host"


def p_redirect_elsewhere(c: Checkpoint, rng: random.Random) -> None:
    c.server["redirect"] = rng.choice(
        ["file:///etc/passwd", "ftp://127.0.0.1/x", "none", _closed_port_url() + "/x", "//"]
    )
    c.table, c.expect = None, "refuse"


def p_status(c: Checkpoint, rng: random.Random) -> None:
    status = rng.choice([204, 304, 401, 403, 404, 418, 429, 500, 503])
    code = rng.choice(["", "RepoNotFound", "GatedRepo", "EntryNotFound", "RevisionNotFound"])
    c.server[rng.choice(["status", "file_status"])] = (status, code)
    c.table, c.expect = None, "refuse"


def p_gated(c: Checkpoint, rng: random.Random) -> None:
    c.server["gated"] = True
    c.table, c.expect = None, "refuse"


def p_info_not_json(c: Checkpoint, rng: random.Random) -> None:
    c.info = rng.choice([b"", b"<html>", b"{", b"\xff", b"[" * 10000, b"null"])
    c.table, c.expect = None, "refuse"


def p_info_huge(c: Checkpoint, rng: random.Random) -> None:
    c.server["info_tail"] = 20 * 2**20
    c.server["no_length"] = rng.random() < 0.5
    c.table, c.expect = None, "refuse"


def _info(c: Checkpoint, sha: Any, siblings: Any) -> bytes:
    return json.dumps({"id": "x", "sha": sha, "siblings": siblings}).encode()


def p_info_sha(c: Checkpoint, rng: random.Random) -> None:
    sha = rng.choice([5, None, [], {"a": 1}, "main", "../../x", "a" * 39, "A" * 40, True, "0" * 40])
    c.info = _info(c, sha, [{"rfilename": f} for f in c.files])
    c.table, c.expect = None, "refuse"


def p_info_siblings(c: Checkpoint, rng: random.Random) -> None:
    commit = Repo(dict(c.files)).commit
    siblings = rng.choice(
        [
            None,
            3,
            [1, 2],
            [{"name": "x"}],
            [{"rfilename": 5}],
            [{"rfilename": "../model.safetensors"}],
            [{"rfilename": "a\nb"}],
            [{"rfilename": "config.json"}],
            [{"rfilename": "other.safetensors"}],
        ]
    )
    c.info = _info(c, commit, siblings)
    c.table, c.expect = None, "refuse"


_REVISIONS = [
    "..",
    "a/../b",
    ".x",
    "x.lock",
    "a//b",
    "/a",
    "a/",
    "v1.",
    "a~b",
    "a^b",
    "a:b",
    "a?b",
    "a*b",
    "a[b",
    "a\\b",
    "a\x7f",
    "r" * 300,
    "refs/pr/7",
    "v0",
    "nope",
]
_NAMES = [
    "a--b",
    "a..b",
    "a.git",
    "-a",
    "a-",
    ".a",
    "x" * 97,
    "a/b/c",
    "ünï",
    "a b",
    "a@",
    "@b",
    "a/",
    "/a",
    "a/@x",
    "a@b@c",
    "",
]


def p_revision(c: Checkpoint, rng: random.Random) -> None:
    c.name_suffix = "@" + rng.choice(_REVISIONS)
    c.table, c.expect = None, "refuse"


def p_name(c: Checkpoint, rng: random.Random) -> None:
    c.name = rng.choice(_NAMES)
    c.table, c.expect = None, "refuse"


PERTURBATIONS: Dict[str, Callable[[Checkpoint, random.Random], None]] = {
    name[2:].replace("_", " "): f for name, f in sorted(globals().items()) if name.startswith("p_")
}
#: Those that wait for a timeout or the deadline: in every third pass only.
_SLOW = ("stall", "stall then cache", "trickle")


# ---------------------------------------------------------------- the calls


def _hub():
    from posenc.probe import hub

    return hub


def call_load(name: str, c: Checkpoint) -> Tuple[str, Any]:
    from posenc import probe

    try:
        return "table", probe.load_position_embeddings(name, **c.limits)
    except Exception as exc:
        return "raised", exc


def call_tensors(name: str, c: Checkpoint) -> Tuple[str, Any]:
    try:
        reader = _hub().HubTensors(name, **c.limits)
        return "table", reader.read(c.key)
    except Exception as exc:
        return "raised", exc


def call_cli(name: str, c: Checkpoint) -> Tuple[str, Any]:
    from posenc.__main__ import main

    args = ["probe", "--analyses", "properties", "--no-progress"]
    args += ["--timeout", str(c.limits["timeout"]), "--deadline", str(c.limits["deadline"])]
    args += ["--", name]  # a name may start with "-"
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.ExitStack() as stack:
            if "max_bytes" in c.limits:  # no flag: the environment's
                stack.enter_context(_environ({"POSENC_HUB_MAX_BYTES": str(c.limits["max_bytes"])}))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            status = main(args)
    except BaseException as exc:  # SystemExit, or anything main lets out
        return "raised", exc
    return "cli", (status, out.getvalue(), err.getvalue())


CALLS = {
    "load_position_embeddings": call_load,
    "HubTensors": call_tensors,
    "posenc probe": call_cli,
}


def _expected(function: str, c: Checkpoint) -> Tuple[str, Optional[np.ndarray]]:
    """What `function` must do: "table" (give the array), "refuse", or
    "either" (give it or refuse)."""
    if function == "HubTensors":
        if c.tensor is not None:
            return "table", c.tensor
        if c.tensors_may_refuse:
            return "either", c.table
    return c.expect, c.table


def _check(fails, function, kind, c, repo_id, outcome, value, elapsed):
    if elapsed > c.limits["deadline"] + MARGIN:
        fails.add("hub", function, kind, "overran its deadline", f"{elapsed:.1f} s")
    expect, table = _expected(function, c)
    named = c.name if c.name is not None else repo_id
    if outcome == "skip":
        return
    if outcome == "cli":
        status, out, err = value
        if status == 0:
            outcome = "table"
        elif status == 1 and err.startswith("posenc probe: error: "):
            message = err[len("posenc probe: error: ") :]
            if err.count("\n") != 1 or not message.rstrip("\n").isprintable():
                fails.add("hub", function, kind, "error not one printable line", repr(err[:200]))
            elif named and named not in message:
                fails.add("hub", function, kind, "error does not name the repository", message)
            if expect == "table" and not c.cli_may_refuse:
                fails.add("hub", function, kind, "refused an honest checkpoint", message)
            return
        else:
            fails.add("hub", function, kind, f"exit status {status}", repr(err[-300:]))
            return
    if outcome == "raised":
        exc = value
        message = str(exc)
        if isinstance(exc, KeyError) and function == "HubTensors":
            message = str(exc.args[0]) if exc.args else message
        allowed = (OSError, ValueError) + ((KeyError,) if function == "HubTensors" else ())
        if not isinstance(exc, allowed):
            fails.add("hub", function, kind, f"raised {type(exc).__name__}", message[:200])
        elif not message or not message.isprintable():
            fails.add("hub", function, kind, "error not one printable line", repr(message[:200]))
        elif named and named not in message:
            fails.add("hub", function, kind, "error does not name the repository", message[:200])
        if expect == "table":
            fails.add(
                "hub",
                function,
                kind,
                "refused an honest checkpoint",
                f"{type(exc).__name__}: {message[:200]}",
            )
        return
    # a table
    if expect == "refuse" or table is None:
        if function == "posenc probe" and expect != "refuse":
            return
        fails.add("hub", function, kind, "returned where only a refusal is right")
        return
    if function == "posenc probe":
        return  # the figures printed are not the table: that it ran is all
    got = np.asarray(value)
    if (
        got.dtype != table.dtype
        or got.shape != table.shape
        or not np.array_equal(got, table, equal_nan=True)
    ):
        fails.add(
            "hub",
            function,
            kind,
            "differs from the checkpoint",
            f"{got.dtype}{got.shape} vs {table.dtype}{table.shape}",
        )


# ---------------------------------------------------------------- the run


@contextlib.contextmanager
def _environ(values: Dict[str, Optional[str]]):
    """The environment with `values` set (None: unset), restored after."""
    keep = {var: os.environ.get(var) for var in values}
    for var, value in values.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    try:
        yield
    finally:
        for var, value in keep.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def _environment(server: HubServer, cache: str):
    return _environ(
        {
            "HF_ENDPOINT": server.url,
            "HF_HUB_CACHE": cache,
            "HF_TOKEN": "hf_fuzztoken",
            "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": None,
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DOWNLOAD_TIMEOUT": None,
            "HF_HUB_ETAG_TIMEOUT": None,
            "POSENC_HUB_DEADLINE": None,
            "POSENC_HUB_MAX_BYTES": None,
        }
    )


def _table_bytes_served(server: HubServer, repo_id: str, c: Checkpoint) -> int:
    """Body bytes sent for ranges past the safetensors headers."""
    total = 0
    for r in server.log:
        if (
            r.range
            and f"/{repo_id}/" in r.path
            and not r.range.startswith(("bytes=0-7", "bytes=8-"))
        ):
            total += max(r.sent or 0, 0)
    return total


def run(seconds: float, seed: int, fails) -> Dict[Tuple[str, str], int]:
    """Fuzz for `seconds` (and at least one pass over every perturbation),
    from `seed`; failures go to `fails` (tests/fuzz_api.py's Failures);
    the calls made, by (function, perturbation)."""
    rng = random.Random(seed)
    functions = sorted(CALLS)
    order: List[str] = []  # the perturbations, each once a pass, in a shuffled order
    counts: Dict[Tuple[str, str], int] = {}
    server = HubServer({}).start()
    end = time.monotonic() + seconds
    with tempfile.TemporaryDirectory() as cache, _environment(server, cache):
        round_ = 0
        while time.monotonic() < end or round_ < len(PERTURBATIONS) + 2:
            round_ += 1
            if not order:
                passes = round_ // len(PERTURBATIONS)
                order = [k for k in PERTURBATIONS if k not in _SLOW or passes % 3 == 0]
                order += ["honest", "honest"]
                rng.shuffle(order)
            kind = order.pop()
            function = rng.choice(functions)
            if function == "posenc probe" and rng.random() < 0.7:
                function = "load_position_embeddings"  # the command line runs more: rarer
            for _ in range(50):  # a checkpoint the perturbation applies to
                c = _honest(rng)
                if PERTURBATIONS[kind](c, rng) is not False:
                    break
            else:
                kind, c = "honest", _honest(rng)
            if c.two_loads and function == "HubTensors":
                function = "load_position_embeddings"  # HubTensors caches nothing
            repo_id = f"fuzz/r{seed}-{round_}"
            name = c.name if c.name is not None else repo_id + c.name_suffix
            settings = {k: v for k, v in c.server.items()}
            if c.two_loads:
                server.repos[repo_id] = Repo(dict(c.files))
                CALLS[function](name, Checkpoint(**{**c.__dict__, "limits": dict(EASY)}))
                repo = server.repos[repo_id]
                for k, v in settings.items():
                    setattr(repo, k, v)
            else:
                server.repos[repo_id] = Repo(dict(c.files), info=c.info, **settings)
            start = time.monotonic()
            outcome, value = CALLS[function](name, c)
            elapsed = time.monotonic() - start
            _check(fails, function, kind, c, repo_id, outcome, value, elapsed)
            limit = c.limits.get("max_bytes", 256 * 2**20)
            if c.table_bytes > limit and _table_bytes_served(server, repo_id, c) > 0:
                fails.add("hub", function, kind, "fetched a table above the size limit")
            counts[(function, kind)] = counts.get((function, kind), 0) + 1
            del server.repos[repo_id]
            server.requests.clear()
    server.stop()
    return counts


if __name__ == "__main__":  # tests/fuzz_api.py's command line, this surface chosen
    import fuzz_api

    sys.exit(fuzz_api.main(["--surfaces", "hub", *sys.argv[1:]]))
