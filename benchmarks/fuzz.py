"""Fuzz a live thinkgate server from its own ``/openapi.json`` (schemathesis).

``run_fuzz(base_url, cases)`` draws ``cases`` requests from the published schema, half
that fit it and half that do not (schemathesis' positive and negative modes), over every
operation, sends each over real HTTP and counts the answers by status class. Any 5xx is
a bug: the report keeps the first of them with a ``curl`` line to reproduce it.

To reach the engine rather than stop at the first 400, a request body's ``model`` (when
it is a string) is the server's own model, half the strategy names (header or body) are
ones the server serves, and what a request may cost is capped (``max_tokens``, ``n``,
budgets; the testbed's context is small and each drawn sample costs CPU): only values
of the right type are changed, so a case that does not fit the schema still does not.
Batch jobs and batches the fuzz creates are cancelled when it ends. Seeded: one seed, one sequence.

``python -m benchmarks.fuzz --url http://127.0.0.1:8000 --cases 1000`` prints the report
as JSON and exits 1 if any answer was a 5xx. ``thinkgate bench reliability`` calls
``run_fuzz`` for 10,000 cases.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeGuard

import httpx

MAX_TOKENS: Final = 8  # per sample of a request the fuzz sends
MAX_SAMPLES: Final = 4  # n, budget samples/k, X-Budget-Samples/K
MAX_BUDGET_TOKENS: Final = 32  # budget thinking/solution, X-Budget-Thinking/Solution
MAX_BATCH_BUDGET: Final = 8  # total samples of a batch job
EXAMPLES: Final = 10  # 5xx answers kept in the report
JSONL: Final = "application/jsonl"
BATCH_CREATES: Final = ("/v1/pets/batches", "/v1/batches")  # cancelled when the fuzz ends


def run_fuzz(
    base_url: str,
    cases: int,
    *,
    seed: int = 0,
    max_tokens: int = MAX_TOKENS,
    timeout_s: float = 120.0,
    skip_paths: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Send ``cases`` generated requests to the server at ``base_url`` (``skip_paths``: a
    regex of operation paths left out; ``headers``: sent with every request, e.g. a key
    for a server with keys).

    Returns ``{"cases", "seconds", "classes": {"2xx": n, "4xx": n, "5xx": n, "no_answer":
    n}, "statuses": {"400": n, ...}, "server_errors": [{method, path, status, body,
    curl}], "no_answers": [...], "not_sent": n, ...}``: ``no_answer`` counts requests that
    got no HTTP answer (the connection failed or timed out); ``not_sent`` the generated
    cases the client library refused to send (a header it cannot encode).
    """
    import requests
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
    from schemathesis import GenerationMode
    from tqdm import tqdm

    base_url = base_url.rstrip("/")
    headers = dict(headers or {})
    served = httpx.get(f"{base_url}/v1/models", headers=headers, timeout=30).json()["data"][0]
    model, names = str(served["id"]), [str(n) for n in served.get("strategies", [])]
    schemathesis.openapi.media_type(JSONL, _jsonl_bodies(st))
    schema: schemathesis.BaseSchema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    if skip_paths:
        schema = schema.exclude(path_regex=skip_paths)
    strategy = st.one_of(
        schema.as_strategy(GenerationMode.POSITIVE), schema.as_strategy(GenerationMode.NEGATIVE)
    )
    session = requests.Session()
    session.headers.update(headers)  # a case's own header of the same name wins
    statuses: Counter[str] = Counter()
    refusals: Counter[str] = Counter()  # 4xx by route and param: how deep the fuzz got
    answered: Counter[str] = Counter()  # 2xx by route
    known: dict[str, list[str]] = {"file_id": [], "batch_id": []}  # ids the server made
    server_errors: list[dict[str, Any]] = []
    no_answers: list[dict[str, Any]] = []
    batches: list[str] = []
    sent = not_sent = 0

    def send(case: Any, data: Any) -> None:
        nonlocal sent, not_sent
        _tame(case, model, max_tokens)
        if names:
            # Half the strategy names a case carries become real ones: past the 400.
            real = st.sampled_from(names) | st.none()
            _rename(case, "X-Strategy", "strategy", lambda: data.draw(real))
        _reuse(case, known, data, st)
        try:
            response = case.call(base_url=base_url, session=session, timeout=timeout_s)
        except (requests.exceptions.InvalidHeader, requests.exceptions.InvalidURL, ValueError):
            not_sent += 1  # the client library refused to send it: nothing reached the server
            return
        except requests.RequestException as exc:
            sent += 1
            statuses["no_answer"] += 1
            if len(no_answers) < EXAMPLES:
                no_answers.append({**_describe(case), "error": repr(exc)[:300]})
            return
        sent += 1
        statuses[str(response.status_code)] += 1
        if response.status_code < 300:
            answered[f"{case.method.upper()} {case.path}"] += 1
            _remember(case, response.content, known)
        if 400 <= response.status_code < 500:
            refusals[f"{case.method.upper()} {case.path} {_why(response.content)}"] += 1
        if response.status_code >= 500 and len(server_errors) < EXAMPLES:
            body = response.content[:500].decode("utf-8", "replace")
            server_errors.append({**_describe(case), "status": response.status_code, "body": body})
        if case.path in BATCH_CREATES and case.method.upper() == "POST":
            batches.extend(f"{case.path}/{i}" for i in _batch_id(response.content))

    @hypothesis_seed(seed)
    @settings(
        max_examples=cases,
        database=None,
        deadline=None,
        phases=[Phase.generate],  # no shrinking: every case is one request, counted once
        suppress_health_check=list(HealthCheck),
        derandomize=False,
        print_blob=False,
    )
    @given(case=strategy, data=st.data())
    def one(case: Any, data: Any) -> None:
        try:
            send(case, data)
        finally:
            bar.update(1)

    started = time.perf_counter()
    bar = tqdm(total=cases, desc="fuzz", unit="case", file=sys.stderr)
    try:
        one()
    finally:
        bar.close()
        for batch in batches:
            # Fuzzed jobs must not keep the engine busy after the fuzz.
            httpx.post(f"{base_url}{batch}/cancel", headers=headers, timeout=30)
        session.close()
    classes: Counter[str] = Counter()
    for status, count in statuses.items():
        classes[status if status == "no_answer" else f"{status[0]}xx"] += count
    return {
        "cases": sent,
        "not_sent": not_sent,
        "seconds": round(time.perf_counter() - started, 2),
        "classes": dict(sorted(classes.items())),
        "statuses": dict(sorted(statuses.items())),
        "top_refusals": dict(refusals.most_common(15)),
        "answered": dict(sorted(answered.items())),
        "server_errors": server_errors,
        "no_answers": no_answers,
        "batches_cancelled": len(batches),
    }


