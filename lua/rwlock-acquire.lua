-- lua/rwlock-acquire.lua: take the read or write lock now, re-enter it, or join the FIFO queue.
-- Idempotent (G12): every call has its own acquisition id; a resent call finds its id already holding
-- or waiting and gets the same answer back, unchanged.
-- KEYS  R X Q W M A (see lib/rwlock.lua)
-- ARGV[1] channel  ARGV[2] token  ARGV[3] mode 'r' | 'w'  ARGV[4] lease ttl ms
-- ARGV[5] 0 = try (never queue, never join a wait), 1 = queue when the lock is not free
-- ARGV[6] waiter heartbeat ttl ms  ARGV[7] acquisition id of this call
-- Cost: O(1) when the lock is free and nobody waits (6 commands: TIME, EXISTS, then the hold). Else O(log n) (a
-- re-entry too, however many acquisitions the owner holds), plus O(k) for the owner's k
-- acquisitions waiting together on its token, plus the queue work of lib/rwlock.lua: at most 100
-- expired holders and 1000 dead waiters purged, 1000 more dead waiters skipped at the head of the
-- queue, 1000 grants made: the rest is left to the next call, and a reply's nextExpiry is then `now`
-- (look again at once).
-- Returns {1, fence, expiresAt, now} when the caller holds the lock in `mode` (re-entry adds the
--           acquisition to the hold; a downgrade returns the write hold's fencing token),
--         {0, position, nextExpiry, now} when queued (position is 0-based; -1 = not queued, try mode),
--         {-1, 0, 0, now} refused: the token holds only a read lock and asks for write (an upgrade),
--         {-2, 0, 0, now} refused: the token already waits for this lock in the other mode (an owner
--           waits in one mode at a time; a second acquisition in the same mode waits with the first).
local token, mode, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local enqueue, waiter_ttl, op = ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]

-- The lock is free and nobody waits (no holder of either mode, no queue: R, X and Q are gone): the
-- call takes it at once, as the full path below would, without looking for anything to purge, admit,
-- re-enter or wait with. (Dead waiters' leftovers without a queue, in W or q: fields, block nothing:
-- the next full call or settle() clears them.) One EXISTS, then the hold: the holders' key is new,
-- and one HSET writes the fence and the hold's bookkeeping (a count of 0 is none, and replaces one
-- an earlier hold of the token may have left).
-- EXISTS counts a key once per mention: M once, R, X and Q twice each, so an odd count means M is there.
local present = redis.call('EXISTS', M, R, R, X, X, Q, Q)
if present <= 1 then
  local exp = NOW + ttl
  local key = HOLDS[mode]
  redis.call('ZADD', key, exp, token)
  redis.call('PEXPIREAT', key, exp)
  if present == 0 then
    -- An idle lock with no last fence kept: its fences are behind the clock.
    redis.call('HSET', M, 'f', NOW_US, 'g' .. mode .. ':' .. token, NOW_US, 'a' .. mode .. ':' .. token, op)
    redis.call('PEXPIREAT', M, exp)
    return { 1, NOW_US, exp, NOW }
  end
  local fence = math.max(tonumber(redis.call('HGET', M, 'f') or '0') + 1, NOW_US)
  redis.call('HSET', M, 'f', fence, 'g' .. mode .. ':' .. token, fence, 'a' .. mode .. ':' .. token, op,
    'c' .. mode .. ':' .. token, 0)
  -- M keeps a last fence (or leftovers) with an expiry of its own.
  if redis.call('PEXPIREAT', M, exp, 'GT') == 0 then redis.call('PEXPIREAT', M, exp, 'NX') end
  return { 1, fence, exp, NOW }
end

purge()
-- Hand the lock to whoever may enter first: this token's own wait may be among them.
admit()

local mine = live_score(HOLDS[mode], token)
if mine then
  local first = redis.call('HGET', M, 'a' .. mode .. ':' .. token)
  local fence = redis.call('HGET', M, 'g' .. mode .. ':' .. token) or '0'
  local exp = mine
  local member = first and (op .. ' ' .. hold_id(first) .. ' ' .. mode .. token)
  if first ~= op and not (member and redis.call('ZSCORE', A, member)) then
    -- Re-entry by the same owner: one more acquisition (O(log n) however many it holds), lease
    -- pushed out to now + ttl.
    exp = math.max(mine, NOW + ttl)
    if first then
      redis.call('ZADD', A, exp, member)
      redis.call('HINCRBY', M, 'c' .. mode .. ':' .. token, 1)
      expire_at_least(A, exp)
    else
      redis.call('HSET', M, 'a' .. mode .. ':' .. token, op)
    end
    local key = HOLDS[mode]
    redis.call('ZADD', key, exp, token)
    expire_at_least(key, exp)
    expire_at_least(M, exp)
  end
  return { 1, tonumber(fence), exp, NOW }
end
if mode == 'r' and live_score(X, token) then
  -- Downgrade: the writer may read at once, whoever waits; same fencing token as its write hold.
  local fence = tonumber(redis.call('HGET', M, 'gw:' .. token) or '0')
  local exp = NOW + ttl
  hold('r', token, exp, fence, op)
  return { 1, fence, exp, NOW }
end
if mode == 'w' and live_score(R, token) then
  return { -1, 0, 0, NOW }
end

local m, _, ops, raw = waiting_spec(token)
if raw then
  if m ~= mode then return { -2, 0, 0, NOW } end
  if not has_op(ops, op) then
    if not enqueue then return { 0, -1, backlog and NOW or next_expiry(), NOW } end
    -- The same owner asks again in the same mode while its token waits: this acquisition waits with
    -- it and is handed the lock with it.
    redis.call('HSET', M, 'q:' .. token, raw .. ' ' .. op)
    local beat = NOW + waiter_ttl
    redis.call('ZADD', W, 'GT', beat, token) -- never shortens the beat of a call with a longer one
    expire_at_least(Q, beat)
    expire_at_least(W, beat)
    expire_at_least(M, beat)
  end
  return { 0, redis.call('ZRANK', Q, token), backlog and NOW or next_expiry(), NOW }
end
-- Skip the queue only when nobody waits: once a writer waits, new readers queue behind it (G6).
if redis.call('ZCARD', Q) == 0 and live_count(X) == 0 and (mode == 'r' or live_count(R) == 0) then
  local exp = NOW + ttl
  local fence = next_fence()
  hold(mode, token, exp, fence, op)
  return { 1, fence, exp, NOW }
end
if not enqueue then
  return { 0, -1, backlog and NOW or next_expiry(), NOW }
end
local ticket = redis.call('HINCRBY', M, 'n', 1)
redis.call('ZADD', Q, ticket, token)
-- A lock handed to this waiter later starts with at most its heartbeat ttl: a live waiter renews it
-- to the full ttl; a waiter that died in the queue gives it back within waiter_ttl, not ttl.
redis.call('HSET', M, 'q:' .. token, mode .. ':' .. int(math.min(ttl, waiter_ttl)) .. ' ' .. op)
local rank = redis.call('ZCARD', Q) - 1
local beat = NOW + waiter_ttl
redis.call('ZADD', W, beat, token)
expire_at_least(Q, beat)
expire_at_least(W, beat)
expire_at_least(M, beat)
return { 0, rank, backlog and NOW or next_expiry(), NOW }
