--- takana: see and steer Linux processes through the cheapest kernel
-- interface available, with a portable fallback for each.
--
-- Error convention (the same in every function):
--
-- * a caller's mistake (wrong type, unknown option, out-of-range number)
--   raises an error;
-- * a runtime failure returns `nil, "context: message", errno`.
--
-- @module takana
local core = require "takana.core"

local M = {
  _VERSION = core._VERSION,
}

local function argerror(fname, n, msg)
  error(("bad argument #%d to '%s' (%s)"):format(n, fname, msg), 3)
end

-- Checks an options table against {name = "lua type"}; unknown keys raise.
local function check_options(fname, n, opts, spec)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    argerror(fname, n, "table expected, got " .. type(opts))
  end
  for k, v in pairs(opts) do
    local want = spec[k]
    if want == nil then
      argerror(fname, n, "unknown option '" .. tostring(k) .. "'")
    end
    if type(v) ~= want then
      argerror(fname, n, ("option '%s': %s expected, got %s"):format(k, want, type(v)))
    end
  end
  return opts
end

local ENOTSUP = 95

local snapshot_backends = { "kfunc", "iter", "proc" }
local known_backend = { auto = true, kfunc = true, iter = true, proc = true }

-- Each BPF tier reports why it cannot run; /proc always can.
local function tier_unavailable(name)
  local why = core.snapshot_unavailable and core.snapshot_unavailable(name)
    or "takana was built without BPF"
  return why
end

local tiers = {
  proc = function(opts)
    return core.snapshot_proc(opts.cache ~= false)
  end,
}

--- Takes a snapshot of every live process.
-- @tparam[opt] table opts
--   `backend`: `"auto"` (default: the best tier that works), `"kfunc"`,
--   `"iter"` or `"proc"`;
--   `cache`: for the proc backend, keep `/proc/<pid>/stat` descriptors open
--   between snapshots (default true).
-- @treturn[1] snapshot one userdata holding every record; `#snap`,
--   `snap.backend`, `snap.time_ns` (CLOCK_BOOTTIME), `snap.vanished`
--   (processes that exited mid-scan and were skipped), `snap.denied`
--   (processes listed but unreadable, as under hidepid).
-- @treturn[2] nil
-- @treturn[2] string why the requested backend cannot run
-- @treturn[2] int errno
function M.snapshot(opts)
  opts = check_options("snapshot", 1, opts, { backend = "string", cache = "boolean" })
  local backend = opts.backend or "auto"
  if not known_backend[backend] then
    argerror("snapshot", 1, "unknown backend '" .. backend .. "' (auto, kfunc, iter or proc)")
  end
  if backend ~= "auto" then
    local take = tiers[backend]
    if not take then
      return nil, ("snapshot: %s backend unavailable: %s"):format(backend, tier_unavailable(backend)), ENOTSUP
    end
    return take(opts)
  end
  for _, name in ipairs(snapshot_backends) do
    local take = tiers[name]
    if take then
      local snap, err, errno = take(opts)
      if snap or name == "proc" then return snap, err, errno end
    end
  end
end

--- CPU used by each process between two snapshots.
-- @function delta
-- @tparam snapshot old
-- @tparam snapshot new
-- @treturn table `interval_ns`, and per pid `cpu_ns[pid]`, `utime_ns[pid]`,
--   `stime_ns[pid]`, `share[pid]` (1.0 = one CPU busy for the whole interval);
--   `started` and `exited`: pid lists in pid order. A pid reused between the
--   two snapshots is in both lists.
M.delta = core.delta

--- Descriptors held by the /proc backend's cache: `{fds=n, limit=n}`.
-- @function proc_cache_info
M.proc_cache_info = core.proc_cache_info

--- Closes the /proc backend's cached descriptors.
-- @function proc_cache_close
M.proc_cache_close = core.proc_cache_close

return M
