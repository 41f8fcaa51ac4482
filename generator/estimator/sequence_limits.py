"""A job's and a server's tokens against the model's context, and how far its rope scaling reaches past it.

An explicit length past max_position_embeddings is an error unless the config's rope scaling can stretch the
context past it; then it is priced as asked, with a warning, up to where the scaling reaches. Which scalings do
(transformers modeling_rope_utils.py, each type's _compute_*_parameters):
- llama3 and longrope (Phi-3's "su" before it) rescale frequencies for a context that max_position_embeddings
  already names (Llama 3.1: original 8,192, max_position_embeddings 131,072; Phi-3.5: original 4,096, 131,072):
  no further.
- yarn reaches original_max_position_embeddings x factor: DeepSeek-V3's 4,096 x 40 is its max_position_embeddings
  (163,840), where a YaRN block added to a 32,768-token Qwen2.5 config (factor 4, as its model card says) reaches
  131,072.
- linear and dynamic (NTK) scale whatever length they are run at, and configs differ on whether
  max_position_embeddings already counts the factor (Gemma 3's linear 8 names 131,072): no bound is known, so a
  longer job is priced with the warning alone.
An encoder-decoder reads its input and writes its output as two sequences, each within the context; an encoder
writes none.
"""

from __future__ import annotations

import math

from ..errors import ConfigError, JobError
from .checks import Finding
from .config.arch import Arch
from .memory.job_options import Job

WITHIN = ("llama3", "longrope", "su")  # max_position_embeddings is the context the scaling was made for
UNBOUNDED = ("linear", "dynamic")


def rope_reach(arch: Arch, model_id: str = "") -> tuple[str, int | None] | None:
    """(the rope scaling's type, the longest context it reaches: None where no bound is known), or None where the
    config declares no scaling that stretches the context (none, "default", Qwen2-VL's mrope)."""
    scaling = arch.raw.get("rope_scaling") or arch.raw.get("rope_parameters")
    if not isinstance(scaling, dict):
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in WITHIN:
        return str(kind), arch.max_context
    if kind in UNBOUNDED:
        return str(kind), None
    if kind != "yarn":
        return None
    orig = scaling.get("original_max_position_embeddings", arch.max_context)
    factor = scaling.get("factor")
    for key, value in (("original_max_position_embeddings", orig), ("factor", factor)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ConfigError(model_id or arch.model_type, f"rope_scaling.{key}", value,
                              "must be a positive number (yarn)")
    reach = orig * factor
    if not reach < math.inf:
        raise ConfigError(model_id or arch.model_type, "rope_scaling.factor", factor,
                          f"x {orig} is past any number of tokens")
    return "yarn", max(arch.max_context, int(reach))


CONTEXT_KEYS = ("max_position_embeddings", "n_positions")  # the names a family reads its context under


def context_key(arch: Arch) -> str:
    """The config key the model's context was read from, as the config names it (GPT-2's n_positions is read as
    max_position_embeddings), with its value where the model keeps positions of it for itself (RoBERTa's 514, two
    of them its padding's), or the value taken where the config sets none (mT5's)."""
    used = arch.used()
    for key in CONTEXT_KEYS:
        if key in used:
            source, value = str(used[key]["source"]), used[key]["value"]
            if source.startswith("default:"):  # a class default, or the reading's own where the class has none
                return f"{key}: not in the config, taken as {value:,}"
            name = source.removeprefix("config:").split(":")[-1]
            if isinstance(value, int) and value > arch.max_context:
                return f"{name} {value:,}, less the {value - arch.max_context:,} positions the model keeps for itself"
            return name
    return CONTEXT_KEYS[0]


def _past(arch: Arch, model_id: str, key: str, value: int, what: str, tokens: int,
          asked: str = "") -> list[Finding]:
    """[] within the context; past it a warning where the rope scaling reaches `tokens`, else a JobError."""
    if tokens <= arch.max_context:
        return []
    context = f"the model's context of {arch.max_context:,} tokens ({context_key(arch)})"
    reach = rope_reach(arch, model_id)
    if reach is None:
        rope = ", and the config declares no rope scaling" if arch.position == "rope" else ""
        raise JobError(model_id, key, value, f"{what} run past {context}{rope}")
    scaling, limit = reach
    if limit is not None and tokens > limit:
        how = ("which its rope scaling (" + scaling + ") was made for already" if limit == arch.max_context
               else f"and past the {limit:,} tokens its rope scaling ({scaling}) reaches")
        raise JobError(model_id, key, value, f"{what} run past {context}, {how}")
    where = "" if limit is None else f", which reaches {limit:,} tokens"
    return [Finding("context", "warning", f"{what} run past {context}; the config's rope scaling ({scaling}"
                                          f"{where}) stretches it, so the estimate is priced as asked{asked}, but "
                                          "check that the scaling covers it.")]


def check_job_context(arch: Arch, job: Job, model_id: str, kind: str = "decoder") -> list[Finding]:
    """An explicit job past the model's context: an error, or a warning where the rope scaling reaches it (the
    module docstring). `kind`: the graph's (an encoder generates nothing; an encoder-decoder's input and output
    are each within the context)."""
    generating = job.method == "inference" and job.new_tokens > 0
    if generating and kind == "encoder":
        raise JobError(model_id, "new_tokens", job.new_tokens, "an encoder reads whole sequences and generates no "
                                                               "tokens: --method inference without --new-tokens "
                                                               "prices its forward")
    if generating and kind == "encoder-decoder":
        return (_past(arch, model_id, "tokens", job.tokens, f"{job.tokens:,} input tokens", job.tokens)
                + _past(arch, model_id, "new_tokens", job.new_tokens, f"{job.new_tokens:,} generated tokens",
                        job.new_tokens))
    if generating:
        return _past(arch, model_id, "new_tokens", job.new_tokens, f"{job.tokens:,} + {job.new_tokens:,} tokens",
                     job.tokens + job.new_tokens)
    return _past(arch, model_id, "tokens", job.tokens, f"{job.tokens:,} tokens", job.tokens)


def check_serve_context(arch: Arch, tokens: int, model_id: str) -> list[Finding]:
    """A serving length the user named past the model's context: an error, or a warning where the rope scaling
    reaches it (then served as asked)."""
    return _past(arch, model_id, "serve_tokens", tokens, f"{tokens:,} tokens per served sequence", tokens,
                 " (served at that length)")
