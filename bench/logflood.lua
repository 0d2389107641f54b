-- make bench: a service's log flood (issue 22) under takana.supervisor,
-- with its logger process and with the in-process fallback, against
-- s6-log, in one run, alternating rounds.
--
-- 1. CPU: FLOOD_MB (default 100) MiB of 99-byte lines written by
--    `head | tr | fold` into the log: the supervisor's CPU plus its
--    logger's (utime + stime from /proc, the logger's read before it is
--    told to exit), against s6-log's (`/usr/bin/time`, package time) with
--    the same rotation (5 files of 1 MiB) and ISO 8601 stamps (T).
-- 2. A sibling's restart cycle (the time between two starts of a service
--    that exits at once, backoff 0: its own run, the exit noticed, the
--    restart) while another service floods (SIBLING_FLOOD_MB, default 800)
--    against while all is quiet: the median of CYCLES (default 300)
--    cycles within the flood (the flood is stopped after them).
-- ROUNDS (default 3) rounds each. Needs root and a cgroup2 mount.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local core = require "takana.core"
local now = takana.now or core.monotime

local FLOOD_MB = tonumber(os.getenv("FLOOD_MB") or "") or 100
local SIB_MB = tonumber(os.getenv("SIBLING_FLOOD_MB") or "") or 800
local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 3
-- Sibling restarts measured a round (a flood outlasts them: 800 MiB take
-- seconds to write).
local CYCLES = tonumber(os.getenv("CYCLES") or "") or 300
local TICKS = 100 -- clock ticks a second (USER_HZ)

local function sh(cmd) return os.execute(cmd) end
local function have(prog) return sh("command -v " .. prog .. " >/dev/null 2>&1") end

local mnt
for line in io.lines("/proc/self/mountinfo") do
  local m, fstype = line:match("^%S+ %S+ %S+ %S+ (%S+) .- %- (%S+)")
  if fstype == "cgroup2" then mnt = m end
end
if core.geteuid() ~= 0 or not mnt then
  print("== logflood: skipped: needs root and a cgroup2 mount ==")
  return
end
local s6 = have("s6-log") and io.open("/usr/bin/time") ~= nil
local name = ("takana-bench-logflood-%d"):format(math.random(1e9))
local tmp = "/tmp/" .. name
assert(sh("mkdir -m 700 " .. tmp .. " && mkdir " .. mnt .. "/" .. name))

