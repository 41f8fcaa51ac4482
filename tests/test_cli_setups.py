"""The CLI's multi-GPU setups (issue 14 item 2, issue 16 items 2 and 14): --gpus / --strategy / --offload reach
memory.peak_bytes per GPU, impossible setups exit 2 naming key and value, --plan prints the setups (only the asked
method's), an exact job gets a verdict per card, and jobs or serving lengths past the context exit 2 (or warn where
the config declares rope scaling)."""

from __future__ import annotations

import json

import pytest

from generator.cli import main

QWEN8 = "Qwen/Qwen3-8B"  # 36 layers, 32 heads, 8 KV heads, 40,960-token context, no rope scaling
GPT2 = "openai-community/gpt2"  # 1,024-token context, no rope scaling
LLAMA8 = "meta-llama/Llama-3.1-8B"  # 131,072-token context, rope_scaling llama3
INTERNLM = "internlm/internlm2_5-7b-chat"  # 32,768-token context, rope_scaling dynamic (factor 2)
BERT = "google-bert/bert-base-uncased"  # an encoder of 512 positions


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def words(text: str) -> str:
    return " ".join(text.split())


def test_gpus_strategy_and_offload_reach_the_per_gpu_peak(capsys):
    code, out, _ = run(capsys, QWEN8, "--json")
    one = json.loads(out)["memory"]
    code, out, _ = run(capsys, QWEN8, "--json", "--gpus", "8", "--strategy", "zero3", "--grad-ckpt")
    mem = json.loads(out)["memory"]
    assert code == 0
    assert (mem["job"]["gpus"], mem["job"]["strategy"], mem["job"]["offload"]) == (8, "zero3", "none")
    assert sum(mem["breakdown"].values()) == mem["peak_bytes"] < one["peak_bytes"] / 4
    # DDP is the default past one GPU, and never holds less than one GPU alone
    code, out, _ = run(capsys, QWEN8, "--json", "--gpus", "2")
    ddp = json.loads(out)["memory"]
    assert code == 0 and ddp["job"]["strategy"] == "ddp" and ddp["peak_bytes"] >= one["peak_bytes"]
    # ZeRO-Offload moves the optimizer to the CPU and says how much CPU memory a node needs
    code, out, _ = run(capsys, QWEN8, "--json", "--gpus", "8", "--strategy", "zero3", "--offload", "optimizer")
    off = json.loads(out)["memory"]
    assert code == 0 and off["breakdown"]["optimizer_state"] == 0 and off["offload_cpu_bytes_per_node"] > 0
    code, out, _ = run(capsys, QWEN8, "--gpus", "8", "--strategy", "zero3", "--offload", "optimizer")
    assert code == 0 and "of CPU memory per node" in words(out)


@pytest.mark.parametrize("args, key, value", [
    (("--strategy", "zero3"), "strategy", "'zero3'"),  # ZeRO-3 on one GPU
    (("--gpus", "3", "--strategy", "tp"), "gpus", "3"),  # 32 heads do not split over 3
    (("--gpus", "64", "--strategy", "pp"), "gpus", "64"),  # more stages than the 36 layers
    (("--gpus", "2", "--offload", "optimizer"), "offload", "'optimizer'"),  # ZeRO-Offload under ddp
    (("--gpus", "2", "--strategy", "fsdp", "--offload", "optimizer"), "offload", "'optimizer'"),
    (("--gpus", "2", "--strategy", "tp", "--method", "inference", "--offload", "params"), "offload", "'params'"),
    (("--gpus", "16", "--strategy", "fsdp+ep"), "strategy", "'fsdp+ep'"),  # a dense model has no experts to spread
])
def test_impossible_setups_exit_2_naming_key_and_value(capsys, args, key, value):
    code, out, err = run(capsys, QWEN8, *args)
    assert code == 2 and out == ""
    assert f"key '{key}' = {value}" in words(err)


def test_gpus_below_one_exits_2(capsys):
    code, _, err = run(capsys, QWEN8, "--gpus", "0")
    assert code == 2 and "--gpus" in err


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps table cells at 80 columns


def test_plan_prints_the_setups_and_serving_speeds(capsys, wide):
    code, out, _ = run(capsys, QWEN8, "--plan")
    text = words(out)
    assert code == 0
    assert "Setups that hold batch 1" in text and "Serving speed on the fewest GPUs with tensor parallelism" in text
    assert "Setups that run it: Full fine-tune:" in text and "QLoRA:" in text and "tokens/s per sequence" in text
    for method in ("Full fine-tune", "LoRA", "QLoRA", "Serving"):
        assert f"│ {method} " in out
    assert "smallest" in text and "cheapest" in text


