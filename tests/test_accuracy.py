"""generator/accuracy.py and the committed dataset in data/measurements/."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from generator import accuracy
from generator.accuracy import AccuracyTable, compute, error_row, percentile, tensor_bytes

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements"


def test_accuracy_json_matches_a_fresh_computation():
    """data/measurements/accuracy.json is what `python -m generator.accuracy` computes from the committed rows
    and the current estimator. After an estimator change: rerun it (make accuracy) and review the diff."""
    table = accuracy.current_table(DATA)
    committed = json.loads((DATA / "accuracy.json").read_text(encoding="utf-8"))
    fresh = json.loads(json.dumps(table.to_dict()))
    assert fresh == committed


def test_percentile_and_error_row():
    assert percentile([3, 1, 2], 50) == 2
    assert percentile([0, 10], 90) == 9
    assert percentile([5], 90) == 5
    row = error_row("d", "full", [(110, 100), (90, 100), (150, 100)])
    assert (row.compared, row.median_abs_pct, row.max_abs_pct, row.mean_signed_pct) == (3, 10.0, 50.0, 16.67)
    assert error_row("d", "full", []).median_abs_pct is None


def test_tensor_bytes_takes_off_the_context_only_where_the_metric_has_it():
    def row(metric, status="measured", peak=10_000):
        return {"measured": {"metric": metric, "status": status, "peak_bytes": peak}}

    assert tensor_bytes(row("max_memory_allocated"), 1000) == 10_000
    assert tensor_bytes(row("memtracker_fake_cpu", "ok"), 1000) == 10_000
    assert tensor_bytes(row("nvml_used"), 1000) == 9_000
    assert tensor_bytes(row("allocated_plus_non_torch"), 1000) == 9_000
    assert tensor_bytes(row("max_memory_allocated", "oom", None), 1000) is None


def test_a_fitting_job_called_tight_is_not_a_false_wont_fit():
    """Between a card's budget and its capacity the estimator says tight (estimator.card_verdict): a fitting job
    there is counted as called tight; only an estimate over the capacity is a false "won't fit"."""
    from generator.estimator.inputs import Assumptions, Card

    s = Assumptions(cuda_context_bytes=10 * 10**9, headroom=1.25)  # capacity 100 GB, budget 80 GB
    settings = SimpleNamespace(assumptions=s, cards=(Card("card", 110 * 10**9, 110 * 10**9, ""),))
    base = {"setup": {"method": "full", "precision": "amp", "batch": 1, "tokens": 8}, "config": {"x": 1}}
    rows = [dict(base, measured={"metric": "memtracker_fake_cpu", "status": "ok", "peak_bytes": m * 10**9}, est=e)
            for m, e in ((50, 60), (50, 90), (70, 100), (70, 101), (90, 95))]
    table = compute({"d": rows}, settings, "t", estimate_fn=lambda row, _: row["est"] * 10**9)
    (row,) = table.fits
    # fit (<= 80): 60 fits, 90 and 100 tight, 101 over the capacity; 90 measured does not fit, 95 flags it
    assert (row.jobs, row.fit, row.fit_tight, row.false_wont_fit, row.nonfit, row.nonfit_flagged) == (5, 4, 2, 1, 1, 1)


def test_fit_verdicts_count_per_card():
    from generator.estimator.inputs import Assumptions, Card

    s = Assumptions(cuda_context_bytes=0, headroom=1.0)
    cards = (Card("small", 100 * 10**9, 100, ""), Card("big", 200 * 10**9, 200, ""))
    settings = SimpleNamespace(assumptions=s, cards=cards)
    base = {"setup": {"method": "full", "precision": "amp", "batch": 1, "tokens": 8}, "config": {"x": 1}}
    rows = [dict(base, measured={"metric": "memtracker_fake_cpu", "status": "ok", "peak_bytes": m}, est=e)
            for m, e in ((50, 60), (150, 90), (150, 160), (250, 300))]
    rows.append(dict(base, measured={"metric": "outcome", "status": "oom", "peak_bytes": None}, gpu_memory_gb=100,
                     est=120))
    table = compute({"d": rows}, settings, "t", estimate_fn=lambda row, _: row["est"])
    assert isinstance(table, AccuracyTable)
    small, big = [f for f in table.fits if f.method == "full"]
    # small (budget 100): fits 50 (est 60, ok); non-fit 150 (est 90: missed), 150 (160: flagged), 250 (300: flagged),
    # and the OOM row on a 100 GB GPU (est 120: flagged)
    assert (small.jobs, small.nonfit, small.nonfit_flagged, small.fit, small.false_wont_fit) == (5, 4, 3, 1, 0)
    # big (budget 200): fits 50, 150, 150 (est 60, 90, 160: all say fit); non-fit 250 (flagged); OOM row not judged
    assert (big.jobs, big.nonfit, big.nonfit_flagged, big.fit, big.false_wont_fit) == (4, 1, 1, 3, 0)
    assert table.errors[0].compared == 4 and table.rows == (("d", 5, 4),)
    assert table.unflagged_oom == ()  # the d dataset is not public: its OOM rows are in the counts only
    missed = dict(rows[-1], id="M1", est=90)  # an OOM on a 100 GB GPU the estimate fits: named, with its cause
    flagged = dict(rows[-1], id="M2", gpu_memory_gb=200, est=150)  # judged on both cards: over small, under big
    table = compute({"public": [missed, flagged, rows[-1]]}, settings, "t", estimate_fn=lambda row, _: row["est"])
    assert [(i, card, e, b) for i, _, _, card, e, b, _ in table.unflagged_oom] == [
        ("M1", "small", 90, 100), ("M2", "big", 150, 200)]  # budgets: the cards' usable bytes here
    assert all("metric outcome" in cause for *_, cause in table.unflagged_oom)


def test_every_public_oom_run_the_estimate_fits_is_named():
    """Issue 13's "every OOM is flagged": a public run that ran out of memory where the estimate fits is listed
    with its cause, and the list agrees with the fit counts. LitGPT's full.yaml on 4 A10Gs, priced with the 4
    micro-batches it accumulates unsharded under FSDP, is flagged (rows M073, M076)."""
    committed = json.loads((DATA / "accuracy.json").read_text(encoding="utf-8"))
    listed = {x["id"] for x in committed["unflagged_oom"]}
    assert listed and not listed & {"M073", "M076"}
    for x in committed["unflagged_oom"]:
        assert x["estimate_bytes"] <= x["budget_bytes"] and "metric outcome" in x["cause"]


def test_cpu_sim_dataset_is_whole():
    rows = [json.loads(line) for line in (DATA / "cpu-sim.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 100
    assert len({r["model_type"] for r in rows}) >= 12
    assert {r["setup"]["method"] for r in rows} == {"full", "lora", "inference"}
    for r in rows:
        text = json.dumps(r["config"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert r["config_hash"] == hashlib.sha256(text.encode()).hexdigest()
        assert r["measured"]["metric"] == "memtracker_fake_cpu" and r["measured"]["peak_bytes"] > 0
        assert r["device"]["kind"] == "cpu-simulated" and r["versions"]["torch"]
        assert (r["config_changes"] is None) == (r["source_config_hash"] is None)


def test_public_rows_say_where_they_come_from_and_why_they_are_out():
    rows = [json.loads(line) for line in (DATA / "public.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 317
    for r in rows:
        assert r["source"].startswith("https://") and r["trust"] in ("A", "B", "C")
        assert r["excluded"] or (r["setup"] and r["config"])
    multi = [r for r in rows if r["gpus"].startswith(("2x", "4x", "8x"))]
    # a multi-GPU run is compared only where the row says how it was spread (memory.parallel prices that setup)
    assert multi and all(r["excluded"] or r["parallel"]["gpus"] == int(r["gpus"].split("x")[0]) for r in multi)
    # every spread but two: M087 (2 or 4 GPUs) and M369 (the total over its GPUs, not one GPU's peak)
    assert sum(1 for r in multi if r.get("parallel")) == 41
    assert all(r["excluded"] for r in rows if r["measured"]["unit"] == "GB-ambiguous")


@pytest.mark.parametrize("name", ["cpu-sim.jsonl", "public.jsonl"])
def test_dataset_files_are_json_lines(name):
    for n, line in enumerate((DATA / name).read_text(encoding="utf-8").splitlines(), 1):
        assert isinstance(json.loads(line), dict), f"{name}:{n}"


def test_a_multi_gpu_row_is_priced_per_gpu_on_its_setup():
    from generator.accuracy import estimate_bytes
    from generator.settings import load_settings

    assumptions = load_settings().assumptions
    row = next(json.loads(line) for line in (DATA / "public.jsonl").read_text(encoding="utf-8").splitlines()
               if '"M073"' in line)  # LitGPT's full.yaml: Llama-2-7B over 4 GPUs with FSDP
    sharded = estimate_bytes(row, assumptions)
    single = estimate_bytes({**row, "parallel": None}, assumptions)
    wider = estimate_bytes({**row, "parallel": {**row["parallel"], "gpus": 16}}, assumptions)
    assert sharded and single and wider and single > sharded > wider  # FSDP shares the weights and states out


def test_public_rows_map_onto_job_options():
    from generator.accuracy import _double_quant, setup_and_reason

    def row(**setup):
        base = {"method": "qlora", "precision": "bf16", "batch": 1, "tokens": 512, "grad_accum": 1,
                "lora_rank": 8, "lora_targets": "q_proj,v_proj", "optimizer": "paged_adamw",
                "attention": "flash_attention_2", "weights": "nf4 + double-quant (bnb)"}
        return {"setup": {**base, **setup}, "measured": {"metric": "allocated_plus_non_torch"}, "excluded": None}

    setup, why = setup_and_reason(row())
    assert why == "" and (setup.weights, setup.optimizer, setup.attention, setup.metric) == \
        ("nf4", "paged-adamw", "sdpa", "nvidia-smi")  # flash_attention_2 saves no score matrix, as SDPA
    assert _double_quant(row()) and not _double_quant(row(weights="nf4 (bnb)"))
    assert setup_and_reason(row(weights="gptq-int4 (g128, no act-order)"))[0].weights == "gptq-int4"
    assert setup_and_reason(row(weights="fp4 (bnb)"))[0].weights == "nf4"  # same storage as NF4
    assert setup_and_reason(row(grad_accum=4))[0].grad_accum == 4  # priced (FINDINGS.md F27)
    assert setup_and_reason(row(optimizer="adamw_in_backward"))[1] == "optimizer 'adamw_in_backward': not an estimator option"
    assert setup_and_reason(row(weights="awq"))[1] == "base stored as 'awq': not an estimator option"
    assert setup_and_reason(row(method="full", weights="bf16"))[0].weights == ""  # follows the precision
    excluded = {"excluded": "multi-GPU or offload (FSDP (2 or 4 GPUs; per-GPU)): not one card's peak; trust C"}
    assert setup_and_reason(excluded) == (None, "multi-GPU or offload: not one card's peak")


def test_excluded_rows_are_counted_with_their_reason():
    committed = json.loads((DATA / "accuracy.json").read_text(encoding="utf-8"))
    counts = {r["dataset"]: 0 for r in committed["rows"]}
    for e in committed["excluded"]:
        assert e["reason"] and e["rows"] >= 1
        counts[e["dataset"]] += e["rows"]
    for r in committed["rows"]:  # every row is either compared (or an OOM row judged) or excluded with a reason
        assert r["compared"] + counts[r["dataset"]] <= r["rows"]
    public = {e["reason"]: e["rows"] for e in committed["excluded"] if e["dataset"] == "public"}
    # 89 before CodeLlama-34B's, Pythia-410M's and OPT-350M's 27 rows got vouched stand-ins (import_public.VOUCHED);
    # the two benchmarks' 18 training rows step no optimizer (test_sdpa_benchmark_pairs), their 6 generate rows give
    # no prompt length
    assert public["no config.json for this model in snapshot/"] == 62
    assert public["no optimizer step: a forward-and-backward benchmark loop, not a training step (FINDINGS.md F56 "
                  "pairs its eager and SDPA runs)"] == 18


def test_the_vouched_codellama_34b_config_counts_the_34b_checkpoint():
    """CodeLlama-34B's stand-in (CodeLlama-13B's config with the 34B's shapes, as litgpt@26857050 config.py
    L1430-1449 copies them from the Hub) reconstructs 33,743,970,304 parameters: the count Together's model catalogue
    gives Phind-CodeLlama-34B-v2, a fine-tune of the same network; and its rows compare within 3%."""
    from generator.estimator.graph.nodes import build_graph
    from generator.estimator.normalise import normalise

    rows = {r["id"]: r for r in map(json.loads, (DATA / "public.jsonl").read_text(encoding="utf-8").splitlines())}
    row = rows["M045"]
    assert row["config_source"].startswith("snapshot/models/codellama/CodeLlama-13b-hf.json with ")
    assert "litgpt@26857050" in row["config_vouched"]
    assert build_graph(normalise(row["config"], row["model"])).params_total == 33_743_970_304
    assert all(rows[i]["excluded"] is None for i in ("M044", "M045", "M046"))


def test_every_public_row_missed_by_more_than_10pct_has_a_named_cause():
    """Issue 13 item 6: a public row the estimate misses by over 10% is listed with its cause, not left silent."""
    import json as _json
    from pathlib import Path as _Path

    data = _json.loads((_Path(__file__).resolve().parents[1] / "data/measurements/accuracy.json").read_text())
    assert data["misses"], "the committed table lists its misses"
    for m in data["misses"]:
        assert abs(m["error_pct"]) > 10 and "metric" in m["cause"] and m["cause"].split(";")[0].strip()


def test_a_miss_names_what_its_framework_and_metric_count_that_the_estimate_does_not():
    """The audit of issue 13 found causes that named a metric or a framework and no mechanism (torchtune's M128:
    'torchtune; recipe ...; metric max_memory_reserved'), and an optimizer on serving rows."""
    misses = {m["id"]: m["cause"] for m in json.loads((DATA / "accuracy.json").read_text(encoding="utf-8"))["misses"]}
    assert "torchtune runs its own model code and loss, priced here as transformers' class and its loss" \
        in misses["M128"]
    assert "metric max_memory_reserved (the caching allocator's cached blocks too" in misses["M128"]
    assert "recipe: inference, bf16, eager" in misses["M164"] and "adamw" not in misses["M164"]
    assert "metric allocated_plus_non_torch (memory outside PyTorch's allocator too" in misses["M164"]


def test_a_row_left_out_only_for_its_unit_is_judged_under_both_readings():
    """A source that does not say GB or GiB is in no pooled figure, but its row is priced both ways: the GB reading
    (value x 1e9) is the smaller figure, so its error is the larger; rows with another reason too are not listed."""
    from generator.accuracy import unit_readings
    from generator.settings import load_settings

    assumptions = load_settings().assumptions
    rows = {r["id"]: r for r in map(json.loads, (DATA / "public.jsonl").read_text(encoding="utf-8").splitlines())}
    row = rows["M430"]  # PEFT's FSDP QLoRA of Llama-2-70B on 2 GPUs: "35.6 GB / GPU"
    assert row["excluded"] == "unit ambiguous (GB or GiB, +-7%)"
    plain, est, gb, gib = unit_readings(row, assumptions)
    assert plain["excluded"] is None and est > 0
    assert gib - gb == round(35.6 * 2**30) - round(35.6 * 1e9)  # the same context taken off both readings
    assert unit_readings(rows["M121"], assumptions) is None  # its stated length is a cap too
    assert unit_readings(rows["M031"], assumptions) is None  # not left out for its unit
    committed = json.loads((DATA / "accuracy.json").read_text(encoding="utf-8"))
    listed = {x["id"]: x for x in committed["unit_ambiguous"]}
    assert set(listed) == {"M426", "M427", "M428", "M429", "M430"}  # M426/M427 accumulate (GA 4, GA 2)
    assert all(x["error_pct_if_gb"] > x["error_pct_if_gib"] and "metric nvml_used" in x["cause"]
               for x in listed.values())


def test_a_run_whose_length_is_a_cap_is_judged_against_the_estimate_at_the_cap():
    """A run that padded to each batch's longest sample and cut at a cap is in no pooled figure, but no step of it was
    longer than the cap: the estimate there bounds its peak, so its error there is listed (accuracy_capped). Only
    rows left out for that reason alone are; the importer's clauses split outside parentheses."""
    from generator.accuracy_capped import capped_rows
    from generator.accuracy_rows import clauses, estimate_or_reason, tensor_bytes
    from generator.settings import load_settings

    assert clauses("a (x; y); b") == ["a (x; y)", "b"] and clauses("") == []
    assumptions = load_settings().assumptions
    rows = [json.loads(line) for line in (DATA / "public.jsonl").read_text(encoding="utf-8").splitlines()]
    got = {x[0]: x for x in capped_rows(rows, assumptions)}
    # LitGPT's config hub: Alpaca2k cut at 512 tokens (config_hub/finetune/*/qlora.yaml max_seq_length 512)
    row = next(r for r in rows if r["id"] == "M072")
    assert row["excluded"].startswith("sequence length not exact ('512'; Alpaca2k")
    plain = {**row, "excluded": None}
    estimate = estimate_or_reason(plain, assumptions)[0]
    measured = tensor_bytes(plain, assumptions.cuda_context_bytes)
    assert got["M072"][2:5] == ("qlora", 512, round((estimate - measured) / measured * 100, 1))
    assert "bitsandbytes 0.42.0" in got["M072"][5]
    # trust C or a LoRA on the head as well: another reason, not listed
    assert "M079" not in got and "M064" not in got
    committed = json.loads((DATA / "accuracy.json").read_text(encoding="utf-8"))
    assert [x["id"] for x in committed["capped"]] == list(got)


