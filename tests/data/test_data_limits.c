/* Limits and checks on data files that the fuzzing of issue 12 called for, each with the
 * error it must give: a JPEG declaring more pixels than the limit (refused before decoding;
 * skip_bad_samples skips it), tokenizer ids beyond what the file defines, token ids >= the
 * shard header's vocab_size (uint32 >= 2^31 included), a directory given as a file,
 * malformed PAX records, Energon part offsets outside the shard and NUL bytes in text parts,
 * a NUL byte or a system-only conversation in LLaVA annotations, a safetensors shape whose
 * partial product overflows. */
#include <stdlib.h>
#include <unistd.h>

#include "data_test_util.h"
#include "loom/image.h"
#include "loom/loader.h"
#include "loom/safetensors.h"
#include "loom/shard.h"
#include "loom/tar.h"
#include "loom/vqa.h"

#define DIR_ "data-limits.tmp"

/* A w x h JPEG of one grey level whose SOF0 then claims decl_w x decl_h. */
static uint8_t *jpeg_claiming(int w, int h, int decl_w, int decl_h, size_t *len) {
  uint8_t *px = malloc((size_t)w * h * 3), *jpg;
  memset(px, 90, (size_t)w * h * 3);
  loom_image im = {w, h, px};
  CHECK(loom_jpeg_encode(&im, 90, &jpg, len) == 0, "encode: %s", loom_errmsg());
  free(px);
  for (size_t k = 2; k + 9 < *len; k++)
    if (jpg[k] == 0xFF && jpg[k + 1] == 0xC0) { /* SOF0: length(2) precision(1) h(2) w(2) */
      jpg[k + 5] = (uint8_t)(decl_h >> 8), jpg[k + 6] = (uint8_t)decl_h;
      jpg[k + 7] = (uint8_t)(decl_w >> 8), jpg[k + 8] = (uint8_t)decl_w;
      break;
    }
  return jpg;
}

static void jpeg_pixel_limit(void) {
  size_t len;
  uint8_t *bomb = jpeg_claiming(16, 16, 65500, 65500, &len);
  loom_image im;
  CHECK(loom_jpeg_decode(bomb, len, "shard 000003.tar, sample 00000042", &im) != 0,
        "a 65500x65500 header is refused");
  const char *m = loom_errmsg();
  CHECK(contains(m, "shard 000003.tar, sample 00000042") && contains(m, "65500x65500") &&
            contains(m, "4290250000 pixels") && contains(m, "limit of 67108864") &&
            contains(m, "skip_bad_samples"),
        "the error names the sample, the size and the limit: %s", m);
  CHECK(LOOM_IMG_MAX_DECODE_PIXELS == 67108864L, "the stated limit is 2^26");
  float *patches;
  loom_vision_grid g;
  CHECK(loom_image_prepare(bomb, len, 3136, 1003520, "img", &patches, &g, NULL, NULL) != 0 &&
            contains(loom_errmsg(), "65500x65500"), "the Qwen pipeline refuses it: %s",
        loom_errmsg());
  CHECK(loom_image_prepare_fixed(bomb, len, 28, "img", &patches, &g, NULL, NULL) != 0 &&
            contains(loom_errmsg(), "65500x65500"), "the LLaVA pipeline refuses it: %s",
        loom_errmsg());
  free(bomb);
  /* the limit is inclusive, and a configured resize target above 2^26 raises it */
  uint8_t *ok = jpeg_claiming(16, 16, 16, 16, &len);
  CHECK(loom_jpeg_decode_limit(ok, len, "x", 256, &im) == 0 && im.w == 16,
        "256 pixels pass a limit of 256: %s", loom_errmsg());
  loom_image_free(&im);
  CHECK(loom_jpeg_decode_limit(ok, len, "x", 255, &im) != 0 &&
            contains(loom_errmsg(), "16x16 (WxH) = 256 pixels, above the limit of 255"),
        "256 pixels fail a limit of 255: %s", loom_errmsg());
  free(ok);
  uint8_t *big = jpeg_claiming(16, 16, 9000, 9000, &len); /* 81e6 > 2^26 */
  CHECK(loom_image_prepare(big, len, 3136, 1003520, "x", &patches, &g, NULL, NULL) != 0 &&
            contains(loom_errmsg(), "above the limit of 67108864"), "9000x9000 refused: %s",
        loom_errmsg());
  CHECK(loom_image_prepare(big, len, 3136, 90000000L, "x", &patches, &g, NULL, NULL) != 0 &&
            !contains(loom_errmsg(), "above the limit") &&
            contains(loom_errmsg(), "corrupt or truncated"),
        "with max_pixels 9e7 the header passes; the 16x16 data then runs out: %s",
        loom_errmsg());
  free(big);
}

