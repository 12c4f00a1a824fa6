#!/usr/bin/env python3
"""CPU and memory per step on a pinned core (issue 32): treadle against a raw client.

    python3 benches/pinned.py [--repeats 3] [--bin PATH] [--before PATH] [--quick]

An independent echo server (benches/pinned_server.py: uvloop + httptools) runs in its own
process pinned to core 1; each driver runs pinned to core 0: the raw reqwest + serde_json
loop (`bench_turn --raw`, single-threaded runtime: the floor) and treadle (`bench_turn`, the
durable journal on). For each configuration K x S (K echo tool calls then a text answer, S
sessions at once) the two drivers alternate, in turn order swapped every repeat, so that
load from the rest of the machine falls on both alike; the table gives medians over the
repeats. Per step = wall / (S * (K + 1)); CPU is the driver's user + system time over the
turns (CLOCK_PROCESS_CPUTIME_ID); peak RSS is the driver's own VmHWM (wait4's ru_maxrss
would carry the forking Python's size across the exec); the log sync is the median of 50 probes of the
journal's own operation (512 bytes written in place, fdatasync) taken by treadle's driver
after each run, beside the journal's mean. One more treadle run of 20 x 100 counts the heap
to give what an idle session holds between turns.

treadle runs on tokio's current-thread runtime, as the raw loop does: a process pinned to
one core has one thread to run its tasks on. `--multi-thread` runs it on the multi-threaded
runtime instead (one worker on one core), to show what that runtime costs.

--runtimes adds a third driver, treadle on the multi-threaded runtime (one worker on its
one core), interleaved with the other two, and a table of the two runtimes from the same
run (issue 42: the multi-threaded runtime within 10% of current-thread).

--before PATH adds a third driver, an earlier build of bench_turn (a copy of the binary
before a change), interleaved with the other two, and a table of that change: CPU per
step, peak RSS and the idle session before and after, from the same run.

Without --bin the release build of the driver is made first
(`cargo build --release -p treadle-session --example bench_turn`). --quick runs tiny sizes
once (the smoke run of pkg-session/benches/pinned.rs under `cargo test`, whose binary is
the same driver and passes itself as --bin).

Why a Python script around a Rust binary: the server must be another process on another
core, and the two drivers other processes still (each has its own peak RSS), so the bench is
the orchestration of processes, which a short script does plainly; the timing is in Rust.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = [(200, 1), (20, 100), (5, 1000), (5, 3000)]
QUICK = [(3, 1), (2, 4)]
DRIVERS = ("raw", "treadle")
# Set from --multi-thread: treadle's drivers then run on the multi-threaded runtime.
MULTI_THREAD = False


def cores():
    return len(os.sched_getaffinity(0))


def pinned(core, argv):
    """argv pinned to `core` when the machine has two cores and taskset is there."""
    if cores() >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(core)] + argv
    return argv


def start_server(k):
    server = os.path.join(ROOT, "benches", "pinned_server.py")
    proc = subprocess.Popen(pinned(1, [sys.executable, server, str(k)]),
                            stdout=subprocess.PIPE, text=True)
    kind = proc.stdout.readline().strip()
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise SystemExit(f"pinned.py: the server did not start ({kind!r})")
    return proc, kind, url


def cpu_seconds(pid):
    """utime + stime of a process so far, from /proc (its server's share of the run)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(binary, url, k, s, driver, server_pid, extra=()):
    """One run of `driver`; `binary` is a path, or a dict of paths by driver."""
    if isinstance(binary, dict):
        binary = binary[driver]
    argv = [binary, "--endpoint", url, "--steps", str(k), "--sessions", str(s), *extra]
    if driver == "raw":
        argv.append("--raw")
    elif driver != "multi-thread" and not MULTI_THREAD:
        argv.append("--current-thread")
    server_before = cpu_seconds(server_pid)
    proc = subprocess.Popen(pinned(0, argv), stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, _ = os.wait4(proc.pid, 0)
    proc.stdout.close()
    if status != 0:
        raise SystemExit(f"pinned.py: {driver} {k}x{s} failed (status {status}): {out}")
    line = json.loads(out.strip().splitlines()[-1])
    line["server_cpu_share"] = (cpu_seconds(server_pid) - server_before) / line["wall_s"]
    return line


def med(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def measure(binary, configs, repeats):
    drivers = tuple(binary) if isinstance(binary, dict) else DRIVERS
    rows = []
    for k, s in configs:
        server, kind, url = start_server(k)
        try:
            runs = {d: [] for d in drivers}
            for rep in range(repeats):
                order = drivers if rep % 2 == 0 else drivers[::-1]
                for driver in order:
                    runs[driver].append(drive(binary, url, k, s, driver, server.pid))
            idle = None
            idle_before = None
            if (k, s) in ((20, 100), QUICK[-1]):
                line = drive(binary, url, k, s, "treadle", server.pid, ("--count-heap",))
                idle = line.get("heap_per_idle_session_kb")
                if "before" in drivers:
                    line = drive(binary, url, k, s, "before", server.pid, ("--count-heap",))
                    idle_before = line.get("heap_per_idle_session_kb")
        finally:
            server.kill()
            server.wait()
        rows.append({"k": k, "s": s, "server": kind, "runs": runs, "idle_kb": idle,
                     "idle_before_kb": idle_before, "loadavg": loadavg()})
        print(f"# {k} x {s}: " + json.dumps(runs), file=sys.stderr, flush=True)
    return rows


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def table(rows):
    out = ["| K x S | raw µs/step | treadle µs/step | ratio | raw CPU µs/step | "
           "treadle CPU µs/step | CPU ratio | server CPU share raw / treadle | raw peak RSS MB | "
           "treadle peak RSS MB | RSS ratio | log syncs/step | log sync median µs "
           "(probe) / journal mean | load |",
           "|" + "---|" * 15]
    for row in rows:
        raw, tr = row["runs"]["raw"], row["runs"]["treadle"]
        r_us, t_us = med(raw, "per_step_us"), med(tr, "per_step_us")
        r_rss, t_rss = med(raw, "peak_rss_mb"), med(tr, "peak_rss_mb")
        out.append(
            f"| {row['k']} x {row['s']:,} | {r_us:,.0f} | {t_us:,.0f} | {t_us / r_us:.2f} | "
            f"{med(raw, 'cpu_per_step_us'):,.0f} | {med(tr, 'cpu_per_step_us'):,.0f} | "
            f"{med(tr, 'cpu_per_step_us') / med(raw, 'cpu_per_step_us'):.2f} | "
            f"{med(raw, 'server_cpu_share'):.0%} / {med(tr, 'server_cpu_share'):.0%} | "
            f"{r_rss:.1f} | {t_rss:.1f} | {t_rss / r_rss:.2f} | "
            f"{med(tr, 'log_syncs_per_step'):.2f} | "
            f"{med(tr, 'probe_log_sync_median_us'):,.0f} / "
            f"{med(tr, 'journal_mean_log_sync_us'):,.0f} | {row['loadavg']} |")
    return "\n".join(out)


def change_table(rows):
    """Before and after a change (--before), from the same interleaved run."""
    out = ["| K x S | CPU µs/step before | after | change | peak RSS MB before | after | "
           "change | idle session KB before | after |",
           "|" + "---|" * 9]
    for row in rows:
        b, a = row["runs"]["before"], row["runs"]["treadle"]
        b_cpu, a_cpu = med(b, "cpu_per_step_us"), med(a, "cpu_per_step_us")
        b_rss, a_rss = med(b, "peak_rss_mb"), med(a, "peak_rss_mb")
        idle = ("", "") if row["idle_kb"] is None else (
            f"{row['idle_before_kb']:.1f}", f"{row['idle_kb']:.1f}")
        out.append(f"| {row['k']} x {row['s']:,} | {b_cpu:,.0f} | {a_cpu:,.0f} | "
                   f"{a_cpu / b_cpu - 1:+.0%} | {b_rss:.1f} | {a_rss:.1f} | "
                   f"{a_rss / b_rss - 1:+.0%} | {idle[0]} | {idle[1]} |")
    return "\n".join(out)


def runtime_table(rows):
    """treadle on the current-thread and the multi-threaded runtime, from the same run."""
    out = ["| K x S | current-thread µs/step | multi-threaded µs/step | ratio | CPU µs/step "
           "current / multi | CPU ratio | log syncs/step current / multi | peak RSS MB "
           "current / multi |",
           "|" + "---|" * 8]
    for row in rows:
        c, m = row["runs"]["treadle"], row["runs"]["multi-thread"]
        c_us, m_us = med(c, "per_step_us"), med(m, "per_step_us")
        c_cpu, m_cpu = med(c, "cpu_per_step_us"), med(m, "cpu_per_step_us")
        out.append(f"| {row['k']} x {row['s']:,} | {c_us:,.0f} | {m_us:,.0f} | "
                   f"{m_us / c_us:.2f} | {c_cpu:,.0f} / {m_cpu:,.0f} | {m_cpu / c_cpu:.2f} | "
                   f"{med(c, 'log_syncs_per_step'):.3f} / {med(m, 'log_syncs_per_step'):.3f} | "
                   f"{med(c, 'peak_rss_mb'):.1f} / {med(m, 'peak_rss_mb'):.1f} |")
    return "\n".join(out)


def verdicts(rows):
    by = {(r["k"], r["s"]): r for r in rows}
    lines = []
    if (200, 1) in by:
        r = by[(200, 1)]["runs"]
        gap = med(r["treadle"], "per_step_us") - med(r["raw"], "per_step_us")
        sync = med(r["treadle"], "probe_log_sync_median_us")
        lines.append(f"200 x 1: treadle - raw = {gap:,.0f} µs per step, median log sync "
                     f"{sync:,.0f} µs: {'met' if gap <= sync else 'NOT met'}")
    if (20, 100) in by:
        row = by[(20, 100)]
        ratio = med(row["runs"]["treadle"], "per_step_us") / med(row["runs"]["raw"], "per_step_us")
        cpu = med(row["runs"]["treadle"], "cpu_per_step_us") / med(row["runs"]["raw"],
                                                                     "cpu_per_step_us")
        lines.append(f"20 x 100: {ratio:.2f} x raw per step (target 1.3, issue 42): "
                     f"{'met' if ratio <= 1.3 else 'NOT met'}; CPU per step {cpu:.2f} x raw")
        if row["idle_kb"] is not None:
            lines.append(f"idle session between turns: {row['idle_kb']:.1f} KB (target 16): "
                         f"{'met' if row['idle_kb'] < 16 else 'NOT met'}")
    if (5, 3000) in by:
        r = by[(5, 3000)]["runs"]
        ratio = med(r["treadle"], "peak_rss_mb") / med(r["raw"], "peak_rss_mb")
        lines.append(f"5 x 3,000 peak RSS: {ratio:.2f} x raw (target 1.3): "
                     f"{'met' if ratio <= 1.3 else 'NOT met'}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bin", help="bench_turn binary (default: build the release one)")
    ap.add_argument("--before", help="an earlier bench_turn binary, run as a third driver")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, once (smoke run)")
    ap.add_argument("--configs", help="K x S list, e.g. 200x1,20x100")
    ap.add_argument("--runtimes", action="store_true",
                    help="treadle on both runtimes, interleaved, and a table of the two")
    ap.add_argument("--multi-thread", action="store_true",
                    help="run treadle on the multi-threaded runtime (default: current-thread)")
    args = ap.parse_args()
    global MULTI_THREAD
    MULTI_THREAD = args.multi_thread
    binary = args.bin
    if binary is None:
        subprocess.run(["cargo", "build", "--release", "-p", "treadle-session",
                        "--example", "bench_turn"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target", "release", "examples", "bench_turn")
    configs = QUICK if args.quick else CONFIGS
    if args.configs:
        configs = [tuple(int(n) for n in c.split("x")) for c in args.configs.split(",")]
    repeats = 1 if args.quick else args.repeats
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_before = loadavg()
    if args.before:
        binary = {"raw": binary, "before": args.before, "treadle": binary}
    elif args.runtimes:
        binary = {"raw": binary, "treadle": binary, "multi-thread": binary}
    rows = measure(binary, configs, repeats)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; pinned: "
          f"{'driver core 0, server core 1' if cores() >= 2 else 'no (one core)'}; "
          f"server: {rows[0]['server']}")
    print(f"started {started}, load average {load_before} before, {loadavg()} after; "
          f"medians of {repeats} runs per driver, interleaved; treadle on the "
          f"{'multi-threaded' if MULTI_THREAD else 'current-thread'} runtime")
    print(table(rows))
    for line in verdicts(rows):
        print(line)
    if args.before:
        print()
        print(change_table(rows))
    elif args.runtimes:
        print()
        print(runtime_table(rows))


if __name__ == "__main__":
    main()
