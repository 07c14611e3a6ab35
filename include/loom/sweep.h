/* Sweeps: a YAML file naming a base config and the parameters to vary, expanded into points
 * (grid or random), written out as one resolved config per point with a manifest and an
 * editable run_sweep.sh, and run by a launcher (local mpirun, Slurm sbatch, or the cluster
 * simulator) sequentially or N at a time, with per-run logs and summary.txt / summary.csv.
 *
 * Sweep file (every key but parameters is optional):
 *   name: lr_tp                   # sweep name (default: the file name)
 *   base: ../demo.yaml            # base config, relative to the sweep file
 *   overrides: [training.steps=50]  # applied to the base before the parameters
 *   parameters:
 *     training.lr: {values: [1e-4, 3e-4]}
 *     parallel.tp: {values: [1, 2]}
 *     model.hidden: {min: 64, max: 256, distribution: int_uniform, q: 64}
 *     training.dtype: {value: bf16}                    # fixed
 *     model.preset: [qwen2.5-vl-7b, qwen2.5-vl-32b]
 *     parallel.tp: {values: [4, 8], link: model.preset}  # linked: i-th value with the i-th
 *     vision.parallel.sp: {values: ["${parallel.tp}", 1]}  # ${key}: that key's value in
 *                                                          # the point (interpolation)
 *   strategy: grid                # grid | random
 *   num_runs: 8                   # random: points to draw
 *   seed: 0                       # random: sampling seed
 *   exclude: [{parallel.tp: 2, training.dtype: fp32}]  # drop points matching all entries
 *   constraints: ["ranks <= 4"]   # filter expressions over config keys and `ranks`
 *   name_keys: [parallel.tp, training.lr]  # keys spelled in point names (default: swept)
 *   slurm: {partition: gpu, time: "01:00:00", ntasks_per_node: 8, ...}  # launcher defaults
 *   sim: {hardware: h100-sxm}     # --launcher sim: the hardware profile
 * Distributions: uniform, log_uniform, int_uniform (q: round to multiples of q).
 * Linked parameters (`link: KEY`, transitively) vary together: they need as many values as
 * each other and form one dimension of the grid (one draw of random). */
#ifndef LOOM_SWEEP_H
#define LOOM_SWEEP_H
#include <stdbool.h>

#include "loom/config.h"

typedef enum {
  LOOM_DIST_VALUES,
  LOOM_DIST_UNIFORM,
  LOOM_DIST_LOG_UNIFORM,
  LOOM_DIST_INT_UNIFORM,
} loom_sweep_dist;

typedef struct {
  char *key;                /* dotted config key */
  loom_sweep_dist dist;
  char **values;            /* VALUES: value texts as written */
  int nvalues;
  double min, max, q;       /* ranges; q > 0 rounds to multiples of q */
  int line;                 /* in the sweep file */
  char *link;               /* `link: KEY` as written, or NULL */
  int group;                /* index of the first parameter of its linked group (itself when
                               not linked); set by loom_sweep_load / loom_sweep_override */
} loom_sweep_param;

/* Slurm resources; "" / 0 = not given. */
typedef struct {
  char partition[64], account[64], qos[64], time[32], mem[32], constraint[64];
  int ntasks_per_node, cpus_per_task, gpus_per_node;
  char srun_args[256];      /* extra srun arguments, e.g. "--mpi=pmix" */
  char extra[512];          /* extra "#SBATCH" lines, separated by ';' */
} loom_slurm_opts;

typedef struct {
  char *path;               /* the sweep file */
  char *name;
  char *base;               /* resolved base config path, or NULL for the defaults */
  char **overrides;
  int noverrides;
  loom_sweep_param *params;
  int nparams;
  bool random;
  long num_runs, seed;
  /* exclude[i] is a list of key=value texts that must all match */
  char ***exclude;
  int *nexclude_keys;
  int nexclude;
  char **constraints;
  int nconstraints;
  char **name_keys;         /* NULL = the swept keys */
  int nname_keys;
  loom_slurm_opts slurm;
  char hardware[256];       /* sim: {hardware: NAME}; "" = not given */
  char **choices;           /* config group choices "GROUP=OPTION" for the base (loom train -m) */
  int nchoices;
} loom_sweep_spec;

int loom_sweep_load(loom_sweep_spec *s, const char *path);
/* `loom train -m CONFIG OVERRIDES...`: overrides with comma lists (KEY=A,B) or
 * range(START,STOP[,STEP]) become grid parameters (in the order given), the others apply to
 * every point; choices are config group choices (GROUP=OPTION) for the base. Named
 * "multirun". Errors when no override sweeps anything. */
int loom_sweep_multirun_spec(loom_sweep_spec *s, const char *config_path,
                             char *const *choices, int nchoices, char *const *overrides,
                             int noverrides);
void loom_sweep_spec_free(loom_sweep_spec *s);
/* A command-line override on top of a loaded sweep file (Hydra grammar, as loom train):
 * KEY=VALUE fixes KEY for every point (a swept KEY leaves the sweep, and its linked
 * parameters keep varying together), ~KEY resets it to the default. Points that become
 * identical are kept once. */
int loom_sweep_override(loom_sweep_spec *s, const char *expr);

