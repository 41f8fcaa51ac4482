"""The built site in a real browser: Debian's chromium, headless, driven over the DevTools protocol.

The site is built from the committed snapshot (with its Pagefind index) and served by a local
http.server. The test takes screenshots of the home page, a model page and a search result (light
and dark) into test-artifacts/ and asserts on the DOM: the sections are present, the filter hides
the models that do not fit (with JavaScript and without it), and search finds a known model.

chromium comes from the project's own test setup (`make test` runs `make browser`, which apt-installs
it when missing). Only when no chromium binary can be found is the test skipped, with that reason.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from rich.console import Console

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR
from generator.settings import load_settings
from generator.site import search
from generator.site.build import run_build

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1280,900")
MODEL = "openai-community/gpt2"  # small: fits every card
BIG = "meta-llama/Llama-3.1-405B"  # fits no single card for a full fine-tune
SHARD_SIZE = 60  # the sharded case: the snapshot's ~157 models in 3 search shards, gpt2 in shard 2
SECTIONS = ("headline", "provenance", "count", "cost", "memory", "assumptions", "validation", "structure",
            "findings", "own-model")


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """A minimal DevTools-protocol client: one page target, commands awaited by id, events buffered."""

    def __init__(self, binary: str, profile: Path) -> None:
        from websockets.sync.client import connect

        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        deadline = time.monotonic() + 30
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                url = found.group(1)
                break
        if url is None:
            self.proc.kill()
            raise RuntimeError("chromium did not start (no DevTools URL on stderr)")
        threading.Thread(target=self._drain, daemon=True).start()
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(url, max_size=64 * 1024 * 1024, open_timeout=30))
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")

    def _drain(self) -> None:  # chromium writes to stderr all along; a full pipe would block it
        assert self.proc.stderr is not None
        for _ in self.proc.stderr:
            pass

    def call(self, method: str, session: str | None = None, timeout: float = 30, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.call(method, session=self.session, **params)

    def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(i)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(method)
            self.events.append(json.loads(self.ws.recv(timeout=remaining)))

    def goto(self, url: str) -> None:
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(expression)

    def screenshot(self, path: Path, full: bool = False) -> None:
        result = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=full)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(result["data"]))

    def scheme(self, value: str) -> None:
        self.send("Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": value}])

    def close(self) -> None:
        try:
            self.stack.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve(tmp_path_factory.mktemp("browser") / "public")


@pytest.fixture(scope="module")
def served_sharded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve(tmp_path_factory.mktemp("browser-sharded") / "public", search_shard_size=SHARD_SIZE)


def _serve(out: Path, **kwargs: Any) -> Iterator[str]:
    """Build the committed snapshot into out and serve it over http://127.0.0.1 while the tests run."""
    if search.executable() is None:
        pytest.fail("Pagefind is not installed: pip install 'pagefind[bin]' (a dependency of the project)")
    rc = run_build(snapshot_dir=DEFAULT_SNAPSHOT_DIR, out_dir=out, strict=False, settings=load_settings(),
                   console=Console(file=io.StringIO(), width=200), **kwargs)
    assert rc == 0
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@contextlib.contextmanager
def chromium_session() -> Iterator[Browser]:
    """A headless chromium with a fresh profile, closed and removed afterwards; the test skips without one."""
    binary = _chromium()
    if binary is None:
        pytest.skip("chromium is not installed and could not be installed (run `make browser` as root: "
                    "apt-get install -y chromium)")
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    b = Browser(binary, profile)
    try:
        yield b
    finally:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_session() as b:
        yield b


def _visible(model: str) -> str:
    """JS: is the home-table row of `model` displayed?"""
    return (f"(() => {{ const a = [...document.querySelectorAll('table.models tbody th a')]"
            f".find(a => a.textContent === {json.dumps(model)}); return !!a && a.closest('tr').offsetParent !== null; }})()")


def test_home_page_filters_with_and_without_javascript(served: str, browser: Browser) -> None:
    browser.scheme("light")
    browser.goto(served)
    assert browser.js("document.documentElement.lang") == "en"
    assert browser.js("document.querySelector('a.skip').getAttribute('href')") == "#main"
    total = browser.js("document.querySelectorAll('table.models tbody tr[data-family]').length")
    assert total > 100
    assert browser.wait_for("document.getElementById('f-count').textContent") == f"{total} of {total} models shown"
    browser.screenshot(ARTIFACTS / "home.png")
    assert browser.js(_visible(BIG)) and browser.js(_visible(MODEL))

    choose = ("(() => { const f = document.getElementById('filters'); f.elements.card.value = 't4-16-gb'; "
              "f.elements.method.value = 'full'; f.dispatchEvent(new Event('change')); return true; })()")
    browser.js(choose)
    assert not browser.js(_visible(BIG)) and browser.js(_visible(MODEL))
    shown = browser.js("document.querySelectorAll('table.models tbody tr[data-family]:not([hidden])').length")
    assert 0 < shown < total
    assert "card=t4-16-gb" in browser.js("location.search")
    browser.screenshot(ARTIFACTS / "home-filtered-t4-full.png")

    # The same filter with JavaScript off: CSS :has() hides the rows.
    browser.send("Emulation.setScriptExecutionDisabled", value=True)
    try:
        browser.goto(served)
        assert browser.js(_visible(BIG))
        browser.js("(() => { document.getElementById('f-card').value = 't4-16-gb'; "
                   "document.getElementById('f-method').value = 'full'; return true; })()")
        assert not browser.js(_visible(BIG)) and browser.js(_visible(MODEL))
        browser.js("(() => { document.getElementById('f-card').value = ''; "
                   "document.getElementById('f-family').value = 'gpt2'; return true; })()")
        assert not browser.js(_visible(BIG)) and browser.js(_visible(MODEL))
        assert browser.js("document.getElementById('f-count').textContent") == ""  # the script did not run
    finally:
        browser.send("Emulation.setScriptExecutionDisabled", value=False)