def _tame(case: Any, model: str, max_tokens: int) -> None:
    """Point bodies at the served model and cap what a request may cost (module doc)."""
    for name in ("Samples", "K", "Thinking", "Solution"):
        cap = MAX_SAMPLES if name in ("Samples", "K") else MAX_BUDGET_TOKENS
        _cap_header(case.headers, f"X-Budget-{name}", cap)
    body = case.body
    if isinstance(body, dict):
        if isinstance(body.get("model"), str):
            body["model"] = model
        names = ("max_tokens", "max_completion_tokens", "max_output_tokens")
        limits = [k for k in names if _is_int(body.get(k))]
        for key in limits:
            body[key] = min(body[key], max_tokens)
        if not limits and all(body.get(k) is None for k in names):
            # /v1/responses calls its limit max_output_tokens.
            body["max_output_tokens" if "input" in body else "max_tokens"] = max_tokens
        thinking = body.get("thinking")  # /v1/messages: Anthropic's thinking budget
        if isinstance(thinking, dict) and _is_int(thinking.get("budget_tokens")):
            thinking["budget_tokens"] = min(thinking["budget_tokens"], MAX_BUDGET_TOKENS)
        if _is_int(body.get("n")):
            body["n"] = min(body["n"], MAX_SAMPLES)
        budget = body.get("budget")
        if isinstance(budget, dict):
            for key in ("samples", "k", "thinking", "solution"):
                cap = MAX_SAMPLES if key in ("samples", "k") else MAX_BUDGET_TOKENS
                if _is_int(budget.get(key)):
                    budget[key] = min(budget[key], cap)
    if isinstance(case.query, dict):
        for key in ("total_budget", "cap"):
            value = case.query.get(key)
            if _is_int(value):
                case.query[key] = min(value, MAX_BATCH_BUDGET)
        if isinstance(case.query.get("average_budget"), (int, float)):
            case.query["average_budget"] = min(case.query["average_budget"], 2)


