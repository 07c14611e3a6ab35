/* A hardware profile as YAML (what `loom bench` writes), in the layout loom_hw_parse reads.
 * Exact: strings go through libyaml's double-quoted escaping, and each number is the shortest
 * decimal that the loader, multiplying by the key's unit (GiB, GB/s, TFLOP/s, us, ...), turns
 * back into the same double, so a profile that loads writes a profile that loads back equal. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/hw.h"
#include "loom/yaml.h"

typedef struct {
  char *s;
  size_t len, cap;
} buf;

__attribute__((format(printf, 2, 3))) static void put(buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (b->len + (size_t)n + 1 > b->cap) {
    b->cap = (b->len + (size_t)n + 1) * 2;
    b->s = loom_realloc(b->s, b->cap, 1);
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Shortest text t with strtod(t) * scale == v (what the loader computes), trying the
 * neighbours of v / scale too since the division may round away from the text that was read;
 * a value that never came from a file (bench) gets the nearest 17-digit decimal. */
static void num_text(double v, double scale, char *out, size_t n) {
  double q = v / scale, cand[3] = {q, nextafter(q, INFINITY), nextafter(q, -INFINITY)};
  bool positional = fabs(q) >= 1e-4 && fabs(q) < 1e6; /* 50, not 5e+01 */
  for (int prec = 1; prec <= 17; prec++)
    for (int c = 0; c < 3; c++) {
      snprintf(out, n, "%.*g", prec, cand[c]);
      if (positional && strchr(out, 'e')) continue;
      if (strtod(out, NULL) * scale == v) return;
    }
  snprintf(out, n, "%.17g", q);
}

/* A number in a key's unit: the value in SI / bytes / seconds and the unit's size. */
static const char *num(double v, double scale) {
  static char ring[8][40];
  static int next;
  char *o = ring[next++ % 8];
  num_text(v, scale, o, sizeof ring[0]);
  return o;
}

/* Plain names stay plain (h100-sxm, nvlink); anything else is double-quoted by libyaml. */
static void put_str(buf *b, const char *fmt_key, const char *s) {
  bool plain = isalnum((unsigned char)s[0]);
  for (const char *p = s; *p && plain; p++)
    plain = isalnum((unsigned char)*p) || strchr("_.-", *p);
  if (plain) {
    put(b, fmt_key, s);
    return;
  }
  char *q = loom_yaml_quote(s);
  put(b, fmt_key, q);
  free(q);
}

static void put_dtype_map(buf *b, const char *key, const double *v, double scale) {
  put(b, "  %s: {", key);
  for (int d = 0; d < LOOM_DT_COUNT; d++)
    if (d != LOOM_DT_FP8 || v[d] > 0) /* fp8: absent (the default) unless the device has it */
      put(b, "%s%s: %s", d ? ", " : "", loom_hw_dtype_name((loom_hw_dtype)d), num(v[d], scale));
  put(b, "}\n");
}

static void put_list(buf *b, const char *key, const double *v, int n) {
  put(b, "    %s: [", key);
  for (int i = 0; i < n; i++) put(b, "%s%s", i ? ", " : "", num(v[i], 1));
  put(b, "]\n");
}

static void put_pairs(buf *b, const char *key, const double *x, const double *y, int n,
                      double xscale) {
  put(b, "  %s: [", key);
  for (int i = 0; i < n; i++) put(b, "%s[%s, %s]", i ? ", " : "", num(x[i], xscale), num(y[i], 1));
  put(b, "]\n");
}

/* device.instruction_peak: thread counts and the figure of each (GFLOP/s, every thread at
 * once) per dtype, and the unit of the bf16 figure */
static void put_instruction_peak(buf *b, const loom_hw_profile *hw) {
  put(b, "  instruction_peak:   # GFLOP/s of the instructions from registers, every thread at "
         "once (loom bench's peak section)\n    threads: [");
  for (int i = 0; i < hw->n_ipeak; i++) put(b, "%s%d", i ? ", " : "", hw->ipeak_threads[i]);
  put(b, "]\n");
  static const char *const keys[2] = {"fp32_gflops", "bf16_gflops"};
  for (int d = 0; d < 2; d++) {
    put(b, "    %s: [", keys[d]);
    for (int i = 0; i < hw->n_ipeak; i++)
      put(b, "%s%s", i ? ", " : "", num(hw->ipeak_flops[d][i], 1e9));
    put(b, "]\n");
  }
  put(b, "    bf16_unit: %s   # %s\n", loom_hw_unit_name(hw->ipeak_bf16_unit),
      loom_hw_unit_instruction(hw->ipeak_bf16_unit));
}

