-- make bench: restart latency, supervisor CPU per 1,000 restarts and memory
-- with 100 services, for takana.supervisor against s6-supervise (s6) and
-- runsv (runit), measured in one run, one contender after the other.
--
-- Latency is from a service's exit to the exec of its replacement, both
-- taken from the bpf event stream (kernel timestamps, CLOCK_BOOTTIME), so
-- every supervisor is measured by the same outside clock. Needs root (bpf
-- events, cgroups) and the Debian packages s6 and runit.
--
-- s6-supervise and runsv wait until a second has passed since the last
-- start before they start ./run again; a service that dies at once would
-- measure that throttle, not the supervisor. So each service lives LIFE
-- seconds (default 1.1) and K services (default 50) run side by side, to
-- gather RESTARTS (default 1000) restarts in about RESTARTS / K * LIFE s.
-- First, reload (bench_reload below; RELOAD=0 skips it).
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local core = require "takana.core"

local K = tonumber(os.getenv("SERVICES") or "") or 50
local RESTARTS = tonumber(os.getenv("RESTARTS") or "") or 1000
local LIFE = tonumber(os.getenv("LIFE") or "") or 1.1
local IDLE = tonumber(os.getenv("IDLE_SERVICES") or "") or 100
local LIMIT_S = RESTARTS / K * LIFE * 2 + 20

local function sh(cmd) return os.execute(cmd) end
local function have(prog) return sh("command -v " .. prog .. " >/dev/null 2>&1") end

-- Reload (issue 22): RELOAD_SERVICES (default 50) idle services under one
-- supervisor, the declaration of one changed (its argv), RELOADS (default
-- 20) times: how long sup:reload takes to diff and apply, and how long
-- until the changed service runs again; then the same through `takana
-- supervise FILE` and `takana ctl SOCKET reload` (the file run again, the
-- diff, the answer). Every other service must keep its pid (checked, and
-- said). takana alone: s6-svscan and runsvdir have no declaration to
-- compare (a rescan only notices service directories added or removed; a
-- changed ./run waits for an `s6-svc -r` or `sv restart` by hand).
local function write_file_reload(path, text)
  local h = assert(io.open(path, "w"))
  h:write(text)
  h:close()
end

