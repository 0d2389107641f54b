-- takana loaded in several Lua states at once, one per luv thread: what the
-- states share is the module's globals (the BPF tiers, loaded under a lock;
-- the /proc descriptor budget; libbpf's print hook). make test-tsan runs
-- this file against a module built with ThreadSanitizer (.ci/tsan).
local H = require "helpers"
local takana = require "takana"

local ok_luv, uv = pcall(require, "luv")

local ENV = "LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;'"

-- Runs in a fresh Lua state: nothing from this file is visible to it but
-- its arguments. Writes one line per result to out_path.
local function worker(out_path, self_pid, rounds, release)
  package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
  package.cpath = "./?.so;" .. package.cpath
  local t = require "takana"
  local core = require "takana.core"
  local f = assert(io.open(out_path, "w"))
  for round = 1, rounds do
    for _, backend in ipairs { "kfunc", "iter", "proc" } do
      local s, why = t.snapshot { backend = backend }
      if s then
        local prev, ordered = 0, true
        for p in s:each() do
          if p.pid <= prev then ordered = false end
          prev = p.pid
        end
        f:write(("snap %s ok %s %s %s\n"):format(backend, s.backend, tostring(s:get(self_pid) ~= nil),
          tostring(ordered)))
      else
        f:write(("snap %s fail %s\n"):format(backend, why))
      end
    end
    for _, backend in ipairs { "bpf", "connector", "poll" } do
      local ev, why = t.events { "fork", "exit", backend = backend }
      if ev then
        for _ in ev:read() do end
        f:write(("events %s ok %s\n"):format(backend, ev.backend))
        ev:close()
      else
        f:write(("events %s fail %s\n"):format(backend, why))
      end
    end
    -- unload the tiers under the others' feet: the next snapshot reloads
    if release and round % 2 == 0 then core.bpf_release() end
  end
  f:close()
end

describe("takana in several luv threads at once", function()
  it("snapshots every backend and opens every event stream, each result complete", function()
    if not ok_luv then return pending("lua-luv is not installed") end
    local dir = select(2, H.run("mktemp -d")):match("%S+")
    finally(function() os.execute("rm -rf " .. H.shell_quote(dir)) end)
    -- What this thread gets is what every thread must get.
    local want = {}
    for _, backend in ipairs { "kfunc", "iter", "proc" } do
      local s, why = takana.snapshot { backend = backend }
      want["snap " .. backend] = s and ("ok " .. s.backend .. " true true") or ("fail " .. why)
    end
    for _, backend in ipairs { "bpf", "connector", "poll" } do
      local ev, why = takana.events { "fork", "exit", backend = backend }
      want["events " .. backend] = ev and ("ok " .. ev.backend) or ("fail " .. why)
      if ev then ev:close() end
    end
    local rounds, threads = 6, {}
    for i = 1, 4 do
      threads[i] = uv.new_thread(worker, dir .. "/" .. i, H.pid, rounds, i == 1)
    end
    for _, th in ipairs(threads) do th:join() end
    for i = 1, 4 do
      local lines = 0
      for line in io.lines(dir .. "/" .. i) do
        local key, result = line:match("^(%a+ %a+) (.*)$")
        assert.equal(want[key], result, "thread " .. i)
        lines = lines + 1
      end
      assert.equal(rounds * 6, lines, "thread " .. i)
    end
  end)

  -- Every /proc reader of the process draws its cached descriptors from one
  -- budget (a quarter of RLIMIT_NOFILE, csrc/core/proc_scan.c). Readers that
  -- start at the same moment must not take it several times over. Run in a
  -- child with a small limit (256: a budget of 64) and more processes than
  -- that, in rounds of 4 fresh states released together.
  it("keeps the shared /proc descriptor budget when readers start together #budget #slow", function()
    if not ok_luv then return pending("lua-luv is not installed") end
    local herd = H.fixture { "--herd", 200 }
    local script = os.tmpname()
    -- busted keeps one finally per test: the last one given
    finally(function()
      herd:kill()
      os.remove(script)
    end)
    local f = assert(io.open(script, "w"))
    f:write([[
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local uv = require "luv"
local function reader(start_at)
  package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
  package.cpath = "./?.so;" .. package.cpath
  local t = require "takana"
  local clock = require "luv"
  while clock.hrtime() < start_at do end
  local s, why = t.snapshot { backend = "proc" }
  local info = t.proc_cache_info()
  io.write(s and ("%d %d %d\n"):format(#s, info.process_fds, info.limit) or ("failed: " .. why .. "\n"))
end
for _ = 1, 60 do
  local th = {}
  local start_at = uv.hrtime() + 5e7
  for i = 1, 2 do th[i] = uv.new_thread(reader, start_at) end
  for i = 1, 2 do th[i]:join() end
end
]])
    f:close()
    local code, out = H.run("ulimit -n 256 && " .. ENV .. " " .. H.lua .. " " .. script)
    assert.equal(0, code, out)
    local lines = 0
    for line in out:gmatch("[^\n]+") do
      local n, held, limit = line:match("^(%d+) (%d+) (%d+)$")
      n, held, limit = tonumber(n), tonumber(held), tonumber(limit)
      -- an EMFILE (the budget overrun took the descriptors) halves a
      -- reader's limit, or fails it
      assert(limit, "a reader failed:\n" .. out)
      assert.equal(64, limit, out)
      assert.truthy(n > limit, "fewer processes than the budget: " .. n)
      assert.truthy(held <= limit, ("%d descriptors held, budget %d:\n%s"):format(held, limit, out))
      lines = lines + 1
    end
    assert.equal(120, lines, out)
  end)
end)
