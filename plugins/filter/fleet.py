# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side filters that turn gpu_facts of many hosts into a fleet report."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

COLUMNS = (
    ("host", "HOST"),
    ("gpus", "GPUS"),
    ("sm", "SM"),
    ("interconnect", "LINK"),
    ("flashinfer_arch_list", "FLASHINFER ARCH"),
    ("toolkits", "TOOLKITS (* = /usr/local/cuda)"),
    ("verdict", "VERDICT"),
)


def _toolkits(facts: t.Mapping[str, t.Any]) -> str:
    default = (facts.get("default_toolkit") or {}).get("resolves_to")
    names = []
    for toolkit in facts.get("toolkits") or []:
        label = toolkit.get("version") or "?"
        if toolkit.get("path") == default:
            label += "*"
        names.append(label)
    return " ".join(names) or "-"


def _empty_row(host: str, verdict: str, message: str) -> t.Dict[str, str]:
    row = {key: "-" for key, title in COLUMNS}
    row.update(host=host, verdict=verdict, verdict_message=message)
    return row


def fleet_summary(facts_by_host: t.Mapping[str, t.Any], unreported: t.Optional[t.Iterable[str]] = None) -> t.Dict[str, t.Any]:
    """One row per host from its inferops_gpu fact; hosts without the fact are rows too.

    facts_by_host maps a host name to its inferops_gpu fact (or to None when the
    host did not report, for example because it was unreachable).
    """
    if not isinstance(facts_by_host, dict):
        raise AnsibleFilterError("fleet_summary expects a dict of host -> inferops_gpu facts, got %s"
                                 % type(facts_by_host).__name__)
    rows = []
    for host in sorted(facts_by_host):
        facts = facts_by_host[host]
        if not facts:
            rows.append(_empty_row(host, "no_facts", "gpu_facts did not run on this host"))
            continue
        rows.append({
            "host": host,
            "gpus": facts.get("gpu_summary") or "-",
            "sm": " ".join(facts.get("capabilities") or []) or "-",
            "interconnect": facts.get("interconnect") or "-",
            "flashinfer_arch_list": facts.get("flashinfer_arch_list") or "-",
            "toolkits": _toolkits(facts),
            "verdict": facts.get("verdict") or "-",
            "verdict_message": facts.get("verdict_message") or "",
        })
    for host in sorted(set(unreported or []) - set(facts_by_host)):
        rows.append(_empty_row(host, "unreachable", "failed or unreachable before gpu_facts"))
    counts: t.Dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return {"hosts": rows, "verdict_counts": counts}


def fleet_table(summary: t.Mapping[str, t.Any]) -> t.List[str]:
    """Fixed-width lines of a fleet_summary, one per host, with a header and a totals line."""
    try:
        rows = summary["hosts"]
        counts = summary["verdict_counts"]
    except (KeyError, TypeError):
        raise AnsibleFilterError("fleet_table expects the output of fleet_summary") from None
    widths = [max([len(title)] + [len(str(row[key])) for row in rows]) for key, title in COLUMNS]
    lines = ["  ".join(title.ljust(width) for (key, title), width in zip(COLUMNS, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(str(row[key]).ljust(width) for (key, title), width in zip(COLUMNS, widths)).rstrip())
    lines.append("%d host(s): %s" % (len(rows), ", ".join("%s %d" % item for item in sorted(counts.items()))))
    for row in rows:
        if row["verdict"] not in ("ready", "no_gpu"):
            lines.append("%s: %s" % (row["host"], row["verdict_message"]))
    return lines


class FilterModule:
    """inferops.blackwell fleet report filters."""

    def filters(self) -> t.Dict[str, t.Callable[..., t.Any]]:
        return {"fleet_summary": fleet_summary, "fleet_table": fleet_table}
