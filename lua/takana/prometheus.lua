--- The Prometheus text exposition format, as a library: what `takana
-- export` writes, for scripts that export their own metrics.
--
--     local prom = require "takana.prometheus"
--     local m = prom.new()
--     m:gauge("app_queue_length", "Jobs waiting.", { queue = "mail" }, 12)
--     m:counter("app_jobs_total", "Jobs done.", { queue = "mail" }, 3400)
--     io.write(m:text())                    -- or m:write_textfile(dir)
--
-- A family is declared by its first sample: its HELP and TYPE lines are
-- written once, and all its samples are written together, in the order of
-- first appearance, whatever order they were added in (the format allows a
-- family only once). Label values may be any string: `\`, `"` and newline
-- are escaped, and bytes that are not UTF-8 become U+FFFD (the parser
-- rejects the whole document over one bad byte, and node_exporter then
-- drops every series of the textfile). Names that the format does not allow,
-- a family added again with another type or help, a second sample with the
-- same labels, and values that are not numbers raise, naming the series.
-- @module takana.prometheus
local M = {}

local collection = {}
collection.__index = collection
collection.__name = "takana.prometheus"

local KINDS = { counter = true, gauge = true, untyped = true }

-- Errors name the caller's call: every public method tail-calls put, so
-- level 3 from argerror is the user's code (4 from label_set).
local function argerror(fname, i, msg, level)
  error(("bad argument #%d to '%s' (%s)"):format(i, fname, msg), level or 3)
end

