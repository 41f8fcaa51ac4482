"""estimator.memory.host_link and the plans it bounds: what an offload setup moves over each GPU's PCIe link in a job
(ZeRO-Offload's and ZeRO-Infinity's data movement), worked by hand on Llama-2-7B's shape, never falling short of
the job's hours, and the site's offload plans priced with it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator import format as fmt
from generator import setups_text
from generator.errors import ConfigError
from generator.estimator import estimate
from generator.estimator.memory.host_link import job_link_bytes, link_bytes, link_hours
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.parallel import Phase, Setup, SingleGpuJob
from generator.estimator.memory.plans import GpuOffer, search_plans
from generator.settings import load_settings
from tests.conftest import ROOT, snapshot_configs

P, TRAINABLE = 6_738_415_616, 40_000_000  # Llama-2-7B's parameters; a LoRA's adapters


def _job(weights: int, trainable: int = P, grad_bytes: int = 2, compute_bytes: int = 2) -> SingleGpuJob:
    return SingleGpuJob("full", (Phase("backward", weights=weights),), P, trainable, compute_bytes, 2, grad_bytes,
                        32, P // 32, 0, 0, 0, 0, 32, 32)


def test_param_offload_fetches_the_weights_each_pass_and_sends_the_gradients_each_micro_batch():
    # 1,000 samples over 4 GPUs: 250 micro-batches each; with checkpointing 3 passes (forward, recompute,
    # backward) of a quarter of the 16-bit weights, and a quarter of the 16-bit gradients per micro-batch
    up, down = job_link_bytes(_job(2 * P), Setup("zero3", 4, True, "params"), 1000, 32)
    assert up == 250 * 3 * (2 * P // 4) and down == 250 * (2 * P // 4)
    up, _ = job_link_bytes(_job(2 * P), Setup("zero3", 4, False, "params"), 1000, 32)
    assert up == 250 * 2 * (2 * P // 4)  # no recomputation: forward and backward only


def test_amp_fetches_the_16_bit_copy_and_qlora_its_nf4_storage():
    amp, _ = job_link_bytes(_job(4 * P), Setup("fsdp", 2, False, "params"), 2, 32)  # fp32 master held, bf16 fetched
    assert amp == 1 * 2 * (2 * P // 2)
    nf4 = P * 9 // 16  # 4-bit pairs and one fp32 absmax per 64: 0.5625 B per parameter
    quantised, _ = job_link_bytes(_job(nf4, TRAINABLE), Setup("fsdp", 2, False, "params"), 2, 32)
    assert quantised == 1 * 2 * -(-nf4 // 2)


def test_optimizer_offload_sends_gradients_each_micro_batch_and_takes_params_back_each_step():
    # ZeRO-Offload: 1,000 samples at 32 per step = 32 steps (the last one short); 2 GPUs: 500 micro-batches each
    up, down = job_link_bytes(_job(2 * P, grad_bytes=2), Setup("zero2", 2, False, "optimizer"), 1000, 32)
    assert up == 32 * (2 * P // 2) and down == 500 * (2 * P // 2)
    assert job_link_bytes(_job(2 * P), Setup("zero3", 2, True, "none"), 1000, 32) == (0, 0)


def test_link_hours_take_the_larger_direction_at_the_links_rate():
    assert link_hours((63 * 10**9 * 3600, 1), 63.0) == pytest.approx(1.0)
    assert link_hours((1, 2 * 31_500_000_000 * 3600), 31.5) == pytest.approx(2.0)
    assert link_hours((10**12, 10**12), 0.0) is None  # a GPU whose link rate is not known


@hsettings(max_examples=80, deadline=None)
@given(n=st.sampled_from([1, 2, 4, 8, 16, 64]), ckpt=st.booleans(), offload=st.sampled_from(["params", "optimizer"]),
       samples=st.integers(1, 10**6), trainable=st.integers(1, P))
def test_more_gpus_never_move_more_bytes_per_gpu(n, ckpt, offload, samples, trainable):
    job = _job(2 * P, trainable)
    strategy = "zero3"
    fewer = job_link_bytes(job, Setup(strategy, n, ckpt, offload), samples, 32)
    more = job_link_bytes(job, Setup(strategy, 2 * n, ckpt, offload), samples, 32)
    assert max(more) <= max(fewer)


def test_an_offload_plans_hours_are_at_least_its_link_hours():
    def peak(method, setup):  # only an offloaded ZeRO-3 fits the card
        return 10**9 if setup.offload == "params" else 10**13
    jobs = {"full": _job(2 * P)}
    card = GpuOffer("card", 80 * 10**9, 2.0, 989.0, 3350.0, "H100", host_link_gb_per_s=63.0)
    plans, _ = search_plans(peak, ("full",), (card,), {"full": 1e18}, {"full": 0.4},
                            link=link_bytes(jobs, 500_000, 32))
    (plan,) = plans
    compute_h = 1e18 / (plan.gpus * 989e12 * 0.4) / 3600
    moved = job_link_bytes(jobs["full"], Setup(plan.strategy, plan.gpus, plan.grad_ckpt, plan.offload), 500_000, 32)
    assert plan.offload == "params" and plan.host_link_hours == pytest.approx(max(moved) / 63e9 / 3600)
    assert plan.job_hours == pytest.approx(max(compute_h, plan.host_link_hours))
    assert plan.job_usd == pytest.approx(plan.job_hours * 2.0 * plan.gpus)
    assert setups_text.link_bound(plan) == (plan.host_link_hours >= compute_h)


def test_the_site_offloads_only_where_nothing_else_runs():
    """gemma-3-27b-it's QLoRA on T4s (16 GB) was the site's one offloaded plan: two T4s with the NF4 base on the CPU,
    while no count of T4s up to 512 held it without offload, each pricing a dequantised weight at the loss. That
    weight lives only inside its matmul (FINDINGS.md F29): ZeRO-3 without offload fits at 24 T4s, the fewest that
    do (80 until F73: the checkpointed SigLIP tower keeps its layers' inputs alone, 0.25 GB an image, not 3.8 GB;
    8 until its layers were gathered packed, as FSDP-QLoRA gathers them; 16 since ZeRO-3 gathers the tied
    262,208 x 5,376 embedding, 2.8 GB in bf16, at the loss, as DeepSpeed gathers module by module; 24 since
    DeepSpeed's 1 GB gradient reduce bucket is priced), and the search stopped there. Since NCCL's buffers are
    counted on each GPU (1.56 GB, F86) no count of T4s holds it within the budget, with offload or without: the plan
    says what 512 of them keep, unfit, with no hours; no fitting plan moves weights over the host link, so none
    carries link hours (an offloaded plan's are checked above)."""
    s = load_settings()
    mid, cfg, counted = next(x for x in snapshot_configs() if x[0] == "google/gemma-3-27b-it")
    report = estimate(cfg, model_id=mid, assumptions=s.assumptions, cards=s.cards, gpus=s.gpus,
                      checkpoint_params=counted)
    plan = next(p for p in report.plans if p.method == "qlora" and p.gpu_model == "T4")
    assert (plan.gpus, plan.fits) == (512, False)
    assert plan.job_hours is None and plan.host_link_hours is None
    assert all(p.host_link_hours is None for p in report.plans if p.offload == "none")


def test_a_gpu_may_not_name_a_negative_link_rate(tmp_path):
    text = (ROOT / "site_config.yaml").read_text(encoding="utf-8")
    bad = text.replace("host_link_gb_per_s: 15.75", "host_link_gb_per_s: -1", 1)
    assert bad != text
    (tmp_path / "site_config.yaml").write_text(bad, encoding="utf-8")
    with pytest.raises(ConfigError, match="gpus.t4: key 'host_link_gb_per_s' = -1"):
        load_settings(tmp_path / "site_config.yaml")


def test_an_offload_plan_names_the_host_memory_it_needs():
    """A review found "2× T4 with FSDP, gradient checkpointing and CPU param offload" marked smallest for
    Llama-2-70B's full fine-tune with no word of the 1.38 TB of host memory per node it takes, which a T4's usual
    instances do not have. The plan carries it (PerGpu.cpu_bytes_per_node of its setup), within the settings' host
    limit, and its words say it; a plan without offload says nothing of the host. (With NCCL's buffers counted,
    F86, no count of T4s holds Llama-2-70B's: Qwen3-32B's full fine-tune is the example, on 2 T4s with ZeRO-3.)"""
    s = load_settings()
    mid, cfg, counted = next(x for x in snapshot_configs() if x[0] == "Qwen/Qwen3-32B")
    report = estimate(cfg, model_id=mid, assumptions=s.assumptions, cards=s.cards, gpus=s.gpus,
                      checkpoint_params=counted)
    offloaded = [p for p in report.plans if p.offload != "none"]
    assert offloaded and all(p.host_bytes_per_node for p in offloaded)
    plan = next(p for p in offloaded if p.method == "full" and p.gpu_model == "T4")
    assert (plan.gpus, plan.offload, plan.fits) == (2, "params", True)
    exact = estimate(cfg, model_id=mid, assumptions=s.assumptions, cards=s.cards, gpus=s.gpus, checkpoint_params=counted,
                     job=Job(grad_ckpt=True), setup=Setup(plan.strategy, plan.gpus, True, offload=plan.offload))
    assert plan.host_bytes_per_node == exact.memory.offload_cpu_bytes_per_node <= s.assumptions.host_memory_bytes_per_node
    assert setups_text.label(plan).endswith(f"CPU param offload ({fmt.gb(plan.host_bytes_per_node)} of host memory "
                                            "per node)")
    assert all(p.host_bytes_per_node is None and "host memory" not in setups_text.label(p)
               for p in report.plans if p.offload == "none")
