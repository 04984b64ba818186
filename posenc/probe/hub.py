"""A position-embedding table from a model on the Hugging Face Hub, by name.

Only what the table needs is fetched: the repository's file list, the
safetensors header (two HTTP range requests: its 8-byte length, then the
JSON) and the table's own bytes (a third range request); a sharded
checkpoint is followed through its ``model.safetensors.index.json``.  The
bytes are cached under ``<HF hub cache>/posenc/``, keyed by repository,
commit, file and tensor, so that a second run needs no network.

The client is ``huggingface_hub`` (``pip install "posenc[hub]"``), imported
only when a Hub name is used: its endpoint (``HF_ENDPOINT``), token
(``HF_TOKEN`` or the saved login), cache directory (``HF_HOME``,
``HF_HUB_CACHE``) and offline setting (``HF_HUB_OFFLINE``) are honoured.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import struct
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Type
from urllib.parse import quote

import numpy as np

from .checkpoints import (
    _JSON_MAX_BYTES,
    _check_safetensors_header,
    _choose,
    _decode_safetensors,
    _parse_json,
)

#: A Hub repository id with an optional revision: ``name``, ``org/name``,
#: ``org/name@revision`` (the Hub's own rule for the names: letters, digits,
#: ``-``, ``_``, ``.``, not starting or ending with ``-`` or ``.``).
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_NAME = re.compile(rf"^(?P<repo>(?:{_NAME}/)?{_NAME})(?:@(?P<revision>[^\s@]+))?$")

_SINGLE = "model.safetensors"
_INDEX = "model.safetensors.index.json"
_OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf")


class HubError(OSError):
    """A model on the Hub whose table cannot be fetched: the message says
    which problem (missing, gated, no safetensors, no network, offline with
    nothing cached) and what to do."""


@dataclass(frozen=True)
class HubTable:
    """A table fetched from the Hub, and where it came from."""

    table: np.ndarray
    repo_id: str
    revision: str
    commit: str
    filename: str
    key: str
    model_type: Optional[str]
    bytes_fetched: int  # 0 when read from the cache
    from_cache: bool


def is_hub_name(source: object) -> bool:
    """Whether `source` names a Hub repository rather than a local file: a
    string of the form ``name``, ``org/name`` or either with ``@revision``,
    that is not an existing path."""
    if not isinstance(source, str) or os.path.exists(source):
        return False
    if source.lower().endswith((".npy", ".npz", ".safetensors", ".json") + _OTHER_WEIGHTS):
        return False  # a file name that does not exist: the loader says so
    return _HUB_NAME.match(source) is not None


def _split(name: str) -> Tuple[str, Optional[str]]:
    m = _HUB_NAME.match(name)
    if m is None:
        raise ValueError(f"source: {name!r} is not a Hub repository id (org/name[@revision])")
    return m.group("repo"), m.group("revision")


def _hub():
    try:
        hf = importlib.import_module("huggingface_hub")
        for sub in ("constants", "errors", "utils"):  # a lazy package: load them now
            importlib.import_module(f"huggingface_hub.{sub}")
        return hf
    except ImportError as exc:
        raise ImportError(
            "reading a model from the Hugging Face Hub needs huggingface_hub "
            '(pip install "posenc[hub]")'
        ) from exc


def _truthy(value: Optional[str]) -> bool:
    return value is not None and value.strip().upper() in ("1", "ON", "YES", "TRUE")


def _settings(hf: Any) -> Tuple[str, str, bool]:
    """``(endpoint, hub cache dir, offline)``: the environment as it is now,
    else huggingface_hub's constants (which it reads once, when imported)."""
    c = hf.constants
    endpoint = (os.environ.get("HF_ENDPOINT") or c.ENDPOINT).rstrip("/")
    cache = os.environ.get("HF_HUB_CACHE")
    if not cache and os.environ.get("HF_HOME"):
        cache = os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    cache = os.path.expanduser(cache or c.HF_HUB_CACHE)
    offline_env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    offline = _truthy(offline_env) if offline_env is not None else bool(c.HF_HUB_OFFLINE)
    return endpoint, cache, offline


def _safe(part: str) -> str:
    return quote(part, safe="") or "_"


