-- takana.util: what the Lua halves of takana share (takana, takana.cgroup,
-- takana.supervisor, the CLI). Internal: not part of the API, and left out
-- of the reference (config.ld lists the documented files).
local M = {}

-- A caller's mistake, worded as the C functions word theirs. The blame
-- goes `level` frames above the function that calls argerror (default 1:
-- that function's caller, the user's code when a public function calls).
function M.argerror(fname, n, msg, level)
  error(("bad argument #%d to '%s' (%s)"):format(n, fname, msg), (level or 1) + 2)
end
local argerror = M.argerror

-- Extra arguments are a caller's mistake, as in the C functions: n
-- arguments were given to fname, which takes at most max.
function M.nargs(fname, max, n)
  if n > max then
    argerror(fname, max + 1, ("no more than %d argument%s expected"):format(max, max == 1 and "" or "s"), 2)
  end
end

-- What is wrong with v for an option that wants `want`, or nil.
local function option_problem(want, v)
  if type(want) == "function" then return want(v) end
  if want == "any" then return nil end
  for w in want:gmatch("[^|]+") do
    if type(v) == w then return nil end
  end
  return ("%s expected, got %s"):format((want:gsub("|", " or ")), type(v))
end

-- Checks the options table opts, argument n of fname, against spec
-- {name = want}, raising at the public function's caller. want is a Lua
-- type, or several joined by "|" ("string|function"); "any" leaves the
-- value to a later check; a function(v) returns nil when v will do, else
-- what was expected ("seconds expected (0 to 1 year), got -1").
-- how.required: a nil opts is a mistake too (else it reads as {});
-- how.positional: integer keys (an argv, a list of event types) are the
-- caller's to check; how.where: text before each message (which of a
-- list of tables); how.level: the frame blamed, counted from the caller
-- (default 2: the caller's caller). Returns opts, or {} for nil.
function M.check_options(fname, n, opts, spec, how)
  if opts == nil and not (how and how.required) then return {} end
  local where, level = how and how.where or "", how and how.level or 2
  if type(opts) ~= "table" then argerror(fname, n, where .. "table expected, got " .. type(opts), level) end
  local positional = how and how.positional
  for k, v in pairs(opts) do
    if not (positional and math.type(k) == "integer") then
      local want = spec[k]
      if want == nil then argerror(fname, n, where .. "unknown option '" .. tostring(k) .. "'", level) end
      local problem = option_problem(want, v)
      if problem then argerror(fname, n, where .. ("option '%s': %s"):format(k, problem), level) end
    end
  end
  return opts
end

-- Whether code point cp is shown escaped: C0 controls and DEL, the C1
-- controls (U+0080..U+009F: CSI is U+009B) and the bidirectional
-- overrides and isolates, which reorder what a terminal shows.
local function hidden(cp)
  return cp < 0x20 or (cp >= 0x7f and cp <= 0x9f) or (cp >= 0x202a and cp <= 0x202e)
    or (cp >= 0x2066 and cp <= 0x2069)
end

-- Text a process chose (a comm, STATUS=, a log line) made safe for a
-- terminal: what `hidden` names as "\x1b" or "\u202e", and each byte that
-- is not part of valid UTF-8 (a lone 0x9b is CSI to an 8-bit terminal) as
-- "\x9b"; the rest unchanged.
function M.printable(text)
  if not text:find("[%c\128-\255]") then return text end
  local out, i, n = {}, 1, #text
  while i <= n do
    local ok, cp = pcall(utf8.codepoint, text, i)
    if not ok then
      out[#out + 1] = ("\\x%02x"):format(text:byte(i))
      i = i + 1
    else
      local len = #utf8.char(cp)
      if hidden(cp) then
        out[#out + 1] = cp < 0x80 and ("\\x%02x"):format(cp) or ("\\u%04x"):format(cp)
      else
        out[#out + 1] = text:sub(i, i + len - 1)
      end
      i = i + len
    end
  end
  return table.concat(out)
end

-- A command-line mistake: said on stderr, and the command exits 2.
function M.usage_error(msg)
  io.stderr:write("takana: ", msg, "\n")
  os.exit(2)
end
local usage_error = M.usage_error

-- The CLI's: parses argv against {flag = "bool"|"value"|"list"}; returns options and
-- operands, or exits 2 with the mistake (see usage_error). A "list" flag may repeat; its values collect in order.
function M.parse_args(args, spec, cmd)
  local opts, rest = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--" then
      table.move(args, i + 1, #args, #rest + 1, rest)
      break
    elseif a:sub(1, 1) == "-" and #a > 1 then
      local name, inline = a:match("^%-%-?([^=]+)=(.*)$")
      name = name or a:match("^%-%-?(.+)$")
      local kind = spec[name]
      if kind == nil then usage_error(cmd .. ": unknown option '" .. a .. "' (see --help)") end
      if kind == "bool" then
        if inline then usage_error(cmd .. ": option '" .. name .. "' takes no value") end
        opts[name] = true
      else
        local v = inline
        if v == nil then
          i = i + 1
          v = args[i]
        end
        if v == nil then usage_error(cmd .. ": option '" .. name .. "' needs a value") end
        if kind == "list" then
          opts[name] = opts[name] or {}
          table.insert(opts[name], v)
        else
          opts[name] = v
        end
      end
    else
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  return opts, rest
end

return M
