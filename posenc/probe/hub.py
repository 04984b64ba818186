"""A position-embedding table from a model on the Hugging Face Hub, by name.

Only what the table needs is fetched: the repository's file list, the
safetensors header (two HTTP range requests: its 8-byte length, then the
JSON) and the table's own bytes (a third range request); a sharded
checkpoint is followed through its ``model.safetensors.index.json``.  The
bytes are cached under ``<HF hub cache>/posenc/``, keyed by repository,
commit, file and tensor, so that a second run needs no network.

``huggingface_hub`` (``pip install "posenc[hub]"``) is imported only when a
Hub name is used: its endpoint (``HF_ENDPOINT``), token (``HF_TOKEN`` or the
saved login), cache directory (``HF_HOME``, ``HF_HUB_CACHE``) and offline
setting (``HF_HUB_OFFLINE``) are honoured.  The requests are made here, with
the HTTP client it uses (httpx; proxies and certificates from the
environment), within limits a server cannot stretch:

- each request waits at most ``timeout`` seconds to connect and for each
  next bytes (default: ``HF_HUB_ETAG_TIMEOUT`` for the model info,
  ``HF_HUB_DOWNLOAD_TIMEOUT`` for the files, 10 s each, as huggingface_hub
  reads them);
- one load (a table, or one step of :class:`HubTensors`) takes at most
  ``deadline`` seconds in all, however the server trickles or stalls
  (default 120 s, ``POSENC_HUB_DEADLINE``);
- a tensor is fetched only if its declared size (shape times dtype size,
  and the span of its data offsets) is at most ``max_bytes`` (default
  256 MiB, ``POSENC_HUB_MAX_BYTES``), checked before any of its bytes are
  asked for; the model info, ``config.json`` and the index at most
  16 MiB, a safetensors header at most the format's 100 MB;
- at most 10 redirects, to ``http(s)`` URLs only, the token sent to the
  endpoint's own host alone;
- a revision must be a branch, tag or commit name as git allows one.

Every failure is a :class:`HubError` (an ``OSError``) or a ``ValueError``
(a malformed checkpoint, a table above the limits, a bad name) whose
message is one line naming the repository and what to do.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib
import json
import math
import os
import re
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple
from urllib.parse import quote

import numpy as np

from .._typing import NDArray
from ._common import MAX_DEADLINE as _MAX_DEADLINE
from ._common import MAX_TIMEOUT as _MAX_TIMEOUT
from ._common import rows_note
from ._readers import (
    _JSON_MAX_BYTES,
    _SAFETENSORS_DTYPES,
    _SAFETENSORS_ITEMSIZE,
    _check_safetensors_header,
    _decode_safetensors,
    _parse_json,
    _shown,
    choose_key,
)

#: A Hub repository id with an optional revision: ``name``, ``org/name``,
#: ``org/name@revision`` (the Hub's own rule for the names: letters, digits,
#: ``-``, ``_``, ``.``, not starting or ending with ``-`` or ``.``).
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_NAME = re.compile(rf"^(?P<repo>(?:{_NAME}/)?{_NAME})(?:@(?P<revision>[^\s@]+))?$")
_COMMIT = re.compile(r"[0-9a-f]{40}")

_SINGLE = "model.safetensors"
_INDEX = "model.safetensors.index.json"
_OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf")

#: Seconds a request waits to connect and for its next bytes, unless
#: HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT say otherwise (huggingface_hub's).
DEFAULT_TIMEOUT = 10.0
#: Seconds one load may take in all (``POSENC_HUB_DEADLINE``).
DEFAULT_DEADLINE = 120.0
#: The largest tensor fetched, in bytes (``POSENC_HUB_MAX_BYTES``): 256 MiB.
DEFAULT_MAX_BYTES = 256 * 2**20
#: Bound on the model info, ``config.json`` and the index, in bytes.
_JSON_LIMIT = 16 * 2**20
_MAX_REDIRECTS = 10
_MAX_REVISION = 255
_REDIRECTS = (301, 302, 303, 307, 308)


class HubError(OSError):
    """A model on the Hub whose table cannot be fetched: the message says
    which problem (missing, gated, no safetensors, no network, offline with
    nothing cached, a server too slow or answering what it should not) and
    what to do."""


class _Unreachable(HubError):
    """No answer, or not in time: a load falls back on the cache."""

    def __init__(self, repo_id: str, reason: str, advice: str) -> None:
        super().__init__(f"{repo_id}: {reason}; {advice}")
        self.reason, self.advice = reason, advice


class _TooLarge(ValueError):
    """A tensor declared larger than ``max_bytes``."""


@dataclass(frozen=True)
class HubTable:
    """A table fetched from the Hub, and where it came from.

    `config` holds the entries of the model's ``config.json`` that place its
    positions in the table (``model_type``, ``pad_token_id``), each as the
    file gives it and only where the file has it: a ``pad_token_id`` left
    out is its config class's default to transformers, a null is None, and
    :func:`~posenc.probe.offsets.position_rule` reads them so.  Empty
    without a readable ``config.json``.
    """

    table: np.ndarray
    repo_id: str
    revision: str
    commit: str
    filename: str
    key: str
    model_type: Optional[str]
    bytes_fetched: int  # 0 when read from the cache
    from_cache: bool
    config: Dict[str, Any] = field(default_factory=dict)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


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
    """``(repo_id, revision)`` of a Hub name, both checked as the Hub and git
    check them (a ValueError naming what is wrong)."""
    m = _HUB_NAME.match(name)
    repo_id = m.group("repo") if m else ""
    if m is None or "--" in repo_id or ".." in repo_id or repo_id.endswith(".git"):
        raise ValueError(
            f"source: {name!r} is neither an existing path nor a Hub repository id "
            "(name or org/name[@revision]: letters, digits, '-', '_' and '.', at most 96 "
            "a part, not starting or ending with '-' or '.', without '--', '..' or a "
            "final '.git')"
        )
    revision = m.group("revision")
    if revision is not None:
        problem = _revision_problem(revision)
        if problem:
            raise ValueError(
                f"source: {repo_id}: the revision {revision!r} is not a branch, tag or "
                f"commit name ({problem}); give one such as main, v1.0, refs/pr/1 or a "
                "commit id"
            )
    return repo_id, revision


def _revision_problem(revision: str) -> str:
    """What makes `revision` a name git refuses for a branch or tag (its
    ``check-ref-format`` rules), or ``""``."""
    if len(revision) > _MAX_REVISION:
        return f"it is longer than {_MAX_REVISION} characters"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in revision):
        return "it holds a control character"
    bad = sorted(set("~^:?*[\\") & set(revision))
    if bad:
        return f"it holds {bad[0]!r}"
    if ".." in revision:
        return "it holds '..'"
    if revision.startswith("/") or revision.endswith("/") or "//" in revision:
        return "it has an empty part between '/'"
    if revision.endswith("."):
        return "it ends with '.'"
    for part in revision.split("/"):
        if part.startswith("."):
            return "a part of it starts with '.'"
        if part.endswith(".lock"):
            return "a part of it ends with '.lock'"
    return ""


def _hub() -> Any:
    try:
        hf = importlib.import_module("huggingface_hub")
        for sub in ("constants", "utils"):  # a lazy package: load them now
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


# ---------------------------------------------------------------- the limits


@dataclass(frozen=True)
class _Limits:
    info_timeout: float  # seconds, the model info request
    file_timeout: float  # seconds, a file's requests
    deadline: float  # seconds, one load
    max_bytes: int  # the largest tensor fetched


#: Limits a caller sets for the loads it makes (the command line's flags).
_OVERRIDES: contextvars.ContextVar[Optional[Dict[str, Any]]] = contextvars.ContextVar(
    "posenc_hub_limits", default=None
)


@contextlib.contextmanager
def limits(**values: Any) -> Iterator[None]:
    """Within this context, the loads take these limits (``timeout``,
    ``deadline``, ``max_bytes``) where a call gives none."""
    _limits(**values)  # checked now
    token = _OVERRIDES.set({**(_OVERRIDES.get() or {}), **values})
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


def _seconds(value: Any, name: str, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not (0 < value <= maximum):  # NaN fails too
        raise ValueError(f"{name} must be a number of seconds in (0, {maximum:g}], got {value!r}")
    return float(value)


def _env_seconds(var: str, whole: bool, maximum: float, default: float) -> float:
    text = os.environ.get(var, "").strip()
    if not text:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        kind = "a whole number of seconds (as huggingface_hub reads it)" if whole else "seconds"
        raise ValueError(f"{var}={text!r} is not {kind}") from None
    if whole and value == 0:
        return default  # huggingface_hub's reading: 0 is its default
    if not (0 < value <= maximum):
        raise ValueError(f"{var}={text!r} must be in (0, {maximum:g}] seconds")
    return float(value)


def check_limits(
    timeout: Optional[float] = None,
    deadline: Optional[float] = None,
    max_bytes: Optional[int] = None,
) -> None:
    """Check the limits given (not the environment's)."""
    if timeout is not None:
        _seconds(timeout, "timeout", _MAX_TIMEOUT)
    if deadline is not None:
        _seconds(deadline, "deadline", _MAX_DEADLINE)
    if max_bytes is not None:
        _bytes(max_bytes)


def _bytes(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_bytes must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"max_bytes must be at least 1, got {value}")
    return value


def _limits(
    timeout: Optional[float] = None,
    deadline: Optional[float] = None,
    max_bytes: Optional[int] = None,
) -> _Limits:
    """The limits of one load: the arguments, else the context's, else the
    environment's, else the defaults; each checked."""
    given = _OVERRIDES.get() or {}
    timeout = given.get("timeout") if timeout is None else timeout
    deadline = given.get("deadline") if deadline is None else deadline
    max_bytes = given.get("max_bytes") if max_bytes is None else max_bytes
    if timeout is not None:
        info_timeout = file_timeout = _seconds(timeout, "timeout", _MAX_TIMEOUT)
    else:
        info_timeout = _env_seconds("HF_HUB_ETAG_TIMEOUT", True, _MAX_TIMEOUT, DEFAULT_TIMEOUT)
        file_timeout = _env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", True, _MAX_TIMEOUT, DEFAULT_TIMEOUT)
    if deadline is not None:
        seconds = _seconds(deadline, "deadline", _MAX_DEADLINE)
    else:
        seconds = _env_seconds("POSENC_HUB_DEADLINE", False, _MAX_DEADLINE, DEFAULT_DEADLINE)
    if max_bytes is None:
        text = os.environ.get("POSENC_HUB_MAX_BYTES", "").strip()
        try:
            max_bytes = int(text) if text else DEFAULT_MAX_BYTES
        except ValueError:
            raise ValueError(f"POSENC_HUB_MAX_BYTES={text!r} is not a number of bytes") from None
        if max_bytes < 1:
            raise ValueError(f"POSENC_HUB_MAX_BYTES={text!r} must be at least 1 byte")
    else:
        max_bytes = _bytes(max_bytes)
    return _Limits(info_timeout, file_timeout, seconds, max_bytes)


_TIMEOUT_ADVICE = (
    "try again, or allow longer with timeout= (posenc probe --timeout) or "
    "HF_HUB_DOWNLOAD_TIMEOUT / HF_HUB_ETAG_TIMEOUT"
)
_DEADLINE_ADVICE = (
    "try again, or allow longer with deadline= (posenc probe --deadline) or POSENC_HUB_DEADLINE"
)


class _Start(NamedTuple):
    """What one load starts from: the name's repository and revision
    (``main`` where it names none), the load's limits, huggingface_hub, and
    the environment's endpoint, hub cache folder and offline switch
    (:func:`_settings`)."""

    repo_id: str
    revision: str
    limits: _Limits
    hf: Any
    endpoint: str
    root: str
    offline: bool


def _start(
    name: str, timeout: Optional[float], deadline: Optional[float], max_bytes: Optional[int]
) -> _Start:
    """The :class:`_Start` of a load of `name`: the name checked first, then
    the limits, then huggingface_hub imported."""
    repo_id, revision = _split(name)
    limits = _limits(timeout, deadline, max_bytes)
    hf = _hub()
    endpoint, root, offline = _settings(hf)
    return _Start(repo_id, revision or "main", limits, hf, endpoint, root, offline)


# ---------------------------------------------------------------- the cache


def _safe(part: str) -> str:
    """`part` as one file name: quoted, never ``.`` or ``..``, never long."""
    text = quote(part, safe="")
    if text in ("", ".", ".."):
        return text.replace(".", "%2E") or "_"
    if len(text) > 120:
        return text[:60] + "-" + hashlib.sha256(part.encode()).hexdigest()[:40]
    return text


class _Cache:
    """``<hub cache>/posenc/<repo>/``: ``refs/<revision>`` holds a commit;
    ``<commit>/tensors.json`` the tensor names (and the file of each),
    the model type and the key chosen; ``<commit>/<file>/<tensor>.npy`` a
    table's bytes."""

    def __init__(self, root: str, repo_id: str) -> None:
        self.repo_id = repo_id
        self.folder = os.path.join(root, "posenc", "models--" + repo_id.replace("/", "--"))

    def _write(self, path: str, data: bytes) -> None:
        try:
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
        except OSError as exc:
            raise HubError(
                f"{self.repo_id}: cannot write posenc's cache in {self.folder} "
                f"({_one_line(exc.strerror or str(exc))}); set HF_HUB_CACHE (or HF_HOME) to a "
                "writable directory"
            ) from exc

    def commit(self, revision: str) -> Optional[str]:
        if _COMMIT.fullmatch(revision):
            return revision
        path = os.path.join(self.folder, "refs", _safe(revision))
        try:
            with open(path, encoding="utf-8") as f:
                commit = f.read(100).strip()
        except (OSError, ValueError):
            return None
        return commit if _COMMIT.fullmatch(commit) else None

    def set_commit(self, revision: str, commit: str) -> None:
        if revision != commit:
            self._write(os.path.join(self.folder, "refs", _safe(revision)), commit.encode())

    def _listing_path(self, commit: str) -> str:
        return os.path.join(self.folder, _safe(commit), "tensors.json")

    def listing(self, commit: str) -> Optional[Dict[str, Any]]:
        try:
            with open(self._listing_path(commit), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
            return None
        if not all(isinstance(v, str) for v in data["files"].values()):
            return None
        return data if isinstance(data.get("config"), dict) else None

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
        except (OSError, ValueError, EOFError):
            return None

    def set_table(self, commit: str, filename: str, key: str, table: np.ndarray) -> None:
        import io

        buffer = io.BytesIO()
        np.save(buffer, table, allow_pickle=False)
        self._write(self._table_path(commit, filename, key), buffer.getvalue())


# ---------------------------------------------------------------- HTTP


def _client_module(hf: Any) -> Any:
    """The HTTP client package huggingface_hub uses (httpx, or its
    successor httpx2)."""
    client = type(hf.utils.get_session())
    return importlib.import_module(client.__module__.partition(".")[0])


_SSL_CONTEXTS: Dict[Tuple[str, str, str], Any] = {}


def _ssl_context(http: Any) -> Any:
    """The client's SSL context (certificates from the environment, as its
    default), made once: making one reads the certificate store."""
    key = (http.__name__, os.environ.get("SSL_CERT_FILE", ""), os.environ.get("SSL_CERT_DIR", ""))
    if key not in _SSL_CONTEXTS:
        _SSL_CONTEXTS[key] = http.create_ssl_context(trust_env=True)
    return _SSL_CONTEXTS[key]


def _shut(sock: Any) -> None:
    with contextlib.suppress(OSError, ValueError, TypeError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _origin(url: Any) -> Tuple[str, str, Optional[int]]:
    return (url.scheme, url.host, url.port)


def _filename_ok(name: object) -> bool:
    """Whether `name` is a file path of a repository (no ``..``, no
    absolute path, no backslash or control character)."""
    if not isinstance(name, str) or not name or len(name) > 1024:
        return False
    if "\\" in name or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


class _Session:
    """The HTTP of one load: a client of its own, each request's timeout,
    and the deadline, which a watchdog enforces by shutting the load's
    sockets down (however a server trickles, a blocked read then ends)."""

    def __init__(self, remote: _Remote) -> None:
        self.remote = remote
        self.http = _client_module(remote.hf)
        self.deadline = remote.limits.deadline
        self.end = time.monotonic() + self.deadline
        self._lock = threading.Lock()
        self._sockets: List[Any] = []
        self.expired = False
        self.client = self.http.Client(
            follow_redirects=False, trust_env=True, timeout=None, verify=_ssl_context(self.http)
        )
        self._watchdog = threading.Timer(self.deadline, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()

    def close(self) -> None:
        self._watchdog.cancel()
        with contextlib.suppress(Exception):
            self.client.close()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def _trace(self, event: str, info: Dict[str, Any]) -> None:
        if event.endswith((".connect_tcp.complete", ".start_tls.complete")):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is None:
                return
            with self._lock:
                self._sockets.append(sock)
                expired = self.expired
            if expired:
                _shut(sock)

    def _late(self, what: str) -> HubError:
        return _Unreachable(
            self.remote.repo_id,
            f"the load took longer than its deadline of {self.deadline:g} s ({what})",
            _DEADLINE_ADVICE,
        )

    def _timeout(self, timeout: float, what: str) -> float:
        left = self.end - time.monotonic()
        if left <= 0 or self.expired:
            raise self._late(what)
        return min(timeout, left)

    @contextlib.contextmanager
    def _errors(self, what: str, timeout: float) -> Iterator[None]:
        """The client's errors as one-line HubErrors naming the repository."""
        h, repo_id = self.http, self.remote.repo_id
        try:
            yield
        except HubError:
            raise
        except h.TimeoutException as exc:
            if self.expired or time.monotonic() >= self.end:
                raise self._late(what) from exc
            raise _Unreachable(
                repo_id, f"the Hub did not answer within {timeout:g} s ({what})", _TIMEOUT_ADVICE
            ) from exc
        except h.UnsupportedProtocol as exc:
            raise HubError(
                f"{repo_id}: {what}: {_one_line(exc) or 'not an http(s) URL'}; check "
                f"HF_ENDPOINT ({self.remote.endpoint})"
            ) from exc
        except h.TransportError as exc:
            if self.expired or time.monotonic() >= self.end:
                raise self._late(what) from exc
            reason = _one_line(exc) or type(exc).__name__
            if isinstance(exc, h.ConnectError):
                reason = f"the Hub cannot be reached ({reason})"
            else:
                reason = f"the connection to the Hub broke off ({what}: {reason})"
            raise _Unreachable(repo_id, reason, "check the network and try again") from exc
        except (h.HTTPError, h.InvalidURL, h.StreamError, h.CookieConflict) as exc:
            raise HubError(
                f"{repo_id}: {what}: {type(exc).__name__}: {_one_line(exc)}; check HF_ENDPOINT "
                f"({self.remote.endpoint})"
            ) from exc

    def open(self, url: str, headers: Dict[str, str], timeout: float, what: str) -> Any:
        """The response to GET `url`, its headers read, redirects followed;
        the caller reads the body and closes it."""
        h = self.http
        with self._errors(what, timeout):
            target = h.URL(url)
            first = _origin(target)
            for _ in range(_MAX_REDIRECTS + 1):
                wait = self._timeout(timeout, what)
                sent = dict(headers)
                if _origin(target) != first:
                    sent.pop("authorization", None)  # the token goes to the endpoint alone
                    sent.pop("Authorization", None)
                request = self.client.build_request(
                    "GET", target, headers=sent, timeout=wait, extensions={"trace": self._trace}
                )
                response = self.client.send(request, stream=True)
                if response.status_code not in _REDIRECTS:
                    return response
                location = response.headers.get("Location")
                response.close()
                if not location:
                    raise HubError(
                        f"{self.remote.repo_id}: the server redirected {what} without a "
                        f"Location; check HF_ENDPOINT ({self.remote.endpoint})"
                    )
                target = target.join(location)
                if target.scheme not in ("http", "https"):
                    raise HubError(
                        f"{self.remote.repo_id}: the server redirected {what} to a "
                        f"{_one_line(target.scheme)[:20]!r} URL, which is not followed; check "
                        f"HF_ENDPOINT ({self.remote.endpoint})"
                    )
            raise HubError(
                f"{self.remote.repo_id}: the server redirected {what} more than "
                f"{_MAX_REDIRECTS} times (a redirect loop); check HF_ENDPOINT "
                f"({self.remote.endpoint}) or try again later"
            )

    def read(
        self,
        response: Any,
        limit: int,
        what: str,
        timeout: float,
        into: Optional[NDArray[np.uint8]] = None,
        counted: bool = True,
    ) -> Any:
        """The body of `response`: at most `limit` bytes (into the uint8
        array `into`, which it must fill exactly, when given); `counted`:
        added to the bytes fetched."""
        repo_id = self.remote.repo_id
        with contextlib.closing(response), self._errors(what, timeout):
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise HubError(
                    f"{repo_id}: the server sent {what} encoded as {encoding[:40]!r}, which was "
                    f"not asked for; check HF_ENDPOINT ({self.remote.endpoint})"
                )
            declared = response.headers.get("Content-Length")
            if declared is not None:
                if not declared.strip().isdigit():
                    raise HubError(
                        f"{repo_id}: the server sent {what} with Content-Length "
                        f"{declared[:40]!r}; check HF_ENDPOINT ({self.remote.endpoint})"
                    )
                if int(declared) > limit:
                    raise self._too_long(what, int(declared), limit, into, exact=True)
            data = bytearray()
            done = 0
            for chunk in response.iter_raw():
                if time.monotonic() >= self.end or self.expired:
                    raise self._late(what)
                if done + len(chunk) > limit:
                    raise self._too_long(what, done + len(chunk), limit, into)
                if into is None:
                    data += chunk
                else:
                    into[done : done + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
                done += len(chunk)
                if counted:
                    self.remote.fetched += len(chunk)
            if into is not None and done != len(into):
                raise HubError(
                    f"{repo_id}: asked for {len(into)} bytes ({what}), got {done}; try again, "
                    f"or check HF_ENDPOINT ({self.remote.endpoint})"
                )
        return bytes(data) if into is None else into

    def _too_long(
        self, what: str, size: int, limit: int, into: Any, exact: bool = False
    ) -> HubError:
        more = "" if exact else " or more"
        if into is not None:
            return HubError(
                f"{self.remote.repo_id}: asked for {limit} bytes ({what}), the server sends "
                f"{size}{more}; check HF_ENDPOINT ({self.remote.endpoint})"
            )
        return HubError(
            f"{self.remote.repo_id}: {what} is {size:,} bytes{more}, above posenc's bound "
            f"of {limit:,}; check HF_ENDPOINT ({self.remote.endpoint})"
        )


def _status_error(repo_id: str, revision: str, response: Any, what: str, endpoint: str) -> HubError:
    """The one-line error of an answer that is not a success, from its
    status and ``X-Error-Code`` alone (its body is not read)."""
    status = response.status_code
    code = response.headers.get("X-Error-Code", "")
    message = response.headers.get("X-Error-Message", "")
    if code == "GatedRepo":
        return HubError(
            f"{repo_id}: the repository is gated: accept its conditions on its Hub page, "
            "then log in (`hf auth login`) or set HF_TOKEN"
        )
    if code == "RevisionNotFound":
        return HubError(
            f"{repo_id}: no revision {revision!r} in the repository; give a branch, tag or "
            "commit it has"
        )
    if code == "EntryNotFound":
        return HubError(
            f"{repo_id}: the Hub does not serve {what} (HTTP {status}, EntryNotFound), which "
            "the repository lists; try again later"
        )
    if code == "RepoNotFound" or (
        status == 401 and message != "Invalid credentials in Authorization header"
    ):
        return HubError(
            f"{repo_id}: no such model repository on the Hub, nor a local file or "
            "directory (a private repository needs a login: `hf auth login` or HF_TOKEN); "
            "check the name"
        )
    if status in (401, 403):
        return HubError(
            f"{repo_id}: access refused (HTTP {status}): log in (`hf auth login`) or set "
            "HF_TOKEN to a token that can read it"
        )
    if status == 404:
        return HubError(
            f"{repo_id}: the Hub answered HTTP 404 to {what}; check the name and HF_ENDPOINT "
            f"({endpoint})"
        )
    if status == 429:
        return HubError(f"{repo_id}: the Hub limits the requests (HTTP 429); try again later")
    return HubError(
        f"{repo_id}: the Hub answered HTTP {status} to {what}; try again later, or check "
        f"HF_ENDPOINT ({endpoint})"
    )


class _Remote:
    """A repository on the Hub, at one revision: its info, files and ranges,
    each request made in the current session (:meth:`session`)."""

    def __init__(
        self, hf: Any, repo_id: str, revision: str, endpoint: str, limits: _Limits
    ) -> None:
        self.hf, self.repo_id, self.revision = hf, repo_id, revision
        self.endpoint, self.limits = endpoint, limits
        if not re.match(r"https?://[^/]", endpoint):
            raise HubError(
                f"{repo_id}: HF_ENDPOINT {endpoint!r} is not an http(s) URL; set it to the "
                "Hub's address (https://huggingface.co by default)"
            )
        try:
            self.headers = dict(hf.utils.build_hf_headers())
        except Exception as exc:  # a token it cannot read
            raise HubError(
                f"{repo_id}: huggingface_hub cannot build the request headers "
                f"({_one_line(exc)}); check HF_TOKEN or log in again (`hf auth login`)"
            ) from exc
        self.fetched = 0
        self.commit = revision
        self.sizes: Dict[str, Optional[int]] = {}
        self._session: Optional[_Session] = None

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """One load: every request within it shares its deadline."""
        self._session = _Session(self)
        try:
            yield
        finally:
            self._session.close()
            self._session = None

    @property
    def http(self) -> _Session:
        assert self._session is not None, "a request outside a session"
        return self._session

    def _file_url(self, filename: str) -> str:
        return (
            f"{self.endpoint}/{self.repo_id}/resolve/{quote(self.commit, safe='')}/"
            f"{quote(filename)}"
        )

    def _get(self, url: str, what: str, timeout: float, headers: Dict[str, str]) -> Any:
        response = self.http.open(url, {**self.headers, **headers}, timeout, what)
        if response.status_code >= 400:
            response.close()
            raise _status_error(self.repo_id, self.revision, response, what, self.endpoint)
        return response

    def _json(self, url: str, what: str, timeout: float, bad: str, counted: bool = True) -> Any:
        response = self._get(url, what, timeout, {"Accept-Encoding": "identity"})
        if response.status_code != 200:
            response.close()
            raise HubError(
                f"{self.repo_id}: the Hub answered {what} with HTTP {response.status_code}, "
                f"not 200; check HF_ENDPOINT ({self.endpoint})"
            )
        data = self.http.read(response, _JSON_LIMIT, what, timeout, counted=counted)
        return _parse_json(data, bad)

    def info(self) -> Tuple[str, List[str]]:
        """``(commit, file names)`` of the revision."""
        url = f"{self.endpoint}/api/models/{self.repo_id}/revision/{quote(self.revision, safe='')}"
        bad = (
            f"{self.repo_id}: the Hub's model info is not valid JSON; check HF_ENDPOINT "
            f"({self.endpoint})"
        )
        try:
            info = self._json(url, "the model info", self.limits.info_timeout, bad, False)
        except ValueError as exc:
            raise HubError(_one_line(exc)) from exc
        sha = info.get("sha") if isinstance(info, dict) else None
        siblings = info.get("siblings") if isinstance(info, dict) else None
        if not isinstance(sha, str) or not _COMMIT.fullmatch(sha):
            what = "none" if sha is None else f"{type(sha).__name__} {sha!r:.60}"
            raise HubError(
                f"{self.repo_id}: the Hub's model info gives no commit id (its sha is {what}); "
                f"check HF_ENDPOINT ({self.endpoint})"
            )
        if not isinstance(siblings, list) or not all(
            isinstance(s, dict) and isinstance(s.get("rfilename"), str) for s in siblings
        ):
            raise HubError(
                f"{self.repo_id}: the Hub's model info has no list of files (siblings); check "
                f"HF_ENDPOINT ({self.endpoint})"
            )
        files = [s["rfilename"] for s in siblings]
        odd = next((f for f in files if not _filename_ok(f)), None)
        if odd is not None:
            raise HubError(
                f"{self.repo_id}: the Hub's model info lists {odd!r:.80}, which is not a file "
                f"name; check HF_ENDPOINT ({self.endpoint})"
            )
        self.commit = sha
        return sha, files

    def json_file(self, filename: str) -> Any:
        bad = f"source: {self.repo_id}/{filename} is not valid JSON"
        return self._json(self._file_url(filename), filename, self.limits.file_timeout, bad)

    def range(self, filename: str, start: int, length: int, what: str = "") -> np.ndarray:
        """Bytes ``start .. start + length - 1`` of `filename` (an aligned
        uint8 array), by a range request; refused (not downloaded) if the
        server sends the whole file or another range."""
        out = np.empty(length, dtype=np.uint8)
        if length == 0:
            return out
        what = what or f"bytes {start}-{start + length - 1} of {filename}"
        end = start + length - 1
        timeout = self.limits.file_timeout
        headers = {"Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
        response = self._get(self._file_url(filename), what, timeout, headers)
        if response.status_code != 206:
            response.close()
            raise HubError(
                f"{self.repo_id}: the server answered the range request for {filename} "
                f"with status {response.status_code}, not 206 Partial Content; posenc "
                "does not download a whole checkpoint (download it yourself with "
                f"`hf download {self.repo_id}` and give the folder as the source)"
            )
        given = response.headers.get("Content-Range", "")
        m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", given)
        if m is None or (int(m.group(1)), int(m.group(2))) != (start, end):
            response.close()
            raise HubError(
                f"{self.repo_id}: asked for bytes {start}-{end} of {filename}, the server "
                f"answered with {_one_line(given)[:80] or 'no Content-Range'!r}; check "
                f"HF_ENDPOINT ({self.endpoint})"
            )
        total = None if m.group(3) == "*" else int(m.group(3))
        if total is not None and total <= end:
            response.close()
            raise HubError(
                f"{self.repo_id}: the server answered bytes {start}-{end} of {filename} "
                f"as a file of {total} bytes; check HF_ENDPOINT ({self.endpoint})"
            )
        self.sizes.setdefault(filename, total)
        return self.http.read(response, length, what, timeout, into=out)

    def header(self, filename: str) -> Tuple[int, Dict[str, Tuple[str, tuple, int, int]]]:
        """``(data_start, entries)`` of a safetensors file on the Hub."""
        bad = f"source: {self.repo_id}/{filename} is not a safetensors file"
        what = f"the safetensors header of {filename}"
        (length,) = struct.unpack("<Q", self.range(filename, 0, 8, what).tobytes())
        if length > _JSON_MAX_BYTES:
            raise ValueError(
                f"{bad} (bad header: it declares {length} bytes, above the format's bound of "
                f"{_JSON_MAX_BYTES})"
            )
        size = self.sizes.get(filename)
        if size is not None and 8 + length > size:
            raise ValueError(
                f"{bad} (bad header: it declares {length} bytes, past the end of the "
                f"{size}-byte file)"
            )
        header = _parse_json(self.range(filename, 8, length, what).tobytes(), bad)
        if size is None:
            # the data area's size is not known: bound the offsets by the
            # largest end declared, which the range request then confirms
            ends = [
                v["data_offsets"][1]
                for v in (header.values() if isinstance(header, dict) else ())
                if isinstance(v, dict)
                and isinstance(v.get("data_offsets"), list)
                and len(v["data_offsets"]) == 2
                and type(v["data_offsets"][1]) is int
            ]
            data_size = max(ends, default=0)
        else:
            data_size = size - 8 - length
        return 8 + length, _check_safetensors_header(header, data_size, bad)

    def tensor(
        self, filename: str, start: int, entry: Tuple[str, tuple, int, int], key: str
    ) -> Any:
        """The tensor `key` of `filename` (its header entry `entry`), its
        size checked against ``max_bytes`` before a byte of it is asked for."""
        _check_size(self.repo_id, filename, key, entry, self.limits.max_bytes)
        dtype_name, shape, begin, end = entry
        data = self.range(filename, start + begin, end - begin, f"the tensor {key!r:.100}")
        return _decode_safetensors(data, dtype_name, shape, key)


def _check_size(
    repo_id: str,
    filename: str,
    key: str,
    entry: Tuple[str, tuple, int, int],
    max_bytes: int,
) -> None:
    """Refuse a tensor posenc cannot decode, or one declared larger than
    `max_bytes` (by its shape and dtype, or by its data offsets)."""
    dtype_name, shape, begin, end = entry
    if dtype_name not in _SAFETENSORS_DTYPES:
        raise ValueError(
            f"source: {repo_id}/{filename}: the tensor {key!r:.100} is of safetensors dtype "
            f"{dtype_name!r:.40}, which posenc does not read"
        )
    size = max(math.prod(shape) * _SAFETENSORS_ITEMSIZE[dtype_name], end - begin)
    if size > max_bytes:
        raise _TooLarge(
            f"source: {repo_id}/{filename}: the tensor {key!r:.100} declares shape "
            f"{tuple(shape)!s:.80} of {dtype_name}, {size:,} bytes, above the limit of "
            f"{max_bytes:,} bytes; raise it with max_bytes= or POSENC_HUB_MAX_BYTES"
        )


def _position_config(remote: _Remote, files: List[str]) -> Dict[str, Any]:
    """:attr:`HubTable.config`: the entries of ``config.json`` that place
    the positions, those the file has (empty without a readable one)."""
    if "config.json" not in files:
        return {}
    try:
        config = remote.json_file("config.json")
    except ValueError:
        return {}
    if not isinstance(config, dict):
        return {}
    return {k: config[k] for k in ("model_type", "pad_token_id") if k in config}


def _model_type(config: Dict[str, Any]) -> Optional[str]:
    value = config.get("model_type")
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
        if not isinstance(weight_map, dict):
            raise ValueError(f"source: {remote.repo_id}/{_INDEX} has no weight_map object")
        held = set(files)
        for key, shard in weight_map.items():
            if not isinstance(shard, str) or shard not in held:
                raise ValueError(
                    f"source: {remote.repo_id}/{_INDEX} places {key!r:.100} in {shard!r:.100}, "
                    "which is not a file of the repository"
                )
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


def fetch(
    name: str,
    *,
    key: Optional[str] = None,
    max_rows: Optional[int] = None,
    paper: bool = False,
    timeout: Optional[float] = None,
    deadline: Optional[float] = None,
    max_bytes: Optional[int] = None,
) -> HubTable:
    """The table of the Hub model `name` (``org/name[@revision]``).

    Parameters
    ----------
    name : str
        ``name``, ``org/name``, either with ``@revision``.
    key : str, optional
        The table's name (default: the one known position-table key).
    max_rows : int, optional
        Refuse a table of more rows, before its bytes are fetched; with
        `paper`, not for a model whose rows :func:`paper_rows` cuts.
    timeout, deadline, max_bytes
        The limits (see the module's docstring); None: the environment's,
        else the defaults.

    Raises
    ------
    HubError
        The Hub cannot be read (missing, gated, no safetensors weights, no
        network or offline with nothing cached, no answer within `timeout`
        or the load past `deadline`, a server answering what it should not).
    ValueError
        A bad name or revision, a malformed checkpoint, no table found, a
        table declared larger than `max_bytes` or with more than `max_rows`.
    """
    repo_id, revision, limits, hf, endpoint, root, offline = _start(
        name, timeout, deadline, max_bytes
    )
    cache = _Cache(root, repo_id)
    where = f"{repo_id}@{revision} on the Hub"

    def rows_bound(model_type: Optional[str]) -> Optional[int]:
        return None if paper and model_type in PAPER_PROTOCOL else max_rows

    def found(
        table: np.ndarray,
        commit: str,
        listing: Dict[str, Any],
        used: str,
        fetched: int,
        cached: bool,
    ) -> HubTable:
        config = listing["config"]
        return HubTable(
            table,
            repo_id,
            revision,
            commit,
            listing["files"][used],
            used,
            _model_type(config),
            fetched,
            cached,
            config,
        )

    def from_cache(reason: str, advice: str) -> HubTable:
        commit = cache.commit(revision)
        listing = cache.listing(commit) if commit else None
        if commit is None or listing is None:
            raise HubError(
                f"{repo_id}: {reason}, and its table is not in posenc's cache "
                f"({os.path.join(root, 'posenc')}); {advice}"
            )
        used = choose_key(list(listing["files"]), key, where)
        filename = listing["files"][used]
        table = cache.table(commit, filename, used)
        if table is None:
            raise HubError(
                f"{repo_id}: {reason}, and the table {used!r} is not in posenc's cache; {advice}"
            )
        model_type = _model_type(listing["config"])
        _rows(table.shape, used, where, rows_bound(model_type))
        _cached_size(repo_id, filename, used, table, limits.max_bytes)
        return found(table, commit, listing, used, 0, True)

    if offline:
        return from_cache(
            "HF_HUB_OFFLINE is set",
            "run once with network access (HF_HUB_OFFLINE unset) to fetch it",
        )
    remote = _Remote(hf, repo_id, revision, endpoint, limits)
    try:
        with remote.session():
            commit, files = remote.info()
            cache.set_commit(revision, commit)
            listing = cache.listing(commit)
            headers: Dict[str, Any] = {}
            if listing is None:
                listing = _listing(remote, files)
                headers = listing.pop("_headers", {})
                listing["config"] = _position_config(remote, files)
                cache.set_listing(commit, listing)
            used = choose_key(list(listing["files"]), key, where)
            filename = listing["files"][used]
            model_type = _model_type(listing["config"])
            table = cache.table(commit, filename, used)
            cached = table is not None
            if table is None:
                if filename not in headers:
                    headers[filename] = remote.header(filename)
                start, entries = headers[filename]
                if used not in entries:
                    raise ValueError(
                        f"source: {repo_id}: the index places {used!r} in {filename}, which "
                        "lacks it"
                    )
                _rows(entries[used][1], used, where, rows_bound(model_type))
                table = remote.tensor(filename, start, entries[used], used)
                cache.set_table(commit, filename, used, table)
            else:
                _rows(table.shape, used, where, rows_bound(model_type))
                _cached_size(repo_id, filename, used, table, limits.max_bytes)
    except _Unreachable as exc:
        return from_cache(exc.reason, exc.advice)
    return found(table, commit, listing, used, remote.fetched, cached)


def _cached_size(repo_id: str, filename: str, key: str, table: np.ndarray, limit: int) -> None:
    # a table cached under a larger limit: the same bound as a fetched one
    # (bfloat16 was widened to float32 when cached: its size halved back is
    # not known here, so the cached array's own size is taken)
    if table.nbytes > limit:
        raise _TooLarge(
            f"source: {repo_id}/{filename}: the tensor {key!r:.100} (cached) has shape "
            f"{table.shape} of {table.dtype}, {table.nbytes:,} bytes, above the limit of "
            f"{limit:,} bytes; raise it with max_bytes= or POSENC_HUB_MAX_BYTES"
        )


def _rows(shape: tuple, key: str, where: str, max_rows: Optional[int]) -> None:
    if len(shape) != 2:
        raise ValueError(
            f"the table {key!r:.100} in {where} must be 2-D, has shape {tuple(shape)!s:.80}"
        )
    if max_rows is not None:
        from ._tables import _check_rows

        _check_rows(shape[0], f"the table in {where} [{_shown(key)}]", max_rows)


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


def paper_rows(
    E: Any,
    config: Any,
    *,
    paper_cut: bool = True,
    rows: Optional[slice] = None,
) -> Tuple[Any, Optional[str], str]:
    """``(rows, published, note)``: the rows of `E` that are positions, the
    name of the model's published row in :data:`~posenc.probe.PUBLISHED`
    (None for a model the paper did not probe), and what was done.

    `config` is the model's config (a dict such as ``config.json``'s, a
    transformers config, or just its ``model_type``): the rows before the
    first position are dropped by :func:`~posenc.probe.offsets.position_rule`
    (RoBERTa's family from ``pad_token_id + 1``, OPT's and BART's from 2),
    and GPT-2's table is cut to the paper's 512 rows unless `paper_cut` is
    False.  `rows` (a slice) overrides both.

    Examples
    --------
    >>> rows, published, note = paper_rows(np.zeros((514, 8)),
    ...                                    {"model_type": "roberta", "pad_token_id": 1})
    >>> rows.shape, published
    ((512, 8), 'RoBERTa')
    >>> note
    'first 2 rows dropped (roberta numbers positions from padding_idx + 1 = 2)'
    >>> paper_rows(np.zeros((1024, 8)), "gpt2")[2]
    "cut to 512 of 1024 rows (the paper's 512)"
    >>> paper_rows(np.zeros((4, 8)), "llama")[1:]
    (None, '')
    """
    from .offsets import PositionRule, position_rule

    if isinstance(config, str) or config is None:
        config = {"model_type": config}
    if isinstance(config, dict):
        model_type = config.get("model_type")
    else:
        model_type = getattr(config, "model_type", None)
    protocol = PAPER_PROTOCOL.get(model_type if isinstance(model_type, str) else "")
    published = protocol[0] if protocol is not None else None
    cut = protocol[2] if protocol is not None and paper_cut else None
    rule = position_rule(config) if rows is None else PositionRule(0, 0, "")
    start, stop, note = rows_note(int(E.shape[0]), rule, cut, rows)
    return E[start:stop], published, note


# ---------------------------------------------------------------- tensors one at a time


class HubTensors:
    """The tensors of a Hub model, read one at a time by range requests.

    Opening it fetches the repository's file list, ``config.json`` and the
    safetensors headers (two range requests a file); :meth:`read` then fetches
    one tensor's bytes (one range request), so that a caller can go through
    the layers without holding more than one weight, nor downloading what it
    does not read.  Nothing is cached: every read needs the network.

    Opening, :meth:`shape` and :meth:`read` are each one load: each has its
    own `deadline`, and `timeout` and `max_bytes` hold for each request and
    tensor (see the module's docstring; None: the environment's, else the
    defaults).

    Attributes
    ----------
    repo_id, revision, commit : str
    config : dict
        ``config.json`` (empty when the repository has none).
    bytes_fetched : int
        The bytes of files received so far (``config.json`` included; the
        model info, the file list, not).
    """

    def __init__(
        self,
        name: str,
        *,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
        max_bytes: Optional[int] = None,
    ) -> None:
        repo_id, revision, limits, hf, endpoint, _, offline = _start(
            name, timeout, deadline, max_bytes
        )
        self.repo_id, self.revision = repo_id, revision
        if offline:
            raise HubError(
                f"{repo_id}: HF_HUB_OFFLINE is set, and reading a model's weights layer by "
                "layer needs the network (nothing of it is cached); unset it"
            )
        self._remote = _Remote(hf, repo_id, self.revision, endpoint, limits)
        with self._remote.session():
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
        with self._remote.session():
            return tuple(self._entry(key)[1][1])

    def read(self, key: str) -> np.ndarray:
        """The tensor `key` (bfloat16 widened to float32), by one range
        request, refused before it if larger than ``max_bytes``."""
        with self._remote.session():
            start, entry, filename = self._entry(key)
            return self._remote.tensor(filename, start, entry, key)


# ---------------------------------------------------------------- a model to run

#: The files one of which a model's tokenizer is read from.
TOKENIZER_FILES: Tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
)

#: The files besides the weights that transformers reads to run a model and
#: tokenize its text: its configs, the tokenizer's special tokens and
#: :data:`TOKENIZER_FILES`.
SNAPSHOT_FILES: Tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    *TOKENIZER_FILES,
)


def snapshot(
    name: str,
    *,
    timeout: Optional[float] = None,
    deadline: Optional[float] = None,
    max_bytes: Optional[int] = None,
) -> Tuple[str, str]:
    """``(folder, commit)``: a local copy of what transformers needs to run
    the Hub model `name` (``org/name[@revision]``), fetched by posenc's own
    requests within its limits, for ``from_pretrained(folder)``.

    The files are :data:`SNAPSHOT_FILES` that the repository has and its
    safetensors weights (``model.safetensors``, or the index and every shard
    it names), each a whole file, each one load (its own `deadline`), each
    refused above `max_bytes` (default ``POSENC_HUB_MAX_BYTES``, else
    256 MiB) before its body is read.  They are kept under
    ``<hub cache>/posenc/models--org--name/<commit>/snapshot/``, so that a
    second run, or one offline (``HF_HUB_OFFLINE=1``), reads them there.

    Raises
    ------
    HubError
        As :func:`fetch`: no safetensors weights, a file above `max_bytes`
        (download the model and give its folder), the Hub unreachable with
        nothing cached, ...
    """
    repo_id, revision, limits, hf, endpoint, root, offline = _start(
        name, timeout, deadline, max_bytes
    )
    cache = _Cache(root, repo_id)

    def kept(commit: Optional[str]) -> Optional[str]:
        if commit is None:
            return None
        folder = os.path.join(cache.folder, _safe(commit), "snapshot")
        return folder if os.path.isfile(os.path.join(folder, ".complete")) else None

    if offline:
        commit = cache.commit(revision)
        folder = kept(commit)
        if folder is None or commit is None:
            raise HubError(
                f"{repo_id}: HF_HUB_OFFLINE is set and posenc's cache holds no copy of "
                f"{repo_id}@{revision} to run; run once with the network, or give a model folder"
            )
        return folder, commit
    remote = _Remote(hf, repo_id, revision, endpoint, limits)
    with remote.session():
        commit, files = remote.info()
    cache.set_commit(revision, commit)
    folder = kept(commit)
    if folder is not None:
        return folder, commit
    wanted = [f for f in SNAPSHOT_FILES if f in files]
    if _INDEX in files:
        with remote.session():
            index = remote.json_file(_INDEX)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        shards = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
        if not shards or not all(isinstance(f, str) and f in files for f in shards):
            raise ValueError(f"source: {repo_id}/{_INDEX} names shards the repository lacks")
        wanted += [_INDEX, *shards]
    elif _SINGLE in files:
        wanted.append(_SINGLE)
    else:
        raise _weights_error(repo_id, files)
    folder = os.path.join(cache.folder, _safe(commit), "snapshot")
    for filename in wanted:
        with remote.session():
            url = remote._file_url(filename)
            response = remote._get(
                url, filename, limits.file_timeout, {"Accept-Encoding": "identity"}
            )
            declared = response.headers.get("Content-Length", "").strip()
            if declared.isdigit() and int(declared) > limits.max_bytes:
                response.close()
                raise HubError(
                    f"{repo_id}: {filename} is {int(declared):,} bytes, above posenc's bound of "
                    f"{limits.max_bytes:,} (POSENC_HUB_MAX_BYTES); download the model "
                    f"(`hf download {repo_id}`) and give its folder"
                )
            data = remote.http.read(response, limits.max_bytes, filename, limits.file_timeout)
        cache._write(os.path.join(folder, *filename.split("/")), data)
    cache._write(os.path.join(folder, ".complete"), commit.encode())
    return folder, commit
