/* Hardware profiles: the shipped ones load and carry their datasheet numbers; a profile
 * survives YAML output and parsing; bad files fail with the file, line and key; GEMM
 * efficiency interpolation (curve and measured grid); network tiers by group placement; the
 * instruction peaks of loom bench's peak section (round trip, refusals, threads table). */
#include <math.h>

#include "sim_test_util.h"

static void test_shipped(void) {
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "a100-80gb") == 0, "%s", loom_errmsg());
  CHECK(hw.peak_flops[LOOM_DT_FP16] == 312e12 && hw.mem_bw == 2039e9 && hw.devices_per_node == 8,
        "A100 datasheet numbers");
  CHECK(hw.n_tiers == 2 && hw.tier[0].bandwidth == 300e9 && hw.tier[1].bandwidth == 25e9,
        "NVLink 300 GB/s, HDR 25 GB/s per GPU");
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  CHECK(hw.peak_flops[LOOM_DT_BF16] == 989e12 && hw.mem_bw == 3350e9 && hw.tier[0].bandwidth == 450e9,
        "H100 SXM datasheet numbers");
  CHECK(load_hw(&hw, "h200") == 0, "%s", loom_errmsg());
  CHECK(hw.peak_flops[LOOM_DT_BF16] == 989e12 && hw.mem_bw == 4800e9 &&
            fabs(hw.mem_bytes - 139.80 * 1073741824.0) < 1e6,
        "H200 datasheet numbers and the 139.80 GiB CUDA reports");
  /* the loader by name finds configs/hardware under the source tree */
  CHECK(loom_hw_load(&hw, "h100-sxm") == 0 && !strcmp(hw.name, "h100-sxm"), "%s", loom_errmsg());
  CHECK(loom_hw_load(&hw, "no-such-gpu") != 0 && HAS(loom_errmsg(), "unknown hardware profile 'no-such-gpu'", "a100-80gb"),
        "unknown name");
}

/* FP8, grouped GEMMs, the all-to-all over nodes and the recipe of a profile */
static void test_moe_keys(void) {
  loom_hw_profile hw, b;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  CHECK(hw.peak_flops[LOOM_DT_FP8] == 1979e12 && hw.n_gemm_eff_fp8 > 0 && hw.n_grouped > 0 &&
            hw.ep_overlap && hw.recipe == LOOM_RECIPE_MEGATRON,
        "h100-sxm: the FP8 peak and curve, grouped GEMMs, EP overlap, Megatron");
  /* an FP8 GEMM of 4096^3 at 0.67 of 1979 TFLOP/s; a device without FP8 runs bf16's */
  double t = loom_hw_gemm_time(&hw, LOOM_DT_FP8, LOOM_GEMM_FWD, 4096, 4096, 4096, 1);
  CHECK(fabs(t - (2 * 4096.0 * 4096 * 4096 / (1979e12 * 0.67) + hw.gemm_overhead)) < 1e-9,
        "FP8 GEMM %g s", t);
  loom_hw_profile nf = hw;
  nf.peak_flops[LOOM_DT_FP8] = 0;
  CHECK(loom_hw_gemm_time(&nf, LOOM_DT_FP8, LOOM_GEMM_FWD, 4096, 4096, 4096, 1) ==
            loom_hw_gemm_time(&nf, LOOM_DT_BF16, LOOM_GEMM_FWD, 4096, 4096, 4096, 1),
        "no FP8 peak: the bf16 GEMM");
  /* 4 groups of 256 rows: one 1024-row GEMM at 0.82 */
  double g = loom_hw_grouped_gemm_time(&hw, LOOM_DT_BF16, LOOM_GEMM_FWD, 4, 256, 4096, 2048);
  double one = loom_hw_gemm_time(&hw, LOOM_DT_BF16, LOOM_GEMM_FWD, 1024, 4096, 2048, 1);
  CHECK(fabs((g - hw.gemm_overhead) * 0.82 - (one - hw.gemm_overhead)) < 1e-12,
        "grouped GEMM %g s against one GEMM %g s", g, one);
  /* an all-to-all over 4 nodes of 8: 7/32 of each rank's bytes over NVLink, 24/32 over its NIC
   * at the same time, one latency per other node */
  double bytes = 134217728, a2a = loom_hw_coll_time(&hw, LOOM_COLL_ALLTOALL, bytes, 1, 32);
  const loom_hw_tier *ib = &hw.tier[1], *nv = &hw.tier[0];
  double want = fmax(bytes * 24 / 32 / (ib->bandwidth * ib->efficiency[LOOM_COLL_ALLTOALL]) +
                         3 * ib->latency,
                     bytes * 7 / 32 / (nv->bandwidth * nv->efficiency[LOOM_COLL_ALLTOALL]) +
                         7 * nv->latency);
  CHECK(fabs(a2a - want) < 1e-12, "all-to-all over 4 nodes: %g s, want %g", a2a, want);
  CHECK(loom_hw_coll_time(&hw, LOOM_COLL_ALLTOALL, bytes, 1, 8) ==
            bytes * 7 / 8 / (nv->bandwidth * nv->efficiency[LOOM_COLL_ALLTOALL]) + 7 * nv->latency,
        "inside a node: the ring's accounting");
  CHECK(load_hw(&hw, "h100-fsdp2") == 0 && hw.recipe == LOOM_RECIPE_FSDP2, "%s", loom_errmsg());
  CHECK(load_hw(&hw, "h100-sxm-hf") == 0 && hw.recipe == LOOM_RECIPE_HF_EAGER, "%s", loom_errmsg());
  /* the new keys survive the writer */
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  char *text = loom_hw_to_yaml(&hw, NULL);
  CHECK(loom_hw_parse(&b, text, "rt.yaml") == 0 && b.peak_flops[LOOM_DT_FP8] == 1979e12 &&
            b.n_gemm_eff_fp8 == hw.n_gemm_eff_fp8 && b.n_grouped == hw.n_grouped &&
            b.ep_overlap && b.recipe == LOOM_RECIPE_MEGATRON,
        "round trip: %s\n%s", loom_errmsg(), text);
  free(text);
}

