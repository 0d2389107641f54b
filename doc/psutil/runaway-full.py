# runaway-full: examples/runaway.lua's policy and options in psutil, for an
# honest comparison of lines: a process above a CPU share for longer than a
# grace time gets SIGTERM, then SIGKILL if it still runs after a timeout.
# psutil checks a process's start time before signalling it, but a pid can
# still be reused between that check and the kill(2); takana signals through
# a pidfd.
import argparse, json, os, sys, time
import psutil

def number(text):
    value = float(text)
    if not 0 <= value < float("inf"):
        raise ValueError(text)
    return value

def whole(text):
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value

ap = argparse.ArgumentParser(prog="runaway-full.py", description="SIGTERM, then SIGKILL, a process above a CPU share.")
ap.add_argument("--cgroup", metavar="PATH", help="watch the processes of this cgroup and below (a path under the cgroup2 mount)")
ap.add_argument("--uid", metavar="N", type=whole, help="watch the processes of this user (with --cgroup: of both)")
ap.add_argument("--share", metavar="F", type=number, default=0.5, help="the share of one CPU that is too much (default 0.5)")
ap.add_argument("--grace", metavar="S", type=number, default=10, help="seconds a process may stay above it (default 10)")
ap.add_argument("--timeout", metavar="S", type=number, default=5, help="seconds from SIGTERM to SIGKILL (default 5)")
ap.add_argument("--interval", metavar="S", type=number, default=1, help="seconds between checks (default 1)")
ap.add_argument("--dry-run", action="store_true", help="log what would be signalled, signal nothing")
ap.add_argument("--json", action="store_true", help="log JSON lines")
opts = ap.parse_args()
if opts.cgroup is None and opts.uid is None:
    ap.error("--cgroup or --uid is needed: the whole host is no scope")
if opts.interval == 0:
    ap.error("--interval must be above 0")

def cgroup2_mount():
    for line in open("/proc/self/mounts"):
        fields = line.split()
        if fields[2] == "cgroup2":
            return fields[1]
    sys.exit("runaway-full: no cgroup2 hierarchy is mounted")

CG = opts.cgroup and os.path.join(cgroup2_mount(), opts.cgroup.lstrip("/"))
if CG and not os.path.isdir(CG):
    sys.exit(f"runaway-full: cgroup {opts.cgroup}: no such cgroup")

def in_scope():
    if CG:
        pids = set()
        for d, _, _ in os.walk(CG):
            try:
                pids.update(int(line) for line in open(os.path.join(d, "cgroup.procs")))
            except OSError:   # a cgroup removed meanwhile
                pass
    else:
        pids = psutil.pids()
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if opts.uid is None or p.uids().real == opts.uid:
                yield p
        except psutil.Error:
            pass

def log(action, pid, comm, why):
    if opts.json:
        print(json.dumps({"time": time.time(), "action": action, "pid": pid, "comm": comm,
                          "dry_run": opts.dry_run, "reason": why}, sort_keys=True))
    else:
        print(f"{time.strftime('%H:%M:%S')} {'would ' if opts.dry_run else ''}{action} {pid} {comm}: {why}")
    sys.stdout.flush()

def send(p, sig):
    if opts.dry_run:
        return None
    try:
        p.send_signal(sig)   # raises NoSuchProcess for a pid another process now has
    except psutil.Error as e:
        return str(e)

procs, hot, termed = {}, {}, {}   # pid -> Process; pid -> since when above; pid -> (Process, deadline, comm)
while True:
    now, still, seen = time.monotonic(), {}, {}
    for p in in_scope():
        old = procs.get(p.pid)
        if old is None or old.create_time() != p.create_time():
            p.cpu_percent()   # primes the counter: the share is known from the next check
            seen[p.pid] = p
            continue
        seen[p.pid] = old
        try:
            share, comm = old.cpu_percent() / 100, old.name()
        except psutil.Error:
            continue
        if share > opts.share and p.pid not in termed:
            still[p.pid] = hot.get(p.pid, now)
            if now - still[p.pid] >= opts.grace:
                why = (f"{share * 100:.0f} % of a CPU for {now - still[p.pid]:.1f} s "
                       f"(limit {opts.share * 100:.0f} % for {opts.grace:g} s)")
                err = send(old, 15)
                log("failed" if err else "term", p.pid, comm, f"TERM: {err}" if err else why)
                if not err:
                    termed[p.pid] = (old, now + opts.timeout, comm)
    for pid, (p, deadline, comm) in list(termed.items()):
        if not p.is_running():
            log("gone", pid, comm, "exited after the TERM")
        elif now >= deadline:
            err = send(p, 9)
            log("failed" if err else "kill", pid, comm, f"KILL: {err}" if err else
                f"still running {opts.timeout:g} s after the TERM")
        if not p.is_running() or now >= deadline:
            del termed[pid]
    procs, hot = seen, still
    time.sleep(opts.interval)
