"""The block scanner of aaco.importers.ort_profile against the line-by-line reader.

``_parse(path, scan=False)`` reads every line one at a time (a regular expression and
``str.find`` per line, JSON for the others): the reference. The scanner must give the same
tables, the same session events and the same odd-value counts, or leave the block to that
reader: on real profiles of third-party models (one and two ORT threads), in blocks small
enough that lines straddle reads, with one and two scanning threads, and on every kind of
line it must refuse.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from aaco.errors import InputError
from aaco.importers import ort_profile
from aaco.importers._lenient import collecting
from aaco.importers.ort_profile import _parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "onnx"


def _record(tmp_path: Path, model: str, feeds: dict[str, Any], runs: int, threads: int) -> Path:
    """A real ONNX Runtime profile of ``runs`` runs of a third-party model."""
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / f"{model}_{threads}")
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(FIXTURES / model), so, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        sess.run(None, feeds)
    return Path(sess.end_profiling())


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Silero VAD (If subgraphs: nested nodes) and PaddleOCR's classifier (convolutions), one
    ORT thread (empty thread_scheduling_stats) and two (a stats object in every event)."""
    tmp = tmp_path_factory.mktemp("ort")
    vad = {
        "input": np.zeros((1, 512), np.float32),
        "state": np.zeros((2, 1, 128), np.float32),
        "sr": np.array(16000, np.int64),
    }
    image = {"x": np.random.default_rng(0).random((1, 3, 48, 192), dtype=np.float32)}
    return [
        _record(tmp, "silero_vad_16k_op15.onnx", vad, 12, 1),
        _record(tmp, "silero_vad_16k_op15.onnx", vad, 10, 2),
        _record(tmp, "paddle_ppocr_mobile_v2_cls.onnx", image, 6, 1),
        _record(tmp, "paddle_ppocr_mobile_v2_cls.onnx", image, 3, 2),
    ]


def _outcome(read: Callable[[], ort_profile.OrtProfile]) -> tuple[Any, ...]:
    """What one read gives: the profile and the odd-value counts, or the one-line error."""
    with collecting() as odd:
        try:
            prof = read()
        except InputError as exc:
            return ("error", str(exc))
    return (prof, odd.meta())


def _same_as_line_reader(path: Path, **kw: Any) -> ort_profile.OrtProfile | None:
    """The scanner's outcome, checked against the line reader's; the profile (None when
    both refuse the file)."""
    outcomes = []
    for skip in (0, 2):
        fast = _outcome(partial(_parse, path, skip, **kw))
        slow = _outcome(partial(_parse, path, skip, scan=False))
        assert fast == slow, path.name
        outcomes.append(fast)
    first = outcomes[0][0]
    return first if isinstance(first, ort_profile.OrtProfile) else None


@pytest.mark.parametrize(("block_bytes", "workers"), [(0, 1), (0, 2), (4096, 2), (1500, 1)])
def test_real_profiles_read_as_the_line_reader_reads_them(
    profiles: list[Path], block_bytes: int, workers: int
) -> None:
    for path in profiles:
        prof = _same_as_line_reader(path, block_bytes=block_bytes, workers=workers)
        assert prof is not None and prof.ops.num_rows > 0 and prof.runs.num_rows > 0


def test_original_map_and_skipped_runs(profiles: list[Path]) -> None:
    """Silero's If nodes are written after their bodies: the rows are reordered by start,
    and original_nodes follow them."""
    for path in profiles:
        names = set(_parse(path).ops.column("node_name").to_pylist())
        omap: dict[str, list[str] | None] = {n: [n, "x"] for n in sorted(names)[::2]}
        for skip in (0, 1):
            fast = _parse(path, skip, omap)
            assert fast == _parse(path, skip, omap, scan=False)
            rows = fast.ops.to_pylist()
            assert all(r["original_nodes"] == omap.get(r["node_name"]) for r in rows)
            assert [(r["iteration"], r["start_ns"]) for r in rows] == sorted(
                (r["iteration"], r["start_ns"]) for r in rows
            )


