#!/usr/bin/env python3
"""Summarises what bench/gate.sh measured (issue 43: through an HTTPS gate, the nightly database
dump included): medians with the spread of the runs, neverwiped's ratios to restic, issue 43's
targets, what the two cores allow when the gate's own share is taken out (from OUT_DIR/floor.json,
bench/floor.sh), and a chart.

    bench/gate-report.py OUT_DIR [--publish PNG]    # reads OUT_DIR/raw.jsonl, meta.json, floor.json (if any)

Writes OUT_DIR/results.json, results.csv (medians), raw.csv, results.md and chart.png (the chart
needs matplotlib: it is installed into a venv under ~/.cache/neverwiped-bench on first use, as
for bench/report.py). --publish also copies the chart to PNG.
"""
import chart_venv
import csv
import json
import os
import shutil
import statistics
import sys

PHASES = ["first", "unchanged", "changed", "restore"]
PHASE_LABEL = {"first": "first backup", "unchanged": "quiet night", "changed": "after the change",
               "restore": "full restore + database load"}
TOOLS = ["neverwiped", "restic"]
# issue 43: wall time of neverwiped / restic per phase, and neverwiped's peak RSS
WALL_TARGETS = {"first": 0.4, "unchanged": 0.25, "changed": 0.3, "restore": 0.4}
RSS_LIMIT_MIB = 100
# issue 43's second figure: neverwiped's wall time within this factor of what the cores allow
FLOOR_LIMIT = 1.5
FLOOR_FORMULA = [
    "engine floor (CPU-s, one core) = files + dump + TLS:",
    "  files = floor.json's CPU-s of the phase less the part of the file db/pg_dumpall.sql (db_cpu_s);",
    "  dump  = for D bytes of the live dump: first backup D/BLAKE3 + D/zstd3_db + (D/ratio_db)(1/AES-GCM + 1/SHA-256);",
    "          quiet night, after the change D/BLAKE3 (its chunks are stored already);",
    "          restore (D/ratio_db)/AES-GCM + D/zstd_d_db + D/BLAKE3 (streamed into psql, not written);",
    "  TLS   = (up + down bytes over the gate) / the negotiated TLS cipher's speed (the client's side only);",
    "what the cores allow = max(pg tools wall, (engine floor + PG server CPU + pg tools CPU + gate CPU) / cores):",
    "  rest-server's CPU (the gate's TLS, login and files) is the server's own share, taken out of the cores",
    "  the client has; 'gate elsewhere' leaves it out, as if the gate ran on cores of its own;",
    f"met when neverwiped's wall <= {FLOOR_LIMIT}x what the cores allow (medians).",
]
MiB = 1024 * 1024
MB = 1e6
KEYS = ["wall_s", "client_cpu_s", "engine_cpu_s", "db_cpu_s", "gate_cpu_s", "pg_server_cpu_s", "rss_mib",
        "db_rss_mib", "up_bytes", "down_bytes", "requests", "repo_bytes_after", "added_bytes", "load1_before",
        "others_cores", "db_dump_wall_s", "db_wall_s"]


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def load(out):
    rows, verify = [], []
    with open(os.path.join(out, "raw.jsonl")) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                (verify if d["phase"] == "verify" else rows).append(d)
    return json.load(open(os.path.join(out, "meta.json"))), rows, verify


def load_floor(out):
    """floor.json of bench/floor.sh, or None when it is missing or predates the gate's fields"""
    path = os.path.join(out, "floor.json")
    if not os.path.exists(path):
        return None
    floor = json.load(open(path))
    return floor if "tls" in floor and all("db_cpu_s" in p for p in floor["phases"].values()) else None


def derive(d):
    d = dict(d)
    d["rss_mib"] = d["engine_rss_kib"] / 1024
    d["db_rss_mib"] = d["db_rss_kib"] / 1024
    d["added_bytes"] = d["repo_bytes_after"] - d["repo_bytes_before"]
    # how long the PostgreSQL tools ran (the dump, the load): mostly the server's work, alike for both tools
    d["db_wall_s"] = sum(x["wall_s"] for x in d.get("db_tools", []))
    others = max(0.0, d["busy_cpu_s"] - d["client_cpu_s"] - d["gate_cpu_s"] - d["pg_server_cpu_s"])
    d["others_cores"] = others / d["wall_s"] if d["wall_s"] > 0 else 0.0
    return d


