/* `loom ckpt export` / `import` on bad input, through the CLI: missing shard, index naming a
 * tensor its shard lacks, wrong shape, unknown or missing tensors, unknown naming, corrupt or
 * missing or mismatched config.json, a --config that does not fit, bad options, existing
 * outputs. Each must fail with exit status 1, a message naming the file / tensor, leave no
 * output directory and no temporary directory, and never touch the input. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "hf_test_util.h"
#include "loom/hf.h"
#include "loom/safetensors.h"
#include "st_test_util.h"

static char *scratch;

/* Copy HF file src_dir/model.safetensors to scratch/name/, dropping `drop`, renaming `from`
 * to `to`, and giving `shrink` one row less; copies src_dir/config.json along. */
static void make_variant(const char *src_dir, const char *name_, const char *drop,
                         const char *from, const char *to, const char *shrink) {
  char *dir = loom_sprintf("%s/%s", scratch, name_);
  loom_mkdir_p(dir);
  char *src = loom_sprintf("%s/model.safetensors", src_dir);
  char *dst = loom_sprintf("%s/model.safetensors", dir);
  char *cs = loom_sprintf("%s/config.json", src_dir), *cd = loom_sprintf("%s/config.json", dir);
  loom_st_file *f;
  if (loom_st_open(&f, src)) exit(2);
  loom_st_writer *w = loom_st_writer_create();
  for (int i = 0; i < loom_st_count(f); i++) {
    const char *name = loom_st_name(f, i);
    if (drop && !strcmp(name, drop)) continue;
    const int64_t *s = loom_st_shape(f, i);
    int64_t shape[2] = {s[0], loom_st_ndim(f, i) > 1 ? s[1] : 0};
    if (shrink && !strcmp(name, shrink)) shape[0]--;
    if (from && !strcmp(name, from)) name = to;
    loom_st_writer_add(w, name, loom_st_dtype(f, i), loom_st_ndim(f, i), shape, loom_st_data(f, i));
  }
  if (loom_st_writer_write(w, dst)) exit(2);
  loom_st_writer_free(w);
  loom_st_close(f);
  char *text;
  size_t len;
  if (loom_read_file(cs, &text, &len) == 0) {
    loom_write_file_atomic(cd, text, len);
    free(text);
  }
  free(src), free(dst), free(cs), free(cd), free(dir);
}

static void write_text(const char *path, const char *text) {
  st_write_bytes(path, text, strlen(text));
}

/* Run `loom ARGS` (out = scratch/OUT) and expect failure with every needle in stderr. */
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

