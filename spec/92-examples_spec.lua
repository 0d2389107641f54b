-- The shipped policies in examples/ (issue 24): execsnoop, runaway and
-- exporter, each run as a child from this tree against processes this spec
-- starts, in a takana-test-* cgroup of its own where scope matters. Each
-- example is stopped by the spec (SIGINT/SIGTERM, then SIGKILL) and dies
-- with it (pdeathsig); so does every process started here.
local takana = require "takana"
local json = require "takana.json"
local H = require "helpers"

local ROOT = assert(io.popen("pwd")):read("l")

-- Starts examples/NAME.lua with args; stdout and stderr piped.
local function start(name, args)
  local argv = table.move(H.lua_argv, 1, #H.lua_argv, 1, {})
  argv[#argv + 1] = "examples/" .. name .. ".lua"
  table.move(args, 1, #args, #argv + 1, argv)
  argv.stdout, argv.stderr, argv.pdeathsig = "pipe", "pipe", "KILL"
  argv.env = { add = { LUA_PATH = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;", LUA_CPATH = ROOT .. "/?.so;;" } }
  return assert(takana.spawn(argv))
end

-- Runs an example to its end: exit record, stdout, stderr.
local function run(name, args)
  local c = start(name, args)
  local out, err = assert(c.stdout:read_all(30)), assert(c.stderr:read_all(30))
  local rec = assert(c:wait(30))
  c:close()
  return rec, out, err
end

-- Stops an example with sig (then SIGKILL after 10 s): exit record, the rest of stdout and stderr.
local function stop(c, sig)
  c:signal(sig)
  local out, err = c.stdout:read_all(10), c.stderr:read_all(10)
  if c:alive() then c:signal("KILL") end
  local rec = assert(c:wait(10))
  c:close()
  return rec, out or "", err or ""
end

-- The JSON lines of text, decoded.
local function records(text)
  local t = {}
  for line in text:gmatch("[^\n]+") do t[#t + 1] = json.decode(line) end
  return t
end

local function spawn_in(cgroup, argv)
  argv.cgroup, argv.pdeathsig, argv.stdout = cgroup, "KILL", "null"
  return assert(takana.spawn(argv))
end

local function reap(procs)
  for _, p in ipairs(procs) do
    if p:alive() then p:signal("KILL") end
    p:wait(5)
    p:close()
  end
end

describe("examples: --help and usage errors", function()
  for _, name in ipairs { "execsnoop", "runaway", "exporter" } do
    it(name .. " prints its USAGE on --help (exit 0), and its usage line on a bad option (exit 2)", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local rec, out = run(name, { "--help" })
      assert.equal(0, rec.code)
      assert.equal(assert(H.read("examples/" .. name .. ".lua"):match("\nlocal USAGE = %[%[\n(.-)%]%]\n")), out)
      assert.matches("^usage: " .. name .. "%.lua ", out)
      local bad, _, err = run(name, { "--no-such-option" })
      assert.equal(2, bad.code)
      assert.equal(name .. ": bad option --no-such-option\n" .. out:match("^[^\n]*\n"), err)
    end)
  end
end)

for _, backend in ipairs { "bpf", "connector" } do
  describe("examples/execsnoop.lua, " .. backend .. " backend" .. (backend == "bpf" and " #root #bpf" or ""), function()
    it("prints every exec of a burst, with pid, ppid, uid, cgroup and odd argv", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local probe, why = H.open_events(backend, { "exec" })
      if not probe then return pending(why) end
      probe:close()
      local snoop = start("execsnoop", { "--json", "--backend", backend })
      assert.equal("execsnoop: " .. backend .. " backend", assert(snoop.stderr:read_line(10)))
      local want, mine = {}, takana.cgroup.of(H.pid)
      for i = 1, 40 do
        local argv = { "/bin/echo", "two words", "", "tab\there", "\u{e9}t\u{e9}", "-n", "#" .. i }
        local t = table.move(argv, 1, #argv, 1, { stdout = "null" })
        local c = assert(takana.spawn(t))
        want[c.pid] = argv
        c:wait()
        c:close()
      end
      -- one that execs again at once: its first argv may be read too late
      local twice = assert(takana.spawn { "/bin/sh", "-c", "exec /bin/true again" })
      twice:wait()
      twice:close()
      H.sleep(0.5)
      local rec, out, err = stop(snoop, "INT")
      assert.equal(0, rec.code)
      local seen, again = 0, 0
      for _, e in ipairs(records(out)) do
        local argv = want[e.pid]
        if argv then
          seen = seen + 1
          assert.equal(H.pid, e.ppid)
          if e.who_lost then   -- the connector found the process gone: no uid, never a wrong one
            assert.equal("connector", backend)
            assert.is_nil(e.uid)
          else
            assert.equal(H.uid(), e.uid)
          end
          if e.argv_lost then   -- the connector, reading /proc after the process exited
            assert.equal("connector", backend)
            assert.is_nil(e.argv)
          else
            assert.same(argv, e.argv)
            if backend == "bpf" or e.cgroup then assert.equal(mine and mine.path, e.cgroup) end
            assert.equal(backend == "bpf" and "exec" or "proc-later", e.argv_from)
          end
        elseif e.pid == twice.pid and e.argv then
          again = again + 1
          assert.truthy(e.argv_lost or e.argv[1] == "/bin/sh" or e.argv[2] == "again", json.encode(e))
        end
      end
      if mine then mine:close() end
      assert.equal(40, seen)
      if backend == "bpf" then assert.equal(2, again) end
      assert.matches("execsnoop: %d+ execs, 0 events lost, 0 overruns %(%d+ received%)\n$", err)
    end)

    it("quotes odd arguments in its plain lines", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local probe, why = H.open_events(backend, { "exec" })
      if not probe then return pending(why) end
      probe:close()
      local snoop = start("execsnoop", { "--backend", backend })
      assert.truthy(snoop.stderr:read_line(10))
      assert.equal("TIME     PID     PPID    UID   CGROUP  ARGV", snoop.stdout:read_line(10))
      local c = assert(takana.spawn { "/bin/sh", "-c", "read x", "two words", "", "q\"", stdin = "pipe" })
      local line
      repeat line = assert(snoop.stdout:read_line(10)) until line:find(" " .. c.pid .. " ", 1, true)
      c.stdin:close()
      c:wait()
      c:close()
      stop(snoop, "TERM")
      assert.matches("^%d%d:%d%d:%d%d " .. c.pid .. " +" .. H.pid .. " +" .. H.uid() .. " ", line)
      assert.truthy(line:find(' /bin/sh -c "read x" "two words" "" "q\\""', 1, true)
        or line:find(" [argv lost]", 1, true), line)
    end)
  end)
end

-- A takana-test-* cgroup, or nil and why.
local function sandbox()
  if not H.is_root() then return nil, "needs root to create a cgroup" end
  if H.no_spawn then return nil, H.no_spawn end
  local path, name = H.test_cgroup_path()
  if not path then return nil, "no cgroup2 hierarchy is mounted" end
  return { path = path, name = "/" .. name }
end

describe("examples/runaway.lua #root", function()
  local box, procs
  after_each(function()
    reap(procs or {})
    if box then H.cgroup_cleanup(box.path) end
    box, procs = nil, nil
  end)

  it("TERMs a burner past its grace, KILLs it when it ignores TERM, spares its idle sibling", function()
    local why
    box, why = sandbox()
    if not box then return pending(why) end
    local stubborn = spawn_in(box.name, { "/bin/sh", "-c", "trap '' TERM; while :; do :; done" })
    local plain = spawn_in(box.name, { "/bin/sh", "-c", "while :; do :; done" })
    local idle = spawn_in(box.name, { "sleep", "60" })
    procs = { stubborn, plain, idle }
    local killer = start("runaway", { "--cgroup", box.name, "--share", "0.2", "--grace", "1", "--timeout", "1",
      "--interval", "0.5", "--json" })
    local st, pt = stubborn:wait(20), plain:wait(20)
    -- The KILL lands before its line is written: read to that line before stopping the killer.
    local lines, line = {}
    repeat
      line = killer.stdout:read_line(10)
      lines[#lines + 1] = line
    until not line or line:find('"action":"kill"', 1, true)
    local rec, out, err = stop(killer, "TERM")
    assert.equal(15, rec.signal, err)
    assert.equal(9, st and st.signal)
    assert.equal(15, pt and pt.signal)
    assert.is_true(idle:alive())
    local did = {}
    for _, r in ipairs(records(table.concat(lines, "\n") .. "\n" .. out)) do
      assert.is_not_equal(idle.pid, r.pid)
      did[r.pid] = (did[r.pid] and did[r.pid] .. " " or "") .. r.action
      assert.equal("sh", r.comm)
      if r.action == "term" then assert.matches("^%d+ %% of a CPU for [%d.]+ s %(limit 20 %% for 1 s%)$", r.reason) end
    end
    assert.equal("term kill", did[stubborn.pid])
    assert.equal("term gone", did[plain.pid])
  end)

  it("only logs in --dry-run", function()
    local why
    box, why = sandbox()
    if not box then return pending(why) end
    local burner = spawn_in(box.name, { "/bin/sh", "-c", "while :; do :; done" })
    procs = { burner }
    local killer = start("runaway", { "--cgroup", box.name, "--share", "0.2", "--grace", "0.5", "--timeout", "0.5",
      "--interval", "0.5", "--dry-run" })
    local line = assert(killer.stdout:read_line(15))
    local line2 = assert(killer.stdout:read_line(15))
    stop(killer, "TERM")
    assert.is_true(burner:alive())
    assert.matches("^%d%d:%d%d:%d%d would term " .. burner.pid .. " sh: ", line)
    assert.matches("^%d%d:%d%d:%d%d would kill " .. burner.pid .. " sh: still running 0.5 s after the TERM$", line2)
  end)

  it("refuses to run without a scope", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local rec, _, err = run("runaway", { "--share", "0.5" })
    assert.equal(2, rec.code)
    assert.matches("^runaway: %-%-cgroup or %-%-uid is needed", err)
    rec, _, err = run("runaway", { "--uid", "0.5" })   -- not read as no uid at all
    assert.equal(2, rec.code)
    assert.equal("runaway: --uid needs a whole number >= 0, not 0.5\nusage: runaway.lua (--cgroup PATH | --uid N) [options]\n", err)
  end)
end)

-- n processes named comm (a link to sleep), and m whose command line carries tag.
local function herd(dir, cgroup, comm, n, tag, m)
  assert(os.execute("ln -s /bin/sleep " .. dir .. "/" .. comm))
  local t = {}
  for _ = 1, n do t[#t + 1] = spawn_in(cgroup, { dir .. "/" .. comm, "60" }) end
  for _ = 1, m do t[#t + 1] = spawn_in(cgroup, { "sleep", "60", tag }) end
  return t
end

-- The value of the series named exactly `series` in an exposition text.
local function value(text, series)
  local at = text:find("\n" .. series .. " ", 1, true)
  return at and tonumber(text:match("^%S+", at + #series + 2))
end

describe("examples/exporter.lua", function()
  local box, procs, dir
  before_each(function() dir = (assert(io.popen("mktemp -d /tmp/takana-spec92.XXXXXX")):read("l")) end)
  after_each(function()
    reap(procs or {})
    if box then H.cgroup_cleanup(box.path) end
    os.execute("rm -rf " .. H.shell_quote(dir))
    box, procs = nil, nil
  end)

  local function setup()
    local why
    box, why = sandbox()
    if not box then return nil, why end
    local r = math.random(1e6)
    local comm, tag = "tkx" .. r, "0.0" .. r
    procs = herd(dir, box.name, comm, 4, tag, 3)
    return comm, tag
  end

  it("groups by comm and by --match, and promtool accepts its text", function()
    local comm, tag = setup()
    if not comm then return pending(tag) end
    local rec, out, err = run("exporter", { "--once", "--match", "tagged=^sleep 60 " .. tag:gsub("%p", "%%%0") .. "$" })
    assert.equal(0, rec.code, err)
    local P = "namedprocess_namegroup_"
    assert.equal(4, value(out, P .. 'num_procs{groupname="' .. comm .. '"}'))
    assert.equal(3, value(out, P .. 'num_procs{groupname="tagged"}'))
    assert.equal(4, value(out, P .. 'num_threads{groupname="' .. comm .. '"}'))
    assert.truthy(value(out, P .. 'memory_bytes{groupname="tagged",memtype="resident"}') > 0)
    local promtool = os.execute("command -v promtool >/dev/null")
    if not promtool then return pending("no promtool (Debian package prometheus)") end
    local f = assert(io.open(dir .. "/m.txt", "w"))
    f:write(out)
    f:close()
    assert.is_true(os.execute("promtool check metrics < " .. dir .. "/m.txt"))
  end)

  it("groups by cgroup and writes cgroup series to a textfile", function()
    local comm, tag = setup()
    if not comm then return pending(tag) end
    local c = start("exporter", { "--group-by", "cgroup", "--cgroup", box.name, "--textfile", dir, "--interval", "1" })
    local text
    for _ = 1, 50 do
      text = H.read(dir .. "/takana-exporter.prom")
      if text then break end
      H.sleep(0.1)
    end
    stop(c, "TERM")
    assert.is_not_nil(text, "no textfile written")
    assert.equal(7, value(text, 'namedprocess_namegroup_num_procs{groupname="' .. box.name .. '"}'))
    assert.truthy(text:find('takana_cgroup_[%w_]+{[^}]*cgroup="' .. box.name:gsub("%p", "%%%0") .. '"'))
  end)

  it("fails at start, saying why, for a cgroup that is not there", function()
    if H.no_spawn then return pending(H.no_spawn) end
    if not H.cgroup2_mount() then return pending("no cgroup2 hierarchy is mounted") end
    local rec, out, err = run("exporter", { "--once", "--cgroup", "/takana-test-absent-" .. math.random(1e9) })
    assert.equal(1, rec.code)
    assert.equal("", out)
    assert.matches("^exporter: cgroup /takana%-test%-absent%-%d+: No such file or directory\n$", err)
  end)

  it("is scraped by a real Prometheus server, whose series match this spec's processes", function()
    if not os.execute("command -v prometheus >/dev/null") then
      return pending("no prometheus binary (Debian package prometheus)")
    end
    local comm, tag = setup()
    if not comm then return pending(tag) end
    local exporter = start("exporter", { "--listen", "127.0.0.1:0" })
    local port = assert(exporter.stderr:read_line(10)):match("^exporter: serving http://127%.0%.0%.1:(%d+)/metrics$")
    assert.is_not_nil(port)
    local f = assert(io.open(dir .. "/prometheus.yml", "w"))
    f:write(("scrape_configs:\n  - job_name: takana\n    scrape_interval: 1s\n" ..
      "    static_configs:\n      - targets: ['127.0.0.1:%s']\n"):format(port))
    f:close()
    local web = 20000 + math.random(20000)
    local prom = assert(takana.spawn { "prometheus", "--config.file=" .. dir .. "/prometheus.yml",
      "--storage.tsdb.path=" .. dir .. "/data", "--web.listen-address=127.0.0.1:" .. web,
      stdout = "null", stderr = "null", pdeathsig = "KILL" })
    local query = ("curl --noproxy '*' -sf 'http://127.0.0.1:%d/api/v1/query?query=%s'"):format(web,
      "namedprocess_namegroup_num_procs%7Bgroupname%3D%22" .. comm .. "%22%7D")
    local got
    for _ = 1, 60 do
      local out = assert(io.popen(query)):read("a")
      local ok, res = pcall(json.decode, out)
      local r = ok and type(res) == "table" and res.data and res.data.result[1]
      got = r and tonumber(r.value[2])
      if got then break end
      H.sleep(0.25)
    end
    prom:signal("TERM")
    prom:wait(10)
    prom:close()
    stop(exporter, "TERM")
    assert.equal(4, got)
  end)
end)
