"""The FastAPI app factory: ``create_app(settings, *, engine=None)``.

The lifespan starts the engine that settings pick (``engines.factory``; unless
one is passed in, then the caller owns it),
loads and validates the strategies, attaches the resources, and tears all of it down
in reverse order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path

import structlog
from fastapi import FastAPI

from core.allowance import DecodeSpeed
from core.base import Resources
from core.engine import Engine
from core.registry import REGISTRY_KEY, Registry
from core.sql import is_postgres
from engines.local import stopping
from server import errors, presets
from server.apis.reasoning_seal import Seal
from server.apis.responses import store as response_store
from server.apis.responses.store import ResponseStore
from server.batches.allocation import PetsAllocations
from server.batches.calls import in_process
from server.batches.pets.admitted import TenantGate
from server.batches.pets.service import RESOURCE_KEY as PETS_JOBS
from server.batches.pets.service import BatchJobs
from server.batches.runner import BatchRunner
from server.batches.service import Batches
from server.batches.store import SQLITE_FILE, BatchStore
from server.gateway import Gateway
from server.pipeline import effort, output_limit
from server.process.gc_pauses import GcPauses, freeze_heap
from server.process.lifecycle import Lifecycle
from server.process.loop_lag import LoopProbe
from server.process.metrics import Metrics
from server.resources.prm import preflight as prm_preflight
from server.resources.scoring import preflight
from server.resources.start_up import start_engine_and_resources
from server.routes import ROUTERS
from server.routes.guard import ExposureGuard
from server.settings import Settings
from server.tenancy.admission import Admission
from server.tenancy.tenants import Keyring
from strategies.auto import CROWD_KEY, Crowd
from strategies.profile import PROFILE_KEY, Profile

log = structlog.get_logger("thinkgate.app")


def load_registry(settings: Settings) -> Registry:
    """Installed strategies (``thinkgate.strategies`` entry points), instantiated.

    The default strategy must be installed; the strategies that budgets and samples
    default to only warn when missing (such requests then get a 400 naming them).
    """
    registry = Registry()
    registry.load_entry_points(settings.strategies)
    registry.instantiate()
    names = registry.names()
    if settings.default_strategy not in names:
        raise RuntimeError(
            f"default strategy {settings.default_strategy!r} is not installed; have {names}"
        )
    for role in ("budget_strategy", "samples_strategy"):
        wanted = getattr(settings, role)
        if wanted not in names:
            log.warning("strategy.missing", setting=role, strategy=wanted, installed=names)
    return registry


def create_app(settings: Settings, *, engine: Engine | None = None) -> FastAPI:
    """The app; ``app.state.lifecycle`` is how a server stops it (``server.cli``)."""
    lifecycle = Lifecycle(
        drain_timeout_s=settings.drain_timeout_s, retry_after_s=settings.retry_after_s
    )
    lifespan = _lifespan(settings, engine, lifecycle)
    app = FastAPI(title="thinkgate", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = None
    app.state.lifecycle = lifecycle
    errors.install(app)
    app.add_middleware(ExposureGuard, settings=settings)
    for router in ROUTERS:
        app.include_router(router)
    return app


def _lifespan(
    settings: Settings, engine: Engine | None, lifecycle: Lifecycle
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the gateway up (``app.state.gateway``), then the batch
    runner; at the end all of it down in reverse order."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registry = load_registry(settings)
        keys = Keyring(  # a keys file that does not parse stops the start, named
            plain=settings.api_keys,
            path=Path(settings.keys_file) if settings.keys_file else None,
        )
        if engine is None:
            preflight(settings)  # refusals that need no engine come before its long start
            prm_preflight(settings)
        async with AsyncExitStack() as stack:
            gw = await _gateway(settings, engine, lifecycle, registry, keys, stack)
            # Set before the batch runner starts: its lines are requests to this app.
            app.state.gateway = gw
            batches = await _batches(settings, app, stack, gw.resources.get(PETS_JOBS), keys)
            app.state.gateway = replace(gw, batches=batches)
            freeze_heap()  # the start-up heap is never scanned again (gc_pauses)
            log.info(
                "server.ready",
                model=gw.engine.model_name,
                strategies=registry.names(),
                processors=sorted(gw.engine.processors),
            )
            try:
                yield
            finally:
                # The batch lines stop first, before anything they use goes away.
                await batches.runner.aclose()
                app.state.gateway = None
        # The engines' stops, begun side by side as the stack closed them.
        await stopping.wait_stopped()

    return lifespan


async def _gateway(
    settings: Settings,
    engine: Engine | None,
    lifecycle: Lifecycle,
    registry: Registry,
    keys: Keyring,
    stack: AsyncExitStack,
) -> Gateway:
    """The engine and resources started (their stops on ``stack``), the metrics, the
    admission and the probes, held together as the running app's ``Gateway``."""
    metrics = Metrics()
    # An engine passed in belongs to the caller; otherwise settings pick one.
    active, built = await start_engine_and_resources(
        settings, engine, stack, on_exit=lifecycle.fail
    )
    _watch_engine(metrics, active)
    admission = Admission(
        max_requests=settings.max_inflight_requests,
        max_samples=settings.max_inflight_samples,
        share_samples=share_cap(settings, active),
        retry_after_s=settings.retry_after_s,
        metrics=metrics,
        wait_s=settings.admission_wait_s,
        idle_s=settings.fair_idle_s,
    )
    jobs = built.items.get(PETS_JOBS.name)
    if isinstance(jobs, BatchJobs):  # every job's draws are its tenant's, admitted as such
        jobs.gate = TenantGate(admission, keys)
    lifecycle.bind_loop(asyncio.get_running_loop(), lambda: admission.requests)
    _watch_process(settings, metrics, stack)
    crowd = Crowd(admission.in_flight)  # auto plans for the requests in flight
    items = {**built.items, REGISTRY_KEY.name: registry, CROWD_KEY.name: crowd}
    profile = items.get(PROFILE_KEY.name)
    speed = DecodeSpeed()
    if isinstance(profile, Profile):  # its measured constants, where the operator set none
        speed = DecodeSpeed(seconds_per_token=profile.seconds_per_token)
        if "answer_reserve" not in settings.model_fields_set:
            settings = settings.model_copy(update={"answer_reserve": profile.answer_reserve})
    return Gateway(
        settings=settings,
        speed=speed,
        engine=active,
        registry=registry,
        resources=Resources(items=items),
        metrics=metrics,
        admission=admission,
        lifecycle=lifecycle,
        started_at=int(time.time()),
        keys=keys,
        seal=_seal(settings),
        presets=presets.load(settings.presets),
        responses=_responses(settings, stack),
        effort_context=effort.effort_context(settings, active.max_model_len),
        default_max_tokens=output_limit.default_max_tokens(settings),
    )


