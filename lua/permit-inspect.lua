-- lua/permit-inspect.lua: live holders and queue length of one name, without a scan.
-- KEYS  H Q W M P F A (see lib/permits.lua)
-- ARGV[1] channel
-- Cost: O(log n).
-- Returns {holders, queued, permits override (0 = none), now}
return {
  redis.call('ZCOUNT', H, '(' .. NOW, '+inf'),
  redis.call('ZCOUNT', W, '(' .. NOW, '+inf'),
  tonumber(redis.call('GET', P) or '0'),
  NOW,
}
