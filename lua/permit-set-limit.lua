-- lua/permit-set-limit.lua: change the permits of a name at run time, for every process.
-- KEYS  H Q W M P F A (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] new permits, or 0 to drop the override (callers' own permits apply again)
-- ARGV[3] the caller's own permits: the limit in force once the override is dropped
-- ARGV[4] 'a' for the fleet's adaptive limit (ARGV[5]: its expiry, ms; ARGV[6]: its version, the
--         window of the step that set it): written only while no override is set, and only over an
--         older version (a leader that paused between its step and this call never writes over a
--         later step's limit); dropped by an override. '' (or absent) for an override; then a
--         permits of 0 drops the override only, never the adaptive limit
-- Admits at once the queued waiters the limit now in force has room for (raising the override, or
-- dropping one that was below the caller's permits); lowering never evicts a holder, it only stops
-- admissions until the holders drain below the new limit.
-- Cost: O(log n), plus the queue work of lib/permit-queue.lua: at most 100 expired holders and 1000 dead
-- waiters purged, 1000 more dead waiters skipped at the head of the queue, 1000 grants made: the
-- rest is left to the next call, and a reply's nextExpiry is then `now` (look again at once).
-- A fair queue's call (lib/fair.lua): KEYS H Q W M P F A D T K X, the same ARGV; admit() runs the
-- discipline (its fair bookkeeping: lib/fair.lua).
-- Returns {live holders, now, 1 when the limit was written | 0 when an override kept it}
local permits = tonumber(ARGV[2])
local written = 1
local current, adaptive, version = parse_limit(redis.call('GET', P))
if ARGV[4] == 'a' then
  if current and not adaptive then
    written = 0 -- an override is set: it wins while it is there
  elseif current and (version or -1) >= tonumber(ARGV[6]) then
    written = 0 -- a later step's limit is there
  else
    redis.call('SET', P, permits .. 'a' .. ARGV[6], 'PX', tonumber(ARGV[5]))
  end
elseif permits > 0 then
  redis.call('SET', P, permits)
elseif current and not adaptive then
  redis.call('DEL', P)
end
local count = live_holders(redis.call('ZCARD', H))
if D and count == 0 then fq.heal() end
if redis.call('EXISTS', Q) == 1 then
  purge_waiters()
  local _, _, admitted = admit(limit(ARGV[3]), count)
  count = count + admitted
end
if D then
  fq.flush()
  if redis.call('EXISTS', Q, K) == 0 then settle(nil) end
elseif redis.call('EXISTS', Q) == 0 then
  settle(nil)
end
if count == 0 then
  local _, lone_exp = parse_lone(redis.call('GET', F)) -- a lone holder (lib/permits.lua)
  if lone_exp and lone_exp > NOW then count = 1 end
end
return { count, NOW, written }