/* LLaVA annotations naming a bomb, a good image and a directory: the loader stops at the
 * bomb naming the entry, skips it with skip_bad. */
static void jpeg_bomb_skipped(loom_tokenizer *tok) {
  loom_mkdir_p(DIR_ "/llava/adir.jpg");
  size_t len;
  uint8_t *bomb = jpeg_claiming(16, 16, 65500, 65500, &len);
  loom_write_file_atomic(DIR_ "/llava/bomb.jpg", bomb, len);
  free(bomb);
  uint8_t *good = jpeg_claiming(56, 56, 56, 56, &len);
  loom_write_file_atomic(DIR_ "/llava/good.jpg", good, len);
  free(good);
  const char *conv = "\"conversations\": [{\"from\": \"human\", \"value\": \"<image>\\nQ?\"}, "
                     "{\"from\": \"gpt\", \"value\": \"A\"}]";
  char *anno = loom_sprintf("[{\"id\": \"bomb\", \"image\": \"bomb.jpg\", %s},\n"
                            " {\"id\": \"good\", \"image\": \"good.jpg\", %s},\n"
                            " {\"id\": \"dir\", \"image\": \"adir.jpg\", %s}]\n", conv, conv, conv);
  write_text(DIR_ "/llava/anno.json", anno);
  free(anno);
  loom_llava *a;
  loom_vqa_sample s;
  CHECK(loom_llava_open(&a, DIR_ "/llava/anno.json") == 0, "%s", loom_errmsg());
  CHECK(loom_llava_get(a, 2, &s) != 0 && contains(loom_errmsg(), "entry 2 (id \"dir\")") &&
            contains(loom_errmsg(), "adir.jpg' is a directory, not a file"),
        "an image that is a directory: %s", loom_errmsg());
  loom_llava_close(a);
  loom_vqa_options o = {DIR_ "/llava/anno.json", "train", tok, 128, 3, 0, 0, 0, 1, 1, false, 0};
  loom_vqa_loader *l;
  loom_vqa_batch b;
  CHECK(loom_vqa_loader_open(&l, &o) == 0, "%s", loom_errmsg());
  CHECK(loom_vqa_loader_next(l, &b) != 0 && contains(loom_errmsg(), "65500x65500") &&
            contains(loom_errmsg(), "anno.json entry 0 (id \"bomb\")"),
        "the loader stops at the bomb, naming it: %s", loom_errmsg());
  loom_vqa_loader_close(l);
  o.skip_bad = true;
  CHECK(loom_vqa_loader_open(&l, &o) == 0, "%s", loom_errmsg());
  CHECK(loom_vqa_loader_next(l, &b) == 0, "skip_bad: a batch: %s", loom_errmsg());
  int only_good = 1;
  for (int i = 0; i < 3; i++) only_good &= !strcmp(b.keys[i], "anno.json#1");
  CHECK(only_good && b.skipped_bad >= 2, "the bomb and the directory are skipped (%llu), the "
        "batch holds the good entry only", (unsigned long long)b.skipped_bad);
  loom_vqa_loader_close(l);
}

