-- Files and sockets a privileged takana creates (issue 21, the third
-- audit): every one beneath a directory fd that was checked, never through
-- a name another user planted. core.dir_open and its methods, the notify
-- sender checks (SCM_PIDFD, and the start-time check of kernels before
-- 6.5), and the supervisor and `takana export --textfile` refusing what
-- uid 65534 plants in each place they write. Planting is done as uid 65534
-- (takana.spawn{user=}), in directories this file creates and removes.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"
local lfs = require "lfs"
local E = core.errno

local function octal(s) return tonumber(s, 8) end

local function tmpdir(mode)
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -m " .. (mode or "700") .. " " .. d))
  return d
end

local function rm(d) os.execute("rm -rf " .. H.shell_quote(d)) end

-- Runs a shell command as uid 65534 and waits for it.
local function as_nobody(script)
  local p = assert(takana.spawn { "/bin/sh", "-c", script, user = 65534, group = 65534 })
  local st = p:wait()
  assert(st.exited and st.code == 0, "as uid 65534: " .. script)
end

local function why_not_root()
  if not H.is_root() then return "needs root (files of another user are planted with spawn{user=65534})" end
  if H.no_spawn then return H.no_spawn end
end

describe("core.dir_open", function()
  local d
  before_each(function() d = tmpdir() end)
  after_each(function() rm(d) end)

  it("makes a private directory with its mode, and says its path without links", function()
    local dir = assert(core.dir_open(d .. "/a/b", { create = true, private = true, mode = octal("711") }))
    assert.equal(d .. "/a/b", dir:path())
    assert.equal("rwx--x--x", lfs.attributes(d .. "/a/b", "permissions"))
    assert.equal("directory", lfs.attributes(d .. "/a", "mode"))
    dir:close()
    dir:close()
    assert.has_error(function() dir:path() end, "attempt to use a closed directory")
    -- an existing one keeps the mode its owner gave it (never a chmod of,
    -- say, /run); one others can write is refused, sticky or not
    assert(os.execute("chmod 755 " .. d .. "/a/b"))
    dir = assert(core.dir_open(d .. "/a/b", { private = true, mode = octal("700") }))
    assert.equal("rwxr-xr-x", lfs.attributes(d .. "/a/b", "permissions"))
    dir:close()
    assert(os.execute("chmod 1777 " .. d .. "/a/b"))
    local err, errno
    dir, err, errno = core.dir_open(d .. "/a/b", { private = true })
    assert.is_nil(dir)
    assert.equal(E.EPERM, errno)
    assert.matches("a/b is writable by group or others %(mode 1777%): a private directory must not be", err)
    assert(os.execute("chmod 711 " .. d .. "/a/b"))
    -- links in the path are resolved first: the path handed out has none
    assert(lfs.link(d .. "/a", d .. "/l", true))
    dir = assert(core.dir_open(d .. "/l/b", { private = true }))
    assert.equal(d .. "/a/b", dir:path())
    dir:close()
  end)

  it("refuses a directory others can write unless sticky, with the reason", function()
    assert(os.execute("mkdir -m 777 " .. d .. "/open && chmod 777 " .. d .. "/open"))
    local dir, err, errno = core.dir_open(d .. "/open")
    assert.is_nil(dir)
    assert.equal(E.EPERM, errno)
    assert.matches("is writable by group or others %(mode 0777", err)
    assert(os.execute("chmod 1777 " .. d .. "/open"))
    dir = assert(core.dir_open(d .. "/open"))
    dir:close()
    dir, err, errno = core.dir_open(d .. "/missing")
    assert.is_nil(dir)
    assert.equal(E.ENOENT, errno)
    assert.matches("directory .*/missing: No such file or directory", err)
  end)

  it("refuses a private directory or an ancestor another user owns #root", function()
    local why = why_not_root()
    if why then return pending(why) end
    assert(os.execute("chmod 1777 " .. d))
    as_nobody("mkdir -m 700 " .. d .. "/theirs && mkdir -m 755 " .. d .. "/up && mkdir " .. d .. "/up/x")
    local dir, err, errno = core.dir_open(d .. "/theirs", { private = true })
    assert.is_nil(dir)
    assert.equal(E.EPERM, errno)
    assert.matches("theirs is owned by uid 65534, not by root or uid 0", err)
    dir, err, errno = core.dir_open(d .. "/up/mine", { private = true, create = true })
    assert.is_nil(dir)
    assert.equal(E.EPERM, errno)
    assert.matches("/up is owned by uid 65534", err)
    assert.is_nil(lfs.attributes(d .. "/up/mine"))
  end)

  it("raises on a caller's mistakes", function()
    assert.has_error(function() core.dir_open() end)
    assert.has_error(function() core.dir_open("a\0b") end)
    assert.has_error(function() core.dir_open(string.rep("x", 5000)) end)
    assert.has_error(function() core.dir_open(d, 5) end)
    assert.has_error(function() core.dir_open(d, { mode = 4096 }) end)
    assert.has_error(function() core.dir_open(d, {}, 1) end)
    local dir = assert(core.dir_open(d))
    for _, bad in ipairs { "", ".", "..", "a/b", "a\0b", string.rep("x", 256) } do
      assert.has_error(function() dir:append(bad) end)
      assert.has_error(function() dir:unlink(bad) end)
      assert.has_error(function() dir:rename(bad, "x") end)
      assert.has_error(function() dir:replace(bad, "x") end)
    end
    assert.has_error(function() dir:append("x", -1) end)
    assert.has_error(function() dir:append("x", 2 ^ 40) end)
    dir:close()
  end)
end)