def summarise(rows, verify):
    out = {}
    for tool in TOOLS:
        for phase in PHASES:
            runs = [derive(r) for r in rows if (r["tool"], r["phase"]) == (tool, phase)]
            if not runs:
                continue
            ok = [r for r in runs if r["rc"] == 0]
            s = {"tool": tool, "phase": phase, "runs": len(runs), "failed": len(runs) - len(ok)}
            for k in KEYS:
                s[k] = med([r[k] for r in ok])
                s[k + "_min"] = min((r[k] for r in ok), default=None)
                s[k + "_max"] = max((r[k] for r in ok), default=None)
            if phase == "restore":
                checks = [v for v in verify if v["tool"] == tool]
                s["files_verified"] = f"{sum(v['files_ok'] for v in checks)}/{len(checks)}"
                s["database_verified"] = f"{sum(v['database_ok'] for v in checks)}/{len(checks)}"
            out[(tool, phase)] = s
    return out


def ratio(a, b):
    return None if a is None or not b else a / b


def ratios(summary):
    res = []
    for phase in PHASES:
        n, r = summary.get(("neverwiped", phase)), summary.get(("restic", phase))
        if n and r:
            d = {"phase": phase, **{k: ratio(n[k], r[k]) for k in
                 ("wall_s", "client_cpu_s", "engine_cpu_s", "rss_mib", "up_bytes", "down_bytes", "requests")}}
            for k in ("up_bytes", "down_bytes"):  # a ratio to next to nothing (a few index reads) says nothing
                if (r[k] or 0) < MB:
                    d[k] = None
            res.append(d)
    return res


def targets(summary, rows):
    res = []
    for phase in PHASES:
        n, r = summary.get(("neverwiped", phase)), summary.get(("restic", phase))
        if n and r and n["wall_s"] is not None and r["wall_s"]:
            v = n["wall_s"] / r["wall_s"]
            res.append({"target": f"{PHASE_LABEL[phase]}: wall <= {WALL_TARGETS[phase]}x restic", "phase": phase,
                        "value": v, "limit": WALL_TARGETS[phase], "unit": "x", "met": v <= WALL_TARGETS[phase]})
    for phase in PHASES:
        peaks = [r["engine_rss_kib"] / 1024 for r in rows if (r["tool"], r["phase"]) == ("neverwiped", phase) and r["rc"] == 0]
        if peaks:
            v = max(peaks)
            res.append({"target": f"{PHASE_LABEL[phase]}: neverwiped peak RSS <= {RSS_LIMIT_MIB} MiB (highest run)",
                        "phase": phase, "value": v, "limit": RSS_LIMIT_MIB, "unit": "MiB", "met": v <= RSS_LIMIT_MIB})
    return res


def speeds(floor):
    """bytes per CPU-second on one core, from floor.json"""
    s = floor["speeds_one_core"]
    return {"blake3": s["read_blake3_MBps"] * MB, "aes": s["aes256gcm_MBps"] * MB, "sha": s["sha256_MBps"] * MB,
            "zstd3_db": s["zstd3_compress_MBps"]["db"] * MB, "zstd_d_db": s["zstd_decompress_MBps"]["db"] * MB,
            "ratio_db": s["zstd3_ratio"]["db"], "tls": floor["tls"]["MBps"] * MB}


def files_floor(floor, phase):
    """the engine's floor for the files backed up: the phase's CPU less what db/pg_dumpall.sql costs"""
    p = floor["phases"][phase]
    return p["cpu_s"] - p["db_cpu_s"]


def dump_floor(floor, phase, dump_bytes):
    """the engine's floor for D bytes of the live dump"""
    v, d = speeds(floor), dump_bytes
    if phase == "first":
        return d / v["blake3"] + d / v["zstd3_db"] + d / v["ratio_db"] * (1 / v["aes"] + 1 / v["sha"])
    if phase == "restore":
        return d / v["ratio_db"] / v["aes"] + d / v["zstd_d_db"] + d / v["blake3"]
    return d / v["blake3"]


def tls_floor(floor, s):
    """the client's side of TLS for what went over the gate in the phase"""
    return ((s["up_bytes"] or 0) + (s["down_bytes"] or 0)) / speeds(floor)["tls"]


