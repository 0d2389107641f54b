-- make bench: cg:stat() of a unit against summing /proc/<pid>/stat for its
-- processes, at 1, 20 and 200 processes, in one run with alternating rounds.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local core = require "takana.core"
local cb = require "takana_bench"
local L = require "lib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 33
local root = assert(takana.cgroup.self())
local name = ("takana-test-bench-%d"):format(math.random(1e9))
local unit, err = root:mkdir(name)
if not unit then
  print("== cgroup bench skipped: " .. err .. " (needs root) ==")
  os.exit(0)
end

-- Plain Lua: what a script writes today for the same sum.
local function lua_sum(pids)
  local sum = 0
  for _, pid in ipairs(pids) do
    local f = io.open("/proc/" .. pid .. "/stat")
    if f then
      local s = f:read("a")
      f:close()
      local u, st = s:match("%) %S+" .. (" %S+"):rep(10) .. " (%d+) (%d+)")
      sum = sum + (tonumber(u) or 0) + (tonumber(st) or 0)
    end
  end
  return sum
end

local kids = {}
local results = {}
local ok, perr = pcall(function()
  for _, n in ipairs { 1, 20, 200 } do
    while #kids < n do kids[#kids + 1] = assert(takana.spawn { "sleep", "600", cgroup = unit }) end
    local pids = unit:procs()
    assert(#pids == n, "unit holds " .. #pids)
    local cases = {
      { name = ("cg:stat() of a unit of %d"):format(n), run = function() unit:stat() return 1 end },
      { name = ("C: sum /proc/<pid>/stat over %d"):format(n), run = function() return cb.sum_stat(pids) end },
      { name = ("plain Lua: sum /proc/<pid>/stat over %d"):format(n), run = function() return lua_sum(pids) end },
    }
    local r = L.measure(cases, ROUNDS)
    L.print_table(("cgroup accounting, %d processes, %d rounds alternating"):format(n, ROUNDS), cases, r, 1)
    results[n] = { stat = r[cases[1].name].min, c = r[cases[2].name].min, lua = r[cases[3].name].min }
  end
end)

-- cgroup.path(id) and snap:cgroup(pid) after the first call (the cache,
-- vouched for by its removal watch), against the first call's resolver
-- (open_by_handle_at, uncached) and against reading /proc/<pid>/cgroup.
local paths = {}
local pok, pathsperr = pcall(function()
  local nested = assert(assert(unit:mkdir("a")):mkdir("b"))
  local id = assert(core.cgroup_id(nested))
  local mount = takana.cgroup.mounts().v2
  local pid = kids[1] and kids[1].pid
  local snap = assert(takana.snapshot { fields = { "pid", "cgroup_id" } })
  assert(takana.cgroup.path(id) == nested.path, "cgroup.path disagrees with handle.path")
  assert(snap:cgroup(pid) == unit.path, "snap:cgroup disagrees with handle.path")
  local K = 1000
  local path = takana.cgroup.path
  local cases = {
    { name = ("cgroup.path(id) cached, x%d"):format(K), run = function()
      for _ = 1, K do path(id) end return K end },
    { name = ("snap:cgroup(pid) cached, x%d"):format(K), run = function()
      for _ = 1, K do snap:cgroup(pid) end return K end },
    { name = ("first call's resolver (open_by_handle_at), x%d"):format(K), run = function()
      for _ = 1, K do core.cgroup_path_by_handle(mount, id) end return K end },
    { name = ("read /proc/<pid>/cgroup, x%d"):format(K), run = function()
      for _ = 1, K do core.proc_cgroup(pid) end return K end },
  }
  local r = L.measure(cases, ROUNDS)
  L.print_table(("cgroup paths, %d rounds alternating"):format(ROUNDS), cases, r, K)
  paths.cached = r[cases[1].name].min / K
  paths.snap = r[cases[2].name].min / K
  paths.handle = r[cases[3].name].min / K
  paths.proc = r[cases[4].name].min / K
  -- The issue's own measure: os.clock over 100,000 calls.
  local t0 = os.clock()
  for _ = 1, 100000 do path(id) end
  paths.clock = (os.clock() - t0) / 100000 * 1e9
  nested:remove()
  assert(nested:close() ~= false)
  local a = assert(takana.cgroup(unit.path .. "/a"))
  a:remove()
end)
for _, k in ipairs(kids) do k:signal("KILL") k:wait() k:close() end
unit:remove()
assert(ok, perr)
assert(pok, pathsperr)
local function ratio(x, label, text, good)
  print(("  %-60s %7.3f   target %s  %s"):format(label, x, text, good and "met" or "MISSED"))
end
local flat = results[200].stat / results[1].stat
ratio(flat, "cg:stat at 200 / at 1", "<= 1.2", flat <= 1.2)
local x = results[20].c / results[20].stat
ratio(x, "C /proc sum at 20 / cg:stat", ">= 10", x >= 10)
ratio(results[20].lua / results[20].stat, "plain-Lua /proc sum at 20 / cg:stat", "(info)", true)
print(("  %-60s %7.3f us (os.clock, 100,000 calls)  target <= 1 us  %s"):format("cgroup.path(id) after the first",
  paths.clock / 1e3, paths.clock <= 1000 and "met" or "MISSED"))
ratio(paths.cached / 1e3, "cgroup.path(id) cached, us a call (min)", "<= 1", paths.cached <= 1000)
ratio(paths.snap / 1e3, "snap:cgroup(pid) cached, us a call (min)", "<= 1", paths.snap <= 1000)
ratio(paths.handle / paths.cached, "first call's resolver / cached cgroup.path", "(info)", true)
ratio(paths.proc / paths.cached, "read /proc/<pid>/cgroup / cached cgroup.path", "(info)", true)
