"""CLI: exit codes and output for good, bad, hostile and unsupported input. Never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from generator.cli import main
from tests.conftest import ROOT, tiny_qwen2

SEED = "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5"


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write_config(tmp_path, cfg, name="model"):
    folder = tmp_path / name
    folder.mkdir()
    text = cfg if isinstance(cfg, str) else json.dumps(cfg)
    (folder / "config.json").write_text(text, encoding="utf-8")
    return folder


def test_folder_json_gives_a_full_report(tmp_path, capsys):
    code, out, err = run(capsys, str(write_config(tmp_path, tiny_qwen2())), "--json")
    assert code == 0 and err == ""
    report = json.loads(out)  # stdout holds only the JSON
    assert {"schema_version", "model", "params", "memory", "cost", "structure", "findings"} <= set(report)
    assert report["params"]["graph"] == 2_435_016
    card = report["memory"]["cards"][0]
    assert {"name", "memory_bytes", "train_full_max_batch", "train_lora_max_batch", "serve_max_batch", "split"} <= set(card)
    assert report["provenance"]["config_keys"]["hidden_size"] == {"value": 8, "source": "config:hidden_size"}


def test_config_json_path_and_snapshot_id(tmp_path, capsys):
    folder = write_config(tmp_path, tiny_qwen2())
    code, out, _ = run(capsys, str(folder / "config.json"), "--json")
    assert code == 0 and json.loads(out)["model"]["id"] == str(folder)
    code, out, _ = run(capsys, SEED, "--json")
    report = json.loads(out)
    assert code == 0 and report["model"]["id"] == SEED and report["model"]["downloads"] == 17_900_000


def test_terminal_summary_and_plan(capsys):
    code, out, _ = run(capsys, SEED, "--plan")
    assert code == 0
    assert "3.77 GB for a full fine-tune (fits one T4 16 GB)" in " ".join(out.split())
    assert "No finding on the reconstructed graph." in out
    assert "H200 141 GB" in out and "batch 34" in out and "$" in out  # plan table + cost
    # the default exact job is the site's full fine-tune at batch 1: its peak, phase and parts
    assert "peaks at 3.77 GB allocated on one GPU, during loss (logits): weights 9.74 MB" in " ".join(out.split())


def test_job_overrides_change_the_report(capsys):
    _, base, _ = run(capsys, SEED, "--json")
    _, more, _ = run(capsys, SEED, "--json", "--tokens", "4096", "--batch", "8", "--lora-rank", "64",
                     "--serve-tokens", "8192")
    base, more = json.loads(base), json.loads(more)
    a = more["memory"]["assumptions"]
    assert (a["train_tokens"], a["job_batch"], a["lora_rank"], a["serve_tokens"]) == (4096, 8, 64, 8192)
    assert more["memory"]["train_full_bytes_batch1"] > base["memory"]["train_full_bytes_batch1"]
    assert more["params"]["lora_adapter"] == 4 * base["params"]["lora_adapter"]


EXACT = ("--method", "lora", "--precision", "bf16", "--optimizer", "sgd", "--grad-ckpt", "--lora-rank", "8",
         "--lora-targets", "q_proj,v_proj", "--batch", "2", "--tokens", "256", "--attention", "eager",
         "--metric", "reserved")


def test_an_older_bitsandbytes_prices_the_saved_4bit_matmul_inputs(capsys):
    qlora = ("--json", "--method", "qlora", "--tokens", "512")
    peaks = {}
    for version in ("", "0.41.1", "0.43.2", "0.50.0"):
        code, out, _ = run(capsys, SEED, *qlora, *(("--bnb-version", version) if version else ()))
        assert code == 0
        mem = json.loads(out)["memory"]
        assert mem["job"]["bnb_version"] == version
        peaks[version] = mem["peak_bytes"]
    # bitsandbytes < 0.43.2: MatMul4Bit saved its input (ctx.tensors = (A, B)); from 0.43.2 on it does not
    assert peaks["0.41.1"] > peaks[""] == peaks["0.43.2"] == peaks["0.50.0"]
    code, _, err = run(capsys, SEED, *qlora, "--bnb-version", "latest")
    assert code == 2 and "bnb_version" in err and "'latest'" in err and err.count("\n") == 1


def test_an_older_transformers_prices_generates_two_caches(capsys):
    serve = ("--json", "--method", "inference", "--tokens", "512", "--new-tokens", "64", "--batch", "4")
    peaks = {}
    for version in ("", "4.35.2", "4.36.0"):
        code, out, _ = run(capsys, SEED, *serve, *(("--transformers-version", version) if version else ()))
        assert code == 0
        mem = json.loads(out)["memory"]
        assert mem["job"]["transformers_version"] == version
        peaks[version] = mem["breakdown"]["kv_cache"]
    # before 4.36 each decode step's new tuples (576 tokens, as priced) live beside the previous step's (575)
    assert peaks["4.35.2"] == peaks[""] * (576 + 575) // 576 and peaks["4.36.0"] == peaks[""]
    code, _, err = run(capsys, SEED, *serve, "--transformers-version", "v4")
    assert code == 2 and "transformers_version" in err and "'v4'" in err and err.count("\n") == 1


def test_exact_setup_options_reach_the_report(capsys):
    code, out, _ = run(capsys, SEED, "--json", *EXACT)
    mem = json.loads(out)["memory"]
    assert code == 0
    assert mem["job"] == {"method": "lora", "precision": "bf16", "weights": "bf16", "double_quant": False,
                          "optimizer": "sgd", "grad_ckpt": True, "lora_rank": 8, "lora_targets": "q_proj,v_proj",
                          "batch": 2, "tokens": 256, "new_tokens": 0, "attention": "eager", "metric": "reserved",
                          "recipe": "", "adapter_dtype": "", "lora_dropout": 0.0, "keep_outputs": False,
                          "upcast_fp32": False, "loss": "hf", "kernels": "cuda", "bnb_version": "",
                          "transformers_version": "", "scan": "", "grad_accum": 1, "offload_checkpoints": False,
                          "images": None, "padded": False, "tower_adapters": True,
                          "gpus": 1, "strategy": "single",
                          "offload": "none", "sync_each_batch": False, "mixed_units": False}
    assert sum(mem["breakdown"].values()) == mem["peak_bytes"] and mem["peak_phase"] == "loss (logits)"
    assert mem["breakdown"]["gradients"] == 0 and mem["breakdown"]["optimizer_state"] == 0  # SGD, no grads yet
    assert set(mem["peak_phase_by_method"]) == {"train_full", "train_lora", "serve"}
    _, base, _ = run(capsys, SEED, "--json")
    base = json.loads(base)["memory"]
    assert base["peak_bytes"] == base["train_full_bytes_batch1"]  # the default job is the site's
    assert base["job"]["method"] == "full" and base["job"]["tokens"] == base["train_tokens"]
    code, out, _ = run(capsys, SEED, *EXACT)
    assert code == 0 and "This job (lora, bf16, bf16 base, r=8 on q_proj,v_proj, sgd, checkpointed, eager, batch 2" \
        in " ".join(out.split())
    code, out, _ = run(capsys, SEED, "--json", "--method", "inference", "--new-tokens", "32", "--batch", "4")
    mem = json.loads(out)["memory"]
    assert code == 0 and mem["job"]["precision"] == "bf16" and mem["peak_phase"] in ("prefill", "decode")
    assert mem["breakdown"]["kv_cache"] > 0 and mem["breakdown"]["gradients"] == 0


@pytest.mark.parametrize("args, needle", [
    (("--method", "dpo"), "argument --method: invalid choice: 'dpo'"),
    (("--weights", "int3"), "argument --weights: invalid choice: 'int3'"),
    (("--metric", "rss"), "argument --metric: invalid choice: 'rss'"),
    (("--batch", "x"), "argument --batch: invalid int value: 'x'"),
])
def test_bad_exact_setup_values_exit_2(capsys, args, needle):
    with pytest.raises(SystemExit) as exc:
        main([SEED, *args])
    assert exc.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.parametrize("args, needle", [
    (("--method", "lora", "--lora-targets", "c_attn"), "key 'lora_targets' = 'c_attn': no Linear"),
    (("--new-tokens", "8"), "key 'new_tokens' = 8: is for method inference"),
    (("--new-tokens", "-1", "--method", "inference"), "'--new-tokens' = -1"),
    (("--weights", "nf4"), "key 'weights' = 'nf4': a full fine-tune trains"),
    (("--method", "qlora", "--weights", "bf16"), "key 'weights' = 'bf16': QLoRA needs a quantised base"),
    (("--method", "inference", "--grad-accum", "4"), "key 'grad_accum' = 4: is for full, lora, qlora jobs only"),
    (("--method", "inference", "--grad-ckpt"), "key 'grad_ckpt' = True: is for full, lora, qlora jobs only"),
    (("--method", "inference", "--optimizer", "sgd"), "key 'optimizer' = 'sgd': is for full, lora, qlora jobs only"),
    (("--method", "inference", "--lora-dropout", "0.05"), "key 'lora_dropout' = 0.05: is for lora, qlora jobs only"),
    (("--method", "inference", "--adapter-dtype", "bf16"), "key 'adapter_dtype' = 'bf16': is for lora, qlora jobs"),
    (("--method", "inference", "--recipe", "hf-trainer"), "key 'recipe' = 'hf-trainer': is a training recipe"),
    (("--method", "full", "--lora-targets", "q_proj"), "key 'lora_targets' = 'q_proj': is for lora, qlora jobs only"),
    (("--method", "full", "--lora-dropout", "0.1"), "key 'lora_dropout' = 0.1: is for lora, qlora jobs only"),
    (("--method", "full", "--no-tower-adapters"), "key 'tower_adapters' = False: is for lora, qlora jobs only"),
    (("--method", "inference", "--lora-targets", "q_proj"), "key 'lora_targets' = 'q_proj': is for lora, qlora"),
])
def test_options_the_model_cannot_take_give_one_line(capsys, args, needle):
    code, out, err = run(capsys, SEED, *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_two_card_split_is_reported_where_batch_1_does_not_fit(tmp_path, capsys):
    big = tiny_qwen2(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, num_hidden_layers=80,
                     intermediate_size=28672, vocab_size=128256)
    code, out, _ = run(capsys, str(write_config(tmp_path, big)), "--json")
    cards = json.loads(out)["memory"]["cards"]
    h200 = cards[-1]
    assert code == 0 and h200["train_full_max_batch"] == 0
    split = {s["method"]: s for s in h200["split"]}
    assert split["train_full"]["cards"] == 2 and 0 < split["train_full"]["cut_after_layer"] < 80


HOSTILE = {
    # Without the standard keys an unknown model_type stays unsupported (with them it is estimated, marked approximate).
    "script in model_type": ({"model_type": "<script>alert(1)</script>", "layers": 2}, 3, "model_type"),
    "markup in architectures": (tiny_qwen2(architectures=["[bold red]x[/]", "<img src=x onerror=alert(1)>"]), 0, None),
    "negative size": (tiny_qwen2(hidden_size=-8), 2, "'hidden_size' = -8"),
    "zero layers": (tiny_qwen2(num_hidden_layers=0), 2, "num_hidden_layers"),
    "huge size": (tiny_qwen2(vocab_size=10**18), 2, "'vocab_size' = 1000000000000000000"),
    "float size": (tiny_qwen2(intermediate_size=32.5), 2, "'intermediate_size' = 32.5"),
    "string size": (tiny_qwen2(num_attention_heads="4"), 2, "'num_attention_heads' = '4'"),
    "bool size": (tiny_qwen2(num_hidden_layers=True), 2, "num_hidden_layers"),
    "missing key": ({k: v for k, v in tiny_qwen2().items() if k != "intermediate_size"}, 0, None),
    "missing model_type": ({k: v for k, v in tiny_qwen2().items() if k != "model_type"}, 2, "model_type"),
    "non-JSON": ("{not json", 2, "not valid JSON"),
    "JSON list": ("[1, 2, 3]", 2, "JSON object"),
    "NaN": ('{"model_type": "qwen2", "hidden_size": NaN}', 2, "'hidden_size' = nan"),
    "heads not dividing": (tiny_qwen2(num_attention_heads=3), 2, "does not divide num_attention_heads 3"),
    "architectures not a list": (tiny_qwen2(architectures="Qwen2ForCausalLM"), 2, "architectures"),
    "unsupported": ({"model_type": "totally_unknown_arch", "width": 8}, 3, "is not supported yet; supported: "),
    "deep nesting": ('{"model_type": "qwen2", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", 2, "nested"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_config_gives_one_clean_line(tmp_path, capsys, case):
    cfg, expected_code, needle = HOSTILE[case]
    folder = write_config(tmp_path, cfg)
    code, out, err = run(capsys, str(folder), "--json")
    assert code == expected_code, err
    if code:
        assert out == ""
        assert err.count("\n") == 1 and err.startswith("neurarch-trace: ") and "Traceback" not in err
        assert str(folder) in err  # names the model
        assert needle in err


def test_missing_key_takes_the_transformers_default(tmp_path, capsys):
    cfg = {k: v for k, v in tiny_qwen2().items() if k != "intermediate_size"}
    code, out, _ = run(capsys, str(write_config(tmp_path, cfg)), "--json")
    used = json.loads(out)["provenance"]["config_keys"]["intermediate_size"]
    assert code == 0 and used == {"value": 22016, "source": "default:qwen2"}  # Qwen2Config(intermediate_size=22016)


def test_hostile_strings_do_not_become_rich_markup(tmp_path, capsys):
    cfg = tiny_qwen2(bos_token_id="[link=http://x]click[/link]")
    code, out, _ = run(capsys, str(write_config(tmp_path, cfg)))
    assert code == 0 and "[link=http://x]click[/link]" in out


def test_unsupported_lists_what_is_supported(tmp_path, capsys):
    code, _, err = run(capsys, str(write_config(tmp_path, {"model_type": "totally_unknown_arch", "width": 8})))
    assert code == 3 and "'totally_unknown_arch'" in err and "llama" in err and "qwen3" in err and "mamba" in err


def test_bad_model_argument_and_bad_options(tmp_path, capsys):
    code, _, err = run(capsys, str(tmp_path / "nope" / "config.json"))
    assert code == 2 and "not a Hub repo id" in err
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2 and "no config.json" in err
    code, _, err = run(capsys, SEED, "--tokens", "0")
    assert code == 2 and "--tokens" in err
    with pytest.raises(SystemExit) as exc:
        main([SEED, "--tokens", "many"])
    assert exc.value.code == 2


def test_oversized_config_is_refused_without_reading_it(tmp_path, capsys, monkeypatch):
    import generator.resolve as resolve

    monkeypatch.setattr(resolve, "MAX_CONFIG_BYTES", 1000)
    code, _, err = run(capsys, str(write_config(tmp_path, tiny_qwen2(padding="x" * 2000))))
    assert code == 2 and "over the 1,000-byte limit" in err


def test_one_config_size_limit_for_local_files_and_the_hub(tmp_path, capsys):
    """resolve.py (local files) and hub/client.py (the Hub) refuse above the same 8 MiB, as the README says."""
    from generator import records, resolve
    from generator.hub import client

    assert resolve.MAX_CONFIG_BYTES == client.MAX_CONFIG_BYTES == records.MAX_CONFIG_BYTES == 8 * 2**20
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "A `config.json` over 8 MiB, a local file or on the Hub, is refused" in readme
    assert "config.json` over 8 MiB is refused from the size its HEAD reports" in readme
    big = tmp_path / "config.json"
    with big.open("wb") as fh:
        fh.truncate(8 * 2**20 + 1)
    code, out, err = run(capsys, str(big))
    assert code == 2 and out == ""
    assert f"{tmp_path}: config.json is 8,388,609 bytes, over the 8,388,608-byte limit" in err


def test_console_script_end_to_end(tmp_path):
    folder = write_config(tmp_path, tiny_qwen2())
    proc = subprocess.run([sys.executable, "-m", "generator.cli", str(folder), "--json"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0 and json.loads(proc.stdout)["params"]["graph"] == 2_435_016
    proc = subprocess.run([sys.executable, "-m", "generator.cli", str(tmp_path / "x.json")], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_summary_gives_a_mixture_of_experts_its_active_parameters(capsys):
    """Issue 16 item 8: the JSON had params.active; the summary now says it (Qwen3-30B-A3B: 3,353,032,704)."""
    code, out, _ = run(capsys, "Qwen/Qwen3-30B-A3B")
    assert code == 0
    assert "Active per token: 3,353,032,704 of 30,532,122,624 (8 of 128 routed experts per MoE layer)" in \
        " ".join(out.split())
    code, out, _ = run(capsys, "Qwen/Qwen3-8B")
    assert code == 0 and "Active per token" not in out


# --- every error the command prints is a TraceError ------------------------------------------------------

def test_a_page_that_cannot_be_written_names_the_option_and_the_path(tmp_path, capsys):
    target = tmp_path / "no-such-folder" / "page.html"
    code, out, err = run(capsys, SEED, "--html", str(target))
    assert (code, out) == (2, "")
    assert err.startswith("neurarch-trace: command line: key '--html' = '") and err.count("\n") == 1
    assert err.endswith(": cannot write the page (No such file or directory)\n")


def test_a_file_the_system_refuses_is_one_line_naming_the_command_and_the_file(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code, out, err = run(capsys, "build", "--out", str(tmp_path / "file" / "public"), "--no-search", "--jobs", "1")
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith("neurarch-trace: build: file ") and str(tmp_path / "file") in err


@pytest.mark.parametrize(("raised", "code", "message"), [
    (KeyError("layers"), 70, f"neurarch-trace: {SEED}: internal error (KeyError: 'layers'); please report it\n"),
    (RecursionError("maximum recursion depth exceeded"), 2, f"neurarch-trace: {SEED}: input is nested too deeply\n"),
    (PermissionError(13, "Permission denied", "/x/y"), 2, f"neurarch-trace: {SEED}: file '/x/y': Permission denied\n"),
])
def test_an_unexpected_exception_is_printed_as_a_trace_error(monkeypatch, capsys, raised, code, message):
    """Whatever escapes (a bug, input too deep for Python, a refused file) is shown as a TraceError: one line
    naming the model, with its own exit code, never a traceback."""
    import generator.pipeline as pipeline

    def fails(*args, **kwargs):
        raise raised

    monkeypatch.setattr(pipeline, "report_for_record", fails)
    assert run(capsys, SEED) == (code, "", message)


def test_the_command_modules_raise_only_trace_errors():
    """cli.py, resolve.py, measure/cli.py and hub/crawl.py raise TraceError subclasses only (argparse's own
    ArgumentTypeError aside, which argparse prints as a usage error, exit 2)."""
    import ast
    import importlib

    from generator.errors import TraceError

    offenders = []
    for name in ("generator.cli", "generator.resolve", "generator.measure.cli", "generator.hub.crawl"):
        module = importlib.import_module(name)
        for node in ast.walk(ast.parse(open(module.__file__, encoding="utf-8").read())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            what = ast.unparse(node.exc.func)
            if what in ("SystemExit", "argparse.ArgumentTypeError"):  # the exit status; argparse's usage error
                continue
            if what == "exc.for_model":  # MeasureError.for_model: the same MeasureError, naming the model
                continue
            raised = getattr(module, what, None) if isinstance(node.exc.func, ast.Name) else None
            if callable(raised) and not isinstance(raised, type):  # a function making the error: its return type
                raised = getattr(module, raised.__annotations__.get("return", ""), None)
            if not (isinstance(raised, type) and issubclass(raised, TraceError)):
                offenders.append(f"{name}:{node.lineno} raises {what}")
    assert offenders == []


def test_a_recipe_sets_its_options_and_explicit_flags_override_it(capsys):
    code, out, _ = run(capsys, SEED, "--json", "--recipe", "trl-sft-qlora")
    job = json.loads(out)["memory"]["job"]
    assert code == 0
    assert (job["recipe"], job["method"], job["weights"], job["double_quant"], job["optimizer"], job["grad_ckpt"],
            job["upcast_fp32"], job["lora_dropout"], job["loss"]) == \
        ("trl-sft-qlora", "qlora", "nf4", True, "paged-adamw", True, True, 0.05, "trl-chunked")
    _, out, _ = run(capsys, SEED, "--json", "--recipe", "trl-sft-qlora", "--no-grad-ckpt", "--lora-dropout", "0",
                    "--adapter-dtype", "bf16")
    job = json.loads(out)["memory"]["job"]
    assert (job["grad_ckpt"], job["lora_dropout"], job["adapter_dtype"]) == (False, 0.0, "bf16")


@pytest.mark.parametrize("name", ["trl-sft", "litgpt", "axolotl", "torchtune"])
def test_a_lora_recipe_prices_lora_unless_told_otherwise(capsys, name):
    """Each of these recipes reads a LoRA run (its summary says so): without --method it prices LoRA, not the
    command's default full fine-tune; --method still overrides it."""
    code, out, _ = run(capsys, SEED, "--json", "--recipe", name)
    assert code == 0 and json.loads(out)["memory"]["job"]["method"] == "lora"
    code, out, _ = run(capsys, SEED, "--json", "--recipe", name, "--method", "full")
    job = json.loads(out)["memory"]["job"]
    assert code == 0 and job["method"] == "full"
    # a full fine-tune has no adapters: the recipe's adapter options are dropped, not carried unread
    assert (job["lora_targets"], job["adapter_dtype"], job["lora_dropout"]) == ("all-linear", "", 0.0)


