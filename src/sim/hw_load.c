/* Hardware profiles from YAML: defaults, the mapping of each key onto loom_hw_profile (with
 * file:line errors naming the key), and the cross-field checks. Layout of a file: see
 * configs/hardware/a100-80gb.yaml and docs/SIMULATOR.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/hw.h"
#include "loom/yaml.h"

void loom_hw_defaults(loom_hw_profile *hw) {
  memset(hw, 0, sizeof *hw);
  snprintf(hw->name, sizeof hw->name, "generic");
  for (int d = 0; d < LOOM_DT_COUNT; d++) hw->peak_flops[d] = hw->vector_flops[d] = 1e12;
  hw->peak_flops[LOOM_DT_FP8] = hw->vector_flops[LOOM_DT_FP8] = 0; /* none: bf16's */
  hw->n_gemm_eff = 1;
  hw->gemm_eff_dim[0] = 1;
  hw->gemm_eff[0] = 0.7;
  hw->mem_bytes = 16e9;
  hw->coll_ranks_per_core = 1;
  hw->mem_bw = 100e9;
  hw->mem_eff = 0.8;
  hw->attention = LOOM_ATTN_FLASH;
  hw->attn_eff = 0.5;
  hw->devices_per_node = 1;
  hw->n_tiers = 1;
  loom_hw_tier *t = &hw->tier[0];
  snprintf(t->name, sizeof t->name, "network");
  t->bandwidth = 10e9;
  t->latency = 10e-6;
  for (int k = 0; k < LOOM_COLL_COUNT; k++) t->efficiency[k] = 1;
  hw->tp_overlap = hw->dp_overlap = hw->p2p_overlap = true;
  hw->optimizer_bytes_per_param = 36;
}

static int read_dtype_map(const loom_yaml_node *n, const char *key, double scale, double *out) {
  static const char *const allowed[] = {"fp32", "bf16", "fp16", "fp8", NULL};
  if (loom_yaml_only(n, key, allowed)) return -1;
  for (int i = 0; i < n->n; i++) {
    const loom_yaml_pair *p = &n->pairs[i];
    loom_hw_dtype d;
    double v;
    if (loom_hw_dtype_parse(p->key->text, &d) || loom_yaml_number(p->value, key, &v)) return -1;
    if (v < 0) return loom_yaml_err(p->value, "%s.%s must be >= 0", key, p->key->text);
    out[d] = v * scale;
  }
  return 0;
}

/* [[x, y], ...] -> xs, ys */
static int read_pairs(const loom_yaml_node *n, const char *key, double *xs, double *ys,
                      int *count) {
  if (n->kind != LOOM_YAML_SEQUENCE || n->n < 1 || n->n > LOOM_HW_MAX_POINTS)
    return loom_yaml_err(n, "%s: expected a list of 1..%d [dimension, efficiency] pairs", key,
                         LOOM_HW_MAX_POINTS);
  for (int i = 0; i < n->n; i++) {
    const loom_yaml_node *p = n->items[i];
    if (p->kind != LOOM_YAML_SEQUENCE || p->n != 2)
      return loom_yaml_err(p, "%s: each entry is [dimension, efficiency]", key);
    if (loom_yaml_number(p->items[0], key, &xs[i]) || loom_yaml_number(p->items[1], key, &ys[i]))
      return -1;
  }
  *count = n->n;
  return 0;
}

static int read_list(const loom_yaml_node *n, const char *key, double *out, int cap, int *count) {
  if (n->kind != LOOM_YAML_SEQUENCE || n->n < 1 || n->n > cap)
    return loom_yaml_err(n, "%s: expected a list of 1..%d numbers", key, cap);
  for (int i = 0; i < n->n; i++)
    if (loom_yaml_number(n->items[i], key, &out[i])) return -1;
  *count = n->n;
  return 0;
}

/* [rows, columns] of a tile: two numbers in [1, 65536] (real tiles are at most 256 wide) */
static int read_tile(const loom_yaml_node *n, const char *key, double *out) {
  int got;
  if (read_list(n, key, out, 2, &got)) return -1;
  if (got != 2 || !(out[0] >= 1 && out[0] <= 65536) || !(out[1] >= 1 && out[1] <= 65536))
    return loom_yaml_err(n, "%s: expected [rows, columns], two numbers in [1, 65536]", key);
  return 0;
}

static int read_grid(loom_hw_profile *hw, const loom_yaml_node *g) {
  static const char *const allowed[] = {"m", "n", "k", "fwd", "dgrad", "wgrad", "order", NULL};
  static const char *const axes[] = {"m", "n", "k"}, *const roles[] = {"fwd", "dgrad", "wgrad"};
  if (loom_yaml_only(g, "device.gemm_grid", allowed)) return -1;
  const loom_yaml_node *o = loom_yaml_get(g, "order");
  hw->grid_layer_order = 1; /* no order key: written by a loom bench before the key existed */
  if (o) {
    char s[16];
    if (loom_yaml_string(o, "device.gemm_grid.order", s, sizeof s)) return -1;
    if (strcmp(s, "gemm") && strcmp(s, "layer"))
      return loom_yaml_err(o, "device.gemm_grid.order must be gemm (each role at its product's "
                              "m, n, k) or layer (dgrad and wgrad at the layer's tokens, out, "
                              "in), found '%s'", s);
    hw->grid_layer_order = !strcmp(s, "layer");
  }
  for (int a = 0; a < 3; a++) {
    const loom_yaml_node *n = loom_yaml_get(g, axes[a]);
    if (!n) return loom_yaml_err(g, "device.gemm_grid needs '%s'", axes[a]);
    if (read_list(n, "device.gemm_grid axis", hw->grid_axis[a], LOOM_HW_GRID, &hw->grid_n[a]))
      return -1;
  }
  int total = hw->grid_n[0] * hw->grid_n[1] * hw->grid_n[2], got;
  for (int r = 0; r < LOOM_GEMM_ROLES; r++) {
    const loom_yaml_node *n = loom_yaml_get(g, roles[r]);
    if (!n) return loom_yaml_err(g, "device.gemm_grid needs '%s'", roles[r]);
    if (read_list(n, "device.gemm_grid", hw->grid_eff[r],
                  LOOM_HW_GRID * LOOM_HW_GRID * LOOM_HW_GRID, &got))
      return -1;
    if (got != total)
      return loom_yaml_err(n, "device.gemm_grid.%s has %d values, expected m*n*k = %d", roles[r],
                           got, total);
  }
  return 0;
}

