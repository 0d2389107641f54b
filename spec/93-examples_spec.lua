-- The shipped examples, part two (issue 24): examples/oomd.lua against a
-- memory hog, examples/services.lua under `takana supervise`, and `takana
-- example` that runs them. Each example runs as a user runs it, `takana
-- example NAME ARGS` from this tree, on processes this spec starts in
-- takana-test-* cgroups it makes (and, on a hybrid host, a takana-test-* v1
-- memory cgroup), all removed after; every process dies with the spec
-- (pdeathsig) and has a bounded life.
--
-- Memory pressure: in pure cgroup2 (the qemu guests) a hog touches 200 MiB
-- against a memory.high of 16 MiB; on a hybrid host, whose memory
-- controller is cgroup v1's, a hog rereads a 64 MiB file in a v1 memory
-- cgroup of 32 MiB (page cache thrashing). PSI counts either as the v2
-- cgroup's memory stall.
local takana = require "takana"
local H = require "helpers"
local json = require "takana.json"

local ROOT = assert(io.popen("pwd")):read("l")
local PATHS = { LUA_PATH = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;", LUA_CPATH = ROOT .. "/?.so;;" }

-- `takana ARGS...` from this tree, its output piped: a table with the
-- child and what it printed so far (out, err).
local function takana_cmd(args, env)
  local argv = table.move(H.lua_argv, 1, #H.lua_argv, 1, {})
  argv[#argv + 1] = ROOT .. "/bin/takana"
  table.move(args, 1, #args, #argv + 1, argv)
  local add = {}
  for k, v in pairs(PATHS) do add[k] = v end
  for k, v in pairs(env or {}) do add[k] = v end
  argv.stdout, argv.stderr, argv.pdeathsig, argv.env = "pipe", "pipe", "KILL", { add = add }
  return { child = assert(takana.spawn(argv)), out = "", err = "" }
end

local function drain(c)
  for k, p in pairs { out = c.child.stdout, err = c.child.stderr } do
    while true do
      local s = p:read()
      if not s or s == "" then break end
      c[k] = c[k] .. s
    end
  end
end

-- Waits up to secs for pred() while draining c; false if c ended or the
-- time ran out first. A bound, not a timing.
local function wait_until(c, secs, pred)
  local deadline = takana.now() + secs
  while takana.now() < deadline do
    drain(c)
    if pred() then return true end
    if not c.child:alive() then break end
    takana.poll({ c.child.stdout, c.child.stderr }, 0.1)
  end
  drain(c)
  return pred() and true or false
end

-- SIGTERM (unless it ended), SIGKILL after 10 s; the exit record.
local function stop(c)
  if c.child:alive() then c.child:signal("TERM") end
  wait_until(c, 10, function() return not c.child:alive() end)
  if c.child:alive() then c.child:signal("KILL") end
  local rec = assert(c.child:wait(10))
  drain(c)
  c.child.stdout:close()
  c.child.stderr:close()
  return rec
end

-- The JSON lines of out, decoded, without their time.
local function events(out)
  local t = {}
  for line in out:gmatch("[^\n]+") do
    local e = assert(json.decode(line))
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", e.time)
    e.time = nil
    t[#t + 1] = e
  end
  return t
end

-- The shell words of `takana example ARGS` from this tree: exit code and
-- stdout+stderr.
local function example(...)
  local words = {}
  for i, a in ipairs { ... } do words[i] = H.shell_quote(a) end
  return H.run(("LUA_PATH=%s LUA_CPATH=%s %s bin/takana example %s"):format(H.shell_quote(PATHS.LUA_PATH),
    H.shell_quote(PATHS.LUA_CPATH), H.lua, table.concat(words, " ")))
end

describe("takana example", function()
  it("lists the examples with their first lines, and refuses one it does not have", function()
    local code, out = example()
    assert.equal(0, code, out)
    for _, name in ipairs { "oomd", "services" } do
      local first = assert(io.lines("examples/" .. name .. ".lua")()):gsub("^%-%-%s*", "")
      assert.truthy(("\n" .. out):find(("\n%-12s %s\n"):format(name, first), 1, true), name .. ": " .. out)
    end
    code, out = example("--help")
    assert.equal(0, code, out)
    assert.matches("^usage: takana example", out)
    code, out = example("nope")
    assert.equal(2, code)
    assert.equal("takana: example: no example 'nope' ('takana example' lists them)\n", out)
    code, out = example("../oomd")
    assert.equal(2, code)
    assert.equal("takana: example: no example '../oomd' ('takana example' lists them)\n", out)
  end)
end)

describe("examples/oomd.lua", function()
  local USAGE = assert(H.read("examples/oomd.lua"):match("\nlocal USAGE = %[%[\n(.-)%]%]\n"))

  it("prints the usage at its top for --help, and exits 2 naming each mistake", function()
    local code, out = example("oomd", "--help")
    assert.equal(0, code, out)
    assert.equal(USAGE, out)
    local mistakes = {
      { {}, "no CGROUP given" },
      { { "--kind", "half", "x" }, "--kind: some or full" },
      { { "--pick=rss", "x" }, "--pick: size or growth" },
      { { "--stall", "0", "x" }, "--stall: a number above 0, at most 100" },
      { { "--stall", "101", "x" }, "--stall: a number above 0, at most 100" },
      { { "--window", "0.4", "x" }, "--window: a number from 0.5 to 10" },
      { { "--window", "11", "x" }, "--window: a number from 0.5 to 10" },
      { { "--window", "two", "x" }, "--window needs a number >= 0, not two" },
      { { "--holdoff", "-0.5", "x" }, "--holdoff needs a number >= 0, not -0.5" },
      { { "--holdoff", "86401", "x" }, "--holdoff: a number from 0 to 86400" },
      { { "x", "--window" }, "--window needs a value" },
      { { "--bogus", "x" }, "bad option --bogus" },
    }
    for _, m in ipairs(mistakes) do
      code, out = example("oomd", table.unpack(m[1]))
      assert.equal(2, code, table.concat(m[1], " ") .. ": " .. out)
      assert.equal("oomd: " .. m[2] .. "\nusage: oomd.lua [OPTIONS] CGROUP...\n", out)
    end
  end)

  it("exits 1 with one failure line for a cgroup it cannot watch", function()
    local name = "takana-test-none-" .. math.random(1e9)
    local _, why = takana.cgroup(name)
    local c = takana_cmd { "example", "oomd", "--json", name }
    wait_until(c, 10, function() return not c.child:alive() end)
    local rec = stop(c)
    assert.same({ exited = true, code = 1 }, { exited = rec.exited, code = rec.code })
    assert.same({ { event = "failure", cgroup = name, error = why } }, events(c.out))
    assert.equal("", c.err)
  end)

  -- A takana-test-* cgroup with the v2 controllers enabled and a bystander
  -- sleeping in its child "idle" (with controllers on, cgroup2 keeps
  -- processes in leaves only); nil and why without one.
  local box
  local function sandbox()
    if not H.is_root() then return nil, "needs root to create a cgroup" end
    if H.no_spawn then return nil, H.no_spawn end
    if not H.read("/proc/pressure/memory") then return nil, "no /proc/pressure: the kernel has no PSI (psi=0)" end
    local path, name = H.test_cgroup_path()
    if not path then return nil, "no cgroup2 hierarchy is mounted" end
    box = { path = path, name = name, cg = assert(takana.cgroup(name)), procs = {}, controllers = {} }
    for c in (H.read(path .. "/cgroup.controllers") or ""):gmatch("%S+") do box.controllers[#box.controllers + 1] = c end
    if #box.controllers > 0 then assert(box.cg:enable(box.controllers)) end
    local idle = assert(box.cg:mkdir("idle"))
    box.procs[1] = assert(takana.spawn { "sleep", "60", cgroup = idle, pdeathsig = "KILL" })
    idle:close()
    return box
  end

  -- Starts the pure-cgroup2 hog: 200 MiB touched against memory.high 16 MiB.
  local function v2_hog()
    local unit = assert(box.cg:mkdir("hog"))
    assert(unit:set("memory.high", 16 * 2 ^ 20))
    local hog = assert(takana.spawn { H.fixture_path, "--touch-mb", "200", "--life", "60", cgroup = unit,
      stdout = "null", pdeathsig = "KILL" })
    unit:close()
    box.procs[#box.procs + 1] = hog
    return hog
  end

  -- Starts the hybrid host's hog: rereading a 64 MiB file at random in a
  -- v1 memory cgroup of 32 MiB, its own memory growing by 1 MiB a second
  -- to 12 MiB.
  local function v1_hog()
    box.dir = assert(io.popen("mktemp -d /tmp/takana-spec93.XXXXXX")):read("l")
    box.v1 = "/sys/fs/cgroup/memory/" .. box.name
    local file = box.dir .. "/pages"
    assert(os.execute(("mkdir %s && echo %d > %s/memory.limit_in_bytes && " ..
      "dd if=/dev/zero of=%s bs=1M count=64 conv=fsync status=none && dd if=%s iflag=nocache count=0 status=none")
      :format(box.v1, 32 * 2 ^ 20, box.v1, file, file)))
    box.hogcg = assert(box.cg:mkdir("hog"))
    local script = box.dir .. "/hog.lua"
    local f = assert(io.open(script, "w"))
    f:write([[
local keep, start = {}, os.time()
local f = assert(io.open(arg[1], "rb"))
local pages, x = f:seek("end") // 4096, start
f:setvbuf("no")
while true do
  if #keep < math.min(12, os.time() - start + 8) then keep[#keep + 1] = string.rep(string.char(#keep), 1 << 20) end
  x = x * 6364136223846793005 + 1
  f:seek("set", ((x >> 17) % pages) * 4096)
  f:read(1)
end
]])
    f:close()
    local hog = assert(takana.spawn { "sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec timeout 60 "$2" "$3" "$4"', "sh",
      box.v1, "lua5.4", script, file, cgroup = box.hogcg, stdout = "null", pdeathsig = "KILL" })
    box.procs[#box.procs + 1] = hog
    return hog
  end

  after_each(function()
    if not box then return end
    for _, p in ipairs(box.procs) do
      if p:alive() then p:signal("KILL") end
      p:wait(5)
    end
    if box.hogcg then box.hogcg:close() end
    box.cg:close()
    H.cgroup_cleanup(box.path)
    if box.v1 then os.execute("rmdir " .. H.shell_quote(box.v1) .. " 2>/dev/null") end
    if box.dir then os.execute("rm -rf " .. H.shell_quote(box.dir)) end
    box = nil
  end)

  -- The pid the hog's memory is in: the fixture itself, or under v1 the
  -- Lua process `timeout` runs.
  local function hog_pid(hog)
    local found
    H.poll_until({}, function()
      local snap = assert(takana.snapshot { fields = { "pid", "ppid", "comm" } })
      for p in snap:each() do
        if p.pid == hog.pid and p.comm == "fixture" then found = p.pid end
        if p.ppid == hog.pid and p.comm:match("^lua") then found = p.pid end
      end
      return found
    end, 50)
    return found
  end

  -- Runs oomd on the box with args until pred(events) or secs pass after it
  -- started, then stops it: its events and exit record.
  local function run_oomd(args, secs, pred)
    local argv = { "example", "oomd", "--json" }
    table.move(args, 1, #args, #argv + 1, argv)
    argv[#argv + 1] = box.name
    local c = takana_cmd(argv)
    -- Its signals are set before its first line: SIGTERM then stops it
    -- (a guest under TCG takes seconds to get there).
    wait_until(c, 30, function() return c.out:find('"event":"start"', 1, true) ~= nil end)
    wait_until(c, secs, function()
      local ok, evs = pcall(events, c.out)
      return ok and pred(evs)
    end)
    local rec = stop(c)
    assert.equal("", c.err)
    return events(c.out), rec
  end

  -- The lines oomd starts with on this host: start, and a note where the
  -- memory controller is not on cgroup2.
  local function opening(pick, dry)
    local t = { { event = "start", cgroup = "/" .. box.name, trigger = "memory some 1 % of 2 s", pick = pick,
      dry_run = dry } }
    local why = box.cg:why("memory")
    if why then
      t[2] = { event = "note", cgroup = "/" .. box.name, memory = why, so = "victims are ranked by RSS (page cache " ..
        "and kernel memory charged to them are not counted); the cgroup's memory.current, memory.high and oom events are unknown" }
    end
    return t
  end

  it("waits on its trigger and kills nothing in a cgroup whose memory does not stall #root", function()
    local why
    box, why = sandbox()
    if not box then pending(why) return end
    -- 2.5 s: more than the trigger's 2 s window.
    local evs, rec = run_oomd({ "--stall", "1" }, 2.5, function() return false end)
    assert.same({ exited = true, code = 0 }, { exited = rec.exited, code = rec.code })
    local want = opening("size", false)
    want[#want + 1] = { event = "stop", signal = "TERM" }
    assert.same(want, evs)
    assert.is_true(box.procs[1]:alive(), "the bystander was killed")
  end)

  -- What a kill event says: the hog's pid, name, RSS and command line, and
  -- the cgroup's pressure as it read it.
  local function check_victim(e, pid, comm, argv)
    assert.equal(pid, e.pid)
    assert.equal(comm, e.comm)
    assert.equal("/" .. box.name, e.cgroup)
    assert.equal(table.concat(argv, " "), e.cmdline)
    assert.is_true(math.type(e.rss_bytes) == "integer" and e.rss_bytes >= 8 * 2 ^ 20, tostring(e.rss_bytes))
    assert.is_true(e.some_avg10 >= 0 and e.some_avg10 <= 100 and e.full_avg10 >= 0 and e.full_avg10 <= e.some_avg10)
  end

  it("kills the biggest process, a hog under memory.high, through its pidfd #root #guest", function()
    local why
    box, why = sandbox()
    if not box then pending(why) return end
    local memory = box.cg:why("memory")
    if memory then
      pending(memory .. ": memory.high needs it on cgroup2 (the pure-cgroup2 guests run this)")
      return
    end
    local hog = v2_hog()
    local pid = assert(hog_pid(hog))
    local evs, rec = run_oomd({ "--stall", "1" }, 60, function(e) return #e >= 2 and e[#e].event ~= "start" end)
    assert.same({ exited = true, code = 0 }, { exited = rec.exited, code = rec.code })
    assert.same(opening("size", false), { table.unpack(evs, 1, 1) })
    assert.equal("kill", evs[2].event, json.encode(evs))
    check_victim(evs[2], pid, "fixture", { H.fixture_path, "--touch-mb", "200", "--life", "60" })
    assert.equal(9, hog:wait(5).signal)
    assert.is_true(box.procs[1]:alive(), "the bystander was killed")
  end)

  it("kills the biggest process, a hog thrashing in a v1 memory cgroup, on a hybrid host #root", function()
    local why
    box, why = sandbox()
    if not box then pending(why) return end
    if not box.cg:why("memory") then pending("the memory controller is on cgroup2 here: the memory.high case runs") return end
    if not H.read("/sys/fs/cgroup/memory/cgroup.procs") then pending("no v1 memory hierarchy at /sys/fs/cgroup/memory") return end
    local hog = v1_hog()
    local pid = assert(hog_pid(hog))
    local evs, rec = run_oomd({ "--stall", "1" }, 30, function(e) return #e >= 3 end)
    assert.same({ exited = true, code = 0 }, { exited = rec.exited, code = rec.code })
    assert.same(opening("size", false), { table.unpack(evs, 1, 2) })
    assert.equal("kill", evs[3] and evs[3].event, json.encode(evs))
    check_victim(evs[3], pid, "lua5.4", { "lua5.4", box.dir .. "/hog.lua", box.dir .. "/pages" })
    assert.is_true(box.procs[1]:alive(), "the bystander was killed")
  end)

  it("--dry-run --pick growth names the fastest grower and kills nothing #root #guest", function()
    local why
    box, why = sandbox()
    if not box then pending(why) return end
    local v1 = box.cg:why("memory")
    if v1 and not H.read("/sys/fs/cgroup/memory/cgroup.procs") then pending(v1 .. ", and no v1 hierarchy") return end
    local hog = v1 and v1_hog() or v2_hog()
    local pid = assert(hog_pid(hog))
    local n = #opening("growth", true)
    local evs, rec = run_oomd({ "--stall", "1", "--dry-run", "--pick", "growth" }, 60,
      function(e) return #e > n end)
    assert.same({ exited = true, code = 0 }, { exited = rec.exited, code = rec.code })
    assert.same(opening("growth", true), { table.unpack(evs, 1, n) })
    local e = evs[n + 1]
    assert.equal("would-kill", e and e.event, json.encode(evs))
    assert.equal(pid, e.pid)
    assert.equal("integer", math.type(e.growth_bytes_s))
    assert.is_true(hog:alive(), "a dry run killed the hog")
    assert.is_true(box.procs[1]:alive(), "the bystander was killed")
  end)
end)

describe("examples/services.lua under takana supervise", function()
  it("starts the database, then the web app and the worker once it is ready, restarts a killed worker, " ..
     "and stops cleanly #root", function()
    if not H.is_root() then pending("needs root to create a cgroup") return end
    if H.no_spawn then pending(H.no_spawn) return end
    if not os.execute("python3 -c 'import sqlite3' 2>/dev/null") then pending("no python3 with sqlite3") return end
    local mnt = H.cgroup2_mount()
    if not mnt then pending("no cgroup2 hierarchy is mounted") return end
    local name = ("takana-test-%d-%d"):format(H.pid, math.random(1e9))
    local dir = assert(io.popen("mktemp -d /tmp/takana-spec93.XXXXXX")):read("l")
    local port = 20000 + math.random(30000)
    local sock = dir .. "/ctl.sock"
    local c = takana_cmd({ "supervise", "examples/services.lua" },
      { SERVICES_CGROUP = name, SERVICES_DIR = dir .. "/state", SERVICES_PORT = tostring(port), SERVICES_CONTROL = sock })
    local request = require("takana.supervisor").request
    local ok, err = pcall(function()
      local status
      local function by_name()
        local r = request(sock, { cmd = "status" }, 2)
        if not (r and r.ok) then return {} end
        status = {}
        for _, s in ipairs(r.services) do status[s.name] = s end
        return status
      end
      local function ready_all(restarts)
        local s = by_name()
        for _, n in ipairs { "db", "web", "worker" } do
          if not (s[n] and s[n].state == "running" and s[n].ready and s[n].restarts == (n == "worker" and restarts or 0)) then
            return false
          end
        end
        return true
      end
      assert.is_true(wait_until(c, 30, function() return ready_all(0) end), json.encode(status or {}) .. c.err)
      -- The web app answers from the database (its line protocol's counter).
      local code, out = H.run(("python3 -c 'import urllib.request; " ..
        "print(urllib.request.urlopen(\"http://127.0.0.1:%d/\").read().decode(), end=\"\")'"):format(port))
      assert.equal(0, code, out)
      assert.equal("hits 1\n", out)
      -- The worker's jobs reach its log; SIGKILL it, and it is back.
      assert.is_true(wait_until(c, 10, function()
        return (H.read(dir .. "/state/worker.log") or ""):find(" stdout job %d+\n") ~= nil
      end))
      local old = status.worker.pid
      local w = assert(takana.process(old))
      assert.equal("python3", w:comm())
      assert(w:signal("KILL"))
      w:close()
      assert.is_true(wait_until(c, 15, function() return ready_all(1) end), json.encode(status or {}) .. c.err)
      assert.are_not.equal(old, status.worker.pid)
      assert.equal(9, (status.worker.last_exit or {}).signal, json.encode(status.worker))
    end)
    local rec = stop(c)
    -- What stderr says: each controller a limit was left out for.
    local want, on_v2 = {}, {}
    for _, ctrl in ipairs(takana.cgroup.probe().v2_controllers or {}) do on_v2[ctrl] = true end
    for _, ctrl in ipairs { "memory", "pids", "cpu" } do
      if not on_v2[ctrl] then
        want[#want + 1] = ("services: %s limits left out: the %s controller is not on cgroup2 here (a %s host)\n")
          :format(ctrl, ctrl, takana.cgroup.probe().mode)
      end
    end
    local leftover = H.read(mnt .. "/" .. name .. "/cgroup.procs")
    if leftover then H.cgroup_cleanup(mnt .. "/" .. name) end
    os.execute("rm -rf " .. H.shell_quote(dir))
    assert(ok, err)
    assert.same({ exited = true, code = 0 }, { exited = rec.exited, code = rec.code })
    local said = {}
    for line in c.err:gmatch("[^\n]*\n") do said[#said + 1] = line end
    table.sort(said)
    table.sort(want)
    assert.equal(table.concat(want), table.concat(said)) -- (in the order the file's limits come, by pairs)
    assert.is_nil(leftover, "the supervisor's cgroup is left after a clean stop")
  end)
end)
