/* `loom ckpt compare A B`: load the parameters of two checkpoints — each written by any
 * parallel layout — into the whole model and compare them tensor by tensor (relative norm
 * error), e.g. to check that two parallel strategies trained the same weights. */
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

typedef struct {
  double rtol;
  const char *ignore[16];
  int n_ignore;
} compare_args;

static int on_rtol(const char *v, void *ctx) {
  char *end;
  double x = strtod(v, &end);
  if (!v[0] || *end || !(x >= 0)) return loom_err("takes a number >= 0, not '%s'", v);
  ((compare_args *)ctx)->rtol = x;
  return 0;
}

static int on_ignore(const char *v, void *ctx) {
  compare_args *c = ctx;
  if (c->n_ignore == 16) return loom_err("at most 16 suffixes");
  c->ignore[c->n_ignore++] = v;
  return 0;
}

static void usage(FILE *o) {
  fprintf(o, "usage: loom ckpt compare CKPT_A CKPT_B [--rtol X] [--ignore SUFFIX]...\n\n"
             "Load both checkpoints (any parallel layout) into the whole model, using A's\n"
             "config.yaml for the model, and print the relative norm error ||a-b||/||a|| of\n"
             "every tensor. Exit 1 when one exceeds --rtol (default 1e-5). --ignore skips\n"
             "tensors whose name ends with SUFFIX (repeatable).\n");
}

int loom_cmd_ckpt_compare(int argc, char **argv) {
  compare_args c = {.rtol = 1e-5};
  const loom_cli_opt opts[] = {LOOM_OPT_EACH("--rtol", on_rtol),
                               LOOM_OPT_EACH("--ignore", on_ignore), {0}};
  loom_cli_parser p = {.command = "ckpt compare", .opts = opts, .ctx = &c};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  char *dirs[3] = {p.npos > 0 ? p.pos[0] : NULL, p.npos > 1 ? p.pos[1] : NULL,
                   p.npos > 2 ? p.pos[2] : NULL};
  int npos = p.npos;
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return usage(stdout), 0;
  if (prc) return 2;
  if (npos != 2) {
    if (npos > 2) fprintf(stderr, "loom ckpt compare: unexpected argument '%s'\n\n", dirs[2]);
    usage(stderr);
    return 2;
  }
  double rtol = c.rtol;
  const char **ignore = c.ignore;
  int n_ignore = c.n_ignore;
  loom_config cfg;
  loom_config_defaults(&cfg);
  char *cpath = loom_sprintf("%s/config.yaml", dirs[0]);
  loom_model_spec spec;
  loom_decoder *a = NULL, *b = NULL;
  int rc = loom_config_load(&cfg, cpath);
  free(cpath);
  if (!rc) rc = loom_model_spec_from_config(&spec, &cfg.model);
  if (!rc) rc = load_full(dirs[0], &spec, &a);
  if (!rc) rc = load_full(dirs[1], &spec, &b);
  if (rc) {
    fprintf(stderr, "loom ckpt compare: %s\n", loom_errmsg());
    loom_decoder_free(a);
    loom_decoder_free(b);
    return 1;
  }
  double worst = 0;
  const char *worst_name = "";
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
      diff += (x - y) * (x - y);
      ref += x * x;
    }
    double rel = ref > 0 ? sqrt(diff / ref) : sqrt(diff);
    if (rel > worst) worst = rel, worst_name = p->name;
    printf("%-36s %.3e%s\n", p->name, rel, rel > rtol ? "  > rtol" : "");
  }
  printf("worst: %s %.3e (rtol %.1e)\n", worst_name, worst, rtol);
  loom_decoder_free(a);
  loom_decoder_free(b);
  return worst > rtol ? 1 : 0;
}
