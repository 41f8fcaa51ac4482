"""Page budgets: a model page is at most 60 kB of HTML, and at most 150 kB with the stylesheet and any
script it loads; the home page's own script and style stay small too. Checked on every page built
from the committed snapshot (each with its memory chart), and on the largest ones again with a synthetic
`memory.curve` at a 1M-token context (the longest curve, 12 points)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.pipeline import report_for_record
from generator.settings import load_settings
from generator.site import pages
from generator.site.build import run_build
from generator.site.render import render_model_page
from test_site_charts import curve_for, with_curve

HTML_BUDGET = 60_000
TOTAL_BUDGET = 150_000
SETTINGS = load_settings()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("budget") / "public"
    assert run_build(snapshot_dir=DEFAULT_SNAPSHOT_DIR, out_dir=out, strict=False, settings=SETTINGS,
                     console=Console(file=io.StringIO()), search_index=False) == 0
    return out


def _loaded(page: Path, out: Path) -> list[Path]:
    """The stylesheet and scripts a page loads (all relative: nothing comes from another host)."""
    text = page.read_text(encoding="utf-8")
    refs = re.findall(r'<link rel="stylesheet" href="([^"]+)"', text) + re.findall(r'<script[^>]* src="([^"]+)"', text)
    return [(page.parent / ref).resolve() for ref in refs]


def _weight(page: Path, out: Path) -> int:
    return page.stat().st_size + sum(p.stat().st_size for p in _loaded(page, out))


def test_every_model_page_is_within_budget(site: Path) -> None:
    model_pages = sorted(site.glob("models/*/*/index.html"))
    assert len(model_pages) > 100
    over = [(p.stat().st_size, p) for p in model_pages if p.stat().st_size > HTML_BUDGET]
    assert over == []
    heavy = [(_weight(p, site), p) for p in model_pages if _weight(p, site) > TOTAL_BUDGET]
    assert heavy == []
    for page in model_pages[:3]:
        # A model page runs one script of its own: the calculator's, which loads the rest on demand.
        assert [p.name for p in _loaded(page, site)] == ["style.css", "calc.js"]


def test_the_largest_pages_stay_within_budget_with_the_memory_chart(site: Path) -> None:
    largest = sorted(site.glob("models/*/*/index.html"), key=lambda p: p.stat().st_size)[-5:]
    css = (site / pages.STYLESHEET).stat().st_size
    for page in largest:
        model = "/".join(page.parent.relative_to(site / "models").parts)
        record = load_record(DEFAULT_SNAPSHOT_DIR, model)
        assert record is not None
        report = report_for_record(record, SETTINGS)
        html = render_model_page(with_curve(report, curve_for(report, 1 << 20)), record, SETTINGS, standalone=False)
        assert 'id="memory-chart"' in html
        size = len(html.encode("utf-8"))
        assert size <= HTML_BUDGET, (model, size)
        assert size + css <= TOTAL_BUDGET


def test_index_pages_load_little(site: Path) -> None:
    for rel in (pages.HOME, pages.HOME_BY_SIZE, pages.SEARCH):
        page = site / rel
        assets = _loaded(page, site)
        assert sum(p.stat().st_size for p in assets) < 20_000, rel
    # The search page loads Pagefind's own script only when a query is made; it is in public/ itself.
    assert "pagefind/pagefind.js" in (site / pages.SEARCH_JS).read_text(encoding="utf-8")


def _calculator_section(html: str) -> str:
    start = html.index('<section id="calculator"')
    return html[start:html.index("</section>", start) + len("</section>")]


def test_the_calculator_adds_little_to_a_page_and_its_shared_files_are_once_per_site(site: Path) -> None:
    """What one model page adds (its calculator section: the form's frame and the page's own inputs, its
    config.json) and what every page shares once (the script, site.json, the estimator's zip, Pyodide's
    runtime: fetched when the calculator is used, then cached). The figures go to test-artifacts/."""
    import json

    from generator.site import calculator

    model_pages = sorted(site.glob("models/*/*/index.html"))
    added = sorted(len(_calculator_section(p.read_text(encoding="utf-8")).encode()) for p in model_pages)
    median, largest = added[len(added) // 2], added[-1]
    assert median < 3_000 and largest < 30_000
    shared = {rel: (site / rel).stat().st_size for rel in (calculator.SCRIPT, calculator.SITE_JSON)}
    shared.update({p.relative_to(site).as_posix(): p.stat().st_size
                   for p in (site / calculator.CALC_DIR).glob("estimator-*.zip")})
    shared.update({p.relative_to(site).as_posix(): p.stat().st_size
                   for p in sorted((site / calculator.RUNTIME_DIR).glob("*"))})
    # site.json is mostly the setup flags' help (the form's labels): 12 kB until --offload-checkpoints and --images,
    # 13 kB until ms-swift's two recipes (each recipe's summary is its option's label), 14 kB until --tower-adapters
    # and the recipes that freeze the towers, 15 kB with vLLM's per-GPU defaults among the assumptions
    assert shared[calculator.SCRIPT] < 12_000 and shared[calculator.SITE_JSON] < 15_500
    # the estimator's zip: 313 kB once the families cover 99% of transformers' language-model classes (it was 300),
    # 340 kB with the PCIe bound of offload setups and expert parallelism (memory/host_link.py, fsdp+ep), 348 kB with
    # eager attention's backward (stages.Branch, attention.eager_backward_bytes) and job_options.py, 356 kB with the
    # Mamba mixers' torch scans (memory/recurrence.py, Job.scan), 360 kB with the delta rules' and RecurrentGemma's
    # loops (recurrence.delta_rule_bytes, kda_bytes, rglru_bytes) and memory/ends.py, 372 kB with LitGPT's own
    # model (frameworks.framework_model, framework_layer_bytes), 376 kB with torchtune's (its loss, RoPE caches and NF4
    # decoding in recipes.py), a frozen MLP's backward and peft's default targets (lora.PEFT_DEFAULT_TARGETS), 380 kB
    # with Gemma 4's vision tower, T5's dropouts and position-bias masks (memory/dropouts.py) and custom code's names,
    # 384 kB with Unsloth's offloaded checkpoints, LLaMA-Factory's recipes, images per sample and frameworks.py,
    # 388 kB with Llama 4's every-expert MoE (families/every_expert_moe.py, memory/experts.py), 392 kB with the
    # forward's end (job_result.py) and ms-swift's recipes, 396 kB with eager attention's forward locals
    # (attention.eager_forward_excess, F57) and the forward end's lora_B tensors and model locals (F58), 400 kB with
    # frozen routed experts' moments (experts.routed_transient_bytes, F61), 404 kB with a checkpointed
    # RecurrentGemma's kept recomputation (F66), a parallel MoE's first layer (F67) and bitsandbytes' towers (F69),
    # 416 kB with the towers' Linears and their adapters (families/tower_linears.py, memory/tower_adapters.py, F73)
    # and what a frozen tower keeps (F74), 418 kB with the towers' norm copies, masks and peft's refusal of a wrapped
    # tower Linear (tower_adapters.py, F76), 422 kB with a tower's working set without gradients and generate's
    # tower phase (families/tower_inference.py, generate.tower_phase, F78), 426 kB with the batch's pairs of samples
    # (stages.at_batch) and the recurrent mixers' prefill on their torch paths (memory/scan_prefill.py, F79), 427 kB
    # with the parameters a class keeps in fp32 (Part.params32, F82), 428 kB with a quantised repository name's
    # warning (checks.QUANTISED_NAME_TOKENS) and MLA's latent cache whole on every TP rank (setups.kv_latent_share),
    # 429 kB with the plans' roofline hours and the expert tensors' adapters per step (layer_terms.expert_adapters),
    # 430 kB with the encoder's final norm placed where it runs in the structure table (graph/structure.py),
    # 432 kB with what each GPU keeps however many share a job (setups.plan_floors, Sharding.floor), 436 kB with the
    # context's rope reach (sequence_limits), the size keys read at their defaults and the site's jobs as recipes,
    # 438 kB with the routed experts' served bytes (serve_weights) and a quantised base's packed units (storage),
    # 440 kB with a tied head's copy on a pipeline's last stage (Profile.tied_copy) and the prefill chunk's cap,
    # 442 kB with ZeRO-3's gradient partition and its step's sub-groups (sharding.py), 444 kB with the plans'
    # accumulating jobs (memory/peak_table.py) and vLLM's float16 refusals (checks.check_half_precision_serving),
    # 446 kB with DeepSpeed's reduce bucket, the served caches held to vLLM's layout (F83) and float32 serving where
    # vLLM refuses float16, 447 kB with the GPUs vLLM has no sparse-attention kernel on
    # (vllm_support.serving_scale), 448 kB with the adapters' state paged AdamW leaves unpaged
    # (lora.PAGED_MIN_ELEMENTS),
    # 456 kB with vLLM's startup run at each GPU's defaults and dtype, and its sampler's rows past max_num_seqs
    # (memory/vllm_server.py, card_plans.py), 458 kB with NCCL's buffers on each GPU of several (peak_table.py) and
    # the words for how a card holds a multi-GPU peak (format.held_words), 459 kB with the quantisations vLLM
    # refuses below a compute capability, 461 kB with its refusals by the config's quant_method and float32
    # activations, and its deprecations (vllm_support.py), 462 kB with the pipeline's hand-off buffer and cut
    # (memory/pipeline.py) and the one process of HF generate's pipeline (parallel.ranks), 465 kB with vLLM's own cut
    # of the card table's serving split and its towers on every stage (splits.engine_cut, stages.ServingStages), the
    # stages' own layers (pipeline._shares) and compressed-tensors' schemes (vllm_support.quant_capability, sparse24),
    # 469 kB with those schemes read as QuantizationArgs reads them (quant_schemes.py), the training cut on each
    # stage's own bytes (pipeline._balanced_counts) and ModelOpt's formats (config/quantization.py MODELOPT,
    # storage._modelopt_elements), 474 kB with ModelOpt's ignore lists, MIXED_PRECISION and vLLM's refusals of its
    # configs (config/modelopt.py, memory/stored_formats.py, vllm_support.modelopt_refusal) and FP8 KV caches, 477 kB
    # with hf_quant_config.json's producer form as vLLM reads it (modelopt.produced_by_modelopt, quant_method_of),
    # 478 kB with each pipeline stage's recomputed layer (Phase.stage_whole), 482 kB with each stage's ends and own
    # layers' activations (Phase.embed_activations, SingleGpuJob.layer_activations), transformers 4's nn.Linear
    # experts (storage.LINEAR_EXPERTS_V4) and the classes that cannot checkpoint (NO_GRADIENT_CHECKPOINTING, kinds),
    # 485 kB with the passes of a recurrence (Spec.no_grad, layer_terms.skipped_layers, F95), 490 kB with Inkling's
    # layers and loop (families/inkling.py, F97) and the grouped-experts table (GROUPED_MM_EXPERTS, experts.grouped,
    # F98), 495 kB with local attention (Part.keys, long_document.py's hooks, F100) and every family's LoRA target
    # names (memory/target_names.py), 499 kB with T5's position biases and nn.Linear experts (F101). Since then
    # the zip holds each module with its comments and docstrings blanked (site/calculator.browser_source): the
    # same sources make 307 kB
    assert sum(v for k, v in shared.items() if k.endswith(".zip") and "estimator-" in k) < 320_000
    assert sum(shared.values()) < 16_000_000  # Pyodide's runtime is most of it (the wasm: 9.6 MB)
    artifacts = Path(__file__).resolve().parents[1] / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "calculator-bytes.json").write_text(json.dumps(
        {"per_page_section_bytes": {"median": median, "largest": largest, "smallest": added[0]},
         "largest_page_bytes": max(p.stat().st_size for p in model_pages),
         "shared_bytes": shared, "shared_total": sum(shared.values())}, indent=1) + "\n")


def test_the_accuracy_page_is_within_its_budget(site: Path) -> None:
    """/accuracy/ lists every setup, family, miss and replayed setup in tables of its own: 118 kB with the allocator's
    section, 124 kB with the fit table's tight column and expandable segments. Past 200 kB it needs splitting."""
    page = site / pages.ACCURACY
    assert page.stat().st_size < 200_000
    assert [p.name for p in _loaded(page, site)] == ["style.css"]
