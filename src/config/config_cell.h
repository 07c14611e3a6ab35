/* Private to src/exp: a config key's value as a table cell (loom_value), the same typing
 * the registry stores: integers and reals as numbers, bools as "true"/"false", text as is. */
#ifndef LOOM_EXP_CONFIG_CELL_H
#define LOOM_EXP_CONFIG_CELL_H
#include "config/config_internal.h"
#include "loom/filter.h"

/* Text values point into c (or at a static "true"/"false"), so c must outlive the value. */
loom_value loom_config_cell(const loom_config *c, const loom_config_key *k);
/* MPI ranks a config asks for: parallel.dp * tp * pp * sp. */
long loom_config_ranks(const loom_config *c);
#endif
