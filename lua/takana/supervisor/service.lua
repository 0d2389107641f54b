--- takana.supervisor, services: declaring them, their cgroups, starting,
-- exits and restarts, stopping.
-- @module takana.supervisor
local takana = require "takana"
local core = require "takana.core"
local C = require "takana.supervisor.class"
local M, supervisor, now, argerror, nargs = C.M, C.supervisor, C.now, C.argerror, C.nargs
local check_options, required, signum, OCTAL_0600, SUN_PATH_MAX = C.check_options, C.required, C.signum, C.OCTAL_0600, C.SUN_PATH_MAX
local live, populated, oom_count, cpu_ns, close_obj = C.live, C.populated, C.oom_count, C.cpu_ns, C.close_obj
local main_status = C.main_status
local ENOENT, ESRCH, EEXIST = C.E.ENOENT, C.E.ESRCH, C.E.EEXIST

-- Seconds a service with `ready` has to say so (systemd's TimeoutStartSec).
local DEFAULT_READY_TIMEOUT = 90

--- The options of `sup:service{...}`, one row each: `name`, `type` (as
-- the check reads it: Lua types joined by "|"), `doc`, `spawn` for
-- those handed to `takana.spawn` as they are, and `reload`: what a change
-- of it does when `sup:reload` applies a new declaration ("restart": the
-- stop sequence, then a start with it; "live": applied to the running
-- service, `limits` written to its cgroup; "added": read only when the
-- service is added). The check, the reference below and doc/reference.md's
-- table (tools/docgen.lua) all come from this list.
-- @table service_options
M.service_options = {
  { name = "name", type = "string", doc = "required: 1-64 of `[A-Za-z0-9_.@-]`, not starting with a punctuation mark" },
  { name = "cmd", type = "table", reload = "restart", doc = "required: `{prog, args...}`" },
  { name = "env", type = "table", reload = "restart", doc = "added to the supervisor's environment" },
  { name = "cwd", type = "string", reload = "restart",
    doc = "the working directory (default `/`; every service also runs in a session of its own, " ..
      "without a controlling terminal, with a session keyring of its own)" },
  { name = "restart", type = "string|function", reload = "live",
    doc = '"on-failure" (default), "always", "never", or `function(svc, record) -> delay or false`' },
  { name = "backoff", type = "table", reload = "live",
    doc = "the delay before a restart: `initial * factor ^ failures`, at most `max`; the failure count is reset "
      .. "by a run of `reset_after` s. Default `{initial=0.1, max=30, factor=2, reset_after=60}`; "
      .. "`{initial=0}` restarts at once" },
  { name = "start_limit", type = "table", reload = "live",
    doc = "at most `burst` starts within `interval` s, then state \"failed\", with the reason. Default "
      .. "`{burst=5, interval=10}`; `{burst=0}` turns it off" },
  { name = "ready", type = "string|table", reload = "restart",
    doc = '"notify" (sd_notify), `{notify=true, timeout=s}`, or `{fd=n, timeout=s}` (s6): running once '
      .. "ready. Not ready within `timeout` s (default 90, as systemd's TimeoutStartSec; `false` or 0 turns "
      .. "it off): the stop sequence, a failed start (the restart policy and start limit count it) with the "
      .. "reason \"not ready after N s\" and an exit record with `ready_timeout = true`" },
  { name = "stop", type = "table", reload = "live",
    doc = '`{signal="TERM", timeout=5}` (the defaults): the signal to the whole cgroup, then after `timeout` s '
      .. 'cgroup.kill, then a wait until empty; `timeout=0` kills at once' },
  { name = "depends", type = "table", reload = "live",
    doc = "`{names}`: started once these are ready; until then \"waiting\", its reason naming the first "
      .. "that is not (and why, when it failed)" },
  { name = "limits", type = "table", reload = "live", doc = '`{["memory.max"]=...}`, applied loudly' },
  { name = "log", type = "string|function|boolean", reload = "live",
    doc = "the service's own log target, as the supervisor's `log`" },
  { name = "autostart", type = "boolean", reload = "added", doc = "default true" },
  { name = "watchdog", type = "number", reload = "restart",
    doc = "seconds (0.01..86400): once ready, the service must send `WATCHDOG=1` on its `NOTIFY_SOCKET` at least "
      .. "that often (it is told through `WATCHDOG_USEC`), else it gets SIGABRT, the stop sequence and an exit "
      .. "record with `watchdog = true` (a failure)" },
  { name = "user", type = "string|number", reload = "restart", spawn = true, doc = "to spawn" },
  { name = "group", type = "string|number", reload = "restart", spawn = true, doc = "to spawn" },
  { name = "groups", type = "table", reload = "restart", spawn = true, doc = "to spawn" },
  { name = "umask", type = "number", reload = "restart", spawn = true, doc = "to spawn" },
  { name = "rlimits", type = "table", reload = "restart", spawn = true, doc = "to spawn" },
  { name = "no_new_privs", type = "boolean", reload = "restart", spawn = true, doc = "to spawn" },
  { name = "pdeathsig", type = "string|number", reload = "restart", spawn = true, doc = "to spawn" },
}
local svc_options, spawn_options = {}, {}
C.svc_options = svc_options
local build_service
for _, o in ipairs(M.service_options) do
  svc_options[o.name] = o.type
  if o.spawn then spawn_options[#spawn_options + 1] = o.name end
end

--- A service's exit record, one row a field: what `restart` and `on_exit`
-- functions receive, `svc.exits` keeps and `ctl status` shows as
-- `last_exit` (the rows with `status`; "round": rounded to ms). A run that
-- could not start has only `error`, `errno` and `runtime`. `code`,
-- `signal` and `core` mean what they mean in `pidfd:wait()`'s table and
-- an exit event.
--
-- <!-- schema:exit-record -->
-- - `code` yes: the main process's exit status, when it exited
-- - `signal` yes: the signal that ended it, when one did
-- - `core` true when it dumped core
-- - `oom` yes: true when `memory.events` oom_kill rose during the run
-- - `cpu_ns` yes: the cgroup's CPU time for the run
-- - `maxrss_bytes` yes: the main process's peak RSS (the reaping waitid's rusage, `child:usage()`)
-- - `runtime` yes: seconds from the start to the end of the run
-- - `pid` the main process (the `MAINPID=` one, when named)
-- - `adopted` true for a run adopted from an earlier supervisor
-- - `stopped` yes: true when the run ended because a stop was asked for
-- - `watchdog` yes: true when the watchdog ended the run (a failure)
-- - `ready_timeout` yes: true when the run was stopped for not being ready in time (a failure)
-- - `main_exited` yes: true when the main process's exit ended the run
-- - `time` `os.time()` at the end of the run
-- - `error` yes: why the run could not start (no other field but `errno` and `runtime`)
-- - `errno` with `error`: its errno
-- <!-- /schema:exit-record -->
--
-- @table exit_record
M.exit_record = {
  { name = "code", status = true, doc = "the main process's exit status, when it exited" },
  { name = "signal", status = true, doc = "the signal that ended it, when one did" },
  { name = "core", doc = "true when it dumped core" },
  { name = "oom", status = true, doc = "true when `memory.events` oom_kill rose during the run" },
  { name = "cpu_ns", status = true, doc = "the cgroup's CPU time for the run" },
  { name = "maxrss_bytes", status = true,
    doc = "the main process's peak RSS (the reaping waitid's rusage, `child:usage()`)" },
  { name = "runtime", status = "round", doc = "seconds from the start to the end of the run" },
  { name = "pid", doc = "the main process (the `MAINPID=` one, when named)" },
  { name = "adopted", doc = "true for a run adopted from an earlier supervisor" },
  { name = "stopped", status = true, doc = "true when the run ended because a stop was asked for" },
  { name = "watchdog", status = true, doc = "true when the watchdog ended the run (a failure)" },
  { name = "ready_timeout", status = true, doc = "true when the run was stopped for not being ready in time (a failure)" },
  { name = "main_exited", status = true, doc = "true when the main process's exit ended the run" },
  { name = "time", doc = "`os.time()` at the end of the run" },
  { name = "error", status = true, doc = "why the run could not start (no other field but `errno` and `runtime`)" },
  { name = "errno", doc = "with `error`: its errno" },
}

--- Declares a service (doc/reference.md's Supervision section has the
-- whole story). Options (`service_options`):
--
-- <!-- schema:service-options -->
-- - `name` (string): required: 1-64 of `[A-Za-z0-9_.@-]`, not starting with a punctuation mark
-- - `cmd` (table): required: `{prog, args...}` (on reload: restart)
-- - `env` (table): added to the supervisor's environment (on reload: restart)
-- - `cwd` (string): the working directory (default `/`; every service also runs in a session of
--   its own, without a controlling terminal, with a session keyring of its own) (on reload:
--   restart)
-- - `restart` (string or function): "on-failure" (default), "always", "never", or `function(svc,
--   record) -> delay or false` (on reload: live)
-- - `backoff` (table): the delay before a restart: `initial * factor ^ failures`, at most `max`;
--   the failure count is reset by a run of `reset_after` s. Default `{initial=0.1, max=30,
--   factor=2, reset_after=60}`; `{initial=0}` restarts at once (on reload: live)
-- - `start_limit` (table): at most `burst` starts within `interval` s, then state "failed", with
--   the reason. Default `{burst=5, interval=10}`; `{burst=0}` turns it off (on reload: live)
-- - `ready` (string or table): "notify" (sd_notify), `{notify=true, timeout=s}`, or `{fd=n,
--   timeout=s}` (s6): running once ready. Not ready within `timeout` s (default 90, as systemd's
--   TimeoutStartSec; `false` or 0 turns it off): the stop sequence, a failed start (the restart
--   policy and start limit count it) with the reason "not ready after N s" and an exit record with
--   `ready_timeout = true` (on reload: restart)
-- - `stop` (table): `{signal="TERM", timeout=5}` (the defaults): the signal to the whole cgroup,
--   then after `timeout` s cgroup.kill, then a wait until empty; `timeout=0` kills at once (on
--   reload: live)
-- - `depends` (table): `{names}`: started once these are ready; until then "waiting", its reason
--   naming the first that is not (and why, when it failed) (on reload: live)
-- - `limits` (table): `{["memory.max"]=...}`, applied loudly (on reload: live)
-- - `log` (string or function or boolean): the service's own log target, as the supervisor's `log`
--   (on reload: live)
-- - `autostart` (boolean): default true (on reload: added)
-- - `watchdog` (number): seconds (0.01..86400): once ready, the service must send `WATCHDOG=1` on
--   its `NOTIFY_SOCKET` at least that often (it is told through `WATCHDOG_USEC`), else it gets
--   SIGABRT, the stop sequence and an exit record with `watchdog = true` (a failure) (on reload:
--   restart)
-- - `user` (string or number): to spawn (on reload: restart)
-- - `group` (string or number): to spawn (on reload: restart)
-- - `groups` (table): to spawn (on reload: restart)
-- - `umask` (number): to spawn (on reload: restart)
-- - `rlimits` (table): to spawn (on reload: restart)
-- - `no_new_privs` (boolean): to spawn (on reload: restart)
-- - `pdeathsig` (string or number): to spawn (on reload: restart)
-- <!-- /schema:service-options -->
--
-- @tparam table t the options below
-- @treturn service the service table (read its `state`)
function supervisor:service(t, ...)
  nargs("service", 1, select("#", ...) + 1)
  check_options("service", 1, t, svc_options, required)
  local svc = build_service(t)
  if self.services[svc.name] then argerror("service", 1, "service '" .. svc.name .. "' is already declared") end
  self:_register(svc)
  return svc
end

-- A service table from declaration t (checked by check_options already),
-- not yet registered. Raises on a bad option as argument 1 of ctx.fname
-- (default "service"), the message after ctx.where, at ctx.level frames
-- above this function (default 3: sup:service's caller).
function build_service(t, ctx)
  local fname, where, level = "service", "", 3
  if ctx then fname, where, level = ctx.fname, ctx.where, ctx.level end
  local function bad(msg) argerror(fname, 1, where .. msg, level) end
  local name = t.name
  if type(name) ~= "string" or not name:match("^[%w][%w_.@-]*$") or #name > 64 then
    bad("option 'name': 1-64 of [A-Za-z0-9_.@-], not starting with a punctuation mark")
  end
  if type(t.cmd) ~= "table" or #t.cmd == 0 then bad("option 'cmd': {prog, args...} expected") end
  for i, a in ipairs(t.cmd) do
    if type(a) ~= "string" and type(a) ~= "number" then bad(("cmd[%d]: string expected"):format(i)) end
  end
  if type(t.restart) == "string" and not ({ always = 1, ["on-failure"] = 1, never = 1 })[t.restart] then
    bad("option 'restart': \"always\", \"on-failure\", \"never\" or a function expected")
  end
  local ready_mode, ready_timeout = t.ready, DEFAULT_READY_TIMEOUT
  if type(t.ready) == "string" and t.ready ~= "notify" then
    bad("option 'ready': \"notify\" or {fd = n} expected")
  end
  if type(t.ready) == "table" then
    local r = t.ready
    for k in pairs(r) do
      if not ({ fd = 1, notify = 1, timeout = 1 })[k] then
        bad("option 'ready': {notify = true} or {fd = n}, and timeout =, expected (got key '"
          .. tostring(k) .. "')")
      end
    end
    if r.notify ~= nil and r.fd ~= nil then bad("option 'ready': notify or fd, not both") end
    if r.notify == true then
      ready_mode = "notify"
    elseif not (math.type(r.fd) == "integer" and r.fd >= 3 and r.fd < 1024) then
      bad("option 'ready': {notify = true} or {fd = 3..1023} expected")
    else
      ready_mode = { fd = r.fd }
    end
    if r.timeout ~= nil then
      if r.timeout == false or r.timeout == 0 then
        ready_timeout = nil
      elseif not (type(r.timeout) == "number" and r.timeout > 0 and r.timeout <= 86400) then
        bad("option 'ready': timeout = 0..86400 seconds or false expected")
      else
        ready_timeout = r.timeout
      end
    end
  end
  local b = t.backoff or {}
  for k, v in pairs(b) do
    if not ({ initial = 1, max = 1, factor = 1, reset_after = 1 })[k] or type(v) ~= "number" or v < 0 or v ~= v then
      bad("option 'backoff': {initial=, max=, factor=, reset_after=} non-negative numbers expected")
    end
  end
  local sl = t.start_limit or {}
  for k, v in pairs(sl) do
    if not ({ burst = 1, interval = 1 })[k] or type(v) ~= "number" or v < 0 or v ~= v then
      bad("option 'start_limit': {burst=, interval=} non-negative numbers expected")
    end
  end
  local st = t.stop or {}
  for k, v in pairs(st) do
    if k == "signal" then
      if not pcall(signum, "service", 1, v) then
        bad("option 'stop': a signal number or name (TERM, KILL, HUP...) expected, got " .. tostring(v))
      end
    elseif k ~= "timeout" or type(v) ~= "number" or v < 0 or v ~= v then
      bad("option 'stop': {signal=, timeout=} expected")
    end
  end
  for i, d in ipairs(t.depends or {}) do
    if type(d) ~= "string" then bad(("depends[%d]: a service name expected"):format(i)) end
  end
  if t.watchdog ~= nil and not (t.watchdog >= 0.01 and t.watchdog <= 86400) then
    bad("option 'watchdog': 0.01..86400 seconds expected")
  end
  local svc = {
    name = name, cmd = t.cmd, env = t.env, cwd = t.cwd, restart = t.restart or "on-failure",
    backoff = { initial = b.initial or 0.1, max = b.max or 30, factor = b.factor or 2,
      reset_after = b.reset_after or 60 },
    start_limit = { burst = sl.burst or 5, interval = sl.interval or 10 },
    ready_mode = ready_mode, ready_timeout = ready_mode and ready_timeout or nil, stop_signal = signum("service", 1, st.signal or "TERM"),
    stop_timeout = st.timeout or 5, depends = t.depends or {}, limits = t.limits,
    log = t.log, spawn_extra = {}, watchdog = t.watchdog, watchdog_timeouts = 0,
    state = "stopped", want = t.autostart == false and "down" or "up",
    restarts = 0, fails = 0, starts = {}, oom_kills = 0, lines = {}, exits = {},
  }
  for _, k in ipairs(spawn_options) do
    svc.spawn_extra[k] = t[k]
  end
  -- The owner of the service's notify socket: its own user, so that it
  -- and root alone can reach it.
  if t.user ~= nil or t.group ~= nil then
    -- Raised as service's own argument error (core.ids words it so);
    -- raised again here to blame service's caller.
    local ok, uid, gid = pcall(core.ids, t.user, t.group, "service")
    if not ok then error(uid, level) end
    svc.uid, svc.gid = uid, gid
  end
  -- What was declared, kept for a reload to compare (C.decl_copy: tables
  -- copied, so a caller's later edit of its own table changes nothing).
  svc.decl = C.decl_copy(t)
  return svc
end
C.build_service = build_service

-- Adds a built service to the supervisor's set, at the end of its order.
function supervisor:_register(svc)
  local name = svc.name
  -- Its name beneath the runtime directory; a short one where the service's
  -- own would not fit a socket address ('_' starts no service name).
  self.notify_seq = (self.notify_seq or 0) + 1
  svc.notify_name = name .. ".notify"
  if #self.runtime + 1 + #svc.notify_name > SUN_PATH_MAX then
    svc.notify_name = ("_%d.notify"):format(self.notify_seq)
  end
  self.services[name] = svc
  self.order[#self.order + 1] = name
end

-- The service called name, or nil, "fname: no service 'name'", ENOENT.
function supervisor:_lookup(fname, name)
  local svc = self.services[name]
  if not svc then return nil, fname .. ": no service '" .. tostring(name) .. "'", ENOENT end
  return svc
end

--- Removes a service: stops it first (the stop sequence), then forgets it.
function supervisor:remove(name)
  local svc, err, errno = self:_lookup("remove", name)
  if not svc then return nil, err, errno end
  svc.removing = true
  self:stop(name)
  return true
end

--- The service table of name, or nil.
function supervisor:get(name) return self.services[name] end

-- ---- cgroups ----

function supervisor:_svc_cgroup(svc)
  if svc.cg then return svc.cg end
  -- Made here, or found (an earlier run's, adopted): only one made here is
  -- removed at close.
  local cg, err, errno = self.cg:mkdir(svc.name)
  local made = cg ~= nil
  if not cg and errno == EEXIST then cg, err, errno = self.cg:mkdir(svc.name, { exist_ok = true }) end
  if not cg then return nil, err, errno end
  local ok
  ok, err, errno = self:_watch(cg, function() self:_cgroup_event(svc) end, true)
  if not ok then
    cg:close()
    return nil, err, errno
  end
  svc.cg = cg
  svc.cg_made = svc.cg_made or made
  svc.cgpath = "/" .. cg.relpath
  svc.cg_watched = true
  return cg
end

-- Whether processes remain in cg. cgroup.events can still say populated
-- for a moment after the last process exited (newer kernels unlink a dead
-- task from its cgroup only after its last switch), while cgroup.procs no
-- longer lists a dying leader: so "populated" is confirmed by cgroup.procs,
-- and an exit is handled at once instead of at the next cgroup.events
-- notification (rate-limited by the kernel to one per 10 ms).

-- ---- start ----

-- nil when svc's dependencies are all ready, else why it waits: the first
-- that is not, with its state and reason.
function supervisor:_deps_wait(svc)
  for _, d in ipairs(svc.depends) do
    local dep = self.services[d]
    if not dep then return "waiting for " .. d .. ": no such service" end
    if dep.state ~= "running" then
      return ("waiting for %s: %s%s"):format(d, dep.state, dep.reason and (": " .. dep.reason) or "")
    end
  end
end

function supervisor:_fail(svc, reason)
  svc.state = "failed"
  svc.reason = reason
  svc.deadline = nil
  self:_main_check(svc)
end

-- The start limit: nil, or why svc may not start now. Leaves in
-- svc.starts the starts within the interval.
local function start_limited(svc, t)
  local sl = svc.start_limit
  local kept = {}
  for _, s in ipairs(svc.starts) do if t - s < sl.interval then kept[#kept + 1] = s end end
  svc.starts = kept
  if sl.burst > 0 and #kept >= sl.burst then
    return ("start limit: %d starts within %g s"):format(#kept, sl.interval)
  end
end

-- Applies svc's limits to its cgroup cg: nil, or why one failed.
function supervisor:_apply_limits(svc, cg)
  local keys = {}
  for k in pairs(svc.limits) do keys[#keys + 1] = k end
  table.sort(keys)
  -- The controllers the limits need, enabled for the services' cgroups
  -- (once each); a controller that cannot be enabled fails the service
  -- with the reason, never a silent run without its limit.
  self.enabled = self.enabled or {}
  for _, k in ipairs(keys) do
    local c = k:match("^(%w+)%.")
    if c and not self.enabled[c] then
      local ok, eerr = self.cg:enable { c }
      if not ok then return "limit " .. k .. ": " .. tostring(eerr) end
      self.enabled[c] = true
    end
  end
  for _, k in ipairs(keys) do
    local ok, serr = cg:set(k, svc.limits[k])
    if not ok then return "limit " .. k .. ": " .. tostring(serr) end
  end
end

-- What spawn gets to start svc in cg, and the readiness channel opened
-- for it ({notify = socket} or {readyr =, readyw =}, the pipe whose write
-- end the child gets as fd n); or nil, why.
function supervisor:_spawn_spec(svc, cg)
  self.env0 = self.env0 or takana.environ()
  local env = {}
  for k, v in pairs(self.env0) do env[k] = v end
  for k, v in pairs(svc.env or {}) do env[k] = tostring(v) end
  env.NOTIFY_SOCKET, env.WATCHDOG_USEC, env.WATCHDOG_PID = nil, nil, nil
  local spec = table.move(svc.cmd, 1, #svc.cmd, 1, {})
  for i, a in ipairs(spec) do spec[i] = tostring(a) end
  for k, v in pairs(svc.spawn_extra) do spec[k] = v end
  if self.nofile and self.nofile[1] < self.nofile[2] and not (svc.spawn_extra.rlimits or {}).nofile then
    spec.rlimits = {}
    for k, v in pairs(svc.spawn_extra.rlimits or {}) do spec.rlimits[k] = v end
    spec.rlimits.nofile = self.nofile
  end
  spec.cgroup = cg
  -- As systemd starts them: in / unless told (not the supervisor's working
  -- directory, which a service's user might not be allowed to see), and in
  -- a session of their own, without the supervisor's controlling terminal
  -- (a service could otherwise push keystrokes into it with TIOCSTI, or
  -- receive the terminal's ^C and hangup).
  spec.cwd = svc.cwd or "/"
  spec.setsid = true
  -- Nor its keys: a service run as another user would otherwise possess
  -- the supervisor's session keyring.
  spec.keyring = "private"
  -- A service's user can stop its child between setuid and exec: the loop
  -- waits that long at most, and a later exec failure is an exit of 127.
  spec.exec_timeout = 0.25
  spec.stdin = "null"
  -- stdout and stderr: spawn's non-blocking pipe objects, read by _drain.
  spec.stdout, spec.stderr = "pipe", "pipe"
  spec.env = env
  local ch = {}
  if svc.ready_mode == "notify" or svc.watchdog then
    local nerr, nerrno
    ch.notify, nerr, nerrno = self.rtdir:bind(svc.notify_name, "dgram",
      { mode = OCTAL_0600, uid = svc.uid, gid = svc.gid })
    if not ch.notify then return nil, "notify socket: " .. tostring(nerr), nerrno end
    env.NOTIFY_SOCKET = self.runtime .. "/" .. svc.notify_name
    if svc.watchdog then env.WATCHDOG_USEC = ("%d"):format(math.floor(svc.watchdog * 1e6)) end
  end
  if type(svc.ready_mode) == "table" then
    local r, w, perrno = core.pipe()
    if not r then
      if ch.notify then ch.notify:close() end
      return nil, "readiness pipe: " .. tostring(w), perrno
    end
    ch.readyr, ch.readyw = r, w
    spec.fds = { [svc.ready_mode.fd] = ch.readyw }
  end
  return spec, ch
end

-- svc's child is running: its bookkeeping, and its descriptors watched.
function supervisor:_started(svc, child, cg, t, ch)
  svc.child = child
  if svc.restart_pending then svc.restarts = svc.restarts + 1 end
  svc.restart_pending = nil
  svc.pid = child.pid
  svc.main_pid = child.pid
  svc.started_at = t
  svc.ready = false
  svc.reason = nil
  svc.status_text = nil
  svc.adopted = false
  svc.oom_before = oom_count(cg)
  svc.cpu_before = cpu_ns(cg)
  svc.watchdog_s = svc.watchdog
  svc.watchdog_at, svc.watchdog_deadline, svc.watchdog_fired, svc.watchdog_triggered = nil, nil, nil, nil
  svc.main_exited = nil
  svc.log_halted = nil -- a rotation that failed is tried again this run
  svc.out, svc.err = child.stdout, child.stderr
  self:_logger_give(svc) -- (the pipes it takes are closed here)
  -- (descriptors already open: only epoll's own ENOMEM could fail here)
  assert(self:_watch(child, function() self:_child_exit(svc) end))
  if svc.out then assert(self:_watch(svc.out, function() self:_drain(svc, "out") end)) end
  if svc.err then assert(self:_watch(svc.err, function() self:_drain(svc, "err") end)) end
  if ch.notify then
    svc.notify = ch.notify
    assert(self:_watch(ch.notify, function() self:_notify(svc) end))
  end
  if ch.readyr then
    svc.readyp = ch.readyr
    assert(self:_watch(ch.readyr, function() self:_readyfd(svc) end))
  end
  svc.state = "starting"
  svc.ready_deadline = svc.ready_timeout and t + svc.ready_timeout or nil
  svc.ready_timed_out = nil
  if svc.ready_mode == nil then self:_set_ready(svc) end
  if svc.want == "down" then self:_begin_stop(svc) end
end

function supervisor:_start(svc)
  local t = now()
  local limited = start_limited(svc, t)
  if limited then return self:_fail(svc, limited) end
  local cg, err, errno = self:_svc_cgroup(svc)
  -- A failure to set up a run (EMFILE, ENOMEM...) is retried after the
  -- backoff, as a failed spawn is; the start limit still bounds it.
  if not cg then return self:_schedule(svc, { error = "cgroup: " .. tostring(err), errno = errno, runtime = 0 }) end
  if populated(cg) then
    if self.adopt then return self:_adopt(svc) end
    -- Leftovers of an earlier supervisor: stop them, then start fresh.
    svc.cleaning = true
    return self:_begin_stop(svc)
  end
  if svc.limits then
    local why = self:_apply_limits(svc, cg)
    if why then return self:_fail(svc, why) end
  end
  svc.starts[#svc.starts + 1] = t
  local spec, ch, setup_errno = self:_spawn_spec(svc, cg)
  if not spec then return self:_schedule(svc, { error = ch, errno = setup_errno, runtime = 0 }) end
  local ok, child, serr, serrno = pcall(takana.spawn, spec)
  if ch.readyw then ch.readyw:close() end
  if not (ok and child) then
    if ch.notify then ch.notify:close() end
    if ch.readyr then ch.readyr:close() end
    if not ok then return self:_fail(svc, "spawn: " .. tostring(child)) end
    return self:_schedule(svc, { error = serr, errno = serrno, runtime = 0 })
  end
  self:_started(svc, child, cg, t, ch)
end

function supervisor:_adopt(svc)
  -- Its pipes are the logger's, when an earlier supervisor gave them.
  local sink = svc.log
  if sink == nil then sink = self.log end
  svc.logger = type(sink) == "string" and self:_logger() ~= nil or nil
  svc.state = "running"
  svc.ready = true
  svc.adopted = true
  svc.child = nil
  svc.pid = nil
  local procs = svc.cg:procs() or {}
  svc.main_pid = procs[1]
  svc.started_at = now()
  svc.oom_before = oom_count(svc.cg)
  svc.cpu_before = cpu_ns(svc.cg)
end

-- ---- exits ----

-- The pids of this process's children, re-parented orphans included:
-- /proc/self/task/PID/children (CONFIG_PROC_CHILDREN; orphans go to the
-- main thread), else a snapshot's ppid; none where /proc is another pid
-- namespace's (its numbers name other processes).
local function own_children()
  local me, r = core.getpid(), {}
  if not core.proc_is_ours() then return r end
  local kids = core.task_children(me)
  if kids then return kids end
  local snap = takana.snapshot { fields = { "pid", "ppid" } }
  for rec in snap and snap:each() or function() end do
    if rec.ppid == me then r[#r + 1] = rec.pid end
  end
  return r
end

-- Whether a supervisor open in this process holds pid in its cgroup.
local function supervised(pid)
  for sup in pairs(live) do
    if sup.cg:holds(pid) == true then return true end
  end
  return false
end

-- Zombies reaped by one call at most: more wait for the next step, which
-- comes at once (self.reap_more), so other input is not starved.
local REAP_BATCH = 256

-- Reaps the zombies among this process's children that services orphaned
-- (in the cgroup of any supervisor here, even one that is no subreaper,
-- or a service's cgroup already removed), never a service's own child or
-- another supervisor's main process. A main process of ours ends its run
-- with its status, unless `runs` is false (a run is being finished).
-- waitid(WNOWAIT) names one zombie a call, so the cost follows the
-- zombies, not the live children: a service that leaves a thousand
-- orphans alive no longer makes every SIGCHLD walk them all.
function supervisor:_reap(runs)
  local others, mains, childs = {}, {}, {}
  for sup in pairs(live) do
    for _, svc in pairs(sup.services) do
      if svc.child then
        others[svc.child.pid] = true
        if sup == self then childs[svc.child.pid] = svc end
      end
      if svc.mainfd then
        if sup == self then mains[svc.main_pid] = svc else others[svc.main_pid] = true end
      end
    end
  end
  self.reap_more = nil
  for _ = 1, REAP_BATCH do
    local pid = core.child_exited()
    if not pid then return end
    local svc = mains[pid] or childs[pid]
    if svc then
      -- (a hook run by an earlier exit may have ended this run)
      if runs ~= false and svc.mainfd and svc.main_pid == pid then
        self:_main_exit(svc)
      elseif runs ~= false and svc.child and svc.child.pid == pid then
        self:_child_exit(svc)
      end
    elseif not others[pid] and (self.init or supervised(pid)) then
      local fd = takana.pidfd(pid)
      if fd then fd:wait(0) fd:close() end
    end
    -- A zombie that is not ours to reap here heads waitid's list (a child
    -- this process started itself, another supervisor's): past it, only
    -- a walk of every child finds the others.
    if core.child_exited() == pid then return self:_reap_walk(runs, others, mains) end
  end
  self.reap_more = true
end

function supervisor:_reap_walk(runs, others, mains)
  for _, pid in ipairs(own_children()) do
    local svc = mains[pid]
    if svc then
      if runs ~= false and svc.mainfd and svc.main_pid == pid and not svc.mainfd:alive() then
        self:_main_exit(svc)
      end
    elseif not others[pid] and (self.init or supervised(pid)) then
      local fd = takana.pidfd(pid)
      if fd then fd:wait(0) fd:close() end
    end
  end
end

function supervisor:_child_exit(svc)
  local child = svc.child
  if not child then return end
  local st = child:wait(0)
  if not st then return end
  -- Once MAINPID named another process, this exit (and its rusage) is
  -- not the service's.
  if not (svc.mainfd or svc.main_exited) then svc.status, svc.usage = st, child:usage() end
  self:_unwatch(child)
  child:close()
  svc.child = nil
  svc.pid = nil
  if svc.mainfd then return end
  if svc.state ~= "stopping" and populated(svc.cg) then
    if st.exited and st.code == 0 then
      -- The main process left the rest behind (a daemon that forked): the
      -- cgroup is the service, so it keeps running until that empties.
      local procs = svc.cg:procs() or {}
      svc.main_pid = procs[1]
      return
    end
    -- A failed main process: what it left is stopped with it.
    svc.after_failure = true
    return self:_begin_stop(svc)
  end
  self:_maybe_finished(svc)
end

function supervisor:_cgroup_event(svc)
  -- Reading cgroup.events through the polled descriptor (stat does) is
  -- what clears its POLLPRI: without it the epoll set stays ready.
  if populated(svc.cg) then return end
  if svc.state == "stopping" or (svc.child == nil and (svc.state == "running" or svc.state == "starting")) then
    self:_maybe_finished(svc)
  end
end

-- A run is over when the main process is reaped and the cgroup is empty.
function supervisor:_maybe_finished(svc)
  if svc.child then return end
  if svc.cg and populated(svc.cg) then return end
  if svc.state ~= "running" and svc.state ~= "starting" and svc.state ~= "stopping" then return end
  -- The cgroup empties (cgroup_exit) before the main process's exit is
  -- signalled: its pidfd's event ends the run, with its status. Where
  -- holds cannot see an exiting process (cgroup.procs), a short wait.
  if svc.mainfd and svc.mainfd:alive() then
    if svc.cg and svc.cg:holds(svc.main_pid) == true then return end
    core.poll_fds({ svc.mainfd:fileno() }, 0.05)
  end
  if self.subreaper then self:_reap(false) end
  self:_drain(svc, "out")
  self:_drain(svc, "err")
  close_obj(self, svc.out) svc.out = nil
  close_obj(self, svc.err) svc.err = nil
  close_obj(self, svc.notify) svc.notify, svc.notify_paused = nil, nil
  close_obj(self, svc.readyp) svc.readyp = nil
  -- The cgroup's last exit can be handled before the main pidfd's.
  if svc.mainfd and not svc.mainfd:alive() then
    main_status(svc)
    svc.main_exited = true
  end
  close_obj(self, svc.mainfd) svc.mainfd = nil
  local st = svc.status or {}
  local t = now()
  local rec = { code = st.code, signal = st.signal, core = st.core, time = os.time(),
    maxrss_bytes = svc.usage and svc.usage.maxrss_bytes,
    runtime = svc.started_at and t - svc.started_at or 0, adopted = svc.adopted or nil,
    stopped = svc.stop_requested or nil, pid = svc.main_pid,
    watchdog = svc.watchdog_fired, main_exited = svc.main_exited, ready_timeout = svc.ready_timed_out }
  local oom = svc.cg and oom_count(svc.cg)
  if oom and svc.oom_before then
    rec.oom = oom > svc.oom_before
    if rec.oom then svc.oom_kills = svc.oom_kills + (oom - svc.oom_before) end
  end
  local cpu = svc.cg and cpu_ns(svc.cg)
  if cpu and svc.cpu_before then rec.cpu_ns = cpu - svc.cpu_before end
  svc.status = nil
  svc.usage = nil
  svc.deadline = nil
  svc.ready = false
  svc.main_pid = nil
  svc.killing = nil
  svc.watchdog_deadline, svc.watchdog_fired, svc.watchdog_triggered, svc.main_exited = nil, nil, nil, nil
  svc.ready_deadline, svc.ready_timed_out = nil, nil
  if svc.cg_killed or svc.cg_renew then
    -- A cgroup once killed through cgroup.kill is not reused: on some
    -- kernels (6.18.44 here) a process later spawned into it is SIGKILLed
    -- too. The next start makes a fresh one of the same name (so does a
    -- reload that dropped a limit it cannot write back).
    svc.cg_killed, svc.cg_renew = nil, nil
    self:_unwatch(svc.cg)
    svc.cg_watched = false
    svc.cg:remove()
    svc.cg:close()
    svc.cg = nil
  end
  local cleaning = svc.cleaning
  svc.cleaning = nil
  if cleaning then
    svc.state = "stopped"
    svc.stop_requested = nil
    return
  end
  svc.last_exit = rec
  table.insert(svc.exits, rec)
  if #svc.exits > 20 then table.remove(svc.exits, 1) end
  if self.on_exit then
    -- A failing hook must not stop supervision; its error is kept and shown.
    local ok, herr = pcall(self.on_exit, svc, rec)
    svc.hook_error = not ok and tostring(herr) or nil
  end
  local reloading = svc.reloading
  svc.reloading = nil
  if svc.want == "down" or (svc.stop_requested and not reloading) then
    svc.stop_requested = nil
    svc.state = "stopped"
    if svc.removing then self:_forget(svc) else self:_main_check(svc) end
    return
  end
  if reloading then
    -- Stopped by a reload for a changed declaration: started again at
    -- once with the new one (a restart, whatever its restart policy says).
    svc.stop_requested = nil
    svc.state = "stopped"
    svc.restart_pending = true
    return
  end
  self:_schedule(svc, rec)
  self:_main_check(svc)
end

function supervisor:_forget(svc)
  if svc.cg_watched then self:_unwatch(svc.cg) end
  -- (its notify socket node too: a removed service leaves nothing behind)
  if (svc.ready_mode == "notify" or svc.watchdog) and self.rtdir then self.rtdir:unlink(svc.notify_name) end
  if svc.cg then
    svc.cg:remove()
    svc.cg:close()
  end
  self.services[svc.name] = nil
  for i, n in ipairs(self.order) do
    if n == svc.name then table.remove(self.order, i) break end
  end
end

-- Decides what follows an exit: a restart after the backoff, or nothing.
function supervisor:_schedule(svc, rec)
  local failed = rec.error ~= nil or rec.code ~= 0 or rec.signal ~= nil or rec.oom or rec.watchdog or rec.ready_timeout
  if rec.code == nil and rec.signal == nil and rec.error == nil then failed = true end
  local b = svc.backoff
  if (rec.runtime or 0) >= b.reset_after then svc.fails = 0 end
  local delay
  if type(svc.restart) == "function" then
    local ok, d = pcall(svc.restart, svc, rec)
    if not ok then
      return self:_fail(svc, "restart function: " .. tostring(d))
    end
    delay = d
    if delay ~= false and delay ~= nil and (type(delay) ~= "number" or delay < 0 or delay ~= delay) then
      return self:_fail(svc, "restart function returned " .. tostring(d) .. " (a delay in seconds or false expected)")
    end
  elseif svc.restart == "always" or (svc.restart == "on-failure" and failed) then
    -- (initial 0 stays 0: 0 * factor ^ 1024 would be 0 * inf, NaN, a
    -- deadline never reached)
    delay = b.initial == 0 and 0 or math.min(b.max, b.initial * b.factor ^ svc.fails)
  end
  -- The watchdog's and the readiness timeout's reasons outlive the run
  -- they ended (dependents waiting on it show them).
  svc.reason = rec.error or ((rec.watchdog or rec.ready_timeout) and svc.reason) or nil
  if not delay then
    -- Not restarted: it stays down until asked (start, restart).
    svc.want = "down"
    svc.state = (rec.error or rec.ready_timeout) and "failed" or "stopped"
    return
  end
  svc.fails = svc.fails + 1
  svc.restart_pending = true
  svc.state = "backoff"
  svc.deadline = now() + delay
  svc.next_delay = delay
end

-- ---- stop ----

-- sig: instead of the service's stop signal (the watchdog's ABRT).
function supervisor:_begin_stop(svc, sig)
  svc.state = "stopping"
  svc.stop_requested = not svc.cleaning and not svc.after_failure or nil
  svc.after_failure = nil
  svc.watchdog_deadline = nil
  svc.ready_deadline = nil
  sig = sig or svc.stop_signal
  if svc.cleaning then sig = 15 end
  if svc.child then svc.child:signal(sig) end
  svc.cg:signal(sig)
  if sig ~= 9 then svc.cg:signal(18) end   -- a stopped process must see the TERM
  svc.deadline = now() + svc.stop_timeout
  svc.killing = false
  self:_maybe_finished(svc)
end

function supervisor._stop_timeout(_, svc)
  if svc.killing then
    -- cgroup.kill was written a stop timeout ago and it is still not empty.
    svc.reason = "stop: still populated after cgroup.kill"
    svc.deadline = now() + 1
    return
  end
  svc.killing = true
  svc.cg_killed = true
  local ok, err = svc.cg:kill()
  if not ok then svc.reason = "stop: " .. tostring(err) end
  svc.deadline = now() + math.max(svc.stop_timeout, 1)
end

--- Starts a stopped, failed or waiting service (resets its start limit).
function supervisor:start(name)
  local svc, err, errno = self:_lookup("start", name)
  if not svc then return nil, err, errno end
  svc.want = "up"
  if svc.state == "failed" or svc.state == "stopped" or svc.state == "backoff" then
    svc.starts = {}
    svc.fails = 0
    svc.state = "stopped"
    svc.deadline = nil
    svc.reason = nil
  end
  return true
end

--- Stops a service with its stop sequence: stop.signal to the whole
-- cgroup, then after stop.timeout cgroup.kill, then wait until empty.
function supervisor:stop(name)
  local svc, err, errno = self:_lookup("stop", name)
  if not svc then return nil, err, errno end
  svc.want = "down"
  if svc.state == "running" or svc.state == "starting" then
    self:_begin_stop(svc)
  elseif svc.state == "backoff" or svc.state == "waiting" or svc.state == "failed" then
    if svc.state == "waiting" then svc.reason = nil end
    svc.state = "stopped"
    svc.deadline = nil
    if svc.removing then self:_forget(svc) end
  elseif svc.state == "stopped" and svc.removing then
    self:_forget(svc)
  end
  return true
end

--- Stops then starts a service.
function supervisor:restart(name)
  local svc, err, errno = self:_lookup("restart", name)
  if not svc then return nil, err, errno end
  if svc.state == "running" or svc.state == "starting" then
    self:_begin_stop(svc)
    svc.stop_requested = nil
    svc.restart_now = true
  end
  svc.want = "up"
  svc.starts = {}
  if svc.state ~= "stopping" then svc.state = "stopped" end
  return true
end

--- Sends a signal to every process of a service.
function supervisor:signal(name, sig)
  local svc, err, errno = self:_lookup("signal", name)
  if not svc then return nil, err, errno end
  local n = signum("signal", 2, sig)
  if not svc.cg then return nil, "signal: service '" .. name .. "' has no processes", ESRCH end
  return svc.cg:signal(n)
end

--- Stops every service in reverse dependency order; `run()` returns
-- once all are stopped.
function supervisor:shutdown()
  self.shutting = true
  for _, svc in pairs(self.services) do svc.want = "down" end
end
