"""What a job on a non-local master needs shipped with it, and the arguments that name the
shipped copies (spark-submit.sh runs this before every non-local submit).

- Client properties that name files librdkafka opens (`FILE_PROPERTIES`), in any cluster
  section of the config or in a `--set`: a value that is a file here is shipped with
  `--files` and rewritten to the file's name. Executors (on every non-local master) and a
  cluster-mode driver find `--files` in their working directory under that name; a
  client-mode driver runs here and is told where the originals are (`$FERRY_SHIPPED_FILES`,
  read by `ferry.shipped.local_paths`). A value that is not a file here (a path inside the
  nodes' image, `probe`, a directory) is left as is: it must exist on every node.
- Cluster deploy mode: the config file itself (a rewritten copy when a property was
  rewritten) and a `groups reset --from-file` CSV are shipped too, and the job is handed their
  names, so `--config conf/migrate.yaml` works as typed.

Every name shipped with `--files` must be unique, the user's own `--files` included: two
files with one name are an error naming both. A rewritten config is written under
`build/ship/<hash of its content>/` (atomically; the same config always gives the same path,
so scheduled runs do not pile up copies).

    python -m ferry.shipping --deploy-mode client|cluster --stage DIR [--files LIST] -- ARGS...

prints, NUL-separated: the `--files` list to add (may be empty), the `$FERRY_SHIPPED_FILES`
value (client mode; may be empty), then the job's arguments.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ferry.shipped import FILE_PROPERTIES

_VAR = re.compile(r"\$\$\{([^}]*)\}|\$\{([^}]*)\}")  # `${VAR}` as ferry.config expands it


class ShippingError(ValueError):
    """What was asked cannot be shipped: two files under one name."""


@dataclass
class Shipment:
    """What to add to spark-submit: `files` (name → local path) for `--files`, the job's
    arguments naming the shipped copies, and (client mode) the originals of the rewritten
    properties for the driver."""

    files: dict[str, str] = field(default_factory=dict)
    job_args: list[str] = field(default_factory=list)
    driver_files: dict[str, str] = field(default_factory=dict)


class _Names:
    """Every name shipped with --files and where it comes from; a second file under a name
    already taken is an error naming both."""

    def __init__(self, user_files: str) -> None:
        self.taken: dict[str, str] = {}
        for entry in (e.strip() for e in user_files.split(",")):
            if entry:
                path, _, alias = entry.partition("#")
                self.take(alias or path.rstrip("/").rsplit("/", 1)[-1], path, "--files")

    def take(self, name: str, path: str, what: str) -> None:
        other = self.taken.get(name)
        if other is not None and _same_file(other, path):
            return
        if other is not None:
            raise ShippingError(
                f"{what} {path} and {other} would both be shipped as {name}; "
                "rename one of them"
            )
        self.taken[name] = path

    def ship(self, path: str, what: str) -> str:
        local = str(Path(path).resolve())
        name = Path(local).name
        self.take(name, local, what)
        return name


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b


def _expanded(value: str, env: Mapping[str, str]) -> str | None:
    """`${VAR}`s filled from `env`, or None when one is not set here."""
    missing = False

    def sub(m) -> str:  # noqa: ANN001 - re.Match
        nonlocal missing
        if m.group(1) is not None:
            return "${" + m.group(1) + "}"
        if m.group(2) not in env:
            missing = True
            return ""
        return env[m.group(2)]

    out = _VAR.sub(sub, value)
    return None if missing else out


def _ship_property(
    names: _Names, value: object, what: str, env: Mapping[str, str], shipped: dict[str, str]
) -> object:
    """The value a file property gets: the shipped name when it is a file here."""
    if not isinstance(value, str):
        return value
    path = _expanded(value, env)
    if path is None or not Path(path).is_file():
        return value
    name = names.ship(path, what)
    shipped[name] = str(Path(path).resolve())
    return name


def _option(args: Sequence[str], i: int, name: str) -> tuple[str | None, int]:
    """The value of `name` at args[i] (`--name V` or `--name=V`) and how many args it took."""
    arg = args[i]
    if arg == name and i + 1 < len(args):
        return args[i + 1], 2
    if arg.startswith(name + "="):
        return arg[len(name) + 1 :], 1
    return None, 0


def plan_shipment(
    job_args: Sequence[str],
    deploy_mode: str,
    stage_dir: Path,
    user_files: str = "",
    env: Mapping[str, str] | None = None,
) -> Shipment:
    """What to ship for a job with these arguments on a non-local master."""
    import yaml

    from ferry.config import CLUSTER_SECTIONS

    env = os.environ if env is None else env
    names = _Names(user_files)
    out = Shipment()
    shipped: dict[str, str] = {}  # file properties: shipped name → original
    config_at: int | None = None
    config_path: str | None = None
    args: list[str] = []
    i = 0
    while i < len(job_args):
        config, used = _option(job_args, i, "--config")
        if config is not None:
            config_at, config_path = len(args), config
            args += ["--config", config]
            i += used
            continue
        expr, used = _option(job_args, i, "--set")
        if expr is not None and "=" in expr:
            key, raw = expr.split("=", 1)
            parts = key.strip().split(".", 1)
            if parts[0] in CLUSTER_SECTIONS and len(parts) > 1 and parts[1] in FILE_PROPERTIES:
                value = yaml.safe_load(raw) if raw.strip() else raw
                new = _ship_property(names, value, f"--set {key}", env, shipped)
                if new is not value:
                    expr = f"{key}={new}"
            args += ["--set", expr]
            i += used
            continue
        csv, used = _option(job_args, i, "--from-file")
        if csv is not None and deploy_mode == "cluster" and Path(csv).is_file():
            args += ["--from-file", names.ship(csv, "--from-file")]
            out.files[args[-1]] = str(Path(csv).resolve())
            i += used
            continue
        args.append(job_args[i])
        i += 1

    # A config that is no file here is one on the driver's node (an image, a ConfigMap).
    if config_path is not None and config_at is not None and Path(config_path).is_file():
        staged = _stage_config(config_path, names, env, shipped, stage_dir)
        if deploy_mode == "cluster":
            local = staged or str(Path(config_path).resolve())
            name = Path(config_path).name
            names.take(name, local, "--config")
            out.files[name] = local
            args[config_at + 1] = name
        elif staged is not None:
            args[config_at + 1] = staged
    out.files.update(shipped)
    out.job_args = args
    if deploy_mode != "cluster":
        out.driver_files = dict(shipped)
    return out


def _stage_config(
    path: str, names: _Names, env: Mapping[str, str], shipped: dict[str, str], stage_dir: Path
) -> str | None:
    """A copy of the config with its file properties naming shipped copies, or None when no
    property names a file here."""
    import yaml

    from ferry.config import CLUSTER_SECTIONS

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None  # shipped as it is: the job reports the problem as it always does
    if not isinstance(data, dict):
        return None
    changed = False
    for section in CLUSTER_SECTIONS:
        props = data.get(section)
        if not isinstance(props, dict):
            continue
        for key in FILE_PROPERTIES:
            if key in props:
                new = _ship_property(names, props[key], f"{section}.{key}", env, shipped)
                changed |= new is not props[key]
                props[key] = new
    if not changed:
        return None
    text = (
        f"# {Path(path).resolve()} as shipped by spark-submit.sh: file properties name the\n"
        "# copies shipped with --files\n" + yaml.safe_dump(data, sort_keys=False)
    )
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    target = stage_dir / digest / Path(path).name
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, target)
    return str(target)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="ferry.shipping")
    parser.add_argument("--deploy-mode", choices=("client", "cluster"), required=True)
    parser.add_argument("--stage", required=True)
    parser.add_argument("--files", default="")
    parser.add_argument("job_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    job_args = args.job_args[1:] if args.job_args[:1] == ["--"] else args.job_args
    try:
        plan = plan_shipment(job_args, args.deploy_mode, Path(args.stage), args.files)
    except ShippingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fields_ = [
        ",".join(plan.files.values()),
        json.dumps(plan.driver_files) if plan.driver_files else "",
        *plan.job_args,
    ]
    sys.stdout.write("\0".join(fields_) + "\0")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
