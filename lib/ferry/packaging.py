"""Build what spark-submit.sh ships to a cluster, each file atomically (unique temporary name,
then rename), so any number of jobs can build and start from one checkout at once.

    python lib/ferry/packaging.py lib      build/ferry-lib.zip: lib/ferry for --py-files
    python lib/ferry/packaging.py env      build/env/ and build/ferry-env.tar.gz (--archives
                                           ...#environment), build/driver-python
    python lib/ferry/packaging.py floor    the glibc floor of build/env (ELF version needs)
    python lib/ferry/packaging.py publish DIR [--print]
                                           put build/ferry-env.tar.gz on a Hadoop filesystem
                                           as DIR/ferry-env-<sha256>.tar.gz unless it is
                                           there already; print its URI (--print: only that)

Run as a script by `make package` and spark-submit.sh (only `publish` imports Ferry's own
ferry.result, for Hadoop's FsShell).

The environment runs on the node's own Python (docs/cluster.md, "What the nodes need"): it
holds Ferry's runtime packages as manylinux wheels for glibc 2.28 (RHEL 8) and newer, one
site directory per Python minor packed (the driver's, plus FERRY_PYTHONS), and bin/python, a
launcher that starts the node's python3.X with them, or says in one line why it cannot. An
interpreter of its own was tried first: copied from the build machine it needs that machine's
glibc (2.35 on Debian 12), and no interpreter built for an older glibc can be fetched here.
PySpark itself is not packed: Spark puts its own pyspark.zip and py4j on the workers' path.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as md
import os
import py_compile
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
LIB_ZIP = BUILD / "ferry-lib.zip"
ENV_DIR = BUILD / "env"
ENV_ARCHIVE = BUILD / "ferry-env.tar.gz"
ENV_SHA256 = BUILD / "ferry-env.tar.gz.sha256"
UNBUILT = "unbuilt"  # in a printed URI, for an archive `make package` has not built yet
ENV_FLOOR = BUILD / "ferry-env.floor"
DRIVER_PYTHON = BUILD / "driver-python"
# The oldest glibc the environment may need: RHEL 8's. Wheels are chosen for it (pip's
# --platform) and the packed files are checked against it (`glibc_floor`).
GLIBC_LIMIT = (2, 28)
# The Python driver of a client-mode job that ships its environment (see spark-submit.sh): the
# driver JVM runs in build/client, where ./environment/bin/python resolves for the Python
# workers it starts itself (data source planning); the job's own relative paths, such as
# --config conf/migrate.yaml, are the caller's.
DRIVER_PYTHON_SCRIPT = """#!/bin/sh
cd "$FERRY_CALLER_CWD" || exit 2
exec "$FERRY_DRIVER_PYTHON" "$@"
"""
# Provided on the nodes by Spark itself (pyspark.zip, the delta-spark jars).
NOT_SHIPPED = {"pyspark", "delta-spark"}
# bin/python of the environment (POSIX sh: it runs before any Python is known to work), with
# its @FLOOR@ and @PYTHONS@ filled in by `_write_launcher`.
LAUNCHER = Path(__file__).with_name("env_python.sh")


def _temp_path(target: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    return Path(name)


def _write_atomically(target: Path, text: str, mode: int = 0o644) -> None:
    tmp = _temp_path(target)
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, target)


# What tests, `make demo` and the benchmarks stand on: no job imports it, so it stays home.
NOT_ZIPPED = ("ferry/testing/", "ferry/demo.py")


def build_lib_zip() -> Path:
    """Zip lib/ferry's Python files (less NOT_ZIPPED), each beside its bytecode for this
    Python; concurrent builders each write their own file.

    Python never writes bytecode into a zip it imports from: without it, every job's driver
    and every Python worker compiled the whole library again (0.5-0.8 s a driver). The
    bytecode is checked against its source by hash, not by time (a zip keeps times to two
    seconds); a Python of another version ignores it and compiles the source."""
    BUILD.mkdir(exist_ok=True)
    tmp = _temp_path(LIB_ZIP)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted((ROOT / "lib" / "ferry").rglob("*.py")):
                name = path.relative_to(ROOT / "lib").as_posix()
                if not name.startswith(NOT_ZIPPED):
                    zf.write(path, name)
                    zf.writestr(name + "c", _bytecode(path, LIB_ZIP / name))
        tmp.chmod(0o644)
        os.replace(tmp, LIB_ZIP)
    finally:
        tmp.unlink(missing_ok=True)
    return LIB_ZIP


def _bytecode(source: Path, shown_as: Path) -> bytes:
    """A .pyc of `source` checked by its source's hash (`shown_as`: the file named in
    tracebacks, as if compiled from the zip)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "module.pyc"
        mode = py_compile.PycInvalidationMode.CHECKED_HASH
        py_compile.compile(str(source), str(out), str(shown_as), True, invalidation_mode=mode)
        return out.read_bytes()


