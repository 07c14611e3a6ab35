/* The oneDNN GEMM backend: one matmul primitive per (dtype, transposes, M, N, K, leading
 * dimensions, bias, beta), created at first use and cached, with its memory objects, so that
 * a training step after the first allocates nothing: each call only sets data handles and
 * executes. A is (M,K), B is (K,N) with strides that express the transposes; C (M,N) fp32;
 * beta != 0 is a sum post-op; the bias is oneDNN's (1,N) bias argument. The user-managed
 * scratchpad is one buffer shared by every primitive (GEMMs run one at a time).
 * AMX: Debian's oneDNN 2.6 dispatches to AMX only when its max ISA is raised, which is done
 * here before the first primitive unless ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA is set. */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"

#define CACHE_MAX 192

typedef struct {
  int bf16, ta, tb, has_bias;
  long M, N, K, lda, ldb, ldc;
  float beta;
  unsigned long used; /* LRU clock */
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c, bias, scratch;
} entry;

static struct {
  int ready;
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  entry e[CACHE_MAX];
  int n;
  unsigned long clock;
  void *scratch;
  size_t scratch_bytes;
  int bf16_ok; /* -1 unknown */
  char isa[32];
} G = {.bf16_ok = -1};

#define DNNL_CHECK(call)                                                                     \
  do {                                                                                       \
    dnnl_status_t st_ = (call);                                                              \
    if (st_ != dnnl_success) loom_panic(__FILE__, __LINE__, "oneDNN: " #call " failed");    \
  } while (0)

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_sse41: return "sse41";
    default: return "other";
  }
}

static void init(void) {
  if (G.ready) return;
  if (!getenv("ONEDNN_MAX_CPU_ISA") && !getenv("DNNL_MAX_CPU_ISA"))
    dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_amx); /* a cap: CPUs without AMX ignore it */
  DNNL_CHECK(dnnl_engine_create(&G.eng, dnnl_cpu, 0));
  DNNL_CHECK(dnnl_stream_create(&G.stream, G.eng, dnnl_stream_default_flags));
  snprintf(G.isa, sizeof G.isa, "%s", isa_name(dnnl_get_effective_cpu_isa()));
  G.ready = 1;
}

const char *loom_gemm_isa(void) {
  init();
  return G.isa;
}

int loom_gemm_cache_entries(void) { return G.n; }

/* matrix (rows, cols) of dtype with row stride ld, or column-major (transposed storage) */
static void md_of(dnnl_memory_desc_t *md, long rows, long cols, long ld, int trans,
                  dnnl_data_type_t dt) {
  dnnl_dims_t dims = {rows, cols};
  dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static void entry_free(entry *e) {
  dnnl_primitive_destroy(e->prim);
  dnnl_memory_destroy(e->a);
  dnnl_memory_destroy(e->b);
  dnnl_memory_destroy(e->c);
  if (e->bias) dnnl_memory_destroy(e->bias);
  dnnl_memory_destroy(e->scratch);
}

/* Creates the primitive of e's key; returns 0, or -1 when oneDNN has no implementation. */
static int entry_create(entry *e) {
  dnnl_data_type_t dt = e->bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
  md_of(&a_md, e->M, e->K, e->lda, e->ta, dt);
  md_of(&b_md, e->K, e->N, e->ldb, e->tb, dt);
  md_of(&c_md, e->M, e->N, e->ldc, 0, dnnl_f32);
  md_of(&bias_md, 1, e->N, e->N, 0, dnnl_f32);
  dnnl_matmul_desc_t desc;
  DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, e->has_bias ? &bias_md : NULL, &c_md));
  dnnl_primitive_attr_t attr;
  DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  dnnl_post_ops_t po = NULL;
  if (e->beta != 0.0f) {
    DNNL_CHECK(dnnl_post_ops_create(&po));
    DNNL_CHECK(dnnl_post_ops_append_sum(po, e->beta));
    DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
  }
  dnnl_primitive_desc_t pd;
  dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, G.eng, NULL);
  dnnl_primitive_attr_destroy(attr);
  if (po) dnnl_post_ops_destroy(po);
  if (st != dnnl_success) return -1;
  DNNL_CHECK(dnnl_primitive_create(&e->prim, pd));
  const dnnl_memory_desc_t *sp_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t sp = dnnl_memory_desc_get_size(sp_md);
  if (sp > G.scratch_bytes) { /* grows only while new shapes appear (the first step) */
    loom_free(G.scratch);
    G.scratch = loom_alloc(sp);
    G.scratch_bytes = sp;
  }
  DNNL_CHECK(dnnl_memory_create(&e->a, &a_md, G.eng, DNNL_MEMORY_NONE));
  DNNL_CHECK(dnnl_memory_create(&e->b, &b_md, G.eng, DNNL_MEMORY_NONE));
  DNNL_CHECK(dnnl_memory_create(&e->c, &c_md, G.eng, DNNL_MEMORY_NONE));
  e->bias = NULL;
  if (e->has_bias) DNNL_CHECK(dnnl_memory_create(&e->bias, &bias_md, G.eng, DNNL_MEMORY_NONE));
  DNNL_CHECK(dnnl_memory_create(&e->scratch, sp_md, G.eng, DNNL_MEMORY_NONE));
  dnnl_primitive_desc_destroy(pd);
  return 0;
}

