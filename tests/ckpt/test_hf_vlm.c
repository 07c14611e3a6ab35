/* Hugging Face export/import of the vision-language models (tiny-qwen2.5-vl as
 * Qwen2_5_VLForConditionalGeneration, tiny-llava as loom_llava): every tensor comes back
 * bitwise in fp32 (one file, shards + index) and bf16-rounded from a bf16 export; the
 * exported names, shapes and element order follow HF's modules (fused qkv rows q|k|v, the
 * Conv3d patch kernel (Cv, 3, T, p, p) in (channel, frame, row, column) order); config.json
 * holds the HF fields. Export refuses, naming them, tensors it cannot place: extra tensors
 * in the checkpoint, a parameter missing from the plan, nonzero vocabulary padding, settings
 * HF's class cannot express. Import refuses text-only configs for VLM weights, missing
 * vision tensors, wrong shapes, unknown tensors and HF's own LLaVA, leaving nothing behind. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "hf_test_util.h"
#include "loom/hf.h"
#include "loom/safetensors.h"
#include "loom/tokenizer.h"
#include "st_test_util.h"

static char *scratch;

static loom_decoder *make_model(const char *ckpt, const char *preset, const char *extra,
                                uint64_t seed) {
  char p[96];
  snprintf(p, sizeof p, "model.preset=%s", preset);
  const char *over[2] = {p, extra};
  loom_config cfg;
  hf_test_config(&cfg, extra ? 2 : 1, over);
  loom_decoder *d = hf_test_model(&cfg, 1, seed);
  hf_test_save(ckpt, d, &cfg);
  return d;
}

static float param_at(const loom_decoder *d, const char *name, size_t i) {
  const loom_param *p = loom_param_find(&d->layout, name);
  LOOM_ASSERT(p && i < p->numel);
  return d->params[p->offset + i];
}

/* Import hf into out; every float equals want's (bf16: want's rounded). */
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
  CHECK(spec.vision.arch == s->vision.arch && spec.vision.hidden == s->vision.hidden &&
            spec.vocab_size == s->vocab_size && spec.padded_vocab == s->padded_vocab &&
            spec.vision.depth == s->vision.depth && spec.hidden == s->hidden &&
            spec.layers == s->layers && spec.kv_heads == s->kv_heads &&
            spec.qkv_bias == s->qkv_bias && spec.tied_embeddings == s->tied_embeddings &&
            spec.vision.mrope_section[1] == s->vision.mrope_section[1],
        "%s: imported spec differs (preset '%s')", what, cfg.model.preset);
  loom_decoder *d;
  if (loom_decoder_create(&d, &spec, 1, 1, false, false)) return;
  rc = loom_ckpt_load_weights(out, d);
  CHECK(rc == 0, "%s: load weights: %s", what, loom_errmsg());
  size_t bad = 0, total = want->layout.total;
  for (size_t i = 0; i < total && !rc; i++) {
    float w = bf16 ? loom_bf16_round(want->params[i]) : want->params[i];
    bad += memcmp(&w, &d->params[i], sizeof w) != 0;
  }
  CHECK(!rc && bad == 0 && d->layout.total == total && d->layout.count == want->layout.count,
        "%s: %zu of %zu floats differ", what, bad, total);
  loom_decoder_free(d);
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