def test_plan_of_an_exact_job_shows_only_its_method(capsys, wide):
    code, out, _ = run(capsys, QWEN8, "--method", "qlora", "--grad-ckpt", "--plan")
    assert code == 0
    assert "│ QLoRA " in out and "│ Full fine-tune " not in out and "│ LoRA " not in out
    assert "Serving speed" not in out and "Largest batch per card" not in out
    code, out, _ = run(capsys, QWEN8, "--method", "inference", "--plan")
    assert code == 0 and "│ Serving " in out and "Serving speed" in out and "│ QLoRA " not in out


def test_an_exact_job_leads_and_gets_a_verdict_per_card(capsys):
    code, out, _ = run(capsys, QWEN8, "--method", "qlora", "--grad-ckpt", "--batch", "4")
    text = words(out)
    assert code == 0
    lines = [line for line in out.split("\n") if line.strip()]
    assert words(lines[1]).startswith("This job (qlora, amp, nf4 base, r=16 on all-linear, adamw, checkpointed")
    assert text.index("This job") < text.index("Per card:") < text.index("The site's jobs")
    code, out, _ = run(capsys, QWEN8, "--json", "--method", "qlora", "--grad-ckpt", "--batch", "4")
    mem = json.loads(out)["memory"]
    for card in mem["cards"]:  # a card whose capacity holds the peak but not its headroom: test_card_verdict
        verdict = "fits" if mem["peak_bytes"] <= card["budget_bytes"] else \
            "is tight" if mem["peak_bytes"] <= card["capacity_bytes"] else "does not fit"
        assert f"{card['name']} {verdict} (" in text
    assert "T4 16 GB does not fit" in text and "H200 141 GB fits" in text
    # the same job spread over 8 GPUs with ZeRO-3 fits the T4
    code, out, _ = run(capsys, QWEN8, "--gpus", "8", "--strategy", "zero3", "--grad-ckpt")
    assert code == 0 and "per GPU, 8× GPUs with ZeRO-3" in words(out) and "A100 40 GB fits" in words(out)


@pytest.mark.parametrize("args, key", [
    (("--tokens", "4096"), "tokens"),
    (("--method", "inference", "--tokens", "1000", "--new-tokens", "100"), "new_tokens"),
    (("--serve-tokens", "4096"), "serve_tokens"),
])
def test_a_job_past_the_context_exits_2(capsys, args, key):
    code, out, err = run(capsys, GPT2, *args)
    assert code == 2 and out == ""
    # GPT-2's learned positions: the key its config names, and no word of a rope scaling it cannot have
    assert f"key '{key}'" in err and "context of 1,024 tokens (n_positions)" in words(err) and "rope" not in err


def test_past_the_context_with_a_stretching_rope_scaling_warns_and_prices_as_asked(capsys):
    """InternLM2.5's dynamic NTK scaling stretches its 32,768-token context with no known bound (sequence_limits)."""
    code, out, _ = run(capsys, INTERNLM, "--json", "--serve-tokens", "200000", "--tokens", "65536")
    report = json.loads(out)
    assert code == 0 and report["memory"]["serve_tokens"] == 200_000
    warnings = [f["message"] for f in report["findings"] if f["check"] == "context" and f["severity"] == "warning"]
    assert any(m.startswith("200,000 tokens per served sequence run past the model's context of 32,768 tokens "
                            "(max_position_embeddings); the config's rope scaling (dynamic) stretches it, so the "
                            "estimate is priced as asked (served at that length)") for m in warnings), warnings
    assert any(m.startswith("65,536 tokens run past") for m in warnings)
    code, out, _ = run(capsys, INTERNLM, "--serve-tokens", "200000")
    assert code == 0 and "[warning] context: 200,000 tokens per served sequence run past" in words(out)


