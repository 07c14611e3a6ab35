/* `loom generate`: sample text from a checkpoint (loom or Hugging Face directory) with a KV
 * cache: prompts from --prompt / --prompts FILE (batched) / --prompt-ids, or a question about
 * an image (--image) for a vision-language model; greedy or temperature / top-k / top-p with a
 * seed; stop tokens (end of text) and stop strings; text streamed to stdout as it comes (one
 * prompt) or every row in order at the end (several); --json for ids; tokens/s to stderr. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/generate_io.h"
#include "loom/generate.h"
#include "loom/tokenizer_check.h"

static void usage(FILE *out) {
  fprintf(out,
      "usage: loom generate CKPT (--prompt TEXT | --prompts FILE | --prompt-ids IDS)\n"
      "                     [--image FILE.jpg] [--max-new-tokens N] [--temperature T]\n"
      "                     [--top-k K] [--top-p P] [--seed S] [--stop STR]... [--ignore-eos]\n"
      "                     [--tokenizer tokenizer.json] [--dtype fp32|bf16] [--json]\n\n"
      "Generate from a loom checkpoint directory (single-file or multi-rank pieces, loaded\n"
      "whole into this process), a run directory runs/<id> (its newest complete checkpoint,\n"
      "as --resume takes it) or a Hugging Face directory (config.json + safetensors).\n"
      "The prompt is run once (prefill) and every new token reuses the cached keys/values.\n"
      "Text is decoded with the run's tokenizer (data.tokenizer of the checkpoint's\n"
      "config.yaml, tokenizer.json of a Hugging Face directory) unless --tokenizer is given.\n"
      "With one prompt the text is streamed as it is generated; with several (--prompts, one\n"
      "per line, run as one batch) they are printed in order when the batch ends, as\n"
      "'[N] text'. Prefill and decode tokens/s go to stderr.\n\n"
      "options:\n"
      "  --prompt TEXT         the prompt\n"
      "  --prompts FILE        one prompt per line (blank lines skipped), batched\n"
      "  --prompt-ids IDS      token ids instead of text: '1,2,3', rows separated by ';'\n"
      "  --image FILE.jpg      vision-language models: ask --prompt (the question) about the\n"
      "                        image, with the chat template and image preprocessing of the\n"
      "                        training data (answer ends at <|im_end|>)\n"
      "  --max-new-tokens N    at most N new tokens per prompt (default 64)\n"
      "  --temperature T       0 = greedy (default); > 0 samples softmax(logits / T)\n"
      "  --top-k K             sample among the K most likely tokens (0 = all; 1 = greedy)\n"
      "  --top-p P             sample among the most likely tokens holding mass P (1 = all)\n"
      "  --seed S              random seed (default 0); prompt N uses seed + N - 1\n"
      "  --stop STR            stop when the text contains STR (repeatable; STR not printed)\n"
      "  --ignore-eos          do not stop at <|endoftext|> / <|im_end|>\n"
      "  --tokenizer FILE      tokenizer.json to encode prompts and decode output\n"
      "  --dtype fp32|bf16     matmuls on fp32 weights (default) or on bf16-rounded weights\n"
      "                        and inputs with fp32 accumulation (half the weight bytes per\n"
      "                        token; needs a CPU with native bf16 GEMMs)\n"
      "  --json                print one JSON object per prompt (prompt_ids, ids, text, stop)\n"
      "                        instead of the text\n"
      "  -h, --help            this text\n");
}

static int parse_double(const char *opt, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= lo && x <= hi))
    return loom_err("%s must be a number in [%g, %g], got '%s'", opt, lo, hi, v);
  *out = x;
  return 0;
}

static int parse_long(const char *opt, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return loom_err("%s must be an integer in [%ld, %ld], got '%s'", opt, lo, hi, v);
  *out = x;
  return 0;
}

static char *find_tokenizer(const loom_gen_model *m, const char *flag, char **why) {
  *why = NULL;
  if (flag) return loom_strdup(flag);
  char *p = m->from_hf ? loom_sprintf("%s/tokenizer.json", m->dir)
                       : loom_strdup(m->cfg.data.tokenizer);
  char *what = loom_sprintf("data.tokenizer of %s/config.yaml", m->dir);
  int missing = loom_tokenizer_check_exists(what, p); /* the run's: loom train's check */
  free(what);
  if (!missing) return p;
  *why = m->from_hf ? loom_sprintf("%s has no tokenizer.json", m->dir)
                    : loom_strdup(loom_errmsg());
  loom_err_clear();
  free(p);
  return NULL;
}