int main(void) {
  scratch = st_scratch_dir("hf_bad");
  const char *over[] = {"model.preset=", "model.arch=gpt2", "model.vocab_size=50",
                        "model.hidden=16", "model.heads=2", "model.layers=2", "model.max_seq=8"};
  loom_config cfg;
  hf_test_config(&cfg, 7, over);
  loom_decoder *d = hf_test_model(&cfg, 1, 3);
  char *ck = loom_sprintf("%s/ck", scratch), *hf = loom_sprintf("%s/hf", scratch);
  char *sh = loom_sprintf("%s/sharded", scratch);
  hf_test_save(ck, d, &cfg);
  loom_hf_export_opts eo = {LOOM_DT_F32, 5000000000LL, false};
  int rc = loom_hf_export(ck, hf, &eo);
  eo.max_shard_bytes = 2000;
  rc = rc || loom_hf_export(ck, sh, &eo);
  CHECK(rc == 0, "fixtures: %s", loom_errmsg());
  if (rc) return harness_finish("test_hf_bad_input");
  char buf[1024];

  /* ---- import ---- */
  snprintf(buf, sizeof buf, "%s/sharded/model-00002-of-%05d.safetensors", scratch,
           st_count_entries(sh, "-of-"));
  CHECK(remove(buf) == 0, "remove shard %s", buf);
  expect_fail("missing shard", "ckpt import '%s/sharded' --out '%s'", "o1", "model-00002-of-",
              "does not exist");
  snprintf(buf, sizeof buf, "%s/sharded/model.safetensors.index.json", scratch);
  write_text(buf, "{\"metadata\": {}, \"weight_map\": {\"wte.weight\": "
                  "\"model-00001-of-00009.safetensors\", \"wpe.weight\": "
                  "\"model-00001-of-00009.safetensors\"}}");
  snprintf(buf, sizeof buf, "%s/sharded/model-00001-of-00009.safetensors", scratch);
  {
    loom_st_writer *w = loom_st_writer_create();
    float x[16] = {0};
    int64_t s[2] = {1, 16};
    loom_st_writer_add(w, "wte.weight", LOOM_DT_F32, 2, s, x);
    loom_st_writer_write(w, buf);
    loom_st_writer_free(w);
  }
  expect_fail("index names a tensor the shard lacks", "ckpt import '%s/sharded' --out '%s'", "o2",
              "wpe.weight", "no such tensor");

  make_variant(hf, "shape", NULL, NULL, NULL, "h.1.ln_2.weight");
  expect_fail("wrong shape", "ckpt import '%s/shape' --out '%s'", "o3", "h.1.ln_2.weight",
              "has shape [15] but the config needs [16]");
  make_variant(hf, "extra", NULL, "h.0.mlp.c_fc.bias",
               "h.0.mlp.c_gate.bias", NULL);
  expect_fail("unknown tensor", "ckpt import '%s/extra' --out '%s'", "o4", "h.0.mlp.c_gate.bias",
              "not part of the model");
  make_variant(hf, "missing", "ln_f.bias", NULL, NULL, NULL);
  expect_fail("missing tensor", "ckpt import '%s/missing' --out '%s'", "o5", "ln_f.bias",
              "is missing");
  snprintf(buf, sizeof buf, "%s/naming2", scratch);
  loom_mkdir_p(buf);
  {
    loom_st_writer *w = loom_st_writer_create();
    float x[4] = {0};
    int64_t s[1] = {4};
    loom_st_writer_add(w, "encoder.layer.0.weight", LOOM_DT_F32, 1, s, x);
    snprintf(buf, sizeof buf, "%s/naming2/model.safetensors", scratch);
    loom_st_writer_write(w, buf);
    loom_st_writer_free(w);
  }
  expect_fail("unknown naming", "ckpt import '%s/naming2' --out '%s'", "o6",
              "unknown tensor naming", "encoder.layer.0.weight");

  make_variant(hf, "badjson", NULL, NULL, NULL, NULL);
  snprintf(buf, sizeof buf, "%s/badjson/config.json", scratch);
  write_text(buf, "{\"model_type\": \"gpt2\",\n \"n_embd\": 16,,\n}");
  expect_fail("corrupt config.json", "ckpt import '%s/badjson' --out '%s'", "o7", "config.json:2",
              "not valid JSON");
  write_text(buf, "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"vocab_size\": 50}");
  expect_fail("config.json lacks a key", "ckpt import '%s/badjson' --out '%s'", "o8", "n_embd",
              "missing");
  write_text(buf, "{\"model_type\": \"qwen2\", \"hidden_size\": 16}");
  expect_fail("model_type mismatch", "ckpt import '%s/badjson' --out '%s'", "o9", "qwen2",
              "does not match the tensor names");
  remove(buf);
  expect_fail("no config.json", "ckpt import '%s/badjson' --out '%s'", "o10", "config.json",
              "--config");
  snprintf(buf, sizeof buf, "%s/other.yaml", scratch);
  write_text(buf, "model:\n  preset: \"\"\n  arch: gpt2\n  vocab_size: 50\n  hidden: 32\n"
                  "  heads: 2\n  layers: 2\n  max_seq: 8\n");
  expect_fail("--config of another model",
              "ckpt import '%1$s/hf' --out '%2$s' --config '%1$s/other.yaml'",
              "o11", "wte.weight", "[50, 16] but the config needs [50, 32]");
  expect_fail("not a directory", "ckpt import '%s/nowhere' --out '%s'", "o12", "nowhere",
              "not a directory");
  {
    char *empty = loom_sprintf("%s/empty", scratch);
    loom_mkdir_p(empty);
    free(empty);
  }
  expect_fail("no safetensors", "ckpt import '%s/empty' --out '%s'", "o13",
              "neither model.safetensors", "index.json");

  /* ---- export ---- */
  expect_fail("export: no checkpoint", "ckpt export '%s/nowhere' --out '%s'", "e1", "nowhere",
              "not a directory");
  expect_fail("export: not a loom checkpoint", "ckpt export '%s/hf' --out '%s'", "e2",
              "config.yaml", "not a loom checkpoint");
  expect_fail("export: bad dtype", "ckpt export '%s/ck' --out '%s' --dtype f16", "e3", "--dtype",
              "f32 or bf16");
  expect_fail("export: bad shard size", "ckpt export '%s/ck' --out '%s' --max-shard-size 5XB", "e4",
              "5XB", "invalid size");

  char *out, *err, *args = loom_sprintf("ckpt export '%s/ck' --dtype bf16", scratch);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 1 && strstr(err, "missing --out") && strstr(err, "usage:"), "no --out: %s", err);
  free(args), free(out), free(err);

  /* ---- existing outputs are kept ---- */
  args = loom_sprintf("ckpt export '%s/ck' --out '%s/hf'", scratch, scratch);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 1 && strstr(err, "already exists") && strstr(err, "--force"), "existing out: %s",
        err);
  free(args), free(out), free(err);
  args = loom_sprintf("ckpt import '%s/hf' --out '%s/hf' --force", scratch, scratch);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 1 && strstr(err, "would delete the input"), "out == input: %s", err);
  snprintf(buf, sizeof buf, "%s/hf/model.safetensors", scratch);
  CHECK(loom_path_exists(buf), "input intact");
  free(args), free(out), free(err);
  args = loom_sprintf("ckpt export '%s/ck' --out '%s' --force", scratch, scratch);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 1 && strstr(err, "would delete the input"), "out holds input: %s", err);
  free(args), free(out), free(err);

  loom_decoder_free(d);
  free(ck), free(hf), free(sh);
  rc = harness_finish("test_hf_bad_input");
  if (rc == 0) loom_rm_rf(scratch);
  return rc;
}
