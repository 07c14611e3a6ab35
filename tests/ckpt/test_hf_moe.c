/* Hugging Face export -> import of Qwen3 (q/k norms, head_dim != hidden/heads), Qwen3-MoE
 * (with a dense layer among the MoE ones, 5 experts, top 3), Qwen2-MoE (shared expert, q/k/v
 * biases, sparse_step 2) and a Mixtral-shaped model: the weights come back bitwise (one file,
 * shards, bf16 exactly rounded) with the same model spec; config.json names the class and
 * carries the MoE fields transformers reads. Refused, naming what: exports no HF class
 * computes; imports of configs with features loom lacks (DeepSeek MLA, several shared experts,
 * router jitter), top-k above the expert count, an unknown model_type, a missing expert
 * tensor, an extra router bias. The weights are random values in the parameter layout (no
 * decoder: these tests do not depend on the forward computing MoE). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "hf_test_util.h"
#include "loom/hf.h"
#include "loom/safetensors.h"
#include "st_test_util.h"

typedef struct {
  const char *name, *type; /* case, expected model_type */
  const char *over[20];
} model_case;

#define TINY "model.vocab_size=100", "model.max_seq=16"
static const model_case cases[] = {
    {"qwen3", "qwen3", {"model.preset=tiny-qwen3", TINY, "model.layers=2", NULL}},
    {"qwen3_moe",
     "qwen3_moe",
     {"model.preset=tiny-qwen3-moe", TINY, "model.layers=3", "model.moe.mlp_only_layers=1",
      "model.moe.experts=5", "model.moe.top_k=3", "model.tied_embeddings=true", NULL}},
    /* DeepSeek-V3-style balancing: the layout holds moe.router.bias, exported as
     * gate.e_score_correction_bias with the rate in config.json (loom_bias_update_rate) */
    {"qwen3_moe_bias",
     "qwen3_moe",
     {"model.preset=tiny-qwen3-moe", TINY, "model.layers=2", "model.moe.bias_update_rate=0.01",
      NULL}},
    {"qwen2_moe",
     "qwen2_moe",
     {"model.preset=tiny-qwen2-moe", TINY, "model.layers=2", "model.moe.sparse_step=2",
      "model.moe.aux_loss_coef=0", NULL}},
    {"mixtral",
     "mixtral",
     {"model.preset=",
      "model.arch=llama",
      "model.vocab_size=90",
      "model.hidden=32",
      "model.heads=4",
      "model.kv_heads=2",
      "model.layers=2",
      "model.intermediate=24",
      "model.max_seq=16",
      "model.qkv_bias=false",
      "model.tied_embeddings=false",
      "model.rope_theta=1000000",
      "model.norm_eps=1e-5",
      "model.moe.experts=4",
      "model.moe.top_k=2",
      "model.moe.intermediate=24",
      "model.moe.norm_topk=true",
      "model.moe.sparse_step=1",
      "model.moe.aux_loss_coef=0.02",
      NULL}},
};

static char *scratch;

static int n_over(const char *const *over) {
  int n = 0;
  while (over[n]) n++;
  return n;
}

typedef struct {
  loom_config cfg;
  loom_model_spec spec;
  loom_param_layout lay;
  float *params;
} model;

static void make_model(model *m, const char *const *over, uint64_t seed) {
  hf_test_config(&m->cfg, n_over(over), over);
  if (loom_model_spec_from_config(&m->spec, &m->cfg.model) ||
      loom_param_layout_build(&m->lay, &m->spec)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    exit(2);
  }
  m->params = loom_alloc(m->lay.total * sizeof(float));
  hf_test_fill(&m->spec, &m->lay, m->params, seed);
}

static void free_model(model *m) {
  loom_free(m->params);
  loom_param_layout_free(&m->lay);
}

