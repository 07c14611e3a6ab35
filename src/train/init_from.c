/* checkpoint.init_from: find what kind of weights the path holds (a loom checkpoint, one file
 * or rank pieces; a Hugging Face directory, imported by rank 0 into a temporary loom
 * checkpoint that is always removed), check that they are the run's model, and load them
 * into every module this rank holds through loom_ckpt_load_weights (which maps whole tensors
 * or rank pieces onto any layout). Errors are agreed over the job so that every rank reports
 * the first failing rank's message. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/vision_module.h"
#include "loom/checkpoint.h"
#include "loom/core.h"
#include "loom/hf.h"
#include "train/init_from.h"

typedef enum { SRC_LOOM, SRC_HF } src_kind;

/* Every rank ends with the same outcome: the message of the lowest failing rank. */
static int agree(const loom_comm *job, int rc) {
  double f[1] = {rc ? (double)(job->size - job->rank) : 0.0};
  if (job->size > 1) loom_comm_allreduce_f64(job, f, 1, LOOM_OP_MAX);
  if (f[0] == 0) return 0;
  int root = job->size - (int)f[0];
  char msg[4096];
  memset(msg, 0, sizeof msg);
  if (job->rank == root) snprintf(msg, sizeof msg, "%s", loom_errmsg());
  if (job->size > 1) loom_comm_bcast_bytes(job, msg, sizeof msg, root);
  loom_err("%s", msg);
  return LOOM_ERR;
}

static bool has(const char *dir, const char *name) {
  char *p = loom_sprintf("%s/%s", dir, name);
  bool yes = loom_path_exists(p);
  free(p);
  return yes;
}

static int classify(const char *dir, src_kind *kind) {
  if (!loom_path_exists(dir))
    return loom_err("checkpoint.init_from: '%s' does not exist; give a loom checkpoint "
                    "directory (e.g. runs/<id>/final_checkpoint) or a Hugging Face model "
                    "directory (config.json + model.safetensors)", dir);
  if (!loom_is_dir(dir))
    return loom_err("checkpoint.init_from: '%s' is a file, not a directory; give the directory "
                    "that holds it (a loom checkpoint or a Hugging Face model directory)", dir);
  if (has(dir, "config.yaml")) {
    *kind = SRC_LOOM;
    if (has(dir, "model.safetensors") || has(dir, "index.json")) return 0;
    if (has(dir, "final_checkpoint"))
      return loom_err("checkpoint.init_from: '%s' is a run directory, not a checkpoint; give "
                      "its checkpoint: %s/final_checkpoint (or a checkpoint_<step>)", dir, dir);
    return loom_err("checkpoint.init_from: '%s' has config.yaml but neither model.safetensors "
                    "(one process) nor index.json (rank pieces); is the checkpoint complete?",
                    dir);
  }
  if (has(dir, "config.json")) {
    *kind = SRC_HF;
    return 0;
  }
  return loom_err("checkpoint.init_from: '%s' holds neither config.yaml (a loom checkpoint) nor "
                  "config.json (a Hugging Face model directory); give the checkpoint directory "
                  "itself, e.g. runs/<id>/final_checkpoint", dir);
}

static const char *family(const loom_model_spec *s) {
  if (s->vision.arch == LOOM_VISION_QWEN) return "qwen2.5-vl";
  if (s->vision.arch == LOOM_VISION_LLAVA) return "llava";
  if (s->arch == LOOM_ARCH_GPT2) return "gpt2";
  if (s->moe.experts > 0)
    return s->qk_norm ? "qwen3-moe" : s->moe.shared_intermediate > 0 ? "qwen2-moe" : "moe";
  if (s->qk_norm) return "qwen3";
  return s->qkv_bias ? "qwen2" : "llama";
}

static void fmt_shape(char *buf, size_t cap, const loom_param *p) {
  if (p->ndim > 1) snprintf(buf, cap, "[%d, %d]", p->gshape[0], p->gshape[1]);
  else snprintf(buf, cap, "[%d]", p->gshape[0]);
}

static bool is_vocab(const char *name) {
  return !strcmp(name, "embed.weight") || !strcmp(name, "lm_head.weight");
}

/* The first tensor that differs between the model's layout and the weights' (name or shape;
 * vocabulary matrices compare the real vocabulary rows, padding may differ): a phrase. */
