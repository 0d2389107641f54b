-- services: a web app, its database and a worker, each a cgroup, with readiness, limits and restarts.
-- takana example: supervise
--
-- Run: `takana supervise services.lua` (or `takana example services`);
-- `takana ctl SOCKET status|restart NAME|logs NAME` drives it, SIGTERM
-- stops the worker and the web app, then the database. The environment
-- sets it up:
--   SERVICES_CGROUP  the supervisor's cgroup, below the cgroup2 mount
--                    (default "takana-services")
--   SERVICES_DIR     state: the database file and one log a service
--                    (default /var/lib/takana-services; made 0700)
--   SERVICES_PORT    the web app's port on 127.0.0.1; the database takes
--                    the next (default 8080)
--   SERVICES_CONTROL the control socket (default: the supervisor's
--                    runtime directory, /run/takana/<cgroup>/control)
-- A limit whose controller is not on cgroup2 (memory and pids on a hybrid
-- host) is left out, and stderr says so: the supervisor would otherwise
-- fail the service, rightly, with the same reason.
local takana = require "takana"
local env = function(name, default) return os.getenv(name) or default end
local dir, port = env("SERVICES_DIR", "/var/lib/takana-services"), tonumber(env("SERVICES_PORT", "8080"))
os.execute("mkdir -p -m 700 '" .. dir:gsub("'", "'\\''") .. "'")

-- The database: sqlite behind a line protocol ("incr KEY" -> the new
-- value), ready (s6's notification fd 3) once it listens.
local DB = [[
import os, socketserver, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("create table if not exists counters(k primary key, v)")
class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            cmd, key = line.decode().split()
            v = db.execute("insert into counters values(?, 1) on conflict(k) do update set v = v + 1 returning v",
                           (key,)).fetchone()[0] if cmd == "incr" else "?"
            db.commit()
            self.wfile.write(b"%d\n" % v)
server = socketserver.TCPServer(("127.0.0.1", int(sys.argv[2])), Handler)
os.write(3, b"\n")
server.serve_forever()
]]
-- The web app: counts its hits in the database; ready (sd_notify) once it listens.
local WEB = [[
import http.server, os, socket, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with socket.create_connection(("127.0.0.1", int(sys.argv[2]))) as db:
            db.sendall(b"incr hits\n")
            body = b"hits " + db.makefile("rb").readline()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
if "NOTIFY_SOCKET" in os.environ:
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"READY=1", os.environ["NOTIFY_SOCKET"])
server.serve_forever()
]]
-- The worker: a job a second, counted in the database.
local WORKER = [[
import socket, sys, time
while True:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as db:
        db.sendall(b"incr jobs\n")
        print("job", db.makefile().readline().strip(), flush=True)
    time.sleep(1)
]]

-- Limits, each only where its controller is on cgroup2.
local host, on_v2, said = takana.cgroup.probe(), {}, {}
for _, c in ipairs(host.v2_controllers or {}) do on_v2[c] = true end
local function limits(t)
  local out = {}
  for key, value in pairs(t) do
    local ctrl = key:match("^%a+")
    if on_v2[ctrl] then
      out[key] = value
    elseif not said[ctrl] then
      said[ctrl] = true
      io.stderr:write(("services: %s limits left out: the %s controller is not on cgroup2 here (a %s host)\n")
        :format(ctrl, ctrl, host.mode))
    end
  end
  return out
end

local sup = assert(takana.supervisor { cgroup = env("SERVICES_CGROUP", "takana-services"), log = dir,
  control = os.getenv("SERVICES_CONTROL") })
sup:service {
  name = "db", cmd = { "python3", "-c", DB, dir .. "/db.sqlite", tostring(port + 1) },
  ready = { fd = 3, timeout = 10 }, limits = limits { ["memory.max"] = 128 * 2 ^ 20, ["pids.max"] = 16 },
}
sup:service {
  name = "web", cmd = { "python3", "-c", WEB, tostring(port), tostring(port + 1) }, depends = { "db" },
  ready = { notify = true, timeout = 10 }, limits = limits { ["memory.max"] = 64 * 2 ^ 20, ["pids.max"] = 32 },
}
sup:service {
  name = "worker", cmd = { "python3", "-c", WORKER, tostring(port + 1) }, depends = { "db" },
  restart = "always", -- (default backoff: 0.1 s, doubling to 30 s while it keeps failing)
  limits = limits { ["memory.max"] = 32 * 2 ^ 20, ["cpu.weight"] = 50 },
}
return sup
