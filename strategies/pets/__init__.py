"""PETS: budget-aware allocation of self-consistency samples (docs/specs.md §4).

Online (one question at a time): :mod:`strategies.pets.online` draws ``K0`` warm-up
samples, looks the warm-up's answer pattern up in a calibrated allocation table
(:mod:`strategies.pets.table`), draws the extra samples of that bucket, and votes.
Offline (a batch with one total budget): :mod:`strategies.pets.okg` allocates samples
one round at a time by the optimistic knowledge gradient over Dirichlet posteriors;
:mod:`server.batches.pets.job` runs it against an engine.
"""
