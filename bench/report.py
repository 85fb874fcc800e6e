#!/usr/bin/env python3
"""Summarises what bench/run.sh measured: medians, ratios to the peers, issue 6's targets, the
time on a few links, and a chart.

    bench/report.py OUT_DIR          # reads OUT_DIR/raw.jsonl, meta.json and floor.json (if any)

Writes OUT_DIR/results.json, results.csv (medians), raw.csv, results.md and chart.png (the chart
needs matplotlib: it is installed into a venv under ~/.cache/neverwiped-bench on first use).
"""
import chart_venv
import csv
import json
import os
import statistics
import sys

PHASES = ["first", "unchanged", "changed", "restore"]
PHASE_LABEL = {"first": "first backup", "unchanged": "nothing changed", "changed": "after the change",
               "restore": "full restore"}
CONFIGS = [("neverwiped", "local"), ("restic", "local"), ("borg", "local"), ("neverwiped", "rest"),
           ("restic", "rest")]
MiB = 1024 * 1024
MB = 1e6
LINKS = [("1 Gbit/s", 1e9), ("100 Mbit/s", 1e8), ("20 Mbit/s", 2e7)]


def label(tool, mode):
    return tool + (" (REST)" if mode == "rest" else "")


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def load(out):
    rows, verify = [], []
    with open(os.path.join(out, "raw.jsonl")) as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line)
            (verify if d["phase"] == "verify" else rows).append(d)
    meta = json.load(open(os.path.join(out, "meta.json")))
    floor_path = os.path.join(out, "floor.json")
    floor = json.load(open(floor_path)) if os.path.exists(floor_path) else None
    return meta, rows, verify, floor


def derive(d):
    """Adds the derived columns of one measurement."""
    d = dict(d)
    d["cpu_s"] = d["user_s"] + d["sys_s"]
    d["rss_mib"] = d["max_rss_kib"] / 1024
    d["added_bytes"] = d["repo_bytes_after"] - d["repo_bytes_before"]
    d["up_bytes"] = d["rest_up_after"] - d["rest_up_before"]
    d["down_bytes"] = d["rest_down_after"] - d["rest_down_before"]
    d["requests"] = d["rest_requests_after"] - d["rest_requests_before"]
    # CPU that other processes of the machine (other builds and tests) used during the phase,
    # in cores on average: busy time of all CPUs less this tool and rest-server.
    others = max(0.0, d["busy_cpu_s"] - d["cpu_s"] - d["server_cpu_s"])
    d["others_cores"] = others / d["wall_s"] if d["wall_s"] > 0 else 0.0
    return d


def summarise(rows, verify):
    out = {}
    for tool, mode in CONFIGS:
        for phase in PHASES:
            runs = [derive(r) for r in rows if (r["tool"], r["mode"], r["phase"]) == (tool, mode, phase)]
            ok = [r for r in runs if r["rc"] == 0]
            if not runs:
                continue
            s = {"tool": tool, "mode": mode, "phase": phase, "runs": len(runs), "failed": len(runs) - len(ok)}
            for key in ("wall_s", "cpu_s", "user_s", "sys_s", "rss_mib", "added_bytes", "repo_bytes_after",
                        "up_bytes", "down_bytes", "requests", "server_cpu_s", "load1_before", "others_cores",
                        "reported_bytes"):
                s[key] = med([r[key] for r in ok])
            s["wall_min"] = min((r["wall_s"] for r in ok), default=None)
            s["wall_max"] = max((r["wall_s"] for r in ok), default=None)
            s["cpu_min"] = min((r["cpu_s"] for r in ok), default=None)
            s["cpu_max"] = max((r["cpu_s"] for r in ok), default=None)
            s["rss_min"] = min((r["rss_mib"] for r in ok), default=None)
            s["rss_max"] = max((r["rss_mib"] for r in ok), default=None)
            s["load1_min"] = min((r["load1_before"] for r in ok), default=None)
            s["load1_max"] = max((r["load1_before"] for r in ok), default=None)
            if phase == "restore":
                checks = [v for v in verify if (v["tool"], v["mode"]) == (tool, mode)]
                s["verified"] = f"{sum(v['verified'] for v in checks)}/{len(checks)}"
            out[(tool, mode, phase)] = s
    return out


