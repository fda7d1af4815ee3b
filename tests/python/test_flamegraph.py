"""bench/flamegraph.py on a small `perf script` text written here: the stacks
of each process asked for are folded root first with their sample counts,
the kernel share counts samples whose leaf is a kernel frame, the SVG has a
box per frame coloured by where it lives, and a process with no samples is
reported, not drawn."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "bench" / "flamegraph.py"

PERF_SCRIPT = """\
datasystem_work 100 [000] 10.000001:    2004008 cpu-clock:ppp: 
\tffffffff81000001 _raw_spin_unlock+0x10 ([kernel.kallsyms])
\tffffffff81000002 do_syscall_64+0x71 ([kernel.kallsyms])
\t          4001 ds__net_turn+0x20 (/build/src/worker/datasystem_worker)
\t          4002 main+0x9 (/build/src/worker/datasystem_worker)

datasystem_work 100 [001] 10.000002:    2004008 cpu-clock:ppp: 
\t          5001 ht_find+0x44 (/build/src/worker/datasystem_worker)
\t          4002 main+0x9 (/build/src/worker/datasystem_worker)

datasystem_work 100 [001] 10.000003:    2004008 cpu-clock:ppp: 
\t          5001 ht_find+0x48 (/build/src/worker/datasystem_worker)
\t          4002 main+0x9 (/build/src/worker/datasystem_worker)

redis-server 200 [000] 10.000004:    2004008 cpu-clock:ppp: 
\t          6001 [unknown] (/usr/bin/redis-server)
\t          6002 __libc_start_main+0x80 (/usr/lib/x86_64-linux-gnu/libc.so.6)

sbs 300 [000] 10.000005:    2004008 cpu-clock:ppp: 
\t          7001 main+0x1 (/build/bench/sbs)
"""


def run(tmp_path, *comms):
    src = tmp_path / "perf.txt"
    src.write_text(PERF_SCRIPT)
    out = tmp_path / "out"
    args = [sys.executable, str(TOOL), str(src), "--out-dir", str(out)]
    for c in comms:
        args += ["--comm", c]
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    return out, r


def test_folds_stacks_root_first_with_counts(tmp_path):
    out, r = run(tmp_path, "datasystem_work", "redis-server")
    folded = (out / "datasystem_work.folded").read_text().splitlines()
    assert folded == [
        "main;ds__net_turn;do_syscall_64;_raw_spin_unlock 1",
        "main;ht_find 2",
    ]
    # Redis's stripped frame is named by its object.
    assert (out / "redis-server.folded").read_text() == "__libc_start_main;[redis-server] 1\n"
    assert "datasystem_work: 3 samples, 33.3% of them in the kernel" in r.stdout
    assert "66.67%  ht_find" in r.stdout
    assert "redis-server: 1 samples, 0.0% of them in the kernel" in r.stdout


def test_svg_has_a_box_per_frame(tmp_path):
    out, _ = run(tmp_path, "datasystem_work")
    svg = (out / "datasystem_work.svg").read_text()
    assert svg.startswith("<?xml")
    assert svg.count("<rect ") == 1 + 6  # the background, then all + 5 frames
    assert "<title>ht_find (2 samples, 66.67%)</title>" in svg
    assert "<title>all (3 samples, 100.00%)</title>" in svg
    # This project's frames blue, the kernel's orange.
    ht = svg[svg.index("<title>ht_find"):]
    assert 'fill="rgb(' in ht and ",190)" in ht[: ht.index("/>")]
    k = svg[svg.index("<title>_raw_spin_unlock"):]
    assert 'fill="rgb(230,' in k[: k.index("/>")]


def test_process_without_samples_is_reported(tmp_path):
    out, r = run(tmp_path, "datasystem_work", "no-such-proc")
    assert "flamegraph.py: no samples of no-such-proc" in r.stderr
    assert not (out / "no-such-proc.svg").exists()
    assert (out / "datasystem_work.svg").exists()