static void first_tensor_diff(const loom_model_spec *run, const loom_model_spec *w,
                              bool names_first, char *out, size_t cap) {
  loom_param_layout a, b;
  loom_param_layout_build(&a, run);
  loom_param_layout_build(&b, w);
  out[0] = 0;
  char sa[48], sb[48];
  /* names_first: a tensor only the model has, or only the weights, before any shape
   * difference (that is what tells two families apart) */
  for (int i = 0; names_first && i < a.count && !out[0]; i++)
    if (!loom_param_find(&b, a.params[i].name)) {
      fmt_shape(sa, sizeof sa, &a.params[i]);
      snprintf(out, cap, "tensor '%s': the model expects %s, the weights have no such tensor",
               a.params[i].name, sa);
    }
  for (int i = 0; names_first && i < b.count && !out[0]; i++)
    if (!loom_param_find(&a, b.params[i].name)) {
      fmt_shape(sb, sizeof sb, &b.params[i]);
      snprintf(out, cap, "tensor '%s': the weights have it (%s), the model does not",
               b.params[i].name, sb);
    }
  for (int i = 0; i < a.count && !out[0]; i++) {
    const loom_param *p = &a.params[i], *q = loom_param_find(&b, p->name);
    fmt_shape(sa, sizeof sa, p);
    if (!q) {
      snprintf(out, cap, "tensor '%s': the model expects %s, the weights have no such tensor",
               p->name, sa);
      break;
    }
    bool same = p->ndim == q->ndim && (p->ndim < 2 || p->gshape[1] == q->gshape[1]) &&
                (is_vocab(p->name) ? run->vocab_size == w->vocab_size
                                   : p->gshape[0] == q->gshape[0]);
    if (same) continue;
    fmt_shape(sb, sizeof sb, q);
    if (is_vocab(p->name)) /* report the real rows, not the padding */
      snprintf(out, cap, "tensor '%s': the model expects %d (+ padding) x %d, the weights "
               "have %d x %d", p->name, run->vocab_size, p->ndim > 1 ? p->gshape[1] : 1,
               w->vocab_size, q->ndim > 1 ? q->gshape[1] : 1);
    else
      snprintf(out, cap, "tensor '%s': the model expects %s, the weights have %s", p->name, sa,
               sb);
  }
  for (int i = 0; i < b.count && !out[0]; i++)
    if (!loom_param_find(&a, b.params[i].name)) {
      fmt_shape(sb, sizeof sb, &b.params[i]);
      snprintf(out, cap, "tensor '%s': the weights have it (%s), the model does not",
               b.params[i].name, sb);
    }
  loom_param_layout_free(&a);
  loom_param_layout_free(&b);
}

static bool same_vision(const loom_vision_spec *a, const loom_vision_spec *b) {
  if (a->arch != b->arch || a->hidden != b->hidden || a->depth != b->depth ||
      a->heads != b->heads || a->intermediate != b->intermediate || a->patch != b->patch ||
      a->temporal != b->temporal || a->merge != b->merge || a->window != b->window ||
      a->image_size != b->image_size || a->n_full != b->n_full ||
      a->rope_theta != b->rope_theta || a->norm_eps != b->norm_eps)
    return false;
  for (int i = 0; i < a->n_full && i < 16; i++)
    if (a->full_layers[i] != b->full_layers[i]) return false;
  for (int i = 0; i < 3; i++)
    if (a->mrope_section[i] != b->mrope_section[i]) return false;
  return true;
}

/* The layers of s that keep a dense MLP among MoE ones: "1,3" or "none". */
static void dense_layers(const loom_model_spec *s, char *out, size_t cap) {
  size_t k = 0;
  out[0] = 0;
  for (int l = 0; l < s->layers && k < cap; l++)
    if (!loom_model_layer_is_moe(s, l))
      k += (size_t)snprintf(out + k, cap - k, "%s%d", k ? "," : "", l);
  if (!out[0]) snprintf(out, cap, "none");
}

/* The weights (spec w, described by wcfg: config.yaml of the checkpoint) must be the run's
 * model: the same family and every dimension; non-shape hyper-parameters that change the
 * function (norm epsilon, rotary base) too. */
