-- Months under load in minutes: every API call repeated until a leak would
-- show, snapshots taken while a storm of processes comes and goes, ten
-- thousand live processes, and every public function fed garbage.
-- TAKANA_STRESS_SCALE (default 1) scales the iteration counts: the
-- sanitizer and collector runs use a fraction. Calls that cost a process
-- or a BPF load each run fewer times in CI; TAKANA_SOAK=1 (`make soak`)
-- runs them the full 100,000 times.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local SCALE = tonumber(os.getenv("TAKANA_STRESS_SCALE") or "") or 1
local SOAK = os.getenv("TAKANA_SOAK") == "1"
-- `count` iterations, or `ci_count` outside a soak run when given.
local function n(count, ci_count)
  if ci_count and not SOAK then count = ci_count end
  return math.max(1, math.floor(count * SCALE))
end

-- Descriptors held other than by the /proc fd cache, which holds one per
-- process on purpose and so follows the host's process count.
local function settle()
  collectgarbage()
  collectgarbage()
  return H.count_fds() - takana.proc_cache_info().fds, collectgarbage("count")
end

-- Runs f `count` times and asserts that descriptors and Lua memory are
-- flat afterwards. A warm-up first lets caches (fd cache, BPF load) fill.
-- Resident memory, C heap included: printed by a soak run, not asserted
-- (the allocator keeps freed pages).
local function rss_kib()
  return tonumber(H.read("/proc/self/status"):match("\nVmRSS:%s*(%d+)"))
end

local function flat(label, count, f)
  for _ = 1, math.min(count, 200) do f() end
  local fds0, kb0 = settle()
  local rss0 = rss_kib()
  for _ = 1, count do f() end
  local fds1, kb1 = settle()
  -- A leak grows with the count; a busy host can move the baseline by one
  -- (a process caught between the scan and the count).
  if SOAK then
    io.stderr:write(("\n%-18s x%-6d descriptors %d -> %d, Lua memory %.0f -> %.0f KiB, RSS %d -> %d KiB"):format(
      label, count, fds0, fds1, kb0, kb1, rss0, rss_kib()))
  end
  assert(fds1 <= fds0 + 2, ("%s x%d: descriptors %d -> %d"):format(label, count, fds0, fds1))
  assert(kb1 - kb0 < 256, ("%s x%d: Lua memory %.0f KiB -> %.0f KiB"):format(label, count, kb0, kb1))
end

