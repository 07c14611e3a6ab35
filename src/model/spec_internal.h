/* Private to the model spec files (spec.c, spec_moe.c): the MoE part of resolving and
 * checking a spec. */
#ifndef LOOM_MODEL_SPEC_INTERNAL_H
#define LOOM_MODEL_SPEC_INTERNAL_H
#include "loom/config.h"
#include "loom/model.h"

/* model.moe.* over the preset's MoE values (0 / "" / -1 keep the preset's). */
int loom_moe_spec_from_config(loom_model_spec *s, const loom_config_model *mc);
/* experts, top_k, sizes and the layer rule are consistent; errors name the key. */
int loom_moe_spec_check(const loom_model_spec *s);
#endif