@pytest.mark.parametrize("args, key, words_", [
    # Llama 3.1's llama3 scaling made its 131,072 tokens out of 8,192: nothing stretches past them
    ((LLAMA8, "--tokens", "200000"), "tokens", "which its rope scaling (llama3) was made for already"),
    ((LLAMA8, "--method", "inference", "--tokens", "131072", "--new-tokens", "100"), "new_tokens", "(llama3)"),
    ((LLAMA8, "--serve-tokens", "1000000"), "serve_tokens", "(llama3) was made for already"),
    # DeepSeek-V3's YaRN reaches 4,096 x 40 = 163,840, its max_position_embeddings
    (("deepseek-ai/DeepSeek-V3", "--tokens", "200000"), "tokens", "context of 163,840 tokens"),
])
def test_past_what_the_rope_scaling_reaches_exits_2(capsys, args, key, words_):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and f"key '{key}'" in err and words_ in words(err), err


def test_an_encoder_decoder_reads_and_writes_two_sequences_and_an_encoder_writes_none(capsys):
    """T5 summarises 512 input tokens into 200 (its config's task_specific_params): each within n_positions."""
    code, out, _ = run(capsys, "google-t5/t5-base", "--method", "inference", "--tokens", "512", "--new-tokens", "200")
    assert code == 0 and "batch 1 x 512 tokens + 200 generated" in words(out)
    code, _, err = run(capsys, "google-t5/t5-base", "--method", "inference", "--tokens", "512", "--new-tokens", "600")
    assert code == 2 and "600 generated tokens run past the model's context of 512 tokens (n_positions)" in words(err)
    code, out, err = run(capsys, BERT, "--method", "inference", "--tokens", "100", "--new-tokens", "10")
    assert code == 2 and out == "" and "an encoder reads whole sequences and generates no tokens" in words(err)


def test_serve_tokens_within_the_context_are_used_as_given(capsys):
    code, out, _ = run(capsys, GPT2, "--json", "--serve-tokens", "1000")
    report = json.loads(out)
    assert code == 0 and report["memory"]["serve_tokens"] == 1000
    assert not [f for f in report["findings"] if f["check"] == "context" and "serving" in f["message"]]


def test_the_site_caps_serving_at_the_context_in_words_for_its_kind(capsys):
    _, out, _ = run(capsys, GPT2, "--json")
    decoder = [f["message"] for f in json.loads(out)["findings"] if "serving is sized" in f["message"]]
    _, out, _ = run(capsys, BERT, "--json")
    encoder = [f["message"] for f in json.loads(out)["findings"] if "serving is sized" in f["message"]]
    assert len(decoder) == len(encoder) == 1
    assert "1,024 tokens per sequence, not 4,096" in decoder[0] and "KV cache stops there" in decoder[0]
    assert "encoder" not in decoder[0]
    assert "512 tokens per sequence, not 4,096" in encoder[0] and "an encoder reads whole sequences" in encoder[0]


def test_fsdp_ep_spreads_a_mixture_of_experts_over_each_node(capsys):
    args = ("Qwen/Qwen3-30B-A3B", "--json", "--method", "lora", "--gpus", "16", "--grad-ckpt")
    code, out, _ = run(capsys, *args, "--strategy", "fsdp")
    fsdp = json.loads(out)["memory"]
    code, out, _ = run(capsys, *args, "--strategy", "fsdp+ep")
    ep = json.loads(out)["memory"]
    assert code == 0 and ep["job"]["strategy"] == "fsdp+ep" and ep["peak_bytes"] < fsdp["peak_bytes"]
    code, out, err = run(capsys, "Qwen/Qwen3-30B-A3B", "--gpus", "12", "--strategy", "fsdp+ep")
    assert code == 2 and "key 'gpus' = 12" in words(err) and "whole nodes of 8" in words(err)


