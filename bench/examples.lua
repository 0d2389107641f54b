-- make bench: each example beside the tool it replaces, in one run. Runs
-- every bench/ex_*.lua in name order (each a child lua5.4 from this tree,
-- printing its own table), then one table of what they measured: each
-- writes its rows as "row<TAB>example<TAB>measure<TAB>takana<TAB>
-- counterpart<TAB>counterpart's value" on stdout (bench/exlib.lua X.row).
-- `lua5.4 bench/examples.lua [NAME...]` runs only bench/ex_NAME.lua.
local only = {}
for _, a in ipairs(arg) do only[a] = true end
local files = {}
for f in assert(io.popen("ls bench/ex_*.lua")):lines() do
  if not next(only) or only[f:match("ex_(.-)%.lua$")] then files[#files + 1] = f end
end
local rows, failed = {}, {}
for _, f in ipairs(files) do
  print("-- " .. f)
  local p = assert(io.popen("lua5.4 " .. f .. " 2>&1"))
  for line in p:lines() do
    if line:match("^row\t") then
      local r = {}
      for field in line:gmatch("\t([^\t]*)") do r[#r + 1] = field end
      rows[#rows + 1] = r
    else
      print(line)
    end
  end
  if not p:close() then failed[#failed + 1] = f end
end
local width = { 0, 0, 0, 0, 0 }
local head = { "example", "measure", "takana", "counterpart", "its value" }
for _, r in ipairs({ head, table.unpack(rows) }) do
  for i = 1, 5 do width[i] = math.max(width[i], #(r[i] or "")) end
end
print()
for n, r in ipairs({ head, table.unpack(rows) }) do
  local cells = {}
  for i = 1, 5 do cells[i] = ("%-" .. width[i] .. "s"):format(r[i] or "") end
  print("| " .. table.concat(cells, " | ") .. " |")
  if n == 1 then
    for i = 1, 5 do cells[i] = ("-"):rep(width[i]) end
    print("|-" .. table.concat(cells, "-|-") .. "-|")
  end
end
if #failed > 0 then
  print("failed: " .. table.concat(failed, " "))
  os.exit(1)
end
