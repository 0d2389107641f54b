# exporter-full: examples/exporter.lua's metrics and options in psutil and
# http.server, for an honest comparison of lines. psutil has no page fault
# counts and no kernel-thread flag on Linux: /proc/PID/stat gives both.
# --match takes a Python regular expression where the example takes a Lua
# pattern.
import argparse, json, os, re, sys, tempfile, time
from http.server import BaseHTTPRequestHandler, HTTPServer
import psutil

def seconds(text):
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError(text)
    return value

ap = argparse.ArgumentParser(prog="exporter-full.py", description="Prometheus metrics per process group and cgroup.")
mode = ap.add_mutually_exclusive_group()
mode.add_argument("--listen", metavar="[ADDR:]PORT", help="serve GET /metrics over HTTP (default 127.0.0.1:9256)")
mode.add_argument("--textfile", metavar="DIR", help="write DIR/takana-exporter.prom every --interval seconds instead")
mode.add_argument("--once", action="store_true", help="print the metrics on stdout once and exit")
ap.add_argument("--group-by", choices=["comm", "cgroup"], default="comm", help="name the processes no --match took")
ap.add_argument("--match", metavar="NAME=REGEX", action="append", default=[],
                help="the group NAME: processes whose command line matches REGEX; repeatable, the first match wins")
ap.add_argument("--cgroup", metavar="PATH", action="append", default=[],
                help="also each cgroup of PATH's subtree: CPU, memory, pids, pressure; repeatable")
ap.add_argument("--interval", metavar="S", type=seconds, default=15, help="seconds between textfile writes (default 15)")
ap.add_argument("--json", action="store_true", help="log JSON lines")
opts = ap.parse_args()
groups = []
for m in opts.match:
    name, _, pattern = m.partition("=")
    try:
        groups.append((name, re.compile(pattern)))
    except re.error:
        pattern = ""
    if not name or not pattern:
        ap.error(f"bad --match {m}")
addr = re.fullmatch(r"(?:(.*):)?(\d+)", opts.listen or "9256")
if not addr:
    ap.error("--listen needs [ADDR:]PORT")

def log(msg):
    print(json.dumps({"time": time.time(), "msg": msg}) if opts.json else f"exporter-full: {msg}", file=sys.stderr, flush=True)

def cgroup2_mount():
    for line in open("/proc/self/mounts"):
        if line.split()[2] == "cgroup2":
            return line.split()[1]
    return None

MOUNT = cgroup2_mount()
for root in opts.cgroup:   # a cgroup that is not there is a mistake to report now
    if not MOUNT or not os.path.isdir(os.path.join(MOUNT, root.lstrip("/"))):
        log(f"cgroup {root}: no such cgroup")
        sys.exit(1)

class Metrics:
    def __init__(self):
        self.families = {}
    def add(self, kind, name, help, labels, value):
        family = self.families.setdefault(name, (kind, help, []))
        family[2].append((labels, value))
    def text(self):
        out = []
        for name, (kind, help, samples) in self.families.items():
            out += [f"# HELP {name} {help}", f"# TYPE {name} {kind}"]
            for labels, value in samples:
                ls = ",".join('%s="%s"' % (k, str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
                              for k, v in labels.items())
                out.append(f"{name}{{{ls}}} {value!r}")
        return "\n".join(out) + "\n"

def stat_fields(pid):   # /proc/PID/stat after the comm: flags, minflt, majflt
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[6]), int(f[7]), int(f[9])

def group_of(p):
    if groups:
        line = " ".join(p.cmdline())
        for name, pattern in groups:
            if pattern.search(line):
                return name
    if opts.group_by == "cgroup":
        for line in open(f"/proc/{p.pid}/cgroup"):
            if line.startswith("0::"):
                return line[3:].strip()
        return "?"
    return p.name()

def read_kv(path):
    try:
        return dict(line.split()[:2] for line in open(path))
    except OSError:
        return None

