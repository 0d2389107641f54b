--- cgroup v2 handles: O(1) accounting, limits that are applied and verified
-- or fail with the reason, and the unit lifecycle. The C side
-- (csrc/lua_cgroup.c) owns descriptors and parsing; this file owns policy:
-- where controllers live, why a section is absent, what a failed write means.
-- @module takana.cgroup
local core = require "takana.core"

local methods = core.cgroup_methods
local EBUSY, EINVAL, ENOENT, ETIMEDOUT, EIO = 16, 22, 2, 110, 5

local function argerror(fname, n, msg)
  error(("bad argument #%d to '%s' (%s)"):format(n, fname, msg), 3)
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

--- Where cgroup hierarchies are mounted: `{v2 = path|nil, v1 = {ctrl = path}}`.
local function mounts()
  local r = { v1 = {} }
  for line in io.lines("/proc/self/mountinfo") do
    local mnt, fstype, opts = line:match("^%S+ %S+ %S+ %S+ (%S+) .- %- (%S+) %S+ (%S+)")
    if fstype == "cgroup2" and not r.v2 then
      r.v2 = mnt
    elseif fstype == "cgroup" then
      for opt in opts:gmatch("[^,]+") do
        if opt ~= "rw" and opt ~= "ro" and not opt:find("=") then r.v1[opt] = r.v1[opt] or mnt end
      end
    end
  end
  return r
end

-- /proc/cgroups: {ctrl = {hierarchy = n, enabled = bool}}; hierarchy 0 is v2.
local function proc_cgroups()
  local r = {}
  for line in (read_file("/proc/cgroups") or ""):gmatch("[^\n]+") do
    local name, hier, _, enabled = line:match("^(%S+)%s+(%d+)%s+(%d+)%s+(%d+)")
    if name then r[name] = { hierarchy = tonumber(hier), enabled = enabled == "1" } end
  end
  return r
end

local function mode_of(m)
  if m.v2 and next(m.v1) then return "hybrid" end
  if m.v2 then return "unified" end
  if next(m.v1) then return "legacy" end
  return "none"
end