def runtime_requirements() -> list[str]:
    """Ferry's install_requires minus what Spark provides, pinned to the versions installed
    here, so executors run the same pyarrow/pandas the driver does."""
    pins = {d.metadata["Name"].lower(): d.version for d in md.distributions()}
    out = []
    for req in md.requires("ferry") or []:
        if "extra ==" in req:
            continue
        name = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower()
        if name not in NOT_SHIPPED:
            out.append(f"{name}=={pins[name]}" if name in pins else req.split(";")[0])
    return out


def _constraints(path: Path) -> None:
    """Every installed distribution's version, so transitive dependencies match the driver's."""
    lines = [
        f"{d.metadata['Name']}=={d.version}"
        for d in md.distributions()
        if d.metadata["Name"] and d.metadata["Name"].lower() != "ferry"
    ]
    path.write_text("\n".join(sorted(set(lines))) + "\n")


def manylinux_platforms(limit: tuple[int, int] = GLIBC_LIMIT) -> list[str]:
    """pip --platform values for wheels that run on glibc `limit` and newer: pip takes a
    manylinux_2_28 tag literally, so every older tag is named too."""
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(limit[1], 4, -1)]
    return [*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


def python_minors() -> list[str]:
    """The Python minors to pack for: the driver's first, then FERRY_PYTHONS ("3.12 3.13")."""
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    extra = re.split(r"[\s,]+", os.environ.get("FERRY_PYTHONS", "").strip())
    return list(dict.fromkeys([own, *(v for v in extra if v)]))


def _install_site(site: Path, minor: str, constraints: Path) -> None:
    """Ferry's runtime packages for CPython `minor` on manylinux, into `site` (no
    interpreter needed: pip picks the wheels by tag)."""
    platforms = [arg for tag in manylinux_platforms() for arg in ("--platform", tag)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--target", site, "--only-binary=:all:", "--implementation", "cp",
         "--python-version", minor, *platforms, "-c", constraints, *runtime_requirements()],
        check=True,
    )  # fmt: skip
    # Console scripts: their shebang lines name this build directory.
    shutil.rmtree(site / "bin", ignore_errors=True)


# ---- The glibc floor: the newest GLIBC_x.y version any packed ELF file needs.
SHT_GNU_VERNEED = 0x6FFFFFFE


