"""What a new user meets first: the README's commands, the install line, and `make test`'s set-up."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from generator import DISTRIBUTION
from generator.settings import load_settings
from generator.site.pages import install_command

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_install_line_installs_this_project_from_its_repository():
    # PyPI's `neurarch-trace` (0.1.0-0.1.3) is an unrelated tool: never tell anyone to install it.
    assert not re.search(r"pip install ['\"]?neurarch-trace\b(?!-gpu)", README)
    assert (REPO / "templates" / "_own_model.html").read_text().count("pip install neurarch-trace") == 0
    command = install_command(load_settings().site)
    assert command == "pip install git+" + load_settings().site["repository"]
    assert command in README
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION != "neurarch-trace"
    assert project["scripts"] == {"neurarch-trace": "generator.cli:main"}


def test_the_readme_speaks_of_the_product_only():
    for phrase in ("stop 10", "the lead", "helpers'", "session"):
        assert phrase not in README, phrase


def test_the_readme_says_what_make_test_installs():
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in README and "CUDA build" in README
    assert "apt-get" in README and "NO_BROWSER=1" in README
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))" in makefile


def _make_browser(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    empty = tmp_path / "bin"  # a PATH with no chromium, no apt-get, no sudo, no id
    empty.mkdir(exist_ok=True)
    return subprocess.run([shutil.which("make") or "make", "-s", "-C", str(REPO), "browser"],
                          env={"PATH": str(empty), **env}, capture_output=True, text=True, timeout=60)


def test_make_browser_skips_cleanly_where_apt_get_cannot_run(tmp_path):
    done = _make_browser(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        "chromium is missing and there is no apt-get: tests/test_browser.py will be skipped"]
    done = _make_browser(tmp_path, NO_BROWSER="1")
    assert done.returncode == 0 and done.stdout.strip() == "NO_BROWSER is set: tests/test_browser.py will be skipped"
