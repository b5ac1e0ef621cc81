"""The importer contract, checked for every registered importer (pyinstrument's renderer-test
pattern): a new importer is covered as soon as :func:`importer_classes` lists it.

* Foreign content (random bytes, a PNG, JSON and CSV documents of other tools, another
  importer's own format) and an empty file: ``sniff`` says no, and ``read`` raises an
  :class:`~aaco.errors.AacoError` with a one-line message naming the file, or returns
  empty tables. Never another exception type.
* A real sample cut short (10 %, 50 %, 90 % of its bytes, at a line end, inside a line,
  inside a number, inside a quoted string, without its last byte): ``read`` returns tables
  that follow the bundle schemas (never more rows than the whole file gives) or raises an
  AacoError with a one-line message. Never a bare KeyError, IndexError, ValueError, JSON or
  Unicode error.
* ``aaco import`` on an empty or truncated file: exit 0, or a nonzero exit with one line on
  stderr and no traceback; either way no half-written bundle is left behind.

Directory importers get the same cases as a directory holding the sample with one file
emptied or cut short.
"""

from __future__ import annotations

import functools
import gzip
import json
import random
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.test_cli import aaco
from tests.importers.test_rocpd import DATA, SCHEMA

from aaco.errors import AacoError
from aaco.importers.base import TABLE_FIELDS, Importer, TraceTables, read_head
from aaco.importers.registry import importer_classes
from aaco.session.bundle import Session, iter_sessions

FIXTURES = Path(__file__).parent / "fixtures"
V3_RUN = FIXTURES / "rocprof" / "v3" / "run"
ROCPD = "<rocpd database built from test_rocpd.SCHEMA + DATA>"

IMPORTERS = importer_classes()
FILE_IMPORTERS = [c for c in IMPORTERS if not c.reads_directories]
DIR_IMPORTERS = [c for c in IMPORTERS if c.reads_directories]

#: importer name -> real samples of its format (paths under FIXTURES, or ROCPD); the first
#: one is also run through ``aaco import``
SAMPLES: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("ort/cuda_ep_profile.json", "ort/rocm_ep_profile.json"),
    "rocpd": (ROCPD,),
    "rocprofv3-csv": (
        "rocprof/v3/run/node1/4242_kernel_trace.csv",
        "rocprof/v3/gen1_kernel_trace.csv",
        "rocprof/v3/rocpd_convert_kernel_trace.csv",
        "rocprof/v3/run/node1/4242_hip_api_trace.csv",
        "rocprof/v3/run/node1/4242_memory_copy_trace.csv",
        "rocprof/v3/run/node1/4242_counter_collection.csv",
        "rocprof/v3/run/node1/4242_agent_info.csv",
        "rocprof/v3/run/node1/4242_kernel_stats.csv",
    ),
    "rocprofv3-json": ("rocprof/json/5150_results.json",),
    "rocprofv3-att": (
        "att/real/ui_output_agent_14537_dispatch_1/code.json",
        "att/constructed/run/ui_output_agent_2_dispatch_7/code.json",
    ),
    "rocprof-v1": ("rocprof/legacy/results.csv", "rocprof/legacy/results.stats.csv"),
    "rocprof-v2": ("rocprof/legacy/results_v2.csv",),
    "kineto": (
        "kineto/kineto_docs_after_fix_trace.json",
        "kineto/cpu_mlp.json.gz",
        "kineto/hta_event_sync_multi_stream.json.gz",
    ),
    "rocprofv3-dir": ("rocprof/v3/run",),
    "nsys": ("nsys/nsys_2026_4.sqlite", "nsys/nsys_2024_6.sqlite"),
}


def _png() -> bytes:
    ihdr = b"\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde"
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"\x00\x00\x00\x00IEND\xaeB`\x82"


