-- make bench: cg:stat() of a unit against summing /proc/<pid>/stat for its
-- processes, at 1, 20 and 200 processes, in one run with alternating rounds.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
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
for _, k in ipairs(kids) do k:signal("KILL") k:wait() k:close() end
unit:remove()
assert(ok, perr)
local function ratio(x, label, text, good)
  print(("  %-60s %7.3f   target %s  %s"):format(label, x, text, good and "met" or "MISSED"))
end
local flat = results[200].stat / results[1].stat
ratio(flat, "cg:stat at 200 / at 1", "<= 1.2", flat <= 1.2)
local x = results[20].c / results[20].stat
ratio(x, "C /proc sum at 20 / cg:stat", ">= 10", x >= 10)
ratio(results[20].lua / results[20].stat, "plain-Lua /proc sum at 20 / cg:stat", "(info)", true)