static const char *stop_name(int s) {
  static const char *names[] = {"max_new_tokens", "eos", "stop_string", "max_seq"};
  return names[s];
}

/* The options whose values are checked numbers, and the repeatable --stop. */
typedef struct {
  const char **stops;
  int n_stops;
  long max_new, top_k, seed;
  double temperature, top_p;
} gen_opts;
static int take_stop(const char *v, void *ctx) {
  gen_opts *g = ctx;
  g->stops[g->n_stops++] = v;
  return 0;
}
static int take_max_new(const char *v, void *ctx) {
  return parse_long("--max-new-tokens", v, 1, 1 << 20, &((gen_opts *)ctx)->max_new);
}
static int take_top_k(const char *v, void *ctx) {
  return parse_long("--top-k", v, 0, 1 << 30, &((gen_opts *)ctx)->top_k);
}
static int take_seed(const char *v, void *ctx) {
  return parse_long("--seed", v, 0, 0x7fffffffffffffffL, &((gen_opts *)ctx)->seed);
}
static int take_temperature(const char *v, void *ctx) {
  return parse_double("--temperature", v, 0, 1e6, &((gen_opts *)ctx)->temperature);
}
static int take_top_p(const char *v, void *ctx) {
  return parse_double("--top-p", v, 1e-9, 1, &((gen_opts *)ctx)->top_p);
}

