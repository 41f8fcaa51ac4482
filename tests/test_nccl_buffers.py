"""NCCL's buffers on each GPU of a setup of several (Assumptions.nccl_bytes_per_gpu): outside PyTorch's allocator,
so held beside the tensors a setup's figure counts, on 2 GPUs or more and never on one; in the exact job's
nvidia-smi peak, beside its allocated one. Reference value: Stas Bekman, Machine Learning Engineering,
training/performance/README.md ("torch.distributed memory usage": 2 ranks, NV 0.55 GiB before the first barrier,
2.00 GiB after)."""

from __future__ import annotations

import json

import pytest

from generator.accuracy_rows import held_nccl_bytes
from generator.cli import main
from generator.estimator import estimate
from generator.estimator.inputs import GIB, Assumptions
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.kinds import kinds
from generator.estimator.memory.parallel import Setup
from generator.estimator.memory.peak_table import cached_peak
from generator.estimator.memory.plans import first_fit
from generator.estimator.memory.profile import budget_bytes
from generator.estimator.setups import training_nccl_bytes
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import load_settings
from tests.conftest import ROOT
from tests.test_calculator import page_answer  # the model page's calculator on a snapshot model
from tests.test_plans_real import site_jobs  # the site's jobs, built as estimate() builds them

SETTINGS = load_settings()
S = SETTINGS.assumptions
NCCL = S.nccl_bytes_per_gpu
LLAMA8 = "meta-llama/Llama-3.1-8B"


def _report(model: str, **kw):
    record = load_record(DEFAULT_SNAPSHOT_DIR, model)
    assert record is not None
    return estimate(record.config(), model_id=model, assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus, **kw)


def test_the_figure_is_the_measured_increase_at_the_first_barrier():
    assert NCCL == Assumptions().nccl_bytes_per_gpu == round((2.00 - 0.55) * GIB)


def test_a_training_setup_of_several_gpus_holds_the_buffers_beside_its_parts_and_one_gpu_does_not():
    """The plan search's figure (PeakTable) is the parts' figure plus NCCL's on 2 GPUs or more, for every kind of
    training setup: data parallel, ZeRO, FSDP, pipeline parallel; serving's is the parts' alone (below)."""
    jobs = site_jobs(LLAMA8)
    plain = cached_peak(jobs, lambda method, parts: sum(parts), ("full", "lora", "serve"))
    held = cached_peak(jobs, lambda method, parts: sum(parts), ("full", "lora", "serve"), 1, training_nccl_bytes(S))
    assert training_nccl_bytes(S) == {"full": NCCL, "lora": NCCL, "qlora": NCCL}
    assert held("full", Setup()) == plain("full", Setup())
    assert held("full", Setup("zero2", 1, True, "optimizer")) == plain("full", Setup("zero2", 1, True, "optimizer"))
    for method, setup in (("full", Setup("ddp", 2)), ("full", Setup("zero2", 4, True)), ("lora", Setup("fsdp", 8, True)),
                          ("full", Setup("zero3", 64, True)), ("lora", Setup("pp", 4)), ("qlora", Setup("fsdp", 2, True))):
        assert held(method, setup)[0] == plain(method, setup)[0] + NCCL, (method, setup)
        assert held(method, setup)[1] == plain(method, setup)[1]  # the CPU's share is not the GPU's buffers
    for setup in (Setup("tp", 2), Setup("pp", 4)):
        assert held("serve", setup) == plain("serve", setup)
    fsdp = Setup("fsdp", 8, True)
    assert held.floor("full", fsdp)[0] == plain.floor("full", fsdp)[0] + NCCL


def test_every_cards_serving_headroom_holds_the_buffers():
    """Serving adds no NCCL bytes to its figure: the headroom its budget keeps is for the caching allocator's
    fragmentation, which vLLM's KV cache, allocated in one piece, does not suffer, so the memory less the CUDA
    context and NCCL's buffers must still hold the budget, on every card listed."""
    for card in SETTINGS.cards:
        assert card.memory_usable_bytes - S.cuda_context_bytes - NCCL >= budget_bytes(card, S), card.name


def test_every_training_plan_of_several_gpus_holds_the_buffers_and_one_gpu_none():
    """Llama-3.1-70B needs several GPUs for every method on most cards: each training plan's figure is the parts'
    figure of its setup (the estimate's jobs, accumulating to the reference batch) plus NCCL's buffers on 2 GPUs or
    more, and none on one; a floor names them among what each GPU keeps."""
    model = "meta-llama/Llama-3.1-70B"
    r = _report(model)
    plain = cached_peak(site_jobs(model), lambda method, parts: sum(parts), ("full", "lora", "qlora", "serve"),
                        S.job_batch)
    training = [p for p in r.plans if p.method != "serve" and p.per_gpu_peak_bytes]
    assert {p.gpus > 1 for p in training} == {True, False} and {p.method for p in training} >= {"full", "lora"}
    for p in training:
        setup = Setup(p.strategy, p.gpus, p.grad_ckpt, p.offload)
        assert p.per_gpu_peak_bytes == plain(p.method, setup)[0] + (NCCL if p.gpus > 1 else 0), p
    plan_floor = {fl.method: fl for fl in r.plan_floors}
    assert dict(plan_floor["full"].parts)["nccl"] == NCCL  # no count of T4s holds its full fine-tune


