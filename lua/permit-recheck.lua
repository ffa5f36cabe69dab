-- lua/permit-recheck.lua: one process's batched heartbeat for its waiters on one name, and the
-- fallback for a lost wake-up: purges the dead, hands out free permits, reports each wait's state.
-- A wait is a token and the acquisition it waits for; it is granted only when that acquisition holds
-- a live lease (an expired, not yet purged lease is no grant: G2), so a re-check never reports an
-- earlier grant of the same owner as this wait's (G12). A granted wait's fence is the one kept for
-- its token (holder_fence: a fresh one, kept, for a permit granted at once, whose reply this caller
-- never saw).
-- KEYS  H Q W M P F A (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] permits  ARGV[3] waiter heartbeat ttl ms
-- ARGV[4..] pairs: token, acquisition id ('' = the token is its own acquisition)
-- Cost: O(w log n) for w waits (one look-up per reentrant acquisition, however many the owner
-- holds), plus O(k) per reentrant wait's list of k acquisitions waiting on its token, plus the queue work of
-- lib/permit-queue.lua: at most 100 expired holders and 1000 dead waiters purged, 1000 more dead waiters
-- skipped at the head of the queue, 1000 grants made: the rest is left to the next call, and a
-- reply's nextExpiry is then `now` (look again at once).
-- A fair queue's call (lib/fair.lua): KEYS H Q W M P F A D T K X, the same ARGV. A parked waiter (at its
-- flow's cap) is queued, at the place its score has in Q, and heart-beaten; an evicted one is {-2}.
-- Fair cost: as above, plus O(log n) per wait not found in Q, and the fair bookkeeping of admit().
-- Returns {now, nextExpiry, then per wait: {1, fence, expiresAt} granted | {0, position} queued
--          | {-1} unknown (evicted or expired: the caller must queue again) | fair only: {-2} shed
--          (evicted by a higher class: never granted)}
local permits, waiter_ttl = limit(ARGV[2]), tonumber(ARGV[3])
local count = live_holders(redis.call('ZCARD', H))
if D and count == 0 then fq.heal() end
purge_waiters()
admit(permits, count)
local beat = NOW + waiter_ttl
local out = { NOW, 0 }
local queued = false
-- F, read once if a wait is not in H: the name's lone holder (lib/permits.lua) holds a permit granted
-- at once, with its fence in F's value.
local lone = nil
for i = 4, #ARGV, 2 do
  local tok, op = ARGV[i], ARGV[i + 1]
  local held = redis.call('ZSCORE', H, tok)
  if not held and op == '' and lone == nil then lone = { parse_lone(redis.call('GET', F)) } end
  if held and tonumber(held) > NOW and (op == '' or holds_op(tok, op)) then
    out[#out + 1] = { 1, holder_fence(tok, tonumber(held)), tonumber(held) }
  elseif not held and op == '' and lone[3] == tok and lone[2] > NOW then
    out[#out + 1] = { 1, lone[1], lone[2] }
  else
    local rank = redis.call('ZRANK', Q, tok)
    if rank and op ~= '' then
      local _, ops = parse_spec(redis.call('HGET', M, 't:' .. tok))
      if not has_op(ops, op) then rank = nil end
    end
    local shed = false
    if not rank and D and op == '' then
      -- A fair queue: parked at its flow's cap (still waiting), or evicted (shed).
      local score = fq.parked(tok)
      if score then
        rank = redis.call('ZCOUNT', Q, '-inf', int(score))
      else
        local mark = redis.call('ZSCORE', X, tok)
        shed = mark and tonumber(mark) > NOW
      end
    end
    if rank then
      redis.call('ZADD', W, 'GT', beat, tok) -- never shortens the beat of a call with a longer one
      out[#out + 1] = { 0, rank }
      queued = true
    elseif shed then
      out[#out + 1] = { -2 }
    else
      out[#out + 1] = { -1 }
    end
  end
end
if queued then
  -- Q, W and M exist (with their expiry) while anybody waits.
  redis.call('PEXPIREAT', Q, beat, 'GT')
  redis.call('PEXPIREAT', W, beat, 'GT')
  redis.call('PEXPIREAT', M, beat, 'GT')
  if D then
    redis.call('PEXPIREAT', K, beat, 'GT')
    fq.keep(beat)
  end
end
out[2] = backlog and NOW or next_expiry()
if D then
  fq.flush()
  if redis.call('EXISTS', Q, K) == 0 then settle(nil) end
  return out
end
if redis.call('EXISTS', Q) == 0 then settle(nil) end
return out
