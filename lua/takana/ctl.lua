--- The control protocol's client and the `takana ctl` command: what a
-- short-lived `takana ctl status` loads, and nothing else (not the
-- supervisor, not the CLI's other commands), so that it answers in about
-- the time `lua5.4` itself takes to start. `takana.supervisor` re-exports
-- `request`, `format_status` and `metrics`.
-- @module takana.ctl
local core = require "takana.core"
local json = require "takana.json"
local util = require "takana.util"

local M = {}
local E = core.errno
local EAGAIN, ETIMEDOUT, EBADMSG = E.EAGAIN, E.ETIMEDOUT, E.EBADMSG
local argerror, printable = util.argerror, util.printable
local now = core.now

-- What a service sent (STATUS=) or caused (reasons) reaches an admin's
-- terminal: every string in v, nested ones too, with control bytes shown
-- escaped (util.printable), never interpreted.
local function printable_all(v)
  if type(v) == "string" then return printable(v) end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = printable_all(x) end
  return out
end

local usage_error = util.usage_error

local function fail(msg)
  io.stderr:write("takana: ", msg, "\n")
  os.exit(1)
end

-- ---- client ----

local ANSWER_MAX = 4 * 1048576

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
  local deadline = now() + (timeout or 5)
  -- The timeout bounds the connect too: a wedged supervisor's full accept
  -- queue would keep it waiting.
  local c, err, errno = core.unix_connect(path, timeout or 5)
  if not c then return nil, err, errno end
  local out = json.encode(req) .. "\n"
  while out ~= "" do
    local n, werr, werrno = c:write(out)
    -- A supervisor that refuses this peer answers at once and closes: its
    -- answer is still there to read.
    if not n and werrno == E.EPIPE then break end
    if not n and werrno ~= EAGAIN then c:close() return nil, werr, werrno end
    if n then out = out:sub(n + 1) else core.poll_fds({ c:fileno() }, 0.01, { "w" }) end
    if now() > deadline then c:close() return nil, "request: timed out", ETIMEDOUT end
  end
  local buf = ""
  while not buf:find("\n", 1, true) do
    local left = deadline - now()
    if left <= 0 then c:close() return nil, "request: no answer within the timeout", ETIMEDOUT end
    core.poll_fds({ c:fileno() }, left)
    local data, rerr, rerrno = c:read(1048576)
    if data == "" then break end
    if data then buf = buf .. data
    elseif rerrno ~= EAGAIN then c:close() return nil, rerr, rerrno end
    -- A supervisor answers in at most about 1 MiB: whoever serves more at
    -- this path is no supervisor, and is not read for ever.
    if #buf > ANSWER_MAX then c:close() return nil, "request: an answer longer than 4 MiB", EBADMSG end
  end
  c:close()
  local line = buf:match("^([^\n]*)")
  local v, derr = json.decode(line or "")
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

M.help = [[
usage: takana ctl [--json] [--timeout S] SOCKET status|start|stop|restart|signal|logs|reload [NAME] [SIG|N]
       takana ctl [--timeout S] SOCKET --wait up|ready|down NAME
  Talks to a running supervisor through its control socket:
    status [NAME]        state, pid, uptime, restarts, last exit, readiness
    start|stop|restart NAME
    signal NAME SIG      SIG to every process of the service's cgroup
    logs NAME [N]        the last N (default 50) captured lines
    reload               re-read the supervisor's file (or call its reload
                         hook) and apply what changed; exits 1 with the
                         reason when it fails to load or check (nothing
                         changed then)
  --json prints the supervisor's answer as it came.
  --wait STATE NAME asks for NAME's status until it is up (starting or
  running: its process is there), ready (running and ready) or down (no
  process: stopped, failed, backoff or waiting), as s6-svc -wU and sv -w
  do; it exits 1 with the last state once --timeout S (default 5) passes,
  or at once when waiting for up or ready and the service has failed.
]]

-- Whether a status answer s is in the --wait state.
local wait_states = {
  up = function(s) return s.state == "starting" or s.state == "running" end,
  ready = function(s) return s.state == "running" and s.ready == true end,
  down = function(s) return s.state == "stopped" or s.state == "failed" or s.state == "backoff" or s.state == "waiting" end,
}

local function ctl_wait(sock, state, name, timeout)
  local reached = wait_states[state]
  if not reached then usage_error("ctl: --wait up, ready or down expected, got '" .. printable(state) .. "'") end
  if not name then usage_error("ctl: --wait " .. state .. " needs a service NAME") end
  local deadline = now() + timeout
  while true do
    local r, err = M.request(sock, { cmd = "status", name = name }, math.max(deadline - now(), 0.1))
    if not r then fail("ctl: " .. sock .. ": " .. err) end
    if not r.ok then fail("ctl: " .. printable(tostring(r.error))) end
    local s = type(r.services) == "table" and r.services[1]
    if type(s) ~= "table" then fail("ctl: " .. sock .. ": a malformed status answer") end
    if reached(s) then return 0 end
    local last = tostring(s.state) .. (s.reason and (": " .. tostring(s.reason)) or "")
    if state ~= "down" and s.state == "failed" then
      io.stderr:write("takana ctl: ", printable(name), " failed, so it will not be ", state, ": ", printable(last), "\n")
      return 1
    end
    if now() >= deadline then
      io.stderr:write(("takana ctl: %s not %s after %g s (%s)\n"):format(printable(name), state, timeout, printable(last)))
      return 1
    end
    core.poll_fds({}, math.min(0.05, math.max(deadline - now(), 0)))
  end
