-- Regression specs for the event items of the adversarial audit (issue 12):
-- a spoofable connector (5), overflow reported only later or never (7), an
-- unbounded user-space queue (8), duplicate bpf exits (9), dropped bpf
-- streams the collector did not see (11), host pids in a child pid
-- namespace (18), and the smaller ones of 19. Each failed before its fix.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local E = require("takana").errno
local EXDEV, EMFILE, EBADF = E.EXDEV, E.EMFILE, E.EBADF

local function need_root()
  if not H.is_root() then return "needs root (CAP_NET_ADMIN, CAP_BPF)" end
  if H.no_spawn then return H.no_spawn end
end

local function need_bpf()
  return need_root() or (not core.bpf_built and "built without BPF") or nil
end

-- Runs Lua source in a child lua5.4 that finds this tree's takana; `prefix`
-- is a shell command put before it (ulimit, unshare). Returns code, output.
local function run_lua(src, prefix)
  local env = ("LUA_PATH=%s LUA_CPATH=%s"):format(H.shell_quote(package.path),
    H.shell_quote(package.cpath))
  local cmd = ("%s env %s %s -e %s"):format(prefix or "", env, H.lua, H.shell_quote(src))
  return H.run(cmd)
end

-- The netlink port id of a stream's socket, as any local user can read it.
local function netlink_port(ev)
  local uv = require "luv"
  local link = assert(uv.fs_readlink("/proc/" .. H.pid .. "/fd/" .. ev:fileno()))
  local ino = assert(link:match("socket:%[(%d+)%]"))
  for line in io.lines("/proc/net/netlink") do
    local f = {}
    for w in line:gmatch("%S+") do f[#f + 1] = w end
    if f[#f] == ino then return f[3] end
  end
end

local function rss_kib()
  return tonumber(H.read("/proc/self/status"):match("VmRSS:%s+(%d+)"))
end

-- Drains a stream a bounded number of times; returns the events.
local function drain(ev, tries)
  local got = {}
  for _ = 1, tries or 5 do
    takana.poll({ ev }, 0.1)
    for e in ev:read() do got[#got + 1] = e end
  end
  return got
end

describe("audit 5: the connector trusts only the kernel", function()
  it("drops forged messages from a user sender and counts them as spoofed #root", function()
    local why = need_root()
    if why then return pending(why) end
    local ev = assert(takana.events { backend = "connector" })
    local child = assert(takana.spawn { H.fixture_path, "--life", "30", stdout = "null" })
    local port = assert(netlink_port(ev))
    drain(ev, 2)
    local rss0 = rss_kib()
    for _, mode in ipairs { "exit", "seq", "cpu" } do
      local code, out = H.run(("%s --cn-send %s %s %d"):format(H.fixture_path, port, mode, child.pid))
      assert.equal(0, code, out)
    end
    local got = drain(ev, 5)
    for _, e in ipairs(got) do
      assert(not (e.type == "exit" and e.pid == child.pid), "a forged exit of a live child was accepted")
      assert(e.type ~= "lost", "a forged sequence number made a lost event")
      -- (the forged forks name the live child, already drained as forked)
      assert(not (e.type == "fork" and e.pid == child.pid), "a forged fork was accepted")
    end
    assert.is_true(child:alive())
    assert.equal(0, ev:lost())
    local st = ev:stats()
    assert.equal(3, st.spoofed)
    assert.equal(0, st.lost)
    -- cpu = 200,000,000 allocated 1.6 GB of per-CPU state: nothing now.
    assert.truthy(rss_kib() - rss0 < 16 * 1024, "RSS grew by " .. (rss_kib() - rss0) .. " KiB")
    -- The kernel's own messages still arrive.
    local c2 = assert(takana.spawn { "true" })
    local cpid = c2.pid
    c2:wait()
    local seen = false
    H.poll_until({ ev }, function()
      for e in ev:read() do if e.type == "exit" and e.pid == cpid then seen = true end end
      return seen
    end)
    assert.is_true(seen)
    child:signal("KILL")
    child:wait()
    ev:close()
  end)
end)

describe("audit 7: a connector overflow is reported at once", function()
  it("yields a lost event (count nil, overrun true) on ENOBUFS, and lost() counts it #root", function()
    local why = need_root()
    if why then return pending(why) end
    -- The smallest socket buffer: a storm the reader does not drain overflows it.
    local ev = assert(takana.events { backend = "connector", buffer = 1 })
    local storm = assert(takana.spawn { H.fixture_path, "--churn", "0.5", stdout = "pipe" })
    for line in function() return storm.stdout:read_line() end do if line:match("^forks") then break end end
    storm:wait()
    local got = drain(ev, 1)
    assert.truthy(ev:stats().overruns > 0, "the storm did not overflow the socket")
    local unknown, sum = 0, 0
    for _, e in ipairs(got) do
      if e.type == "lost" then
        if e.count == nil then
          assert.is_true(e.overrun)
          unknown = unknown + 1
        end
        sum = sum + (e.count or 1)
      end
    end
    assert.truthy(unknown > 0, "no lost event for the overrun")
    -- lost() is the sum of the lost events' counts, nil counting as 1.
    local lost = ev:lost()
    assert.equal(sum, lost)
    assert.equal(lost, ev:stats().lost)
    assert.equal(0, ev:lost())
    -- Later messages on every CPU give the exact size: the count events
    -- then carry what the overruns' 1s did not cover.
    for _ = 1, 20 do
      local c = assert(takana.spawn { "true" })
      c:wait()
    end
    for _, e in ipairs(drain(ev, 3)) do
      if e.type == "lost" then sum = sum + (e.count or 1) end
    end
    assert.equal(sum, lost + ev:lost())
    assert.truthy(sum > unknown, "the sequence gaps never gave the loss's size")
    ev:close()
  end)
end)

describe("audit 8: the user-space queue is bounded", function()
  for _, backend in ipairs { "bpf", "connector" } do
    it(backend .. ": read() moves at most `queue` events; the rest is lost loudly #root"
        .. (backend == "bpf" and " #bpf" or ""), function()
      local why = backend == "bpf" and need_bpf() or need_root()
      if why then return pending(why) end
      local ev = assert(takana.events { backend = backend, "fork", "exit", queue = 64, buffer = 4096 })
      local storm = assert(takana.spawn { H.fixture_path, "--churn", "0.5", stdout = "pipe" })
      for line in function() return storm.stdout:read_line() end do if line:match("^forks") then break end end
      storm:wait()
      local seen_lost, taken = false, 0
      -- One event per wake-up, as a slow reader does.
      for _ = 1, 300 do
        local it = ev:read()
        -- At most `queue` events, and one lost marker on top.
        assert.truthy(ev:stats().queued <= 64 + 1, "queued " .. ev:stats().queued)
        local e = it()
        if not e then break end
        taken = taken + 1
        if e.type == "lost" then seen_lost = true end
      end
      assert.truthy(taken > 0)
      assert.is_true(seen_lost)
      assert.truthy(ev:stats().lost > 0)
      ev:close()
    end)
  end

  it("rejects a bad queue option", function()
    assert.has_error(function() takana.events { queue = 0 } end,
      "bad argument #1 to 'events' (queue must be an integer number of events, 1..16777216)")
    assert.has_error(function() takana.events { queue = 1.5 } end)
    assert.has_error(function() takana.events { queue = "x" } end)
  end)

  it("poll: a diff bigger than the queue is cut there with a lost event", function()
    local ev = assert(takana.events { backend = "poll", "fork", "exit", interval = 0.01, queue = 2 })
    local herd = H.fixture { "--herd", "8" }
    H.poll_until({ ev }, function() return false end, 3)
    local got, lost = {}, false
    for e in ev:read() do
      got[#got + 1] = e
      if e.type == "lost" then lost = true end
    end
    herd:kill()
    ev:close()
    assert.truthy(#got <= 3, #got .. " events from one read")
    assert.is_true(lost)
  end)
end)

describe("audit 9: one bpf exit per process #slow", function()
  it("reports exactly one exit for each multi-threaded child of a storm #root #bpf", function()
    local why = need_bpf()
    if why then return pending(why) end
    local ev = assert(takana.events { backend = "bpf", "exit" })
    local storm = assert(takana.spawn { H.fixture_path, "--thread-storm", "400", stdout = "pipe" })
    -- A process is (pid, start_ns): on a busy host another process may
    -- have held a child's pid and died while the stream was open.
    local kids, counts, exits = {}, {}, {}
    local function take()
      for e in ev:read() do
        if e.type == "exit" then
          local key = e.pid .. "/" .. tostring(e.start_ns)
          counts[key] = (counts[key] or 0) + 1
          exits[#exits + 1] = e
        end
      end
    end
    for line in function() return storm.stdout:read_line() end do
      local pid = line:match("^child (%d+)")
      if pid then kids[#kids + 1] = tonumber(pid) end
      if line == "done" then break end
      take()   -- keeps the ring from filling while the storm runs
    end
    storm:wait()
    H.poll_until({ ev }, function() take() return false end, 5)
    assert.equal(400, #kids)
    assert.equal(0, ev:stats().lost)
    local mine = {}
    for _, pid in ipairs(kids) do mine[pid] = true end
    local per_kid = {}
    for _, e in ipairs(exits) do
      if mine[e.pid] then
        assert.is_number(e.start_ns)
        local key = e.pid .. "/" .. e.start_ns
        if counts[key] ~= 1 then
          local seen = {}
          for _, x in ipairs(exits) do
            if x.pid == e.pid and x.start_ns == e.start_ns then
              seen[#seen + 1] = ("tid %d at %d ns, code %s, signal %s"):format(x.tid, x.time_ns,
                tostring(x.code), tostring(x.signal))
            end
          end
          error(("pid %d started at %d ns: %d exit events: %s"):format(e.pid, e.start_ns, counts[key],
            table.concat(seen, "; ")))
        end
        if e.code == 7 then per_kid[e.pid] = (per_kid[e.pid] or 0) + 1 end
      end
    end
    -- each child's own exit, once, with its exit_group code
    for _, pid in ipairs(kids) do assert.equal(1, per_kid[pid], "exits of child " .. pid .. " with code 7") end
    ev:close()
  end)
end)

describe("audit 11: dropped bpf streams are collected before descriptors run out", function()
  it("opens 100 unclosed streams under ulimit -n 256 #root #bpf", function()
    local why = need_bpf()
    if why then return pending(why) end
    local code, out = run_lua([[
      local takana = require "takana"
      for i = 1, 100 do
        local ev, err = takana.events { backend = "bpf" }
        if not ev then print("stream " .. i .. " failed: " .. err) os.exit(1) end
      end
      print("ok")
    ]], "ulimit -n 256;")
    assert.equal(0, code, out)
    assert.matches("ok", out)
  end)

  it("names descriptors, not EINVAL, when only 3 are free #root #bpf", function()
    local why = need_bpf()
    if why then return pending(why) end
    local code, out = run_lua([[
      local takana = require "takana"
      local files = {}
      while true do
        local f = io.open("/dev/null")
        if not f then break end
        files[#files + 1] = f
      end
      for _ = 1, 3 do table.remove(files):close() end
      local ev, err, errno = takana.events { backend = "bpf" }
      print(tostring(ev), err, errno)
      os.exit(ev and 1 or 0)
    ]], "ulimit -n 200;")
    assert.equal(0, code, out)
    assert.matches("descriptors", out)
    assert.matches("ulimit %-n", out)
    assert.matches("\t" .. EMFILE .. "\n", out)
  end)
end)

describe("audit 18: bpf events in a child pid namespace", function()
  it("reports pids as the reader's namespace numbers them #root #bpf", function()
    local why = need_bpf()
    if why then return pending(why) end
    if H.run("command -v unshare") ~= 0 then return pending("unshare(1) is not installed") end
    local code, out = run_lua([[
      local takana = require "takana"
      local ev = assert(takana.events { backend = "bpf", "fork", "exit" })
      local child = assert(takana.spawn { "sh", "-c", "exit 42" })
      local cpid = child.pid
      child:wait()
      local fork, exit
      for _ = 1, 20 do
        takana.poll({ ev }, 0.1)
        for e in ev:read() do
          if e.type == "exit" and e.code == 42 then exit = e end
          if e.type == "fork" and e.pid == cpid then fork = e end
        end
        if exit and fork then break end
      end
      print(("child %d exit %s ppid %s fork %s ppid %s self %d"):format(cpid,
        exit and exit.pid, exit and exit.ppid, fork and fork.pid, fork and fork.ppid,
        io.open("/proc/self/stat"):read("n")))
    ]], "unshare -p -f --mount-proc")
    assert.equal(0, code, out)
    local cpid, epid, eppid, fpid, fppid, self =
      out:match("child (%d+) exit (%S+) ppid (%S+) fork (%S+) ppid (%S+) self (%d+)")
    assert(cpid, out)
    assert.equal(cpid, epid)
    assert.equal(cpid, fpid)
    assert.equal(self, fppid)
    assert.equal(self, eppid)
  end)
end)

describe("audit 19: events errors say what happened", function()
  it("the connector in a child pid namespace fails at once with EXDEV #root", function()
    local why = need_root()
    if why then return pending(why) end
    if H.run("command -v unshare") ~= 0 then return pending("unshare(1) is not installed") end
    local code, out = run_lua([[
      local takana = require "takana"
      local ev, err, errno = takana.events { backend = "connector" }
      print(tostring(ev), err, errno)
    ]], "unshare -p -f --mount-proc")
    assert.equal(0, code, out)
    assert.matches("initial pid and user namespaces", out)
    assert.matches("\t" .. EXDEV .. "\n", out)
  end)

  it("read() returns nil, message, errno on a runtime failure", function()
    local uv = require "luv"
    local ev = assert(takana.events { backend = "poll", interval = 0.01 })
    -- The stream's descriptor is taken away behind its back.
    assert(uv.fs_close(ev:fileno()))
    local it, err, errno = ev:read()
    assert.is_nil(it)
    assert.matches("^events: read %(poll%): ", err)
    assert.equal(EBADF, errno)
    ev:close()
  end)

  it("refuses exec on the poll backend, naming what it observes", function()
    local ev, err, errno = takana.events { "exec", backend = "poll" }
    assert.is_nil(ev)
    assert.matches("fork, exit and comm", err)
    assert.is_number(errno)
    -- The default set on poll is what poll can see.
    local ev2 = assert(takana.events { backend = "poll" })
    ev2:close()
  end)

  it("raises on extra arguments", function()
    local ev = assert(takana.events { backend = "poll" })
    for _, m in ipairs { "read", "lost", "stats", "fileno", "pollfd", "events", "timeout", "close" } do
      assert.has_error(function() ev[m](ev, 1) end)
    end
    ev:close()
  end)
end)

describe("audit 2: an event stream closed by a finalizer during read()", function()
  -- Unreachable, with a finalizer; made in a function of its own so no
  -- register of the caller's frame still holds the table when it is
  -- collected.
  local function drop_finalized(fn)
    setmetatable({}, { __gc = fn })
  end

  it("ends the iteration; the event being built is not read from the freed queue (ASan)", function()
    local ev = takana.events { "fork", "exec", "exit", backend = "connector" }
    if not ev then return pending("the proc connector is not available here") end
    for _ = 1, 40 do local c = assert(takana.spawn { "true" }) c:wait() c:close() end
    -- Deterministic, not a chance: with a pause of 1% (no rest between
    -- cycles) and a step size of 2^63 bytes (unbounded: each step runs its
    -- cycle to the end, finalizers included), every allocation that checks
    -- the collector finishes a whole cycle. The first after the finalized
    -- table is dropped is the event table the iterator creates
    -- (lua_createtable in event_push, after it took the event from the
    -- queue): the finalizer closes the stream there. make test-gc's
    -- collecting hook is set aside meanwhile (it could collect between the
    -- drop and the read).
    local hook, mask, count = debug.gethook()
    debug.sethook()
    local mode = collectgarbage("incremental", 1, 100, 63)
    local n, closed_at = 0, nil
    local ok, err = pcall(function()
      collectgarbage("collect")
      local it = assert(ev:read())
      drop_finalized(function() closed_at = n ev:close() end)
      for _ in it do n = n + 1 end
    end)
    collectgarbage("incremental", 200, 100, 13)
    if mode == "generational" then collectgarbage("generational") end
    if hook then debug.sethook(hook, mask, count) end
    assert(ok, err)
    -- Closed while the iterator built an event: that event is still
    -- returned (from a copy), then the iteration ends.
    assert.is_number(closed_at, "the finalizer did not run during the iteration")
    assert.equal(closed_at + 1, n)
    assert.matches("closed", tostring(ev))
  end)
end)