describe("dir:append", function()
  local d, dir
  before_each(function()
    d = tmpdir("755")
    dir = assert(core.dir_open(d))
  end)
  after_each(function()
    dir:close()
    rm(d)
  end)

  it("creates with its mode whatever the umask, appends, renames and unlinks beneath the fd", function()
    local f = assert(dir:append("a.log", octal("640")))
    assert.equal("rw-r-----", lfs.attributes(d .. "/a.log", "permissions"))
    f:write("one\n")
    f:close()
    f = assert(dir:append("a.log"))
    f:write("two\n")
    f:close()
    assert.equal("one\ntwo\n", H.read(d .. "/a.log"))
    assert.is_true(dir:rename("a.log", "a.log.1"))
    assert.equal("one\ntwo\n", H.read(d .. "/a.log.1"))
    assert.is_true(dir:unlink("a.log.1"))
    local ok, err, errno = dir:unlink("a.log.1")
    assert.is_nil(ok)
    assert.equal(E.ENOENT, errno)
    assert.matches("unlink .*/a.log.1: No such file", err)
  end)

  it("never writes through a link, a FIFO, a hard link or another user's file", function()
    local victim = d .. "/victim"
    local v = assert(io.open(victim, "w"))
    v:write("root only\n")
    v:close()
    assert(lfs.link(victim, d .. "/sym.log", true))
    local f, err, errno = dir:append("sym.log")
    assert.is_nil(f)
    assert.equal(E.ELOOP, errno)
    assert.matches("sym.log is a symbolic link", err)
    assert(lfs.link(victim, d .. "/hard.log"))
    f, err, errno = dir:append("hard.log")
    assert.is_nil(f)
    assert.equal(E.EPERM, errno)
    assert.matches("hard.log has 2 links", err)
    assert(os.execute("mkfifo " .. d .. "/fifo.log"))
    f, err = dir:append("fifo.log") -- returns at once: never blocks on the FIFO
    assert.is_nil(f)
    assert.matches("fifo.log is a FIFO or socket", err)
    assert(os.execute("mkdir " .. d .. "/dir.log"))
    f, err = dir:append("dir.log")
    assert.is_nil(f)
    assert.truthy(err:find("dir.log", 1, true))
    assert.equal("root only\n", H.read(victim))
    if H.is_root() and not H.no_spawn then
      assert(os.execute("touch " .. d .. "/theirs.log && chown 65534 " .. d .. "/theirs.log"))
      f, err, errno = dir:append("theirs.log")
      assert.is_nil(f)
      assert.equal(E.EPERM, errno)
      assert.matches("theirs.log is owned by uid 65534", err)
    end
  end)
end)

