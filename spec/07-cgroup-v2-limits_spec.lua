-- cgroup limits, for real, on pure cgroup2 (issue 11): each limit is
-- written where it takes effect and seen enforced by the kernel. Runs as
-- root on a host whose controllers are on cgroup2 and enabled in the
-- root's cgroup.subtree_control (Debian's 6.1 and 6.12 guests of make
-- test-kernels); elsewhere each spec pends with the reason, as on a hybrid
-- host, where spec/03-cgroup_spec.lua's seed §4 regression runs instead.
-- Every cgroup here lives under a takana-test-* directory and every
-- process in it was started here.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local E = require("takana").errno
local ENOENT = E.ENOENT
local MiB = 1024 * 1024

local function has_word(list, w)
  return (" " .. (list or ""):gsub("%s+", " ") .. " "):find(" " .. w .. " ", 1, true) ~= nil
end

-- Why this host cannot run a spec that needs the controllers ctrls on
-- cgroup2, or nil when it can.
local function why_not(ctrls)
  if not H.is_root() then return "needs root to create cgroups and apply limits" end
  if H.no_spawn then return H.no_spawn end
  local mnt = H.cgroup2_mount()
  if not mnt then return "no cgroup2 hierarchy is mounted" end
  local hier = takana.cgroup.proc_cgroups()
  local v1 = (takana.cgroup.mounts() or { v1 = {} }).v1
  local available = H.read(mnt .. "/cgroup.controllers")
  local enabled = H.read(mnt .. "/cgroup.subtree_control")
  for _, c in ipairs(ctrls) do
    local legacy = c == "io" and "blkio" or c
    if hier[legacy] and hier[legacy].hierarchy ~= 0 then
      return ("%s controller is on cgroup v1 here (%s)"):format(c, v1[legacy] or "a v1 hierarchy")
    end
    if not has_word(available, c) then
      return ("%s controller is not in the cgroup2 root's cgroup.controllers (%s)"):format(c, mnt)
    end
    if not has_word(enabled, c) then
      return ("%s is not enabled in the cgroup2 root's cgroup.subtree_control: the host's init did not "
        .. "delegate it (in a test guest: echo +%s > %s/cgroup.subtree_control)"):format(c, c, mnt)
    end
  end
  return nil
end

-- A takana-test-* sandbox with ctrls enabled for its children, and a
-- child "unit" in it; nil and the reason when the host cannot.
local function sandbox(ctrls, enable)
  local why = why_not(ctrls)
  if why then return nil, why end
  local path, name = H.test_cgroup_path()
  local cg = assert(takana.cgroup(name))
  local box = { path = path, name = name, cg = cg }
  if enable ~= false then
    local got = table.concat(assert(cg:enable(ctrls)), " ")
    for _, c in ipairs(ctrls) do assert(has_word(got, c), c .. " not enabled: " .. got) end
  end
  box.unit = assert(cg:mkdir("unit"))
  return box
end

local function release(box)
  if not box then return end
  if box.unit then box.unit:close() end
  box.cg:close()
  H.cgroup_cleanup(box.path)
end

