# exec logger: a line for every program started on this host. psutil has no
# process events: it polls, and misses every program shorter than a tick.
import time, psutil
seen = {p.pid: p.create_time() for p in psutil.process_iter()}
while True:
    time.sleep(0.1)
    now = {}
    for p in psutil.process_iter(["pid", "ppid", "uids", "cmdline", "name", "create_time"]):
        i = p.info
        now[i["pid"]] = i["create_time"]
        if seen.get(i["pid"]) != i["create_time"]:
            uid = i["uids"].real if i["uids"] else "?"
            print(time.strftime("%H:%M:%S"), i["pid"], i["ppid"], uid, " ".join(i["cmdline"] or [i["name"] or "?"]))
    seen = now
