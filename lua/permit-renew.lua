-- lua/permit-renew.lua: extend live leases (batched: one call renews every due lease of one name).
-- A lease is live while its acquisition holds: for a reentrant owner, while the acquisition id is
-- one of the hold's (holds_op), so a lease the owner lost is never renewed through a later
-- acquisition of the same owner (G4). Idempotent: a resent renewal extends to the same deadline again.
-- KEYS  H Q W M P F A (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] ttl ms  ARGV[3..] pairs: token, acquisition id ('' = the token is its own)
-- A renewed acquisition that is a member of A keeps a score at or past the hold's new expiry, so a
-- live hold's members are never due for sweep_acquisitions(): only those of a hold that ran out, or
-- of an acquisition nobody renews, are. A score behind it moves one ttl past it (one ZADD XX a call
-- for all of them), so renewals a third of the ttl apart re-score a member about every third time.
-- The price: a dead owner's members are swept up to one ttl after its hold ran out. Its permits are
-- not held any longer (the hold's own expiry governs), and a member names its hold's fence, so it
-- never counts for a later hold of the same token.
-- Cost: O(1) for a lone holder (lib/permits.lua: one GET and one SET). Else O(t log n) for t leases
-- (a lease of weight w counts w): a reentrant owner's hold is read and extended once per call, and
-- each of its other leases is one O(log n) look-up (a ZSCORE) and, about every third renewal, one
-- O(log n) re-score (in one ZADD a call), however many it holds.
-- Returns {now, expiresAt per lease}; 0 for a lease that no longer holds a permit (lost: G4).
local ttl = tonumber(ARGV[2])
local out = { NOW }
local exp = NOW + ttl
local any = false
-- score, member, ... of the renewed leases that are members of A (ZADD arguments)
local rescored = {}
-- token -> its hold's expiry before this call (false: it holds nothing live), and -> the expiry it
-- was extended to in this call: the leases of one reentrant owner share a hold, read and extended once.
local live, extended = {}, {}
-- token -> its hold's a: and g: fields, read once (holds_op).
local fields = {}
-- F, read once if a token is not in H: it may be the name's lone holder (lib/permits.lua).
local lone = nil
-- Whether A exists: a member of it was found, so no EXISTS is needed to extend it.
local in_a = false
-- holds_op() for a lease of a live hold whose fields are read, and a member's score in A: the
-- renewal needs the score its look-up finds (a second ZSCORE would cost what skipping saves).
local function holds_here(tok, op)
  local f = fields[tok]
  if op == '' or f[1] == op then return 1 end
  local score = f[1] and f[2] and redis.call('ZSCORE', A, op .. ' ' .. f[2] .. ' ' .. tok)
  if score then return 2, tonumber(score) end
  return false
end
for i = 3, #ARGV, 2 do
  local tok, op = ARGV[i], ARGV[i + 1]
  if live[tok] == nil then
    local held = redis.call('ZSCORE', H, tok)
    live[tok] = held and tonumber(held) > NOW and tonumber(held) or false
    if not held then
      if lone == nil then lone = { parse_lone(redis.call('GET', F)) } end
      if lone[3] == tok and lone[2] > NOW then live[tok] = 'lone' end
    end
  end
  if op ~= '' and live[tok] and live[tok] ~= 'lone' and not fields[tok] then fields[tok] = hold_fields(tok) end
  local holds_it, score = false, nil
  if live[tok] ~= 'lone' and live[tok] then holds_it, score = holds_here(tok, op) end
  if live[tok] == 'lone' and op ~= '' then
    out[#out + 1] = 0 -- a lone holder is a plain token: no acquisition id holds through it
  elseif live[tok] == 'lone' then
    -- One SET: the lease is F's value and expiry.
    if not extended[tok] then
      extended[tok] = math.max(lone[2], exp)
      redis.call('SET', F, lone_value(int(lone[1]), extended[tok], tok), 'XX', 'PXAT', extended[tok])
    end
    out[#out + 1] = extended[tok]
  elseif holds_it then
    if not extended[tok] then
      extended[tok] = math.max(live[tok], exp)
      local members = {}
      add_hold(members, extended[tok], tok) -- a weighted hold's w members keep one expiry
      redis.call('ZADD', H, unpack(members))
    end
    out[#out + 1] = extended[tok]
    any = true
    if holds_it == 2 then in_a = true end
    if holds_it == 2 and score < extended[tok] then
      rescored[#rescored + 1] = extended[tok] + ttl
      rescored[#rescored + 1] = op .. ' ' .. fields[tok][2] .. ' ' .. tok
    end
  else
    out[#out + 1] = 0
  end
end
if any then
  -- H exists with an expiry whenever a live holder does; M, when it keeps fences or acquisitions of
  -- holders, lives as long as their leases (and stays absent when it keeps none); A likewise.
  redis.call('PEXPIREAT', H, exp, 'GT')
  expire_at_least(M, exp)
  -- A lives as long as any hold it keeps members of: one renewed through its first acquisition only
  -- extends A too (else A could run out under a live hold, and its members with it).
  if #rescored > 0 then redis.call('ZADD', A, 'XX', unpack(rescored)) end
  if in_a or redis.call('EXISTS', A) == 1 then expire_at_least(A, exp) end
end
return out