def floor_row(floor, meta, phase, s):
    """what the cores allow neverwiped in a phase (s: its medians), and how far its wall time is from it"""
    parts = {"files": files_floor(floor, phase), "dump": dump_floor(floor, phase, meta["dump_bytes"]),
             "tls": tls_floor(floor, s)}
    engine = sum(parts.values())
    pg_cpu, tools_cpu, tools_wall = s["pg_server_cpu_s"] or 0, s["db_cpu_s"] or 0, s["db_wall_s"] or 0
    gate_cpu = s["gate_cpu_s"] or 0
    spread = (engine + pg_cpu + tools_cpu + gate_cpu) / floor["cores"]
    allow = max(tools_wall, spread)
    allow_gate_elsewhere = max(tools_wall, (engine + pg_cpu + tools_cpu) / floor["cores"])
    value = s["wall_s"] / allow if allow > 0 else None
    return {"phase": phase, "engine_floor_cpu_s": engine, "parts_cpu_s": parts, "pg_server_cpu_s": pg_cpu,
            "pg_tools_cpu_s": tools_cpu, "pg_tools_wall_s": tools_wall, "gate_cpu_s": gate_cpu, "cores": floor["cores"],
            "cpu_over_cores_s": spread, "allow_s": allow, "wall_s": s["wall_s"], "value": value, "limit": FLOOR_LIMIT,
            "met": value is not None and value <= FLOOR_LIMIT,
            "value_gate_elsewhere": s["wall_s"] / allow_gate_elsewhere if allow_gate_elsewhere > 0 else None}


def floor_rows(floor, meta, summary):
    if not floor:
        return []
    return [floor_row(floor, meta, p, summary[("neverwiped", p)]) for p in PHASES
            if summary.get(("neverwiped", p)) and summary[("neverwiped", p)]["wall_s"] is not None]


FLOOR_HEAD = ["phase", "engine floor CPU-s", "files", "dump", "TLS", "PG server CPU s", "pg tools CPU s",
              "pg tools wall s", "gate CPU s", "CPU / cores s", "cores allow s", "neverwiped wall s", "ratio",
              f"<= {FLOOR_LIMIT}x", "ratio, gate elsewhere"]


def floor_lines(rows, floor, markdown):
    if not rows:
        return []
    body = []
    for r in rows:
        p = r["parts_cpu_s"]
        verdict = "met" if r["met"] else ("-" if r["value"] is None else f"MISSED ({(r['value'] / FLOOR_LIMIT - 1) * 100:.0f}% over)")
        body.append([PHASE_LABEL[r["phase"]], fmt(r["engine_floor_cpu_s"]), fmt(p["files"]), fmt(p["dump"]), fmt(p["tls"]),
                     fmt(r["pg_server_cpu_s"]), fmt(r["pg_tools_cpu_s"]), fmt(r["pg_tools_wall_s"]), fmt(r["gate_cpu_s"]),
                     fmt(r["cpu_over_cores_s"]), fmt(r["allow_s"]), fmt(r["wall_s"]), times(r["value"]), verdict,
                     times(r["value_gate_elsewhere"])])
    tls = floor["tls"]
    title = f"What the {floor['cores']} cores allow the client, the gate's own share taken out (TLS: {tls['suite']}, {tls['MBps']:.0f} MB/s)"
    if markdown:
        lines = [f"**{title}**", "", "| " + " | ".join(FLOOR_HEAD) + " |", "|" + "---|" * len(FLOOR_HEAD)]
        lines += ["| " + " | ".join(r) + " |" for r in body] + [""] + ["    " + f for f in FLOOR_FORMULA]
    else:
        lines = [f"== {title}"] + aligned([FLOOR_HEAD] + body) + [""] + ["  " + f for f in FLOOR_FORMULA]
    return lines + [""]


def times(value):
    return "-" if value is None else f"{value:.2f}x"


def aligned(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]


def fmt(v, digits=2):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def spread(s, k, scale=1.0):
    if s[k] is None:
        return "-"
    if s["runs"] - s["failed"] <= 1:
        return fmt(s[k] / scale)
    return f"{fmt(s[k] / scale)} ({fmt(s[k + '_min'] / scale)}-{fmt(s[k + '_max'] / scale)})"


HEAD = ["tool", "wall s (min-max)", "pg tools wall s", "client CPU s (min-max)", "of it pg tools", "engine CPU s", "peak RSS MiB (min-max)",
        "gate CPU s", "PG server CPU s", "up MB", "down MB", "requests", "repo MB", "load1", "verified"]


