/* Run-directory management on hand-made directories: the COMPLETE marker check (missing
 * file, wrong size, bad header), pruning beyond keep_last (rename first; incomplete and
 * final checkpoints untouched), cleanup of stale entries (and nothing else), --resume
 * resolution (latest run by activity, newest complete checkpoint by step, a named
 * incomplete checkpoint refused), checked appends on a full device, and the metrics reader
 * skipping a cut last line. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "loom/checkpoint.h"
#include "loom/core.h"
#include "loom/runs.h"
#include "loom/run_dir.h"

static char root[64];

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
}

/* a checkpoint directory with one data file of `bytes` bytes; marker: 1 valid, 0 none */
static char *make_ckpt(const char *run, const char *name, long step, int bytes, int marker) {
  char *dir = loom_sprintf("%s/%s", run, name);
  loom_mkdir_p(dir);
  char *data = loom_sprintf("%s/model.safetensors", dir);
  FILE *f = fopen(data, "w");
  for (int i = 0; i < bytes; i++) fputc('x', f);
  fclose(f);
  if (marker) {
    char *m = loom_sprintf("%s/COMPLETE", dir);
    char *text = loom_sprintf("loom-checkpoint 1\nstep %ld\nfile %d model.safetensors\n", step, bytes);
    put(m, text);
    free(m);
    free(text);
  }
  free(data);
  return dir;
}

static bool exists(const char *run, const char *name) {
  char *p = loom_sprintf("%s/%s", run, name);
  bool e = loom_path_exists(p);
  free(p);
  return e;
}

static void test_marker(void) {
  char *run = loom_sprintf("%s/marker", root);
  char *good = make_ckpt(run, "checkpoint_4", 4, 10, 1);
  long step = -1;
  CHECK(loom_ckpt_check_complete(good, &step) == 0 && step == 4, "valid marker: %s", loom_errmsg());
  char *data = loom_sprintf("%s/model.safetensors", good);
  CHECK(truncate(data, 7) == 0, "truncate");
  CHECK(loom_ckpt_check_complete(good, &step) != 0 && strstr(loom_errmsg(), "has 7 bytes") &&
            strstr(loom_errmsg(), "says 10"), "short file: %s", loom_errmsg());
  unlink(data);
  CHECK(loom_ckpt_check_complete(good, &step) != 0 && strstr(loom_errmsg(), "'model.safetensors' is missing"),
        "missing file: %s", loom_errmsg());
  char *none = make_ckpt(run, "checkpoint_8", 8, 10, 0);
  CHECK(loom_ckpt_check_complete(none, &step) != 0 && strstr(loom_errmsg(), "no COMPLETE marker"),
        "no marker: %s", loom_errmsg());
  char *m = loom_sprintf("%s/COMPLETE", none);
  put(m, "garbage\n");
  CHECK(loom_ckpt_check_complete(none, &step) != 0 && strstr(loom_errmsg(), "not a loom checkpoint marker"),
        "bad header: %s", loom_errmsg());
  put(m, "loom-checkpoint 1\nstep 8\n");
  CHECK(loom_ckpt_check_complete(none, &step) != 0 && strstr(loom_errmsg(), "lists no files"),
        "empty list: %s", loom_errmsg());
  free(m), free(data), free(good), free(none), free(run);
}

static void test_prune_and_clean(void) {
  char *run = loom_sprintf("%s/prune", root);
  const long steps[] = {1, 3, 6, 9, 12, 15};
  for (int i = 0; i < 6; i++) {
    char name[32];
    snprintf(name, sizeof name, "checkpoint_%ld", steps[i]);
    free(make_ckpt(run, name, steps[i], 5, 1));
  }
  free(make_ckpt(run, "checkpoint_18", 18, 5, 0));   /* incomplete: not pruning's business */
  free(make_ckpt(run, "final_checkpoint", 20, 5, 1)); /* never pruned */
  free(make_ckpt(run, "checkpoint_x", 0, 5, 1));      /* not a checkpoint_<N> name */
  CHECK(loom_run_dir_prune(run, 2) == 0, "prune: %s", loom_errmsg());
  CHECK(!exists(run, "checkpoint_1") && !exists(run, "checkpoint_3") &&
            !exists(run, "checkpoint_6") && !exists(run, "checkpoint_9"),
        "every complete checkpoint beyond keep_last=2 pruned");
  CHECK(exists(run, "checkpoint_12") && exists(run, "checkpoint_15"), "newest two kept");
  CHECK(exists(run, "checkpoint_18") && exists(run, "final_checkpoint") && exists(run, "checkpoint_x"),
        "incomplete, final and other names untouched");
  CHECK(!exists(run, "checkpoint_1.pruned.tmp"), "pruned directories deleted");
  CHECK(loom_run_dir_prune(run, 0) == 0 && exists(run, "checkpoint_12"), "keep_last=0 keeps all");

  /* leftovers of interrupted jobs */
  free(make_ckpt(run, "checkpoint_21.tmp", 21, 5, 1));
  free(make_ckpt(run, "checkpoint_3.pruned.tmp", 3, 5, 1));
  free(make_ckpt(run, "final_checkpoint.old.4242", 20, 5, 1));
  char *p = loom_sprintf("%s/summary.json.tmp.777", run);
  put(p, "{");
  free(p);
  p = loom_sprintf("%s/notes.tmp.txt", run); /* not a pid suffix: kept */
  put(p, "keep");
  free(p);
  char *removed = NULL;
  CHECK(loom_run_dir_clean(run, &removed) == 0, "clean: %s", loom_errmsg());
  CHECK(!exists(run, "checkpoint_21.tmp") && !exists(run, "checkpoint_3.pruned.tmp") &&
            !exists(run, "final_checkpoint.old.4242") && !exists(run, "summary.json.tmp.777") &&
            !exists(run, "checkpoint_18"),
        "stale entries and the incomplete checkpoint removed (removed: %s)", removed);
  CHECK(exists(run, "checkpoint_12") && exists(run, "checkpoint_15") &&
            exists(run, "final_checkpoint") && exists(run, "notes.tmp.txt") &&
            exists(run, "checkpoint_x"),
        "complete checkpoints and other files kept");
  CHECK(removed && strstr(removed, "checkpoint_18") && strstr(removed, "checkpoint_21.tmp"),
        "what was removed is listed: %s", removed);
  free(removed);
  free(run);
}

