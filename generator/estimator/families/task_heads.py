"""What the checkpoint's class puts on top of an encoder: its task (from config.json's `architectures`), the labels
a classifier's head has, and the logits per token that head gives (what the memory terms price at the loss)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def num_labels(cfg: Mapping[str, Any]) -> int:
    labels = cfg.get("id2label")
    if isinstance(labels, Mapping) and labels:
        return len(labels)
    n = cfg.get("num_labels")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 2


def head_kind(cfg: Mapping[str, Any]) -> str:
    """What the checkpoint's class puts on top: mlm, seq, token, qa, choice, pretrain or base."""
    archs = cfg.get("architectures")
    name = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    for suffix, kind in (("ForSequenceClassification", "seq"), ("ForTokenClassification", "token"),
                         ("ForQuestionAnswering", "qa"), ("ForMultipleChoice", "choice"),
                         ("ForPreTraining", "pretrain"), ("ForMaskedLM", "mlm"), ("ForCausalLM", "mlm"),
                         ("LMHeadModel", "mlm"), ("Model", "base"), ("Encoder", "base")):
        if name.endswith(suffix):
            return kind
    return "mlm"


def logits_of(kind: str, vocab: int, cfg: Mapping[str, Any]) -> int:
    return vocab if kind in ("mlm", "pretrain") else 2 if kind == "qa" else num_labels(cfg) if kind != "base" else 0
