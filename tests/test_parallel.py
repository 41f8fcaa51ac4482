"""estimator.parallel, plans and serving_speed: per-GPU memory against DeepSpeed's published estimators and the
measured FSDP2 / DDP runs (data/measurements/parallel-cpu.json), monotonicity in the GPU count, the plan search's
choices and marks, and decode speed under its bandwidth bound."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.errors import TraceError
from generator.estimator import estimate
from generator.estimator.memory.kinds import MAX_GPUS
from generator.estimator.memory.parallel import ParallelError, Phase, Setup, SingleGpuJob, per_gpu
from generator.estimator.memory.plans import GpuOffer, search_plans
from generator.estimator.memory.sharding import ZERO_REDUCE_BUCKET, sharded
from generator.estimator.serving_speed import ServingModel, decode_upper_bound, serving_speed
from tests.conftest import ROOT, snapshot_configs

# Llama-2-7B's shape: 6,738,415,616 params, 32 layers of 202,383,360, embeddings and head 131,072,000 each.
P, LAYER, EMBED, HEAD, LAYERS = 6_738_415_616, 202_383_360, 131_072_000, 131_076_096, 32


def _job(phases, *, w=4, g=4, c=2, method="full", trainable=P, unit=LAYER, heads=32, kv=32, ckpt=()):
    return SingleGpuJob(method, tuple(phases), P, trainable, c, w, g, LAYERS, unit, EMBED, HEAD,
                        tp_replicated_params=LAYERS * 2 * 4096 + 4096, kv_proj_params=LAYERS * 2 * 4096 * 4096,
                        heads=heads, kv_heads=kv, phases_ckpt=tuple(ckpt))


def _deepspeed_job(computing: bool, grads: int = 6) -> SingleGpuJob:
    """DeepSpeed's byte split, all live in one phase. ZeRO-2 (stage_1_and_2.py comment): 2 fp16 params; 2 fp16 + 4
    fp32 gradients; 4 fp32 master + 8 Adam states. ZeRO-3's 18 (stage3.py) holds no persistent 16-bit gradient
    (its largest layer's 2 B are): 2 fp16 params + 4 fp32 gradients + 4 master + 8 Adam."""
    return _job([Phase("all", weights=2 * P, gradients=grads * P, optimizer_state=12 * P, computing=computing)],
                w=2, g=grads)


def _amp_job(acts: int = 10 * 2**30) -> SingleGpuJob:
    """The project's AMP full fine-tune phases (job.py): loss backward, then the AdamW step."""
    return _job([Phase("loss", weights=4 * P, optimizer_state=8 * P, activations=acts, logits=2**30,
                       overhead_weights=2 * P, overhead_fixed=2**29),
                 Phase("optimizer step", weights=4 * P, gradients=4 * P, optimizer_state=8 * P, overhead_step=4 * P,
                       overhead_fixed=2**29, computing=False)],
                ckpt=[Phase("recompute", weights=4 * P, optimizer_state=8 * P, activations=acts // 20,
                            overhead_weights=2 * P, overhead_fixed=2**29),
                      Phase("optimizer step", weights=4 * P, gradients=4 * P, optimizer_state=8 * P,
                            overhead_step=4 * P, overhead_fixed=2**29, computing=False)])


@pytest.mark.parametrize("n", [2, 8, 64])
def test_zero2_model_states_match_deepspeed(n):
    # deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs(cpu_offload=False):
    # gpu_mem = 2 P + int(18 P / N); at N = 8: 2 x 6,738,415,616 + 18 x 6,738,415,616 / 8 = 28,638,266,368 B.
    r = per_gpu(_deepspeed_job(False), Setup("zero2", n))
    assert r.model_states_bytes == 2 * P + 18 * P // n
    if n == 8:
        assert r.model_states_bytes == 28_638_266_368
    # cpu_offload=True: gpu_mem = 2 P
    assert per_gpu(_deepspeed_job(False), Setup("zero2", n, offload="optimizer")).model_states_bytes == 2 * P


@pytest.mark.parametrize("n", [2, 8, 64])
def test_zero3_model_states_match_deepspeed(n):
    # deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs: largest_layer_memory = 4 x largest
    # layer (2 B gathered params + 2 B its gradients); no offload: + 18 P / N; optimizer offload: + 2 P / N;
    # params offload too: the largest layer only.
    # While layers compute, DeepSpeed's own allocations hold 2 B of gradient a parameter, not the estimator's 4: the
    # flat gradient partition DeepSpeedZeroOptimizer_Stage3 allocates at init in the gradient accumulation dtype
    # (the 16-bit model dtype under ZeRO: DeepSpeedEngine.get_data_types), so 16 P / N; the estimator's 18 P / N
    # bounds it. N = 8: 4 x 202,383,360 + 16 x 6,738,415,616 / 8 = 809,533,440 + 13,476,831,232.
    job = _deepspeed_job(True, grads=4)
    no_prefetch = per_gpu(job, Setup("zero3", n, prefetch=False))
    assert no_prefetch.model_states_bytes == pytest.approx(4 * LAYER + 16 * P / n, abs=4)
    assert no_prefetch.model_states_bytes <= 4 * LAYER + 18 * P / n
    if n == 8:
        assert no_prefetch.model_states_bytes == pytest.approx(14_286_364_672, abs=4)
    # with the optimizer offloaded the partition is on the CPU (stage3.py: device=self.device)
    assert per_gpu(job, Setup("zero3", n, offload="optimizer", prefetch=False)).model_states_bytes == \
        pytest.approx(4 * LAYER + 2 * P / n, abs=4)
    assert per_gpu(job, Setup("zero3", n, offload="params", prefetch=False)).model_states_bytes == 4 * LAYER
    # with the next unit prefetched (FSDP2's default, DeepSpeed's prefetch bucket): one more gathered layer
    assert per_gpu(job, Setup("zero3", n)).model_states_bytes == no_prefetch.model_states_bytes + 2 * LAYER


@pytest.mark.parametrize("n", [2, 8, 64])
def test_fsdp_and_zero3_states_are_16_to_18_bytes_per_param_over_n_plus_the_gathered_units(n):
    # AMP accounting (fp32 master 4 + fp32 grads 4 + Adam 8 = 16 B): FSDP2 shards them (16 P / N); ZeRO-3 adds its
    # 16-bit param shard (18 P / N). Both add the computed and prefetched layers (2 x 2 B) and one reduce-scatter
    # input (2 B); FSDP2 also the root (embeddings + head, not resharded after forward).
    job = _job([Phase("backward", weights=4 * P, gradients=4 * P, optimizer_state=8 * P)])
    fsdp = per_gpu(job, Setup("fsdp", n)).model_states_bytes
    zero3 = per_gpu(job, Setup("zero3", n)).model_states_bytes
    assert fsdp == pytest.approx(16 * P / n + 2 * (2 * LAYER + EMBED + HEAD) + 2 * LAYER, abs=4)
    # ZeRO-3's gradients while layers compute: its 16-bit flat partition (2 P / N), not the phase's fp32 ones
    assert zero3 == pytest.approx(16 * P / n + 2 * 2 * LAYER + 2 * LAYER, abs=4)


@pytest.mark.parametrize("n", [2, 8, 64])
def test_zero3_steps_one_sub_group_of_fp32_gradients_beside_its_partition(n):
    """DeepSpeed ZeRO-3's step converts the 16-bit gradient partition to fp32 one sub-group at a time
    (stage3.py _prepare_fp32_grad_for_sub_group; sub_group_size 1e9 elements by default, runtime/zero/config.py):
    2 P / N + 4 x min(P / N, 1e9). Llama-2-7B over 2 ranks: 3.37e9 a rank, so one sub-group of 4 GB."""
    job = _job([Phase("optimizer step", weights=4 * P, gradients=4 * P, optimizer_state=8 * P, computing=False)])
    grads = dict(per_gpu(job, Setup("zero3", n)).breakdown)["gradients"]
    assert grads == pytest.approx(2 * P / n + 4 * min(P / n, 1e9), abs=2)
    assert dict(per_gpu(job, Setup("fsdp", n)).breakdown)["gradients"] == pytest.approx(4 * P / n, abs=1)
    assert dict(per_gpu(job, Setup("zero3", n, offload="optimizer")).breakdown)["gradients"] == 0


@pytest.mark.parametrize("n", [2, 8, 64])
def test_deepspeed_reduces_gradients_through_a_bucket_of_5e8_elements_whatever_the_model(n):
    """DeepSpeed copies gradients into a contiguous reduce bucket of reduce_bucket_size elements (5e8 by default,
    runtime/zero/config.py; contiguous_gradients on) in the 16-bit communication dtype, 1 GB under bf16, whatever the
    model's size or the GPU count: ZeRO-3 allocates it at init and keeps it (stage3.py: the ipg buckets' buffer),
    ZeRO-2 at the backward's first gradient hook, past the loss, and frees it at the backward's end
    (stage_1_and_2.py process_gradients -> setup_buckets, _release_ipg_buffers). FSDP reduce-scatters each unit's
    own gradient (priced apart): no bucket."""
    assert ZERO_REDUCE_BUCKET == 500_000_000
    loss = Phase("loss (logits)", weights=4 * P, optimizer_state=8 * P, activations=2**30, logits=2**30,
                 overhead_fixed=2**29)
    job = _job([loss, dataclasses.replace(loss, name="backward (recomputing a checkpointed layer)"),
                Phase("optimizer step", weights=4 * P, gradients=4 * P, optimizer_state=8 * P, overhead_step=4 * P,
                      overhead_fixed=2**29, computing=False)])
    overhead = {s: [parts[6] for _, parts in sharded(job, s).rows(n)] for s in ("zero2", "zero3", "fsdp")}
    step = 2**29 + -(-4 * P // n)  # the per-process overhead and the foreach temporary's share
    assert overhead["zero3"] == [2**29 + 10**9, 2**29 + 10**9, step + 10**9]
    assert overhead["zero2"] == [2**29, 2**29 + 10**9, step]
    assert overhead["fsdp"] == [2**29, 2**29, step]
    fp32 = dataclasses.replace(job, compute_bytes=4)  # an fp32 job communicates in fp32
    assert sharded(fp32, "zero3").rows(n)[0][1][6] == 2**29 + 2 * 10**9


def test_tp_over_4_puts_about_a_quarter_of_the_weights_on_each():
    job = _job([Phase("decode", weights=2 * P, kv_cache=2**31)], w=2, method="serve", kv=8)
    r = dict(per_gpu(job, Setup("tp", 4)).breakdown)
    assert r["weights"] == pytest.approx(2 * P / 4, rel=0.01)
    assert r["kv_cache"] == 2**31 // 4  # 8 KV heads: 2 per rank (vLLM QKVParallelLinear)
    # tp 16 over 8 KV heads: one head per rank, replicated (num_kv_head_replicas = 2): an 8th of the cache each
    assert dict(per_gpu(job, Setup("tp", 16)).breakdown)["kv_cache"] == 2**31 // 8


def test_ddp_holds_everything_plus_its_gradient_buckets():
    job = _amp_job()
    single = per_gpu(job, Setup()).per_gpu_peak_bytes
    assert per_gpu(job, Setup("ddp", 8)).per_gpu_peak_bytes == single + 4 * P


@pytest.mark.parametrize("setup, key, value", [
    (Setup("zero3", 1), "strategy", "zero3"), (Setup("fsdp", 1), "strategy", "fsdp"),
    (Setup("tp", 1), "strategy", "tp"), (Setup("pp", 1), "strategy", "pp"), (Setup("tp", 3), "gpus", 3),
    (Setup("tp", 64), "gpus", 64), (Setup("ddp", 2, offload="params"), "offload", "params"),
    (Setup("ddp", 2, offload="optimizer"), "offload", "optimizer"),
    (Setup("zero2", 2, offload="params"), "offload", "params"), (Setup("pp", 64), "gpus", 64),
    (Setup("magic", 2), "strategy", "magic"), (Setup("single", 2), "gpus", 2)])
def test_impossible_setups_name_the_key_and_value(setup, key, value):
    with pytest.raises(ParallelError) as e:
        per_gpu(_amp_job(), setup, "m")
    assert isinstance(e.value, TraceError) and e.value.key == key and e.value.value == value
    assert repr(value) in str(e.value)


def test_tp_needs_kv_heads_it_can_split_or_replicate():
    job = _job([Phase("decode", weights=2 * P)], method="serve", heads=24, kv=6)
    with pytest.raises(ParallelError, match="KV heads"):
        per_gpu(job, Setup("tp", 4))  # 4 divides 24 heads, but neither divides nor is a multiple of 6 KV heads
    per_gpu(job, Setup("tp", 2))


def test_pp_cuts_every_layer_once_and_keeps_the_ends():
    r = per_gpu(_amp_job(), Setup("pp", 5))
    assert sum(r.stage_layers) == LAYERS and min(r.stage_layers) >= 1
    assert r.per_gpu_peak_bytes < per_gpu(_amp_job(), Setup()).per_gpu_peak_bytes / 3


def test_checkpointing_and_offload_lower_the_peak_and_offload_reports_cpu_memory():
    job = _amp_job(acts=40 * 2**30)
    plain = per_gpu(job, Setup("zero3", 8)).per_gpu_peak_bytes
    ckpt = per_gpu(job, Setup("zero3", 8, grad_ckpt=True))
    off = per_gpu(job, Setup("zero3", 8, grad_ckpt=True, offload="params"))
    assert ckpt.per_gpu_peak_bytes < plain and off.per_gpu_peak_bytes < ckpt.per_gpu_peak_bytes
    assert ckpt.cpu_bytes_per_node == 0
    # W, G, O: the CPU step has no foreach temporary (DeepSpeedCPUAdam updates in place; torch keeps foreach to
    # accelerator tensors)
    assert off.cpu_bytes_per_node == pytest.approx(4 * P + 4 * P + 8 * P, rel=1e-6)


GPUS = st.sampled_from([2, 4, 8, 16, 32, 64, 128, 256, 512])


@hsettings(max_examples=60, deadline=None)
@given(a=GPUS, b=GPUS, acts=st.integers(0, 2**36), ckpt=st.booleans(),
       offload=st.sampled_from(["none", "params"]), strategy=st.sampled_from(["zero3", "fsdp"]))
def test_sharded_peak_never_rises_with_more_gpus(a, b, acts, ckpt, offload, strategy):
    lo, hi = sorted((a, b))
    job = _amp_job(acts)
    assert per_gpu(job, Setup(strategy, hi, ckpt, offload)).per_gpu_peak_bytes <= \
        per_gpu(job, Setup(strategy, lo, ckpt, offload)).per_gpu_peak_bytes


@hsettings(max_examples=40, deadline=None)
@given(a=st.sampled_from([2, 4, 8, 16, 32]), b=st.sampled_from([2, 4, 8, 16, 32]), kv=st.sampled_from([1, 4, 8, 32]),
       acts=st.integers(0, 2**36))
def test_tp_peak_never_rises_and_ddp_never_falls(a, b, kv, acts):
    lo, hi = sorted((a, b))
    job = _amp_job(acts)
    serve = _job([Phase("decode", weights=2 * P, kv_cache=acts, logits=2**20)], w=2, method="serve", kv=kv)
    assert per_gpu(serve, Setup("tp", hi)).per_gpu_peak_bytes <= per_gpu(serve, Setup("tp", lo)).per_gpu_peak_bytes
    single = per_gpu(job, Setup()).per_gpu_peak_bytes
    ddp_lo, ddp_hi = (per_gpu(job, Setup("ddp", n)).per_gpu_peak_bytes for n in (lo, hi))
    assert single <= ddp_lo <= ddp_hi


# --- measured: FSDP2 and DDP on 2 and 4 gloo ranks (tools/measure_fsdp_cpu.py) ------------------------------------
MEASURED = json.loads((ROOT / "data" / "measurements" / "parallel-cpu.json").read_text(encoding="utf-8"))
STATES = ("SHARDED_PARAM", "UNSHARDED_PARAM", "ALL_GATHER", "SHARDED_GRAD", "REDUCE_SCATTER", "OPT", "PARAM", "GRAD")


def _measured_states(cats: dict[str, int]) -> int:
    return sum(v for k, v in cats.items() if k.split(".")[-1] in STATES)


def _tiny(phase: Phase) -> SingleGpuJob:
    """The measured tiny llama, fp32 without mixed precision (compute dtype fp32: 4 B), model states only."""
    s = MEASURED["structure"]
    return SingleGpuJob("full", (phase,), s["params_total"], s["params_total"], 4, 4, 4, s["layers"],
                        s["layer_params"], s["embed_params"], s["head_params"], 0, 0, 4, 2)


@pytest.mark.parametrize("run", [r for r in MEASURED["runs"] if r["strategy"] in ("fsdp", "ddp")],
                         ids=lambda r: f"{r['strategy']}-{r['gpus']}")
def test_model_states_per_rank_match_the_measured_fsdp2_and_ddp_runs(run):
    """Tolerances. The optimizer step (sharded params, grads, AdamW state and its foreach temporary: 20 B / param
    over N): within 0.1%. DDP over the whole step (params, grads, AdamW state, foreach temporary, and the Reducer's
    bucket copy of the gradients, which the tracker files as ACT: 4 B / param): within 0.1%. Forward + backward
    (sharded params, the root and two layers gathered, one reduce-scatter input): the estimate is a lower bound
    that leaves out the gradient shards of the layers reduced before the peak; the measured figure lies between it
    and it plus every gradient shard (4 B / param / N)."""
    p = MEASURED["structure"]["params_total"]
    step = Phase("optimizer step", weights=4 * p, gradients=4 * p, optimizer_state=8 * p, overhead_step=4 * p,
                 computing=False)
    n, strategy = run["gpus"], run["strategy"]
    for rank in run["ranks"]:
        phases = rank["phase_peaks"]
        if strategy == "ddp":
            est = per_gpu(_tiny(step), Setup("ddp", n))
            measured = _measured_states(phases["whole step"]) + phases["whole step"]["_MemRefType.ACT"]
            assert measured == pytest.approx(est.model_states_bytes + dict(est.breakdown)["overhead"], rel=1e-3)
            continue
        est = per_gpu(_tiny(step), Setup("fsdp", n))
        assert _measured_states(phases["optimizer step"]) == pytest.approx(
            est.model_states_bytes + dict(est.breakdown)["overhead"], rel=1e-3)
        est = per_gpu(_tiny(Phase("backward", weights=4 * p)), Setup("fsdp", n)).model_states_bytes
        assert est <= _measured_states(phases["forward+backward"]) <= est + 4 * p / n


# --- plan search ---------------------------------------------------------------------------------------------------
CARDS = (GpuOffer("small", 24 * 10**9, 1.0, 100.0, 300.0), GpuOffer("big", 80 * 10**9, 3.0, 400.0, 2000.0),
         GpuOffer("free", 40 * 10**9, None, 200.0, 1500.0))


def _fake_peak(method, setup):
    """A model of 200 GB single-GPU whose sharded setups divide by N; ddp never shrinks; serve needs tp."""
    base = {"full": 200e9, "lora": 30e9, "qlora": 10e9, "serve": 50e9}[method]
    if setup.strategy in ("single", "ddp"):
        return int(base)
    if setup.strategy == "zero2":
        return int(base * (0.3 + 0.7 / setup.gpus))
    return int(base / setup.gpus) + (2 * 10**9 if setup.grad_ckpt else 4 * 10**9)


def test_plan_search_picks_the_fewest_gpus_and_marks_cheapest_and_smallest():
    plans, unreachable = search_plans(_fake_peak, ("full", "lora", "serve"), CARDS,
                                      {"full": 1e20, "lora": 5e19}, {"full": 0.4, "lora": 0.2})
    assert not unreachable
    by = {(p.method, p.gpu): p for p in plans}
    full_small = by[("full", "small")]
    # zero2 floors at 0.3 x 200 = 60 GB > 24 GB; fsdp with checkpointing: 200/N + 2 GB <= 24 GB first at N = 16
    assert (full_small.gpus, full_small.strategy, full_small.grad_ckpt) == (16, "fsdp", True) and full_small.fits
    # N = 2: zero2 130 GB, fsdp 102 GB; N = 4: zero2 95 GB, fsdp + checkpointing 52 GB <= 80: fewer GPUs first
    assert (by[("full", "big")].gpus, by[("full", "big")].strategy) == (4, "fsdp")
    assert by[("lora", "big")].gpus == 1 and by[("lora", "big")].strategy == "single"
    for method in ("full", "lora", "serve"):
        rows = [p for p in plans if p.method == method and p.fits]
        assert [p.gpus for p in rows if p.smallest] == [min(p.gpus for p in rows)] * sum(p.smallest for p in rows)
        key = (lambda p: p.usd_per_hour) if method == "serve" else (lambda p: p.job_usd)
        priced = [p for p in rows if key(p) is not None]
        assert [p for p in rows if p.cheapest] == [p for p in priced if key(p) == min(map(key, priced))]
    assert by[("full", "free")].job_usd is None and not by[("full", "free")].cheapest
    hours = by[("full", "small")].job_hours
    assert hours == pytest.approx(1e20 / (16 * 100e12 * 0.4) / 3600)
    assert by[("full", "small")].job_usd == pytest.approx(hours * 16 * 1.0)


def test_plan_search_reports_an_unreachable_method():
    def huge(method, setup):
        return 10**15
    plans, unreachable = search_plans(huge, ("full",), CARDS, {}, {})
    assert [u.to_dict()["method"] for u in unreachable] == ["full"]
    assert all(not p.fits and p.gpus == MAX_GPUS for p in plans)


# --- serving speed -------------------------------------------------------------------------------------------------
@hsettings(max_examples=60, deadline=None)
@given(dense=st.integers(10**6, 10**12), experts=st.sampled_from([0, 8, 64, 256]), k=st.integers(1, 8),
       kv=st.integers(0, 10**6), n=st.sampled_from([1, 2, 4, 8]), eff=st.floats(0.05, 1.0))
def test_decode_speed_stays_under_the_bandwidth_bound(dense, experts, k, kv, n, eff):
    m = ServingModel(dense, dense * 3 if experts else 0, experts, min(k, experts or 1), kv, 4096, 2.0 * dense)
    setup = Setup("single" if n == 1 else "tp", n)
    r = serving_speed(m, "g", setup, 10**9, 10**6, 80 * 10**9, 2000.0, 400.0, 2.0, bandwidth_efficiency=eff)
    assert 0 < r.decode_tokens_per_s <= decode_upper_bound(m, n, 2000.0) * (1 + 1e-9)
    assert r.max_concurrency >= 1 and r.usd_per_million_output_tokens > 0


def test_moe_decode_reads_only_its_active_experts_at_batch_1():
    dense = ServingModel(10**10, 0, 0, 0, 0, 4096, 2e10)
    moe = ServingModel(10**10, 8 * 10**10, 64, 8, 0, 4096, 2e10)  # 8 of 64 experts: 1/8 of 80 GB read
    a = serving_speed(dense, "g", Setup(), 0, 1, 1, 1000.0, 100.0, None)
    b = serving_speed(moe, "g", Setup(), 0, 1, 1, 1000.0, 100.0, None)
    assert b.decode_tokens_per_s == pytest.approx(a.decode_tokens_per_s / 2)


def test_mla_latent_cache_is_whole_on_every_tensor_parallel_rank():
    """MLA caches one latent head per token (vLLM: [blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim] on each
    rank, whatever the TP size), so TP splits none of it; grouped KV heads split / N, or one head per rank where N
    exceeds them. DeepSeek-V3 on 8 H200s had offered 1,287 sequences at $0.22 per M output tokens from a cache
    divided by 8: 161 sequences now."""
    cache = 8 * 2**30
    phase = Phase("decode", weights=2 * P, kv_cache=cache)
    heads = dict(method="serve", heads=32)
    assert dict(per_gpu(_job([phase], kv=8, **heads), Setup("tp", 8)).breakdown)["kv_cache"] == cache // 8
    assert dict(per_gpu(_job([phase], kv=4, **heads), Setup("tp", 8)).breakdown)["kv_cache"] == cache // 4
    latent = dataclasses.replace(_job([phase], kv=32, **heads), kv_latent=1.0)
    assert dict(per_gpu(latent, Setup("tp", 8)).breakdown)["kv_cache"] == cache
    # the decode reads it whole on every rank too: a batch's cache reads take N times what they would split
    split = ServingModel(10**9, 0, 0, 0, 10**5, 4096, 0.0)
    whole = dataclasses.replace(split, kv_latent=1.0)
    assert decode_upper_bound(whole, 1, 1000.0) == decode_upper_bound(split, 1, 1000.0)
    assert decode_upper_bound(whole, 8, 1000.0) < decode_upper_bound(split, 8, 1000.0)


def test_deepseek_v3_serves_its_latent_cache_whole_per_rank(settings):
    cfg = next(c for repo, c, _ in snapshot_configs() if repo == "deepseek-ai/DeepSeek-V3")
    r = estimate(cfg, model_id="deepseek-ai/DeepSeek-V3", assumptions=settings.assumptions, cards=settings.cards,
                 gpus=settings.gpus)
    h200 = next(x for x in r.serving if x.gpu_model == "H200 SXM")
    # 143 since each rank also holds vLLM's startup sampler run, 5.0 GB (vllm_server.py); a cache split 8 ways
    # would hold about eight times as many
    assert (h200.gpus, h200.strategy) == (8, "tp") and 135 < h200.max_concurrency < 150
