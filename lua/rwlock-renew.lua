-- lua/rwlock-renew.lua: extend live leases of one mode (batched: one call renews every due lease of
-- one name and mode). Each reader's lease is renewed on its own entry.
-- KEYS  R X Q W M (see lib/rwlock.lua)
-- ARGV[1] channel  ARGV[2] mode 'r' | 'w'  ARGV[3] ttl ms  ARGV[4..] tokens
-- Returns {now, expiresAt per token}; 0 for a token that no longer holds that mode (lost: G4).
local key, ttl = HOLDS[ARGV[2]], tonumber(ARGV[3])
local out = { NOW }
local exp = NOW + ttl
local any = false
for i = 4, #ARGV do
  local held = live_score(key, ARGV[i])
  if held then
    local at = math.max(held, exp)
    redis.call('ZADD', key, at, ARGV[i])
    out[#out + 1] = at
    any = true
  else
    out[#out + 1] = 0
  end
end
if any then
  expire_at_least(key, exp)
  expire_at_least(M, exp)
end
return out
