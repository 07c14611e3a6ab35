/* double instantiation of the Mixture-of-Experts reference kernels. See moe_ops.inc. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/moe_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/kernels_moe.h"
#include "loom/prof.h"

#define T double
#define S(name) name##_f64
#define MATH(fn) fn
#include "moe_ops.inc"