static void test_roundtrip(void) {
  loom_hw_profile a, b;
  CHECK(load_hw(&a, "a100-80gb") == 0, "%s", loom_errmsg());
  a.grid_n[0] = 2, a.grid_n[1] = 1, a.grid_n[2] = 2; /* a measured grid as bench writes */
  a.grid_axis[0][0] = 64, a.grid_axis[0][1] = 1024, a.grid_axis[1][0] = 256;
  a.grid_axis[2][0] = 32, a.grid_axis[2][1] = 512;
  for (int r = 0; r < LOOM_GEMM_ROLES; r++)
    for (int i = 0; i < 4; i++) a.grid_eff[r][i] = 0.2 + 0.2 * i;
  a.vop_rate[LOOM_VOP_GELU_FWD] = 123e6;
  char *text = loom_hw_to_yaml(&a, "a note\nsecond line");
  CHECK(loom_hw_parse(&b, text, "roundtrip.yaml") == 0, "%s\n%s", loom_errmsg(), text);
  CHECK(b.peak_flops[LOOM_DT_FP16] == a.peak_flops[LOOM_DT_FP16] && b.n_tiers == a.n_tiers &&
            fabs(b.tier[0].efficiency[0] - a.tier[0].efficiency[0]) < 1e-4 &&
            b.grid_n[2] == 2 && fabs(b.grid_eff[2][3] - 0.8) < 1e-4 &&
            fabs(b.vop_rate[LOOM_VOP_GELU_FWD] - 123e6) < 1 && b.tp_overlap == a.tp_overlap &&
            fabs(b.overlap_slowdown - a.overlap_slowdown) < 1e-9,
        "round trip");
  free(text);
  /* the grid's order: written by bench as gemm, kept both ways; a grid without the key is an
   * older bench's, measured in the layer's order */
  for (int layer = 0; layer < 2; layer++) {
    a.grid_layer_order = layer;
    text = loom_hw_to_yaml(&a, NULL);
    CHECK(strstr(text, layer ? "order: layer" : "order: gemm") &&
              loom_hw_parse(&b, text, "order.yaml") == 0 && b.grid_layer_order == layer,
          "grid order %d: %s", layer, loom_errmsg());
    free(text);
  }
  CHECK(loom_hw_parse(&b, "name: x\ndevice:\n  gemm_grid: {m: [64], n: [64], k: [32], fwd: [0.5], "
                          "dgrad: [0.5], wgrad: [0.5]}\n", "old.yaml") == 0 &&
            b.grid_layer_order == 1,
        "a grid without order is read in the layer's order: %s", loom_errmsg());
  /* a loom-cpu profile keeps which bf16 path its machine's trainer takes, both ways */
  for (int native = 0; native < 2; native++) {
    a.engine_loom_cpu = true, a.bf16_native = native;
    text = loom_hw_to_yaml(&a, NULL);
    const char *line = native ? "bf16_gemm: native" : "bf16_gemm: rounded";
    CHECK(loom_hw_parse(&b, text, "roundtrip.yaml") == 0 && b.engine_loom_cpu &&
              b.bf16_native == native && strstr(text, line),
          "bf16_gemm round trip (%d): %s\n%s", native, loom_errmsg(), text);
    free(text);
  }
}

static void bad(const char *text, const char *what1, const char *what2) {
  loom_hw_profile hw;
  CHECK(loom_hw_parse(&hw, text, "bad.yaml") != 0, "accepted: %s", text);
  CHECK(HAS(loom_errmsg(), "bad.yaml", what1, what2), "message for: %s", text);
}

