# supervisor: a web server and a worker, restarted when they fail, logged to files.
# No cgroups (a daemon that forks escapes), no control socket, no log rotation,
# no readiness: psutil has none of these.
import signal, subprocess, time, psutil
SERVICES = {
    "web": ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"],
    "worker": ["sh", "-c", "while sleep 1; do echo tick; done"],
}
procs, delay, stopping = {}, {}, False

def stop(*_):
    global stopping
    stopping = True

signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)

def start(name):
    log = open(f"/var/log/workload/{name}.log", "a")
    procs[name] = psutil.Popen(SERVICES[name], stdout=log, stderr=subprocess.STDOUT)

for name in SERVICES:
    start(name)
while not stopping:
    time.sleep(0.5)
    for name, p in list(procs.items()):
        if p.poll() is not None:
            print(f"{name} exited with {p.returncode}")
            time.sleep(delay.get(name, 1))
            delay[name] = min(delay.get(name, 1) * 2, 60)
            start(name)
for name in reversed(list(procs)):
    procs[name].terminate()
    try:
        procs[name].wait(5)
    except psutil.TimeoutExpired:
        procs[name].kill()