/* device.instruction_peak: {threads: [T...], fp32_gflops: [...], bf16_gflops: [...],
 * bf16_unit: amx | avx512_bf16 | fma}, one figure per entry of threads (every thread at
 * once, summed); every key required. */
static int read_instruction_peak(loom_hw_profile *hw, const loom_yaml_node *p) {
  static const char *const allowed[] = {"threads", "fp32_gflops", "bf16_gflops", "bf16_unit",
                                        NULL};
  if (p->kind != LOOM_YAML_MAPPING)
    return loom_yaml_err(p, "device.instruction_peak: expected a mapping {threads: [...], "
                            "fp32_gflops: [...], bf16_gflops: [...], bf16_unit: amx}");
  if (loom_yaml_only(p, "device.instruction_peak", allowed)) return -1;
  for (int k = 0; allowed[k]; k++)
    if (!loom_yaml_get(p, allowed[k]))
      return loom_yaml_err(p, "device.instruction_peak needs '%s'", allowed[k]);
  const loom_yaml_node *t = loom_yaml_get(p, "threads");
  double v[LOOM_HW_MAX_POINTS];
  int n, got;
  if (read_list(t, "device.instruction_peak.threads", v, LOOM_HW_MAX_POINTS, &n)) return -1;
  for (int i = 0; i < n; i++) {
    if (!(v[i] >= 1 && v[i] <= 1 << 20 && v[i] == floor(v[i])) || (i && !(v[i] > v[i - 1])))
      return loom_yaml_err(t, "device.instruction_peak.threads: expected increasing whole "
                              "numbers >= 1, found %g at entry %d", v[i], i + 1);
    hw->ipeak_threads[i] = (int)v[i];
  }
  static const char *const keys[2] = {"fp32_gflops", "bf16_gflops"};
  for (int d = 0; d < 2; d++) {
    const loom_yaml_node *x = loom_yaml_get(p, keys[d]);
    char where[48];
    snprintf(where, sizeof where, "device.instruction_peak.%s", keys[d]);
    if (read_list(x, where, v, LOOM_HW_MAX_POINTS, &got)) return -1;
    if (got != n)
      return loom_yaml_err(x, "%s has %d value%s, expected %d (one per entry of threads)", where,
                           got, got == 1 ? "" : "s", n);
    for (int i = 0; i < n; i++) {
      if (!(v[i] > 0) || !isfinite(v[i] * 1e9))
        return loom_yaml_err(x, "%s: entry %d is %g; GFLOP/s must be finite and > 0", where,
                             i + 1, v[i]);
      hw->ipeak_flops[d][i] = v[i] * 1e9;
    }
  }
  const loom_yaml_node *u = loom_yaml_get(p, "bf16_unit");
  char s[32];
  if (loom_yaml_string(u, "device.instruction_peak.bf16_unit", s, sizeof s)) return -1;
  if (loom_hw_unit_parse(s, &hw->ipeak_bf16_unit)) {
    loom_err_clear();
    return loom_yaml_err(u, "device.instruction_peak.bf16_unit must be amx, avx512_bf16 or fma "
                            "(the unit of the bf16 figure), found '%s'", s);
  }
  hw->n_ipeak = n;
  return 0;
}

/* device.KEY: {fwd: v, bwd: v}, each v times scale (1e9: G units per second; 1e-9: ns) */
static int read_fwd_bwd_scaled(const loom_yaml_node *d, const char *key, double scale,
                               double *fwd, double *bwd) {
  static const char *const fb[] = {"fwd", "bwd", NULL};
  const loom_yaml_node *n = loom_yaml_get(d, key);
  if (!n) return 0;
  char where[80];
  snprintf(where, sizeof where, "device.%s", key);
  if (loom_yaml_only(n, where, fb)) return -1;
  double *out[2] = {fwd, bwd};
  for (int i = 0; i < 2; i++) {
    const loom_yaml_node *x = loom_yaml_get(n, fb[i]);
    double v;
    snprintf(where, sizeof where, "device.%s.%s", key, fb[i]);
    if (x && loom_yaml_number(x, where, &v)) return -1;
    if (x) *out[i] = v * scale;
  }
  return 0;
}

/* {fwd, bwd} in G units per second */
static int read_fwd_bwd(const loom_yaml_node *d, const char *key, double *fwd, double *bwd) {
  return read_fwd_bwd_scaled(d, key, 1e9, fwd, bwd);
}

