-- Process events from every backend this host offers, against a known
-- family of real processes (spec/fixture --tree): the exact sequence of
-- events for those pids, with their fields.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local function open(backend, opts)
  opts = opts or {}
  opts.backend = backend
  local ev, why, errno = takana.events(opts)
  if not ev and H.is_root() and core.bpf_built then
    -- Where a backend must work, its failure fails the spec.
    error(why)
  end
  return ev, why, errno
end

-- Reads the events keep() wants until done(list) is true, waiting on the
-- stream between reads (a bounded number of times).
local function collect(ev, keep, done)
  local got = {}
  H.poll_until({ ev }, function()
    for e in ev:read() do
      if keep(e) then got[#got + 1] = e end
    end
    return done(got)
  end)
  return got
end

local function describe_events(list)
  local out = {}
  for _, e in ipairs(list) do
    local t = {}
    for k, v in pairs(e) do
      if k ~= "time_ns" then t[#t + 1] = k .. "=" .. tostring(v) end
    end
    table.sort(t)
    out[#out + 1] = table.concat(t, " ")
  end
  return table.concat(out, "\n")
end

local function start_tree()
  local child = assert(takana.spawn { H.fixture_path, "--tree", stdout = "pipe" })
  local line = child.stdout:read("l")
  local rss_line = child.stdout:read("l")
  assert.same({ exited = true, code = 0 }, child:wait(10))
  local pids, maxrss = {}, {}
  for n in line:gmatch("%d+") do pids[#pids + 1] = tonumber(n) end
  for n in rss_line:gmatch("%d+") do maxrss[#maxrss + 1] = tonumber(n) * 1024 end
  child:close()
  -- parent, true-child, exit-3 child, killed child, renamed child; and
  -- the children's ru_maxrss from wait4 in bytes
  return pids, maxrss
end

local my_comm = H.read("/proc/self/comm"):gsub("\n$", "")

for _, backend in ipairs { "bpf", "connector" } do
  describe("takana.events{backend='" .. backend .. "'}" .. (backend == "bpf" and " #root #bpf" or ""), function()
    it("reports fork, exec, exit and comm of a known family, in order, exactly", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local ev, why = open(backend)
      if not ev then return pending(why) end
      assert.equal(backend, ev.backend)
      assert.is_function(ev.read)
      assert.is_nil(ev.no_such_field)
      local t0 = H.boottime_ns()
      local pids, maxrss = start_tree()
      local P, c_true, c_exit3, c_killed, c_renamed = table.unpack(pids)
      local family = {}
      for _, p in ipairs(pids) do family[p] = true end
      local got = collect(ev, function(e) return family[e.pid] end, function(list)
        local last = list[#list]
        return last and last.type == "exit" and last.pid == P
      end)
      ev:close()

      local want = {
        { type = "fork", pid = P, ppid = H.pid },
        { type = "exec", pid = P },
        { type = "fork", pid = c_true, ppid = P },
        { type = "exec", pid = c_true },
        { type = "exit", pid = c_true, code = 0 },
        { type = "fork", pid = c_exit3, ppid = P },
        { type = "exit", pid = c_exit3, code = 3 },
        { type = "fork", pid = c_killed, ppid = P },
        { type = "exit", pid = c_killed, signal = 9, core = false },
        { type = "fork", pid = c_renamed, ppid = P },
        { type = "comm", pid = c_renamed, comm = "renamed" },
        { type = "exit", pid = c_renamed, code = 0 },
        { type = "exit", pid = P, code = 0 },
      }
      assert.equal(#want, #got, describe_events(got))
      for i = 2, #got do assert.truthy(got[i].time_ns >= got[i - 1].time_ns) end
      if backend == "connector" then
        -- The connector sends an exit after the kernel has woken the
        -- parent (do_exit: exit_notify, then proc_exit_connector): the
        -- parent may reap that child and fork the next before the exit
        -- arrives (seen on 6.12 under TCG). Each process's own events are
        -- in order; then the family is compared in want's order.
        local rank, last = {}, {}
        for i, w in ipairs(want) do rank[w.pid .. w.type] = i end
        for _, e in ipairs(got) do
          local r = rank[e.pid .. e.type]
          assert(r and (last[e.pid] or 0) < r, "unexpected or out of order for its process: "
            .. e.pid .. " " .. e.type .. "\n" .. describe_events(got))
          last[e.pid] = r
        end
        table.sort(got, function(a, b) return rank[a.pid .. a.type] < rank[b.pid .. b.type] end)
      end
      for i, w in ipairs(want) do
        local e = got[i]
        for k, v in pairs(w) do
          assert(e[k] == v, ("event %d: %s = %s, want %s\n%s"):format(i, k, tostring(e[k]),
            tostring(v), describe_events(got)))
        end
        assert.equal(e.pid, e.tid)
        assert.truthy(e.time_ns >= t0 - 1e7 and e.time_ns <= H.boottime_ns() + 1e7)
        if e.type == "exit" and e.code then assert.is_nil(e.signal) end
      end

      if backend == "bpf" then
        -- What only BPF sees: names at every step, exec's file, the
        -- final accounting of every exit.
        assert.equal(my_comm, got[1].comm)
        assert.equal("fixture", got[2].comm)
        assert.equal(H.fixture_path, got[2].filename)
        assert.equal("fixture", got[3].comm)
        assert.equal("true", got[4].comm)
        assert.equal("/bin/true", got[4].filename)
        assert.equal("renamed", got[12].comm)
        for _, e in ipairs(got) do
          if e.type == "exit" then
            assert.is_number(e.utime_ns)
            assert.is_number(e.stime_ns)
            assert.truthy(e.cgroup_id > 0)
          end
        end
        -- Peak rss exactly as wait4(2) gave it to the parent (a child
        -- killed before it ran may have none of its own).
        assert.equal(maxrss[1], got[5].maxrss_bytes)
        assert.equal(maxrss[2], got[7].maxrss_bytes)
        assert.equal(maxrss[3], got[9].maxrss_bytes)
        assert.equal(maxrss[4], got[12].maxrss_bytes)
        assert.truthy(got[13].maxrss_bytes > 0)
        -- The parent ran the longest; its own cgroup id is that of this spec's.
        assert.truthy(got[13].utime_ns + got[13].stime_ns > 0)
      else
        -- The connector carries no names but comm changes; exec's name is
        -- read from /proc when the process is still there.
        assert.is_nil(got[1].comm)
        assert.truthy(got[4].comm == nil or got[4].comm == "true")
        assert.is_nil(got[5].utime_ns)
      end
      assert.equal(0, ev.backend == backend and 0 or 1)
    end)

    it("counts what it lost, and returns and resets the count", function()
      local ev, why = open(backend)
      if not ev then return pending(why) end
      assert.equal(0, ev:lost())
      local stats = ev:stats()
      assert.equal(0, stats.lost)
      assert.equal(0, stats.malformed)
      ev:close()
      local ok, err = pcall(ev.lost, ev)
      assert.is_false(ok)
      assert.matches("attempt to use a closed event stream", err)
    end)
  end)
end

describe("takana.events{backend='poll'}", function()
  it("synthesises fork and exit from snapshots, marked observed", function()
    local ev = assert(takana.events { backend = "poll", interval = 0.02 })
    assert.equal("poll", ev.backend)
    local fx = H.fixture { "--name", "polled one" }
    local forks = collect(ev, function(e) return e.pid == fx.pid end, function(l) return #l > 0 end)
    assert.equal(1, #forks, describe_events(forks))
    local f = forks[1]
    assert.equal("fork", f.type)
    assert.equal("polled one", f.comm)
    assert.equal(H.pid, f.ppid)
    assert.is_true(f.observed)
    -- A fork's time is the process's start time (ticks).
    assert.truthy(f.time_ns > 0 and f.time_ns <= H.boottime_ns())
    fx:kill()
    local exits = collect(ev, function(e) return e.pid == fx.pid end, function(l) return #l > 0 end)
    assert.equal(1, #exits, describe_events(exits))
    assert.equal("exit", exits[1].type)
    assert.is_true(exits[1].observed)
    assert.is_nil(exits[1].code)
    assert.is_nil(exits[1].signal)
    ev:close()
  end)

  it("sees a comm change as an observed comm event", function()
    local ev = assert(takana.events { "comm", backend = "poll", interval = 0.02 })
    local fx = H.fixture { "--name", "before", "--rename", "after" }
    local got = collect(ev, function(e) return e.pid == fx.pid end, function(l) return #l > 0 end)
    fx:kill()
    ev:close()
    assert.equal(1, #got)
    assert.equal("comm", got[1].type)
    assert.equal("after", got[1].comm)
  end)
end)

describe("takana.events backend choice", function()
  it("auto takes the best backend that opens and says why it skipped others", function()
    local ev = assert(takana.events())
    local probe = takana.probe()
    assert.equal(probe.events.backend, ev.backend)
    for _, name in ipairs { "bpf", "connector" } do
      if name == ev.backend then break end
      assert.is_string(ev.skipped[name])
      assert.equal(probe.events[name].why, ev.skipped[name])
    end
    if H.is_root() and core.bpf_built then assert.equal("bpf", ev.backend) end
    if not H.is_root() then assert.matches("^EPERM", ev.skipped.bpf or "EPERM") end
    ev:close()
  end)

  it("works with takana.poll, cqueues and luv", function()
    -- Any fork on the host wakes a fork stream: read until our own.
    local ev = assert(takana.events { "fork" })
    local fx = H.fixture {}
    local seen0 = false
    for _ = 1, 50 do
      local ready = assert(takana.poll({ ev }, 0.1))
      if ready[1] then assert.equal(ev, ready[1]) end
      for e in ev:read() do if e.pid == fx.pid then seen0 = true end end
      if seen0 then break end
    end
    assert.is_true(seen0)
    fx:kill()

    local ok_cq, cqueues = pcall(require, "cqueues")
    if ok_cq then
      local cq, seen = cqueues.new(), false
      cq:wrap(function()
        local fx2 = H.fixture {}
        -- Other processes' forks wake the stream too: read until ours.
        for _ = 1, 50 do
          cqueues.poll(ev, 0.1)
          for e in ev:read() do if e.pid == fx2.pid then seen = true end end
          if seen then break end
        end
        fx2:kill()
      end)
      assert(cq:loop(10))
      assert.is_true(seen)
    end

    local ok_uv, uv = pcall(require, "luv")
    if ok_uv then
      local seen, fx3 = false, nil
      local handle = uv.new_poll(ev:fileno())
      handle:start("r", function()
        for e in ev:read() do if fx3 and e.pid == fx3.pid then seen = true end end
        if seen then handle:stop() end
      end)
      fx3 = H.fixture {}
      local timer = uv.new_timer()
      -- The loop's clock is cached from its last run, maybe in an earlier
      -- spec file: refresh it or the timer is due at once.
      uv.update_time()
      timer:start(5000, 0, function() handle:stop() end)
      while not seen and timer:get_due_in() > 0 do uv.run("once") end
      timer:close()
      handle:close()
      uv.run("nowait")
      fx3:kill()
      assert.is_true(seen)
    end
    ev:close()
  end)

  it("rejects bad arguments with a clear error", function()
    assert.has_error(function() takana.events "fork" end, "bad argument #1 to 'events' (table expected, got string)")
    assert.has_error(function() takana.events { "forks" } end,
      "bad argument #1 to 'events' (unknown event type 'forks' (fork, exec, exit or comm))")
    assert.has_error(function() takana.events { 42 } end,
      "bad argument #1 to 'events' (unknown event type number (fork, exec, exit or comm))")
    assert.has_error(function() takana.events { backend = "dtrace" } end,
      "bad argument #1 to 'events' (unknown backend 'dtrace' (auto, bpf, connector or poll))")
    assert.has_error(function() takana.events { interval = 0 } end,
      "bad argument #1 to 'events' (interval must be between 0.001 and 86400 seconds)")
    assert.has_error(function() takana.events { interval = 0 / 0 } end)
    assert.has_error(function() takana.events { buffer = -1 } end)
    assert.has_error(function() takana.events { buffer = 2 ^ 62 } end)
    assert.has_error(function() takana.events { bogus = 1 } end,
      "bad argument #1 to 'events' (unknown option 'bogus')")
    assert.has_error(function() takana.events { "fork\0exec" } end)
  end)

  -- The fields a run of the fixture tree cannot show, each with why.
  local rare = {
    count = "a lost event needs a ring buffer or socket overrun",
    overrun = "a connector overrun needs a full socket buffer",
    argv_lost = "needs a process gone, or exec'd again, before /proc is read",
    argv_truncated = "needs arguments past 512 bytes",
    core = "true only for a core dump, which a test host may not write",
    who_lost = "needs a process gone, or its ids changed, before /proc is read",
  }
  -- Ids whose every value, 0 (root) included, is one.
  local ids = { uid = true, gid = true, loginuid = true }
  -- A field is filled when it holds more than its zero value.
  local function filled(v, k)
    if type(v) == "number" then return v ~= 0 or ids[k] ~= nil end
    if type(v) == "string" then return v ~= "" end
    if type(v) == "table" then return #v > 0 end
    return v == true
  end

  it("fills each event field on each backend its schema names, and nowhere else", function()
    assert.same({ "bpf", "connector", "poll" }, core.event_backends)
    if H.no_spawn then return pending(H.no_spawn) end
    for field in pairs(core.event_field_backends) do
      local listed = false
      for _, fields in pairs(core.event_fields) do
        for _, f in ipairs(fields) do listed = listed or f == field end
      end
      assert(listed, field .. " is carried by no event type")
    end
    for _, backend in ipairs(core.event_backends) do
      local ev = takana.events { backend = backend, interval = 0.001 }
      if ev then
        local want = {}
        for field, by in pairs(core.event_field_backends) do
          for _, b in ipairs(by) do
            if b == backend and not rare[field] then want[field] = true end
          end
        end
        -- Up to three families: a family's events can be dropped under
        -- load (a lost event), and one is enough.
        local seen, missing = {}, nil
        for _ = 1, 3 do
          start_tree()
          -- poll sees only what lives across its ticks
          local slow = assert(takana.spawn { "sleep", "0.3" })
          -- stime_ns: a process whose exit has system time in ticks (the
          -- tree's and the host's may have none)
          local sys = assert(takana.spawn { "dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=100000",
            stderr = "null" })
          for _ = 1, 40 do
            takana.poll({ ev }, 0.05)
            for e in ev:read() do
              local allowed = {}
              for _, f in ipairs(assert(core.event_fields[e.type], e.type)) do allowed[f] = true end
              for k in pairs(e) do
                assert(allowed[k], backend .. ": " .. e.type .. " event with field " .. k)
                local by = {}
                for _, b in ipairs(core.event_field_backends[k]) do by[b] = true end
                assert(by[backend], backend .. " fills " .. k .. ", which its schema row does not name")
                if filled(e[k], k) then seen[k] = true end
              end
            end
            missing = {}
            for f in pairs(want) do if not seen[f] then missing[#missing + 1] = f end end
            if #missing == 0 then break end
          end
          slow:wait()
          slow:close()
          sys:wait()
          sys:close()
          if #missing == 0 then break end
        end
        ev:close()
        table.sort(missing)
        assert.same({}, missing, backend .. " never gave these fields a value")
      end
    end
  end)

  it("closes once, however many times it is asked, and says so in tostring", function()
    local ev = assert(takana.events { backend = "poll" })
    assert.matches("^takana.Events %(poll, fd %d+%)$", tostring(ev))
    ev:close()
    ev:close()
    assert.equal("takana.Events (closed)", tostring(ev))
    local ok, err = pcall(ev.read, ev)
    assert.is_false(ok)
    assert.matches("attempt to use a closed event stream", err)
    do
      local ev2 <close> = assert(takana.events { backend = "poll" })
      assert.is_number(ev2:fileno())
    end
  end)
end)

-- A child of fork() would share its parent's ring: whichever process drains
-- it first takes every event. A child's new stream loads its own object.
describe("bpf event streams after fork()", function()
  it("a forked child's stream does not drain its parent's #root #bpf", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local ev, why = open("bpf", { "exec" })
    if not ev then return pending(why) end
    package.cpath = "./spec/?.so;" .. package.cpath
    local envtool = require "envtool"
    local pid = envtool.fork()
    if pid == 0 then
      envtool.alarm(60)
      local ok, err = pcall(function()
        local me = tonumber(H.read("/proc/self/stat"):match("^%d+"))
        -- the inherited stream is the parent's: it refuses to read
        local none, msg, code = ev:read()
        assert(none == nil and code == 18 and msg:find("fork", 1, true), msg)
        local mine = assert(takana.events { "exec", backend = "bpf" })
        local c = assert(takana.spawn { "/bin/true" })
        c:wait(10)
        c:close()
        local seen = collect(mine, function(e) return e.ppid == me end, function(g) return #g > 0 end)
        assert(#seen == 1)
        mine:close()
      end)
      if not ok then io.stderr:write("forked child: ", tostring(err), "\n") end
      envtool.exit(ok and 0 or 1)
    end
    assert.equal(0, envtool.waitpid(pid))
    local got = collect(ev, function(e) return e.type == "exec" and e.ppid == pid end,
      function(g) return #g > 0 end)
    ev:close()
    assert.equal(1, #got)
    assert.equal("/bin/true", got[1].filename)
  end)
end)
