/* float instantiation of the Mixture-of-Experts reference kernels. See moe_ops.inc. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/moe_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/kernels_moe.h"
#include "loom/prof.h"

#define T float
#define S(name) name##_f32
#define MATH(fn) fn##f
#include "moe_ops.inc"
