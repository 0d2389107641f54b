-- make bench: takana against psutil (python3-psutil), in one run, on this
-- host with a 1,000-process herd added (spec/fixture --herd, each with an
-- argv). psutil: process_iter(["pid","ppid","name","cmdline","memory_info",
-- "cpu_times"]) over every process, timed inside a long-lived python (its
-- start-up is not counted). takana: one snapshot (pid, ppid, comm, rss,
-- cpu times: the same fields) plus takana.process(pid):cmdline() for every
-- process. Rounds alternate A->B / B->A; min and median per contender.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local L = require "lib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 15
local HERD = tonumber(os.getenv("HERD") or "") or 1000
local PYTHON = "/usr/bin/python3"

if os.execute(PYTHON .. " -c 'import psutil' 2>/dev/null") ~= true then
  print("psutil bench skipped: python3-psutil is not installed (apt-get install python3-psutil)")
  os.exit(0)
end

-- One process_iter pass per line read; answers "count ns".
local DRIVER = [[
import sys, time, psutil
attrs = ["pid", "ppid", "name", "cmdline", "memory_info", "cpu_times"]
for line in sys.stdin:
    t0 = time.perf_counter_ns()
    n = 0
    for p in psutil.process_iter(attrs):
        if p.info["cmdline"] is not None: n += 1
    print(n, time.perf_counter_ns() - t0, flush=True)
]]

local py = assert(takana.spawn { PYTHON, "-c", DRIVER, stdin = "pipe", stdout = "pipe" })

local function psutil_pass()
  assert(py.stdin:write("go\n"))
  local line = assert(py.stdout:read_line(60), "psutil driver died")
  local n, ns = line:match("^(%d+) (%d+)$")
  return tonumber(n), tonumber(ns)
end

-- takana: the snapshot's fields plus each process's argv through a
-- pidfd-anchored process object (no pid race).
local function takana_pass(backend)
  return function()
    local t0 = L.now_ns()
    local snap = assert(takana.snapshot { backend = backend })
    local n = 0
    for r in snap:each() do
      local _, _, _, _, _ = r.ppid, r.comm, r.rss_bytes, r.utime_ns, r.stime_ns
      local p = takana.process(r.pid)
      if p then
        if p:cmdline() then n = n + 1 end
        p:close()
      end
    end
    return n, L.now_ns() - t0
  end
end

-- The same fields with cmdline among them: one snapshot reads every
-- process's argv (the argv BPF program after a BPF walk, /proc after a
-- /proc one), and each record's table is built as psutil builds its dicts.
local FIELDS = { "pid", "ppid", "comm", "rss_bytes", "utime_ns", "stime_ns", "cgroup_id", "cmdline" }
local function takana_fields(backend)
  return function()
    local t0 = L.now_ns()
    local snap = assert(takana.snapshot { backend = backend, fields = FIELDS })
    local n = 0
    for _, r in ipairs(snap:totable()) do
      if r.cmdline then n = n + 1 end
    end
    return n, L.now_ns() - t0
  end
end

-- The snapshot alone, for the share of the argv reads.
local function snapshot_only(backend)
  return function()
    local t0 = L.now_ns()
    local snap = assert(takana.snapshot { backend = backend })
    return #snap, L.now_ns() - t0
  end
end

local herd = L.herd(HERD)
local ok, err = pcall(function()
  local backend = takana.probe().snapshot.backend
  psutil_pass()   -- psutil's first pass builds its Process cache: not measured
  local cases = {
    { name = "psutil process_iter(pid,ppid,name,cmdline,memory_info,cpu_times)", run = psutil_pass },
    { name = ("takana snapshot (%s) + process(pid):cmdline()"):format(backend), run = takana_pass(backend) },
    { name = "takana snapshot (proc) + process(pid):cmdline()", run = takana_pass("proc") },
    { name = ("takana snapshot (%s), cmdline among its fields"):format(backend), run = takana_fields(backend) },
    { name = "takana snapshot (proc), cmdline among its fields", run = takana_fields("proc") },
    { name = ("takana snapshot (%s) alone"):format(backend), run = snapshot_only(backend) },
  }
  local res = L.measure(cases, ROUNDS)
  L.print_table(("psutil vs takana: whole host, %d processes (herd of %d with argv), %d rounds, order alternating"):format(
    res[cases[1].name].count, HERD, ROUNDS), cases, res)
  local function per(name) return res[name].min / math.max(res[name].count, 1) end
  for i = 2, 5 do
    local x = per(cases[1].name) / per(cases[i].name)
    print(("  %-60s %7.1fx   target >= 20x  %s"):format("psutil / " .. cases[i].name .. " (per process)", x,
      x >= 20 and "met" or "MISSED"))
  end
  print(("  whole host, one call: psutil %.1f ms, takana %.1f ms (%s), %.1f ms (proc); "
    .. "cmdline as a field %.1f ms (%s), %.1f ms (proc)"):format(
    res[cases[1].name].min / 1e6, res[cases[2].name].min / 1e6, backend, res[cases[3].name].min / 1e6,
    res[cases[4].name].min / 1e6, backend, res[cases[5].name].min / 1e6))
end)
herd.stop()
py.stdin:close()
py:wait()
py:close()
if not ok then error(err, 0) end
