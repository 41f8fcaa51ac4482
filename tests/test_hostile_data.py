"""Hostile data end to end, one test each: markup in every string a page shows; repo ids that try to
become paths; a safetensors header that declares 10^12 bytes; a 50 MB config.json; deeply nested JSON.

Every outcome is a page, a recorded problem, or one clean line from the command line: never a
traceback, a hang, a huge allocation, or a file outside the folder it belongs in.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

import pytest
from rich.console import Console

import fakehub
from fakehub import FakeHub, FakeModel, fake_sha
from generator.errors import ConfigError, RecordError
from generator.hub import client as hub_client
from generator.hub.snapshot import (RecordProblem, iter_records, load_record, read_index, record_path,
                                    write_record)
from generator.records import ModelRecord, parse_config_text, validate_repo_id
from generator.settings import load_settings
from generator.site import worker
from generator.site.build import run_build
from hubkit import crawl, hub_environment

REPO = Path(__file__).resolve().parents[1]
SETTINGS = load_settings()

# What a hostile repo owner can put in a string: tags, attribute breakouts, a CDATA end, a script end,
# a javascript: URL, markdown links, template syntax, rich markup, bidi and line separators.
PAYLOADS = (
    "<script>alert(1)</script>",
    "\"><img src=x onerror=alert(2)>",
    "'onmouseover='alert(3)' x='",
    "</script><script>alert(4)</script>",
    "]]><!--<svg/onload=alert(5)>",
    "javascript:alert(6)",
    "[click](javascript:alert(7)) {{7*7}} {% raw %}",
    "[red]rich[/red] &amp; &lt;b&gt; \u202e\u2028x",
)
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 256}


def _benign(text: str) -> str:
    """The same string with nothing that can be markup: the control build of the structure test."""
    return re.sub(r"[<>\"'&\[\]{}%:()\u202e\u2028/=!-]", "_", text)


def _records(tr) -> list[dict]:
    """Records with a payload in every string the Hub controls; tr maps each payload (identity, or
    _benign for the control build)."""
    p = [tr(x) for x in PAYLOADS]

    def record(repo_id: str, config: dict, **fields) -> dict:
        base = {"id": repo_id, "config_json": json.dumps(config), "format": 1, "sha": fake_sha(repo_id),
                "checkpoint_params_by_dtype": {}, "tags": [p[0], p[6]], "problems": [p[1]], "stale": False,
                "downloads": 1000, "downloads_source": p[2], "likes": 3, "gated": p[3],
                "last_modified": p[4], "pipeline_tag": p[5], "library_name": p[7], "config_source": p[0]}
        base.update(fields)
        return base

    estimated = {**LLAMA, "architectures": list(p), "auto_map": {p[0]: p[1], "AutoModel": p[3]},
                 "_name_or_path": p[4], "name_or_path": p[5], "transformers_version": p[6], "torch_dtype": p[7],
                 "custom_string": p[2], "text_config_note": {"nested": p[3]}}
    return [
        record("hostile/every-string", estimated, checkpoint_params=999, checkpoint_params_by_dtype={"BF16": 999},
               checkpoint_source=p[1]),
        record("hostile/unsupported", {**LLAMA, "model_type": "x" + _benign(PAYLOADS[0]), "architectures": p[:2]}),
        record("hostile/config-error", {**LLAMA, "hidden_size": p[0], "architectures": [p[1]]}),
        record("hostile/hostile-type", {**LLAMA, "model_type": p[0] + " x", "architectures": [p[2]]}),
        record("hostile/plain", {**LLAMA, "architectures": ["LlamaForCausalLM"]}, last_modified="2026-11-01T12:00:00Z"),
    ]


def _write_snapshot(root: Path, records: list[dict]) -> Path:
    snap = root / "snapshot"
    for rec in records:
        org, name = rec["id"].split("/")
        path = snap / "models" / org / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec), encoding="utf-8")
    (snap / "index.json").write_text(json.dumps({"format": 1, "models": [
        {"id": r["id"], "file": f"models/{r['id']}.json"} for r in records]}), encoding="utf-8")
    return snap


def _build(snap: Path, out: Path, **kw) -> tuple[int, str]:
    console = io.StringIO()
    rc = run_build(snapshot_dir=snap, out_dir=out, strict=False, settings=SETTINGS,
                   console=Console(file=console, width=250), **kw)
    return rc, console.getvalue()


class _Shape(HTMLParser):
    """The element structure of a page (tags and attribute names, in order) and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.shape: list[str] = []
        self.text: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.shape.append(f"<{tag} {' '.join(sorted(k for k, _ in attrs))}>")
        self.urls += [v or "" for k, v in attrs if k in ("href", "src", "action", "formaction")]

    def handle_endtag(self, tag):
        self.shape.append(f"</{tag}>")

    def handle_data(self, data):
        self.text.append(data)