static int read_device(loom_hw_profile *hw, const loom_yaml_node *d) {
  static const char *const allowed[] = {
      "name", "memory_gib", "memory_reserved_gib", "memory_bandwidth_gbs", "memory_efficiency",
      "peak_tflops", "vector_tflops", "gemm_efficiency", "gemm_size_efficiency", "gemm_grid",
      "gemm_overhead_us", "kernel_overhead_us", "vector_melem_per_s", "attention",
      "attention_efficiency", "attention_gunits_per_s", "attention_row_gunits_per_s",
      "attention_row_ns",
      "gemm_tile", "attention_tile",
      "attention_head_dim_step", "memory_fragmentation", "gemm_efficiency_fp8",
      "grouped_gemm_efficiency", "instruction_peak", NULL};
  if (loom_yaml_only(d, "device", allowed)) return -1;
  const loom_yaml_node *n;
  double v;
#define NUM(key, field, scale)                                                                     \
  if ((n = loom_yaml_get(d, key))) {                                                               \
    if (loom_yaml_number(n, "device." key, &v)) return -1;                                         \
    if (v < 0) return loom_yaml_err(n, "device." key " must be >= 0");                             \
    hw->field = v * (scale);                                                                       \
  }
  NUM("memory_gib", mem_bytes, 1073741824.0)
  NUM("memory_reserved_gib", mem_reserved, 1073741824.0)
  NUM("memory_bandwidth_gbs", mem_bw, 1e9)
  NUM("memory_efficiency", mem_eff, 1)
  NUM("gemm_overhead_us", gemm_overhead, 1e-6)
  NUM("kernel_overhead_us", kernel_overhead, 1e-6)
  NUM("attention_efficiency", attn_eff, 1)
  NUM("attention_head_dim_step", attn_hdim_step, 1)
  NUM("memory_fragmentation", mem_fragmentation, 1)
#undef NUM
  if ((n = loom_yaml_get(d, "gemm_tile")) && read_tile(n, "device.gemm_tile", hw->gemm_tile))
    return -1;
  if ((n = loom_yaml_get(d, "attention_tile")) &&
      read_tile(n, "device.attention_tile", hw->attn_tile))
    return -1;
  if ((n = loom_yaml_get(d, "peak_tflops")) &&
      read_dtype_map(n, "device.peak_tflops", 1e12, hw->peak_flops))
    return -1;
  if ((n = loom_yaml_get(d, "vector_tflops")) &&
      read_dtype_map(n, "device.vector_tflops", 1e12, hw->vector_flops))
    return -1;
  if ((n = loom_yaml_get(d, "gemm_efficiency")) &&
      read_pairs(n, "device.gemm_efficiency", hw->gemm_eff_dim, hw->gemm_eff, &hw->n_gemm_eff))
    return -1;
  if ((n = loom_yaml_get(d, "gemm_efficiency_fp8")) &&
      read_pairs(n, "device.gemm_efficiency_fp8", hw->gemm_eff_fp8_dim, hw->gemm_eff_fp8,
                 &hw->n_gemm_eff_fp8))
    return -1;
  if ((n = loom_yaml_get(d, "grouped_gemm_efficiency")) &&
      read_pairs(n, "device.grouped_gemm_efficiency", hw->grouped_rows, hw->grouped_eff,
                 &hw->n_grouped))
    return -1;
  if ((n = loom_yaml_get(d, "gemm_size_efficiency"))) {
    if (read_pairs(n, "device.gemm_size_efficiency", hw->gemm_size_flops, hw->gemm_size_eff,
                   &hw->n_gemm_size))
      return -1;
    for (int i = 0; i < hw->n_gemm_size; i++) hw->gemm_size_flops[i] *= 1e9; /* GFLOP */
  }
  if ((n = loom_yaml_get(d, "gemm_grid")) && read_grid(hw, n)) return -1;
  if ((n = loom_yaml_get(d, "instruction_peak")) && read_instruction_peak(hw, n)) return -1;
  if ((n = loom_yaml_get(d, "vector_melem_per_s"))) {
    if (n->kind != LOOM_YAML_MAPPING)
      return loom_yaml_err(n, "device.vector_melem_per_s: expected a mapping of kernel: rate");
    for (int i = 0; i < n->n; i++) {
      const loom_yaml_pair *p = &n->pairs[i];
      int k = 0;
      while (k < LOOM_VOP_COUNT && strcmp(loom_vop_name((loom_vop)k), p->key->text)) k++;
      if (k == LOOM_VOP_COUNT)
        return loom_yaml_err(p->key,
                             "device.vector_melem_per_s: unknown kernel '%s' (known: "
                             "layernorm_fwd, gelu_bwd, adamw, ... see docs/SIMULATOR.md)",
                             p->key->text);
      if (loom_yaml_number(p->value, "device.vector_melem_per_s", &v)) return -1;
      hw->vop_rate[k] = v * 1e6;
    }
  }
  if ((n = loom_yaml_get(d, "attention"))) {
    char s[16];
    if (loom_yaml_string(n, "device.attention", s, sizeof s)) return -1;
    if (!strcmp(s, "flash")) hw->attention = LOOM_ATTN_FLASH;
    else if (!strcmp(s, "unfused")) hw->attention = LOOM_ATTN_UNFUSED;
    else if (!strcmp(s, "loom")) hw->attention = LOOM_ATTN_LOOM;
    else return loom_yaml_err(n, "device.attention must be flash, unfused or loom, found '%s'", s);
  }
  if (read_fwd_bwd(d, "attention_gunits_per_s", &hw->attn_rate_fwd, &hw->attn_rate_bwd) ||
      read_fwd_bwd(d, "attention_row_gunits_per_s", &hw->attn_row_rate_fwd,
                   &hw->attn_row_rate_bwd) ||
      read_fwd_bwd_scaled(d, "attention_row_ns", 1e-9, &hw->attn_row_s_fwd, &hw->attn_row_s_bwd))
    return -1;
  return 0;
}

