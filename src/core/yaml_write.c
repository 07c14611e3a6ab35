/* Strings for the YAML files loom writes (config.yaml, hardware profiles): the UTF-8 check
 * every string value passes before a config stores it, and the double-quoted rendering. The
 * quoting is libyaml's emitter, which escapes exactly what a YAML reader would not return
 * unchanged (C0/C1 controls, U+FEFF, U+FFFE/FFFF, and the line breaks NEL, LS and PS that a
 * reader folds), so every valid UTF-8 string loads back byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "loom/core.h"
#include "loom/yaml.h"

size_t loom_yaml_utf8_error(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    unsigned c = p[i];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                                                  : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || i + n > len) return i + 1;
    unsigned cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < n; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return i + 1;
      cp = cp << 6 | (p[i + k] & 0x3F);
    }
    static const unsigned min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_of[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i + 1;
    i += n;
  }
  return 0;
}

typedef struct {
  char *data;
  size_t len, cap;
} out_buf;

static int out_write(void *data, unsigned char *buf, size_t n) {
  out_buf *b = data;
  if (b->len + n + 1 > b->cap) {
    b->cap = (b->len + n + 1) * 2;
    b->data = loom_realloc(b->data, b->cap, 1);
  }
  memcpy(b->data + b->len, buf, n);
  b->len += n;
  b->data[b->len] = 0;
  return 1;
}

/* One document holding one double-quoted scalar; returns 0 when libyaml refused the text. */
static int emit_scalar(const char *s, out_buf *b) {
  yaml_emitter_t em;
  yaml_event_t ev;
  if (!yaml_emitter_initialize(&em)) return 0;
  yaml_emitter_set_output(&em, out_write, b);
  yaml_emitter_set_width(&em, -1);  /* never fold long strings */
  yaml_emitter_set_unicode(&em, 1); /* printable non-ASCII stays as it is */
  int ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) &&
           yaml_emitter_emit(&em, &ev) &&
           yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) &&
           yaml_emitter_emit(&em, &ev) &&
           yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1,
                                        1, YAML_DOUBLE_QUOTED_SCALAR_STYLE) &&
           yaml_emitter_emit(&em, &ev) && yaml_document_end_event_initialize(&ev, 1) &&
           yaml_emitter_emit(&em, &ev) && yaml_stream_end_event_initialize(&ev) &&
           yaml_emitter_emit(&em, &ev) && yaml_emitter_flush(&em);
  yaml_emitter_delete(&em);
  return ok;
}

char *loom_yaml_quote(const char *s) {
  out_buf b = {0};
  if (!loom_yaml_utf8_error(s, strlen(s)) && emit_scalar(s, &b) && b.len >= 2 &&
      b.data[0] == '"') {
    while (b.len && b.data[b.len - 1] == '\n') b.data[--b.len] = 0;
    return b.data;
  }
  /* Not UTF-8 (a string built in code; loading and loom_config_validate refuse these):
   * every byte outside printable ASCII as \xNN, which at least keeps the file readable. */
  free(b.data);
  char *out = loom_malloc(strlen(s) * 4 + 3), *o = out;
  *o++ = '"';
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') *o++ = '\\', *o++ = (char)*p;
    else if (*p < 0x20 || *p >= 0x7f) o += sprintf(o, "\\x%02x", *p);
    else *o++ = (char)*p;
  }
  *o++ = '"';
  *o = 0;
  return out;
}
