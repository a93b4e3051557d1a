"""Loading a config: the YAML file read, `--set a.b=c` overrides applied (the value read as
YAML), `${VAR}` expanded from the environment (`$${VAR}` is a literal `${VAR}`; a missing
variable is an error naming it), then validated (`ferry.config.validate`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ferry.config.model import CLUSTER_SECTIONS, FerryConfig
from ferry.config.model import require as require_present
from ferry.config.validate import build
from ferry.errors import ConfigError

_VAR = re.compile(r"\$\$\{([^}]*)\}|\$\{([^}]*)\}")


def _expand(value: Any, path: str, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match) -> str:
            if m.group(1) is not None:
                return "${" + m.group(1) + "}"
            name = m.group(2)
            if name not in env:
                raise ConfigError(f"environment variable {name} is not set (used by {path})")
            return env[name]

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, f"{path}.{k}" if path else str(k), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    return value


def parse_set(expr: str) -> tuple[list[str], object]:
    """`a.b=c` → (["a", "b"], c); inside a cluster section the rest is one librdkafka key."""
    if "=" not in expr:
        raise ConfigError(f"--set {expr!r} must look like key=value")
    key, raw = expr.split("=", 1)
    parts = key.strip().split(".")
    if parts[0] in CLUSTER_SECTIONS and len(parts) > 1:
        parts = [parts[0], ".".join(parts[1:])]
    if not all(parts):
        raise ConfigError(f"--set {expr!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def load_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> FerryConfig:
    """Read, override, expand and validate a config file (None: overrides only)."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or "invalid YAML"
            raise ConfigError(f"{p}{where}: {problem}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections")
        data = loaded or {}
    for expr in overrides:
        parts, value = parse_set(expr)
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {expr!r}: {part} is not a section")
        node[parts[-1]] = value
    data = _expand(data, "", os.environ if env is None else env)
    return build(data)


# The keys naming Delta tables. In cluster deploy mode (spark-submit.sh says so in
# $FERRY_DEPLOY_MODE) the driver runs in a container whose disk goes with it, so a table a job
# opens there must be on shared storage. Only the tables the job itself opens are looked at
# (`require`, `require_shared`): `migrate` with the shipped config, whose audit.path is an
# example path on local disk, is not refused for a table only `audit` writes.
TABLES = ("ledger.path", "history.path", "history.status_path", "audit.path",
          "offsets.commits_path", "offsets.groups_path", "offsets.quarantine_path")  # fmt: skip


def require(cfg: FerryConfig, *keys: str, env: Mapping[str, str] | None = None) -> None:
    """Fail with the first missing key among the dotted `keys`; in cluster deploy mode also
    with the first table among them that is on the driver's local disk."""
    require_present(cfg, *keys)
    require_shared(cfg, *(k for k in keys if k in TABLES), env=env)


def require_shared(cfg: FerryConfig, *tables: str, env: Mapping[str, str] | None = None) -> None:
    """In cluster deploy mode, fail with the first of `tables` (keys such as "audit.path")
    that is set and names the driver's local disk: a table the job opens, optional ones too."""
    env = os.environ if env is None else env
    if env.get("FERRY_DEPLOY_MODE") != "cluster":
        return
    for name in tables:
        section, key = name.split(".")
        path = getattr(getattr(cfg, section, None), key, None)
        if path and (":" not in path.split("/", 1)[0] or path.startswith("file:")):
            raise ConfigError(
                f"{name} {path} is on the driver's local disk, which in cluster deploy mode "
                "is a container's and is gone when the application ends; name shared "
                "storage (hdfs://..., s3a://...)"
            )
