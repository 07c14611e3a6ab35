/* The generation loop over a batch of prompts: one prefill forward of every prompt (ragged
 * rows, no padding), then one forward per step of the rows still running, each appending its
 * last token to its KV cache rows (the decoder's cached forward, loom_decoder_forward_cached:
 * the model's own layers, src/model/decoder_cached.c); sampling per row (row r draws from its
 * own generator seeded with seed + r, so a row's output does not depend on the other rows); a
 * row ends at a stop token, a stop string, max_new_tokens, or when its sequence fills
 * max_seq. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/generate.h"

void loom_gen_output_free(loom_gen_output *o) {
  free(o->ids);
  free(o->text);
  memset(o, 0, sizeof *o);
}

static bool is_stop_id(const loom_gen_options *o, int32_t id) {
  for (int i = 0; i < o->n_stop_ids; i++)
    if (o->stop_ids[i] == id) return true;
  return false;
}

/* The decoded text of out, cut before the first stop string; true when one was found. */
static int decode_row(const loom_gen_options *o, loom_gen_output *out, bool *stopped) {
  *stopped = false;
  if (!o->tok) return 0;
  char *text;
  size_t len;
  if (loom_tokenizer_decode(o->tok, out->ids, (size_t)out->n, &text, &len)) return LOOM_ERR;
  for (int i = 0; i < o->n_stop_strings; i++) {
    char *hit = o->stop_strings[i][0] ? strstr(text, o->stop_strings[i]) : NULL;
    if (hit) {
      *hit = 0;
      *stopped = true;
    }
  }
  free(out->text);
  out->text = text;
  return 0;
}