static int check_model(const char *path, const loom_config *cfg, const loom_model_spec *run,
                       const loom_config *wcfg, const loom_model_spec *w) {
  char tensor[512];
  /* qwen2 vs llama is model.qkv_bias: a dimension below, not another family */
  bool other_family = run->arch != w->arch || !same_vision(&run->vision, &w->vision);
  first_tensor_diff(run, w, other_family, tensor, sizeof tensor);
  const char *wpreset = wcfg->model.preset[0] ? wcfg->model.preset : "\"\"";
  if (other_family)
    return loom_err("checkpoint.init_from: '%s' holds %s weights but this run's model is %s "
                    "(model.preset = %s, model.arch = %s)%s%s; set model.preset (or model.arch) "
                    "to the weights' model (their config has model.preset = %s, model.arch = "
                    "%s)", path, family(w), family(run),
                    cfg->model.preset[0] ? cfg->model.preset : "\"\"",
                    cfg->model.arch[0] ? cfg->model.arch : "\"\"", tensor[0] ? ": " : "",
                    tensor, wpreset, wcfg->model.arch[0] ? wcfg->model.arch : "\"\"");
  struct {
    const char *key;
    double model, weights;
  } dims[] = {
      {"model.vocab_size", run->vocab_size, w->vocab_size},
      {"model.hidden", run->hidden, w->hidden},
      {"model.layers", run->layers, w->layers},
      {"model.heads", run->heads, w->heads},
      {"model.kv_heads", run->kv_heads, w->kv_heads},
      {"model.head_dim", run->head_dim, w->head_dim},
      {"model.intermediate", run->intermediate, w->intermediate},
      {"model.max_seq", run->arch == LOOM_ARCH_GPT2 ? run->max_seq : 0, /* positions table */
       run->arch == LOOM_ARCH_GPT2 ? w->max_seq : 0},
      {"model.qkv_bias", run->qkv_bias, w->qkv_bias},
      {"model.tied_embeddings", run->tied_embeddings, w->tied_embeddings},
      {"model.norm_eps", run->norm_eps, w->norm_eps},
      {"model.rope_theta", run->arch == LOOM_ARCH_LLAMA ? run->rope_theta : 0,
       run->arch == LOOM_ARCH_LLAMA ? w->rope_theta : 0},
      {"model.qk_norm", run->qk_norm, w->qk_norm},
      {"model.moe.experts", run->moe.experts, w->moe.experts},
      {"model.moe.top_k", run->moe.top_k, w->moe.top_k},
      {"model.moe.intermediate", run->moe.intermediate, w->moe.intermediate},
      {"model.moe.shared_intermediate", run->moe.shared_intermediate,
       w->moe.shared_intermediate},
      {"model.moe.norm_topk", run->moe.norm_topk, w->moe.norm_topk},
      {"model.moe.sparse_step", run->moe.sparse_step, w->moe.sparse_step},
  };
  /* the first key that differs is explained; every differing key is in the fix */
  int first = -1;
  char fix[512] = "", a[32] = "", b[32] = "";
  for (int i = 0; i < (int)(sizeof dims / sizeof dims[0]); i++) {
    if (dims[i].model == dims[i].weights) continue;
    bool flag = !strcmp(dims[i].key, "model.qkv_bias") ||
                !strcmp(dims[i].key, "model.tied_embeddings") ||
                !strcmp(dims[i].key, "model.qk_norm") ||
                !strcmp(dims[i].key, "model.moe.norm_topk");
    char va[32], vb[32];
    if (flag) snprintf(va, sizeof va, "%s", dims[i].model ? "true" : "false");
    else snprintf(va, sizeof va, "%.10g", dims[i].model);
    if (flag) snprintf(vb, sizeof vb, "%s", dims[i].weights ? "true" : "false");
    else snprintf(vb, sizeof vb, "%.10g", dims[i].weights);
    if (first < 0) {
      first = i;
      memcpy(a, va, sizeof a);
      memcpy(b, vb, sizeof b);
    }
    size_t n = strlen(fix);
    snprintf(fix + n, sizeof fix - n, "%s%s=%s", n ? " " : "", dims[i].key, vb);
  }
  if (first >= 0)
    return loom_err("checkpoint.init_from: '%s' holds a %s model with %s = %s, but this run's "
                    "model has %s = %s%s%s; set %s (or give weights of this model)", path,
                    family(w), dims[first].key, b, dims[first].key, a, tensor[0] ? ": " : "",
                    tensor, fix);
  char dense_run[LOOM_STR_MAX], dense_w[LOOM_STR_MAX];
  dense_layers(run, dense_run, sizeof dense_run);
  dense_layers(w, dense_w, sizeof dense_w);
  if (run->moe.experts > 0 && strcmp(dense_run, dense_w))
    return loom_err("checkpoint.init_from: '%s' holds a %s model whose dense (non-MoE) layers "
                    "are %s, but this run's model has %s; set model.moe.mlp_only_layers=%s "
                    "(or give weights of this model)", path, family(w), dense_w, dense_run,
                    dense_w);
  if (tensor[0]) /* dimensions agree but the layouts do not: say which tensor */
    return loom_err("checkpoint.init_from: '%s' does not fit this run's model: %s", path, tensor);
  return 0;
}

