"""What a framework's own model code and loss hold beyond transformers' class for the config: LitGPT's GPT and its
chunked loss, torchtune's builders and LinearCrossEntropyLoss, TRL's chunked loss, and the quantised weights each
framework packs. A job's `loss` (job_options.LOSSES) names the code it runs; recipes.py sets it per framework. Each
term cites the file it was read from (litgpt 2685705, 2026-06-29; torchtune bd2a0fc, 2026-04-23; trl f2cd577,
2026-07-24).
"""

from __future__ import annotations

from dataclasses import replace

from ..config.arch import Arch
from ..graph.nodes import Graph, build_graph
from ..graph.parts import Block
from .activations import (
    PYTHON_GELU,
    Regime,
    adapter_input_bytes,
    mask_bytes,
    mlp_act,
    python_gelu_bytes,
)
from .attention import masked_sdpa_windows

# TRL SFTTrainer's default loss_type "chunked_nll" (trl/trainer/sft_trainer.py _chunked_cross_entropy_loss,
# _CHUNKED_LM_HEAD_CHUNK_SIZE = 256): each chunk of 256 tokens' fp32 logits (h.float() @ w.float().t()) lives only
# inside its own checkpointed forward/backward.
TRL_CHUNK_TOKENS = 256

# LitGPT finetune/lora.py: model(input_ids, lm_head_chunk_size=128), then utils.chunked_cross_entropy over the
# 128-token chunks (no fp32 upcast under bf16-true).
LITGPT_CHUNK_TOKENS = 128

# LitGPT's loss: model(..., lm_head_chunk_size=128) exists only in LitGPT's own GPT, so a job with it runs LitGPT's
# model code (the framework_* functions below), not transformers' class for the config.
LITGPT_LOSS = "litgpt-chunked"

# torchtune's LinearCrossEntropyLoss (torchtune/modules/loss/cross_entropy_loss.py, num_output_chunks=8): the model
# skips its output layer (set_model_output), the loss copies the valid tokens' hidden states (index_select) and runs
# the projection and an fp32 cross-entropy per chunk, none of them checkpointed.
TORCHTUNE_LOSS = "torchtune-linear-ce"
TORCHTUNE_CHUNKS = 8


def runs_litgpt(loss: str) -> bool:
    """Whether a job with this loss (Job.loss) runs LitGPT's own model code."""
    return loss == LITGPT_LOSS


def runs_torchtune(loss: str) -> bool:
    """Whether a job with this loss runs torchtune's own model code: LinearCrossEntropyLoss takes over the output
    layer of torchtune's TransformerDecoder (set_model_output), which no other framework's model has."""
    return loss == TORCHTUNE_LOSS


def own_model(loss: str) -> str:
    """The framework whose own model code a job with this loss runs ("" where it is transformers' class)."""
    return "LitGPT" if runs_litgpt(loss) else "torchtune" if runs_torchtune(loss) else ""


def framework_model(a: Arch, g: Graph, loss: str) -> tuple[Arch, Graph]:
    """The model a job's framework runs. LitGPT runs its own GPT (the only one with lm_head_chunk_size, so
    "litgpt-chunked" means its code), which never ties the head to the embedding: its GPT holds transformer.wte and
    lm_head as two modules, and scripts/convert_hf_checkpoint.py copies the embedding into lm_head.weight where a
    checkpoint has none (copy_weights_hf_llama and its siblings: `state_dict["lm_head.weight"] =
    state_dict["transformer.wte.weight"]`), loaded into two parameters. A tied config is priced untied there:
    one more vocab x hidden weight, with its own gradient and optimizer state in a full fine-tune (FINDINGS.md F30)."""
    if not runs_litgpt(loss) or not a.tie:
        return a, g
    head = tuple(p._replace(params=p.params + p.matmul) if p.name.startswith("LM_Head") else p for p in a.spec.head)
    untied = replace(a, tie=False, spec=replace(a.spec, head=head, tied=False))
    return untied, build_graph(untied)


