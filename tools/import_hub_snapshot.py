"""Dev-time, run once: turn the offline Hub corpus (configs/ + models.tsv) into the committed snapshot/."""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generator.hub.snapshot import (  # noqa: E402
    DEFAULT_SNAPSHOT_DIR, index_entry, read_index, record_path, write_index, write_record,
)
from generator.records import ModelRecord, validate_repo_id  # noqa: E402

DEFAULT_SOURCE = Path("/work/shared/hub-snapshot")
# Only an explicit "at Hub revision <sha>" pins the file to a Hub commit; other rows carry no sha, so the
# first crawl re-downloads them (a None sha never equals the Hub's).
_REVISION_RE = re.compile(r"\bat Hub revision ([0-9a-f]{40})\b")
_PER_DTYPE_RE = re.compile(r"per-dtype (\{[^{}]*\})")


# config_provenance from the corpus's config_source (its README's tiers A-F): the owner/repo, or the
# Hub page, each row names.
_PROVENANCE_BY_SOURCE = (
    ("github:daniel-p-green/alain-ai-learning-platform@", "hub"),  # tier A: raw Hub files, sha256 checked
    ("github:mlc-ai/mlc-llm@", "preset"),  # tier D
    ("github:vllm-project/vllm-spyre@", "resaved"),  # tier E
    ("github:Retruth/deontic@", "resaved"),
    ("github:kevinstephano/thunder_model_blocks@", "resaved"),  # tier E, and F for Llama-3.2-1B (below)
    ("github:NVIDIA/TensorRT-LLM@", "repaired"),  # tier F
    ("github:vkeilo/GlmStateVisualization@", "repaired"),
    ("reconstructed", "reconstructed"),  # the two reference-page models
)
_REPAIRED_IDS = {"meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.3-70B-Instruct"}  # tier F rows of tier-E/B repos
_RESAVED_IDS = {"google/gemma-3-27b-it"}  # tier E: the aws-neuron asset printed through AutoConfig

# Keys known to be wrong in a corpus copy: repo id -> ((key, copy's value, Hub value), ...). The facts and
# their sources are listed in snapshot/README.md ("Corrected keys").
CORRECTIONS = {
    "meta-llama/Llama-2-7b-hf": (("max_position_embeddings", 2048, 4096),),
    "meta-llama/Llama-2-13b-hf": (("max_position_embeddings", 2048, 4096),),
    "meta-llama/Llama-2-70b-hf": (("max_position_embeddings", 2048, 4096),),
}


# hf_quant_config.json of the repos whose quantisation lives there (models.tsv notes it: ModelOpt up to 0.29), kept
# byte for byte in tools/hub-quant-configs/<id>/ from the same repository and commit as their config.json copies.
QUANT_CONFIGS_DIR = Path(__file__).resolve().parent / "hub-quant-configs"
_AICONFIGURATOR = ("github:ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce:"
                   "aic-core/src/aiconfigurator_core/model_configs/")
QUANT_CONFIGS = {
    "nvidia/Llama-3.1-70B-Instruct-FP8": _AICONFIGURATOR + "nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json",
    "nvidia/Qwen3-235B-A22B-NVFP4": _AICONFIGURATOR + "nvidia--Qwen3-235B-A22B-NVFP4_hf_quant_config.json",
}


def quant_config(repo_id: str) -> tuple[str, str | None]:
    """The kept hf_quant_config.json of repo_id (byte-exact text) and its source; "" and None where none is kept."""
    if repo_id not in QUANT_CONFIGS:
        return "", None
    text = (QUANT_CONFIGS_DIR / repo_id / "hf_quant_config.json").read_bytes().decode("utf-8")
    return text, f"{QUANT_CONFIGS[repo_id]} (a verbatim copy of the repo's file, ModelOpt's export)"


def provenance_of(repo_id: str, config_source: str) -> str:
    """Where the corpus's config.json of repo_id comes from, as one of records.PROVENANCES."""
    if repo_id in _REPAIRED_IDS:
        return "repaired"
    if repo_id in _RESAVED_IDS:
        return "resaved"
    for prefix, provenance in _PROVENANCE_BY_SOURCE:
        if config_source.startswith(prefix):
            return provenance
    return "copy"  # tier B (verbatim JSON in other repositories) and C (rebuilt from rendered Hub pages)


