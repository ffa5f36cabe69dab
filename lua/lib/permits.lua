-- lua/lib/permits.lua: shared prelude of every permit-*.lua script, after lib/common.lua, then
-- lib/permit-fence.lua, lib/permit-holds.lua and lib/permit-queue.lua, by concept (all are prepended
-- when the script is registered, so each registered script stays one self-contained call). This one:
-- the keys, weights and the limit in force.
--
-- One fair "permit set" backs the mutex (permits = 1), the reentrant mutex and the semaphore.
-- Every key shares the caller's hash tag, e.g. tollgate:{sem:api%2Fexport}:h (G8).
--   KEYS[1] H  ZSET  holder token -> lease expiry (ms, Redis server clock, G9)
--   KEYS[2] Q  ZSET  waiter token -> ticket (FIFO order across every process, G5)
--   KEYS[3] W  ZSET  waiter token -> heartbeat deadline (ms); a dead waiter falls out when it passes
--   KEYS[4] M  HASH  holder and queue bookkeeping, absent while nothing is held or queued:
--                    n = last ticket; g:<tok> = the fencing token of a holder admitted from the queue
--                    or of a reentrant owner's hold (what a re-check, a re-entry or a resent acquire
--                    reports to it; a permit granted at once has its fence in the reply only, until
--                    a caller that never saw it asks: see holder_fence);
--                    a:<tok> = the first acquisition of a reentrant owner's hold ('' once it was
--                    released while others still hold); c:<tok> = how many more hold, each a member
--                    of A (see holds_op); t:<tok> = a waiter's spec, "<lease ttl>" for a
--                    fresh token, "<lease ttl> <acquisition> ..." for a reentrant owner's token and
--                    the acquisitions waiting on it (handed over together when it is admitted)
--   KEYS[5] P  STRING permits set at run time for the name; overrides the caller's permits. "<n>": an
--                    override (setPermits, the admin API), the one key that persists while idle: it is
--                    configuration, not state. "<n>a<v>": the fleet's adaptive limit (lib/adaptive.lua),
--                    v the window of the step that set it, with an expiry its controller renews every
--                    window; an override is never replaced by one.
--   KEYS[6] F  STRING the last fencing token, kept at least while the lease that got it runs and
--                    until the server clock has passed it (see next_fence); or a lone holder (below)
--   KEYS[7] A  ZSET  "<acquisition> <fence of the hold> <tok>" -> at least the hold's expiry when
--                    the acquisition was last taken or renewed, at most one ttl past it (a renewal
--                    re-scores it only when behind: permit-renew.lua): the
--                    acquisitions of a reentrant owner's hold after its first, so that one more, one
--                    fewer, or asking whether one holds costs O(log n) however many the owner holds
--                    (a list in M cost O(k) per call and O(k^2) per renewal batch). A member is due
--                    at most one ttl after its lease ran out: those of a hold that ran out are swept
--                    a bounded number at a time (sweep_acquisitions).
-- ARGV[1] is always the wake-up channel; grants are published there as lines
-- "<tok> <fence> <expiresAt>[ <acquisition> ...]" (a fresh token is its own acquisition).
-- Every key carries a PEXPIREAT no earlier than the last deadline it holds (H: leases; Q, W, M: waiter
-- heartbeats and the g:/a: of live holders), and the set is deleted when nothing is held or queued, so
-- idle names leave no keys behind. A key that exists always has its expiry, so one PEXPIREAT ... GT
-- extends it; a key this call may have just created gets a plain PEXPIREAT instead.
--
-- A lone holder: a plain (unweighted, not reentrant) acquire of a name nobody holds or waits for
-- keeps its hold in F alone, as "<fence> <expiresAt> <token>" with PXAT expiresAt: one SET ... NX
-- takes it, one GET and one DEL give it back (a bare SET NX PX lock, with its fence). The moment
-- anything else happens on the name (a second acquire, a batch, a weighted or reentrant call),
-- expand() moves it into H, F keeps the fence alone, and the general paths below run as if it had
-- been granted there. So while F holds a lone holder, H, Q, W and A hold nothing live: every script
-- that would read or delete F checks for one first (acquire and release: their fast paths; renew;
-- settle(); inspect).
--
-- Weights (a semaphore's acquire({ weight })): a token `<id>*<w>` counts for w permits. Its hold is w
-- members of H, the token and `<token>#2` .. `<token>#w`, with one expiry, so that ZCARD H is the
-- permits in use, an expiry frees all w at once, and a token without '*' (every unweighted call)
-- pays one string.find and nothing more. A weighted waiter is one entry of Q: the head is admitted
-- only when its w permits are free, and nobody behind it is admitted before it (FIFO: a heavy head is
-- never overtaken by light ones, G5).
local H, Q, W, M, P, F, A -- this call's keys, set by begin()
-- A fair queue's call (11 KEYS, lib/fair.lua): D T K X; nil on a plain call, which never touches them.
local D, T, K, X
local CHANNEL
-- The fair queue's helpers, made by lib/fair.lua (the next prelude).
local fq = {}

-- The permits a token counts for: 1 to 1000 (src/core/weight.ts, MAX_WEIGHT); anything else is 1.
local function weight(tok)
  local star = string.find(tok, '*', 1, true)
  if not star then return 1 end
  local w = tonumber(string.sub(tok, star + 1))
  if not w then
    -- A fair token (lib/fair.lua): the digits up to its discipline.
    local dot = string.find(tok, '.', star + 1, true)
    w = dot and tonumber(string.sub(tok, star + 1, dot - 1))
  end
  if not w or w < 1 or w > 1000 or w ~= math.floor(w) then return 1 end
  return w
end

-- Append `tok`'s hold to a ZADD argument list (score, member, ...): w members for a weight of w.
local function add_hold(holds, score, tok)
  holds[#holds + 1] = score
  holds[#holds + 1] = tok
  local w = weight(tok)
  for k = 2, w do
    holds[#holds + 1] = score
    holds[#holds + 1] = tok .. '#' .. k
  end
  return w
end

-- Append the members of `tok`'s hold to a list (ZREM arguments).
local function add_members(list, tok)
  list[#list + 1] = tok
  for k = 2, weight(tok) do list[#list + 1] = tok .. '#' .. k end
end

-- P's value: the permits, whether they are the fleet's adaptive limit ("<n>a<version>") rather than an
-- override ("<n>"), and the adaptive limit's version; nil for none.
local function parse_limit(value)
  if not value then return nil end
  local n = tonumber(value)
  if n then return n, false end
  local permits, version = string.match(value, '^(%d+)a(%d+)$')
  return tonumber(permits), true, tonumber(version)
end

-- The permits in force: the run-time override or adaptive limit when one is set, else the caller's.
local function limit(requested)
  return parse_limit(redis.call('GET', P)) or tonumber(requested)
end
