#!/usr/bin/env python3
"""Checks loom's vision-language preprocessing against independent Python
reimplementations of Qwen2-VL's Hugging Face code paths:

  * JPEG decode: PIL (libjpeg) vs loom (libjpeg-turbo): identical pixels.
  * smart_resize: Qwen's function in Python (round half to even, floor/ceil by 28).
  * resize: PIL Image.resize(BICUBIC), as Qwen2VLImageProcessor does: identical uint8.
  * normalise + patchify: numpy version of Qwen2VLImageProcessor._preprocess (rescale,
    CLIP normalise, repeat for temporal_patch_size 2, reshape(t, 2, c, gh/2, 2, 14, gw/2, 2,
    14).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)): max |diff| <= 1e-6.
  * M-RoPE position ids and deltas of a loader batch: torch version of Qwen2-VL's
    get_rope_index (images, spatial_merge_size 2, attention mask): identical.
  * the batch's pixel_values: the Python pipeline on the same files, concatenated in row order.

usage: vqa_check.py LOOM VQA_DUMP WORKDIR
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
from PIL import Image

FAILED = []
PASSED = [0]


def check(cond, what):
    if cond:
        PASSED[0] += 1
    else:
        FAILED.append(what)
        print("FAIL:", what, file=sys.stderr)


def load(manifest, name):
    m = manifest[name]
    dt = {"u8": np.uint8, "i32": np.int32, "f32": np.float32}[m["dtype"]]
    return np.fromfile(m["file"], dtype=dt).reshape(m["shape"])


# ---- Qwen2-VL image processor, reimplemented -------------------------------------------
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


def smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280):
    if max(height, width) / min(height, width) > 200:
        raise ValueError("aspect ratio")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def preprocess(pil, min_pixels, max_pixels, patch=14, tps=2, merge=2):
    """(flatten_patches, (t, gh, gw), resized uint8) like Qwen2VLImageProcessor._preprocess."""
    pil = pil.convert("RGB")
    h, w = pil.height, pil.width
    rh, rw = smart_resize(h, w, patch * merge, min_pixels, max_pixels)
    resized = pil.resize((rw, rh), resample=Image.BICUBIC) if (rh, rw) != (h, w) else pil.copy()
    arr = np.array(resized)
    x = (arr.astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - MEAN) / STD
    x = x.transpose(2, 0, 1)  # channels first
    patches = np.array([x])
    if patches.shape[0] == 1:
        patches = np.tile(patches, (tps, 1, 1, 1))
    c = patches.shape[1]
    gt, gh, gw = patches.shape[0] // tps, rh // patch, rw // patch
    p = patches.reshape(gt, tps, c, gh // merge, merge, patch, gw // merge, merge, patch)
    p = p.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return p.reshape(gt * gh * gw, c * tps * patch * patch), (gt, gh, gw), arr


# ---- Qwen2-VL get_rope_index (images only), reimplemented ------------------------------
def get_rope_index(input_ids, attention_mask, image_grid_thw, image_token_id, vision_start_id,
                   spatial_merge_size=2):
    position_ids = torch.ones(3, input_ids.shape[0], input_ids.shape[1], dtype=input_ids.dtype)
    deltas = []
    image_index = 0
    for i, ids in enumerate(input_ids):
        ids = ids[attention_mask[i] == 1]
        vs = torch.argwhere(ids == vision_start_id).squeeze(1)
        image_nums = (ids[vs + 1] == image_token_id).sum() if len(vs) else 0
        tokens = ids.tolist()
        pos_list = []
        st = 0
        for _ in range(int(image_nums)):
            ed = tokens.index(image_token_id, st)
            t, h, w = image_grid_thw[image_index].tolist()
            image_index += 1
            gt, gh, gw = t, h // spatial_merge_size, w // spatial_merge_size
            text_len = ed - st
            st_idx = pos_list[-1].max() + 1 if pos_list else 0
            pos_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
            t_index = torch.arange(gt).view(-1, 1).expand(-1, gh * gw).flatten()
            h_index = torch.arange(gh).view(1, -1, 1).expand(gt, -1, gw).flatten()
            w_index = torch.arange(gw).view(1, 1, -1).expand(gt, gh, -1).flatten()
            pos_list.append(torch.stack([t_index, h_index, w_index]) + text_len + st_idx)
            st = ed + gt * gh * gw
        if st < len(tokens):
            st_idx = pos_list[-1].max() + 1 if pos_list else 0
            pos_list.append(torch.arange(len(tokens) - st).view(1, -1).expand(3, -1) + st_idx)
        pos = torch.cat(pos_list, dim=1).reshape(3, -1)
        position_ids[..., i, attention_mask[i] == 1] = pos.to(position_ids.dtype)
        deltas.append(int(pos.max()) + 1 - len(tokens))
    return position_ids, torch.tensor(deltas)


def main():
    loom, dump_bin, work = sys.argv[1:4]
    synth = os.path.join(work, "synth")
    out = os.path.join(work, "dump")
    subprocess.run([loom, "data", "synth-vqa", "--out", synth, "--samples", "40",
                    "--shard-size", "10", "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([dump_bin, out, synth], check=True)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)

    for tag in ["up", "down", "same", "round"]:
        info = m[tag]
        pil = Image.open(os.path.join(out, tag + ".jpg"))
        pil.load()
        dec = load(m, tag + "_decoded")
        check(np.array_equal(np.array(pil.convert("RGB")), dec),
              f"{tag}: loom's JPEG decode equals PIL's")
        rh, rw = smart_resize(info["h"], info["w"], 28, info["min_pixels"], info["max_pixels"])
        check((rh, rw) == (info["rh"], info["rw"]),
              f"{tag}: smart_resize {info['w']}x{info['h']} -> {rw}x{rh} (loom {info['rw']}x{info['rh']})")
        flat, grid, resized = preprocess(pil, info["min_pixels"], info["max_pixels"])
        mine = load(m, tag + "_resized")
        diff = np.abs(mine.astype(int) - resized.astype(int))
        check(diff.max() == 0, f"{tag}: bicubic resize equals PIL's (max diff {diff.max()}, "
              f"{int((diff > 0).sum())} values differ)")
        pat = load(m, tag + "_patches")
        check(pat.shape == flat.shape, f"{tag}: patch shape {pat.shape} vs {flat.shape}")
        if pat.shape == flat.shape:
            # normalisation of loom's own resized pixels isolates patch order from resize
            flat_own = preprocess(Image.fromarray(mine), 0, 1 << 40)[0]
            err = float(np.abs(pat - flat_own).max())
            check(err <= 1e-6, f"{tag}: patch order and normalisation (max |diff| {err:.3g})")
            err2 = float(np.abs(pat - flat).max())
            check(err2 <= 1e-6, f"{tag}: full pipeline vs Python (max |diff| {err2:.3g})")

    # M-RoPE ids and pixel values of a loader batch
    b = m["batch"]
    ids = torch.from_numpy(load(m, "input_ids").astype(np.int64))
    mask = torch.from_numpy(load(m, "attention_mask").astype(np.int64))
    grid = torch.from_numpy(load(m, "grid_thw").astype(np.int64))
    pos = load(m, "position_ids")
    want, deltas = get_rope_index(ids, mask, grid, b["image_pad"], b["vision_start"])
    check(np.array_equal(pos, want.numpy()),
          f"position_ids equal get_rope_index's ({int((pos != want.numpy()).sum())} differ)")
    check(np.array_equal(load(m, "rope_deltas"), deltas.numpy()),
          f"rope deltas {load(m, 'rope_deltas').tolist()} vs {deltas.tolist()}")
    pads = [(ids[i] == b["image_pad"]).sum().item() for i in range(ids.shape[0])]
    rows = load(m, "image_row")
    per_row = [sum(int(g[0] * g[1] * g[2]) // 4 for g, r in zip(grid.tolist(), rows) if r == i)
               for i in range(ids.shape[0])]
    check(pads == per_row, f"image pads per row {pads} == merged tokens of its images {per_row}")
    files = [["a.jpg", "b.jpg"], ["c.jpg"], []]  # entries 0, 1, 2 of anno.json
    expect = []
    grids = []
    for key in b["keys"]:
        for f in files[int(key.split("#")[1])]:
            flat, g, _ = preprocess(Image.open(os.path.join(out, "img", f)), 3136, 1003520)
            expect.append(flat)
            grids.append(list(g))
    px = load(m, "pixel_values")
    ref = np.concatenate(expect) if expect else np.zeros((0, 1176), np.float32)
    check(px.shape == ref.shape and float(np.abs(px - ref).max()) <= 1e-6,
          f"batch pixel_values ({px.shape}) equal the Python pipeline ({ref.shape})")
    check(grid.tolist() == grids, f"grid_thw {grid.tolist()} == {grids}")

    # LLaVA-style batches: every image resized to 112x112 (PIL bicubic), CLIP-normalised,
    # cut into 14 px patches row-major, each (channel, row, column) of one frame; one image
    # token per patch; 1D positions
    ids = load(m, "llava_input_ids")
    mask = load(m, "llava_attention_mask")
    grid = load(m, "llava_grid_thw")
    rows = load(m, "llava_image_row")
    expect = []
    for key in m["llava_keys"]:
        for f in files[int(key.split("#")[1])]:
            pil = Image.open(os.path.join(out, "img", f)).convert("RGB").resize((112, 112), Image.BICUBIC)
            x = np.asarray(pil, dtype=np.float64) * (1.0 / 255.0)
            x = ((x.astype(np.float32) - np.array(MEAN, np.float32)) / np.array(STD, np.float32))
            x = x.reshape(8, 14, 8, 14, 3).transpose(0, 2, 4, 1, 3).reshape(64, 3 * 14 * 14)
            expect.append(x)
    px = load(m, "llava_pixel_values")
    ref = np.concatenate(expect) if expect else np.zeros((0, 588), np.float32)
    check(px.shape == ref.shape and float(np.abs(px - ref).max()) <= 1e-6,
          f"LLaVA pixel_values ({px.shape}) equal the Python pipeline ({ref.shape})")
    check(grid.tolist() == [[1, 8, 8]] * len(expect), f"LLaVA grid_thw {grid.tolist()}")
    pads = [int((ids[i] == b["image_pad"]).sum()) for i in range(ids.shape[0])]
    per_row = [64 * int((rows == i).sum()) for i in range(ids.shape[0])]
    check(pads == per_row, f"LLaVA image pads per row {pads} == 64 per image {per_row}")
    pos = load(m, "llava_position_ids")
    want = np.where(mask == 1, np.arange(ids.shape[1])[None, :], 1)
    check(all(np.array_equal(pos[k], want) for k in range(3)), "LLaVA positions are 1D")

    print(f"vqa_check: {PASSED[0]} passed, {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