def corrected(repo_id: str, config_json: str) -> tuple[str, str]:
    """config_json with the CORRECTIONS of repo_id applied in place (the copy's layout kept), and the
    note config_source gets; unchanged text and "" when there is none."""
    notes = []
    for key, old, new in CORRECTIONS.get(repo_id, ()):
        before = f'"{key}": {json.dumps(old)}'
        if config_json.count(before) != 1:
            raise SystemExit(f"{repo_id}: expected one {before} to correct")
        config_json = config_json.replace(before, f'"{key}": {json.dumps(new)}')
        notes.append(f"{key} {old} -> {new}")
    note = f" [corrected: {'; '.join(notes)}, the Hub value (snapshot/README.md, Corrected keys)]" if notes else ""
    return config_json, note


# The corpus names the two reconstructed models' sources by a path of its own; a page names no path of the project
_REFERENCE_PAGE_RE = re.compile(r"the reference page reference-pages/[\w.-]+\.txt")


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text else None


def row_to_record(row: dict[str, str], source: Path) -> ModelRecord:
    repo_id = validate_repo_id(row["repo_id"])
    config_path = source / "configs" / repo_id / "config.json"
    # Byte-exact: decode only, no normalisation of whitespace, newlines or key order.
    config_json = config_path.read_bytes().decode("utf-8")
    config_source = row["config_source"].strip() or None
    provenance = provenance_of(repo_id, config_source or "")
    if config_source is not None:
        config_source = _REFERENCE_PAGE_RE.sub("the shape published for this model", config_source)
    config_json, note = corrected(repo_id, config_json)
    config_source = None if config_source is None else config_source + note
    match = _REVISION_RE.search(config_source or "")
    params_source = row["params_source"].strip() or None
    by_dtype: dict[str, int] = {}
    per_dtype = _PER_DTYPE_RE.search(params_source or "")
    if per_dtype:
        by_dtype = {str(k): int(v) for k, v in json.loads(per_dtype.group(1)).items()}
    checkpoint = _int_or_none(row["checkpoint_params"])
    if by_dtype and checkpoint is not None and sum(by_dtype.values()) != checkpoint:
        raise SystemExit(f"{repo_id}: per-dtype split {by_dtype} does not sum to {checkpoint}")
    quant, quant_source = quant_config(repo_id)
    return ModelRecord(
        id=repo_id,
        config_json=config_json,
        sha=match.group(1) if match else None,
        checkpoint_params=checkpoint,
        checkpoint_params_by_dtype=by_dtype,
        checkpoint_source=params_source,
        downloads=_int_or_none(row["downloads"]),
        downloads_source=row["downloads_source"].strip() or None,
        gated=None,  # unknown: the corpus does not say
        config_source=config_source,
        config_provenance=provenance,
        quant_config_json=quant,
        quant_config_source=quant_source,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--snapshot", type=Path, default=DEFAULT_SNAPSHOT_DIR)
    args = parser.parse_args(argv)

    with open(args.source / "models.tsv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    entries = []
    for row in rows:
        record = row_to_record(row, args.source)
        write_record(args.snapshot, record)
        entries.append(index_entry(record))
    on_disk = {p.relative_to(args.snapshot.resolve()).as_posix()
               for p in (args.snapshot.resolve() / "models").rglob("*.json")}
    extra = on_disk - {e["file"] for e in entries}
    if extra:
        raise SystemExit(f"records not in models.tsv already in {args.snapshot}: {sorted(extra)[:5]}")
    write_index(args.snapshot, entries)
    # Read back: every record must load and match the path the index names.
    assert len(read_index(args.snapshot)) == len(entries)
    assert all(record_path(args.snapshot, e["id"]).is_file() for e in entries)
    skipped = sorted(p.relative_to(args.source).as_posix()
                     for p in (args.source / "configs").rglob("*.json") if p.name != "config.json")
    print(f"imported {len(entries)} records into {args.snapshot}; not imported: {', '.join(skipped) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
