--- takana.supervisor, the control socket: the server side `takana ctl`
-- talks to; the client functions (request, format_status, metrics) are
-- takana.ctl's.
-- @module takana.supervisor
local C = require "takana.supervisor.class"
local M, supervisor, now = C.M, C.supervisor, C.now
local signum = C.signum
local E = C.E
local EAGAIN, EBADMSG, ENOENT = E.EAGAIN, E.EBADMSG, E.ENOENT

-- Connections: a user the control option admits could otherwise hold
-- descriptors until the supervisor has none left to restart services.
-- Each uid has CONN_PER_UID; together, the uids other than root and the
-- supervisor's own have CONN_OTHERS, so those two always get in. A
-- connection that neither sends a request nor takes its answers for
-- CONN_IDLE seconds is closed.
local CONN_PER_UID, CONN_OTHERS, CONN_IDLE = 16, 64, 60
-- Out of descriptors (EMFILE), accept fails and the listener stays ready:
-- it is left unwatched this long instead of spinning the loop.
local ACCEPT_PAUSE = 0.5

-- A control request refused: the message, and the errno's stable name
-- ("ENOENT") for a client to compare (M.metrics returns its number).
local function refusal(message, errno)
  return { ok = false, error = message, errno = E[errno] }
end

-- ---- control ----

