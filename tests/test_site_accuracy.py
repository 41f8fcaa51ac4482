"""The accuracy page (/accuracy/) and each model page's accuracy line show accuracy.json's figures.

tests/test_accuracy.py checks that data/measurements/accuracy.json is what the committed dataset gives;
these tests parse the built pages and check every figure on them against that JSON (read here with
json, not through the site code), so the chain dataset -> JSON -> page is tested end to end. Figures
are compared as numbers: a page's "10.0%" must be within rounding (0.05) of the JSON's 9.99.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from generator import format as f
from generator.settings import load_settings
from generator.accuracy import SITE_SETUPS
from generator.site import accuracy_line, accuracy_page, manifest
from generator.site.build import run_build
from generator.site.render import render_accuracy, render_model_page

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements" / "accuracy.json"
GOLDEN_SNAPSHOT = Path(__file__).parent / "golden" / "snapshot"
GOLDEN_MODELS = len(json.loads((GOLDEN_SNAPSHOT / "index.json").read_text(encoding="utf-8"))["models"])
SETTINGS = load_settings()
LABELS = {"full fine-tuning": "full", "LoRA": "lora", "QLoRA": "qlora", "serving": "inference"}  # as the pages name the methods
ROUNDING = 0.05 + 1e-9  # one decimal shown


class _Tables(HTMLParser):
    """Every table of a page: its caption, its own data-dataset, and rows of (tr attributes, cell texts)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[dict[str, Any]] = []
        self.cell: list[str] | None = None
        self.in_caption = False
        self.in_head = False
        self.sections: dict[str, str] = {}
        self.section: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self.section = a.get("id")
            self.sections[self.section or ""] = ""
        elif tag == "table":
            self.tables.append({"caption": "", "dataset": a.get("data-dataset"), "rows": []})
        elif tag == "caption":
            self.in_caption = True
        elif tag == "thead":
            self.in_head = True
        elif tag == "tr" and not self.in_head:
            self.tables[-1]["rows"].append((a, []))
        elif tag in ("td", "th") and not self.in_head:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption":
            self.in_caption = False
        elif tag == "thead":
            self.in_head = False
        elif tag in ("td", "th") and self.cell is not None:
            self.tables[-1]["rows"][-1][1].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "section":
            self.section = None

    def handle_data(self, data: str) -> None:
        if self.in_caption:
            self.tables[-1]["caption"] += data
        elif self.cell is not None:
            self.cell.append(data)
        if self.section:
            self.sections[self.section] += data


def _parse(html: str) -> _Tables:
    parser = _Tables()
    parser.feed(html)
    return parser


def _table(page: _Tables, caption_start: str, dataset: str | None = None) -> list[tuple[dict, list[str]]]:
    """The body rows (not the header row) of the one table whose caption starts so."""
    found = [t for t in page.tables if t["caption"].startswith(caption_start) and (dataset is None or t["dataset"] == dataset)]
    assert len(found) == 1, caption_start
    return found[0]["rows"]


def _int(text: str) -> int:
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", text), text
    return int(text.replace(",", ""))


def _pct(text: str) -> float:
    found = re.fullmatch(r"([+-]?\d+\.\d)%", text)
    assert found, text
    return float(found.group(1))


def _share(text: str) -> tuple[int, int]:
    """"24 of 24 (100%)" -> (24, 24); the percentage must be the share's."""
    found = re.fullmatch(r"(\d[\d,]*) of (\d[\d,]*)(?: \((\d+(?:\.\d)?)%\))?", text)
    assert found, text
    part, whole = _int(found.group(1)), _int(found.group(2))
    if whole:
        assert found.group(3) is not None and abs(float(found.group(3)) - 100 * part / whole) <= ROUNDING, text
    else:
        assert found.group(3) is None, text
    return part, whole


def _gb(text: str) -> float:
    found = re.fullmatch(r"([\d,.]+) (GB|MB)", text)
    assert found, text
    return float(found.group(1).replace(",", "")) * (1e9 if found.group(2) == "GB" else 1e6)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("accuracy") / "public"
    assert run_build(snapshot_dir=GOLDEN_SNAPSHOT, out_dir=out, strict=True, settings=SETTINGS,
                     console=Console(file=io.StringIO()), search_index=False) == 0
    return out