def test_model_page_has_its_sections_and_charts(served: str, browser: Browser) -> None:
    for scheme in ("light", "dark"):
        browser.scheme(scheme)
        browser.goto(f"{served}models/{MODEL}/")
        ids = browser.js("[...document.querySelectorAll('[id]')].map(e => e.id)")
        assert [i for i in ids if i in SECTIONS] == list(SECTIONS)
        assert browser.js("document.querySelector('#batch-chart title').textContent").startswith("Largest batch")
        assert browser.js("document.querySelector('#batch-chart').getBoundingClientRect().width") > 300
        assert browser.js("document.querySelector('#memory-chart title').textContent").startswith("GPU memory of")
        assert browser.js("document.querySelector('#memory-chart').getBoundingClientRect().width") > 300
        assert browser.js("document.querySelectorAll('#memory-chart polyline').length") == 3
        assert "median error" in browser.js("document.getElementById('accuracy-line').textContent")
        assert browser.js("document.querySelectorAll('table caption').length") >= 3
        if scheme == "dark":
            bg = browser.js("getComputedStyle(document.body).backgroundColor")
            assert bg == "rgb(21, 23, 26)"
        browser.screenshot(ARTIFACTS / f"model-{scheme}.png", full=True)
    browser.scheme("light")
    # Keyboard focus is visible: the skip link comes on screen with an outline.
    browser.send("Input.dispatchKeyEvent", type="keyDown", key="Tab", code="Tab", windowsVirtualKeyCode=9)
    browser.send("Input.dispatchKeyEvent", type="keyUp", key="Tab", code="Tab", windowsVirtualKeyCode=9)
    assert browser.js("document.activeElement.className") == "skip"
    assert browser.js("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    assert browser.js("document.activeElement.getBoundingClientRect().left") >= 0


def test_accuracy_page_renders_in_both_schemes(served: str, browser: Browser) -> None:
    for scheme in ("light", "dark"):
        browser.scheme(scheme)
        browser.goto(f"{served}accuracy/")
        ids = browser.js("[...document.querySelectorAll('section[id]')].map(e => e.id)")
        assert ids == ["datasets", "errors", "public-metrics", "setups", "families", "allocator", "misses",
                       "unflagged-oom", "capped", "unit-ambiguous", "fits", "definitions", "fitted", "excluded"]
        assert browser.js("document.querySelectorAll('table caption').length") >= 3
        browser.screenshot(ARTIFACTS / f"accuracy-{scheme}.png", full=True)
    browser.scheme("light")


def test_search_finds_a_known_model(served: str, browser: Browser) -> None:
    browser.scheme("light")
    browser.goto(f"{served}search/?q=gpt2")
    text = browser.wait_for("(() => { const s = document.getElementById('search-status').textContent; "
                            "return /result/.test(s) ? s : ''; })()")
    assert "gpt2" in text
    links = browser.js("[...document.querySelectorAll('#search-results a')].map(a => [a.textContent, a.href])")
    assert any(title == MODEL and href == f"{served}models/{MODEL}/" for title, href in links), links
    browser.screenshot(ARTIFACTS / "search-gpt2.png")
    # The header's search box on any page leads to the same results.
    browser.goto(f"{served}models/{MODEL}/")
    browser.js("(() => { document.getElementById('q').value = 'Qwen3-0.6B'; "
               "document.querySelector('form.site-search').submit(); return true; })()")
    browser.wait_event("Page.loadEventFired")
    browser.wait_for("document.querySelectorAll('#search-results a').length > 0")
    titles = browser.js("[...document.querySelectorAll('#search-results a')].map(a => a.textContent)")
    assert "Qwen/Qwen3-0.6B" in titles, titles
    assert os.path.getsize(ARTIFACTS / "search-gpt2.png") > 1000


def test_search_finds_a_model_outside_the_first_shard(served_sharded: str, browser: Browser) -> None:
    """The index in 3 shards: gpt2 and Qwen3-0.6B are in shards 2 and 1, found only if search.js
    merges the shards listed in pagefind/shards.json into the first."""
    with urllib.request.urlopen(served_sharded + "pagefind/shards.json", timeout=10) as response:
        assert json.load(response) == {"shards": ["pagefind/", "pagefind-1/", "pagefind-2/"]}
    assert search.shard_of(MODEL, 3) == 2 and search.shard_of("Qwen/Qwen3-0.6B", 3) == 1
    browser.goto(f"{served_sharded}search/?q=gpt2")
    browser.wait_for("(() => { const s = document.getElementById('search-status').textContent; "
                     "return /result/.test(s) ? s : ''; })()")
    links = browser.js("[...document.querySelectorAll('#search-results a')].map(a => [a.textContent, a.href])")
    assert any(title == MODEL and href == f"{served_sharded}models/{MODEL}/" for title, href in links), links
    # The gpt2 family page's document is in shard 0: found in the same search as the shards' models.
    assert any(href == f"{served_sharded}families/gpt2/" for _, href in links), links
    browser.screenshot(ARTIFACTS / "search-gpt2-sharded.png")
    browser.goto(f"{served_sharded}search/?q=Qwen3-0.6B")
    browser.wait_for("document.querySelectorAll('#search-results a').length > 0")
    titles = browser.js("[...document.querySelectorAll('#search-results a')].map(a => a.textContent)")
    assert "Qwen/Qwen3-0.6B" in titles, titles


# At 390 px (a phone): no sideways scroll of the page, no text under 11 px (SVG text measured as
# drawn, generated column names included), and the answer cells on screen.
NARROW_PAGES = ("", f"models/{MODEL}/", f"models/{BIG}/", "cards/t4-16-gb/", "accuracy/", "sources/")
SMALL_TEXT = """(() => {
  const small = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.textContent.trim()) continue;
    const el = node.parentElement;
    const range = document.createRange(); range.selectNodeContents(node);
    const rects = [...range.getClientRects()].filter(r => r.width > 1 && r.height > 1);
    if (!rects.length || el.closest('title, desc, style, script')) continue;
    let size = parseFloat(getComputedStyle(el).fontSize);
    if (el instanceof SVGElement) size *= el.getScreenCTM().a;
    if (size < 11) small.push([el.tagName, node.textContent.trim().slice(0, 30), size]);
  }
  for (const el of document.querySelectorAll('td[data-label]')) {
    const before = getComputedStyle(el, '::before');
    if (before.content !== 'none' && el.getClientRects().length && parseFloat(before.fontSize) < 11)
      small.push(['::before', el.dataset.label, parseFloat(before.fontSize)]);
  }
  return small.slice(0, 10);
})()"""


def _narrow(browser: Browser, on: bool) -> None:
    if on:
        browser.send("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=1, mobile=True)
    else:
        browser.send("Emulation.clearDeviceMetricsOverride")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_pages_fit_a_390_px_screen(served: str, browser: Browser, scheme: str) -> None:
    browser.scheme(scheme)
    _narrow(browser, True)
    try:
        for path in NARROW_PAGES:
            browser.goto(served + path)
            assert browser.js("window.innerWidth") == 390
            assert browser.js("document.documentElement.scrollWidth") <= 390, path
            assert browser.js(SMALL_TEXT) == [], path
            if scheme == "dark":
                assert browser.js("getComputedStyle(document.body).backgroundColor") == "rgb(21, 23, 26)"
            name = path.strip("/").replace("/", "-") or "home"
            browser.screenshot(ARTIFACTS / "narrow" / f"{name}-{scheme}.png", full=True)
        # The answers are on screen: the home table's smallest cards, a card page's batches, and the
        # model page's largest batch per card, each inside the 390 px.
        for path, cells in (("", "table.models tbody tr td.answer"), ("cards/t4-16-gb/", "table.fits td.answer"),
                            ("cards/t4-16-gb/", "#several td.answer"),
                            (f"models/{MODEL}/", "#memory table.stack td.answer"),
                            (f"models/{BIG}/", "#memory table.stack td.answer"),
                            (f"models/{BIG}/", "#plans td.answer"), (f"models/{BIG}/", "#serving td.answer"),
                            (f"models/{BIG}/", "#cost table.stack td.answer")):
            browser.goto(served + path)
            edges = browser.js(f"[...document.querySelectorAll({json.dumps(cells)})].slice(0, 12)"
                               ".map(td => {{ const r = td.getBoundingClientRect(); return [r.left, r.right]; }})")
            assert edges and all(0 <= left and right <= 390 for left, right in edges), (path, edges)
        # A long model id breaks at the end of a line, not every few characters.
        browser.goto(served)
        lines = browser.js("(() => { const a = [...document.querySelectorAll('table.models tbody th a')]"
                           ".find(a => a.textContent.length > 40); const h = parseFloat(getComputedStyle(a).lineHeight);"
                           " return a.getClientRects().length || a.getBoundingClientRect().height / h; })()")
        assert lines <= 2
    finally:
        _narrow(browser, False)
        browser.scheme("light")
