-- examples/execsnoop.lua (bpf and connector backends) against libbpf-tools'
-- execsnoop: a burst of BURST short commands (`/bin/true MARK i`, run one
-- after the other by a shell loop), how many each tool printed, and the CPU
-- it used (its threads' schedstat, start-up excluded). Seen means printed
-- with its arguments: the connector backend reads them from /proc after the
-- exec, and a /bin/true gone by then is printed "[argv lost]", not counted. Then start-up: from
-- spawning the tool to its first line for a command run every 5 ms. The
-- tools write to files; execsnoop runs in a private mount namespace with
-- tracefs mounted (it attaches to syscall tracepoints) and is stopped with
-- SIGINT, which flushes its buffered output. Rounds alternate the order.
-- BURST=5000 ROUNDS=3.
package.path = "./bench/?.lua;" .. package.path
local X = require "exlib"   -- first: it points package.path at this tree
local takana = require "takana"

if not os.execute("command -v execsnoop >/dev/null") then
  print("ex_execsnoop skipped: no execsnoop (apt-get install libbpf-tools)")
  os.exit(0)
end
local BURST = tonumber(os.getenv("BURST") or "") or 5000
local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 3
local dir = (assert(io.popen("mktemp -d /tmp/takana-bench-execsnoop.XXXXXX")):read("l"))

local function starter(cmd)
  return function(out, buffered)
    local f = assert(io.open(out, "w"))
    local p = assert(takana.spawn { "unshare", "-m", "sh", "-c",
      "mount -t tracefs none /sys/kernel/tracing && exec " .. (buffered and "" or "stdbuf -oL ") .. cmd,
      stdout = f, stderr = "null", pdeathsig = "KILL" })
    f:close()
    return p
  end
end
local function example(backend)
  return function(out)
    local f = assert(io.open(out, "w"))
    local p = X.example("execsnoop", { "--backend", backend }, { stdout = f, stderr = "null" })
    f:close()
    return p
  end
end
local tools = {
  { name = "takana examples/execsnoop.lua, bpf", start = example("bpf") },
  { name = "takana examples/execsnoop.lua, connector", start = example("connector") },
  { name = "libbpf-tools execsnoop", start = starter("execsnoop") },
}

-- Lines naming `/bin/true MARK <n>` (MARK is [%w_]: no magic characters).
local function count(path, mark)
  local n = 0
  for line in io.lines(path) do
    if line:find("/bin/true " .. mark .. " %d") then n = n + 1 end
  end
  return n
end

-- Seconds from spawning the tool to its line for a command it saw.
local function startup(tool, r)
  local out, mark = dir .. "/startup", ("tkstart%d_%d"):format(r, math.random(1e9))
  local t0 = takana.now()
  local p = tool.start(out)
  local t
  for _ = 1, 2000 do
    os.execute("/bin/true " .. mark .. " 0")
    if count(out, mark) > 0 then
      t = takana.now() - t0
      break
    end
    takana.poll({}, 0.005)
  end
  p:signal("INT")
  p:wait()
  p:close()
  return assert(t, tool.name .. " printed nothing in 10 s")
end

local function burst(tool, r)
  local out, mark = dir .. "/burst", ("tkburst%d_%d"):format(r, math.random(1e9))
  local p = tool.start(out, true)
  local ready = "tkready" .. math.random(1e9)
  repeat
    os.execute("/bin/true " .. ready .. " 0")
    takana.poll({}, 0.05)
  until count(out, ready) > 0 or not p:alive()
  local c0 = X.cpu_ns(p.pid)
  os.execute(("sh -c 'i=0; while [ $i -lt %d ]; do /bin/true %s $i; i=$((i+1)); done'"):format(BURST, mark))
  takana.poll({}, 1)   -- the last events drain
  local cpu = X.cpu_ns(p.pid) - c0
  p:signal("INT")
  p:wait()
  p:close()
  return count(out, mark), cpu / 1e6
end

local res = {}
for _, t in ipairs(tools) do res[t.name] = { seen = {}, cpu = {}, start = {} } end
for r = 1, ROUNDS do
  local first, last, step = 1, #tools, 1
  if r % 2 == 0 then first, last, step = #tools, 1, -1 end
  for i = first, last, step do
    local t, q = tools[i], res[tools[i].name]
    local seen, cpu = burst(t, r)
    table.insert(q.seen, seen)
    table.insert(q.cpu, cpu)
    table.insert(q.start, startup(t, r) * 1e3)
  end
end
print(("== execsnoop: a burst of %d execs; min / median of %d rounds =="):format(BURST, ROUNDS))
for _, t in ipairs(tools) do
  local q = res[t.name]
  local s_min, s_med = X.stats(q.seen)
  local c_min, c_med = X.stats(q.cpu)
  local u_min, u_med = X.stats(q.start)
  print(("  %-42s seen %5d / %5d   CPU %7.1f / %7.1f ms   start-up %6.1f / %6.1f ms"):format(
    t.name, s_min, s_med, c_min, c_med, u_min, u_med))
  res[t.name].line = { ("%d/%d"):format(s_min, BURST), ("%.1f ms"):format(c_min), ("%.1f ms"):format(u_min) }
end
local them = res[tools[3].name].line
for k = 1, 2 do
  local us = res[tools[k].name].line
  local how = tools[k].name:match(", (%w+)$")
  X.row("execsnoop", "execs seen (min), " .. how, us[1], "libbpf-tools execsnoop", them[1])
  X.row("execsnoop", "CPU per burst, " .. how, us[2], "libbpf-tools execsnoop", them[2])
  X.row("execsnoop", "start-up to first event, " .. how, us[3], "libbpf-tools execsnoop", them[3])
end
os.execute("rm -rf " .. dir)
