/* The cost model's primitives on a hardware profile: GEMM efficiency by shape (curve over the
 * smallest dimension, or a measured grid interpolated in log2 space; FP8 on its own curve), the
 * time of one GEMM and of one grouped GEMM (MoE experts), of one vector kernel, and of one
 * collective on a group of ranks placed on the network tiers (an all-to-all over several
 * domains split between the inner and the outer tier). */
#include <math.h>

#include "loom/hw.h"

static double lerp_log2(double x, const double *xs, const double *ys, int n) {
  if (n == 1 || x <= xs[0]) return ys[0];
  if (x >= xs[n - 1]) return ys[n - 1];
  int i = 1;
  while (xs[i] < x) i++;
  double f = (log2(x) - log2(xs[i - 1])) / (log2(xs[i]) - log2(xs[i - 1]));
  return ys[i - 1] + f * (ys[i] - ys[i - 1]);
}

/* index and weight along one grid axis (clamped) */
static void axis_pos(const double *ax, int n, double x, int *i0, double *w) {
  if (n == 1 || x <= ax[0]) {
    *i0 = 0;
    *w = 0;
    return;
  }
  if (x >= ax[n - 1]) {
    *i0 = n - 2;
    *w = 1;
    return;
  }
  int i = 1;
  while (ax[i] < x) i++;
  *i0 = i - 1;
  *w = (log2(x) - log2(ax[i - 1])) / (log2(ax[i]) - log2(ax[i - 1]));
}

static double grid_eff(const loom_hw_profile *hw, loom_gemm_role role, double m, double n,
                       double k) {
  const int *N = hw->grid_n;
  if (hw->grid_layer_order && role == LOOM_GEMM_DGRAD) { /* (tokens, in, out) -> (tokens, out, in) */
    double t = n;
    n = k, k = t;
  } else if (hw->grid_layer_order && role == LOOM_GEMM_WGRAD) { /* (out, in, tokens) -> (tokens, out, in) */
    double t = k;
    k = n, n = m, m = t;
  }
  int i[3];
  double w[3], x[3] = {m, n, k};
  for (int a = 0; a < 3; a++) axis_pos(hw->grid_axis[a], N[a], x[a], &i[a], &w[a]);
  double e = 0;
  for (int c = 0; c < 8; c++) {
    double wt = 1;
    int idx[3];
    for (int a = 0; a < 3; a++) {
      int hi = (c >> a) & 1;
      if (N[a] == 1) {
        if (hi) wt = 0;
        idx[a] = 0;
      } else {
        idx[a] = i[a] + hi;
        wt *= hi ? w[a] : 1 - w[a];
      }
    }
    if (wt > 0) e += wt * hw->grid_eff[role][(idx[0] * N[1] + idx[1]) * N[2] + idx[2]];
  }
  return e;
}

double loom_hw_gemm_quant(const loom_hw_profile *hw, double m, double n) {
  double tm = hw->gemm_tile[0], tn = hw->gemm_tile[1];
  if (!(tm > 0 && tn > 0) || !(m > 0 && n > 0)) return 1;
  return m * n / (ceil(m / tm) * tm * ceil(n / tn) * tn);
}

double loom_hw_gemm_eff(const loom_hw_profile *hw, loom_gemm_role role, double m, double n,
                        double k) {
  if (hw->grid_n[0] > 0) return grid_eff(hw, role, m, n, k);
  double d = fmin(m, fmin(n, k));
  double e = lerp_log2(d, hw->gemm_eff_dim, hw->gemm_eff, hw->n_gemm_eff);
  e *= loom_hw_gemm_quant(hw, m, n);
  if (hw->n_gemm_size > 0)
    e *= lerp_log2(2 * m * n * k, hw->gemm_size_flops, hw->gemm_size_eff, hw->n_gemm_size);
  return e;
}

/* the peak of a dtype: FP8 falls back to bf16 (a device without FP8 tensor cores runs the
 * GEMMs in bf16), any other dtype without a peak to fp32 */
