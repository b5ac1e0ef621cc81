"""How exact is ``aaco llm bench``? Whole commands against the scripted server.

Issue #17's targets, measured with the real command (``python -m aaco llm bench``) against
:mod:`aaco.testing.llm_server` in a process of its own, whose TTFT and inter-token gap are
scripted (and whose own send stamps say how late it actually wrote each chunk):

* **accuracy**: at 1, 64 and 512 concurrent streams, the client's TTFT, TPOT and ITL (mean
  and p50) against the scripted values and against the server's own stamps (what was really
  sent when), and the client's CPU use and event-loop lag;
* **open loop**: a Poisson schedule of 500 requests/s, achieved rate vs target and the
  dispatch delay (send - intended send) p50/p99.

Client and server share this machine's cores, so the server's own lateness (its stamps)
is reported beside the client's error: the client's error is the difference between what
it measured and what the server did.

    python bench/bench_llm_client.py [--streams 1,64,512] [--rate 500] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from aaco.testing.llm_server import Script, start_process


def _run(url: str, out: Path, args: list[str]) -> tuple[dict[str, Any], Path]:
    cmd = [sys.executable, "-m", "aaco", "llm", "bench", "--url", url, "--report", "none"]
    cmd += ["-o", str(out), "--no-telemetry", "--no-scrape", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit(f"aaco llm bench failed: {proc.stderr.strip()[-600:]}")
    bundle = Path(proc.stderr.strip().splitlines()[-1].split("bundle: ", 1)[1])
    return json.loads((bundle / "metrics/serving_summary.json").read_text()), bundle


def _server_stamps(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/debug/requests", timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def _dataset(path: Path, n: int) -> None:
    """n distinct prompts, each starting with its index: the server's ``prompt_head`` then
    says which client request a server record belongs to."""
    words = "the quick brown fox jumps over a lazy dog while seven wizards judge"
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"prompt": f"r{i} {words}"}) + "\n")


def accuracy(
    streams: int,
    ttft_s: float,
    itl_s: float,
    tokens: int,
    rounds: int,
    spread: float,
    ramp_s: float,
) -> dict[str, Any]:
    """The client's own error, request by request against the server's stamps (one clock:
    CLOCK_MONOTONIC on both sides), and the figures against the scripted values."""
    script = Script(ttft=ttft_s, itl=itl_s, tokens_per_chunk=1)
    total = streams * (rounds + 1)
    with start_process(script) as h, tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "prompts.jsonl"
        _dataset(data, total)
        summ, bundle = _run(
            h.url,
            Path(tmp),
            [
                "--concurrency", str(streams),
                "--requests", str(streams * rounds),
                "--warmup", str(streams),
                "--output-tokens", f"{tokens}:{spread}",
                "--dataset", str(data),
                "--ramp-up", str(ramp_s),
            ],
        )  # fmt: skip
        server = {
            int(r["prompt_head"].split()[0][1:]): r
            for r in _server_stamps(h.url)
            if r.get("status") == "ok" and (r.get("prompt_head") or "").startswith("r")
        }
        req = pq.read_table(bundle / "serving/requests.parquet").to_pylist()
        chunks = pq.read_table(bundle / "serving/chunks.parquet").to_pylist()
    by_req: dict[int, list[int]] = {}
    for c in chunks:
        if c["kind"] == "content":
            by_req.setdefault(c["request"], []).append(c["t_ns"])
    ttft_err, gap_err, recv_lag, send_lag, server_late = [], [], [], [], []
    for r in req:
        srv = server.get(r["request"] % total)
        if r["phase"] != "measured" or r["status"] != "ok" or srv is None:
            continue
        mine, theirs = by_req.get(r["request"], []), srv["chunk_ns"]
        if len(mine) != len(theirs):
            continue
        send_lag.append(srv["arrival_ns"] - r["sent_ns"])
        server_late.append(srv["first_chunk_ns"] - (srv["slot_ns"] + ttft_s * 1e9))
        # the client's TTFT minus the true one (server's first write - client's send)
        ttft_err.append(r["ttft_ns"] - (theirs[0] - r["sent_ns"]))
        recv_lag.extend(m - t for m, t in zip(mine, theirs, strict=True))
        gap_err.extend(
            (mine[k] - mine[k - 1]) - (theirs[k] - theirs[k - 1]) for k in range(1, len(mine))
        )
    ms = lambda v: np.asarray(v, dtype=float) / 1e6  # noqa: E731
    p = summ["points"][0]

    def stat(v: list[float] | list[int]) -> dict[str, float]:
        a = ms(v)
        return {
            "mean": float(a.mean()),
            "mean_abs": float(np.abs(a).mean()),
            "p50": float(np.median(a)),
            "p99_abs": float(np.percentile(np.abs(a), 99)),
        }

    return {
        "streams": streams,
        "ramp_up_s": ramp_s,
        "requests": p["requests"],
        "matched": len(ttft_err),
        "scripted_ms": {"ttft": ttft_s * 1e3, "itl": itl_s * 1e3},
        "client_ms": {
            k: {"mean": p[f"{k}_ms"]["mean"], "p50": p[f"{k}_ms"]["p50"]}
            for k in ("ttft", "tpot", "itl", "icl")
        },
        "client_error_ms": {
            "ttft_vs_server": stat(ttft_err),
            "itl_gap_vs_server": stat(gap_err),
            "receive_lag": stat(recv_lag),
        },
        "send_to_server_arrival_ms": stat(send_lag),
        "server_lateness_ms": stat(server_late),
        "client": {
            "cpu_pct": p["client"]["cpu_pct"],
            "loop_lag_p99_ms": p["client"]["loop_lag_ms"]["p99"],
        },
        "warnings": p["warnings"],
    }


def open_loop(rate: float, n: int, tokens: int) -> dict[str, Any]:
    script = Script(ttft=0.01, itl=0.005, tokens_per_chunk=1)
    with start_process(script) as h, tempfile.TemporaryDirectory() as tmp:
        summ, _ = _run(
            h.url,
            Path(tmp),
            [
                "--rate",
                str(rate),
                "--arrival",
                "poisson",
                "--requests",
                str(n),
                "--output-tokens",
                str(tokens),
                "--input-tokens",
                "16",
            ],
        )
    p = summ["points"][0]
    return {
        "target_rate": rate,
        "scheduled_rate": p["rate"]["scheduled"],
        "achieved_rate": p["rate"]["achieved"],
        "achieved_vs_target_pct": 100 * (p["rate"]["achieved"] / rate - 1),
        "achieved_vs_schedule_pct": 100 * (p["rate"]["achieved"] / p["rate"]["scheduled"] - 1),
        "dispatch_delay_ms": {k: p["dispatch_delay_ms"][k] for k in ("p50", "p99", "max")},
        "ok": p["requests"]["ok"],
        "client": {
            "cpu_pct": p["client"]["cpu_pct"],
            "loop_lag_p99_ms": p["client"]["loop_lag_ms"]["p99"],
        },
        "warnings": p["warnings"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,64,512")
    ap.add_argument("--ttft-ms", type=float, default=200.0)
    ap.add_argument("--itl-ms", type=float, default=100.0)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--spread",
        type=float,
        default=0.5,
        help="output length spread: desynchronises the streams (0: all in lockstep)",
    )
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--rate-requests", type=int, default=5000)
    ap.add_argument(
        "--ramp-up-ms",
        type=float,
        default=None,
        help="start the streams over this long (default: one ITL, so their chunks do not "
        "arrive in lockstep; 0: all at once)",
    )
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    out: dict[str, Any] = {"accuracy": [], "open_loop": None}
    for n in (int(v) for v in a.streams.split(",")):
        ramp = (a.itl_ms if a.ramp_up_ms is None else a.ramp_up_ms) / 1e3
        r = accuracy(n, a.ttft_ms / 1e3, a.itl_ms / 1e3, a.tokens, a.rounds, a.spread, ramp)
        out["accuracy"].append(r)
        c, e = r["client_ms"], r["client_error_ms"]
        print(
            f"{n:4d} streams ({r['matched']} matched): TTFT {c['ttft']['mean']:.3f} ms "
            f"(scripted {a.ttft_ms:g}; server late {r['server_lateness_ms']['mean']:.3f}, "
            f"send->arrival {r['send_to_server_arrival_ms']['mean']:.3f}); TPOT "
            f"{c['tpot']['mean']:.3f}, ITL p50 {c['itl']['p50']:.3f} (scripted {a.itl_ms:g})"
        )
        t, g = e["ttft_vs_server"], e["itl_gap_vs_server"]
        print(
            f"      client error vs server stamps: TTFT mean |{t['mean_abs']:.3f}| "
            f"p99 |{t['p99_abs']:.3f}|, ITL gap mean |{g['mean_abs']:.3f}| "
            f"p99 |{g['p99_abs']:.3f}| ms;"
            f" client CPU {r['client']['cpu_pct']:.0f} %, loop lag p99 "
            f"{r['client']['loop_lag_p99_ms']:.3f} ms"
        )
    if a.rate > 0:
        o = open_loop(a.rate, a.rate_requests, 4)
        out["open_loop"] = o
        print(
            f"open loop {a.rate:g}/s poisson x {a.rate_requests}: "
            f"achieved {o['achieved_rate']:.1f} ({o['achieved_vs_target_pct']:+.2f} % vs target, "
            f"{o['achieved_vs_schedule_pct']:+.2f} % vs schedule), "
            f"dispatch delay p50 {o['dispatch_delay_ms']['p50']:.3f} p99 "
            f"{o['dispatch_delay_ms']['p99']:.3f} ms, client cpu {o['client']['cpu_pct']:.0f} %"
        )
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
