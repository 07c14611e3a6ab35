/* `loom bench`: calibrate this machine (GEMM by shape through the trainer's BLAS, memory
 * bandwidth, every vector kernel, the attention kernel, and under mpirun the MPI collectives
 * between ranks) and write the hardware profile `loom sim --hardware this-machine` loads. */
#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/mesh.h"
#include "loom/sim_bench.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom bench [--out FILE] [--nproc N] [--quick] [--only SECTIONS] [--quiet]\n\n"
          "Measure this machine through the code the trainer runs and write a hardware profile\n"
          "(default configs/hardware/this-machine.yaml) for 'loom sim/plan --hardware\n"
          "this-machine'. A rank is one thread: loom bench measures with one, whatever\n"
          "OMP_NUM_THREADS says (as multi-rank training runs); the cores are the profile's\n"
          "devices, and a run's MFU counts its threads' cores ('loom train' on 2 threads is\n"
          "held to 2 cores' peak: the instruction peak of 2 threads where the peak section\n"
          "measured it, else twice one core's best GEMM).\n\n"
          "  --out FILE       where to write the profile\n"
          "  --nproc N        run under mpirun with N ranks to measure the MPI collectives too\n"
          "                   (same as 'mpirun -np N loom bench ...'; N = the cores is best)\n"
          "  --quick          shorter timings (noisier)\n"
          "  --only LIST      comma-separated sections to run, the others keep their defaults\n"
          "  --quiet          no measurement tables\n\n"
          "'loom bench model --help': a training step with every thread (tokens/s, MFU).\n\n"
          "sections:\n");
  int n;
  const loom_bench_section *s = loom_bench_sections(&n);
  for (int i = 0; i < n; i++) fprintf(out, "  %-10s %s\n", s[i].name, s[i].what);
}


static void cpu_model(char *out, size_t n) {
  snprintf(out, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10)) {
      char *v = strchr(line, ':');
      if (v) {
        v += 2;
        v[strcspn(v, "\n")] = 0;
        snprintf(out, n, "%s", v);
      }
      break;
    }
  fclose(f);
}

static int write_profile(loom_hw_profile *hw, const char *out, int world, double seconds,
                         int threads, int threads_asked) {
  char cpu[128], notes[2048], date[64];
  cpu_model(cpu, sizeof cpu);
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", localtime(&now));
  snprintf(hw->description, sizeof hw->description, "this machine: %s, %d cores as devices (one "
           "single-threaded rank each), measured by loom bench", cpu, hw->devices_per_node);
  snprintf(notes, sizeof notes,
           "Written by 'loom bench' on %s in %.1f s (%s; %d MPI rank%s; measured with %d "
           "thread%s per rank, the process had %d).\n"
           "Every number below is a measurement of this machine through loom's own kernels and\n"
           "MPI calls: GEMM rates by shape (cblas_sgemm as the linear layers call it), the\n"
           "instruction peaks (FMA, AVX512_BF16, AMX from registers; what MFU is taken against),\n"
           "memory bandwidth, the rate of each vector kernel, the reference attention%s%s.\n"
           "Re-run 'loom bench --nproc %d' after changing the machine or the BLAS.",
           date, seconds, cpu, world, world > 1 ? "s" : "", threads, threads == 1 ? "" : "s",
           threads_asked,
           world > 1 ? " and the MPI collectives between ranks" : " (no MPI: run with --nproc to measure collectives)",
           world > 1 ? ";\nthe devices measured on every rank at once, the slowest rank's kept" : "",
           hw->devices_per_node);
  char *yaml = loom_hw_to_yaml(hw, notes);
  loom_hw_profile check;
  int rc = loom_hw_parse(&check, yaml, out); /* what we write must load */
  char *dir = loom_strdup(out), *slash = strrchr(dir, '/');
  if (!rc && slash) {
    *slash = 0;
    rc = loom_mkdir_p(dir);
  }
  free(dir);
  if (!rc) rc = loom_write_file_atomic(out, yaml, strlen(yaml));
  free(yaml);
  return rc;
}

int loom_cmd_bench_model(int argc, char **argv); /* src/cli/cmd_bench_model.c */

int loom_cmd_bench(int argc, char **argv) {
  /* `loom bench model ...`: the single-process training step (speed issue) */
  if (argc > 1 && !strcmp(argv[1], "model")) return loom_cmd_bench_model(argc - 1, argv + 1);
  const char *out = "configs/hardware/this-machine.yaml", *nproc = NULL, *only = NULL;
  bool quiet = false, quick = false;
  const loom_cli_opt opts[] = {LOOM_OPT_FLAG("--quiet", &quiet), LOOM_OPT_FLAG("--quick", &quick),
                               LOOM_OPT_VALUE("--out", &out),    LOOM_OPT_VALUE("--nproc", &nproc),
                               LOOM_OPT_VALUE("--only", &only),  {0}};
  loom_cli_parser p = {.command = "bench", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  if (!prc && p.npos) {
    static const char *const subs[] = {"model", NULL};
    fprintf(stderr, "loom bench: unknown argument '%s'%s (see loom bench --help)\n", p.pos[0],
            loom_cli_did_you_mean(p.pos[0], subs));
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return usage(stdout), 0;
  if (prc) return 2;
  if (nproc && !getenv("OMPI_COMM_WORLD_SIZE"))
    return loom_cli_exec_mpirun("bench", opts, argc, argv, nproc, true);
  if (loom_dist_init(&argc, &argv)) return fprintf(stderr, "loom bench: %s\n", loom_errmsg()), 1;
  int rank = loom_dist_rank(), world = loom_dist_world();
  loom_mesh mesh;
  memset(&mesh, 0, sizeof mesh);
  loom_config cfg;
  loom_config_defaults(&cfg);
  cfg.parallel.dp = world;
  if (loom_mesh_create(&mesh, &cfg.parallel, 120)) {
    fprintf(stderr, "loom bench: %s\n", loom_errmsg());
    loom_dist_finalize();
    return 1;
  }
  loom_hw_profile hw;
  loom_bench_profile_defaults(&hw);
  if (only && loom_path_exists(out) && loom_hw_load_file(&hw, out)) /* update a profile */
    loom_bench_profile_defaults(&hw);
  loom_bench_ctx b = {quick ? 0.3 : 1.0, quiet || rank ? NULL : stdout, rank, world, &mesh.world_comm,
                      NULL};
  /* the profile's devices are cores: one thread per rank, whatever OMP_NUM_THREADS says (a
   * plain `loom bench` in a shell used every thread and wrote that as one core's peak, which
   * the trainer's MFU then multiplied by its threads) */
  int threads_asked = omp_get_max_threads();
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  double t0 = loom_now();
  int rc = loom_bench_run(&hw, &b, only);
  if (!rc && rank == 0) {
    rc = write_profile(&hw, out, world, loom_now() - t0, omp_get_max_threads(), threads_asked);
    if (!rc) printf("wrote %s (load it with --hardware this-machine or --hardware %s)\n", out, out);
  }
  if (rc) fprintf(stderr, "loom bench: %s\n", loom_errmsg());
  loom_mesh_free(&mesh);
  loom_dist_finalize();
  return rc ? 1 : 0;
}