static int read_tier(loom_hw_tier *t, const loom_yaml_node *n) {
  static const char *const allowed[] = {
      "name", "domain", "bandwidth_gbs", "latency_us", "algorithm", "efficiency",
      "all_reduce_size_factor", "ranks_per_core", NULL};
  static const char *const colls[] = {"all_reduce", "reduce_scatter", "all_gather",
                                      "all_to_all", "send", NULL};
  if (loom_yaml_only(n, "a network tier", allowed)) return -1;
  const loom_yaml_node *x;
  double v;
  for (int k = 0; k < LOOM_COLL_COUNT; k++) t->efficiency[k] = 1;
  if ((x = loom_yaml_get(n, "name")) &&
      loom_yaml_string(x, "network.name", t->name, sizeof t->name))
    return -1;
  if ((x = loom_yaml_get(n, "domain")) && loom_yaml_int(x, "network.domain", &t->domain)) return -1;
  if (!(x = loom_yaml_get(n, "bandwidth_gbs")))
    return loom_yaml_err(n, "network tier '%s' needs bandwidth_gbs", t->name);
  if (loom_yaml_number(x, "network.bandwidth_gbs", &v)) return -1;
  t->bandwidth = v * 1e9;
  if ((x = loom_yaml_get(n, "latency_us"))) {
    if (loom_yaml_number(x, "network.latency_us", &v)) return -1;
    t->latency = v * 1e-6;
  }
  if ((x = loom_yaml_get(n, "algorithm"))) {
    char s[16];
    if (loom_yaml_string(x, "network.algorithm", s, sizeof s)) return -1;
    if (!strcmp(s, "ring")) t->algo = LOOM_ALGO_RING;
    else if (!strcmp(s, "tree")) t->algo = LOOM_ALGO_TREE;
    else return loom_yaml_err(x, "network.algorithm must be ring or tree, found '%s'", s);
  }
  if ((x = loom_yaml_get(n, "ranks_per_core"))) {
    if (loom_yaml_number(x, "network.ranks_per_core", &t->ranks_per_core)) return -1;
    if (!(t->ranks_per_core >= 1 && t->ranks_per_core <= 1024))
      return loom_yaml_err(x, "network tier '%s': ranks_per_core must be in [1, 1024] (the ranks "
                              "per core while its collectives were timed; 1: a core each), found %g",
                           t->name, t->ranks_per_core);
  }
  if ((x = loom_yaml_get(n, "all_reduce_size_factor"))) { /* [[MB per rank, factor], ...] */
    if (read_pairs(x, "network.all_reduce_size_factor", t->ar_size_bytes, t->ar_size_factor,
                   &t->n_ar_size))
      return -1;
    for (int i = 0; i < t->n_ar_size; i++) {
      t->ar_size_bytes[i] *= 1e6; /* checked in bytes: what the cost model takes log2 of */
      if (!(t->ar_size_bytes[i] > 0) || !isfinite(t->ar_size_bytes[i]) ||
          (i && !(t->ar_size_bytes[i] > t->ar_size_bytes[i - 1])) ||
          !(t->ar_size_factor[i] > 0) || !isfinite(t->ar_size_factor[i]))
        return loom_yaml_err(x, "network.all_reduce_size_factor: point %d: sizes (MB) must be "
                                "positive, finite and increasing, factors positive", i + 1);
    }
  }
  if ((x = loom_yaml_get(n, "efficiency"))) {
    if (x->kind == LOOM_YAML_SCALAR) {
      if (loom_yaml_number(x, "network.efficiency", &v)) return -1;
      for (int k = 0; k < LOOM_COLL_COUNT; k++) t->efficiency[k] = v;
    } else {
      if (loom_yaml_only(x, "network.efficiency", colls)) return -1;
      for (int k = 0; k < LOOM_COLL_COUNT; k++) {
        const loom_yaml_node *e = loom_yaml_get(x, colls[k]);
        if (e && loom_yaml_number(e, "network.efficiency", &t->efficiency[k])) return -1;
      }
    }
  }
  return 0;
}

