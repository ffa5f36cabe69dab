-- lua/permit-inspect.lua: live holders and queue length of one name, without a scan.
-- KEYS  H Q W M P F A (see lib/permits.lua)
-- ARGV[1] channel
-- Cost: O(log n).
-- Returns {holders, queued, permits override (0 = none), now, adaptive limit (0 = none)}
local holders = redis.call('ZCOUNT', H, '(' .. NOW, '+inf')
if holders == 0 then
  local _, lone_exp = parse_lone(redis.call('GET', F)) -- a lone holder (lib/permits.lua)
  if lone_exp and lone_exp > NOW then holders = 1 end
end
local permits, adaptive = parse_limit(redis.call('GET', P))
return {
  holders,
  redis.call('ZCOUNT', W, '(' .. NOW, '+inf'),
  (permits and not adaptive) and permits or 0,
  NOW,
  adaptive and permits or 0,
}
