"""The transformers-defaults table (generator/estimator/config/transformers_defaults.py) equals transformers' classes.

tools/write_transformers_defaults.py generates the table from the installed transformers; this test renders it
again and fails when the two differ (after a transformers upgrade, run the tool and review the diff).
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from tools.write_transformers_defaults import TABLE, render  # noqa: E402


def test_transformers_defaults_table_is_current():
    assert TABLE.read_text(encoding="utf-8") == render(), "run: .venv/bin/python tools/write_transformers_defaults.py"