def framework_attention(a: Arch, loss: str) -> str:
    """The attention a job runs by default where its framework runs its own model ("" where transformers' class
    decides: attention.default_attention). LitGPT's CausalSelfAttention calls SDPA whatever the checkpoint's own
    code did, and computes the scores itself only with logit soft-capping (gemma-2's attn_logit_softcapping;
    litgpt/model.py scaled_dot_product_attention). torchtune's MultiHeadAttention calls SDPA too
    (torchtune/modules/attention_utils.py _sdpa_or_flex_attention), its gemma-2 attention computes soft-capped
    scores itself (torchtune/models/gemma2/_attention.py)."""
    if not (runs_litgpt(loss) or runs_torchtune(loss)):
        return ""
    return "eager" if a.setting("attn_logit_softcapping") else "sdpa"


def framework_layer_bytes(a: Arch, b: Block, r: Regime, roles: frozenset[str] | None, targets: str, loss: str,
                          attention: str, tokens: int) -> int:
    """Per token of one attention layer: what LitGPT's own GPT keeps beyond transformers' class with peft's LoRA
    (0 for other frameworks). From litgpt/model.py CausalSelfAttention.forward and litgpt/lora.py LoRAQKVLinear
    (2685705), checked on its own code run under the simulation's tracker (FINDINGS.md F30):
    - its q, k, v are slices of one fused qkv output. Under grouped queries, k and v are repeat_interleave'd to
      every query head before SDPA ("flash attention requires it in training mode"), and SDPA saves the copies;
      transformers' SDPA passes enable_gqa and keeps the grouped ones (eager's repeat_kv, and SDPA's where a
      sliding window shorter than the sequence makes transformers pass a mask, keep the same copies as LitGPT's:
      masked_sdpa_terms). With as many kv heads as query heads, v stays a view of the fused output, so SDPA's
      saved v keeps its q and k slices alive too;
    - LoRA on part of q, k, v: zero_pad scatters lora_B's output into the fused width, and the scatter keeps that
      output (the adapted widths) for its backward; one lora_dropout serves the fused Linear, where peft drops
      each adapted projection's input on its own;
    - its MLP's GELU is one fused op (GptNeoxMLP: F.gelu(x, approximate=config.gelu_approximate)), where
      transformers' Python-written gelu_new keeps three more MLP-wide tensors (activations.PYTHON_GELU).
    torchtune's MultiHeadAttention (torchtune/modules/attention.py forward, bd2a0fc) has separate q, k, v Linears and
    peft's one LoRA dropout per adapted Linear (torchtune/modules/peft/lora.py), but it too expands k and v to every
    query head before SDPA (k.unsqueeze(2).expand(...).flatten(1, 2), a copy SDPA saves): that term alone (F32)."""
    if not (runs_litgpt(loss) or runs_torchtune(loss)) or not a.heads or not b.attn:
        return 0
    c, q, kv = r.compute_bytes, a.heads * a.head_dim, a.kv_heads * a.head_dim
    repeats = attention == "sdpa" and not _masked_by_transformers(a, b, r, tokens)
    if runs_torchtune(loss):
        return 2 * (q - kv) * c if repeats else 0
    keep = (q + kv) * c if kv == q else 2 * (q - kv) * c if repeats else 0
    if mlp_act(a) in PYTHON_GELU:
        keep -= python_gelu_bytes(b, c)
    if r.trained or not roles:
        return keep
    # a class with a fused qkv_proj (Phi-3) has the one adapter and dropout LitGPT has; `targets` says which of
    # q, k, v LitGPT enables in it (the recipe's "q,v")
    fused = "qkv" in roles
    names = ({t.strip() for t in targets.split(",")} & {"q", "k", "v"} or {"q", "k", "v"}) if fused else roles
    adapted = [w for role, w in (("q", q), ("k", kv), ("v", kv)) if role in names]
    if adapted and len(adapted) < 3:
        keep += c * sum(adapted)
    if r.lora_dropout and not fused and len(adapted) > 1:
        ab = adapter_input_bytes(r)
        keep -= (len(adapted) - 1) * ((c if r.amp else ab) + mask_bytes(r, ab)) * a.hidden
    return keep