def ratio(a, b):
    if a is None or b in (None, 0):
        return None
    return a / b


def ratios(summary):
    res = []
    pairs = [(("neverwiped", "local"), ("restic", "local")), (("neverwiped", "local"), ("borg", "local")),
             (("neverwiped", "rest"), ("restic", "rest")), (("neverwiped", "rest"), ("borg", "local"))]
    for (nt, nm), (pt, pm) in pairs:
        for phase in PHASES:
            n, p = summary.get((nt, nm, phase)), summary.get((pt, pm, phase))
            if not n or not p:
                continue
            res.append({"neverwiped": label(nt, nm), "peer": label(pt, pm), "phase": phase,
                        "wall": ratio(n["wall_s"], p["wall_s"]), "cpu": ratio(n["cpu_s"], p["cpu_s"]),
                        "rss": ratio(n["rss_mib"], p["rss_mib"]),
                        "added": ratio(n["added_bytes"], p["added_bytes"]) if phase != "restore" else None,
                        "repo": ratio(n["repo_bytes_after"], p["repo_bytes_after"])})
    return res


def targets(summary, floor):
    """Issue 6's targets, each with the measured ratio and how far it is from the limit."""
    res = []

    def add(what, mode, value, limit, unit="x"):
        if value is None:
            return
        met = value <= limit
        res.append({"target": what, "mode": mode, "value": value, "limit": limit, "met": met,
                    "factor_off": value / limit if limit else None, "unit": unit})

    for mode in ("local", "rest"):
        get = lambda tool, phase, key, m=mode: (summary.get((tool, m, phase)) or {}).get(key)
        if get("neverwiped", "first", "wall_s") is None:
            continue
        if get("restic", "first", "wall_s") is not None:
            add("first backup: wall <= 0.4x restic", mode, ratio(get("neverwiped", "first", "wall_s"), get("restic", "first", "wall_s")), 0.4)
            add("first backup: CPU <= 0.5x restic", mode, ratio(get("neverwiped", "first", "cpu_s"), get("restic", "first", "cpu_s")), 0.5)
            add("nothing changed: wall <= 0.3x restic", mode, ratio(get("neverwiped", "unchanged", "wall_s"), get("restic", "unchanged", "wall_s")), 0.3)
            add("after the change: wall <= 0.4x restic", mode, ratio(get("neverwiped", "changed", "wall_s"), get("restic", "changed", "wall_s")), 0.4)
            add("after the change: bytes added <= 1.1x restic", mode, ratio(get("neverwiped", "changed", "added_bytes"), get("restic", "changed", "added_bytes")), 1.1)
            add("restore: wall <= 0.3x restic", mode, ratio(get("neverwiped", "restore", "wall_s"), get("restic", "restore", "wall_s")), 0.3)
            add("repository size <= restic's", mode, ratio(get("neverwiped", "changed", "repo_bytes_after"), get("restic", "changed", "repo_bytes_after")), 1.0)
        if floor:
            add("first backup: wall <= 1.6x what the cores allow", mode, ratio(get("neverwiped", "first", "wall_s"), floor["phases"]["first"]["wall_s"]), 1.6)
            # on a shared machine the wall time measures the neighbours too; the CPU side is the steadier check
            add("first backup: CPU <= 1.6x what the cores allow (CPU)", mode, ratio(get("neverwiped", "first", "cpu_s"), floor["phases"]["first"]["cpu_s"]), 1.6)
        borg = lambda phase, key: (summary.get(("borg", "local", phase)) or {}).get(key)
        for phase in PHASES:
            if borg(phase, "rss_mib") is not None:
                # "below borg's": strictly less; a ratio of exactly 1.0 is a miss
                v = ratio(get("neverwiped", phase, "rss_mib"), borg(phase, "rss_mib"))
                if v is not None:
                    res.append({"target": f"{PHASE_LABEL[phase]}: peak RSS below borg's", "mode": mode, "value": v,
                                "limit": 1.0, "met": v < 1.0, "factor_off": v, "unit": "x"})
    return res


