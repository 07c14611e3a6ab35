/* Bad vision-language data: a tar sample missing its json, its txt or its image, a corrupt
 * and a truncated JPEG, an image below the minimum size, a truncated tar and a non-tar file
 * among the shards; LLaVA entries with a missing image file, invalid JSON or no
 * conversation. Each is reported with the shard (file) and sample key (entry); the loader
 * stops with that error, or with skip_bad skips and counts it. */
#include <stdlib.h>

#include "data_test_util.h"
#include "loom/tar.h"
#include "loom/vqa.h"

#define DIR_ "data-vqa-bad.tmp"
#define SET DIR_ "/set"

static loom_tokenizer *tok;

static uint8_t *scene_jpeg(uint64_t i, int size, size_t *len, char *q, char *a) {
  loom_synth_scene s;
  loom_synth_vqa_options o;
  loom_synth_vqa_defaults(&o);
  o.seed = 9;
  o.image_size = size;
  loom_synth_vqa_scene(&o, i, &s);
  uint8_t *jpg;
  loom_jpeg_encode(&s.image, 90, &jpg, len);
  if (q) sprintf(q, "{\"question\": \"%s\"}", s.question);
  if (a) strcpy(a, s.answer);
  loom_image_free(&s.image);
  return jpg;
}

/* parts: j = jpg, J = json, t = txt; jpg_mode 0 good, 1 corrupt, 2 truncated, 3 tiny */
static void add_sample(loom_tar_writer *w, int i, const char *parts, int jpg_mode) {
  char name[32], q[128], a[32];
  size_t len;
  uint8_t *jpg = scene_jpeg((uint64_t)i, jpg_mode == 3 ? 20 : 56, &len, q, a);
  if (jpg_mode == 1) /* an EOI marker 16 bytes into the entropy-coded scan */
    for (size_t k = 2; k + 3 < len; k++)
      if (jpg[k] == 0xFF && jpg[k + 1] == 0xDA) {
        size_t scan = k + 2 + (size_t)(jpg[k + 2] << 8 | jpg[k + 3]);
        jpg[scan + 16] = 0xFF, jpg[scan + 17] = 0xD9;
        break;
      }
  if (jpg_mode == 2) len = len * 2 / 3;
  if (strchr(parts, 'j')) snprintf(name, sizeof name, "%08d.jpg", i), loom_tar_writer_add(w, name, jpg, len);
  if (strchr(parts, 'J')) snprintf(name, sizeof name, "%08d.json", i), loom_tar_writer_add(w, name, q, strlen(q));
  if (strchr(parts, 't')) snprintf(name, sizeof name, "%08d.txt", i), loom_tar_writer_add(w, name, a, strlen(a));
  free(jpg);
}

static void build(void) {
  loom_mkdir_p(SET);
  loom_tar_writer *w;
  loom_tar_writer_open(&w, SET "/000000.tar");
  for (int i = 0; i < 6; i++) add_sample(w, i, "jJt", 0);
  add_sample(w, 6, "jt", 0);  /* missing json */
  add_sample(w, 7, "jJ", 0);  /* missing txt */
  add_sample(w, 8, "Jt", 0);  /* missing image */
  add_sample(w, 9, "jJt", 1); /* corrupt JPEG */
  add_sample(w, 10, "jJt", 2); /* truncated JPEG */
  add_sample(w, 11, "jJt", 3); /* 20x20 image */
  loom_tar_writer_close(w);
  loom_tar_writer_open(&w, SET "/000002.tar");
  for (int i = 20; i < 26; i++) add_sample(w, i, "jJt", 0);
  loom_tar_writer_close(w);
  char *all;
  size_t len;
  loom_read_file(SET "/000002.tar", &all, &len);
  loom_tar_index ix;
  loom_tar_scan(SET "/000002.tar", &ix); /* cut inside the last sample's jpg */
  loom_write_file_atomic(SET "/000002.tar", all, ix.members[15].offset + 100);
  loom_tar_index_free(&ix);
  free(all);
  write_text(SET "/000001.tar", "this is not a tar archive, just text named like one\n");
  write_text(SET "/notes.txt", "not a shard: ignored\n");
}

