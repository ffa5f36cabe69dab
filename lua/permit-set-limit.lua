-- lua/permit-set-limit.lua: change the permits of a name at run time, for every process.
-- KEYS  H Q W M P F (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] new permits, or 0 to drop the override (callers' own permits apply again)
-- Raising the limit admits queued waiters at once; lowering it never evicts a holder, it only stops
-- admissions until the holders drain below the new limit.
-- Returns {holders, now}
local permits = tonumber(ARGV[2])
if permits > 0 then
  redis.call('SET', P, permits)
else
  redis.call('DEL', P)
end
local count = redis.call('ZCARD', H)
if permits > 0 then
  count = count - purge_holders()
  purge_waiters()
  admit(permits, count)
end
if redis.call('EXISTS', Q) == 0 then settle(nil) end
return { redis.call('ZCARD', H), NOW }