def _committed() -> dict[str, Any]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def check_page(html: str, table: dict[str, Any]) -> None:
    """Every figure of the accuracy page against the JSON table it was built from."""
    page = _parse(html)
    # Rows per dataset.
    rows = {a["data-dataset"]: cells for a, cells in _table(page, "Measured rows per dataset")}
    assert rows == {r["dataset"]: rows[r["dataset"]] for r in table["rows"]}
    for r in table["rows"]:
        assert (_int(rows[r["dataset"]][1]), _int(rows[r["dataset"]][2])) == (r["rows"], r["compared"])
    # Errors: every dataset x method, a row the JSON lacks or with 0 compared reads "no measured runs".
    errors = {(a["data-dataset"], LABELS[a["data-method"]]): cells for a, cells in _table(page, "Error of the estimated")}
    assert sorted(errors) == sorted((r["dataset"], m) for r in table["rows"] for m in LABELS.values())
    assert {(e["dataset"], e["method"]) for e in table["errors"]} <= set(errors), "a method the page does not show"
    for (dataset, method), cells in errors.items():
        e = next((x for x in table["errors"] if x["dataset"] == dataset and x["method"] == method), None)
        assert _int(cells[2]) == (0 if e is None else e["compared"])
        if e is None or e["median_abs_pct"] is None:
            assert cells[3:] == ["no measured runs"], cells
            continue
        shown = [_pct(c) for c in cells[3:]]
        wanted = [e["median_abs_pct"], e["p90_abs_pct"], e["max_abs_pct"], e["mean_signed_pct"]]
        assert all(abs(s - w) <= ROUNDING for s, w in zip(shown, wanted)) and len(shown) == 4, (cells, e)
        assert cells[6].startswith("+") == (e["mean_signed_pct"] >= 0.05)
    # Fit verdicts: per dataset, per method and card, and the all-cards sums.
    for r in table["rows"]:
        dataset = r["dataset"]
        verdicts = _table(page, "Fit verdicts on", dataset)
        for label, method in LABELS.items():
            mine = [cells for a, cells in verdicts if a["data-method"] == label]
            fits = [x for x in table["fits"] if x["dataset"] == dataset and x["method"] == method]
            if not fits:
                assert mine == [[label, "no measured runs"]]
                continue
            assert [c[1] for c in mine] == [x["card"] for x in fits] + ["all cards"]
            for cells, x in zip(mine, fits):
                assert abs(_gb(cells[2]) - x["budget_bytes"]) <= 0.005 * x["budget_bytes"], cells
                assert _int(cells[3]) == x["jobs"]
                assert _share(cells[4]) == (x["nonfit_flagged"], x["nonfit"])
                assert _share(cells[5]) == (x["false_wont_fit"], x["fit"])
                assert _share(cells[6]) == (x["fit_tight"], x["fit"])
            total = mine[-1]
            assert _int(total[3]) == sum(x["jobs"] for x in fits)
            assert _share(total[4]) == (sum(x["nonfit_flagged"] for x in fits), sum(x["nonfit"] for x in fits))
            assert _share(total[5]) == (sum(x["false_wont_fit"] for x in fits), sum(x["fit"] for x in fits))
            assert _share(total[6]) == (sum(x["fit_tight"] for x in fits), sum(x["fit"] for x in fits))
    # Public runs out of memory that the estimate does not flag: each with its card, both figures and its cause.
    oom = table.get("unflagged_oom") or []
    if oom:
        listed = [cells for _, cells in _table(page, "Public runs out of memory that the estimate does not flag")]
        assert [c[0] for c in listed] == [x["id"] for x in oom]
        for cells, x in zip(listed, oom):
            assert (cells[1], cells[2], cells[3], cells[6]) == (x["model"], x["method"], x["card"], x["cause"])
            assert abs(_gb(cells[4]) - x["estimate_bytes"]) <= 0.005 * x["estimate_bytes"], cells
            assert abs(_gb(cells[5]) - x["budget_bytes"]) <= 0.005 * x["budget_bytes"], cells
            assert x["estimate_bytes"] <= x["budget_bytes"]
    else:
        assert "unflagged-oom" not in page.sections
    # Public runs whose length is a cap: each with its cap, the error at the cap and its cause.
    capped = table.get("capped") or []
    if capped:
        listed = [cells for _, cells in _table(page, "Public runs with a length cap")]
        assert [c[0] for c in listed] == [x["id"] for x in capped]
        for cells, x in zip(listed, capped):
            assert (cells[1], cells[2], cells[5]) == (x["model"], x["method"], x["cause"])
            assert _int(cells[3]) == x["cap_tokens"] and abs(_pct(cells[4]) - x["error_pct"]) <= ROUNDING
    else:
        assert "capped" not in page.sections
    # The allocator replay by setup: every row and figure of the JSON's.
    replayed = table.get("allocator") or []
    if replayed:
        listed = [cells for _, cells in _table(page, "Simulated steps replayed through the caching allocator")]
        assert [c[0] for c in listed] == [a["setup"] for a in replayed]
        for cells, a in zip(listed, replayed):
            assert _int(cells[1]) == a["runs"] and _int(cells[7]) == a["headroom_short"]
            pairs = [re.fullmatch(r"(\S+) \((\S+)\)", cells[i]) for i in (2, 3)]
            assert all(pairs), cells
            shown = [_pct(x) for m in pairs for x in m.groups()] + [_pct(c) for c in cells[4:7]]  # type: ignore[union-attr]
            wanted = [a["reserved_over_median_pct"], a["reserved_over_max_pct"], a["least_card_over_median_pct"],
                      a["least_card_over_max_pct"], a["reserved_error_median_abs_pct"],
                      a["reserved_error_mean_signed_pct"], a["headroom_margin_min_pct"]]
            assert all(abs(x - w) <= ROUNDING for x, w in zip(shown, wanted)), (cells, a)
            # expandable segments: "median (max) in runs; short", or a dash where no run was replayed so
            if a["expandable_runs"]:
                got = re.fullmatch(r"(\S+) \((\S+)\) in (\d+); (\d+) short", cells[8])
                assert got, cells
                assert abs(_pct(got[1]) - a["least_card_expandable_median_pct"]) <= ROUNDING
                assert abs(_pct(got[2]) - a["least_card_expandable_max_pct"]) <= ROUNDING
                assert (int(got[3]), int(got[4])) == (a["expandable_runs"], a["expandable_short"])
            else:
                assert cells[8] == "—" and a["least_card_expandable_median_pct"] is None
    else:
        assert "allocator" not in page.sections
    # Definitions, fitted constants, excluded rows.
    for key, text in table["definitions"].items():
        assert key in page.sections["definitions"] and text in page.sections["definitions"]
    fitted = table.get("fitted_constants") or []
    assert ("Nothing is fitted" in page.sections["fitted"]) == (not fitted)
    assert all(x in page.sections["fitted"] for x in fitted)
    excluded = table.get("excluded") or []
    if not excluded:
        assert page.sections["excluded"].split("Excluded rows", 1)[1].strip().startswith("None")
    else:
        listed = [cells for _, cells in _table(page, "Measured rows left out")]
        assert [(c[1], _int(c[2])) for c in listed] == [
            (x["reason"], len(x["rows"]) if isinstance(x["rows"], list) else x["rows"]) for x in excluded]


