-- Pressure stall information (issue 23): takana.pressure and cg:pressure
-- read the kernel's pressure files into fractions and microseconds, each
-- value checked against the file read here; PSI triggers are handle
-- objects polled on POLLPRI, refused with the kernel's reasons (the 2 s
-- rule without CAP_SYS_RESOURCE), broken once their cgroup goes. Every
-- cgroup here lives under a takana-test-* directory, and the one process
-- started here (the #guest memory hog) dies with the spec.
local takana = require "takana"
local H = require "helpers"

local E = takana.errno
local resources = { "cpu", "memory", "io" }

-- The kernel's text of a pressure file: {some = {avg10=..., total=...},
-- full = ...}, percentages and microseconds as the kernel prints them.
local function parse_file(text)
  local t = {}
  for kind, a10, a60, a300, total in text:gmatch("(%a+) avg10=([%d.]+) avg60=([%d.]+) avg300=([%d.]+) total=(%d+)") do
    t[kind] = { avg10 = tonumber(a10), avg60 = tonumber(a60), avg300 = tonumber(a300), total = math.tointeger(tonumber(total)) }
  end
  return t
end

local function close_to(a, b)
  return math.abs(a - b) <= 1e-12
end

-- p is takana's table for a file read into before and after around it:
-- the shape and ranges exact, total_us between the two reads', and each
-- average equal to the kernel's / 100 where it did not change meanwhile.
local function check_against(p, before, after, what)
  assert.is_table(p, what)
  assert.is_table(p.some, what)
  for _, kind in ipairs { "some", "full" } do
    local line, b, a = p[kind], before[kind], after[kind]
    if b == nil then
      assert.is_nil(line, what .. ": " .. kind .. " is absent from the file")
    else
      assert.is_table(line, what .. " " .. kind)
      local keys = {}
      for k in pairs(line) do keys[#keys + 1] = k end
      table.sort(keys)
      assert.same({ "avg10", "avg300", "avg60", "total_us" }, keys)
      assert.equal("integer", math.type(line.total_us), what)
      assert.truthy(line.total_us >= b.total and line.total_us <= a.total,
        ("%s %s total_us %d not within %d..%d"):format(what, kind, line.total_us, b.total, a.total))
      for _, k in ipairs { "avg10", "avg60", "avg300" } do
        assert.equal("number", type(line[k]))
        assert.truthy(line[k] >= 0 and line[k] <= 1, what .. " " .. kind .. "." .. k .. " = " .. line[k])
        if b[k] == a[k] then
          assert.truthy(close_to(b[k] / 100, line[k]),
            ("%s %s.%s: %s from the file, %s from takana"):format(what, kind, k, b[k], line[k]))
        end
      end
    end
  end
end

local function has_cap_sys_resource()
  local eff = H.read("/proc/self/status"):match("\nCapEff:%s+(%x+)")
  -- CAP_SYS_RESOURCE is bit 24.
  return eff ~= nil and (tonumber(eff:sub(-8), 16) >> 24) & 1 == 1
end

local function psi_why()
  if not H.read("/proc/pressure/memory") then
    return "no /proc/pressure here: the kernel has no PSI (CONFIG_PSI off, or psi=0)"
  end
end

-- A takana-test-* cgroup with an open handle, or nil and why not.
local function test_cgroup()
  if not H.is_root() then return nil, "needs root to create a cgroup" end
  local path, name = H.test_cgroup_path()
  if not path then return nil, "no cgroup2 hierarchy is mounted" end
  local cg = assert(takana.cgroup(name))
  return { path = path, name = name, cg = cg }
end

local function release(box)
  if not box then return end
  if box.cg then box.cg:close() end
  H.cgroup_cleanup(box.path)
end

describe("takana.pressure", function()
  it("reads each of the host's resources as fractions and integer microseconds, as the kernel's file says", function()
    local why = psi_why()
    if why then pending(why) return end
    for _, r in ipairs(resources) do
      local before = parse_file(H.read("/proc/pressure/" .. r))
      local p = assert(takana.pressure(r))
      local after = parse_file(H.read("/proc/pressure/" .. r))
      check_against(p, before, after, "/proc/pressure/" .. r)
      local again = assert(takana.pressure(r))
      for _, kind in ipairs { "some", "full" } do
        if p[kind] then assert.truthy(again[kind].total_us >= p[kind].total_us, r .. " " .. kind) end
      end
    end
  end)

  it("raises on a resource it does not know, and on extra arguments", function()
    local bad = {
      { nil }, { 1 }, { {} }, { true }, { "" }, { "MEMORY" }, { "mem" }, { "memory " }, { "../memory" },
      { "memory\0" }, { "memory\0x" }, { "cpu/../memory" }, { "irq2" }, { "memory", 1 },
    }
    for i, args in ipairs(bad) do
      local ok, err = pcall(takana.pressure, table.unpack(args, 1, math.max(#args, 1)))
      assert.is_false(ok, "case " .. i)
      assert.matches("^bad argument #%d to '[%w.]*pressure'", err, 1, false, "case " .. i)
    end
  end)
end)

describe("cg:pressure", function()
  local box
  after_each(function()
    release(box)
    box = nil
  end)

  it("reads a test cgroup's pressure files as takana.pressure does, stat()'s pressure section kept #root", function()
    local why
    box, why = test_cgroup()
    if not box then pending(why) return end
    if not H.read(box.path .. "/memory.pressure") then
      pending("no memory.pressure in a cgroup2 cgroup here (PSI off for cgroups: cgroup.pressure 0 or psi=0)")
      return
    end
    for _, r in ipairs(resources) do
      local file = box.path .. "/" .. r .. ".pressure"
      local before = parse_file(H.read(file))
      local p = assert(box.cg:pressure(r))
      local after = parse_file(H.read(file))
      check_against(p, before, after, file)
    end
    -- stat()'s own section, its keys and units unchanged.
    local st = assert(box.cg:stat())
    for _, r in ipairs(resources) do
      local sec = st.pressure[r]
      assert.is_table(sec, r)
      assert.equal("integer", math.type(sec.some.total_ns))
      assert.is_nil(sec.some.total_us)
      assert.equal(0, sec.some.total_ns % 1000)
    end
  end)

  it("reads the cgroup2 root's files without privileges", function()
    local why = psi_why()
    if why then pending(why) return end
    local mnt = H.cgroup2_mount()
    if not mnt then pending("no cgroup2 hierarchy is mounted") return end
    if not H.read(mnt .. "/io.pressure") then pending("no io.pressure in the cgroup2 root here") return end
    local root = assert(takana.cgroup("/"))
    local before = parse_file(H.read(mnt .. "/io.pressure"))
    local p = assert(root:pressure("io"))
    local after = parse_file(H.read(mnt .. "/io.pressure"))
    root:close()
    check_against(p, before, after, mnt .. "/io.pressure")
  end)

  it("says ENOENT, naming the causes, once its cgroup is removed #root", function()
    local why
    box, why = test_cgroup()
    if not box then pending(why) return end
    local child = assert(box.cg:mkdir("gone"))
    assert(os.execute("rmdir " .. H.shell_quote(box.path .. "/gone")))
    local r = table.pack(child:pressure("memory"))
    child:close()
    assert.equal(3, r.n)
    assert.is_nil(r[1])
    assert.equal(E.ENOENT, r[3])
    assert.equal(("cgroup /%s/gone: memory.pressure absent: no PSI (CONFIG_PSI off, psi=0), PSI off in this "
      .. "cgroup (cgroup.pressure 0), or the cgroup was removed: %s"):format(box.name, takana.strerror(E.ENOENT)),
      r[2])
  end)

  it("raises on a bad resource or a closed handle", function()
    local root = assert(takana.cgroup("/"))
    for i, args in ipairs { { nil }, { 5 }, { "../memory" }, { "memory\0" }, { "memory.pressure" }, { "memory", "x" } } do
      local ok, err = pcall(root.pressure, root, table.unpack(args, 1, math.max(#args, 1)))
      assert.is_false(ok, "case " .. i)
      assert.matches("bad argument", err, 1, true, "case " .. i)
    end
    root:close()
    assert.error_matches(function() root:pressure("memory") end, "attempt to use a closed cgroup handle")
  end)
end)

describe("pressure triggers", function()
  local box
  after_each(function()
    release(box)
    box = nil
  end)

  -- A host trigger, or pending with the kernel's reason for this user.
  local function host_trigger(t)
    local trig, err, errno = takana.pressure_trigger(t)
    if not trig and (errno == E.EACCES or errno == E.EPERM) then return nil, err end
    return assert(trig, err)
  end

  it("a host trigger with a 2 s window is a pollable handle object", function()
    local why = psi_why()
    if why then pending(why) return end
    local trig, err = host_trigger { resource = "memory", kind = "some", stall = 0.15, window = 2 }
    if not trig then pending(err) return end
    assert.equal("integer", math.type(trig:fileno()))
    assert.equal(trig:fileno(), trig:pollfd())
    assert.equal("p", trig:events())
    assert.is_nil(trig:timeout())
    assert.matches("^takana.PressureTrigger %(fd %d+%)$", tostring(trig))
    local ready = assert(takana.poll({ trig }, 0))
    assert.truthy(#ready == 0 or (#ready == 1 and ready[1] == trig))
    assert.is_boolean(trig:read())
    assert.is_boolean(trig:read(0))
    local full = host_trigger { resource = "io", kind = "full", stall = 1, window = 10 }
    full:close()
    trig:close()
    trig:close()
    assert.matches("closed", tostring(trig))
    assert.error_matches(function() trig:read() end, "attempt to use a closed pressure trigger")
  end)

  it("closes its descriptor through close, __close and the collector, leaking none", function()
    local why = psi_why()
    if why then pending(why) return end
    local probe, err = host_trigger { resource = "cpu", stall = 0.5, window = 4 }
    if not probe then pending(err) return end
    local fd = probe:fileno()
    probe:close()
    assert.is_false(H.fd_open(fd))
    do
      local scoped <close> = host_trigger { resource = "cpu", stall = 0.5, window = 4 }
      fd = scoped:fileno()
    end
    assert.is_false(H.fd_open(fd))
    collectgarbage(); collectgarbage()
    local before = H.count_fds()
    -- A trigger costs the kernel an RCU grace period on close: few of them.
    for _ = 1, 100 do
      fd = host_trigger({ resource = "io", stall = 0.2, window = 2 }):fileno()
    end
    collectgarbage(); collectgarbage()
    assert.is_false(H.fd_open(fd))
    assert.equal(before, H.count_fds())
  end)

  it("a 1 s window gives EINVAL naming the 2 s rule without CAP_SYS_RESOURCE", function()
    local why = psi_why()
    if why then pending(why) return end
    local r = table.pack(takana.pressure_trigger { resource = "memory", stall = 0.15, window = 1 })
    if r[1] == nil and (r[3] == E.EACCES or r[3] == E.EPERM) then pending(r[2]) return end
    if has_cap_sys_resource() then
      -- The rule binds only those without the capability.
      assert.equal("takana.PressureTrigger", getmetatable(r[1]).__name)
      r[1]:close()
      return
    end
    assert.equal(3, r.n)
    assert.is_nil(r[1])
    assert.equal(E.EINVAL, r[3])
    assert.equal("pressure: /proc/pressure/memory: trigger with a window of 1.0 s refused: without CAP_SYS_RESOURCE "
      .. "the kernel takes only windows that are multiples of 2 s: " .. takana.strerror(E.EINVAL), r[2])
  end)

  it("a cgroup trigger opens beneath the handle and reads nil, message, ENODEV once the cgroup is removed #root", function()
    local why
    box, why = test_cgroup()
    if not box then pending(why) return end
    if not H.read(box.path .. "/memory.pressure") then
      pending("no memory.pressure in a cgroup2 cgroup here (PSI off for cgroups)")
      return
    end
    local child = assert(box.cg:mkdir("trig"))
    local trig, err, errno = child:pressure_trigger { resource = "memory", stall = 0.1, window = 2 }
    if not trig and errno == E.EPERM then pending(err) return end
    assert(trig, err)
    assert.equal("p", trig:events())
    assert.is_false(trig:read())
    child:close()
    assert(os.execute("rmdir " .. H.shell_quote(box.path .. "/trig")))
    -- Broken: every poll reports it (POLLERR), and read says so.
    local ready = assert(takana.poll({ trig }, 0))
    assert.equal(trig, ready[1])
    local r = table.pack(trig:read())
    assert.equal(3, r.n)
    assert.is_nil(r[1])
    assert.equal(E.ENODEV, r[3])
    assert.equal("pressure trigger: broken (its file is gone: the cgroup was removed): "
      .. takana.strerror(E.ENODEV), r[2])
    trig:close()
  end)

  it("raises on bad arguments before opening anything", function()
    local ok_t = { resource = "memory", stall = 0.1, window = 2 }
    local function with(k, v)
      local t = {}
      for a, b in pairs(ok_t) do t[a] = b end
      t[k] = v
      return t
    end
    local bad = {
      { "no table", nil }, { "a string", "memory" }, { "a number", 2 },
      { "resource nil", with("resource", nil) }, { "resource 1", with("resource", 1) },
      { "resource ../x", with("resource", "../x") }, { "resource NUL", with("resource", "memory\0") },
      { "resource NUL x", with("resource", "mem\0ory") }, { "resource MEMORY", with("resource", "MEMORY") },
      { "kind half", with("kind", "half") }, { "kind 1", with("kind", 1) }, { "kind NUL", with("kind", "some\0") },
      { "stall 0", with("stall", 0) }, { "stall 2", with("stall", 2) }, { "stall NaN", with("stall", 0 / 0) },
      { "stall -0.1", with("stall", -0.1) }, { "stall inf", with("stall", math.huge) },
      { "stall string", with("stall", "0.1") }, { "stall nil", with("stall", nil) },
      { "window 0", with("window", 0) }, { "window 1e9", with("window", 1e9) },
      { "window NaN", with("window", 0 / 0) }, { "window 0.4", with("window", 0.4) },
      { "window 11", with("window", 11) }, { "window -2", with("window", -2) },
      { "window huge int", with("window", math.maxinteger) }, { "window string", with("window", "2") },
      { "unknown key", with("threshold", 1) }, { "key with NUL", with("stall\0", 0.1) }, { "array part", with(1, "memory") },
    }
    for _, case in ipairs(bad) do
      local ok, err = pcall(takana.pressure_trigger, case[2])
      assert.is_false(ok, case[1])
      -- The name is whichever table pairs() finds it in first.
      assert.matches("^bad argument #1 to '[%w.]*pressure_trigger'", err, 1, false, case[1])
    end
    local ok, err = pcall(takana.pressure_trigger, ok_t, 1)
    assert.is_false(ok)
    assert.matches("bad argument #2", err, 1, true)
    local root = assert(takana.cgroup("/"))
    ok, err = pcall(root.pressure_trigger, root, with("window", 0))
    assert.is_false(ok)
    assert.matches("bad argument #2", err, 1, true)
    ok = pcall(root.pressure_trigger, root)
    assert.is_false(ok)
    root:close()
  end)
end)

describe("a memory PSI trigger (pure cgroup2, root) #guest #root", function()
  local box
  after_each(function()
    release(box)
    box = nil
  end)

  it("fires on a bounded memory hog in a cgroup under memory.high", function()
    if not H.is_root() then pending("needs root to create a cgroup and set memory.high") return end
    if H.no_spawn then pending(H.no_spawn) return end
    local mnt = H.cgroup2_mount()
    if not mnt then pending("no cgroup2 hierarchy is mounted") return end
    local enabled = H.read(mnt .. "/cgroup.subtree_control") or ""
    if not (" " .. enabled:gsub("%s+", " ") .. " "):find(" memory ", 1, true) then
      pending(("the memory controller is not enabled on cgroup2 here (%s/cgroup.subtree_control: %q): "
        .. "a hybrid host keeps it on v1"):format(mnt, enabled:gsub("%s+$", "")))
      return
    end
    local why
    box, why = test_cgroup()
    if not box then pending(why) return end
    assert(box.cg:enable { "memory" })
    local unit = assert(box.cg:mkdir("hog"))
    box.unit = unit
    if not unit:get("memory.pressure") then pending("no memory.pressure in the cgroup (PSI off)") return end
    assert.equal(16 * 1024 * 1024, unit:set("memory.high", 16 * 1024 * 1024))
    local trig = assert(unit:pressure_trigger { resource = "memory", kind = "some", stall = 0.05, window = 2 })
    -- 200 MiB touched against a 16 MiB memory.high: reclaim and throttling
    -- stall it. The fixture dies with this process and after 30 s.
    local hog = assert(takana.spawn { H.fixture_path, "--touch-mb", "200", "--life", "30", cgroup = unit,
      stdout = "null" })
    local fired = false
    for _ = 1, 300 do
      local ready = assert(takana.poll({ trig, hog }, 0.1))
      for _, o in ipairs(ready) do
        if o == trig then fired = true end
      end
      if fired or #ready > 0 and ready[1] == hog then break end
    end
    hog:signal("KILL")
    hog:wait()
    local p = assert(unit:pressure("memory"))
    trig:close()
    unit:close()
    assert.is_true(fired, "the trigger never fired; memory.pressure some.total_us = " .. p.some.total_us)
    assert.truthy(p.some.total_us > 0)
  end)
end)