--- A comm is any 15 bytes a process chose; each byte that is not part of a
-- valid UTF-8 sequence becomes U+FFFD, as Go's decoder does.
-- @string s
-- @treturn string
function M.valid_utf8(s)
  if utf8.len(s) then return s end
  local parts, i = {}, 1
  while i <= #s do
    local n, bad = utf8.len(s, i)
    if n then
      parts[#parts + 1] = s:sub(i)
      break
    end
    parts[#parts + 1] = s:sub(i, bad - 1)
    parts[#parts + 1] = "\u{FFFD}"
    i = bad + 1
  end
  return table.concat(parts)
end
local valid_utf8 = M.valid_utf8

local LABEL_ESC = { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }
local HELP_ESC = { ["\\"] = "\\\\", ["\n"] = "\\n" }

--- A label value as the format quotes it.
-- @param v a string, or anything tostring turns into one
-- @treturn string `"..."` with `\`, `"` and newline escaped
function M.label_value(v)
  return '"' .. valid_utf8(tostring(v)):gsub('[\\"\n]', LABEL_ESC) .. '"'
end

--- A sample value as the format writes it: integers exactly, floats in the
-- fewest digits (15 to 17) that read back equal, NaN, +Inf and -Inf.
-- @number v
-- @treturn string
function M.number(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  for digits = 15, 16 do
    local text = ("%." .. digits .. "g"):format(v)
    if tonumber(text) == v then return text end
  end
  return ("%.17g"):format(v)
end

--- A new, empty collection of metric families.
-- @treturn collection
function M.new()
  return setmetatable({ families = {}, order = {} }, collection)
end

local function label_set(fname, i, lbl)
  if lbl == nil then return "" end
  if type(lbl) ~= "table" then argerror(fname, i, "table of labels expected, got " .. type(lbl), 4) end
  local keys = {}
  for k, v in pairs(lbl) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") or k:sub(1, 2) == "__" then
      argerror(fname, i, "label name " .. M.label_value(k) .. " is not [a-zA-Z_][a-zA-Z0-9_]* (and __ is reserved)", 4)
    end
    local tv = type(v)
    if tv ~= "string" and tv ~= "number" and tv ~= "boolean" then
      argerror(fname, i, "label " .. k .. ": string, number or boolean expected, got " .. tv, 4)
    end
    keys[#keys + 1] = k
  end
  if #keys == 0 then return "" end
  table.sort(keys)
  local parts = {}
  for n, k in ipairs(keys) do parts[n] = k .. "=" .. M.label_value(lbl[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

-- o: 1 when the caller (add) names the kind as its argument #2, else 0.
local function put(self, fname, o, name, kind, help, labels, value)
  if getmetatable(self) ~= collection then argerror(fname, 1, "collection expected (call it with ':')") end
  if type(name) ~= "string" or not name:match("^[%a_:][%w_:]*$") then
    argerror(fname, 1, "metric name " .. M.label_value(tostring(name)) .. " is not [a-zA-Z_:][a-zA-Z0-9_:]*")
  end
  if not KINDS[kind] then argerror(fname, 2, "\"counter\", \"gauge\" or \"untyped\" expected, got " .. tostring(kind)) end
  if type(help) ~= "string" then argerror(fname, 2 + o, "help string expected, got " .. type(help)) end
  if type(value) ~= "number" then argerror(fname, 4 + o, "number expected, got " .. type(value)) end
  local set = label_set(fname, 3 + o, labels)
  local fam = self.families[name]
  if not fam then
    fam = { kind = kind, help = help, samples = {}, seen = {} }
    self.families[name] = fam
    self.order[#self.order + 1] = name
  elseif fam.kind ~= kind or fam.help ~= help then
    error(("metric %s is a %s with help %q: a family has one type and one help"):format(
      name, fam.kind, fam.help), 3)
  end
  if fam.seen[set] then error(("metric %s%s added twice"):format(name, set), 3) end
  fam.seen[set] = true
  fam.samples[#fam.samples + 1] = name .. set .. " " .. M.number(value)
  return self
end

--- Adds one sample of a family, declaring the family on its first sample.
-- @string name the family's name, `[a-zA-Z_:][a-zA-Z0-9_:]*`
-- @string kind `"counter"`, `"gauge"` or `"untyped"`
-- @string help the HELP text (escaped as the format says)
-- @tparam[opt] table labels name → string, number or boolean
-- @number value
-- @treturn collection itself, so calls chain
function collection:add(name, kind, help, labels, value)
  return put(self, "add", 1, name, kind, help, labels, value)
end

--- `add(name, "counter", ...)`.
-- @string name
-- @string help
-- @tparam[opt] table labels
-- @number value
-- @treturn collection itself
function collection:counter(name, help, labels, value)
  return put(self, "counter", 0, name, "counter", help, labels, value)
end

--- `add(name, "gauge", ...)`.
-- @string name
-- @string help
-- @tparam[opt] table labels
-- @number value
-- @treturn collection itself
function collection:gauge(name, help, labels, value)
  return put(self, "gauge", 0, name, "gauge", help, labels, value)
end

--- The exposition text: each family's HELP, TYPE and samples, in the order
-- families first appeared, ending in a newline (empty for no family).
-- @treturn string
function collection:text()
  local out = {}
  for _, name in ipairs(self.order) do
    local fam = self.families[name]
    out[#out + 1] = ("# HELP %s %s\n# TYPE %s %s"):format(name, valid_utf8(fam.help):gsub("[\\\n]", HELP_ESC),
      name, fam.kind)
    for _, s in ipairs(fam.samples) do out[#out + 1] = s end
  end
  return #out > 0 and table.concat(out, "\n") .. "\n" or ""
end

--- Writes the text for node_exporter's textfile collector, atomically
-- (a temporary file made beneath the directory's checked fd, then renamed;
-- see `takana.textfile_write`: a planted link is replaced, not followed).
-- @string dir the collector's directory
-- @string[opt="takana.prom"] name the file's name, ending in `.prom`
-- @treturn[1] true
-- @treturn[2] nil, message, errno
function collection:write_textfile(dir, name)
  name = name or "takana.prom"
  if type(dir) ~= "string" then argerror("write_textfile", 1, "string expected, got " .. type(dir)) end
  if type(name) ~= "string" or not name:match("^[^/]+%.prom$") then
    argerror("write_textfile", 2, "a file name ending in .prom expected")
  end
  return require("takana").textfile_write(dir, name, self:text())
end

return M
