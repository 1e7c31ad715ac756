"""A small in-memory Hugging Face Hub for tests, served on 127.0.0.1.

Point ``huggingface_hub.HfApi(endpoint=server.url)`` at it. It answers the routes ``huggingface_hub`` 2.x uses to
create repos, upload a folder in one commit ("regular" uploads, no LFS/Xet), tag, list refs and read model info:

- ``POST /api/repos/create``                        → the repo URL (409 when it exists)
- ``POST /api/validate-yaml``                       → no warnings
- ``POST /api/{type}s/{id}/preupload/{rev}``        → every file "regular"
- ``POST /api/{type}s/{id}/commit/{rev}``           → stores the NDJSON ``file`` lines (base64), returns the commit;
  with ``?create_pr=1`` it leaves ``main`` alone and records a pull request (:attr:`Repo.pulls`) with its files
- ``POST /api/{type}s/{id}/tag/{rev}``              → a tag (409 when it exists)
- ``GET  /api/{type}s/{id}/refs``                   → branches and tags (404 RepoNotFound when missing)
- ``GET  /api/{type}s/{id}/tree/{rev}``              → the repo's files (``list_repo_files``; one page)
- ``HEAD|GET /datasets/{id}/resolve/{rev}/{file}``   → a file a commit stored in a dataset repo
- ``GET  /api/models/{id}[/revision/{rev}]``        → what :attr:`HubState.models` holds for that id
- ``HEAD|GET /{id}/resolve/{rev}/{file}``            → a file of that model info's ``files`` (e.g. its config.json)

Everything the client did is recorded in :class:`HubState` (repos with their files, commits and tags, and a log of
requests), so tests assert on what reached the "Hub".
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

__all__ = ["HubServer", "HubState", "Repo"]

_REPO_ROUTE = re.compile(r"^/api/(models|datasets|spaces)/(.+?)/(preupload|commit|tag|refs|tree)(?:/(.*))?$")
_MODEL_ROUTE = re.compile(r"^/api/models/(.+?)(?:/revision/(.+))?$")
_RESOLVE_ROUTE = re.compile(r"^/(?!api/)(.+?)/resolve/([^/]+)/(.+)$")


@dataclass
class Repo:
    """One repository on the mock Hub."""

    repo_type: str  # "model", "dataset" or "space"
    repo_id: str
    sdk: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)  # tag → commit oid
    pulls: list[dict[str, Any]] = field(default_factory=list)
    """Pull requests opened with ``create_pr``: ``{"num", "title", "description", "files": {path: bytes}}``."""

    @property
    def head(self) -> str:
        """The commit ``main`` points at (a fixed root commit before the first upload)."""
        return self.commits[-1] if self.commits else "0" * 40


@dataclass
class HubState:
    """What the mock Hub holds: repos keyed by (type, id), model infos for ``model_info``, and a request log."""

    repos: dict[tuple[str, str], Repo] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_repo(self, repo_type: str, repo_id: str, *, tags: dict[str, str] | None = None) -> Repo:
        """Create a repo directly (e.g. one that already carries a tag)."""
        repo = Repo(repo_type, repo_id, tags=dict(tags or {}))
        self.repos[(repo_type, repo_id)] = repo
        return repo


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # ------------------------------------------------------------------------------------------------ helpers
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self, what: str) -> None:
        self._send(404, {"error": f"{what} not found"}, {"X-Error-Code": "RepoNotFound"})

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    @property
    def state(self) -> HubState:
        return self.server.state

    def _repo(self, kind: str, repo_id: str) -> Repo | None:
        return self.state.repos.get((kind.rstrip("s"), repo_id))

    # ------------------------------------------------------------------------------------------------- routes
    def _resolve(self, path: str, *, body: bool) -> bool:
        """Serve ``/{id}/resolve/{rev}/{file}`` from a model info's ``files`` (as the Hub serves a file download);
        False when the path is not such a route."""
        m = _RESOLVE_ROUTE.match(path)
        if not m:
            return False
        commit = "a" * 40
        if m.group(1).startswith("datasets/"):
            repo = self.state.repos.get(("dataset", m.group(1).removeprefix("datasets/")))
            files = dict(repo.files) if repo is not None else {}
            commit = repo.head if repo is not None else commit
        else:
            files = (self.state.models.get(m.group(1)) or {}).get("files", {})
        if m.group(3) not in files:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        data = files[m.group(3)]
        data = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", commit)
        self.end_headers()
        if body:
            self.wfile.write(data)
        return True

    def do_HEAD(self) -> None:
        path = unquote(urlparse(self.path).path)
        self.state.requests.append(("HEAD", path))
        if not self._resolve(path, body=False):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def do_GET(self) -> None:
        path = unquote(urlparse(self.path).path)
        self.state.requests.append(("GET", path))
        if self._resolve(path, body=True):
            return
        m = _REPO_ROUTE.match(path)
        if m and m.group(3) == "tree":
            repo = self._repo(m.group(1), m.group(2))
            if repo is None:
                return self._not_found(f"repo {m.group(2)}")
            return self._send(
                200,
                [
                    {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    for name, data in sorted(repo.files.items())
                ],
            )
        if m and m.group(3) == "refs":
            repo = self._repo(m.group(1), m.group(2))
            if repo is None:
                return self._not_found(f"repo {m.group(2)}")
            ref = lambda name, kind, oid: {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": oid}  # noqa: E731
            return self._send(
                200,
                {
                    "branches": [ref("main", "heads", repo.head)],
                    "converts": [],
                    "tags": [ref(t, "tags", oid) for t, oid in repo.tags.items()],
                },
            )
        m = _MODEL_ROUTE.match(path)
        if m:
            info = self.state.models.get(m.group(1))
            if info is None:
                return self._not_found(f"model {m.group(1)}")
            return self._send(200, {"id": m.group(1), "sha": "a" * 40, **info})
        self._send(404, {"error": f"no route GET {path}"})

    def do_POST(self) -> None:
        path = unquote(urlparse(self.path).path)
        query = parse_qs(urlparse(self.path).query)
        body = self._body()
        self.state.requests.append(("POST", path))
        if path == "/api/validate-yaml":
            return self._send(200, {"warnings": [], "errors": []})
        if path == "/api/repos/create":
            payload = json.loads(body)
            kind = payload.get("type") or "model"
            repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
            prefix = {"model": "", "dataset": "datasets/", "space": "spaces/"}[kind]
            url = {"url": f"{self.server.url}/{prefix}{repo_id}"}
            with self.state.lock:
                if (kind, repo_id) in self.state.repos:
                    return self._send(409, {"error": "You already created this repo", **url})
                repo = self.state.add_repo(kind, repo_id)
                repo.sdk = payload.get("sdk")
            return self._send(200, url)
        m = _REPO_ROUTE.match(path)
        if not m:
            return self._send(404, {"error": f"no route POST {path}"})
        kind, repo_id, action = m.group(1), m.group(2), m.group(3)
        repo = self._repo(kind, repo_id)
        if repo is None:
            return self._not_found(f"repo {repo_id}")
        if action == "preupload":
            files = json.loads(body).get("files", [])
            return self._send(
                200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
            )
        if action == "commit" and query.get("create_pr") == ["1"]:
            with self.state.lock:
                header: dict[str, Any] = {}
                files: dict[str, bytes] = {}
                for line in body.decode().splitlines():
                    item = json.loads(line) if line.strip() else {}
                    if item.get("key") == "header":
                        header = item["value"]
                    elif item.get("key") == "file":
                        files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                num = len(repo.pulls) + 1
                repo.pulls.append(
                    {
                        "num": num,
                        "title": header.get("summary"),
                        "description": header.get("description"),
                        "files": files,
                    }
                )
                oid = hashlib.sha1(repo.head.encode() + body).hexdigest()
            prefix = {"models": "", "datasets": "datasets/", "spaces": "spaces/"}[kind]
            url = f"{self.server.url}/{prefix}{repo_id}"
            return self._send(
                200,
                {"commitOid": oid, "commitUrl": f"{url}/commit/{oid}", "pullRequestUrl": f"{url}/discussions/{num}"},
            )
        if action == "commit":
            with self.state.lock:
                for line in body.decode().splitlines():
                    if not line.strip():
                        continue
                    item = json.loads(line)
                    if item.get("key") == "file":
                        value = item["value"]
                        repo.files[value["path"]] = base64.b64decode(value["content"])
                    elif item.get("key") == "deletedFile":
                        repo.files.pop(item["value"]["path"], None)
                oid = hashlib.sha1(repo.head.encode() + body).hexdigest()
                repo.commits.append(oid)
            prefix = {"models": "", "datasets": "datasets/", "spaces": "spaces/"}[kind]
            return self._send(200, {"commitOid": oid, "commitUrl": f"{self.server.url}/{prefix}{repo_id}/commit/{oid}"})
        if action == "tag":
            payload = json.loads(body)
            revision = m.group(4) or "main"
            with self.state.lock:
                if payload["tag"] in repo.tags:
                    return self._send(409, {"error": f"tag {payload['tag']} already exists"})
                repo.tags[payload["tag"]] = repo.head if revision == "main" else revision
            return self._send(200, {})
        self._send(404, {"error": f"no route POST {path}"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState
    url: str


class HubServer:
    """Start with ``HubServer()`` (a context manager); ``.url`` is the endpoint and ``.state`` what it holds."""

    def __init__(self) -> None:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.state = HubState()
        self._httpd.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The endpoint to pass as ``HfApi(endpoint=...)`` / ``HF_ENDPOINT``."""
        return self._httpd.url

    @property
    def state(self) -> HubState:
        """Everything the server holds and has been asked."""
        return self._httpd.state

    def close(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
