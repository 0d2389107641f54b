-- takana.supervisor reload (issue 22): `sup:reload(declarations)` and
-- `takana supervise FILE` re-reading FILE on SIGHUP and `takana ctl SOCKET
-- reload`. An unchanged service keeps its processes, a changed one restarts
-- exactly once, a removed one stops and its cgroup goes, an added one
-- starts after its dependencies, and a file or declaration that fails to
-- load or check changes nothing and says why. Every supervisor here owns a
-- cgroup under a takana-test-* directory this file creates and removes;
-- every process in it was started here (a `takana supervise` child dies
-- with this process: pdeathsig). Waits are bounded step counts, never
-- timing assertions.
local takana = require "takana"
local core = require "takana.core"
local S = require "takana.supervisor"
local H = require "helpers"
local E = core.errno

local ENV = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;", PATH = os.getenv("PATH") }

local function why_not()
  if not H.is_root() then return "needs root to create cgroups" end
  if H.no_spawn then return H.no_spawn end
  if not H.cgroup2_mount() then return "no cgroup2 hierarchy is mounted" end
end

-- Steps sup until done() holds: at most `limit` * 20 steps of up to 0.05 s
-- each, a guard against a hang, not a timing check.
local function run_until(sup, done, limit)
  for _ = 1, (limit or 10) * 20 do
    if done() then return true end
    local more, err = sup:step(0.05)
    assert(more ~= nil, err)
    if more == false then break end
  end
  return done()
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -m 700 " .. d))
  return d
end

local function exists(path) return require("lfs").attributes(path) ~= nil end

