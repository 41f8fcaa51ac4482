"""The model pages' calculator without a browser: one flags → Job mapping (job_flags) for the CLI and the page,
the page's entry point (generator.calculator) against the CLI's --json for the same flags, the shipped zip
(deterministic, pure, enough on its own), the pinned Pyodide, and the build with and without it.
The same comparison in a real browser is tests/test_calculator_browser.py."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
import tokenize
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from rich.console import Console

from generator import calculator, cli, job_flags
from generator.estimator.memory import job_options as j
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import load_settings
from generator.site import calculator as site_calc
from generator.site.build import run_build
from tests.conftest import ROOT

SETTINGS = load_settings()
SITE = calculator.load_site(json.loads(site_calc.site_json(SETTINGS, True)))
# Ten models of different kinds: learned positions (gpt2), a tied head (Qwen3-0.6B), GQA (Llama-3.1-8B), MoE in
# FP8 (Qwen3-30B-A3B-FP8), sliding windows (gemma-2), MLA (DeepSeek-V2-Lite), an encoder (BERT), an
# encoder-decoder (T5), a VLM (Qwen2.5-VL) and MXFP4 experts (gpt-oss).
MODELS = ("openai-community/gpt2", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B-FP8",
          "google/gemma-2-9b", "deepseek-ai/DeepSeek-V2-Lite-Chat", "google-bert/bert-base-uncased",
          "google-t5/t5-small", "Qwen/Qwen2.5-VL-7B-Instruct", "openai/gpt-oss-20b")


def available_models() -> list[str]:
    return [m for m in MODELS if load_record(DEFAULT_SNAPSHOT_DIR, m) is not None]


def cli_json(model: str, args: list[str]) -> tuple[int, dict | None, str]:
    """`neurarch-trace MODEL ARGS --json`, in this process: exit code, the Report (or None), stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([model, *args, "--json"])
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return code, (json.loads(out.getvalue()) if code == 0 else None), " ".join(err.getvalue().split())


def page_answer(model: str, query: str) -> dict:
    record = load_record(DEFAULT_SNAPSHOT_DIR, model)
    assert record is not None
    return calculator.calculate(json.dumps(record.config()), model, SITE, query)


@st.composite
def setups(draw: st.DrawFn, method: str | None = None) -> dict[str, str]:
    """A setup as the page's query holds it (the CLI's flag names), mostly valid for the method."""
    method = method or draw(st.sampled_from(j.METHODS))
    q = {"method": method}
    if draw(st.booleans()):
        q["tokens"] = str(draw(st.sampled_from([1, 7, 128, 512, 1000, 2048, 4096, 32768])))
    if draw(st.booleans()):
        q["batch"] = str(draw(st.integers(1, 64)))
    if method != "full" or draw(st.booleans()):
        q["precision"] = draw(st.sampled_from(j.PRECISIONS))
    if method == "qlora":
        q["weights"] = draw(st.sampled_from(["nf4", "int8", "gptq-int4", "fp8"]))
    elif method in ("lora", "inference") and draw(st.booleans()):
        q["weights"] = draw(st.sampled_from(j.WEIGHTS))
    if method in ("lora", "qlora"):
        if draw(st.booleans()):
            q["lora-rank"] = str(draw(st.sampled_from([1, 4, 8, 16, 64, 256])))
        if draw(st.booleans()):
            q["lora-targets"] = draw(st.sampled_from(["all-linear", "mlp", "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj"]))
    if method != "inference":
        if draw(st.booleans()):
            q["optimizer"] = draw(st.sampled_from(j.OPTIMIZERS))
        if draw(st.booleans()):
            q["grad-ckpt"] = "1"
    else:
        if draw(st.booleans()):
            q["new-tokens"] = str(draw(st.sampled_from([0, 1, 64, 256, 2048])))
        if draw(st.booleans()):
            q["serve-tokens"] = str(draw(st.sampled_from([512, 4096, 8192])))
    if draw(st.booleans()):
        q["attention"] = draw(st.sampled_from(j.ATTENTIONS))
    if draw(st.booleans()):
        q["metric"] = draw(st.sampled_from(j.METRICS))
    keys = draw(st.permutations(sorted(q)))  # the query's order is the user's; the answer must not depend on it
    return {k: q[k] for k in keys}


