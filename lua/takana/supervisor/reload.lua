--- takana.supervisor, reload: a new set of service declarations applied
-- to the running set. What is unchanged is not touched (same processes);
-- what changed in an option that shapes the run (the options marked
-- "restart" in `service_options`) goes through its stop sequence and
-- starts again once, with the new declaration; a change to the other
-- options applies live (`limits` are written to the running service's
-- cgroup); what was removed is stopped, then forgotten (its cgroup
-- removed once empty); what was added starts, its dependencies first.
-- Nothing changes unless every declaration checks.
-- @module takana.supervisor
local C = require "takana.supervisor.class"
local M, supervisor, argerror, nargs, check_options = C.M, C.supervisor, C.argerror, C.nargs, C.check_options
local required, decl_copy, same, E = C.required, C.decl_copy, C.same, C.E

-- What a changed option does on reload, from the schema ("restart",
-- "live" or "added").
local reload_kind = {}
for _, o in ipairs(M.service_options) do reload_kind[o.name] = o.reload end

-- What a limit reads when nobody set it: a limit dropped from a
-- declaration is written back to it, live (the keys `cg:set` knows).
local limit_defaults = {
  ["memory.max"] = "max", ["memory.high"] = "max", ["memory.swap.max"] = "max", ["memory.low"] = 0,
  ["memory.min"] = 0, ["pids.max"] = "max", ["cpu.weight"] = 100, ["cpu.max"] = { "max", 100000 },
  ["io.weight"] = 100,
}

-- Supervisor options a reload cannot apply to a running supervisor (its
-- cgroup, sockets, signal handling, the hook itself): a changed one
-- refuses the reload with the reason. The others (log, log_size,
-- log_files, log_lines, on_exit, on_reload, main, adopt) apply live.
local sup_restart_only = { "cgroup", "control", "runtime", "signals", "subreaper", "init", "reload", "logger" }

local function array(t) return setmetatable(t or {}, M.array) end