describe("takana.supervisor declarations (what a reload reads)", function()
  it("records a file's declarations without opening anything", function()
    local chunk = assert(load([[
      local takana = require "takana"
      local sup = assert(takana.supervisor { cgroup = "takana-test-never-made/sup", control = "/nonexistent/ctl.sock" })
      sup:service { name = "a", cmd = { "sleep", "100" } }
      local b = sup:service { name = "b", cmd = { "sleep", "100" }, depends = { "a" }, restart = function() return false end }
      assert(b.name == "b" and sup:get("b") == b)
      return sup
    ]], "=sup.lua"))
    local decls, opts = S.declarations(chunk)
    assert.is_table(decls)
    assert.equal(2, #decls)
    assert.same({ name = "a", cmd = { "sleep", "100" } }, decls[1])
    assert.equal("b", decls[2].name)
    assert.is_function(decls[2].restart)
    assert.equal("takana-test-never-made/sup", opts.cgroup)
    assert.is_nil(H.cgroup2_mount() and io.open(H.cgroup2_mount() .. "/takana-test-never-made"))
    -- Recording again is possible (the recorder does not stay on).
    assert.equal(2, #assert(S.declarations(chunk)))
  end)

  it("a file that fails says why: nil, message, EINVAL", function()
    local function read(src) return S.declarations(assert(load(src, "=sup.lua"))) end
    local cases = {
      { [[error("boom")]], "boom" },
      { [[return 5]], "must return the supervisor it declared %(got number%)" },
      { [[local s = require("takana").supervisor { cgroup = "x" } return nil]], "must return the supervisor" },
      { [[local t = require "takana"
          local s = t.supervisor { cgroup = "x" }
          t.supervisor { cgroup = "y" }
          return s]], "declares one supervisor" },
      { [[local s = require("takana").supervisor { cgroup = "x" }
          s:service { name = "a", cmd = { "true" }, restart = "sometimes" }
          return s]], "sup.lua:2: bad argument #1 to 'service' %(option 'restart'" },
      { [[local s = require("takana").supervisor { cgroup = "x" }
          s:service { name = "a", cmd = { "true" }, bogus = 1 }
          return s]], "unknown option 'bogus'" },
      { [[local s = require("takana").supervisor { cgroup = "x" }
          s:service { name = "a\0b", cmd = { "true" } }
          return s]], "option 'name'" },
      { [[local s = require("takana").supervisor { cgroup = "x" }
          s:service { name = "a", cmd = { "true" } }
          s:service { name = "a", cmd = { "true" } }
          return s]], "already declared" },
      { [[local s = require("takana").supervisor { cgroup = "x", bogus = true } return s]], "unknown option 'bogus'" },
      { [[local s = require("takana").supervisor { cgroup = "x" }
          s:start("a")
          return s]], "start: not available while a file's declarations are read" },
    }
    for _, c in ipairs(cases) do
      local r, err, errno = read(c[1])
      assert.is_nil(r, c[1])
      assert.matches(c[2], err)
      assert.equal(E.EINVAL, errno)
    end
    assert.has_error(function() S.declarations(5) end, "bad argument #1 to 'declarations' (function expected, got number)")
    -- one reading at a time
    local inner
    local r, err = S.declarations(function()
      inner = { S.declarations(function() end) }
      return require("takana").supervisor { cgroup = "x" }
    end)
    assert.same({}, r, err)
    assert.same({ nil, "declarations: already reading one", E.EBUSY }, inner)
  end)
end)

describe("takana.supervisor reload", function()
  local why = why_not()
  local box, boxname, sup, dir
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
      pcall(run_until, sup, function() return false end, 8)
      sup:close()
      sup = nil
    end
    if box then H.cgroup_cleanup(box) end
    if dir then os.execute("rm -rf " .. H.shell_quote(dir)) end
    box, dir = nil, nil
  end)

  local function new(opts)
    opts = opts or {}
    opts.cgroup = opts.cgroup or (boxname .. "/sup")
    opts.runtime = opts.runtime or dir
    sup = assert(takana.supervisor(opts))
    return sup
  end

  local function decl(name, arg, extra)
    local t = { name = name, cmd = { "sleep", tostring(arg or 1000) } }
    for k, v in pairs(extra or {}) do t[k] = v end
    return t
  end

  local function all_running(names)
    return function()
      for _, n in ipairs(names) do
        local s = sup:get(n)
        if not (s and s.state == "running") then return false end
      end
      return true
    end
  end

  local function pids()
    local t = {}
    for n, s in pairs(sup.services) do t[n] = s.pid end
    return t
  end

  it("keeps the unchanged, restarts a changed one once, stops a removed one, starts an added one #root", function()
    if why then return pending(why) end
    new()
    for _, d in ipairs { decl("a"), decl("b"), decl("c") } do sup:service(d) end
    assert.is_true(run_until(sup, all_running { "a", "b", "c" }, 10))
    local before = pids()
    local c_dir = H.cgroup2_mount() .. sup:get("c").cgpath
    assert.truthy(exists(c_dir))
    local ok, sum = sup:reload { decl("a"), decl("b", 1001), decl("d") }
    assert.is_true(ok)
    assert.same({ "a" }, sum.unchanged)
    assert.same({ "b" }, sum.restarted)
    assert.same({ "c" }, sum.removed)
    assert.same({ "d" }, sum.added)
    assert.same({}, sum.updated)
    assert.same({ b = { "cmd" } }, sum.changes)
    local b = sup:get("b")
    assert.is_true(run_until(sup, function()
      return sup:get("c") == nil and b.state == "running" and b.pid ~= before.b and all_running { "a", "d" }()
    end, 20))
    assert.equal(before.a, sup:get("a").pid)
    assert.equal(1, b.restarts)
    assert.equal(1, #b.exits)
    assert.is_true(b.exits[1].stopped)
    assert.same({ "sleep", "1001" }, b.cmd)
    assert.is_false(exists(c_dir))
    assert.same({ "a", "b", "d" }, sup.order)
    -- The same set again: nothing is touched, and b restarted only once.
    local after = pids()
    ok, sum = sup:reload { decl("a"), decl("b", 1001), decl("d") }
    assert.is_true(ok)
    assert.same({ "a", "b", "d" }, sum.unchanged)
    run_until(sup, function() return false end, 1)
    assert.same(after, pids())
    assert.equal(1, b.restarts)
    assert.equal("running", b.state)
    -- A table keyed by name is a set too; its order is the names'.
    ok, sum = sup:reload { d = { cmd = { "sleep", "1000" } }, a = { cmd = { "sleep", "1000" } }, b = decl("b", 1001) }
    assert.is_true(ok)
    assert.same({ "a", "b", "d" }, sum.unchanged)
    assert.is_nil(sup.reload_error)
  end)

  it("a bad declaration raises and changes nothing #root", function()
    if why then return pending(why) end
    new()
    for _, d in ipairs { decl("a"), decl("b") } do sup:service(d) end
    assert.is_true(run_until(sup, all_running { "a", "b" }, 10))
    local before = pids()
    local bad = {
      { 5, "a list of service declarations expected, got number" },
      { { decl("a"), decl("b", 1001, { bogus = 1 }) }, "declaration 2 %(service 'b'%): unknown option 'bogus'" },
      { { decl("a"), decl("b", 1001, { restart = "sometimes" }) }, "option 'restart'" },
      { { decl("a"), { name = "b" } }, "option 'cmd'" },
      { { decl("a"), decl("a") }, "service 'a' is declared twice" },
      { { decl("a"), { name = "a\0b", cmd = { "true" } } }, "option 'name'" },
      { { decl("a"), { name = "../b", cmd = { "true" } } }, "option 'name'" },
      { { decl("a"), { name = "b", cmd = { "true" }, stop = { signal = "NOPE" } } }, "signal" },
      { { x = decl("y") }, 'declarations%["x"%]: its name is "y"' },
      { { [2.5] = decl("a") }, "a list, or service names as keys, expected" },
      { { "a" }, "declaration 1: table expected, got string" },
    }
    for _, c in ipairs(bad) do
      -- (raised at the caller: this file's line)
      local ok, err = pcall(function() sup:reload(c[1]) end)
      assert.is_false(ok)
      assert.matches("^spec/89%-reload_spec%.lua:%d+: bad argument #1 to 'reload' %(", err)
      assert.matches(c[2], err)
    end
    assert.has_error(function() sup:reload({}, 2) end, "bad argument #2 to 'reload' (no more than 1 argument expected)")
    run_until(sup, function() return false end, 1)
    assert.same(before, pids())
    assert.same({ "a", "b" }, sup.order)
    assert.same({ "sleep", "1000" }, sup:get("b").cmd)
    assert.equal(0, sup:get("b").restarts)
  end)

  it("added services start in dependency order #root", function()
    if why then return pending(why) end
    local ok, err = pcall(takana.spawn, { "true", fds = {} })
    if not ok and tostring(err):match("unknown option 'fds'") then return pending("spawn has no fds option") end
    new()
    sup:service(decl("a"))
    assert.is_true(run_until(sup, all_running { "a" }, 10))
    -- "late" is declared first but waits for "early", ready 0.2 s after its start.
    assert.is_true((sup:reload {
      decl("a"),
      decl("late", 1000, { depends = { "early" } }),
      { name = "early", ready = { fd = 3 }, cmd = { "sh", "-c", "sleep 0.2; echo >&3; exec sleep 1000" } },
    }))
    local late, early = sup:get("late"), sup:get("early")
    assert.is_true(run_until(sup, function() return early.state == "starting" end, 10))
    assert.equal("waiting", late.state)
    assert.matches("waiting for early", late.reason)
    assert.is_true(run_until(sup, function() return late.state == "running" end, 10))
    assert.is_true(late.started_at >= early.ready_at)
    assert.same({ "a", "late", "early" }, sup.order)
  end)

  it("live options apply to the running service; a changed failed one starts afresh #root", function()
    if why then return pending(why) end
    new()
    local src = "return function(svc, rec) return false end"
    sup:service(decl("a", 1000, { restart = load(src)() }))
    sup:service(decl("b"))
    sup:service { name = "broken", restart = "never", cmd = { "/nonexistent/takana-test-prog" } }
    assert.is_true(run_until(sup, function()
      return all_running { "a", "b" }() and sup:get("broken").state == "failed"
    end, 10))
    local before = pids()
    -- a's restart function is a new closure of the same code: unchanged.
    local ok, sum = sup:reload {
      decl("a", 1000, { restart = load(src)() }),
      decl("b", 1000, { restart = "always", stop = { timeout = 1 }, backoff = { initial = 0 }, depends = { "a" },
        autostart = false }),
      decl("broken", 1000, { restart = "never" }),
    }
    assert.is_true(ok)
    assert.same({ "a" }, sum.unchanged)
    assert.same({ "b", "broken" }, sum.updated)
    assert.same({ "backoff", "depends", "restart", "stop" }, sum.changes.b)
    assert.same({ "cmd" }, sum.changes.broken)
    local b, broken = sup:get("b"), sup:get("broken")
    assert.equal("always", b.restart)
    assert.equal(1, b.stop_timeout)
    assert.equal("up", b.want) -- autostart matters only for an added service
    assert.is_true(run_until(sup, function() return broken.state == "running" end, 10))
    assert.equal(before.a, sup:get("a").pid)
    assert.equal(before.b, b.pid)
    assert.equal(0, b.restarts)
  end)

  it("limits change live in the running service's cgroup; one dropped goes back to its default #guest #root", function()
    if why then return pending(why) end
    local ctrl = H.read(H.cgroup2_mount() .. "/cgroup.subtree_control") or ""
    if not ctrl:find("memory", 1, true) then
      return pending("the memory controller is not enabled on cgroup2 here (hybrid host: it is on v1); runs in the pure-v2 guests")
    end
    assert(takana.cgroup(boxname)):enable { "memory" }
    new()
    local svc = sup:service(decl("m", 1000, { limits = { ["memory.max"] = 64 * 2 ^ 20 } }))
    assert.is_true(run_until(sup, all_running { "m" }, 10))
    local pid = svc.pid
    local ok, sum = sup:reload { decl("m", 1000, { limits = { ["memory.max"] = 32 * 2 ^ 20, ["memory.high"] = 16 * 2 ^ 20 } }) }
    assert.is_true(ok)
    assert.same({ "m" }, sum.updated)
    assert.equal(tostring(math.tointeger(32 * 2 ^ 20)), (svc.cg:get("memory.max"):gsub("%s+$", "")))
    assert.equal(tostring(math.tointeger(16 * 2 ^ 20)), (svc.cg:get("memory.high"):gsub("%s+$", "")))
    assert.is_true((sup:reload { decl("m", 1000, { limits = { ["memory.max"] = 32 * 2 ^ 20 } }) }))
    assert.equal("max", (svc.cg:get("memory.high"):gsub("%s+$", "")))
    run_until(sup, function() return false end, 1)
    assert.equal(pid, svc.pid)
    assert.equal("running", svc.state)
  end)

  it("the reload hook: declarations it returns apply; one that fails changes nothing and says why #root", function()
    if why then return pending(why) end
    local set, heard = { decl("a"), decl("b") }, {}
    local function hook() return set end
    new {
      reload = hook,
      on_reload = function(_, summary, err) heard[#heard + 1] = { summary = summary, err = err } end,
    }
    for _, d in ipairs(set) do sup:service(d) end
    assert.is_true(run_until(sup, all_running { "a", "b" }, 10))
    local before = pids()
    set = { decl("a"), decl("b"), decl("c") }
    local ok, sum = sup:reload()
    assert.is_true(ok)
    assert.same({ "c" }, sum.added)
    assert.same({ "c" }, heard[1].summary.added)
    assert.is_true(run_until(sup, all_running { "a", "b", "c" }, 10))
    -- A failing hook, a bad declaration, a supervisor option that cannot
    -- change: nil, the reason, EINVAL; nothing changed.
    local fails = {
      { function() error("boom") end, "reload: .*boom" },
      { function() return { decl("a", 1001, { bogus = 1 }) } end,
        "^bad argument #1 to 'reload' %(declaration 1 %(service 'a'%): unknown option 'bogus'%)$" },
      { function() return "a" end, "a list of service declarations expected" },
      { function() return { decl("a", 1001) }, { cgroup = boxname .. "/other" } end, "supervisor option 'cgroup' changed" },
      { function() return { decl("a", 1001) }, { cgroup = boxname .. "/sup", control = dir .. "/c.sock" } end,
        "supervisor option 'control' changed" },
      { function() return { decl("a", 1001) }, { cgroup = boxname .. "/sup", bogus = 1 } end, "unknown option 'bogus'" },
    }
    for i, f in ipairs(fails) do
      sup.reload_hook = f[1]
      local r, err, errno = sup:reload()
      assert.is_nil(r)
      assert.matches(f[2], err)
      assert.equal(E.EINVAL, errno)
      assert.equal(err, sup.reload_error)
      assert.equal(err, heard[1 + i].err)
    end
    before.c = sup:get("c").pid
    run_until(sup, function() return false end, 1)
    assert.same(before, pids())
    -- The same cgroup spelled another way, and live options: applied.
    sup.reload_hook = function()
      return { decl("a"), decl("b"), decl("c") }, { cgroup = "/" .. boxname .. "/sup/", runtime = dir, reload = hook, log_lines = 7 }
    end
    assert.is_true((sup:reload()))
    assert.equal(7, sup.log_lines)
    assert.is_nil(sup.reload_error)
    -- A hook that returns nothing made its own changes, as before.
    sup.reload_hook = function(s) s:remove("c") end
    ok, sum = sup:reload()
    assert.is_true(ok)
    assert.is_nil(sum)
    assert.is_true(run_until(sup, function() return sup:get("c") == nil end, 10))
    sup.reload_hook = nil
    local r, err, errno = sup:reload()
    assert.is_nil(r)
    assert.matches("no reload hook", err)
    assert.equal(E.EOPNOTSUPP, errno)
    sup:shutdown()
    r, err, errno = sup:reload { decl("a") }
    assert.is_nil(r)
    assert.matches("shutting down", err)
    assert.equal(E.ESHUTDOWN, errno)
    assert.is_true(run_until(sup, function() return sup.done end, 10))
    sup:close()
    r, err, errno = sup:reload { decl("a") }
    assert.is_nil(r)
    assert.matches("closed", err)
    assert.equal(E.EBADF, errno)
    sup = nil
  end)

  it("a service removed by one reload and declared again by the next comes back #root", function()
    if why then return pending(why) end
    new()
    for _, d in ipairs { decl("a"), decl("b", 1000, { stop = { signal = "USR1", timeout = 30 } }) } do sup:service(d) end
    assert.is_true(run_until(sup, all_running { "a", "b" }, 10))
    -- (b's sleep dies of USR1 at once; the point is that it is stopping
    -- when the next reload comes)
    assert.is_true((sup:reload { decl("a") }))
    local b = sup:get("b")
    assert.equal("stopping", b.state)
    local ok, sum = sup:reload { decl("a"), decl("b", 1000, { stop = { signal = "USR1", timeout = 30 } }) }
    assert.is_true(ok)
    assert.same({ "b" }, sum.updated)
    assert.is_true(run_until(sup, function() return b.state == "running" and sup:get("b") == b end, 10))
  end)

  -- ---- takana supervise FILE ----

  it("takana supervise: SIGHUP and ctl reload re-read the file; a bad file changes nothing and says why #root", function()
    if why then return pending(why) end
    local file, sock, errfile = dir .. "/sup.lua", dir .. "/ctl.sock", dir .. "/stderr"
    local function write(body, sup_extra)
      local f = assert(io.open(file .. ".new", "w"))
      f:write(([[
local sup = assert(require("takana").supervisor { cgroup = %q, control = %q, runtime = %q%s })
%s
return sup
]]):format(boxname .. "/sup", sock, dir, sup_extra or "", body))
      f:close()
      assert(os.rename(file .. ".new", file))
    end
    local function services(list)
      local out = {}
      for _, s in ipairs(list) do
        out[#out + 1] = ("sup:service { name = %q, cmd = { 'sleep', %q } }"):format(s[1], tostring(s[2] or 1000))
      end
      return table.concat(out, "\n")
    end
    local function status()
      local r = S.request(sock, { cmd = "status" }, 2)
      if not (r and r.ok) then return nil end
      local t = {}
      for _, s in ipairs(r.services) do t[s.name] = s end
      return t
    end
    local function wait(pred)
      for _ = 1, 200 do
        local st = status()
        if st and pred(st) then return st end
        takana.poll({}, 0.05)
      end
      error("the supervisor never reached the state waited for: " .. require("takana.json").encode(status() or {}))
    end
    local function running(names)
      return function(st)
        for _, n in ipairs(names) do if not (st[n] and st[n].state == "running") then return false end end
        return true
      end
    end
    local function takana_cli(...)
      local argv = { table.unpack(H.lua_argv) }
      argv[#argv + 1] = "bin/takana"
      for _, a in ipairs { ... } do argv[#argv + 1] = a end
      argv.env, argv.stdout, argv.stderr = ENV, "pipe", "pipe"
      local p = track(assert(takana.spawn(argv)))
      local out, err = p.stdout:read("a"), p.stderr:read("a")
      local st = p:wait(60)
      return st.code, out, err
    end

    write(services { { "a" }, { "b" }, { "c" } })
    local argv = { table.unpack(H.lua_argv) }
    for _, a in ipairs { "bin/takana", "supervise", file } do argv[#argv + 1] = a end
    local errf = assert(io.open(errfile, "w"))
    argv.env, argv.pdeathsig, argv.stdout, argv.stderr = ENV, "KILL", "null", errf
    local p = track(assert(takana.spawn(argv)))
    errf:close()
    local st = wait(running { "a", "b", "c" })
    local a, b, c = st.a.pid, st.b.pid, st.c.pid
    local c_dir = H.cgroup2_mount() .. st.c.cgroup

    -- b's command changes: SIGHUP restarts b once, a and c keep their pids.
    write(services { { "a" }, { "b", 1001 }, { "c" } })
    p:signal("HUP")
    st = wait(function(s) return running { "a", "b", "c" }(s) and s.b.pid ~= b end)
    assert.equal(a, st.a.pid)
    assert.equal(c, st.c.pid)
    assert.equal(1, st.b.restarts)
    b = st.b.pid

    -- c removed: stopped, its cgroup gone.
    write(services { { "a" }, { "b", 1001 } })
    p:signal("HUP")
    st = wait(function(s) return s.c == nil end)
    assert.same({ a, b }, { st.a.pid, st.b.pid })
    for _ = 1, 100 do
      if not exists(c_dir) then break end
      takana.poll({}, 0.05)
    end
    assert.is_false(exists(c_dir))

    -- d added, through ctl reload, which says what it did.
    write(services { { "a" }, { "b", 1001 }, { "d" } })
    local code, out, err = takana_cli("ctl", sock, "reload")
    assert.equal("", err)
    assert.equal(0, code)
    assert.equal("reloaded: 1 added (d), 2 unchanged\n", out)
    st = wait(running { "a", "b", "d" })
    assert.same({ a, b }, { st.a.pid, st.b.pid })
    local d = st.d.pid

    -- Files that fail to load or check: ctl reload exits 1 with the reason,
    -- and nothing changes.
    local bad = {
      { services { { "a" }, { "b", 1002 } } .. "\nsup:service { name = ", "sup.lua:%d+: unexpected symbol" },
      { services { { "a" }, { "b", 1002 } } .. "\nsup:service { name = 'e', cmd = { 'true' }, restart = 'sometimes' }",
        "sup.lua:4: bad argument #1 to 'service' %(option 'restart'" },
      { services { { "a" }, { "b", 1002 } } .. "\nsup:service { name = 'e', cmd = { 'true' }, bogus = 1 }",
        "unknown option 'bogus'" },
      { services { { "a" }, { "b", 1002 } } .. "\nsup:service { name = 'a', cmd = { 'true' } }", "already declared" },
      { services { { "a" }, { "b", 1002 } } .. "\nerror('boom')", "boom" },
      { services { { "a" }, { "b", 1002 } }, "supervisor option 'subreaper' changed", ", subreaper = true" },
    }
    for _, case in ipairs(bad) do
      write(case[1], case[3])
      code, out, err = takana_cli("ctl", sock, "reload")
      assert.equal(1, code)
      assert.equal("", out)
      assert.matches("^takana ctl: reload: ", err)
      assert.matches(case[2], err)
    end
    -- The same through SIGHUP: the reason goes to takana supervise's stderr.
    write(services { { "a" }, { "b", 1002 } } .. "\nsup:service { name = ")
    p:signal("HUP")
    local said
    for _ = 1, 100 do
      said = H.read(errfile) or ""
      if said:find("unexpected symbol", 1, true) then break end
      takana.poll({}, 0.05)
    end
    assert.matches("takana supervise: reload: .*sup.lua:%d+: unexpected symbol", said)
    st = status()
    assert.same({ a, b, d }, { st.a.pid, st.b.pid, st.d.pid })
    assert.same({ 0, 1, 0 }, { st.a.restarts, st.b.restarts, st.d.restarts })

    -- A good file again: applied.
    write(services { { "a" }, { "b", 1001 } })
    code, out = takana_cli("ctl", sock, "reload")
    assert.equal(0, code)
    assert.equal("reloaded: 1 removed (d), 2 unchanged\n", out)
    assert.is_nil(takana_cli("ctl", sock, "reload", "extra") == 0 or nil)

    p:signal("TERM")
    assert.same({ exited = true, code = 0 }, p:wait(30))
    assert.is_false(exists(H.cgroup2_mount() .. "/" .. boxname .. "/sup"))
  end)
end)
