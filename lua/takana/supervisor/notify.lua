--- takana.supervisor, readiness: sd_notify messages (READY, STATUS,
-- MAINPID, WATCHDOG), the s6 readiness fd and the main process.
-- @module takana.supervisor
local takana = require "takana"
local C = require "takana.supervisor.class"
local supervisor, now, E, populated, close_obj = C.supervisor, C.now, C.E, C.populated, C.close_obj
local main_status = C.main_status
-- `STATUS=` kept, in bytes: a line for `ctl status`, not a store (a
-- status of 4 KiB of control bytes cost 3 ms each time it was encoded).
local STATUS_MAX = 256

-- ---- readiness ----

-- Whether process pid is in the service's cgroup or below it; false when
-- that cannot be told (no credentials, gone).
local function in_service(svc, pid)
  pid = math.tointeger(pid)
  if not (svc.cg and pid and pid > 0 and pid <= 0x7fffffff) then return false end
  return svc.cg:holds(pid) == true
end

function supervisor:_set_ready(svc)
  if svc.state == "starting" then
    svc.state = "running"
    svc.ready = true
    svc.ready_at = now()
    svc.ready_deadline = nil
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
      -- EMSGSIZE: a datagram longer than the buffer, dropped whole (what
      -- was left of it could mean something else); the next one is read.
      if uid ~= E.EMSGSIZE then return end
      svc.notify_rejected = (svc.notify_rejected or 0) + 1
      goto next_message
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
      -- MAINPID is acted on once a message, its last value (as systemd
      -- reads a message into one set of fields): each costs a pidfd, a
      -- cgroup check and the poller's changes, and a message of hundreds
      -- of them held the loop for a second.
      local mainpid
      for line in data:gmatch("[^\n]+") do
        -- (a line that is no KEY=value is ignored, as systemd ignores it)
        local k, v = line:match("^([%u%d_]+)=(.*)$")
        if not k then -- luacheck: ignore 542
        elseif k == "READY" and v == "1" then self:_set_ready(svc)
        elseif k == "STATUS" then svc.status_text = v:sub(1, STATUS_MAX)
        elseif k == "MAINPID" then mainpid = v
        elseif k:match("^WATCHDOG") then self:_watchdog_message(svc, k, v)
        elseif k == "STOPPING" and v == "1" then svc.stopping_notified = true
        end
      end
      if mainpid then self:_main_pid(svc, math.tointeger(tonumber(mainpid))) end
    end
    ::next_message::
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
    -- Bounded as the option is: at most a day, the loop's longest wait.
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

-- Not ready within the readiness timeout: the stop sequence, and the run
-- counts as a failed start.
function supervisor:_ready_timeout(svc)
  svc.ready_deadline = nil
  svc.ready_timed_out = true
  svc.reason = ("not ready after %g s"):format(svc.ready_timeout)
  svc.after_failure = true
  self:_begin_stop(svc)
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
  -- The handler checks that this pidfd is still the service's main one: a
  -- later MAINPID= in the same batch may have replaced it.
  assert(self:_watch(fd, function()
    if svc.mainfd == fd and not fd:alive() then self:_main_exit(svc) end
  end))
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
