-- Run by busted before any spec file (.busted: helper). Busted unloads the
-- modules a spec file required once the file ends, and luv does not
-- survive being opened a second time in one Lua state (its default loop is
-- re-created under live handles: a segfault in uv_poll_init). Loaded here,
-- before the first file, it stays loaded once.
pcall(require, "luv")