static double peak_of(const loom_hw_profile *hw, loom_hw_dtype dt) {
  if (dt == LOOM_DT_FP8 && !(hw->peak_flops[dt] > 0)) dt = LOOM_DT_BF16;
  return hw->peak_flops[dt] > 0 ? hw->peak_flops[dt] : hw->peak_flops[LOOM_DT_FP32];
}

/* efficiency of one GEMM in dtype dt: FP8 on its own measured curve when the profile has one
 * (tile quantisation applies, the size factor does not: the curve was measured as it is) */
static double eff_of(const loom_hw_profile *hw, loom_hw_dtype dt, loom_gemm_role role, double m,
                     double n, double k) {
  if (dt == LOOM_DT_FP8 && hw->peak_flops[LOOM_DT_FP8] > 0 && hw->n_gemm_eff_fp8 > 0 &&
      !hw->grid_n[0])
    return lerp_log2(fmin(m, fmin(n, k)), hw->gemm_eff_fp8_dim, hw->gemm_eff_fp8,
                     hw->n_gemm_eff_fp8) *
           loom_hw_gemm_quant(hw, m, n);
  return loom_hw_gemm_eff(hw, role, m, n, k);
}

double loom_hw_gemm_time(const loom_hw_profile *hw, loom_hw_dtype dt, loom_gemm_role role,
                         double m, double n, double k, double batch) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  return 2 * m * n * k * batch / (peak_of(hw, dt) * eff_of(hw, dt, role, m, n, k)) +
         hw->gemm_overhead;
}

double loom_hw_grouped_gemm_time(const loom_hw_profile *hw, loom_hw_dtype dt, loom_gemm_role role,
                                 double groups, double rows, double n, double k) {
  if (groups <= 0 || rows <= 0 || n <= 0 || k <= 0) return 0;
  /* forward and data gradient: one GEMM over every group's rows, each group padded to whole
   * tiles; weight gradient: per group an n x k product reduced over its rows (a short k) */
  double eff;
  if (role == LOOM_GEMM_WGRAD) {
    eff = eff_of(hw, dt, role, n, k, rows);
  } else {
    double tm = hw->gemm_tile[0], padded = tm > 0 ? ceil(rows / tm) * tm : rows;
    eff = eff_of(hw, dt, role, groups * padded, n, k) * rows / padded;
  }
  if (hw->n_grouped > 0) eff *= lerp_log2(rows, hw->grouped_rows, hw->grouped_eff, hw->n_grouped);
  return 2 * groups * rows * n * k / (peak_of(hw, dt) * eff) + hw->gemm_overhead;
}

double loom_hw_loom_attn_time(const loom_hw_profile *hw, bool backward, double pairs, double rows,
                              double D) {
  double rate = backward ? hw->attn_rate_bwd : hw->attn_rate_fwd;
  double row_rate = backward ? hw->attn_row_rate_bwd : hw->attn_row_rate_fwd;
  double row_s = backward ? hw->attn_row_s_bwd : hw->attn_row_s_fwd;
  return pairs * D / rate + (row_rate > 0 ? rows * D / row_rate : 0) + rows * row_s;
}

double loom_hw_causal_tile_pairs(const loom_hw_profile *hw, double T) {
  double tq = hw->attn_tile[0], tk = hw->attn_tile[1];
  if (!(tq > 0 && tk > 0)) return T * (T + 1) / 2;
  if (tq == tk) { /* q whole tiles, the i-th seeing (i + 1) tiles of keys, then r queries all T */
    double q = floor(T / tq), r = T - q * tq;
    return tq * tq * q * (q + 1) / 2 + r * T;
  }
  double pairs = 0; /* the planner's profiles have square tiles; others, tile by tile */
  for (double t0 = 0; t0 < T; t0 += tq) { /* a tile of queries t0..last sees keys 0..last */
    double nq = fmin(tq, T - t0), last = t0 + nq - 1;
    pairs += nq * fmin(T, (floor(last / tk) + 1) * tk);
  }
  return pairs;
}