static void put_device(buf *b, const loom_hw_profile *hw) {
  put(b, "device:\n");
  put(b, "  memory_gib: %s\n", num(hw->mem_bytes, 1073741824.0));
  put(b, "  memory_reserved_gib: %s\n", num(hw->mem_reserved, 1073741824.0));
  put(b, "  memory_bandwidth_gbs: %s\n", num(hw->mem_bw, 1e9));
  put(b, "  memory_efficiency: %s\n", num(hw->mem_eff, 1));
  put_dtype_map(b, "peak_tflops", hw->peak_flops, 1e12);
  put_dtype_map(b, "vector_tflops", hw->vector_flops, 1e12);
  if (hw->n_ipeak > 0) put_instruction_peak(b, hw);
  put_pairs(b, "gemm_efficiency", hw->gemm_eff_dim, hw->gemm_eff, hw->n_gemm_eff, 1);
  if (hw->n_gemm_size > 0)
    put_pairs(b, "gemm_size_efficiency", hw->gemm_size_flops, hw->gemm_size_eff, hw->n_gemm_size,
              1e9);
  if (hw->n_gemm_eff_fp8 > 0)
    put_pairs(b, "gemm_efficiency_fp8", hw->gemm_eff_fp8_dim, hw->gemm_eff_fp8,
              hw->n_gemm_eff_fp8, 1);
  if (hw->n_grouped > 0)
    put_pairs(b, "grouped_gemm_efficiency", hw->grouped_rows, hw->grouped_eff, hw->n_grouped, 1);
  if (hw->grid_n[0] > 0) {
    static const char *const axes[] = {"m", "n", "k"}, *const roles[] = {"fwd", "dgrad", "wgrad"};
    put(b, "  gemm_grid:   # measured efficiency at (m, n, k), m slowest, k fastest\n");
    put(b, "    order: %s   # %s\n", hw->grid_layer_order ? "layer" : "gemm",
        hw->grid_layer_order ? "dgrad and wgrad at the linear layer's (tokens, out, in)"
                             : "every role at its product's (m, n, k): C (m,n) = A (m,k) B (k,n)");
    for (int a = 0; a < 3; a++) put_list(b, axes[a], hw->grid_axis[a], hw->grid_n[a]);
    int total = hw->grid_n[0] * hw->grid_n[1] * hw->grid_n[2];
    for (int r = 0; r < LOOM_GEMM_ROLES; r++) put_list(b, roles[r], hw->grid_eff[r], total);
  }
  put(b, "  gemm_overhead_us: %s\n", num(hw->gemm_overhead, 1e-6));
  put(b, "  kernel_overhead_us: %s\n", num(hw->kernel_overhead, 1e-6));
  int any = 0;
  for (int v = 0; v < LOOM_VOP_COUNT; v++) any |= hw->vop_rate[v] > 0;
  if (any) {
    put(b, "  vector_melem_per_s:   # measured rate of loom's own kernel, million elements/s\n");
    for (int v = 0; v < LOOM_VOP_COUNT; v++)
      if (hw->vop_rate[v] > 0)
        put(b, "    %s: %s\n", loom_vop_name((loom_vop)v), num(hw->vop_rate[v], 1e6));
  }
  put(b, "  attention: %s\n", loom_attn_kernel_name(hw->attention));
  put(b, "  attention_efficiency: %s\n", num(hw->attn_eff, 1));
  if (hw->attn_rate_fwd > 0 || hw->attn_rate_bwd > 0)
    put(b, "  attention_gunits_per_s: {fwd: %s, bwd: %s}   # (query, key) pairs x head_dim%s\n",
        num(hw->attn_rate_fwd, 1e9), num(hw->attn_rate_bwd, 1e9),
        hw->attn_tile[0] > 0 ? ", of the attention_tile grid" : "");
  if (hw->attn_row_rate_fwd > 0 || hw->attn_row_rate_bwd > 0)
    put(b, "  attention_row_gunits_per_s: {fwd: %s, bwd: %s}   # query rows x head_dim\n",
        num(hw->attn_row_rate_fwd, 1e9), num(hw->attn_row_rate_bwd, 1e9));
  if (hw->attn_row_s_fwd > 0 || hw->attn_row_s_bwd > 0)
    put(b, "  attention_row_ns: {fwd: %s, bwd: %s}   # per query row, whatever head_dim\n",
        num(hw->attn_row_s_fwd, 1e-9), num(hw->attn_row_s_bwd, 1e-9));
  if (hw->gemm_tile[0] > 0)
    put(b, "  gemm_tile: [%s, %s]\n", num(hw->gemm_tile[0], 1), num(hw->gemm_tile[1], 1));
  if (hw->attn_tile[0] > 0)
    put(b, "  attention_tile: [%s, %s]\n", num(hw->attn_tile[0], 1), num(hw->attn_tile[1], 1));
  if (hw->attn_hdim_step > 0) put(b, "  attention_head_dim_step: %s\n", num(hw->attn_hdim_step, 1));
  if (hw->mem_fragmentation > 0) put(b, "  memory_fragmentation: %s\n", num(hw->mem_fragmentation, 1));
}

