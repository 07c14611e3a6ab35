/* double instantiation of the reference kernels (what the finite-difference tests check).
 * See ref_ops.inc. */
#include <cblas.h>
#include <math.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

#define T double
#define S(name) name##_f64
#define MATH(fn) fn /* exp, log, sqrt, tanh */
#define GEMM cblas_dgemm
#include "ref_ops.inc"
