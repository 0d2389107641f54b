-- Cold start and fixed costs, as behaviour (issue 16; timings are in
-- bench/coldstart.lua): the first BPF event stream (of a ring size) has a
-- loaded object to itself and polls its ring directly (issue 26); the later
-- ones share a second object, loaded once, each keeping its own queue and
-- its own loss count; the last close releases the programs; probe()
-- remembers what it learned until asked to probe afresh.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

-- The ids of every BPF program this process holds a descriptor to (a
-- program's own fd, or a link's, which names its program).
local function prog_ids()
  local ids = {}
  local dir = io.popen("ls /proc/" .. H.pid .. "/fd 2>/dev/null")
  local fds = dir:read("a")
  dir:close()
  for fd in fds:gmatch("%d+") do
    local f = io.open("/proc/" .. H.pid .. "/fdinfo/" .. fd)
    if f then
      local info = f:read("a") or ""
      f:close()
      local id = info:match("\nprog_id:%s*(%d+)")
      if id then ids[tonumber(id)] = true end
    end
  end
  return ids
end

local function new_ids(now, before)
  local list = {}
  for id in pairs(now) do
    if not before[id] then list[#list + 1] = id end
  end
  table.sort(list)
  return list
end

-- A bpf stream, or nil with the reason (a spec pends on hosts without).
local function bpf_stream(types)
  types.backend = "bpf"
  local ev, why = takana.events(types)
  if not ev and H.is_root() and core.bpf_built then error(why) end
  return ev, why
end

-- Starts /bin/true and reaps it: its exit is an event every stream that
-- wants exits must see.
local function run_true()
  local child = assert(takana.spawn { "/bin/true" })
  local pid = child.pid
  assert(child:wait())
  child:close()
  return pid
end

-- Reads ev until pid's exit is there (or the bounded polls run out).
local function exit_of(ev, pid)
  local found
  H.poll_until({ ev }, function()
    for e in ev:read() do
      if e.type == "exit" and e.pid == pid then found = e end
    end
    return found ~= nil
  end)
  return found
end

local function settle()
  collectgarbage()
  collectgarbage()
end

describe("bpf event streams share one loaded object", function()
  it("a third stream loads no program (the second loads the shared set once), and all see the same exit #root #bpf", function()
    settle()
    local base = prog_ids()
    local solo, why = bpf_stream { "exit" }
    if not solo then pending("no bpf events here: " .. why) return end
    local a = assert(bpf_stream { "exit" })
    local loaded = new_ids(prog_ids(), base)
    assert.is_true(#loaded >= 2)
    local b = assert(bpf_stream { "fork", "exit" })
    assert.same(loaded, new_ids(prog_ids(), base))
    local pid = run_true()
    local es, ea, eb = exit_of(solo, pid), exit_of(a, pid), exit_of(b, pid)
    assert.is_table(es)
    assert.is_table(ea)
    assert.is_table(eb)
    assert.equal(ea.start_ns, eb.start_ns)
    assert.equal(es.start_ns, ea.start_ns)
    assert.equal(ea.code, eb.code)
    assert.equal(0, a:lost())
    assert.equal(0, b:lost())
    b:close()
    a:close()
    solo:close()
  end)

  it("closing one stream keeps the other working; the last close releases every program #root #bpf", function()
    settle()
    local base = prog_ids()
    local a, why = bpf_stream { "exit" }
    if not a then pending("no bpf events here: " .. why) return end
    local b = assert(bpf_stream { "exit", "exec" })
    b:close()
    local pid = run_true()
    assert.is_table(exit_of(a, pid))
    a:close()
    assert.same({}, new_ids(prog_ids(), base))
    -- And a stream opened afterwards loads again and works.
    local c = assert(bpf_stream { "exit" })
    pid = run_true()
    assert.is_table(exit_of(c, pid))
    c:close()
    assert.same({}, new_ids(prog_ids(), base))
  end)

  it("a stream keeps only its own types, and each stream has its own descriptor #root #bpf", function()
    local a, why = bpf_stream { "exit" }
    if not a then pending("no bpf events here: " .. why) return end
    local b = assert(bpf_stream { "fork" })
    assert.are_not.equal(a:fileno(), b:fileno())
    local pid = run_true()
    assert.is_table(exit_of(a, pid))
    local forks, exits = 0, 0
    H.poll_until({ b }, function()
      for e in b:read() do
        if e.pid == pid and e.type == "fork" then forks = forks + 1 end
        if e.type == "exit" then exits = exits + 1 end
      end
      return forks > 0
    end)
    assert.equal(1, forks)
    assert.equal(0, exits)
    a:close()
    b:close()
  end)

  it("wakes a stream whose events another stream's read took from the ring #root #bpf", function()
    local solo, why = bpf_stream { "exit" } -- the first has its ring alone
    if not solo then pending("no bpf events here: " .. why) return end
    local a = assert(bpf_stream { "exit" })
    local b = assert(bpf_stream { "exit" })
    local pid = run_true()
    assert.is_table(exit_of(a, pid))
    -- a's read drained the ring; b's descriptor must still say ready.
    local ready = takana.poll({ b }, 5)
    assert.equal(b, ready and ready[1])
    assert.is_table(exit_of(b, pid))
    a:close()
    b:close()
    solo:close()
  end)

  it("counts a stream's own losses when its queue is full and another stream reads #root #bpf", function()
    local solo, why = bpf_stream { "exit" } -- the first has its ring alone
    if not solo then pending("no bpf events here: " .. why) return end
    local small = assert(takana.events { "exit", backend = "bpf", queue = 1 })
    local big = assert(bpf_stream { "exit" })
    local pids = {}
    for i = 1, 4 do pids[i] = run_true() end
    local seen = {}
    H.poll_until({ big }, function()
      for e in big:read() do
        if e.type == "exit" then seen[e.pid] = true end
      end
      for _, pid in ipairs(pids) do
        if not seen[pid] then return false end
      end
      return true
    end)
    for _, pid in ipairs(pids) do assert.is_true(seen[pid], "exit of " .. pid) end
    assert.equal(0, big:lost())
    -- small holds one event; the rest were taken by big's reads and are
    -- small's losses, said so rather than dropped in silence.
    local mine, lost_events = 0, 0
    for e in small:read() do
      if e.type == "lost" then lost_events = lost_events + 1 end
      for _, pid in ipairs(pids) do
        if e.type == "exit" and e.pid == pid then mine = mine + 1 end
      end
    end
    assert.is_true(mine <= 1)
    assert.is_true(lost_events >= 1)
    assert.is_true(small:stats().lost >= #pids - mine)
    small:close()
    big:close()
    solo:close()
  end)
end)

describe("takana.probe() cache", function()
  local function counting(f)
    local real, calls = core.snapshot_take, 0
    core.snapshot_take = function(...) calls = calls + 1 return real(...) end
    local ok, r = pcall(f)
    core.snapshot_take = real
    assert(ok, r)
    return r, calls
  end

  it("probes once, then answers from what it learned, in the same shape", function()
    local first = takana.probe { fresh = true }
    local again, calls = counting(takana.probe)
    assert.equal(0, calls)
    assert.same(first, again)
    assert.are_not.equal(first, again)
    -- A caller's change to its copy is not the next caller's answer.
    again.snapshot.backend = "changed"
    again.kernel = nil
    assert.same(first, takana.probe())
  end)

  it("probes again with fresh = true", function()
    takana.probe()
    local r, calls = counting(function() return takana.probe { fresh = true } end)
    assert.is_true(calls >= 1)
    assert.is_table(r.snapshot)
    assert.is_boolean(r.snapshot.proc.ok)
    assert.same(r, takana.probe())
  end)

  it("raises on a wrong option", function()
    assert.has_error(function() takana.probe(1) end,
      "bad argument #1 to 'probe' (table expected, got number)")
    assert.has_error(function() takana.probe { fresh = 1 } end,
      "bad argument #1 to 'probe' (option 'fresh': boolean expected, got number)")
    assert.has_error(function() takana.probe { fresh = "yes\0.." } end,
      "bad argument #1 to 'probe' (option 'fresh': boolean expected, got string)")
    assert.has_error(function() takana.probe { refresh = true } end,
      "bad argument #1 to 'probe' (unknown option 'refresh')")
  end)
end)

describe("what takana ps loads", function()
  it("does not compile the cgroup module until a cgroup is used", function()
    local code = ("package.path = %q; package.cpath = %q; local t = require 'takana'; " ..
      "io.write(tostring(package.loaded['takana.cgroup'] ~= nil)); t.snapshot { backend = 'proc' }; " ..
      "io.write(' ', tostring(package.loaded['takana.cgroup'] ~= nil)); local c = t.cgroup; " ..
      "io.write(' ', tostring(package.loaded['takana.cgroup'] == c))"):format(package.path, package.cpath)
    local status, out = H.run(H.lua .. " -e " .. H.shell_quote(code))
    assert.equal(0, status, out)
    assert.equal("false false true", out)
  end)
end)

describe("snapshots in a loop", function()
  -- The records live outside Lua's heap; the collector is told of them.
  -- A plain loop that drops each snapshot (in a fresh interpreter, as a
  -- script runs) must see them finalized as it goes, not all at the end.
  for _, backend in ipairs { "proc", "kfunc", "iter" } do
    it("are finalized as the loop goes (" .. backend .. ")" .. (backend ~= "proc" and " #root #bpf" or ""), function()
      if backend ~= "proc" and not H.bpf_tier(backend) then
        return pending(backend .. " tier unavailable here")
      end
      -- Seen from plain Lua: a weak-valued table loses a snapshot once the
      -- collector has found it dead (before its finalizer runs).
      local code = ("package.path = %q; package.cpath = %q; local t = require 'takana'; " ..
        "local seen, s = setmetatable({}, { __mode = 'v' }); " ..
        "for i = 1, 60 do s = assert(t.snapshot { backend = %q }) seen[i] = s end; " ..
        "local left = 0; for _ in pairs(seen) do left = left + 1 end; io.write(60 - left)")
        :format(package.path, package.cpath, backend)
      local status, out = H.run(H.lua .. " -e " .. H.shell_quote(code))
      assert.equal(0, status, out)
      assert.is_true(tonumber(out) >= 40, out .. " of 60 finalized")
    end)
  end
end)
