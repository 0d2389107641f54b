-- What bench/ex_*.lua share: starting an example from this tree, bounded
-- herds in a cgroup of their own, another process's CPU time, and the row
-- format bench/examples.lua collects.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"

local X = {}
local ROOT = assert(io.popen("pwd")):read("l")

-- examples/NAME.lua with args (and spawn options in opts), as a child that
-- dies with this bench.
function X.example(name, args, opts)
  local argv = { "lua5.4", "examples/" .. name .. ".lua", table.unpack(args) }
  for k, v in pairs(opts or {}) do argv[k] = v end
  argv.pdeathsig = "KILL"
  argv.env = { add = { LUA_PATH = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;", LUA_CPATH = ROOT .. "/?.so;;" } }
  return assert(takana.spawn(argv))
end

-- CPU time (ns) of every thread of pid so far: schedstat's first field,
-- summed (exact, unlike stat's 10 ms ticks).
function X.cpu_ns(pid)
  local f = assert(io.popen("cat /proc/" .. pid .. "/task/*/schedstat 2>/dev/null"))
  local ns = 0
  for line in f:lines() do ns = ns + tonumber(line:match("^%d+")) end
  f:close()
  return ns
end

-- A takana-test-* cgroup of this bench, or nil and why.
function X.cgroup()
  local cg, err = takana.cgroup("/")
  if not cg then return nil, err end
  local sub, merr = cg:mkdir(("takana-test-bench-%d"):format(math.random(1e9)))
  cg:close()
  return sub, merr
end

function X.remove(cg)
  cg:kill { wait = 10 }
  cg:remove()
  cg:close()
end

-- n idle fixture processes (spec/fixture --herd: each dies with its parent,
-- and all after `life` seconds), in cgroup cg. Returns its stop().
function X.herd(n, cg, life)
  local h = assert(takana.spawn { "./spec/fixture", "--herd", tostring(n), "--life", tostring(life or 600),
    stdout = "pipe", cgroup = cg, pdeathsig = "KILL" })
  assert(assert(h.stdout:read_line(120)):match("^ready"), "herd did not start")
  return function()
    h:signal("KILL")
    h:wait()
    h:close()
    assert(cg:wait_empty(30))   -- its children die by PDEATHSIG, asynchronously
  end
end

-- min and median of a list of numbers
function X.stats(t)
  table.sort(t)
  return t[1], t[(#t + 1) // 2]
end

-- One row of the driver's table: example, measure, takana's value, the
-- counterpart's (and its name), as "row<TAB>..." on stdout.
function X.row(example, measure, ours, counterpart, theirs)
  print(table.concat({ "row", example, measure, ours, counterpart, theirs }, "\t"))
  io.stdout:flush()
end

return X