-- What the peer may do: "all" (this supervisor's user, root, or one the
-- control option's `allow` names), "read" (`read`: status and logs), or nil.
-- A group admits a peer whose primary or supplementary group it is, as
-- they were when it connected.
function supervisor:_role(c, uid, gid)
  if uid == self.uid or uid == 0 then return "all" end
  local roles = self.control_roles
  if not roles then return nil end
  local groups
  for _, role in ipairs { "allow", "read" } do
    local set = roles[role]
    if set then
      if set.uids[uid] or set.gids[gid] then return role == "allow" and "all" or "read" end
      if next(set.gids) then
        groups = groups or c:peer_groups() or {}
        for _, g in ipairs(groups) do
          if set.gids[g] then return role == "allow" and "all" or "read" end
        end
      end
    end
  end
end

-- Why a peer with a role may not have another connection, or nil.
function supervisor:_conn_limit(uid)
  local mine, others = 0, 0
  for _, conn in pairs(self.conns) do
    if conn.uid == uid then mine = mine + 1 end
    if conn.uid ~= 0 and conn.uid ~= self.uid then others = others + 1 end
  end
  if mine >= CONN_PER_UID then
    return ("too many connections: uid %d has %d open"):format(uid, mine)
  end
  if uid ~= 0 and uid ~= self.uid and others >= CONN_OTHERS then
    return ("too many connections: %d open from other users"):format(others)
  end
end

local function refuse(c, message, errno)
  c:write(M.json_encode(refusal(message, errno)) .. "\n")
  c:close()
end

function supervisor:_accept()
  -- A burst of peers waits for the next wake-up past this many.
  for _ = 1, CONN_PER_UID do
    local c, pid, uid, gid = self.control:accept()
    if not c then
      local errno = uid -- (nil, message, errno)
      if errno == E.EMFILE or errno == E.ENFILE or errno == E.ENOBUFS or errno == E.ENOMEM then
        self:_unwatch(self.control)
        self.accept_paused = now() + ACCEPT_PAUSE
        self.control_refused = self.control_refused + 1
      end
      if errno ~= E.ECONNABORTED then return end
    else
      -- Without delegation the socket is 0600; the peer's credentials are
      -- checked as well, so a socket file moved or chmod'ed by mistake
      -- still admits nobody else.
      local role = self:_role(c, uid, gid)
      local full = role and self:_conn_limit(uid)
      if not role or full then
        self.control_refused = self.control_refused + 1
        if full then refuse(c, full, E.EUSERS) else refuse(c, "permission denied: uid " .. uid, E.EACCES) end
      else
        local conn = { sock = c, inbuf = "", outbuf = "", pid = pid, uid = uid, role = role, last = now() }
        self.conns[c:fileno()] = conn
        if not self:_watch(c, function() self:_conn_read(conn) end) then
          self.conns[c:fileno()] = nil
          c:close()
        end
      end
    end
  end
end

-- Control's deadlines, from _tick: the listener back after a pause, and
-- idle connections closed. The earliest next one, for timeout().
function supervisor:_conns_tick(t)
  local at = self.accept_paused
  if at and t >= at then
    self.accept_paused, at = nil, nil
    assert(self:_watch(self.control, function() self:_accept() end))
  end
  for _, conn in pairs(self.conns) do
    local idle = conn.last + CONN_IDLE
    if t >= idle then
      self:_conn_close(conn)
    elseif not at or idle < at then
      at = idle
    end
  end
  self.conns_deadline = at
end

function supervisor:_conn_close(conn)
  self:_unwatch(conn.sock)
  self.conns[conn.sock:fileno()] = nil
  conn.sock:close()
end

function supervisor:_conn_read(conn)
  local data, _, errno = conn.sock:read(65536)
  if data == nil and errno == EAGAIN then return end
  conn.last = now()
  if not data or data == "" then
    conn.eof = true
    if conn.outbuf == "" then return self:_conn_close(conn) end
    return
  end
  conn.inbuf = conn.inbuf .. data
  if #conn.inbuf > 65536 then
    conn.outbuf = conn.outbuf .. M.json_encode(refusal("request longer than 64 KiB", E.EMSGSIZE)) .. "\n"
    conn.inbuf = ""
  end
  while true do
    -- A peer that sends requests and never reads the answers would grow
    -- the reply buffer without bound: past 1 MiB unread it is dropped.
    if #conn.outbuf > 1048576 then conn.outbuf, conn.eof = "", true break end
    local line, rest = conn.inbuf:match("^([^\n]*)\n(.*)$")
    if not line then break end
    conn.inbuf = rest
    conn.outbuf = conn.outbuf .. M.json_encode(self:_command(line, conn)) .. "\n"
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
    conn.last = now()
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

local commands = { status = true, start = true, stop = true, restart = true, signal = true, logs = true,
  reload = true }
local read_only = { status = true, logs = true }

function supervisor:_command(line, conn)
  local req, err = M.json_decode(line)
  if type(req) ~= "table" then return refusal("bad request: " .. tostring(err or "an object expected"), EBADMSG) end
  local cmd = req.cmd
  if not commands[cmd] then
    return refusal("unknown command '" .. tostring(cmd) .. "' (status, start, stop, restart, signal, logs, reload)",
      E.EINVAL)
  end
  if conn and conn.role == "read" and not read_only[cmd] then
    return refusal(("permission denied: uid %d may read (status, logs), not %s"):format(conn.uid, cmd), E.EACCES)
  end
  if cmd == "reload" then
    local ok, summary, errno = self:reload()
    if not ok then return refusal(summary, errno) end
    return { ok = true, reload = summary }
  end
  local name = req.name
  if cmd == "status" and name == nil then return { ok = true, services = self:status(), pid = self.pid } end
  if type(name) ~= "string" then return refusal("bad request: 'name' must be a string", E.EINVAL) end
  local svc = self.services[name]
  if not svc then return refusal("no service '" .. name .. "'", ENOENT) end
  if cmd == "status" then return { ok = true, services = { self:status_of(svc) } } end
  if cmd == "logs" then
    local n = math.tointeger(req.lines) or 50
    return { ok = true, lines = setmetatable(self:_tail(svc, n), M.array) }
  end
  if cmd == "signal" then
    local ok, sig = pcall(signum, "signal", 2, req.signal or "TERM")
    if not ok then return refusal("bad signal '" .. tostring(req.signal) .. "'", E.EINVAL) end
    local r, e, errno = self:signal(name, sig)
    return r and { ok = true } or refusal(e, errno)
  end
  local r, e, errno = self[cmd](self, name)
  return r and { ok = true } or refusal(e, errno)
end

-- ---- client ----

-- The client lives in takana.ctl, which `takana ctl` loads alone.
local client = require "takana.ctl"

--- Sends one request to a supervisor's control socket and waits for the
-- answer; `takana.ctl.request`.
-- @function request
M.request = client.request

--- Formats `status` answers as `takana ctl status` prints them;
-- `takana.ctl.format_status`.
-- @function format_status
M.format_status = client.format_status

--- Adds a supervisor's services to a Prometheus exposition;
-- `takana.ctl.metrics`.
-- @function metrics
M.metrics = client.metrics

--- `signum(fname, n, sig)`: the number of signal `sig` (a number, or a
-- name with or without "SIG"); raises as argument `n` of `fname` otherwise.
-- @function signum
M.signum = signum
