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
#include "loom/checkpoint.h"
#include "loom/config.h"

static int load_full(const char *dir, const loom_model_spec *spec, loom_decoder **out) {
  if (loom_decoder_create(out, spec, 1, 1, false, false)) return LOOM_ERR;
  return loom_ckpt_load_params(dir, *out);
}

int loom_cmd_ckpt_compare(int argc, char **argv) {
  if (loom_cli_wants_help(argc, argv) || argc < 3) {
    FILE *o = argc < 3 && !loom_cli_wants_help(argc, argv) ? stderr : stdout;
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
    return o == stdout ? 0 : 2;
  }
  double rtol = 1e-5, atol = -1; /* atol < 0: rtol * the model's largest |b| */
  const char *ignore[16];
  int n_ignore = 0;
  for (int i = 3; i < argc; i++) {
    if ((!strcmp(argv[i], "--rtol") || !strcmp(argv[i], "--atol")) && i + 1 < argc) {
      char *end;
      double v = strtod(argv[i + 1], &end);
      if (*end || !(v >= 0)) {
        fprintf(stderr, "loom ckpt compare: %s takes a number >= 0, not '%s'\n", argv[i],
                argv[i + 1]);
        return 2;
      }
      *(argv[i][2] == 'r' ? &rtol : &atol) = v;
      i++;
    } else if (!strcmp(argv[i], "--ignore") && i + 1 < argc && n_ignore < 16) ignore[n_ignore++] = argv[++i];
    else {
      static const char *const known[] = {"--rtol", "--atol", "--ignore", "--help", NULL};
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
