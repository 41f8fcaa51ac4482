"""The one module that turns numbers into text: bytes, counts, hours, dollars, shapes, ratios.

Units mean what they say: GB and MB are powers of ten (10^9, 10^6 bytes), as card makers and the
card names in site_config.yaml use them; GiB and MiB are powers of two (2^30, 2^20). Pages give every
figure in GB, and GiB only once, where they say what the driver of a card reports in both units, so
that no line mixes the two. Parameter and download counts are decimal
("2.44M", "8.03B"). Every function is pure and locale-independent, so pages are byte-identical on
any machine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import date, datetime, timezone

from .estimator.memory.target_names import PEFT_DEFAULT

GB = 10**9
MB = 10**6
GIB = 1 << 30
MIB = 1 << 20

DASH = "\u2014"  # an em dash: "no value", never "zero"
UNKNOWN = "not known"  # a value the data does not give (a count nobody published), said in words
TIMES = "\u00d7"
_DAY_RE = re.compile(r"(?<![0-9])(\d{4}-\d{2}-\d{2})(?![0-9])")


def count(n: int) -> str:
    """An exact integer with thousands separators: 2435016 -> "2,435,016"."""
    return f"{int(n):,}"


def _three_significant(x: float) -> str:
    """3 significant digits without an exponent: 4.403 -> "4.40", 19.34 -> "19.3", 550.2 -> "550"."""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _smallest_unit(n: float, units: Sequence[tuple[float, str]], sep: str) -> str:
    """n in the smallest unit (ascending list) that shows it below 1000 after rounding, so that
    999,999 reads "1.00M" rather than "1000K"; the last unit takes whatever is left."""
    for size, suffix in units:
        text = _three_significant(n / size)
        if "," not in text and float(text) < 1000 or suffix == units[-1][1]:
            return f"{text}{sep}{suffix}"
    raise AssertionError("unreachable: the last unit always returns")


def short_count(n: int | None) -> str:
    """Parameters or downloads at 3 significant digits: 2435016 -> "2.44M", 8030261248 -> "8.03B"."""
    if n is None:
        return DASH
    if n < 1000:
        return count(n)
    return _smallest_unit(n, ((1e3, "K"), (1e6, "M"), (1e9, "B"), (1e12, "T")), "")


def gb(n_bytes: int | float) -> str:
    """Decimal bytes: 4403833728 -> "4.40 GB"; below 1 GB in MB, so that small models stay readable.
    Large figures stay in GB (with separators) to compare at a glance with the cards' GB."""
    if n_bytes < MB:
        return byte_count(round(n_bytes))
    return _smallest_unit(n_bytes, ((MB, "MB"), (GB, "GB")), " ")


def gib(n_bytes: int | float) -> str:
    """Binary bytes, trailing zeros dropped: 536870912 -> "0.5 GiB", 16106127360 -> "15 GiB"."""
    value = n_bytes / GIB
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{text} GiB"


def mib(n_bytes: int) -> str:
    """Binary megabytes as the driver prints them: 16106127360 -> "15,360 MiB"."""
    return f"{n_bytes / MIB:,.0f} MiB"


def byte_count(n: int) -> str:
    """A small byte count, singular where it is one: 4 -> "4 bytes", 1 -> "1 byte"."""
    return "1 byte" if n == 1 else f"{count(n)} bytes"


def ratio(x: float) -> str:
    """A multiplier: 1.15 -> "1.15x", 2.0 -> "2x"."""
    return decimal(round(x, 2)) + "x"


def decimal(x: float) -> str:
    """A plain decimal, trailing zeros dropped: 1.15 -> "1.15", 2.0 -> "2"."""
    return f"{x:.4f}".rstrip("0").rstrip(".")


def percent(x: float) -> str:
    """A fraction as a percentage: 0.4 -> "40%", 0.125 -> "12.5%"."""
    return f"{x * 100:.1f}".rstrip("0").rstrip(".") + "%"


def hours(h: float) -> str:
    """Wall-clock hours: 0.63 -> "38 min", 9.47 -> "9.5 h", 1234.5 -> "1,235 h"."""
    if not math.isfinite(h):
        return DASH
    minutes = h * 60
    if minutes < 1:
        return "<1 min"
    if h < 1:
        return f"{minutes:.0f} min"
    if round(h, 1) < 100:
        return f"{h:.1f} h"
    return f"{h:,.0f} h"


def usd(x: float | None) -> str:
    """Dollars: 4.98276 -> "$4.98", 12345.6 -> "$12,346", None -> "—" (no price listed)."""
    if x is None or not math.isfinite(x):
        return DASH
    if x < 0.01:
        return "<$0.01"
    if round(x, 2) < 1000:
        return f"${x:,.2f}"
    return f"${x:,.0f}"


