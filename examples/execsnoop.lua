-- execsnoop: a line for every exec on this host, as libbpf-tools' execsnoop prints them.
local USAGE = [[
usage: execsnoop.lua [--json] [--backend auto|bpf|connector]
  --json        one JSON object a line (time, pid, ppid, uid, cgroup, argv, argv_from, ...)
  --backend B   bpf (root): argv and cgroup read at the exec itself; connector: read
                from /proc when the event arrives; auto: bpf, else connector
                (default auto)
  --help        this text
Each line: TIME PID PPID UID CGROUP ARGV. An argument with a blank, a quote or a
control character is quoted. "?" (absent in JSON) is what the connector found gone.
"[argv from /proc later]" marks an argv read after the exec; "[argv lost]" one that
was not the exec's own (the process exited or exec'd again first), so none is shown.
Lost events are printed, never skipped.
SIGINT or SIGTERM prints the totals on stderr and exits 0.
]]
local takana = require "takana"
local json = takana.json

local opts, usage_error = takana.options(USAGE)
if not ({ auto = true, bpf = true, connector = true })[opts.backend] then usage_error("bad backend " .. opts.backend) end

local ev, err = takana.events { "exec", backend = opts.backend }
if not ev then
  io.stderr:write("execsnoop: ", err, "\n")
  os.exit(1)
end
local sigs = assert(takana.signals { "INT", "TERM" })
local poller = assert(takana.poller())   -- one epoll set for the whole run
assert(poller:add(ev) and poller:add(sigs))
io.stderr:write(("execsnoop: %s backend%s\n"):format(ev.backend, ev.skipped and ev.skipped.bpf
  and " (bpf: " .. ev.skipped.bpf .. ")" or ""))
if not opts.json then print("TIME     PID     PPID    UID   CGROUP  ARGV") end

-- bpf events carry the cgroup's id (never reused: its path is kept, for up to
-- 4,096 cgroups); the connector's are read now, as argv is.
local paths, npaths = {}, 0
local function cgroup_of(e)
  if e.cgroup_id then
    if not paths[e.cgroup_id] then
      if npaths == 4096 then paths, npaths = {}, 0 end
      paths[e.cgroup_id], npaths = takana.cgroup.path(e.cgroup_id), npaths + 1
    end
    return paths[e.cgroup_id]
  end
  if e.argv_lost then return nil end
  local cg = takana.cgroup.of(e.pid)
  if not cg then return nil end
  local path = cg.path
  cg:close()
  return path
end

local function quoted(a)
  return (a == "" or a:find("[%s%c\"'\\\128-\255]")) and json.encode(a) or a
end

local execs, second, stamp = 0, nil, nil
repeat
  assert(poller:wait(nil))
  for e in assert(ev:read()) do
    if e.type == "lost" then   -- a nil count: the connector's socket overran, by how much is unknown
      print(opts.json and json.encode { type = "lost", count = e.count } or ("lost %s events"):format(e.count or "some"))
    elseif e.type == "exec" then
      execs = execs + 1
      local time, cgroup = e.realtime_ns / 1e9, cgroup_of(e)
      if opts.json then
        print(json.encode { time = time, pid = e.pid, ppid = e.ppid, uid = e.uid, cgroup = cgroup, argv = e.argv,
          filename = e.filename, argv_from = e.argv_from, argv_lost = e.argv_lost, argv_truncated = e.argv_truncated,
          who_lost = e.who_lost })
      else
        local argv = {}
        for n, a in ipairs(e.argv or {}) do argv[n] = quoted(a) end
        if time // 1 ~= second then second, stamp = time // 1, os.date("%H:%M:%S", time // 1) end
        print(("%s %-7d %-7s %-5s %s %s%s%s"):format(stamp, e.pid, e.ppid or "?",
          e.uid or "?", quoted(cgroup or "?"), table.concat(argv, " "), e.argv_truncated and " [truncated]" or "",
          e.argv_lost and " [argv lost]" or e.argv_from == "proc-later" and " [argv from /proc later]" or ""))
      end
    end
  end
  io.stdout:flush()
until sigs:read()
local stats = ev:stats()
io.stderr:write(("execsnoop: %d execs, %d events lost, %d overruns (%d received)\n"):format(execs, stats.lost,
  stats.overruns or 0, stats.received))