describe("dir:bind and socket:recv", function()
  local d, dir
  before_each(function()
    d = tmpdir("711")
    dir = assert(core.dir_open(d))
  end)
  after_each(function()
    dir:close()
    rm(d)
  end)

  it("a notify socket gets its mode and its service's owner, never wider for a moment", function()
    local s = assert(dir:bind("n.sock", "dgram", { mode = octal("600") }))
    assert.equal("socket", lfs.attributes(d .. "/n.sock", "mode"))
    assert.equal("rw-------", lfs.attributes(d .. "/n.sock", "permissions"))
    s:close()
    if H.is_root() then
      s = assert(dir:bind("n.sock", "dgram", { mode = octal("600"), uid = 65534, gid = 65534 }))
      assert.equal(65534, lfs.attributes(d .. "/n.sock", "uid"))
      assert.equal(65534, lfs.attributes(d .. "/n.sock", "gid"))
      s:close()
    end
    -- a stale entry (here a link) is replaced, never followed
    local victim = d .. "/victim"
    assert(io.open(victim, "w")):close()
    assert(os.execute("chmod 600 " .. victim))
    os.remove(d .. "/n.sock")
    assert(lfs.link(victim, d .. "/n.sock", true))
    s = assert(dir:bind("n.sock", "dgram", { mode = octal("666") }))
    assert.equal("rw-------", lfs.attributes(victim, "permissions"))
    assert.equal("socket", lfs.attributes(d .. "/n.sock", "mode"))
    s:close()
  end)

  -- A descriptor passed with SCM_RIGHTS (systemd-notify's barrier passes
  -- one) is never closed in the reader's thread: its last close can block
  -- as long as the sender likes (here a TCP socket with SO_LINGER whose
  -- peer the sender holds and never reads). recv hands it to a thread of
  -- its own and returns while the sender still holds on.
  for _, how in ipairs { "scm_pidfd", "start time" } do
  it("a passed descriptor whose close would block never blocks recv (" .. how .. ")", function()
    if H.no_spawn then return pending(H.no_spawn) end
    if not io.open("/usr/bin/python3") then return pending("python3 is not installed") end
    local s = assert(dir:bind("r.sock", "dgram", { mode = octal("666"), sender = how }))
    local py = assert(takana.spawn { "/usr/bin/python3", "-c", ([[
import socket, struct, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); peer, _ = l.accept()
peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
c.setblocking(False)
try:
    while True: c.send(b"x" * 65536)
except BlockingIOError: pass
u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
u.sendmsg([b"READY=1"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", c.fileno()))], 0, "%s/r.sock")
c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 30))
c.close()
print("sent", flush=True)
time.sleep(20)
print("released", flush=True)
]]):format(d), stdout = "pipe" })
    local first = ""
    for _ = 1, 200 do
      first = first .. (py.stdout:read() or "")
      if first:find("\n") then break end
      takana.poll({ py.stdout }, 0.1)
    end
    assert.equal("sent\n", first)
    local data, pid
    for _ = 1, 100 do
      data, pid = s:recv()
      if data then break end
      takana.poll({ s }, 0.1)
    end
    assert.equal("READY=1", data)
    assert.equal(py.pid, pid)
    -- recv came back while the sender still holds the peer (it says
    -- "released" only after 20 s): the lingering close did not run here
    assert.equal("", py.stdout:read())
    assert.is_true(py:alive())
    py:signal("KILL")
    py:wait()
    s:close()
  end)
  end

  -- A unix socket passed with a lingering TCP socket queued inside it: the
  -- TCP socket's last close comes with the unix socket's, here with the
  -- close of the notify socket that still holds the message unread. That
  -- close is a closing thread's, and each level is defused before.
  it("closing a socket that holds passed sockets nested in sockets never blocks", function()
    if H.no_spawn then return pending(H.no_spawn) end
    if not io.open("/usr/bin/python3") then return pending("python3 is not installed") end
    local s = assert(dir:bind("n.sock", "dgram", { mode = octal("666") }))
    local py = assert(takana.spawn { "/usr/bin/python3", "-c", ([[
import socket, struct, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); peer, _ = l.accept()
peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
c.setblocking(False)
try:
    while True: c.send(b"x" * 65536)
except BlockingIOError: pass
c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 30))
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", c.fileno()))])
c.close()
u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
u.sendmsg([b"READY=1"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", b.fileno()))], 0, "%s/n.sock")
b.close(); a.close()
print("sent", flush=True)
time.sleep(20)
print("released", flush=True)
]]):format(d), stdout = "pipe" })
    local first = ""
    for _ = 1, 200 do
      first = first .. (py.stdout:read() or "")
      if first:find("\n") then break end
      takana.poll({ py.stdout }, 0.1)
    end
    assert.equal("sent\n", first)
    s:close() -- the message unread: its nested sockets go with this close
    assert.equal("", py.stdout:read())
    assert.is_true(py:alive())
    py:signal("KILL")
    py:wait()
  end)

  it("binds beneath the fd a name whose full path would not fit a socket address", function()
    local deep = d .. "/" .. string.rep("d", 100)
    local long = assert(core.dir_open(deep, { create = true }))
    local s = assert(long:bind("x.sock", "listen"))
    assert.equal("socket", lfs.attributes(deep .. "/x.sock", "mode"))
    s:close()
    long:close()
  end)

  -- A sender that exits before its message is read, and a later process
  -- given its pid (ns_last_pid, in a pid namespace of the spec's own):
  -- recv names the pid but gives no sender, both with the kernel's pidfd
  -- and with the start-time check of older kernels.
  for _, how in ipairs { "scm_pidfd", "start time" } do
    it("a sender gone and its pid reused is not the sender (" .. how .. ") #root", function()
      local why = why_not_root()
      if why then return pending(why) end
      if not io.open("/usr/bin/python3") then return pending("python3 is not installed") end
      local script = d .. "/reuse.lua"
      local f = assert(io.open(script, "w"))
      f:write(([[
local takana = require "takana"
local core = require "takana.core"
local dir = assert(core.dir_open(%q))
local s = assert(dir:bind("r.sock", "dgram", { mode = 438, sender = %q }))
local send = { "/usr/bin/python3", "-c",
  "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b'WATCHDOG=trigger', '%s/r.sock')" }
-- a live sender first: it is the sender
-- (python's environment without the ASan runtime make test-asan preloads)
local env = { PATH = "/usr/bin:/bin" }
send.env = env
local keep = assert(takana.spawn { "/usr/bin/python3", "-c", send[3] .. "; import time; time.sleep(5)", env = env })
local data, pid, sender, got
for _ = 1, 200 do
  data, pid, _, _, sender, got = s:recv()
  if data then break end
  takana.poll({ s }, 0.05)
end
if got ~= %q then print("no SCM_PIDFD") os.exit(0) end
assert(data == "WATCHDOG=trigger" and pid == keep.pid and sender and sender:alive(),
  "live sender: " .. tostring(pid) .. " " .. tostring(sender) .. " " .. tostring(got))
sender:close()
keep:signal("KILL") keep:wait()
-- the sender exits; a later process gets its pid
local p = assert(takana.spawn(send))
local spid = p.pid
p:wait()
takana.poll({}, 0.05)
local w = assert(io.open("/proc/sys/kernel/ns_last_pid", "w"))
w:write(tostring(spid - 1)) w:close()
local later = assert(takana.spawn { "sleep", "5", env = env })
assert(later.pid == spid, "pid not reused: " .. later.pid .. " vs " .. spid)
data, pid, _, _, sender, got = s:recv()
later:signal("KILL") later:wait()
assert(data == "WATCHDOG=trigger", tostring(pid))
assert(pid == spid and sender == nil and got == %q, "believed: " .. tostring(sender))
print("ok")
]]):format(d, how, d, how, how))
      f:close()
      local _, out = H.run("env LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' " ..
        "unshare -p -f --mount-proc " .. H.lua .. " " .. H.shell_quote(script) .. " 2>&1")
      if out == "no SCM_PIDFD\n" then return pending("this kernel has no SO_PASSPIDFD (6.5+): the start-time check runs") end
      assert.equal("ok\n", out)
    end)
  end
end)

-- Every place the supervisor and `takana export` write, planted by uid
-- 65534 with a directory or a link: root refuses each with the reason.
describe("planted by another user", function()
  local base, cgpath, cgname
  local ENV = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;", PATH = os.getenv("PATH") }
  before_each(function()
    base = tmpdir("1777") -- as /tmp: sticky, anyone may plant a name
    assert(os.execute("chmod 1777 " .. base))
  end)
  after_each(function()
    rm(base)
    if cgpath then H.cgroup_cleanup(cgpath) cgpath = nil end
  end)

  local function why_not()
    local why = why_not_root()
    if why then return why end
    if not H.cgroup2_mount() then return "no cgroup2 hierarchy is mounted" end
    if not io.open("/usr/bin/python3") then return "python3 is not installed (Debian's python3)" end
  end

  it("the runtime and control directories: a planted directory or link is refused #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local mine = base .. "/mine"
    assert(os.execute("mkdir -m 700 " .. mine))
    as_nobody("mkdir -m 777 " .. base .. "/rt && ln -s " .. mine .. " " .. base .. "/link")
    for _, case in ipairs {
      { runtime = base .. "/rt", why = "rt is owned by uid 65534" },
      { runtime = base .. "/link", why = "link is a symbolic link owned by uid 65534" },
      { control = base .. "/rt/ctl.sock", why = "rt is owned by uid 65534" },
      { runtime = base .. "/rt/sub", why = "rt is owned by uid 65534" },
    } do
      local sup, err, errno = takana.supervisor { cgroup = cgname .. "/sup", signals = false,
        runtime = case.runtime, control = case.control }
      assert.is_nil(sup)
      assert.is_true(errno == E.EPERM or errno == E.ELOOP, err)
      assert.truthy(err:find(case.why, 1, true), err)
    end
    -- a link owned by another user is not followed even to a good directory
    assert.is_nil(lfs.attributes(mine .. "/sub"))
  end)

  it("a log directory: a planted link or file is never written; a directory others can write is refused #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local logs, victim = base .. "/logs", base .. "/victim"
    local v = assert(io.open(victim, "w"))
    v:write("root only\n")
    v:close()
    assert(os.execute("chmod 600 " .. victim))
    -- the usual /var/log/app owned by the app's user: it may plant anything
    as_nobody("mkdir -m 755 " .. logs .. " && ln -s " .. victim .. " " .. logs .. "/app.log && touch " ..
      logs .. "/own.log && mkfifo " .. logs .. "/fifo.log")
    local sup = assert(takana.supervisor { cgroup = cgname .. "/sup", signals = false, log = logs,
      runtime = base .. "/rt" })
    for _, name in ipairs { "app", "own", "fifo" } do
      sup:service { name = name, cmd = { "sh", "-c", "echo attacker line" }, restart = "never",
        user = 65534, group = 65534 }
    end
    for _ = 1, 100 do
      sup:step(0.05)
      local done = true
      -- (the logger process tells each log_error as it meets it)
      for _, name in ipairs { "app", "own", "fifo" } do
        done = done and sup:get(name).last_exit ~= nil and sup:get(name).log_error ~= nil
      end
      if done then break end
    end
    assert.matches("app.log is a symbolic link", sup:get("app").log_error)
    assert.matches("own.log is owned by uid 65534", sup:get("own").log_error)
    assert.matches("fifo.log is a FIFO or socket", sup:get("fifo").log_error)
    -- the lines are still kept in memory for `ctl logs`
    assert.matches("stdout attacker line$", sup:logs("app")[1])
    sup:shutdown()
    for _ = 1, 100 do if not sup:step(0.05) then break end end
    sup:close()
    assert.equal("root only\n", H.read(victim))
    assert.equal("rw-------", lfs.attributes(victim, "permissions"))
    -- writable by others and not sticky: refused at construction
    as_nobody("mkdir -m 777 " .. base .. "/open && chmod 777 " .. base .. "/open")
    local bad, err, errno = takana.supervisor { cgroup = cgname .. "/sup", signals = false,
      log = base .. "/open", runtime = base .. "/rt" }
    assert.is_nil(bad)
    assert.equal(E.EPERM, errno)
    assert.matches("open is writable by group or others", err)
  end)

  it("export --textfile: a directory others can write is refused, a planted link is replaced, not followed #root", function()
    local why = why_not_root()
    if why then return pending(why) end
    local victim = base .. "/victim"
    assert(io.open(victim, "w")):close()
    assert(os.execute("chmod 600 " .. victim))
    as_nobody("mkdir -m 777 " .. base .. "/open && chmod 777 " .. base .. "/open")
    local ok, err, errno = takana.textfile_write(base .. "/open", "takana.prom", "x 1\n")
    assert.is_nil(ok)
    assert.equal(E.EPERM, errno)
    assert.matches("textfile directory .*open is writable by group or others", err)
    -- sticky (as /tmp): another user's link at the name is replaced
    as_nobody("ln -s " .. victim .. " " .. base .. "/takana.prom")
    assert.is_true(takana.textfile_write(base, "takana.prom", "x 1\n"))
    assert.equal("file", lfs.symlinkattributes(base .. "/takana.prom", "mode"))
    assert.equal("", H.read(victim))
    local _, out = H.run("env LUA_PATH='" .. ENV.LUA_PATH .. "' LUA_CPATH='" .. ENV.LUA_CPATH .. "' " .. H.lua ..
      " bin/takana export --textfile " .. H.shell_quote(base .. "/open") .. " 2>&1; echo rc=$?")
    assert.matches("writable by group or others", out)
    assert.matches("rc=1", out)
  end)
end)

-- The third audit's supervisor reproducers, as specs: a failed pipe() or
-- cgroup mkdir under EMFILE, a service name too long for a socket address
-- under a long runtime path, close() and its cgroup descriptors, and a
-- service's STATUS= reaching `ctl status` escaped.
describe("audit 3: the supervisor loop", function()
  local cgpath, cgname, base
  local function why_not()
    local why = why_not_root()
    if why then return why end
    if not H.cgroup2_mount() then return "no cgroup2 hierarchy is mounted" end
    if not io.open("/usr/bin/python3") then return "python3 is not installed (Debian's python3)" end
  end
  before_each(function() base = tmpdir("711") end) -- a service of uid 65534 reaches its socket
  after_each(function()
    rm(base)
    if cgpath then H.cgroup_cleanup(cgpath) cgpath = nil end
  end)

  local function finish(sup)
    sup:shutdown()
    for _ = 1, 200 do if not sup:step(0.05) then break end end
    sup:close()
  end

  -- Holds every free descriptor but `spare`; returns the release function.
  local function exhaust(spare)
    local held = {}
    while true do
      local f = io.open("/dev/null")
      if not f then break end
      held[#held + 1] = f
    end
    for _ = 1, spare do table.remove(held):close() end
    return function()
      for _, f in ipairs(held) do f:close() end
      collectgarbage()
    end
  end

  it("a pipe() or cgroup failure under EMFILE is retried with backoff, never raised (#4, #8) #slow #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local sup = assert(takana.supervisor { cgroup = cgname .. "/sup", signals = false, runtime = base .. "/rt" })
    sup:service { name = "s6", cmd = { "sh", "-c", "echo >&3; exec sleep 30" }, ready = { fd = 3 },
      backoff = { initial = 0.2 }, start_limit = { burst = 0 } }
    sup:service { name = "web", cmd = { "sleep", "30" }, backoff = { initial = 0.2 }, start_limit = { burst = 0 } }
    local release = exhaust(1)
    local ok, err
    for _ = 1, 10 do
      ok, err = pcall(sup.step, sup, 0.05)
      if not ok then break end
    end
    release()
    assert.is_true(ok, err)
    for _, name in ipairs { "s6", "web" } do
      local svc = sup:get(name)
      assert.equal("backoff", svc.state, name .. ": " .. tostring(svc.reason))
      assert.matches("Too many open files", svc.reason)
    end
    for _ = 1, 100 do
      sup:step(0.05)
      if sup:get("s6").state == "running" and sup:get("web").state == "running" then break end
    end
    assert.equal("running", sup:get("s6").state)
    assert.equal("running", sup:get("web").state)
    finish(sup)
  end)

  it("a name too long for a socket address under its runtime gets a short notify socket (#5) #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local rt = base .. "/" .. string.rep("r", 60)
    local sup = assert(takana.supervisor { cgroup = cgname .. "/sup", signals = false, runtime = rt })
    local name = "payments-reconciliation-worker-eu-west-1-primary-shard07"
    local svc = sup:service { name = name, ready = "notify",
      cmd = { "sh", "-c", "exec /usr/bin/python3 -c \"import os,socket,time; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); " ..
        "s.sendto(b'READY=1', os.environ['NOTIFY_SOCKET']); time.sleep(30)\"" } }
    assert.equal("_1.notify", svc.notify_name)
    for _ = 1, 600 do
      local ok, err = pcall(sup.step, sup, 0.05)
      assert.is_true(ok, err)
      if svc.state == "running" then break end
    end
    assert.equal("running", svc.state)
    finish(sup)
    -- a runtime directory too long for any socket beneath it is refused
    local bad, err, errno = takana.supervisor { cgroup = cgname .. "/sup", signals = false,
      runtime = base .. "/" .. string.rep("x", 100) }
    assert.is_nil(bad)
    assert.equal(E.ENAMETOOLONG, errno)
    assert.matches("longer than 94 bytes", err)
  end)

  it("close() closes every cgroup descriptor and removes its sockets and directory (#11) #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local function cgroup_fds()
      local n = 0
      for fd = 0, 1023 do
        local t = lfs.symlinkattributes("/proc/self/fd/" .. fd, "target")
        if t and t:find("/sys/fs/cgroup", 1, true) then n = n + 1 end
      end
      return n
    end
    collectgarbage("stop")
    local before = cgroup_fds()
    local sup = assert(takana.supervisor { cgroup = cgname .. "/sup", signals = false, runtime = base .. "/rt",
      control = base .. "/rt/ctl.sock" })
    for i = 1, 3 do sup:service { name = "s" .. i, cmd = { "true" }, restart = "never", ready = "notify" } end
    for _ = 1, 10 do sup:step(0.02) end
    sup:close()
    local after = cgroup_fds()
    collectgarbage("restart")
    assert.equal(before, after)
    -- its sockets removed, and the runtime directory it made with them
    assert.is_nil(lfs.attributes(base .. "/rt"))
  end)

  it("300 services fit a login's 1,024 descriptors; each service gets that soft limit back (#11) #slow #root", function()
    local why = why_not()
    if why then return pending(why) end
    local _, hard = core.nofile_hold()
    if hard < 4096 then return pending("the hard descriptor limit is " .. hard .. ": nothing to raise the soft one to") end
    cgpath, cgname = H.test_cgroup_path()
    local script = base .. "/many.lua"
    local f = assert(io.open(script, "w"))
    f:write(([[
local takana = require "takana"
local sup = assert(takana.supervisor { cgroup = %q, signals = false, runtime = %q })
for i = 1, 300 do sup:service { name = "s" .. i, cmd = { "sleep", "60" }, restart = "never" } end
local running
for _ = 1, 600 do
  sup:step(0.02)
  running = 0
  for i = 1, 300 do if sup:get("s" .. i).state == "running" then running = running + 1 end end
  if running == 300 then break end
end
local limits = io.open("/proc/" .. sup:get("s1").pid .. "/limits"):read("a")
print(running, limits:match("Max open files%%s+(%%d+)"))
sup:shutdown()
for _ = 1, 600 do if not sup:step(0.05) then break end end
sup:close()
]]):format(cgname .. "/sup", base .. "/rt"))
    f:close()
    local _, out = H.run("ulimit -Sn 1024 && env LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' " ..
      H.lua .. " " .. H.shell_quote(script))
    assert.equal("300\t1024\n", out)
  end)

  it("ctl status shows a service's STATUS= escapes escaped (#12) #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local rt = base .. "/rt"
    local sup = assert(takana.supervisor { cgroup = cgname .. "/sup", signals = false, runtime = rt,
      control = rt .. "/ctl.sock" })
    local svc = sup:service { name = "svc", user = 65534, group = 65534, ready = "notify", cmd = { "sh", "-c",
      "exec /usr/bin/python3 -c \"import os,socket,time; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); " ..
      "s.sendto(b'READY=1\\nSTATUS=ok \\x1b]0;pwned\\x07\\x1b[2J', os.environ['NOTIFY_SOCKET']); time.sleep(30)\"" } }
    for _ = 1, 200 do
      sup:step(0.05)
      if svc.state == "running" then break end
    end
    assert.equal("running", svc.state)
    assert.equal("ok \27]0;pwned\7\27[2J", svc.status_text)
    local argv = { table.unpack(H.lua_argv) }
    for _, a in ipairs { "bin/takana", "ctl", rt .. "/ctl.sock", "status" } do argv[#argv + 1] = a end
    argv.stdout = "pipe"
    argv.env = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;", PATH = os.getenv("PATH") }
    local ctl = assert(takana.spawn(argv))
    local text = ""
    for _ = 1, 200 do
      sup:step(0.02)
      text = text .. (ctl.stdout:read() or "")
      if not ctl:alive() then break end
    end
    text = text .. (ctl.stdout:read_all(2) or "")
    ctl:wait()
    assert.is_nil(text:find("\27", 1, true))
    assert.truthy(text:find("status: ok \\x1b]0;pwned\\x07\\x1b[2J", 1, true), text)
    finish(sup)
  end)
end)

-- What a fresh adversarial review of the fixes found (issue 21's last
-- step), each kept as a spec.
describe("issue 21's review", function()
  local cgpath, cgname, base
  local function why_not()
    local why = why_not_root()
    if why then return why end
    if not H.cgroup2_mount() then return "no cgroup2 hierarchy is mounted" end
    if not io.open("/usr/bin/python3") then return "python3 is not installed (Debian's python3)" end
  end
  before_each(function()
    base = tmpdir("1777")
    assert(os.execute("chmod 1777 " .. base))
  end)
  after_each(function()
    rm(base)
    if cgpath then H.cgroup_cleanup(cgpath) cgpath = nil end
  end)

  it("a notify line that is no KEY=value is ignored; a flood is read 64 messages a wake-up #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local sup = assert(takana.supervisor { cgroup = cgname .. "/sup", signals = false, runtime = base .. "/rt" })
    local svc = sup:service { name = "web", ready = "notify", cmd = { "sh", "-c",
      "exec /usr/bin/python3 -c \"import os,socket,time; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); " ..
      "[s.sendto(m, os.environ['NOTIFY_SOCKET']) for m in (b'hello', b'lower=1', b'=x', b'X9=1\\nREADY=1')]; " ..
      "time.sleep(30)\"" } }
    for _ = 1, 600 do
      local ok, err = pcall(sup.step, sup, 0.05)
      assert.is_true(ok, err)
      if svc.state == "running" then break end
    end
    assert.equal("running", svc.state)
    -- datagrams from outside the service (a process of this spec's): all
    -- rejected, no more than notify_batch a wake-up (the queue holds
    -- net.unix.max_dgram_qlen, 10 by default: the batch is set below it)
    sup.notify_batch = 4
    local path = base .. "/rt/web.notify"
    local py = assert(takana.spawn { "/usr/bin/python3", "-c", ("import socket; s=socket.socket(socket.AF_UNIX, " ..
      "socket.SOCK_DGRAM); n = 0\ntry:\n  while n < 1000: s.sendto(b'WATCHDOG=trigger', socket.MSG_DONTWAIT, " ..
      "'%s'); n += 1\nexcept BlockingIOError: pass\nprint(n)"):format(path), stdout = "pipe" })
    local sent = tonumber(py.stdout:read_all(10))
    py:wait()
    assert.is_true(sent > 4, "the queue took " .. tostring(sent))
    local before = svc.notify_rejected or 0
    sup:_notify(svc)
    assert.equal(4, (svc.notify_rejected or 0) - before)
    for _ = 1, 40 do sup:step(0.01) end
    assert.equal(sent, (svc.notify_rejected or 0) - before)
    assert.equal("running", svc.state)
    sup:shutdown()
    for _ = 1, 200 do if not sup:step(0.05) then break end end
    sup:close()
  end)

  it("a control socket's existing directory keeps its mode; a sticky world-writable one is refused #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local d = base .. "/run"
    assert(os.execute("mkdir -m 755 " .. d))
    local sup = assert(takana.supervisor { cgroup = cgname .. "/sup", signals = false, runtime = base .. "/rt",
      control = d .. "/demo.sock" })
    assert.equal("rwxr-xr-x", lfs.attributes(d, "permissions"))
    assert.equal("rw-------", lfs.attributes(d .. "/demo.sock", "permissions"))
    sup:close()
    assert.is_nil(lfs.attributes(d .. "/demo.sock"))
    local bad, err, errno = takana.supervisor { cgroup = cgname .. "/sup", signals = false, runtime = base .. "/rt",
      control = base .. "/demo.sock" }
    assert.is_nil(bad)
    assert.equal(E.EPERM, errno)
    assert.matches("writable by group or others %(mode 1777%)", err)
    assert.equal("1777\n", select(2, H.run("stat -c %a " .. H.shell_quote(base))))
  end)

  it("another user's link at a log or textfile directory is not followed #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    local victim = base .. "/victimdir"
    assert(os.execute("mkdir -m 755 " .. victim))
    as_nobody("mkdir -m 755 " .. base .. "/app && ln -s " .. victim .. " " .. base .. "/app/logs")
    local sup, err, errno = takana.supervisor { cgroup = cgname .. "/sup", signals = false,
      runtime = base .. "/rt", log = base .. "/app/logs" }
    assert.is_nil(sup)
    assert.equal(E.ELOOP, errno)
    assert.matches("app/logs is a symbolic link owned by uid 65534: another user's link is not followed", err)
    local ok
    ok, err, errno = takana.textfile_write(base .. "/app/logs", "takana.prom", "x 1\n")
    assert.is_nil(ok)
    assert.equal(E.ELOOP, errno)
    assert.matches("symbolic link owned by uid 65534", err)
    local names = {}
    for f in lfs.dir(victim) do if f ~= "." and f ~= ".." then names[#names + 1] = f end end
    assert.same({}, names)
    -- a link of root's own is followed
    assert(lfs.link(victim, base .. "/rootlink", true))
    assert(takana.textfile_write(base .. "/rootlink", "takana.prom", "x 1\n"))
    assert.equal("x 1\n", H.read(victim .. "/takana.prom"))
  end)

  it("the default runtime directory names one cgroup path (a/b and a_b differ) #root", function()
    local why = why_not()
    if why then return pending(why) end
    cgpath, cgname = H.test_cgroup_path()
    assert(os.execute("mkdir " .. H.shell_quote(cgpath .. "/a")))
    local a = assert(takana.supervisor { cgroup = cgname .. "/a/b", signals = false })
    local b = assert(takana.supervisor { cgroup = cgname .. "/a_b", signals = false })
    local enc = cgname:gsub("%-", "%%-")
    assert.matches("^/run/takana/" .. enc .. "_2fa_2fb$", a.runtime)
    assert.matches("^/run/takana/" .. enc .. "_2fa_5fb$", b.runtime)
    assert.equal("rwx--x--x", lfs.attributes(a.runtime, "permissions"))
    a:close()
    b:close()
    assert.is_nil(lfs.attributes(a.runtime)) -- made by it, removed by close()
    assert.is_nil(lfs.attributes(b.runtime))
  end)
end)

-- A second fresh review's findings, each kept as a spec.
describe("issue 21's second review", function()
  local cgpath, cgname, base
  before_each(function()
    base = tmpdir("1777")
    assert(os.execute("chmod 1777 " .. base))
  end)
  after_each(function()
    rm(base)
    if cgpath then H.cgroup_cleanup(cgpath) cgpath = nil end
  end)

  it("what a service wrote reaches a terminal inert: ctl status text and ctl --json", function()
    local util = require "takana.util"
    local S = require "takana.supervisor"
    local hostile = "A\27]0;pwn\7B\194\15531mC\155D\226\128\174E\192\155F\226\129\166G é😀"
    assert.equal("A\\x1b]0;pwn\\x07B\\u009b31mC\\x9bD\\u202eE\\xc0\\x9bF\\u2066G é😀", util.printable(hostile))
    local json = S.json_encode { status = hostile }
    assert.is_nil(json:find("[\0-\31\127-\255]"))
    assert.equal('{"status":"A\\u001b]0;pwn\\u0007B\\u009b31mC\\ufffdD\\u202eE\\ufffd\\ufffdF\\u2066G ' ..
      '\\u00e9\\ud83d\\ude00"}', json)
    local text = S.format_status { { name = "svc", state = "running", status = hostile, restarts = "x",
      last_exit = { error = "\27[2J" } } }
    assert.is_nil(text:find("\27", 1, true))
    assert.is_nil(text:find("\155", 1, true))
    assert.matches("restarts: 0", text)
  end)

  it("a relative path is checked from / like an absolute one #root", function()
    local why = why_not_root()
    if why then return pending(why) end
    as_nobody("mkdir -m 755 " .. base .. "/att")
    assert(os.execute("mkdir -m 755 " .. base .. "/att/adm"))
    local here = lfs.currentdir()
    assert(lfs.chdir(base .. "/att/adm"))
    local ok, dir, err, errno = pcall(core.dir_open, "rt", { create = true, private = true })
    local ok2, dir2, err2 = pcall(core.dir_open, "../rt2", { create = true, private = true })
    assert(lfs.chdir(here))
    assert.is_true(ok, dir)
    assert.is_nil(dir)
    assert.equal(E.EPERM, errno)
    assert.matches("/att is owned by uid 65534", err)
    assert.is_true(ok2, dir2)
    assert.is_nil(dir2)
    assert.matches("/att is owned by uid 65534", err2)
    assert.is_nil(lfs.attributes(base .. "/att/adm/rt"))
    assert.is_nil(lfs.attributes(base .. "/att/rt2"))
  end)

  it("a rotation that cannot move a file stops with the reason and removes nothing #root", function()
    local why = why_not_root()
    if why then return pending(why) end
    if not H.cgroup2_mount() then return pending("no cgroup2 hierarchy is mounted") end
    cgpath, cgname = H.test_cgroup_path()
    local logs = base .. "/logs"
    assert(os.execute("mkdir -m 1777 " .. logs .. " && chmod 1777 " .. logs))
    as_nobody("mkdir -p " .. logs .. "/svc.log.1/keep " .. logs .. "/svc.log.2/keep")
    local sup = assert(takana.supervisor { cgroup = cgname .. "/sup", signals = false, log = logs,
      runtime = base .. "/rt", log_size = 300, log_files = 3 })
    local svc = sup:service { name = "svc", restart = "never",
      cmd = { "sh", "-c", "i=1; while [ $i -le 40 ]; do echo line $i; i=$((i+1)); done" } }
    for _ = 1, 200 do
      sup:step(0.05)
      if svc.last_exit and svc.log_error then break end
    end
    assert.truthy(svc.last_exit)
    assert.matches("^rotation: rename .*svc.log.1.*; file logging stopped until the next run$", svc.log_error)
    -- every line still in memory (the logger's, which may be a step behind)
    local last
    for _ = 1, 100 do
      last = sup:logs("svc", 1)[1]
      if last and last:match("line 40$") then break end
      sup:step(0.05)
    end
    assert.matches("stdout line 40$", last)
    sup:shutdown()
    for _ = 1, 100 do if not sup:step(0.05) then break end end
    sup:close()
    -- nothing removed, nothing past the size that stopped it (about 300
    -- bytes and a line)
    local text = H.read(logs .. "/svc.log")
    assert.matches("^[^\n]* stdout line 1\n", text)
    assert.is_true(#text < 300 + 100, #text)
  end)
end)