def _elf_version_needs(path: Path) -> set[str]:
    """The symbol versions an ELF file needs from its libraries (its .gnu.version_r section),
    read without binutils; empty for anything but a 64-bit little-endian ELF file."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return set()
        shoff, shentsize, shnum = (
            struct.unpack_from("<Q", head, 0x28)[0],
            *struct.unpack_from("<HH", head, 0x3A),
        )
        if shoff == 0 or shnum == 0:
            return set()
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        needs: set[str] = set()
        for _, kind, _, _, offset, size, link, count, _, _ in sections:
            if kind != SHT_GNU_VERNEED:
                continue
            f.seek(offset)
            data = f.read(size)
            strtab = sections[link]
            f.seek(strtab[4])
            strings = f.read(strtab[5])
            pos = 0
            for _ in range(count):
                _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, pos)
                apos = pos + aux
                for _ in range(cnt):
                    _, _, _, name, anext = struct.unpack_from("<IHHII", data, apos)
                    needs.add(strings[name : strings.index(b"\0", name)].decode())
                    apos += anext
                pos += nxt
        return needs


def glibc_floor(env: Path) -> tuple[tuple[int, int], Path | None]:
    """The newest glibc version (major, minor) a file under `env` needs, and that file."""
    floor: tuple[int, int] = (2, 2)
    needer = None
    for path in sorted(env.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        for name in _elf_version_needs(path):
            found = re.match(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?$", name)
            if found and (int(found[1]), int(found[2])) > floor:
                floor, needer = (int(found[1]), int(found[2])), path
    return floor, needer


def _write_launcher(env: Path, floor: tuple[int, int], minors: list[str]) -> None:
    text = (
        LAUNCHER.read_text()
        .replace("@FLOOR@", f"{floor[0]}.{floor[1]}")
        .replace("@PYTHONS@", " ".join(minors))
    )
    (env / "bin").mkdir(parents=True, exist_ok=True)
    launcher = env / "bin" / "python"
    launcher.write_text(text)
    launcher.chmod(0o755)
    (env / "bin" / "python3").symlink_to("python")


def _check(env: Path) -> None:
    """The environment imports every runtime package from itself, with this machine's
    interpreter standing in for the node's."""
    code = (
        "import sys, confluent_kafka, pyarrow, yaml, deltalake, pandas\n"
        "mods = (confluent_kafka, pyarrow, yaml, deltalake, pandas)\n"
        f"outside = [m.__name__ for m in mods if not m.__file__.startswith({str(env)!r})]\n"
        "assert not outside, outside\n"
    )
    clean = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "FERRY_NODE_PYTHON": sys._base_executable,  # type: ignore[attr-defined]
    }
    subprocess.run([env / "bin" / "python", "-c", code], check=True, env=clean)


