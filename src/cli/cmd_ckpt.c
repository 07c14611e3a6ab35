/* loom ckpt: checkpoint tools. Subcommands live in the `subcommands` table below; each takes
 * argv after "ckpt" (argv[0] is the subcommand name) and returns the exit code.
 *   inspect PATH [--pieces] [--json]
 *                 a checkpoint directory: every tensor once with its global shape, dtype and
 *                 norms, the parameter count, optimizer moments and gradients apart
 *                 (src/cli/cmd_ckpt_view.c); --pieces, or a .safetensors file: each file's
 *                 entries (the pieces ranks wrote), dtypes, shapes, norms and metadata.
 *   export, import          Hugging Face checkpoints (src/cli/cmd_ckpt_hf.c, include/loom/hf.h). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cmd_ckpt_view.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "loom/checkpoint.h"
#include "loom/core.h"
#include "loom/grad_norms.h"
#include "loom/hf.h"
#include "loom/safetensors.h"

/* ---- inspect: collecting files ---------------------------------------------------------- */

typedef struct {
  char **paths;
  int n;
} path_list;

static void path_list_free(path_list *l) {
  for (int i = 0; i < l->n; i++) free(l->paths[i]);
  free(l->paths);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* Every DIR/<name>.safetensors, sorted by name. */
static int list_safetensors(const char *dir, path_list *out) {
  DIR *d = opendir(dir);
  if (!d) return loom_err("cannot open directory '%s': %s", dir, strerror(errno));
  struct dirent *e;
  int cap = 0;
  while ((e = readdir(d))) {
    if (!has_suffix(e->d_name, ".safetensors")) continue;
    if (out->n == cap) {
      cap = cap ? 2 * cap : 8;
      out->paths = loom_realloc(out->paths, (size_t)cap, sizeof *out->paths);
    }
    out->paths[out->n++] = loom_sprintf("%s%s%s", dir, has_suffix(dir, "/") ? "" : "/", e->d_name);
  }
  closedir(d);
  if (out->n == 0)
    return loom_err(
        "no *.safetensors file in directory '%s'; give a checkpoint directory or a "
        ".safetensors file",
        dir);
  qsort(out->paths, (size_t)out->n, sizeof *out->paths, cmp_str);
  return 0;
}

/* trainer_state.json of a checkpoint directory, or NULL (no error) when there is none. */
static int load_trainer_state(const char *dir, json_t **out) {
  *out = NULL;
  char *p = loom_sprintf("%s/trainer_state.json", dir);
  int rc = 0;
  if (loom_path_exists(p)) {
    json_error_t je;
    *out = json_load_file(p, 0, &je);
    if (!*out)
      rc = loom_err("'%s' is not valid JSON (%s, line %d); the checkpoint may be incomplete", p,
                    je.text, je.line);
  }
  free(p);
  return rc;
}

/* ---- inspect: one file as JSON ---------------------------------------------------------- */

static json_t *num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *tensor_json(const loom_st_file *f, int i) {
  loom_st_stats s;
  loom_st_tensor_stats(f, i, &s);
  json_t *shape = json_array();
  for (int d = 0; d < loom_st_ndim(f, i); d++)
    json_array_append_new(shape, json_integer(loom_st_shape(f, i)[d]));
  json_t *t = json_object();
  json_object_set_new(t, "name", json_string(loom_st_name(f, i)));
  json_object_set_new(t, "dtype", json_string(loom_dtype_name(loom_st_dtype(f, i))));
  json_object_set_new(t, "shape", shape);
  json_object_set_new(t, "numel", json_integer(s.numel));
  json_object_set_new(t, "nbytes", json_integer((json_int_t)loom_st_nbytes(f, i)));
  json_object_set_new(t, "l2", num_or_null(s.l2));
  json_object_set_new(t, "min", num_or_null(s.min));
  json_object_set_new(t, "max", num_or_null(s.max));
  json_object_set_new(t, "nonfinite", json_integer(s.nonfinite));
  return t;
}

typedef struct {
  int64_t tensors, params, bytes;
} totals;

static void add_totals(const loom_st_file *f, totals *t) {
  for (int i = 0; i < loom_st_count(f); i++) {
    t->tensors++;
    t->params += loom_st_numel(f, i);
    t->bytes += (int64_t)loom_st_nbytes(f, i);
  }
}

static void set_totals_json(json_t *o, const totals *t) {
  json_object_set_new(o, "tensor_count", json_integer(t->tensors));
  json_object_set_new(o, "param_count", json_integer(t->params));
  json_object_set_new(o, "bytes", json_integer(t->bytes));
}

static json_t *file_json(const loom_st_file *f) {
  json_t *o = json_object(), *meta = json_object(), *tensors = json_array();
  for (int i = 0; i < loom_st_metadata_count(f); i++)
    json_object_set_new(meta, loom_st_metadata_key(f, i),
                        json_string(loom_st_metadata_value(f, i)));
  for (int i = 0; i < loom_st_count(f); i++) json_array_append_new(tensors, tensor_json(f, i));
  totals t = {0};
  add_totals(f, &t);
  json_object_set_new(o, "path", json_string(loom_st_path(f)));
  json_object_set_new(o, "metadata", meta);
  json_object_set_new(o, "tensors", tensors);
  set_totals_json(o, &t);
  return o;
}

/* ---- inspect: one file as text ---------------------------------------------------------- */

static void format_shape(const loom_st_file *f, int i, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < loom_st_ndim(f, i) && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "",
                          (long long)loom_st_shape(f, i)[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* A statistic, or "-" when the tensor is empty (NaN and inf print as such). */
static void format_num(double x, int64_t numel, char *buf, size_t cap) {
  if (numel == 0)
    snprintf(buf, cap, "-");
  else
    snprintf(buf, cap, "%.6g", x);
}

static void print_totals(const totals *t) {
  static const char *const count_units[] = {"", "K", "M", "B", "T", NULL};
  static const char *const byte_units[] = {"", " KiB", " MiB", " GiB", " TiB", NULL};
  char params[32], bytes[32];
  loom_ckpt_format_scaled((double)t->params, count_units, 1000.0, params, sizeof params);
  loom_ckpt_format_scaled((double)t->bytes, byte_units, 1024.0, bytes, sizeof bytes);
  printf("tensors: %lld   elements: %lld%s   bytes: %lld%s\n", (long long)t->tensors,
         (long long)t->params, params, (long long)t->bytes, bytes);
}

static int name_width(const loom_st_file *f) {
  int w = 4;
  for (int i = 0; i < loom_st_count(f); i++) {
    int n = (int)strlen(loom_st_name(f, i));
    if (n > w) w = n;
  }
  return w > 60 ? 60 : w;
}

/* "embed.weight[256:512, :] of [512, 128]" (a tensor-parallel slice), with ", elements
 * 0:16384" when the entry holds part of the slice (a ZeRO partition); "" for an entry without
 * a description (a whole tensor under its own name). numel: the entry's elements. */
static void piece_text(json_t *d, int64_t numel, char *buf, size_t cap) {
  buf[0] = 0;
  if (!d) return;
#define GET(k, i) (long long)json_integer_value(json_array_get(json_object_get(d, k), i))
  long long g0 = GET("gshape", 0), g1 = GET("gshape", 1), l0 = GET("lshape", 0),
            l1 = GET("lshape", 1);
#undef GET
  long long dim = json_integer_value(json_object_get(d, "split_dim"));
  long long at = json_integer_value(json_object_get(d, "split_start"));
  long long begin = json_integer_value(json_object_get(d, "begin"));
  char slice[96] = "";
  if (dim == 0 && g1 == 0)
    snprintf(slice, sizeof slice, "[%lld:%lld]", at, at + l0);
  else if (dim == 0)
    snprintf(slice, sizeof slice, "[%lld:%lld, :]", at, at + l0);
  else if (dim == 1)
    snprintf(slice, sizeof slice, "[:, %lld:%lld]", at, at + l1);
  char global[64];
  if (g1 == 0)
    snprintf(global, sizeof global, "[%lld]", g0);
  else
    snprintf(global, sizeof global, "[%lld, %lld]", g0, g1);
  int n = snprintf(buf, cap, " %s%s of %s", json_string_value(json_object_get(d, "tensor")),
                   slice, global);
  if (n > 0 && (size_t)n < cap && (begin > 0 || numel != l0 * (l1 ? l1 : 1)))
    snprintf(buf + n, cap - (size_t)n, ", elements %lld:%lld", begin, begin + (long long)numel);
}

static void print_tensor_row(const loom_st_file *f, int i, int width, json_t *pieces) {
  loom_st_stats s;
  loom_st_tensor_stats(f, i, &s);
  char shape[160], l2[32], lo[32], hi[32], piece[320];
  format_shape(f, i, shape, sizeof shape);
  format_num(s.l2, s.numel, l2, sizeof l2);
  format_num(s.min, s.numel, lo, sizeof lo);
  format_num(s.max, s.numel, hi, sizeof hi);
  piece_text(pieces ? json_object_get(pieces, loom_st_name(f, i)) : NULL, s.numel, piece,
             sizeof piece);
  printf("%-*s  %-5s  %-18s %12lld  %-12s %-12s %-12s%s\n", width, loom_st_name(f, i),
         loom_dtype_name(loom_st_dtype(f, i)), shape, (long long)s.numel, l2, lo, hi, piece);
  if (s.nonfinite)
    printf("%-*s  warning: %lld NaN/inf values\n", width, "", (long long)s.nonfinite);
}

static void print_file(const loom_st_file *f) {
  int w = name_width(f);
  const char *meta = loom_st_metadata(f, "loom.pieces");
  json_t *pieces = meta ? json_loads(meta, 0, NULL) : NULL;
  printf("file: %s\n", loom_st_path(f));
  printf("%-*s  %-5s  %-18s %12s  %-12s %-12s %-12s%s\n", w, "name", "dtype", "shape", "numel",
         "l2", "min", "max", pieces ? " piece of (global tensor[slice] of its shape)" : "");
  for (int i = 0; i < loom_st_count(f); i++) print_tensor_row(f, i, w, pieces);
  totals t = {0};
  add_totals(f, &t);
  print_totals(&t);
  printf("metadata:%s\n", loom_st_metadata_count(f) ? "" : " (none)");
  for (int i = 0; i < loom_st_metadata_count(f); i++) {
    const char *key = loom_st_metadata_key(f, i);
    if (pieces && !strcmp(key, "loom.pieces"))
      printf("  %s: %zu entries (the piece column)\n", key, json_object_size(pieces));
    else
      printf("  %s: %s\n", key, loom_st_metadata_value(f, i));
  }
  json_decref(pieces);
}

/* ---- inspect: command ------------------------------------------------------------------- */

static void inspect_usage(FILE *out) {
  fprintf(out,
          "usage: loom ckpt inspect PATH [--pieces] [--json]\n\n"
          "Show the tensors of a checkpoint directory as the model sees them: every tensor\n"
          "once with its global shape, dtype, element count, L2 norm, min and max (computed\n"
          "in double over all its pieces, however many ranks wrote it), the parameter count,\n"
          "the optimizer moments (exp_avg, exp_avg_sq) and saved gradients counted apart, the\n"
          "layout that wrote it, and trainer_state.json. A checkpoint whose COMPLETE marker\n"
          "lists a missing or resized file is an error naming the file and the newest complete\n"
          "checkpoint of the run to use instead.\n"
          "A .safetensors file, or a directory with --pieces: each file's entries as stored\n"
          "(a rank's piece of a global tensor: which slice and elements), totals and metadata.\n\n"
          "options:\n"
          "  --pieces   list every file's entries (the pieces each rank wrote)\n"
          "  --json     machine-readable output (non-finite numbers are null)\n"
          "  -h, --help this text\n");
}

/* Inspect every file; results go to stdout (text as they come, or one JSON document). */
static int inspect_files(const path_list *files, json_t *state, int as_json, const char *path) {
  json_t *doc = json_object(), *arr = json_array();
  totals all = {0};
  int rc = 0;
  for (int i = 0; i < files->n && rc == 0; i++) {
    loom_st_file *f;
    if (loom_st_open(&f, files->paths[i])) {
      rc = LOOM_ERR;
      break;
    }
    add_totals(f, &all);
    if (as_json) {
      json_array_append_new(arr, file_json(f));
    } else {
      print_file(f);
      printf("\n");
    }
    loom_st_close(f);
  }
  json_object_set_new(doc, "path", json_string(path));
  json_object_set_new(doc, "files", arr);
  set_totals_json(doc, &all);
  if (state) json_object_set(doc, "trainer_state", state);
  if (rc == 0 && as_json) {
    json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("\n");
  } else if (rc == 0) {
    if (files->n > 1) {
      printf("all files: ");
      print_totals(&all);
    }
    if (state) {
      char *s = json_dumps(state, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
      printf("trainer_state.json:\n%s\n", s);
      free(s);
    }
  }
  json_decref(doc);
  return rc;
}

static int ckpt_inspect(int argc, char **argv) {
  const char *path = NULL;
  bool as_json = false, pieces = false;
  const loom_cli_opt opts[] = {LOOM_OPT_FLAG("--json", &as_json),
                               LOOM_OPT_FLAG("--pieces", &pieces), {0}};
  loom_cli_parser p = {.command = "ckpt inspect", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  if (prc == LOOM_CLI_OK && p.npos > 1) {
    fprintf(stderr, "loom ckpt inspect: unexpected argument '%s' (one PATH)\n\n", p.pos[1]);
    prc = LOOM_CLI_BAD;
  }
  path = p.npos ? p.pos[0] : NULL;
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return inspect_usage(stdout), 0;
  if (prc) return 1;
  if (!path) {
    fprintf(stderr, "loom ckpt inspect: missing PATH\n\n");
    return inspect_usage(stderr), 1;
  }
  path_list files = {0};
  json_t *state = NULL;
  int rc = 0;
  bool dir = loom_is_dir(path);
  if (dir) {
    rc = load_trainer_state(path, &state);
    if (rc == 0 && !pieces) rc = loom_ckpt_print_view(path, state, as_json);
    else if (rc == 0) rc = loom_ckpt_check_readable(path);
    if (rc == 0 && pieces) rc = list_safetensors(path, &files);
  } else {
    files.paths = loom_malloc(sizeof *files.paths);
    files.paths[files.n++] = loom_strdup(path);
  }
  if (rc == 0 && (pieces || !dir)) rc = inspect_files(&files, state, as_json, path);
  if (rc) fprintf(stderr, "loom ckpt inspect: %s\n", loom_errmsg());
  json_decref(state);
  path_list_free(&files);
  return rc ? 1 : 0;
}

/* ---- dispatch --------------------------------------------------------------------------- */

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} subcommands[] = {
    {"inspect", ckpt_inspect, "tensors, dtypes, shapes, norms and metadata of a checkpoint"},
    {"export", loom_cmd_ckpt_export, "checkpoint -> Hugging Face directory (text models and VLMs)"},
    {"import", loom_cmd_ckpt_import, "Hugging Face directory -> weights-only checkpoint"},
    {"compare", loom_cmd_ckpt_compare, "compare the weights of two checkpoints (any layouts)"},
    {"grad-norms", loom_cmd_ckpt_grad_norms, "per-tensor norms of a checkpoint's saved gradients"},
};
#define N_SUB (sizeof subcommands / sizeof subcommands[0])

static void ckpt_usage(FILE *out) {
  fprintf(out, "usage: loom ckpt <subcommand> [options]\n\nsubcommands:\n");
  for (size_t i = 0; i < N_SUB; i++)
    fprintf(out, "  %-11s %s\n", subcommands[i].name, subcommands[i].summary);
  fprintf(out, "\nRun 'loom ckpt <subcommand> --help' for its options.\n");
}

int loom_cmd_ckpt(int argc, char **argv) {
  const char *names[N_SUB + 1] = {0};
  for (size_t i = 0; i < N_SUB; i++) names[i] = subcommands[i].name;
  int sub = loom_cli_subcommand("ckpt", argc, argv, names, NULL);
  if (sub >= 0) return subcommands[sub].fn(argc - 1, argv + 1);
  if (sub == LOOM_CLI_SUB_HELP) return ckpt_usage(stdout), 0;
  if (sub == LOOM_CLI_SUB_BAD) fputc('\n', stderr);
  ckpt_usage(stderr);
  return 1;
}
