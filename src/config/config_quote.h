/* YAML string helpers shared by the writers of YAML files (config.yaml, hardware profiles):
 * the UTF-8 check and libyaml's double-quoted rendering (src/config/config_quote.c). */
#ifndef LOOM_CONFIG_QUOTE_H
#define LOOM_CONFIG_QUOTE_H
#include <stddef.h>

/* 1-based offset of the first byte of s[0..len) that is not part of a valid UTF-8 character
 * (overlong forms, surrogates and code points past U+10FFFF included), or 0 when all is. */
size_t loom_config_utf8_error(const char *s, size_t len);
/* s as a double-quoted YAML scalar (libyaml's emitter: every character a reader would not
 * return unchanged is escaped), malloc'd. s must be UTF-8 for an exact round trip. */
char *loom_config_yaml_quote(const char *s);

#endif
