/* Model specs: preset parameter counts against published numbers, config resolution, and
 * the errors for inconsistent dimensions. */
#include "harness.h"
#include "loom/config.h"
#include "loom/core.h"
#include "loom/model.h"

static void test_param_counts(void) {
  loom_model_spec s;
  CHECK(loom_model_preset(&s, "gpt2-124m") == 0, "%s", loom_errmsg());
  /* GPT-2 small: 124,439,808 with vocab 50257; 124,475,904 with the vocab padded to 50304 */
  CHECK(s.padded_vocab == 50304, "padded vocab %d", s.padded_vocab);
  CHECK(loom_model_count_params(&s, false) == 124439808ull, "gpt2 %zu",
        loom_model_count_params(&s, false));
  CHECK(loom_model_count_params(&s, true) == 124475904ull, "gpt2 padded %zu",
        loom_model_count_params(&s, true));
  /* Qwen2.5-0.5B (tied): 494,032,768 as reported by Hugging Face for the released model */
  CHECK(loom_model_preset(&s, "qwen2.5-0.5b") == 0, "%s", loom_errmsg());
  CHECK(s.hidden == 896 && s.layers == 24 && s.heads == 14 && s.kv_heads == 2 &&
            s.intermediate == 4864 && s.vocab_size == 151936 && s.tied_embeddings && s.qkv_bias,
        "qwen2.5-0.5b dims");
  CHECK(loom_model_count_params(&s, false) == 494032768ull, "qwen %zu",
        loom_model_count_params(&s, false));
  /* Qwen2.5-VL: the released checkpoints hold 8.29B (7B) and 33.5B (32B) parameters */
  CHECK(loom_model_preset(&s, "qwen2.5-vl-7b") == 0, "%s", loom_errmsg());
  CHECK(fabs((double)loom_model_count_params(&s, false) - 8.29e9) < 0.005e9, "qwen2.5-vl-7b %zu",
        loom_model_count_params(&s, false));
  CHECK(loom_model_preset(&s, "qwen2.5-vl-32b") == 0, "%s", loom_errmsg());
  CHECK(fabs((double)loom_model_count_params(&s, false) - 33.45e9) < 0.05e9, "qwen2.5-vl-32b %zu",
        loom_model_count_params(&s, false));
  CHECK(loom_model_preset(&s, "nope") != 0 && strstr(loom_errmsg(), "gpt2-124m"),
        "unknown preset lists presets: %s", loom_errmsg());
}

static void test_layout(void) {
  loom_model_spec s;
  loom_model_preset(&s, "tiny-llama");
  loom_param_layout lay;
  loom_param_layout_build(&lay, &s);
  const loom_param *k = loom_param_find(&lay, "layers.1.attn.k.weight");
  CHECK(k && k->shape[0] == s.kv_heads * s.head_dim && k->shape[1] == s.hidden, "k shape");
  CHECK(loom_param_find(&lay, "lm_head.weight") != NULL, "untied lm_head exists");
  CHECK(loom_param_find(&lay, "layers.0.attn.q.bias") == NULL, "tiny-llama has no qkv bias");
  CHECK(!loom_param_find(&lay, "layers.0.attn_norm.weight")->decay, "no decay on norms");
  CHECK(loom_param_find(&lay, "layers.0.mlp.gate.weight")->decay, "decay on matrices");
  for (int i = 0; i + 1 < lay.count; i++)
    CHECK(lay.params[i].offset + lay.params[i].numel <= lay.params[i + 1].offset &&
              lay.params[i].offset % 16 == 0,
          "tensor %s overlaps or is unaligned", lay.params[i].name);
  loom_param_layout_free(&lay);
}

static void test_config_errors(void) {
  loom_config c;
  loom_config_defaults(&c);
  loom_model_spec s;
  c.model.preset[0] = 0;
  strcpy(c.model.arch, "gpt2");
  c.model.vocab_size = 100;
  c.model.hidden = 100;
  c.model.heads = 3;
  c.model.layers = 2;
  c.model.max_seq = 16;
  CHECK(loom_model_spec_from_config(&s, &c.model) != 0, "heads not dividing hidden accepted");
  CHECK(strstr(loom_errmsg(), "model.heads (3)") && strstr(loom_errmsg(), "(100)"),
        "message: %s", loom_errmsg());
  strcpy(c.model.arch, "llama");
  c.model.hidden = 96;
  c.model.heads = 6;
  c.model.kv_heads = 4;
  c.model.intermediate = 64;
  CHECK(loom_model_spec_from_config(&s, &c.model) != 0 && strstr(loom_errmsg(), "kv_heads (4)"),
        "kv_heads not dividing heads: %s", loom_errmsg());
  c.model.kv_heads = 2;
  CHECK(loom_model_spec_from_config(&s, &c.model) == 0, "%s", loom_errmsg());
  CHECK(s.padded_vocab == 128 && s.head_dim == 16 && s.kv_heads == 2, "resolved spec");
  c.model.vocab_pad_multiple = 1;
  CHECK(loom_model_spec_from_config(&s, &c.model) == 0 && s.padded_vocab == 100, "no padding");
  /* preset + override: tiny-gpt2 with 6 layers keeps the rest of the preset */
  loom_config_defaults(&c);
  strcpy(c.model.preset, "tiny-gpt2");
  c.model.layers = 6;
  CHECK(loom_model_spec_from_config(&s, &c.model) == 0 && s.layers == 6 && s.hidden == 128,
        "preset override");
  /* a preset's rope theta survives the config defaults; an explicit one wins */
  loom_config_defaults(&c);
  strcpy(c.model.preset, "qwen2.5-0.5b");
  CHECK(loom_model_spec_from_config(&s, &c.model) == 0 && s.rope_theta == 1e6, "qwen theta %g",
        s.rope_theta);
  c.model.rope_theta = 5e5;
  CHECK(loom_model_spec_from_config(&s, &c.model) == 0 && s.rope_theta == 5e5, "explicit theta");
}

int main(void) {
  test_param_counts();
  test_layout();
  test_config_errors();
  return harness_finish("test_model_spec");
}
