/* double instantiation of the vision reference kernels. See vision_ops.inc. */
#include <math.h>

#include "loom/core.h"
#include "loom/kernels_vision.h"

#define T double
#define S(name) name##_f64
#define MATH(fn) fn
#include "vision_ops.inc"
