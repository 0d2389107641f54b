-- make bench: cg:stat() of a unit against summing /proc/<pid>/stat for its
-- processes, at 1, 20 and 200 processes, in one run with alternating rounds;
-- cached cgroup paths; and tree:stat() of 10, 100 and 1,000 cgroups against
-- open/stat/close of each, stat on handles kept open, and the floors: a bare
-- C loop of openat+pread+close over the same files (bench/cgroup_floor), and
-- of pread alone on descriptors it keeps (what the tree's kernel side is
-- when its descriptor budget lets it keep them).
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local core = require "takana.core"
local cb = require "takana_bench"
local L = require "lib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 33
local root = assert(takana.cgroup.self())
local name = ("takana-test-bench-%d"):format(math.random(1e9))
local unit, err = root:mkdir(name)
if not unit then
  print("== cgroup bench skipped: " .. err .. " (needs root) ==")
  os.exit(0)
end

-- Plain Lua: what a script writes today for the same sum.
local function lua_sum(pids)
  local sum = 0
  for _, pid in ipairs(pids) do
    local f = io.open("/proc/" .. pid .. "/stat")
    if f then
      local s = f:read("a")
      f:close()
      local u, st = s:match("%) %S+" .. (" %S+"):rep(10) .. " (%d+) (%d+)")
      sum = sum + (tonumber(u) or 0) + (tonumber(st) or 0)
    end
  end
  return sum
end

