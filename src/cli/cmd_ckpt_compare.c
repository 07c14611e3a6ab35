/* `loom ckpt compare A B`: load the parameters of two checkpoints — each written by any
 * parallel layout — into the whole model and compare them tensor by tensor (relative norm
 * error), e.g. to check that two parallel strategies trained the same weights. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "loom/checkpoint.h"
#include "loom/config.h"

static int load_full(const char *dir, const loom_model_spec *spec, loom_decoder **out) {
  if (loom_decoder_create(out, spec, 1, 1, false, false)) return LOOM_ERR;
  return loom_ckpt_load_params(dir, *out);
}

int loom_cmd_ckpt_compare(int argc, char **argv) {
  if (loom_cli_wants_help(argc, argv) || argc < 3) {
    FILE *o = argc < 3 && !loom_cli_wants_help(argc, argv) ? stderr : stdout;
    fprintf(o, "usage: loom ckpt compare CKPT_A CKPT_B [--rtol X] [--ignore SUFFIX]...\n\n"
               "Load both checkpoints (any parallel layout) into the whole model, using A's\n"
               "config.yaml for the model, and print the relative norm error ||a-b||/||a|| of\n"
               "every tensor. Exit 1 when one exceeds --rtol (default 1e-5). --ignore skips\n"
               "tensors whose name ends with SUFFIX (repeatable).\n");
    return o == stdout ? 0 : 2;
  }
  double rtol = 1e-5;
  const char *ignore[16];
  int n_ignore = 0;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--rtol") && i + 1 < argc) rtol = atof(argv[++i]);
    else if (!strcmp(argv[i], "--ignore") && i + 1 < argc && n_ignore < 16) ignore[n_ignore++] = argv[++i];
    else {
      static const char *const known[] = {"--rtol", "--ignore", "--help", NULL};
      fprintf(stderr, "loom ckpt compare: unknown argument '%s'%s (see --help)\n", argv[i],
              loom_cli_did_you_mean(argv[i], known));
      return 2;
    }
  }
  loom_config cfg;
  loom_config_defaults(&cfg);
  char *cpath = loom_sprintf("%s/config.yaml", argv[1]);
  loom_model_spec spec;
  loom_decoder *a = NULL, *b = NULL;
  int rc = loom_config_load(&cfg, cpath);
  free(cpath);
  if (!rc) rc = loom_model_spec_from_config(&spec, &cfg.model);
  if (!rc) rc = load_full(argv[1], &spec, &a);
  if (!rc) rc = load_full(argv[2], &spec, &b);
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
