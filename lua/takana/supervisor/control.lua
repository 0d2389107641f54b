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
-- After a wake-up that refused a uid past its CPU share, the listener
-- rests this long: CONN_PER_UID refusals a rest bound what connecting in
-- a loop costs, and root's connection, behind at most a backlog of such
-- peers, waits a few rests, not theirs times its place.
local ACCEPT_REST = 0.05
-- Requests answered a wake-up, per connection: the rest wait for the next
-- step (self.pending_in), so one peer's pipeline never holds the loop.
local REQUESTS_A_WAKE = 64
-- A peer that sends requests and never reads the answers: past this many
-- bytes unread, it is dropped.
local OUT_MAX = 1048576
-- Bytes of answers built and of requests read a step, all connections
-- together (one answer may pass it; the next request waits for the next
-- step, served first then): sixteen peers asking for 1 MiB of logs each
-- held a step for a second, 64 KiB requests of escapes took 30 ms each
-- to decode, a status of 4 KiB of control bytes 3 ms to encode.
local ANSWERS_A_STEP, REQUESTS_A_STEP = 262144, 65536
-- A request is a short JSON object; a longer line is refused unread.
local REQUEST_MAX = 4096
-- _command's answer for a request put off to the next step.
local LATER = {}
-- _command's answer for a request answered later (logs from the logger).
local PENDING = {}
-- How long a logs request waits for the logger.
local LOGGER_WAIT = 2
-- The CPU that peers other than root and the supervisor's own user may
-- make it spend, in CPU seconds a second: UID_CPU_SHARE each uid,
-- OTHERS_CPU_SHARE all of them together, after a burst of CPU_BURST. What
-- is charged: accepting (or refusing) their connections, reading and
-- answering them, their logs answers from the logger, and the rest of each
-- step their input woke. A connection past its uid's share is neither
-- read nor answered until the share is back, and a new one from a uid
-- past a share is closed at once, with one line (see ACCEPT_REST). Why:
-- a read-only user pipelining status requests held the supervisor at 70%
-- of a CPU, and one connecting in a loop, or writing a byte at a time, at
-- 90%.
local UID_CPU_SHARE, OTHERS_CPU_SHARE, CPU_BURST = 0.05, 0.2, 0.25

-- A peer's string in a refusal: its first 64 bytes (an echo of 64 KiB of
-- control bytes was a 390 KiB answer).
local function quoted(v)
  v = tostring(v)
  return #v > 64 and v:sub(1, 64) .. "..." or v
end

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

-- What a uid past its CPU share is told at connect, made once.
local OVER_SHARE

local function refuse(c, message, errno)
  c:write(M.json_encode(refusal(message, errno)) .. "\n")
  c:close()
end

function supervisor:_accept()
  local over = false
  -- A burst of peers waits for the next wake-up past this many.
  for _ = 1, CONN_PER_UID do
    local cpu0 = os.clock()
    local c, pid, uid, gid = self.control:accept()
    if not c then
      local errno = uid -- (nil, message, errno)
      if errno == E.EMFILE or errno == E.ENFILE or errno == E.ENOBUFS or errno == E.ENOMEM then
        self:_unwatch(self.control)
        self.accept_paused = now() + ACCEPT_PAUSE
        self.control_refused = self.control_refused + 1
        return
      end
      if errno ~= E.ECONNABORTED then break end
    elseif uid ~= 0 and uid ~= self.uid and not self:_cpu_credit(uid) then
      -- Before anything else is spent on it.
      OVER_SHARE = OVER_SHARE or M.json_encode(refusal("over its share of the supervisor's CPU: try later",
        E.EAGAIN)) .. "\n"
      c:write(OVER_SHARE)
      c:close()
      self.control_refused, over = self.control_refused + 1, true
      self:_cpu_charge({ uid = uid, metered = true }, os.clock() - cpu0)
    else
      -- Without delegation the socket is 0600; the peer's credentials are
      -- checked as well, so a socket file moved or chmod'ed by mistake
      -- still admits nobody else.
      local role = self:_role(c, uid, gid)
      local full = role and self:_conn_limit(uid)
      local conn = { sock = c, inbuf = "", outbuf = "", pid = pid, uid = uid, role = role, last = now(),
        metered = uid ~= 0 and uid ~= self.uid }
      if not role or full then
        self.control_refused = self.control_refused + 1
        if full then refuse(c, full, E.EUSERS) else refuse(c, "permission denied: uid " .. uid, E.EACCES) end
      else
        self.conns[c:fileno()] = conn
        if not self:_watch(c, function() self:_conn_run(conn, self._conn_read) end) then
          self.conns[c:fileno()] = nil
          c:close()
        end
      end
      self:_cpu_charge(conn, os.clock() - cpu0)
    end
  end
  if over then
    -- Refusing costs too: a uid past its share gets a burst a rest.
    self:_unwatch(self.control)
    self.accept_paused = now() + ACCEPT_REST
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
    if conn.cpu_until and t >= conn.cpu_until then
      -- (its share back: held by us, it was not idle; this step is its)
      conn.cpu_until, conn.last = nil, t
      if self.step_served then self.step_served[conn] = true end
      self:_conn_hold(conn)
      if conn.inbuf:find("\n", 1, true) then self.pending_in = true end
    end
    local idle = conn.cpu_until or conn.waiting and math.huge or conn.last + CONN_IDLE
    if conn.waiting and t >= conn.waiting_since + LOGGER_WAIT then
      conn.waiting.abandoned, conn.waiting = true, nil
      self:_conn_answer(conn, refusal(("logs: the logger did not answer within %d s"):format(LOGGER_WAIT), E.ETIMEDOUT))
    elseif conn.waiting then
      idle = math.min(idle, conn.waiting_since + LOGGER_WAIT)
    end
    if t >= idle then
      self:_conn_close(conn)
    elseif not at or idle < at then
      at = idle
    end
  end
  self.conns_deadline = at