def _reuse(case: Any, known: dict[str, list[str]], data: Any, st: Any) -> None:
    """Half the ids a case names (a path's ``file_id``/``batch_id``, a body's
    ``input_file_id``) become ones the server made earlier in the run: past the 404."""
    params = case.path_parameters if isinstance(case.path_parameters, dict) else {}
    for name, ids in known.items():
        if ids and isinstance(params.get(name), str) and data.draw(st.booleans()):
            params[name] = data.draw(st.sampled_from(ids))
    body, files = case.body, known["file_id"]
    named = isinstance(body, dict) and isinstance(body.get("input_file_id"), str)
    if named and files and data.draw(st.booleans()):
        body["input_file_id"] = data.draw(st.sampled_from(files))


def _remember(case: Any, content: bytes, known: dict[str, list[str]]) -> None:
    if case.method.upper() != "POST":
        return
    kind = {"/v1/files": "file_id", "/v1/batches": "batch_id"}.get(case.path)
    if kind is not None:
        known[kind].extend(_batch_id(content))


def _cap_header(headers: Any, name: str, cap: int) -> None:
    value = headers.get(name) if headers is not None else None
    if isinstance(value, str) and value.isdigit() and int(value) > cap:
        headers[name] = str(cap)


def _rename(case: Any, header: str, field: str, draw: Callable[[], str | None]) -> None:
    """Replace the strategy a case names (header, body field) by ``draw()`` unless None."""
    if case.headers is not None and isinstance(case.headers.get(header), str):
        name = draw()
        if name is not None:
            case.headers[header] = name
    if isinstance(case.body, dict) and isinstance(case.body.get(field), str):
        name = draw()
        if name is not None:
            case.body[field] = name


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(case: Any) -> dict[str, Any]:
    try:
        curl = case.as_curl_command()
    except Exception:  # a case curl cannot spell; the method and path still help
        curl = None
    return {"method": case.method.upper(), "path": case.formatted_path, "curl": curl}


def _why(content: bytes) -> str:
    """``code/param`` of an error envelope: what refused the request."""
    try:
        error = json.loads(content)["error"]
        return f"{error.get('code')}/{error.get('param')}"
    except (ValueError, KeyError, TypeError):
        return "?"


def _batch_id(content: bytes) -> list[str]:
    try:
        answer = json.loads(content)
    except ValueError:
        return []
    batch_id = answer.get("id") if isinstance(answer, dict) else None
    return [batch_id] if isinstance(batch_id, str) else []


def _jsonl_bodies(st: Any) -> Any:
    """Bytes for a JSONL body: noise, JSON lines of any shape, and near-valid questions
    (``{"custom_id", "body": {"messages"}}`` with fuzzed fields; small ``max_tokens``)."""
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=8,
    )
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "robot"]) | st.integers()},
        optional={"content": st.text(max_size=40) | json_values},
    )
    question = st.fixed_dictionaries(
        {
            "custom_id": st.text(max_size=8) | st.integers(),
            "body": st.fixed_dictionaries(
                {"messages": st.lists(message, max_size=3) | json_values},
                optional={
                    "max_tokens": st.integers(-2, MAX_TOKENS) | json_values,
                    "temperature": st.floats(allow_nan=True) | json_values,
                    "top_p": st.floats() | json_values,
                    "seed": st.integers() | json_values,
                },
            )
            | json_values,
        }
    )
    lines = st.lists(question | json_values, min_size=0, max_size=4)
    return st.binary(max_size=64) | lines.map(
        lambda docs: b"\n".join(json.dumps(d, allow_nan=True).encode() for d in docs)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fuzz", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--url", required=True, help="base URL of a running thinkgate server")
    parser.add_argument("--cases", type=int, default=1000, help="requests to send")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="cap per sample")
    parser.add_argument("--skip-paths", help="regex of operation paths to leave out")
    args = parser.parse_args(argv)
    report = run_fuzz(
        args.url,
        args.cases,
        seed=args.seed,
        max_tokens=args.max_tokens,
        skip_paths=args.skip_paths,
    )
    print(json.dumps(report, indent=2))
    return 1 if report["classes"].get("5xx") else 0


if __name__ == "__main__":
    sys.exit(main())
