"""The OpenAI Batch API: ``/v1/files`` and ``/v1/batches`` (docs/batches.md).

``records``: the files and batches as values and as OpenAI renders them; ``lines``: an
input file read and checked line by line; ``store``: what keeps them (SQLite under the
state dir, or PostgreSQL shared by gateways, ``sql``); ``runner``: the lines run through
this gateway's own pipeline, under a lease any gateway can take over.
"""
