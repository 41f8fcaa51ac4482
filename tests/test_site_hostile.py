"""Hostile records: markup, quotes and `../` in ids, model_type, architectures and config strings come
out escaped in HTML, JSON and attributes; unsafe ids are refused and listed; nothing lands outside."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from generator.settings import load_settings
from generator.site.build import run_build

XSS = "<script>alert(1)</script>"
ATTR = "\"><img src=x onerror=alert(2)>"
QUOTE = "'onmouseover='alert(3)"
HOSTILE = (XSS, ATTR, QUOTE, "</script><script>alert(4)</script>", "<b>bold</b>")
LLAMA = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
         "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 256}


def _record(repo_id: str, config: dict, **fields: object) -> dict:
    record = {"id": repo_id, "config_json": json.dumps(config), "format": 1, "checkpoint_params_by_dtype": {},
              "tags": [], "problems": [], "stale": False}
    record.update(fields)
    return record


def _snapshot(root: Path) -> Path:
    snap = root / "snapshot"
    records = [
        _record("hostile/llama-like", {**LLAMA, "model_type": "llama", "architectures": [XSS, ATTR, QUOTE],
                                       "auto_map": {"AutoModelForCausalLM": HOSTILE[3], ATTR: QUOTE},
                                       "name_or_path": "../../../etc/passwd", "torch_dtype": HOSTILE[4]},
                checkpoint_params=123, checkpoint_params_by_dtype={"BF16": 123}, checkpoint_source=XSS,
                downloads=5, downloads_source=ATTR, config_source=QUOTE),
        _record("hostile/bad-type", {**LLAMA, "model_type": XSS, "architectures": [ATTR]}),
        _record("hostile/dotdot-type", {**LLAMA, "model_type": "../../../../pwned", "architectures": ["X"]},
                problems=[XSS]),
    ]
    entries = []
    for record in records:
        org, name = record["id"].split("/")
        path = snap / "models" / org / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record), encoding="utf-8")
        entries.append({"id": record["id"], "file": f"models/{org}/{name}.json"})
    # Ids that must never become paths; the reader refuses them before any record is opened.
    for bad in ("../../escape/x", "evil/<script>alert(5)</script>", "evil/[red]x[/red]", "org/..hidden",
                "a/b/../../../../pwned", "/abs/olute"):
        entries.append({"id": bad, "file": f"models/{bad}.json"})
    (snap / "index.json").write_text(json.dumps({"format": 1, "models": entries}), encoding="utf-8")
    return snap


def test_hostile_strings_are_escaped_everywhere_and_nothing_escapes(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    out = tmp_path / "site" / "public"
    console = io.StringIO()
    before = {p for p in tmp_path.rglob("*")}
    rc = run_build(snapshot_dir=snap, out_dir=out, strict=False, settings=load_settings(),
                   console=Console(file=console, width=300))
    assert rc == 0
    written = {p for p in tmp_path.rglob("*")} - before
    assert written and all(p == out.parent or p.is_relative_to(out) for p in written)
    assert not any("pwned" in p.name or "escape" in p.name for p in tmp_path.rglob("*"))

    # Every file we write (Pagefind's index under pagefind/ is compressed binary, rendered as text by
    # static/search.js). The only scripts are our own two files, loaded from static/.
    # The calculator's runtime (Pyodide) and the estimator's zip are our own binaries, made from no Hub data.
    files = [p for p in out.rglob("*") if p.is_file() and not p.relative_to(out).as_posix().startswith(
        ("pagefind/", "static/pyodide/")) and p.suffix != ".zip"]
    assert any(p.name == ".build-manifest.json" for p in files)
    for path in files:
        text = path.read_text(encoding="utf-8")
        for hostile in HOSTILE:
            assert hostile not in text, f"{path}: {hostile!r} unescaped"
        if path.suffix != ".js":
            scripts = re.findall(r"<script[^>]*>", text)
            assert all(re.fullmatch(r'<script src="(\.\./)*static/(filter|search)\.js" defer>', s)
                       or re.fullmatch(r'<script type="module" src="(\.\./)*static/calc\.js">', s)
                       or re.fullmatch(r'<script type="application/json" id="calc-model"( data-config="config\.json")?>', s)
                       for s in scripts), path
            assert "<img" not in text and "<b>" not in text, path

    page = (out / "models/hostile/llama-like/index.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, as text
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "&#39;onmouseover=&#39;alert(3)" in page
    twin = json.loads((out / "models/hostile/llama-like/index.json").read_text(encoding="utf-8"))
    assert twin["model"]["architectures"] == [XSS, ATTR, QUOTE]  # escaped in bytes, equal in value
    # The calculator's copy of the config: escaped in bytes, equal in value, inside its one script element.
    inputs = re.search(r'<script type="application/json" id="calc-model">(.*?)</script>', page, re.S).group(1)
    assert json.loads(inputs)["config"]["architectures"] == [XSS, ATTR, QUOTE]

    bad_type = (out / "models/hostile/bad-type/index.html").read_text(encoding="utf-8")
    # Estimated (read as a llama-style decoder) or not, the hostile model_type is shown as text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in bad_type
    assert not (out / "families").joinpath("pwned").exists()
    assert sorted(p.name for p in (out / "families").iterdir()) == ["index.html", "llama"]

    summary = console.getvalue()
    assert "refused record" in summary and "evil/[red]x[/red]" in summary  # rich markup printed as text
    assert "../../escape/x" in summary and "family" in summary


def test_strict_refuses_a_hostile_snapshot(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    out = tmp_path / "public"
    rc = run_build(snapshot_dir=snap, out_dir=out, strict=True, settings=load_settings(),
                   console=Console(file=io.StringIO(), width=200))
    assert rc == 1 and not out.exists()
