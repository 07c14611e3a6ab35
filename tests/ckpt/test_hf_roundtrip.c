/* Hugging Face export -> import round trips: tiny GPT-2 (tied and untied, n_inner != 4C) and
 * Llama/Qwen2 models (GQA, qkv bias, explicit head_dim) come back bitwise, from one file and
 * from several shards with an index; bf16 export gives exactly the bf16-rounded weights; the
 * files, index and config.json hold what HF expects; weights-only loading tolerates a
 * different vocabulary padding. The CLI is exercised once per direction. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "hf_test_util.h"
#include "loom/hf.h"
#include "loom/safetensors.h"
#include "st_test_util.h"

typedef struct {
  const char *name;
  const char *over[16];
} model_case;

static const model_case cases[] = {
    {"gpt2_tied", {"model.preset=", "model.arch=gpt2", "model.vocab_size=100", "model.hidden=32",
                   "model.heads=4", "model.layers=2", "model.max_seq=16", NULL}},
    {"gpt2_untied", {"model.preset=", "model.arch=gpt2", "model.vocab_size=70", "model.hidden=24",
                     "model.heads=2", "model.layers=1", "model.max_seq=8", "model.intermediate=40",
                     "model.tied_embeddings=false", NULL}},
    {"qwen2", {"model.preset=", "model.arch=llama", "model.vocab_size=100", "model.hidden=32",
               "model.heads=4", "model.kv_heads=2", "model.intermediate=48", "model.layers=2",
               "model.max_seq=16", "model.qkv_bias=true", "model.tied_embeddings=true",
               "model.rope_theta=1000000", NULL}},
    {"llama", {"model.preset=", "model.arch=llama", "model.vocab_size=90", "model.hidden=32",
               "model.heads=4", "model.kv_heads=1", "model.head_dim=12", "model.intermediate=40",
               "model.layers=2", "model.max_seq=16", "model.qkv_bias=false",
               "model.tied_embeddings=false", "model.norm_eps=1e-5", NULL}},
};

static int n_over(const model_case *c) {
  int n = 0;
  while (c->over[n]) n++;
  return n;
}

/* Import hf into out and compare the weights with want (bf16: rounded first). */
static void check_import(const char *what, const char *hf, const char *out,
                         const loom_decoder *want, bool bf16) {
  loom_hf_import_opts io = {NULL, false};
  int rc = loom_hf_import(hf, out, &io);
  CHECK(rc == 0, "%s: import: %s", what, loom_errmsg());
  if (rc) return;
  loom_config cfg;
  loom_config_defaults(&cfg);
  char *cpath = loom_sprintf("%s/config.yaml", out);
  loom_model_spec spec;
  rc = loom_config_load(&cfg, cpath) || loom_model_spec_from_config(&spec, &cfg.model);
  free(cpath);
  CHECK(rc == 0, "%s: imported config.yaml: %s", what, loom_errmsg());
  if (rc) return;
  const loom_model_spec *s = &want->spec;
  CHECK(spec.arch == s->arch && spec.vocab_size == s->vocab_size &&
            spec.padded_vocab == s->padded_vocab && spec.hidden == s->hidden &&
            spec.layers == s->layers && spec.heads == s->heads && spec.kv_heads == s->kv_heads &&
            spec.head_dim == s->head_dim && spec.intermediate == s->intermediate &&
            spec.max_seq == s->max_seq && spec.norm_eps == s->norm_eps &&
            (s->arch == LOOM_ARCH_GPT2 || spec.rope_theta == s->rope_theta) &&
            spec.qkv_bias == s->qkv_bias && spec.tied_embeddings == s->tied_embeddings &&
            spec.init_std == s->init_std,
        "%s: imported spec differs", what);
  loom_decoder *d;
  if (loom_decoder_create(&d, &spec, 1, 1, false, false)) return;
  rc = loom_ckpt_load_weights(out, d);
  CHECK(rc == 0, "%s: load weights: %s", what, loom_errmsg());
  size_t bad = 0, total = want->layout.total;
  for (size_t i = 0; i < total && !rc; i++) {
    float w = bf16 ? loom_bf16_round(want->params[i]) : want->params[i];
    bad += memcmp(&w, &d->params[i], sizeof w) != 0;
  }
  CHECK(!rc && bad == 0 && d->layout.total == total, "%s: %zu of %zu floats differ", what, bad,
        total);
  loom_decoder_free(d);
}

