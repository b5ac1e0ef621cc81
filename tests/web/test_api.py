"""The REST API over a real sessions root: every route, paging, errors, traversal, token."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from tests.cli.test_cli import aaco, assert_one_line_error
from tests.sessions_fixtures import HOSTILE

from aaco.session.bundle import Session, iter_sessions
from aaco.web.app import create_app


@pytest.fixture(scope="module")
def client(web_root: Path) -> TestClient:
    return TestClient(create_app(web_root))


def _ids(root: Path) -> dict[str, str]:
    """tag -> folder name, for the well-formed bundles of a root made by the fixtures."""
    out = {}
    for p in iter_sessions(root):
        if "broken" not in p.name and p.name != "renamed-slow":
            out[Session.load(p).meta.get("tag") or ""] = p.name
    return out


def _assert_regression(verdict: dict[str, Any]) -> None:
    """REGRESSION, or INCONCLUSIVE because the shared test machine was busy (the diff then
    refuses to call it, rightly)."""
    if verdict["verdict"] == "INCONCLUSIVE":
        assert any("MEASUREMENT NOT VALID" in w for w in verdict["warnings"]), verdict
    else:
        assert verdict["verdict"] == "REGRESSION", verdict


def _bundle(root: Path, session_id: str) -> Path:
    return next(p for p in iter_sessions(root) if p.name == session_id)


def test_sessions_listing_filters_and_paging(client: TestClient, web_root: Path) -> None:
    r = client.get("/sessions")
    assert r.status_code == 200
    data = r.json()
    assert data["total"] == 4 and len(data["items"]) == 4
    assert "path" not in data["items"][0]
    created = [i["created_utc"] for i in data["items"]]
    assert created == sorted(created, reverse=True)  # newest first
    page = client.get("/sessions", params={"offset": 1, "limit": 2}).json()
    assert [i["id"] for i in page["items"]] == [i["id"] for i in data["items"][1:3]]
    assert client.get("/sessions", params={"tag": "slow"}).json()["total"] == 1
    assert client.get("/sessions", params={"model": "net"}).json()["total"] == 3
    assert client.get("/sessions", params={"since": "2100-01-01"}).json()["total"] == 0
    assert client.get("/sessions", params={"limit": 0}).status_code == 422
    assert client.get("/sessions", params={"offset": -1}).status_code == 422


def test_one_session_and_its_reports(client: TestClient, web_root: Path) -> None:
    sid = _ids(web_root)["slow"]
    r = client.get(f"/sessions/{sid}")
    assert r.status_code == 200
    body = r.json()
    assert body["meta"]["session_id"] == sid and "inference_iters" in body["tables"]
    rep = client.get(f"/sessions/{sid}/report.json")
    assert rep.status_code == 200 and rep.json()["session"]["id"] == sid
    assert "path" not in rep.json()["session"]
    html = client.get(f"/sessions/{sid}/report.html")
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    hostile = client.get(f"/sessions/{_ids(web_root)[HOSTILE]}/report.html").text
    assert HOSTILE not in hostile and "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile


@pytest.mark.parametrize(
    ("path", "codes"),
    [
        ("/sessions/20990101_000000_abcdef", {404}),
        ("/sessions/bad$id", {400}),
        ("/sessions/../../etc/passwd", {404}),
        ("/sessions/%2E%2E%2F%2E%2E%2Fetc", {400, 404}),
        ("/sessions//etc/passwd/report.json", {404}),
        ("/sessions/..%2F..%2Fetc/report.html", {400, 404}),
        ("/sessions/.hidden/tables/ops", {400}),
    ],
)
def test_traversal_and_unknown_ids_are_refused(
    client: TestClient, path: str, codes: set[int]
) -> None:
    r = client.get(path)
    assert r.status_code in codes, (path, r.status_code, r.text)
    assert "root:" not in r.text


def test_tables_paging_formats_and_errors(client: TestClient, web_root: Path) -> None:
    sid = _ids(web_root)["slow"]
    r = client.get(f"/sessions/{sid}/tables/inference_iters", params={"limit": 7, "offset": 5})
    assert r.status_code == 200
    data = r.json()
    assert data["total"] == 130 and len(data["rows"]) == 7 and data["offset"] == 5
    assert {c["name"] for c in data["columns"]} >= {"phase", "iteration", "latency_ns"}
    assert (
        client.get(f"/sessions/{sid}/tables/inference_iters", params={"offset": 1000}).json()[
            "rows"
        ]
        == []
    )
    pq_resp = client.get(f"/sessions/{sid}/tables/ops", params={"format": "parquet", "limit": 3})
    assert pq_resp.status_code == 200
    assert pq_resp.headers["content-type"] == "application/vnd.apache.parquet"
    assert pq.read_table(io.BytesIO(pq_resp.content)).num_rows == 3
    assert int(pq_resp.headers["x-total-count"]) > 3
    assert client.get(f"/sessions/{sid}/tables/nosuch").status_code == 404
    assert client.get(f"/sessions/{sid}/tables/kernels").status_code == 404  # CPU run
    assert client.get(f"/sessions/{sid}/tables/ops", params={"format": "xml"}).status_code == 422
    assert client.get(f"/sessions/{sid}/tables/ops", params={"limit": 10**6}).status_code == 422


def test_diff_history_baselines(client: TestClient, web_root: Path) -> None:
    ids = _ids(web_root)
    r = client.post(
        "/diff", json={"baseline": ids["base"], "session": ids["slow"], "threshold": 0.25}
    )
    assert r.status_code == 200, r.text
    _assert_regression(r.json()["verdict"])
    strict = client.post(
        "/diff",
        json={
            "baseline": ids["base"], "session": ids["slow"], "threshold": 0.25,
            "allow_contention": True,
        },
    )  # fmt: skip
    assert strict.status_code == 200 and strict.json()["verdict"]["verdict"] == "REGRESSION"
    assert "session_path" not in r.json()["baseline_ref"]
    assert str(web_root) not in r.text  # no server paths
    two = client.post(
        "/diff", json={"baseline": [ids["base"], ids["same"]], "session": ids["slow"]}
    )
    assert two.status_code == 200 and two.json()["comparison"]["runs"]["baseline"] == 2
    assert client.post("/diff", json={"baseline": ids["base"]}).status_code == 422
    assert client.post("/diff", json={"baseline": 3, "session": ids["slow"]}).status_code == 422
    assert (
        client.post(
            "/diff", json={"baseline": "20990101_000000_abcdef", "session": ids["slow"]}
        ).status_code
        == 404
    )
    bad = client.post("/diff", json={"baseline": ids["base"], "session": ids[HOSTILE]})
    assert bad.status_code == 422 and "different models" in bad.json()["detail"]
    base_path = next(p for p in iter_sessions(web_root) if p.name == ids["base"])
    saved = aaco("baseline", "save", "main", "-s", str(base_path), "--sessions", str(web_root))
    assert saved.returncode == 0, saved.stderr
    listed = client.get("/baselines").json()
    assert [b["name"] for b in listed] == ["main"] and "session_path" not in listed[0]
    body = {"baseline": "main", "session": ids["slow"], "threshold": 0.25}
    by_name = client.post("/diff", json=body)
    assert by_name.status_code == 200 and by_name.json()["verdict"]["baseline"]["name"] == "main"
    hist = client.get("/history", params={"model": "net"})
    assert hist.status_code == 200 and sum(len(g["sessions"]) for g in hist.json()) == 3
    assert client.get("/history", params={"model": "none"}).json() == []


def test_openapi_lists_every_route(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for p in (
        "/sessions", "/sessions/{session_id}", "/sessions/{session_id}/report.json",
        "/sessions/{session_id}/report.html", "/sessions/{session_id}/tables/{name}",
        "/diff", "/history", "/baselines",
    ):  # fmt: skip
        assert p in paths


def test_token_is_required_on_every_route(web_root: Path) -> None:
    c = TestClient(create_app(web_root, token="s3cret"))
    sid = _ids(web_root)["slow"]
    routes = ["/", "/sessions", f"/sessions/{sid}", f"/sessions/{sid}/report.json",
              f"/sessions/{sid}/report.html", f"/sessions/{sid}/tables/ops", "/history",
              "/baselines", "/openapi.json", "/ui/history"]  # fmt: skip
    for route in routes:
        assert c.get(route).status_code == 401, route
        assert c.get(route, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get(route, headers={"Authorization": "Bearer s3cret"}).status_code == 200, route
    assert c.post("/diff", json={}).status_code == 401
    # a browser logs in once: the token in the query string becomes a cookie
    r = c.get("/?token=s3cret", follow_redirects=False)
    assert r.status_code == 303 and "aaco_token" in r.headers["set-cookie"]
    assert c.get("/sessions").status_code == 200  # the client kept the cookie
    assert TestClient(create_app(web_root, token="s3cret")).get("/?token=nope").status_code == 401


def test_serving_beyond_localhost_needs_a_token(web_root: Path) -> None:
    proc = aaco("serve", "--sessions", str(web_root), "--host", "0.0.0.0", "--port", "1")
    assert_one_line_error(proc, 2, "--token")
    proc = aaco("dashboard", "--sessions", str(web_root / "nope"))
    assert_one_line_error(proc, 2, "no such sessions root")


def test_dashboard_pages(client: TestClient, web_root: Path) -> None:
    ids = _ids(web_root)
    page = client.get("/")
    assert page.status_code == 200 and 'id="sessions"' in page.text
    assert HOSTILE not in page.text and "&lt;script&gt;" in page.text
    assert client.get("/", params={"model": "net"}).text.count('name="session"') == 3
    cmp = client.get("/ui/compare", params={"baseline": ids["base"], "session": ids["slow"]})
    assert cmp.status_code == 200 and 'id="verdict"' in cmp.text
    assert "REGRESSION" in cmp.text or "MEASUREMENT NOT VALID" in cmp.text
    hist = client.get("/ui/history", params={"model": "net"})
    assert hist.status_code == 200 and '<svg id="history-0"' in hist.text
    assert (
        client.get("/ui/compare", params={"baseline": "x$", "session": ids["slow"]}).status_code
        == 400
    )
    json.dumps(page.text)  # plain text, no binary surprises


@pytest.fixture
def messy_root(web_root: Path, tmp_path: Path) -> Path:
    """The web root plus what a real shared root accumulates: a bundle with a malformed
    session.json, a renamed bundle, and a NaN inside a list column."""
    import shutil

    import pyarrow as pa

    root = tmp_path / "sessions"
    shutil.copytree(web_root, root, symlinks=True)
    slow = next(p for p in iter_sessions(root) if Session.load(p).meta.get("tag") == "slow")
    broken = slow.parent / "20000101_000000_broken"
    shutil.copytree(slow, broken)
    meta = json.loads((broken / "session.json").read_text())
    meta["model"] = "justastring"
    (broken / "session.json").write_text(json.dumps(meta))
    shutil.copytree(slow, slow.parent / "renamed-slow")
    f = slow / "telemetry" / "system_events.parquet"
    t = pq.read_table(f)
    col = t.column("sys_cpu_pct_per_core").to_pylist()
    col[0] = [float("nan"), 50.0]
    i = t.schema.get_field_index("sys_cpu_pct_per_core")
    t = t.set_column(i, t.schema.field(i), pa.array(col, t.schema.field(i).type))
    pq.write_table(t, f)
    return root


def test_a_malformed_bundle_is_listed_not_fatal(messy_root: Path) -> None:
    c = TestClient(create_app(messy_root))
    items = c.get("/sessions").json()["items"]
    bad = next(i for i in items if i["id"] == "20000101_000000_broken")
    assert bad["status"] == "unreadable" and "field 'model' is not an object" in bad["error"]
    assert str(messy_root) not in json.dumps(items)  # no server paths in errors
    r = c.get("/sessions/20000101_000000_broken")
    assert r.status_code == 422 and str(messy_root) not in r.text
    assert c.get("/history", params={"model": "net"}).status_code == 200
    assert c.get("/ui/history", params={"model": "net"}).status_code == 200
    page = c.get("/")
    assert page.status_code == 200 and "unreadable bundle" in page.text
    assert "/ui/history?model=None" not in page.text
    ids = _ids(messy_root)
    assert (
        c.post("/diff", json={"baseline": "20000101_000000_broken", "session": ids["slow"]})
    ).status_code == 422


def test_renamed_bundles_are_found_by_folder_name(messy_root: Path) -> None:
    c = TestClient(create_app(messy_root))
    items = c.get("/sessions").json()["items"]
    assert "renamed-slow" in [i["id"] for i in items]
    r = c.get("/sessions/renamed-slow")
    assert r.status_code == 200 and r.json()["summary"]["id"] == "renamed-slow"
    assert c.get("/sessions/renamed-slow/report.json").json()["session"]["id"] == "renamed-slow"
    # the same folder name under two dates is ambiguous, not silently the first one
    clone = messy_root / "2099-01-01" / "renamed-slow"
    clone.parent.mkdir()
    (messy_root / "2099-01-01").joinpath("x").mkdir()
    import shutil

    shutil.copytree(next(p for p in iter_sessions(messy_root) if p.name == "renamed-slow"), clone)
    amb = c.get("/sessions/renamed-slow")
    assert amb.status_code == 409 and "ambiguous" in amb.json()["detail"]


def test_nan_inside_a_list_column_is_null(messy_root: Path) -> None:
    c = TestClient(create_app(messy_root))
    sid = _ids(messy_root)["slow"]
    r = c.get(f"/sessions/{sid}/tables/system_events", params={"limit": 1})
    assert r.status_code == 200, r.text
    assert r.json()["rows"][0]["sys_cpu_pct_per_core"] == [None, 50.0]
    assert "NaN" not in r.text


def test_diff_body_is_validated(messy_root: Path) -> None:
    c = TestClient(create_app(messy_root))
    ids = _ids(messy_root)
    for extra, word in (
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"threshold": True}, "threshold"),
        ({"gates": [1]}, "gates"),
        ({"gates": "p50"}, "gates"),
    ):
        r = c.post("/diff", json={"baseline": ids["base"], "session": ids["slow"], **extra})
        assert r.status_code == 422 and word in r.json()["detail"], extra
    unknown = c.post("/diff", json={"baseline": ids["base"], "session": ids["slow"],
                                    "gates": ["p42"]})  # fmt: skip
    assert unknown.status_code == 422
    long_name = c.post("/diff", json={"baseline": "b" * 70, "session": ids["slow"]})
    assert long_name.status_code in (400, 404)
    # a baseline record that points outside the root is refused
    outside = messy_root.parent / "elsewhere"
    slow = next(p for p in iter_sessions(messy_root) if p.name == ids["slow"])
    import shutil

    shutil.copytree(slow, outside / "2026-01-01" / "x")
    (messy_root / "baselines").mkdir(exist_ok=True)
    record = {"name": "out", "session_path": str(outside / "2026-01-01" / "x")}
    (messy_root / "baselines" / "out.json").write_text(json.dumps(record))
    r = c.post("/diff", json={"baseline": "out", "session": ids["slow"]})
    assert r.status_code == 422 and "outside the sessions root" in r.json()["detail"]
    assert str(outside) not in r.text


def test_token_checks_are_safe(web_root: Path) -> None:
    with pytest.raises(Exception, match="must not be empty"):
        create_app(web_root, token="")
    c = TestClient(create_app(web_root, token="s3cret"))
    # a non-ASCII token is a wrong token (401), not a server error
    r = c.get("/sessions", headers={"Authorization": "Bearer s3crét".encode()})
    assert r.status_code == 401
    assert c.get("/sessions", headers={"Cookie": "aaco_token=ünïcode".encode()}).status_code == 401
    u = TestClient(create_app(web_root, token="tökén"))
    assert u.get("/sessions", headers={"Authorization": "Bearer tökén".encode()}).status_code == 200
    assert u.get("/sessions", headers={"Cookie": "aaco_token=tökén".encode()}).status_code == 200
    login = u.get("/", params={"token": "tökén"}, follow_redirects=False)
    assert login.status_code == 303


@pytest.fixture
def copy_root(web_root: Path, tmp_path: Path) -> Path:
    """A private copy of the web root, for tests that damage or extend it."""
    import shutil

    root = tmp_path / "sessions"
    shutil.copytree(web_root, root, symlinks=True)
    return root


def test_damaged_bundle_files_are_422_without_paths(copy_root: Path) -> None:
    import shutil

    ids = _ids(copy_root)
    slow = _bundle(copy_root, ids["slow"])
    ops = slow.parent / "20000101_000000_badops"
    roof = slow.parent / "20000101_000000_badroof"
    shutil.copytree(slow, ops)
    shutil.copytree(slow, roof)
    (ops / "profiler" / "ops.parquet").write_bytes(b"PAR1 not really parquet")
    (roof / "metrics" / "roofline.json").write_text('{"roof": [1, 2')
    c = TestClient(create_app(copy_root))
    for sid, routes in (
        (ops.name, ["report.json", "report.html", "tables/ops", "tables/ops?format=parquet"]),
        (roof.name, ["report.json", "report.html"]),
    ):
        for route in routes:
            r = c.get(f"/sessions/{sid}/{route}")
            assert r.status_code == 422, (sid, route, r.status_code, r.text)
            detail = r.json()["detail"]
            assert "unreadable" in detail and "\n" not in detail
            assert str(copy_root) not in r.text and str(copy_root.parent) not in r.text
    assert c.get(f"/sessions/{roof.name}/tables/ops").status_code == 200  # the rest is fine


def test_bundles_symlinked_from_outside_the_root_are_refused(
    copy_root: Path, tmp_path: Path
) -> None:
    import shutil

    ids = _ids(copy_root)
    slow = _bundle(copy_root, ids["slow"])
    outside = tmp_path / "outside" / "2026-11-25"
    shutil.copytree(slow, outside / "20261125_000000_outbun")
    shutil.copytree(slow, outside / "20261125_000000_outday")
    # a bundle symlinked into a real day folder, and a whole day folder symlinked in
    (slow.parent / "20261125_000000_outbun").symlink_to(outside / "20261125_000000_outbun")
    (copy_root / "2026-11-26").symlink_to(outside)
    c = TestClient(create_app(copy_root))
    listed = [i["id"] for i in c.get("/sessions").json()["items"]]
    assert ids["slow"] in listed
    assert not any(i.startswith("20261125_000000_out") for i in listed)
    for sid in ("20261125_000000_outbun", "20261125_000000_outday"):
        for route in ("", "/report.json", "/report.html", "/tables/ops"):
            assert c.get(f"/sessions/{sid}{route}").status_code == 404, (sid, route)
        assert c.post("/diff", json={"baseline": ids["base"], "session": sid}).status_code == 404
        assert sid not in c.get("/").text
        assert sid not in c.get("/history").text
    # a saved baseline recorded through an outside symlink is refused, by resolved path
    (copy_root / "baselines").mkdir(exist_ok=True)
    record = {"name": "viasym", "session_path": str(slow.parent / "20261125_000000_outbun")}
    (copy_root / "baselines" / "viasym.json").write_text(json.dumps(record))
    r = c.post("/diff", json={"baseline": "viasym", "session": ids["slow"]})
    assert r.status_code == 422 and "outside the sessions root" in r.json()["detail"]


def test_a_trailing_newline_is_a_malformed_id(client: TestClient, web_root: Path) -> None:
    sid = _ids(web_root)["slow"]
    assert client.get(f"/sessions/{sid}").status_code == 200
    for route in (f"/sessions/{sid}%0a", f"/sessions/{sid}%0A/report.json", "/sessions/latest%0a"):
        r = client.get(route)
        assert r.status_code == 400, (route, r.status_code)


def test_date_filters_are_validated_and_compared_as_instants(
    client: TestClient, web_root: Path
) -> None:
    items = client.get("/sessions").json()["items"]
    newest = items[0]["created_utc"]  # like 2026-11-25T09:07:34.030Z
    for params in ({"since": "notadate"}, {"until": "2026-13-45"}, {"since": "yesterday"}):
        r = client.get("/sessions", params=params)
        assert r.status_code == 422 and next(iter(params)) in r.json()["detail"], params
        assert client.get("/", params=params).status_code == 422
    day = newest[:10]
    assert client.get("/sessions", params={"since": day}).json()["total"] >= 1
    assert client.get("/sessions", params={"until": day}).json()["total"] == len(items)
    assert client.get("/sessions", params={"until": "2000-01-01"}).json()["total"] == 0
    # the same instant written with another offset: compared as times, not as strings
    from datetime import datetime, timedelta, timezone

    t = datetime.fromisoformat(newest).astimezone(timezone(timedelta(hours=5)))
    assert client.get("/sessions", params={"since": t.isoformat()}).json()["total"] >= 1
    later = (t + timedelta(seconds=1)).isoformat()
    assert client.get("/sessions", params={"since": later}).json()["total"] == 0
    assert client.get("/sessions", params={"since": t.isoformat()[:19]}).status_code == 200


def test_latest_names_the_newest_session_on_every_route(copy_root: Path) -> None:
    c = TestClient(create_app(copy_root))
    newest = (copy_root / "latest").resolve().name  # the CLI's `latest`: the pointer
    r = c.get("/sessions/latest")
    assert r.status_code == 200 and r.json()["summary"]["id"] == newest
    assert c.get("/sessions/latest/report.json").json()["session"]["id"] == newest
    assert c.get("/sessions/latest/report.html").status_code == 200
    assert c.get("/sessions/latest/tables/inference_iters").status_code == 200
    ids = _ids(copy_root)
    d = c.post("/diff", json={"baseline": ids["base"], "session": "latest"})
    assert d.status_code in (200, 422)  # the newest run is another model: refused, not 404
    # without the pointer, the newest bundle by created time
    (copy_root / "latest").unlink()
    by_time = max(
        (Session.load(p) for p in iter_sessions(copy_root)),
        key=lambda s: str(s.meta.get("created_utc")),
    )
    assert c.get("/sessions/latest").json()["summary"]["id"] == by_time.session_id
    # a pointer leading outside the root is ignored like a missing one
    (copy_root / "latest").symlink_to(copy_root.parent)
    assert c.get("/sessions/latest").json()["summary"]["id"] == by_time.session_id


def test_compare_preselects_completed_sessions_of_one_model(copy_root: Path) -> None:
    import re
    import shutil

    from aaco.web.pages import preselect

    ids = _ids(copy_root)
    slow = _bundle(copy_root, ids["slow"])
    failed = slow.parent / "29990101_000000_failed"
    shutil.copytree(slow, failed)
    meta = json.loads((failed / "session.json").read_text())
    meta.update(status="failed", created_utc="2999-01-01T00:00:00.000Z")
    (failed / "session.json").write_text(json.dumps(meta))
    page = TestClient(create_app(copy_root)).get("/").text

    def checked(name: str) -> list[str]:
        return re.findall(rf'name="{name}" value="([^"]+)"[^>]*checked', page)

    # the failed run is newest but cannot be compared: the newest two runs of "net" are
    items = sorted(
        (Session.load(p) for p in iter_sessions(copy_root) if p.name in ids.values()),
        key=lambda s: str(s.meta.get("created_utc")),
    )
    net = [s.session_id for s in items if (s.meta.get("model") or {}).get("name") == "net"]
    assert checked("session") == [net[-1]] and checked("baseline") == [net[-2]]
    assert re.search(r'name="session" value="29990101_000000_failed" disabled', page)
    rows = [
        {"id": "f", "status": "failed", "model": "a"},
        {"id": "x", "status": "completed", "model": "b"},
        {"id": "y", "status": "completed", "model": "a"},
    ]
    assert preselect(rows) == {"session": "x", "baseline": "y"}  # no pair: the newest two
    assert preselect(rows[:2]) == {"session": "x", "baseline": None}
    assert preselect([]) == {"session": None, "baseline": None}


@pytest.fixture(scope="module")
def step_root(web_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 sessions of one configuration with a 10 % slowdown from session 18 on."""
    import numpy as np
    from tests.sessions_fixtures import derived_session

    source = _bundle(web_root, _ids(web_root)["base"])
    root = tmp_path_factory.mktemp("step") / "sessions"
    rng = np.random.default_rng(3)
    levels = list(2.0 * np.exp(rng.normal(0, 0.005, 30)))
    levels[18:] = [v * 1.10 for v in levels[18:]]
    for i, level in enumerate(levels):
        derived_session(
            source, root, f"20260102_00{i:02d}00_{i:06x}", rng.normal(level, level * 0.02, 100),
            created_utc=f"2026-01-02T00:{i:02d}:00.000Z",
        )  # fmt: skip
    return root


