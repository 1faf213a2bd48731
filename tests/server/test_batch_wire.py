"""server/batches/pets_wire.py renders a PETS job as OpenAI's batch object and list (no engine)."""

from __future__ import annotations

from dataclasses import replace

from core.base import JSON
from server.batches.pets.input import BatchOptions
from server.batches.pets.job import BatchView
from server.batches.pets.result import AnswerVotes, QuestionOutcome
from server.batches.pets.store import JobRecord
from server.batches.pets_wire import batch_list, batch_object, output_lines

RECORD = JobRecord(
    id="batch_1",
    model="testbed-base",
    status="in_progress",
    options=BatchOptions(total_budget=64, cap=8),
    n_questions=4,
    created_at=100,
    owner="gateway-a",
    lease_until=123.0,
    samples_drawn=20,
    questions_sampled=4,
    rounds=2,
)


def test_batch_object_fields() -> None:
    body = batch_object(BatchView.of(RECORD, in_flight=3))
    assert body["id"] == "batch_1" and body["object"] == "batch"
    assert body["status"] == "in_progress" and body["errors"] is None
    assert body["request_counts"] == {"total": 4, "completed": 0, "failed": 0}
    pets = body["pets"]
    assert isinstance(pets, dict)
    assert (pets["samples_drawn"], pets["samples_in_flight"], pets["cap"]) == (20, 3, 8)
    failed = batch_object(BatchView.of(replace(RECORD, status="failed", error="engine died")))
    assert failed["errors"] == {"data": [{"message": "engine died"}]}
    assert failed["request_counts"] == {"total": 4, "completed": 0, "failed": 4}


def test_a_lease_renewal_is_not_a_change_a_client_sees() -> None:
    renewed = replace(RECORD, owner="gateway-b", lease_until=999.0)
    assert BatchView.of(RECORD) == BatchView.of(renewed)
    assert BatchView.of(RECORD) != BatchView.of(replace(RECORD, samples_drawn=21))


def test_list_object() -> None:
    views = [BatchView.of(replace(RECORD, id=f"batch_{i}")) for i in (3, 2)]
    page = batch_list(views, has_more=True)
    assert (page["object"], page["first_id"], page["last_id"], page["has_more"]) == (
        "list",
        "batch_3",
        "batch_2",
        True,
    )
    assert batch_list([], has_more=False)["first_id"] is None


OUTCOME = QuestionOutcome(
    custom_id="q-7",
    content="The answer is 42.",
    reasoning="six times seven",
    finish_reason="stop",
    answer="42",
    votes=(AnswerVotes(answer="42", count=5), AnswerVotes(answer="41", count=2)),
    samples=8,
    discarded=1,
    prompt_tokens=30,
    completion_tokens=400,
    reasoning_tokens=320,
)


def test_an_outcome_survives_the_store_and_renders_as_a_batch_output_line() -> None:
    stored = OUTCOME.to_json()
    assert QuestionOutcome.from_json(stored) == OUTCOME
    done = BatchView.of(replace(RECORD, status="completed", completed_at=200))
    [line] = output_lines(done, [stored])
    assert (line["id"], line["custom_id"], line["error"]) == ("batch_1-0", "q-7", None)
    response = line["response"]
    assert isinstance(response, dict) and response["status_code"] == 200
    body = response["body"]
    assert isinstance(body, dict)
    assert (body["object"], body["created"], body["model"]) == (
        "chat.completion",
        200,
        "testbed-base",
    )
    assert body["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "The answer is 42.",
                "reasoning_content": "six times seven",
                "reasoning": "six times seven",
            },
            "finish_reason": "stop",
        }
    ]
    assert body["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 400,
        "total_tokens": 430,
        "completion_tokens_details": {"reasoning_tokens": 320},
    }
    assert body["thinkgate"] == {
        "strategy": "pets-offline",
        "samples": 8,
        "votes": [{"answer": "42", "count": 5}, {"answer": "41", "count": 2}],
        "answer": "42",
        "discarded": 1,
    }


def test_lines_stored_by_earlier_versions_pass_through() -> None:
    done = BatchView.of(replace(RECORD, status="completed", completed_at=200))
    legacy: dict[str, JSON] = {
        "id": "batch_1-0",
        "custom_id": "q-0",
        "response": {"status_code": 200, "body": {}},
    }
    new = OUTCOME.to_json()
    lines = output_lines(done, [legacy, new])
    assert lines[0] == legacy
    assert lines[1]["id"] == "batch_1-1" and lines[1]["custom_id"] == "q-7"
