"""A fake Hugging Face Hub: a real HTTP server on 127.0.0.1 speaking the endpoints huggingface_hub calls."""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

from generator.hub.snapshot import iter_records
from generator.records import ModelRecord

_SIZES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "U8": 1, "I8": 1, "BOOL": 1}


@dataclass
class FakeModel:
    """One repo. `fault` injects a failure: gated, missing, ratelimit, error, timeout, malformed,
    huge_header, hang (blocks config.json until FakeHub.release is set)."""

    id: str
    sha: str
    config: bytes
    downloads: int = 0
    params: dict[str, int] | None = None  # what model.safetensors holds; None: no safetensors file
    st_in_listing: bool = True  # the listing carries a `safetensors` field (else: read the header)
    hidden: bool = False  # dropped out of the listing (still served by id)
    gated: bool | str = False
    fault: str | None = None
    fault_times: int = 10**9  # how many requests fail before the file is served (ratelimit)
    pipeline_tag: str = "text-generation"
    files: dict[str, bytes] = field(default_factory=dict)  # other files the repo lists and serves by name
    file_fault: str | None = None  # for those files: missing (404 though listed), error (503)

    def item(self, expand: list[str] | None) -> dict:
        full = {
            "_id": hashlib.sha1(self.id.encode()).hexdigest()[:24], "id": self.id, "sha": self.sha,
            "downloads": self.downloads, "likes": self.downloads // 1000, "gated": self.gated,
            "lastModified": "2026-11-01T12:00:00.000Z", "pipeline_tag": self.pipeline_tag,
            "library_name": "transformers", "tags": ["transformers", "safetensors", self.pipeline_tag],
            "config": _config_subset(self.config),
            "siblings": [{"rfilename": name} for name in
                         ("config.json", *(("model.safetensors",) if self.params is not None else ()), *self.files)],
        }
        if self.params is not None and self.st_in_listing:
            full["safetensors"] = {"parameters": dict(self.params), "total": sum(self.params.values())}
        if not expand:
            return full
        return {k: v for k, v in full.items() if k in ("_id", "id") or k in expand}


def _config_subset(config: bytes) -> dict:
    # The API's `config` is a few keys of config.json only (the crawler must not rely on it).
    try:
        data = json.loads(config)
        return {k: data[k] for k in ("architectures", "model_type") if k in data}
    except (ValueError, TypeError):
        return {}


