/* `loom ckpt inspect DIR` (default view): every tensor of a checkpoint once, with its global
 * shape, dtype and statistics, however many ranks wrote it in pieces; the model's parameter
 * count; AdamW moments and gradients counted apart from the parameters; the COMPLETE
 * marker's verdict and the layout that wrote the files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cmd_ckpt_view.h"
#include "loom/checkpoint.h"
#include "loom/ckpt_view.h"
#include "loom/config.h"
#include "loom/core.h"
#include "loom/model.h"

void loom_ckpt_format_scaled(double n, const char *const *units, double base, char *buf,
                             size_t cap) {
  int u = 0;
  while (n >= base && units[u + 1]) {
    n /= base;
    u++;
  }
  if (u == 0) buf[0] = 0;
  else snprintf(buf, cap, " (%.3g%s)", n, units[u]);
}

static const char *const count_units[] = {"", "K", "M", "B", "T", NULL};
static const char *const byte_units[] = {"", " KiB", " MiB", " GiB", " TiB", NULL};

/* ---- what the directory says about itself ------------------------------------------------ */

typedef struct {
  int marker;    /* 1: COMPLETE checks out, 0: no marker */
  long step;     /* the marker's step */
  json_t *index; /* index.json or NULL */
  int vocab;     /* the model's vocabulary (config.yaml), or 0 when unknown */
} dir_facts;

/* The vocabulary of the model in dir/config.yaml (presets resolved), or 0. */
static int config_vocab(const char *dir) {
  char *path = loom_sprintf("%s/config.yaml", dir);
  loom_config cfg;
  loom_config_defaults(&cfg);
  loom_model_spec spec;
  int vocab = loom_path_exists(path) && loom_config_load(&cfg, path) == 0 &&
                      loom_model_spec_from_config(&spec, &cfg.model) == 0
                  ? spec.vocab_size
                  : 0;
  loom_err_clear(); /* a config this loom cannot read only hides the padding */
  free(path);
  return vocab;
}

/* Elements of the vocabulary padding rows (rows of embed.weight / lm_head.weight past the
 * model's vocabulary), stored but not parameters of the model. */
static int64_t vocab_padding(const loom_ckpt_view *v, int vocab) {
  int64_t pad = 0;
  const loom_ckpt_group *g = &v->group[LOOM_CKPT_PARAMS];
  for (int i = 0; vocab > 0 && i < g->n; i++) {
    const loom_ckpt_tensor *t = &g->t[i];
    bool vocab_rows = !strcmp(t->name, "embed.weight") || !strcmp(t->name, "lm_head.weight");
    if (vocab_rows && t->ndim == 2 && t->shape[0] > vocab)
      pad += (t->shape[0] - vocab) * t->shape[1];
  }
  return pad;
}

static int read_facts(const char *dir, dir_facts *f) {
  memset(f, 0, sizeof *f);
  char *marker = loom_sprintf("%s/" LOOM_CKPT_MARKER, dir);
  bool marked = loom_path_exists(marker);
  free(marker);
  if (marked) {
    if (loom_ckpt_check_readable(dir)) return LOOM_ERR; /* names the checkpoint to use */
    loom_ckpt_check_complete(dir, &f->step);
    f->marker = 1;
  }
  char *index = loom_sprintf("%s/index.json", dir);
  f->index = loom_path_exists(index) ? json_load_file(index, 0, NULL) : NULL;
  free(index);
  f->vocab = config_vocab(dir);
  return 0;
}

/* "2 ranks: pp 1 x dp 1 x cp 1 x sp 1 x tp 2, zero 0" from index.json, else "one process". */
static void layout_text(const dir_facts *f, char *buf, size_t cap) {
  json_t *m = f->index ? json_object_get(f->index, "mesh") : NULL;
  if (!json_is_object(m)) {
    snprintf(buf, cap, "one process");
    return;
  }
  long long w = json_integer_value(json_object_get(f->index, "world"));
#define AX(k) json_integer_value(json_object_get(m, k))
  snprintf(buf, cap, "%lld rank%s: pp %lld x dp %lld x cp %lld x sp %lld x tp %lld, zero %lld", w,
           w == 1 ? "" : "s", AX("pp"), AX("dp"), AX("cp"), AX("sp"), AX("tp"), AX("zero"));
#undef AX
}

/* ---- text ---------------------------------------------------------------------------------- */

