-- lua/rwlock-renew.lua: extend live leases of one mode (batched: one call renews every due lease of
-- one name and mode). Each reader's lease is renewed on its own entry; a lease is live while its
-- acquisition is one of the hold's (G4, as in permit-renew.lua).
-- KEYS  R X Q W M (see lib/rwlock.lua)
-- ARGV[1] channel  ARGV[2] mode 'r' | 'w'  ARGV[3] ttl ms  ARGV[4..] pairs: token, acquisition id
-- Cost: O(t log n) for t leases, plus O(k) per lease's list of k acquisitions.
-- Returns {now, expiresAt per lease}; 0 for a lease that no longer holds that mode (lost: G4).
local mode, ttl = ARGV[2], tonumber(ARGV[3])
local key = HOLDS[mode]
local out = { NOW }
local exp = NOW + ttl
local any = false
for i = 4, #ARGV, 2 do
  local tok, op = ARGV[i], ARGV[i + 1]
  local held = live_score(key, tok)
  local ops = held and redis.call('HGET', M, 'a' .. mode .. ':' .. tok)
  -- (No list: a hold without bookkeeping is renewed as a whole.)
  if held and (not ops or has_op(ops, op)) then
    local at = math.max(held, exp)
    redis.call('ZADD', key, at, tok)
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
