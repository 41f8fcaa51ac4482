"""Oracle over every CausalLM architecture transformers ships (CONFIG_MAPPING ∩ MODEL_FOR_CAUSAL_LM_MAPPING_NAMES).

Each model_type in two forms: the config class's defaults (`to_dict()`) and its sparse form
(`to_diff_dict()`, as many Hub files are written), built by transformers on the meta device
(AutoModelForCausalLM) and by our graph. At least 90% of cases must match exactly; every other case
must be in known_gaps.KNOWN_GAPS, and a listed model_type that starts matching fails the test too.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from generator.estimator.config.known_gaps import KNOWN_GAPS  # noqa: E402
from tests.test_oracle_support import outcome  # noqa: E402

FORMS = ("defaults", "sparse")


def causal_types() -> dict[str, str]:
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL

    return {t: CAUSAL[t] for t in sorted(set(CONFIG_MAPPING.keys()) & set(CAUSAL))}


TYPES = causal_types()


def result(model_type: str, form: str) -> tuple[str, str]:
    return outcome(model_type, form, "AutoModelForCausalLM", TYPES[model_type])


@pytest.mark.parametrize("model_type", sorted(TYPES))
def test_causal_lm_count_or_known_gap(model_type):
    results = {form: result(model_type, form) for form in FORMS}
    exact = all(kind == "exact" for kind, _ in results.values())
    if model_type in KNOWN_GAPS:
        assert not exact, f"{model_type} now matches transformers: remove it from known_gaps.KNOWN_GAPS"
    else:
        assert exact, results


def test_at_least_90_percent_of_cases_are_exact():
    cases = [(t, f) for t in TYPES for f in FORMS]
    exact = [c for c in cases if result(*c)[0] == "exact"]
    assert len(exact) >= 0.9 * len(cases), (len(exact), len(cases))


def test_known_gaps_name_real_model_types_with_reasons():
    from transformers import CONFIG_MAPPING

    custom = {"nemotron-nas"}  # custom-code model_types without a transformers class
    for model_type, reason in KNOWN_GAPS.items():
        assert model_type in CONFIG_MAPPING or model_type in custom, model_type
        assert len(reason) > 20, model_type