def safetensors_header(params: dict[str, int], declared: int | None = None) -> bytes:
    """The first bytes of a model.safetensors: an 8-byte length, then the JSON header (no weights)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for dtype, count in sorted(params.items()):
        size = count * _SIZES.get(dtype, 2)
        header[f"weight.{dtype.lower()}"] = {"dtype": dtype, "shape": [count], "data_offsets": [offset, offset + size]}
        offset += size
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body) if declared is None else declared) + body


def fake_sha(repo_id: str, salt: str = "") -> str:
    return hashlib.sha1(f"{repo_id}@{salt}".encode()).hexdigest()


def models_from_snapshot(snapshot_dir: Path, ids: list[str] | None = None, salt: str = "v1") -> list[FakeModel]:
    """Fake repos built from committed snapshot records (config text byte-exact, counts, downloads)."""
    out = []
    for rec in iter_records(snapshot_dir):
        if not isinstance(rec, ModelRecord) or (ids is not None and rec.id not in ids):
            continue
        params = dict(rec.checkpoint_params_by_dtype) or ({"BF16": rec.checkpoint_params} if rec.checkpoint_params
                                                          else None)
        out.append(FakeModel(id=rec.id, sha=rec.sha or fake_sha(rec.id, salt), config=rec.config_json.encode(),
                             downloads=rec.downloads or 0, params=params))
    return out


@dataclass
class FakeHub:
    """Serve `models` (ranked by downloads) until stopped; every request is logged and counted."""

    models: list[FakeModel]
    page_size: int = 5
    list_fault: dict = field(default_factory=dict)  # {"status": 429|500, "pages": {2}, "times": n, "retry_after": s}
    log: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)
    queries: list[dict] = field(default_factory=list)  # parsed query strings of /api/models calls
    arrived: list[str] = field(default_factory=list)  # request paths as they arrive (before any answer)
    release: threading.Event = field(default_factory=threading.Event)
    _fails: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight = 0
        hub = self

        class Handler(_Handler):
            fake = hub

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def model(self, repo_id: str) -> FakeModel:
        return next(m for m in self.models if m.id == repo_id)

    def ranked(self, pipeline_tag: str | None) -> list[FakeModel]:
        chosen = [m for m in self.models if not m.hidden and (not pipeline_tag or m.pipeline_tag == pipeline_tag)]
        return sorted(chosen, key=lambda m: (-m.downloads, m.id))

    def count(self, method: str | None = None, contains: str = "", status: int | None = None) -> int:
        with self._lock:
            return sum(1 for m, p, s in self.log if (method is None or m == method) and contains in p
                       and (status is None or s == status))

    def file_downloads(self) -> int:
        """GETs under /resolve/ that returned file bytes: what 'downloads a file' means."""
        return self.count("GET", "/resolve/", 200) + self.count("GET", "/resolve/", 206)

    def reset_log(self) -> None:
        """Forget every request, once the answers still in flight (late timeout replies) are logged."""
        deadline = time.monotonic() + 5
        while self._inflight and time.monotonic() < deadline:
            time.sleep(0.02)
        with self._lock:
            self.log.clear()
            self.queries.clear()
            self.arrived.clear()

    def should_fail(self, key: str, times: int) -> bool:
        with self._lock:
            self._fails[key] += 1
            return self._fails[key] <= times


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:  # noqa: N802
        with self.fake._lock:
            self.fake._inflight += 1
        try:
            self._route()
        finally:
            with self.fake._lock:
                self.fake._inflight -= 1

    do_HEAD = do_GET  # same routes; _send leaves the body out

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        with self.fake._lock:
            self.fake.log.append((self.command, urlsplit(self.path).path, status))
        try:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, str(value))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout faults)

    def _error(self, status: int, code: str, message: str, extra: dict | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                  "X-Error-Message": message, **(extra or {})})

    def _route(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        path = parts.path
        with self.fake._lock:
            self.fake.arrived.append(path)
        if path == "/api/models":
            return self._list(query)
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/"):].split("/revision/")[0]
            return self._info(rest, query)
        if "/resolve/" in path:
            repo, _, tail = path.lstrip("/").partition("/resolve/")
            revision, _, filename = tail.partition("/")
            return self._resolve(repo, revision, filename)
        self._error(404, "NotFound", "no such route")

    def _list(self, query: dict) -> None:
        fake = self.fake
        with fake._lock:
            fake.queries.append(query)
        page = int(query.get("cursor", ["0"])[0]) // fake.page_size + 1
        fault = fake.list_fault
        if fault and (not fault.get("pages") or page in fault["pages"]) and fake.should_fail(f"list{page}",
                                                                                             fault.get("times", 10**9)):
            extra = {"Retry-After": fault["retry_after"]} if "retry_after" in fault else {}
            return self._error(fault["status"], "Error", "listing fault", extra)
        limit = int(query.get("limit", ["1000"])[0])
        start = int(query.get("cursor", ["0"])[0])
        ranked = fake.ranked(query.get("pipeline_tag", [None])[0])
        size = min(limit, fake.page_size)
        items = [m.item(query.get("expand")) for m in ranked[start:start + size]]
        headers = {"Content-Type": "application/json"}
        if start + size < len(ranked):
            nxt = {k: v for k, v in query.items() if k != "cursor"} | {"cursor": [str(start + size)]}
            headers["Link"] = f'<{fake.url}/api/models?{urlencode(nxt, doseq=True)}>; rel="next"'
        self._send(200, json.dumps(items).encode(), headers)

    def _info(self, repo: str, query: dict) -> None:
        try:
            model = self.fake.model(repo)
        except StopIteration:
            return self._error(401, "RepoNotFound", f"Repository not found: {repo}")
        self._send(200, json.dumps(model.item(query.get("expand"))).encode(), {"Content-Type": "application/json"})

    def _resolve(self, repo: str, revision: str, filename: str) -> None:
        try:
            model = self.fake.model(repo)
        except StopIteration:
            return self._error(401, "RepoNotFound", f"Repository not found: {repo}")
        if revision not in ("main", model.sha):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        commit = {"X-Repo-Commit": model.sha}
        fault = model.fault
        if fault == "gated":
            return self._error(401, "GatedRepo", f"Access to model {repo} is restricted.", commit)
        if filename == "config.json":
            if fault == "missing":
                return self._error(404, "EntryNotFound", "config.json does not exist", commit)
            if fault == "ratelimit" and self.fake.should_fail(f"rl:{repo}", model.fault_times):
                return self._error(429, "RateLimited", "Too many requests",
                                   {"Retry-After": 2, "RateLimit": '"resolvers";r=0;t=2',
                                    "RateLimit-Policy": '"fixed window";"resolvers";q=3000;w=300'})
            if fault == "error":
                return self._error(503, "ServiceUnavailable", "upstream unavailable")
            if fault == "timeout":
                time.sleep(1.0)  # longer than the client's (test-sized) timeouts
                return self._error(504, "Timeout", "late")
            if fault == "hang":
                self.fake.release.wait(30)
            body = model.config[: len(model.config) // 2] if fault == "malformed" else model.config
        elif filename in model.files:
            if model.file_fault == "missing":
                return self._error(404, "EntryNotFound", f"{filename} does not exist", commit)
            if model.file_fault == "error":
                return self._error(503, "ServiceUnavailable", "upstream unavailable")
            body = model.files[filename]
        elif filename == "model.safetensors" and model.params is not None:
            body = safetensors_header(model.params, 30_000_000 if fault == "huge_header" else None)
        else:
            return self._error(404, "EntryNotFound", f"{filename} does not exist", commit)
        etag = hashlib.sha1(body).hexdigest()
        headers = {**commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            first, _, last = rng[6:].partition("-")
            lo, hi = int(first), min(int(last or len(body) - 1), len(body) - 1)
            headers["Content-Range"] = f"bytes {lo}-{hi}/{len(body)}"
            return self._send(206, body[lo:hi + 1], headers)
        self._send(200, body, headers)