describe("cgroup v2 limits (pure cgroup2, root) #guest #root", function()
  local box
  after_each(function()
    release(box)
    box = nil
  end)

  it("enable writes the parent's cgroup.subtree_control, verifies it, and names a missing controller #root", function()
    local ctrls = { "memory", "pids", "cpu", "io" }
    local why
    box, why = sandbox(ctrls, false)
    if not box then pending(why) return end
    local got = assert(box.cg:enable(ctrls))
    for _, c in ipairs(ctrls) do
      assert.truthy(has_word(table.concat(got, " "), c), c)
      assert.truthy(has_word(H.read(box.path .. "/cgroup.subtree_control"), c), c)
      -- The child has the controller's files now.
      assert.truthy(has_word(box.unit:get("cgroup.controllers"), c), c)
    end
    assert.is_string(box.unit:get("memory.max"))
    assert.is_string(box.unit:get("pids.max"))
    assert.is_string(box.unit:get("cpu.max"))
    -- unit's own children: memory is offered to unit, but a grandchild
    -- only gets what unit enables.
    local leaf = assert(box.unit:mkdir("leaf"))
    local ok, err, errno = leaf:enable { "memory" }
    assert.is_nil(ok)
    assert.equal(("enable memory: memory is not in /%s/unit/leaf's cgroup.controllers: not enabled in the "
      .. "parent's cgroup.subtree_control (/%s/unit): enable it there first (takana.cgroup(\"/%s/unit\"):"
      .. "enable{\"memory\"})"):format(box.name, box.name, box.name), err)
    assert.equal(ENOENT, errno)
    ok, err = box.cg:enable { "memory", "nosuchcontroller" }
    assert.is_nil(ok)
    assert.equal("enable nosuchcontroller: nosuchcontroller controller is not compiled into this kernel", err)
    -- disable reads back too.
    assert.same({ "cpu", "io", "memory" }, (function()
      local t = assert(box.cg:disable { "pids" })
      table.sort(t)
      return t
    end)())
    leaf:close()
  end)

  it("set memory.max where the parent has not enabled memory: nil, and the message names cgroup.subtree_control #root",
    function()
      local why
      box, why = sandbox({ "memory" }, false)
      if not box then pending(why) return end
      local ok, err, errno = box.unit:set("memory.max", 64 * MiB)
      assert.is_nil(ok)
      assert.equal(("set memory.max: memory is not enabled in the parent's cgroup.subtree_control (/%s): enable "
        .. "it there first (takana.cgroup(\"/%s\"):enable{\"memory\"})"):format(box.name, box.name), err)
      assert.equal(ENOENT, errno)
      assert.equal(("memory is not enabled in the parent's cgroup.subtree_control (/%s): enable it there first "
        .. "(takana.cgroup(\"/%s\"):enable{\"memory\"})"):format(box.name, box.name), box.unit:why("memory"))
    end)

  it("memory.max: applied, read back, and a child touching twice the limit is OOM-killed #root", function()
    local why
    box, why = sandbox { "memory" }
    if not box then pending(why) return end
    local unit = box.unit
    assert.equal(32 * MiB, unit:set("memory.max", 32 * MiB))
    assert.equal(tostring(32 * MiB) .. "\n", unit:get("memory.max"))
    -- Without this the child would swap instead of dying, where swap is on.
    if unit:get("memory.swap.max") then assert.equal(0, unit:set("memory.swap.max", 0)) end
    assert.equal(0, unit:stat().memory.events.oom_kill)

    -- Usage shows while a process holds memory in the unit.
    local holder = assert(takana.spawn { H.fixture_path, "--touch-mb", "8", "--life", "30", cgroup = unit,
      stdout = "pipe" })
    assert.matches("^ready", holder.stdout:read("l"))
    local mem = unit:stat().memory
    assert.equal(32 * MiB, mem.max)
    assert.truthy(mem.current >= 8 * MiB and mem.current <= 32 * MiB, tostring(mem.current))
    holder:signal("KILL")
    holder:wait()

    local hog = assert(takana.spawn { H.fixture_path, "--touch-mb", "64", "--life", "30", cgroup = unit,
      stdout = "null" })
    assert.same({ signaled = true, signal = 9, core = false }, hog:wait())
    mem = unit:stat().memory
    assert.equal(1, mem.events.oom_kill)
    assert.truthy(mem.events.max > 0)
    assert.equal(32 * MiB, mem.max)
    if mem.peak then assert.truthy(mem.peak > 8 * MiB and mem.peak <= 32 * MiB, tostring(mem.peak)) end
  end)

  for _, backend in ipairs { "bpf", "connector" } do
    it("an OOM kill's exit event from the " .. backend .. " backend says SIGKILL"
        .. (backend == "bpf" and " and carries the cgroup id" or ""), function()
      local why
      box, why = sandbox { "memory" }
      if not box then pending(why) return end
      local ev, everr = takana.events { "exit", backend = backend }
      if not ev then pending(everr) return end
      local unit = box.unit
      assert.equal(32 * MiB, unit:set("memory.max", 32 * MiB))
      if unit:get("memory.swap.max") then unit:set("memory.swap.max", 0) end
      local hog = assert(takana.spawn { H.fixture_path, "--touch-mb", "64", "--life", "30", cgroup = unit,
        stdout = "null" })
      assert.same({ signaled = true, signal = 9, core = false }, hog:wait())
      local exit
      H.poll_until({ ev }, function()
        for e in ev:read() do
          if e.type == "exit" and e.pid == hog.pid then exit = e end
        end
        return exit
      end)
      ev:close()
      assert.is_table(exit)
      assert.equal(9, exit.signal)
      assert.is_nil(exit.code)
      if backend == "bpf" then assert.equal(core.cgroup_id(unit), exit.cgroup_id) end
      assert.equal(1, unit:stat().memory.events.oom_kill)
    end)
  end

  it("pids.max = 5: the sixth process's fork fails with EAGAIN and pids.events counts it #root", function()
    local why
    box, why = sandbox { "pids" }
    if not box then pending(why) return end
    local unit = box.unit
    assert.equal(5, unit:set("pids.max", 5))
    assert.equal(0, unit:stat().pids.current)
    -- The fixture and its herd: the fixture is process 1, its fifth fork
    -- would be process 6.
    local fx = assert(takana.spawn { H.fixture_path, "--herd", "6", "--life", "30", cgroup = unit,
      stdout = "null", stderr = "pipe" })
    local err = fx.stderr:read("a")
    assert.same({ exited = true, code = 1 }, fx:wait())
    assert.equal("fixture: fork: Resource temporarily unavailable\n", err)
    local events = assert(unit:get("pids.events"))
    assert.equal("1", events:match("max (%d+)"))
    if unit:get("pids.peak") then assert.equal(5, unit:stat().pids.peak) end
  end)

  it("cpu.max \"20000 100000\": a burner is throttled to about 20% of a CPU #root", function()
    local why
    box, why = sandbox { "cpu" }
    if not box then pending(why) return end
    local unit = box.unit
    assert.same({ 20000, 100000 }, unit:set("cpu.max", { 20000, 100000 }))
    assert.equal("20000 100000\n", unit:get("cpu.max"))
    local burner = assert(takana.spawn { H.fixture_path, "--spin", "--life", "30", cgroup = unit, stdout = "pipe" })
    assert.matches("^ready", burner.stdout:read("l"))
    local u0, t0 = unit:stat().cpu.usage_ns, core.monotime()
    H.sleep(2)
    local st, t1 = unit:stat(), core.monotime()
    burner:signal("KILL")
    burner:wait()
    local share = (st.cpu.usage_ns - u0) / ((t1 - t0) * 1e9)
    assert.truthy(st.cpu.nr_throttled > 0, "nr_throttled " .. tostring(st.cpu.nr_throttled))
    assert.truthy(st.cpu.throttled_ns > 0)
    -- A behaviour check, not a benchmark: unthrottled it would be ~100%.
    -- Tolerance 10-35% of one CPU, for slow (TCG) guests and period edges.
    assert.truthy(share >= 0.10 and share <= 0.35, ("usage %.1f%% of a CPU"):format(share * 100))
  end)

  it("memory.high, cpu.weight, io.weight and cpu.max round-trip; rounded values come back rounded #root", function()
    local why
    box, why = sandbox { "memory", "cpu", "io" }
    if not box then pending(why) return end
    local unit = box.unit
    local page = tonumber((select(2, H.run("getconf PAGESIZE")))) or 4096
    local odd = 50 * MiB + 100
    local want = odd // page * page
    assert.equal(want, unit:set("memory.high", odd))
    assert.equal(tostring(want) .. "\n", unit:get("memory.high"))
    assert.equal("max", unit:set("memory.high", "max"))
    assert.equal(250, unit:set("cpu.weight", 250))
    assert.equal("250\n", unit:get("cpu.weight"))
    assert.same({ 50000, 100000 }, unit:set("cpu.max", 50000))
    assert.same({ "max", 100000 }, unit:set("cpu.max", "max"))
    assert.same({ ["cpu.weight"] = 100, ["memory.max"] = 64 * MiB }, unit:set { ["cpu.weight"] = 100,
      ["memory.max"] = 64 * MiB })
    if not unit:get("io.weight") then
      pending("io.weight is absent: this kernel has no io cost model (CONFIG_BLK_CGROUP_IOCOST)")
      return
    end
    assert.equal(300, unit:set("io.weight", 300))
    assert.matches("^default 300\n", unit:get("io.weight"))
  end)
end)
