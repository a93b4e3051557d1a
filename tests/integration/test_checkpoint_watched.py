"""`migrate --checkpoint --execute` and its `--rollback`, run as `./spark-submit.sh` runs them and
SIGKILLed from outside, the moment a watched offsets file (or its Hadoop checksum) changes or
disappears: once per instant (the 1st such event, the 2nd, ...), on the local filesystem.
After each kill every offsets file is exactly the original or exactly the translation, never
missing; the same command again (the default --idle, as a scheduler retries) ends exact, exit 0.

The watcher is inotify on `offsets/` (through ctypes), in this process: it kills the job's
whole process group (its JVM and its Python driver) as soon as the event is read. Where a
store's replace is two steps (Hadoop's `FileContext.rename(..., OVERWRITE)` on the local
filesystem deletes the target, then renames), the window between them is microseconds: to land
in it from outside, the job runs under strace, which delays the return of every unlink by
UNLINK_DELAY_US (the file is already gone when the watcher sees its delete, and the job cannot
rename before it is killed). Without strace the test still runs, the window just narrower.

The checkpoint is a union of two Kafka sources, as Spark 4.2 writes one (its files written
through Hadoop's local filesystem, `.crc` checksums beside them: batch 4 committed, 5 not), on
topics whose copies keep the same names on the destination, 7 offsets higher on partition 0.
HDFS: tests/integration/test_yarn.py.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import struct
import subprocess
import threading
import time
import zlib
from pathlib import Path

import pytest

from ferry.testing.produce import Record, create_topics, produce

from .jobrunner import ROOT, run_job, write_migrate_config
from .test_checkpoint import BASE, META, records
from .test_checkpoint_killed import stopped_an_hour_ago

pytestmark = [pytest.mark.integration, pytest.mark.faults]

UNLINK_DELAY_US = 300_000
# inotify's events that change or remove a directory entry's file
IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x8, 0x40, 0x80
IN_CREATE, IN_DELETE = 0x100, 0x200
CHANGES = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
WATCHED = {"4", "5", ".4.crc", ".5.crc"}  # the files a run replaces, and Hadoop's checksums


class Watcher:
    """inotify on one directory: counts the events on WATCHED names and SIGKILLs process group
    `pgid` at the `kill_at`-th (never when None)."""

    def __init__(self, folder: Path, kill_at: int | None = None) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        assert self._fd >= 0, os.strerror(ctypes.get_errno())
        wd = self._libc.inotify_add_watch(self._fd, str(folder).encode(), CHANGES)
        assert wd >= 0, os.strerror(ctypes.get_errno())
        self.kill_at = kill_at
        self.pgid: int | None = None
        self.events: list[tuple[str, int]] = []
        self.killed_at: tuple[str, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if ready:
                self._read()
        self._read()

    def _read(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        at = 0
        while at < len(data):
            _, mask, _, length = struct.unpack_from("iIII", data, at)
            name = data[at + 16 : at + 16 + length].rstrip(b"\0").decode()
            at += 16 + length
            if name not in WATCHED:
                continue
            self.events.append((name, mask))
            if len(self.events) == self.kill_at and self.pgid is not None:
                # said first: the test's thread may see the job end before this one goes on
                self.killed_at = (name, mask)
                os.killpg(self.pgid, signal.SIGKILL)

    def close(self) -> list[tuple[str, int]]:
        self._stop.set()
        self._thread.join()
        os.close(self._fd)
        return self.events


def spark_submit(watcher: Watcher, config: str, *argv: str) -> int:
    """`./spark-submit.sh migrate` in a process group of its own (under strace when there is
    one, its unlinks delayed); the watcher holds the group to kill. Its exit code."""
    command = [str(ROOT / "spark-submit.sh"), "--master", "local[1]", "migrate"]
    command += ["--config", config, *argv]
    if shutil.which("strace"):
        delay = f"inject=unlink,unlinkat:delay_exit={UNLINK_DELAY_US}"
        command = ["strace", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null", "-e", delay, *command]
    env = {**os.environ, "FERRY_LOG_DIR": str(Path(config).parent / "logs")}
    env.pop("FERRY_KILL_AT", None)
    job = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    watcher.pgid = job.pid
    try:
        _, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    # strace ends when its tracees do: the group is gone once it is
    code = job.returncode
    assert watcher.killed_at is not None or code == 0, stderr.decode()[-3000:]
    return code


def offsets_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path / "offsets").iterdir() if p.name.isdigit()}


def hadoop_crc(data: bytes, per: int = 512) -> bytes:
    """Hadoop's local checksum file of `data` (CRC32 per 512 bytes, as `.N.crc` holds it)."""
    sums = b"".join(
        zlib.crc32(data[i : i + per]).to_bytes(4, "big") for i in range(0, len(data), per)
    )
    return b"crc\x00" + per.to_bytes(4, "big") + sums


def violations(path: Path, original: dict, translated: dict) -> list[str]:
    """Each offsets file missing, neither the original nor the translation, or beside a
    checksum of other bytes (Spark's read of it fails)."""
    now = offsets_files(path)
    found = [f"offsets/{b} missing" for b in sorted(set(original) - set(now))]
    found += [
        f"offsets/{b} is neither"
        for b, data in sorted(now.items())
        if data not in (original[b], translated[b])
    ]
    for b, data in sorted(now.items()):
        checksum = path / "offsets" / f".{b}.crc"
        if checksum.exists() and checksum.read_bytes() != hadoop_crc(data):
            found.append(f"offsets/{b}'s checksum is of other bytes")
    return found


