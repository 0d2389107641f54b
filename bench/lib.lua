-- Side-by-side measurement: every contender runs once per round, the order
-- alternates between rounds (A->B, then B->A), and the table reports min and
-- median per contender plus ratios computed from this one run.
local cb = require "takana_bench"

local L = {}
L.now_ns = cb.now_ns

-- cases: array of {name=, run=function() return count, ns_or_nil end}.
-- A case that returns no ns is timed here around the call.
function L.measure(cases, rounds)
  local samples, counts = {}, {}
  for _, c in ipairs(cases) do samples[c.name] = {} end
  for r = 1, rounds do
    local first, last, step = 1, #cases, 1
    if r % 2 == 0 then first, last, step = #cases, 1, -1 end
    for i = first, last, step do
      local c = cases[i]
      collectgarbage("step", 0)
      local t0 = cb.now_ns()
      local count, ns = c.run()
      ns = ns or (cb.now_ns() - t0)
      table.insert(samples[c.name], ns)
      counts[c.name] = count
    end
  end
  local result = {}
  for _, c in ipairs(cases) do
    local s = samples[c.name]
    table.sort(s)
    result[c.name] = { min = s[1], median = s[(#s + 1) // 2], count = counts[c.name] }
  end
  return result
end

function L.print_table(title, cases, result, per)
  print(("== %s =="):format(title))
  for _, c in ipairs(cases) do
    local r = result[c.name]
    local n = per or r.count or 1
    print(("  %-52s min %10.1f us  median %10.1f us  %8.3f us/%s"):format(
      c.name, r.min / 1e3, r.median / 1e3, r.min / 1e3 / math.max(n, 1), per and "op" or "process"))
  end
end

-- Prints "label: a/b = x (target ...)" from the mins; returns the ratio.
function L.ratio(result, a, b, label, target)
  local x = result[a].min / result[b].min
  print(("  %-60s %7.3f   target %s  %s"):format(label, x, target.text,
    target.ok(x) and "met" or "MISSED"))
  return x
end

function L.herd(n, life)
  local f = assert(io.popen(("exec ./spec/fixture --herd %d --life %d"):format(n, life or 300)))
  local line = f:read("l")
  local pid = tonumber(line:match("^ready (%d+)"))
  return { pid = pid, stop = function()
    os.execute("kill -KILL " .. pid)
    f:close()
    -- The children die by PDEATHSIG, asynchronously: wait (bounded) until
    -- they are reaped so the next measurement sees its own count.
    for _ = 1, 100 do
      local p = io.popen("grep -l '^PPid:[[:space:]]*1$' /proc/[0-9]*/status 2>/dev/null | wc -l")
      local orphans = tonumber(p:read("a"))
      p:close()
      if orphans < n / 100 + 10 then break end
      os.execute("sleep 0.1")
    end
  end }
end

return L
