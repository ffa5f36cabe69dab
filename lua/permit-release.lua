-- lua/permit-release.lua: give permits back (or leave the queue) and hand freed permits on. One call
-- carries the releases a process made on the name in one event-loop turn. It ends in the state one
-- call per token, in that order, would leave, with one difference: waiters that give up leave the
-- queue before the freed permits are handed on (separate calls could grant such a waiter a permit
-- only for its own release to free it again), so their code is 3 where separate calls might say 1.
-- KEYS  H Q W M P F (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] permits  ARGV[3] 1 = reentrant token (may hold re-entries; then exactly
-- one token)  ARGV[4..] distinct tokens
-- Returns {grants, then per token a code}: code 1 when the token's permit was freed, 2 when only a
--         reentry count was dropped, 3 when the token was waiting and left the queue, 0 when the token
--         had nothing (already released or expired: never another owner's permit, G3); grants = the
--         message published for the permits handed on ('' for none), so the releasing process can
--         wake its own waiters without waiting for the pub/sub round trip.
local reentrant = ARGV[3] == '1'
local tokens = { unpack(ARGV, 4) }
local out = { '' }

local freed, others = {}, {}
local held = redis.call('ZMSCORE', H, unpack(tokens))
for i, tok in ipairs(tokens) do
  if held[i] and tonumber(held[i]) > NOW then
    if reentrant then
      local count = tonumber(redis.call('HGET', M, 'c:' .. tok) or '1')
      if count > 1 then
        redis.call('HSET', M, 'c:' .. tok, count - 1)
        return { '', 2 }
      end
    end
    freed[#freed + 1] = tok
    out[i + 1] = 1
  else
    others[#others + 1] = i
    out[i + 1] = 0
  end
end
if #freed > 0 then redis.call('ZREM', H, unpack(freed)) end

local has_q, has_m, has_h = presence()
if has_q and #others > 0 then
  local names = {}
  for j, i in ipairs(others) do names[j] = tokens[i] end
  local waiting = redis.call('ZMSCORE', Q, unpack(names))
  local gone, fields = {}, {}
  for j, i in ipairs(others) do
    local tok = tokens[i]
    if waiting[j] then
      local extra = reentrant and tonumber(redis.call('HGET', M, 'k:' .. tok) or '0') or 0
      if extra > 0 then
        -- One of several same-owner acquires gives up; the token keeps its place for the others.
        redis.call('HSET', M, 'k:' .. tok, extra - 1)
        return { '', 3 }
      end
      gone[#gone + 1] = tok
      fields[#fields + 1] = 't:' .. tok
      out[i + 1] = 3
    end
  end
  if #gone > 0 then
    redis.call('ZREM', Q, unpack(gone))
    redis.call('ZREM', W, unpack(gone))
    redis.call('HDEL', M, unpack(fields))
    has_q = redis.call('EXISTS', Q) == 1
  end
end
if has_q then
  if #freed > 0 then drop_holder_fields(freed) end
  purge_waiters()
  local permits = limit(ARGV[2])
  local count = redis.call('ZCARD', H)
  if count >= permits then count = count - purge_holders() end
  out[1] = admit(permits, count)
  -- While waiters remain, their heartbeats keep every key alive: settling only matters once none do.
  if redis.call('EXISTS', Q) == 1 then return out end
  settle(nil)
  return out
end
settle(freed, has_m, has_h)
return out
