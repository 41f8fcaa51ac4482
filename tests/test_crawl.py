"""The crawler against a fake Hub on 127.0.0.1: listing, incremental fetches, stale models, every fault."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from fakehub import FakeHub, FakeModel, fake_sha
from generator.hub.client import EXPAND, RETRY_NOTE
from generator.hub.crawl import run_crawl
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, RecordProblem, iter_records, load_record, read_index
from hubkit import IDS, crawl, crawl_command, crawl_models, hub_environment, seed_snapshot, snapshot_files, summary_rows

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def sleeps(monkeypatch, tmp_path):
    return hub_environment(monkeypatch, tmp_path)


def test_first_crawl_lists_pages_and_stores_exact_configs(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    with FakeHub(crawl_models(), page_size=3) as hub:
        code, out = crawl(monkeypatch, hub, snap, limit=8)
    assert code == 0
    assert hub.count("GET", "/api/models") == 3  # 3 + 3 + 2 models, cursor pages followed via Link
    assert hub.queries[0]["expand"] == EXPAND  # repeated expand= keys, one per property
    assert hub.queries[0]["sort"] == ["downloads"] and hub.queries[0]["pipeline_tag"] == ["text-generation"]
    assert "cursor" in hub.queries[1]
    entries = read_index(snap)
    assert [e["id"] for e in entries] == sorted(IDS)
    for model in hub.models:
        record = load_record(snap, model.id)
        assert record.config_json.encode() == model.config  # byte-exact
        assert record.sha == model.sha and not record.stale and record.problems == ()
        assert record.config_provenance == "hub"  # a crawled config is the Hub's own file
        assert record.checkpoint_params == sum(model.params.values())
        assert record.downloads == model.downloads and record.pipeline_tag == "text-generation"
    assert "listed" in out and "fetched" in out
    assert sleeps == []


def test_incremental_crawl_counts_requests(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    models = crawl_models()
    models[0].st_in_listing = False  # its counts come from the safetensors header (Range reads)
    with FakeHub(models, page_size=4) as hub:
        crawl(monkeypatch, hub, snap)
        assert hub.file_downloads() == len(IDS) + 1  # 8 configs + 1 header range read
        before = snapshot_files(snap)

        hub.reset_log()
        code, out = crawl(monkeypatch, hub, snap)
        assert code == 0
        assert hub.count(contains="/resolve/") == 0  # nothing changed: no HEAD, no file GET
        assert hub.count("GET", "/api/models") == 2 and snapshot_files(snap) == before  # listing only; no byte rewritten
        assert summary_rows(out)["unchanged"] == len(IDS) and summary_rows(out)["records written"] == 0

        changed = hub.model("facebook/opt-125m")
        changed.sha = fake_sha(changed.id, "v2")
        changed.config = changed.config.replace(b'"vocab_size"', b'"use_cache": true,\n  "vocab_size"', 1)
        hub.reset_log()
        code, out = crawl(monkeypatch, hub, snap)
    assert code == 0
    assert hub.file_downloads() == 1
    # That one config.json: the dry run's HEAD (its size, checked before any body is requested), then
    # hf_hub_download's own HEAD and the GET.
    assert hub.count(contains="/resolve/") == 3 and hub.count("HEAD", "/resolve/") == 2
    assert hub.count(contains="facebook/opt-125m/resolve/" + changed.sha + "/config.json") == 3
    assert load_record(snap, changed.id).config_json.encode() == changed.config
    changed_files = {k for k, v in snapshot_files(snap).items() if before.get(k) != v}
    assert changed_files == {"index.json", "models/facebook/opt-125m.json"}


def test_models_that_drop_out_are_kept_and_marked_stale(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    seed_snapshot(snap, ["microsoft/phi-2"])  # in the old snapshot, not on the fake Hub's listing at all
    with FakeHub(crawl_models(), page_size=10) as hub:
        crawl(monkeypatch, hub, snap)
        hub.model("distilbert/distilgpt2").hidden = True
        code, out = crawl(monkeypatch, hub, snap)
        assert code == 0
        stale = {e["id"] for e in read_index(snap) if e["stale"]}
        assert stale == {"distilbert/distilgpt2", "microsoft/phi-2"}
        kept = load_record(snap, "distilbert/distilgpt2")
        assert kept.stale and kept.config_json.encode() == hub.model(kept.id).config
        assert summary_rows(out)["stale (kept)"] == 2

        hub.model("distilbert/distilgpt2").hidden = False  # back in the top N: fresh again, no download
        hub.reset_log()
        crawl(monkeypatch, hub, snap)
    assert not load_record(snap, "distilbert/distilgpt2").stale
    assert hub.file_downloads() == 0


def _fault_hub() -> FakeHub:
    models = crawl_models()
    faults = {"openai-community/gpt2": "gated", "Qwen/Qwen3-0.6B": "ratelimit",
              "google-bert/bert-base-uncased": "error", "distilbert/distilgpt2": "timeout",
              "TinyLlama/TinyLlama-1.1B-Chat-v1.0": "malformed", "facebook/opt-125m": "missing",
              "Qwen/Qwen2.5-3B-Instruct": "huge_header"}
    for model in models:
        model.fault = faults.get(model.id)
    qwen = next(m for m in models if m.id == "Qwen/Qwen3-0.6B")
    qwen.fault_times = 2  # two 429s, then the file
    next(m for m in models if m.id == "openai-community/gpt2").gated = "manual"
    next(m for m in models if m.id == "Qwen/Qwen2.5-3B-Instruct").st_in_listing = False
    next(m for m in models if m.id == "meta-llama/Llama-3.2-1B").params = None  # no safetensors at all
    models += [FakeModel(id=bad, sha=fake_sha(bad), config=b"{}", downloads=1)
               for bad in ("../../etc/passwd", "org/na me", "org/..", ".hidden/x")]
    return FakeHub(models, page_size=5)


def test_every_fault_is_recorded_and_the_crawl_goes_on(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    seed_snapshot(snap, ["openai-community/gpt2"])  # gated now, but an older sha had a readable config
    old_gpt2 = load_record(snap, "openai-community/gpt2")
    with _fault_hub() as hub:
        started = time.monotonic()
        code, out = crawl(monkeypatch, hub, snap)
        elapsed = time.monotonic() - started
    print(out)
    assert code == 0 and elapsed < 20

    def problems(repo_id):
        return load_record(snap, repo_id).problems
    gated = load_record(snap, "openai-community/gpt2")
    assert gated.problems == ("config not accessible (gated)",)
    assert gated.gated == "manual" and gated.downloads == 8000  # API metadata kept fresh
    assert gated.config_json == old_gpt2.config_json and gated.sha == old_gpt2.sha  # last good config kept
    assert gated.checkpoint_params == 137022720  # from the listing's safetensors field
    # 429: the library's backoff honoured RateLimit t=2 (+1 s), then the file came.
    assert problems("Qwen/Qwen3-0.6B") == () and 3.0 in sleeps
    assert hub.count("HEAD", "Qwen/Qwen3-0.6B/resolve/", 429) == 2
    five = problems("google-bert/bert-base-uncased")
    assert len(five) == 1 and "server error (HTTP 503)" in five[0] and five[0].endswith(RETRY_NOTE)
    assert hub.count("HEAD", "bert-base-uncased/resolve/") == 7  # 1 fast try + 1 + 5 bounded retries
    assert sleeps == [3.0] + [1, 2, 4, 8, 8] * 2  # 429, then 503 and timeout: exponential, capped
    late = problems("distilbert/distilgpt2")
    assert len(late) == 1 and "timed out" in late[0] and late[0].endswith(RETRY_NOTE)
    bad_json = load_record(snap, "TinyLlama/TinyLlama-1.1B-Chat-v1.0")
    assert "not valid JSON" in bad_json.problems[0] and bad_json.config_json.encode() == \
        hub.model(bad_json.id).config[: len(hub.model(bad_json.id).config) // 2]
    assert problems("facebook/opt-125m") == ("config.json not found (404)",)
    big = load_record(snap, "Qwen/Qwen2.5-3B-Instruct")
    assert big.problems == ("checkpoint count unknown: safetensors header declares more than 25 MB",)
    assert big.checkpoint_params is None and big.config_json.encode() == hub.model(big.id).config
    assert hub.count("GET", "Qwen2.5-3B-Instruct/resolve/", 206) == 1  # the 30 MB header was never asked for
    assert problems("meta-llama/Llama-3.2-1B") == ("checkpoint count unknown: no safetensors checkpoint",)
    # Unsafe ids never became paths, and are not in the index.
    assert {e["id"] for e in read_index(snap)} == set(IDS)
    assert not (tmp_path / "etc").exists() and not list(snap.rglob("*passwd*"))
    assert not [r for r in iter_records(snap) if isinstance(r, RecordProblem)]
    rows = summary_rows(out)
    assert rows["listed"] == 12 and rows["fetched"] == 3 and rows["skipped: invalid repo id"] == 4
    assert rows["listed"] == rows["fetched"] + rows["unchanged"] + sum(
        v for k, v in rows.items() if k.startswith("skipped:"))
    assert {k: v for k, v in rows.items() if ":" in k} == {
        "skipped: gated": 1, "skipped: server error (5xx)": 1, "skipped: timeout": 1,
        "skipped: malformed JSON": 1, "skipped: missing config.json (404)": 1, "skipped: invalid repo id": 4,
        "problem: safetensors header > 25 MB": 1, "problem: no safetensors": 1}


def test_transient_and_gated_problems_are_retried_only_when_they_can_pass(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    with _fault_hub() as hub:
        crawl(monkeypatch, hub, snap)
        for model in hub.models:
            if model.fault in ("error", "timeout"):
                model.fault = None  # the Hub recovered
        hub.reset_log()
        crawl(monkeypatch, hub, snap)
        # Same shas: only the two transient failures are fetched again; gated (no token), 404 and
        # malformed files are immutable at their commit, so nothing else is requested.
        assert hub.file_downloads() == 2
        assert {p.split("/resolve/")[0].strip("/") for _, p, _ in hub.log if "/resolve/" in p} == {
            "google-bert/bert-base-uncased", "distilbert/distilgpt2"}
        assert load_record(snap, "distilbert/distilgpt2").problems == ()
        hub.reset_log()
        monkeypatch.setenv("HF_TOKEN", "hf_test_token")  # a token may have been granted access
        crawl(monkeypatch, hub, snap)
        assert {p for _, p, _ in hub.log if "/resolve/" in p} == {
            f"/openai-community/gpt2/resolve/{hub.model('openai-community/gpt2').sha}/config.json"}


@pytest.mark.parametrize("fault", [{"status": 500}, {"status": 429, "retry_after": 7}])
def test_nothing_listed_exits_non_zero_and_leaves_the_snapshot(sleeps, monkeypatch, capsys, tmp_path, fault):
    snap = tmp_path / "snap"
    seed_snapshot(snap, IDS[:3])
    before = snapshot_files(snap)
    with FakeHub(crawl_models(), list_fault=fault) as hub:
        code, err = crawl_command(monkeypatch, capsys, hub, "--limit", "50", "--pipeline-tag", "text-generation",
                                  "--snapshot", str(snap))
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"neurarch-trace: crawl: {hub.url}: pipeline_tags = ['text-generation']: nothing could "
                           f"be listed (text-generation: listing: ") and last.endswith(f"{RETRY_NOTE})"), last
    assert snapshot_files(snap) == before
    assert hub.count("GET", "/api/models") == 6  # bounded: 1 + 5 retries
    assert sleeps == ([1, 2, 4, 8, 8] if fault["status"] == 500 else [8.0] * 5)


def test_unreachable_endpoint_exits_non_zero(sleeps, monkeypatch, capsys, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connection refused
    code, err = crawl_command(monkeypatch, capsys, SimpleNamespace(url=f"http://127.0.0.1:{port}"),
                              "--pipeline-tag", "text-generation", "--snapshot", str(tmp_path / "s"))
    assert code == 1 and "pipeline_tags = ['text-generation']: nothing could be listed" in err
    assert "Traceback" not in err and not (tmp_path / "s").exists()


def test_an_offline_crawl_is_refused_naming_the_variable(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, err = crawl_command(monkeypatch, capsys, SimpleNamespace(url="http://127.0.0.1:9"),
                              "--snapshot", str(tmp_path / "s"))
    assert code == 1 and not (tmp_path / "s").exists()
    assert err == ("neurarch-trace: crawl: http://127.0.0.1:9: HF_HUB_OFFLINE = '1': is set; the crawl needs the "
                   "Hub\n")


def test_listing_429_on_a_later_page_is_retried(sleeps, monkeypatch, tmp_path):
    with FakeHub(crawl_models(), page_size=3, list_fault={"status": 429, "pages": {2}, "times": 1, "retry_after": 5}) as hub:
        code, _ = crawl(monkeypatch, hub, tmp_path / "snap")
    assert code == 0 and sleeps == [6.0] and len(read_index(tmp_path / "snap")) == len(IDS)


def test_listing_that_breaks_midway_marks_nothing_stale(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    with FakeHub(crawl_models(), page_size=3) as hub:
        crawl(monkeypatch, hub, snap)
        hub.list_fault = {"status": 503, "pages": {3}}
        code, out = crawl(monkeypatch, hub, snap)
    assert code == 0 and "listing stopped early" in out
    assert not [e for e in read_index(snap) if e["stale"]] and len(read_index(snap)) == len(IDS)


def test_a_crawl_killed_halfway_leaves_the_previous_snapshot_whole(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    seed_snapshot(snap, IDS)
    before = snapshot_files(snap)
    models = crawl_models(salt="moved")  # every sha moved: every model is re-downloaded and rewritten
    hang = IDS[4]
    next(m for m in models if m.id == hang).fault = "hang"
    command = [sys.executable, "-m", "generator.cli", "crawl", "--limit", "50", "--pipeline-tag", "",
               "--snapshot", str(snap)]  # the one crawl command, every task
    with FakeHub(models, page_size=50) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(command, env=env, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while not any(f"{hang}/resolve/" in p for p in hub.arrived) and time.monotonic() < deadline:
                if proc.poll() is not None:
                    pytest.fail(f"the crawl ended early: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.05)
            assert any(f"{hang}/resolve/" in p for p in hub.arrived), "the crawl never reached the hanging model"
        finally:
            proc.kill()  # SIGKILL: no cleanup code runs
            proc.wait()
            proc.stderr.close()
        hub.release.set()

        after = snapshot_files(snap)
        assert after["index.json"] == before["index.json"]  # the index is written last
        done = {f"models/{i}.json" for i in IDS[:4]}
        assert {k for k in before if after.get(k) != before[k]} == done  # finished models: whole new files
        assert not [r for r in iter_records(snap) if isinstance(r, RecordProblem)]  # every record readable
        assert all(load_record(snap, i).sha == hub.model(i).sha for i in IDS[:4])

        hub.model(hang).fault = None
        hub.reset_log()
        code, _ = crawl(monkeypatch, hub, snap)
    assert code == 0
    # The finished work survived the kill: only the 4 models not reached before are downloaded now.
    assert hub.file_downloads() == 4
    assert all(load_record(snap, i).sha == hub.model(i).sha for i in IDS)


def test_the_crawl_command_takes_its_defaults_from_site_config(sleeps, monkeypatch, capsys, tmp_path):
    """`neurarch-trace crawl --config FILE`: crawl.limit and crawl.pipeline_tags of FILE, unless the options say
    otherwise (--pipeline-tag repeatable, '' for every task); --limit 0 is refused."""
    config = tmp_path / "site_config.yaml"
    config.write_text("crawl: {limit: 7, pipeline_tags: [text2text-generation]}\n")
    snap = tmp_path / "snap"
    models = crawl_models()
    for model, tag in zip(models, ("text2text-generation", "fill-mask", "feature-extraction")):
        model.pipeline_tag = tag
    with FakeHub(models, page_size=50) as hub:
        code, err = crawl_command(monkeypatch, capsys, hub, "--config", str(config), "--snapshot", str(snap))
        assert code == 0, err
        assert [(q["limit"], q["pipeline_tag"]) for q in hub.queries] == [(["7"], ["text2text-generation"])]
        hub.queries.clear()
        code, _ = crawl_command(monkeypatch, capsys, hub, "--config", str(config), "--limit", "3", "--pipeline-tag",
                                "", "--snapshot", str(snap))
        assert code == 0 and [(q["limit"], q.get("pipeline_tag")) for q in hub.queries] == [(["3"], None)]
        hub.queries.clear()
        code, _ = crawl_command(monkeypatch, capsys, hub, "--config", str(config), "--pipeline-tag", "fill-mask",
                                "--pipeline-tag", "feature-extraction", "--snapshot", str(snap))
        assert code == 0
        assert [q["pipeline_tag"] for q in hub.queries] == [["fill-mask"], ["feature-extraction"]]
    with pytest.raises(SystemExit) as exc:
        crawl_command(monkeypatch, capsys, hub, "--limit", "0")
    assert exc.value.code == 2 and "argument --limit: must be at least 1" in capsys.readouterr().err


def test_the_default_crawl_lists_every_task_the_estimator_covers():
    """The project's settings list encoders, embedders, encoder-decoders and VLMs, not only decoders."""
    from generator.hub.crawl import DEFAULT_PIPELINE_TAGS, crawl_defaults

    limit, tags = crawl_defaults()
    assert limit == 200 and tags == DEFAULT_PIPELINE_TAGS
    for tag in ("text-generation", "image-text-to-text", "text2text-generation", "fill-mask",
                "feature-extraction", "sentence-similarity", "text-classification"):
        assert tag in tags


