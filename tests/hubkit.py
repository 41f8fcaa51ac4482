"""Shared set-up of the Hub tests: an isolated huggingface_hub, the crawl test models, and readers."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from fakehub import FakeHub, FakeModel, fake_sha, models_from_snapshot
from generator.hub.crawl import run_crawl
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, iter_records, write_index, write_record
from generator.records import ModelRecord


def hub_environment(monkeypatch, tmp_path: Path) -> list[float]:
    """Isolate huggingface_hub for a test: temp HF_HOME, no token, online, short timeouts, and the
    library's backoff sleeps recorded instead of slept. Returns the list of requested sleeps."""
    import types
    from dataclasses import replace

    import huggingface_hub.constants
    import huggingface_hub.file_download as file_download
    import huggingface_hub.utils._http as hf_http

    from generator.hub import client

    for var in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE",
                "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    # The variables were read when huggingface_hub was first imported (maybe by another test): undo that.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    # With telemetry on, building the user agent fetches an "agent harness" registry from the import-time
    # endpoint (huggingface.co): the default suite must never touch the internet.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)
    # The library's own retry uses a fixed 60 s timeout; the timeout fault needs it short.
    monkeypatch.setattr(file_download, "_ETAG_RETRY_TIMEOUT", 0.3)
    original = client.HubSettings.from_env.__func__
    monkeypatch.setattr(client.HubSettings, "from_env", classmethod(
        lambda cls, env=None: replace(original(cls, env), etag_timeout=0.3, download_timeout=0.3)))
    sleeps: list[float] = []
    monkeypatch.setattr(hf_http, "time", types.SimpleNamespace(sleep=sleeps.append))
    hf_http.close_session()  # a fresh client picks up NO_PROXY
    return sleeps


IDS = ["openai-community/gpt2", "Qwen/Qwen3-0.6B", "google-bert/bert-base-uncased", "distilbert/distilgpt2",
       "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "facebook/opt-125m", "Qwen/Qwen2.5-3B-Instruct",
       "meta-llama/Llama-3.2-1B"]


def crawl_models(salt: str = "v1") -> list[FakeModel]:
    models = models_from_snapshot(DEFAULT_SNAPSHOT_DIR, IDS)
    assert len(models) == len(IDS)
    for rank, model in enumerate(sorted(models, key=lambda m: IDS.index(m.id))):
        model.downloads = 1000 * (len(IDS) - rank)  # rank = position in IDS
        model.sha = fake_sha(model.id, salt)
        model.params = model.params or {"F16": 125_239_296}  # opt-125m has no count in the snapshot
    return models


def crawl(monkeypatch, hub: FakeHub, snap: Path, limit: int = 50) -> tuple[int, str]:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    out = io.StringIO()
    code = run_crawl(limit=limit, pipeline_tags=["text-generation"], snapshot_dir=snap,
                     console=Console(file=out, width=110))
    return code, out.getvalue()


def crawl_command(monkeypatch, capsys, hub, *args: str) -> tuple[int, str]:
    """`neurarch-trace crawl ARGS` (the real command) against the fake Hub: (exit code, stderr)."""
    from generator.cli import main

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    capsys.readouterr()
    code = main(["crawl", *args])
    return code, capsys.readouterr().err


def summary_rows(out: str) -> dict[str, int]:
    """The summary table as {label: count}."""
    cells = [line.split("│") for line in out.splitlines() if line.count("│") == 3]
    return {c[1].strip(): int(c[2]) for c in cells}


def snapshot_files(snap: Path) -> dict[str, bytes]:
    return {p.relative_to(snap).as_posix(): p.read_bytes() for p in sorted(snap.rglob("*")) if p.is_file()}


def seed_snapshot(snap: Path, ids: list[str]) -> None:
    """An older snapshot holding the committed records of ids."""
    records = [r for r in iter_records(DEFAULT_SNAPSHOT_DIR) if isinstance(r, ModelRecord) and r.id in ids]
    for record in records:
        write_record(snap, record)
    write_index(snap, [index_entry(r) for r in records])
