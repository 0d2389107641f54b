-- The snapshot's cmdline field: each process's arguments, read after the
-- walk (the argv BPF program after a BPF walk, /proc after a /proc one),
-- exactly as takana.process(pid):cmdline() reads them from /proc.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local backends = H.snapshot_backends()

local function kernel_at_least(major, minor)
  local a, b = (H.read("/proc/sys/kernel/osrelease") or ""):match("^(%d+)%.(%d+)")
  a, b = tonumber(a), tonumber(b)
  return a ~= nil and (a > major or (a == major and b >= minor))
end

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

    it(name .. " agrees with process:cmdline() for every process, long and rewritten ones too", function()
      local snap = cmdline_snapshot(name)
      assert.same(proc_argv(fx_long.pid), snap:get(fx_long.pid).cmdline)
      assert.equal(LONG, snap:get(fx_long.pid).cmdline[4])
      -- An argument area whose last NUL was overwritten is a title
      -- (setproctitle): /proc shows one string, up to the first NUL.
      local odd = snap:get(fx_odd.pid).cmdline
      assert.same(proc_argv(fx_odd.pid), odd)
      assert.same({ H.fixture_path }, odd)
      local compared = 0
      for p in snap:each() do
        local q = takana.process(p.pid)
        if q then    -- a process of the host's may exit meanwhile
          local argv = q:cmdline()
          q:close()
          if argv then
            assert.same(argv, p.cmdline, "pid " .. p.pid)
            compared = compared + 1
          end
        end
      end
      assert.is_true(compared >= 4)
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
      assert.is_nil(snap:get(fx.pid).cmdline)
      assert.is_nil(snap.cmdline_from)
      local six = assert(takana.snapshot { backend = name, fields = { "pid", "ppid" } })
      assert.is_nil(six:get(fx.pid).cmdline)
    end)

    it(name .. " says who read the arguments, and why not BPF", function()
      local snap = cmdline_snapshot(name)
      if name == "proc" then
        assert.equal("proc", snap.cmdline_from)
        return
      end
      local info = core.argv_info()
      if kernel_at_least(6, 4) then
        -- root with BPF (this tier loaded) on a kernel with bpf_iter_num
        assert.equal("loaded", info.state, tostring(info.error))
        assert.equal("bpf", snap.cmdline_from)
      elseif info.state == "failed" then
        assert.equal("proc", snap.cmdline_from)
        assert.matches("argv program", info.error)
      end
    end)
  end

  it("reads the same on every backend, in one run", function()
    local ref
    for _, name in ipairs(backends) do
      local argv = cmdline_snapshot(name):get(fx.pid).cmdline
      ref = ref or argv
      assert.same(ref, argv, name)
    end
  end)

  it("raises for a misspelt field, and a record without it reads nil", function()
    assert.has_error(function() takana.snapshot { fields = { "pid", "cmdlines" } } end)
    local snap = core.snapshot_from_stat { assert(H.read("/proc/self/stat")) }
    for p in snap:each() do assert.is_nil(p.cmdline) end
  end)
end)
