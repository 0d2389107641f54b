-- bench/ex_services.lua: examples/services.lua under `takana supervise`
-- against the same three services as s6 and runit service directories, in
-- one run.
--
-- The service directories are written here, each file as an s6 or runit
-- user writes it (the Python programs the example embeds become db.py,
-- web.py and worker.py beside them, counted for no one). Lines of config:
-- lines that are neither blank nor comments; for the example, those outside
-- its three embedded programs. What each cannot say is printed beside it.
--
-- Then per round (ROUNDS, default 3; the order alternates), each set is
-- started in a cgroup of its own: from the start to the web app's first
-- answer over HTTP (through the database); the worker SIGKILLed (1.5 s
-- after it started: s6-supervise and runsv wait a second between starts)
-- to its replacement's exec, seen by snapshots every 5 ms; and the RSS of
-- the supervision processes (takana's one; s6-svscan and the s6-supervises;
-- runsvdir and the runsvs; loggers excluded). bench/supervise.lua has the
-- restart latency and memory at scale (100 services, 1,000 restarts).
-- Needs root (cgroups), python3, s6 and runit.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local takana = require "takana"
local X = require "exlib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 3
local function skip(why)
  print("== ex_services: skipped: " .. why .. " ==")
  os.exit(0)
end
if not io.open("/proc/self/status"):read("a"):match("\nUid:%s+0%s") then skip("needs root (cgroups)") end
for _, prog in ipairs { "python3", "s6-svscan", "runsvdir" } do
  if not os.execute("command -v " .. prog .. " >/dev/null 2>&1") then skip("needs " .. prog) end
end

