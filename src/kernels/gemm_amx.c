/* loom's own bf16 GEMM on AMX tiles: C (M,N) = op(A) (M,K) op(B) (K,N) (+ bias) + beta C, bf16
 * operands, fp32 accumulation and output, for the shapes training runs (tokens x features).
 *
 * Design notes (numbered invariants):
 *  1. One tile configuration for everything: eight tiles of 16 rows x 64 bytes. Tiles 0-3 hold
 *     a 32x32 block of C (fp32, 2x2 tiles of 16x16), tiles 4-5 the block's two 16-row halves of
 *     A (16 rows x 32 bf16), tiles 6-7 two 16-column halves of B in the pair layout tdpbf16ps
 *     reads (16 rows of K-pairs x 16 columns x 2 bf16). Each k-step of 32 is 4 tile loads and
 *     4 tdpbf16ps (block_kernel: the next step's loads overlap this step's products).
 *  2. Blocking (GotoBLAS): C is cut into units of um rows x un columns (UNIT_M x UNIT_N; a
 *     weight gradient's units span N, and units that read B packed whole are WIDE_N wide:
 *     unit_shape), in an order fixed by the shape alone. A unit walks K in blocks of KB: it
 *     packs B's (KB x un) block (or reads it from B packed whole: a cached weight, or a B that
 *     several row units share) and then all of A's (32 x KB) panels of its rows into its
 *     thread's buffers (256 KiB each: L2; one panel, 32 KiB, stays in L1 while the kernel
 *     runs over the unit's columns), and only then runs the products: a tile load of lines
 *     that vector stores wrote a moment before waits for them, and packing each panel just
 *     before its products halved their rate.
 *     Packing pads M, N and K with zeros, so partial tiles and odd sizes need no other code
 *     path, and A is packed (transposed when ta) whatever its layout (tile loads from A where
 *     it lies, at its row stride, ran 6 of 8 forward and data-gradient shapes 0.65-0.87x as
 *     fast as from the packed panel, the other two 1.03-1.05x: Xeon with AMX, one thread,
 *     2026-11-30); the packs read 64 bytes at a time (AVX-512): at AMX rates a pass at a cycle
 *     per element costs as much as the products.
 *  3. Every element of C is summed by one thread, k-steps in increasing order, each k-step by
 *     the hardware's fixed tdpbf16ps order: results do not depend on the thread count, on M
 *     (a row's sum is the same in any number of rows), or on whether B came packed whole.
 *  4. Between K blocks a block's C tiles go to the unit's fp32 sums and come back; the last K
 *     block's go through a 4 KiB scratch, from which the epilogue writes C = acc (+ bias[n])
 *     (+ beta C) for the valid rows/columns only. C is read only when beta != 0 and written
 *     once.
 *  5. tdpbf16ps (Intel SDM) treats bf16 denormal inputs as zero and flushes denormal results,
 *     like oneDNN's AMX kernels; a product of two bf16 values is exact in fp32, and the sums
 *     are fp32 (round to nearest even), so an element is within (K + 2) 2^-24 sum |a b| of the
 *     exact sum (tests/kernels/test_gemm_amx.c holds it to that).
 * Only called where loom_kernels_amx() (the CPU has the tiles and Linux granted them). */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/amx_internal.h"
#include "kernels/gemm_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"

enum {
  KB = 512,      /* K per packed block: an A panel 32 x 512 bf16 = 32 KiB (L1) */
  UNIT_N = 256,  /* columns per unit: B block 512 x 256 bf16 = 256 KiB */
  UNIT_M = 256,  /* rows per unit: A block 256 x 512 bf16 = 256 KiB */
  UNIT_N_MAX = 1024, /* a unit as wide as a transposed A's product (see unit_shape) */
  WIDE_N = 512,  /* columns per unit where op(B) is packed whole (see unit_shape) */
  UNIT_C = UNIT_M * UNIT_N, /* C elements of a unit (its sums stay 256 KiB) */
  TILE_ELEMS = 512 /* bf16 in one 16 x 32 tile (1 KiB) */
};

