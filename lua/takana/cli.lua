--- The `takana` command: subcommands over the module.
-- Exit codes: 0 success, 1 runtime failure, 2 bad usage.
local takana = require "takana"
local core = require "takana.core"
local util = require "takana.util"
local jsonc = require "takana.json"

local M = {}

local usage_error = util.usage_error

local function fail(msg)
  io.stderr:write("takana: ", msg, "\n")
  os.exit(1)
end


local snapshot_backends = { auto = true }
for _, name in ipairs(takana.snapshot_backends) do snapshot_backends[name] = true end

-- "cheapest" only where one snapshot is taken: top, which takes many,
-- would re-decide each frame.
local function check_snapshot_backend(cmd, backend, oneshot)
  if not (snapshot_backends[backend] or (oneshot and backend == "cheapest")) then
    usage_error(cmd .. ": unknown backend '" .. backend .. "'")
  end
  return backend
end

-- ps and export take one snapshot and exit: by default the library picks
-- the backend cheapest for one (proc below several thousand tasks).
function M.oneshot_backend(cmd, backend)
  if backend then return check_snapshot_backend(cmd, backend, true) end
  return "cheapest"
end

local parse_args = util.parse_args


-- One JSON value a line, pure ASCII (takana.json, the supervisor's codec
-- too).
local json = jsonc.encode
M.json = json

-- The list fields named, when empty, stay JSON arrays ([] rather than {}).
-- Raw reads: a record table raises on a field its snapshot left out.
local function lists(t, ...)
  for i = 1, select("#", ...) do
    local v = rawget(t, (select(i, ...)))
    if type(v) == "table" and next(v) == nil then setmetatable(v, jsonc.array) end
  end
  return t
end

-- Control bytes in names (a comm may hold a newline) are shown escaped.
local printable = util.printable