static int read_runtime(loom_hw_profile *hw, const loom_yaml_node *r) {
  static const char *const allowed[] = {"engine", "tp_comm_overlap", "dp_comm_overlap",
                                        "optimizer_bytes_per_param", "overlap_slowdown",
                                        "p2p_overlap", "tp_style", "vision_sp_local_windows",
                                        "elementwise", "host_dispatch_us", "bf16_gemm",
                                        "ep_comm_overlap", "recipe", "gemm_backend", NULL};
  if (loom_yaml_only(r, "runtime", allowed)) return -1;
  const loom_yaml_node *x;
  if ((x = loom_yaml_get(r, "engine"))) {
    char s[16];
    if (loom_yaml_string(x, "runtime.engine", s, sizeof s)) return -1;
    if (!strcmp(s, "loom-cpu")) hw->engine_loom_cpu = true;
    else if (!strcmp(s, "gpu")) hw->engine_loom_cpu = false;
    else return loom_yaml_err(x, "runtime.engine must be gpu or loom-cpu, found '%s'", s);
  }
  hw->recipe = hw->engine_loom_cpu ? LOOM_RECIPE_LOOM : LOOM_RECIPE_MEGATRON;
  if ((x = loom_yaml_get(r, "recipe"))) {
    char s[16];
    if (loom_yaml_string(x, "runtime.recipe", s, sizeof s)) return -1;
    int k = 0;
    while (k < LOOM_RECIPE_COUNT && strcmp(s, loom_hw_recipe_name((loom_hw_recipe)k))) k++;
    if (k == LOOM_RECIPE_COUNT)
      return loom_yaml_err(x, "runtime.recipe must be megatron, fsdp2, hf-eager or loom, found "
                           "'%s'", s);
    if ((k == LOOM_RECIPE_LOOM) != hw->engine_loom_cpu)
      return loom_yaml_err(x, "runtime.recipe %s needs runtime.engine %s", s,
                           k == LOOM_RECIPE_LOOM ? "loom-cpu" : "gpu");
    hw->recipe = (loom_hw_recipe)k;
  }
  if ((x = loom_yaml_get(r, "ep_comm_overlap")) &&
      loom_yaml_bool(x, "runtime.ep_comm_overlap", &hw->ep_overlap))
    return -1;
  if ((x = loom_yaml_get(r, "bf16_gemm"))) {
    char s[16];
    if (loom_yaml_string(x, "runtime.bf16_gemm", s, sizeof s)) return -1;
    if (!strcmp(s, "native")) hw->bf16_native = true;
    else if (!strcmp(s, "rounded")) hw->bf16_native = false;
    else return loom_yaml_err(x, "runtime.bf16_gemm must be native or rounded, found '%s'", s);
  }
  if ((x = loom_yaml_get(r, "gemm_backend"))) {
    if (loom_yaml_string(x, "runtime.gemm_backend", hw->gemm_backend, sizeof hw->gemm_backend))
      return -1;
    if (strcmp(hw->gemm_backend, "onednn") && strcmp(hw->gemm_backend, "openblas"))
      return loom_yaml_err(x, "runtime.gemm_backend must be onednn or openblas (the GEMM library "
                              "loom bench measured), found '%s'", hw->gemm_backend);
  }
  if ((x = loom_yaml_get(r, "tp_comm_overlap")) &&
      loom_yaml_bool(x, "runtime.tp_comm_overlap", &hw->tp_overlap))
    return -1;
  if ((x = loom_yaml_get(r, "dp_comm_overlap")) &&
      loom_yaml_bool(x, "runtime.dp_comm_overlap", &hw->dp_overlap))
    return -1;
  if ((x = loom_yaml_get(r, "overlap_slowdown")) &&
      loom_yaml_number(x, "runtime.overlap_slowdown", &hw->overlap_slowdown))
    return -1;
  if ((x = loom_yaml_get(r, "p2p_overlap")) &&
      loom_yaml_bool(x, "runtime.p2p_overlap", &hw->p2p_overlap))
    return -1;
  if ((x = loom_yaml_get(r, "optimizer_bytes_per_param")) &&
      loom_yaml_number(x, "runtime.optimizer_bytes_per_param", &hw->optimizer_bytes_per_param))
    return -1;
  if ((x = loom_yaml_get(r, "vision_sp_local_windows")) &&
      loom_yaml_bool(x, "runtime.vision_sp_local_windows", &hw->vision_sp_local_windows))
    return -1;
  if ((x = loom_yaml_get(r, "tp_style"))) {
    char s[16];
    if (loom_yaml_string(x, "runtime.tp_style", s, sizeof s)) return -1;
    if (!strcmp(s, "dtensor")) hw->tp_dtensor = true;
    else if (!strcmp(s, "megatron")) hw->tp_dtensor = false;
    else return loom_yaml_err(x, "runtime.tp_style must be megatron or dtensor, found '%s'", s);
  }
  if ((x = loom_yaml_get(r, "host_dispatch_us"))) {
    static const char *const kinds[] = {"dtensor", "eager", NULL};
    if (x->kind != LOOM_YAML_MAPPING)
      return loom_yaml_err(x,
                           "runtime.host_dispatch_us: expected a mapping {dtensor: us, eager: us}");
    if (loom_yaml_only(x, "runtime.host_dispatch_us", kinds)) return -1;
    const loom_yaml_node *y;
    double v;
    for (int k = 0; k < 2; k++) {
      char key[40];
      snprintf(key, sizeof key, "runtime.host_dispatch_us.%s", kinds[k]);
      if (!(y = loom_yaml_get(x, kinds[k]))) continue;
      if (loom_yaml_number(y, key, &v)) return -1;
      if (!(v >= 0) || !isfinite(v))
        return loom_yaml_err(y, "%s must be a finite number >= 0 (microseconds per op)", key);
      *(k ? &hw->host_eager : &hw->host_dtensor) = v * 1e-6;
    }
  }
  if ((x = loom_yaml_get(r, "elementwise"))) {
    char s[16];
    if (loom_yaml_string(x, "runtime.elementwise", s, sizeof s)) return -1;
    if (!strcmp(s, "eager")) hw->elementwise_eager = true;
    else if (!strcmp(s, "fused")) hw->elementwise_eager = false;
    else return loom_yaml_err(x, "runtime.elementwise must be fused or eager, found '%s'", s);
  }
  return 0;
}

static int read_root(loom_hw_profile *hw, const loom_yaml_node *root) {
  static const char *const allowed[] = {"name", "description", "sources", "device", "node",
                                        "network", "runtime", "measured", NULL};
  if (loom_yaml_only(root, "the profile", allowed)) return -1;
  const loom_yaml_node *n;
  if ((n = loom_yaml_get(root, "name")) && loom_yaml_string(n, "name", hw->name, sizeof hw->name))
    return -1;
  if ((n = loom_yaml_get(root, "description")) &&
      loom_yaml_string(n, "description", hw->description, sizeof hw->description))
    return -1;
  if ((n = loom_yaml_get(root, "device")) && read_device(hw, n)) return -1;
  if ((n = loom_yaml_get(root, "node"))) {
    static const char *const allowed_node[] = {"devices", "oversubscribe",
                                               "collective_ranks_per_core", NULL};
    if (loom_yaml_only(n, "node", allowed_node)) return -1;
    const loom_yaml_node *x;
    if ((x = loom_yaml_get(n, "devices")) &&
        loom_yaml_int(x, "node.devices", &hw->devices_per_node))
      return -1;
    if ((x = loom_yaml_get(n, "oversubscribe"))) {
      char s[16];
      if (loom_yaml_string(x, "node.oversubscribe", s, sizeof s)) return -1;
      if (strcmp(s, "timeshare") && strcmp(s, "error"))
        return loom_yaml_err(x, "node.oversubscribe must be timeshare or error");
      hw->timeshare = !strcmp(s, "timeshare");
    }
    if ((x = loom_yaml_get(n, "collective_ranks_per_core")) &&
        loom_yaml_number(x, "node.collective_ranks_per_core", &hw->coll_ranks_per_core))
      return -1;
  }
  if ((n = loom_yaml_get(root, "network"))) {
    if (n->kind != LOOM_YAML_SEQUENCE || n->n < 1 || n->n > LOOM_HW_MAX_TIERS)
      return loom_yaml_err(n, "network: expected a list of 1..%d tiers, innermost first",
                           LOOM_HW_MAX_TIERS);
    hw->n_tiers = n->n;
    for (int i = 0; i < n->n; i++) {
      memset(&hw->tier[i], 0, sizeof hw->tier[i]);
      snprintf(hw->tier[i].name, sizeof hw->tier[i].name, "tier%d", i);
      if (read_tier(&hw->tier[i], n->items[i])) return -1;
    }
  }
  if ((n = loom_yaml_get(root, "runtime")) && read_runtime(hw, n)) return -1;
  return 0;
}

