/* `loom data prepare`, `loom data inspect` and `loom data synth-vqa`: the command-line side
 * of the vision-language data (dispatched from src/cli/cmd_data.c). Errors go to stderr with
 * exit code 1. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/vqa.h"


/* Parse argv (argv[0] = subcommand) with the subcommand's option table through the shared
 * parser (src/cli/options.c); positional arguments go to pos (at most max_pos). 0; 1 after a
 * usage error (printed); -1 after --help (usage printed to stdout). */
static int parse(const char *sub, const char *usage, int argc, char **argv,
                 const loom_cli_opt *table, const char **pos, int max_pos, int *npos) {
  *npos = 0;
  char command[64];
  snprintf(command, sizeof command, "data %s", sub);
  loom_cli_parser p = {.command = command, .opts = table};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  int rc = prc == LOOM_CLI_OK ? 0 : prc == LOOM_CLI_HELP ? -1 : 1;
  for (int k = 0; k < p.npos && !rc; k++) {
    if (*npos < max_pos) pos[(*npos)++] = p.pos[k];
    else rc = (fprintf(stderr, "loom data %s: unexpected argument '%s' (see --help)\n", sub,
                       p.pos[k]), 1);
  }
  free(p.pos);
  if (rc < 0) fputs(usage, stdout);
  return rc;
}

static int num(const char *sub, const char *name, const char *v, long long min, long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || end == v || x < min) {
    fprintf(stderr, "loom data %s: %s '%s' is not an integer >= %lld\n", sub, name, v, min);
    return 1;
  }
  *out = x;
  return 0;
}

static int failerr(const char *sub) {
  fprintf(stderr, "loom data %s: %s\n", sub, loom_errmsg());
  return 1;
}

static void print_split_summary(const loom_prepare_report *r) {
  static const char *names[3] = {"train", "val", "test"};
  for (int s = 0; s < 3; s++)
    printf("  %-5s %5zu shards %8zu samples\n", names[s], r->split_shards[s], r->split_samples[s]);
}

/* ---- prepare ------------------------------------------------------------------------------ */

int loom_cmd_data_prepare(int argc, char **argv) {
  const char *sub = "prepare";
  static const char usage[] =
      "usage: loom data prepare DIR [--split 9,1,0] [--strict]\n\n"
      "Non-interactive `energon prepare`: index the WebDataset tar shards under DIR\n"
      "(N.jpg, N.json {\"question\": ...}, N.txt answer per sample), assign whole shards\n"
      "to train/val/test by the ratio (default 9,1,0), and write DIR/.nv-meta/:\n"
      "dataset.yaml (VQA field map; an existing one is kept), split.yaml, .info.yaml\n"
      "(samples per shard) and index.json (part offsets per sample). Problems (a non-tar\n"
      "file, truncation, a sample missing its image, json or txt) are printed with the\n"
      "shard and sample key; training stops at them unless data.skip_bad_samples: true.\n"
      "--strict makes any problem an error.\n";
  const char *split = "9,1,0", *pos[1];
  bool strict = false;
  int npos;
  const loom_cli_opt opts[] = {LOOM_OPT_VALUE("--split", &split),
                               LOOM_OPT_FLAG("--strict", &strict), {0}};
  int rc = parse(sub, usage, argc, argv, opts, pos, 1, &npos);
  if (rc) return rc < 0 ? 0 : rc;
  if (npos != 1) return fprintf(stderr, "loom data prepare: give the dataset directory\n"), 1;
  double ratios[3];
  if (loom_parse_split_ratio(split, ratios)) return failerr(sub);
  loom_prepare_options po = {strict, false};
  loom_prepare_report r;
  if (loom_energon_prepare(pos[0], ratios, &po, &r)) return failerr(sub);
  printf("indexed %zu shards (%zu unreadable), %zu samples; split %s:\n", r.shards, r.bad_shards,
         r.samples, split);
  print_split_summary(&r);
  if (r.problems)
    printf("%zu problems (warnings above): training stops at them unless "
           "data.skip_bad_samples: true\n", r.problems);
  printf("wrote %s/.nv-meta/ (dataset.yaml, split.yaml, .info.yaml, index.json)\n", pos[0]);
  return 0;
}

/* ---- synth-vqa ---------------------------------------------------------------------------- */

