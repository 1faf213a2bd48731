"""thinkgate with the plain OpenAI SDK: budgets, reasoning, usage, streaming.

    python clients/python_example.py [--base-url http://127.0.0.1:8000/v1] [--api-key KEY]

Prints one JSON line per step, so scripts (and tests) can read the output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import openai
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

sys.path.insert(0, str(Path(__file__).resolve().parent))
from thinkgate_client import budget_headers, reasoning_of, thinkgate_info  # noqa: E402

QUESTION = "Compute 3+8-5+7 mod 10."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default="unused")
    args = parser.parse_args(argv)
    client = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0)
    try:
        model = client.models.list().data[0].id
    except (openai.APIConnectionError, openai.InternalServerError) as exc:
        # A first-hour mistake (the server still starting, or not started): one line.
        print(
            f"no thinkgate server ready at {args.base_url} ({type(exc).__name__}): start it "
            "with `bash scripts/serve.sh` and wait for its 'server.ready' log line (about 1.5 min)",
            file=sys.stderr,
        )
        return 2
    client = client.with_options(max_retries=2)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]

    # 1. Plain: the model as it is. Thinking and answer arrive separately.
    reply = client.chat.completions.create(model=model, messages=messages, max_tokens=300)
    choice = reply.choices[0]
    usage = reply.usage
    show(
        "plain",
        reasoning=reasoning_of(choice.message),
        answer=choice.message.content,
        finish_reason=choice.finish_reason,
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
        reasoning_tokens=(
            usage.completion_tokens_details.reasoning_tokens
            if usage and usage.completion_tokens_details
            else None
        ),
        thinkgate=thinkgate_info(reply),
    )

    # 2. Budgets through headers: at most 24 thinking tokens, then at most 12 answer
    #    tokens (the elastic strategy; X-Budget-Applied echoes what was applied).
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=messages,
        extra_headers=budget_headers(thinking=24, solution=12),
    )
    reply = raw.parse()
    show(
        "budgeted",
        applied=raw.headers.get("X-Budget-Applied"),
        request_id=raw.headers.get("X-Request-Id"),
        answer=reply.choices[0].message.content,
        reasoning_tokens=(
            reply.usage.completion_tokens_details.reasoning_tokens
            if reply.usage and reply.usage.completion_tokens_details
            else None
        ),
        thinkgate=thinkgate_info(reply),
    )

    # 3. Streaming: reasoning deltas first, then the answer; `thinkgate` rides on the
    #    last chunk that has a finish_reason, usage on the very last chunk.
    reasoning, answer = "", ""
    info: dict[str, object] = {}
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=300,
        stream=True,
        stream_options={"include_usage": True},
    )
    total = None
    for chunk in stream:
        info = thinkgate_info(chunk) or info
        if chunk.usage is not None:
            total = chunk.usage.total_tokens
        for c in chunk.choices:
            reasoning += reasoning_of(c.delta)
            answer += c.delta.content or ""
    show("streamed", reasoning=reasoning, answer=answer, total_tokens=total, thinkgate=info)
    return 0


def show(step: str, **fields: object) -> None:
    print(json.dumps({"step": step, **fields}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
