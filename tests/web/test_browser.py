"""A real browser (Debian's chromium, headless, through Selenium) opens a generated report
and the dashboard: the plots render, nothing logs an error, untrusted names stay text.
Screenshots go to ``$AACO_TEST_OUTPUT`` (default ``test-output/`` in the repository)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.test_cli import aaco
from tests.sessions_fixtures import HOSTILE

from aaco.report.html import HtmlRenderer
from aaco.session.bundle import Session, iter_sessions

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
OUTPUT = Path(os.environ.get("AACO_TEST_OUTPUT") or Path(__file__).parents[2] / "test-output")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="chromium and chromedriver are not installed (apt-get install chromium "
    "chromium-driver; .ci/run installs them)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,2000"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _wait_for(driver: Any, element_id: str) -> Any:
    """Clicks submit forms and follow links asynchronously: wait for the next page's element."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, 60).until(ec.presence_of_element_located((By.ID, element_id)))
    except TimeoutException:
        text = driver.find_element(By.TAG_NAME, "body").text[:2000]
        raise AssertionError(f"#{element_id} missing at {driver.current_url}: {text}") from None


def _shot(driver: Any, name: str) -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    path = OUTPUT / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    return path


def test_report_renders_in_a_browser(browser: Any, web_root: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    hostile = next(p for p in iter_sessions(web_root) if Session.load(p).meta.get("tag") == HOSTILE)
    slow = next(p for p in iter_sessions(web_root) if Session.load(p).meta.get("tag") == "slow")
    for name, bundle in (("report-slow", slow), ("report-hostile", hostile)):
        f = tmp_path / f"{name}.html"
        f.write_text(HtmlRenderer().render(Session.load(bundle)))
        browser.get(f.as_uri())  # an injected alert() would make this raise
        assert browser.title.startswith("AACO report")
        for chart in ("latency-hist", "latency-timeline", "ops-bars"):
            el = browser.find_element(By.ID, chart)
            assert el.size["width"] > 300 and el.size["height"] > 50, chart
        bars = browser.find_elements(By.CSS_SELECTOR, "#ops-bars g.bar")
        assert bars
        assert _errors(browser) == []
        _shot(browser, name)
    # the hostile node name is visible as text in the operator chart
    names = [
        b.get_attribute("data-name")
        for b in browser.find_elements(By.CSS_SELECTOR, "#ops-bars g.bar")
    ]
    assert HOSTILE in names
    assert browser.execute_script("return document.querySelectorAll('script').length") == 1


def test_report_crosshair_reads_every_timeline_chart_and_zooms(
    browser: Any, web_root: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    slow = next(p for p in iter_sessions(web_root) if Session.load(p).meta.get("tag") == "slow")
    f = tmp_path / "report.html"
    f.write_text(HtmlRenderer().render(Session.load(slow)))
    browser.get(f.as_uri())
    tip = browser.find_element(By.ID, "tip")
    # the latency section's chart: the time and the latency at the pointer
    chart = browser.find_element(By.ID, "latency-timeline")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
    ActionChains(browser).move_to_element(chart).perform()
    text = tip.text
    assert tip.is_displayed() and re.search(r"t = \d+\.\d{3} s", text), text
    assert re.search(r"latency: [\d.]+ ms", text), text
    # the unified timeline: one tooltip lists every aligned series, a line on every chart
    chart = browser.find_element(By.ID, "timeline-latency")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
    ActionChains(browser).move_to_element(chart).perform()
    text = tip.text
    for series in ("latency: ", "process CPU: ", "system CPU: ", "context switches: "):
        assert series in text, text
    aligned = browser.find_elements(By.CSS_SELECTOR, "svg[data-align='timeline']")
    assert len(aligned) >= 3
    assert all(
        s.find_element(By.CSS_SELECTOR, ".xhair").get_attribute("visibility") == "visible"
        for s in aligned
    )
    _shot(browser, "report-crosshair")
    # drag across the middle half: every aligned chart zooms; a double-click resets them
    width = chart.size["width"]
    (
        ActionChains(browser)
        .move_to_element_with_offset(chart, -width // 4, 0)
        .click_and_hold()
        .move_by_offset(width // 2, 0)
        .release()
        .perform()
    )
    for s in aligned:
        assert "scale(" in (
            s.find_element(By.CSS_SELECTOR, ".plot").get_attribute("transform") or ""
        )
    ticks = chart.find_elements(By.CSS_SELECTOR, ".xticks text")
    assert ticks and all(t.text for t in ticks)
    _shot(browser, "report-zoomed")
    ActionChains(browser).double_click(chart).perform()
    for s in aligned:
        assert not s.find_element(By.CSS_SELECTOR, ".plot").get_attribute("transform")
    assert _errors(browser) == []


def test_report_names_operators_by_original_node(browser: Any, tmp_path: Path) -> None:
    """resnet-tiny, which ORT runs as NCHWc nodes named ``..._nchwc``: the operator chart's
    labels are the original Convs and fit their column; hovering shows ORT's name."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    root = tmp_path / "sessions"
    proc = aaco(
        "run", "--model", "resnet-tiny", "--warmup", "2", "--iterations", "10",
        "--profile-iterations", "2", "--report", "none", "-o", str(root),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    f = tmp_path / "resnet.html"
    f.write_text(HtmlRenderer().render(Session.load(root / "latest")))
    browser.get(f.as_uri())
    chart = browser.find_element(By.ID, "ops-bars")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
    labels = chart.find_elements(By.CSS_SELECTOR, "g.bar text.lbl")
    assert any(t.text == "/conv1/Conv +2 fused" for t in labels)
    assert not any("_nchwc" in t.text for t in labels)
    # every label ends at the bars and starts inside the chart: none is cut off
    left = chart.location["x"]
    for t in labels:
        assert t.location["x"] >= left, t.text
    bar = next(
        b
        for b in chart.find_elements(By.CSS_SELECTOR, "g.bar")
        if b.get_attribute("data-name") == "/conv1/Conv +2 fused"
    )
    assert bar.get_attribute("data-node") == "/relu/Relu_output_0_nchwc"
    ActionChains(browser).move_to_element(bar.find_element(By.CSS_SELECTOR, "rect")).perform()
    tip = browser.find_element(By.ID, "tip")
    assert tip.is_displayed()
    assert tip.text.startswith("/conv1/Conv +2 fused: ")
    assert tip.text.endswith("ORT node: /relu/Relu_output_0_nchwc"), tip.text
    _shot(browser, "report-operator-names")
    assert _errors(browser) == []


@pytest.fixture(scope="module")
def dashboard(web_root: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aaco",
            "dashboard",
            "--sessions",
            str(web_root),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(url + "/sessions", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("the dashboard did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_dashboard_in_a_browser(browser: Any, dashboard: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(dashboard + "/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
    assert len(rows) == 4
    assert _errors(browser) == []
    _shot(browser, "dashboard-sessions")
    # filter by model
    browser.get(dashboard + "/?model=net")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 3
    # compare the two selected sessions (newest vs the one before)
    browser.find_element(By.ID, "compare").click()
    verdict = _wait_for(browser, "verdict")
    assert verdict.text.split()[0] in ("REGRESSION", "IMPROVEMENT", "NO", "INCONCLUSIVE")
    assert browser.find_elements(By.CSS_SELECTOR, "#quantiles tbody tr")
    _shot(browser, "dashboard-compare")
    # open a report from the list
    browser.get(dashboard + "/")
    browser.find_element(By.CSS_SELECTOR, "#sessions tbody tr a").click()
    assert _wait_for(browser, "latency-hist").size["width"] > 300
    assert _errors(browser) == []
    # history with its chart
    browser.get(dashboard + "/ui/history?model=net")
    assert browser.find_element(By.ID, "history-0").size["width"] > 300
    assert _errors(browser) == []
    _shot(browser, "dashboard-history")
