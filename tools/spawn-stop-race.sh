#!/bin/sh
# Spawns `true` as uid 65534 N times (default 40) while that uid spins
# `kill -STOP -1` -- in a pid namespace of its own, so only these processes
# are stopped -- and prints the longest spawn. With a vfork child, a STOP
# landing between its setuid and its exec held spawn (a supervisor's loop)
# until killed; the fork-mode child bounds it at exec_timeout (1 s).
# Run as root from the checkout: sh tools/spawn-stop-race.sh [N]
set -eu
cd "$(dirname "$0")/.."
exec unshare --pid --fork --mount-proc sh -c '
  setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "while :; do kill -STOP -1 2>/dev/null; done" &
  LUA_PATH="./lua/?.lua;./lua/?/init.lua;;" LUA_CPATH="./?.so;;" timeout 120 lua5.4 -e "N = $1" -e "
    local takana = require \"takana\"
    local n, worst, unconfirmed = N, 0, 0
    for _ = 1, n do
      local t0 = takana.now()
      local c = assert(takana.spawn { \"true\", user = 65534 })
      worst = math.max(worst, takana.now() - t0)
      if c.exec_unconfirmed then unconfirmed = unconfirmed + 1 end
      c:signal(\"KILL\")
      c:wait(5)
      c:close()
    end
    print((\"spawns %d, worst %.3f s, returned unconfirmed %d\"):format(n, worst, unconfirmed))
  "
' sh "${1:-40}"
