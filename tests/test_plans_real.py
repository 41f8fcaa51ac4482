"""Multi-GPU memory and plans on real snapshot models (issue 14 item 6): ZeRO-2 / ZeRO-3 / FSDP model states per
GPU of the estimator's own jobs against DeepSpeed's estimator formulas, the per-GPU peak never rising with more
GPUs under zero3, fsdp or tp (ddp never falling), the plan search agreeing with a walk over every count and setup,
offload only as a last resort within the host's memory, every model having a plan or a named reason, and decode
speeds under the bandwidth bound."""

from __future__ import annotations

import contextlib
import dataclasses
from functools import cache

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.errors import TraceError
from generator.estimator import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job_options import Job, site_job
from generator.estimator.memory.kinds import GPU_COUNTS, MAX_GPUS, kinds
from generator.estimator.memory.parallel import ParallelError, Setup, accumulating_phases, per_gpu
from generator.estimator.memory.plans import first_fit
from generator.estimator.memory.profile import kv_bytes_per_sequence, serve_profile
from generator.estimator.memory.serve_weights import serve_weight_bytes
from generator.estimator.memory.sharding import GPUS_PER_NODE
from generator.estimator.memory.vllm_server import reference_server
from generator.estimator.normalise import normalise
from generator.estimator.serving_speed import decode_upper_bound
from generator.estimator.memory.peak_table import cached_peak
from generator.estimator.setups import (
    kv_latent_share,
    model_shape,
    offers,
    serving_jobs,
    serving_model,
    training_job,
    training_nccl_bytes,
)
from generator.settings import load_settings
from tests.conftest import snapshot_configs

SETTINGS = load_settings()
S = SETTINGS.assumptions
CONFIGS = {rid: (cfg, ck) for rid, cfg, ck in snapshot_configs()}


@cache
def _model(model_id: str):
    cfg, _ = CONFIGS[model_id]
    a = normalise(cfg, model_id)
    return a, build_graph(a)


def _estimable() -> list[str]:
    out = []
    for rid in sorted(CONFIGS):
        try:
            a, g = _model(rid)
        except TraceError:
            continue
        if g.spec.kind == "decoder":
            out.append(rid)
    return out


MODELS = _estimable()


@cache
def site_jobs(model_id: str):
    """The site's jobs for one model, built as estimate() builds them."""
    a, g = _model(model_id)
    shape = model_shape(a, g)
    t = min(S.train_tokens, a.max_context)
    serve_tokens = min(S.serve_tokens, a.max_context)
    weights = serve_weight_bytes(a, S)([*g.spec.embed, *(p for b in g.spec.blocks for p in b.parts), *g.spec.head])
    profile = serve_profile(a, g, S, serve_tokens)
    return {
        "full": training_job(a, g, S, Job(tokens=t), shape, model_id),
        "lora": training_job(a, g, S, Job(method="lora", lora_rank=S.lora_rank, tokens=t), shape, model_id),
        "qlora": training_job(a, g, S, site_job("qlora", S.lora_rank, tokens=t), shape, model_id),
        # vLLM's serving jobs at its reference defaults: the startup's phases, its pipeline cut (review of F87)
        **serving_jobs(g, S, profile, reference_server(S), weights, shape, serve_tokens),
    }


def _metric(method: str, parts: tuple[int, ...]) -> int:
    return sum(parts) - (parts[2] if method == "qlora" else 0)  # as estimate._setups: paged AdamW's state


# --- ZeRO-2 / ZeRO-3 / FSDP against DeepSpeed's formulas, on the estimator's own job -----------------------------
QWEN8 = "Qwen/Qwen3-8B"


def _step_only(job):
    """The job with only its optimizer step (all gradients and state live, no gathered unit)."""
    step = tuple(ph for ph in job.phases_ckpt if ph.name == "optimizer step")
    return dataclasses.replace(job, phases=step, phases_ckpt=step)


def _computing_only(job):
    phases = tuple(ph for ph in job.phases_ckpt if ph.computing)
    return dataclasses.replace(job, phases=phases, phases_ckpt=phases)


