/* float instantiation of the vision reference kernels. See vision_ops.inc. */
#include <math.h>

#include "loom/core.h"
#include "loom/kernels_vision.h"

#define T float
#define S(name) name##_f32
#define MATH(fn) fn##f
#include "vision_ops.inc"
