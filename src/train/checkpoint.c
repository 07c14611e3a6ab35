/* Checkpoint directories: save (to <dir>.tmp.<pid>, then rename) and load. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/checkpoint.h"
#include "loom/safetensors.h"

static int write_tensors(const char *path, const loom_param_layout *lay, const float *a,
                         const char *pa, const float *b, const char *pb, long step) {
  loom_st_writer *w = loom_st_writer_create();
  char buf[64];
  snprintf(buf, sizeof buf, "%ld", step);
  loom_st_writer_set_metadata(w, "format", "loom");
  loom_st_writer_set_metadata(w, "step", buf);
  char names[2][LOOM_STR_MAX];
  for (int i = 0; i < lay->count; i++) {
    const loom_param *p = &lay->params[i];
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    for (int k = 0; k < (b ? 2 : 1); k++) {
      const char *prefix = k ? pb : pa;
      if (prefix[0]) snprintf(names[k], sizeof names[k], "%s.%s", prefix, p->name);
      else snprintf(names[k], sizeof names[k], "%s", p->name);
      if (loom_st_writer_add(w, names[k], LOOM_DT_F32, p->ndim, shape, (k ? b : a) + p->offset)) {
        loom_st_writer_free(w);
        return LOOM_ERR;
      }
    }
  }
  int rc = loom_st_writer_write(w, path);
  loom_st_writer_free(w);
  return rc;
}

static char *state_json(const loom_train_state *ts) {
  json_t *rng = json_array();
  for (int i = 0; i < 4; i++) {
    char hex[32];
    snprintf(hex, sizeof hex, "%016" PRIx64, ts->rng.s[i]);
    json_array_append_new(rng, json_string(hex));
  }
  char hash[32];
  snprintf(hash, sizeof hash, "%016" PRIx64, ts->config_hash);
  json_t *o = json_pack("{s:I, s:o, s:{s:I, s:I}, s:s, s:I, s:f}", "step", (json_int_t)ts->step,
                        "rng", rng, "loader", "epoch", (json_int_t)ts->loader.epoch, "index",
                        (json_int_t)ts->loader.index, "config_hash", hash, "tokens_seen",
                        (json_int_t)ts->tokens_seen, "elapsed", ts->elapsed);
  char *text = json_dumps(o, JSON_INDENT(2));
  json_decref(o);
  return text;
}

int loom_ckpt_save(const char *dir, const loom_decoder *d, const loom_adamw_state *opt,
                   const loom_train_state *ts, const loom_config *cfg) {
  char *tmp = loom_tmp_path(dir);
  loom_rm_rf(tmp);
  int rc = loom_mkdir_p(tmp);
  char *p1 = loom_sprintf("%s/model.safetensors", tmp);
  char *p2 = loom_sprintf("%s/optimizer.safetensors", tmp);
  char *p3 = loom_sprintf("%s/trainer_state.json", tmp);
  char *p4 = loom_sprintf("%s/config.yaml", tmp);
  if (!rc) rc = write_tensors(p1, &d->layout, d->params, "", NULL, NULL, ts->step);
  if (!rc) rc = write_tensors(p2, &d->layout, opt->m, "exp_avg", opt->v, "exp_avg_sq", ts->step);
  if (!rc) {
    char *text = state_json(ts);
    rc = loom_write_file_atomic(p3, text, strlen(text));
    free(text);
  }
  if (!rc) rc = loom_config_save(cfg, p4);
  if (!rc) rc = loom_rename_dir_atomic(tmp, dir);
  if (rc) {
    loom_err_prefix("saving checkpoint '%s': ", dir);
    loom_rm_rf(tmp);
  }
  free(p1), free(p2), free(p3), free(p4), free(tmp);
  return rc;
}

static int read_tensors(const char *path, const loom_param_layout *lay, float *dst,
                        const char *prefix) {
  loom_st_file *f;
  if (loom_st_open(&f, path)) return LOOM_ERR;
  int rc = 0;
  for (int i = 0; i < lay->count && !rc; i++) {
    const loom_param *p = &lay->params[i];
    char name[LOOM_STR_MAX];
    if (prefix[0]) snprintf(name, sizeof name, "%s.%s", prefix, p->name);
    else snprintf(name, sizeof name, "%s", p->name);
    int idx = loom_st_find(f, name);
    if (idx < 0) {
      rc = loom_err("%s: tensor '%s' is missing; the checkpoint was written for a different "
                    "model (check model.* in the config)", path, name);
      break;
    }
    const int64_t *shape = loom_st_shape(f, idx);
    int nd = loom_st_ndim(f, idx);
    bool same = nd == p->ndim && shape[0] == p->shape[0] && (nd < 2 || shape[1] == p->shape[1]);
    if (!same) {
      rc = loom_err("%s: tensor '%s' has shape [%lld%s%lld] but the model expects [%d%s%d]; "
                    "the checkpoint was written for a different model", path, name,
                    (long long)shape[0], nd > 1 ? ", " : "", nd > 1 ? (long long)shape[1] : 0LL,
                    p->shape[0], p->ndim > 1 ? ", " : "", p->ndim > 1 ? p->shape[1] : 0);
      break;
    }
    rc = loom_st_read_f32(f, name, dst + p->offset, p->numel);
  }
  loom_st_close(f);
  return rc;
}

static int parse_state(const char *path, loom_train_state *ts) {
  json_error_t e;
  json_t *o = json_load_file(path, 0, &e);
  if (!o) return loom_err("%s:%d: %s", path, e.line, e.text);
  json_int_t step = 0, epoch = 0, index = 0, tokens = 0;
  json_t *rng = NULL;
  const char *hash = NULL;
  double elapsed = 0;
  int bad = json_unpack_ex(o, &e, 0, "{s:I, s:o, s:{s:I, s:I}, s:s, s:I, s:F}", "step", &step,
                           "rng", &rng, "loader", "epoch", &epoch, "index", &index,
                           "config_hash", &hash, "tokens_seen", &tokens, "elapsed", &elapsed);
  if (bad || !json_is_array(rng) || json_array_size(rng) != 4) {
    json_decref(o);
    return loom_err("%s: malformed trainer state (%s); the checkpoint is damaged", path,
                    bad ? e.text : "rng must hold 4 words");
  }
  ts->step = (long)step;
  ts->loader.epoch = (uint64_t)epoch;
  ts->loader.index = (uint64_t)index;
  ts->tokens_seen = (long)tokens;
  ts->elapsed = elapsed;
  ts->config_hash = strtoull(hash, NULL, 16);
  for (int i = 0; i < 4; i++)
    ts->rng.s[i] = strtoull(json_string_value(json_array_get(rng, (size_t)i)), NULL, 16);
  json_decref(o);
  return 0;
}

int loom_ckpt_load(const char *dir, loom_decoder *d, loom_adamw_state *opt,
                   loom_train_state *ts) {
  if (!loom_is_dir(dir))
    return loom_err("checkpoint '%s' is not a directory (expected runs/<id>/checkpoint_<step>)",
                    dir);
  char *p1 = loom_sprintf("%s/model.safetensors", dir);
  char *p2 = loom_sprintf("%s/optimizer.safetensors", dir);
  char *p3 = loom_sprintf("%s/trainer_state.json", dir);
  int rc = read_tensors(p1, &d->layout, d->params, "");
  if (!rc) rc = read_tensors(p2, &d->layout, opt->m, "exp_avg");
  if (!rc) rc = read_tensors(p2, &d->layout, opt->v, "exp_avg_sq");
  if (!rc) rc = parse_state(p3, ts);
  if (!rc) {
    opt->step = ts->step;
    loom_decoder_params_updated(d);
  }
  free(p1), free(p2), free(p3);
  return rc;
}
