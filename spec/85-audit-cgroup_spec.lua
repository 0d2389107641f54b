-- Regression specs for the cgroup items of the adversarial audit (issue 12:
-- items 1, 4, 6, 16 and the cgroup parts of 19). Each one failed before its
-- fix. Nothing here signals, freezes or moves a process the spec did not
-- start: where a real call on the host would be unsafe (the root cgroup,
-- the cgroup holding busted itself), core.pidfd and core.cgroup_write are
-- replaced by recorders, as the audit's dry run did.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local E = require("takana").errno
local ESRCH, ENOENT, EPERM, EBUSY, EMFILE, EDEADLK = E.ESRCH, E.ENOENT, E.EPERM, E.EBUSY, E.EMFILE, E.EDEADLK

-- A Lua child loading this tree's takana, with its stdout piped.
local function lua_child(script, opts)
  local argv = { "env", "LUA_PATH=./lua/?.lua;./lua/?/init.lua;;", "LUA_CPATH=./?.so;;" }
  for _, a in ipairs(H.lua_argv) do argv[#argv + 1] = a end
  argv[#argv + 1] = "-e"
  argv[#argv + 1] = script
  for k, v in pairs(opts or {}) do argv[k] = v end
  argv.stdout = argv.stdout or "pipe"
  return assert(takana.spawn(argv))
end

-- Runs fn with core.pidfd and core.cgroup_write recording instead of
-- acting on anything but the test's own cgroups; returns what was recorded.
local function dry_run(fn)
  local rec = { signals = {}, writes = {} }
  local real_pidfd, real_write, real_signal = core.pidfd, core.cgroup_write, core.cgroup_signal
  -- cg:signal and the kill fallback signal from C: recorded too.
  core.cgroup_signal = function(cg, sig)
    rec.signals[#rec.signals + 1] = { cg.path, sig }
    return { signalled = 0, rounds = 1, listed = 0 }
  end
  core.pidfd = function(pid)
    return { signal = function(_, sig) rec.signals[#rec.signals + 1] = { pid, sig } return true end,
             close = function() end }
  end
  core.cgroup_write = function(cg, file, value)
    rec.writes[#rec.writes + 1] = { cg.path, file, value }
    return nil, file .. ": No such file or directory (recorded, not written)", ENOENT
  end
  -- Before the fix, writes went through a handle method: record those too,
  -- so that this spec is safe to run against an old build.
  local methods = core.cgroup_methods
  local real_method = methods and rawget(methods, "_write")
  if real_method then methods._write = function(...) return core.cgroup_write(...) end end
  local ok, err = pcall(fn)
  core.pidfd, core.cgroup_write, core.cgroup_signal = real_pidfd, real_write, real_signal
  if real_method then methods._write = real_method end
  assert(ok, err)
  return rec
end

local function sandbox()
  local path, name = H.test_cgroup_path()
  if not path then return nil end
  return path, name, assert(takana.cgroup(name))
end

describe("audit: cgroup", function()
  describe("item 1: kill and freeze never hit the root or the caller unasked", function()
    it("refuses kill and freeze on the cgroup2 root; a dry run signals and writes nothing", function()
      local root, err = takana.cgroup("")
      if not root then pending("no cgroup2 hierarchy here: " .. err) return end
      local results = {}
      local rec = dry_run(function()
        results.kill = { root:kill() }
        results.kill_root = { root:kill { root = true } }
        results.freeze = { root:freeze() }
      end)
      assert.same({}, rec.signals)
      assert.same({}, rec.writes)
      assert.same({ nil, "kill /: refusing to kill every process under the cgroup2 root (pid 1 and this "
        .. "process among them); pass {root=true, include_self=true} if that is really meant", EPERM }, results.kill)
      assert.same({ nil, ("kill /: this process (pid %d) is in it and would be killed too; move it out first, "
        .. "or pass {include_self=true}"):format(H.pid), EPERM }, results.kill_root)
      assert.same({ nil, "freeze /: refusing to freeze the root cgroup (it holds every process, this one "
        .. "included); freeze a child cgroup", EPERM }, results.freeze)
      assert.has_error(function() root:kill { everything = true } end)
      assert.has_error(function() root:kill { root = 1 } end)
      root:close()
    end)

    it("refuses kill and freeze on the caller's own cgroup (dry run)", function()
      local mine, err = takana.cgroup.self()
      if not mine then pending("no cgroup2 hierarchy here: " .. err) return end
      local results = {}
      local rec = dry_run(function()
        results.kill = { mine:kill() }
        results.freeze = { mine:freeze() }
      end)
      assert.same({}, rec.signals)
      assert.same({}, rec.writes)
      assert.is_nil(results.kill[1])
      assert.equal(EPERM, results.kill[3])
      assert.is_nil(results.freeze[1])
      assert.truthy(results.freeze[3] == EPERM or results.freeze[3] == EDEADLK)
      mine:close()
    end)

    describe("in a test cgroup", function()
      local path, name, cg
      before_each(function() path, name, cg = sandbox() end)
      after_each(function()
        if cg then cg:close() end
        if path then H.cgroup_cleanup(path) end
        cg = nil
      end)

      it("a process inside refuses to kill or freeze its own cgroup, then kills it with include_self #root", function()
        if not cg then pending("needs root to create a cgroup") return end
        if H.no_spawn then pending(H.no_spawn) return end
        local unit = assert(cg:mkdir("unit"))
        local sib = assert(takana.spawn { H.fixture_path, "--herd", "2", "--life", "30", cgroup = unit, stdout = "pipe" })
        assert.matches("^ready", sib.stdout:read("l"))
        local script = [[
          local takana = require "takana"
          local cg = assert(takana.cgroup.self())
          print(cg.path)
          print(select(3, cg:kill()), (select(2, cg:kill())))
          print(select(3, cg:freeze()))
          io.stdout:flush()
          cg:kill { include_self = true }
          os.execute("sleep 5")
          print("survived")
        ]]
        local child = lua_child(script, { cgroup = unit })
        local out = child.stdout:read("a")
        local status = child:wait()
        local lines = {}
        for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
        assert.equal("/" .. name .. "/unit", lines[1])
        assert.equal(("%d\tkill /%s/unit: this process (pid %d) is in it and would be killed too; move it out "
          .. "first, or pass {include_self=true}"):format(EPERM, name, child.pid), lines[2])
        assert.equal(tostring(EDEADLK), lines[3])
        assert.is_nil(lines[4])
        assert.same({ signaled = true, signal = 9, core = false }, status)
        assert.same({ signaled = true, signal = 9, core = false }, sib:wait())
        unit:close()
      end)

      it("kills a unit of fixtures (cgroup.kill) and the unit can be removed #root", function()
        if not cg then pending("needs root to create a cgroup") return end
        if H.no_spawn then pending(H.no_spawn) return end
        local unit = assert(cg:mkdir("unit"))
        local deep = assert(unit:mkdir("deep"))
        local a = assert(takana.spawn { H.fixture_path, "--herd", "3", "--life", "30", cgroup = unit, stdout = "pipe" })
        local b = assert(takana.spawn { H.fixture_path, "--herd", "2", "--life", "30", cgroup = deep, stdout = "pipe" })
        assert.matches("^ready", a.stdout:read("l"))
        assert.matches("^ready", b.stdout:read("l"))
        assert.is_true(unit:kill())
        assert.same({ signaled = true, signal = 9, core = false }, a:wait())
        assert.same({ signaled = true, signal = 9, core = false }, b:wait())
        H.poll_until({ unit }, function() return not unit:stat().events.populated end, 100)
        assert.is_true(deep:remove())
        assert.is_true(unit:remove())
      end)

      it("without cgroup.kill (as before 5.14), the bounded fallback kills the subtree, children too #root", function()
        if not cg then pending("needs root to create a cgroup") return end
        if H.no_spawn then pending(H.no_spawn) return end
        local unit = assert(cg:mkdir("unit"))
        local deep = assert(unit:mkdir("deep"))
        local a = assert(takana.spawn { H.fixture_path, "--herd", "3", "--life", "30", cgroup = unit, stdout = "pipe" })
        local b = assert(takana.spawn { H.fixture_path, "--herd", "2", "--life", "30", cgroup = deep, stdout = "pipe" })
        assert.matches("^ready", a.stdout:read("l"))
        assert.matches("^ready", b.stdout:read("l"))
        -- The one simulated thing: cgroup.kill is absent. Freeze, the
        -- signals and the kernel's accounting are real.
        local real_write, kill_writes = core.cgroup_write, 0
        core.cgroup_write = function(h, file, value)
          if file == "cgroup.kill" then
            kill_writes = kill_writes + 1
            return nil, "cgroup.kill: No such file or directory", ENOENT
          end
          return real_write(h, file, value)
        end
        local ok, r1, r2, r3 = pcall(unit.kill, unit)
        core.cgroup_write = real_write
        assert(ok, r1)
        assert.same({ true }, { r1, r2, r3 })
        assert.equal(1, kill_writes)
        assert.same({ signaled = true, signal = 9, core = false }, a:wait())
        assert.same({ signaled = true, signal = 9, core = false }, b:wait())
        assert.is_false(unit:stat().events.populated)
        assert.is_false(unit:stat().events.frozen)
        assert.is_true(deep:remove())
        assert.is_true(unit:remove())
      end)
    end)
  end)

  describe("item 4: attach and cgroup.of act through the pidfd", function()
    local path, name, cg
    before_each(function() path, name, cg = sandbox() end)
    after_each(function()
      if cg then cg:close() end
      if path then H.cgroup_cleanup(path) end
      cg = nil
    end)

    it("a reaped child's pidfd: ESRCH, and the process that reused its pid is not moved #root", function()
      if not cg then pending("needs root to create a cgroup and set ns_last_pid") return end
      if H.no_spawn then pending(H.no_spawn) return end
      local unit = assert(cg:mkdir("unit"))
      local elsewhere = assert(cg:mkdir("elsewhere"))
      -- Stage the reuse through ns_last_pid; other processes forking on
      -- the host may take the pid first, so try a few times.
      local child, stranger
      for _ = 1, 10 do
        child = assert(takana.spawn { "true" })
        child:wait()
        local f = io.open("/proc/sys/kernel/ns_last_pid", "w")
        if not f then pending("cannot write /proc/sys/kernel/ns_last_pid") return end
        f:write(tostring(child.pid - 1))
        f:close()
        stranger = assert(takana.spawn { "sleep", "30", cgroup = elsewhere })
        if stranger.pid == child.pid then break end
        stranger:signal("KILL")
        stranger:wait()
        stranger = nil
      end
      if not stranger then pending("could not get the pid reused (busy host)") return end
      local ok, err, errno = unit:attach(child)
      assert.is_nil(ok)
      assert.equal(("attach %d: process %d has exited and was reaped (its pidfd refers to no process; the pid "
        .. "may belong to another process now)"):format(child.pid, child.pid), err)
      assert.equal(ESRCH, errno)
      assert.same({}, unit:procs())
      assert.same({ stranger.pid }, elsewhere:procs())
      local of, oerr, oerrno = takana.cgroup.of(child)
      assert.is_nil(of)
      assert.equal(("cgroup.of %d: process %d has exited and was reaped (its pidfd refers to no process; the "
        .. "pid may belong to another process now)"):format(child.pid, child.pid), oerr)
      assert.equal(ESRCH, oerrno)
      -- The number still names the stranger, as numbers do.
      assert.equal("/" .. name .. "/elsewhere", takana.cgroup.of(child.pid).path)
      stranger:signal("KILL")
      stranger:wait()
      unit:close()
      elsewhere:close()
    end)

    it("a live pidfd is moved and found where it is #root", function()
      if not cg then pending("needs root to create a cgroup") return end
      if H.no_spawn then pending(H.no_spawn) return end
      local unit = assert(cg:mkdir("unit"))
      local c = assert(takana.spawn { "sleep", "30" })
      assert.is_true(unit:attach(c))
      assert.same({ c.pid }, unit:procs())
      assert.equal("/" .. name .. "/unit", assert(takana.cgroup.of(c)).path)
      c:signal("KILL")
      c:wait()
      unit:close()
    end)
  end)

  describe("item 6: no internal method on a handle", function()
    it("cg:_rmdir and the other internals are gone; the handle shows only the documented API", function()
      local cg, err = takana.cgroup("")
      if not cg then pending("no cgroup2 hierarchy here: " .. err) return end
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. dir))
      finally(function() os.execute("rmdir " .. dir .. " 2>/dev/null") end)
      for _, k in ipairs { "_rmdir", "_write", "_mkdir", "_dirfd" } do assert.is_nil(cg[k], k) end
      assert.has_error(function() cg:_rmdir("../../../../../.." .. dir) end)
      assert.truthy(os.execute("test -d " .. dir))
      os.execute("rmdir " .. dir)
      -- The documented API answers, from the method table the core
      -- exports (core.cgroup_methods), which holds nothing else.
      local names = {}
      for k, f in pairs(core.cgroup_methods) do
        names[#names + 1] = k
        assert.equal(f, cg[k], k)
      end
      table.sort(names)
      assert.same({ "attach", "children", "close", "disable", "enable", "events", "fileno", "freeze", "get", "holds", "kill",
        "mkdir", "pollfd", "pressure", "pressure_trigger", "procs", "remove", "set", "signal", "stat", "state",
        "thaw", "timeout", "wait_empty", "why" }, names)
      cg:close()
    end)

    it("the rmdir behind remove() takes no path and removes only the handle's own directory #root", function()
      local path, name, cg = sandbox()
      if not cg then pending("needs root to create a cgroup") return end
      finally(function()
        cg:close()
        H.cgroup_cleanup(path)
      end)
      local unit = assert(cg:mkdir("unit"))
      assert.has_error(function() core.cgroup_rmdir(unit, "../../..") end)
      -- Removed and made again under the same name: a different directory.
      assert(os.execute("rmdir " .. path .. "/unit && mkdir " .. path .. "/unit"))
      local ok, err, errno = core.cgroup_rmdir(unit)
      assert.is_nil(ok)
      assert.equal("remove: No such file or directory", err:gsub("Stale file handle", "No such file or directory"))
      assert.truthy(errno == ENOENT or errno == require("takana").errno.ESTALE)
      assert.truthy(os.execute("test -d " .. path .. "/unit"))
      unit:close()
      cg:close()
      H.cgroup_cleanup(path)
      assert.is_nil(takana.cgroup(name))
    end)
  end)

  describe("item 16: a cgroup namespace whose cgroup2 mount was not remounted", function()
    local path, name, cg
    before_each(function() path, name, cg = sandbox() end)
    after_each(function()
      if cg then cg:close() end
      if path then H.cgroup_cleanup(path) end
      cg = nil
    end)

    local script = [[
      local takana = require "takana"
      local me = io.open("/proc/self/stat"):read("n")
      local cg, err = takana.cgroup.self()
      local mine = false
      for _, p in ipairs(cg and cg:procs() or {}) do if p == me then mine = true end end
      print("self", cg and cg.path or err, mine)
      local ok, one, oerr, oerrno = pcall(takana.cgroup.of, 1)
      print("of1", ok, one and one.path or oerr, oerrno)
      local other_pid = tonumber(os.getenv("OTHER"))
      local other = takana.cgroup.of(other_pid)
      print("other", other and other.path)
      -- paths do not compare here (the mount's root is above ours):
      -- holds still answers, from the subtrees' cgroup.procs
      local top, inner = takana.cgroup(os.getenv("NAME")), takana.cgroup(os.getenv("NAME") .. "/inner")
      print("holds", top:holds(me), top:holds(other_pid), inner:holds(me), inner:holds(other_pid),
        other:holds(me), other:holds(other_pid))
    ]]

    it("cgroup.self() is ours, cgroup.of finds processes outside the namespace #root", function()
      if not cg then pending("needs root to create a cgroup") return end
      if H.no_spawn then pending(H.no_spawn) return end
      if H.run("command -v unshare") ~= 0 then pending("unshare(1) is not installed") return end
      local inner = assert(cg:mkdir("inner"))
      local other = assert(cg:mkdir("other"))
      local sleeper = assert(takana.spawn { "sleep", "30", cgroup = other })
      local one, oerr = takana.cgroup.of(1)
      if not one then pending("cannot read pid 1's cgroup: " .. oerr) return end
      -- unshare -C: the namespace's root is inner, the mount stays the host's.
      local argv = { "env", "OTHER=" .. sleeper.pid, "NAME=" .. name, "unshare", "-C", "env", "LUA_PATH=./lua/?.lua;./lua/?/init.lua;;",
        "LUA_CPATH=./?.so;;" }
      for _, a in ipairs(H.lua_argv) do argv[#argv + 1] = a end
      argv[#argv + 1] = "-e"
      argv[#argv + 1] = script
      argv.cgroup = inner
      argv.stdout = "pipe"
      local child = assert(takana.spawn(argv))
      local out = child.stdout:read("a")
      local status = child:wait()
      if status.code ~= 0 and out == "" then pending("unshare -C failed (no cgroup namespaces?)") return end
      assert.same({ exited = true, code = 0 }, status)
      assert.equal(("self\t/%s/inner\ttrue\nof1\ttrue\t%s\tnil\nother\t/%s/other\n"):format(name, one.path, name)
        .. "holds\ttrue\ttrue\ttrue\tfalse\tfalse\ttrue\n", out)
      sleeper:signal("KILL")
      sleeper:wait()
      one:close()
      inner:close()
      other:close()
    end)

    it("a process outside a remounted namespace's cgroup2: nil, message, errno #root", function()
      if not cg then pending("needs root to create a cgroup") return end
      if H.no_spawn then pending(H.no_spawn) return end
      local inner = assert(cg:mkdir("inner"))
      -- A second mount, made inside the namespace (so rooted at inner),
      -- which takana prefers to the host's.
      local mnt = os.tmpname()
      os.remove(mnt)
      assert(os.execute("mkdir " .. mnt))
      local script2 = [[
        local takana = require "takana"
        local ok, cg, err, errno = pcall(takana.cgroup.of, 1)
        print(ok, cg, err, errno)
        local me = takana.cgroup.self()
        print(me and me.path)
      ]]
      local argv = { "unshare", "-C", "-m", "sh", "-c", 'mount -t cgroup2 none "$0" && exec "$@"', mnt,
        "env", "LUA_PATH=./lua/?.lua;./lua/?/init.lua;;", "LUA_CPATH=./?.so;;" }
      for _, a in ipairs(H.lua_argv) do argv[#argv + 1] = a end
      argv[#argv + 1] = "-e"
      argv[#argv + 1] = script2
      argv.cgroup = inner
      argv.stdout = "pipe"
      argv.stderr = "null"
      local child = assert(takana.spawn(argv))
      local out = child.stdout:read("a")
      local status = child:wait()
      os.execute("rmdir " .. mnt)
      if status.code ~= 0 and out == "" then pending("unshare -C -m or the cgroup2 mount failed here") return end
      local p1 = H.read("/proc/1/cgroup"):match("0::([^\n]*)")
      local rel = p1 == "/" and "/../.." or "/../.." .. p1
      assert.equal(("true\tnil\tcgroup.of 1: its cgroup %s is outside the cgroup2 mount %s (whose root is / in "
        .. "this cgroup namespace)\t%d\n/\n"):format(rel, mnt, ENOENT), out)
      inner:close()
    end)
  end)

  describe("item 19: errors that say what happened", function()
    it("stat() and why() of a removed cgroup name it and say it is gone #root", function()
      local path, name, cg = sandbox()
      if not cg then pending("needs root to create a cgroup") return end
      finally(function()
        cg:close()
        H.cgroup_cleanup(path)
      end)
      local unit = assert(cg:mkdir("unit"))
      assert.is_table(unit:stat().events)
      assert(os.execute("rmdir " .. path .. "/unit"))
      local msg = ("stat /%s/unit: the cgroup was removed (its directory is gone); open it again once it is "
        .. "recreated"):format(name)
      assert.same({ nil, msg, ENOENT }, { unit:stat() })
      assert.equal(msg, unit:why("events"))
      assert.equal(msg, unit:why("memory"))
      unit:close()
      cg:close()
      H.cgroup_cleanup(path)
    end)

    it("under EMFILE, cgroup(\"\") and cgroup.self() return nil, message, EMFILE", function()
      if not H.cgroup2_mount() then pending("no cgroup2 hierarchy here") return end
      local held = {}
      local results = {}
      local ok, err = pcall(function()
        collectgarbage()
        while true do
          local f = io.open("/dev/null")
          if not f then break end
          held[#held + 1] = f
        end
        results.open = { pcall(takana.cgroup, "") }
        results.self = { pcall(takana.cgroup.self) }
        results.of = { pcall(takana.cgroup.of, H.pid) }
      end)
      for _, f in ipairs(held) do f:close() end
      assert(ok, err)
      for _, k in ipairs { "open", "self", "of" } do
        local r = results[k]
        assert.is_true(r[1], k)
        assert.is_nil(r[2], k)
        assert.matches("Too many open files", r[3], 1, true)
        assert.equal(EMFILE, r[4], k)
      end
    end)

    it("enable says which file, the cause and what to do #root", function()
      local path, name, cg = sandbox()
      if not cg then pending("needs root to create a cgroup") return end
      finally(function()
        cg:close()
        H.cgroup_cleanup(path)
      end)
      if H.no_spawn then pending(H.no_spawn) return end
      -- A domain controller this cgroup may enable for its children.
      local c
      for _, want in ipairs { "memory", "io", "hugetlb", "rdma", "misc" } do
        if (" " .. cg:get("cgroup.controllers"):gsub("%s+", " ") .. " "):find(" " .. want .. " ", 1, true) then
          c = want
          break
        end
      end
      -- EACCES: another user's cgroup. (disable skips the availability
      -- check, so it reaches the write on any host.)
      local script = ([[
        local takana = require "takana"
        local cg = assert(takana.cgroup(%q))
        print((select(2, cg:disable { "memory" })))
        if %q ~= "" then print((select(2, cg:enable { %q }))) end
      ]]):format(name, c or "", c or "")
      local argv = { "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
        "env", "LUA_PATH=./lua/?.lua;./lua/?/init.lua;;", "LUA_CPATH=./?.so;;" }
      for _, a in ipairs(H.lua_argv) do argv[#argv + 1] = a end
      argv[#argv + 1] = "-e"
      argv[#argv + 1] = script
      argv.stdout = "pipe"
      argv.stderr = "pipe"
      local child = assert(takana.spawn(argv))
      local out, errout = child.stdout:read("a"), child.stderr:read("a")
      child:wait()
      assert.equal("", errout)
      local want = ("disable memory: cannot write '-memory' to /%s/cgroup.subtree_control: permission denied: run "
        .. "as root, or as the owner of a cgroup delegated to this user\n"):format(name)
      if c then
        want = want .. ("enable %s: cannot write '+%s' to /%s/cgroup.subtree_control: permission denied: run "
          .. "as root, or as the owner of a cgroup delegated to this user\n"):format(c, c, name)
      end
      assert.equal(want, out)
      if c then
        -- EBUSY: a cgroup with processes of its own cannot enable a domain
        -- controller for its children.
        local p = assert(takana.spawn { "sleep", "30", cgroup = cg })
        local ok, err, errno = cg:enable { c }
        assert.is_nil(ok)
        assert.equal(("enable %s: cannot write '+%s' to /%s/cgroup.subtree_control: /%s has processes of its "
          .. "own, and a cgroup with processes cannot enable controllers for its children (cgroup v2's "
          .. "no-internal-process rule): move them into a child cgroup first"):format(c, c, name, name), err)
        assert.equal(EBUSY, errno)
        p:signal("KILL")
        p:wait()
      end
      local ok, err = cg:enable { "nosuchcontroller" }
      assert.is_nil(ok)
      assert.matches("^enable nosuchcontroller: nosuchcontroller controller is not compiled into this kernel", err)
      cg:close()
      H.cgroup_cleanup(path)
    end)

    it("poll on the root cgroup says why it cannot be polled", function()
      local root, err = takana.cgroup("")
      if not root then pending("no cgroup2 hierarchy here: " .. err) return end
      local ok, perr = pcall(takana.poll, { root }, 0)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'poll' (object #1 has no usable fileno(): ", perr, 1, true)
      assert.matches("calling 'fileno' on bad self (the root cgroup has no cgroup.events, so there is nothing "
        .. "to poll; poll a child cgroup instead))", perr, 1, true)
      root:close()
    end)

    it("extra arguments raise", function()
      local root, err = takana.cgroup("")
      if not root then pending("no cgroup2 hierarchy here: " .. err) return end
      local calls = {
        function() takana.cgroup.of(H.pid, 2) end,
        function() takana.cgroup.self(1) end,
        function() takana.cgroup.probe(1) end,
        function() takana.cgroup.mounts(1) end,
        function() root:fileno(1) end,
        function() root:stat(1) end,
        function() root:procs(1) end,
        function() root:why("cpu", 1) end,
        function() root:kill({}, 1) end,
        function() root:freeze(1, 2) end,
        function() root:thaw(1) end,
        function() root:remove(1) end,
        function() root:attach(1, 2) end,
        function() root:enable({}, 1) end,
        function() root:mkdir("x", 1) end,
        function() root:set("pids.max", 1, 2) end,
        function() root:events(1) end,
        function() root:timeout(1) end,
        function() root:close(1) end,
      }
      for i, f in ipairs(calls) do
        local ok, e = pcall(f)
        assert.is_false(ok, "call #" .. i)
        assert.matches("expected", e, 1, true)
      end
      root:close()
    end)
  end)
end)
