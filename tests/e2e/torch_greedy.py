"""Independent PyTorch greedy decode of a Hugging Face directory (as `loom ckpt export`
writes it), for the user-path test: the reference that tests/gen/gen_torch_check.py uses
(tests/ckpt/hf_models.py over tests/torch/ref_model.py reads only HF names and config.json),
recomputing the whole sequence at every step (no KV cache) and taking torch.argmax over the
real vocabulary (first index among equal maxima, as loom's greedy).
usage: torch_greedy.py HF_DIR PROMPT_IDS N   (PROMPT_IDS '1,2,3'; prints N ids as '4,5,6')"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ckpt"))
import hf_models  # noqa: E402
import hf_st  # noqa: E402


def main():
    hf, prompt, new = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], int(sys.argv[3])
    sd, _ = hf_st.read_dir(hf)
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    seq, V = list(prompt), cfg["vocab_size"]
    with torch.no_grad():
        for _ in range(new):
            seq.append(int(torch.argmax(hf_models.logits(sd, cfg, seq)[-1, :V])))
    print(",".join(str(t) for t in seq[len(prompt):]))


if __name__ == "__main__":
    main()