def expect_same(model: str, query: str, answer: dict) -> None:
    """The page's answer for `query` is the CLI's for the same flags: the peak to the byte, its moment and
    parts, the job; or the same error message."""
    args = shlex.split(answer["command"])[2:]
    code, report, err = cli_json(model, args)
    if code == 0:
        assert answer["ok"], (model, query, answer.get("error"))
        m = report["memory"]
        assert answer["peak_bytes"] == m["peak_bytes"], (model, query)
        assert answer["peak_phase"] == m["peak_phase"]
        assert {b["part"]: b["bytes"] for b in answer["breakdown"]} == {k: v for k, v in m["breakdown"].items()} \
            or [[b["part"], b["bytes"]] for b in answer["breakdown"]] == m["breakdown"]
        assert answer["job"] == m["job"]
    else:
        assert not answer["ok"], (model, query)
        assert answer["error"].split(": error: ")[-1] in err, (answer["error"], err)


@pytest.mark.parametrize("model", available_models())
@hsettings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups())
def test_the_pages_answer_is_the_clis_for_the_same_flags(model: str, setup: dict[str, str]) -> None:
    from urllib.parse import urlencode

    query = urlencode(setup)
    answer = page_answer(model, query)
    expect_same(model, query, answer)
    # The answer's own query and command are the same setup again.
    assert page_answer(model, answer["query"]).get("peak_bytes") == answer.get("peak_bytes")
    assert shlex.split(answer["command"])[:2] == ["neurarch-trace", model]


def test_enough_models_for_the_browser_test() -> None:
    assert len(available_models()) >= 10


def test_no_flags_is_the_sites_full_fine_tune_and_the_clis_default() -> None:
    for model in available_models()[:4]:
        answer = page_answer(model, "")
        code, report, _ = cli_json(model, [])
        assert code == 0 and answer["peak_bytes"] == report["memory"]["peak_bytes"] \
            == report["memory"]["train_full_bytes_batch1"]
        assert answer["command"] == f"neurarch-trace {model}" and answer["query"] == ""


def test_bad_input_gives_the_clis_message_and_unknown_keys_are_named() -> None:
    model = "openai-community/gpt2"
    answer = page_answer(model, "batch=x&colour=red")
    assert not answer["ok"] and answer["error"] == "neurarch-trace: error: argument --batch: invalid int value: 'x'"
    assert answer["ignored"] == ["colour"]
    answer = page_answer(model, "method=qlora&weights=bf16")
    code, _, err = cli_json(model, ["--method", "qlora", "--weights", "bf16"])
    assert code == 2 and not answer["ok"] and answer["error"] in err
    answer = page_answer(model, "batch=-3")
    assert answer["error"] == "neurarch-trace: command line: key '--batch' = -3: must be a positive integer"
    # A value that starts with dashes stays a value, and the command quotes it for a shell.
    answer = page_answer(model, "lora-targets=--json%3Brm -rf&method=lora")
    assert not answer["ok"] and shlex.split(answer["command"])[-2:] == ["--lora-targets", "--json;rm -rf"]


def test_a_recipes_peft_default_targets_read_as_words_on_the_page() -> None:
    """trl-sft adapts peft's own targets for the model type: the page says so, as the CLI's line does."""
    answer = page_answer("Qwen/Qwen3-0.6B", "recipe=trl-sft")
    assert answer["ok"] and answer["job"]["lora_targets"] == "peft-default"
    assert "rank 16 on peft's default targets" in answer["job_text"]

