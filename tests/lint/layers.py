#!/usr/bin/env python3
"""The layer check: no undeclared upward include or call in src/.

docs/design.md has the rule and the data, in one place:
  - the layer table (`| layer | files | owns |`): each row is a layer, in
    order; a layer may use itself and the rows above it.  Every file of
    src/ is linked from its row (one missing fails the check, so the table
    stays the map of the tree); the folder (src/<layer>/...) places a file
    for the other checks meanwhile.
  - the declared exceptions table (`| from | to | what | why |`): `from`
    is a file (src/...), a layer or * (any layer), `to` a layer, `what` the symbols
    (`weft__poller_*`: a trailing * matches any rest) or headers
    (`src/hook/real.h`) that may be used upward.

Checked here:
  - every `#include "..."` in src/ that names a file of another layer;
  - every weft_* / weft__* symbol an object file of libweft (the build's
    weft_obj objects, read with nm) uses and another object defines: the
    calls, and the variables read, between layers.

Exit 0 when every upward arrow is declared; 1, with one line per arrow
naming the file, the symbol or header and the two layers, when one is not;
2 on a usage error (no objects: build first).  --list prints every
cross-layer arrow it sees, upward or not.
"""
import argparse
import fnmatch
import os
import re
import subprocess
import sys


def parse_design(path):
    layers, files, exceptions = [], {}, []
    mode = None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line.startswith("|"):
            mode = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        head = [c.lower() for c in cells]
        if head[:3] == ["layer", "files", "owns"]:
            mode = "layers"
            continue
        if head[:3] == ["from", "to", "what"]:
            mode = "exceptions"
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue  # the separator row
        if mode == "layers":
            m = re.match(r"\[([^\]]+)\]", cells[0])
            name = m.group(1) if m else cells[0]
            layers.append(name)
            for target in re.findall(r"\]\(\.\./(src/[^)#]+)\)", cells[1]):
                files[target] = name
        elif mode == "exceptions":
            frm = cells[0].strip("` ")
            to = cells[1].strip("` ")
            what = [w for w in re.findall(r"`([^`]+)`", cells[2])]
            exceptions.append((frm, to, what))
    return layers, files, exceptions


class Layers:
    def __init__(self, design):
        self.order, self.files, self.exceptions = parse_design(design)
        if not self.order:
            sys.exit("layers.py: no layer table in " + design)
        self.rank = {name: i for i, name in enumerate(self.order)}
        for frm, to, what in self.exceptions:
            for layer in [to] + ([] if frm.startswith("src/") or frm == "*" else [frm]):
                if layer not in self.rank:
                    sys.exit("layers.py: the declared exception %s -> %s names no layer %r" % (frm, to, layer))

    def of(self, rel):
        if rel in self.files:
            return self.files[rel]
        parts = rel.split("/")
        if len(parts) >= 3 and parts[1] in self.rank:
            return parts[1]
        return None

    def declared(self, frm_file, frm_layer, to_layer, what):
        for frm, to, names in self.exceptions:
            if to != to_layer or frm not in (frm_file, frm_layer, "*"):
                continue
            for n in names:
                if n == what or (n.endswith("*") and what.startswith(n[:-1])):
                    return True
        return False


def sources(src_root):
    for dirpath, _, names in os.walk(os.path.join(src_root, "src")):
        for n in sorted(names):
            if n.endswith((".c", ".h", ".S")):
                yield os.path.relpath(os.path.join(dirpath, n), src_root)


def check_includes(root, lay, out, listing):
    bad = 0
    for rel in sources(root):
        here = lay.of(rel)
        if here is None:
            out.append("%s: in no layer (docs/design.md's layer table, or a folder named as a layer)" % rel)
            bad += 1
            continue
        if rel not in lay.files:
            out.append("%s: not named in docs/design.md's layer table (add it to the %s row)" % (rel, here))
            bad += 1
        for num, line in enumerate(open(os.path.join(root, rel), encoding="utf-8", errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1)))
            if not target.startswith("src/") or not os.path.exists(os.path.join(root, target)):
                continue  # include/weft/...: the API, every layer's
            there = lay.of(target)
            if there is None or there == here:
                continue
            up = lay.rank[there] > lay.rank[here]
            if listing:
                print("include %-28s %-8s -> %-8s %s%s" % (rel, here, there, target, "  UP" if up else ""))
            if up and not lay.declared(rel, here, there, target):
                out.append('%s:%d: #include "%s": %s includes %s, a layer above it (undeclared)'
                           % (rel, num, m.group(1), here, there))
                bad += 1
    return bad


def nm_symbols(nm, obj):
    r = subprocess.run([nm, "-P", obj], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("layers.py: %s %s: %s" % (nm, obj, r.stderr.strip()))
    defined, used = set(), set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].startswith("weft_"):
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind.isupper():  # a global definition (T, D, B, R, V, W ...)
            defined.add(name)
    return defined, used


def check_symbols(root, objdir, nm, lay, out, listing):
    objs = []
    for dirpath, _, names in os.walk(objdir):
        for n in names:
            if n.endswith(".o"):
                full = os.path.join(dirpath, n)
                rel = os.path.relpath(full, objdir)[: -len(".o")]  # src/sched/sched.c
                if not os.path.exists(os.path.join(root, rel)):
                    continue  # a stale object: its source moved or went (an old build tree)
                objs.append((rel, full))
    if not objs:
        print("layers.py: no object files under %s (build weft_obj first)" % objdir, file=sys.stderr)
        sys.exit(2)
    owner, uses = {}, {}
    for rel, full in sorted(objs):
        defined, used = nm_symbols(nm, full)
        for s in defined:
            owner[s] = rel
        uses[rel] = used
    bad = 0
    for rel in sorted(uses):
        here = lay.of(rel)
        if here is None:
            out.append("%s: in no layer (docs/design.md's layer table, or a folder named as a layer)" % rel)
            bad += 1
            continue
        for s in sorted(uses[rel]):
            if s not in owner:
                continue  # not libweft's (a test's, the hook preload's)
            there = lay.of(owner[s])
            if there is None or there == here:
                continue
            up = lay.rank[there] > lay.rank[here]
            if listing:
                print("call    %-28s %-8s -> %-8s %s (%s)%s" % (rel, here, there, s, owner[s], "  UP" if up else ""))
            if up and not lay.declared(rel, here, there, s):
                out.append("%s: uses %s (defined in %s): %s calls up into %s (undeclared)"
                           % (rel, s, owner[s], here, there))
                bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="the source tree's root")
    ap.add_argument("--objs", required=True, help="the weft_obj objects (build/CMakeFiles/weft_obj.dir)")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--design", help="default: SRC/docs/design.md")
    ap.add_argument("--list", action="store_true", help="print every cross-layer arrow")
    a = ap.parse_args()
    lay = Layers(a.design or os.path.join(a.src, "docs", "design.md"))
    out = []
    bad = check_includes(a.src, lay, out, a.list) + check_symbols(a.src, a.objs, a.nm, lay, out, a.list)
    for line in out:
        print(line)
    if bad:
        print("layers: %d undeclared upward arrow(s) or unlisted file(s); the layers, in order: %s.  Move the code, or declare the"
              " arrow in docs/design.md's table of declared exceptions, saying why." % (bad, ", ".join(lay.order)))
        return 1
    print("layers: no undeclared upward include or call (%s)" % ", ".join(lay.order))
    return 0


if __name__ == "__main__":
    sys.exit(main())
