#!/usr/bin/python3
"""Regenerates the worker-flag lists in docs/ from the worker's own --help.

The flag table is data in src/config/flags.c and `datasystem_worker
--help` prints it; this script turns that output into Markdown and writes it
between markers, so the documentation lists exactly what the binary accepts:

    docs/operations.md      <!-- flags:begin --> ... <!-- flags:end -->
                            every flag with an effect, its default and help
    docs/compatibility.md   <!-- compat-flags:begin --> ... <!-- compat-flags:end -->
                            Yuanrong's flags accepted with no effect

    python3 scripts/docs_flags.py [--worker build/src/worker/datasystem_worker] [--check]

--check exits 1 (and changes nothing) when a file is not current. Standard
library only.
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_help(text):
    flags, compat, in_compat = [], [], False
    for line in text.splitlines():
        if line.startswith("Accepted for compatibility"):
            in_compat = True
            continue
        if in_compat:
            compat += [t[2:] for t in line.split() if t.startswith("--")]
            continue
        m = re.match(r"^  --(\S+)\s+(.*) \(default: (.*)\)$", line)
        if m:
            flags.append((m.group(1), m.group(2), m.group(3)))
    return flags, compat


def flags_md(flags):
    out = ["| flag | default | what |", "|---|---|---|"]
    for name, help_, default in flags:
        default = "" if default == '""' else default
        out.append("| `--%s` | %s | %s |" % (name, "`%s`" % default if default else "(empty)",
                                            help_.replace("|", "\\|")))
    return "\n".join(out)


def compat_md(compat):
    return ", ".join("`%s`" % c for c in compat) + "."


def splice(path, tag, body, check):
    with open(path) as f:
        s = f.read()
    begin, end = "<!-- %s:begin -->" % tag, "<!-- %s:end -->" % tag
    a, b = s.find(begin), s.find(end)
    if a < 0 or b < a:
        sys.exit("docs_flags: %s has no %s ... %s markers" % (path, begin, end))
    new = s[:a + len(begin)] + "\n" + body + "\n" + s[b:]
    if new == s:
        return True
    if check:
        print("docs_flags: %s is not current; run python3 scripts/docs_flags.py" % path)
        return False
    with open(path, "w") as f:
        f.write(new)
    print("docs_flags: rewrote", path)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", default=os.path.join(ROOT, "build/src/worker/datasystem_worker"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    try:
        text = subprocess.run([args.worker, "--help"], capture_output=True, text=True,
                              timeout=30).stdout
    except OSError as e:
        sys.exit("docs_flags: cannot run %s: %s (build it: bash scripts/build.sh release)" %
                 (args.worker, e))
    # The usage line names the binary as it was called; the lists do not.
    flags, compat = parse_help(text)
    if not flags:
        sys.exit("docs_flags: no flags in the output of %s --help" % args.worker)
    ok = splice(os.path.join(ROOT, "docs/operations.md"), "flags", flags_md(flags), args.check)
    ok &= splice(os.path.join(ROOT, "docs/compatibility.md"), "compat-flags", compat_md(compat),
                 args.check)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
