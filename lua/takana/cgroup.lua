--- cgroup v2 handles: O(1) accounting, limits that are applied and verified
-- or fail with the reason, and the unit lifecycle. The C side
-- (csrc/lua/lua_cgroup.c) owns descriptors and parsing; this file owns policy:
-- where controllers live, why a section is absent, what a failed write means.
--
-- A handle's cgroup are exactly the documented ones; the raw writes,
-- mkdir and rmdir behind them are takana.core functions that keep to the
-- same path rules (plain names inside the handle's own directory).
--
-- Polling a handle: `cg:fileno()` (and `pollfd()`) is the cgroup's
-- cgroup.events descriptor, which the kernel marks POLLPRI when `populated`
-- or `frozen` changes; `cg:events()` is "p". `takana.poll{cg}` and
-- `cqueues.poll(cg)` use POLLPRI by themselves; under luv poll it with
-- `uv.new_poll(cg:fileno()):start("p", cb)`, never "r" (a regular file is
-- always readable: "r" fires at once, forever). After a wake, `cg:state()`
-- reads the new state and re-arms the descriptor. Closing a handle tells
-- cqueues to forget the descriptor; a luv poll handle is stopped by its
-- owner before the cgroup handle is closed.
-- @module takana.cgroup
local core = require "takana.core"
local util = require "takana.util"

local cgroup = core.cgroup_methods
local E = core.errno
local ESRCH, EBUSY, EINVAL, ENOENT, ETIMEDOUT, EIO = E.ESRCH, E.EBUSY, E.EINVAL, E.ENOENT, E.ETIMEDOUT, E.EIO
local EPERM, EACCES, EAGAIN, EDEADLK, EXDEV, EOPNOTSUPP = E.EPERM, E.EACCES, E.EAGAIN, E.EDEADLK, E.EXDEV,
  E.EOPNOTSUPP
local EEXIST, ENOTDIR, ENODEV = E.EEXIST, E.ENOTDIR, E.ENODEV

-- Directories a search or a subtree walk may visit: far more than any
-- real hierarchy, small enough to bound the time.
local MAX_DIRS = 100000

local argerror, nargs = util.argerror, util.nargs
local YEAR = 86400 * 365

-- An option in seconds, 0 to 1 year (util.check_options).
local function seconds(v)
  if not (type(v) == "number" and v >= 0 and v <= YEAR) then
    return ("seconds expected (0 to 1 year), got %s"):format(tostring(v))
  end
end

local options = util.check_options

-- Where the hierarchies are mounted, as the core reads /proc/self/mountinfo
-- (the same choice of cgroup2 mount as its cgroup ids are read against).
local parse_mounts = core.cgroup_mounts
local cached_path = core.cgroup_path_cached

-- The parsed mount table, kept until the kernel flags a mount or unmount
-- (core.mounts_changed): read-only for its users here.
local mount_table
local function cached_mounts()
  if core.mounts_changed() or not mount_table then
    local err, errno
    mount_table, err, errno = parse_mounts()
    if not mount_table then return nil, err, errno end
  end
  return mount_table
end

local function mounts(...)
  nargs("cgroup.mounts", 0, select("#", ...))
  local m, err, errno = cached_mounts()
  if not m then return nil, err, errno end
  local v1 = {}
  for k, v in pairs(m.v1) do v1[k] = v end
  return { v1 = v1, v2 = m.v2, v2_root = m.v2_root }
end

local function proc_cgroups(...)
  nargs("cgroup.proc_cgroups", 0, select("#", ...))
  return core.proc_cgroups() or {}
end

local function mode_of(m)
  if m.v2 and next(m.v1) then return "hybrid" end
  if m.v2 then return "unified" end
  if next(m.v1) then return "legacy" end
  return "none"
end

-- Lexical checks before the kernel's own (openat2 RESOLVE_BENEATH...).
-- level: as util.argerror's, from check_path's caller (2 blames the caller
-- of the public function that calls check_path).
local function check_path(fname, path, level)
  if type(path) ~= "string" then argerror(fname, 1, "string expected, got " .. type(path), level) end
  if path:find("\0", 1, true) then argerror(fname, 1, "path contains a NUL byte", level) end
  if #path > 4095 then argerror(fname, 1, "path longer than 4095 bytes", level) end
  local parts = {}
  for comp in path:gmatch("[^/]+") do
    if comp == "." or comp == ".." then
      argerror(fname, 1, "path component '" .. comp .. "' refused: paths stay beneath the cgroup2 mount", level)
    end
    if #comp > 255 then argerror(fname, 1, "path component longer than 255 bytes", level) end
    parts[#parts + 1] = comp
  end
  return table.concat(parts, "/")
end

local function v2_mount()
  local m, err, errno = cached_mounts()
  if not m then return nil, err, errno end
  if not m.v2 then
    return nil, "cgroup: no cgroup2 hierarchy is mounted (see /proc/self/mountinfo)", ENOENT
  end
  return m
end

local function open(rel)
  local m, err, errno = v2_mount()
  if not m then return nil, err, errno end
  return core.cgroup_open(m.v2, rel)
end

-- The unified-hierarchy path of a process, from /proc/<pid>/cgroup's "0::"
-- line: relative to the reader's cgroup namespace, so it may begin with "..".
local function path_of(fname, pid)
  local p, err, errno = core.proc_cgroup(pid)
  if p == nil then
    if errno == ENOENT then return nil, ("%s: no such process"):format(fname), ESRCH end
    return nil, ("%s: %s"):format(fname, err), errno
  end
  if not p then return nil, ("%s: the process is in no cgroup2 hierarchy"):format(fname), ENOENT end
  return p
end

local function components(path)
  local t = {}
  for c in path:gmatch("[^/]+") do t[#t + 1] = c end
  return t
end

local function ups(t)
  local k = 0
  while t[k + 1] == ".." do k = k + 1 end
  return k
end

-- Where the cgroup p (a /proc/<pid>/cgroup path, relative to our cgroup
-- namespace's root) lies beneath the mount m (whose root m.v2_root is
-- relative to that same root). The kernel prints both as shortest paths,
-- so ".." only leads. When the mount's root is k levels above our
-- namespace's root, a path going up j < k levels passes through k - j
-- directories whose names no file shows: the one that holds pid (or has
-- cgroup id id) is searched for that many levels beneath the mount.
local function locate(fname, m, p, pid, id)
  local M, P = components(m.v2_root or "/"), components(p)
  local k, j = ups(M), ups(P)
  local function outside()
    return nil, ("%s: its cgroup %s is outside the cgroup2 mount %s (whose root is %s in this cgroup namespace)")
      :format(fname, p, m.v2, m.v2_root), ENOENT
  end
  if j > k then return outside() end
  if j == k then
    for i = k + 1, #M do
      if P[i] ~= M[i] then return outside() end
    end
    return table.concat(P, "/", #M + 1)
  end
  if #M > k then return outside() end
  local suffix = table.concat(P, "/", j + 1)
  local rel, err, errno = core.cgroup_find(m.v2, k - j, suffix, pid or 0, id or 0, MAX_DIRS)
  if not rel then
    return nil, ("%s: the cgroup2 mount %s shows the hierarchy from above this cgroup namespace's root "
      .. "(its root is %s here), and no cgroup %d level%s beneath it holds the process (%s); "
      .. "mount cgroup2 again inside the namespace"):format(fname, m.v2, m.v2_root, k - j,
      k - j == 1 and "" or "s", err), errno
  end
  return rel
end

-- Opens the cgroup of pid: "self" or a number.
local function open_of(fname, pid, id)
  local m, err, errno = v2_mount()
  if not m then return nil, err, errno end
  local p
  p, err, errno = path_of(fname, pid)
  if not p then return nil, err, errno end
  if pid == "self" then pid = core.getpid() end
  local rel
  rel, err, errno = locate(fname, m, p, pid, id)
  if not rel then return nil, err, errno end
  local cg
  cg, err, errno = core.cgroup_open(m.v2, check_path(fname, rel))
  if not cg then return nil, fname .. ": " .. err, errno end
  return cg
end

local M = setmetatable({}, {
  --- Opens a cgroup by its path relative to the cgroup2 mount.
  -- `..`, `.`, NUL bytes and names over 255 bytes are refused; the kernel
  -- resolves the rest beneath the mount without symlinks or mount crossings.
  -- An integer is a cgroup id, resolved by `takana.cgroup.path(id)`.
  -- @function cgroup
  -- @tparam string|int path e.g. "system.slice/foo.service" (a leading "/"
  --   is the mount root), or a cgroup id
  -- @treturn[1] cgroup handle with `.path`: "/" for the mount's root, else
  --   "/a/b" relative to the mount (the spelling `cgroup.path(id)` gives)
  -- @treturn[2] nil, message, errno
  __call = function(M, path, ...)
    if select("#", ...) > 0 then argerror("cgroup", 2, "no more than 1 argument expected") end
    -- An integer is a cgroup id (records' and events' cgroup_id).
    if math.type(path) == "integer" then
      if path <= 0 then argerror("cgroup", 1, "cgroup id must be positive") end
      local rel, err, errno = M.path(path)
      if not rel then return nil, err, errno end
      return open(check_path("cgroup", rel, 2))
    end
    return open(check_path("cgroup", path, 2))
  end,
})

--- The path of a cgroup from its id (`cgroup_id` of records and events),
-- spelled as every takana path is: "/" for the cgroup2 mount's root, else
-- "/a/b" relative to the mount (`handle.path`, `snap:cgroup`, the CLI).
-- With `CAP_DAC_READ_SEARCH` the kernel opens the cgroup from the id
-- (`open_by_handle_at`); without it, a walk of the hierarchy. Each answer is
-- cached per Lua state (id -> path, shared with `snap:cgroup`): an inotify
-- watch on the parents of cached cgroups vouches for it (one read), and
-- after any removal each is checked once against its id (fstatat: a
-- cgroup2 directory's inode number is its id), so a removed cgroup is
-- never named, and one made again under the same name (a new id) is not
-- mistaken for the old. About 0.5 us a call after the first
-- (bench/cgroup.lua).
-- @int id
-- @treturn[1] string the path, e.g. "/system.slice/foo.service"
-- @treturn[2] nil, message, errno (ENOENT: no cgroup has that id, e.g. removed)
function M.path(id, ...)
  nargs("cgroup.path", 1, select("#", ...) + 1)
  if math.type(id) ~= "integer" or id <= 0 then
    argerror("cgroup.path", 1, "cgroup id (a positive integer) expected, got " ..
      (math.type(id) or type(id)))
  end
  -- The cache first: a hit needs no look at the mount table.
  local hit = cached_path(id)
  if hit then return hit end
  local m, err, errno = v2_mount()
  if not m then return nil, err, errno end
  return core.cgroup_path(m.v2, id)
end

--- The calling process's cgroup.
-- Inside a cgroup namespace whose cgroup2 mount shows the hierarchy from
-- above the namespace's root, the cgroup is found beneath the mount by its
-- membership.
-- @function self
-- @treturn[1] cgroup handle
-- @treturn[2] nil, message, errno
function M.self(...)
  nargs("cgroup.self", 0, select("#", ...))
  return open_of("cgroup.self", "self")
end

-- The pid a pidfd object refers to now; ESRCH once its process was reaped.
local function pidfd_pid(fname, who)
  local fd = who:fileno()
  local pid, err, errno = core.pidfd_pid(fd)
  if pid then return pid, fd end
  if errno == ESRCH then
    return nil, ("%s: process %d has exited and was reaped (its pidfd refers to no process; the pid may belong to another process now)")
      :format(fname, who.pid), ESRCH
  end
  if errno == EXDEV then
    return nil, ("%s: process %d is outside this process's pid namespace"):format(fname, who.pid), ESRCH
  end
  return nil, ("%s: %s"):format(fname, err), errno
end

local function is_pidfd(who)
  return type(who) == "userdata" and core.is_pidfd(who)
end

--- The cgroup of a process, by pid or pidfd object.
-- With a pidfd the answer is that process's, never another's that reused
-- the pid: the pid is read through the descriptor, the cgroup is read, and
-- the descriptor is checked to still hold a live (unreaped) process; where
-- the kernel offers `PIDFD_GET_INFO` (6.13+) the cgroup id is compared too.
-- @tparam int|pidfd who
-- @treturn[1] cgroup handle
-- @treturn[2] nil, message, errno (ESRCH: the process is gone)
function M.of(who, ...)
  nargs("cgroup.of", 1, select("#", ...) + 1)
  if is_pidfd(who) then
    local fname = ("cgroup.of %s"):format(who.pid)
    for _ = 1, 5 do
      local pid, fd, errno = pidfd_pid(fname, who)
      if not pid then return nil, fd, errno end
      local id = core.pidfd_cgroup_id(fd)
      local cg, err
      cg, err, errno = open_of(fname, pid, id)
      local again, aerr, aerrno = pidfd_pid(fname, who)
      if not again then
        if cg then cg:close() end
        return nil, aerr, aerrno
      end
      if not cg then return nil, err, errno end
      -- Moved between reading its cgroup and opening it: read again.
      if not id or core.cgroup_id(cg) == id then return cg end
      cg:close()
    end
    return nil, ("cgroup.of %s: the process keeps moving between cgroups"):format(who.pid), EAGAIN
  end
  local pid = who
  if type(who) == "table" then pid = who.pid end
  if math.type(pid) ~= "integer" or pid <= 0 or pid > 0x7fffffff then
    argerror("cgroup.of", 1, "pid or pidfd expected")
  end
  return open_of(("cgroup.of %d"):format(pid), pid)
end

--- A cgroup subtree kept open: every cgroup beneath (and including) a
-- root, followed as cgroups are made, removed or renamed, and read in one
-- call. It holds one directory descriptor per cgroup and no more (the
-- stat files are opened for each read), plus an inotify descriptor whose
-- watch on every directory says which directories changed; those, and
-- every one after the queue overflowed, are listed again at the next
-- call, so no cgroup is ever missed or kept past its removal (the
-- root's own removal is checked on each call: cgroupfs sends no
-- `IN_DELETE_SELF`). Where
-- inotify is refused (`fs.inotify.max_user_instances` or
-- `max_user_watches`), the directories without a watch are listed on every
-- call instead, and `tree.watch` says why.
--
-- Methods and fields of the tree (a handle: `close`, `__gc` and
-- `__close` are one; a closed tree raises on use):
--
-- * `tree:stat()` -> `{["/a/b"] = st, ...}`: every cgroup's stat, keyed by
--   its path, each `st` with exactly the sections and keys of
--   `cg:stat()` for that cgroup (the same code reads them). A cgroup
--   removed during the call is left out, not an error. Errors: `nil,
--   "tree:stat /a/b: stat <file>: message", errno` when a present file
--   cannot be read; ENOENT when the tree's root was removed (ESTALE if it
--   were renamed: cgroup2 refuses renames today); EMFILE as below.
-- * `tree:paths()` -> the paths, sorted (`"/a"`, `"/a/b"`, ...).
-- * `tree:refresh()` -> true: reads the watch's news now (stat and paths
--   do it first by themselves).
-- * `tree:fileno()` (and `pollfd()`): the inotify descriptor, readable
--   ("r": `tree:events()`) when a cgroup was made, removed or renamed
--   beneath the root; any call above drains it. `nil, message, errno`
--   without inotify.
-- * `tree.path` (the root's), `tree.mount`, `tree.watch` (true, or why a
--   directory is listed on every call), `tree.fds` (descriptors held),
--   `tree.overflows` (times the inotify queue overflowed and every
--   directory was listed again), and `tree.skipped`: the subtrees
--   left out, `{{path=, errno=, error=}, ...}` sorted by path: EACCES (a
--   directory this process may not list, e.g. delegated to another user)
--   and ENAMETOOLONG (a path past 4095 bytes, which takana.cgroup could
--   not open either).
--
-- Descriptors: one directory descriptor per cgroup, so a login's 1,024
-- fits about 1,000 cgroups; a tree that would leave fewer than 8 of
-- `RLIMIT_NOFILE` free fails with EMFILE and says so (raise `ulimit -n` or
-- take a smaller subtree). The stat files' descriptors are kept too, but
-- only while the process has more than half of `RLIMIT_NOFILE` free (then a
-- read is one pread instead of openat, pread and close, a third of the
-- cost), and they are the first given back when a new cgroup needs a
-- directory descriptor. On the project's (loaded) test host: 15-20 us a
-- cgroup at 10 cgroups, 21-32 us at 100, 50-90 us at 1,000, against 48-206
-- us for open/stat/close of each (bench/cgroup.lua).
-- @tparam string|cgroup path "/a/b" relative to the cgroup2 mount ("/" its
--   root), as `takana.cgroup` takes it, or an open cgroup handle (its own
--   directory is the root)
-- @treturn[1] tree
-- @treturn[2] nil, message, errno (ENOENT: no such cgroup; EMFILE: too few
--   descriptors)
-- @usage local tree = assert(takana.cgroup.tree("/system.slice"))
-- for path, st in pairs(assert(tree:stat())) do
--   print(path, st.cpu and st.cpu.usage_ns)
-- end
function M.tree(path, ...)
  nargs("cgroup.tree", 1, select("#", ...) + 1)
  if type(path) == "userdata" then return core.cgroup_tree(path) end
  if type(path) ~= "string" then
    argerror("cgroup.tree", 1, "path or cgroup handle expected, got " .. type(path))
  end
  local rel = check_path("cgroup.tree", path, 2)
  local m, err, errno = v2_mount()
  if not m then return nil, err, errno end
  return core.cgroup_tree(m.v2, rel)
end

--- Where cgroup hierarchies are mounted: `{v2 = path|nil, v2_root = root|nil,
-- v1 = {ctrl = path}}`. `v2_root` is the mount's root as this process's
-- cgroup namespace sees it: "/" normally, "/.." or deeper when the mount
-- shows the hierarchy from above the namespace's root.
-- @treturn[1] table
-- @treturn[2] nil, message, errno when /proc/self/mountinfo cannot be read
-- @function mounts
M.mounts = mounts

--- /proc/cgroups: {ctrl = {hierarchy = n, enabled = bool}}; hierarchy 0 is v2.
-- @function proc_cgroups
M.proc_cgroups = proc_cgroups

--- What this host offers: mode, v2 mount, v2 controllers, v1 mounts.
-- @function probe
function M.probe(...)
  nargs("cgroup.probe", 0, select("#", ...))
  local m, err = mounts()
  if not m then return { ok = false, mode = "none", v1 = {}, why = err } end
  local r = { mode = mode_of(m), v2_mount = m.v2, v2_root = m.v2_root, v1 = m.v1, ok = m.v2 ~= nil }
  if m.v2 then
    local root = core.cgroup_open(m.v2, "")
    local list = root and root:get("cgroup.controllers") or ""
    if root then root:close() end
    r.v2_controllers = {}
    for c in list:gmatch("%S+") do r.v2_controllers[#r.v2_controllers + 1] = c end
  else
    r.why = "no cgroup2 hierarchy is mounted"
  end
  return r
end

-- /proc/cgroups and v1 mounts use the legacy name of io.
local legacy_name = { io = "blkio" }

local function parent_of(relpath)
  return relpath:match("^(.*)/[^/]*$") or ""
end

local function has_word(list, w)
  return (" " .. (list or ""):gsub("%s+", " ") .. " "):find(" " .. w .. " ", 1, true) ~= nil
end

-- Why controller ctrl's files are missing in cg; and when that is the
-- parent not enabling it, the part of the reason that says so (toggle_reason
-- words it for cgroup.controllers).
local function controller_reason(cg, ctrl)
  local name = legacy_name[ctrl] or ctrl
  local info = proc_cgroups()[name]
  local m = cached_mounts() or { v1 = {} }
  if ctrl ~= "cpu" and ctrl ~= "io" and not info then
    return ("%s controller is not compiled into this kernel"):format(ctrl)
  end
  if info and not info.enabled then
    return ("%s controller is disabled (cgroup_disable=%s on the kernel command line)"):format(ctrl, name)
  end
  if info and info.hierarchy ~= 0 then
    return ("%s controller is bound to cgroup v1 (%s) on this %s host"):format(
      ctrl, m.v1[name] or "a v1 hierarchy", mode_of(m))
  end
  if cg.relpath == "" then
    return ("the root cgroup has no %s.* interface files"):format(ctrl)
  end
  local parent = parent_of(cg.relpath)
  if not has_word(cg:get("cgroup.controllers"), ctrl) then
    local not_in_parent = ("not enabled in the parent's cgroup.subtree_control (/%s): enable it there first "
      .. "(takana.cgroup(%q):enable{%q})"):format(parent, "/" .. parent, ctrl)
    return ctrl .. " is " .. not_in_parent, not_in_parent
  end
  return ("%s files are missing for an unknown reason"):format(ctrl)
end

-- The sections of cg:stat() and each one's files, from the binding's
-- layout (core.cgroup_stat), so a section added there is known here.
local stat_files = {}
for _, row in ipairs(core.cgroup_stat) do
  local files = stat_files[row.section] or {}
  stat_files[row.section] = files
  files[#files + 1] = row.file
end

--- Why a section is absent from `cg:stat()`; nil when it is present.
-- @string section a section of `cg:stat()` ("cpu", "memory", "pids",
--   "pressure", "events")
-- @treturn string|nil the reason (the error itself when stat() fails, as
--   for a removed cgroup)
function cgroup:why(section, ...)
  nargs("why", 1, select("#", ...) + 1)
  if not stat_files[section] then argerror("why", 1, "unknown section '" .. tostring(section) .. "'") end
  local st, err = self:stat()
  if not st then return err end
  if st[section] then return nil end
  if section == "memory" or section == "pids" then return (controller_reason(self, section)) end
  if section == "pressure" then
    if not core.psi_readable() then
      return "pressure stall information is off (kernel without CONFIG_PSI, or booted with psi=0)"
    end
    return "pressure files are disabled for this cgroup (cgroup.pressure is 0)"
  end
  if section == "events" then
    if self.relpath == "" then return "the root cgroup has no cgroup.events" end
    return ("cgroup.events is missing from %s (kernel older than 4.5?)"):format(self.path)
  end
  if section == "cpu" then return "cpu.stat is missing (kernel older than 4.15)" end
  return ("%s missing from %s"):format(table.concat(stat_files[section], ", "), self.path)
end

-- Limits: file -> {controller, kind}
local limits = {
  ["memory.max"] = "memory", ["memory.high"] = "memory", ["memory.low"] = "memory",
  ["memory.min"] = "memory", ["memory.swap.max"] = "memory", ["pids.max"] = "pids", ["cpu.weight"] = "cpu",
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
  local ok, err, errno = core.cgroup_write(self, key, text)
  if not ok then
    local exists = self:get(key)
    if not exists and key == "memory.swap.max" and self:get("memory.max") then
      return nil, "set memory.swap.max: swap accounting is off (a kernel without CONFIG_MEMCG_SWAP, or "
        .. "booted with swapaccount=0)", errno
    end
    if not exists then
      return nil, ("set %s: %s"):format(key, (controller_reason(self, limits[key]))), errno
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

--- The cgroup's pressure stall information (PSI) for one resource, from
-- its `<resource>.pressure` file (C: csrc/lua/lua_pressure.c): the table of
-- `takana.pressure`, `{some = {avg10=, avg60=, avg300=, total_us=}, full =
-- {...}}`, avg* fractions 0..1 (the kernel's 1.23 percent reads 0.0123),
-- total_us microseconds (an integer). Every cgroup2 cgroup has these files
-- where the kernel has PSI, whatever controllers are enabled. (`stat()`'s
-- `pressure` section keeps the kernel's percentages and `total_ns`.)
-- @function cgroup:pressure
-- @string resource "cpu", "memory" or "io"
-- @treturn[1] table
-- @treturn[2] nil, message, errno: ENOENT when the file is absent (no PSI:
--   CONFIG_PSI off or psi=0; cgroup.pressure set to 0; or the cgroup was
--   removed), EOPNOTSUPP where PSI is disabled

--- A PSI trigger on the cgroup's `<resource>.pressure`, opened beneath the
-- handle's directory (C: csrc/lua/lua_pressure.c): the object
-- `takana.pressure_trigger` gives, pollable ("p") by `takana.poll`,
-- cqueues and luv. `stall` is a fraction of `window` (0 < stall <= 1),
-- `window` seconds (0.5..10); without `CAP_SYS_RESOURCE` only multiples
-- of 2 s (others: nil, a message naming the rule, EINVAL). The file is root's
-- (0644): another user gets EACCES. Once the cgroup is removed the trigger
-- is broken: polls report it ready and its `read()` returns nil, message,
-- ENODEV.
-- @function cgroup:pressure_trigger
-- @tparam table t `{resource=, kind=, stall=, window=}`: kind "some" (the
--   default) or "full"
-- @treturn[1] trigger `:read([timeout])`, `:fileno()`, the cqueues protocol,
--   `:close()`
-- @treturn[2] nil, message, errno
-- @usage local trig = assert(cg:pressure_trigger{resource = "memory",
--   kind = "some", stall = 0.15, window = 2})

--- Applies a limit and verifies it by reading it back.
-- `cg:set(key, value)` or `cg:set{key = value, ...}`. Keys: memory.max,
-- memory.high, memory.low, memory.min, memory.swap.max, pids.max, cpu.weight, cpu.max
-- (quota µs, or {quota, period}), io.weight; "max" means unlimited.
-- @tparam string|table key the file (`"memory.max"`), or a table of file = value
-- @tparam[opt] int|string|table value the value, with a file name as `key`
-- @treturn[1] the applied value (rounded as the kernel did), or a table of them
-- @treturn[2] nil, "set key: why", errno
function cgroup:set(key, value, ...)
  nargs("set", 2, select("#", ...) + 2)
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
-- @string name a plain directory name
-- @tparam[opt] table opts `{exist_ok = true}`: a child of that name that
--   exists already is opened instead (it must be a cgroup directory)
-- @treturn[1] cgroup handle
-- @treturn[2] nil, `"mkdir <name>: why"`, errno (EEXIST without exist_ok)
function cgroup:mkdir(name, opts, ...)
  nargs("mkdir", 2, select("#", ...) + 2)
  if type(name) ~= "string" or name == "" or name:find("[/%z]") or name == "." or name == ".." or #name > 255 then
    argerror("mkdir", 1, "a plain directory name expected")
  end
  opts = options("mkdir", 2, opts, { exist_ok = "boolean" })
  local ok, err, errno = core.cgroup_mkdir(self, name)
  if not ok and not (errno == EEXIST and opts.exist_ok) then return nil, err, errno end
  local rel = self.relpath == "" and name or self.relpath .. "/" .. name
  local cg
  cg, err, errno = core.cgroup_open(self.mount, rel)
  if not cg and errno == ENOTDIR then
    return nil, ("mkdir %s: exists, and is not a cgroup directory but a file of %s"):format(name, self.path), EEXIST
  end
  if not cg then return nil, "mkdir " .. name .. ": " .. err, errno end
  return cg
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

-- Why writing "+c"/"-c" to cg's cgroup.subtree_control failed, and what
-- to do about it.
local function toggle_reason(self, c, sign, errno)
  local file = (self.relpath == "" and "/" or self.path .. "/") .. "cgroup.subtree_control"
  local available = self:get("cgroup.controllers") or ""
  if sign == "+" and not has_word(available, c) then
    local why, not_in_parent = controller_reason(self, c)
    if not_in_parent then
      why = ("%s is not in %s's cgroup.controllers: %s"):format(c, self.path, not_in_parent)
    end
    return why
  end
  local cause
  if errno == EBUSY then
    cause = sign == "+" and
      ("%s has processes of its own, and a cgroup with processes cannot enable controllers for its children "
        .. "(cgroup v2's no-internal-process rule): move them into a child cgroup first"):format(self.path)
      or "a child cgroup still enables it in its own cgroup.subtree_control: disable it there first"
  elseif errno == EACCES or errno == EPERM then
    cause = "permission denied: run as root, or as the owner of a cgroup delegated to this user"
  elseif errno == EOPNOTSUPP then
    cause = "not supported here (a threaded cgroup takes only threaded controllers such as cpu and pids)"
  elseif errno == ENOENT or errno == EINVAL then
    cause = ("the kernel knows no controller %q here (cgroup.controllers lists: %s)"):format(c,
      available:gsub("%s+$", "") ~= "" and available:gsub("%s+$", "") or "none")
  else
    cause = core.strerror(errno)
  end
  return ("cannot write '%s%s' to %s: %s"):format(sign, c, file, cause)
end

local function toggle(self, fname, list, sign)
  controller_list(fname, list)
  for _, c in ipairs(list) do
    local ok, _, errno = core.cgroup_write(self, "cgroup.subtree_control", sign .. c)
    if not ok then
      return nil, ("%s %s: %s"):format(fname, c, toggle_reason(self, c, sign, errno)), errno
    end
  end
  -- Verified: what the kernel reports now, not what was asked for.
  local text, err, errno = self:get("cgroup.subtree_control")
  if not text then return nil, ("%s: written, but %s"):format(fname, err), errno end
  local enabled = {}
  for c in text:gmatch("%S+") do enabled[#enabled + 1] = c end
  for _, c in ipairs(list) do
    if has_word(text, c) ~= (sign == "+") then
      return nil, ("%s %s: written, but %s/cgroup.subtree_control reads '%s'"):format(fname, c,
        self.relpath == "" and "" or self.path, text:gsub("%s+$", "")), EIO
    end
  end
  return enabled
end

--- Enables controllers for the children: writes this cgroup's
-- cgroup.subtree_control (so that a child made with `mkdir` has, say,
-- memory.max) and reads it back.
-- @tparam {string,...} list e.g. `{"memory", "pids", "cpu", "io"}`
-- @treturn[1] {string,...} the controllers enabled now, read back
-- @treturn[2] nil, "enable memory: why, and what to do", errno
function cgroup:enable(list, ...)
  nargs("enable", 1, select("#", ...) + 1)
  return toggle(self, "enable", list, "+")
end

--- Disables controllers for the children.
-- @tparam {string,...} list the controllers (`{"memory", "pids"}`)
-- @treturn[1] {string,...} the controllers still enabled, read back
-- @treturn[2] nil, "disable memory: why", errno
function cgroup:disable(list, ...)
  nargs("disable", 1, select("#", ...) + 1)
  return toggle(self, "disable", list, "-")
end

-- cgroup.procs takes a pid; a task still being created reads as EINVAL for
-- a moment (as runc retries).
local function write_pid(self, pid)
  local ok, err, errno
  for attempt = 1, 5 do
    ok, err, errno = core.cgroup_write(self, "cgroup.procs", tostring(pid))
    if ok or errno ~= EINVAL then break end
    core.poll_fds({}, 0.03 * attempt)
  end
  return ok, err, errno
end

--- Moves a process into the cgroup.
-- Given a pidfd object, the pid is read through the descriptor (never the
-- number the object was made with), and after the write the descriptor is
-- checked to still hold that process, as systemd's pidref does: a process
-- already reaped fails with ESRCH and nothing is written. Where the kernel
-- offers `PIDFD_GET_INFO` (6.13+) its cgroup id is checked as well.
-- @tparam int|pidfd who
-- @treturn[1] true
-- @treturn[2] nil, "attach PID: why", errno
function cgroup:attach(who, ...)
  nargs("attach", 1, select("#", ...) + 1)
  if is_pidfd(who) then
    local fname = "attach " .. who.pid
    local pid, fd, errno = pidfd_pid(fname, who)
    if not pid then return nil, fd, errno end
    local ok, err
    ok, err, errno = write_pid(self, pid)
    if not ok then return nil, fname .. ": " .. err, errno end
    local again, aerr, aerrno = pidfd_pid(fname, who)
    if not again then
      return nil, aerr .. " while it was being moved (if its pid was reused at once, that process may have moved)", aerrno
    end
    local id = core.pidfd_cgroup_id(fd)
    if id and id ~= core.cgroup_id(self) then
      if not who:alive() then
        return nil, ("%s: the process has exited (an exiting process is not moved)"):format(fname), ESRCH
      end
      return nil, ("%s: written, but the process is in another cgroup now (moved again meanwhile?)"):format(fname), EAGAIN
    end
    return true
  end
  local pid = who
  if math.type(pid) ~= "integer" or pid <= 0 or pid > 0x7fffffff then
    argerror("attach", 1, "pid or pidfd expected")
  end
  local ok, err, errno = write_pid(self, pid)
  if not ok then return nil, "attach " .. pid .. ": " .. err, errno end
  return true
end

local PROCS_OPTIONS = { recursive = "boolean" }

--- The pids in the cgroup (cgroup.procs), in the kernel's order.
-- @tparam[opt] table opts `{recursive = true}`: those of every cgroup
--   beneath it too (parents first; past 100,000 cgroups, E2BIG)
-- @treturn[1] {int,...}
-- @treturn[2] nil, message, errno (ENOENT for a removed cgroup)
function cgroup:procs(opts, ...)
  nargs("procs", 1, select("#", ...) + 1)
  -- Checked only when given: the supervisor calls this on every event.
  if opts ~= nil then opts = options("procs", 1, opts, PROCS_OPTIONS) end
  if opts and opts.recursive then return core.cgroup_subtree_procs(self, MAX_DIRS) end
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
    if left <= 0 or not fd then return false end
    core.poll_fds({ fd }, math.min(left, 0.05), { true })
  end
end

--- Whether process `pid` is in this cgroup or in one beneath it.
-- Where /proc is this pid namespace's and the cgroup2 mount shows the
-- hierarchy from this cgroup namespace's root (the usual case),
-- `/proc/PID/cgroup` is compared with the path: one read, and a zombie
-- still counts. Elsewhere the subtree's cgroup.procs are read instead (a
-- cost that grows with the processes beneath it), and they list live
-- processes only.
-- @int pid
-- @treturn[1] boolean
-- @treturn[2] nil, message, errno (ESRCH: no such process)
function cgroup:holds(pid, ...)
  nargs("holds", 1, select("#", ...) + 1)
  if math.type(pid) ~= "integer" or pid <= 0 or pid > 0x7fffffff then
    argerror("holds", 1, "pid (a positive integer) expected, got " .. tostring(pid))
  end
  local m, err, errno = v2_mount()
  if not m then return nil, err, errno end
  if m.v2_root == "/" and core.proc_is_ours() then
    local p
    p, err, errno = path_of("holds", pid)
    if p == nil and errno == ENOENT then return false end -- in no cgroup2 hierarchy
    if not p then return nil, err, errno end
    local mine = "/" .. self.relpath
    return mine == "/" or p == mine or p:sub(1, #mine + 1) == mine .. "/"
  end
  local procs
  procs, err, errno = core.cgroup_subtree_procs(self, MAX_DIRS)
  if not procs then return nil, err, errno end
  for _, q in ipairs(procs) do
    if q == pid then return true end
  end
  -- Not listed: elsewhere, or gone.
  local fd, ferr, ferrno = core.pidfd(pid)
  if not fd then return nil, "holds: " .. (ferrno == ESRCH and "no such process" or tostring(ferr)), ferrno end
  fd:close()
  return false
end

-- Whether the caller is in cg or beneath it: true/false and our pid, or
-- nil, message, errno.
local function holds_caller(self)
  local me = core.getpid()
  local holds, err, errno = self:holds(me)
  if holds == nil then return nil, err, errno end
  return holds, me
end

-- What freeze and wait_empty refuse: a cgroup holding the caller, which
-- would wait on itself. nil, or "fname <path>: unknown<why>" (the check
-- failed) or "fname <path>: this process (pid n) is in it<inside>",
-- EDEADLK; and errno.
local function refuse_holder(self, fname, unknown, inside)
  local holds, me, herrno = holds_caller(self)
  if holds == nil then return ("%s %s: %s%s"):format(fname, self.path, unknown, me), herrno end
  if holds then
    return ("%s %s: this process (pid %d) is in it%s"):format(fname, self.path, me, inside), EDEADLK
  end
end

--- Freezes every process of the unit and waits until cgroup.events says so.
-- Refused (nil, message, EPERM or EDEADLK) for the root cgroup, which holds
-- every process, and for a cgroup that holds the caller, which would freeze
-- itself with no one left to thaw it.
-- @number[opt=5] timeout seconds
-- @treturn[1] true
-- @treturn[2] nil, message, ETIMEDOUT (the cgroup is thawed again)
function cgroup:freeze(timeout, ...)
  nargs("freeze", 1, select("#", ...) + 1)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0 or timeout ~= timeout) then
    argerror("freeze", 1, "timeout in seconds expected")
  end
  if self.relpath == "" then
    return nil, "freeze /: refusing to freeze the root cgroup (it holds every process, this one included); "
      .. "freeze a child cgroup", EPERM
  end
  local why, werrno = refuse_holder(self, "freeze", "cannot tell whether it holds this process: ",
    " and would freeze itself, with no one to thaw it; move it out first")
  if why then return nil, why, werrno end
  local ok, err, errno = core.cgroup_write(self, "cgroup.freeze", "1")
  if not ok then return nil, "freeze: " .. err, errno end
  if wait_frozen(self, true, timeout or 5) then return true end
  core.cgroup_write(self, "cgroup.freeze", "0")
  return nil, ("freeze %s: not frozen after %gs; thawed again"):format(self.path, timeout or 5), ETIMEDOUT
end

--- Thaws the unit.
-- @function thaw
function cgroup:thaw(...)
  nargs("thaw", 0, select("#", ...))
  local ok, err, errno = core.cgroup_write(self, "cgroup.freeze", "0")
  if not ok then return nil, "thaw: " .. err, errno end
  wait_frozen(self, false, 5)
  return true
end

-- Bounds of cg:signal's listing rounds: a cgroup whose processes fork
-- faster than they are signalled stops there, with EBUSY.
local SIGNAL_ROUNDS, SIGNAL_TIME = 100, 2
-- Rounds of the fallback kill, and how long each waits for the dead.
local KILL_ROUNDS, KILL_WAIT = 10, 0.5

local function timeout_arg(fname, n, t)
  if t ~= nil and not (type(t) == "number" and t >= 0 and t <= YEAR) then
    argerror(fname, n, ("timeout in seconds expected (0 to 1 year, or nil to wait forever), got %s"):format(tostring(t)))
  end
  return t
end

local function signum(fname, sig)
  if type(sig) == "number" then
    local n = math.tointeger(sig)
    if not n or n < 0 or n > 64 then argerror(fname, 1, "signal number out of range (0..64)") end
    return n
  end
  if type(sig) ~= "string" then argerror(fname, 1, "signal number or name expected, got " .. type(sig)) end
  local ok, n = pcall(core.signum, sig)
  if not ok then argerror(fname, 1, ("unknown signal name %q"):format(sig)) end
  return n
end

-- nil, message, ENOENT when the handle's directory is gone; nothing
-- otherwise. (A walk of a removed cgroup finds it empty, which is not the
-- same thing.)
local function removed(self, fname)
  local _, _, errno = core.cgroup_has_pid(self, core.getpid())
  if errno == ENOENT or errno == ENODEV then
    return ("%s %s: the cgroup was removed (its directory is gone); open it again once it is recreated")
      :format(fname, self.path), ENOENT
  end
end

-- The refusals kill and signal share: the root, and a cgroup holding the
-- caller, unless opts say so. Returns holds, me or nil, message, errno.
local function refusals(self, fname, opts, verb)
  local why, werrno = removed(self, fname)
  if why then return nil, why, werrno end
  if self.relpath == "" and not opts.root then
    return nil, ("%s /: refusing to %s every process under the cgroup2 root (pid 1 and this process among them); "
      .. "pass {root=true, include_self=true} if that is really meant"):format(fname, verb), EPERM
  end
  local holds, me, herrno = holds_caller(self)
  if holds == nil then
    return nil, ("%s %s: cannot tell whether it holds this process, so nothing was %s: %s")
      :format(fname, self.path, verb == "kill" and "killed" or "signalled", me), herrno
  end
  if holds and not opts.include_self then
    return nil, ("%s %s: this process (pid %d) is in it and would be %s too; move it out first, "
      .. "or pass {include_self=true}"):format(fname, self.path, me, verb == "kill" and "killed" or "signalled"), EPERM
  end
  return holds, me
end

-- The listing rounds of cg:signal (csrc/core/cgroup.c tk_cg_signal), skipping
-- the caller. Returns the count, or nil, message, errno, count.
local function signal_rounds(self, fname, signo, me)
  local r = core.cgroup_signal(self, signo, me, SIGNAL_ROUNDS, SIGNAL_TIME)
  if r.errno == EBUSY then
    return nil, ("%s %s: processes kept appearing for %d listings of cgroup.procs (%d signalled); "
      .. "they fork faster than they are signalled, or ignore the signal and go on forking: "
      .. "kill the cgroup instead"):format(fname, self.path, r.rounds, r.signalled), EBUSY, r.signalled
  elseif r.errno then
    return nil, ("%s %s: %s (%d signalled)"):format(fname, self.path, r.error, r.signalled), r.errno, r.signalled
  elseif r.failed_errno then
    local hint = (r.failed_errno == EPERM or r.failed_errno == EACCES) and
      ": the process belongs to another user (run as root, or as its owner)" or ""
    return nil, ("%s %s: process %d: %s%s (%d others signalled)"):format(fname, self.path, r.failed_pid,
      r.failed_error, hint, r.signalled), r.failed_errno, r.signalled
  end
  return r.signalled
end

--- Sends a signal to every process of the cgroup and of its descendants.
-- cgroup.procs of the subtree is listed again and again until a listing
-- shows no process that was not signalled yet, then twice more after a
-- pause of 1 and 4 ms (a fork already past its signal check when the
-- parent was signalled shows its child a moment later), so a forking shell
-- cannot leave a child behind. Each pid is opened as a pidfd and signalled
-- through it only if the subtree still lists it after the pidfd was
-- opened: a pid reused by a process elsewhere is never signalled. Bounded:
-- at most 100 listings and 2 s, then EBUSY (a process that ignores the
-- signal and keeps forking: use `kill`).
--
-- Refused with EPERM unless asked for in `opts`, as `kill` is:
--
-- * `root = true`: the cgroup is the root of the cgroup2 mount;
-- * `include_self = true`: the cgroup holds the calling process, which
--   then gets the signal too, last.
-- @tparam int|string sig number (0 checks) or name: "TERM", "SIGTERM", "term"
-- @tparam[opt] table opts `{root = bool, include_self = bool}`
-- @treturn[1] int how many processes the signal was delivered to
-- @treturn[2] nil, `"signal <path>: why"`, errno (EPERM for a refusal or a
--   process of another user, ENOENT for a removed cgroup, EBUSY past the
--   bounds)
function cgroup:signal(sig, opts, ...)
  nargs("signal", 2, select("#", ...) + 2)
  local signo = signum("signal", sig)
  opts = options("signal", 2, opts, { root = "boolean", include_self = "boolean" })
  local holds, me, errno = refusals(self, "signal", opts, "signal")
  if holds == nil then return nil, me, errno end
  local n, err
  n, err, errno = signal_rounds(self, "signal", signo, me)
  if not n then return nil, err, errno end
  if holds then
    local p
    p, err, errno = core.pidfd(me)
    if not p then return nil, ("signal %s: this process: %s (%d others signalled)"):format(self.path, err, n), errno end
    local ok
    ok, err, errno = p:signal(signo)
    p:close()
    if not ok then return nil, ("signal %s: this process: %s (%d others signalled)"):format(self.path, err, n), errno end
    n = n + 1
  end
  return n
end

-- Until only the caller is left in the subtree (it is in it, so the
-- cgroup never becomes empty); bounded.
local function only_me_left(self, me, timeout)
  local deadline, delay = core.monotime() + timeout, 0.001
  while true do
    local procs = core.cgroup_subtree_procs(self, MAX_DIRS)
    if procs and #procs <= 1 and (procs[1] == nil or procs[1] == me) then return true end
    local left = deadline - core.monotime()
    if left <= 0 then return false end
    core.poll_fds({}, math.min(delay, left))
    delay = math.min(delay * 2, 0.1)
  end
end

-- Waits until the subtree holds no process: through cgroup.events (POLLPRI
-- when populated changes) where the cgroup has one, else (the root) by
-- listing cgroup.procs with a backoff from 1 ms to 0.1 s. timeout nil:
-- forever. true | nil, message, errno (ETIMEDOUT).
local function wait_empty(self, fname, timeout)
  local deadline = timeout and core.monotime() + timeout
  local fd
  if self.relpath ~= "" then
    local err, errno
    fd, err, errno = self:fileno()
    if not fd then return nil, ("%s %s: %s"):format(fname, self.path, err), errno end
  end
  local delay = 0.001
  while true do
    local populated, n
    if fd then
      local st, _, errno = self:state()
      if not st then
        local what = errno == ENOENT and "the cgroup was removed (cgroup.events is gone)" or "cgroup.events"
        return nil, ("%s %s: %s: %s"):format(fname, self.path, what, core.strerror(errno)), errno
      end
      populated = st.populated
    else
      local procs, err, errno = core.cgroup_subtree_procs(self, MAX_DIRS)
      if not procs then return nil, ("%s %s: %s"):format(fname, self.path, err), errno end
      populated, n = #procs > 0, #procs
    end
    if not populated then return true end
    local left = deadline and deadline - core.monotime()
    if left and left <= 0 then
      n = n or #(core.cgroup_subtree_procs(self, MAX_DIRS) or {})
      return nil, ("%s %s: still populated after %gs (%d process%s here or below)"):format(fname, self.path,
        timeout, n, n == 1 and "" or "es"), ETIMEDOUT
    end
    if fd then
      -- Reading cgroup.events (state above) re-armed the descriptor.
      local ok, err, errno = core.poll_fds({ fd }, left, { true })
      if not ok then return nil, ("%s %s: %s"):format(fname, self.path, err), errno end
    else
      core.poll_fds({}, left and math.min(delay, left) or delay)
      delay = math.min(delay * 2, 0.1)
    end
  end
end

--- Waits until no process is left in the cgroup or beneath it.
-- Sleeps on the cgroup.events descriptor (POLLPRI, raised when
-- `populated` changes), so it costs nothing while it waits. The root
-- cgroup has no cgroup.events: there cgroup.procs of the whole tree is
-- listed with a backoff from 1 ms to 0.1 s. (A cgroup v1 hierarchy has
-- neither `populated` nor cgroup.kill; takana's handles are cgroup2 only,
-- and `takana.cgroup()` says so on a v1-only host.)
-- @number[opt] timeout seconds (0 to 1 year); nil waits forever
-- @treturn[1] true
-- @treturn[2] nil, `"wait_empty <path>: still populated after Ns (n processes
--   here or below)"`, ETIMEDOUT; EDEADLK when the cgroup holds the caller,
--   which it would wait for forever; ENOENT for a removed cgroup
function cgroup:wait_empty(timeout, ...)
  nargs("wait_empty", 1, select("#", ...) + 1)
  timeout_arg("wait_empty", 1, timeout)
  local why, werrno = removed(self, "wait_empty")
  if why then return nil, why, werrno end
  why, werrno = refuse_holder(self, "wait_empty", "", ", so it cannot become empty while this process waits")
  if why then return nil, why, werrno end
  return wait_empty(self, "wait_empty", timeout)
end

--- The cgroup's children: the names of its child cgroups, sorted.
-- @tparam[opt] table opts `{handles = true}` gives open handles instead of
--   names, in the same order (a child removed meanwhile is left out); the
--   caller closes them
-- @treturn[1] {string,...} or {cgroup,...}
-- @treturn[2] nil, `"children <path>: why"`, errno (ENOENT for a removed cgroup)
function cgroup:children(opts, ...)
  nargs("children", 1, select("#", ...) + 1)
  opts = options("children", 1, opts, { handles = "boolean" })
  local why, werrno = removed(self, "children")
  if why then return nil, why, werrno end
  local names, _, errno = core.cgroup_children(self)
  if not names then return nil, ("children %s: %s"):format(self.path, core.strerror(errno)), errno end
  table.sort(names)
  if not opts.handles then return names end
  local handles = {}
  for _, name in ipairs(names) do
    local rel = self.relpath == "" and name or self.relpath .. "/" .. name
    local h, herr, herrno = core.cgroup_open(self.mount, rel)
    if h then
      handles[#handles + 1] = h
    elseif herrno ~= ENOENT then
      for _, o in ipairs(handles) do o:close() end
      return nil, ("children %s: %s"):format(self.path, herr), herrno
    end
  end
  return handles
end

-- Without cgroup.kill: rounds of SIGKILL through cg:signal's listing
-- rounds (one code path), each followed by a wait of up to KILL_WAIT for
-- the cgroup to empty; at most KILL_ROUNDS rounds. The caller itself, when
-- it is inside and include_self was given, is killed last.
local function kill_each(self, me, holds)
  for _ = 1, KILL_ROUNDS do
    local n, err, errno = signal_rounds(self, "kill", 9, me)
    if not n and errno ~= EBUSY then return nil, err, errno end
    if holds then
      if only_me_left(self, me, KILL_WAIT) then break end
    elseif wait_empty(self, "kill", KILL_WAIT) then
      return true
    end
  end
  if holds then
    local p = core.pidfd(me)
    if p then p:signal(9) end
    return nil, ("kill %s: this process survived SIGKILL"):format(self.path), EBUSY
  end
  return nil, ("kill %s: processes keep appearing after %d rounds of SIGKILL"):format(self.path, KILL_ROUNDS), EBUSY
end

--- Kills every process of the unit and its descendants.
-- Writes cgroup.kill (Linux 5.14+). Without it (an older kernel, or the
-- root cgroup, which never has one) the fallback is explicit and bounded:
-- rounds of `cg:signal("KILL")`'s listing (each process through a pidfd),
-- each followed by a wait of up to 0.5 s for the cgroup to empty; at most
-- 10 rounds, then EBUSY.
--
-- Refused with EPERM unless asked for in `opts`:
--
-- * `root = true`: the cgroup is the root of the cgroup2 mount, that is
--   every process (pid 1 included, on a host);
-- * `include_self = true`: the cgroup holds the calling process, which is
--   then killed too (last, in the fallback).
--
-- With `wait = seconds` it returns only once the cgroup is empty (see
-- `wait_empty`), so `remove()` can follow at once; a cgroup still
-- populated then fails with ETIMEDOUT (the processes were signalled; a
-- process in uninterruptible sleep dies only when it wakes).
--
-- Spawning into the cgroup again after a kill: some kernels (6.18.44 here;
-- spec/88 names it where it happens) SIGKILL a child born into a cgroup by
-- `CLONE_INTO_CGROUP` when that cgroup was killed more often than the
-- spawner's own (the fork-race fix of cgroup.kill compares kill_seq of the
-- target with the one it read from the parent's cgroup). Remove the cgroup
-- and make it again (`cg:remove()`, `parent:mkdir(name)`) before spawning
-- into it; a fresh cgroup always works.
-- @tparam[opt] table opts `{root = bool, include_self = bool, wait = seconds}`
-- @treturn[1] true (cgroup.kill written, or the fallback saw the cgroup empty;
--   with `wait`, the cgroup is empty)
-- @treturn[2] nil, `"kill <path>: why"`, errno
function cgroup:kill(opts, ...)
  nargs("kill", 1, select("#", ...) + 1)
  opts = options("kill", 1, opts, { root = "boolean", include_self = "boolean", wait = seconds })
  local holds, me, herrno = refusals(self, "kill", opts, "kill")
  if holds == nil then return nil, me, herrno end
  local ok, err, errno = core.cgroup_write(self, "cgroup.kill", "1")
  if not ok then
    if errno ~= ENOENT then
      if errno == EACCES or errno == EPERM then
        err = "cgroup.kill: permission denied (run as root, or as the owner of a delegated cgroup)"
      end
      return nil, ("kill %s: %s"):format(self.path, err), errno
    end
    ok, err, errno = kill_each(self, me, holds)
    if not ok then return nil, err, errno end
  end
  if opts.wait and not holds then return wait_empty(self, "kill", opts.wait) end
  return true
end

--- Removes the (empty) cgroup directory; refuses a populated one.
-- @function remove
function cgroup:remove(...)
  nargs("remove", 0, select("#", ...))
  if self.relpath == "" then return nil, "remove: refusing to remove the cgroup2 root", EINVAL end
  local st, serr, serrno = self:stat()
  if not st then return nil, "remove: " .. serr, serrno end
  if st.events and st.events.populated then
    local n = #(self:procs() or {})
    return nil, ("remove %s: the cgroup is populated (%d processes here or below); kill them first")
      :format(self.path, n), EBUSY
  end
  local ok, errno
  local delay = 0.001
  for _ = 1, 8 do
    ok, _, errno = core.cgroup_rmdir(self)
    if ok or errno ~= EBUSY then break end
    core.poll_fds({}, delay)
    delay = delay * 2
  end
  if not ok then return nil, ("remove %s: %s"):format(self.path, core.strerror(errno)), errno end
  self:close()
  return true
end

return M
