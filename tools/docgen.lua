-- tools/docgen.lua: doc/reference.md's tables and the LDoc lists that list names
-- (cg:stat()'s layout, the service options, the exit record) are written
-- from the schemas the module exports, never by hand, so they cannot drift
-- (luv's docs.lua -> docgen.lua is the model).
--
-- A generated block sits between two marker lines, in any file below:
--   <!-- schema:NAME -->
--   <!-- /schema:NAME -->
-- Whatever precedes the opening marker on its line ("-- ", " * ") prefixes
-- each generated line, so a block lives in a Lua or C comment as well as
-- in Markdown. In a .md file a block is a table; elsewhere a list, which
-- LDoc's Markdown renders.
--
--   make docgen                  rewrite the blocks in place
--   lua5.4 tools/docgen.lua --check
--                                exit 1 naming each block out of date
-- (run from the top of the tree with ./lua and ./ on the module paths, as
-- make sets them). spec/89-doc_spec.lua runs the check.
local core = require "takana.core"
local supervisor = require "takana.supervisor"

local M = {}

M.files = { "doc/reference.md", "csrc/lua/lua_cgroup.c", "csrc/lua/lua_pidfd.c", "lua/takana/supervisor/service.lua" }

local function code(s) return "`" .. s .. "`" end

-- What each kind of cg:stat() file reads as (lua_cgroup.c stat_file_push).
local stat_kinds = {
  kv = "a table of its `key value` lines, integers (`*_usec` keys as `*_ns`, in ns)",
  value = 'an integer, or `"max"`',
  psi = "`{some = {avg10, avg60, avg300, total_ns}, full = {...}}`",
  events = "its `key value` lines; `populated` and `frozen` booleans",
}

-- Each schema: its column heads and its rows, each row a list of cells
-- (Markdown). The first cell names the row.
M.schemas = {
  ["cgroup-stat"] = {
    head = { "`cg:stat()`", "file", "value" },
    rows = function()
      local rows = {}
      for _, r in ipairs(core.cgroup_stat) do
        local name = r.key and (r.section .. "." .. r.key) or r.section
        rows[#rows + 1] = { code(name), code(r.file) .. (r.anchor and " (the section's anchor)" or ""),
          stat_kinds[r.kind] }
      end
      return rows
    end,
  },
  ["service-options"] = {
    head = { "option", "type", "on reload", "meaning" },
    -- (in a list, "on reload" follows the meaning, in parentheses)
    trailing = { [3] = true },
    rows = function()
      local rows = {}
      for _, o in ipairs(supervisor.service_options) do
        rows[#rows + 1] = { code(o.name), (o.type:gsub("|", " or ")), o.reload or "", o.doc }
      end
      return rows
    end,
  },
  ["wait-record"] = {
    head = { "field", "meaning" },
    rows = function()
      local rows = {}
      for _, f in ipairs(core.exit_fields) do rows[#rows + 1] = { code(f.name), f.doc } end
      return rows
    end,
  },
  ["exit-record"] = {
    head = { "field", "in `ctl status`", "meaning" },
    rows = function()
      local rows = {}
      for _, f in ipairs(supervisor.exit_record) do
        rows[#rows + 1] = { code(f.name), f.status and "yes" or "", f.doc }
      end
      return rows
    end,
  },
}

local function table_lines(schema)
  local function row(cells)
    return "| " .. table.concat(cells, " | "):gsub("|  |", "| |") .. " |"
  end
  local lines = { row(schema.head), "|" .. ("---|"):rep(#schema.head) }
  for _, cells in ipairs(schema.rows()) do
    local esc = {}
    for i, c in ipairs(cells) do esc[i] = (c:gsub("|", "\\|")) end
    lines[#lines + 1] = row(esc)
  end
  return lines
end

local function list_lines(schema)
  local lines = {}
  for _, cells in ipairs(schema.rows()) do
    local rest, tail = {}, ""
    for i = 2, #cells do
      if cells[i] == "" then -- luacheck: ignore 542
      elseif schema.trailing and schema.trailing[i] then
        tail = tail .. " (" .. schema.head[i] .. ": " .. cells[i] .. ")"
      else
        rest[#rest + 1] = schema.head[i]:gsub("`", "") == "type" and ("(" .. cells[i] .. ")") or cells[i]
      end
    end
    -- wrapped to fit a source line, continued under the item
    local line = "-"
    for word in ("- " .. cells[1] .. " " .. table.concat(rest, ": ") .. tail):gmatch("%S+", 2) do
      if #line + 1 + #word > 96 then
        lines[#lines + 1] = line
        line = " "
      end
      line = line .. " " .. word
    end
    lines[#lines + 1] = line
  end
  return lines
end

-- The text of file `path` with every block regenerated, and the names of
-- the blocks that changed. Raises on an unknown name or an unclosed block.
function M.render(path, text)
  local out, changed = {}, {}
  local lines = {}
  for line in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local i = 1
  while i <= #lines do
    local line = lines[i]
    out[#out + 1] = line
    local prefix, name = line:match("^(.-)<!%-%- schema:([%w_-]+) %-%->%s*$")
    if name then
      local schema = assert(M.schemas[name], path .. ":" .. i .. ": unknown schema '" .. name .. "'")
      local close = prefix .. "<!-- /schema:" .. name .. " -->"
      local j = i + 1
      while j <= #lines and lines[j] ~= close do j = j + 1 end
      assert(j <= #lines, path .. ":" .. i .. ": no closing " .. close)
      local gen = path:match("%.md$") and table_lines(schema) or list_lines(schema)
      local old = table.concat(lines, "\n", i + 1, j - 1)
      for k, g in ipairs(gen) do gen[k] = (prefix .. g):gsub("%s+$", "") end
      if table.concat(gen, "\n") ~= old then changed[#changed + 1] = name end
      table.move(gen, 1, #gen, #out + 1, out)
      out[#out + 1] = close
      i = j + 1
    else
      i = i + 1
    end
  end
  return table.concat(out, "\n") .. "\n", changed
end

-- Every file's stale blocks as "path: name"; with write, rewritten.
function M.run(write)
  local stale = {}
  for _, path in ipairs(M.files) do
    local f = assert(io.open(path, "rb"))
    local text = f:read("a")
    f:close()
    local new, changed = M.render(path, text)
    for _, name in ipairs(changed) do stale[#stale + 1] = path .. ": " .. name end
    if write and new ~= text then
      f = assert(io.open(path, "wb"))
      f:write(new)
      f:close()
    end
  end
  return stale
end

if not pcall(debug.getlocal, 4, 1) then
  local check = arg[1] == "--check"
  local stale = M.run(not check)
  for _, s in ipairs(stale) do io.stderr:write((check and "out of date: " or "regenerated: "), s, "\n") end
  os.exit(check and #stale > 0 and 1 or 0)
end

return M
