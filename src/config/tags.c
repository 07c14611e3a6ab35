/* run.tags: a list of labels given as a YAML list ([ablation, warmup]) in a config file or
 * on the command line, or as one label, kept in the config as "ablation,warmup" (the text
 * config.yaml records and the registry column holds; `loom runs --filter "run.tags HAS 'x'"`
 * matches one label). Each label is non-empty, has no comma, and is not repeated. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "config/tags.h"
#include "loom/core.h"

int loom_config_tags_join(char *const *items, int n, char *out, size_t cap) {
  size_t len = 0;
  out[0] = 0;
  for (int i = 0; i < n; i++) {
    const char *t = items[i];
    while (isspace((unsigned char)*t)) t++;
    size_t tl = strlen(t);
    while (tl && isspace((unsigned char)t[tl - 1])) tl--;
    if (!tl) return loom_err("run.tags: tag %d is empty", i + 1);
    if (memchr(t, ',', tl))
      return loom_err("run.tags: tag '%.*s' contains a comma; a tag is one label", (int)tl, t);
    for (int j = 0; j < i; j++) {
      const char *u = items[j];
      while (isspace((unsigned char)*u)) u++;
      size_t ul = strlen(u);
      while (ul && isspace((unsigned char)u[ul - 1])) ul--;
      if (ul == tl && !memcmp(u, t, tl))
        return loom_err("run.tags: tag '%.*s' is given twice", (int)tl, t);
    }
    if (len + tl + 2 > cap)
      return loom_err("run.tags: the tags are longer than %zu characters in all", cap - 1);
    if (i) out[len++] = ',';
    memcpy(out + len, t, tl);
    len += tl;
    out[len] = 0;
  }
  return 0;
}

int loom_config_tags_parse_list(const char *text, char *out, size_t cap) {
  size_t n = strlen(text);
  if (n < 2 || text[0] != '[' || text[n - 1] != ']')
    return loom_err("run.tags: expected a list [a, b, ...], not '%s'", text);
  char *inner = loom_malloc(n - 1);
  memcpy(inner, text + 1, n - 2);
  inner[n - 2] = 0;
  char **items = NULL;
  int count = 0;
  const char *p = inner;
  bool blank = true;
  for (const char *q = inner; *q; q++) blank &= isspace((unsigned char)*q) != 0;
  while (!blank) {
    const char *c = strchr(p, ',');
    size_t l = c ? (size_t)(c - p) : strlen(p);
    char *item = loom_malloc(l + 1);
    memcpy(item, p, l);
    item[l] = 0;
    /* 'quoted' or "quoted" items: the quotes go */
    char *s = item;
    while (isspace((unsigned char)*s)) s++;
    size_t sl = strlen(s);
    while (sl && isspace((unsigned char)s[sl - 1])) s[--sl] = 0;
    if (sl >= 2 && (s[0] == '\'' || s[0] == '"') && s[sl - 1] == s[0]) {
      s[sl - 1] = 0;
      memmove(item, s + 1, sl - 1);
    } else {
      memmove(item, s, sl + 1);
    }
    items = loom_realloc(items, (size_t)(count + 1), sizeof *items);
    items[count++] = item;
    if (!c) break;
    p = c + 1;
  }
  int rc = loom_config_tags_join(items, count, out, cap);
  for (int i = 0; i < count; i++) free(items[i]);
  free(items);
  free(inner);
  return rc;
}
