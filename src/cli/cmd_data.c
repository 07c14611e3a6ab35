/* `loom data`: prepare training data. Subcommands: synth-text (demo corpus), train-tokenizer
 * (byte-level BPE -> tokenizer.json), tokenize (corpora -> token shards, on every core, with
 * progress: include/loom/corpus.h), encode / decode (inspect a tokenizer), inspect-shard
 * (header and first tokens); vision-language data: synth-vqa, prepare, inspect
 * (src/cli/cmd_data_vqa.c). Errors go to stderr with exit code 1 and leave no partial output
 * file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_data_tokenize.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/corpus.h"
#include "loom/shard.h"
#include "loom/tokenizer.h"

#define EOT "<|endoftext|>"

/* ---- option parsing ---------------------------------------------------------------------- */

typedef struct {
  const char *out, *tokenizer, *text, *bytes, *seed, *vocab_size, *count;
  const char *field;
  bool json;
  char **pos; /* positional arguments (copied in order to the front of argv + 1) */
  int npos;
} opts;

static int fail(const char *sub, const char *msg) {
  fprintf(stderr, "loom data %s: %s\n", sub, msg);
  return 1;
}

static int failerr(const char *sub) { return fail(sub, loom_errmsg()); }

/* Parse argv (argv[0] = subcommand) with the subcommand's option table (storing into o)
 * through the shared parser; the positional arguments go to o->pos. 0; 1 after a usage error
 * (printed); -1 after --help (usage printed to stdout). */
static int parse(const char *sub, const char *usage, int argc, char **argv,
                 const loom_cli_opt *table, opts *o) {
  char command[64];
  snprintf(command, sizeof command, "data %s", sub);
  loom_cli_parser p = {.command = command, .opts = table};
  int rc = loom_cli_parse(&p, argc, argv, 1);
  o->pos = argv + 1; /* compacted in place: npos <= the arguments already read */
  for (int i = 0; i < p.npos; i++) o->pos[o->npos++] = p.pos[i];
  free(p.pos);
  if (rc == LOOM_CLI_HELP) fputs(usage, stdout);
  return rc == LOOM_CLI_OK ? 0 : rc == LOOM_CLI_HELP ? -1 : 1;
}

/* Parse a non-negative integer option; returns -1 (after printing) when invalid. */
static long long parse_count(const char *sub, const char *name, const char *v, long long min) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || end == v || x < min) {
    fprintf(stderr, "loom data %s: %s '%s' is not an integer >= %lld\n", sub, name, v, min);
    return -1;
  }
  return x;
}

static int need(const char *sub, const char *what, const char *v) {
  if (v) return 0;
  fprintf(stderr, "loom data %s: %s is required (see --help)\n", sub, what);
  return 1;
}

static void warn_normalizer(const char *sub, const char *path, const loom_tokenizer *t) {
  if (loom_tokenizer_normalizer(t))
    fprintf(stderr, "loom data %s: warning: %s asks for %s normalization, which loom does not "
            "apply; text not already in %s may tokenize differently from Hugging Face\n", sub,
            path, loom_tokenizer_normalizer(t), loom_tokenizer_normalizer(t));
}

/* ---- synth-text ------------------------------------------------------------------------------ */

static int cmd_synth(int argc, char **argv) {
  const char *sub = "synth-text";
  static const char usage[] =
      "usage: loom data synth-text --out FILE --bytes N [--seed S]\n\n"
      "Write a deterministic corpus of short English-like stories (named characters,\n"
      "places, objects, dialogue), separated by blank lines, of at most N bytes (whole\n"
      "stories). The same seed gives the same file. Default seed: 1.\n";
  opts o = {0};
  const loom_cli_opt table[] = {LOOM_OPT_VALUE("--out", &o.out),
                                LOOM_OPT_VALUE("--bytes", &o.bytes),
                                LOOM_OPT_VALUE("--seed", &o.seed), {0}};
  int rc = parse(sub, usage, argc, argv, table, &o);
  if (rc < 0) return 0;
  if (rc || (rc = need(sub, "--out", o.out)) || (rc = need(sub, "--bytes", o.bytes))) return rc;
  long long bytes = parse_count(sub, "--bytes", o.bytes, 1);
  long long seed = o.seed ? parse_count(sub, "--seed", o.seed, 0) : 1;
  if (bytes < 0 || seed < 0) return 1;
  if (o.npos) return fail(sub, "unexpected argument (see --help)");
  char *text;
  size_t len;
  loom_synth_text((size_t)bytes, (uint64_t)seed, &text, &len);
  rc = loom_write_file_atomic(o.out, text, len);
  free(text);
  if (rc) return failerr(sub);
  printf("wrote %zu bytes of stories to %s\n", len, o.out);
  return 0;
}

