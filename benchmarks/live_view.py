"""``thinkgate bench live-view``: the live view (/ui) in a real browser, timed.

    python -m benchmarks.live_view [--server URL] [--runs 10]

Headless Chromium from Debian (``/usr/bin/chromium``; ``apt-get install chromium``),
driven by Playwright (its own browser download cannot work here, so the system browser
is named). Measures the page's first render (navigation start to the form drawn with the
server's strategies and budget fields) and, per progress event, the time from its bytes
reaching the page to the next paint that shows it; self-consistency@8 and beam search@4
runs, alternating. Writes ``benchmarks/results/live_view/live-view.md``. The test
``tests/server/test_ui_live.py`` drives the same page through these helpers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.out_paths import LOGS, results_of

CHROMIUM = Path("/usr/bin/chromium")
RESULTS = results_of("live_view")


class _NoBrowser(RuntimeError):
    """Debian's Chromium or the Playwright package is missing."""


@contextmanager
def browser_page(base_url: str) -> Iterator[Any]:
    """A fresh page of headless Chromium at ``base_url``/ui, drawn."""
    if not CHROMIUM.exists():
        raise _NoBrowser("no /usr/bin/chromium: apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - a dev dependency
        raise _NoBrowser("playwright is a dev dependency: bash scripts/setup.sh") from exc
    with sync_playwright() as pw:
        # --no-sandbox: CI and these machines run as root, where Chromium's sandbox refuses.
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{base_url}/ui")
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            yield page
        finally:
            browser.close()


@dataclass(frozen=True, slots=True)
class _ViewRun:
    seconds: float  # from Run to the stream's end, in the page
    events: int  # progress events the page drew
    event_to_paint_ms: tuple[float, ...]
    error: str | None


def run_in_view(
    page: Any, strategy: str, budget: Mapping[str, int], *, timeout_s: float = 120.0
) -> _ViewRun:
    """Fill the form (``strategy``, the ``budget`` fields, the rest cleared), press Run
    and wait for the stream to end."""
    page.select_option("#strategy", strategy)
    for field in page.eval_on_selector_all("#budget input", "xs => xs.map(x => x.dataset.field)"):
        page.fill(f"#budget-{field}", str(budget.get(field, "")))
    began = time.perf_counter()
    page.click("#run")
    page.wait_for_function("window.thinkgateView.done === true", timeout=timeout_s * 1000)
    view = page.evaluate("window.thinkgateView")
    page.evaluate("window.thinkgateView.done = false")
    return _ViewRun(
        seconds=time.perf_counter() - began,
        events=int(view["events"]),
        event_to_paint_ms=tuple(float(x) for x in view["eventToPaint"]),
        error=view["error"],
    )


def first_render_ms(page: Any) -> float:
    """Navigation start to the form drawn with the server's config (the page's mark)."""
    return float(page.evaluate("window.thinkgateView.firstRender"))


def _measure(base_url: str, runs: int) -> dict[str, Any]:
    renders: list[float] = []
    paints: list[float] = []
    per: dict[str, list[float]] = {"self-consistency": [], "beam-search": []}
    plans = (("self-consistency", {"samples": 8}), ("beam-search", {"samples": 4}))
    for i in range(runs):
        with browser_page(base_url) as page:
            renders.append(first_render_ms(page))
            strategy, budget = plans[i % 2]
            run = run_in_view(page, strategy, budget)
            if run.error is not None:
                raise RuntimeError(f"{strategy}: {run.error}")
            paints += run.event_to_paint_ms
            per[strategy].append(run.seconds)
    return {"renders": renders, "paints": paints, "per": per}


def _render(found: Mapping[str, Any], command: str, machine: str) -> str:
    def q(xs: Sequence[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]

    def row(name: str, xs: Sequence[float], digits: int) -> str:
        cells = (statistics.median(xs), q(xs, 0.9), max(xs))
        return f"| {name} | {len(xs)} | " + " | ".join(f"{v:.{digits}f}" for v in cells) + " |"

    lines = [
        "# The live view in a browser",
        "",
        f"Command: `{command}`",
        f"Machine: {machine}; headless Debian Chromium driven by Playwright, the gateway "
        "on the same machine.",
        "",
        "| measure | runs | median | p90 | max |",
        "|---|---:|---:|---:|---:|",
        row("first render (ms)", found["renders"], 0),
        row("progress event to paint (ms)", found["paints"], 1),
    ]
    for strategy, secs in found["per"].items():
        if secs:
            lines.append(row(f"{strategy} request, Run to end (s)", secs, 2))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.servers import machine, thinkgate
    from testbed import model_path

    p = argparse.ArgumentParser(
        prog="thinkgate bench live-view", description=__doc__.split("\n")[0]
    )
    p.add_argument("--server", default=None, help="URL of a running thinkgate server")
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    command = "python -m benchmarks.live_view " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.server:
        found = _measure(args.server, args.runs)
    else:
        log = LOGS / "live-view-server.log"
        with thinkgate(model_path("base"), log=log) as url:
            found = _measure(url, args.runs)
    text = _render(found, command.strip(), machine())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "live-view.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
