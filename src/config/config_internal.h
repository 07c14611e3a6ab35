/* Private interface shared by the config module's files (the .c files of src/config): section
 * lookup, suggestions beyond the public ones, typed value parsing and formatting for messages,
 * YAML quoting (loom/yaml.h). The public part of the schema is include/loom/config_schema.h. */
#ifndef LOOM_CONFIG_INTERNAL_H
#define LOOM_CONFIG_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>

#include "loom/yaml.h"
#include "loom/config.h"
#include "loom/config_schema.h"

/* ---- schema (config_schema.c) ---- */
/* true when `name` is a section ("training"); `len` chars of name are compared */
bool loom_config_is_section(const char *name, size_t len);
/* name is the start of a nested section ("vision" of "vision.parallel"; "text"). */
bool loom_config_is_section_prefix(const char *name);
/* Length of the section part of a key name ("training.lr" -> 8). */
size_t loom_config_section_len(const char *name);
/* Name of the first key of a section, for examples in messages. */
const char *loom_config_first_key_of(const char *section);

/* ---- suggestions (config_suggest.c) ---- */
size_t loom_levenshtein(const char *a, const char *b);
/* Nearest section name, or NULL. */
const char *loom_config_nearest_section(const char *name);

/* ---- typed values (config_value.c) ---- */
/* "an integer", "a float", "a bool", "a string", "one of a, b, c" */
const char *loom_config_type_phrase(const loom_config_key *k, char *buf, size_t n);
/* "string", "int", "float", "bool", "enum" */
const char *loom_config_type_name(loom_key_type t);
/* True for YAML's null spellings of a plain scalar: "", "~", "null", "Null", "NULL". */
bool loom_config_is_null_word(const char *text);
/* Error for a null value given to key k. */
int loom_config_null_err(const loom_config_key *k);
/* Restore k's default. */
void loom_config_key_reset(loom_config *c, const loom_config_key *k);
/* A float as the shortest of %.15g / %.17g that round-trips, always with '.' or 'e'. */
void loom_config_format_double(double v, char *buf, size_t n);
/* Short, quoted-for-messages rendering of user text (truncated past 60 chars). */
const char *loom_config_show_text(const char *text, char *buf, size_t n);

#endif