static void prepare(void) {
  run_result r = run_loom(DIR_, "data prepare " SET " --split 1,0,0");
  CHECK(r.status == 0, "prepare records problems and succeeds: %s", r.err);
  const char *want[] = {
      "shard 000000.tar, sample 00000006: missing its json",
      "shard 000000.tar, sample 00000007: missing its txt",
      "shard 000000.tar, sample 00000008: missing image",
      "000001.tar is not a tar archive",
      "shard 000002.tar, sample 00000025: truncated",
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    CHECK(contains(r.err, want[i]), "prepare warns '%s':\n%s", want[i], r.err);
  CHECK(contains(r.out, "5 problems") && contains(r.out, "3 shards (1 unreadable), 18 samples"),
        "summary: %s", r.out);
  run_done(&r);
  r = run_loom(DIR_, "data prepare " SET " --split 1,0,0 --strict");
  CHECK(r.status == 1 && contains(r.err, "--strict"), "--strict fails: %s", r.err);
  run_done(&r);
}

/* Every sample's own error through the dataset API. */
static void sample_errors(void) {
  loom_vqa_dataset *d;
  uint64_t bad = 0;
  CHECK(loom_vqa_dataset_open(&d, SET, "train", false, &bad) != 0, "non-tar shard stops open");
  CHECK(contains(loom_errmsg(), "000001.tar") && contains(loom_errmsg(), "not a tar") &&
            contains(loom_errmsg(), "skip_bad_samples"), "msg: %s", loom_errmsg());
  CHECK(loom_vqa_dataset_open(&d, SET, "train", true, &bad) == 0 && bad == 1,
        "skip_bad: the shard is skipped and counted (%llu)", (unsigned long long)bad);
  CHECK(loom_vqa_dataset_count(d) == 18, "18 samples indexed");
  const struct {
    size_t i;
    const char *msg;
  } cases[] = {
      {6, "shard 000000.tar, sample 00000006: missing its json"},
      {7, "shard 000000.tar, sample 00000007: missing its txt"},
      {8, "shard 000000.tar, sample 00000008: missing its image"},
      {17, "shard 000002.tar, sample 00000025: truncated"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    loom_vqa_sample s;
    CHECK(loom_vqa_dataset_get(d, cases[k].i, &s) != 0, "sample %zu is bad", cases[k].i);
    CHECK(contains(loom_errmsg(), cases[k].msg), "want '%s', got: %s", cases[k].msg,
          loom_errmsg());
  }
  /* image problems show when the image is prepared */
  const struct {
    size_t i;
    const char *msg;
  } img[] = {{9, "corrupt"}, {10, "truncated"}, {11, "below the minimum size"}};
  for (size_t k = 0; k < 3; k++) {
    loom_vqa_sample s;
    float *p;
    loom_vision_grid g;
    CHECK(loom_vqa_dataset_get(d, img[k].i, &s) == 0, "read %zu", img[k].i);
    CHECK(loom_image_prepare(s.images[0], s.image_len[0], 3136, 1003520, s.where, &p, &g, NULL,
                             NULL) != 0, "image of sample %zu refused", img[k].i);
    char want[64];
    snprintf(want, sizeof want, "shard 000000.tar, sample %08zu", img[k].i);
    CHECK(contains(loom_errmsg(), want) && contains(loom_errmsg(), img[k].msg), "msg: %s",
          loom_errmsg());
    loom_vqa_sample_free(&s);
  }
  loom_vqa_dataset_close(d);
}

static void loader_policy(void) {
  loom_vqa_options o = {SET, "train", tok, 64, 18, 0, 0, 0, 1, 1, false, 0};
  loom_vqa_loader *l;
  CHECK(loom_vqa_loader_open(&l, &o) != 0 && contains(loom_errmsg(), "000001.tar"),
        "stops at the non-tar shard");
  o.skip_bad = true;
  o.micro_batch = 18; /* skip_bad at open, but samples still checked at next() */
  CHECK(loom_vqa_loader_open(&l, &o) == 0, "%s", loom_errmsg());
  CHECK(loom_vqa_loader_bad_shards(l) == 1, "one bad shard counted");
  loom_vqa_loader_close(l);
  /* without skip_bad but without the junk shard: the first bad sample stops next() */
  rename(SET "/000001.tar", DIR_ "/junk.tar");
  run_result r = run_loom(DIR_, "data prepare " SET " --split 1,0,0");
  run_done(&r);
  o.skip_bad = false;
  CHECK(loom_vqa_loader_open(&l, &o) == 0, "%s", loom_errmsg());
  loom_vqa_batch b;
  loom_vqa_state s0, s1;
  loom_vqa_loader_get_state(l, &s0);
  CHECK(loom_vqa_loader_next(l, &b) != 0, "a batch over all samples hits a bad one");
  CHECK(contains(loom_errmsg(), "shard 00000") && contains(loom_errmsg(), ", sample 000000"),
        "the error names shard and sample: %s", loom_errmsg());
  loom_vqa_loader_get_state(l, &s1);
  CHECK(s0.index == s1.index && s0.epoch == s1.epoch, "state unchanged after the error");
  loom_vqa_loader_close(l);
  /* skip_bad: batches of good samples only, bad ones counted */
  o.skip_bad = true;
  o.micro_batch = 2;
  CHECK(loom_vqa_loader_open(&l, &o) == 0, "%s", loom_errmsg());
  uint64_t skipped = 0;
  int bad_key = 0;
  for (int call = 0; call < 9; call++) { /* one epoch: 18 / 2 */
    CHECK(loom_vqa_loader_next(l, &b) == 0, "next: %s", loom_errmsg());
    skipped += b.skipped_bad;
    for (int i = 0; i < 2; i++) {
      int k = atoi(strchr(b.keys[i], '/') + 1);
      bad_key |= (k >= 6 && k <= 11) || k == 25;
    }
  }
  CHECK(!bad_key, "no bad sample in any batch");
  CHECK(skipped >= 7 && b.skipped_bad_total == skipped, "7 bad samples, each skipped at least "
        "once in the epoch: %llu (total %llu)", (unsigned long long)skipped,
        (unsigned long long)b.skipped_bad_total);
  loom_vqa_state st;
  loom_vqa_loader_get_state(l, &st);
  CHECK(st.skipped_bad == skipped, "the count is part of the state");
  CHECK(strlen(loom_vqa_loader_last_skip(l)) > 0, "last skip message kept");
  loom_vqa_loader_close(l);
}

static void llava(void) {
  loom_mkdir_p(DIR_ "/llava/images");
  size_t len;
  uint8_t *jpg = scene_jpeg(3, 56, &len, NULL, NULL);
  loom_write_file_atomic(DIR_ "/llava/images/ok.jpg", jpg, len);
  free(jpg);
  write_text(DIR_ "/llava/anno.jsonl",
             "{\"id\": \"a1\", \"image\": \"images/ok.jpg\", \"conversations\": [{\"from\": "
             "\"human\", \"value\": \"<image>\\nWhat is here?\"}, {\"from\": \"gpt\", \"value\": "
             "\"shapes\"}]}\n"
             "{\"id\": \"a2\", \"image\": \"images/missing.jpg\", \"conversations\": [{\"from\": "
             "\"human\", \"value\": \"<image>\\nQ?\"}, {\"from\": \"gpt\", \"value\": \"A\"}]}\n"
             "{\"id\": \"a3\", \"image\": \"images/ok.jpg\", \"conversations\": [{\"from\": \n"
             "{\"id\": \"a4\", \"image\": \"images/ok.jpg\"}\n"
             "{\"id\": \"a5\", \"image\": \"images/ok.jpg\", \"conversations\": [{\"from\": "
             "\"human\", \"value\": \"Describe.\"}, {\"from\": \"gpt\", \"value\": \"ok\"}]}\n");
  loom_llava *a;
  CHECK(loom_llava_open(&a, DIR_ "/llava/anno.jsonl") == 0, "%s", loom_errmsg());
  CHECK(loom_llava_count(a) == 5, "5 entries");
  loom_vqa_sample s;
  CHECK(loom_llava_get(a, 0, &s) == 0 && s.n_images == 1 && s.n_turns == 2 &&
            !strcmp(s.turns[0].text, "<image>\nWhat is here?") && s.turns[1].role ==
            LOOM_VQA_ASSISTANT, "entry 0 read (image relative to the annotation file)");
  loom_vqa_sample_free(&s);
  CHECK(loom_llava_get(a, 1, &s) != 0 && contains(loom_errmsg(), "anno.jsonl entry 1 (id \"a2\")")
            && contains(loom_errmsg(), "missing.jpg"), "missing image: %s", loom_errmsg());
  CHECK(loom_llava_get(a, 2, &s) != 0 && contains(loom_errmsg(), "entry 2") &&
            contains(loom_errmsg(), "line 3 is not valid JSON"), "bad line: %s", loom_errmsg());
  CHECK(loom_llava_get(a, 3, &s) != 0 && contains(loom_errmsg(), "id \"a4\"") &&
            contains(loom_errmsg(), "conversations"), "no conversation: %s", loom_errmsg());
  loom_llava_close(a);
  /* the loader: stops at them, or skips and counts them; entry 4 (no marker) gets its image
   * at the start of the first user turn */
  loom_vqa_options o = {DIR_ "/llava/anno.jsonl", "train", tok, 64, 5, 0, 0, 0, 1, 1, false, 0};
  loom_vqa_loader *l;
  loom_vqa_batch b;
  CHECK(loom_vqa_loader_open(&l, &o) == 0, "%s", loom_errmsg());
  CHECK(loom_vqa_loader_next(l, &b) != 0 && contains(loom_errmsg(), "anno.jsonl entry"),
        "stops: %s", loom_errmsg());
  loom_vqa_loader_close(l);
  o.skip_bad = true;
  o.micro_batch = 2;
  CHECK(loom_vqa_loader_open(&l, &o) == 0 && loom_vqa_loader_next(l, &b) == 0, "%s",
        loom_errmsg());
  loom_vqa_loader_close(l);
  o.micro_batch = 1;
  loom_vqa_loader_open(&l, &o);
  uint64_t skipped = 0;
  int seen5 = 0;
  for (int k = 0; k < 5; k++) {
    loom_vqa_loader_next(l, &b);
    skipped += b.skipped_bad;
    if (!strcmp(b.keys[0], "anno.jsonl#4")) {
      char *text;
      size_t n;
      loom_tokenizer_decode(tok, b.input_ids, (size_t)b.lengths[0], &text, &n);
      seen5 = !strncmp(text, "<|im_start|>user\n<|vision_start|><|image_pad|>", 46) &&
              contains(text, "<|vision_end|>Describe.<|im_end|>");
      free(text);
    }
  }
  CHECK(skipped >= 3, "3 bad entries skipped over an epoch (%llu)", (unsigned long long)skipped);
  CHECK(seen5, "an image without <image> marker goes first in the user turn");
  loom_vqa_loader_close(l);
}

int main(void) {
  loom_rm_rf(DIR_);
  run_result r = run_loom(DIR_, "data synth-vqa --out " DIR_ "/synth --samples 8 --shard-size 8");
  CHECK(r.status == 0, "synth-vqa: %s", r.err);
  run_done(&r);
  if (loom_tokenizer_load(&tok, DIR_ "/synth/tokenizer.json")) return 1;
  build();
  prepare();
  sample_errors();
  loader_policy();
  llava();
  loom_tokenizer_free(tok);
  loom_rm_rf(DIR_);
  return harness_finish("test_vqa_bad");
}
