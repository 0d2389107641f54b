-- takana.cgroup.tree (issue 23): a cgroup subtree kept open, followed as
-- cgroups come and go, read in one call with exactly cg:stat()'s sections
-- and keys. Every cgroup here is made under this spec's own
-- takana-test-<random> directory and removed with it.
local takana = require "takana"
local H = require "helpers"

local E = takana.errno
local uv = require "luv"

local function why_not()
  if not H.cgroup2_mount() then return "no cgroup2 hierarchy is mounted" end
  if not H.is_root() then return "needs root to create a test cgroup" end
  return nil
end

-- The shape of a stat table: its keys, nested, and each leaf's type.
local function shape(t)
  local s = {}
  for k, v in pairs(t) do s[k] = type(v) == "table" and shape(v) or type(v) end
  return s
end

local function sorted(t)
  table.sort(t)
  return t
end

describe("cgroup.tree", function()
  local abs, name, top
  before_each(function()
    if why_not() then return end
    abs, name = H.test_cgroup_path()
    top = "/" .. name
  end)
  after_each(function()
    if abs then H.cgroup_cleanup(abs) end
    abs, name, top = nil, nil, nil
  end)

  local function mk(rel) assert(uv.fs_mkdir(abs .. rel, 493)) end
  local function rm(rel) assert(uv.fs_rmdir(abs .. rel)) end

  it("gives exact paths after children and grandchildren are made and removed #root", function()
    local why = why_not()
    if why then return pending(why) end
    local tree = assert(takana.cgroup.tree(top))
    assert.equal(top, tree.path)
    assert.equal(takana.cgroup.mounts().v2, tree.mount)
    assert.same({ top }, tree:paths())
    mk("/a") mk("/a/b") mk("/a/b/c") mk("/d")
    assert.same({ top, top .. "/a", top .. "/a/b", top .. "/a/b/c", top .. "/d" }, tree:paths())
    rm("/a/b/c") rm("/a/b") mk("/a/e") mk("/d/f")
    assert.same({ top, top .. "/a", top .. "/a/e", top .. "/d", top .. "/d/f" }, tree:paths())
    local st = assert(tree:stat())
    local keys = {}
    for p in pairs(st) do keys[#keys + 1] = p end
    assert.same(tree:paths(), sorted(keys))
    -- Made and removed again under the same name between two calls: the
    -- new directory (a new cgroup id), not the old one.
    rm("/d/f") mk("/d/f")
    assert.same({ top, top .. "/a", top .. "/a/e", top .. "/d", top .. "/d/f" }, tree:paths())
    assert.truthy(assert(tree:stat())[top .. "/d/f"])
    assert.same({}, tree.skipped)
    assert.is_true(tree.watch)
    tree:close()
  end)

  it("gives each cgroup exactly cg:stat()'s sections and keys #root", function()
    local why = why_not()
    if why then return pending(why) end
    mk("/a") mk("/a/b")
    local tree = assert(takana.cgroup.tree(top))
    -- Twice: the first read opens the files, the second reads through the
    -- descriptors it kept.
    for _ = 1, 2 do
      local st = assert(tree:stat())
      for _, p in ipairs { top, top .. "/a", top .. "/a/b" } do
        local cg = assert(takana.cgroup(p))
        local want = assert(cg:stat())
        assert.same(shape(want), shape(st[p]))
        assert.same(want.events, st[p].events)
        cg:close()
      end
    end
    tree:close()
  end)

  it("opens from a cgroup handle, whose own directory is the root #root", function()
    local why = why_not()
    if why then return pending(why) end
    mk("/a") mk("/a/b")
    local cg = assert(takana.cgroup(top .. "/a"))
    local tree = assert(takana.cgroup.tree(cg))
    assert.equal(top .. "/a", tree.path)
    assert.same({ top .. "/a", top .. "/a/b" }, tree:paths())
    cg:close()
    assert.same({ top .. "/a", top .. "/a/b" }, tree:paths())
    tree:close()
  end)

  it("leaves out a cgroup removed between two calls, and says so when its root goes #root", function()
    local why = why_not()
    if why then return pending(why) end
    mk("/x") mk("/x/y")
    local tree = assert(takana.cgroup.tree(top .. "/x"))
    assert.truthy(assert(tree:stat())[top .. "/x/y"])
    rm("/x/y")
    local st = assert(tree:stat())
    assert.is_nil(st[top .. "/x/y"])
    assert.truthy(st[top .. "/x"])
    assert.same({ top .. "/x" }, tree:paths())
    rm("/x")
    local ok, err, errno = tree:stat()
    assert.is_nil(ok)
    assert.equal(E.ENOENT, errno)
    assert.matches("removed", err)
    assert.is_nil((tree:paths()))
    tree:close()
  end)

  it("never fails a stat while cgroups are made and removed under it #root", function()
    local why = why_not()
    if why then return pending(why) end
    mk("/churn")
    local tree = assert(takana.cgroup.tree(top))
    -- A child shell makes and removes cgroups while this process reads:
    -- some are removed between the watch's news and their reads. Bounded:
    -- 300 rounds, and it dies with this process.
    local q = H.shell_quote(abs .. "/churn")
    local sh = assert(takana.spawn { "sh", "-c", ("i=0; while [ $i -lt 300 ]; do mkdir %s/c$i %s/c$i/g; " ..
      "rmdir %s/c$i/g %s/c$i; i=$((i+1)); done"):format(q, q, q, q) })
    local calls = 0
    repeat
      local st, err = tree:stat()
      assert.is_table(st, err)
      for p, v in pairs(st) do
        assert.equal(top, p:sub(1, #top))
        assert.is_table(v.cpu or v.events)
      end
      calls = calls + 1
    until sh:wait(0) or calls > 100000
    sh:close()
    assert.same({ top, top .. "/churn" }, tree:paths())
    tree:close()
  end)

  it("ends consistent after its inotify queue overflows #root #slow", function()
    local why = why_not()
    if why then return pending(why) end
    local tree = assert(takana.cgroup.tree(top))
    local limit = tonumber(H.read("/proc/sys/fs/inotify/max_queued_events"))
    -- Two events per round in the watched directory, none read until
    -- the end: past the queue's length, the kernel drops the rest and
    -- says IN_Q_OVERFLOW.
    if not limit or limit > 80000 then
      return pending(("fs.inotify.max_queued_events is %s: too long a queue to overflow in a bounded spec"):format(limit))
    end
    local rounds = limit // 2 + 64
    for i = 1, rounds do
      mk("/o" .. i % 5 + 1)
      rm("/o" .. i % 5 + 1)
    end
    mk("/o0") mk("/o1") mk("/o1/deep")
    local paths = tree:paths()
    assert.same({ top, top .. "/o0", top .. "/o1", top .. "/o1/deep" }, paths)
    assert.is_true(tree.overflows >= 1)
    local st = assert(tree:stat())
    assert.truthy(st[top .. "/o1/deep"])
    tree:close()
  end)

  it("lists every directory on each call when inotify is refused, and says why #root", function()
    local why = why_not()
    if why then return pending(why) end
    mk("/a")
    -- In a user namespace of its own whose inotify instance limit is 0
    -- (the host's limit is not touched): inotify_init1 says EMFILE.
    local script = ([[
      local takana = require "takana"
      local uv = require "luv"
      local tree = assert(takana.cgroup.tree(%q))
      local fd, err, errno = tree:fileno()
      print(tree.watch, fd, errno == takana.errno.EMFILE, err:match("max_user_instances") ~= nil)
      print(table.concat(tree:paths(), " "))
      assert(uv.fs_mkdir(%q, 493))
      assert(uv.fs_rmdir(%q))
      local st = assert(tree:stat())
      print(table.concat(tree:paths(), " "), st[%q] ~= nil, st[%q] == nil)
      assert(uv.fs_rmdir(%q))
    ]]):format(top, abs .. "/b", abs .. "/a", top .. "/b", top .. "/a", abs .. "/b")
    local code, out = H.run("unshare -U -r sh -c " .. H.shell_quote(
      "echo 0 > /proc/sys/user/max_inotify_instances && " ..
      "env LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' " .. H.lua .. " -e " .. H.shell_quote(script)))
    if code ~= 0 and out:match("unshare") then return pending("unshare -U failed here: " .. out) end
    assert.equal(0, code, out)
    assert.equal(("inotify_init1: Too many open files (fs.inotify.max_user_instances, or the descriptor limit): " ..
      "every directory is listed again on each call\tnil\ttrue\ttrue\n%s %s/a\n%s %s/b\ttrue\ttrue\n")
      :format(top, top, top, top), out)
  end)

  it("raises on bad arguments and says ENOENT for a missing cgroup", function()
    local tree_of = takana.cgroup.tree
    for _, bad in ipairs { 5, true, {}, print } do
      assert.error_matches(function() tree_of(bad) end, "bad argument #1 to 'cgroup.tree' %(path or cgroup handle expected")
    end
    assert.error_matches(function() tree_of() end, "bad argument #1 to 'cgroup.tree'")
    assert.error_matches(function() tree_of(io.stdout) end, "path or cgroup handle expected, got userdata")
    assert.error_matches(function() tree_of("/a/../b") end, "component '..' refused")
    assert.error_matches(function() tree_of("..") end, "component '..' refused")
    assert.error_matches(function() tree_of("/a\0b") end, "NUL")
    assert.error_matches(function() tree_of("/", 1) end, "no more than 1 argument")
    if not H.cgroup2_mount() then return pending("no cgroup2 hierarchy is mounted") end
    local t, err, errno = tree_of("/takana-test-no-such-cgroup-" .. H.pid)
    assert.is_nil(t)
    assert.equal(E.ENOENT, errno)
    assert.matches("^cgroup.tree /takana%-test%-no%-such%-cgroup", err)
    local cg = assert(takana.cgroup("/"))
    cg:close()
    assert.error_matches(function() tree_of(cg) end, "closed cgroup handle")
  end)

  it("raises once closed, closes twice, and gives every descriptor back #root", function()
    local why = why_not()
    if why then return pending(why) end
    mk("/a") mk("/a/b") mk("/c")
    -- Once first: the mount table's watch is opened on first use, and
    -- garbage from before is collected.
    assert(takana.cgroup.tree(top)):close()
    collectgarbage()
    collectgarbage()
    local before = H.count_fds()
    for _ = 1, 50 do
      local tree = assert(takana.cgroup.tree(top))
      assert(tree:stat())
      assert.is_true(tree.fds >= 4)
      tree:close()
    end
    assert.equal(before, H.count_fds())
    do
      local tree <close> = assert(takana.cgroup.tree(top))
      assert(tree:stat())
    end
    assert.equal(before, H.count_fds())
    -- tree.fds is what it holds: a directory each, its inotify
    -- descriptor and the stat files it keeps; a removed cgroup's go with it.
    local held = assert(takana.cgroup.tree(top))
    assert(held:stat())
    assert.equal(before + held.fds, H.count_fds())
    rm("/a/b")
    assert(held:stat())
    assert.equal(before + held.fds, H.count_fds())
    assert.same({ top, top .. "/a", top .. "/c" }, held:paths())
    held:close()
    assert.equal(before, H.count_fds())
    local lost = assert(takana.cgroup.tree(top))
    assert(lost:stat())
    lost = nil -- luacheck: ignore
    collectgarbage()
    collectgarbage()
    assert.equal(before, H.count_fds())
    local tree = assert(takana.cgroup.tree(top))
    tree:close()
    tree:close()
    assert.matches("closed", tostring(tree))
    for _, m in ipairs { "stat", "paths", "refresh", "fileno" } do
      assert.error_matches(function() tree[m](tree) end, "attempt to use a closed cgroup tree")
    end
    assert.error_matches(function() return tree.skipped end, "attempt to use a closed cgroup tree")
    assert.error_matches(function() tree:stat(1) end, "closed")
  end)

  it("is pollable: its descriptor is readable once a cgroup is made, and a call drains it #root", function()
    local why = why_not()
    if why then return pending(why) end
    local tree = assert(takana.cgroup.tree(top))
    assert.equal("r", tree:events())
    assert.is_number(tree:fileno())
    assert.same({}, takana.poll({ tree }, 0))
    mk("/p")
    assert.same({ tree }, takana.poll({ tree }, 5))
    assert.is_true(tree:refresh())
    assert.same({}, takana.poll({ tree }, 0))
    assert.same({ top, top .. "/p" }, tree:paths())
    assert.error_matches(function() tree:refresh(1) end, "no more than")
    tree:close()
  end)

  it("leaves out and lists a subtree it may not read, as uid 65534 #root", function()
    local why = why_not()
    if why then return pending(why) end
    local as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups "
    if H.run(as_nobody .. "test -r takana/core.so") ~= 0 then
      return pending("uid 65534 cannot read this tree's takana/core.so")
    end
    mk("/open") mk("/open/kid") mk("/private") mk("/private/kid")
    assert(uv.fs_chmod(abs .. "/private", 448))
    local script = ([[
      local takana = require "takana"
      local tree = assert(takana.cgroup.tree(%q))
      local st = assert(tree:stat())
      local n = 0
      for _ in pairs(st) do n = n + 1 end
      local s = tree.skipped
      print(table.concat(tree:paths(), " "), n, #s, s[1].path, s[1].errno == takana.errno.EACCES)
    ]]):format(top)
    local code, out = H.run(as_nobody .. "env LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' " ..
      H.lua .. " -e " .. H.shell_quote(script))
    assert.equal(0, code, out)
    assert.equal(("%s %s/open %s/open/kid\t3\t1\t%s/private\ttrue\n"):format(top, top, top, top), out)
  end)

  it("leaves out and lists a subtree past 4095 bytes of path #root", function()
    local why = why_not()
    if why then return pending(why) end
    local q, long = H.shell_quote(abs), ("d"):rep(250)
    finally(function()
      os.execute("bash -c " .. H.shell_quote(("cd %s && n=0; while cd %s 2>/dev/null; do n=$((n+1)); done; " ..
        "while [ $n -gt 0 ]; do cd .. && rmdir %s; n=$((n-1)); done"):format(q, long, long)))
    end)
    assert(os.execute("bash -c " .. H.shell_quote(("cd %s && for i in $(seq 17); do mkdir %s && cd %s || exit 1; done")
      :format(q, long, long))))
    local tree = assert(takana.cgroup.tree(top))
    local paths = tree:paths()
    assert.equal(#top + 16 * 251, #paths[#paths])
    assert.equal(1 + 16, #paths)
    local s = tree.skipped
    assert.equal(1, #s)
    assert.equal(E.ENAMETOOLONG, s[1].errno)
    assert.equal(#top + 17 * 251, #s[1].path)
    assert.matches("4095", s[1].error)
    assert(tree:stat())
    tree:close()
  end)

  it("holds 1,000 cgroups at ulimit -n 1024, and says EMFILE with the reason below that #root #slow", function()
    local why = why_not()
    if why then return pending(why) end
    for g = 0, 9 do
      mk("/g" .. g)
      for c = 1, 99 do mk(("/g%d/c%d"):format(g, c)) end
    end
    -- 1 + 10 + 990 = 1,001 cgroups beneath and with the root: 1,000
    -- beneath a group's parent would do as well; this is the harder.
    local script = ([[
      local takana = require "takana"
      local tree, err, errno = takana.cgroup.tree(%q)
      if not tree then print("nil", errno, err) return end
      local st = assert(tree:stat())
      local n = 0
      for _ in pairs(st) do n = n + 1 end
      assert(tree:stat())
      print(#tree:paths(), n, tree.fds)
    ]]):format(top)
    local function run(limit)
      return H.run(("ulimit -n %d && env LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./?.so;;' %s -e %s")
        :format(limit, H.lua, H.shell_quote(script)))
    end
    local code, out = run(1024)
    assert.equal(0, code, out)
    local paths, n, fds = out:match("^(%d+)\t(%d+)\t(%d+)\n$")
    assert.equal("1001", paths, out)
    assert.equal("1001", n, out)
    assert.is_true(tonumber(fds) <= 1024 - 8, out)
    code, out = run(512)
    assert.equal(0, code, out)
    assert.matches("^nil\t" .. E.EMFILE .. "\tcgroup.tree " .. top:gsub("%p", "%%%0") .. ": .*RLIMIT_NOFILE", out)
  end)
end)
