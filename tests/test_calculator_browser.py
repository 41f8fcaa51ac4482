"""The model pages' calculator in a real browser (Debian's chromium, headless, over the DevTools protocol).

Setups drawn by hypothesis, for ten models and every method, go through the page's own entry point
(window.neurarchCalc.run, the estimator under Pyodide); the page's `calc-peak` data-bytes must equal
`neurarch-trace MODEL FLAGS --json`'s memory.peak_bytes for the same flags, to the byte. Pyodide loads once
per page; the setups of one model run in the same page. Also: the query round trip, the copy-command text,
the page without JavaScript, labels and keyboard, 390 px in dark mode, and screenshots of the calculator
(test-artifacts/calculator-*.png) with the measured Pyodide load time (test-artifacts/calculator-timing.json).
"""

from __future__ import annotations

import base64
import functools
import http.server
import io
import json
import shlex
import threading
from typing import Iterator
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from rich.console import Console

from generator.estimator.memory import job_options as j
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, load_record, write_index, write_record
from generator.settings import load_settings
from generator.site import calculator as site_calc
from generator.site.build import run_build
from test_browser import ARTIFACTS, SMALL_TEXT, Browser, _narrow, _QuietHandler, chromium_session
from test_calculator import available_models, cli_json, setups

BIG_CONFIG = "nvidia/Llama-3_3-Nemotron-Super-49B-v1"  # a 24 kB config.json: beside its page, not in it
TIMINGS: dict[str, int] = {}
SETUPS_RUN: list[tuple[str, str, bool]] = []  # (model, method, byte-equal) of every drawn setup


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The ten models' pages, built with the calculator, served over http://127.0.0.1."""
    if not site_calc.runtime_available():
        pytest.fail("node_modules/pyodide is missing: run `make install` (npm ci)")
    tmp = tmp_path_factory.mktemp("calc-site")
    snap = tmp / "snapshot"
    records = [load_record(DEFAULT_SNAPSHOT_DIR, m) for m in (*available_models(), BIG_CONFIG)]
    for r in records:
        write_record(snap, r)
    write_index(snap, [index_entry(r) for r in records])
    out = tmp / "public"
    assert run_build(snapshot_dir=snap, out_dir=out, strict=True, settings=load_settings(), search_index=False,
                     console=Console(file=io.StringIO())) == 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    try:
        with chromium_session() as b:
            yield b
    finally:
        if TIMINGS:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            ms = sorted(TIMINGS.values())
            (ARTIFACTS / "calculator-timing.json").write_text(json.dumps(
                {"pyodide_load_ms": TIMINGS, "median_ms": ms[len(ms) // 2], "setups": len(SETUPS_RUN),
                 "models": len({m for m, _, _ in SETUPS_RUN}), "methods": sorted({x for _, x, _ in SETUPS_RUN}),
                 "byte_equal": sum(ok for _, _, ok in SETUPS_RUN)}, indent=1) + "\n")


def open_page(browser: Browser, url: str, timeout: float = 90) -> None:
    """Open a model page and wait until its calculator is ready (Pyodide loaded when the query asks)."""
    browser.goto(url)
    browser.wait_for("window.neurarchCalc && document.getElementById('calc-form').hidden === false", timeout=30)
    browser.call("Runtime.evaluate", session=browser.session, timeout=timeout, expression="window.neurarchCalc.ready",
                 awaitPromise=True)


class Page:
    """One model's page, opened once; setups run through its entry point."""

    current: tuple[str, str] | None = None

    @classmethod
    def run(cls, browser: Browser, site: str, model: str, query: str) -> dict:
        if cls.current != (site, model):
            browser.scheme("light")
            open_page(browser, f"{site}models/{model}/?method=full")  # a query: Pyodide loads at once
            TIMINGS[model] = browser.js("window.neurarchCalc.loadMs")
            cls.current = (site, model)
        answer = browser.call("Runtime.evaluate", session=browser.session, timeout=60, awaitPromise=True,
                              returnByValue=True,
                              expression=f"window.neurarchCalc.run({json.dumps(query)})")["result"]["value"]
        answer["page_bytes"] = browser.js("document.getElementById('calc-peak').dataset.bytes ?? null")
        answer["page_text"] = browser.js("document.getElementById('calc-peak').textContent")
        return answer


def _cases() -> list[tuple[str, str]]:
    return [(model, method) for model in available_models() for method in j.METHODS]


@pytest.mark.parametrize(("model", "method"), _cases())
@hsettings(max_examples=3, deadline=None, database=None,
           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_pages_peak_is_the_clis_to_the_byte(site: str, browser: Browser, model: str, method: str,
                                                data: st.DataObject) -> None:
    setup = data.draw(setups(method))
    query = urlencode(setup)
    answer = Page.run(browser, site, model, query)
    code, report, err = cli_json(model, shlex.split(answer["command"])[2:])
    if code == 0:
        assert answer["ok"], (model, query, answer.get("error"))
        equal = answer["page_bytes"] == str(report["memory"]["peak_bytes"]) == str(answer["peak_bytes"])
        SETUPS_RUN.append((model, method, equal))
        assert equal, (model, query, answer["page_bytes"], report["memory"]["peak_bytes"])
        assert answer["peak_phase"] == report["memory"]["peak_phase"]
        assert answer["job"] == report["memory"]["job"]
    else:
        assert not answer["ok"] and answer["page_bytes"] is None and answer["page_text"] == "—"
        assert answer["error"].split(": error: ")[-1] in err


def test_enough_setups_were_compared() -> None:
    """At least 50 byte-equal setups across 10 models and every method (the drawn ones that are valid)."""
    if not SETUPS_RUN:
        pytest.skip("the browser comparison did not run")
    assert len(SETUPS_RUN) >= 50 and all(ok for _, _, ok in SETUPS_RUN)
    assert len({m for m, _, _ in SETUPS_RUN}) >= 10
    assert {x for _, x, _ in SETUPS_RUN} == set(j.METHODS)


def test_a_query_round_trips_through_the_form_and_the_address(site: str, browser: Browser) -> None:
    model = "Qwen/Qwen3-0.6B"
    Page.current = None
    browser.scheme("light")
    open_page(browser, f"{site}models/{model}/?grad-ckpt=1&batch=3&method=lora&lora-rank=8&colour=red")
    # The form shows the query's setup, the address holds it in the parser's order, unknown keys are named.
    assert browser.js("document.getElementById('calc-method').value") == "lora"
    assert browser.js("document.getElementById('calc-grad-ckpt').checked") is True
    assert browser.js("document.getElementById('calc-batch').value") == "3"
    assert browser.js("location.search") == "?batch=3&lora-rank=8&method=lora&grad-ckpt=1"
    assert "colour" in browser.js("document.getElementById('calc-status').textContent")
    first = browser.js("document.getElementById('calc-peak').dataset.bytes")
    code, report, _ = cli_json(model, ["--batch", "3", "--lora-rank", "8", "--method", "lora", "--grad-ckpt"])
    assert first == str(report["memory"]["peak_bytes"])
    # Changing the form recomputes and rewrites the address; opening that address gives the same result.
    browser.js("(() => { const s = document.getElementById('calc-method'); s.value = 'inference'; "
               "document.getElementById('calc-grad-ckpt').checked = false; "
               "s.dispatchEvent(new Event('change', {bubbles: true})); return true; })()")
    browser.wait_for("location.search === '?batch=3&lora-rank=8&method=inference'")
    browser.wait_for(f"document.getElementById('calc-peak').dataset.bytes !== {json.dumps(first)}")
    second = browser.js("document.getElementById('calc-peak').dataset.bytes")
    assert second == str(cli_json(model, ["--batch", "3", "--lora-rank", "8", "--method", "inference"])[1]
                         ["memory"]["peak_bytes"])
    url = browser.js("location.href")
    open_page(browser, url)
    assert browser.js("document.getElementById('calc-peak').dataset.bytes") == second
    assert browser.js("document.getElementById('calc-method').value") == "inference"


def test_a_page_whose_config_is_beside_it(site: str, browser: Browser) -> None:
    """A config.json too large to be inline (Nemotron's per-layer block list) is fetched from beside the page."""
    model = BIG_CONFIG
    Page.current = None
    open_page(browser, f"{site}models/{model}/?method=lora&batch=2&grad-ckpt=1")
    assert browser.js("document.getElementById('calc-model').dataset.config") == "config.json"
    assert browser.js("document.getElementById('calc-peak').dataset.bytes") == \
        str(cli_json(model, ["--batch", "2", "--method", "lora", "--grad-ckpt"])[1]["memory"]["peak_bytes"])


def test_the_copy_button_gives_the_cli_command(site: str, browser: Browser) -> None:
    model = "openai-community/gpt2"
    Page.current = None
    open_page(browser, f"{site}models/{model}/?method=qlora&weights=nf4&lora-targets=c_attn&tokens=512")
    text = browser.js("document.getElementById('calc-command').textContent")
    assert text == f"neurarch-trace {model} --tokens 512 --method qlora --weights nf4 --lora-targets c_attn"
    code, report, _ = cli_json(model, shlex.split(text)[2:])
    assert code == 0 and browser.js("document.getElementById('calc-peak').dataset.bytes") == \
        str(report["memory"]["peak_bytes"])
    browser.call("Browser.grantPermissions", permissions=["clipboardReadWrite", "clipboardSanitizedWrite"])
    browser.js("document.getElementById('calc-copy').click()")
    status = browser.wait_for("(() => { const s = document.getElementById('calc-status').textContent; "
                              "return /^(Copied|Selected)/.test(s) ? s : ''; })()")
    assert text in status or status.startswith("Selected")


def test_without_javascript_the_page_keeps_its_static_figures(site: str, browser: Browser) -> None:
    model = "meta-llama/Llama-3.1-8B"
    Page.current = None
    browser.send("Emulation.setScriptExecutionDisabled", value=True)
    try:
        browser.goto(f"{site}models/{model}/?method=lora")
        assert browser.js("document.getElementById('calc-form').hidden") is True
        assert browser.js("document.getElementById('calc-peak').dataset.bytes") == \
            str(cli_json(model, [])[1]["memory"]["peak_bytes"])  # the CLI with no flags: the site's setup
        assert "needs JavaScript" in browser.js("document.getElementById('calc-status').textContent")
        assert browser.js("document.getElementById('calc-copy').hidden") is True
        assert browser.js("window.neurarchCalc === undefined")
    finally:
        browser.send("Emulation.setScriptExecutionDisabled", value=False)


def test_the_form_has_labels_legends_and_a_live_result(site: str, browser: Browser) -> None:
    Page.current = None
    browser.scheme("light")
    browser.goto(f"{site}models/openai-community/gpt2/")
    browser.wait_for("document.getElementById('calc-form').hidden === false")
    unlabelled = browser.js("[...document.querySelectorAll('#calc-form input, #calc-form select')]"
                            ".filter(e => !(e.labels && e.labels.length && e.labels[0].textContent.trim()) "
                            "|| !document.getElementById(e.getAttribute('aria-describedby'))).map(e => e.id)")
    assert unlabelled == []
    assert browser.js("document.querySelectorAll('#calc-form fieldset > legend').length") >= 2
    assert browser.js("document.getElementById('calc-peak').tagName") == "OUTPUT"
    assert browser.js("document.getElementById('calc-peak').getAttribute('aria-live')") == "polite"
    # Keyboard: focus the method field, choose with the arrow key; the result is recomputed (Pyodide loads on focus).
    browser.js("document.getElementById('calc-method').focus()")
    assert browser.js("document.activeElement.id") == "calc-method"
    browser.js("(() => { const s = document.getElementById('calc-method'); s.value = 'lora'; "
               "s.dispatchEvent(new Event('change', {bubbles: true})); return true; })()")
    browser.wait_for("location.search === '?method=lora'", timeout=90)
    browser.wait_for("document.querySelectorAll('#calc-details table caption').length === 2", timeout=30)


@pytest.mark.parametrize(("name", "narrow", "scheme"), [("desktop", False, "light"), ("390-dark", True, "dark")])
def test_the_calculator_fits_390_px_and_dark_mode_with_screenshots(site: str, browser: Browser, name: str,
                                                                   narrow: bool, scheme: str) -> None:
    Page.current = None
    browser.scheme(scheme)
    _narrow(browser, narrow)
    try:
        open_page(browser, f"{site}models/meta-llama/Llama-3.1-8B/?tokens=4096&batch=4&method=lora&grad-ckpt=1")
        assert browser.js("document.querySelectorAll('#calc-details tbody tr').length") >= 10
        if narrow:
            assert browser.js("window.innerWidth") == 390
            assert browser.js("document.documentElement.scrollWidth") <= 390
            assert browser.js(SMALL_TEXT) == []
            right = browser.js("Math.max(...[...document.querySelectorAll('#calculator *')]"
                               ".map(e => e.getBoundingClientRect().right))")
            assert right <= 390
        if scheme == "dark":
            assert browser.js("getComputedStyle(document.body).backgroundColor") == "rgb(21, 23, 26)"
            assert browser.js("getComputedStyle(document.querySelector('#calc-form select')).colorScheme") \
                in ("light dark", "normal", "dark")
        rect = browser.js("(() => { const r = document.getElementById('calculator').getBoundingClientRect(); "
                          "return [r.top + scrollY, r.height]; })()")
        width = 390 if narrow else 1280
        shot = browser.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                            clip={"x": 0, "y": rect[0] - 8, "width": width, "height": rect[1] + 16, "scale": 1})
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"calculator-{name}.png").write_bytes(base64.b64decode(shot["data"]))
    finally:
        _narrow(browser, False)
        browser.scheme("light")