local function cpu_s(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  local rest = s:match("%) (.*)$")
  local fields = {}
  for x in rest:gmatch("%S+") do fields[#fields + 1] = x end
  return (tonumber(fields[12]) + tonumber(fields[13])) / TICKS
end

local function flood_cmd(mb)
  return ("head -c %d /dev/zero | tr '\\0' a | fold -w 99"):format(mb * 1048576)
end

-- takana: the supervisor's CPU and the logger's for one flood; logger =
-- false forces the in-process fallback.
local round_no = 0
local function takana_flood(logger)
  round_no = round_no + 1
  local dir = ("%s/t%d"):format(tmp, round_no)
  local saved = _G.arg
  if not logger then _G.arg = nil end
  local sup = assert(takana.supervisor { cgroup = ("%s/s%d"):format(name, round_no), runtime = dir .. "/rt",
    log = dir .. "/log", signals = false })
  local svc = sup:service { name = "flood", restart = "never", cmd = { "sh", "-c", flood_cmd(FLOOD_MB) } }
  local me0 = cpu_s(core.getpid())
  local t0 = now()
  while not svc.last_exit do assert(sup:step(0.5) ~= nil) end
  local lpid = sup.logger_child and sup.logger_child.pid
  -- the logger has written all once the file stops growing
  local last = -1
  while lpid do
    local f = io.open(dir .. "/log/flood.log")
    local size = f and f:seek("end") or 0
    if f then f:close() end
    if size == last then break end
    last = size
    core.poll_fds({}, 0.05)
  end
  local wall = now() - t0
  local me = cpu_s(core.getpid()) - me0
  local lg = lpid and cpu_s(lpid) or 0
  assert(logger == (lpid ~= nil), sup.logger_error)
  sup:shutdown()
  assert(sup:run())
  _G.arg = saved
  sh("rm -rf " .. dir)
  return me + lg, me, lg, wall
end

local function s6_flood()
  round_no = round_no + 1
  local dir = ("%s/s6-%d"):format(tmp, round_no)
  assert(sh("mkdir -p " .. dir))
  assert(sh(("%s | /usr/bin/time -f '%%U %%S' -o %s/time s6-log n5 s1048576 T %s/log"):format(flood_cmd(FLOOD_MB),
    dir, dir)))
  local f = assert(io.open(dir .. "/time"))
  local u, s = f:read("a"):match("([%d.]+) ([%d.]+)")
  f:close()
  sh("rm -rf " .. dir)
  return tonumber(u) + tonumber(s)
end

local function stats(xs)
  local c = table.move(xs, 1, #xs, 1, {})
  table.sort(c)
  return c[1], c[math.max(1, math.ceil(#c / 2))]
end

print(("== logflood 1: %d MiB of log lines, CPU seconds (min / median of %d rounds) =="):format(FLOOD_MB, ROUNDS))
local r = { logger = {}, sup = {}, lg = {}, inproc = {}, s6 = {} }
for _ = 1, ROUNDS do
  local total, me, lg = takana_flood(true)
  r.logger[#r.logger + 1], r.sup[#r.sup + 1], r.lg[#r.lg + 1] = total, me, lg
  r.inproc[#r.inproc + 1] = takana_flood(false)
  if s6 then r.s6[#r.s6 + 1] = s6_flood() end
end
local function row(label, xs)
  local mn, md = stats(xs)
  print(("  %-44s %6.2f / %6.2f"):format(label, mn, md))
  return md
end
local lmed = row("takana supervisor + logger", r.logger)
row("  of which the supervisor", r.sup)
row("  of which the logger", r.lg)
row("takana in-process (no logger)", r.inproc)
if s6 then
  local smed = row("s6-log (n5 s1048576 T)", r.s6)
  print(("  %-44s %6.2f   target <= 1.0"):format("ratio takana (sup + logger) / s6-log, medians", lmed / smed))
else
  print("  s6-log: skipped: needs s6 (s6-log) and time (/usr/bin/time)")
end

-- 2. A sibling's restart cycle, quiet and during a flood.
local function cycles(logger, flood_mb)
  round_no = round_no + 1
  local dir = ("%s/c%d"):format(tmp, round_no)
  local saved = _G.arg
  if not logger then _G.arg = nil end
  local sup = assert(takana.supervisor { cgroup = ("%s/c%d"):format(name, round_no), runtime = dir .. "/rt",
    log = dir .. "/log", signals = false })
  local flood = flood_mb and sup:service { name = "flood", restart = "never",
    cmd = { "sh", "-c", flood_cmd(flood_mb) } }
  local sib = sup:service { name = "sib", restart = "always", cmd = { "/bin/true" }, backoff = { initial = 0 },
    start_limit = { burst = 0 } }
  local starts, last = {}, nil
  while #starts < CYCLES do
    assert(sup:step(0.5) ~= nil)
    if sib.started_at ~= last then
      last = sib.started_at
      if not flood or flood.state == "running" then starts[#starts + 1] = last end
    end
    if flood and flood.last_exit then break end
  end
  sup:shutdown()
  assert(sup:run())
  _G.arg = saved
  sh("rm -rf " .. dir)
  local d = {}
  for i = 3, #starts do d[#d + 1] = (starts[i] - starts[i - 1]) * 1e3 end
  local _, md = stats(d)
  return md or 0 / 0, #d
end

print(("== logflood 2: a sibling's restart cycle (ms, median), quiet and during a %d MiB flood =="):format(SIB_MB))
for _, logger in ipairs { true, false } do
  local q, f, nq, nf = {}, {}, 0, 0
  for _ = 1, ROUNDS do
    local m, n = cycles(logger, nil)
    q[#q + 1], nq = m, nq + n
    m, n = cycles(logger, SIB_MB)
    f[#f + 1], nf = m, nf + n
  end
  local qmin, qmed = stats(q)
  local fmin, fmed = stats(f)
  print(("  %-28s quiet %6.2f / %6.2f (%d cycles)   flood %6.2f / %6.2f (%d cycles)   ratio %.2f  target <= 2")
    :format(logger and "takana with its logger" or "takana in-process", qmin, qmed, nq, fmin, fmed, nf, fmed / qmed))
end

sh("rm -rf " .. tmp)
sh(("find %s/%s -depth -type d -exec rmdir {} + 2>/dev/null"):format(mnt, name))
