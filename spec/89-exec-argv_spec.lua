-- Exec events that identify the program: argv and filename (bpf: read at the
-- exec tracepoint, argv_from "exec"; connector: from /proc at receipt,
-- argv_from "proc-later", taken back as argv_lost when a later exec shows
-- the read may be another program's), ppid on connector exec events from the
-- stream's own fork tracking, and cgroup_id on bpf fork and exec events.
local takana = require "takana"
local H = require "helpers"
local lfs = require "lfs"

local SH = "/bin/sh"

local open = H.open_events

-- Runs argv (a shell blocked on `read` while the events are taken, so the
-- connector finds it alive) and returns its fork and exec events.
local function exec_events(ev, argv, opts)
  local spec = { stdin = "pipe", stdout = "null" }
  for k, v in pairs(opts or {}) do spec[k] = v end
  for i, a in ipairs(argv) do spec[i] = a end
  local child = assert(takana.spawn(spec))
  local fork, exec
  H.poll_until({ ev }, function()
    for e in assert(ev:read()) do
      if e.pid == child.pid and e.type == "fork" then fork = e end
      if e.pid == child.pid and e.type == "exec" then exec = e end
    end
    return exec
  end, 100)
  child.stdin:close()
  child:wait()
  child:close()
  return fork, exec, child.pid
end

local function many_args(n, width)
  local argv = { SH, "-c", "read x", "a b", "", "  two  spaces  ", "tab\there" }
  for i = #argv + 1, n do argv[i] = ("%0" .. width .. "d"):format(i) end
  return argv
end

local function proc_cgroup_id(pid)
  local mnt = H.cgroup2_mount()
  local text = H.read("/proc/" .. pid .. "/cgroup") or ""
  local p = text:match("^0::([^\n]*)") or text:match("\n0::([^\n]*)")
  local a = mnt and p and lfs.attributes(mnt .. p)
  return a and a.ino
end

for _, backend in ipairs { "bpf", "connector" } do
  describe(backend .. " exec events" .. (backend == "bpf" and " #root #bpf" or ""), function()
    it("carry the exact argv (spaces, an empty string, more than 16 arguments) and filename", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local ev, why = open(backend)
      if not ev then return pending(why) end
      local argv = many_args(24, 2)
      local fork, exec, pid = exec_events(ev, argv)
      ev:close()
      assert.is_not_nil(exec, "no exec event for the child")
      assert.same(argv, exec.argv)
      assert.is_nil(exec.argv_truncated)
      assert.is_nil(exec.argv_lost)
      assert.equal(backend == "bpf" and "exec" or "proc-later", exec.argv_from)
      if backend == "bpf" then
        assert.equal(SH, exec.filename)          -- as execve was given it
      else
        local _, out = H.run("readlink -f " .. SH)
        local real = out:gsub("\n$", "")
        assert.equal(real, exec.filename)        -- the exe link at receipt
      end
      assert.equal(H.pid, exec.ppid)
      assert.is_not_nil(fork)
      assert.equal(H.pid, fork.ppid)
      assert.equal(pid, exec.pid)
    end)

    it("say argv_truncated past 512 bytes, keeping what fits", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local ev, why = open(backend)
      if not ev then return pending(why) end
      local argv = many_args(60, 20)
      local _, exec = exec_events(ev, argv)
      ev:close()
      assert.is_not_nil(exec)
      assert.is_true(exec.argv_truncated)
      local got = exec.argv
      local bytes = 0
      for _, a in ipairs(got) do bytes = bytes + #a + 1 end
      assert.truthy(bytes >= 512 and bytes <= 513, bytes)
      assert.truthy(#got > 16)
      for i = 1, #got - 1 do assert.equal(argv[i], got[i]) end
      assert.equal(argv[#got]:sub(1, #got[#got]), got[#got])   -- the last one may be cut
    end)

    it("carry ppid, and argv or argv_lost, for processes gone at once", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local ev, why = open(backend, { "exec" })
      if not ev then return pending(why) end
      local pids = {}
      for i = 1, 20 do
        local c = assert(takana.spawn { "/bin/true", "x" .. i })
        pids[c.pid] = i
        c:wait()
        c:close()
      end
      local seen = 0
      H.poll_until({ ev }, function()
        for e in assert(ev:read()) do
          local i = pids[e.pid]
          if e.type == "exec" and i then
            seen = seen + 1
            assert.equal(H.pid, e.ppid)
            if e.argv_lost then
              -- nothing of what /proc showed by then: no argv, exe or comm
              assert.is_nil(e.argv)
              assert.is_nil(e.filename)
              assert.is_nil(e.comm)
              assert.equal("connector", backend)
              assert.equal("proc-later", e.argv_from)
            else
              assert.same({ "/bin/true", "x" .. i }, e.argv)
            end
          end
        end
        return seen == 20
      end, 100)
      ev:close()
      assert.equal(20, seen)
    end)

    it("name each of a process's two execs (sh -c 'exec prog') as its own, or not at all", function()
      if H.no_spawn then return pending(H.no_spawn) end
      local ev, why = open(backend, { "exec" })
      if not ev then return pending(why) end
      local script = "exec " .. H.fixture_path .. " --life 30"
      local child = assert(takana.spawn { SH, "-c", script, stdout = "pipe" })
      -- "ready": the fixture runs, so both exec messages were sent before
      -- the stream reads anything; a connector reads /proc only now.
      local line = child.stdout:read("l")
      local execs = {}
      H.poll_until({ ev }, function()
        for e in assert(ev:read()) do
          if e.type == "exec" and e.pid == child.pid then execs[#execs + 1] = e end
        end
        return #execs == 2
      end, 100)
      local overruns = ev:stats().overruns
      child:signal("KILL")
      child:wait()
      child:close()
      ev:close()
      assert.matches("^ready " .. child.pid, line)
      if overruns > 0 then return pending("the socket overflowed; the execs' reads are void") end
      assert.equal(2, #execs)
      local shell, prog = execs[1], execs[2]
      assert.same({ "./spec/fixture", "--life", "30" }, prog.argv)
      assert.is_nil(prog.argv_lost)
      if backend == "bpf" then
        assert.equal("exec", shell.argv_from)
        assert.equal("exec", prog.argv_from)
        assert.same({ SH, "-c", script }, shell.argv)
        assert.is_nil(shell.argv_lost)
        assert.equal(SH, shell.filename)
        assert.equal("sh", shell.comm)
        assert.equal("./spec/fixture", prog.filename)
        assert.equal("fixture", prog.comm)
      else
        -- /proc showed the fixture by the time the shell's exec was read:
        -- the later exec in the same read says so, and nothing is claimed.
        assert.equal("proc-later", shell.argv_from)
        assert.equal("proc-later", prog.argv_from)
        assert.is_true(shell.argv_lost)
        assert.is_nil(shell.argv)
        assert.is_nil(shell.filename)
        assert.is_nil(shell.comm)
        local _, out = H.run("readlink -f " .. H.fixture_path)
        assert.equal((out:gsub("\n$", "")), prog.filename)
        assert.equal("fixture", prog.comm)
      end
    end)

    if backend == "bpf" then
      it("fork and exec carry the cgroup_id of the process's cgroup", function()
        if H.no_spawn then return pending(H.no_spawn) end
        if not H.cgroup2_mount() then return pending("no cgroup2 hierarchy is mounted here") end
        local ev, why = open(backend)
        if not ev then return pending(why) end
        local fork, exec = exec_events(ev, { SH, "-c", "read x" })
        assert.equal(proc_cgroup_id(H.pid), fork.cgroup_id)
        assert.equal(proc_cgroup_id(H.pid), exec.cgroup_id)
        -- spawned straight into a test cgroup: the fork already shows it
        local path, name = H.test_cgroup_path()
        if path then
          local ok, err = pcall(function()
            local f2, e2 = exec_events(ev, { SH, "-c", "read x" }, { cgroup = name })
            local want = lfs.attributes(path).ino
            assert.equal(want, e2.cgroup_id)
            if f2 then assert.equal(want, f2.cgroup_id) end
          end)
          H.cgroup_cleanup(path)
          assert(ok, err)
        end
        ev:close()
      end)
    else
      it("after an overrun vouch for no read until the socket is drained", function()
        if H.no_spawn then return pending(H.no_spawn) end
        -- 4 KiB of socket (the kernel's minimum, about 2 KiB each way):
        -- forty processes' messages overflow it while nobody reads. They
        -- live on, so /proc would show each one's program.
        local ev, why = open(backend, { "exec" })
        if not ev then return pending(why) end
        ev:close()
        -- The connector carries every process's events: on a busy host
        -- (other suites) theirs can fill the socket before any of ours is
        -- in it. A few rounds, each with a fresh stream, until some of ours
        -- were read; pending, naming the host, when none ever was.
        local seen
        for _ = 1, 5 do
          ev = assert(takana.events { "exec", backend = backend, buffer = 4096 })
          local kids, pids = {}, {}
          for i = 1, 40 do
            local c = assert(takana.spawn { SH, "-c", "read x", "x" .. i, stdin = "pipe", stdout = "null" })
            kids[i] = c
            pids[c.pid] = true
          end
          seen = 0
          local ok, err = pcall(function()
            for e in assert(ev:read()) do
              if e.type == "exec" and pids[e.pid] then
                seen = seen + 1
                -- a later exec of it may be among the messages dropped
                assert.is_true(e.argv_lost)
                assert.is_nil(e.argv)
                assert.is_nil(e.filename)
              end
            end
          end)
          for _, c in ipairs(kids) do
            c.stdin:close()
            c:wait()
            c:close()
          end
          assert(ok, err)
          assert.is_true(ev:stats().overruns > 0)
          assert.is_true(ev:lost() > 0)
          assert.is_true(seen < 40, seen)
          if seen > 0 then break end
          ev:close()
        end
        if seen == 0 then
          return pending("in 5 rounds the host's own events filled the socket before any of ours")
        end
        -- Their exits overflow the socket again: read it empty (bounded),
        -- and once drained, reads count again.
        H.poll_until({ ev }, function()
          local n = 0
          for _ in assert(ev:read()) do n = n + 1 end
          return n == 0
        end, 20)
        local _, exec = exec_events(ev, { SH, "-c", "read x" })
        ev:close()
        assert.is_not_nil(exec)
        assert.same({ SH, "-c", "read x" }, exec.argv)
        assert.is_nil(exec.argv_lost)
      end)

      it("carry no cgroup_id (the connector does not say)", function()
        if H.no_spawn then return pending(H.no_spawn) end
        local ev, why = open(backend)
        if not ev then return pending(why) end
        local fork, exec = exec_events(ev, { SH, "-c", "read x" })
        ev:close()
        assert.is_nil(exec.cgroup_id)
        assert.is_nil(fork and fork.cgroup_id)
      end)
    end
  end)
end

describe("exec and the poll backend", function()
  it("poll refuses exec with the reason; auto picks a backend that can", function()
    local ev, why, errno = takana.events { "exec", backend = "poll" }
    assert.is_nil(ev)
    assert.matches("not exec", why)
    assert.equal(95, errno)   -- EOPNOTSUPP
    local auto, awhy = takana.events { "exec", "fork" }
    if auto then
      assert.are_not.equal("poll", auto.backend)
      for _, name in ipairs { "bpf", "connector" } do
        if name == auto.backend then break end
        assert.is_string(auto.skipped[name])
      end
      auto:close()
    else
      assert.matches("not exec", awhy)
      assert.matches("bpf: ", awhy)
      assert.matches("connector: ", awhy)
    end
  end)
end)