/* Every weight_map entry names an existing shard; total_size is the sum of tensor bytes. */
static void check_index(const char *what, const char *hf, int want_tensors, int *nshards) {
  char *ipath = loom_sprintf("%s/model.safetensors.index.json", hf);
  json_error_t e;
  json_t *o = json_load_file(ipath, 0, &e);
  free(ipath);
  CHECK(o != NULL, "%s: index.json: %s", what, e.text);
  if (!o) return;
  json_t *map = json_object_get(o, "weight_map");
  json_t *meta = json_object_get(o, "metadata");
  json_int_t total = json_integer_value(json_object_get(meta, "total_size"));
  CHECK((int)json_object_size(map) == want_tensors, "%s: weight_map has %zu entries, want %d", what,
        json_object_size(map), want_tensors);
  const char *name;
  json_t *v;
  json_int_t bytes = 0;
  json_object_foreach(map, name, v) {
    char *p = loom_sprintf("%s/%s", hf, json_string_value(v));
    loom_st_file *f;
    if (loom_st_open(&f, p) == 0) {
      int i = loom_st_find(f, name);
      CHECK(i >= 0, "%s: %s not in %s", what, name, p);
      if (i >= 0) bytes += (json_int_t)loom_st_nbytes(f, i);
      loom_st_close(f);
    } else {
      CHECK(0, "%s: %s", what, loom_errmsg());
    }
    free(p);
  }
  CHECK(bytes == total, "%s: total_size %lld, tensors hold %lld bytes", what, (long long)total,
        (long long)bytes);
  *nshards = st_count_entries(hf, "-of-");
  json_decref(o);
}

/* config.json holds the family's fields. */
static void check_config_json(const char *what, const char *hf, const loom_model_spec *s) {
  char *p = loom_sprintf("%s/config.json", hf);
  json_error_t e;
  json_t *o = json_load_file(p, 0, &e);
  free(p);
  CHECK(o != NULL, "%s: config.json: %s", what, e.text);
  if (!o) return;
  const char *type = json_string_value(json_object_get(o, "model_type"));
  const char *want = s->arch == LOOM_ARCH_GPT2 ? "gpt2" : s->qkv_bias ? "qwen2" : "llama";
  CHECK(type && !strcmp(type, want), "%s: model_type %s, want %s", what, type ? type : "-", want);
  const char *hidden = s->arch == LOOM_ARCH_GPT2 ? "n_embd" : "hidden_size";
  CHECK(json_integer_value(json_object_get(o, hidden)) == s->hidden, "%s: %s", what, hidden);
  CHECK(json_integer_value(json_object_get(o, "vocab_size")) == s->vocab_size, "%s: vocab", what);
  CHECK(json_is_true(json_object_get(o, "tie_word_embeddings")) == s->tied_embeddings,
        "%s: tie_word_embeddings", what);
  json_decref(o);
}

