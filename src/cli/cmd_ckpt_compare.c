/* `loom ckpt compare A B`: load the parameters of two checkpoints — each written by any
 * parallel layout — into the whole model and compare them tensor by tensor, e.g. to check
 * that two parallel strategies trained the same weights. Criterion per tensor (numpy.allclose
 * on the tensor's largest magnitude): max|a - b| <= atol + rtol * max|b|, with atol by default
 * rtol * (the largest |b| anywhere in the model). The floor keeps the measure from exploding
 * on tensors that stay near zero: attn.k.bias gets an exactly-zero gradient in exact
 * arithmetic (softmax ignores a constant added to every key), so AdamW moves it by rounding
 * noise alone (max |b| ~1e-6 after a few steps), differently in every layout; relative to its
 * own norm two equivalent runs differ by ~100%, relative to the model's scale by < 1e-6. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/checkpoint.h"
#include "loom/config.h"

static int load_full(const char *dir, const loom_model_spec *spec, loom_decoder **out) {
  if (loom_decoder_create(out, spec, 1, 1, false, false)) return LOOM_ERR;
  return loom_ckpt_load_params(dir, *out);
}

static void usage(FILE *o) {
  fprintf(o, "usage: loom ckpt compare CKPT_A CKPT_B [--rtol X] [--atol X] [--ignore SUFFIX]...\n\n"
             "Load both checkpoints (any parallel layout) into the whole model, using A's\n"
             "config.yaml for the model, and compare every tensor: it matches when\n"
             "  max|a - b| <= atol + rtol * max|b|      (numpy.allclose on the tensor's max)\n"
             "--rtol defaults to 1e-5; --atol to rtol * M, M the largest |b| in the whole\n"
             "model, so that a tensor that stays near zero (attn.k.bias: zero gradient in\n"
             "exact arithmetic, moved by rounding noise only) is judged at the model's scale,\n"
             "not its own. --rtol 0 (and no --atol) demands bitwise equality. Prints per\n"
             "tensor max|a - b|, max|b| and max|a - b| / (atol + rtol * max|b|) (> 1: beyond).\n"
             "Exit 0 when every tensor matches, 1 when one does not, 2 on bad input.\n"
             "--ignore skips tensors whose name ends with SUFFIX (repeatable).\n");
}

/* The parsed options (the parser's callbacks fill them). */
typedef struct {
  double rtol, atol; /* atol < 0: rtol * the model's largest |b| */
  const char *ignore[16];
  int n_ignore;
} compare_opts;

static int tolerance(const char *v, double *dst) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= 0)) return loom_err("takes a number >= 0, not '%s'", v);
  *dst = x;
  return 0;
}
static int take_rtol(const char *v, void *ctx) { return tolerance(v, &((compare_opts *)ctx)->rtol); }
static int take_atol(const char *v, void *ctx) { return tolerance(v, &((compare_opts *)ctx)->atol); }
static int take_ignore(const char *v, void *ctx) {
  compare_opts *c = ctx;
  if (c->n_ignore == 16) return loom_err("at most 16 suffixes");
  c->ignore[c->n_ignore++] = v;
  return 0;
}

int loom_cmd_ckpt_compare(int argc, char **argv) {
  compare_opts c = {.rtol = 1e-5, .atol = -1};
  const loom_cli_opt opts[] = {LOOM_OPT_EACH("--rtol", take_rtol), LOOM_OPT_EACH("--atol", take_atol),
                               LOOM_OPT_EACH("--ignore", take_ignore), {0}};
  loom_cli_parser p = {.command = "ckpt compare", .opts = opts, .ctx = &c};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  const char *dir_a = p.npos > 0 ? p.pos[0] : NULL, *dir_b = p.npos > 1 ? p.pos[1] : NULL;
  if (prc == LOOM_CLI_OK && p.npos != 2) {
    fprintf(stderr, "loom ckpt compare: takes two checkpoints, CKPT_A and CKPT_B (%d given)\n\n",
            p.npos);
    usage(stderr);
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return usage(stdout), 0;
  if (prc) return 2;
  double rtol = c.rtol, atol = c.atol;
  const char **ignore = c.ignore;
  int n_ignore = c.n_ignore;
  loom_config cfg;
  loom_config_defaults(&cfg);
  char *cpath = loom_sprintf("%s/config.yaml", dir_a);
  loom_model_spec spec;
  loom_decoder *a = NULL, *b = NULL;
  int rc = loom_config_load(&cfg, cpath);
  free(cpath);
  if (!rc) rc = loom_model_spec_from_config(&spec, &cfg.model);
  if (!rc) rc = load_full(dir_a, &spec, &a);
  if (!rc) rc = load_full(dir_b, &spec, &b);
  if (rc) {
    fprintf(stderr, "loom ckpt compare: %s\n", loom_errmsg());
    loom_decoder_free(a);
    loom_decoder_free(b);
    return 2;
  }
  double scale = 0; /* the largest |b| in the model */
  for (size_t j = 0; j < b->layout.total; j++) scale = fmax(scale, fabs((double)b->params[j]));
  if (atol < 0) atol = rtol * scale;
  printf("criterion per tensor: max|a - b| <= atol + rtol * max|b|; rtol %.3g, atol %.3g%s\n",
         rtol, atol, atol == rtol * scale ? " (rtol x the largest |b| in the model)" : "");
  printf("%-36s %12s %12s %10s\n", "tensor", "max|a-b|", "max|b|", "ratio");
  double worst = 0;
  const char *worst_name = "";
  int beyond = 0;
  for (int i = 0; i < a->layout.count; i++) {
    const loom_param *p = &a->layout.params[i];
    bool skip = false;
    for (int k = 0; k < n_ignore; k++) {
      size_t n = strlen(p->name), m = strlen(ignore[k]);
      skip |= n >= m && !strcmp(p->name + n - m, ignore[k]);
    }
    if (skip) continue;
    double diff = 0, ref = 0;
    for (size_t j = 0; j < p->numel; j++) {
      double x = a->params[p->offset + j], y = b->params[p->offset + j];
      diff = fmax(diff, fabs(x - y));
      if (x != y && !(fabs(x - y) >= 0)) diff = NAN; /* a NaN on either side */
      ref = fmax(ref, fabs(y));
    }
    double allowed = atol + rtol * ref;
    /* ratio > 1: beyond; with nothing allowed (bitwise), any difference is infinitely beyond */
    double ratio = isnan(diff) ? NAN : diff == 0 ? 0 : allowed > 0 ? diff / allowed : INFINITY;
    bool bad = !(diff <= allowed);
    beyond += bad;
    double r = isnan(ratio) ? INFINITY : ratio;
    if (r > worst || !worst_name[0]) worst = r, worst_name = p->name;
    printf("%-36s %12.3e %12.3e %10.3g%s\n", p->name, diff, ref, ratio, bad ? "  beyond" : "");
  }
  printf("worst: %s, max|a - b| at %.3g of what is allowed (rtol %.1e, atol %.1e); %d tensor%s "
         "beyond\n", worst_name[0] ? worst_name : "-", worst, rtol, atol, beyond,
         beyond == 1 ? "" : "s");
  loom_decoder_free(a);
  loom_decoder_free(b);
  return beyond ? 1 : 0;
}
