-- oomd: when a cgroup's memory stalls, kill its biggest or fastest-growing process.
-- Through a pidfd, on the kernel's PSI triggers instead of polling: the
-- policy of Meta's oomd and systemd-oomd. Run it as
-- `takana example oomd [OPTIONS] CGROUP...` or `lua5.4 oomd.lua ...`.
local USAGE = [[
usage: oomd.lua [OPTIONS] CGROUP...
  CGROUP...      a cgroup2 path ("workload", "/system.slice"); one PSI trigger each
  --kind K       some: some tasks stalled on memory (default some), or full: all did
  --stall PCT    fire when tasks stalled PCT % of the window (default 10)
  --window S     the trigger's window, 0.5 to 10 s (default 2; without
                 CAP_SYS_RESOURCE the kernel takes only multiples of 2)
  --pick WHAT    size: the largest RSS (default size), or growth: the fastest
                 RSS growth, sampled every window
  --holdoff S    after a kill, ignore that cgroup's trigger for S s (default
                 10): the stall a kill ends still fires it, and avg10 lags
  --dry-run      name the victim, kill nothing
  --json         one JSON object a line instead of text
  --help         this text
One line a start, note, kill and failure on stdout. Exit status: 0 after
SIGTERM or SIGINT, 1 when a trigger cannot be set or breaks, 2 on a usage
mistake.
]]
local takana = require "takana"
local json = require "takana.json"

local opts, usage_error = takana.options(USAGE)
if not (opts.kind == "some" or opts.kind == "full") then usage_error("--kind: some or full") end
if not (opts.pick == "size" or opts.pick == "growth") then usage_error("--pick: size or growth") end
if opts.stall == 0 or opts.stall > 100 then usage_error("--stall: a number above 0, at most 100") end
if opts.window < 0.5 or opts.window > 10 then usage_error("--window: a number from 0.5 to 10") end
if opts.holdoff > 86400 then usage_error("--holdoff: a number from 0 to 86400") end

