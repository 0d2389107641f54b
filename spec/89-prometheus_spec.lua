-- takana.prometheus: the text exposition format as a library (what
-- `takana export` writes).
local takana = require "takana"
local core = require "takana.core"
local prom = require "takana.prometheus"
local H = require "helpers"

describe("takana.prometheus", function()
  it("is the module takana.prometheus names, loaded on first use", function()
    assert.equal(prom, takana.prometheus)
  end)

  it("writes each family once, its samples together in first-seen order, labels sorted", function()
    local m = prom.new()
    m:gauge("q_len", "Jobs waiting.", { queue = "mail", host = "a" }, 12)
    m:counter("jobs_total", "Jobs done.", nil, 3400)
    assert.equal(m, m:gauge("q_len", "Jobs waiting.", { queue = "sms", host = "a" }, 0))
    m:add("temp", "untyped", "A reading.", {}, -1.5)
    assert.equal(table.concat({
      "# HELP q_len Jobs waiting.",
      "# TYPE q_len gauge",
      'q_len{host="a",queue="mail"} 12',
      'q_len{host="a",queue="sms"} 0',
      "# HELP jobs_total Jobs done.",
      "# TYPE jobs_total counter",
      "jobs_total 3400",
      "# HELP temp A reading.",
      "# TYPE temp untyped",
      "temp -1.5",
      "" }, "\n"), m:text())
    assert.equal("", prom.new():text())
  end)

  it("escapes label values and help, and cleans bytes that are not UTF-8", function()
    local m = prom.new()
    m:gauge("x", 'back\\slash\nnew "line"', { comm = 'a\255"b\\c\nd', n = 7, ok = true }, 1)
    assert.equal(table.concat({
      '# HELP x back\\\\slash\\nnew "line"',
      "# TYPE x gauge",
      'x{comm="a\u{FFFD}\\"b\\\\c\\nd",n="7",ok="true"} 1',
      "" }, "\n"), m:text())
  end)

  it("writes integers exactly, floats in the fewest digits that read back equal, NaN and infinities", function()
    assert.equal("9007199254740993", prom.number(9007199254740993))
    assert.equal("0.1", prom.number(0.1))
    assert.equal("0.30000000000000004", prom.number(0.1 + 0.2))
    assert.equal(0.1 + 0.2, tonumber(prom.number(0.1 + 0.2)))
    assert.equal("1e+300", prom.number(1e300))
    assert.equal("NaN", prom.number(0 / 0))
    assert.equal("+Inf", prom.number(math.huge))
    assert.equal("-Inf", prom.number(-math.huge))
  end)

  it("raises on names the format forbids, a family's type or help changed, a series twice, a value not a number", function()
    local m = prom.new()
    m:gauge("ok", "h", { a = "1" }, 1)
    local cases = {
      { function() m:gauge("9x", "h", nil, 1) end, "bad argument #1 to 'gauge' (metric name \"9x\" is not" },
      { function() m:gauge("a-b", "h", nil, 1) end, "bad argument #1 to 'gauge'" },
      { function() m:gauge(nil, "h", nil, 1) end, "bad argument #1 to 'gauge'" },
      { function() m:counter("c", 5, nil, 1) end, "bad argument #2 to 'counter' (help string expected, got number)" },
      { function() m:add("c", "histogram", "h", nil, 1) end, "bad argument #2 to 'add'" },
      { function() m:gauge("x", "h", { __a = 1 }, 1) end, "bad argument #3 to 'gauge' (label name \"__a\"" },
      { function() m:gauge("x", "h", { ["a b"] = 1 }, 1) end, "bad argument #3 to 'gauge'" },
      { function() m:gauge("x", "h", { [1] = "v" }, 1) end, "bad argument #3 to 'gauge'" },
      { function() m:gauge("x", "h", { a = {} }, 1) end,
        "bad argument #3 to 'gauge' (label a: string, number or boolean expected, got table)" },
      { function() m:gauge("x", "h", "a=1", 1) end, "bad argument #3 to 'gauge' (table of labels expected, got string)" },
      { function() m:add("x", "gauge", "h", nil, "1") end, "bad argument #5 to 'add' (number expected, got string)" },
      { function() m:gauge("x", "h", nil, nil) end, "bad argument #4 to 'gauge' (number expected, got nil)" },
      { function() m:counter("ok", "h", { a = "2" }, 1) end, 'metric ok is a gauge with help "h": a family has one type and one help' },
      { function() m:gauge("ok", "other", { a = "2" }, 1) end, "a family has one type and one help" },
      { function() m:gauge("ok", "h", { a = "1" }, 2) end, 'metric ok{a="1"} added twice' },
      { function() m.gauge({}, "y", "h", nil, 1) end, "bad argument #1 to 'gauge' (collection expected" },
      { function() m:write_textfile(7) end, "bad argument #1 to 'write_textfile'" },
      { function() m:write_textfile("/tmp", "../x.prom") end, "bad argument #2 to 'write_textfile'" },
      { function() m:write_textfile("/tmp", "x.txt") end, "bad argument #2 to 'write_textfile'" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err) .. " lacks " .. c[2])
    end
    -- A refused sample leaves the collection as it was.
    assert.equal('# HELP ok h\n# TYPE ok gauge\nok{a="1"} 1\n', m:text())
  end)

  it("write_textfile replaces the file atomically and says why it cannot write", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -m 0755 " .. dir))
    finally(function() os.execute("rm -rf " .. H.shell_quote(dir)) end)
    local m = prom.new():gauge("up", "Up.", nil, 1)
    assert.is_true(m:write_textfile(dir))
    assert.equal(m:text(), assert(io.open(dir .. "/takana.prom")):read("a"))
    assert.is_true(m:write_textfile(dir, "other.prom"))
    local ok, err, errno = m:write_textfile(dir .. "/missing")
    assert.is_nil(ok)
    assert.equal(core.errno.ENOENT, errno)
    assert.matches("missing", err)
  end)

  it("takana export's text is one family per name, as promtool and node_exporter require", function()
    local text = assert(require("takana.cli").exposition { cgroups = { "/" }, top = 3, backend = "proc" })
    local seen, last = {}, nil
    for line in text:gmatch("[^\n]+") do
      local name = line:match("^# TYPE (%S+)") or line:match("^([%w_:]+)")
      if not line:match("^# HELP") and name ~= last then
        assert.is_nil(seen[name], name .. " appears twice apart")
        seen[name], last = true, name
      end
    end
    assert.truthy(seen.takana_processes)
  end)
end)
