--- takana: see and steer Linux processes through the cheapest kernel
-- interface available, with a portable fallback for each.
--
-- Error convention (the same in every function, and in takana.cgroup and
-- takana.supervisor):
--
-- * a caller's mistake (wrong type, unknown option, out-of-range number)
--   raises an error;
-- * a runtime failure returns `nil, "context: message", errno`. The
--   message is for people and may change; errno is the number (as
--   luaposix gives it), the one value to branch on:
--   `errno == takana.errno.EMFILE`. `takana.errno[errno]` is its stable
--   name ("EMFILE", as luv names errors), `takana.strerror(errno)` the C
--   library's text. A failure that is no system call's (a limit the kernel
--   reads back differently, a refusal of takana's own) carries the errno
--   that says it best (EIO, EPERM, EBUSY...), never none.
--
-- @module takana
local core = require "takana.core"

local M = {
  _VERSION = core._VERSION,
}

local ENOENT = core.errno.ENOENT

local util = require "takana.util"
local argerror, nargs, check_options = util.argerror, util.nargs, util.check_options

-- Best first, as the core lists them. A BPF tier loads on first use (once
-- per process) and says why when it cannot run; the last (/proc) always can.
local snapshot_backends = core.snapshot_backends
local tiers = {}
for _, name in ipairs(snapshot_backends) do
  tiers[name] = function(opts, fields) return core.snapshot_take(name, fields, opts.cache ~= false) end
end

local field_bit = {}
for i, name in ipairs(core.record_fields) do field_bit[name] = 1 << (i - 1) end

-- fields = {"pid", "comm", ...} as the bits the core takes.
local function fields_mask(list)
  if #list == 0 or next(list, #list) ~= nil then
    return nil, "option 'fields': a non-empty array of field names expected"
  end
  local mask = 0
  for _, name in ipairs(list) do
    local bit = field_bit[name]
    if not bit then
      return nil, (("option 'fields': unknown field %s (known: %s)"):format(
        type(name) == "string" and ("'" .. name .. "'") or type(name), table.concat(core.record_fields, ", ")))
    end
    mask = mask | bit
  end
  return mask
end

-- backend = "cheapest": one snapshot repays a BPF tier's load (20-45 ms)
-- only where a cold /proc scan (~7 us a process, against 0.2-0.5 us) would
-- take longer: several thousand processes. /proc/loadavg's task count
-- (threads included, so an upper bound) decides without a scan.
local CHEAPEST_BPF_TASKS = 5000

local function cheapest_backend()
  local load = core.loadavg()
  if load and load.tasks < CHEAPEST_BPF_TASKS then return "proc" end
  return "auto"
end

--- Takes a snapshot of every live process.
-- @tparam[opt] table opts
--   `backend`: `"auto"` (default: the best tier that works), `"kfunc"`,
--   `"iter"`, `"proc"`, or `"cheapest"` for a single snapshot: proc below
--   5,000 tasks (a BPF tier's load would cost more than it saves), else auto;
--   `cache`: for the proc backend, keep `/proc/<pid>/stat` descriptors open
--   between snapshots (default true);
--   `fields`: the record fields to fill, e.g. `{"pid", "ppid", "comm"}`
--   (default: all, but the proc backend leaves out `cgroup_id`, which costs
--   it a second file per process). BPF tiers then skip the kernel
--   structures no field needs, and /proc reads `<pid>/cgroup` only for
--   `cgroup_id`. `pid` and `start_ns` are in every record whatever the
--   selection (identity: `snap:process`, a pid reused between snapshots).
--   Reading any other field left out of the selection, from a record view
--   or a record table, raises "field 'kthread' is not in this snapshot's
--   selection (pid, `start_ns`, `cgroup_id`)...", as `filter`, `delta` and
--   `snap:cgroup` do; a name that is no field reads nil. `snap.fields`
--   lists the selection.
-- @treturn[1] snapshot one userdata holding every record; `#snap`,
--   `snap.backend`, `snap.time_ns` (CLOCK_BOOTTIME), `snap.vanished`
--   (processes that exited mid-scan and were skipped), `snap.denied`
--   (processes listed but unreadable, as under hidepid), `snap.from_proc`
--   (BPF tiers: records the kernel hid from BPF, read from /proc instead).
-- @treturn[2] nil
-- @treturn[2] string why the requested backend cannot run
-- @treturn[2] int errno
function M.snapshot(opts, ...)
  nargs("snapshot", 1, select("#", ...) + 1)
  opts = check_options("snapshot", 1, opts, { backend = "string", cache = "boolean", fields = "table" })
  local backend = opts.backend or "auto"
  if backend == "cheapest" then backend = cheapest_backend() end
  if backend ~= "auto" and not tiers[backend] then
    argerror("snapshot", 1, ("unknown backend '%s' (auto, cheapest, %s or %s)"):format(backend,
      table.concat(snapshot_backends, ", ", 1, #snapshot_backends - 1), snapshot_backends[#snapshot_backends]))
  end
  local fields, why
  if opts.fields then
    fields, why = fields_mask(opts.fields)
    if not fields then argerror("snapshot", 1, why) end
  end
  if backend ~= "auto" then
    local snap, err, errno = tiers[backend](opts, fields)
    if snap then return snap end
    return nil, err, errno
  end
  for i, name in ipairs(snapshot_backends) do
    local snap, err, errno = tiers[name](opts, fields)
    -- exactly one value on success: takana.delta(old, takana.snapshot())
    if snap then return snap end
    if i == #snapshot_backends then return nil, err, errno end
  end
end

--- An event, as `events:read()` yields it. Fields a backend cannot know
-- are absent, never zero.
-- @table event
-- @field type `"fork"`, `"exec"`, `"exit"`, `"comm"` or `"lost"`
-- @field time_ns when it happened, CLOCK_BOOTTIME ns
-- @field realtime_ns when it happened, CLOCK_REALTIME ns (wall clock):
--   `time_ns` plus the clocks' offset sampled when the stream was read, as
--   `to_realtime` converts; a suspend in between changes nothing (both
--   clocks count it), a wall-clock step does
-- @field pid the process (tgid)
-- @field tid the thread that did it
-- @field ppid the parent (fork; exec and exit where known; on the
--   connector, exec's comes from the stream's own fork tracking, seeded from
--   /proc when it opened: a process reparented since shows its first parent)
-- @field comm the command name
-- @field uid the effective uid (fork, exec), as the snapshots' `uid` and
--   the second column of `/proc/<pid>/status`'s Uid line; unlike the
--   snapshots, not root for a process that is not dumpable. bpf reads it
--   from the process's credentials at the fork or exec; the connector at
--   receipt, as the owner of `/proc/<pid>` (which the kernel keeps the euid
--   and egid even when not dumpable; see `who_lost`)
-- @field gid the effective gid (fork, exec), read as `uid` is
-- @field loginuid the audit login uid (fork, exec), as
--   `/proc/<pid>/loginuid` shows it: 4294967295 when none was ever set
--   (services started at boot); absent, with `events.unavailable.loginuid`
--   saying why, on a kernel built without CONFIG_AUDIT
-- @field who_lost true (connector) when `uid`, `gid` and `loginuid` are
--   absent because /proc could not be read as this event's process: it was
--   reaped before the read, its exec's `argv_lost` is true, its ids changed
--   before the read (setuid, a setuid program's exec: the connector's id
--   messages say so), or the socket had overflowed; counted in
--   `events:stats().who_lost`
-- @field filename the program executed (exec): bpf as execve was given it,
--   connector the `/proc/<pid>/exe` link read at receipt
-- @field argv the arguments (exec), an array: bpf reads them at the exec
--   tracepoint, the connector from `/proc/<pid>/cmdline` at receipt; at most
--   512 bytes (the last argument may be cut)
-- @field argv_from where exec's `filename`, `argv` and `comm` come from:
--   `"exec"` (bpf: taken at the exec itself) or `"proc-later"` (connector:
--   read from /proc when the event was received, so a process that exec'd
--   again just before the read can still show the later program; see
--   `argv_lost`)
-- @field argv_truncated true when the arguments went on past those 512 bytes
-- @field argv_lost true (connector) when `filename`, `argv` and `comm` are
--   absent because /proc could not be read as this exec's: the process was
--   gone or amid another exec, a later exec (or exit before the read, or a
--   fork reusing the pid) reached the stream in the same read, or the
--   socket had overflowed and such a message may have been dropped
-- @field code the exit code (exit, when it exited)
-- @field signal the signal that killed it (exit, when it was killed)
-- @field core true when it dumped core (exit)
-- @field utime_ns user CPU of the whole process at exit (bpf)
-- @field stime_ns system CPU at exit (bpf)
-- @field maxrss_bytes peak resident memory at exit (bpf)
-- @field cgroup_id the cgroup2 id of the process (bpf: fork, exec and exit)
-- @field start_ns the exiting process's start time, ns since boot (bpf)
-- @field observed true when the poll backend only saw the change between
--   two snapshots (no status, time approximate)
-- @field count events dropped (lost); absent on a connector overrun
-- @field overrun true for a connector overrun: the gap's size comes later

--- CPU used by each process between two snapshots.
-- @function delta
-- @tparam snapshot old
-- @tparam snapshot new
-- @treturn table `interval_ns`, and per pid `cpu_ns[pid]`, `utime_ns[pid]`,
--   `stime_ns[pid]`, `share[pid]` (1.0 = one CPU busy for the whole interval);
--   `started` and `exited`: pid lists in pid order. A pid reused between the
--   two snapshots is in both lists.
M.delta = core.delta

--- errno numbers and their stable names, both ways: `takana.errno.EMFILE`
-- is 24 (what the third value of a runtime failure is compared with) and
-- `takana.errno[24]` is "EMFILE". Every name the C library knows, aliases
-- (EWOULDBLOCK, EDEADLOCK, ENOTSUP) included by name; a number maps back
-- to one name.
-- @table errno
M.errno = core.errno

--- The C library's text for an errno number ("Too many open files"), the
-- text a failure's message ends with.
-- @function strerror
-- @int errno 0..4095
-- @treturn string
M.strerror = core.strerror

--- Opens a pidfd on a process: signals reach that process even after its
-- pid is reused, and the descriptor turns readable when it exits.
-- Methods: `:signal(sig)`, `:alive()`, `:wait(timeout_s)` (children only;
-- 0..1 year, nil forever; running out is `nil, message, ETIMEDOUT`),
-- `:fileno()`, `:pollfd()`/`:events()`/`:timeout()` (cqueues), `:close()`.
-- @function pidfd
-- @int pid
-- @treturn[1] pidfd
-- @treturn[2] nil, message, errno (ESRCH when the process is gone)
M.pidfd = core.pidfd

-- process: documented with core.process (csrc/lua/lua_process.c).
M.process = core.process

-- spawn: documented with core.spawn (csrc/lua/lua_spawn.c); this checks
-- the option names and resolves a cgroup path to a handle first.
local spawn_options = {
  env = "any", cwd = "any", cgroup = "any", stdin = "any", stdout = "any", stderr = "any", setsid = "any",
  pgroup = "any", cgroup_fallback = "any", user = "any", group = "any", groups = "any", umask = "any",
  rlimits = "any", pdeathsig = "any", no_new_privs = "any", keyring = "any", exec_timeout = "any", fds = "any",
}
-- The argv is the integer keys; core.spawn checks the values.
local spawn_how = { required = true, positional = true }

-- A cgroup path means what takana.cgroup(path) means: relative to the
-- cgroup2 mount, "/" being its root. A path that already begins with the
-- mount point ("/sys/fs/cgroup/x") is a filesystem path, opened by the C
-- side as it is.
local function under_cgroup2_mount(path)
  local m = M.cgroup.mounts()
  local mnt = m and m.v2
  if not mnt then return false end
  if mnt:sub(-1) ~= "/" then mnt = mnt .. "/" end
  return path:sub(1, #mnt) == mnt or path .. "/" == mnt
end

function M.spawn(t, ...)
  check_options("spawn", 1, t, spawn_options, spawn_how)
  nargs("spawn", 1, select("#", ...) + 1)
  if type(t.cgroup) == "string" and not under_cgroup2_mount(t.cgroup) then
    local cg, err, errno = M.cgroup(t.cgroup)
    if not cg then
      local hint = errno == ENOENT and " (create it first, e.g. with cgroup:mkdir())" or ""
      return nil, "spawn " .. tostring(rawget(t, 1)) .. ": " .. err .. hint, errno
    end
    local copy = table.move(t, 1, rawlen(t), 1, {})   -- argv has the raw length, as in core.spawn
    for k, v in pairs(t) do copy[k] = v end
    copy.cgroup = cg
    local child, e2, n2 = core.spawn(copy)
    cg:close()
    if child then return child end
    return nil, e2, n2
  end
  return core.spawn(t)
end

--- Waits until at least one object is readable (a pidfd whose process
-- exited, a pipe with data, a signals object with a signal pending, a timer
-- that expired...) or, for an object whose `events()` is "w" (a child's
-- stdin pipe), writable. For scripts without an event loop.
-- @tparam {object,...} objects anything with `:fileno()`
-- @number[opt] timeout seconds, 0 to 1 year (longer raises; waits past
--   epoll's 24.8 days go in slices); nil waits forever
-- @treturn[1] {object,...} the ready ones, in the order given (empty on timeout)
-- @treturn[2] nil, message, errno
function M.poll(objects, timeout, ...)
  if type(objects) ~= "table" then argerror("poll", 1, "table expected, got " .. type(objects)) end
  nargs("poll", 2, select("#", ...) + 2)
  if timeout ~= nil and type(timeout) ~= "number" then
    argerror("poll", 2, "number expected, got " .. type(timeout))
  end
  if timeout ~= nil and not (timeout >= 0 and timeout <= 86400 * 365) then
    argerror("poll", 2, "timeout must be 0..1 year (seconds), or nil to wait forever")
  end
  local fds, pri = {}, {}
  for i, o in ipairs(objects) do
    -- Not a tail call: an error raised by fileno then carries no position.
    local ok, fd, ferr, ferrno = pcall(function() local a, b, c = o:fileno() return a, b, c end)
    if ok and fd == nil and ferr then return nil, ("poll: object #%d: %s"):format(i, ferr), ferrno end
    if not ok or math.type(fd) ~= "integer" then
      argerror("poll", 1, ("object #%d has no usable fileno()%s"):format(i, ok and "" or ": " .. tostring(fd)))
    end
    fds[i] = fd
    -- cgroup handles signal changes as priority data ("p"), not as input;
    -- a child's stdin pipe is ready when writable ("w").
    local ok2, ev = pcall(function() return o:events() end)
    pri[i] = ok2 and (ev == "p" or (ev == "w" and "w"))
  end
  local idx, err, errno = core.poll_fds(fds, timeout, pri)
  if not idx then return nil, err, errno end
  local ready = {}
  for i, k in ipairs(idx) do ready[i] = objects[k] end
  return ready
end

--- A poller: one epoll set kept across waits, for loops that wait on the
-- same objects again and again. `takana.poll` is the one-shot form over a
-- set it borrows; its LDoc is in csrc/lua/lua_poller.c, once.
-- @function poller
-- @treturn[1] poller `:add(obj[, events])`, `:modify(obj, events)`,
--   `:remove(obj)`, `:wait([timeout])` (the ready objects in a table the
--   poller reuses, and their count), `:fileno()`, the cqueues protocol,
--   `:close()`
-- @treturn[2] nil, "poller: message", errno
M.poller = core.poller

-- Best first: the order "auto" tries them in.
local event_backends = core.event_backends

--- The snapshot backends, best first: the order `backend = "auto"` tries
-- them in (`"kfunc"`, `"iter"`, `"proc"`). A copy: changing it changes nothing.
-- @table snapshot_backends
M.snapshot_backends = table.move(snapshot_backends, 1, #snapshot_backends, 1, {})

--- The event backends, best first: the order `events{backend = "auto"}`
-- tries them in (`"bpf"`, `"connector"`, `"poll"`). A copy.
-- @table event_backends
M.event_backends = table.move(event_backends, 1, #event_backends, 1, {})
local is_event_backend = {}
for _, name in ipairs(event_backends) do is_event_backend[name] = true end
local event_types = { fork = true, exec = true, exit = true, comm = true }
local event_options = { backend = "string", interval = "number", buffer = "number", queue = "number" }
-- The types wanted are the integer keys.
local event_how = { positional = true }

--- Subscribes to process events.
-- `t = {"fork", "exec", "exit", "comm"; backend=, interval=, buffer=}`: the
-- types wanted (default all four); `backend` "auto" (default: bpf, then
-- connector, then poll, the first that opens), "bpf", "connector" or
-- "poll"; `interval` seconds between snapshots for poll (default 0.1);
-- `buffer` bytes of ring (bpf) or socket buffer (connector); `queue` events
-- held in user space at most (default 16384): a read() moves no more from
-- the kernel, whose buffer then overflows and is counted lost. poll sees
-- fork, exit and comm only: asked for exec, it refuses; by default it
-- delivers those three.
-- @tparam table t the types and the options above
-- @treturn[1] events a stream with `.backend`, `.skipped` (why better
--   backends were not used), `.unavailable` (`{field = why}` for fields its
--   backend fills but this kernel cannot: `loginuid` without CONFIG_AUDIT),
--   `:read()`, `:lost()`, `:stats()`, `:fileno()`, the cqueues pollable
--   protocol, `:close()`
-- @treturn[2] nil, `"events: <backend> backend unavailable: <why>"`, errno
function M.events(t, ...)
  nargs("events", 1, select("#", ...) + 1)
  t = check_options("events", 1, t, event_options, event_how)
  local mask, any = 0, false
  for k, v in pairs(t) do
    if math.type(k) == "integer" then
      if type(v) ~= "string" or not event_types[v] then
        argerror("events", 1, ("unknown event type %s (fork, exec, exit or comm)"):format(
          type(v) == "string" and ("'" .. v .. "'") or type(v)))
      end
      mask = mask | core.event_bits[v]
      any = true
    end
  end
  if not any then
    for name in pairs(event_types) do mask = mask | core.event_bits[name] end
  end
  local backend = t.backend or "auto"
  if backend ~= "auto" and not is_event_backend[backend] then
    local n = #event_backends
    argerror("events", 1, ("unknown backend '%s' (auto, %s or %s)"):format(backend,
      table.concat(event_backends, ", ", 1, n - 1), event_backends[n]))
  end
  local imin, imax = core.event_interval_min, core.event_interval_max
  if t.interval and not (t.interval >= imin and t.interval <= imax) then
    argerror("events", 1, ("interval must be between %g and %g seconds"):format(imin, imax))
  end
  if t.buffer and (math.type(t.buffer) ~= "integer" or t.buffer < 0 or t.buffer > core.event_buffer_max) then
    argerror("events", 1, "buffer must be an integer number of bytes, 0..1 GiB")
  end
  if t.queue and (math.type(t.queue) ~= "integer" or t.queue < 1 or t.queue > core.event_queue_max) then
    argerror("events", 1, ("queue must be an integer number of events, 1..%d"):format(core.event_queue_max))
  end
  -- Without types asked for, poll delivers what it can see.
  local function mask_for(name)
    if name == "poll" and not any then return mask & ~core.event_bits.exec end
    return mask
  end
  if backend ~= "auto" then
    local ev, why, errno = core.events_open(backend, mask_for(backend), t.interval, t.buffer, nil, t.queue)
    if ev then return ev end
    return nil, why, errno
  end
  local skipped = {}
  for i, name in ipairs(event_backends) do
    local ev, why, errno, reason = core.events_open(name, mask_for(name), t.interval, t.buffer, skipped, t.queue)
    if ev then return ev end
    skipped[name] = reason
    if i == #event_backends then
      local better = {}
      for k = 1, i - 1 do better[k] = event_backends[k] .. ": " .. skipped[event_backends[k]] end
      return nil, ("%s (%s)"):format(why, table.concat(better, "; ")), errno
    end
  end
end

-- A shortage that passes: out of descriptors or memory.
local transient = { [core.errno.EMFILE] = true, [core.errno.ENFILE] = true, [core.errno.ENOMEM] = true }

-- require for a module loaded on first use. Its file is opened only then,
-- so out of descriptors (EMFILE) require cannot read it and raises "module
-- not found": that is a runtime failure, answered as nil, message, errno
-- (the error of opening the first path require tries). A module that is
-- missing or broken still raises.
local function lazy_require(name)
  local ok, mod = pcall(require, name)
  if ok then return mod end
  local file = name:gsub("%.", "/")
  for template in package.path:gmatch("[^;]+") do
    local f, msg, errno = io.open((template:gsub("%?", file)))
    if f then
      f:close()
      break
    elseif transient[errno] then
      return nil, ("%s: cannot load it now: %s"):format(name, msg), errno
    end
  end
  error(mod, 0)
end

-- What takana.cgroup is while its module cannot be loaded: every function
-- and the call answer the load's error; nothing is kept, so the next access
-- loads again.
local function unavailable(msg, errno)
  local function fail() return nil, msg, errno end
  return setmetatable({}, { __call = fail, __index = function() return fail end })
end

--- cgroup v2 handles; see the takana.cgroup module: `takana.cgroup(path)`,
-- `takana.cgroup.self()`, `takana.cgroup.of(pid|pidfd)`. Loaded on first
-- use: a script (or `takana ps`) that never touches a cgroup does not pay
-- for compiling it (about 1.5 ms). Where that first use finds no free
-- descriptor, its functions return `nil, "takana.cgroup: cannot load it now:
-- ...", EMFILE` until a later access loads it.
-- @field cgroup

--- The Prometheus text format as a library (`takana.prometheus.new()`); see
-- the takana.prometheus module. Loaded on first use, as `takana.cgroup`.
-- @field prometheus

--- The JSON codec of the CLI (`takana.json.encode(v)`: one line, pure
-- ASCII; `takana.json.decode(s)`), for scripts that log JSON lines. Loaded
-- on first use, as `takana.cgroup`.
-- @field json
local lazy_fields = { cgroup = "takana.cgroup", prometheus = "takana.prometheus", json = "takana.json" }
setmetatable(M, { __index = function(t, k)
  local name = lazy_fields[k]
  if not name then return nil end
  local mod, err, errno = lazy_require(name)
  if not mod then return unavailable(err, errno) end
  rawset(t, k, mod)
  return mod
end })

--- A supervisor: services as cgroups, restart policy in Lua; see
-- `takana.supervisor` (loaded on first use, as `takana.cgroup`).
-- @tparam table opts
-- @treturn[1] supervisor
-- @treturn[2] nil, message, errno
function M.supervisor(opts, ...)
  local S, err, errno = lazy_require "takana.supervisor"
  if not S then return nil, err, errno end
  return S.new(opts, ...)
end

local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local c = {}
  for k, x in pairs(v) do c[k] = deep_copy(x) end
  return c
end

-- What the first probe learned: the host does not change under a process,
-- and a probe loads and attaches every backend (tens of ms).
local probed

-- What processes are read through: the kernel, BTF, the snapshot tiers
-- and /proc. seen(errno) notes the errno of each failure; passing() notes
-- a failure that may pass without one (see probe_fresh).
local function probe_reading(section, seen, passing)
  section("kernel", function() return core.kernel_release() end)
  section("btf", function()
    local btf, _, errno = core.btf_readable()
    seen(errno)
    return { ok = btf == true, why = not btf and "no /sys/kernel/btf/vmlinux (kernel without CONFIG_DEBUG_INFO_BTF)" or nil }
  end)

  section("snapshot", function()
    local t = {}
    for _, name in ipairs(snapshot_backends) do
      local ok, snap, _, errno, reason = pcall(tiers[name], {})
      if not ok then passing() end
      seen(errno)
      local b = { ok = ok and snap ~= nil, why = (not ok and tostring(snap)) or reason }
      local info = b.ok and core.bpf_info and core.bpf_info(name)
      if info then b.load_ns = info.load_ns end
      t[name] = b
      if b.ok and not t.backend then t.backend = name end
    end
    return t
  end)

  -- /proc itself: hidepid hides other users' processes from every /proc
  -- reader, takana's proc backend included.
  section("proc", function()
    local readable, _, errno = core.proc_readable()
    local t = { ok = readable == true }
    if not t.ok then
      seen(errno)
      passing()
      t.why = "/proc is not mounted (or no descriptor is free to read it)"
      return t
    end
    local hidepid, _, herrno = core.proc_hidepid()
    seen(herrno)
    t.hidepid = hidepid or nil
    if t.hidepid and t.hidepid ~= "0" and t.hidepid ~= "off" then
      t.note = ("/proc is mounted with hidepid=%s: processes of other users are %s"):format(
        t.hidepid, (t.hidepid == "1" or t.hidepid == "noaccess") and
        "listed but unreadable (snap.denied counts them)" or "invisible to this process")
    end
    return t
  end)
end

-- The objects takana opens: pidfds, clone3 children, event streams,
-- cgroups. seen and passing: as for probe_reading.
local function probe_objects(section, seen, passing)
  section("pidfd", function()
    local pok, p, perr, perrno = pcall(core.pidfd, core.getpid())
    if not pok then passing() end
    seen(perrno)
    if pok and p then p:close() end
    return { ok = pok and p ~= nil, why = (not pok and tostring(p)) or perr }
  end)

  section("clone3", function()
    local sok, child, serr, serrno = pcall(core.spawn, { "/bin/true", stdout = "null" })
    if not sok then passing() end
    seen(serrno)
    local t = { ok = sok and child ~= nil and child.mechanism == "clone3" }
    if not t.ok then
      t.why = (not sok and tostring(child)) or serr or "clone3 refused; spawn falls back to posix_spawn"
    end
    if sok and child then child:wait() child:close() end
    return t
  end)

  -- Every event type at once: a backend is "yes" only if all of its
  -- programs load and attach (fork alone loaded on 6.1 where exit did not).
  section("events", function()
    local t, all = {}, 0
    for _, bit in pairs(core.event_bits) do all = all | bit end
    for _, name in ipairs(event_backends) do
      local ok, ev, _, errno, reason = pcall(core.events_open, name, name == "poll" and core.event_bits.fork or all, 1.0)
      if not ok then passing() end
      seen(errno)
      local e = { ok = ok and ev ~= nil }
      if not e.ok then e.why = (not ok and tostring(ev)) or reason end
      if ok and ev then ev:close() end
      t[name] = e
      if e.ok and not t.backend then t.backend = name end
    end
    return t
  end)

  -- Inside section: loading takana.cgroup needs a descriptor too.
  section("cgroup", function() return M.cgroup.probe() end)
end

-- A fresh probe, and whether it may be kept. A shortage passes (out of
-- descriptors or memory: the errno of a failure says so), and so may a
-- failure that raised or that has no errno to tell: a probe that met one
-- is not kept.
local function probe_fresh()
  local r, keep = {}, true
  local function passing() keep = false end
  local function seen(errno)
    if transient[errno] then keep = false end
  end
  -- Each section is computed on its own: one that raises (no /proc, no
  -- descriptors left) or fails (nil, message, errno) becomes
  -- { ok = false, why = ... } and the rest stand.
  local function section(name, fn)
    local ok, v, err, errno = pcall(fn)
    if not ok then passing() end
    seen(errno)
    r[name] = ok and v or { ok = false, why = tostring(ok and err or v) }
  end
  probe_reading(section, seen, passing)
  if type(r.kernel) ~= "string" then r.kernel = nil end
  probe_objects(section, seen, passing)
  return r, keep
end

--- Reads a script's command line as its help text describes it (in the
-- manner of Penlight's lapp): the text is the specification. Its rules:
--
-- * the first line starting `usage:` is printed after each mistake; its
--   next word, without directory and `.lua`, names the script
--   (`usage: runaway.lua ...` gives `runaway`). A text without one raises;
-- * a line whose first word is `--name` declares an option; a word one
--   blank after it is its metavar (a value is taken), two blanks or more
--   start the description, and lines indented deeper continue it. No
--   metavar: a flag, `false` unless given;
-- * a metavar `N` takes a whole number, `F`, `S` or `PCT` a number
--   (`tonumber`), each finite and >= 0; any other metavar a string;
-- * `(default X)` in the description gives the value when the option is
--   absent (X ends at a blank, `;`, `,` or `)`); a metavar ending `...` or
--   "repeatable" in the description collects each value in a list
--   (`{}` when absent);
-- * an indented line whose first word is an uppercase `NAME`, then two
--   blanks or the end of the line, declares an operand; `NAME...` one or
--   more, `[NAME]` an optional one. The operands are the array part of
--   the result, in order; an operand the text does not declare is a
--   mistake.
--
-- The command line: `--name value` or `--name=value`, options and operands
-- in any order, `--` ends the options. A value is the next argument
-- whatever it looks like (`--cgroup --json` names a cgroup "--json").
-- Keys are the names with `-` as `_` (`--dry-run` is `opts.dry_run`).
-- `--help` (anywhere before `--`) writes the text on stdout and exits 0.
-- A mistake (an unknown option, a missing value or operand, a value that
-- is not the number the metavar says) writes `NAME: message` and the usage
-- line on stderr and exits 2, as the returned function does for the
-- script's own checks.
--
--     local opts, usage_error = takana.options [[
--     usage: runaway.lua --uid N [options]
--       --uid N        watch the processes of this user
--       --share F      the share of one CPU that is too much (default 0.5)
--       --dry-run      log what would be signalled, signal nothing
--     ]]
--     if opts.share > 1 then usage_error("--share is at most 1") end
-- @string text the `--help` text
-- @tparam[opt] {string,...} argv the arguments (default: the global `arg`)
-- @treturn table opts
-- @treturn function usage_error(message): writes `NAME: message` and the
--   usage line on stderr, exits 2
function M.options(text, argv, ...)
  -- (Its summary line names no option: LDoc drops a function whose first
  -- line holds two dashes.)
  return require("takana.options")(text, argv, ...)
end

--- Subscribes to signals through a signalfd: they are blocked in the calling
-- thread and arrive as data instead of running their default action.
-- `t = {"TERM", "INT", "HUP", "CHLD", 10, ...}`: names (with or without
-- "SIG", any case) or numbers. KILL and STOP cannot be caught, and the
-- fault signals (SEGV, BUS, FPE, ILL) never reach a signalfd: asking for
-- them raises. Several objects may hold the same signal: each arrival goes
-- to the first that reads it, and the signal stays blocked until the last
-- holder closes. `close` unblocks what this object alone held and was not
-- blocked before; a signal still pending is then delivered with its
-- disposition (TERM's default ends the process): drain with `:each()`
-- first. A spawned child gets the mask it would have had without takana.
-- The mask is per thread: subscribe before starting other threads (they
-- inherit it); while another thread has one of the signals unblocked (it
-- would take them), signals() returns `nil, message, EBUSY`. CHLD while
-- SIGCHLD is ignored (SIG_IGN from the parent: the kernel then reaps
-- children and sends nothing) returns `nil, message, EINVAL`. CHLD wakes a
-- loop; it reaps nothing and merges (one CHLD for several exits): wait on
-- each child's pidfd.
-- @function signals
-- @tparam {string|int,...} t names ("TERM", "SIGHUP", "chld") or numbers
-- @treturn[1] signals `:read([timeout])` (one table `{signo=, name=, code=,
--   pid=, uid=, status=, child=}`, or nil when none), `:each()` (drains what
--   is pending), `:list()`, `:fileno()`, the cqueues protocol, `:close()`
-- @treturn[2] nil, "signals: signalfd: message", errno
M.signals = core.signals

--- A timerfd on CLOCK_MONOTONIC, pollable: readable once it has expired.
-- `takana.timer(after, every)`: seconds until the first expiration (0: at
-- once; nil: disarmed until `:set`), then every `every` seconds (nil or 0:
-- once). Both 0..1 year.
-- @function timer
-- @number[opt] after seconds until the first expiration, 0..1 year (0: at
--   once); nil: created disarmed, for a later `:set`
-- @number[opt] every seconds between the following ones; nil or 0: once
-- @treturn[1] timer `:read([timeout])` (expirations since the last read, 0
--   when none), `:set(after, every)`, `:cancel()`, `:remaining()` (seconds
--   to the next expiration and the period, nil when disarmed), `:fileno()`,
--   the cqueues protocol, `:close()`
-- @treturn[2] nil, "timer: message", errno
M.timer = core.timer

-- Pressure stall information: the host's (takana.pressure(resource)) and
-- PSI triggers (takana.pressure_trigger{...}); their LDoc is in
-- csrc/lua/lua_pressure.c, once.
M.pressure = core.pressure
M.pressure_trigger = core.pressure_trigger

--- CLOCK_MONOTONIC in seconds (a float): for intervals and deadlines; it
-- never jumps.
-- @function now
M.now = core.now

--- CLOCK_BOOTTIME in nanoseconds (an integer): the clock of snapshot and
-- event `time_ns` and record `start_ns`. It is CLOCK_MONOTONIC plus the time
-- spent suspended, so `boottime_ns() >= now() * 1e9` always.
-- @function boottime_ns
M.boottime_ns = core.boottime_ns

--- A CLOCK_BOOTTIME stamp (an event's `time_ns`, a snapshot's `time_ns`, a
-- record's `start_ns`) as CLOCK_REALTIME ns since the epoch, by the clocks'
-- offset now. Both clocks count time suspended, so a suspend since the
-- stamp changes nothing; a wall-clock step since (settimeofday, NTP) moves
-- the result with it. Events carry it already as `realtime_ns`.
-- @function to_realtime
-- @int ns CLOCK_BOOTTIME ns, >= 0
-- @treturn int CLOCK_REALTIME ns (`// 1000000000` gives what `os.time()` counts)
M.to_realtime = core.to_realtime

--- CLOCK_REALTIME in seconds since the epoch, with the fraction os.time()
-- lacks: for log stamps. It jumps when the clock is set; never use it for intervals.
-- @function realtime
M.realtime = core.realtime

--- `subreaper(true|false)` sets or clears `PR_SET_CHILD_SUBREAPER`: orphans
-- among this process's descendants are re-parented to it instead of init,
-- and it must reap them. `subreaper()` returns the current flag.
-- @function subreaper
-- @tparam[opt] boolean on
-- @treturn[1] boolean
-- @treturn[2] nil, message, errno
M.subreaper = core.subreaper

--- This process's environment, `{NAME = value, ...}`, from the C library's
-- `environ` (so setenv by C code is seen; /proc/self/environ is not read).
-- @function environ
-- @treturn table
M.environ = core.environ

--- What this host offers and which backend each capability uses, with the
-- reason for every "no". Never raises (but for a wrong option). The first
-- call probes (loads every backend, spawns a child); later calls return a
-- copy of what it learned, unless `fresh` is set.
-- @tparam[opt] table opts `fresh` (boolean): probe again (and remember that)
-- @treturn table `kernel`, `btf`, `snapshot = {kfunc=, iter=, proc=, backend=}`,
--   `events = {bpf=, connector=, poll=, backend=}`, `proc` (with `hidepid`
--   and a `note` when other users' processes are hidden),
--   `pidfd`, `clone3`, `cgroup` (mode, `v2_mount`, `v2_controllers`, v1 mounts);
--   each capability has `ok` and, when not ok, `why`.
function M.probe(opts)
  opts = check_options("probe", 1, opts, { fresh = "boolean" })
  if opts.fresh or not probed then
    local r, keep = probe_fresh()
    probed = keep and r or nil
    return r
  end
  return deep_copy(probed)
end

--- The login name of a user, from the passwd database (getpwuid_r, so
-- NSS sources count): what `takana ps -o user` shows.
-- @function user_name
-- @int uid 0..2^32-1
-- @treturn string|nil the name; nil when the database has no entry
M.user_name = core.user_name

--- Writes `dir/name` atomically, for `node_exporter`'s textfile collector and
-- the like: the data goes to a new file made exclusively (`O_EXCL` |
-- O_NOFOLLOW, under a random name) through a descriptor of `dir`, is
-- synced, then renamed over `name`; a reader sees the old file or the new
-- one, never part of one, and a symlink planted in `dir` is never
-- followed. A `dir` that group or others may write is refused with EPERM,
-- unless it is sticky and owned by root or the caller.
-- @function textfile_write
-- @string dir
-- @string name a plain file name (no "/", at most 240 bytes)
-- @string data
-- @treturn[1] true
-- @treturn[2] nil, "textfile dir/name: step: message", errno
M.textfile_write = core.textfile_write

--- Descriptors held by the /proc backend's cache: `{fds=n, process_fds=n, limit=n}`;
-- `process_fds` counts every /proc reader of the process (poll event
-- streams too), which share the budget `limit`.
-- @function proc_cache_info
M.proc_cache_info = core.proc_cache_info

--- Closes the /proc backend's cached descriptors.
-- @function proc_cache_close
M.proc_cache_close = core.proc_cache_close

return M
