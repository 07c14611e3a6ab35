#!/usr/bin/env python3
"""loom's pre-tokenizer split against the reference: Python's `regex` module (what OpenAI's
GPT-2 encoder.py uses; Debian python3-regex) running the same GPT-2 and Qwen2 patterns.
    pretok_check.py PRETOK_DUMP [GPT2_TOKENIZER_JSON]
With GPT-2's tokenizer.json (built by the data_node_setup test from js-tiktoken's ranks), the
token ids of the whitespace/separator texts are also compared with OpenAI's encoder.py
algorithm (regex pre-split, then BPE by merge rank) written out below; `a \u180eb` must give
64 28053 254 236 65 as OpenAI's encoder and js-tiktoken do.
Texts: every Unicode whitespace / separator / format code point that matters for \\s (all of
Zs, Zl, Zp, Cc, White_Space, U+180E, U+200B..U+200D, U+2060, U+FEFF, U+0085 and their
neighbours) in 16 contexts each (next to letters, digits, punctuation, spaces, newlines,
apostrophes, runs of itself), and a deterministic sample of up to 400 code points of every
general category in 4 contexts. The pieces must be identical (exact bytes, same order): no
tolerance, a pre-split is right or wrong.

Unicode versions: PCRE2 and `regex` each carry their own Unicode tables. A code point whose
\\p{L} / \\p{N} / \\s membership differs between the two tables' versions (it was assigned or
changed in a version only one of them has) cannot agree and is left out of the sample; the
test prints how many and fails if any whitespace/separator code point is among them."""
import random, subprocess, sys, unicodedata

import regex

dump = sys.argv[1]
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
         r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

L, N, S = regex.compile(r"\p{L}"), regex.compile(r"\p{N}"), regex.compile(r"\s")


def klass(cp):
    """(letter, number, space) by `regex`'s tables."""
    c = chr(cp)
    return (bool(L.match(c)), bool(N.match(c)), bool(S.match(c)))


def klass_ucd(cp):
    """The same by Python's unicodedata (the Unicode version PCRE2 is compared under)."""
    cat = unicodedata.category(chr(cp))
    return (cat[0] == "L", cat[0] == "N", bool(S.match(chr(cp))) if cat != "Cn" else False)


def sep_points():
    pts = set()
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        cat = unicodedata.category(chr(cp))
        if cat in ("Zs", "Zl", "Zp", "Cc") or S.match(chr(cp)):
            pts.add(cp)
    for cp in (0x180E, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x0085, 0x061C, 0x115F, 0x1160,
               0x3164, 0xFFA0, 0x2061, 0x2062, 0x2063, 0x2064, 0x206A, 0x206F, 0xFFFE, 0xFFFF):
        pts.add(cp)
    for cp in list(pts):  # neighbours
        for d in (-1, 1):
            if 0 <= cp + d < 0x110000 and not 0xD800 <= cp + d < 0xE000:
                pts.add(cp + d)
    return sorted(pts)


SEP_CTX = ["{c}", "a{c}b", "a {c}b", "a{c} b", "a {c} b", "{c}{c}{c}x", "1{c}2", "x {c}{c}",
           "!{c}?", "{c}\n", "\n{c}", "'s{c}'ll", "a  {c}  b", "{c} 'S", "\u00e9{c}\u4e00", " {c}"]
CAT_CTX = ["{c}", "a {c}b", " {c}{c} 1", "'{c}s x"]
# Contractions in both cases and with the characters whose case folding reaches s, k, l, m, d,
# t (Qwen2's (?i:...) group): U+017F LONG S, U+212A KELVIN SIGN, U+0130 / U+0131 dotted and
# dotless i, fullwidth letters.
EXTRA = ["it's I'M we'LL you'Ve they'D 'RE 'T", "'\u017f", "x'\u017ft", "'\u212a", "'\u0130",
         "'\u0131", "'\uff53", "a'\u017f'\u212a'L", "'s's's", "''s", "' s", "'\u00df"]


def texts():
    out = []
    seps = sep_points()
    for cp in seps:
        for ctx in SEP_CTX:
            out.append(ctx.format(c=chr(cp)))
    by_cat, skipped = {}, []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        if klass(cp) != klass_ucd(cp):
            skipped.append(cp)
            continue
        by_cat.setdefault(unicodedata.category(chr(cp)), []).append(cp)
    out += EXTRA
    rng = random.Random(11)
    for cat, cps in sorted(by_cat.items()):
        pick = cps if len(cps) <= 400 else rng.sample(cps, 400)
        for cp in pick:
            for ctx in CAT_CTX:
                out.append(ctx.format(c=chr(cp)))
    return out, seps, by_cat, skipped


