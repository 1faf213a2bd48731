"""Tree sampling: the pure tree functions (`shape`), the sampler, its options and its vote."""
