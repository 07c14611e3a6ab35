/* loom run configuration: one typed struct with a default for every key, loaded from YAML
 * (libyaml, with line numbers for errors), command-line overrides in Hydra's grammar
 * (a.b=c, +a.b=c, ~a.b), validation, and a fully resolved YAML dump for the run directory.
 *
 * The schema table (src/config/config_schema.c) is the single list of keys: name, type,
 * default, allowed values, meaning, and where the value lives in loom_config. Everything
 * else (parsing, errors with nearest-key suggestions, `loom config schema`, the dump) is
 * driven by it. */
#ifndef LOOM_CONFIG_H
#define LOOM_CONFIG_H
#include <stdbool.h>
#include <stdint.h>

#define LOOM_STR_MAX 512

typedef struct {
  char name[LOOM_STR_MAX];       /* run.name: human name; run id is derived from it */
  char output_dir[LOOM_STR_MAX]; /* run.output_dir: parent of runs/<run_id>/ */
  long seed;                     /* run.seed: seeds init, data order, everything */
  long max_restarts;             /* run.max_restarts: relaunches after a rank dies (--nproc) */
  char tags[LOOM_STR_MAX];       /* run.tags: "ablation,warmup" (a YAML list in files) */
  char notes[LOOM_STR_MAX];      /* run.notes: free text about the run */
  /* lineage: set by loom train when a resume with a changed config forks a new run */
  char parent[LOOM_STR_MAX];            /* run.parent: run id it was forked from, "" = none */
  char parent_checkpoint[LOOM_STR_MAX]; /* run.parent_checkpoint: the checkpoint it started at */
} loom_config_run;

/* Mixture-of-Experts MLP layers (`model.moe.*`, Hugging Face's Qwen2-MoE / Qwen3-MoE / Mixtral
 * config names in brackets). Integers 0 (shared_intermediate -1), strings "" and floats < 0
 * mean "from the preset" (a dense preset has no experts). */
typedef struct {
  long experts;               /* routed experts E [num_experts / num_local_experts]; 0 = dense */
  long top_k;                 /* experts per token k [num_experts_per_tok] */
  long intermediate;          /* each expert's SwiGLU inner size [moe_intermediate_size] */
  long shared_intermediate;   /* the shared expert's inner size, 0 = none
                                 [shared_expert_intermediate_size] */
  char norm_topk[8];          /* "true" | "false" | "": renormalise the k weights [norm_topk_prob] */
  long sparse_step;           /* layer l is MoE when (l+1) % step == 0 [decoder_sparse_step] */
  char mlp_only_layers[LOOM_STR_MAX]; /* "0,5": dense layers [mlp_only_layers]; "none" = none */
  double aux_loss_coef;       /* load-balancing loss coefficient [router_aux_loss_coef] */
  double z_loss_coef;         /* router z-loss coefficient (Megatron's --moe-z-loss-coeff) */
  double capacity_factor;     /* 0 = dropless; > 0: each expert takes at most
                                 ceil(cf * tokens * k / E) tokens, the rest are dropped */
  char drop_policy[16];       /* with a capacity: drop the lowest "probs" or the latest "position" */
  double bias_update_rate;    /* DeepSeek-V3 auxiliary-loss-free balancing: per-expert selection
                                 bias moved by -rate * sign(load - mean) after each step; 0 = off */
} loom_config_moe;

