/* loom_config_validate: range checks on numeric keys (a table of rules), plus the checks the
 * typed loader already guarantees but a config built in code might break (enum values,
 * terminated strings, finite floats). Errors name the key, its value and the valid range. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exp/config_internal.h"
#include "loom/core.h"

typedef struct {
  const char *key;
  double lo, hi;     /* bounds; hi = INFINITY for none */
  bool lo_open;      /* lo excluded: value > lo */
  bool hi_open;      /* hi excluded: value < hi */
} range_rule;

#define AT_LEAST(k, lo) {k, lo, INFINITY, false, true}
#define ABOVE(k, lo) {k, lo, INFINITY, true, true}

static const range_rule rules[] = {
    AT_LEAST("model.vocab_size", 0),
    AT_LEAST("model.vocab_pad_multiple", 1),
    AT_LEAST("model.hidden", 0),
    AT_LEAST("model.layers", 0),
    AT_LEAST("model.heads", 0),
    AT_LEAST("model.kv_heads", 0),
    AT_LEAST("model.head_dim", 0),
    AT_LEAST("model.intermediate", 0),
    AT_LEAST("model.max_seq", 0),
    AT_LEAST("model.norm_eps", 0),
    AT_LEAST("model.rope_theta", 0),
    AT_LEAST("model.init_std", 0),
    AT_LEAST("training.steps", 1),
    AT_LEAST("training.micro_batch_size", 1),
    AT_LEAST("training.seq_len", 1),
    AT_LEAST("training.grad_accum", 1),
    ABOVE("training.lr", 0),
    {"training.min_lr_ratio", 0, 1, false, false},
    AT_LEAST("training.warmup_steps", 0),
    {"training.warmup_ratio", 0, 1, false, true},
    AT_LEAST("training.weight_decay", 0),
    {"training.beta1", 0, 1, false, true},
    {"training.beta2", 0, 1, false, true},
    ABOVE("training.eps", 0),
    AT_LEAST("training.grad_clip", 0),
    AT_LEAST("training.log_every", 1),
    AT_LEAST("checkpoint.every", 0),
    AT_LEAST("checkpoint.keep_last", 0),
    AT_LEAST("run.max_restarts", 0),
    AT_LEAST("training.global_batch_size", 0),
    AT_LEAST("parallel.dp", 1),
    AT_LEAST("parallel.tp", 1),
    AT_LEAST("parallel.pp", 1),
    AT_LEAST("parallel.sp", 1),
    {"parallel.zero", 0, 3, false, false},
    AT_LEAST("parallel.vpp", 1),
    ABOVE("parallel.bucket_mb", 0),
    ABOVE("parallel.timeout_s", 0),
    AT_LEAST("vision.parallel.dp", 0), /* 0: follow the text decoder */
    AT_LEAST("vision.parallel.tp", 0),
    AT_LEAST("vision.parallel.sp", 0),
    {"vision.parallel.zero", -1, 3, false, false},
};

static double numeric_value(const loom_config *c, const loom_config_key *k) {
  const char *f = (const char *)c + k->offset;
  if (k->type == LOOM_KEY_INT) return (double)*(const long *)f;
  return *(const double *)f;
}

static bool in_range(const range_rule *r, double v) {
  bool lo_ok = r->lo_open ? v > r->lo : v >= r->lo;
  bool hi_ok = isinf(r->hi) ? isfinite(v) : (r->hi_open ? v < r->hi : v <= r->hi);
  return lo_ok && hi_ok;
}

static int range_err(const loom_config *c, const loom_config_key *k, const range_rule *r) {
  char *val = loom_config_key_format(c, k);
  char lo[64];
  snprintf(lo, sizeof lo, "%g", r->lo);
  if (isinf(r->hi))
    loom_err("%s = %s is out of range: it must be %s %s", k->name, val, r->lo_open ? ">" : ">=",
             lo);
  else
    loom_err("%s = %s is out of range: it must be in %c%s, %g%c", k->name, val,
             r->lo_open ? '(' : '[', lo, r->hi, r->hi_open ? ')' : ']');
  free(val);
  return -1;
}

static int check_ranges(const loom_config *c) {
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    const loom_config_key *k = loom_config_key_find(rules[i].key);
    LOOM_ASSERT(k && (k->type == LOOM_KEY_INT || k->type == LOOM_KEY_FLOAT));
    if (!in_range(&rules[i], numeric_value(c, k))) return range_err(c, k, &rules[i]);
  }
  return 0;
}

/* Checks on every key that the loader guarantees but code could break. */
static int check_key(const loom_config *c, const loom_config_key *k) {
  const char *f = (const char *)c + k->offset;
  if (k->type == LOOM_KEY_STRING || k->type == LOOM_KEY_ENUM) {
    if (!memchr(f, 0, k->size)) return loom_err("%s is not a terminated string", k->name);
    if (k->type == LOOM_KEY_STRING) return 0;
    for (const char *const *v = k->allowed; *v; v++)
      if (!strcmp(f, *v)) return 0;
    char tb[256], sb[96];
    return loom_err("%s = %s is not allowed: it must be %s", k->name,
                    loom_config_show_text(f, sb, sizeof sb),
                    loom_config_type_phrase(k, tb, sizeof tb));
  }
  if (k->type == LOOM_KEY_FLOAT && !isfinite(*(const double *)f))
    return loom_err("%s must be a finite number", k->name);
  return 0;
}

int loom_config_validate(const loom_config *c) {
  for (size_t i = 0; i < loom_config_nkeys; i++)
    if (check_key(c, &loom_config_keys[i])) return loom_err_prefix("invalid config: ");
  if (check_ranges(c)) return loom_err_prefix("invalid config: ");
  return 0;
}
