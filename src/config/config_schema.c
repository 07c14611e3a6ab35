/* The config schema: one row per key (dotted name, type, default, allowed values, meaning,
 * offset/size in loom_config). Also key lookup, loom_config_defaults and the
 * `loom config schema` table. Every other config file is driven by this table. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "loom/core.h"

#define FIELD(sec, f) offsetof(loom_config, sec.f), sizeof(((loom_config *)0)->sec.f)

static const char *const arch_values[] = {"", "gpt2", "llama", NULL};
static const char *const tristate_values[] = {"", "true", "false", NULL};
static const char *const schedule_values[] = {"constant", "linear", "cosine", NULL};
static const char *const dtype_values[] = {"fp32", "bf16", NULL};
static const char *const dtype_or_text_values[] = {"", "fp32", "bf16", NULL};
static const char *const sp_mode_values[] = {"ulysses", "megatron", NULL};
static const char *const pp_schedule_values[] = {"1f1b", "gpipe", "interleaved", NULL};
static const char *const data_format_values[] = {"tokens", "vqa", NULL};
static const char *const placement_values[] = {"collocated", "separate", NULL};
static const char *const data_split_values[] = {"train", "val", "test", NULL};
static const char *const drop_policy_values[] = {"probs", "position", NULL};

#define S LOOM_KEY_STRING
#define I LOOM_KEY_INT
#define F LOOM_KEY_FLOAT
#define B LOOM_KEY_BOOL
#define E LOOM_KEY_ENUM

const loom_config_key loom_config_keys[] = {
    {"run.name", S, "", NULL, "human name of the run; the run id is derived from it",
     FIELD(run, name)},
    {"run.output_dir", S, "runs", NULL, "parent directory of runs/<run_id>/",
     FIELD(run, output_dir)},
    {"run.seed", I, "1337", NULL, "seeds weight init, data order and everything random",
     FIELD(run, seed)},
    {"run.max_restarts", I, "0", NULL,
     "relaunch the job this many times at most after a rank dies or a collective times out, "
     "from the newest complete checkpoint (loom train; same as --max-restarts)",
     FIELD(run, max_restarts)},
    {"run.tags", S, "", NULL,
     "labels of the run: a list ([ablation, warmup]), kept as \"ablation,warmup\"; "
     "loom runs --filter \"run.tags HAS 'ablation'\"", FIELD(run, tags)},
    {"run.notes", S, "", NULL, "free text about the run (recorded in the registry)",
     FIELD(run, notes)},
    /* lineage (docs/EXPERIMENTS.md "Resume and lineage"): written by loom train */
    {"run.parent", S, "", NULL,
     "run id this run was forked from (set by loom train when --resume changes the config)",
     FIELD(run, parent)},
    {"run.parent_checkpoint", S, "", NULL,
     "checkpoint of run.parent this run started from (set by loom train with run.parent)",
     FIELD(run, parent_checkpoint)},

    {"model.preset", S, "tiny-gpt2", NULL,
     "model preset (gpt2-124m, qwen2.5-0.5b, tiny-gpt2, ...) or \"\" for none",
     FIELD(model, preset)},
    {"model.arch", E, "", arch_values, "architecture family (\"\" = from the preset)",
     FIELD(model, arch)},
    {"model.vocab_size", I, "0", NULL, "real vocabulary size (0 = from preset / tokenizer)",
     FIELD(model, vocab_size)},
    {"model.vocab_pad_multiple", I, "64", NULL,
     "embedding rows are padded up to a multiple of this", FIELD(model, vocab_pad_multiple)},
    {"model.hidden", I, "0", NULL, "hidden size (0 = from preset)", FIELD(model, hidden)},
    {"model.layers", I, "0", NULL, "number of transformer blocks (0 = from preset)",
     FIELD(model, layers)},
    {"model.heads", I, "0", NULL, "attention heads (0 = from preset)", FIELD(model, heads)},
    {"model.kv_heads", I, "0", NULL, "key/value heads for GQA (0 = heads, no GQA)",
     FIELD(model, kv_heads)},
    {"model.head_dim", I, "0", NULL, "per-head dimension (0 = hidden / heads)",
     FIELD(model, head_dim)},
    {"model.intermediate", I, "0", NULL, "MLP inner size (0 = 4*hidden for gpt2, or preset)",
     FIELD(model, intermediate)},
    {"model.max_seq", I, "0", NULL,
     "learned positions (gpt2) / rope limit (0 = from preset)", FIELD(model, max_seq)},
    {"model.norm_eps", F, "0", NULL, "norm epsilon (0 = family default: 1e-5 gpt2, 1e-6 llama)",
     FIELD(model, norm_eps)},
    {"model.rope_theta", F, "0", NULL,
     "rotary embedding base, llama family (0 = from preset, else 10000)",
     FIELD(model, rope_theta)},
    {"model.qkv_bias", E, "", tristate_values, "bias on q/k/v projections (\"\" = family default)",
     FIELD(model, qkv_bias)},
    {"model.tied_embeddings", E, "", tristate_values,
     "output head shares the token embedding (\"\" = family default)",
     FIELD(model, tied_embeddings)},
    {"model.qk_norm", E, "", tristate_values,
     "per-head RMSNorm of q and k before RoPE, as Qwen3's q_norm/k_norm (\"\" = preset)",
     FIELD(model, qk_norm)},
    {"model.init_std", F, "0.02", NULL, "std of the normal init of weight matrices",
     FIELD(model, init_std)},

    /* Mixture-of-Experts layers (docs/MOE.md); 0 / "" / -1 = the preset's */
    {"model.moe.experts", I, "0", NULL,
     "routed experts per MoE layer (HF num_experts; 0 = the preset's, a dense preset has none)",
     FIELD(model, moe.experts)},
    {"model.moe.top_k", I, "0", NULL, "experts each token is routed to (HF num_experts_per_tok)",
     FIELD(model, moe.top_k)},
    {"model.moe.intermediate", I, "0", NULL,
     "each expert's SwiGLU inner size (HF moe_intermediate_size)", FIELD(model, moe.intermediate)},
    {"model.moe.shared_intermediate", I, "-1", NULL,
     "inner size of the shared expert gated by sigmoid(shared_expert_gate(x)), as Qwen2-MoE "
     "(HF shared_expert_intermediate_size; 0 = none, -1 = the preset's)",
     FIELD(model, moe.shared_intermediate)},
    {"model.moe.norm_topk", E, "", tristate_values,
     "renormalise the k routing weights to sum to 1 (HF norm_topk_prob; \"\" = the preset's)",
     FIELD(model, moe.norm_topk)},
    {"model.moe.sparse_step", I, "0", NULL,
     "layer l (from 0) is an MoE layer when (l+1) % sparse_step == 0 (HF decoder_sparse_step)",
     FIELD(model, moe.sparse_step)},
    {"model.moe.mlp_only_layers", S, "", NULL,
     "comma-separated layers that keep a dense MLP (HF mlp_only_layers; \"none\" = none)",
     FIELD(model, moe.mlp_only_layers)},
    {"model.moe.aux_loss_coef", F, "-1", NULL,
     "coefficient of the load-balancing loss, E * sum f*P over all MoE layers pooled "
     "(HF router_aux_loss_coef)", FIELD(model, moe.aux_loss_coef)},
    {"model.moe.z_loss_coef", F, "-1", NULL,
     "coefficient of the router z-loss mean(logsumexp(logits)^2) (Megatron --moe-z-loss-coeff)",
     FIELD(model, moe.z_loss_coef)},
    {"model.moe.capacity_factor", F, "-1", NULL,
     "0: dropless (no token is dropped); > 0: an expert takes at most "
     "ceil(capacity_factor * tokens * top_k / experts) tokens per micro-batch, the rest dropped",
     FIELD(model, moe.capacity_factor)},
    {"model.moe.drop_policy", E, "probs", drop_policy_values,
     "which tokens an over-full expert drops: the lowest routing probability or the latest "
     "position", FIELD(model, moe.drop_policy)},
    {"model.moe.bias_update_rate", F, "-1", NULL,
     "auxiliary-loss-free balancing (DeepSeek-V3): a per-expert bias added to the scores for "
     "selection only, moved by -rate * sign(load - mean load) after each step; 0 = off",
     FIELD(model, moe.bias_update_rate)},

    {"training.steps", I, "200", NULL,
     "number of optimizer steps (0: no step: evaluate the initial weights on the validation data, if any, and save them as the final checkpoint)",
     FIELD(training, steps)},
    {"training.micro_batch_size", I, "8", NULL, "sequences per micro-batch (B)",
     FIELD(training, micro_batch_size)},
    {"training.seq_len", I, "64", NULL, "tokens per sequence (T)", FIELD(training, seq_len)},
    {"training.grad_accum", I, "1", NULL, "micro-batches accumulated per optimizer step",
     FIELD(training, grad_accum)},
    {"training.global_batch_size", I, "0", NULL,
     "sequences per optimizer step (0 = micro_batch_size * grad_accum * dp; else "
     "loom train sets grad_accum = global_batch_size / (micro_batch_size * dp))", FIELD(training, global_batch_size)},
    {"training.lr", F, "3e-4", NULL, "peak learning rate", FIELD(training, lr)},
    {"training.min_lr_ratio", F, "0.1", NULL,
     "floor of the linear/cosine decay, as a fraction of lr", FIELD(training, min_lr_ratio)},
    {"training.lr_schedule", E, "cosine", schedule_values, "learning-rate decay after warmup",
     FIELD(training, lr_schedule)},
    {"training.warmup_steps", I, "0", NULL,
     "linear warmup steps; overrides warmup_ratio when > 0", FIELD(training, warmup_steps)},
    {"training.warmup_ratio", F, "0.05", NULL, "warmup as a fraction of steps",
     FIELD(training, warmup_ratio)},
    {"training.weight_decay", F, "0.1", NULL, "AdamW decoupled weight decay",
     FIELD(training, weight_decay)},
    {"training.beta1", F, "0.9", NULL, "AdamW first-moment decay", FIELD(training, beta1)},
    {"training.beta2", F, "0.95", NULL, "AdamW second-moment decay", FIELD(training, beta2)},
    {"training.eps", F, "1e-8", NULL, "AdamW denominator epsilon", FIELD(training, eps)},
    {"training.grad_clip", F, "1.0", NULL, "global gradient-norm clip (0 disables)",
     FIELD(training, grad_clip)},
    {"training.dtype", E, "fp32", dtype_values,
     "matmul input precision (bf16: bf16 inputs, fp32 accumulation; what is stored in which "
     "dtype: training.param_dtype, optim_dtype)", FIELD(training, dtype)},
    /* precision policy (docs/TRAINING.md "Precision"): storage dtypes of parameters,
     * gradients, optimizer state and data-parallel reductions */
    {"training.param_dtype", E, "fp32", dtype_values,
     "dtype parameters and their gradients are stored in (bf16 = model.to(torch.bfloat16); "
     "needs training.dtype=bf16)", FIELD(training, param_dtype)},
    {"training.optim_dtype", E, "fp32", dtype_values,
     "dtype of the AdamW first and second moments", FIELD(training, optim_dtype)},
    {"training.reduce_dtype", E, "fp32", dtype_values,
     "dtype of data-parallel gradient reductions (FSDP2 MixedPrecisionPolicy.reduce_dtype)",
     FIELD(training, reduce_dtype)},
    {"training.activation_checkpointing", B, "false", NULL,
     "recompute each block's activations in backward", FIELD(training, activation_checkpointing)},
    {"training.decay_norms_and_biases", B, "false", NULL,
     "apply weight decay to norms and biases too", FIELD(training, decay_norms_and_biases)},
    {"training.freeze_vision", B, "false", NULL,
     "vision-language: do not train the vision encoder", FIELD(training, freeze_vision)},
    {"training.freeze_projector", B, "false", NULL,
     "vision-language: do not train the merger/projector", FIELD(training, freeze_projector)},
    {"training.freeze_lm", B, "false", NULL,
     "vision-language: do not train the language model (stage 1 of LLaVA-style training)",
     FIELD(training, freeze_lm)},
    {"training.log_every", I, "10", NULL, "train.log / progress cadence in steps",
     FIELD(training, log_every)},
    {"training.eval_every", I, "0", NULL,
     "validation loss and perplexity every N steps (0: only at the end; needs validation "
     "data: data.val_shards, data.val_fraction or a vqa directory's val split)",
     FIELD(training, eval_every)},
    {"training.eval_batches", I, "0", NULL,
     "batches per evaluation, each a step's global batch (micro_batch_size*grad_accum*dp "
     "sequences), always the same ones (0: every whole batch of the validation data)",
     FIELD(training, eval_batches)},
    {"training.skip_steps", S, "", NULL,
     "steps whose batches are read but not trained on (no forward, backward or optimizer "
     "step; the learning-rate schedule does not advance), e.g. \"100-110,300-400\": "
     "Megatron-LM's --skip-train-iteration-range, to get past a loss spike",
     FIELD(training, skip_steps)},

    {"data.train_shards", S, "data/demo/train.bin", NULL,
     "token shard file, directory or glob", FIELD(data, train_shards)},
    {"data.tokenizer", S, "data/demo/tokenizer.json", NULL,
     "tokenizer.json used to decode samples (optional)", FIELD(data, tokenizer)},
    {"data.format", E, "tokens", data_format_values,
     "tokens: token shards (data.train_shards); vqa: image + question/answer samples "
     "(data.vqa_path)", FIELD(data, format)},
    {"data.vqa_path", S, "", NULL,
     "vision-language data: a directory prepared by `loom data prepare` (tar shards + "
     ".nv-meta/) or a LLaVA-style .json/.jsonl annotation file", FIELD(data, vqa_path)},
    {"data.split", E, "train", data_split_values,
     "split of a prepared vqa directory to read (.nv-meta/split.yaml)", FIELD(data, split)},
    {"data.image_min_pixels", I, "3136", NULL,
     "smart_resize: images smaller than this many pixels are upscaled (Qwen: 56*56)",
     FIELD(data, image_min_pixels)},
    {"data.image_max_pixels", I, "1003520", NULL,
     "smart_resize: larger images are downscaled to at most this many pixels (28*28*1280)",
     FIELD(data, image_max_pixels)},
    {"data.skip_bad_samples", B, "false", NULL,
     "skip (and count) corrupt, missing or too-small samples instead of stopping",
     FIELD(data, skip_bad_samples)},
    {"data.val_shards", S, "", NULL,
     "validation data: token shard file, directory or glob (tokens), or a vqa dataset whose "
     "val split (directory) or every sample (annotation file) is scored (vqa)",
     FIELD(data, val_shards)},
    {"data.val_fraction", F, "0", NULL,
     "tokens: hold out this fraction of data.train_shards' tokens (the tail) as validation "
     "data; training never reads it (0: none)", FIELD(data, val_fraction)},
    /* packed documents */
    {"data.pack_documents", B, "false", NULL,
     "tokens: each window holds the documents it cuts from the stream; attention stays within "
     "a document and positions restart at 0 after each end-of-document token (shards from "
     "`loom data tokenize --eot`); an end-of-document token predicts nothing",
     FIELD(data, pack_documents)},

    {"checkpoint.every", I, "0", NULL, "save checkpoint_<step>/ every N steps (0 = never)",
     FIELD(checkpoint, every)},
    {"checkpoint.save_final", B, "true", NULL, "write final_checkpoint/ at the end",
     FIELD(checkpoint, save_final)},
    {"checkpoint.keep_last", I, "0", NULL,
     "keep only the newest N periodic checkpoints (0 = keep all)", FIELD(checkpoint, keep_last)},
    {"checkpoint.save_gradients", B, "false", NULL,
     "also write gradients.safetensors (the last step's gradients) in each checkpoint",
     FIELD(checkpoint, save_gradients)},
    {"checkpoint.init_from", S, "", NULL,
     "start from these weights (fresh optimizer, step 0): a loom checkpoint directory (any "
     "layout) or a Hugging Face model directory (config.json + safetensors)",
     FIELD(checkpoint, init_from)},

    {"parallel.dp", I, "1", NULL, "data-parallel ranks", FIELD(parallel, dp)},
    {"parallel.tp", I, "1", NULL, "tensor-parallel ranks (innermost mesh axis)",
     FIELD(parallel, tp)},
    {"parallel.pp", I, "1", NULL, "pipeline stages", FIELD(parallel, pp)},
    {"parallel.sp", I, "1", NULL, "Ulysses sequence-parallel ranks", FIELD(parallel, sp)},
    {"parallel.sp_mode", E, "ulysses", sp_mode_values,
     "ulysses: all-to-all over parallel.sp; megatron: sequence-parallel norms/residuals over tp",
     FIELD(parallel, sp_mode)},
    /* context parallelism (ring attention) */
    {"parallel.ep", I, "1", NULL,
     "expert-parallel ranks: the experts of every MoE layer split over them, tokens exchanged "
     "by all-to-all; carved from the data-parallel ranks (divides parallel.dp and the experts)",
     FIELD(parallel, ep)},
    {"parallel.etp", I, "0", NULL,
     "simulator only (loom sim/plan; loom train ignores it): expert tensor-parallel ranks, "
     "Megatron's parallel folding (experts on etp x ep x edp of the tp x cp x sp x dp ranks); "
     "0 = parallel.tp",
     FIELD(parallel, etp)},
    {"parallel.cp", I, "1", NULL,
     "context-parallel ranks: each holds seq_len/cp tokens of every sequence (chunks r and "
     "2cp-1-r of 2cp), attention by ring exchange of K/V", FIELD(parallel, cp)},
    {"parallel.zero", I, "0", NULL,
     "ZeRO stage: 1 optimizer state, 2 + gradients, 3 + parameters partitioned over dp",
     FIELD(parallel, zero)},
    {"parallel.vpp", I, "1", NULL, "virtual pipeline chunks per stage (interleaved schedule)",
     FIELD(parallel, vpp)},
    {"parallel.schedule", E, "1f1b", pp_schedule_values, "pipeline schedule",
     FIELD(parallel, schedule)},
    {"parallel.stage_layers", S, "", NULL,
     "layers per pipeline stage, e.g. \"3,3,2\" (\"\" = even split)", FIELD(parallel, stage_layers)},
    {"parallel.schedule_file", S, "", NULL,
     "user-written schedule in the text form (overrides parallel.schedule)",
     FIELD(parallel, schedule_file)},
    {"parallel.bucket_mb", F, "25", NULL, "data-parallel gradient bucket size in MiB",
     FIELD(parallel, bucket_mb)},
    {"parallel.timeout_s", F, "300", NULL,
     "seconds a rank waits in a collective before aborting the job", FIELD(parallel, timeout_s)},

    /* the vision module's precision policy (docs/TRAINING.md "Precision") */
    {"vision.param_dtype", E, "", dtype_or_text_values,
     "vision-language: the vision module's training.param_dtype (\"\" = the text module's)",
     FIELD(vision, param_dtype)},
    {"vision.optim_dtype", E, "", dtype_or_text_values,
     "vision-language: the vision module's training.optim_dtype (\"\" = the text module's)",
     FIELD(vision, optim_dtype)},

    {"vision.parallel.dp", I, "0", NULL,
     "vision encoder data-parallel replicas (0 = parallel.dp; must equal it)",
     FIELD(vision_parallel, dp)},
    {"vision.parallel.tp", I, "0", NULL,
     "vision encoder tensor-parallel ranks (tp and sp both 0 = the text decoder's tp and sp)",
     FIELD(vision_parallel, tp)},
    {"vision.parallel.sp", I, "0", NULL, "vision encoder Ulysses sequence-parallel ranks",
     FIELD(vision_parallel, sp)},
    {"vision.parallel.cp", I, "0", NULL,
     "vision encoder context-parallel ranks: its patches split, attention by ring exchange "
     "of K/V within windows and frames (0 = 1; exclusive with vision.parallel.sp)",
     FIELD(vision_parallel, cp)},
    {"vision.parallel.zero", I, "-1", NULL,
     "vision encoder ZeRO stage 0-3 over its data-parallel ranks (-1 = parallel.zero)",
     FIELD(vision_parallel, zero)},
    {"vision.parallel.placement", E, "collocated", placement_values,
     "collocated: the encoder runs on the text ranks; separate: on ranks of its own after them",
     FIELD(vision_parallel, placement)},
};
const size_t loom_config_nkeys = sizeof loom_config_keys / sizeof loom_config_keys[0];

