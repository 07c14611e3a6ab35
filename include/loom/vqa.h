/* loom vision-language data: Energon-style tar datasets (`loom data prepare`), LLaVA-style
 * annotations, the synthetic shapes VQA set (`loom data synth-vqa`), and the batch loader
 * the VLM trainer calls. Formats: docs/FORMATS-data.md ("Vision-language data").
 *
 * A sample is one or more JPEG images and a conversation: user turns whose text holds an
 * "<image>" marker per image, and assistant turns (the answers). An Energon sample
 * (N.jpg, N.json {"question": ...}, N.txt answer; the fields named by dataset.yaml's
 * field_map) is one user turn "<image>" + question and one assistant turn.
 *
 * Chat template (Qwen2-VL style; every image becomes n = merged vision tokens pads):
 *   <|im_start|>user\n<|vision_start|><|image_pad|>*n<|vision_end|>{question}<|im_end|>\n
 *   <|im_start|>assistant\n{answer}<|im_end|>
 * more turns continue after a "\n". "<image>" markers are replaced in place; images without
 * a marker go at the start of the first user turn. Text between special tokens is encoded
 * piece by piece; the n pad ids are inserted directly. Loss (targets != -100) covers the
 * answer tokens and the closing <|im_end|> of every assistant turn, nothing else.
 *
 * Errors name the data: "shard 000003.tar, sample 00000042: ..." or
 * "anno.jsonl entry 12 (id "x"): ...", and say what to do. */
#ifndef LOOM_VQA_H
#define LOOM_VQA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/image.h"
#include "loom/tokenizer.h"

#define LOOM_VQA_IGNORE (-100) /* target of positions without loss */

/* ==== the batch loader ======================================================================
 * Semantics mirror the text loader (include/loom/loader.h): the N samples of the split are
 * visited per epoch in a Fisher-Yates order seeded by seed ^ (0x9E3779B97F4A7C15*(epoch+1));
 * rank r of world takes positions r, r+world, ...; call k of an epoch uses positions
 * (k*B + b)*world + r, b < B; an epoch has S = floor(N / (B*world)) calls; the state
 * (epoch, index, skipped_bad) restores exactly the batches that followed it.
 * A bad sample (corrupt/truncated JPEG, missing image file, tar sample missing its json,
 * txt or image, image below 28 px, a prompt with image longer than seq_len, an unreadable
 * shard) stops next() with an error naming it (state unchanged) — or, with skip_bad, is
 * replaced by the sample at the next position of the epoch order (position+1, +2, ...
 * modulo N; a replacement may repeat a sample), counted, and remembered so it is not
 * decoded again. Too few samples for one call is an error with the numbers. */

typedef struct {
  const char *path;        /* prepared dataset dir, or LLaVA .json / .jsonl annotations */
  const char *split;       /* "train" | "val" | "test" (prepared dirs; ignored for LLaVA) */
  loom_tokenizer *tokenizer; /* borrowed; must hold the 6 special tokens below */
  int seq_len;             /* T: tokens per sequence (inputs and targets) */
  int micro_batch;         /* B: sequences per call */
  long min_pixels, max_pixels; /* smart_resize limits (0 = Qwen's 3136 / 1003520) */
  int rank, world;         /* data-parallel rank and width */
  uint64_t seed;           /* epoch shuffles */
  bool skip_bad;           /* data.skip_bad_samples */
  int fixed_size;          /* 0: Qwen2-VL images (smart_resize, 2 frames, 2x2 merge, M-RoPE
                              ids); > 0: LLaVA-style, every image resized to this square
                              size, one frame, one token per patch, 1D position ids */
} loom_vqa_options;

/* One batch. Every pointer is owned by the loader and valid until the next call of
 * loom_vqa_loader_next or loom_vqa_loader_close. Row-major throughout. */
