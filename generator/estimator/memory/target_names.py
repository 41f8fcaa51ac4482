"""The names peft's target_modules match, per LoRA role: transformers' module names per family, peft's defaults."""

from __future__ import annotations

# Module names per LoRA role, as transformers' modeling files name them (peft matches target_modules by the
# last name component). Default: modeling_llama and its descendants; plain MLPs default to fc1/fc2.
NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "qkv": "qkv_proj", "gate": "gate_proj",
         "up": "up_proj", "down": "down_proj", "gate_up": "gate_up_proj", "ssm_in": "in_proj", "ssm_x": "x_proj",
         "ssm_dt": "dt_proj", "ssm_out": "out_proj",
         "q_a": "q_a_proj", "q_b": "q_b_proj", "kv_a": "kv_a_proj_with_mqa", "kv_b": "kv_b_proj", "kv": "kv_proj",
         "o_b": "o_b_proj"}


FAMILY_NAMES = {
    "gpt2": {"qkv": "c_attn", "o": "c_proj", "up": "c_fc", "down": "c_proj"},
    "gpt_bigcode": {"qkv": "c_attn", "o": "c_proj", "up": "c_fc", "down": "c_proj"},
    "starcoder2": {"up": "c_fc", "down": "c_proj"},
    "gpt_neox": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "falcon": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "bloom": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "opt": {"o": "out_proj", "up": "fc1", "down": "fc2"},
    "gptj": {"o": "out_proj", "up": "fc_in", "down": "fc_out"},
    "phi": {"o": "dense", "up": "fc1", "down": "fc2"},
    # transformers 5.24's modeling files (each model's Linears on the meta device, tests/test_linear_names.py)
    **dict.fromkeys(("persimmon", "fuyu", "gpt_neox_japanese"), {"qkv": "query_key_value", "o": "dense",
                                                                "up": "dense_h_to_4h", "down": "dense_4h_to_h"}),
    "codegen": {"o": "out_proj", "up": "fc_in", "down": "fc_out"},
    "gpt_neo": {"o": "out_proj", "up": "c_fc", "down": "c_proj"},
    **dict.fromkeys(("biogpt", "xglm"), {"o": "out_proj"}),
    **dict.fromkeys(("apertus", "apertus1p5_text", "arcee", "jais2", "nemotron"),
                    {"up": "up_proj", "down": "down_proj"}),
    "mpt": {"qkv": "Wqkv", "o": "out_proj", "up": "up_proj", "down": "down_proj"},
    **dict.fromkeys(("lfm2", "lfm3", "lfm2_vl", "lfm3_vl", "lfm2_moe"),
                    {"o": "out_proj", "gate": "w1", "up": "w3", "down": "w2"}),
    # transformers' BertSelfAttention query/key/value, BertSelfOutput, BertIntermediate and BertOutput all `dense`,
    # and every encoder that copies them (their modules on the meta device: tests/test_linear_names.py)
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "electra", "bert-generation", "big_bird", "camembert",
                     "convbert", "data2vec-text", "ernie", "layoutlm", "megatron-bert", "mobilebert", "mra", "rembert",
                     "roberta-prelayernorm", "roc_bert", "roformer", "tapas", "xlm-roberta-xl", "yoso", "ibert",
                     "xmod", "nystromformer", "longformer", "esm", "splinter", "markuplm", "lilt", "bros", "luke"),
                    {"q": "query", "k": "key", "v": "value", "o": "dense", "up": "dense", "down": "dense"}),
    "deberta-v2": {"q": "query_proj", "k": "key_proj", "v": "value_proj", "o": "dense", "up": "dense", "down": "dense"},
    "deberta": {"qkv": "in_proj", "o": "dense", "up": "dense", "down": "dense"},
    "fnet": {"up": "dense", "down": "dense"},
    "funnel": {"q": "q_head", "k": "k_head", "v": "v_head", "o": "post_proj", "up": "linear_1", "down": "linear_2"},
    **dict.fromkeys(("modernbert", "modernvbert"), {"qkv": "Wqkv", "o": "Wo", "gate_up": "Wi", "down": "Wo"}),
    # DistilBERT's MultiHeadSelfAttention and FFN; XLM's (and FlauBERT's) MultiHeadAttention and TransformerFFN
    **dict.fromkeys(("distilbert", "xlm", "flaubert"), {"q": "q_lin", "k": "k_lin", "v": "v_lin", "o": "out_lin",
                                                      "up": "lin1", "down": "lin2"}),
    "mpnet": {"q": "q", "k": "k", "v": "v", "o": "o", "up": "dense", "down": "dense"},
    # ChatGLM's own code (modeling_chatglm.py): one fused query_key_value, dense, dense_h_to_4h, dense_4h_to_h
    "chatglm": {"q": "query_key_value", "k": "query_key_value", "v": "query_key_value", "o": "dense",
                "gate_up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    # The other custom-code types (config.custom_code) name their Linears in their own modeling files:
    # Qwen-1's modeling_qwen.py QWenAttention c_attn (q, k, v fused), c_proj; QWenMLP w1 (the up half, a1),
    # w2 (the gate, silu(a2)), c_proj (so `c_proj` adapts both, as in gpt2);
    "qwen": {"q": "c_attn", "k": "c_attn", "v": "c_attn", "o": "c_proj", "gate": "w2", "up": "w1", "down": "c_proj"},
    # InternLM2's modeling_internlm2.py attention.wqkv, wo; feed_forward w2(act(w1(x)) * w3(x));
    "internlm2": {"q": "wqkv", "k": "wqkv", "v": "wqkv", "o": "wo", "gate": "w1", "up": "w3", "down": "w2"},
    # Ling 2.0's modeling_bailing_moe_v2.py BailingMoeV2Attention query_key_value, dense (MLPs: gate/up/down_proj).
    "bailing_moe": {"q": "query_key_value", "k": "query_key_value", "v": "query_key_value", "o": "dense"},
    # transformers 5.24 (each model's Linears on the meta device): CTRL's Wq/Wk/Wv/dense and an nn.Sequential MLP
    # (a peft key matches a name's end, so "ffn.0", not "0", which ends the blocks' names too); OpenAI GPT's Conv1D
    # as GPT-2's; Inkling-2's projections wrap an nn.Linear named `linear`; xLSTM's feed-forward
    "ctrl": {"q": "Wq", "k": "Wk", "v": "Wv", "o": "dense", "up": "ffn.0", "down": "ffn.2"},
    "openai-gpt": {"qkv": "c_attn", "o": "c_proj", "up": "c_fc", "down": "c_proj"},
    **dict.fromkeys(("inkling2_text", "inkling2_loop_text"), {"q": "q_proj.linear", "k": "k_proj.linear",
                                                              "v": "v_proj.linear", "o": "o_proj.linear"}),
    "xlstm": {"gate": "proj_up_gate", "up": "proj_up", "down": "proj_down"},
    # BART-style attention's out_proj (modeling_bart.BartAttention and its copies; fc1/fc2 are the plain MLP's)
    **dict.fromkeys(("bart", "mbart", "plbart", "mvp", "pegasus", "pegasus_x", "marian", "m2m_100", "blenderbot",
                     "blenderbot-small", "bigbird_pegasus", "led", "nllb-moe", "fsmt", "seamless_m4t",
                     "seamless_m4t_v2"), {"o": "out_proj"}),
    # T5Attention's q/k/v/o and T5DenseActDense's wi/wo (T5DenseGatedActDense's wi_0, wi_1, wo: target_roles)
    **dict.fromkeys(("t5", "mt5", "umt5", "longt5", "switch_transformers"),
                    {"q": "q", "k": "k", "v": "v", "o": "o", "gate": "wi_0", "up": "wi", "down": "wo"}),
    "prophetnet": {"q": "query_proj", "k": "key_proj", "v": "value_proj", "o": "out_proj", "up": "intermediate",
                   "down": "output"},
    # DbrxAttention's fused Wqkv and out_proj (its experts are 3-D tensors, its router's Linear `layer`)
    "dbrx": {"qkv": "Wqkv", "o": "out_proj"},
    # ALBERT's AlbertAttention query/key/value/dense and AlbertLayer ffn/ffn_output
    "albert": {"q": "query", "k": "key", "v": "value", "o": "dense", "up": "ffn", "down": "ffn_output"},
}