@pytest.mark.parametrize("n", [2, 8, 64])
def test_zero_and_fsdp_model_states_of_a_real_job_follow_deepspeed(n):
    """DeepSpeed estimate_zero2_model_states_mem_needs: 2 P + 18 P / N, and estimate_zero3_model_states_mem_needs:
    4 x largest layer + 18 P / N (18 = 2 fp16 params + 4 fp32 gradients + 4 fp32 master + 8 Adam; ZeRO-2's 18
    holds fp16 gradients where ZeRO-3's holds the fp16 params). The estimator's AMP job trains fp32 parameters,
    so its gradients are fp32 only (4 B, no fp16 copy): ZeRO-2 holds 2 P + 16 P / N, ZeRO-3 18 P / N (the fp16
    params sharded) at the optimizer step, FSDP2 16 P / N (fp32 params sharded in their own dtype, no 16-bit copy);
    while a layer computes, ZeRO-3 without prefetch adds DeepSpeed's 4 x largest layer (its params gathered and
    its gradients, 2 B each)."""
    job = site_jobs(QWEN8)["full"]
    p, unit = job.params_total, job.unit_params
    assert p == 8_190_735_360

    def states(strategy: str, j=None, prefetch: bool = True) -> int:
        return per_gpu(j or _step_only(job), Setup(strategy, n, True, prefetch=prefetch)).model_states_bytes

    assert states("zero2") == pytest.approx(2 * p + 16 * p / n, abs=2)
    # ZeRO-3's step: its 16-bit gradient partition and one sub-group's fp32 gradients (1e9 elements at most)
    assert states("zero3") == pytest.approx(16 * p / n + 4 * min(p / n, 1e9), abs=3)
    assert states("fsdp") == pytest.approx(16 * p / n, abs=2)
    # computing phases: ZeRO-3's 16-bit gradient partition (allocated at init, whatever the phase has made); the
    # gathered module and the layer's gradient on top of the shards. DeepSpeed gathers module by module: the largest
    # is the LM head (151,936 x 4,096 = 622 M params, a layer 189 M), gathered at the loss in place of a layer
    head = job.last_stage_params - 4096  # less the final norm
    assert head == 151_936 * 4096 and head > 2 * unit
    computing = _computing_only(job)
    for ph in computing.phases:
        one = dataclasses.replace(computing, phases=(ph,), phases_ckpt=(ph,))
        sharded = (6 * p + 2 * p + 8 * p) / n
        assert states("zero3", one, prefetch=False) == pytest.approx(sharded + 2 * (job.last_stage_params + unit),
                                                                     abs=3)
        # with the next unit prefetched: the head and a layer
        assert states("zero3", one) == pytest.approx(sharded + 2 * (job.last_stage_params + unit) + 2 * unit, abs=3)
        # DeepSpeed's estimate (all gradients live; 4 B a parameter of its largest module) bounds every phase
        assert states("zero3", one, prefetch=False) <= 18 * p / n + 4 * job.last_stage_params + 3


