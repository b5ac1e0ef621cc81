"""`aaco export prometheus` and :mod:`aaco.lake.prometheus`: real bundles (make_bundle, with
env.json naming NVIDIA and AMD GPUs), the exposition text parsed back with
prometheus_client's parser, a real HTTP server standing in for the Pushgateway."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from aaco.cli import main
from aaco.errors import InputError, UsageError
from aaco.lake import prometheus
from aaco.lake.rows import FLEET_SCHEMA, fleet_row
from aaco.session.bundle import Session, iter_sessions
from aaco.testing.bundles import make_bundle

H100 = "NVIDIA H100 80GB HBM3"
H100_UUID = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
MI300X = "AMD Instinct MI300X"
MI300X_UUID = "ccff74a1-0000-1000-80e0-c6d49f5b0d86"
LATENCY = "aaco_inference_latency_seconds"
THROUGHPUT = "aaco_inference_throughput_items_per_second"
INFO = "aaco_session_info"
CREATED = "aaco_session_created_timestamp_seconds"


# --- helpers -----------------------------------------------------------------------------


def _bundle(
    root: Path,
    *,
    p50: float | None = 10.0,
    p90: float | None = 11.0,
    p99: float | None = 12.5,
    items_per_s: float | None = 400.0,
    iterations_per_s: float | None = 100.0,
    created: str = "2026-01-02T03:04:05.000Z",
    status: str = "completed",
    batch: int = 4,
    model: str = "fake",
    tag: str | None = None,
    gpu: dict[str, Any] | None = None,
    hostname: str = "node-1",
) -> Session:
    """A real published bundle whose summary holds exactly these figures, created at
    ``created``, on ``hostname``; with ``gpu`` (an env.json device) the run used that GPU."""
    latency = {"p50": p50, "p90": p90, "p99": p99, "count": 3}
    throughput = {"items_per_s": items_per_s, "iterations_per_s": iterations_per_s}
    session = make_bundle(
        root,
        [10.0, 11.0, 12.0],
        model=model,
        tag=tag,
        batch=batch,
        status=status,
        error=None if status == "completed" else "boom",
        summary_extra={"latency_ms": latency, "throughput": throughput},
    )
    meta_file = session.path / "session.json"
    meta = json.loads(meta_file.read_text())
    meta["created_utc"] = created
    env: dict[str, Any] = {
        "hostname": hostname,
        "cpu": {"model": "AMD EPYC 9654", "architecture": "x86_64"},
        "gpus": {"devices": []},
    }
    if gpu is not None:
        provider = "CUDAExecutionProvider" if gpu["vendor"] == "nvidia" else "ROCMExecutionProvider"
        meta["backend"]["provider"] = provider
        env["gpus"]["devices"].append({"index": 0, "memory_bytes": 1 << 30, **gpu})
    meta_file.write_text(json.dumps(meta))
    (session.path / "env.json").write_text(json.dumps(env))
    return Session.load(session.path)


def _nvidia() -> dict[str, Any]:
    return {"vendor": "nvidia", "name": H100, "driver": "550.144.03", "uuid": H100_UUID}


def _amd() -> dict[str, Any]:
    return {"vendor": "amd", "name": MI300X, "driver": "6.12.12", "uuid": MI300X_UUID}


def _row(**values: Any) -> dict[str, Any]:
    """A fleet row: every FLEET_SCHEMA column None (unknown) but ``values``."""
    row: dict[str, Any] = dict.fromkeys(FLEET_SCHEMA.names)
    row.update(status="completed", kind="run", vendor="cpu", arch="x86_64")
    row.update(values)
    return row


def _parse(text: str) -> dict[str, Metric]:
    """The families of ``text``, checked for what node_exporter and the Pushgateway
    require: no client timestamps, one sample per label set, one label-name set per family."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for family in families.values():
        assert family.type == "gauge", family.name
        seen = [tuple(sorted(s.labels.items())) for s in family.samples]
        assert len(seen) == len(set(seen)), f"duplicate label sets in {family.name}"
        assert len({tuple(sorted(s.labels)) for s in family.samples}) == 1, family.name
        assert all(s.timestamp is None for s in family.samples)
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert len(line.rsplit("}", 1)[-1].split()) == 1, line  # a value, no timestamp
    return families


