/* float instantiation of the reference kernels (what the trainer runs). See ref_ops.inc. */
#include <cblas.h>
#include <math.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

#define T float
#define S(name) name##_f32
#define MATH(fn) fn##f /* expf, logf, sqrtf, tanhf */
#define GEMM cblas_sgemm
#include "ref_ops.inc"