const loom_config_key *loom_config_key_find(const char *name) {
  if (!strncmp(name, "text.parallel.", 14)) { /* text.parallel.X is parallel.X */
    char alias[96];
    snprintf(alias, sizeof alias, "parallel.%s", name + 14);
    for (size_t i = 0; i < loom_config_nkeys; i++)
      if (!strcmp(loom_config_keys[i].name, alias)) return &loom_config_keys[i];
    return NULL;
  }
  for (size_t i = 0; i < loom_config_nkeys; i++)
    if (!strcmp(loom_config_keys[i].name, name)) return &loom_config_keys[i];
  return NULL;
}

size_t loom_config_section_len(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot ? (size_t)(dot - name) : 0;
}

const char *loom_config_key_last(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot ? dot + 1 : name;
}

bool loom_config_is_section(const char *name, size_t len) {
  if (len == 13 && !strncmp(name, "text.parallel", 13)) return true; /* alias of parallel */
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const char *k = loom_config_keys[i].name;
    if (loom_config_section_len(k) == len && !strncmp(k, name, len)) return true;
  }
  return false;
}

bool loom_config_is_section_prefix(const char *name) {
  size_t len = strlen(name);
  if (!strcmp(name, "text")) return true;
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const char *k = loom_config_keys[i].name;
    if (loom_config_section_len(k) > len && !strncmp(k, name, len) && k[len] == '.') return true;
  }
  return false;
}