/* ---- train-tokenizer ------------------------------------------------------------------------- */

/* Read the corpus files (plain, JSON Lines, compressed) and join them with "<|endoftext|>" so
 * no piece spans two documents. An empty or whitespace-only file is refused, naming it. */
static int read_joined(const char *sub, char **files, int n, const char *field, char **text,
                       size_t *len) {
  size_t cap = 0, total = 0;
  char *all = NULL;
  for (int i = 0; i < n; i++) {
    char *data;
    size_t dlen;
    if (loom_corpus_read_text(files[i], field, EOT, &data, &dlen)) {
      free(all);
      return failerr(sub);
    }
    size_t add = dlen + (i ? strlen(EOT) : 0);
    if (total + add + 1 > cap) {
      cap = 2 * (total + add + 1);
      all = loom_realloc(all, cap, 1);
    }
    if (i) memcpy(all + total, EOT, strlen(EOT)), total += strlen(EOT);
    memcpy(all + total, data, dlen);
    total += dlen;
    free(data);
  }
  all[total] = 0;
  *text = all;
  *len = total;
  return 0;
}

static int cmd_train_tokenizer(int argc, char **argv) {
  const char *sub = "train-tokenizer";
  static const char usage[] =
      "usage: loom data train-tokenizer --vocab-size N --out tokenizer.json [--field F] FILES...\n\n"
      "Train a byte-level BPE tokenizer (GPT-2 pre-tokenizer regex, 256 byte tokens,\n"
      "merges until N-1 ids, then <|endoftext|>) on the corpus files and write a Hugging\n"
      "Face tokenizer.json. Files are the corpora 'loom data tokenize' reads (plain text,\n"
      "JSON Lines with the text in --field, default text; .gz or .zst compressed); each\n"
      "file, and each JSON Lines line, is a separate document. An empty or whitespace-only\n"
      "file is refused.\n";
  opts o = {0};
  const loom_cli_opt table[] = {LOOM_OPT_VALUE("--vocab-size", &o.vocab_size),
                                LOOM_OPT_VALUE("--out", &o.out),
                                LOOM_OPT_VALUE("--field", &o.field), {0}};
  int rc = parse(sub, usage, argc, argv, table, &o);
  if (rc < 0) return 0;
  if (rc || (rc = need(sub, "--out", o.out)) || (rc = need(sub, "--vocab-size", o.vocab_size)))
    return rc;
  long long vs = parse_count(sub, "--vocab-size", o.vocab_size, 0);
  if (vs < 0) return 1;
  if (o.npos == 0) return fail(sub, "give at least one text file to train on"), 1;
  char *text;
  size_t len;
  if (read_joined(sub, o.pos, o.npos, o.field, &text, &len)) return 1;
  double t0 = loom_now();
  rc = loom_tokenizer_train(text, len, vs > (1 << 30) ? -1 : (int)vs, o.out);
  free(text);
  if (rc) return failerr(sub);
  loom_tokenizer *t;
  if (loom_tokenizer_load(&t, o.out)) return failerr(sub);
  printf("trained a byte-level BPE tokenizer: vocab %d on %zu bytes in %.2f s -> %s\n",
         loom_tokenizer_vocab_size(t), len, loom_now() - t0, o.out);
  if (loom_tokenizer_vocab_size(t) < vs)
    printf("note: asked for vocab %lld, but no pair of tokens occurs twice any more in the text; "
           "train on more text for a larger vocabulary\n", vs);
  loom_tokenizer_free(t);
  return 0;
}

/* ---- tokenize: src/cli/cmd_data_tokenize.c ------------------------------------------------ */

/* ---- encode / decode ------------------------------------------------------------------------- */

