# Config groups through `loom config show`: defaults-list order and _self_ position, nested
# defaults, GROUP=OPTION on the command line (replacing an entry, adding a group), the search
# path (the config's directory first, then ./configs), '# @package _global_' files, and every
# error: unknown group, unknown option (suggestion + list), a cycle, a key not in the schema
# (file:line), a non-section group without the package line, a duplicate group entry; user
# keys ("+exp.x: v") and run.tags lists in config files.
set -u
LOOM=$(realpath "${1:?usage: $0 path/to/loom}")
SRC=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../..")
WORK=$(mktemp -d /tmp/loom-groups-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../loom.sh" # assert.sh and run_loom
cd "$WORK"
mkdir -p conf/model conf/optim conf/cyc conf/bad configs/model
printf 'preset: tiny-gpt2\nlayers: 2\n' > conf/model/small.yaml
printf 'preset: tiny-llama\nlayers: 3\n' > conf/model/llama.yaml
printf '# @package _global_\ntraining.lr: 0.005\ntraining.steps: 11\n' > conf/optim/fast.yaml
printf '# @package _global_\ntraining.lr: 0.0002\n' > conf/optim/slow.yaml
# a group file with its own defaults list (model first, then its own keys)
printf '# @package _global_\ndefaults:\n  - model: llama\ntraining.lr: 0.007\n' > conf/optim/with_model.yaml
printf '# @package _global_\ndefaults:\n  - cyc: b\ntraining.steps: 1\n' > conf/cyc/a.yaml
printf '# @package _global_\ndefaults:\n  - cyc: a\ntraining.steps: 2\n' > conf/cyc/b.yaml
printf 'preset: tiny-gpt2\nlayerz: 2\n' > conf/model/typo.yaml
printf 'lr: 0.1\n' > conf/bad/nopkg.yaml
mkdir -p conf/nosection && printf 'lr: 0.1\n' > conf/nosection/x.yaml
# ./configs holds a group the config's own directory lacks, and a shadowed model option
printf 'preset: tiny-qwen2\n' > configs/model/small.yaml
printf 'preset: tiny-qwen2\n' > configs/model/qwen.yaml
show() { "$LOOM" config show "$@" 2>"$WORK/err"; }
val() { # key_last_component file_of_yaml -> value
  awk -v k="$1" '$1 == k":" { print $2; exit }'
}

# _self_ last: the file's keys win over the group files
printf 'defaults:\n  - model: small\n  - optim: fast\n  - _self_\ntraining:\n  lr: 0.001\n' > conf/self_last.yaml
out=$(show conf/self_last.yaml)
check "_self_ last: file's lr wins" test "$(echo "$out" | val lr)" = 0.001
check "_self_ last: group's steps kept" test "$(echo "$out" | val steps)" = 11
check "_self_ last: model group applied" test "$(echo "$out" | val preset)" = tiny-gpt2
check "_self_ last: model layers" test "$(echo "$out" | val layers)" = 2
# _self_ first: the defaults win
printf 'defaults:\n  - _self_\n  - model: small\n  - optim: fast\ntraining:\n  lr: 0.001\nmodel:\n  layers: 7\n' > conf/self_first.yaml
out=$(show conf/self_first.yaml)
check "_self_ first: group's lr wins" test "$(echo "$out" | val lr)" = 0.005
check "_self_ first: group's layers win" test "$(echo "$out" | val layers)" = 2
# no _self_: same as last (Hydra >= 1.1)
printf 'defaults:\n  - optim: fast\ntraining:\n  lr: 0.001\n' > conf/no_self.yaml
check "no _self_: file wins" test "$(show conf/no_self.yaml | val lr)" = 0.001
# list order among groups: the later entry wins
printf 'defaults:\n  - optim: fast\n  - model: small\n' > conf/order1.yaml
printf 'defaults:\n  - optim: with_model\n  - model: small\n' > conf/order2.yaml
printf 'defaults:\n  - model: small\n  - optim: with_model\n' > conf/order3.yaml
check "order: later model entry wins" test "$(show conf/order2.yaml | val preset)" = tiny-gpt2
check "order: nested defaults of the later entry win" test "$(show conf/order3.yaml | val preset)" = tiny-llama
check "nested defaults: then the group file's own keys" test "$(show conf/order3.yaml | val lr)" = 0.007
# command line: replace the entry's option, keep its place (the file's own keys still win)
out=$(show conf/self_last.yaml model=llama optim=slow)
check "CLI choice replaces model" test "$(echo "$out" | val preset)" = tiny-llama
check "CLI choice replaces optim, file lr still wins (_self_ last)" test "$(echo "$out" | val lr)" = 0.001
check "CLI choice replaced optim: steps back to default" test "$(echo "$out" | val steps)" = "$(show | val steps)"
out=$(show conf/self_first.yaml optim=slow)
check "CLI choice with _self_ first: group lr" test "$(echo "$out" | val lr)" = 0.0002
# a group the list does not name: loaded after the file (the command line wins)
printf 'model:\n  preset: tiny-gpt2\n  layers: 5\n' > conf/plain.yaml
out=$(show conf/plain.yaml model=llama)
check "CLI added group wins over the file" test "$(echo "$out" | val preset)" = tiny-llama
check "CLI added group: its layers" test "$(echo "$out" | val layers)" = 3
# key overrides come after every group
check "key override after groups" test "$(show conf/plain.yaml model=llama model.layers=9 | val layers)" = 9
# null option: the group is skipped
printf 'defaults:\n  - model: null\n' > conf/nullopt.yaml
check "model: null loads nothing" test "$(show conf/nullopt.yaml | val preset)" = "$(show | val preset)"
# search path: the config's directory first, ./configs next
check "config dir shadows ./configs" test "$(show conf/plain.yaml model=small | val preset)" = tiny-gpt2
check "./configs when the config dir lacks the option" test "$(show conf/plain.yaml model=qwen | val preset)" = tiny-qwen2
check "no config file: ./configs" test "$(show model=small | val preset)" = tiny-qwen2

# errors: non-zero exit, the file / override named, what to do
errcase() { # what expected_substring args...: loom config show ARGS (tests/loom.sh)
  expect_fail "$1" "$2" "$LOOM" config show "${@:3}"
}
errcase "unknown option (CLI)" "command-line override 'model=lama': unknown option 'lama' of config group 'model'; did you mean 'llama'; available: " conf/plain.yaml model=lama
check "unknown option: the list has every directory's options" grep -qE "available: [^(]*llama, qwen, small, [^(]*tiny-gpt2" "$RUN_DIR/err"
printf 'defaults:\n  - model: smal\n' > conf/badopt.yaml
errcase "unknown option (file:line)" "conf/badopt.yaml:2: unknown option 'smal' of config group 'model'; did you mean 'small'" conf/badopt.yaml
errcase "unknown group (CLI)" "unknown config group 'modl'; did you mean 'model'" conf/plain.yaml modl=small
printf 'defaults:\n  - _self_\n  - optm: fast\n' > conf/badgroup.yaml
errcase "unknown group (file:line)" "conf/badgroup.yaml:3: unknown config group 'optm'; did you mean 'optim'" conf/badgroup.yaml
errcase "section name as group: hint" "write the full key (e.g. training.lr=1e-3)" conf/plain.yaml training=fast
printf 'defaults:\n  - cyc: a\n' > conf/cycle.yaml
errcase "cycle" "config group cycle: $WORK/conf/cyc/a.yaml -> $WORK/conf/cyc/b.yaml -> $WORK/conf/cyc/a.yaml" conf/cycle.yaml
printf 'defaults:\n  - self: x\n' > conf/self.yaml
printf '# @package _global_\ndefaults:\n  - self: x\n' > conf/self_cycle_x.yaml
mkdir -p conf/self && cp conf/self_cycle_x.yaml conf/self/x.yaml
errcase "self cycle" "config group cycle: $WORK/conf/self/x.yaml -> $WORK/conf/self/x.yaml" conf/self.yaml
errcase "unknown key in a group file" "$WORK/conf/model/typo.yaml:2: unknown key 'model.layerz'; did you mean 'model.layers'" conf/plain.yaml model=typo
errcase "group not a section, no package line" "group 'nosection' is not a config section" conf/plain.yaml nosection=x
printf 'defaults:\n  - model: small\n  - model: llama\n' > conf/dup.yaml
errcase "group twice" "conf/dup.yaml:3: config group 'model' is chosen twice in the defaults list (first at line 2)" conf/dup.yaml
printf 'defaults:\n  - _self_\n  - _self_\n' > conf/dupself.yaml
errcase "_self_ twice" "conf/dupself.yaml:3: _self_ appears twice" conf/dupself.yaml
printf 'defaults: model\n' > conf/notlist.yaml
errcase "defaults not a list" "conf/notlist.yaml:1: defaults must be a list" conf/notlist.yaml
printf 'defaults:\n  - model/small\n' > conf/slash.yaml
errcase "entry form" "conf/slash.yaml:2: a defaults entry is 'GROUP: OPTION'" conf/slash.yaml
errcase "option with a slash" "is not an option name of group 'model'" conf/plain.yaml model=../x
# user keys in files: a group file's, then the primary file's (later files replace)
printf '# @package _global_\n+exp.origin: group\n+exp.only_group: 1\n' > conf/optim/userkeys.yaml
printf 'defaults:\n  - optim: userkeys\n  - _self_\n+exp.origin: primary\n' > conf/userkeys.yaml
out=$(show conf/userkeys.yaml)
check "user key: the primary file replaces the group's" grep -qx '+exp.origin: "primary"' <<< "$out"
check "user key: the group's own kept" grep -qx '+exp.only_group: "1"' <<< "$out"
printf '+exp.bad: [1, 2]\n' > conf/userlist.yaml
errcase "user key with a list" "conf/userlist.yaml:1: user key exp.bad takes one value (text or a number), not a list" conf/userlist.yaml
printf '+nodot: 1\n' > conf/usernodot.yaml
errcase "user key without a dot (file:line)" "conf/usernodot.yaml:1: user key 'nodot' needs a dotted name" conf/usernodot.yaml
printf 'run:\n  tags: [a, b]\n' > conf/tags.yaml
check "run.tags list in a file" grep -qx '  tags: "a,b"' <<< "$(show conf/tags.yaml)"
printf 'run:\n  tags: [a, {b: 1}]\n' > conf/badtags.yaml
errcase "run.tags with a mapping item" "conf/badtags.yaml:2: run.tags is a list of labels (text), not a mapping" conf/badtags.yaml

# a failed composition prints no config
check "error: nothing on stdout" test -z "$(show conf/badopt.yaml 2>/dev/null)"
# the shipped groups compose with the shipped demo config
out=$("$LOOM" config show "$SRC/configs/demo_groups.yaml" model=tiny-llama optim=constant)
check "shipped groups: tiny-llama" test "$(echo "$out" | val preset)" = tiny-llama
check "shipped groups: constant schedule" test "$(echo "$out" | val lr_schedule)" = constant
check "shipped demo_groups = demo.yaml (but the name)" test \
  "$("$LOOM" config show "$SRC/configs/demo_groups.yaml" run.name=demo)" = "$("$LOOM" config show "$SRC/configs/demo.yaml")"
finish
