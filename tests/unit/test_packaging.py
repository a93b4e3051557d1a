"""lib/ferry/packaging.py's pure parts: the ELF version-needs reader (against binutils'
readelf), the glibc floor, the wheel platforms, and the environment's launcher (bin/python) run
with stand-in interpreters and a stand-in getconf."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    # lib/ferry/packaging.py runs as a script (its name is PyPI's `packaging`'s): load it by path
    spec = importlib.util.spec_from_file_location(
        "ferry_packaging_under_test", ROOT / "lib" / "ferry" / "packaging.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


packaging = _load()
HOST_PYTHON = Path(sys._base_executable).resolve()  # type: ignore[attr-defined]


def _native_files() -> list[Path]:
    import pyarrow
    import yaml

    files = [HOST_PYTHON, *Path(pyarrow.__file__).parent.glob("*.so*")]
    files += list(Path(yaml.__file__).parent.glob("*.so"))
    return [f for f in files if f.is_file()][:6]


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils' readelf is not installed")
def test_version_needs_read_as_readelf_reads_them():
    for path in _native_files():
        out = subprocess.run(["readelf", "-V", "--wide", str(path)], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        section = out.split("Version needs section", 1)[1] if "Version needs" in out else ""
        want = set(re.findall(r"Name: (\S+)\s+Flags", section))
        assert packaging._elf_version_needs(path) == want, path
    assert packaging._elf_version_needs(Path(__file__)) == set()  # not an ELF file


def test_the_floor_is_the_newest_glibc_any_file_needs(tmp_path):
    """This machine's interpreter needs a newer glibc than RHEL 8's: what `make package`
    refuses to pack (and what the previous package shipped)."""
    (tmp_path / "bin").mkdir()
    shutil.copy2(HOST_PYTHON, tmp_path / "bin" / "python")
    (tmp_path / "README").write_text("GLIBC_9.99 in a text file is no need\n")
    floor, needer = packaging.glibc_floor(tmp_path)
    host = os.confstr("CS_GNU_LIBC_VERSION").split()[1]
    assert (2, 28) < floor <= tuple(int(x) for x in host.split(".")[:2])
    assert needer == tmp_path / "bin" / "python"
    assert packaging.glibc_floor(tmp_path / "README") == ((2, 2), None)


def test_wheels_are_asked_for_glibc_2_28_and_older_tags():
    tags = packaging.manylinux_platforms()
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in tags
    assert "manylinux2014_x86_64" in tags and "manylinux_2_29_x86_64" not in tags
    newer = [t for t in tags if (m := re.match(r"manylinux_2_(\d+)_", t)) and int(m[1]) > 28]
    assert newer == []


# ---- The launcher, with stand-ins for the node's interpreters and its getconf.
def _env(tmp_path: Path, floor: str = "2.28", minors: tuple[str, ...] = ("3.11",)) -> Path:
    env = tmp_path / "environment"
    packaging._write_launcher(env, tuple(int(x) for x in floor.split(".")), list(minors))
    return env


def _stand_in(folder: Path, name: str, text: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + text)
    (folder / name).chmod(0o755)


def _python(folder: Path, name: str, minor: str) -> None:
    """A python3.X that answers its version and otherwise reports how it was started."""
    _stand_in(folder, name, (
        'case "$*" in *version_info*) echo ' + minor + "; exit 0;; esac\n"
        f'echo "{name} $* PYTHONPATH=$PYTHONPATH NOUSER=$PYTHONNOUSERSITE"\n'
    ))  # fmt: skip


def _run(env: Path, path: Path, **extra: str) -> subprocess.CompletedProcess:
    """The launcher with PATH = the stand-ins and the few tools it uses (this machine's own
    python3.X stay out of sight)."""
    tools = path.parent / "tools"
    if not tools.is_dir():
        tools.mkdir()
        for tool in ("dirname", "sed", "getconf", "hostname", "ldd"):
            if shutil.which(tool):
                (tools / tool).symlink_to(shutil.which(tool))
    environ = {"PATH": f"{path}:{tools}", "PYTHONPATH": "spark.zip", **extra}
    for name in ("FERRY_NODE_PYTHON", "FERRY_PYTHON_MINOR"):
        environ.setdefault(name, "")
    environ = {k: v for k, v in environ.items() if v != ""}
    return subprocess.run([str(env / "bin" / "python"), "-m", "pyspark.daemon"],
                          capture_output=True, text=True, env=environ, check=False)  # fmt: skip


def test_the_launcher_starts_the_nodes_python_with_the_packed_site(tmp_path):
    env = _env(tmp_path, minors=("3.11", "3.12"))
    node = tmp_path / "node"
    _python(node, "python3.11", "3.11")
    _python(node, "python3.12", "3.12")
    done = _run(env, node)
    assert done.returncode == 0, done.stderr
    site = f"{env.resolve()}/lib/python3.11/site-packages"
    want = f"python3.11 -m pyspark.daemon PYTHONPATH={site}:spark.zip NOUSER=1"
    assert done.stdout.strip() == want
    # the driver's minor first (PySpark refuses workers of another minor)
    assert _run(env, node, FERRY_PYTHON_MINOR="3.12").stdout.startswith("python3.12 -m")
    # an interpreter named outright, checked for its minor
    chosen = _run(env, node, FERRY_NODE_PYTHON=str(node / "python3.12"))
    assert chosen.stdout.startswith("python3.12 -m")
    assert "/python3.12/site-packages" in chosen.stdout


def test_the_launcher_refuses_in_one_line_naming_glibc_python_and_the_floor(tmp_path):
    env = _env(tmp_path)
    node = tmp_path / "node"
    _python(node, "python3", "3.9")  # bullseye's
    done = _run(env, node)
    assert done.returncode == 1 and done.stdout == ""
    host = os.confstr("CS_GNU_LIBC_VERSION").split()[1]
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        "error: Ferry's environment needs glibc 2.28 or newer and Python 3.11"
    )
    assert f"has glibc {host} and python3 3.9" in lines[0]
    # a python3 of the right minor will do when python3.11 is not on PATH
    _python(node, "python3", "3.11")
    assert _run(env, node).stdout.startswith("python3 -m pyspark.daemon")
    # an older glibc than the floor: refused even with the right Python, glibc named
    _stand_in(node, "getconf", 'echo "glibc 2.17"\n')
    old = _run(env, node)
    assert old.returncode == 1 and "has glibc 2.17" in old.stderr
    assert len(old.stderr.splitlines()) == 1
    # a named interpreter of the wrong minor
    (node / "getconf").unlink()
    _python(node, "python3.9", "3.9")
    wrong = _run(env, node, FERRY_NODE_PYTHON=str(node / "python3.9"))
    assert wrong.returncode == 1 and f"FERRY_NODE_PYTHON={node}/python3.9" in wrong.stderr


def test_python_minors_start_with_the_drivers(monkeypatch):
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    monkeypatch.setenv("FERRY_PYTHONS", f"3.12, 3.13 {own}")
    assert packaging.python_minors() == [own, "3.12", "3.13"]
    monkeypatch.delenv("FERRY_PYTHONS")
    assert packaging.python_minors() == [own]


def test_the_hash_named_copy_is_on_the_clusters_default_filesystem(tmp_path, monkeypatch):
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"not really an archive")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name>"
        "<value>hdfs://nn:8020/</value></property></configuration>"
    )
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    assert packaging.published_uri(archive, "/user/u/.ferry/env/") == (
        "hdfs://nn:8020/user/u/.ferry/env",
        f"hdfs://nn:8020/user/u/.ferry/env/ferry-env-{sha}.tar.gz",
    )
    s3 = packaging.published_uri(archive, "s3a://b/env")[1]
    assert s3 == f"s3a://b/env/ferry-env-{sha}.tar.gz"
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path / "none"))
    with pytest.raises(RuntimeError, match="no fs.defaultFS"):
        packaging.published_uri(archive, "/user/u/env")