-- Declarations (a list of service option tables, or a table name ->
-- options) checked and built: a list of service tables, in order (the
-- list's, then the names of a map, sorted). Raises as argument 1 of
-- reload, blaming the frame `up` above this one (1 under pcall: no
-- position).
local function build_all(decls, up)
  local fname = "reload"
  if type(decls) ~= "table" then
    argerror(fname, 1, "a list of service declarations expected, got " .. type(decls), up)
  end
  local entries, n = {}, #decls
  for i = 1, n do entries[#entries + 1] = { where = "declaration " .. i, t = decls[i] } end
  local named = {}
  for k in pairs(decls) do
    if type(k) == "string" then
      named[#named + 1] = k
    elseif not (math.type(k) == "integer" and k >= 1 and k <= n) then
      argerror(fname, 1, "declarations: a list, or service names as keys, expected (got key " .. tostring(k) .. ")", up)
    end
  end
  table.sort(named)
  for _, k in ipairs(named) do
    local t = decls[k]
    if type(t) == "table" and t.name == nil then
      t = decl_copy(t)
      t.name = k
    elseif type(t) == "table" and t.name ~= k then
      argerror(fname, 1, ("declarations[%q]: its name is %q"):format(k, tostring(t.name)), up)
    end
    entries[#entries + 1] = { where = ("declarations[%q]"):format(k), t = t }
  end
  local built, seen = {}, {}
  for _, e in ipairs(entries) do
    local name = type(e.t) == "table" and type(e.t.name) == "string" and (" (service '" .. e.t.name .. "')") or ""
    local where = e.where .. name .. ": "
    check_options(fname, 1, e.t, C.svc_options, { required = true, where = where, level = 1 + up })
    local svc = C.build_service(e.t, { fname = fname, where = where, level = 2 + up })
    if seen[svc.name] then argerror(fname, 1, ("service '%s' is declared twice"):format(svc.name), up) end
    seen[svc.name] = true
    built[#built + 1] = svc
  end
  return built
end

-- A cgroup option as one spelling: "a/b" for "/a/b/", "a/b" and a handle.
local function cg_name(v)
  if type(v) == "string" then return (v:gsub("^/+", ""):gsub("/+$", "")) end
  local ok, rel = pcall(function() return v.relpath end)
  return ok and rel or v
end

-- nil when supervisor options opts (a file read again) can be applied to
-- this supervisor, else why not. Raises on a bad option (as `new` does).
function supervisor:_reload_options(opts)
  check_options("supervisor", 1, opts, C.sup_options, required)
  local was = self.options or {}
  for _, k in ipairs(sup_restart_only) do
    local a, b = was[k], opts[k]
    if k == "cgroup" then a, b = cg_name(a), cg_name(b) end
    if not same(a, b) then
      return ("supervisor option '%s' changed: it applies only when the supervisor starts " ..
        "(restart takana supervise to apply it); nothing was reloaded"):format(k)
    end
  end
end

-- Applies the live supervisor options of opts (checked by _reload_options).
function supervisor:_reload_apply_options(given)
  self.options = decl_copy(given)
  -- (the defaults fill what is nil, as in `new`)
  local opts = decl_copy(given)
  for k, v in pairs(M.defaults) do if opts[k] == nil then opts[k] = v end end
  local log_changed = not same(self.log, opts.log)
  self.log = opts.log
  self.log_size, self.log_files, self.log_lines = opts.log_size or 1048576, opts.log_files or 5, opts.log_lines or 200
  self.on_exit, self.on_reload, self.main_name = opts.on_exit, opts.on_reload, opts.main
  self.adopt = opts.adopt == true
  if log_changed then
    -- Each service's file is opened again, in the new place, at its next line.
    for _, svc in pairs(self.services) do
      if svc.logf then svc.logf:close() svc.logf, svc.logd = nil, nil end
    end
  end
end

-- The options whose values differ between declarations a and b, sorted,
-- and whether one of them needs a restart.
local function diff(a, b)
  local keys, changed, restart = {}, array(), false
  for k in pairs(a) do keys[k] = true end
  for k in pairs(b) do keys[k] = true end
  for k in pairs(keys) do
    if reload_kind[k] ~= "added" and not same(a[k], b[k]) then
      changed[#changed + 1] = k
      if reload_kind[k] == "restart" then restart = true end
    end
  end
  table.sort(changed)
  return changed, restart
end

-- The fields build_service derives from a declaration: what a changed one
-- replaces in the running service's table (its state and history stay).
local decl_fields = { "cmd", "env", "cwd", "restart", "backoff", "start_limit", "ready_mode", "ready_timeout",
  "stop_signal", "stop_timeout", "depends", "limits", "log", "spawn_extra", "watchdog", "uid", "gid", "decl" }

local function needs_notify(svc) return svc.ready_mode == "notify" or svc.watchdog ~= nil end

-- Writes svc's new limits to its cgroup, live, and those dropped from its
-- declaration (old: the limits before) back to the kernel's default:
-- nil, or why one could not be (then the service is restarted, so that
-- its start applies them, or fails with the reason).
function supervisor:_reload_limits(svc, old)
  if not svc.cg then return nil end
  for k in pairs(old or {}) do
    if not (svc.limits and svc.limits[k] ~= nil) then
      local d = limit_defaults[k]
      if d == nil then
        svc.cg_renew = true -- no default known: a fresh cgroup at the next start
        return ("limit %s removed: no default to write back; a fresh cgroup at the restart"):format(k)
      end
      local ok, got, err = pcall(svc.cg.set, svc.cg, k, d)
      if not (ok and got ~= nil) then return ("limit %s (back to its default): %s"):format(k, tostring(ok and err or got)) end
    end
  end
  if svc.limits then
    local ok, why = pcall(self._apply_limits, self, svc, svc.cg)
    if not ok then return tostring(why) end
    return why
  end
end

-- svc (registered) takes new's declaration. Returns "restarted" or
-- "updated", and a note (why a live change became a restart).
function supervisor:_reload_service(svc, new, restart)
  local old_limits, had_notify = svc.limits, needs_notify(svc)
  for _, k in ipairs(decl_fields) do svc[k] = new[k] end
  if had_notify and not needs_notify(svc) and self.rtdir then self.rtdir:unlink(svc.notify_name) end
  if svc.logf and not same(svc.decl.log, new.decl.log) then svc.logf:close() svc.logf, svc.logd = nil, nil end
  local note
  if not same(old_limits, svc.limits) then
    note = self:_reload_limits(svc, old_limits)
    if note then restart = true end
  end
  if svc.removing then
    -- Removed by an earlier reload, still stopping: declared again.
    svc.removing = nil
    svc.want = "up"
  end
  if not restart then return "updated", note end
  -- A new declaration starts with a fresh start limit and failure count.
  svc.starts, svc.fails = {}, 0
  if svc.state == "failed" then
    svc.state, svc.reason, svc.deadline, svc.want = "stopped", nil, nil, "up"
  elseif (svc.state == "running" or svc.state == "starting") and svc.want == "up" then
    svc.reloading = true
    self:_begin_stop(svc)
    return "restarted", note
  elseif svc.state == "stopped" and svc.cg_renew and svc.cg and not C.populated(svc.cg) then
    self:_unwatch(svc.cg)
    svc.cg:remove()
    svc.cg:close()
    svc.cg, svc.cg_watched, svc.cg_renew = nil, false, nil
  end
  -- Not running: the next start uses the new declaration.
  return "updated", note
end

-- Applies built declarations (build_all's) to the running set.
function supervisor:_reload_apply(built)
  local summary = { added = array(), removed = array(), restarted = array(), updated = array(),
    unchanged = array(), changes = {}, notes = {} }
  local declared = {}
  for _, new in ipairs(built) do
    declared[new.name] = true
    local svc = self.services[new.name]
    if not svc then
      self:_register(new)
      summary.added[#summary.added + 1] = new.name
    else
      local changed, restart = diff(svc.decl, new.decl)
      if #changed == 0 and not svc.removing then
        summary.unchanged[#summary.unchanged + 1] = new.name
      else
        local what, note = self:_reload_service(svc, new, restart)
        summary[what][#summary[what] + 1] = new.name
        summary.changes[new.name] = changed
        summary.notes[new.name] = note
      end
    end
  end
  -- Removed: stopped through the stop sequence, then forgotten.
  for _, name in ipairs(table.move(self.order, 1, #self.order, 1, {})) do
    local svc = self.services[name]
    if svc and not declared[name] and not svc.removing then
      summary.removed[#summary.removed + 1] = name
      self:remove(name)
    end
  end
  -- The declaration order is the new one (starts, status); services still
  -- being removed follow it.
  local order = {}
  for _, new in ipairs(built) do order[#order + 1] = new.name end
  for _, name in ipairs(self.order) do
    if not declared[name] and self.services[name] then order[#order + 1] = name end
  end
  self.order = order
  if next(summary.notes) == nil then summary.notes = nil end
  return summary
end

-- The end of a reload: its outcome kept (`reload_error`) and told to the
-- on_reload hook.
function supervisor:_reload_done(summary, err, errno)
  self.reload_error = err
  self.reloads = (self.reloads or 0) + 1
  if self.on_reload then
    local ok, herr = pcall(self.on_reload, self, summary, err)
    self.reload_hook_error = not ok and tostring(herr) or nil
  end
  if err then return nil, err, errno end
  return true, summary
end

--- Reloads the set of services.
--
-- `sup:reload(declarations)`: the new set, a list of service option
-- tables (as `sup:service` takes), or a table of them keyed by name. It
-- is compared with the running set: a service whose declaration is the
-- same is not touched (same processes); one whose options marked
-- "restart" in `service_options` changed (cmd, env, cwd, user, ready,
-- watchdog...) goes through its stop sequence and starts once more with
-- the new declaration (a service not running just keeps it for its next
-- start; a failed one is started afresh); one where only "live" options
-- changed takes them at once (limits are written to its cgroup; a limit
-- dropped is written back to its default; one that cannot be written
-- makes it a restart, whose start applies it or fails with the reason).
-- Functions (restart policies, log functions) compare by their code.
-- `autostart` matters only for an added service: one already there keeps
-- the state it was asked for (`start`, `stop`). A service not in the new
-- set is stopped and forgotten, its cgroup removed once empty; an added
-- one starts (after its dependencies). A bad declaration raises, as
-- `sup:service` does, and changes nothing.
--
-- `sup:reload()`, what SIGHUP and `takana ctl SOCKET reload` call: calls
-- the `reload` hook, `function(sup) -> [declarations [, supervisor
-- options]]`. A hook that returns nothing has done its own changes
-- (`sup:service`, `sup:remove`), as before declarations existed; one that
-- returns declarations has them applied as above. `takana supervise FILE`
-- gives a supervisor without a hook one that runs FILE again
-- (`declarations`) and returns what it declares. Supervisor options
-- returned with them that cannot change while it runs (cgroup, control,
-- runtime, signals, subreaper, init, reload) refuse the reload when they
-- differ; the others (`log`, `log_size`, `log_files`, `log_lines`, `on_exit`,
-- `on_reload`, `main`, `adopt`) apply. A hook that raises, or returns a bad
-- declaration, changes nothing: nil, the reason, EINVAL; so does a
-- supervisor without a hook (EOPNOTSUPP) or one shutting down
-- (ESHUTDOWN). `sup.reload_error` keeps the last failure's reason (nil
-- after a success), and the `on_reload` hook, `function(sup, summary,
-- err)`, hears every outcome.
-- @tparam[opt] table declarations
-- @treturn[1] true, summary `{added=, removed=, restarted=, updated=,
--   unchanged=}` (lists of names), `changes` (name -> the options that
--   changed) and `notes` (name -> why a live change became a restart);
--   no summary when a hook made its own changes
-- @treturn[2] nil, message, errno
function supervisor:reload(decls, ...)
  nargs("reload", 1, select("#", ...) + 1)
  if self.closed then return nil, "reload: the supervisor is closed", E.EBADF end
  if decls ~= nil then
    local built = build_all(decls, 2)
    if self.shutting then return self:_reload_done(nil, "reload: the supervisor is shutting down", E.ESHUTDOWN) end
    return self:_reload_done(self:_reload_apply(built))
  end
  if self.shutting then return self:_reload_done(nil, "reload: the supervisor is shutting down", E.ESHUTDOWN) end
  if not self.reload_hook then
    return self:_reload_done(nil, "reload: no reload hook, nothing to read the services from " ..
      "(takana supervise FILE re-reads FILE; a library supervisor gives `reload`)", E.EOPNOTSUPP)
  end
  local ok, r, opts = pcall(self.reload_hook, self)
  if not ok then return self:_reload_done(nil, "reload: " .. tostring(r), E.EINVAL) end
  if r == nil then return self:_reload_done(nil) end
  local built
  ok, built = pcall(build_all, r, 1)
  if not ok then return self:_reload_done(nil, tostring(built), E.EINVAL) end
  if opts ~= nil then
    local why
    ok, why = pcall(self._reload_options, self, opts)
    if not ok then return self:_reload_done(nil, "reload: " .. tostring(why), E.EINVAL) end
    if why then return self:_reload_done(nil, "reload: " .. why, E.EINVAL) end
    self:_reload_apply_options(opts)
  end
  return self:_reload_done(self:_reload_apply(built))
end

-- ---- reading a file's declarations ----

-- What `takana.supervisor{...}` returns while declarations are read: it
-- records service declarations (checked as `sup:service` checks them) and
-- does nothing else.
local recorder = {}
recorder.__index = function(_, k)
  local f = rawget(recorder, k)
  if f then return f end
  if type(supervisor[k]) == "function" then
    return function()
      error(("%s: not available while a file's declarations are read for a reload (sup:service is)"):format(k), 2)
    end
  end
end

function recorder:service(t, ...)
  nargs("service", 1, select("#", ...) + 1)
  check_options("service", 1, t, C.svc_options, required)
  local svc = C.build_service(t)
  if self.names[svc.name] then argerror("service", 1, "service '" .. svc.name .. "' is already declared") end
  self.names[svc.name] = svc
  self.list[#self.list + 1] = svc.decl
  return svc
end

function recorder:get(name) return self.names[name] end

--- Runs `fn` (a supervisor file's chunk) with `takana.supervisor{...}`
-- recording instead of creating: what `takana supervise` reloads with. The
-- supervisor `fn` declares and returns opens nothing (no cgroup, socket
-- or signal): its `service` checks and records each declaration, and its
-- other methods raise.
-- @func fn the file's chunk, run with the remaining arguments
-- @treturn[1] table the service declarations, in order (for `sup:reload`)
-- @treturn[1] table the supervisor options it gave
-- @treturn[2] nil, message, EINVAL (it raised, declared no supervisor or
--   two, or returned something else)
function M.declarations(fn, ...)
  if type(fn) ~= "function" then argerror("declarations", 1, "function expected, got " .. type(fn)) end
  if C.capture then return nil, "declarations: already reading one", E.EBUSY end
  local rec
  C.capture = function(opts, ...)
    nargs("supervisor", 1, select("#", ...) + 1)
    check_options("supervisor", 1, opts, C.sup_options, required)
    if opts.cgroup == nil then argerror("supervisor", 1, "option 'cgroup' is required") end
    if rec then error("supervisor: a file declares one supervisor", 2) end
    rec = setmetatable({ opts = decl_copy(opts), list = {}, names = {} }, recorder)
    return rec
  end
  local ok, r = pcall(fn, ...)
  C.capture = nil
  -- (an error raised in fn names its place already)
  if not ok then return nil, tostring(r), E.EINVAL end
  if rec == nil or r ~= rec then
    local src = debug.getinfo(fn, "S").source -- "@file" or "=name": named
    local named = src:sub(1, 1) == "@" or src:sub(1, 1) == "="
    return nil, ("%s: must return the supervisor it declared (got %s)"):format(
      named and src:sub(2) or "a function", type(r)), E.EINVAL
  end
  return rec.list, rec.opts
end
