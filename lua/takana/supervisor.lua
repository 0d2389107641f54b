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
local util = require "takana.util"

local M = {}

local E = core.errno
local EAGAIN, ENOENT, ESRCH, ETIMEDOUT, EBADMSG, EPERM, EDEADLK = E.EAGAIN, E.ENOENT, E.ESRCH, E.ETIMEDOUT, E.EBADMSG,
  E.EPERM, E.EDEADLK

local function now() return (takana.now or core.monotime)() end

local argerror, nargs, check_options = util.argerror, util.nargs, util.check_options

-- ---- JSON ----
-- A small JSON codec for the control protocol (one object a line).

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

-- A JSON string of pure ASCII: control characters and every non-ASCII
-- character escaped as a \u escape ("\u00e9"; a surrogate pair past
-- U+FFFF), so what a service
-- wrote reaches a terminal printing `ctl --json` inert (U+009B is CSI to
-- one in UTF-8 mode); a byte that is not valid UTF-8 becomes U+FFFD.
local function json_string(v)
  if not v:find('[%c"\\\128-\255]') then return v end
  local out, i, n = {}, 1, #v
  while i <= n do
    local c = v:byte(i)
    if c < 0x80 then
      local ch = string.char(c)
      out[#out + 1] = escapes[ch] or ((c < 32 or c == 127) and ("\\u%04x"):format(c)) or ch
      i = i + 1
    else
      local ok, cp = pcall(utf8.codepoint, v, i)
      if not ok then cp = 0xfffd end
      if cp > 0xffff then
        cp = cp - 0x10000
        out[#out + 1] = ("\\u%04x\\u%04x"):format(0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff))
        cp = cp + 0x10000
      else
        out[#out + 1] = ("\\u%04x"):format(cp)
      end
      i = i + (ok and #utf8.char(cp) or 1)
    end
  end
  return table.concat(out)
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

M.array = {}

--- Encodes a Lua value as one line of JSON, pure ASCII: control and
-- non-ASCII characters escaped as \u escapes ("\u00e9"), a byte that is
-- not valid UTF-8 as U+FFFD.
function M.json_encode(v)
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
-- @treturn[2] nil, message
function M.json_decode(s)
  if type(s) ~= "string" then argerror("json_decode", 1, "string expected, got " .. type(s)) end
  local ok, v, i = pcall(decode_value, s, 1, 0)
  if not ok then return nil, v end
  if skip(s, i) <= #s then return nil, ("json: trailing data at byte %d"):format(i) end
  return v
end

-- ---- helpers ----

-- What a service sent (STATUS=) or caused (reasons) reaches an admin's
-- terminal: every string in v, nested ones too, with control bytes shown
-- escaped (util.printable), never interpreted.
local function printable_all(v)
  if type(v) == "string" then return util.printable(v) end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = printable_all(x) end
  return out
end

local function signum(fname, n, sig)
  local ok, s = pcall(core.signum, sig) -- the C parser every signal name goes through
  if ok and s >= 1 then return s end
  argerror(fname, n, "a signal number or name (TERM, KILL, HUP...) expected, got " .. tostring(sig))
end

-- ---- supervisor ----

local supervisor = {}
supervisor.__index = supervisor
M.Supervisor = supervisor

local sup_options = { cgroup = "string|userdata", log = "string|function|boolean", control = "string",
  adopt = "boolean", reload = "function", signals = "boolean", runtime = "string", subreaper = "boolean",
  log_size = "number", log_files = "number", log_lines = "number", on_exit = "function" }

local required = { required = true }

local OCTAL_0600, OCTAL_0640, OCTAL_0700, OCTAL_0711, OCTAL_0750 = 384, 416, 448, 457, 488

-- A unix socket address holds 107 bytes of path: a runtime directory
-- leaves room for "/_NNNN.notify" beneath it.
local SUN_PATH_MAX, RUNTIME_PATH_MAX = 107, 94

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

-- Supervisors open in this process: what one reaps must be no other's.
local live = setmetatable({}, { __mode = "k" })

-- The supervisor's cgroup, made if missing. Its own: not the root, nor one
-- holding this process, since the sweep kills what it finds there
-- undeclared and services are signalled through their cgroups.
local function own_cgroup(spec)
  local cg, err, errno = spec
  if type(spec) == "string" then
    cg, err, errno = takana.cgroup(spec)
    if not cg and errno == ENOENT then
      local parent, name = spec:match("^(.-)/?([^/]+)$")
      local p
      p, err, errno = takana.cgroup(parent or "")
      if p then
        cg, err, errno = p:mkdir(name, { exist_ok = true })
        p:close()
      end
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
  return cg
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
--   `control`: a unix socket path for `takana ctl` (mode 0600, at most 107
--   bytes; its directory is made 0700 when missing, and must be this
--   user's own and writable by no one else, as the runtime directory);
--   `adopt`: adopt services found running in their cgroups (default: stop
--   them first); `reload`: `function(sup)` called on SIGHUP;
--   `signals`: catch TERM, INT and HUP (default true);
--   `subreaper`: become the reaper of what services orphan (a daemon's
--   double fork), so a `MAINPID=` process whose parent left is ours to
--   reap, with its status; other orphans in the services' cgroups are
--   reaped on SIGCHLD (caught unless `signals = false`), when a run ends
--   and on `close`; the last such supervisor's `close` (of any Lua state)
--   clears the flag unless it was set before;
--   `runtime`: a directory for notify sockets (default: /run/takana/<cgroup>
--   for root, $XDG_RUNTIME_DIR/takana/<cgroup> otherwise); made if missing,
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
  nargs("supervisor", 1, select("#", ...) + 1)
  check_options("supervisor", 1, opts, sup_options, required)
  if opts.cgroup == nil then argerror("supervisor", 1, "option 'cgroup' is required") end
  local self = setmetatable({
    services = {}, order = {}, fds = {}, conns = {}, log = opts.log, adopt = opts.adopt == true,
    reload_hook = opts.reload, on_exit = opts.on_exit,
    log_size = opts.log_size or 1048576, log_files = opts.log_files or 5,
    log_lines = opts.log_lines or 200, uid = core.geteuid(), shutting = false, done = false, notify_batch = 64,
    started_at = now(),
  }, supervisor)
  local cg, err, errno = own_cgroup(opts.cgroup)
  if not cg then return nil, err, errno end
  self.cg = cg
  self.own_cg = type(opts.cgroup) == "string" -- a handle given stays its caller's to close
  local ep
  ep, err, errno = core.epoll()
  if not ep then return nil, "supervisor: " .. err, errno end
  self.ep = ep
  -- The runtime directory (notify sockets; the control socket by
  -- default): made 0711 and checked as this user's own from / down, so no
  -- other user can plant or swap a name in it; services reach their own
  -- socket only (each is owned by its service's user, mode 0600).
  local ctl_dir, ctl_name
  if opts.control then
    ctl_dir, ctl_name = opts.control:match("^(.*)/([^/]+)$")
    if not ctl_name then ctl_dir, ctl_name = ".", opts.control end
    if ctl_dir == "" then ctl_dir = "/" end
    if #opts.control > SUN_PATH_MAX then
      return self:_abandon(("supervisor: control socket %s: longer than the %d bytes a unix socket address holds")
        :format(opts.control, SUN_PATH_MAX), E.ENAMETOOLONG)
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
  if opts.control then
    -- Its own directory, checked as the runtime one is (an existing one,
    -- such as /run, keeps its mode).
    dir, err, errno = core.dir_open(ctl_dir, { create = true, private = true, mode = OCTAL_0700 })
    if not dir then return self:_abandon("supervisor: control socket " .. err, errno) end
    self.ctl_dir = dir
    local ls
    ls, err, errno = dir:bind(ctl_name, "listen", { mode = OCTAL_0600 })
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
  if opts.subreaper then
    local ok
    ok, err, errno = core.subreaper_hold(true)
    if not ok then return self:_abandon("supervisor: " .. tostring(err), errno) end
    self.subreaper = true
  end
  if opts.signals ~= false then
    local sig
    sig, err, errno = takana.signals { "TERM", "INT", "HUP", opts.subreaper and "CHLD" or nil }
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

-- Watches obj's descriptor: fd, or nil, message, errno (a cgroup handle
-- opens cgroup.events here, which fails at EMFILE).
function supervisor:_watch(obj, fn, pri)
  local fd, err, errno = obj:fileno()
  if not fd then return nil, err, errno end
  local ok
  ok, err, errno = self.ep:add(fd, pri)
  if not ok then return nil, err, errno end
  self.fds[fd] = { obj = obj, fn = fn }
  return fd
end

function supervisor:_unwatch(obj)
  if obj == nil then return end
  local ok, fd = pcall(obj.fileno, obj)
  if ok and fd and self.fds[fd] and self.fds[fd].obj == obj then
    self.ep:del(fd)
    self.fds[fd] = nil
  end
end

local svc_options = { name = "string", cmd = "table", env = "table", cwd = "string",
  restart = "string|function", backoff = "table", start_limit = "table", ready = "string|table",
  stop = "table", depends = "table", limits = "table", log = "string|function|boolean",
  autostart = "boolean", user = "string|number", group = "string|number", groups = "table",
  umask = "number", rlimits = "table", no_new_privs = "boolean", pdeathsig = "string|number",
  watchdog = "number" }

--- Declares a service (see the module's README section for every option).
-- `name`, `cmd = {prog, args...}`, `env` (added to the supervisor's
-- environment), `cwd`, `restart` ("on-failure" default, "always", "never",
-- or `function(svc, record) -> delay or false`), `backoff = {initial=0.1,
-- max=30, factor=2, reset_after=60}`, `start_limit = {burst=5,
-- interval=10}`, `ready` ("notify" or `{fd=n}`), `stop = {signal="TERM",
-- timeout=5}`, `depends = {names}`, `limits = {["memory.max"]=...}`,
-- `autostart` (default true); `watchdog = seconds`: once ready, the service
-- must send `WATCHDOG=1` on its `NOTIFY_SOCKET` at least that often (it is told
-- through `WATCHDOG_USEC`), else it gets SIGABRT, the stop sequence and
-- an exit record with `watchdog = true` (a failure); `user`, `group`, `groups`, `umask`,
-- `rlimits`, `no_new_privs`, `pdeathsig` go to spawn.
-- @treturn service the service table (read its `state`)
function supervisor:service(t, ...)
  nargs("service", 1, select("#", ...) + 1)
  check_options("service", 1, t, svc_options, required)
  local name = t.name
  if type(name) ~= "string" or not name:match("^[%w][%w_.@-]*$") or #name > 64 then
    argerror("service", 1, "option 'name': 1-64 of [A-Za-z0-9_.@-], not starting with a punctuation mark")
  end
  if self.services[name] then argerror("service", 1, "service '" .. name .. "' is already declared") end
  if type(t.cmd) ~= "table" or #t.cmd == 0 then argerror("service", 1, "option 'cmd': {prog, args...} expected") end
  for i, a in ipairs(t.cmd) do
    if type(a) ~= "string" and type(a) ~= "number" then argerror("service", 1, ("cmd[%d]: string expected"):format(i)) end
  end
  if type(t.restart) == "string" and not ({ always = 1, ["on-failure"] = 1, never = 1 })[t.restart] then
    argerror("service", 1, "option 'restart': \"always\", \"on-failure\", \"never\" or a function expected")
  end
  if type(t.ready) == "string" and t.ready ~= "notify" then
    argerror("service", 1, "option 'ready': \"notify\" or {fd = n} expected")
  end
  if type(t.ready) == "table" and not (math.type(t.ready.fd) == "integer" and t.ready.fd >= 3 and t.ready.fd < 1024) then
    argerror("service", 1, "option 'ready': {fd = 3..1023} expected")
  end
  local b = t.backoff or {}
  for k, v in pairs(b) do
    if not ({ initial = 1, max = 1, factor = 1, reset_after = 1 })[k] or type(v) ~= "number" or v < 0 or v ~= v then
      argerror("service", 1, "option 'backoff': {initial=, max=, factor=, reset_after=} non-negative numbers expected")
    end
  end
  local sl = t.start_limit or {}
  for k, v in pairs(sl) do
    if not ({ burst = 1, interval = 1 })[k] or type(v) ~= "number" or v < 0 or v ~= v then
      argerror("service", 1, "option 'start_limit': {burst=, interval=} non-negative numbers expected")
    end
  end
  local st = t.stop or {}
  for k, v in pairs(st) do
    if k == "signal" then signum("service", 1, v)
    elseif k ~= "timeout" or type(v) ~= "number" or v < 0 or v ~= v then
      argerror("service", 1, "option 'stop': {signal=, timeout=} expected")
    end
  end
  for i, d in ipairs(t.depends or {}) do
    if type(d) ~= "string" then argerror("service", 1, ("depends[%d]: a service name expected"):format(i)) end
  end
  if t.watchdog ~= nil and not (t.watchdog >= 0.01 and t.watchdog <= 86400) then
    argerror("service", 1, "option 'watchdog': 0.01..86400 seconds expected")
  end
  local svc = {
    name = name, cmd = t.cmd, env = t.env, cwd = t.cwd, restart = t.restart or "on-failure",
    backoff = { initial = b.initial or 0.1, max = b.max or 30, factor = b.factor or 2,
      reset_after = b.reset_after or 60 },
    start_limit = { burst = sl.burst or 5, interval = sl.interval or 10 },
    ready_mode = t.ready, stop_signal = signum("service", 1, st.signal or "TERM"),
    stop_timeout = st.timeout or 5, depends = t.depends or {}, limits = t.limits,
    log = t.log, spawn_extra = {}, watchdog = t.watchdog, watchdog_timeouts = 0,
    state = "stopped", want = t.autostart == false and "down" or "up",
    restarts = 0, fails = 0, starts = {}, oom_kills = 0, lines = {}, exits = {},
  }
  for _, k in ipairs { "user", "group", "groups", "umask", "rlimits", "no_new_privs", "pdeathsig" } do
    svc.spawn_extra[k] = t[k]
  end
  -- The owner of the service's notify socket: its own user, so that it
  -- and root alone can reach it.
  if t.user ~= nil or t.group ~= nil then
    local ok, uid, gid = pcall(core.ids, t.user, t.group)
    if not ok then argerror("service", 1, tostring(uid):gsub("^.-%((.*)%)$", "%1")) end
    svc.uid, svc.gid = uid, gid
  end
  -- Its name beneath the runtime directory; a short one where the service's
  -- own would not fit a socket address ('_' starts no service name).
  self.notify_seq = (self.notify_seq or 0) + 1
  svc.notify_name = name .. ".notify"
  if #self.runtime + 1 + #svc.notify_name > SUN_PATH_MAX then
    svc.notify_name = ("_%d.notify"):format(self.notify_seq)
  end
  self.services[name] = svc
  self.order[#self.order + 1] = name
  return svc
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
  local cg, err, errno = self.cg:mkdir(svc.name, { exist_ok = true })
  if not cg then return nil, err, errno end
  local ok
  ok, err, errno = self:_watch(cg, function() self:_cgroup_event(svc) end, true)
  if not ok then
    cg:close()
    return nil, err, errno
  end
  svc.cg = cg
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
local function populated(cg)
  local st = cg:state()
  if st and not st.populated then return false end
  local p = cg:procs()
  if p == nil then return true end
  if #p > 0 then return true end
  -- A sub-cgroup may hold processes: then cgroup.events is trusted.
  return #(cg:children() or {}) > 0
end

local function oom_count(cg)
  local s = cg:get("memory.events")
  return s and tonumber(s:match("oom_kill (%d+)")) or nil
end

-- (cpu.stat alone: stat() would keep a descriptor a file, and a
-- supervisor holds a handle a service)
local function cpu_ns(cg)
  local s = cg:get("cpu.stat")
  local us = s and tonumber(s:match("usage_usec (%d+)"))
  return us and us * 1000 or nil
end

-- ---- logs ----

function supervisor:_log_line(svc, stream, line)
  local ring = svc.lines
  ring[#ring + 1] = ("%s %s %s"):format(os.date("!%Y-%m-%dT%H:%M:%SZ"), stream, line)
  if #ring > self.log_lines * 2 then
    table.move(ring, #ring - self.log_lines + 1, #ring, 1)
    for i = #ring, self.log_lines + 1, -1 do ring[i] = nil end
  end
  local sink = svc.log
  if sink == nil then sink = self.log end
  if type(sink) == "function" then
    local ok, err = pcall(sink, svc.name, stream, line)
    if not ok then svc.log_error = tostring(err) end
  elseif type(sink) == "string" then
    self:_log_file(svc, sink, ring[#ring])
  end
end

-- The log directory at path, opened once and checked (not a directory
-- another user could plant links in): a dir handle, or nil, message, errno.
function supervisor:_logdir(path)
  local d = self.logdirs[path]
  if d then return d end
  local err, errno
  d, err, errno = core.dir_open(path, { create = true, mode = OCTAL_0750 })
  if not d then return nil, err, errno end
  self.logdirs[path] = d
  return d
end

-- Appends to <dir>/<service>.log, opened beneath the checked directory
-- (never through a link, only a regular file of this user's), rotated by
-- renames within that directory.
function supervisor:_log_file(svc, dir, text)
  if svc.log_halted then return end
  local name = svc.name .. ".log"
  if not svc.logf then
    local d, err = self:_logdir(dir)
    local f
    if d then f, err = d:append(name, OCTAL_0640) end
    if not f then svc.log_error = tostring(err) return end
    svc.log_error = nil
    svc.logf, svc.logd = f, d
    f:setvbuf("full", 65536)
    svc.log_bytes = f:seek("end") or 0
  end
  svc.logf:write(text, "\n")
  svc.log_bytes = svc.log_bytes + #text + 1
  if svc.log_bytes >= self.log_size then
    -- Each file moves one place down, the current one last (it stays open
    -- meanwhile). A rename that fails (something else at a name: a
    -- directory planted in a sticky log directory) stops file logging for
    -- this run with the reason: nothing is removed that was not moved
    -- first, and the file does not grow past log_size (lines stay in
    -- memory for `ctl logs`).
    local d = svc.logd
    for i = self.log_files - 1, 1, -1 do
      local ok, rerr, rerrno = d:rename(i == 1 and name or (name .. "." .. (i - 1)), name .. "." .. i)
      if not ok and rerrno ~= ENOENT then
        svc.log_error = "rotation: " .. tostring(rerr) .. "; file logging stopped until the next run"
        svc.log_halted = true
        svc.logf:close()
        svc.logf = nil
        return
      end
    end
    svc.logf:close()
    svc.logf = nil
    if self.log_files <= 1 then d:unlink(name) end
  end
end

-- Reads what one pipe holds, at most 256 KiB a call so that a flood from
-- one service cannot starve the others or the control socket.
function supervisor:_drain(svc, which)
  local p = svc[which]
  if not p then return end
  local stream = which == "out" and "stdout" or "stderr"
  local key = which .. "_partial"
  -- At most 4 reads a wake-up: a flood never keeps the loop from the
  -- control socket (the pipe stays readable, so the loop comes back).
  for _ = 1, 4 do
    local data = p:read(65536) -- what is there now; "" nothing yet; nil at EOF (or error)
    if data == "" then break end
    if data == nil then
      if svc[key] and svc[key] ~= "" then self:_log_line(svc, stream, svc[key]) end
      svc[key] = nil
      self:_unwatch(p)
      p:close()
      svc[which] = nil
      return
    end
    local buf = (svc[key] or "") .. data
    local start = 1
    while true do
      local nl = buf:find("\n", start, true)
      if not nl then break end
      self:_log_line(svc, stream, buf:sub(start, nl - 1))
      start = nl + 1
    end
    buf = buf:sub(start)
    if #buf > 65536 then
      self:_log_line(svc, stream, buf)
      buf = ""
    end
    svc[key] = buf
  end
  if svc.logf then svc.logf:flush() end
end

-- ---- readiness ----

-- Whether process pid is in the service's cgroup or below it; false when
-- that cannot be told (no credentials, gone).
local function in_service(svc, pid)
  pid = math.tointeger(pid)
  if not (svc.cg and pid and pid > 0 and pid <= 0x7fffffff) then return false end
  return svc.cg:holds(pid) == true
end

local function close_obj(self, o)
  if o then self:_unwatch(o); o:close() end
end

function supervisor:_set_ready(svc)
  if svc.state == "starting" then
    svc.state = "running"
    svc.ready = true
    svc.ready_at = now()
    if not svc.watchdog_triggered then self:_watchdog_arm(svc) end
  end
end

-- At most notify_batch (64) messages a wake-up: a flood (even rejected,
-- each costs a pidfd and a cgroup check) never starves the loop; the
-- socket stays readable, so the loop comes back.
function supervisor:_notify(svc)
  for _ = 1, self.notify_batch do
    if not svc.notify then return end
    local data, pid, uid, _, sender = svc.notify:recv()
    if not data then
      -- (nil, message, errno) EAGAIN: drained. EBUSY: descriptors senders
      -- passed are stuck closing on their own thread (kernels before 6.16
      -- cannot refuse them): the socket is left unread for a second, else
      -- the loop would spin on it.
      if uid == E.EBUSY then
        self:_unwatch(svc.notify)
        svc.notify_paused = now() + 1
      end
      return
    end
    -- Only processes of this service's cgroup (or below it) may speak for
    -- it, as systemd decides. The sender is held by a pidfd (the kernel's,
    -- or one checked to have started before the message was queued), and
    -- still alive after the cgroup check: the pid checked was the sender's,
    -- not a later process's. A sender already gone cannot be checked and is
    -- not believed (systemd-notify waits on its barrier until we have read
    -- the message, so it is still there).
    local ok = sender ~= nil and in_service(svc, pid) and sender:alive()
    if sender then sender:close() end
    if not ok then
      svc.notify_rejected = (svc.notify_rejected or 0) + 1
    else
      for line in data:gmatch("[^\n]+") do
        -- (a line that is no KEY=value is ignored, as systemd ignores it)
        local k, v = line:match("^([%u%d_]+)=(.*)$")
        if not k then -- luacheck: ignore 542
        elseif k == "READY" and v == "1" then self:_set_ready(svc)
        elseif k == "STATUS" then svc.status_text = v
        elseif k == "MAINPID" then self:_main_pid(svc, math.tointeger(tonumber(v)))
        elseif k:match("^WATCHDOG") then self:_watchdog_message(svc, k, v)
        elseif k == "STOPPING" and v == "1" then svc.stopping_notified = true
        end
      end
    end
  end
end

-- The watchdog runs from readiness (as systemd's, once start-up is
-- complete): each WATCHDOG=1 moves the deadline an interval on.
function supervisor._watchdog_arm(_, svc)
  svc.watchdog_deadline = svc.watchdog_s and now() + svc.watchdog_s or nil
end

-- WATCHDOG=1 pets; WATCHDOG=trigger fires at once (even without a watchdog
-- interval, as sd_notify(3) says); WATCHDOG_USEC=n sets the interval, 0
-- turns it off. Ignored outside starting/running: a service still petting
-- while it stops must not re-arm a deadline nobody will act on.
function supervisor:_watchdog_message(svc, k, v)
  if svc.state ~= "starting" and svc.state ~= "running" then return end
  if k == "WATCHDOG" and v == "1" then
    svc.watchdog_at = now()
    if svc.ready then self:_watchdog_arm(svc) end
  elseif k == "WATCHDOG" and v == "trigger" then
    svc.watchdog_triggered = true
    svc.watchdog_deadline = now()
  elseif k == "WATCHDOG_USEC" then
    local us = math.tointeger(tonumber(v))
    if not us or us < 0 then return end
    -- Bounded as the option is: the loop's wait cannot exceed 24 days.
    svc.watchdog_s = us > 0 and math.min(math.max(us / 1e6, 0.01), 86400) or nil
    if svc.ready then self:_watchdog_arm(svc) end
  end
end

-- No WATCHDOG=1 in time: SIGABRT (systemd's WatchdogSignal) to the whole
-- cgroup, then the stop sequence; the run counts as a failure.
function supervisor:_watchdog_fire(svc)
  svc.watchdog_deadline = nil
  svc.watchdog_fired = true
  svc.watchdog_timeouts = svc.watchdog_timeouts + 1
  svc.reason = svc.watchdog_triggered and "watchdog: WATCHDOG=trigger"
    or ("watchdog: no WATCHDOG=1 in %g s"):format(svc.watchdog_s)
  svc.after_failure = true
  self:_begin_stop(svc, 6)
end

-- MAINPID=n from inside the cgroup: n is the service's main process from
-- now on (a daemon that forked, or a wrapper's real server). Its exit ends
-- the run, as the first child's would: what is left is stopped. Unless it
-- was re-parented to a subreaper supervisor, it is not our child, and its
-- status is unknown (the record says main_exited either way).
function supervisor:_main_pid(svc, pid)
  if not pid or pid <= 0 or pid > 0x7fffffff then
    svc.notify_rejected = (svc.notify_rejected or 0) + 1
    return
  end
  if pid == svc.main_pid and (svc.mainfd or (svc.child and svc.child.pid == pid)) then return end
  -- Too late: the run is ending, or its main process has ended it.
  if svc.state == "stopping" or svc.main_exited then return end
  -- The pidfd first: alive after the cgroup check, it is the process
  -- that was checked, not a reuse of its pid.
  local fd = takana.pidfd(pid)
  if not (fd and in_service(svc, pid) and fd:alive()) then
    if fd then fd:close() end
    svc.notify_rejected = (svc.notify_rejected or 0) + 1
    return
  end
  close_obj(self, svc.mainfd)
  svc.mainfd = nil
  svc.main_pid = pid
  if svc.child and svc.child.pid == pid then fd:close() return end
  svc.mainfd = fd
  svc.status, svc.usage = nil, nil -- a first child's exit, already seen, is not the run's
  -- Events are dispatched by descriptor number: a stale one (this fd
  -- closed and its number reused in the same batch) must not count.
  assert(self:_watch(fd, function()
    if svc.mainfd == fd and not fd:alive() then self:_main_exit(svc) end
  end))
end

-- The status of an exited MAINPID process, where it was re-parented to us
-- (subreaper) and so is ours to reap.
local function main_status(svc)
  local st = svc.mainfd:wait(0)
  if st then svc.status, svc.usage = st, svc.mainfd:usage() end
end

function supervisor:_main_exit(svc)
  if svc.mainfd then main_status(svc) end
  close_obj(self, svc.mainfd)
  svc.mainfd = nil
  svc.main_exited = true
  if svc.state == "stopping" or (svc.child == nil and not populated(svc.cg)) then
    return self:_maybe_finished(svc)
  end
  svc.after_failure = true
  self:_begin_stop(svc)
end

function supervisor:_readyfd(svc)
  local p = svc.readyp
  if not p then return end
  local data = p:read(4096) -- "" nothing yet; nil at EOF
  if data == "" then return end
  if data and data:find("\n", 1, true) then self:_set_ready(svc) end
  if data == nil or data:find("\n", 1, true) then
    self:_unwatch(p)
    p:close()
    svc.readyp = nil
  end
end

-- ---- start ----

function supervisor:_deps_ready(svc)
  for _, d in ipairs(svc.depends) do
    local dep = self.services[d]
    if not dep or dep.state ~= "running" then return false end
  end
  return true
end

function supervisor._fail(_, svc, reason)
  svc.state = "failed"
  svc.reason = reason
  svc.deadline = nil
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
  spec.cwd = svc.cwd
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
  -- (descriptors already open: only epoll's own ENOMEM could fail here)
  assert(self:_watch(child, function() self:_child_exit(svc) end))
  assert(self:_watch(svc.out, function() self:_drain(svc, "out") end))
  assert(self:_watch(svc.err, function() self:_drain(svc, "err") end))
  if ch.notify then
    svc.notify = ch.notify
    assert(self:_watch(ch.notify, function() self:_notify(svc) end))
  end
  if ch.readyr then
    svc.readyp = ch.readyr
    assert(self:_watch(ch.readyr, function() self:_readyfd(svc) end))
  end
  svc.state = "starting"
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

function supervisor._adopt(_, svc)
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

-- Reaps the zombies among this process's children that services orphaned
-- (in the cgroup of any supervisor here, even one that is no subreaper,
-- or a service's cgroup already removed), never a service's own child or
-- another supervisor's main process. A main process of ours ends its run
-- with its status, unless `runs` is false (a run is being finished).
function supervisor:_reap(runs)
  local others, mains = {}, {}
  for sup in pairs(live) do
    for _, svc in pairs(sup.services) do
      if svc.child then others[svc.child.pid] = true end
      if svc.mainfd then
        if sup == self then mains[svc.main_pid] = svc else others[svc.main_pid] = true end
      end
    end
  end
  for _, pid in ipairs(own_children()) do
    local svc = mains[pid]
    if svc then
      -- (a hook run by an earlier _main_exit may have ended this run)
      if runs ~= false and svc.mainfd and svc.main_pid == pid and not svc.mainfd:alive() then
        self:_main_exit(svc)
      end
    elseif not others[pid] and supervised(pid) then
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
    watchdog = svc.watchdog_fired, main_exited = svc.main_exited }
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
  if svc.cg_killed then
    -- A cgroup once killed through cgroup.kill is not reused: on some
    -- kernels (6.18.44 here) a process later spawned into it is SIGKILLed
    -- too. The next start makes a fresh one of the same name.
    svc.cg_killed = nil
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
  if svc.want == "down" or svc.stop_requested then
    svc.stop_requested = nil
    svc.state = "stopped"
    if svc.removing then self:_forget(svc) end
    return
  end
  self:_schedule(svc, rec)
end

function supervisor:_forget(svc)
  if svc.cg_watched then self:_unwatch(svc.cg) end
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
  local failed = rec.error ~= nil or rec.code ~= 0 or rec.signal ~= nil or rec.oom or rec.watchdog
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
    delay = math.min(b.max, b.initial * b.factor ^ svc.fails)
  end
  -- The watchdog's reason outlives the run it ended.
  svc.reason = rec.error or (rec.watchdog and svc.reason) or nil
  if not delay then
    -- Not restarted: it stays down until asked (start, restart).
    svc.want = "down"
    svc.state = rec.error and "failed" or "stopped"
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

-- ---- the loop ----

local function active(svc)
  return svc.state == "running" or svc.state == "starting" or svc.state == "stopping"
end

function supervisor:_tick()
  local t = now()
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
  local progress = true
  while progress do
    progress = false
    for _, name in ipairs(self.order) do
      local svc = self.services[name]
      if svc and svc.want == "up" and (svc.state == "stopped" or svc.state == "waiting") then
        if self:_deps_ready(svc) then
          svc.restart_now = nil
          self:_start(svc)
          if svc.state == "running" then progress = true end
        else
          svc.state = "waiting"
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
    if svc.notify_paused and (not at or svc.notify_paused < at) then at = svc.notify_paused end
    if at then
      local d = math.max(0, at - t)
      if not best or d < best then best = d end
    end
    if svc.want == "up" and (svc.state == "stopped") then best = 0 end
  end
  if self.pending_out then best = math.min(best or 0.05, 0.05) end
  -- The epoll wait takes at most 24 days; a longer deadline wakes early.
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
  if not self.begun then
    self.begun = true
    self:_sweep()
  end
  self:_tick()
  if self.done then return false end
  local wait = self:timeout()
  if timeout and (not wait or timeout < wait) then wait = timeout end
  local ready, err, errno = self.ep:wait(wait)
  if not ready then return nil, err, errno end
  for _, fd in ipairs(ready) do
    local w = self.fds[fd]
    if w then w.fn() end
  end
  self:_flush_conns()
  self:_tick()
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

--- Closes the supervisor's descriptors (services are not touched).
function supervisor:close()
  if self.closed then return end
  self.closed = true
  for _, svc in pairs(self.services) do
    for _, k in ipairs { "child", "out", "err", "notify", "readyp", "mainfd" } do
      if svc[k] then svc[k]:close() svc[k] = nil end
    end
    if svc.logf then svc.logf:close() svc.logf = nil end
    svc.logd = nil
    if (svc.ready_mode == "notify" or svc.watchdog) and self.rtdir then self.rtdir:unlink(svc.notify_name) end
    if svc.cg then
      svc.cg:close()
      svc.cg, svc.cg_watched = nil, false
    end
  end
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
  if self.own_cg then self.cg:close() end
  if self.ep then self.ep:close() end
end

-- At the first step: cgroups under the supervisor's that belong to no
-- declared service are the leftovers of services removed from the
-- configuration; they are killed (their processes have nobody to watch).
function supervisor:_sweep()
  for _, name in ipairs(self.cg:children() or {}) do
    if not self.services[name] then
      local cg = takana.cgroup(self.cg.relpath .. "/" .. name)
      if cg then
        if populated(cg) then cg:kill { wait = 5 } end
        cg:remove()
        cg:close()
      end
    end
  end
end

function supervisor:_signals()
  while true do
    local s = self.sigfd:read()
    if not s then return end
    if s.signo == 15 or s.signo == 2 then
      self:shutdown()
    elseif s.signo == 1 then
      self:reload()
    elseif s.signo == 17 then
      self:_reap()
    end
  end
end

--- Calls the reload hook (`reload` option), as SIGHUP does. The hook may
-- add (`sup:service`), remove (`sup:remove`) or change services.
function supervisor:reload()
  if not self.reload_hook then return true end
  local ok, err = pcall(self.reload_hook, self)
  self.reload_error = not ok and tostring(err) or nil
  return ok, err
end

-- ---- status ----

local function round(x, d) local m = 10 ^ (d or 3) return math.floor(x * m + 0.5) / m end

--- The status of one service as a plain table (what `takana ctl status`
-- prints).
function supervisor.status_of(_, svc)
  local t = now()
  local ex = svc.last_exit
  return {
    name = svc.name, state = svc.state, pid = svc.pid or svc.main_pid, ready = svc.ready or false,
    uptime = (active(svc) and svc.started_at) and round(t - svc.started_at) or nil,
    restarts = svc.restarts, reason = svc.reason, status = svc.status_text,
    adopted = svc.adopted or nil, oom_kills = svc.oom_kills, cgroup = svc.cgpath,
    last_exit = ex and { code = ex.code, signal = ex.signal, oom = ex.oom, runtime = round(ex.runtime),
      cpu_ns = ex.cpu_ns, maxrss_bytes = ex.maxrss_bytes, error = ex.error, stopped = ex.stopped,
      watchdog = ex.watchdog, main_exited = ex.main_exited } or nil,
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

-- ---- control ----

function supervisor:_accept()
  while true do
    local c, pid, uid = self.control:accept()
    if not c then return end
    -- The socket is 0600 already; the peer's uid is checked as well, so a
    -- socket file moved or chmod'ed by mistake still admits nobody else.
    if uid ~= self.uid and uid ~= 0 then
      c:write(M.json_encode { ok = false, error = "permission denied: uid " .. uid } .. "\n")
      c:close()
    else
      local conn = { sock = c, inbuf = "", outbuf = "", pid = pid }
      self.conns[c:fileno()] = conn
      if not self:_watch(c, function() self:_conn_read(conn) end) then
        self.conns[c:fileno()] = nil
        c:close()
      end
    end
  end
end

function supervisor:_conn_close(conn)
  self:_unwatch(conn.sock)
  self.conns[conn.sock:fileno()] = nil
  conn.sock:close()
end

function supervisor:_conn_read(conn)
  local data, _, errno = conn.sock:read(65536)
  if data == nil and errno == EAGAIN then return end
  if not data or data == "" then
    conn.eof = true
    if conn.outbuf == "" then return self:_conn_close(conn) end
    return
  end
  conn.inbuf = conn.inbuf .. data
  if #conn.inbuf > 65536 then
    conn.outbuf = conn.outbuf .. M.json_encode { ok = false, error = "request longer than 64 KiB" } .. "\n"
    conn.inbuf = ""
  end
  while true do
    local line, rest = conn.inbuf:match("^([^\n]*)\n(.*)$")
    if not line then break end
    conn.inbuf = rest
    conn.outbuf = conn.outbuf .. M.json_encode(self:_command(line)) .. "\n"
  end
  self:_flush(conn)
end

function supervisor:_flush(conn)
  while conn.outbuf ~= "" do
    local n, _, errno = conn.sock:write(conn.outbuf)
    if not n then
      if errno ~= EAGAIN then conn.outbuf = "" break end
      self.pending_out = true
      return
    end
    conn.outbuf = conn.outbuf:sub(n + 1)
  end
  if conn.eof then self:_conn_close(conn) end
end

function supervisor:_flush_conns()
  if not self.pending_out then return end
  self.pending_out = false
  for _, conn in pairs(self.conns) do
    if conn.outbuf ~= "" then self:_flush(conn) end
  end
end

local commands = { status = true, start = true, stop = true, restart = true, signal = true, logs = true }

function supervisor:_command(line)
  local req, err = M.json_decode(line)
  if type(req) ~= "table" then return { ok = false, error = "bad request: " .. tostring(err or "an object expected") } end
  local cmd = req.cmd
  if not commands[cmd] then
    return { ok = false, error = "unknown command '" .. tostring(cmd) .. "' (status, start, stop, restart, signal, logs)" }
  end
  local name = req.name
  if cmd == "status" and name == nil then return { ok = true, services = self:status(), pid = self.pid } end
  local svc = type(name) == "string" and self.services[name]
  if not svc then return { ok = false, error = "no service '" .. tostring(name) .. "'" } end
  if cmd == "status" then return { ok = true, services = { self:status_of(svc) } } end
  if cmd == "logs" then
    local n = math.tointeger(req.lines) or 50
    local ring = svc.lines
    return { ok = true, lines = setmetatable(table.move(ring, math.max(1, #ring - n + 1), #ring, 1, {}), M.array) }
  end
  if cmd == "signal" then
    local ok, sig = pcall(signum, "signal", 2, req.signal or "TERM")
    if not ok then return { ok = false, error = "bad signal '" .. tostring(req.signal) .. "'" } end
    local r, e = self:signal(name, sig)
    return r and { ok = true } or { ok = false, error = e }
  end
  local r, e = self[cmd](self, name)
  return r and { ok = true } or { ok = false, error = e }
end

-- ---- client ----

--- Sends one request to a supervisor's control socket and waits (up to
-- timeout seconds, default 5) for the answer.
-- @tparam string path the control socket
-- @tparam table req `{cmd = "status"|"start"|..., name = ..., signal = ...}`
-- @number[opt=5] timeout seconds
-- @treturn[1] table the decoded answer (`ok`, and `error` or the data)
-- @treturn[2] nil, message, errno
function M.request(path, req, timeout)
  if type(path) ~= "string" then argerror("request", 1, "string expected, got " .. type(path)) end
  if type(req) ~= "table" then argerror("request", 2, "table expected, got " .. type(req)) end
  local c, err, errno = core.unix_connect(path)
  if not c then return nil, err, errno end
  local out = M.json_encode(req) .. "\n"
  local deadline = now() + (timeout or 5)
  while out ~= "" do
    local n, werr, werrno = c:write(out)
    if not n and werrno ~= EAGAIN then c:close() return nil, werr, werrno end
    if n then out = out:sub(n + 1) else takana.poll({}, 0.01) end
    if now() > deadline then c:close() return nil, "request: timed out", ETIMEDOUT end
  end
  local buf = ""
  while not buf:find("\n", 1, true) do
    local left = deadline - now()
    if left <= 0 then c:close() return nil, "request: no answer within the timeout", ETIMEDOUT end
    takana.poll({ c }, left)
    local data, rerr, rerrno = c:read(1048576)
    if data == "" then break end
    if data then buf = buf .. data
    elseif rerrno ~= EAGAIN then c:close() return nil, rerr, rerrno end
  end
  c:close()
  local line = buf:match("^([^\n]*)")
  local v, derr = M.json_decode(line or "")
  if v == nil then return nil, "request: bad answer: " .. tostring(derr), EBADMSG end
  return v
end

local function fmt_secs(x)
  if x == nil then return "-" end
  if x < 60 then return ("%.1fs"):format(x) end
  if x < 3600 then return ("%dm%02ds"):format(x // 60, math.floor(x % 60)) end
  return ("%dh%02dm"):format(x // 3600, math.floor(x % 3600 // 60))
end

local function exit_words(ex)
  if not ex then return "-" end
  local w
  if ex.error then w = "error: " .. ex.error
  elseif ex.signal then w = "signal " .. ex.signal
  elseif ex.code then w = "code " .. ex.code
  elseif ex.main_exited then w = "main process (MAINPID) exited, status unknown"
  else w = "unknown status" end
  if ex.main_exited and (ex.code or ex.signal) then w = w .. " (MAINPID)" end
  if ex.oom then w = w .. " (oom)" end
  if ex.watchdog then w = w .. " (watchdog timeout)" end
  if ex.stopped then w = w .. " (stopped)" end
  return w .. " after " .. fmt_secs(ex.runtime)
end

--- Formats `status` answers as `takana ctl status` prints them: one block
-- a service, like `systemctl status`.
-- @tparam {table,...} services
-- @treturn string
function M.format_status(services)
  local out = {}
  for _, raw in ipairs(services or {}) do
    local s = printable_all(raw)
    local dot = s.state == "running" and "*" or (s.state == "failed" and "x" or "o")
    out[#out + 1] = ("%s %s - %s%s"):format(dot, s.name, s.state, s.reason and (": " .. s.reason) or "")
    out[#out + 1] = ("    pid: %s  uptime: %s  restarts: %d  ready: %s%s"):format(
      s.pid and tostring(s.pid) or "-", fmt_secs(tonumber(s.uptime)), math.tointeger(tonumber(s.restarts)) or 0,
      s.ready and "yes" or "no",
      s.adopted and "  (adopted)" or "")
    out[#out + 1] = "    last exit: " .. exit_words(s.last_exit) ..
      (s.next_start and ("  next start in " .. fmt_secs(s.next_start)) or "")
    if s.status then out[#out + 1] = "    status: " .. s.status end
    out[#out + 1] = "    cgroup: " .. tostring(s.cgroup or "-")
  end
  return table.concat(out, "\n") .. (#out > 0 and "\n" or "")
end

--- Adds a supervisor's services to a Prometheus exposition: calls
-- `metric(name, kind, help, labels, value)` for `takana_service_up`,
-- `takana_service_restarts_total`, `takana_service_oom_kills_total` and
-- `takana_service_last_exit_code` (128 + signal for a signal, as shells do).
-- @string sock the control socket
-- @func metric
-- @treturn[1] true
-- @treturn[2] nil, message, errno
function M.metrics(sock, metric)
  local r, err, errno = M.request(sock, { cmd = "status" })
  if not r then return nil, "supervisor " .. sock .. ": " .. err, errno end
  if not r.ok then return nil, "supervisor " .. sock .. ": " .. tostring(r.error) end
  for _, s in ipairs(r.services or {}) do
    local l = { service = s.name, supervisor = sock }
    metric("takana_service_up", "gauge", "1 when the service is running (and ready).", l,
      s.state == "running" and 1 or 0)
    metric("takana_service_restarts_total", "counter", "Restarts of the service by its supervisor.", l,
      s.restarts or 0)
    metric("takana_service_oom_kills_total", "counter", "OOM kills in the service's cgroup.", l, s.oom_kills or 0)
    local ex = s.last_exit
    if ex and (ex.code or ex.signal) then
      metric("takana_service_last_exit_code", "gauge", "Exit code of the last run (128 + signal when killed).",
        l, ex.code or 128 + ex.signal)
    end
  end
  return true
end

--- `signum(fname, n, sig)`: the number of signal `sig` (a number, or a
-- name with or without "SIG"); raises as argument `n` of `fname` otherwise.
-- @function signum
M.signum = signum

return M