static bool same_spec(const loom_model_spec *a, const loom_model_spec *b) {
  const loom_moe_spec *x = &a->moe, *y = &b->moe;
  bool mask = true;
  for (int l = 0; l < a->layers; l++)
    mask &= loom_model_layer_is_moe(a, l) == loom_model_layer_is_moe(b, l);
  return a->arch == b->arch && a->vocab_size == b->vocab_size &&
         a->padded_vocab == b->padded_vocab && a->hidden == b->hidden && a->layers == b->layers &&
         a->heads == b->heads && a->kv_heads == b->kv_heads && a->head_dim == b->head_dim &&
         a->max_seq == b->max_seq && a->norm_eps == b->norm_eps && a->rope_theta == b->rope_theta &&
         a->qkv_bias == b->qkv_bias && a->tied_embeddings == b->tied_embeddings &&
         a->qk_norm == b->qk_norm && (x->experts ? mask : a->intermediate == b->intermediate) &&
         x->experts == y->experts && x->top_k == y->top_k && x->intermediate == y->intermediate &&
         x->shared_intermediate == y->shared_intermediate && x->norm_topk == y->norm_topk &&
         x->aux_loss_coef == y->aux_loss_coef && x->bias_update_rate == y->bias_update_rate;
}

/* Import hf into out: the same spec, and every weight bitwise (bf16: rounded first). */
static void check_import(const char *what, const char *hf, const char *out, const model *want,
                         bool bf16) {
  loom_hf_import_opts io = {NULL, false};
  int rc = loom_hf_import(hf, out, &io);
  CHECK(rc == 0, "%s: import: %s", what, loom_errmsg());
  if (rc) return;
  loom_config cfg;
  loom_model_spec spec;
  loom_config_defaults(&cfg);
  char *cpath = loom_sprintf("%s/config.yaml", out);
  rc = loom_config_load(&cfg, cpath) || loom_model_spec_from_config(&spec, &cfg.model);
  free(cpath);
  CHECK(rc == 0, "%s: imported config.yaml: %s", what, loom_errmsg());
  if (rc) return;
  CHECK(same_spec(&spec, &want->spec), "%s: imported spec differs", what);
  loom_param_layout lay;
  loom_param_layout_build(&lay, &spec);
  CHECK(lay.total == want->lay.total && lay.count == want->lay.count, "%s: layout differs", what);
  float *got = loom_alloc(lay.total * sizeof(float));
  rc = lay.total == want->lay.total ? loom_weights_read(out, &spec, &lay, got) : LOOM_ERR;
  CHECK(rc == 0, "%s: read weights: %s", what, loom_errmsg());
  size_t bad = 0;
  for (int i = 0; i < lay.count && !rc; i++) {
    const loom_param *p = &lay.params[i], *q = loom_param_find(&want->lay, p->name);
    if (!q) {
      bad++;
      continue;
    }
    for (size_t j = 0; j < p->numel; j++) {
      float w = want->params[q->offset + j];
      if (bf16) w = loom_bf16_round(w);
      bad += memcmp(&w, &got[p->offset + j], sizeof w) != 0;
    }
  }
  CHECK(!rc && bad == 0, "%s: %zu values differ", what, bad);
  loom_free(got);
  loom_param_layout_free(&lay);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

static json_t *load_json(const char *dir) {
  char *p = loom_sprintf("%s/config.json", dir);
  json_error_t e;
  json_t *o = json_load_file(p, 0, &e);
  free(p);
  return o;
}

static long jint(json_t *o, const char *key) {
  return (long)json_integer_value(json_object_get(o, key));
}

/* config.json: the class and the fields transformers reads for this family. */
static void check_config_json(const model_case *c, const char *hf, const loom_model_spec *s) {
  json_t *o = load_json(hf);
  CHECK(o != NULL, "%s: config.json unreadable", c->name);
  if (!o) return;
  const char *type = json_string_value(json_object_get(o, "model_type"));
  CHECK(type && !strcmp(type, c->type), "%s: model_type %s, want %s", c->name, type ? type : "-",
        c->type);
  CHECK(jint(o, "head_dim") == s->head_dim && jint(o, "hidden_size") == s->hidden,
        "%s: head_dim/hidden_size", c->name);
  bool mixtral = !strcmp(c->type, "mixtral");
  if (s->moe.experts) {
    CHECK(jint(o, mixtral ? "num_local_experts" : "num_experts") == s->moe.experts &&
              jint(o, "num_experts_per_tok") == s->moe.top_k,
          "%s: experts / top-k", c->name);
    CHECK(jint(o, mixtral ? "intermediate_size" : "moe_intermediate_size") == s->moe.intermediate,
          "%s: experts' intermediate size", c->name);
    CHECK(json_is_true(json_object_get(o, "output_router_logits")) == (s->moe.aux_loss_coef > 0),
          "%s: output_router_logits", c->name);
  }
  if (!strcmp(c->type, "qwen2_moe"))
    CHECK(jint(o, "shared_expert_intermediate_size") == s->moe.shared_intermediate &&
              json_is_true(json_object_get(o, "qkv_bias")),
          "%s: shared expert, qkv_bias", c->name);
  if (!strcmp(c->name, "qwen3_moe")) {
    json_t *dense = json_object_get(o, "mlp_only_layers");
    CHECK(json_array_size(dense) == 1 && json_integer_value(json_array_get(dense, 0)) == 1 &&
              json_is_true(json_object_get(o, "norm_topk_prob")),
          "%s: mlp_only_layers [1], norm_topk_prob", c->name);
  }
  json_decref(o);
}

/* The balancing biases: one HF e_score_correction_bias per loom moe.router.bias, the rate in
 * config.json; a directory without them (as the HF classes write) imports with zero biases. */
static void check_bias(const model_case *c, const char *hf, const model *m) {
  int want = 0, got = 0;
  for (int i = 0; i < m->lay.count; i++) want += ends_with(m->lay.params[i].name, ".router.bias");
  char *path = loom_sprintf("%s/model.safetensors", hf);
  loom_st_file *f;
  if (loom_st_open(&f, path) == 0) {
    for (int i = 0; i < loom_st_count(f); i++)
      got += ends_with(loom_st_name(f, i), ".mlp.gate.e_score_correction_bias");
    loom_st_close(f);
  }
  free(path);
  CHECK(got == want, "%s: %d e_score_correction_bias tensors, %d router biases", c->name, got,
        want);
  json_t *o = load_json(hf);
  double rate = json_real_value(json_object_get(o, "loom_bias_update_rate"));
  json_decref(o);
  CHECK(rate == m->spec.moe.bias_update_rate, "%s: loom_bias_update_rate %g", c->name, rate);
  if (!want) return;
  /* without the biases: zeros, every other weight as exported */
  char *nob = loom_sprintf("%s/%s_nobias", scratch, c->name), *out = loom_sprintf("%s_back", nob);
  loom_mkdir_p(nob);
  char *src = loom_sprintf("%s/model.safetensors", hf),
       *dst = loom_sprintf("%s/model.safetensors", nob);
  loom_st_writer *w = loom_st_writer_create();
  if (loom_st_open(&f, src)) exit(2);
  for (int i = 0; i < loom_st_count(f); i++)
    if (!ends_with(loom_st_name(f, i), "e_score_correction_bias"))
      loom_st_writer_add(w, loom_st_name(f, i), loom_st_dtype(f, i), loom_st_ndim(f, i),
                         loom_st_shape(f, i), loom_st_data(f, i));
  int rc = loom_st_writer_write(w, dst);
  loom_st_writer_free(w);
  loom_st_close(f);
  char *cs = loom_sprintf("%s/config.json", hf), *cd = loom_sprintf("%s/config.json", nob), *text;
  size_t len;
  rc = rc || loom_read_file(cs, &text, &len) || loom_write_file_atomic(cd, text, len);
  if (!rc) free(text);
  loom_hf_import_opts io = {NULL, false};
  rc = rc || loom_hf_import(nob, out, &io);
  CHECK(rc == 0, "%s: import without the biases: %s", c->name, loom_errmsg());
  float *got_params = loom_alloc(m->lay.total * sizeof(float));
  rc = rc || loom_weights_read(out, &m->spec, &m->lay, got_params);
  size_t bad = 0;
  for (int i = 0; i < m->lay.count && !rc; i++) {
    const loom_param *p = &m->lay.params[i];
    bool bias = ends_with(p->name, ".router.bias");
    for (size_t j = 0; j < p->numel; j++)
      bad += got_params[p->offset + j] != (bias ? 0.0f : m->params[p->offset + j]);
  }
  CHECK(rc == 0 && bad == 0, "%s: without the biases: %zu values wrong", c->name, bad);
  loom_free(got_params);
  free(nob), free(out), free(src), free(dst), free(cs), free(cd);
}

static void run_case(const model_case *c, int k) {
  model m;
  make_model(&m, c->over, 100 + (uint64_t)k);
  char *ck = loom_sprintf("%s/%s_ck", scratch, c->name),
       *hf = loom_sprintf("%s/%s_hf", scratch, c->name);
  char *back = loom_sprintf("%s/%s_back", scratch, c->name);
  hf_test_save_flat(ck, &m.lay, m.params, &m.cfg);
  loom_hf_export_opts eo = {LOOM_DT_F32, 5000000000LL, false};
  int rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc == 0, "%s: export: %s", c->name, loom_errmsg());
  check_config_json(c, hf, &m.spec);
  check_import(c->name, hf, back, &m, false);
  check_bias(c, hf, &m);

  loom_rm_rf(hf), loom_rm_rf(back);
  eo.max_shard_bytes = 20000;
  rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc == 0 && st_count_entries(hf, "-of-") >= 3, "%s: sharded export: %s", c->name,
        rc ? loom_errmsg() : "fewer than 3 shards");
  check_import(c->name, hf, back, &m, false);

  loom_rm_rf(hf), loom_rm_rf(back);
  eo.dtype = LOOM_DT_BF16;
  rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc == 0, "%s: bf16 export: %s", c->name, loom_errmsg());
  check_import(c->name, hf, back, &m, true);
  loom_rm_rf(hf), loom_rm_rf(back);

  /* the fixture for the refusals below: f32, one file */
  eo.dtype = LOOM_DT_F32, eo.max_shard_bytes = 5000000000LL;
  rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc == 0, "%s: export: %s", c->name, loom_errmsg());
  free_model(&m);
  free(ck), free(hf), free(back);
}

