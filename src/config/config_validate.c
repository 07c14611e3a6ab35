/* loom_config_validate: range checks on numeric keys (a table of rules), plus the checks the
 * typed loader already guarantees but a config built in code might break (enum values,
 * terminated strings, finite floats). Errors name the key, its value and the valid range. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
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
    AT_LEAST("training.steps", 0), /* 0: only the initial weights (evaluate, save) */
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
    AT_LEAST("training.eval_every", 0),
    AT_LEAST("training.eval_batches", 0),
    {"data.val_fraction", 0, 1, false, true},
    AT_LEAST("checkpoint.every", 0),
    AT_LEAST("checkpoint.keep_last", 0),
    AT_LEAST("run.max_restarts", 0),
    AT_LEAST("training.global_batch_size", 0),
    AT_LEAST("parallel.dp", 1),
    AT_LEAST("parallel.tp", 1),
    AT_LEAST("parallel.pp", 1),
    AT_LEAST("parallel.sp", 1),
    AT_LEAST("parallel.cp", 1),
    {"parallel.zero", 0, 3, false, false},
    AT_LEAST("parallel.vpp", 1),
    ABOVE("parallel.bucket_mb", 0),
    ABOVE("parallel.timeout_s", 0),
    AT_LEAST("vision.parallel.dp", 0), /* 0: follow the text decoder */
    AT_LEAST("vision.parallel.tp", 0),
    AT_LEAST("vision.parallel.sp", 0),
    AT_LEAST("vision.parallel.cp", 0),
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

/* Integer keys whose consumers hold them in a long (or wider): step counts compared with the
 * long step counter, and the seed (cast to uint64_t). Every other integer key ends up in an
 * int (model dims, batch sizes, mesh axes, pixel counts), so it must fit in one: a value
 * past INT_MAX would otherwise be truncated by the (int) conversion and silently change. */
static const char *const long_keys[] = {"run.seed",      "training.steps",
                                        "training.warmup_steps", "training.log_every",
                                        "checkpoint.every", "checkpoint.keep_last", NULL};

static bool is_long_key(const char *name) {
  for (int i = 0; long_keys[i]; i++)
    if (!strcmp(long_keys[i], name)) return true;
  return false;
}

static int check_int_width(const loom_config *c, const loom_config_key *k) {
  if (k->type != LOOM_KEY_INT || is_long_key(k->name)) return 0;
  long v;
  memcpy(&v, (const char *)c + k->offset, sizeof v);
  if (v >= INT_MIN && v <= INT_MAX) return 0;
  return loom_err("%s = %ld is out of range: it must be between %d and %d (loom holds it in a "
                  "32-bit int)", k->name, v, INT_MIN, INT_MAX);
}

/* a * b * ... of positive longs, saturating at LONG_MAX. */
static long product_sat(const long *v, int n) {
  long p = 1;
  for (int i = 0; i < n; i++)
    if (v[i] > 0 && __builtin_mul_overflow(p, v[i], &p)) return LONG_MAX;
  return p;
}

/* Products that are held in an int: the rank count of the mesh and the pipeline chunks. */
static int check_products(const loom_config *c) {
  const loom_config_parallel *q = &c->parallel;
  long mesh[5] = {q->dp, q->tp, q->pp, q->sp, q->cp}, chunks[2] = {q->pp, q->vpp};
  long ranks = product_sat(mesh, 5), nchunks = product_sat(chunks, 2);
  if (ranks > INT_MAX)
    return loom_err("parallel.dp*tp*pp*sp*cp = %ld*%ld*%ld*%ld*%ld is out of range: the number "
                    "of ranks must be at most %d", q->dp, q->tp, q->pp, q->sp, q->cp, INT_MAX);
  if (nchunks > INT_MAX)
    return loom_err("parallel.pp*vpp = %ld*%ld is out of range: the number of pipeline chunks "
                    "must be at most %d", q->pp, q->vpp, INT_MAX);
  return 0;
}

static int check_ranges(const loom_config *c) {
  for (size_t i = 0; i < loom_config_nkeys; i++)
    if (check_int_width(c, &loom_config_keys[i])) return -1;
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    const loom_config_key *k = loom_config_key_find(rules[i].key);
    LOOM_ASSERT(k && (k->type == LOOM_KEY_INT || k->type == LOOM_KEY_FLOAT));
    if (!in_range(&rules[i], numeric_value(c, k))) return range_err(c, k, &rules[i]);
  }
  return check_products(c);
}

