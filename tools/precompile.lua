-- tools/precompile.lua OUTDIR lua/takana/X.lua ...: each module as Lua
-- bytecode, at OUTDIR/takana/X.lua, for `make install`. Compiling the
-- sources was most of a short command's time (takana.cli and takana: 1.5
-- ms of `takana ps`; loading their bytecode takes 0.1 ms). Run by the
-- interpreter that will load them (luarocks passes its own): bytecode is
-- only for the Lua version that wrote it, and load() refuses another's.
-- Debug information is kept, so a traceback still names the line, in the
-- module's file named as under any tree: "takana/X.lua:LINE:".
local outdir = assert(arg[1], "usage: precompile.lua OUTDIR FILE...")
for i = 2, #arg do
  local src = arg[i]
  local rel = assert(src:match("^lua/(takana/.+%.lua)$"), src .. ": not under lua/takana/")
  local h = assert(io.open(src, "rb"))
  local fn = assert(load(h:read("a"), "@" .. rel))
  h:close()
  local dir = (outdir .. "/" .. rel):match("^(.*)/")
  assert(os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'"))
  local out = assert(io.open(outdir .. "/" .. rel, "wb"))
  assert(out:write(string.dump(fn)))
  assert(out:close())
end