/* Models no HF class computes: the export is refused naming why, nothing is written. */
static void check_export_refused(const char *what, const char *const *over, const char *needle) {
  model m;
  make_model(&m, over, 3);
  char *ck = loom_sprintf("%s/refuse_ck", scratch), *hf = loom_sprintf("%s/refuse_hf", scratch);
  hf_test_save_flat(ck, &m.lay, m.params, &m.cfg);
  loom_hf_export_opts eo = {LOOM_DT_F32, 5000000000LL, false};
  int rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc != 0 && strstr(loom_errmsg(), needle), "%s: export %s (%s)", what,
        rc ? "refused without the reason" : "accepted", loom_errmsg());
  CHECK(!loom_path_exists(hf) && st_count_entries(scratch, ".tmp.") == 0, "%s: output left", what);
  loom_rm_rf(ck);
  free_model(&m);
  free(ck), free(hf);
}

/* scratch/name: a copy of src (an exported HF directory) with tensor `drop` left out, a tensor
 * `add` (n values) added, and config.json's `key` set to `value` (a JSON text; NULL: none). */
static void make_variant(const char *src, const char *name, const char *drop, const char *add,
                         int n, const char *key, const char *value) {
  char *dir = loom_sprintf("%s/%s", scratch, name);
  char *sm = loom_sprintf("%s/model.safetensors", src),
       *dm = loom_sprintf("%s/model.safetensors", dir);
  loom_mkdir_p(dir);
  loom_st_file *f;
  if (loom_st_open(&f, sm)) exit(2);
  loom_st_writer *w = loom_st_writer_create();
  for (int i = 0; i < loom_st_count(f); i++) {
    if (drop && !strcmp(loom_st_name(f, i), drop)) continue;
    loom_st_writer_add(w, loom_st_name(f, i), loom_st_dtype(f, i), loom_st_ndim(f, i),
                       loom_st_shape(f, i), loom_st_data(f, i));
  }
  float *extra = loom_calloc((size_t)n + 1, sizeof *extra);
  int64_t shape[1] = {n};
  if (add) loom_st_writer_add(w, add, LOOM_DT_F32, 1, shape, extra);
  if (loom_st_writer_write(w, dm)) exit(2);
  loom_st_writer_free(w);
  loom_st_close(f);
  free(extra);
  json_t *o = load_json(src);
  if (key) json_object_set_new(o, key, json_loads(value, JSON_DECODE_ANY, NULL));
  char *cp = loom_sprintf("%s/config.json", dir);
  json_dump_file(o, cp, JSON_INDENT(2));
  json_decref(o);
  free(cp), free(sm), free(dm), free(dir);
}

