"""The SDK as the workloads and the floors' set-up drive it: whichever
``cairnq`` the running interpreter has (ours, or the reference's in its own
virtualenv), through its public API only."""

from __future__ import annotations

import asyncio
from typing import Any


def client(dialect: str, target: str) -> Any:
    from cairnq import CairnQ

    return CairnQ.sqlite(target) if dialect == "sqlite" else CairnQ.postgres(target)


async def submit_many(q: Any, n: int, name: str = "noop", lanes: int = 64) -> None:
    """``n`` tasks ``{"i": i}`` submitted by ``lanes`` concurrent producers."""

    async def lane(k: int) -> None:
        for i in range(k, n, lanes):
            await q.submit(name, {"i": i})

    await asyncio.gather(*(lane(k) for k in range(lanes)))
