"""The scorers' HTTP clients, next to the engines: a reward model behind a vLLM server's
``/classify`` (``RemoteClassify``, what ``strategies.scorers.RewardModelScorer`` calls)
and an external verifier (``VerifierClient``, what ``strategies.scorers.VerifierScorer``
calls). Transport only: texts or token ids in, numbers out; what a sample's texts are
and whether the numbers fit the samples is the scorers' business. Both post through
``engines.http_errors.post_json`` (over ``engines.calls``), the one place an HTTP failure
is mapped onto the error tree (the remote engine maps its transport failures there too).
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from core.errors import BackendError
from engines.calls import Timeouts, Transport, calls_over
from engines.http_errors import post_json


class RemoteClassify:
    """A reward model behind a vLLM server's ``POST /classify`` (raw logits).

    Token ids are sent as they are, so the remote model must share the policy's
    tokenizer (as the testbed family does).
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        timeout_s: float = 30.0,
        client: httpx.AsyncClient | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/classify"
        self.model = model
        self._calls = calls_over(client, Timeouts.of(timeout_s), transport)

    async def score_sequences(self, sequences: Sequence[Sequence[int]]) -> list[float]:
        body: dict[str, object] = {"input": [list(s) for s in sequences], "use_activation": False}
        if self.model is not None:
            body["model"] = self.model
        data = await post_json(self._calls, self.url, body, "reward server")
        try:
            rows = sorted(data["data"], key=lambda r: r["index"])  # type: ignore[index]
            return [float(r["probs"][0]) for r in rows]
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise BackendError("reward server answered in an unexpected shape") from exc

    async def aclose(self) -> None:
        await self._calls.aclose()


class VerifierClient:
    """An external verifier: ``POST {"prompt", "responses", "reasoning"}`` with the
    prompt text, each sample's answer text and its thinking text; it answers
    ``{"scores": [float, ...]}``, one per response."""

    def __init__(
        self, url: str, *, timeout_s: float = 30.0, client: httpx.AsyncClient | None = None
    ) -> None:
        self.url = url
        self._calls = calls_over(client, Timeouts.of(timeout_s))

    async def verify(
        self, prompt: str, responses: Sequence[str], reasoning: Sequence[str]
    ) -> list[float]:
        body = {"prompt": prompt, "responses": list(responses), "reasoning": list(reasoning)}
        data = await post_json(self._calls, self.url, body, "verifier")
        scores = data.get("scores") if isinstance(data, dict) else None
        if not isinstance(scores, list) or not all(
            isinstance(s, int | float) and not isinstance(s, bool) for s in scores
        ):
            raise BackendError("verifier answered without a list of numeric 'scores'")
        return [float(s) for s in scores]

    async def aclose(self) -> None:
        await self._calls.aclose()
