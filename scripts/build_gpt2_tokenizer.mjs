#!/usr/bin/env node
// Build GPT-2's Hugging Face tokenizer.json from the r50k_base ranks that the `js-tiktoken`
// npm package ships (r50k_base is GPT-2's vocabulary: token id = rank).
//
//   node scripts/build_gpt2_tokenizer.mjs OUT.json [--merges strings|pairs]
//
// js-tiktoken is resolved from the current directory or from tests/node/ (run `npm ci` in
// tests/node first). Vocab: each rank's bytes spelled with GPT-2's byte-to-unicode mapping,
// plus <|endoftext|> = 50256. Merges are recovered from the ranks: for a token of rank r,
// run BPE on its bytes allowing only ranks < r; the two parts left are the merge that made
// it, and merges are ordered by r. The file has the structure of HF's gpt2 tokenizer.json
// (ByteLevel pre-tokenizer, post-processor and decoder; merges as "a b" strings by default).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

async function loadRanks() {
  try {
    return (await import("js-tiktoken/ranks/r50k_base")).default;
  } catch {
    const req = createRequire(path.join(here, "..", "tests", "node", "package.json"));
    return req("js-tiktoken/ranks/r50k_base");
  }
}

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest to U+0100...
function byteToUnicode() {
  const table = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    table[b] = String.fromCodePoint(printable ? b : 256 + n++);
  }
  return table;
}

// "PREFIX OFFSET tok tok ..." lines of base64 tokens -> Map(latin1 bytes -> rank).
function parseRanks(bpeRanks) {
  const ranks = new Map();
  for (const line of bpeRanks.split("\n")) {
    if (!line) continue;
    const [, offsetStr, ...tokens] = line.split(" ");
    const offset = Number.parseInt(offsetStr, 10);
    tokens.forEach((t, i) => ranks.set(Buffer.from(t, "base64").toString("latin1"), offset + i));
  }
  return ranks;
}

// BPE on `token` (latin1 string of bytes) with ranks below maxRank; returns the parts.
function bpeBelow(token, ranks, maxRank) {
  let parts = Array.from(token);
  for (;;) {
    let best = -1;
    let bestRank = maxRank;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = ranks.get(parts[i] + parts[i + 1]);
      if (r !== undefined && r < bestRank) {
        bestRank = r;
        best = i;
      }
    }
    if (best < 0) return parts;
    parts.splice(best, 2, parts[best] + parts[best + 1]);
  }
}

function build(tk, mergesAs) {
  const b2u = byteToUnicode();
  const spell = (latin1) => Array.from(latin1, (c) => b2u[c.charCodeAt(0)]).join("");
  const ranks = parseRanks(tk.bpe_ranks);
  const byRank = [...ranks.entries()].sort((a, b) => a[1] - b[1]);
  const vocab = {};
  const merges = [];
  for (const [token, rank] of byRank) {
    vocab[spell(token)] = rank;
    if (token.length < 2) continue;
    const parts = bpeBelow(token, ranks, rank);
    if (parts.length !== 2) throw new Error(`rank ${rank}: BPE below it leaves ${parts.length} parts`);
    const [a, b] = parts.map(spell);
    merges.push(mergesAs === "pairs" ? [a, b] : `${a} ${b}`);
  }
  const added = [];
  for (const [content, id] of Object.entries(tk.special_tokens)) {
    vocab[content] = id;
    added.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: true, special: true });
  }
  const byteLevel = (prefix, trim) => ({ type: "ByteLevel", add_prefix_space: prefix, trim_offsets: trim, use_regex: true });
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: byteLevel(false, true),
    post_processor: byteLevel(true, false),
    decoder: byteLevel(true, true),
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges,
    },
  };
}

async function main() {
  const args = process.argv.slice(2);
  const mi = args.indexOf("--merges");
  const mergesAs = mi >= 0 ? args.splice(mi, 2)[1] : "strings";
  if (args.length !== 1 || !["strings", "pairs"].includes(mergesAs)) {
    console.error("usage: node scripts/build_gpt2_tokenizer.mjs OUT.json [--merges strings|pairs]");
    process.exit(1);
  }
  const out = args[0];
  const json = build(await loadRanks(), mergesAs);
  const tmp = `${out}.tmp.${process.pid}`;
  fs.writeFileSync(tmp, JSON.stringify(json, null, 2) + "\n");
  fs.renameSync(tmp, out);
  console.log(`wrote ${out}: vocab ${Object.keys(json.model.vocab).length}, ${json.model.merges.length} merges`);
}

main().catch((e) => {
  console.error(`build_gpt2_tokenizer: ${e.message}`);
  process.exit(1);
});