/* Qwen2.5-VL: names, shapes and element order of the HF tensors, and config.json. */
static void check_qwen_files(const char *hf, const loom_decoder *d) {
  const loom_vision_spec *v = &d->spec.vision;
  char *path = loom_sprintf("%s/model.safetensors", hf);
  loom_st_file *f;
  int rc = loom_st_open(&f, path);
  free(path);
  CHECK(rc == 0, "qwen: open export: %s", loom_errmsg());
  if (rc) return;
  int Cv = v->hidden, pv = loom_vision_patch_values(v);
  /* Conv3d weight (Cv, 3, T, p, p): element [o][c][t][i][j] = loom row o, column
   * ((c*T + t)*p + i)*p + j of the (Cv, 3*T*p*p) patch embedding */
  int i = loom_st_find(f, "visual.patch_embed.proj.weight");
  const int64_t *sh = i >= 0 ? loom_st_shape(f, i) : NULL;
  CHECK(sh && loom_st_ndim(f, i) == 5 && sh[0] == Cv && sh[1] == 3 && sh[2] == v->temporal &&
            sh[3] == v->patch && sh[4] == v->patch, "qwen: patch_embed.proj is (Cv, 3, T, p, p)");
  if (sh) {
    const float *w = loom_st_data(f, i);
    int o = 5, c = 2, t = 1, y = 9, x = 4, T = v->temporal, P = v->patch;
    size_t flat = (size_t)(((c * T + t) * P + y) * P + x);
    size_t hf_at = ((((size_t)o * 3 + c) * T + t) * P + y) * P + x;
    CHECK(w[hf_at] == param_at(d, "vision.patch_embed.weight", (size_t)o * pv + flat),
          "qwen: conv element order");
  }
  /* fused qkv: rows [0,Cv) q, [Cv,2Cv) k, [2Cv,3Cv) v */
  i = loom_st_find(f, "visual.blocks.1.attn.qkv.weight");
  sh = i >= 0 ? loom_st_shape(f, i) : NULL;
  CHECK(sh && sh[0] == 3 * Cv && sh[1] == Cv, "qwen: attn.qkv.weight is (3Cv, Cv)");
  if (sh) {
    const float *w = loom_st_data(f, i);
    CHECK(w[3 * Cv + 7] == param_at(d, "vision.blocks.1.attn.q.weight", 3 * Cv + 7) &&
              w[(Cv + 3) * Cv + 1] == param_at(d, "vision.blocks.1.attn.k.weight", 3 * Cv + 1) &&
              w[(2 * Cv + 5) * Cv] == param_at(d, "vision.blocks.1.attn.v.weight", 5 * Cv),
          "qwen: qkv rows are q | k | v");
  }
  i = loom_st_find(f, "visual.blocks.0.attn.qkv.bias");
  CHECK(i >= 0 && ((const float *)loom_st_data(f, i))[Cv + 2] ==
                      param_at(d, "vision.blocks.0.attn.k.bias", 2), "qwen: qkv bias");
  i = loom_st_find(f, "visual.merger.mlp.2.weight");
  sh = i >= 0 ? loom_st_shape(f, i) : NULL;
  CHECK(sh && sh[0] == d->spec.hidden && sh[1] == 4 * Cv, "qwen: merger.mlp.2 is (C, 4Cv)");
  static const char *const present[] = {
      "visual.blocks.0.norm1.weight", "visual.blocks.1.norm2.weight",
      "visual.blocks.0.attn.proj.weight", "visual.blocks.0.attn.proj.bias",
      "visual.blocks.1.mlp.gate_proj.bias", "visual.blocks.1.mlp.up_proj.weight",
      "visual.blocks.1.mlp.down_proj.bias", "visual.merger.ln_q.weight",
      "visual.merger.mlp.0.weight", "visual.merger.mlp.0.bias", "visual.merger.mlp.2.bias",
      "model.embed_tokens.weight", "model.layers.1.self_attn.k_proj.bias", "model.norm.weight"};
  for (size_t k = 0; k < sizeof present / sizeof *present; k++)
    CHECK(loom_st_find(f, present[k]) >= 0, "qwen: %s exported", present[k]);
  /* tied, so no lm_head: embed + norm + 12 per text layer; patch_embed + 12 per block + 5
   * merger tensors */
  int want = 2 + d->spec.layers * 12 + 1 + v->depth * 12 + 5;
  CHECK(loom_st_find(f, "lm_head.weight") < 0 && loom_st_count(f) == want,
        "qwen: %d tensors, want %d", loom_st_count(f), want);
  loom_st_close(f);

  json_t *o = load_json(hf), *vc = json_object_get(o, "vision_config");
  json_t *rs = json_object_get(o, "rope_scaling");
  const char *arch = json_string_value(json_array_get(json_object_get(o, "architectures"), 0));
  const char *type = json_string_value(json_object_get(o, "model_type"));
  CHECK(arch && !strcmp(arch, "Qwen2_5_VLForConditionalGeneration") && type &&
            !strcmp(type, "qwen2_5_vl"), "qwen: architectures / model_type");
  CHECK(jint(o, "hidden_size") == d->spec.hidden && jint(o, "num_key_value_heads") == 2 &&
            jint(o, "vocab_size") == 512 && !json_object_get(o, "head_dim"),
        "qwen: text fields at the top level");
  CHECK(jint(vc, "depth") == 2 && jint(vc, "hidden_size") == 32 &&
            jint(vc, "intermediate_size") == 64 && jint(vc, "num_heads") == 2 &&
            jint(vc, "in_chans") == 3 && jint(vc, "patch_size") == 14 &&
            jint(vc, "spatial_merge_size") == 2 && jint(vc, "temporal_patch_size") == 2 &&
            jint(vc, "window_size") == 56 && jint(vc, "out_hidden_size") == 64 &&
            json_array_size(json_object_get(vc, "fullatt_block_indexes")) == 1 &&
            json_integer_value(
                json_array_get(json_object_get(vc, "fullatt_block_indexes"), 0)) == 1,
        "qwen: vision_config");
  json_t *sec = json_object_get(rs, "mrope_section");
  CHECK(!strcmp(json_string_value(json_object_get(rs, "type")), "mrope") &&
            json_integer_value(json_array_get(sec, 0)) == 2 &&
            json_integer_value(json_array_get(sec, 2)) == 3, "qwen: rope_scaling mrope");
  json_decref(o);
}

