-- runaway: a process above a CPU share for too long gets SIGTERM through its pidfd, then SIGKILL.
local USAGE = [[
usage: runaway.lua (--cgroup PATH | --uid N) [options]
  --cgroup PATH   watch the processes of this cgroup and below (a path under the cgroup2 mount)
  --uid N         watch the processes of this user (with --cgroup: of both)
  --share F       the share of one CPU that is too much (default 0.5)
  --grace S       seconds a process may stay above it (default 10)
  --timeout S     seconds from SIGTERM to SIGKILL (default 5)
  --interval S    seconds between checks (default 1)
  --dry-run       log what would be signalled, signal nothing
  --json          log JSON lines
  --help          this text
A process above the share for longer than the grace time gets SIGTERM, then
SIGKILL if it still runs after the timeout. One line per action, with its
reason: term, kill, gone (exited after the TERM), failed. A pid reused
meanwhile is never signalled: the signal goes through a pidfd opened from the
snapshot that measured it.
]]
local takana = require "takana"

local opts, usage_error = takana.options(USAGE)
if not (opts.cgroup or opts.uid) then usage_error("--cgroup or --uid is needed: the whole host is no scope") end
if opts.interval == 0 then usage_error("--interval must be above 0") end
local scope = { cgroup = opts.cgroup, recursive = opts.cgroup and true, uid = opts.uid }

local function log(action, p, why)
  if opts.json then
    print(takana.json.encode { time = takana.realtime(), action = action, pid = p.pid, comm = p.comm,
      dry_run = opts.dry_run, reason = why })
  else
    print(("%s %s%s %d %s: %s"):format(os.date("%H:%M:%S"), opts.dry_run and "would " or "", action, p.pid,
      p.comm, why))
  end
  io.stdout:flush()
end

local function send(proc, sig)
  if not proc then return nil, "the process is gone" end
  if opts.dry_run then return true end
  return proc:signal(sig)
end

local FIELDS = { "pid", "comm", "uid", "utime_ns", "stime_ns", "cgroup_id" }
local old = assert(takana.snapshot { fields = FIELDS })
assert(old:filter(scope))   -- a missing cgroup fails now, not at the first tick
local hot, termed = {}, {}   -- pid -> since when above the share; pid -> {proc, deadline, comm}
local tick = assert(takana.timer(opts.interval, opts.interval))
while true do
  takana.poll({ tick }, nil)
  tick:read()
  local now, new = takana.now(), assert(takana.snapshot { fields = FIELDS })
  local share, still = takana.delta(old, new).share, {}
  for _, pid in ipairs(assert(new:filter(scope))) do
    local s = share[pid]   -- nil for a process that started (or reused the pid) since
    if s and s > opts.share and not termed[pid] then
      still[pid] = hot[pid] or now
      if now - still[pid] >= opts.grace then
        local p, proc = new:get(pid), new:process(pid)
        local why = ("%.0f %% of a CPU for %.1f s (limit %.0f %% for %g s)"):format(s * 100, now - still[pid],
          opts.share * 100, opts.grace)
        local ok, err = send(proc, "TERM")
        log(ok and "term" or "failed", p, ok and why or "TERM: " .. err)
        if ok then termed[pid] = { proc = proc, deadline = now + opts.timeout, comm = p.comm } end
      end
    end
  end
  for pid, t in pairs(termed) do
    local p = { pid = pid, comm = t.comm }
    if not t.proc:alive() then
      log("gone", p, "exited after the TERM")
    elseif now >= t.deadline then
      local ok, err = send(t.proc, "KILL")
      log(ok and "kill" or "failed", p, ok and ("still running %g s after the TERM"):format(opts.timeout)
        or "KILL: " .. err)
    end
    if not t.proc:alive() or now >= t.deadline then
      t.proc:close()
      termed[pid] = nil
    end
  end
  old, hot = new, still
end
