-- takana.options: a script's command line read the way its --help text
-- describes it (Penlight's lapp is the model), so the text is the one
-- specification and cannot drift from the parser. Documented as
-- takana.options in lua/takana/init.lua, which loads this on first call.
local util = require "takana.util"

local argerror, printable = util.argerror, util.printable

-- Metavars whose values are numbers, finite and >= 0 (a count, seconds, a
-- share, a percentage, a uid): N a whole one, the others any.
local NUMERIC = { N = "a whole number >= 0", F = "a number >= 0", S = "a number >= 0", PCT = "a number >= 0" }

-- value as the option o takes it, or nil and what it should have been.
local function convert(o, value)
  local want = NUMERIC[o.metavar]
  if not want then return value end
  local n = tonumber(value)
  if o.metavar == "N" then n = n and math.tointeger(n) end
  if not n or n < 0 or n == math.huge then return nil, want end
  return n
end

-- The options and operands the text declares. An option line is a line
-- whose first word is `--name`; a word one blank after it is its metavar
-- (two blanks or more start the description). Lines indented deeper than
-- it continue its description. An operand line is an indented line whose
-- first word is an uppercase NAME, `NAME...` (one or more) or `[NAME]`
-- (optional), then two blanks or the end of the line.
local function read_text(text)
  local spec = { options = {}, operands = {} }
  local current   -- the option or operand the lines below may continue
  for line in text:gmatch("[^\n]*") do
    local indent, first = line:match("^(%s*)(.*)$")
    if not spec.usage and first:match("^usage:") then
      spec.usage = line
      spec.name = (first:match("^usage:%s*(%S*)"):match("[^/]*$"):gsub("%.lua$", ""))
      current = nil
    elseif current and first ~= "" and #indent > current.indent then
      current.text = current.text .. " " .. first
    else
      local name, after = first:match("^%-%-(%w[%w-]*)(.*)$")
      local opt, dots, blanks = first:match("^(%[?%u[%u%d_]*%]?)(%.?%.?%.?)(%s*)")
      current = nil
      if name and (after == "" or after:match("^%s")) then
        local metavar, desc = after:match("^ (%S+)(.*)$")
        if not metavar or after:match("^%s%s") then metavar, desc = nil, after end
        local key = name:gsub("-", "_")
        if spec.options[name] then argerror("options", 1, "--" .. name .. " declared twice", 2) end
        current = { name = name, key = key, indent = #indent, text = desc, metavar = metavar }
        spec.options[name] = current
      elseif opt and #indent > 0 and (blanks:match("^%s%s") or #first == #opt + #dots) then
        current = { name = opt:match("%u[%u%d_]*"), indent = #indent, text = "", many = dots == "...",
          optional = opt:sub(1, 1) == "[" }
        spec.operands[#spec.operands + 1] = current
      end
    end
  end
  if not spec.usage then argerror("options", 1, "no 'usage:' line in the text", 2) end
  for name, o in pairs(spec.options) do
    if o.metavar then
      o.many = o.metavar:match("%.%.%.$") ~= nil or o.text:find("repeatable", 1, true) ~= nil
      o.metavar = o.metavar:gsub("%.%.%.$", "")
      local default = o.text:match("%(default ([^%s;,)]+)")
      if default then
        local value, want = convert(o, default)
        if not value then argerror("options", 1, ("--%s: default %s is not %s"):format(name, default, want), 2) end
        o.default = value
      end
    end
  end
  return spec
end

-- The opts table argv gives, or nil and the mistake; "help" when `--help`
-- is among the options, whatever else is wrong with them.
local function parse(spec, argv)
  for _, a in ipairs(argv) do
    if a == "--" then break end
    if a == "--help" then return "help" end
  end
  local opts, operands = {}, {}
  for _, o in pairs(spec.options) do
    if not o.metavar then opts[o.key] = false
    elseif o.many then opts[o.key] = {}
    else opts[o.key] = o.default end
  end
  local i = 1
  while i <= #argv do
    local a = argv[i]
    local name, eq, value = a:match("^%-%-([^=]*)(=?)(.*)$")
    local o = name and spec.options[name]
    if a == "--" then
      table.move(argv, i + 1, #argv, #operands + 1, operands)
      break
    elseif a:match("^%-.") and not o then
      return nil, "bad option " .. printable(a)
    elseif not o then
      operands[#operands + 1] = a
    elseif not o.metavar then
      if eq ~= "" then return nil, "--" .. name .. " takes no value" end
      opts[o.key] = true
    else
      if eq == "" then i, value = i + 1, argv[i + 1] end
      if value == nil then return nil, "--" .. name .. " needs a value" end
      local v, want = convert(o, value)
      if v == nil then return nil, ("--%s needs %s, not %s"):format(name, want, printable(value)) end
      if o.many then table.insert(opts[o.key], v) else opts[o.key] = v end
    end
    i = i + 1
  end
  for _, o in pairs(spec.options) do
    if o.many and #opts[o.key] == 0 and o.default ~= nil then opts[o.key] = { o.default } end
  end
  -- Operands in order: one each, a NAME... all that those after it leave.
  local n, declared = 1, spec.operands
  for k, d in ipairs(declared) do
    local left, needed_after = #operands - n + 1, 0
    for j = k + 1, #declared do needed_after = needed_after + (declared[j].optional and 0 or 1) end
    local take = d.many and math.max(left - needed_after, 0) or math.min(left, 1)
    if take == 0 and not d.optional then return nil, "no " .. d.name .. " given" end
    n = n + take
  end
  if n <= #operands then return nil, "unexpected argument " .. printable(operands[n]) end
  table.move(operands, 1, #operands, 1, opts)
  return opts
end

return function(text, argv, ...)
  util.nargs("options", 2, select("#", ...) + 2)
  if type(text) ~= "string" then argerror("options", 1, "string expected, got " .. type(text)) end
  if argv == nil then argv = rawget(_G, "arg") or {} end
  if type(argv) ~= "table" then argerror("options", 2, "table expected, got " .. type(argv)) end
  for i = 1, #argv do
    if type(argv[i]) ~= "string" then
      argerror("options", 2, ("argument %d: string expected, got %s"):format(i, type(argv[i])))
    end
  end
  local spec = read_text(text)
  local function usage_error(msg)
    io.stderr:write(spec.name, ": ", msg, "\n", spec.usage, "\n")
    os.exit(2)
  end
  local opts, err = parse(spec, argv)
  if opts == "help" then
    io.write(text, text:sub(-1) == "\n" and "" or "\n")
    os.exit(0)
  end
  if not opts then usage_error(err) end
  return opts, usage_error
end
