"""The HTTP side of the offline PETS batch service (``/v1/pets/batches``): the routes
(:mod:`.routes`) and the JSONL / JSON wire format (:mod:`.wire`). The jobs themselves run
in ``strategies/pets/batches/``; the store and table resources are built by
``server/pets.py``."""