def main():
    cases, seps, by_cat, skipped = texts()
    bad_seps = [cp for cp in seps if cp in set(skipped)]
    print(f"regex {regex.__version__}, Python unicodedata {unicodedata.unidata_version}; "
          f"{len(seps)} whitespace/separator code points x {len(SEP_CTX)} contexts, "
          f"{len(by_cat)} categories sampled; {len(skipped)} code points left out "
          f"(classified differently by the two Unicode versions)")
    if bad_seps:
        print("FAIL: whitespace/separator code points classified differently by the Unicode "
              "versions:", " ".join(f"U+{cp:04X}" for cp in bad_seps))
        return 1
    fails = 0
    for name, pat in (("gpt2", GPT2), ("qwen2", QWEN2)):
        rx = regex.compile(pat)
        inp = "".join(t.encode("utf-8").hex() + "\n" for t in cases)
        r = subprocess.run([dump, name], input=inp.encode(), capture_output=True, check=True)
        lines = r.stdout.decode().split("\n")
        print(f"{name}: PCRE2 Unicode {lines[0]}, {len(cases)} texts")
        got_lines = lines[1:1 + len(cases)]
        for text, got in zip(cases, got_lines):
            want = [m.group(0).encode("utf-8") for m in rx.finditer(text)]
            have = [bytes.fromhex(h) for h in got.split(" ")] if got else []
            if have != want:
                fails += 1
                if fails <= 20:
                    print(f"  MISMATCH {name} {text!r} ({' '.join(f'U+{ord(c):04X}' for c in text)}):"
                          f"\n    loom   {[h.decode('utf-8', 'replace') for h in have]}"
                          f"\n    regex  {[w.decode('utf-8', 'replace') for w in want]}")
        if len(got_lines) != len(cases):
            print(f"FAIL: {name}: {len(got_lines)} lines back for {len(cases)} texts")
            return 1
    print(f"{'FAIL' if fails else 'OK'}: {fails} texts split differently")
    if len(sys.argv) > 2:
        fails += check_gpt2_ids(sys.argv[2], [t for t in cases[:len(seps) * len(SEP_CTX)]])
    return 1 if fails else 0


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def check_gpt2_ids(tok_path, texts):
    """Token ids of loom_tokenizer_encode vs OpenAI's encoder.py (regex split + BPE)."""
    import json
    tj = json.load(open(tok_path, encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    ranks = {}
    for i, m in enumerate(tj["model"]["merges"]):
        a, b = m.split(" ") if isinstance(m, str) else m
        ranks.setdefault((a, b), i)
    b2u, rx = bytes_to_unicode(), regex.compile(GPT2)

    def bpe(word):
        word = list(word)
        while len(word) > 1:
            pairs = [(ranks.get((word[i], word[i + 1]), 1 << 60), i) for i in range(len(word) - 1)]
            r, _ = min(pairs)
            if r == 1 << 60:
                break
            first = [i for rr, i in pairs if rr == r][0]
            a, b = word[first], word[first + 1]
            out, i = [], 0
            while i < len(word):  # merge every occurrence, left to right (encoder.py)
                if i < len(word) - 1 and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        return word

    def encode(text):
        ids = []
        for piece in rx.findall(text):
            ids += [vocab[t] for t in bpe("".join(b2u[b] for b in piece.encode("utf-8")))]
        return ids

    texts = ["a \u180eb"] + texts
    inp = "".join(t.encode("utf-8").hex() + "\n" for t in texts)
    r = subprocess.run([dump, "--tokenizer", tok_path], input=inp.encode(), capture_output=True,
                       check=True)
    got = r.stdout.decode().split("\n")[1:]  # after the PCRE2 version line
    fails = 0
    for text, line in zip(texts, got):
        want, have = encode(text), [int(x) for x in line.split()]
        if have != want:
            fails += 1
            if fails <= 10:
                print(f"  MISMATCH ids {text!r}: loom {have} encoder.py {want}")
    first = [int(x) for x in got[0].split()]
    if first != [64, 28053, 254, 236, 65]:
        print(f"FAIL: 'a \\u180eb' encodes as {first}, OpenAI's encoder gives 64 28053 254 236 65")
        fails += 1
    print(f"{'FAIL' if fails else 'OK'}: GPT-2 ids of {len(texts)} texts, {fails} differ from "
          f"encoder.py's")
    return fails


sys.exit(main())
