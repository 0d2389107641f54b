# cgroup exporter: CPU, memory and memory pressure of each cgroup below the workload,
# every 15 s, for node_exporter's textfile collector.
import os, time
CG, DIR = "/sys/fs/cgroup/workload", "/var/lib/prometheus/node-exporter"

def read(path, name):
    try:
        with open(os.path.join(path, name)) as f:
            return f.read()
    except OSError:
        return None

def stat(path):
    s = {}
    cpu = read(path, "cpu.stat")
    if cpu:
        s["cgroup_cpu_seconds_total"] = int(dict(l.split() for l in cpu.splitlines())["usage_usec"]) / 1e6
    mem = read(path, "memory.current")
    if mem:
        s["cgroup_memory_bytes"] = int(mem)
    psi = read(path, "memory.pressure")
    if psi:
        s["cgroup_memory_pressure_some_ratio"] = float(psi.split()[1].split("=")[1]) / 100
    return s

def esc(v):
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

TYPES = {"cgroup_cpu_seconds_total": "counter", "cgroup_memory_bytes": "gauge",
         "cgroup_memory_pressure_some_ratio": "gauge"}
while True:
    stats = {"/" + os.path.relpath(e.path, "/sys/fs/cgroup"): stat(e.path)
             for e in os.scandir(CG) if e.is_dir()}
    out = []
    for name, kind in TYPES.items():
        out.append(f"# TYPE {name} {kind}")
        out += [f'{name}{{cgroup="{esc(p)}"}} {s[name]!r}' for p, s in stats.items() if name in s]
    tmp = os.path.join(DIR, ".cgroups.prom.tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(DIR, "cgroups.prom"))
    time.sleep(15)
