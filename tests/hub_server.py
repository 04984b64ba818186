"""A local stand-in for the Hugging Face Hub, for tests that cannot reach it.

:class:`HubServer` serves, on 127.0.0.1, the requests a Hub client makes of
a model repository: its info (``/api/models/{repo}`` and
``/api/models/{repo}/revision/{rev}``), and ``HEAD``/``GET`` of
``/{repo}/resolve/{rev}/{file}`` with the headers the client needs (ETag,
X-Repo-Commit, Content-Length, Accept-Ranges) and ``206 Partial Content``
for a ``Range`` request.  Every request is logged (method, path, Range and
Authorization headers, bytes of body sent) so that a test can count what
was fetched.  :func:`folder_files` reads a saved model into a repository's
files; :func:`use_local_hub` points the Hub clients at a server.

A :class:`Repo` may also misbehave, one way or several, for the tests of a
client's limits: hold every answer (`delay`), trickle its bodies a byte at
a time (`trickle`), serve files longer than they are (`tail` zero bytes
past a safetensors file's end, `json_tail` spaces past a JSON file's, sent
as they are read: an endless body), answer with
another model info (`info`), another status (`status`, `file_status`), a
lying Content-Length or Content-Range, none at all (`no_length`: the body
ends when the connection closes), or a redirect (`redirect`: to itself
forever, to another host serving the same files, to a URL, nowhere).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple
from urllib.parse import unquote

#: The query a redirect to the "other host" carries, so that the file is then served.
_CDN = "cdn=1"
_CHUNK = 1 << 16


@dataclass
class Repo:
    files: Dict[str, bytes]
    commit: str = ""
    gated: bool = False
    ranges: bool = True  # answer Range requests with 206 (else the whole file, 200)
    # ways to misbehave (each off by default)
    delay: float = 0.0  # seconds every answer is held before its status line
    file_delay: float = 0.0  # the same, for the files only
    trickle: float = 0.0  # seconds between the bytes of every body, sent one at a time
    tail: int = 0  # zero bytes past the end of every .safetensors file, sent as read
    json_tail: int = 0  # spaces past the end of every .json file (valid JSON, however long)
    info: Optional[bytes] = None  # the model info's body, instead of the real one
    info_tail: int = 0  # spaces after the model info (valid JSON, as long as one likes)
    status: Optional[Tuple[int, str]] = None  # (status, X-Error-Code) of every answer
    file_status: Optional[Tuple[int, str]] = None  # the same, for the files only
    redirect: Optional[str] = None  # "loop", "other-host", "none" (no Location) or a URL
    no_length: bool = False  # bodies without Content-Length, ended by closing the connection
    length_lie: int = 0  # added to the Content-Length of a file's body
    range_lie: int = 0  # added to both ends of the Content-Range of a 206 answer
    range_extra: int = 0  # bytes past the range asked for, sent with it (and counted)
    no_content_range: bool = False  # a 206 answer without Content-Range

    def __post_init__(self):
        if not self.commit:
            digest = hashlib.sha1()
            for name in sorted(self.files):
                digest.update(name.encode() + b"\0" + self.files[name])
            self.commit = digest.hexdigest()


@dataclass
class Request:
    method: str
    path: str
    range: Optional[str]
    sent: Optional[int]  # bytes of body sent; None while they are being sent
    authorization: Optional[str] = None
    host: Optional[str] = None
    hung_up: bool = False  # the client hung up before the whole body was sent


class _Body:
    """Bytes `start` to `stop` of `data`, the part past its end `fill` bytes."""

    def __init__(self, data: bytes, start: int, stop: int, fill: bytes = b"\0") -> None:
        self.data, self.start, self.stop, self.fill = data, start, stop, fill

    def __len__(self):
        return self.stop - self.start

    def chunks(self, size):
        at = self.start
        while at < self.stop:
            end = min(at + size, self.stop)
            real = self.data[at:end] if at < len(self.data) else b""
            yield real + self.fill * (end - at - len(real))
            at = end


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that hung up (the tests' point, often): nothing to print


@dataclass
class HubServer:
    repos: Dict[str, Repo] = field(default_factory=dict)
    requests: List[Request] = field(default_factory=list)

    @property
    def log(self) -> List[Request]:
        """Every request so far, once each body has been sent (or refused):
        a request is logged before its body goes out, so that a client that
        has read the body finds it here."""
        deadline = time.monotonic() + 30
        while any(r.sent is None for r in self.requests) and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.requests

    def start(self):
        handler = _handler(self)
        self.httpd = _Quiet(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def other_url(self):
        """This server under another host name (another origin)."""
        return f"http://localhost:{self.httpd.server_address[1]}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def ranged_bytes(self, repo=None):
        """Body bytes sent for files (not the API), of `repo` or of all."""
        return sum(
            max(r.sent, 0)
            for r in self.log
            if "/resolve/" in r.path and (repo is None or r.path.startswith(f"/{repo}/"))
        )

    def find(self, path):
        """``(repo_id, rest)`` for a path starting with a served repo id (the
        longest that matches), or ``(None, path)``."""
        for repo_id in sorted(self.repos, key=len, reverse=True):
            if path == repo_id or path.startswith(repo_id + "/"):
                return repo_id, path[len(repo_id) :]
        return None, path


def _handler(server: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # a body's small writes go out at once

        def log_message(self, *args):  # quiet
            pass

        def _send(self, status, body=b"", headers=None, head=False, repo=None):
            repo = repo or Repo({})
            if repo.delay:
                time.sleep(repo.delay)
            headers = dict(headers or {})
            headers.setdefault("Content-Length", str(len(body)))
            if repo.no_length and not head:
                del headers["Content-Length"]
                headers["Connection"] = "close"
                self.close_connection = True
            request = Request(
                self.command,
                self.path,
                self.headers.get("Range"),
                None,
                self.headers.get("Authorization"),
                self.headers.get("Host"),
            )
            server.requests.append(request)  # before the body: see HubServer.log
            sent = 0
            try:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if not head:
                    if not isinstance(body, _Body):
                        body = _Body(body, 0, len(body))
                    size = 1 if repo.trickle else _CHUNK
                    for chunk in body.chunks(size):
                        if repo.trickle:
                            time.sleep(repo.trickle)
                        self.wfile.write(chunk)
                        sent += len(chunk)
                    if repo.length_lie > 0:  # fewer bytes than declared: hang up
                        self.close_connection = True
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                request.hung_up = True  # the client hung up before the body was read
                self.close_connection = True
            request.sent = sent

        def _error(self, status, code, head=False, repo=None):
            body = json.dumps({"error": code}).encode()
            headers = {"Content-Type": "application/json"}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, body, headers, head, repo)

        def _api(self, rest):
            repo_id, tail = server.find(rest)
            if repo_id is None:
                return self._error(404, "RepoNotFound")
            repo = server.repos[repo_id]
            if repo.status is not None:
                return self._error(*repo.status, repo=repo)
            if repo.gated:
                return self._error(403, "GatedRepo", repo=repo)
            tree = re.fullmatch(r"/tree/(?P<rev>[^/]+)(?:/(?P<dir>.*))?", tail.split("?")[0])
            if tree is not None:  # a folder's listing (transformers asks for its chat templates)
                folder = unquote(tree.group("dir") or "").strip("/")
                entries = [
                    {"type": "file", "path": f, "size": len(data), "oid": repo.commit}
                    for f, data in sorted(repo.files.items())
                    if (f.rsplit("/", 1)[0] if "/" in f else "") == folder
                ]
                body = json.dumps(entries).encode()
                return self._send(200, _Body(body, 0, len(body)), {}, repo=repo)
            m = re.fullmatch(r"(?:/revision/(?P<rev>.+))?", tail.split("?")[0])
            if m is None:
                return self._error(404, "RepoNotFound", repo=repo)
            rev = unquote(m.group("rev") or "main")
            if rev not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound", repo=repo)
            body = repo.info
            if body is None:
                body = json.dumps(
                    {
                        "id": repo_id,
                        "modelId": repo_id,
                        "sha": repo.commit,
                        "private": False,
                        "tags": [],
                        "siblings": [{"rfilename": f} for f in sorted(repo.files)],
                    }
                ).encode()
            body = _Body(body, 0, len(body) + repo.info_tail, b" ")
            self._send(200, body, {"Content-Type": "application/json"}, repo=repo)

        def _file(self, head):
            path, _, query = self.path.partition("?")
            repo_id, tail = server.find(unquote(path)[1:])
            if repo_id is None:
                return self._error(404, "RepoNotFound", head)
            repo = server.repos[repo_id]
            if repo.file_delay:
                time.sleep(repo.file_delay)
            status = repo.status or repo.file_status
            if status is not None:
                return self._error(*status, head=head, repo=repo)
            if repo.gated:
                return self._error(403, "GatedRepo", head, repo)
            if repo.redirect is not None and _CDN not in query.split("&"):
                if repo.redirect == "loop":
                    location = self.path
                elif repo.redirect == "other-host":
                    location = f"{server.other_url}{path}?{_CDN}"
                else:
                    location = repo.redirect
                headers = {} if repo.redirect == "none" else {"Location": location}
                return self._send(302, b"", headers, head, repo)
            m = re.fullmatch(r"/resolve/(?P<rev>[^/]+)/(?P<file>.+)", tail)
            if m is None:
                return self._error(404, "EntryNotFound", head, repo)
            if m.group("rev") not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound", head, repo)
            data = repo.files.get(m.group("file"))
            if data is None:
                return self._error(404, "EntryNotFound", head, repo)
            name = m.group("file")
            tail = repo.tail if name.endswith(".safetensors") else 0
            fill = b"\0"
            if name.endswith(".json"):
                tail, fill = repo.json_tail, b" "
            size = len(data) + tail
            headers = {
                "ETag": '"' + hashlib.sha256(data).hexdigest() + '"',
                "X-Repo-Commit": repo.commit,
                "Accept-Ranges": "bytes" if repo.ranges else "none",
                "Content-Type": "application/octet-stream",
            }
            wanted = self.headers.get("Range")
            start, stop, status = 0, size, 200
            if wanted and repo.ranges:
                r = re.fullmatch(r"bytes=(\d+)-(\d+)?", wanted.strip())
                if r is None:
                    return self._error(416, "BadRange", head, repo)
                start = int(r.group(1))
                end = min(int(r.group(2)) if r.group(2) else size - 1, size - 1)
                if start > end:
                    return self._error(416, "BadRange", head, repo)
                stop, status = end + 1, 206
                if not repo.no_content_range:
                    lie = repo.range_lie
                    headers["Content-Range"] = f"bytes {start + lie}-{end + lie}/{size}"
            if status == 206 and repo.range_extra:
                stop = min(stop + repo.range_extra, size)
            headers["Content-Length"] = str(stop - start + repo.length_lie)
            return self._send(status, _Body(data, start, stop, fill), headers, head, repo)

        def _route(self, head):
            path = self.path
            if path.startswith("/api/models/"):
                if head:
                    return self._error(405, "MethodNotAllowed", head)
                return self._api(unquote(path[len("/api/models/") :]))
            return self._file(head)

        def do_GET(self):
            self._route(False)

        def do_HEAD(self):
            self._route(True)

    return Handler


def folder_files(folder) -> Dict[str, bytes]:
    """The files below `folder` (a model saved with save_pretrained, say), by
    their paths relative to it, ``/``-separated: a :class:`Repo`'s files."""
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            path = os.path.join(root, n)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder).replace(os.sep, "/")] = f.read()
    return out


def use_local_hub(monkeypatch, server: HubServer, cache, *, downloads=False) -> None:
    """Point huggingface_hub at `server` through pytest's `monkeypatch`: its
    endpoint, `cache` as the cache, offline mode and telemetry off.  With
    `downloads`, also the constants huggingface_hub reads once, at its
    import, for the files transformers downloads itself."""
    hf_constants = importlib.import_module("huggingface_hub.constants")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    if downloads:
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.url)
        monkeypatch.setattr(
            hf_constants,
            "HUGGINGFACE_CO_URL_TEMPLATE",
            server.url + "/{repo_id}/resolve/{revision}/{filename}",
        )
        monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
