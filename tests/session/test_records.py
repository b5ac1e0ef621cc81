"""Records of session.json and inference_summary.json: lossless round trips of real files,
and the one session.json writer writing what ``atomic_write_json`` writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from aaco.errors import BundleError
from aaco.session.bundle import atomic_write_json, to_json
from aaco.session.records import (
    Failure,
    InferenceSummary,
    ModelInfo,
    Record,
    RunConfig,
    SessionError,
    SessionMeta,
    WorkerUsage,
    decode,
    encode,
    read_session_meta,
    write_session_meta,
)

FIXTURES = Path(__file__).parent / "fixtures"
RECORDS = FIXTURES / "records"
#: every session.json committed under tests/session/fixtures (the samples of aaco run at
#: f9a9957 and the old-format bundles)
SESSION_FILES = sorted(FIXTURES.rglob("session.json"))
SUMMARY_FILES = sorted(
    [*RECORDS.rglob("inference_summary.json"), *FIXTURES.glob("bundle_v*/metrics/*summary.json")]
)


def _id(p: Path) -> str:
    return str(p.relative_to(FIXTURES))


def _declared(record: Record) -> Record:
    """``record`` without the key order it was read with, at every level: as if built in
    code."""
    updates: dict[str, Any] = {"key_order": ()}
    for name in record.__struct_fields__:
        value = getattr(record, name)
        if isinstance(value, Record):
            updates[name] = _declared(value)
        elif isinstance(value, tuple) and any(isinstance(v, Record) for v in value):
            updates[name] = tuple(_declared(v) for v in value)
    return msgspec.structs.replace(record, **updates)


def _extras(record: Record) -> list[dict[str, Any]]:
    out = [record.extra] if record.extra else []
    for name in record.__struct_fields__:
        value = getattr(record, name)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, Record):
                out += _extras(v)
    return out


def test_fixtures_are_there() -> None:
    names = {_id(p) for p in SESSION_FILES}
    assert {"records/ort/session.json", "records/torch/session.json"} <= names
    assert "bundle_v1/session.json" in names
    assert len(SUMMARY_FILES) >= 3


@pytest.mark.parametrize("path", SESSION_FILES, ids=_id)
def test_session_meta_round_trips_byte_for_byte(path: Path) -> None:
    raw = path.read_bytes()
    meta = decode(raw, SessionMeta)
    assert meta.to_data() == json.loads(raw)
    assert encode(meta) == raw
    # every key of the committed files is a declared one
    assert _extras(meta) == []


@pytest.mark.parametrize("path", SUMMARY_FILES, ids=_id)
def test_inference_summary_round_trips_byte_for_byte(path: Path) -> None:
    raw = path.read_bytes()
    summary = decode(raw, InferenceSummary)
    assert summary.to_data() == json.loads(raw)
    assert encode(summary) == raw
    assert _extras(summary) == []


@pytest.mark.parametrize(
    ("path", "cls"),
    [*((p, SessionMeta) for p in SESSION_FILES), *((p, InferenceSummary) for p in SUMMARY_FILES)],
    ids=lambda v: _id(v) if isinstance(v, Path) else v.__name__,
)
def test_plain_msgspec_decode_and_encode_give_the_same_data(path: Path, cls: type[Record]) -> None:
    """msgspec's own decoder and encoder, without extras or key order, lose nothing of the
    committed files (they hold no unknown key)."""
    raw = path.read_bytes()
    record = msgspec.json.decode(raw, type=cls)
    assert json.loads(msgspec.json.encode(record)) == json.loads(raw)


def test_the_samples_are_in_declared_order_and_typed() -> None:
    ort = read_session_meta(RECORDS / "ort")
    torch = read_session_meta(RECORDS / "torch")
    # aaco run writes the keys in the records' declared order (a record built in code
    # writes the same bytes), but for torch's inputs: name, shape, dtype (ONNX Runtime's:
    # name, dtype, shape, ...)
    assert encode(_declared(ort)) == (RECORDS / "ort" / "session.json").read_bytes()
    torch_data = json.loads((RECORDS / "torch" / "session.json").read_bytes())
    assert _declared(torch).to_data() == torch_data
    assert list(_declared(torch).to_data()) == list(torch_data)
    assert list(_declared(torch).to_data()["run"]) == list(torch_data["run"])
    assert _declared(ort) == ort  # equal: the same data, in any order
    assert isinstance(ort.run, RunConfig) and isinstance(torch.run, RunConfig)
    assert ort.run.batch == 1 and ort.run.profile_mode == "ops"
    assert ort.run.device is UNSET and torch.run.device == "cpu"
    assert torch.run.compile is False and torch.run.torch is not None
    assert isinstance(ort.worker, WorkerUsage)
    # written as a float by wait4's reading: stays a float
    assert isinstance(ort.worker.wait4_max_rss_bytes, float)
    assert isinstance(ort.worker.max_rss_bytes, int)
    assert ort.failures == ()
    assert ort.error is None and ort.tag is None
    assert ort.kind is UNSET  # absent: never written back


def test_old_format_order_is_kept() -> None:
    """bundle_v1's worker section predates max_rss_source and lists its keys in another
    order: the record keeps it, and its float peak RSS."""
    meta = read_session_meta(FIXTURES / "bundle_v1")
    assert isinstance(meta.worker, WorkerUsage)
    assert meta.worker.key_order == (
        "wall_s",
        "returncode",
        "max_rss_bytes",
        "cpu_user_s",
        "cpu_system_s",
    )
    assert meta.worker.max_rss_bytes == 127143936.0
    assert isinstance(meta.worker.max_rss_bytes, float)
    assert meta.worker.max_rss_source is UNSET
    assert isinstance(meta.run, RunConfig) and meta.run.profile_mode is UNSET


@pytest.mark.parametrize("path", SESSION_FILES, ids=_id)
def test_write_session_meta_writes_what_atomic_write_json_writes(
    path: Path, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    data = json.loads(path.read_bytes())
    atomic_write_json(tmp_path / "a" / "session.json", data)
    write_session_meta(tmp_path / "b", read_session_meta(path.parent))
    written = (tmp_path / "b" / "session.json").read_bytes()
    assert written == (tmp_path / "a" / "session.json").read_bytes()
    assert written == path.read_bytes()
    mode = (tmp_path / "b" / "session.json").stat().st_mode
    assert mode == (tmp_path / "a" / "session.json").stat().st_mode
    assert not [p for p in (tmp_path / "b").iterdir() if p.name != "session.json"]


def _write_raw(bundle: Path, data: dict[str, Any]) -> bytes:
    bundle.mkdir(parents=True, exist_ok=True)
    atomic_write_json(bundle / "session.json", data)
    return (bundle / "session.json").read_bytes()


def test_other_writers_orders_round_trip(tmp_path: Path) -> None:
    """Writers other than aaco run order keys their own way: a bundle salvaged before its
    first write, and one that received an import after its run (native_ops_rows before
    imports, unlike aaco import). Reading and writing back changes no byte."""
    salvaged = {
        "format_version": 1,
        "session_id": "20261127_000000_abcdef",
        "status": "failed",
        "error": {"message": "interrupted (Ctrl-C or SIGTERM)", "stage": "aaco"},
        "finished_utc": "2026-11-27T00:00:01.000Z",
    }
    raw = _write_raw(tmp_path / "salvaged", salvaged)
    meta = read_session_meta(tmp_path / "salvaged")
    assert meta.key_order == tuple(salvaged)
    assert meta.error == SessionError(message="interrupted (Ctrl-C or SIGTERM)", stage="aaco")
    write_session_meta(tmp_path / "salvaged", meta)
    assert (tmp_path / "salvaged" / "session.json").read_bytes() == raw

    imported = json.loads((RECORDS / "ort" / "session.json").read_bytes())
    imported["native_ops_rows"] = 10
    imported["imports"] = [
        {
            "imported_utc": "2026-11-27T00:00:02.000Z",
            "importers": ["onnxruntime"],
            "events": 24,
            "rows": {"kernels": 8, "ops": 10},
        }
    ]
    raw = _write_raw(tmp_path / "imported", imported)
    meta = read_session_meta(tmp_path / "imported")
    assert meta.key_order[-2:] == ("native_ops_rows", "imports")
    write_session_meta(tmp_path / "imported", meta)
    assert (tmp_path / "imported" / "session.json").read_bytes() == raw


def test_real_import_writers_round_trip(tmp_path: Path) -> None:
    """What aaco import writes (a new bundle, and an import into a run's bundle) is all
    declared and round-trips byte for byte."""
    from aaco.pipeline import import_into, import_new

    trace = Path(__file__).parents[1] / "importers" / "fixtures" / "ort" / "cuda_ep_profile.json"
    new = import_new([trace], tmp_path / "sessions", tag="t", argv=["aaco", "import"])
    into = tmp_path / "into"
    shutil.copytree(FIXTURES / "bundle_v1", into)
    import_into(into, [trace])
    for bundle in (new.path, into):
        raw = (bundle / "session.json").read_bytes()
        meta = decode(raw, SessionMeta)
        assert _extras(meta) == []
        assert encode(meta) == raw
    assert read_session_meta(new.path).kind == "import"


def test_unknown_keys_are_kept_in_place(tmp_path: Path) -> None:
    data = json.loads((RECORDS / "torch" / "session.json").read_bytes())
    data = {"future_top": {"a": 1}, **data, "future_last": [1, 2.5, None]}
    data["run"]["future_run"] = "x"
    data["run"]["inputs"][0]["future_input"] = 3
    data["failures"] = [{"stage": "diagnose", "error": "boom", "future_failure": True}]
    raw = _write_raw(tmp_path / "b", data)
    meta = read_session_meta(tmp_path / "b")
    assert meta.extra == {"future_top": {"a": 1}, "future_last": [1, 2.5, None]}
    assert isinstance(meta.run, RunConfig) and meta.run.extra == {"future_run": "x"}
    assert meta.run.inputs is not UNSET and meta.run.inputs[0].extra == {"future_input": 3}
    assert meta.failures == (
        Failure(stage="diagnose", error="boom", extra={"future_failure": True}),
    )
    assert meta.to_data() == data
    write_session_meta(tmp_path / "b", meta)
    assert (tmp_path / "b" / "session.json").read_bytes() == raw
    # msgspec's own decoder tolerates them (and leaves them out)
    plain = msgspec.json.decode(raw, type=SessionMeta)
    assert plain.extra == {} and plain.session_id == meta.session_id


def test_a_changed_record_adds_keys_at_the_end_like_a_dict(tmp_path: Path) -> None:
    """Read, change, write: the same bytes as the same change made to the dict, which is
    how diagnose and import update session.json today."""
    data = json.loads((FIXTURES / "bundle_v1" / "session.json").read_bytes())
    del data["failures"]
    _write_raw(tmp_path / "b", data)
    meta = read_session_meta(tmp_path / "b")
    assert meta.failures is UNSET
    failure = Failure(stage="diagnose", error="ValueError: x")
    changed = msgspec.structs.replace(meta, failures=(failure,), status="failed")
    write_session_meta(tmp_path / "b", changed)
    data.setdefault("failures", []).append({"stage": "diagnose", "error": "ValueError: x"})
    data["status"] = "failed"
    assert (tmp_path / "b" / "session.json").read_bytes() == to_json(data).encode()


def test_a_record_built_in_code_reads_back_equal(tmp_path: Path) -> None:
    meta = SessionMeta(
        format_version=1,
        session_id="20261127_000000_abcdef",
        status="running",
        error=None,
        tag=None,
        command_line=("aaco", "run"),
        model=ModelInfo(name="mlp", path="/m.onnx", source="builtin"),
        run=RunConfig(framework="onnxruntime", batch=1, threads=None, duration_s=2),
        failures=(),
    )
    write_session_meta(tmp_path, meta)
    assert read_session_meta(tmp_path) == meta
    data = json.loads((tmp_path / "session.json").read_bytes())
    declared = ["format_version", "session_id", "status", "error", "tag", "command_line"]
    assert list(data) == [*declared, "model", "run", "failures"]
    assert data["run"] == {"framework": "onnxruntime", "batch": 1, "duration_s": 2, "threads": None}
    assert isinstance(data["run"]["duration_s"], int)  # an int stays an int


def test_records_are_frozen() -> None:
    meta = SessionMeta(format_version=1)
    with pytest.raises(AttributeError):
        meta.status = "completed"  # type: ignore[misc]


def test_the_reader_refuses_what_is_not_a_session(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_session_meta(tmp_path)
    (tmp_path / "session.json").write_text("{not json")
    with pytest.raises(BundleError, match="unreadable JSON"):
        read_session_meta(tmp_path)
    (tmp_path / "session.json").write_text('{"status": "completed"}')
    with pytest.raises(BundleError, match="no format_version"):
        read_session_meta(tmp_path)
    (tmp_path / "session.json").write_text('{"format_version": 99}')
    with pytest.raises(BundleError, match="format_version 99 is not supported"):
        read_session_meta(tmp_path)
    (tmp_path / "session.json").write_text('{"format_version": 1, "run": {"batch": "one"}}')
    with pytest.raises(BundleError, match=r"malformed .*run\.batch"):
        read_session_meta(tmp_path)
    with pytest.raises(msgspec.ValidationError):
        decode(b"[1, 2]", SessionMeta)


def test_equality_hash_and_repr_ignore_the_key_order() -> None:
    read = Failure.from_data({"error": "boom", "stage": "diagnose"})
    built = Failure(stage="diagnose", error="boom")
    assert read.key_order == ("error", "stage") and built.key_order == ()
    assert read == built and hash(read) == hash(built)
    assert len({read, built}) == 1
    assert read != Failure(stage="diagnose", error="other")
    assert repr(read) == "Failure(stage='diagnose', error='boom')"
    assert (
        repr(SessionMeta(format_version=1, tag=None)) == "SessionMeta(format_version=1, tag=None)"
    )
    assert read.to_data() == {"error": "boom", "stage": "diagnose"}
    assert list(built.to_data()) == ["stage", "error"]


def test_keys_named_like_the_records_own_fields_are_plain_extras() -> None:
    data = {"stage": "s", "error": "e", "__key_order__": 5, "__extra__": "x"}
    failure = Failure.from_data(data)
    assert failure.extra == {"__key_order__": 5, "__extra__": "x"}
    assert failure.to_data() == data and list(failure.to_data()) == list(data)
