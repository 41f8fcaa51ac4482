"""What each GPU keeps however many share a training job (Sharding.floor, setups.plan_floors), and the words that
say why a card holds a method on no count up to 512 (setups_text.floor_sentences): on the page and in the command."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator import setups_text
from generator.estimator import estimate
from generator.estimator.memory.kinds import MAX_GPUS
from generator.estimator.memory.parallel import PARTS, Setup, per_gpu
from generator.estimator.memory.plans import Plan, PlanFloor
from generator.estimator.memory.sharding import sharded
from generator.settings import load_settings
from tests.conftest import snapshot_configs
from tests.test_parallel import _amp_job


@hsettings(max_examples=60, deadline=None)
@given(n=st.sampled_from([2, 8, 64, 512, 4096]), acts=st.integers(0, 2**36), ckpt=st.booleans(),
       offload=st.sampled_from(["none", "optimizer", "params"]), strategy=st.sampled_from(["zero2", "zero3", "fsdp"]))
def test_the_floor_is_below_every_count_and_what_the_count_tends_to(n, acts, ckpt, offload, strategy):
    """No count keeps less than the floor, and a count past every sharded byte keeps the floor, up to the one byte
    each of the seven parts' ceiling divisions rounds to."""
    sharding = sharded(_amp_job(acts), strategy, ckpt, offload)
    floor = sum(sharding.floor())
    assert floor <= sum(sharding.peak(n))
    assert sum(sharding.peak(2**62)) - floor <= len(PARTS)


def test_param_offload_keeps_nothing_sharded_on_the_gpu_so_its_peak_is_its_floor():
    """FSDP with its params offloaded holds only what no count divides: 512 GPUs keep exactly the floor."""
    job = _amp_job(10 * 2**30)
    sharding = sharded(job, "fsdp", True, "params")
    assert per_gpu(job, Setup("fsdp", 512, True, "params")).per_gpu_peak_bytes == sum(sharding.floor())


def _report(repo: str):
    settings = load_settings()
    for repo_id, cfg, checkpoint in snapshot_configs():
        if repo_id == repo:
            return estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards,
                            gpus=settings.gpus, checkpoint_params=checkpoint)
    raise LookupError(repo)


@pytest.mark.parametrize("repo", ["meta-llama/Llama-3.2-11B-Vision", "meta-llama/Llama-3.1-405B",
                                  "deepseek-ai/DeepSeek-V3", "meta-llama/Llama-3.1-70B"])
def test_a_floor_for_every_method_some_card_holds_on_no_count_and_it_explains_that_card(repo):
    report = _report(repo)
    over = {p.method for p in report.plans if not p.fits and p.method != "serve"}
    assert over and {f.method for f in report.plan_floors} == over
    budgets = {c.name: c.budget_bytes for c in report.memory.cards}
    for fl in report.plan_floors:
        assert fl.floor_bytes == sum(v for _, v in fl.parts)
        for p in report.plans:
            if p.method == fl.method:
                assert p.per_gpu_peak_bytes >= fl.floor_bytes  # the floor is never above a count tried
                if p.fits:
                    assert budgets[p.gpu] >= fl.floor_bytes
        for p in report.plans:  # a card holding it on no count up to 512: its peak there is over the budget
            if p.method == fl.method and not p.fits:
                assert budgets[p.gpu] < p.per_gpu_peak_bytes
    assert all(p.fits or p.method == "serve" or any(f.method == p.method for f in report.plan_floors)
               for p in report.plans)


def test_llama_vision_lora_names_its_activations_as_what_no_t4_count_divides():
    """The page's puzzle: LoRA keeps more than the full fine-tune on every GPU, and no count of T4s holds either. The
    floor says why: the tower's adapted Linears keep their inputs (F73), 9.71 GB of activations each GPU keeps whole
    (the full fine-tune 8.26 GB; ZeRO-3 gathers the 525 M-param LM head at the loss, 1.05 GB, beside a layer), and
    DeepSpeed's reduce bucket, 5e8 bf16 elements, and NCCL's buffers sit beside them (QLoRA's floor, 15.3 GB, is one
    too)."""
    report = _report("meta-llama/Llama-3.2-11B-Vision")
    full, fl, _ = report.plan_floors
    assert full.method == "full" and dict(full.parts)["activations"] < 9e9 < dict(fl.parts)["activations"]
    assert fl.method == "lora" and dict(fl.parts)["activations"] > 9e9
    lines = setups_text.floor_sentences(report.plan_floors, report.plans,
                                        {c.name: c.budget_bytes for c in report.memory.cards})
    assert lines[0].startswith("Full fine-tune: no count of T4 16 GB cards up to 512 holds batch 1. With ZeRO-3 and "
                               "gradient checkpointing, the setup tried that keeps least, each GPU keeps 15.9 GB")
    assert lines[1].startswith("LoRA: no count of T4 16 GB cards up to 512 holds batch 1. With ZeRO-3 and gradient "
                               "checkpointing, the setup tried that keeps least, each GPU keeps 16.9 GB however many")
    assert ("activations 9.71 GB, logits 3.15 GB, other tensors (DeepSpeed's gradient reduce bucket among them) "
            "1.00 GB and NCCL's buffers 1.56 GB), over the budget of the T4 16 GB (13.1 GB): no number") in lines[1]
    assert lines[1].endswith("no number of these cards would hold it with ZeRO or FSDP.")
    assert lines[-1] == setups_text.FLOOR_WHY


def _plan(gpu: str, fits: bool) -> Plan:
    return Plan("full", gpu, MAX_GPUS, "zero3", True, "none", 30 * 10**9, fits, None, None, None)


