-- takana.options: the command line read as the --help text describes it.
-- The exits (--help, a mistake) run in a child lua5.4 (whose argv cannot
-- hold a NUL byte: those strings are tried in this process).
local takana = require "takana"
local H = require "helpers"

local ROOT = assert(io.popen("pwd")):read("l")

local USAGE = [[
usage: tool.lua [options] CGROUP... [EXTRA]
Does a thing.
  CGROUP...      a cgroup2 path
  [EXTRA]        optional
  --share F      the share of one CPU (default 0.5)
  --uid N        a user
  --grace S      seconds (default
                 10)
  --stall PCT    a percentage
  --name NAME    a string
  --match NAME=PATTERN  the group NAME; repeatable, the first
                        match wins
  --tag T...     a list (default x)
  --dry-run      a flag
  --json         another
Notes that are not options.
]]

local function parse(argv) return takana.options(USAGE, argv) end

-- Runs takana.options(USAGE, arg) in a child with args: exit record,
-- stdout, stderr.
local function child(args)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(("local o = require('takana').options(%q)\nfor k, v in pairs(o) do print(k, tostring(v)) end\n"):format(USAGE))
  f:close()
  local argv = table.move(H.lua_argv, 1, #H.lua_argv, 1, {})
  argv[#argv + 1] = script
  table.move(args, 1, #args, #argv + 1, argv)
  argv.stdout, argv.stderr, argv.pdeathsig = "pipe", "pipe", "KILL"
  argv.env = { add = { LUA_PATH = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;", LUA_CPATH = ROOT .. "/?.so;;" } }
  local c = assert(takana.spawn(argv))
  local out, err = assert(c.stdout:read_all(30)), assert(c.stderr:read_all(30))
  local rec = assert(c:wait(30))
  c:close()
  os.remove(script)
  return rec, out, err
end

describe("takana.options", function()
  it("gives the defaults, false flags and empty lists when nothing is given", function()
    assert.same({ "cg", share = 0.5, grace = 10, tag = { "x" }, match = {}, dry_run = false, json = false },
      parse { "cg" })
  end)

  it("reads flags, values, numbers, lists and operands in any order", function()
    local o = parse { "--share=0.25", "a", "--uid", "1e3", "--match", "a=b", "--match=c=d", "b", "--dry-run",
      "--grace", "0x10", "--stall", "12.5", "--name", "--json", "--tag", "y", "--tag", "", "--", "--z" }
    assert.same({ "a", "b", "--z", share = 0.25, uid = 1000, grace = 16, stall = 12.5, name = "--json",
      match = { "a=b", "c=d" }, tag = { "y", "" }, dry_run = true, json = false }, o)
    assert.equal("integer", math.type(o.uid))
  end)

  it("keeps strings as they are, NUL bytes and .. included", function()
    local o = parse { "--name", "a\0b/../..", "../x\0", "--name=" }
    assert.same({ "../x\0", share = 0.5, grace = 10, tag = { "x" }, match = {}, dry_run = false, json = false,
      name = "" }, o)
  end)

  it("gives the operands: the NAME... takes what the others leave", function()
    assert.same({ "a", "b", "c" }, { table.unpack((parse { "a", "b", "c" })) })
  end)

  it("raises for the caller's mistakes", function()
    assert.has_error(function() takana.options(nil) end, "bad argument #1 to 'options' (string expected, got nil)")
    assert.has_error(function() takana.options(USAGE, "--json") end,
      "bad argument #2 to 'options' (table expected, got string)")
    assert.has_error(function() takana.options(USAGE, { "a", 1 }) end,
      "bad argument #2 to 'options' (argument 2: string expected, got number)")
    assert.has_error(function() takana.options(USAGE, {}, 1) end,
      "bad argument #3 to 'options' (no more than 2 arguments expected)")
    assert.has_error(function() takana.options("  --x  a flag\n", {}) end,
      "bad argument #1 to 'options' (no 'usage:' line in the text)")
    assert.has_error(function() takana.options("usage: a\n  --x N  (default many)\n", {}) end,
      "bad argument #1 to 'options' (--x: default many is not a whole number >= 0)")
    assert.has_error(function() takana.options("usage: a\n  --x  a\n  --x  b\n", {}) end,
      "bad argument #1 to 'options' (--x declared twice)")
  end)

  it("prints the text on --help and exits 0", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local rec, out, err = child { "--share", "x", "--help" }
    assert.same({ 0, USAGE, "" }, { rec.code, out, err })
  end)

  it("exits 2 with the mistake and the usage line", function()
    if H.no_spawn then return pending(H.no_spawn) end
    for _, m in ipairs {
      { { "cg", "--bogus" }, "bad option --bogus" },
      { { "cg", "--bogus=1" }, "bad option --bogus=1" },
      { { "cg", "-x" }, "bad option -x" },
      { { "cg", "--b\27gus" }, "bad option --b\\x1bgus" },
      { { "cg", "--json=yes" }, "--json takes no value" },
      { { "cg", "--uid" }, "--uid needs a value" },
      { { "cg", "--uid", "0.5" }, "--uid needs a whole number >= 0, not 0.5" },
      { { "cg", "--uid", "-0x10" }, "--uid needs a whole number >= 0, not -0x10" },
      { { "cg", "--uid", "9223372036854775808" }, "--uid needs a whole number >= 0, not 9223372036854775808" },
      { { "cg", "--share", "1e400" }, "--share needs a number >= 0, not 1e400" },
      { { "cg", "--share", "nan" }, "--share needs a number >= 0, not nan" },
      { { "cg", "--share", "-0.1" }, "--share needs a number >= 0, not -0.1" },
      { { "cg", "--stall=" }, "--stall needs a number >= 0, not " },
      { {}, "no CGROUP given" },
      { { "--json" }, "no CGROUP given" },
    } do
      local rec, out, err = child(m[1])
      assert.same({ 2, "", "tool: " .. m[2] .. "\nusage: tool.lua [options] CGROUP... [EXTRA]\n" },
        { rec.code, out, err })
    end
  end)

  it("refuses an operand the text does not declare", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write("require('takana').options('usage: /a/b/two.lua [--json]\\n  --json  JSON\\n')\n")
    f:close()
    local code, out = H.run(("LUA_PATH=%s LUA_CPATH=%s %s %s --json ..  2>&1"):format(
      H.shell_quote(ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;"), H.shell_quote(ROOT .. "/?.so;;"), H.lua,
      script))
    os.remove(script)
    assert.same({ 2, "two: unexpected argument ..\nusage: /a/b/two.lua [--json]\n" }, { code, out })
  end)
end)
