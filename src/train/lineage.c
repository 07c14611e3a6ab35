/* Run lineage: which config differences continue a run and which fork a new one (see
 * lineage.h and docs/EXPERIMENTS.md "Resume and lineage"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config_schema.h"
#include "loom/core.h"
#include "loom/lineage.h"
#include "loom/run_dir.h"

static const char *const bookkeeping[] = {
    "run.output_dir",       "run.max_restarts",    "run.tags",           "run.notes",
    "run.parent",           "run.parent_checkpoint", "training.log_every", "training.eval_every",
    "checkpoint.every",     "checkpoint.keep_last", "checkpoint.save_final",
    "checkpoint.save_gradients", "parallel.timeout_s", NULL};

bool loom_lineage_bookkeeping_key(const char *key) {
  for (int i = 0; bookkeeping[i]; i++)
    if (!strcmp(bookkeeping[i], key)) return true;
  return false;
}

/* Append ", what" to out (cut with "..." when it does not fit). */
static void add(char *out, size_t n, const char *what) {
  size_t len = strlen(out);
  if (n < 8 || len + 4 >= n) return;
  if (len && !strcmp(out + len - 3, "...")) return;
  int w = snprintf(out + len, n - len, "%s%s", len ? ", " : "", what);
  if (w < 0 || (size_t)w >= n - len) snprintf(out + n - 4, 4, "...");
}

static void add_user(const loom_config *a, const loom_config *b, bool reverse, char *out,
                     size_t n, bool *fork) {
  for (int i = 0; i < a->nuser; i++) {
    const char *other = loom_config_user_get(b, a->user[i].name);
    if (other && (reverse || !strcmp(other, a->user[i].value))) continue;
    char *text = other ? loom_sprintf("+%s %s -> %s", a->user[i].name, other, a->user[i].value)
                       : loom_sprintf("+%s (%s)", a->user[i].name, reverse ? "removed" : "added");
    add(out, n, text);
    free(text);
    *fork = true;
  }
}

void loom_lineage_compare(const loom_config *cfg, const loom_config *run, bool *fork,
                          char *changed, size_t nchanged, char *book, size_t nbook) {
  *fork = false;
  changed[0] = book[0] = 0;
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const loom_config_key *k = &loom_config_keys[i];
    if (loom_config_key_equal(cfg, run, k)) continue;
    char *was = loom_config_key_format(run, k), *now = loom_config_key_format(cfg, k);
    char *text = loom_sprintf("%s %s -> %s", k->name, was, now);
    bool keep = loom_lineage_bookkeeping_key(k->name);
    if (strcmp(k->name, "run.parent") && strcmp(k->name, "run.parent_checkpoint"))
      add(keep ? book : changed, keep ? nbook : nchanged, text);
    if (!keep) *fork = true;
    free(text), free(was), free(now);
  }
  add_user(cfg, run, false, changed, nchanged, fork); /* added or changed */
  add_user(run, cfg, true, changed, nchanged, fork);  /* removed */
}

int loom_lineage_load_run_config(const char *run_dir, const char *ckpt, loom_config *out) {
  char *path = loom_sprintf("%s/config.yaml", run_dir);
  if (!loom_path_exists(path) && ckpt) {
    free(path);
    path = loom_sprintf("%s/config.yaml", ckpt);
  }
  loom_config_defaults(out);
  int rc = loom_config_load(out, path);
  if (!rc) rc = loom_config_resolve_grad_accum(out);
  if (rc) loom_err_prefix("--resume: cannot read the config the run was trained with (%s), "
                          "needed to tell a continuation from a fork: ", path);
  free(path);
  return rc;
}

static int set_text(char *field, size_t size, const char *key, const char *value) {
  if (strlen(value) >= size)
    return loom_err("--resume: %s would be '%s', longer than %zu characters; move the runs to "
                    "a shorter path", key, value, size - 1);
  snprintf(field, size, "%s", value);
  return 0;
}

int loom_lineage_resolve(loom_config *cfg, char **run_dir, char **ckpt, char *note, size_t n) {
  note[0] = 0;
  if (!*run_dir) {
    if (cfg->run.parent[0] || cfg->run.parent_checkpoint[0])
      snprintf(note, n, "run.parent (%s) of the config cleared: without --resume the run "
               "starts from step 0 and is not a fork", cfg->run.parent);
    cfg->run.parent[0] = cfg->run.parent_checkpoint[0] = 0;
    return 0;
  }
  loom_config run;
  if (loom_lineage_load_run_config(*run_dir, *ckpt, &run)) return LOOM_ERR;
  bool fork;
  char changed[1024], book[1024];
  loom_lineage_compare(cfg, &run, &fork, changed, sizeof changed, book, sizeof book);
  bool finished = !fork && *ckpt && loom_run_dir_finished(*run_dir);
  if (finished) fork = true; /* a finished run is never trained again in its directory */
  char *copy = loom_strdup(*run_dir);
  size_t len = strlen(copy);
  while (len > 1 && copy[len - 1] == '/') copy[--len] = 0;
  const char *id = strrchr(copy, '/') ? strrchr(copy, '/') + 1 : copy;
  int rc = 0;
  if (!fork) {
    memcpy(cfg->run.parent, run.run.parent, sizeof cfg->run.parent);
    memcpy(cfg->run.parent_checkpoint, run.run.parent_checkpoint,
           sizeof cfg->run.parent_checkpoint);
    if (!*ckpt && cfg->run.parent_checkpoint[0]) /* a fork restarted before its own save */
      *ckpt = loom_strdup(cfg->run.parent_checkpoint);
    snprintf(note, n, "continuing run %s (same config%s%s%s)", id,
             book[0] ? "; changed keys that cannot change the trajectory: " : "", book,
             book[0] ? "" : " as the run's");
  } else if (!*ckpt) {
    rc = loom_err("--resume: run %s has no complete checkpoint to start a new run from, and "
                  "the config differs from the run's (%s); resume with the run's config, or "
                  "start a new run", id, changed);
  } else {
    char *abs = realpath(*ckpt, NULL);
    rc = set_text(cfg->run.parent, sizeof cfg->run.parent, "run.parent", id);
    if (!rc) rc = set_text(cfg->run.parent_checkpoint, sizeof cfg->run.parent_checkpoint,
                           "run.parent_checkpoint", abs ? abs : *ckpt);
    free(abs);
    if (finished)
      snprintf(note, n, "a new run forked from run %s at %s: run %s is finished (same config; "
               "its files are left as they are)", id, *ckpt, id);
    else
      snprintf(note, n, "a new run forked from run %s at %s: the config differs from the "
               "run's in %s (the parent's files are left as they are)", id, *ckpt, changed);
    free(*run_dir);
    *run_dir = NULL;
  }
  free(copy);
  return rc;
}