def many_files_targets(summary, meta):
    """Issue 15's targets for the many-files tree: ratios to restic, and peak memory."""
    res = []
    limit_mib = 100 if meta.get("data_files", 0) <= 300000 else 128
    for mode in ("local", "rest"):
        get = lambda tool, phase, key, m=mode: (summary.get((tool, m, phase)) or {}).get(key)
        for phase, limit in (("first", 0.4), ("unchanged", 0.25), ("restore", 0.4)):
            v = ratio(get("neverwiped", phase, "wall_s"), get("restic", phase, "wall_s"))
            if v is not None:
                res.append({"target": f"{PHASE_LABEL[phase]}: wall <= {limit}x restic", "mode": mode, "value": v,
                            "limit": limit, "met": v <= limit, "factor_off": v / limit, "unit": "x"})
        for phase in PHASES:
            v = get("neverwiped", phase, "rss_mib")
            if v is not None:
                res.append({"target": f"{PHASE_LABEL[phase]}: peak RSS <= {limit_mib} MiB", "mode": mode, "value": v,
                            "limit": limit_mib, "met": v <= limit_mib, "factor_off": v / limit_mib, "unit": "MiB"})
    return res


def link_estimates(summary):
    """neverwiped on a link. A backup first reads the repository's index and the parent's trees (the
    download direction, before any work), then uploads packs while it computes: estimate =
    other-direction bytes / rate + max(wall measured here, main-direction bytes / rate). A restore
    the same way round. Round trips are not in it (see `requests`)."""
    mode = "rest" if summary.get(("neverwiped", "rest", "first")) else "local"
    rows = []
    for phase in PHASES:
        s = summary.get(("neverwiped", mode, phase))
        if not s:
            continue
        if mode == "rest":
            moved = s["down_bytes"] if phase == "restore" else s["up_bytes"]
            back = s["up_bytes"] if phase == "restore" else s["down_bytes"]
        else:
            moved = s["reported_bytes"] if phase == "restore" else s["added_bytes"]
            back = 0
        row = {"phase": phase, "mode": mode, "local_wall_s": s["wall_s"], "cpu_s": s["cpu_s"],
               "bytes_main_direction": moved, "bytes_other_direction": back, "requests": s["requests"], "links": {}}
        for name, bps in LINKS:
            transfer = (moved or 0) * 8 / bps
            other = (back or 0) * 8 / bps
            row["links"][name] = {"transfer_s": transfer, "other_direction_s": other,
                                  "estimate_s": other + max(s["wall_s"], transfer),
                                  "upper_s": other + s["wall_s"] + transfer}
        rows.append(row)
    return rows


def fmt(v, digits=2):
    if v is None:
        return "-"
    return f"{v:.{digits}f}"


def mb(v):
    return "-" if v is None else f"{v / MB:.1f}"


def table(summary, floor, markdown):
    lines = []
    head = ["tool", "wall s (min-max)", "CPU s", "peak RSS MiB", "added MB", "repo MB", "load1 (min-max)", "others' cores"]
    for phase in PHASES:
        rows = [summary[(t, m, phase)] for t, m in CONFIGS if (t, m, phase) in summary]
        if not rows:
            continue
        body = []
        for s in rows:
            body.append([label(s["tool"], s["mode"]) + ("" if not s["failed"] else f" ({s['failed']} failed)"),
                         f"{fmt(s['wall_s'])} ({fmt(s['wall_min'])}-{fmt(s['wall_max'])})", fmt(s["cpu_s"]),
                         fmt(s["rss_mib"], 0), mb(s["added_bytes"]) if phase != "restore" else "-",
                         mb(s["repo_bytes_after"]), f"{fmt(s['load1_before'])} ({fmt(s['load1_min'])}-{fmt(s['load1_max'])})",
                         fmt(s["others_cores"])])
            if phase == "restore":
                body[-1][4] = "verified " + s.get("verified", "?")
        if floor:
            f = floor["phases"][phase]
            body.append(["what the cores allow", fmt(f["wall_s"]), fmt(f["cpu_s"]), "", "", "", "", ""])
        title = f"{PHASE_LABEL[phase]} (medians of {max(s['runs'] for s in rows)} runs)"
        if markdown:
            lines += [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(r) + " |" for r in body] + [""]
        else:
            widths = [max(len(str(r[i])) for r in [head] + body) for i in range(len(head))]
            lines.append(f"== {title}")
            for r in [head] + body:
                lines.append("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
            lines.append("")
    return lines


def ratio_lines(rats, markdown):
    head = ["neverwiped / peer", "phase", "wall", "CPU", "peak RSS", "added", "repo"]
    body = [[f"{r['neverwiped']} / {r['peer']}", PHASE_LABEL[r["phase"]], fmt(r["wall"]), fmt(r["cpu"]), fmt(r["rss"]),
             fmt(r["added"]), fmt(r["repo"])] for r in rats]
    if not body:
        return []
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body] + [""]
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    return ["== ratios (below 1: neverwiped is faster / smaller)"] + [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in [head] + body] + [""]