-- Lexical checks before the kernel's own (openat2 RESOLVE_BENEATH...).
local function check_path(fname, path)
  if type(path) ~= "string" then argerror(fname, 1, "string expected, got " .. type(path)) end
  if path:find("\0", 1, true) then argerror(fname, 1, "path contains a NUL byte") end
  if #path > 4095 then argerror(fname, 1, "path longer than 4095 bytes") end
  local parts = {}
  for comp in path:gmatch("[^/]+") do
    if comp == "." or comp == ".." then
      argerror(fname, 1, "path component '" .. comp .. "' refused: paths stay beneath the cgroup2 mount")
    end
    if #comp > 255 then argerror(fname, 1, "path component longer than 255 bytes") end
    parts[#parts + 1] = comp
  end
  return table.concat(parts, "/")
end

local function open(rel)
  local m = mounts()
  if not m.v2 then
    return nil, "cgroup: no cgroup2 hierarchy is mounted (see /proc/self/mountinfo)", ENOENT
  end
  return core.cgroup_open(m.v2, rel)
end

-- The unified-hierarchy path of a process, from /proc/<pid>/cgroup's "0::" line.
local function path_of(pid)
  local text = read_file(("/proc/%s/cgroup"):format(pid))
  if not text then return nil, ("cgroup.of %s: No such process"):format(pid), 3 end
  local p = text:match("\n0::([^\n]*)") or text:match("^0::([^\n]*)")
  if not p then return nil, ("cgroup.of %s: the process is in no cgroup2 hierarchy"):format(pid), ENOENT end
  return p
end

local C = setmetatable({}, {
  --- Opens a cgroup by its path relative to the cgroup2 mount.
  -- `..`, `.`, NUL bytes and names over 255 bytes are refused; the kernel
  -- resolves the rest beneath the mount without symlinks or mount crossings.
  -- @function cgroup
  -- @string path e.g. "system.slice/foo.service" (a leading "/" is the mount root)
  -- @treturn[1] cgroup handle with `.path`
  -- @treturn[2] nil, message, errno
  __call = function(_, path, ...)
    if select("#", ...) > 0 then argerror("cgroup", 2, "no more than 1 argument expected") end
    return open(check_path("cgroup", path))
  end,
})

--- The calling process's cgroup.
function C.self()
  local p, err, errno = path_of("self")
  if not p then return nil, err, errno end
  return open(check_path("cgroup.self", p))
end

--- The cgroup of a process, by pid or pidfd object.
function C.of(who)
  local pid = who
  if type(who) == "userdata" or type(who) == "table" then pid = who.pid end
  if math.type(pid) ~= "integer" or pid <= 0 or pid > 0x7fffffff then
    argerror("cgroup.of", 1, "pid or pidfd expected")
  end
  local p, err, errno = path_of(pid)
  if not p then return nil, err, errno end
  return open(check_path("cgroup.of", p))
end

C.mounts = mounts
C.proc_cgroups = proc_cgroups

--- What this host offers: mode, v2 mount, v2 controllers, v1 mounts.
function C.probe()
  local m = mounts()
  local r = { mode = mode_of(m), v2_mount = m.v2, v1 = m.v1, ok = m.v2 ~= nil }
  if m.v2 then
    local list = read_file(m.v2 .. "/cgroup.controllers") or ""
    r.v2_controllers = {}
    for c in list:gmatch("%S+") do r.v2_controllers[#r.v2_controllers + 1] = c end
  else
    r.why = "no cgroup2 hierarchy is mounted"
  end
  return r
end

-- Why controller ctrl's files are missing in cg.
local function controller_reason(cg, ctrl)
  local info = proc_cgroups()[ctrl]
  local m = mounts()
  if ctrl ~= "cpu" and ctrl ~= "io" and not info then
    return ("%s controller is not compiled into this kernel"):format(ctrl)
  end
  if info and not info.enabled then
    return ("%s controller is disabled (cgroup_disable=%s on the kernel command line)"):format(ctrl, ctrl)
  end
  if info and info.hierarchy ~= 0 then
    return ("%s controller is bound to cgroup v1 (%s) on this %s host"):format(
      ctrl, m.v1[ctrl] or "a v1 hierarchy", mode_of(m))
  end
  if cg.relpath == "" then
    return ("the root cgroup has no %s.* interface files"):format(ctrl)
  end
  local parent = cg.relpath:match("^(.*)/[^/]*$") or ""
  local sc = read_file(m.v2 .. "/" .. parent .. (parent == "" and "" or "/") .. "cgroup.subtree_control") or ""
  if not (" " .. sc .. " "):find("[%s]" .. ctrl .. "[%s]") then
    return ("%s not enabled in the parent's cgroup.subtree_control (/%s)"):format(ctrl, parent)
  end
  return ("%s files are missing for an unknown reason"):format(ctrl)
end

--- Why a section is absent from `cg:stat()`; nil when it is present.
-- @string section "cpu", "memory", "pids", "pressure" or "events"
function methods:why(section)
  local known = { cpu = 1, memory = 1, pids = 1, pressure = 1, events = 1 }
  if not known[section] then argerror("why", 1, "unknown section '" .. tostring(section) .. "'") end
  local st, err = self:stat()
  if not st then return err end
  if st[section] then return nil end
  if section == "memory" or section == "pids" then return controller_reason(self, section) end
  if section == "pressure" then
    if not read_file("/proc/pressure/cpu") then
      return "pressure stall information is off (kernel without CONFIG_PSI, or booted with psi=0)"
    end
    return "pressure files are disabled for this cgroup (cgroup.pressure is 0)"
  end
  if section == "events" then return "the root cgroup has no cgroup.events" end
  return "cpu.stat is missing (kernel older than 4.15)"
end

-- Limits: file -> {controller, kind}
local limits = {
  ["memory.max"] = "memory", ["memory.high"] = "memory", ["memory.low"] = "memory",
  ["memory.min"] = "memory", ["pids.max"] = "pids", ["cpu.weight"] = "cpu",
  ["cpu.max"] = "cpu", ["io.weight"] = "io",
}
local MAXINT = math.maxinteger

local function format_value(key, v)
  local function bad(msg) argerror("set", 2, key .. ": " .. msg) end
  local function count(x, lo, hi, allow_max)
    if x == "max" and allow_max then return "max" end
    -- 64 * 2^20 is a float in Lua; accept floats with an exact integer value.
    x = math.type(x) == "float" and math.tointeger(x) or x
    if math.type(x) ~= "integer" then bad(allow_max and "integer or \"max\" expected" or "integer expected") end
    if x < lo or x > hi then bad(("must be in %d..%d"):format(lo, hi)) end
    return tostring(x)
  end
  if key == "cpu.weight" then return count(v, 1, 10000, false) end
  if key == "io.weight" then return "default " .. count(v, 1, 10000, false) end
  if key == "cpu.max" then
    if v == "max" then return "max" end
    if math.type(v) == "integer" then return count(v, 1000, MAXINT, false) end
    if type(v) == "table" then
      return count(v[1], 1000, MAXINT, true) .. " " .. count(v[2], 1000, 1000000, false)
    end
    bad("\"max\", a quota in µs or {quota, period} expected")
  end
  return count(v, 0, MAXINT, true)
end

local function parse_readback(key, text)
  text = text:gsub("%s+$", "")
  if key == "io.weight" then return tonumber(text:match("^default (%d+)")) end
  if key == "cpu.max" then
    local q, p = text:match("^(%S+) (%d+)$")
    return { q == "max" and "max" or math.tointeger(tonumber(q)), math.tointeger(tonumber(p)) }
  end
  if text == "max" then return "max" end
  return math.tointeger(tonumber(text))
end

local function same(key, want, got)
  if key == "cpu.max" then
    if want == "max" then return got[1] == "max" end
    if math.type(want) == "integer" then return got[1] == want end
    return got[1] == want[1] and got[2] == want[2]
  end
  return want == got
end

local function set_one(self, key, value)
  local text = format_value(key, value)
  if math.type(value) == "float" then value = math.tointeger(value) end
  local ok, err, errno = self:_write(key, text)
  if not ok then
    local exists = self:get(key)
    if not exists then
      return nil, ("set %s: %s"):format(key, controller_reason(self, limits[key])), errno
    end
    if errno == EINVAL then
      return nil, ("set %s: the kernel refused '%s' (Invalid argument)"):format(key, text), errno
    end
    if errno == EBUSY then
      return nil, ("set %s: %s (Device or resource busy)"):format(key,
        "the kernel refused the change now, e.g. a limit below current usage or a controller in use"), errno
    end
    return nil, "set " .. err, errno
  end
  local back = self:get(key)
  if not back then return nil, ("set %s: written, but it cannot be read back"):format(key), EIO end
  local got = parse_readback(key, back)
  if same(key, value, got) then return got end
  -- Memory values are rounded down to the page size; that is applied.
  if key:match("^memory%.") and math.type(value) == "integer" and math.type(got) == "integer"
      and got <= value and value - got < 65536 then
    return got
  end
  return nil, ("set %s: wrote '%s' but the kernel reports '%s'"):format(key, text, back:gsub("%s+$", "")), EIO
end

--- Applies a limit and verifies it by reading it back.
-- `cg:set(key, value)` or `cg:set{key = value, ...}`. Keys: memory.max,
-- memory.high, memory.low, memory.min, pids.max, cpu.weight, cpu.max
-- (quota µs, or {quota, period}), io.weight; "max" means unlimited.
-- @treturn[1] the applied value (rounded as the kernel did), or a table of them
-- @treturn[2] nil, "set key: why", errno
function methods:set(key, value)
  if type(key) == "table" then
    if value ~= nil then argerror("set", 2, "no value expected with a table") end
    local keys = {}
    for k in pairs(key) do
      if not limits[k] then argerror("set", 1, "unknown limit '" .. tostring(k) .. "'") end
      keys[#keys + 1] = k
    end
    table.sort(keys)
    local applied = {}
    for _, k in ipairs(keys) do
      local got, err, errno = set_one(self, k, key[k])
      if got == nil then
        local done = #keys > 1 and next(applied) and " (applied before it: " .. table.concat((function()
          local t = {} for a in pairs(applied) do t[#t + 1] = a end table.sort(t) return t end)(), ", ") .. ")" or ""
        return nil, err .. done, errno
      end
      applied[k] = got
    end
    return applied
  end
  if not limits[key] then argerror("set", 1, "unknown limit '" .. tostring(key) .. "'") end
  return set_one(self, key, value)
end

--- Creates a child cgroup and opens it.
function methods:mkdir(name)
  if type(name) ~= "string" or name == "" or name:find("[/%z]") or name == "." or name == ".." or #name > 255 then
    argerror("mkdir", 1, "a plain directory name expected")
  end
  local ok, err, errno = self:_mkdir(name)
  if not ok then return nil, err, errno end
  local rel = self.relpath == "" and name or self.relpath .. "/" .. name
  return core.cgroup_open(self.mount, rel)
end

local function controller_list(fname, list)
  if type(list) ~= "table" then argerror(fname, 1, "table of controller names expected") end
  for i, c in ipairs(list) do
    if type(c) ~= "string" or not c:match("^[%w_]+$") then
      argerror(fname, 1, ("controller #%d: a name expected"):format(i))
    end
  end
  return list
end

local function toggle(self, fname, list, sign)
  controller_list(fname, list)
  for _, c in ipairs(list) do
    local ok, _, errno = self:_write("cgroup.subtree_control", sign .. c)
    if not ok then
      local available = " " .. (self:get("cgroup.controllers") or "") .. " "
      local why
      if sign == "+" and not available:find("%s" .. c .. "%s") then
        why = controller_reason(self, c)
        if why:match("not enabled in the parent") then
          why = c .. " is not in this cgroup's cgroup.controllers (enable it in the parent first)"
        end
      elseif errno == EBUSY then
        why = "Device or resource busy (a cgroup with processes cannot enable controllers for its children)"
      else
        why = "errno " .. errno
      end
      return nil, ("%s %s: %s"):format(fname, c, why), errno
    end
  end
  local enabled = {}
  for c in (self:get("cgroup.subtree_control") or ""):gmatch("%S+") do enabled[#enabled + 1] = c end
  return enabled
end

--- Enables controllers for the children (cgroup.subtree_control).
-- @treturn[1] {string,...} the controllers enabled now, read back
-- @treturn[2] nil, "enable memory: why", errno
function methods:enable(list) return toggle(self, "enable", list, "+") end
--- Disables controllers for the children.
function methods:disable(list) return toggle(self, "disable", list, "-") end

--- Moves a process (pid or pidfd object) into the cgroup.
function methods:attach(who)
  local pid = who
  if type(who) == "userdata" then pid = who.pid end
  if math.type(pid) ~= "integer" or pid <= 0 or pid > 0x7fffffff then
    argerror("attach", 1, "pid or pidfd expected")
  end
  local ok, err, errno
  -- A task still being created reads as EINVAL for a moment (as runc retries).
  for attempt = 1, 5 do
    ok, err, errno = self:_write("cgroup.procs", tostring(pid))
    if ok or errno ~= EINVAL then break end
    core.poll_fds({}, 0.03 * attempt)
  end
  if not ok then return nil, "attach " .. pid .. ": " .. err, errno end
  return true
end

--- The pids in the cgroup (cgroup.procs), in the kernel's order.
function methods:procs()
  local text, err, errno = self:get("cgroup.procs")
  if not text then return nil, err, errno end
  local r = {}
  for p in text:gmatch("%d+") do r[#r + 1] = tonumber(p) end
  return r
end

local function wait_frozen(self, want, timeout)
  local fd = self:fileno()
  local deadline = core.monotime() + timeout
  while true do
    local ev = (self:stat() or {}).events
    if ev and ev.frozen == want then return true end
    local left = deadline - core.monotime()
    if left <= 0 then return false end
    core.poll_fds({ fd }, math.min(left, 0.05), { true })
  end
end

--- Freezes every process of the unit and waits until cgroup.events says so.
-- @number[opt=5] timeout seconds
-- @treturn[1] true
-- @treturn[2] nil, message, ETIMEDOUT (the cgroup is thawed again)
function methods:freeze(timeout)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0 or timeout ~= timeout) then
    argerror("freeze", 1, "timeout in seconds expected")
  end
  local ok, err, errno = self:_write("cgroup.freeze", "1")
  if not ok then return nil, "freeze: " .. err, errno end
  if wait_frozen(self, true, timeout or 5) then return true end
  self:_write("cgroup.freeze", "0")
  return nil, ("freeze %s: not frozen after %gs; thawed again"):format(self.path, timeout or 5), ETIMEDOUT
end

--- Thaws the unit.
function methods:thaw()
  local ok, err, errno = self:_write("cgroup.freeze", "0")
  if not ok then return nil, "thaw: " .. err, errno end
  wait_frozen(self, false, 5)
  return true
end

--- Kills every process of the unit: cgroup.kill (5.14+), else freeze, SIGKILL
-- each, thaw, until empty.
function methods:kill()
  local ok, err, errno = self:_write("cgroup.kill", "1")
  if ok then return true end
  if errno ~= ENOENT and errno ~= 13 then return nil, "kill: " .. err, errno end
  for _ = 1, 10 do
    local procs = self:procs() or {}
    if #procs == 0 then return true end
    self:freeze(1)
    for _, pid in ipairs(procs) do
      local p = core.pidfd(pid)
      if p then p:signal(9) p:close() end
    end
    self:thaw()
  end
  return nil, "kill: processes keep appearing in " .. self.path, EBUSY
end

--- Removes the (empty) cgroup directory; refuses a populated one.
function methods:remove()
  local st, serr, serrno = self:stat()
  if not st then return nil, "remove: " .. serr, serrno end
  if st.events and st.events.populated then
    local n = #(self:procs() or {})
    return nil, ("remove %s: the cgroup is populated (%d processes here or below); kill them first")
      :format(self.path, n), EBUSY
  end
  if self.relpath == "" then return nil, "remove: refusing to remove the cgroup2 root", EINVAL end
  local ok, err, errno
  local delay = 0.001
  for _ = 1, 8 do
    ok, err, errno = self:_rmdir(self.relpath)
    if ok or errno ~= EBUSY then break end
    core.poll_fds({}, delay)
    delay = delay * 2
  end
  if not ok then return nil, ("remove %s: %s"):format(self.path, err:gsub("^remove: ", "")), errno end
  self:close()
  return true
end

return C
