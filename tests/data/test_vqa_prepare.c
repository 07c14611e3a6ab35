/* `loom data synth-vqa`, `prepare` and `inspect` through the CLI: the .nv-meta files
 * (Energon field map, split by ratio, sample counts, index offsets that point at the tar
 * members), determinism of synth-vqa, the majority baselines, inspect's counts and vision
 * tokens, an edited dataset.yaml being kept, and a shard changed after prepare. */
#include <jansson.h>
#include <stdlib.h>

#include "data_test_util.h"
#include "loom/tar.h"
#include "loom/vqa.h"

#define DIR_ "data-vqa-prepare.tmp"
#define SET DIR_ "/set"

static void synth_and_meta(void) {
  run_result r = run_loom(DIR_, "data synth-vqa --out " SET " --samples 200 --shard-size 20 "
                                "--seed 4 --image-size 112");
  CHECK(r.status == 0, "synth-vqa: %s", r.err);
  CHECK(contains(r.out, "10 shards") && contains(r.out, "16 vision tokens each") &&
            contains(r.out, "train     9 shards      180 samples") &&
            contains(r.out, "val       1 shards       20 samples"), "summary:\n%s", r.out);
  CHECK(contains(r.out, "majority-answer baseline") && contains(r.out, "overall"), "baselines");
  run_done(&r);
  char *yaml = slurp(SET "/.nv-meta/dataset.yaml"), *split = slurp(SET "/.nv-meta/split.yaml"),
       *info = slurp(SET "/.nv-meta/.info.yaml");
  CHECK(contains(yaml, "__class__: VQASample") && contains(yaml, "image: jpg") &&
            contains(yaml, "context: json[question]") && contains(yaml, "answers: txt"),
        "dataset.yaml field map:\n%s", yaml);
  CHECK(contains(split, "split_parts:") && contains(split, "- \"000008.tar\"\n  val:\n  - "
                                                             "\"000009.tar\"\n  test: []"),
        "split.yaml:\n%s", split);
  CHECK(contains(info, "shard_counts:") && contains(info, "\"000003.tar\": 20"), "info:\n%s", info);
  free(yaml);
  free(split);
  free(info);
  /* baselines: balanced answers, so each type's majority is about 1/#answers */
  json_t *j = json_load_file(SET "/synth_vqa.json", 0, NULL);
  json_t *bt = json_object_get(j, "baseline_train");
  double col = json_real_value(json_object_get(bt, "colour")),
         cnt = json_real_value(json_object_get(bt, "count")),
         all = json_real_value(json_object_get(bt, "overall"));
  CHECK(col > 0.19 && col < 0.22 && cnt > 0.24 && cnt < 0.28 && all < 0.25,
        "baselines low: colour %.3f count %.3f overall %.3f", col, cnt, all);
  json_decref(j);
  /* the index points at the members: compare with the tar reader */
  json_t *ix = loom_energon_index_load(SET);
  json_t *s0 = json_array_get(json_object_get(json_array_get(json_object_get(ix, "shards"), 2),
                                              "samples"), 5);
  loom_tar_index t;
  loom_tar_scan(SET "/000002.tar", &t);
  json_t *jp = json_object_get(json_object_get(s0, "parts"), "json");
  CHECK(t.n == 60 && !strcmp(json_string_value(json_object_get(s0, "key")), "00000045") &&
            (uint64_t)json_integer_value(json_array_get(jp, 0)) == t.members[16].offset &&
            (uint64_t)json_integer_value(json_array_get(jp, 1)) == t.members[16].size,
        "index offsets match the tar");
  loom_tar_index_free(&t);
  json_decref(ix);
  /* synth-vqa is deterministic */
  r = run_loom(DIR_, "data synth-vqa --out " DIR_ "/again --samples 200 --shard-size 20 --seed 4 "
                     "--image-size 112");
  run_done(&r);
  char *a = slurp(SET "/000004.tar"), *b = slurp(DIR_ "/again/000004.tar");
  char *ta = slurp(SET "/tokenizer.json"), *tb = slurp(DIR_ "/again/tokenizer.json");
  CHECK(!memcmp(a, b, 20 * 1024) && !strcmp(ta, tb), "same seed, same shards and tokenizer");
  free(a);
  free(b);
  free(ta);
  free(tb);
  loom_tokenizer *tok;
  CHECK(loom_tokenizer_load(&tok, SET "/tokenizer.json") == 0, "tokenizer loads");
  loom_vqa_special sp;
  CHECK(loom_vqa_special_ids(tok, &sp) == 0 && sp.vision_end == loom_tokenizer_vocab_size(tok) - 1,
        "special tokens present, last id <|vision_end|>");
  loom_tokenizer_free(tok);
}

