"""Golden pages: three models built from a pinned mini snapshot must match tests/golden/site byte for byte.

Regenerate deliberately (it re-copies the three records from snapshot/ and rewrites the pages):
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_site_golden.py
then review `git diff tests/golden`.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, load_record, write_index, write_record
from generator.settings import load_settings
from generator.site.build import run_build

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_SNAPSHOT = GOLDEN / "snapshot"
GOLDEN_SITE = GOLDEN / "site"
# The seed reference model (reference-pages/tiny-Qwen2ForCausalLM-2.5.txt), a learned-position model
# whose checkpoint stores buffers, a tied model that needs a two-card split on the smallest card, and a
# model that needs many GPUs for every method (an FP8 MoE with MLA: setups over nodes, QLoRA not applicable).
MODELS = ("trl-internal-testing/tiny-Qwen2ForCausalLM-2.5", "openai-community/gpt2", "Qwen/Qwen3-0.6B",
          "deepseek-ai/DeepSeek-V3")
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


# Not compared: the stylesheet and scripts (not pages; a CSS edit should not need a golden
# regeneration), Pagefind's binary index, and the build manifest (its hashes cover the source code).
SKIPPED = ("static/", "pagefind/", ".build-manifest.json")


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.relative_to(root).as_posix().startswith(SKIPPED)}


def _refresh_snapshot() -> None:
    if GOLDEN_SNAPSHOT.exists():
        shutil.rmtree(GOLDEN_SNAPSHOT)
    records = [load_record(DEFAULT_SNAPSHOT_DIR, model) for model in MODELS]
    assert all(records), "a golden model is missing from the committed snapshot"
    for record in records:
        write_record(GOLDEN_SNAPSHOT, record)
    write_index(GOLDEN_SNAPSHOT, [index_entry(r) for r in records])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if UPDATE:
        _refresh_snapshot()
    out = tmp_path_factory.mktemp("golden") / "public"
    rc = run_build(snapshot_dir=GOLDEN_SNAPSHOT, out_dir=out, strict=True, settings=load_settings(),
                   console=Console(file=io.StringIO(), width=120))
    assert rc == 0
    if UPDATE:
        if GOLDEN_SITE.exists():
            shutil.rmtree(GOLDEN_SITE)
        shutil.copytree(out, GOLDEN_SITE, ignore=shutil.ignore_patterns("static", "pagefind", ".build-manifest.json"))
    return out


def test_golden_file_list(built: Path) -> None:
    assert sorted(_files(built)) == sorted(_files(GOLDEN_SITE))


@pytest.mark.parametrize("model", MODELS)
def test_golden_model_page(built: Path, model: str) -> None:
    for name in ("index.html", "index.json"):
        rel = f"models/{model}/{name}"
        got, want = (built / rel).read_text(encoding="utf-8"), (GOLDEN_SITE / rel).read_text(encoding="utf-8")
        assert got == want, f"{rel} differs from the golden copy; if intended, regenerate with UPDATE_GOLDEN=1"


def test_golden_index_pages(built: Path) -> None:
    got, want = _files(built), _files(GOLDEN_SITE)
    for rel in sorted(want):
        if not rel.startswith("models/"):
            assert got.get(rel) == want[rel], f"{rel} differs from the golden copy"
