#!/usr/bin/env python3
"""steps and treadle side by side on pipelines of `true` tasks (issue 42, "Must show").

    python3 benches/vs_steps.py [--sizes 10,100,1000] [--rounds 3]
                                [--treadle PATH] [--steps PATH] [--before PATH] [--quick]

For each size N, one job of N tasks that each run `true`. Each round, for each tool (the
order swapped every round, so that load from the rest of the machine falls on both alike):
the pipeline in a fresh folder holding only `pipeline.yml` (fresh: every task runs), then
again in the same folder (cached: steps replays its steps from `.steps/`, treadle from its
state file's cache). Each is the whole process under `/usr/bin/time`: wall, user + system
CPU (the process and the `sh -c true` children it waited for), peak RSS. The table gives the
median of the rounds, the ratio treadle / steps (one ratio when wall and CPU agree to 0.1,
both otherwise), and the load average before and after, since a loaded machine stretches
wall time more than CPU.

Defaults: treadle is `$CARGO_TARGET_DIR/release/treadle` (else `target/release/treadle`; build
it with `cargo build --release --workspace --bin treadle`), steps is `../shared/peers/steps`
beside the repository (jtarchie/steps at 63e66e0, prebuilt; see its README). Both run with
their defaults: treadle confined (Landlock) and durable (every step's end synced), steps
with its SQLite store. `--quick` runs 2 and 5 tasks once, to check the script itself.
`--before PATH`: another treadle build (the one a change started from) run in the same
rounds, so that a change's before and after are measured under the same load; the table
then adds its figures and after / before.

Why a script: the comparison is of whole processes of two programs, started from a shell
as a user would; the timing is `/usr/bin/time`'s.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIME = "/usr/bin/time"


def default_treadle():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    return os.path.join(target, "release", "treadle")


def default_steps():
    return os.path.join(os.path.dirname(ROOT), "shared", "peers", "steps")


def pipeline(n):
    lines = ["jobs:", "  - name: bench", "    plan:"]
    for i in range(n):
        lines += [f"      - task: t{i}", "        run: 'true'"]
    return "\n".join(lines) + "\n"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# How each tool says, in its output, that it replayed a step instead of running it.
# steps says `skip: t0 (cached)` for the first and `skip: t1 (chain)` for those after it.
REPLAYED = {"steps": "skip: ", "treadle": "cached: not run", "before": "cached: not run"}


def fail(why, said):
    """Stops the script with why and the end of what the tool printed (the scratch folder,
    with its logs, is gone when the script ends)."""
    tail = "\n".join(said.splitlines()[-20:])
    sys.exit(f"{why}; it printed, last lines:\n{tail}")


def timed(argv, cwd, log):
    """Runs argv in cwd under /usr/bin/time; returns (wall s, cpu s, peak RSS MB) and
    what it printed."""
    out = os.path.join(cwd, "..", os.path.basename(cwd) + ".time")
    done = subprocess.run(
        [TIME, "-o", out, "-f", "%e %U %S %M", *argv],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    with open(log, "ab") as sink:
        sink.write(done.stdout)
    if done.returncode != 0:
        said = done.stdout.decode(errors="replace")
        fail(f"{' '.join(argv)} in {cwd} failed ({done.returncode})", said)
    with open(out) as f:
        # /usr/bin/time may print a line of its own before the figures (a signal).
        wall, user, system, rss_kb = f.read().split()[-4:]
    figures = (float(wall), float(user) + float(system), int(rss_kb) / 1024)
    return figures, done.stdout.decode(errors="replace")


def run_pair(tool, binary, n, scratch, rnd):
    """The fresh and the cached run of `tool` on n tasks in a new folder."""
    folder = os.path.join(scratch, f"{tool}-{n}-{rnd}")
    os.makedirs(folder)
    with open(os.path.join(folder, "pipeline.yml"), "w") as f:
        f.write(pipeline(n))
    log = os.path.join(scratch, f"{tool}.log")
    argv = [binary, "run", "pipeline.yml"]
    fresh, said = timed(argv, folder, log)
    if said.count(REPLAYED[tool]) != 0:
        fail(f"{tool} replayed steps of a fresh run in {folder}", said)
    cached, said = timed(argv, folder, log)
    # A cached run that ran its tasks again would be timed as cached: it must not pass.
    if said.count(REPLAYED[tool]) != n:
        replayed = said.count(REPLAYED[tool])
        fail(f"{tool} replayed {replayed} of {n} steps in the cached run in {folder}", said)
    return fresh, cached


def median(xs):
    return statistics.median(xs)


def ratio(t, s):
    return t / s if s > 0 else float("nan")


def ratios(tw, tc, sw, sc):
    rw, rc = ratio(tw, sw), ratio(tc, sc)
    if abs(rw - rc) < 0.1:
        return f"{rw:.1f}x"
    return f"{rw:.1f}x wall, {rc:.1f}x CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--treadle", default=default_treadle())
    ap.add_argument("--steps", default=default_steps())
    ap.add_argument("--before", help="another treadle build, timed in the same rounds")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [2, 5] if args.quick else [int(s.replace("_", "")) for s in args.sizes.split(",")]
    rounds = 1 if args.quick else args.rounds
    tools = {"steps": args.steps, "treadle": args.treadle}
    if args.before:
        tools["before"] = args.before
    for name, path in tools.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"SKIP: no {name} binary at {path} (--{name} PATH)")
    if not os.access(TIME, os.X_OK):
        sys.exit(f"SKIP: no {TIME} (apt-get install time)")
    load_before = loadavg()
    # {(tool, n, "fresh"|"cached"): [(wall, cpu, rss), ...]}
    got = {}
    with tempfile.TemporaryDirectory(prefix="vs-steps-") as scratch:
        for n in sizes:
            for rnd in range(rounds):
                order = list(tools) if rnd % 2 == 0 else list(reversed(list(tools)))
                for tool in order:
                    fresh, cached = run_pair(tool, tools[tool], n, scratch, rnd)
                    got.setdefault((tool, n, "fresh"), []).append(fresh)
                    got.setdefault((tool, n, "cached"), []).append(cached)
                    print(
                        f"# {tool} n={n} round {rnd}: fresh {fresh[0]:.2f} s / "
                        f"{fresh[1]:.2f} s CPU, cached {cached[0]:.2f} s / {cached[1]:.2f} s CPU"
                        f" (load {loadavg()})",
                        file=sys.stderr,
                    )
    load_after = loadavg()
    print(f"Load average before / after: {load_before} / {load_after}; {os.cpu_count()} cores;")
    print(f"medians of {rounds}; treadle {args.treadle}; steps {args.steps}")
    print()
    head = "| N `true` tasks, one job | steps wall / CPU | treadle wall / CPU | treadle / steps "
    head += "| peak RSS steps / treadle |"
    if args.before:
        head += " treadle before: wall / CPU | after / before |"
    print(head)
    print("|---" * head.count(" |") + "|")
    for n in sizes:
        for kind in ("fresh", "cached"):
            s, t = got[("steps", n, kind)], got[("treadle", n, kind)]
            sw, sc, sr = (median([x[i] for x in s]) for i in range(3))
            tw, tc, tr = (median([x[i] for x in t]) for i in range(3))
            row = (
                f"| {n:,}, {kind} | {sw:.2f} s / {sc:.2f} s | {tw:.2f} s / {tc:.2f} s "
                f"| {ratios(tw, tc, sw, sc)} | {sr:.0f} / {tr:.0f} MB |"
            )
            if args.before:
                b = got[("before", n, kind)]
                bw, bc = (median([x[i] for x in b]) for i in range(2))
                row += f" {bw:.2f} s / {bc:.2f} s | {ratios(tw, tc, bw, bc)} |"
            print(row)


if __name__ == "__main__":
    main()
