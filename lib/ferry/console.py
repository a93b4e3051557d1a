"""What of spark-submit's stderr reaches the console. spark-submit.sh runs the JVM (and the Python
driver, which writes its stderr there too) with its stderr piped through
`python -m ferry.console LOG_FILE` (not under --verbose). Every line is passed on the moment it
arrives: a progress line is the operator's and the scheduler's view of a run, and a block-
buffering filter (Debian's awk is mawk, which reads a pipe in blocks) held a run's lines back
until it ended, or lost them when it was killed.

What is not Ferry's word goes to the run's log file instead:
- Java stack traces: a JVM thread that dies uncaught (Py4J's reader out of memory, say) prints
  one beside the job's one-line error, which names the log file;
- Ivy's resolution report (`--packages`, `--delta`): ~90 lines before the job starts;
- the JVM's report of its first OutOfMemoryError (`#` lines, the command spark-submit.sh
  has it run: lib/ferry/driver_watch.py), which the job's one line says in its own words.
spark-submit itself failing (`Exception in thread "main" ...`: a package that does not
resolve, say) becomes one `error:` line naming the log file, unless the job has said its own
`error:` line already. Every other line (the JVM's own start-up errors included) reaches the
console unchanged.
"""

from __future__ import annotations

import os
import re
import signal
import sys

_STACK = re.compile(
    rb'^(?:Exception in thread "|\tat |Caused by: |\tSuppressed: |\t\.\.\. \d+ more)'
)
_MAIN_FAILED = re.compile(rb'^Exception in thread "main" (?:[\w$.]+(?:Exception|Error): )?(.*)')
# Ivy's report opens with its settings line (or the cache line, when settings are the user's)
# and ends with the retrieval's count; a failed resolution ends it with spark-submit's exception.
_IVY_START = re.compile(rb"^(?::: loading settings :: |Ivy Default Cache set to: )")
_IVY_END = re.compile(rb"^\t\d+ artifacts copied, \d+ already retrieved")
# HotSpot's out-of-memory report: a bare `#`, then these.
_VM_REPORT = re.compile(
    rb"^# (?:java\.lang\.OutOfMemoryError\b|-XX:OnOutOfMemoryError=|  Executing /bin/sh -c )"
)
_BARE_HASH = b"#\n"


class ConsoleFilter:
    """Splits a byte stream into console lines and log lines, line by line."""

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path
        self.is_in_ivy = False
        self.has_error = False  # an `error:` line reached the console: the run's one line
        self.pending = b""
        self.held = b""  # a bare `#`, until the next line says whose it is

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """The console's bytes and the log file's for `data` (complete lines only; a partial
        line waits for the rest, or for `finish`)."""
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        console: list[bytes] = []
        log: list[bytes] = []
        for line in lines:
            self._route(line + b"\n", console, log)
        return b"".join(console), b"".join(log)

    def finish(self) -> tuple[bytes, bytes]:
        """What is left at the end of the stream (a last line without its newline)."""
        console: list[bytes] = []
        log: list[bytes] = []
        if self.pending:
            self._route(self.pending, console, log)
            self.pending = b""
        if self.held:
            self._say(console, self.held)
            self.held = b""
        return b"".join(console), b"".join(log)

    def _route(self, line: bytes, console: list[bytes], log: list[bytes]) -> None:
        if self.held:
            held, self.held = self.held, b""
            (log if _VM_REPORT.match(line) else console).append(held)
        if line == _BARE_HASH:
            self.held = line
            return
        if _VM_REPORT.match(line):
            log.append(line)
            return
        failed = _MAIN_FAILED.match(line)
        if failed:
            self.is_in_ivy = False
            log.append(line)
            if not self.has_error:
                why = failed.group(1).strip().decode("utf-8", "replace")
                self._say(console, f"error: spark-submit could not start the job: {why} "
                          f"(details: {self.log_path})\n".encode())  # fmt: skip
            return
        if self.is_in_ivy or _IVY_START.match(line):
            self.is_in_ivy = not _IVY_END.match(line)
            log.append(line)
            return
        if _STACK.match(line):
            log.append(line)
        else:
            self._say(console, line)

    def _say(self, console: list[bytes], line: bytes) -> None:
        self.has_error = self.has_error or line.startswith(b"error: ")
        console.append(line)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def main(argv: list[str]) -> int:
    """Filter stdin onto stdout until the end of the stream."""
    if len(argv) != 1:
        print("usage: python -m ferry.console LOG_FILE", file=sys.stderr)
        return 2
    # ^C (or a scheduler's TERM) reaches the whole process group: the filter keeps passing
    # lines on until the JVM and the driver have said their last (the stream's end).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    filt = ConsoleFilter(argv[0])
    log_fd: int | None = None

    def to_log(data: bytes) -> None:
        nonlocal log_fd
        if not data:
            return
        if log_fd is None:
            try:
                log_fd = os.open(argv[0], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError:
                log_fd = -1
        if log_fd >= 0:
            _write_all(log_fd, data)

    while True:
        try:
            # os.read returns whatever the pipe holds, however little: nothing waits for a
            # block to fill.
            data = os.read(0, 65536)
        except InterruptedError:
            continue
        if not data:
            break
        console, log = filt.feed(data)
        to_log(log)
        if console:
            _write_all(1, console)
    console, log = filt.finish()
    to_log(log)
    _write_all(1, console)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:
        sys.exit(0)  # the console went away; the JVM's exit code is the run's
