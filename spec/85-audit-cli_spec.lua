-- Regression specs for the CLI items of the adversarial audit (issue 12):
-- 3 (export --textfile and planted symlinks), 12 (a comm that is not
-- UTF-8 blanks node_exporter's textfile) and 14 (ps --tree and a parent
-- cycle).
local H = require "helpers"
local takana = require "takana"
local core = require "takana.core"
local cli = require "takana.cli"
local uv = require "luv"

local ENV = "LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;'"

local function takana_cmd(args)
  return H.run(ENV .. " " .. H.lua .. " bin/takana " .. args)
end

-- A directory removed when the test ends; busted keeps one finally per
-- test (the last one given), so `also` runs from the same one.
local function tmpdir(also)
  local dir = select(2, H.run("mktemp -d")):match("%S+")
  finally(function()
    if also then also() end
    os.execute("rm -rf " .. H.shell_quote(dir))
  end)
  return dir
end

local function ls(dir)
  local names = {}
  local req = assert(uv.fs_scandir(dir))
  while true do
    local name = uv.fs_scandir_next(req)
    if not name then break end
    names[#names + 1] = name
  end
  table.sort(names)
  return names
end

describe("audit 3: takana export --textfile DIR", function()
  it("never follows a symlink planted at any pid's temporary name #slow", function()
    local base = tmpdir()
    local dir = base .. "/textfile"
    assert(uv.fs_mkdir(dir, tonumber("755", 8)))
    -- sticky and world-writable like /tmp, owned by us: accepted
    assert(uv.fs_chmod(dir, tonumber("1777", 8)))
    local victim = base .. "/victim"
    local f = assert(io.open(victim, "w"))
    f:write("precious\n")
    f:close()
    -- A link for every pid the export can get: all of them when pid_max is
    -- small (it is 32768 here), else the 65,536 after the last one used.
    local pid_max = tonumber(H.read("/proc/sys/kernel/pid_max"))
    local first, count = 1, pid_max
    if pid_max > 65536 then
      first, count = tonumber(H.read("/proc/sys/kernel/ns_last_pid")) + 1, 65536
    end
    for i = 0, count - 1 do
      local pid = (first - 1 + i) % pid_max + 1
      assert(uv.fs_symlink(victim, dir .. "/.takana.prom." .. pid))
    end
    -- and one at the final name: replaced, not followed
    assert(uv.fs_symlink(victim, dir .. "/takana.prom"))
    local out_file = base .. "/out"
    local child = assert(takana.spawn { "sh", "-c", ENV .. " exec " .. H.lua .. " bin/takana export --top 3 " ..
      "--textfile " .. H.shell_quote(dir) .. " 2>&1", stdout = assert(io.open(out_file, "w")) })
    local st = child:wait(60)
    assert.same({ exited = true, code = 0 }, { exited = st.exited, code = st.code }, H.read(out_file))
    assert.equal("precious\n", H.read(victim))
    -- the export ran with a pid that had a link waiting for it
    assert.equal("link", uv.fs_lstat(dir .. "/.takana.prom." .. child.pid).type)
    local prom = assert(uv.fs_lstat(dir .. "/takana.prom"))
    assert.equal("file", prom.type)
    assert.matches("^# HELP takana_snapshot_duration_seconds ", H.read(dir .. "/takana.prom"))
    assert.matches('\ntakana_processes{state="%a"} %d+\n', H.read(dir .. "/takana.prom"))
    -- nothing else left behind: the planted links and the file
    local names = ls(dir)
    assert.equal(count + 1, #names)
    for _, name in ipairs(names) do
      assert.truthy(name == "takana.prom" or name:match("^%.takana%.prom%.%d+$"), name)
    end
  end)

  it("refuses a group- or other-writable DIR unless it is sticky with a trusted owner", function()
    local base = tmpdir()
    local function export_into(mode, owner)
      local dir = base .. "/d" .. mode .. (owner or "")
      assert(uv.fs_mkdir(dir, tonumber("700", 8)))
      if owner then assert(uv.fs_chown(dir, owner, owner)) end
      assert(uv.fs_chmod(dir, tonumber(mode, 8)))
      local code, out = takana_cmd("export --top 1 --textfile " .. H.shell_quote(dir))
      return code, out, ls(dir)
    end
    for _, mode in ipairs { "775", "757", "777", "0770" } do
      local code, out, names = export_into(mode)
      assert.equal(1, code, mode)
      assert.equal(("takana: export: textfile directory %s/d%s: %s/d%s is writable by group or others (mode %04d, " ..
        "owner uid %d), so another user could plant links or swap names in it: remove that permission " ..
        "(chmod go-w), or make it sticky (chmod +t) and owned by root or uid %d\n"):format(
          base, mode, base, mode, tonumber(mode), H.uid(), H.uid()), out)
      assert.same({}, names)
    end
    for _, mode in ipairs { "755", "700", "1777", "1770", "1775" } do
      local code, out, names = export_into(mode)
      assert.equal(0, code, out)
      assert.same({ "takana.prom" }, names, mode)
    end
    if H.is_root() then
      -- sticky, but its owner (not us, not root) could swap anything in it
      local code, out, names = export_into("1777", 65534)
      assert.equal(1, code, out)
      assert.matches("mode 1777, owner uid 65534%)", out)
      assert.same({}, names)
    end
  end)

  it("core.textfile_write takes a plain name and reports a missing directory", function()
    local dir = tmpdir()
    for _, name in ipairs { "", "a/b", ".", "..", "a\0b", ("x"):rep(250) } do
      assert.has_error(function() core.textfile_write(dir, name, "x") end)
    end
    assert.has_error(function() core.textfile_write(dir, "a", "x", "extra") end)
    assert.same({ nil, "textfile directory " .. dir .. "/none: No such file or directory", 2 },
      { core.textfile_write(dir .. "/none", "a", "x") })
    assert.is_true(core.textfile_write(dir, "a", "one\n"))
    assert.is_true(core.textfile_write(dir, "a", ""))
    assert.equal("", H.read(dir .. "/a"))
    assert.same({ "a" }, ls(dir))
    -- 0644 before the umask: node_exporter runs as another user
    assert.equal(tonumber("644", 8) & ~tonumber("022", 8), uv.fs_stat(dir .. "/a").mode & tonumber("7777", 8))
  end)
end)

describe("audit 12: a comm that is not UTF-8", function()
  -- bytes 0xff and 0xfe are never UTF-8; the quote, backslash and newline
  -- need the exposition format's escapes
  local hostile = 'a\255"b\\c\nd\254'
  local shown = 'a\u{FFFD}\\"b\\\\c\\nd\u{FFFD}'

  it("is replaced by U+FFFD in label values and JSON, the rest kept", function()
    local valid_utf8 = require("takana.prometheus").valid_utf8
    assert.equal("x\u{FFFD}y", valid_utf8("x\255y"))
    assert.equal("ok\u{FFFD}\u{FFFD}", valid_utf8("ok\226\130"))
    assert.equal("\u{FFFD}\u{FFFD}\u{FFFD}", valid_utf8("\237\160\128")) -- a surrogate
    assert.equal("\u{FFFD}\u{FFFD}", valid_utf8("\192\175")) -- overlong '/'
    assert.equal("ünï ✓ 𝄞", valid_utf8("ünï ✓ 𝄞"))
    local fx = H.fixture { "--name", hostile }
    local _, js = takana_cmd("ps --json")
    fx:kill()
    -- The object's keys are sorted, and which come before "comm" depends on
    -- the backend: above 5,000 tasks on the host (other suites' herds) ps
    -- takes a BPF tier, whose records start with "cgroup_id". Find the
    -- fixture's line by its pid instead of by what it starts with.
    local line
    for l in js:gmatch("[^\n]+") do
      if l:find(',"pid":' .. fx.pid .. ',', 1, true) then line = l end
    end
    assert(line, js)
    assert.truthy(utf8.len(line), line)
    -- JSON is pure ASCII (takana.json): U+FFFD travels as its escape
    assert.is_nil(line:find("[\128-\255]"), line)
    assert.truthy(line:find('"comm":"a\\ufffd\\"b\\\\c\\nd\\ufffd"', 1, true), line)
  end)

  it("leaves takana's textfile readable by the real node_exporter", function()
    local exporter = "/usr/bin/prometheus-node-exporter"
    if not io.open(exporter) then return pending("prometheus-node-exporter is not installed") end
    local ne
    local dir = tmpdir(function()
      if ne then
        ne:signal("KILL")
        ne:wait(5)
      end
    end)
    -- 64 MiB resident; --top is large so every process is listed whatever
    -- else runs on the host
    local fx = H.fixture { "--name", hostile, "--touch-mb", 64 }
    local code, out = takana_cmd("export --top 100000 --textfile " .. dir)
    fx:kill()
    assert.equal(0, code, out)
    local sample = ('takana_top_rss_bytes{comm="%s",pid="%d"} '):format(shown, fx.pid)
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
    assert.truthy(H.read(dir .. "/takana.prom"):find("\n" .. sample, 1, true), "hostile series not written")
    assert.truthy(metrics:find("\n" .. sample, 1, true), "hostile series not exposed")
    assert.matches('\ntakana_processes{state="S"} %d+\n', metrics)
  end)
end)

describe("audit 14: ps --tree", function()
  local function order(records)
    local r = {}
    for i, e in ipairs(cli.tree_order(records)) do r[i] = e[1] .. ":" .. e[2] end
    return table.concat(r, " ")
  end

  it("shows the members of a parent cycle as roots, each process once", function()
    -- 5 <-> 7 with 6 under 5; 10 -> 11 -> 12 -> 10; 8 its own parent;
    -- 13 under a pid not in the snapshot
    assert.equal("1:0 9:1 5:0 6:1 7:0 8:0 10:0 11:0 12:0 13:0", order {
      { pid = 1, ppid = 0 }, { pid = 5, ppid = 7 }, { pid = 6, ppid = 5 }, { pid = 7, ppid = 5 },
      { pid = 8, ppid = 8 }, { pid = 9, ppid = 1 }, { pid = 10, ppid = 11 }, { pid = 11, ppid = 12 },
      { pid = 12, ppid = 10 }, { pid = 13, ppid = 99 } })
    assert.equal("", order {})
    -- a cycle reached through a chain hanging below it
    assert.equal("3:0 2:1 1:2 4:0", order {
      { pid = 1, ppid = 2 }, { pid = 2, ppid = 3 }, { pid = 3, ppid = 4 }, { pid = 4, ppid = 3 } })
  end)

  it("orders a 100,000-deep chain without recursion #slow", function()
    local records = {}
    for pid = 1, 100000 do records[pid] = { pid = pid, ppid = pid - 1 } end
    local r = cli.tree_order(records)
    assert.equal(100000, #r)
    assert.same({ 100000, 99999 }, r[100000])
    -- and as one 100,000-long cycle: every member a root
    records[1].ppid = 100000
    r = cli.tree_order(records)
    assert.equal(100000, #r)
    for i, e in ipairs(r) do assert(e[1] == i and e[2] == 0, i) end
  end)

  it("indents a fixture's children under it and lists every pid once", function()
    local fx = H.fixture { "--herd", 3 }
    local code, out = takana_cmd("ps --tree -o pid,ppid,comm")
    fx:kill()
    assert.equal(0, code, out)
    local seen, depth_of = {}, {}
    for pid, indent in out:gmatch("\n%s*(%d+)%s+%d+ ( *)") do
      pid = tonumber(pid)
      assert.is_nil(seen[pid], "listed twice: " .. pid)
      seen[pid] = true
      depth_of[pid] = #indent // 2
    end
    assert.truthy(seen[fx.pid], out)
    for _, kid in ipairs(fx.extra) do
      assert.truthy(depth_of[kid] and depth_of[kid] > depth_of[fx.pid], out)
    end
  end)
end)