static int read_stdin(char **data, size_t *len) {
  size_t cap = 65536, n = 0, k;
  char *buf = loom_malloc(cap);
  while ((k = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
    n += k;
    if (cap - n - 1 == 0) {
      buf = loom_realloc(buf, cap *= 2, 1);
    }
  }
  buf[n] = 0;
  *data = buf;
  *len = n;
  return 0;
}

static void print_ids(const int32_t *ids, size_t n, int json) {
  const char *sep = json ? ", " : " ";
  fputs(json ? "{\"ids\": [" : "", stdout);
  for (size_t i = 0; i < n; i++) printf("%s%d", i ? sep : "", (int)ids[i]);
  fputs(json ? "]}\n" : "\n", stdout);
}

/* The bytes of one input: --text, "-" (stdin) or a file. */
static int encode_input(const opts *o, int i, char **data, size_t *len) {
  if (o->text) {
    *data = loom_strdup(o->text);
    *len = strlen(*data);
    return 0;
  }
  if (!strcmp(o->pos[i], "-")) return read_stdin(data, len);
  return loom_read_file(o->pos[i], data, len);
}

static int cmd_encode(int argc, char **argv) {
  const char *sub = "encode";
  static const char usage[] =
      "usage: loom data encode --tokenizer tokenizer.json [--json] (--text STR | FILES... | -)\n\n"
      "Print the token ids of the text (or of each file's bytes, or of stdin with -),\n"
      "space-separated on one line per input, or as {\"ids\": [...]} lines with --json.\n";
  opts o = {0};
  const loom_cli_opt table[] = {LOOM_OPT_VALUE("--tokenizer", &o.tokenizer),
                                LOOM_OPT_FLAG("--json", &o.json), LOOM_OPT_VALUE("--text", &o.text),
                                {0}};
  int rc = parse(sub, usage, argc, argv, table, &o);
  if (rc < 0) return 0;
  if (rc || (rc = need(sub, "--tokenizer", o.tokenizer))) return rc;
  if ((o.text != NULL) == (o.npos > 0)) return fail(sub, "give either --text STR or FILES");
  loom_tokenizer *t;
  if (loom_tokenizer_load(&t, o.tokenizer)) return failerr(sub);
  warn_normalizer(sub, o.tokenizer, t);
  int n_inputs = o.text ? 1 : o.npos;
  for (int i = 0; i < n_inputs && rc == 0; i++) {
    char *data;
    size_t len, n;
    int32_t *ids;
    if ((rc = encode_input(&o, i, &data, &len))) break;
    rc = loom_tokenizer_encode(t, data, len, &ids, &n);
    free(data);
    if (rc) break;
    print_ids(ids, n, o.json);
    free(ids);
  }
  loom_tokenizer_free(t);
  return rc ? failerr(sub) : 0;
}

/* Parse ids from the positional arguments, or from stdin when the only one is "-". */
static int collect_ids(const char *sub, const opts *o, int32_t **ids, size_t *n) {
  char *in = NULL;
  size_t inlen, cap = 1024;
  *ids = loom_malloc(cap * sizeof **ids);
  *n = 0;
  int from_stdin = o->npos == 1 && !strcmp(o->pos[0], "-");
  if (from_stdin) read_stdin(&in, &inlen);
  char *save = NULL, *tok = from_stdin ? strtok_r(in, " \t\r\n,", &save) : NULL;
  for (int i = 0; from_stdin ? tok != NULL : i < o->npos; i++) {
    const char *s = from_stdin ? tok : o->pos[i];
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 0 || v > INT32_MAX) {
      fprintf(stderr, "loom data %s: '%s' is not a token id\n", sub, s);
      free(in);
      return 1;
    }
    if (*n == cap) *ids = loom_realloc(*ids, cap *= 2, sizeof **ids);
    (*ids)[(*n)++] = (int32_t)v;
    if (from_stdin) tok = strtok_r(NULL, " \t\r\n,", &save);
  }
  free(in);
  return 0;
}

static int cmd_decode(int argc, char **argv) {
  const char *sub = "decode";
  static const char usage[] =
      "usage: loom data decode --tokenizer tokenizer.json (IDS... | -)\n\n"
      "Write the bytes the token ids stand for to stdout, exactly (no newline added).\n"
      "With -, read whitespace- or comma-separated ids from stdin.\n";
  opts o = {0};
  const loom_cli_opt table[] = {LOOM_OPT_VALUE("--tokenizer", &o.tokenizer), {0}};
  int rc = parse(sub, usage, argc, argv, table, &o);
  if (rc < 0) return 0;
  if (rc || (rc = need(sub, "--tokenizer", o.tokenizer))) return rc;
  int32_t *ids;
  size_t n;
  if ((rc = collect_ids(sub, &o, &ids, &n))) {
    free(ids);
    return rc;
  }
  loom_tokenizer *t;
  char *text = NULL;
  size_t len = 0;
  rc = loom_tokenizer_load(&t, o.tokenizer);
  if (rc == 0) rc = loom_tokenizer_decode(t, ids, n, &text, &len);
  loom_tokenizer_free(t);
  free(ids);
  if (rc) return failerr(sub);
  fwrite(text, 1, len, stdout);
  free(text);
  return 0;
}

/* ---- inspect-shard --------------------------------------------------------------------------- */

