"""One ``/metrics`` and ``/healthz`` for the worker processes of a supervisor.

Each child serves its own endpoint on 127.0.0.1 at a free port and writes
that port to a file named after its pid in a per-run directory
(:func:`announce`); the supervisor's endpoint reads every child's on each
scrape and merges them: counters and histograms are summed per label set,
gauges summed too except queue depth, which every child samples from the same
database (its maximum is reported). A child's counters restart from zero
when the child does: ``rate()`` and ``increase()`` handle that as any
counter reset.

``/healthz`` is 200 when every expected child answers 200; else 503, with
each child's reason.
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from cairnq.observability.endpoint import handler_class


__all__ = ["announce", "Aggregator"]

_MAX_OF = {"cairnq_queue_depth"}  # the same number seen by every child: not a sum
_FETCH_TIMEOUT_S = 5.0


def announce(directory: str, port: int) -> Callable[[], None]:
    """Tell the supervisor this child serves on ``port``; returns the undo."""
    path = Path(directory) / str(os.getpid())
    temporary = path.with_suffix(".tmp")
    temporary.write_text(str(port))
    os.replace(temporary, path)  # whole, or not at all

    def withdraw() -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass

    return withdraw


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=_FETCH_TIMEOUT_S) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Aggregator:
    """The supervisor's endpoint over its children's (a background thread)."""

    def __init__(self, directory: str, processes: int, host: str, port: int) -> None:
        self.directory = Path(directory)
        self.processes = processes
        self._http = ThreadingHTTPServer((host, port), self._handler())
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="cairnq-metrics-aggregate", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    def close(self) -> None:
        if self._thread.is_alive():
            self._http.shutdown()
            self._thread.join()
        self._http.server_close()

    def children(self) -> list[tuple[int, int]]:
        """(pid, port) of every child serving now; stale files are removed."""
        found = []
        for entry in self.directory.iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if not _alive(pid):
                entry.unlink(missing_ok=True)
                continue
            try:
                found.append((pid, int(entry.read_text())))
            except (OSError, ValueError):
                continue  # being written or withdrawn
        return sorted(found)

    def metrics(self) -> str:
        from prometheus_client.parser import text_string_to_metric_families

        types: dict[str, tuple[str, str]] = {}  # family -> (type, help)
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for _pid, port in self.children():
            try:
                status, text = _get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                continue  # gone between listing and asking
            if status != 200:
                continue
            for family in text_string_to_metric_families(text):
                types.setdefault(family.name, (family.type, family.documentation))
                merged = values.setdefault(family.name, {})
                take_max = family.name in _MAX_OF
                for s in family.samples:
                    key = (s.name, tuple(sorted(s.labels.items())))
                    old = merged.get(key)
                    if old is None:
                        merged[key] = s.value
                    else:
                        merged[key] = max(old, s.value) if take_max else old + s.value
        lines = []
        for name, (kind, doc) in types.items():
            header = f"{name}_total" if kind == "counter" else name
            lines.append(f"# HELP {header} {doc}")
            lines.append(f"# TYPE {header} {kind}")
            for (sample, labels), value in values[name].items():
                text_labels = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
                lines.append(f"{sample}{{{text_labels}}} {_number(value)}" if labels
                             else f"{sample} {_number(value)}")  # fmt: skip
        return "\n".join(lines) + "\n"

    def health(self) -> tuple[bool, str]:
        children = self.children()
        problems = []
        for pid, port in children:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/healthz")
            except OSError as exc:
                status, body = 0, f"no answer ({exc})"
            if status != 200:
                problems.append(f"process {pid}: {body.strip()}")
        if len(children) < self.processes:
            problems.insert(0, f"{len(children)} of {self.processes} worker processes serving")
        return (not problems, "; ".join(problems) or "ok")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return handler_class(
            lambda: ("text/plain; version=0.0.4; charset=utf-8", self.metrics().encode()),
            self.health,
        )
