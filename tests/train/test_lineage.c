/* The continue-or-fork rule of a resume (src/train/lineage.c), key by key over the whole
 * schema: changing any bookkeeping key (the documented list) continues the run and is named
 * among the bookkeeping changes; changing any other key forks and is named among the
 * trajectory changes; run.parent / run.parent_checkpoint never fork and are never named; a
 * +user key added, changed or removed forks; equal configs continue with nothing named. */
#include <stdio.h>
#include <string.h>

#include "loom/config_schema.h"
#include "harness.h"
#include "loom/core.h"
#include "loom/lineage.h"

/* Another valid value for key k than the one in c (text for loom_config_key_set). */
static void other_value(const loom_config *c, const loom_config_key *k, char *out, size_t n) {
  const char *f = (const char *)c + k->offset;
  switch (k->type) {
    case LOOM_KEY_INT: snprintf(out, n, "%ld", *(const long *)f + 1); break;
    case LOOM_KEY_FLOAT: snprintf(out, n, "%.17g", *(const double *)f * 0.5 + 0.25); break;
    case LOOM_KEY_BOOL: snprintf(out, n, "%s", *(const bool *)f ? "false" : "true"); break;
    case LOOM_KEY_ENUM:
      for (int i = 0; k->allowed[i]; i++)
        if (strcmp(k->allowed[i], f)) {
          snprintf(out, n, "%s", k->allowed[i]);
          return;
        }
      out[0] = 0;
      break;
    default: snprintf(out, n, "%s-x", f); break;
  }
}

/* "key " at the start of the text or after ", " */
static bool names(const char *text, const char *key) {
  size_t n = strlen(key);
  for (const char *p = strstr(text, key); p; p = strstr(p + 1, key))
    if ((p == text || (p >= text + 2 && p[-2] == ',' && p[-1] == ' ')) && p[n] == ' ')
      return true;
  return false;
}

int main(void) {
  loom_config base;
  loom_config_defaults(&base);
  char changed[8192], book[8192];
  bool fork;
  loom_lineage_compare(&base, &base, &fork, changed, sizeof changed, book, sizeof book);
  CHECK(!fork && !changed[0] && !book[0], "equal configs: continue, nothing named ('%s' '%s')",
        changed, book);

  int bookkeeping = 0, trajectory = 0;
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const loom_config_key *k = &loom_config_keys[i];
    loom_config c = base;
    char value[LOOM_STR_MAX + 8];
    other_value(&base, k, value, sizeof value);
    if (!value[0] || loom_config_key_set(&c, k, value)) {
      loom_err_clear();
      CHECK(false, "%s: no other value to set (%s)", k->name, value);
      continue;
    }
    CHECK(!loom_config_key_equal(&c, &base, k), "%s: the value changed", k->name);
    loom_lineage_compare(&c, &base, &fork, changed, sizeof changed, book, sizeof book);
    bool lineage = !strcmp(k->name, "run.parent") || !strcmp(k->name, "run.parent_checkpoint");
    if (lineage) {
      CHECK(!fork && !changed[0] && !book[0], "%s: set by loom, neither forks nor is named",
            k->name);
    } else if (loom_lineage_bookkeeping_key(k->name)) {
      bookkeeping++;
      CHECK(!fork, "%s is bookkeeping: the run continues", k->name);
      CHECK(names(book, k->name) && !changed[0], "%s named as bookkeeping: '%s' / '%s'",
            k->name, book, changed);
    } else {
      trajectory++;
      CHECK(fork, "%s can change the trajectory: a fork", k->name);
      CHECK(names(changed, k->name) && !book[0], "%s named as a trajectory change: '%s' / '%s'",
            k->name, changed, book);
    }
  }
  /* the documented list: 11 keys besides run.parent*, every other key forks */
  CHECK(bookkeeping == 11, "11 bookkeeping keys, found %d", bookkeeping);
  CHECK(trajectory == (int)loom_config_nkeys - 13, "every other key forks (%d)", trajectory);
  printf("  %d bookkeeping keys continue, %d trajectory keys fork\n", bookkeeping, trajectory);

  /* both sides at once: the fork is decided, and each list names its own keys */
  loom_config both = base;
  CHECK(!loom_config_override(&both, "training.log_every=7") &&
            !loom_config_override(&both, "training.lr=0.125"), "overrides apply");
  loom_lineage_compare(&both, &base, &fork, changed, sizeof changed, book, sizeof book);
  CHECK(fork && !strcmp(changed, "training.lr 0.0003 -> 0.125") &&
            !strcmp(book, "training.log_every 10 -> 7"),
        "lr forks, log_every is bookkeeping: '%s' / '%s'", changed, book);

  /* user keys: added, changed, removed all fork */
  loom_config u = base, v = base;
  CHECK(!loom_config_user_set(&u, "exp.idea", "a", true), "user key set");
  loom_lineage_compare(&u, &base, &fork, changed, sizeof changed, book, sizeof book);
  CHECK(fork && !strcmp(changed, "+exp.idea (added)"), "user key added: '%s'", changed);
  loom_lineage_compare(&base, &u, &fork, changed, sizeof changed, book, sizeof book);
  CHECK(fork && !strcmp(changed, "+exp.idea (removed)"), "user key removed: '%s'", changed);
  CHECK(!loom_config_user_set(&v, "exp.idea", "b", true), "user key set");
  loom_lineage_compare(&v, &u, &fork, changed, sizeof changed, book, sizeof book);
  CHECK(fork && !strcmp(changed, "+exp.idea a -> b"), "user key changed: '%s'", changed);
  loom_lineage_compare(&u, &u, &fork, changed, sizeof changed, book, sizeof book);
  CHECK(!fork && !changed[0], "same user keys: continue");

  /* a long list is cut with "...", never past the buffer */
  loom_config many = base;
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    char value[LOOM_STR_MAX + 8];
    other_value(&base, &loom_config_keys[i], value, sizeof value);
    if (loom_config_key_set(&many, &loom_config_keys[i], value)) loom_err_clear();
  }
  char small[64];
  loom_lineage_compare(&many, &base, &fork, small, sizeof small, book, sizeof book);
  size_t len = strlen(small);
  CHECK(fork && len < sizeof small && len >= 3 && !strcmp(small + len - 3, "..."),
        "cut list ends in '...': '%s'", small);
  return harness_finish("test_lineage");
}