static void test_errors(void) {
  bad("name: x\ndevice:\n  peak_tflop: {fp16: 1}\n", "bad.yaml:3", "unknown key 'peak_tflop'");
  bad("name: x\ndevice:\n  memory_bandwidth_gbs: fast\n", ":3", "expected a number");
  bad("name: x\ndevice:\n  gemm_efficiency: [[64, 0.5], [32, 0.6]]\n", "gemm_efficiency", "increase");
  bad("name: x\nnetwork:\n  - name: a\n    domain: 8\n", "bandwidth_gbs", "tier 'a'");
  bad("name: x\nnetwork:\n  - {name: a, domain: 8, bandwidth_gbs: 1}\n", "last one", "domain must be 0");
  bad("name: x\ndevice:\n  attention: paged\n", ":3", "flash, unfused or loom");
  bad("name: x\nruntime:\n  engine: tpu\n", "runtime.engine", "gpu or loom-cpu");
  bad("name: x\nruntime:\n  tp_style: fsdp\n", "bad.yaml:3", "runtime.tp_style must be megatron or dtensor");
  bad("name: x\nruntime:\n  bf16_gemm: amx\n", "bad.yaml:3", "runtime.bf16_gemm must be native or rounded");
  bad("name: x\nruntime:\n  elementwise: compiled\n", ":3", "runtime.elementwise must be fused or eager");
  bad("name: x\nruntime:\n  vision_sp_local_windows: maybe\n", ":3", "vision_sp_local_windows");
  bad("name: x\nruntime:\n  host_dispatch_us: 90\n", "bad.yaml:3", "runtime.host_dispatch_us");
  bad("name: x\nruntime:\n  host_dispatch_us: {dtensor: 90, python: 8}\n", "bad.yaml:3",
      "unknown key 'python'");
  bad("name: x\nruntime:\n  host_dispatch_us:\n    dtensor: -1\n", "bad.yaml:4",
      "runtime.host_dispatch_us.dtensor must be a finite number >= 0");
  bad("name: x\nruntime:\n  host_dispatch_us: {eager: fast}\n", ":3",
      "runtime.host_dispatch_us.eager");
  bad("name: x\nruntime:\n  host_dispatch_us: {eager: 1e400}\n", ":3",
      "runtime.host_dispatch_us.eager");
  bad("name: x\ndevice:\n  gemm_tile: [128]\n", ":3", "device.gemm_tile: expected [rows, columns]");
  bad("name: x\ndevice:\n  attention_tile: [128, 0]\n", ":3", "device.attention_tile: expected [rows, columns]");
  bad("name: x\ndevice:\n  gemm_tile: [1e300, 128]\n", ":3", "two numbers in [1, 65536]");
  bad("name: x\ndevice:\n  attention_head_dim_step: 1e9\n", "bad.yaml", "attention_head_dim_step must be in [0, 4096]");
  bad("name: x\ndevice:\n  memory_fragmentation: 1\n", "bad.yaml", "device.memory_fragmentation must be in [0, 1)");
  bad("name: x\ndevice:\n  memory_fragmentation: -0.1\n", ":3", "must be >= 0");
  bad("name: x\nruntime:\n  recipe: deepspeed\n", "bad.yaml:3",
      "runtime.recipe must be megatron, fsdp2, hf-eager or loom");
  bad("name: x\nruntime:\n  engine: gpu\n  recipe: loom\n", ":4", "needs runtime.engine loom-cpu");
  bad("name: x\nruntime:\n  ep_comm_overlap: sometimes\n", ":3", "ep_comm_overlap");
  bad("name: x\ndevice:\n  peak_tflops: {fp4: 1}\n", ":3", "unknown key 'fp4'");
  bad("name: x\ndevice:\n  grouped_gemm_efficiency: [[512, 0.9], [256, 1]]\n", "bad.yaml",
      "device.grouped_gemm_efficiency: [dimension, efficiency] pairs with increasing");
  bad("name: x\ndevice:\n  gemm_efficiency_fp8: [[64, 1.5]]\n", "bad.yaml",
      "device.gemm_efficiency_fp8");
  bad("name: [x\n", "bad.yaml", "YAML");
  bad("- a\n- b\n", "bad.yaml:1", "mapping");
}

static void test_interpolation(void) {
  loom_hw_profile hw;
  loom_hw_defaults(&hw);
  hw.n_gemm_eff = 2;
  hw.gemm_eff_dim[0] = 64, hw.gemm_eff[0] = 0.2;
  hw.gemm_eff_dim[1] = 1024, hw.gemm_eff[1] = 0.8;
  CHECK_CLOSE(loom_hw_gemm_eff(&hw, LOOM_GEMM_FWD, 4096, 256, 4096), 0.2 + 0.6 * 2 / 4, 1e-12,
              "log2 interpolation by the smallest dimension");
  CHECK_CLOSE(loom_hw_gemm_eff(&hw, LOOM_GEMM_FWD, 8, 8, 8), 0.2, 1e-12, "clamped below");
  hw.grid_n[0] = hw.grid_n[1] = hw.grid_n[2] = 2;
  for (int a = 0; a < 3; a++) hw.grid_axis[a][0] = 32, hw.grid_axis[a][1] = 512;
  for (int i = 0; i < 8; i++) hw.grid_eff[LOOM_GEMM_WGRAD][i] = (i & 4 ? 0.4 : 0) + (i & 2 ? 0.2 : 0) + (i & 1 ? 0.1 : 0);
  CHECK_CLOSE(loom_hw_gemm_eff(&hw, LOOM_GEMM_WGRAD, 512, 32, 128), 0.4 + 0.1 * 0.5, 1e-12,
              "grid: trilinear in log2");
  /* a profile of the older loom bench measured dgrad and wgrad at the linear layer's (tokens,
   * out, in): the product dW (out, in) over tokens and dx (tokens, in) over out are looked up
   * there, so both readings of one measurement agree */
  for (int i = 0; i < 8; i++) hw.grid_eff[LOOM_GEMM_DGRAD][i] = hw.grid_eff[LOOM_GEMM_WGRAD][i];
  double wgrad = loom_hw_gemm_eff(&hw, LOOM_GEMM_WGRAD, 512, 32, 128);
  double dgrad = loom_hw_gemm_eff(&hw, LOOM_GEMM_DGRAD, 512, 32, 128);
  hw.grid_layer_order = 1;
  CHECK_CLOSE(loom_hw_gemm_eff(&hw, LOOM_GEMM_WGRAD, 32, 128, 512), wgrad, 1e-12,
              "layer order: dW (out 32, in 128) over 512 tokens is the layer (512, 32, 128)");
  CHECK_CLOSE(loom_hw_gemm_eff(&hw, LOOM_GEMM_DGRAD, 512, 128, 32), dgrad, 1e-12,
              "layer order: dx (512 tokens, in 128) over out 32 is the layer (512, 32, 128)");
  CHECK_CLOSE(loom_hw_gemm_eff(&hw, LOOM_GEMM_WGRAD, 512, 32, 128), 0.4 * 0.5 + 0.2, 1e-12,
              "layer order: dW (512, 32) over 128 tokens reads the layer (128, 512, 32)");
  hw.grid_layer_order = 0;
  /* tiers: tp (stride 1) of 8 stays in the node; dp across nodes uses the second tier */
  CHECK(load_hw(&hw, "a100-80gb") == 0, "%s", loom_errmsg());
  CHECK(loom_hw_group_tier(&hw, 1, 8) == 0 && loom_hw_group_tier(&hw, 8, 2) == 1 &&
            loom_hw_group_tier(&hw, 2, 4) == 0 && loom_hw_group_tier(&hw, 1, 16) == 1,
        "group placement on tiers");
}

