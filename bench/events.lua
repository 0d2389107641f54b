-- make bench: process events. A storm (a generator forking and reaping
-- short processes with vfork as fast as it can for 5 s) checks that events
-- received plus events reported lost equal the generator's count, per
-- backend and buffer size; a trickle (a child every 20 ms) gives the
-- latency from the kernel's event to the event in Lua, next to polling
-- /proc at 10 Hz, and next to bench/events_reader, a bare-C reader of the
-- same kernel interfaces blocked in epoll, in alternating rounds (ROUNDS,
-- default 3) of the same run: the ratio is takana's median over the C one.
-- The connector's fork events carry the child's uid, gid and loginuid,
-- which the socket does not: a third reader ("bare C+ids") does those
-- /proc reads too, to show what is takana's and what is /proc's.
--
-- LATENCY_ONLY=1 (or the argument "latency") runs the latency rounds alone.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./?.so;./bench/?.so;" .. package.cpath
local takana = require "takana"
local cb = require "takana_bench"

local STORM_S = tonumber(os.getenv("STORM_S") or "") or 5
local TRICKLE = tonumber(os.getenv("TRICKLE") or "") or 200
local ROUNDS = tonumber(os.getenv("ROUNDS") or "") or 3
local LATENCY_ONLY = os.getenv("LATENCY_ONLY") == "1" or (arg and arg[1] == "latency")

local function start(args)
  local argv = { "./spec/fixture", stdout = "pipe" }
  for i, a in ipairs(args) do argv[i + 1] = tostring(a) end
  local child = assert(takana.spawn(argv))
  local ready = child.stdout:read("l")
  assert(ready and ready:match("^ready"), "generator did not start")
  return child
end

-- Drains until the generator has exited and the stream is quiet, waiting
-- in a poller kept across waits (a loop's way: takana.poll would register
-- the stream anew each time).
local function drain(ev, child, on_event)
  local quiet_since, woke
  -- (A takana without pollers, to compare against: takana.poll each time.)
  local p = takana.poller and assert(takana.poller())
    or { wait = function(_, t) return takana.poll({ ev }, t) end, close = function() end }
  if takana.poller then assert(p:add(ev)) end
  while true do
    local n = 0
    for e in assert(ev:read()) do
      n = n + 1
      on_event(e, woke)
    end
    if n == 0 and not child:alive() then
      quiet_since = quiet_since or cb.now_ns()
      if cb.now_ns() - quiet_since > 300e6 then p:close() return end
    else
      quiet_since = nil
    end
    p:wait(0.05)
    woke = cb.boottime_ns()
  end
end