def framework_fixed_bytes(a: Arch, b: Block, r: Regime, loss: str, attention: str, tokens: int) -> int:
    """Batch-free bytes one layer of LitGPT's own GPT keeps beyond transformers' class: a sliding-window layer
    (litgpt/config.py sliding_window_indices: every layer of Mistral-7B-v0.1 and Phi-3-mini, gemma-3's local ones)
    builds a T x T additive mask in the compute dtype, whatever the window, and passes it to SDPA, which keeps it
    for its backward (litgpt/model.py CausalSelfAttention.forward). Soft-capped attention (gemma-2) takes LitGPT's
    eager path, where the mask is only added to the scores (FINDINGS.md F30). Where the window is shorter than the
    sequence, transformers' SDPA is handed a mask too, already priced (attention.masked_sdpa_terms)."""
    if not runs_litgpt(loss) or b.kind != "sliding" or attention != "sdpa" or _masked_by_transformers(a, b, r, tokens):
        return 0
    return tokens * tokens * r.compute_bytes


# torchtune's RoPE modules whose cache holds cos and sin of the whole head dim, [max_seq_len, 2 x head_dim]
# (Qwen2RotaryPositionalEmbeddings, Phi3RotaryPositionalEmbeddings: models/qwen2/_positional_embeddings.py,
# models/phi3/_position_embeddings.py build_rope_cache); the others' is [max_seq_len, head_dim // 2, 2]
# (modules/position_embeddings.py RotaryPositionalEmbeddings, models/llama3_1/_position_embeddings.py).
TORCHTUNE_WIDE_ROPE = frozenset({"qwen2", "qwen3", "phi3"})


