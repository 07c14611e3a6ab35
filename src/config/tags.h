/* run.tags: joining a list of labels into the config's "a,b" text (src/config/tags.c). */
#ifndef LOOM_CONFIG_TAGS_H
#define LOOM_CONFIG_TAGS_H
#include <stddef.h>
/* items (trimmed) joined with ','; errors for an empty, comma-holding or repeated tag. */
int loom_config_tags_join(char *const *items, int n, char *out, size_t cap);
/* "[a, b]" (items optionally quoted) -> "a,b"; "[]" -> "". */
int loom_config_tags_parse_list(const char *text, char *out, size_t cap);
#endif