/* Print bytes as a quoted string with C escapes for control and non-UTF-8-safe bytes. */
static void print_quoted(const char *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') fputs("\\n", stdout);
    else if (c == '\t') fputs("\\t", stdout);
    else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
    else putchar(c);
  }
  puts("\"");
}

static int show_decoded(const char *sub, const char *tok_path, const int32_t *ids, size_t n) {
  loom_tokenizer *t;
  char *text;
  size_t len;
  if (loom_tokenizer_load(&t, tok_path)) return failerr(sub);
  int rc = loom_tokenizer_decode(t, ids, n, &text, &len);
  loom_tokenizer_free(t);
  if (rc) return failerr(sub);
  printf("decoded: ");
  print_quoted(text, len);
  free(text);
  return 0;
}

static int cmd_inspect_shard(int argc, char **argv) {
  const char *sub = "inspect-shard";
  static const char usage[] =
      "usage: loom data inspect-shard [--tokenizer tokenizer.json] [--count N] FILE\n\n"
      "Validate a token shard and print its header and first N tokens (default 32),\n"
      "decoded when a tokenizer is given.\n";
  opts o = {0};
  const loom_cli_opt table[] = {LOOM_OPT_VALUE("--tokenizer", &o.tokenizer),
                                LOOM_OPT_VALUE("--count", &o.count), {0}};
  int rc = parse(sub, usage, argc, argv, table, &o);
  if (rc) return rc < 0 ? 0 : rc;
  if (o.npos != 1) return fail(sub, "give exactly one shard file"), 1;
  long long count = o.count ? parse_count(sub, "--count", o.count, 0) : 32;
  if (count < 0) return 1;
  loom_shard s;
  if (loom_shard_open(&s, o.pos[0])) return failerr(sub);
  size_t n = s.h.count < (uint64_t)count ? (size_t)s.h.count : (size_t)count;
  int32_t *ids = loom_malloc((n + 1) * sizeof *ids);
  loom_shard_copy(&s, 0, n, ids);
  printf("file: %s\nversion: %u\ndtype: %s\ntokens: %llu\nvocab_size: %u\n", o.pos[0],
         s.h.version, s.h.dtype == LOOM_SHARD_U16 ? "uint16" : "uint32",
         (unsigned long long)s.h.count, s.h.vocab_size);
  if (s.h.has_eod) printf("end_of_document: %d\n", (int)s.h.eod_token);
  printf("first %zu tokens:", n);
  for (size_t i = 0; i < n; i++) printf(" %d", (int)ids[i]);
  printf("\n");
  loom_shard_close(&s);
  rc = o.tokenizer ? show_decoded(sub, o.tokenizer, ids, n) : 0;
  free(ids);
  return rc;
}

/* ---- dispatch -------------------------------------------------------------------------------- */

/* Vision-language data commands (src/cli/cmd_data_vqa.c). */

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} subs[] = {
    {"synth-text", cmd_synth, "write a deterministic synthetic story corpus"},
    {"train-tokenizer", cmd_train_tokenizer, "train a byte-level BPE tokenizer.json"},
    {"tokenize", loom_cmd_data_tokenize, "encode corpora into token shards (.bin), all cores"},
    {"encode", cmd_encode, "print the token ids of a text"},
    {"decode", cmd_decode, "print the text of token ids"},
    {"inspect-shard", cmd_inspect_shard, "show a shard's header and first tokens"},
    {"synth-vqa", loom_cmd_data_synth_vqa, "write the synthetic shapes VQA set (tar shards)"},
    {"prepare", loom_cmd_data_prepare, "index tar shards: write .nv-meta/ (Energon style)"},
    {"inspect", loom_cmd_data_inspect, "show a VQA dataset's splits and samples"},
};

static void usage(FILE *out) {
  fprintf(out, "usage: loom data <subcommand> [options]\n\nsubcommands:\n");
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
    fprintf(out, "  %-16s %s\n", subs[i].name, subs[i].summary);
  fprintf(out, "\nRun 'loom data <subcommand> --help' for its options.\n");
}

int loom_cmd_data(int argc, char **argv) {
  const char *names[sizeof subs / sizeof subs[0] + 1] = {0};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) names[i] = subs[i].name;
  int sub = loom_cli_subcommand("data", argc, argv, names, NULL);
  if (sub >= 0) return subs[sub].fn(argc - 1, argv + 1);
  if (sub == LOOM_CLI_SUB_HELP) return usage(stdout), 0;
  if (sub == LOOM_CLI_SUB_BAD) fputc('\n', stderr);
  usage(stderr);
  return 1;
}
