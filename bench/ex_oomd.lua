-- bench/ex_oomd.lua: examples/oomd.lua against Debian's oomd, in one run.
--
-- A bounded memory hog (Lua taking 1 MiB a step, up to 200 MiB, life 60 s)
-- in <P>/hog under memory.high 16 MiB, a bystander sleeping in <P>/idle.
-- Both killers watch <P> with the same rule: full memory stall of 10 %
-- (oomd: full avg10 > 10 for 0 s, polled every second, the one interval
-- Debian ships; takana: a PSI trigger, full 10 % of 2 s), and kill the
-- biggest (oomd: kill_by_memory_size_or_growth over <P>/*, the whole
-- cgroup; takana: the process). Per round, alternating which goes first:
--   * stall onset -> kill: from the first rise of <P>'s full stall total
--     (memory.pressure, read every 10 ms) to the hog's exit (its pidfd);
--   * the hog's peak memory (memory.peak of <P>/hog, where the kernel has
--     it; else the highest memory.current read);
-- then both idle side by side for IDLE_S (default 60) s on an idle <P>:
-- CPU each used (utime+stime of the daemon's process).
-- Needs root, pure cgroup2 with the memory controller on it, and oomd
-- (package oomd); otherwise it says why and skips. ROUNDS (default 3).
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local takana = require "takana"
local X = require "exlib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 3
local IDLE_S = tonumber(os.getenv("IDLE_S") or "") or 60

local function skip(why)
  print("== ex_oomd: skipped: " .. why .. " ==")
  os.exit(0)
end
local host = takana.cgroup.probe()
local v2 = {}
for _, c in ipairs(host.v2_controllers or {}) do v2[c] = true end
if host.mode ~= "unified" or not v2.memory then
  skip(("needs pure cgroup2 with the memory controller on it; this host is %s (memory.high and memory "):format(host.mode)
    .. "sizes are not on cgroup2), and Debian's oomd refuses /sys/fs/cgroup")
end
if not io.open("/proc/self/status"):read("a"):match("\nUid:%s+0%s") then skip("needs root (cgroups)") end
local have_oomd = os.execute("command -v oomd >/dev/null 2>&1")

local P = ("takana-bench-oomd-%d"):format(math.random(1e9))
local top = assert(takana.cgroup("/"):mkdir(P))
assert(top:enable { "memory" })
local dir = assert(io.popen("mktemp -d /tmp/takana-bench-oomd.XXXXXX")):read("l")
local function sh(cmd) return os.execute(cmd) end
local function readf(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- oomd's config: the same rule, as JSON.
local config = dir .. "/oomd.json"
assert(io.open(config, "w")):write(([=[
{"rulesets":[{"name":"bench: kill the biggest child of %s when its memory stalls",
  "detectors":[["full avg10 > 10",
    {"name":"pressure_above","args":{"cgroup":"%s","resource":"memory","threshold":"10","duration":"0"}}]],
  "actions":[{"name":"kill_by_memory_size_or_growth",
    "args":{"cgroup":"%s/*","size_threshold":"0","post_action_delay":"5"}}]}]}
]=]):format(P, P, P)):close()
local HOG = "local t = {} for i = 1, 200 do t[i] = string.rep(string.char(i % 256), 1 << 20) end os.execute('sleep 60')"

-- A killer started: {child, name}; ready once it watches.
local function start_killer(which)
  local argv
  if which == "takana" then
    argv = { "lua5.4", "bin/takana", "example", "oomd", "--kind", "full", "--stall", "10", "--window", "2",
      "--holdoff", "5", P }
  else
    argv = { "oomd", "--config", config, "--interval", "1", "--kmsg-override", dir .. "/kills.log" }
  end
  argv.stdout, argv.stderr, argv.pdeathsig = "pipe", "pipe", "KILL"
  argv.env = { add = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;" } }
  local c = assert(takana.spawn(argv))
  -- takana prints "start"; oomd has no ready line: its first poll is 1 s in.
  local deadline = takana.now() + 5
  local out = ""
  while takana.now() < deadline do
    takana.poll({ c.stdout }, 0.1)
    out = out .. (c.stdout:read() or "")
    if which == "takana" and out:find(" start ") then break end
  end
  return c
end

local function stop_killer(c)
  c:signal("TERM")
  if not c:wait(5) then
    c:signal("KILL")
    c:wait(5)
  end
end

local function full_total(cg)
  local text = readf(cg) or ""
  return tonumber(text:match("full avg10=%S+ avg60=%S+ avg300=%S+ total=(%d+)"))
end

-- One round for `which`: {onset_to_kill_s, peak_bytes} or nil, why.
local function round(which)
  local hogcg = assert(top:mkdir("hog"))
  assert(hogcg:set("memory.high", 16 * 2 ^ 20))
  local idle = assert(top:mkdir("idle"))
  local bystander = assert(takana.spawn { "sleep", "120", cgroup = idle, pdeathsig = "KILL" })
  local killer = start_killer(which)
  local pressure = host.v2_mount .. "/" .. P .. "/memory.pressure"
  local base = full_total(pressure)
  local hog = assert(takana.spawn { "timeout", "60", "lua5.4", "-e", HOG, cgroup = hogcg, pdeathsig = "KILL" })
  local onset, peak, ended
  local deadline = takana.now() + 60
  while takana.now() < deadline do
    local ready = takana.poll({ hog }, 0.01)
    local t = takana.now()
    if not onset and (full_total(pressure) or base) > base then onset = t end
    peak = math.max(peak or 0, tonumber(readf(host.v2_mount .. "/" .. P .. "/hog/memory.current") or "0") or 0)
    if #ready > 0 then
      ended = t
      break
    end
  end
  local kernel_peak = tonumber(readf(host.v2_mount .. "/" .. P .. "/hog/memory.peak") or "")
  local rec = hog:wait(5) or {}
  stop_killer(killer)
  bystander:signal("KILL")
  bystander:wait(5)
  hogcg:kill { wait = 5 }
  hogcg:remove()
  idle:remove()
  hogcg:close()
  idle:close()
  if not (ended and onset) then return nil, "no kill within 60 s" end
  -- Killed: timeout itself (oomd kills the cgroup), or the Lua under it (timeout exits 128 + 9).
  if not (rec.signal == 9 or rec.code == 137) then return nil, "the hog ended by itself: " .. tostring(rec.code) end
  return { ended - onset, kernel_peak or peak }
end

local function stats(xs)
  table.sort(xs)
  return xs[1], xs[(#xs + 1) // 2]
end

local names = { "takana", have_oomd and "oomd" or nil }
local res = { takana = { t = {}, peak = {} }, oomd = { t = {}, peak = {} } }
for r = 1, ROUNDS do
  local order = r % 2 == 1 and names or { names[#names], names[1] }
  for _, which in ipairs(order) do
    local got, why = round(which)
    if got then
      table.insert(res[which].t, got[1])
      table.insert(res[which].peak, got[2])
    else
      io.stderr:write(("ex_oomd: %s round %d: %s\n"):format(which, r, why))
    end
  end
end

-- Idle: both on an idle <P>, side by side.
local idle_cpu = {}
local running = {}
for _, which in ipairs(names) do running[which] = start_killer(which) end
local function cpu_s(pid)
  local stat = readf("/proc/" .. pid .. "/stat") or ""
  local f = {}
  for w in stat:sub((stat:find(")", 1, true) or 0) + 2):gmatch("%S+") do f[#f + 1] = w end
  return ((tonumber(f[12]) or 0) + (tonumber(f[13]) or 0)) / 100
end
local before = {}
for which, c in pairs(running) do before[which] = cpu_s(c.pid) end
takana.poll({}, IDLE_S)
for which, c in pairs(running) do
  idle_cpu[which] = cpu_s(c.pid) - before[which]
  stop_killer(c)
end
top:remove()
top:close()
sh("rm -rf " .. dir)

print(("== ex_oomd: memory hog under memory.high 16 MiB, %d rounds alternating; kernel %s =="):format(ROUNDS,
  (readf("/proc/sys/kernel/osrelease") or "?"):gsub("%s+$", "")))
for _, which in ipairs(names) do
  local r = res[which]
  if #r.t > 0 then
    local tmin, tmed = stats(r.t)
    local pmin, pmed = stats(r.peak)
    print(("  %-8s stall onset -> kill: min %6.3f s  median %6.3f s   hog peak: min %6.1f MiB  median %6.1f MiB  (%d kills)")
      :format(which, tmin, tmed, pmin / 2 ^ 20, pmed / 2 ^ 20, #r.t))
  else
    print(("  %-8s no kill in %d rounds"):format(which, ROUNDS))
  end
  print(("  %-8s idle CPU over %d s: %.2f s"):format(which, IDLE_S, idle_cpu[which]))
end
if not have_oomd then print("  oomd: not installed (apt-get install oomd): no comparison") end
local a, b = res.takana, res.oomd
if #a.t > 0 and #b.t > 0 then
  X.row("oomd", "memory stall onset -> kill, median", ("%.2f s"):format(select(2, stats(a.t))), "oomd (1 s polls)",
    ("%.2f s"):format(select(2, stats(b.t))))
  X.row("oomd", "hog peak memory (memory.high 16 MiB), median", ("%.1f MiB"):format(select(2, stats(a.peak)) / 2 ^ 20),
    "oomd", ("%.1f MiB"):format(select(2, stats(b.peak)) / 2 ^ 20))
  X.row("oomd", ("idle CPU over %d s"):format(IDLE_S), ("%.2f s"):format(idle_cpu.takana), "oomd",
    ("%.2f s"):format(idle_cpu.oomd))
  print(("  ratio takana/oomd: onset -> kill %.3f (median), hog peak %.3f (median), idle CPU %s"):format(
    select(2, stats(a.t)) / select(2, stats(b.t)), select(2, stats(a.peak)) / select(2, stats(b.peak)),
    idle_cpu.oomd > 0 and ("%.3f"):format(idle_cpu.takana / idle_cpu.oomd) or "n/a (oomd 0)"))
end