static void tokenizer_id_bound(void) {
  /* the 108-byte reproducer's shape: one vocab id of 2^30 - 1 */
  write_text(DIR_ "/big-id.json",
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1073741823, \"b\": 0}, "
             "\"merges\": []}}");
  loom_tokenizer *t;
  CHECK(loom_tokenizer_load(&t, DIR_ "/big-id.json") != 0 &&
            contains(loom_errmsg(), "model.vocab['a'] = 1073741823 is not an id in [0, 2)"),
        "an id beyond the defined tokens: %s", loom_errmsg());
  /* ids up to (vocab entries + added tokens - 1) are fine: an added token right after the
   * vocab (as Qwen2's are) loads; one past it does not */
  char *j = tiny_tokenizer_json(NULL, 0, 0, "BPE", GPT2_PRETOK); /* 257 entries, eot 256 */
  char *k = strstr(j, "\"id\": 256");
  CHECK(k != NULL, "eot at 256 in the tiny tokenizer");
  char *moved = loom_sprintf("%.*s\"id\": 257, \"content\": \"<|x|>\"}, {%s", (int)(k - j), j, k);
  write_text(DIR_ "/added-ok.json", moved);
  CHECK(loom_tokenizer_load(&t, DIR_ "/added-ok.json") == 0 && loom_tokenizer_vocab_size(t) == 258,
        "added token at id 257 (259 ids defined): %s", loom_errmsg());
  loom_tokenizer_free(t);
  free(moved);
  moved = loom_sprintf("%.*s\"id\": 259, \"content\": \"<|x|>\"}, {%s", (int)(k - j), j, k);
  write_text(DIR_ "/added-far.json", moved); /* 257 vocab entries + 2 added tokens */
  CHECK(loom_tokenizer_load(&t, DIR_ "/added-far.json") != 0 &&
            contains(loom_errmsg(), "added_tokens[0] ('<|x|>') has id 259, not in [0, 259)"),
        "added token past the defined ids: %s", loom_errmsg());
  free(moved);
  moved = loom_sprintf("%.*s\"id\": 65, \"content\": \"<|x|>\"}, {%s", (int)(k - j), j, k);
  write_text(DIR_ "/added-clash.json", moved);
  CHECK(loom_tokenizer_load(&t, DIR_ "/added-clash.json") != 0 &&
            contains(loom_errmsg(), "has id 65, which is already the id of another token ('A')"),
        "added token taking a vocab token's id: %s", loom_errmsg());
  free(moved);
  free(j);
}

static void write_u32_shard(const char *path, uint32_t vocab, const uint32_t *tok, int n) {
  uint8_t b[64 + 4 * 16] = {0};
  memcpy(b, "LOOMTOK1", 8);
  b[8] = 1, b[12] = 2, b[16] = (uint8_t)n;
  for (int i = 0; i < 4; i++) b[24 + i] = (uint8_t)(vocab >> (8 * i));
  for (int t = 0; t < n; t++)
    for (int i = 0; i < 4; i++) b[64 + 4 * t + i] = (uint8_t)(tok[t] >> (8 * i));
  loom_write_file_atomic(path, b, 64 + 4 * (size_t)n);
}