const char *loom_config_first_key_of(const char *section) {
  if (!strcmp(section, "text.parallel")) section = "parallel"; /* its alias, as in key_find */
  size_t len = strlen(section);
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const char *k = loom_config_keys[i].name;
    if (loom_config_section_len(k) == len && !strncmp(k, section, len)) return k;
  }
  return NULL;
}

/* A broken table is a programming error: check types against field sizes once. */
static void check_table(void) {
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const loom_config_key *k = &loom_config_keys[i];
    switch (k->type) {
      case LOOM_KEY_INT: LOOM_ASSERT(k->size == sizeof(long)); break;
      case LOOM_KEY_FLOAT: LOOM_ASSERT(k->size == sizeof(double)); break;
      case LOOM_KEY_BOOL: LOOM_ASSERT(k->size == sizeof(bool)); break;
      case LOOM_KEY_ENUM: LOOM_ASSERT(k->allowed != NULL); break;
      case LOOM_KEY_STRING: break;
    }
    LOOM_ASSERT(k->offset + k->size <= sizeof(loom_config));
  }
}

void loom_config_defaults(loom_config *c) {
  static bool checked = false;
  if (!checked) {
    check_table();
    checked = true;
  }
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < loom_config_nkeys; i++) loom_config_key_reset(c, &loom_config_keys[i]);
}