static void check_llava_files(const char *hf, const loom_decoder *d) {
  const loom_vision_spec *v = &d->spec.vision;
  char *path = loom_sprintf("%s/model.safetensors", hf);
  loom_st_file *f;
  int rc = loom_st_open(&f, path);
  free(path);
  CHECK(rc == 0, "llava: open export: %s", loom_errmsg());
  if (rc) return;
  const char *E = "vision_tower.vision_model.";
  char n[160];
  snprintf(n, sizeof n, "%sembeddings.patch_embedding.weight", E);
  int i = loom_st_find(f, n);
  const int64_t *sh = i >= 0 ? loom_st_shape(f, i) : NULL;
  CHECK(sh && loom_st_ndim(f, i) == 4 && sh[0] == v->hidden && sh[1] == 3 && sh[2] == 14 &&
            sh[3] == 14, "llava: patch_embedding is a Conv2d weight (Cv, 3, p, p)");
  static const char *const present[] = {
      "vision_tower.vision_model.embeddings.patch_embedding.bias",
      "vision_tower.vision_model.embeddings.position_embedding.weight",
      "vision_tower.vision_model.encoder.layers.1.layer_norm1.bias",
      "vision_tower.vision_model.encoder.layers.1.self_attn.k_proj.bias",
      "vision_tower.vision_model.encoder.layers.0.self_attn.out_proj.weight",
      "vision_tower.vision_model.encoder.layers.0.mlp.fc2.bias",
      "vision_tower.vision_model.feature_layernorm.weight",
      "multi_modal_projector.linear_1.weight", "multi_modal_projector.linear_2.bias",
      "language_model.model.embed_tokens.weight",
      "language_model.model.layers.1.mlp.gate_proj.weight", "language_model.model.norm.weight",
      "language_model.lm_head.weight"};
  for (size_t k = 0; k < sizeof present / sizeof *present; k++)
    CHECK(loom_st_find(f, present[k]) >= 0, "llava: %s exported", present[k]);
  i = loom_st_find(f, "vision_tower.vision_model.embeddings.position_embedding.weight");
  CHECK(i >= 0 && loom_st_shape(f, i)[0] == 64, "llava: 64 positions, no class token row");
  i = loom_st_find(f, "vision_tower.vision_model.encoder.layers.1.self_attn.v_proj.weight");
  CHECK(i >= 0 && ((const float *)loom_st_data(f, i))[77] ==
                      param_at(d, "vision.blocks.1.attn.v.weight", 77), "llava: v_proj values");
  loom_st_close(f);
  json_t *o = load_json(hf), *vc = json_object_get(o, "vision_config");
  json_t *tc = json_object_get(o, "text_config");
  CHECK(!strcmp(json_string_value(json_object_get(o, "model_type")), "loom_llava") &&
            json_is_false(json_object_get(vc, "class_token")) &&
            json_is_false(json_object_get(vc, "pre_layernorm")) &&
            json_is_true(json_object_get(vc, "patch_embedding_bias")) &&
            jint(vc, "image_size") == 112 && jint(vc, "num_hidden_layers") == 2 &&
            !strcmp(json_string_value(json_object_get(tc, "model_type")), "llama") &&
            jint(tc, "hidden_size") == 64 && json_is_string(json_object_get(o, "loom_note")),
        "llava: config.json");
  json_decref(o);
}

/* src_dir's export renamed to the layout transformers >= 4.52 saves (language model and
 * vision tower under "model.", the head as lm_head.weight) in dst_dir. */