def test_a_card_over_the_floor_would_need_more_gpus_and_one_under_it_none():
    floor = PlanFloor("full", "zero3", True, "none", 20 * 10**9, (("activations", 15 * 10**9), ("logits", 5 * 10**9)),
                      (("A100 40 GB", 1_032),))
    budgets = {"T4 16 GB": 13 * 10**9, "A100 40 GB": 36 * 10**9, "H200 141 GB": 130 * 10**9}
    plans = [_plan("T4 16 GB", False), _plan("A100 40 GB", False), _plan("H200 141 GB", True)]
    (line, why) = setups_text.floor_sentences([floor], plans, budgets)
    assert line == ("Full fine-tune: no count of T4 16 GB and A100 40 GB cards up to 512 holds batch 1. With ZeRO-3 "
                    "and gradient checkpointing, the setup tried that keeps least, each GPU keeps 20.0 GB however "
                    "many share the job (activations 15.0 GB and logits 5.00 GB), over the budget of the T4 16 GB "
                    "(13.0 GB): no number of these cards would hold it with ZeRO or FSDP; 1,032× A100 40 GB with "
                    "ZeRO-3 and gradient checkpointing would hold it.")
    assert why == setups_text.FLOOR_WHY
    assert setups_text.floor_sentences([floor], plans[2:], budgets) == []  # every card holds it: nothing to say
    # a floor over a card's budget but within its memory less the CUDA context is tight there, as the per-card
    # table says it; one over both is not
    (tight, _) = setups_text.floor_sentences([floor], plans, budgets, {"T4 16 GB": 21 * 10**9})
    assert tight == line.replace("with ZeRO or FSDP;", "with ZeRO or FSDP within the headroom, though the T4 16 GB's "
                                 "memory less the CUDA context (21.0 GB) holds it: tight, on more GPUs than the 512 "
                                 "tried;")  # its 512 GPUs keep 30 GB each, over that memory
    (tight, _) = setups_text.floor_sentences([floor], plans, budgets, {"T4 16 GB": 31 * 10**9})
    assert tight == line.replace("with ZeRO or FSDP;", "with ZeRO or FSDP within the headroom, though the T4 16 GB's "
                                 "memory less the CUDA context (31.0 GB) holds it: tight;")
    assert setups_text.floor_sentences([floor], plans, budgets, {"T4 16 GB": 19 * 10**9})[0] == line



def test_deepseek_v3_lora_on_l4s_would_need_more_than_512_and_on_t4s_no_count():
    """DeepSeek-V3's LoRA with its experts spread over a node keeps 17.8 GB of tensors per GPU however many share
    it, and NCCL's 1.56 GB of buffers beside them: 19.4 GB, over the T4's budget (13.1 GB), under the L4's
    (20.1 GB), whose 512 GPUs still hold more. The command on the exact job agrees: `--method lora --strategy
    fsdp+ep --grad-ckpt` peaks at 18,546,710,556 B allocated on 1,976 GPUs and 18,543,784,729 B on 1,984, with the
    1,556,925,645 B of NCCL's buffers 20,103,636,201 B and 20,100,710,374 B, the L4's budget being
    20,102,314,322 B."""
    report = _report("deepseek-ai/DeepSeek-V3")
    lora = next(f for f in report.plan_floors if f.method == "lora")
    assert lora.strategy == "fsdp+ep" and 19e9 < lora.floor_bytes < 20e9
    assert lora.beyond == (("L4 24 GB", 1_984),)
    lines = setups_text.floor_sentences(report.plan_floors, report.plans,
                                        {c.name: c.budget_bytes for c in report.memory.cards})
    line = next(x for x in lines if x.startswith("LoRA:"))
    assert line.endswith("over the budget of the T4 16 GB (13.1 GB): no number of these cards would hold it with "
                         "ZeRO or FSDP; 1,984× "
                         "L4 24 GB with FSDP + expert parallel and gradient checkpointing would hold it."), line


def test_a_quantised_base_is_gathered_packed():
    """A page review found 405B's QLoRA floor gathering its layers at 2 bytes a weight (12.8 GB, the LoRA floor to
    the byte). FSDP-QLoRA all-gathers the packed 4-bit storage (bnb_4bit_quant_storage) and each Linear dequantises
    its own weight: a gathered Llama-3.1-405B layer under nf4 with double quantisation is about half a byte a weight
    (4 bits, an absmax per 64 quantised to 8 bits, norms at 2 bytes); a 16-bit base's unit stays at 2."""
    report = _report("meta-llama/Llama-3.1-405B")
    floors = {f.method: dict(f.parts) for f in report.plan_floors}
    layer = 3_187_703_808  # one of its 126 layers' params
    head = 128_256 * 16_384  # its LM head, bf16 under QLoRA too (bitsandbytes leaves it unquantised)
    assert floors["lora"]["weights"] == 2 * 2 * layer  # the unit computing and the one prefetched, bf16
    # ZeRO-3, the least: at the loss it gathers the head (DeepSpeed gathers module by module) beside a packed layer
    assert 2 * head + 0.5 * layer < floors["qlora"]["weights"] < 2 * head + 0.53 * layer
    job = _amp_job(10 * 2**30)
    packed = dataclasses.replace(job, unit_bytes=job.unit_params // 2)
    setup = Setup("fsdp", 512, True)  # where a computing phase, holding the gathered units, is the peak
    gap = per_gpu(job, setup).per_gpu_peak_bytes - per_gpu(packed, setup).per_gpu_peak_bytes
    assert gap == 2 * (job.compute_bytes * job.unit_params - job.unit_params // 2)  # two units, each packed
