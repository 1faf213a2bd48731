"""server/batch_wire.py renders a PETS job as OpenAI's batch object and list (no engine)."""

from __future__ import annotations

from dataclasses import replace

from server.batch_wire import batch_list, batch_object
from strategies.pets.batch import BatchView
from strategies.pets.batch_input import BatchOptions
from strategies.pets.store import JobRecord

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
