-- Fixture processes and host facts for the specs. Every process started here
-- dies with its parent and after a bounded lifetime (spec/fixture.c).
local H = {}

H.fixture_path = "./spec/fixture"

-- The command that runs a Lua child loading takana: under make test-asan
-- it needs the sanitizer runtimes preloaded (spec/preload.lua took them
-- out of the environment for every other child).
local asan = os.getenv("TAKANA_ASAN_PRELOAD")
H.lua = asan and ("env LD_PRELOAD=" .. asan .. " lua5.4") or "lua5.4"
H.lua_argv = asan and { "env", "LD_PRELOAD=" .. asan, "lua5.4" } or { "lua5.4" }

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end
H.shell_quote = shell_quote

-- Reads a whole file, or nil.
function H.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- valgrind 3.19 implements neither clone3 nor pidfd_open: under it, specs
-- that spawn are pending with this reason.
H.no_spawn = H.read("/proc/self/comm"):match("^memcheck") and
  "valgrind does not implement clone3 or pidfd_open (ENOSYS)" or nil


-- Parses a stat line the independent way (Lua patterns after the last ')').
function H.stat_fields(text)
  local close = text:match(".*()%)")
  local comm = text:sub(text:find("(", 1, true) + 1, close - 1)
  local rest = {}
  for w in text:sub(close + 2):gmatch("%S+") do rest[#rest + 1] = w end
  return comm, rest -- rest[1] is state, rest[2] ppid, ... as proc(5) field n-2
end

function H.self_stat()
  local _, f = H.stat_fields(H.read("/proc/self/stat"))
  return { pid = tonumber(H.read("/proc/self/stat"):match("^%d+")), ppid = tonumber(f[2]),
           pgid = tonumber(f[3]), sid = tonumber(f[4]) }
end

-- The busted process itself (not the /proc/self of a child shell).
H.pid = H.self_stat().pid

function H.uid()
  local status = H.read("/proc/self/status")
  return tonumber(status:match("\nUid:%s+%d+%s+(%d+)"))
end

function H.is_root()
  return H.uid() == 0
end

-- Starts spec/fixture with the given arguments; returns a handle with
-- .pid, .extra (further pids it printed) and :kill().
function H.fixture(args)
  local words = {}
  for i, a in ipairs(args or {}) do words[i] = shell_quote(tostring(a)) end
  local f = assert(io.popen("exec " .. H.fixture_path .. " " .. table.concat(words, " "), "r"))
  local line = f:read("l")
  assert(line and line:match("^ready"), "fixture did not start: " .. tostring(line))
  local nums = {}
  for n in line:gmatch("%d+") do nums[#nums + 1] = tonumber(n) end
  local fx = { pid = nums[1], extra = { table.unpack(nums, 2) }, file = f }
  function fx.kill(self)
    if self.file then
      os.execute("kill -KILL " .. self.pid .. " 2>/dev/null")
      self.file:close()
      self.file = nil
    end
  end
  function fx.lines(self)
    return self.file:lines()
  end
  return fx
end

function H.sleep(s)
  os.execute("sleep " .. s)
end

-- Waits on pollable objects, at most `tries` times for 0.1 s each, until
-- done() says so; returns done()'s last answer. A bound, not a timing.
function H.poll_until(objects, done, tries)
  local takana = require "takana"
  for _ = 1, tries or 50 do
    local r = done()
    if r then return r end
    takana.poll(objects, 0.1)
  end
  return done()
end

-- Steps a supervisor until done() says so or `seconds` (default 60) pass;
-- returns done()'s last answer. A bound in time, not in steps: a step
-- returns early on any event, and a TCG guest is ten times slower.
function H.step_until(sup, done, seconds)
  local uv = require "luv"
  local deadline = uv.hrtime() + (seconds or 60) * 1e9
  repeat
    assert(sup:step(0.05) ~= nil)
    local r = done()
    if r then return r end
  until uv.hrtime() > deadline
  return done()
end

-- A fixture prints "ready" just before it blocks, so for a moment after
-- H.fixture returns it may still be running: wait (bounded) until /proc
-- shows the wanted state letter. Returns the last state seen.
function H.wait_state(pid, want)
  local state
  for _ = 1, 200 do
    local text = H.read("/proc/" .. pid .. "/stat")
    if not text then return nil end
    local _, f = H.stat_fields(text)
    state = f[1]
    if state == want then return state end
    H.sleep(0.01)
  end
  return state
end

-- Counted in-process: `ls` through popen raced the parent, which may not
-- yet have closed the pipe's other end when ls reads the table (seen under
-- load). luv's scandir holds one directory fd while it reads, every time.
function H.count_fds()
  local uv = require "luv"
  local req = assert(uv.fs_scandir("/proc/" .. H.pid .. "/fd"))
  local n = 0
  while uv.fs_scandir_next(req) do n = n + 1 end
  return n
end

-- Whether descriptor fd is open in this process.
function H.fd_open(fd)
  return require("luv").fs_readlink("/proc/" .. H.pid .. "/fd/" .. fd) ~= nil
end

-- A snapshot from a BPF tier, or nil and the reason when this kernel or
-- user cannot have one: a kernel too old for the tier, no BTF, no
-- privilege, a BPF=0 build, a foreign pid namespace. Any other failure
-- raises: a tier the kernel offers and takana does not load is a defect,
-- not a pending spec (Debian 6.1's verifier once refused iter that way).
function H.bpf_tier(name)
  local snap, why = require("takana").snapshot { backend = name }
  if snap then return snap end
  for _, excuse in ipairs { "too old", "no kernel BTF", "EPERM", "built without BPF", "initial pid namespace" } do
    if why:find(excuse, 1, true) then return nil, why end
  end
  error(why, 2)
end

-- The snapshot backends that work here, best first, as the core lists them:
-- those that load (BPF tiers) where they work, and the others ("proc",
-- always last) always.
function H.snapshot_backends()
  local core = require "takana.core"
  local list = {}
  for _, name in ipairs(core.snapshot_backends) do
    if not core.bpf_info(name) or H.bpf_tier(name) then list[#list + 1] = name end
  end
  return list
end

-- This process's RLIMIT_NOFILE, soft and hard (/proc/self/limits).
function H.nofile()
  local soft, hard = H.read("/proc/self/limits"):match("Max open files%s+(%d+)%s+(%d+)")
  return tonumber(soft), tonumber(hard)
end

function H.free_fds()
  return H.nofile() - H.count_fds()
end

-- Raises the soft descriptor limit toward the hard limit so `want` more
-- fit (a login's soft limit is 1,024); returns a function that restores it.
function H.raise_nofile(want)
  local soft, hard = H.nofile()
  local target = math.min(hard, H.count_fds() + want)
  if target <= soft then return function() end end
  assert(os.execute(("prlimit --pid %d --nofile=%d:%d"):format(H.pid, target, hard)))
  return function()
    os.execute(("prlimit --pid %d --nofile=%d:%d"):format(H.pid, soft, hard))
  end
end

function H.boottime_ns()
  -- /proc/uptime is CLOCK_BOOTTIME in centiseconds.
  local up = H.read("/proc/uptime"):match("^(%S+)")
  return math.floor(tonumber(up) * 1e9)
end

-- Runs a shell command; returns its exit code and output.
function H.run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local _, _, code = p:close()
  return code, out
end

-- The cgroup2 mount point, from mountinfo (/sys/fs/cgroup or .../unified).
function H.cgroup2_mount()
  for line in io.lines("/proc/self/mountinfo") do
    local mnt, fstype = line:match("^%S+ %S+ %S+ %S+ (%S+) .- %- (%S+)")
    if fstype == "cgroup2" then return mnt end
  end
end

-- A fresh takana-test-<random> directory on the cgroup2 hierarchy (root
-- only), removed by H.cgroup_cleanup.
function H.test_cgroup_path()
  local mnt = H.cgroup2_mount()
  if not mnt or not H.is_root() then return nil end
  local name = ("takana-test-%d-%d"):format(H.pid, math.random(1e9))
  local path = mnt .. "/" .. name
  assert(os.execute("mkdir " .. path))
  return path, name
end

function H.cgroup_cleanup(path)
  -- Whatever a failed spec left inside is ours: kill it, then remove the
  -- directories children first.
  local q = H.shell_quote(path)
  os.execute("echo 1 > " .. q .. "/cgroup.kill 2>/dev/null; " ..
             "for i in 1 2 3 4 5 6 7 8 9 10; do grep -qs 'populated 1' " .. q .. "/cgroup.events || break; sleep 0.1; done; " ..
             "find " .. q .. " -depth -type d -exec rmdir {} + 2>/dev/null")
end

-- An events stream of types (default fork and exec), or nil and why this
-- host or user cannot have it; any other failure raises.
function H.open_events(backend, types)
  local t = { backend = backend }
  for i, v in ipairs(types or { "fork", "exec" }) do t[i] = v end
  local ev, why = require("takana").events(t)
  if ev then return ev end
  for _, excuse in ipairs { "EPERM", "too old", "no kernel BTF", "built without BPF", "namespace" } do
    if why:find(excuse, 1, true) then return nil, why end
  end
  error(why, 2)
end

return H