def build_env() -> Path:
    """Build build/env and build/ferry-env.tar.gz from scratch under temporary names; one
    builder at a time, since build/env is a directory and cannot be swapped atomically."""
    BUILD.mkdir(exist_ok=True)
    with open(BUILD / ".env.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_env()


def _build_env() -> Path:
    work = Path(tempfile.mkdtemp(prefix=".env.", dir=BUILD))
    try:
        env = work / "env"
        _constraints(work / "constraints.txt")
        minors = python_minors()
        for minor in minors:
            _install_site(env / "lib" / f"python{minor}" / "site-packages", minor,
                          work / "constraints.txt")  # fmt: skip
        floor, needer = glibc_floor(env)
        if floor > GLIBC_LIMIT:
            sys.exit(f"error: {needer} needs glibc {floor[0]}.{floor[1]}, above the floor "
                     f"{GLIBC_LIMIT[0]}.{GLIBC_LIMIT[1]} Ferry's environment keeps")  # fmt: skip
        _write_launcher(env, floor, minors)
        _check(env)
        tmp = _temp_path(ENV_ARCHIVE)
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
            for path in sorted(env.rglob("*")):
                tar.add(path, path.relative_to(env).as_posix(), recursive=False)
        tmp.chmod(0o644)
        # The unpacked copy serves the driver's own Python workers in client mode.
        old = work / "old"
        if ENV_DIR.exists():
            ENV_DIR.rename(old)
        env.rename(ENV_DIR)
        _write_atomically(ENV_SHA256, _sha256(tmp) + "\n")
        _write_atomically(ENV_FLOOR, _floor_line(floor, needer, minors, env_dir=ENV_DIR))
        os.replace(tmp, ENV_ARCHIVE)
        _write_atomically(DRIVER_PYTHON, DRIVER_PYTHON_SCRIPT, 0o755)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ENV_ARCHIVE


def _floor_line(
    floor: tuple[int, int], needer: Path | None, minors: list[str], env_dir: Path
) -> str:
    where = f" (needed by {needer.name})" if needer else ""
    return (
        f"nodes need: glibc {floor[0]}.{floor[1]} or newer{where} and their own Python "
        f"{' or '.join(minors)} (python3.X on PATH)\n"
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---- Uploaded once per content: a hash-named copy on the cluster's filesystem.
def _default_fs() -> str | None:
    """fs.defaultFS from $HADOOP_CONF_DIR/core-site.xml (or $YARN_CONF_DIR's)."""
    import xml.etree.ElementTree as ET

    for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        site = Path(os.environ.get(var, "/nonexistent")) / "core-site.xml"
        if site.is_file():
            for prop in ET.parse(site).getroot().iter("property"):
                if prop.findtext("name") == "fs.defaultFS":
                    return (prop.findtext("value") or "").strip().rstrip("/") or None
    return None


def published_uri(archive: Path, directory: str, strict: bool = True) -> tuple[str, str]:
    """(DIR, DIR/ferry-env-<sha256>.tar.gz), DIR qualified with the cluster's default
    filesystem when it has no scheme (spark-submit would take it for a local path)."""
    if "://" not in directory:
        default = _default_fs()
        if default is not None:
            directory = default + "/" + directory.lstrip("/")
        elif strict:
            raise RuntimeError(f"{directory} has no scheme and no fs.defaultFS was found "
                               "in $HADOOP_CONF_DIR/core-site.xml")  # fmt: skip
    sha = ENV_SHA256.read_text().strip() if archive == ENV_ARCHIVE and ENV_SHA256.is_file() else ""
    if not sha and not strict and not archive.is_file():
        sha = UNBUILT  # --print-command before `make package`: the name a build will give it
    directory = directory.rstrip("/")
    return directory, f"{directory}/ferry-env-{sha or _sha256(archive)}.tar.gz"


def publish(archive: Path, directory: str) -> str:
    """The URI of `archive` on a Hadoop filesystem, DIR/ferry-env-<sha256>.tar.gz, uploaded
    only when missing. A directory without a scheme is on the cluster's default filesystem.
    Concurrent submits may both upload; each writes a temporary name and renames it."""
    sys.path.insert(0, str(ROOT / "lib"))
    from ferry.result import fs_shell

    directory, uri = published_uri(archive, directory)
    if fs_shell("-test", "-e", uri).returncode == 0:
        return uri
    print(f"uploading the Python environment to {uri} (once per content) ...", file=sys.stderr)
    tmp = f"{directory}/.ferry-env.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    for args in (("-mkdir", "-p", directory), ("-put", "-d", str(archive), tmp)):
        done = fs_shell(*args, timeout_s=900)
        if done.returncode != 0:
            raise RuntimeError(f"hadoop fs {args[0]} failed: {_last_line(done.stderr)}")
    moved = fs_shell("-mv", tmp, uri)
    if moved.returncode != 0:  # another submit got there first: its copy is the same bytes
        fs_shell("-rm", "-f", "-skipTrash", tmp)
        if fs_shell("-test", "-e", uri).returncode != 0:
            raise RuntimeError(f"hadoop fs -mv failed: {_last_line(moved.stderr)}")
    return uri


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def main(argv: list[str]) -> int:
    if argv == ["lib"]:
        build_lib_zip()
    elif argv == ["env"]:
        archive = build_env()
        # `make package` states the floor (build/ferry-env.floor) on every run
        print(f"built {archive.relative_to(ROOT)} ({archive.stat().st_size / 2**20:.0f} MiB)")
    elif argv == ["floor"]:
        floor, needer = glibc_floor(ENV_DIR)
        print(f"{floor[0]}.{floor[1]}" + (f" {needer}" if needer else ""))
    elif len(argv) == 3 and argv[0] == "publish" and argv[2] == "--print":
        print(published_uri(ENV_ARCHIVE, argv[1], strict=False)[1])
    elif len(argv) == 2 and argv[0] == "publish":
        try:
            print(publish(ENV_ARCHIVE, argv[1]))
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"error: could not put the Python environment on {argv[1]}: {exc}",
                  file=sys.stderr)  # fmt: skip
            return 1
    else:
        print(
            "usage: python lib/ferry/packaging.py lib|env|floor|publish DIR [--print]",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
