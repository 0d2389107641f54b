-- luacheck (lua-check): `make lint`.
std = "lua54"
max_line_length = 140
files["spec"] = { std = "+busted" }
-- luv's worker function runs in its own Lua state: its globals are that state's.
files["spec/05-bpf_snapshot_spec.lua"] = { globals = { "package" } }
exclude_files = { "tree", ".output", "doc" }
