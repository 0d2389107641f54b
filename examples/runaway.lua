-- runaway: a process above a CPU share for longer than a grace time gets SIGTERM through
-- its pidfd, then SIGKILL if it still runs after a timeout.
--
-- usage: runaway.lua (--cgroup PATH | --uid N) [options]
--   --cgroup PATH   watch the processes of this cgroup and below (a path under the cgroup2 mount)
--   --uid N         watch the processes of this user (with --cgroup: of both)
--   --share F       the share of one CPU that is too much (default 0.5)
--   --grace S       seconds a process may stay above it (default 10)
--   --timeout S     seconds from SIGTERM to SIGKILL (default 5)
--   --interval S    seconds between checks (default 1)
--   --dry-run       log what would be signalled, signal nothing
--   --json          log JSON lines
-- One line per action, with its reason: term, kill, gone (exited after the TERM), failed.
-- A pid reused meanwhile is never signalled: the signal goes through a pidfd opened
-- from the snapshot that measured it.
local takana = require "takana"

local function usage(msg)
  io.stderr:write("runaway: ", msg, "\nusage: runaway.lua (--cgroup PATH | --uid N) [--share F] [--grace S]",
    " [--timeout S] [--interval S] [--dry-run] [--json] [--help]\n")
  os.exit(2)
end
local SPEC = { cgroup = "path", uid = "n", share = "n", grace = "n", timeout = "n", interval = "n",
  ["dry-run"] = "flag", json = "flag", help = "flag" }
local opts, i = { share = 0.5, grace = 10, timeout = 5, interval = 1 }, 1
while arg[i] do
  local name = arg[i]:match("^%-%-([%w-]+)$")
  local kind = SPEC[name]
  if kind == "flag" then opts[name] = true
  elseif kind then
    i = i + 1
    opts[name] = kind == "n" and tonumber(arg[i]) or arg[i]
    if not opts[name] or kind == "n" and opts[name] < 0 then usage("--" .. name .. " needs a number >= 0") end
  else usage("bad option " .. arg[i]) end
  i = i + 1
end
if opts.help then
  for line in io.lines(arg[0]) do
    if not line:match("^%-%-") then os.exit(0) end
    print((line:gsub("^%-%- ?", "")))
  end
end
if not (opts.cgroup or opts.uid) then usage("--cgroup or --uid is needed: the whole host is no scope") end
if opts.interval == 0 then usage("--interval must be above 0") end
if opts.uid and not math.tointeger(opts.uid) then usage("--uid needs a whole number") end
local scope = { cgroup = opts.cgroup, recursive = opts.cgroup and true, uid = opts.uid and math.tointeger(opts.uid) }

local function log(action, p, why)
  if opts.json then
    print(takana.json.encode { time = takana.realtime(), action = action, pid = p.pid, comm = p.comm,
      dry_run = opts["dry-run"], reason = why })
  else
    print(("%s %s%s %d %s: %s"):format(os.date("%H:%M:%S"), opts["dry-run"] and "would " or "", action, p.pid,
      p.comm, why))
  end
  io.stdout:flush()
end

local function send(proc, sig)
  if not proc then return nil, "the process is gone" end
  if opts["dry-run"] then return true end
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
