-- make bench: the /proc snapshot against the C baselines and the plain-Lua
-- way, side by side in one run, at the natural count and with a herd.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local cb = require "takana_bench"
local lfs = require "lfs"
local L = require "lib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 33

-- What a user writes today in plain Lua.
local function lua_way()
  local n = 0
  for name in lfs.dir("/proc") do
    if name:match("^%d+$") then
      local f = io.open("/proc/" .. name .. "/stat")
      if f then
        local s = f:read("a")
        f:close()
        if s then
          local comm, state, ppid, utime, stime = s:match("^%d+ %((.*)%) (%S) (%d+) %S+ %S+ %S+ %S+ %S+ %S+ %S+ %S+ %S+ (%d+) (%d+)")
          if comm and state and ppid and utime and stime then n = n + 1 end
        end
      end
    end
  end
  return n
end

local function run(title)
  local iter_snap = assert(takana.snapshot { backend = "proc" })
  local cases = {
    { name = "1) C: readdir + open/read/close + parse (path A)", run = cb.plain_scan },
    { name = "2) C: readdir(/proc) alone (floor C)", run = cb.readdir_floor },
    { name = "3) takana cold: snapshot{backend=proc,cache=false}",
      run = function() return #takana.snapshot { backend = "proc", cache = false } end },
    { name = "4) takana warm: snapshot{backend=proc}",
      run = function() return #takana.snapshot { backend = "proc" } end },
    { name = "5) plain Lua: lfs.dir + io.open + string.match", run = lua_way },
    { name = "6) Lua: iterate a snapshot reading six fields",
      run = function()
        local acc = 0
        for p in iter_snap:each() do
          acc = acc + p.pid + p.ppid + p.utime_ns + p.stime_ns + p.rss_bytes + #p.comm
        end
        return #iter_snap
      end },
  }
  takana.snapshot { backend = "proc" } -- warm the cache once
  local res = L.measure(cases, ROUNDS)
  L.print_table(("%s: %d processes, %d rounds alternating"):format(title, res[cases[1].name].count, ROUNDS), cases, res)
  local n1, n3, n4, n5, n6 = cases[1].name, cases[3].name, cases[4].name, cases[5].name, cases[6].name
  L.ratio(res, n3, n1, "(3) cold / (1) C path A", { text = "<= 1.15", ok = function(x) return x <= 1.15 end })
  L.ratio(res, n4, n1, "(4) warm / (1) C path A", { text = "<= 0.60", ok = function(x) return x <= 0.6 end })
  L.ratio(res, n5, n3, "(5) plain Lua / (3) cold", { text = ">= 8", ok = function(x) return x >= 8 end })
  L.ratio(res, n6, n3, "(6) iterate / (3) cold", { text = "<= 0.20", ok = function(x) return x <= 0.2 end })
  print()
end

run("natural count")
local herd = L.herd(1000)
local ok, err = pcall(run, "with a herd of 1,000 sleeping processes")
herd.stop()
assert(ok, err)
