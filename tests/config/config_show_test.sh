#!/usr/bin/env bash
# `loom config show` says what will be built: for every model preset the keys the preset fills
# in (0 or "" in the config) print the preset's values marked "# from model.preset X" (never
# "hidden: 0"), the values `loom model list` gives; the printed config loads back to the same
# resolved config (show of the output = the output, comments aside); a key set on the command
# line stays without a comment. A near-miss preset (gpt2-125m) gets "did you mean 'gpt2-124m'";
# an override naming a key without its section (lr=1e-3) is not taken for a config group but
# suggests the key (training.lr).
set -u
LOOM=$(realpath "${1:?usage: $0 path/to/loom}")
WORK=$(mktemp -d /tmp/loom-config-show-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../loom.sh" # assert.sh and run_loom
cd "$WORK"
key() { sed -n "/^model:/,/^[a-z]/s/^  $1: \([^ ]*\).*/\1/p" "$2"; } # model.KEY of a shown file

presets=$("$LOOM" model list | awk 'NR > 1 && $1 ~ /^[a-z0-9.-]+$/ { print $1 }')
check "model list names presets ($(wc -w <<< "$presets"))" test "$(wc -w <<< "$presets")" -ge 10
for p in $presets; do
  "$LOOM" config show model.preset="$p" > "$p.yaml" 2> err || { fail "config show model.preset=$p: $(cat err)"; continue; }
  check "$p: no model dimension printed as 0" \
    bash -c "! sed -n '/^model:/,/^model.moe:/p' '$p.yaml' | grep -Eq '^  (hidden|layers|heads|kv_heads|head_dim|intermediate|max_seq|vocab_size): 0'"
  check "$p: the preset's values are marked" grep -q "^  hidden: [1-9][0-9]*  # from model.preset $p$" "$p.yaml"
  # loom model list: name arch vocab hidden layers heads kv ...; the same numbers
  read -r _ arch vocab hidden layers heads kv _ < <("$LOOM" model list | awk -v p="$p" '$1 == p')
  got="$(key arch "$p.yaml") $(key vocab_size "$p.yaml") $(key hidden "$p.yaml") $(key layers "$p.yaml") $(key heads "$p.yaml") $(key kv_heads "$p.yaml")"
  check "$p: arch vocab hidden layers heads kv_heads = loom model list's ($got vs $arch $vocab $hidden $layers $heads $kv)" \
    test "$got" = "$arch $vocab $hidden $layers $heads $kv"
  # the printed file loads back to the same config (its comments aside)
  "$LOOM" config show "$p.yaml" > "$p.again.yaml" 2> err
  check "$p: config show of the shown file = the shown file (comments aside)" \
    cmp -s <(sed 's/  #.*//' "$p.yaml") <(sed 's/  #.*//' "$p.again.yaml")
done
run_loom config show model.preset=tiny-llama model.hidden=96
expect_rc "explicit dimensions" 0
expect_out "a key set on the command line has no comment" $'\n  hidden: 96\n'
expect_out "the others still come from the preset" "  layers: "
run_loom config show model.preset=tiny-qwen3-moe
expect_out "an MoE preset's experts" "  experts: 8  # from model.preset tiny-qwen3-moe"
run_loom config show model.preset="" model.arch=llama model.vocab_size=64 model.hidden=32 \
  model.layers=1 model.heads=2 model.intermediate=64 model.max_seq=64
expect_rc "no preset" 0
expect_out "no preset: the family default said" "norm_eps: 1.0e-06  # the llama default"

run_loom config show model.preset="" model.arch=llama
expect_rc "a model not complete yet: still shown" 0
expect_err "... with a note saying why it cannot be built" "note: the model cannot be built yet"
expect_out "... its values as given" "  hidden: 0"$'\n'
run_loom config show model.preset="" model.arch=llama model.vocab_size=64 model.hidden=32 \
  model.layers=2 model.heads=2 model.intermediate=64 model.max_seq=64 model.moe.experts=4 \
  model.moe.top_k=2 model.moe.intermediate=16
expect_rc "an MoE model without a preset" 0
expect_out "... every layer MoE as Hugging Face's default decoder_sparse_step" "  sparse_step: 1  #"
expect_fail "a near-miss preset" "did you mean 'gpt2-124m'?" "$LOOM" config show model.preset=gpt2-125m
expect_fail "loom train: a near-miss preset" "did you mean 'gpt2-124m'?" \
  "$LOOM" train model.preset=gpt2-125m training.steps=1
expect_fail "lr=1e-3: the key, not a group" "did you mean the config key 'training.lr' (training.lr=1e-3)?" \
  "$LOOM" config show lr=1e-3
expect_fail "steps=5: the key" "did you mean the config key 'training.steps'" "$LOOM" config show steps=5
expect_fail "a misspelt group still gets the group" "did you mean 'model'" "$LOOM" config show modle=tiny-gpt2
finish
