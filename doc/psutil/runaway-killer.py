# runaway killer: SIGTERM a process of the workload that burns over half a CPU
# at three checks in a row, 2 s apart.
import os, time, psutil
CG = "/sys/fs/cgroup/workload"

def members():
    pids = []
    for d, _, _ in os.walk(CG):
        pids += [int(line) for line in open(os.path.join(d, "cgroup.procs"))]
    procs = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.cpu_percent()        # primes the counter for the next call
            procs[pid] = p
        except psutil.NoSuchProcess:
            pass
    return procs

strikes, procs = {}, members()
while True:
    time.sleep(2)
    hot = {}
    for pid, p in procs.items():
        try:
            share = p.cpu_percent() / 100
            if share > 0.5:
                hot[pid] = strikes.get(pid, 0) + 1
                if hot[pid] >= 3:
                    print(f"runaway: {pid} {p.name()} at {share * 100:.0f} % of a CPU")
                    p.terminate()
        except psutil.NoSuchProcess:
            pass
    strikes = hot
    fresh = members()
    procs = {pid: procs.get(pid, p) for pid, p in fresh.items()}
