-- The README's cookbook (issue 23): five policies, each no longer than a
-- psutil script doing the same job (doc/psutil/), each run here verbatim.
--
-- A recipe is the ```lua no-run block after a `<!-- cookbook:NAME -->` line
-- (spec/85-audit-core runs the README's other blocks). It runs in a child
-- lua5.4 loading this tree, its lines at their README line numbers, with
-- only these adaptations, each named in the test that makes it:
--   * the cgroup "workload" is a takana-test-* cgroup this spec made, and
--     paths (textfile directory, logs, control socket, port) are its own;
--   * the runaway killer's threshold is lowered from half a CPU to 5 % of
--     one, so that a spinner on a loaded host (2 CPUs shared) still counts.
-- Each policy is an endless loop: the spec bounds it. It acts on processes
-- this spec started, in that cgroup, checks what the policy did, then stops
-- it with SIGTERM (the supervisor shuts down and exits 0) and kills it if it
-- does not stop; every process here dies with the spec (pdeathsig).
local takana = require "takana"
local H = require "helpers"

local NAMES = { "oom-guard", "exec-logger", "cgroup-exporter", "runaway-killer", "supervisor" }

-- name -> { first = line number of its first line, lines = {...} }
local function recipes(text)
  local out, want, cur, n = {}, nil, nil, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if cur then
      if line:match("^```%s*$") then
        out[cur.name], cur = cur, nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    elseif want then
      assert(line:match("^```lua"), "README.md:" .. n .. ": cookbook:" .. want .. " is not followed by a ```lua block")
      cur, want = { name = want, first = n + 1, lines = {} }, nil
    else
      want = line:match("^<!%-%- cookbook:([%w-]+) %-%->%s*$")
    end
  end
  return out
end

-- Lines of code: neither blank nor a comment alone.
local function code_lines(lines, comment)
  local n = 0
  for _, l in ipairs(lines) do
    if l:match("%S") and not l:match("^%s*" .. comment) then n = n + 1 end
  end
  return n
end