def test_trl_sft_adapts_peft_default_targets(capsys):
    """TRL's SFT leaves lora_target_modules None, so peft adapts its own targets for the model type: the recipe
    prices those (q and v on a llama), said as such, not every Linear; --lora-targets overrides."""
    code, out, _ = run(capsys, SEED, "--json", "--recipe", "trl-sft")
    job = json.loads(out)["memory"]["job"]
    assert code == 0 and job["lora_targets"] == "peft-default"
    code, text, _ = run(capsys, SEED, "--recipe", "trl-sft")
    assert code == 0 and "peft's default targets" in " ".join(text.split())
    _, every, _ = run(capsys, SEED, "--json", "--recipe", "trl-sft", "--lora-targets", "all-linear")
    assert json.loads(every)["memory"]["peak_bytes"] > json.loads(out)["memory"]["peak_bytes"]

def test_lora_dropout_and_fp32_adapters_cost_memory(capsys):
    def peak(*flags):
        _, out, _ = run(capsys, SEED, "--json", "--method", "lora", "--precision", "bf16", *flags)
        return json.loads(out)["memory"]["peak_bytes"]

    plain = peak("--adapter-dtype", "bf16")
    assert peak("--adapter-dtype", "fp32") > plain
    assert peak("--adapter-dtype", "bf16", "--lora-dropout", "0.05") > plain


