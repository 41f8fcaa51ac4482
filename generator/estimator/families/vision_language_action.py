"""Vision-language-action models: PI0, a PaliGemma that reads the scene and a Gemma action expert that denoises actions.

modeling_pi0.PI0ForConditionalGeneration: PI0Model holds `vlm` (AutoModel of vlm_config: a PaliGemmaModel, vision
tower, projector and Gemma, without an LM head) and `dit` (AutoModel of dit_config: a GemmaModel whose vocabulary
configuration_pi0.PI0Config sets to the VLM's), which attend jointly layer by layer; PI0ActionTimeEmbedding
(action_in_proj, state_proj, action_time_mlp_in/out, biased Linears; the sinusoid is a buffer) and action_out_proj
(a biased Linear to max_action_dim) replace the LM head. The VLM's layers form the graph; the action expert rides
beside them as one part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.parts import Part, linear
from .assembly import TextReader, Wrapper


def _without_head(arch: Arch) -> tuple[Part, ...]:
    """Every part of a model but its LM head and output (an AutoModel's base model)."""
    spec = arch.spec
    return (*spec.embed, *(p for b in spec.blocks for p in b.parts),
            *(p for p in spec.head if not p.name.startswith("LM_Head") and p.name != "Output"))


def pi0(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    r = Reader(cfg, model, "pi0")
    vc = r.sub("vlm_config") or {}
    vt = r.child(vc, "paligemma", prefix="vlm_config.").str("model_type", "paligemma")
    vlm = read_text(dict(vc, model_type=vt), model)
    dc = r.sub("dit_config") or {}
    dt = r.child(dc, "gemma", prefix="dit_config.").str("model_type", "gemma")
    dit = read_text(dict(dc, model_type=dt, vocab_size=vlm.vocab), model)
    dh = dit.hidden
    expert = _without_head(dit)
    act, state = r.int("max_action_dim"), r.int("max_state_dim")
    embed = Part("Action_Time_Embedding", "Linear", linear(act, dh, True) + linear(state, dh, True)
                 + linear(2 * dh, dh, True) + linear(dh, dh, True), matmul=(act + state + 3 * dh) * dh)
    ex = Part("Action_Expert", f"{dt} action expert ({dit.layers} layers)", sum(p.params for p in expert),
              matmul=sum(p.matmul for p in expert))
    spec = vlm.spec
    head = (*(p for p in spec.head if not p.name.startswith("LM_Head") and p.name != "Output"),
            Part("Action_Out_Proj", "Linear", linear(dh, act, True), width=act, matmul=dh * act),
            Part("Output", "Output", width=act))
    new = dataclasses.replace(spec, embed=(*spec.embed, embed, ex), head=head, logits=act)
    return dataclasses.replace(vlm, model_type="pi0", family="pi0", spec=new, uses=tuple(r.uses) + vlm.uses,
                               architectures=architectures_of(cfg, model))


WRAPPERS: dict[str, Wrapper] = {"pi0": pi0}