describe("100,000 iterations leave descriptors and memory flat #slow", function()
  local backends = H.snapshot_backends()
  for _, b in ipairs(backends) do
    -- /proc costs ~300 us a snapshot: 10,000 of them in CI.
    it("snapshot{backend='" .. b .. "'}", function()
      flat("snapshot " .. b, n(100000, b == "proc" and 10000 or nil), function()
        assert(takana.snapshot { backend = b })
      end)
    end)
  end

  it("snap:get, snap:each, snap:children, totable", function()
    local snap = assert(takana.snapshot())
    flat("get/each", n(100000), function()
      assert(snap:get(H.pid))
      local k = 0
      for _ in snap:each() do
        k = k + 1
        if k > 3 then break end
      end
      snap:children(1)
    end)
    flat("totable", n(100000, 1000), function() assert(#snap:totable() == #snap) end)
  end)

  it("pidfd open and close", function()
    flat("pidfd", n(100000), function()
      local p = assert(takana.pidfd(H.pid))
      p:close()
    end)
  end)

  it("spawn and wait", function()
    if H.no_spawn then return pending(H.no_spawn) end
    -- ~0.5 ms a child: 10,000 of them in CI.
    flat("spawn", n(100000, 10000), function()
      local c = assert(takana.spawn { "/bin/true", stdout = "null" })
      assert(c:wait().exited)
      c:close()
    end)
  end)

  it("cgroup stat", function()
    local cg = assert(takana.cgroup.self())
    flat("cgroup stat", n(100000), function() assert(cg:stat()) end)
    cg:close()
    flat("cgroup open", n(100000, 10000), function() assert(takana.cgroup.self()):close() end)
  end)

  it("events open, read, close", function()
    local ev = assert(takana.events { backend = "poll", interval = 1 })
    flat("events read", n(100000), function()
      for _ in ev:read() do end
      ev:lost()
    end)
    ev:close()
    for _, b in ipairs { "connector", "bpf" } do
      -- The first BPF stream has its object alone; the later ones share
      -- one: with two streams held open, each open is an attach, an epoll
      -- set and an eventfd.
      local anchor = takana.events { backend = b }
      local anchor2 = anchor and takana.events { backend = b }
      if anchor then
        flat("events " .. b, n(100000, 10000), function()
          local e = assert(takana.events { backend = b })
          for _ in e:read() do end
          e:close()
        end)
        anchor:close()
        anchor2:close()
      end
    end
  end)
end)

describe("under a storm of short-lived processes #slow", function()
  it("every backend snapshots without error, duplicate or mixed record", function()
    local storm = H.fixture { "--churn", 4 }
    local gen = storm.pid
    local gen_start = assert(takana.snapshot { backend = "proc" }:get(gen)).start_ns
    local backends = H.snapshot_backends()
    local kids = 0
    -- At least 20 rounds, and on until a storm child has been caught (its
    -- children live microseconds); a bounded count, well inside the 4 s storm.
    for round = 1, 2000 do
      if round > 20 and kids > 0 then break end
      for _, b in ipairs(backends) do
        local snap = assert(takana.snapshot { backend = b })
        local last = 0
        for p in snap:each() do
          assert(p.pid > last, "duplicate or unsorted pid " .. p.pid)
          last = p.pid
          if p.ppid == gen then
            -- a child of the storm: all of its fields are its own
            kids = kids + 1
            assert.equal("fixture", p.comm)
            assert.truthy(p.start_ns >= gen_start - 1e7)
            assert.truthy(p.nthreads <= 1)
          end
        end
      end
    end
    local forks = storm.file:read("a"):match("forks (%d+)")
    storm:kill()
    -- The storm's rate (20,000+ forks/s here) is measured in bench/events.lua.
    assert.truthy(tonumber(forks) > 0, "the storm did not run")
    assert.truthy(kids > 0, "no storm child was ever seen")
  end)
end)

describe("10,000 live processes #slow", function()
  it("are all in the snapshot of every backend", function()
    if SCALE < 1 then return pending("scale run only at TAKANA_STRESS_SCALE=1") end
    local herd = H.fixture { "--herd", 10000, "--life", 120 }
    local backends = H.snapshot_backends()
    local counts = {}
    for _, b in ipairs(backends) do
      local snap = assert(takana.snapshot { backend = b })
      local c = 0
      for p in snap:each() do
        if p.ppid == herd.pid then c = c + 1 end
      end
      counts[b] = c
    end
    herd:kill()
    for _, b in ipairs(backends) do assert.equal(10000, counts[b], b) end
  end)
end)

describe("every public function fed garbage", function()
  local snap = assert(takana.snapshot { backend = "proc" })
  local closed_pidfd = assert(takana.pidfd(H.pid))
  closed_pidfd:close()
  local closed_events = assert(takana.events { backend = "poll" })
  closed_events:close()
  local cg = assert(takana.cgroup.self())
  -- mkdir only ever happens inside a takana-test-* cgroup of this spec's.
  local test_path, test_name = H.test_cgroup_path()
  local test_cg = test_name and assert(takana.cgroup(test_name))
  local closed_cg = assert(takana.cgroup.self())
  closed_cg:close()
  local huge, nan = 2 ^ 63, 0 / 0
  local hostile = { "..", "../..", "/etc/passwd", "a\0b", ("x"):rep(5000), "", "\n", "%s%n" }

  -- Each case must raise a message or return nil, a message and an errno:
  -- never crash, never return a half-made object.
  local cases = {
    { "snapshot(1)", function() return takana.snapshot(1) end },
    { "snapshot{backend=nan}", function() return takana.snapshot { backend = nan } end },
    { "snapshot{}, extra arg", function() return takana.snapshot({}, 1) end },
    { "delta(nil, snap)", function() return takana.delta(nil, snap) end },
    { "delta(snap, {})", function() return takana.delta(snap, {}) end },
    { "delta(new, old)", function() return takana.delta(takana.snapshot { backend = "proc" }, snap) end },
    { "snap:get(huge)", function() return snap:get(huge) end },
    { "snap:get(nan)", function() return snap:get(nan) end },
    { "snap:children(nil)", function() return snap:children() end },
    { "snap.get on a table", function() return snap.get({}, 1) end },
    { "pidfd()", function() return takana.pidfd() end },
    { "pidfd('one')", function() return takana.pidfd("one") end },
    { "pidfd(-1)", function() return takana.pidfd(-1) end },
    { "pidfd(0)", function() return takana.pidfd(0) end },
    { "pidfd(huge)", function() return takana.pidfd(huge) end },
    { "pidfd(nan)", function() return takana.pidfd(nan) end },
    { "pidfd(4194304)", function() return takana.pidfd(4194304) end },
    { "closed pidfd:signal", function() return closed_pidfd:signal("TERM") end },
    { "closed pidfd:wait", function() return closed_pidfd:wait(0) end },
    { "closed pidfd:alive", function() return closed_pidfd:alive() end },
    { "pidfd:signal('NOPE')", function() return takana.pidfd(H.pid):signal("NOPE") end },
    { "pidfd:signal(99999)", function() return takana.pidfd(H.pid):signal(99999) end },
    { "pidfd:wait(-1)", function() return takana.pidfd(H.pid):wait(-1) end },
    { "pidfd:wait(nan)", function() return takana.pidfd(H.pid):wait(nan) end },
    { "spawn()", function() return takana.spawn() end },
    { "spawn{}", function() return takana.spawn {} end },
    { "spawn{''}", function() return takana.spawn { "" } end },
    { "spawn{'a\\0b'}", function() return takana.spawn { "a\0b" } end },
    { "spawn{true}", function() return takana.spawn { true } end },
    { "spawn{stdout=99999}", function() return takana.spawn { "/bin/true", stdout = 99999 } end },
    { "spawn{cwd=..}", function() return takana.spawn { "/bin/true", cwd = "/nonexistent/.." } end },
    { "spawn{env='x'}", function() return takana.spawn { "/bin/true", env = "x" } end },
    { "spawn{cgroup=../x}", function() return takana.spawn { "/bin/true", cgroup = "../x" } end },
    { "poll(nil)", function() return takana.poll() end },
    { "poll({1})", function() return takana.poll({ 1 }, 0) end },
    { "poll({}, -1)", function() return takana.poll({}, -1) end },
    { "poll({}, nan)", function() return takana.poll({}, nan) end },
    { "poll({closed})", function() return takana.poll({ closed_pidfd }, 0) end },
    { "cgroup(nil)", function() return takana.cgroup() end },
    { "cgroup.of('x')", function() return takana.cgroup.of("x") end },
    { "cgroup.of(-1)", function() return takana.cgroup.of(-1) end },
    { "cg:get(1)", function() return cg:get(1) end },
    { "cg:set('memory.max', -1)", function() return cg:set("memory.max", -1) end },
    { "cg:set('memory.max', nan)", function() return cg:set("memory.max", nan) end },
    { "cg:set('nosuch.file', 1)", function() return cg:set("nosuch.file", 1) end },
    { "cg:why('nope')", function() return cg:why("nope") end },
    { "cg:attach('x')", function() return cg:attach("x") end },
    { "closed cg:stat", function() return closed_cg:stat() end },
    { "events('fork')", function() return takana.events("fork") end },
    { "events{nan}", function() return takana.events { nan } end },
    { "events{buffer=huge}", function() return takana.events { buffer = huge } end },
    { "closed events:read", function() return closed_events:read() end },
    { "closed events:lost", function() return closed_events:lost() end },
    { "stat_parse(nil)", function() return core.stat_parse() end },
  }
  for _, s in ipairs(hostile) do
    if s ~= "" then  -- "" is the root cgroup, by design
      cases[#cases + 1] = { ("cgroup(%q)"):format(s:sub(1, 20)), function() return takana.cgroup(s) end }
    end
    cases[#cases + 1] = { ("cg:get(%q)"):format(s:sub(1, 20)), function() return cg:get(s) end }
    -- "%s%n" is a legal cgroup name: it is created, in the test cgroup.
    if test_cg and s ~= "%s%n" then
      cases[#cases + 1] = { ("cg:mkdir(%q)"):format(s:sub(1, 20)), function() return test_cg:mkdir(s) end }
    end
    cases[#cases + 1] = { ("cg:set(%q)"):format(s:sub(1, 20)), function() return cg:set(s, 1) end }
    cases[#cases + 1] = { ("pidfd:signal(%q)"):format(s:sub(1, 20)), function()
      return takana.pidfd(H.pid):signal(s)
    end }
    cases[#cases + 1] = { ("stat_parse(%q)"):format(s:sub(1, 20)), function() return core.stat_parse(s) end }
    cases[#cases + 1] = { ("snapshot{backend=%q}"):format(s:sub(1, 20)), function()
      return takana.snapshot { backend = s }
    end }
  end

  teardown(function()
    if test_cg then test_cg:close() end
    if test_path then H.cgroup_cleanup(test_path) end
  end)

  for _, case in ipairs(cases) do
    it("rejects " .. case[1], function()
      local ok, a, b, c = pcall(case[2])
      if ok then
        assert(a == nil, case[1] .. " returned " .. tostring(a))
        assert.is_string(b)
        assert.is_true(math.type(c) == "integer" and c > 0, case[1] .. ": errno " .. tostring(c))
      else
        assert.is_string(a)
        assert.truthy(#a > 10, case[1] .. ": message " .. a)
      end
    end)
  end
end)

describe("faults", function()
  local env = "LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' "

  -- Runs a Lua script in a clean child (spawn closes every descriptor not
  -- passed) under a shell prefix such as a ulimit; returns its output.
  local function child(prefix, script)
    local c = assert(takana.spawn { "sh", "-c", prefix .. "; " .. env .. H.lua .. " -e " .. H.shell_quote(script),
                                    stdout = "pipe", stderr = "pipe" })
    local out, err = c.stdout:read("a"), c.stderr:read("a")
    local status = c:wait(60)
    c:close()
    return status, out, err
  end

  it("a tiny RLIMIT_NOFILE: the fd cache backs off and snapshots still work", function()
    if H.no_spawn then return pending(H.no_spawn) end
    -- 24 descriptors, 18 of them taken before the first snapshot: the
    -- cache (a quarter of the limit) runs into EMFILE and must back off.
    local status, out, err = child("ulimit -n 24", "local t = require 'takana' local hold = {} " ..
      "for i = 1, 18 do hold[i] = assert(io.open('/dev/null')) end " ..
      "local me = tonumber(io.open('/proc/self/stat'):read('l'):match('^%d+')) local n, s " ..
      "for i = 1, 20 do s = assert(t.snapshot { backend = 'proc' }) n = #s assert(s:get(me)) end " ..
      "local c = t.proc_cache_info() print('ok', n, c.fds, c.limit)")
    assert.same({ exited = true, code = 0 }, status, err)
    local count, fds, limit = out:match("^ok%s+(%d+)%s+(%d+)%s+(%d+)")
    assert(count, out .. err)
    assert.truthy(tonumber(count) > 10, out)
    assert.truthy(tonumber(fds) <= tonumber(limit) and tonumber(limit) < 6, out)
  end)

  it("snapshots and poll event streams share one descriptor budget", function()
    if H.no_spawn then return pending(H.no_spawn) end
    -- 128 descriptors: a budget of 32, fewer than the host's processes.
    -- Two poll streams and the snapshots together stay within it.
    local status, out, err = child("ulimit -n 128", "local t = require 'takana' " ..
      "local a = assert(t.events { backend = 'poll' }) local b = assert(t.events { backend = 'poll' }) " ..
      "for i = 1, 3 do assert(t.snapshot { backend = 'proc' }) end " ..
      "local c = t.proc_cache_info() print('ok', #t.snapshot { backend = 'proc' }, c.fds, c.process_fds, c.limit) " ..
      "a:close() b:close() t.proc_cache_close() print('closed', t.proc_cache_info().process_fds)")
    assert.same({ exited = true, code = 0 }, status, err)
    local count, fds, total, limit = out:match("^ok%s+(%d+)%s+(%d+)%s+(%d+)%s+(%d+)")
    assert(count, out .. err)
    count, fds, total, limit = tonumber(count), tonumber(fds), tonumber(total), tonumber(limit)
    assert.equal(32, limit)
    assert.truthy(count > limit, out)
    assert.truthy(total <= limit and total > fds, out)
    assert.matches("\nclosed%s+0\n", out)
  end)

  it("/proc with hidepid=2: other users' processes are invisible, and probe says so #root", function()
    if not H.is_root() then return pending("needs root: a private mount namespace") end
    if os.execute("command -v unshare >/dev/null && command -v setpriv >/dev/null") ~= true then
      return pending("needs unshare and setpriv")
    end
    local script = "local t = require 'takana' local s = assert(t.snapshot()) local others = 0 " ..
      "for p in s:each() do if p.uid ~= 65534 then others = others + 1 end end " ..
      "print(s.backend, #s, others, t.probe().proc.note)"
    local code, out = H.run("unshare --mount --propagation private sh -c " .. H.shell_quote(
      "mount -t proc -o hidepid=2 proc /proc && exec setpriv --reuid 65534 --regid 65534 " ..
      "--clear-groups --inh-caps=-all env " .. env .. H.lua .. " -e " .. H.shell_quote(script)))
    assert.equal(0, code, out)
    local backend, total, others, note = out:match("^(%S+)\t(%d+)\t(%d+)\t([^\n]*)")
    assert(backend, out)
    assert.equal("proc", backend)
    assert.truthy(tonumber(total) >= 1)
    assert.equal("0", others)
    assert.matches("hidepid=invisible: processes of other users are invisible", note)
  end)

  it("a BPF load that fails midway falls back and leaks no descriptor or map #root #bpf", function()
    if not H.bpf_tier("kfunc") then return pending(select(2, H.bpf_tier("kfunc"))) end
    if H.no_spawn then return pending(H.no_spawn) end
    if os.getenv("TAKANA_ASAN_PRELOAD") then
      return pending("ASan's shadow memory does not fit in a 400 MB address space")
    end
    -- In a child with 400 MB of address space, an array of 4M records
    -- (740 MB) loads into the kernel but cannot be mapped: the load fails
    -- after the object was opened, verified and its maps created. Every
    -- BPF map, program and link is a descriptor: none may be left.
    local status, out, err = child("ulimit -v 400000", "local t = require 'takana' " ..
      "local core = require 'takana.core' local me = io.open('/proc/self/stat'):read('l'):match('^%d+') " ..
      "local function fds() local r = {} for l in io.popen('ls -l /proc/' .. me .. '/fd'):lines() do " ..
      "local n, tg = l:match(' (%d+) %-> (.*)$') if n and not tg:match('^pipe:') then r[#r + 1] = tg end end " ..
      "table.sort(r) return table.concat(r, ' ') end " ..
      "t.snapshot { backend = 'proc' } t.proc_cache_close() collectgarbage() local before = fds() " ..
      "assert(core.bpf_kfunc_capacity(4000000)) " ..
      "local s, why = t.snapshot { backend = 'kfunc' } " ..
      "local auto = assert(t.snapshot()) " ..
      "core.bpf_release() t.proc_cache_close() collectgarbage() " ..
      "print(tostring(s)) print(why) print(auto.backend) print(before) print(fds())")
    assert.same({ exited = true, code = 0 }, status, err)
    local s, why, backend, before, after = out:match("^([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)")
    assert(s, out .. err)
    assert.equal("nil", s)
    assert.matches("^snapshot: kfunc backend unavailable: BPF load failed .*mmap of the record array", why)
    -- The failure was a shortage (ENOMEM), so auto tried kfunc again, at
    -- the usual size, and it loaded.
    assert.equal("kfunc", backend)
    assert.equal(before, after)
  end)
end)