def test_history_chart_draws_the_series_its_change_points_are_on(step_root: Path) -> None:
    import re

    from aaco.regress.history import SERIES

    c = TestClient(create_app(step_root))
    groups = c.get("/history").json()
    cps = groups[0]["change_points"]
    assert {cp["metric"] for cp in cps} >= {"p50"}
    page = c.get("/ui/history").text
    chart = page[page.index('<svg id="history-0"') : page.index("</svg>")]
    drawn = re.findall(r'<g class="series" data-name="([^"]+)"', chart)
    assert set(SERIES) <= set(drawn)
    marks = re.findall(r'<g class="cp" data-metric="([^"]+)" data-session="([^"]+)">'
                       r"<title>([^<]+)</title>", chart)  # fmt: skip
    assert sorted((m, s) for m, s, _ in marks) == sorted(
        (cp["metric"], cp["session_id"]) for cp in cps
    )
    for metric, sid, title in marks:
        assert metric in drawn and sid in title and " %" in title and "p = " in title
    # one number format per axis ("5" and "10", never "10.0"); the last x label fits
    xs = re.findall(r'<text class="tick" x="([\d.]+)"[^>]*"middle">([^<]+)</text>', chart)
    ys = re.findall(r'<text class="tick" [^>]*"end">([^<]+)</text>', chart)
    assert [t for _, t in xs] == ["0", "5", "10", "15", "20", "25"]
    assert len({len(t.partition(".")[2]) for t in ys}) == 1 and len(ys) >= 3
    width = float(re.search(r'viewBox="0 0 (\d+)', chart).group(1))  # type: ignore[union-attr]
    assert float(xs[-1][0]) + 12 < width
    # the tag filter
    assert c.get("/ui/history", params={"tag": "nosuch"}).text.count("<svg") == 0
    assert '<svg id="history-0"' in c.get("/ui/history", params={"tag": "base"}).text


