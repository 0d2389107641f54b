-- takana.supervisor.class: the supervisor class and what the parts of
-- takana.supervisor (init, service, notify, log, control) share. Internal:
-- not part of the API, and left out of the reference.
local takana = require "takana"
local core = require "takana.core"
local util = require "takana.util"

local C = {}

-- The module's table: what require "takana.supervisor" returns.
local M = {}
C.M = M

C.E = core.errno
local argerror = util.argerror
C.argerror, C.nargs, C.check_options = argerror, util.nargs, util.check_options

function C.now() return (takana.now or core.monotime)() end

local function signum(fname, n, sig)
  local ok, s = pcall(core.signum, sig) -- the C parser every signal name goes through
  if ok and s >= 1 then return s end
  argerror(fname, n, "a signal number or name (TERM, KILL, HUP...) expected, got " .. tostring(sig))
end
C.signum = signum

-- The supervisor class: each part adds its methods to this one table.
local supervisor = {}
supervisor.__index = supervisor
M.Supervisor = supervisor
C.supervisor = supervisor

local required = { required = true }
C.required = required

local OCTAL_0600, OCTAL_0640, OCTAL_0700, OCTAL_0711, OCTAL_0750 = 384, 416, 448, 457, 488
C.OCTAL_0666 = 438

-- A unix socket address holds 107 bytes of path: a runtime directory
-- leaves room for "/_NNNN.notify" beneath it.
local SUN_PATH_MAX, RUNTIME_PATH_MAX = 107, 94
C.OCTAL_0600, C.OCTAL_0640, C.OCTAL_0700, C.OCTAL_0711, C.OCTAL_0750 = OCTAL_0600, OCTAL_0640, OCTAL_0700, OCTAL_0711,
  OCTAL_0750
C.SUN_PATH_MAX, C.RUNTIME_PATH_MAX = SUN_PATH_MAX, RUNTIME_PATH_MAX

-- Supervisors open in this process: what one reaps must be no other's.
local live = setmetatable({}, { __mode = "k" })
C.live = live

local function populated(cg)
  local st = cg:state()
  if st and not st.populated then return false end
  local p = cg:procs()
  if p == nil then return true end
  if #p > 0 then return true end
  -- A sub-cgroup may hold processes: then cgroup.events is trusted.
  return #(cg:children() or {}) > 0
end

local function oom_count(cg)
  local s = cg:get("memory.events")
  return s and tonumber(s:match("oom_kill (%d+)")) or nil
end

-- (cpu.stat alone: stat() would keep a descriptor a file, and a
-- supervisor holds a handle a service)
local function cpu_ns(cg)
  local s = cg:get("cpu.stat")
  local us = s and tonumber(s:match("usage_usec (%d+)"))
  return us and us * 1000 or nil
end
C.populated, C.oom_count, C.cpu_ns = populated, oom_count, cpu_ns

local function close_obj(self, o)
  if o then self:_unwatch(o); o:close() end
end
C.close_obj = close_obj

-- The status of an exited MAINPID process, where it was re-parented to us
-- (subreaper) and so is ours to reap.
local function main_status(svc)
  local st = svc.mainfd:wait(0)
  if st then svc.status, svc.usage = st, svc.mainfd:usage() end
end
C.main_status = main_status

-- A declaration as given, kept for a reload to compare with the next one:
-- tables are copied (cycles kept as cycles), functions and userdata kept.
local function decl_copy(v, seen)
  if type(v) ~= "table" then return v end
  seen = seen or {}
  if seen[v] then return seen[v] end
  local c = {}
  seen[v] = c
  for k, x in pairs(v) do c[decl_copy(k, seen)] = decl_copy(x, seen) end
  return c
end
C.decl_copy = decl_copy

-- Whether two declared values are the same: tables by content, functions
-- by their code (a file read again makes new closures of the same source;
-- the values of their upvalues are not compared), anything else by ==.
local function same(a, b, seen)
  if a == b then return true end
  local ta = type(a)
  if ta ~= type(b) then return false end
  if ta == "function" then
    local oka, da = pcall(string.dump, a, true)
    local okb, db = pcall(string.dump, b, true)
    return oka and okb and da == db
  end
  if ta ~= "table" then return false end
  seen = seen or {}
  if seen[a] == b then return true end
  seen[a] = b
  for k, x in pairs(a) do
    if not same(x, b[k], seen) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end
C.same = same

return C
