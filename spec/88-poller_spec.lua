-- takana.poller (issue 26): one epoll set kept across waits. Real pidfds
-- (spawned children), pipes, timers and sockets; no timings, only bounds.
local takana = require "takana"
local core = require "takana.core"
local H = require "helpers"

local function pipe() return assert(core.pipe()) end

-- A child that exits when its stdin closes: its pidfd turns readable then.
local function child()
  local c = assert(takana.spawn { "/bin/sh", "-c", "read x", stdin = "pipe" })
  return c
end

describe("takana.poller", function()
  it("adds, waits, modifies and removes pipes", function()
    local p = assert(takana.poller())
    local r, w = pipe()
    assert.is_true(p:add(r))
    local ready, n = p:wait(0)
    assert.same({}, ready)
    assert.equal(0, n)
    assert.equal(3, w:write("abc"))
    ready, n = p:wait(1)
    assert.equal(1, n)
    assert.equal(r, ready[1])
    assert.is_nil(ready[2])
    -- level-triggered: still ready until read
    assert.equal(r, p:wait(0)[1])
    assert.equal("abc", r:read())
    assert.same({}, p:wait(0))
    -- the write end, waited for as writable (its own events() is "w")
    assert.is_true(p:add(w))
    assert.same({ w }, p:wait(0))
    -- modify: the read end waited for as writable never is; as readable
    -- after a write it is
    assert.is_true(p:modify(w, "r"))
    assert.same({}, p:wait(0))
    assert.is_true(p:modify(w, "w"))
    assert.same({ w }, p:wait(0))
    assert.is_true(p:remove(w))
    assert.is_false(p:remove(w))
    assert.same({}, p:wait(0))
    assert.is_true(p:remove(r))
    assert.is_false(p:remove(r))
    r:close() w:close() p:close()
  end)

  it("reuses its result table and clears what the last wait left", function()
    local p = assert(takana.poller())
    local r1, w1 = pipe()
    local r2, w2 = pipe()
    p:add(r1) p:add(r2)
    w1:write("x") w2:write("y")
    local t1, n1 = p:wait(1)
    assert.equal(2, n1)
    local seen = { [t1[1]] = true, [t1[2]] = true }
    assert.is_true(seen[r1] and seen[r2])
    r1:read()
    local t2, n2 = p:wait(1)
    assert.equal(t1, t2) -- the same table
    assert.equal(1, n2)
    assert.same({ r2 }, t2)
    r2:read()
    local t3, n3 = p:wait(0)
    assert.equal(t1, t3)
    assert.equal(0, n3)
    assert.is_nil(t3[1])
    for _, o in ipairs { r1, w1, r2, w2, p } do o:close() end
  end)

  it("reports a child's exit through its pidfd, and a timer", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local p = assert(takana.poller())
    local c = child()
    local t = assert(takana.timer(0.01))
    assert.is_true(p:add(c))
    assert.is_true(p:add(t))
    local ready = p:wait(5)
    assert.same({ t }, ready)
    assert.equal(1, t:read())
    assert.same({}, p:wait(0))
    c.stdin:close()
    local got
    for _ = 1, 50 do
      got = p:wait(0.1)
      if got[1] then break end
    end
    assert.same({ c }, got)
    local st = assert(c:wait())
    assert.is_true(st.exited)
    p:close() c:close() t:close()
  end)

  it("times out: 0 and a short wait return an empty table; nil waits for readiness", function()
    local p = assert(takana.poller())
    local r, w = pipe()
    p:add(r)
    assert.same({}, p:wait(0))
    assert.same({}, p:wait(0.02))
    w:write("x")
    assert.same({ r }, p:wait()) -- nil: until ready, which it is
    assert.same({ r }, p:wait(nil))
    r:close() w:close() p:close()
  end)

  it("takes a closed object out: its descriptor number reused is not reported", function()
    local p = assert(takana.poller())
    local r, w = pipe()
    local fd = r:fileno()
    p:add(r)
    w:write("x")
    assert.same({ r }, p:wait(0))
    r:close()
    assert.same({}, p:wait(0))
    assert.is_false(p:remove(r)) -- closing took it out
    -- a new pipe gets the same number, readable at once; not registered
    local r2, w2 = pipe()
    local nr = r2:fileno() == fd and r2 or w2
    assert.equal(fd, nr:fileno())
    w2:write("y")
    assert.same({}, p:wait(0))
    -- and it can be registered itself
    assert.is_true(p:add(r2))
    assert.same({ r2 }, p:wait(0))
    -- a closed object raises on add and modify
    assert.has_error(function() p:add(r) end, "attempt to use a closed pipe")
    assert.has_error(function() p:modify(r, "r") end, "attempt to use a closed pipe")
    r2:close() w2:close() w:close() p:close()
  end)

  it("a closed object forked into a child stays out (the file lives on there)", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local p = assert(takana.poller())
    local r, w = pipe()
    p:add(r)
    w:write("x")
    -- a child holding a copy of the read end: the file outlives our close,
    -- and an epoll registration of it would too, firing for nothing
    local c = assert(takana.spawn { "/bin/sh", "-c", "read x <&3", fds = { [3] = r }, stdin = "pipe" })
    r:close()
    assert.same({}, p:wait(0))
    c.stdin:close()
    assert(c:wait())
    c:close() w:close() p:close()
  end)

  it("a raw descriptor: reported as its number; closed under the poller, told apart", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local p = assert(takana.poller())
    local r, w = pipe()
    local fd = r:fileno()
    assert.is_true(p:add(fd))
    w:write("x")
    assert.same({ fd }, p:wait(0))
    assert.is_true(p:modify(fd, "r"))
    assert.is_true(p:remove(fd))
    assert.is_true(p:add(fd))
    -- closed behind the poller's back while a child holds the file (so its
    -- registration lives on in the kernel); the number goes to a new pipe
    local c = assert(takana.spawn { "/bin/sh", "-c", "read x", fds = { [3] = r }, stdin = "pipe" })
    r:close()
    local r2, w2 = pipe()
    assert.equal(fd, r2:fileno())
    -- the old file is ready (it still holds "x"): not reported, dropped
    assert.same({}, p:wait(0))
    assert.is_false(p:remove(fd))
    -- the new file under that number registers and reports as itself
    assert.is_true(p:add(r2))
    w2:write("y")
    local got = p:wait(0)
    assert.equal(r2, got[1])
    assert.equal("y", r2:read())
    c.stdin:close()
    assert(c:wait())
    -- closed with no other holder: remove finds another file there, and
    -- leaves it registered
    local r3, w3 = pipe()
    local fd3 = r3:fileno()
    p:add(fd3)
    r3:close()
    local r4, w4 = pipe()
    assert.equal(fd3, r4:fileno())
    p:add(r4)
    assert.is_true(p:remove(fd3))
    w4:write("z")
    assert.same({ r4 }, p:wait(0))
    for _, o in ipairs { c, r2, w2, w, w3, r4, w4, p } do o:close() end
  end)

  it("a foreign object with fileno() and events()", function()
    local p = assert(takana.poller())
    local r, w = pipe()
    local obj = { fileno = function() return r:fileno() end, events = function() return "r" end }
    assert.is_true(p:add(obj))
    w:write("x")
    assert.same({ obj }, p:wait(0))
    assert.is_true(p:remove(obj))
    local bad = { fileno = function() return nil, "gone", 9 end }
    local ok, err, errno = p:add(bad)
    assert.is_nil(ok)
    assert.equal("poller add: gone", err)
    assert.equal(9, errno)
    r:close() w:close() p:close()
  end)

  it("nests: a poller in a poller, and in takana.poll", function()
    local outer = assert(takana.poller())
    local inner = assert(takana.poller())
    local r, w = pipe()
    inner:add(r)
    assert.is_true(outer:add(inner))
    assert.same({}, outer:wait(0))
    w:write("x")
    assert.same({ inner }, outer:wait(1))
    assert.same({ inner }, takana.poll({ inner }, 1))
    assert.same({ r }, inner:wait(0))
    inner:close()
    assert.same({}, outer:wait(0)) -- closing it took it out
    assert.is_false(outer:remove(inner))
    r:close() w:close() outer:close()
  end)

  it("gives errno on a runtime failure", function()
    local p = assert(takana.poller())
    local ok, err, errno = p:add(987654)
    assert.is_nil(ok)
    assert.matches("^poller add: ", err)
    assert.equal(core.errno.EBADF, errno)
    -- a directory: epoll cannot wait for it
    local d = assert(core.dir_open("/tmp"))
    ok, err, errno = p:add(d)
    assert.is_nil(ok)
    assert.matches("^poller add: ", err)
    assert.equal(core.errno.EPERM, errno)
    assert.is_false(p:remove(d)) -- nothing was recorded
    d:close()
    local r, w = pipe()
    p:add(r)
    ok, err, errno = p:add(r:fileno()) -- the same file under another key
    assert.is_nil(ok)
    assert.matches("^poller add: ", err)
    assert.equal(core.errno.EEXIST, errno)
    r:close() w:close() p:close()
  end)

  it("raises on a caller's mistakes", function()
    local p = assert(takana.poller())
    local r, w = pipe()
    assert.has_error(function() takana.poller(1) end)
    assert.has_error(function() p:add() end)
    assert.has_error(function() p:add(nil) end)
    assert.has_error(function() p:add("3") end)
    assert.has_error(function() p:add(true) end)
    assert.has_error(function() p:add(-1) end)
    assert.has_error(function() p:add(2 ^ 40) end)
    assert.has_error(function() p:add(1.5) end)
    assert.has_error(function() p:add({}) end)
    assert.has_error(function() p:add({ fileno = function() return "x" end }) end)
    assert.has_error(function() p:add(io.stdout) end)
    assert.has_error(function() p:add(r, "x") end)
    assert.has_error(function() p:add(r, "") end)
    assert.has_error(function() p:add(r, 1) end)
    assert.has_error(function() p:add(r, "r", 1) end)
    assert.is_true(p:add(r))
    assert.has_error(function() p:add(r) end,
      "bad argument #1 to 'add' (already registered in this poller (modify() changes its events))")
    assert.has_error(function() p:modify(w, "r") end, "bad argument #1 to 'modify' (not registered in this poller)")
    assert.has_error(function() p:modify(r) end)
    assert.has_error(function() p:modify(r, "rx") end)
    assert.has_error(function() p:remove() end)
    assert.has_error(function() p:wait(-1) end)
    assert.has_error(function() p:wait(1e12) end)
    assert.has_error(function() p:wait("x") end)
    assert.has_error(function() p:wait(0, 1) end)
    assert.has_error(function() p.wait(r, 0) end)
    p:close()
    p:close() -- twice is fine
    assert.equal("takana.Poller (closed)", tostring(p))
    for _, f in ipairs {
      function() p:add(w) end, function() p:modify(r, "r") end, function() p:remove(r) end,
      function() p:wait(0) end, function() p:fileno() end,
    } do
      assert.has_error(f, "attempt to use a closed poller")
    end
    -- closing the poller closed none of its objects
    assert.equal("", r:read())
    r:close() w:close()
  end)

  it("keeps the descriptor count flat over many adds, waits and closes", function()
    local function round()
      local p = assert(takana.poller())
      for _ = 1, 20 do
        local r, w = pipe()
        p:add(r)
        w:write("x")
        p:wait(0)
        if math.random() < 0.5 then p:remove(r) end
        r:close() w:close()
      end
      p:close()
      takana.poll({}, 0)
    end
    round()
    collectgarbage() collectgarbage()
    local before = H.count_fds()
    for _ = 1, 50 do round() end
    -- dropped pollers too: their collection closes them
    for _ = 1, 200 do
      local p, r, w = assert(takana.poller()), pipe()
      p:add(r)
      r = nil -- luacheck: ignore
      w:close()
    end
    collectgarbage() collectgarbage()
    assert.equal(before, H.count_fds())
  end)
