/* `loom eval CKPT`: validation loss, perplexity and token count of a checkpoint — a loom run
 * checkpoint (one process or multi-rank pieces), a weights-only import, or a Hugging Face
 * directory (imported on the fly into a temporary directory that is removed afterwards) —
 * on validation data, in any parallel layout, without training and without writing. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/checkpoint.h"
#include "loom/config.h"
#include "loom/core.h"
#include "loom/hf.h"
#include "loom/eval_ckpt.h"
#include "loom/mesh.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom eval CKPT [--data PATH] [--batches N] [--json] [--nproc N] [KEY=VALUE ...]\n\n"
          "Score a checkpoint on validation data: val loss (token-mean cross-entropy over every\n"
          "scored target), perplexity = exp(val loss), and the number of target tokens.\n\n"
          "  CKPT             runs/<id>/checkpoint_<step> or final_checkpoint (any layout: a\n"
          "                   multi-rank checkpoint loads into one process unless parallel.*\n"
          "                   or --nproc say otherwise), a run directory runs/<id> (its newest\n"
          "                   complete checkpoint, as --resume takes), a 'loom ckpt import'\n"
          "                   directory, or a Hugging Face directory\n"
          "                   (config.json + model.safetensors or shards; imported into a\n"
          "                   temporary directory under $TMPDIR, removed afterwards)\n"
          "  --data PATH      validation data: token shards (file, directory or glob) or, with\n"
          "                   data.format=vqa, a vqa dataset (a directory's val split); default:\n"
          "                   the checkpoint config's data.val_shards / data.val_fraction / val split\n"
          "  --batches N      batches to score (each micro_batch_size x grad_accum x dp sequences\n"
          "                   of seq_len tokens; default training.eval_batches, 0 = all)\n"
          "  --json           print one JSON object instead of text\n"
          "  --nproc N        start N ranks with mpirun; set the layout with parallel.* keys\n"
          "  KEY=VALUE        override a key of the checkpoint's config (parallel.tp=2,\n"
          "                   training.micro_batch_size=4, training.seq_len=128, ...)\n\n"
          "examples:\n"
          "  loom eval runs/demo_x/final_checkpoint --data data/val.bin --batches 20\n"
          "  loom eval hf/gpt2 --data data/val.bin --nproc 2 parallel.tp=2 --json\n");
}

typedef struct {
  const char *ckpt, *data, *batches, *nproc;
  bool json;
  char **overrides; /* KEY=VALUE / ~KEY arguments, in order (malloc'd array) */
  int noverrides;
} eval_args;

/* Options (the table opts, storing into a) and positional arguments; LOOM_CLI_HELP after
 * --help, 2 after a usage error. */
static int parse_args(const loom_cli_opt *opts, int argc, char **argv, eval_args *a) {
  loom_cli_parser p = {.command = "eval", .opts = opts};
  int rc = loom_cli_parse(&p, argc, argv, 1);
  a->overrides = p.pos; /* the overrides are compacted in place: never past a checkpoint */
  for (int i = 0; i < p.npos && !rc; i++) {
    if (strchr(p.pos[i], '=') || p.pos[i][0] == '~') {
      a->overrides[a->noverrides++] = p.pos[i];
    } else if (a->ckpt) {
      fprintf(stderr, "loom eval: two checkpoints given ('%s' and '%s'); evaluate one at a "
              "time\n", a->ckpt, p.pos[i]);
      rc = 2;
    } else {
      a->ckpt = p.pos[i];
    }
  }
  if (rc) return rc;
  if (!a->ckpt) {
    fprintf(stderr, "loom eval: no checkpoint given\n");
    usage(stderr);
    return 2;
  }
  if (a->batches) {
    char *end;
    long n = strtol(a->batches, &end, 10);
    if (*end || end == a->batches || n < 0) {
      fprintf(stderr, "loom eval: --batches '%s' is not a count >= 0\n", a->batches);
      return 2;
    }
  }
  return 0;
}

/* Rank 0 imports a Hugging Face directory into a fresh temporary directory (under $TMPDIR,
 * default /tmp: the ranks must share it, as on one machine); every rank gets
 * its path (in *dir, malloc'd) and *tmp_root (to remove) — or the checkpoint itself. */