def test_switches_and_the_canonical_query() -> None:
    setup, ignored = calculator.setup_from_query("?grad-ckpt=yes&method=lora&batch=&tokens=%20512")
    assert setup == [("--tokens", "512"), ("--method", "lora"), ("--grad-ckpt", None)] and ignored == []
    assert calculator.canonical_query(setup) == "tokens=512&method=lora&grad-ckpt=1"
    assert calculator.cli_args(setup) == ["--tokens", "512", "--method", "lora", "--grad-ckpt"]
    # off says so where the flag has a --no- form (a recipe's checkpointing turned off), and round-trips
    off = calculator.setup_from_query("recipe=trl-sft&grad-ckpt=0")[0]
    assert off == [("--recipe", "trl-sft"), ("--no-grad-ckpt", None)]
    assert calculator.canonical_query(off) == "recipe=trl-sft&grad-ckpt=0"
    assert calculator.cli_args(off) == ["--recipe", "trl-sft", "--no-grad-ckpt"]


def test_the_cli_and_the_page_read_one_parser() -> None:
    """Every setup flag of the CLI is a field of the page's form, in the parser's order, and a flag added to
    job_flags reaches the form and the query with no change to the page's script."""
    cli_flags = [a.option_strings[0] for a in job_flags.setup_actions(cli._model_parser())]
    assert [s["flag"] for s in calculator.flag_spec()] == cli_flags
    assert {"--method", "--tokens", "--batch", "--lora-rank", "--lora-targets", "--grad-ckpt", "--new-tokens",
            "--precision", "--weights", "--optimizer"} <= set(cli_flags)
    assert {"--json", "--html", "--plan", "--config", "--snapshot"}.isdisjoint(cli_flags)
    kinds = {s["key"]: s["kind"] for s in calculator.flag_spec()}
    assert kinds["grad-ckpt"] == "switch" and kinds["method"] == "choice" and kinds["batch"] == "int"
    assert kinds["lora-targets"] == "text"
    script = (ROOT / "templates" / "static" / "calc.js").read_text(encoding="utf-8")
    for flag in cli_flags:  # the script names no flag
        assert f'"{flag[2:]}"' not in script and f"'{flag[2:]}'" not in script, flag


def test_a_new_flag_reaches_the_form_and_the_query(monkeypatch: pytest.MonkeyPatch) -> None:
    original = job_flags.add_setup_arguments

    def with_interconnect(p):  # a flag no branch has: it reaches the form and the query by itself
        original(p)
        p.add_argument("--interconnect", choices=("pcie", "nvlink"), help="interconnect")

    monkeypatch.setattr(job_flags, "add_setup_arguments", with_interconnect)
    spec = calculator.flag_spec()
    assert spec[-1] == {"key": "interconnect", "flag": "--interconnect", "kind": "choice", "help": "interconnect",
                        "choices": ["pcie", "nvlink"], "metavar": None, "group": calculator.BASE_GROUP}
    setup, ignored = calculator.setup_from_query("interconnect=nvlink&method=full")
    assert ("--interconnect", "nvlink") in setup and ignored == []


def test_pyodide_is_pinned_exactly_with_its_integrity() -> None:
    package = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((ROOT / "package-lock.json").read_text(encoding="utf-8"))
    assert package["dependencies"] == {"pyodide": site_calc.PYODIDE_VERSION}  # exact, no range
    entry = lock["packages"]["node_modules/pyodide"]
    assert entry["version"] == site_calc.PYODIDE_VERSION
    assert re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", entry["integrity"])
    assert lock["packages"][""]["dependencies"] == package["dependencies"]


