--- takana.supervisor, logs: services' output lines to files (rotated) or
-- a function, and the in-memory ring `ctl logs` reads.
-- @module takana.supervisor
local core = require "takana.core"
local C = require "takana.supervisor.class"
local supervisor, OCTAL_0640, OCTAL_0750 = C.supervisor, C.OCTAL_0640, C.OCTAL_0750
local ENOENT = C.E.ENOENT
local find, sub = string.find, string.sub

-- ---- logs ----

-- RFC 3339 in UTC with microseconds, as s6-log's TAI64N and svlogd's
-- stamps resolve lines a service writes in one burst. The date part is
-- formatted once a second: a flood writes many lines a second.
local stamp_sec, stamp_prefix = -1, ""
local function stamp()
  local t = core.realtime()
  local sec = math.floor(t)
  local us = math.floor((t - sec) * 1e6)
  if us > 999999 then us = 999999 end
  if sec ~= stamp_sec then stamp_sec, stamp_prefix = sec, os.date("!%Y-%m-%dT%H:%M:%S", sec) end
  return ("%s.%06dZ"):format(stamp_prefix, us)
end

-- In memory (`logs`), a line is kept to its first 8 KiB: a service's
-- user writing lines of 64 KiB held 50 MB a service (the file gets them
-- whole).
local RING_LINE_MAX = 8192

-- The ring keeps the last k lines, cut back once it holds 2k.
local function trim(ring, k)
  if #ring > k * 2 then
    table.move(ring, #ring - k + 1, #ring, 1)
    for i = #ring, k + 1, -1 do ring[i] = nil end
  end
end

function supervisor:_log_line(svc, stream, line)
  local ring = svc.lines
  ring[#ring + 1] = ("%s %s %s"):format(stamp(), stream, sub(line, 1, RING_LINE_MAX))
  trim(ring, self.log_lines)
  local sink = svc.log
  if sink == nil then sink = self.log end
  if type(sink) == "function" then
    local ok, err = pcall(sink, svc.name, stream, line)
    if not ok then svc.log_error = tostring(err) end
  elseif type(sink) == "string" then
    self:_log_file(svc, sink, ring[#ring] .. "\n")
  end
end

-- Lines read together (body: complete lines, each ending in "\n"), with
-- one stamp, the time they were read: the file gets them in one write,
-- the ring only the last log_lines of them. A function sink gets each.
function supervisor:_log_chunk(svc, stream, body)
  local sink = svc.log
  if sink == nil then sink = self.log end
  if type(sink) == "function" then
    for line in body:gmatch("([^\n]*)\n") do self:_log_line(svc, stream, line) end
    return
  end
  -- (a find loop and one concat: gsub would cost the logger 4x more)
  local prefix, parts, n, s = stamp() .. " " .. stream .. " ", {}, 0, 1
  while true do
    local e = find(body, "\n", s, true)
    if not e then break end
    parts[n + 1], parts[n + 2] = prefix, sub(body, s, e)
    n, s = n + 2, e + 1
  end
  local ring, k = svc.lines, self.log_lines
  for i = math.max(1, n // 2 - k + 1), n // 2 do
    local line = parts[2 * i]
    ring[#ring + 1] = prefix .. sub(line, 1, math.min(#line - 1, RING_LINE_MAX))
  end
  trim(ring, k)
  if type(sink) == "string" then self:_log_file(svc, sink, table.concat(parts)) end
end

-- The log directory at path, opened once and checked (not a directory
-- another user could plant links in): a dir handle, or nil, message, errno.
function supervisor:_logdir(path)
  local d = self.logdirs[path]
  if d then return d end
  local err, errno
  d, err, errno = core.dir_open(path, { create = true, mode = OCTAL_0750 })
  if not d then return nil, err, errno end
  self.logdirs[path] = d
  return d
end

-- Appends text (whole lines) to <dir>/<service>.log, opened beneath the
-- checked directory (never through a link, only a regular file of this
-- user's), rotated by renames within that directory after the line that
-- reaches log_size.
function supervisor:_log_file(svc, dir, text)
  while text ~= "" and not svc.log_halted do
    text = self:_log_write(svc, dir, text)
  end
end

-- Writes text up to the end of the line that fills the file (all of it
-- when it fits), rotating then: what is left.
function supervisor:_log_write(svc, dir, text)
  local name = svc.name .. ".log"
  if not svc.logf then
    local d, err = self:_logdir(dir)
    local f
    if d then f, err = d:append(name, OCTAL_0640) end
    if not f then svc.log_error = tostring(err) return "" end
    svc.log_error = nil
    svc.logf, svc.logd = f, d
    f:setvbuf("full", 65536)
    svc.log_bytes = f:seek("end") or 0
  end
  local room, cut = self.log_size - svc.log_bytes, #text
  if room <= #text then cut = text:find("\n", math.max(room, 1), true) or #text end
  svc.logf:write(cut == #text and text or text:sub(1, cut))
  svc.log_bytes = svc.log_bytes + cut
  text = text:sub(cut + 1)
  if svc.log_bytes >= self.log_size then
    -- Each file moves one place down, the current one last (it stays open
    -- meanwhile). A rename that fails (something else at a name: a
    -- directory planted in a sticky log directory) stops file logging for
    -- this run with the reason: nothing is removed that was not moved
    -- first, and the file does not grow past log_size (lines stay in
    -- memory for `ctl logs`).
    local d = svc.logd
    for i = self.log_files - 1, 1, -1 do
      local ok, rerr, rerrno = d:rename(i == 1 and name or (name .. "." .. (i - 1)), name .. "." .. i)
      if not ok and rerrno ~= ENOENT then
        svc.log_error = "rotation: " .. tostring(rerr) .. "; file logging stopped until the next run"
        svc.log_halted = true
        svc.logf:close()
        svc.logf = nil
        return ""
      end
    end
    svc.logf:close()
    svc.logf = nil
    if self.log_files <= 1 then d:unlink(name) end
  end
  return text
end

-- Reads what one pipe holds, at most 256 KiB a call so that a flood from
-- one service cannot starve the others or the control socket: true when
-- there may be more.
function supervisor:_drain(svc, which)
  local p = svc[which]
  if not p then return end
  local stream = which == "out" and "stdout" or "stderr"
  local key = which .. "_partial"
  -- At most 4 reads a wake-up: a flood never keeps the loop from the
  -- control socket (the pipe stays readable, so the loop comes back).
  -- A function sink is called a line: 16 KiB a wake-up (a pipe of empty
  -- lines was a million calls a second).
  local sink = svc.log
  if sink == nil then sink = self.log end
  local size = type(sink) == "function" and 4096 or 65536
  local more = true
  for _ = 1, 4 do
    local data = p:read(size) -- what is there now; "" nothing yet; nil at EOF (or error)
    if data == "" then more = false break end
    if data == nil then
      if svc[key] and svc[key] ~= "" then self:_log_line(svc, stream, svc[key]) end
      svc[key] = nil
      self:_unwatch(p)
      p:close()
      svc[which] = nil
      if svc.logf then svc.logf:flush() end
      return
    end
    local buf = (svc[key] or "") .. data
    local r = data:reverse():find("\n", 1, true)
    if r then
      local cut = #buf - r + 1 -- the last newline
      self:_log_chunk(svc, stream, buf:sub(1, cut))
      buf = buf:sub(cut + 1)
    end
    if #buf > 65536 then
      self:_log_line(svc, stream, buf)
      buf = ""
    end
    svc[key] = buf
  end
  if svc.logf then svc.logf:flush() end
  return more
end
