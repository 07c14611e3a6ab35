/* Descriptive names of sweep points: the model preset (else arch) followed by one short part
 * per name key, e.g. gpt2-124m_tp2_pp1_bs4_bf16_ckpt. Known keys have short spellings
 * (tp2, bs4, lr3e-4, h256, vsp4 for vision.parallel.sp, img448 for a 448x448 pixel budget);
 * enum-like keys give their value alone (bf16, cosine); bools give the key's short name when
 * true (ckpt) and no<name> when false; other keys <last part><value>. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config_schema.h"
#include "loom/core.h"
#include "loom/sweep.h"

static const struct {
  const char *key, *abbr;
} abbrevs[] = {
    {"parallel.dp", "dp"}, {"parallel.tp", "tp"}, {"parallel.pp", "pp"}, {"parallel.sp", "sp"},
    {"parallel.cp", "cp"}, {"vision.parallel.cp", "vcp"},
    {"parallel.zero", "zero"}, {"parallel.vpp", "vpp"},
    {"training.micro_batch_size", "bs"}, {"training.global_batch_size", "gbs"},
    {"training.grad_accum", "ga"}, {"training.seq_len", "seq"}, {"training.lr", "lr"},
    {"training.steps", "steps"}, {"training.weight_decay", "wd"},
    {"training.warmup_steps", "wu"}, {"training.grad_clip", "clip"},
    {"training.activation_checkpointing", "ckpt"}, {"model.hidden", "h"},
    {"model.layers", "l"}, {"model.heads", "nh"}, {"model.kv_heads", "kv"},
    {"model.intermediate", "ffn"}, {"run.seed", "seed"},
    {"vision.parallel.dp", "vdp"}, {"vision.parallel.tp", "vtp"}, {"vision.parallel.sp", "vsp"},
    {"vision.parallel.zero", "vzero"}, {"data.image_max_pixels", "maxpx"},
    {"data.image_min_pixels", "minpx"},
};

/* Keys whose value alone names them. */
static const char *const value_only[] = {"model.preset", "model.arch", "training.dtype",
                                         "training.lr_schedule", "parallel.schedule",
                                         "parallel.sp_mode", NULL};

static const char *abbr_of(const char *key) {
  for (size_t i = 0; i < sizeof abbrevs / sizeof abbrevs[0]; i++)
    if (!strcmp(abbrevs[i].key, key)) return abbrevs[i].abbr;
  return loom_config_key_last(key);
}

/* 3e-4 rather than 0.0003; 0.25 stays 0.25. */
static void compact_double(double v, char *buf, size_t n) {
  if (v != 0 && (fabs(v) < 1e-2 || fabs(v) >= 1e5)) {
    char m[32];
    snprintf(m, sizeof m, "%.3e", v);
    char *e = strchr(m, 'e');
    int exp = atoi(e + 1);
    *e = 0;
    char *end = m + strlen(m) - 1;
    while (*end == '0') *end-- = 0;
    if (*end == '.') *end = 0;
    snprintf(buf, n, "%se%d", m, exp);
  } else {
    snprintf(buf, n, "%.4g", v);
  }
}

static void sanitize(char *s) {
  for (; *s; s++)
    if (!(isalnum((unsigned char)*s) || *s == '.' || *s == '-' || *s == '_')) *s = '-';
}

/* One name part for key k of c, or "" (bool false keys with no short name never happen). */
static void part(const loom_config *c, const loom_config_key *k, char *out, size_t n) {
  const char *f = (const char *)c + k->offset;
  const char *ab = abbr_of(k->name);
  char val[LOOM_STR_MAX];
  switch (k->type) {
    case LOOM_KEY_BOOL: snprintf(out, n, "%s%s", *(const bool *)f ? "" : "no", ab); return;
    case LOOM_KEY_INT: {
      long v = *(const long *)f, side = lround(sqrt((double)v));
      if (!strcmp(k->name, "data.image_max_pixels") && v > 0 && side * side == v) {
        snprintf(out, n, "img%ld", side); /* a square image's side: img448 */
        return;
      }
      snprintf(val, sizeof val, "%ld", v);
      break;
    }
    case LOOM_KEY_FLOAT: compact_double(*(const double *)f, val, sizeof val); break;
    default: {
      snprintf(val, sizeof val, "%s", f[0] ? f : "none");
      const char *slash = strrchr(val, '/'); /* paths: the file's name */
      if (slash && slash[1]) memmove(val, slash + 1, strlen(slash));
    }
  }
  bool alone = false;
  for (int i = 0; value_only[i]; i++) alone |= !strcmp(value_only[i], k->name);
  snprintf(out, n, "%s%s", alone ? "" : ab, val);
}

char *loom_sweep_point_name(const loom_config *cfg, char **keys, int nkeys) {
  char name[1024];
  const char *prefix = cfg->model.preset[0] ? cfg->model.preset
                     : cfg->model.arch[0]   ? cfg->model.arch : "run";
  snprintf(name, sizeof name, "%s", prefix);
  for (int i = 0; i < nkeys; i++) {
    const loom_config_key *k = loom_config_key_find(keys[i]);
    const char *user = k ? NULL : loom_config_user_get(cfg, keys[i]);
    if (user) { /* a swept user key: its last part and value, e.g. hypothesis_a */
      size_t len = strlen(name);
      snprintf(name + len, sizeof name - len, "_%s%s", loom_config_key_last(keys[i]), user);
      continue;
    }
    if (!k || !strcmp(k->name, "model.preset") || !strcmp(k->name, "run.name")) continue;
    char p[LOOM_STR_MAX + 32];
    part(cfg, k, p, sizeof p);
    size_t len = strlen(name);
    if (p[0] && len + strlen(p) + 2 < sizeof name) snprintf(name + len, sizeof name - len, "_%s", p);
  }
  sanitize(name);
  return loom_strdup(name);
}
