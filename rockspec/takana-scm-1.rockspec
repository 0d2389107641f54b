rockspec_format = "3.0"
package = "takana"
version = "scm-1"
source = {
   url = "git+file:///work/main",
   branch = "main",
}
description = {
   summary = "See and steer Linux processes through the cheapest kernel interface",
   detailed = [[
      Process snapshots (BPF task iterators or /proc), pidfds, spawn into
      cgroups, cgroup v2 accounting and limits, and process events, for Lua 5.4.
   ]],
   homepage = "https://example.invalid/takana",
   license = "MIT",
}
supported_platforms = { "linux" }
-- The BPF snapshot tiers link libbpf (>= 1.0); build with BPF=0 to go
-- without it (and without clang and bpftool), /proc then being the backend.
external_dependencies = {
   LIBBPF = {
      header = "bpf/libbpf.h",
      library = "bpf",
   },
}
dependencies = {
   "lua >= 5.4",
}
build = {
   type = "make",
   build_variables = {
      CFLAGS = "$(CFLAGS)",
      LIBFLAG = "$(LIBFLAG)",
      LUA = "$(LUA)",
      LUA_INCDIR = "$(LUA_INCDIR)",
      LUA_VERSION = "5.4",
      LIBBPF_INCDIR = "$(LIBBPF_INCDIR)",
      LIBBPF_LIBDIR = "$(LIBBPF_LIBDIR)",
   },
   -- make install puts examples/*.lua beside the modules
   -- (<tree>/share/lua/5.4/takana/examples), where `takana example NAME` runs them.
   install_variables = {
      LUA = "$(LUA)",
      INST_LIBDIR = "$(LIBDIR)",
      INST_LUADIR = "$(LUADIR)",
      INST_BINDIR = "$(BINDIR)",
   },
}
-- bin/takana finds its own tree (see the script): luarocks' wrapper would
-- load luarocks.loader first, which costs more than a short command itself.
-- `make install` names LUA on the script's first line and installs the
-- modules precompiled by it (see the Makefile).
deploy = {
   wrap_bin_scripts = false,
}
test = {
   type = "busted",
}
