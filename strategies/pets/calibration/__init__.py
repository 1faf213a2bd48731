"""PETS calibration, offline tools the server never runs: draw sample pools
(``pools``), fit per-question curves (``curves``), simulate allocations (``simulate``)
and build the allocation table the online strategy reads (``calibrate``; the
``thinkgate calibrate`` command is ``cli``)."""
