# oom-guard: when the workload's memory stalls 10 % of any 2 s, kill its largest process.
import os, select, signal, time, psutil
CG = "/sys/fs/cgroup/workload"
fd = os.open(CG + "/memory.pressure", os.O_RDWR | os.O_NONBLOCK)
os.write(fd, b"some 200000 2000000\0")
poller = select.poll()
poller.register(fd, select.POLLPRI)
calm = 0
while True:
    if not poller.poll(60_000) or time.monotonic() < calm:
        continue
    pids = []
    for d, _, files in os.walk(CG):
        pids += [int(line) for line in open(os.path.join(d, "cgroup.procs"))]
    victim = None
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if not victim or p.memory_info().rss > victim[1]:
                victim = (p, p.memory_info().rss)
        except psutil.NoSuchProcess:
            pass
    if victim:
        avg10 = float(open(CG + "/memory.pressure").read().split()[1].split("=")[1])
        print(f"memory some {avg10:.1f} %: killing {victim[0].pid} {victim[0].name()} ({victim[1] >> 20} MiB)")
        try:
            victim[0].send_signal(signal.SIGKILL)
            calm = time.monotonic() + 10
        except psutil.NoSuchProcess:
            pass