def target_lines(tg, markdown, issue="6"):
    lines = [f"**Issue {issue}'s targets**", ""] if markdown else [f"== issue {issue}'s targets"]
    for t in tg:
        over = (t["factor_off"] - 1) * 100
        verdict = "met" if t["met"] else (f"MISSED: {over:.0f}% over the limit" if over >= 1 else f"MISSED: {over:.1f}% over the limit")
        value = f"{t['value']:.3f}x" if t["unit"] == "x" else f"{t['value']:.1f} {t['unit']}"
        text = f"{t['target']} [{t['mode']}]: {value} -> {verdict}"
        lines.append(("- " + text) if markdown else "  " + text)
    return lines + [""]


def link_lines(links, markdown):
    if not links:
        return []
    mode = links[0]["mode"]
    lines = [f"**neverwiped on a link** (from the {'REST' if mode == 'rest' else 'local'} runs: estimate = "
             "other direction x 8 / rate + max(wall measured here, main direction x 8 / rate); round trips not included)", ""]
    head = ["phase", "wall here s", "CPU s", "MB main direction", "MB other direction", "requests"] + [n for n, _ in LINKS]
    body = []
    for r in links:
        body.append([PHASE_LABEL[r["phase"]], fmt(r["local_wall_s"]), fmt(r["cpu_s"]), mb(r["bytes_main_direction"]),
                     f"{(r['bytes_other_direction'] or 0) / MB:.2f}", str(r["requests"] or 0)] +
                    [f"{fmt(r['links'][n]['estimate_s'], 1)} s" for n, _ in LINKS])
    if markdown:
        return lines + ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body] + [""]
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    return ["== " + lines[0].replace("**", "")] + ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                                           for r in [head] + body] + [""]


def write_csv(path, rows, keys):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()})


def chart(out, meta, summary, floor=None):
    drawn = chart_venv.drawn_in_venv(__file__, out, "report")
    if drawn is not None:
        return drawn
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {("neverwiped", "local"): "#1f4e9c", ("neverwiped", "rest"): "#6f9fe0", ("restic", "local"): "#d9731a",
              ("restic", "rest"): "#f2b47a", ("borg", "local"): "#3a8f3a"}
    configs = [c for c in CONFIGS if any((c[0], c[1], p) in summary for p in PHASES)]
    panels = [("wall_s", "wall_min", "wall_max", "wall time (s)"), ("cpu_s", "cpu_min", "cpu_max", "CPU time, user+sys (s)"),
              ("rss_mib", "rss_min", "rss_max", "peak memory, RSS (MiB)")]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    width = 0.8 / max(1, len(configs))
    for ax, (key, lo, hi, title) in zip(axes, panels):
        for i, c in enumerate(configs):
            xs, ys, tops, errs = [], [], [], [[], []]
            for j, p in enumerate(PHASES):
                s = summary.get((c[0], c[1], p))
                if not s or s[key] is None:
                    continue
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(s[key])
                tops.append(s[hi])
                errs[0].append(s[key] - s[lo])
                errs[1].append(s[hi] - s[key])
            bars = ax.bar(xs, ys, width, yerr=errs, capsize=2, color=colors[c], label=label(*c))
            for b, y, top in zip(bars, ys, tops):
                ax.annotate(f"{y:.0f}" if y >= 10 else f"{y:.1f}", (b.get_x() + b.get_width() / 2, top),
                            ha="center", va="bottom", fontsize=6.5, xytext=(0, 2), textcoords="offset points")
        if floor and key in ("wall_s", "cpu_s"):
            for j, p in enumerate(PHASES):
                y = floor["phases"][p][key]
                ax.hlines(y, j - 0.42, j + 0.42, colors="black", linestyles="dashed", linewidth=1,
                          label="what the cores allow" if j == 0 else None)
        ax.set_xticks(range(len(PHASES)))
        ax.set_xticklabels([PHASE_LABEL[p] for p in PHASES], fontsize=8.5)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[0].legend(fontsize=8)
    loads = [v for s in summary.values() for v in (s.get("load1_min"), s.get("load1_max")) if v is not None]
    what = "many-files tree" if meta.get("workload") == "many-files" else f"scale {meta['scale']}"
    fig.suptitle(f"{meta['data_files']} files, {meta['data_bytes'] / 1e9:.2f} GB ({what}), "
                 f"{meta['machine']['cpus']} vCPU; medians of {meta['runs']} runs (bars: min-max); "
                 f"load average {min(loads):.1f}-{max(loads):.1f}; warm cache; lower is better", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "chart.png"), dpi=110)
    return True


