/* Synthetic shapes VQA scenes: the asked question types take turns with the sample index
 * (i mod #types) and so does the answer within a type ((i/#types) mod #answers), so answers
 * are balanced by construction; the scene is then built so that answer is the only right
 * one: the asked object(s) on a 3x3 layout plus up to `distractors` other objects that
 * differ from them in the attribute the question names (0 by default: nothing to tell apart,
 * learnable by a tiny model in a short CPU run; 3: attribute binding among up to 4 objects).
 * Drawn in C with 4x4 supersampled edges on a noisy dark background (or the background only,
 * blank_images). The default 84 px is one 28 px vision token per layout cell. Sample i of
 * seed s depends only on (s, i) and the options. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/vqa.h"

enum { CIRCLE, SQUARE, TRIANGLE, CROSS, N_SHAPES };
enum { N_COLOURS = 5 };
static const char *shape_names[N_SHAPES] = {"circle", "square", "triangle", "cross"};
static const char *colour_names[N_COLOURS] = {"red", "green", "blue", "yellow", "purple"};
static const uint8_t colour_rgb[N_COLOURS][3] = {
    {220, 40, 40}, {40, 180, 60}, {50, 90, 235}, {235, 215, 40}, {165, 60, 205}};
/* Cells of the 3x3 layout (row*3 + col) named by the position question. */
static const char *pos_names[5] = {"left", "right", "top", "bottom", "center"};
static const int pos_cells[5] = {3, 5, 1, 7, 4};

typedef struct {
  int shape, colour, cell;
} object;

/* 1 if (dx, dy), relative to the centre in units of the radius, is inside the shape. */
static int inside(int shape, double dx, double dy) {
  switch (shape) {
    case CIRCLE: return dx * dx + dy * dy <= 1.0;
    case SQUARE: return fabs(dx) <= 0.82 && fabs(dy) <= 0.82;
    case TRIANGLE: /* apex up: y from -0.9 (apex) to 0.8 (base), half-width grows to 0.95 */
      if (dy < -0.9 || dy > 0.8) return 0;
      return fabs(dx) <= 0.95 * (dy + 0.9) / 1.7;
    case CROSS:
      return (fabs(dx) <= 0.3 && fabs(dy) <= 0.95) || (fabs(dy) <= 0.3 && fabs(dx) <= 0.95);
  }
  return 0;
}

static void draw(loom_image *im, const object *o, loom_rng *rng) {
  double cell = im->w / 3.0;
  double r = cell * (0.30 + 0.08 * loom_rng_uniform(rng));
  double cx = (o->cell % 3 + 0.5) * cell + (loom_rng_uniform(rng) - 0.5) * cell * 0.2;
  double cy = (o->cell / 3 + 0.5) * cell + (loom_rng_uniform(rng) - 0.5) * cell * 0.2;
  int rgb[3];
  for (int c = 0; c < 3; c++) {
    int v = colour_rgb[o->colour][c] + (int)loom_rng_below(rng, 21) - 10;
    rgb[c] = v < 0 ? 0 : v > 255 ? 255 : v;
  }
  int x0 = (int)floor(cx - r) - 1, x1 = (int)ceil(cx + r) + 1;
  int y0 = (int)floor(cy - r) - 1, y1 = (int)ceil(cy + r) + 1;
  for (int y = y0 < 0 ? 0 : y0; y <= y1 && y < im->h; y++)
    for (int x = x0 < 0 ? 0 : x0; x <= x1 && x < im->w; x++) {
      int hits = 0;
      for (int sy = 0; sy < 4; sy++)
        for (int sx = 0; sx < 4; sx++)
          hits += inside(o->shape, (x + (sx + 0.5) / 4 - cx) / r, (y + (sy + 0.5) / 4 - cy) / r);
      if (!hits) continue;
      uint8_t *p = im->rgb + ((size_t)y * im->w + x) * 3;
      for (int c = 0; c < 3; c++) p[c] = (uint8_t)((p[c] * (16 - hits) + rgb[c] * hits) / 16);
    }
}

/* n distinct cells, none of them in `taken` (bitmask), in random order. */
static void pick_cells(loom_rng *rng, int taken, int n, int *out) {
  int free_cells[9], nf = 0;
  for (int c = 0; c < 9; c++)
    if (!(taken & (1 << c))) free_cells[nf++] = c;
  for (int i = 0; i < n; i++) {
    int j = i + (int)loom_rng_below(rng, (uint64_t)(nf - i));
    int t = free_cells[i];
    free_cells[i] = free_cells[j];
    free_cells[j] = t;
    out[i] = free_cells[i];
  }
}

static int other_than(loom_rng *rng, int n, int avoid) {
  int v = (int)loom_rng_below(rng, (uint64_t)(n - 1));
  return v >= avoid ? v + 1 : v;
}

static const char *plural(int shape) { return shape == CROSS ? "crosses" : NULL; }

void loom_synth_vqa_defaults(loom_synth_vqa_options *o) {
  memset(o, 0, sizeof *o);
  o->seed = 1;
  o->image_size = 84;
  o->split[0] = 9, o->split[1] = 1;
  o->vocab_size = 384;
  o->distractors = 0;
  o->types = (1u << LOOM_SYNTH_VQA_TYPES) - 1;
}

int loom_synth_vqa_parse_types(const char *list, unsigned *mask) {
  *mask = 0;
  const char *p = list;
  while (*p) {
    size_t n = strcspn(p, ",");
    int t = 0;
    while (t < LOOM_SYNTH_VQA_TYPES && !(strlen(loom_synth_vqa_type_name(t)) == n &&
                                          !strncmp(p, loom_synth_vqa_type_name(t), n)))
      t++;
    if (t == LOOM_SYNTH_VQA_TYPES)
      return loom_err("question types '%s': '%.*s' is not one of colour, shape, count, position",
                      list, (int)n, p);
    *mask |= 1u << t;
    p += n + (p[n] == ',');
  }
  if (!*mask) return loom_err("question types '%s': give at least one type", list);
  return 0;
}