static void inspect(void) {
  run_result r = run_loom(DIR_, "data inspect " SET " --samples 2 --split val");
  CHECK(r.status == 0, "inspect: %s", r.err);
  CHECK(contains(r.out, "10 shards (0 unreadable), 200 samples") &&
            contains(r.out, "000009.tar/00000180") &&
            contains(r.out, "112x112 px -> 112x112 (8 x 8 patches): 64 patches, 16 vision tokens") &&
            contains(r.out, "question: \"") && contains(r.out, "answer: \"") &&
            contains(r.out, "type: colour"), "inspect output:\n%s", r.out);
  run_done(&r);
  /* a lower pixel budget: 112x112 -> 56x56 -> 4 tokens */
  r = run_loom(DIR_, "data inspect " SET " --samples 1 --min-pixels 784 --max-pixels 3136");
  CHECK(contains(r.out, "-> 56x56 (4 x 4 patches): 16 patches, 4 vision tokens"), "budget:\n%s",
        r.out);
  run_done(&r);
}

static void reprepare(void) {
  /* an edited dataset.yaml is kept; another ratio moves shards */
  write_text(SET "/.nv-meta/dataset.yaml",
             "sample_type:\n  __module__: megatron.energon\n  __class__: VQASample\n"
             "field_map:\n  image: jpg,jpeg\n  context: json[question]\n  answers: json[answer]\n");
  run_result r = run_loom(DIR_, "data prepare " SET " --split 6,2,2");
  CHECK(r.status == 0 && contains(r.out, "train     6 shards") &&
            contains(r.out, "val       2 shards") && contains(r.out, "test      2 shards"),
        "6,2,2:\n%s%s", r.out, r.err);
  run_done(&r);
  char *yaml = slurp(SET "/.nv-meta/dataset.yaml");
  CHECK(contains(yaml, "answers: json[answer]"), "dataset.yaml kept");
  free(yaml);
  loom_vqa_dataset *d;
  uint64_t bad;
  CHECK(loom_vqa_dataset_open(&d, SET, "test", false, &bad) == 0 &&
            loom_vqa_dataset_count(d) == 40, "test split: 40 samples");
  loom_vqa_sample s;
  CHECK(loom_vqa_dataset_get(d, 0, &s) == 0 && s.n_turns == 2, "%s", loom_errmsg());
  char *txt = loom_sprintf("%s", s.turns[1].text);
  loom_vqa_sample_free(&s);
  loom_vqa_dataset_close(d);
  CHECK(strlen(txt) > 0, "answer read through json[answer]: %s", txt);
  free(txt);
  r = run_loom(DIR_, "data prepare " SET " --split 1,1");
  CHECK(r.status == 1 && contains(r.err, "three non-negative numbers"), "bad ratio: %s", r.err);
  run_done(&r);
  /* a shard rewritten after prepare is refused with the fix */
  write_text(SET "/000001.tar", "changed");
  CHECK(loom_vqa_dataset_open(&d, SET, "train", true, &bad) != 0 &&
            contains(loom_errmsg(), "changed since") && contains(loom_errmsg(), "000001.tar"),
        "stale shard: %s", loom_errmsg());
  r = run_loom(DIR_, "data prepare " DIR_ "/empty-does-not-exist");
  CHECK(r.status == 1 && contains(r.err, "not a directory"), "missing dir: %s", r.err);
  run_done(&r);
  CHECK(loom_vqa_dataset_open(&d, DIR_, "train", false, &bad) != 0 &&
            contains(loom_errmsg(), "run `loom data prepare"), "unprepared dir: %s", loom_errmsg());
}

int main(void) {
  loom_rm_rf(DIR_);
  synth_and_meta();
  inspect();
  reprepare();
  loom_rm_rf(DIR_);
  return harness_finish("test_vqa_prepare");
}