end

--- A reload's summary (sup:reload's) in one line: "reloaded: 1 added (c),
-- 1 restarted (a: cmd), 2 unchanged".
-- @tparam table summary
-- @treturn string
function M.reload_words(summary)
  if type(summary) ~= "table" then return "reloaded (by the supervisor's reload hook)" end
  local parts = {}
  local changes, notes = type(summary.changes) == "table" and summary.changes or {},
    type(summary.notes) == "table" and summary.notes or {}
  for _, what in ipairs { "added", "removed", "restarted", "updated" } do
    local names = type(summary[what]) == "table" and summary[what] or {}
    if #names > 0 then
      local each = {}
      for _, n in ipairs(names) do
        local c = type(changes[n]) == "table" and #changes[n] > 0 and (": " .. table.concat(changes[n], ", ")) or ""
        local note = notes[n] and ("; " .. tostring(notes[n])) or ""
        each[#each + 1] = tostring(n) .. c .. note
      end
      parts[#parts + 1] = ("%d %s (%s)"):format(#names, what, table.concat(each, ", "))
    end
  end
  local same = type(summary.unchanged) == "table" and #summary.unchanged or 0
  parts[#parts + 1] = same .. " unchanged"
  return "reloaded: " .. table.concat(parts, ", ")
end

--- The `takana ctl` command: args is its argv after "ctl"; returns the
-- exit code (0 done, 1 refused or failed, 2 bad usage, after exiting).
-- @tparam {string,...} args
-- @treturn integer
function M.main(args)
  local opts, operands = util.parse_args(args, { help = "bool", json = "bool", timeout = "value", wait = "value" }, "ctl")
  if opts.help then io.write(M.help) return 0 end
  if opts.wait then
    if #operands > 2 then usage_error("ctl: --wait STATE takes SOCKET and one NAME (see --help)") end
    local timeout = tonumber(opts.timeout or "5")
    if not timeout or timeout <= 0 or timeout > 3600 then usage_error("ctl: --timeout needs 0 < seconds <= 3600") end
    if not operands[1] then usage_error("ctl: SOCKET expected (see --help)") end
    if #operands[1] > 107 then usage_error("ctl: SOCKET: longer than the 107 bytes a unix socket address holds") end
    return ctl_wait(operands[1], opts.wait, operands[2], timeout)
  end
  local sock, cmd, name, extra = operands[1], operands[2], operands[3], operands[4]
  if not sock or not cmd then usage_error("ctl: SOCKET and a command expected (see --help)") end
  if #sock > 107 then usage_error("ctl: SOCKET: longer than the 107 bytes a unix socket address holds") end
  if not ({ status = 1, start = 1, stop = 1, restart = 1, signal = 1, logs = 1, reload = 1 })[cmd] then
    usage_error("ctl: unknown command '" .. printable(cmd) .. "' (status, start, stop, restart, signal, logs, reload)")
  end
  if cmd == "reload" and name then usage_error("ctl: reload takes no NAME") end
  if cmd ~= "status" and cmd ~= "reload" and not name then usage_error("ctl: " .. cmd .. " needs a service NAME") end
  local timeout = tonumber(opts.timeout or "5")
  if not timeout or timeout <= 0 or timeout > 3600 then usage_error("ctl: --timeout needs 0 < seconds <= 3600") end
  local req = { cmd = cmd, name = name }
  if cmd == "signal" then req.signal = extra or "TERM" end
  if cmd == "logs" then req.lines = tonumber(extra or "50") end
  local r, err = M.request(sock, req, timeout)
  if not r then fail("ctl: " .. sock .. ": " .. err) end
  if opts.json then
    io.write(json.encode(r), "\n")
  elseif not r.ok then
    io.stderr:write("takana ctl: ", printable(tostring(r.error)), "\n")
  elseif cmd == "status" then
    -- (an answer of the wrong shape is the server's fault, said as such)
    local ok, text = pcall(M.format_status, r.services)
    if not ok then fail("ctl: " .. sock .. ": a malformed status answer: " .. printable(tostring(text))) end
    io.write(text)
  elseif cmd == "logs" then
    local lines = r.lines
    if type(lines) ~= "table" then fail("ctl: " .. sock .. ": a malformed logs answer: no list of lines") end
    for _, l in ipairs(lines) do io.write(printable(tostring(l)), "\n") end
    if r.truncated then io.stderr:write("takana ctl: older lines left out (the answer is at most 1 MiB)\n") end
  elseif cmd == "reload" then
    io.write(printable(M.reload_words(r.reload)), "\n")
  end
  return r.ok and 0 or 1
end

return M
