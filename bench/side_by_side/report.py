#!/usr/bin/python3
"""Writes docs/performance.md from the results of one side-by-side run.

Reads the JSON the harness (bench/side_by_side/sbs) wrote and the machine
description recorded next to it (machine.json, written by --capture-machine
right after the run), and lays out the targets, the plot, the tables and the
method, then the other benches' results found in the same folder. Every
figure comes from the results folder; only the explanations are fixed text,
and the ones for missed targets quote the run's own numbers. With --readme
it also rewrites the README's performance paragraph (between the markers
<!-- perf:begin --> and <!-- perf:end -->). Standard library only.

    report.py --capture-machine bench/results/machine.json --load-before "1.0 0.9 0.8"
    report.py --json bench/results/side_by_side.json --plot ../bench/results/side_by_side.svg
              --out docs/performance.md [--readme README.md]
"""

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys

KIB = 1024
MIB = 1024 * 1024

SYSTEM_NAMES = {
    "ds-local": "this project, local (shared memory)",
    "ds-remote": "this project, remote (TCP)",
    "redis-unix": "Redis 7, Unix socket",
    "redis-tcp": "Redis 7, TCP",
    "vllm-omni-shm": "vLLM-Omni SharedMemoryConnector path",
    "connector-serializer": "YuanrongConnector, serializer path",
    "connector-raw": "YuanrongConnector, raw path",
    "connector-python": "YuanrongConnector in Python, one-copy path",
    "limit": "machine limit",
}