static void write_new_layout(const char *src_dir, const char *dst_dir, bool llava) {
  static const char *const map[2][4][2] = {
      {{"visual.", "model.visual."}, {"model.", "model.language_model."}, {NULL, NULL},
       {NULL, NULL}},
      {{"language_model.model.", "model.language_model."}, {"vision_tower.", "model.vision_tower."},
       {"multi_modal_projector.", "model.multi_modal_projector."},
       {"language_model.lm_head.", "lm_head."}}};
  loom_mkdir_p(dst_dir);
  char *src = loom_sprintf("%s/model.safetensors", src_dir);
  char *dst = loom_sprintf("%s/model.safetensors", dst_dir);
  loom_st_file *f;
  if (loom_st_open(&f, src)) exit(2);
  loom_st_writer *w = loom_st_writer_create();
  for (int i = 0; i < loom_st_count(f); i++) {
    const char *n = loom_st_name(f, i);
    char name[160];
    snprintf(name, sizeof name, "%s", n);
    for (int k = 0; k < 4 && map[llava][k][0]; k++) {
      size_t len = strlen(map[llava][k][0]);
      if (!strncmp(n, map[llava][k][0], len)) {
        snprintf(name, sizeof name, "%s%s", map[llava][k][1], n + len);
        break;
      }
    }
    loom_st_writer_add(w, name, loom_st_dtype(f, i), loom_st_ndim(f, i), loom_st_shape(f, i),
                       loom_st_data(f, i));
  }
  if (loom_st_writer_write(w, dst)) exit(2);
  loom_st_writer_free(w);
  loom_st_close(f);
  char *cs = loom_sprintf("%s/config.json", src_dir), *cd = loom_sprintf("%s/config.json", dst_dir);
  char *text;
  size_t len;
  if (loom_read_file(cs, &text, &len) == 0) {
    loom_write_file_atomic(cd, text, len);
    free(text);
  }
  free(src), free(dst), free(cs), free(cd);
}

/* extra: one more override (a variant: files not checked in detail), NULL for the preset;
 * tag names the directories. */
static void roundtrip(const char *preset, const char *extra, const char *tag, uint64_t seed) {
  char *ck = loom_sprintf("%s/%s_ckpt", scratch, tag);
  char *hf = loom_sprintf("%s/%s_hf", scratch, tag);
  char *back = loom_sprintf("%s/%s_back", scratch, tag);
  loom_decoder *d = make_model(ck, preset, extra, seed);
  loom_hf_export_opts eo = {LOOM_DT_F32, 5000000000LL, false};
  int rc = loom_hf_export(ck, hf, &eo);
  CHECK(rc == 0, "%s: export: %s", tag, loom_errmsg());
  if (extra) {
  } else if (d->spec.vision.arch == LOOM_VISION_QWEN) {
    check_qwen_files(hf, d);
  } else {
    check_llava_files(hf, d);
  }
  check_import(preset, hf, back, d, false);
  char *renamed = loom_sprintf("%s/%s_newlayout", scratch, tag);
  write_new_layout(hf, renamed, d->spec.vision.arch == LOOM_VISION_LLAVA);
  loom_rm_rf(back);
  check_import("transformers >= 4.52 names", renamed, back, d, false);
  free(renamed);

  /* shards + index, then bf16 shards */
  for (int bf16 = 0; bf16 < 2; bf16++) {
    loom_rm_rf(hf), loom_rm_rf(back);
    eo.max_shard_bytes = 20000;
    eo.dtype = bf16 ? LOOM_DT_BF16 : LOOM_DT_F32;
    rc = loom_hf_export(ck, hf, &eo);
    CHECK(rc == 0, "%s: sharded export: %s", preset, loom_errmsg());
    char *index = loom_sprintf("%s/model.safetensors.index.json", hf);
    int shards = st_count_entries(hf, "-of-");
    CHECK(loom_path_exists(index) && shards >= 4, "%s: %d shards", preset, shards);
    free(index);
    check_import(preset, hf, back, d, bf16);
  }
  CHECK(st_count_entries(scratch, ".tmp.") == 0, "%s: temporary directories left", preset);
  loom_decoder_free(d);
  free(ck), free(hf), free(back);
}

/* `loom ARGS` must fail (exit 1) with both needles in stderr, leaving no scratch/OUT and no
 * temporary directory. */
static void expect_fail(const char *what, const char *args_fmt, const char *out_name,
                        const char *needle1, const char *needle2) {
  char *out_path = loom_sprintf("%s/%s", scratch, out_name);
  char *args = loom_sprintf(args_fmt, scratch, out_path);
  char *out, *err;
  int rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 1, "%s: exit %d (stderr: %s)", what, rc, err);
  CHECK(strstr(err, needle1) != NULL, "%s: stderr lacks '%s': %s", what, needle1, err);
  CHECK(!needle2 || strstr(err, needle2) != NULL, "%s: stderr lacks '%s': %s", what, needle2, err);
  CHECK(!loom_path_exists(out_path), "%s: output %s was created", what, out_path);
  CHECK(st_count_entries(scratch, ".tmp.") == 0, "%s: temporary directory left", what);
  free(out_path), free(args), free(out), free(err);
}