static int resolve_checkpoint(const char *ckpt, const loom_mesh *world, char **dir,
                              char **tmp_root) {
  *dir = NULL;
  *tmp_root = NULL;
  if (!loom_is_dir(ckpt))
    return loom_err("checkpoint '%s' %s; give a run checkpoint (runs/<id>/final_checkpoint), "
                    "an imported checkpoint or a Hugging Face directory", ckpt,
                    loom_path_exists(ckpt) ? "is not a directory" : "does not exist");
  char *yaml = loom_sprintf("%s/config.yaml", ckpt), *json = loom_sprintf("%s/config.json", ckpt);
  bool loom_ckpt = loom_path_exists(yaml), hf = loom_path_exists(json);
  free(yaml);
  free(json);
  if (loom_ckpt) {
    if (loom_ckpt_check_readable(ckpt)) return LOOM_ERR; /* before the layout check */
    *dir = loom_strdup(ckpt);
    return 0;
  }
  if (!hf)
    return loom_err("'%s' is not a checkpoint: it has neither config.yaml (a loom checkpoint) "
                    "nor config.json (a Hugging Face model)", ckpt);
  char path[LOOM_STR_MAX * 2];
  memset(path, 0, sizeof path);
  int rc = 0;
  if (world->rank == 0) {
    const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *tmpl = loom_sprintf("%s/loom-eval-XXXXXX", base);
    if (!mkdtemp(tmpl)) {
      rc = loom_err("cannot create a temporary directory in %s for the import: %s; set TMPDIR "
                    "to a writable directory", base, strerror(errno));
    } else {
      snprintf(path, sizeof path, "%s", tmpl);
      char *out = loom_sprintf("%s/ckpt", tmpl);
      loom_hf_import_opts o = {NULL, false};
      rc = loom_hf_import(ckpt, out, &o);
      free(out);
      if (rc) {
        char *keep = loom_strdup(loom_errmsg());
        loom_rm_rf(tmpl);
        loom_err("%s", keep);
        free(keep);
      }
    }
    free(tmpl);
  }
  if (loom_comm_any_failed(&world->world_comm, rc))
    return rc ? rc : loom_err("rank 0 could not import '%s'", ckpt);
  loom_comm_bcast_bytes(&world->world_comm, path, sizeof path, 0);
  *tmp_root = loom_strdup(path);
  *dir = loom_sprintf("%s/ckpt", path);
  return 0;
}

/* The overrides set the layout (parallel.*, vision.parallel.*, the micro-batch): kept as given. */
static bool layout_given(const eval_args *a) {
  static const char *const keys[] = {"parallel.", "vision.parallel.", "training.micro_batch_size",
                                     "training.global_batch_size", "training.grad_accum", NULL};
  for (int i = 0; i < a->noverrides; i++) {
    const char *o = a->overrides[i] + strspn(a->overrides[i], "~+");
    for (int k = 0; keys[k]; k++)
      if (!strncmp(o, keys[k], strlen(keys[k]))) return true;
  }
  return false;
}

/* The checkpoint's multi-rank layout in one process: every parallel.* and vision.parallel.* key
 * at its default, the data-parallel ranks' micro-batches in one (micro_batch_size x dp), so
 * that the same batches are scored; said on stderr. */
static void one_process(loom_config *cfg) {
  loom_config d;
  loom_config_defaults(&d);
  const loom_config_parallel *p = &cfg->parallel;
  fprintf(stderr, "loom eval: the checkpoint's layout (pp %ld, dp %ld, cp %ld, sp %ld, tp %ld, "
          "ZeRO %ld%s) evaluated in one process: parallel.* at their defaults, "
          "training.micro_batch_size %ld x dp %ld = %ld (give parallel.* or --nproc for "
          "another layout)\n", p->pp, p->dp, p->cp, p->sp, p->tp, p->zero,
          strcmp(cfg->vision_parallel.placement, "separate") ? "" : ", a separate vision encoder",
          cfg->training.micro_batch_size, p->dp, cfg->training.micro_batch_size * p->dp);
  cfg->training.micro_batch_size *= p->dp;
  double timeout = cfg->parallel.timeout_s;
  cfg->parallel = d.parallel;
  cfg->parallel.timeout_s = timeout;
  cfg->vision_parallel = d.vision_parallel;
}