/* Packing (AVX-512, 64 bytes at a time: on AMX a pass over an operand at a cycle per element
 * would cost as much as the products). A "pair" is a uint32 of two bf16 of consecutive k (k
 * even in the low half), the element of tdpbf16ps's B rows and, 16 to a row, of A's rows. */

/* 16 pairs of rows k, k+1 of a k-major operand (row stride ld), columns c0..c0+31 (the first
 * `cols` valid, rows at or beyond `krows` zero): lo[p][c] = pair (2p, 2p+1) of column c,
 * hi[p][c] of column 16 + c. Rows k and k+1 are read 32 columns at a time and interleaved by
 * unpacklo/hi_epi16 (pairs of columns 0-3, 8-11, ... and 4-7, 12-15, ... in the 128-bit
 * lanes), whose lanes one permute puts in column order: per 64 bytes of pairs a load and two
 * shuffles, where widening 16 columns of each row (vpmovzxwd) took two loads and four
 * (the weight gradient's packs were a quarter of its time, Xeon with AMX). */
AVX512_FN static void pairs_kmajor(const uint16_t *X, int ld, int krows, int cols,
                                __m512i lo[16], __m512i hi[16]) {
  __mmask32 m = cols >= 32 ? 0xffffffffu : cols <= 0 ? 0 : (__mmask32)((1u << cols) - 1);
  const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0); /* lanes a0 b0 a1 b1 */
  const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4); /* a2 b2 a3 b3 */
  for (int p = 0; p < 16; p++) {
    __m512i r0 = _mm512_setzero_si512(), r1 = _mm512_setzero_si512();
    if (2 * p < krows) r0 = _mm512_maskz_loadu_epi16(m, X + (size_t)(2 * p) * ld);
    if (2 * p + 1 < krows) r1 = _mm512_maskz_loadu_epi16(m, X + (size_t)(2 * p + 1) * ld);
    __m512i a = _mm512_unpacklo_epi16(r0, r1), b = _mm512_unpackhi_epi16(r0, r1);
    lo[p] = _mm512_permutex2var_epi64(a, first, b);
    hi[p] = _mm512_permutex2var_epi64(a, second, b);
  }
}

/* 16 rows of a row-major operand whose rows run along k (row stride ld): out[c] = the 16 pairs
 * k 0..31 of row c (the first `rows` rows valid, k at or beyond kc zero) */
AVX512_FN static void pairs_rows(const uint16_t *X, int ld, int rows, int kc, __m512i out[16]) {
  __mmask32 m = kc >= 32 ? 0xffffffffu : (__mmask32)((1u << kc) - 1);
  for (int c = 0; c < 16; c++)
    out[c] = c < rows ? _mm512_maskz_loadu_epi16(m, X + (size_t)c * ld) : _mm512_setzero_si512();
}

AVX512_FN static void store_tile(uint16_t *t, const __m512i r[16]) {
  for (int i = 0; i < 16; i++) _mm512_storeu_si512((void *)(t + 32 * i), r[i]);
}

/* A's rows m0..m0+31, columns k0..k0+kn-1 into 2 x ks tiles [half][s][16 rows][32]; rows at or
 * beyond M and columns at or beyond kn are zero. ks = ceil(kn / 32). */
AVX512_FN static void pack_a(const uint16_t *A, int lda, int ta, int M, int m0, int k0, int kn,
                          int ks, uint16_t *P) {
  __m512i r[16], r1[16];
  if (ta) { /* A stored (K, M): pairs along k of both halves' rows m, then transposed */
    for (int s = 0; s < ks; s++) {
      int kc = kn - 32 * s < 32 ? kn - 32 * s : 32;
      pairs_kmajor(A + (size_t)(k0 + 32 * s) * lda + m0, lda, kc, M - m0, r, r1);
      amx_transpose16(r);
      amx_transpose16(r1);
      store_tile(P + (size_t)s * TILE_ELEMS, r);
      store_tile(P + ((size_t)ks + s) * TILE_ELEMS, r1);
    }
    return;
  }
  for (int h = 0; h < 2; h++) {
    int mh = m0 + 16 * h, rows = M - mh < 16 ? M - mh : 16;
    for (int s = 0; s < ks; s++) {
      int kc = kn - 32 * s < 32 ? kn - 32 * s : 32;
      uint16_t *t = P + ((size_t)h * ks + s) * TILE_ELEMS;
      if (rows <= 0) {
        memset(t, 0, TILE_ELEMS * 2);
        continue;
      }
      pairs_rows(A + (size_t)mh * lda + k0 + 32 * s, lda, rows, kc, r);
      store_tile(t, r);
    }
  }
}

