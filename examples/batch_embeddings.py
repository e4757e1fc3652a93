"""Embeddings in batches: one handler call per up to 32 texts, and a cap on
the payload bytes a worker holds at once.

    pip install cairnq-fast
    python examples/batch_embeddings.py [tasks.db] [number of texts]

The "model" is a stand-in (a vector from the text's hash, no download), so
the example runs anywhere; put a real one where ``embed_texts`` is. Batching
is what a real model wants: one forward pass over many texts costs about as
much as one over a few. ``max_in_flight_bytes`` keeps a worker from claiming
more payload than it wants in memory (here 64 KiB of JSON), however deep the
queue: it stops claiming while the running payloads reach it.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import sys
from typing import Any

from cairnq import CairnQ, TaskContext, Worker

DIMENSIONS = 8
BATCH = 32


def embed_texts(texts: list[str]) -> list[list[float]]:
    """One "forward pass" for a batch: deterministic unit-ish vectors."""
    vectors = []
    for text in texts:
        digest = hashlib.sha256(text.encode()).digest()
        raw = struct.unpack(f"<{DIMENSIONS}i", digest[: 4 * DIMENSIONS])
        vectors.append([round(x / 2**31, 6) for x in raw])
    return vectors


def build_worker(path: str, calls: list[int]) -> Worker:
    worker = Worker.sqlite(path, concurrency=2, max_in_flight_bytes=64 * 1024)

    @worker.task("embed", batch=BATCH)
    async def embed(contexts: list[TaskContext]) -> dict[str, Any]:
        calls.append(len(contexts))
        texts = [ctx.payload["text"] for ctx in contexts]
        vectors = await asyncio.to_thread(embed_texts, texts)  # keep the loop free
        # A batch handler returns each task's result by task id.
        return {ctx.task_id: vector for ctx, vector in zip(contexts, vectors)}

    return worker


async def main(path: str, count: int) -> None:
    async with CairnQ.sqlite(path) as client:
        tasks = [await client.submit("embed", {"text": f"document {i}"}) for i in range(count)]
        calls: list[int] = []
        worker = build_worker(path, calls)
        async with worker.background():
            done = [await client.wait(task.id) for task in tasks]
        await worker.close()
    assert all(task.status == "succeeded" for task in done)
    assert done[0].result == embed_texts(["document 0"])[0]
    print(f"embedded {len(done)} texts in {len(calls)} handler calls (largest batch {max(calls)})")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "embeddings.db",
                     int(sys.argv[2]) if len(sys.argv) > 2 else 200))  # fmt: skip
