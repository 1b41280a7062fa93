"""The service's page at ``/`` in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``)
driven by selenium against a live ``taskret serve``. Skipped, saying why, where the browser, its driver or
selenium is missing; ``.ci/run`` installs them so that CI runs it.

The page over an example index (the demo's MTOP pool, SmolLM2-135M counting tokens and generating) is
screenshotted; with ``TASKRET_SCREENSHOTS=1`` the picture is also written to ``docs/images/service-page.png``, the
README's (not by default: a test run should not change tracked files).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from unittest import mock

import httpx
import pytest

from taskret.retrieval import BM25Retriever
from taskret.retrieval.index import save_index
from taskret.tart.tasks import Document

from .test_serve_process import running_server

selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="no headless browser here: apt-get install chromium chromium-driver (`.ci/run` does) to test the page")

# Root in a container; nothing fetched from elsewhere (the page must work offline).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         "--window-size=1280,900")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "service-page.png"
WAIT_S = 60
GENERATE_WAIT_S = 300  # generous: other work may share the machine's cores

# Untrusted texts: each must be shown as typed, none may run or become an element.
HOSTILE_TEXT = "<script>window.__injected = 1; alert(1)</script> morning alarm clock"
HOSTILE_TITLE = '<img src=x onerror="window.__injected = 2; alert(2)"><b>Alarm clock</b>'
DOCS = [Document("d1", "Alarms", "set an alarm for seven in the morning"),
        Document("d2", "Weather", "rain expected in paris tomorrow morning"),
        Document("d3", "Music", "play some jazz in the kitchen"),
        Document("d4", HOSTILE_TITLE, HOSTILE_TEXT),
        Document("d5", "Timers", "a timer for the alarm in the morning")]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = Options()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def examples_server(tmp_path_factory, demo_task):
    from taskret.models import is_installed

    if not is_installed("smollm2-135m"):
        pytest.skip("the bundled LM smollm2-135m is not installed (make setup installs it)")
    pool = demo_task.train
    folder = save_index(tmp_path_factory.mktemp("page") / "examples", BM25Retriever().index(pool), pool, task="demo",
                        retriever_spec="bm25", lm="smollm2-135m")
    # One torch thread: two threads on cores other processes also use can make each decoding step seconds long.
    with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "1"}), running_server(
            folder, args=("--generate", "--max-new-tokens", "24", "--generate-timeout", str(GENERATE_WAIT_S))) as url:
        yield url


@pytest.fixture(scope="module")
def documents_server(tmp_path_factory, tiny_model_dir):
    retriever = BM25Retriever().index_texts([d.id for d in DOCS], [f"{d.title} {d.text}" for d in DOCS])
    folder = save_index(tmp_path_factory.mktemp("page") / "documents", retriever, DOCS, kind="documents",
                        instruction="Find a document about this request",
                        extra={"setup": "custom", "rerank": f"upr:{tiny_model_dir}", "rerank_depth": 5,
                               "rerank_weight": 0.5})
    with running_server(folder) as url:
        yield url


def _wait(driver, condition, what: str):
    return WebDriverWait(driver, WAIT_S).until(lambda d: condition(d), message=f"waiting for {what}")


def _open(driver, url: str) -> None:
    driver.get(f"{url}/")
    _wait(driver, lambda d: d.find_element(By.ID, "submit").is_enabled(), "the page to read /health")


def _search(driver, query: str, k: int, instruction: str | None = None, token_budget: int | None = None) -> list:
    for field, value in (("query", query), ("k", k), ("instruction", instruction), ("token-budget", token_budget)):
        if value is not None:
            element = driver.find_element(By.ID, field)
            element.clear()
            element.send_keys(str(value))
    driver.execute_script("document.getElementById('status').textContent = ''")
    driver.find_element(By.ID, "submit").click()
    _wait(driver, lambda d: "result" in d.find_element(By.ID, "status").text
          or "answered" in d.find_element(By.ID, "status").text, "the results")
    assert "answered" not in driver.find_element(By.ID, "status").text, driver.find_element(By.ID, "status").text
    return driver.find_elements(By.CSS_SELECTOR, "#results-body tr")


def _cells(row, name: str) -> str:
    return row.find_element(By.CSS_SELECTOR, f"td.{name}").text


def _no_alert(driver) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.accept()


def test_the_page_shows_results_the_prompt_and_a_generation(browser, examples_server):
    query, k = "set an alarm for 7 am tomorrow", 4
    _open(browser, examples_server)
    assert "examples index" in browser.find_element(By.ID, "about").text
    assert not browser.find_element(By.ID, "instruction-field").is_displayed()
    rows = _search(browser, query, k)
    expected = httpx.post(f"{examples_server}/retrieve", json={"query": query, "k": k}).json()
    assert [_cells(r, "id") for r in rows] == expected["ids"]
    assert [_cells(r, "rank") for r in rows] == ["1", "2", "3", "4"]
    assert _cells(rows[0], "score") == f"{expected['scores'][0]:.4f}"
    assert expected["texts"][0] in _cells(rows[0], "text") and expected["outputs"][0] in _cells(rows[0], "text")
    # The exact prompt /prompt builds, its token count and the demonstrations in it.
    prompt = httpx.post(f"{examples_server}/prompt", json={"input": query, "max_demos": k}).json()
    assert browser.find_element(By.ID, "prompt").get_attribute("textContent") == prompt["prompt"]
    assert f"{prompt['n_tokens']} of {prompt['token_budget']} tokens" in browser.find_element(By.ID, "prompt-meta").text
    demos = browser.find_elements(By.CSS_SELECTOR, "#demos li")
    assert [d.get_attribute("data-id") for d in demos] == prompt["ids"]
    assert all(_cells(r, "in-prompt").startswith("yes") for r in rows)

    browser.find_element(By.ID, "generate").click()
    WebDriverWait(browser, GENERATE_WAIT_S).until(
        lambda d: d.find_element(By.ID, "generation").is_displayed()
        or "answered" in d.find_element(By.ID, "generate-status").text, message="waiting for the LM's answer")
    assert "answered" not in browser.find_element(By.ID, "generate-status").text
    generated = httpx.post(f"{examples_server}/generate", json={"input": query, "max_demos": k},
                           timeout=GENERATE_WAIT_S).json()
    assert browser.find_element(By.ID, "generation").text == generated["generation"]  # greedy: the same answer
    assert "smollm2-135m" in browser.find_element(By.ID, "generate-status").text
    _screenshot(browser)

    # A tight budget: the page says which retrieved examples it left out.
    rows = _search(browser, query, k, token_budget=60)
    left_out = [r for r in rows if _cells(r, "in-prompt") == "no: over the token budget"]
    assert left_out and "left out by the token budget" in browser.find_element(By.ID, "left-out").text


def test_reranked_and_first_stage_ranks_side_by_side_and_texts_escaped(browser, documents_server):
    query, instruction, k = "alarm in the morning", "Find a document about this request", 5
    _open(browser, documents_server)
    assert "reranked by upr:" in browser.find_element(By.ID, "about").text
    field = browser.find_element(By.ID, "instruction")
    assert field.is_displayed() and field.get_attribute("value") == instruction  # the index's, filled in
    rows = _search(browser, query, k)
    expected = httpx.post(f"{documents_server}/retrieve", json={"query": query, "instruction": instruction, "k": k},
                          timeout=WAIT_S).json()
    headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#results-head th")]
    assert headers[:5] == ["rank", "id", "reranked score", "first-stage rank", "first-stage score"]
    assert [_cells(r, "id") for r in rows] == expected["ids"]
    assert [int(_cells(r, "first-rank").split()[0]) for r in rows] == expected["first_stage_ranks"]
    assert [_cells(r, "first-score") for r in rows] == [f"{s:.4f}" for s in expected["first_stage_scores"]]
    assert sorted(expected["first_stage_ranks"]) == [1, 2, 3, 4, 5]

    # The hostile document is shown as its literal text: nothing ran, no element was made of it.
    hostile = next(r for r in rows if _cells(r, "id") == "d4")
    assert HOSTILE_TEXT in _cells(hostile, "text") and "<b>Alarm clock</b>" in _cells(hostile, "text")
    _no_alert(browser)
    assert browser.execute_script("return window.__injected === undefined")
    made = browser.execute_script("return document.querySelectorAll('main script, main img, main b').length")
    assert made == 0


def test_docs_render_offline_from_the_services_own_assets(browser, documents_server):
    browser.get(f"{documents_server}/docs")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#swagger-ui .opblock"), "Swagger UI's operations")
    paths = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "#swagger-ui .opblock-summary-path")}
    assert {"/retrieve", "/prompt", "/generate", "/health"} <= paths
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(name.startswith(documents_server) for name in loaded), loaded


def _screenshot(driver) -> None:
    """The whole page, as the README shows it."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(height + 160, 3000))  # the window's frame takes some of its height
    driver.execute_script("window.scrollTo(0, 0)")
    png = driver.get_screenshot_as_png()
    assert png.startswith(b"\x89PNG")
    if os.environ.get("TASKRET_SCREENSHOTS"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        SCREENSHOT.write_bytes(png)
    driver.set_window_size(1280, 900)