/* op(B)'s rows k0..k0+kn-1, columns n0..n0+nn-1 into 2 x (nn/32 rounded up) x ks tiles
 * [j][s][16 pairs][16 columns][2]; columns at or beyond nn and rows at or beyond kn zero. */
AVX512_FN static void pack_b(const uint16_t *B, int ldb, int tb, int n0, int nn, int k0, int kn,
                          int ks, uint16_t *P) {
  __m512i r[16], r1[16];
  int nj = 2 * ((nn + 31) / 32); /* whole 32-column blocks: the kernel reads tiles in twos */
  if (!tb) { /* B stored (K, N): pairs along k of 32 columns, tiles j and j + 1 at once */
    for (int j = 0; j < nj; j += 2)
      for (int s = 0; s < ks; s++) {
        int kc = kn - 32 * s < 32 ? kn - 32 * s : 32;
        pairs_kmajor(B + (size_t)(k0 + 32 * s) * ldb + n0 + 16 * j, ldb, kc, nn - 16 * j, r, r1);
        store_tile(P + ((size_t)j * ks + s) * TILE_ELEMS, r);
        store_tile(P + ((size_t)(j + 1) * ks + s) * TILE_ELEMS, r1);
      }
    return;
  }
  for (int j = 0; j < nj; j++) {
    int cols = nn - 16 * j < 16 ? nn - 16 * j : 16;
    for (int s = 0; s < ks; s++) {
      int kc = kn - 32 * s < 32 ? kn - 32 * s : 32;
      uint16_t *t = P + ((size_t)j * ks + s) * TILE_ELEMS;
      if (cols <= 0) {
        memset(t, 0, TILE_ELEMS * 2);
        continue;
      }
      /* B stored (N, K): rows n along k, then pairs p */
      pairs_rows(B + (size_t)(n0 + 16 * j) * ldb + k0 + 32 * s, ldb, cols, kc, r);
      amx_transpose16(r);
      store_tile(t, r);
    }
  }
}

/* One 32x32 block: tiles 0-3 += A panel (2 x ks tiles) x B columns j, j+1 (ks tiles each).
 * first: start from zero, else from acc (32 x 32 fp32); the sums go to out (may be acc).
 * Software-pipelined: the next k-step's first A tile (4) is loaded once this step's two
 * products that read it are issued, and its first B tile (6) after the third, so the loads run
 * beside this step's last products instead of after them (1.05-1.16x at GPT-2's and
 * Qwen2.5-0.5B's shapes, bench/amx_ab.sh gemm). Each C tile still takes its k-steps in order. */
AMX_FN static void block_kernel(
    const uint16_t *Ap, const uint16_t *Bp0, const uint16_t *Bp1, int ks, int first,
    const float *acc, float *out) {
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, acc, 128);
    _tile_loadd(1, acc + 16, 128);
    _tile_loadd(2, acc + 16 * 32, 128);
    _tile_loadd(3, acc + 16 * 32 + 16, 128);
  }
  const uint16_t *A0 = Ap, *A1 = Ap + (size_t)ks * TILE_ELEMS;
  _tile_loadd(4, A0, 64);
  _tile_loadd(6, Bp0, 64);
  for (int s = 0; s < ks; s++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, Bp1 + (size_t)s * TILE_ELEMS, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, A1 + (size_t)s * TILE_ELEMS, 64);
    _tile_dpbf16ps(2, 5, 6);
    if (s + 1 < ks) _tile_loadd(4, A0 + (size_t)(s + 1) * TILE_ELEMS, 64);
    _tile_dpbf16ps(3, 5, 7);
    if (s + 1 < ks) _tile_loadd(6, Bp0 + (size_t)(s + 1) * TILE_ELEMS, 64);
  }
  _tile_stored(0, out, 128);
  _tile_stored(1, out + 16, 128);
  _tile_stored(2, out + 16 * 32, 128);
  _tile_stored(3, out + 16 * 32 + 16, 128);
}