typedef struct {
  int B, T;
  int32_t *input_ids;      /* (B, T) token ids; right-padded with pad_id (<|endoftext|>) */
  int32_t *targets;        /* (B, T) input_ids shifted by one (targets[b][t] is the token at
                              t+1) at answer tokens and their closing <|im_end|>; -100
                              everywhere else (prompt, image pads, padding) */
  int32_t *attention_mask; /* (B, T) 1 for real tokens, 0 for padding */
  int32_t *position_ids;   /* (3, B, T) M-RoPE ids as Qwen2-VL's get_rope_index with
                              spatial_merge_size 2: [0] temporal, [1] height, [2] width.
                              Text: all three = running index; image pads: t0 + (0, row,
                              col) of the merged grid, t0 = index after the preceding
                              text; text after an image restarts at max + 1. Padding = 1
                              (Hugging Face's fill value). */
  int32_t *rope_deltas;    /* (B) max position + 1 - real tokens (Qwen's mrope deltas) */
  int32_t *lengths;        /* (B) real tokens per row (= sum of attention_mask row) */
  int32_t *images_per_sample; /* (B) images in each row */
  int n_images;            /* images in the batch, in row order then text order: the order
                              of the <|image_pad|> runs in input_ids (masked_scatter order) */
  int64_t total_patches;   /* sum of patches over the images */
  float *pixel_values;     /* (total_patches, 1176) normalised patches of all images,
                              concatenated; Qwen's patch order (include/loom/image.h) */
  int32_t *grid_thw;       /* (n_images, 3) grid (t=1, h, w) in 14-px patches */
  int32_t *image_row;      /* (n_images) batch row b holding the image */
  int64_t *image_patch_offset; /* (n_images) first row of the image in pixel_values */
  int32_t *image_token_offset; /* (n_images) t of the image's first <|image_pad|> in its row */
  int32_t *image_tokens;   /* (n_images) merged vision tokens = patches/4 (= pads) */
  int64_t n_targets;       /* targets != -100 in the batch */
  int truncated;           /* rows whose answer was cut at T (some answer tokens lost) */
  uint64_t skipped_bad;    /* bad samples skipped during this call */
  uint64_t skipped_bad_total; /* since the start of training (part of the state) */
  const char *const *keys; /* (B) sample keys ("000001.tar/00000042", "anno.json#12") */
} loom_vqa_batch;

typedef struct {
  uint64_t epoch;       /* epochs completed */
  uint64_t index;       /* calls made in the current epoch, < batches per epoch */
  uint64_t skipped_bad; /* bad samples skipped so far on this rank */
} loom_vqa_state;

typedef struct loom_vqa_loader loom_vqa_loader;
int loom_vqa_loader_open(loom_vqa_loader **l, const loom_vqa_options *o);
int loom_vqa_loader_next(loom_vqa_loader *l, loom_vqa_batch *b);
void loom_vqa_loader_get_state(const loom_vqa_loader *l, loom_vqa_state *s);
int loom_vqa_loader_set_state(loom_vqa_loader *l, const loom_vqa_state *s);
uint64_t loom_vqa_loader_num_samples(const loom_vqa_loader *l);       /* N */
uint64_t loom_vqa_loader_batches_per_epoch(const loom_vqa_loader *l); /* S */
/* Shards of the split skipped at open because they are unreadable (skip_bad only). */
uint64_t loom_vqa_loader_bad_shards(const loom_vqa_loader *l);
/* The message of the most recent skipped sample ("" if none), for the log. */
const char *loom_vqa_loader_last_skip(const loom_vqa_loader *l);
void loom_vqa_loader_close(loom_vqa_loader *l);

/* ==== special tokens and sequences ======================================================== */
typedef struct {
  int32_t pad;          /* <|endoftext|> (padding) */
  int32_t im_start, im_end, vision_start, image_pad, vision_end;
} loom_vqa_special;
#define LOOM_VQA_SPECIAL_TOKENS                                                           \
  { "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>",   \
    "<|vision_end|>" }
/* Look the six ids up; an error names the missing token and the fix. */
int loom_vqa_special_ids(const loom_tokenizer *t, loom_vqa_special *sp);

/* One conversation turned into tokens: the full sequence S (not yet cut to T). */
typedef struct {
  int32_t *ids;          /* (n) */
  uint8_t *is_target;    /* (n) 1 where the token is an answer token or its <|im_end|> */
  size_t n;
  int n_images;
  size_t *image_start;   /* (n_images) index of the first <|image_pad|> of each image */
  size_t prompt_end;     /* 1 + index of the last <|vision_end|> (0 without images) */
} loom_vqa_seq;
void loom_vqa_seq_free(loom_vqa_seq *s);

/* ==== samples and datasets ================================================================ */
typedef enum { LOOM_VQA_USER = 0, LOOM_VQA_ASSISTANT = 1 } loom_vqa_role;
typedef struct {
  loom_vqa_role role;
  char *text; /* user text may hold "<image>" markers */
} loom_vqa_turn;
typedef struct {
  char *key;   /* "000001.tar/00000042" | "anno.jsonl#12" */
  char *where; /* "shard 000001.tar, sample 00000042" | "anno.jsonl entry 12 (id "x")" */
  int n_images;
  uint8_t **images;  /* (n_images) JPEG bytes */
  size_t *image_len; /* (n_images) */
  int n_turns;
  loom_vqa_turn *turns;
  char *json;        /* the raw json part of an Energon sample (NULL otherwise) */
} loom_vqa_sample;
void loom_vqa_sample_free(loom_vqa_sample *s);