static void test_resolve(void) {
  char *out = loom_sprintf("%s/runs", root);
  char *a = loom_sprintf("%s/a_run", out), *b = loom_sprintf("%s/b_run", out);
  loom_mkdir_p(a);
  loom_mkdir_p(b);
  char *p;
  p = loom_sprintf("%s/config.yaml", a), put(p, "run: {}\n"), free(p);
  p = loom_sprintf("%s/config.yaml", b), put(p, "run: {}\n"), free(p);
  p = loom_sprintf("%s/train.log", b), put(p, "old\n"), free(p);
  struct timespec old[2] = {{1000, 0}, {1000, 0}};
  p = loom_sprintf("%s/train.log", b), utimensat(AT_FDCWD, p, old, 0), free(p);
  p = loom_sprintf("%s/train.log", a), put(p, "new\n"), free(p); /* a: active last */
  free(make_ckpt(a, "checkpoint_3", 3, 4, 1));
  free(make_ckpt(a, "checkpoint_6", 6, 4, 1));
  free(make_ckpt(a, "checkpoint_9", 9, 4, 0)); /* interrupted save */
  char *run = NULL, *ck = NULL;
  CHECK(loom_run_dir_resolve("latest", out, false, &run, &ck) == 0, "latest: %s", loom_errmsg());
  CHECK(run && !strcmp(run, a), "latest = the run active last: %s", run);
  CHECK(ck && strstr(ck, "/checkpoint_6"), "newest complete checkpoint: %s", ck);
  free(run), free(ck);
  free(make_ckpt(a, "final_checkpoint", 12, 4, 1));
  CHECK(loom_run_dir_resolve(a, out, false, &run, &ck) == 0 && strstr(ck, "/final_checkpoint"),
        "final_checkpoint has the highest step: %s", ck ? ck : loom_errmsg());
  free(run), free(ck);
  char *nine = loom_sprintf("%s/checkpoint_9", a);
  CHECK(loom_run_dir_resolve(nine, out, false, &run, &ck) != 0 &&
            strstr(loom_errmsg(), "no COMPLETE marker"), "named incomplete: %s", loom_errmsg());
  CHECK(loom_run_dir_resolve(b, out, false, &run, &ck) != 0 &&
            strstr(loom_errmsg(), "has no complete checkpoint"), "no checkpoint: %s", loom_errmsg());
  CHECK(loom_run_dir_resolve(b, out, true, &run, &ck) == 0 && ck == NULL && !strcmp(run, b),
        "a restart before the first checkpoint: the run, from step 0");
  free(run);
  char *empty = loom_sprintf("%s/empty", root);
  loom_mkdir_p(empty);
  CHECK(loom_run_dir_resolve("latest", empty, false, &run, &ck) != 0 &&
            strstr(loom_errmsg(), "no run under"), "latest in an empty dir: %s", loom_errmsg());
  free(empty), free(nine), free(a), free(b), free(out);
}

static void test_appends(void) {
  FILE *f = fopen("/dev/full", "a");
  if (f) {
    CHECK(loom_append_checked(f, "/dev/full", "{\"step\": 1}\n", 12) != 0 &&
              strstr(loom_errmsg(), "cannot write '/dev/full'") &&
              strstr(loom_errmsg(), "No space left on device"), "full device: %s", loom_errmsg());
    fclose(f);
  }
  char *m = loom_sprintf("%s/metrics.jsonl", root);
  put(m, "{\"step\": 1, \"loss\": 5.5}\n{\"step\": 2, \"loss\": 5.25}\n{\"step\": 3, \"loss\": 4.8");
  loom_series s;
  CHECK(loom_series_read(m, "loss", "step", &s) == 0 && s.n == 2 && s.y[1] == 5.25,
        "a cut last line is skipped: n=%d", s.n);
  loom_series_free(&s);
  free(m);
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/loom-rundir.XXXXXX");
  if (!mkdtemp(root)) return 1;
  test_marker();
  test_prune_and_clean();
  test_resolve();
  test_appends();
  loom_rm_rf(root);
  return harness_finish("test_run_dir");
}
