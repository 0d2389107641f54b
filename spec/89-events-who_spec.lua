-- Events that say who (issue 23): fork and exec events carry uid, gid and
-- loginuid on both kernel backends (bpf from the credentials at the event,
-- the connector from /proc at receipt, marked who_lost when it could not
-- be read as the event's process), and every event carries realtime_ns,
-- the wall clock takana.to_realtime() converts to.
local takana = require "takana"
local H = require "helpers"

local open = H.open_events

-- What /proc says of this process: children inherit its login uid.
local my_loginuid = tonumber((H.read("/proc/self/loginuid") or ""):match("^%d+"))

local function show(list)
  local out = {}
  for _, e in ipairs(list) do
    local t = {}
    for k, v in pairs(e) do
      if type(v) ~= "table" then t[#t + 1] = k .. "=" .. tostring(v) end
    end
    table.sort(t)
    out[#out + 1] = table.concat(t, " ")
  end
  return table.concat(out, "\n")
end

-- The wall clock of an event lies between os.time() before it was caused
-- and after it was read, give or take the second os.time() truncates to
-- (an ordering, not a timing: a slow host only widens the bracket).
local function near_now(e, t0)
  local s = e.realtime_ns // 1000000000
  return s >= t0 - 1 and s <= os.time() + 1
end

local function assert_who(e, uid, gid, ev, list, t0)
  assert(e, "missing event\n" .. show(list))
  assert(e.uid == uid and e.gid == gid and not e.who_lost,
    ("want uid %d gid %d:\n%s"):format(uid, gid, show { e }))
  if ev.unavailable.loginuid then
    assert.is_nil(e.loginuid)
  elseif my_loginuid then
    assert.equal(my_loginuid, e.loginuid)
  end
  assert(near_now(e, t0), show { e })
end

for _, backend in ipairs { "bpf", "connector" } do
  describe("events that say who, " .. backend .. (backend == "bpf" and " #bpf" or ""), function()
    it("a child spawned as uid 65534 forks and execs as 65534 #root", function()
      if not H.is_root() then return pending("only root spawns as another user") end
      if H.no_spawn then return pending(H.no_spawn) end
      local ev, why = open(backend)
      if not ev then return pending(why) end
      -- A shell that forks a cat blocked on the shell's stdin: both live
      -- until the events are read, so the connector finds them.
      local t0 = os.time()
      local sh = assert(takana.spawn { "/bin/sh", "-c", "cat >/dev/null; exit 0",
        user = 65534, group = 65534, groups = {}, stdin = "pipe", stdout = "null" })
      local got, sh_fork, sh_exec, cat_fork, cat_exec = {}, nil, nil, nil, nil
      H.poll_until({ ev }, function()
        for e in assert(ev:read()) do
          if e.pid == sh.pid or e.ppid == sh.pid then
            got[#got + 1] = e
            if e.pid == sh.pid then
              if e.type == "fork" then sh_fork = e else sh_exec = e end
            elseif e.type == "fork" then
              cat_fork = e
            else
              cat_exec = e
            end
          end
        end
        return sh_fork and sh_exec and cat_fork and cat_exec
      end, 100)
      sh.stdin:close()
      assert.same({ exited = true, code = 0 }, sh:wait(10))
      sh:close()
      ev:close()
      assert_who(sh_exec, 65534, 65534, ev, got, t0)
      assert_who(cat_fork, 65534, 65534, ev, got, t0)
      assert_who(cat_exec, 65534, 65534, ev, got, t0)
      assert(sh_fork, show(got))
      if backend == "bpf" then
        -- Forked by root: the ids it had at the fork.
        assert_who(sh_fork, 0, 0, ev, got, t0)
      else
        -- Read after the child's setuid, which the connector's id
        -- messages announce: not the ids it forked with, so none.
        assert(sh_fork.who_lost and sh_fork.uid == nil and sh_fork.gid == nil
          and sh_fork.loginuid == nil, show { sh_fork })
      end
    end)

    it("carries the ids of a process that is gone before the read", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local ev, why = open(backend)
      if not ev then return pending(why) end
      local t0 = os.time()
      local child = assert(takana.spawn { "/bin/true" })
      assert.same({ exited = true, code = 0 }, child:wait(10))
      local got = {}
      H.poll_until({ ev }, function()
        for e in assert(ev:read()) do
          if e.pid == child.pid then got[#got + 1] = e end
        end
        return #got >= 2
      end, 100)
      child:close()
      local stats = ev:stats()
      ev:close()
      assert.equal(2, #got, show(got))
      for _, e in ipairs(got) do
        assert(near_now(e, t0), show { e })
        if backend == "bpf" then
          -- Read from the credentials at the event itself.
          assert_who(e, H.uid(), tonumber(H.read("/proc/self/status"):match("\nGid:%s+%d+%s+(%d+)")), ev, got, t0)
        else
          -- Reaped before the stream read /proc: marked, and counted.
          assert(e.who_lost and e.uid == nil and e.gid == nil and e.loginuid == nil, show { e })
        end
      end
      if backend == "connector" then
        assert.truthy(stats.who_lost >= 2)
      else
        assert.equal(0, stats.who_lost)
      end
    end)

    it("says which fields this kernel cannot fill, and why", function()
      local ev, why = open(backend)
      if not ev then return pending(why) end
      local unavailable = ev.unavailable
      ev:close()
      assert.is_table(unavailable)
      if H.read("/proc/self/loginuid") then
        assert.same({}, unavailable)
      else
        assert.matches("CONFIG_AUDIT", unavailable.loginuid)
      end
    end)
  end)
end

describe("realtime_ns", function()
  it("is on every event, poll's too, and is what to_realtime gives for time_ns", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local ev = assert(takana.events { "fork", "exit", backend = "poll", interval = 0.02 })
    local t0 = os.time()
    local fx = H.fixture {}
    local got = {}
    H.poll_until({ ev }, function()
      for e in assert(ev:read()) do if e.pid == fx.pid then got[#got + 1] = e end end
      return #got > 0
    end)
    fx:kill()
    ev:close()
    local e = assert(got[1])
    assert.is_true(e.observed)
    assert.is_nil(e.uid)
    assert.is_true(math.type(e.realtime_ns) == "integer")
    assert(near_now(e, t0), show { e })
    -- The same offset, sampled apart: equal but for a clock slew between.
    assert.truthy(math.abs(takana.to_realtime(e.time_ns) - e.realtime_ns) < 50e6)
  end)

  it("to_realtime converts a boottime stamp to the wall clock", function()
    local t0 = os.time()
    local b = takana.boottime_ns()
    local r = takana.to_realtime(b)
    assert.is_true(math.type(r) == "integer")
    assert.truthy(near_now({ realtime_ns = r }, t0))
    -- A stamp 0 is the boot, before now by the time since boot.
    assert.truthy(math.abs((r - takana.to_realtime(0)) - b) < 50e6)
  end)

  it("to_realtime rejects what is not a boottime stamp", function()
    assert.has_error(function() takana.to_realtime() end,
      "bad argument #1 to 'to_realtime' (number expected, got no value)")
    assert.has_error(function() takana.to_realtime(nil) end,
      "bad argument #1 to 'to_realtime' (number expected, got nil)")
    assert.has_error(function() takana.to_realtime("now") end,
      "bad argument #1 to 'to_realtime' (number expected, got string)")
    assert.has_error(function() takana.to_realtime("1\0") end)
    assert.has_error(function() takana.to_realtime({}) end,
      "bad argument #1 to 'to_realtime' (number expected, got table)")
    assert.has_error(function() takana.to_realtime(1.5) end,
      "bad argument #1 to 'to_realtime' (number has no integer representation)")
    assert.has_error(function() takana.to_realtime(0 / 0) end)
    assert.has_error(function() takana.to_realtime(-1) end,
      "bad argument #1 to 'to_realtime' (a CLOCK_BOOTTIME stamp in ns is never negative)")
    assert.has_error(function() takana.to_realtime(math.maxinteger) end,
      "bad argument #1 to 'to_realtime' (ns too large: its wall-clock time would not fit an integer)")
    assert.has_error(function() takana.to_realtime(1, 2) end)
  end)
end)