static int load_config(loom_config *cfg, const char *dir, const eval_args *a) {
  loom_config_defaults(cfg);
  char *path = loom_sprintf("%s/config.yaml", dir);
  int rc = loom_config_load(cfg, path);
  free(path);
  for (int i = 0; i < a->noverrides && !rc; i++) rc = loom_config_override(cfg, a->overrides[i]);
  if (!rc && a->data) {
    if (strlen(a->data) >= sizeof cfg->data.val_shards)
      return loom_err("--data: path longer than %zu bytes", sizeof cfg->data.val_shards - 1);
    snprintf(cfg->data.val_shards, sizeof cfg->data.val_shards, "%s", a->data);
    cfg->data.val_fraction = 0;
  }
  if (!rc && a->batches) cfg->training.eval_batches = atol(a->batches);
  const loom_config_parallel *p = &cfg->parallel;
  long ranks = p->pp * p->dp * p->cp * p->sp * p->tp;
  bool separate = !strcmp(cfg->vision_parallel.placement, "separate");
  if (!rc && (ranks > 1 || separate) && loom_dist_world() == 1 && !layout_given(a))
    one_process(cfg); /* a multi-rank checkpoint loads into one process (as generate's does) */
  ranks = p->pp * p->dp * p->cp * p->sp * p->tp;
  if (!rc) rc = loom_config_validate(cfg);
  if (!rc && ranks > 1 && loom_dist_world() == 1 &&
      strcmp(cfg->vision_parallel.placement, "separate"))
    rc = loom_err("the layout (the checkpoint's config.yaml and the overrides) is "
                  "parallel.pp*dp*cp*sp*tp = %ld*%ld*%ld*%ld*%ld = %ld ranks but this is one "
                  "process: give --nproc %ld, or evaluate in one process with parallel.pp=1 "
                  "parallel.dp=1 parallel.cp=1 parallel.sp=1 parallel.tp=1 parallel.zero=0 "
                  "(keep the batch with training.micro_batch_size=%ld: micro_batch_size x dp)",
                  p->pp, p->dp, p->cp, p->sp, p->tp, ranks, ranks,
                  cfg->training.micro_batch_size * p->dp);
  return rc;
}

static void print_result(const eval_args *a, const loom_eval_loss_result *r, const char *data) {
  if (a->json) { /* jansson quotes the paths; numbers keep every digit */
    json_t *o = json_pack("{s:s, s:s, s:f, s:f, s:I, s:I, s:f}", "checkpoint", a->ckpt, "data",
                          data, "val_loss", r->loss, "val_perplexity", r->perplexity, "tokens",
                          (json_int_t)r->tokens, "batches", (json_int_t)r->batches, "seconds",
                          r->seconds);
    char *text = o ? json_dumps(o, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) : NULL;
    if (text) printf("%s\n", text);
    free(text);
    json_decref(o);
    return;
  }
  printf("checkpoint: %s\ndata: %s\nval loss: %.6f\nperplexity: %.4f\ntokens: %.0f\n", a->ckpt,
         data, r->loss, r->perplexity, r->tokens);
}

int loom_cmd_eval(int argc, char **argv) {
  eval_args a = {0};
  const loom_cli_opt opts[] = {LOOM_OPT_VALUE("--data", &a.data),
                               LOOM_OPT_VALUE("--batches", &a.batches),
                               LOOM_OPT_VALUE("--nproc", &a.nproc),
                               LOOM_OPT_FLAG("--json", &a.json), {0}};
  int prc = parse_args(opts, argc, argv, &a);
  if (prc == LOOM_CLI_HELP) usage(stdout);
  if (prc) {
    free(a.overrides);
    return prc == LOOM_CLI_HELP ? 0 : 2;
  }
  if (a.nproc && !getenv("OMPI_COMM_WORLD_SIZE"))
    return loom_cli_exec_mpirun("eval", opts, argc, argv, a.nproc, false);
  if (loom_dist_init(&argc, &argv)) {
    fprintf(stderr, "loom eval: %s\n", loom_errmsg());
    return 1;
  }
  bool lead = loom_dist_rank() == 0;
  loom_config defaults;
  loom_config_defaults(&defaults);
  loom_mesh world;
  memset(&world, 0, sizeof world);
  char *dir = NULL, *tmp = NULL, data[LOOM_STR_MAX + 200] = "";
  loom_config cfg;
  loom_eval_loss_result r;
  char *given = NULL; /* CKPT, or the checkpoint of a run directory */
  int rc = loom_mesh_create_on(&world, 1, loom_dist_world(), 1, 1, 1, defaults.parallel.timeout_s, 0);
  if (!rc) rc = loom_cli_checkpoint_arg(a.ckpt, &given);
  if (!rc) a.ckpt = given;
  if (!rc) rc = resolve_checkpoint(a.ckpt, &world, &dir, &tmp);
  if (!rc) rc = load_config(&cfg, dir, &a);
  free(a.overrides);
  a.overrides = NULL;
  if (!rc) rc = loom_eval_checkpoint(&cfg, dir, &r, data, sizeof data);
  if (rc) {
    if (tmp && lead) loom_rm_rf(tmp);
    if (loom_dist_world() > 1) /* other ranks may wait in a collective: take them down */
      loom_dist_abort("eval: rank %d: error: %s", loom_dist_rank(), loom_errmsg());
    fprintf(stderr, "loom eval: error: %s\n", loom_errmsg());
    free(given);
    return 1;
  }
  loom_comm_barrier(&world.world_comm); /* every rank has read the import */
  if (tmp && lead) loom_rm_rf(tmp);
  if (lead) print_result(&a, &r, data);
  free(dir);
  free(tmp);
  free(given);
  loom_mesh_free(&world);
  loom_dist_finalize();
  return 0;
}