def _shape(text: str) -> _Shape:
    parsed = _Shape()
    parsed.feed(text)
    parsed.close()
    return parsed


def _xml_shape(text: str) -> list[str]:
    return [f"{e.tag} {sorted(e.attrib)}" for e in ET.fromstring(text.encode()).iter()]


def _json_shape(value) -> object:
    if isinstance(value, dict):
        return {_benign(k): _json_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_shape(v) for v in value]
    return type(value).__name__


def _fragments(site: Path) -> list[dict]:
    """The Pagefind search fragments (gzip, then `pagefind_dcd` and the JSON the search page reads)."""
    out = []
    for path in sorted((site / "pagefind" / "fragment").glob("*.pf_fragment")):
        data = gzip.decompress(path.read_bytes())
        assert data.startswith(b"pagefind_dcd"), path
        out.append(json.loads(data[len(b"pagefind_dcd"):]))
    return out


def test_markup_in_every_shown_string_is_inert_in_every_output(tmp_path):
    """HTML pages, attributes, JSON twins, the manifest, sitemap, Atom feed, llms.txt, robots.txt and
    the search index, built from records whose every Hub-controlled string is a payload, have exactly
    the structure of the same site built from harmless strings: no element, attribute or URL was
    injected anywhere, and the payloads are shown as text."""
    sites = {}
    for kind, tr in (("hostile", lambda s: s), ("benign", _benign)):
        snap = _write_snapshot(tmp_path / kind, _records(tr))
        # Build twice: the second build's feed and changes page list the changed models by name.
        rc, _ = _build(snap, tmp_path / kind / "public")
        assert rc == 0
        plain = json.loads((snap / "models/hostile/plain.json").read_text(encoding="utf-8"))
        plain["downloads"] = 5000
        (snap / "models/hostile/plain.json").write_text(json.dumps(plain), encoding="utf-8")
        rc, output = _build(snap, tmp_path / kind / "public")
        assert rc == 0, output
        sites[kind] = tmp_path / kind / "public"
    hostile, benign = sites["hostile"], sites["benign"]
    files = sorted(p.relative_to(hostile).as_posix() for p in hostile.rglob("*") if p.is_file()
                   and not p.relative_to(hostile).as_posix().startswith("pagefind/"))
    assert files == sorted(p.relative_to(benign).as_posix() for p in benign.rglob("*") if p.is_file()
                           and not p.relative_to(benign).as_posix().startswith("pagefind/"))
    kinds = {Path(f).suffix for f in files}
    assert {".html", ".json", ".xml", ".txt"} <= kinds, kinds
    assert {"sitemap.xml", "feeds/models.atom.xml", "llms.txt", ".build-manifest.json"} <= set(files)

    shown = ""
    for rel in files:
        if rel.startswith("static/pyodide/") or rel.endswith(".zip"):  # the calculator's runtime and modules: ours
            assert (hostile / rel).read_bytes() == (benign / rel).read_bytes(), rel
            continue
        text, control = (hostile / rel).read_text(encoding="utf-8"), (benign / rel).read_text(encoding="utf-8")
        if rel.endswith(".html"):
            page, same = _shape(text), _shape(control)
            assert page.shape == same.shape, f"{rel}: the payloads changed the page's element structure"
            assert not [u for u in page.urls if u.strip().lower().startswith(("javascript:", "data:"))], rel
            shown += "".join(page.text)
        elif rel.endswith(".xml"):
            assert _xml_shape(text) == _xml_shape(control), f"{rel}: the payloads changed the XML structure"
            shown += "".join(ET.fromstring(text.encode()).itertext())
        elif rel.endswith(".json"):
            assert not set(text) & set("<>&'"), f"{rel}: raw <, >, & or ' in a served JSON file"
            assert _json_shape(json.loads(text)) == _json_shape(json.loads(control)), rel
        elif rel.endswith(".txt") or rel.endswith(".css") or rel.endswith(".js"):
            assert text == control, f"{rel}: a Hub string reached a plain-text file"
        for payload in PAYLOADS:
            if set(payload) & set("<>\"'&"):  # the others are plain text wherever they appear
                assert payload not in text, f"{rel}: raw {payload!r}"
    for payload in PAYLOADS[:3]:  # shown as text, not dropped (the test is not vacuous)
        assert payload in shown, payload

    # The search index: every result URL is one of our pages; the search page inserts results as text.
    fragments = _fragments(hostile)
    assert fragments
    pages = {"/" + f[: -len("index.html")] for f in files if f.endswith("index.html")}
    for fragment in fragments:
        assert fragment["url"] in pages, fragment["url"]
        for key in ("image", "image_alt"):
            assert key not in fragment.get("meta", {}), fragment["meta"]
    for name in ("static/search.js", "static/calc.js"):  # the calculator too builds its DOM from text only
        script = (hostile / name).read_text(encoding="utf-8")
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", script)


