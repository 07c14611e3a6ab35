/* `loom ckpt grad-norms PATH`: per-tensor gradient norms of a checkpoint saved with
 * checkpoint.save_gradients, as a table (optionally sorted by norm) or JSON. Registered in
 * src/cli/cmd_ckpt.c's subcommand table. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/grad_norms.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom ckpt grad-norms PATH [--sort] [--json]\n\n"
          "Per-tensor L2 norms (and max |g|) of the gradients saved in a checkpoint written with\n"
          "checkpoint.save_gradients: true: PATH is the checkpoint directory (gradients.safetensors\n"
          "or gradients-r<rank>.safetensors, pieces joined into whole tensors) or one file.\n\n"
          "  --sort   largest norm first (default: parameter order)\n"
          "  --json   machine-readable output\n");
}

static int by_norm(const void *a, const void *b) {
  double x = ((const loom_grad_norm *)a)->l2, y = ((const loom_grad_norm *)b)->l2;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void print_json(const loom_grad_norms *g) {
  json_t *o = json_object(), *arr = json_array();
  for (int i = 0; i < g->count; i++) {
    const loom_grad_norm *t = &g->tensors[i];
    json_array_append_new(arr, json_pack("{s:s, s:I, s:o, s:o, s:I}", "name", t->name, "numel",
                                         (json_int_t)t->numel,
                                         "l2", isfinite(t->l2) ? json_real(t->l2) : json_null(),
                                         "max_abs", isfinite(t->max_abs) ? json_real(t->max_abs) : json_null(),
                                         "nonfinite", (json_int_t)t->nonfinite));
  }
  json_object_set_new(o, "step", json_integer(g->step));
  json_object_set_new(o, "files", json_integer(g->files));
  json_object_set_new(o, "total_l2", isfinite(g->total_l2) ? json_real(g->total_l2) : json_null());
  json_object_set_new(o, "tensors", arr);
  json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  printf("\n");
  json_decref(o);
}

static void print_table(const loom_grad_norms *g) {
  int w = 6;
  for (int i = 0; i < g->count; i++)
    if ((int)strlen(g->tensors[i].name) > w) w = (int)strlen(g->tensors[i].name);
  printf("%-*s  %12s  %14s  %14s\n", w, "tensor", "numel", "l2", "max_abs");
  for (int i = 0; i < g->count; i++) {
    const loom_grad_norm *t = &g->tensors[i];
    printf("%-*s  %12lld  %14.6e  %14.6e%s\n", w, t->name, (long long)t->numel, t->l2,
           t->max_abs, t->nonfinite ? "  (NaN/inf present)" : "");
  }
  printf("global norm %.6e over %d tensors (%d file%s", g->total_l2, g->count, g->files,
         g->files == 1 ? "" : "s");
  if (g->step >= 0) printf(", step %ld", g->step);
  printf(")\n");
}

int loom_cmd_ckpt_grad_norms(int argc, char **argv) {
  bool sort = false, as_json = false;
  const loom_cli_opt opts[] = {LOOM_OPT_FLAG("--sort", &sort), LOOM_OPT_FLAG("--json", &as_json),
                               {0}};
  loom_cli_parser p = {.command = "ckpt grad-norms", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  const char *path = p.npos ? p.pos[0] : NULL;
  if (prc == LOOM_CLI_OK && p.npos > 1) {
    fprintf(stderr, "loom ckpt grad-norms: unexpected argument '%s' (one PATH)\n\n", p.pos[1]);
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return usage(stdout), 0;
  if (prc) return usage(stderr), 1;
  if (!path) return fprintf(stderr, "loom ckpt grad-norms: missing PATH\n\n"), usage(stderr), 1;
  loom_grad_norms g;
  if (loom_grad_norms_read(path, &g)) {
    fprintf(stderr, "loom ckpt grad-norms: %s\n", loom_errmsg());
    return 1;
  }
  if (sort) qsort(g.tensors, (size_t)g.count, sizeof *g.tensors, by_norm);
  if (as_json) print_json(&g);
  else print_table(&g);
  loom_grad_norms_free(&g);
  return 0;
}
