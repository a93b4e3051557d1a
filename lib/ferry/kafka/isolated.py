"""Admin calls that can crash the client, run in a child process the driver outlives.

librdkafka's AdminClient dies with SIGSEGV, taking the whole process with it, when a
ListConsumerGroupOffsets (OffsetFetch) is answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE:
its response handler asks the client's consumer-group handle to look the coordinator up again,
and an AdminClient has none (librdkafka issue 5040; still so in 2.16). A coordinator moves
whenever a broker restarts or leadership of `__consumer_offsets` moves, and a fresh cluster
answers so while it loads that topic, so a cutover scheduled through broker restarts would hit
it: the driver would vanish with exit 139 and no line saying why. A consumer's own
`committed()` survives the answer, but it reads one group per client, where the AdminClient
reads thousands of groups at once.

So such calls run in a worker process (`run`): a plain `python -m ferry.kafka.isolated` that
reads one pickled call at a time on stdin and answers on stdout, started on first use and kept
for the job's life. The calls themselves make the crash rare (`ferry.kafka.groups` waits for
every coordinator an offset fetch will reach to answer before it fetches); what remains is a
coordinator moving between the two. A worker that dies mid-call is replaced and the call
repeated (the calls are reads: the answer that killed it is the transient one), with the one
retry schedule (`ferry.kafka.retry.Backoff`: 0.2 s doubling to 5 s) until the caller's budget
(`admin.retry_ms`) is spent; then the call fails with one line naming it. Workers are used one
call at a time; two threads calling at once get two workers.
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from ferry.errors import ClusterError
from ferry.kafka.retry import Backoff

T = TypeVar("T")

_HEADER = struct.Struct("!Q")


class WorkerCrashed(Exception):
    """The worker process ended before answering."""


class _Worker:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ferry.kafka.isolated"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def call(self, func: Callable[..., T], args: tuple) -> T:
        try:
            _write(self.process.stdin, (func, args))
            ok, value = _read(self.process.stdout)
        except (BrokenPipeError, EOFError, OSError) as e:
            self.process.kill()
            code = self.process.wait()
            raise WorkerCrashed(f"exit {code}") from e
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()


_idle: list[_Worker] = []
_all: list[_Worker] = []
_lock = threading.Lock()


def run(
    what: str, func: Callable[..., T], *args: object, retry_s: float, deadline: float | None = None
) -> T:
    """`func(*args)` in a worker process; `func` is a module-level function, `args` and its
    result picklable. Exceptions it raises are raised here. A worker that crashes is replaced
    and the call repeated after a backoff, for `retry_s` seconds (or until `deadline`, a
    `time.monotonic()` time: the machine's clock, the same in the worker); `what` names the
    call in the error after that."""
    backoff = Backoff(retry_s, deadline)
    crashes = 0
    while True:
        worker = _take()
        try:
            value = worker.call(func, args)
        except WorkerCrashed as e:
            with _lock:
                _all.remove(worker)
                _crashes.append(str(e))
            crashes += 1
            if backoff.wait():
                continue
            times = "once" if crashes == 1 else f"{crashes} times"
            raise ClusterError(
                f"{what} failed ({backoff.spent}): the Kafka client crashed {times} ({e}; "
                "librdkafka issue 5040: a group coordinator not ready or moving)"
            ) from None
        except BaseException:
            _give_back(worker)
            raise
        _give_back(worker)
        return value


_crashes: list[str] = []  # how each crashed worker ended, in this process (for tests)


def crashes() -> list[str]:
    """How every worker that crashed mid-call in this process ended ("exit -11"), oldest
    first: the tests tell a run that met the crash from one that did not."""
    with _lock:
        return list(_crashes)


_resident: dict[bytes, object] = {}


def resident(value: T) -> T:
    """In a worker: the first value equal to `value` (by its pickled form) that this worker
    was sent, so what it holds (a cluster's AdminClient, its connections) outlives one call."""
    return _resident.setdefault(pickle.dumps(value), value)  # type: ignore[return-value]


def workers() -> list[int]:
    """The pids of the live workers (for tests)."""
    with _lock:
        return [w.process.pid for w in _all if w.process.poll() is None]


def _take() -> _Worker:
    with _lock:
        while _idle:
            worker = _idle.pop()
            if worker.process.poll() is None:
                return worker
            _all.remove(worker)
    worker = _Worker()
    with _lock:
        _all.append(worker)
    return worker


def _give_back(worker: _Worker) -> None:
    with _lock:
        _idle.append(worker)


@atexit.register
def _close_all() -> None:
    with _lock:
        for worker in _all:
            worker.close()
        _all.clear()
        _idle.clear()


def _write(stream, value: object) -> None:  # noqa: ANN001 - a binary pipe
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read(stream) -> object:  # noqa: ANN001 - a binary pipe
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the worker closed its pipe")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the worker closed its pipe mid-answer")
    return pickle.loads(data)


def _serve() -> None:
    """The worker: calls from stdin, answers to stdout, until stdin closes. Anything the
    called code prints goes to stderr, so it cannot corrupt an answer."""
    requests = sys.stdin.buffer
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    while True:
        try:
            func, args = _read(requests)
        except EOFError:
            return
        try:
            answer: tuple[bool, object] = (True, func(*args))
        except Exception as e:  # noqa: BLE001 - raised again in the caller
            answer = (False, e if _picklable(e) else ClusterError(str(e)))
        _write(answers, answer)


def _picklable(value: object) -> bool:
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:  # noqa: BLE001 - any failure means no
        return False
    return True


if __name__ == "__main__":
    _serve()
