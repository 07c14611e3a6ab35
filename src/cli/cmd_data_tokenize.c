/* `loom data tokenize`: corpora (plain text, JSON Lines, gzip/zstd) -> token shards on every
 * core (the pipeline: include/loom/corpus.h), with a progress line on a terminal, plain
 * periodic lines otherwise, nothing with --quiet. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/cmd_data_tokenize.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/corpus.h"
#include "loom/tokenizer.h"

static const char usage[] =
    "usage: loom data tokenize --tokenizer tokenizer.json --out OUT [options] FILES...\n\n"
    "Encode corpus files with the tokenizer into token shards (format: docs/FORMATS-data.md),\n"
    "on every core: the output is byte-identical whatever the thread count.\n\n"
    "Inputs (by name):\n"
    "  *.txt and any other name   plain text, one document per file\n"
    "  *.jsonl, *.json            JSON Lines: one JSON object a line, its text in --field,\n"
    "                             one document a line (as Hugging Face datasets export);\n"
    "                             blank lines and documents whose text is blank are skipped\n"
    "  + .gz, .zst                gzip- or zstd-compressed, read as a stream\n"
    "Every document is ended by <|endoftext|> with --eot, and always in JSON Lines; the\n"
    "shards then record it as the end-of-document token (what data.pack_documents needs).\n"
    "Refused: an empty or whitespace-only text file, JSON Lines without a document, a line\n"
    "that is not JSON or lacks the field (file:line), damaged compressed data.\n\n"
    "options:\n"
    "  --tokenizer FILE     tokenizer.json\n"
    "  --out OUT            one shard OUT; with --shard-size, shards OUT_000000.bin, ... (OUT\n"
    "                       without .bin) and the manifest OUT.manifest.json, or, when OUT is a\n"
    "                       directory, OUT/shard_000000.bin, ... and OUT/manifest.json;\n"
    "                       data.train_shards takes the manifest or the directory\n"
    "  --shard-size N       tokens per shard (suffix K, M, G: thousands, millions, billions)\n"
    "  --eot                end every document (a text file) with <|endoftext|>\n"
    "  --field NAME         JSON Lines: the field holding the text (default: text)\n"
    "  --threads N          encoding threads (default: every core, OMP_NUM_THREADS)\n"
    "  --quiet              no progress lines\n"
    "  --progress-every S   seconds between progress lines when stderr is not a terminal\n"
    "                       (default 30; a terminal gets one line, refreshed)\n"
    "Prints the tokens, documents and tokens per byte of text.\n";

typedef struct {
  bool tty;
  double every, last; /* last: when a line was printed (0: none yet) */
  int width;          /* of the last terminal line */
} progress_state;

