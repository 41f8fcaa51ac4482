"""generator.format: the one place numbers become text; units mean what they say."""

from __future__ import annotations

import pytest

from generator import format as f


@pytest.mark.parametrize("n, text", [
    (0, "0"), (999, "999"), (1000, "1.00K"), (6257, "6.26K"), (418_000, "418K"), (999_999, "1.00M"),
    (2_435_016, "2.44M"), (17_900_000, "17.9M"), (124_439_808, "124M"), (8_030_261_248, "8.03B"),
    (405_853_388_800, "406B"), (None, "\u2014"),
])
def test_short_count(n: int | None, text: str) -> None:
    assert f.short_count(n) == text


@pytest.mark.parametrize("n, text", [
    (4_403_833_728, "4.40 GB"), (4_368_609_168, "4.37 GB"), (19_345_965_056, "19.3 GB"),
    (550_284_111_872, "550 GB"), (8_117_067_776_000, "8,117 GB"), (6_526_864, "6.53 MB"),
    (999_999_999, "1.00 GB"), (512, "512 bytes"),
])
def test_gb_is_decimal(n: int, text: str) -> None:
    assert f.gb(n) == text


def test_gib_is_binary_and_says_so() -> None:
    assert f.gib(1 << 29) == "0.5 GiB"
    assert f.gib(16_106_127_360) == "15 GiB"
    assert f.mib(16_106_127_360) == "15,360 MiB"
    assert f.gb(1 << 30) == "1.07 GB"  # the same bytes in the other unit


@pytest.mark.parametrize("h, text", [(0.001, "<1 min"), (0.63, "38 min"), (9.47, "9.5 h"), (99.96, "100 h"),
                                     (12_345.6, "12,346 h"), (float("inf"), "\u2014")])
def test_hours(h: float, text: str) -> None:
    assert f.hours(h) == text


@pytest.mark.parametrize("x, text", [(4.982761, "$4.98"), (0.004, "<$0.01"), (999.999, "$1,000"),
                                     (12_345.6, "$12,346"), (None, "\u2014")])
def test_usd(x: float | None, text: str) -> None:
    assert f.usd(x) == text


def test_prices_ratios_and_shapes() -> None:
    assert [f.usd_per_hour(x) for x in (0.526, 0.8048, 1.99, 1.9, None)] == [
        "$0.526/h", "$0.8048/h", "$1.99/h", "$1.90/h", "\u2014"]
    assert (f.ratio(1.15), f.ratio(2.0), f.decimal(1.15)) == ("1.15x", "2x", "1.15")
    assert (f.percent(0.4), f.percent(0.125)) == ("40%", "12.5%")
    assert f.tflops(65.0) == "65 TFLOPS"
    assert f.shape((1, 32768, 8)) == "1 \u00d7 32,768 \u00d7 8"
    assert (f.batch(0), f.batch(106_108)) == ("\u2014", "batch 106,108")
    assert (f.byte_count(1), f.byte_count(14)) == ("1 byte", "14 bytes")
    assert (f.count(2_435_016), f.short_sha("607a30d783df"), f.short_sha(None)) == ("2,435,016", "607a30d", "\u2014")


def test_chart_and_feed_text() -> None:
    assert [f.round_count(n) for n in (500, 1_000, 300_000_000, 10**9, 3 * 10**9, 10**12)] == [
        "500", "1K", "300M", "1B", "3B", "1T"]
    assert [f.tokens_short(n) for n in (512, 1024, 1536, 32768, 131072, 1 << 20)] == [
        "512", "1K", "1.5K", "32K", "128K", "1024K"]
    assert [f.gb_tick(x) for x in (1e10, 2e9, 5e8, 2e5)] == ["10 GB", "2 GB", "500 MB", "200 kB"]
    assert (f.tick_count(1), f.tick_count(10_000)) == ("1", "10K")
    assert (f.coord(12.25), f.coord(3.0), f.coord(-0.01), f.points([(1, 2.5), (3, 4)])) == (
        "12.2", "3", "0", "1,2.5 3,4")
    assert f.w3c_datetime("2025-04-28T12:01:02.000Z") == "2025-04-28T12:01:02Z"
    assert f.w3c_datetime("2025-04-28T14:01:02+02:00") == "2025-04-28T12:01:02Z"
    assert (f.w3c_datetime(None), f.w3c_datetime("yesterday")) == (None, None)
    assert (f.day("2025-04-28T12:01:02Z"), f.day(None)) == ("2025-04-28", "\u2014")
    assert f.change("4.40 GB", "4.52 GB") == "4.40 GB \u2192 4.52 GB"


@pytest.mark.parametrize("x, text", [(9.99, "10.0%"), (0.56, "0.6%"), (0.0, "0.0%"), (51.29, "51.3%")])
def test_error_pct_keeps_one_decimal(x: float, text: str) -> None:
    assert f.error_pct(x) == text


@pytest.mark.parametrize("x, text", [(9.12, "+9.1%"), (-4.35, "-4.3%"), (-0.01, "0.0%"), (0.0, "0.0%")])
def test_signed_pct_says_which_way(x: float, text: str) -> None:
    assert f.signed_pct(x) == text


@pytest.mark.parametrize("part, whole, text", [(113, 131, "113 of 131 (86.3%)"), (24, 24, "24 of 24 (100%)"),
                                               (0, 0, "0 of 0"), (1, 3, "1 of 3 (33.3%)")])
def test_share_gives_the_count_and_the_percentage(part: int, whole: int, text: str) -> None:
    assert f.share(part, whole) == text


def test_serve_weights_names_the_checkpoint_storage() -> None:
    # What the serving column and the terminal say: bf16 unless the checkpoint is quantised (quant.read_quant).
    assert f.serve_weights(None) == "bf16"
    assert f.serve_weights((("method", "fp8"), ("bits", 8), ("group_size", 16384), ("describes", "FP8"))) == "fp8"
    assert f.serve_weights((("method", "mxfp4"), ("bits", 4.25), ("group_size", 32), ("describes", "x"))) == "mxfp4"
    assert f.serve_weights((("method", "gptq"), ("bits", 4), ("group_size", 128), ("describes", "x"))) == "gptq 4-bit"
    assert f.serve_weights((("method", "awq"), ("bits", 4), ("group_size", 128), ("describes", "x"))) == "awq 4-bit"
    # a method not modelled is read as bf16, and said so
    assert f.serve_weights((("method", "hqq"), ("bits", 16), ("group_size", 0), ("describes", "x"))) == "bf16"