def usd_per_hour(x: float | None) -> str:
    """A list price as written, at least cents: 0.526 -> "$0.526/h", 1.9 -> "$1.90/h"."""
    if x is None:
        return DASH
    text = f"{x:.4f}".rstrip("0")
    if len(text.split(".")[1]) < 2:
        text = f"{x:.2f}"
    return f"${text}/h"


def tflops(x: float) -> str:
    """Peak throughput: 65.0 -> "65 TFLOPS", 989.5 -> "989.5 TFLOPS"."""
    return f"{x:.1f}".rstrip("0").rstrip(".") + " TFLOPS"


def shape(dims: Sequence[int]) -> str:
    """A tensor shape: (1, 32768, 8) -> "1 × 32,768 × 8"."""
    return f" {TIMES} ".join(count(d) for d in dims)


def batch(n: int) -> str:
    """A largest batch: 7 -> "batch 7"; 0 (does not fit) -> "—"."""
    return f"batch {count(n)}" if n > 0 else DASH


def gpu_count(n: int) -> str:
    """A number of GPUs: "1 GPU", "16 GPUs"."""
    return f"{count(n)} GPU" + ("" if n == 1 else "s")


def short_sha(sha: str | None) -> str:
    """The first 7 hex digits of a commit id, as git shows it."""
    return sha[:7] if sha else DASH


def round_count(n: int) -> str:
    """A round size-band boundary: 1_000_000_000 -> "1B", 300_000_000 -> "300M", 500 -> "500"."""
    for size, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= size:
            return decimal(n / size) + suffix
    return count(n)


def tokens_short(n: int) -> str:
    """A context length as LLM people write it, K = 1,024: 512 -> "512", 32768 -> "32K", 1536 -> "1.5K"."""
    if n < 1024:
        return count(n)
    return decimal(round(n / 1024, 1)) + "K"


def gb_tick(n_bytes: float) -> str:
    """An axis tick in decimal bytes, trailing zeros dropped: 1e10 -> "10 GB", 5e8 -> "500 MB"."""
    if n_bytes >= GB:
        return decimal(round(n_bytes / GB, 2)) + " GB"
    if n_bytes >= MB:
        return decimal(round(n_bytes / MB, 2)) + " MB"
    return decimal(round(n_bytes / 1000, 2)) + " kB"


def tick_count(n: int) -> str:
    """An axis tick for counts (batches): 1 -> "1", 1000 -> "1K", 20000 -> "20K"."""
    return round_count(int(n))


def coord(x: float) -> str:
    """An SVG coordinate: one decimal, trailing zeros dropped, never "-0": 12.25 -> "12.2", 3.0 -> "3"."""
    text = f"{x:.1f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def points(xy: Sequence[tuple[float, float]]) -> str:
    """An SVG polyline's points attribute: [(1, 2.5), (3, 4)] -> "1,2.5 3,4"."""
    return " ".join(f"{coord(x)},{coord(y)}" for x, y in xy)


def w3c_datetime(iso: str | None) -> str | None:
    """An ISO 8601 time from the Hub as a W3C/RFC 3339 UTC datetime, or None when absent or unreadable:
    "2025-04-28T12:01:02.000Z" -> "2025-04-28T12:01:02Z"; "2025-04-28T14:01:02+02:00" -> "2025-04-28T12:01:02Z"."""
    if not iso:
        return None
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def latest_day(text: str | None) -> str | None:
    """The latest YYYY-MM-DD date written in a source note, as an RFC 3339 UTC midnight, or None:
    "... scraped around 2026-05-17" -> "2026-05-17T00:00:00Z" (the day a record's Hub data was read)."""
    days = [d for d in _DAY_RE.findall(text or "") if _valid_day(d)]
    return f"{max(days)}T00:00:00Z" if days else None


