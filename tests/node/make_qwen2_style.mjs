// Rewrite a byte-level BPE tokenizer.json into Qwen2's layout, for the cross-checks:
//
//   node make_qwen2_style.mjs IN.json OUT.json
//
// pre_tokenizer becomes Sequence[Split(Qwen2's regex, Isolated), ByteLevel(use_regex false)]
// as in Qwen2's tokenizer.json; merges become ["a", "b"] pairs; <|im_start|> and <|im_end|>
// are added as special tokens after the existing ids. Qwen2's NFC normalizer is left out on
// purpose: loom does not apply normalizers, and the corpus has decomposed accents.
import fs from "node:fs";

const QWEN2_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const [inPath, outPath] = process.argv.slice(2);
if (!inPath || !outPath) {
  console.error("usage: node make_qwen2_style.mjs IN.json OUT.json");
  process.exit(1);
}
const tok = JSON.parse(fs.readFileSync(inPath, "utf8"));
tok.pre_tokenizer = {
  type: "Sequence",
  pretokenizers: [
    { type: "Split", pattern: { Regex: QWEN2_PATTERN }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
  ],
};
tok.model.merges = tok.model.merges.map((m) => (Array.isArray(m) ? m : m.split(" ")));
let next = 1 + Math.max(...Object.values(tok.model.vocab), ...tok.added_tokens.map((a) => a.id));
for (const content of ["<|im_start|>", "<|im_end|>"])
  tok.added_tokens.push({ id: next++, content, single_word: false, lstrip: false, rstrip: false,
    normalized: false, special: true });
fs.writeFileSync(outPath, JSON.stringify(tok, null, 2) + "\n");
console.log(`wrote ${outPath}: Qwen2-style pre-tokenizer, ${tok.model.merges.length} merges as pairs`);
