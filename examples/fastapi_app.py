"""A FastAPI app that hands work to cairnq, and the worker that does it.

The production shape: the web process only submits and reads (one CairnQ
client, opened and closed by the app's lifespan); the worker is a process of
its own, as many as you need, on the same database.

    pip install 'cairnq-fast[postgres]' fastapi uvicorn
    export CAIRNQ_DB=tasks.db            # or postgresql://user@host/db
    python examples/fastapi_app.py worker                  # terminal 1: the worker
    uvicorn --app-dir examples fastapi_app:app --port 8000   # terminal 2: the API
    curl -X POST localhost:8000/reports -H 'content-type: application/json' \
         -d '{"customer": "acme", "months": 3}'            # -> {"id": "task_..."}
    curl localhost:8000/tasks/task_...                     # status and result
    curl -X POST localhost:8000/reports/now -H 'content-type: application/json' \
         -d '{"customer": "acme", "months": 3}'            # waits for the result

tests/examples/test_examples.py runs exactly this: a uvicorn server and a
worker process, each on its own.
"""

from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

from cairnq import CairnQ, TaskContext, TaskFailed, TaskTimeout, Worker

DATABASE = os.environ.get("CAIRNQ_DB", "tasks.db")


def open_client() -> CairnQ:
    if DATABASE.startswith(("postgresql://", "postgres://")):
        return CairnQ.postgres(DATABASE)
    return CairnQ.sqlite(DATABASE)


# -- the web process ------------------------------------------------------------------------


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # One client for the process: opened before the first request, closed
    # after the last one (its connections, and SQLite's pending writes).
    async with open_client() as client:
        app.state.cairnq = client
        yield


app = FastAPI(lifespan=lifespan)


class ReportRequest(BaseModel):
    customer: str
    months: int = 1


def client_of(request: Request) -> CairnQ:
    client: CairnQ = request.app.state.cairnq
    return client


@app.post("/reports", status_code=202)
async def submit_report(body: ReportRequest, request: Request) -> dict[str, str]:
    """Enqueue and answer at once; the client polls /tasks/{id}."""
    task = await client_of(request).submit("report.build", body.model_dump())
    return {"id": task.id}


@app.post("/reports/now")
async def build_report_now(body: ReportRequest, request: Request) -> Any:
    """Enqueue and wait for the worker's result (``call``), within 10 s."""
    try:
        return await client_of(request).call("report.build", body.model_dump(), timeout_ms=10_000)
    except TaskFailed as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    except TaskTimeout as exc:
        raise HTTPException(status_code=504, detail=f"still running: {exc.task_id}") from exc


@app.get("/tasks/{task_id}")
async def task_status(task_id: str, request: Request) -> dict[str, Any]:
    task = await client_of(request).get(task_id)
    if task is None:
        raise HTTPException(status_code=404, detail="no such task")
    return {"id": task.id, "status": task.status, "result": task.result, "error": task.error}


# -- the worker process ---------------------------------------------------------------------


def build_worker() -> Worker:
    if DATABASE.startswith(("postgresql://", "postgres://")):
        worker = Worker.postgres(DATABASE, concurrency=4)
    else:
        worker = Worker.sqlite(DATABASE, concurrency=4)

    @worker.task("report.build")
    async def build_report(ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        if payload["months"] < 1:
            raise ValueError("months must be at least 1")
        await ctx.progress(0.5, "totals")
        totals = [len(payload["customer"]) * 100 + month for month in range(payload["months"])]
        return {"customer": payload["customer"], "total": sum(totals)}

    return worker


if __name__ == "__main__":
    if sys.argv[1:] != ["worker"]:
        sys.exit("usage: python examples/fastapi_app.py worker   (serve the API with uvicorn)")
    build_worker().serve()  # until SIGINT/SIGTERM: the first one drains the calls in flight