def test_falcon_multi_query_names_the_math_kernel(capsys):
    """falcon-7b's multi-query attention runs SDPA's math kernel (FINDINGS.md F15): the page's finding says so and
    the full fine-tune peaks at the attention backward, where the fp32 score gradients live."""
    config = str(ROOT / "data" / "measurements" / "configs" / "falcon.json")
    code, out, err = run(capsys, config)
    assert code == 0 and err == ""
    assert "attention_math_kernel" in out and "backward (attention scores' gradients)" in out
    code, out, _ = run(capsys, config, "--json")
    report = json.loads(out)
    assert code == 0 and any(f["check"] == "attention_math_kernel" and f["severity"] == "warning"
                             for f in report["findings"])


def test_a_reserved_peak_says_what_the_allocator_adds_with_the_measured_figures(capsys, tmp_path, monkeypatch):
    """--metric reserved / nvidia-smi: the summary says the allocator's other cached blocks are not priced, and gives
    the replayed steps' figures from accuracy.json (FINDINGS.md F49); without the table, it says so without them."""
    from generator.site import accuracy_page

    pooled = next(a for a in json.loads(accuracy_page.ACCURACY_JSON.read_text(encoding="utf-8"))["allocator"]
                  if a["setup"] == "every setup at one length")
    code, out, err = run(capsys, SEED, "--method", "lora", "--metric", "reserved")
    text = " ".join(out.split())
    assert code == 0 and err == ""
    assert "Reserved here is the live peak plus the freed bf16 logits' blocks." in text
    assert f"{pooled['runs']:,} steps replayed through it, each at one length, ran a median {pooled['reserved_over_median_pct']:.1f}%" in text
    assert f"read {abs(pooled['reserved_error_mean_signed_pct']):.1f}% low on average" in text
    code, out, _ = run(capsys, SEED, "--method", "lora", "--metric", "nvidia-smi")
    assert code == 0 and "This is reserved memory plus the CUDA context" in " ".join(out.split())
    code, out, _ = run(capsys, SEED, "--method", "lora")  # allocated: nothing to say
    assert code == 0 and "caching allocator" not in out
    monkeypatch.setattr(accuracy_page, "ACCURACY_JSON", tmp_path / "missing.json")
    code, out, _ = run(capsys, SEED, "--method", "lora", "--metric", "reserved")
    text = " ".join(out.split())
    assert code == 0 and "The caching allocator keeps other freed blocks too, not priced." in text
    assert "replayed" not in text


