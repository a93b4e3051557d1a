"""`lag-status -o json`: evaluated status rows as Burrow's HTTP answers, one
`/v3/kafka/(cluster)/consumer/(group)/status` (or `/lag`) response per group. Plain functions
over rows: no Spark here.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ferry.status import LagStatus


def burrow_responses(
    status_rows: Iterable[Mapping[str, Any]], show_all: bool = False, host: str | None = None
) -> list[dict]:
    """One Burrow `/v3/kafka/(cluster)/consumer/(group)/status` answer per group, from status
    rows (STATUS_SCHEMA dicts, times as datetimes or epoch ms). Like Burrow, `partitions`
    lists only partitions that are not OK unless `show_all` (Burrow's `/lag` endpoint)."""
    host = host if host is not None else socket.gethostname()
    endpoint = "lag" if show_all else "status"
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in status_rows:
        groups.setdefault((row["cluster"], row["group"]), []).append(row)
    out = []
    for (cluster, group), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: (r["topic"], r["partition"]))
        parts = [_burrow_partition(r) for r in rows]
        maxlag = next((p for p, r in zip(parts, rows, strict=True) if r["is_maxlag"]), None)
        first = rows[0]
        out.append(
            {
                "error": False,
                "message": "consumer status returned",
                "status": {
                    "cluster": cluster,
                    "group": group,
                    "status": first["group_status"],
                    "complete": first["group_complete"],
                    "partitions": [p for p in parts if show_all or p["status"] != LagStatus.OK],
                    "partition_count": first["group_partition_count"],
                    "maxlag": maxlag,
                    "totallag": first["group_totallag"],
                },
                "request": {
                    "url": f"/v3/kafka/{cluster}/consumer/{group}/{endpoint}",
                    "host": host,
                },
            }
        )
    return out


def _burrow_partition(row: Mapping[str, Any]) -> dict:
    def offset(end: str) -> dict | None:
        if row[f"{end}_offset"] is None:
            return None
        return {
            "offset": row[f"{end}_offset"],
            "timestamp": _ms(row[f"{end}_committed_at"]),
            "observedAt": _ms(row[f"{end}_observed_at"]),
            "lag": row[f"{end}_lag"],
        }

    return {
        "topic": row["topic"],
        "partition": row["partition"],
        "owner": row["owner"] or "",
        "client_id": row["client_id"] or "",
        "status": row["status"],
        "start": offset("start"),
        "end": offset("end"),
        "current_lag": row["current_lag"],
        "complete": row["complete"],
    }


def _ms(value: datetime | int | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    # Spark hands out naive datetimes in the local zone; .timestamp() reads them back the same.
    return round(value.timestamp() * 1000)