static void run_case(const char *scratch, const model_case *c) {
  loom_config cfg;
  hf_test_config(&cfg, n_over(c), c->over);
  loom_decoder *d = hf_test_model(&cfg, 1, 42);
  char *ck = loom_sprintf("%s/%s_ckpt", scratch, c->name);
  char *hf = loom_sprintf("%s/%s_hf", scratch, c->name);
  char *back = loom_sprintf("%s/%s_back", scratch, c->name);
  hf_test_save(ck, d, &cfg);

  /* one file, f32 */
  loom_hf_export_opts eo = {LOOM_DT_F32, 5000000000LL, false};
  int rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc == 0, "%s: export: %s", c->name, loom_errmsg());
  char *single = loom_sprintf("%s/model.safetensors", hf);
  CHECK(loom_path_exists(single) && st_count_entries(hf, "index") == 0, "%s: single file", c->name);
  loom_st_file *f;
  if (loom_st_open(&f, single) == 0) {
    int wte = loom_st_find(f, c->name[0] == 'g' ? "wte.weight" : "model.embed_tokens.weight");
    CHECK(wte >= 0 && loom_st_shape(f, wte)[0] == d->spec.vocab_size, "%s: embedding rows",
          c->name);
    if (c->name[0] == 'g') {
      int qkv = loom_st_find(f, "h.0.attn.c_attn.weight");
      CHECK(qkv >= 0 && loom_st_shape(f, qkv)[0] == d->spec.hidden &&
                loom_st_shape(f, qkv)[1] == 3 * d->spec.hidden, "%s: c_attn is (C, 3C)", c->name);
    }
    loom_st_close(f);
  }
  free(single);
  check_config_json(c->name, hf, &d->spec);
  check_import(c->name, hf, back, d, false);

  /* several shards + index */
  loom_rm_rf(hf), loom_rm_rf(back);
  eo.max_shard_bytes = 6000;
  rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc == 0, "%s: sharded export: %s", c->name, loom_errmsg());
  loom_param_layout lay = d->layout;
  loom_hf_tensor *t;
  int n, nshards = 0;
  if (loom_hf_plan(&d->spec, &lay, &t, &n) == 0) {
    check_index(c->name, hf, n, &nshards);
    free(t);
  }
  CHECK(nshards >= 3, "%s: %d shards", c->name, nshards);
  check_import(c->name, hf, back, d, false);

  /* bf16 */
  loom_rm_rf(hf), loom_rm_rf(back);
  eo.dtype = LOOM_DT_BF16;
  rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc == 0, "%s: bf16 export: %s", c->name, loom_errmsg());
  check_import(c->name, hf, back, d, true);
  CHECK(st_count_entries(scratch, ".tmp.") == 0, "%s: temporary directories left", c->name);

  loom_decoder_free(d);
  free(ck), free(hf), free(back);
}

/* Weights-only loading into a model whose vocabulary is padded to another multiple. */
static void check_other_padding(const char *scratch) {
  const model_case *c = &cases[3];
  loom_config cfg;
  hf_test_config(&cfg, n_over(c), c->over);
  loom_decoder *d = hf_test_model(&cfg, 1, 5);
  char *ck = loom_sprintf("%s/pad_ckpt", scratch);
  hf_test_save(ck, d, &cfg);
  cfg.model.vocab_pad_multiple = 8; /* 90 -> 96 rows instead of 128 */
  loom_model_spec spec;
  loom_decoder *e;
  if (loom_model_spec_from_config(&spec, &cfg.model) ||
      loom_decoder_create(&e, &spec, 1, 1, false, false))
    return;
  int rc = loom_ckpt_load_weights(ck, e);
  CHECK(rc == 0 && spec.padded_vocab == 96, "padding: %s", loom_errmsg());
  size_t bad = 0;
  for (int i = 0; i < e->layout.count && !rc; i++) {
    const loom_param *p = &e->layout.params[i];
    const loom_param *q = loom_param_find(&d->layout, p->name);
    size_t real = !strcmp(p->name, "embed.weight") || !strcmp(p->name, "lm_head.weight")
                      ? (size_t)spec.vocab_size * (size_t)p->shape[1] : p->numel;
    bad += memcmp(e->params + p->offset, d->params + q->offset, real * sizeof(float)) != 0;
    for (size_t j = real; j < p->numel; j++) bad += e->params[p->offset + j] != 0.0f;
  }
  CHECK(bad == 0, "padding: %zu mismatches", bad);
  loom_decoder_free(e), loom_decoder_free(d);
  free(ck);
}

/* A tensor-parallel rank (tp=2) and a pipeline stage holding only layer 1 read their slices
 * of whole tensors from a one-process checkpoint. */