def test_a_crawl_over_several_tags_keeps_encoders_embedders_and_vlms_fresh(sleeps, monkeypatch, tmp_path):
    from generator.hub.crawl import DEFAULT_PIPELINE_TAGS

    snap = tmp_path / "snap"
    models = crawl_models()
    tags = {"google-bert/bert-base-uncased": "fill-mask", "distilbert/distilgpt2": "feature-extraction",
            "facebook/opt-125m": "image-text-to-text", "Qwen/Qwen2.5-3B-Instruct": "text-to-image"}
    for model in models:
        model.pipeline_tag = tags.get(model.id, "text-generation")
    with FakeHub(models, page_size=50) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        out = io.StringIO()
        code = run_crawl(limit=50, pipeline_tags=DEFAULT_PIPELINE_TAGS, snapshot_dir=snap,
                         console=Console(file=out, width=110))
        assert code == 0, out.getvalue()
        assert [q["pipeline_tag"] for q in hub.queries] == [[t] for t in DEFAULT_PIPELINE_TAGS]
        listed = {e["id"]: e for e in read_index(snap)}
        # Every model of a covered task is listed; the text-to-image one is not.
        assert set(listed) == set(IDS) - {"Qwen/Qwen2.5-3B-Instruct"}
        assert load_record(snap, "google-bert/bert-base-uncased").pipeline_tag == "fill-mask"
        # The next night: an encoder, an embedder and a VLM are still listed, so none is marked stale.
        code = run_crawl(limit=50, pipeline_tags=DEFAULT_PIPELINE_TAGS, snapshot_dir=snap,
                         console=Console(file=out, width=110))
        assert code == 0 and not [e for e in read_index(snap) if e["stale"]]
        # A night listing text-generation only (the old default) would have marked them stale.
        crawl(monkeypatch, hub, snap)
        stale = {e["id"] for e in read_index(snap) if e["stale"]}
        assert stale == {"google-bert/bert-base-uncased", "distilbert/distilgpt2", "facebook/opt-125m"}


def test_crawl_command_takes_repeated_tags_and_exits_0(sleeps, monkeypatch, tmp_path, capsys):
    from generator.cli import main

    snap = tmp_path / "snap"
    models = crawl_models()
    for model in models:
        model.pipeline_tag = "fill-mask" if model.id == "google-bert/bert-base-uncased" else "text-generation"
    with FakeHub(models, page_size=50) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code = main(["crawl", "--limit", "3", "--pipeline-tag", "fill-mask", "--pipeline-tag", "text-generation",
                     "--snapshot", str(snap)])
        assert code == 0, capsys.readouterr().err
        assert [q["pipeline_tag"] for q in hub.queries] == [["fill-mask"], ["text-generation"]]
    assert len(read_index(snap)) == 4  # 1 fill-mask + the top 3 text-generation models
    assert "listed" in capsys.readouterr().err