/* Build the token sequence of a sample whose images have the given merged-token counts. */
int loom_vqa_build_seq(loom_tokenizer *t, const loom_vqa_special *sp, const loom_vqa_sample *s,
                       const long *image_tokens, loom_vqa_seq *out);
/* M-RoPE position ids of one row as Qwen2-VL's get_rope_index: ids (T), the first `len`
 * real, images found at each <|vision_start|> followed by <|image_pad|> with merged grids
 * (grid_h/2, grid_w/2) from grids (n, 3) in order. pos: 3 arrays at pos + k*stride.
 * Returns rope delta; -1 after an error (more images in ids than grids). */
int loom_vqa_mrope(const int32_t *ids, int T, int len, const loom_vqa_special *sp,
                   const int32_t *grids, int n_grids, int32_t *pos, size_t stride,
                   int32_t *delta);

/* A dataset: a prepared Energon-style directory (one split) or LLaVA annotations. */
typedef struct loom_vqa_dataset loom_vqa_dataset;
/* skip_bad: an unreadable shard of the split (not a tar, missing) is skipped and counted in
 * *bad_shards instead of failing. A shard whose size changed since prepare always fails. */
int loom_vqa_dataset_open(loom_vqa_dataset **d, const char *path, const char *split,
                          bool skip_bad, uint64_t *bad_shards);
size_t loom_vqa_dataset_count(const loom_vqa_dataset *d);
/* Read sample i (bytes of its images, turns). Bad data is an error naming it. */
int loom_vqa_dataset_get(loom_vqa_dataset *d, size_t i, loom_vqa_sample *s);
void loom_vqa_dataset_close(loom_vqa_dataset *d);

/* ---- LLaVA annotations: [{"id", "image": "rel/path.jpg" | [paths], "conversations":
 * [{"from": "human", "value": "<image>\nQ"}, {"from": "gpt", "value": "A"}, ...]}] as a JSON
 * array, or one such object per line (.jsonl). Image paths are relative to the annotation
 * file's directory (absolute paths are kept). */
typedef struct loom_llava loom_llava;
int loom_llava_open(loom_llava **a, const char *path);
size_t loom_llava_count(const loom_llava *a);
int loom_llava_get(const loom_llava *a, size_t i, loom_vqa_sample *s);
void loom_llava_close(loom_llava *a);

/* ==== Energon-style prepared directories =================================================
 * DIR holds .tar shards (any depth) and .nv-meta/ (dataset.yaml, split.yaml, .info.yaml,
 * index.json). */
typedef struct {
  char *image;   /* extensions for the image, e.g. "jpg" or "jpg,jpeg" */
  char *context; /* "json[question]" (a json path) or an extension ("txt") */
  char *answers; /* "txt" or "json[answer]" */
} loom_field_map;
void loom_field_map_free(loom_field_map *f);
/* Read .nv-meta/dataset.yaml (sample_type + field_map; VQA keys image/context/answers, or
 * question/answer). */
int loom_energon_read_field_map(const char *dir, loom_field_map *f);
/* Extension a field reads ("json" for json[..]); *path the json key path or NULL. */
const char *loom_field_map_ext(const char *spec, char *buf, size_t n);

typedef struct {
  bool strict;       /* any problem makes prepare fail (exit 1) */
  bool quiet;        /* no progress lines */
} loom_prepare_options;
typedef struct {
  size_t shards, bad_shards, samples, problems;
  size_t split_shards[3], split_samples[3]; /* train, val, test */
} loom_prepare_report;
/* Index DIR's *.tar shards (recursively, name order, .nv-meta excluded), assign them to
 * train/val/test by the ratios (shard-level, like Energon: a shard goes to the split in
 * whose share of samples its middle sample falls), and write .nv-meta/ atomically.
 * Problems (a non-tar shard, truncation, a sample missing a field_map part) are printed as
 * warnings naming shard and key and recorded in index.json; the loader stops at them or
 * skips them (data.skip_bad_samples). An existing dataset.yaml is kept (its field_map is
 * used); else the VQA map (image: jpg, context: json[question], answers: txt) is written. */
int loom_energon_prepare(const char *dir, const double ratios[3], const loom_prepare_options *o,
                         loom_prepare_report *rep);