/* C's rows m0.., columns n0.. (up to 32 each, clipped to M, N) = acc (+ bias) + beta C */
static void epilogue(const float *acc, int M, int N, int m0, int n0, const float *bias,
                     float beta, float *C, int ldc) {
  int mr = M - m0 < 32 ? M - m0 : 32, nr = N - n0 < 32 ? N - n0 : 32;
  for (int r = 0; r < mr; r++) {
    float *c = C + (size_t)(m0 + r) * ldc + n0;
    const float *a = acc + r * 32;
    if (beta != 0.0f)
      for (int j = 0; j < nr; j++) c[j] = a[j] + beta * c[j];
    else if (bias)
      for (int j = 0; j < nr; j++) c[j] = a[j] + bias[n0 + j];
    else memcpy(c, a, (size_t)nr * sizeof(float));
  }
}

/* this thread's scratch (B block, A panel, C sums), kept for the thread's life: a GEMM call
 * allocates nothing */
static uint16_t *thread_buffer(size_t bytes) {
  static _Thread_local uint16_t *buf;
  if (!buf) buf = loom_alloc_for(bytes, "AMX GEMM scratch"); /* 64-byte aligned: a tile row is one cache line */
  return buf;
}

typedef struct {
  int ta, tb, M, N, K;
  const uint16_t *A, *B;
  int lda, ldb;
  const float *bias;
  float beta;
  float *C;
  int ldc;
  const uint16_t *Bp; /* all of op(B) packed (a cached weight: 2 x (N/32 up) x KS tiles), or
                         NULL: each unit packs its blocks */
  int KS;             /* k-steps of Bp: ceil(K / 32) */
  int um, un;         /* rows and columns per unit (unit_shape) */
} gemm_args;

/* UNIT_M x UNIT_N, except
 *  - where A is packed transposed (ta: a weight gradient, A = dY stored tokens x outputs) and N
 *    fits in UNIT_N_MAX: then a unit spans all of N, so each of A's panels is transposed once
 *    instead of once per column unit (the LM head's weight gradient, 50304 x 768 summed over
 *    8192 tokens, transposed its 824 MB of dY three times), with as many rows as keep the
 *    unit's sums at UNIT_C;
 *  - where op(B) is read packed whole (Bp: a cached weight, or a B that several row units
 *    share), so no unit packs a B block: units of WIDE_N columns and UNIT_C / WIDE_N rows,
 *    which pack each of A's panels half as often: pack_a's share of GPT-2's fc forward went
 *    from 14% to 7% of its time (perf, one thread, Xeon with AMX), and with the faster k-major
 *    packs the forward and data-gradient shapes ran 1.04-1.15x as fast
 *    (bench/amx_ab.sh gemm; docs/PERFORMANCE.md, "bf16 on AMX"). */
static void unit_shape(gemm_args *g) {
  g->um = UNIT_M, g->un = UNIT_N;
  if (g->ta && g->N > UNIT_N && g->N <= UNIT_N_MAX) {
    g->un = (g->N + 31) / 32 * 32;
    g->um = UNIT_C / g->un / 32 * 32;
    if (g->um < 32) g->um = 32;
  } else if (!g->ta && g->Bp && g->N > UNIT_N) {
    g->un = WIDE_N;
    g->um = UNIT_C / WIDE_N;
  }
}

