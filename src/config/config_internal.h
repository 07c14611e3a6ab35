/* Private interface shared by the config module's files (src/exp/config_*.c): the schema
 * table, key lookup and nearest-key suggestions, and typed value parsing/formatting.
 * Not part of the public API (include/loom/config.h). */
#ifndef LOOM_EXP_CONFIG_INTERNAL_H
#define LOOM_EXP_CONFIG_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>

#include "config/config_quote.h"
#include "loom/config.h"

typedef enum {
  LOOM_KEY_STRING,
  LOOM_KEY_INT,   /* long */
  LOOM_KEY_FLOAT, /* double */
  LOOM_KEY_BOOL,  /* bool */
  LOOM_KEY_ENUM,  /* char[] holding one of `allowed` */
} loom_key_type;

typedef struct {
  const char *name;            /* dotted: "training.lr" */
  loom_key_type type;
  const char *def;             /* default, as text parsed by the same rules as YAML values */
  const char *const *allowed;  /* ENUM: NULL-terminated list of allowed values */
  const char *meaning;         /* one line */
  size_t offset, size;         /* where the value lives in loom_config */
} loom_config_key;

/* ---- schema (config_schema.c) ---- */
extern const loom_config_key loom_config_keys[];
extern const size_t loom_config_nkeys;
const loom_config_key *loom_config_key_find(const char *name);
/* true when `name` is a section ("training"); `len` chars of name are compared */
bool loom_config_is_section(const char *name, size_t len);
/* name is the start of a nested section ("vision" of "vision.parallel"; "text"). */
bool loom_config_is_section_prefix(const char *name);
/* Length of the section part of a key name ("training.lr" -> 8). */
size_t loom_config_section_len(const char *name);
/* Part after the last dot ("training.lr" -> "lr"). */
const char *loom_config_key_last(const char *name);
/* Name of the first key of a section, for examples in messages. */
const char *loom_config_first_key_of(const char *section);

/* ---- suggestions (config_suggest.c) ---- */
size_t loom_levenshtein(const char *a, const char *b);
/* Nearest valid key name to an unknown key, or NULL when nothing is close. */
const char *loom_config_nearest_key(const char *name);
/* Nearest section name, or NULL. */
const char *loom_config_nearest_section(const char *name);
/* Nearest of a NULL-terminated list, or NULL. */
const char *loom_config_nearest_of(const char *word, const char *const *list);
/* "unknown key 'x'; did you mean 'y'?" (or a pointer to `loom config schema`) as an error. */
int loom_config_unknown_key_err(const char *name);

/* ---- typed values (config_value.c) ---- */
/* "an integer", "a float", "a bool", "a string", "one of a, b, c" */
const char *loom_config_type_phrase(const loom_config_key *k, char *buf, size_t n);
/* "string", "int", "float", "bool", "enum" */
const char *loom_config_type_name(loom_key_type t);
/* True for YAML's null spellings of a plain scalar: "", "~", "null", "Null", "NULL". */
bool loom_config_is_null_word(const char *text);
/* Error for a null value given to key k. */
int loom_config_null_err(const loom_config_key *k);
/* Parse `text` by k's type and store it in c (the whole field is rewritten, so unused bytes
 * stay zero). On error c is untouched and the message names the key (no location). */
int loom_config_key_set(loom_config *c, const loom_config_key *k, const char *text);
/* Restore k's default. */
void loom_config_key_reset(loom_config *c, const loom_config_key *k);
/* True when k holds the same bytes in a and b. */
bool loom_config_key_equal(const loom_config *a, const loom_config *b, const loom_config_key *k);
/* k's value as a YAML scalar that loads back bit-identically (malloc'd). */
char *loom_config_key_format(const loom_config *c, const loom_config_key *k);
/* A float as the shortest of %.15g / %.17g that round-trips, always with '.' or 'e'. */
void loom_config_format_double(double v, char *buf, size_t n);
/* Short, quoted-for-messages rendering of user text (truncated past 60 chars). */
const char *loom_config_show_text(const char *text, char *buf, size_t n);

#endif
