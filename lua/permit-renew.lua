-- lua/permit-renew.lua: extend live leases (batched: one call renews every due lease of one name).
-- A lease is live while its acquisition holds: for a reentrant owner, while the acquisition id is in
-- the hold's list, so a lease the owner lost is never renewed through a later acquisition of the same
-- owner (G4). Idempotent: a resent renewal extends to the same deadline again.
-- KEYS  H Q W M P F (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] ttl ms  ARGV[3..] pairs: token, acquisition id ('' = the token is its own)
-- Cost: O(t log n) for t leases (a lease of weight w counts w), plus O(k) per reentrant lease's
-- list of k acquisitions.
-- Returns {now, expiresAt per lease}; 0 for a lease that no longer holds a permit (lost: G4).
local ttl = tonumber(ARGV[2])
local out = { NOW }
local exp = NOW + ttl
local any = false
for i = 3, #ARGV, 2 do
  local tok, op = ARGV[i], ARGV[i + 1]
  local held = redis.call('ZSCORE', H, tok)
  if held and tonumber(held) > NOW and (op == '' or has_op(redis.call('HGET', M, 'a:' .. tok), op)) then
    local at = math.max(tonumber(held), exp)
    local holds = {}
    add_hold(holds, at, tok) -- a weighted hold's w members keep one expiry
    redis.call('ZADD', H, unpack(holds))
    out[#out + 1] = at
    any = true
  else
    out[#out + 1] = 0
  end
end
if any then
  -- H exists with an expiry whenever a live holder does; M, when it keeps fences or acquisitions of
  -- holders, lives as long as their leases (and stays absent when it keeps none).
  redis.call('PEXPIREAT', H, int(exp), 'GT')
  expire_at_least(M, exp)
end
return out