def share_cap(settings: Settings, engine: Engine) -> int:
    """``fair_share_samples``, or the rows the engine batches at once (at least one
    request's largest sample budget, so every admissible request can run), never above
    ``max_inflight_samples``."""
    if settings.fair_share_samples is not None:
        return min(settings.fair_share_samples, settings.max_inflight_samples)
    load = engine.load()
    if load is not None and load.rows > 0:
        rows = load.rows
    elif settings.engine == "remote":  # no server up yet: what each is said to run
        rows = settings.remote_server_rows * max(1, len(settings.vllm_urls))
    else:
        rows = settings.max_num_seqs
    return min(max(rows, settings.max_samples), settings.max_inflight_samples)


def _watch_engine(metrics: Metrics, active: Engine) -> None:
    """The engine's gauges, where it has them: requests unfinished, its servers (remote),
    its deaths and restarts (supervised)."""
    unfinished = getattr(active, "num_unfinished", None)
    if callable(unfinished):
        metrics.watch_engine(unfinished)
    servers = getattr(active, "servers", None)
    if callable(servers):
        metrics.watch_servers(servers)
    if hasattr(active, "restarts"):
        metrics.watch_supervisor(
            lambda: int(getattr(active, "deaths", 0)),
            lambda: int(getattr(active, "restarts", 0)),
        )


def _watch_process(settings: Settings, metrics: Metrics, stack: AsyncExitStack) -> None:
    """The event loop's lag and the GC's pauses, timed into ``metrics`` until ``stack``
    closes. Started after the engine (the loop's lag while engines load is not the
    server's)."""
    probe = LoopProbe(metrics.loop_lag, stall_ms=settings.loop_stall_ms)
    probe.start()
    stack.push_async_callback(probe.aclose)
    pauses = GcPauses(metrics.gc_pause)
    pauses.attach()
    stack.callback(pauses.detach)


async def _batches(
    settings: Settings,
    app: FastAPI,
    stack: AsyncExitStack,
    pets_jobs: BatchJobs | None,
    keys: Keyring,
) -> Batches:
    """The Batch API's store and runner; the runner's lines are requests to ``app``, an
    allocation batch's a PETS job on ``pets_jobs`` (None: such a batch is refused)."""
    target = settings.batch_store or str(settings.state_path / SQLITE_FILE)
    store = BatchStore(target)
    stack.push_async_callback(store.aclose)
    call, client = in_process(app)
    stack.push_async_callback(client.aclose)
    allocations = (
        None
        if pets_jobs is None
        else PetsAllocations(pets_jobs, max_cap=settings.max_samples, keys=keys)
    )
    runner = BatchRunner(
        store,
        call,
        lease_s=settings.batch_lease_s,
        concurrency=settings.batch_concurrency,
        allocations=allocations,
    )
    await runner.start()  # stopped by the lifespan, before the resources go
    log.info("batches.store", target=store.target, owner=runner.owner)
    return Batches(
        store=store,
        runner=runner,
        max_file_bytes=settings.batch_max_file_bytes,
        allocations=allocations,
    )


def _seal(settings: Settings) -> Seal:
    if settings.reasoning_key:
        return Seal.from_secret(settings.reasoning_key)
    return Seal.from_state_dir(settings.state_path)


def _responses(settings: Settings, stack: AsyncExitStack) -> ResponseStore | None:
    if settings.response_retention_s <= 0:
        return None
    # A fleet's PostgreSQL (``--batch-store``) holds them too: any replica continues any.
    shared = settings.batch_store
    target = (
        shared if shared and is_postgres(shared) else str(settings.state_path / response_store.FILE)
    )
    store = ResponseStore(target, retention_s=settings.response_retention_s)
    stack.callback(store.close)
    return store
