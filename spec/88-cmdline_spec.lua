-- The snapshot's cmdline field: each process's arguments, read after the
-- walk (the argv BPF program after a BPF walk, /proc after a /proc one),
-- exactly as takana.process(pid):cmdline() reads them from /proc.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local backends = H.snapshot_backends()

local function cmdline_snapshot(name)
  return assert(takana.snapshot { backend = name, fields = { "pid", "comm", "kthread", "cmdline" } })
end

-- What /proc says, through the process object.
local function proc_argv(pid)
  local p = assert(takana.process(pid))
  local argv = assert(p:cmdline())
  p:close()
  return argv
end

local LONG = string.rep("L", 5000)   -- past the argv program's 4,096 bytes

describe("snapshot cmdline field", function()
  local fx, fx_long, fx_odd
  setup(function()
    fx = H.fixture { "--", "two words", "", "close)paren", "new\nline", "last" }
    fx_long = H.fixture { "--", "x", LONG }
    fx_odd = H.fixture { "--argv-unterminated", "--", "odd" }
  end)
  teardown(function()
    for _, f in ipairs { fx, fx_long, fx_odd } do f:kill() end
  end)

  for _, name in ipairs(backends) do
    it(name .. " gives each argument exactly, empty ones and odd bytes kept", function()
      local snap = cmdline_snapshot(name)
      assert.same({ H.fixture_path, "--", "two words", "", "close)paren", "new\nline", "last" },
                  snap:get(fx.pid).cmdline)
      -- the view and the table agree
      for p in snap:each() do
        if p.pid == fx.pid then assert.same(snap:get(fx.pid).cmdline, p.cmdline) end
      end
    end)

    it(name .. " agrees with process:cmdline(), long and rewritten ones too", function()
      local snap = cmdline_snapshot(name)
      assert.same(proc_argv(fx_long.pid), snap:get(fx_long.pid).cmdline)
      assert.equal(LONG, snap:get(fx_long.pid).cmdline[4])
      -- An argument area whose last NUL was overwritten is a title
      -- (setproctitle): /proc shows one string, up to the first NUL.
      local odd = snap:get(fx_odd.pid).cmdline
      assert.same(proc_argv(fx_odd.pid), odd)
      assert.same({ H.fixture_path }, odd)
      -- processes that do not exec meanwhile: the fixtures, this one, init
      for _, pid in ipairs { fx.pid, fx_long.pid, fx_odd.pid, H.pid, 1 } do
        assert.same(proc_argv(pid), snap:get(pid).cmdline, "pid " .. pid)
      end
    end)

    it(name .. " counts who read each process's arguments", function()
      local snap = cmdline_snapshot(name)
      local read = 0
      for p in snap:each() do
        if p.cmdline then read = read + 1 end
      end
      assert.equal(read, snap.cmdline_by_bpf + snap.cmdline_by_proc)
      if snap.cmdline_from == "bpf" then
        -- /proc read at least the long one and the title; the program the
        -- rest but what a host has of those (JVMs, browsers)
        assert.is_true(snap.cmdline_by_proc >= 2, snap.cmdline_by_proc)
        assert.is_true(snap.cmdline_by_bpf >= 3, snap.cmdline_by_bpf)
      else
        assert.equal(0, snap.cmdline_by_bpf)
      end
      local plain = assert(takana.snapshot { backend = name, fields = { "pid" } })
      assert.is_nil(plain.cmdline_by_bpf)
    end)

    it(name .. " never turns a shortage of descriptors into a nil cmdline", function()
      local me = assert(takana.process(H.pid))
      local soft, hard = H.nofile()
      local held = {}
      local limit = H.count_fds() + 16
      assert(me:setlimit("nofile", limit, hard))
      -- every descriptor taken: what /proc reads must come from its caches
      -- (until open fails: a descriptor held above the limit, such as the
      -- cgroup path cache's inotify one, leaves more than 16 free below it)
      for _ = 1, limit do
        local f = io.open("/dev/null")
        if not f then break end
        held[#held + 1] = f
      end
      local spare = io.open("/dev/null")
      local ok, snap, err = pcall(takana.snapshot, { backend = name, fields = { "pid", "cmdline" } })
      for _, f in ipairs(held) do f:close() end
      assert(me:setlimit("nofile", soft, hard))
      me:close()
      assert.is_nil(spare)
      assert.is_true(ok, snap)
      if snap then
        for _, f in ipairs { fx, fx_long, fx_odd } do
          assert.same(proc_argv(f.pid), snap:get(f.pid).cmdline, "pid " .. f.pid)
        end
      else
        assert.matches("open files", err)
      end
    end)

    it(name .. " gives a kernel thread and a zombie no arguments", function()
      local z = H.fixture { "--zombie" }
      local zpid = z.extra[1]
      H.wait_state(zpid, "Z")
      local snap = cmdline_snapshot(name)
      z:kill()
      assert.same({}, snap:get(zpid).cmdline)
      local kthreads = 0
      for p in snap:each() do
        if p.kthread then
          assert.same({}, p.cmdline, p.comm)
          kthreads = kthreads + 1
        end
      end
      -- kernel threads are listed where the walk sees them (not in a
      -- container's /proc, nor under a foreign pid namespace)
      if name ~= "proc" then assert.is_true(kthreads > 0) end
    end)

    it(name .. " leaves cmdline out unless it is named", function()
      local snap = assert(takana.snapshot { backend = name })
      assert.has_error(function() return snap:get(fx.pid).cmdline end)
      assert.is_nil(snap.cmdline_from)
      local six = assert(takana.snapshot { backend = name, fields = { "pid", "ppid" } })
      assert.has_error(function() return six:get(fx.pid).cmdline end)
    end)

    it(name .. " says who read the arguments, and why not BPF", function()
      local snap = cmdline_snapshot(name)
      if name == "proc" then
        assert.equal("proc", snap.cmdline_from)
        return
      end
      local info = core.argv_info()
      if H.bpf_tier("kfunc") then
        -- the kfunc tier calls generic kfuncs from a syscall program too
        -- (Linux >= 6.10): where it loads, the argv program must
        assert.equal("loaded", info.state, tostring(info.error))
        assert.equal("bpf", snap.cmdline_from)
      else
        assert.equal("failed", info.state)
        assert.equal("proc", snap.cmdline_from)
        assert.is_string(info.error)
      end
    end)
  end

  -- /proc shifts start times by a time namespace's boottime offset; BPF
  -- reads the kernel's. The identity check of what BPF hands to /proc
  -- (here the long arguments) must shift too, or it reads nil.
  it("reads the arguments BPF hands to /proc from inside a time namespace #root #bpf", function()
    local name = backends[1]
    if name == "proc" then return pending("no BPF tier here") end
    if not H.is_root() then return pending("unshare -T needs root") end
    local words = {}
    for i, a in ipairs(H.lua_argv) do words[i] = H.shell_quote(a) end
    local code, out = H.run("unshare -T --boottime 100000 --fork " .. table.concat(words, " ") .. " -e " ..
      H.shell_quote("package.path='./lua/?.lua;./lua/?/init.lua;'..package.path " ..
        "package.cpath='./?.so;'..package.cpath local t=require'takana' " ..
        "local s=assert(t.snapshot{backend='" .. name .. "',fields={'pid','cmdline'}}) " ..
        "local a=s:get(" .. fx_long.pid .. ").cmdline print(a and #a, a and #a[4])"))
    if code ~= 0 and out:find("unshare failed", 1, true) then return pending("no time namespaces: " .. out) end
    assert.equal(0, code, out)
    assert.equal("4\t5000\n", out)
  end)

  it("reads the same on every backend, in one run", function()
    local ref
    for _, name in ipairs(backends) do
      local argv = cmdline_snapshot(name):get(fx.pid).cmdline
      ref = ref or argv
      assert.same(ref, argv, name)
    end
  end)

  it("raises for a misspelt field, and on reading it from a record without it", function()
    assert.has_error(function() takana.snapshot { fields = { "pid", "cmdlines" } } end)
    local snap = core.snapshot_from_stat { assert(H.read("/proc/self/stat")) }
    for p in snap:each() do assert.has_error(function() return p.cmdline end) end
  end)
end)