# ---------------------------------------------------------------------------------------------------
# Repo ids that try to become paths.

UNSAFE_IDS = {
    "dotdot": "../escape", "dotdot-name": "org/..", "dotdot-inside": "org/../../escape", "dots": "org/a..b",
    "absolute": "/etc/passwd", "absolute-org": "/org/name", "backslash": "org\\name", "backslash-name": "org/na\\me",
    "windows": "C:\\Windows\\x", "drive": "C:/x", "three-parts": "org/name/extra", "empty": "", "empty-name": "org/",
    "double-slash": "org//name", "tilde": "~/x", "percent": "%2e%2e/x", "newline": "org/name\n", "nul": "org/na\x00me",
    "space": "org/na me", "fullwidth": "\uff4frg/model", "cyrillic-o": "\u043erg/model", "greek-nu": "org/\u03bdame",
    "zero-width": "org/model\u200b", "rtl-override": "org/\u202eledom", "dot-start": "org/.hidden",
    "long-name": "org/" + "n" * 97, "long-org": "o" * 97 + "/name", "very-long": "o/" + "x" * 5000,
}


class _FsAudit:
    """Every path the process opens for writing, creates, renames or removes while `active`."""

    active = False
    paths: list[str] = []
    _installed = False
    _WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    @classmethod
    def _hook(cls, event: str, args: tuple) -> None:
        if not cls.active:
            return
        if event == "open":
            path, mode, flags = args[0], args[1], args[2]
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int)
                                                                               and flags & cls._WRITE):
                cls.paths.append(str(path))
        elif event in ("os.remove", "os.rmdir") and len(args) > 1 and args[-1] not in (None, -1):
            return  # relative to the folder fd of an rmtree, whose own event names that folder
        elif event == "os.link":
            cls.paths.append(os.fsdecode(args[1]))  # args[0] is only read (the calculator's runtime, linked in)
        elif event == "os.symlink":
            cls.paths.append(os.fsdecode(args[1]))  # args[0] is the link's text, often relative
        elif event in ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.chmod",
                       "shutil.rmtree", "tempfile.mkdtemp", "tempfile.mkstemp"):
            cls.paths.extend(os.fsdecode(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike)))

    @classmethod
    @contextmanager
    def watch(cls) -> Iterator[list[str]]:
        if not cls._installed:
            sys.addaudithook(cls._hook)  # cannot be removed; inert while not active
            cls._installed = True
        cls.paths = []
        cls.active = True
        try:
            yield cls.paths
        finally:
            cls.active = False


def _inside(paths: list[str], *roots: Path) -> list[str]:
    """The paths that are not inside any of roots (or the search indexer's own temp folders)."""
    temp = Path(tempfile.gettempdir())
    bad = []
    for p in paths:
        if p.isdigit():  # an fd (os.fdopen of a temp file already checked by its mkstemp event)
            continue
        resolved = Path(os.path.abspath(p))
        if resolved.is_relative_to(temp) and resolved.relative_to(temp).parts[0].startswith("neurarch-trace-search-"):
            continue
        if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
            bad.append(p)
    return bad


@pytest.fixture
def sleeps(monkeypatch, tmp_path):
    return hub_environment(monkeypatch, tmp_path)