/* Type column of the schema table: "enum" keys list their values in the meaning column. */
static void print_row(const loom_config_key *k, const char *def) {
  printf("%-36s %-6s %-26s %s", k->name, loom_config_type_name(k->type), def, k->meaning);
  if (k->type == LOOM_KEY_ENUM) {
    printf("; one of:");
    for (const char *const *v = k->allowed; *v; v++)
      printf(" %s%s", **v ? *v : "\"\"", v[1] ? "," : "");
  }
  printf("\n");
}

void loom_config_print_schema(void) {
  loom_config d;
  loom_config_defaults(&d);
  printf("%-36s %-6s %-26s %s\n", "KEY", "TYPE", "DEFAULT", "MEANING");
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    char *def = loom_config_key_format(&d, &loom_config_keys[i]);
    print_row(&loom_config_keys[i], def);
    free(def);
  }
  printf("\nAlso: +KEY=VALUE adds a user key (a dotted name outside this table, e.g.\n"
         "+exp.hypothesis=warmup_helps; kept in config.yaml, a registry column); a config\n"
         "file's defaults: list and GROUP=OPTION overrides compose configs/GROUP/OPTION.yaml\n"
         "(config groups); 'loom train -m' sweeps KEY=A,B lists. See 'loom config --help'.\n");
}