def test_the_zip_is_deterministic_pure_and_enough_alone(tmp_path: Path) -> None:
    data = site_calc.estimator_zip()
    site_calc.estimator_zip.cache_clear()
    assert site_calc.estimator_zip() == data  # rebuilt from the files: the same bytes
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert {i.date_time for i in infos} == {site_calc.ZIP_DATE}
        assert {n for n in names if not n.startswith("generator/estimator/")} == {
            "generator/__init__.py", "generator/errors.py", "generator/format.py", "generator/job_flags.py",
            "generator/calculator.py"}
        assert all(n.endswith(".py") for n in names)
        assert "__version__" in z.read("generator/__init__.py").decode()
        estimator = {p.relative_to(ROOT).as_posix() for p in (ROOT / "generator" / "estimator").rglob("*.py")}
        assert {n for n in names if n.startswith("generator/estimator/")} == estimator
    # The zip alone (no site-packages, no checkout) answers as the CLI does: what Pyodide has.
    path = tmp_path / "calc.zip"
    path.write_bytes(data)
    record = load_record(DEFAULT_SNAPSHOT_DIR, "Qwen/Qwen3-0.6B")
    model_text = json.dumps({"id": record.id, "config": record.config()})
    code = ("import json, sys; sys.path[:0] = [sys.argv[1]]; from generator.calculator import run_page; "
            "import generator; assert generator.__file__.startswith(sys.argv[1]), generator.__file__; "
            "print(run_page(sys.argv[2], sys.argv[3], 'method=lora&grad-ckpt=1'))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(path), model_text,
                          site_calc.site_json(SETTINGS, True)], capture_output=True, text=True, cwd=tmp_path,
                         check=True)
    answer = json.loads(out.stdout)
    assert answer["peak_bytes"] == cli_json(record.id, ["--method", "lora", "--grad-ckpt"])[1]["memory"]["peak_bytes"]


class _Prose(ast.NodeTransformer):
    """Every statement that is a string alone (a docstring) reads the same: what browser_source may change."""

    def visit_Expr(self, node: ast.Expr) -> ast.Expr:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            node.value.value = ""
        return node


def test_the_zip_drops_prose_only_and_keeps_every_line_where_it_was() -> None:
    """browser_source on every shipped module: the same program (the AST, docstrings aside), the same line
    count, every docstring empty, no comment left, and no shipped module reading a __doc__ it would lose."""
    for name, path in site_calc._shipped_files():
        source = path.read_text(encoding="utf-8")
        shipped = site_calc.browser_source(source)
        assert "__doc__" not in source, name
        assert ast.dump(_Prose().visit(ast.parse(source))) == ast.dump(_Prose().visit(ast.parse(shipped))), name
        assert shipped.count("\n") == source.count("\n"), name
        assert not [n.lineno for n in ast.walk(ast.parse(shipped)) if isinstance(n, ast.Expr)
                    and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                    and n.value.value.strip()], name
        comments = [t for t in tokenize.generate_tokens(io.StringIO(shipped).readline) if t.type == tokenize.COMMENT]
        assert not comments, (name, comments[:1])
    source = ('"""Module."""\n\nX = "kept"  # why\n\n\ndef f() -> str:\n    """Two\n    lines."""  # after\n'
              '    # alone\n    return f"{X}#not a comment"\n')
    assert site_calc.browser_source(source) == ('""\n\nX = "kept"\n\n\ndef f() -> str:\n    """\n"""\n\n'
                                                '    return f"{X}#not a comment"\n')


def test_a_module_that_imports_outside_the_zip_is_refused() -> None:
    site_calc.check_imports({"generator/estimator/x.py": "import math\nfrom ..errors import JobError\n",
                             "generator/errors.py": ""})
    for bad in ("import yaml\n", "from pathlib import Path\n", "from ..site import pages\n"):
        with pytest.raises(ValueError, match="generator/estimator/x.py imports"):
            site_calc.check_imports({"generator/estimator/x.py": bad, "generator/errors.py": ""})


