"""The wheel installed in a clean venv outside the repository: the CLI runs on the defaults it ships."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from generator import DISTRIBUTION
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, load_record, write_index, write_record

REPO = Path(__file__).resolve().parents[1]
MODELS = ("openai-community/gpt2", "Qwen/Qwen3-0.6B")


def _run(args: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_runs_model_html_and_build_outside_the_repository(tmp_path):
    # One wheel, built without network from this checkout (setuptools from the test venv), with
    # setuptools' warnings on: pyproject.toml gives it nothing to warn about (a first `make build` is quiet).
    quiet = {**os.environ, "PYTHONWARNINGS": "ignore"}
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                  "-w", tmp_path / "dist", REPO], tmp_path, {**os.environ, "PYTHONWARNINGS": "default"})
    assert built.returncode == 0, built.stderr
    assert "Warning" not in built.stderr and "!!" not in built.stderr, built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.startswith(DISTRIBUTION.replace("-", "_") + "-")

    # A clean venv; the wheel installed with no dependencies and no index, and the dependencies seen
    # through a .pth naming this venv's site-packages (a path line: its own .pth files are not run, so
    # the editable checkout stays invisible).
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index",
                      wheel], tmp_path, quiet)
    assert installed.returncode == 0, installed.stderr
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp_path).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "work"  # outside the repository: no site_config.yaml, no snapshot/, no templates/
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), COLUMNS="100")
    where = _run([python, "-c", "import generator; print(generator.__file__)"], work, env)
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr
    cli = venv / "bin" / "neurarch-trace"

    model = work / "gpt2"
    model.mkdir()
    (model / "config.json").write_text(load_record(DEFAULT_SNAPSHOT_DIR, MODELS[0]).config_json)
    summary = _run([cli, "gpt2"], work, env)
    assert summary.returncode == 0, summary.stderr
    assert "Fine-tuning at batch 1" in summary.stdout and summary.stderr == ""

    html = _run([cli, "gpt2", "--html", "gpt2.html"], work, env)
    assert html.returncode == 0, html.stderr
    assert "wrote gpt2.html" in html.stderr
    page = (work / "gpt2.html").read_text(encoding="utf-8")
    assert "pip install git+https://github.com/" in page and "pip install neurarch-trace\n" not in page

    snap = work / "snapshot"  # a snapshot folder of two records: the default of `build` outside a checkout
    records = [load_record(DEFAULT_SNAPSHOT_DIR, m) for m in MODELS]
    for record in records:
        write_record(snap, record)
    write_index(snap, [index_entry(r) for r in records])
    build = _run([cli, "build", "--out", "site", "--no-search", "--jobs", "1", "--site-url", "https://o.github.io/r"],
                 work, env)
    assert build.returncode == 0, build.stderr
    assert (work / "site" / "index.html").is_file()
    assert "<loc>https://o.github.io/r/models/" in (work / "site" / "sitemap.xml").read_text()  # the nightly's URL
    for m in MODELS:
        assert (work / "site" / "models" / m / "index.html").is_file()

    # The packaged defaults, then ./site_config.yaml over them, then --config FILE instead of it.
    def tokens(*extra: str) -> int:
        out = _run([cli, "gpt2", "--json", *extra], work, env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["memory"]["assumptions"]["train_tokens"]

    assert tokens() == 2048  # the packaged default
    (work / "site_config.yaml").write_text("job: {train_tokens: 512}\n")
    assert tokens() == 512
    (tmp_path / "other.yaml").write_text("job: {train_tokens: 256}\n")
    assert tokens("--config", str(tmp_path / "other.yaml")) == 256
    (work / "site_config.yaml").write_text("site: {repository: 'http://x; rm -rf ~'}\n")
    bad = _run([cli, "gpt2"], work, env)
    assert bad.returncode == 2 and "site.repository" not in bad.stdout
    assert "repository" in bad.stderr and "site_config.yaml" in bad.stderr


def test_the_packaged_defaults_are_the_repository_s_own_file():
    """generator/site_config.yaml, which the wheel ships, links to ./site_config.yaml, which a build in the checkout
    reads: an editor that writes a copy in place of the link (`sed -i` does) leaves the two to drift apart."""
    packaged = REPO / "generator" / "site_config.yaml"
    assert packaged.is_symlink() and packaged.resolve() == (REPO / "site_config.yaml").resolve()