static void shard_token_bound(void) {
  uint32_t tok[12] = {1, 2, 3, 0x80000000u, 5, 6, 7, 8, 9, 10, 11, 12};
  write_u32_shard(DIR_ "/neg.bin", 100000, tok, 12);
  loom_shard s;
  CHECK(loom_shard_open(&s, DIR_ "/neg.bin") != 0 &&
            contains(loom_errmsg(), "token 2147483648 at index 3 (byte offset 76) is not below "
                                    "the header's vocab_size 100000"),
        "a uint32 id >= 2^31: %s", loom_errmsg());
  loom_loader *l;
  CHECK(loom_loader_open(&l, DIR_ "/neg.bin", 1, 4, 0, 1, 1) != 0 &&
            contains(loom_errmsg(), "index 3"), "the loader refuses it: %s", loom_errmsg());
  tok[3] = 99999;
  write_u32_shard(DIR_ "/edge.bin", 100000, tok, 12);
  CHECK(loom_shard_open(&s, DIR_ "/edge.bin") == 0 && s.max_token == 99999,
        "vocab_size - 1 is a valid id: %s", loom_errmsg());
  loom_shard_close(&s);
  CHECK(loom_loader_open(&l, DIR_ "/edge.bin", 1, 4, 0, 1, 1) == 0 &&
            loom_loader_max_token(l) == 99999, "the loader's max token: %s", loom_errmsg());
  loom_loader_close(l);
  tok[11] = 100000;
  write_u32_shard(DIR_ "/eq.bin", 100000, tok, 12);
  CHECK(loom_shard_open(&s, DIR_ "/eq.bin") != 0 &&
            contains(loom_errmsg(), "token 100000 at index 11 (byte offset 108)"),
        "an id equal to vocab_size: %s", loom_errmsg());
  run_result r = run_loom(DIR_, "data inspect-shard " DIR_ "/neg.bin");
  CHECK(r.status == 1 && contains(r.err, "index 3 (byte offset 76)") &&
            contains(r.err, "loom data tokenize"), "inspect-shard: exit %d: %s", r.status, r.err);
  run_done(&r);
  /* training: the shard is refused before any step (it used to exit 0 after reading outside
   * the embedding table); a valid shard whose ids exceed the model's vocabulary too */
  r = run_loom(DIR_, "train model.preset=tiny-gpt2 data.train_shards=" DIR_ "/neg.bin "
                     "training.steps=1 run.output_dir=" DIR_ "/runs --quiet");
  CHECK(r.status == 1 && contains(r.err, "data.train_shards") &&
            contains(r.err, "token 2147483648 at index 3"), "train: exit %d: %s", r.status,
        r.err);
  run_done(&r);
  r = run_loom(DIR_, "train model.preset=tiny-gpt2 data.train_shards=" DIR_ "/edge.bin "
                     "training.steps=1 training.seq_len=4 training.micro_batch_size=1 "
                     "run.output_dir=" DIR_ "/runs --quiet");
  CHECK(r.status == 1 && contains(r.err, "holds token id 99999 but the model's vocabulary has"),
        "train, ids above the model's vocabulary: exit %d: %s", r.status, r.err);
  run_done(&r);
}

static void directory_as_file(void) {
  char *d;
  size_t n;
  CHECK(loom_read_file(DIR_, &d, &n) != 0 &&
            !strcmp(loom_errmsg(), "'" DIR_ "' is a directory, not a file"),
        "loom_read_file on a directory: %s", loom_errmsg());
  CHECK(loom_read_file("/dev/null", &d, &n) == 0 && n == 0 && d[0] == 0,
        "a character device reads to its end");
  free(d);
  CHECK(loom_read_file("/proc/self/status", &d, &n) == 0 && n > 0 && contains(d, "Pid:"),
        "a file whose stat size is 0 (procfs) is read in chunks: %zu bytes", n);
  free(d);
  run_result r = run_loom(DIR_, "sched validate " DIR_);
  CHECK(r.status == 1 && contains(r.err, "'" DIR_ "' is a directory") &&
            contains(r.err, "schedule"),
        "loom sched validate DIR: exit %d: %s", r.status, r.err);
  run_done(&r);
  loom_mkdir_p(DIR_ "/hw.yaml");
  r = run_loom(DIR_, "sim --hardware " DIR_ "/hw.yaml");
  CHECK(r.status == 1 && contains(r.err, "'" DIR_ "/hw.yaml' is a directory") &&
            contains(r.err, "profile"),
        "loom sim --hardware DIR.yaml: exit %d: %s", r.status, r.err);
  run_done(&r);
}