def test_a_browser_without_the_token_gets_a_login_hint(web_root: Path) -> None:
    c = TestClient(create_app(web_root, token="s3cret"))
    page = c.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
    assert "/?token=" in page.text and "s3cret" not in page.text
    api = c.get("/sessions", headers={"Accept": "application/json"})
    assert api.status_code == 401 and api.json()["detail"] == "missing or wrong bearer token"


def test_openapi_declares_security_bodies_errors_and_media(web_root: Path) -> None:
    for token in (None, "s3cret"):
        c = TestClient(create_app(web_root, token=token))
        headers = {"Authorization": "Bearer s3cret"} if token else {}
        schema = c.get("/openapi.json", headers=headers).json()
        scheme = schema["components"]["securitySchemes"]["bearer"]
        assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
        one = schema["paths"]["/sessions/{session_id}"]["get"]
        assert {"bearer": []} in one["security"]
        assert ({} in one["security"]) is (token is None)  # optional without a token
        for code in ("400", "401", "404", "409", "422"):
            assert code in one["responses"], code
        assert one["responses"]["422"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Problem"
        }
        diff = schema["paths"]["/diff"]["post"]
        body = diff["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/DiffRequest"}
        props = schema["components"]["schemas"]["DiffRequest"]["properties"]
        assert {"baseline", "session", "threshold", "gates"} <= set(props)
        assert set(schema["components"]["schemas"]["DiffRequest"]["required"]) == {
            "baseline",
            "session",
        }
        tables = schema["paths"]["/sessions/{session_id}/tables/{name}"]["get"]
        assert "application/vnd.apache.parquet" in tables["responses"]["200"]["content"]
        name = next(p for p in tables["parameters"] if p["name"] == "name")
        assert {"ops", "inference_iters"} <= set(name["schema"]["enum"])


def test_responses_carry_no_server_paths(web_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = web_root.parent.parent  # pytest's base folder holds the models and the roots
    monkeypatch.setenv("HOME", str(base))
    c = TestClient(create_app(web_root))
    sid = _ids(web_root)[HOSTILE]
    r = c.get(f"/sessions/{sid}")
    assert r.status_code == 200
    meta = r.json()["meta"]
    assert meta["model"]["path"].startswith("~/") and meta["model"]["path"].endswith(".onnx")
    assert "<sessions root>" in meta["command_line"]
    for route in ("", "/report.json", "/report.html"):
        text = c.get(f"/sessions/{sid}{route}").text
        assert str(base) not in text, route
    assert "&lt;sessions root&gt;" in c.get(f"/sessions/{sid}/report.html").text
    # the bundle itself keeps its paths
    on_disk = json.loads((_bundle(web_root, sid) / "session.json").read_text())
    assert on_disk["model"]["path"].startswith(str(base))