typedef struct {
  char preset[64];          /* model.preset: gpt2-124m, qwen2.5-0.5b, tiny-gpt2, ... or "" */
  char arch[16];            /* model.arch: gpt2 | llama ("" = from preset) */
  long vocab_size;          /* real vocabulary size (0 = from preset / tokenizer) */
  long vocab_pad_multiple;  /* padded vocab = round up to this multiple */
  long hidden;              /* 0 = from preset */
  long layers;
  long heads;
  long kv_heads;            /* 0 = heads (no GQA) */
  long head_dim;            /* 0 = hidden / heads */
  long intermediate;        /* 0 = 4*hidden (gpt2) or preset */
  long max_seq;             /* learned positions (gpt2) / rope limit */
  double norm_eps;          /* 0 = family default (1e-5 gpt2, 1e-6 llama) */
  double rope_theta;        /* llama family (0 = preset, else 10000) */
  char qkv_bias[8];         /* "true" | "false" | "" (= family/preset default) */
  char tied_embeddings[8];  /* "true" | "false" | "" */
  char qk_norm[8];          /* "true" | "false" | "": per-head RMSNorm of q and k before RoPE
                               (Qwen3's q_norm / k_norm) */
  double init_std;          /* normal init std for weights (0.02) */
  loom_config_moe moe;      /* model.moe.*: Mixture-of-Experts layers */
} loom_config_model;

typedef struct {
  long steps;                  /* optimizer steps */
  long micro_batch_size;       /* B */
  long seq_len;                /* T */
  long grad_accum;             /* micro-batches per optimizer step (per data-parallel rank) */
  long global_batch_size;      /* sequences per step; 0 = micro_batch_size*grad_accum*dp,
                                  else grad_accum is derived from it */
  double lr;                   /* peak learning rate */
  double min_lr_ratio;         /* floor of linear/cosine decay, as a fraction of lr */
  char lr_schedule[16];        /* constant | linear | cosine */
  long warmup_steps;           /* linear warmup; overrides warmup_ratio when > 0 */
  double warmup_ratio;         /* warmup as a fraction of steps */
  double weight_decay;
  double beta1, beta2, eps;    /* AdamW */
  double grad_clip;            /* global-norm clip; 0 disables */
  char dtype[8];               /* fp32 | bf16: matmul inputs (fp32 accumulation) */
  char param_dtype[8];         /* fp32 | bf16: parameters and gradients are stored in this */
  char optim_dtype[8];         /* fp32 | bf16: AdamW first/second moments */
  char reduce_dtype[8];        /* fp32 | bf16: data-parallel gradient reductions */
  bool activation_checkpointing; /* recompute each block in backward */
  bool decay_norms_and_biases; /* false: no weight decay on norms, biases */
  bool freeze_vision;          /* vision-language: keep the vision encoder fixed */
  bool freeze_projector;       /* ... the merger / projector */
  bool freeze_lm;              /* ... the language model (two-stage training, seed 004) */
  long log_every;              /* train.log / progress cadence in steps (metrics: every step) */
  long eval_every;             /* validation loss every N steps (0: only at the end) */
  long eval_batches;           /* batches (a step's global batch each) per evaluation; 0 = all */
  char skip_steps[LOOM_STR_MAX]; /* steps whose batches are read but not trained on:
                                    "100-110,300-400" (loom_skip_steps_parse) */
} loom_config_training;

/* training.skip_steps parsed (src/config/skip_steps.c): inclusive ranges of steps, sorted,
 * not overlapping. */
typedef struct {
  long first, last;
} loom_step_range;
typedef struct {
  loom_step_range *r; /* (n) */
  int n;
} loom_skip_steps;
/* text: steps N or ranges A-B (1 <= A <= B) separated by commas or spaces, any order, no
 * overlaps ("": none). Errors name the item at fault. */
int loom_skip_steps_parse(const char *text, loom_skip_steps *out);
void loom_skip_steps_free(loom_skip_steps *s);
bool loom_skip_steps_has(const loom_skip_steps *s, long step);
/* How many of the steps 1..upto are skipped. */
long loom_skip_steps_count(const loom_skip_steps *s, long upto);
/* Whether a and b skip the same steps among 1..upto. */
bool loom_skip_steps_same_upto(const loom_skip_steps *a, const loom_skip_steps *b, long upto);