def test_a_target_peft_cannot_adapt_exits_2_naming_it(capsys):
    """gemma-4-26B-A4B with --lora-targets q_proj,v_proj: peft refuses its tower's Gemma4ClippableLinear of that name,
    so the command exits 2 with one line naming the model, the key and the value; --no-tower-adapters prices it."""
    code, out, err = run(capsys, "google/gemma-4-26B-A4B", "--method", "lora", "--lora-targets", "q_proj,v_proj")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "google/gemma-4-26B-A4B" in err and "lora_targets" in err and "'q_proj'" in err
    code, _, _ = run(capsys, "google/gemma-4-26B-A4B", "--method", "lora", "--lora-targets", "q_proj,v_proj",
                     "--no-tower-adapters")
    assert code == 0


def test_a_quantised_checkpoint_count_is_matched_as_stored(capsys):
    """gpt-oss-20b's MXFP4 checkpoint holds 21,511,953,984 stored elements for 20,914,757,184 parameters (the
    snapshot's safetensors.total): the count line names the first as stored elements, never "=" the second."""
    code, out, err = run(capsys, "openai/gpt-oss-20b")
    assert code == 0
    line = " ".join(out.split("Parameters: ", 1)[1].split("\n\n")[0].split())
    assert line.startswith("20,914,757,184 from the graph; quantised, they are stored as 21,511,953,984 elements, "
                           "the checkpoint's count (exact).")
    assert "= 21,511,953,984" not in out


def test_an_error_in_a_value_the_recipe_set_says_so(capsys):
    """A review found `--recipe litgpt` on DeepSeek-V2-Lite refused as "key 'lora_targets' = 'q'", a key the user
    never typed: the message now says the recipe set it and which flag replaces it; a value typed says nothing more."""
    code, _, err = run(capsys, "deepseek-ai/DeepSeek-V2-Lite-Chat", "--recipe", "litgpt")
    assert code == 2 and err.startswith("neurarch-trace: deepseek-ai/DeepSeek-V2-Lite-Chat: key 'lora_targets' = 'q'")
    assert err.endswith("(the value --recipe litgpt sets; --lora-targets replaces it)\n") and err.count("\n") == 1
    code, _, err = run(capsys, "deepseek-ai/DeepSeek-V2-Lite-Chat", "--recipe", "litgpt", "--lora-targets", "q")
    assert code == 2 and "--recipe" not in err
    code, _, err = run(capsys, "Qwen/Qwen3-0.6B", "--batch", "0")
    assert code == 2 and err == "neurarch-trace: Qwen/Qwen3-0.6B: key '--batch' = 0: must be a positive integer\n"