#: content no importer reads: name -> (file name, bytes)
FOREIGN: dict[str, tuple[str, bytes]] = {
    "random": ("blob.bin", random.Random(16).randbytes(4096)),
    "random-json-name": ("trace.json", random.Random(17).randbytes(4096)),
    "png": ("image.png", _png()),
    "png-as-csv": ("kernel_trace.csv", _png()),
    "package-json": (
        "package.json",
        json.dumps({"name": "web", "version": "1.0.0", "dependencies": {"react": "^18"}}).encode(),
    ),
    "geojson-array": (
        "results.json",
        json.dumps([{"type": "Feature", "geometry": None, "properties": {"ts": 1}}]).encode(),
    ),
    "json-scalar": ("trace.json", b"42\n"),
    "ndjson-log": (
        "events.json",
        b'{"level": "info", "ts": 1, "msg": "start"}\n{"level": "warn", "ts": 2, "msg": "x"}\n',
    ),
    "html": ("report.json", b"<!DOCTYPE html>\n<html><body><p>a, b, c</p></body></html>\n"),
    "nvidia-smi-csv": (
        "gpu.csv",
        b"timestamp, name, pci.bus_id, utilization.gpu [%], memory.used [MiB]\n"
        b"2024/05/01 10:00:00.000, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 97 %, 70123 MiB\n",
    ),
    "nsys-kern-sum-csv": (
        "cuda_gpu_kern_sum.csv",
        b"Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
        b"61.2,123456,10,12345.6,12000.0,11000,15000,900.1,ampere_sgemm_128x64_nn\n",
    ),
    "utf16-text": ("notes.csv", "Name,Calls\nfoo,1\n".encode("utf-16")),
    "gzip-text": ("trace.json.gz", gzip.compress(b"hello, world\n" * 50, mtime=0)),
    "gzip-garbage": ("trace.json.gz", b"\x1f\x8b\x08\x00" + random.Random(3).randbytes(300)),
}

EMPTY: dict[str, bytes] = {"empty": b"", "blank-lines": b"\n \r\n\t\n"}


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def rocpd_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rocpd") / "900_results.db"
    con = sqlite3.connect(path)
    con.executescript(SCHEMA + DATA)
    con.commit()
    con.close()
    return path


def _sample(ref: str, rocpd_db: Path) -> Path:
    return rocpd_db if ref == ROCPD else FIXTURES / ref


