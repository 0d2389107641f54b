-- Regression specs for issue 12 (the adversarial audit), the snapshot,
-- spawn and pidfd items: 2 (use-after-free from Lua), 13 (one value on
-- success; the README's examples run), 14 (a parent cycle), 15 (a zombie's
-- uid) and the smaller ones of 19. Memory items fail under the ASan build
-- (sh .ci/asan lua5.4 /usr/bin/busted spec/85-audit-core_spec.lua).
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local E = require("takana").errno
local EMFILE, ETIMEDOUT, EACCES = E.EMFILE, E.ETIMEDOUT, E.EACCES

local COLLECTED = "snapshot used after its __gc ran"

-- A /proc/<pid>/stat line with the given pid and ppid, for snapshots built
-- from text (core.snapshot_from_stat).
local function stat_line(pid, ppid)
  return ("%d (p%d) S %d %d %d 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 1 0 %d 1000000 50 " ..
    "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"):format(pid, pid, ppid, pid, pid, pid)
end

-- Runs a Lua program in a child lua5.4 loading this tree's takana, with a
-- bound on its run time (a hang fails the spec instead of stalling it).
-- Returns the exit code, stdout and stderr.
local function run_lua(program, opts)
  opts = opts or {}
  local dir = assert(io.popen("mktemp -d /tmp/takana-spec85.XXXXXX")):read("l")
  local script = dir .. "/" .. (opts.name or "main.lua")
  local f = assert(io.open(script, "w"))
  f:write(program)
  f:close()
  local root = assert(io.popen("pwd")):read("l")
  local env = ("LUA_PATH=%s LUA_CPATH=%s "):format(
    H.shell_quote(root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;;"),
    H.shell_quote(root .. "/?.so;;"))
  local cmd = ("cd %s && %s%stimeout %s %s %s %s 2>%s/stderr"):format(
    H.shell_quote(opts.cwd or root), opts.prefix or "", env, opts.timeout or 120, H.lua,
    H.shell_quote(script), opts.args or "", dir)
  local p = io.popen(cmd)
  local out = p:read("a")
  local _, _, code = p:close()
  local err = H.read(dir .. "/stderr") or ""
  os.execute("rm -rf " .. H.shell_quote(dir))
  return code, out, err
end

describe("audit item 2: use-after-free from plain Lua", function()
  it("a view kept by an object finalized after its snapshot raises instead of reading freed records", function()
    local seen = {}
    -- Everything in a function of its own, so no register of the spec's
    -- frame keeps the snapshot reachable.
    local function make()
      -- Marked for finalization before the snapshot: finalized after it.
      local keeper = setmetatable({}, { __gc = function(self)
        local v = self.view
        seen.pid = { pcall(function() return v.pid end) }
        seen.comm = { pcall(function() return v.comm end) }
        seen.totable = { pcall(function() return v:totable() end) }
        seen.tostring = tostring(v)
      end })
      local snap = assert(takana.snapshot { backend = "proc" })
      keeper.view = snap:each()()
      assert.equal("number", math.type(keeper.view.pid) and "number")
    end
    make()
    collectgarbage() collectgarbage()
    assert.is_not_nil(seen.pid, "the keeper was finalized")
    for _, k in ipairs { "pid", "comm", "totable" } do
      assert.is_false(seen[k][1], k)
      assert.matches(COLLECTED, seen[k][2], 1, true)
    end
    assert.equal("takana.Record (snapshot collected)", seen.tostring)
  end)

  it("__gc called by hand leaves a snapshot, its views and its iterator raising", function()
    local snap = assert(takana.snapshot { backend = "proc" })
    local other = assert(takana.snapshot { backend = "proc" })
    local it = snap:each()
    local v = it()
    assert.equal(v.pid, snap:totable()[1].pid)
    local gc = getmetatable(snap).__gc
    gc(snap)
    gc(snap)   -- twice is safe
    local uses = {
      len = function() return #snap end,
      get = function() return snap:get(1) end,
      totable = function() return snap:totable() end,
      children = function() return snap:children(1, true) end,
      each = function() return snap:each() end,
      backend = function() return snap.backend end,
      delta_old = function() return takana.delta(snap, other) end,
      delta_new = function() return takana.delta(other, snap) end,
      view_field = function() return v.pid end,
      view_comm = function() return v.comm end,
      view_totable = function() return v:totable() end,
      iterator = function() return it() end,
    }
    for name, use in pairs(uses) do
      local ok, err = pcall(use)
      assert.is_false(ok, name)
      assert.matches(COLLECTED, err, 1, true)
    end
    assert.matches("collected", tostring(snap))
    assert.equal("takana.Record (snapshot collected)", tostring(v))
    assert.is_true(#other > 0, "another snapshot is untouched")
  end)

  it("a finalizer that calls __gc by hand in the middle of a method makes it raise", function()
    -- A collection step can run at any allocation of totable(), children()
    -- or delta(), and a finalizer there can reach the snapshot's __gc.
    -- make test-gc's hook would collect between instructions, outside the
    -- methods: this spec stages its own collections.
    local hook = { debug.gethook() }
    debug.sethook()
    finally(function() debug.sethook(table.unpack(hook)) end)
    local gc = getmetatable(assert(takana.snapshot { backend = "proc" })).__gc
    local methods = {
      totable = function(s) return s:totable() end,
      children = function(s) return s:children(1, true) end,
      delta = function(s, other) return takana.delta(other, s) end,
      get = function(s) for pid = 1, 400 do s:get(pid) end end,
    }
    for name, call in pairs(methods) do
      local other = assert(takana.snapshot { backend = "proc" })
      local snap = assert(takana.snapshot { backend = "proc" })
      local where
      collectgarbage("collect")
      -- Minor collections after 1% growth: one comes inside the method.
      collectgarbage("generational", 1, 100)
      for _ = 1, 10 do
        setmetatable({}, { __gc = function()
          if not where then where = debug.traceback() gc(snap) end
        end })
      end
      -- Bounded, and on until a collection came inside a call (how soon
      -- depends on the heap the earlier spec files left).
      local ok, err = pcall(function() for _ = 1, 100000 do call(snap, other) if where then return end end end)
      collectgarbage("incremental")
      collectgarbage("collect")
      assert.is_string(where, name)
      -- It ran inside the method's C code, and the method raised.
      local frame = where:match("__gc'\n%s*([^\n]*)")
      assert.matches("^%[C%]: in ", frame, nil, nil, name .. ": " .. where)
      assert.is_nil(frame:find("collectgarbage", 1, true), name .. ": " .. where)
      assert.is_false(ok, name)
      assert.matches(COLLECTED, err, 1, true)
    end
  end)

  it("a view's tostring survives a finalizer that frees its snapshot as the comm is pushed", function()
    -- The comm's push can run a collection step; the pid was read after it.
    local hook = { debug.gethook() }
    debug.sethook()
    finally(function() debug.sethook(table.unpack(hook)) collectgarbage("incremental") end)
    collectgarbage("incremental")
    local ended = 0
    for _ = 1, 50 do
      local s = assert(takana.snapshot { backend = "proc", fields = { "pid", "comm" } })
      local v = s:each()()
      local text = getmetatable(v).__tostring
      do
        local victim = s
        setmetatable({}, { __gc = function() getmetatable(victim).__gc(victim) end })
      end
      for _ = 1, 100000 do
        local t = {} -- luacheck: ignore 241
        for k = 1, 2048 do t[k] = k end -- growth with no collection check of its own
        local str = text(v)
        if str == "takana.Record (snapshot collected)" then ended = ended + 1 break end
        assert.matches("^takana%.Record %(pid %d+, ", str)
      end
    end
    assert.is_true(ended > 0, "no finalizer ran inside a tostring")
  end)

  it("a view keeps its snapshot alive", function()
    local function view()
      local snap = assert(takana.snapshot { backend = "proc" })
      local it = snap:each()
      return it(), snap:totable()[1]
    end
    local v, first = view()
    collectgarbage() collectgarbage()
    assert.same(first, v:totable())
  end)

  -- Reproducer 03: __index of the spawn table replaces t[2], t[3] and
  -- collects after argv was read; execve used to get the freed strings.
  it("spawn's argv survives an __index that drops and collects the strings", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local a, b = ("A"):rep(60) .. "1", ("B"):rep(60) .. "2"
    local function make()
      local t = { "/bin/echo", ("A"):rep(60) .. "1", ("B"):rep(60) .. "2", stdout = "pipe" }
      return setmetatable(t, { __index = function(tbl, k)
        if k == "setsid" then
          rawset(tbl, 2, "x") rawset(tbl, 3, "y")
          collectgarbage() collectgarbage()
          local junk = {}
          for i = 1, 5000 do junk[i] = ("JUNK%07d"):format(i) .. ("J"):rep(50) end
          tbl.junk_holder = nil
          rawset(tbl, "_junk", nil)
          _G.takana_spec85_junk = junk
        end
      end })
    end
    local child = assert(takana.spawn(make()))
    _G.takana_spec85_junk = nil
    assert.equal(a .. " " .. b .. "\n", child.stdout:read("a"))
    assert.same({ exited = true, code = 0 }, child:wait())
  end)

  -- Reproducer 03b: the same through cwd; the message was formatted from
  -- the freed string.
  it("spawn's cwd survives an __index that replaces it and collects", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local cwd = "/nonexistent/" .. ("C"):rep(60)
    local function make()
      local t = { "true", cwd = "/nonexistent/" .. ("C"):rep(60) }
      return setmetatable(t, { __index = function(tbl, k)
        if k == "setsid" then rawset(tbl, "cwd", "/tmp") collectgarbage() collectgarbage() end
      end })
    end
    assert.same({ nil, "spawn true: chdir " .. cwd .. ": No such file or directory", 2 },
      { takana.spawn(make()) })
  end)

  it("spawn's env survives an __index that empties the env table and collects", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local function make()
      local env = { ["TAKANA_" .. ("E"):rep(40)] = ("v"):rep(50), ("TAKANA_X=" .. ("x"):rep(50)) }
      local t = { "sh", "-c", "env | grep ^TAKANA_ | sort", env = env, stdout = "pipe" }
      return setmetatable(t, { __index = function(_, k)
        if k == "setsid" or k == "cwd" or k == "stdout" then
          for key in pairs(env) do env[key] = nil end
          collectgarbage() collectgarbage()
        end
      end })
    end
    local child = assert(takana.spawn(make()))
    assert.equal("TAKANA_" .. ("E"):rep(40) .. "=" .. ("v"):rep(50) .. "\nTAKANA_X=" .. ("x"):rep(50) .. "\n",
      child.stdout:read("a"))
    child:wait()
  end)
end)

describe("audit: bad input through metamethods that run Lua and collect", function()
  local function collecting(t, extra)
    local mt = {
      __index = function(_, k) collectgarbage() return extra and extra[k] end,
      __len = function() collectgarbage() return 1e9 end,
      __tostring = function() collectgarbage() return "tostring" end,
      __pairs = function(tbl) collectgarbage() return next, tbl, nil end,
    }
    return setmetatable(t, mt)
  end

  it("spawn takes argv by raw length and options through __index, and stays memory-safe", function()
    if H.no_spawn then pending(H.no_spawn) return end
    -- __len says 1e9: the length is the raw one (two arguments here).
    local child = assert(takana.spawn(collecting({ "echo", "hi" }, { stdout = "pipe" })))
    assert.equal("hi\n", child.stdout:read("a"))
    child:wait()
    -- A table with __tostring is no string, wherever it is given.
    local obj = collecting({})
    for _, t in ipairs {
      { obj }, { "true", obj }, { "true", cwd = obj }, { "true", env = { A = obj } },
      { "true", env = { obj } }, { "true", stdout = obj },
      { "true", cgroup = obj }, { "true", cgroup_fallback = obj }, { "true", pgroup = obj },
      { "true", setsid = obj },
    } do
      local ok, err = pcall(takana.spawn, t)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'spawn'", err, 1, true)
    end
  end)

  it("names the option and its own type in a type error", function()
    local cases = {
      { { "true", env = "x" }, "option 'env': a table of NAME = value strings expected, got string" },
      { { "true", setsid = 1 }, "option 'setsid': boolean expected, got number" },
      { { "true", pgroup = "x" }, "option 'pgroup': boolean or pgid expected, got string" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(takana.spawn, c[1])
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'spawn' (" .. c[2] .. ")", err, 1, true)
    end
  end)

  it("snapshot options, record fields and keys that run Lua", function()
    local ok, err = pcall(takana.snapshot, collecting({ backend = "proc" }))
    assert.is_true(ok, err)
    local snap = assert(takana.snapshot { backend = "proc" })
    local key = collecting({})
    local p = snap:each()()
    assert.is_nil(p[key])
    assert.is_nil(p[1])
    assert.is_nil(p.nonexistent)
    assert.is_nil(snap[key])
    assert.is_nil(snap[1])
    assert.has_error(function() snap:get(key) end)
    assert.has_error(function() snap:get(1.5) end)
    for _, absent in ipairs { 0, -1, 2^31, 2^62 } do assert.is_nil(snap:get(absent)) end
    assert.has_error(function() snap:children(key) end)
    assert.has_error(function() snap:children(1, key) end)
    assert.has_error(function() takana.delta(snap, key) end)
    assert.has_error(function() core.snapshot_from_stat { key } end)
    assert.has_error(function() core.snapshot_from_stat { "garbage" } end)
  end)

  it("poll with objects whose fileno() collects and closes other objects", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local a = assert(takana.spawn { "sleep", "30" })
    local b = assert(takana.spawn { "true" })
    local tricky = { fileno = function() collectgarbage() return b:fileno() end }
    b:wait()
    local ready = assert(takana.poll({ a, tricky }, 5))
    assert.same({ tricky }, ready)
    a:signal("KILL")
    a:wait()
    a:close()
    -- A closed object's fileno raises: a caller's mistake.
    assert.has_error(function() takana.poll({ a }, 0) end)
  end)
end)

describe("audit item 13: one value on success", function()
  it("takana.delta(old, takana.snapshot()) works (the README's own line)", function()
    local old = assert(takana.snapshot())
    assert.equal(1, select("#", takana.snapshot()))
    for _, b in ipairs { "proc", "kfunc", "iter" } do
      local n = select("#", takana.snapshot { backend = b })
      local s = takana.snapshot { backend = b }
      assert.equal(s and 1 or 3, n, b)
    end
    local d = takana.delta(old, takana.snapshot())
    assert.equal("number", math.type(d.interval_ns) and "number")
  end)

  it("every public function returns exactly one value on success", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local snap = takana.snapshot()
    assert.equal(1, select("#", takana.delta(snap, snap)))
    local child
    assert.equal(1, select("#", (function(...) child = ... return ... end)(takana.spawn { "sleep", "30" })))
    assert.equal(1, select("#", takana.pidfd(child.pid)))
    assert.equal(1, select("#", child:alive()))
    assert.equal(1, select("#", takana.poll({ child }, 0)))
    assert.equal(1, select("#", child:signal(0)))
    child:signal("KILL")
    assert.equal(1, select("#", child:wait()))
    assert.equal(1, select("#", takana.events { "exit", backend = "poll" }))
    assert.equal(1, select("#", takana.events { "exit" }))
    assert.equal(1, select("#", takana.probe()))
    assert.equal(1, select("#", takana.proc_cache_info()))
  end)

  it("failures keep nil, message, errno", function()
    assert.equal(3, select("#", takana.spawn { "/nonexistent" }))
    for _, b in ipairs { "kfunc", "iter" } do
      if not takana.snapshot { backend = b } then
        assert.equal(3, select("#", takana.snapshot { backend = b }))
      end
    end
  end)
end)

-- The examples of the README and of doc/reference.md, verbatim, in a child
-- lua5.4 loading this tree; each file is a program of its own.
--
-- Each ```lua block runs with its lines at their line numbers in the file (an
-- error says README.md:<line>). The blocks run in order in one program, as
-- a reader would paste them (later ones use names the first defines), until
-- the first block this host or user cannot run; the rest are pending with
-- the reason. The only adaptations, each for a rule of the test suite:
--   * `takana.pidfd(<number>)` opens a process this spec started, not
--     whatever has that pid: specs never signal a process they did not start.
--   * a relative cgroup path in `cgroup = "<path>"` and
--     `takana.cgroup.self()` point into this spec's takana-test-* cgroup
--     (created first): specs write only into cgroups they created. A block
--     with cgroup names therefore needs root and a cgroup2 mount; a block
--     that sets `<controller>.max` needs that controller on cgroup2.
--   * names the README leaves to the reader are stubs: `takana` (the
--     module), `resync_from(snapshot)`.
--   * a block fenced ```lua no-run is not run here: the README's cookbook
--     (blocks marked <!-- cookbook:NAME -->: endless policies that kill
--     processes or run a supervisor) runs in spec/91-cookbook_spec.lua, each
--     against a cgroup of its own and bounded; the reference's supervisor
--     configuration is a daemon's, whose own spec runs it.
--   * a block with an endless event loop (`while true do` and no `break`)
--     runs alone (its own program, the stubs above) for a few seconds while
--     this spec starts processes, and passes if it was still running, with
--     nothing on stderr, when stopped.
for _, file in ipairs { "README.md", "doc/reference.md" } do
describe("audit item 13: " .. file .. "'s examples run verbatim", function()
  local STUBS = 'local takana = require "takana"; ' ..
    'function resync_from(snap) assert(snap ~= nil and #snap > 0, "resync_from: no snapshot") end; '

  local function blocks_of(text)
    local blocks, cur, n = {}, nil, 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      if cur then
        if line:match("^%s*```%s*$") then
          blocks[#blocks + 1] = cur
          cur = nil
        else
          cur.lines[#cur.lines + 1] = line:sub(#cur.indent + 1)
        end
      else
        local indent = line:match("^(%s*)```lua%s*$")
        if indent then cur = { first = n + 1, indent = indent, lines = {} } end
      end
    end
    return blocks
  end

  local function endless(block)
    local code = table.concat(block.lines, "\n")
    return code:find("while%s+true%s+do") ~= nil and not code:find("%f[%w]break%f[^%w]")
  end

  -- What a block needs from this host, or nil.
  local function lacks(block, sandbox, controllers)
    local code = table.concat(block.lines, "\n")
    local uses_cgroup = code:find('cgroup%s*=%s*"[^/"]') or code:find("takana%.cgroup%.self%(%)")
      or code:find('takana%.cgroup%("')
    if uses_cgroup and not sandbox then
      return "needs root and a cgroup2 mount for its cgroup (specs use only their own takana-test-* cgroup)"
    end
    for c in code:gmatch('"(%a+)%.max"') do
      if not controllers[c] then
        return ("sets %s.max: the %s controller is not on cgroup2 here (cgroup.controllers: %s)"):format(
          c, c, table.concat((function() local l = {} for k in pairs(controllers) do l[#l + 1] = k end
            table.sort(l) return l end)(), " "))
      end
    end
  end

  -- The adaptations listed above, line by line (line numbers unchanged).
  local function adapt(line, ctx)
    line = line:gsub("takana%.pidfd%(%s*%d+%s*%)", "takana.pidfd(" .. ctx.pid .. ")")
    if ctx.sandbox then
      line = line:gsub('(cgroup%s*=%s*)"([^/"][^"]*)"', function(pre, rel)
        os.execute("mkdir -p " .. H.shell_quote(ctx.sandbox_path .. "/" .. rel))
        return pre .. '"' .. ctx.sandbox .. "/" .. rel .. '"'
      end)
      line = line:gsub("takana%.cgroup%.self%(%)", 'takana.cgroup("' .. ctx.sandbox .. '")')
      line = line:gsub('takana%.cgroup%("([^/"][^"]*)"%)', function(rel)
        if rel:find(ctx.sandbox, 1, true) == 1 then return nil end
        os.execute("mkdir -p " .. H.shell_quote(ctx.sandbox_path .. "/" .. rel))
        return 'takana.cgroup("' .. ctx.sandbox .. "/" .. rel .. '")'
      end)
    end
    return line
  end

  local function program(blocks, ctx)
    local lines = { STUBS }
    for _, b in ipairs(blocks) do
      while #lines < b.first - 1 do lines[#lines + 1] = "" end
      for i, l in ipairs(b.lines) do lines[b.first - 1 + i] = adapt(l, ctx) end
    end
    return table.concat(lines, "\n") .. "\n"
  end

  local blocks = blocks_of(assert(H.read(file), file))
  local ctx, target

  before_each(function()
    if H.no_spawn then return end
    target = assert(takana.spawn { "sleep", "120" })
    ctx = { pid = target.pid }
    local path, name = H.test_cgroup_path()
    if path then
      ctx.sandbox, ctx.sandbox_path = name, path
      ctx.controllers = {}
      for c in (H.read(path .. "/cgroup.controllers") or ""):gmatch("%S+") do ctx.controllers[c] = true end
      -- The README's cgroup examples set limits: enable what the sandbox has.
      local enable = {}
      for c in pairs(ctx.controllers) do enable[#enable + 1] = "+" .. c end
      if #enable > 0 then
        local f = io.open(path .. "/cgroup.subtree_control", "w")
        if f then f:write(table.concat(enable, " ")) f:close() end
      end
    end
  end)
  after_each(function()
    if target then
      target:signal("KILL")
      target:wait()
      target = nil
    end
    if ctx and ctx.sandbox_path then H.cgroup_cleanup(ctx.sandbox_path) end
    ctx = nil
  end)

  it("has examples", function()
    assert.is_true(#blocks > 0, "no ```lua block in " .. file)
  end)

  it("runs the examples in order, as one program #root", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local run, skipped = {}, nil
    for _, b in ipairs(blocks) do
      if not endless(b) then
        local why = lacks(b, ctx.sandbox, ctx.controllers or {})
        if why then
          skipped = ("%s:%d and the examples after it: the block %s"):format(file, b.first, why)
          break
        end
        run[#run + 1] = b
      end
    end
    if #run > 0 then
      local code, _, err = run_lua(program(run, ctx), { name = file:match("[^/]+$") })
      assert.equal(0, code, err)
      assert.equal("", err)
    end
    if skipped then pending(skipped) end
  end)

  local has_endless = false
  for _, b in ipairs(blocks) do has_endless = has_endless or endless(b) end
  -- (The README's loops are its cookbook's, which spec/91-cookbook runs.)
  if has_endless then it("runs each endless event loop for a bounded time without an error #slow", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local loops = 0
    for _, b in ipairs(blocks) do
      if endless(b) then
        loops = loops + 1
        local code_text = table.concat(b.lines, "\n")
        local mod = code_text:match('require%s*%(?%s*"([%w%.]+)"')
        local why = lacks(b, ctx.sandbox, ctx.controllers or {})
        if mod and mod ~= "takana" and not pcall(require, mod) then
          pending(("%s:%d needs the module %s, not installed here"):format(file, b.first, mod))
        elseif why then
          pending(("%s:%d: the block %s"):format(file, b.first, why))
        else
          -- Processes come and go while it runs: exits for the loop to read.
          local bg = assert(takana.spawn { "sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2; /bin/true; done" })
          local code, _, err = run_lua(program({ b }, ctx), { name = file:match("[^/]+$"), timeout = 3 })
          bg:wait()
          assert.equal("", err, ("%s:%d"):format(file, b.first))
          assert.equal(124, code, ("%s:%d stopped by itself"):format(file, b.first))
        end
      end
    end
    assert.truthy(loops > 0)
  end) end
end)
end

describe("audit item 14: a parent cycle in a snapshot", function()
  -- A /proc scan straddling pid reuse can record A.ppid = B and B.ppid = A
  -- (reproducer 14-children-cycle.sh); snapshots built from stat text give
  -- the same records deterministically. Run in a child with a bound: the
  -- old children() never returned.
  it("children(pid, true) visits each process once", function()
    local code, out, err = run_lua([[
      local core = require "takana.core"
      local function line(pid, ppid)
        return ("%d (p%d) S %d %d %d 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 1 0 %d 1000000 50 " ..
          "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"):format(pid, pid, ppid, pid, pid, pid)
      end
      local s = core.snapshot_from_stat { line(1, 0), line(10, 20), line(20, 10), line(30, 10),
        line(40, 30), line(50, 50), line(60, 1) }
      print(table.concat(s:children(10, true), ","))
      print(table.concat(s:children(20, true), ","))
      print(table.concat(s:children(1, true), ","))
      print(table.concat(s:children(50, true), ","))
      print(table.concat(s:children(10), ","))
    ]], { timeout = 60 })
    assert.equal(0, code, err)
    assert.equal("20,30,40\n10,30,40\n60\n\n20,30\n", out)
  end)

  it("children(pid, true) is breadth-first, children in pid order, as before", function()
    -- A random forest, checked against a plain Lua breadth-first walk.
    math.randomseed(12)
    local lines, ppid_of, n = {}, {}, 3000
    for pid = 1, n do
      local ppid = pid == 1 and 0 or math.random(1, pid - 1)
      if pid % 97 == 0 then ppid = n + 1 + pid end   -- parent not in the snapshot
      ppid_of[pid] = ppid
      lines[#lines + 1] = stat_line(pid, ppid)
    end
    local s = core.snapshot_from_stat(lines)
    assert.equal(n, #s)
    for _, root in ipairs { 1, 2, 97, 500, n } do
      local want, queue, head = {}, { root }, 1
      while head <= #queue do
        local at = queue[head]
        head = head + 1
        for pid = 1, n do
          if ppid_of[pid] == at and pid ~= at then
            want[#want + 1] = pid
            queue[#queue + 1] = pid
          end
        end
      end
      assert.same(want, s:children(root, true), "root " .. root)
    end
    assert.is_nil(s:children(n + 5, true))
  end)
end)

describe("audit item 15: a zombie's uid", function()
  it("is its owner's, the owner of /proc/<pid>, in every backend", function()
    if H.no_spawn then pending(H.no_spawn) return end
    -- As root, a child of uid 65534 (distinct from root); otherwise our own.
    local argv = H.is_root() and { "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "true" }
      or { "true" }
    local want = H.is_root() and 65534 or H.uid()
    local c = assert(takana.spawn(argv))
    H.poll_until({ c }, function() return not c:alive() end, 100)
    assert.equal("Z", H.wait_state(c.pid, "Z"))
    local owner = tonumber(select(2, H.run("stat -c %u /proc/" .. c.pid)):match("%d+"))
    assert.equal(want, owner)
    for _, b in ipairs { "proc", "kfunc", "iter" } do
      local s = takana.snapshot { backend = b, cache = false }
      if s then
        local r = assert(s:get(c.pid), b)
        assert.equal("Z", r.state)
        assert.equal(want, r.uid, b)
      end
    end
    -- Warm: through a cached stat descriptor too.
    local s1 = assert(takana.snapshot { backend = "proc" })
    local s2 = assert(takana.snapshot { backend = "proc" })
    assert.equal(want, s1:get(c.pid).uid)
    assert.equal(want, s2:get(c.pid).uid)
    c:wait()
  end)
end)

describe("audit item 19: spawn, timeouts and arguments", function()
  it("clone3 and posix_spawn children both start with ignored signals reset to default", function()
    if H.no_spawn then pending(H.no_spawn) return end
    -- A supervisor that ignores SIGPIPE and SIGHUP (nohup, event loops):
    -- sh's trap "" sets SIG_IGN, which exec keeps.
    local code, out, err = run_lua([[
      local core = require "takana.core"
      for _, fallback in ipairs { false, true } do
        local c = assert(core.spawn { "sh", "-c",
          "grep SigIgn /proc/self/status; yes | head -c 1 >/dev/null",
          stdout = "pipe", stderr = "pipe", _fallback = fallback })
        io.write(c.mechanism, " ", c.stdout:read("a"), "stderr:", c.stderr:read("a"), "\n")
        c:wait()
      end
    ]], { prefix = "sh -c 'trap \"\" PIPE HUP; exec \"$0\" \"$@\"' env " })
    assert.equal(0, code, err)
    local n = 0
    for mech, mask, stderr in out:gmatch("(%S+) SigIgn:%s*(%x+)\nstderr:([^\n]*)\n") do
      n = n + 1
      local bits = tonumber(mask, 16)
      assert.equal(0, bits & (1 << (13 - 1)), mech .. ": SIGPIPE still ignored")
      assert.equal(0, bits & (1 << (1 - 1)), mech .. ": SIGHUP still ignored")
      -- No standard signal stays ignored (glibc's posix_spawn keeps its own
      -- two internal real-time signals, 32 and 33, ignored).
      assert.equal(0, bits & 0x7fffffff, mech .. ": SigIgn " .. mask)
      assert.equal("", stderr, mech)
    end
    assert.equal(2, n, out)
  end)

  -- The timeout a blocked child passes to the kernel, read from
  -- /proc/<pid>/syscall (x86_64 numbers: poll 7, epoll_wait 232).
  it("a timeout past 24.8 days waits in slices, never epoll_wait(-2147483648)", function()
    if H.no_spawn then pending(H.no_spawn) return end
    if select(2, H.run("uname -m")) ~= "x86_64\n" then pending("reads x86_64 syscall numbers") return end
    local root = assert(io.popen("pwd")):read("l")
    local env = {
      LUA_PATH = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;;", LUA_CPATH = root .. "/?.so;;",
      PATH = os.getenv("PATH"),
    }
    local cases = {
      { "poll", 232, 4, 'require("takana").poll({}, 2592000)' },
      { "wait", 7, 3, 'local t = require "takana" local c = t.spawn { "sleep", "60" } ' ..
        'io.write(c.pid, "\\n") io.flush() c:wait(2592000)' },
    }
    for _, case in ipairs(cases) do
      local name, nr, argi, code = table.unpack(case)
      local argv = table.move(H.lua_argv, 1, #H.lua_argv, 1, {})
      argv[#argv + 1] = "-e"
      argv[#argv + 1] = code
      argv.env = env
      argv.stdout = "pipe"
      local child = assert(takana.spawn(argv))
      -- The wait case's own child, which we kill too.
      local grandchild = name == "wait" and assert(takana.pidfd(tonumber(child.stdout:read("l"))))
      local timeout_arg
      H.poll_until({}, function()
        local text = H.read("/proc/" .. child.pid .. "/syscall") or ""
        local fields = {}
        for w in text:gmatch("%S+") do fields[#fields + 1] = w end
        if tonumber(fields[1]) == nr then
          -- int argument: the low 32 bits, signed
          local v = tonumber(fields[1 + argi]:sub(3), 16) & 0xffffffff
          timeout_arg = v >= 0x80000000 and v - 0x100000000 or v
          return true
        end
      end, 300)
      child:signal("KILL")
      child:wait()
      if grandchild then grandchild:signal("KILL") end
      assert.equal(2147483647, timeout_arg, name)
    end
  end)

  it("refuses timeouts outside 0..1 year", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local c = assert(takana.spawn { "true" })
    for _, bad in ipairs { -1, 0/0, math.huge, 86400 * 366 } do
      assert.has_error(function() c:wait(bad) end)
      assert.has_error(function() takana.poll({}, bad) end)
    end
    c:wait()
  end)

  it("every waiting method takes its timeout the same way (one parser)", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local c = assert(takana.spawn { "true", stdout = "pipe" })
    local c2 = assert(takana.spawn { "true" })
    local proc = assert(takana.process(c2))
    local tm = assert(takana.timer())
    local waits = {
      function(t) return c:wait(t) end,
      function(t) return proc:wait(t) end,
      function(t) return c.stdout:read_line(t) end,
      function(t) return c.stdout:read_all(t) end,
      function(t) return tm:read(t) end,
    }
    for i, w in ipairs(waits) do
      for _, bad in ipairs { -1, 0/0, math.huge, 86400 * 366, {} } do
        assert.has_error(function() w(bad) end, nil, ("wait #%d, timeout %s"):format(i, tostring(bad)))
      end
    end
    -- nil: forever, except the drains, where it does not wait.
    assert.same({ exited = true, code = 0 }, c:wait(nil))
    assert.same({ exited = true, code = 0 }, proc:wait(nil))
    assert.equal("", c.stdout:read_all(nil))
    assert.equal(0, tm:read(nil))
    tm:close(); proc:close(); c2:close(); c.stdout:close(); c:close()
  end)

  it("pidfd:wait running out is nil, message, ETIMEDOUT", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local c = assert(takana.spawn { "sleep", "30" })
    assert.same({ nil, ("wait: process %d still running after 0 s (wait again, or signal it)"):format(c.pid),
      ETIMEDOUT }, { c:wait(0) })
    assert.same({ nil, ("wait: process %d still running after 0.01 s (wait again, or signal it)"):format(c.pid),
      ETIMEDOUT }, { c:wait(0.01) })
    c:signal("KILL")
    assert.same({ signaled = true, signal = 9, core = false }, c:wait())
  end)

  it("spawn{stdout = 'pipe'} out of descriptors is nil, message, EMFILE", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local code, out, err = run_lua([[
      local takana = require "takana"
      local held = {}
      while true do
        local f = io.open("/dev/null")
        if not f then break end
        held[#held + 1] = f
      end
      -- One descriptor free: a pipe needs two.
      held[#held]:close()
      local r = table.pack(takana.spawn { "true", stdout = "pipe" })
      print(r.n, r[1], r[2], r[3])
      r = table.pack(takana.spawn { "true", stdin = "null", stdout = "null" })
      print(r.n, r[1], r[2], r[3])
    ]], { prefix = "sh -c 'ulimit -n 64; exec \"$0\" \"$@\"' env " })
    assert.equal(0, code, err)
    assert.equal("3\tnil\tspawn true: pipe for stdout: Too many open files\t" .. EMFILE .. "\n" ..
      "3\tnil\tspawn true: open /dev/null for stdout: Too many open files\t" .. EMFILE .. "\n", out)
  end)

  -- The second audit's #24: takana.cgroup and takana.supervisor load on
  -- first use, and out of descriptors require cannot open their files.
  it("the first use of takana.cgroup or takana.supervisor out of descriptors is nil, message, EMFILE", function()
    local code, out, err = run_lua([[
      local takana = require "takana"
      local held = {}
      while true do
        local f = io.open("/dev/null")
        if not f then break end
        held[#held + 1] = f
      end
      print(select("#", takana.cgroup("")), takana.cgroup(""))
      print(takana.cgroup.self())
      print(takana.supervisor { cgroup = "takana-test-never-made" })
      print(rawget(takana, "cgroup"))
      for _, f in ipairs(held) do f:close() end
      -- Descriptors free again: the next access loads the module.
      local cg = takana.cgroup
      print(rawget(takana, "cgroup") == cg, type(cg.self), getmetatable(cg) ~= nil)
    ]], { prefix = "sh -c 'ulimit -n 64; exec \"$0\" \"$@\"' env " })
    assert.equal(0, code, err)
    local root = assert(io.popen("pwd")):read("l")
    local function msg(mod)
      return ("nil\t%s: cannot load it now: %s/lua/%s.lua: Too many open files\t%d"):format(
        mod, root, mod:gsub("%.", "/"), EMFILE)
    end
    assert.equal("3\t" .. msg("takana.cgroup") .. "\n" .. msg("takana.cgroup") .. "\n" ..
      msg("takana.supervisor") .. "\nnil\ntrue\tfunction\ttrue\n", out)
  end)

  it("says what to do about a cgroup that cannot be entered", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local mnt = H.cgroup2_mount()
    if not mnt then pending("no cgroup2 mount") return end
    if not H.is_root() then
      local r = { takana.spawn { "true", cgroup = mnt } }
      assert.is_nil(r[1])
      assert.equal("spawn true: entering cgroup " .. mnt .. " needs write access to its cgroup.procs " ..
        "and to the common ancestor's (run as root or delegate the cgroup to this user): Permission denied", r[2])
      assert.equal(EACCES, r[3])
      return
    end
    local path, name = H.test_cgroup_path()
    local cg = assert(takana.cgroup(name))
    local c = assert(takana.spawn { "true", cgroup = cg })
    c:wait()
    H.cgroup_cleanup(path)
    local r = { takana.spawn { "true", cgroup = cg } }
    cg:close()
    assert.is_nil(r[1])
    assert.equal("spawn true: cgroup /" .. name .. " was removed (recreate it or pick another): " ..
      "No such file or directory", r[2])
    r = { takana.spawn { "true", cgroup = path } }
    assert.equal("spawn true: cgroup " .. path .. " does not exist (create it first, e.g. with " ..
      "cgroup:mkdir()): No such file or directory", r[2])
  end)

  it("pidfd, spawn, poll and snapshot functions refuse extra arguments", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local c = assert(takana.spawn { "sleep", "30" })
    local snap = assert(takana.snapshot { backend = "proc" })
    local v = snap:each()()
    local calls = {
      function() return c:fileno(1) end, function() return c:pollfd(1) end,
      function() return c:events(1) end, function() return c:timeout(1) end,
      function() return c:close(1) end, function() return c:alive(1) end,
      function() return c:signal(0, 1) end, function() return c:wait(0, 1) end,
      function() return takana.pidfd(c.pid, 1) end, function() return takana.spawn({ "true" }, 1) end,
      function() return takana.poll({}, 0, 1) end, function() return core.poll_fds({}, 0, {}, 1) end,
      function() return takana.snapshot({}, 1) end, function() return core.snapshot_take("proc", nil, true, 1) end,
      function() return snap:get(1, 1) end, function() return snap:each(1) end,
      function() return snap:children(1, true, 1) end, function() return snap:totable(1) end,
      function() return v:totable(1) end, function() return takana.delta(snap, snap, 1) end,
      function() return core.snapshot_from_stat({}, 1) end, function() return core.stat_parse("x", 1) end,
    }
    for i, f in ipairs(calls) do
      local ok, err = pcall(f)
      assert.is_false(ok, "call #" .. i)
      assert.matches("expected", err, 1, true)
    end
    -- __close passes the error object as a second argument: still closes.
    local d
    assert.has_error(function()
      local held <close> = assert(takana.pidfd(c.pid))
      d = held
      error("leaving the scope with an error")
    end, "leaving the scope with an error")
    assert.matches("closed", tostring(d))
    c:signal("KILL")
    c:wait()
    c:close()
  end)
end)

describe("audit item 2 (descriptors): spawn's stdio file", function()
  it("is the one given, even if a later option's __index closes it and reuses its number", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local dir = select(2, H.run("mktemp -d")):match("%S+")
    finally(function() os.execute("rm -rf " .. H.shell_quote(dir)) end)
    local f = assert(io.open(dir .. "/intended", "w"))
    local victim
    local t = setmetatable({ "sh", "-c", "echo written-by-child", stdout = f }, {
      __index = function(_, k)
        if k == "stderr" and not victim then
          f:close()
          victim = assert(io.open(dir .. "/victim", "w"))   -- takes the number f had
        end
      end })
    local child = assert(takana.spawn(t))
    assert.same({ exited = true, code = 0 }, child:wait(10))
    child:close()
    victim:close()
    assert.equal("written-by-child\n", H.read(dir .. "/intended"))
    assert.equal("", H.read(dir .. "/victim"))
  end)
end)