/* The weights' config (DIR/config.yaml: a loom checkpoint's, or the import's). */
static int weights_model(const char *dir, loom_config *wcfg, loom_model_spec *w) {
  char *p = loom_sprintf("%s/config.yaml", dir);
  loom_config_defaults(wcfg);
  int rc = loom_config_load(wcfg, p);
  if (!rc) rc = loom_model_spec_from_config(w, &wcfg->model);
  if (rc) loom_err_prefix("checkpoint.init_from: %s: ", p);
  free(p);
  return rc;
}

/* Load dir (a loom checkpoint) into the decoder and the vision encoder this rank holds. */
static int load_modules(const char *dir, loom_executor *ex) {
  loom_decoder *d = loom_exec_decoder(ex); /* NULL on ranks of the encoder only */
  int rc = d ? loom_ckpt_load_weights(dir, d) : 0;
  loom_vmod *vm = loom_exec_vision(ex);
  loom_decoder *vd = vm ? loom_vmod_decoder(vm) : NULL; /* NULL off the encoder's ranks */
  if (!rc && vd) rc = loom_ckpt_load_weights(dir, vd);
  return rc ? loom_err_prefix("checkpoint.init_from: ") : 0;
}

/* What a loom checkpoint is, for the log line: rank pieces (files, ranks, step) or one
 * model.safetensors (step, or weights only). */
static void describe_loom(const char *dir, char *out, size_t cap) {
  json_t *st = NULL, *ix = NULL;
  char *sp = loom_sprintf("%s/trainer_state.json", dir), *ip = loom_sprintf("%s/index.json", dir);
  if (loom_path_exists(sp)) st = json_load_file(sp, 0, NULL);
  if (loom_path_exists(ip)) ix = json_load_file(ip, 0, NULL);
  char step[64] = "";
  if (st && json_is_integer(json_object_get(st, "step")))
    snprintf(step, sizeof step, ", step %lld",
             (long long)json_integer_value(json_object_get(st, "step")));
  if (ix && !has(dir, "model.safetensors"))
    snprintf(out, cap, "loom checkpoint in rank pieces (%lld model files of %lld ranks%s)",
             (long long)json_array_size(json_object_get(ix, "model_files")),
             (long long)json_integer_value(json_object_get(ix, "world")), step);
  else
    snprintf(out, cap, "loom checkpoint (model.safetensors%s)", step[0] ? step : ", weights only");
  json_decref(st);
  json_decref(ix);
  free(sp);
  free(ip);
}

/* How many trailing components of path do not exist yet (0: it is a directory). */
static int missing_levels(const char *path) {
  char *p = loom_strdup(path);
  int n = 0;
  for (size_t len = strlen(p); len > 0 && !loom_is_dir(p); n++) {
    while (len > 1 && p[len - 1] == '/') p[--len] = 0;
    char *slash = strrchr(p, '/');
    if (!slash) {
      n++; /* a relative first component that does not exist either */
      break;
    }
    *slash = 0;
    len = strlen(p);
  }
  free(p);
  return n;
}

/* rmdir path and its parents, levels of them in all; stops at the first that is not empty. */
static void remove_levels(const char *path, int levels) {
  char *p = loom_strdup(path);
  for (int i = 0; i < levels; i++) {
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/') p[--len] = 0;
    if (rmdir(p)) break;
    char *slash = strrchr(p, '/');
    if (!slash) break;
    *slash = 0;
  }
  free(p);
}

/* loom_hf_import's message without the temporary output directory it names ("importing
 * 'HF' to 'TMP': why"): checkpoint.init_from: importing the Hugging Face directory 'HF': why */
static int import_error(const char *path, const char *tmp) {
  char *msg = loom_strdup(loom_errmsg());
  const char *why = msg, *at = strstr(msg, tmp);
  if (at && !strncmp(at + strlen(tmp), "': ", 3)) why = at + strlen(tmp) + 3;
  loom_err("checkpoint.init_from: importing the Hugging Face directory '%s': %s", path, why);
  free(msg);
  return LOOM_ERR;
}