int loom_hw_parse(loom_hw_profile *hw, const char *text, const char *filename) {
  loom_yaml_doc *doc;
  if (loom_yaml_parse(&doc, text, strlen(text), filename)) return -1;
  const loom_yaml_node *root = loom_yaml_root(doc);
  int rc = 0;
  if (!root) rc = loom_err("%s: the file is empty (expected a mapping of profile keys)", filename);
  else if (root->kind != LOOM_YAML_MAPPING)
    rc = loom_yaml_err(root, "expected a mapping of keys at the top");
  if (rc) {
    loom_yaml_free(doc);
    return rc;
  }
  loom_hw_defaults(hw);
  rc = read_root(hw, root);
  loom_yaml_free(doc);
  if (!rc) {
    snprintf(hw->path, sizeof hw->path, "%s", filename);
    rc = loom_hw_check(hw);
    if (rc) loom_err_prefix("%s: ", filename);
  }
  return rc;
}

int loom_hw_load_file(loom_hw_profile *hw, const char *path) {
  char *text;
  size_t len;
  if (loom_is_dir(path))
    return loom_err("hardware profile '%s' is a directory; give the path of a profile YAML file "
                    "(e.g. configs/hardware/h100-sxm.yaml) or a profile name", path);
  if (loom_read_file(path, &text, &len)) return -1;
  int rc = loom_hw_parse(hw, text, path);
  free(text);
  return rc;
}

/* Every number of the profile is finite (a value times its unit can overflow to infinity)
 * and none of the rates, sizes or times is negative. */
static int check_numbers(const loom_hw_profile *hw) {
  const struct {
    const char *key;
    double v;
  } nums[] = {{"device.memory_gib", hw->mem_bytes},
              {"device.memory_reserved_gib", hw->mem_reserved},
              {"device.memory_bandwidth_gbs", hw->mem_bw},
              {"device.memory_efficiency", hw->mem_eff},
              {"device.gemm_overhead_us", hw->gemm_overhead},
              {"device.kernel_overhead_us", hw->kernel_overhead},
              {"device.attention_efficiency", hw->attn_eff},
              {"device.attention_gunits_per_s.fwd", hw->attn_rate_fwd},
              {"device.attention_gunits_per_s.bwd", hw->attn_rate_bwd},
              {"device.attention_row_gunits_per_s.fwd", hw->attn_row_rate_fwd},
              {"device.attention_row_gunits_per_s.bwd", hw->attn_row_rate_bwd},
              {"device.attention_row_ns.fwd", hw->attn_row_s_fwd},
              {"device.attention_row_ns.bwd", hw->attn_row_s_bwd},
              {"device.attention_head_dim_step", hw->attn_hdim_step},
              {"device.memory_fragmentation", hw->mem_fragmentation},
              {"device.gemm_tile", hw->gemm_tile[0] + hw->gemm_tile[1]},
              {"device.attention_tile", hw->attn_tile[0] + hw->attn_tile[1]},
              {"runtime.overlap_slowdown", hw->overlap_slowdown},
              {"runtime.optimizer_bytes_per_param", hw->optimizer_bytes_per_param},
              {"runtime.host_dispatch_us.dtensor", hw->host_dtensor},
              {"runtime.host_dispatch_us.eager", hw->host_eager}};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
    if (!isfinite(nums[i].v) || nums[i].v < 0)
      return loom_err("%s must be a finite number >= 0, found %g", nums[i].key, nums[i].v);
  for (int d = 0; d < LOOM_DT_COUNT; d++)
    if (!isfinite(hw->peak_flops[d]) || hw->peak_flops[d] < 0 || !isfinite(hw->vector_flops[d]) ||
        hw->vector_flops[d] < 0)
      return loom_err("device.peak_tflops / vector_tflops.%s must be a finite number >= 0",
                      loom_hw_dtype_name((loom_hw_dtype)d));
  for (int v = 0; v < LOOM_VOP_COUNT; v++)
    if (!isfinite(hw->vop_rate[v]) || hw->vop_rate[v] < 0)
      return loom_err("device.vector_melem_per_s.%s must be a finite rate >= 0, found %g",
                      loom_vop_name((loom_vop)v), hw->vop_rate[v] / 1e6);
  for (int i = 0; i < hw->n_tiers; i++)
    if (!isfinite(hw->tier[i].bandwidth) || !isfinite(hw->tier[i].latency))
      return loom_err("network tier '%s': bandwidth_gbs and latency_us must be finite",
                      hw->tier[i].name);
  return 0;
}