typedef struct {
  char train_shards[LOOM_STR_MAX]; /* token shard file, directory or glob */
  char tokenizer[LOOM_STR_MAX];    /* tokenizer.json (for decoding samples; optional) */
  /* vision-language data (include/loom/vqa.h), used when format is "vqa" */
  char format[16];                 /* tokens | vqa */
  char vqa_path[LOOM_STR_MAX];     /* prepared Energon-style dir or LLaVA .json/.jsonl */
  char split[16];                  /* train | val | test (prepared dirs) */
  long image_min_pixels;           /* smart_resize lower bound (56*56) */
  long image_max_pixels;           /* smart_resize upper bound (28*28*1280) */
  bool skip_bad_samples;           /* skip and count bad samples instead of stopping */
  char val_shards[LOOM_STR_MAX];   /* validation data: token shards, or (vqa) a dataset */
  double val_fraction;             /* tokens: hold out this tail fraction of train_shards */
  /* packed documents (docs/EXPERIMENTS.md, "Packed documents"; tokens format only) */
  bool pack_documents;             /* attention and positions restart after each end-of-doc */
} loom_config_data;

/* Hybrid parallelism: a mesh (pp, dp, cp, sp, tp; tp innermost) whose product is the number
 * of MPI ranks; ZeRO stage; pipeline schedule. */
typedef struct {
  long dp, tp, pp, sp;                /* mesh axes */
  long cp;                            /* context parallelism: ring attention ranks */
  long ep;                            /* expert parallelism: ranks the experts are split over,
                                         carved from the data-parallel ranks */
  long etp;                           /* simulator only: expert tensor-parallel ranks (Megatron's
                                         parallel folding); 0 = tp */
  char sp_mode[16];                   /* ulysses | megatron (megatron: sequence-parallel tp) */
  long zero;                          /* 0 | 1 | 2 | 3 */
  long vpp;                           /* virtual pipeline chunks per pp rank (interleaved) */
  char schedule[16];                  /* gpipe | 1f1b | interleaved */
  char stage_layers[LOOM_STR_MAX];    /* explicit layers per stage "3,3,2" ("" = even split) */
  char schedule_file[LOOM_STR_MAX];   /* user-written schedule (text form) instead of schedule */
  double bucket_mb;                   /* data-parallel gradient bucket size in MiB */
  double timeout_s;                   /* collective timeout before aborting all ranks */
} loom_config_parallel;

/* Vision-language models: the vision encoder's own parallel strategy (`vision.parallel.*`);
 * the text decoder's is `parallel` (also spelled `text.parallel`). 0 / -1 / "" = follow the
 * text strategy (see docs/VISION.md). */
typedef struct {
  long dp, tp, sp;          /* 0: same as the text decoder (tp and sp both 0: text's tp and sp) */
  long cp;                  /* vision context parallelism (ring attention); 0 = 1 */
  long zero;                /* -1: same as parallel.zero */
  char placement[16];       /* collocated | separate */
} loom_config_vision_parallel;

/* Vision-language models: the vision module's precision policy (`vision.*_dtype`); "" = the
 * text module's training.param_dtype / training.optim_dtype. */
typedef struct {
  char param_dtype[8];      /* "" | fp32 | bf16 */
  char optim_dtype[8];      /* "" | fp32 | bf16 */
} loom_config_vision;

typedef struct {
  long every;         /* save checkpoint_<step>/ every N steps; 0 = never */
  bool save_final;    /* write final_checkpoint/ */
  long keep_last;     /* keep only the newest N periodic checkpoints; 0 = keep all */
  bool save_gradients; /* also write gradients.safetensors (last step's gradients) */
  char init_from[LOOM_STR_MAX]; /* start from these weights: a loom checkpoint (any layout) or
                                   a Hugging Face directory; "" = fresh initialisation */
} loom_config_checkpoint;

/* User keys (Hydra's +key=value): dotted names outside the schema, kept as text, dumped to
 * config.yaml as "+name: value" and recorded as registry columns. */