def check_line(html: str, table: dict[str, Any], model: str = "", qlora: bool = True) -> None:
    """The model page's accuracy line: per method, the runs of the setup the page prices (its row of the by-setup
    table, or where `model` is among its runs that row without them, held_out; figures equal), or "no measured runs
    of this setup (...)" followed by other setups' runs, each named."""
    found = re.search(r'<p id="accuracy-line">(.*?)</p>', html, re.S)
    assert found
    text = unescape(re.sub(r"<[^>]+>", "", found.group(1)))
    assert "measured peaks of the same setups on other models" in text and "over every measured run" not in text
    segments = dict(re.findall(r"(full fine-tuning|QLoRA|LoRA|serving): (.*?)(?=; (?:QLoRA|LoRA|serving): |\. How we|\.$)", text))
    # a quantised checkpoint's page prices no QLoRA and quotes none
    assert sorted(segments) == sorted(k for k in LABELS if qlora or k != "QLoRA"), text
    setups = {e["method"]: e for e in table.get("setups", []) if e["compared"]}
    setups.update({e["method"]: e for e in table.get("held_out", []) if e["dataset"] == model})  # its own held out
    for label, segment in segments.items():
        method = LABELS[label]
        # (runs, what, median, p90); one run's error is its own, read as both (a GPU run's: which way it misses)
        said = [(n, what, median or one or side, p90 or one or side) for n, what, median, p90, one, side in
                re.findall(r"(\d[\d,]*) ([^,]+), (?:median error ([\d.]+%), p90 ([\d.]+%)|error ([\d.]+%)|"
                           r"the estimate ([\d.]+%) (?:under|over) it)", segment)]
        assert all((n == "1") == ("median" not in segment.split(what, 1)[1][:16]) for n, what, _, _ in said), segment
        mine = re.match(r"\d[\d,]* CPU-simulated runs? of this setup \(([^)]*)\)", segment)
        if mine:  # the page's own setup, figures from its row; then the method's public GPU runs, of other setups
            setup, _, swap = mine.group(1).partition("; ")  # what the runs ran for the page's (SUBSTITUTED)
            setup = setup.replace(" / ", ", ")
            assert swap == accuracy_line.SUBSTITUTED.get(method, ""), segment
            assert setup in {f"{SITE_SETUPS.get(method)}{e}{i}" for e in ("", ", eager") for i in ("", ", images")}, \
                segment
            # the runs that measured the allocated peak the page gives, where any did; then, in parentheses, how
            # many measured more (reserved memory, the driver's count) and which way the estimate misses them
            by_metric = [e for e in table.get("public_metrics", []) if e["method"] == method and e["compared"]]
            allocated = next((e for e in by_metric if e["dataset"] == "allocated"), None)
            public = allocated or next((e for e in table["errors"] if e["dataset"] == "public"
                                        and e["method"] == method and e["compared"]), None)
            assert len(said) == 1 + (public is not None), segment
            rows = [setups[setup]] + ([public] if public else [])
            if public:
                name = "that measured the allocated peak this page gives" if allocated else ""
                gpu = re.search(r"public GPU runs? of other setups ?" + name + r", (?:median error [\d.]+%, p90 [\d.]+%, )?"
                                r"the estimate ([\d.]+)% (under|over) (?:the run on average|it)((?: \(.*?\))*)$", segment)
                assert gpu, segment
                assert abs(float(gpu.group(1)) - abs(public["mean_signed_pct"])) <= ROUNDING
                assert (gpu.group(2) == "under") == (public["mean_signed_pct"] < 0)
                cached = re.findall(r"\((\d[\d,]*) more measured ([^:]+): the estimate ([\d.]+)% (under|over) "
                                    r"(?:them on average|it)\)", gpu.group(3))
                others = [e for e in by_metric if e["dataset"] != "allocated"] if allocated else []
                assert len(cached) == len(others), segment
                for (n, what, mean, side), e in zip(cached, others, strict=True):
                    assert _int(n) == e["compared"] and what == accuracy_line.CACHED_METRICS[e["dataset"]]
                    assert abs(float(mean) - abs(e["mean_signed_pct"])) <= ROUNDING
                    assert (side == "under") == (e["mean_signed_pct"] < 0)
        else:
            assert segment.startswith("no measured runs of this setup ("), segment
            rows = []
            for _, name, _, _ in said:
                nearest = re.match(r"CPU-simulated runs \(([^)]*)\)", name)
                if nearest:
                    rows.append(setups[nearest.group(1).replace(" / ", ", ")])
                else:
                    rows.append(next(e for e in table["errors"] if e["method"] == method and e["compared"]
                                     and name.startswith(accuracy_page.dataset_name(e["dataset"]))))
            if said:
                assert "; other setups: " in segment, segment
        for (n, _, median, p90), e in zip(said, rows):
            assert _int(n) == e["compared"]
            assert abs(_pct(median) - e["median_abs_pct"]) <= ROUNDING and abs(_pct(p90) - e["p90_abs_pct"]) <= ROUNDING