def test_public_rows_by_metric_are_the_rows_that_measured_it():
    """accuracy.json public_metrics: the compared public rows grouped by what their number measured (accuracy_rows.
    METRICS), each figure recomputed here from the rows. The pages price the allocated peak: on those rows adapter
    training is within 10% at the median and not systematically low (LoRA 10 rows, QLoRA 7)."""
    import statistics

    from generator.accuracy_rows import METRICS, estimate_or_reason, tensor_bytes
    from generator.settings import load_settings

    s = load_settings().assumptions
    committed = json.loads((DATA / "accuracy.json").read_text(encoding="utf-8"))
    groups: dict[tuple[str, str], list[float]] = {}
    for line in (DATA / "public.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        estimate, _ = estimate_or_reason(row, s)
        measured = tensor_bytes(row, s.cuda_context_bytes)
        if estimate is None or not measured:
            continue
        key = (METRICS[row["measured"]["metric"]], row["setup"]["method"])
        groups.setdefault(key, []).append((estimate - measured) / measured * 100)
    table = {(e["dataset"], e["method"]): e for e in committed["public_metrics"]}
    assert set(table) == set(groups)
    for key, errors in groups.items():
        e = table[key]
        assert e["compared"] == len(errors)
        assert abs(e["median_abs_pct"] - statistics.median(abs(x) for x in errors)) <= 0.01
        assert abs(e["mean_signed_pct"] - statistics.fmean(errors)) <= 0.01
    adapters = groups[("allocated", "lora")] + groups[("allocated", "qlora")]
    assert statistics.median(abs(x) for x in adapters) <= 10 and statistics.fmean(adapters) >= -5
    assert sum(len(v) for v in groups.values()) == sum(e["compared"] for e in committed["errors"]
                                                       if e["dataset"] == "public")
