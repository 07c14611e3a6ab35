/* The config schema, public: the table of every key (name, type, default, allowed values,
 * meaning, where the value lives in loom_config) and the typed access to a key that the
 * registry, the runs table, sweeps and lineage need: find a key, set or compare or format
 * its value, name the nearest key in an error, and a key's value as a table cell.
 *
 * What only the config module's own files share (section lookup, null words, defaults
 * reset, messages) stays in src/config/config_internal.h, as ggml keeps ggml-backend-impl.h
 * beside its public ggml-backend.h. */
#ifndef LOOM_CONFIG_SCHEMA_H
#define LOOM_CONFIG_SCHEMA_H
#include <stdbool.h>
#include <stddef.h>

#include "loom/config.h"
#include "loom/filter.h"

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

/* ---- the table (src/config/config_schema.c) ---- */
extern const loom_config_key loom_config_keys[];
extern const size_t loom_config_nkeys;
/* The key of that dotted name, or NULL. */
const loom_config_key *loom_config_key_find(const char *name);
/* Part after the last dot ("training.lr" -> "lr"). */
const char *loom_config_key_last(const char *name);

/* ---- typed values (src/config/config_value.c) ---- */
/* Parse `text` by k's type and store it in c (the whole field is rewritten, so unused bytes
 * stay zero). On error c is untouched and the message names the key (no location). */
int loom_config_key_set(loom_config *c, const loom_config_key *k, const char *text);
/* True when k holds the same bytes in a and b. */
bool loom_config_key_equal(const loom_config *a, const loom_config *b, const loom_config_key *k);
/* k's value as a YAML scalar that loads back bit-identically (malloc'd). */
char *loom_config_key_format(const loom_config *c, const loom_config_key *k);

/* ---- suggestions (src/config/config_suggest.c) ---- */
/* Nearest valid key name to an unknown key, or NULL when nothing is close. */
const char *loom_config_nearest_key(const char *name);
/* Nearest of a NULL-terminated list, or NULL. */
const char *loom_config_nearest_of(const char *word, const char *const *list);
/* "unknown key 'x'; did you mean 'y'?" (or a pointer to `loom config schema`) as an error. */
int loom_config_unknown_key_err(const char *name);

/* ---- table cells (src/config/config_cell.c) ---- */
/* k's value as a cell, typed as the registry stores it: integers and reals as numbers, bools
 * as "true"/"false", text as is. Text values point into c (or at a static "true"/"false"),
 * so c must outlive the value. */
loom_value loom_config_cell(const loom_config *c, const loom_config_key *k);
/* MPI ranks a config asks for: the product of the parallel.* mesh axes. */
long loom_config_ranks(const loom_config *c);

#endif
