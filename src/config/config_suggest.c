/* "Did you mean ...?" for config keys: Levenshtein distance over full dotted names, over
 * the last component within the same section, and exact last-component matches in other
 * sections ("training.seed" -> "run.seed"). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"
#include "loom/core.h"

#define LEV_MAX 128 /* longer inputs are compared on their first LEV_MAX chars */

size_t loom_levenshtein(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  if (na > LEV_MAX) na = LEV_MAX;
  if (nb > LEV_MAX) nb = LEV_MAX;
  size_t prev[LEV_MAX + 1], cur[LEV_MAX + 1];
  for (size_t j = 0; j <= nb; j++) prev[j] = j;
  for (size_t i = 1; i <= na; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= nb; j++) {
      size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, (nb + 1) * sizeof prev[0]);
  }
  return prev[nb];
}

/* Largest distance still worth suggesting for a word of this length. */
static size_t threshold(size_t len) {
  size_t t = (len + 2) / 3;
  return t < 1 ? 1 : t;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Distance of an unknown dotted name to a valid key (smaller is closer). */
static size_t key_distance(const char *name, const char *key) {
  size_t d = loom_levenshtein(name, key);
  size_t ns = loom_config_section_len(name), ks = loom_config_section_len(key);
  const char *nl = loom_config_key_last(name), *kl = loom_config_key_last(key);
  size_t dl = loom_levenshtein(nl, kl);
  if (ns && ns == ks && !strncmp(name, key, ns)) d = min_sz(d, dl);
  if (dl == 0) d = min_sz(d, 1); /* same key name, other (or no) section */
  size_t nlen = strlen(nl);
  if (nlen >= 4 && !strncmp(kl, nl, nlen)) d = min_sz(d, 2); /* "warmup" -> "warmup_steps" */
  return d;
}

const char *loom_config_nearest_key(const char *name) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    size_t d = key_distance(name, loom_config_keys[i].name);
    if (d < best_d) best_d = d, best = loom_config_keys[i].name;
  }
  return best_d <= threshold(strlen(loom_config_key_last(name))) ? best : NULL;
}

const char *loom_config_nearest_section(const char *name) {
  static _Thread_local char best[64];
  size_t best_d = (size_t)-1;
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const char *k = loom_config_keys[i].name;
    char sec[64];
    size_t len = loom_config_section_len(k);
    if (len >= sizeof sec) continue;
    memcpy(sec, k, len);
    sec[len] = 0;
    size_t d = loom_levenshtein(name, sec);
    if (d < best_d) best_d = d, memcpy(best, sec, len + 1);
  }
  return best_d <= threshold(strlen(name)) ? best : NULL;
}

const char *loom_config_nearest_of(const char *word, const char *const *list) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (; *list; list++) {
    if (!**list) continue;
    size_t d = loom_levenshtein(word, *list);
    if (strlen(word) >= 2 && !strncasecmp(*list, word, strlen(word))) d = 1; /* "cos" */
    if (d < best_d) best_d = d, best = *list;
  }
  return best_d <= threshold(strlen(word)) ? best : NULL;
}

int loom_config_unknown_key_err(const char *name) {
  char shown[96];
  loom_config_show_text(name, shown, sizeof shown);
  const char *near = loom_config_nearest_key(name);
  if (near) return loom_err("unknown key %s; did you mean '%s'?", shown, near);
  return loom_err("unknown key %s; run 'loom config schema' to list the valid keys", shown);
}