local example = assert(io.open("examples/services.lua")):read("a")
local dir = assert(io.popen("mktemp -d /tmp/takana-bench-services.XXXXXX")):read("l")
local P = ("takana-bench-services-%d"):format(math.random(1e9))
local top = assert(takana.cgroup("/"):mkdir(P))
-- takana's services are cgroups below <P>: their limits need the
-- controllers delegated to <P> (where cgroup2 has them).
local limited = {}
for _, c in ipairs(takana.cgroup.probe().v2_controllers or {}) do
  if c == "memory" or c == "pids" or c == "cpu" then limited[#limited + 1] = c end
end
if #limited > 0 then assert(top:enable(limited)) end
local PORT = 20000 + math.random(20000)

local function write(path, text, mode)
  assert(os.execute(("mkdir -p %q"):format(path:match("^(.*)/"))))
  assert(io.open(path, "w")):write(text):close()
  if mode then assert(os.execute(("chmod %s %q"):format(mode, path))) end
end

-- Lines that are neither blank nor comments (# or --; a #! line counts).
local function code_lines(text)
  local n = 0
  for line in text:gmatch("[^\n]*") do
    if line:match("%S") and not line:match("^%s*#[^!]") and not line:match("^%s*%-%-") then n = n + 1 end
  end
  return n
end

-- The example's programs, as files for s6 and runit.
local programs = {}
local embedded = 0
for _, name in ipairs { "DB", "WEB", "WORKER" } do
  local text = assert(example:match("\nlocal " .. name .. " = %[%[\n(.-)%]%]\n"), name)
  programs[name:lower()] = text
  embedded = embedded + select(2, text:gsub("\n", "")) + 2 -- its lines, and the two holding [[ and ]]
end
for name, text in pairs(programs) do write(dir .. "/bin/" .. name .. ".py", text) end

-- The s6 and runit versions: name -> {file -> text}.
local py = "python3 " .. dir .. "/bin/"
local function sets(port)
  local db, web = tostring(port + 1), tostring(port)
  local check = function(p) return "#!/bin/sh\nexec python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", " ..
    p .. "))'\n" end
  return {
    s6 = {
      ["db/run"] = ("#!/bin/sh\nexec 2>&1\nexec s6-softlimit -m %d %sdb.py %s/db.sqlite %s\n"):format(128 * 2 ^ 20, py,
        dir, db),
      ["db/notification-fd"] = "3\n",
      ["db/log/run"] = "#!/bin/sh\nexec s6-log t s1048576 n5 " .. dir .. "/log/s6-db\n",
      ["web/run"] = ("#!/bin/sh\nexec 2>&1\ns6-svwait -U ../db || exit 1\n" ..
        "exec s6-softlimit -m %d s6-notifyoncheck -w 50 %sweb.py %s %s\n"):format(64 * 2 ^ 20, py, web, db),
      ["web/notification-fd"] = "3\n",
      ["web/data/check"] = check(web),
      ["web/log/run"] = "#!/bin/sh\nexec s6-log t s1048576 n5 " .. dir .. "/log/s6-web\n",
      ["worker/run"] = ("#!/bin/sh\nexec 2>&1\ns6-svwait -U ../db || exit 1\nexec s6-softlimit -m %d %sworker.py %s\n")
        :format(32 * 2 ^ 20, py, db),
      ["worker/log/run"] = "#!/bin/sh\nexec s6-log t s1048576 n5 " .. dir .. "/log/s6-worker\n",
    },
    runit = {
      ["db/run"] = ("#!/bin/sh\nexec 2>&1 3>/dev/null\nexec chpst -m %d %sdb.py %s/db.sqlite %s\n"):format(128 * 2 ^ 20,
        py, dir, db),
      ["db/check"] = check(db),
      ["db/log/run"] = "#!/bin/sh\nexec svlogd -tt " .. dir .. "/log/runit-db\n",
      ["web/run"] = ("#!/bin/sh\nexec 2>&1\nsv -w 10 check ../db >/dev/null || exit 1\nexec chpst -m %d %sweb.py %s %s\n")
        :format(64 * 2 ^ 20, py, web, db),
      ["web/check"] = check(web),
      ["web/log/run"] = "#!/bin/sh\nexec svlogd -tt " .. dir .. "/log/runit-web\n",
      ["worker/run"] = ("#!/bin/sh\nexec 2>&1\nsv -w 10 check ../db >/dev/null || exit 1\nexec chpst -m %d %sworker.py %s\n")
        :format(32 * 2 ^ 20, py, db),
      ["worker/log/run"] = "#!/bin/sh\nexec svlogd -tt " .. dir .. "/log/runit-worker\n",
    },
  }
end

local lines = { takana = code_lines(example) - embedded, s6 = 0, runit = 0 }
local files = { takana = 1, s6 = 0, runit = 0 }
for kind, set in pairs(sets(PORT)) do
  for _, text in pairs(set) do
    lines[kind], files[kind] = lines[kind] + code_lines(text), files[kind] + 1
  end
end

local function readf(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- Starts one set in <P>/<kind>-<round>; returns a stop function and the
-- pids of its supervision processes (a function: they appear as it starts).
local function start(kind, round, port)
  local cg = assert(top:mkdir(kind .. "-" .. round))
  local argv
  if kind == "takana" then
    argv = { "lua5.4", "bin/takana", "supervise", "examples/services.lua",
      env = { add = { LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;",
        SERVICES_CGROUP = P .. "/takana-svc-" .. round, SERVICES_DIR = dir .. "/state-" .. round,
        SERVICES_PORT = tostring(port), SERVICES_CONTROL = dir .. "/ctl-" .. round .. ".sock" } } }
  else
    local sdir = ("%s/%s-%d"):format(dir, kind, round)
    for path, text in pairs(sets(port)[kind]) do
      write(sdir .. "/" .. path, text, (path:match("run$") or path:match("check$")) and "755" or nil)
    end
    assert(os.execute(("mkdir -p %s/log/%s-db %s/log/%s-web %s/log/%s-worker"):format(dir, kind, dir, kind, dir, kind)))
    argv = { kind == "s6" and "s6-svscan" or "runsvdir", sdir }
  end
  argv.cgroup, argv.pdeathsig, argv.stdout, argv.stderr = cg, "KILL", "null", assert(io.open(dir .. "/stderr-" .. kind, "w"))
  local child = assert(takana.spawn(argv))
  local function stop()
    child:signal(kind == "runit" and "HUP" or "TERM")
    if not child:wait(10) then
      child:signal("KILL")
      child:wait(5)
    end
    for _, c in ipairs { cg, kind == "takana" and takana.cgroup(P .. "/takana-svc-" .. round) or nil } do
      c:kill { wait = 5 }
      for _, sub in ipairs(c:children { handles = true } or {}) do
        sub:kill { wait = 5 }
        sub:remove()
        sub:close()
      end
      c:remove()
      c:close()
    end
  end
  local function supervision_pids()
    local snap = assert(takana.snapshot { fields = { "pid", "comm", "cgroup_id" } })
    local pids = {}
    for _, pid in ipairs(snap:filter { cgroup = cg.path, recursive = true } or {}) do
      local comm = snap:get(pid).comm
      if comm == "lua5.4" or comm == "s6-svscan" or comm == "s6-supervise" or comm == "runsvdir" or comm == "runsv" then
        pids[#pids + 1] = pid
      end
    end
    return pids
  end
  return stop, supervision_pids
end

local function web_answers(port)
  return os.execute(("python3 -c 'import urllib.request, time\nfor i in range(3000):\n  try:\n" ..
    "    urllib.request.urlopen(\"http://127.0.0.1:%d/\", timeout=1).read(); break\n" ..
    "  except Exception: time.sleep(0.01)\nelse: raise SystemExit(1)'"):format(port))
end

-- The worker: takana's is the python3 in its service's cgroup; s6's and
-- runit's run worker.py.
local function worker_pid(kind, round)
  local snap = assert(takana.snapshot { fields = { "pid", "comm", "cgroup_id", "cmdline" } })
  local where = kind == "takana" and top.path .. "/takana-svc-" .. round .. "/worker" or top.path
  for _, pid in ipairs(snap:filter { cgroup = where, recursive = true } or {}) do
    local p = snap:get(pid)
    local cmd = p.cmdline and table.concat(p.cmdline, " ") or ""
    if p.comm == "python3" and (kind == "takana" or cmd:find("worker.py", 1, true)) then return pid end
  end
end

local res = {}
local kinds = { "takana", "s6", "runit" }
for _, k in ipairs(kinds) do res[k] = { up = {}, restart = {}, rss = {} } end
for r = 1, ROUNDS do
  local order = r % 2 == 1 and kinds or { "runit", "s6", "takana" }
  for i, kind in ipairs(order) do
    local port = PORT + 10 * (r * 3 + i)
    local t0 = takana.now()
    local stop, sup_pids = start(kind, r, port)
    local ok = web_answers(port)
    local up = takana.now() - t0
    local old
    local deadline = takana.now() + 10
    repeat old = worker_pid(kind, r) takana.poll({}, 0.05) until old or takana.now() > deadline
    takana.poll({}, 1.5)
    local rss = 0
    for _, pid in ipairs(sup_pids()) do
      rss = rss + (tonumber((readf("/proc/" .. pid .. "/status") or ""):match("VmRSS:%s+(%d+)")) or 0) * 1024
    end
    local restart
    local w = old and takana.process(old)
    if w and w:signal("KILL") then
      local k0 = takana.now()
      deadline = k0 + 10
      repeat
        local new = worker_pid(kind, r)
        if new and new ~= old then restart = takana.now() - k0 end
        if not restart then takana.poll({}, 0.005) end
      until restart or takana.now() > deadline
    end
    if w then w:close() end
    stop()
    if ok and restart then
      table.insert(res[kind].up, up)
      table.insert(res[kind].restart, restart)
      table.insert(res[kind].rss, rss)
    else
      io.stderr:write(("ex_services: %s round %d: %s; its stderr: %s\n"):format(kind, r,
        ok and "no restart seen" or "web never answered", readf(dir .. "/stderr-" .. kind) or "-"))
    end
  end
end
top:remove()
top:close()
os.execute("rm -rf " .. dir)

local function stats(xs)
  table.sort(xs)
  return xs[1] or 0 / 0, xs[(#xs + 1) // 2] or 0 / 0
end
print(("== ex_services: a web app, its database and a worker; %d rounds alternating =="):format(ROUNDS))
local cannot = {
  takana = "limits are cgroup limits (memory.max, pids.max, cpu.weight), where cgroup2 has the controller",
  s6 = "no dependencies without s6-rc (s6-svwait in ./run); limits are rlimits (s6-softlimit), not cgroups",
  runit = "no readiness (./check polled by sv), dependencies by sv check in ./run, limits are rlimits (chpst)",
}
for _, k in ipairs(kinds) do
  local r = res[k]
  local umin, umed = stats(r.up)
  local rmin, rmed = stats(r.restart)
  local smin, smed = stats(r.rss)
  print(("  %-7s config %3d lines in %2d files  start -> web answers: min %6.0f ms median %6.0f ms  " ..
    "worker restart: min %6.1f ms median %6.1f ms  supervision RSS: median %5.1f MiB (min %.1f)")
    :format(k, lines[k], files[k], umin * 1e3, umed * 1e3, rmin * 1e3, rmed * 1e3, smed / 2 ^ 20, smin / 2 ^ 20))
  print("          " .. cannot[k])
end
for _, k in ipairs { "s6", "runit" } do
  local _, a = stats(res.takana.restart)
  local _, b = stats(res[k].restart)
  local _, ua = stats(res.takana.up)
  local _, ub = stats(res[k].up)
  print(("  ratio takana/%s: config lines %.2f, start -> answer %.2f, worker restart %.2f (medians)")
    :format(k, lines.takana / lines[k], ua / ub, a / b))
  X.row("services", "lines of config (files)", ("%d (%d)"):format(lines.takana, files.takana), k .. " service dirs",
    ("%d (%d)"):format(lines[k], files[k]))
  X.row("services", "start -> web answers, median", ("%.0f ms"):format(ua * 1e3), k, ("%.0f ms"):format(ub * 1e3))
  X.row("services", "worker SIGKILL -> replacement exec, median", ("%.0f ms"):format(a * 1e3), k,
    ("%.0f ms"):format(b * 1e3))
  X.row("services", "supervision RSS, median", ("%.1f MiB"):format(select(2, stats(res.takana.rss)) / 2 ^ 20), k,
    ("%.1f MiB"):format(select(2, stats(res[k].rss)) / 2 ^ 20))
end