static void put_network(buf *b, const loom_hw_profile *hw) {
  static const char *const colls[] = {"all_reduce", "reduce_scatter", "all_gather",
                                      "all_to_all", "send"};
  put(b, "network:\n");
  for (int i = 0; i < hw->n_tiers; i++) {
    const loom_hw_tier *t = &hw->tier[i];
    put_str(b, "  - name: %s\n", t->name);
    put(b, "    domain: %d\n    bandwidth_gbs: %s\n    latency_us: %s\n", t->domain,
        num(t->bandwidth, 1e9), num(t->latency, 1e-6));
    put(b, "    algorithm: %s\n    efficiency: {", t->algo == LOOM_ALGO_TREE ? "tree" : "ring");
    for (int k = 0; k < LOOM_COLL_COUNT; k++)
      put(b, "%s%s: %s", k ? ", " : "", colls[k], num(t->efficiency[k], 1));
    put(b, "}\n");
    if (t->n_ar_size > 0) { /* [MB per rank, factor] */
      put(b, "    all_reduce_size_factor: [");
      for (int i = 0; i < t->n_ar_size; i++)
        put(b, "%s[%s, %s]", i ? ", " : "", num(t->ar_size_bytes[i], 1e6),
            num(t->ar_size_factor[i], 1));
      put(b, "]\n");
    }
    if (t->ranks_per_core > 0) put(b, "    ranks_per_core: %s\n", num(t->ranks_per_core, 1));
  }
}

char *loom_hw_to_yaml(const loom_hw_profile *hw, const char *notes) {
  buf b = {0};
  if (notes) {
    const char *p = notes;
    while (*p) {
      const char *e = strchr(p, '\n');
      int n = e ? (int)(e - p) : (int)strlen(p);
      put(&b, "# %.*s\n", n, p);
      p += n + (e ? 1 : 0);
    }
  }
  put_str(&b, "name: %s\n", hw->name);
  char *desc = loom_yaml_quote(hw->description);
  put(&b, "description: %s\n", desc);
  free(desc);
  put_device(&b, hw);
  put(&b, "node:\n  devices: %d\n  oversubscribe: %s\n", hw->devices_per_node,
      hw->timeshare ? "timeshare" : "error");
  if (hw->coll_ranks_per_core > 1)
    put(&b, "  collective_ranks_per_core: %s\n", num(hw->coll_ranks_per_core, 1));
  put_network(&b, hw);
  put(&b, "runtime:\n  engine: %s\n  tp_comm_overlap: %s\n  dp_comm_overlap: %s\n"
          "  p2p_overlap: %s\n  overlap_slowdown: %s\n  optimizer_bytes_per_param: %s\n",
      hw->engine_loom_cpu ? "loom-cpu" : "gpu", hw->tp_overlap ? "true" : "false",
      hw->dp_overlap ? "true" : "false", hw->p2p_overlap ? "true" : "false",
      num(hw->overlap_slowdown, 1), num(hw->optimizer_bytes_per_param, 1));
  if (hw->engine_loom_cpu) put(&b, "  bf16_gemm: %s\n", hw->bf16_native ? "native" : "rounded");
  if (hw->gemm_backend[0]) put(&b, "  gemm_backend: %s\n", hw->gemm_backend);
  if (!hw->engine_loom_cpu) put(&b, "  recipe: %s\n", loom_hw_recipe_name(hw->recipe));
  if (hw->ep_overlap) put(&b, "  ep_comm_overlap: true\n");
  if (hw->tp_dtensor) put(&b, "  tp_style: dtensor\n");
  if (hw->vision_sp_local_windows) put(&b, "  vision_sp_local_windows: true\n");
  if (hw->elementwise_eager) put(&b, "  elementwise: eager\n");
  if (hw->host_dtensor > 0 || hw->host_eager > 0)
    put(&b, "  host_dispatch_us: {dtensor: %s, eager: %s}\n", num(hw->host_dtensor, 1e-6),
        num(hw->host_eager, 1e-6));
  return b.s;
}