local function bench_reload()
  local n = tonumber(os.getenv("RELOAD_SERVICES") or "") or 50
  local rounds = tonumber(os.getenv("RELOADS") or "") or 20
  local S = require "takana.supervisor"
  local now = takana.now or core.monotime
  local rmnt
  for line in io.lines("/proc/self/mountinfo") do
    local m, fstype = line:match("^%S+ %S+ %S+ %S+ (%S+) .- %- (%S+)")
    if fstype == "cgroup2" then rmnt = m end
  end
  if core.geteuid() ~= 0 or not rmnt then
    print("== supervise reload: skipped: needs root and a cgroup2 mount ==")
    return
  end
  local name = ("takana-bench-reload-%d"):format(math.random(1e9))
  local rdir = "/tmp/" .. name
  assert(sh("mkdir -m 700 " .. rdir .. " && mkdir " .. rmnt .. "/" .. name))
  local function decls(gen)
    local t = {}
    for i = 1, n do
      t[i] = { name = "s" .. i, cmd = { "sleep", tostring(i == 1 and 100000 + gen or 100000) } }
    end
    return t
  end
  local function median(xs)
    table.sort(xs)
    return xs[math.max(1, math.ceil(#xs / 2))] or 0 / 0
  end
  -- the library
  local sup = assert(takana.supervisor { cgroup = name .. "/lib", runtime = rdir .. "/lib", log = false,
    signals = false })
  for _, d in ipairs(decls(0)) do sup:service(d) end
  local function all_running()
    for _, s in pairs(sup.services) do if s.state ~= "running" then return false end end
    return true
  end
  for _ = 1, 400 do
    if all_running() then break end
    sup:step(0.05)
  end
  assert(all_running(), "reload bench: the services did not all start")
  local kept, diff_ms, back_ms = true, {}, {}
  for r = 1, rounds do
    local before = {}
    for k, s in pairs(sup.services) do before[k] = s.pid end
    local t0 = now()
    assert(sup:reload(decls(r)))
    local t1 = now()
    local s1 = sup:get("s1")
    for _ = 1, 400 do
      if s1.state == "running" and s1.pid ~= before.s1 then break end
      sup:step(0.05)
    end
    local t2 = now()
    assert(s1.state == "running" and s1.pid ~= before.s1, "reload bench: s1 did not restart")
    for k, s in pairs(sup.services) do if k ~= "s1" and s.pid ~= before[k] then kept = false end end
    diff_ms[#diff_ms + 1], back_ms[#back_ms + 1] = (t1 - t0) * 1e3, (t2 - t0) * 1e3
  end
  sup:shutdown()
  for _ = 1, 400 do if sup:step(0.05) == false then break end end
  sup:close()
  -- takana supervise FILE, driven by takana ctl reload's request
  local file, sock = rdir .. "/sup.lua", rdir .. "/ctl.sock"
  local function write(gen)
    local lines = { ("local sup = assert(require('takana').supervisor { cgroup = %q, runtime = %q, control = %q, "
      .. "log = false })"):format(name .. "/cli", rdir .. "/cli", sock) }
    for _, d in ipairs(decls(gen)) do
      lines[#lines + 1] = ("sup:service { name = %q, cmd = { %q, %q } }"):format(d.name, d.cmd[1], d.cmd[2])
    end
    lines[#lines + 1] = "return sup"
    write_file_reload(file, table.concat(lines, "\n"))
  end
  write(0)
  local p = assert(takana.spawn { "lua5.4", "bin/takana", "supervise", file, pdeathsig = "KILL", stdout = "null",
    stderr = "null", env = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;",
    PATH = os.getenv("PATH") } })
  local function status()
    local r = S.request(sock, { cmd = "status" }, 5)
    if not (r and r.ok) then return nil end
    local t, up = {}, 0
    for _, s in ipairs(r.services) do
      t[s.name] = s.pid
      if s.state == "running" then up = up + 1 end
    end
    return t, up
  end
  for _ = 1, 400 do
    local _, up = status()
    if up == n then break end
    takana.poll({}, 0.05)
  end
  local cli_kept, ctl_ms, cli_back_ms = true, {}, {}
  for r = 1, rounds do
    local before = assert(status())
    write(r)
    local t0 = now()
    local ans = assert(S.request(sock, { cmd = "reload" }, 10))
    local t1 = now()
    assert(ans.ok, tostring(ans.error))
    local after
    for _ = 1, 2000 do
      local st, up = status()
      if st and up == n and st.s1 ~= before.s1 then after = st break end
      takana.poll({}, 0.002)
    end
    local t2 = now()
    assert(after, "reload bench: s1 did not restart under takana supervise")
    for k, pid in pairs(before) do if k ~= "s1" and after[k] ~= pid then cli_kept = false end end
    ctl_ms[#ctl_ms + 1], cli_back_ms[#cli_back_ms + 1] = (t1 - t0) * 1e3, (t2 - t0) * 1e3
  end
  p:signal("TERM")
  p:wait()
  sh("find " .. rmnt .. "/" .. name .. " -depth -type d -exec rmdir {} + 2>/dev/null")
  sh("rm -rf " .. rdir)
  print(("== supervise reload: %d services, one changed, %d rounds (medians) =="):format(n, rounds))
  print(("  %-46s %10.2f ms"):format("sup:reload (diff, apply, stop signal sent)", median(diff_ms)))
  print(("  %-46s %10.2f ms"):format("sup:reload -> changed service running again", median(back_ms)))
  print(("  %-46s %10.2f ms"):format("ctl reload answered (file run again + diff)", median(ctl_ms)))
  print(("  %-46s %10.2f ms"):format("ctl reload -> changed service running again", median(cli_back_ms)))
  print(("  %-46s %10s   target: yes  %s"):format("the other services kept their pids",
    (kept and cli_kept) and "yes" or "NO", (kept and cli_kept) and "met" or "MISSED"))
end

if os.getenv("RELOAD") ~= "0" then bench_reload() end

if not have("s6-svscan") or not have("runsvdir") then
  print("== supervise: skipped: needs s6 (s6-svscan) and runit (runsvdir): apt-get install s6 runit ==")
  return
end
local ev, everr = takana.events { "exit", "exec", backend = "bpf" }
if not ev then
  print("== supervise: skipped: bpf events unavailable (" .. tostring(everr) .. "); run as root ==")
  return
end
local mnt
for line in io.lines("/proc/self/mountinfo") do
  local m, fstype = line:match("^%S+ %S+ %S+ %S+ (%S+) .- %- (%S+)")
  if fstype == "cgroup2" then mnt = m end
end
assert(mnt, "no cgroup2 mount")

local dir = ("/tmp/takana-bench-sup-%d"):format(math.random(1e9))
assert(sh("mkdir -p " .. dir))
local boxname = ("takana-bench-sup-%d"):format(math.random(1e9))
assert(sh("mkdir " .. mnt .. "/" .. boxname))
local box = assert(takana.cgroup(boxname))

-- The service: sleeps LIFE seconds (or forever with an argument-less idle
-- build) and exits 0. A C program so that exec is the only start cost.
local src = dir .. "/svc.c"
local f = assert(io.open(src, "w"))
f:write([[
#include <time.h>
#include <unistd.h>
int main(void) {
#ifdef IDLE
	for (;;) pause();
#else
	struct timespec t = { (time_t)LIFE_NS / 1000000000, (long)(LIFE_NS % 1000000000) };
	nanosleep(&t, 0);
	return 0;
#endif
}
]])
f:close()
assert(sh(("cc -O2 -DLIFE_NS=%dLL -o %s/svc %s && cc -O2 -DIDLE -o %s/idle %s"):format(
  math.floor(LIFE * 1e9), dir, src, dir, src)))

-- Whole file, or nil (the bench reads other programs' /proc files).
local function read(path)
  local fh = io.open(path, "rb")
  if not fh then return nil end
  local s = fh:read("a")
  fh:close()
  return s
end

-- CPU seconds (utime + stime) and RSS/PSS bytes of a process.
local CLK = 100
local function proc_cpu(pid)
  local s = read("/proc/" .. pid .. "/stat")
  if not s then return 0 end
  local rest = s:match("%) (.*)$")
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  return (tonumber(fields[12]) + tonumber(fields[13])) / CLK
end
local function proc_mem(pid)
  local s = read("/proc/" .. pid .. "/smaps_rollup") or ""
  return (tonumber(s:match("\nRss:%s+(%d+)")) or 0) * 1024, (tonumber(s:match("\nPss:%s+(%d+)")) or 0) * 1024
end
local function comm(pid) return ((read("/proc/" .. pid .. "/comm") or ""):match("^[^\n]*")) end

-- The supervisor's own processes among a cgroup tree's.
local sup_comms = { ["s6-svscan"] = true, ["s6-supervise"] = true, runsvdir = true, runsv = true,
  ["lua5.4"] = true }
local function supervisors(cg)
  local out = {}
  for _, pid in ipairs(cg:procs() or {}) do
    if sup_comms[comm(pid)] then out[#out + 1] = pid end
  end
  return out
end

local function write_file(path, text, mode)
  local h = assert(io.open(path, "w"))
  h:write(text)
  h:close()
  if mode then assert(sh("chmod " .. mode .. " " .. path)) end
end

-- Each contender: prepare(k, binary) -> argv of its supervisor.
local contenders = {
  { name = "takana.supervisor", prepare = function(cdir, k, bin, cgname)
      local lines = { ("local sup = assert(require('takana').supervisor { cgroup = %q, runtime = %q, log = false })")
        :format(cgname .. "/services", cdir) }
      for i = 1, k do
        lines[#lines + 1] = ("sup:service { name = 's%d', cmd = { %q }, restart = 'always', "
          .. "backoff = { initial = 0 }, start_limit = { burst = 0 } }"):format(i, bin)
      end
      lines[#lines + 1] = "return sup"
      write_file(cdir .. "/sup.lua", table.concat(lines, "\n"))
      return { "lua5.4", "bin/takana", "supervise", cdir .. "/sup.lua",
        env = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;", PATH = os.getenv("PATH") } }
    end },
  { name = "s6-supervise (s6)", prepare = function(cdir, k, bin)
      assert(sh("mkdir -p " .. cdir .. "/scan"))
      for i = 1, k do
        local d = ("%s/scan/s%d"):format(cdir, i)
        assert(sh("mkdir -p " .. d .. " && ln " .. bin .. " " .. d .. "/run"))
      end
      return { "s6-svscan", cdir .. "/scan" }
    end },
  { name = "runsv (runit)", prepare = function(cdir, k, bin)
      assert(sh("mkdir -p " .. cdir .. "/sv"))
      for i = 1, k do
        local d = ("%s/sv/s%d"):format(cdir, i)
        assert(sh("mkdir -p " .. d .. " && ln " .. bin .. " " .. d .. "/run"))
      end
      return { "runsvdir", "-P", cdir .. "/sv" }
    end },
}

local function percentile(sorted, p)
  if #sorted == 0 then return 0 / 0 end
  return sorted[math.max(1, math.ceil(#sorted * p))]
end

local function run_restarts(c, idx)
  local cdir = ("%s/c%d"):format(dir, idx)
  assert(sh("mkdir -p " .. cdir))
  local bin = ("%s/svc%d"):format(cdir, idx)
  assert(sh(("cp %s/svc %s"):format(dir, bin)))
  local cg = assert(box:mkdir("c" .. idx))
  local argv = c.prepare(cdir, K, bin, boxname .. "/c" .. idx)
  argv.cgroup = cg
  argv.stdout = "null"
  argv.stderr = "null"
  local binname = bin:match("([^/]+)$")
  -- drain what is queued before the start
  for _ in ev:read() do end
  local p = assert(takana.spawn(argv))
  local last_exit, lat = {}, {}
  local warm = K * 2       -- the first start of each service is not a restart
  local started, cpu0, t0 = 0, nil, nil
  local deadline = core.monotime() + LIMIT_S
  while #lat < RESTARTS and core.monotime() < deadline do
    takana.poll({ ev }, 0.5)
    for e in assert(ev:read()) do
      local name = e.comm
      if name == "run" or name == binname then
        local key = (e.ppid or 0) .. "/" .. name
        if e.type == "exit" then
          last_exit[key] = e.time_ns
        elseif e.type == "exec" then
          started = started + 1
          local t = last_exit[key]
          if t then
            last_exit[key] = nil
            if started > warm then lat[#lat + 1] = (e.time_ns - t) / 1e3 end
          end
          if started == warm then
            cpu0 = 0
            for _, pid in ipairs(supervisors(cg)) do cpu0 = cpu0 + proc_cpu(pid) end
            t0 = core.monotime()
          end
        end
      end
    end
  end
  local cpu1 = 0
  for _, pid in ipairs(supervisors(cg)) do cpu1 = cpu1 + proc_cpu(pid) end
  local wall = t0 and core.monotime() - t0 or 0
  assert(cg:kill())
  p:wait()
  for _ = 1, 50 do
    local st = cg:stat()
    if st and st.events and not st.events.populated then break end
    takana.poll({}, 0.1)
  end
  sh("find " .. mnt .. "/" .. boxname .. "/c" .. idx .. " -depth -type d -exec rmdir {} + 2>/dev/null")
  cg:close()
  table.sort(lat)
  return { n = #lat, median = percentile(lat, 0.5), p99 = percentile(lat, 0.99),
    cpu_per_1000 = #lat > 0 and (cpu1 - (cpu0 or 0)) / #lat * 1000 or 0 / 0, wall = wall }
end

local function run_idle(c, idx)
  local cdir = ("%s/i%d"):format(dir, idx)
  assert(sh("mkdir -p " .. cdir))
  local bin = ("%s/idle%d"):format(cdir, idx)
  assert(sh(("cp %s/idle %s"):format(dir, bin)))
  local cg = assert(box:mkdir("i" .. idx))
  local argv = c.prepare(cdir, IDLE, bin, boxname .. "/i" .. idx)
  argv.cgroup = cg
  argv.stdout = "null"
  argv.stderr = "null"
  local p = assert(takana.spawn(argv))
  -- wait until every service runs
  local binname = bin:match("([^/]+)$")
  local count = ("cat $(find %s/%s/i%d -name cgroup.procs) | xargs -r -n1 sh -c 'cat /proc/$0/comm' 2>/dev/null | grep -cx -e run -e %s")
    :format(mnt, boxname, idx, binname)
  for _ = 1, 100 do
    local h = io.popen(count)
    local n = tonumber(h:read("a")) or 0
    h:close()
    if n >= IDLE then break end
    takana.poll({}, 0.2)
  end
  takana.poll({}, 0.5)
  local rss, pss, nsup = 0, 0, 0
  for _, pid in ipairs(supervisors(cg)) do
    local r, s = proc_mem(pid)
    rss, pss, nsup = rss + r, pss + s, nsup + 1
  end
  assert(cg:kill())
  p:wait()
  for _ = 1, 50 do
    local st = cg:stat()
    if st and st.events and not st.events.populated then break end
    takana.poll({}, 0.1)
  end
  sh("find " .. mnt .. "/" .. boxname .. "/i" .. idx .. " -depth -type d -exec rmdir {} + 2>/dev/null")
  cg:close()
  return { rss = rss, pss = pss, procs = nsup }
end

print(("== supervise: restart latency (service exit -> exec of its replacement, bpf event times), "
  .. "%d services living %.1f s each, %d restarts a contender; memory with %d idle services =="):format(
  K, LIFE, RESTARTS, IDLE))
local results = {}
for i, c in ipairs(contenders) do
  io.stderr:write("  supervise bench: " .. c.name .. "\n")
  results[i] = run_restarts(c, i)
  results[i].mem = run_idle(c, i)
end
ev:close()
print(("  %-22s %8s %12s %12s %16s %14s %14s"):format("supervisor", "restarts", "median us", "p99 us",
  "CPU s/1000 rst", "RSS MiB", "PSS MiB"))
for i, c in ipairs(contenders) do
  local r = results[i]
  print(("  %-22s %8d %12.1f %12.1f %16.3f %14.2f %14.2f  (%d supervisor processes)"):format(
    c.name, r.n, r.median, r.p99, r.cpu_per_1000, r.mem.rss / 2 ^ 20, r.mem.pss / 2 ^ 20, r.mem.procs))
end
local ratio = results[1].median / results[2].median
print(("  %-60s %7.2f   target <= 2  %s"):format("takana median latency / s6-supervise median", ratio,
  ratio <= 2 and "met" or "MISSED"))
local mib = results[1].mem.rss / 2 ^ 20
print(("  %-60s %7.2f   target < 20  %s"):format("takana RSS with " .. IDLE .. " services, MiB", mib,
  mib < 20 and "met" or "MISSED"))
local ok, err = box:remove()
if not ok then io.stderr:write("supervise bench: ", err, "\n") end
sh("rm -rf " .. dir)
