--- takana.supervisor, the control socket: the server side `takana ctl`
-- talks to, and the client functions (request, format_status, metrics).
-- @module takana.supervisor
local takana = require "takana"
local core = require "takana.core"
local C = require "takana.supervisor.class"
local M, supervisor, now, argerror, printable_all = C.M, C.supervisor, C.now, C.argerror, C.printable_all
local signum = C.signum
local E = C.E
local EAGAIN, ETIMEDOUT, EBADMSG, ENOENT = E.EAGAIN, E.ETIMEDOUT, E.EBADMSG, E.ENOENT

-- A control request refused: the message, and the errno's stable name
-- ("ENOENT") for a client to compare (M.metrics returns its number).
local function refusal(message, errno)
  return { ok = false, error = message, errno = E[errno] }
end

-- ---- control ----

function supervisor:_accept()
  while true do
    local c, pid, uid = self.control:accept()
    if not c then return end
    -- The socket is 0600 already; the peer's uid is checked as well, so a
    -- socket file moved or chmod'ed by mistake still admits nobody else.
    if uid ~= self.uid and uid ~= 0 then
      c:write(M.json_encode(refusal("permission denied: uid " .. uid, E.EACCES)) .. "\n")
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
    conn.outbuf = conn.outbuf .. M.json_encode(refusal("request longer than 64 KiB", E.EMSGSIZE)) .. "\n"
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

local commands = { status = true, start = true, stop = true, restart = true, signal = true, logs = true,
  reload = true }

function supervisor:_command(line)
  local req, err = M.json_decode(line)
  if type(req) ~= "table" then return refusal("bad request: " .. tostring(err or "an object expected"), EBADMSG) end
  local cmd = req.cmd
  if not commands[cmd] then
    return refusal("unknown command '" .. tostring(cmd) .. "' (status, start, stop, restart, signal, logs, reload)",
      E.EINVAL)
  end
  if cmd == "reload" then
    local ok, summary, errno = self:reload()
    if not ok then return refusal(summary, errno) end
    return { ok = true, reload = summary }
  end
  local name = req.name
  if cmd == "status" and name == nil then return { ok = true, services = self:status(), pid = self.pid } end
  local svc = type(name) == "string" and self.services[name]
  if not svc then return refusal("no service '" .. tostring(name) .. "'", ENOENT) end
  if cmd == "status" then return { ok = true, services = { self:status_of(svc) } } end
  if cmd == "logs" then
    local n = math.tointeger(req.lines) or 50
    local ring = svc.lines
    return { ok = true, lines = setmetatable(table.move(ring, math.max(1, #ring - n + 1), #ring, 1, {}), M.array) }
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
  if ex.ready_timeout then w = w .. " (not ready in time)" end
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
  if not r.ok then
    -- EPROTO: a refusal without an errno name this host knows.
    local n = type(r.errno) == "string" and E[r.errno]
    return nil, "supervisor " .. sock .. ": " .. tostring(r.error), math.type(n) == "integer" and n or E.EPROTO
  end
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
