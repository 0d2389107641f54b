-- examples/runaway.lua against the same policy in psutil (doc/psutil/
-- runaway-killer.py with its grace, timeout and scope as arguments): CPU per
-- check, both scoped to one cgroup holding a herd of 0, 1,000 and 10,000
-- idle processes (none of which is ever hot). The example checks every
-- 0.25 s and its CPU time (schedstat) over 5 s after a 1 s warm-up is
-- divided by the 20 checks its timer made. The psutil script measures each
-- of its checks itself (time.process_time around the work, printed); the
-- mean of its second and third check is taken. Rounds alternate which runs
-- first. HERDS="0 1000" ROUNDS=3.
package.path = "./bench/?.lua;" .. package.path
local X = require "exlib"   -- first: it points package.path at this tree
local takana = require "takana"

local PYTHON = "/usr/bin/python3"
if not os.execute(PYTHON .. " -c 'import psutil' 2>/dev/null") then
  print("ex_runaway skipped: python3-psutil is not installed")
  os.exit(0)
end
local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 3
local INTERVAL, WINDOW = 0.25, 5
local HERDS = {}
for n in (os.getenv("HERDS") or "0 1000 10000"):gmatch("%d+") do HERDS[#HERDS + 1] = tonumber(n) end

-- doc/psutil/runaway-killer.py, its constants as arguments, plus the
-- example's grace time and SIGKILL after a timeout.
local PSUTIL = [[
import os, sys, time, psutil
CG, INTERVAL, SHARE, GRACE, TIMEOUT = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])

def members():
    pids = []
    for d, _, _ in os.walk(CG):
        pids += [int(line) for line in open(os.path.join(d, "cgroup.procs"))]
    procs = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.cpu_percent()
            procs[pid] = p
        except psutil.NoSuchProcess:
            pass
    return procs

since, termed, procs = {}, {}, members()
while True:
    time.sleep(INTERVAL)
    now, hot, cpu0 = time.monotonic(), {}, time.process_time()
    for pid, p in procs.items():
        try:
            share = p.cpu_percent() / 100
            if share > SHARE and pid not in termed:
                hot[pid] = since.get(pid, now)
                if now - hot[pid] >= GRACE:
                    print(f"term {pid} {p.name()} at {share * 100:.0f} % of a CPU", flush=True)
                    p.terminate()
                    termed[pid] = (p, now + TIMEOUT)
        except psutil.NoSuchProcess:
            pass
    for pid, (p, deadline) in list(termed.items()):
        if not p.is_running():
            del termed[pid]
        elif now >= deadline:
            print(f"kill {pid}", flush=True)
            p.kill()
            del termed[pid]
    since = hot
    fresh = members()
    procs = {pid: procs.get(pid, p) for pid, p in fresh.items()}
    print("check", (time.process_time() - cpu0) * 1000, flush=True)
]]

local cg = assert(X.cgroup())
local mount = assert(assert(io.open("/proc/self/mounts")):read("a"):match("%S+ (%S+) cgroup2 "))
-- Each returns the CPU ms of one check.
local contenders = {
  { name = "takana examples/runaway.lua", measure = function()
    local p = X.example("runaway", { "--cgroup", cg.path, "--interval", tostring(INTERVAL), "--grace", "10" })
    takana.poll({}, 1)   -- start-up and the first check are not counted
    local c0 = X.cpu_ns(p.pid)
    takana.poll({}, WINDOW)
    local cpu = X.cpu_ns(p.pid) - c0
    p:signal("KILL")
    p:wait()
    p:close()
    return cpu / 1e6 / (WINDOW / INTERVAL)
  end },
  { name = "psutil script", measure = function()
    local p = assert(takana.spawn { PYTHON, "-c", PSUTIL, mount .. cg.path, "1", "0.5", "10", "5",
      stdout = "pipe", pdeathsig = "KILL" })
    local ms = {}
    for k = 1, 3 do ms[k] = tonumber(assert(p.stdout:read_line(60)):match("^check (%S+)")) end
    p:signal("KILL")
    p:wait()
    p:close()
    return (ms[2] + ms[3]) / 2
  end },
}
print(("== runaway: CPU per check (ms), min / median of %d rounds =="):format(ROUNDS))
for _, n in ipairs(HERDS) do
  local stop = n > 0 and X.herd(n, cg) or function() end
  local ms = {}
  for _, c in ipairs(contenders) do ms[c.name] = {} end
  for r = 1, ROUNDS do
    local order = r % 2 == 1 and { 1, 2 } or { 2, 1 }
    for _, i in ipairs(order) do
      local c = contenders[i]
      table.insert(ms[c.name], c.measure())
    end
  end
  local a_min, a_med = X.stats(ms[contenders[1].name])
  local b_min, b_med = X.stats(ms[contenders[2].name])
  print(("  +%-6d processes  takana %8.2f / %8.2f   psutil %8.2f / %8.2f   ratio %.3f"):format(
    n, a_min, a_med, b_min, b_med, a_min / b_min))
  X.row("runaway", ("CPU per check, %d processes in scope"):format(n), ("%.2f ms"):format(a_min),
    "psutil script", ("%.2f ms"):format(b_min))
  stop()
end
X.remove(cg)