/* `loom ckpt import scratch/name`: exit 1, both needles in stderr, no output left. */
static void expect_import_fail(const char *name, const char *needle1, const char *needle2) {
  char *args = loom_sprintf("ckpt import '%s/%s' --out '%s/%s_out'", scratch, name, scratch, name);
  char *out, *err, *out_dir = loom_sprintf("%s/%s_out", scratch, name);
  int rc = st_run_loom(scratch, args, &out, &err);
  const char *e = err ? err : "";
  CHECK(rc == 1, "%s: exit %d (stderr: %s)", name, rc, e);
  CHECK(strstr(e, needle1), "%s: stderr lacks '%s': %s", name, needle1, e);
  CHECK(strstr(e, needle2), "%s: stderr lacks '%s': %s", name, needle2, e);
  CHECK(!loom_path_exists(out_dir) && st_count_entries(scratch, ".tmp.") == 0, "%s: output left",
        name);
  free(args), free(out), free(err), free(out_dir);
}

static void check_import_refused(void) {
  char *q3 = loom_sprintf("%s/qwen3_moe_hf", scratch), *mx = loom_sprintf("%s/mixtral_hf", scratch);
  make_variant(q3, "mla", NULL, NULL, 0, "kv_lora_rank", "512");
  expect_import_fail("mla", "\"kv_lora_rank\" = 512", "multi-head latent attention");
  make_variant(q3, "shared2", NULL, NULL, 0, "n_shared_experts", "2");
  expect_import_fail("shared2", "\"n_shared_experts\" = 2", "several shared experts");
  make_variant(q3, "topk", NULL, NULL, 0, "num_experts_per_tok", "6");
  expect_import_fail("topk", "\"num_experts_per_tok\" = 6", "more than the 5 routed experts");
  make_variant(q3, "deepseek", NULL, NULL, 0, "model_type", "\"deepseek_v3\"");
  expect_import_fail("deepseek", "model_type \"deepseek_v3\" is not supported", "qwen3_moe");
  make_variant(q3, "no_expert", "model.layers.2.mlp.experts.4.down_proj.weight", NULL, 0, NULL,
               NULL);
  expect_import_fail("no_expert", "'model.layers.2.mlp.experts.4.down_proj.weight'", "is missing");
  make_variant(q3, "router_bias", NULL, "model.layers.0.mlp.gate.bias", 5, NULL, NULL);
  expect_import_fail("router_bias", "'model.layers.0.mlp.gate.bias'", "router's gate Linear");
  make_variant(q3, "sel_bias", NULL, "model.layers.0.mlp.gate.e_score_correction_bias", 5, NULL,
               NULL);
  expect_import_fail("sel_bias", "'model.layers.0.mlp.gate.e_score_correction_bias'",
                     "bias_update_rate");
  make_variant(q3, "sparse0", NULL, NULL, 0, "decoder_sparse_step", "0");
  expect_import_fail("sparse0", "decoder_sparse_step", "positive integer");
  make_variant(mx, "jitter", NULL, NULL, 0, "router_jitter_noise", "0.1");
  expect_import_fail("jitter", "\"router_jitter_noise\" = 0.1", "does not implement");
  make_variant(mx, "sliding", NULL, NULL, 0, "sliding_window", "4096");
  expect_import_fail("sliding", "\"sliding_window\" = 4096", "sliding-window");
  make_variant(q3, "yarn", NULL, NULL, 0, "rope_parameters",
               "{\"rope_type\": \"yarn\", \"rope_theta\": 10000.0}");
  expect_import_fail("yarn", "rope_type", "yarn");
  free(q3), free(mx);
}