/* Copy of src_dir's model.safetensors (and config.json) into scratch/name: tensors whose
 * name starts with drop_prefix dropped, `shrink` one row shorter, `extra` added (4 floats). */
static void variant(const char *src_dir, const char *name, const char *drop_prefix,
                    const char *shrink, const char *extra) {
  char *dir = loom_sprintf("%s/%s", scratch, name);
  loom_mkdir_p(dir);
  char *src = loom_sprintf("%s/model.safetensors", src_dir);
  char *dst = loom_sprintf("%s/model.safetensors", dir);
  loom_st_file *f;
  if (loom_st_open(&f, src)) exit(2);
  loom_st_writer *w = loom_st_writer_create();
  for (int i = 0; i < loom_st_count(f); i++) {
    const char *n = loom_st_name(f, i);
    if (drop_prefix && !strncmp(n, drop_prefix, strlen(drop_prefix))) continue;
    int64_t shape[LOOM_ST_MAX_DIMS];
    memcpy(shape, loom_st_shape(f, i), (size_t)loom_st_ndim(f, i) * sizeof *shape);
    if (shrink && !strcmp(n, shrink)) shape[0]--;
    loom_st_writer_add(w, n, loom_st_dtype(f, i), loom_st_ndim(f, i), shape, loom_st_data(f, i));
  }
  float x[4] = {1, 2, 3, 4};
  int64_t s4[1] = {4};
  if (extra) loom_st_writer_add(w, extra, LOOM_DT_F32, 1, s4, x);
  if (loom_st_writer_write(w, dst)) exit(2);
  loom_st_writer_free(w);
  loom_st_close(f);
  char *cs = loom_sprintf("%s/config.json", src_dir), *cd = loom_sprintf("%s/config.json", dir);
  char *text;
  size_t len;
  if (loom_read_file(cs, &text, &len) == 0) {
    loom_write_file_atomic(cd, text, len);
    free(text);
  }
  free(src), free(dst), free(cs), free(cd), free(dir);
}

/* Edit scratch/dir/config.json: set key (at path "key" or "vision_config.key") to v (NULL:
 * delete). */
static void edit_config(const char *dir, const char *obj, const char *key, json_t *v) {
  char *p = loom_sprintf("%s/%s/config.json", scratch, dir);
  json_t *o = json_load_file(p, 0, NULL), *t = obj ? json_object_get(o, obj) : o;
  if (v) json_object_set_new(t, key, v);
  else json_object_del(t, key);
  json_dump_file(o, p, JSON_INDENT(2));
  json_decref(o);
  free(p);
}

