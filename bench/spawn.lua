-- make bench: spawn+wait cost against the parent's size, next to fork and
-- posix_spawn from C, in one run with alternating rounds.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local cb = require "takana_bench"
local L = require "lib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 33
local TRUE = "/bin/true"

local function cases(tag)
  return {
    { name = "takana.spawn{/bin/true}:wait() from Lua, heap " .. tag,
      run = function() assert(takana.spawn { TRUE }):wait() return 1 end },
    { name = "C fork+exec+wait, heap " .. tag, run = function() return cb.fork_exec_wait(TRUE) end },
    { name = "C posix_spawn+wait, heap " .. tag, run = function() return cb.posix_spawn_wait(TRUE) end },
  }
end

local c0 = cases("0 GiB")
local r0 = L.measure(c0, ROUNDS)
L.print_table(("spawn, parent heap ~0, %d rounds alternating"):format(ROUNDS), c0, r0, 1)

local ballast = string.rep("x", 1 << 30) -- 1 GiB touched in this process
local c1 = cases("1 GiB")
local r1 = L.measure(c1, ROUNDS)
L.print_table(("spawn, parent heap 1 GiB touched, %d rounds alternating"):format(ROUNDS), c1, r1, 1)
assert(#ballast == 1 << 30)

local function ratio(a, b, label, text, ok)
  local x = a / b
  print(("  %-60s %7.3f   target %s  %s"):format(label, x, text, ok(x) and "met" or "MISSED"))
end
ratio(r1[c1[1].name].min, r0[c0[1].name].min, "takana at 1 GiB / takana at 0", "<= 1.2", function(x) return x <= 1.2 end)
ratio(r1[c1[2].name].min, r1[c1[1].name].min, "fork at 1 GiB / takana at 1 GiB", ">= 10", function(x) return x >= 10 end)
ratio(r0[c0[1].name].min, r0[c0[3].name].min, "takana / posix_spawn from C (heap 0)", "<= 1.3", function(x) return x <= 1.3 end)
ballast = nil -- luacheck: ignore 311 (freeing the heap is the point)
collectgarbage()

-- Liveness: p:alive() from Lua against kill(pid, 0) from C.
local child = assert(takana.spawn { "sleep", "60" })
local N = 10000
local alive_cases = {
  { name = "p:alive() from Lua (poll on the pidfd)", run = function()
      local t0 = cb.now_ns()
      for _ = 1, N do child:alive() end
      return N, cb.now_ns() - t0
    end },
  { name = "kill(pid, 0) from C", run = function() return cb.kill0_loop(child.pid, N) end },
}
local ra = L.measure(alive_cases, ROUNDS)
print(("== liveness, %d calls per round, %d rounds alternating =="):format(N, ROUNDS))
for _, c in ipairs(alive_cases) do
  print(("  %-52s min %8.1f ns/call  median %8.1f ns/call"):format(c.name, ra[c.name].min / N, ra[c.name].median / N))
end
ratio(ra[alive_cases[1].name].min, ra[alive_cases[2].name].min, "p:alive() / kill(pid, 0)", "<= 3", function(x) return x <= 3 end)
child:signal("KILL")
child:wait()