def test_an_eager_page_reads_the_eager_rows_and_names_what_no_run_measured() -> None:
    table = accuracy_page.load()
    assert table is not None
    eager = {m["label"]: m for m in accuracy_line.model_line(table, None, "eager")["methods"]}
    sdpa = {m["label"]: m for m in accuracy_line.model_line(table, None, "sdpa")["methods"]}
    assert eager["full fine-tuning"]["runs"][0]["dataset"] == "CPU-simulated runs of this setup (full / AMP / eager)"
    assert sdpa["full fine-tuning"]["runs"][0]["dataset"] == "CPU-simulated runs of this setup (full / AMP)"
    assert eager["full fine-tuning"]["runs"] != sdpa["full fine-tuning"]["runs"]
    # the site's QLoRA was simulated with bitsandbytes (cpu-sim-qlora.jsonl, FINDINGS.md F29), and under eager
    # attention on the eager pages' families (cpu-sim-extra.jsonl, FINDINGS.md F75)
    # The CPU has no paged memory: the runs say they ran AdamW for the page's paged AdamW (audit of issue 13)
    qlora = "CPU-simulated runs of this setup (QLoRA / AMP / fp32 adapters / all-linear / double quant / checkpointing"
    swap = "; " + accuracy_line.SUBSTITUTED["qlora"] + ")"
    assert swap.startswith("; run with AdamW as paged AdamW needs CUDA") and "," not in swap
    assert sdpa["QLoRA"]["runs"][0]["dataset"] == qlora + swap
    assert eager["QLoRA"]["runs"][0]["dataset"] == qlora + " / eager" + swap
    # a quantised checkpoint's page prices no QLoRA, and quotes no QLoRA error
    unquoted = {m["label"] for m in accuracy_line.model_line(table, None, "sdpa", qlora=False)["methods"]}
    assert "QLoRA" not in unquoted and "LoRA" in unquoted
    # no step fed an image to a model without SDPA: the line says so, and what it quotes instead
    none = {m["label"]: m for m in accuracy_line.model_line(table, None, "eager", images=True)["methods"]}
    assert none["QLoRA"]["runs"] == [] and none["QLoRA"]["setup"] == accuracy_line.PAGE_SETUPS["qlora"]
    assert none["QLoRA"]["others"], none["QLoRA"]
    for line in (eager, sdpa):  # no CPU run of a chunked-prefill server: said, not pooled
        assert line["serving"]["runs"] == []
        assert line["serving"]["others"][0]["dataset"].startswith("CPU-simulated runs (serving / HF generate")
    assert eager["serving"]["others"][0]["dataset"] == "CPU-simulated runs (serving / HF generate / eager)"