# peft's own LoRA targets where a run names none (peft 0.21.2 peft/utils/constants.py
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, read by peft/tuners/lora/model.py _prepare_adapter_config):
# TRL leaves lora_target_modules None by default (trl/trainer/model_config.py), so its LoRA runs adapt these. A model
# type missing here makes peft raise ("Please specify `target_modules`").
PEFT_DEFAULT = "peft-default"
PEFT_DEFAULT_TARGETS = {
    **dict.fromkeys(("bart", "opt", "gptj", "gpt_neo", "llama", "llama4", "mistral", "mixtral", "stablelm", "gemma",
                     "gemma2", "gemma3_text", "gemma4", "qwen2", "qwen3"), "q_proj,v_proj"),
    **dict.fromkeys(("bloom", "gpt_neox", "chatglm", "RefinedWebModel", "RefinedWeb", "falcon"), "query_key_value"),
    **dict.fromkeys(("gpt2", "gpt_bigcode"), "c_attn"),
    **dict.fromkeys(("t5", "mt5"), "q,v"),
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "electra", "layoutlm"), "query,value"),
    "blip-2": "q,v,q_proj,v_proj", "deberta-v2": "query_proj,value_proj", "deberta": "in_proj", "mpt": "Wqkv",
    "btlm": "c_proj,c_attn", "codegen": "qkv_proj", "phi": "q_proj,v_proj,fc1,fc2",
    "nemotron_h": "q_proj,k_proj,v_proj,o_proj", "rwkv": "key,value,receptance,output",
    "rwkv7": "r_proj,k_proj,v_proj,o_proj,key,value",
}
