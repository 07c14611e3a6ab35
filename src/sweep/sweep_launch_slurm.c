/* Slurm launcher: one sbatch script per point in <log_dir>/slurm/<name>.sbatch asking for the
 * point's ranks as tasks (nodes from ntasks_per_node), with the partition, account, time,
 * CPUs, GPUs and memory given; the job runs `srun loom train CONFIG` from the directory the
 * sweep was started in, writing to the point's log. Submitted with `sbatch --parsable`
 * (the job id is kept), or only written with --dry-run.
 * Ranks under srun: Open MPI's direct launch needs a PMI server from srun. Debian's Open MPI
 * 4.1 is built against PMIx and Debian's slurm-wlm 22.05 ships mpi/pmix (pmix_v4): that pair
 * works; mpi/pmi2 and mpi/none abort in MPI_Init ("OPAL ERROR: Not initialized"). So the script
 * exports SLURM_MPI_TYPE=pmix unless the submitting environment sets SLURM_MPI_TYPE
 * (--srun-args "--mpi=..." overrides both). The script's last log line records srun's exit
 * status ("# loom sweep point exit status N"), so a point that failed before its run
 * registered shows as FAILED in the summary, not PENDING. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sweep/sweep_launch.h"
#include "loom/core.h"

typedef struct {
  char *data;
  size_t len, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (t->len + (size_t)n + 1 > t->cap) {
    t->cap = (t->len + (size_t)n + 1) * 2;
    t->data = loom_realloc(t->data, t->cap, 1);
  }
  va_start(ap, fmt);
  vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  t->len += (size_t)n;
}

/* Job names: letters, digits, '_', '-', '.'. */
static void job_name(const char *sweep, const char *point, char *out, size_t n) {
  snprintf(out, n, "%s_%s", sweep, point);
  for (char *p = out; *p; p++)
    if (!(isalnum((unsigned char)*p) || strchr("_-.", *p))) *p = '_';
}

static char *script_text(const loom_launch_ctx *c, const loom_sweep_point *p,
                         const char *log_path) {
  const loom_slurm_opts *s = &c->opts->slurm;
  text t = {0};
  char job[256];
  job_name(c->sweep_name, p->name, job, sizeof job);
  add(&t, "#!/bin/bash\n# loom sweep %s (%s), point %s: %d rank%s\n", c->sweep_name, c->sweep_id,
      p->name, p->ranks, p->ranks == 1 ? "" : "s");
  add(&t, "#SBATCH --job-name=%s\n#SBATCH --output=%s\n#SBATCH --ntasks=%d\n", job, log_path,
      p->ranks);
  if (s->ntasks_per_node > 0) {
    int per = s->ntasks_per_node < p->ranks ? s->ntasks_per_node : p->ranks;
    add(&t, "#SBATCH --nodes=%d\n#SBATCH --ntasks-per-node=%d\n",
        (p->ranks + s->ntasks_per_node - 1) / s->ntasks_per_node, per);
  }
  if (s->cpus_per_task > 0) add(&t, "#SBATCH --cpus-per-task=%d\n", s->cpus_per_task);
  if (s->gpus_per_node > 0) add(&t, "#SBATCH --gpus-per-node=%d\n", s->gpus_per_node);
  if (s->time[0]) add(&t, "#SBATCH --time=%s\n", s->time);
  if (s->partition[0]) add(&t, "#SBATCH --partition=%s\n", s->partition);
  if (s->account[0]) add(&t, "#SBATCH --account=%s\n", s->account);
  if (s->qos[0]) add(&t, "#SBATCH --qos=%s\n", s->qos);
  if (s->mem[0]) add(&t, "#SBATCH --mem=%s\n", s->mem);
  if (s->constraint[0]) add(&t, "#SBATCH --constraint=%s\n", s->constraint);
  if (s->extra[0]) {
    char *copy = loom_strdup(s->extra), *save = NULL;
    for (char *l = strtok_r(copy, ";", &save); l; l = strtok_r(NULL, ";", &save)) {
      while (*l == ' ') l++;
      if (*l) add(&t, "#SBATCH %s\n", l);
    }
    free(copy);
  }
  char *cwd = loom_shell_quote(c->cwd), *sweep = loom_shell_quote(c->sweep_name);
  char *id = loom_shell_quote(c->sweep_id), *bin = loom_shell_quote(c->opts->loom_bin);
  char *cfg = loom_shell_quote(p->config_path);
  add(&t,
      "set -euo pipefail\n"
      "cd %s\n"
      "export LOOM_SWEEP=%s\n"
      "export LOOM_SWEEP_ID=%s\n"
      "export OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n"
      "export SLURM_MPI_TYPE=\"${SLURM_MPI_TYPE:-pmix}\"\n"
      "echo \"# loom sweep point %s on $(hostname), job ${SLURM_JOB_ID:-?}\"\n"
      "trap 'echo \"%s $?\"' EXIT\n"
      "srun %s%s%s train %s\n",
      cwd, sweep, id, p->name, LOOM_SWEEP_EXIT_MARK, s->srun_args, s->srun_args[0] ? " " : "", bin, cfg);
  free(cwd), free(sweep), free(id), free(bin), free(cfg);
  return t.data;
}

/* Run `sbatch --parsable script`; the job id is the first field of its output. */
static int submit(const char *sbatch, const char *script, char *job_id, size_t n, char *note,
                  size_t note_n) {
  int fds[2];
  if (pipe(fds)) return loom_err("pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    execlp(sbatch, sbatch, "--parsable", script, (char *)NULL);
    dprintf(STDOUT_FILENO, "cannot run %s: %s", sbatch, strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  char out[512] = "";
  size_t got = 0;
  for (ssize_t k; got + 1 < sizeof out && (k = read(fds[0], out + got, sizeof out - 1 - got)) > 0;)
    got += (size_t)k;
  out[got] = 0;
  close(fds[0]);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0) return loom_err("cannot run %s", sbatch);
  out[strcspn(out, "\n")] = 0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(note, note_n, "sbatch failed: %s", out);
    return 1;
  }
  snprintf(job_id, n, "%.*s", (int)strcspn(out, ";"), out);
  snprintf(note, note_n, "job %s", job_id);
  return 0;
}

static int start_slurm(const loom_launch_ctx *c, const loom_sweep_point *p, const char *log_path,
                       loom_launch_result *r) {
  char *dir = loom_sprintf("%s/slurm", c->log_dir);
  char *path = loom_sprintf("%s/%s.sbatch", dir, p->name);
  char *script = script_text(c, p, log_path);
  int rc = loom_mkdir_p(dir);
  if (!rc) rc = loom_write_file_atomic(path, script, strlen(script));
  if (!rc && c->opts->dry_run) {
    r->status = LOOM_PT_DRY_RUN;
    snprintf(r->note, sizeof r->note, "wrote %s (not submitted)", path);
  } else if (!rc) {
    const char *sbatch = c->opts->sbatch && *c->opts->sbatch ? c->opts->sbatch : "sbatch";
    int s = submit(sbatch, path, r->job_id, sizeof r->job_id, r->note, sizeof r->note);
    if (s < 0) rc = -1;
    else r->status = s ? LOOM_PT_FAILED : LOOM_PT_SUBMITTED;
  }
  free(dir), free(path), free(script);
  return rc;
}

const loom_sweep_launcher loom_launcher_slurm = {
    .name = "slurm",
    .summary = "an sbatch script per point, submitted (or written with --dry-run)",
    .concurrent = false,
    .start = start_slurm,
};