/* The all-reduce's bandwidth by message size (network.all_reduce_size_factor, MB per rank):
 * read, interpolated in log2 of the size and clamped at the ends, applied to the all-reduce
 * only, written back as read; bad points refused. */
static void test_allreduce_size_factor(void) {
  const char *yaml = "name: x\nnetwork:\n  - name: shm\n    domain: 0\n    bandwidth_gbs: 2\n"
                     "    latency_us: 10\n    all_reduce_size_factor: [[1, 1], [16, 0.5]]\n";
  loom_hw_profile hw, b;
  CHECK(loom_hw_parse(&hw, yaml, "f.yaml") == 0, "%s", loom_errmsg());
  const loom_hw_tier *t = &hw.tier[0];
  CHECK(t->n_ar_size == 2 && t->ar_size_bytes[1] == 16e6 && t->ar_size_factor[1] == 0.5,
        "read: %d points", t->n_ar_size);
  /* 2 ranks: the ring moves the bytes once each way (2 (p-1)/p = 1), 2 latency steps */
  double lat = 2 * 10e-6;
  struct {
    double bytes, factor;
  } at[] = {{0.5e6, 1}, {1e6, 1}, {4e6, 0.75}, {16e6, 0.5}, {64e6, 0.5}};
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    double got = loom_hw_coll_time(&hw, LOOM_COLL_ALLREDUCE, at[i].bytes, 1, 2);
    double want = at[i].bytes / (2e9 * at[i].factor) + lat; /* 4 MB: halfway in log2 */
    CHECK(fabs(got - want) < 1e-12, "all-reduce of %g MB: %g s, want %g", at[i].bytes / 1e6, got,
          want);
  }
  CHECK(fabs(loom_hw_coll_time(&hw, LOOM_COLL_ALLGATHER, 64e6, 1, 2) - (32e6 / 2e9 + 10e-6)) <
            1e-12,
        "the other collectives keep the line");
  char *text = loom_hw_to_yaml(&hw, NULL);
  CHECK(loom_hw_parse(&b, text, "rt.yaml") == 0 && b.tier[0].n_ar_size == 2 &&
            b.tier[0].ar_size_bytes[0] == 1e6 && b.tier[0].ar_size_factor[1] == 0.5,
        "round trip: %s\n%s", loom_errmsg(), text);
  free(text);
  const char *head = "name: x\nnetwork:\n  - name: shm\n    domain: 0\n    bandwidth_gbs: 2\n"
                     "    all_reduce_size_factor: ";
  const char *bads[] = {"[[4, 1], [1, 0.5]]", "[[1, 0]]", "[[0, 1]]", "[[1, 1, 2]]", "[1, 2]",
                        "[[1, 1], [1e305, 0.5]]"}; /* the last: infinite bytes */
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    char *doc = loom_sprintf("%s%s\n", head, bads[i]);
    bad(doc, ":6", "all_reduce_size_factor");
    free(doc);
  }
}

/* Found by fuzzing (tests/fuzz/regress/hw): numbers the cost model divides by or takes log2
 * of must be positive and finite, and the writer must produce a file that loads back to the
 * identical profile whatever the strings hold. */