local function storm(backend, buffer)
  local ev, why = takana.events { "fork", "exit", backend = backend, buffer = buffer }
  if not ev then
    print(("  %-10s %-10s unavailable: %s"):format(backend, "", why))
    return
  end
  local child = start { "--churn", tostring(STORM_S) }
  local gen = child.pid
  -- Exits are matched to the generator's forks by pid as well as by ppid:
  -- the connector reports ppid 0 when the parent reaped first.
  local forks, exits, lost_markers, pending, all = 0, 0, 0, {}, 0
  -- The reader's own CPU (the generator is another process) per event
  -- read: what one event costs from the kernel's buffer to a Lua table.
  local cpu0 = os.clock()
  drain(ev, child, function(e)
    all = all + 1
    if e.type == "fork" and e.ppid == gen then
      forks = forks + 1
      pending[e.pid] = true
    elseif e.type == "exit" and (pending[e.pid] or e.ppid == gen) then
      exits = exits + 1
      pending[e.pid] = nil
    elseif e.type == "lost" then
      lost_markers = lost_markers + (e.count or 1)   -- nil: an overrun, counted as 1
    end
  end)
  local cpu_us = all > 0 and (os.clock() - cpu0) * 1e6 / all or 0
  local truth = tonumber(child.stdout:read("l"):match("^forks (%d+)"))
  child:wait()
  child:close()
  local stats = ev:stats()
  local lost = ev:lost()
  ev:close()
  -- The generator's events are received or counted lost: received <= truth
  -- <= received + lost. Lost counts are per type for bpf (the program knows
  -- what it dropped); the connector's sequence gaps cover every type. Both
  -- include the host's other processes, so with losses the bound is not
  -- tight; without, received must equal truth exactly.
  local by = stats.lost_by_type
  local ok
  if backend == "poll" then
    print(("  %-10s %8s  %7d forks in %.0f s (%6.0f/s)  got fork %7d exit %7d  lossy by design: " ..
      "sees only what lives across a %g s tick  reader %.2f us/event"):format(backend, "-", truth, STORM_S,
      truth / STORM_S, forks, exits, 0.1, cpu_us))
    return
  elseif by then
    ok = forks + by.fork >= truth and exits + by.exit >= truth and forks <= truth and exits <= truth
      and (by.fork > 0 or forks == truth) and (by.exit > 0 or exits == truth)
  else
    ok = forks <= truth and exits <= truth and forks + exits + lost >= 2 * truth
      and (lost > 0 or (forks == truth and exits == truth))
  end
  print(("  %-10s %8s  %7d forks in %.0f s (%6.0f/s)  got fork %7d exit %7d  lost %7d (%5.2f%%)  %s"
    .. "  reader %.2f us/event"):format(
    backend, buffer and ("%dK"):format(buffer // 1024) or "default", truth, STORM_S, truth / STORM_S,
    forks, exits, lost, 100 * lost / (2 * truth),
    ok and "accounted" or "UNACCOUNTED LOSS", cpu_us))
  assert(lost == lost_markers, "lost() and the lost events disagree")
end

local function percentile(t, p)
  table.sort(t)
  return t[math.max(1, math.ceil(#t * p))]
end

-- One trickle read by takana: the latencies (ns), or nil and why. shared:
-- another bpf stream is open first, so this one shares a ring (its own
-- epoll set and eventfd between the ring and the loop: the hop's cost).
local function takana_trickle(backend, interval, shared)
  local other = shared and takana.events { "exit", backend = backend }
  local ev, why = takana.events { "fork", backend = backend, interval = interval }
  if other then other:close() end
  if not ev then return nil, why end
  local child = start { "--trickle", tostring(TRICKLE) }
  local gen = child.pid
  local lat, wake = {}, {}
  drain(ev, child, function(e, woke)
    if e.type == "fork" and e.ppid == gen then
      lat[#lat + 1] = cb.boottime_ns() - e.time_ns
      wake[#wake + 1] = woke and woke > e.time_ns and woke - e.time_ns or 0
    end
  end)
  child:wait()
  child:close()
  ev:close()
  return lat, nil, wake
end

-- One trickle read by bench/events_reader: the latencies, or nil and why.
local function bare_trickle(backend, ids)
  local mode = ids and backend .. "-ids" or backend
  local f = assert(io.popen(("./bench/events_reader %s %d 2>&1"):format(mode, TRICKLE)))
  local lat, wake, why = {}, {}, nil
  for line in f:lines() do
    local ns, w = line:match("^lat (%d+) (%d+)")
    if ns then
      lat[#lat + 1], wake[#wake + 1] = tonumber(ns), tonumber(w)
    else
      why = why or line
    end
  end
  f:close()
  if #lat == 0 then return nil, why or "no events" end
  return lat, nil, wake
end

-- One trickle read by the Lua floor (takana_bench's floor_*): the wait and
-- the kernel's buffer in C, then per fork one table of a fork event's
-- fields built in Lua, as any Lua API handing out a fresh event must. What
-- takana's latency adds over this is takana's own; what this adds over
-- bare C is Lua's (its return from the wait, the table, on cold caches).
local function floor_trickle(backend)
  local ev, why
  if backend == "bpf" then
    -- A solo stream's fd is its ring: read by the floor, not the stream.
    ev, why = takana.events { "fork", backend = "bpf" }
    if not ev then return nil, why end
  end
  cb.floor_open(backend, ev and ev:fileno())
  local child = start { "--trickle", tostring(TRICKLE) }
  local gen = child.pid
  local lat, wake, quiet_since = {}, {}, nil
  while true do
    local n = cb.floor_wait(50, gen)
    for _ = 1, n do
      local e = { type = "fork", time_ns = 0, realtime_ns = 0, pid = 0, tid = 0, ppid = gen, comm = "fixture",
        uid = 0, gid = 0, loginuid = 0, cgroup_id = 0, observed = false }
      if e.type == "fork" and e.ppid == gen then
        lat[#lat + 1], wake[#wake + 1] = cb.floor_took()
      end
    end
    if n == 0 and not child:alive() then
      quiet_since = quiet_since or cb.now_ns()
      if cb.now_ns() - quiet_since > 300e6 then break end
    else
      quiet_since = nil
    end
  end
  cb.floor_close()
  child:wait()
  child:close()
  if ev then ev:close() end
  return lat, nil, wake
end

local function line(name, lat)
  return ("  %-24s %4d/%d events  median %9.1f us  p99 %9.1f us  max %9.1f us"):format(
    name, #lat, TRICKLE, percentile(lat, 0.5) / 1e3, percentile(lat, 0.99) / 1e3, percentile(lat, 1.0) / 1e3)
end

local function latency(backend, interval)
  local lat, why = takana_trickle(backend, interval)
  if not lat then
    print(("  %-22s unavailable: %s"):format(backend, why))
    return
  end
  if #lat == 0 then
    print(("  %-22s no events"):format(backend))
    return
  end
  print(line(backend .. (interval and (" @ %g Hz"):format(1 / interval) or ""), lat)
    .. (backend == "poll" and "  (from the start time /proc gives, in 10 ms ticks)" or ""))
  return percentile(lat, 0.5)
end

-- takana against the bare-C reader, rounds alternating between them. Each
-- latency is split at the return from the wait that brought the event: the
-- wakeup before it is the kernel's and the scheduler's (where it placed the
-- reader and the generator moves it by tens of us either way, for C as for
-- Lua), what follows is the reader's own work.
local function latency_rounds()
  print(("== latency: kernel event -> event in Lua, %d forks 20 ms apart; %d rounds alternating "
    .. "takana and bench/events_reader (bare C, blocked in epoll) =="):format(TRICKLE, ROUNDS))
  local all, wakes, after = {}, {}, {}
  for r = 1, ROUNDS do
    for _, b in ipairs { "bpf", "connector" } do
      local whos = r % 2 == 1 and { "takana", "bare C" } or { "bare C", "takana" }
      whos[3] = b == "bpf" and "shared" or "bare C+ids"
      whos[4] = "Lua floor"
      for _, who in ipairs(whos) do
        local lat, why, wake
        if who == "Lua floor" then
          lat, why, wake = floor_trickle(b)
        elseif who:match("^bare C") then
          lat, why, wake = bare_trickle(b, who == "bare C+ids")
        else
          lat, why, wake = takana_trickle(b, nil, who == "shared")
        end
        local key = b .. "/" .. who
        if lat and #lat > 0 then
          all[key], wakes[key], after[key] = all[key] or {}, wakes[key] or {}, after[key] or {}
          for i, ns in ipairs(lat) do
            table.insert(all[key], ns)
            table.insert(wakes[key], wake[i])
            -- an event that came while the reader was busy: all its own
            table.insert(after[key], wake[i] > 0 and ns - wake[i] or ns)
          end
          print(line(("%s %s #%d"):format(b, who, r), lat))
        else
          print(("  %-24s unavailable: %s"):format(("%s %s #%d"):format(b, who, r), why or "no events"))
        end
      end
    end
  end
  print()
  print(("  %-22s %12s %12s %16s"):format("median, us", "total", "the wakeup", "after the wakeup"))
  for _, key in ipairs { "bpf/bare C", "bpf/Lua floor", "bpf/takana", "bpf/shared", "connector/bare C",
      "connector/bare C+ids", "connector/Lua floor", "connector/takana" } do
    if all[key] then
      print(("  %-22s %12.1f %12.1f %16.1f"):format(key, percentile(all[key], 0.5) / 1e3,
        percentile(wakes[key], 0.5) / 1e3, percentile(after[key], 0.5) / 1e3))
    end
  end
  print()
  print(("  %-10s %14s %14s %8s  %s"):format("backend", "bare C median", "takana median", "ratio", "target <= 1.2x"))
  local function ratio(label, c, t, note)
    if not (all[c] and all[t]) then return end
    local mc, mt = percentile(all[c], 0.5), percentile(all[t], 0.5)
    print(("  %-10s %11.1f us %11.1f us %7.2fx  %s"):format(label, mc / 1e3, mt / 1e3, mt / mc,
      note or (mt / mc <= 1.2 and "met" or "MISSED")))
  end
  ratio("bpf", "bpf/bare C", "bpf/takana")
  ratio("connector", "connector/bare C", "connector/takana")
  ratio("conn. ids", "connector/bare C+ids", "connector/takana",
    "(bare C doing the same /proc reads of the child's ids)")
  ratio("bpf shared", "bpf/bare C", "bpf/shared", "(a stream sharing its ring: epoll set + eventfd hop)")
  ratio("bpf floor", "bpf/bare C", "bpf/Lua floor", "(C's wait and read, one fresh table per event in Lua)")
  ratio("conn floor", "connector/bare C", "connector/Lua floor", "(the same over the connector, no ids)")
  ratio("bpf/floor", "bpf/Lua floor", "bpf/takana", "(takana over the Lua floor)")
  ratio("conn/floor", "connector/Lua floor", "connector/takana", "(takana over the Lua floor, ids included)")
  print()
end

if LATENCY_ONLY then
  latency_rounds()
  return
end

-- ONLY=exec runs the exec storms alone; ONLY=storm the fork storms alone;
-- ONLY=drain the drain cost alone (LATENCY_ONLY=1: the latency alone).
local ONLY = os.getenv("ONLY")

-- What one fork or exec event costs the reader, from the kernel's buffer to
-- a Lua table, with its processes alive (the connector reads /proc for
-- their argv and ids): N sleepers are spawned with the stream unread, then
-- one drain is timed in the reader's CPU, five times; the median.
local DRAIN_N = tonumber(os.getenv("DRAIN_N") or "") or 300
local function drain_cost(backend)
  local per = {}
  for round = 1, 5 do
    local ev, why = takana.events { "fork", "exec", backend = backend, buffer = 16 << 20 }
    if not ev then
      print(("  %-10s unavailable: %s"):format(backend, why))
      return
    end
    local kids = {}
    for i = 1, DRAIN_N do kids[i] = assert(takana.spawn { "/bin/sleep", "30" }) end
    local c0, n = os.clock(), 0
    for _ = 1, 3 do for _ in assert(ev:read()) do n = n + 1 end end
    per[round] = (os.clock() - c0) * 1e6 / n
    for _, k in ipairs(kids) do
      k:signal("KILL")
      k:wait()
      k:close()
    end
    ev:close()
  end
  table.sort(per)
  print(("  %-10s %d processes' fork and exec  reader %.2f us/event (median of 5; %.2f..%.2f)"):format(
    backend, DRAIN_N, per[3], per[1], per[5]))
end
if ONLY == nil or ONLY == "drain" then
  print("== drain: reader CPU per fork or exec event, its process alive ==")
  for _, b in ipairs { "bpf", "connector" } do drain_cost(b) end
  print()
  if ONLY == "drain" then return end
end
if ONLY ~= "exec" then
print(("== event storm: vfork+exit+reap for %d s; received + reported lost vs the generator's count =="):format(STORM_S))
for _, run in ipairs {
  { "bpf", 4096 }, { "bpf", 64 * 1024 }, { "bpf", nil },
  { "connector", 4096 }, { "connector", 256 * 1024 }, { "connector", nil },
  { "poll", nil },
} do
  storm(run[1], run[2])
end
print()
end
-- Exec storms: the share of the storm's exec events that name the program
-- completely (argv exactly the ten arguments given), per backend, at about
-- 1,000 and 20,000 execs a second (as fast as this host manages, said so).
local STORM_ARGV = { "/bin/true", "storm", "a b", "", "arg-4", "arg-5", "arg-6", "arg-7", "arg-8", "arg-9" }
local EXEC_S = tonumber(os.getenv("EXEC_S") or "") or 2

local function same_argv(a)
  if not a or #a ~= #STORM_ARGV then return false end
  for i, v in ipairs(STORM_ARGV) do if a[i] ~= v then return false end end
  return true
end

local function exec_storm(backend, rate)
  local ev, why = takana.events { "exec", backend = backend }
  if not ev then
    print(("  %-10s %6d/s  unavailable: %s"):format(backend, rate, why))
    return
  end
  cb.exec_storm_start(rate, EXEC_S, rate > 2000 and 8 or 2)
  -- Sorted out once the storm is over: a worker can exec before its pid
  -- is known here.
  local seen, quiet_since, all = {}, nil, 0
  local t0, cpu0 = cb.now_ns(), os.clock()
  while true do
    local n = 0
    for e in assert(ev:read()) do
      n = n + 1
      all = all + 1
      if e.type == "exec" and e.ppid then
        seen[#seen + 1] = { e.ppid, same_argv(e.argv) and not e.argv_truncated, e.argv_lost }
      end
    end
    if n == 0 and not cb.exec_storm_alive() then
      quiet_since = quiet_since or cb.now_ns()
      if cb.now_ns() - quiet_since > 300e6 then break end
    else
      quiet_since = nil
    end
    takana.poll({ ev }, 0.05)
  end
  local cpu_us = all > 0 and (os.clock() - cpu0) * 1e6 / all or 0
  local truth = cb.exec_storm_wait()
  local workers, got, complete, lost_argv = {}, 0, 0, 0
  for _, w in ipairs(cb.exec_storm_workers()) do workers[w] = true end
  for _, e in ipairs(seen) do
    if workers[e[1]] then
      got = got + 1
      if e[2] then complete = complete + 1 end
      if e[3] then lost_argv = lost_argv + 1 end
    end
  end
  local secs = (cb.now_ns() - t0) / 1e9
  local lost = ev:lost()
  ev:close()
  print(("  %-10s asked %6d/s  ran %7d execs (%6.0f/s)  events %7d  complete argv %7d (%5.1f%% of execs)"
    .. "  argv_lost %6d  lost events %d  reader %.2f us/event"):format(
    backend, rate, truth, truth / EXEC_S, got, complete, truth > 0 and 100 * complete / truth or 0, lost_argv, lost,
    cpu_us))
  return secs
end

if ONLY == "storm" then return end
print(("== exec storm: /bin/true with ten arguments for %g s; exec events whose argv is complete =="):format(EXEC_S))
for _, rate in ipairs { 1000, 20000 } do
  for _, b in ipairs { "bpf", "connector" } do exec_storm(b, rate) end
end
print()

if ONLY == "exec" then return end
latency_rounds()
print(("== latency: poll, kernel event -> event in Lua, %d forks 20 ms apart =="):format(TRICKLE))
latency("poll", 0.1)
print()
