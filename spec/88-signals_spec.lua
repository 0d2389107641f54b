-- Event-loop primitives: signals through a signalfd, timers, clocks, the
-- child-subreaper flag and the environment. Signals are sent by real
-- processes (a spawned shell's kill builtin, so its pid is the sender's) and
-- read through takana.poll, cqueues and luv.
local takana = require "takana"
local H = require "helpers"

local SIGHUP, SIGUSR1, SIGUSR2, SIGTERM, SIGCHLD, SIGURG, SIGWINCH = 1, 10, 12, 15, 17, 23, 28

local function bit(sig) return 1 << (sig - 1) end

-- This thread's blocked set (busted's state runs in the main thread).
local function sigblk()
  return tonumber(H.read("/proc/self/status"):match("\nSigBlk:%s*(%x+)"), 16)
end

local function blocked(sig) return sigblk() & bit(sig) ~= 0 end

-- Sends sig to pid from a spawned shell (dash's kill is a builtin: the
-- sender is the child itself) and reaps it; returns the sender's pid.
local function send(sig, pid)
  local c = assert(takana.spawn { "/bin/sh", "-c", ("kill -%s %d"):format(sig, pid or H.pid) })
  local st = assert(c:wait())
  assert.same({ exited = true, code = 0 }, { exited = st.exited, code = st.code })
  local sender = c.pid
  c:close()
  return sender
end

-- takana.signals, or pending when another thread of this process (luv's
-- threadpool, started by an earlier spec file in the same busted run)
-- would take the signals instead: the refusal is the documented behaviour.
local function subscribe(t)
  local s, err, errno = takana.signals(t)
  if not s and errno == takana.errno.EBUSY then
    pending(err)
    return nil
  end
  return assert(s, err)
end