/* "1.23 GB" */
static void bytes_text(double b, char *buf, size_t cap) {
  const char *u[] = {"B", "kB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1000 && i < 4) b /= 1000, i++;
  snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static void count_text(double n, char *buf, size_t cap) {
  const char *u[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (n >= 1000 && i < 4) n /= 1000, i++;
  snprintf(buf, cap, i ? "%.2f%s" : "%.0f%s", n, u[i]);
}

static void duration_text(double s, char *buf, size_t cap) {
  if (!isfinite(s) || s < 0) snprintf(buf, cap, "?");
  else if (s < 60) snprintf(buf, cap, "%.0fs", s);
  else if (s < 3600) snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  else snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* "tokenize: 12.3 MB of 50.0 MB (25%), 3.10M tokens, 1.52M tokens/s, ETA 6s" */
static void on_progress(void *vctx, const loom_corpus_progress *p, bool done) {
  progress_state *st = vctx;
  double now = p->seconds;
  if (!done && now - st->last < (st->tty ? 0.25 : st->every)) return;
  if (done && !st->tty && st->last == 0) return; /* a short job: the summary says it all */
  st->last = now;
  char in[32], total[32], tok[32], rate[32], eta[32], line[200];
  bytes_text((double)p->in_bytes, in, sizeof in);
  bytes_text((double)p->in_total, total, sizeof total);
  count_text((double)p->tokens, tok, sizeof tok);
  count_text(now > 0 ? (double)p->tokens / now : 0, rate, sizeof rate);
  double frac = p->in_total ? (double)p->in_bytes / (double)p->in_total : 1;
  duration_text(done ? now : frac > 0 ? now * (1 / frac - 1) : NAN, eta, sizeof eta);
  int n = snprintf(line, sizeof line, "tokenize: %s of %s (%.0f%%), %s tokens, %s tokens/s, %s %s",
                   in, total, 100 * frac, tok, rate, done ? "done in" : "ETA", eta);
  if (st->tty) {
    fprintf(stderr, "\r%-*s%s", st->width, line, done ? "\n" : "");
    st->width = done ? 0 : n;
  } else {
    fprintf(stderr, "%s\n", line);
  }
  fflush(stderr);
}

/* "100M" -> 100000000 (K, M, G, T: powers of 1000); 0 when invalid. */
static uint64_t parse_size(const char *s) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *s == '-') return 0;
  uint64_t mult = 1;
  if (*end) {
    const char *units = "KMGT";
    const char *u = strchr(units, *end >= 'a' ? *end - 32 : *end);
    if (!u || end[1]) return 0;
    for (const char *q = units; q <= u; q++) mult *= 1000;
  }
  return v > UINT64_MAX / mult ? 0 : (uint64_t)v * mult;
}

static int fail(const char *msg) {
  fprintf(stderr, "loom data tokenize: %s\n", msg);
  return 1;
}

static void print_summary(const loom_corpus_opts *o, const loom_corpus_result *r) {
  const loom_corpus_progress *p = &r->p;
  printf("%llu tokens from %llu bytes of text (%.4f tokens/byte), %llu document%s, in %.2f s "
         "on "
         "%d thread%s -> %s\n",
         (unsigned long long)p->tokens, (unsigned long long)p->text_bytes,
         p->text_bytes ? (double)p->tokens / (double)p->text_bytes : 0.0,
         (unsigned long long)p->documents, p->documents == 1 ? "" : "s", p->seconds, r->threads, r->threads == 1 ? "" : "s",
         r->manifest ? r->manifest : o->out);
  if (r->manifest)
    printf("%d shard%s of up to %llu tokens, listed in the manifest %s\n", r->shards,
           r->shards == 1 ? "" : "s", (unsigned long long)o->shard_tokens, r->manifest);
  if (r->removed_stale)
    printf("removed %d shard%s of an earlier, longer run of the same name\n", r->removed_stale,
           r->removed_stale == 1 ? "" : "s");
  if (p->skipped)
    printf("skipped %llu JSON Lines document%s whose '%s' is empty or blank\n",
           (unsigned long long)p->skipped, p->skipped == 1 ? "" : "s",
           o->field ? o->field : "text");
}

int loom_cmd_data_tokenize(int argc, char **argv) {
  const char *tokenizer = NULL, *out = NULL, *field = NULL, *shard_size = NULL, *threads = NULL,
             *every = NULL;
  bool eot = false, quiet = false;
  const loom_cli_opt table[] = {LOOM_OPT_VALUE("--tokenizer", &tokenizer),
                                LOOM_OPT_VALUE("--out", &out),
                                LOOM_OPT_FLAG("--eot", &eot),
                                LOOM_OPT_VALUE("--field", &field),
                                LOOM_OPT_VALUE("--shard-size", &shard_size),
                                LOOM_OPT_VALUE("--threads", &threads),
                                LOOM_OPT_FLAG("--quiet", &quiet),
                                LOOM_OPT_VALUE("--progress-every", &every),
                                {0}};
  loom_cli_parser p = {.command = "data tokenize", .opts = table};
  int rc = loom_cli_parse(&p, argc, argv, 1);
  if (rc == LOOM_CLI_HELP) fputs(usage, stdout);
  if (rc != LOOM_CLI_OK) {
    free(p.pos);
    return rc == LOOM_CLI_HELP ? 0 : 1;
  }
  loom_corpus_opts o = {.tokenizer = tokenizer,
                        .inputs = (const char *const *)p.pos,
                        .n_inputs = p.npos,
                        .out = out,
                        .eot = eot,
                        .field = field};
  progress_state st = {.tty = isatty(2) == 1, .every = 30};
  char *end = NULL;
  if (!out || !tokenizer)
    rc = fail(!out ? "--out is required (see --help)" : "--tokenizer is required (see --help)");
  else if (p.npos == 0) rc = fail("give at least one corpus file");
  else if (shard_size && !(o.shard_tokens = parse_size(shard_size)))
    rc = fail("--shard-size must be a positive token count such as 100M (K, M, G: 10^3, 10^6, "
              "10^9)");
  else if (threads &&
           ((o.threads = (int)strtol(threads, &end, 10)) < 1 || *end || o.threads > 1024))
    rc = fail("--threads must be an integer in [1, 1024]");
  else if (every && ((st.every = strtod(every, &end)), *end || !(st.every > 0)))
    rc = fail("--progress-every must be a number of seconds > 0");
  if (rc) {
    free(p.pos);
    return rc;
  }
  if (!quiet) o.progress = on_progress, o.progress_ctx = &st;
  loom_tokenizer *t;
  if (loom_tokenizer_load(&t, tokenizer) == 0) {
    if (loom_tokenizer_normalizer(t))
      fprintf(stderr,
              "loom data tokenize: warning: %s asks for %s normalization, which loom "
              "does not apply; text not already in %s may tokenize differently from Hugging "
              "Face\n",
              tokenizer, loom_tokenizer_normalizer(t), loom_tokenizer_normalizer(t));
    loom_tokenizer_free(t);
  }
  loom_corpus_result r;
  rc = loom_corpus_tokenize(&o, &r);
  if (rc) {
    if (st.width) fputc('\n', stderr); /* end the progress line */
    fprintf(stderr, "loom data tokenize: %s\n", loom_errmsg());
  } else {
    print_summary(&o, &r);
  }
  loom_corpus_result_free(&r);
  free(p.pos);
  return rc ? 1 : 0;
}
