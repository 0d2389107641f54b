-- The installed `takana` command (issues 26 and 22), as a user runs it:
-- installed by `luarocks make --tree` and started through its own shebang.
-- Each table runs its rows in the same rounds, the order alternating every
-- round; min and median of each, and the ratio of the mins.
--   1. `takana ps` against `ps -e -o pid,ppid,stat,comm` and against ps
--      with takana's default columns, at the natural process count
--      (target <= 1.0) and with a herd of HERD (default 1,000) sleeping
--      processes (target <= 0.5);
--   2. `takana ctl SOCKET status NAME` against a running supervisor (root,
--      cgroup2), against `lua5.4 -e ''`, the floor of any Lua command
--      (target <= 3 ms).
-- TREE=dir measures the tree already there; otherwise the checkout is
-- installed into a temporary tree first (about 30 s). BASELINE=dir adds
-- the same rows for another install (a before/after in one run). Run from
-- the checkout after `make all bench/takana_bench.so spec/fixture`:
--   ROUNDS=31 lua5.4 bench/command.lua
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local core = require "takana.core"
local L = require "lib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 31
local HERD = tonumber(os.getenv("HERD") or "") or 1000

local function sh(cmd) assert(os.execute(cmd), cmd) end
local function capture(cmd)
  local p = assert(io.popen(cmd))
  local s = p:read("a")
  p:close()
  return s
end
local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local tmp = capture("mktemp -d"):match("%S+")
local tree = os.getenv("TREE")
if not tree then
  tree = tmp .. "/tree"
  -- Built in a copy, as spec/90-luarocks does: in place would rewrite the
  -- core.so this process has loaded.
  sh(("tar cf - Makefile csrc lua bpf rockspec bin tools examples | tar xf - -C %s && cd %s && " ..
    "luarocks --lua-version=5.4 make --tree %s rockspec/takana-scm-1.rockspec >/dev/null"):format(tmp, tmp, tree))
end
local cmd = tree .. "/bin/takana"

-- The environment of a user's shell: no LUA_PATH, so the installed script
-- finds its own tree.
local env = { PATH = os.getenv("PATH") or "/usr/bin:/bin" }