-- One line an event: `time event key=value...` or a JSON object; kv is
-- table.pack(key, value, ...), its nil values left out.
local P = table.pack
local function say(event, kv)
  local t = { time = os.date("!%Y-%m-%dT%H:%M:%SZ"), event = event }
  local text = { t.time, event }
  for i = 1, kv.n, 2 do
    local k, v = kv[i], kv[i + 1]
    if v ~= nil then
      t[k] = v
      text[#text + 1] = k .. "=" .. ((type(v) == "string" and v:find("[%s\"\\%c\128-\255]")) and json.encode(v) or tostring(v))
    end
  end
  print(opts.json and json.encode(t) or table.concat(text, " "))
  io.stdout:flush()
end

local function pct(x) return math.floor(x * 10000 + 0.5) / 100 end

local sigs = assert(takana.signals { "TERM", "INT" })
local watched, objects = {}, { sigs }
for _, path in ipairs(opts) do
  local cg, err = takana.cgroup(path)
  local trig
  if cg then
    trig, err = cg:pressure_trigger { resource = "memory", kind = opts.kind, stall = opts.stall / 100,
      window = opts.window }
  end
  if not trig then
    say("failure", P("cgroup", path, "error", err))
    os.exit(1)
  end
  watched[trig] = { cg = cg, calm = 0 }
  objects[#objects + 1] = trig
  say("start", P("cgroup", cg.path, "trigger", ("memory %s %g %% of %g s"):format(opts.kind, opts.stall, opts.window),
    "pick", opts.pick, "dry_run", opts.dry_run))
  -- On a hybrid host the memory controller is cgroup v1's: PSI still counts
  -- this cgroup's tasks' stalls, but its memory.current/high are not there.
  local why = cg:why("memory")
  if why then
    say("note", P("cgroup", cg.path, "memory", why, "so", "victims are ranked by RSS (page cache and kernel " ..
      "memory charged to them are not counted); the cgroup's memory.current, memory.high and oom events are unknown"))
  end
end
local tick
if opts.pick == "growth" then
  tick = assert(takana.timer(opts.window, opts.window))
  objects[#objects + 1] = tick
end

local FIELDS = { "pid", "comm", "rss_bytes", "start_ns", "cgroup_id" }
local self_pid = tonumber(io.open("/proc/self/stat"):read("l"):match("^%d+"))
local last = {} -- pid -> {rss_bytes, start_ns, t}: the growth sample

-- Score of record p of the snapshot taken at time t: RSS, or its growth in
-- bytes a second since the last sample (since its start when unsampled),
-- none counting below 0: among those that did not grow, the biggest goes.
local function score(p, t)
  if opts.pick == "size" then return p.rss_bytes end
  local old = last[p.pid]
  if old and old.start_ns == p.start_ns and t > old.t then
    return math.max(0, (p.rss_bytes - old.rss_bytes) / (t - old.t))
  end
  return p.rss_bytes / math.max((takana.boottime_ns() - p.start_ns) / 1e9, 0.01)
end

local function sample()
  local snap = takana.snapshot { fields = FIELDS }
  if not snap then return end
  local t, now = takana.now(), {}
  for _, w in pairs(watched) do
    for _, pid in ipairs(snap:filter { cgroup = w.cg.path, recursive = true } or {}) do
      local p = snap:get(pid)
      now[pid] = { rss_bytes = p.rss_bytes, start_ns = p.start_ns, t = t }
    end
  end
  last = now
end

local function act(w)
  local snap, err = takana.snapshot { fields = FIELDS }
  if not snap then return say("failure", P("cgroup", w.cg.path, "error", err)) end
  local t, victim, best = takana.now(), nil, nil
  for _, pid in ipairs(snap:filter { cgroup = w.cg.path, recursive = true } or {}) do
    local p = snap:get(pid)
    local s = pid ~= self_pid and score(p, t)
    if s and (not best or s > best or s == best and p.rss_bytes > victim.rss_bytes) then victim, best = p, s end
  end
  local pr = w.cg:pressure("memory") or { some = { avg10 = 0 } }
  local where = P("cgroup", w.cg.path, "some_avg10", pct(pr.some.avg10), "full_avg10", pr.full and pct(pr.full.avg10))
  if not victim then return say("nothing", where) end
  local proc, perr = snap:process(victim.pid) -- nil if the pid is now another process
  if not proc then return say("failure", P("cgroup", w.cg.path, "pid", victim.pid, "error", perr)) end
  local argv = proc:cmdline()
  local f = P("pid", victim.pid, "comm", victim.comm, "rss_bytes", victim.rss_bytes,
    "growth_bytes_s", opts.pick == "growth" and math.floor(best) or nil, "cmdline", argv and table.concat(argv, " "),
    table.unpack(where, 1, where.n))
  w.calm = takana.now() + opts.holdoff
  if opts.dry_run then
    proc:close()
    return say("would-kill", f)
  end
  local ok, kerr = proc:signal("KILL")
  local gone = ok and (#assert(takana.poll({ proc }, 5)) > 0 or not proc:alive())
  proc:close()
  if not gone then kerr = kerr or "still alive 5 s after SIGKILL" end
  say(gone and "kill" or "failure", P("error", kerr, table.unpack(f, 1, f.n)))
end

if tick then sample() end
while true do
  local ready = assert(takana.poll(objects, nil))
  for _, o in ipairs(ready) do
    if o == sigs then
      say("stop", P("signal", (sigs:read() or {}).name))
      os.exit(0)
    elseif o == tick then
      tick:read()
      sample()
    else
      local w = watched[o]
      local ok, err = o:read() -- false: this firing was the poll's; nil: broken
      if ok == nil then
        say("failure", P("cgroup", w.cg.path, "error", err))
        os.exit(1)
      end
      if takana.now() >= w.calm then act(w) end
    end
  end
end
