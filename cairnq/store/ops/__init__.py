"""The protocol's operations, written once over the driver seam (``driver.py``).

One module per kind of operation, each a mixin ``TaskStore`` composes:
``core`` (row mapping, encoding, problems survived), ``policies``
(backpressure and retention handed in from above), ``submit``, ``reads``,
``manage`` (cancel, retry, purge), ``claims`` (probe, recover, draw) and
``settle`` (a worker's ownership-checked writes: heartbeat, progress,
complete, fail).
"""