end)

describe("takana.poll over a kept set", function()
  it("keeps its behaviour: order given, duplicates, writable, timeouts", function()
    local r, w = pipe()
    assert.same({}, takana.poll({ r }, 0))
    w:write("x")
    assert.same({ r, r }, takana.poll({ r, r }, 0))
    assert.same({ w, r }, takana.poll({ w, r }, 0))
    r:read()
    assert.same({ w }, takana.poll({ r, w }, 0.01))
    assert.same({}, takana.poll({}, 0))
    r:close() w:close()
  end)

  it("makes one epoll set per Lua state, not one per call", function()
    if not os.execute("command -v strace >/dev/null 2>&1") then return pending("needs strace") end
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
      package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
      package.cpath = "./?.so;" .. package.cpath
      local takana = require "takana"
      local t = assert(takana.timer(0.001, 0.001))
      for _ = 1, 100 do takana.poll({ t }, 1) t:read() end
      local p = assert(takana.poller())
      p:add(t)
      for _ = 1, 100 do p:wait(1) t:read() end
    ]])
    f:close()
    local _, out = H.run("strace -f -e trace=epoll_create1 " .. H.lua .. " " .. script .. " 2>&1")
    os.remove(script)
    local n = 0
    for _ in out:gmatch("epoll_create1%(") do n = n + 1 end
    assert.equal(2, n) -- takana.poll's, the poller's
  end)
