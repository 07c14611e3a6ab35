/* A config key's value as a table cell: what the registry stores for it, what filters and
 * sweep constraints compare, and what `loom runs show` compares against the defaults. */
#include "config/config_internal.h"

loom_value loom_config_cell(const loom_config *c, const loom_config_key *k) {
  const char *f = (const char *)c + k->offset;
  switch (k->type) {
    case LOOM_KEY_INT: return (loom_value){.type = LOOM_VAL_INT, .i = *(const long *)f};
    case LOOM_KEY_FLOAT: return (loom_value){.type = LOOM_VAL_REAL, .r = *(const double *)f};
    case LOOM_KEY_BOOL:
      return (loom_value){.type = LOOM_VAL_TEXT, .s = *(const bool *)f ? "true" : "false"};
    default: return (loom_value){.type = LOOM_VAL_TEXT, .s = f};
  }
}

long loom_config_ranks(const loom_config *c) {
  return c->parallel.dp * c->parallel.tp * c->parallel.pp * c->parallel.sp * c->parallel.cp;
}
