local H = require "helpers"

describe("luarocks make #slow", function()
  it("installs into a local tree, offline, and require 'takana' works from it", function()
    local dir = select(2, H.run("mktemp -d")):match("%S+")
    finally(function() os.execute("rm -rf " .. H.shell_quote(dir)) end)
    -- Build in a copy: building in place would rewrite the core.so this
    -- very process has loaded.
    local code, out = H.run(("tar cf - Makefile csrc lua bpf rockspec bin tools examples | tar xf - -C %s && cd %s && " ..
      "luarocks --lua-version=5.4 make --tree %s/tree rockspec/takana-scm-1.rockspec")
      :format(dir, dir, dir))
    assert.equal(0, code, out)
    code, out = H.run(("cd / && LUA_PATH='%s/tree/share/lua/5.4/?.lua;%s/tree/share/lua/5.4/?/init.lua' " ..
      "LUA_CPATH='%s/tree/lib/lua/5.4/?.so' lua5.4 -e 'local t = require \"takana\"; " ..
      "local s = assert(t.snapshot()); print(package.searchpath(\"takana.core\", package.cpath), #s > 0)'")
      :format(dir, dir, dir))
    assert.equal(0, code, out)
    assert.equal(dir .. "/tree/lib/lua/5.4/takana/core.so\ttrue\n", out)
    -- Every Lua module, the internal takana.util among them, from the tree.
    code, out = H.run(("cd / && LUA_PATH='%s/tree/share/lua/5.4/?.lua;%s/tree/share/lua/5.4/?/init.lua' " ..
      "LUA_CPATH='%s/tree/lib/lua/5.4/?.so' lua5.4 -e 'for _, m in ipairs { \"takana.util\", \"takana.cgroup\", " ..
      "\"takana.json\", \"takana.supervisor\", \"takana.supervisor.service\", \"takana.supervisor.notify\", " ..
      "\"takana.supervisor.log\", \"takana.supervisor.control\", \"takana.cli\" } do " ..
      "require(m) io.write(package.searchpath(m, package.path), \" \") end'")
      :format(dir, dir, dir))
    assert.equal(0, code, out)
    local share = dir .. "/tree/share/lua/5.4/takana/"
    local sup = share .. "supervisor/"
    assert.equal(share .. "util.lua " .. share .. "cgroup.lua " .. share .. "json.lua " .. sup .. "init.lua " ..
      sup .. "service.lua " .. sup .. "notify.lua " .. sup .. "log.lua " .. sup .. "control.lua " .. share .. "cli.lua ", out)
    -- The modules are installed as bytecode that keeps its debug
    -- information: a traceback names the module's file and line.
    for _, m in ipairs { "takana/util.lua", "takana/cli.lua", "takana/supervisor/init.lua" } do
      assert.equal("\27Lua", assert(io.open(share .. m:sub(8), "rb")):read(4), m)
    end
    code, out = H.run(("cd / && LUA_PATH='%s/tree/share/lua/5.4/?.lua;%s/tree/share/lua/5.4/?/init.lua' " ..
      "LUA_CPATH='%s/tree/lib/lua/5.4/?.so' lua5.4 -e 'require(\"takana.util\").argerror(\"f\", 1, \"x\", -1)' 2>&1")
      :format(dir, dir, dir))
    assert.equal(1, code)
    assert.matches("takana/util%.lua:%d+: bad argument #1 to 'f' %(x%)", out)
    -- The command is installed as it is, not behind luarocks' wrapper (which
    -- loads luarocks.loader first), with the interpreter luarocks ran on its
    -- first line instead of env's PATH search, and finds the tree's modules
    -- itself, with no LUA_PATH, from any directory.
    local installed = assert(io.open(dir .. "/tree/bin/takana")):read("a")
    local lua_bin = select(2, H.run("luarocks --lua-version=5.4 config variables.LUA")):match("%S+")
    local source = assert(io.open("bin/takana")):read("a")
    assert.equal("#!" .. lua_bin .. source:match("\n.*"), installed)
    code, out = H.run(("cd / && env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 %s/tree/bin/takana ps -o pid,comm")
      :format(dir))
    assert.equal(0, code, out)
    assert.matches("\n%s*1%s+%S", out)
    -- The examples are installed with it, and `takana example` runs them
    -- from the tree: oomd refuses a cgroup that is not there, in JSON.
    for _, name in ipairs { "oomd", "services" } do
      assert.equal(assert(io.open("examples/" .. name .. ".lua")):read("a"),
        assert(io.open(share .. "examples/" .. name .. ".lua")):read("a"), name)
    end
    code, out = H.run(("cd / && env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 %s/tree/bin/takana " ..
      "example oomd --json takana-test-absent-%d"):format(dir, math.random(1e9)))
    assert.equal(1, code, out)
    assert.matches('^{"cgroup":"takana%-test%-absent%-%d+","error":"cgroup /takana%-test%-absent%-%d+: [^"]+",' ..
      '"event":"failure","time":"[%dT:Z-]+"}\n$', out)
  end)
end)
