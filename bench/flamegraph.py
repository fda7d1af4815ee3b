#!/usr/bin/env python3
"""Flame graphs from `perf script` output, one per process name.

Reads the text `perf script` prints for a `perf record -g` profile, keeps the
samples of each process name asked for (--comm, the kernel's 15-character
`comm`: `datasystem_work` for the worker, `redis-server` for Redis), and
writes for each:

  NAME.folded  one line per distinct stack, root first, frames joined by ';',
               then the sample count (the "folded" format other flame-graph
               tools read);
  NAME.svg     the flame graph: a box per frame (kernel orange, this project's
               blue, the rest red), as wide as its share of the
               samples, its callees stacked above it; hover for the counts;

and prints each process's functions with the most samples of their own
(self) and the share of samples in the kernel. Used by scripts/profile.sh.

  flamegraph.py PERF_SCRIPT_TXT --out-dir DIR --comm NAME [--comm NAME ...]
"""
import argparse
import html
import os
import re
import sys
from collections import Counter

HEADER = re.compile(r"^(\S.*?)\s+(\d+)(?:/\d+)?\s+(?:\[\d+\]\s+)?[\d.]+:")
FRAME = re.compile(r"^\s+[0-9a-f]+\s+(.+?)\s+\((.*)\)$")


def frame_name(sym, dso):
    """A frame's label: its symbol without the offset, else its object."""
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    if sym == "[unknown]":
        return "[%s]" % os.path.basename(dso) if dso and dso != "[unknown]" else "[unknown]"
    return sym


def read_samples(path, comms):
    """Folded stacks (root first) per comm, as Counters, and per comm the
    samples taken in the kernel (their leaf frame is the kernel's)."""
    stacks = {c: Counter() for c in comms}
    in_kernel = Counter()
    kinds = {}  # frame label -> "kernel", "ours" (this project's binaries) or "other"
    comm, frames, kernel_leaf = None, [], False

    def flush():
        if comm in stacks and frames:
            stacks[comm][";".join(reversed(frames))] += 1
            in_kernel[comm] += kernel_leaf

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                flush()
                comm, frames = None, []
                continue
            m = HEADER.match(line)
            if m and not line[0].isspace():
                flush()
                comm, frames = m.group(1), []
                continue
            m = FRAME.match(line)
            if m and comm is not None:
                dso = m.group(2)
                if not frames:
                    kernel_leaf = dso.startswith("[kernel")
                name = frame_name(m.group(1), dso)
                kinds.setdefault(name, "kernel" if dso.startswith("[kernel") else
                                 "ours" if "datasystem" in os.path.basename(dso) else "other")
                frames.append(name)
    flush()
    return stacks, in_kernel, kinds


def build_tree(folded):
    root = {"name": "all", "value": 0, "children": {}}
    for stack, n in folded.items():
        root["value"] += n
        node = root
        for fr in stack.split(";"):
            node = node["children"].setdefault(fr, {"name": fr, "value": 0, "children": {}})
            node["value"] += n
    return root


def color(kind, name):
    """Kernel frames orange, this project's blue, the rest red: shades from a
    stable hash of the name."""
    h = sum(ord(c) for c in name) % 60
    if kind == "ours":
        return "rgb(%d,%d,%d)" % (80 + h, 160 + h, 190)
    if kind == "kernel":
        return "rgb(%d,%d,%d)" % (230, 140 + h, 60)
    return "rgb(%d,%d,%d)" % (220, 80 + h * 2, 50)


def write_svg(tree, kinds, title, path, width=1200, row=16):
    total = tree["value"] or 1
    boxes = []

    def depth(node):
        return 1 + max((depth(c) for c in node["children"].values()), default=0)

    levels = depth(tree)
    height = (levels + 3) * row

    def walk(node, x, level):
        w = node["value"] / total * (width - 20)
        if w >= 0.5:
            boxes.append((x, level, w, node))
        cx = x
        for c in sorted(node["children"].values(), key=lambda c: c["name"]):
            walk(c, cx, level + 1)
            cx += c["value"] / total * (width - 20)

    walk(tree, 10.0, 0)
    out = [
        '<?xml version="1.0" standalone="no"?>',
        '<svg version="1.1" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" '
        'font-family="Verdana" font-size="11">' % (width, height),
        '<rect x="0" y="0" width="%d" height="%d" fill="rgb(248,248,248)"/>' % (width, height),
        '<text x="%d" y="%d" text-anchor="middle" font-size="14">%s</text>'
        % (width // 2, row, html.escape(title)),
    ]
    for x, level, w, node in boxes:
        y = height - (level + 2) * row
        pct = 100.0 * node["value"] / total
        label = node["name"]
        chars = int((w - 4) / 7)
        text = label if len(label) <= chars else (label[: chars - 2] + ".." if chars > 3 else "")
        out.append(
            '<g><title>%s (%d samples, %.2f%%)</title><rect x="%.1f" y="%d" width="%.1f" '
            'height="%d" fill="%s" rx="2"/><text x="%.1f" y="%d">%s</text></g>'
            % (html.escape(label), node["value"], pct, x, y, w, row - 1,
               color(kinds.get(label, "other"), label), x + 3,
               y + row - 4, html.escape(text)))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def self_counts(folded):
    c = Counter()
    for stack, n in folded.items():
        c[stack.rsplit(";", 1)[-1]] += n
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("perf_script")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--comm", action="append", required=True)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    stacks, in_kernel, kinds = read_samples(a.perf_script, a.comm)
    for comm in a.comm:
        folded = stacks[comm]
        total = sum(folded.values())
        if total == 0:
            print("flamegraph.py: no samples of %s" % comm, file=sys.stderr)
            continue
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", comm)
        with open(os.path.join(a.out_dir, safe + ".folded"), "w") as f:
            for stack, n in sorted(folded.items()):
                f.write("%s %d\n" % (stack, n))
        write_svg(build_tree(folded), kinds, "%s: %d samples" % (comm, total),
                  os.path.join(a.out_dir, safe + ".svg"))
        selfc = self_counts(folded)
        print("%s: %d samples, %.1f%% of them in the kernel; most self time:"
              % (comm, total, 100.0 * in_kernel[comm] / total))
        for name, n in selfc.most_common(a.top):
            print("  %6.2f%%  %s" % (100.0 * n / total, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