def _build(out: Path, models: tuple[str, ...], tmp: Path) -> str:
    from generator.hub.snapshot import index_entry, write_index, write_record

    snap = tmp / "snapshot"
    records = [load_record(DEFAULT_SNAPSHOT_DIR, m) for m in models]
    for r in records:
        write_record(snap, r)
    write_index(snap, [index_entry(r) for r in records])
    log = io.StringIO()
    assert run_build(snapshot_dir=snap, out_dir=out, strict=True, settings=SETTINGS, jobs=1, search_index=False,
                     console=Console(file=log, width=400)) == 0
    return log.getvalue()


def test_the_build_ships_the_runtime_and_the_page_its_own_inputs(tmp_path: Path) -> None:
    if not site_calc.runtime_available():
        pytest.fail("node_modules/pyodide is missing: run `make install` (npm ci)")
    out = tmp_path / "public"
    log = _build(out, ("openai-community/gpt2",), tmp_path)
    assert "calculator not built" not in log
    runtime = out / site_calc.RUNTIME_DIR
    assert sorted(p.name for p in runtime.iterdir()) == sorted([*site_calc.RUNTIME_FILES, site_calc.LOCK_FILE])
    assert json.loads((runtime / "pyodide-lock.json").read_text())["packages"] == {}
    site = json.loads((out / site_calc.SITE_JSON).read_text())
    assert site["pyodide"] == f"../pyodide/{site_calc.PYODIDE_VERSION}/"
    assert (out / site_calc.CALC_DIR / site["estimator"]).read_bytes() == site_calc.estimator_zip()
    assert [f["key"] for f in site["flags"]] == [s["key"] for s in calculator.flag_spec()]
    html = (out / "models/openai-community/gpt2/index.html").read_text()
    inputs = json.loads(re.search(r'<script type="application/json" id="calc-model">(.*?)</script>', html).group(1))
    assert inputs == {"id": "openai-community/gpt2",
                      "config": load_record(DEFAULT_SNAPSHOT_DIR, "openai-community/gpt2").config()}
    assert '<script type="module" src="../../../static/calc.js"></script>' in html
    assert not (out / "models/openai-community/gpt2/config.json").exists()  # small: inline
    # Without JavaScript: the CLI's peak with no flags, exact, in calc-peak.
    bytes_ = int(re.search(r'<output id="calc-peak"[^>]* data-bytes="(\d+)"', html).group(1))
    assert bytes_ == cli_json("openai-community/gpt2", [])[1]["memory"]["peak_bytes"]


def test_without_node_modules_the_build_goes_on_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(site_calc, "PYODIDE_DIR", tmp_path / "no-node-modules")
    out = tmp_path / "public"
    log = _build(out, ("openai-community/gpt2",), tmp_path)
    assert "calculator not built: node_modules/pyodide is missing" in " ".join(log.split())
    assert not (out / "static" / "pyodide").exists()
    assert json.loads((out / site_calc.SITE_JSON).read_text())["pyodide"] is None
    html = (out / "models/openai-community/gpt2/index.html").read_text()
    assert 'id="calc-peak"' in html and 'id="headline"' in html  # the static figures stay


def test_an_nvidia_smi_peak_meets_the_budget_with_its_cuda_context_counted_once():
    """A review found the page's calculator saying Qwen3-0.6B at 1,024 tokens with --metric nvidia-smi does not fit
    a T4 (batch 0), while the command said it fits: the peak counts the CUDA context, which the budget leaves out
    already. Both now hold the peak less the context, and the largest batch is the reserved metric's."""
    smi = page_answer("Qwen/Qwen3-0.6B", "tokens=1024&metric=nvidia-smi")
    reserved = page_answer("Qwen/Qwen3-0.6B", "tokens=1024&metric=reserved")
    t4, t4_reserved = (next(c for c in x["cards"] if c["name"] == "T4 16 GB") for x in (smi, reserved))
    assert smi["peak_bytes"] == reserved["peak_bytes"] + 536_870_912
    assert t4["fits"] and t4_reserved["fits"] and t4["max_batch"] == t4_reserved["max_batch"] >= 1