def test_unsafe_repo_ids_are_refused_before_they_touch_the_file_system(sleeps, monkeypatch, tmp_path):
    bad_ids = list(UNSAFE_IDS.values())
    # 1. The one validator every path goes through.
    for bad in bad_ids:
        with pytest.raises(RecordError):
            validate_repo_id(bad)
        with pytest.raises(RecordError):
            record_path(tmp_path / "snap", bad)

    # 2. The snapshot writer: refused before any folder or temp file is made.
    snap = tmp_path / "snap"
    with _FsAudit.watch() as touched:
        for bad in bad_ids:
            with pytest.raises(RecordError):
                write_record(snap, ModelRecord(id=bad, config_json="{}"))
    assert touched == [] and not snap.exists()

    # 3. A snapshot whose index lists every unsafe id (with a file where the id points, when it can
    # exist): the build lists each as a refused record and writes nothing outside its own folders.
    snap = _write_snapshot(tmp_path / "s", [_records(_benign)[-1]])
    index = json.loads((snap / "index.json").read_text(encoding="utf-8"))
    index["models"] += [{"id": bad, "file": f"models/{bad}.json"} for bad in bad_ids]
    (snap / "index.json").write_text(json.dumps(index), encoding="utf-8")
    escape = tmp_path / "s" / "escape.json"  # where "../escape" would land
    escape.write_text(json.dumps({"id": "../escape", "config_json": "{}", "format": 1}), encoding="utf-8")
    problems = [r for r in iter_records(snap) if isinstance(r, RecordProblem)]
    assert len(problems) == len(bad_ids) and all("id" in p.reason for p in problems)
    out = tmp_path / "site" / "public"
    with _FsAudit.watch() as touched:
        rc, output = _build(snap, out)
    assert rc == 0 and output.count("refused record") >= 1
    assert _inside(touched, tmp_path / "site") == []
    assert sorted(p.name for p in (out / "models").iterdir()) == ["hostile"]

    # 4. The crawler: a listing that names them skips them as invalid ids; no request, no path.
    models = [FakeModel(id="hostile/plain", sha=fake_sha("p"), config=json.dumps(LLAMA).encode(), downloads=10**6)]
    models += [FakeModel(id=bad, sha=fake_sha(bad), config=b"{}", downloads=len(bad_ids) - i)
               for i, bad in enumerate(bad_ids) if "\x00" not in bad and "\n" not in bad]
    crawled = tmp_path / "crawled"
    with FakeHub(models, page_size=50) as hub, _FsAudit.watch() as touched:
        code, text = crawl(monkeypatch, hub, crawled)
    assert code == 0, text
    assert [e["id"] for e in read_index(crawled)] == ["hostile/plain"]
    assert not [p for _, p, _ in hub.log if "/resolve/" in p and "hostile/plain" not in p]
    assert _inside(touched, crawled, tmp_path / "hf-home") == [], touched
    assert not list(tmp_path.rglob("*passwd*")) and not (tmp_path / "escape").exists()

    # 5. The command line: one line, exit 2, no traceback, no request (HF_HUB_OFFLINE is not needed:
    # the id is refused first).
    for bad in ("../escape", "org/..", "org\\name", "\uff4frg/model", "org/" + "n" * 97, "o/" + "x" * 5000):
        done = subprocess.run([sys.executable, "-m", "generator.cli", bad, "--json"], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(REPO), "HF_ENDPOINT": "http://127.0.0.1:9"},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stdout == "", (bad, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()


# ---------------------------------------------------------------------------------------------------
# A safetensors header that declares 10^12 bytes.

def test_a_safetensors_header_declaring_a_terabyte_is_refused_without_reading_it(sleeps, monkeypatch, tmp_path):
    real_header = fakehub.safetensors_header
    monkeypatch.setattr(fakehub, "safetensors_header",
                        lambda params, declared=None: real_header(params, 10**12 if declared else None))
    model = FakeModel(id="hostile/terabyte-header", sha=fake_sha("tb"), config=json.dumps(LLAMA).encode(),
                      downloads=10, params={"BF16": 1000}, st_in_listing=False, fault="huge_header")
    snap = tmp_path / "snap"
    with FakeHub([model], page_size=5) as hub:
        tracemalloc.start()
        started = time.monotonic()
        code, out = crawl(monkeypatch, hub, snap)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        record = load_record(snap, model.id)
        reads = [(m, s) for m, p, s in hub.log if "model.safetensors" in p]
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        fetched = hub_client.fetch_record(model.id)  # `neurarch-trace org/name` for a model not in the snapshot
    assert code == 0 and elapsed < 20 and peak < 64 * 2**20, (code, elapsed, peak)
    assert record.checkpoint_params is None
    assert record.problems == ("checkpoint count unknown: safetensors header declares more than 25 MB",)
    assert [s for m, s in reads if m == "GET"] == [206]  # one ranged read of the first bytes, never the 10^12
    assert fetched.checkpoint_params is None and "declares more than 25 MB" in fetched.problems[0]
    rc, output = _build(snap, tmp_path / "public")
    page = (tmp_path / "public/models/hostile/terabyte-header/index.html").read_text(encoding="utf-8")
    assert rc == 0 and "safetensors header declares more than 25 MB" not in output and "1,000,000,000,000" not in page


# ---------------------------------------------------------------------------------------------------
# A config.json of 50 MB.

def _fifty_mb_config() -> bytes:
    """A valid config.json of 50 MB: llama keys plus a huge id2label, as a careless export makes."""
    labels = {str(i): f"label-{i:08d}-" + "x" * 40 for i in range(900_000)}
    text = json.dumps({**LLAMA, "architectures": ["LlamaForCausalLM"], "id2label": labels}).encode()
    assert len(text) > 50 * 10**6
    return text


def test_a_50_mb_config_is_refused_everywhere_and_the_rest_goes_on(sleeps, monkeypatch, tmp_path):
    big = _fifty_mb_config()
    real_subset = fakehub._config_subset  # the fake API's listing parses config.json; the real Hub's does not here
    monkeypatch.setattr(fakehub, "_config_subset", lambda config: {} if len(config) > 10**6 else real_subset(config))
    # The crawler: the file is refused by size (it is never parsed), the crawl goes on.
    models = [FakeModel(id="hostile/fifty-mb", sha=fake_sha("50"), config=big, downloads=10),
              FakeModel(id="hostile/plain", sha=fake_sha("p"), config=json.dumps(LLAMA).encode(), downloads=5)]
    snap = tmp_path / "snap"
    with FakeHub(models, page_size=5) as hub:
        started = time.monotonic()
        tracemalloc.start()
        code, out = crawl(monkeypatch, hub, snap)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        elapsed = time.monotonic() - started
    assert code == 0 and elapsed < 30, (code, elapsed)
    # The crawler learns the size from the HEAD of a dry run and never requests the body.
    assert peak < 64 * 2**20, f"the crawl held {peak:,} bytes at once for a 50 MB file"
    assert hub.count("GET", "hostile/fifty-mb/resolve/") == 0 and hub.count("HEAD", "hostile/fifty-mb/resolve/") == 1
    record = load_record(snap, "hostile/fifty-mb")
    assert record.config_json == "" and any("larger than" in p for p in record.problems), record.problems
    assert load_record(snap, "hostile/plain").config_json == json.dumps(LLAMA)
    rc, output = _build(snap, tmp_path / "public-crawled")
    assert rc == 0 and "hostile/fifty-mb" in output  # listed, not estimated; the rest is built

    # A snapshot record holding it (a hand-edited snapshot): refused unread, the rest is built.
    snap2 = _write_snapshot(tmp_path / "s2", [
        {"id": "hostile/fifty-mb", "config_json": big.decode(), "format": 1},
        {"id": "hostile/plain", "config_json": json.dumps(LLAMA), "format": 1}])
    rc, output = _build(snap2, tmp_path / "public")
    assert rc == 0 and "record is larger than" in output
    assert (tmp_path / "public/models/hostile/plain/index.html").is_file()
    assert not (tmp_path / "public/models/hostile/fifty-mb").exists()

    # The command line on a local file: one line naming the size and the limit, exit 2.
    folder = tmp_path / "local"
    folder.mkdir()
    (folder / "config.json").write_bytes(big)
    done = subprocess.run([sys.executable, "-m", "generator.cli", str(folder), "--json"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert f"{len(big):,} bytes, over the" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------------
# Deeply nested JSON.

def _nested(depth: int, inner: object = 1) -> str:
    return '{"a": ' * depth + json.dumps(inner) + "}" * depth


@pytest.mark.parametrize("depth", [100, 500, 900, 990, 1_100, 5_000, 100_000])
def test_deeply_nested_configs_give_a_page_or_a_typed_error(depth, tmp_path):
    """Nesting in the places the estimator reads: the top level, text_config, rope_scaling,
    quantization_config. Each gives a Report or a ConfigError naming the model; the build worker
    never reports an estimator or render bug."""
    configs = {
        "top": '{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, '
               '"intermediate_size": 128, "vocab_size": 1000, "deep": ' + _nested(depth) + "}",
        "text_config": json.dumps({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]})[:-1]
        + ', "text_config": ' + _nested(depth, LLAMA) + "}",
        "rope_scaling": json.dumps(LLAMA)[:-1] + ', "rope_scaling": ' + _nested(depth, {"type": "linear"}) + "}",
        "quantization_config": json.dumps(LLAMA)[:-1] + ', "quantization_config": ' + _nested(depth) + "}",
        "architectures": json.dumps(LLAMA)[:-1] + ', "architectures": ' + "[" * depth + "]" * depth + "}",
        "whole": _nested(depth),
    }
    for where, text in configs.items():
        record = ModelRecord(id=f"deep/{where}", config_json=text)
        try:
            parse_config_text(text, record.id)
        except ConfigError as exc:
            assert str(exc).startswith(f"deep/{where}") and "\n" not in str(exc)
        result = worker.build_model(record, SETTINGS)
        kinds = {p.kind for p in result.problems}
        assert kinds <= {"config error", "unsupported architecture"}, (where, depth, result.problems)
        for p in result.problems:
            assert p.message and "RecursionError" not in p.message, (where, p)
        assert result.files, (where, depth)  # a page either way: numbers, or "not estimated yet: why"


def test_deeply_nested_input_everywhere_else_is_one_clean_refusal(sleeps, monkeypatch, tmp_path):
    deep = _nested(200_000)
    # The command line on a local file.
    (tmp_path / "config.json").write_text(deep, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "generator.cli", str(tmp_path), "--json"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "nested too deeply" in done.stderr and "Traceback" not in done.stderr
    # A snapshot record file that is itself nested deeply, and an index that is: refused, typed.
    snap = _write_snapshot(tmp_path / "s", [{"id": "hostile/plain", "config_json": json.dumps(LLAMA), "format": 1}])
    deep_record = snap / "models/deep/record.json"
    deep_record.parent.mkdir(parents=True)
    deep_record.write_text('{"id": "deep/record", "format": 1, "config_json": "{}", "tags": ' + "[" * 200_000
                           + "]" * 200_000 + "}", encoding="utf-8")
    index = json.loads((snap / "index.json").read_text(encoding="utf-8"))
    index["models"].append({"id": "deep/record", "file": "models/deep/record.json"})
    (snap / "index.json").write_text(json.dumps(index), encoding="utf-8")
    rc, output = _build(snap, tmp_path / "public")
    assert rc == 0 and "deep/record" in output and "refused record" in output
    (snap / "index.json").write_text('{"format": 1, "models": ' + "[" * 200_000 + "]" * 200_000 + "}",
                                     encoding="utf-8")
    with pytest.raises(RecordError, match="not valid JSON"):
        _build(snap, tmp_path / "public")
    assert (tmp_path / "public/models/hostile/plain/index.html").is_file()  # the previous site is kept
    # A crawl whose config.json is nested deeply: recorded as a problem, the crawl goes on.
    models = [FakeModel(id="deep/config", sha=fake_sha("deep"), config=deep.encode(), downloads=10),
              FakeModel(id="hostile/plain", sha=fake_sha("p"), config=json.dumps(LLAMA).encode(), downloads=5)]
    monkeypatch.setattr(fakehub, "_config_subset", lambda config: {})  # the fake API's own parse is not tested
    crawled = tmp_path / "crawled"
    with FakeHub(models) as hub:
        code, out = crawl(monkeypatch, hub, crawled)
    assert code == 0, out
    assert "config.json is nested too deeply" in load_record(crawled, "deep/config").problems
    assert not [p for p in load_record(crawled, "hostile/plain").problems if "config" in p]
    rc, output = _build(crawled, tmp_path / "public-crawled")
    assert rc == 0 and "deep/config" in output
