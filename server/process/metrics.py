"""Prometheus metrics of one app (its own registry, so apps in one process never clash).

What is counted: requests by route/strategy/status, latency, tokens by phase
(thinking/answer), samples drawn, budget cut-ins (choices whose ``info`` has a truthy
``budget_cut``, e.g. ``"thinking"``), aborted requests by reason, in-flight requests and
samples, the engine's unfinished requests at scrape time, its deaths and restarts, and
the event loop's lag, and how long streamed frames wait in the gateway.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request

from core.base import Result

log = structlog.get_logger("thinkgate.http")

__all__ = ["CONTENT_TYPE", "Metrics"]


class Metrics:
    """The app's metrics, in its own registry (created in this order, the order
    ``/metrics`` lists them in)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._request_metrics(self.registry)
        self._tenant_metrics(self.registry)
        self._process_metrics(self.registry)

    def _request_metrics(self, r: CollectorRegistry) -> None:
        """Requests, their latency, tokens and samples, budget cut-ins, aborts and
        admission."""
        self.requests = Counter(
            "thinkgate_requests", "Requests answered", ["route", "strategy", "status"], registry=r
        )
        self.latency = Histogram(
            "thinkgate_request_latency_seconds",
            "Time to the full response (streams: to the last byte)",
            ["route", "strategy"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
        self.tokens = Counter(
            "thinkgate_tokens", "Tokens generated, by phase", ["phase"], registry=r
        )
        self.prompt_tokens = Counter("thinkgate_prompt_tokens", "Prompt tokens", registry=r)
        self.samples = Counter("thinkgate_samples", "Trajectories drawn", ["strategy"], registry=r)
        self.budget_cutins = Counter(
            "thinkgate_budget_cutins", "Choices a budget cut", ["strategy", "budget"], registry=r
        )
        self.aborted = Counter(
            "thinkgate_aborted_requests", "Requests aborted before the end", ["reason"], registry=r
        )
        self.inflight_requests = Gauge(
            "thinkgate_inflight_requests", "Requests being served", registry=r
        )
        self.inflight_samples = Gauge(
            "thinkgate_inflight_samples", "Samples admitted and not finished", registry=r
        )
        self.rejected = Counter(
            "thinkgate_rejected_requests", "Requests refused by admission control", registry=r
        )

    def _tenant_metrics(self, r: CollectorRegistry) -> None:
        """The same per tenant (server.tenancy.tenants): the label's values are the keys
        file's tenants, never anything a client chooses."""
        self.tenant_requests = Counter(
            "thinkgate_tenant_requests",
            "Requests answered, by tenant and status",
            ["tenant", "status"],
            registry=r,
        )
        self.tenant_samples = Counter(
            "thinkgate_tenant_samples", "Trajectories drawn, by tenant", ["tenant"], registry=r
        )
        self.tenant_tokens = Counter(
            "thinkgate_tenant_tokens",
            "Tokens billed to the tenant (its responses' usage), by kind",
            ["tenant", "kind"],
            registry=r,
        )
        self.tenant_rejections = Counter(
            "thinkgate_tenant_rejections",
            "Requests refused, by tenant and the limit that refused them",
            ["tenant", "reason"],
            registry=r,
        )
        self.tenant_inflight_samples = Gauge(
            "thinkgate_tenant_inflight_samples",
            "The tenant's samples admitted and not finished",
            ["tenant"],
            registry=r,
        )
        self.tenant_reserved_tokens = Gauge(
            "thinkgate_tenant_reserved_tokens",
            "Completion tokens reserved by the tenant's requests in flight",
            ["tenant"],
            registry=r,
        )

    def _process_metrics(self, r: CollectorRegistry) -> None:
        """The engine's unfinished requests, deaths and restarts, and how long the event
        loop, streamed frames and garbage collections keep the gateway waiting."""
        self.engine_unfinished = Gauge(
            "thinkgate_engine_unfinished_requests",
            "Requests the engine still holds (-1: not known)",
            registry=r,
        )
        self.loop_lag = Histogram(
            "thinkgate_event_loop_lag_seconds",
            "How late the event loop woke a 50 ms sleep (server.process.loop_lag)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.frame_wait = Histogram(
            "thinkgate_stream_frame_wait_seconds",
            "How long each streamed frame waited in the gateway, from the strategy's event "
            "to the socket write (server.pipeline.streaming)",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
            registry=r,
        )
        self.gc_pause = Histogram(
            "thinkgate_gc_pause_seconds",
            "How long each garbage collection held the event loop (server.process.gc_pauses)",
            ["generation"],
            buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
            registry=r,
        )
        self.engine_deaths = Gauge(
            "thinkgate_engine_deaths", "Times the local engine died", registry=r
        )
        self.engine_restarts = Gauge(
            "thinkgate_engine_restarts", "Times a dead local engine was restarted", registry=r
        )

    def watch_engine(self, unfinished: Callable[[], int]) -> None:
        self.engine_unfinished.set_function(lambda: float(unfinished()))

    def watch_supervisor(self, deaths: Callable[[], int], restarts: Callable[[], int]) -> None:
        self.engine_deaths.set_function(lambda: float(deaths()))
        self.engine_restarts.set_function(lambda: float(restarts()))

    def watch_servers(self, servers: Callable[[], Sequence[dict[str, Any]]]) -> None:
        """Per-server gauges of a remote engine (``RemoteEngine.servers``), read at scrape."""
        self.registry.register(_ServerCollector(servers))

    def tenant_rejected(self, tenant: str, reason: str) -> None:
        self.tenant_rejections.labels(tenant, reason).inc()

    def tenant_inflight(self, tenant: str, *, samples: int, reserved: int) -> None:
        self.tenant_inflight_samples.labels(tenant).set(samples)
        self.tenant_reserved_tokens.labels(tenant).set(reserved)

    def tenant_billed(self, tenant: str, *, prompt: int, completion: int) -> None:
        self.tenant_tokens.labels(tenant, "prompt").inc(prompt)
        self.tenant_tokens.labels(tenant, "completion").inc(completion)

    def record_final(self, strategy: str, final: Result) -> None:
        usage = final.usage
        self.tokens.labels("thinking").inc(usage.reasoning_tokens)
        self.tokens.labels("answer").inc(usage.completion_tokens - usage.reasoning_tokens)
        self.prompt_tokens.inc(usage.prompt_tokens)
        self.samples.labels(strategy).inc(final.samples)
        for choice in final.choices:
            if choice.budget_cut:  # "thinking", "solution" or "thinking+solution"
                self.budget_cutins.labels(strategy, "+".join(choice.budget_cut)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


_STATES = ("starting", "up", "down", "mismatch")


class _ServerCollector(Collector):
    """``thinkgate_upstream_*{server=URL}``: state, load and counts of each vLLM server."""

    def __init__(self, servers: Callable[[], Sequence[dict[str, Any]]]) -> None:
        self._servers = servers

    def collect(self) -> Iterator[Any]:
        up = GaugeMetricFamily(
            "thinkgate_upstream_up", "1 while the server is admitted", labels=["server"]
        )
        state = GaugeMetricFamily(
            "thinkgate_upstream_state",
            "1 for the server's current state",
            labels=["server", "state"],
        )
        samples = GaugeMetricFamily(
            "thinkgate_upstream_outstanding_samples",
            "Samples this gateway has running on the server",
            labels=["server"],
        )
        requests = GaugeMetricFamily(
            "thinkgate_upstream_outstanding_requests",
            "Calls this gateway has running on the server",
            labels=["server"],
        )
        calls = CounterMetricFamily(
            "thinkgate_upstream_calls", "Calls sent to the server", labels=["server"]
        )
        failures = CounterMetricFamily(
            "thinkgate_upstream_failures",
            "Calls that failed on the server (placed again: elsewhere, or through the router)",
            labels=["server"],
        )
        ejections = CounterMetricFamily(
            "thinkgate_upstream_ejections", "Times the server was taken out", labels=["server"]
        )
        fleet = GaugeMetricFamily(
            "thinkgate_upstream_fleet_workers",
            "Workers behind a router, as the router reports them (its /readiness)",
            labels=["server", "state"],
        )
        for s in self._servers():
            url = str(s["url"])
            if isinstance(seen := s.get("fleet"), dict):
                fleet.add_metric([url, "healthy"], float(seen["healthy_workers"]))
                fleet.add_metric([url, "total"], float(seen["total_workers"]))
            up.add_metric([url], 1.0 if s["state"] == "up" else 0.0)
            for name in _STATES:
                state.add_metric([url, name], 1.0 if s["state"] == name else 0.0)
            samples.add_metric([url], float(s["outstanding_samples"]))
            requests.add_metric([url], float(s["outstanding_requests"]))
            calls.add_metric([url], float(s["requests"]))
            failures.add_metric([url], float(s["failures"]))
            ejections.add_metric([url], float(s["ejections"]))
        yield from (up, state, samples, requests, calls, failures, ejections, fleet)


def route_label(request: Request) -> str:
    """The ``route`` label of a request: the matched route's template
    (``/v1/pets/batches/{batch_id}``), never the raw path. Clients choose paths, and
    every distinct label value is a time series kept for the life of the process: the
    fuzz's random batch ids and 404 paths grew ``/metrics`` without bound (and put
    bytes in it that scrapers choked on)."""
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


def record_end(
    metrics: Metrics,
    *,
    route: str,
    strategy: str,
    status: str,
    request_id: str,
    started: float | None = None,
    result: Result | None = None,
    error: bool = False,
    detail: Mapping[str, object] | None = None,
    tenant: str | None = None,
) -> None:
    """The one place a finished request is recorded, whatever path it ended on (JSON,
    stream, error envelope, a client gone): its count by status, its latency when its
    start is known, its result's tokens, and one ``request.end`` log line."""
    metrics.requests.labels(route, strategy, status).inc()
    fields: dict[str, object] = {"route": route, "strategy": strategy, "status": status}
    if tenant is not None:  # None: refused before its key was known
        metrics.tenant_requests.labels(tenant, status).inc()
        fields["tenant"] = tenant
    if started is not None:
        seconds = time.perf_counter() - started
        metrics.latency.labels(route, strategy).observe(seconds)
        fields["seconds"] = round(seconds, 4)
    if result is not None:
        metrics.record_final(strategy, result)
        if tenant is not None:
            metrics.tenant_samples.labels(tenant).inc(result.samples)
        fields["samples"] = result.samples
        fields["prompt_tokens"] = result.usage.prompt_tokens
        fields["completion_tokens"] = result.usage.completion_tokens
    (log.error if error else log.info)(
        "request.end", request_id=request_id, **fields, **(detail or {})
    )