def test_the_exact_job_counts_the_buffers_in_nvidia_smi_and_holds_them_beside_an_allocated_peak():
    fsdp2 = Setup("fsdp", 2)
    allocated = _report(LLAMA8, job=Job(method="lora", tokens=2048), setup=fsdp2, structure=False).memory
    smi = _report(LLAMA8, job=Job(method="lora", tokens=2048, metric="nvidia-smi"), setup=fsdp2,
                  structure=False).memory
    one = _report(LLAMA8, job=Job(method="lora", tokens=2048, metric="nvidia-smi"), structure=False).memory
    assert allocated.held_nccl_bytes == NCCL and allocated.held_context_bytes == 0
    assert allocated.held_peak_bytes == allocated.peak_bytes + NCCL
    assert smi.held_nccl_bytes == 0 and smi.held_context_bytes == S.cuda_context_bytes
    # nvidia-smi: the allocator's cache (the bf16 logits' freed blocks), the CUDA context and NCCL's buffers
    assert dict(smi.breakdown)["overhead"] - dict(allocated.breakdown)["overhead"] \
        >= S.cuda_context_bytes + NCCL
    assert smi.held_peak_bytes == smi.peak_bytes - S.cuda_context_bytes
    assert one.held_nccl_bytes == 0  # one GPU: no communicator
    assert dict(one.breakdown)["overhead"] < dict(smi.breakdown)["overhead"]


@pytest.mark.parametrize("metric", ["allocated", "nvidia-smi"])
def test_the_command_says_the_buffers_a_card_holds_beside_the_peak(capsys, metric):
    code = main([LLAMA8, "--method", "lora", "--gpus", "2", "--strategy", "fsdp", "--metric", metric])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    text = " ".join(out.split())
    if metric == "allocated":
        assert "with 1.56 GB of NCCL buffers beside it on each GPU" in text
    else:
        assert "NCCL buffers beside it" not in text and "less its 537 MB of CUDA context" in text


def test_the_json_twin_carries_the_assumption(capsys):
    assert main([LLAMA8, "--json"]) == 0
    report = json.loads(capsys.readouterr()[0])
    assert report["memory"]["assumptions"]["nccl_bytes_per_gpu"] == NCCL


def test_the_calculator_holds_the_buffers_beside_a_multi_gpu_peak_and_says_so():
    """The model page's calculator, for `--gpus 2 --strategy fsdp`: a card fits where the peak and NCCL's buffers
    are within its budget, its largest batch is held to that, and the table's title says so."""
    one = page_answer(LLAMA8, "method=lora&grad-ckpt=")
    two = page_answer(LLAMA8, "method=lora&grad-ckpt=&gpus=2&strategy=fsdp")
    assert one["ok"] and two["ok"] and one["held"] == ""
    assert two["held"] == "the peak with 1.56 GB of NCCL buffers beside it on each GPU"
    for card in two["cards"]:
        assert card["fits"] == (two["peak_bytes"] + NCCL <= card["budget_bytes"]), card["name"]
    card80 = next(c for c in two["cards"] if c["name"] == "A100 / H100 80 GB")
    largest = card80["max_batch"]
    assert largest > 1
    at = page_answer(LLAMA8, f"method=lora&grad-ckpt=&gpus=2&strategy=fsdp&batch={largest}")
    past = page_answer(LLAMA8, f"method=lora&grad-ckpt=&gpus=2&strategy=fsdp&batch={largest + 1}")
    assert at["peak_bytes"] + NCCL <= card80["budget_bytes"] < past["peak_bytes"] + NCCL