static void check_shard_slices(const char *scratch) {
  const model_case *c = &cases[0]; /* gpt2: vocab 100 -> 128 rows, 64 per tp rank */
  loom_config cfg;
  hf_test_config(&cfg, n_over(c), c->over);
  loom_decoder *d = hf_test_model(&cfg, 1, 9);
  char *ck = loom_sprintf("%s/slices_ckpt", scratch);
  hf_test_save(ck, d, &cfg);
  const loom_model_spec *spec = &d->spec;
  for (int variant = 0; variant < 3; variant++) {
    loom_shard sh;
    loom_shard_full(&sh, spec);
    if (variant < 2) {
      sh.tp = 2, sh.tp_rank = variant;
    } else {
      sh.chunk_first[0] = 1, sh.chunk_embed[0] = sh.chunk_head[0] = false;
    }
    loom_param_layout lay;
    loom_param_layout_build_shard(&lay, spec, &sh);
    float *buf = loom_alloc(lay.total * sizeof(float));
    int rc = loom_weights_read(ck, spec, &lay, buf);
    CHECK(rc == 0, "slices %d: %s", variant, loom_errmsg());
    size_t bad = 0, split = 0;
    for (int i = 0; i < lay.count && !rc; i++) {
      const loom_param *p = &lay.params[i], *q = loom_param_find(&d->layout, p->name);
      bool vocab = !strcmp(p->name, "embed.weight") || !strcmp(p->name, "lm_head.weight");
      int cols = p->ndim > 1 ? p->shape[1] : 1, gcols = q->ndim > 1 ? q->shape[1] : 1;
      split += p->split_dim >= 0;
      for (int r = 0; r < p->shape[0]; r++)
        for (int k = 0; k < cols; k++) {
          int gr = r + (p->split_dim == 0 ? p->split_start : 0);
          int gk = k + (p->split_dim == 1 ? p->split_start : 0);
          size_t g = q->offset + (size_t)gr * (size_t)gcols + (size_t)gk;
          float want = vocab && gr >= spec->vocab_size ? 0.0f : d->params[g];
          bad += buf[p->offset + (size_t)r * cols + k] != want;
        }
    }
    CHECK(bad == 0 && (variant == 2 ? lay.count < d->layout.count : split > 0),
          "slices %d: %zu wrong values, %zu split tensors", variant, bad, split);
    loom_free(buf);
    loom_param_layout_free(&lay);
  }
  loom_decoder_free(d);
  free(ck);
}

/* The CLI: export with a shard size in KB and bf16, import, then `ckpt` usage lists both. */
static void check_cli(const char *scratch) {
  char *out, *err;
  char *args = loom_sprintf("ckpt export '%s/gpt2_tied_ckpt' --out '%s/cli_hf' --dtype bf16 "
                            "--max-shard-size 8KB", scratch, scratch);
  int rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 0, "cli export: %s", err);
  CHECK(st_count_entries(scratch, "cli_hf") == 1, "cli export: output");
  free(args), free(out), free(err);
  args = loom_sprintf("ckpt import '%s/cli_hf' --out '%s/cli_back'", scratch, scratch);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 0, "cli import: %s", err);
  char *m = loom_sprintf("%s/cli_back/model.safetensors", scratch);
  CHECK(loom_path_exists(m), "cli import: %s", m);
  free(m), free(args), free(out), free(err);
  rc = st_run_loom(scratch, "ckpt --help", &out, &err);
  CHECK(rc == 0 && strstr(out, "export") && strstr(out, "import"), "ckpt usage: %s", out);
  free(out), free(err);
}

static void check_sizes(void) {
  int64_t b = 0;
  CHECK(loom_hf_parse_size("5GB", &b) == 0 && b == 5000000000LL, "5GB");
  CHECK(loom_hf_parse_size("2GiB", &b) == 0 && b == 2147483648LL, "2GiB");
  CHECK(loom_hf_parse_size("500mb", &b) == 0 && b == 500000000LL, "500mb");
  CHECK(loom_hf_parse_size("65536", &b) == 0 && b == 65536, "65536");
  CHECK(loom_hf_parse_size("1.5KB", &b) == 0 && b == 1500, "1.5KB");
  CHECK(loom_hf_parse_size("0", &b) != 0 && loom_hf_parse_size("5XB", &b) != 0 &&
            loom_hf_parse_size("GB", &b) != 0 && loom_hf_parse_size("-3MB", &b) != 0,
        "bad sizes rejected");
}

int main(void) {
  char *scratch = st_scratch_dir("hf_roundtrip");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(scratch, &cases[i]);
  check_other_padding(scratch);
  check_shard_slices(scratch);
  check_cli(scratch);
  check_sizes();
  int rc = harness_finish("test_hf_roundtrip");
  if (rc == 0) loom_rm_rf(scratch);
  free(scratch);
  return rc;
}