def test_the_scanner_reads_real_profiles_itself(profiles: list[Path]) -> None:
    """Not a vacuous pass: ORT's own lines are read by the scanner, not left to the line
    reader."""
    for path in profiles:
        data = path.read_bytes()
        body = data[data.index(b"\n") + 1 : data.rindex(b"\n]") + 1] + ort_profile._PAD
        block = ort_profile._scan(body, len(body) - len(ort_profile._PAD), set())
        assert block is not None, path.name
        assert block.used == len(body) - len(ort_profile._PAD)
        assert len(block.piece) == data.count(b"_kernel_time")


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _node_lines(lines: list[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if '"cat" : "Node"' in ln and "_kernel_time" in ln]


def _set_shape(line: str, key: str, value: str) -> str:
    """``line`` with the value of shape ``key`` (up to its first ``}]``, or ``[]``) replaced."""
    i = line.index(f'"{key}" : ') + len(key) + 5
    end = i + 2 if line.startswith("[]", i) else line.index("}]", i) + 2
    return line[:i] + value + line[end:]


# One edit per case, on one node line (or all lines): each must read as the line reader
# reads it, whether the scanner takes the block or leaves it.
EDITS: dict[str, Callable[[str], str]] = {
    "backslash in name": lambda ln: ln.replace('_kernel_time"', '\\\\x_kernel_time"', 1),
    "quote in name": lambda ln: ln.replace('_kernel_time"', '\\"_kernel_time"', 1),
    "op_name twice": lambda ln: ln.replace('"args" : {', '"args" : {"op_name" : "Dup",', 1),
    "op_name not text": lambda ln: re.sub(r'"op_name" : "[^"]*"', '"op_name" : 7', ln),
    "no op_name": lambda ln: re.sub(r'"op_name" : "[^"]*",?', "", ln),
    "shape as text": lambda ln: _set_shape(ln, "input_type_shape", '"[{\\"float\\":[1]}]"'),
    "empty shape": lambda ln: _set_shape(ln, "output_type_shape", "[]"),
    "shape not a list": lambda ln: _set_shape(ln, "output_type_shape", '{"float":[1]}'),
    "shape, then junk": lambda ln: _set_shape(ln, "output_type_shape", '[{"float":[1]}]x'),
    "float ts": lambda ln: re.sub(r'"ts" :(\d+)', r'"ts" :\1.5', ln),
    "negative tid": lambda ln: re.sub(r'"tid" :(\d+)', r'"tid" :-\1', ln),
    "leading zeros": lambda ln: re.sub(r'"dur" :(\d+)', r'"dur" :000\1', ln),
    "16-digit ts": lambda ln: re.sub(r'"ts" :(\d+)', '"ts" :1234567890123456', ln),
    "20-digit tid": lambda ln: re.sub(r'"tid" :(\d+)', '"tid" :12345678901234567890', ln),
    "ts as text": lambda ln: re.sub(r'"ts" :(\d+)', r'"ts" :"\1"', ln),
    "unspaced key": lambda ln: ln.replace('"provider" : ', '"provider" :'),
    "non-ASCII name": lambda ln: ln.replace('_kernel_time"', 'é名_kernel_time"', 1),
    "fence": lambda ln: ln.replace("_kernel_time", "_fence_before", 1),
    "other category": lambda ln: ln.replace('"cat" : "Node"', '"cat" : "Api"', 1),
    "kernel category": lambda ln: ln.replace('"cat" : "Node"', '"cat" : "Kernel"', 1),
    "size not a number": lambda ln: re.sub(r'"output_size" : "\d+"', '"output_size" : "big"', ln),
    "indented": lambda ln: "  " + ln,
    "empty line after": lambda ln: ln + "\n",
    "not JSON": lambda ln: ln[:-3] + "xx},",
    "no comma": lambda ln: ln.rstrip(","),
    "key in a value": lambda ln: ln.replace(
        '"provider" : "', '"provider" : "\\"op_name\\" : \\"', 1
    ),
    "bare key in a value": lambda ln: ln.replace(
        '"provider" : "', '"provider" : "x"op_name" : "y', 1
    ),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_odd_lines_read_as_the_line_reader_reads_them(
    profiles: list[Path], tmp_path: Path, edit: str
) -> None:
    """The edit on the first node line, one in the middle and the last: in blocks of 3000
    bytes they start, sit inside and end blocks."""
    lines = _lines(profiles[0])
    nodes = _node_lines(lines)
    for at in (nodes[0], nodes[len(nodes) // 2], nodes[-1]):
        lines[at] = EDITS[edit](lines[at])
    path = tmp_path / "edited.json"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for block_bytes in (0, 3000):
        _same_as_line_reader(path, block_bytes=block_bytes, workers=1)


@pytest.mark.parametrize("ending", ["\r\n", "\r"])
def test_line_endings(profiles: list[Path], tmp_path: Path, ending: str) -> None:
    """Windows line ends are read by the scanner; a lone CR (a line end to a text file) is
    left to the line reader."""
    path = tmp_path / "crlf.json"
    path.write_bytes(ending.join(_lines(profiles[0])).encode() + ending.encode())
    prof = _same_as_line_reader(path)
    assert prof is not None and prof.ops.num_rows > 0
    lines = _lines(profiles[0])
    at = _node_lines(lines)[3]
    lines[at] = lines[at].replace('"dur" :', '"dur" :\r', 1)
    path.write_text("\n".join(lines) + "\n")
    _same_as_line_reader(path, block_bytes=2000)


def test_mutated_profiles_fail_or_read_as_the_line_reader(
    profiles: list[Path], tmp_path: Path
) -> None:
    """Random bit flips and cuts of a real profile (seeded): the scanner gives what the line
    reader gives, tables or the one-line error."""
    rng = np.random.default_rng(7)
    data = profiles[0].read_bytes()
    path = tmp_path / "mutant.json"
    for case in range(60):
        out = bytearray(data)
        for _ in range(int(rng.integers(1, 6))):
            i = int(rng.integers(0, len(out)))
            out[i] ^= 1 << int(rng.integers(0, 7))  # ASCII stays ASCII: UTF-8 checked apart
        if case % 10 == 9:
            out = out[: int(rng.integers(0, len(out)))]
        path.write_bytes(bytes(out))
        fast = _outcome(lambda: _parse(path, block_bytes=int(rng.integers(500, 20000))))
        slow = _outcome(lambda: _parse(path, scan=False))
        assert fast == slow, case


def test_invalid_utf8_is_reported_as_before(profiles: list[Path], tmp_path: Path) -> None:
    data = profiles[0].read_bytes()
    at = data.index(b"_kernel_time")
    path = tmp_path / "bad.json"
    path.write_bytes(data[:at] + b"\xff" + data[at:])
    with pytest.raises(InputError, match="not UTF-8"):
        _parse(path)


def test_kernel_events_keep_their_parent_across_blocks(tmp_path: Path) -> None:
    """A GPU profile (Kernel events after their node) read in blocks of any size."""
    src = Path(__file__).parent / "fixtures" / "ort" / "cuda_ep_profile.json"
    for block_bytes in (300, 1000, 0):
        for workers in (1, 2):
            _same_as_line_reader(src, block_bytes=block_bytes, workers=workers)


# --------------------------------------------------------------------------- vector helpers


def _nested_reference(starts: list[int], durs: list[int], tids: list[Any]) -> list[int]:
    """The stack walk the vector version replaces (as it was written before)."""
    nested = [0] * len(starts)
    order = sorted(range(len(starts)), key=lambda i: (str(tids[i]), starts[i], -durs[i]))
    stack: list[int] = []
    tid: Any = object()
    for i in order:
        if tids[i] != tid:
            stack.clear()
            tid = tids[i]
        end = starts[i] + durs[i]
        while stack and starts[i] >= starts[stack[-1]] + durs[stack[-1]]:
            stack.pop()
        if stack and end <= starts[stack[-1]] + durs[stack[-1]] + 1000:
            nested[stack[-1]] += durs[i]
        stack.append(i)
    return [min(n, d) for n, d in zip(nested, durs, strict=True)]


@pytest.mark.parametrize("seed", range(40))
def test_nested_time_is_the_stack_walk(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    # coarse times make shared starts, touching ends and the 1 us slack common
    starts = (rng.integers(0, 60, n) * 500).astype(np.int64)
    durs = (rng.integers(0, 30, n) * 500).astype(np.int64)
    tids: list[Any] = [None if t == 3 else int(t) for t in rng.integers(0, 4 if seed % 2 else 1, n)]
    tid_null = np.array([t is None for t in tids])
    tid_vals = np.array([0 if t is None else t for t in tids], dtype=np.int64)
    got = ort_profile._nested_ns(starts, durs, tid_vals, tid_null).tolist()
    assert got == _nested_reference(starts.tolist(), durs.tolist(), tids)


def test_integers_are_read_whole_or_refused() -> None:
    texts = ["0", "7", "-7", "12345678", "123456789", "9" * 16, "-" + "9" * 16, "00012",
             "1234567890123456", "9" * 17, "", "-", "1x", "x1", "1 2", "+5", ":", "/",
             "--1"]  # fmt: skip
    rng = np.random.default_rng(3)
    texts += [str(int(rng.integers(0, 10 ** int(rng.integers(1, 17))))) for _ in range(200)]
    for text in texts:
        # numbers come after at least `{"cat" : "Node","pid" :` in a line
        data = b'{"cat" : "Node","x" :' + text.encode() + b"," + ort_profile._PAD
        a = np.frombuffer(data, dtype=np.uint8)
        w = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
        got = ort_profile._ints(a, w, np.array([21]), np.array([21 + len(text)]))
        body = text[1:] if text.startswith("-") else text
        if body.isdigit() and len(body) <= 16:
            assert got is not None, text
            assert int(got[0][0]) == int(text), text
        else:
            assert got is None, text


# Lines whose odd part is at their end (the last strings of a block): the scanner must
# refuse them without tripping over the block's end, at every place a block can end.
ENDINGS = [
    '"op_name" : 7}}',
    '"op_name" : }}',
    '"op_name" :"Add"}}',
    '"op_name" : "Add","input_type_shape" : 7}}',
    '"op_name" : "Add","input_type_shape" : [}}',
    '"op_name" : "Add","input_type_shape" : [{"float":[1]}]}}',
    '"op_name" : "Add","output_type_shape" : []}}',
    '"op_name" : "Add","input_type_shape" : [{"float":[1]}] }}',
    '"op_name" : "Add","provider" : "}}',
]


@pytest.mark.parametrize("ending", ENDINGS)
def test_odd_ends_of_lines_at_every_block_end(tmp_path: Path, ending: str) -> None:
    head = (
        '{"cat" : "Node","pid" :1,"tid" :2,"dur" :5,"ts" :%d,"ph" : "X",'
        '"name" :"n%d_kernel_time","args" : {'
    )
    good = '"op_name" : "Mul","provider" : "CPU","input_type_shape" : [{"float":[2]}]}},'
    lines = ["["]
    for i in range(6):
        lines.append(head % (10 + i, i) + (ending + "," if i == 3 else good))
    lines.append(
        '{"cat" : "Session","pid" :1,"tid" :2,"dur" :100,"ts" :0,"ph" : "X",'
        '"name" :"model_run","args" : {}}'
    )
    lines.append("]")
    path = tmp_path / "ends.json"
    path.write_text("\n".join(lines) + "\n")
    data = path.read_bytes()
    body = data[2:]
    at = data.index(ending.encode())
    for cut in range(at - 40, at + len(ending) + 40):  # the block ends in or near the line
        block = body[:cut] + ort_profile._PAD
        ort_profile._scan(block, cut, set())  # refuses or reads, never raises
    for block_bytes in (at - 60, at + len(ending) - 1, at + len(ending) + 2, 0):
        _same_as_line_reader(path, block_bytes=block_bytes, workers=1)
