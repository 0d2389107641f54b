--- takana.supervisor, the logger: a process of its own (one a supervisor,
-- in the cgroup `_logger` beside the services') that holds the read ends of
-- the services' output pipes and writes their log files, as s6-svscan
-- keeps a pipe open between a service and its s6-log. The supervisor hands
-- it each new pipe over `logger.sock` in the runtime directory
-- (SCM_RIGHTS) and keeps none: a supervisor killed leaves the services
-- writing into pipes that are still read, a restarted one adopts the
-- logger, and a flood costs the logger's loop, not the supervisor's.
-- Where no logger can be had, the supervisor reads the pipes itself
-- (log.lua) and says why once on stderr (`sup.logger_error`).
-- @module takana.supervisor
local takana = require "takana"
local core = require "takana.core"
local json = require "takana.json"
local C = require "takana.supervisor.class"
local supervisor, now, OCTAL_0600, populated = C.supervisor, C.now, C.OCTAL_0600, C.populated
local EAGAIN = C.E.EAGAIN

local SOCKET = "logger.sock"
-- '_' starts no service name: the sweep of removed services' cgroups
-- never takes it for one.
local CGROUP = "_logger"
C.LOGGER_CGROUP = CGROUP
-- Seconds a logger waits for its first supervisor, or, told to exit, for
-- its pipes' last lines.
local GRACE = 10
-- A `tail` answer holds at most this many bytes of lines (the newest).
local TAIL_MAX = 65536

-- Writes all of s to a non-blocking stream socket, waiting up to 2 s for
-- room: true, or nil, message.
local function send_all(sock, s, fd_obj)
  local deadline = now() + 2
  local first = true
  while #s > 0 do
    local n, err, errno
    if first and fd_obj then n, err, errno = sock:send_fd(s, fd_obj) else n, err, errno = sock:write(s) end
    if n then
      first = false
      s = s:sub(n + 1)
    elseif errno ~= EAGAIN or now() > deadline then
      return nil, err
    else
      core.poll_fds({}, 0.002)
    end
  end
  return true
end

-- ---- the logger process ----

-- The logger's state is a supervisor-shaped table: log.lua's `_drain`,
-- `_log_line` and `_log_file` write its files as the supervisor's own
-- loop would (same stamps, same rotation, same safe opens).
-- Tells every connected supervisor of a change of svc's log_error (a
-- file that cannot be opened, a rotation stopped; `ctl status` shows it).
function supervisor:_logger_report(svc, conn)
  if svc.log_error == svc.sent_error and not conn then return end
  svc.sent_error = svc.log_error
  local line = json.encode { op = "error", name = svc.name, error = svc.log_error or false } .. "\n"
  for c in pairs(conn and { [conn] = true } or self.conns) do
    -- (a connection dropped meanwhile has a closed socket)
    if self.conns[c] and not send_all(c.sock, line) then self:_logger_drop(c) end
  end
end

-- An error in one of the logger's handlers: its stderr is /dev/null, so
-- connected supervisors are told (they print it). At most FAULTS_A_MINUTE
-- a minute, whatever their text: a handler that fails at every wakeup
-- cannot flood them, nor stall this loop in sends; the next report says
-- how many were not sent.
local FAULTS_A_MINUTE = 5

function supervisor:_logger_fault(err)
  local t = now()
  if t >= (self.fault_window or 0) then self.fault_window, self.faults_sent = t + 60, 0 end
  if self.faults_sent >= FAULTS_A_MINUTE then
    self.faults_unsent = (self.faults_unsent or 0) + 1
    return
  end
  self.faults_sent = self.faults_sent + 1
  local line = json.encode { op = "fault", error = err, unsent = self.faults_unsent } .. "\n"
  self.faults_unsent = nil
  for c in pairs(self.conns) do
    if self.conns[c] and not send_all(c.sock, line) then self:_logger_drop(c) end
  end
end