static void test_fuzz_limits(void) {
  const char *dev = "name: x\ndevice:\n";
  char text[512];
  snprintf(text, sizeof text, "%s  gemm_size_efficiency: [[0, 0.9], [100, 1]]\n", dev);
  bad(text, "device.gemm_size_efficiency: point 1 has 0 GFLOP", "must be > 0");
  snprintf(text, sizeof text, "%s  gemm_efficiency: [[0, 0.5], [64, 0.9]]\n", dev);
  bad(text, "device.gemm_efficiency: dimension 0", "not a positive number");
  snprintf(text, sizeof text, "%s  peak_tflops: {fp32: 0, bf16: 100}\n", dev);
  bad(text, "device.peak_tflops.fp32 must be > 0", "use it");
  snprintf(text, sizeof text, "%s  memory_gib: 1e308\n", dev);
  bad(text, "device.memory_gib must be a finite number", "inf");
  snprintf(text, sizeof text, "%s  vector_melem_per_s: {adamw: -5}\n", dev);
  bad(text, "device.vector_melem_per_s.adamw must be a finite rate >= 0", "-5");
  snprintf(text, sizeof text,
           "%s  gemm_grid: {m: [64], n: [0], k: [32], fwd: [0.5], dgrad: [0.5], wgrad: [0.5]}\n", dev);
  bad(text, "device.gemm_grid.n: value 0", "positive");
  snprintf(text, sizeof text,
           "%s  gemm_grid: {m: [64], n: [64], k: [32], fwd: [0.5], dgrad: [0], wgrad: [0.5]}\n", dev);
  bad(text, "device.gemm_grid.dgrad: efficiency 0", "(0, 1]");
  snprintf(text, sizeof text,
           "%s  gemm_grid: {order: sideways, m: [64], n: [64], k: [32], fwd: [0.5], dgrad: [0.5], "
           "wgrad: [0.5]}\n", dev);
  bad(text, "device.gemm_grid.order must be gemm", "sideways");
  snprintf(text, sizeof text, "%s  attention: loom\n  attention_gunits_per_s: {fwd: 1, bwd: -1}\n", dev);
  bad(text, "device.attention_gunits_per_s.bwd must be a finite number >= 0", "-1");
  snprintf(text, sizeof text, "%s  attention_row_gunits_per_s: {fwd: -2}\n", dev);
  bad(text, "device.attention_row_gunits_per_s.fwd must be a finite number >= 0", "-2");
  snprintf(text, sizeof text, "%s  attention_row_gunits_per_s: {fwd: 1, back: 1}\n", dev);
  bad(text, "device.attention_row_gunits_per_s", "back");
  snprintf(text, sizeof text, "%s  attention_row_ns: {bwd: -3}\n", dev);
  bad(text, "device.attention_row_ns.bwd must be a finite number >= 0", "-3");
  snprintf(text, sizeof text, "%s  attention_row_ns: {fwd: 1, forward: 1}\n", dev);
  bad(text, "device.attention_row_ns", "forward");
  /* the time-sharing the collectives were timed under: >= 1 (a core each), refused below */
  bad("name: x\nnode:\n  collective_ranks_per_core: 0.5\n",
      "node.collective_ranks_per_core must be in [1, 1024]", "found 0.5");
  bad("name: x\nnode:\n  collective_ranks_per_core: two\n", "node.collective_ranks_per_core",
      "two");
  bad("name: x\nnetwork:\n  - {name: shm, domain: 0, bandwidth_gbs: 1, ranks_per_core: 0}\n",
      "network tier 'shm': ranks_per_core must be in [1, 1024]", "found 0");

  loom_mkdir_p("sim-hw.tmp/dir.yaml"); /* malloc(INT64_MAX) abort before */
  loom_hw_profile d;
  CHECK(loom_hw_load_file(&d, "sim-hw.tmp/dir.yaml") != 0 &&
            strstr(loom_errmsg(), "hardware profile 'sim-hw.tmp/dir.yaml' is a directory"),
        "directory: %s", loom_errmsg());

  /* quotes, backslashes, controls and non-ASCII in the names; numbers that %.4g would round */
  loom_hw_profile a, b;
  const char *src = "name: \"h\\\"x\"\n"
                    "description: \"tab\\there \\\"q\\\" \\x85 NEL, caf\xc3\xa9, \\x01\"\n"
                    "device:\n  memory_gib: 79.123456789\n  memory_bandwidth_gbs: 2039.000001\n"
                    "  gemm_overhead_us: 3.3333333333333335\n"
                    "node:\n  devices: 2\n  collective_ranks_per_core: 2\n"
                    "network:\n  - {name: \"a: b # c\", domain: 8, bandwidth_gbs: 300.0000001,"
                    " ranks_per_core: 1}\n"
                    "  - {name: \"\\u2028\", domain: 0, bandwidth_gbs: 25, latency_us: 1e-9}\n";
  CHECK(loom_hw_parse(&a, src, "quoted.yaml") == 0, "%s", loom_errmsg());
  CHECK(!strcmp(a.name, "h\"x") && !strcmp(a.tier[0].name, "a: b # c") &&
            !strcmp(a.tier[1].name, "\xe2\x80\xa8"),
        "names as written: [%s] [%s]", a.name, a.tier[0].name);
  char *w = loom_hw_to_yaml(&a, NULL);
  CHECK(loom_hw_parse(&b, w, "quoted.yaml") == 0, "written profile does not load: %s\n%s",
        loom_errmsg(), w);
  CHECK(memcmp(&a, &b, sizeof a) == 0, "written profile loads back different:\n%s", w);
  CHECK(a.coll_ranks_per_core == 2 && strstr(w, "  collective_ranks_per_core: 2\n"),
        "node.collective_ranks_per_core read and written:\n%s", w);
  /* a tier's own: the first tier's 1 over the node's 2; the second inherits (0, not written) */
  CHECK(a.tier[0].ranks_per_core == 1 && a.tier[1].ranks_per_core == 0 &&
            strstr(w, "    ranks_per_core: 1\n") && !strstr(strstr(w, "ranks_per_core: 1\n") + 1,
                                                        "ranks_per_core"),
        "network tiers' ranks_per_core read and written:\n%s", w);
  CHECK(loom_hw_coll_sharing(&a, 1, 8) == 1 && loom_hw_coll_sharing(&a, 8, 2) == 2,
        "the tier's sharing (1) inside a domain of 8, the node's (2) across");
  CHECK(strstr(w, "memory_gib: 79.123456789\n") && strstr(w, "latency_us: 1e-09\n") &&
            strstr(w, "bandwidth_gbs: 300.0000001\n") && strstr(w, "latency_us: 6\n") == NULL,
        "numbers in their shortest exact form:\n%s", w);
  free(w);
}

/* the seed's stack: its profile's keys load, survive YAML output, and only change what they
 * model (a GEMM on whole tiles; h100-sxm and h100-sxm-hf share the device curve) */