int loom_init_from_load(const loom_config *cfg, const loom_model_spec *spec, loom_executor *ex,
                        const loom_comm *job, char *desc, size_t cap) {
  /* rank 0 may import a large model while the others wait, and ranks read the weights at
   * their own pace: no collective deadline here (a rank that dies still ends the job) */
  loom_comm patient = *job;
  patient.timeout_s = 0;
  job = &patient;
  const char *path = cfg->checkpoint.init_from;
  src_kind kind = SRC_LOOM;
  if (agree(job, classify(path, &kind))) return LOOM_ERR;
  /* a Hugging Face directory: rank 0 imports it under run.output_dir (shared by the ranks,
   * as the run directory is), every rank loads the import, rank 0 removes it */
  char dir[LOOM_STR_MAX * 2 + 64];
  snprintf(dir, sizeof dir, "%s", path);
  int made = 0; /* directories of run.output_dir that the import created */
  int rc = 0;
  if (kind == SRC_HF) {
    if (job->rank == 0) {
      made = missing_levels(cfg->run.output_dir);
      snprintf(dir, sizeof dir, "%s/.init_from.tmp.%ld", cfg->run.output_dir, (long)getpid());
      loom_hf_import_opts o = {NULL, true};
      rc = loom_mkdir_p(cfg->run.output_dir);
      if (!rc && loom_hf_import(path, dir, &o)) rc = import_error(path, dir);
    }
    if (job->size > 1) loom_comm_bcast_bytes(job, dir, sizeof dir, 0);
    rc = agree(job, rc);
  }
  loom_config wcfg;
  loom_model_spec w;
  if (!rc) rc = agree(job, weights_model(dir, &wcfg, &w) || check_model(path, cfg, spec, &wcfg, &w));
  if (!rc) rc = agree(job, load_modules(dir, ex));
  if (kind == SRC_HF) {
    if (job->rank == 0) {
      loom_rm_rf(dir);
      remove_levels(cfg->run.output_dir, made); /* only those still empty */
    }
    /* no rank returns (and, on an error, aborts the job) before rank 0 has removed the
     * import: an abort from another rank would leave it behind (rc is already agreed) */
    rc = agree(job, rc);
  }
  if (rc) return rc;
  char what[256];
  if (kind == SRC_HF) snprintf(what, sizeof what, "Hugging Face directory, imported");
  else describe_loom(path, what, sizeof what);
  snprintf(desc, cap, "initialised from %s (%s; %s model; fresh optimizer, step 0, data from "
           "the start)", path, what, family(spec));
  return 0;
}

int loom_init_from_check_resume(const loom_config *cfg, const char *resume_dir) {
  char *p = loom_sprintf("%s/config.yaml", resume_dir);
  loom_config then;
  loom_config_defaults(&then);
  int rc = loom_path_exists(p) ? loom_config_load(&then, p) : 0;
  free(p);
  if (rc) return rc;
  if (!strcmp(then.checkpoint.init_from, cfg->checkpoint.init_from)) return 0;
  return loom_err("checkpoint.init_from = '%s' together with --resume %s, a run that started "
                  "from %s%s%s: --resume restores that run's weights, so init_from would be "
                  "ignored; drop the checkpoint.init_from override to resume, or drop --resume "
                  "to start a new run from the weights", cfg->checkpoint.init_from, resume_dir,
                  then.checkpoint.init_from[0] ? "'" : "fresh initialisation",
                  then.checkpoint.init_from, then.checkpoint.init_from[0] ? "'" : "");
}

int loom_init_from_setup(const loom_config *cfg, const char *resume, const loom_model_spec *spec,
                         loom_executor *ex, const loom_comm *job, char *desc, size_t cap) {
  desc[0] = 0;
  if (!resume)
    return cfg->checkpoint.init_from[0] ? loom_init_from_load(cfg, spec, ex, job, desc, cap) : 0;
  if (!has(resume, "trainer_state.json")) /* e.g. `loom ckpt import` output */
    return loom_err("--resume: '%s' has no trainer_state.json: it holds weights only (as "
                    "`loom ckpt import` writes) and cannot be resumed; start a new run from it "
                    "with checkpoint.init_from=%s", resume, resume);
  return cfg->checkpoint.init_from[0] ? loom_init_from_check_resume(cfg, resume) : 0;
}
