-- make bench: the cold-start table (issue 16). Each row runs next to its
-- reference in the same rounds, the order alternating every round; min and
-- median of each, and the ratio of the mins.
--   1. the first kfunc snapshot in a fresh process (lua5.4 started, module
--      loaded, tier loaded, one snapshot) against `ps -e -o ...`, and the
--      same through libbpf's skeleton (TAKANA_BPF_LOADER=libbpf: the kernel
--      BTF read in the process) for the before/after;
--   2. `takana ps` against `ps -e -o pid,ppid,uid,stat,nlwp,rss,time,comm`;
--   3. a bpf event stream's open + close while another is open, against
--      the same for the only stream (which loads the object);
--   4. probe() from what it learned, against probe{fresh = true}.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local core = require "takana.core"
local L = require "lib"

local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 21
local env = {
  LUA_PATH = "./lua/?.lua;./lua/?/init.lua;;",
  LUA_CPATH = "./?.so;;",
  PATH = os.getenv("PATH") or "/usr/bin:/bin",
}

local function with(extra)
  local e = {}
  for k, v in pairs(env) do e[k] = v end
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

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

local PS = { "ps", "-e", "-o", "pid,ppid,uid,stat,nlwp,rss,time,comm" }
local FIRST_KFUNC = "local t = require 'takana'; assert(t.snapshot { backend = 'kfunc' })"
local FIRST_CMDLINE = "local t = require 'takana'; " ..
  "assert(assert(t.snapshot { backend = 'kfunc', fields = { 'pid', 'comm', 'cmdline' } }).cmdline_from == 'bpf')"

local function row(title, cases, a, b, target, ok)
  local res = L.measure(cases, ROUNDS)
  L.print_table(title, cases, res, 1)
  L.ratio(res, a, b, ("%s / %s"):format(a, b), { text = target, ok = ok })
  return res
end

print(("== cold start: %d rounds each, order alternating ==\n"):format(ROUNDS))

if takana.snapshot { backend = "kfunc" } then
  local cases = {
    { name = "first kfunc snapshot, fresh lua5.4", run = run({ "lua5.4", "-e", FIRST_KFUNC }) },
    { name = "  the same, libbpf skeleton (BTF read)",
      run = run({ "lua5.4", "-e", FIRST_KFUNC }, with { TAKANA_BPF_LOADER = "libbpf" }) },
    { name = "  lua5.4 + require 'takana' alone", run = run({ "lua5.4", "-e", "require 'takana'" }) },
    { name = "ps -e -o ...", run = run(PS) },
    { name = "  first kfunc snapshot with cmdline (argv program)", run = run({ "lua5.4", "-e", FIRST_CMDLINE }) },
  }
  local res = row("first kfunc snapshot in a fresh process", cases,
    cases[1].name, cases[4].name, "(info; first snapshot <= 15 ms)", function() return true end)
  print(("  %-60s %7.1f ms   target <= 15 ms  %s"):format("first kfunc snapshot, min wall",
    res[cases[1].name].min / 1e6, res[cases[1].name].min <= 15e6 and "met" or "MISSED"))
  L.ratio(res, cases[1].name, cases[2].name, "light skeleton / libbpf skeleton",
    { text = "(info)", ok = function() return true end })
else
  print("note: no kfunc tier here; the first-snapshot row is skipped")
end
print()

row("takana ps at the natural count", {
  { name = "takana ps", run = run({ "lua5.4", "bin/takana", "ps" }) },
  { name = "ps -e -o pid,ppid,uid,stat,nlwp,rss,time,comm", run = run(PS) },
}, "takana ps", "ps -e -o pid,ppid,uid,stat,nlwp,rss,time,comm", "<= 1.0", function(x) return x <= 1.0 end)
print()

row("takana ps with the command line, natural count", {
  { name = "takana ps -o pid,cmd", run = run({ "lua5.4", "bin/takana", "ps", "-o", "pid,cmd" }) },
  { name = "ps -e -o pid,args", run = run({ "ps", "-e", "-o", "pid,args" }) },
}, "takana ps -o pid,cmd", "ps -e -o pid,args", "(info)", function() return true end)
print()

local anchor = takana.events { backend = "bpf" }
if anchor then
  anchor:close()
  local held
  row("bpf event stream open + close", {
    { name = "2nd stream (one already open)", run = function()
      held = held or assert(takana.events { backend = "bpf" })
      local t0 = L.now_ns()
      assert(takana.events { backend = "bpf" }):close()
      return 1, L.now_ns() - t0
    end },
    { name = "only stream (loads the object)", run = function()
      if held then held:close() held = nil end
      collectgarbage()
      local t0 = L.now_ns()
      assert(takana.events { backend = "bpf" }):close()
      return 1, L.now_ns() - t0
    end },
  }, "2nd stream (one already open)", "only stream (loads the object)", "(info; 2nd <= 1 ms)",
    function() return true end)
  if held then held:close() end
else
  print("note: no bpf event backend here; the stream row is skipped")
end
print()

takana.probe()
row("takana.probe()", {
  { name = "probe() (what it learned)", run = function() takana.probe() return 1 end },
  { name = "probe{fresh = true}", run = function() takana.probe { fresh = true } return 1 end },
}, "probe() (what it learned)", "probe{fresh = true}", "(info; cached <= 5 ms)", function() return true end)
print(("  bpf tiers loaded: kfunc %s, iter %s"):format(tostring(core.bpf_info and core.bpf_info("kfunc").loaded),
  tostring(core.bpf_info and core.bpf_info("iter").loaded)))