static void bad_imports(void) {
  char *hf = loom_sprintf("%s/tiny-qwen2.5-vl_hf", scratch);
  loom_rm_rf(hf);
  char *ck = loom_sprintf("%s/tiny-qwen2.5-vl_ckpt", scratch);
  loom_hf_export_opts eo = {LOOM_DT_F32, 5000000000LL, false};
  CHECK(loom_hf_export(ck, hf, &eo) == 0, "fixture: %s", loom_errmsg());

  variant(hf, "textcfg", NULL, NULL, NULL); /* a text-only Qwen2 config.json */
  edit_config("textcfg", NULL, "model_type", json_string("qwen2"));
  edit_config("textcfg", NULL, "rope_scaling", json_null());
  edit_config("textcfg", NULL, "vision_config", NULL);
  expect_fail("text-only config for Qwen2.5-VL weights", "ckpt import '%s/textcfg' --out '%s'",
              "i1", "text-only", "30 vision tensors ('visual.patch_embed.proj.weight'");
  variant(hf, "novision", "visual.", NULL, NULL);
  expect_fail("vision tensors missing", "ckpt import '%s/novision' --out '%s'", "i2",
              "30 tensors of the model described by the config are missing",
              "'visual.patch_embed.proj.weight', 'visual.blocks.0.norm1.weight'");
  variant(hf, "nomerger", "visual.merger.mlp.2.", NULL, NULL);
  expect_fail("merger missing", "ckpt import '%s/nomerger' --out '%s'", "i3",
              "'visual.merger.mlp.2.weight', 'visual.merger.mlp.2.bias'", "missing");
  variant(hf, "shape", NULL, "visual.merger.mlp.0.weight", NULL);
  expect_fail("wrong shape", "ckpt import '%s/shape' --out '%s'", "i4",
              "visual.merger.mlp.0.weight", "has shape [127, 128] but the config needs [128, 128]");
  variant(hf, "extra", NULL, NULL, "visual.blocks.0.attn.q_norm.weight");
  expect_fail("unknown vision tensor", "ckpt import '%s/extra' --out '%s'", "i5",
              "visual.blocks.0.attn.q_norm.weight", "not part of the model");
  variant(hf, "depth3", NULL, NULL, NULL);
  edit_config("depth3", "vision_config", "depth", json_integer(3));
  expect_fail("vision_config of no preset", "ckpt import '%s/depth3' --out '%s'", "i6",
              "no loom preset has this vision encoder", "depth 3");
  variant(hf, "gelu", NULL, NULL, NULL);
  edit_config("gelu", "vision_config", "hidden_act", json_string("quick_gelu"));
  expect_fail("vision activation", "ckpt import '%s/gelu' --out '%s'", "i7", "hidden_act",
              "quick_gelu");
  variant(hf, "yarn", NULL, NULL, NULL);
  edit_config("yarn", NULL, "rope_scaling", json_pack("{s:s,s:f}", "type", "yarn", "factor", 4.0));
  expect_fail("rope scaling other than mrope", "ckpt import '%s/yarn' --out '%s'", "i8",
              "rope_scaling", "mrope");

  char *lhf = loom_sprintf("%s/tiny-llava_hf", scratch);
  char *lck = loom_sprintf("%s/tiny-llava_ckpt", scratch);
  loom_rm_rf(lhf);
  CHECK(loom_hf_export(lck, lhf, &eo) == 0, "fixture: %s", loom_errmsg());
  variant(lhf, "hfllava", NULL, NULL, "vision_tower.vision_model.embeddings.class_embedding");
  edit_config("hfllava", NULL, "model_type", json_string("llava"));
  expect_fail("transformers' LLaVA", "ckpt import '%s/hfllava' --out '%s'", "i9", "class token",
              "loom_llava");
  variant(lhf, "cls", NULL, NULL, NULL);
  edit_config("cls", "vision_config", "class_token", json_true());
  expect_fail("llava with a class token", "ckpt import '%s/cls' --out '%s'", "i10",
              "class_token", "has no class token");
  variant(lhf, "llavatext", "vision_tower.", NULL, NULL);
  expect_fail("llava without its encoder", "ckpt import '%s/llavatext' --out '%s'", "i11",
              "'vision_tower.vision_model.embeddings.patch_embedding.weight'", "missing");
  free(hf), free(ck), free(lhf), free(lck);
}

static void bad_exports(void) {
  /* extra tensors in the checkpoint: named, nothing written */
  char *ck = loom_sprintf("%s/tiny-qwen2.5-vl_ckpt", scratch);
  variant(ck, "ck_extra", NULL, NULL, "vision.blocks.0.attn.q_norm.weight");
  char *cy = loom_sprintf("%s/config.yaml", ck);
  char *cy2 = loom_sprintf("%s/ck_extra/config.yaml", scratch);
  char *text;
  size_t len;
  if (loom_read_file(cy, &text, &len) == 0) {
    loom_write_file_atomic(cy2, text, len);
    free(text);
  }
  expect_fail("export: extra tensor in the checkpoint", "ckpt export '%s/ck_extra' --out '%s'",
              "e1", "vision.blocks.0.attn.q_norm.weight", "not parameters of this model");
  /* the same weights under a text-only config: the vision tensors are extra, all named */
  variant(ck, "ck_text", NULL, NULL, NULL);
  char *cy3 = loom_sprintf("%s/ck_text/config.yaml", scratch);
  const char *yaml = "model:\n  preset: tiny-qwen2\n  hidden: 64\n  layers: 2\n"
                     "  intermediate: 128\n  max_seq: 1024\n";
  loom_write_file_atomic(cy3, yaml, strlen(yaml));
  expect_fail("export: vision tensors under a text-only config",
              "ckpt export '%s/ck_text' --out '%s'", "e2", "38 tensors",
              "'vision.patch_embed.weight'");
  /* a model HF's class cannot express */
  char *nb = loom_sprintf("%s/ck_nobias", scratch);
  loom_decoder *d = make_model(nb, "tiny-qwen2.5-vl", "model.qkv_bias=false", 3);
  loom_decoder_free(d);
  expect_fail("export: Qwen2.5-VL without q/k/v biases", "ckpt export '%s/ck_nobias' --out '%s'",
              "e3", "qkv_bias=false", "Qwen2_5_VLForConditionalGeneration");
  /* nonzero vocabulary padding */
  char *pad = loom_sprintf("%s/ck_pad", scratch);
  d = make_model(pad, "tiny-llava", "model.vocab_size=500", 4);
  d->params[loom_param_find(&d->layout, "lm_head.weight")->offset + 505 * 64 + 3] = 0.5f;
  loom_config cfg;
  const char *over[2] = {"model.preset=tiny-llava", "model.vocab_size=500"};
  hf_test_config(&cfg, 2, over);
  hf_test_save(pad, d, &cfg);
  loom_decoder_free(d);
  expect_fail("export: nonzero vocabulary padding", "ckpt export '%s/ck_pad' --out '%s'", "e4",
              "lm_head.weight row 505", "would be lost");

  /* the plan check: a plan without one tensor is refused with the loom names */
  loom_model_spec spec;
  loom_model_preset(&spec, "tiny-qwen2.5-vl");
  loom_param_layout lay;
  loom_param_layout_build(&lay, &spec);
  loom_hf_tensor *t;
  int n;
  CHECK(loom_hf_plan(&spec, &lay, &t, &n) == 0 && loom_hf_plan_check(&spec, &lay, t, n) == 0,
        "plan: %s", loom_errmsg());
  int qkv = -1;
  for (int k = 0; k < n; k++)
    if (!strcmp(t[k].name, "visual.blocks.1.attn.qkv.bias")) qkv = k;
  CHECK(qkv >= 0, "plan has visual.blocks.1.attn.qkv.bias");
  if (qkv >= 0) {
    t[qkv] = t[n - 1];
    int rc = loom_hf_plan_check(&spec, &lay, t, n - 1);
    const char *m = loom_errmsg();
    CHECK(rc != 0 && strstr(m, "3 tensors") && strstr(m, "vision.blocks.1.attn.q.bias") &&
              strstr(m, "vision.blocks.1.attn.v.bias"), "plan check: %s", m);
  }
  free(t);
  loom_param_layout_free(&lay);
  free(ck), free(cy), free(cy2), free(cy3), free(nb), free(pad);
}