def test_the_accuracy_page_shows_the_committed_tables_figures(site: Path) -> None:
    check_page((site / "accuracy" / "index.html").read_text(encoding="utf-8"), _committed())


def test_every_model_page_carries_the_line_and_links_the_page(site: Path) -> None:
    table = _committed()
    model_pages = sorted(site.glob("models/*/*/index.html"))
    assert len(model_pages) == GOLDEN_MODELS == 4
    for page in model_pages:
        html = page.read_text(encoding="utf-8")
        twin = json.loads((page.parent / "index.json").read_text(encoding="utf-8"))
        check_line(html, table, page.parent.relative_to(site / "models").as_posix(),
                   twin["memory"]["train_qlora_bytes_batch1"] is not None)
        assert '<a href="../../../accuracy/index.html">How we measure</a>' in html
        assert html.index('id="accuracy-line"') < html.index('id="memory-chart"')
    for page in site.rglob("*.html"):  # in every page's footer
        text = page.read_text(encoding="utf-8")
        assert 'accuracy/index.html">Accuracy</a>' in text or "https://neurarch-trace.github.io/accuracy/" in text or \
            page.name == "404.html", page
    assert "https://neurarch-trace.github.io/accuracy/" in (site / "sitemap.xml").read_text(encoding="utf-8")
    assert "https://neurarch-trace.github.io/accuracy/" in (site / "llms.txt").read_text(encoding="utf-8")