static void test_seed_profile(void) {
  loom_hw_profile a, b, meg;
  CHECK(load_hw(&a, "h100-sxm-hf") == 0 && load_hw(&meg, "h100-sxm") == 0, "%s", loom_errmsg());
  CHECK(a.tp_dtensor && a.vision_sp_local_windows && a.elementwise_eager && !a.tp_overlap &&
            a.gemm_tile[0] == 128 && a.gemm_tile[1] == 128 && a.attn_tile[0] == 128 &&
            a.attn_tile[1] == 64 && a.attn_hdim_step == 32 && a.mem_fragmentation == 0.10,
        "h100-sxm-hf keys");
  CHECK(!meg.tp_dtensor && !meg.vision_sp_local_windows && !meg.elementwise_eager &&
            meg.gemm_tile[0] == 0 && meg.mem_fragmentation == 0 && meg.host_dtensor == 0 &&
            meg.host_eager == 0,
        "h100-sxm: Megatron's fused, overlapped stack and no quantisation");
  char *text = loom_hw_to_yaml(&a, NULL);
  CHECK(loom_hw_parse(&b, text, "seed.yaml") == 0, "%s\n%s", loom_errmsg(), text);
  CHECK(b.tp_dtensor && b.vision_sp_local_windows && b.elementwise_eager &&
            b.gemm_tile[0] == 128 && b.attn_tile[1] == 64 && b.attn_hdim_step == 32 &&
            b.mem_fragmentation == 0.10 && b.host_dtensor == a.host_dtensor &&
            b.host_eager == a.host_eager && fabs(a.host_dtensor - 90e-6) < 1e-15 &&
            fabs(a.host_eager - 8e-6) < 1e-15 &&
            strstr(text, "host_dispatch_us: {dtensor: 90, eager: 8}\n"),
        "round trip:\n%s", text);
  free(text);
  /* tile quantisation: 160 columns on 128-wide tiles compute 256; multiples of the tile lose
   * nothing; the efficiency is the curve's times that share */
  CHECK(fabs(loom_hw_gemm_quant(&a, 4096, 160) - 160.0 / 256) < 1e-12, "160 of 256");
  CHECK(loom_hw_gemm_quant(&a, 4096, 1280) == 1 && loom_hw_gemm_quant(&meg, 4096, 160) == 1,
        "whole tiles / no tiles");
  CHECK(fabs(loom_hw_gemm_quant(&a, 100, 100) - 1e4 / (128.0 * 128)) < 1e-12, "both dims padded");
  double ea = loom_hw_gemm_eff(&a, LOOM_GEMM_FWD, 8192, 160, 1280);
  double em = loom_hw_gemm_eff(&meg, LOOM_GEMM_FWD, 8192, 160, 1280);
  CHECK(fabs(ea - em * 160.0 / 256) < 1e-12, "efficiency %.6f = %.6f x 160/256", ea, em);
}

/* loom's flash attention kernel as loom bench measures it: the pairs of its tile grid (a
 * causal diagonal tile computed whole) plus a term per query row; without attention_tile the
 * causal pairs alone, as profiles before the tiles were read */
static void test_loom_attention(void) {
  loom_hw_profile hw;
  loom_hw_defaults(&hw);
  hw.attention = LOOM_ATTN_LOOM;
  hw.attn_rate_fwd = 10e9, hw.attn_rate_bwd = 5e9;
  CHECK_CLOSE(loom_hw_causal_tile_pairs(&hw, 100), 100 * 101 / 2.0, 1e-12, "no tiles: causal pairs");
  CHECK_CLOSE(loom_hw_loom_attn_time(&hw, false, 5050, 100, 64), 5050 * 64 / 10e9, 1e-12,
              "no row rate: pairs only");
  hw.attn_tile[0] = hw.attn_tile[1] = 64;
  /* queries 0..63 compute keys 0..63 (the diagonal tile whole), 64..99 keys 0..99 */
  CHECK_CLOSE(loom_hw_causal_tile_pairs(&hw, 100), 64 * 64 + 36 * 100, 1e-12, "partial last tile");
  CHECK_CLOSE(loom_hw_causal_tile_pairs(&hw, 128), 64 * 64 + 64 * 128, 1e-12, "two whole tiles");
  CHECK_CLOSE(loom_hw_causal_tile_pairs(&hw, 2048), 64 * 64 * 32 * 33 / 2.0, 1e-12, "32 tiles");
  hw.attn_tile[1] = 32; /* unequal tiles, counted one query tile at a time: 64 queries see 64 */
  CHECK_CLOSE(loom_hw_causal_tile_pairs(&hw, 100), 64 * 64 + 36 * 100, 1e-12, "64 x 32 tiles");
  hw.attn_tile[0] = 32, hw.attn_tile[1] = 64; /* 32 queries of a 64-key tile see all of it */
  CHECK_CLOSE(loom_hw_causal_tile_pairs(&hw, 100), 32 * 64 * 2 + 32 * 100 + 4 * 100, 1e-12,
              "32 x 64 tiles");
  hw.attn_tile[0] = hw.attn_tile[1] = 64;
  hw.attn_row_rate_fwd = 0.25e9, hw.attn_row_rate_bwd = 0.125e9;
  CHECK_CLOSE(loom_hw_loom_attn_time(&hw, true, 12288, 128, 48),
              12288 * 48 / 5e9 + 128 * 48 / 0.125e9, 1e-12, "backward: pairs and rows");
  /* a time per query row whatever head_dim: the same at 16 dims as at 128 */
  hw.attn_row_s_fwd = 250e-9, hw.attn_row_s_bwd = 31.25e-9;
  CHECK_CLOSE(loom_hw_loom_attn_time(&hw, true, 12288, 128, 48),
              12288 * 48 / 5e9 + 128 * 48 / 0.125e9 + 128 * 31.25e-9, 1e-12,
              "backward: pairs, rows and the per-row time");
  CHECK_CLOSE(loom_hw_loom_attn_time(&hw, false, 12288, 128, 128) -
                  loom_hw_loom_attn_time(&hw, false, 12288, 128, 16),
              112 * (12288 / 10e9 + 128 / 0.25e9), 1e-12, "the per-row time does not scale with D");
  /* the profile keeps the row rates and times both ways */
  char *text = loom_hw_to_yaml(&hw, NULL);
  loom_hw_profile b;
  CHECK(loom_hw_parse(&b, text, "rows.yaml") == 0 && b.attn_row_rate_fwd == 0.25e9 &&
            b.attn_row_rate_bwd == 0.125e9 && b.attn_tile[0] == 64 &&
            fabs(b.attn_row_s_fwd / 250e-9 - 1) < 1e-15 &&
            fabs(b.attn_row_s_bwd / 31.25e-9 - 1) < 1e-15,
        "row rates and times round trip: %s\n%s", loom_errmsg(), text);
  free(text);
}