def test_zero2_offload_on_one_gpu_is_found_below_the_step_nccl_makes_to_two():
    """Review of F86: ZeRO-2 with its optimizer offloaded was one kind from 1 GPU to 512, searched as monotone, but
    NCCL's buffers raise its figure from one GPU to two (Llama-3.2-1B's full fine-tune: 5.95 GB on one, 7.51 GB on
    two to 24), and the search dropped the kind without trying one GPU. The one-GPU count is a kind of its own now:
    at a budget of its own figure the search, with or without its bounds, finds it, as a walk over every count does."""
    model = "meta-llama/Llama-3.2-1B"
    probe = cached_peak(site_jobs(model), lambda method, parts: sum(parts), ("full", "lora", "qlora", "serve"),
                        S.job_batch, training_nccl_bytes(S))
    one, two = (probe("full", Setup("zero2", n, True, "optimizer"))[0] for n in (1, 2))
    assert two > one  # NCCL's buffers on two GPUs outweigh what the second GPU takes off the first
    assert first_fit(probe, "full", kinds("full"), one, bound=probe.first_count) is None
    for bound in (probe.first_count, None):
        got = first_fit(probe, "full", kinds("full", offload=True), one, S.host_memory_bytes_per_node, bound=bound)
        assert got == (Setup("zero2", 1, True, "optimizer"), one)


def test_a_training_split_over_two_cards_holds_the_buffers_on_each():
    """The card table's two-card split of a training job runs two processes, each beside NCCL's buffers, as a
    setup's GPUs do: Qwen3-8B's LoRA on two L4s, 18.6 GB and 18.7 GB at batch 1, fits the L4's 20.1 GB budget alone
    but not with 1.56 GB beside it (the cell names the setups instead); serving's split keeps its headroom."""
    r = _report("Qwen/Qwen3-8B")
    l4 = next(c for c in r.memory.cards if c.name == "L4 24 GB")
    lora = next(sp for sp in l4.split or () if sp.method == "train_lora")
    assert max(lora.stage_bytes_batch1) <= l4.budget_bytes < max(lora.stage_bytes_batch1) + NCCL
    assert lora.max_batch == 0
    for card in r.memory.cards:
        for sp in card.split or ():
            held = max(sp.stage_bytes_batch1) + (NCCL if sp.method != "serve" else 0)
            assert (sp.max_batch > 0) == (held <= card.budget_bytes), (card.name, sp.method)


def test_a_tight_multi_gpu_job_gives_its_tensors_margin(capsys):
    """A card holding a --gpus N job's peak but not its headroom says how much room its tensors have: its memory
    less the CUDA context and NCCL's buffers, which do not fragment, over the peak (review of F86): Llama-3.1-8B's
    LoRA at batch 4 on 2 GPUs with FSDP is tight on the 80 GB card, 82.9 GB for tensors, 2.5% over the peak."""
    args = [LLAMA8, "--method", "lora", "--gpus", "2", "--strategy", "fsdp", "--batch", "4"]
    assert main([*args, "--json"]) == 0
    m = json.loads(capsys.readouterr()[0])["memory"]
    card = next(c for c in m["cards"] if c["name"] == "A100 / H100 80 GB")
    tensors, peak = card["capacity_bytes"] - NCCL, m["peak_bytes"]
    assert peak + NCCL > card["budget_bytes"] and peak <= tensors
    assert main(args) == 0
    text = " ".join(capsys.readouterr()[0].split())
    pct = (tensors / peak - 1) * 100
    assert f"A100 / H100 80 GB is tight (82.9 GB for tensors: {pct:.1f}% over the peak" in text and pct < 3


def test_the_accuracy_table_holds_the_buffers_beside_a_multi_gpu_torch_counter():
    """A card holds NCCL's buffers beside a run on several GPUs that measured a torch counter, on both the measured
    and the estimated side; a driver's count has them already, and one GPU has none (accuracy_rows.held_nccl_bytes).
    M034 (Llama-2-13B, LoRA with FSDP on 4 GPUs, 35.4 GB allocated) is within the A100 40 GB's budget alone, over it
    with the buffers."""
    def row(gpus: int, metric: str) -> dict:
        return {"parallel": {"gpus": gpus, "strategy": "fsdp"}, "measured": {"metric": metric}}
    assert held_nccl_bytes(row(4, "max_memory_allocated"), NCCL) == NCCL
    assert held_nccl_bytes(row(2, "max_memory_reserved"), NCCL) == NCCL
    assert held_nccl_bytes(row(8, "nvml_used"), NCCL) == 0 and held_nccl_bytes(row(1, "max_memory_allocated"), NCCL) == 0
    assert held_nccl_bytes({"measured": {"metric": "max_memory_allocated"}}, NCCL) == 0
    table = json.loads((ROOT / "data/measurements/accuracy.json").read_text(encoding="utf-8"))
    a100 = next(x for x in table["fits"] if x["dataset"] == "public" and x["method"] == "lora"
                and x["card"] == "A100 40 GB")
    measured = next(json.loads(line) for line in (ROOT / "data/measurements/public.jsonl").open(encoding="utf-8")
                    if '"M034"' in line)["measured"]["peak_bytes"]
    assert measured <= a100["budget_bytes"] < measured + NCCL
    assert (a100["nonfit"], a100["nonfit_flagged"]) == (7, 6)
