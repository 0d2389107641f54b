-- The BPF snapshot tiers against the /proc backend, on the real kernel. As
-- root with a BPF build they must work; elsewhere (uid 65534, make BPF=0)
-- the specs that need them are pending with the reason the tier gave.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local TICK_NS = 10000000 -- one USER_HZ tick: /proc's time resolution

-- Where the kernel offers the tier, a failure is a failure, not a skipped spec.
local tier = H.bpf_tier

-- Kernel workers' /proc names end in "+desc" or "-desc" for the work item
-- they run; it changes from one moment to the next.
local function stable_comm(p)
  if p.kthread then
    local base = p.comm:match("^(kworker/u?%d+:%d+H?)[-+]") or p.comm:match("^(kworker/R%-.-)[-+]")
    if base then return base end
  end
  return p.comm
end

local function state_class(s)
  if s == "Z" then return "zombie" end
  if s == "T" or s == "t" then return "stopped" end
  return "live"
end

-- Fields compared apart below (identity, names, states, and what moves
-- between two reads), or elsewhere (cgroup_id: 88-fields, proc leaves it
-- out by default; cmdline: 88-cmdline, in no default selection). Every other field, a new one too, must equal /proc's.
local COMPARED_APART = { pid = true, start_ns = true, comm = true, state = true, nthreads = true,
                         utime_ns = true, stime_ns = true, rss_bytes = true, vsize_bytes = true,
                         minflt = true, majflt = true, cgroup_id = true, cmdline = true }
