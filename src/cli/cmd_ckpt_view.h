/* `loom ckpt inspect DIR`: the merged global view of a checkpoint directory
 * (src/cli/cmd_ckpt_view.c; the per-file view with --pieces stays in cmd_ckpt.c). */
#ifndef LOOM_CLI_CMD_CKPT_VIEW_H
#define LOOM_CLI_CMD_CKPT_VIEW_H
#include <jansson.h>
#include <stdbool.h>

/* Print every tensor of dir once with its global shape, the model's parameter count, the
 * optimizer moments and gradients counted apart, the marker's verdict and state (its
 * trainer_state.json, or NULL): as text, or as one JSON document. 0; -1 with the error set
 * (unreadable files, a tensor whose pieces do not cover it). */
int loom_ckpt_print_view(const char *dir, json_t *state, bool as_json);

/* " (1.23M)"-style suffix for n >= base, else "" (units: NULL-terminated, units[0] = ""). */
void loom_ckpt_format_scaled(double n, const char *const *units, double base, char *buf,
                             size_t cap);
#endif
