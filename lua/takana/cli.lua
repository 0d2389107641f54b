--- The `takana` command: subcommands over the module.
-- Exit codes: 0 success, 1 runtime failure, 2 bad usage.
local takana = require "takana"

local M = {}

local function usage_error(msg)
  io.stderr:write("takana: ", msg, "\n")
  os.exit(2)
end

local function fail(msg)
  io.stderr:write("takana: ", msg, "\n")
  os.exit(1)
end

-- Parses argv against {flag = "bool"|"value"}; returns options and operands.
local function parse_args(args, spec, cmd)
  local opts, rest = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--" then
      table.move(args, i + 1, #args, #rest + 1, rest)
      break
    elseif a:sub(1, 1) == "-" and #a > 1 then
      local name, inline = a:match("^%-%-?([^=]+)=(.*)$")
      name = name or a:match("^%-%-?(.+)$")
      local kind = spec[name]
      if kind == nil then usage_error(cmd .. ": unknown option '" .. a .. "' (see --help)") end
      if kind == "bool" then
        if inline then usage_error(cmd .. ": option '" .. name .. "' takes no value") end
        opts[name] = true
      else
        local v = inline
        if v == nil then
          i = i + 1
          v = args[i]
        end
        if v == nil then usage_error(cmd .. ": option '" .. name .. "' needs a value") end
        opts[name] = v
      end
    else
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  return opts, rest
end

-- Minimal JSON encoder: numbers, booleans, strings (escaped), arrays, objects.
local function json(v)
  local t = type(v)
  if t == "string" then
    return '"' .. v:gsub('[%c"\\\128-\255]', function(c)
      local map = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }
      if map[c] then return map[c] end
      local b = c:byte()
      if b >= 128 then return c end
      return ("\\u%04x"):format(b)
    end) .. '"'
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    return math.type(v) == "integer" and tostring(v) or ("%.17g"):format(v)
  elseif t == "boolean" then
    return tostring(v)
  elseif t == "table" then
    local parts = {}
    if #v > 0 or next(v) == nil then
      for i, x in ipairs(v) do parts[i] = json(x) end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = json(k) .. ":" .. json(v[k]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return "null"
end
M.json = json

-- Control bytes in names (a comm may hold a newline) are shown escaped.
local function printable(s)
  return (s:gsub("%c", function(c) return ("\\x%02x"):format(c:byte()) end))
end

local ps_columns = {
  pid = { "PID", "%7d", function(p) return p.pid end },
  ppid = { "PPID", "%7d", function(p) return p.ppid end },
  pgid = { "PGID", "%7d", function(p) return p.pgid end },
  sid = { "SID", "%7d", function(p) return p.sid end },
  uid = { "UID", "%6d", function(p) return p.uid end },
  state = { "S", "%1s", function(p) return p.state end },
  nthreads = { "THR", "%4d", function(p) return p.nthreads end },
  nice = { "NI", "%3d", function(p) return p.nice end },
  rss = { "RSS_KIB", "%9d", function(p) return p.rss_bytes // 1024 end },
  vsz = { "VSZ_KIB", "%10d", function(p) return p.vsize_bytes // 1024 end },
  cpu = { "CPU_MS", "%9d", function(p) return (p.utime_ns + p.stime_ns) // 1000000 end },
  start = { "START_S", "%9.2f", function(p) return p.start_ns / 1e9 end },
  comm = { "COMM", "%s", function(p) return printable(p.comm) end },
}
local default_ps = "pid,ppid,uid,state,nthreads,rss,cpu,comm"

local help = {
  ps = [[
usage: takana ps [--backend B] [--tree] [--json] [-k] [-o FIELDS]
  List every process from one snapshot.
  --backend B  auto (default), kfunc, iter or proc
  --tree       indent children under their parent
  --json       one JSON object per process per line
  -k           include kernel threads
  -o FIELDS    comma-separated: pid,ppid,pgid,sid,uid,state,nthreads,nice,rss,vsz,cpu,start,comm
]],
}

function M.ps(args)
  local opts = parse_args(args, { backend = "value", tree = "bool", json = "bool", k = "bool",
                                  o = "value", help = "bool" }, "ps")
  if opts.help then io.write(help.ps) return 0 end
  local backend = opts.backend or "auto"
  if not ({ auto = 1, kfunc = 1, iter = 1, proc = 1 })[backend] then
    usage_error("ps: unknown backend '" .. backend .. "'")
  end
  local fields = {}
  for f in (opts.o or default_ps):gmatch("[^,]+") do
    if not ps_columns[f] then usage_error("ps: unknown field '" .. f .. "'") end
    fields[#fields + 1] = f
  end
  local snap, err = takana.snapshot { backend = backend }
  if not snap then fail(err) end
  local show = function(p) return opts.k or not p.kthread end

  if opts.json then
    for p in snap:each() do
      if show(p) then io.write(json(p:totable()), "\n") end
    end
    return 0
  end

  local out = {}
  local function header()
    local cells = {}
    for i, f in ipairs(fields) do
      local c = ps_columns[f]
      local width = tonumber(c[2]:match("%%(%d+)")) or 0
      cells[i] = (f == "comm") and c[1] or ("%" .. width .. "s"):format(c[1])
    end
    out[#out + 1] = table.concat(cells, " ")
  end
  local function line(p, depth)
    local cells = {}
    for i, f in ipairs(fields) do
      local c = ps_columns[f]
      local v = c[3](p)
      if f == "comm" and depth then v = ("  "):rep(depth) .. v end
      cells[i] = c[2]:format(v)
    end
    out[#out + 1] = table.concat(cells, " ")
  end
  header()
  if opts.tree then
    local kids, roots = {}, {}
    for p in snap:each() do
      if show(p) then
        local parent = snap:get(p.ppid)
        if parent and parent.pid ~= p.pid and show(parent) then
          kids[p.ppid] = kids[p.ppid] or {}
          table.insert(kids[p.ppid], p.pid)
        else
          roots[#roots + 1] = p.pid
        end
      end
    end
    local function walk(pid, depth)
      line(snap:get(pid), depth)
      for _, k in ipairs(kids[pid] or {}) do walk(k, depth + 1) end
    end
    for _, r in ipairs(roots) do walk(r, 0) end
  else
    for p in snap:each() do
      if show(p) then line(p) end
    end
  end
  io.write(table.concat(out, "\n"), "\n")
  return 0
end

help.probe = [[
usage: takana probe [--json]
  What this host offers, which backend each capability uses, and why not.
]]

function M.probe(args)
  local opts = parse_args(args, { json = "bool", help = "bool" }, "probe")
  if opts.help then io.write(help.probe) return 0 end
  local p = takana.probe()
  if opts.json then io.write(json(p), "\n") return 0 end
  local function row(name, cap, detail)
    io.write(("%-22s %-4s %s\n"):format(name, cap.ok and "yes" or "no",
      cap.ok and (detail or "") or printable(cap.why or "")))
  end
  io.write(("%-22s %s\n"):format("kernel", p.kernel or "?"))
  row("btf", p.btf, "/sys/kernel/btf/vmlinux")
  for _, b in ipairs { "kfunc", "iter", "proc" } do
    local t = p.snapshot[b]
    local detail = t.load_ns and ("loaded in %.1f ms"):format(t.load_ns / 1e6) or ""
    if p.snapshot.backend == b then detail = detail .. (detail ~= "" and " " or "") .. "(used by snapshot())" end
    row("snapshot." .. b, t, detail)
  end
  for _, b in ipairs { "bpf", "connector", "poll" } do
    row("events." .. b, p.events[b], p.events.backend == b and "(used by events())" or "")
  end
  row("pidfd", p.pidfd, "pidfd_open, pidfd_send_signal, waitid(P_PIDFD)")
  row("clone3", p.clone3, "spawn: CLONE_VFORK | CLONE_PIDFD | CLONE_INTO_CGROUP")
  local cg = p.cgroup
  row("cgroup", cg, ("%s, v2 at %s, v2 controllers: %s"):format(cg.mode or "?", cg.v2_mount or "-",
    table.concat(cg.v2_controllers or {}, " ")))
  local v1 = {}
  for ctrl, mnt in pairs(cg.v1 or {}) do v1[#v1 + 1] = ctrl .. "=" .. mnt end
  table.sort(v1)
  if #v1 > 0 then io.write(("%-22s      %s\n"):format("cgroup v1", table.concat(v1, " "))) end
  return 0
end

local commands = { "probe", "ps" }

function M.main(args)
  local cmd = args[1]
  if cmd == nil or cmd == "--help" or cmd == "-h" or cmd == "help" then
    io.write("usage: takana <command> [options]\ncommands: ", table.concat(commands, ", "),
             "\n'takana <command> --help' describes each.\n")
    return cmd == nil and 2 or 0
  end
  local f = M[cmd]
  if type(f) ~= "function" or cmd == "main" or cmd == "json" then
    usage_error("unknown command '" .. cmd .. "' (" .. table.concat(commands, ", ") .. ")")
  end
  return f({ table.unpack(args, 2) })
end

return M