/* GEMM efficiency tables are interpolated in log2 of their dimensions and divide by the
 * efficiency: dimensions and GFLOP points must be positive, efficiencies in (0, 1]. */
static int check_gemm_tables(const loom_hw_profile *hw) {
  for (int i = 0; i < hw->n_gemm_eff; i++)
    if (!(hw->gemm_eff_dim[i] > 0) || !isfinite(hw->gemm_eff_dim[i]))
      return loom_err("device.gemm_efficiency: dimension %g is not a positive number",
                      hw->gemm_eff_dim[i]);
  for (int i = 0; i < hw->n_gemm_size; i++)
    if (!(hw->gemm_size_flops[i] > 0) || !isfinite(hw->gemm_size_flops[i]))
      return loom_err("device.gemm_size_efficiency: point %d has %g GFLOP; the GFLOP of each "
                      "[GFLOP, factor] pair must be > 0", i + 1, hw->gemm_size_flops[i] / 1e9);
  const struct {
    const char *key;
    int n;
    const double *x, *y;
  } curves[] = {{"device.gemm_efficiency_fp8", hw->n_gemm_eff_fp8, hw->gemm_eff_fp8_dim,
                 hw->gemm_eff_fp8},
                {"device.grouped_gemm_efficiency", hw->n_grouped, hw->grouped_rows,
                 hw->grouped_eff}};
  for (size_t c = 0; c < sizeof curves / sizeof curves[0]; c++)
    for (int i = 0; i < curves[c].n; i++)
      if (!(curves[c].x[i] > 0) || !isfinite(curves[c].x[i]) || !(curves[c].y[i] > 0) ||
          curves[c].y[i] > 1 || (i && !(curves[c].x[i] > curves[c].x[i - 1])))
        return loom_err("%s: [dimension, efficiency] pairs with increasing dimensions > 0 and "
                        "efficiencies in (0, 1] (point %d is [%g, %g])", curves[c].key, i + 1,
                        curves[c].x[i], curves[c].y[i]);
  if (!hw->grid_n[0]) return 0;
  static const char *const axes[] = {"m", "n", "k"}, *const roles[] = {"fwd", "dgrad", "wgrad"};
  for (int a = 0; a < 3; a++)
    for (int i = 0; i < hw->grid_n[a]; i++)
      if (!(hw->grid_axis[a][i] > 0) || !isfinite(hw->grid_axis[a][i]))
        return loom_err("device.gemm_grid.%s: value %g is not a positive number", axes[a],
                        hw->grid_axis[a][i]);
  int total = hw->grid_n[0] * hw->grid_n[1] * hw->grid_n[2];
  for (int r = 0; r < LOOM_GEMM_ROLES; r++)
    for (int i = 0; i < total; i++)
      if (!(hw->grid_eff[r][i] > 0) || hw->grid_eff[r][i] > 1)
        return loom_err("device.gemm_grid.%s: efficiency %g (value %d) is not in (0, 1]",
                        roles[r], hw->grid_eff[r][i], i + 1);
  return 0;
}

/* device.instruction_peak as a profile built in memory may hold it: increasing thread counts
 * >= 1, finite figures > 0, a known unit. */
static int check_instruction_peak(const loom_hw_profile *hw) {
  if (hw->n_ipeak < 0 || hw->n_ipeak > LOOM_HW_MAX_POINTS)
    return loom_err("device.instruction_peak: %d entries (expected 0..%d)", hw->n_ipeak,
                    LOOM_HW_MAX_POINTS);
  if (hw->n_ipeak && !(hw->ipeak_bf16_unit >= 0 && hw->ipeak_bf16_unit < LOOM_UNIT_COUNT))
    return loom_err("device.instruction_peak.bf16_unit must be amx, avx512_bf16 or fma");
  for (int i = 0; i < hw->n_ipeak; i++) {
    if (hw->ipeak_threads[i] < 1 || (i && hw->ipeak_threads[i] <= hw->ipeak_threads[i - 1]))
      return loom_err("device.instruction_peak.threads: expected increasing whole numbers >= 1, "
                      "found %d at entry %d", hw->ipeak_threads[i], i + 1);
    for (int d = 0; d < 2; d++)
      if (!(hw->ipeak_flops[d][i] > 0) || !isfinite(hw->ipeak_flops[d][i]))
        return loom_err("device.instruction_peak.%s_gflops: entry %d is %g; GFLOP/s must be "
                        "finite and > 0", d ? "bf16" : "fp32", i + 1, hw->ipeak_flops[d][i] / 1e9);
  }
  return 0;
}

