"""Keep N worker processes running, and stop them together.

``cairnq worker TARGET --processes N`` runs this instead of a worker: each
child is a plain ``cairnq worker TARGET`` (it imports the target and opens
its own connection), started in a session of its own so a terminal's Ctrl-C
reaches only the supervisor, which forwards it once. A child that dies is
restarted with exponential backoff; one that keeps dying at start ends the
whole thing. Each child holds the read end of a pipe whose write end only the
supervisor holds: if the supervisor is killed outright, the children see end
of file and drain (no orphans, no double signal).

Signals: the first SIGINT/SIGTERM is forwarded (every child drains, nothing
is restarted any more); a second one sends SIGINT, which interrupts the
children's drain; whatever still runs ``grace_s`` after the first is killed.
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any, Optional

from cairnq.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_KILLED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WORKERS_FAILING,
    log,
)

__all__ = ["Policy", "supervise", "describe_exit"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclasses.dataclass(frozen=True)
class Policy:
    """Timings of restarts and shutdown, in seconds."""

    grace_s: float = 30.0  # from the first signal until what is left is killed
    backoff_first_s: float = 0.5
    backoff_max_s: float = 30.0
    healthy_after_s: float = 10.0  # a child that lived this long was not failing at start
    give_up_after: int = 5  # consecutive quick deaths of one child before giving up


@dataclasses.dataclass
class _Slot:
    """One of the N places a child runs in, across its restarts."""

    number: int
    proc: Optional[subprocess.Popen[bytes]] = None
    started_at: float = 0.0
    restart_at: Optional[float] = None
    backoff_s: float = 0.0
    quick_deaths: int = 0
    status: Optional[int] = None  # the last child's return code


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


class _Supervisor:
    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], processes: int, policy: Policy
    ) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.policy = policy
        self.slots = [_Slot(n, backoff_s=policy.backoff_first_s) for n in range(1, processes + 1)]
        self.pending: list[int] = []
        self.stop_signal: Optional[signal.Signals] = None  # what the children were sent first
        self.stopping_since: Optional[float] = None
        self.interrupted = False
        self.killed = False
        self.reason: Optional[int] = None  # EXIT_USAGE / EXIT_WORKERS_FAILING: why we stopped
        # Nobody writes to this pipe: its end of file tells the children we are gone.
        self.lifeline_read, self.lifeline_write = os.pipe()

    # -- children -------------------------------------------------------------------

    def spawn(self, slot: _Slot) -> None:
        argv = [*self.command, "--supervisor-fd", str(self.lifeline_read)]
        slot.proc = subprocess.Popen(
            argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            pass_fds=(self.lifeline_read,),
            start_new_session=True,  # a terminal's Ctrl-C reaches us only; we forward it once
        )
        slot.started_at = time.monotonic()
        slot.restart_at = None
        slot.status = None
        log.info("worker process %d started (pid %d)", slot.number, slot.proc.pid)

    def live(self) -> list[_Slot]:
        return [s for s in self.slots if s.proc is not None]

    def send(self, sig: signal.Signals) -> None:
        for slot in self.live():
            assert slot.proc is not None
            try:
                os.kill(slot.proc.pid, sig)
            except ProcessLookupError:
                pass  # already gone; reaped on the next pass

    def reap(self) -> None:
        for slot in self.live():
            assert slot.proc is not None
            code = slot.proc.poll()
            if code is None:
                continue
            pid, lived = slot.proc.pid, time.monotonic() - slot.started_at
            slot.proc, slot.status = None, code
            if self.stopping_since is not None:
                log.info("worker process %d (pid %d) %s", slot.number, pid, describe_exit(code))
                continue
            self.died(slot, pid, code, lived)

    def died(self, slot: _Slot, pid: int, code: int, lived: float) -> None:
        """A child ended while nobody asked it to."""
        what = f"worker process {slot.number} (pid {pid}) {describe_exit(code)} after {lived:.1f} s"
        if code == EXIT_USAGE:  # the target or a flag is wrong: restarting cannot help
            log.error("%s: a usage error; stopping", what)
            self.begin_stop(signal.SIGTERM, EXIT_USAGE)
            return
        if lived >= self.policy.healthy_after_s:
            slot.quick_deaths, slot.backoff_s = 0, self.policy.backoff_first_s
        else:
            slot.quick_deaths += 1
            if slot.quick_deaths >= self.policy.give_up_after:
                log.error(
                    "%s; it died at start %d times in a row: giving up", what, slot.quick_deaths
                )
                self.begin_stop(signal.SIGTERM, EXIT_WORKERS_FAILING)
                return
        log.warning("%s; restarting in %.1f s", what, slot.backoff_s)
        slot.restart_at = time.monotonic() + slot.backoff_s
        slot.backoff_s = min(slot.backoff_s * 2, self.policy.backoff_max_s)

    # -- stopping -------------------------------------------------------------------

    def begin_stop(self, sig: signal.Signals, reason: Optional[int] = None) -> None:
        self.stop_signal, self.stopping_since, self.reason = sig, time.monotonic(), reason
        for slot in self.slots:
            slot.restart_at = None
            if slot.proc is None:
                slot.status = None  # its death was dealt with; only the drain counts now
        log.info(
            "%s: draining %d worker process(es); any left in %.1f s are killed",
            sig.name,
            len(self.live()),
            self.policy.grace_s,
        )
        self.send(sig)

    def on_signal(self, sig: signal.Signals) -> None:
        if self.stopping_since is None:
            self.begin_stop(sig)
        elif not self.interrupted:
            log.warning("%s again: interrupting the worker processes", sig.name)
            self.interrupted = True
            self.send(signal.SIGINT)
        else:
            self.kill_all("a third signal")

    def kill_all(self, why: str) -> None:
        if self.live():
            log.error("%s: killing %d worker process(es)", why, len(self.live()))
            self.killed = True
            self.send(signal.SIGKILL)

    def drained_cleanly(self, slot: _Slot) -> bool:
        """Exit 0 after a drain; or ended by the signal we sent before it
        could set up its handlers (still starting, nothing in flight)."""
        code = slot.status
        if code in (None, EXIT_OK):
            return True
        if self.stop_signal is signal.SIGINT and code == EXIT_INTERRUPTED:
            return True
        return self.stop_signal is not None and code == -self.stop_signal

    def exit_code(self) -> int:
        if self.reason is not None:
            return self.reason
        if self.killed:
            return EXIT_KILLED
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_OK if all(self.drained_cleanly(s) for s in self.slots) else EXIT_FAILED

    # -- the loop -------------------------------------------------------------------

    def next_timeout(self) -> Optional[float]:
        now = time.monotonic()
        due = [s.restart_at for s in self.slots if s.restart_at is not None]
        if self.stopping_since is not None and not self.killed:
            due.append(self.stopping_since + self.policy.grace_s)
        return max(0.0, min(due) - now) if due else None

    def run(self, wakeup: int) -> int:
        for slot in self.slots:
            self.spawn(slot)
        while True:
            while self.pending:
                self.on_signal(signal.Signals(self.pending.pop(0)))
            self.reap()
            if self.stopping_since is not None:
                if not self.live():
                    return self.exit_code()
                if time.monotonic() >= self.stopping_since + self.policy.grace_s:
                    self.kill_all(f"still running {self.policy.grace_s:.1f} s after the stop")
            else:
                now = time.monotonic()
                for slot in self.slots:
                    if slot.restart_at is not None and slot.restart_at <= now:
                        self.spawn(slot)
            # Signals (SIGCHLD included) write to ``wakeup`` and end the wait.
            ready, _, _ = select.select([wakeup], [], [], self.next_timeout())
            if ready:
                _drain(wakeup)

    def close(self) -> None:
        for fd in (self.lifeline_read, self.lifeline_write):
            try:
                os.close(fd)
            except OSError:
                pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def supervise(
    command: Sequence[str], env: Mapping[str, str], processes: int, policy: Policy = Policy()
) -> int:
    """Run ``processes`` copies of ``command`` (a ``cairnq worker`` command
    line; ``--supervisor-fd FD`` is appended) until they are stopped; return
    the exit code (see ``cairnq --help``)."""
    supervisor = _Supervisor(command, env, processes, policy)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)

    def note(signum: int, frame: Optional[FrameType]) -> None:
        if signum != signal.SIGCHLD:
            supervisor.pending.append(signum)

    saved: dict[int, Any] = {}
    previous_wakeup = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    try:
        for sig in (*_STOP_SIGNALS, signal.SIGCHLD):
            saved[sig] = signal.signal(sig, note)
        return supervisor.run(wake_read)
    finally:
        # Whatever went wrong in here, no child outlives us unattended: closing
        # the lifeline makes them drain (a signal could be their second).
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_wakeup)
        supervisor.close()
        os.close(wake_read)
        os.close(wake_write)
