-- Regressions from the adversarial audit (issue 12) in the BPF snapshot
-- tiers and the probe. Each spec failed before its fix.
local takana = require "takana"
local H = require "helpers"

local E = require("takana").errno
local EMFILE = E.EMFILE

-- The BPF tiers this kernel and this user can load; the reason for the rest.
local function loadable_tiers()
  local have, why = {}, {}
  for _, name in ipairs { "kfunc", "iter" } do
    local snap, err = takana.snapshot { backend = name }
    if snap then have[#have + 1] = name else why[#why + 1] = name .. ": " .. err end
  end
  return have, table.concat(why, "; ")
end

-- Runs Lua code in a child lua5.4 with the soft descriptor limit at `nofile`;
-- returns its exit code and output.
local function lua_child(nofile, code)
  local cmd = ("ulimit -S -n %d && LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' %s -e %s")
    :format(nofile, H.lua, H.shell_quote(code))
  return H.run(cmd)
end

-- Holds every free descriptor, then gives them back: the code between runs
-- with none free.
local EXHAUST = [[
local held = {}
local function exhaust() while true do local f = io.open("/dev/null") if not f then break end held[#held + 1] = f end end
local function release() for _, f in ipairs(held) do f:close() end held = {} collectgarbage() end
]]

describe("audit: BPF snapshot tiers", function()
  it("never return a process already being reaped (state X, no thread left) during a storm (#17) #slow #root #bpf", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local have, why = loadable_tiers()
    if #have == 0 then return pending("no BPF tier loads here: " .. why) end
    local storm = H.fixture { "--churn", 4 }
    finally(function() storm:kill() end)
    local seen = 0
    -- A bounded number of rounds while the storm runs, and on until a storm
    -- child was caught (they live microseconds).
    for round = 1, 3000 do
      for _, b in ipairs(have) do
        local snap = assert(takana.snapshot { backend = b })
        for p in snap:each() do
          if p.ppid == storm.pid then seen = seen + 1 end
          assert.are_not.equal("X", p.state, ("%s: pid %d in state X"):format(b, p.pid))
          assert.truthy(p.nthreads >= 1, ("%s: pid %d with nthreads %d"):format(b, p.pid, p.nthreads))
        end
      end
      local stat = H.read("/proc/" .. storm.pid .. "/stat")
      if round >= 50 and seen > 0 or not stat or select(2, H.stat_fields(stat))[1] == "Z" then break end
    end
    assert.truthy(seen > 0, "no storm child was ever in a snapshot")
  end)

  it("retry a load that failed for want of descriptors, and then work (#10) #root #bpf", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local have, why = loadable_tiers()
    if #have == 0 then return pending("no BPF tier loads here: " .. why) end
    local tier = have[#have]
    -- The child loads nothing before the descriptors run out.
    local code, out = lua_child(64, EXHAUST .. ([[
      local takana = require "takana"
      exhaust()
      local s, err, errno = takana.snapshot { backend = "%s" }
      release()
      print("starved", s, errno)
      print("free again", takana.snapshot { backend = "%s" } ~= nil)
      print("auto", takana.snapshot().backend)
    ]]):format(tier, tier))
    assert.equal(0, code, out)
    assert.truthy(out:find("starved\tnil\t" .. EMFILE .. "\n", 1, true), out)
    assert.truthy(out:find("free again\ttrue\n", 1, true), out)
    assert.truthy(out:find("auto\t" .. have[1] .. "\n", 1, true), out)
  end)
end)

describe("audit: takana.probe()", function()
  it("never raises, even with no descriptor free, and says what it could not see (#19)", function()
    local code, out = lua_child(64, EXHAUST .. [[
      local takana = require "takana"
      exhaust()
      local ok, r = pcall(takana.probe)
      release()
      print(ok, type(r) == "table" and r.proc and r.proc.ok, type(r) == "table" and r.proc and r.proc.why)
      print(type(r) == "table" and r.cgroup and tostring(r.cgroup.ok))
    ]])
    assert.equal(0, code, out)
    assert.truthy(out:find("^true\tfalse\t/proc is not mounted %(or no descriptor is free to read it%)\n"), out)
  end)

  it("says yes to an event backend only when every event type loads", function()
    local probe = takana.probe()
    for _, name in ipairs { "bpf", "connector" } do
      local ev, why = takana.events { "fork", "exec", "exit", "comm", backend = name }
      assert.equal(ev ~= nil, probe.events[name].ok, name .. ": " .. tostring(why or probe.events[name].why))
      if ev then ev:close() end
    end
  end)

  it("reports each snapshot tier as loaded only if a snapshot from it works", function()
    local probe = takana.probe()
    for _, name in ipairs { "kfunc", "iter", "proc" } do
      local snap = takana.snapshot { backend = name }
      assert.equal(snap ~= nil, probe.snapshot[name].ok, name)
    end
  end)
end)
