-- exporter: Prometheus metrics per process group, as prometheus-process-exporter names them, and per cgroup.
local USAGE = [[
usage: exporter.lua [--listen [ADDR:]PORT | --textfile DIR | --once] [options]
  --listen [ADDR:]PORT  serve GET /metrics over HTTP/1.0 (what it does without --textfile
                        or --once, on 127.0.0.1:9256; needs lua-luv)
  --textfile DIR        write DIR/takana-exporter.prom every --interval seconds instead
  --once                print the metrics on stdout once and exit
  --group-by KEY        name the processes no --match took by comm (default comm) or by cgroup
  --match NAME=PATTERN  the group NAME: processes whose command line (arguments joined by
                        blanks) matches the Lua PATTERN; repeatable, the first match wins
  --cgroup PATH         also each cgroup of PATH's subtree: CPU, memory, pids, pressure;
                        repeatable
  --interval S          seconds between textfile writes (default 15)
  --json                log JSON lines
  --help                this text
The groups are named as prometheus-process-exporter names them
(namedprocess_namegroup_*{groupname}); the cgroups' metrics are takana_cgroup_*.
Kernel threads are left out. Each scrape or write that fails is logged with its cause
(and answered 500); the exporter keeps running.
]]
local takana = require "takana"

local opts, usage_error = takana.options(USAGE)
local groups = {}
for n, m in ipairs(opts.match) do
  groups[n] = { m:match("^([^=]+)=(.+)$") }
  if not groups[n][2] or not pcall(string.find, "", groups[n][2]) then usage_error("bad --match " .. m) end
end
local interval, by_cgroup = opts.interval, opts.group_by == "cgroup"
if interval == 0 then usage_error("--interval needs seconds above 0") end
if not by_cgroup and opts.group_by ~= "comm" then usage_error("--group-by is comm or cgroup") end
local host, port = (opts.listen or "9256"):match("^(.-):?(%d+)$")
if not port or (opts.textfile and opts.listen) then usage_error("--listen needs [ADDR:]PORT, and not with --textfile") end

local function log(msg)
  io.stderr:write(opts.json and takana.json.encode { time = takana.realtime(), msg = msg } or "exporter: " .. msg, "\n")
end
for _, root in ipairs(opts.cgroup) do   -- a cgroup that is not there is a mistake to report now
  local cg, err = takana.cgroup(root)
  if not cg then log(err) os.exit(1) end
  cg:close()
end

local FIELDS = { "pid", "comm", "kthread", "nthreads", "start_ns", "utime_ns", "stime_ns", "rss_bytes",
  "vsize_bytes", "minflt", "majflt" }
