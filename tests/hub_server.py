"""A local stand-in for the Hugging Face Hub, for tests that cannot reach it.

:class:`HubServer` serves, on 127.0.0.1, the requests ``huggingface_hub``
makes of a model repository: its info (``/api/models/{repo}`` and
``/api/models/{repo}/revision/{rev}``), and ``HEAD``/``GET`` of
``/{repo}/resolve/{rev}/{file}`` with the headers the client needs (ETag,
X-Repo-Commit, Content-Length, Accept-Ranges) and ``206 Partial Content``
for a ``Range`` request.  Every request is logged (method, path, Range
header, bytes of body sent) so that a test can count what was fetched.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional
from urllib.parse import unquote


@dataclass
class Repo:
    files: Dict[str, bytes]
    commit: str = ""
    gated: bool = False
    ranges: bool = True  # answer Range requests with 206 (else the whole file, 200)

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
    sent: Optional[int]  # bytes of body; -1: the client hung up; None: still being sent


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
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def ranged_bytes(self, repo=None):
        """Body bytes sent for files (not the API), of `repo` or of all."""
        return sum(
            r.sent
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

        def log_message(self, *args):  # quiet
            pass

        def _send(self, status, body=b"", headers=None, head=False):
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if "Content-Length" not in (headers or {}):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            request = Request(self.command, self.path, self.headers.get("Range"), None)
            server.requests.append(request)  # before the body: see HubServer.log
            sent = 0
            if not head:
                try:
                    self.wfile.write(body)
                    sent = len(body)
                except (BrokenPipeError, ConnectionResetError):
                    sent = -1  # the client hung up before the body was read
                    self.close_connection = True
            request.sent = sent

        def _error(self, status, code, head=False):
            body = json.dumps({"error": code}).encode()
            self._send(
                status,
                body,
                {"X-Error-Code": code, "Content-Type": "application/json"},
                head,
            )

        def _api(self, rest):
            repo_id, tail = server.find(rest)
            if repo_id is None:
                return self._error(404, "RepoNotFound")
            repo = server.repos[repo_id]
            if repo.gated:
                return self._error(403, "GatedRepo")
            m = re.fullmatch(r"(?:/revision/(?P<rev>.+))?", tail.split("?")[0])
            if m is None:
                return self._error(404, "RepoNotFound")
            rev = unquote(m.group("rev") or "main")
            if rev not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound")
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
            self._send(200, body, {"Content-Type": "application/json"})

        def _file(self, head):
            repo_id, tail = server.find(unquote(self.path.split("?")[0])[1:])
            if repo_id is None:
                return self._error(404, "RepoNotFound", head)
            repo = server.repos[repo_id]
            if repo.gated:
                return self._error(403, "GatedRepo", head)
            m = re.fullmatch(r"/resolve/(?P<rev>[^/]+)/(?P<file>.+)", tail)
            if m is None:
                return self._error(404, "EntryNotFound", head)
            if m.group("rev") not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound", head)
            data = repo.files.get(m.group("file"))
            if data is None:
                return self._error(404, "EntryNotFound", head)
            headers = {
                "ETag": '"' + hashlib.sha256(data).hexdigest() + '"',
                "X-Repo-Commit": repo.commit,
                "Accept-Ranges": "bytes" if repo.ranges else "none",
                "Content-Type": "application/octet-stream",
            }
            wanted = self.headers.get("Range")
            if wanted and repo.ranges:
                r = re.fullmatch(r"bytes=(\d+)-(\d+)?", wanted.strip())
                if r is None:
                    return self._error(416, "BadRange", head)
                start = int(r.group(1))
                end = min(int(r.group(2)) if r.group(2) else len(data) - 1, len(data) - 1)
                if start > end:
                    return self._error(416, "BadRange", head)
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                return self._send(206, data[start : end + 1], headers, head)
            return self._send(200, data, headers, head)

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