def _variant() -> dict[str, Any]:
    """The committed table with LoRA never measured, a fitted constant and excluded rows."""
    table = _committed()
    table["errors"] = [dict(e, compared=0, median_abs_pct=None, p90_abs_pct=None, max_abs_pct=None, mean_signed_pct=None)
                       if e["method"] == "lora" else e for e in table["errors"]]
    table["fits"] = [x for x in table["fits"] if x["method"] != "lora"]
    table["setups"] = [x for x in table.get("setups", []) if not x["method"].startswith("LoRA")]
    table["held_out"] = [x for x in table.get("held_out", []) if not x["method"].startswith("LoRA")]
    table["fitted_constants"] = ["allocator_rounding_bytes"]
    table["allocator"] = []  # no replayed steps: no section
    table["excluded"] = [{"dataset": "public", "reason": "multi-GPU run <b>", "rows": 12},
                         {"dataset": "public", "reason": "unit ambiguous", "rows": [{"id": 1}, {"id": 2}]}]
    return table


def test_missing_values_say_no_measured_runs_and_exclusions_are_listed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "accuracy.json"
    path.write_text(json.dumps(_variant()), encoding="utf-8")
    monkeypatch.setattr(accuracy_page, "ACCURACY_JSON", path)
    html = render_accuracy(SETTINGS)
    check_page(html, _variant())
    assert "multi-GPU run &lt;b&gt;" in html and "0.0%" not in _parse(html).sections["errors"].split("LoRA")[1][:40]
    from generator.hub.snapshot import load_record
    from generator.pipeline import report_for_record

    record = load_record(GOLDEN_SNAPSHOT, "openai-community/gpt2")
    assert record is not None
    page = render_model_page(report_for_record(record, SETTINGS), record, SETTINGS, standalone=True)
    check_line(page, _variant(), "openai-community/gpt2")
    assert "LoRA: no measured runs of this setup (LoRA / AMP / fp32 adapters / all-linear);" in page and '<a href="https://neurarch-trace.github.io/accuracy/">' in page


def test_without_a_table_the_pages_say_so_and_show_no_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accuracy_page, "ACCURACY_JSON", tmp_path / "missing.json")
    assert "No accuracy table" in render_accuracy(SETTINGS)
    from generator.hub.snapshot import load_record
    from generator.pipeline import report_for_record

    record = load_record(GOLDEN_SNAPSHOT, "openai-community/gpt2")
    assert record is not None
    page = render_model_page(report_for_record(record, SETTINGS), record, SETTINGS, standalone=False)
    assert 'id="accuracy-line"' not in page and "not yet been checked against measured runs" in page


@pytest.mark.parametrize("broken, key", [("{not json", "(file)"), ('{"rows": []}', "errors"),
                                         (json.dumps({**json.loads(DATA.read_text(encoding="utf-8")),
                                                      "rows": [{"dataset": "x", "rows": -1, "compared": 0}]}),
                                          "rows.rows"),
                                         (json.dumps({**json.loads(DATA.read_text(encoding="utf-8")),
                                                      "allocator": [{**json.loads(DATA.read_text(encoding="utf-8"))[
                                                          "allocator"][0], "reserved_over_max_pct": None}]}),
                                          "allocator.reserved_over_max_pct"),
                                         (json.dumps({**json.loads(DATA.read_text(encoding="utf-8")),
                                                      "allocator": [{**json.loads(DATA.read_text(encoding="utf-8"))[
                                                          "allocator"][0], "headroom_short": -1}]}),
                                          "allocator.headroom_short")])
def test_a_broken_table_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str,
                                           key: str) -> None:
    path = tmp_path / "accuracy.json"
    path.write_text(broken, encoding="utf-8")
    monkeypatch.setattr(accuracy_page, "ACCURACY_JSON", path)
    with pytest.raises(ValueError, match=re.escape(f"{path}: key {key!r}")):
        render_accuracy(SETTINGS)


