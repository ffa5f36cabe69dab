-- lua/lib/adaptive.lua: shared prelude of the adaptive-*.lua scripts, after lib/common.lua.
--
-- The fleet's adaptive limit of one bucket (src/primitives/adaptive/fleet.ts): every replica reports,
-- once a window, what the requests it admitted did; the replica that leads steps the controller once
-- per window from the merged reports, and puts the limit it computes in the bucket's permit set (P of
-- lib/permits.lua, through permit-set-limit.lua). Every key shares the hash tag of that permit set,
-- e.g. tollgate:{sem:api%3Aglobal}:as (G8).
--   KEYS[1] S  HASH  w = the last window stepped, its start (exactly one step per window: adaptive-commit.lua);
--                    s = the controller's state after it (JSON: only the client reads and writes it);
--                    l = the leader's replica id; lu = until when it leads (ms, server clock).
--   KEYS[2] R  ZSET  replica id -> when it last reported (ms): the replicas alive.
--   KEYS[3] C  HASH  the reports of the window being reported: n = requests, d = drops, l = sum of
--                    their latencies (µs), m = sum over replicas of the most each had in flight;
--                    u = clients (units of enough requests), o = of them those over the drop share;
--                    c<b> and s<b> = the count and the sum of latencies (µs) of histogram bucket b
--                    (0 to 99); r:<replica id> = 1 for each replica whose report is in (one report
--                    counts once), an empty one too; k = how many they are (the window is complete
--                    once k reaches the replicas alive).
--   KEYS[4] V  HASH  the same, of the window before it (what the leader steps).
-- ARGV[1] is the bucket's wake-up channel (unused here). A window is named by its start, ms on the
-- server clock (floor(time / length) x length) as each replica estimates it; the scripts check the
-- estimate against NOW. Named by time, windows stay ordered when their length changes.
local S, R, C, V -- this call's keys, set by begin()

-- Every adaptive script starts here: the call's keys and clock.
local function begin(keys, _)
  read_clock()
  S, R, C, V = keys[1], keys[2], keys[3], keys[4]
end