/* The special token ids come from the run's tokenizer (data.tokenizer): a trained
 * tokenizer with the chat and vision tokens appended as synth-vqa does (ids 300..304). */
static void check_token_ids(void) {
  char *tok = loom_sprintf("%s/tokenizer.json", scratch);
  const char *text = "the cat sat on the mat. the dog sat on the log. <|endoftext|>";
  int rc = loom_tokenizer_train(text, strlen(text), 300, tok);
  json_t *root = rc ? NULL : json_load_file(tok, JSON_PRESERVE_ORDER, NULL);
  CHECK(root != NULL, "tokenizer fixture: %s", loom_errmsg());
  if (!root) return;
  static const char *extra[] = {"<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>",
                                "<|vision_end|>"};
  json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
  for (int i = 0; i < 5; i++) {
    json_array_append_new(json_object_get(root, "added_tokens"),
                          json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 300 + i,
                                    "content", extra[i], "single_word", 0, "lstrip", 0, "rstrip",
                                    0, "normalized", 0, "special", 1));
    json_object_set_new(vocab, extra[i], json_integer(300 + i));
  }
  json_dump_file(root, tok, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  char *over = loom_sprintf("data.tokenizer=%s", tok);
  for (int llava = 0; llava < 2; llava++) {
    char *ck = loom_sprintf("%s/tok_ck%d", scratch, llava);
    char *hf = loom_sprintf("%s/tok_hf%d", scratch, llava);
    loom_decoder *d = make_model(ck, llava ? "tiny-llava" : "tiny-qwen2.5-vl", over, 5);
    loom_decoder_free(d);
    loom_hf_export_opts eo = {LOOM_DT_F32, 5000000000LL, false};
    rc = loom_hf_export(ck, hf, &eo);
    CHECK(rc == 0, "token ids: export: %s", loom_errmsg());
    json_t *o = load_json(hf);
    if (llava)
      CHECK(jint(o, "image_token_index") == 303, "llava: image_token_index %ld",
            jint(o, "image_token_index"));
    else
      CHECK(jint(o, "image_token_id") == 303 && jint(o, "vision_start_token_id") == 302 &&
                jint(o, "vision_end_token_id") == 304, "qwen: token ids %ld %ld %ld",
            jint(o, "image_token_id"), jint(o, "vision_start_token_id"),
            jint(o, "vision_end_token_id"));
    json_decref(o);
    free(ck), free(hf);
  }
  free(over), free(tok);
}

/* The config.json of the published Qwen/Qwen2.5-VL-7B-Instruct maps onto the qwen2.5-vl-7b
 * preset exactly; the same fields nested in text_config (transformers >= 4.52) too. */