int loom_hw_check(const loom_hw_profile *hw) {
  if (check_numbers(hw) || check_gemm_tables(hw) || check_instruction_peak(hw)) return LOOM_ERR;
  if (!(hw->peak_flops[LOOM_DT_FP32] > 0))
    return loom_err("device.peak_tflops.fp32 must be > 0 (dtypes without a peak of their own "
                    "use it)");
  if (!(hw->mem_bw > 0) || !(hw->mem_eff > 0) || hw->mem_eff > 1)
    return loom_err("device.memory_bandwidth_gbs must be > 0 and memory_efficiency in (0, 1]");
  if (!(hw->mem_bytes > hw->mem_reserved))
    return loom_err("device.memory_gib must be larger than memory_reserved_gib");
  for (int i = 0; i < hw->n_gemm_eff; i++) {
    if (!(hw->gemm_eff[i] > 0) || hw->gemm_eff[i] > 1)
      return loom_err("device.gemm_efficiency: efficiency %g is not in (0, 1]", hw->gemm_eff[i]);
    if (i && !(hw->gemm_eff_dim[i] > hw->gemm_eff_dim[i - 1]))
      return loom_err("device.gemm_efficiency: dimensions must increase (%g after %g)",
                      hw->gemm_eff_dim[i], hw->gemm_eff_dim[i - 1]);
  }
  for (int a = 0; a < 3 && hw->grid_n[0]; a++)
    for (int i = 1; i < hw->grid_n[a]; i++)
      if (!(hw->grid_axis[a][i] > hw->grid_axis[a][i - 1]))
        return loom_err("device.gemm_grid: axis values must increase");
  if (hw->attention == LOOM_ATTN_LOOM && !(hw->attn_rate_fwd > 0 && hw->attn_rate_bwd > 0))
    return loom_err("device.attention loom needs attention_gunits_per_s {fwd, bwd} (written by "
                    "loom bench)");
  if (hw->attention == LOOM_ATTN_FLASH && !(hw->attn_eff > 0 && hw->attn_eff <= 1))
    return loom_err("device.attention_efficiency must be in (0, 1] for flash attention");
  if (hw->devices_per_node < 1) return loom_err("node.devices must be >= 1");
  if (!(hw->coll_ranks_per_core >= 1 && hw->coll_ranks_per_core <= 1024))
    return loom_err("node.collective_ranks_per_core must be in [1, 1024] (the ranks per core while "
                    "the collectives were measured; 1: a core each), found %g",
                    hw->coll_ranks_per_core);
  if (hw->overlap_slowdown < 0 || hw->overlap_slowdown > 1)
    return loom_err("runtime.overlap_slowdown must be in [0, 1]");
  if (hw->attn_hdim_step > 4096)
    return loom_err("device.attention_head_dim_step must be in [0, 4096] (0: no padding), found %g",
                    hw->attn_hdim_step);
  if (hw->mem_fragmentation >= 1)
    return loom_err("device.memory_fragmentation must be in [0, 1) (a share of the allocated "
                    "bytes), found %g", hw->mem_fragmentation);
  for (int i = 0; i < hw->n_gemm_size; i++)
    if (!(hw->gemm_size_eff[i] > 0) || hw->gemm_size_eff[i] > 1 ||
        (i && !(hw->gemm_size_flops[i] > hw->gemm_size_flops[i - 1])))
      return loom_err("device.gemm_size_efficiency: [GFLOP, factor] pairs with increasing "
                      "GFLOP and factors in (0, 1]");
  for (int i = 0; i < hw->n_tiers; i++) {
    const loom_hw_tier *t = &hw->tier[i];
    if (!(t->bandwidth > 0) || t->latency < 0)
      return loom_err("network tier '%s': bandwidth must be > 0 and latency >= 0", t->name);
    for (int k = 0; k < LOOM_COLL_COUNT; k++)
      if (!(t->efficiency[k] > 0) || t->efficiency[k] > 1.5)
        return loom_err("network tier '%s': efficiency %g is not in (0, 1.5]", t->name,
                        t->efficiency[k]);
    bool last = i == hw->n_tiers - 1;
    if (last && t->domain != 0)
      return loom_err("network tier '%s' is the last one: its domain must be 0 (every rank)", t->name);
    if (!last && (t->domain < 1 || (i && t->domain <= hw->tier[i - 1].domain)))
      return loom_err("network tier '%s': domain must be >= 1 and larger than the previous "
                      "tier's", t->name);
  }
  return 0;
}

static int try_path(loom_hw_profile *hw, const char *path, int *found) {
  if (!loom_path_exists(path)) return 0;
  *found = 1;
  return loom_hw_load_file(hw, path);
}

int loom_hw_load(loom_hw_profile *hw, const char *name) {
  if (strchr(name, '/') || strstr(name, ".yaml") || strstr(name, ".yml")) {
    if (!loom_path_exists(name))
      return loom_err("hardware profile '%s' does not exist (see 'loom sim --list-hardware')", name);
    return loom_hw_load_file(hw, name);
  }
  char path[1024];
  int found = 0, rc = 0;
  if (!strcmp(name, "this-machine")) {
    const char *env = getenv("LOOM_HW_PROFILE"), *home = getenv("HOME");
    if (env && (rc = try_path(hw, env, &found), found)) return rc;
    if (home) {
      snprintf(path, sizeof path, "%s/.loom/hardware/this-machine.yaml", home);
      if ((rc = try_path(hw, path, &found), found)) return rc;
    }
  }
  snprintf(path, sizeof path, "configs/hardware/%s.yaml", name);
  if ((rc = try_path(hw, path, &found), found)) return rc;
  snprintf(path, sizeof path, "%s/configs/hardware/%s.yaml", LOOM_SOURCE_DIR, name);
  if ((rc = try_path(hw, path, &found), found)) return rc;
  if (!strcmp(name, "this-machine"))
    return loom_err("no profile of this machine yet: run 'loom bench' (add '--nproc 2' to "
                    "measure MPI collectives too); it writes configs/hardware/this-machine.yaml");
  return loom_err("unknown hardware profile '%s': no configs/hardware/%s.yaml here or under %s "
                  "(shipped: a100-80gb, h100-sxm, h100-sxm-hf, h100-fsdp2, h200; or give a path "
                  "to a YAML file)",
                  name, name, LOOM_SOURCE_DIR);
}

void loom_hw_list(void) {
  printf("hardware profiles: configs/hardware/*.yaml (here or under %s):\n", LOOM_SOURCE_DIR);
  static const char *const shipped[] = {"a100-80gb",  "h100-sxm", "h100-sxm-hf",
                                        "h100-fsdp2", "h200",     "this-machine"};
  for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++) {
    loom_hw_profile hw;
    if (loom_hw_load(&hw, shipped[i]) == 0)
      printf("  %-14s %s\n", shipped[i], hw.description);
    else
      printf("  %-14s (not available: %s)\n", shipped[i], loom_errmsg());
  }
}
