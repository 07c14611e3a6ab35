/* Private to the registry (src/registry, with its runs table registry_table.c): the
 * registry handle, the fixed columns of the `runs` table and small SQLite helpers. */
#ifndef LOOM_REGISTRY_INTERNAL_H
#define LOOM_REGISTRY_INTERNAL_H
#include <sqlite3.h>

#include "loom/registry.h"

struct loom_registry {
  sqlite3 *db;
  char *path;
};

typedef enum { LOOM_RCOL_RUN, LOOM_RCOL_METRIC } loom_rcol_group;

typedef struct {
  const char *name;
  const char *sql_type;   /* TEXT, INTEGER, REAL */
  loom_rcol_group group;
  const char *meaning;
} loom_registry_column;

/* Fixed columns of `runs`, in table order (config keys follow). */
extern const loom_registry_column loom_registry_columns[];
extern const int loom_registry_ncolumns;

/* Error from the last SQLite call on db, prefixed with what was being done. */
int loom_registry_sql_err(const loom_registry *r, const char *what);
/* Run one statement without results. Like loom_registry_step, retries while the database is
 * busy (SQLite does not call the busy handler in every case, e.g. while another process
 * switches a new database to WAL or recovers one). */
int loom_registry_exec(loom_registry *r, const char *sql);
/* sqlite3_step for a statement that writes, retried (after a reset) while busy or locked. */
int loom_registry_step(loom_registry *r, sqlite3_stmt *st);
/* "\"training.lr\"": a quoted SQL identifier (malloc'd). */
char *loom_registry_quote_ident(const char *name);
/* Wall-clock seconds since the epoch (with fractions). */
double loom_registry_now(void);
/* This machine's host name. */
void loom_registry_hostname(char *out, size_t n);
#endif