int loom_generate(const loom_gen_model *m, const loom_gen_prompt *prompts, int n,
                  const loom_gen_options *o, loom_gen_output *out, loom_gen_stats *stats) {
  const loom_model_spec *s = &m->spec;
  memset(stats, 0, sizeof *stats);
  memset(out, 0, (size_t)n * sizeof *out);
  if (n < 1) return loom_err("no prompts to generate from");
  if (o->max_new_tokens < 1)
    return loom_err("--max-new-tokens must be at least 1, got %d", o->max_new_tokens);
  if (o->n_stop_strings > 0 && !o->tok)
    return loom_err("stop strings need a tokenizer to decode the generated tokens");
  int longest = 0, M = 0;
  bool any_mrope = false, any_inject = false;
  for (int i = 0; i < n; i++) {
    if (prompts[i].n < 1)
      return loom_err("prompt %d is empty (no tokens): give at least one token of text", i + 1);
    if (prompts[i].n >= s->max_seq)
      return loom_err("prompt %d has %d tokens but the model's max_seq is %d: at most %d prompt "
                      "tokens leave room for one new token; shorten the prompt", i + 1,
                      prompts[i].n, s->max_seq, s->max_seq - 1);
    if (prompts[i].n > longest) longest = prompts[i].n;
    any_mrope |= prompts[i].mrope != NULL;
    any_inject |= prompts[i].inject != NULL;
    M += prompts[i].n;
  }
  long want = (long)longest + o->max_new_tokens;
  int S = want < s->max_seq ? (int)want : s->max_seq;
  /* the decoder's matmuls in the precision asked for (--dtype), and its KV cache */
  loom_kv_cache cache;
  if (loom_decoder_set_bf16(m->d, m->bf16) || loom_kv_cache_create(&cache, m->d, n, S))
    return LOOM_ERR;
  int V = s->vocab_size, C = s->hidden;
  int *row = loom_malloc((size_t)n * sizeof *row), *count = loom_malloc((size_t)n * sizeof *count);
  int *delta = loom_calloc((size_t)n, sizeof *delta);
  bool *done = loom_calloc((size_t)n, sizeof *done);
  int32_t *tokens = loom_malloc((size_t)M * sizeof *tokens), *next = loom_malloc((size_t)n * sizeof *next);
  int32_t *mrope = any_mrope ? loom_malloc(3 * (size_t)M * sizeof *mrope) : NULL;
  int *inject = any_inject ? loom_malloc((size_t)M * sizeof *inject) : NULL;
  float *logits = loom_malloc((size_t)n * V * sizeof *logits), *embeds = NULL;
  loom_rng *rng = loom_malloc((size_t)n * sizeof *rng);
  /* prefill: every prompt as one ragged batch */
  size_t emb_total = 0;
  for (int i = 0; i < n; i++) {
    int mx = -1;
    for (int j = 0; prompts[i].inject && j < prompts[i].n; j++)
      if (prompts[i].inject[j] > mx) mx = prompts[i].inject[j];
    emb_total += (size_t)(mx + 1);
  }
  if (any_inject) embeds = loom_malloc((emb_total ? emb_total : 1) * C * sizeof *embeds);
  size_t emb_off = 0;
  for (int i = 0, pos = 0; i < n; i++) {
    const loom_gen_prompt *p = &prompts[i];
    row[i] = i;
    count[i] = p->n;
    delta[i] = p->mrope ? p->rope_delta : 0;
    loom_rng_seed(&rng[i], o->seed + (uint64_t)i);
    int mx = -1;
    for (int j = 0; j < p->n; j++, pos++) {
      tokens[pos] = p->ids[j];
      for (int k = 0; mrope && k < 3; k++)
        mrope[(size_t)k * M + pos] = p->mrope ? p->mrope[(size_t)k * p->n + j] : j;
      if (inject) {
        int slot = p->inject ? p->inject[j] : -1;
        inject[pos] = slot >= 0 ? (int)emb_off + slot : -1;
        if (slot > mx) mx = slot;
      }
    }
    if (mx >= 0) {
      memcpy(embeds + emb_off * C, p->embeds, (size_t)(mx + 1) * C * sizeof(float));
      emb_off += (size_t)(mx + 1);
    }
  }
  loom_kv_batch b = {n, row, count, tokens, mrope, delta, inject, embeds, false};
  double t0 = loom_now();
  int rc = loom_decoder_forward_cached(m->d, &cache, &b, logits);
  stats->prefill_s = loom_now() - t0;
  stats->prefill_tokens = M;
  for (int i = 0; i < n; i++) {
    out[i].ids = loom_malloc((size_t)o->max_new_tokens * sizeof(int32_t));
  }
  t0 = loom_now();
  int running = n;
  for (int step = 0; !rc && running > 0; step++) {
    /* sample the next token of every running row from its logits row */
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (done[i]) continue;
      int32_t id = loom_sample_token(logits + (size_t)k++ * V, V, &o->sampler, &rng[i]);
      if (is_stop_id(o, id)) {
        out[i].stop = 1;
        done[i] = true;
        continue;
      }
      out[i].ids[out[i].n++] = id;
      if (o->on_token) o->on_token(o->on_token_ctx, i, id);
      bool hit = false;
      if (o->n_stop_strings > 0 && (rc = decode_row(o, &out[i], &hit))) break;
      if (hit) out[i].stop = 2;
      else if (out[i].n >= o->max_new_tokens) out[i].stop = 0;
      else if (cache.len[i] + 1 >= s->max_seq) out[i].stop = 3; /* prompt + new = max_seq */
      else {
        next[i] = id;
        continue;
      }
      done[i] = true;
    }
    if (rc) break;
    running = 0;
    for (int i = 0; i < n; i++)
      if (!done[i]) {
        row[running] = i;
        count[running] = 1;
        tokens[running] = next[i];
        running++;
      }
    if (running == 0) break;
    for (int i = 0; mrope && i < running; i++) /* text after the prompt: slot + delta */
      for (int kk = 0; kk < 3; kk++)
        mrope[(size_t)kk * running + i] = cache.len[row[i]] + delta[row[i]];
    loom_kv_batch d = {running, row, count, tokens, mrope, delta, NULL, NULL, false};
    rc = loom_decoder_forward_cached(m->d, &cache, &d, logits);
    stats->decode_tokens += running;
  }
  stats->decode_s = loom_now() - t0;
  for (int i = 0; i < n && !rc; i++) {
    bool hit;
    if (!out[i].text && o->tok) rc = decode_row(o, &out[i], &hit);
  }
  free(row), free(count), free(delta), free(done), free(tokens), free(next), free(mrope);
  free(inject), free(logits), free(embeds), free(rng);
  loom_kv_cache_free(&cache);
  if (rc)
    for (int i = 0; i < n; i++) loom_gen_output_free(&out[i]);
  return rc;
}