int loom_cmd_data_synth_vqa(int argc, char **argv) {
  const char *sub = "synth-vqa";
  static const char usage[] =
      "usage: loom data synth-vqa --out DIR --samples N --shard-size K [--seed S]\n"
      "                          [--image-size 84] [--distractors 0]\n"
      "                          [--types colour,shape,count,position] [--blank-images]\n"
      "                          [--split 9,1,0] [--vocab-size 384]\n\n"
      "Generate the embedded shapes VQA dataset (no download): JPEG images of coloured\n"
      "shapes on a 3x3 layout, one question each about colour, shape, count or position\n"
      "(--types: the kinds asked, in turn; answers balanced), in tar shards\n"
      "DIR/NNNNNN.tar of K samples; then prepare it (.nv-meta/), write DIR/tokenizer.json\n"
      "(byte-level BPE + <|im_start|>, <|im_end|>, <|vision_start|>, <|image_pad|>,\n"
      "<|vision_end|>) and DIR/synth_vqa.json with the majority-answer baseline per type\n"
      "and the question-only prior. Same seed and options, same bytes. Default seed 1.\n\n"
      "Difficulty: --distractors D adds up to D (0-3) other objects that differ in the\n"
      "asked attribute, so the model must find the right object (\"the colour of the\n"
      "circle\"). 0 (the default) is learnable by tiny-qwen2.5-vl in a few CPU minutes\n"
      "(configs/vqa_demo.yaml); 3 is the hard setting. The default 84 px puts one 28 px\n"
      "vision token on each layout cell. --blank-images draws the background only: the\n"
      "same questions and answers with nothing to see, a control for what a model\n"
      "learns from the text alone.\n";
  /* options left NULL keep loom_synth_vqa_defaults' values */
  const char *out = NULL, *samples = NULL, *shard = NULL, *seed = NULL, *size = NULL,
             *split = "9,1,0", *vocab = NULL, *distract = NULL,
             *types = "colour,shape,count,position", *pos[1];
  int npos;
  bool blank = false;
  const loom_cli_opt opts[] = {
      LOOM_OPT_VALUE("--out", &out),          LOOM_OPT_VALUE("--samples", &samples),
      LOOM_OPT_VALUE("--shard-size", &shard), LOOM_OPT_VALUE("--seed", &seed),
      LOOM_OPT_VALUE("--image-size", &size),  LOOM_OPT_VALUE("--split", &split),
      LOOM_OPT_VALUE("--vocab-size", &vocab), LOOM_OPT_VALUE("--distractors", &distract),
      LOOM_OPT_VALUE("--types", &types),      LOOM_OPT_FLAG("--blank-images", &blank), {0}};
  int rc = parse(sub, usage, argc, argv, opts, pos, 0, &npos);
  if (rc) return rc < 0 ? 0 : rc;
  if (!out || !samples || !shard)
    return fprintf(stderr, "loom data synth-vqa: --out, --samples and --shard-size are required "
                           "(see --help)\n"), 1;
  loom_synth_vqa_options o;
  loom_synth_vqa_defaults(&o);
  long long n, k, v;
  if (num(sub, "--samples", samples, 1, &n) || num(sub, "--shard-size", shard, 1, &k)) return 1;
  o.out = out;
  o.samples = (long)n;
  o.shard_size = (long)k;
  if (seed) {
    if (num(sub, "--seed", seed, 0, &v)) return 1;
    o.seed = (uint64_t)v;
  }
  if (size) {
    if (num(sub, "--image-size", size, 28, &v)) return 1;
    o.image_size = v > 4096 ? 4097 : (int)v; /* loom_synth_vqa names the range */
  }
  if (vocab) {
    if (num(sub, "--vocab-size", vocab, 257, &v)) return 1;
    o.vocab_size = v > 1 << 20 ? 1 << 20 : (int)v;
  }
  if (distract) {
    if (num(sub, "--distractors", distract, 0, &v)) return 1;
    if (v > LOOM_SYNTH_VQA_MAX_OBJECTS - 1)
      return fprintf(stderr, "loom data synth-vqa: --distractors %lld: at most %d\n", v,
                     LOOM_SYNTH_VQA_MAX_OBJECTS - 1), 1;
    o.distractors = (int)v;
  }
  o.blank_images = blank;
  if (loom_synth_vqa_parse_types(types, &o.types)) return failerr(sub);
  if (loom_parse_split_ratio(split, o.split)) return failerr(sub);
  loom_synth_vqa_report r;
  double t0 = loom_now();
  if (loom_synth_vqa(&o, &r)) return failerr(sub);
  loom_vision_grid g;
  loom_vision_tokens_for(o.image_size, o.image_size, LOOM_IMG_MIN_PIXELS_DEFAULT,
                         LOOM_IMG_MAX_PIXELS_DEFAULT, "", &g);
  printf("wrote %lld samples (%dx%d px: %ld patches, %ld vision tokens each; %d distractors at "
         "most) in %zu shards to %s in %.1f s\n", n, o.image_size, o.image_size, g.patches,
         g.tokens, o.distractors, r.prepare.shards, out, loom_now() - t0);
  print_split_summary(&r.prepare);
  printf("tokenizer: %s/tokenizer.json (vocab %d with the special tokens)\n", out, r.vocab_size);
  printf("majority-answer baseline (each type's most frequent train answer) and question prior\n"
         "(each question text's most frequent train answer: the best without the image):\n");
  printf("  %-9s %-8s %9s %9s %9s\n", "type", "majority", "train", "val", "prior");
  for (int t = 0; t <= LOOM_SYNTH_VQA_TYPES; t++) {
    if (t < LOOM_SYNTH_VQA_TYPES && !(o.types & (1u << t))) continue;
    printf("  %-9s %-8s %8.1f%% %8.1f%% %8.1f%%\n",
           t < LOOM_SYNTH_VQA_TYPES ? r.type_names[t] : "overall",
           t < LOOM_SYNTH_VQA_TYPES ? r.majority[t] : "", 100 * r.baseline_train[t],
           100 * r.baseline_val[t], 100 * r.prior_val[t]);
  }
  return 0;
}