def test_the_serving_headline_names_the_cheapest_per_token_setup_too(capsys, wide):
    """The serving headline's setup is the cheapest per hour (a server for one user). Where another card's setup
    costs less per output token at its full concurrency, the sentence names that one too, with its price and
    concurrency read from the same Report's serving rows; where it is the same setup, nothing is added."""
    import re

    from generator import format as f

    seen_other = seen_same = False
    for model in ("meta-llama/Llama-3.1-70B-Instruct", QWEN8, "Qwen/Qwen3-235B-A22B"):
        code, out, _ = run(capsys, model, "--json")
        serving = json.loads(out)["serving"]
        code, out, _ = run(capsys, model)
        text = words(out)
        assert code == 0
        serve = text.split("Serving: ", 1)[1].split(". ", 1)[0]
        cheapest = min((s for s in serving if s["usd_per_million_output_tokens"] is not None),
                       key=lambda s: (s["usd_per_million_output_tokens"], s["gpus"]))
        head = re.match(r"(\d+)× (.+?)(?: with .+?)?, about", serve)
        assert head is not None, serve
        same = (int(head.group(1)), head.group(2)) == (cheapest["gpus"], cheapest["gpu_model"])
        if same:
            seen_same = True
            assert "cheapest per token" not in serve
        else:
            seen_other = True
            clause = serve.split("; the cheapest per token at full load: ", 1)[1]
            assert clause.startswith(f"{cheapest['gpus']}× {cheapest['gpu_model']}")
            assert f"{f.usd(cheapest['usd_per_million_output_tokens'])} per M output tokens" in clause
            assert clause.endswith(f"at {f.count(cheapest['max_concurrency'])} sequences")
    # Llama-3.1-70B: 2x A100 80GB the cheapest per hour (3 sequences), 2x H200 per token (88); Qwen3-235B-A22B:
    # 8x A100 80GB both
    assert seen_other and seen_same


def test_a_yarn_block_added_to_a_config_stretches_it_to_original_times_factor(capsys, tmp_path):
    """Qwen2.5's model card adds rope_scaling {type: yarn, factor: 4, original_max_position_embeddings: 32768} to
    its 32,768-token config for 131,072 tokens: priced with a warning up to there, refused past it."""
    cfg = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 256, "intermediate_size": 688,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
           "max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                              "original_max_position_embeddings": 32768}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = run(capsys, str(path), "--tokens", "100000")
    assert code == 0 and "the config's rope scaling (yarn, which reaches 131,072 tokens) stretches it" in words(out)
    code, _, err = run(capsys, str(path), "--tokens", "140000")
    assert code == 2 and "past the 131,072 tokens its rope scaling (yarn) reaches" in words(err)


def test_the_json_job_says_what_a_full_fine_tune_holds_its_weights_in(capsys):
    """A user read memory.job.weights = "bf16" beside a full AMP fine-tune whose breakdown holds 4 B per
    parameter: the field now names the trained weights' dtype for a full fine-tune, the frozen base's otherwise."""
    held = {}
    for args in (("--method", "full"), ("--method", "full", "--precision", "bf16"), ("--method", "lora"),
                 ("--method", "qlora")):
        code, out, _ = run(capsys, QWEN8, "--json", *args)
        assert code == 0
        held[args[1:]] = json.loads(out)["memory"]["job"]["weights"]
    assert held == {("full",): "fp32", ("full", "--precision", "bf16"): "bf16", ("lora",): "bf16", ("qlora",): "nf4"}


@pytest.mark.parametrize("scaling, key", [
    ({"type": "yarn", "factor": "4", "original_max_position_embeddings": 32768}, "rope_scaling.factor"),
    ({"type": "yarn", "factor": True}, "rope_scaling.factor"),
    ({"type": "yarn", "factor": 4, "original_max_position_embeddings": -1},
     "rope_scaling.original_max_position_embeddings"),
    ({"type": "yarn", "factor": 1e308, "original_max_position_embeddings": 1e308}, "rope_scaling.factor"),
])
def test_a_malformed_yarn_block_is_one_error_naming_its_key(capsys, tmp_path, scaling, key):
    """Past the context, a yarn block's reach is read: a factor that is no positive number, or one whose product
    overflows (it made an internal error), is bad input named by its key and value."""
    cfg = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 256, "intermediate_size": 688,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
           "max_position_embeddings": 32768, "rope_scaling": scaling}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = run(capsys, str(path), "--tokens", "100000")
    assert code == 2 and out == "" and f"key '{key}'" in err and err.count("\n") == 1, err


def test_a_length_past_the_context_names_the_key_as_the_config_has_it(capsys):
    """A review found bge-reranker-large's context named "(max_position_embeddings)" where that key is 514 (RoBERTa
    keeps two positions for its padding) and mT5's named "(mt5)", a class rather than a key (T5's relative positions
    have no such key: 512 is the reading's)."""
    assert main(["BAAI/bge-reranker-large", "--tokens", "513"]) == 2
    assert "context of 512 tokens (max_position_embeddings 514, less the 2 positions the model keeps for itself)" \
        in capsys.readouterr().err
    assert main(["google/mt5-small", "--tokens", "513"]) == 2
    assert "context of 512 tokens (n_positions: not in the config, taken as 512)" in capsys.readouterr().err