local function handle(self, conn, msg)
  if type(msg) ~= "table" then return end
  if msg.op == "pipe" then
    local pipe = table.remove(conn.fds, 1)
    if not pipe or type(msg.name) ~= "string" or (msg.stream ~= "out" and msg.stream ~= "err") then
      if pipe then pipe:close() end
      return
    end
    local svc = self.services[msg.name]
    if not svc then
      svc = { name = msg.name, lines = {} }
      self.services[msg.name] = svc
    end
    self.log_size = math.tointeger(msg.size) or self.log_size
    self.log_files = math.tointeger(msg.files) or self.log_files
    self.log_lines = math.tointeger(msg.lines) or self.log_lines
    svc.log = type(msg.dir) == "string" and msg.dir or false
    svc.log_halted = nil -- a rotation that failed is tried again each run
    local which = msg.stream
    local old = svc[which]
    if old then
      -- An earlier run's pipe: what it still holds comes first, up to what
      -- a pipe can hold (1 MiB: four drains). Not until it is empty: a
      -- process of the service's user that kept its write end (pidfd_getfd)
      -- could keep it full, and every other service unread.
      for _ = 1, 4 do
        if svc[which] ~= old or not self:_drain(svc, which) then break end
      end
      if svc[which] == old then
        self:_drain_end(svc, which)
      end
    end
    svc[which] = pipe
    assert(self:_watch(pipe, function()
      self:_drain(svc, which)
      self:_logger_report(svc)
    end))
  elseif msg.op == "tail" then
    local svc = self.services[msg.name]
    local ring, out, size = svc and svc.lines or {}, {}, 0
    local n = math.tointeger(msg.n) or 50
    for i = #ring, math.max(1, #ring - n + 1), -1 do
      size = size + #ring[i] + 8
      if size > TAIL_MAX then break end
      table.insert(out, 1, ring[i])
    end
    if not send_all(conn.sock, json.encode { lines = setmetatable(out, json.array) } .. "\n") then
      self:_logger_drop(conn)
    end
  elseif msg.op == "exit" then
    self.exiting = now() + GRACE
    if self.listen then
      self:_unwatch(self.listen)
      self.listen:close()
      self.listen = nil
      self.rtdir:unlink(SOCKET)
    end
  end
end

-- One receive from a supervisor into conn's buffer and descriptors:
-- recv_fds's data ("" at its end), or nil and the errno.
local function receive(conn)
  local data, fds, errno = conn.sock:recv_fds()
  if not data then return nil, errno end
  table.move(fds, 1, #fds, #conn.fds + 1, conn.fds)
  conn.buf = conn.buf .. data
  return data
end

function supervisor:_logger_drop(conn)
  if not self.conns[conn] then return end
  self.conns[conn] = nil
  -- Pipes the supervisor sent before it stalled are taken still: it closed
  -- its copies, and their services would die of SIGPIPE.
  for _ = 1, 64 do
    local data = receive(conn)
    if not data or data == "" then break end
  end
  for line in conn.buf:gmatch("([^\n]*)\n") do
    local ok, msg = pcall(json.decode, line)
    if ok and type(msg) == "table" and msg.op == "pipe" then handle(self, conn, msg) end
  end
  self:_unwatch(conn.sock)
  conn.sock:close()
  for _, p in ipairs(conn.fds) do p:close() end
end

function supervisor:_logger_input(conn)
  for _ = 1, 16 do
    if not self.conns[conn] then return end   -- dropped by a send that failed
    local data, errno = receive(conn)
    if not data then
      if errno ~= EAGAIN then self:_logger_drop(conn) end
      return
    end
    if data == "" then return self:_logger_drop(conn) end
    while self.conns[conn] do
      local nl = conn.buf:find("\n", 1, true)
      if not nl then break end
      local line = conn.buf:sub(1, nl - 1)
      conn.buf = conn.buf:sub(nl + 1)
      local ok, msg = pcall(json.decode, line)
      if ok then handle(self, conn, msg) end
    end
    if #conn.buf > 65536 then return self:_logger_drop(conn) end
  end
end

-- A pipe given up on: its partial line logged, closed.
function supervisor:_drain_end(svc, which)
  local key = which .. "_partial"
  if svc[key] and svc[key] ~= "" then self:_log_line(svc, which == "out" and "stdout" or "stderr", svc[key]) end
  svc[key] = nil
  self:_unwatch(svc[which])
  svc[which]:close()
  svc[which] = nil
  if svc.logf then svc.logf:flush() end
end

-- Whether any pipe is still open in the logger.
local function any_pipe(self)
  for _, svc in pairs(self.services) do
    if svc.out or svc.err then return true end
  end
  return false
end

-- The logger process's main loop (what `_logger_start` runs in a new
-- interpreter): listens on `logger.sock` in `$TAKANA_LOGGER_RUNTIME`
-- for its supervisor's own uid; exits when told (once its pipes end, at
-- most 10 s later), or when no supervisor is connected and every pipe has
-- reached its end.
function C.M._logger_main()
  local rt = assert(os.getenv("TAKANA_LOGGER_RUNTIME"), "TAKANA_LOGGER_RUNTIME unset")
  local self = setmetatable({ services = {}, watched = {}, conns = {}, logdirs = {},
    log_size = 1048576, log_files = 5, log_lines = 200, uid = core.geteuid() }, supervisor)
  self.ep = assert(core.poller())
  self.rtdir = assert(core.dir_open(rt, { private = true }))
  self.listen = assert(self.rtdir:bind(SOCKET, "listen", { mode = OCTAL_0600 }))
  local started, had_conn = now(), false
  assert(self:_watch(self.listen, function()
    while self.listen do
      local sock, pid, uid = self.listen:accept()
      if not sock then break end
      if uid ~= self.uid then
        sock:close()
      else
        local conn = { sock = sock, buf = "", fds = {}, pid = pid }
        self.conns[conn] = true
        had_conn = true
        assert(self:_watch(sock, function() self:_logger_input(conn) end))
        -- (a supervisor that adopts us learns what is wrong, and what is
        -- no longer)
        for _, svc in pairs(self.services) do self:_logger_report(svc, conn) end
      end
    end
  end))
  while true do
    local ready, n = self.ep:wait(1)
    if ready then
      for i = 1, n do
        local fn = self.watched[ready[i]]
        -- The logger holds every service's output: an error in one
        -- handler is reported, never the end of the process.
        local ok, err = pcall(fn or function() end)
        if not ok then pcall(self._logger_fault, self, tostring(err)) end
      end
    end
    local t = now()
    if not any_pipe(self) and (self.exiting or (next(self.conns) == nil and (had_conn or t - started > GRACE))) then
      break
    end
    if self.exiting and t > self.exiting then break end
  end
  for _, svc in pairs(self.services) do
    for _, which in ipairs { "out", "err" } do
      if svc[which] then self:_drain(svc, which) end
      if svc[which] then self:_drain_end(svc, which) end
    end
    if svc.logf then svc.logf:close() end
  end
  -- (told to exit, it unlinked its socket already; otherwise its node goes
  -- with it, unless a newer logger has bound that name since)
  if self.listen then
    self.listen:close()
    if not core.unix_connect(rt .. "/" .. SOCKET) then self.rtdir:unlink(SOCKET) end
  end
