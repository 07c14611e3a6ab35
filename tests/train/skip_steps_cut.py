#!/usr/bin/env python3
"""Token shards for tests/train/skip_steps_test.sh: the data of a run with training.skip_steps,
and the same data cut so that it lacks exactly the batches of the skipped steps.

  skip_steps_cut.py base IN.bin OUT.bin T        a shard whose every window (T+1 tokens from
                                                 a multiple of T) starts with token 0
  skip_steps_cut.py cut IN.bin OUT.bin T G SEED STEPS
                                                 OUT.bin: IN.bin's windows in the order the
                                                 loader reads them, without those of STEPS
                                                 ("3-4,7"; G windows a step), laid out so the
                                                 loader's shuffle of OUT.bin (same SEED) reads
                                                 the rest in the same order

The loader (include/loom/loader.h) reads window w = tokens [w*T, w*T+T] in a Fisher-Yates
order of the W = (N-1)//T windows seeded by seed ^ (0x9E3779B97F4A7C15 * (epoch+1)) with
xoshiro256** (src/core/rng.c), a step taking the next G positions. Windows share their edge
token, so they can be rearranged only when every window starts with the same token: `base`
makes that so, and `cut` then places the kept windows where the new shuffle looks for them."""
import struct
import sys

M64 = (1 << 64) - 1


class Rng:
    """loom_rng: splitmix64 seeding, xoshiro256**, loom_rng_below."""

    def __init__(self, seed):
        x, self.s = seed & M64, []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    def u64(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & M64
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        if n <= 1:
            return 0
        limit = M64 - (M64 % n)
        while True:
            x = self.u64()
            if x < limit:
                return x % n


def order(windows, seed, epoch=0):
    o = list(range(windows))
    rng = Rng(seed ^ ((0x9E3779B97F4A7C15 * (epoch + 1)) & M64))
    for i in range(windows - 1, 0, -1):
        j = rng.below(i + 1)
        o[i], o[j] = o[j], o[i]
    return o


def read_shard(path):
    data = open(path, "rb").read()
    assert data[:8] == b"LOOMTOK1"
    version, dtype, count, vocab = struct.unpack_from("<IIQI", data, 8)
    fmt = "<%d%s" % (count, "H" if dtype == 1 else "I")
    return list(struct.unpack_from(fmt, data, 64)), vocab


def write_shard(path, tokens, vocab):
    head = b"LOOMTOK1" + struct.pack("<IIQII", 1, 1, len(tokens), vocab, 0) + bytes(32)
    with open(path, "wb") as f:
        f.write(head + struct.pack("<%dH" % len(tokens), *tokens))


def steps_of(text):
    out = set()
    for item in text.split(","):
        a, _, b = item.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def main():
    mode, src, dst, T = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    tokens, vocab = read_shard(src)
    W = (len(tokens) - 1) // T
    if mode == "base":
        tokens = tokens[: W * T + 1]
        for w in range(W + 1):
            tokens[w * T] = 0
        write_shard(dst, tokens, vocab)
        return
    G, seed, skip = int(sys.argv[5]), int(sys.argv[6]), steps_of(sys.argv[7])
    read = order(W, seed)
    kept = [w for pos, w in enumerate(read) if pos // G + 1 not in skip]
    new_order = order(len(kept), seed)
    out = [0] * (len(kept) * T + 1)
    for i, w in enumerate(kept):  # the i-th window read is placed where the shuffle reads it
        slot = new_order[i]
        out[slot * T : slot * T + T] = tokens[w * T : w * T + T]
    write_shard(dst, out, vocab)


if __name__ == "__main__":
    main()
