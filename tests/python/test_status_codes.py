"""The Python status codes are the C library's.

include/ds/status.h's DS_STATUS_MAP is the one table of codes; the
package's constants are generated from it (python/gen_status.py). These tests
parse the header on their own, compare every code, name and message with what
yr.datasystem exposes, check that the checked-in generated module is what the
generator makes of today's header (so editing the header without
regenerating fails here), and, with a built library, that its
ds_status_name agrees.
"""

import ctypes
import importlib.util
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "include" / "ds" / "status.h"


def header_rows():
    """(name, number, message) of each X(...) row, parsed independently of the
    generator: the lines between '#define DS_STATUS_MAP(X)' and the first line
    without a continuation backslash."""
    rows, inside = [], False
    for line in HEADER.read_text().splitlines():
        if line.startswith("#define DS_STATUS_MAP(X)"):
            inside = True
            continue
        if inside:
            m = re.search(r'X\((K_\w+), (-?\d+), "(.*)"\)', line)
            if m:
                rows.append((m.group(1), int(m.group(2)), m.group(3)))
            if not line.rstrip().endswith("\\"):
                break
    assert rows, "no rows parsed from %s" % HEADER
    return rows


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_status", REPO / "python" / "gen_status.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_code_of_the_header_is_in_python():
    from yr.datasystem import _native as n

    rows = header_rows()
    for name, num, msg in rows:
        assert getattr(n, name) == num, name
        assert n.STATUS_NAMES[num] == name
        assert n.status_name(num) == name
        assert n.STATUS_MESSAGES[num] == msg
    # and nothing more
    assert set(n.STATUS_NAMES) == {num for _, num, _ in rows}
    assert n.status_name(999999) == "K_UNKNOWN"


def test_yuanrong_texts_cover_every_code():
    from yr.datasystem import _native as n

    assert set(n.STATUS_TEXTS) == set(n.STATUS_NAMES)


def test_generated_module_matches_the_header():
    gen = load_generator()
    assert gen.parse_header(str(HEADER)) == header_rows()
    checked_in = (REPO / "python" / "yr" / "datasystem" / "_status.py").read_text()
    assert checked_in == gen.render(header_rows()), (
        "python/yr/datasystem/_status.py is stale: run python3 python/gen_status.py"
    )


def test_generator_refuses_a_header_without_the_table(tmp_path):
    gen = load_generator()
    bad = tmp_path / "status.h"
    bad.write_text("#define NOTHING 1\n")
    with pytest.raises(ValueError, match="DS_STATUS_MAP"):
        gen.parse_header(str(bad))


def test_library_names_agree():
    build = Path(os.environ.get("DS_BUILD_DIR") or (REPO / "build-py"))
    lib = build / "src" / "client" / "libdatasystem.so"
    if not lib.exists():
        pytest.skip("no libdatasystem.so in %s" % build)
    c = ctypes.CDLL(str(lib))
    c.ds_status_name.restype = ctypes.c_char_p
    c.ds_status_message.restype = ctypes.c_char_p
    for name, num, msg in header_rows():
        assert c.ds_status_name(num).decode() == name
        assert c.ds_status_message(num).decode() == msg
