--- takana.json: the one JSON codec of the CLI and the supervisor's control
-- protocol (one value a line).
--
-- Output is pure ASCII, so what a process named itself or a service wrote
-- reaches a terminal inert. A table encodes as an array when it has a
-- border (`#t > 0`) or carries the `array` metatable, else as an object
-- with its keys sorted: an empty table is `{}` unless marked.
-- @module takana.json
local core = require "takana.core"
local util = require "takana.util"

local argerror = util.argerror

local M = {}
local EBADMSG = core.errno.EBADMSG

--- The metatable that marks a table as a JSON array even when empty
-- (`setmetatable({}, json.array)`); decode gives arrays this metatable.
-- @table array
M.array = {}

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

local ascii_escapes = {}
for c = 0, 127 do
  local ch = string.char(c)
  ascii_escapes[ch] = escapes[ch] or ((c < 32 or c == 127) and ("\\u%04x"):format(c)) or nil
end
local function cp_escape(cp)
  if cp <= 0xffff then return ("\\u%04x"):format(cp) end
  cp = cp - 0x10000
  return ("\\u%04x\\u%04x"):format(0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff))
end

-- A run of non-ASCII bytes (a lead byte and its continuation bytes) as
-- \u escapes: the character it is, or each it decodes to and U+FFFD for
-- each byte that starts none.
local function non_ascii_escape(run)
  if #run == 1 then return "\\ufffd" end   -- a lone byte is never UTF-8
  if #run <= 4 and utf8.len(run) == 1 then return cp_escape(utf8.codepoint(run)) end
  local out, i = {}, 1
  while i <= #run do
    local ok, cp = pcall(utf8.codepoint, run, i)
    out[#out + 1] = cp_escape(ok and cp or 0xfffd)
    i = i + (ok and #utf8.char(cp) or 1)
  end
  return table.concat(out)
end

-- A JSON string of pure ASCII: control characters and every non-ASCII
-- character escaped as a \u escape ("\u00e9"; a surrogate pair past
-- U+FFFF), so what a service
-- wrote reaches a terminal printing `ctl --json` inert (U+009B is CSI to
-- one in UTF-8 mode); a byte that is not valid UTF-8 becomes U+FFFD.
local function json_string(v)
  if not v:find('[%c"\\\128-\255]') then return v end
  -- gsub, not a Lua iteration a byte (1 µs each: a 4 KiB status took 3 ms)
  return (v:gsub('[%c"\\]', ascii_escapes):gsub("[\128-\255][\128-\191]*", non_ascii_escape))
end

local function encode(v, out)
  local t = type(v)
  if t == "nil" then out[#out + 1] = "null"
  elseif t == "boolean" then out[#out + 1] = tostring(v)
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then out[#out + 1] = "null"
    elseif math.type(v) == "integer" then out[#out + 1] = tostring(v)
    else out[#out + 1] = ("%.17g"):format(v) end
  elseif t == "string" then
    out[#out + 1] = '"' .. json_string(v) .. '"'
  elseif t == "table" then
    local n = #v
    if n > 0 or next(v) == nil and getmetatable(v) == M.array then
      out[#out + 1] = "["
      for i = 1, n do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = tostring(k) end
      table.sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        encode(k, out)
        out[#out + 1] = ":"
        local val = v[k]
        if val == nil then val = v[tonumber(k)] end
        encode(val, out)
      end
      out[#out + 1] = "}"
    end
  else
    out[#out + 1] = "null"
  end
end


--- Encodes a Lua value as one line of JSON, pure ASCII: control and
-- non-ASCII characters escaped as \u escapes ("\u00e9"), a byte that is
-- not valid UTF-8 as U+FFFD.
function M.encode(v)
  local out = {}
  encode(v, out)
  return table.concat(out)
end

local function decode_error(_, i, what)
  error(("json: %s at byte %d"):format(what, i), 0)
end

local decode_value

local function skip(s, i)
  return s:find("[^ \t\r\n]", i) or #s + 1
end

local function decode_string(s, i)
  local out, j = {}, i + 1
  while true do
    local k = s:find('["\\]', j)
    if not k then decode_error(s, i, "unterminated string") end
    out[#out + 1] = s:sub(j, k - 1)
    if s:sub(k, k) == '"' then return table.concat(out), k + 1 end
    local e = s:sub(k + 1, k + 1)
    local simple = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }
    if simple[e] then
      out[#out + 1] = simple[e]
      j = k + 2
    elseif e == "u" then
      local hex = s:sub(k + 2, k + 5)
      if not hex:match("^%x%x%x%x$") then decode_error(s, k, "bad \\u escape") end
      local cp = tonumber(hex, 16)
      j = k + 6
      if cp >= 0xD800 and cp <= 0xDBFF and s:sub(j, j + 1) == "\\u" then
        local lo = tonumber(s:sub(j + 2, j + 5), 16)
        if lo and lo >= 0xDC00 and lo <= 0xDFFF then
          cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
          j = j + 6
        end
      end
      out[#out + 1] = utf8.char(cp)
    else
      decode_error(s, k, "bad escape")
    end
  end
end

function decode_value(s, i, depth)
  if depth > 64 then decode_error(s, i, "nested too deep") end
  i = skip(s, i)
  local c = s:sub(i, i)
  if c == "{" then
    local t = {}
    i = skip(s, i + 1)
    if s:sub(i, i) == "}" then return t, i + 1 end
    while true do
      if s:sub(i, i) ~= '"' then decode_error(s, i, "key expected") end
      local k
      k, i = decode_string(s, i)
      i = skip(s, i)
      if s:sub(i, i) ~= ":" then decode_error(s, i, "':' expected") end
      t[k], i = decode_value(s, i + 1, depth + 1)
      i = skip(s, i)
      local d = s:sub(i, i)
      if d == "}" then return t, i + 1 end
      if d ~= "," then decode_error(s, i, "',' or '}' expected") end
      i = skip(s, i + 1)
    end
  elseif c == "[" then
    local t = setmetatable({}, M.array)
    i = skip(s, i + 1)
    if s:sub(i, i) == "]" then return t, i + 1 end
    while true do
      t[#t + 1], i = decode_value(s, i, depth + 1)
      i = skip(s, i)
      local d = s:sub(i, i)
      if d == "]" then return t, i + 1 end
      if d ~= "," then decode_error(s, i, "',' or ']' expected") end
      i = i + 1
    end
  elseif c == '"' then
    return decode_string(s, i)
  elseif s:sub(i, i + 3) == "true" then return true, i + 4
  elseif s:sub(i, i + 4) == "false" then return false, i + 5
  elseif s:sub(i, i + 3) == "null" then return nil, i + 4
  else
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if not num or num == "" then decode_error(s, i, "value expected") end
    local v = math.tointeger(tonumber(num)) or tonumber(num)
    if v == nil then decode_error(s, i, "bad number") end
    return v, i + #num
  end
end

--- Decodes one JSON text.
-- @treturn[1] value
-- @treturn[2] nil, message, EBADMSG
function M.decode(s)
  if type(s) ~= "string" then argerror("decode", 1, "string expected, got " .. type(s)) end
  local ok, v, i = pcall(decode_value, s, 1, 0)
  if not ok then return nil, v, EBADMSG end
  if skip(s, i) <= #s then return nil, ("json: trailing data at byte %d"):format(i), EBADMSG end
  return v
end

return M