local function file_lines(path)
  local t = {}
  for l in assert(io.lines(path)) do t[#t + 1] = l end
  return t
end

local README = assert(H.read("README.md"))
local book = recipes(README)

describe("the README's cookbook", function()
  it("has the five recipes, each no longer than its psutil version, as its table says", function()
    for _, name in ipairs(NAMES) do
      local r = assert(book[name], "no <!-- cookbook:" .. name .. " --> block in README.md")
      local lua_n = code_lines(r.lines, "%-%-")
      local py_n = code_lines(file_lines("doc/psutil/" .. name .. ".py"), "#")
      assert.truthy(lua_n <= py_n, ("%s: %d lines of Lua against %d of Python"):format(name, lua_n, py_n))
      local function row_of(label)
        return README:match("\n| %[" .. label:gsub("%p", "%%%0") .. "%]%([^)]*%) | (%d+ | %d+) |")
      end
      local row = row_of(name) or row_of((name:gsub("%-", " ")))
      assert.equal(lua_n .. " | " .. py_n, row, name .. ": the README's table")
    end
  end)
end)

-- A directory of this spec's own (mode 0700), removed by the caller.
local function tmpdir()
  return (assert(io.popen("mktemp -d /tmp/takana-spec91.XXXXXX")):read("l"))
end

-- Starts recipe `name` with `subs` ({from, to} plain replacements, each of
-- which must apply). Returns the child, its stdout and stderr piped.
local function start(name, subs, dir)
  local r = assert(book[name], name)
  local text = table.concat(r.lines, "\n")
  for _, s in ipairs(subs) do
    local from = s[1]:gsub("%p", "%%%0")
    local n
    text, n = text:gsub(from, (s[2]:gsub("%%", "%%%%")))
    assert(n > 0, name .. ": no " .. s[1] .. " in the recipe")
  end
  local script = dir .. "/" .. name .. ".lua"
  local f = assert(io.open(script, "w"))
  f:write(("\n"):rep(r.first - 1), text, "\n")
  f:close()
  local root = assert(io.popen("pwd")):read("l")
  local argv = {}
  for _, a in ipairs(H.lua_argv) do argv[#argv + 1] = a end
  argv[#argv + 1] = script
  argv.stdout, argv.stderr, argv.pdeathsig = "pipe", "pipe", "KILL"
  argv.env = { add = {
    LUA_PATH = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;;",
    LUA_CPATH = root .. "/?.so;;",
  } }
  local child = assert(takana.spawn(argv))
  -- A child (userdata) with what it printed so far: a table that
  -- forwards the methods this spec calls.
  return setmetatable({ child = child, stdout = child.stdout, stderr = child.stderr, out = "", err = "" }, {
    __index = function(_, k) return function(self, ...) return self.child[k](self.child, ...) end end,
  })
end

-- Moves what the child printed into c.out / c.err (keeping the last MiB of
-- stdout: an exec logger on a busy host prints without end).
local function drain(c)
  for _, k in ipairs { "out", "err" } do
    local p = k == "out" and c.stdout or c.stderr
    while true do
      local s = p:read()
      if not s or s == "" then break end
      c[k] = c[k] .. s
    end
  end
  if #c.out > 2 ^ 20 then c.out = c.out:sub(-2 ^ 20) end
end

-- Waits up to `secs` for pred() while draining the child; false if the
-- child ended or the time ran out first.
local function wait_until(c, secs, pred)
  local deadline = takana.now() + secs
  while takana.now() < deadline do
    drain(c)
    if pred() then return true end
    if not c:alive() then return false end
    takana.poll({ c.stdout, c.stderr }, 0.1)
  end
  drain(c)
  return pred()
end

-- SIGTERM, then SIGKILL after 10 s; the exit record. (Every bound here
-- adds up to under 300 s, within the 400 s a file has in the qemu guests.)
local function stop(c)
  if c:alive() then c:signal("TERM") end
  local deadline = takana.now() + 10
  while c:alive() and takana.now() < deadline do
    drain(c)
    takana.poll({ c.child, c.stdout, c.stderr }, 0.1)
  end
  if c:alive() then c:signal("KILL") end
  local rec = assert(c:wait(10))
  drain(c)
  c.stdout:close()
  c.stderr:close()
  return rec
end

-- A takana-test-* cgroup with "workload" below it, the controllers the
-- host has on cgroup2 enabled for both; nil and why without one.
local function sandbox()
  if not H.is_root() then return nil, "needs root to create a cgroup" end
  if H.no_spawn then return nil, H.no_spawn end
  local path, name = H.test_cgroup_path()
  if not path then return nil, "no cgroup2 hierarchy is mounted" end
  local box = { path = path, name = name, cg = assert(takana.cgroup(name)), controllers = {} }
  for c in (H.read(path .. "/cgroup.controllers") or ""):gmatch("%S+") do box.controllers[c] = true end
  local list = {}
  for c in pairs(box.controllers) do list[#list + 1] = c end
  if #list > 0 then assert(box.cg:enable(list)) end
  box.unit = assert(box.cg:mkdir("workload"))
  if #list > 0 then assert(box.unit:enable(list)) end
  return box
end

local function release(box, procs, dir)
  for _, p in ipairs(procs or {}) do
    if p:alive() then p:signal("KILL") end
    p:wait(5)
  end
  if box then
    box.unit:close()
    box.cg:close()
    H.cgroup_cleanup(box.path)
  end
  if dir then os.execute("rm -rf " .. H.shell_quote(dir)) end
end

describe("cookbook: oom-guard", function()
  local box, procs, dir

  before_each(function() procs, dir = {}, tmpdir() end)
  after_each(function()
    release(box, procs, dir)
    box = nil
  end)

  local function setup()
    if not H.read("/proc/pressure/memory") then return nil, "no /proc/pressure: the kernel has no PSI (psi=0)" end
    local why
    box, why = sandbox()
    if not box then return nil, why end
    if not box.unit:get("memory.pressure") then return nil, "no memory.pressure in the cgroup (PSI off)" end
    -- A bystander, smaller than any victim.
    local idle = assert(box.unit:mkdir("idle"))
    procs[#procs + 1] = assert(takana.spawn { "sleep", "60", cgroup = idle, pdeathsig = "KILL" })
    idle:close()
    return true
  end

  it("waits on its trigger and kills nothing while memory does not stall #root #slow", function()
    local ok, why = setup()
    if not ok then pending(why) return end
    local c = start("oom-guard", { { '"workload"', '"' .. box.name .. '/workload"' } }, dir)
    procs[#procs + 1] = c
    -- The trigger is open once the guard sleeps in poll: give it 2 s.
    assert.is_false(wait_until(c, 2, function() return c.err ~= "" or c.out ~= "" end), c.err .. c.out)
    assert.is_true(c:alive(), c.err)
    local rec = stop(c)
    assert.equal("", c.err)
    assert.equal("", c.out)
    assert.equal(15, rec.signal)
    assert.is_true(procs[1]:alive())
  end)

  it("kills the largest process of the cgroup when its memory stalls #root #guest #slow", function()
    local ok, why = setup()
    if not ok then pending(why) return end
    if not box.controllers.memory then
      pending(("the memory controller is not on cgroup2 here (%s/cgroup.controllers): a hybrid host keeps it on v1")
        :format(box.path))
      return
    end
    local unit = assert(box.unit:mkdir("hog"))
    assert(unit:set("memory.high", 16 * 2 ^ 20))
    local c = start("oom-guard", { { '"workload"', '"' .. box.name .. '/workload"' } }, dir)
    procs[#procs + 1] = c
    -- 200 MiB touched against a memory.high of 16 MiB: reclaim stalls it.
    local hog = assert(takana.spawn { H.fixture_path, "--touch-mb", "200", "--life", "60", cgroup = unit,
      stdout = "null", pdeathsig = "KILL" })
    procs[#procs + 1] = hog
    unit:close()
    local killed = wait_until(c, 60, function() return not hog:alive() end)
    -- What the guard saw, for a failure's message.
    local seen = ("guard said: %q; workload memory.pressure: %q; hog memory.events: %q, memory.current %s; " ..
      "the workload's pids in a snapshot: %d"):format(c.out .. c.err,
      H.read(box.path .. "/workload/memory.pressure") or "-", H.read(box.path .. "/workload/hog/memory.events") or "-",
      H.read(box.path .. "/workload/hog/memory.current") or "-",
      #assert(takana.snapshot { fields = { "pid", "cgroup_id" } }):filter { cgroup = box.unit.path, recursive = true })
    local rec = hog:wait(5)
    stop(c)
    assert.is_true(killed, "the hog still runs after 60 s; " .. seen)
    assert.equal(9, rec and rec.signal)
    assert.matches("killing " .. hog.pid .. " fixture", c.out, 1, true)
    assert.is_true(procs[1]:alive(), "the bystander was killed")
    assert.equal("", c.err)
  end)
end)

describe("cookbook: exec logger", function()
  local procs, dir
  before_each(function() procs, dir = {}, tmpdir() end)
  after_each(function() release(nil, procs, dir) end)

  it("prints a line naming an exec, with its pid and argv #slow", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local ev, why = takana.events { "exec" }
    if not ev then pending("no exec events for this user here: " .. why) return end
    ev:close()
    local c = start("exec-logger", {}, dir)
    procs[#procs + 1] = c
    local marker = "takana-cookbook-" .. math.random(1e9)
    -- The logger's line for pid: {time, pid, ppid, uid, argv}, or nil.
    local function line_of(pid)
      for line in c.out:gmatch("[^\n]+") do
        local f = {}
        for v in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = v end
        if f[2] == tostring(pid) and line:find(marker, 1, true) then return f end
      end
    end
    local seen, pid, execs = nil, nil, {}
    -- An exec a second until the logger names one (a BPF load under qemu
    -- takes seconds); each lives 1 s, long enough for the connector to
    -- read its argv.
    local deadline = takana.now() + 45
    while not seen and c:alive() and takana.now() < deadline do
      local p = assert(takana.spawn { "sh", "-c", "sleep 1", marker, pdeathsig = "KILL" })
      procs[#procs + 1], execs[#execs + 1] = p, p
      pid = p.pid
      wait_until(c, 1, function()
        for _, q in ipairs(execs) do
          if line_of(q.pid) then seen = q.pid return true end
        end
      end)
    end
    local rec = stop(c)
    assert.truthy(seen, ("no line for %s (last pid %s) in: %s"):format(marker, tostring(pid), c.out:sub(-2000)))
    -- time, pid, ppid, uid, argv
    local fields = line_of(seen)
    assert.equal(tostring(H.pid), fields[3])
    -- The uid is the event's (issue 23: events that say who); "nil" from a
    -- stream that does not carry it yet.
    if fields[4] ~= "nil" then assert.equal(tostring(require("takana.core").geteuid()), fields[4]) end
    assert.equal("sh -c sleep 1 " .. marker, fields[5])
    assert.equal("", c.err)
    assert.equal(15, rec.signal)
  end)
end)

describe("cookbook: cgroup exporter", function()
  local box, procs, dir
  before_each(function() procs, dir = {}, tmpdir() end)
  after_each(function()
    release(box, procs, dir)
    box = nil
  end)

  it("writes a textfile with a series for each cgroup below the workload #root #slow", function()
    local why
    box, why = sandbox()
    if not box then pending(why) return end
    for _, n in ipairs { "a", "b" } do
      local cg = assert(box.unit:mkdir(n))
      procs[#procs + 1] = assert(takana.spawn { "sleep", "60", cgroup = cg, pdeathsig = "KILL" })
      cg:close()
    end
    local c = start("cgroup-exporter", {
      { '"workload"', '"' .. box.name .. '/workload"' },
      { '"/var/lib/prometheus/node-exporter"', '"' .. dir .. '"' },
    }, dir)
    procs[#procs + 1] = c
    local file = dir .. "/cgroups.prom"
    assert.is_true(wait_until(c, 45, function() return H.read(file) ~= nil end), c.err)
    local rec = stop(c)
    assert.equal("", c.err)
    assert.equal(15, rec.signal)
    -- The text format (HELP lines optional): each family with samples has
    -- its TYPE, of the kind it should be.
    local series, types, sampled = {}, {}, {}
    local kinds = { cgroup_cpu_seconds_total = "counter", cgroup_memory_bytes = "gauge",
      cgroup_memory_pressure_some_ratio = "gauge" }
    for line in H.read(file):gmatch("[^\n]+") do
      local fam, kind = line:match("^# TYPE (%S+) (%a+)$")
      if fam then
        types[fam] = kind
      elseif not line:match("^# HELP %S+ ") then
        local name, cg, v = line:match('^([%w_]+){cgroup="([^"]*)"} (%S+)$')
        assert.truthy(name and tonumber(v), "not a sample: " .. line)
        series[name .. " " .. cg], sampled[name] = tonumber(v), true
      end
    end
    for name in pairs(sampled) do assert.equal(kinds[name], types[name], name) end
    for _, n in ipairs { "a", "b" } do
      local path = "/" .. box.name .. "/workload/" .. n
      assert.truthy(series["cgroup_cpu_seconds_total " .. path], path)
      if box.controllers.memory then assert.truthy(series["cgroup_memory_bytes " .. path] > 0, path) end
    end
  end)
end)

describe("cookbook: runaway killer", function()
  local box, procs, dir
  before_each(function() procs, dir = {}, tmpdir() end)
  after_each(function()
    release(box, procs, dir)
    box = nil
  end)

  it("terminates a spinner of the workload and leaves an idle process #root #slow", function()
    local why
    box, why = sandbox()
    if not box then pending(why) return end
    local hot, idle = assert(box.unit:mkdir("hot")), assert(box.unit:mkdir("idle"))
    local spinner = assert(takana.spawn { H.fixture_path, "--spin", "--life", "90", cgroup = hot,
      stdout = "null", pdeathsig = "KILL" })
    local sleeper = assert(takana.spawn { "sleep", "90", cgroup = idle, pdeathsig = "KILL" })
    procs[#procs + 1], procs[#procs + 2] = spinner, sleeper
    hot:close()
    idle:close()
    local c = start("runaway-killer", {
      { '"workload"', '"' .. box.name .. '/workload"' },
      { "> 0.5 then", "> 0.05 then" },
    }, dir)
    procs[#procs + 1] = c
    local gone = wait_until(c, 60, function() return not spinner:alive() end)
    local rec = spinner:wait(5)
    stop(c)
    assert.is_true(gone, "the spinner still runs; killer said: " .. c.out .. c.err)
    assert.equal(15, rec.signal)
    assert.matches("runaway: " .. spinner.pid .. " fixture at", c.out, 1, true)
    assert.is_true(sleeper:alive())
    assert.equal("", c.err)
  end)
end)

describe("cookbook: supervisor", function()
  local box, procs, dir
  before_each(function() procs, dir = {}, tmpdir() end)
  after_each(function()
    release(box, procs, dir)
    box = nil
  end)

  it("runs both services, answers takana ctl, and shuts down cleanly on SIGTERM #root #slow", function()
    local why
    box, why = sandbox()
    if not box then pending(why) return end
    local python = os.execute("command -v python3 >/dev/null")
    if not python then pending("no python3 for the web service") return end
    -- The supervisor makes its own cgroup: the sandbox's "workload" goes.
    box.unit:remove()
    local sock = dir .. "/ctl.sock"
    assert(os.execute("mkdir -m 700 " .. H.shell_quote(dir .. "/log")))
    local port = tostring(20000 + math.random(30000))
    local c = start("supervisor", {
      { '"workload"', '"' .. box.name .. '/workload"' },
      { '"/var/log/workload"', '"' .. dir .. '/log"' },
      { '"/run/workload.sock"', '"' .. sock .. '"' },
      { '"8080"', '"' .. port .. '"' },
    }, dir)
    procs[#procs + 1] = c
    local request = require("takana.supervisor").request
    local states
    local up = wait_until(c, 45, function()
      local r = request(sock, { cmd = "status" }, 2)
      if not (r and r.ok) then return false end
      states = {}
      for _, s in ipairs(r.services) do states[s.name] = s.state end
      return states.web == "running" and states.worker == "running"
        and (H.read(dir .. "/log/worker.log") or ""):find(" stdout tick\n", 1, true) ~= nil
    end)
    local rec = stop(c)
    assert.is_true(up, "services not running: " .. require("takana.json").encode(states or {}) .. c.err)
    assert.same({ exited = true, code = 0 }, { exited = rec.exited, code = rec.code })
    assert.equal("", c.err)
    assert.matches(" stdout tick\n", H.read(dir .. "/log/worker.log") or "", 1, true)
    -- A completed shutdown removes the cgroups it made.
    assert.is_nil(H.read(box.path .. "/workload/cgroup.procs"))
  end)
end)