-- How `ps` shows a record field, keyed by the field's name in
-- core.record_fields (spec/04-cli checks each key against it): `col` the
-- -o name when it is not the field's, `head`, `fmt`, `value(p, ctx)` (else
-- p[field]) and `text` (wide text: the last column is not padded). A
-- field without a row is still a column, under its own name, shown as it
-- reads. user, cgroup and cmd are read per row, and only when asked for;
-- ctx caches.
local ps_format = {
  pid = { head = "PID", fmt = "%7d" },
  ppid = { head = "PPID", fmt = "%7d" },
  pgid = { head = "PGID", fmt = "%7d" },
  sid = { head = "SID", fmt = "%7d" },
  uid = { head = "UID", fmt = "%6d" },
  state = { head = "S", fmt = "%1s" },
  nthreads = { head = "THR", fmt = "%4d" },
  nice = { head = "NI", fmt = "%3d" },
  rss_bytes = { col = "rss", head = "RSS_KIB", fmt = "%9d", value = function(p) return p.rss_bytes // 1024 end },
  vsize_bytes = { col = "vsz", head = "VSZ_KIB", fmt = "%10d", value = function(p) return p.vsize_bytes // 1024 end },
  start_ns = { col = "start", head = "START_S", fmt = "%9.2f", value = function(p) return p.start_ns / 1e9 end },
  comm = { head = "COMM", fmt = "%s", text = true, value = function(p) return printable(p.comm) end },
  cgroup_id = { col = "cgroup", head = "CGROUP", fmt = "%-30s", text = true,
    value = function(p, ctx) return ctx.cgroup(p) end },
  cmdline = { col = "cmd", head = "CMD", fmt = "%s", text = true, value = function(p, ctx) return ctx.cmd(p) end },
}
M.ps_format = ps_format
-- Columns computed from other fields, each naming the fields it reads.
local ps_derived = {
  cpu = { reads = { "utime_ns", "stime_ns" }, head = "CPU_MS", fmt = "%9d",
    value = function(p) return (p.utime_ns + p.stime_ns) // 1000000 end },
  user = { reads = { "uid" }, head = "USER", fmt = "%-10s", text = true,
    value = function(p, ctx) return ctx.user(p.uid) end },
}
M.ps_derived = ps_derived
-- The ps columns by -o name: each record field's (in the record's order)
-- with the derived ones placed after the first field they read.
local ps_columns, ps_order = {}, {}
for _, name in ipairs(core.record_fields) do
  local f = ps_format[name] or {}
  local col = f.col or name
  ps_columns[col] = { head = f.head or name:upper(), fmt = f.fmt or "%s", text = f.text,
    value = f.value or function(p) local v = p[name] if v == nil then return "-" end return v end }
  ps_order[#ps_order + 1] = col
  for dname, d in pairs(ps_derived) do
    if d.reads[1] == name then
      ps_columns[dname] = d
      ps_order[#ps_order + 1] = dname
    end
  end
end
M.ps_columns, M.ps_order = ps_columns, ps_order
local default_ps = "pid,ppid,uid,state,nthreads,rss,cpu,comm"

-- A word as a POSIX shell reads it back: bare when safe, else in single
-- quotes; control bytes shown as \xNN.
local function shell_word(w)
  if w ~= "" and not w:find("[^%w@%%+=:,./_-]") then return w end
  return "'" .. printable(w):gsub("'", "'\\''") .. "'"
end
M.shell_word = shell_word

-- Per-call caches of the lookups the text columns need.
local function row_context()
  local users, cgroups = {}, {}
  local ctx = {}
  function ctx.user(uid)
    local u = users[uid]
    if u == nil then
      u = takana.user_name(uid) or tostring(uid)
      users[uid] = u
    end
    return u
  end
  -- The record's cgroup_id when the snapshot has it, else the process's
  -- /proc/<pid>/cgroup through a pidfd-anchored process object.
  function ctx.cgroup(p)
    local id = p.cgroup_id
    if math.type(id) == "integer" and id > 0 then
      local path = cgroups[id]
      if path == nil then
        path = takana.cgroup.path(id) or "?"
        cgroups[id] = path
      end
      return printable(path)
    end
    local proc = takana.process(p.pid)
    local path = proc and proc:cgroup()
    if proc then proc:close() end
    return path and printable(path) or "?"
  end
  -- The snapshot read cmdline (nil: the process is gone; reading the pid
  -- now could show another process's).
  function ctx.cmd(p)
    local argv = p.cmdline
    if not argv or #argv == 0 then return "[" .. printable(p.comm) .. "]" end
    local words = {}
    for i, a in ipairs(argv) do words[i] = shell_word(a) end
    return table.concat(words, " ")
  end
  return ctx
end

local help = {
  ps = [[
usage: takana ps [--backend B] [--tree] [--json] [-k] [-o FIELDS] [--cgroup PATH]
  List every process from one snapshot.
  --backend B  auto, kfunc, iter, proc, or cheapest (the default: proc
               below 5,000 tasks, where one snapshot does not repay a BPF
               load, else auto)
  --tree       indent children under their parent
  --json       one JSON object per process per line
  -k           include kernel threads
  -o FIELDS    comma-separated, of:
               %s
               (user, cgroup and cmd are read per row)
  --cgroup P   only the processes in cgroup P (relative to the cgroup2 mount)
               or beneath it
]],
}
-- The -o list, from the columns, wrapped under its option.
do
  local lines, line = {}, ""
  for i, col in ipairs(ps_order) do
    local word = col .. (i < #ps_order and "," or "")
    if #line + #word > 60 then lines[#lines + 1], line = line, "" end
    line = line .. word
  end
  lines[#lines + 1] = line
  help.ps = help.ps:format(table.concat(lines, "\n               "))
end

-- The order and depth of `ps --tree`: {pid, depth} pairs for records
-- ({pid=, ppid=}, in pid order), each pid exactly once, children in pid
-- order under their parent (a table per parent, none per leaf). A process
-- whose parent is not listed is a root. A snapshot read from /proc is not
-- atomic: during pid reuse it can hold a parent cycle (A.ppid = B, B.ppid =
-- A) that no root reaches, so the members of a cycle become roots too.
-- O(n), no recursion.
local NONE = {}
function M.tree_order(records)
  local by_pid, is_root, kids = {}, {}, {}
  for _, p in ipairs(records) do by_pid[p.pid] = p end
  for _, p in ipairs(records) do
    if p.ppid == p.pid or not by_pid[p.ppid] then
      is_root[p.pid] = true
    else
      local k = kids[p.ppid]
      if not k then k = {} kids[p.ppid] = k end
      k[#k + 1] = p.pid
    end
  end
  -- Walk up from each pid not yet placed; meeting this walk's own mark
  -- again means a cycle. Every pid is marked once over all walks.
  local walk_of = {}
  for w, p in ipairs(records) do
    local pid = p.pid
    while not walk_of[pid] and not is_root[pid] do
      walk_of[pid] = w
      pid = by_pid[pid].ppid
    end
    if walk_of[pid] == w and not is_root[pid] then
      local c = pid
      repeat
        is_root[c] = true
        c = by_pid[c].ppid
      until c == pid
    end
  end
  local out, stack = {}, {}
  for _, p in ipairs(records) do
    if is_root[p.pid] then
      stack[1] = { p.pid, 0 }
      while #stack > 0 do
        local e = table.remove(stack)
        out[#out + 1] = e
        local k = kids[e[1]] or NONE
        for i = #k, 1, -1 do
          if by_pid[k[i]] and not is_root[k[i]] then stack[#stack + 1] = { k[i], e[2] + 1 } end
        end
      end
    end
  end
  return out
end

function M.ps(args)
  local opts = parse_args(args, { backend = "value", tree = "bool", json = "bool", k = "bool",
                                  o = "value", cgroup = "value", help = "bool" }, "ps")
  if opts.help then io.write(help.ps) return 0 end
  local backend = M.oneshot_backend("ps", opts.backend)
  local fields = {}
  for f in (opts.o or default_ps):gmatch("[^,]+") do
    if not ps_columns[f] then usage_error("ps: unknown field '" .. f .. "'") end
    fields[#fields + 1] = f
  end
  -- The cgroup's members come from cgroup.procs of it and its
  -- descendants: exact, and no per-process read.
  local members
  if opts.cgroup then
    -- A bad path raises at takana.cgroup's caller, here pcall: a C
    -- function, so the message carries no position (the same below).
    local ok, cg, cerr = pcall(takana.cgroup, opts.cgroup == "/" and "" or opts.cgroup)
    if not ok then usage_error("ps: --cgroup: " .. tostring(cg)) end
    if not cg then fail("ps: --cgroup: " .. cerr) end
    local pids, perr = cg:procs { recursive = true }
    cg:close()
    if not pids then fail("ps: --cgroup " .. opts.cgroup .. ": " .. perr) end
    members = {}
    for _, pid in ipairs(pids) do members[pid] = true end
  end
  -- The default record, plus cmdline for the cmd column: read in the
  -- snapshot (after a BPF walk, by one BPF run for every process); cgroup_id
  -- only for the cgroup column (a /proc walk reads it per process).
  local record, want = nil, {}
  for _, f in ipairs(fields) do want[f] = true end
  -- A field left out of the selection raises when read: cgroup_id is
  -- named whenever the column is (the proc tier's default leaves it out).
  if want.cmd or want.cgroup then
    record = {}
    for _, name in ipairs(core.record_fields) do
      if (name ~= "cgroup_id" or want.cgroup) and (name ~= "cmdline" or want.cmd) then
        record[#record + 1] = name
      end
    end
  end
  local snap, err = takana.snapshot { backend = backend, fields = record }
  if not snap then fail(err) end
  local show = function(p) return (opts.k or not p.kthread) and (not members or members[p.pid]) end
  local ctx = row_context()

  if opts.json then
    for p in snap:each() do
      if show(p) then io.write(json(lists(p:totable(), "cmdline")), "\n") end
    end
    return 0
  end

  local out = {}
  local function header()
    local cells = {}
    for i, f in ipairs(fields) do
      local c = ps_columns[f]
      local width = tonumber(c.fmt:match("%%%-?(%d+)")) or 0
      if c.text then
        cells[i] = (i == #fields or width == 0) and c.head or ("%-" .. width .. "s"):format(c.head)
      else
        cells[i] = width == 0 and c.head or ("%" .. width .. "s"):format(c.head)
      end
    end
    out[#out + 1] = table.concat(cells, " ")
  end
  -- One format for a row, the columns' own joined by spaces (the last text
  -- column as it reads): one string.format a row, where a format and a
  -- table a cell cost 2/3 of `takana ps` at 1,000 processes.
  local n, values, fmts, getters, indented = #fields, {}, {}, {}, {}
  for i, f in ipairs(fields) do
    local c = ps_columns[f]
    getters[i], fmts[i] = c.value, (c.text and i == n) and "%s" or c.fmt
    if f == "comm" or f == "cmd" then indented[#indented + 1] = i end
  end
  local row_fmt = table.concat(fmts, " ")
  local function line(p, depth)
    for i = 1, n do values[i] = getters[i](p, ctx) end
    if depth then
      for _, i in ipairs(indented) do values[i] = ("  "):rep(depth) .. values[i] end
    end
    out[#out + 1] = row_fmt:format(table.unpack(values, 1, n))
  end
  header()
  if opts.tree then
    local records = {}
    for p in snap:each() do
      if show(p) then records[#records + 1] = { pid = p.pid, ppid = p.ppid } end
    end
    for _, e in ipairs(M.tree_order(records)) do line(snap:get(e[1]), e[2]) end
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
  for _, b in ipairs(takana.snapshot_backends) do
    local t = p.snapshot[b]
    local detail = t.load_ns and ("loaded in %.1f ms"):format(t.load_ns / 1e6) or ""
    if p.snapshot.backend == b then detail = detail .. (detail ~= "" and " " or "") .. "(used by snapshot())" end
    row("snapshot." .. b, t, detail)
  end
  for _, b in ipairs(takana.event_backends) do
    row("events." .. b, p.events[b], p.events.backend == b and "(used by events())" or "")
  end
  row("proc", p.proc, p.proc.note or "")
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

-- ---- watch ----------------------------------------------------------------

help.watch = [[
usage: takana watch [--json] [--backend B] [--count N] [--duration S] [TYPE...]
  Process events as they happen, one line each (like forkstat).
  TYPE         fork, exec, exit, comm (default: all)
  --backend B  auto (default), bpf, connector or poll
  --count N    stop after N events; --duration S: after S seconds
  --json       one JSON object per event per line
  Lost events are reported as they are detected.
]]

local function event_detail(e)
  if e.type == "exit" then
    local d = e.code and ("code=" .. e.code) or e.signal and ("signal=" .. e.signal ..
      (e.core and " core" or "")) or "status unknown"
    if e.utime_ns then
      d = d .. (" cpu=%.3fs maxrss=%dKiB"):format((e.utime_ns + e.stime_ns) / 1e9, e.maxrss_bytes // 1024)
    end
    return d
  elseif e.type == "exec" then
    -- argv as a shell would read it back, as execsnoop prints it.
    if type(e.argv) == "table" and #e.argv > 0 then
      local words = {}
      for i, a in ipairs(e.argv) do words[i] = shell_word(a) end
      return table.concat(words, " ") .. (e.argv_truncated and " ..." or "")
    end
    if e.filename then return printable(e.filename) end
    if e.comm then return printable(e.comm) end
    -- the connector could not read it as this exec's: say so, not ""
    return e.argv_lost and "(program unknown: argv lost)" or ""
  end
  return ""
end

M.event_detail = event_detail

function M.watch(args)
  local opts, types = parse_args(args, { json = "bool", backend = "value", count = "value",
                                         duration = "value", help = "bool" }, "watch")
  if opts.help then io.write(help.watch) return 0 end
  local want = {}
  for i, t in ipairs(types) do
    if not ({ fork = 1, exec = 1, exit = 1, comm = 1 })[t] then
      usage_error("watch: unknown event type '" .. t .. "' (fork, exec, exit, comm)")
    end
    want[i] = t
  end
  local count = opts.count and tonumber(opts.count)
  if opts.count and not (count and count >= 1 and count == math.floor(count)) then
    usage_error("watch: --count needs a positive integer")
  end
  local duration = opts.duration and tonumber(opts.duration)
  if opts.duration and not (duration and duration > 0) then usage_error("watch: --duration needs seconds > 0") end
  local backend = opts.backend or "auto"
  local known = backend == "auto"
  for _, b in ipairs(takana.event_backends) do known = known or b == backend end
  if not known then
    usage_error("watch: unknown backend '" .. backend .. "'")
  end
  want.backend = backend
  local ev, err = takana.events(want)
  if not ev then fail(err) end
  local skipped = {}
  for name, why in pairs(ev.skipped) do skipped[#skipped + 1] = name .. ": " .. why end
  table.sort(skipped)
  io.stderr:write(("takana watch: %s backend%s\n"):format(ev.backend,
    #skipped > 0 and (" (" .. table.concat(skipped, "; ") .. ")") or ""))
  if not opts.json then
    io.write(("%-15s %-5s %7s %7s %-16s %s\n"):format("TIME_S", "EVENT", "PID", "PPID", "COMM", "DETAIL"))
  end
  io.stdout:setvbuf("line")
  local monotime = takana.now
  local seen, deadline = 0, duration and (monotime() + duration)
  while true do
    local events, rerr = ev:read()
    if not events then fail(rerr) end
    for e in events do
      if opts.json then
        io.write(json(lists(e, "argv")), "\n")
      elseif e.type == "lost" then
        -- An overrun's size is not known yet (a later lost event carries it).
        io.write(("%-15.6f %-5s %s events lost%s\n"):format(e.time_ns / 1e9, "LOST",
          e.count and tostring(e.count) or "some", e.overrun and " (buffer overrun)" or ""))
      else
        io.write(("%-15.6f %-5s %7d %7s %-16s %s\n"):format(e.time_ns / 1e9, e.type, e.pid,
          e.ppid and tostring(e.ppid) or "-", e.comm and printable(e.comm) or "?", event_detail(e)))
      end
      if e.type ~= "lost" then seen = seen + 1 end
      if count and seen >= count then ev:close() return 0 end
    end
    local left = deadline and deadline - monotime()
    if left and left <= 0 then ev:close() return 0 end
    takana.poll({ ev }, left and math.min(left, 1) or 1)
  end
end

-- ---- cgroup ---------------------------------------------------------------

help.cgroup = [[
usage: takana cgroup PATH [--json] [--watch S] [--procs]
  A cgroup's accounting, read in O(1): cpu, memory, pids, pressure, events,
  and why each absent section is absent. PATH is relative to the cgroup2
  mount ("/" or "" for the root; "self" for this process's cgroup; a
  number is a cgroup id).
  --watch S    print again every S seconds until interrupted
  --procs      list the processes in it and beneath it instead: pid, user,
               cgroup, command line
]]

-- The sections of cg:stat() in its order, from the binding's layout.
local sections = {}
for _, row in ipairs(core.cgroup_stat) do
  if sections[#sections] ~= row.section then sections[#sections + 1] = row.section end
end

local function flatten(prefix, v, out)
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do flatten(prefix .. "." .. tostring(k), v[k], out) end
  else
    out[#out + 1] = { prefix, v }
  end
end

function M.cgroup(args)
  local opts, rest = parse_args(args, { json = "bool", watch = "value", procs = "bool", help = "bool" }, "cgroup")
  if opts.help then io.write(help.cgroup) return 0 end
  if #rest ~= 1 then usage_error("cgroup: exactly one PATH expected (see --help)") end
  local every = opts.watch and tonumber(opts.watch)
  if opts.watch and not (every and every > 0) then usage_error("cgroup: --watch needs seconds > 0") end
  local cg, err
  if rest[1] == "self" then
    cg, err = takana.cgroup.self()
  else
    local target = rest[1] == "/" and "" or rest[1]
    if target:match("^%d+$") then target = math.tointeger(tonumber(target)) or target end
    local ok, r, e = pcall(takana.cgroup, target)
    if not ok then usage_error("cgroup: " .. tostring(r)) end
    cg, err = r, e
  end
  if not cg then fail(printable(tostring(err))) end
  if opts.procs then
    if opts.watch then usage_error("cgroup: --procs and --watch are exclusive") end
    return M.cgroup_procs(cg, opts.json)
  end
  repeat
    local st, serr = cg:stat()
    if not st then fail(serr) end
    local why = {}
    for _, s in ipairs(sections) do
      if not st[s] then why[s] = cg:why(s) end
    end
    if opts.json then
      io.write(json({ path = cg.path, stat = st, absent = why }), "\n")
    else
      -- (a name in a delegated subtree is another user's choice)
      io.write(("cgroup %s\n"):format(printable(cg.path)))
      for _, s in ipairs(sections) do
        if st[s] then
          local rows = {}
          flatten(s, st[s], rows)
          for _, r in ipairs(rows) do io.write(("  %-40s %s\n"):format(r[1], tostring(r[2]))) end
        else
          io.write(("  %-40s absent: %s\n"):format(s, printable(why[s] or "?")))
        end
      end
    end
    io.stdout:flush()
    if every then takana.poll({}, every) end
  until not every
  cg:close()
  return 0
end

-- `takana cgroup PATH --procs`: the processes of a cgroup and of its
-- descendants, in pid order.
function M.cgroup_procs(cg, as_json)
  local pids, err = cg:procs { recursive = true }
  if not pids then fail(("cgroup %s: %s"):format(cg.path, err)) end
  cg:close()
  table.sort(pids)
  local ctx = row_context()
  if not as_json then io.write(("%7s %-10s %-30s %s\n"):format("PID", "USER", "CGROUP", "CMD")) end
  for _, pid in ipairs(pids) do
    local proc = takana.process(pid)
    -- Gone since cgroup.procs was read: not listed.
    if proc then
      local st = proc:status()
      local argv = proc:cmdline()
      local path = proc:cgroup()
      local comm = proc:comm() or "?"
      proc:close()
      if st and argv and path then
        if as_json then
          io.write(json({ pid = pid, uid = st.uids.real, user = ctx.user(st.uids.real), cgroup = path,
                          argv = lists({ argv }, 1)[1], comm = comm }), "\n")
        else
          local words = {}
          for i, a in ipairs(argv) do words[i] = shell_word(a) end
          local cmd = #words > 0 and table.concat(words, " ") or ("[" .. printable(comm) .. "]")
          io.write(("%7d %-10s %-30s %s\n"):format(pid, ctx.user(st.uids.real), printable(path), cmd))
        end
      end
    end
  end
  return 0
end

-- ---- export ---------------------------------------------------------------

help.export = [[
usage: takana export [--textfile DIR] [--cgroup PATH]... [--top N] [--backend B]
                     [--supervisor SOCKET]...
  Prometheus text exposition: processes by state, the top consumers of CPU
  and memory, per-cgroup cpu/memory/pids/pressure, the snapshot's own
  cost, and with --supervisor each service of that supervisor (up,
  restarts, OOM kills, last exit code). With --textfile DIR, writes DIR/takana.prom atomically (temporary
  file + rename) for node_exporter's textfile collector; else stdout.
  --backend B  as for ps: by default proc below 5,000 tasks, else auto
]]

-- Builds the exposition text; exported for the specs.
function M.exposition(opts)
  local m = require("takana.prometheus").new()
  local function metric(name, kind, help_text, lbl, value) m:add(name, kind, help_text, lbl, value) end
  local monotime = takana.now
  local t0 = monotime()
  local snap, err, errno = takana.snapshot { backend = opts.backend or "auto" }
  if not snap then return nil, err, errno end
  local cost = monotime() - t0
  metric("takana_snapshot_duration_seconds", "gauge", "Time the process snapshot took.",
    { backend = snap.backend }, cost)
  local by_state, procs = {}, {}
  for p in snap:each() do
    by_state[p.state] = (by_state[p.state] or 0) + 1
    if not p.kthread then procs[#procs + 1] = p:totable() end
  end
  local states = {}
  for st in pairs(by_state) do states[#states + 1] = st end
  table.sort(states)
  for _, st in ipairs(states) do
    metric("takana_processes", "gauge", "Processes by state letter, as /proc shows it.", { state = st }, by_state[st])
  end
  local top = opts.top or 10
  table.sort(procs, function(a, b) return a.utime_ns + a.stime_ns > b.utime_ns + b.stime_ns end)
  for i = 1, math.min(top, #procs) do
    local p = procs[i]
    metric("takana_top_cpu_seconds_total", "counter", "CPU time of the processes that used the most.",
      { pid = p.pid, comm = p.comm }, (p.utime_ns + p.stime_ns) / 1e9)
  end
  table.sort(procs, function(a, b) return a.rss_bytes > b.rss_bytes end)
  for i = 1, math.min(top, #procs) do
    local p = procs[i]
    metric("takana_top_rss_bytes", "gauge", "Resident memory of the largest processes.",
      { pid = p.pid, comm = p.comm }, p.rss_bytes)
  end
  for _, path in ipairs(opts.cgroups or {}) do
    local cg, cerr, cerrno = takana.cgroup(path)
    if not cg then return nil, cerr, cerrno end
    local st, serr, serrno = cg:stat()
    if not st then return nil, serr, serrno end
    local l = { cgroup = cg.path }
    if st.cpu then
      metric("takana_cgroup_cpu_usage_seconds_total", "counter", "cpu.stat usage.", l, st.cpu.usage_ns / 1e9)
    end
    if st.memory then
      metric("takana_cgroup_memory_current_bytes", "gauge", "memory.current.", l, st.memory.current)
    end
    if st.pids then
      metric("takana_cgroup_pids_current", "gauge", "pids.current.", l, st.pids.current)
    end
    for _, res in ipairs { "cpu", "memory", "io" } do
      local pr = st.pressure and st.pressure[res]
      for _, kind in ipairs { "some", "full" } do
        if pr and pr[kind] then
          metric("takana_cgroup_pressure_stalled_seconds_total", "counter",
            "PSI total stall time.", { cgroup = cg.path, resource = res, kind = kind }, pr[kind].total_ns / 1e9)
        end
      end
    end
    cg:close()
  end
  for _, sock in ipairs(opts.supervisors or {}) do
    local ok, serr, serrno = require("takana.supervisor").metrics(sock, metric)
    if not ok then return nil, serr, serrno end
  end
  return m:text()
end

function M.export(args)
  local opts, operands = parse_args(args, { textfile = "value", top = "value", backend = "value",
                                            cgroup = "list", supervisor = "list", help = "bool" }, "export")
  local cgroups = opts.cgroup or {}
  if opts.help then io.write(help.export) return 0 end
  if #operands > 0 then usage_error("export: unexpected argument '" .. operands[1] .. "'") end
  if opts.textfile == "" then usage_error("export: --textfile needs a directory") end
  local top = opts.top and tonumber(opts.top)
  if opts.top and not (top and top >= 0 and top == math.floor(top)) then
    usage_error("export: --top needs a non-negative integer")
  end
  for _, path in ipairs(cgroups) do
    local ok, cg, e = pcall(takana.cgroup, path)
    if not ok then usage_error("export: --cgroup " .. printable(path) .. ": " .. tostring(cg)) end
    if not cg then fail("export: " .. e) end
    cg:close()
  end
  local backend = M.oneshot_backend("export", opts.backend)
  local text, err = M.exposition { cgroups = cgroups, top = top, backend = backend,
                                   supervisors = opts.supervisor }
  if not text then fail(err) end
  if not opts.textfile then
    io.write(text)
    return 0
  end
  -- Run as root into a directory others may write: a temporary file made
  -- exclusively, under a random name, through a directory fd, then renamed
  -- (takana.textfile_write); plain io.open would follow a planted symlink.
  local ok, werr = takana.textfile_write(opts.textfile, "takana.prom", text)
  if not ok then fail("export: " .. werr) end
  return 0
end

-- ---- top ------------------------------------------------------------------

help.top = [[
usage: takana top [--interval S] [--backend B] [--iterations N] [-k]
  Processes sorted by CPU share, refreshed from snapshot deltas. Keys:
  q quits, c/m/p sort by CPU/memory/pid. On a terminal it takes the
  screen and restores it on exit and on Ctrl-C; otherwise (a pipe) it
  prints plain frames of every process, like top -b.
  --interval S   seconds between frames (default 1)
  --iterations N stop after N frames
]]

local function top_frame(prev, snap, sort_key, rows, cols, cost_us, show_k)
  local d = takana.delta(prev, snap)
  local list = {}
  for p in snap:each() do
    if show_k or not p.kthread then
      list[#list + 1] = { pid = p.pid, comm = p.comm, state = p.state, rss = p.rss_bytes,
                          share = d.share[p.pid], nthreads = p.nthreads, uid = p.uid }
    end
  end
  -- A process born since the last frame has no share yet: shown as "-",
  -- sorted below every measured one.
  local cmp = {
    c = function(a, b)
      local sa, sb = a.share or -1, b.share or -1
      if sa ~= sb then return sa > sb end
      return a.pid < b.pid
    end,
    m = function(a, b) if a.rss ~= b.rss then return a.rss > b.rss end return a.pid < b.pid end,
    p = function(a, b) return a.pid < b.pid end,
  }
  table.sort(list, cmp[sort_key])
  local lines = {
    ("takana top - %d processes, backend %s, snapshot %.0f us, interval %.2f s, sort %s (c/m/p, q quits)")
      :format(#snap, snap.backend, cost_us, d.interval_ns / 1e9, ({ c = "cpu", m = "memory", p = "pid" })[sort_key]),
    ("%7s %6s %1s %4s %6s %10s  %s"):format("PID", "UID", "S", "THR", "CPU%", "RSS_KIB", "COMM"),
  }
  for i = 1, math.min(#list, rows - #lines) do
    local p = list[i]
    lines[#lines + 1] = (("%7d %6d %1s %4d %6s %10d  %s"):format(p.pid, p.uid, p.state, p.nthreads,
      p.share and ("%.1f"):format(p.share * 100) or "-", p.rss // 1024, printable(p.comm)))
  end
  -- A line wider than the terminal would wrap and scroll the header away.
  for i, line in ipairs(lines) do lines[i] = line:sub(1, cols) end
  return lines
end

local function terminal_size()
  local p = io.popen("stty size 2>/dev/null")
  local r, c = (p:read("a") or ""):match("(%d+)%s+(%d+)")
  p:close()
  return tonumber(r) or 24, tonumber(c) or 80
end

-- The terminal in raw mode on the alternate screen, cursor hidden: keys
-- arrive one by one and Ctrl-C is a byte to handle, so the terminal is
-- always given back. Returns the function that gives it back.
local function raw_terminal()
  local p = io.popen("stty -g 2>/dev/null")
  local saved = p:read("l")
  p:close()
  os.execute("stty raw -echo 2>/dev/null")
  io.write("\27[?1049h\27[?25l")
  return function()
    if saved then
      os.execute("stty " .. saved .. " 2>/dev/null")
      io.write("\27[?25h\27[?1049l")
      io.flush()
      saved = nil
    end
  end
end

local stdin = { fileno = function() return 0 end }

-- A key pressed within wait seconds: nil when none, false to quit.
local function top_key(wait)
  local ready = takana.poll({ stdin }, wait)
  if not (ready and #ready > 0) then return nil end
  local key = io.stdin:read(1)
  if key == "q" or key == "\3" or key == nil then return false end
  return key
end

-- Takes a snapshot and shows its frame against prev; returns it.
local function top_draw(prev, backend, sort_key, tty, show_k)
  local t0 = takana.now()
  local snap, serr = takana.snapshot { backend = backend }
  if not snap then error(serr, 0) end
  local cost = (takana.now() - t0) * 1e6
  -- A pipe gets every process at full width, like top -b.
  local rows, cols = math.maxinteger, math.maxinteger
  if tty then rows, cols = terminal_size() end
  local lines = top_frame(prev, snap, sort_key, rows, cols, cost, show_k)
  if tty then
    io.write("\27[H\27[2J", table.concat(lines, "\r\n"))
  else
    io.write(table.concat(lines, "\n"), "\n\n")
  end
  io.flush()
  return snap
end

local function top_loop(backend, interval, iterations, tty, show_k)
  local now = takana.now
  local prev = assert(takana.snapshot { backend = backend })
  local sort_key, frames = "c", 0
  local next_at = now() + math.min(interval, 0.5)
  while true do
    -- wait for a key or the next frame
    local wait = next_at - now()
    if tty and wait > 0 then
      local key = top_key(wait)
      if key == false then return end
      if key then
        if key == "c" or key == "m" or key == "p" then sort_key = key end
        next_at = now() -- redraw now
      end
    elseif wait > 0 then
      takana.poll({}, wait)
    end
    if now() >= next_at then
      prev = top_draw(prev, backend, sort_key, tty, show_k)
      frames = frames + 1
      if iterations and frames >= iterations then return end
      next_at = now() + interval
    end
  end
end

function M.top(args)
  local opts = parse_args(args, { interval = "value", backend = "value", iterations = "value",
                                  k = "bool", help = "bool" }, "top")
  if opts.help then io.write(help.top) return 0 end
  local interval = tonumber(opts.interval or "1")
  if not (interval and interval >= 0.05 and interval <= 3600) then
    usage_error("top: --interval needs seconds between 0.05 and 3600")
  end
  local iterations = opts.iterations and tonumber(opts.iterations)
  if opts.iterations and not (iterations and iterations >= 1) then usage_error("top: --iterations needs N >= 1") end
  local backend = check_snapshot_backend("top", opts.backend or "auto")
  local tty = os.execute("test -t 1") == true and os.execute("test -t 0") == true
  local restore = tty and raw_terminal() or function() end
  local ok, err = pcall(top_loop, backend, interval, iterations, tty, opts.k)
  restore()
  if not ok then fail(tostring(err)) end
  return 0
end

-- ---- bench ----------------------------------------------------------------

help.bench = [[
usage: takana bench [PHASE...]
  The `make bench` tables, from a takana source tree (the current
  directory): snapshot, spawn, cgroup, events, psutil, supervise. A progress line per phase
  goes to stderr.
]]

function M.bench(args)
  local opts, phases = parse_args(args, { help = "bool" }, "bench")
  if opts.help then io.write(help.bench) return 0 end
  local all = { "snapshot", "spawn", "cgroup", "events", "psutil", "supervise" }
  if #phases == 0 then phases = all end
  for _, ph in ipairs(phases) do
    if not ({ snapshot = 1, spawn = 1, cgroup = 1, events = 1, psutil = 1, supervise = 1 })[ph] then
      usage_error("bench: unknown phase '" .. ph .. "' (snapshot, spawn, cgroup, events, psutil, supervise)")
    end
  end
  if not io.open("bench/lib.lua") then fail("bench: run from a takana source tree (bench/lib.lua not found)") end
  if not os.execute("make -s all bench/takana_bench.so spec/fixture >&2") then fail("bench: build failed") end
  for i, ph in ipairs(phases) do
    io.stderr:write(("takana bench: %s (%d/%d)\n"):format(ph, i, #phases))
    io.stdout:flush()
    if not os.execute("lua5.4 bench/" .. ph .. ".lua") then fail("bench: " .. ph .. " failed") end
  end
  return 0
end

help.supervise = [[
usage: takana supervise [--init] FILE.lua
  Runs FILE.lua, which declares services on a supervisor and returns it
  (`local sup = require("takana").supervisor{...}; sup:service{...};
  return sup`), then runs that supervisor until SIGTERM or SIGINT stops
  every service in reverse dependency order.
  SIGHUP, or `takana ctl SOCKET reload`, runs FILE.lua again, with
  takana.supervisor{...} only recording what it declares, and applies the
  difference (sup:reload): an unchanged service keeps its processes, a
  changed one restarts once (live for restart, backoff, start_limit, stop,
  depends, limits, log), a removed one stops, an added one starts. A file
  that fails to load or check changes nothing; the reason goes to stderr
  and to ctl reload. A file whose supervisor has its own `reload` hook
  gets that hook called instead.
  --init (the default as PID 1): a container's init, as tini: it reaps
  every orphan, and the end of the main service (`main = NAME`, or the only
  one) stops the rest; the exit status is then the main service's (its
  code, or 128 + the signal that ended it).
]]

function M.supervise(args)
  local opts, operands = parse_args(args, { help = "bool", init = "bool" }, "supervise")
  if opts.help then io.write(help.supervise) return 0 end
  if #operands ~= 1 then usage_error("supervise: one FILE.lua expected") end
  if opts.init then require("takana.supervisor").init_default = true end
  local S = require "takana.supervisor"
  local path = operands[1]
  local chunk, lerr = loadfile(path)
  if not chunk then fail("supervise: " .. lerr) end
  -- A reload runs the file again, recording its declarations; a file that
  -- gives its own reload hook keeps it (M.defaults fills only what is nil).
  S.defaults.reload = function()
    local again, err = loadfile(path)
    if not again then error(err, 0) end
    local decls, sup_opts = S.declarations(again)
    if not decls then error(sup_opts, 0) end -- (it names the file, with the line where it can)
    return decls, sup_opts
  end
  S.defaults.on_reload = function(_, summary, err)
    if err then
      io.stderr:write("takana supervise: ", printable(err), "\n")
    elseif summary then
      io.stderr:write("takana supervise: ", printable(require("takana.ctl").reload_words(summary)), "\n")
    end
  end
  local ok, sup, serr = pcall(chunk)
  if not ok then fail("supervise: " .. operands[1] .. ": " .. tostring(sup)) end
  if sup == nil and serr then fail("supervise: " .. tostring(serr)) end
  if getmetatable(sup) ~= require("takana.supervisor").Supervisor then
    fail("supervise: " .. operands[1] .. " must return the supervisor it declared (got " .. type(sup) .. ")")
  end
  local rok, rerr = sup:run()
  if not rok then fail("supervise: " .. tostring(rerr)) end
  return sup:exit_code() or 0
end

-- ---- example ----------------------------------------------------------------

help.example = [=[
usage: takana example [NAME [ARGS...]]
  Runs the example policy NAME (examples/NAME.lua, installed with takana)
  with ARGS; `takana example NAME --help` describes its options. Without
  NAME: lists the examples, each with its first line. A file marked
  `-- takana example: supervise` declares services: it runs as
  `takana supervise [ARGS] FILE` does.
]=]

-- The examples' directory: installed beside this module
-- (<tree>/share/lua/5.4/takana/examples), or a checkout's examples/. (Where
-- this module is loaded from: an installed one is bytecode whose source
-- name is "takana/cli.lua" under any tree.)
local function examples_dir()
  local here = (package.searchpath("takana.cli", package.path) or ""):match("^(.*)/[^/]*$") or "."
  for _, d in ipairs { here .. "/examples", here .. "/../../examples" } do
    local f = io.open(d .. "/oomd.lua")
    if f then
      f:close()
      return d
    end
  end
  return nil
end

function M.example(args)
  local dir = examples_dir()
  if not dir then fail("example: no examples directory beside " .. tostring(package.searchpath("takana.cli", package.path))) end
  local name = args[1]
  if name == "--help" or name == "-h" then io.write(help.example) return 0 end
  if name == nil then
    local ls = assert(io.popen("ls -1 " .. shell_word(dir)))
    for file in ls:lines() do
      local n = file:match("^([%w_-]+)%.lua$")
      local f = n and io.open(dir .. "/" .. file)
      if f then
        io.write(("%-12s %s\n"):format(n, (f:read("l") or ""):gsub("^%-%-%s*", "")))
        f:close()
      end
    end
    ls:close()
    return 0
  end
  local path = dir .. "/" .. name .. ".lua"
  local f = name:match("^[%w_-]+$") and io.open(path)
  if not f then usage_error("example: no example '" .. name .. "' ('takana example' lists them)") end
  local text = f:read("a")
  f:close()
  if text:find("\n%-%- takana example: supervise\n") then
    local sargs = { table.unpack(args, 2) }
    sargs[#sargs + 1] = path
    return M.supervise(sargs)
  end
  local chunk, err = load(text, "@" .. path)
  if not chunk then fail("example: " .. err) end
  rawset(_G, "arg", { [0] = path, table.unpack(args, 2) }) -- as `lua5.4 FILE ARGS` sets it
  local code = chunk(table.unpack(args, 2))
  return math.type(code) == "integer" and code or 0
end

function M.ctl(args) return require("takana.ctl").main(args) end

local commands = { "probe", "ps", "top", "watch", "cgroup", "export", "bench", "supervise", "ctl", "example" }

function M.main(args)
  local cmd = args[1]
  if cmd == nil or cmd == "--help" or cmd == "-h" or cmd == "help" then
    io.write("usage: takana <command> [options]\ncommands: ", table.concat(commands, ", "),
             "\n'takana <command> --help' describes each.\n")
    return cmd == nil and 2 or 0
  end
  local f = M[cmd]
  if type(f) ~= "function" or not ({ probe = 1, ps = 1, top = 1, watch = 1, cgroup = 1,
      export = 1, bench = 1, supervise = 1, ctl = 1, example = 1 })[cmd] then
    usage_error("unknown command '" .. cmd .. "' (" .. table.concat(commands, ", ") .. ")")
  end
  return f({ table.unpack(args, 2) })
end

return M
