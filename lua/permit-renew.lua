-- lua/permit-renew.lua: extend live leases (batched: one call renews every due lease of one name).
-- KEYS  H Q W M P F (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] ttl ms  ARGV[3..] tokens
-- Returns {now, expiresAt per token}; 0 for a token that no longer holds a permit (lost: G4).
local ttl = tonumber(ARGV[2])
local out = { NOW }
local exp = NOW + ttl
local any = false
for i = 3, #ARGV do
  local held = redis.call('ZSCORE', H, ARGV[i])
  if held and tonumber(held) > NOW then
    local at = math.max(tonumber(held), exp)
    redis.call('ZADD', H, at, ARGV[i])
    out[#out + 1] = at
    any = true
  else
    out[#out + 1] = 0
  end
end
if any then
  -- Both exist with an expiry whenever a live holder does (M only while someone waits or re-enters).
  redis.call('PEXPIREAT', H, int(exp), 'GT')
  redis.call('PEXPIREAT', M, int(exp), 'GT')
end
return out
