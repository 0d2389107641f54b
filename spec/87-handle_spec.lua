-- The handle base every descriptor-owning object shares (csrc/lua/lua_handle.c):
-- one close for close/__gc/__close, one message for a closed object, the
-- poll protocol, and a close that is safe under cqueues.
local takana = require "takana"
local H = require "helpers"

-- One open object of each handle class, and how to make it.
local classes = {
  { kind = "pidfd", open = function() return assert(takana.spawn { "sleep", "30" }) end,
    done = function(p) p:signal("KILL"); p:wait() end, use = function(p) return p:alive() end },
  { kind = "event stream", open = function() return assert(takana.events { backend = "poll" }) end,
    use = function(e) return e:lost() end },
}

for _, class in ipairs(classes) do
  describe("a " .. class.kind, function()
    it("polls through fileno/pollfd, events and timeout, and closes once", function()
      local h = class.open()
      local fd = h:fileno()
      assert.is_true(math.type(fd) == "integer" and fd > 2)
      assert.equal(fd, h:pollfd())
      assert.equal("r", h:events())
      assert.is_nil(h:timeout())
      assert.matches("fd " .. fd, tostring(h))
      if class.done then class.done(h) end
      h:close()
      h:close()
      assert.matches("closed", tostring(h))
      assert.is_false(H.fd_open(fd))
      for _, use in ipairs { class.use, h.fileno, h.events, h.timeout } do
        local ok, err = pcall(use, h)
        assert.is_false(ok)
        assert.matches("attempt to use a closed " .. class.kind, err, 1, true)
      end
    end)

    it("is closed by __close and by the collector", function()
      local fd
      do
        local h <close> = class.open()
        fd = h:fileno()
        if class.done then class.done(h) end
      end
      assert.is_false(H.fd_open(fd))
      local h = class.open()
      fd = h:fileno()
      if class.done then class.done(h) end
      h = nil -- luacheck: ignore 311
      collectgarbage(); collectgarbage()
      assert.is_false(H.fd_open(fd))
    end)

    it("refuses another type as self, without reading it", function()
      local h = class.open()
      local snap = takana.snapshot { backend = "proc" }
      for _, m in ipairs { "close", "fileno", "events", "timeout" } do
        assert.has_error(function() h[m](snap) end)
        assert.has_error(function() h[m]("x") end)
        assert.has_error(function() h[m]() end)
      end
      assert.has_error(function() getmetatable(h).__gc({}) end)
      if class.done then class.done(h) end
      h:close()
    end)
  end)
end

describe("closing a handle that cqueues has polled", function()
  local ok_cq, cqueues = pcall(require, "cqueues")

  it("leaves the cqueues loop working when the descriptor number is reused", function()
    if not ok_cq then return pending("lua-cqueues for Lua 5.4 is not installed") end
    local cq = cqueues.new()
    local p = assert(takana.spawn { "sleep", "30" })
    local result
    cq:wrap(function()
      cqueues.poll(p, 0.01)
      p:signal("KILL"); p:wait(); p:close()
      -- The next pidfd gets the same number: cqueues must not hold the old one.
      local q = assert(takana.spawn { "true" })
      cqueues.poll(q, 5)
      result = q:wait()
      q:close()
    end)
    local ok, err = cq:loop()
    assert.is_true(ok, err)
    assert.same({ code = 0 }, { code = result.code })
  end)
end)