def after_the_kill(
    watcher: Watcher, path: Path, original: dict, translated: dict, config: str, argv: tuple
) -> tuple[bool, list[str], int, str]:
    """What one round found: whether the kill landed, the files' violations right after it,
    and the same command again: its exit code and what the files are then."""
    wrong = violations(path, original, translated)
    again = run_job("migrate", "--config", config, *argv)
    now = offsets_files(path)
    ends = "translated" if now == translated else "original" if now == original else "neither"
    if again.code != 0:
        print(f"again, exit {again.code}: {again.stderr.strip().splitlines()[-1:]}")
    return watcher.killed_at is not None, wrong, again.code, ends


def hadoop_write(spark, path: Path, data: bytes) -> None:  # noqa: ANN001
    """A file written as Spark writes its checkpoint: through Hadoop's local filesystem, with a
    `.crc` checksum beside it."""
    jvm = spark._jvm
    target = jvm.org.apache.hadoop.fs.Path(f"file://{path}")
    fs = target.getFileSystem(spark._jsc.hadoopConfiguration())
    stream = fs.create(target, True)
    stream.write(bytearray(data))
    stream.close()


def union_checkpoint(spark, root: Path, topics: list[str]) -> Path:  # noqa: ANN001
    """Batches 4 (committed) and 5 (not) of a query reading the union of two Kafka sources."""
    for batch, base in ((4, 12), (5, 17)):
        lines = [f'{{"{t}":{{"1":{base + 8 + i},"0":{base + i}}}}}' for i, t in enumerate(topics)]
        hadoop_write(
            spark, root / "offsets" / str(batch), f"v1\n{META}\n{lines[0]}\n{lines[1]}".encode()
        )
    hadoop_write(spark, root / "commits" / "4", b'v1\n{"nextBatchWatermarkMs":0}')
    hadoop_write(spark, root / "metadata", b'{"id":"x"}')
    return root


@pytest.fixture(scope="module")
def union(clusters, spark, tmp_path_factory):
    """Two topics and their same-named copies, a config without renames, the checkpoint as
    Spark wrote it, and that checkpoint translated by an uninterrupted run (watched: how many
    events a rewrite makes is how many instants there are to kill it at)."""
    src, dst = clusters
    tmp = tmp_path_factory.mktemp("watched")
    u = f"wt{int(time.time() * 1000) % 10**8}"
    topics = [f"{u}-left", f"{u}-right"]
    for topic in topics:
        create_topics(src.config, {topic: 2})
        create_topics(dst.config, {topic: 2})
        produce(dst.config, topic, 0, [Record(b"x", b"old", BASE - 9000)] * 7)
        for p in range(2):
            produce(src.config, topic, p, records(topic, p, 0, 40))
            produce(dst.config, topic, p, records(topic, p, 0, 40))
    config = write_migrate_config(tmp, src, dst, u)
    original = union_checkpoint(spark, tmp / "original", topics)
    data = (original / "offsets" / "4").read_bytes()
    assert (original / "offsets" / ".4.crc").read_bytes() == hadoop_crc(data)
    clean = tmp / "clean"
    shutil.copytree(original, clean)
    watcher = Watcher(clean / "offsets")
    done = run_job(
        "migrate", "--config", config, "--checkpoint", clean, "--idle", "0s", "--execute"
    )
    rewrite_events = len(watcher.close())
    assert done.code == 0, done.stderr
    translated = offsets_files(clean)
    assert translated != offsets_files(original)
    return {
        "config": config,
        "original": original,
        "clean": clean,
        "translated": translated,
        "rewrite_events": rewrite_events,
        "tmp": tmp,
    }


def killed_at_event(k: int, path: Path, argv: tuple, union: dict, original, translated):  # noqa: ANN001, ANN201
    """The job on `path` SIGKILLed at the k-th change of an offsets file, then what
    `after_the_kill` finds (and the same command run again)."""
    watcher = Watcher(path / "offsets", kill_at=k)
    spark_submit(watcher, union["config"], *argv)
    watcher.close()
    return after_the_kill(watcher, path, original, translated, union["config"], argv)


def test_a_rewrite_killed_at_each_change_of_a_file_leaves_none_missing_and_ends_exact(union):
    original, translated = offsets_files(union["original"]), union["translated"]
    rounds, found = union["rewrite_events"], {}
    assert rounds >= 2, rounds  # at least one event per file
    for k in range(1, rounds + 1):
        path = union["tmp"] / f"x{k}"
        shutil.copytree(union["original"], path)
        stopped_an_hour_ago(path)
        argv = ("--checkpoint", str(path), "--execute")
        found[k] = killed_at_event(k, path, argv, union, original, translated)
    print(f"rewrite: {rounds} rounds: {found}")
    assert found == {k: (True, [], 0, "translated") for k in found}, found


def test_a_rollback_killed_at_each_change_of_a_file_leaves_none_missing_and_ends_exact(union):
    original, translated = offsets_files(union["original"]), union["translated"]
    (run,) = [p.name for p in (union["clean"] / "ferry").iterdir()]
    # how many events a rollback makes: one uninterrupted, watched
    probe = union["tmp"] / "r0"
    shutil.copytree(union["clean"], probe)
    watcher = Watcher(probe / "offsets")
    argv = ("--checkpoint", str(probe), "--rollback", run, "--execute")
    done = run_job("migrate", "--config", union["config"], *argv)
    rounds = len(watcher.close())
    assert done.code == 0 and offsets_files(probe) == original, done.stderr
    assert rounds >= 2, rounds
    found = {}
    for k in range(1, rounds + 1):
        path = union["tmp"] / f"r{k}"
        shutil.copytree(union["clean"], path)
        argv = ("--checkpoint", str(path), "--rollback", run, "--execute")
        found[k] = killed_at_event(k, path, argv, union, original, translated)
    print(f"rollback: {rounds} rounds: {found}")
    assert found == {k: (True, [], 0, "original") for k in found}, found
