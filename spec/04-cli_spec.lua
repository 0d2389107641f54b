local H = require "helpers"
local takana = require "takana"

local function takana_cmd(args)
  return H.run("LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' " .. H.lua .. " bin/takana " .. args)
end

describe("takana.probe", function()
  it("reports every capability with ok and a reason for each no", function()
    local p = takana.probe()
    assert.equal(H.read("/proc/sys/kernel/osrelease"):match("[^\n]+"), p.kernel)
    assert.is_true(p.snapshot.proc.ok)
    for _, b in ipairs { "kfunc", "iter", "proc" } do
      local cap = p.snapshot[b]
      assert.is_boolean(cap.ok)
      if not cap.ok then assert.is_string(cap.why) end
    end
    assert.truthy(p.snapshot.backend)
    assert.is_true(p.pidfd.ok)
    assert.is_boolean(p.clone3.ok)
    assert.equal(H.cgroup2_mount(), p.cgroup.v2_mount)
  end)
end)

describe("bin/takana", function()
  it("ps lists processes, with names escaped, as columns, a tree or JSON", function()
    local fx = H.fixture { "--name", "odd\nname" }
    local code, out = takana_cmd("ps -o pid,comm")
    local _, tree = takana_cmd("ps --tree")
    local _, js = takana_cmd("ps --json")
    fx:kill()
    assert.equal(0, code)
    assert.matches("^%s+PID COMM\n", out)
    assert.truthy(out:find(("%7d odd\\x0aname\n"):format(fx.pid), 1, true), out)
    assert.truthy(tree:find("odd\\x0aname", 1, true))
    assert.truthy(js:find(('"comm":"odd\\nname"'), 1, true))
  end)
  it("hides kernel threads unless -k", function()
    local _, out = takana_cmd("ps -o pid,comm")
    local _, all = takana_cmd("ps -k -o pid,comm")
    assert.falsy(out:find(" kthreadd\n", 1, true))
    if H.read("/proc/2/stat") then assert.truthy(all:find(" kthreadd\n", 1, true)) end
  end)
  it("probe prints a table and JSON", function()
    local code, out = takana_cmd("probe")
    assert.equal(0, code)
    assert.matches("snapshot.proc%s+yes", out)
    local _, js = takana_cmd("probe --json")
    assert.matches('^{.*"snapshot":{', js)
  end)
  it("exits 2 with one line on bad usage, 0 on --help", function()
    for _, args in ipairs { "ps --bogus", "ps -o nosuchfield", "ps --backend nope", "nosuchcmd", "probe --json=1",
        "watch --bogus", "watch forks", "watch --count 0", "watch --backend dtrace",
        "cgroup", "cgroup a b", "cgroup ../etc", "cgroup --watch -1 /",
        "export --top x", "export --cgroup", "export --cgroup ../x", "export extra", "export --backend nope",
        "top --interval 0", "top --iterations 0", "top --backend nope", "bench nosuchphase",
        "export --textfile ''", "ctl /tmp/" .. ("x"):rep(120) .. " status",
        "ctl --wait up /tmp/" .. ("x"):rep(120) .. " a", "ctl /tmp/s reload a", "ctl /tmp/s frob" } do
      local code, out = takana_cmd(args)
      assert.equal(2, code, args)
      assert.matches("^takana: [^\n]+\n$", out)
    end
    for _, cmd in ipairs { "ps", "probe", "top", "watch", "cgroup", "export", "bench" } do
      local code, out = takana_cmd(cmd .. " --help")
      assert.equal(0, code, cmd)
      assert.matches("^usage: takana " .. cmd, out)
    end
    assert.equal(0, (takana_cmd("--help")))
  end)

  it("watch prints the events of a process it did not start, one line each", function()
    local out_file, err_file = os.tmpname(), os.tmpname()
    local watcher = assert(takana.spawn { "sh", "-c",
      "LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' exec " .. H.lua .. " bin/takana watch " ..
      "--duration 30 --json exit", stdout = assert(io.open(out_file, "w")), stderr = assert(io.open(err_file, "w")) })
    -- the stream is open once watch names its backend (a BPF load under
    -- ASan on a busy host can take seconds)
    local ready = H.poll_until({}, function() return (H.read(err_file) or ""):find("backend") end, 300)
    os.remove(err_file)
    assert(ready, "watch did not start")
    local fx = H.fixture { "--name", "watched one" }
    fx:kill()
    local pid_field = ('"pid":%d[,}]'):format(fx.pid)
    H.poll_until({}, function() return (H.read(out_file) or ""):find(pid_field) end, 300)
    watcher:signal("TERM")
    watcher:wait(5)
    local text = H.read(out_file)
    os.remove(out_file)
    local line
    for l in text:gmatch("[^\n]+") do
      if l:find(('"pid":%d[,}]'):format(fx.pid)) then line = l end
    end
    assert(line, "no event for pid " .. fx.pid .. ":\n" .. text)
    assert.matches('"type":"exit"', line)
    -- killed by SIGKILL, unless only polling observed it go; the name where
    -- the backend has one (the proc connector's exit carries none). Polling
    -- reports the name of its last scan, which may have caught the fixture
    -- before its exec or its rename.
    local observed = line:find('"observed":true', 1, true)
    assert.truthy(line:find('"signal":9', 1, true) or observed, line)
    local comm = line:match('"comm":"([^"]*)"')
    assert.truthy(comm == nil or comm == "watched one" or
      observed and (comm == "sh" or comm == "fixture"), line)
  end)

  it("watch --count stops after N events and prints columns", function()
    local argv = { table.unpack(H.lua_argv) }
    for _, a in ipairs { "bin/takana", "watch", "--count", "1", "fork" } do argv[#argv + 1] = a end
    argv.stdout, argv.stderr = "pipe", "pipe"
    argv.env = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;", PATH = os.getenv("PATH") }
    local watcher = assert(takana.spawn(argv))
    finally(function() watcher:signal("KILL") watcher:wait() end)
    assert.matches("^takana watch: %S+ backend", watcher.stderr:read("l"))
    -- alive until watch has seen it: polling sees only a process that
    -- outlives a scan, and under TCG a scan can take longer than a fixture's
    -- start
    local fx = H.fixture()
    local status = watcher:wait(60)
    fx:kill()
    assert.same({ exited = true, code = 0 }, status)
    local out = watcher.stdout:read("a")
    assert.matches("TIME_S%s+EVENT%s+PID%s+PPID%s+COMM", out)
    assert.matches("\n[%d.]+%s+fork%s+%d+", out)
  end)

  it("cgroup shows each section or why it is absent", function()
    local code, out = takana_cmd("cgroup /")
    assert.equal(0, code, out)
    assert.matches("^cgroup /\n", out)
    assert.matches("  cpu%.usage_ns%s+%d+\n", out)
    -- the root has no memory.* files, whatever the host
    assert.matches("  memory%s+absent: [^\n]+\n", out)
    local _, js = takana_cmd("cgroup --json self")
    assert.matches('^{"absent":{', js)
  end)

  it("cgroup shows every section of the stat layout, present or with its reason", function()
    local core = require "takana.core"
    local code, out = takana_cmd("cgroup /")
    assert.equal(0, code, out)
    local cg = assert(takana.cgroup(""))
    for _, row in ipairs(core.cgroup_stat) do
      assert.matches("\n  " .. row.section:gsub("%p", "%%%0") .. "[ .]", out)
      -- why() knows every section: nil or a reason, never an error
      local why = cg:why(row.section)
      assert(why == nil or type(why) == "string", row.section)
    end
    cg:close()
  end)

  it("ps has a column for every record field, and its format table names only fields", function()
    local core = require "takana.core"
    local cli = require "takana.cli"
    local field = {}
    for _, f in ipairs(core.record_fields) do field[f] = true end
    for name in pairs(cli.ps_format) do assert(field[name], "ps_format." .. name .. " is not a record field") end
    for name, d in pairs(cli.ps_derived) do
      assert(not field[name], name)
      for _, f in ipairs(d.reads) do assert(field[f], "ps_derived." .. name .. " reads no field " .. f) end
    end
    local seen = {}
    for _, col in ipairs(cli.ps_order) do
      assert.is_nil(seen[col], "two columns named " .. col)
      seen[col] = true
    end
    assert.equal(#core.record_fields + #(function() local n = {} for k in pairs(cli.ps_derived) do n[#n + 1] = k end return n end)(),
      #cli.ps_order)
    -- Every column is in the help and shows.
    local _, help = takana_cmd("ps --help")
    local listed = help:match("comma%-separated, of:\n(.-)\n%s*%(")
    assert.same(cli.ps_order, (function() local t = {} for w in listed:gmatch("[%w_]+") do t[#t + 1] = w end return t end)())
    local code, out = takana_cmd("ps -o " .. table.concat(cli.ps_order, ","))
    assert.equal(0, code, out)
    local head = out:match("^[^\n]+")
    for _, col in ipairs(cli.ps_order) do assert.truthy(head:find(cli.ps_columns[col].head, 1, true), col) end
  end)
end)

describe("takana cgroup", function()
  it("shows a cgroup name with control bytes escaped, found by path or id #root", function()
    local path, name = H.test_cgroup_path()
    if not path then return pending("needs root and a cgroup2 hierarchy") end
    finally(function() H.cgroup_cleanup(path) end)
    local evil = "x\27]0;pwned\7y"       -- an OSC title sequence, as a delegated user could name a cgroup
    assert(require("lfs").mkdir(path .. "/" .. evil))
    local id = math.tointeger(require("lfs").attributes(path .. "/" .. evil, "ino"))
    for _, arg in ipairs { tostring(id), H.shell_quote(name .. "/" .. evil) } do
      local code, out = takana_cmd("cgroup " .. arg)
      assert.equal(0, code, out)
      assert.is_nil(out:find("\27", 1, true))
      assert.truthy(out:find("cgroup /" .. name .. "/x\\x1b]0;pwned\\x07y\n", 1, true), out)
    end
  end)
end)

describe("takana export", function()
  -- takana export in a private mount namespace whose /proc/loadavg says the
  -- host has `tasks` tasks (the count the cheapest backend decides by):
  -- the host's own count moves with whatever else runs, around 5,000 too
  -- when other suites start herds. Returns the backend export used, or
  -- nil and why when no mount namespace can be had here.
  local function export_backend(tasks, args)
    local fake = os.tmpname()
    local f = assert(io.open(fake, "w"))
    f:write(("0.00 0.00 0.00 1/%d 1\n"):format(tasks))
    f:close()
    local unshare = H.is_root() and "unshare -m" or "unshare -r -m"
    local code, out = H.run(unshare .. " sh -c " .. H.shell_quote("mount --bind " .. fake .. " /proc/loadavg && "
      .. "LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' " .. H.lua
      .. " bin/takana export --top 0 " .. args))
    os.remove(fake)
    if code ~= 0 and (out:find("^unshare: ") or out:find("^mount: ")) then return nil, out end
    assert.equal(0, code, out)
    return assert(out:match('takana_snapshot_duration_seconds{backend="(%a+)"}'), out)
  end

  it("takes its one snapshot from /proc below 5,000 tasks, unless --backend says", function()
    local used, why = export_backend(4999, "")
    if not used then return pending("no private mount namespace here: " .. why) end
    -- the library's own choice, for comparison with --backend auto
    local auto = assert(takana.snapshot()).backend
    assert.equal("proc", used)
    assert.equal(auto, export_backend(5000, ""))
    assert.equal(auto, export_backend(4999, "--backend auto"))
    assert.equal("proc", export_backend(5000, "--backend proc"))
    assert.equal("proc", require("takana.cli").oneshot_backend("ps", "proc"))
  end)

  it("writes Prometheus text that parses, and a textfile node_exporter reads", function()
    local code, out = takana_cmd("export --cgroup / --top 3")
    assert.equal(0, code, out)
    assert.matches('# TYPE takana_processes gauge\ntakana_processes{state="%a"} %d+\n', out)
    assert.matches('takana_top_cpu_seconds_total{comm="[^"]*",pid="%d+"} [%d.e+-]+\n', out)
    assert.matches('takana_cgroup_cpu_usage_seconds_total{cgroup="/"} [%d.e+-]+\n', out)
    -- every sample line: name{labels} value
    for line in out:gmatch("[^\n]+") do
      if not line:match("^#") then
        assert.matches('^[%a_:][%w_:]*{?.-}? [-+%w.]+$', line)
      end
    end

    local exporter = "/usr/bin/prometheus-node-exporter"
    if not io.open(exporter) then return pending("prometheus-node-exporter is not installed") end
    local dir = select(2, H.run("mktemp -d")):match("%S+")
    local ne
    -- one finally per test (busted keeps the last one given)
    finally(function()
      if ne then
        ne:signal("KILL")
        ne:wait(5)
      end
      os.execute("rm -rf " .. H.shell_quote(dir))
    end)
    local fx = H.fixture { "--name", 'we"ird\\name' }
    code, out = takana_cmd("export --top 100 --textfile " .. dir)
    fx:kill()
    assert.equal(0, code, out)
    assert.equal("", out)
    local ls = select(2, H.run("ls -A " .. dir))
    assert.equal("takana.prom\n", ls)
    local port = 20000 + math.random(20000)
    ne = assert(takana.spawn { exporter, "--web.listen-address=127.0.0.1:" .. port,
      "--collector.disable-defaults", "--collector.textfile",
      "--collector.textfile.directory=" .. dir, stdout = "null", stderr = "null" })
    local metrics
    for _ = 1, 50 do
      local c, m = H.run("curl -sf http://127.0.0.1:" .. port .. "/metrics")
      if c == 0 then metrics = m break end
      H.sleep(0.1)
    end
    assert(metrics, "node_exporter did not answer")
    assert.matches("\nnode_textfile_scrape_error 0\n", metrics)
    assert.matches('\ntakana_processes{state="S"} %d+\n', metrics)
    assert.truthy(metrics:find('comm="we\\"ird\\\\name"', 1, true), "escaped label missing")
  end)
end)

describe("takana top", function()
  it("prints plain frames sorted by CPU share when not on a terminal", function()
    local fx = H.fixture { "--spin" }
    local idle = H.fixture {}
    local code, out = takana_cmd("top --interval 0.3 --iterations 2")
    fx:kill()
    idle:kill()
    assert.equal(0, code, out)
    assert.falsy(out:find("\27", 1, true), "escape codes in a pipe")
    local second = out:match("\n\n(takana top.*)$")
    assert.truthy(second, out)
    assert.matches("^takana top %- %d+ processes, backend %a+, snapshot %d+ us", second)
    -- rows sorted by CPU share; the spinning fixture shows CPU used (how
    -- much depends on what else runs), the blocked one none
    local shares, share_of = {}, {}
    for row in second:gmatch("\n([^\n]+)") do
      local pid, share = row:match("^%s*(%d+)%s+%d+ %S%s+%d+%s+([%d.]+) ")
      if pid then
        shares[#shares + 1] = tonumber(share)
        share_of[tonumber(pid)] = tonumber(share)
      end
    end
    for i = 2, #shares do assert.truthy(shares[i] <= shares[i - 1], second) end
    assert.truthy(share_of[fx.pid] and share_of[fx.pid] >= 1, second)
    assert.equal(0, share_of[idle.pid], second)
  end)

  -- tmux runs a window's command with $SHELL, or else the user's login
  -- shell: for uid 65534 that is nologin, and the session dies at once. So
  -- the shell is named, and a private socket per session keeps the server
  -- ours (a server being killed by the previous spec can refuse a new one).
  local servers = 0
  local function tmux_top(width, height)
    if os.execute("command -v tmux >/dev/null") ~= true then return nil end
    servers = servers + 1
    local tmux = ("SHELL=/bin/sh tmux -L takana-spec-%d-%d "):format(H.pid, servers)
    local env = "LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;'"
    local code, out = H.run(("%snew-session -d -s top -x %d -y %d \"%s %s bin/takana top --interval 0.2; " ..
      "echo TOP-EXITED $?; stty -a | grep -o ' echo ' ; echo STTY-DONE; sleep 30\""):format(
      tmux, width, height, env, H.lua))
    assert(code == 0, "tmux new-session: " .. out)
    finally(function() os.execute(tmux .. "kill-server 2>/dev/null") end)
    local term = {}
    function term.screen()
      local _, s = H.run(tmux .. "capture-pane -p -t top 2>&1")
      return s
    end
    function term.wait_for(pattern)
      for _ = 1, 100 do
        local s = term.screen()
        if s:find(pattern) then return s end
        H.sleep(0.1)
      end
      error("screen never showed " .. pattern .. ":\n" .. term.screen())
    end
    function term.keys(keys) assert(os.execute(tmux .. "send-keys -t top " .. keys)) end
    return term
  end

  it("runs full-screen under tmux, sorts on keys, and gives the terminal back", function()
    local term = tmux_top(120, 30)
    if not term then return pending("tmux is not installed") end
    term.wait_for("takana top %- %d+ processes, backend")
    term.wait_for("sort cpu")
    term.keys("m")
    term.wait_for("sort memory")
    term.keys("p")
    local s = term.wait_for("sort pid")
    -- the header is the screen's first line: no line wrapped and scrolled it
    assert.matches("^takana top %- ", s)
    -- sorted by pid: the first row is the lowest pid shown
    local pids = {}
    for pid in s:gmatch("\n%s*(%d+)%s+%d+ %a ") do pids[#pids + 1] = tonumber(pid) end
    assert.truthy(#pids > 3)
    for i = 2, #pids do assert.truthy(pids[i] > pids[i - 1]) end
    term.keys("q")
    s = term.wait_for("STTY%-DONE")
    assert.truthy(s:find("TOP-EXITED 0", 1, true), s)
    -- echo is back on: the terminal was restored (stty -a says " echo ",
    -- not "-echo"; tmux trims the trailing space)
    assert.truthy(s:find("\n echo\n", 1, true), s)
  end)

  it("restores the terminal on Ctrl-C", function()
    local term = tmux_top(100, 20)
    if not term then return pending("tmux is not installed") end
    term.wait_for("takana top %- %d+ processes, backend")
    term.keys("C-c")
    local s = term.wait_for("STTY%-DONE")
    assert.truthy(s:find("TOP-EXITED 0", 1, true), s)
    assert.truthy(s:find("\n echo\n", 1, true), s)
  end)
end)