class _Cache:
    """``<hub cache>/posenc/<repo>/``: ``refs/<revision>`` holds a commit;
    ``<commit>/tensors.json`` the tensor names (and the file of each),
    the model type and the key chosen; ``<commit>/<file>/<tensor>.npy`` a
    table's bytes."""

    def __init__(self, root: str, repo_id: str) -> None:
        self.folder = os.path.join(root, "posenc", "models--" + repo_id.replace("/", "--"))

    def _write(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def commit(self, revision: str) -> Optional[str]:
        if re.fullmatch(r"[0-9a-f]{40}", revision):
            return revision
        path = os.path.join(self.folder, "refs", _safe(revision))
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            return None

    def set_commit(self, revision: str, commit: str) -> None:
        self._write(os.path.join(self.folder, "refs", _safe(revision)), commit.encode())

    def _listing_path(self, commit: str) -> str:
        return os.path.join(self.folder, _safe(commit), "tensors.json")

    def listing(self, commit: str) -> Optional[Dict[str, Any]]:
        try:
            with open(self._listing_path(commit), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else None

    def set_listing(self, commit: str, listing: Dict[str, Any]) -> None:
        self._write(self._listing_path(commit), json.dumps(listing).encode())

    def _table_path(self, commit: str, filename: str, key: str) -> str:
        return os.path.join(self.folder, _safe(commit), _safe(filename), _safe(key) + ".npy")

    def table(self, commit: str, filename: str, key: str) -> Optional[np.ndarray]:
        path = self._table_path(commit, filename, key)
        if not os.path.isfile(path):
            return None
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            return None

    def set_table(self, commit: str, filename: str, key: str, table: np.ndarray) -> None:
        import io

        buffer = io.BytesIO()
        np.save(buffer, table, allow_pickle=False)
        self._write(self._table_path(commit, filename, key), buffer.getvalue())


class _Remote:
    """The HTTP side: huggingface_hub's API, downloads and session."""

    def __init__(self, hf: Any, repo_id: str, revision: str, endpoint: str, cache: str) -> None:
        self.hf, self.repo_id, self.revision = hf, repo_id, revision
        self.endpoint, self.cache = endpoint, cache
        self.api = hf.HfApi(endpoint=endpoint)
        self.fetched = 0
        self.commit = revision

    def info(self) -> Tuple[str, List[str]]:
        info = self.api.model_info(self.repo_id, revision=self.revision)
        self.commit = info.sha or self.revision
        return self.commit, [s.rfilename for s in (info.siblings or [])]

    def json_file(self, filename: str) -> Any:
        # huggingface_hub keeps the file in its own cache: count its bytes as
        # fetched only when they were not there already
        cached = self.hf.try_to_load_from_cache(
            self.repo_id, filename, cache_dir=self.cache, revision=self.commit
        )
        was_cached = isinstance(cached, str) and os.path.isfile(cached)
        path = self.hf.hf_hub_download(
            self.repo_id,
            filename,
            revision=self.commit,
            endpoint=self.endpoint,
            cache_dir=self.cache,
        )
        size = os.path.getsize(path)
        if size > _JSON_MAX_BYTES:
            raise ValueError(f"{self.repo_id}: {filename} is {size} bytes, above {_JSON_MAX_BYTES}")
        if not was_cached:
            self.fetched += size
        with open(path, "rb") as f:
            return _parse_json(f.read(), f"{self.repo_id}: {filename} is not valid JSON")

    def range(self, filename: str, start: int, length: int) -> bytes:
        """Bytes ``start .. start + length - 1`` of `filename`, by a range
        request; refused (not downloaded) if the server sends the whole file."""
        if length == 0:
            return b""
        url = self.hf.hf_hub_url(
            self.repo_id, filename, revision=self.commit, endpoint=self.endpoint
        )
        headers = self.hf.utils.build_hf_headers()
        headers["Range"] = f"bytes={start}-{start + length - 1}"
        session = self.hf.utils.get_session()
        with session.stream("GET", url, headers=headers, follow_redirects=True) as response:
            self.hf.utils.hf_raise_for_status(response)
            if response.status_code != 206:
                raise HubError(
                    f"{self.repo_id}: the server answered the range request for {filename} "
                    f"with status {response.status_code}, not 206 Partial Content; posenc "
                    "does not download a whole checkpoint (download it yourself with "
                    f"`hf download {self.repo_id}` and give the folder as the source)"
                )
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > length:
                    break
        self.fetched += len(data)
        if len(data) != length:
            raise HubError(
                f"{self.repo_id}: asked for {length} bytes of {filename} at {start}, "
                f"got {len(data)}"
            )
        return bytes(data)

    def header(self, filename: str) -> Tuple[int, Dict[str, Tuple[str, tuple, int, int]]]:
        """``(data_start, entries)`` of a safetensors file on the Hub."""
        bad = f"source: {self.repo_id}/{filename} is not a safetensors file"
        (length,) = struct.unpack("<Q", self.range(filename, 0, 8))
        if length > _JSON_MAX_BYTES:
            raise ValueError(f"{bad} (its header declares {length} bytes)")
        header = _parse_json(self.range(filename, 8, length), bad)
        # the data area's size is not known without the file's size: bound
        # the offsets by the largest end declared (they are checked to match
        # the shapes), which the range request then confirms
        ends = [
            v["data_offsets"][1]
            for v in (header.values() if isinstance(header, dict) else ())
            if isinstance(v, dict)
            and isinstance(v.get("data_offsets"), list)
            and len(v["data_offsets"]) == 2
            and type(v["data_offsets"][1]) is int
        ]
        return 8 + length, _check_safetensors_header(header, max(ends, default=0), bad)


def _model_type(remote: _Remote, files: List[str]) -> Optional[str]:
    if "config.json" not in files:
        return None
    try:
        config = remote.json_file("config.json")
    except ValueError:
        return None
    value = config.get("model_type") if isinstance(config, dict) else None
    return value if isinstance(value, str) else None


def _weights_error(repo_id: str, files: List[str]) -> HubError:
    other = [f for f in files if f.lower().endswith(_OTHER_WEIGHTS)]
    if other:
        return HubError(
            f"{repo_id}: has no .safetensors weights, only {', '.join(other[:3])}"
            f"{' ...' if len(other) > 3 else ''}; posenc reads only the table of a safetensors "
            "checkpoint from the Hub, not a whole pickled file: download it yourself "
            f"(`hf download {repo_id}`) and probe the folder with --source"
        )
    return HubError(f"{repo_id}: holds no model weights (no .safetensors file)")


def _listing(remote: _Remote, files: List[str]) -> Dict[str, Any]:
    """The tensor names of the repository and the file holding each."""
    if _INDEX in files:
        index = remote.json_file(_INDEX)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise ValueError(f"source: {remote.repo_id}/{_INDEX} has no weight_map object")
        return {"files": dict(weight_map)}
    shards = sorted(f for f in files if f.endswith(".safetensors") and "/" not in f)
    if _SINGLE in files:
        shards = [_SINGLE]
    if not shards:
        raise _weights_error(remote.repo_id, files)
    names: Dict[str, str] = {}
    headers = {}
    for shard in shards:
        start, entries = remote.header(shard)
        headers[shard] = (start, entries)
        for k in entries:
            names.setdefault(k, shard)
    return {"files": names, "_headers": headers}


def _translate(hf: Any, exc: BaseException, repo_id: str, revision: str) -> Optional[HubError]:
    """A one-line message for an error of huggingface_hub or of the network."""
    errors = hf.errors
    if isinstance(exc, errors.GatedRepoError):
        return HubError(
            f"{repo_id}: the repository is gated: accept its conditions on its Hub page, "
            "then log in (`hf auth login`) or set HF_TOKEN"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubError(f"{repo_id}: no revision {revision!r} in the repository")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return HubError(
            f"{repo_id}: no such model repository on the Hub, nor a local file or "
            "directory (a private repository needs a login: `hf auth login` or HF_TOKEN); "
            "check the name"
        )
    if isinstance(exc, errors.EntryNotFoundError):
        return HubError(f"{repo_id}: a file of the repository was not found ({exc})".split("\n")[0])
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return None
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        if status in (401, 403):
            return HubError(
                f"{repo_id}: access refused (HTTP {status}): log in (`hf auth login`) or set "
                "HF_TOKEN to a token that can read it"
            )
        return HubError(f"{repo_id}: the Hub answered HTTP {status}")
    return None


def _network_errors(hf: Any) -> Tuple[Type[BaseException], ...]:
    """The errors of a failed connection: the builtins, and the transport
    errors of the HTTP client huggingface_hub uses (httpx since 1.0)."""
    kinds: List[Type[BaseException]] = [ConnectionError, TimeoutError]
    client = type(hf.utils.get_session())
    module = importlib.import_module(client.__module__.partition(".")[0])
    transport = getattr(module, "TransportError", None)
    if isinstance(transport, type) and issubclass(transport, BaseException):
        kinds.append(transport)
    return tuple(kinds)


def fetch(name: str, *, key: Optional[str] = None, max_rows: Optional[int] = None) -> HubTable:
    """The table of the Hub model `name` (``org/name[@revision]``)."""
    repo_id, revision = _split(name)
    revision = revision or "main"
    hf = _hub()
    endpoint, root, offline = _settings(hf)
    cache = _Cache(root, repo_id)
    where = f"{repo_id}@{revision} on the Hub"

    def from_cache(reason: str) -> HubTable:
        commit = cache.commit(revision)
        listing = cache.listing(commit) if commit else None
        if commit is None or listing is None:
            raise HubError(
                f"{repo_id}: {reason}, and its table is not in posenc's cache "
                f"({os.path.join(root, 'posenc')}); run once with network access "
                "(HF_HUB_OFFLINE unset) to fetch it"
            )
        used = _choose(list(listing["files"]), key, where)
        filename = listing["files"][used]
        table = cache.table(commit, filename, used)
        if table is None:
            raise HubError(
                f"{repo_id}: {reason}, and the table {used!r} is not in posenc's cache; "
                "run once with network access to fetch it"
            )
        _rows(table.shape, used, where, max_rows)
        return HubTable(
            table, repo_id, revision, commit, filename, used, listing.get("model_type"), 0, True
        )

    if offline:
        return from_cache("HF_HUB_OFFLINE is set")
    remote = _Remote(hf, repo_id, revision, endpoint, root)
    network = _network_errors(hf)
    try:
        commit, files = remote.info()
        cache.set_commit(revision, commit)
        listing = cache.listing(commit)
        headers: Dict[str, Any] = {}
        if listing is None:
            listing = _listing(remote, files)
            headers = listing.pop("_headers", {})
            listing["model_type"] = _model_type(remote, files)
            cache.set_listing(commit, listing)
        used = _choose(list(listing["files"]), key, where)
        filename = listing["files"][used]
        table = cache.table(commit, filename, used)
        from_cached = table is not None
        if table is None:
            if filename not in headers:
                headers[filename] = remote.header(filename)
            start, entries = headers[filename]
            if used not in entries:
                raise ValueError(
                    f"source: {repo_id}: the index places {used!r} in {filename}, which lacks it"
                )
            dtype_name, shape, begin, end = entries[used]
            _rows(shape, used, where, max_rows)
            data = remote.range(filename, start + begin, end - begin)
            table = _decode_safetensors(
                np.frombuffer(data, dtype=np.uint8).copy(), dtype_name, shape, used
            )
            cache.set_table(commit, filename, used, table)
    except network as exc:
        return from_cache(
            f"the Hub cannot be reached ({' '.join(str(exc).split()) or type(exc).__name__})"
        )
    except hf.errors.OfflineModeIsEnabled:
        return from_cache("offline mode is on")
    except Exception as exc:
        message = _translate(hf, exc, repo_id, revision)
        if message is None:
            raise
        raise message from exc
    return HubTable(
        table,
        repo_id,
        revision,
        commit,
        filename,
        used,
        listing.get("model_type"),
        remote.fetched,
        from_cached,
    )


def _rows(shape: tuple, key: str, where: str, max_rows: Optional[int]) -> None:
    if len(shape) != 2:
        raise ValueError(f"the table {key!r} in {where} must be 2-D, has shape {tuple(shape)}")
    if max_rows is not None:
        from .analyses import _check_rows

        _check_rows(shape[0], f"the table in {where} [{key}]", max_rows)


# ---------------------------------------------------------------- the paper's protocol

#: How Wang & Chen (2020) take each model's table: the published row it is
#: set beside, and the rows probed (512 positions).  GPT-2's 1024-row table
#: is cut to its first 512 rows; RoBERTa's first two rows (the padding index
#: 1 and the unused row 0: its positions start at padding_idx + 1 = 2) are
#: dropped, leaving 512.
PAPER_PROTOCOL: Dict[str, Tuple[str, int, int]] = {
    "bert": ("BERT", 0, 512),
    "roberta": ("RoBERTa", 2, 512),
    "gpt2": ("GPT-2", 0, 512),
}


def paper_rows(E: Any, model_type: Optional[str]) -> Tuple[Any, Optional[str], str]:
    """``(rows, published, note)``: the rows of `E` Wang & Chen probe for a
    model of `model_type` (``"bert"``, ``"roberta"``, ``"gpt2"``), the name of
    its published row in :data:`~posenc.probe.PUBLISHED`, and what was done;
    `E` itself, None and ``""`` for another model type."""
    rule = PAPER_PROTOCOL.get(model_type or "")
    if rule is None:
        return E, None, ""
    published, skip, count = rule
    n = int(E.shape[0])
    rows = E[skip : skip + count]
    parts = []
    if skip:
        parts.append(f"first {skip} rows (padding offset) dropped")
    if n - skip > count:
        parts.append(f"cut to {count} of {n - skip} rows")
    return rows, published, ", ".join(parts)


# ---------------------------------------------------------------- tensors one at a time


class HubTensors:
    """The tensors of a Hub model, read one at a time by range requests.

    Opening it fetches the repository's file list, ``config.json`` and the
    safetensors headers (two range requests a file); :meth:`read` then fetches
    one tensor's bytes (one range request), so that a caller can go through
    the layers without holding more than one weight, nor downloading what it
    does not read.  Nothing is cached: every read needs the network.

    Attributes
    ----------
    repo_id, revision, commit : str
    config : dict
        ``config.json`` (empty when the repository has none).
    bytes_fetched : int
        The bytes received so far (file list and ``config.json`` included).
    """

    def __init__(self, name: str) -> None:
        repo_id, revision = _split(name)
        self.repo_id, self.revision = repo_id, revision or "main"
        self._hf = hf = _hub()
        endpoint, root, offline = _settings(hf)
        if offline:
            raise HubError(
                f"{repo_id}: HF_HUB_OFFLINE is set, and reading a model's weights layer by "
                "layer needs the network (nothing of it is cached)"
            )
        self._remote = _Remote(hf, repo_id, self.revision, endpoint, root)
        with self._translated():
            self.commit, files = self._remote.info()
            listing = _listing(self._remote, files)
            self._headers: Dict[str, Any] = listing.pop("_headers", {})
            self._files: Dict[str, str] = listing["files"]
            config = self._remote.json_file("config.json") if "config.json" in files else {}
        self.config: Dict[str, Any] = config if isinstance(config, dict) else {}

    @property
    def bytes_fetched(self) -> int:
        return self._remote.fetched

    def keys(self) -> List[str]:
        return list(self._files)

    def _entry(self, key: str) -> Tuple[int, Tuple[str, tuple, int, int], str]:
        if key not in self._files:
            raise KeyError(f"{self.repo_id}: no tensor {key!r} in the checkpoint")
        filename = self._files[key]
        if filename not in self._headers:
            self._headers[filename] = self._remote.header(filename)
        start, entries = self._headers[filename]
        if key not in entries:
            raise ValueError(
                f"source: {self.repo_id}: the index places {key!r} in {filename}, which lacks it"
            )
        return start, entries[key], filename

    def shape(self, key: str) -> Tuple[int, ...]:
        """The tensor's shape, from the header (nothing more fetched)."""
        with self._translated():
            return tuple(self._entry(key)[1][1])

    def read(self, key: str) -> np.ndarray:
        """The tensor `key` (bfloat16 widened to float32), by one range request."""
        with self._translated():
            start, (dtype_name, shape, begin, end), filename = self._entry(key)
            data = self._remote.range(filename, start + begin, end - begin)
        return _decode_safetensors(
            np.frombuffer(data, dtype=np.uint8).copy(), dtype_name, shape, key
        )

    def _translated(self) -> Any:
        import contextlib

        hf, repo_id, revision = self._hf, self.repo_id, self.revision
        network = _network_errors(hf)

        @contextlib.contextmanager
        def guard() -> Any:
            try:
                yield
            except network as exc:
                raise HubError(
                    f"{repo_id}: the Hub cannot be reached "
                    f"({' '.join(str(exc).split()) or type(exc).__name__})"
                ) from exc
            except hf.errors.OfflineModeIsEnabled as exc:
                raise HubError(
                    f"{repo_id}: offline mode is on; this read needs the network"
                ) from exc
            except HubError:
                raise
            except Exception as exc:
                message = _translate(hf, exc, repo_id, revision)
                if message is None:
                    raise
                raise message from exc

        return guard()