def main():
    if sys.argv[1] == "--chart-only":
        out = sys.argv[2]
        meta, rows, verify, floor = load(out)
        chart(out, meta, summarise(rows, verify), floor)
        return
    out = sys.argv[1]
    meta, rows, verify, floor = load(out)
    summary = summarise(rows, verify)
    rats = ratios(summary)
    many = meta.get("workload") == "many-files"
    tg = many_files_targets(summary, meta) if many else targets(summary, floor)
    issue = "15" if many else "6"
    links = link_estimates(summary)
    text = table(summary, floor, False) + ratio_lines(rats, False) + target_lines(tg, False, issue) + link_lines(links, False)
    md = [("Many-files tree" if many else f"Scale {meta['scale']}") + f": {meta['data_files']} files, {meta['data_bytes']} bytes; {meta['runs']} runs; "
          f"{meta['machine']['cpus']} vCPU {meta['machine']['cpu_model']}, {meta['machine']['mem_kib'] // 1048576} GiB; "
          f"started {meta['started']}; {meta['cache']}; restores on {meta.get('restore_file_system', '?')}", "",
          "Versions: " + "; ".join(f"{k} {v}" for k, v in meta["versions"].items() if v), ""]
    md += table(summary, floor, True) + ratio_lines(rats, True) + target_lines(tg, True, issue) + link_lines(links, True)
    open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
    medians = [dict(v) for v in summary.values()]
    json.dump({"meta": meta, "floor": floor, "medians": medians, "ratios": rats, "targets": tg, "links": links,
               "raw": [derive(r) for r in rows], "verify": verify},
              open(os.path.join(out, "results.json"), "w"), indent=1)
    keys = ["tool", "mode", "phase", "runs", "failed", "wall_s", "wall_min", "wall_max", "cpu_s", "user_s", "sys_s",
            "rss_mib", "added_bytes", "repo_bytes_after", "up_bytes", "down_bytes", "requests", "server_cpu_s",
            "reported_bytes", "load1_before", "load1_min", "load1_max", "others_cores", "verified"]
    write_csv(os.path.join(out, "results.csv"), medians, keys)
    raw_keys = ["tool", "mode", "run", "phase", "rc", "started", "wall_s", "cpu_s", "user_s", "sys_s", "rss_mib",
                "added_bytes", "repo_bytes_after", "up_bytes", "down_bytes", "requests", "server_cpu_s", "reported_bytes",
                "load1_before", "load1_after", "others_cores"]
    write_csv(os.path.join(out, "raw.csv"), [derive(r) for r in rows], raw_keys)
    print("\n".join(text))
    if chart(out, meta, summary):
        print(f"chart: {os.path.join(out, 'chart.png')}")
    print(f"results: {out}/results.json, results.csv, raw.csv, results.md")


if __name__ == "__main__":
    main()