def _valid_day(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def day(iso: str | None) -> str:
    """The day of an RFC 3339 datetime as written in pages: "2025-04-28T12:01:02Z" -> "2025-04-28"."""
    return iso[:10] if iso else DASH


def change(old: str, new: str) -> str:
    """A before/after pair: ("4.40 GB", "4.52 GB") -> "4.40 GB → 4.52 GB"."""
    return f"{old} \u2192 {new}"


def error_pct(x: float) -> str:
    """An error already in percent, one decimal: 9.99 -> "10.0%", 0.56 -> "0.6%" (the accuracy table's figures)."""
    return f"{x:.1f}%"


def signed_pct(x: float) -> str:
    """A signed error in percent: 9.12 -> "+9.1%" (over-estimates), -4.35 -> "-4.3%", 0 -> "0.0%"."""
    text = f"{x:+.1f}%"
    return "0.0%" if text in ("+0.0%", "-0.0%") else text


def share(part: int, whole: int) -> str:
    """k of n with its percentage: (113, 131) -> "113 of 131 (86.3%)"; (0, 0) -> "0 of 0" (no share to give)."""
    if whole <= 0:
        return f"{count(part)} of {count(whole)}"
    return f"{count(part)} of {count(whole)} ({percent(part / whole)})"


def serve_weights(quantization: Sequence[tuple[str, object]] | None) -> str:
    """How the served weights are stored, as a column head says it: "bf16", or the checkpoint's own format
    (Report.params.quantization: method and bits), e.g. "fp8", "mxfp4", "gptq 4-bit"."""
    if not quantization:
        return "bf16"
    q = dict(quantization)
    method, bits = str(q.get("method", "")), q.get("bits")
    if not isinstance(bits, (int, float)) or bits >= 16:  # a method the estimator reads as bf16 (quant.read_quant)
        return "bf16"
    if method in ("fp8", "mxfp4"):
        return method
    return MODELOPT_WORDS.get(method) or f"{method} {bits:g}-bit"


# ModelOpt's stored formats (estimator/config/modelopt.py MODELOPT) as NVIDIA names them
MODELOPT_WORDS = {"modelopt_fp8": "ModelOpt FP8", "modelopt_fp8_channel": "ModelOpt FP8",
                  "modelopt_fp8_block": "ModelOpt FP8", "modelopt_fp4": "ModelOpt NVFP4",
                  "modelopt_mxfp8": "ModelOpt MXFP8"}


STRATEGY_WORDS = {"single": "", "ddp": "data parallel (DDP)", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "fsdp": "FSDP",
                  "fsdp+ep": "FSDP + expert parallel", "tp": "tensor parallel",
                  "pp": "pipeline parallel", "tp+pp": "tensor and pipeline parallel"}
OFFLOAD_WORDS = {"none": "", "optimizer": "CPU optimizer offload", "params": "CPU param offload"}


def setup(gpus: int, gpu: str, strategy: str, grad_ckpt: bool = False, offload: str = "none") -> str:
    """A parallel setup in words: (8, "H100 SXM", "zero3", True) -> "8× H100 SXM with ZeRO-3 and gradient
    checkpointing"; one GPU alone names no strategy."""
    head = f"{gpus:,}{TIMES} {gpu}"
    how = strategy_words(strategy, grad_ckpt, offload)
    return f"{head} with {how}" if how else head


def strategy_words(strategy: str, grad_ckpt: bool = False, offload: str = "none") -> str:
    """A setup's strategy, checkpointing and offload, without its GPUs: "ZeRO-3 and gradient checkpointing"."""
    return words_list([w for w in (STRATEGY_WORDS.get(strategy, strategy), "gradient checkpointing" if grad_ckpt
                                   else "", OFFLOAD_WORDS.get(offload, offload)) if w])


def words_list(items: Sequence[str]) -> str:
    """Items in a sentence: "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def tokens_per_s(x: float) -> str:
    """A speed in tokens per second: 1572.3 -> "1,572 tokens/s", 14.23 -> "14.2 tokens/s"."""
    if not math.isfinite(x):
        return DASH
    return f"{_three_significant(x)} tokens/s"


def usd_per_million(x: float | None) -> str:
    """A price per million tokens: 0.1365 -> "$0.14 per M tokens"."""
    return DASH if x is None else f"{usd(x)} per M tokens"


def lora_targets(targets: str) -> str:
    """A job's LoRA targets in words: the names as given, all-linear, or peft's own for the model type."""
    return "peft's default targets" if targets == PEFT_DEFAULT else targets


def held_words(context_bytes: int, nccl_bytes: int) -> str:
    """How a card holds the exact job's peak (Memory.held_peak_bytes) where not as the peak reads: less the CUDA
    context an nvidia-smi peak counts (Memory.held_context_bytes), with the NCCL buffers a peak torch counts leaves
    out on several GPUs (Memory.held_nccl_bytes); "" where the card holds the peak as it reads."""
    held = [f"less its {gb(context_bytes)} of CUDA context, which each budget leaves out already"] \
        if context_bytes else []
    if nccl_bytes:
        held.append(f"with {gb(nccl_bytes)} of NCCL buffers beside it on each GPU")
    return f"the peak {' and '.join(held)}" if held else ""
