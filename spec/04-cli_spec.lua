local H = require "helpers"
local takana = require "takana"

local function takana_cmd(args)
  return H.run("LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' lua5.4 bin/takana " .. args)
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
    for _, args in ipairs { "ps --bogus", "ps -o nosuchfield", "ps --backend nope", "nosuchcmd", "probe --json=1" } do
      local code, out = takana_cmd(args)
      assert.equal(2, code, args)
      assert.matches("^takana: [^\n]+\n$", out)
    end
    assert.equal(0, (takana_cmd("ps --help")))
    assert.equal(0, (takana_cmd("--help")))
  end)
end)