/* ---- inspect ------------------------------------------------------------------------------ */

static void print_counts(const char *dir) {
  json_t *ix = loom_energon_index_load(dir);
  if (!ix) return;
  static const char *names[3] = {"train", "val", "test"};
  char *sp = loom_sprintf("%s/.nv-meta/split.yaml", dir);
  json_t *split = loom_energon_yaml_load(sp);
  free(sp);
  json_t *shards = json_object_get(ix, "shards");
  size_t total = 0, bad = 0, damaged = 0;
  for (size_t i = 0; i < json_array_size(shards); i++) {
    json_t *sh = json_array_get(shards, i), *ss = json_object_get(sh, "samples");
    total += json_array_size(ss);
    bad += json_object_get(sh, "error") != NULL;
    for (size_t k = 0; k < json_array_size(ss); k++)
      damaged += json_object_get(json_array_get(ss, k), "error") != NULL;
  }
  printf("dataset: %s: %zu shards (%zu unreadable), %zu samples (%zu damaged)\n", dir,
         json_array_size(shards), bad, total, damaged);
  for (int s = 0; s < 3 && split; s++) {
    json_t *list = json_object_get(json_object_get(split, "split_parts"), names[s]);
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(list); k++)
      for (size_t i = 0; i < json_array_size(shards); i++) {
        json_t *sh = json_array_get(shards, i);
        const char *a = json_string_value(json_object_get(sh, "path"));
        const char *b = json_string_value(json_array_get(list, k));
        if (a && b && !strcmp(a, b)) /* a hand-edited index may lack a path */
          n += json_array_size(json_object_get(sh, "samples"));
      }
    printf("  %-5s %5zu shards %8zu samples\n", names[s], json_array_size(list), n);
  }
  loom_field_map fm;
  if (loom_energon_read_field_map(dir, &fm) == 0) {
    printf("field_map: image: %s, context: %s, answers: %s\n", fm.image, fm.context, fm.answers);
    loom_field_map_free(&fm);
  }
  json_decref(split);
  json_decref(ix);
}

static void show_text(const char *label, const char *s) {
  printf("    %s: \"", label);
  for (const char *p = s; *p; p++)
    if (*p == '\n') printf("\\n");
    else if (*p == '"') printf("\\\"");
    else putchar(*p);
  printf("\"\n");
}

