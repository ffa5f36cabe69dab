-- lua/rwlock-recheck.lua: one process's batched heartbeat for its waiters (of either mode) on one
-- lock, and the fallback for a lost wake-up: purges the dead, admits who may enter, reports each
-- wait's state. A wait is a token and the acquisition it waits for: it is granted only when that
-- acquisition holds a live lease, so an earlier grant of the same owner is never taken for this
-- wait's (G12).
-- KEYS  R X Q W M A (see lib/rwlock.lua)
-- ARGV[1] channel  ARGV[2] waiter heartbeat ttl ms  ARGV[3..] pairs: token, acquisition id
-- Cost: O(w log n) for w waits (a granted wait is one look-up, however many the owner holds), plus
-- O(k) per wait's list of k acquisitions waiting on its token, plus the queue work of lib/rwlock.lua:
-- at most 100 expired holders and 1000 dead waiters purged, 1000 more dead waiters skipped at the
-- head of the queue, 1000 grants made: the rest is left to the next call, and a reply's nextExpiry
-- is then `now` (look again at once).
-- Returns {now, nextExpiry, then per wait: {1, fence, expiresAt} granted | {0, position} queued
--          | {-1} unknown (evicted: the caller must queue again)}
local waiter_ttl = tonumber(ARGV[2])
purge()
admit()
local beat = NOW + waiter_ttl
local out = { NOW, 0 }
local queued = false
for i = 3, #ARGV, 2 do
  local tok, op = ARGV[i], ARGV[i + 1]
  local found = false
  for _, mode in ipairs({ 'w', 'r' }) do
    local score = not found and live_score(HOLDS[mode], tok)
    if score and holds_op(mode, tok, op) then
      out[#out + 1] = { 1, tonumber(redis.call('HGET', M, 'g' .. mode .. ':' .. tok) or '0'), score }
      found = true
    end
  end
  if not found then
    local rank = redis.call('ZRANK', Q, tok)
    local _, _, ops = waiting_spec(tok)
    if rank and has_op(ops, op) then
      redis.call('ZADD', W, 'GT', beat, tok)
      out[#out + 1] = { 0, rank }
      queued = true
    else
      out[#out + 1] = { -1 }
    end
  end
end
if queued then
  expire_at_least(Q, beat)
  expire_at_least(W, beat)
  expire_at_least(M, beat)
end
out[2] = backlog and NOW or next_expiry()
settle()
return out