static void check_published_config(void) {
  static const char *const text =
      "{\"architectures\": [\"Qwen2_5_VLForConditionalGeneration\"], \"attention_dropout\": 0.0,"
      " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"vision_start_token_id\": 151652,"
      " \"vision_end_token_id\": 151653, \"vision_token_id\": 151654, \"image_token_id\": 151655,"
      " \"video_token_id\": 151656, \"hidden_act\": \"silu\", \"hidden_size\": 3584,"
      " \"initializer_range\": 0.02, \"intermediate_size\": 18944,"
      " \"max_position_embeddings\": 128000, \"max_window_layers\": 28,"
      " \"model_type\": \"qwen2_5_vl\", \"num_attention_heads\": 28, \"num_hidden_layers\": 28,"
      " \"num_key_value_heads\": 4, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
      " \"sliding_window\": 32768, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
      " \"transformers_version\": \"4.41.2\", \"use_cache\": true, \"use_sliding_window\": false,"
      " \"vision_config\": {\"depth\": 32, \"hidden_act\": \"silu\", \"hidden_size\": 1280,"
      " \"intermediate_size\": 3420, \"num_heads\": 16, \"in_chans\": 3, \"out_hidden_size\": 3584,"
      " \"patch_size\": 14, \"spatial_merge_size\": 2, \"spatial_patch_size\": 14,"
      " \"window_size\": 112, \"fullatt_block_indexes\": [7, 15, 23, 31],"
      " \"tokens_per_second\": 2, \"temporal_patch_size\": 2},"
      " \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [16, 24, 24]},"
      " \"vocab_size\": 152064}";
  char *path = loom_sprintf("%s/published.json", scratch);
  loom_model_spec want;
  loom_model_preset(&want, "qwen2.5-vl-7b");
  for (int nested = 0; nested < 2; nested++) {
    json_t *o = json_loads(text, 0, NULL);
    if (nested) { /* text fields under text_config */
      json_t *t = json_object();
      static const char *const keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                         "num_attention_heads", "num_key_value_heads",
                                         "rms_norm_eps", "rope_theta", "rope_scaling",
                                         "vocab_size", "max_position_embeddings", "hidden_act",
                                         "tie_word_embeddings"};
      for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        json_object_set(t, keys[k], json_object_get(o, keys[k]));
        json_object_del(o, keys[k]);
      }
      json_object_set_new(o, "text_config", t);
    }
    json_dump_file(o, path, 0);
    json_decref(o);
    loom_config cfg;
    loom_config_defaults(&cfg);
    loom_model_spec s;
    int rc = loom_hf_config_load(&cfg, path, LOOM_ARCH_LLAMA) ||
             loom_model_spec_from_config(&s, &cfg.model);
    CHECK(rc == 0, "published config (nested %d): %s", nested, loom_errmsg());
    if (rc) continue;
    CHECK(!strcmp(cfg.model.preset, "qwen2.5-vl-7b") && s.vocab_size == want.vocab_size &&
              s.padded_vocab == want.padded_vocab && s.hidden == want.hidden &&
              s.layers == want.layers && s.heads == want.heads && s.kv_heads == want.kv_heads &&
              s.head_dim == want.head_dim && s.intermediate == want.intermediate &&
              s.max_seq == want.max_seq && s.norm_eps == want.norm_eps &&
              s.rope_theta == want.rope_theta && s.qkv_bias && !s.tied_embeddings &&
              !memcmp(&s.vision, &want.vision, sizeof s.vision),
          "published config (nested %d): preset '%s', spec differs from qwen2.5-vl-7b", nested,
          cfg.model.preset);
  }
  free(path);
}

int main(void) {
  scratch = st_scratch_dir("hf_vlm");
  roundtrip("tiny-qwen2.5-vl", NULL, "tiny-qwen2.5-vl", 11);
  roundtrip("tiny-llava", NULL, "tiny-llava", 12);
  /* untied Qwen2.5-VL head; vocabulary padding (500 of 512 rows); LLaVA over a Qwen2 text
   * model (q/k/v biases) */
  roundtrip("tiny-qwen2.5-vl", "model.tied_embeddings=false", "qwen_untied", 13);
  roundtrip("tiny-qwen2.5-vl", "model.vocab_size=500", "qwen_v500", 15);
  roundtrip("tiny-llava", "model.qkv_bias=true", "llava_qwen2", 14);
  bad_imports();
  bad_exports();
  check_token_ids();
  check_published_config();
  int rc = harness_finish("test_hf_vlm");
  if (rc == 0) loom_rm_rf(scratch);
  free(scratch);
  return rc;
}