def test_a_changed_table_rerenders_every_model_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The incremental build keys model pages on the table too: a new accuracy.json is not served stale."""
    path = tmp_path / "accuracy.json"
    shutil.copyfile(DATA, path)
    monkeypatch.setattr(accuracy_page, "ACCURACY_JSON", path)
    out = tmp_path / "public"
    build = dict(snapshot_dir=GOLDEN_SNAPSHOT, out_dir=out, strict=True, settings=SETTINGS, search_index=False, jobs=1)
    assert run_build(console=Console(file=io.StringIO()), **build) == 0
    key = manifest.render_key(SETTINGS)
    buffer = io.StringIO()
    assert run_build(console=Console(file=buffer, width=200), **build) == 0
    assert re.search(r"models rendered\s*│\s*0", buffer.getvalue())  # unchanged: copied
    path.write_text(json.dumps(_variant()), encoding="utf-8")
    assert manifest.render_key(SETTINGS) != key
    buffer = io.StringIO()
    assert run_build(console=Console(file=buffer, width=200), **build) == 0
    assert re.search(rf"models rendered\s*│\s*{GOLDEN_MODELS}", buffer.getvalue())
    check_line((out / "models/openai-community/gpt2/index.html").read_text(encoding="utf-8"), _variant(),
               "openai-community/gpt2")
    check_page((out / "accuracy/index.html").read_text(encoding="utf-8"), _variant())


def test_rendering_the_figures_measures_nothing() -> None:
    """The build reads the table; it never imports the measuring side (torch, the harness)."""
    import subprocess
    import sys

    code = ("import sys; from generator.settings import load_settings; from generator.site.render import "
            "render_accuracy; render_accuracy(load_settings()); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'peft') "
            "or m.startswith('generator.measure')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"


def test_a_page_quotes_its_setup_without_its_own_model() -> None:
    """The line says "on other models (not this model's own)": a model measured in its page's setup reads that setup
    without its runs (accuracy.json held_out). A vision-language page prices one image per sample, so it quotes the
    image setups: of the full fine-tunes with an image, llava-1.5's page quotes the other models' runs (its own step
    held out), while Qwen3.5-35B-A3B's page, never measured so, quotes them all."""
    table = accuracy_page.parse(_committed(), DATA)
    lora = SITE_SETUPS["lora"]
    pooled = next(e for e in table.setups if e.method == lora)
    own = next(e for e in table.held_out if e.method == lora and e.dataset == "Qwen/Qwen3-0.6B")
    assert 0 < own.compared < pooled.compared

    def full(model: str) -> dict[str, Any]:
        line = accuracy_line.model_line(table, None, "sdpa", True, model)
        assert line is not None
        return next(m for m in line["methods"] if m["label"] == "full fine-tuning")

    images = next(e for e in table.setups if e.method == SITE_SETUPS["full"] + ", images")
    assert [r["compared"] for r in full("llava-hf/llava-1.5-7b-hf")["runs"]] == [str(images.compared - 1)]
    assert [r["compared"] for r in full("Qwen/Qwen3.5-35B-A3B")["runs"]] == [str(images.compared)]


def test_one_run_reads_as_its_own_error_and_more_as_their_median_and_p90() -> None:
    """A single run has no median, p90 or average: the line gives its error and which way the estimate misses it."""
    table = accuracy_page.load()
    assert table is not None
    allocated = {e.method: e for e in table.public_metrics if e.dataset == "allocated"}
    one, many = allocated["full"], allocated["lora"]
    assert one.compared == 1 and many.compared > 1  # the committed table: one full fine-tune, ten LoRA runs
    gpu = {m["label"]: m["gpu"] for m in accuracy_line.model_line(table, None)["methods"] if m["gpu"]}
    side = "under" if one.mean_signed_pct < 0 else "over"
    assert gpu["full fine-tuning"]["figures"] == f"the estimate {f.error_pct(abs(one.mean_signed_pct))} {side} it"
    assert gpu["LoRA"]["figures"].startswith(f"median error {f.error_pct(many.median_abs_pct)}, p90 ")
    assert gpu["LoRA"]["figures"].endswith(" the run on average")
    single = dataclasses.replace(many, compared=1)
    assert accuracy_line._line_run(single, "runs")["figures"] == f"error {f.error_pct(many.median_abs_pct)}"
