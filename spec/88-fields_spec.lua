-- Field selection (snapshot{fields=...}), cgroup_id in the record,
-- snap:filter{...} and snap:cgroup(pid), on every backend this host offers.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"
local lfs = require "lfs"

local ESRCH, ENOENT = 3, 2
local ALL = core.record_fields
local SIX = { "pid", "ppid", "comm", "state", "utime_ns", "stime_ns" }

local function set(list)
  local t = {}
  for _, k in ipairs(list) do t[k] = true end
  return t
end

-- The backends, each with every field asked for (proc leaves cgroup_id out
-- by default).
local function snap_all(name)
  return takana.snapshot { backend = name, fields = ALL }
end

local backends = H.snapshot_backends()

-- Whether reading field k of record t raises as a field left out of the
-- snapshot's selection does.
local function absent(t, k)
  local ok, err = pcall(function() return t[k] end)
  return not ok and err:find("field '" .. k .. "' is not in this snapshot's selection", 1, true) ~= nil
end

-- The ids of the BPF programs process pid holds descriptors to, as the
-- kernel lists them (/proc/<pid>/fdinfo: prog_id), as a set.
local function bpf_prog_ids(pid)
  local ids = {}
  for fd in lfs.dir("/proc/" .. pid .. "/fdinfo") do
    local info = fd:match("^%d+$") and H.read("/proc/" .. pid .. "/fdinfo/" .. fd)
    local id = info and info:match("\nprog_id:%s*(%d+)")
    if id then ids[tonumber(id)] = true end
  end
  return ids
end

