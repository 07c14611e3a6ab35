/* The synthetic shapes VQA generator's options: the default (84 px, 9 vision tokens, no
 * distractors: one object, or the counted ones only), --distractors (other objects that differ
 * in the asked attribute), --types (only the asked kinds, in turn, balanced), --blank-images
 * (the same questions and answers over the background only), the question-only prior in
 * synth_vqa.json, and clear errors for bad option values. */
#include <jansson.h>
#include <stdlib.h>

#include "data_test_util.h"
#include "loom/vqa.h"

#define DIR_ "data-vqa-synth.tmp"

/* Brightest channel value of an image: every object colour has a channel >= 160, the
 * background stays below 130. */
static int max_channel(const loom_image *im) {
  int m = 0;
  for (size_t i = 0; i < (size_t)im->w * im->h * 3; i++)
    if (im->rgb[i] > m) m = im->rgb[i];
  return m;
}

static void scenes(void) {
  loom_synth_vqa_options o, blank;
  loom_synth_vqa_defaults(&o);
  CHECK(o.image_size == 84 && o.distractors == 0 && o.types == 15, "defaults");
  blank = o;
  blank.blank_images = true;
  int ok_single = 1, ok_count = 1, ok_blank = 1, ok_same = 1, ok_drawn = 1;
  for (uint64_t i = 0; i < 200; i++) {
    loom_synth_scene s, b;
    loom_synth_vqa_scene(&o, i, &s);
    loom_synth_vqa_scene(&blank, i, &b);
    if (s.type == 2) ok_count &= s.n_objects == atoi(s.answer);
    else ok_single &= s.n_objects == 1;
    ok_same &= !strcmp(s.question, b.question) && !strcmp(s.answer, b.answer) &&
               s.type == b.type && (int)(i % 4) == s.type;
    ok_drawn &= max_channel(&s.image) >= 160;
    ok_blank &= max_channel(&b.image) < 130;
    loom_image_free(&s.image);
    loom_image_free(&b.image);
  }
  CHECK(ok_single, "no distractors: one object for colour, shape and position questions");
  CHECK(ok_count, "no distractors: count scenes hold just the counted objects");
  CHECK(ok_same && ok_drawn && ok_blank, "blank images: same questions and answers, no objects "
        "(same %d, drawn %d, blank %d)", ok_same, ok_drawn, ok_blank);

  o.distractors = 3;
  int more = 0, within = 1, count_extra = 0;
  for (uint64_t i = 0; i < 200; i++) {
    loom_synth_scene s;
    loom_synth_vqa_scene(&o, i, &s);
    within &= s.n_objects >= 1 && s.n_objects <= LOOM_SYNTH_VQA_MAX_OBJECTS;
    more += s.type != 2 && s.n_objects > 1;
    count_extra += s.type == 2 && s.n_objects > atoi(s.answer);
    loom_image_free(&s.image);
  }
  CHECK(within && more > 50 && count_extra > 10, "distractors 3: 1-4 objects (%d scenes with "
        "distractors, %d count scenes with other shapes)", more, count_extra);

  o.distractors = 0;
  CHECK(loom_synth_vqa_parse_types("count,position", &o.types) == 0 && o.types == 12, "types");
  int ok_types = 1, answers[5] = {0};
  for (uint64_t i = 0; i < 40; i++) {
    loom_synth_scene s;
    loom_synth_vqa_scene(&o, i, &s);
    ok_types &= s.type == (i % 2 ? 3 : 2);
    if (s.type == 2) answers[atoi(s.answer)]++;
    loom_image_free(&s.image);
  }
  CHECK(ok_types && answers[1] == 5 && answers[4] == 5, "count and position in turn, balanced");
  CHECK(loom_synth_vqa_parse_types("colour,size", &o.types) != 0 &&
            contains(loom_errmsg(), "'size' is not one of colour, shape, count, position"),
        "unknown type: %s", loom_errmsg());
}

static void cli(void) {
  run_result r = run_loom(DIR_, "data synth-vqa --out " DIR_ "/set --samples 400 --shard-size 40");
  CHECK(r.status == 0, "synth-vqa: %s", r.err);
  CHECK(contains(r.out, "84x84 px: 36 patches, 9 vision tokens each") &&
            contains(r.out, "question prior"), "summary:\n%s", r.out);
  run_done(&r);
  json_t *j = json_load_file(DIR_ "/set/synth_vqa.json", 0, NULL);
  json_t *pv = json_object_get(j, "question_prior_val"), *bv = json_object_get(j, "baseline_val");
  double prior = json_real_value(json_object_get(pv, "overall"));
  double base = json_real_value(json_object_get(bv, "overall"));
  CHECK(json_integer_value(json_object_get(j, "distractors")) == 0 &&
            json_is_false(json_object_get(j, "blank_images")) &&
            json_array_size(json_object_get(j, "question_types")) == 4 &&
            json_object_size(pv) == 5,
        "synth_vqa.json settings");
  /* answers do not depend on the question text, so the prior is about the majority */
  CHECK(base > 0.19 && base < 0.26 && prior > 0.1 && prior < 0.4, "baseline %.3f prior %.3f",
        base, prior);
  json_decref(j);

  r = run_loom(DIR_, "data synth-vqa --out " DIR_ "/two --samples 40 --shard-size 10 "
                     "--types shape --distractors 3 --blank-images");
  CHECK(r.status == 0 && contains(r.out, "shape") && !contains(r.out, "colour   "),
        "one type:\n%s%s", r.out, r.err);
  run_done(&r);
  j = json_load_file(DIR_ "/two/synth_vqa.json", 0, NULL);
  CHECK(json_is_true(json_object_get(j, "blank_images")) &&
            json_integer_value(json_object_get(j, "distractors")) == 3 &&
            json_object_size(json_object_get(j, "baseline_val")) == 2,
        "synth_vqa.json of a one-type blank set");
  json_decref(j);

  r = run_loom(DIR_, "data synth-vqa --out " DIR_ "/bad --samples 4 --shard-size 4 "
                     "--distractors 4");
  CHECK(r.status == 1 && contains(r.err, "--distractors 4: at most 3"), "%s", r.err);
  run_done(&r);
  r = run_loom(DIR_, "data synth-vqa --out " DIR_ "/bad --samples 4 --shard-size 4 --types x");
  CHECK(r.status == 1 && contains(r.err, "'x' is not one of"), "%s", r.err);
  run_done(&r);
}

int main(void) {
  loom_rm_rf(DIR_);
  scenes();
  cli();
  loom_rm_rf(DIR_);
  return harness_finish("test_vqa_synth");
}
