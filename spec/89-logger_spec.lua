-- takana.supervisor's logger process (issue 22): services' output pipes
-- held by a process that outlives the supervisor, handed over with
-- SCM_RIGHTS; a supervisor killed and restarted loses and doubles no line;
-- a clean shutdown leaves no logger; a flood is the logger's to write.
-- Every cgroup is under a takana-test-* directory this file creates and
-- removes; waits are bounded step counts, never timing assertions.
local takana = require "takana"
local core = require "takana.core"
local S = require "takana.supervisor"
local H = require "helpers"

local ENV = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;",
  PATH = os.getenv("PATH") }

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -m 700 " .. d))
  return d
end

local function slurp(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("unix sockets pass descriptors", function()
  it("send_fd/recv_fds hand a pipe's read end over; peer names the listener", function()
    local d = tmpdir()
    finally(function() os.execute("rm -rf " .. H.shell_quote(d)) end)
    local dir = assert(core.dir_open(d, { private = true }))
    local ls = assert(dir:bind("s", "listen", { mode = 384 }))
    local c = assert(core.unix_connect(d .. "/s", 1))
    local a, apid, auid = assert(ls:accept())
    assert.equal(core.getpid(), apid)
    local pid, uid, gid = assert(c:peer())
    assert.equal(core.getpid(), pid)
    assert.equal(core.geteuid(), uid)
    assert.equal(auid, uid)
    assert.equal("number", math.type(gid) and "number")
    local r, w = assert(core.pipe())
    assert.equal(6, c:send_fd("pipe 1", r))
    r:close() -- the receiver's copy is its own
    c:write("\nplain\n")
    local data, fds = assert(a:recv_fds())
    assert.equal("pipe 1", data:sub(1, 6))
    assert.equal(1, #fds)
    assert.equal("takana.Pipe", tostring(fds[1]):match("^%S+"))
    local rest = ""
    for _ = 1, 50 do
      local more, none = a:recv_fds()
      if more then
        rest = rest .. more
        assert.equal(0, #none)
      end
      if (data .. rest):find("plain\n", 1, true) then break end
      core.poll_fds({ a:fileno() }, 0.05)
    end
    assert.equal("pipe 1\nplain\n", data .. rest)
    assert.equal(6, w:write("hello\n"))
    assert.equal("hello\n", fds[1]:read())
    w:close()
    assert.is_nil(fds[1]:read()) -- the writer's only copy closed: end of file
    local _, _, errno = a:recv_fds()
    assert.equal(core.errno.EAGAIN, errno)
    assert.has_error(function() c:send_fd("", fds[1]) end)
    assert.has_error(function() c:send_fd("x", {}) end)
    fds[1]:close()
    assert.has_error(function() c:send_fd("x", fds[1]) end)
    assert.has_error(function() ls:send_fd("x", a) end)
    assert.has_error(function() a:recv_fds(0) end)
    assert.has_error(function() ls:peer() end)
    c:close()
    assert.equal("", (a:recv_fds()))
    a:close() ls:close() dir:close()
  end)
end)

describe("takana.supervisor logger", function()
  local why
  if not H.is_root() then why = "needs root to create cgroups"
  elseif H.no_spawn then why = H.no_spawn
  elseif not H.cgroup2_mount() then why = "no cgroup2 hierarchy is mounted" end
  local box, boxname, dir, sup
  local started = {}

  local function track(p)
    started[#started + 1] = p
    return p
  end

  before_each(function()
    if why then return end
    box, boxname = H.test_cgroup_path()
    dir = tmpdir()
  end)

  after_each(function()
    for _, p in ipairs(started) do
      if p:alive() then p:signal("KILL") end
      p:wait()
      p:close()
    end
    started = {}
    if sup then
      sup:shutdown()
      for _ = 1, 100 do if sup:step(0.05) == false then break end end
      sup:close()
      sup = nil
    end
    if box then H.cgroup_cleanup(box) end
    if dir then os.execute("rm -rf " .. H.shell_quote(dir)) end
    box, dir = nil, nil
  end)

  local function procs(rel)
    local cg = takana.cgroup(rel)
    if not cg then return {} end
    local p = cg:procs() or {}
    cg:close()
    return p
  end

  it("kill -9 of the supervisor: the service lives on, a restarted one adopts it and its logger, "
    .. "no line lost or doubled, a clean shutdown leaves no logger #root", function()
    if why then return pending(why) end
    local file, logdir, sock = dir .. "/sup.lua", dir .. "/log", dir .. "/ctl.sock"
    local function write(adopt)
      local f = assert(io.open(file, "w"))
      f:write(([[
local sup = assert(require("takana").supervisor { cgroup = %q, control = %q, runtime = %q, log = %q, adopt = %s })
sup:service { name = "count", cmd = { "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.01; done" } }
return sup
]]):format(boxname .. "/sup", sock, dir .. "/rt", logdir, tostring(adopt)))
      f:close()
    end
    local function supervise()
      local argv = { table.unpack(H.lua_argv) }
      for _, a in ipairs { "bin/takana", "supervise", file } do argv[#argv + 1] = a end
      argv.env = ENV
      argv.stderr = "pipe"
      return track(assert(takana.spawn(argv)))
    end
    local function running()
      for _ = 1, 200 do
        local r = S.request(sock, { cmd = "status", name = "count" }, 2)
        local st = r and r.ok and r.services[1]
        if st and st.state == "running" then return st end
        takana.poll({}, 0.05)
      end
    end
    -- The numbers in the log, once it holds at least n of them.
    local function numbers(n)
      local got
      for _ = 1, 200 do
        got = {}
        for num in (slurp(logdir .. "/count.log") or ""):gmatch("%dZ stdout (%d+)\n") do got[#got + 1] = tonumber(num) end
        if #got >= n then return got end
        takana.poll({}, 0.05)
      end
      return got
    end
    write(false)
    local p1 = supervise()
    local st1 = assert(running())
    local logger = procs(boxname .. "/sup/_logger")
    assert.equal(1, #logger)
    local before = #numbers(20)
    p1:signal("KILL")
    assert.equal(9, p1:wait().signal)
    -- The service goes on writing (no SIGPIPE), into pipes the logger reads.
    local after = numbers(before + 30)
    assert.is_true(#after >= before + 30)
    local alive = false -- (its sleep is there too, at times)
    for _, pid in ipairs(procs(boxname .. "/sup/count")) do alive = alive or pid == st1.pid end
    assert.is_true(alive)
    assert.same(logger, procs(boxname .. "/sup/_logger"))
    write(true)
    local p2 = supervise()
    local st2 = assert(running())
    assert.is_true(st2.adopted)
    assert.equal(st1.pid, st2.pid)
    local r = assert(S.request(sock, { cmd = "logs", name = "count", lines = 3 }, 2))
    assert.equal(3, #r.lines)    -- the logger's ring, through the new supervisor
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%d%d%d%dZ stdout %d+$", r.lines[3])
    numbers(#after + 20)
    p2:signal("TERM")            -- a clean shutdown: the service stopped, then the logger told to exit
    assert.equal(0, p2:wait(30).code)
    assert.is_nil(takana.cgroup(boxname .. "/sup/_logger"))
    assert.is_false(takana.pidfd(logger[1]) ~= nil and takana.pidfd(logger[1]):alive())
    assert.is_nil(io.open(dir .. "/rt/logger.sock"))
    local all = numbers(0)
    assert.is_true(#all > #after)
    for i, num in ipairs(all) do
      if num ~= i then error(("line %d holds %d: a line lost or doubled"):format(i, num)) end
    end
  end)

  it("a flood of one service is the logger's: a sibling restarts meanwhile, every flood line is written #root", function()
    if why then return pending(why) end
    local logdir = dir .. "/log"
    -- (under make test-asan this process's environment has no sanitizer
    -- to preload: the logger gets H.lua_argv's)
    local asan = os.getenv("TAKANA_ASAN_PRELOAD") and H.lua_argv or nil
    sup = assert(takana.supervisor { cgroup = boxname .. "/sup", runtime = dir .. "/rt", log = logdir,
      log_size = 64 * 1048576, log_files = 2, logger = asan })
    local lines = 100000 -- 10 MB in lines of 99 a's and a newline
    local flood = sup:service { name = "flood", restart = "never",
      cmd = { "sh", "-c", ("head -c %d /dev/zero | tr '\\0' a | fold -w 99"):format(lines * 99) } }
    local sib = sup:service { name = "sib", restart = "always", cmd = { "sh", "-c", "echo up; exit 3" },
      backoff = { initial = 0 }, start_limit = { burst = 0 } }
    local restarts_in_flood
    for _ = 1, 2000 do
      assert(sup:step(0.05) ~= nil)
      if flood.state == "running" and sib.restarts >= 5 and not restarts_in_flood then
        restarts_in_flood = sib.restarts
      end
      if flood.state == "stopped" then break end
    end
    assert.is_nil(sup.logger_error)
    assert.is_true(flood.logger)
    assert.is_nil(flood.out)     -- the supervisor holds none of the flood's pipe
    assert.is_true(restarts_in_flood >= 5)
    assert.equal(0, flood.last_exit.code)
    sup:shutdown()
    assert.is_true(sup:run())
    sup = nil
    -- the logger has exited: its files are whole
    local n, bad = 0, 0
    for line in io.lines(logdir .. "/flood.log") do
      n = n + 1
      if not line:match("Z stdout a+$") then bad = bad + 1 end
    end
    assert.equal(lines, n)
    assert.equal(0, bad)
    assert.matches("Z stdout up\n", slurp(logdir .. "/sib.log"))
    assert.is_nil(takana.cgroup(boxname .. "/sup"))
  end)

  it("ctl logs waits for the logger without the loop: a stalled logger's answer is refused after 2 s, and dropped #root", function()
    if why then return pending(why) end
    local asan = os.getenv("TAKANA_ASAN_PRELOAD") and H.lua_argv or nil
    local sock = dir .. "/ctl.sock"
    sup = assert(takana.supervisor { cgroup = boxname .. "/sup", runtime = dir .. "/rt", log = dir .. "/log",
      control = sock, logger = asan })
    local a = sup:service { name = "a", cmd = { "sh", "-c", "echo one; exec sleep 100" } }
    H.step_until(sup, function() return a.logger and #(sup:logs("a") or {}) == 1 end)
    assert.is_true(a.logger)
    -- The logger stopped (as a flooded one would be slow): a logs request
    -- waits, the loop goes on (status answers meanwhile on another
    -- connection), and after 2 s the request is refused.
    local logger = procs(boxname .. "/sup/_logger")[1]
    local lfd = assert(takana.pidfd(logger))
    finally(function() lfd:signal("CONT") lfd:close() end)
    assert(lfd:signal("STOP"))
    local c1, c2 = assert(core.unix_connect(sock)), assert(core.unix_connect(sock))
    -- (busted keeps the last finally a test gives: this one does it all)
    finally(function() lfd:signal("CONT") lfd:close() c1:close() c2:close() end)
    assert(c1:write('{"cmd":"logs","name":"a"}\n{"cmd":"status","name":"a"}\n'))
    assert(c2:write('{"cmd":"status","name":"a"}\n'))
    local got = { [c1] = "", [c2] = "" }
    local function lines(c) return select(2, got[c]:gsub("\n", "")) end
    for _ = 1, 200 do
      assert(sup:step(0.05) ~= nil)
      for c in pairs(got) do
        if #core.poll_fds({ c:fileno() }, 0) > 0 then got[c] = got[c] .. (c:read(65536) or "") end
      end
      if lines(c1) == 2 then break end
    end
    assert.equal(1, lines(c2))
    assert.is_true(S.json_decode(got[c2]:match("^[^\n]*")).ok)
    local first, second = got[c1]:match("^([^\n]*)\n([^\n]*)\n$")
    assert.same({ ok = false, errno = "ETIMEDOUT", error = "logs: the logger did not answer within 2 s" },
      S.json_decode(first))
    assert.equal("running", S.json_decode(second).services[1].state)
    -- Resumed, its late answer goes nowhere: the next logs gets its own.
    assert(lfd:signal("CONT"))
    assert(c1:write('{"cmd":"logs","name":"a"}\n'))
    got[c1] = ""
    for _ = 1, 200 do
      assert(sup:step(0.05) ~= nil)
      if #core.poll_fds({ c1:fileno() }, 0) > 0 then got[c1] = got[c1] .. (c1:read(65536) or "") end
      if lines(c1) == 1 then break end
    end
    local answer = S.json_decode(got[c1]:match("^[^\n]*"))
    assert.is_true(answer.ok)
    assert.equal(1, #answer.lines)
    assert.matches("Z stdout one$", answer.lines[1])
  end)

  it("an error in a logger handler reaches its supervisors, which print it; five a minute at most", function()
    -- The logger's stderr is /dev/null. Both ends' own functions, over a
    -- real socket: the logger's report, the supervisor's read.
    local d = tmpdir()
    finally(function() os.execute("rm -rf " .. d) end)
    local sdir = assert(core.dir_open(d, { private = true }))
    local ls = assert(sdir:bind("s", "listen", { mode = 384 }))
    local c = assert(core.unix_connect(d .. "/s", 1))
    local a = assert(ls:accept())
    -- (busted keeps the last finally a test gives: this one does it all)
    finally(function() a:close() c:close() ls:close() sdir:close() os.execute("rm -rf " .. d) end)
    local lg = setmetatable({ conns = {} }, S.Supervisor)
    lg.conns[{ sock = a, buf = "", fds = {} }] = true
    -- seven in a minute, two of them not sent; then a minute on
    for i = 1, 7 do lg:_logger_fault("logger.lua:1: attempt to index a nil value (field '" .. i .. "')") end
    lg.fault_window = 0
    lg:_logger_fault("late")
    local sv = setmetatable({ logger_conn = c, logger_buf = "", logger_waiters = {}, services = {} }, S.Supervisor)
    local written, stderr = {}, io.stderr
    io.stderr = { write = function(_, ...) written[#written + 1] = table.concat { ... } end } -- luacheck: ignore 122
    local ok, err = pcall(function()
      for _ = 1, 50 do
        core.poll_fds({ c:fileno() }, 0.1)
        sv:_logger_read()
        if #written == 6 then break end
      end
    end)
    io.stderr = stderr -- luacheck: ignore 122
    assert(ok, err)
    local want = {}
    for i = 1, 5 do
      want[i] = "takana supervisor: the logger reports: logger.lua:1: attempt to index a nil value (field '"
        .. i .. "')\n"
    end
    want[6] = "takana supervisor: the logger reports: late (and 2 before it, not sent: too many a minute)\n"
    assert.same(want, written)
    assert.equal("late", sv.logger_fault)
  end)

  it("a tail answer the supervisor does not take for 2 s costs that connection, never the logger; "
    .. "the supervisor finds it again #root", function()
    if why then return pending(why) end
    local asan = os.getenv("TAKANA_ASAN_PRELOAD") and H.lua_argv or nil
    local sock = dir .. "/ctl.sock"
    sup = assert(takana.supervisor { cgroup = boxname .. "/sup", runtime = dir .. "/rt", log = dir .. "/log",
      control = sock, logger = asan })
    -- 64 KiB tail answers, eight of them: more than the socket holds
    local chatty = sup:service { name = "chatty", restart = "never",
      cmd = { "sh", "-c", "yes $(printf %01000d 0) | head -n 300; exec sleep 100" } }
    local victim = sup:service { name = "victim", restart = "never",
      cmd = { "sh", "-c", "while :; do echo tick; sleep 0.1; done" } }
    H.step_until(sup, function() return chatty.logger and victim.logger and #(sup:logs("chatty") or {}) >= 60 end)
    assert.is_true(chatty.logger and victim.logger)
    local logger_child = sup.logger_child
    local logger = logger_child.pid
    local conns = {}
    finally(function() for _, c in ipairs(conns) do c:close() end end)
    for i = 1, 8 do
      conns[i] = assert(core.unix_connect(sock))
      assert(conns[i]:write('{"cmd":"logs","name":"chatty","lines":200}\n'))
    end
    H.step_until(sup, function() return #sup.logger_waiters >= 5 end)
    assert.is_true(#sup.logger_waiters >= 5)
    H.sleep(3)   -- the loop stalled: the logger gives up on its answers
    H.step_until(sup, function() return sup.logger_error end)
    assert.matches("^logger lost ", sup.logger_error)
    -- the logger lives on, with every pipe: the victim is not SIGPIPEd
    assert.is_true(logger_child:alive())
    assert.equal("running", victim.state)
    -- a second on, the next start finds the same logger again
    H.sleep(1.1)
    local later = sup:service { name = "later", restart = "never", cmd = { "sh", "-c", "echo later; exec sleep 100" } }
    H.step_until(sup, function() return later.logger end)
    assert.is_true(later.logger)
    assert.is_nil(sup.logger_error)
    assert.same({ logger }, procs(boxname .. "/sup/_logger"))
    assert.equal("running", victim.state)
  end)

  it("without a logger (not the standalone interpreter) lines are read in-process, and the reason is kept #root", function()
    if why then return pending(why) end
    local saved = _G.arg
    _G.arg = nil
    local ok, err = pcall(function()
      sup = assert(takana.supervisor { cgroup = boxname .. "/sup", runtime = dir .. "/rt", log = dir .. "/log" })
      local svc = sup:service { name = "hi", restart = "never", cmd = { "echo", "hello" } }
      H.step_until(sup, function() return svc.state == "stopped" end)
      assert.matches("no logger process %(this process is not the standalone Lua interpreter", sup.logger_error)
      assert.is_nil(svc.logger)
      assert.matches("Z stdout hello$", sup:logs("hi", 1)[1])
      assert.matches("Z stdout hello\n$", slurp(dir .. "/log/hi.log"))
      assert.same({}, procs(boxname .. "/sup/_logger"))
      sup:shutdown()
      assert.is_true(sup:run())
      -- logger = false: the supervisor's own loop, by choice, without a word
      sup = assert(takana.supervisor { cgroup = boxname .. "/sup2", runtime = dir .. "/rt2", log = dir .. "/log",
        logger = false })
      svc = sup:service { name = "hi", restart = "never", cmd = { "echo", "again" } }
      H.step_until(sup, function() return svc.last_exit end)
      assert.is_nil(sup.logger_error)
      assert.is_nil(svc.logger)
      assert.matches("Z stdout again$", sup:logs("hi", 1)[1])
    end)
    _G.arg = saved
    assert(ok, err)
  end)
end)
