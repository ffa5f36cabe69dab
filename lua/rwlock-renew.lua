-- lua/rwlock-renew.lua: extend live leases of one mode (batched: one call renews every due lease of
-- one name and mode). Each reader's lease is renewed on its own entry; a lease is live while its
-- acquisition is one of the hold's (G4, as in permit-renew.lua).
-- KEYS  R X Q W M A (see lib/rwlock.lua)
-- ARGV[1] channel  ARGV[2] mode 'r' | 'w'  ARGV[3] ttl ms  ARGV[4..] pairs: token, acquisition id
-- A renewed acquisition that is a member of A keeps a score at or past the hold's new expiry, so a
-- live hold's members are never due for sweep_acquisitions(): only those of a hold that ran out, or
-- of an acquisition nobody renews, are. A score behind it moves one ttl past it (one ZADD XX a call
-- for all of them), so renewals a third of the ttl apart re-score a member about every third time.
-- The price: a dead owner's members are swept up to one ttl after its hold ran out. It holds the
-- lock no longer (the hold's own expiry governs), and a member names its hold, so it never counts
-- for a later hold of the same token.
-- Cost: O(t log n) for t leases: a reentrant owner's hold is read and extended once per call, and
-- each of its other leases is one O(log n) look-up (a ZSCORE) and, about every third renewal, one
-- O(log n) re-score (in one ZADD a call), however many acquisitions it holds.
-- Returns {now, expiresAt per lease}; 0 for a lease that no longer holds that mode (lost: G4).
local mode, ttl = ARGV[2], tonumber(ARGV[3])
local key = HOLDS[mode]
local out = { NOW }
local exp = NOW + ttl
local any = false
-- score, member, ... of the renewed leases that are members of A (ZADD arguments)
local rescored = {}
-- token -> its hold's expiry before this call (false: none live), -> its first acquisition (false:
-- none kept), and -> the expiry it was extended to in this call: the leases of one reentrant owner
-- share a hold, read and extended once.
local live, firsts, extended = {}, {}, {}
-- Whether A exists: a member of it was found, so no EXISTS is needed to extend it.
local in_a = false
-- holds_op() for a lease of a live hold whose first acquisition is read, and a member's score in A:
-- the renewal needs the score its look-up finds (a second ZSCORE would cost what skipping saves).
local function holds_here(tok, op, first)
  -- (No bookkeeping: a hold without it is renewed as a whole.)
  if not first or first == op then return 1 end
  local score = redis.call('ZSCORE', A, op .. ' ' .. hold_id(first) .. ' ' .. mode .. tok)
  if score then return 2, tonumber(score) end
  return false
end
for i = 4, #ARGV, 2 do
  local tok, op = ARGV[i], ARGV[i + 1]
  if live[tok] == nil then
    live[tok] = live_score(key, tok) or false
    firsts[tok] = live[tok] and redis.call('HGET', M, 'a' .. mode .. ':' .. tok) or false
  end
  local held, first = live[tok], firsts[tok]
  local holds_it, score = false, nil
  if held then holds_it, score = holds_here(tok, op, first) end
  if holds_it then
    if not extended[tok] then
      extended[tok] = math.max(held, exp)
      redis.call('ZADD', key, extended[tok], tok)
    end
    out[#out + 1] = extended[tok]
    any = true
    if holds_it == 2 then in_a = true end
    if holds_it == 2 and score < extended[tok] then
      rescored[#rescored + 1] = extended[tok] + ttl
      rescored[#rescored + 1] = op .. ' ' .. hold_id(first) .. ' ' .. mode .. tok
    end
  else
    out[#out + 1] = 0
  end
end
if any then
  expire_at_least(key, exp)
  expire_at_least(M, exp)
  -- A lives as long as any hold it keeps members of: one renewed through its first acquisition only
  -- extends A too (else A could run out under a live hold, and its members with it).
  if #rescored > 0 then redis.call('ZADD', A, 'XX', unpack(rescored)) end
  if in_a or redis.call('EXISTS', A) == 1 then expire_at_least(A, exp) end
end
return out
