--- takana.supervisor: services as cgroups, restart policy in Lua.
--
-- One supervisor owns a cgroup; each service runs in its own child cgroup,
-- so whatever a service forks stays the service. The supervisor is a set of
-- non-blocking descriptors gathered in one epoll set: `sup:run()` drives it,
-- or `sup:step(timeout)` inside another loop (`sup:pollfd()`, `sup:events()`
-- and `sup:timeout()` are cqueues' pollable protocol).
--
-- Service states: "waiting" (for its dependencies), "starting" (spawned,
-- not yet ready), "running", "stopping", "backoff" (a restart is due),
-- "stopped", "failed" (start limit hit, or it cannot start: `reason`).
-- @module takana.supervisor
local takana = require "takana"
local core = require "takana.core"
local json = require "takana.json"
local C = require "takana.supervisor.class"
local M, supervisor, now, E, argerror = C.M, C.supervisor, C.now, C.E, C.argerror
local nargs, check_options, required, OCTAL_0600, OCTAL_0700 = C.nargs, C.check_options, C.required, C.OCTAL_0600, C.OCTAL_0700
local OCTAL_0711, SUN_PATH_MAX, RUNTIME_PATH_MAX, live, populated = C.OCTAL_0711, C.SUN_PATH_MAX, C.RUNTIME_PATH_MAX, C.live, C.populated
local OCTAL_0666 = C.OCTAL_0666
local ENOENT, EPERM, EDEADLK = C.E.ENOENT, C.E.EPERM, C.E.EDEADLK
-- Seconds a service's start may take before the rest wait for the next step.
local SLOW_START = 0.1

-- ---- JSON ----
-- The control protocol's codec (one object a line) is takana.json's, kept
-- here under the names it has always had.

--- Encodes a Lua value as one line of JSON: `takana.json.encode`.
-- @function json_encode
M.json_encode = json.encode
--- Decodes one JSON text: `takana.json.decode`.
-- @function json_decode
M.json_decode = json.decode
M.array = json.array

-- ---- supervisor ----

local sup_options = { cgroup = "string|userdata", log = "string|function|boolean", control = "string|table",
  adopt = "boolean", reload = "function", signals = "boolean", runtime = "string", subreaper = "boolean",
  log_size = "number", log_files = "number", log_lines = "number", on_exit = "function", init = "boolean",
  main = "string", on_reload = "function", logger = "boolean|table" }
C.sup_options = sup_options

--- Supervisor options `new` gives a supervisor whose caller left them
-- nil: `takana supervise` sets `reload` here (re-reading its file), before
-- the file runs. Empty in a library.
-- @table defaults
M.defaults = {}

-- control = path, or {path = ..., allow = who, read = who} where who is
-- {users = {name or uid, ...}, groups = {name or gid, ...}}: the path, and
-- the sets of uids and gids each role admits (names resolved now, raising
-- for an unknown one, as service{user=} does).
local function control_option(c)
  if c == nil or type(c) == "string" then return c end
  check_options("supervisor", 1, c, { path = "string", allow = "table", read = "table" })
  if type(c.path) ~= "string" then argerror("supervisor", 1, "option 'control': 'path' (a string) is required") end
  local roles = {}
  for _, role in ipairs { "allow", "read" } do
    local who = c[role]
    if who then
      check_options("supervisor", 1, who, { users = "table", groups = "table" })
      local set = { uids = {}, gids = {} }
      for i, u in ipairs(who.users or {}) do
        if type(u) ~= "string" and math.type(u) ~= "integer" then
          argerror("supervisor", 1, ("option 'control': %s.users[%d]: a user name or uid expected"):format(role, i))
        end
        set.uids[(core.ids(u, nil, "supervisor"))] = true
      end
      for i, g in ipairs(who.groups or {}) do
        if type(g) ~= "string" and math.type(g) ~= "integer" then
          argerror("supervisor", 1, ("option 'control': %s.groups[%d]: a group name or gid expected"):format(role, i))
        end
        set.gids[select(2, core.ids(nil, g, "supervisor"))] = true
      end
      roles[role] = set
    end
  end
  return c.path, roles
end

-- The runtime directory when none is given: /run/takana/<cgroup> for root,
-- $XDG_RUNTIME_DIR/takana/<cgroup> otherwise; never a guessable name in a
-- directory others can write, such as /tmp.
local function default_runtime(cg)
  -- one name a cgroup path ("a/b" is "a_2fb", "a_b" is "a_5fb")
  local name = (cg.relpath or ""):gsub("[^%w.@-]", function(c) return ("_%02x"):format(c:byte()) end)
  if core.geteuid() == 0 then return "/run/takana/" .. name end
  local xdg = os.getenv("XDG_RUNTIME_DIR")
  if xdg and xdg:sub(1, 1) == "/" then return xdg .. "/takana/" .. name end
  return nil, "supervisor: no runtime directory: not root and XDG_RUNTIME_DIR is unset; " ..
    "give runtime = a directory of this user's own"
end

-- The supervisor's cgroup, made if missing. Its own: not the root, nor one
-- holding this process, since the sweep kills what it finds there
-- undeclared and services are signalled through their cgroups.
local function own_cgroup(spec)
  local cg, err, errno = spec
  local made = false
  if type(spec) == "string" then
    cg, err, errno = takana.cgroup(spec)
    if not cg and errno == ENOENT then
      local parent, name = spec:match("^(.-)/?([^/]+)$")
      local p
      p, err, errno = takana.cgroup(parent or "")
      if p then
        cg, err, errno = p:mkdir(name)
        made = cg ~= nil
        if not cg and errno == E.EEXIST then cg, err, errno = p:mkdir(name, { exist_ok = true }) end
        p:close()
      end
    end
    if not cg and (errno == E.EACCES or errno == EPERM) and core.geteuid() ~= 0 then
      -- One line that names what to delegate: unprivileged, a supervisor
      -- runs in a cgroup2 subtree its user owns, as systemd's Delegate=yes.
      local mine = takana.cgroup.self()
      err = ("%s; as uid %d a supervisor needs a cgroup2 subtree delegated to this user (systemd: "
        .. "`systemd-run --user -p Delegate=yes takana supervise FILE`, or Delegate=yes in its unit; or root chowns "
        .. "a directory and its cgroup.procs, cgroup.subtree_control and cgroup.threads to the user), and cgroup = "
        .. "a path inside it (this process is in %s)"):format(tostring(err), core.geteuid(), mine and "/" .. mine.relpath or "?")
      if mine then mine:close() end
    end
    if not cg then return nil, "supervisor: cgroup " .. spec .. ": " .. tostring(err), errno end
  end
  if cg.relpath == "" then
    return nil, "supervisor: cgroup /: the root cannot be a supervisor's (it holds every process); name one of its own", EPERM
  end
  local holds
  holds, err, errno = cg:holds(core.getpid())
  if holds == nil then return nil, "supervisor: cgroup " .. cg.path .. ": " .. tostring(err), errno end
  if holds then
    return nil, ("supervisor: cgroup %s holds this process (pid %d): a supervisor's cgroup holds only its services")
      :format(cg.path, core.getpid()), EDEADLK
  end
  return cg, nil, nil, made
end

--- Creates a supervisor.
-- @tparam table opts
--   `cgroup` (required): the supervisor's cgroup, a path under the cgroup2
--   mount (created if missing) or a handle; not the root, and not holding
--   this process (EPERM, EDEADLK): cgroups in it that no service declares
--   are killed and removed at the first step.
--   `log`: a directory for `<service>.log` files (rotated: `log_files`
--   files of `log_size` bytes, default 5 x 1 MiB), or `function(name,
--   stream, line)`, or false (lines are only kept in memory);
--   `log_lines`: lines kept in memory a service for `logs` (default 200);
--   `logger`: lines bound for a log directory are read and written by a
--   logger process that outlives the supervisor (default true; false: by
--   the supervisor's own loop; `{prog, args...}`: the Lua interpreter to
--   run it with, instead of this process's own);
--   `control`: a unix socket path for `takana ctl` (mode 0600, at most 107
--   bytes; its directory is made 0700 when missing, and must be this
--   user's own and writable by no one else, as the runtime directory), or
--   `{path = ..., allow = who, read = who}` to delegate it, `who` being
--   `{users = {name or uid, ...}, groups = {name or gid, ...}}`: `allow`
--   may run every command, `read` only `status` and `logs` (as s6-svperms
--   gives a group control and everyone status). The socket is then 0666
--   (its directory 0711 when made) and each connection is judged by its
--   peer's uid, gid and supplementary groups (`SO_PEERCRED`, `SO_PEERGROUPS`);
--   this user and root may always do everything, anyone else is refused;
--   each uid may hold 16 connections, the others than root and this user
--   64 together, and one idle for 60 s is closed (`sup.control_refused`
--   counts the refused); the others than root and this user may make the
--   supervisor spend 5% of a CPU each, 20% together, after a burst of
--   0.25 s (their connections accepted, read and answered): one past its
--   share is neither read nor answered until the share is back
--   (`sup.control_held` counts the times), and its uid's new connections
--   are refused (EAGAIN);
--   `adopt`: adopt services found running in their cgroups (default: stop
--   them first); `reload`: `function(sup) -> [declarations [, options]]`
--   called on SIGHUP and `takana ctl SOCKET reload` (see `sup:reload`);
--   `on_reload`: `function(sup, summary, err)` after each reload;
--   `signals`: catch TERM, INT and HUP (default true);
--   `subreaper`: become the reaper of what services orphan (a daemon's
--   double fork), so a `MAINPID=` process whose parent left is ours to
--   reap, with its status; other orphans in the services' cgroups are
--   reaped on SIGCHLD (caught unless `signals = false`), when a run ends
--   and on `close`; the last such supervisor's `close` (of any Lua state)
--   clears the flag unless it was set before;
--   `init`: act as a container's init (default: true when this process is
--   PID 1, or under `takana supervise --init`): a subreaper that reaps
--   every orphan re-parented to it, in any cgroup (never a process of its
--   own that is no service's orphan: run nothing else that waits for a
--   child in it), SIGTERM and SIGINT stop every service, then `run`
--   returns, and the `main` service's end is the end of all;
--   `main`: a service's name (default under `init`: the only service,
--   when there is one): once it has ended and is not restarted, every
--   service is stopped and `run` returns; `sup:exit_code()` gives its
--   status, as tini exits with its child's;
--   `runtime`: a directory for notify sockets (default: `/run/takana/<cgroup>`
--   for root, `$XDG_RUNTIME_DIR/takana/<cgroup>` otherwise); made if missing,
--   mode 0711, and refused (nil, message, errno) when another user owns it
--   or any directory above it, when it is writable by others, when a link
--   on the way belongs to another user, or when it is longer than 94
--   bytes; `on_exit`: `function(svc, record)` after
--   each exit record.
-- While open, the supervisor's soft descriptor limit is its hard one
-- (services get the soft limit it had): about six descriptors a service.
-- @treturn[1] supervisor
-- @treturn[2] nil, message, errno
function M.new(opts, ...)
  -- (while a file's declarations are read for a reload: a recorder)
  if C.capture then return C.capture(opts, ...) end
  nargs("supervisor", 1, select("#", ...) + 1)
  check_options("supervisor", 1, opts, sup_options, required)
  if opts.cgroup == nil then argerror("supervisor", 1, "option 'cgroup' is required") end
  local control, roles = control_option(opts.control)
  local given = C.decl_copy(opts) -- what a reload's options are compared with
  if next(M.defaults) then
    opts = C.decl_copy(opts)
    for k, v in pairs(M.defaults) do if opts[k] == nil then opts[k] = v end end
  end
  local self = setmetatable({
    services = {}, order = {}, watched = {}, conns = {}, log = opts.log, adopt = opts.adopt == true,
    reload_hook = opts.reload, on_exit = opts.on_exit, on_reload = opts.on_reload, options = given,
    log_size = opts.log_size or 1048576, log_files = opts.log_files or 5,
    log_lines = opts.log_lines or 200, logger_opt = opts.logger, uid = core.geteuid(), shutting = false, done = false,
    notify_batch = 64, started_at = now(), control_refused = 0, control_held = 0, logger_waiters = {}, deferred = {}, deferred_behind = {},
    answer_budget = 0, request_budget = 0,
  }, supervisor)
  local cg, err, errno, made = own_cgroup(opts.cgroup)
  if not cg then return nil, err, errno end
  self.cg, self.cg_made = cg, made
  self.own_cg = type(opts.cgroup) == "string" -- a handle given stays its caller's to close
  local ep
  ep, err, errno = core.poller()
  if not ep then return nil, "supervisor: " .. err, errno end
  self.ep = ep
  -- The runtime directory (notify sockets; the control socket by
  -- default): made 0711 and checked as this user's own from / down, so no
  -- other user can plant or swap a name in it; services reach their own
  -- socket only (each is owned by its service's user, mode 0600).
  local ctl_dir, ctl_name
  self.control_roles = roles
  if control then
    ctl_dir, ctl_name = control:match("^(.*)/([^/]+)$")
    if not ctl_name then ctl_dir, ctl_name = ".", control end
    if ctl_dir == "" then ctl_dir = "/" end
    if #control > SUN_PATH_MAX then
      return self:_abandon(("supervisor: control socket %s: longer than the %d bytes a unix socket address holds")
        :format(control, SUN_PATH_MAX), E.ENAMETOOLONG)
    end
  end
  local rt = opts.runtime
  if not rt then
    rt, err = default_runtime(cg)
    if not rt then return self:_abandon(err, ENOENT) end
  end
  local dir
  dir, err, errno = core.dir_open(rt, { create = true, private = true, mode = OCTAL_0711 })
  if not dir then return self:_abandon("supervisor: runtime " .. err, errno) end
  self.rtdir = dir
  self.runtime = dir:path()
  if #self.runtime > RUNTIME_PATH_MAX then
    return self:_abandon(("supervisor: runtime directory %s: longer than %d bytes, so a socket beneath it would not " ..
      "fit a unix socket address (%d bytes)"):format(self.runtime, RUNTIME_PATH_MAX, SUN_PATH_MAX), E.ENAMETOOLONG)
  end
  self.logdirs = {}
  if type(self.log) == "string" then
    dir, err, errno = self:_logdir(self.log)
    if not dir then return self:_abandon("supervisor: log " .. err, errno) end
  end
  if control then
    -- Its own directory, checked as the runtime one is (an existing one,
    -- such as /run, keeps its mode). Delegated control: others must reach
    -- the socket (0711 directory, 0666 socket); who may do what is then
    -- decided by the peer's credentials, read at accept.
    local delegated = roles ~= nil
    dir, err, errno = core.dir_open(ctl_dir, { create = true, private = true,
                                               mode = delegated and OCTAL_0711 or OCTAL_0700 })
    if not dir then return self:_abandon("supervisor: control socket " .. err, errno) end
    self.ctl_dir = dir
    local ls
    ls, err, errno = dir:bind(ctl_name, "listen", { mode = delegated and OCTAL_0666 or OCTAL_0600 })
    if not ls then return self:_abandon("supervisor: control socket: " .. err, errno) end
    self.control = ls
    self.control_name = ctl_name
    local ok
    ok, err, errno = self:_watch(ls, function() self:_accept() end)
    if not ok then return self:_abandon("supervisor: control socket: " .. err, errno) end
  end
  -- About six descriptors a service: the soft limit goes up to the hard
  -- one while this supervisor is open (services get the one it was).
  local soft, hard = core.nofile_hold(true)
  if soft then
    self.nofile = { soft, hard }
  else
    self.nofile_error = hard -- kept: services still start, fewer fit
  end
  local init = opts.init
  if init == nil then init = M.init_default == true or core.getpid() == 1 end
  self.init, self.main_name = init, opts.main
  local subreaper = opts.subreaper or init
  if subreaper then
    local ok
    ok, err, errno = core.subreaper_hold(true)
    if not ok then return self:_abandon("supervisor: " .. tostring(err), errno) end
    self.subreaper = true
  end
  if opts.signals ~= false then
    local sig
    sig, err, errno = takana.signals { "TERM", "INT", "HUP", subreaper and "CHLD" or nil }
    if not sig then
      return self:_abandon("supervisor: signals: " .. tostring(err), errno)
    end
    self.sigfd = sig
    local ok
    ok, err, errno = self:_watch(sig, function() self:_signals() end)
    if not ok then return self:_abandon("supervisor: signals: " .. err, errno) end
  end
  live[self] = true
  return self
end

-- A construction that failed half way: what it opened is closed.
function supervisor:_abandon(err, errno)
  self:close()
  return nil, err, errno
end

-- Watches obj (in the poller, kept across steps): true, or nil, message,
-- errno (a cgroup handle opens cgroup.events here, which fails at EMFILE).
-- Closing obj takes it out of the poller; _unwatch forgets fn too.
function supervisor:_watch(obj, fn, pri)
  if self.watched[obj] then
    self.watched[obj] = fn
    return true
  end
  local ok, err, errno = self.ep:add(obj, pri and "p" or nil)
  if not ok then return nil, err, errno end
  self.watched[obj] = fn
  return true
end

function supervisor:_unwatch(obj)
  if obj == nil or not self.watched[obj] then return end
  self.ep:remove(obj)
  self.watched[obj] = nil
end

-- ---- the loop ----

local function active(svc)
  return svc.state == "running" or svc.state == "starting" or svc.state == "stopping"
end

function supervisor:_tick()
  if self.reap_more then self:_reap() end
  local t = now()
  if self.control then self:_conns_tick(t) end
  for _, name in ipairs(self.order) do
    local svc = self.services[name]
    if svc and svc.notify_paused and t >= svc.notify_paused then
      svc.notify_paused = nil
      if svc.notify then assert(self:_watch(svc.notify, function() self:_notify(svc) end)) end
    end
    if svc and svc.watchdog_deadline and t >= svc.watchdog_deadline
      and (svc.state == "running" or (svc.state == "starting" and svc.watchdog_triggered)) then
      self:_watchdog_fire(svc)
    end
    if svc and svc.ready_deadline and t >= svc.ready_deadline and svc.state == "starting" then
      self:_ready_timeout(svc)
    end
    if svc and svc.deadline and t >= svc.deadline then
      svc.deadline = nil
      if svc.state == "backoff" then
        svc.state = "stopped"
      elseif svc.state == "stopping" then
        self:_stop_timeout(svc)
      end
    end
  end
  -- Stops: a service goes down only after everything depending on it has.
  for _, name in ipairs(self.order) do
    local svc = self.services[name]
    if svc and svc.want == "down" and (svc.state == "running" or svc.state == "starting") then
      local blocked = false
      for _, other in pairs(self.services) do
        for _, d in ipairs(other.depends) do
          if d == name and active(other) and other.want == "down" then blocked = true end
        end
      end
      if not blocked then self:_begin_stop(svc) end
    elseif svc and svc.want == "down" and (svc.state == "backoff" or svc.state == "waiting") then
      if svc.state == "waiting" then svc.reason = nil end
      svc.state = "stopped"
      svc.deadline = nil
    end
  end
  if self.shutting then
    local any = false
    for _, svc in pairs(self.services) do if active(svc) then any = true end end
    if not any then self.done = true end
    return
  end
  -- Starts: in declaration order, each once its dependencies are ready.
  local progress, held = true, false
  while progress and not held do
    progress = false
    for _, name in ipairs(self.order) do
      local svc = self.services[name]
      if svc and svc.want == "up" and (svc.state == "stopped" or svc.state == "waiting") then
        local why = self:_deps_wait(svc)
        if not why then
          svc.restart_now = nil
          local t0 = now()
          self:_start(svc)
          if svc.state == "running" then progress = true end
          -- A start that waited (for an exec a child of another user was
          -- stopped before, up to its exec_timeout): the rest start next
          -- step, after the loop's sockets, not N waits in one step.
          if now() - t0 > SLOW_START then
            held = true
            break
          end
        else
          svc.state = "waiting"
          svc.reason = why
        end
      end
    end
  end
end

--- Seconds until the supervisor has something to do without input (nil:
-- nothing pending). cqueues' pollable protocol.
function supervisor:timeout()
  local t, best = now(), nil
  for _, svc in pairs(self.services) do
    local at = svc.deadline
    local wd = (svc.state == "running" or svc.state == "starting") and svc.watchdog_deadline
    if wd and (not at or wd < at) then at = wd end
    local rd = svc.state == "starting" and svc.ready_deadline
    if rd and (not at or rd < at) then at = rd end
    if svc.notify_paused and (not at or svc.notify_paused < at) then at = svc.notify_paused end
    if at then
      local d = math.max(0, at - t)
      if not best or d < best then best = d end
    end
    if svc.want == "up" and (svc.state == "stopped") then best = 0 end
  end
  if self.pending_out then best = math.min(best or 0.05, 0.05) end
  if self.pending_in then best = 0 end
  if self.reap_more then best = 0 end
  if self.conns_deadline then best = math.min(best or math.huge, math.max(0, self.conns_deadline - t)) end
  -- At most a day: a longer deadline wakes early and waits again.
  return best and math.min(best, 86400)
end

--- The epoll descriptor gathering every descriptor of the supervisor.
function supervisor:pollfd() return self.ep:fileno() end

--- The same descriptor as `pollfd`, for `takana.poll` and luv.
function supervisor:fileno() return self.ep:fileno() end

--- cqueues' pollable protocol: "r".
function supervisor.events() return "r" end

--- Handles what is ready, waiting up to timeout seconds for it (nil: until
-- the next deadline or input).
-- @treturn boolean false once a shutdown has completed
function supervisor:step(timeout)
  -- (control: the step's CPU besides what it charged is the metered
  -- connections' it worked for, if any)
  local cpu0 = self.control and os.clock()
  self.step_served, self.step_charged = cpu0 and {} or nil, 0
  if not self.begun then
    self.begun = true
    self:_sweep()
  end
  self:_tick()
  if self.done then return false end
  local wait = self:timeout()
  if timeout and (not wait or timeout < wait) then wait = timeout end
  -- The poller's own table, refilled by its next wait (no handler waits
  -- on it). An object an earlier handler closed or unwatched is skipped.
  local ready, n, errno = self.ep:wait(wait)
  if not ready then return nil, n, errno end
  self:_conns_budget()
  for i = 1, n do
    local fn = self.watched[ready[i]]
    if fn then fn() end
  end
  self:_flush_conns()
  self:_tick()
  if cpu0 then self:_cpu_charge_rest(os.clock() - cpu0) end
  return not self.done
end

--- Runs until a shutdown (SIGTERM, SIGINT, `sup:shutdown()`) completes.
function supervisor:run()
  while true do
    local more, err, errno = self:step()
    if more == nil then return nil, err, errno end
    if not more then break end
  end
  self:close()
  return true
end

--- Closes the supervisor's descriptors and removes its sockets (services
-- are not touched). After a completed shutdown it also removes the
-- cgroups it made, once empty; without one they stay, for the caller or a
-- next supervisor to find.
function supervisor:close()
  if self.closed then return end
  self.closed = true
  local shut_down = self.done
  for _, svc in pairs(self.services) do
    for _, k in ipairs { "child", "out", "err", "notify", "readyp", "mainfd" } do
      if svc[k] then svc[k]:close() svc[k] = nil end
    end
    if svc.logf then svc.logf:close() svc.logf = nil end
    svc.logd = nil
    if (svc.ready_mode == "notify" or svc.watchdog) and self.rtdir then self.rtdir:unlink(svc.notify_name) end
    if svc.cg then
      -- A service cgroup this supervisor made goes with it after a
      -- shutdown, once empty; a populated one, or one it found, stays.
      -- (A handle the caller closed or removed itself is left as it is.)
      local read, busy = pcall(populated, svc.cg)
      if shut_down and svc.cg_made and read and not busy then svc.cg:remove() end
      svc.cg:close()
      svc.cg, svc.cg_watched = nil, false
    end
  end
  self:_logger_close(shut_down)
  for _, c in pairs(self.conns) do c.sock:close() end
  self.conns = {}
  if self.control then
    self.control:close()
    self.ctl_dir:unlink(self.control_name)
  end
  for _, d in pairs(self.logdirs or {}) do d:close() end
  self.logdirs = {}
  -- Directories this supervisor made go with it once empty (a socket of
  -- another run still there keeps them).
  for _, k in ipairs { "ctl_dir", "rtdir" } do
    local d = self[k]
    if d then
      if d:made() then os.remove(d:path()) end
      d:close()
    end
  end
  if self.sigfd then self.sigfd:close() end
  if self.subreaper then
    self:_reap(false)
    core.subreaper_hold(false)
    self.subreaper = nil
  end
  live[self] = nil
  if self.nofile then
    core.nofile_hold(false)
    self.nofile = nil
  end
  if self.own_cg then
    local read, busy = pcall(populated, self.cg)
    if shut_down and self.cg_made and read and not busy then self.cg:remove() end
    self.cg:close()
  end
  if self.ep then self.ep:close() end
end

-- At the first step: cgroups under the supervisor's that belong to no
-- declared service are the leftovers of services removed from the
-- configuration; they are killed (their processes have nobody to watch).
function supervisor:_sweep()
  for _, name in ipairs(self.cg:children() or {}) do
    if not self.services[name] and name ~= C.LOGGER_CGROUP then
      local cg = takana.cgroup(self.cg.relpath .. "/" .. name)
      if cg then
        if populated(cg) then cg:kill { wait = 5 } end
        cg:remove()
        cg:close()
      end
    end
  end
end

-- At most 64 signals a wake-up, and one reap however many SIGCHLDs came
-- with them: a service's user that makes orphans die faster than a reap
-- walks the children would otherwise keep the loop here for good (the
-- signalfd stays readable, so the loop comes back after the others).
function supervisor:_signals()
  local chld = false
  for _ = 1, 64 do
    local s = self.sigfd:read()
    if not s then break end
    if s.signo == 15 or s.signo == 2 then
      self:shutdown()
    elseif s.signo == 1 then
      self:reload()
    elseif s.signo == 17 then
      chld = true
    end
  end
  if chld then self:_reap() end
end

-- The main service's name: `main`, else under `init` the only service.
function supervisor:_main_name()
  if self.main_name then return self.main_name end
  if self.init and #self.order == 1 then return self.order[1] end
end

-- svc has ended a run or failed to start: when it is the main service and
-- stays down, everything stops (a container ends with its main process).
function supervisor:_main_check(svc)
  if self.shutting or svc.name ~= self:_main_name() then return end
  if svc.state == "failed" or (svc.want == "down" and svc.state == "stopped") then self:shutdown() end
end

--- The main service's status (`main`, or the only service under `init`)
-- as a shell gives one: its last run's exit code, or 128 + the signal
-- that ended it; 1 when it could not start or its status is unknown; nil
-- without a main service or before its first run ended.
function supervisor:exit_code()
  local name = self:_main_name()
  local svc = name and self.services[name]
  if not svc then return nil end
  local ex = svc.last_exit
  if not ex then return svc.state == "failed" and 1 or nil end
  if ex.code then return ex.code end
  if ex.signal then return 128 + ex.signal end
  return 1
end

-- ---- status ----

local function round(x, d) local m = 10 ^ (d or 3) return math.floor(x * m + 0.5) / m end

-- The part of an exit record `ctl status` shows (M.exit_record's rows
-- with `status`).
local function exit_status(ex)
  local t = {}
  for _, f in ipairs(M.exit_record) do
    local v = ex[f.name]
    if f.status and v ~= nil then t[f.name] = f.status == "round" and round(v) or v end
  end
  return t
end

-- The pid status shows: the MAINPID= one once named, the first child's
-- while it lives, else (a forking daemon's first process has exited) one
-- the cgroup still holds, looked up again once the one shown has left it.
local function status_pid(svc)
  if svc.mainfd then return svc.main_pid end
  if svc.pid then return svc.pid end
  -- (cgroup.procs, not the process's own cgroup file: a zombie that
  -- nobody reaps still names its cgroup there)
  if svc.main_pid and svc.cg and active(svc) then
    local procs = svc.cg:procs()
    if procs and #procs > 0 then
      for _, pid in ipairs(procs) do if pid == svc.main_pid then return pid end end
      svc.main_pid = procs[1]
    end
  end
  return svc.main_pid
end

--- The status of one service as a plain table (what `takana ctl status`
-- prints): `sup:status_of(svc)`.
-- @function status_of
-- @tparam table svc the service (`sup:get(name)`)
function supervisor.status_of(_, svc)
  local t = now()
  local ex = svc.last_exit
  return {
    name = svc.name, state = svc.state, pid = status_pid(svc), ready = svc.ready or false,
    uptime = (active(svc) and svc.started_at) and round(t - svc.started_at) or nil,
    restarts = svc.restarts, reason = svc.reason, status = svc.status_text,
    adopted = svc.adopted or nil, oom_kills = svc.oom_kills, cgroup = svc.cgpath,
    last_exit = ex and exit_status(ex) or nil,
    watchdog = (svc.watchdog or svc.watchdog_s) and { interval = svc.watchdog_s or svc.watchdog, timeouts = svc.watchdog_timeouts,
      last = svc.watchdog_at and round(t - svc.watchdog_at) or nil } or nil,
    next_start = svc.state == "backoff" and svc.deadline and round(svc.deadline - t) or nil,
    depends = #svc.depends > 0 and svc.depends or nil,
    log_error = svc.log_error, hook_error = svc.hook_error,
  }
end

--- Every service's status, in declaration order.
function supervisor:status()
  local out = {}
  for _, name in ipairs(self.order) do out[#out + 1] = self:status_of(self.services[name]) end
  return out
end

-- The other parts add their methods to the class (and their functions to
-- M) when loaded.
require "takana.supervisor.service"
require "takana.supervisor.notify"
require "takana.supervisor.log"
require "takana.supervisor.control"
require "takana.supervisor.logger"
require "takana.supervisor.reload"

return M
