-- The reference `make doc` generates documents every public function,
-- method and field: the spec walks the module, the cgroup module and every
-- object's methods, and looks each name up in LDoc's output.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

-- (.ci/ldoc: ldoc's templates in a directory of its own, not /tmp/ldoc_root)
local function ldoc()
  local mk = assert(io.popen("mktemp -d"))
  local dir = assert(mk:read("l"))
  mk:close()
  local q = H.shell_quote(dir)
  local ok = os.execute("sh .ci/ldoc -d " .. q .. "/out . >" .. q .. "/log 2>&1")
  local log = H.read(dir .. "/log") or ""
  local modules, pages = { "takana", "takana.cgroup", "takana.supervisor", "takana.ctl", "takana.prometheus" }, {}
  for _, m in ipairs(modules) do pages[m] = H.read(dir .. "/out/modules/" .. m .. ".html") end
  os.execute("rm -rf " .. q)
  assert(ok, "ldoc failed:\n" .. log)
  for _, m in ipairs(modules) do assert(pages[m], "ldoc wrote no page for " .. m) end
  return pages, log
end

-- What LDoc's pages may hold as HTML; anything else in angle brackets is
-- text that should have been escaped.
local html_tags = {}
for tag in ([[html head body meta link title div span a p br hr h1 h2 h3 h4 h5 h6 ul ol li dl dt dd
  table thead tbody tr th td code pre em strong b i big small blockquote img sup sub strike
  !doctype script style]]):gmatch("%S+") do html_tags[tag] = true end

local function anchors(html)
  local set = {}
  for name in html:gmatch('<a name = "([^"]+)"') do set[name] = true end
  return set
end

-- The methods table behind an object's __index (a table, or upvalue 1 of
-- the __index function).
local function methods_of(obj)
  local idx = getmetatable(obj).__index
  if type(idx) == "function" then idx = select(2, debug.getupvalue(idx, 1)) end
  assert(type(idx) == "table")
  local names = {}
  for k, v in pairs(idx) do
    if type(v) == "function" and not k:match("^_") then names[#names + 1] = k end
  end
  table.sort(names)
  return names
end

-- Fields an event table may hold, from the core's schema (TK_EVENT_FIELDS).
local function event_fields()
  local set = {}
  for _, fields in pairs(core.event_fields) do
    for _, f in ipairs(fields) do set[f] = true end
  end
  return set
end

describe("make doc", function()
  local pages, log, main, cg, sup
  setup(function()
    pages, log = ldoc()
    main, cg = anchors(pages.takana), anchors(pages["takana.cgroup"])
    sup = anchors(pages["takana.supervisor"])
  end)

  it("documents every function of the module", function()
    for k, v in pairs(takana) do
      if not k:match("^_") and k ~= "cgroup" then
        assert(main[k], "takana." .. k .. " (" .. type(v) .. ") is not in the reference")
      end
    end
    for k in pairs(takana.cgroup) do
      if not k:match("^_") then assert(cg[k], "takana.cgroup." .. k .. " is not in the reference") end
    end
    for k, v in pairs(require "takana.supervisor") do
      if type(v) == "function" and not k:match("^_") then
        assert(sup[k], "takana.supervisor." .. k .. " is not in the reference")
      end
    end
    for _, name in ipairs { "takana.ctl", "takana.prometheus" } do
      local doc = anchors(assert(pages[name], name .. " has no page"))
      for k, v in pairs(require(name)) do
        if type(v) == "function" and not k:match("^_") then assert(doc[k], name .. "." .. k .. " is not in the reference") end
      end
    end
  end)

  it("documents every method of every object", function()
    local snap = assert(takana.snapshot { backend = "proc" })
    local rec = snap:each()() -- the first record's view
    local ev = assert(takana.events { backend = "poll" })
    local child = assert(takana.spawn { "true", stdout = "pipe" })
    local objects = {
      snapshot = snap, record = rec, pidfd = assert(takana.pidfd(core.getpid())), events = ev,
      signals = assert(takana.signals { "USR2" }), timer = assert(takana.timer()),
      pipe = child.stdout, process = assert(takana.process(core.getpid())),
      -- nil where this user may not open one (EPERM before 6.5).
      trigger = takana.pressure_trigger { resource = "cpu", stall = 0.5, window = 2 },
    }
    local missing = {}
    for class, obj in pairs(objects) do
      for _, m in ipairs(methods_of(obj)) do
        if not (main[class .. ":" .. m] or main["handle:" .. m]) then
          missing[#missing + 1] = class .. ":" .. m
        end
      end
    end
    local handle_base = { close = true, fileno = true, pollfd = true, events = true, timeout = true }
    for k in pairs(core.cgroup_methods) do
      if not (k:match("^_") or cg[k] or cg["cgroup:" .. k] or handle_base[k] and main["handle:" .. k]) then
        missing[#missing + 1] = "cgroup:" .. k
      end
    end
    -- A supervisor's methods are documented on the module's page.
    for k, v in pairs(require("takana.supervisor").Supervisor) do
      if type(v) == "function" and not k:match("^_") and not sup[k] then
        missing[#missing + 1] = "supervisor:" .. k
      end
    end
    child:wait()
    for _, o in pairs(objects) do if o.close then o:close() end end
    table.sort(missing)
    assert.same({}, missing)
  end)

  it("documents every record field and every event field", function()
    local text = pages.takana
    local missing = {}
    for _, field in ipairs(core.record_fields) do
      if not text:find('<span class="parameter">' .. field .. '</span>', 1, true) then missing[#missing + 1] = "record." .. field end
    end
    for field in pairs(event_fields()) do
      if not text:find('<span class="parameter">' .. field .. '</span>', 1, true) then missing[#missing + 1] = "event." .. field end
    end
    table.sort(missing)
    assert.same({}, missing)
  end)

  it("shows no internal names and escapes <angle> text", function()
    for name, html in pairs(pages) do
      for a in html:gmatch('<a name = "([^"]+)"') do
        assert.is_nil(a:match("^C%.") or a:match("^methods:"), name .. ": internal name " .. a)
      end
      assert.is_nil(html:match("<pid>"), name .. ": an unescaped <pid>")
      -- Any other placeholder (<backend>, <path>, ...) a browser would hide.
      for tag in html:gmatch("<(%a[%w_]*)[%s>]") do
        assert.truthy(html_tags[tag:lower()], name .. ": an unescaped <" .. tag .. ">")
      end
      -- An identifier with underscores outside backticks turns into emphasis.
      local em = html:match("[^\n]-%w<em>[^\n]*") or html:match("[^\n]-</em>%w[^\n]*")
      assert.is_nil(em, name .. ": markdown emphasis inside a name (backticks missing): " .. tostring(em))
    end
    assert.is_nil(log:match("malformed"), log)
  end)

  it("lists each function once, with the names of its parameters", function()
    for name, html in pairs(pages) do
      local seen = {}
      for a in html:gmatch('<a name = "([^"]+)"') do
        assert.is_nil(seen[a], name .. ": " .. a .. " is documented twice")
        seen[a] = true
      end
      for fn, args in html:gmatch('<a href="#[^"]+">([%w_.:]+)%(([^)]*)%)</a>') do
        for arg in args:gsub("[%[%]]", ""):gmatch("[^,%s]+") do
          local bare = arg:match("^[^=]+")
          assert.truthy(bare ~= "..." and bare ~= "_", ("%s: %s(%s) names no parameter"):format(name, fn, args))
        end
      end
    end
  end)
end)

describe("tools/docgen.lua", function()
  local docgen = dofile("tools/docgen.lua")

  it("finds every generated block up to date with the schemas (make docgen rewrites them)", function()
    assert.same({}, docgen.run(false))
  end)

  -- The schema tables live in doc/reference.md (the README is the short guide).
  it("has a block of every schema in doc/reference.md", function()
    local readme = assert(H.read("doc/reference.md"))
    for name in pairs(docgen.schemas) do
      assert.truthy(readme:find("<!-- schema:" .. name .. " -->", 1, true), name)
    end
  end)

  it("lists every name its schema holds, in doc/reference.md", function()
    local readme = assert(H.read("doc/reference.md"))
    for _, r in ipairs(core.cgroup_stat) do
      assert.truthy(readme:find("| `" .. (r.key and r.section .. "." .. r.key or r.section) .. "` |", 1, true), r.file)
    end
    for _, o in ipairs(require("takana.supervisor").service_options) do
      assert.truthy(readme:find("| `" .. o.name .. "` |", 1, true), o.name)
    end
  end)
end)