local EXACT = {}
for _, k in ipairs(core.record_fields) do
  if not COMPARED_APART[k] then EXACT[#EXACT + 1] = k end
end

-- Same process in two snapshots: same pid, same start (BPF has ns, /proc ticks).
local function same(a, b)
  return a and b and math.abs(a.start_ns - b.start_ns) < TICK_NS
end

-- The tiers that load (every backend but /proc), each against /proc.
local TIERS = {}
for _, name in ipairs(core.snapshot_backends) do
  if core.bpf_info(name) then TIERS[#TIERS + 1] = name end
end

for _, name in ipairs(TIERS) do
  describe("takana.snapshot{backend='" .. name .. "'}", function()
    it("gives the same processes, with the same fields, as /proc #root #bpf", function()
      local fx = H.fixture { "--name", "x) (y", "--threads", 2, "--exited-threads", 2,
                             "--burn-ms", 150, "--touch-mb", 64, "--nice", 5 }
      local zfx = H.fixture { "--zombie" }
      H.sleep(0.05)
      local p1 = takana.snapshot { backend = "proc" }
      local b, why = tier(name)
      local p2 = takana.snapshot { backend = "proc" }
      fx:kill()
      zfx:kill()
      if not b then return pending(why) end
      assert.equal(name, b.backend)

      -- Every process alive across the three snapshots is in b, and b has
      -- nothing that was in neither /proc snapshot.
      local checked = 0
      for q in p1:each() do
        local r = p2:get(q.pid)
        if same(q, r) then
          local p = b:get(q.pid)
          assert(p, ("pid %d (%s) missing from the %s snapshot"):format(q.pid, q.comm, name))
          assert.truthy(same(p, q), "start_ns of pid " .. q.pid)
          for _, k in ipairs(EXACT) do
            assert(p[k] == q[k] or p[k] == r[k],
              ("pid %d (%s) %s: %s says %s, /proc %s then %s"):format(q.pid, q.comm, k, name,
                tostring(p[k]), tostring(q[k]), tostring(r[k])))
          end
          assert(stable_comm(p) == stable_comm(q) or stable_comm(p) == stable_comm(r),
            ("pid %d comm: %s says %q, /proc %q"):format(q.pid, name, p.comm, q.comm))
          assert(state_class(p.state) == state_class(q.state) or state_class(p.state) == state_class(r.state),
            ("pid %d state %s vs %s"):format(q.pid, p.state, q.state))
          checked = checked + 1
        end
      end
      -- Only in b: then it was born after p1 (and gone before p2).
      for p in b:each() do
        assert(p1:get(p.pid) or p2:get(p.pid) or p.start_ns >= p1.time_ns - TICK_NS,
          ("pid %d (%s) only in %s"):format(p.pid, p.comm, name))
      end
      assert.truthy(checked > 10)

      -- The fixture: exact identity, whole-process CPU times (two live and
      -- two exited threads, 150 ms each, plus the main thread's 150 ms).
      local p, q = assert(b:get(fx.pid)), assert(p1:get(fx.pid))
      assert.equal("x) (y", p.comm)
      assert.equal(H.pid, p.ppid)
      assert.equal(3, p.nthreads)
      assert.equal(5, p.nice)
      assert.equal("S", p.state)
      assert.is_false(p.kthread)
      local cpu = p.utime_ns + p.stime_ns
      assert.truthy(cpu >= 5 * 150e6 * 0.9, "cpu " .. cpu)
      -- Both split the same runtime with the kernel's cputime_adjust; /proc
      -- rounds to ticks.
      assert.near(q.utime_ns, p.utime_ns, 2 * TICK_NS)
      assert.near(q.stime_ns, p.stime_ns, 2 * TICK_NS)
      assert.equal(q.minflt, p.minflt)
      assert.equal(q.majflt, p.majflt)
      -- 64 MiB touched; BPF reads the per-CPU rss counters unsummed.
      assert.truthy(p.rss_bytes >= 64 << 20, "rss " .. p.rss_bytes)
      assert.near(q.rss_bytes, p.rss_bytes, 4 << 20)
      assert.equal(q.vsize_bytes, p.vsize_bytes)

      local z = assert(b:get(zfx.extra[1]))
      assert.equal("Z", z.state)
      assert.equal(zfx.pid, z.ppid)
      assert.equal(0, z.rss_bytes)
    end)

    it("includes init, even where the kernel hides it from BPF walks #root #bpf", function()
      local b, why = tier(name)
      if not b then return pending(why) end
      local init = assert(b:get(1))
      assert.equal(0, init.ppid)
      assert.truthy(b.from_proc == 0 or b.from_proc == 1)
    end)

    it("is independent of later snapshots and safe to keep #root #bpf", function()
      local b, why = tier(name)
      if not b then return pending(why) end
      local n, first = #b, b:get(H.pid).utime_ns
      for _ = 1, 20 do assert(tier(name)) end
      collectgarbage()
      assert.equal(n, #b)
      assert.equal(first, b:get(H.pid).utime_ns)
    end)
  end)
end

describe("the kfunc tier's record array", function()
  it("grows and reruns when there are more processes than room #root #bpf", function()
    if not tier("kfunc") then return pending(select(2, tier("kfunc"))) end
    local herd = H.fixture { "--herd", 300 }
    assert(core.bpf_kfunc_capacity(16))
    local b = assert(takana.snapshot { backend = "kfunc" })
    local p = assert(takana.snapshot { backend = "proc" })
    herd:kill()
    local kids = 0
    for r in p:each() do
      if r.ppid == herd.pid then
        kids = kids + 1
        assert(b:get(r.pid), "herd child " .. r.pid .. " missing")
      end
    end
    assert.equal(300, kids)
    local info = core.bpf_info("kfunc")
    assert.truthy(info.capacity >= #b, "capacity " .. info.capacity .. " < " .. #b)
    assert.truthy(info.capacity > 16)
  end)
end)

describe("BPF tiers and their owners", function()
  local function takana_progs()
    local progs = {}
    local code, out = H.run("bpftool prog show")
    assert.equal(0, code, out)
    for line in out:gmatch("[^\n]+") do
      local id, pname = line:match("^(%d+): %S+%s+name (%S+)")
      if pname == "snapshot_kfunc" or pname == "snapshot_iter" then progs[tonumber(id)] = pname end
    end
    return progs, out
  end

  it("are released when the owner goes, and nothing is pinned #root #bpf", function()
    if not tier("iter") then return pending(select(2, tier("iter"))) end
    if H.no_spawn then return pending(H.no_spawn) end
    local both = tier("kfunc") ~= nil
    local before = takana_progs()
    local argv = { table.unpack(H.lua_argv) }
    for _, a in ipairs { "-e", "package.path='./lua/?.lua;./lua/?/init.lua;'..package.path " ..
      "package.cpath='./?.so;'..package.cpath local t=require'takana' " ..
      "if " .. tostring(both) .. " then assert(t.snapshot{backend='kfunc'}) end assert(t.snapshot{backend='iter'}) " ..
      "io.write('loaded\\n') io.flush() io.read('l')" } do argv[#argv + 1] = a end
    argv.stdin, argv.stdout = "pipe", "pipe"
    local child = assert(takana.spawn(argv))
    assert.equal("loaded", child.stdout:read("l"))
    local during = takana_progs()
    local mine = 0
    for id in pairs(during) do if not before[id] then mine = mine + 1 end end
    assert.equal(both and 2 or 1, mine)
    child.stdin:close()
    assert.same({ exited = true, code = 0 }, child:wait(10))
    local after = takana_progs()
    for id in pairs(after) do assert.truthy(before[id], "program " .. id .. " outlived its owner") end
    local pinned = select(2, H.run("ls -R /sys/fs/bpf 2>/dev/null"))
    assert.falsy(pinned:find("takana") or pinned:find("snapshot_"))
  end)

  -- A child of fork() would share the parent's record array and selection
  -- global: runs in both at once would write each other's records.
  it("are loaded afresh by a forked child, the parent's left as they are #root #bpf", function()
    local names = {}
    for _, name in ipairs(H.snapshot_backends()) do
      if name ~= "proc" then names[#names + 1] = name end
    end
    if #names == 0 then return pending("no BPF tier here: " .. select(2, tier("iter"))) end
    package.cpath = "./spec/?.so;" .. package.cpath
    local envtool = require "envtool"
    -- The BPF programs a process holds, by kernel id (fdinfo's prog_id).
    local function prog_ids(pid)
      local ids = {}
      for fd in require("lfs").dir("/proc/" .. pid .. "/fdinfo") do
        local info = fd:match("^%d+$") and H.read("/proc/" .. pid .. "/fdinfo/" .. fd)
        local id = info and info:match("\nprog_id:%s*(%d+)")
        if id then ids[tonumber(id)] = true end
      end
      return ids
    end
    -- every tier loaded with the selection the child asks for, and the
    -- argv program, before the programs held are listed
    for _, name in ipairs(names) do
      assert(takana.snapshot { backend = name, fields = { "pid", "ppid", "cmdline" } })
    end
    local held = prog_ids(H.pid)
    local held_parent = held
    local pid = envtool.fork()
    if pid == 0 then
      envtool.alarm(60)      -- a child stuck on a lock dies, not the suite
      -- the child: exit 0 when each tier serves it, from programs of its
      -- own: one the parent does not hold comes with the first snapshot
      local ok, why = pcall(function()
        local me = tonumber(H.read("/proc/self/stat"):match("^%d+"))
        for _, name in ipairs(names) do
          local snap = assert(takana.snapshot { backend = name, fields = { "pid", "ppid", "cmdline" } })
          assert(snap:get(me).ppid == H.pid)
          assert(#snap:get(me).cmdline > 0)
          local own = 0
          for id in pairs(prog_ids(me)) do
            if not held[id] then own = own + 1 end
          end
          assert(own > 0, name .. ": served by the parent's programs")
          held = prog_ids(me)
        end
      end)
      if not ok then io.stderr:write("forked child: ", tostring(why), "\n") end
      envtool.exit(ok and 0 or 1)
    end
    assert.equal(0, envtool.waitpid(pid))
    for _, name in ipairs(names) do
      assert(takana.snapshot { backend = name, fields = { "pid", "ppid", "cmdline" } })
    end
    -- the parent's programs are the ones it had: none loaded again
    for id in pairs(prog_ids(H.pid)) do
      assert.is_true(held_parent[id], "the parent loaded BPF program " .. id .. " again")
    end
  end)

  it("are unloaded by bpf_release and load again on the next snapshot #root #bpf", function()
    local name = H.snapshot_backends()[1]
    if name == "proc" then return pending("no BPF tier here: " .. select(2, tier("iter"))) end
    assert(takana.snapshot { backend = name })
    core.bpf_release()
    assert.is_false(core.bpf_info(name).loaded)
    assert(takana.snapshot { backend = name })
    assert.is_true(core.bpf_info(name).loaded)
  end)
end)

describe("BPF tiers from two threads at once", function()
  it("give each caller its own complete snapshot #root #bpf", function()
    local best = H.snapshot_backends()[1]
    if best == "proc" then return pending("no BPF tier here: " .. select(2, tier("iter"))) end
    local plan = { best, best, "iter" }
    local ok_luv, uv = pcall(require, "luv")
    if not ok_luv then return pending("lua-luv is not installed") end
    local dir = select(2, H.run("mktemp -d")):match("%S+")
    finally(function() os.execute("rm -rf " .. H.shell_quote(dir)) end)
    -- Complete: every snapshot holds init, this process and each of a
    -- herd that lives through the spec (whatever else the host runs).
    local herd = H.fixture { "--herd", 20 }
    -- (busted keeps the last finally a test gives: this one does it all)
    finally(function() herd:kill() os.execute("rm -rf " .. H.shell_quote(dir)) end)
    local must = { 1, H.pid, herd.pid, table.unpack(herd.extra) }
    local function worker(out_path, backend, pids)
      package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
      package.cpath = "./?.so;" .. package.cpath
      local t = require "takana"
      local f = io.open(out_path, "w")
      for _ = 1, 200 do
        local s = t.snapshot { backend = backend }
        local prev, dup, missing = 0, false, "none"
        for p in s:each() do
          if p.pid <= prev then dup = true end
          prev = p.pid
        end
        for pid in pids:gmatch("%d+") do
          if not s:get(tonumber(pid)) then missing = pid end
        end
        f:write(("%s %d %s %s\n"):format(s.backend, #s, missing, tostring(dup)))
      end
      f:close()
    end
    local threads = {}
    for i, backend in ipairs(plan) do
      threads[i] = uv.new_thread(worker, dir .. "/" .. i, backend, table.concat(must, " "))
    end
    for _, th in ipairs(threads) do th:join() end
    for i, backend in ipairs(plan) do
      local lines = 0
      for line in io.lines(dir .. "/" .. i) do
        local b, n, missing, dup = line:match("^(%S+) (%d+) (%S+) (%S+)$")
        assert.equal(backend, b)
        assert.truthy(tonumber(n) >= #must)
        assert.equal("none", missing)
        assert.equal("false", dup)
        lines = lines + 1
      end
      assert.equal(200, lines)
    end
  end)
end)

describe("takana.snapshot{backend=...} when a tier cannot run", function()
  it("returns nil, the reason and an errno, and auto falls back to /proc", function()
    if H.bpf_tier("iter") then
      -- In a new pid namespace BPF would see the wrong pids: refused
      -- (kfunc, where this kernel has it; else it is too old for it).
      local code, out = H.run("unshare --pid --fork --mount-proc " .. H.lua .. " -e \"" ..
        "package.path='./lua/?.lua;./lua/?/init.lua;'..package.path " ..
        "package.cpath='./?.so;'..package.cpath local t=require'takana' " ..
        "print(t.snapshot{backend='kfunc'}) print(t.snapshot{backend='iter'}) " ..
        "local s=t.snapshot() print(s.backend, #s, s:get(1) and s:get(1).comm)\"")
      assert.equal(0, code, out)
      local lines = {}
      for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
      if H.bpf_tier("kfunc") then
        assert.equal("nil\tsnapshot: kfunc backend unavailable: the caller is not in the initial pid " ..
                     "namespace, where BPF sees pids; /proc shows this namespace's\t18", lines[1])
      else
        assert.equal("nil\t" .. select(2, H.bpf_tier("kfunc")) .. "\t22", lines[1])
      end
      assert.matches("^nil\tsnapshot: iter backend unavailable: the caller is not in the initial pid namespace", lines[2])
      assert.equal("proc\t1\tlua5.4", lines[3])
    else
      local snap, why, errno = takana.snapshot { backend = "kfunc" }
      assert.is_nil(snap)
      if core.bpf_built then
        assert.equal("snapshot: kfunc backend unavailable: EPERM: loading BPF needs CAP_BPF and CAP_PERFMON (or root)", why)
        assert.equal(require("takana").errno.EPERM, errno)
      else
        assert.equal("snapshot: kfunc backend unavailable: this takana was built without BPF (make BPF=0)", why)
        assert.equal(require("takana").errno.EOPNOTSUPP, errno)
      end
      assert.equal("proc", takana.snapshot().backend)
      local probe = takana.probe()
      assert.is_false(probe.snapshot.kfunc.ok)
      assert.is_false(probe.snapshot.iter.ok)
      assert.equal(why:gsub("^snapshot: kfunc backend unavailable: ", ""), probe.snapshot.kfunc.why)
      assert.equal("proc", probe.snapshot.backend)
    end
  end)

  it("reports each tier in takana.probe()", function()
    local probe = takana.probe()
    for _, name in ipairs { "kfunc", "iter", "proc" } do
      local t = probe.snapshot[name]
      assert.is_boolean(t.ok)
      if not t.ok then assert.is_string(t.why) end
    end
    local have = H.snapshot_backends()
    for _, name in ipairs { "kfunc", "iter" } do
      assert.equal(H.bpf_tier(name) ~= nil, probe.snapshot[name].ok, name)
    end
    assert.equal(have[1], probe.snapshot.backend)
    if have[1] ~= "proc" then assert.truthy(probe.snapshot[have[1]].load_ns > 0) end
  end)
end)

-- A time namespace with clock offsets (unshare -T, as container runtimes
-- set them): /proc, clock_gettime() and takana.boottime_ns() carry them,
-- the kernel's own clocks, which BPF programs and the proc connector read,
-- do not. Every backend must give the namespace's clock.
describe("in a time namespace with clock offsets", function()
  local CHILD = [[
package.path = './lua/?.lua;./lua/?/init.lua;' .. package.path
package.cpath = './?.so;' .. package.cpath
local t, core = require 'takana', require 'takana.core'
local me = io.open('/proc/self/stat'):read('n')
for _, b in ipairs(core.snapshot_backends) do
  local s, why = t.snapshot { backend = b, fields = { 'start_ns', 'cmdline' } }
  if s then
    local r = s:get(me)
    local p, err = s:process(me)
    print('snap', b, r.start_ns, p and 'ok' or err, r.cmdline and r.cmdline[1] or '-')
  else
    print('snap', b, 'unavailable', why)
  end
end
for _, b in ipairs { 'bpf', 'connector' } do
  local ev, why = t.events { backend = b, 'fork', 'exit' }
  if ev then
    local t0 = t.boottime_ns()
    local c = assert(t.spawn { 'true' })
    c:wait()
    local got = {}
    for _ = 1, 50 do
      if got.exit then break end
      t.poll({ ev }, 0.1)
      for e in ev:read() do
        if e.pid == c.pid then got[e.type] = e end
      end
    end
    local t1 = t.boottime_ns()
    for _, ty in ipairs { 'fork', 'exit' } do
      local e = got[ty] or {}
      print('event', b, ty, t0, e.time_ns or '-', t1, e.start_ns or '-', e.realtime_ns or '-', os.time())
    end
    ev:close()
  else
    print('event', b, 'unavailable', why)
  end
end
]]
  local OFFSETS = "--boottime 1000000 --monotonic 500000"

  it("gives snapshot start_ns and event time_ns on the namespace's clock #root", function()
    local code, out = H.run("unshare -T " .. OFFSETS .. " -f true")
    if code ~= 0 then return pending("unshare -T is not permitted here: " .. out) end
    if H.no_spawn then return pending(H.no_spawn) end
    code, out = H.run("unshare -T " .. OFFSETS .. " -f " .. H.lua .. " -e " .. H.shell_quote(CHILD))
    assert.equal(0, code, out)
    local snaps, events = {}, {}
    for line in out:gmatch("[^\n]+") do
      local f = {}
      for v in line:gmatch("[^\t]+") do f[#f + 1] = v end
      if f[1] == "snap" then snaps[f[2]] = f end
      if f[1] == "event" then events[f[2] .. " " .. (f[3] == "unavailable" and "" or f[3])] = f end
    end
    -- Every backend that works here works there, on one clock: the BPF
    -- tiers' ns within a /proc tick of /proc's, snap:process(self) the
    -- same process, the argv program given the kernel's start time.
    local proc = assert(snaps.proc, out)
    local proc_start = math.tointeger(proc[3])
    assert.truthy(proc_start >= 1000000 * 1000000000, out)
    for _, b in ipairs(H.snapshot_backends()) do
      local f = assert(snaps[b], out)
      assert.equal("ok", f[4], out)
      assert.equal("lua5.4", f[5], out)
      assert.truthy(math.abs(math.tointeger(f[3]) - proc_start) < TICK_NS, out)
    end
    -- Each event between the two clock readings around it; the exit's
    -- start is the child's, at or before its fork.
    local backends = {}
    local ev = takana.events { backend = "bpf", "exit" }
    if ev then ev:close() backends[#backends + 1] = "bpf" end
    ev = takana.events { backend = "connector", "exit" }
    if ev then ev:close() backends[#backends + 1] = "connector" end
    for _, b in ipairs(backends) do
      for _, ty in ipairs { "fork", "exit" } do
        local f = assert(events[b .. " " .. ty], out)
        local t0, time, t1 = math.tointeger(f[4]), math.tointeger(f[5]), math.tointeger(f[6])
        assert.truthy(time and t0 <= time and time <= t1, out)
        -- The wall clock has no namespace: the namespace's boottime
        -- offset (10^6 s) must not reach realtime_ns.
        local real, now = math.tointeger(f[8]), math.tointeger(f[9])
        assert.truthy(real and math.abs(real // 1000000000 - now) <= 1, out)
      end
      if b == "bpf" then
        local start = math.tointeger(events["bpf exit"][7])
        assert.truthy(start and math.tointeger(events["bpf exit"][4]) <= start and
                      start <= math.tointeger(events["bpf fork"][5]), out)
      end
    end
  end)

  -- unshare(CLONE_NEWTIME) moves only the caller's children, and
  -- /proc/self/timens_offsets then shows theirs: a process that loaded
  -- takana before keeps its own clock, its forked child reads the new one,
  -- and one that loads takana only afterwards is told why BPF cannot say.
  local UNSHARER = [[
package.path = './lua/?.lua;./lua/?/init.lua;' .. package.path
package.cpath = './spec/?.so;./?.so;' .. package.cpath
local envtool = require 'envtool'
local t = early and require 'takana'
assert(envtool.unshare_time())
local f = assert(io.open('/proc/self/timens_offsets', 'w'))
assert(f:write('boottime 1000000 0\n'))
assert(f:close())
t = t or require 'takana'
local function report(who)
  local me = io.open('/proc/self/stat'):read('n')
  local s, why = t.snapshot { backend = backend }
  if not s then
    print(who, 'unavailable', why, t.snapshot().backend)
    return
  end
  local p, err = s:process(me)
  print(who, s:get(me).start_ns, t.snapshot { backend = 'proc' }:get(me).start_ns, p and 'ok' or err)
end
report('self')
io.stdout:flush()
local pid = envtool.fork()
if pid == 0 then
  envtool.alarm(60)
  report('child')
  io.stdout:flush()
  envtool.exit(0)
end
assert(envtool.waitpid(pid) == 0)
]]

  it("keeps its own clock after unsharing one for its children, and a forked child takes theirs #root", function()
    local code, out = H.run("unshare -T --boottime 1000000 -f true")
    if code ~= 0 then return pending("unshare -T is not permitted here: " .. out) end
    local backend = H.snapshot_backends()[1]
    if backend == "proc" then return pending("no BPF tier here: " .. select(2, H.bpf_tier("iter"))) end
    for _, early in ipairs { true, false } do
      local cmd = ("%s -e %s -e %s"):format(H.lua, H.shell_quote(("early = %s backend = %q"):format(early, backend)),
                                            H.shell_quote(UNSHARER))
      code, out = H.run(cmd)
      assert.equal(0, code, out)
      local rows = {}
      for line in out:gmatch("[^\n]+") do
        local f = {}
        for v in line:gmatch("[^\t]+") do f[#f + 1] = v end
        rows[f[1]] = f
      end
      local self, child = assert(rows.self, out), assert(rows.child, out)
      if early then
        assert.equal("ok", self[4], out)
        assert.truthy(math.abs(math.tointeger(self[2]) - math.tointeger(self[3])) < TICK_NS, out)
        assert.truthy(math.tointeger(self[2]) < 1000000 * 1000000000, out)
      else
        assert.same({ "self", "unavailable", "snapshot: " .. backend .. " backend unavailable: our time " ..
                      "namespace's clock offsets: this process unshared its time namespace " ..
                      "(CLONE_NEWTIME) without an exec since, so only its children's can be read; " ..
                      "load takana before unsharing, or exec", "proc" }, self)
      end
      assert.equal("ok", child[4], out)
      assert.truthy(math.abs(math.tointeger(child[2]) - math.tointeger(child[3])) < TICK_NS, out)
      assert.truthy(math.tointeger(child[2]) >= 1000000 * 1000000000, out)
    end
  end)
end)

-- The kfunc walk follows the task list, in creation order: pids rise along
-- it except after a wrap. A fixture makes that happen on demand (clone3
-- set_tid gives a child a free pid below its elder sibling's), 3 times (its
-- program marks the runs, and they are merged) and 20 (past the marks it
-- keeps: a sort). Either way: pid order, each process once, none missing.
describe("a BPF walk that leaves pid order", function()
  for _, name in ipairs(TIERS) do
    for _, n in ipairs { 3, 20 } do
      it(("gives pid order and one record per process (%s, %d descents) #root #bpf"):format(name, n), function()
        if not H.is_root() then return pending("clone3 with set_tid needs root") end
        local _, why = tier(name)
        if why then return pending(why) end
        local fx = H.fixture { "--life", 60, "--descents", n }
        local kids, drops = fx.extra, 0
        for i = 2, #kids do
          if kids[i] < kids[i - 1] then drops = drops + 1 end
        end
        assert.equal(2 * n, #kids)
        assert.equal(n, drops)
        for _, fields in ipairs { false, { "pid" }, { "pid", "ppid", "comm" } } do
          local before = takana.snapshot { backend = "proc" }
          local snap = assert(takana.snapshot { backend = name, fields = fields or nil })
          local after = takana.snapshot { backend = "proc" }
          local last, count = 0, 0
          for p in snap:each() do
            assert.truthy(p.pid > last, ("pid %d after %d"):format(p.pid, last))
            last, count = p.pid, count + 1
          end
          assert.equal(#snap, count)
          for _, k in ipairs(kids) do
            local r = snap:get(k)
            assert.truthy(r, "child " .. k .. " missing")
            if not fields or fields[2] then
              assert.equal(fx.pid, r.ppid)
              assert.equal("fixture", r.comm)
            end
          end
          assert.truthy(snap:get(1), "init missing")
          -- Every process alive through the BPF walk is in it.
          for p in before:each() do
            local q = after:get(p.pid)
            if same(p, q) then assert.truthy(snap:get(p.pid), "pid " .. p.pid .. " missing") end
          end
        end
        fx:kill()
      end)
    end
  end
end)