/* A ustar-checksummed header of type 'x' holding `rec`, then a member "m.txt". */
static void pax_tar(const char *path, const char *rec) {
  uint8_t b[512 * 6] = {0};
  size_t n = strlen(rec);
  for (int h = 0; h < 2; h++) {
    uint8_t *p = b + (h ? 1024 : 0);
    strcpy((char *)p, h ? "m.txt" : "PaxHeader");
    memcpy(p + 100, "0000644", 7);
    snprintf((char *)p + 124, 12, "%011o", h ? 2u : (unsigned)n);
    p[156] = h ? '0' : 'x';
    memcpy(p + 257, "ustar\0" "00", 8);
    memset(p + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += p[i];
    snprintf((char *)p + 148, 8, "%06o", sum);
  }
  memcpy(b + 512, rec, n);
  memcpy(b + 1536, "hi", 2);
  loom_write_file_atomic(path, b, sizeof b);
}

static void pax_records(void) {
  struct {
    const char *rec, *want;
  } cases[] = {
      {"3 path=abc\n", "(length 3) is too short"}, /* ends before its key */
      {"9 path=xy\n", "(length 9) is too short for 'key=value' or does not end with a newline"},
      {"11 size=-5\n", "is not a non-negative decimal: '-5'"},
      {"99 path=x\n", "claims 99 bytes but only 10 remain"},
      {"x path=y\n", "does not start with a decimal length"},
      {"8 =abcd\n", "has no 'key=' before its end"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    pax_tar(DIR_ "/pax.tar", cases[i].rec);
    loom_tar_index ix;
    CHECK(loom_tar_scan(DIR_ "/pax.tar", &ix) == 0, "scan: %s", loom_errmsg());
    CHECK(ix.damage && contains(ix.damage, "malformed PAX header at offset 0") &&
              contains(ix.damage, cases[i].want) && ix.n == 0,
          "PAX '%s': %s", cases[i].rec, ix.damage ? ix.damage : "(no damage)");
    loom_tar_index_free(&ix);
  }
  pax_tar(DIR_ "/pax.tar", "15 path=ok.txt\n");
  loom_tar_index ix;
  CHECK(loom_tar_scan(DIR_ "/pax.tar", &ix) == 0 && !ix.damage && ix.n == 1 &&
            !strcmp(ix.members[0].name, "ok.txt") && ix.members[0].size == 2,
        "a well-formed PAX path applies to the next member");
  loom_tar_index_free(&ix);
}

static void energon_offsets(loom_tokenizer *tok) {
  (void)tok;
  char *ix = slurp(DIR_ "/synth/.nv-meta/index.json");
  char *at = strstr(ix, "\"jpg\":[512,");
  CHECK(at != NULL, "index.json lists the first jpg at 512: %.200s", ix);
  if (!at) return free(ix);
  char *num_end = strchr(at + 11, ']');
  char *bad = loom_sprintf("%.*s\"jpg\":[512,4000000000000%s", (int)(at - ix), ix, num_end);
  write_text(DIR_ "/synth/.nv-meta/index.json", bad);
  loom_vqa_dataset *d;
  CHECK(loom_vqa_dataset_open(&d, DIR_ "/synth", "train", false, NULL) == 0, "%s",
        loom_errmsg());
  loom_vqa_sample s;
  CHECK(loom_vqa_dataset_get(d, 0, &s) != 0 &&
            contains(loom_errmsg(), "sample 00000000: index.json gives part jpg as an "
                                    "out-of-range [offset, size]") &&
            contains(loom_errmsg(), "loom data prepare"),
        "a part size beyond the shard: %s", loom_errmsg());
  loom_vqa_dataset_close(d);
  write_text(DIR_ "/synth/.nv-meta/index.json", ix);
  free(bad);
  /* a NUL byte inside sample 0's txt part (the answer): an error, not a shorter answer */
  char *txt = strstr(ix, "\"txt\":[");
  long off = txt ? atol(txt + 7) : 0;
  CHECK(off >= 512, "index.json gives the txt part's offset: %ld", off);
  FILE *f = fopen(DIR_ "/synth/000000.tar", "r+b");
  CHECK(f && fseek(f, off + 1, SEEK_SET) == 0 && fputc(0, f) == 0 && fclose(f) == 0,
        "patch the shard in place");
  CHECK(loom_vqa_dataset_open(&d, DIR_ "/synth", "train", false, NULL) == 0, "%s",
        loom_errmsg());
  CHECK(loom_vqa_dataset_get(d, 0, &s) != 0 &&
            contains(loom_errmsg(), "sample 00000000: its txt part holds a NUL byte at offset 1"),
        "a NUL byte in a text part: %s", loom_errmsg());
  loom_vqa_dataset_close(d);
  free(ix);
}

static void llava_nul(void) {
  const char line[] = "{\"id\": 1, \"conversations\": [{\"from\": \"human\", \"value\": \"q\"}]}\n"
                      "{\"id\": 2, \0 \"conversations\": []}\n";
  loom_write_file_atomic(DIR_ "/nul.jsonl", line, sizeof line - 1);
  loom_llava *a;
  char *want = loom_sprintf("line 2 holds a NUL byte (offset %zu)", strlen(line));
  CHECK(loom_llava_open(&a, DIR_ "/nul.jsonl") != 0 && contains(loom_errmsg(), want),
        "a NUL byte in .jsonl: %s", loom_errmsg());
  free(want);
  loom_write_file_atomic(DIR_ "/nul.json", "[{}]\0[]", 7);
  CHECK(loom_llava_open(&a, DIR_ "/nul.json") != 0 && contains(loom_errmsg(), "not valid JSON"),
        "a NUL byte in .json: %s", loom_errmsg());
  /* found by fuzz_llava: a conversation of system turns only read as a sample of no turns */
  write_text(DIR_ "/sys.json", "[{\"id\": \"s\", \"conversations\": [{\"from\": \"system\", "
                               "\"value\": \"be brief\"}]}]");
  loom_vqa_sample s;
  CHECK(loom_llava_open(&a, DIR_ "/sys.json") == 0 && loom_llava_get(a, 0, &s) != 0 &&
            contains(loom_errmsg(), "sys.json entry 0 (id \"s\"): has only system turns"),
        "system turns only: %s", loom_errmsg());
  loom_llava_close(a);
}

static void safetensors_partial_product(void) {
  const char hdr[] = "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,4],"
                     "\"data_offsets\":[0,0]}}";
  uint8_t b[8 + sizeof hdr] = {(uint8_t)(sizeof hdr - 1)};
  memcpy(b + 8, hdr, sizeof hdr - 1);
  loom_write_file_atomic(DIR_ "/z.safetensors", b, 8 + sizeof hdr - 1);
  loom_st_file *f;
  CHECK(loom_st_open(&f, DIR_ "/z.safetensors") != 0 &&
            contains(loom_errmsg(), "tensor 'z': shape is too large (a partial byte size"),
        "0 x 2^62 x 4: %s", loom_errmsg());
}

int main(void) {
  loom_rm_rf(DIR_);
  loom_mkdir_p(DIR_);
  run_result r = run_loom(DIR_, "data synth-vqa --out " DIR_ "/synth --samples 4 --shard-size 4 "
                                "--split 1,0,0");
  CHECK(r.status == 0, "synth-vqa: %s", r.err);
  run_done(&r);
  loom_tokenizer *tok = NULL;
  if (loom_tokenizer_load(&tok, DIR_ "/synth/tokenizer.json")) return 1;
  jpeg_pixel_limit();
  jpeg_bomb_skipped(tok);
  tokenizer_id_bound();
  shard_token_bound();
  directory_as_file();
  pax_records();
  energon_offsets(tok);
  llava_nul();
  safetensors_partial_product();
  loom_tokenizer_free(tok);
  loom_rm_rf(DIR_);
  return harness_finish("test_data_limits");
}