/* "9,1,0" or "0.8, 0.1, 0.1" -> ratios (non-negative, sum > 0). */
int loom_parse_split_ratio(const char *text, double ratios[3]);
/* Building blocks shared by prepare, the dataset reader and inspect. */
struct json_t;
/* YAML file -> jansson tree (scalars as strings); NULL after an error naming file and line. */
struct json_t *loom_energon_yaml_load(const char *path);
/* .nv-meta/index.json as written by prepare; NULL after an error naming the file. */
struct json_t *loom_energon_index_load(const char *dir);
/* WebDataset member name -> sample key (path up to the basename's first dot) and extension
 * (the rest). Returns 0, or -1 for a name without an extension or a hidden file. */
int loom_wds_split_name(const char *name, char *key, size_t key_cap, const char **ext);

/* ==== synthetic shapes VQA ==================================================================
 * Images of coloured shapes (circle, square, triangle, cross in red, green, blue, yellow,
 * purple) on a 3x3 layout, and one question per image, of four types taken in turn:
 *   colour   "What colour is the circle?" -> "red"          (5 answers)
 *   shape    "What shape is the blue object?" -> "square"   (4 answers)
 *   count    "How many triangles are there?" -> "2"         (4 answers: 1-4)
 *   position "Where is the cross?" -> "left"                (5: left/right/top/bottom/center)
 * The type cycles with the sample index (i mod #types) and the answer within a type with
 * i/#types, so answers are balanced by construction: the majority-answer baseline is about
 * 1/5, 1/4, 1/4, 1/5 (about 22.5% overall); everything else (places, colours or shapes not
 * asked about, sizes, noise, wording) is random. Difficulty: the image holds the asked
 * object(s) (count: 1-4 of the shape) and up to `distractors` other objects that differ in
 * the asked attribute, so with distractors > 0 the model must bind attributes ("the colour
 * of the circle", not of any object). Writes DIR/NNNNNN.tar shards, runs prepare, writes
 * DIR/tokenizer.json (byte-level BPE on the prompts and answers + the 6 special tokens) and
 * DIR/synth_vqa.json (settings, the majority baselines and the question-only prior). */
typedef struct {
  const char *out;
  long samples, shard_size;
  uint64_t seed;
  int image_size;       /* square images, px (default 84: 3x3 = 9 vision tokens, one per
                           layout cell; 112: 4x4 = 16) */
  double split[3];      /* shard split ratios (default 9,1,0) */
  int vocab_size;       /* BPE vocabulary before the added tokens (default 384) */
  int distractors;      /* at most this many other objects per image (0-3, default 0) */
  unsigned types;       /* bit t set: question type t is asked (default all four) */
  bool blank_images;    /* draw the background only (a control: same questions and answers,
                           nothing to see) */
} loom_synth_vqa_options;
#define LOOM_SYNTH_VQA_TYPES 4
#define LOOM_SYNTH_VQA_MAX_OBJECTS 4
/* The defaults above (out, samples and shard_size left 0). */
void loom_synth_vqa_defaults(loom_synth_vqa_options *o);
/* "colour,count" -> bit mask of the question types; an error names an unknown type. */
int loom_synth_vqa_parse_types(const char *list, unsigned *mask);
typedef struct {
  const char *type_names[LOOM_SYNTH_VQA_TYPES];
  /* majority-answer baseline: answer type t with train's most frequent answer */
  double baseline_train[LOOM_SYNTH_VQA_TYPES + 1], baseline_val[LOOM_SYNTH_VQA_TYPES + 1];
  /* question prior: answer each val question with train's most frequent answer of the same
   * question text (the best without the image) */
  double prior_val[LOOM_SYNTH_VQA_TYPES + 1];
  long count_train[LOOM_SYNTH_VQA_TYPES + 1], count_val[LOOM_SYNTH_VQA_TYPES + 1];
  char majority[LOOM_SYNTH_VQA_TYPES][16];
  int vocab_size;       /* final tokenizer vocabulary (with added tokens) */
  loom_prepare_report prepare;
} loom_synth_vqa_report;
int loom_synth_vqa(const loom_synth_vqa_options *o, loom_synth_vqa_report *rep);

/* One synthetic scene (for tests and the demo): RGB image, question, answer, type index and
 * the number of objects placed (drawn unless blank_images). */
typedef struct {
  loom_image image;
  char question[96], answer[16];
  int type;
  int n_objects;
} loom_synth_scene;
void loom_synth_vqa_scene(const loom_synth_vqa_options *o, uint64_t index, loom_synth_scene *s);
/* "colour", "shape", "count", "position" for types 0..3. */
const char *loom_synth_vqa_type_name(int type);

#endif
