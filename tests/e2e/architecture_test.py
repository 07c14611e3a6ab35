#!/usr/bin/env python3
"""The map in docs/ARCHITECTURE.md against the tree, so that neither can drift:

1. every folder of src/ and every header of include/loom/ is named in the modules table, each
   header by exactly one folder's row;
2. every folder appears once in the "Layers" diagram, which orders them from the top (cli)
   to the bottom (core);
3. no source file includes the public header of a folder above its own (the layer rule), and
   no header private to a folder (src/<folder>/*.h) is included from another folder;
4. no file under src/, include/, tests/ or docs/ mentions the old src/exp or LOOM_EXP_ names.

usage: architecture_test.py SOURCE_DIR
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
doc = open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


folders = sorted(d for d in os.listdir(os.path.join(root, "src"))
                 if os.path.isdir(os.path.join(root, "src", d)))
headers = sorted(h for h in os.listdir(os.path.join(root, "include", "loom")) if h.endswith(".h"))

# 1. the modules table: | `src/X/` | job | headers |
owner = {}
rows = re.findall(r"^\| `src/([a-z_]+)/` \|(.*)\|(.*)\|\s*$", doc, re.M)
named = set()
for folder, _job, hdrs in rows:
    named.add(folder)
    for h in re.findall(r"`([a-z_0-9]+\.h)`", hdrs):
        if h in owner and owner[h] != folder:
            fail(f"{h} is listed by both src/{owner[h]}/ and src/{folder}/")
        owner[h] = folder
for f in folders:
    if f not in named:
        fail(f"src/{f}/ has no row in the modules table of docs/ARCHITECTURE.md")
for h in headers:
    if h not in owner:
        fail(f"include/loom/{h} is not named in the modules table of docs/ARCHITECTURE.md")
for h in owner:
    if h not in headers and not h.startswith(("commands", "options")):
        fail(f"docs/ARCHITECTURE.md names {h}, which is not in include/loom/")

# 2. the layer diagram: the first ``` block after "## Layers", one folder per line (src/X)
m = re.search(r"## Layers.*?```\n(.*?)```", doc, re.S)
order = re.findall(r"src/([a-z_]+)\s*$", m.group(1), re.M) if m else []
if not order:
    fail("docs/ARCHITECTURE.md has no Layers diagram")
for f in folders:
    if order.count(f) != 1:
        fail(f"src/{f}/ appears {order.count(f)} times in the Layers diagram (want once)")
rank = {f: i for i, f in enumerate(order)}  # 0 = top (cli)

# 3. includes
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
checked = 0
for folder in folders:
    for dirpath, _dirs, files in os.walk(os.path.join(root, "src", folder)):
        for name in files:
            if not name.endswith((".c", ".h", ".inc")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            for h in inc.findall(open(path, encoding="utf-8", errors="replace").read()):
                checked += 1
                if h.startswith("loom/"):
                    o = owner.get(h[5:])
                    if o and o in rank and folder in rank and rank[o] < rank[folder]:
                        fail(f"{rel} includes {h} of src/{o}/, a layer above src/{folder}/")
                elif "/" in h:
                    o = h.split("/")[0]
                    if o in folders and o != folder:
                        fail(f"{rel} includes {h}, a header private to src/{o}/")

# 4. fossils of the old src/exp
fossil = re.compile(r"src/exp\b|LOOM_EXP_")
for top in ("src", "include", "tests", "docs"):
    for dirpath, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = [d for d in dirs if d != "node_modules"]
        for name in files:
            if name.endswith((".c", ".h", ".inc", ".md", ".sh", ".py", ".cmake", ".yaml")):
                path = os.path.join(dirpath, name)
                if os.path.realpath(path) == os.path.realpath(__file__):
                    continue
                text = open(path, encoding="utf-8", errors="replace").read()
                if fossil.search(text):
                    fail(f"{os.path.relpath(path, root)} mentions src/exp or LOOM_EXP_")

print(f"{len(folders)} folders, {len(headers)} headers, {checked} includes checked; "
      f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