void loom_synth_vqa_scene(const loom_synth_vqa_options *o, uint64_t index, loom_synth_scene *s) {
  loom_rng rng;
  loom_rng_seed(&rng, o->seed * 0x9E3779B97F4A7C15ull ^ (index + 1) * 0xD1B54A32D192ED03ull);
  object obj[LOOM_SYNTH_VQA_MAX_OBJECTS];
  /* balanced by construction: the asked types cycle with the index, and so do the answers of
   * a type */
  int types[LOOM_SYNTH_VQA_TYPES], n_types = 0;
  for (int t = 0; t < LOOM_SYNTH_VQA_TYPES; t++)
    if (o->types & (1u << t)) types[n_types++] = t;
  if (n_types == 0) types[n_types++] = 0;
  int distractors = o->distractors < 0 ? 0 : o->distractors;
  if (distractors > LOOM_SYNTH_VQA_MAX_OBJECTS - 1) distractors = LOOM_SYNTH_VQA_MAX_OBJECTS - 1;
  int n = 0, type = types[index % (uint64_t)n_types];
  uint64_t slot = index / (uint64_t)n_types;
  int variant = (int)loom_rng_below(&rng, 2), cells[9];
  memset(s, 0, sizeof *s);
  s->type = type;
  if (type == 0 || type == 1 || type == 3) { /* one key object, the others differ from it */
    int shape = (int)loom_rng_below(&rng, N_SHAPES), colour = (int)loom_rng_below(&rng, N_COLOURS);
    int answer_pos = (int)(slot % 5);
    if (type == 0) colour = (int)(slot % N_COLOURS);
    if (type == 1) shape = (int)(slot % N_SHAPES);
    int others = (int)loom_rng_below(&rng, (uint64_t)distractors + 1);
    int key_cell = type == 3 ? pos_cells[answer_pos] : -1;
    if (key_cell < 0) pick_cells(&rng, 0, 1, &key_cell);
    obj[n++] = (object){shape, colour, key_cell};
    pick_cells(&rng, 1 << key_cell, others, cells);
    for (int i = 0; i < others; i++) {
      int sh = type == 1 ? (int)loom_rng_below(&rng, N_SHAPES) : other_than(&rng, N_SHAPES, shape);
      int co = type == 1 ? other_than(&rng, N_COLOURS, colour) : (int)loom_rng_below(&rng, N_COLOURS);
      obj[n++] = (object){sh, co, cells[i]};
    }
    const char *sn = shape_names[shape];
    if (type == 0) {
      snprintf(s->question, sizeof s->question, variant ? "What colour is the %s?"
                                                        : "What is the colour of the %s?", sn);
      snprintf(s->answer, sizeof s->answer, "%s", colour_names[colour]);
    } else if (type == 1) {
      snprintf(s->question, sizeof s->question, variant ? "What shape is the %s object?"
                                                        : "Which shape is %s?",
               colour_names[colour]);
      snprintf(s->answer, sizeof s->answer, "%s", sn);
    } else {
      snprintf(s->question, sizeof s->question, variant ? "Where is the %s?"
                                                        : "In which part of the image is the %s?",
               sn);
      snprintf(s->answer, sizeof s->answer, "%s", pos_names[answer_pos]);
    }
  } else { /* count: k objects of the shape (1-4), and up to `distractors` of other shapes */
    int shape = (int)loom_rng_below(&rng, N_SHAPES), k = 1 + (int)(slot % 4);
    int room = LOOM_SYNTH_VQA_MAX_OBJECTS - k < distractors ? LOOM_SYNTH_VQA_MAX_OBJECTS - k
                                                            : distractors;
    int others = (int)loom_rng_below(&rng, (uint64_t)room + 1);
    pick_cells(&rng, 0, k + others, cells);
    for (int i = 0; i < k + others; i++)
      obj[n++] = (object){i < k ? shape : other_than(&rng, N_SHAPES, shape),
                          (int)loom_rng_below(&rng, N_COLOURS), cells[i]};
    char pl[32];
    snprintf(pl, sizeof pl, "%s", plural(shape) ? plural(shape) : shape_names[shape]);
    if (!plural(shape)) strcat(pl, "s");
    snprintf(s->question, sizeof s->question, variant ? "How many %s are there?"
                                                      : "How many %s are in the image?", pl);
    snprintf(s->answer, sizeof s->answer, "%d", k);
  }
  /* background: a dark grey-ish tone with mild noise */
  loom_image *im = &s->image;
  int size = o->image_size;
  im->w = im->h = size;
  im->rgb = loom_malloc((size_t)size * size * 3);
  int base[3];
  for (int c = 0; c < 3; c++) base[c] = 40 + (int)loom_rng_below(&rng, 40);
  for (size_t i = 0; i < (size_t)size * size; i++)
    for (int c = 0; c < 3; c++) im->rgb[i * 3 + c] = (uint8_t)(base[c] + (int)loom_rng_below(&rng, 9));
  s->n_objects = n;
  for (int i = 0; i < n && !o->blank_images; i++) draw(im, &obj[i], &rng);
}

const char *loom_synth_vqa_type_name(int type) {
  static const char *names[LOOM_SYNTH_VQA_TYPES] = {"colour", "shape", "count", "position"};
  return type >= 0 && type < LOOM_SYNTH_VQA_TYPES ? names[type] : "?";
}