/* device.instruction_peak (loom bench's peak section) and runtime.gemm_backend: a round trip
 * keeps every figure bitwise; bad tables are refused naming the key; profiles without them
 * (GPUs, older benches) load as before. */
static const char *const ipeak_profile =
    "name: cpu\n"
    "device:\n"
    "  peak_tflops: {fp32: 0.1, bf16: 0.08}\n"
    "  instruction_peak:\n"
    "    threads: [1, 2, 4]\n"
    "    fp32_gflops: [175.625, 300.5, 560.25]\n"
    "    bf16_gflops: [2301.43, 4000, 7500]\n"
    "    bf16_unit: amx\n"
    "runtime:\n"
    "  engine: loom-cpu\n"
    "  gemm_backend: onednn\n";

static void test_instruction_peak_keys(void) {
  loom_hw_profile a, b;
  CHECK(loom_hw_parse(&a, ipeak_profile, "ip.yaml") == 0, "%s", loom_errmsg());
  CHECK(a.n_ipeak == 3 && a.ipeak_threads[0] == 1 && a.ipeak_threads[2] == 4 &&
            a.ipeak_flops[LOOM_DT_FP32][0] == 175.625e9 &&
            a.ipeak_flops[LOOM_DT_BF16][1] == 4000e9 && a.ipeak_bf16_unit == LOOM_UNIT_AMX &&
            !strcmp(a.gemm_backend, "onednn"),
        "instruction_peak read: %d entries, unit %d, backend '%s'", a.n_ipeak,
        (int)a.ipeak_bf16_unit, a.gemm_backend);
  char *text = loom_hw_to_yaml(&a, NULL);
  CHECK(loom_hw_parse(&b, text, "rt.yaml") == 0, "round trip: %s\n%s", loom_errmsg(), text);
  bool same = b.n_ipeak == a.n_ipeak && b.ipeak_bf16_unit == a.ipeak_bf16_unit &&
              !strcmp(b.gemm_backend, a.gemm_backend);
  for (int i = 0; same && i < a.n_ipeak; i++)
    same = b.ipeak_threads[i] == a.ipeak_threads[i] &&
           b.ipeak_flops[0][i] == a.ipeak_flops[0][i] && b.ipeak_flops[1][i] == a.ipeak_flops[1][i];
  CHECK(same && strstr(text, "bf16_unit: amx") && strstr(text, "threads: [1, 2, 4]") &&
            strstr(text, "gemm_backend: onednn"),
        "instruction_peak round trip, bitwise:\n%s", text);
  free(text);
  /* every unit name round-trips */
  for (int u = 0; u < LOOM_UNIT_COUNT; u++) {
    a.ipeak_bf16_unit = (loom_hw_unit)u;
    text = loom_hw_to_yaml(&a, NULL);
    CHECK(loom_hw_parse(&b, text, "rt.yaml") == 0 && b.ipeak_bf16_unit == (loom_hw_unit)u,
          "unit %s round trip: %s", loom_hw_unit_name((loom_hw_unit)u), loom_errmsg());
    free(text);
  }
  /* without the keys: nothing written, nothing read (GPU profiles, older loom bench) */
  CHECK(load_hw(&a, "h100-sxm") == 0 && a.n_ipeak == 0 && !a.gemm_backend[0], "h100: %s",
        loom_errmsg());
  text = loom_hw_to_yaml(&a, NULL);
  CHECK(!strstr(text, "instruction_peak") && !strstr(text, "gemm_backend"),
        "no instruction_peak written for a profile without one");
  free(text);
  CHECK(loom_hw_parse(&a, "name: old\ndevice:\n  peak_tflops: {fp32: 0.1}\nruntime:\n  engine: "
                          "loom-cpu\n", "old.yaml") == 0 && a.n_ipeak == 0,
        "an older CPU profile: %s", loom_errmsg());
  /* a profile built in memory is checked too */
  CHECK(loom_hw_parse(&a, ipeak_profile, "ip.yaml") == 0, "%s", loom_errmsg());
  a.ipeak_flops[LOOM_DT_BF16][1] = -1;
  CHECK(loom_hw_check(&a) != 0 && HAS(loom_errmsg(), "device.instruction_peak.bf16_gflops",
                                      "entry 2"),
        "in-memory negative figure refused");
  a.ipeak_flops[LOOM_DT_BF16][1] = 1e9, a.ipeak_threads[1] = 1;
  CHECK(loom_hw_check(&a) != 0 && HAS(loom_errmsg(), "device.instruction_peak.threads"),
        "in-memory thread counts that do not increase refused");
}

/* "name: x\ndevice:\n  instruction_peak:\n" + the table's lines */
static void bad_ipeak(const char *table, const char *what1, const char *what2) {
  char *text = loom_sprintf("name: x\ndevice:\n  instruction_peak:\n%s", table);
  bad(text, what1, what2);
  free(text);
}