describe("takana.signals", function()
  if H.no_spawn then return pending(H.no_spawn) end

  it("delivers a TERM sent by kill with its signo, name, sender pid and uid", function()
    local s = subscribe { "TERM" }
    if not s then return end
    -- Whatever happens below, nothing pending may reach the default action.
    finally(function() for _ in s:each() do end s:close() end)
    assert.is_true(blocked(SIGTERM))
    assert.is_nil(s:read())
    local sender = send("TERM")
    local ready = assert(takana.poll({ s }, 30))
    assert.equal(s, ready[1])
    local sig = s:read()
    assert.equal(SIGTERM, sig.signo)
    assert.equal("TERM", sig.name)
    assert.equal(sender, sig.pid)
    assert.equal(H.uid(), sig.uid)
    assert.equal(0, sig.code) -- SI_USER: kill()
    assert.is_nil(s:read())
    assert.same({ "TERM" }, s:list())
  end)

  it("waits in read(timeout) and drains every pending signal with each()", function()
    local s = subscribe { "USR1", "USR2", "SIGHUP" }
    if not s then return end
    finally(function() for _ in s:each() do end s:close() end)
    assert.is_nil(s:read(0))
    send("USR1"); send("USR2"); send("HUP")
    local names = {}
    for sig in s:each() do names[#names + 1] = sig.name end
    table.sort(names)
    assert.same({ "HUP", "USR1", "USR2" }, names)
    assert.is_nil(s:read())
    send("USR2")
    local sig = s:read(30)
    assert.equal(SIGUSR2, sig.signo)
    assert.same({ "HUP", "USR1", "USR2" }, s:list())
  end)

  it("reports a child's exit through CHLD with its code and status", function()
    local s = subscribe { "CHLD" }
    if not s then return end
    finally(function() s:close() end)
    for _ in s:each() do end
    local c = assert(takana.spawn { "/bin/sh", "-c", "exit 3" })
    local sig
    -- Standard signals merge: loop until the one for this child shows up.
    H.poll_until({ s }, function()
      for x in s:each() do if x.pid == c.pid then sig = x end end
      return sig
    end, 100)
    assert.is_table(sig)
    assert.equal(SIGCHLD, sig.signo)
    assert.equal("CHLD", sig.name)
    assert.equal("exited", sig.child)
    assert.equal(1, sig.code) -- CLD_EXITED
    assert.equal(3, sig.status)
    -- Reading CHLD reaps nothing: the pidfd still has the exit.
    assert.same({ exited = true, code = 3 }, (function()
      local st = assert(c:wait()) return { exited = st.exited, code = st.code } end)())
    c:close()
  end)

  it("reports a child killed by a signal as CHLD 'killed' with the signal", function()
    local s = subscribe { "CHLD" }
    if not s then return end
    finally(function() s:close() end)
    local c = assert(takana.spawn { "sleep", "30" })
    assert(c:signal("KILL"))
    local sig
    H.poll_until({ s }, function()
      for x in s:each() do if x.pid == c.pid then sig = x end end
      return sig
    end, 100)
    assert.equal("killed", sig.child)
    assert.equal(9, sig.status)
    c:wait(); c:close()
  end)

  it("restores the mask on close; a second holder keeps its signals blocked", function()
    if blocked(SIGURG) or blocked(SIGWINCH) then
      return pending("URG or WINCH was blocked when busted started (inherited mask)")
    end
    local a = subscribe { "URG" }
    if not a then return end
    local b = assert(takana.signals { "URG", "WINCH" })
    assert.is_true(blocked(SIGURG))
    assert.is_true(blocked(SIGWINCH))
    a:close()
    assert.is_true(blocked(SIGURG))   -- b still holds it
    assert.is_true(blocked(SIGWINCH))
    a:close()                         -- twice: counted once
    assert.is_true(blocked(SIGURG))
    b:close()
    assert.is_false(blocked(SIGURG))
    assert.is_false(blocked(SIGWINCH))
  end)

  it("shares a signal between two holders: each arrival goes to one reader", function()
    local a = subscribe { "WINCH" }
    if not a then return end
    local b = assert(takana.signals { "WINCH" })
    finally(function() a:close() b:close() end)
    send("WINCH")
    local ready = assert(takana.poll({ a, b }, 30))
    assert.equal(2, #ready) -- both descriptors see the one pending signal
    local got = {}
    for _, o in ipairs { a, b, a, b } do
      local x = o:read()
      if x then got[#got + 1] = x.name end
    end
    assert.same({ "WINCH" }, got)
  end)

  it("closed and collected objects give the signals back", function()
    do
      local s <close> = subscribe { "URG" }
      if not s then return end
      assert.is_true(blocked(SIGURG))
    end
    assert.is_false(blocked(SIGURG))
    local s = assert(takana.signals { "URG" })
    local fd = s:fileno()
    s = nil -- luacheck: ignore 311
    collectgarbage(); collectgarbage()
    assert.is_false(blocked(SIGURG))
    assert.is_false(H.fd_open(fd))
  end)

  it("does not pass its blocked signals to spawned children", function()
    local s = subscribe { "TERM", "HUP" }
    if not s then return end
    finally(function() for _ in s:each() do end s:close() end)
    -- clone3, then the posix_spawn fallback: the same mask.
    for _, fallback in ipairs { false, true } do
      local c = assert(require("takana.core").spawn { "sleep", "30", _fallback = fallback })
      assert.equal(fallback and "posix_spawn" or "clone3", c.mechanism)
      local st = H.read("/proc/" .. c.pid .. "/status")
      local blk = tonumber(st:match("\nSigBlk:%s*(%x+)"), 16)
      assert.equal(0, blk & (bit(SIGTERM) | bit(SIGHUP)))
      assert(c:signal("TERM"))
      local r = assert(c:wait())
      assert.is_true(r.signaled)
      assert.equal(SIGTERM, r.signal)
      c:close()
    end
  end)

  -- In a child Lua process: the default action of TERM ends that process.
  local function lua_child(prelude)
    local script = [[
      package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
      package.cpath = "./?.so;" .. package.cpath
      local t = require "takana"
      local s = assert(t.signals { "TERM" })
      local me = io.open("/proc/self/stat"):read("n")
      os.execute("kill -TERM " .. me)
      assert(t.poll({ s }, 30)[1] == s)
    ]] .. prelude .. [[
      s:close()
      io.write("survived\n")
      os.exit(0)
    ]]
    local argv = { table.unpack(H.lua_argv) }
    argv[#argv + 1] = "-e"
    argv[#argv + 1] = script
    argv.stdout = "pipe"
    local c = assert(takana.spawn(argv))
    local out = c.stdout:read("a")
    local st = assert(c:wait())
    c:close()
    return st, out
  end

  it("delivers a signal still pending at close with its disposition", function()
    local st, out = lua_child("")
    assert.is_true(st.signaled)
    assert.equal(SIGTERM, st.signal)
    assert.equal("", out)
    st, out = lua_child("for x in s:each() do io.write(x.name, ' ') end")
    assert.is_true(st.exited)
    assert.equal(0, st.code)
    assert.equal("TERM survived\n", out)
  end)

  it("leaves a signal blocked before it was subscribed blocked after close; children get neither", function()
    if H.run("env --block-signal=URG true") ~= 0 then
      return pending("env has no --block-signal (coreutils < 8.31)")
    end
    local argv = { "env", "--block-signal=URG" }
    for _, a in ipairs(H.lua_argv) do argv[#argv + 1] = a end
    argv[#argv + 1] = "-e"
    argv[#argv + 1] = [[
      package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
      package.cpath = "./?.so;" .. package.cpath
      local t = require "takana"
      local function blk(pid)
        local f = io.open("/proc/" .. pid .. "/status")
        local v = tonumber(f:read("a"):match("\nSigBlk:%s*(%x+)"), 16)
        f:close()
        return v
      end
      local URG, WINCH = 1 << 22, 1 << 27
      local s = assert(t.signals { "URG", "WINCH" })
      local c = assert(t.spawn { "sleep", "30" })
      local child = blk(c.pid)
      c:signal("KILL"); c:wait(); c:close()
      s:close()
      local me = blk("self")
      io.write(child & URG ~= 0 and "child-URG " or "", child & WINCH ~= 0 and "child-WINCH " or "",
               me & URG ~= 0 and "URG " or "", me & WINCH ~= 0 and "WINCH" or "")
    ]]
    argv.stdout = "pipe"
    local c = assert(takana.spawn(argv))
    local out = c.stdout:read("a")
    local st = assert(c:wait())
    c:close()
    assert.equal(0, st.code)
    -- URG was blocked before: blocked after close; WINCH was not:
    -- unblocked after close. A child starts with nothing blocked (audit3
    -- #9: a service must not inherit the supervisor's mask).
    assert.equal("URG ", out)
  end)

  it("refuses CHLD while it is ignored (children are then reaped by the kernel)", function()
    local code = H.run("env --ignore-signal=CHLD true")
    if code ~= 0 then return pending("env has no --ignore-signal (coreutils < 8.31)") end
    local argv = { "env", "--ignore-signal=CHLD" }
    for _, a in ipairs(H.lua_argv) do argv[#argv + 1] = a end
    argv[#argv + 1] = "-e"
    argv[#argv + 1] = [[
      package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
      package.cpath = "./?.so;" .. package.cpath
      local t = require "takana"
      local s, err, errno = t.signals { "HUP", "CHLD" }
      io.write(tostring(s), "|", err, "|", errno, "|")
      s = assert(t.signals { "HUP" })  -- the others are fine
      s:close()
      io.write("ok")
    ]]
    argv.stdout = "pipe"
    local c = assert(takana.spawn(argv))
    local out = c.stdout:read("a")
    assert(c:wait())
    c:close()
    local s, err, errno, ok = out:match("^([^|]*)|([^|]*)|([^|]*)|(.*)$")
    assert.equal("nil", s)
    assert.matches("CHLD is ignored in this process", err, 1, true)
    assert.matches("--default-signal=CHLD", err, 1, true)
    assert.equal(tostring(takana.errno.EINVAL), errno)
    assert.equal("ok", ok)
  end)

  it("refuses another thread's unblocked signals with the reason", function()
    local ok_luv, uv = pcall(require, "luv")
    if not ok_luv then return pending("luv is not installed") end
    -- A luv thread starts with this thread's mask: block nothing here, and
    -- the thread has URG open while it waits.
    assert.is_false(blocked(SIGURG))
    local path = os.tmpname()
    local th = uv.new_thread(function(p)
      local u = require "luv"
      for _ = 1, 3000 do
        local f = io.open(p)
        local v = f and f:read("a")
        if f then f:close() end
        if v == "done" then return end
        u.sleep(10)
      end
    end, path)
    -- The thread is running once /proc lists two tasks.
    H.poll_until({}, function()
      local n = 0
      for _ in io.popen("ls /proc/" .. H.pid .. "/task"):lines() do n = n + 1 end
      return n > 1
    end, 50)
    local s, err, errno = takana.signals { "URG" }
    local f = assert(io.open(path, "w")); f:write("done"); f:close()
    th:join()
    os.remove(path)
    if s then s:close() end
    assert.is_nil(s)
    assert.equal(takana.errno.EBUSY, errno)
    assert.matches("thread %d+ of this process has URG unblocked", err)
    assert.matches("subscribe before other threads start", err)
    assert.is_false(blocked(SIGURG))
  end)

  it("raises on wrong arguments, uncatchable and unknown signals", function()
    local before = sigblk()
    local bad = {
      { nil }, { "TERM" }, { 15 }, { {} }, { { "TERM" }, 1 },
      { { "BOGUS" } }, { { "KILL" } }, { { "SIGKILL" } }, { { 9 } }, { { "STOP" } }, { { 19 } },
      { { "SEGV" } }, { { "bus" } }, { { 0 } }, { { -1 } }, { { 65 } }, { { 2 ^ 53 } },
      { { 1e300 } }, { { math.maxinteger } }, { { math.mininteger } }, { { 0 / 0 } }, { { 15.5 } },
      { { "TERM\0" } }, { { "TE\0RM" } },
      { { "../TERM" } }, { { ("A"):rep(4096) } }, { { 32 } }, { { 33 } }, { { true } },
      { { "TERM", x = 1 } }, { { [2] = "TERM" } }, { { "TERM", nil, "HUP" } },
    }
    for i, args in ipairs(bad) do
      local ok, err = pcall(takana.signals, table.unpack(args, 1, args.n or #args))
      assert(not ok, "case " .. i .. " did not raise")
      assert.matches("signals", err)
    end
    local ok, err = pcall(takana.signals, { "KILL" })
    assert.is_false(ok)
    assert.matches("KILL cannot be subscribed: it cannot be caught", err)
    ok, err = pcall(takana.signals, { "HUP", "BOGUS" })
    assert.is_false(ok)
    assert.matches("entry 2: unknown signal name 'BOGUS'", err, 1, true)
    ok, err = pcall(takana.signals, { "TERM\0" })
    assert.is_false(ok)
    assert.matches("unknown signal name", err)
    -- A refused call blocks nothing.
    assert.equal(before, sigblk())
  end)

  it("raises on wrong read timeouts and on use after close", function()
    local s = subscribe { "URG" }
    if not s then return end
    for _, t in ipairs { -1, "x", {}, 1e300, 0 / 0, 86400 * 366 } do
      assert.has_error(function() s:read(t) end)
    end
    assert.has_error(function() s:read(1, 2) end)
    assert.has_error(function() s:each(1) end)
    assert.has_error(function() s.read({}) end)
    assert.has_error(function() s.read(takana.timer()) end)
    local it = s:each()
    s:close()
    assert.matches("closed", tostring(s))
    assert.is_nil(it()) -- an iterator of a closed object ends
    for _, m in ipairs { "read", "each", "list", "fileno", "events" } do
      local ok, err = pcall(s[m], s)
      assert.is_false(ok)
      assert.matches("attempt to use a closed signals object", err, 1, true)
    end
    local ok = pcall(takana.poll, { s }, 0)
    assert.is_false(ok)
  end)

  it("speaks the handle protocol", function()
    local s = subscribe { "URG" }
    if not s then return end
    local fd = s:fileno()
    assert.equal(fd, s:pollfd())
    assert.equal("r", s:events())
    assert.is_nil(s:timeout())
    assert.matches("takana.Signals %(URG; fd " .. fd .. "%)", tostring(s))
    s:close()
    assert.is_false(H.fd_open(fd))
  end)
end)

describe("takana.timer", function()
  it("fires after its delay, seen through takana.poll", function()
    local t = assert(takana.timer(0.01))
    assert.equal("r", t:events())
    local ready = assert(takana.poll({ t }, 30))
    assert.equal(t, ready[1])
    assert.is_true(t:read() >= 1)
    assert.equal(0, t:read())
    assert.is_nil(t:remaining()) -- a fired one-shot is disarmed
    t:close()
  end)

  it("counts the expirations of a periodic timer", function()
    local t <close> = assert(takana.timer(0.001, 0.001))
    local n = 0
    H.poll_until({ t }, function()
      n = n + t:read()
      return n >= 2
    end, 100)
    assert.is_true(n >= 2)
    -- Still armed: 0 to go is possible while an expiration is due (6.1
    -- under TCG), never more than one period.
    local next_s, every = t:remaining()
    assert.is_true(next_s >= 0 and next_s <= 0.001, tostring(next_s))
    assert.equal(0.001, every)
  end)

  it("is created disarmed without a delay; set, cancel and read(timeout)", function()
    local t <close> = assert(takana.timer())
    assert.is_nil(t:remaining())
    assert.equal(0, t:read())
    assert.same({}, takana.poll({ t }, 0))
    assert.is_true(t:set(3600))
    local next_s, every = t:remaining()
    assert.is_true(next_s > 0 and next_s <= 3600)
    assert.equal(0, every)
    assert.is_true(t:cancel())
    assert.is_nil(t:remaining())
    -- after 0 means at once (a timerfd would read 0 as "disarm").
    assert.is_true(t:set(0))
    assert.equal(1, t:read(30))
    assert.is_true(t:set(0, 3600))
    assert.equal(1, t:read(30))
    assert.is_true(t:remaining() > 0)
    -- set drops unread expirations.
    assert.is_true(t:set(0))
    assert.same({ t }, takana.poll({ t }, 30))
    assert.is_true(t:set(3600))
    assert.equal(0, t:read())
    assert.equal(0, t:read(0.001))
  end)

  it("raises on wrong arguments and on use after close", function()
    for _, args in ipairs {
      { "x" }, { -1 }, { 1e300 }, { 0 / 0 }, { math.huge }, { 1, -1 }, { 1, "x" }, { 1, 1e300 },
      { nil, 1 }, { 1, 1, 1 }, { {} },
    } do
      local ok, err = pcall(takana.timer, table.unpack(args, 1, 3))
      assert(not ok, "timer(" .. tostring(args[1]) .. ", " .. tostring(args[2]) .. ") did not raise")
      assert.matches("timer", err)
    end
    local t = assert(takana.timer())
    for _, args in ipairs { {}, { -1 }, { "x" }, { 1, -1 }, { 1, 1, 1 }, { 0 / 0 } } do
      assert.has_error(function() t:set(table.unpack(args, 1, 3)) end)
    end
    assert.has_error(function() t:read(-1) end)
    assert.has_error(function() t:cancel(1) end)
    assert.has_error(function() t.read(takana.signals) end)
    t:close()
    t:close()
    for _, m in ipairs { "read", "set", "cancel", "remaining", "fileno" } do
      local ok, err = pcall(t[m], t, 1)
      assert.is_false(ok)
      assert.matches("attempt to use a closed timer", err, 1, true)
    end
  end)
end)

describe("clocks", function()
  it("now() is CLOCK_MONOTONIC seconds and never goes back", function()
    local prev = takana.now()
    assert.equal("float", math.type(prev))
    for _ = 1, 1000 do
      local n = takana.now()
      assert.is_true(n >= prev)
      prev = n
    end
  end)

  it("boottime_ns() is an integer on CLOCK_BOOTTIME, at or ahead of now()", function()
    local m = takana.now()
    local b = takana.boottime_ns()
    assert.equal("integer", math.type(b))
    -- Suspend time makes boottime larger; the slack is the float's rounding.
    assert.is_true(b >= m * 1e9 - 1e4)
    -- The clock of snapshot and event times.
    local snap = takana.snapshot { backend = "proc" }
    assert.is_true(snap.time_ns >= b)
    assert.is_true(takana.boottime_ns() >= snap.time_ns)
  end)

  it("boottime_ns() is the clock of every event backend's time_ns", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local checked = 0
    for _, backend in ipairs { "bpf", "connector", "poll" } do
      local ev = takana.events { "exit", backend = backend, interval = 0.05 }
      if ev then
        local b0 = takana.boottime_ns()
        -- Read while it runs: poll's snapshots must see it alive.
        local c = assert(takana.spawn { "sleep", "0.3" })
        local got, tail, reaped = nil, 0, false
        -- Bounded by the child's life, then by 100 waits: a busy host's
        -- other exits may wake every poll. Reaped as soon as it exits: to
        -- poll's snapshots a zombie is still there.
        while not got and tail < 100 do
          takana.poll(reaped and { ev } or { ev, c }, 0.1)
          if not reaped and not c:alive() then reaped = assert(c:wait()) end
          for e in assert(ev:read()) do
            if e.type == "exit" and e.pid == c.pid then got = e end
          end
          if reaped then tail = tail + 1 end
        end
        if not reaped then assert(c:wait()) end
        c:close()
        ev:close()
        local b1 = takana.boottime_ns()
        assert.is_table(got, "no exit event from the " .. backend .. " backend")
        assert.is_true(got.time_ns >= b0 and got.time_ns <= b1,
          ("%s: %d not in [%d, %d]"):format(backend, got.time_ns, b0, b1))
        checked = checked + 1
      end
    end
    assert.is_true(checked >= 1) -- poll always opens
  end)

  it("realtime() is the wall clock with a fraction", function()
    local r = takana.realtime()
    assert.equal("float", math.type(r))
    assert.is_true(math.abs(r - os.time()) < 5)
  end)

  it("raise on arguments", function()
    assert.has_error(function() takana.now(1) end)
    assert.has_error(function() takana.boottime_ns(1) end)
    assert.has_error(function() takana.realtime("x") end)
  end)
end)

describe("takana.subreaper", function()
  if H.no_spawn then return pending(H.no_spawn) end

  it("re-parents a double-forked grandchild to this process, which reaps it", function()
    assert.is_false(takana.subreaper())
    assert.is_true(takana.subreaper(true))
    finally(function() takana.subreaper(false) end)
    assert.is_true(takana.subreaper())
    local c = assert(takana.spawn { "/bin/sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!", stdout = "pipe" })
    local gc = tonumber(c.stdout:read("l"))
    assert(c:wait())
    c:close()
    local _, f = H.stat_fields(assert(H.read("/proc/" .. gc .. "/stat")))
    assert.equal(H.pid, tonumber(f[2]))
    local p = assert(takana.pidfd(gc))
    assert(p:signal("KILL"))
    local st = assert(p:wait()) -- ours to reap now
    assert.is_true(st.signaled)
    p:close()
    assert.is_nil(H.read("/proc/" .. gc .. "/stat"))
    assert.is_true(takana.subreaper(false))
    assert.is_false(takana.subreaper())
  end)

  it("raises on wrong types", function()
    for _, v in ipairs { "yes", 1, {} } do
      assert.has_error(function() takana.subreaper(v) end)
    end
    assert.has_error(function() takana.subreaper(nil) end)
    assert.has_error(function() takana.subreaper(true, 1) end)
    assert.is_false(takana.subreaper())
  end)
end)

describe("takana.environ", function()
  it("equals os.getenv for every name", function()
    local env = takana.environ()
    assert.is_string(env.PATH)
    local n = 0
    for k, v in pairs(env) do
      assert.equal(os.getenv(k), v)
      n = n + 1
    end
    assert.is_true(n > 0)
    for _, k in ipairs { "PATH", "HOME", "USER", "LANG", "TAKANA_SANITIZED" } do
      assert.equal(os.getenv(k), env[k])
    end
  end)

  it("reads environ, not /proc/self/environ", function()
    -- Under make test-asan, spec/preload.lua unset LD_PRELOAD with
    -- unsetenv(): gone from environ, still in /proc/self/environ.
    if not os.getenv("TAKANA_SANITIZED") then
      return pending("needs the sanitized run, where LD_PRELOAD was unset after exec")
    end
    assert.matches("LD_PRELOAD=", H.read("/proc/self/environ"), 1, true)
    assert.is_nil(takana.environ().LD_PRELOAD)
  end)

  it("raises on arguments", function()
    assert.has_error(function() takana.environ(1) end)
  end)
end)

describe("under event loops", function()
  if H.no_spawn then return pending(H.no_spawn) end

  it("cqueues polls a signals object and a timer; closing them keeps the loop working", function()
    local ok_cq, cqueues = pcall(require, "cqueues")
    if not ok_cq then return pending("lua-cqueues for Lua 5.4 is not installed") end
    local s = subscribe { "USR1" }
    if not s then return end
    finally(function() if not tostring(s):match("closed") then for _ in s:each() do end s:close() end end)
    local cq = cqueues.new()
    local got, fired, after
    cq:wrap(function()
      local t = assert(takana.timer(0.001))
      assert(cqueues.poll(t, 30) == t)
      fired = t:read()
      t:close()
      send("USR1")
      assert(cqueues.poll(s, 30) == s)
      got = s:read()
      s:close()
      -- The next descriptor takes a closed one's number: the loop must go on.
      local t2 = assert(takana.timer(0.001))
      assert(cqueues.poll(t2, 30) == t2)
      after = t2:read()
      t2:close()
    end)
    assert(cq:loop(60))
    assert.is_true(fired >= 1)
    assert.is_table(got)
    assert.equal("USR1", got.name)
    assert.is_true(after >= 1)
    assert.is_false(blocked(SIGUSR1))
  end)

  it("luv polls a signals object; stopping the poll handle, then closing, is safe", function()
    local ok_luv, uv = pcall(require, "luv")
    if not ok_luv then return pending("luv is not installed") end
    local s = subscribe { "USR2" }
    if not s then return end
    -- Whatever fails below, no USR2 may stay pending for the collector's
    -- close to deliver (its default action ends busted).
    finally(function() if not tostring(s):match("closed") then for _ in s:each() do end s:close() end end)
    local got
    local poll = uv.new_poll(s:fileno())
    poll:start("r", function()
      got = s:read()
      if got then
        poll:stop()
        poll:close()
        s:close()
      end
    end)
    local guard = uv.new_timer()
    -- The loop's clock is cached from its last run, maybe in an earlier
    -- spec file: refresh it or the guard is due at once.
    uv.update_time()
    guard:start(30000, 0, function() poll:close() guard:close() end)
    send("USR2")
    uv.run("once")
    while not got and uv.loop_alive() and not guard:is_closing() do uv.run("once") end
    if not guard:is_closing() then guard:close() end
    uv.run("nowait")
    assert.is_table(got)
    assert.equal("USR2", got.name)
    assert.matches("closed", tostring(s))
    assert.is_false(blocked(SIGUSR2))
    -- The loop still runs after the descriptor is gone.
    local t = uv.new_timer()
    local ran = false
    t:start(1, 0, function() ran = true t:close() end)
    uv.run()
    assert.is_true(ran)
  end)
end)
