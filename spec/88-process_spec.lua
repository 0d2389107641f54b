-- takana.process: one process held by a pidfd, read through its /proc
-- directory fd. psutil (Debian's python3-psutil) is the oracle: a fixture
-- with known argv, environment, cwd, limits, oom_score_adj and open files
-- is read by both, on the same live pid.
local H = require "helpers"
local takana = require "takana"
local core = require "takana.core"

local E = takana.errno
local ESRCH, EACCES, EINVAL, ENOENT, EPERM = E.ESRCH, E.EACCES, E.EINVAL, E.ENOENT, E.EPERM
local PYTHON = "/usr/bin/python3"

local have_psutil = os.execute(PYTHON .. " -c 'import psutil' 2>/dev/null") == true

-- Prints a Lua chunk returning what psutil says of pid; AccessDenied and
-- NoSuchProcess become the strings "EACCES" and "ESRCH".
local ORACLE = [[
import sys, psutil
def lua(v):
    if v is None: return "nil"
    if isinstance(v, bool): return "true" if v else "false"
    if isinstance(v, int): return str(v)
    if isinstance(v, float): return repr(v)
    if isinstance(v, str):
        ok = lambda c: c.isascii() and c.isprintable() and c not in '"\\'
        return '"' + "".join(c if ok(c) else "\\%03d" % ord(c) for c in v if ord(c) < 256) + '"'
    if isinstance(v, (list, tuple)): return "{" + ",".join(lua(x) for x in v) + "}"
    if isinstance(v, dict): return "{" + ",".join("[%s]=%s" % (lua(k), lua(x)) for k, x in v.items()) + "}"
    return lua(str(v))
p = psutil.Process(int(sys.argv[1]))
r = {}
def get(name, f):
    try: r[name] = f()
    except psutil.AccessDenied: r[name] = "EACCES"
    except psutil.NoSuchProcess: r[name] = "ESRCH"
get("cmdline", p.cmdline)
get("exe", p.exe)
get("cwd", p.cwd)
get("environ", p.environ)
get("uids", lambda: list(p.uids()))
get("gids", lambda: list(p.gids()))
get("ctx", lambda: list(p.num_ctx_switches()))
get("io", lambda: p.io_counters()._asdict())
get("num_fds", p.num_fds)
get("open_files", lambda: [[f.fd, f.path] for f in p.open_files()])
get("mem", lambda: p.memory_full_info()._asdict())
get("rss", lambda: p.memory_info().rss)
lim = {}
for n in ["cpu", "fsize", "data", "stack", "core", "rss", "nproc", "nofile", "memlock", "as",
          "locks", "sigpending", "msgqueue", "nice", "rtprio", "rttime"]:
    try: lim[n] = list(p.rlimit(getattr(psutil, "RLIMIT_" + n.upper())))
    except psutil.AccessDenied: lim[n] = "EACCES"
r["limits"] = lim
get("affinity", p.cpu_affinity)
print("return " + lua(r))
]]

local function psutil_of(pid)
  local f = assert(io.popen(PYTHON .. " -c " .. H.shell_quote(ORACLE) .. " " .. pid .. " 2>&1"))
  local text = f:read("a")
  f:close()
  local chunk = load(text, "=psutil", "t", { math = math })
  assert(chunk, "psutil printed: " .. text)
  return chunk()
end

local ARGS = { "a b", "", "c", "", "  ", "--x=y z" }
local ENV = { TK_SPACE = "x y", TK_EMPTY = "", TK_EQ = "a=b", PATH = "/usr/bin:/bin" }

-- The fixture with known values; .dir is its cwd, .file a regular file it
-- holds open.
local function start(extra)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -m 755 " .. dir))
  -- A regular file it holds open on 7 (psutil's open_files lists only those).
  local file = dir .. "/held file"
  assert(io.open(file, "w")):close()
  local words = { "exec sh -c " .. H.shell_quote('exec 7<"$0"; exec "$@"') .. " " .. H.shell_quote(file),
                  "env", "-i" }
  for k, v in pairs(ENV) do words[#words + 1] = H.shell_quote(k .. "=" .. v) end
  for _, w in ipairs { H.fixture_path, "--chdir", dir, "--nofile", "77", "--oom-adj", "123",
                       "--open", "3", "--life", "60" } do
    words[#words + 1] = H.shell_quote(w)
  end
  for _, w in ipairs(extra or {}) do words[#words + 1] = H.shell_quote(w) end
  words[#words + 1] = "--"
  for _, a in ipairs(ARGS) do words[#words + 1] = H.shell_quote(a) end
  local f = assert(io.popen(table.concat(words, " "), "r"))
  local line = f:read("l")
  assert(line and line:match("^ready"), "fixture did not start: " .. tostring(line))
  local fx = { pid = tonumber(line:match("%d+")), dir = dir, file = file, f = f }
  function fx.stop(self)
    if self.f then
      os.execute("kill -KILL " .. self.pid .. " 2>/dev/null")
      self.f:close()   -- reaps it
      self.f = nil
    end
    os.remove(self.file)
    os.remove(self.dir)
  end
  return fx
end

local function expected_argv()
  local t = { H.fixture_path, "--chdir", "DIR", "--nofile", "77", "--oom-adj", "123", "--open",
              "3", "--life", "60", "--" }
  for _, a in ipairs(ARGS) do t[#t + 1] = a end
  return t
end

describe("takana.process", function()
  local fx, p
  before_each(function()
    fx = start()
    p = assert(takana.process(fx.pid))
  end)
  after_each(function()
    if p then p:close() end
    fx:stop()
  end)

  it("has the pid, a pidfd descriptor and the handle protocol", function()
    assert.equal(fx.pid, p.pid)
    assert.is_true(math.type(p:fileno()) == "integer" and p:fileno() >= 0)
    assert.equal("r", p:events())
    assert.is_nil(p:timeout())
    assert.matches("takana.Process %(pid %d+, pidfd %d+%)", tostring(p))
    assert.is_true(p:alive())
  end)

  it("reads what the fixture set: argv (spaces, empty strings), env, cwd, limits, oom_score_adj, fds", function()
    local argv = expected_argv()
    argv[3] = fx.dir
    assert.same(argv, p:cmdline())
    assert.same(ENV, p:environ())
    assert.equal(fx.dir, p:cwd())
    local exe = io.popen("readlink -f " .. H.fixture_path):read("l")
    assert.equal(exe, p:exe())
    local lim = p:limits()
    assert.equal(77, lim.nofile.soft)
    assert.equal(123, p:oom_score_adj())
    local n = p:fds()
    -- 0, 1, 2, the file on 7, three /dev/null
    assert.is_true(n >= 7, "fds " .. n)
    local list = p:fds { list = true }
    assert.equal(n, #list)
    local held
    for i, e in ipairs(list) do
      if i > 1 then assert.is_true(e.fd > list[i - 1].fd) end
      if e.fd == 7 then held = e.target end
    end
    assert.equal(fx.file, held)
  end)

  it("agrees with psutil on every method", function()
    if not have_psutil then
      pending("python3-psutil is not installed (apt-get install python3-psutil)")
      return
    end
    local ps = psutil_of(fx.pid)
    assert.same(ps.cmdline, p:cmdline())
    assert.equal(ps.exe, p:exe())
    assert.equal(ps.cwd, p:cwd())
    assert.same(ps.environ, p:environ())
    local st = p:status()
    assert.same(ps.uids, { st.uids.real, st.uids.effective, st.uids.saved })
    assert.same(ps.gids, { st.gids.real, st.gids.effective, st.gids.saved })
    assert.same(ps.ctx, { st.ctx_switches.voluntary, st.ctx_switches.involuntary })
    assert.equal(ps.rss, st.vmrss_bytes)
    local io_ = p:io()
    assert.same({ ps.io.read_count, ps.io.write_count, ps.io.read_chars, ps.io.write_chars,
                  ps.io.read_bytes, ps.io.write_bytes },
                { io_.syscr, io_.syscw, io_.rchar, io_.wchar, io_.read_bytes, io_.write_bytes })
    assert.equal(ps.num_fds, p:fds())
    local targets = {}
    for _, e in ipairs(p:fds { list = true }) do targets[e.fd] = e.target end
    assert.is_true(#ps.open_files >= 1)
    for _, of in ipairs(ps.open_files) do assert.equal(of[2], targets[of[1]]) end
    -- pss moves while python (mapping the same libc) runs: bounds only.
    -- uss may still grow by a few pages between the two reads (the
    -- fixture's last lazy faults; 16 KiB seen on 6.1 under TCG).
    local m = p:memory_full()
    assert.equal(ps.mem.swap, m.swap_bytes)
    assert.is_true(math.abs(m.uss_bytes - ps.mem.uss) <= 65536, ("uss %d vs psutil %d"):format(m.uss_bytes, ps.mem.uss))
    assert.is_true(m.uss_bytes <= m.pss_bytes and m.pss_bytes <= m.rss_bytes)
    assert.is_true(ps.mem.pss <= m.rss_bytes)
    local lim = p:limits()
    for name, pair in pairs(ps.limits) do
      local function conv(v) return v == -1 and math.huge or v end
      assert.same({ conv(pair[1]), conv(pair[2]) }, { lim[name].soft, lim[name].hard }, name)
    end
    assert.same(ps.affinity, p:affinity())
  end)

  it("reads status: uids, signal masks as integers, memory lines", function()
    local st = assert(p:status())
    assert.equal(H.uid(), st.uids.real)
    assert.equal(H.uid(), st.uids.fs)
    -- The fixture ignores nothing and catches nothing; blocks nothing.
    for _, k in ipairs { "sigpnd", "shdpnd", "sigblk", "sigign", "sigcgt" } do
      assert.equal("integer", math.type(st[k]), k)
    end
    assert.is_true(st.vmhwm_bytes >= st.vmrss_bytes)
    assert.equal(0, st.vmswap_bytes)
    assert.equal(1, st.threads)
    -- This process's own masks move when it blocks a signal: the bit is n-1.
    local me = assert(takana.process(H.pid))
    local text = H.read("/proc/" .. H.pid .. "/status")
    assert.equal(tonumber(text:match("SigIgn:%s*(%x+)"), 16), me:status().sigign)
    me:close()
  end)

  it("reads the cgroup2 path, oom_score and io", function()
    local text = H.read("/proc/" .. fx.pid .. "/cgroup")
    local want = text:match("0::([^\n]*)")
    if want then
      assert.equal(want, p:cgroup())
    else
      local v, err, errno = p:cgroup()
      assert.is_nil(v)
      assert.equal(ENOENT, errno, err)
    end
    assert.equal(tonumber(H.read("/proc/" .. fx.pid .. "/oom_score")), p:oom_score())
    assert.equal("integer", math.type(p:io().rchar))
  end)

  it("sets limits, oom_score_adj and affinity and reads them back", function()
    local lim = assert(p:setlimit("nofile", 50))
    assert.same({ soft = 50, hard = p:limits().nofile.hard }, lim)
    assert.matches("Max open files%s+50 ", H.read("/proc/" .. fx.pid .. "/limits"))
    assert.same({ soft = 40, hard = 60 }, p:setlimit("nofile", 40, 60))
    assert.same({ soft = math.huge, hard = math.huge }, p:setlimit("core", math.huge, "unlimited")
      or { soft = math.huge, hard = math.huge })
    -- Raising a hard limit needs CAP_SYS_RESOURCE (root here may lack it).
    local v, err, errno = p:setlimit("nofile", 40, 70)
    local caps = tonumber(H.read("/proc/self/status"):match("CapEff:%s*(%x+)"), 16)
    if caps & (1 << 24) ~= 0 then
      assert.same({ soft = 40, hard = 70 }, v)
    else
      assert.is_nil(v)
      assert.equal(EPERM, errno, err)
      assert.matches("process %d+: setlimit nofile: .*CAP_SYS_RESOURCE", err)
    end
    assert.equal(200, p:oom_score_adj(200))
    assert.equal("200", H.read("/proc/" .. fx.pid .. "/oom_score_adj"):match("%-?%d+"))
    local cpus = p:affinity()
    assert.same({ cpus[1] }, p:affinity { cpus[1] })
    if have_psutil then assert.same({ cpus[1] }, psutil_of(fx.pid).affinity) end
    assert.same(cpus, p:affinity(cpus))
  end)

  it("accepts a pidfd object and duplicates its descriptor", function()
    local pfd = assert(takana.pidfd(fx.pid))
    local q = assert(takana.process(pfd))
    assert.equal(fx.pid, q.pid)
    assert.are_not.equal(pfd:fileno(), q:fileno())
    pfd:close()
    assert.equal(fx.dir, q:cwd())
    q:close()
  end)

  it("signals through the pidfd and reports the exit", function()
    assert.is_true(p:signal("TERM"))
    H.poll_until({ p }, function() return not p:alive() end)
    assert.is_false(p:alive())
    -- popen's child is ours: reaped here, with the signal.
    assert.same({ signaled = true, signal = 15, core = false }, p:wait(10))
    assert.same({ signaled = true, signal = 15, core = false }, p:wait(0))
  end)

  it("waits for its own child", function()
    local child = assert(takana.spawn { "/bin/sh", "-c", "read x; exit 3", stdin = "pipe" })
    local q = assert(takana.process(child))
    child.stdin:close()
    child:close()
    assert.same({ exited = true, code = 3 }, q:wait(10))
    q:close()
    -- An exited, unreaped child (a zombie) still opens, to be waited for;
    -- its reads say ESRCH.
    child = assert(takana.spawn { "/bin/sh", "-c", "exit 4" })
    H.poll_until({ child }, function() return not child:alive() end)
    q = assert(takana.process(child.pid))
    child:close()
    local v, err, errno = q:cmdline()
    assert.is_nil(v)
    assert.equal(ESRCH, errno, err)
    assert.same({ exited = true, code = 4 }, q:wait(10))
    q:close()
  end)

  it("returns ESRCH from every method once the process exited and was reaped", function()
    fx:stop()
    assert.is_false(p:alive())
    for _, m in ipairs { "cmdline", "exe", "cwd", "environ", "status", "io", "fds", "memory_full",
                         "limits", "oom_score", "oom_score_adj", "affinity", "cgroup" } do
      local v, err, errno = p[m](p)
      assert.is_nil(v, m)
      assert.equal(ESRCH, errno, m .. ": " .. tostring(err))
      assert.matches("process " .. fx.pid .. ": .*has exited", err)
    end
    for _, call in ipairs {
      function() return p:setlimit("nofile", 10) end,
      function() return p:oom_score_adj(0) end,
      function() return p:affinity { 0 } end,
      function() return p:signal(0) end,
      function() return p:fds { list = true } end,
    } do
      local v, err, errno = call()
      assert.is_nil(v)
      assert.equal(ESRCH, errno, err)
    end
    local v, err, errno = takana.process(fx.pid)
    assert.is_nil(v)
    assert.equal(ESRCH, errno, err)
  end)

  it("never answers for another process: held across exit and a new process", function()
    local old = fx.pid
    fx:stop()
    -- A new process, which may even reuse the pid (pid_max wrapping):
    -- the held object must say ESRCH either way, never read it.
    local other = start()
    assert.is_true(other.pid ~= old or not p:alive())
    local v, err, errno = p:cmdline()
    assert.is_nil(v)
    assert.equal(ESRCH, errno, err)
    assert.is_nil(p:environ())
    other:stop()
  end)

  it("never reads a process that reused the pid (needs root: pid namespace) #root", function()
    if not H.is_root() then
      pending("needs root to create a pid namespace and set ns_last_pid")
      return
    end
    -- As in the pidfd spec: in a new pid namespace, ns_last_pid makes the
    -- next child take the reaped one's pid.
    local script = [[
      package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
      package.cpath = "./?.so;" .. package.cpath
      local takana = require "takana"
      local child = assert(takana.spawn { "sleep", "30" })
      local old = assert(takana.process(child))
      child:close()
      local snap = assert(takana.snapshot { backend = "proc" })
      assert(old:signal("KILL")); old:wait()
      os.execute("sleep 0.05")   -- a clock tick apart: start times differ
      local f = assert(io.open("/proc/sys/kernel/ns_last_pid", "w"))
      f:write(tostring(old.pid - 1)); f:close()
      local new = assert(takana.spawn { "sleep", "31" })
      local argv, err, errno = old:cmdline()
      local again, _, errno2 = snap:process(old.pid)
      -- spawn returns once the vfork child's exec releases the parent:
      -- the kernel does that (exec_mm_release) just before the child
      -- switches to its new memory, so for a moment its cmdline is empty,
      -- or still the parent's argv ("lua5.4 -e ...", seen on 6.12 under
      -- TCG): read until the new one is there (bounded).
      local newp, fresh = assert(takana.process(new.pid)), {}
      for _ = 1, 200 do
        fresh = newp:cmdline()
        if fresh[2] == "31" then break end
        takana.poll({}, 0.01)
      end
      print(old.pid, new.pid, tostring(argv), errno, tostring(again), errno2, fresh[2])
      new:signal("KILL"); new:wait()
    ]]
    local code, out = H.run("unshare --pid --fork --mount-proc " .. H.lua .. " -e " .. H.shell_quote(script))
    assert.equal(0, code, out)
    local oldpid, newpid, argv, errno, again, errno2, fresh =
      out:match("^(%d+)\t(%d+)\t(%S+)\t(%d+)\t(%S+)\t(%d+)\t(%S+)")
    assert.equal(oldpid, newpid, out)
    assert.equal("nil", argv)
    assert.equal(tostring(ESRCH), errno)
    assert.equal("nil", again)
    assert.equal(tostring(ESRCH), errno2)
    assert.equal("31", fresh)
  end)

  it("snap:process refuses a pid whose start time differs from the record's", function()
    local snap = takana.snapshot { backend = "proc" }
    local q = assert(snap:process(fx.pid))
    assert.equal(fx.pid, q.pid)
    q:close()
    -- A field selection without start_ns still has it: in every record.
    for _, backend in ipairs(H.snapshot_backends()) do
      local sel = assert(takana.snapshot { backend = backend, fields = { "comm" } })
      assert.is_true(sel:get(fx.pid).start_ns > 0)
      q = assert(sel:process(fx.pid))
      assert.equal(fx.pid, q.pid)
      q:close()
    end
    -- A record of the same pid that started 100 ticks earlier: a reused pid.
    local stat = H.read("/proc/" .. fx.pid .. "/stat")
    local head, rest = stat:match("^(.*%) )(.*)$")
    local f = {}
    for w in rest:gmatch("%S+") do f[#f + 1] = w end
    f[20] = tostring(tonumber(f[20]) - 100)   -- starttime, field 22 of the line
    local forged = core.snapshot_from_stat { head .. table.concat(f, " ") }
    local v, err, errno = forged:process(fx.pid)
    assert.is_nil(v)
    assert.equal(ESRCH, errno)
    assert.matches("not the process in the snapshot", err)
    v, err, errno = snap:process(0x7ffffffe)
    assert.is_nil(v)
    assert.equal(ESRCH, errno, err)
  end)

  it("raises on a caller's mistake", function()
    for _, bad in ipairs { "1", 1.5, -1, 0, 2 ^ 31, math.maxinteger, {}, true } do
      assert.has_error(function() takana.process(bad) end)
    end
    assert.has_error(function() takana.process() end)
    assert.has_error(function() takana.process(fx.pid, 2) end)
    assert.has_error(function() p:cmdline(1) end)
    assert.has_error(function() p:fds { bogus = true } end)
    assert.has_error(function() p:fds { list = 1 } end)
    assert.has_error(function() p:fds "list" end)
    assert.has_error(function() p:setlimit("bogus", 1) end)
    assert.has_error(function() p:setlimit("nofile\0", 1) end)
    assert.has_error(function() p:setlimit("nofile", -1) end)
    assert.has_error(function() p:setlimit("nofile", 1.5) end)
    assert.has_error(function() p:setlimit("nofile", "lots") end)
    assert.has_error(function() p:setlimit("nofile", 20, 10) end)
    assert.has_error(function() p:oom_score_adj(1001) end)
    assert.has_error(function() p:oom_score_adj("../x") end)
    assert.has_error(function() p:affinity {} end)
    assert.has_error(function() p:affinity { -1 } end)
    assert.has_error(function() p:affinity { 1e9 } end)
    assert.has_error(function() p:affinity { "0" } end)
    assert.has_error(function() p:signal "NOPE" end)
    assert.has_error(function() p:signal(1000) end)
    assert.has_error(function() p:wait(-1) end)
    assert.has_error(function() takana.process(p) end)
    local pfd = assert(takana.pidfd(fx.pid))
    pfd:close()
    assert.has_error(function() takana.process(pfd) end)
    p:close()
    p:close()
    assert.has_error(function() p:cmdline() end, "attempt to use a closed process")
    p = nil
  end)

  it("gives EACCES where the kernel refuses another user's process, as psutil does", function()
    -- As root: a uid 65534 reader of our fixture; as 65534: a root process.
    if H.is_root() then
      local code, out = H.run(("setpriv --reuid=65534 --regid=65534 --clear-groups %s -e %s"):format(
        H.lua, H.shell_quote([[
          package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
          package.cpath = "./?.so;" .. package.cpath
          local p = assert(require("takana").process(]] .. fx.pid .. [[))
          for _, m in ipairs { "environ", "exe", "cwd", "io", "memory_full", "cmdline", "status", "limits" } do
            local v, err, errno = p[m](p)
            print(m, v and "ok" or errno)
          end]])))
      assert.equal(0, code, out)
      local got = {}
      for m, r in out:gmatch("(%S+)\t(%S+)") do got[m] = r end
      local no = tostring(EACCES)
      assert.same({ environ = no, exe = no, cwd = no, io = no, memory_full = no,
                    cmdline = "ok", status = "ok", limits = "ok" }, got)
      return
    end
    local snap = assert(takana.snapshot())
    local target
    for r in snap:each() do
      if r.uid == 0 and not r.kthread and r.pid ~= H.pid then target = r.pid break end
    end
    if not target then pending("no process of another user is visible here") return end
    local q, err = takana.process(target)
    if not q then pending("process " .. target .. ": " .. err) return end
    local ps = have_psutil and psutil_of(target)
    for _, m in ipairs { "environ", "exe", "cwd", "io", "memory_full" } do
      local v, merr, errno = q[m](q)
      if ps and ps[({ io = "io", memory_full = "mem" })[m] or m] == "EACCES" then
        assert.is_nil(v, m)
        assert.equal(EACCES, errno, merr)
      end
      if v == nil and errno == EACCES then
        assert.matches("another user's process", merr)
      end
    end
    assert.is_table(q:status())
    assert.is_table(q:limits())
    q:close()
  end)
end)

describe("takana.process on odd targets", function()
  it("opens this process and reads itself", function()
    local me = assert(takana.process(H.pid))
    assert.equal(H.pid, me.pid)
    assert.is_true(#me:cmdline() >= 1)
    assert.is_true(me:fds() >= 3)
    me:close()
  end)

  it("leaks no descriptor: closed, collected or failed (1,000 opens)", function()
    collectgarbage()
    local before = H.count_fds()
    for i = 1, 1000 do
      local q = assert(takana.process(H.pid))
      assert(q:cmdline())
      if i % 2 == 0 then q:close() end
      assert.is_nil(takana.process(0x7ffffffe))
    end
    collectgarbage()
    collectgarbage()
    assert.equal(before, H.count_fds())
  end)

  it("objects left to the collector never exhaust a low descriptor limit (2,000 of each, limit 256)", function()
    -- Each holds one or two descriptors and a few bytes of Lua memory: only
    -- the descriptor pressure check collects them before the limit.
    local script = [[
      package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
      package.cpath = "./?.so;" .. package.cpath
      local takana = require "takana"
      local me = takana.pidfd(require("takana.core").getpid()).pid
      for _ = 1, 2000 do assert(takana.process(me)) end
      for _ = 1, 2000 do assert(takana.pidfd(me)) end
      print("ok")
    ]]
    local code, out = H.run("sh -c " .. H.shell_quote("ulimit -n 256 && exec " .. H.lua .. " -e " .. H.shell_quote(script)))
    assert.equal(0, code, out)
    assert.equal("ok\n", out)
  end)

  it("refuses a pid that does not exist", function()
    local v, err, errno = takana.process(0x7ffffffe)
    assert.is_nil(v)
    assert.equal(ESRCH, errno, err)
  end)

  it("refuses a thread id with the reason (before Linux 6.9) or opens its process", function()
    local t = H.fixture { "--threads", "1" }
    local tids = {}
    for line in io.popen("ls /proc/" .. t.pid .. "/task"):lines() do tids[#tids + 1] = tonumber(line) end
    local tid
    for _, x in ipairs(tids) do if x ~= t.pid then tid = x end end
    local v, err, errno = takana.process(tid)
    if v then
      v:close()
    else
      -- EINVAL before 6.9; ENOENT where /proc hides thread ids
      assert.is_true(errno == EINVAL or errno == ESRCH or errno == ENOENT, err)
    end
    t:kill()
  end)
end)

describe("takana.cgroup.path(id)", function()
  local function v2() return takana.cgroup.probe().v2_mount end

  it("maps this process's cgroup id to its path, and takana.cgroup(id) opens it", function()
    if not v2() then pending("no cgroup2 hierarchy mounted") return end
    local me = assert(takana.cgroup.self())
    local id = assert(core.cgroup_id(me))
    -- one spelling: handle.path's, "/" for the mount's root
    assert.equal(me.path, takana.cgroup.path(id))
    assert.equal(me.path, takana.cgroup.path(id))   -- from the cache
    local root = assert(takana.cgroup("/"))
    assert.equal("/", root.path)
    assert.equal("/", takana.cgroup.path((assert(core.cgroup_id(root)))))
    root:close()
    local cg = assert(takana.cgroup(id))
    assert.equal(me.path, cg.path)
    assert.equal(id, core.cgroup_id(cg))
    cg:close()
    me:close()
  end)

  it("finds nested cgroups (names with spaces) by open_by_handle_at and by the walk alike #root", function()
    local path, name = H.test_cgroup_path()
    if not path then pending("needs root and a cgroup2 mount") return end
    finally(function() H.cgroup_cleanup(path) end)
    assert(os.execute("mkdir -p " .. H.shell_quote(path .. "/a b/c")))
    local cg = assert(takana.cgroup(name .. "/a b/c"))
    local id = core.cgroup_id(cg)
    cg:close()
    assert.equal("/" .. name .. "/a b/c", takana.cgroup.path(id))
    assert.equal(name .. "/a b/c", assert(core.cgroup_ids(v2(), 100000))[id])
    local rel, err, errno = core.cgroup_path_by_handle(v2(), id)
    if rel then
      assert.equal(name .. "/a b/c", rel)
    else
      assert.is_true(errno == EPERM or errno == EACCES, err)   -- no CAP_DAC_READ_SEARCH
    end
    -- Removed: no cgroup has that id any more (ids are never reused).
    assert(os.execute("rmdir " .. H.shell_quote(path .. "/a b/c")))
    local v
    v, err, errno = takana.cgroup.path(id)
    assert.is_nil(v)
    assert.equal(ENOENT, errno, err)
    v, err, errno = takana.cgroup(id)
    assert.is_nil(v)
    assert.equal(ENOENT, errno, err)
  end)

  it("caches id -> path, and a cgroup removed, or made again under its name, is never mistaken #root", function()
    local path, name = H.test_cgroup_path()
    if not path then pending("needs root and a cgroup2 mount") return end
    finally(function() H.cgroup_cleanup(path) end)
    local function make()
      assert(os.execute("mkdir -p " .. H.shell_quote(path .. "/x")))
      local cg = assert(takana.cgroup(name .. "/x"))
      local id = assert(core.cgroup_id(cg))
      cg:close()
      return id
    end
    local old = make()
    local want = "/" .. name .. "/x"
    assert.equal(want, takana.cgroup.path(old))
    assert.equal(want, core.cgroup_path_cached(old))   -- cached, and checked
    -- removed: the cache no longer answers, nor does the resolver
    assert(os.execute("rmdir " .. H.shell_quote(path .. "/x")))
    assert.is_nil(core.cgroup_path_cached(old))
    local v, err, errno = takana.cgroup.path(old)
    assert.is_nil(v)
    assert.equal(ENOENT, errno, err)
    -- made again under the same name: a new id, and the old one stays gone
    local new, _ = make(), nil
    assert.are_not.equal(old, new)
    assert.equal(want, takana.cgroup.path(new))
    v, _, errno = takana.cgroup.path(old)
    assert.is_nil(v)
    assert.equal(ENOENT, errno)
    -- and once more, with the second one cached when it goes
    assert(os.execute("rmdir " .. H.shell_quote(path .. "/x")))
    local again = make()
    v, _, errno = takana.cgroup.path(new)
    assert.is_nil(v)
    assert.equal(ENOENT, errno)
    assert.is_nil(core.cgroup_path_cached(new))
    assert.equal(want, takana.cgroup.path(again))
  end)

  it("keeps a forked child from taking the parent's news of a removal #root", function()
    local path, name = H.test_cgroup_path()
    if not path then pending("needs root and a cgroup2 mount") return end
    finally(function() H.cgroup_cleanup(path) end)
    package.cpath = "./spec/?.so;" .. package.cpath
    local envtool = require "envtool"
    assert(os.execute("mkdir -p " .. H.shell_quote(path .. "/y")))
    local cg = assert(takana.cgroup(name .. "/y"))
    local id = assert(core.cgroup_id(cg))
    cg:close()
    assert.equal("/" .. name .. "/y", takana.cgroup.path(id))
    assert.equal("/" .. name .. "/y", core.cgroup_path_cached(id))
    -- removed: the news waits in the watch's queue, which a child shares
    assert(os.execute("rmdir " .. H.shell_quote(path .. "/y")))
    local pid = envtool.fork()
    if pid == 0 then
      envtool.alarm(30)
      local ok = pcall(function()
        assert(core.cgroup_path_cached(id) == nil)
        assert(takana.cgroup.path(id) == nil)
      end)
      envtool.exit(ok and 0 or 1)
    end
    assert.equal(0, envtool.waitpid(pid))
    -- the parent still learns it
    assert.is_nil(core.cgroup_path_cached(id))
    assert.is_nil((takana.cgroup.path(id)))
  end)

  it("answers ENOENT for an id no cgroup has", function()
    if not v2() then pending("no cgroup2 hierarchy mounted") return end
    for _, id in ipairs { math.maxinteger, 0x7fffffff } do
      local v, err, errno = takana.cgroup.path(id)
      assert.is_nil(v)
      assert.equal(ENOENT, errno, err)
    end
  end)

  it("raises on a caller's mistake", function()
    for _, bad in ipairs { 0, -1, 1.5, "1", "../x", {}, true } do
      assert.has_error(function() takana.cgroup.path(bad) end)
    end
    assert.has_error(function() takana.cgroup.path() end)
    assert.has_error(function() takana.cgroup.path(1, 2) end)
    assert.has_error(function() takana.cgroup(1.5) end)
    assert.has_error(function() core.cgroup_ids(v2() or "/", 0) end)
    assert.has_error(function() core.cgroup_path_by_handle(v2() or "/", -5) end)
  end)
end)

describe("bin/takana and takana.process", function()
  local function takana_cmd(args)
    return H.run("LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' " .. H.lua ..
      " bin/takana " .. args)
  end
  local cli = require "takana.cli"

  it("ps -o pid,user,cgroup,cmd prints user names, the cgroup and argv shell-quoted", function()
    local fx = start()
    local code, out = takana_cmd("ps -o pid,user,cgroup,cmd")
    local want_cg = H.read("/proc/" .. fx.pid .. "/cgroup"):match("0::([^\n]*)") or "?"
    fx:stop()
    assert.equal(0, code, out)
    assert.matches("^%s+PID USER%s+CGROUP%s+CMD\n", out)
    local line = out:match("\n(%s*" .. fx.pid .. " [^\n]*)")
    assert.truthy(line, out)
    local user = core.user_name(H.uid()) or tostring(H.uid())
    assert.equal(user, line:match("^%s*%d+ (%S+)"))
    assert.truthy(line:find(" " .. want_cg .. " ", 1, true), line)
    assert.truthy(line:find("-- 'a b' '' c '' '  ' '--x=y z'", 1, true), line)
  end)

  it("ps --cgroup and cgroup PATH --procs list the cgroup's processes #root", function()
    local path, name = H.test_cgroup_path()
    if not path then pending("needs root and a cgroup2 mount") return end
    finally(function() H.cgroup_cleanup(path) end)
    assert(os.execute("mkdir " .. H.shell_quote(path .. "/sub")))
    local fx = start()
    local cg = assert(takana.cgroup(name .. "/sub"))
    assert(cg:attach(fx.pid))
    cg:close()
    local code, out = takana_cmd("ps -o pid,cmd --cgroup " .. name)
    local pcode, procs = takana_cmd("cgroup " .. name .. " --procs")
    local jcode, js = takana_cmd("cgroup " .. name .. " --procs --json")
    fx:stop()
    assert.equal(0, code, out)
    assert.same({ fx.pid }, (function()
      local t = {}
      for pid in out:gmatch("\n%s*(%d+)") do t[#t + 1] = tonumber(pid) end
      return t
    end)())
    assert.equal(0, pcode, procs)
    assert.truthy(procs:find(("%7d "):format(fx.pid), 1, true), procs)
    assert.truthy(procs:find("/" .. name .. "/sub", 1, true), procs)
    assert.truthy(procs:find("'a b' ''", 1, true), procs)
    assert.equal(0, jcode, js)
    assert.truthy(js:find('"argv":["' .. H.fixture_path, 1, true), js)
    local c2, err = takana_cmd("ps --cgroup " .. name .. "-nonexistent")
    assert.equal(1, c2)
    assert.matches("No such file", err)
    assert.equal(2, (takana_cmd("ps --cgroup ../etc")))
    assert.equal(2, (takana_cmd("cgroup / --procs --watch 1")))
  end)

  it("watch prints an exec event's argv shell-quoted, else its filename or comm, else that it was lost", function()
    assert.equal("/bin/echo 'a b' '' 'it'\\''s' '\\x0a' ...",
      cli.event_detail { type = "exec", argv = { "/bin/echo", "a b", "", "it's", "\n" }, argv_truncated = true })
    assert.equal("/bin/true", cli.event_detail { type = "exec", argv = { "/bin/true" } })
    assert.equal("/usr/bin/x", cli.event_detail { type = "exec", filename = "/usr/bin/x" })
    assert.equal("sh", cli.event_detail { type = "exec", comm = "sh" })
    assert.equal("(program unknown: argv lost)",
      cli.event_detail { type = "exec", argv_lost = true, argv_from = "proc-later" })
  end)
end)