def _plain(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _plain_name(path: Path) -> str:
    return path.name.removesuffix(".gz")


def _cuts(data: bytes) -> dict[str, int]:
    """Where to cut ``data``: fractions of its length, and cuts inside a line, a number and a
    quoted string (each near the middle, falling back to the middle itself)."""
    n = len(data)
    mid = n // 2
    cuts = {"10%": n // 10, "50%": mid, "90%": n * 9 // 10, "last-byte": n - 1}
    nl = data.find(b"\n", mid)
    if nl > 0:
        cuts["line-end"] = nl + 1
        start = data.rfind(b"\n", 0, nl) + 1
        cuts["mid-line"] = (start + nl) // 2
    digits = re.compile(rb"\d{3,}").search(data, mid)
    if digits:
        cuts["mid-number"] = (digits.start() + digits.end()) // 2
    quoted = re.compile(rb'"[^"\n]{4,}"').search(data, mid)
    if quoted:
        cuts["mid-string"] = quoted.start() + 3
    return {k: v for k, v in cuts.items() if 0 < v < n}


def _one_line_error(exc: AacoError, path: Path) -> None:
    msg = str(exc)
    assert msg and "\n" not in msg and len(msg) < 1000, repr(msg)
    assert path.name in msg, f"the message does not name the file: {msg!r}"


def _conforms(tables: TraceTables, full: TraceTables | None = None) -> None:
    """Tables of the bundle schemas, JSON-ready meta, never more rows than the whole file."""
    for name, spec in TABLE_FIELDS.items():
        spec.conform(getattr(tables, name))
        if full is not None:
            assert getattr(tables, name).num_rows <= getattr(full, name).num_rows, name
    json.dumps(tables.meta, allow_nan=False)


def _read_outcome(
    cls: type[Importer], path: Path, check: Callable[[TraceTables], None]
) -> AacoError | None:
    """Read ``path`` with ``cls``: the AacoError it raised (checked to be one line), or None
    after ``check`` approved the tables. Any other exception fails the test."""
    try:
        tables = cls().read(path)
    except AacoError as exc:
        _one_line_error(exc, path)
        return exc
    check(tables)
    return None


def _empty(tables: TraceTables) -> None:
    _conforms(tables)
    assert tables.event_count == 0, f"read {tables.event_count} events out of foreign content"


def _ids(classes: list[type[Importer]]) -> list[str]:
    return [c.name for c in classes]


# --------------------------------------------------------------------------- coverage


def test_every_importer_has_a_sample() -> None:
    missing = [c.name for c in IMPORTERS if c.name not in SAMPLES]
    assert not missing, f"add real samples of {missing} to SAMPLES"


# --------------------------------------------------------------------------- foreign, empty


@pytest.mark.parametrize("cls", FILE_IMPORTERS, ids=_ids(FILE_IMPORTERS))
@pytest.mark.parametrize("case", [*FOREIGN, *EMPTY])
def test_foreign_or_empty_file(cls: type[Importer], case: str, tmp_path: Path) -> None:
    name, data = FOREIGN[case] if case in FOREIGN else ("trace.json", EMPTY[case])
    path = tmp_path / name
    path.write_bytes(data)
    assert not cls.sniff(path, read_head(path))
    _read_outcome(cls, path, _empty)


def _other_samples(cls: type[Importer]) -> list[tuple[str, str]]:
    """The file samples of every other importer (a directory importer's are its files)."""
    return [
        (other, ref)
        for other, refs in SAMPLES.items()
        if other != cls.name and other not in {c.name for c in DIR_IMPORTERS}
        for ref in refs
    ]


@pytest.mark.parametrize("cls", FILE_IMPORTERS, ids=_ids(FILE_IMPORTERS))
def test_other_formats_are_not_sniffed(cls: type[Importer], rocpd_db: Path, tmp_path: Path) -> None:
    """Every other importer's samples: ``sniff`` says no, ``read`` refuses them in one line or
    gives schema tables (a Chrome-trace reader may find events in another Chrome trace)."""
    for other, ref in _other_samples(cls):
        src = _sample(ref, rocpd_db)
        path = tmp_path / other / src.name
        path.parent.mkdir(exist_ok=True)
        shutil.copyfile(src, path)
        assert not cls.sniff(path, read_head(path)), (cls.name, ref)
        _read_outcome(cls, path, _conforms)


@pytest.mark.parametrize("cls", DIR_IMPORTERS, ids=_ids(DIR_IMPORTERS))
@pytest.mark.parametrize("case", [*FOREIGN, *EMPTY])
def test_directory_of_foreign_or_empty_files(
    cls: type[Importer], case: str, tmp_path: Path
) -> None:
    name, data = FOREIGN[case] if case in FOREIGN else ("1_kernel_trace.csv", EMPTY[case])
    d = tmp_path / "out" / "host"
    d.mkdir(parents=True)
    (d / name).write_bytes(data)
    assert not cls.sniff(d.parent, b"")
    _read_outcome(cls, d.parent, _empty)
    # a file is never a directory importer's
    assert not cls.sniff(d / name, read_head(d / name))


# --------------------------------------------------------------------------- truncated


def _file_cases() -> list[tuple[type[Importer], str]]:
    return [(c, ref) for c in FILE_IMPORTERS for ref in SAMPLES.get(c.name, ())]


@pytest.mark.parametrize(
    ("cls", "ref"), _file_cases(), ids=[f"{c.name}:{Path(r).name}" for c, r in _file_cases()]
)
def test_truncated_sample(cls: type[Importer], ref: str, rocpd_db: Path, tmp_path: Path) -> None:
    src = _sample(ref, rocpd_db)
    assert cls.sniff(src, read_head(src)), "the sample is not of this importer's format"
    full = cls().read(src)
    data = _plain(src)
    cut_files = {k: data[:at] for k, at in _cuts(data).items()}
    # the compressed stream cut short (importers read .gz as they read the plain file)
    packed = gzip.compress(data, mtime=0)
    cut_files["gzip-50%"] = packed[: len(packed) // 2]
    cut_files["gzip-no-trailer"] = packed[:-8]
    cut_files["gzip-last-byte"] = packed[:-1]
    for label, cut in cut_files.items():
        name = _plain_name(src) + (".gz" if label.startswith("gzip") else "")
        path = tmp_path / label / name
        path.parent.mkdir()
        path.write_bytes(cut)
        _read_outcome(cls, path, functools.partial(_conforms, full=full))


def _dir_variants(run: Path) -> dict[str, tuple[Path, bytes]]:
    """Ways to spoil one rocprofv3 output folder: its kernel trace (the path under the
    folder) emptied or cut short."""
    kernel = next(run.rglob("*_kernel_trace.csv"))
    rel = kernel.relative_to(run)
    data = kernel.read_bytes()
    out = {"empty-kernel-trace": (rel, b""), "header-only": (rel, data.partition(b"\n")[0])}
    for label, at in _cuts(data).items():
        out[f"kernel-trace-{label}"] = (rel, data[:at])
    return out


@pytest.mark.parametrize("cls", DIR_IMPORTERS, ids=_ids(DIR_IMPORTERS))
def test_directory_with_a_spoiled_file(cls: type[Importer], tmp_path: Path) -> None:
    for ref in SAMPLES.get(cls.name, ()):
        run = FIXTURES / ref
        full = cls().read(run)
        for label, (rel, raw) in _dir_variants(run).items():
            d = tmp_path / Path(ref).name / label
            shutil.copytree(run, d)
            (d / rel).write_bytes(raw)
            _read_outcome(cls, d, functools.partial(_conforms, full=full))


# --------------------------------------------------------------------------- aaco import


def _assert_cli_contract(target: Path, root: Path) -> None:
    proc = aaco("import", str(target), "--output", str(root), "--format", "none")
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, proc.stderr
        assert proc.returncode in (1, 2), (proc.returncode, proc.stderr)
        assert not root.exists() or list(iter_sessions(root)) == []
    if root.exists():
        # nothing half-written: no staging folder, and every folder a published bundle
        assert [p for p in root.rglob("*.partial")] == []
        for day in (p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
            for bundle in day.iterdir():
                assert Session.load(bundle).status == "completed", bundle


@pytest.mark.parametrize("case", list(EMPTY))
def test_cli_empty_file(case: str, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(EMPTY[case])
    _assert_cli_contract(path, tmp_path / "sessions")


def _cli_cases() -> list[tuple[str, str]]:
    return [(name, refs[0]) for name, refs in SAMPLES.items() if refs]


@pytest.mark.parametrize(("name", "ref"), _cli_cases(), ids=[n for n, _ in _cli_cases()])
@pytest.mark.parametrize("cut", ["50%", "mid-line"])
def test_cli_truncated_sample(
    name: str, ref: str, cut: str, rocpd_db: Path, tmp_path: Path
) -> None:
    src = _sample(ref, rocpd_db)
    if src.is_dir():  # the folder with its kernel trace cut short
        target = tmp_path / "run"
        shutil.copytree(src, target)
        file = next(target.rglob("*_kernel_trace.csv"))
    else:
        target = file = tmp_path / _plain_name(src)
        shutil.copyfile(src, file)
    data = _plain(file)
    file.write_bytes(data[: _cuts(data).get(cut, len(data) // 2)])
    _assert_cli_contract(target, tmp_path / "sessions")


@pytest.mark.parametrize("cls", DIR_IMPORTERS, ids=_ids(DIR_IMPORTERS))
def test_cli_directory_with_an_empty_file(cls: type[Importer], tmp_path: Path) -> None:
    for ref in SAMPLES.get(cls.name, ()):
        target = tmp_path / Path(ref).name
        shutil.copytree(FIXTURES / ref, target)
        next(target.rglob("*_kernel_trace.csv")).write_bytes(b"")
        _assert_cli_contract(target, tmp_path / "sessions")