local kids = {}
local results = {}
local ok, perr = pcall(function()
  for _, n in ipairs { 1, 20, 200 } do
    while #kids < n do kids[#kids + 1] = assert(takana.spawn { "sleep", "600", cgroup = unit }) end
    local pids = unit:procs()
    assert(#pids == n, "unit holds " .. #pids)
    local cases = {
      { name = ("cg:stat() of a unit of %d"):format(n), run = function() unit:stat() return 1 end },
      { name = ("C: sum /proc/<pid>/stat over %d"):format(n), run = function() return cb.sum_stat(pids) end },
      { name = ("plain Lua: sum /proc/<pid>/stat over %d"):format(n), run = function() return lua_sum(pids) end },
    }
    local r = L.measure(cases, ROUNDS)
    L.print_table(("cgroup accounting, %d processes, %d rounds alternating"):format(n, ROUNDS), cases, r, 1)
    results[n] = { stat = r[cases[1].name].min, c = r[cases[2].name].min, lua = r[cases[3].name].min }
  end
end)

-- cgroup.path(id) and snap:cgroup(pid) after the first call (the cache,
-- vouched for by its removal watch), against the first call's resolver
-- (open_by_handle_at, uncached) and against reading /proc/<pid>/cgroup.
local paths = {}
local pok, pathsperr = pcall(function()
  local nested = assert(assert(unit:mkdir("a")):mkdir("b"))
  local id = assert(core.cgroup_id(nested))
  local mount = takana.cgroup.mounts().v2
  local pid = kids[1] and kids[1].pid
  local snap = assert(takana.snapshot { fields = { "pid", "cgroup_id" } })
  assert(takana.cgroup.path(id) == nested.path, "cgroup.path disagrees with handle.path")
  assert(snap:cgroup(pid) == unit.path, "snap:cgroup disagrees with handle.path")
  local K = 1000
  local path = takana.cgroup.path
  local cases = {
    { name = ("cgroup.path(id) cached, x%d"):format(K), run = function()
      for _ = 1, K do path(id) end return K end },
    { name = ("snap:cgroup(pid) cached, x%d"):format(K), run = function()
      for _ = 1, K do snap:cgroup(pid) end return K end },
    { name = ("first call's resolver (open_by_handle_at), x%d"):format(K), run = function()
      for _ = 1, K do core.cgroup_path_by_handle(mount, id) end return K end },
    { name = ("read /proc/<pid>/cgroup, x%d"):format(K), run = function()
      for _ = 1, K do core.proc_cgroup(pid) end return K end },
  }
  local r = L.measure(cases, ROUNDS)
  L.print_table(("cgroup paths, %d rounds alternating"):format(ROUNDS), cases, r, K)
  paths.cached = r[cases[1].name].min / K
  paths.snap = r[cases[2].name].min / K
  paths.handle = r[cases[3].name].min / K
  paths.proc = r[cases[4].name].min / K
  -- The issue's own measure: os.clock over 100,000 calls.
  local t0 = os.clock()
  for _ = 1, 100000 do path(id) end
  paths.clock = (os.clock() - t0) / 100000 * 1e9
  nested:remove()
  assert(nested:close() ~= false)
  local a = assert(takana.cgroup(unit.path .. "/a"))
  a:remove()
end)
for _, k in ipairs(kids) do k:signal("KILL") k:wait() k:close() end
unit:remove()
assert(ok, perr)
assert(pok, pathsperr)

-- tree:stat() of a subtree of n cgroups (the root, groups of ten beneath
-- it, leaves beneath those), a us a cgroup per contender.
local tree_results = {}
local tname = ("takana-test-bench-tree-%d"):format(math.random(1e9))
local troot = assert(root:mkdir(tname))
local mount = takana.cgroup.mounts().v2
local function sh(cmd) assert(os.execute(cmd), cmd) end
local tok, terr = pcall(function()
  local files = {}
  for _, row in ipairs(core.cgroup_stat) do files[#files + 1] = row.file end
  files = table.concat(files, ",")
  local made = { troot.path }
  local function grow(n)
    local batch = {}
    while #made < n do
      local i = #made
      local g = ("%s/g%d"):format(troot.path, (i - 1) // 11)
      local p = (i - 1) % 11 == 0 and g or ("%s/c%d"):format(g, (i - 1) % 11)
      made[#made + 1] = p
      batch[#batch + 1] = mount .. p
      if #batch == 200 then sh("mkdir " .. table.concat(batch, " ")) batch = {} end
    end
    if #batch > 0 then sh("mkdir " .. table.concat(batch, " ")) end
  end
  for _, n in ipairs { 10, 100, 1000 } do
    grow(n)
    local tree = assert(takana.cgroup.tree(troot))
    assert(#tree:paths() == n, "tree holds " .. #tree:paths())
    local dirs = {}
    for i, p in ipairs(made) do dirs[i] = mount .. p end
    local floor_cmd = "./bench/cgroup_floor " .. files .. " " .. table.concat(dirs, " ")
    local kept_cmd = "./bench/cgroup_floor -k " .. files .. " " .. table.concat(dirs, " ")
    local kept = {}
    if n <= 100 then
      for i, p in ipairs(made) do kept[i] = assert(takana.cgroup(p)) end
    end
    local cases = {
      { name = ("tree:stat() of %d cgroups"):format(n), run = function()
        local st = assert(tree:stat())
        assert(st[made[n]]) return n end },
      { name = ("open/stat/close each of %d"):format(n), run = function()
        for _, p in ipairs(made) do
          local cg = assert(takana.cgroup(p))
          assert(cg:stat())
          cg:close()
        end
        return n end },
      { name = ("C floor: pread on kept fds, %d"):format(n), run = function()
        local f = assert(io.popen(kept_cmd))
        local ns = assert(tonumber(f:read("l"):match("^(%d+)")))
        f:close()
        return n, ns end },
      { name = ("C floor: openat+pread+close, %d"):format(n), run = function()
        local f = assert(io.popen(floor_cmd))
        local ns = assert(tonumber(f:read("l"):match("^(%d+)")))
        f:close()
        return n, ns end },
    }
    if n <= 100 then
      table.insert(cases, 3, { name = ("cg:stat() on %d handles kept open"):format(n), run = function()
        for _, cg in ipairs(kept) do assert(cg:stat()) end
        return n end })
    end
    local r = L.measure(cases, ROUNDS)
    L.print_table(("cgroup tree, %d cgroups, %d rounds alternating (us/op: a cgroup)"):format(n, ROUNDS),
      cases, r, n)
    local res = { tree = r[cases[1].name], osc = r[cases[2].name], floor = r[cases[#cases].name],
      kept_floor = r[cases[#cases - 1].name] }
    if n <= 100 then res.kept = r[cases[3].name] end
    tree_results[n] = res
    for _, cg in ipairs(kept) do cg:close() end
    tree:close()
  end
end)
sh(("find %s -mindepth 1 -depth -type d -exec rmdir {} +"):format(mount .. troot.path))
troot:remove()
troot:close()
assert(tok, terr)
local function ratio(x, label, text, good)
  print(("  %-60s %7.3f   target %s  %s"):format(label, x, text, good and "met" or "MISSED"))
end
local flat = results[200].stat / results[1].stat
ratio(flat, "cg:stat at 200 / at 1", "<= 1.2", flat <= 1.2)
local x = results[20].c / results[20].stat
ratio(x, "C /proc sum at 20 / cg:stat", ">= 10", x >= 10)
ratio(results[20].lua / results[20].stat, "plain-Lua /proc sum at 20 / cg:stat", "(info)", true)
print(("  %-60s %7.3f us (os.clock, 100,000 calls)  target <= 1 us  %s"):format("cgroup.path(id) after the first",
  paths.clock / 1e3, paths.clock <= 1000 and "met" or "MISSED"))
ratio(paths.cached / 1e3, "cgroup.path(id) cached, us a call (min)", "<= 1", paths.cached <= 1000)
ratio(paths.snap / 1e3, "snap:cgroup(pid) cached, us a call (min)", "<= 1", paths.snap <= 1000)
ratio(paths.handle / paths.cached, "first call's resolver / cached cgroup.path", "(info)", true)
ratio(paths.proc / paths.cached, "read /proc/<pid>/cgroup / cached cgroup.path", "(info)", true)
for _, n in ipairs { 10, 100, 1000 } do
  local t = tree_results[n]
  local per = t.tree.min / n / 1e3
  ratio(per, ("tree:stat() at %d, us a cgroup (min; median %.1f)"):format(n, t.tree.median / n / 1e3),
    n == 100 and "<= 25" or "(info)", n ~= 100 or per <= 25)
  ratio(t.osc.min / t.tree.min, ("open/stat/close / tree:stat() at %d"):format(n), "(info)", true)
  if t.kept then ratio(t.kept.min / t.tree.min, ("kept handles' stat / tree:stat() at %d"):format(n), "(info)", true) end
  ratio(t.tree.min / t.floor.min, ("tree:stat() / C openat+pread floor at %d"):format(n), "(info)", true)
  ratio(t.tree.min / t.kept_floor.min, ("tree:stat() / C pread-on-kept-fds floor at %d"):format(n), "(info)", true)
end
