"""The estimator is pure: it imports nothing that does I/O and touches no file, socket, clock or env."""

from __future__ import annotations

import ast
import builtins
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, tiny_qwen2

ESTIMATOR = ROOT / "generator" / "estimator"
ALLOWED_STDLIB = {"__future__", "collections.abc", "dataclasses", "typing", "re", "math"}  # collections.abc: types only
ALLOWED_PROJECT = {"generator", "generator.errors", "generator.estimator"}  # errors.py: pure exception classes


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module or "")
            elif node.level == 1:
                found.add("generator.estimator")
            else:  # from .. import x / from ..errors import y
                found.add("generator" + (f".{node.module}" if node.module else ""))
    return found


@pytest.mark.parametrize("path", sorted(ESTIMATOR.glob("*.py")), ids=lambda p: p.name)
def test_estimator_modules_import_only_pure_modules(path):
    bad = {m for m in _imports(path) if m not in ALLOWED_STDLIB | ALLOWED_PROJECT}
    assert not bad, f"{path.name} imports {bad}"


def test_errors_module_is_pure_too():
    assert _imports(ROOT / "generator" / "errors.py") <= {"__future__"}
    assert _imports(ROOT / "generator" / "__init__.py") <= {"__future__"}


def test_importing_the_estimator_loads_no_io_module():
    code = ("import sys; import generator.estimator; "
            "bad = [m for m in ('socket', 'urllib.request', 'http.client', 'httpx', 'huggingface_hub', 'yaml', "
            "'jinja2', 'subprocess', 'shutil', 'tempfile', 'io', 'pathlib') if m in sys.modules and "
            "m not in START]; print(','.join(bad))")
    start = "START = set(__import__('sys').modules)"
    out = subprocess.run([sys.executable, "-S", "-c", f"{start}; {code}"], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, check=True)
    assert out.stdout.strip() == ""


def test_estimate_runs_with_files_sockets_clock_and_env_forbidden(monkeypatch, settings):
    from generator.estimator import estimate

    def forbidden(*args, **kwargs):
        raise AssertionError("the estimator did I/O")

    for target, name in ((builtins, "open"), (socket, "socket"), (time, "time"), (time, "perf_counter"),
                         (os, "getenv"), (os, "listdir"), (os, "stat")):
        monkeypatch.setattr(target, name, forbidden)
    monkeypatch.setattr(os, "environ", {})
    report = estimate(tiny_qwen2(), model_id="pure", assumptions=settings.assumptions, cards=settings.cards,
                      gpus=settings.gpus)
    again = estimate(tiny_qwen2(), model_id="pure", assumptions=settings.assumptions, cards=settings.cards,
                     gpus=settings.gpus)
    assert report == again  # same inputs, same Report: no hidden state


def test_the_calculators_modules_are_pure_too():
    """job_flags (the CLI's and the page's flags) and calculator (the page's entry point) run in the browser
    beside the estimator: the standard library, the estimator, errors and format only (the zip's check,
    site/calculator.check_imports, holds every shipped module to the same list)."""
    allowed = {"__future__", "argparse", "collections.abc", "contextlib", "dataclasses", "functools", "io", "json",
               "shlex", "typing", "urllib.parse", "generator", "generator.errors", "generator.estimator",
               "generator.estimator.memory", "generator.estimator.memory.job_options",
               "generator.estimator.memory.recipes", "generator.estimator.memory.parallel"}
    for name in ("job_flags.py", "calculator.py"):
        bad = {m for m in _imports(ROOT / "generator" / name) if m not in allowed}
        assert not bad, f"{name} imports {bad}"