static entry *lookup(const entry *key) {
  for (int i = 0; i < G.n; i++) {
    entry *e = &G.e[i];
    if (e->bf16 == key->bf16 && e->ta == key->ta && e->tb == key->tb && e->M == key->M &&
        e->N == key->N && e->K == key->K && e->lda == key->lda && e->ldb == key->ldb &&
        e->ldc == key->ldc && e->has_bias == key->has_bias && e->beta == key->beta)
      return e;
  }
  entry made = *key;
  if (entry_create(&made)) return NULL;
  entry *slot;
  if (G.n < CACHE_MAX) {
    slot = &G.e[G.n++];
  } else { /* evict the least recently used */
    slot = &G.e[0];
    for (int i = 1; i < G.n; i++)
      if (G.e[i].used < slot->used) slot = &G.e[i];
    entry_free(slot);
  }
  *slot = made;
  return slot;
}

int gemm_onednn_bf16_ok(void) {
  if (G.bf16_ok < 0) {
    init();
    entry key = {.bf16 = 1, .ta = 0, .tb = 1, .M = 16, .N = 16, .K = 32, .lda = 32, .ldb = 32, .ldc = 16};
    G.bf16_ok = lookup(&key) != NULL;
  }
  return G.bf16_ok;
}

void gemm_onednn(int bf16, int ta, int tb, int M, int N, int K, const void *A, int lda,
                 const void *B, int ldb, const float *bias, float beta, float *C, int ldc) {
  init();
  entry key = {.bf16 = bf16, .ta = ta, .tb = tb, .has_bias = bias != NULL, .M = M, .N = N,
               .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .beta = beta};
  entry *e = lookup(&key);
  if (!e) {
    static char msg[160];
    snprintf(msg, sizeof msg, "oneDNN has no %s matmul for M=%d N=%d K=%d on this CPU; run with "
             "LOOM_GEMM=openblas", bf16 ? "bf16" : "fp32", M, N, K);
    loom_panic(__FILE__, __LINE__, msg);
  }
  e->used = ++G.clock;
  DNNL_CHECK(dnnl_memory_set_data_handle_v2(e->a, (void *)A, G.stream));
  DNNL_CHECK(dnnl_memory_set_data_handle_v2(e->b, (void *)B, G.stream));
  DNNL_CHECK(dnnl_memory_set_data_handle_v2(e->c, C, G.stream));
  DNNL_CHECK(dnnl_memory_set_data_handle_v2(e->scratch, G.scratch, G.stream));
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->a},
                             {DNNL_ARG_WEIGHTS, e->b},
                             {DNNL_ARG_DST, e->c},
                             {DNNL_ARG_SCRATCHPAD, e->scratch},
                             {DNNL_ARG_BIAS, e->bias}};
  if (bias) DNNL_CHECK(dnnl_memory_set_data_handle_v2(e->bias, (void *)bias, G.stream));
  DNNL_CHECK(dnnl_primitive_execute(e->prim, G.stream, bias ? 5 : 4, args));
  DNNL_CHECK(dnnl_stream_wait(G.stream));
}