int loom_cmd_generate(int argc, char **argv) {
  const char *ckpt = NULL, *prompt = NULL, *prompts_file = NULL, *prompt_ids = NULL;
  const char *image = NULL, *tok_flag = NULL, *dtype = "fp32";
  gen_opts g = {loom_calloc((size_t)argc + 1, sizeof(char *)), 0, 64, 0, 0, 0, 1};
  bool json = false, ignore_eos = false;
  const loom_cli_opt opts[] = {
      LOOM_OPT_VALUE("--prompt", &prompt),       LOOM_OPT_VALUE("--prompts", &prompts_file),
      LOOM_OPT_VALUE("--prompt-ids", &prompt_ids), LOOM_OPT_VALUE("--image", &image),
      LOOM_OPT_VALUE("--tokenizer", &tok_flag),  LOOM_OPT_VALUE("--dtype", &dtype),
      LOOM_OPT_EACH("--stop", take_stop),        LOOM_OPT_EACH("--max-new-tokens", take_max_new),
      LOOM_OPT_EACH("--top-k", take_top_k),      LOOM_OPT_EACH("--seed", take_seed),
      LOOM_OPT_EACH("--temperature", take_temperature), LOOM_OPT_EACH("--top-p", take_top_p),
      LOOM_OPT_FLAG("--json", &json),            LOOM_OPT_FLAG("--ignore-eos", &ignore_eos), {0}};
  loom_cli_parser p = {.command = "generate", .opts = opts, .ctx = &g};
  int prc = loom_cli_parse(&p, argc, argv, 1), rc = 0;
  ckpt = p.npos ? p.pos[0] : NULL;
  if (prc == LOOM_CLI_OK && p.npos > 1) {
    fprintf(stderr, "loom generate: unexpected argument '%s' (one CKPT)\n\n", p.pos[1]);
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc) {
    free(g.stops);
    if (prc == LOOM_CLI_HELP) return usage(stdout), 0;
    return usage(stderr), 1;
  }
  const char **stops = g.stops;
  int n_stops = g.n_stops;
  long max_new = g.max_new, top_k = g.top_k, seed = g.seed;
  double temperature = g.temperature, top_p = g.top_p;
  int given = (prompt != NULL) + (prompts_file != NULL) + (prompt_ids != NULL);
  if (!rc && !ckpt) rc = loom_err("missing CKPT (a checkpoint directory)");
  else if (!rc && strcmp(dtype, "fp32") && strcmp(dtype, "bf16"))
    rc = loom_err("--dtype must be fp32 or bf16, not '%s'", dtype);
  else if (!rc && image && !prompt)
    rc = loom_err("--image needs the question as --prompt TEXT");
  else if (!rc && given != 1)
    rc = loom_err("give exactly one of --prompt, --prompts FILE and --prompt-ids");
  else if (!rc && prompt && !prompt[0])
    rc = loom_err("the prompt is empty: give some text with --prompt");
  if (rc) {
    fprintf(stderr, "loom generate: %s\n", loom_errmsg());
    free(stops);
    return 1;
  }
  loom_gen_model m;
  loom_tokenizer *tok = NULL;
  char *tok_path = NULL, **lines = NULL;
  int n_lines = 0, n = 0;
  loom_gen_prompt *prompts = NULL;
  int32_t **ids = NULL;
  loom_vlm_prompt vp = {0};
  loom_gen_output *out = NULL;
  char *resolved = NULL; /* CKPT, or the checkpoint of a run directory */
  if (loom_cli_checkpoint_arg(ckpt, &resolved) || loom_gen_model_load(&m, resolved)) {
    fprintf(stderr, "loom generate: %s\n", loom_errmsg());
    free(stops), free(resolved);
    return 1;
  }
  free(resolved);
  m.bf16 = !strcmp(dtype, "bf16");
  char *why = NULL;
  tok_path = find_tokenizer(&m, tok_flag, &why);
  if (tok_path && loom_tokenizer_load(&tok, tok_path)) {
    char *msg = loom_strdup(loom_errmsg());
    rc = loom_err("%s%s", msg, tok_flag ? "" : " (the run's tokenizer; pass --tokenizer PATH)");
    free(msg);
  } else if (!tok && (!prompt_ids || image || n_stops)) {
    rc = loom_err("no tokenizer to encode the prompt: %s; pass --tokenizer tokenizer.json (or "
                  "token ids with --prompt-ids)", why);
  } else if (tok) {
    rc = loom_tokenizer_check_model(tok, tok_path, m.spec.vocab_size,
                                    " for this checkpoint (pass --tokenizer)");
  }
  free(why);
  if (!rc && prompts_file) rc = loom_gen_cli_read_lines(prompts_file, &lines, &n_lines);
  /* the prompts as token ids */
  if (!rc) {
    if (prompt_ids) {
      n = 1;
      for (const char *p = prompt_ids; *p; p++) n += *p == ';';
    } else {
      n = prompts_file ? n_lines : 1;
    }
    prompts = loom_calloc((size_t)n, sizeof *prompts);
    ids = loom_calloc((size_t)n, sizeof *ids);
  }
  if (!rc && image) {
    rc = loom_vlm_prompt_build(&m, tok, image, prompt, &vp);
    if (!rc)
      prompts[0] = (loom_gen_prompt){vp.ids, vp.n, vp.mrope, vp.rope_delta, vp.inject, vp.embeds};
  } else if (!rc && prompt_ids) {
    char *copy = loom_strdup(prompt_ids), *save = NULL, *part = strtok_r(copy, ";", &save);
    for (int i = 0; i < n && !rc; i++, part = strtok_r(NULL, ";", &save)) {
      rc = loom_gen_cli_parse_ids(part ? part : "", &ids[i], &prompts[i].n, m.spec.vocab_size);
      prompts[i].ids = ids[i];
    }
    free(copy);
  } else if (!rc) {
    for (int i = 0; i < n && !rc; i++) {
      const char *text = prompts_file ? lines[i] : prompt;
      size_t cnt;
      if (loom_tokenizer_encode(tok, text, strlen(text), &ids[i], &cnt)) rc = LOOM_ERR;
      else if (cnt == 0) rc = loom_err("prompt %d encodes to no tokens", i + 1);
      prompts[i].ids = ids[i];
      prompts[i].n = (int)cnt;
    }
  }
  /* stop tokens: the tokenizer's end of text (and the chat turn end for image questions) */
  int32_t stop_ids[2];
  int n_stop_ids = 0;
  if (tok && !ignore_eos) {
    const char *names[] = {"<|endoftext|>", "<|im_end|>"};
    for (int k = 0; k < 2; k++) {
      int id = loom_tokenizer_token_id(tok, names[k]);
      if (id >= 0 && id < m.spec.vocab_size) stop_ids[n_stop_ids++] = id;
    }
  }
  if (!rc && n_stops && !tok) rc = loom_err("--stop needs a tokenizer (--tokenizer)");
  loom_gen_streamer st = {tok, stops, n_stops, !json && n == 1, NULL, NULL, NULL, NULL, NULL};
  if (!rc) {
    st.buf = loom_calloc((size_t)n, sizeof *st.buf);
    st.len = loom_calloc((size_t)n, sizeof *st.len);
    st.cap = loom_calloc((size_t)n, sizeof *st.cap);
    st.printed = loom_calloc((size_t)n, sizeof *st.printed);
    st.cut = loom_calloc((size_t)n, sizeof *st.cut);
    out = loom_calloc((size_t)n, sizeof *out);
    loom_gen_options o = {{temperature, (int)top_k, top_p}, (uint64_t)seed, (int)max_new,
                          stop_ids, n_stop_ids, stops, n_stops, tok,
                          tok ? loom_gen_cli_on_token : NULL, &st};
    loom_gen_stats stats;
    rc = loom_generate(&m, prompts, n, &o, out, &stats);
    if (!rc) {
      for (int i = 0; i < n; i++) {
        if (json) {
          json_t *j = json_object(), *pi = json_array(), *gi = json_array();
          for (int k = 0; k < prompts[i].n; k++) json_array_append_new(pi, json_integer(prompts[i].ids[k]));
          for (int k = 0; k < out[i].n; k++) json_array_append_new(gi, json_integer(out[i].ids[k]));
          json_object_set_new(j, "prompt", json_integer(i));
          json_object_set_new(j, "prompt_ids", pi);
          json_object_set_new(j, "ids", gi);
          if (out[i].text) {
            char *clean = loom_gen_cli_utf8(out[i].text);
            json_object_set_new(j, "text", json_string(clean));
            free(clean);
          }
          json_object_set_new(j, "stop", json_string(stop_name(out[i].stop)));
          char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
          printf("%s\n", s);
          free(s);
          json_decref(j);
        } else if (st.stream) {
          const char *t = out[i].text ? out[i].text : "";
          if (strlen(t) > st.printed[i]) fputs(t + st.printed[i], stdout);
          fputc('\n', stdout);
        } else if (out[i].text) {
          printf("[%d] %s\n", i + 1, out[i].text);
        } else {
          printf("[%d]", i + 1);
          for (int k = 0; k < out[i].n; k++) printf(" %d", out[i].ids[k]);
          printf("\n");
        }
      }
      fflush(stdout);
      double pf = stats.prefill_s > 0 ? stats.prefill_tokens / stats.prefill_s : 0;
      double dc = stats.decode_s > 0 ? stats.decode_tokens / stats.decode_s : 0;
      fprintf(stderr,
              "generate: %d prompt%s; prefill %ld tokens in %.3f s (%.1f tokens/s); decode %ld "
              "tokens in %.3f s (%.1f tokens/s)\n", n, n == 1 ? "" : "s", stats.prefill_tokens,
              stats.prefill_s, pf, stats.decode_tokens, stats.decode_s, dc);
    }
  }
  if (rc) fprintf(stderr, "loom generate: %s\n", loom_errmsg());
  for (int i = 0; i < n; i++) {
    if (out) loom_gen_output_free(&out[i]);
    if (ids) free(ids[i]);
    if (st.buf) free(st.buf[i]);
  }
  for (int i = 0; i < n_lines; i++) free(lines[i]);
  free(lines), free(out), free(ids), free(prompts), free(stops), free(tok_path);
  free(st.buf), free(st.len), free(st.cap), free(st.printed), free(st.cut);
  loom_vlm_prompt_free(&vp);
  if (tok) loom_tokenizer_free(tok);
  loom_gen_model_free(&m);
  return rc ? 1 : 0;
}
