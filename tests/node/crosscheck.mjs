// Cross-check loom's tokenizer against @huggingface/tokenizers (and js-tiktoken for GPT-2).
//
//   node crosscheck.mjs --loom BIN --tokenizer tokenizer.json --corpus FILE --work DIR
//                       [--tiktoken r50k_base] [--fuzz N] [--seed S]
//
// Inputs: the corpus file plus N deterministic random documents built from fragments of
// many scripts, whitespace kinds, digits, contractions, emoji and the tokenizer's added
// tokens. Each input is encoded by `loom data encode --json` (one process for all) and by
// the JS libraries, compared token for token; decode(encode(x)) == x is checked through
// `loom data decode` (bytes) and through HF's decode. Prints "crosscheck: N passed,
// N failed" and exits 1 on any failure.
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { Tokenizer } from "@huggingface/tokenizers";
import { Tiktoken } from "js-tiktoken/lite";

function parseArgs(argv) {
  const o = { fuzz: 40, seed: 1 };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, "");
    if (argv[i + 1] === undefined) throw new Error(`option ${argv[i]} needs a value`);
    o[k] = ["fuzz", "seed"].includes(k) ? Number(argv[i + 1]) : argv[i + 1];
  }
  for (const k of ["loom", "tokenizer", "corpus", "work"])
    if (!o[k]) throw new Error(`--${k} is required`);
  return o;
}

// mulberry32: small deterministic PRNG.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FRAGMENTS = [
  "the", "The", "THE", " cat", " Dog", "hello", " world", "naïve", "Straße", "ÉCOLE", "e\u0301",
  "a\u0300\u0301", "Привет", " мир", "Καλημέρα", "日本語", "中文", "テキスト", "안녕", "하세요",
  "مرحبا", "بِكُمْ", "नमस्ते", "क्षत्रिय", "สวัสดี", "שָׁלוֹם", "𝔘𝔫𝔦", "ǅ", "ß", "İ",
  " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2009", "\u200b",
  "0", "7", "42", "2024", "1234567890", "3.14", "1,000", "٣٤٥", "१२३", "１２", "²", "½", "Ⅻ",
  "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'d", "'D", "'", "''", "’s", "n't", "'LL",
  ".", ",", "!", "?", "...", "---", "«", "»", "—", "…", "(", ")", "{", "}", "[", "]", "\"", "#",
  "@", "$", "%", "&", "*", "_", "-", "+", "=", "<", ">", "/", "\\", "|", "~", "`", "^", ";", ":",
  "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "1️⃣", "❤️", "🔥", "∑", "√", "€", "₹", "©",
  "int", " x", " = ", "0x1F", "foo_bar", "https://a.b/c?d=e", "<|", "|>", "endoftext",
];

function fuzzDocs(n, seed, addedTokens) {
  const r = rng(seed);
  const pool = FRAGMENTS.concat(addedTokens);
  const docs = [];
  for (let d = 0; d < n; d++) {
    const len = 1 + Math.floor(r() * (d % 4 === 0 ? 200 : 30));
    let s = "";
    for (let i = 0; i < len; i++) s += pool[Math.floor(r() * pool.length)];
    docs.push(s);
  }
  return docs;
}

function loomEncode(opts, files) {
  const out = execFileSync(opts.loom, ["data", "encode", "--tokenizer", opts.tokenizer, "--json", ...files],
    { maxBuffer: 1 << 28 }).toString();
  return out.trim().split("\n").map((l) => JSON.parse(l).ids);
}

function loomDecode(opts, ids) {
  return execFileSync(opts.loom, ["data", "decode", "--tokenizer", opts.tokenizer, "-"],
    { input: ids.join(" "), maxBuffer: 1 << 28 });
}

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const json = JSON.parse(fs.readFileSync(opts.tokenizer, "utf8"));
  const hf = new Tokenizer(json, {});
  const tk = opts.tiktoken
    ? new Tiktoken((await import(`js-tiktoken/ranks/${opts.tiktoken}`)).default)
    : null;
  const added = (json.added_tokens || []).map((a) => a.content);
  fs.mkdirSync(opts.work, { recursive: true });
  const corpus = fs.readFileSync(opts.corpus, "utf8");
  const texts = [corpus, ...fuzzDocs(opts.fuzz, opts.seed, added)];
  const files = texts.map((t, i) => {
    const f = path.join(opts.work, `input_${i}.txt`);
    fs.writeFileSync(f, t);
    return f;
  });
  const loomIds = loomEncode(opts, files);
  let passed = 0, failed = 0;
  const check = (ok, what) => {
    if (ok) passed++;
    else {
      failed++;
      console.error(`FAIL ${what}`);
    }
  };
  texts.forEach((text, i) => {
    const name = i === 0 ? path.basename(opts.corpus) : `fuzz doc ${i} (${files[i]})`;
    const want = hf.encode(text, { add_special_tokens: false }).ids;
    const d = firstDiff(loomIds[i], want);
    check(d < 0, `${name}: loom vs @huggingface/tokenizers differ at token ${d}: loom ` +
      `${JSON.stringify(loomIds[i].slice(Math.max(0, d - 3), d + 5))} hf ` +
      `${JSON.stringify(want.slice(Math.max(0, d - 3), d + 5))}`);
    if (tk) {
      const ref = tk.encode(text, "all");
      const e = firstDiff(loomIds[i], ref);
      check(e < 0, `${name}: loom vs js-tiktoken ${opts.tiktoken} differ at token ${e}`);
    }
    const hfBack = hf.decode(want, { clean_up_tokenization_spaces: false });
    check(hfBack === text, `${name}: HF decode(encode(x)) != x`);
  });
  // loom decode of all inputs in one process (decoding is concatenation); per input on failure.
  const all = Buffer.concat(texts.map((t) => Buffer.from(t, "utf8")));
  if (Buffer.compare(loomDecode(opts, loomIds.flat()), all) === 0) passed++;
  else texts.forEach((text, i) => check(Buffer.compare(loomDecode(opts, loomIds[i]),
    Buffer.from(text, "utf8")) === 0, `input ${i}: loom decode(encode(x)) != x`));
  const tokens = loomIds[0].length, bytes = Buffer.byteLength(corpus);
  console.log(`${path.basename(opts.tokenizer)}: ${texts.length} inputs; corpus ${bytes} bytes -> ${tokens} tokens`);
  console.log(`crosscheck: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(`crosscheck: ${e.stack || e.message}`);
  process.exit(1);
});