def metrics():
    t0, m, sums = time.monotonic(), Metrics(), {}
    boot = psutil.boot_time()
    for p in psutil.process_iter():
        try:
            with p.oneshot():
                flags, minflt, majflt = stat_fields(p.pid)
                if flags & 0x00200000:   # PF_KTHREAD
                    continue
                name, cpu, mem = group_of(p), p.cpu_times(), p.memory_info()
                g = sums.setdefault(name, {"procs": 0, "threads": 0, "user": 0, "system": 0, "rss": 0, "vms": 0,
                                           "minflt": 0, "majflt": 0, "start": float("inf")})
                g["procs"] += 1
                g["threads"] += p.num_threads()
                g["user"] += cpu.user
                g["system"] += cpu.system
                g["rss"] += mem.rss
                g["vms"] += mem.vms
                g["minflt"] += minflt
                g["majflt"] += majflt
                g["start"] = min(g["start"], p.create_time())
        except (psutil.Error, OSError):   # gone meanwhile
            pass
    P = "namedprocess_namegroup_"
    for name, g in sums.items():
        l = {"groupname": name}
        m.add("gauge", P + "num_procs", "number of processes in this group", l, g["procs"])
        m.add("gauge", P + "num_threads", "Number of threads", l, g["threads"])
        for mode in ("user", "system"):
            m.add("counter", P + "cpu_seconds_total", "Cpu user usage in seconds", {**l, "mode": mode}, g[mode])
        m.add("gauge", P + "memory_bytes", "number of bytes of memory in use", {**l, "memtype": "resident"}, g["rss"])
        m.add("gauge", P + "memory_bytes", "number of bytes of memory in use", {**l, "memtype": "virtual"}, g["vms"])
        m.add("counter", P + "minor_page_faults_total", "Minor page faults", l, g["minflt"])
        m.add("counter", P + "major_page_faults_total", "Major page faults", l, g["majflt"])
        m.add("gauge", P + "oldest_start_time_seconds",
              "start time in seconds since 1970/01/01 of oldest process in group", l, max(g["start"], boot))
    for root in opts.cgroup:
        top = os.path.join(MOUNT, root.lstrip("/"))
        if not os.path.isdir(top):
            raise OSError(f"cgroup {root}: cannot read its stats")
        for d, _, _ in os.walk(top):
            l = {"cgroup": "/" + os.path.relpath(d, MOUNT).removeprefix(".")}
            cpu = read_kv(os.path.join(d, "cpu.stat"))
            if cpu:
                m.add("counter", "takana_cgroup_cpu_usage_seconds_total", "cpu.stat usage.", l, int(cpu["usage_usec"]) / 1e6)
            for f, name, help in (("memory.current", "takana_cgroup_memory_current_bytes", "memory.current."),
                                  ("pids.current", "takana_cgroup_pids_current", "pids.current.")):
                if os.path.exists(os.path.join(d, f)):
                    m.add("gauge", name, help, l, int(open(os.path.join(d, f)).read()))
            for res in ("cpu", "memory", "io"):
                try:
                    for line in open(os.path.join(d, res + ".pressure")):
                        kind, total = line.split()[0], int(line.split()[4].split("=")[1])
                        m.add("counter", "takana_cgroup_pressure_stalled_seconds_total", "PSI total stall time.",
                              {**l, "resource": res, "kind": kind}, total / 1e6)
                except OSError:
                    pass
    m.add("gauge", "takana_scrape_duration_seconds", "Time this scrape took.", {"backend": "psutil"}, time.monotonic() - t0)
    return m.text()

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        status, body = 404, "GET /metrics\n"
        if self.path == "/metrics":
            try:
                status, body = 200, metrics()
            except OSError as e:
                log(f"scrape failed: {e}")
                status, body = 500, f"{e}\n"
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())
    def log_message(self, *args):
        pass

if opts.once:
    try:
        sys.stdout.write(metrics())
    except OSError as e:
        log(str(e))
        sys.exit(1)
elif opts.textfile:
    while True:
        try:
            fd, tmp = tempfile.mkstemp(dir=opts.textfile, prefix=".takana-exporter.prom.")
            with os.fdopen(fd, "w") as f:
                f.write(metrics())
            os.replace(tmp, os.path.join(opts.textfile, "takana-exporter.prom"))
        except OSError as e:
            log(f"not written: {e}")
        time.sleep(opts.interval)
else:
    try:
        server = HTTPServer((addr[1] or "127.0.0.1", int(addr[2])), Handler)
    except OSError as e:
        log(f"listen {opts.listen or addr[2]}: {e}")
        sys.exit(1)
    log("serving http://%s:%d/metrics" % server.server_address)
    server.serve_forever()