describe("snapshot{fields=...}", function()
  for _, name in ipairs(backends) do
    it(name .. " fills the fields asked for, and raises on reading the others", function()
      local want = { "pid", "ppid", "comm", "utime_ns", "stime_ns", "rss_bytes", "cgroup_id" }
      local snap = assert(takana.snapshot { backend = name, fields = want })
      local full = assert(snap_all(name))
      local wanted = set(want)
      wanted.start_ns = true   -- in every record
      local me, ref = snap:get(H.pid), full:get(H.pid)
      -- the selection as the message lists it: in the record's order
      local listed = {}
      for _, k in ipairs(ALL) do
        if wanted[k] then listed[#listed + 1] = k end
      end
      assert.same(listed, snap.fields)
      local function unselected(t, k)
        local ok, err = pcall(function() return t[k] end)
        assert.falsy(ok, k)
        assert.matches("field '" .. k .. "' is not in this snapshot's selection (" .. table.concat(listed, ", ")
          .. ")", err, 1, true)
      end
      for _, k in ipairs(ALL) do
        if wanted[k] and (k ~= "cgroup_id" or H.cgroup2_mount()) then
          assert.is_not_nil(me[k], k)
        elseif not wanted[k] then
          unselected(me, k)
        end
      end
      assert.equal(ref.ppid, me.ppid)
      assert.equal(ref.comm, me.comm)
      assert.equal(ref.cgroup_id, me.cgroup_id)
      assert.equal(ref.start_ns, me.start_ns)
      -- a name that is no field reads nil, as before
      assert.is_nil(me.no_such_field)
      -- views and totable agree with get
      local seen = false
      for p in snap:each() do
        if p.pid == H.pid then
          seen = true
          unselected(p, "nthreads")
          unselected(p, "state")
          assert.equal(ref.start_ns, p.start_ns)
          assert.equal(me.comm, p.comm)
          assert.is_nil(p.no_such_field)
          local t = p:totable()
          unselected(t, "uid")
          assert.equal(me.ppid, t.ppid)
        end
      end
      assert.truthy(seen)
      for _, t in ipairs(snap:totable()) do
        unselected(t, "vsize_bytes")
        unselected(t, "kthread")
        assert.is_not_nil(t.pid)
      end
    end)

    it(name .. " takes the six-field set, and the same loaded program serves every set", function()
      local held
      for round = 1, 3 do
        local a = assert(takana.snapshot { backend = name, fields = SIX })
        local b = assert(takana.snapshot { backend = name, fields = { "pid", "uid" } })
        local c = assert(takana.snapshot { backend = name })
        local pa, pb, pc = a:get(H.pid), b:get(H.pid), c:get(H.pid)
        assert.equal(pc.comm, pa.comm)
        assert.equal(pc.ppid, pa.ppid)
        assert.equal("R", pa.state)
        assert.is_true(absent(pa, "uid"))
        assert.equal(H.uid(), pb.uid)
        assert.is_true(absent(pb, "comm"))
        assert.is_true(absent(pb, "utime_ns"))
        -- what one selection left out does not leak into the next
        assert.is_not_nil(pc.nthreads)
        assert.is_not_nil(pc.majflt)
        -- After the first round, no set loads a program: every BPF
        -- program held now was held after round 1 (other specs' dropped
        -- objects may close theirs meanwhile).
        if round == 1 then
          held = bpf_prog_ids(H.pid)
        else
          for id in pairs(bpf_prog_ids(H.pid)) do
            assert.is_true(held[id], ("%s: BPF program %d loaded in round %d"):format(name, id, round))
          end
        end
      end
    end)

    it(name .. " gives a multi-threaded process its whole CPU time with the six fields", function()
      local fx = H.fixture { "--threads", 2, "--exited-threads", 2, "--burn-ms", 60 }
      local six = assert(takana.snapshot { backend = name, fields = SIX })
      local full = assert(takana.snapshot { backend = name })
      fx:kill()
      local a, b = assert(six:get(fx.pid)), assert(full:get(fx.pid))
      -- five threads burnt 60 ms each: both see them all, within a tick
      assert.truthy(a.utime_ns + a.stime_ns >= 250e6, a.utime_ns + a.stime_ns)
      assert.truthy(math.abs((a.utime_ns + a.stime_ns) - (b.utime_ns + b.stime_ns)) < 20e6)
    end)
  end

  it("kfunc: every selection fills what it asks for, and after the first the program held stays the one "
    .. "serving #root #bpf", function()
    local has_kfunc = false
    for _, b in ipairs(backends) do has_kfunc = has_kfunc or b == "kfunc" end
    if not has_kfunc then return pending("no kfunc tier here") end
    if H.no_spawn then return pending(H.no_spawn) end
    -- A fresh process: the tier's first load is part of the run. Each
    -- line: ppid, uid, comm and utime as the full record has them ("=")
    -- or absent ("nil"), then whether the BPF programs the process holds
    -- (by kernel id, /proc/self/fdinfo) are the ones it held after the
    -- first selection ("same"), or not yet compared ("-").
    local script = [[
      local takana = require "takana"
      local me = require("takana.core").getpid()
      local function prog_ids()
        local ids = {}
        for fd = 0, 1023 do
          local f = io.open("/proc/self/fdinfo/" .. fd)
          local id = f and f:read("a"):match("\nprog_id:%s*(%d+)")
          if f then f:close() end
          if id then ids[#ids + 1] = id end
        end
        table.sort(ids)
        return table.concat(ids, ",")
      end
      local ref = takana.snapshot { backend = "kfunc" }:get(me)
      local held
      local function row(fields, compare)
        local r = takana.snapshot { backend = "kfunc", fields = fields }:get(me)
        local out = {}
        for _, k in ipairs { "ppid", "uid", "comm", "utime_ns" } do
          local ok, v = pcall(function() return r[k] end)
          out[#out + 1] = not ok and "nil" or (r[k] == ref[k] or k == "utime_ns") and "=" or tostring(r[k])
        end
        if compare then
          out[#out + 1] = prog_ids() == held and "same" or (held .. " then " .. prog_ids())
        else
          held = prog_ids()
          out[#out + 1] = held ~= "" and "-" or "no program held"
        end
        print(table.concat(out, " "))
      end
      row(nil)
      row({ "pid", "ppid", "comm" })
      row({ "pid", "uid" }, true)
      row(nil, true)
      row({ "pid", "ppid", "comm" }, true)
    ]]
    -- through the light skeleton, and through libbpf's
    for _, loader in ipairs { "light", "libbpf" } do
      local code, out = H.run("TAKANA_BPF_LOADER=" .. loader .. " LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' "
        .. "LUA_CPATH='./?.so;;' " .. H.lua .. " -e " .. H.shell_quote(script))
      assert.equal(0, code, out)
      assert.equal("= = = = -\n" ..
                   "= nil = nil -\n" ..
                   "nil = nil nil same\n" ..
                   "= = = = same\n" ..
                   "= nil = nil same\n", out, loader)
    end
  end)

  it("defaults to the full record: cgroup_id on BPF tiers, left out by proc, cmdline by all", function()
    local p = assert(takana.snapshot { backend = "proc" }):get(H.pid)
    assert.is_true(absent(p, "cgroup_id"))
    assert.is_true(absent(p, "cmdline"))
    assert.is_not_nil(p.majflt)
    for _, name in ipairs(backends) do
      if name ~= "proc" then
        local q = assert(takana.snapshot { backend = name }):get(H.pid)
        assert.is_true(absent(q, "cmdline"), name)
        for _, k in ipairs(ALL) do
          if k ~= "cmdline" and (k ~= "cgroup_id" or H.cgroup2_mount()) then
            assert.is_not_nil(q[k], k)
          end
        end
      end
    end
  end)

  it("raises on unknown fields, listing the known ones, and on bad lists", function()
    local ok, err = pcall(takana.snapshot, { fields = { "pid", "argv" } })
    assert.falsy(ok)
    assert.matches("unknown field 'argv'", err)
    assert.matches("known: pid, ppid, pgid", err, 1, true)
    assert.matches("cgroup_id", err, 1, true)
    for _, bad in ipairs { {}, { "pid", x = 1 }, { 1 }, { "pid\0" }, { "../pid" }, { ("x"):rep(5000) } } do
      assert.has_error(function() takana.snapshot { fields = bad } end)
    end
    assert.has_error(function() takana.snapshot { fields = "pid" } end)
    assert.has_error(function() core.snapshot_take("proc", 0, true) end)
    assert.has_error(function() core.snapshot_take("proc", 1 << 40) end)
    assert.has_error(function() core.snapshot_take("kfunc", -1) end)
  end)

  it("delta needs utime_ns and stime_ns in both snapshots, and says so", function()
    local a = assert(takana.snapshot { fields = { "pid", "comm" } })
    local b = assert(takana.snapshot { fields = { "pid", "utime_ns", "stime_ns" } })
    local c = assert(takana.snapshot { fields = { "pid", "utime_ns", "stime_ns" } })
    local ok, err = pcall(takana.delta, a, c)
    assert.falsy(ok)
    assert.matches("delta(old, new): old: field 'utime_ns' is not in this snapshot's selection", err, 1, true)
    assert.has_error(function() takana.delta(b, a) end)
    -- pid and start are read whatever the selection: a reused pid is still told apart
    local d = takana.delta(b, c)
    assert.is_not_nil(d.cpu_ns[H.pid])
  end)
end)

-- Issue 23's traps 1 and 2, on each backend this host offers: an identity
-- check needs start_ns whatever the selection, and a field left out of it
-- raises instead of reading nil (p.kthread read nil: "no kernel threads").
describe("no silent nils", function()
  for _, name in ipairs(backends) do
    it(name .. ": snap:process(own pid) works with fields = {\"pid\"}", function()
      local snap = assert(takana.snapshot { backend = name, fields = { "pid" } })
      assert.same({ "pid", "start_ns" }, snap.fields)
      assert.is_true(snap:get(H.pid).start_ns > 0)
      local p, err = snap:process(H.pid)
      assert(p, err)
      assert.equal(H.pid, p.pid)
      p:close()
    end)

    it(name .. ": with fields = {\"pid\",\"cgroup_id\"}, p.kthread raises, naming it and the selection",
      function()
        local snap = assert(takana.snapshot { backend = name, fields = { "pid", "cgroup_id" } })
        local want = "field 'kthread' is not in this snapshot's selection (pid, start_ns, cgroup_id)"
        local function raises(f)
          local ok, err = pcall(f)
          assert.falsy(ok)
          assert.matches(want, err, 1, true)
        end
        raises(function() return snap:get(1).kthread end)
        raises(function() return snap:totable()[1].kthread end)
        local p = snap:each()()   -- the first record's view
        raises(function() return p.kthread end)
        raises(function() return p:totable().kthread end)
        -- methods and names that are no field keep working
        assert.is_function(p.totable)
        assert.is_nil(p.no_such_field)
        -- filter and delta say it the same way
        local ok, err = pcall(snap.filter, snap, { uid = 0 })
        assert.falsy(ok)
        assert.matches("filter{uid=}: field 'uid' is not in this snapshot's selection (pid, start_ns, cgroup_id)",
          err, 1, true)
        ok, err = pcall(takana.delta, snap, snap)
        assert.falsy(ok)
        assert.matches("delta(old, new): old: field 'utime_ns' is not in this snapshot's selection "
          .. "(pid, start_ns, cgroup_id)", err, 1, true)
        local bare = assert(takana.snapshot { backend = name, fields = { "pid" } })
        ok, err = pcall(bare.cgroup, bare, H.pid)
        assert.falsy(ok)
        assert.matches("snapshot:cgroup: field 'cgroup_id' is not in this snapshot's selection (pid, start_ns)",
          err, 1, true)
        -- children read ppid; a record names its comm only when it has one
        ok, err = pcall(bare.children, bare, 1)
        assert.falsy(ok)
        assert.matches("snapshot:children: field 'ppid' is not in this snapshot's selection (pid, start_ns)",
          err, 1, true)
        local function view_text(s)
          for v in s:each() do if v.pid == H.pid then return tostring(v) end end
        end
        assert.equal("takana.Record (pid " .. H.pid .. ")", view_text(bare))
        local named = assert(takana.snapshot { backend = name, fields = { "pid", "comm" } })
        assert.equal("takana.Record (pid " .. H.pid .. ", " .. named:get(H.pid).comm .. ")", view_text(named))
      end)
  end
end)

describe("cgroup_id", function()
  local mnt = H.cgroup2_mount()

  local function ino(rel)
    local a = lfs.attributes(mnt .. rel)
    return a and a.ino
  end

  local function proc_cgroup(pid)
    local text = H.read("/proc/" .. pid .. "/cgroup") or ""
    return text:match("^0::([^\n]*)") or text:match("\n0::([^\n]*)")
  end

  it("is the inode of the cgroup2 directory, on every backend, for this process", function()
    if not mnt then return pending("no cgroup2 hierarchy is mounted here: cgroup_id is nil") end
    local want = ino(proc_cgroup(H.pid))
    assert.is_not_nil(want)
    for _, name in ipairs(backends) do
      local p = assert(takana.snapshot { backend = name, fields = { "pid", "cgroup_id" } }):get(H.pid)
      assert.equal(want, p.cgroup_id, name)
    end
  end)

  -- Where a kernel hides init from BPF walks (this host), a BPF tier reads
  -- init's cgroup through /proc/1/cgroup, kept open across snapshots.
  it("is init's cgroup on every backend, twice, whether or not BPF can see init", function()
    if not mnt then return pending("no cgroup2 hierarchy is mounted here: cgroup_id is nil") end
    local want = ino(proc_cgroup(1))
    assert.is_not_nil(want)
    for _, name in ipairs(backends) do
      for round = 1, 2 do
        local snap = assert(takana.snapshot { backend = name, fields = { "pid", "cgroup_id" } })
        assert.equal(want, snap:get(1).cgroup_id, name .. " round " .. round)
        -- every field too (the kfunc tier loads another program then)
        local all = assert(takana.snapshot { backend = name, fields = core.record_fields })
        assert.equal(want, all:get(1).cgroup_id, name)
      end
    end
  end)

  it("agrees across backends for a process in a test cgroup, nested #root", function()
    local path, cgname = H.test_cgroup_path()
    if not path then return pending("needs root and a cgroup2 mount to make a test cgroup") end
    local fx
    local ok, err = pcall(function()
      assert(os.execute("mkdir " .. path .. "/inner"))
      fx = H.fixture {}
      local f = assert(io.open(path .. "/inner/cgroup.procs", "w"))
      f:write(tostring(fx.pid))
      assert(f:close())
      local want = ino("/" .. cgname .. "/inner")
      assert.equal("/" .. cgname .. "/inner", proc_cgroup(fx.pid))
      local snaps = {}
      for _, name in ipairs(backends) do
        snaps[name] = assert(takana.snapshot { backend = name, fields = { "pid", "uid", "comm", "cgroup_id" } })
        assert.equal(want, snaps[name]:get(fx.pid).cgroup_id, name)
        -- snap:cgroup gives the path back
        assert.equal("/" .. cgname .. "/inner", snaps[name]:cgroup(fx.pid))
        -- filter: the cgroup alone, its parent recursively, not its parent alone
        assert.same({ fx.pid }, snaps[name]:filter { cgroup = cgname .. "/inner" })
        assert.same({ fx.pid }, snaps[name]:filter { cgroup = "/" .. cgname .. "/inner/" })
        assert.same({ fx.pid }, snaps[name]:filter { cgroup = cgname, recursive = true })
        assert.same({}, snaps[name]:filter { cgroup = cgname })
        assert.same({}, snaps[name]:filter { cgroup = cgname, recursive = false })
        assert.same({ fx.pid }, snaps[name]:filter { cgroup = cgname, recursive = true, uid = 0, comm = "^fixture" })
        assert.same({}, snaps[name]:filter { cgroup = cgname, recursive = true, uid = 1 })
        assert.same({}, snaps[name]:filter { cgroup = cgname, recursive = true, comm = "^nope" })
        -- the root, recursively: processes with a cgroup_id whose cgroup
        -- still exists (another program's cgroup may go since the snapshot)
        local all = snaps[name]:filter { cgroup = "/", recursive = true }
        local seen = {}
        for _, pid in ipairs(all) do
          assert.is_number(snaps[name]:get(pid).cgroup_id)
          seen[pid] = true
        end
        assert.is_true(seen[fx.pid] and seen[H.pid])
      end
    end)
    if fx then fx:kill() end
    H.cgroup_cleanup(path)
    assert(ok, err)
  end)

  -- A proc snapshot taken inside a cgroup namespace (unshare -C, its root
  -- the test's inner cgroup). /proc/<pid>/cgroup paths are relative to that
  -- root; the mount's root (mountinfo's 4th field) is relative to it too.
  local ns_script = [[
    local takana = require "takana"
    local root
    for l in io.lines("/proc/self/mountinfo") do
      local r, m = l:match("^%S+ %S+ %S+ (%S+) (%S+) .- %- cgroup2 ")
      if m == os.getenv("MNT") then root = r end
    end
    local me = io.open("/proc/self/stat"):read("n")
    local snap = assert(takana.snapshot { backend = "proc", fields = { "pid", "cgroup_id" } })
    local function id(pid) return tostring(snap:get(pid) and snap:get(pid).cgroup_id) end
    print(root, id(me), id(tonumber(os.getenv("OTHER"))), id(tonumber(os.getenv("BUSTED"))))
  ]]

  -- Runs ns_script under prefix (unshare ...) in cgroup inner; its output,
  -- or nil and why when namespaces are not available here.
  local function in_namespace(prefix, inner, other, mount)
    local argv = { "env", "OTHER=" .. other, "BUSTED=" .. H.pid, "MNT=" .. mount }
    for _, a in ipairs(prefix) do argv[#argv + 1] = a end
    for _, a in ipairs { "env", "LUA_PATH=./lua/?.lua;./lua/?/init.lua;;", "LUA_CPATH=./?.so;;" } do
      argv[#argv + 1] = a
    end
    for _, a in ipairs(H.lua_argv) do argv[#argv + 1] = a end
    argv[#argv + 1] = "-e"
    argv[#argv + 1] = ns_script
    argv.cgroup, argv.stdout = inner, "pipe"
    local child = assert(takana.spawn(argv))
    local out = child.stdout:read("a")
    local status = child:wait()
    child.stdout:close()
    child:close()
    if status.code ~= 0 and out == "" then return nil end
    assert.same({ exited = true, code = 0 }, status)
    return out
  end

  local function ns_cgroups()
    local path, cgname = H.test_cgroup_path()
    if not path then return nil end
    local top = assert(takana.cgroup(cgname))
    local inner, side = assert(top:mkdir("inner")), assert(top:mkdir("side"))
    top:close()
    local sleeper = assert(takana.spawn { "sleep", "30", cgroup = side })
    return path, cgname, inner, side, sleeper
  end

  local function ns_cleanup(path, inner, side, sleeper)
    sleeper:signal("KILL")
    sleeper:wait()
    sleeper:close()
    inner:close()
    side:close()
    H.cgroup_cleanup(path)
  end

  it("from /proc inside a cgroup namespace whose mount was made outside it: the real ids #root", function()
    if H.no_spawn then return pending(H.no_spawn) end
    if H.run("command -v unshare") ~= 0 then return pending("unshare(1) is not installed") end
    local path, cgname, inner, side, sleeper = ns_cgroups()
    if not path then return pending("needs root and a cgroup2 mount to make a test cgroup") end
    local ok, err = pcall(function()
      local out = in_namespace({ "unshare", "-C" }, inner, sleeper.pid, mnt)
      if not out then return pending("unshare -C failed (no cgroup namespaces?)") end
      -- The mount's root is two levels above the namespace's: before the
      -- fix every process here read the host root's id (1).
      local host = ino(proc_cgroup(H.pid))
      assert.equal(("/../..\t%d\t%d\t%d\n"):format(ino("/" .. cgname .. "/inner"),
        ino("/" .. cgname .. "/side"), host), out)
    end)
    ns_cleanup(path, inner, side, sleeper)
    assert(ok, err)
  end)

  it("from /proc inside a cgroup namespace with its own mount: nil outside that mount's reach #root", function()
    if H.no_spawn then return pending(H.no_spawn) end
    if H.run("command -v unshare") ~= 0 then return pending("unshare(1) is not installed") end
    local path, cgname, inner, side, sleeper = ns_cgroups()
    if not path then return pending("needs root and a cgroup2 mount to make a test cgroup") end
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    local ok, err = pcall(function()
      -- Mounted inside the namespace, the hierarchy's root is inner: the
      -- sibling and busted's cgroup are above it, known to be unknowable.
      local out = in_namespace({ "unshare", "-C", "-m", "sh", "-c", 'mount -t cgroup2 none "$0" && exec "$@"', dir },
        inner, sleeper.pid, dir)
      if not out then return pending("unshare -C -m or the cgroup2 mount failed here") end
      assert.equal(("/\t%d\tnil\tnil\n"):format(ino("/" .. cgname .. "/inner")), out)
    end)
    os.execute("rmdir " .. dir)
    ns_cleanup(path, inner, side, sleeper)
    assert(ok, err)
  end)
end)

describe("snap:filter", function()
  it("matches uid and comm without a cgroup, in pid order", function()
    local snap = assert(takana.snapshot { fields = { "pid", "uid", "comm" } })
    local mine = snap:filter { uid = H.uid() }
    local n = 0
    for p in snap:each() do if p.uid == H.uid() then n = n + 1 end end
    assert.equal(n, #mine)
    for i = 2, #mine do assert.truthy(mine[i - 1] < mine[i]) end
    local lua = snap:filter { comm = "^lua", uid = H.uid() }
    local found = false
    for _, pid in ipairs(lua) do found = found or pid == H.pid end
    assert.truthy(found)
    assert.same({}, snap:filter { comm = "^%d+never$" })
    assert.equal(#snap, #snap:filter {})
  end)

  it("raises on bad criteria and on fields the snapshot lacks", function()
    local snap = assert(takana.snapshot { fields = { "pid", "uid", "comm", "cgroup_id" } })
    local bare = assert(takana.snapshot { fields = { "pid" } })
    for _, bad in ipairs {
      { cgroup = 1 }, { uid = "0" }, { uid = -1 }, { uid = 1 << 40 }, { uid = 1.5 }, { comm = 5 },
      { recursive = true }, { recursive = "yes", cgroup = "/" }, { what = 1 }, { [1] = "x" },
      { comm = "[" }, { cgroup = "../x" }, { cgroup = "a/../../x" }, { cgroup = "a\0b" },
      { cgroup = "./a" }, { cgroup = ("a/"):rep(3000) },
    } do
      assert.has_error(function() snap:filter(bad) end)
    end
    assert.has_error(function() snap:filter() end)
    assert.has_error(function() snap:filter({}, 1) end)
    local ok, err = pcall(bare.filter, bare, { uid = 0 })
    assert.falsy(ok)
    assert.matches("filter{uid=}: field 'uid' is not in this snapshot's selection (pid, start_ns)", err, 1, true)
    assert.has_error(function() bare:filter { comm = "x" } end)
    assert.has_error(function() bare:filter { cgroup = "/" } end)
  end)

  it("returns nil, message, ENOENT for a cgroup that does not exist", function()
    if not H.cgroup2_mount() then return pending("no cgroup2 hierarchy is mounted here") end
    local snap = assert(takana.snapshot { fields = { "pid", "cgroup_id" } })
    local pids, err, errno = snap:filter { cgroup = "takana-test-none-" .. math.random(1e9) }
    assert.is_nil(pids)
    assert.matches("^filter: cgroup /takana%-test%-none", err)
    assert.equal(ENOENT, errno)
  end)
end)

describe("snap:cgroup", function()
  it("gives this process's path, and refuses what it cannot answer", function()
    local mnt = H.cgroup2_mount()
    local snap = assert(takana.snapshot { fields = { "pid", "cgroup_id" } })
    if mnt then
      local text = H.read("/proc/self/cgroup")
      local want = text:match("^0::([^\n]*)") or text:match("\n0::([^\n]*)")
      assert.equal(want, snap:cgroup(H.pid))
    end
    local r, err, errno = snap:cgroup(2 ^ 30 | 0)
    assert.is_nil(r)
    assert.matches("not in the snapshot", err)
    assert.equal(ESRCH, errno)
    assert.has_error(function() snap:cgroup("x") end)
    assert.has_error(function() snap:cgroup(0) end)
    assert.has_error(function() snap:cgroup(H.pid, 1) end)
    local bare = assert(takana.snapshot { fields = { "pid" } })
    assert.has_error(function() bare:cgroup(H.pid) end)
  end)

  it("gives what takana.cgroup.path gives, from the core: a live cgroup, then a removed one", function()
    local path, cgname = H.test_cgroup_path()
    if not path then return pending("needs root and a cgroup2 mount to make a test cgroup") end
    local cg = require "takana.cgroup"
    local saved = rawget(cg, "path")
    local fx
    local ok, err = pcall(function()
      fx = H.fixture {}
      local pid = fx.pid
      local f = assert(io.open(path .. "/cgroup.procs", "w"))
      f:write(tostring(pid))
      assert(f:close())
      local snap = assert(takana.snapshot { fields = { "pid", "cgroup_id" } })
      local id = snap:get(pid).cgroup_id
      -- No call up into Lua: a stand-in takana.cgroup.path is never asked.
      rawset(cg, "path", function() error("snap:cgroup called takana.cgroup.path") end)
      assert.equal("/" .. cgname, snap:cgroup(pid))
      rawset(cg, "path", saved)
      assert.equal("/" .. cgname, takana.cgroup.path(id))
      fx:kill()
      fx = nil
      H.cgroup_cleanup(path)
      assert.is_nil(lfs.attributes(path))
      local want = { takana.cgroup.path(id) }
      assert.is_nil(want[1])
      assert.matches("^cgroup%.path: no cgroup .*has id " .. id .. " %(removed%?%)$", want[2])
      assert.equal(ENOENT, want[3])
      assert.same(want, { snap:cgroup(pid) })
    end)
    rawset(cg, "path", saved)
    if fx then fx:kill() end
    if lfs.attributes(path) then H.cgroup_cleanup(path) end
    assert(ok, err)
  end)

  it("answers for a process that exited since the snapshot, from its record", function()
    if not H.cgroup2_mount() then return pending("no cgroup2 hierarchy is mounted here") end
    local fx = H.fixture {}
    local snap = assert(takana.snapshot { fields = { "pid", "cgroup_id" } })
    fx:kill()
    assert.is_string(snap:cgroup(fx.pid))
  end)
end)

-- The value-level schema check: a field every process reads as zero, nil,
-- false or empty on a backend is a field that backend does not fill. A
-- niced child of another uid with arguments, in a session of its own, is
-- started so that nice, uid, sid and cmdline have a value to show on any
-- host (a guest's init may never call setsid: every sid there is 0). These may stay empty on a
-- quiet host, each for its reason:
local may_be_empty = {
  majflt = "a major fault needs a read from disk; a host with all it runs cached has none",
  kthread = "a container's pid namespace holds no kernel threads",
  cgroup_id = "nil where no cgroup2 hierarchy is mounted",
}

describe("every record field", function()
  local function filled(v)
    if type(v) == "number" then return v ~= 0 end
    if type(v) == "string" then return v ~= "" end
    if type(v) == "table" then return #v > 0 end
    return v == true
  end

  it("has a value for some process on every backend", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local root = H.read("/proc/self/status"):match("\nUid:%s+0%s") ~= nil
    local child = assert(takana.spawn { "nice", "-n", "5", "sleep", "30", user = root and 65534 or nil, setsid = true })
    finally(function() child:signal("KILL") child:wait() child:close() end)
    -- nice has exec'd sleep once its comm says so
    for _ = 1, 500 do
      local rec = assert(takana.snapshot { backend = "proc" }):get(child.pid)
      if rec and rec.comm == "sleep" then break end
      takana.poll({}, 0.01)
    end
    for _, name in ipairs(backends) do
      local snap = assert(takana.snapshot { backend = name, fields = ALL })
      -- Init hidden from a BPF walk is read from /proc (snap.from_proc):
      -- its values say nothing about what the walk fills.
      local from_proc = name ~= "proc" and snap.from_proc > 0
      local empty = {}
      for _, f in ipairs(ALL) do
        local any = false
        for p in snap:each() do
          if filled(p[f]) and not (from_proc and p.pid == 1) then any = true break end
        end
        if not any and not may_be_empty[f] then empty[#empty + 1] = f end
      end
      assert.same({}, empty, name .. ": fields empty for every process")
    end
  end)
end)

