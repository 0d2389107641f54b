-- Errors with stable names (issue 25): every runtime failure is
-- nil, message, errno, the errno a number takana.errno names both ways;
-- and no Lua code of takana decides anything, or rewrites a message, by
-- reading message text.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local E = takana.errno

-- r = table.pack(f(...)): a failure of exactly three values whose third
-- is errno `name`, whose name round-trips.
local function fails_with(name, r, what)
  assert.equal(3, r.n, what)
  assert.is_nil(r[1], what)
  assert.equal("string", type(r[2]), what)
  assert.equal(E[name], r[3], what .. ": " .. tostring(r[2]))
  assert.equal(name, E[r[3]], what)
end

-- Runs a Lua program in a child lua5.4 loading this tree's takana, under
-- `ulimit -n 64`. Returns the exit code, stdout and stderr.
local function run_lua(program)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(program)
  f:close()
  local root = assert(io.popen("pwd")):read("l")
  local env = ("LUA_PATH=%s LUA_CPATH=%s "):format(
    H.shell_quote(root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;;"),
    H.shell_quote(root .. "/?.so;;"))
  local code, out = H.run(("sh -c 'ulimit -n 64; exec \"$0\" \"$@\"' env %stimeout 120 %s %s 2>%s.err"):format(
    env, H.lua, H.shell_quote(script), script))
  local err = H.read(script .. ".err") or ""
  os.remove(script)
  os.remove(script .. ".err")
  return code, out, err
end

describe("takana.errno", function()
  it("names every errno both ways, with the C library's names and aliases", function()
    assert.equal(24, E.EMFILE)
    assert.equal("EMFILE", E[24])
    assert.equal("Too many open files", takana.strerror(E.EMFILE))
    local names = 0
    for k, v in pairs(E) do
      if type(k) == "string" then
        names = names + 1
        assert.equal("integer", math.type(v), k)
        -- The number maps back to a name with the same number (an
        -- alias maps back to the C library's name).
        assert.equal(v, E[E[v]], k)
      else
        assert.equal("integer", math.type(k))
        assert.equal(k, E[v], v)
      end
    end
    assert.truthy(names > 100, names)
    assert.equal(E.EAGAIN, E.EWOULDBLOCK)
    assert.equal("EAGAIN", E[E.EWOULDBLOCK])
    assert.equal(E.EOPNOTSUPP, E.ENOTSUP)
    assert.equal("integer", math.type(E.EDEADLOCK))
    assert.is_nil(E[0])
    assert.is_nil(E.NOSUCHERROR)
    assert.equal(core.errno, E)
    assert.has_error(function() takana.strerror(-1) end)
    assert.has_error(function() takana.strerror("EMFILE") end)
  end)
end)

describe("a failing public function returns nil, message, errno", function()
  it("a process that is gone: ESRCH", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local c = assert(takana.spawn { "true" })
    local pid = c.pid
    c:wait()
    c:close()
    fails_with("ESRCH", table.pack(takana.pidfd(pid)), "pidfd")
    fails_with("ESRCH", table.pack(takana.process(pid)), "process")
    fails_with("ESRCH", table.pack(takana.cgroup.of(pid)), "cgroup.of")
  end)

  it("a path that is missing: ENOENT", function()
    if H.no_spawn then pending(H.no_spawn) return end
    fails_with("ENOENT", table.pack(takana.spawn { "/nonexistent/takana-prog" }), "spawn")
    fails_with("ENOENT", table.pack(takana.spawn { "true", cwd = "/nonexistent/takana-dir" }), "spawn cwd")
    fails_with("ENOENT", table.pack(takana.textfile_write("/nonexistent/takana-dir", "f", "x")), "textfile_write")
    local S = require "takana.supervisor"
    fails_with("ENOENT", table.pack(S.metrics("/nonexistent/takana.sock", function() end)), "metrics")
    fails_with("ENOENT", table.pack(S.request("/nonexistent/takana.sock", { cmd = "status" })), "request")
    if H.cgroup2_mount() then
      local missing = ("takana-test-missing-%d"):format(math.random(1e9))
      fails_with("ENOENT", table.pack(takana.cgroup(missing)), "cgroup")
      fails_with("ENOENT", table.pack(takana.spawn { "true", cgroup = missing }), "spawn cgroup")
    end
  end)

  it("a refusal of takana's own carries an errno too", function()
    fails_with("EBADMSG", table.pack(require("takana.supervisor").json_decode("{")), "json_decode")
    if H.cgroup2_mount() then
      fails_with("EPERM", table.pack(takana.supervisor { cgroup = "/" }), "supervisor at the root")
    end
  end)

  it("a cgroup removed under its handle: ENOENT from each, the message built from the errno", function()
    local path, name = H.test_cgroup_path()
    if not path then pending("needs root and a cgroup2 mount") return end
    finally(function() H.cgroup_cleanup(path) end)
    local box = assert(takana.cgroup(name))
    local unit = assert(box:mkdir("unit"))
    assert(takana.cgroup(name .. "/unit")):remove()
    fails_with("ENOENT", table.pack(unit:children()), "children")
    fails_with("ENOENT", table.pack(unit:remove()), "remove")
    fails_with("ENOENT", table.pack(unit:mkdir("x")), "mkdir")
    local again = assert(box:mkdir("again"))
    fails_with("EEXIST", table.pack(box:mkdir("again")), "mkdir again")
    again:close()
    unit:close()
    box:close()
  end)

  it("enabling a controller the parent does not enable says so, with the parent's errno", function()
    local path, name = H.test_cgroup_path()
    if not path then pending("needs root and a cgroup2 mount") return end
    finally(function() H.cgroup_cleanup(path) end)
    local box = assert(takana.cgroup(name))
    local c = (box:get("cgroup.controllers") or ""):match("%S+")
    if not c then
      box:close()
      pending("the cgroup2 root enables no controller here (hybrid host)")
      return
    end
    local unit = assert(box:mkdir("unit"))
    local r = table.pack(unit:enable { c })
    assert.equal(("enable %s: %s is not in /%s/unit's cgroup.controllers: not enabled in the parent's "
      .. "cgroup.subtree_control (/%s): enable it there first (takana.cgroup(%q):enable{%q})"):format(
      c, c, name, name, "/" .. name, c), r[2])
    assert.equal(E.ENOENT, r[3])
    unit:close()
    box:close()
  end)

  it("out of descriptors: EMFILE from each, the reason given apart from its prefix, the probe not kept", function()
    if H.no_spawn then pending(H.no_spawn) return end
    local code, out, err = run_lua([==[
      local takana = require "takana"
      local core = require "takana.core"
      local E = takana.errno
      local _ = takana.cgroup.mounts -- loaded while descriptors are free
      local held = {}
      while true do
        local f = io.open("/dev/null")
        if not f then break end
        held[#held + 1] = f
      end
      local function show(what, ...)
        local r = table.pack(...)
        print(what, r.n, tostring(r[1]), E[r[3]] or tostring(r[3]))
      end
      show("pidfd", takana.pidfd(core.getpid()))
      show("timer", takana.timer(1))
      show("events", takana.events { backend = "poll" })
      show("snapshot", takana.snapshot { backend = "proc", cache = false })
      show("cgroup", takana.cgroup(""))
      show("spawn", takana.spawn { "true" })
      local _, msg, errno, reason = core.events_open("poll", core.event_bits.fork, 1.0)
      print("events_open", E[errno], msg == "events: poll backend unavailable: " .. reason)
      _, msg, errno, reason = core.snapshot_take("proc", nil, false)
      print("snapshot_take", E[errno], msg == "snapshot: proc backend unavailable: " .. reason, reason)
      local starved = takana.probe()
      for _, f in ipairs(held) do f:close() end
      local fresh = takana.probe()
      print("probe", starved.pidfd.ok, starved.snapshot.proc.why, fresh.pidfd.ok, fresh.snapshot.proc.ok)
    ]==])
    assert.equal(0, code, err)
    assert.equal(table.concat({
      "pidfd\t3\tnil\tEMFILE", "timer\t3\tnil\tEMFILE", "events\t3\tnil\tEMFILE",
      "snapshot\t3\tnil\tEMFILE", "cgroup\t3\tnil\tEMFILE", "spawn\t3\tnil\tEMFILE",
      "events_open\tEMFILE\ttrue", "snapshot_take\tEMFILE\ttrue\topen /proc: Too many open files",
      -- The probe that met EMFILE was not kept: the next one probed again.
      "probe\tfalse\topen /proc: Too many open files\ttrue\ttrue", "" }, "\n"), out)
  end)
end)

describe("the control socket", function()
  it("answers a refusal with the errno's name", function()
    local path, name = H.test_cgroup_path()
    if not path then pending("needs root and a cgroup2 mount") return end
    if H.no_spawn then pending(H.no_spawn) return end
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -m 700 " .. dir))
    local sock = dir .. "/ctl.sock"
    local sup = assert(takana.supervisor { cgroup = name .. "/sup", runtime = dir, control = sock, signals = false })
    local client
    finally(function()
      if client then
        if client:alive() then client:signal("KILL") end
        client:wait()
        client:close()
      end
      sup:close()
      os.execute("rm -rf " .. H.shell_quote(dir))
      H.cgroup_cleanup(path)
    end)
    -- The client runs apart: the supervisor answers from its own loop.
    local argv = { table.unpack(H.lua_argv) }
    for _, a in ipairs { "-e", ([[
      local S = require "takana.supervisor"
      local r = assert(S.request(%q, { cmd = "start", name = "nope" }))
      print(r.ok, r.errno, r.error)
      r = assert(S.request(%q, { cmd = "bogus" }))
      print(r.ok, r.errno)
    ]]):format(sock, sock) } do argv[#argv + 1] = a end
    argv.env = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;", PATH = os.getenv("PATH") }
    argv.stdout = "pipe"
    client = assert(takana.spawn(argv))
    for _ = 1, 400 do
      if not client:alive() then break end
      assert(sup:step(0.05) ~= nil)
    end
    assert.same({ exited = true, code = 0 }, client:wait())
    assert.equal("false\tENOENT\tno service 'nope'\nfalse\tEINVAL\n", client.stdout:read("a"))
  end)
end)

describe("a caller's mistake raises with nothing to strip", function()
  it("takana cgroup with a bad path: one line, no position", function()
    local code, out = H.run("LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' " .. H.lua ..
      " bin/takana cgroup ../etc")
    assert.equal(2, code)
    assert.equal("takana: cgroup: bad argument #1 to 'cgroup' (path component '..' refused: paths stay "
      .. "beneath the cgroup2 mount)\n", out)
  end)

  it("takana.cgroup blames its caller for a bad path", function()
    -- Not a tail call: the caller's frame stays to be blamed.
    local ok, err = pcall(function() local cg = takana.cgroup("a/../b") return cg end)
    assert.is_false(ok)
    assert.matches("89%-errors_spec%.lua:%d+: bad argument #1 to 'cgroup' %(path component '%.%.' refused", err)
  end)

  it("service{user = unknown} raises as service's own argument, at its caller", function()
    local path, name = H.test_cgroup_path()
    if not path then pending("needs root and a cgroup2 mount") return end
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -m 700 " .. dir))
    local sup = assert(takana.supervisor { cgroup = name .. "/sup", runtime = dir, signals = false })
    finally(function()
      sup:close()
      os.execute("rm -rf " .. H.shell_quote(dir))
      H.cgroup_cleanup(path)
    end)
    local ok, err = pcall(function() sup:service { name = "x", cmd = { "true" }, user = "no-such-user-takana" } end)
    assert.is_false(ok)
    assert.matches("89%-errors_spec%.lua:%d+: bad argument #1 to 'service' %(unknown user 'no%-such%-user%-takana'%)$",
      err)
  end)
end)

describe("no Lua code reads an error message", function()
  -- The names the Lua modules give a failure's message.
  local msg_names = { "err", "msg", "why", "reason", "cause", "message" }
  local reads = { find = true, match = true, gmatch = true, gsub = true, sub = true }

  local function holds_msg_name(var)
    var = var:lower()
    if var:find("errno", 1, true) then var = var:gsub("errno", "") end
    for _, name in ipairs(msg_names) do
      if var:find(name, 1, true) then return true end
    end
    return false
  end

  local function lua_files()
    local files = { "bin/takana" }
    local p = assert(io.popen("find lua -name '*.lua' | sort"))
    for f in p:lines() do files[#files + 1] = f end
    p:close()
    return files
  end

  it("no find, match, gmatch, gsub or sub on a message, nor a search for an errno's name", function()
    local found = {}
    for _, file in ipairs(lua_files()) do
      local n = 0
      for line in io.lines(file) do
        n = n + 1
        -- Whole-line comments only: "--" may be inside a string ("--cgroup").
        local code = line:match("^%s*%-%-") and "" or line
        local bad = code:find("tostring%([^)]*%):%a+%(") or code:find('find%("E[A-Z]+"')
        -- var:method( and string.method(var: err, serr, herr, why ... (a
        -- name holding one of msg_names) with a string method that reads
        for var, method in code:gmatch("([%w_]+)%)?:(%a+)%(") do
          bad = bad or (reads[method] and holds_msg_name(var))
        end
        for method, var in code:gmatch("string%.(%a+)%(%s*([%w_]+)") do
          bad = bad or (reads[method] and holds_msg_name(var))
        end
        if bad then found[#found + 1] = ("%s:%d: %s"):format(file, n, line) end
      end
    end
    assert.same({}, found)
  end)
end)
