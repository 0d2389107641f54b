-- Issue 25, "C owns the kernel": the Lua modules and the CLI read no kernel
-- file; the core reads and parses each once (mountinfo.c, host.c,
-- procinfo.c) and the binding hands the answers up. A guard over the
-- sources, then the core functions against what the files say (the spec
-- reads them itself, as the oracle).
local H = require "helpers"
local takana = require "takana"
local core = require "takana.core"

local E = takana.errno
local ENOENT, ESRCH = E.ENOENT, E.ESRCH

-- ---- the guard ---------------------------------------------------------------

-- The code of a Lua source, comments and string literals blanked ("" stays
-- where a string was), and its string literals: one pass of a small lexer.
local function lex(text)
  local code, strings, i, n = {}, {}, 1, #text
  while i <= n do
    local c = text:sub(i, i)
    local eq = text:match("^%[(=*)%[", i)
    if text:sub(i, i + 1) == "--" then
      local leq = text:match("^%-%-%[(=*)%[", i)
      local stop = leq and select(2, text:find("]" .. leq .. "]", i, true)) or (text:find("\n", i, true) or n + 1) - 1
      i = stop + 1
    elseif eq then
      local open = #eq + 2
      local s, e = text:find("]" .. eq .. "]", i + open, true)
      strings[#strings + 1] = text:sub(i + open, s - 1)
      code[#code + 1] = '""'
      i = e + 1
    elseif c == '"' or c == "'" then
      local j, buf = i + 1, {}
      while j <= n and text:sub(j, j) ~= c do
        if text:sub(j, j) == "\\" then j = j + 1 end
        buf[#buf + 1] = text:sub(j, j)
        j = j + 1
      end
      strings[#strings + 1] = table.concat(buf)
      code[#code + 1] = '""'
      i = j + 1
    else
      code[#code + 1] = c
      i = i + 1
    end
  end
  return table.concat(code), strings
end

local function sources()
  local files = { "bin/takana" }
  local ls = assert(io.popen("find lua -name '*.lua' | sort"))
  for f in ls:lines() do files[#files + 1] = f end
  ls:close()
  return files
end

-- What may open a file or run a program, each a reviewed site that touches
-- no kernel file: require's fallback probing package.path, the CLI's tty
-- handling (stty, test -t), its bench and supervise commands (the file,
-- read again on reload); the command's look for its own LuaRocks tree.
local allowed = {
  ["bin/takana"] = { ['io.open(tree_lua .. "")'] = 1 },
  ["lua/takana/init.lua"] = { ['io.open((template:gsub("", file)))'] = 1 },
  ["lua/takana/cli.lua"] = {
    ['io.popen("")'] = 2, ['os.execute("")'] = 4, ['os.execute("" .. saved .. "")'] = 1,
    ['io.open("")'] = 1, ['os.execute("" .. ph .. "")'] = 1, ["loadfile(path)"] = 2,
    -- takana example: the examples' directory, its listing and the one run
    ['io.open(d .. "")'] = 1, ['io.open(dir .. "" .. file)'] = 1, ["io.open(path)"] = 1,
  },
}

local opening = {
  ["io.open"] = true, ["io.lines"] = true, ["io.input"] = true, ["io.output"] = true, ["io.popen"] = true,
  ["os.execute"] = true, loadfile = true, dofile = true,
}

describe("the Lua side reads no kernel file", function()
  it("opens no file but the reviewed ones, and names /proc and /sys only in messages", function()
    local files = sources()
    assert.is_true(#files >= 6)
    for _, path in ipairs(files) do
      local code, strings = lex(assert(H.read(path)))
      local seen = {}
      -- Calls that open files or run programs, with their arguments.
      for call in code:gmatch("[%w_%.]+%b()") do
        local name = call:match("^[%w_%.]+")
        local fn = name:match("[%w_]+%.[%w_]+$") or name
        if opening[fn] then
          seen[call] = (seen[call] or 0) + 1
        end
      end
      assert.same(allowed[path] or {}, seen, path .. ": a new file or program opened; kernel files go "
        .. "through takana.core (csrc/core), anything else needs a reviewed entry here")
      -- No code word for a kernel file outside strings (a read_file of
      -- one would name it in a string; messages are free to).
      assert.is_nil(code:find("mountinfo", 1, true), path)
      for _, s in ipairs(strings) do
        -- A path ("/proc/%d/comm", "/proc/"), not a message about one.
        local kernel = s:match("^/proc[%w_%-%./%%]*$") or s:match("^/sys[%w_%-%./%%]*$")
        -- probe's label of the file behind its btf row
        if kernel and not (path == "lua/takana/cli.lua" and s == "/sys/kernel/btf/vmlinux") then
          error(("%s: a string that is a kernel path: %q"):format(path, s))
        end
      end
    end
  end)

  it("keeps no reader of files in takana.util", function()
    local util = require "takana.util"
    for _, name in ipairs { "read_file", "first_line", "mounts", "proc_cgroup" } do
      assert.is_nil(util[name], name)
    end
  end)

  it("has no C file calling require (no call up into Lua)", function()
    local ls = assert(io.popen("ls csrc/core/*.c csrc/lua/*.c"))
    for f in ls:lines() do
      local text = assert(H.read(f))
      assert.is_nil(text:find('"require"', 1, true), f)
      assert.is_nil(text:find("luaL_requiref", 1, true), f)
    end
    ls:close()
  end)
end)

-- ---- the core's answers ---------------------------------------------------------

-- mountinfo the independent way (the Lua parser the core replaced).
local function unescape(s)
  return (s:gsub("\\(%d%d%d)", function(o) return string.char(tonumber(o, 8)) end))
end
local function oracle_mounts()
  local r = { v1 = {} }
  local hidepid = false
  for line in assert(H.read("/proc/self/mountinfo")):gmatch("[^\n]+") do
    local root, mnt, fstype, opts = line:match("^%S+ %S+ %S+ (%S+) (%S+) .- %- (%S+) %S+ (%S+)")
    if root then
      root, mnt = unescape(root), unescape(mnt)
      if fstype == "cgroup2" then
        if not r.v2 or (r.v2_root ~= "/" and root == "/") then r.v2, r.v2_root = mnt, root end
      elseif fstype == "cgroup" then
        for opt in opts:gmatch("[^,]+") do
          if opt ~= "rw" and opt ~= "ro" and not opt:find("=") then r.v1[opt] = r.v1[opt] or mnt end
        end
      elseif mnt == "/proc" and fstype == "proc" then
        hidepid = opts:match("hidepid=([^,]+)") or false
      end
    end
  end
  return r, hidepid
end

describe("core.cgroup_mounts and core.proc_hidepid", function()
  it("say what mountinfo says", function()
    local want, hidepid = oracle_mounts()
    assert.same(want, core.cgroup_mounts())
    assert.same(want, takana.cgroup.mounts())
    assert.equal(hidepid, core.proc_hidepid())
    local p = takana.probe()
    assert.equal(hidepid or nil, p.proc.hidepid)
  end)

  it("refuse arguments", function()
    assert.has_error(function() core.cgroup_mounts(1) end)
    assert.has_error(function() core.proc_hidepid("x") end)
  end)
end)

describe("core.proc_cgroups", function()
  it("says what /proc/cgroups says", function()
    local want = {}
    for line in assert(H.read("/proc/cgroups")):gmatch("[^\n]+") do
      local name, hier, _, enabled = line:match("^(%S+)%s+(%d+)%s+(%d+)%s+(%d+)")
      if name then want[name] = { hierarchy = tonumber(hier), enabled = enabled == "1" } end
    end
    assert.is_not_nil(next(want))
    assert.same(want, core.proc_cgroups())
    assert.same(want, takana.cgroup.proc_cgroups())
    assert.has_error(function() core.proc_cgroups({}) end)
  end)
end)

describe("core.loadavg", function()
  it("says what /proc/loadavg says", function()
    -- The line changes as tasks come and go: compared when it read the
    -- same before and after.
    local text, got
    for _ = 1, 100 do
      text = H.read("/proc/loadavg")
      got = assert(core.loadavg())
      if H.read("/proc/loadavg") == text then break end
      got = nil
    end
    assert.is_not_nil(got, "/proc/loadavg never read the same twice in a row")
    local l1, l5, l15, running, tasks, last = text:match("^(%S+) (%S+) (%S+) (%d+)/(%d+) (%d+)")
    assert.same({ load1 = tonumber(l1), load5 = tonumber(l5), load15 = tonumber(l15),
                  running = tonumber(running), tasks = tonumber(tasks), last_pid = tonumber(last) }, got)
    assert.equal("integer", math.type(got.tasks))
    assert.has_error(function() core.loadavg(1) end)
  end)
end)

describe("core.kernel_release and the readable checks", function()
  it("say what the files say", function()
    assert.equal(assert(H.read("/proc/sys/kernel/osrelease")):match("^[^\n]*"), core.kernel_release())
    assert.equal(takana.probe().kernel, core.kernel_release())
    local function opens(path)
      local f = io.open(path)
      if f then f:close() end
      return f ~= nil
    end
    assert.equal(opens("/sys/kernel/btf/vmlinux"), core.btf_readable() == true)
    assert.equal(H.read("/proc/pressure/cpu") ~= nil, core.psi_readable() == true)
    assert.is_true(core.proc_readable())
    local ok, msg, errno = core.btf_readable()
    if not ok then
      assert.matches("^/sys/kernel/btf/vmlinux: ", msg)
      assert.equal("integer", math.type(errno))
    end
    for _, fn in ipairs { "kernel_release", "btf_readable", "psi_readable", "proc_readable" } do
      assert.has_error(function() core[fn](1) end, nil, fn)
    end
  end)
end)

describe("core.proc_cgroup", function()
  local function line0(text)
    return text:match("^0::([^\n]*)") or text:match("\n0::([^\n]*)") or false
  end

  it("gives the 0:: line of our own and of a fixture's cgroup file", function()
    assert.equal(line0(H.read("/proc/self/cgroup")), core.proc_cgroup("self"))
    assert.equal(line0(H.read("/proc/self/cgroup")), core.proc_cgroup(core.getpid()))
    assert.equal(line0(H.read("/proc/1/cgroup")), core.proc_cgroup(1))
    local fx = H.fixture {}
    local ok, err = pcall(function()
      assert.equal(line0(H.read("/proc/" .. fx.pid .. "/cgroup")), core.proc_cgroup(fx.pid))
    end)
    fx:kill()
    assert(ok, err)
  end)

  it("gives the test cgroup of a process moved there", function()
    local path, name = H.test_cgroup_path()
    if not path then return pending("needs root and a cgroup2 mount to make a test cgroup") end
    local fx = H.fixture {}
    local ok, err = pcall(function()
      local f = assert(io.open(path .. "/cgroup.procs", "w"))
      f:write(tostring(fx.pid))
      assert(f:close())
      local mine = line0(H.read("/proc/self/cgroup"))
      -- Our namespace's root is the mount's here (the usual host).
      if mine and takana.cgroup.mounts().v2_root == "/" then
        assert.equal("/" .. name, core.proc_cgroup(fx.pid))
      else
        assert.equal(line0(H.read("/proc/" .. fx.pid .. "/cgroup")), core.proc_cgroup(fx.pid))
      end
    end)
    fx:kill()
    H.cgroup_cleanup(path)
    assert(ok, err)
  end)

  it("answers nil, message, ENOENT for a pid that is gone", function()
    local fx = H.fixture {}
    local pid = fx.pid
    fx:kill()
    local r, msg, errno = core.proc_cgroup(pid)
    assert.is_nil(r)
    assert.equal(("/proc/%d/cgroup: No such file or directory"):format(pid), msg)
    assert.equal(ENOENT, errno)
    -- takana.cgroup.of words it for its caller
    local cg, err, e2 = takana.cgroup.of(pid)
    assert.is_nil(cg)
    assert.equal(("cgroup.of %d: no such process"):format(pid), err)
    assert.equal(ESRCH, e2)
  end)

  it("refuses what is no pid", function()
    for _, bad in ipairs { 0, -1, 1.5, 2 ^ 31 | 0, "x", "", {}, true } do
      assert.has_error(function() core.proc_cgroup(bad) end, nil, tostring(bad))
    end
    assert.has_error(function() core.proc_cgroup() end)
    assert.has_error(function() core.proc_cgroup(1, 2) end)
  end)
end)

describe("core.task_children", function()
  it("lists our children while they live, and not once they are reaped", function()
    local me = core.getpid()
    local fx = H.fixture {}
    local listed = false
    local ok, err = pcall(function()
      local kids = assert(core.task_children(me))
      for _, p in ipairs(kids) do
        assert.equal("integer", math.type(p))
        if p == fx.pid then listed = true end
      end
    end)
    local pid = fx.pid
    fx:kill()
    assert(ok, err)
    assert.is_true(listed)
    for _, p in ipairs(assert(core.task_children(me))) do assert.not_equal(pid, p) end
  end)

  it("answers nil, message, errno for a thread that is not ours", function()
    local fx = H.fixture {}
    local pid = fx.pid
    fx:kill()
    local r, msg, errno = core.task_children(pid)
    assert.is_nil(r)
    assert.equal(("/proc/self/task/%d/children: No such file or directory"):format(pid), msg)
    assert.equal(ENOENT, errno)
  end)

  it("refuses what is no pid", function()
    for _, bad in ipairs { 0, -1, 1.5, "self", {}, true } do
      assert.has_error(function() core.task_children(bad) end, nil, tostring(bad))
    end
    assert.has_error(function() core.task_children() end)
  end)
end)

describe("process:comm", function()
  it("gives /proc/<pid>/comm without its newline, and ESRCH once the process is gone", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local fx = H.fixture {}
    local p = assert(takana.process(fx.pid))
    local ok, err = pcall(function()
      assert.equal(assert(H.read("/proc/" .. fx.pid .. "/comm")):match("^[^\n]*"), p:comm())
      assert.equal("fixture", p:comm())
      assert.has_error(function() p:comm(1) end)
    end)
    fx:kill()
    local r, msg, errno = p:comm()
    p:close()
    assert(ok, err)
    assert.is_nil(r)
    assert.is_string(msg)
    assert.equal(ESRCH, errno)
    local self = assert(takana.process(core.getpid()))
    assert.equal(assert(H.read("/proc/self/comm")):match("^[^\n]*"), self:comm())
    self:close()
  end)
end)

describe("core.cgroup_path", function()
  it("is takana.cgroup.path's resolver, and refuses what is no id", function()
    local m = takana.cgroup.mounts()
    if not (m and m.v2) then return pending("no cgroup2 hierarchy is mounted here") end
    local me = assert(takana.cgroup.self())
    local id = core.cgroup_id(me)
    assert.equal(me.path, core.cgroup_path(m.v2, id))
    assert.equal(me.path, takana.cgroup.path(id))
    me:close()
    local r, msg, errno = core.cgroup_path(m.v2, 0x7fffffff0000)
    assert.is_nil(r)
    assert.matches("^cgroup%.path: no cgroup .*has id " .. 0x7fffffff0000 .. " %(removed%?%)$", msg)
    assert.equal(ENOENT, errno)
    assert.same({ r, msg, errno }, { takana.cgroup.path(0x7fffffff0000) })
    r, msg, errno = core.cgroup_path("/nonexistent-takana-mount", id)
    assert.is_nil(r)
    assert.matches("/nonexistent%-takana%-mount", msg)
    assert.equal(ENOENT, errno)
    assert.has_error(function() core.cgroup_path(m.v2, 0) end)
    assert.has_error(function() core.cgroup_path(m.v2, "x") end)
    assert.has_error(function() core.cgroup_path(nil, id) end)
    assert.has_error(function() core.cgroup_path(m.v2, id, 1) end)
  end)
end)
