"""Incremental builds: only the models whose record or render inputs changed are rendered again, the
output is byte-identical to a full build from the same previous site, and the changes page and the
Atom feed say what changed between the two snapshots."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from generator.format import short_count
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, load_record, write_index, write_record
from generator.records import ModelRecord
from generator.settings import load_settings
from generator.site import manifest, pages, search
from generator.site.build import run_build

# Small and quick, of three families; plus one whose config.json is broken (a "not estimated" page).
MODELS = ("openai-community/gpt2", "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5", "Qwen/Qwen3-0.6B",
          "distilbert/distilgpt2", "facebook/opt-125m")
BROKEN = ModelRecord(id="broken/config", config_json="{not json")
RENDER_KEY = manifest.render_key


@pytest.fixture(scope="module", autouse=True)
def _same_code_throughout() -> object:
    """Hash the code and templates once for this module: these tests compare builds that presume the
    code did not change between them, which a colleague editing the estimator meanwhile would break."""
    known: dict[str, str] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest, "render_key", lambda settings: known.setdefault(repr(settings), RENDER_KEY(settings)))
        yield


def _records() -> dict[str, ModelRecord]:
    records = {m: load_record(DEFAULT_SNAPSHOT_DIR, m) for m in MODELS}
    assert all(records.values()), "a model of this test left the committed snapshot"
    return {**records, BROKEN.id: BROKEN}  # type: ignore[dict-item]


def _snapshot(root: Path, records: list[ModelRecord]) -> Path:
    if root.exists():
        shutil.rmtree(root)
    for record in records:
        write_record(root, record)
    write_index(root, [index_entry(r) for r in records])
    return root


def _build(snapshot: Path, out: Path, **kwargs: object) -> str:
    buffer = io.StringIO()
    rc = run_build(snapshot_dir=snapshot, out_dir=out, strict=False, settings=load_settings(),
                   console=Console(file=buffer, width=250), **kwargs)  # type: ignore[arg-type]
    assert rc == 0, buffer.getvalue()
    return buffer.getvalue()


def _count(summary: str, row: str) -> int:
    found = re.search(rf"{row}\s*│\s*(\d+)", summary)
    assert found, summary
    return int(found.group(1))


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _deeper(record: ModelRecord) -> ModelRecord:
    """The same model with one more layer: a new record whose estimate changes."""
    config = json.loads(record.config_json)
    key = "n_layer" if "n_layer" in config else "num_hidden_layers"
    config[key] += 1
    return replace(record, config_json=json.dumps(config), sha="f" * 40,
                   last_modified="2026-03-01T10:00:00.000Z")


@pytest.fixture(scope="module")
def two_snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A first build, then the second snapshot (gpt2 deeper, opt-125m removed, a model added, one record
    touched without changing its estimate) built both ways from a copy of the first site."""
    return _two_builds(tmp_path_factory.mktemp("incremental"))


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The same two builds with a search shard of 2 models: 5 models, 3 shards."""
    return _two_builds(tmp_path_factory.mktemp("sharded"), search_shard_size=2)


def _two_builds(root: Path, **kwargs: object) -> dict[str, object]:
    records = _records()
    first = [r for m, r in records.items() if m != "distilbert/distilgpt2"]
    first[0] = replace(first[0], last_modified="2026-01-15T08:00:00.000Z")
    out = root / "public"
    _build(_snapshot(root / "snap1", first), out, **kwargs)
    before = _tree(out)
    shutil.copytree(out, root / "full")

    second = []
    for record in first:
        if record.id == "openai-community/gpt2":
            second.append(_deeper(record))
        elif record.id == "facebook/opt-125m":
            continue
        elif record.id == "Qwen/Qwen3-0.6B":
            second.append(replace(record, downloads=(record.downloads or 0) + 1))  # same estimate, new record
        else:
            second.append(record)
    second.append(records["distilbert/distilgpt2"])
    snap2 = _snapshot(root / "snap2", second)
    incremental = _build(snap2, out, **kwargs)
    full = _build(snap2, root / "full", incremental=False, **kwargs)
    return {"out": out, "full": root / "full", "before": before, "incremental": incremental, "fullsummary": full,
            "snap2": snap2, "root": root}


def _shard_pages(folder: Path) -> set[str]:
    """The page URLs a Pagefind index holds (its fragments: gzip, then `pagefind_dcd` and JSON)."""
    urls = set()
    for path in folder.glob("fragment/*.pf_fragment"):
        data = gzip.decompress(path.read_bytes())
        assert data.startswith(b"pagefind_dcd"), path
        urls.add(json.loads(data[len(b"pagefind_dcd"):])["url"])
    return urls


def test_the_shard_of_a_model_is_stable() -> None:
    # sha256 of the id, not Python's salted hash(): a model must stay in its shard across runs and
    # machines, or every nightly would re-index every shard. Values from the first sharded build.
    assert [search.shard_of(m, 3) for m in MODELS] == [2, 2, 1, 2, 0]
    assert search.shard_count(10_000, True, 2_500) == 4 and search.shard_count(10_001, True, 2_500) == 5
    assert search.shard_count(10_000, False, 2_500) == 1  # no family for shard 0: one shard
    with pytest.raises(ValueError, match="shard size"):
        search.shard_count(10, True, 0)


def test_a_sharded_index_splits_by_id_and_reindexes_only_the_changed_shards(sharded: dict) -> None:
    """Second snapshot, 5 models in 3 shards: shard 0 (opt-125m and the families: opt's family is
    gone) and shard 2 (gpt2 deeper, distilgpt2 added) change; shard 1 (Qwen3-0.6B, whose downloads
    are not in its document, and broken/config) is copied. The output equals a full build."""
    inc, full = _tree(sharded["out"]), _tree(sharded["full"])
    assert sorted(inc) == sorted(full) and [k for k in inc if inc[k] != full[k]] == []
    assert "search index: 2 of 3 shards indexed, 1 unchanged (copied)" in sharded["incremental"]
    assert "search index: 3 of 3 shards indexed, 0 unchanged (copied)" in sharded["fullsummary"]
    out = sharded["out"]
    listing = json.loads((out / "pagefind" / search.SHARDS_FILE).read_text(encoding="utf-8"))
    assert listing == {"shards": ["pagefind/", "pagefind-1/", "pagefind-2/"]}
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("pagefind")) == ["pagefind", "pagefind-1",
                                                                                      "pagefind-2"]
    models = [m for m in (*MODELS, BROKEN.id) if m != "facebook/opt-125m"]
    for k in range(3):
        want = {f"/models/{m}/" for m in models if search.shard_of(m, 3) == k}
        if k == 0:
            want |= {f"/families/{s}/" for s in ("gpt2", "qwen2", "qwen3")}
        assert _shard_pages(out / search.folder(k)) == want, k
    old = json.loads(sharded["before"][pages.MANIFEST])["search_keys"]
    new = json.loads(inc[pages.MANIFEST])["search_keys"]
    assert [a == b for a, b in zip(old, new)] == [False, True, False]


def test_a_sharded_site_with_nothing_changed_is_left_as_it_is(sharded: dict, tmp_path: Path) -> None:
    out = tmp_path / "public"
    shutil.copytree(sharded["out"], out)
    before = _tree(out)
    summary = _build(sharded["snap2"], out, search_shard_size=2)
    assert "left as it is" in summary and _tree(out) == before
    shutil.rmtree(out / "pagefind-1")  # a shard missing from the site: not taken for no change
    summary = _build(sharded["snap2"], out, search_shard_size=2)
    assert "left as it is" not in summary and "search index: 1 of 3 shards indexed" in summary
    assert _tree(out) == before


def test_a_new_shard_size_reindexes_and_leaves_no_stale_shard(sharded: dict, two_snapshots: dict,
                                                              tmp_path: Path) -> None:
    """The same site rebuilt with the default shard size: one shard, exactly the unsharded build."""
    out = tmp_path / "public"
    shutil.copytree(sharded["out"], out)
    summary = _build(sharded["snap2"], out)
    assert "left as it is" not in summary and _count(summary, "models rendered") == 0
    assert _tree(out) == _tree(two_snapshots["out"])


def test_incremental_output_equals_a_full_build_byte_for_byte(two_snapshots: dict) -> None:
    inc, full = _tree(two_snapshots["out"]), _tree(two_snapshots["full"])
    assert sorted(inc) == sorted(full)
    assert [k for k in inc if inc[k] != full[k]] == []
    assert any(k.startswith("pagefind/") for k in inc) and pages.MANIFEST in inc


def test_only_changed_models_are_rendered(two_snapshots: dict) -> None:
    # gpt2 (deeper) and distilgpt2 (new) are rendered; Qwen3-0.6B (only its downloads count changed: its
    # page does not show it), the tiny Qwen2 and broken/config (not estimated) are copied.
    assert _count(two_snapshots["incremental"], "models rendered") == 2
    assert _count(two_snapshots["incremental"], "models unchanged \\(copied\\)") == 3
    assert _count(two_snapshots["fullsummary"], "models rendered") == 5
    # A copied model still reports its problem, as a full build would.
    assert "broken/config: config.json is not valid JSON" in two_snapshots["incremental"]
    before = two_snapshots["before"]
    after = _tree(two_snapshots["out"])
    tiny = "models/trl-internal-testing/tiny-Qwen2ForCausalLM-2.5/index.html"
    assert after[tiny] == before[tiny]
    assert "models/facebook/opt-125m/index.html" not in after


def test_a_rebuild_with_nothing_changed_renders_nothing_and_changes_nothing(two_snapshots: dict,
                                                                              tmp_path: Path) -> None:
    out = tmp_path / "public"
    shutil.copytree(two_snapshots["out"], out)
    before = _tree(out)
    summary = _build(two_snapshots["snap2"], out)
    assert _count(summary, "models rendered") == 0
    assert "search index unchanged (copied)" in summary and "index pages unchanged (copied)" in summary
    assert _tree(out) == before
    # Decided from the manifest: nothing staged, nothing swapped, the problems listed all the same.
    assert "left as it is" in summary and "broken/config: config.json is not valid JSON" in summary
    assert sorted(p.name for p in out.parent.iterdir()) == ["public"]


def test_a_rebuild_without_search_is_not_taken_for_no_change(two_snapshots: dict, tmp_path: Path) -> None:
    out = tmp_path / "public"
    shutil.copytree(two_snapshots["out"], out)
    summary = _build(two_snapshots["snap2"], out, search_index=False)
    assert "left as it is" not in summary and not (out / pages.PAGEFIND).exists()
    assert _count(summary, "models rendered") == 0  # the pages are still copied


def test_a_nightly_with_new_counts_everywhere_renders_only_the_changed_configs(two_snapshots: dict,
                                                                              tmp_path: Path) -> None:
    """What a crawl does every night: every record gets new downloads (a new downloads_source date,
    likes, tags), one config changes. Only that model is rendered; the home page shows the new
    counts of the copied ones; the output equals a full build byte for byte."""
    records = [load_record(two_snapshots["snap2"], m) for m in MODELS if m != "facebook/opt-125m"]
    night = [replace(r, downloads=(r.downloads or 0) * 3 + 7, likes=(r.likes or 0) + 1, tags=("nightly",),
                     downloads_source="Hub API field downloads (rolling 30-day count) on 2026-03-02")
             for r in records if r is not None]
    night = [_deeper(r) if r.id == "Qwen/Qwen3-0.6B" else r for r in night] + [BROKEN]
    snap3 = _snapshot(tmp_path / "snap3", night)
    out, full = tmp_path / "public", tmp_path / "full"
    shutil.copytree(two_snapshots["out"], out)
    shutil.copytree(two_snapshots["out"], full)
    summary = _build(snap3, out)
    assert _count(summary, "models rendered") == 1 and _count(summary, "models unchanged \\(copied\\)") == 4
    assert "index pages unchanged" not in summary
    _build(snap3, full, incremental=False)
    inc, ref = _tree(out), _tree(full)
    assert sorted(inc) == sorted(ref) and [k for k in inc if inc[k] != ref[k]] == []
    home = inc["index.html"].decode("utf-8")
    gpt2 = next(r for r in night if r.id == "openai-community/gpt2")  # copied: its row's count is live
    row = home.split('>openai-community/gpt2</a>')[1].split("</tr>")[0]
    assert f'<td class="num" data-label="Downloads">{short_count(gpt2.downloads)}</td>' in row
    page = inc["models/openai-community/gpt2/index.html"].decode("utf-8")
    assert "downloads on Hugging Face" not in page and "2026-03-02" not in page  # no nightly value on the page


def test_the_changes_page_lists_added_changed_and_removed_models(two_snapshots: dict) -> None:
    out = two_snapshots["out"]
    html = (out / pages.CHANGES).read_text(encoding="utf-8")
    second, first = html.split('<section id="snapshot-2">')[1].split('<section id="snapshot-1">')
    assert "Snapshot 2, 2026-03-01" in second  # the newest lastModified of the second snapshot's records
    added = second.split("<h3>Added (1)</h3>")[1].split("</ul>")[0]
    assert '<a href="../models/distilbert/distilgpt2/index.html">distilbert/distilgpt2</a>' in added
    changed = second.split("<h3>Estimates changed (1)</h3>")[1].split("</ul>")[0]
    assert "openai-community/gpt2</a>: parameters 124M \u2192 13" in changed and "; full fine-tune 2.99 GB \u2192 3.14 GB" in changed
    assert "Qwen3-0.6B" not in changed  # its record changed, its estimate did not
    removed = second.split("<h3>Removed (1)</h3>")[1].split("</ul>")[0]
    assert "<li>facebook/opt-125m</li>" in removed and "href" not in removed  # its page is gone: no link
    assert "5 models, 4 estimated: the first build this history knows of" in first


def test_the_feed_has_one_entry_per_change(two_snapshots: dict) -> None:
    feed = (two_snapshots["out"] / pages.FEED).read_text(encoding="utf-8")
    titles = re.findall(r"<title>([^<]*)</title>", feed)[1:]
    assert titles == ["Added: distilbert/distilgpt2", "Estimate changed: openai-community/gpt2",
                      "Removed: facebook/opt-125m", "First snapshot: 5 models"]
    assert feed.count("<updated>2026-03-01T10:00:00Z</updated>") == 4  # the feed's and three entries'


def test_render_key_follows_the_settings_and_the_templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    key = RENDER_KEY(settings)
    assert RENDER_KEY(load_settings()) == key
    assert RENDER_KEY(load_settings(train_tokens=4096)) != key
    templates = tmp_path / "templates"
    shutil.copytree(manifest.TEMPLATES, templates)
    monkeypatch.setattr(manifest, "TEMPLATES", templates)
    assert RENDER_KEY(settings) == key
    (templates / "static" / "style.css").write_text("body { color: red; }\n", encoding="utf-8")
    assert RENDER_KEY(settings) != key


def test_an_unreadable_manifest_means_a_full_build(two_snapshots: dict, tmp_path: Path) -> None:
    out = tmp_path / "public"
    shutil.copytree(two_snapshots["out"], out)
    (out / pages.MANIFEST).write_text("{not json", encoding="utf-8")
    summary = _build(two_snapshots["snap2"], out)
    assert _count(summary, "models rendered") == 5
    assert "the first build this history knows of" in (out / pages.CHANGES).read_text(encoding="utf-8")


def test_a_manifest_with_odd_file_entries_means_those_models_are_rendered(two_snapshots: dict,
                                                                           tmp_path: Path) -> None:
    out = tmp_path / "public"
    shutil.copytree(two_snapshots["out"], out)
    data = json.loads((out / pages.MANIFEST).read_text(encoding="utf-8"))
    data["models"]["Qwen/Qwen3-0.6B"]["files"] = [1, None]
    (out / pages.MANIFEST).write_text(json.dumps(data), encoding="utf-8")
    summary = _build(two_snapshots["snap2"], out)
    assert _count(summary, "models rendered") == 1 and "left as it is" not in summary
    assert _tree(out) == _tree(two_snapshots["out"])


def test_a_replaced_page_on_disk_is_rendered_again(two_snapshots: dict, tmp_path: Path) -> None:
    out = tmp_path / "public"
    shutil.copytree(two_snapshots["out"], out)
    page = out / "models/trl-internal-testing/tiny-Qwen2ForCausalLM-2.5/index.json"
    want = page.read_bytes()
    page.unlink()  # a file missing from the previous site is not copied from nowhere
    summary = _build(two_snapshots["snap2"], out)
    assert _count(summary, "models rendered") == 1 and page.read_bytes() == want