if by_cgroup then FIELDS[#FIELDS + 1] = "cgroup_id" end
if #groups > 0 then FIELDS[#FIELDS + 1] = "cmdline" end
local function group_of(snap, p)
  if #groups > 0 then
    local line = table.concat(p.cmdline or {}, " ")
    for _, g in ipairs(groups) do
      if line:find(g[2]) then return g[1] end
    end
  end
  return by_cgroup and (snap:cgroup(p.pid) or "?") or p.comm
end

local function metrics()
  local t0, m = takana.now(), takana.prometheus.new()
  local snap, err = takana.snapshot { fields = FIELDS }
  if not snap then return nil, err end
  local sum = {}
  for p in snap:each() do
    if not p.kthread then
      local name = group_of(snap, p)
      local g = sum[name] or { procs = 0, threads = 0, user = 0, system = 0, rss = 0, vsize = 0, minflt = 0,
        majflt = 0, start = math.huge }
      sum[name] = g
      g.procs, g.threads, g.user, g.system = g.procs + 1, g.threads + p.nthreads, g.user + p.utime_ns, g.system + p.stime_ns
      g.rss, g.vsize, g.minflt, g.majflt = g.rss + p.rss_bytes, g.vsize + p.vsize_bytes, g.minflt + p.minflt, g.majflt + p.majflt
      g.start = math.min(g.start, p.start_ns)
    end
  end
  local P = "namedprocess_namegroup_"
  for name, g in pairs(sum) do
    local l = { groupname = name }
    m:gauge(P .. "num_procs", "number of processes in this group", l, g.procs)
    m:gauge(P .. "num_threads", "Number of threads", l, g.threads)
    m:counter(P .. "cpu_seconds_total", "Cpu user usage in seconds", { groupname = name, mode = "user" }, g.user / 1e9)
    m:counter(P .. "cpu_seconds_total", "Cpu user usage in seconds", { groupname = name, mode = "system" }, g.system / 1e9)
    m:gauge(P .. "memory_bytes", "number of bytes of memory in use", { groupname = name, memtype = "resident" }, g.rss)
    m:gauge(P .. "memory_bytes", "number of bytes of memory in use", { groupname = name, memtype = "virtual" }, g.vsize)
    m:counter(P .. "minor_page_faults_total", "Minor page faults", l, g.minflt)
    m:counter(P .. "major_page_faults_total", "Major page faults", l, g.majflt)
    m:gauge(P .. "oldest_start_time_seconds", "start time in seconds since 1970/01/01 of oldest process in group", l,
      takana.to_realtime(g.start) / 1e9)
  end
  for _, root in ipairs(opts.cgroup) do
    local tree, terr = takana.cgroup.tree(root)
    local stats = tree and tree:stat()
    if not stats then return nil, terr or "cgroup " .. root .. ": cannot read its stats" end
    tree:close()
    for path, st in pairs(stats) do
      local l = { cgroup = path }
      if st.cpu then m:counter("takana_cgroup_cpu_usage_seconds_total", "cpu.stat usage.", l, st.cpu.usage_ns / 1e9) end
      if st.memory then m:gauge("takana_cgroup_memory_current_bytes", "memory.current.", l, st.memory.current) end
      if st.pids then m:gauge("takana_cgroup_pids_current", "pids.current.", l, st.pids.current) end
      for res, pr in pairs(st.pressure or {}) do
        for kind, v in pairs(pr) do
          m:counter("takana_cgroup_pressure_stalled_seconds_total", "PSI total stall time.",
            { cgroup = path, resource = res, kind = kind }, v.total_ns / 1e9)
        end
      end
    end
  end
  m:gauge("takana_scrape_duration_seconds", "Time this scrape took.", { backend = snap.backend }, takana.now() - t0)
  return m:text()
end

if opts.once then
  local text, err = metrics()
  io.write(text or "")
  if not text then log(err) os.exit(1) end
elseif opts.textfile then
  local tick = assert(takana.timer(0, interval))
  while takana.poll({ tick }, nil) and tick:read() do
    local text, err = metrics()
    if text then text, err = takana.textfile_write(opts.textfile, "takana-exporter.prom", text) end
    if not text then log("not written: " .. err) end
  end
else
  local uv = require "luv"   -- takana has no TCP sockets
  local server = uv.new_tcp()
  local ok, err = server:bind(host == "" and "127.0.0.1" or host, tonumber(port))
  if ok then ok, err = server:listen(64, function()
    local c, req, timer = uv.new_tcp(), "", uv.new_timer()
    local function close() if not c:is_closing() then timer:close() c:close() end end
    server:accept(c)
    timer:start(5000, 0, close)   -- a client that never finishes its request is dropped
    c:read_start(function(_, data)
      req = req .. (data or "")
      if not data or #req > 8192 then return close() end
      if not req:find("\r?\n\r?\n") then return end
      c:read_stop()
      local path, text, merr = req:match("^GET (%S+) HTTP/"), nil, nil
      if path == "/metrics" then text, merr = metrics() end
      if merr then log("scrape failed: " .. merr) end
      local status = text and "200 OK" or path == "/metrics" and "500 Internal Server Error" or "404 Not Found"
      local body = text or (merr or "GET /metrics") .. "\n"
      c:write(("HTTP/1.0 %s\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n%s"):format(
        status, #body, body))
      c:shutdown(close)
    end)
  end) end
  if not ok then log("listen " .. (opts.listen or port) .. ": " .. err) os.exit(1) end
  log(("serving http://%s:%d/metrics"):format(server:getsockname().ip, server:getsockname().port))
  uv.run()
end