double loom_hw_vop_time(const loom_hw_profile *hw, loom_hw_dtype dt, loom_vop v, double elements,
                        double bytes, double flops) {
  if (elements <= 0) return 0;
  if (hw->vop_rate[v] > 0) /* measured in cache; big arrays stream from memory */
    return fmax(elements / hw->vop_rate[v], bytes / (hw->mem_bw * hw->mem_eff)) + hw->kernel_overhead;
  double vf = hw->vector_flops[dt] > 0 ? hw->vector_flops[dt] : hw->vector_flops[LOOM_DT_FP32];
  double t_mem = bytes / (hw->mem_bw * hw->mem_eff), t_flop = vf > 0 ? flops / vf : 0;
  return fmax(t_mem, t_flop) + hw->kernel_overhead;
}

int loom_hw_group_tier(const loom_hw_profile *hw, int stride, int size) {
  double span = (double)stride * size;
  for (int i = 0; i < hw->n_tiers; i++)
    if (hw->tier[i].domain == 0 || span <= hw->tier[i].domain) return i;
  return hw->n_tiers - 1;
}

double loom_hw_ring_bytes(loom_coll_kind kind, double bytes, int p) {
  if (p <= 1 && kind != LOOM_COLL_SENDRECV) return 0;
  double f = p > 1 ? (double)(p - 1) / p : 0;
  switch (kind) {
  case LOOM_COLL_ALLREDUCE: return 2 * f * bytes;
  case LOOM_COLL_REDUCE_SCATTER:
  case LOOM_COLL_ALLGATHER:
  case LOOM_COLL_ALLTOALL: return f * bytes;
  default: return bytes;
  }
}

/* an all-to-all over several domains of the inner tier: local peers over it, remote ones over
 * the outer tier, concurrently; one latency per peer domain (-1: not such a group) */
static double split_alltoall(const loom_hw_profile *hw, int ti, double bytes, int stride,
                             int size) {
  if (ti == 0) return -1;
  const loom_hw_tier *in = &hw->tier[ti - 1], *out = &hw->tier[ti];
  int local = stride < in->domain ? in->domain / stride : 1; /* members per inner domain */
  if (local > size) local = size;
  int domains = (size + local - 1) / local;
  if (domains < 2) return -1;
  double share = bytes / size; /* for one peer */
  double bw_in = in->bandwidth * in->efficiency[LOOM_COLL_ALLTOALL];
  double t_in = local > 1 ? share * (local - 1) / bw_in + (local - 1) * in->latency : 0;
  double t_out = share * (size - local) / (out->bandwidth * out->efficiency[LOOM_COLL_ALLTOALL]) +
                 (domains - 1) * out->latency;
  return fmax(t_in, t_out);
}

double loom_hw_coll_sharing(const loom_hw_profile *hw, int stride, int size) {
  double r = hw->tier[loom_hw_group_tier(hw, stride, size < 2 ? 2 : size)].ranks_per_core;
  if (!(r > 0)) r = hw->coll_ranks_per_core;
  return r > 1 ? r : 1;
}

double loom_hw_coll_priced(double as_timed, double alone, double slow) {
  return fmax(as_timed, slow * alone);
}

double loom_hw_coll_time(const loom_hw_profile *hw, loom_coll_kind kind, double bytes,
                         int stride, int size) {
  if (bytes <= 0 || (size <= 1 && kind != LOOM_COLL_SENDRECV)) return 0;
  int ti = loom_hw_group_tier(hw, stride, size < 2 ? 2 : size);
  if (kind == LOOM_COLL_ALLTOALL) {
    double t = split_alltoall(hw, ti, bytes, stride, size);
    if (t >= 0) return t;
  }
  const loom_hw_tier *t = &hw->tier[ti];
  double bw = t->bandwidth * t->efficiency[kind];
  if (kind == LOOM_COLL_ALLREDUCE && t->n_ar_size > 0) /* the size's own bandwidth */
    bw *= lerp_log2(bytes, t->ar_size_bytes, t->ar_size_factor, t->n_ar_size);
  double moved = loom_hw_ring_bytes(kind, bytes, size);
  double steps;
  switch (kind) {
  case LOOM_COLL_ALLREDUCE:
    steps = t->algo == LOOM_ALGO_TREE ? 2 * ceil(log2(size)) : 2.0 * (size - 1);
    break;
  case LOOM_COLL_SENDRECV: steps = 1; break;
  default: steps = size - 1;
  }
  return moved / bw + steps * t->latency;
}