-- The checkout's modules, compiled at every start.
local checkout = { PATH = env.PATH, LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;", LUA_CPATH = "./?.so;;" }

-- Runs argv to completion, stdout to /dev/null; its wall time is the row's.
local function run(argv, e)
  return function()
    local t = table.move(argv, 1, #argv, 1, {})
    t.env, t.stdout = e or env, "null"
    local child = assert(takana.spawn(t))
    local st = assert(child:wait())
    child:close()
    assert(st.exited and st.code == 0, "failed: " .. table.concat(argv, " "))
    return 1
  end
end

local baseline = os.getenv("BASELINE")
-- cases plus, under BASELINE, the first one run from the baseline's tree.
local function with_baseline(cases, argv_of)
  if baseline then
    table.insert(cases, 2, { name = cases[1].name:gsub("installed", "BASELINE"), run = run(argv_of(baseline .. "/bin/takana")) })
  end
  return cases
end

local function nprocs() return #assert(takana.snapshot { backend = "proc", fields = { "pid" } }) end

-- The title's count of processes is taken before and after the rounds: on
-- a shared host others' processes come and go meanwhile.
local function row(title, cases, a, b, target, ok)
  local before = nprocs()
  local res = L.measure(cases, ROUNDS)
  L.print_table(("%s (%d processes before, %d after)"):format(title, before, nprocs()), cases, res, 1)
  L.ratio(res, a, b, ("%s / %s"):format(a, b), { text = target, ok = ok })
  return res
end

local PS4 = { "ps", "-e", "-o", "pid,ppid,stat,comm" }
local PS8 = { "ps", "-e", "-o", "pid,ppid,uid,stat,nlwp,rss,time,comm" }
local function ps_rows(title, target, ok)
  local cases = with_baseline({
    { name = "takana ps (installed)", run = run({ cmd, "ps" }) },
    { name = "ps -e -o pid,ppid,stat,comm", run = run(PS4) },
    { name = "ps -e -o pid,ppid,uid,stat,nlwp,rss,time,comm", run = run(PS8) },
    { name = "lua5.4 bin/takana ps (checkout: sources)", run = run({ "lua5.4", "bin/takana", "ps" }, checkout) },
    { name = "lua5.4 -e ''", run = run({ "lua5.4", "-e", "" }) },
  }, function(c) return { c, "ps" } end)
  local ps4 = "ps -e -o pid,ppid,stat,comm"
  local res = row(title, cases, cases[1].name, ps4, target, ok)
  L.ratio(res, cases[1].name, "ps -e -o pid,ppid,uid,stat,nlwp,rss,time,comm", "takana ps / ps with the same columns",
    { text = "(info)", ok = function() return true end })
  if baseline then
    L.ratio(res, cases[2].name, ps4, "BASELINE takana ps / " .. ps4, { text = "(info)", ok = function() return true end })
  end
end

print(("== the installed command: %s, %d rounds each, order alternating ==\n"):format(cmd, ROUNDS))

ps_rows("takana ps, natural count", "<= 1.0", function(x) return x <= 1.0 end)
print()

local herd = L.herd(HERD, 600)
ps_rows(("takana ps, a herd of %d"):format(HERD), "<= 0.5", function(x) return x <= 0.5 end)
herd.stop()
print()

-- ctl status against a supervisor of one service, in a cgroup of its own.
local mnt
for line in io.lines("/proc/self/mountinfo") do
  local m, fstype = line:match("^%S+ %S+ %S+ %S+ (%S+) .- %- (%S+)")
  if fstype == "cgroup2" then mnt = m end
end
if core.geteuid() ~= 0 or not mnt then
  print("note: ctl status needs root and a cgroup2 mount; skipped")
else
  local name = ("takana-bench-ctl-%d"):format(math.random(1e9))
  local sock, file = tmp .. "/ctl.sock", tmp .. "/sup.lua"
  local f = assert(io.open(file, "w"))
  f:write(([[
local sup = assert(require("takana").supervisor { cgroup = %q, control = %q, runtime = %q, log = false })
sup:service { name = "idle", cmd = { "sleep", "1000" } }
return sup
]]):format(name, sock, tmp .. "/run"))
  f:close()
  local sup = assert(takana.spawn { cmd, "supervise", file, env = env, pdeathsig = "KILL",
    stdout = "null", stderr = "null" })
  local ctl = { cmd, "ctl", sock, "status", "idle" }
  for _ = 1, 200 do
    if os.execute(table.concat(ctl, " ") .. " 2>/dev/null | grep -q 'idle - running'") then break end
    takana.poll({}, 0.05)
  end
  local res = row("takana ctl SOCKET status NAME, natural count", with_baseline({
    { name = "takana ctl SOCKET status idle (installed)", run = run(ctl) },
    { name = "lua5.4 -e ''", run = run({ "lua5.4", "-e", "" }) },
  }, function(c) return { c, table.unpack(ctl, 2) } end), "takana ctl SOCKET status idle (installed)", "lua5.4 -e ''",
    "(info; ctl min <= 3 ms)", function() return true end)
  local min = res["takana ctl SOCKET status idle (installed)"].min
  print(("  %-60s %7.2f ms   target <= 3 ms  %s"):format("takana ctl status, min wall", min / 1e6,
    min <= 3e6 and "met" or "MISSED"))
  sup:signal("TERM")
  sup:wait()
  sup:close()
  -- (a clean shutdown removes it; this is for one that was not)
  os.execute("[ -d " .. quote(mnt .. "/" .. name) .. " ] && { echo 1 > " .. quote(mnt .. "/" .. name) .. "/cgroup.kill; sleep 0.2; find " ..
    quote(mnt .. "/" .. name) .. " -depth -type d -exec rmdir {} +; }")
end
os.execute("rm -rf " .. quote(tmp))