#define LOOM_USER_KEYS_MAX 32
#define LOOM_USER_KEY_NAME_MAX 64
typedef struct {
  char name[LOOM_USER_KEY_NAME_MAX];
  char value[LOOM_STR_MAX];
} loom_config_user_key;

typedef struct {
  loom_config_run run;
  loom_config_model model;
  loom_config_training training;
  loom_config_data data;
  loom_config_checkpoint checkpoint;
  loom_config_parallel parallel;
  loom_config_vision_parallel vision_parallel;
  loom_config_vision vision;
  int nuser;                                   /* user keys, in the order they were added */
  loom_config_user_key user[LOOM_USER_KEYS_MAX];
} loom_config;

/* Fill every key with its default. */
void loom_config_defaults(loom_config *c);
/* Load YAML over the defaults. Unknown keys, wrong types and bad enum values are errors that
 * name the file, line, key and (for unknown keys) the nearest valid key. */
int loom_config_load(loom_config *c, const char *yaml_path);
/* loom_config_load with config groups: the file's `defaults:` list (- GROUP: OPTION, _self_)
 * composes configs/GROUP/OPTION.yaml files found in the search path (the file's directory,
 * ./configs, the source tree's configs/); `choices` are command-line "GROUP=OPTION" texts
 * that replace the option of that group in the defaults list, or, for groups it does not
 * name, load after the file. yaml_path may be NULL (defaults, then the choices). */
int loom_config_load_composed(loom_config *c, const char *yaml_path, char *const *choices,
                              int nchoices);
/* True for "GROUP=OPTION" (a name without a dot before '='): a config group choice. */
bool loom_config_is_group_choice(const char *expr);
/* Apply one override: "a.b=c" (key must exist), "+a.b=c" (add; for loom's fixed schema the
 * key must be a valid key too), "~a.b" (reset to default). */
int loom_config_override(loom_config *c, const char *expr);
/* User keys. add: false = replace an existing one (++key / key=), true = it must be new
 * (+key). The name must not be a schema key, has at least one dot, and letters, digits and
 * '_' in each part (e.g. exp.hypothesis). */
int loom_config_user_set(loom_config *c, const char *name, const char *value, bool add);
const char *loom_config_user_get(const loom_config *c, const char *name); /* NULL: absent */
bool loom_config_user_remove(loom_config *c, const char *name);
/* Cross-key checks that need the whole config (e.g. enum values, positive sizes). */
int loom_config_validate(const loom_config *c);
/* training.global_batch_size -> training.grad_accum for a run with parallel.dp data-parallel
 * ranks: grad_accum = global_batch_size / (micro_batch_size * dp). Errors (with the
 * arithmetic) when it does not divide, or when grad_accum is set (not 1, its default) to
 * another value. Nothing changes when global_batch_size is 0. */
int loom_config_resolve_grad_accum(loom_config *c);
/* Resolved config as YAML text (malloc'd), every key present. */
char *loom_config_to_yaml(const loom_config *c);
/* The YAML of c where the keys whose value in resolved differs (the model dimensions a preset
 * fills in for 0 and "") say so: show_resolved prints resolved's value and "# origin"
 * ("hidden: 768  # from model.preset gpt2-124m"); otherwise c's value stays, so that the text
 * loads back to c, and the comment gives the other ("hidden: 0  # 768: from ..."). */
char *loom_config_to_yaml_resolved(const loom_config *c, const loom_config *resolved,
                                   const char *origin, bool show_resolved);
/* Write the YAML atomically. */
int loom_config_save(const loom_config *c, const char *path);
/* Stable hash of the resolved YAML (stored in checkpoints to detect mismatched resumes). */
uint64_t loom_config_hash(const loom_config *c);
/* Print every key with type, default and meaning (for `loom config schema`). */
void loom_config_print_schema(void);

#endif
