"""`loom generate` greedy ids against an independent PyTorch greedy decode.

The reference (tests/ckpt/hf_models.py over tests/torch/ref_model.py) reads only Hugging Face
names and config.json, and recomputes the whole sequence at every step (no cache), taking
torch.argmax over the real vocabulary (first index among equal maxima, as loom's greedy).
Cases:
  * checkpoints trained a few steps by `loom train` from a wide initialisation (std 0.3, so
    that greedy output varies from token to token instead of repeating one token; odd shapes: hidden 96 with 3 heads;
    Llama GQA 4 q / 2 kv heads with q/k/v biases and untied embeddings), exported with
    `loom ckpt export`; loom generates from the loom checkpoint, torch from the export;
  * random Hugging Face directories (Qwen2 GQA tied, GPT-2 untied with a 40-wide MLP) read by
    `loom generate` directly;
  * a batch of prompts of different lengths (1, 5, 11 tokens): every row equals torch and
    the same prompt generated alone;
  * a prompt that reaches max_seq: generation stops there ("max_seq") with the ids torch gives.
Token ids must be equal: no tolerance (the argmax of logits that agree to ~1e-6 relative;
the models' top-2 margins are far larger, and a flipped tie would show as a failure).
usage: gen_torch_check.py LOOM"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ckpt"))
import hf_models  # noqa: E402
import hf_st  # noqa: E402

LOOM = sys.argv[1]
failures = []
distinct = []  # distinct ids per greedy output compared with torch
PROMPTS = [[5, 17, 250, 3, 99], [42], [7, 7, 100, 12, 13, 14, 200, 31, 2, 64, 9]]
NEW = 12


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(map(str, args)), r.returncode,
                                                    r.stderr))
    return r.stdout


def loom_generate(ck, prompts, new=NEW):
    out = run(LOOM, "generate", ck, "--prompt-ids", ";".join(",".join(map(str, p))
              for p in prompts), "--max-new-tokens", new, "--ignore-eos", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    return rows


def torch_greedy(sd, cfg, prompt, new, max_seq):
    seq, V = list(prompt), cfg["vocab_size"]
    with torch.no_grad():
        for _ in range(new):
            if len(seq) >= max_seq:
                break
            seq.append(int(torch.argmax(hf_models.logits(sd, cfg, seq)[-1, :V])))
    return seq[len(prompt):]


def check(what, got, want):
    ok = got == want
    if what.endswith("= torch"):
        distinct.append(len(set(got)))
    print("%-58s %s" % (what, "ok" if ok else "FAIL\n   loom  %s\n   torch %s" % (got, want)))
    if not ok:
        failures.append(what)


def check_model(name, ck, hf, max_seq):
    sd, _ = hf_st.read_dir(hf)
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    prompts = [[t % cfg["vocab_size"] for t in p] for p in PROMPTS]
    batch = loom_generate(ck, prompts)
    for i, p in enumerate(prompts):
        want = torch_greedy(sd, cfg, p, NEW, max_seq)
        check("%s: prompt of %d tokens (batched) = torch" % (name, len(p)), batch[i]["ids"], want)
        alone = loom_generate(ck, [p])[0]["ids"]
        check("%s: prompt of %d tokens alone = batched row" % (name, len(p)), alone,
              batch[i]["ids"])
    # up to the last position: max_seq - 3 prompt tokens leave room for 3 new ones
    p = [(11 * i + 5) % cfg["vocab_size"] for i in range(max_seq - 3)]
    row = loom_generate(ck, [p], new=10)[0]
    check("%s: stops at max_seq (%d)" % (name, max_seq), [row["stop"], row["ids"]],
          ["max_seq", torch_greedy(sd, cfg, p, 10, max_seq)])


def make_data(work):
    run(LOOM, "data", "synth-text", "--out", work + "/corpus.txt", "--bytes", "60000", "--seed", "3")
    run(LOOM, "data", "train-tokenizer", "--vocab-size", "300", "--out", work + "/tok.json",
        work + "/corpus.txt")
    run(LOOM, "data", "tokenize", "--tokenizer", work + "/tok.json", "--out",
        work + "/train.bin", work + "/corpus.txt")


def trained(work, name, over):
    run(LOOM, "train", "model.vocab_size=300", "model.max_seq=32", "training.seq_len=24",
        "training.micro_batch_size=2", "training.steps=5", "training.warmup_steps=1",
        "training.lr=0.003", "model.init_std=0.3", "data.train_shards=%s/train.bin" % work,
        "data.tokenizer=%s/tok.json" % work, "run.output_dir=%s/runs" % work,
        "run.name=" + name, "--quiet", *over)
    runs = [d for d in os.listdir(work + "/runs") if d.startswith(name + "_")]
    ck = os.path.join(work, "runs", runs[0], "final_checkpoint")
    hf = os.path.join(work, name + ".hf")
    run(LOOM, "ckpt", "export", ck, "--out", hf)
    return ck, hf


def write_hf(work, name, cfg, sd):
    hf = os.path.join(work, name)
    hf_st.write_dir(hf, sd)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(cfg, f)
    return hf


def main():
    work = tempfile.mkdtemp(prefix="gen_check_", dir=os.getcwd())
    try:
        make_data(work)
        ck, hf = trained(work, "gpt2", ["model.preset=", "model.arch=gpt2", "model.hidden=96",
                                        "model.heads=3", "model.layers=2"])
        check_model("gpt2 hidden 96, 3 heads (trained, exported)", ck, hf, 32)
        ck, hf = trained(work, "llama", ["model.preset=", "model.arch=llama", "model.hidden=64",
                                         "model.heads=4", "model.kv_heads=2",
                                         "model.intermediate=96", "model.layers=2",
                                         "model.qkv_bias=true", "model.tied_embeddings=false"])
        check_model("llama GQA 4/2, q/k/v bias, untied (trained, exported)", ck, hf, 32)
        rng = np.random.default_rng(11)
        cfg = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 300,
               "hidden_size": 48, "intermediate_size": 72, "num_hidden_layers": 3,
               "num_attention_heads": 6, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
               "rope_theta": 1000000.0, "max_position_embeddings": 29, "hidden_act": "silu",
               "tie_word_embeddings": True, "use_sliding_window": False}
        hf = write_hf(work, "qwen2_hf", cfg, hf_models.random_qwen2(cfg, rng))
        check_model("qwen2 GQA 6/2 tied, max_seq 29 (Hugging Face dir)", hf, hf, 29)
        cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 300,
               "n_embd": 36, "n_layer": 2, "n_head": 3, "n_positions": 27, "n_inner": 40,
               "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
               "tie_word_embeddings": False}
        sd = hf_models.random_gpt2(cfg, rng, buffers=False)
        sd["lm_head.weight"] = (0.2 * rng.standard_normal((300, 36))).astype(np.float32)
        hf = write_hf(work, "gpt2_hf", cfg, sd)
        check_model("gpt2 untied, n_inner 40, max_seq 27 (Hugging Face dir)", hf, hf, 27)
    except Exception as e:  # a failed command: a failure, keep the work dir
        failures.append("error: %s" % e)
    # the comparison means little if the outputs repeat one token
    print("distinct ids per output of %d: %s" % (NEW, distinct))
    if not failures and min(distinct) < 3:
        failures.append("some greedy output has fewer than 3 distinct ids: a weak comparison")
    if failures:
        print("FAILED (work dir %s):\n  %s" % (work, "\n  ".join(failures)))
        return 1
    shutil.rmtree(work)
    print("gen_torch_check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
