-- A supervisor with SERVICES (default 50) sleeping services, stepped STEPS
-- (default 100) times: the command to run under
--   strace -f -c -e trace=epoll_create1 lua5.4 bench/sup_steps.lua
-- to count the epoll sets a step creates (issue 26: none). Needs root
-- (cgroups); makes and removes a takana-bench-steps-* cgroup.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local takana = require "takana"

local K = tonumber(os.getenv("SERVICES") or "") or 50
local STEPS = tonumber(os.getenv("STEPS") or "") or 100
local mnt
for line in io.lines("/proc/self/mountinfo") do
  local m, fstype = line:match("^%S+ %S+ %S+ %S+ (%S+) .- %- (%S+)")
  if fstype == "cgroup2" then mnt = m end
end
assert(mnt, "no cgroup2 mount")
math.randomseed(os.time())
local name = ("takana-bench-steps-%d"):format(math.random(1e9))
local dir = ("/tmp/%s"):format(name)
assert(os.execute("mkdir -p " .. dir))
local sup = assert(takana.supervisor { cgroup = name, runtime = dir, log = false, signals = false })
for i = 1, K do
  sup:service { name = "s" .. i, cmd = { "sleep", "1000" }, restart = "always" }
end
-- Until every service runs; these steps are not counted apart, the marker
-- write below splits the trace.
local t0 = os.time()
repeat
  sup:step(0.05)
  local up = 0
  for _, st in pairs(sup:status()) do if st.state == "running" then up = up + 1 end end
until up == K or os.time() - t0 > 30
io.stderr:write("steps-begin\n")
for _ = 1, STEPS do sup:step(0) end
io.stderr:write("steps-end\n")
sup:shutdown()
while sup:step(0.1) do end
sup:close()
os.execute("rmdir " .. mnt .. "/" .. name .. " 2>/dev/null; rm -rf " .. dir)
print(("%d services, %d steps"):format(K, STEPS))