static void shape_text(const loom_ckpt_tensor *t, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < t->ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void num_text(double x, bool empty, char *buf, size_t cap) {
  snprintf(buf, cap, empty ? "-" : "%.6g", x);
}

static int name_width(const loom_ckpt_group *g) {
  int w = 4;
  for (int i = 0; i < g->n; i++)
    if ((int)strlen(g->t[i].name) > w) w = (int)strlen(g->t[i].name);
  return w > 60 ? 60 : w;
}

static void print_row(const loom_ckpt_tensor *t, int width) {
  char shape[160], l2[32], lo[32], hi[32];
  shape_text(t, shape, sizeof shape);
  num_text(t->l2, t->held == 0, l2, sizeof l2);
  num_text(t->min, t->held == 0, lo, sizeof lo);
  num_text(t->max, t->held == 0, hi, sizeof hi);
  printf("%-*s  %-5s  %-18s %12lld  %-12s %-12s %s\n", width, t->name,
         t->mixed_dtype ? "mixed" : loom_dtype_name(t->dtype), shape, (long long)t->numel, l2, lo,
         hi);
  if (t->nonfinite)
    printf("%-*s  warning: %lld NaN/inf values\n", width, "", (long long)t->nonfinite);
  if (t->held != t->numel)
    printf("%-*s  warning: its pieces hold %lld of its %lld elements\n", width, "",
           (long long)t->held, (long long)t->numel);
}

/* One line for a group counted apart from the parameters: values, dtype, norm. */
static void print_group_line(const loom_ckpt_view *v, int g, const char *label) {
  const loom_ckpt_group *gr = &v->group[g];
  if (gr->n == 0) return;
  double sumsq = 0;
  bool mixed = false;
  for (int i = 0; i < gr->n; i++) {
    sumsq += gr->t[i].sumsq;
    mixed |= gr->t[i].mixed_dtype || gr->t[i].dtype != gr->t[0].dtype;
  }
  char scaled[32];
  loom_ckpt_format_scaled((double)v->count[g], count_units, 1000.0, scaled, sizeof scaled);
  printf("  %-11s %lld values%s in %d tensors, %s, l2 %.6g\n", label, (long long)v->count[g],
         scaled, gr->n, mixed ? "mixed dtypes" : loom_dtype_name(gr->t[0].dtype), sqrt(sumsq));
}

static void print_text(const char *dir, const loom_ckpt_view *v, const dir_facts *f,
                       json_t *state) {
  char layout[160], scaled[32], bytes[32];
  layout_text(f, layout, sizeof layout);
  printf("checkpoint: %s\n", dir);
  if (f->marker)
    printf("complete: yes (step %ld; every file %s lists is present with its size)\n", f->step,
           LOOM_CKPT_MARKER);
  else
    printf("complete: unknown (no %s marker: `loom ckpt import` output, or a save that was "
           "interrupted)\n",
           LOOM_CKPT_MARKER);
  printf("written by: %s; %d file%s merged (--pieces shows each file's pieces)\n\n", layout,
         v->nfiles, v->nfiles == 1 ? "" : "s");
  const loom_ckpt_group *p = &v->group[LOOM_CKPT_PARAMS];
  int w = name_width(p);
  printf("%-*s  %-5s  %-18s %12s  %-12s %-12s %s\n", w, "name", "dtype", "shape", "numel", "l2",
         "min", "max");
  for (int i = 0; i < p->n; i++) print_row(&p->t[i], w);
  int64_t pad = vocab_padding(v, f->vocab), model = v->count[LOOM_CKPT_PARAMS] - pad;
  loom_ckpt_format_scaled((double)model, count_units, 1000.0, scaled, sizeof scaled);
  printf("\nparameters: %lld%s in %d tensors", (long long)model, scaled, p->n);
  if (pad)
    printf(", %lld stored with the vocabulary's padding rows (%d tokens)",
           (long long)v->count[LOOM_CKPT_PARAMS], f->vocab);
  printf("\n");
  if (v->group[LOOM_CKPT_EXP_AVG].n + v->group[LOOM_CKPT_EXP_AVG_SQ].n +
      v->group[LOOM_CKPT_OPT_OTHER].n)
    printf("optimizer state (not parameters):\n");
  print_group_line(v, LOOM_CKPT_EXP_AVG, "exp_avg");
  print_group_line(v, LOOM_CKPT_EXP_AVG_SQ, "exp_avg_sq");
  print_group_line(v, LOOM_CKPT_OPT_OTHER, "other");
  if (v->group[LOOM_CKPT_GRADS].n) printf("saved gradients:\n");
  print_group_line(v, LOOM_CKPT_GRADS, "gradients");
  loom_ckpt_format_scaled((double)v->bytes, byte_units, 1024.0, bytes, sizeof bytes);
  printf("all files: %d, %lld tensor bytes%s\n", v->nfiles, (long long)v->bytes, bytes);
  if (state) {
    char *s = json_dumps(state, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("trainer_state.json:\n%s\n", s);
    free(s);
  }
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static json_t *num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *tensor_json(const loom_ckpt_tensor *t) {
  json_t *shape = json_array();
  for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(t->name));
  json_object_set_new(o, "dtype",
                      json_string(t->mixed_dtype ? "mixed" : loom_dtype_name(t->dtype)));
  json_object_set_new(o, "shape", shape);
  json_object_set_new(o, "numel", json_integer(t->numel));
  json_object_set_new(o, "held", json_integer(t->held));
  json_object_set_new(o, "pieces", json_integer(t->pieces));
  json_object_set_new(o, "l2", num_or_null(t->l2));
  json_object_set_new(o, "min", num_or_null(t->min));
  json_object_set_new(o, "max", num_or_null(t->max));
  json_object_set_new(o, "nonfinite", json_integer(t->nonfinite));
  return o;
}

static json_t *group_json(const loom_ckpt_view *v, int g) {
  json_t *list = json_array();
  for (int i = 0; i < v->group[g].n; i++)
    json_array_append_new(list, tensor_json(&v->group[g].t[i]));
  return json_pack("{s:I, s:i, s:o}", "values", (json_int_t)v->count[g], "tensor_count",
                   v->group[g].n, "tensors", list);
}

static void print_json(const char *dir, const loom_ckpt_view *v, const dir_facts *f,
                       json_t *state) {
  json_t *doc = json_object(), *files = json_array(), *opt = json_object();
  json_object_set_new(doc, "path", json_string(dir));
  json_object_set_new(doc, "complete", f->marker ? json_true() : json_null());
  if (f->marker) json_object_set_new(doc, "step", json_integer(f->step));
  if (f->index && json_object_get(f->index, "mesh"))
    json_object_set(doc, "mesh", json_object_get(f->index, "mesh"));
  json_t *params = group_json(v, LOOM_CKPT_PARAMS);
  json_object_set(doc, "tensors", json_object_get(params, "tensors"));
  json_decref(params);
  json_object_set_new(doc, "tensor_count", json_integer(v->group[LOOM_CKPT_PARAMS].n));
  int64_t pad = vocab_padding(v, f->vocab);
  json_object_set_new(doc, "param_count", json_integer(v->count[LOOM_CKPT_PARAMS] - pad));
  json_object_set_new(doc, "stored_count", json_integer(v->count[LOOM_CKPT_PARAMS]));
  if (f->vocab) json_object_set_new(doc, "vocab_size", json_integer(f->vocab));
  for (int g = LOOM_CKPT_EXP_AVG; g <= LOOM_CKPT_OPT_OTHER; g++)
    if (v->group[g].n) json_object_set_new(opt, loom_ckpt_group_name(g), group_json(v, g));
  json_object_set_new(doc, "optimizer", opt);
  if (v->group[LOOM_CKPT_GRADS].n)
    json_object_set_new(doc, "gradients", group_json(v, LOOM_CKPT_GRADS));
  for (int i = 0; i < v->nfiles; i++)
    json_array_append_new(files, json_pack("{s:s}", "path", v->files[i]));
  json_object_set_new(doc, "files", files);
  json_object_set_new(doc, "bytes", json_integer(v->bytes));
  if (state) json_object_set(doc, "trainer_state", state);
  json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  printf("\n");
  json_decref(doc);
}

/* ---- the command's view -------------------------------------------------------------------- */

/* A tensor whose distinct pieces do not hold all its elements: a file is missing. */
static int check_coverage(const char *dir, const loom_ckpt_view *v) {
  for (int g = 0; g < LOOM_CKPT_GROUPS; g++)
    for (int i = 0; i < v->group[g].n; i++) {
      const loom_ckpt_tensor *t = &v->group[g].t[i];
      if (t->held != t->numel)
        return loom_err("checkpoint '%s': the pieces of %s tensor '%s' hold %lld of its %lld "
                        "elements; a rank's file is missing or from another checkpoint",
                        dir, loom_ckpt_group_name(g), t->name, (long long)t->held,
                        (long long)t->numel);
    }
  return 0;
}

int loom_ckpt_print_view(const char *dir, json_t *state, bool as_json) {
  dir_facts f;
  if (read_facts(dir, &f)) return LOOM_ERR;
  loom_ckpt_view v;
  int rc = loom_ckpt_view_read(dir, &v);
  if (!rc) {
    if (as_json) print_json(dir, &v, &f, state);
    else print_text(dir, &v, &f, state);
    rc = check_coverage(dir, &v);
    loom_ckpt_view_free(&v);
  }
  json_decref(f.index);
  return rc;
}