def test_the_exact_setup_reports_those_states_per_gpu():
    cfg, ck = CONFIGS[QWEN8]
    r = estimate(cfg, model_id=QWEN8, assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus,
                 job=Job(grad_ckpt=True, tokens=2048), setup=Setup("zero3", 8, True))
    parts, p = dict(r.memory.breakdown), r.params.graph
    assert r.memory.peak_phase == "optimizer step" and sum(parts.values()) == r.memory.peak_bytes
    # the gradients: the 16-bit partition and one sub-group of 1e9 fp32 gradients (p / 8 is more than 1e9)
    assert p // 8 > 1_000_000_000
    assert (parts["weights"], parts["gradients"], parts["optimizer_state"]) == (6 * p // 8, 2 * p // 8 + 4 * 10**9,
                                                                               8 * p // 8)
    assert dict(r.memory.job)["strategy"] == "zero3" and dict(r.memory.job)["gpus"] == 8


def test_tensor_parallel_over_4_puts_about_a_quarter_of_the_weights_on_each():
    job = site_jobs(QWEN8)["serve"]
    one = dict(per_gpu(job, Setup()).breakdown)["weights"]
    four = dict(per_gpu(job, Setup("tp", 4)).breakdown)["weights"]
    assert one / 4 <= four <= one / 4 * 1.01  # norms stay whole on every rank


# --- properties on real models -------------------------------------------------------------------------------------
COUNTS = [n for n in GPU_COUNTS if n <= 128]


@hsettings(max_examples=40, deadline=None)
@given(model=st.sampled_from(MODELS), method=st.sampled_from(["full", "lora", "qlora", "serve"]),
       strategy=st.sampled_from(["zero3", "fsdp", "tp", "zero2"]), ckpt=st.booleans(),
       pair=st.lists(st.sampled_from(COUNTS[1:]), min_size=2, max_size=2, unique=True))
def test_the_per_gpu_peak_never_rises_with_more_gpus(model, method, strategy, ckpt, pair):
    job = site_jobs(model)[method]
    if method == "serve" and strategy != "tp":
        strategy = "pp"
    few, many = sorted(pair)
    ckpt = ckpt and method not in ("serve",) or method == "qlora"
    try:
        a = per_gpu(job, Setup(strategy, few, ckpt)).per_gpu_peak_bytes
        b = per_gpu(job, Setup(strategy, many, ckpt)).per_gpu_peak_bytes
    except ParallelError:
        return  # heads that do not split, more stages than layers
    assert b <= a


@hsettings(max_examples=25, deadline=None)
@given(model=st.sampled_from(MODELS), method=st.sampled_from(["full", "lora", "qlora"]),
       n=st.sampled_from(COUNTS[1:]))
def test_ddp_never_falls_below_one_gpu(model, method, n):
    job = site_jobs(model)[method]
    ckpt = method == "qlora"
    one = per_gpu(job, Setup("single", 1, ckpt)).per_gpu_peak_bytes
    assert per_gpu(job, Setup("ddp", n, ckpt)).per_gpu_peak_bytes >= one


@pytest.mark.parametrize("job, weight_bytes", [
    (Job(method="lora", precision="amp", tokens=512), 4),  # peft's default: fp32 adapters under autocast
    (Job(method="lora", precision="amp", adapter_dtype="bf16", tokens=512), 2),  # --adapter-dtype bf16
    (Job(method="lora", precision="bf16", tokens=512), 4),  # peft's default on a bf16 base without autocast too
    (Job(method="lora", precision="bf16", adapter_dtype="bf16", tokens=512), 2),  # LitGPT's, torchtune's
    (Job(tokens=512), 4),  # full AMP: the fp32 master
    (Job(precision="bf16", tokens=512), 2),
])
def test_the_sharded_job_holds_its_trainable_weights_as_its_phases_do(job, weight_bytes):
    """The SingleGpuJob that ZeRO / FSDP share out says the bytes per trainable parameter its phases priced
    (job._training's), which the master copy and the 16-bit copy of ZeRO follow (parallel._master_excess)."""
    a, g = _model(MODELS[0])
    single = training_job(a, g, S, job, model_shape(a, g), MODELS[0])
    assert single.trainable_weight_bytes == weight_bytes and single.compute_bytes == 2
    assert max(ph.gradients for ph in single.phases) == weight_bytes * single.params_trainable


def _walk(probe, method: str, budget: int, host: int):
    """The plan by definition: every count in turn, every setup in preference order; offload only after no count
    runs without it, and only within the host's memory."""
    for offload in (False, True):
        for i in range(len(GPU_COUNTS)):
            for kind in kinds(method, offload):
                if not kind.first <= i <= kind.last:
                    continue
                try:
                    peak, cpu = probe(method, kind.setup(i))
                except ParallelError:
                    continue
                if peak <= budget and (not offload or cpu <= host):
                    return kind.setup(i), peak
    return None


@hsettings(max_examples=25, deadline=None)
@given(model=st.sampled_from(MODELS), method=st.sampled_from(["full", "lora", "qlora", "serve"]))
def test_the_plan_search_finds_what_a_walk_over_every_count_finds(model, method):
    """With and without the bounds the estimate passes (the first count a ZeRO / FSDP kind can fit at), the
    training jobs accumulating below the reference batch (as the estimate's probe) or not, with NCCL's buffers on
    each GPU of several (setups.training_nccl_bytes) or without, on every card's budget and on budgets at the step
    NCCL's buffers make from one GPU to two (ZeRO-2's optimizer offload on one GPU and on two, each a byte either
    side), where a kind spanning both counts would not be monotone (review of F86)."""
    nccl = training_nccl_bytes(S)  # NCCL's buffers on each GPU of several: the bound takes them off the budget
    for bounded, batch, outside in ((False, 1, {}), (True, 1, {}), (True, 1, nccl), (False, S.job_batch, nccl),
                                    (True, S.job_batch, nccl)):
        # the estimate's figure: the parts' sum, for every method its bound serves (estimate._SUMMED)
        probe = cached_peak(site_jobs(model), lambda m, parts: sum(parts), ("full", "lora", "qlora", "serve"), batch,
                            outside)
        bound = probe.first_count if bounded else None
        budgets = [offer.budget_bytes for offer in offers(SETTINGS.cards, SETTINGS.gpus, S)]
        if method != "serve":
            for n in (1, 2):
                with contextlib.suppress(ParallelError):
                    step = probe(method, Setup("zero2", n, True, "optimizer"))[0]
                    budgets += [step - 1, step, step + 1]
        for budget in budgets:
            want = _walk(probe, method, budget, S.host_memory_bytes_per_node)
            got = first_fit(probe, method, kinds(method), budget, bound=bound)
            if got is None and method != "serve":
                got = first_fit(probe, method, kinds(method, offload=True), budget, S.host_memory_bytes_per_node,
                                bound=bound)
            assert got == want, (model, method, budget, bounded, batch, outside)


def test_fewer_gpus_than_the_jobs_batch_accumulate_every_gradient():
    """The setups price the reference job (batch 32, one sample a GPU): on fewer than 32 GPUs each accumulates
    gradients over micro-batches, every one held beside the next micro-batch's activations (F27); FSDP's no_sync
    holds them unsharded, ZeRO reduces each micro-batch into its shards; from 32 GPUs on, no accumulation."""
    jobs = site_jobs(QWEN8)
    full = jobs["full"]
    grads = full.grad_bytes * full.params_trainable
    plain = cached_peak(jobs, _metric, ("full", "lora", "serve"))
    accumulating = cached_peak(jobs, _metric, ("full", "lora", "serve"), S.job_batch)
    one = Setup("single", 1, True)
    held = dataclasses.replace(full, phases_ckpt=accumulating_phases(full.phases_ckpt, grads))
    assert accumulating("full", one)[0] == _metric("full", tuple(dict(per_gpu(held, one).breakdown).values()))
    assert accumulating("full", one)[0] >= plain("full", one)[0]  # its step holds every gradient anyway
    fsdp8, zero2_8 = Setup("fsdp", 8, True), Setup("zero2", 8, True)
    assert accumulating("full", fsdp8)[0] - plain("full", fsdp8)[0] >= grads - grads // 8  # unsharded, not 1/8
    assert 0 < accumulating("full", zero2_8)[0] - plain("full", zero2_8)[0] <= grads // 8 + 8
    for n in (32, 64):
        for strategy in ("zero2", "zero3", "fsdp"):
            setup = Setup(strategy, n, True)
            assert accumulating("full", setup) == plain("full", setup), (strategy, n)
    assert accumulating("serve", Setup("tp", 2)) == plain("serve", Setup("tp", 2))


# --- the Reports of every snapshot model ---------------------------------------------------------------------------
@cache
def _report(model_id: str):
    cfg, ck = CONFIGS[model_id]
    return estimate(cfg, model_id=model_id, assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus,
                    checkpoint_params=ck)


def test_every_model_has_a_plan_per_method_or_a_named_reason():
    for model in MODELS:
        r = _report(model)
        why = {u.method: u.reason for u in r.plans_unreachable}
        for method in ("full", "lora", "qlora", "serve"):
            fitting = [p for p in r.plans if p.method == method and p.fits]
            assert bool(fitting) != bool(why.get(method)), (model, method)
            if fitting:
                assert any(p.smallest for p in fitting) and any(p.cheapest for p in fitting), (model, method)


def test_offload_is_a_last_resort_within_the_hosts_memory():
    for model in MODELS:
        r = _report(model)
        jobs = site_jobs(model)
        for p in r.plans:
            if not p.fits or p.offload == "none":
                continue
            # nothing without offload runs on this card up to 512 GPUs (each beside NCCL's buffers), and the
            # offload fits a node's memory
            budget = next(c.budget_bytes for c in r.memory.cards if c.name == p.gpu)
            for kind in kinds(p.method):
                if kind.last == len(GPU_COUNTS) - 1:
                    setup = kind.setup(kind.last)
                    held = per_gpu(jobs[p.method], setup).per_gpu_peak_bytes + training_nccl_bytes(S)[p.method]
                    assert held > budget or p.method == "qlora"
            setup = Setup(p.strategy, p.gpus, p.grad_ckpt, p.offload)
            assert per_gpu(jobs[p.method], setup).cpu_bytes_per_node <= S.host_memory_bytes_per_node


def test_deepseek_v3_full_fine_tune_needs_no_terabytes_of_host_memory():
    r = _report("deepseek-ai/DeepSeek-V3")
    full = [p for p in r.plans if p.method == "full" and p.fits]
    assert full and all(p.offload == "none" or p.gpus >= 8 for p in full)
    assert [u.method for u in r.plans_unreachable] == ["qlora"]  # an FP8 checkpoint: QLoRA does not apply
    assert all(p.gpus <= MAX_GPUS for p in r.plans)


@pytest.mark.parametrize("model", ["Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3",
                                   "meta-llama/Llama-3.1-70B", "openai-community/gpt2"])
def test_decode_speed_stays_under_the_bandwidth_bound(model):
    r = _report(model)
    a, g = _model(model)
    m = serving_model(a, g, S, r.memory.serve_weight_bytes, kv_bytes_per_sequence(a, S, r.memory.serve_tokens),
                      r.memory.serve_tokens, kv_latent_share(g))
    by_name = {gpu.name: gpu for gpu in SETTINGS.gpus.values()}
    assert r.serving
    for row in r.serving:
        width = min(row.gpus, GPUS_PER_NODE) if row.strategy == "tp+pp" else row.gpus
        bound = decode_upper_bound(m, width, by_name[row.gpu_model].bandwidth_gb_per_s)
        assert 0 < row.decode_tokens_per_s <= bound
        assert row.max_concurrency >= 1


@pytest.mark.parametrize("model", ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-70B",
                                   "Qwen/Qwen3-30B-A3B", "mistralai/Magistral-Small-2509"])
