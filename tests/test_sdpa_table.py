"""The generated table of model_types without SDPA (tools/write_sdpa_table.py) matches the installed transformers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import write_sdpa_table  # noqa: E402

from generator.estimator.memory import sdpa_table  # noqa: E402


def test_the_table_is_what_transformers_says():
    version, table = write_sdpa_table.no_sdpa()
    if version != sdpa_table.TRANSFORMERS_VERSION:
        pytest.skip(f"table written from transformers {sdpa_table.TRANSFORMERS_VERSION}, {version} installed")
    assert table == sdpa_table.NO_SDPA, "run tools/write_sdpa_table.py and review the diff"
