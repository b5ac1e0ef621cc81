"""Named baselines: a pointer from a name to a session bundle, with what reproduces it.

Stored as ``<sessions root>/baselines/<NAME>.json``. A baseline references its bundle
(absolute path, and relative to the root so a moved root still resolves) and records the
configuration and fingerprint it was measured under, so ``aaco diff`` can warn when a new
session runs elsewhere.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from aaco import __version__
from aaco.errors import BundleError, InputError, UsageError
from aaco.regress import serving
from aaco.session.bundle import Session, atomic_write_json, read_json, utc_now_iso
from aaco.session.catalog import run_settings
from aaco.session.paths import SESSION_FILE

BASELINES_DIR = "baselines"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def config_key(session: Session) -> tuple[Any, ...]:
    """Model, backend and batch: what must match for two bundles to be compared at all."""
    meta = session.meta
    return (
        (meta.get("model") or {}).get("name"),
        (meta.get("backend") or {}).get("name"),
        (meta.get("run") or {}).get("batch"),
    )


def run_key(session: Session) -> tuple[Any, ...]:
    """``config_key`` plus the run settings that change latency by themselves (threads,
    input shapes, preprocessing, framework): what runs pooled on one side, sessions of one
    history and the noise floor's past sessions must share. A serving session's key adds
    its kind and its serving settings (server, endpoint, load, prompts, sweep)."""
    key = (*config_key(session), run_settings(session.meta))
    if serving.is_serving(session):
        return (serving.SERVING_KIND, *key, serving.serving_key(session))
    return key


def is_baseline_name(name: str) -> bool:
    return bool(_NAME.match(name))


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(
            f"baseline name {name!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def baseline_file(root: Path, name: str) -> Path:
    return root / BASELINES_DIR / f"{check_name(name)}.json"


def usable_session(session: Session, role: str) -> None:
    """Refuse sessions a comparison cannot use: failed runs and runs without iterations."""
    if session.status != "completed":
        reason = (session.error or {}).get("message") if session.error else None
        raise BundleError(
            f"{role} {session.path}: the run {session.status}"
            + (f" ({reason})" if reason else "")
            + "; only completed sessions can be compared"
        )
    if serving.is_serving(session):
        ok = [(p.get("requests") or {}).get("ok") for p in serving.points(session)]
        if not any(isinstance(n, int) and n > 0 for n in ok):
            raise BundleError(f"{role} {session.path}: no successful measured request to compare")
        return
    lat = (session.summary or {}).get("latency_ms") or {}
    if not lat.get("count"):
        raise BundleError(f"{role} {session.path}: no measured iterations to compare")


def reference(session: Session, root: Path | None, name: str | None) -> dict[str, Any]:
    """Reproducibility metadata of a baseline session (also ``regress/baseline_ref.json``)."""
    meta = session.meta
    env = session.env or {}
    lat = (session.summary or {}).get("latency_ms") or {}
    rel: str | None = None
    if root is not None:
        try:
            rel = str(session.path.relative_to(root.resolve()))
        except ValueError:
            rel = None
    return {
        "name": name,
        "session_id": session.session_id,
        "session_path": str(session.path),
        "relative_path": rel,
        "created_utc": meta.get("created_utc"),
        "model": meta.get("model"),
        "backend": meta.get("backend"),
        "run": meta.get("run"),
        "tag": meta.get("tag"),
        "command_line": meta.get("command_line"),
        "aaco_version": meta.get("aaco_version"),
        "fingerprint": meta.get("fingerprint"),
        "fingerprint_fields": env.get("fingerprint_fields"),
        "packages": env.get("packages"),
        "latency_ms": {k: lat.get(k) for k in ("count", "mean", "p50", "p90", "p99")},
        **(_serving_reference(session) if serving.is_serving(session) else {}),
    }


def _serving_reference(session: Session) -> dict[str, Any]:
    """What reproduces a serving session: its kind, settings and the headline figures of
    each load point."""
    keep = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "output_tokens_per_s", "failed_fraction")
    pts = []
    for p in serving.points(session):
        f = serving.figures(p)
        load = p.get("load")
        label = serving.load_label(load if isinstance(load, dict) else {})
        pts.append({"point": p.get("point"), "load": label} | {k: f[k] for k in keep})
    return {
        "kind": serving.SERVING_KIND,
        "serving": serving.settings(session),
        "serving_points": pts,
    }


def save_baseline(
    root: Path, name: str, sessions: Session | list[Session], force: bool = False
) -> Path:
    """Save one session, or several runs of one configuration, as baseline ``name``."""
    runs = [sessions] if isinstance(sessions, Session) else list(sessions)
    if not runs:
        raise UsageError("a baseline needs at least one session")
    for s in runs:
        usable_session(s, "session")
    if len({run_key(s) for s in runs}) > 1:
        raise UsageError(
            "the sessions of one baseline must share model, backend, batch and run settings "
            "(threads, inputs, preprocessing, framework; for serving sessions the server, "
            "endpoint, load and prompts)"
        )
    f = baseline_file(root, name)
    if f.exists() and not force:
        raise UsageError(f"baseline {name!r} exists; pass --force to replace it")
    record = {
        "format_version": 1,
        "saved_utc": utc_now_iso(),
        "saved_by": f"aaco {__version__}",
        **reference(runs[0], root, name),
        "runs": [_location(s, root) for s in runs],
    }
    try:
        atomic_write_json(f, record)
    except OSError as exc:
        raise InputError(f"cannot write {f}: {exc.strerror or exc}") from exc
    return f


def _location(session: Session, root: Path) -> dict[str, Any]:
    try:
        rel: str | None = str(session.path.relative_to(root.resolve()))
    except ValueError:
        rel = None
    return {
        "session_id": session.session_id,
        "session_path": str(session.path),
        "relative_path": rel,
    }


def load_baseline(root: Path, name: str) -> dict[str, Any]:
    f = baseline_file(root, name)
    if not f.is_file():
        known = ", ".join(b["name"] for b in list_baselines(root)) or "none saved"
        raise InputError(f"no baseline named {name!r} under {root} (known: {known})")
    return check_record(read_json(f), f)


def check_record(record: Any, where: Path) -> dict[str, Any]:
    """``record`` if it has the shape ``save_baseline`` writes, else a BundleError."""

    def location_ok(loc: Any) -> bool:
        return (
            isinstance(loc, dict)
            and isinstance(loc.get("session_path"), str)
            and isinstance(loc.get("relative_path"), (str, type(None)))
        )

    runs = record.get("runs") if isinstance(record, dict) else None
    if (
        not location_ok(record)
        or not isinstance(runs, (list, type(None)))
        or (runs is not None and not (runs and all(location_ok(r) for r in runs)))
    ):
        raise BundleError(f"{where}: not a baseline record (save it again)")
    return record  # type: ignore[no-any-return]


def _find(root: Path, loc: dict[str, Any]) -> Path | None:
    candidates = [Path(str(loc.get("session_path")))]
    if loc.get("relative_path"):
        candidates.insert(0, root / str(loc["relative_path"]))
    return next((p for p in candidates if (p / SESSION_FILE).is_file()), None)


def baseline_sessions(root: Path, record: dict[str, Any]) -> list[Session]:
    """The bundles a baseline points at: each recorded path, else relative to the root."""
    out = []
    for loc in record.get("runs") or [record]:
        p = _find(root, loc)
        if p is None:
            raise BundleError(
                f"baseline {record.get('name')!r} points at {loc.get('session_path')}, which no "
                "longer exists; save the baseline again"
            )
        out.append(Session.load(p))
    return out


def list_baselines(root: Path) -> list[dict[str, Any]]:
    d = root / BASELINES_DIR
    if not d.is_dir():
        return []
    out = []
    for f in sorted(d.glob("*.json")):
        try:
            rec = check_record(read_json(f), f)
        except BundleError as exc:
            out.append({"name": f.stem, "error": str(exc)})
            continue
        rec.setdefault("name", f.stem)
        rec["exists"] = all(_find(root, loc) for loc in rec.get("runs") or [rec])
        out.append(rec)
    return out


def resolve(spec: str, root: Path) -> tuple[list[Session], str | None]:
    """A ``--baseline`` value: a bundle path (or ``latest``), else a saved baseline name
    (which may stand for several runs)."""
    if spec == "latest":
        return [Session.load(root / "latest")], None
    p = Path(spec)
    if (p / SESSION_FILE).is_file():
        return [Session.load(p)], None
    if is_baseline_name(spec) and baseline_file(root, spec).is_file():
        record = load_baseline(root, spec)
        return baseline_sessions(root, record), spec
    if p.exists():
        return [Session.load(p)], None  # a sessions root, or a clear "not a bundle" error
    raise InputError(
        f"baseline {spec!r}: no such session bundle, and no saved baseline of that name "
        f"under {root}"
    )