def human(size):
    if size >= MIB and size % MIB == 0:
        return "%d MiB" % (size // MIB)
    if size >= KIB and size % KIB == 0:
        return "%d KiB" % (size // KIB)
    return "%d B" % size


def num(v, fmt="%.1f"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return fmt % v


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.rstrip()
    except (OSError, subprocess.SubprocessError):
        return ""


def capture_machine(load_before):
    """The machine as it is now, right after a run: what machine() prints."""
    model, mhz = "", ""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k, v = k.strip(), v.strip()
                if k == "model name" and not model:
                    model = v
                elif k == "cpu MHz" and not mhz:
                    mhz = v
                elif k == "flags" and not flags:
                    flags = set(v.split())
    except OSError:
        pass
    try:
        with open("/proc/loadavg") as f:
            load_after = " ".join(f.read().split()[:3])
    except OSError:
        load_after = ""
    return {
        "cpu_model": model, "cpu_mhz": mhz, "nproc": run(["nproc"]),
        "hypervisor": "hypervisor" in flags,
        "kernel": "%s %s" % (platform.system(), platform.release()),
        "load_before": load_before, "load_after": load_after,
        "redis": run(["redis-server", "--version"]).split(" sha=")[0],
        "hiredis": run(["pkg-config", "--modversion", "hiredis"]),
        "python": platform.python_version(),
        "numpy": run(["/usr/bin/python3", "-c", "import numpy; print(numpy.__version__)"]),
        "free_h": run(["free", "-h"]),
    }


def machine(m):
    """The machine section, from the description recorded with the run."""
    if not m:
        return ("Not recorded with this run (no machine.json next to the results); run "
                "`scripts/bench.sh` to record it.")
    lines = [
        "- CPU: %s%s, `nproc` = %s%s" % (
            m.get("cpu_model") or "unknown",
            (" at %s MHz" % m["cpu_mhz"]) if m.get("cpu_mhz") else "", m.get("nproc") or "?",
            ", running under a hypervisor" if m.get("hypervisor") else ""),
        "- Kernel: %s" % (m.get("kernel") or "?"),
        "- Load average (1, 5, 15 min): %s before the run, %s after; where the machine is "
        "shared with other work, absolute numbers are noisy and the ratios, taken within one "
        "run, are what to read" % (m.get("load_before") or "?", m.get("load_after") or "?"),
        "- Redis: %s; hiredis %s; Python %s with numpy %s" % (
            m.get("redis") or "?", m.get("hiredis") or "?", m.get("python") or "?",
            m.get("numpy") or "?"),
    ]
    if m.get("free_h"):
        lines += ["", "`free -h` at the end of the run:", "", "```", m["free_h"], "```"]
    return "\n".join(lines)


def find(rows, system, op, size, clients=1):
    for r in rows:
        if (r["system"], r["operation"], r["size"], r["clients"]) == (system, op, size, clients):
            return r
    return None


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def single_tables(d):
    """One table per value size, systems in a fixed order."""
    order = ["ds-local", "connector-raw", "connector-serializer", "connector-python", "ds-remote",
             "redis-unix", "redis-tcp", "vllm-omni-shm"]
    rows = [r for r in d["rows"] if r["clients"] == 1 and r["system"] != "limit"
            and not r["operation"].startswith(("resident", "1KiB", "concurrent"))]
    out = []
    for size in sorted({r["size"] for r in rows}):
        body = []
        for sysname in order:
            for r in rows:
                if r["size"] == size and r["system"] == sysname:
                    body.append([SYSTEM_NAMES.get(r["system"], r["system"]), r["operation"],
                                 num(r["p50_us"]), num(r["p99_us"]), num(r["gbps"], "%.3f"),
                                 num(r["ratio_to_limit"], "%.2f"),
                                 num(r["ratio_to_redis"], "%.2f"), r["note"]])
        out.append("### %s\n\n" % human(size) + table(
            ["system", "operation", "p50 us", "p99 us", "GB/s", "x limit", "x Redis", "note"],
            body))
    return "\n\n".join(out)


def limits_table(d):
    lim = d["limits"]
    out = [[human(b["size"]), num(b["memcpy_gbps"], "%.2f"), num(b.get("movsb_gbps") or None, "%.2f"),
            num(b.get("copy2_gbps") or None, "%.2f"), num(b["tcp_stream_gbps"], "%.2f")]
           for b in lim["by_size"]]
    return table(["size", "memcpy GB/s (glibc, one thread, warm)", "rep movsb GB/s (same copy)",
                  "memcpy GB/s, two threads (half each)", "loopback TCP stream GB/s"], out)


def scale_table(d):
    rows = [r for r in d["rows"] if r["operation"] == "concurrent set+get"]
    out = []
    for r in rows:
        out.append([SYSTEM_NAMES.get(r["system"], r["system"]), human(r["size"]), r["clients"],
                    num(r["ops_per_s"], "%.0f"), num(r["gbps"], "%.3f"), num(r["p50_us"]),
                    num(r["p99_us"]), num(r["ratio_to_redis"], "%.2f")])
    return table(["system", "size", "clients", "ops/s (set and get)", "GB/s (pairs)",
                  "pair p50 us", "pair p99 us", "x Redis (rate)"], out)


def resident_table(d):
    rows = [r for r in d["rows"] if r["operation"].startswith("resident")]
    out = []
    for r in rows:
        if r["operation"] == "resident memory":
            out.append([SYSTEM_NAMES.get(r["system"], r["system"]), r["operation"],
                        "%s B/key beyond key and value" % num(r["bytes_per_key"]), "", "",
                        num(r["ratio_to_redis"], "%.2f"), r["note"]])
        else:
            out.append([SYSTEM_NAMES.get(r["system"], r["system"]), r["operation"],
                        "%s ops/s" % num(r["ops_per_s"], "%.0f"), num(r["p50_us"]),
                        num(r["p99_us"]), num(r["ratio_to_redis"], "%.2f"), r["note"]])
    return table(["system", "measure", "result", "p50 us", "p99 us", "x Redis", "note"], out)


def hol_table(d):
    rows = [r for r in d["rows"] if r["operation"].startswith("1KiB")
            or r["operation"].startswith("unix_rtt ")]
    out = []
    for r in rows:
        out.append([SYSTEM_NAMES.get(r["system"], r["system"]), r["operation"], num(r["p50_us"]),
                    num(r["p99_us"]), num(r.get("ops_per_s"), "%.0f"), r["note"]])
    return table(["system", "1 KiB operations", "p50 us", "p99 us", "ops/s", "note"], out)


def targets_table(d):
    out = []
    for t in d["targets"]:
        status = ("not measured" if t["measured"] is None
                  else "met" if t["met"] else "**not met**")
        lim = t.get("ratio_to_limit")
        out.append([t["name"], num(t["measured"], "%.3f"), "%s %g" % (t["comparison"], t["target"]),
                    status, num(lim, "%.2f"), t.get("limit") or "-",
                    "yes" if t.get("stable") else "moves with the machine"])
    return table(["target", "measured", "target", "", "ours x machine limit", "limit",
                  "ratio stable"], out)


STABLE = """\
**Which ratios are stable.** A ratio to the machine's own limit (the fastest of glibc's memcpy,
`rep movsb` and a memcpy by two threads for a copy of the same size, the loopback TCP stream, the 1 KiB ping-pong round trip, all measured in this run) compares two
things bound by the same cost, so it moves little from run to run. A ratio to a peer bound by
a different cost does not: Redis faults on every page of a large value it receives and
replies, and vLLM-Omni's shared-memory path maps a fresh segment per payload, so their times
follow the machine's page-fault cost, which under a hypervisor can vary several-fold from
one run to the next, and the same code can read an order of magnitude apart against the
shared-memory path in two runs. So every target here stands next to ours as a fraction of
the machine's limit from the same run (the column "ours x machine limit"); the peer ratios
say where a user would land on this machine, the limit ratios how close to the hardware we
are.
"""


def why_missed(d):
    """One paragraph per missed target kind, quoting this run's figures."""
    rows = d["rows"]
    lim = d["limits"]
    notes = []
    missed = [t["name"] for t in d["targets"] if t["measured"] is not None and not t["met"]]

    def r(system, op, size, clients=1):
        return find(rows, system, op, size, clients) or {}

    def memcpy_us(size):
        for b in lim["by_size"]:
            if b["size"] == size and b["memcpy_gbps"]:
                return size / (b["memcpy_gbps"] * 1e3)
        return None

    rtt = lim.get("unix_rtt_1k_p50_us")
    local = [m for m in missed if m.startswith("local set+get vs Redis")]
    if any("1 KiB," in m for m in local):
        ours, red = r("ds-local", "set+get", KIB), r("redis-unix", "set+get", KIB)
        notes.append(
            "- **1 KiB set+get vs Redis.** A 1 KiB value travels inline in the request on both "
            "systems, so each operation is one round trip over a Unix socket; the machine's own "
            "1 KiB Unix ping-pong took %s us (p50) in this run. Our set+get took %s us, Redis's "
            "%s us; 1.5x would need ours at %s us, against a bare cost of two round trips of %s "
            "us." % (
                num(rtt), num(ours.get("p50_us")), num(red.get("p50_us")),
                num((red.get("p50_us") or float("nan")) / 1.5),
                num(2 * rtt if rtt else None)))
    big = [m for m in local if "1 KiB," not in m]
    if big:
        parts = []
        for s in (MIB, 16 * MIB, 64 * MIB, 256 * MIB):
            if not any(human(s) + "," in m for m in big):
                continue
            o, p = r("ds-local", "set+get", s), r("redis-unix", "set+get", s)
            os_, og = r("ds-local", "set", s), r("ds-local", "get", s)
            parts.append(
                "%s: our set+get %s us (set %s us, get %s us; p99 %s us) against Redis's %s us; "
                "one memcpy of this size takes %s us" % (
                    human(s), num(o.get("p50_us")), num(os_.get("p50_us")),
                    num(og.get("p50_us")), num(o.get("p99_us")), num(p.get("p50_us")),
                    num(memcpy_us(s))))
        first = min(s for s in (MIB, 16 * MIB, 64 * MIB, 256 * MIB)
                    if any(human(s) + "," in m for m in big))
        fo, fp, mc = r("ds-local", "set+get", first), r("redis-unix", "set+get", first), \
            memcpy_us(first)
        redis_copies = fp.get("p50_us") / mc if fp.get("p50_us") and mc else None
        notes.append(
            "- **Large set+get vs Redis** missed at %s. At %s ours ran at %s x the machine's "
            "limit (two copies of the value, into the arena and out, at the faster copy's "
            "speed): a set is the copy into the arena and one round trip (%s us for a bare "
            "1 KiB ping-pong), a get of up to 4 MiB one copy out of the shared index with no "
            "request, a larger one a GET round trip and the copy. Redis's set+get took as long "
            "as %s memcpys of the size in this run, so the ratio to it follows how fast the machine "
            "faults and copies for Redis that day." % (
                "; ".join(parts), human(first), num(fo.get("ratio_to_limit"), "%.2f"),
                num(rtt), num(redis_copies, "%.1f")))
    if any("two memcpys" in m for m in missed):
        o = r("ds-local", "set+get", MIB)
        notes.append(
            "- **Set+get against two memcpys** missed at 1 MiB: %s us against 2 x %s us." % (
                num(o.get("p50_us")), num(memcpy_us(MIB))))
    remote = [m for m in missed if m.startswith("remote ")]
    if remote:
        trtt = lim.get("tcp_rtt_1k_p50_us")
        parts = []
        for m in remote:
            for op in ("set", "get"):
                for s in sorted({b["size"] for b in lim["by_size"]}):
                    if m == "remote %s vs Redis (TCP), %s, x faster" % (op, human(s)):
                        o, p = r("ds-remote", op, s), r("redis-tcp", op, s)
                        parts.append("%s %s: ours %s us, Redis %s us (ours at %s x the TCP "
                                     "limit)" % (op, human(s), num(o.get("p50_us")),
                                                 num(p.get("p50_us")),
                                                 num(o.get("ratio_to_limit"), "%.2f")))
        conc = [m for m in remote if "concurrent" in m]
        cpu = []
        for m in conc:
            mm = re.search(r"1 KiB, (\d+) clients", m)
            if not mm:
                continue
            n = int(mm.group(1))
            o = r("ds-remote", "concurrent set+get", KIB, n)
            p = r("redis-tcp", "concurrent set+get", KIB, n)
            co, cp = cpu_note(o.get("note")), cpu_note(p.get("note"))
            if co and cp:
                ratio = sum(map(float, co.split(" ")[0].split("+"))) / \
                    sum(map(float, cp.split(" ")[0].split("+")))
                cpu.append("%d clients ours %s, Redis %s (ours %.2f x Redis's)" % (
                    n, co, cp, ratio))
        notes.append(
            "- **Remote vs Redis over TCP** missed: %s%s. The 1 KiB TCP ping-pong took %s us in "
            "this run. Up to 1 MiB both servers make the same system calls per request and both "
            "pay the kernel's copies. With concurrent clients both CPUs stay busy, so polling "
            "stops and every round trip pays a wake-up of each side, as Redis's do: the rate is "
            "the two CPUs over the CPU time a pair costs, most of it the kernel's on both sides "
            "(server + client CPU us per pair: %s); at 16 and 64 clients pipelining on a shared "
            "connection cuts the server's part. These rows move by +-15%% between runs." % (
                "; ".join(parts) or "concurrent rows only",
                ("; concurrent set+get rate at " + ", ".join(
                    m.split(", ", 1)[1].replace(", x rate", "") for m in conc)) if conc else "",
                num(trtt), "; ".join(cpu) or "not measured"))
    resident = [m for m in missed if "among the resident keys" in m]
    if resident:
        parts = []
        for sysname, peer in (("ds-local", "redis-unix"), ("ds-remote", "redis-tcp")):
            for op in ("resident get", "resident set"):
                o, p = r(sysname, op, KIB), r(peer, op, KIB)
                if o:
                    parts.append("%s %s: %s against %s ops/s (p50 %s vs %s us)" % (
                        sysname, op, num(o.get("ops_per_s"), "%.0f"),
                        num(p.get("ops_per_s"), "%.0f"), num(o.get("p50_us")),
                        num(p.get("p50_us"))))
        notes.append("- **Random operations among the resident keys** missed (%s): %s." % (
            "; ".join(resident), "; ".join(parts)))
    if any("vLLM" in m for m in missed):
        o, p = r("ds-local", "set+get", 64 * MIB), r("vllm-omni-shm", "put+get", 64 * MIB)
        notes.append("- **vs vLLM-Omni's path at 64 MiB** missed: ours %s us, theirs %s us." % (
            num(o.get("p50_us")), num(p.get("p50_us"))))
    py = [m for m in missed if m.startswith("Python connector")]
    if py:
        parts = []
        for size in (64 * MIB, MIB):
            o, m_ = r("connector-python", "put+get", size), r("limit", "numpy memcpy", size)
            b_ = r("connector-python", "put+get, polling off", size)
            bm = r("limit", "numpy memcpy, polling-off run", size)
            if not any(human(size) + "," in m for m in py):
                continue
            parts.append("%s: put+get %s us against a %s us numpy memcpy%s" % (
                human(size), num(o.get("p50_us")), num(m_.get("p50_us")),
                "; with polling off %s us against %s us" % (num(b_.get("p50_us")),
                                                            num(bm.get("p50_us")))
                if b_ else ""))
        notes.append(
            "- **Python connector** missed (%s). A hand-off of a tensor is one copy and one "
            "round trip (`set_pieces`; `get_view` of a value up to 4 MiB pins it through the "
            "client's pin table, no request); at 1 MiB the copy is a few tens of us "
            "and a round trip between the machine's two CPUs is a wake-up each way (the bare Unix "
            "ping-pong took %s us in this run, more when the two processes land on different "
            "vCPUs); the adaptive polling (`--busy_poll_us`, `DS_BUSY_POLL_US`) takes the "
            "wake-ups out only while the CPU has nothing else to run, so a loaded machine "
            "pays them."
            % ("; ".join(parts), num(rtt)))
    mem = [m for m in missed if m.startswith("local set vs memcpy")]
    if mem:
        parts = []
        for b in lim["by_size"]:
            if not any(human(b["size"]) + "," in m for m in mem):
                continue
            o = r("ds-local", "set", b["size"])
            small = r("ds-local", "set", KIB)
            copy = ((o.get("p50_us") or 0) - (small.get("p50_us") or 0)) if o and small else None
            parts.append("%s: set %s GB/s (p50 %s us, p99 %s us; %s us beyond a 1 KiB set's), "
                         "memcpy %s GB/s (%s us), rep movsb %s GB/s" % (
                             human(b["size"]), num(o.get("gbps"), "%.2f"), num(o.get("p50_us")),
                             num(o.get("p99_us")), num(copy), num(b["memcpy_gbps"], "%.2f"),
                             num(memcpy_us(b["size"])), num(b.get("movsb_gbps"), "%.2f")))
        small = r("ds-local", "set", KIB)
        notes.append(
            "- **Local set vs memcpy** missed at %s. The memcpy limit (`bench/limits.c`) copies "
            "between the same two warm buffers again and again, so up to a few MiB it runs "
            "from the CPU caches; a set also pays its round trip to the worker (a 1 KiB set "
            "took %s us in this run: about 7 us when the worker shares the client's vCPU, "
            "where polling stops because either side's yield runs the other and each round "
            "trip is an eventfd and a futex wake-up on the same CPU, under 1 us when they "
            "poll a request lane on vCPUs of their own; which of the two the scheduler picks "
            "is its choice) and writes into arena memory "
            "the other sizes' blocks have pushed out of the caches. At large sizes a p99 far "
            "above the p50 means some sets landed on arena ranges that had gone cold (see "
            "Method)." % ("; ".join(parts), num(small.get("p50_us"))))
    hol = [m for m in missed if "p99 during" in m]
    if hol:
        ctl_i = r("limit", "unix_rtt idle", KIB)
        ctl_b = r("limit", "unix_rtt during 256MiB tcp stream", KIB, 2)
        parts = []
        for sysname in ("ds-local", "ds-remote"):
            i_, b_ = r(sysname, "1KiB set/get idle", KIB), r(sysname,
                                                          "1KiB set/get during 256MiB get", KIB, 2)
            parts.append("%s: p50 %s -> %s us, p99 %s -> %s us, operations per second %s -> "
                         "%s (%s)" % (
                             sysname, num(i_.get("p50_us")), num(b_.get("p50_us")),
                             num(i_.get("p99_us")), num(b_.get("p99_us")),
                             num(i_.get("ops_per_s"), "%.0f"), num(b_.get("ops_per_s"), "%.0f"),
                             b_.get("note", "")))
        ci, cb = ctl_i.get("p99_us"), ctl_b.get("p99_us")
        ctl_ratio = cb / ci if ci and cb else None
        # A missed row whose loaded p99 is below the machine's own loaded
        # ping-pong: the ratio moved because its idle p99 is far below the
        # machine's idle ping-pong (a polled path with no system call).
        below = []
        for sysname in ("ds-local", "ds-remote"):
            if not any(m.startswith(sysname + " ") for m in hol):
                continue
            i_, b_ = r(sysname, "1KiB set/get idle", KIB), r(sysname,
                                                          "1KiB set/get during 256MiB get", KIB, 2)
            bp, ip = b_.get("p99_us"), i_.get("p99_us")
            if bp is not None and cb is not None and ip is not None and ci and bp <= cb:
                below.append("%s's loaded p99 (%s us) is below the bare ping-pong's loaded p99, "
                             "and its ratio is large because its idle p99 (%s us) is %s of the "
                             "bare ping-pong's idle p99" % (sysname, num(bp), num(ip),
                                                            num(ip / ci, "%.2f")))
        if below:
            verdict = (
                "%s: idle, a request through a request lane is polled for without a system "
                "call; under the transfer both vCPUs are busy, polling stops and each operation "
                "pays its wake-ups, as the bare ping-pong does: the p99 shows no more than the "
                "machine's own contention (the longest single waits are in the notes)." %
                "; ".join(below))
        elif ctl_ratio is not None and ctl_ratio < 3:
            verdict = (
                "The control with no server moved its p99 only x%s, so the machine alone does "
                "not explain the slow operations: some small operations wait behind the "
                "worker's handling of the big transfer (the longest waits are in the notes)."
                % num(ctl_ratio, "%.1f"))
        else:
            verdict = (
                "The control with no server moved its p99 x%s as well, so on this 2-core "
                "machine CPU contention from the transfer's own client and worker threads "
                "explains much of it." % num(ctl_ratio, "%.1f"))
        notes.append(
            "- **Head-of-line p99** missed: %s. With no server at all, a 1 KiB Unix "
            "ping-pong has p99 %s us idle and %s us next to a plain 256 MiB TCP stream. %s" % (
                "; ".join(parts), num(ci), num(cb), verdict))
    if any("bytes per resident" in m for m in missed):
        m = r("ds-local", "resident memory", KIB)
        notes.append("- **Memory per resident key** missed: %s." % (m.get("note") or "?"))
    if not notes:
        return "Every target measured in this run was met."
    return "\n".join(notes)


METHOD = """\
**What each system does.** Every measurement is one client process on this machine.

- *This project, local*: `ds_kv_set` from a warm buffer; `ds_kv_get_into` into a warm buffer
  (a copy out of the worker's shared-memory arena); `ds_kv_get_buffers` (zero-copy: a pinned
  view of the arena, first and last byte read, released; a value the worker's shared index
  lists, up to 4 MiB, is pinned through the client's pin table with no request, a larger one
  with a GET). One worker, standalone, its arena pre-faulted at start.
- *This project, remote*: the same client API over TCP to the same worker.
- *Redis 7*: `redis-server --save '' --appendonly no` on a private loopback port and Unix
  socket, driven from C. hiredis connects and parses status replies; the value bytes go
  straight from the caller's warm buffer into the socket (`writev`) and a GET's bulk reply is
  read straight into a warm buffer. Stock hiredis would copy every SET into a fresh
  allocation and return every GET in one; where first touches are expensive a fresh 256 MiB allocation costs more
  than the transfer, so that would measure `malloc`, not Redis. The lean path is kinder to
  Redis than a typical client.
- *vLLM-Omni's default same-node path*: `bench/side_by_side/shm_bench.py`, run with
  `/usr/bin/python3`, does per payload what its `SharedMemoryConnector` does through
  `shm_write_bytes` / `shm_read_bytes`: `SharedMemory(create=True)`, copy in, close; attach,
  `bytes(...)` copy out, close, unlink. Producer and consumer are the same process, which
  only saves it the IPC that passes the segment name. The connector sends payloads up to its
  `shm_threshold_bytes` (64 KiB by default) inline through its control queue instead, so its
  1 KiB and 64 KiB rows show the shared-memory mechanism itself, for reference.
- *Limits* (`bench/limits.c`, in the same run): copies between two warm buffers of each
  size, with glibc's `memcpy` and with `rep movsb` on one thread, and with `memcpy` by two
  threads (half each, the second one polling for its half on another CPU), 1 KiB Unix-socket and TCP
  ping-pong between two processes, and a loopback TCP stream into a warm buffer. The client
  copies values into and out of the arena with whichever of `memcpy` and `rep movsb` its
  first copies of a size class found faster (`src/common/copy.h`): glibc 2.36 stops using
  `rep movsb` at 1 MiB on some CPUs, where it is the faster way. A set's copy into the arena
  of 8 MiB or more also tries non-temporal stores, which glibc uses only above 3/4 of the
  shared cache; they write the arena without reading it first, so such a set can run faster
  than either copy between two warm buffers and read above 1 in the "x limit" column. From
  512 KiB the client may split a copy between the calling thread and a helper thread
  (*wide copies*, `src/common/copy.h`), where its size class measured that faster: one core
  does not always saturate memory, so the limit for those sizes includes the two-thread copy,
  which is also the upper bound of ours (its helper sleeps between copies and is woken for
  each). The targets stay ratios to glibc's one-thread `memcpy`, as the targets state them;
  the "x limit" column is against the fastest of the three. The warm-up of every size covers
  the copies a process times to choose its way and whether to go wide (up to 40 per size
  class), so that no timed copy is one of those; a class measures again after 64, 128, ...
  4096 copies, and those few copies fall among the timed ones.

**Fairness.** First touches of fresh memory can be very expensive, under a hypervisor
especially (a fresh mapping copying many times slower than a warm one), and memory that has been warm
goes cold again after seconds without use. So: every system's source and destination buffers
are the same memory, re-touched right before that system's timed loop; every system gets the
same number of warm-up iterations right before it is timed; and a size block runs in rounds
(three up to 16 MiB), each system taking its turn in every round with the limits re-measured,
so that a burst of noise from the shared machine spreads over all systems. The limits are the
median of the rounds. The shared-memory path's fresh segment per payload is not a harness
artefact: it is that design's cost, paid on every payload, and no warm-up can remove it.
What the worker pays on a cold arena range shows in our p99, not our p50. The notes of the
set+get rows give, per pair, the page faults of the server and of the client (from
`/proc/<pid>/stat`) and the CPU time of the server's main thread and of the client thread
(from `/proc/<pid>/schedstat`), counted around the timed loop: the worker's pre-faulted arena
takes no faults, while Redis allocates a fresh buffer for every large value it receives and copies every large
reply into fresh reply buffers, so it faults on every 4 KiB page twice per pair. Those faults,
more than the socket, are what limits Redis on large values where faults are expensive.

**Figures.** p50 and p99 are over all timed iterations (pooled across rounds). GB/s is value
bytes over the p50 time; for a set+get pair it is the value size over the pair's time (the
throughput of handing one value from producer to consumer). `x limit` is the fraction of the
machine's limit reached (from 64 KiB: GB/s over the faster copy of that size for same-host paths
or over the TCP stream for TCP paths, halved for a pair, which copies twice; at 1 KiB: the
ping-pong round trip, doubled for a pair, over the p50). `x Redis` is how many times faster
than Redis on the matching path (Unix socket for same-host rows, TCP for remote rows), by
p50, or by rate for concurrent and resident rows, or by bytes per key for memory. Concurrent
rows run 1, 4, 16 and 64 clients as threads over up to four processes, each thread on its
own key; datasystem threads in a process share one client (it is thread safe). Over TCP its
calls that overlap send small values (up to 64 KiB) pipelined on one shared connection
(`src/client/mux.c`; `DS_CLIENT_MUX=0` gives each caller a pooled connection instead) and
larger ones on a pooled connection each; each Redis thread has its own hiredis connection, the
usual way to use Redis from threads. So at 16 and 64 clients (four or sixteen threads a
process) a worker's read and write carry several clients' requests, where Redis reads and
writes once per request; at 1 and 4 clients (one thread a process) nothing is shared.
"""


def cpu_note(note):
    """'X+Y us' from a row note's 'CPU us per pair server X, clients Y'."""
    m = re.search(r"CPU us per pair server ([\d.]+), clients ([\d.]+)", note or "")
    return "%s+%s us" % (m.group(1), m.group(2)) if m else None


def polling_text(d):
    """What this run's polling setting was, and what it means for the peers."""
    p = d.get("busy_poll_us", -1)
    if p is None or p < 0:
        how = ("their defaults: adaptive polling up to 200 us (the worker's `--busy_poll_us`, "
               "the client's `DS_BUSY_POLL_US`)")
    elif p == 0:
        how = "polling off on both sides (`--busy-poll-us 0`): every wait sleeps"
    else:
        how = "`--busy-poll-us %d` on both sides" % p
    return (
        "**Polling.** This project's worker and clients ran with %s. A waiting thread polls "
        "its socket before it sleeps, for a window that grows while what it waits for keeps "
        "arriving within the limit, shrinks when it does not, and ends whenever the CPU has "
        "other work (`src/common/spin.h`); a round trip then costs no wake-up, which under a "
        "hypervisor is most of a small round trip's time. A local set of 256 KiB or more also tells "
        "the worker, while it copies the value into the arena, that its request is coming "
        "(`DS_LANE_AHEAD_MIN` in `src/common/tuning.h`), so that a sleeping worker's wake-up "
        "overlaps the copy instead of following it. Redis and hiredis sleep on every wait. The "
        "CPU this costs is in the set+get notes (CPU us per pair, server and client), next to "
        "Redis's; the Python connector rows are also given with polling off.\n" % how)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def other_benches(results):
    """The other benches' results in the results folder, each with its command."""
    out = []
    t = load(os.path.join(results, "tier_bench.json"))
    if t and t.get("targets"):
        body = [[x["name"], num(x["measured"], "%.3f"),
                 "%s %g" % (">=" if x.get("higher_is_better") else "<=", x["target"]),
                 x.get("limit") or "-", "met" if x.get("met") else "**not met**"]
                for x in t["targets"]]
        out.append("### Disk tiers\n\n`build/bench/tier_bench --reps %s --json "
                   "bench/results/tier_bench.json`: one worker per tier on the file system of "
                   "`--dir` (here %s), each row against the disk's own limit measured in the "
                   "same run, interleaved with it; medians of the repetitions "
                   "(`bench/results/tier_bench.{json,txt}` has every row).\n\n" % (
                       t.get("reps", "?"), t.get("dir", "?")) +
                   table(["target", "measured", "target", "limit (same run)", ""], body))
    for name, what in (("cluster_bench.json", "TCP"),
                       ("cluster_bench_rdma.json", "TCP and UCX (`--enable_rdma true`)")):
        c = load(os.path.join(results, name))
        if not c or "tcp_stream_64MiB" not in c:
            continue
        stream = c["tcp_stream_64MiB"].get("gbps")
        rtt = c.get("tcp_rtt_1KiB", {}).get("p50_us")
        body = [["link: TCP stream, 64 MiB messages", num(stream, "%.3f") + " GB/s", "1.00"],
                ["link: TCP round trip, 1 KiB", num(rtt) + " us", "1.00"]]
        for key, label in (("get_64MiB_tcp_client", "64 MiB get by a TCP client in B from A"),
                           ("get_64MiB_worker_pull", "64 MiB get in B, worker B pulls from A"),
                           ("get_64MiB_ucx_pull", "64 MiB get in B, pulled over UCX")):
            if key in c and stream:
                body.append([label, num(c[key].get("gbps"), "%.3f") + " GB/s",
                             num(c[key]["gbps"] / stream, "%.2f")])
        for key, label in (("get_1KiB_tcp_client", "1 KiB get by a TCP client"),
                           ("get_1KiB_worker_pull_owner_a", "1 KiB pulled get, A owns the key"),
                           ("get_1KiB_worker_pull_owner_b", "1 KiB pulled get, B owns the key"),
                           ("get_1KiB_ucx_worker_owner_a", "1 KiB pulled get over UCX workers, A owns"),
                           ("get_1KiB_ucx_worker_owner_b", "1 KiB pulled get over UCX workers, B owns")):
            if key in c and rtt:
                body.append([label, num(c[key].get("p50_us")) + " us (p50)",
                             num(c[key]["p50_us"] / rtt, "%.2f")])
        out.append("### Cluster over a link: %s\n\n`sudo BUILD_DIR=build bench/cluster_bench.sh "
                   "bench/results/%s`: two network namespaces joined by a veth pair, a worker "
                   "in each; every row against the link measured in the same run (the ratio "
                   "column: rate over the stream's, or time over the round trip's).\n\n" % (
                       what, name) +
                   table(["row", "measured", "x link"], body))
    u = load(os.path.join(results, "ucx_client_bench.json"))
    if u and u.get("sizes"):
        body = []
        for sz in u["sizes"]:
            rounds = sz.get("rounds") or []
            ratios = sorted(r["tcp_us"] / r["ucx_us"] for r in rounds if r.get("ucx_us"))
            if not ratios:
                continue
            med = ratios[len(ratios) // 2]
            body.append([human(sz["bytes"]), len(rounds), num(med, "%.2f"),
                         "%s-%s" % (num(ratios[0], "%.2f"), num(ratios[-1], "%.2f"))])
        out.append("### A remote client's get over UCX\n\n`BUILD_DIR=build ROUNDS=7 "
                   "bench/ucx_client_bench.sh bench/results/ucx_client_bench.json`: one worker "
                   "with `--enable_rdma true`, UCX over its TCP transport on loopback, one "
                   "client process getting the same values over TCP and over UCX in "
                   "alternating rounds; the UCX get's speed over the TCP get's.\n\n" +
                   table(["value", "rounds", "UCX / TCP, median round", "range"], body))
    k = load(os.path.join(results, "connector_bench.json"))
    if k and k.get("rows"):
        body = [[r["path"], num(r.get("put_get_p50_ms"), "%.3f"), num(r.get("gbps"), "%.2f"),
                 num(r.get("memcpy_gbps"), "%.2f"), num(r.get("ratio"), "%.3f"),
                 ">= %g" % r["target"] if "target" in r else "-",
                 "met" if r.get("met") else "**not met**"] for r in k["rows"]]
        out.append("### C connector\n\n`build/bench/connector_bench --worker_address H:P "
                   "--json bench/results/connector_bench.json`: put+get of a %s tensor "
                   "through YuanrongConnector against one memcpy of it in the same run.\n\n" % (
                       human(k.get("size_bytes", 0))) +
                   table(["path", "put+get p50 ms", "GB/s", "memcpy GB/s", "ratio", "target",
                          ""], body))
    x = load(os.path.join(results, "cpp_overhead.json"))
    if x and x.get("rows"):
        body = [[human(r["size"]), num(r.get("c_p50_us")), num(r.get("cpp_p50_us")),
                 num(r.get("ratio_p50"), "%.3f"), num(r.get("ratio_round_p50"), "%.3f"),
                 num(r.get("ratio_mean"), "%.3f"), "<= 1.05",
                 "met" if max(r.get("ratio_p50", 9), r.get("ratio_round_p50", 9)) <= 1.05
                 else "**not met**"] for r in x["rows"]]
        out.append("### C++ SDK overhead\n\n`build/bench/cpp_overhead --json "
                   "bench/results/cpp_overhead.json`: set+get through the C++ SDK "
                   "(`KVClient::Set`, `KVClient::Get(key, std::string &)`) against the C API "
                   "(`ds_kv_set`, `ds_kv_get`) in interleaved rounds of the same run, %s "
                   "client; C++ time over C time.\n\n" % x.get("transport", "local") +
                   table(["value", "C p50 us", "C++ p50 us", "ratio p50", "median round",
                          "ratio mean", "target", ""], body))
    if not out:
        return ""
    return ("## Other benches\n\nEach from its own run, recorded in `bench/results/` with the "
            "command that made it; regenerated into this page with the rest.\n\n" +
            "\n\n".join(out) + "\n")


def headline(d):
    """The README's performance paragraph: the run's headline ratios."""
    def t(prefix):
        return [x for x in d["targets"] if x["name"].startswith(prefix)
                and x["measured"] is not None]

    def span(xs, fmt="%.1f"):
        vals = sorted(x["measured"] for x in xs)
        if not vals:
            return "-"
        lo, hi = fmt % vals[0], fmt % vals[-1]
        return lo if lo == hi else "%s-%s" % (lo, hi)

    def lspan(xs):
        vals = sorted(x["ratio_to_limit"] for x in xs if x.get("ratio_to_limit") is not None)
        return ("%.2f-%.2f" % (vals[0], vals[-1])) if vals else "-"

    big = [x for x in t("local set+get vs Redis (Unix socket)") if "1 KiB" not in x["name"]]
    sets = t("local set vs memcpy bandwidth")
    remote = t("remote set vs Redis (TCP)") + t("remote get vs Redis (TCP)")
    n_met = sum(1 for x in d["targets"] if x["met"])
    missed = ["%s: %.3g where the target is %s %g" % (x["name"], x["measured"], x["comparison"],
                                                      x["target"])
              for x in d["targets"] if x["measured"] is not None and not x["met"]]
    return (
        "`bash scripts/bench.sh` runs a side-by-side harness that measures this project, "
        "Redis 7 and vLLM-Omni's shared-memory path on one machine in one run, together with "
        "the machine's own limits (memcpy, loopback TCP, socket ping-pong), and states every "
        "target as a ratio within that run. In the run recorded in "
        "`bench/results/side_by_side.json`: a local client handed values of 1 MiB to 256 MiB "
        "from producer to consumer %sx faster than Redis over its Unix socket, at %s of the "
        "machine's copy limit; a local set ran at %sx a memcpy of the same size; remote sets "
        "and gets over TCP ran %sx Redis's; %d of %d targets were met%s. The machine, the "
        "method, every row and the other benches: [docs/performance.md](docs/performance.md)."
        % (span(big), lspan(big), span(sets, "%.2f"), span(remote), n_met, len(d["targets"]),
           (" (missed: %s)" % "; ".join(missed)) if missed else ""))


def update_readme(path, text):
    with open(path) as f:
        s = f.read()
    begin, end = "<!-- perf:begin -->", "<!-- perf:end -->"
    a, b = s.find(begin), s.find(end)
    if a < 0 or b < a:
        sys.exit("report: %s has no %s ... %s markers" % (path, begin, end))
    s = s[:a + len(begin)] + "\n" + text + "\n" + s[b:]
    with open(path, "w") as f:
        f.write(s)
    print("report: rewrote the performance paragraph of", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture-machine", metavar="FILE",
                    help="record this machine's description (right after a run) and exit")
    ap.add_argument("--json")
    ap.add_argument("--machine", help="machine description (default: machine.json next to "
                    "--json)")
    ap.add_argument("--plot", help="the plot's path relative to the output file")
    ap.add_argument("--out")
    ap.add_argument("--readme", help="also rewrite this README's performance paragraph")
    ap.add_argument("--load-before", default="")
    args = ap.parse_args()
    if args.capture_machine:
        with open(args.capture_machine, "w") as f:
            json.dump(capture_machine(args.load_before), f, indent=2)
            f.write("\n")
        return 0
    if not (args.json and args.plot and args.out):
        ap.error("--json, --plot and --out are needed (or --capture-machine)")
    with open(args.json) as f:
        d = json.load(f)
    results = os.path.dirname(os.path.abspath(args.json))
    m = load(args.machine or os.path.join(results, "machine.json"))

    mode = "quick (`--quick`)" if d.get("quick") else "full"
    n_met = sum(1 for t in d["targets"] if t["met"])
    n_measured = sum(1 for t in d["targets"] if t["measured"] is not None)
    doc = []
    doc.append("# Performance: this project next to Redis 7 and vLLM-Omni's shared memory\n")
    doc.append(
        "Generated by `bench/side_by_side/report.py` (`scripts/bench.sh --update-docs`) from "
        "the results of one %s run (%.0f s) of the side-by-side harness "
        "(`bench/side_by_side/`) in `bench/results/side_by_side.json` and `machine.json`; "
        "every figure below comes from that folder. Do not edit by hand: run "
        "`scripts/bench.sh --update-docs` again.\n" % (mode, d.get("wall_s", 0)))
    doc.append("## Machine\n")
    doc.append(machine(m) + "\n")
    doc.append("## Targets (%d of %d met, %d measured)\n" % (n_met, len(d["targets"]),
                                                             n_measured))
    doc.append("Each target is a ratio between figures of this same run.\n")
    doc.append(targets_table(d) + "\n")
    doc.append(STABLE)
    doc.append("### Targets missed, and why\n")
    doc.append(why_missed(d) + "\n")
    doc.append("## Throughput by value size\n")
    doc.append("One value handed from a producer to a consumer (set + get, or put + get), one "
               "client; the dashed lines are the machine's limits.\n")
    doc.append("![Handoff throughput by value size](%s)\n" % args.plot)
    doc.append("## Method\n")
    doc.append(METHOD)
    doc.append(polling_text(d))
    doc.append("## Single client\n")
    doc.append("For the connector rows, put is `omni_connector_put` (the serializer path encodes "
               "the map `{\"hidden\": float32 tensor}`; the raw path sends the bytes as they "
               "are) and get is `omni_connector_get` plus a zero-copy view of the tensor or "
               "bytes; each pair uses a new request id and is cleaned up afterwards, untimed.\n")
    doc.append(single_tables(d) + "\n")
    doc.append("### Machine limits, same run\n")
    doc.append("1 KiB ping-pong round trip (p50): Unix socket %s us, TCP %s us.\n" % (
        num(d["limits"].get("unix_rtt_1k_p50_us")), num(d["limits"].get("tcp_rtt_1k_p50_us"))))
    doc.append(limits_table(d) + "\n")
    doc.append("## Concurrent clients\n")
    doc.append(scale_table(d) + "\n")
    doc.append("## Resident keys\n")
    doc.append("Keys of 15 bytes with 1 KiB values, loaded in batches of 1000 (datasystem "
               "`mset`, Redis `MSET`), then single sets and gets of random resident keys, "
               "this project's local and TCP clients and Redis over its Unix socket and TCP "
               "taking turns in ten rounds with both servers loaded; x Redis is the median of "
               "the ten per-round rate ratios (the aggregate is in the note). "
               "Memory per key beyond key and value: for the worker, the growth of its private "
               "memory (`RssAnon` in `/proc/<pid>/status`) plus the growth of the arena's used "
               "bytes (`arena.used_bytes` from `dscli status`); the arena is pre-faulted, so "
               "its pages are in RSS from the start. For Redis, the growth of its `VmRSS` "
               "after `MEMORY PURGE`.\n")
    doc.append(resident_table(d) + "\n")
    doc.append("## Head-of-line blocking\n")
    doc.append("1 KiB set and get operations, idle and while another client of the same server "
               "keeps fetching a 256 MiB value over TCP. The last two rows are a control with no "
               "server: a Unix-socket ping-pong next to a plain loopback TCP stream.\n")
    doc.append(hol_table(d) + "\n")
    doc.append("## Connector\n")
    status = d.get("connector", "")
    if status.startswith("skipped"):
        doc.append("Not measured in this run: %s. `bench/side_by_side/connector.c` builds a "
                   "`YuanrongConnector` through the factory by name and adds put/get rows for "
                   "its serializer and raw paths at every size as soon as one is registered.\n"
                   % status)
    else:
        doc.append("Connector rows (%s) are in the single-client table under "
                   "\"YuanrongConnector\".\n" % status)
    doc.append(other_benches(results))
    doc.append("## Reproduce\n")
    doc.append("```\nscripts/bench.sh                  # full run into bench/results/\n"
               "scripts/bench.sh --update-docs    # ... and regenerate this page and the "
               "README's paragraph\n"
               "scripts/bench.sh --quick --out-dir /tmp/run   # a short run elsewhere\n```\n")
    doc.append("The script installs what it needs (`scripts/setup.sh`), builds the release "
               "flavour (`scripts/build.sh release`), starts a worker and a Redis of its own on "
               "free loopback ports and stops them by PID, and writes "
               "`side_by_side.{json,txt,svg}` and `machine.json` into its results folder; "
               "with `--update-docs` (full runs into `bench/results/` only) it also "
               "regenerates this page and the README's performance paragraph.\n")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(doc))
    print("report: wrote", args.out)
    if args.readme:
        update_readme(args.readme, headline(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