def _value(families: dict[str, Metric], name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [
        s.value
        for s in families[name].samples
        if all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return float(found[0])


def _labels(families: dict[str, Metric], name: str, **labels: str) -> dict[str, str]:
    found = [
        s.labels
        for s in families[name].samples
        if all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return dict(found[0])


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``aaco args`` in this process: exit code, stdout, stderr."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    captured = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), captured.out, captured.err


def _one_line_error(err: str, *fragments: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


class _Gateway:
    """A tiny HTTP server standing in for a Pushgateway: records each request's method,
    path and body, and answers ``status`` (with ``reply`` as the body)."""

    def __init__(self, status: int = 200, reply: bytes = b"") -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                gateway.requests.append((self.command, self.path, body))
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_PUT = do_POST = _record

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test reads the requests, not a log."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def gateway() -> Iterator[_Gateway]:
    gw = _Gateway()
    yield gw
    gw.close()


def _free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --- the metrics -------------------------------------------------------------------------


def test_cpu_session_exports_latency_quantiles_and_throughput_in_base_units(
    tmp_path: Path,
) -> None:
    session = _bundle(tmp_path / "s", tag="nightly")
    row = fleet_row(session)
    families = _parse(prometheus.render([row]))
    assert _value(families, LATENCY, quantile="0.5") == pytest.approx(0.010)
    assert _value(families, LATENCY, quantile="0.9") == pytest.approx(0.011)
    assert _value(families, LATENCY, quantile="0.99") == pytest.approx(0.0125)
    assert _value(families, THROUGHPUT) == 400.0
    assert _value(families, "aaco_inference_iterations_per_second") == 100.0
    assert _value(families, "aaco_inference_measured_iterations") == 3.0
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()
    assert _value(families, CREATED) == created
    labels = _labels(families, THROUGHPUT)
    settings = prometheus.series_labels(row)["settings"]
    assert len(settings) == 12 and all(c in "0123456789abcdef" for c in settings)
    assert labels == {
        "kind": "run", "model": "fake", "backend": "fake", "provider": "cpu", "batch": "4",
        "threads": "", "settings": settings, "tag": "nightly", "vendor": "cpu",
        "arch": "x86_64", "hostname": "node-1", "Hostname": "", "gpu": "", "UUID": "",
        "device": "", "modelName": "", "gpu_id": "", "gpu_uuid": "",
    }  # fmt: skip
    info = _labels(families, INFO)
    assert info["session_id"] == session.session_id
    assert info["device_name"] == "AMD EPYC 9654"
    assert info["hardware_fingerprint"] == row["hardware_fingerprint"]
    assert _value(families, INFO) == 1.0
    assert _value(families, "aaco_sessions", status="completed") == 1.0
    assert "serving" not in " ".join(families)  # no serving figures: no serving families


def test_nvidia_session_carries_dcgm_exporter_labels(tmp_path: Path) -> None:
    families = _parse(prometheus.render([fleet_row(_bundle(tmp_path / "s", gpu=_nvidia()))]))
    labels = _labels(families, LATENCY, quantile="0.99")
    # dcgm-exporter's names and values: gpu index, UUID, device nvidia<index>, modelName;
    # the host both as Hostname (< 4.8.3) and hostname (>= 4.8.3)
    assert labels["gpu"] == "0"
    assert labels["UUID"] == H100_UUID
    assert labels["device"] == "nvidia0"
    assert labels["modelName"] == H100
    assert labels["Hostname"] == labels["hostname"] == "node-1"
    assert labels["vendor"] == "nvidia" and labels["provider"] == "CUDAExecutionProvider"
    assert labels["gpu_id"] == labels["gpu_uuid"] == ""  # AMD's labels: empty, so absent
    assert _value(families, LATENCY, UUID=H100_UUID, quantile="0.99") == pytest.approx(0.0125)
    info = _labels(families, INFO)
    assert info["DCGM_FI_DRIVER_VERSION"] == info["DCGM_FI_SYSTEM_DRIVER_VERSION"] == "550.144.03"
    assert info["driver_version"] == "550.144.03"
    assert info["device_name"] == H100


def test_amd_session_carries_device_metrics_exporter_labels(tmp_path: Path) -> None:
    families = _parse(prometheus.render([fleet_row(_bundle(tmp_path / "s", gpu=_amd()))]))
    labels = _labels(families, THROUGHPUT)
    assert labels["gpu_id"] == "0"
    assert labels["gpu_uuid"] == MI300X_UUID
    assert labels["hostname"] == "node-1"
    assert labels["vendor"] == "amd" and labels["provider"] == "ROCMExecutionProvider"
    for dcgm in ("gpu", "UUID", "device", "modelName", "Hostname"):
        assert labels[dcgm] == "", dcgm
    info = _labels(families, INFO)
    assert info["driver_version"] == "6.12.12"
    assert info["DCGM_FI_DRIVER_VERSION"] == ""
    assert info["device_name"] == MI300X


def test_unknown_values_are_omitted_never_zero(tmp_path: Path) -> None:
    row = fleet_row(_bundle(tmp_path / "s", p90=None, items_per_s=None))
    families = _parse(prometheus.render([row]))
    quantiles = sorted(s.labels["quantile"] for s in families[LATENCY].samples)
    assert quantiles == ["0.5", "0.99"]  # no p90 sample, not a 0
    assert THROUGHPUT not in families
    assert _value(families, "aaco_inference_iterations_per_second") == 100.0
    # NaN and infinity are no measurements either; a row without a creation time has no
    # created sample but still its results
    odd = _row(p50_ms=float("nan"), p99_ms=float("inf"), throughput=5.0, session_id="x")
    families = _parse(prometheus.render([odd]))
    assert LATENCY not in families and CREATED not in families
    assert _value(families, THROUGHPUT) == 5.0


def test_newest_completed_session_per_series_only(tmp_path: Path) -> None:
    root = tmp_path / "s"
    old = _bundle(root, p99=20.0, created="2026-01-01T00:00:00.000Z")
    new = _bundle(root, p99=12.5, created="2026-01-02T00:00:00.000Z")
    # newer still, but failed / another batch / another host: not the same result
    _bundle(root, p99=99.0, created="2026-01-03T00:00:00.000Z", status="failed")
    other_batch = _bundle(root, p99=7.0, batch=8, created="2025-12-01T00:00:00.000Z")
    other_host = _bundle(root, p99=8.0, hostname="node-2")
    rows = [fleet_row(Session.load(p)) for p in iter_sessions(root)]
    assert {r["session_id"] for r in rows} >= {old.session_id, new.session_id}
    families = _parse(prometheus.render(rows))
    p99 = {
        (s.labels["batch"], s.labels["hostname"]): s.value
        for s in families[LATENCY].samples
        if s.labels["quantile"] == "0.99"
    }
    assert p99 == pytest.approx({("4", "node-1"): 0.0125, ("8", "node-1"): 0.007,
                                 ("4", "node-2"): 0.008})  # fmt: skip
    ids = {s.labels["session_id"] for s in families[INFO].samples}
    assert ids == {new.session_id, other_batch.session_id, other_host.session_id}
    assert _value(families, CREATED, batch="4", hostname="node-1") == (
        datetime(2026, 1, 2, tzinfo=timezone.utc).timestamp()
    )
    assert _value(families, "aaco_sessions", status="completed") == 4.0
    assert _value(families, "aaco_sessions", status="failed") == 1.0


def test_a_failed_newer_session_leaves_the_last_completed_one() -> None:
    rows = [
        _row(session_id="a", created_utc="2026-01-01T00:00:00Z", p50_ms=5.0),
        _row(session_id="b", created_utc="2026-01-02T00:00:00Z", p50_ms=1.0, status="failed"),
        _row(session_id="c", created_utc="2026-01-03T00:00:00Z", status="running"),
    ]
    families = _parse(prometheus.render(rows))
    assert _value(families, LATENCY, quantile="0.5") == pytest.approx(0.005)
    assert _labels(families, INFO)["session_id"] == "a"
    assert _value(families, "aaco_sessions", status="running") == 1.0
    # nothing completed: nothing but the counts
    families = _parse(prometheus.render(rows[1:]))
    assert set(families) == {"aaco_sessions"}


def test_serving_session_exports_ttft_and_tokens_per_second() -> None:
    row = _row(
        kind="serving", model="llama", backend="vllm", session_id="srv",
        created_utc="2026-03-01T10:00:00Z", ttft_p50_ms=80.0, ttft_p99_ms=250.0,
        output_tokens_per_s=1234.5,
    )  # fmt: skip
    families = _parse(prometheus.render([row]))
    assert _value(families, "aaco_serving_ttft_seconds", quantile="0.5") == pytest.approx(0.08)
    assert _value(families, "aaco_serving_ttft_seconds", quantile="0.99") == pytest.approx(0.25)
    assert _value(families, "aaco_serving_output_tokens_per_second", kind="serving") == 1234.5
    assert LATENCY not in families


def test_label_values_are_escaped_and_round_trip() -> None:
    tag = 'ci "night"\\ly\n<b>'
    families = _parse(prometheus.render([_row(tag=tag, model="m{1}", p50_ms=1.0)]))
    labels = _labels(families, LATENCY)
    assert labels["tag"] == tag
    assert labels["model"] == "m{1}"


# --- textfile ----------------------------------------------------------------------------


def test_textfile_is_written_atomically_and_world_readable(tmp_path: Path) -> None:
    out = tmp_path / "aaco.prom"
    out.write_text("stale\n")
    n = prometheus.write_textfile(out, [_row(session_id="a", p99_ms=12.5)])
    assert n == 1
    families = _parse(out.read_text())
    assert _value(families, LATENCY, quantile="0.99") == pytest.approx(0.0125)
    assert out.read_text().endswith("\n")
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aaco.prom"]  # no temporary left


def test_textfile_failed_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "aaco.prom"
    out.write_text("old\n")

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(InputError, match=r"cannot write .*aaco\.prom: Permission denied"):
        prometheus.write_textfile(out, [_row(p50_ms=1.0)])
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aaco.prom"]


def test_textfile_must_end_in_prom_and_its_folder_exist(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"must end in \.prom"):
        prometheus.write_textfile(tmp_path / "aaco.txt", [])
    with pytest.raises(InputError, match="no such directory"):
        prometheus.write_textfile(tmp_path / "missing" / "aaco.prom", [])
    assert list(tmp_path.iterdir()) == []


# --- push --------------------------------------------------------------------------------


def test_push_puts_the_metrics_under_job_and_instance(gateway: _Gateway) -> None:
    n = prometheus.push(
        [_row(p99_ms=12.5, hostname="gpu-node-1")],
        gateway.url,
        job="aaco",
        grouping_key={"instance": "gpu-node-1"},
    )
    assert n == 1
    [(method, path, body)] = gateway.requests
    assert (method, path) == ("PUT", "/metrics/job/aaco/instance/gpu-node-1")
    families = _parse(body.decode())
    assert _value(families, LATENCY, quantile="0.99") == pytest.approx(0.0125)


def test_push_refused_by_the_gateway_is_one_line() -> None:
    gw = _Gateway(400, b"pushed metrics are invalid or inconsistent\nwith existing metrics")
    try:
        with pytest.raises(InputError) as exc:
            prometheus.push([_row(p50_ms=1.0)], gw.url)
    finally:
        gw.close()
    message = str(exc.value)
    assert "\n" not in message
    assert "HTTP 400" in message
    assert "pushed metrics are invalid or inconsistent with existing metrics" in message


def test_push_to_an_unreachable_gateway_is_an_input_error() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(InputError, match=f"cannot reach Pushgateway {url}"):
        prometheus.push([_row(p50_ms=1.0)], url, timeout=5)
    with pytest.raises(UsageError, match="job name is empty"):
        prometheus.push([], url, job="")


# --- the command -------------------------------------------------------------------------


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    """A sessions root: an NVIDIA run (old and new), an AMD run, a CPU run of another
    model, a failed run, and one unreadable bundle."""
    root = tmp_path / "sessions"
    _bundle(root, p99=30.0, gpu=_nvidia(), created="2026-01-01T00:00:00.000Z")
    _bundle(root, p99=12.5, gpu=_nvidia(), created="2026-01-02T00:00:00.000Z")
    _bundle(root, p99=9.0, gpu=_amd(), hostname="node-2")
    _bundle(root, p99=50.0, model="other", created="2026-01-02T00:00:00.000Z")
    _bundle(root, p99=1.0, status="failed", gpu=_nvidia(), created="2026-02-01T00:00:00.000Z")
    broken = root / "2026-01-05" / "20260105_000000_broken"
    broken.mkdir(parents=True)
    (broken / "session.json").write_text("{not json")
    return root


def test_cli_prints_the_metrics_to_stdout(
    capsys: pytest.CaptureFixture[str], sessions: Path
) -> None:
    code, out, err = _cli(capsys, "export", "prometheus", "--sessions", str(sessions))
    assert code == 0, err
    assert err == f"skipped 1 unreadable bundle(s) under {sessions}\n"
    families = _parse(out)
    p99 = {
        (s.labels["model"], s.labels["vendor"]): s.value
        for s in families[LATENCY].samples
        if s.labels["quantile"] == "0.99"
    }
    assert p99 == pytest.approx({("fake", "nvidia"): 0.0125, ("fake", "amd"): 0.009,
                                 ("other", "cpu"): 0.05})  # fmt: skip
    assert _value(families, LATENCY, UUID=H100_UUID, quantile="0.99") == pytest.approx(0.0125)
    assert _value(families, LATENCY, gpu_uuid=MI300X_UUID, quantile="0.99") == pytest.approx(0.009)
    assert _value(families, "aaco_sessions", status="completed") == 4.0
    assert _value(families, "aaco_sessions", status="failed") == 1.0


def test_cli_filters_by_model_and_backend(
    capsys: pytest.CaptureFixture[str], sessions: Path
) -> None:
    args = ("export", "prometheus", "--sessions", str(sessions))
    code, out, err = _cli(capsys, *args, "--model", "other")
    assert code == 0, err
    families = _parse(out)
    assert {s.labels["model"] for s in families[LATENCY].samples} == {"other"}
    assert _value(families, "aaco_sessions", status="completed") == 1.0
    code, out, err = _cli(capsys, *args, "--backend", "none-such")
    assert code == 0, err
    assert _parse(out) == {}


def test_cli_writes_a_textfile(
    capsys: pytest.CaptureFixture[str], sessions: Path, tmp_path: Path
) -> None:
    target = tmp_path / "textfile"
    target.mkdir()
    out_file = target / "aaco.prom"
    code, out, err = _cli(
        capsys, "export", "prometheus", "--sessions", str(sessions), "--textfile", str(out_file)
    )
    assert code == 0, err
    assert out == ""
    assert f"wrote {out_file}: 3 series from 5 session(s)" in err
    families = _parse(out_file.read_text())
    assert _value(families, LATENCY, UUID=H100_UUID, quantile="0.99") == pytest.approx(0.0125)
    assert [p.name for p in target.iterdir()] == ["aaco.prom"]


def test_cli_usage_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], sessions: Path, tmp_path: Path
) -> None:
    base = ("export", "prometheus", "--sessions", str(sessions))
    code, _, err = _cli(capsys, *base, "--textfile", str(tmp_path / "aaco.txt"))
    assert code == 2
    _one_line_error(err, "--textfile", "must end in .prom")
    assert not (tmp_path / "aaco.txt").exists()
    code, _, err = _cli(capsys, *base, "--job", "x")
    assert code == 2
    _one_line_error(err, "--job needs --push")
    code, _, err = _cli(capsys, *base, "--lake", str(tmp_path / "lake"))
    assert code == 2
    _one_line_error(err, "--lake and --sessions are exclusive")
    code, _, err = _cli(capsys, "export", "prometheus", "--sessions", str(tmp_path / "none"))
    assert code == 2
    _one_line_error(err, "no such sessions root")


def test_cli_pushes_to_a_gateway(
    capsys: pytest.CaptureFixture[str], sessions: Path, gateway: _Gateway
) -> None:
    code, out, err = _cli(
        capsys, "export", "prometheus", "--sessions", str(sessions), "--push", gateway.url,
        "--job", "bench", "--instance", "gpu-node-1",
    )  # fmt: skip
    assert code == 0, err
    assert out == ""
    assert f"pushed 3 series from 5 session(s) to {gateway.url}" in err
    [(method, path, body)] = gateway.requests
    assert (method, path) == ("PUT", "/metrics/job/bench/instance/gpu-node-1")
    families = _parse(body.decode())
    assert _value(families, LATENCY, UUID=H100_UUID, quantile="0.99") == pytest.approx(0.0125)
    # without --instance: this host's name
    code, _, err = _cli(
        capsys, "export", "prometheus", "--sessions", str(sessions), "--push", gateway.url
    )
    assert code == 0, err
    assert gateway.requests[-1][1].startswith("/metrics/job/aaco/instance/")


def test_cli_unreachable_gateway_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], sessions: Path
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    code, out, err = _cli(
        capsys, "export", "prometheus", "--sessions", str(sessions), "--push", url
    )
    assert code == 2
    assert out == ""
    lines = [ln for ln in err.splitlines() if not ln.startswith("skipped ")]
    _one_line_error("\n".join(lines), "aaco: error:", f"cannot reach Pushgateway {url}")


def test_cli_reads_a_lake(
    capsys: pytest.CaptureFixture[str], sessions: Path, tmp_path: Path
) -> None:
    from aaco.lake.export import export_lake

    lake = tmp_path / "lake"
    export_lake(sessions, lake)
    code, out, err = _cli(capsys, "export", "prometheus", "--lake", str(lake))
    assert code == 0, err
    families = _parse(out)
    assert _value(families, LATENCY, UUID=H100_UUID, quantile="0.99") == pytest.approx(0.0125)
    assert _value(families, LATENCY, gpu_uuid=MI300X_UUID, quantile="0.99") == pytest.approx(0.009)
    # the same snapshot as from the sessions root
    code, direct, _ = _cli(capsys, "export", "prometheus", "--sessions", str(sessions))
    assert code == 0
    assert _parse(out)[LATENCY].samples == _parse(direct)[LATENCY].samples


def test_python_m_aaco_export_prometheus(sessions: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "aaco", "export", "prometheus", "--sessions", str(sessions)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, NO_COLOR="1"),
    )
    assert proc.returncode == 0, proc.stderr
    families = _parse(proc.stdout)
    assert _value(families, LATENCY, UUID=H100_UUID, quantile="0.99") == pytest.approx(0.0125)
