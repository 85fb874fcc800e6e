#!/usr/bin/env python3
"""The report of bench/copy.sh: medians per tool and phase, and issue 40's copy targets.

    bench/copy-report.py OUT      (reads OUT/raw.jsonl and OUT/meta.json; writes results.json, results.md)
"""
import json
import os
import statistics
import sys

PHASES = ["backup-first", "copy-first", "backup-night", "copy-night"]
LABEL = {"backup-first": "first backup (source)", "copy-first": "first copy",
         "backup-night": "backup after the change (source)", "copy-night": "nightly copy"}
TOOLS = ["neverwiped", "restic"]
MiB = 1024 * 1024
MB = 1e6


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def load(out):
    rows, checks = [], []
    with open(os.path.join(out, "raw.jsonl")) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                (checks if d["phase"] == "check" else rows).append(d)
    return json.load(open(os.path.join(out, "meta.json"))), rows, checks


def summarise(rows, checks):
    res = {}
    for tool in TOOLS:
        for phase in PHASES:
            runs = [r for r in rows if r["tool"] == tool and r["phase"] == phase and r["rc"] == 0]
            if not runs:
                continue
            for r in runs:
                r["cpu_s"] = r["user_s"] + r["sys_s"]
                r["rss_mib"] = r["max_rss_kib"] / 1024
                r["grown_bytes"] = r["repo_bytes_after"] - r["repo_bytes_before"]
                others = max(0.0, r["busy_cpu_s"] - r["cpu_s"] - r["servers_cpu_s"])
                r["others_cores"] = others / r["wall_s"] if r["wall_s"] > 0 else 0.0
            s = {"tool": tool, "phase": phase, "runs": len(runs),
                 "failed": len([r for r in rows if r["tool"] == tool and r["phase"] == phase and r["rc"] != 0])}
            for r in runs:
                r.setdefault("source_read_bytes", None)
                r.setdefault("source_reads", None)
            for key in ("wall_s", "cpu_s", "rss_mib", "written_bytes", "grown_bytes", "requests",
                        "source_read_bytes", "source_reads",
                        "servers_cpu_s", "load1_before", "others_cores"):
                vals = [r[key] for r in runs if r[key] is not None]
                s[key] = med(vals)
                s[key + "_min"] = min(vals, default=None)
                s[key + "_max"] = max(vals, default=None)
            res[(tool, phase)] = s
    for tool in TOOLS:
        c = [x for x in checks if x["tool"] == tool]
        res[(tool, "check")] = f"{sum(1 for x in c if x['checked'])}/{len(c)}"
    return res


def targets(s):
    out = []

    def get(tool, phase, key):
        return (s.get((tool, phase)) or {}).get(key)

    def add(what, value, limit, detail):
        if value is not None:
            out.append({"target": what, "value": value, "limit": limit, "met": value <= limit, "detail": detail})

    for phase in ("copy-first", "copy-night"):
        n, r = get("neverwiped", phase, "wall_s"), get("restic", phase, "wall_s")
        if n is not None and r:
            add(f"{LABEL[phase]}: wall <= 0.5x restic copy's", n / r, 0.5, f"{n:.2f} s vs {r:.2f} s")
    sent, added = get("neverwiped", "copy-night", "written_bytes"), get("neverwiped", "backup-night", "written_bytes")
    if sent is not None and added:
        add("nightly copy: bytes sent <= bytes the night added x 1.05", sent / added, 1.05,
            f"{sent / MB:.2f} MB sent, the night added {added / MB:.2f} MB (limit {added * 1.05 / MB:.2f} MB)")
    for phase in ("copy-first", "copy-night"):
        v = get("neverwiped", phase, "rss_mib")
        if v is not None:
            add(f"{LABEL[phase]}: peak RSS <= 100 MiB", v / 100, 1.0, f"{v:.1f} MiB")
    return out


def fmt(v, spec, scale=1.0):
    return "-" if v is None else format(v / scale, spec)


def markdown(meta, s, tg):
    lines = [f"### Copying to a second gate, 1/{meta['scale'].split('/')[-1] if '/' in meta['scale'] else meta['scale']} scale "
             f"({meta['data_bytes'] / MB:.0f} MB, {meta['data_files']} files), {meta['runs']} run(s)", "",
             "| phase | tool | wall s (min-max) | CPU s | peak RSS MiB (max) | bytes written to the gate MB | gate folder grew MB | requests | read from the source MB (requests) | load1 (min-max) | others' cores |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for phase in PHASES:
        for tool in TOOLS:
            x = s.get((tool, phase))
            if not x:
                continue
            lines.append(
                f"| {LABEL[phase]} | {tool} | {fmt(x['wall_s'], '.2f')} ({fmt(x['wall_s_min'], '.2f')}-{fmt(x['wall_s_max'], '.2f')}) "
                f"| {fmt(x['cpu_s'], '.2f')} | {fmt(x['rss_mib'], '.1f')} ({fmt(x['rss_mib_max'], '.1f')}) "
                f"| {fmt(x['written_bytes'], '.2f', MB)} | {fmt(x['grown_bytes'], '.2f', MB)} | {fmt(x['requests'], '.0f')} "
                + (f"| {fmt(x['source_read_bytes'], '.1f', MB)} ({fmt(x['source_reads'], '.0f')}) " if phase.startswith("copy") else "| ")
                + f"| {fmt(x['load1_before'], '.2f')} ({fmt(x['load1_before_min'], '.2f')}-{fmt(x['load1_before_max'], '.2f')}) "
                f"| {fmt(x['others_cores'], '.2f')} |")
    lines += ["", f"`check` of the destination after the nightly copy: neverwiped {s[('neverwiped', 'check')]}, "
              f"restic {s[('restic', 'check')]}.", "", "| target | measured | limit | | detail |", "|---|---|---|---|---|"]
    for t in tg:
        lines.append(f"| {t['target']} | {t['value']:.2f} | {t['limit']:.2f} | {'PASS' if t['met'] else 'FAIL'} | {t['detail']} |")
    return "\n".join(lines) + "\n"


def main():
    out = sys.argv[1]
    meta, rows, checks = load(out)
    s = summarise(rows, checks)
    tg = targets(s)
    json.dump({"meta": meta, "summary": [v for k, v in s.items() if k[1] != "check"],
               "checks": {t: s[(t, "check")] for t in TOOLS}, "targets": tg},
              open(os.path.join(out, "results.json"), "w"), indent=1)
    md = markdown(meta, s, tg)
    open(os.path.join(out, "results.md"), "w").write(md)
    print(md)
    print(f"machine: {meta['machine']['cpus']} CPUs, {meta['machine']['cpu_model']}, kernel {meta['machine']['kernel']}; "
          + "; ".join(f"{k} {v}" for k, v in meta["versions"].items()))


if __name__ == "__main__":
    main()
