"""The environment `make package` builds, on a node older than the build machine: a Debian
bullseye root filesystem (glibc 2.31, python3 3.9; `ferry.testing.rootfs`, made once per
machine with debootstrap) into which the test `chroot`s, with the executors' own code path run
there: Ferry's reader reads records from a local test broker into Arrow batches, and deltalake
writes and reads a table, in the node's own Python 3.11 (built from source inside the root
filesystem, as an administrator of bullseye nodes would install one) with the packages
unpacked from build/ferry-env.tar.gz. The node's python3 3.9 is refused in one line naming
the node's glibc and Python and the floor; the interpreter the previous package copied from
the build machine does not start there at all. Run by `make test-cluster` (as root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.testing.produce import Record, create_topics, produce

from .jobrunner import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

ARCHIVE = ROOT / "build" / "ferry-env.tar.gz"
NODE_PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[Path, str, Path]]:
    """(root filesystem, its Python 3.11, a directory in it holding ./environment unpacked
    from the archive and the library zip, as YARN localizes them into a container)."""
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    if not ARCHIVE.is_file():
        pytest.fail(f"{ARCHIVE} is missing: make test-cluster builds it (make package)")
    from ferry.testing.rootfs import node_python, proc_mounted, rootfs

    root = rootfs()
    python = node_python()
    container = root / "tmp" / f"container-{uuid.uuid4().hex[:8]}"
    (container / "environment").mkdir(parents=True)
    try:
        with tarfile.open(ARCHIVE) as tar:
            tar.extractall(container / "environment", filter="tar")
        subprocess.run([sys.executable, str(ROOT / "lib/ferry/packaging.py"), "lib"], check=True)
        shutil.copy(ROOT / "build" / "ferry-lib.zip", container)
        with proc_mounted(root):
            yield root, python, container
    finally:
        shutil.rmtree(container, ignore_errors=True)


def in_node(root: Path, container: Path, argv: list[str], **env: str):
    from ferry.testing.rootfs import chroot

    inside = "/" + container.relative_to(root).as_posix()
    return chroot(
        root, ["sh", "-c", 'cd "$0" && exec "$@"', inside, *argv],
        env={"PATH": NODE_PATH, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_packed_environment_reads_kafka_on_glibc_2_31(node, cluster, unique):
    root, python, container = node
    glibc = in_node(root, container, ["getconf", "GNU_LIBC_VERSION"]).stdout.strip()
    assert glibc == "glibc 2.31"
    topic = f"{unique}-t"
    create_topics(cluster.config, {topic: 1})
    produce(cluster.config, topic, 0, [Record(b"k", f"v{i}".encode(), None) for i in range(8)])
    code = textwrap.dedent(
        f"""\
        import json, os, sys
        import deltalake, pyarrow as pa
        from ferry.kafka import Cluster, OffsetRange, RangeReader
        from ferry.kafka.reader import arrow_batches

        cluster = Cluster("source", {{"bootstrap.servers": {cluster.bootstrap!r}}})
        with RangeReader(cluster) as reader:
            batches = list(arrow_batches(reader, [OffsetRange({topic!r}, 0, 2, 6)],
                                         ["offset", "value", "sha256"], hash_fields=["value"]))
        table = pa.Table.from_batches(batches)
        deltalake.write_deltalake("delta", table.select(["offset", "value"]))
        back = deltalake.DeltaTable("delta").to_pyarrow_table()
        print(json.dumps({{
            "executable": sys.executable,
            "offsets": table.column("offset").to_pylist(),
            "values": [v.decode() for v in table.column("value").to_pylist()],
            "hashed": all(len(h) == 32 for h in table.column("sha256").to_pylist()),
            "delta_rows": back.num_rows,
            "pyarrow": pa.__file__,
        }}))
        # ended as a job's process ends: the Delta reader's native threads can abort the
        # interpreter's teardown (exit -6 after a finished run), on this node as on others
        from ferry.cli import exit_process
        exit_process(0)
        """
    )
    # the node's python3.11 on PATH, as installed by its administrator
    path = f"{Path(python).parent}:{NODE_PATH}"
    done = in_node(root, container, ["./environment/bin/python", "-c", code],
                   PYTHONPATH="ferry-lib.zip", PATH=path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["executable"] == python  # the node's own interpreter
    assert seen["offsets"] == [2, 3, 4, 5] and seen["values"] == ["v2", "v3", "v4", "v5"]
    assert seen["hashed"] and seen["delta_rows"] == 4
    assert seen["pyarrow"].startswith(f"/{container.relative_to(root)}/environment/lib/")


def test_a_node_without_a_python_it_can_use_gets_one_line(node):
    """bullseye's own python3 is 3.9 (and no python3.11 on PATH): refused before any Python
    starts, in one line."""
    root, _, container = node
    done = in_node(root, container, ["./environment/bin/python", "-c", "print('started')"])
    assert done.returncode == 1 and "started" not in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    floor = (ROOT / "build" / "env" / "bin" / "python").read_text().split("FLOOR=")[1].split()[0]
    assert f"needs glibc {floor} or newer and Python 3.11" in lines[0]
    assert lines[0].endswith("has glibc 2.31 and python3 3.9.2"), lines[0]
    # named outright, bullseye's python3 is refused the same way
    named = in_node(root, container, ["./environment/bin/python", "-c", "print('started')"],
                    FERRY_NODE_PYTHON="/usr/bin/python3")  # fmt: skip
    assert named.returncode == 1 and len(named.stderr.splitlines()) == 1, named.stderr
    assert "(FERRY_NODE_PYTHON=/usr/bin/python3)" in named.stderr


def test_the_build_machines_interpreter_does_not_start_there(node):
    """What `make package` shipped before: this machine's interpreter and its libpython,
    copied. On glibc 2.31 the dynamic loader refuses it (it needs glibc 2.34 or newer)."""
    root, _, container = node
    old = container / "old-env"
    (old / "bin").mkdir(parents=True)
    (old / "lib").mkdir()
    base = Path(sys._base_executable).resolve()  # type: ignore[attr-defined]
    shutil.copy2(base, old / "bin" / "python3")
    for line in subprocess.run(["ldd", base], capture_output=True, text=True).stdout.splitlines():
        if "libpython" in line and "=>" in line:
            shutil.copy2(line.split("=>")[1].split()[0], old / "lib")
    done = in_node(root, container, ["./old-env/bin/python3", "-c", "pass"],
                   LD_LIBRARY_PATH=f"/{container.relative_to(root)}/old-env/lib")  # fmt: skip
    assert done.returncode != 0
    assert "GLIBC_2.3" in done.stderr and "not found" in done.stderr, done.stderr