def phase_rows(summary, phase, rats):
    body = []
    for tool in TOOLS:
        s = summary.get((tool, phase))
        if not s:
            continue
        verified = ""
        if phase == "restore":
            verified = f"files {s['files_verified']}, db {s['database_verified']}"
        if s["failed"]:
            verified = (verified + " " if verified else "") + f"FAILED {s['failed']}/{s['runs']}"
        body.append([tool, spread(s, "wall_s"), fmt(s["db_wall_s"]), spread(s, "client_cpu_s"), fmt(s["db_cpu_s"]), fmt(s["engine_cpu_s"]),
                     spread(s, "rss_mib"), fmt(s["gate_cpu_s"]), fmt(s["pg_server_cpu_s"]),
                     fmt(None if s["up_bytes"] is None else s["up_bytes"] / MB),
                     fmt(None if s["down_bytes"] is None else s["down_bytes"] / MB),
                     str(s["requests"] if s["requests"] is None else int(s["requests"])),
                     fmt(None if s["repo_bytes_after"] is None else s["repo_bytes_after"] / MB),
                     fmt(s["load1_before"], 1), verified])
    r = next((x for x in rats if x["phase"] == phase), None)
    if r:
        x = lambda v: "-" if v is None else f"{v:.2f}x"
        body.append(["neverwiped / restic", x(r["wall_s"]), "", x(r["client_cpu_s"]), "", x(r["engine_cpu_s"]), x(r["rss_mib"]),
                     "", "", x(r["up_bytes"]), x(r["down_bytes"]), x(r["requests"]), "", "", ""])
    return body


def tables(summary, rats, markdown):
    lines = []
    for phase in PHASES:
        body = phase_rows(summary, phase, rats)
        if not body:
            continue
        if markdown:
            lines += [f"**{PHASE_LABEL[phase]}**", "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
            lines += ["| " + " | ".join(r) + " |" for r in body] + [""]
        else:
            lines += [f"== {PHASE_LABEL[phase]}"] + aligned([HEAD] + body) + [""]
    return lines


def target_lines(tg, markdown):
    lines = ["**Issue 43's targets**", ""] if markdown else ["== issue 43's targets"]
    for t in tg:
        value = f"{t['value']:.3f}x" if t["unit"] == "x" else f"{t['value']:.1f} {t['unit']}"
        over = (t["value"] / t["limit"] - 1) * 100
        verdict = "met" if t["met"] else f"MISSED ({over:.0f}% over)"
        text = f"{t['target']}: {value} -> {verdict}"
        lines.append(("- " if markdown else "  ") + text)
    return lines + [""]


def write_csv(path, rows, keys):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()})


def chart(out, meta, summary, rats):
    drawn = chart_venv.drawn_in_venv(__file__, out, "gate-report")
    if drawn is not None:
        return drawn
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"neverwiped": "#1f4e9c", "restic": "#d9731a"}
    db_colors = {"neverwiped": "#8fb0e8", "restic": "#f5c99e"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    width = 0.38
    for i, tool in enumerate(TOOLS):
        xs = [j - 0.2 + width * i for j in range(len(PHASES))]
        get = lambda k, p: (summary.get((tool, p)) or {}).get(k)
        # wall time, with the runs' spread and neverwiped's ratio
        ys = [get("wall_s", p) or 0 for p in PHASES]
        err = [[(get("wall_s", p) or 0) - (get("wall_s_min", p) or 0) for p in PHASES],
               [(get("wall_s_max", p) or 0) - (get("wall_s", p) or 0) for p in PHASES]]
        axes[0].bar(xs, ys, width, yerr=err, capsize=2, color=colors[tool], label=tool)
        # client CPU: the engine, then the PostgreSQL client tools on top
        eng = [get("engine_cpu_s", p) or 0 for p in PHASES]
        dbt = [get("db_cpu_s", p) or 0 for p in PHASES]
        axes[1].bar(xs, eng, width, color=colors[tool], label=f"{tool}")
        axes[1].bar(xs, dbt, width, bottom=eng, color=db_colors[tool], label=f"{tool}: pg_dumpall / psql")
        rss = [get("rss_mib", p) or 0 for p in PHASES]
        err = [[(get("rss_mib", p) or 0) - (get("rss_mib_min", p) or 0) for p in PHASES],
               [(get("rss_mib_max", p) or 0) - (get("rss_mib", p) or 0) for p in PHASES]]
        axes[2].bar(xs, rss, width, yerr=err, capsize=2, color=colors[tool], label=tool)
    top = max([(summary.get((t, p)) or {}).get("wall_s_max") or 0 for t in TOOLS for p in PHASES] + [1])
    for j, p in enumerate(PHASES):
        r = next((x for x in rats if x["phase"] == p), None)
        if r and r["wall_s"] is not None:
            ok = r["wall_s"] <= WALL_TARGETS[p]
            axes[0].annotate(f"{r['wall_s']:.2f}x\n(target {WALL_TARGETS[p]}x)", (j, top * 1.04), ha="center", fontsize=8,
                             color="#2a7a2a" if ok else "#b22222")
    axes[0].set_ylim(0, top * 1.5)
    axes[2].axhline(RSS_LIMIT_MIB, color="black", linestyle="dashed", linewidth=1, label=f"target {RSS_LIMIT_MIB} MiB")
    titles = ["wall time (s)", "client CPU, user+sys (s): engine + PostgreSQL tools", "peak memory of the engine, RSS (MiB)"]
    for ax, title in zip(axes, titles):
        ax.set_xticks(range(len(PHASES)))
        ax.set_xticklabels([PHASE_LABEL[p].replace(" + ", "\n+ ") for p in PHASES], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.legend(fontsize=7.5)
    loads = [v for s in summary.values() for v in (s.get("load1_before_min"), s.get("load1_before_max")) if v is not None]
    fig.suptitle(f"Through an HTTPS gate (TLS + login), nightly pg_dumpall included: {meta['data_files']} files, "
                 f"{meta['data_bytes'] / 1e9:.2f} GB + a {meta['database_bytes'] / 1e6:.0f} MB database (scale {meta['scale']}), "
                 f"{meta['machine']['cpus']} vCPU; medians of {meta['runs']} runs (bars: min-max); "
                 f"load {min(loads or [0]):.1f}-{max(loads or [0]):.1f}; lower is better", fontsize=9.5)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "chart.png"), dpi=110)
    return True