def test_qlora_max_batch_per_card_is_the_largest_batch_of_the_qlora_job_that_fits(model):
    """memory.cards[].train_qlora_max_batch against the QLoRA job run at that batch and one more (job.py prices
    the batch; the paged optimizer's state is out of the allocator's count)."""
    r = _report(model)
    a, g = _model(model)
    shape = model_shape(a, g)
    t = min(S.train_tokens, a.max_context)

    def peak(batch: int, accumulating: bool = False) -> int:
        job = training_job(a, g, S, site_job("qlora", S.lora_rank, tokens=t, batch=batch), shape,
                           model, both=False)
        if accumulating:  # the setups' one GPU accumulates the reference job's batch, every gradient held
            job = dataclasses.replace(job, phases=accumulating_phases(job.phases, job.grad_bytes * job.params_trainable))
        return _metric("qlora", tuple(dict(per_gpu(job, Setup()).breakdown).values()))

    plans = {p.gpu: p for p in r.plans if p.method == "qlora"}
    for card in r.memory.cards:
        b = card.train_qlora_max_batch
        if b:
            assert peak(b) <= card.budget_bytes < peak(b + 1), (model, card.name, b)
        else:
            assert peak(1) > card.budget_bytes
        one = plans[card.name].gpus == 1 and plans[card.name].fits
        assert one == (peak(1, accumulating=True) <= card.budget_bytes), (model, card.name)
        assert b > 0 or not one, (model, card.name)