typedef struct {
  char *name;               /* descriptive, unique within the sweep */
  loom_config cfg;          /* resolved; run.name = name */
  char **assign;            /* "key=value" of each swept parameter, in parameter order */
  int nassign;
  int ranks;                /* dp * tp * pp * sp */
  char *config_path;        /* set once written / when read back from a directory */
  bool skip;                /* run_sweep.sh skip flag / --skip */
  char *resume_dir;         /* a continued sweep: the run directory this point's stopped run
                               resumes in (`loom train --resume DIR`), NULL: start it afresh */
} loom_sweep_point;

typedef struct {
  char *name;               /* sweep name */
  loom_sweep_point *points;
  int n;
  loom_slurm_opts slurm;
  char hardware[256];       /* the sweep file's sim: {hardware: ...} ("" = not given) */
} loom_sweep_plan;

/* Expand a spec into points: grid (cartesian product, last parameter fastest) or random
 * (num_runs distinct points drawn with the seed), minus excluded points and points failing
 * a constraint. Every point's config is validated. */
int loom_sweep_expand(const loom_sweep_spec *s, loom_sweep_plan *plan);
void loom_sweep_plan_free(loom_sweep_plan *plan);

/* Point name: prefix (model preset, else arch) + one part per name key (tp2, bs4, lr3e-4,
 * bf16, ckpt, ...). Exposed for tests. */
char *loom_sweep_point_name(const loom_config *cfg, char **keys, int nkeys);

/* Write <dir>/<name>.yaml per point, manifest.txt and run_sweep.sh (force: replace a
 * previous generation in dir). Sets each point's config_path. */
int loom_sweep_write(loom_sweep_plan *plan, const char *dir, const char *sweep_file, bool force);
/* Read a generated directory back (manifest.txt + the configs). */
int loom_sweep_read_dir(loom_sweep_plan *plan, const char *dir);

/* ---- running -------------------------------------------------------------------------------- */
typedef struct loom_sweep_launcher loom_sweep_launcher;

typedef struct {
  const char *launcher;     /* "local" | "slurm" | "sim" */
  int parallel;             /* local: points run at once (>= 1) */
  bool stop_on_failure;     /* else continue past failures */
  bool dry_run;             /* slurm: write scripts, do not submit; local, sim: print commands */
  const char *log_root;     /* logs/ */
  const char *loom_bin;     /* the loom executable children run */
  const char *mpirun;       /* "mpirun" */
  const char *mpirun_args;  /* extra mpirun arguments (split on spaces) */
  const char *sbatch;       /* "sbatch" */
  int color;                /* 1 always, 0 never, -1 when stdout is a terminal */
  char **skip;              /* point names to skip */
  int nskip;
  loom_slurm_opts slurm;    /* merged over the sweep file's slurm: */
  const char *hardware;     /* sim: profile name or file (NULL: the sweep file's, else
                               h100-sxm) */
  int resume;               /* 1: continue the newest unfinished execution of this sweep (error
                               when none), -1: continue one if there is, 0: a new execution */
  const char *resume_hint;  /* the command that continues this sweep, printed when stopped */
} loom_sweep_run_opts;

/* Status of one point after the runner is done with it. */
typedef enum {
  LOOM_PT_PENDING,
  LOOM_PT_SUCCESS,
  LOOM_PT_FAILED,
  LOOM_PT_SKIPPED,
  LOOM_PT_SUBMITTED,  /* handed to a batch system */
  LOOM_PT_DRY_RUN,    /* --dry-run: command or script shown/written, nothing run */
  LOOM_PT_OOM,        /* sim: the point does not fit in the device's memory (not a failure
                         of the sweep) */
  LOOM_PT_STOPPED,    /* stopped by a signal to the runner (its run saved a checkpoint and
                         says "stopped"): continued by the next `loom sweep run --resume` */
} loom_point_status;

/* Run every point; writes <log_root>/sweep_<timestamp>/ (<name>.log, summary.txt,
 * summary.csv, state.tsv) and returns its path in *log_dir (malloc'd). Returns 0 when
 * every run that was started succeeded (or was submitted, or was simulated, out of memory
 * included), 1 when some failed, -1 on error, 128 + the signal when a signal stopped it.
 * SIGINT, SIGTERM or SIGUSR1 to the runner is passed to its running `loom train` points
 * (through LOOM_STOP_FILE, as the train supervisor does: each finishes its step, saves a
 * checkpoint and ends "stopped"), no further point starts, and state.tsv records them
 * STOPPED, the others PENDING; a second signal kills the running points at once.
 * With o->resume (1, or -1 when there is one) the newest execution of this sweep under
 * log_root that did not finish (points PENDING or STOPPED, the same point names) is continued
 * in its directory: a stopped point resumes its run from its newest complete checkpoint
 * (`loom train --resume RUN_DIR`), or starts again when it has none; finished points stay. */
int loom_sweep_run(loom_sweep_plan *plan, const loom_sweep_run_opts *o, char **log_dir);
/* Rebuild summary.txt / summary.csv of a sweep log directory (e.g. once Slurm jobs end). */
int loom_sweep_summarize_dir(const char *log_dir);

#endif