/* transformers v5 configs: rope_parameters instead of rope_theta, and Qwen3-MoE's expert
 * count saved as num_local_experts (its attribute_map); the import reads both. */
static void check_v5_config(void) {
  char *q3 = loom_sprintf("%s/qwen3_moe_hf", scratch);
  json_t *o = load_json(q3);
  json_int_t E = json_integer_value(json_object_get(o, "num_experts"));
  double theta = json_real_value(json_object_get(o, "rope_theta"));
  json_decref(o);
  char value[64];
  snprintf(value, sizeof value, "%lld", (long long)E);
  make_variant(q3, "v5a", NULL, NULL, 0, "num_local_experts", value);
  snprintf(value, sizeof value, "{\"rope_type\": \"default\", \"rope_theta\": %.1f}", theta);
  char *dir = loom_sprintf("%s/v5a", scratch);
  make_variant(dir, "v5", NULL, NULL, 0, "rope_parameters", value);
  char *cp = loom_sprintf("%s/v5/config.json", scratch);
  o = json_load_file(cp, 0, NULL);
  json_object_del(o, "num_experts"), json_object_del(o, "rope_theta");
  json_dump_file(o, cp, JSON_INDENT(2));
  json_decref(o);
  char *a = loom_sprintf("%s/v5_back", scratch), *b = loom_sprintf("%s/v4_back", scratch);
  char *v5 = loom_sprintf("%s/v5", scratch);
  loom_hf_import_opts io = {NULL, false};
  int rc = loom_hf_import(v5, a, &io) || loom_hf_import(q3, b, &io);
  CHECK(rc == 0, "v5 config: %s", loom_errmsg());
  char *ya = loom_sprintf("%s/config.yaml", a), *yb = loom_sprintf("%s/config.yaml", b);
  loom_config ca, cb;
  loom_config_defaults(&ca), loom_config_defaults(&cb);
  rc = rc || loom_config_load(&ca, ya) || loom_config_load(&cb, yb);
  CHECK(rc == 0 && !memcmp(&ca.model, &cb.model, sizeof ca.model),
        "v5 config: the model differs from the v4 config's");
  free(q3), free(dir), free(cp), free(a), free(b), free(v5), free(ya), free(yb);
}