/* Checks on every key that the loader guarantees but code could break. */
static int check_key(const loom_config *c, const loom_config_key *k) {
  const char *f = (const char *)c + k->offset;
  if (k->type == LOOM_KEY_STRING || k->type == LOOM_KEY_ENUM) {
    if (!memchr(f, 0, k->size)) return loom_err("%s is not a terminated string", k->name);
    size_t bad = loom_yaml_utf8_error(f, strlen(f));
    if (bad)
      return loom_err("%s is not UTF-8 text (byte %zu, 0x%02x); config strings must be UTF-8",
                      k->name, bad, (unsigned)(unsigned char)f[bad - 1]);
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

/* Validation data is one thing: its own shards or a held-out fraction of token shards. */
static int check_val_data(const loom_config *c) {
  if (c->data.val_shards[0] && c->data.val_fraction > 0)
    return loom_err("data.val_shards ('%s') and data.val_fraction (%g) are both set; the "
                    "validation data is one or the other: unset one of them",
                    c->data.val_shards, c->data.val_fraction);
  if (!strcmp(c->data.format, "vqa") && c->data.val_fraction > 0)
    return loom_err("data.val_fraction holds out a fraction of token shards; vqa data is "
                    "validated on the val split of data.vqa_path or on data.val_shards: set "
                    "data.val_fraction=0");
  return 0;
}

/* Precision policy: a bf16 parameter is a bf16 matmul input (PyTorch's model.to(bfloat16)
 * computes in bf16), so bf16 storage needs bf16 compute; fp32 storage with bf16 compute is
 * the mixed-precision case (fp32 master weights). */
static int check_precision(const loom_config *c) {
  const char *vparam = c->vision.param_dtype[0] ? c->vision.param_dtype : c->training.param_dtype;
  if (!strcmp(c->training.dtype, "fp32") && !strcmp(c->training.param_dtype, "bf16"))
    return loom_err("training.param_dtype = bf16 needs training.dtype = bf16 (bf16 parameters "
                    "are bf16 matmul inputs, as with model.to(torch.bfloat16)); set "
                    "training.dtype=bf16, or training.param_dtype=fp32 for fp32 weights");
  if (!strcmp(c->training.dtype, "fp32") && !strcmp(vparam, "bf16"))
    return loom_err("vision.param_dtype = bf16 needs training.dtype = bf16 (bf16 parameters are "
                    "bf16 matmul inputs); set training.dtype=bf16, or vision.param_dtype=fp32");
  return 0;
}

int loom_config_validate(const loom_config *c) {
  for (size_t i = 0; i < loom_config_nkeys; i++)
    if (check_key(c, &loom_config_keys[i])) return loom_err_prefix("invalid config: ");
  if (check_ranges(c) || check_val_data(c) || check_precision(c))
    return loom_err_prefix("invalid config: ");
  loom_skip_steps skip; /* training.skip_steps: every item a step or a range */
  if (loom_skip_steps_parse(c->training.skip_steps, &skip))
    return loom_err_prefix("invalid config: ");
  loom_skip_steps_free(&skip);
  return 0;
}

int loom_config_resolve_grad_accum(loom_config *c) {
  loom_config_training *t = &c->training;
  if (t->global_batch_size <= 0) return 0;
  long per = t->micro_batch_size * c->parallel.dp; /* sequences per micro-batch, all replicas */
  if (per <= 0 || t->global_batch_size % per)
    return loom_err("invalid config: training.global_batch_size = %ld is not a multiple of "
                    "training.micro_batch_size x parallel.dp = %ld x %ld = %ld (remainder %ld); "
                    "change one of them", t->global_batch_size, t->micro_batch_size,
                    c->parallel.dp, per, per > 0 ? t->global_batch_size % per : 0L);
  long ga = t->global_batch_size / per;
  if (t->grad_accum != 1 && t->grad_accum != ga)
    return loom_err("invalid config: training.global_batch_size = %ld gives grad_accum = %ld / "
                    "(micro_batch_size %ld x dp %ld) = %ld, but training.grad_accum = %ld; set "
                    "only one of them (training.grad_accum=1 lets global_batch_size decide)",
                    t->global_batch_size, t->global_batch_size, t->micro_batch_size,
                    c->parallel.dp, ga, t->grad_accum);
  t->grad_accum = ga;
  return 0;
}
