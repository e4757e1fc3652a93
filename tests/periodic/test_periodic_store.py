"""The two statements periodic tasks add, on both dialects."""

from __future__ import annotations

from typing import Any

import pytest

from cairnq.periodic import Scheduler, declare, parse_instant

ODD_KEYS = [
    "plain",
    "it's",
    'say "hi"',
    "a:b :limit",
    "x--y",
    "/* c */",
    "ключ",
    "%_",
    "back\\slash",
    "",
]


async def test_existing_keys(backend: Any) -> None:
    store = backend.store()
    await store.connect()
    assert await store.existing_keys([]) == set()
    for key in ODD_KEYS[::2]:
        await store.submit(name="t", key=key)
    assert await store.existing_keys(ODD_KEYS) == set(ODD_KEYS[::2])
    many = [f"k{i}" for i in range(600)]
    for key in many[::100]:
        await store.submit(name="t", key=key)
    assert await store.existing_keys(many) == set(many[::100])
    with pytest.raises(TypeError):
        await store.existing_keys([1])  # type: ignore[list-item]


async def test_periodic_latest_is_the_newest_fire_of_each_schedule(backend: Any) -> None:
    store = backend.store()
    await store.connect()
    scheduler = Scheduler(store, lambda exc, info: None)
    a = declare("0 * * * *", "job", id="a")
    b = declare("0 * * * *", "job", id="b")
    fires = ["2026-01-01T03:00:00.000Z", "2026-01-01T01:00:00.000Z", "2026-01-01T02:00:00.000Z"]
    for fire in fires:  # submitted out of order: fire_at decides, not creation
        await scheduler.submit(a, parse_instant(fire))
    await scheduler.submit(b, parse_instant("2026-01-01T00:00:00.000Z"))
    await store.submit(name="job", metadata={"other": 1})
    await store.submit(name="job", metadata={"cairnq.periodic": "not an object"})
    latest = await store.periodic_latest()
    got = [
        (t.metadata["cairnq.periodic"]["schedule"], t.metadata["cairnq.periodic"]["fire_at"])
        for t in latest
    ]
    assert got == [("a", "2026-01-01T03:00:00.000Z"), ("b", "2026-01-01T00:00:00.000Z")]