int main(void) {
  scratch = st_scratch_dir("hf_moe");
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) run_case(&cases[k], k);
  const char *both[] = {"model.preset=tiny-qwen2-moe", TINY, "model.layers=1", "model.qk_norm=true",
                        NULL};
  check_export_refused("shared expert and q/k norms", both, "no Hugging Face class has both");
  const char *no_norm[] = {"model.preset=",
                           "model.arch=llama",
                           "model.vocab_size=50",
                           "model.hidden=16",
                           "model.heads=2",
                           "model.layers=1",
                           "model.max_seq=8",
                           "model.intermediate=8",
                           "model.moe.experts=3",
                           "model.moe.top_k=1",
                           "model.moe.intermediate=8",
                           "model.moe.norm_topk=false",
                           "model.moe.sparse_step=1",
                           NULL};
  check_export_refused("mixtral without renormalised top-k", no_norm, "model.moe.norm_topk=false");
  const char *dense[] = {"model.preset=",
                         "model.arch=llama",
                         "model.vocab_size=50",
                         "model.hidden=16",
                         "model.heads=2",
                         "model.layers=2",
                         "model.max_seq=8",
                         "model.intermediate=8",
                         "model.moe.experts=3",
                         "model.moe.top_k=1",
                         "model.moe.intermediate=8",
                         "model.moe.norm_topk=true",
                         "model.moe.sparse_step=2",
                         NULL};
  check_export_refused("mixtral with a dense layer", dense, "keep a dense MLP");
  const char *bias[] = {"model.preset=tiny-qwen3", TINY, "model.layers=1", "model.qkv_bias=true",
                        NULL};
  check_export_refused("qwen3 with q/k/v biases", bias, "attention_bias");
  check_import_refused();
  check_v5_config();
  int rc = harness_finish("test_hf_moe");
  if (rc == 0) loom_rm_rf(scratch);
  free(scratch);
  return rc;
}
