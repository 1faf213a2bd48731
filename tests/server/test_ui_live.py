"""The live view in a real browser: headless Debian Chromium driven by Playwright against
the live server. The page loads with the server's strategies and budget fields; a
self-consistency run draws its samples and votes, a beam search its steps with the PRM's
rewards; a bad budget shows the server's own message."""

from __future__ import annotations

import os

import httpx
import pytest

from benchmarks.live_view import CHROMIUM, browser_page, first_render_ms, run_in_view
from server.pipeline.budgets import HEADERS

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

if not CHROMIUM.exists():
    if os.environ.get("CI"):
        pytest.fail("CI runs the browser tests: scripts/test.sh installs Debian's chromium")
    pytest.skip("no /usr/bin/chromium (apt-get install chromium)", allow_module_level=True)


def test_the_view_draws_samples_votes_search_steps_and_errors(base_url: str) -> None:
    with browser_page(base_url) as page:
        assert 0 < first_render_ms(page) < 15_000
        fields = page.eval_on_selector_all("#budget input", "xs => xs.map(x => x.dataset.field)")
        assert fields == list(HEADERS)
        strategies = page.eval_on_selector_all("#strategy option", "xs => xs.map(x => x.value)")
        assert {"self-consistency", "beam-search", "auto", "plain"} <= set(strategies)

        # Self-consistency@6: six samples drawn, finished, voted; the chosen answer, usage.
        run = run_in_view(page, "self-consistency", {"samples": 6})
        assert run.error is None
        assert page.locator("#bars .bar").count() == 6
        assert page.locator("#bars .bar.done").count() == 6
        assert run.events >= 6 and len(run.event_to_paint_ms) >= 6
        assert max(run.event_to_paint_ms) < 2_000
        assert page.locator("#classes tr.selected").count() == 1
        assert page.locator("#content").inner_text().strip() != ""
        assert "completion" in page.locator("#usage").inner_text()

        # Beam search@2: every step drawn, each candidate with the PRM's reward.
        run = run_in_view(page, "beam-search", {"samples": 2})
        assert run.error is None
        steps = page.locator("#steps .step").count()
        assert steps >= 1
        rewards = page.eval_on_selector_all("#steps .cand .r", "xs => xs.map(x => x.textContent)")
        assert len(rewards) >= 2 * steps
        assert all(0.0 <= float(r) <= 1.0 for r in rewards), rewards
        assert page.locator("#steps .cand.pruned").count() >= 1  # width 2 keeps 2 of 4+
        assert page.locator("#content").inner_text().strip() != ""
        assert not page.locator("#samples").is_visible()  # the last run's bars are cleared

        # A bad budget: the page shows the server's message, word for word.
        model = httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]
        refused = httpx.post(
            f"{base_url}/v1/chat/completions",
            json={
                "model": model,
                "messages": [{"role": "user", "content": "Compute 3+8-5+7 mod 10."}],
                "stream": True,
                "stream_options": {"include_usage": True},
                "strategy": "elastic",
                "budget": {"thinking": -5},
                "temperature": 1,
            },
        )
        assert refused.status_code == 400
        run = run_in_view(page, "elastic", {"thinking": -5})
        assert run.error == refused.json()["error"]["message"]
        assert page.locator("#error").is_visible()
        assert refused.json()["error"]["message"] in page.locator("#error").inner_text()
