"""The offline PETS batch service behind ``/v1/pets/batches``: a JSONL of questions and
one total sample budget in, a job that allocates samples across the questions by the
optimistic knowledge gradient (:mod:`strategies.pets.okg`), JSONL answers out.

* :mod:`.input`: the job's options and questions, checked (``BatchOptions``,
  ``BatchQuestion``).
* :mod:`.job`: one job run against an engine, round by round, resumable by replay.
* :mod:`.result`: what a finished question reports (its vote, its samples).
* :mod:`.store` (the ``BatchStore`` contract) and :mod:`.sql_store` (one SQLite file
  under ``--state-dir``, or a fleet's PostgreSQL): jobs outlive the gateway process.
* :mod:`.service`: a gateway's jobs: submit, list, cancel, leases, resume after a restart.
* :mod:`.cli`: ``python -m server.batches.pets.cli`` submits a JSONL and waits.

The HTTP side is ``server/routes/pets_batches.py`` (routes) and ``server/batches/pets_wire.py``
(the wire format).
"""