end

function supervisor:_conn_close(conn)
  if conn.waiting then conn.waiting.abandoned, conn.waiting = true, nil end
  self:_unwatch(conn.sock)
  self.conns[conn.sock:fileno()] = nil
  conn.sock:close()
  conn.closed = true
end

-- A connection is not read while a request of its waits for the logger,
-- while it holds more unanswered than a full read (its input stays in the
-- socket, the peer's writes block, not in our memory), while its uid is
-- past its CPU share, or once its peer has shut its side; it is not polled
-- either, or its readable socket would spin the loop.
function supervisor:_conn_hold(conn)
  local hold = conn.waiting ~= nil or conn.eof == true or #conn.inbuf > 65536 or conn.cpu_until ~= nil
  if hold and not conn.held then
    self:_unwatch(conn.sock)
  elseif conn.held and not hold then
    assert(self:_watch(conn.sock, function() self:_conn_run(conn, self._conn_read) end))
  end
  conn.held = hold
end


function supervisor:_conn_read(conn)
  local data, _, errno = conn.sock:read(65536)
  if data == nil and errno == EAGAIN then return end
  if not data or data == "" then
    -- (not a sign of life: a half-closed peer's socket is readable for
    -- ever, so it is held from now on and only written to)
    conn.eof = true
    if conn.outbuf == "" and not conn.waiting and not conn.inbuf:find("\n", 1, true) then
      return self:_conn_close(conn)
    end
  else
    conn.last = now()
    if conn.skipping then
      -- The rest of a refused line is not a request: up to its newline.
      local nl = data:find("\n", 1, true)
      if nl then conn.skipping = nil end
      data = nl and data:sub(nl + 1) or ""
    end
    conn.inbuf = conn.inbuf .. data
    if #conn.inbuf > 65536 and not conn.inbuf:find("\n", 1, true) then
      conn.outbuf = conn.outbuf .. M.json_encode(refusal("request longer than 64 KiB", E.EMSGSIZE)) .. "\n"
      conn.inbuf, conn.skipping = "", true
    end
  end
  self:_conn_serve(conn)
end

-- A metered uid's CPU accounts, refilled to time t: its own and that of
-- all metered uids together.
function supervisor:_cpu_accounts(uid, t)
  local accounts = self.cpu_accounts
  if not accounts then
    accounts = {}
    self.cpu_accounts = accounts
  end
  local mine, all = accounts[uid], accounts.others
  if not mine then
    mine = { credit = CPU_BURST, at = t }
    accounts[uid] = mine
  end
  if not all then
    all = { credit = CPU_BURST, at = t }
    accounts.others = all
  end
  mine.credit, mine.at = math.min(CPU_BURST, mine.credit + (t - mine.at) * UID_CPU_SHARE), t
  all.credit, all.at = math.min(CPU_BURST, all.credit + (t - all.at) * OTHERS_CPU_SHARE), t
  return mine, all
end

-- Charges spent seconds of CPU to a metered conn's uid, and notes the
-- conn as one this step worked for (step() charges the step's rest).
function supervisor:_cpu_charge(conn, spent)
  if not conn.metered then return end
  local mine, all = self:_cpu_accounts(conn.uid, now())
  mine.credit, all.credit = mine.credit - spent, all.credit - spent
  if self.step_served then
    self.step_served[conn] = true
    self.step_charged = self.step_charged + spent
  end
end

-- Runs fn(self, conn), its CPU charged to conn's uid.
function supervisor:_conn_run(conn, fn)
  if not conn.metered then return fn(self, conn) end
  local cpu0 = os.clock()
  fn(self, conn)
  self:_cpu_charge(conn, os.clock() - cpu0)
end

-- The CPU a step spent besides what it charged, shared among the metered
-- connections it worked for: the wakeup their input caused.
function supervisor:_cpu_charge_rest(spent)
  local served, n = self.step_served, 0
  self.step_served = nil
  for _ in pairs(served) do n = n + 1 end
  local rest = spent - self.step_charged
  if n == 0 or rest <= 0 then return end
  for conn in pairs(served) do
    local mine, all = self:_cpu_accounts(conn.uid, now())
    mine.credit, all.credit = mine.credit - rest / n, all.credit - rest / n
  end
end

-- Whether a metered uid has CPU left now (its own share, and all's).
function supervisor:_cpu_credit(uid)
  local mine, all = self:_cpu_accounts(uid, now())
  return mine.credit > 0 and all.credit > 0
end

-- Whether a metered conn may have another request answered now; if not,
-- it is held until its share is back (conn.cpu_until).
function supervisor:_cpu_allows(conn)
  local t = now()
  local mine, all = self:_cpu_accounts(conn.uid, t)
  if mine.credit > 0 and all.credit > 0 then return true end
  self.control_held = self.control_held + 1
  conn.cpu_until = t + math.max(-mine.credit / UID_CPU_SHARE, -all.credit / OTHERS_CPU_SHARE, 0.01)
  return false
end

-- Answers the complete lines waiting, up to REQUESTS_A_WAKE, reading them
-- by position (copying the rest after each made a 64 KiB pipeline cost
-- seconds), then sends what it can. A metered peer's next request waits
-- while its uid is past its share.
function supervisor:_conn_serve(conn)
  local buf, pos, answers = conn.inbuf, 1, {}
  local size, served = #conn.outbuf, 0
  for _ = 1, REQUESTS_A_WAKE do
    if conn.waiting or conn.metered and (conn.cpu_until or not self:_cpu_allows(conn)) then break end
    if size > OUT_MAX then
      conn.outbuf, conn.eof, answers, buf, pos = "", true, {}, "", 1
      break
    end
    local nl = buf:find("\n", pos, true)
    if not nl then break end
    local answer
    if self.answer_budget <= 0 or self.request_budget <= 0 then
      answer = LATER
    elseif nl - pos > REQUEST_MAX then
      answer = refusal("request longer than 4 KiB", E.EMSGSIZE)
    else
      self.request_budget = self.request_budget - (nl - pos)
      answer = self:_command(buf:sub(pos, nl - 1), conn, OUT_MAX - size)
    end
    if answer == LATER then
      -- Next step, before anyone else's, in the order they were put off;
      -- but one that was answered something now goes behind those that
      -- were not: a peer with a backlog is never first for ever. (Waiting
      -- on us is no idleness.)
      if not conn.deferred then
        conn.deferred, conn.last = true, now()
        local queue = served > 0 and self.deferred_behind or self.deferred
        queue[#queue + 1] = conn
      end
      break
    end
    pos, served = nl + 1, served + 1
    if answer ~= PENDING then
      answer = M.json_encode(answer) .. "\n"
      answers[#answers + 1] = answer
      size = size + #answer
      self.answer_budget = self.answer_budget - #answer
    end
  end
  -- (a serve that took nothing copies nothing)
  if pos > 1 or buf ~= conn.inbuf then conn.inbuf = buf:sub(pos) end
  if not conn.waiting and not conn.cpu_until and (conn.deferred or conn.inbuf:find("\n", 1, true)) then
    self.pending_in = true
  end
  conn.outbuf = conn.outbuf .. table.concat(answers)
  self:_flush(conn)
  if not conn.closed then self:_conn_hold(conn) end
end

function supervisor:_flush(conn)
  while conn.outbuf ~= "" do
    local n, _, errno = conn.sock:write(conn.outbuf)
    if not n then
      -- A peer gone (EPIPE): what it left unread is not answered.
      if errno ~= EAGAIN then return self:_conn_close(conn) end
      self.pending_out = true
      return
    end
    conn.outbuf = conn.outbuf:sub(n + 1)
    conn.last = now()
  end
  if conn.eof and not conn.waiting and not conn.inbuf:find("\n", 1, true) then self:_conn_close(conn) end
end

-- At each step's start (step), the budgets are whole again, and the
-- connections put off for them are served first: those answered nothing
-- the last time, then the others.
function supervisor:_conns_budget()
  self.answer_budget, self.request_budget = ANSWERS_A_STEP, REQUESTS_A_STEP
  local queue = self.deferred
  table.move(self.deferred_behind, 1, #self.deferred_behind, #queue + 1, queue)
  self.deferred, self.deferred_behind = {}, {}
  for _, conn in ipairs(queue) do
    conn.deferred = nil
    if not conn.closed then self:_conn_run(conn, self._conn_serve) end
  end
end

function supervisor:_flush_conns()
  if not (self.pending_out or self.pending_in) then return end
  local serve = self.pending_in
  self.pending_out, self.pending_in = false, false
  for _, conn in pairs(self.conns) do
    -- (one held for CPU or waiting for the logger is served when that ends)
    if serve and not conn.cpu_until and not conn.waiting and conn.inbuf:find("\n", 1, true) then
      self:_conn_run(conn, self._conn_serve)
    elseif conn.outbuf ~= "" then
      self:_conn_run(conn, self._flush)
    end
  end
end

-- The newest of lines that fit an answer in room bytes (JSON can make a
-- byte six); `truncated` says older ones were left out.
local function logs_answer(lines, room)
  local first, budget, truncated = #lines + 1, (room or OUT_MAX) // 6, nil
  while first > 1 do
    budget = budget - #tostring(lines[first - 1]) - 8
    if budget < 0 then truncated = true break end
    first = first - 1
  end
  return { ok = true, lines = setmetatable(table.move(lines, first, #lines, 1, {}), M.array), truncated = truncated }
end


-- A late answer for conn, if it is still open; its next requests follow.
function supervisor:_conn_answer(conn, answer)
  if conn.closed then return end
  answer = M.json_encode(answer) .. "\n"
  self.answer_budget = self.answer_budget - #answer
  conn.outbuf = conn.outbuf .. answer
  self.pending_in = true
  self:_flush(conn)
  if not conn.closed then self:_conn_hold(conn) end
end

local commands = { status = true, start = true, stop = true, restart = true, signal = true, logs = true,
  reload = true }
local read_only = { status = true, logs = true }

-- `room`: the bytes the connection's answers may still take.
function supervisor:_command(line, conn, room)
  local req, err = M.json_decode(line)
  if type(req) ~= "table" then return refusal("bad request: " .. tostring(err or "an object expected"), EBADMSG) end
  local cmd = req.cmd
  if not commands[cmd] then
    return refusal("unknown command '" .. quoted(cmd) .. "' (status, start, stop, restart, signal, logs, reload)",
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
  if not svc then return refusal("no service '" .. quoted(name) .. "'", ENOENT) end
  if cmd == "status" then return { ok = true, services = { self:status_of(svc) } } end
  if cmd == "logs" then
    -- From the ring at once, or from the logger when its answer comes:
    -- the loop does not wait for it (a flooded logger could hold it), and
    -- this connection's next requests wait, so answers keep their order.
    local n = math.tointeger(req.lines) or 50
    if not conn then return logs_answer(self:_tail(svc, n), room) end
    local now_answer
    local waiter = self:_tail(svc, n, function(lines)
      local answer = logs_answer(lines or table.move(svc.lines, math.max(1, #svc.lines - n + 1), #svc.lines, 1, {}),
        room)
      if conn.waiting then
        conn.waiting = nil
        self:_conn_answer(conn, answer)
      else
        now_answer = answer
      end
    end)
    if now_answer then return now_answer end
    -- (the logger's answer is decoded for conn: its CPU is conn's)
    waiter.conn = conn
    conn.waiting, conn.waiting_since = waiter, now()
    return PENDING
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
