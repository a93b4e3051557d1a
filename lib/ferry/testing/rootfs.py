"""A root filesystem of an older Linux node for the shipped environment's tests: Debian
bullseye (glibc 2.31, python3 3.9), made with `debootstrap` from Debian's mirror and kept under
~/.cache/ferry (FERRY_CACHE) so it is built once per machine.

Ferry's environment runs on the node's own Python 3.10+ (lib/ferry/packaging.py), and bullseye
has none: like an administrator of such nodes, `node_python()` builds CPython from source inside
the root filesystem, against its glibc 2.31 (the source is Debian's python3.X package at the
version this machine runs, fetched with `apt-get source`), installed as /opt/python3.X. Nothing
of this machine's interpreter or libraries goes in.

    python -m ferry.testing.rootfs        build both (as root), print the root filesystem

Needs root (debootstrap, chroot) and the debootstrap package (`make test-slow` installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ferry.testing.artifacts import cache_root

SUITE = "bullseye"
MIRROR = os.environ.get("FERRY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# What building CPython with ssl, ctypes, sqlite3, lzma, bz2, zlib and uuid needs.
BUILD_PACKAGES = ("build-essential", "libssl-dev", "libffi-dev", "zlib1g-dev", "libbz2-dev",
                  "liblzma-dev", "libsqlite3-dev", "uuid-dev", "python3")  # fmt: skip
SOURCE_SUITE = "bookworm"  # the suite whose python3.X source package is built


def rootfs() -> Path:
    """The bullseye root filesystem, made once (under a temporary name, then renamed)."""
    target = cache_root() / f"rootfs-{SUITE}"
    if (target / ".ferry-ready").is_file():
        return target
    if os.geteuid() != 0:
        raise RuntimeError("building the test root filesystem needs root (debootstrap)")
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is missing (apt-get install debootstrap)")
    work = Path(tempfile.mkdtemp(prefix=f".rootfs-{SUITE}.", dir=cache_root()))
    try:
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BUILD_PACKAGES)}",
             SUITE, str(work), MIRROR],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        (work / ".ferry-ready").write_text(f"{SUITE} from {MIRROR}\n")
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _cpython_source(minor: str, into: Path) -> Path:
    """Debian's python3.X source package, downloaded with apt-get from a private source list
    (this machine's apt configuration is left alone); returns the upstream tarball."""
    lists = into / "apt"
    (lists / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (lists / "sources.list").write_text(f"deb-src {MIRROR} {SOURCE_SUITE} main\n")
    opts = [
        "-o", f"Dir::Etc::SourceList={lists / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=-",
        "-o", f"Dir::State::Lists={lists / 'lists'}",
        "-o", "APT::Get::List-Cleanup=0",
    ]  # fmt: skip
    subprocess.run(["apt-get", *opts, "update", "-q"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(
        ["apt-get", *opts, "source", "--download-only", "-q", f"python{minor}"],
        check=True, cwd=into, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    tarballs = sorted(into.glob(f"python{minor}_*.orig.tar.*"))
    if not tarballs:
        raise RuntimeError(f"apt-get source python{minor} brought no upstream tarball")
    return tarballs[-1]


def node_python(minor: str = f"{sys.version_info.major}.{sys.version_info.minor}") -> str:
    """/opt/pythonX.Y/bin/pythonX.Y inside the root filesystem: CPython built there from
    source, once. Returns its path inside the root filesystem."""
    root = rootfs()
    inside = f"/opt/python{minor}/bin/python{minor}"
    stamp = root / f"opt/.python{minor}-ready"
    if stamp.is_file():
        return inside
    src = root / "usr" / "src"
    shutil.rmtree(src / f"python{minor}", ignore_errors=True)
    (src / f"python{minor}").mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="cpython-src.") as tmp:
        tarball = _cpython_source(minor, Path(tmp))
        subprocess.run(["tar", "-xf", tarball, "-C", src / f"python{minor}",
                        "--strip-components=1"], check=True)  # fmt: skip
    script = (
        f"cd /usr/src/python{minor} && ./configure -q --prefix=/opt/python{minor} "
        "--without-ensurepip >/dev/null && make -s -j2 >/dev/null 2>&1 && "
        "make -s altinstall >/dev/null 2>&1"
    )
    chroot(root, ["sh", "-c", script], check=True)
    shutil.rmtree(src / f"python{minor}", ignore_errors=True)
    stamp.write_text("built\n")
    return inside


@contextmanager
def proc_mounted(root: Path) -> Iterator[None]:
    """/proc inside the root filesystem while in use, as every node has it: the dynamic loader
    reads /proc/self/exe to resolve $ORIGIN, which the wheels' libraries use to find the
    libraries packed beside them."""
    if (root / "proc" / "self").exists():
        yield
        return
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(root / "proc")], check=False)


def chroot(root: Path, argv: list[str], **kwargs) -> subprocess.CompletedProcess:  # noqa: ANN003
    """Run argv inside the root filesystem with a plain environment."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/root", "LANG": "C"}
    env.update(kwargs.pop("env", {}))
    chroot_bin = shutil.which("chroot") or "/usr/sbin/chroot"
    return subprocess.run([chroot_bin, str(root), *argv], env=env, **kwargs)


def main() -> int:
    python = node_python()
    print(f"{rootfs()} (node Python {python})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