def test_a_checkpoint_that_quantises_its_experts_alone_is_read_at_two_costs_per_parameter():
    """A page review found gpt-oss-20b decoding at 94.4 tokens/s on an L4: every parameter was read at the model's
    average 0.66 bytes, where its attention, router and head are bf16 and its experts MXFP4 (2 weights a byte and a
    scale per 32). The routed experts are read at their own bytes, the rest at theirs (setups.serving_model)."""
    a, g = _model("openai/gpt-oss-20b")
    r = _report("openai/gpt-oss-20b")
    m = serving_model(a, g, S, r.memory.serve_weight_bytes, kv_bytes_per_sequence(a, S, r.memory.serve_tokens),
                      r.memory.serve_tokens, kv_latent_share(g))
    experts = 24 * 32 * (2880 * 5760 + 2880 * 2880)  # 24 layers of 32 experts: gate_up and down projections
    # the routed share counts the experts' biases too (24 x 32 x 8,640 params), at the matrices' rate: 3.5 MB
    assert m.expert_weight_bytes == pytest.approx(experts // 2 + experts // 32, rel=1e-3)
    assert m.dense_weight_bytes == pytest.approx(2 * (g.params_total - experts - g.params_embedding), rel=1e-2)
    l4 = next(s for s in r.serving if s.gpu == "L4 24 GB")
    assert 55 < l4.decode_tokens_per_s < 65  # 300 GB/s x 0.78 over about 3.8 GB a token
    # a dense bf16 model reads every weight but the embedding at 2 bytes, as before
    a, g = _model("meta-llama/Llama-3.1-8B")
    r = _report("meta-llama/Llama-3.1-8B")
    m = serving_model(a, g, S, r.memory.serve_weight_bytes, 0, r.memory.serve_tokens, 0.0)
    assert (m.dense_weight_bytes, m.expert_weight_bytes) == (2 * (g.params_total - g.params_embedding), 0)