end)

describe("bpf event streams and the poller #root #bpf", function()
  local function link(o) return require("luv").fs_readlink("/proc/" .. H.pid .. "/fd/" .. o:fileno()) end

  -- Until ev shows the fork of a child it starts, polling through p: true
  -- once seen. These rings hold some 30 events, which a busy host fills
  -- in a moment: when ev says it lost events before ours showed (ours may
  -- be among them), another child is started, at most 5 times. With
  -- later, that stream must then show the same fork, read only after ev
  -- has seen it (a stream sharing ev's ring: from its inbox).
  local function sees_fork(p, ev, later)
    local function until_seen(stream, pid)
      local seen, lost = false, false
      -- (p:wait returns at once while another stream of p is unread.)
      local deadline = H.boottime_ns() + 5e9
      while not (seen or lost) and H.boottime_ns() < deadline do
        for e in assert(stream:read()) do
          if e.type == "fork" and e.pid == pid then seen = true end
          if e.type == "lost" then lost = true end
        end
        if not (seen or lost) then p:wait(0.1) end
      end
      return seen, lost
    end
    for _ = 1, 5 do
      for _ in assert(ev:read()) do end
      if later then for _ in assert(later:read()) do end end
      local c = assert(takana.spawn { "/bin/true" })
      local seen, lost = until_seen(ev, c.pid)
      if seen and later then
        -- ev's read drained the ring: later's copy is in its inbox.
        local waited = p:wait(5)
        local ready = false
        for _, o in ipairs(waited) do ready = ready or o == later end
        seen, lost = until_seen(later, c.pid)
        seen = seen and ready
      end
      c:wait() c:close()
      if seen or not lost then return seen end
    end
    return false
  end

  it("a lone stream polls its ring itself; streams sharing a ring, a set and an eventfd", function()
    if H.no_spawn then return pending(H.no_spawn) end
    local s1, why = takana.events { "fork", backend = "bpf", buffer = 8192 }
    if not s1 then return pending(why) end
    -- the ring's own descriptor: a bpf map, no epoll set of the stream's
    assert.equal("anon_inode:bpf-map", link(s1))
    local s2 = assert(takana.events { "fork", backend = "bpf", buffer = 8192 })
    assert.equal("anon_inode:[eventpoll]", link(s2))
    local p = assert(takana.poller())
    assert(p:add(s1)) assert(p:add(s2))
    assert.is_true(sees_fork(p, s1))
    assert.is_true(sees_fork(p, s2))
    -- a third stream of that size shares the second's ring, even with the
    -- first gone
    s1:close()
    local s3 = assert(takana.events { "fork", backend = "bpf", buffer = 8192 })
    assert.equal("anon_inode:[eventpoll]", link(s3))
    assert(p:add(s3))
    assert.is_true(sees_fork(p, s2))
    assert.is_true(sees_fork(p, s3))
    -- what s2's fill takes from the shared ring for s3 waits in s3's
    -- inbox, and its eventfd wakes p
    assert.is_true(sees_fork(p, s2, s3))
    s2:close() s3:close()
    -- none left: the next is alone again
    local s4 = assert(takana.events { "fork", backend = "bpf", buffer = 8192 })
    assert.equal("anon_inode:bpf-map", link(s4))
    s4:close()
    assert.same({}, p:wait(0))
    p:close()
  end)
end)
