"""Named recipes (`--recipe NAME`): the options of what people run, each read from that framework's own source.

A recipe is a set of job_options.Job fields; the explicit flags override it (Job.with_recipe). Each field below cites the
file it was read from (pinned where the snapshot was read: trl f2cd577 = 1.10.0.dev0, 2026-07-24; litgpt 2685705,
2026-06-29; peft 0.21.2 and transformers 5.24.0 as installed; bitsandbytes 95f9af3 = 0.50.2.dev0; axolotl 067b021,
2026-07-24; unsloth 015bdef, 2026-08-22, with unsloth-zoo ce232d6, 2026-08-20; torchtune bd2a0fc, 2026-04-23;
LLaMA-Factory ff6d4d1, 2026-08-18; ms-swift 3602360, 2026-08-22). What a framework's own model code holds (LitGPT's,
torchtune's) is priced in frameworks.py. What a recipe does not say (tokens, batch) stays the job's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .frameworks import LITGPT_LOSS, TORCHTUNE_LOSS
from .target_names import PEFT_DEFAULT


@dataclass(frozen=True)
class Recipe:
    name: str
    summary: str  # one line for the page
    fields: tuple[tuple[str, Any], ...]  # job_options.Job fields this recipe sets
    sources: tuple[str, ...]  # where each field was read


def nf4_base(fields: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    """A LoRA recipe's fields with bitsandbytes' 4-bit base, as the front ends that take one flag for it set it: nf4
    with double quantisation, the norms left in the compute dtype (no prepare_model_for_kbit_training upcast)."""
    return tuple({**dict(fields), "method": "qlora", "weights": "nf4", "double_quant": True,
                  "upcast_fp32": False}.items())


# TRL's SFTTrainer pads each batch to its longest sample and passes the mask (FINDINGS.md F72: from batch 2, SDPA keeps
# it in every layer), as its defaults leave packing and padding_free off
TRL_PADS = ("trl/trainer/sft_config.py: packing = False, padding_free = False; trl/trainer/sft_trainer.py "
            "DataCollatorForLanguageModeling.torch_call pads input_ids to the batch's longest and returns its "
            "attention_mask (huggingface/trl@f2cd577 L462-506)")


# Why the other recipes price no padding mask (F72 needs one handed to SDPA): each one's batches come unpadded, or
# padded without a mask, or flattened with flash-attention's varlen path.
HF_EXAMPLE_UNPADDED = ("transformers examples/pytorch/language-modeling/run_clm.py (00d481d): group_texts cuts the "
                       "corpus into block_size chunks and the Trainer takes default_data_collator, so no sample is "
                       "padded")
AXOLOTL_PACKS = ("axolotl examples/llama-3/lora-1b.yml and qlora-1b.yml L16-19: sample_packing true with "
                 "flash_attention_2, packed samples told apart by position_ids, no padding mask")


# The LoRA recipes of LLaMA-Factory and ms-swift, whose 4-bit variants change only the base (nf4_base); the
# sources are their Recipe rows' below.
LLAMA_FACTORY = (("method", "lora"), ("precision", "amp"), ("adapter_dtype", "fp32"), ("lora_rank", 8),
                 ("lora_targets", "all-linear"), ("lora_dropout", 0.0), ("grad_ckpt", True),
                 ("optimizer", "adamw-fused"), ("keep_outputs", False), ("loss", "hf"), ("grad_accum", 8),
                 ("padded", True), ("tower_adapters", False))
MS_SWIFT = (("method", "lora"), ("precision", "amp"), ("adapter_dtype", "fp32"), ("lora_rank", 8),
            ("lora_targets", "all-linear"), ("lora_dropout", 0.05), ("grad_ckpt", True), ("optimizer", "adamw-fused"),
            ("keep_outputs", False), ("loss", "hf"), ("grad_accum", 16), ("padded", True), ("tower_adapters", False))


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("hf-trainer", "transformers Trainer(bf16=True): autocast over fp32 trainable weights, peft's fp32 "
                         "adapters on a bf16 base with LoraConfig's defaults (r 8 on peft's default targets, no "
                         "dropout), fused AdamW, the loss taken out of the outputs",
           (("precision", "amp"), ("adapter_dtype", "fp32"), ("lora_rank", 8), ("lora_targets", PEFT_DEFAULT),
            ("lora_dropout", 0.0), ("optimizer", "adamw-fused"), ("grad_ckpt", False), ("keep_outputs", False),
            ("loss", "hf")),
           ("transformers/training_args.py: bf16 -> torch.autocast(bfloat16); optim defaults to adamw_torch_fused "
            "for torch >= 2.8; gradient_checkpointing defaults to False",
            HF_EXAMPLE_UNPADDED,
            "transformers/trainer.py compute_loss: returns outputs['loss'] only, the outputs are dropped before "
            "backward",
            "peft/mapping_func.py get_peft_model(autocast_adapter_dtype=True); peft/tuners/tuners_utils.py "
            "_cast_adapter_dtype: bf16/fp16 adapters are upcast to fp32",
            "peft/tuners/lora/config.py LoraConfig: r = 8, lora_dropout = 0.0, target_modules None (peft's own "
            "for the model type: peft/tuners/lora/model.py _prepare_adapter_config)")),
    Recipe("trl-sft", "TRL SFTTrainer with LoRA on a model it loads by name, as its quickstart and `trl sft` do: "
                      "the weights in float32 (TRL's default; --weights bf16 for a model loaded in bf16), bf16 "
                      "autocast, gradient checkpointing on, chunked cross-entropy (256 tokens), LoRA dropout 0.05 on "
                      "peft's default targets (q and v for most decoders), batches padded to their longest sample",
           (("method", "lora"), ("precision", "amp"), ("weights", "fp32"), ("adapter_dtype", "fp32"),
            ("lora_dropout", 0.05), ("lora_targets", PEFT_DEFAULT), ("grad_ckpt", True), ("optimizer", "adamw-fused"),
            ("keep_outputs", False), ("loss", "trl-chunked"), ("padded", True)),
           ("trl/trainer/utils.py create_model_from_path: dtype = kwargs.get('dtype', 'float32') where "
            "model_init_kwargs give none; trl/trainer/model_config.py: dtype defaults to 'float32' for `trl sft` "
            "(huggingface/trl#4778, 4d52e02, 2026-01-12)",
            "trl/trainer/base_config.py: gradient_checkpointing = True, bf16 defaults to True; "
            "trl/trainer/sft_config.py: activation_offloading = False (the layer inputs stay on the GPU)",
            "trl/trainer/sft_config.py: loss_type defaults to 'chunked_nll'; trl/trainer/sft_trainer.py "
            "_CHUNKED_LM_HEAD_CHUNK_SIZE = 256",
            "trl/trainer/model_config.py: lora_r 16, lora_alpha 32, lora_dropout 0.05, lora_target_modules None, "
            "so peft adapts its own targets for the model type (peft/tuners/lora/model.py _prepare_adapter_config: "
            "q_proj and v_proj for llama, mistral, qwen2, gemma; query_key_value for gpt_neox, falcon)",
            TRL_PADS)),
    Recipe("trl-sft-qlora", "QLoRA as the QLoRA paper and peft's guide run it under TRL: nf4 base with double "
                            "quantisation, prepare_model_for_kbit_training (every non-quantised parameter upcast to "
                            "fp32, gradient checkpointing on), the adapters cast to bf16 by TRL, paged AdamW 32-bit, "
                            "LoRA dropout 0.05, batches padded to their longest sample",
           (("method", "qlora"), ("precision", "amp"), ("weights", "nf4"), ("double_quant", True),
            ("upcast_fp32", True), ("adapter_dtype", "bf16"), ("lora_rank", 16), ("lora_targets", "all-linear"),
            ("lora_dropout", 0.05), ("grad_ckpt", True), ("optimizer", "paged-adamw"), ("keep_outputs", False),
            ("loss", "trl-chunked"), ("padded", True)),
           ("peft/utils/other.py prepare_model_for_kbit_training: param.data.to(torch.float32) for every fp16/bf16 "
            "parameter that is not Params4bit; use_gradient_checkpointing=True",
            "artidoro/qlora qlora.py: bnb_4bit_use_double_quant=True, bnb_4bit_quant_type='nf4', "
            "optim='paged_adamw_32bit'; find_all_linear_names adapts every Linear but the head (the QLoRA paper, "
            "arXiv:2305.14314 §4: LoRA on all linear layers). qlora.py itself defaults to r 64 and lora_dropout 0.0 "
            "(its Guanaco scripts pass 0.1 up to 13B, 0.05 above) and casts the adapters to bf16 under --bf16; this "
            "recipe runs it under TRL and peft instead:",
            "trl/trainer/model_config.py: lora_r 16, lora_dropout 0.05; trl/trainer/sft_trainer.py: on a 4- or "
            "8-bit model every trainable parameter is cast to bfloat16 after get_peft_model, as the QLoRA paper "
            "does (huggingface/trl@2af35fb, 2025-12-04), peft's fp32 adapters so undone",
            "bitsandbytes/optim/optimizer.py Optimizer2State.init_state: a 32-bit optimizer's state1 and state2 "
            "are float32 whatever the parameter's dtype",
            "bitsandbytes/optim/optimizer.py get_state_buffer: paged state (F.get_paged, cudaMallocManaged) for "
            "tensors of 1e5 elements or more",
            "trl/trainer/sft_config.py: loss_type 'chunked_nll'; base_config.py: gradient_checkpointing = True",
            TRL_PADS)),
    Recipe("custom-loop", "a hand-written loop: out = model(**batch); out.loss.backward() with `out` alive, so "
                          "the bf16 logits and the forward's KV cache live through the backward",
           (("precision", "amp"), ("adapter_dtype", "fp32"), ("keep_outputs", True), ("loss", "hf")),
           ("transformers/models/llama/modeling_llama.py LlamaModel.forward: use_cache defaults to "
            "config.use_cache and builds a DynamicCache in training unless gradient checkpointing turns it off",
            "transformers/loss/loss_utils.py ForCausalLMLoss: logits.float() then cross_entropy (FINDINGS.md F1)")),
    Recipe("litgpt", "LitGPT finetune lora with its config hub's bf16-true: weights, adapters, gradients and AdamW "
                     "states in bf16, LoRA r=8 on query and value with dropout 0.05, chunked cross-entropy, 16 "
                     "micro-batches per step, on LitGPT's own model code (an untied head, its attention's kept "
                     "tensors; under qlora the head quantised too)",
           (("method", "lora"), ("precision", "bf16"), ("adapter_dtype", "bf16"), ("lora_rank", 8),
            ("lora_targets", "q,v"), ("lora_dropout", 0.05), ("grad_ckpt", False), ("optimizer", "adamw"),
            ("keep_outputs", False), ("loss", LITGPT_LOSS), ("grad_accum", 16)),
           ("litgpt/finetune/lora.py setup(): lora_r 8, lora_alpha 16, lora_dropout 0.05, lora_query and "
            "lora_value True; model(input_ids, lm_head_chunk_size=128); chunked_cross_entropy",
            "litgpt/finetune/lora.py setup(): TrainArgs(global_batch_size=16, micro_batch_size=1); litgpt/args.py "
            "gradient_accumulation_iters = global_batch_size // devices // micro_batch_size; fit() runs each "
            "micro-batch in fabric.no_backward_sync",
            "config_hub/finetune/*/lora.yaml: precision bf16-true (utils.get_default_supported_precision would "
            "pick bf16-mixed)",
            "torch/optim/adamw.py: exp_avg and exp_avg_sq are zeros_like(param), the parameter's dtype",
            "litgpt/scripts/convert_hf_checkpoint.py: lm_head.weight copied from the embedding where the checkpoint "
            "ties them; litgpt/model.py CausalSelfAttention: the fused qkv, k and v repeat_interleave'd, a T x T "
            "mask in sliding-window layers; litgpt/lora.py LoRAQKVLinear.zero_pad (framework_model, "
            "framework_layer_bytes, framework_fixed_bytes)",
            "litgpt/finetune/lora.py: BitsandbytesPrecision(quantize[4:], dtype) without ignore_modules; "
            "lightning/fabric/plugins/precision/bitsandbytes.py init_context: every torch.nn.Linear becomes its "
            "Linear4bit (framework_mats)",
            "litgpt/data/base.py _sft_collate_fn (L122): input_ids and labels padded to the batch's longest, no "
            "attention mask; the model applies its own causal mask")),
    Recipe("axolotl", "axolotl's LoRA example (examples/llama-3/lora-1b.yml): bf16 base, fp32 adapters under bf16 "
                      "autocast, LoRA dropout 0.05, gradient checkpointing (non-reentrant), bitsandbytes 8-bit AdamW, "
                      "flash-attention 2; vs hf-trainer: checkpointing, the 8-bit optimizer, LoRA dropout, and r 16 "
                      "on every Linear where LoraConfig's defaults adapt r 8 on peft's default targets",
           (("method", "lora"), ("precision", "amp"), ("adapter_dtype", "fp32"), ("lora_rank", 16),
            ("lora_targets", "all-linear"), ("lora_dropout", 0.05), ("grad_ckpt", True), ("optimizer", "adamw8bit"),
            ("attention", "sdpa"), ("keep_outputs", False), ("loss", "hf")),
           ("axolotl examples/llama-3/lora-1b.yml: adapter lora, lora_r 16, lora_dropout 0.05, the 7 projections, "
            "optimizer adamw_8bit, bf16 auto, gradient_checkpointing true, attn_implementation flash_attention_2 "
            "(saves no score matrix, as SDPA)",
            "axolotl src/axolotl/loaders/model.py _configure_embedding_dtypes: embeddings and norms converted back to "
            "torch_dtype (bf16) for adapters; src/axolotl/loaders/adapter.py: get_peft_model without "
            "autocast_adapter_dtype unless peft_autocast_adapter_dtype is set (peft's default: fp32 adapters)",
            "axolotl src/axolotl/core/builders/base.py _configure_gradient_checkpointing: use_reentrant False unless "
            "gradient_checkpointing_kwargs say otherwise",
            AXOLOTL_PACKS)),
    Recipe("axolotl-qlora", "axolotl's QLoRA example (examples/llama-3/qlora-1b.yml): nf4 base with double "
                            "quantisation, norms back in bf16 (no fp32 upcast), r=32, LoRA dropout 0.05, gradient "
                            "checkpointing, bitsandbytes 8-bit AdamW; vs trl-sft-qlora: no fp32 upcast, 8-bit AdamW "
                            "instead of paged 32-bit, HF's loss",
           (("method", "qlora"), ("precision", "amp"), ("weights", "nf4"), ("double_quant", True),
            ("upcast_fp32", False), ("adapter_dtype", "fp32"), ("lora_rank", 32), ("lora_targets", "all-linear"),
            ("lora_dropout", 0.05), ("grad_ckpt", True), ("optimizer", "adamw8bit"), ("attention", "sdpa"),
            ("keep_outputs", False), ("loss", "hf")),
           ("axolotl examples/llama-3/qlora-1b.yml: adapter qlora, load_in_4bit, lora_r 32, lora_dropout 0.05, "
            "optimizer adamw_bnb_8bit, gradient_checkpointing true, attn_implementation flash_attention_2",
            "axolotl src/axolotl/loaders/model.py _set_quantization_config: bnb_4bit_quant_type nf4, "
            "bnb_4bit_use_double_quant True; _prepare_model_for_quantization runs prepare_model_for_kbit_training "
            "(patched by src/axolotl/monkeypatch/peft/utils.py to leave embed_tokens and lm_head), then "
            "_convert_embedding_modules_dtype puts the norms back in torch_dtype (bf16)",
            AXOLOTL_PACKS)),
    Recipe("unsloth", "Unsloth's FastLanguageModel defaults: nf4 base with double quantisation, fp32 adapters r=16 "
                      "on the 7 projections, no LoRA dropout, its checkpointing with the layer inputs in CPU RAM, "
                      "8-bit AdamW, a chunked fused cross-entropy; its fused LoRA kernels priced as peft's",
           (("method", "qlora"), ("precision", "amp"), ("weights", "nf4"), ("double_quant", True),
            ("upcast_fp32", False), ("adapter_dtype", "fp32"), ("lora_rank", 16), ("lora_targets", "all-linear"),
            ("lora_dropout", 0.0), ("grad_ckpt", True), ("optimizer", "adamw8bit"), ("attention", "sdpa"),
            ("keep_outputs", False), ("loss", "trl-chunked"), ("offload_checkpoints", True)),
           ("unsloth unsloth/models/loader.py FastLanguageModel.from_pretrained: load_in_4bit = True, "
            "use_gradient_checkpointing = 'unsloth'; BitsAndBytesConfig bnb_4bit_use_double_quant True, nf4",
            "unsloth unsloth/models/llama.py FastLlamaModel.get_peft_model: r 16, lora_alpha 16, lora_dropout 0.0, "
            "q/k/v/o/gate/up/down_proj",
            "unsloth-zoo unsloth_zoo/training_utils.py prepare_model_for_training: only lora_A/lora_B are upcast to "
            "fp32 and trainable; frozen norms and embeddings keep the loaded dtype",
            "unsloth unsloth/models/rl.py: its TRL configs default optim 'adamw_8bit'",
            "unsloth unsloth/models/llama.py CausalLM_fast_forward: unsloth_fused_ce_loss (chunked, logits never "
            "whole; priced as TRL's 256-token chunks)",
            "unsloth-zoo unsloth_zoo/gradient_checkpointing.py UnslothCheckpointFunction (ce232d6): every "
            "checkpointed layer input over 2 MiB but the last is copied to pinned CPU buffers, and copied back into "
            "GPU_BUFFERS (and GPU_BUFFERS_B, double buffering) for its layer's recomputation "
            "(job_options.checkpoint_inputs)",
            "unsloth unsloth/trainer.py L903-911: SFTTrainer's padding_free switched on unless the user set it "
            "(gemma2 and gpt_oss excepted), so a batch is one flattened row with no padding mask")),
    Recipe("llama-factory", "LLaMA-Factory's LoRA SFT example with its defaults: bf16 base, fp32 adapters r=8 on "
                            "every Linear of the text model (a vision tower and projector frozen), no dropout, "
                            "gradient checkpointing, fused AdamW, 8 micro-batches, batches padded to their longest "
                            "sample",
           LLAMA_FACTORY,
           ("LLaMA-Factory examples/train_lora/qwen3_lora_sft.yaml (ff6d4d1, 2026-08-18): finetuning_type lora, "
            "lora_rank 8, lora_target all, per_device_train_batch_size 1, gradient_accumulation_steps 8, bf16 true",
            "src/llamafactory/hparams/finetuning_args.py: lora_dropout 0.0; hparams/model_args.py: "
            "disable_gradient_checkpointing False, use_reentrant_gc True, flash_attn auto (model_utils/attention.py: "
            "the class's SDPA where it has one), upcast_layernorm False",
            "src/llamafactory/model/adapter.py init_adapter: trainable parameters cast to fp32 unless pure_bf16",
            "src/llamafactory/train/sft/trainer.py compute_loss: transformers Trainer's; TrainingArguments' optim "
            "adamw_torch_fused",
            "src/llamafactory/train/sft/workflow.py L62-67: SFTDataCollatorWith4DAttentionMask, a transformers "
            "DataCollatorForSeq2Seq (pads each batch to its longest, pad_to_multiple_of 8, with the attention_mask); "
            "hparams/data_args.py: packing None, off for SFT (FINDINGS.md F72)",
            "src/llamafactory/hparams/finetuning_args.py L546-553: freeze_vision_tower and "
            "freeze_multi_modal_projector True; model/model_utils/visual.py patch_target_modules: a vision-language "
            "model's LoRA targets are the module names outside its vision tower and projector (FINDINGS.md F73)")),
    Recipe("llama-factory-qlora", "llama-factory with quantization_bit 4: an nf4 base with double quantisation, "
                                  "its norms left in bf16",
           nf4_base(LLAMA_FACTORY),
           ("LLaMA-Factory src/llamafactory/hparams/model_args.py (ff6d4d1): quantization_type nf4, "
            "double_quantization True; model/model_utils/quantization.py configure_quantization: "
            "BitsAndBytesConfig(load_in_4bit, bnb_4bit_compute_dtype and bnb_4bit_quant_storage = compute dtype)",
            "src/llamafactory/model/adapter.py init_adapter: a quantised model's trainable parameters cast to fp32; "
            "nothing in src/llamafactory calls peft's prepare_model_for_kbit_training",
            "the rest as llama-factory (examples/train_lora/qwen3_lora_sft.yaml and the argument defaults)")),
    Recipe("ms-swift", "ms-swift's `swift sft --train_type lora` with its defaults on one GPU: bf16 base, fp32 adapters "
                       "r=8 on every Linear of the text model (a vision tower and aligner frozen) with dropout 0.05, "
                       "reentrant gradient checkpointing, fused AdamW, 16 micro-batches, batches padded to their "
                       "longest sample; its logits priced for every token, where ms-swift computes only the labelled "
                       "tokens' (use_logits_to_keep): an upper bound on the loss's share",
           MS_SWIFT,
           ("ms-swift swift/arguments/tuner_args.py (3602360, 2026-08-22): target_modules ['all-linear'], lora_rank 8, "
            "lora_alpha 32, lora_dropout 0.05, lora_dtype None (peft's fp32 adapters, swift/tuners/peft.py "
            "_cast_adapter_dtype_hook)",
            "swift/trainers/arguments.py: per_device_train_batch_size 1, gradient_checkpointing True, "
            "gradient_accumulation_steps ceil(16 / batch / world size); swift/trainers/mixin.py "
            "_fix_gradient_checkpointing: use_reentrant True on one GPU (reentrant and non-reentrant peak equal, "
            "FINDINGS.md F38)",
            "swift/arguments/base_args/model_args.py: bf16 follows the model's torch_dtype; transformers' "
            "TrainingArguments optim adamw_torch_fused",
            "swift/trainers/mixin.py get_use_logits_to_keep: on where the model's forward takes logits_to_keep; the "
            "logits of the tokens whose label is -100 are not made, a share of each sample the job does not say",
            "swift/template/base.py _data_collator L1909-2018: padded on the right to the batch's longest with the "
            "attention_mask; swift/arguments/base_args/template_args.py L139 padding_free False and base_args.py "
            "L105 packing False (FINDINGS.md F72)",
            "swift/arguments/tuner_args.py L122-124: freeze_llm False, freeze_vit True, freeze_aligner True; "
            "swift/utils/transformers_utils.py get_multimodal_target_regex: all-linear reaches the language model's "
            "Linears alone (FINDINGS.md F73)")),
    Recipe("ms-swift-qlora", "ms-swift with --quant_method bnb --quant_bits 4: an nf4 base with double quantisation "
                             "(its defaults), norms left in bf16",
           nf4_base(MS_SWIFT),
           ("ms-swift swift/arguments/base_args/quant_args.py: bnb_4bit_quant_type 'nf4', bnb_4bit_use_double_quant "
            "True; nothing in swift/ calls peft's prepare_model_for_kbit_training",
            "the rest as ms-swift")),
    Recipe("torchtune", "torchtune's LoRA recipe on its own model code: dtype bf16 everywhere, LoRA r=64 on q, v, "
                        "the output projection and the MLP, no dropout, activation checkpointing, fused AdamW, 8 "
                        "micro-batches per step, its LinearCrossEntropyLoss (8 chunks, fp32 log-softmax kept), k and "
                        "v expanded to every query head, fp32 RoPE caches",
           (("method", "lora"), ("precision", "bf16"), ("adapter_dtype", "bf16"), ("lora_rank", 64),
            ("lora_targets", "q,v,o,mlp"), ("lora_dropout", 0.0), ("grad_ckpt", True), ("optimizer", "adamw-fused"),
            ("keep_outputs", False), ("loss", TORCHTUNE_LOSS), ("grad_accum", 8)),
           ("torchtune recipes/configs/llama3_2/3B_lora_single_device.yaml (bd2a0fc, 2026-04-23): "
            "lora_attn_modules [q_proj, v_proj, output_proj], apply_lora_to_mlp True, lora_rank 64, lora_alpha 128, "
            "lora_dropout 0.0 (L24-28), AdamW fused True (L60), loss LinearCrossEntropyLoss (L68), "
            "gradient_accumulation_steps 8 (L73), dtype bf16 (L87), enable_activation_checkpointing True (L90)",
            "torchtune recipes/lora_finetune_single_device.py: loss_fn.set_model_output(model) (the model skips its "
            "output layer), _loss_step: outputs = model(**batch); loss = loss_fn(outputs, labels); del outputs",
            "torchtune/modules/loss/cross_entropy_loss.py LinearCrossEntropyLoss: index_select of the valid tokens' "
            "hidden states, tensor_split into 8 chunks, F.cross_entropy(linear(chunk).float()) per chunk",
            "torchtune/modules/attention.py MultiHeadAttention.forward: k, v .expand(...).flatten(1, 2) before SDPA; "
            "torchtune/models/*/_component_builders.py: one RoPE module per LoRA attention layer (one for the model "
            "in Llama 3.1 and 3.2)",
            "torchtune/data/_collate.py padded_collate_sft (L190): tokens and labels padded to the batch's longest, "
            "no mask; the model's attention stays causal")),
)}


def recipe(name: str) -> Recipe | None:
    return RECIPES.get(name)


# The site's training jobs, each as the recipe it starts from and the options that make it the site's (the LoRA
# rank is the site's own: site_config.yaml's lora_rank). The full fine-tune and LoRA run PyTorch's foreach AdamW for
# the Trainer's fused default: its step holds a 4-byte temporary per parameter, the larger peak, and the one a loop
# building torch.optim.AdamW gets. QLoRA is LLaMA-Factory's (nf4, double quantisation, no fp32 upcast) with paged
# AdamW 32-bit as the QLoRA paper runs it (Dettmers et al. 2023, arXiv:2305.14314 §2), one micro-batch of unpadded
# samples, and the towers adapted as peft's all-linear adapts them. job_options.site_job builds them; the pages
# print them as flags (recipe_words), and a test holds the command with those flags to the page's figures.
SITE_RECIPES: dict[str, tuple[str, tuple[tuple[str, Any], ...]]] = {
    "full": ("hf-trainer", (("optimizer", "adamw"),)),
    "lora": ("hf-trainer", (("lora_targets", "all-linear"), ("optimizer", "adamw"))),
    "qlora": ("llama-factory-qlora", (("optimizer", "paged-adamw"), ("grad_accum", 1), ("padded", False),
                                      ("tower_adapters", True))),
}