end

-- ---- the supervisor's side ----

-- The logger's cgroup handle (made when make): nil, message when none.
function supervisor:_logger_cgroup(make)
  if self.logger_cg then return self.logger_cg end
  local cg, err
  if make then
    cg, err = self.cg:mkdir(CGROUP, { exist_ok = true })
  else
    cg, err = takana.cgroup(self.cg.relpath .. "/" .. CGROUP)
  end
  self.logger_cg = cg
  return cg, err
end

-- A connection to a logger listening in the runtime directory that is
-- this supervisor's: the same uid (SO_PEERCRED), its process in the
-- supervisor's `_logger` cgroup. nil, why otherwise.
function supervisor:_logger_find(pid_wanted)
  local sock, err = core.unix_connect(self.runtime .. "/" .. SOCKET, 1)
  if not sock then return nil, err end
  local pid, uid = sock:peer()
  local cg = self:_logger_cgroup(false)
  if pid and uid == self.uid and cg and cg:holds(pid) == true and (pid_wanted == nil or pid == pid_wanted) then
    return sock
  end
  sock:close()
  return nil, ("%s/%s: its listener (pid %s, uid %s) is not this supervisor's logger"):format(self.runtime,
    SOCKET, tostring(pid), tostring(uid))
end

-- Starts a logger in the supervisor's `_logger` cgroup (a new session, no
-- death signal: it outlives the supervisor) and connects to it.
-- The interpreter to run a logger with: `logger = {prog, args...}`, else
-- this process's own when it is the standalone one; or nil, why not.
function supervisor:_logger_interpreter()
  if type(self.logger_opt) == "table" then return table.move(self.logger_opt, 1, #self.logger_opt, 1, {}) end
  local a = rawget(_G, "arg")
  if type(a) ~= "table" or a[-1] == nil then
    return nil, "this process is not the standalone Lua interpreter (no arg[-1]) that a logger would run in"
  end
  local me, exe, perr = takana.process(core.getpid())
  if me then
    exe, perr = me:exe()
    me:close()
  end
  if not exe or exe:find(" %(deleted%)$") then return nil, "this interpreter's path: " .. tostring(perr or exe) end
  return { exe }
end

function supervisor:_logger_start()
  local argv, why = self:_logger_interpreter()
  if not argv then return nil, why end
  local cg, err = self:_logger_cgroup(true)
  if not cg then return nil, "cgroup " .. CGROUP .. ": " .. tostring(err) end
  local env = takana.environ()
  env.LUA_PATH, env.LUA_CPATH, env.TAKANA_LOGGER_RUNTIME = package.path, package.cpath, self.runtime
  argv[#argv + 1], argv[#argv + 2] = "-e", "require 'takana.supervisor'._logger_main()"
  argv.cgroup, argv.setsid, argv.stdin, argv.stdout, argv.stderr, argv.env = cg, true, "null", "null", "null", env
  local ok, child, serr = pcall(takana.spawn, argv)
  if not (ok and child) then return nil, "spawn: " .. tostring(ok and serr or child) end
  local deadline = now() + 5
  while true do
    local sock = self:_logger_find(child.pid)
    if sock then
      local old = self.logger_child   -- a logger started before, gone
      if old and old:wait(0) then old:close() end
      self.logger_child = child
      return sock
    end
    local st = child:wait(0)
    if st then
      child:close()
      return nil, ("it exited (%s) before it listened"):format(st.code and ("code " .. st.code) or
        ("signal " .. tostring(st.signal)))
    end
    if now() > deadline then
      child:signal(9)
      child:wait(1)
      child:close()
      return nil, "it did not listen within 5 s"
    end
    core.poll_fds({ child:fileno() }, 0.005)
  end
end

-- The connection to this supervisor's logger, found or started; nil once
-- that has failed (then the supervisor logs in-process, and says why).
function supervisor:_logger()
  if self.logger_conn then return self.logger_conn end
  if self.logger_opt == false then return nil end
  if self.logger_error and not (self.logger_retry and now() >= self.logger_retry) then return nil end
  local sock = self:_logger_find()
  local err
  if not sock then sock, err = self:_logger_start() end
  self.logger_retry = nil
  if not sock then
    self.logger_error = "no logger process (" .. tostring(err) .. "): services' output is read in-process"
    io.stderr:write("takana supervisor: ", self.logger_error, "\n")
    return nil
  end
  self.logger_conn, self.logger_buf, self.logger_error = sock, "", nil
  assert(self:_watch(sock, function() self:_logger_read() end))
  return sock
end

-- What the logger says: a service's log_error, or the answer to `tail`.
function supervisor:_logger_read()
  local conn = self.logger_conn
  for _ = 1, 16 do
    if not conn then return end
    local data, err, errno = conn:read()
    if data == "" or (not data and errno ~= EAGAIN) then return self:_logger_lost(err or "it exited") end
    if not data then return end
    self.logger_buf = self.logger_buf .. data
    while true do
      local nl = self.logger_buf:find("\n", 1, true)
      if not nl then break end
      local cpu0 = os.clock()
      local ok, msg = pcall(json.decode, self.logger_buf:sub(1, nl - 1))
      self.logger_buf = self.logger_buf:sub(nl + 1)
      if ok and type(msg) == "table" and msg.op == "error" then
        local svc = self.services[msg.name]
        if svc then svc.log_error = msg.error or nil end
      elseif ok and type(msg) == "table" and msg.op == "fault" then
        self.logger_fault = tostring(msg.error)
        local unsent = math.tointeger(msg.unsent)
        io.stderr:write("takana supervisor: the logger reports: ", self.logger_fault,
          unsent and (" (and %d before it, not sent: too many a minute)"):format(unsent) or "", "\n")
      elseif ok and type(msg) == "table" and msg.lines then
        -- The logger answers in order: the oldest waiter's.
        local waiter = table.remove(self.logger_waiters, 1)
        if waiter and not waiter.abandoned then
          waiter.done(type(msg.lines) == "table" and msg.lines or {})
        end
        if waiter and waiter.conn then self:_cpu_charge(waiter.conn, os.clock() - cpu0) end
      end
    end
  end
end

-- The connection to the logger has gone (a send failed, or the logger
-- dropped us): pipes are read in-process until the next start of a
-- service, a second on, finds the logger again (or starts one).
function supervisor:_logger_lost(err)
  local waiters = self.logger_waiters
  self.logger_waiters = {}
  for _, waiter in ipairs(waiters) do
    if not waiter.abandoned then waiter.done(nil) end
  end
  self:_unwatch(self.logger_conn)
  self.logger_conn:close()
  self.logger_conn = nil
  self.logger_error = "logger lost (" .. tostring(err) .. "): services' output is read in-process"
  self.logger_retry = now() + 1
  io.stderr:write("takana supervisor: ", self.logger_error, "\n")
end

-- Hands svc's new output pipes to the logger when its lines go to a log
-- directory: each one given is closed here (svc.out/err nil); one that
-- could not be given stays for `_drain`.
function supervisor:_logger_give(svc)
  local sink = svc.log
  if sink == nil then sink = self.log end
  svc.logger = nil
  if type(sink) ~= "string" then return end
  local conn = self:_logger()
  if not conn then return end
  for _, which in ipairs { "out", "err" } do
    local msg = json.encode { op = "pipe", name = svc.name, stream = which, dir = sink, size = self.log_size,
      files = self.log_files, lines = self.log_lines } .. "\n"
    local ok, err = send_all(conn, msg, svc[which])
    if not ok then return self:_logger_lost(err) end
    svc[which]:close()
    svc[which] = nil
    svc.logger = true
  end
end

-- The last n lines of svc's output kept in memory: the supervisor's ring,
-- or the logger's (asked over its socket). With `done`, the control
-- socket's way: the loop does not wait for the logger (a flooded one
-- could hold it); the request goes out, `done(lines)` runs when the answer
-- comes (nil: the logger is gone), and the waiter is returned (its
-- `abandoned` set true drops the answer). Without the logger, done runs
-- at once and nil is returned.
function supervisor:_tail(svc, n, done)
  if svc.logger and self.logger_conn then
    local ok, err = send_all(self.logger_conn, json.encode { op = "tail", name = svc.name, n = n } .. "\n")
    if not ok then
      self:_logger_lost(err)
    else
      local waiter = { done = done }
      self.logger_waiters[#self.logger_waiters + 1] = waiter
      if done then return waiter end
      -- A library caller's own sup:logs waits here (never the control
      -- socket's): 2 s at most, then its answer is dropped when it comes.
      local got
      waiter.done = function(lines) got = lines or false end
      local deadline = now() + 2
      while got == nil and self.logger_conn and now() < deadline do
        self:_logger_read()
        if got == nil and self.logger_conn then core.poll_fds({ self.logger_conn:fileno() }, 0.05) end
      end
      if got then return got end
      waiter.abandoned = true
    end
  end
  local ring = svc.lines
  local lines = table.move(ring, math.max(1, #ring - n + 1), #ring, 1, {})
  if done then done(lines) end
  return not done and lines or nil
end

--- The last lines of a service's output (what `takana ctl SOCKET logs`
-- shows): each "STAMP stdout|stderr LINE".
-- @string name the service
-- @int[opt=50] n how many, at most `log_lines`
-- @treturn[1] {string,...}
-- @treturn[2] nil, message, ENOENT
function supervisor:logs(name, n)
  local svc, err, errno = self:_lookup("logs", name)
  if not svc then return nil, err, errno end
  return setmetatable(self:_tail(svc, math.tointeger(n) or 50), json.array)
end

-- At a close: a completed shutdown tells the logger to exit and waits
-- (10 s at most) for its cgroup to empty, then removes it; otherwise the
-- logger stays, for its pipes and a next supervisor.
function supervisor:_logger_close(shut_down)
  if shut_down and not self.logger_conn and self:_logger_cgroup(false) then
    self.logger_conn = self:_logger_find()
  end
  local conn, cg, child = self.logger_conn, self.logger_cg, self.logger_child
  self.logger_conn, self.logger_cg, self.logger_child = nil, nil, nil
  if conn then
    if shut_down then send_all(conn, '{"op":"exit"}\n') end
    self:_unwatch(conn)
    conn:close()
  end
  if shut_down and cg then
    local deadline = now() + GRACE
    while populated(cg) and now() < deadline do
      if child then child:wait(0.01) else core.poll_fds({}, 0.01) end
    end
    if child then child:wait(0) end
    if not populated(cg) then cg:remove() end
  end
  if child then child:close() end
  if cg then cg:close() end
end
