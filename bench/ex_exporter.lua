-- examples/exporter.lua against prometheus-process-exporter: CPU per scrape
-- (the server's own, from its threads' schedstat) with the host's processes
-- plus a herd of 0, 1,000 and 10,000 idle ones. Equivalent groups: every
-- user process grouped by comm (process-exporter: {{.Comm}}, cmdline '.+',
-- and -threads=false -gather-smaps=false, the closest to what the example
-- reads). Both listen on 127.0.0.1; both answers must count the herd.
-- Rounds alternate which server is scraped first. HERDS="0 1000" ROUNDS=3.
package.path = "./bench/?.lua;" .. package.path
local X = require "exlib"   -- first: it points package.path at this tree
local takana = require "takana"

local PE = "/usr/bin/prometheus-process-exporter"
if not os.execute("test -x " .. PE) then
  print("ex_exporter skipped: no " .. PE .. " (apt-get install prometheus-process-exporter)")
  os.exit(0)
end
local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 3
local HERDS = {}
for n in (os.getenv("HERDS") or "0 1000 10000"):gmatch("%d+") do HERDS[#HERDS + 1] = tonumber(n) end
local dir = (assert(io.popen("mktemp -d /tmp/takana-bench-exporter.XXXXXX")):read("l"))
local conf = assert(io.open(dir .. "/pe.yml", "w"))
conf:write("process_names:\n  - name: '{{.Comm}}'\n    cmdline: ['.+']\n")
conf:close()

local ours = X.example("exporter", { "--listen", "127.0.0.1:0" }, { stderr = "pipe" })
local our_port = assert(ours.stderr:read_line(10)):match(":(%d+)/metrics")
local pe_port = 20000 + math.random(20000)
local theirs = assert(takana.spawn { PE, "-config.path", dir .. "/pe.yml", "-threads=false", "-gather-smaps=false",
  "-web.listen-address", "127.0.0.1:" .. pe_port, stdout = "null", stderr = "null", pdeathsig = "KILL" })

local function scrape(port)
  local f = assert(io.popen("curl --noproxy '*' -sf http://127.0.0.1:" .. port .. "/metrics"))
  local text = f:read("a")
  f:close()
  return text
end
local function fixtures(text)
  return tonumber(text:match('namedprocess_namegroup_num_procs{groupname="fixture"} (%d+)')) or 0
end
for _ = 1, 50 do   -- process-exporter needs a moment to listen
  if scrape(pe_port) ~= "" then break end
  takana.poll({}, 0.1)
end

local servers = { { name = "takana examples/exporter.lua", pid = ours.pid, port = our_port },
                  { name = "prometheus-process-exporter", pid = theirs.pid, port = pe_port } }
local cg = assert(X.cgroup())
print("== exporter: CPU per scrape (ms), min / median of " .. ROUNDS .. " rounds ==")
for _, n in ipairs(HERDS) do
  local stop = n > 0 and X.herd(n, cg) or function() end
  local scrapes = n >= 10000 and 2 or 5
  local ms = {}
  for _, s in ipairs(servers) do
    ms[s.name] = {}
    local got = fixtures(scrape(s.port))   -- warm-up, and the herd is seen
    assert(got >= n, ("%s counts %d fixtures, not %d"):format(s.name, got, n))
  end
  for r = 1, ROUNDS do
    local order = r % 2 == 1 and { 1, 2 } or { 2, 1 }
    for _, i in ipairs(order) do
      local s = servers[i]
      local c0 = X.cpu_ns(s.pid)
      for _ = 1, scrapes do scrape(s.port) end
      table.insert(ms[s.name], (X.cpu_ns(s.pid) - c0) / scrapes / 1e6)
    end
  end
  local a_min, a_med = X.stats(ms[servers[1].name])
  local b_min, b_med = X.stats(ms[servers[2].name])
  print(("  +%-6d processes  takana %8.2f / %8.2f   process-exporter %8.2f / %8.2f   ratio %.3f"):format(
    n, a_min, a_med, b_min, b_med, a_min / b_min))
  X.row("exporter", ("CPU per scrape, +%d processes"):format(n), ("%.2f ms"):format(a_min),
    "prometheus-process-exporter", ("%.2f ms"):format(b_min))
  stop()
end
X.remove(cg)
ours:signal("TERM")
theirs:signal("TERM")
ours:wait()
theirs:wait()
os.execute("rm -rf " .. dir)