/* one unit of invariant 2: rows m0..m0+um-1, columns n0..n0+un-1 (clipped) */
static void run_unit(const gemm_args *g, int m0, int n0, uint16_t *Bbuf, uint16_t *Abuf,
                     float *accs) {
  int mn = g->M - m0 < g->um ? g->M - m0 : g->um;
  int nn = g->N - n0 < g->un ? g->N - n0 : g->un;
  int mblocks = (mn + 31) / 32, nblocks = (nn + 31) / 32;
  for (int k0 = 0; k0 < g->K; k0 += KB) {
    int kn = g->K - k0 < KB ? g->K - k0 : KB, ks = (kn + 31) / 32;
    int first = k0 == 0, last = k0 + KB >= g->K;
    /* every operand of the block is packed before the first product reads it: a tile load
     * of lines that vector stores wrote a moment before waits for those stores, and packing
     * A's panel between kernels halved their rate */
    /* B's tiles (j, s) at Bt + (j * bstep + s) tiles */
    const uint16_t *Bt = Bbuf;
    size_t bstep = (size_t)ks;
    if (g->Bp) Bt = g->Bp + ((size_t)(n0 / 16) * g->KS + k0 / 32) * TILE_ELEMS, bstep = g->KS;
    else pack_b(g->B, g->ldb, g->tb, n0, nn, k0, kn, ks, Bbuf);
    for (int mb = 0; mb < mblocks; mb++)
      pack_a(g->A, g->lda, g->ta, g->M, m0 + 32 * mb, k0, kn, ks,
             Abuf + (size_t)mb * 2 * ks * TILE_ELEMS);
    for (int mb = 0; mb < mblocks; mb++) {
      const uint16_t *ap = Abuf + (size_t)mb * 2 * ks * TILE_ELEMS;
      for (int nb = 0; nb < nblocks; nb++) {
        float *acc = accs + ((size_t)mb * (g->un / 32) + nb) * 32 * 32;
        const uint16_t *b0 = Bt + (size_t)(2 * nb) * bstep * TILE_ELEMS;
        /* the last K block's sums go through a 4 KiB scratch that stays in L1 */
        float *out = last ? accs + (size_t)UNIT_C : acc;
        block_kernel(ap, b0, b0 + bstep * TILE_ELEMS, ks, first, acc, out);
        if (last)
          epilogue(out, g->M, g->N, m0 + 32 * mb, n0 + 32 * nb, g->bias, g->beta, g->C, g->ldc);
      }
    }
  }
}

static void run(gemm_args *g) {
  int units_m = (g->M + g->um - 1) / g->um, units_n = (g->N + g->un - 1) / g->un;
  int units = units_m * units_n;
  /* per thread: B block (KB x un), A block (um x KB), the unit's C sums (um x un fp32: kept
   * between K blocks, invariant 4) and the last block's 32 x 32 scratch; sized for the
   * largest shape unit_shape gives */
  size_t b_elems = (size_t)KB * UNIT_N_MAX, a_elems = (size_t)UNIT_M * KB;
  size_t acc_elems = (size_t)UNIT_C + 32 * 32;
#pragma omp parallel if (units > 1)
  {
    uint16_t *Bbuf = thread_buffer(b_elems * 2 + a_elems * 2 + acc_elems * 4);
    uint16_t *Abuf = Bbuf + b_elems;
    float *accs = (float *)(Abuf + a_elems);
    amx_tiles_configure();
#pragma omp for schedule(static)
    for (int u = 0; u < units; u++) /* m fastest: a thread's consecutive units share B's block */
      run_unit(g, (u % units_m) * g->um, (u / units_m) * g->un, Bbuf, Abuf, accs);
    amx_tiles_release();
  }
}

static void pack_whole(const uint16_t *B, int ldb, int tb, int N, int K, int KS, uint16_t *P);

void gemm_amx_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                   const uint16_t *B, int ldb, const float *bias, float beta, float *C, int ldc) {
  LOOM_ASSERT(loom_kernels_amx() && M > 0 && N > 0 && K > 0 && !(bias && beta != 0.0f));
  int KS = (K + 31) / 32;
  gemm_args g = {ta, tb, M, N, K, A, B, lda, ldb, bias, beta, C, ldc, NULL, KS, 0, 0};
  unit_shape(&g);
  if (M > g.um) {
    /* several row units would each pack the same B blocks (a weight gradient's 50304 rows:
     * 197 times): B is packed whole once, into the calling thread's scratch, kept and grown */
    static _Thread_local uint16_t *whole;
    static _Thread_local size_t whole_elems;
    size_t elems = (size_t)2 * ((N + 31) / 32) * KS * TILE_ELEMS;
    if (elems > whole_elems) {
      free(whole);
      whole = loom_alloc_for(elems * 2, "AMX GEMM packed operand");
      whole_elems = elems;
    }
    pack_whole(B, ldb, tb, N, K, KS, whole);
    g.Bp = whole;
    unit_shape(&g); /* B packed whole: maybe wider units */
  }
  run(&g);
}

