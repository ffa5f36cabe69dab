-- lua/rwlock-release.lua: give one acquisition of a read or write hold back (or leave the queue) and
-- admit who may enter. Idempotent (G12): an acquisition that no longer holds or waits is left alone,
-- so a resent release does nothing more.
-- KEYS  R X Q W M A (see lib/rwlock.lua)
-- ARGV[1] channel  ARGV[2] token  ARGV[3] mode 'r' | 'w'  ARGV[4] acquisition id
-- Cost: O(log n) when nobody waits and no hold has a second acquisition (no queue work, and no
-- purge either when this was the last hold: 7 commands). Else O(log n), plus O(k) for the owner's list of k
-- acquisitions, plus the queue work of lib/rwlock.lua: at most 100 expired holders and 1000 dead
-- waiters purged, 1000 more dead waiters skipped at the head of the queue, 1000 grants made: the
-- rest is left to the next call, and a reply's nextExpiry is then `now` (look again at once).
-- Returns 1 when the token's hold of that mode was freed, 2 when only this acquisition was dropped
--         (others of the owner still hold), 3 when the acquisition was waiting and left the queue (the
--         token too, if it was its last), 0 when there was nothing to give back (already released or
--         expired: never another owner's hold, and never the token's hold of the other mode, G3).
local token, mode, op = ARGV[2], ARGV[3], ARGV[4]
local key = HOLDS[mode]

-- M's f when give_back() read it (false: M keeps none), else nil.
local last_fence = nil
-- With `defer`, give_back() leaves the freed hold's fields in M for the caller (`left_fields`): a
-- release that frees the lock deletes M whole.
local defer, left_fields = false, nil

-- What releasing `op` does to the token's hold of `mode` or to its wait: 1, 2, 3 or 0 (see above).
local function give_back()
  if live_score(key, token) then
    local field, count = 'a' .. mode .. ':' .. token, 'c' .. mode .. ':' .. token
    local fields = redis.call('HMGET', M, field, count, 'f')
    last_fence = fields[3]
    local first = fields[1]
    -- (No bookkeeping: a hold without it is freed as a whole.)
    if first then
      local more = tonumber(fields[2] or '0')
      if first == op then
        if more > 0 then
          redis.call('HSET', M, field, ' ' .. op) -- released; still the hold's name (hold_id)
          return 2
        end
      elseif redis.call('ZREM', A, op .. ' ' .. hold_id(first) .. ' ' .. mode .. token) == 1 then
        if more > 1 then
          redis.call('HINCRBY', M, count, -1)
          return 2
        end
        redis.call('HDEL', M, count)
        if first == hold_id(first) then return 2 end -- the first still holds
      else
        return 0
      end
    end
    redis.call('ZREM', key, token)
    left_fields = { 'g' .. mode .. ':' .. token, field, count }
    if not defer then redis.call('HDEL', M, unpack(left_fields)) end
    return 1
  end
  local m, ttl, ops, raw = waiting_spec(token)
  if not raw or m ~= mode then return 0 end
  if ops ~= '' then
    if not has_op(ops, op) then return 0 end
    local left = drop_op(ops, op)
    if left ~= '' then
      -- One of several acquisitions of the owner gives up; the token keeps its place for the others.
      redis.call('HSET', M, 'q:' .. token, m .. ':' .. int(ttl) .. ' ' .. left)
      return 3
    end
  end
  redis.call('ZREM', Q, token)
  redis.call('ZREM', W, token)
  redis.call('HDEL', M, 'q:' .. token)
  return 3
end

-- Nobody waits and no hold has a second acquisition (Q and A are gone): nothing to admit or sweep,
-- and when the lock is free after this release, nothing to purge either (settle() deletes the rest).
if redis.call('EXISTS', Q, A) == 0 then
  defer = true
  local result = give_back()
  if redis.call('EXISTS', R, X) > 0 then
    if left_fields then redis.call('HDEL', M, unpack(left_fields)) end
    purge()
    settle()
  elseif last_fence ~= nil then
    settle_idle(last_fence) -- R, X, Q and A are gone, and M's f was read already: M goes whole
  else
    settle()
  end
  return result
end

purge()
sweep_acquisitions()
local result = give_back()
admit()
settle()
return result