def framework_buffer_bytes(a: Arch, g: Graph, loss: str, lora: bool) -> int:
    """Buffers the framework's own model holds beyond transformers' class, in every phase and whole on every GPU.
    torchtune's RoPE modules cache cos and sin in fp32 for every position up to the model's max_seq_len (beside a
    theta of head_dim / 2). Its LoRA builders make one RoPE module per attention layer (lora_llama2_self_attention,
    lora_qwen2_self_attention, ...: torchtune/models/*/_component_builders.py), but Llama 3.1's and 3.2's
    (Llama3ScaledRoPE, rope_scaling "llama3"), and every full builder, one for the whole model: Qwen2.5-3B's LoRA
    holds 36 caches of 32,768 x 256 fp32, 1.21 GB (F32)."""
    if not runs_torchtune(loss) or a.position != "rope" or not a.head_dim:
        return 0
    dim = a.rotary_dims or a.head_dim
    cache = 4 * a.max_context * dim * (2 if a.model_type in TORCHTUNE_WIDE_ROPE else 1) + 4 * (dim // 2)
    scaling = a.raw.get("rope_scaling") or a.raw.get("rope_parameters") or {}
    shared = not lora or scaling.get("rope_type", scaling.get("type")) == "llama3"
    return cache * (1 if shared else sum(n for b, n in g.spec.distinct_layers if b.attn))


def dequant_bytes_per_weight(loss: str, storage: str, c: int) -> int:
    """Bytes a quantised base's dequantisation holds at once per weight of the matrix. bitsandbytes writes the weight
    in the compute dtype, c. torchao's NF4Tensor (torchtune's QLoRA), uncompiled, decodes in torch ops
    (torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py get_original_weight, torchao 0.18): each byte's two
    nibbles as int64 indices (8 B per weight), their values from the table, the scaled values and the stacked result
    (3 c), every one held until it returns: 14 B per weight in bf16 (F34)."""
    return 8 + 3 * c if runs_torchtune(loss) and storage == "nf4" else c


def _masked_by_transformers(a: Arch, b: Block, r: Regime, tokens: int) -> bool:
    """transformers passes SDPA a mask in this layer: the windows masked_sdpa_terms prices at these tokens."""
    return any(window <= tokens for window, _, _ in masked_sdpa_windows(a, b, r))


def framework_mats(a: Arch, loss: str, mats: dict[tuple[int, int, int], int] | None
                   ) -> dict[tuple[int, int, int], int] | None:
    """The weight matrices a quantised base packs (storage.stored_mats), as the job's framework quantises them.
    LitGPT's `--quantize bnb.*` hands Fabric a BitsandbytesPrecision without ignore_modules
    (litgpt/finetune/lora.py), whose init_context swaps torch.nn.Linear for its Linear4bit subclass
    (lightning/fabric/plugins/precision/bitsandbytes.py): the LM head is packed too, where transformers' quantiser
    keeps it 16-bit (FINDINGS.md F30)."""
    if not runs_litgpt(loss) or mats is None:
        return mats
    head = (1, a.embed_dim or a.hidden, a.spec.vocab)
    return {**mats, head: mats.get(head, 0) + 1}


def loss_terms(a: Arch, g: Graph, loss: str, batch: int, tokens: int, c: int, head: int,
               logits: int, quantised: bool = False, trained: bool = False) -> tuple[int, int, int]:
    """(head per sample, logits per sample, a batch-wide chunk transient) for a job's loss (Job.loss) at its batch and tokens.
    - hf: transformers' ForCausalLMLoss, s.logits_bytes per logit (F1).
    - trl-chunked: TRL's _chunked_cross_entropy_loss checkpoints each 256-token chunk: per chunk h.float() @
      w.float().t() (fp32 logits), log_softmax's output and, in its backward, the two fp32 gradients, plus the
      fp32 copy of the LM head's weight (w.float()): 16 B x chunk x V + 4 x V x E, once per batch.
    - litgpt-chunked: model(..., lm_head_chunk_size=128) returns bf16 logit chunks the loop keeps, and
      chunked_cross_entropy keeps each chunk's log_softmax output (no upcast under bf16-true): 2c per logit, and
      one chunk's two gradients in the backward. On a quantised base (`quantised`, framework_mats) the head's
      weight is dequantised for each chunk's backward matmul, when that chunk's log_softmax output is freed and its
      logits' gradient is the one left: the larger of the two moments.
    - torchtune-linear-ce: torchtune's LinearCrossEntropyLoss keeps the hidden states' index_select copy (read by
      each chunk's projection) and every chunk's fp32 log_softmax output (F.cross_entropy on logits.float(); the bf16
      logits and their fp32 copy are freed once it has run), 4 x V per token; the copy is saved only where the
      projection trains, in place of the normed hidden state transformers' head saves. Of the batch's tokens split
      in 8, the larger of two moments: a chunk's backward, its two fp32 gradients (8 x V per token of the chunk), and
      the last chunk's forward, its bf16 logits and their fp32 copy (6 x V) beside the normed hidden state the
      recipe holds as `outputs` and, under a frozen projection, the copy (F32)."""
    spec = g.spec
    if loss == "hf":
        return head, logits, 0
    if loss == "trl-chunked":
        chunk = min(batch * tokens, TRL_CHUNK_TOKENS)
        return head - logits, 0, 16 * chunk * spec.logits + 4 * spec.logits * (a.embed_dim or a.hidden)
    if loss == TORCHTUNE_LOSS:
        kept = tokens * 4 * spec.logits
        chunk = -(-batch * tokens // TORCHTUNE_CHUNKS)
        hidden = batch * tokens * c * (a.embed_dim or a.hidden)
        last = 6 * chunk * spec.logits + (1 if trained else 2) * hidden
        return head - logits + kept, kept, max(8 * chunk * spec.logits, last)
    kept = tokens * 2 * c * spec.logits
    dequant = c * spec.vocab * (a.embed_dim or a.hidden) if quantised else 0
    return head - logits + kept, kept, max(2 * c * min(tokens, LITGPT_CHUNK_TOKENS) * spec.logits, dequant)