static void test_instruction_peak_errors(void) {
  const char *unit = "    bf16_unit: amx\n";
  char t[512];
#define ROWS(th, f, bf) "    threads: " th "\n    fp32_gflops: " f "\n    bf16_gflops: " bf "\n"
  snprintf(t, sizeof t, "%s%s", ROWS("[1, 2]", "[-1, 2]", "[3, 4]"), unit);
  bad_ipeak(t, "bad.yaml:5", "device.instruction_peak.fp32_gflops: entry 1 is -1; GFLOP/s must be finite and > 0");
  snprintf(t, sizeof t, "%s%s", ROWS("[1, 2]", "[1, 2]", "[3, 0]"), unit);
  bad_ipeak(t, "bad.yaml:6", "device.instruction_peak.bf16_gflops: entry 2 is 0");
  snprintf(t, sizeof t, "%s%s", ROWS("[1, 2]", "[1]", "[3, 4]"), unit);
  bad_ipeak(t, "bad.yaml:5", "device.instruction_peak.fp32_gflops has 1 value, expected 2 (one per entry of threads)");
  snprintf(t, sizeof t, "%s%s", ROWS("[1, 2]", "[1, 2]", "[3, 4, 5]"), unit);
  bad_ipeak(t, "bad.yaml:6", "device.instruction_peak.bf16_gflops has 3 values, expected 2");
  snprintf(t, sizeof t, "%s%s", ROWS("[1, 2]", "[1, 2]", "[3, 4]"), "    bf16_unit: tpu\n");
  bad_ipeak(t, "bad.yaml:7", "device.instruction_peak.bf16_unit must be amx, avx512_bf16 or fma (the unit of the bf16 figure), found 'tpu'");
  snprintf(t, sizeof t, "%s%s", ROWS("[2, 1]", "[1, 2]", "[3, 4]"), unit);
  bad_ipeak(t, "bad.yaml:4", "device.instruction_peak.threads: expected increasing whole numbers >= 1, found 1 at entry 2");
  snprintf(t, sizeof t, "%s%s", ROWS("[0]", "[1]", "[3]"), unit);
  bad_ipeak(t, "bad.yaml:4", "device.instruction_peak.threads");
  snprintf(t, sizeof t, "%s%s", ROWS("[1.5]", "[1]", "[3]"), unit);
  bad_ipeak(t, "bad.yaml:4", "found 1.5 at entry 1");
  snprintf(t, sizeof t, "%s%s", ROWS("[1]", "[1]", "[1e400]"), unit);
  bad_ipeak(t, "bad.yaml:6", "device.instruction_peak.bf16_gflops");
  snprintf(t, sizeof t, "%s", ROWS("[1]", "[1]", "[3]"));
  bad_ipeak(t, "bad.yaml:4", "device.instruction_peak needs 'bf16_unit'");
  snprintf(t, sizeof t, "%s%s    fp16_gflops: [1]\n", ROWS("[1]", "[1]", "[3]"), unit);
  bad_ipeak(t, "bad.yaml", "unknown key 'fp16_gflops'");
  snprintf(t, sizeof t, "%s%s", ROWS("[]", "[]", "[]"), unit);
  bad_ipeak(t, "bad.yaml:4", "device.instruction_peak.threads: expected a list of 1..");
#undef ROWS
  bad("name: x\ndevice:\n  instruction_peak: 2300\n", "bad.yaml:3",
      "device.instruction_peak: expected a mapping");
  bad("name: x\nruntime:\n  gemm_backend: mkl\n", "bad.yaml:3",
      "runtime.gemm_backend must be onednn or openblas");
}

/* loom_hw_instruction_peak on the table [1, 2, 4] threads: exact entries; between and beyond
 * them the per-thread figure of the nearest smaller entry; below the first, the first */
static void test_instruction_peak_threads(void) {
  loom_hw_profile hw;
  CHECK(loom_hw_parse(&hw, ipeak_profile, "ip.yaml") == 0, "%s", loom_errmsg());
  char basis[160];
  CHECK(loom_hw_instruction_peak(&hw, LOOM_DT_BF16, 2, basis, sizeof basis) == 4000e9 &&
            !strcmp(basis, "2 threads"),
        "exact entry: %s", basis);
  CHECK(loom_hw_instruction_peak(&hw, LOOM_DT_FP32, 1, basis, sizeof basis) == 175.625e9 &&
            !strcmp(basis, "1 thread"),
        "exact entry, one thread: %s", basis);
  double three = loom_hw_instruction_peak(&hw, LOOM_DT_FP32, 3, basis, sizeof basis);
  CHECK(three == 300.5e9 / 2 * 3 && HAS(basis, "3 threads = 3 x the per-thread figure of 2 threads"),
        "between entries: %g (%s)", three, basis);
  double eight = loom_hw_instruction_peak(&hw, LOOM_DT_BF16, 8, basis, sizeof basis);
  CHECK(eight == 7500e9 / 4 * 8, "beyond the table: %g (%s)", eight, basis);
  CHECK(loom_hw_instruction_peak(&hw, LOOM_DT_FP16, 1, NULL, 0) == 0 &&
            loom_hw_instruction_peak(&hw, LOOM_DT_FP8, 2, NULL, 0) == 0,
        "no instruction peak of fp16 or fp8");
  /* a table that starts at 2 threads: 1 thread is held to the 2 threads' figure (never less) */
  hw.ipeak_threads[0] = 2, hw.ipeak_threads[1] = 4, hw.n_ipeak = 2;
  CHECK(loom_hw_instruction_peak(&hw, LOOM_DT_FP32, 1, basis, sizeof basis) == 175.625e9 &&
            HAS(basis, "taken as 2 threads'"),
        "below the first entry: %s", basis);
  hw.n_ipeak = 0;
  CHECK(loom_hw_instruction_peak(&hw, LOOM_DT_FP32, 1, basis, sizeof basis) == 0 && !basis[0],
        "no table: 0");
}

int main(void) {
  test_instruction_peak_keys();
  test_instruction_peak_errors();
  test_instruction_peak_threads();
  test_moe_keys();
  test_shipped();
  test_seed_profile();
  test_fuzz_limits();
  test_roundtrip();
  test_errors();
  test_interpolation();
  test_allreduce_size_factor();
  test_loom_attention();
  return harness_finish("test_sim_hw");
}