static void show_sample(loom_vqa_dataset *d, size_t i, long minp, long maxp, long *tok_sum,
                        long *shown) {
  loom_vqa_sample s;
  if (loom_vqa_dataset_get(d, i, &s)) {
    printf("  #%zu: BAD: %s\n", i, loom_errmsg());
    return;
  }
  printf("  %s\n", s.key);
  for (int k = 0; k < s.n_images; k++) {
    int w, h;
    loom_vision_grid g;
    if (loom_jpeg_size(s.images[k], s.image_len[k], s.where, &w, &h) ||
        loom_vision_tokens_for(h, w, minp, maxp, s.where, &g)) {
      printf("    image %d: BAD: %s\n", k, loom_errmsg());
      continue;
    }
    printf("    image %d: %dx%d px -> %dx%d (%d x %d patches): %ld patches, %ld vision tokens\n",
           k, w, h, g.grid_w * 14, g.grid_h * 14, g.grid_w, g.grid_h, g.patches, g.tokens);
    *tok_sum += g.tokens;
    (*shown)++;
  }
  for (int k = 0; k < s.n_turns; k++)
    show_text(s.turns[k].role == LOOM_VQA_USER ? "question" : "answer", s.turns[k].text);
  if (s.json) {
    json_t *j = json_loads(s.json, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (type) printf("    type: %s\n", type);
    json_decref(j);
  }
  loom_vqa_sample_free(&s);
}

int loom_cmd_data_inspect(int argc, char **argv) {
  const char *sub = "inspect";
  static const char usage[] =
      "usage: loom data inspect PATH [--samples N] [--split train|val|test]\n"
      "                        [--min-pixels P] [--max-pixels P]\n\n"
      "Show a vision-language dataset: a directory prepared by `loom data prepare`\n"
      "(shards and samples per split, field map) or a LLaVA .json/.jsonl file, then the\n"
      "first N samples (default 3) of the split: key, image size, its size after Qwen's\n"
      "smart_resize within the pixel limits (default 3136 and 1003520), patches and\n"
      "vision tokens per image, question and answer.\n";
  const char *samples = "3", *split = "train", *minp_s = "3136", *maxp_s = "1003520", *pos[1];
  int npos;
  const loom_cli_opt opts[] = {
      LOOM_OPT_VALUE("--samples", &samples),   LOOM_OPT_VALUE("--split", &split),
      LOOM_OPT_VALUE("--min-pixels", &minp_s), LOOM_OPT_VALUE("--max-pixels", &maxp_s), {0}};
  int rc = parse(sub, usage, argc, argv, opts, pos, 1, &npos);
  if (rc) return rc < 0 ? 0 : rc;
  if (npos != 1) return fprintf(stderr, "loom data inspect: give a dataset directory or file\n"), 1;
  long long n, minp, maxp;
  if (num(sub, "--samples", samples, 0, &n) || num(sub, "--min-pixels", minp_s, 0, &minp) ||
      num(sub, "--max-pixels", maxp_s, 1, &maxp))
    return 1;
  int sr, sw;
  if (loom_smart_resize(28, 28, (long)minp, (long)maxp, "", &sr, &sw)) return failerr(sub);
  if (loom_is_dir(pos[0])) print_counts(pos[0]);
  loom_vqa_dataset *d;
  uint64_t bad = 0;
  if (loom_vqa_dataset_open(&d, pos[0], split, true, &bad)) return failerr(sub);
  size_t count = loom_vqa_dataset_count(d);
  if (!loom_is_dir(pos[0])) printf("annotations: %s: %zu entries\n", pos[0], count);
  size_t show = (size_t)n < count ? (size_t)n : count;
  printf("first %zu samples of %s%s (pixel limits %lld..%lld):\n", show,
         loom_is_dir(pos[0]) ? "split " : "", loom_is_dir(pos[0]) ? split : pos[0], minp, maxp);
  long tok_sum = 0, shown = 0;
  for (size_t i = 0; i < show; i++) show_sample(d, i, (long)minp, (long)maxp, &tok_sum, &shown);
  if (shown)
    printf("vision tokens per image: %.1f on average over the %ld images shown\n",
           (double)tok_sum / (double)shown, shown);
  loom_vqa_dataset_close(d);
  return 0;
}
