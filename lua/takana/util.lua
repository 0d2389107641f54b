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
-- caller's to check. Returns opts, or {} for nil.
function M.check_options(fname, n, opts, spec, how)
  if opts == nil and not (how and how.required) then return {} end
  if type(opts) ~= "table" then argerror(fname, n, "table expected, got " .. type(opts), 2) end
  local positional = how and how.positional
  for k, v in pairs(opts) do
    if not (positional and math.type(k) == "integer") then
      local want = spec[k]
      if want == nil then argerror(fname, n, "unknown option '" .. tostring(k) .. "'", 2) end
      local problem = option_problem(want, v)
      if problem then argerror(fname, n, ("option '%s': %s"):format(k, problem), 2) end
    end
  end
  return opts
end

-- Whole file, or nil, "path: message", errno.
-- Text a process chose (a comm, STATUS=, a log line) made safe for a
-- terminal: C0 controls and DEL as "\x1b", and the C1 controls UTF-8 spells
-- as two bytes (U+0080..U+009F: CSI is U+009B) as "\u009b".
function M.printable(text)
  return (text:gsub("%c", function(c) return ("\\x%02x"):format(c:byte()) end)
    :gsub("\194([\128-\159])", function(c) return ("\\u%04x"):format(c:byte()) end))
end

function M.read_file(path)
  local f, err, errno = io.open(path, "rb")
  if not f then return nil, err, errno end
  local s, rerr, rerrno = f:read("a")
  f:close()
  if not s then return nil, rerr, rerrno end
  return s
end

-- The first line of a file, without its newline; nil when it cannot be read.
function M.first_line(path)
  local f = io.open(path)
  if not f then return nil end
  local l = f:read("l")
  f:close()
  return l
end

-- The unified-hierarchy path of a process, from /proc/<pid>/cgroup's "0::"
-- line (relative to the reader's cgroup namespace, so it may begin with
-- ".."); false when it is in no cgroup2 hierarchy; nil, "path: message",
-- errno when the file cannot be read (ENOENT: the process is gone).
function M.proc_cgroup(pid)
  local text, err, errno = M.read_file("/proc/" .. pid .. "/cgroup")
  if not text then return nil, err, errno end
  return text:match("\n0::([^\n]*)") or text:match("^0::([^\n]*)") or false
end

-- mountinfo escapes space, tab, newline and backslash as \ooo.
local function unescape(s)
  if not s:find("\\", 1, true) then return s end
  return (s:gsub("\\(%d%d%d)", function(o) return string.char(tonumber(o, 8)) end))
end

-- The mounts /proc/self/mountinfo lists: an iterator of root (the mounted
-- directory inside its filesystem), mount point, filesystem type and
-- superblock options, paths unescaped; or nil, "path: message", errno.
function M.mounts()
  local text, err, errno = M.read_file("/proc/self/mountinfo")
  if not text then return nil, err, errno end
  local lines = text:gmatch("[^\n]+")
  return function()
    for line in lines do
      local root, point, fstype, options = line:match("^%S+ %S+ %S+ (%S+) (%S+) .- %- (%S+) %S+ (%S+)")
      if root then return unescape(root), unescape(point), fstype, options end
    end
  end
end

return M