def main():
    args = sys.argv[1:]
    if args and args[0] == "--chart-only":
        out = args[1]
        meta, rows, verify = load(out)
        summary = summarise(rows, verify)
        chart(out, meta, summary, ratios(summary))
        return
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return
    out = args[0]
    publish = args[args.index("--publish") + 1] if "--publish" in args else None
    meta, rows, verify = load(out)
    floor = load_floor(out)
    summary = summarise(rows, verify)
    rats = ratios(summary)
    tg = targets(summary, rows)
    fl = floor_rows(floor, meta, summary)
    head = (f"Scale {meta['scale']}: {meta['data_files']} files, {meta['data_bytes']} bytes backed up as files, database shop "
            f"{meta['database_bytes']} bytes (dumped live at every backup); {meta['runs']} runs; "
            f"{meta['machine']['cpus']} vCPU {meta['machine']['cpu_model']}; started {meta['started']}; {meta['gate']}")
    text = [head, ""] + tables(summary, rats, False) + target_lines(tg, False) + floor_lines(fl, floor, False)
    md = [head, "", "Versions: " + "; ".join(f"{k} {v}" for k, v in meta["versions"].items() if v), ""]
    md += tables(summary, rats, True) + target_lines(tg, True) + floor_lines(fl, floor, True)
    open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
    medians = [dict(v) for v in summary.values()]
    json.dump({"meta": meta, "floor": floor, "cores_allow": fl, "medians": medians, "ratios": rats, "targets": tg,
               "raw": [derive(r) for r in rows],
               "verify": verify}, open(os.path.join(out, "results.json"), "w"), indent=1)
    keys = ["tool", "phase", "runs", "failed"] + [k + sfx for k in KEYS for sfx in ("", "_min", "_max")] + \
           ["files_verified", "database_verified"]
    write_csv(os.path.join(out, "results.csv"), medians, keys)
    raw_keys = ["tool", "run", "phase", "rc", "wall_s", "client_cpu_s", "engine_cpu_s", "db_cpu_s", "db_dump_wall_s", "db_wall_s",
                "rss_mib", "db_rss_mib", "gate_cpu_s", "pg_server_cpu_s", "up_bytes", "down_bytes", "requests",
                "repo_bytes_before", "repo_bytes_after", "added_bytes", "load1_before", "load1_after", "others_cores"]
    write_csv(os.path.join(out, "raw.csv"), [derive(r) for r in rows], raw_keys)
    print("\n".join(text))
    if chart(out, meta, summary, rats):
        print(f"chart: {os.path.join(out, 'chart.png')}")
        if publish:
            shutil.copyfile(os.path.join(out, "chart.png"), publish)
            print(f"published: {publish}")
    print(f"results: {out}/results.json, results.csv, raw.csv, results.md")


if __name__ == "__main__":
    main()