/* ---- packed weights ---------------------------------------------------------------------
 * A weight's op(B) packed whole, in the tile layout of the products: the forward (tb = 1) and
 * the data gradient (tb = 0) of a linear layer each keep one, made at the first product after
 * the weight changed (loom_gemm_weights_changed marks them stale: once per optimizer step), so
 * a step packs each weight twice instead of once per unit of every product. The cache is used
 * from one thread at a time, as the decoder calls its GEMMs. */
enum { WCACHE_MAX = 512 };
typedef struct {
  const uint16_t *src;
  int tb, N, K, ldb, valid;
  uint16_t *buf;
  unsigned long used;
} wpack;
static struct {
  wpack e[WCACHE_MAX];
  int n;
  unsigned long clock;
} W;

/* all of op(B) into P: 32-column groups side by side, each 2 x KS tiles (pack_b's layout with
 * ks = KS), groups in parallel */
static void pack_whole(const uint16_t *B, int ldb, int tb, int N, int K, int KS, uint16_t *P) {
  int groups = (N + 31) / 32;
#pragma omp parallel for schedule(static) if (groups > 1)
  for (int q = 0; q < groups; q++) {
    int nn = N - 32 * q < 32 ? N - 32 * q : 32;
    pack_b(B, ldb, tb, 32 * q, nn, 0, K, KS, P + (size_t)q * 2 * KS * TILE_ELEMS);
  }
}

static const uint16_t *packed_weight(const uint16_t *B, int tb, int N, int K, int ldb, int KS) {
  wpack *w = NULL;
  for (int i = 0; i < W.n && !w; i++)
    if (W.e[i].src == B && W.e[i].tb == tb && W.e[i].N == N && W.e[i].K == K &&
        W.e[i].ldb == ldb)
      w = &W.e[i];
  if (!w) {
    if (W.n < WCACHE_MAX) w = &W.e[W.n++];
    else { /* evict the least recently used */
      w = &W.e[0];
      for (int i = 1; i < W.n; i++)
        if (W.e[i].used < w->used) w = &W.e[i];
      free(w->buf);
    }
    size_t elems = (size_t)2 * ((N + 31) / 32) * KS * TILE_ELEMS;
    *w = (wpack){B, tb, N, K, ldb, 0, loom_alloc_for(elems * 2, "packed bf16 weights (AMX)"), 0};
  }
  if (!w->valid) pack_whole(B, ldb, tb, N, K, KS, w->buf), w->valid = 1;
  w->used = ++W.clock;
  return w->buf;
}

void gemm_amx_bf16_w(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                     const uint16_t *W_, int ldw, const float *bias, float beta, float *C,
                     int ldc) {
  LOOM_ASSERT(loom_kernels_amx() && M > 0 && N > 0 && K > 0 && !(bias && beta != 0.0f));
  int KS = (K + 31) / 32;
  gemm_args g = {ta, tb, M, N, K, A, W_, lda, ldw, bias, beta, C, ldc, NULL, KS, 0, 0};
  g.Bp = packed_weight(W_, tb, N, K, ldw, KS);
  unit_shape(&g);
  run(&g);
}

void gemm_amx_weights_changed(const void *base, size_t bytes, int release) {
  const char *lo = base, *hi = lo + bytes;
  int kept = 0;
  for (int i = 0; i < W.n; i++) {
    wpack *w = &W.e[i];
    const char *p = (const char *)w->src;
    if (p >= lo && p < hi) {
      if (release) {
        free(w->buf);
        continue;
      }
      w->valid = 0;
    }
    W.e[kept++] = *w;
  }
  W.n = kept;
}
