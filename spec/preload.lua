-- Run by busted before any spec file (.busted: helper). Busted unloads the
-- modules a spec file required once the file ends, and luv does not
-- survive being opened a second time in one Lua state (its default loop is
-- re-created under live handles: a segfault in uv_poll_init). Loaded here,
-- before the first file, it stays loaded once.
pcall(require, "luv")

-- make test-asan preloads the sanitizers into lua5.4 only: children the
-- specs start are not instrumented and must not inherit them; the ones
-- that load takana get them back through helpers' H.lua.
if os.getenv("TAKANA_SANITIZED") then
  package.cpath = "./spec/?.so;" .. package.cpath
  require("envtool").unsetenv("LD_PRELOAD")
end

-- make test-gc: collect all the time, in generational mode, to shake out
-- userdata lifetime bugs (a view outliving its snapshot, a handle whose
-- fd is reused), as luv's test suite does.
if os.getenv("TAKANA_GC_STRESS") then
  collectgarbage("generational")
  debug.sethook(function() collectgarbage("step", 0) end, "", 1000)
end
