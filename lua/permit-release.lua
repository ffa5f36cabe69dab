-- lua/permit-release.lua: give permits back (or leave the queue) and hand freed permits on. One call
-- carries the releases a process made on the name in one event-loop turn. It ends in the state one
-- call per token, in that order, would leave, with one difference: waiters that give up leave the
-- queue before the freed permits are handed on (separate calls could grant such a waiter a permit
-- only for its own release to free it again), so their code is 3 where separate calls might say 1.
-- Idempotent (G12): a token that holds nothing and waits for nothing is left alone, so a resent
-- release (ioredis resends after a reconnect) does nothing more. With an acquisition id, the one
-- token is a reentrant owner's: only that acquisition is given back, once; the permit is freed (or
-- the queue left) when the owner's last acquisition goes.
-- KEYS  H Q W M P F A (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] permits  ARGV[3] acquisition id of a reentrant owner ('' = none: each
-- token is its own acquisition)  ARGV[4..] distinct tokens (exactly one with an acquisition id)
-- Cost: O(1) when the name has a lone holder (3 commands: TIME, GET, DEL; lib/permits.lua). Else
-- O(t log n) for t tokens (a token of weight w counts w; one acquisition of a reentrant hold
-- is O(log n) however many the owner holds), plus O(k) for a reentrant owner's k acquisitions
-- waiting together on its token, plus at most 100 stale members of A swept, plus the queue work of lib/permit-queue.lua: at most 100 expired holders and
-- 1000 dead waiters purged, 1000 more dead waiters skipped at the head of the queue, 1000 grants
-- made: the rest is left to the next call, and a reply's nextExpiry is then `now` (look again at
-- once).
-- A fair queue's call (lib/fair.lua): KEYS H Q W M P F A D T K X, the same ARGV. A capped flow's holder
-- that leaves puts back up to its weight of its flow's parked waiters (ZRANGEBYLEX, ZREM K, ZADD Q); a
-- parked waiter leaves K; a waiter that leaves updates the counts (and refunds its flow's tag when it
-- was the flow's last); an evicted token has nothing to give back (0). Fair cost: as above, plus
-- O(w log n) per capped holder of weight w, O(log n) per waiter leaving, and the fair bookkeeping of
-- admit() (lib/fair.lua).
-- Returns {grants, then per token a code}: code 1 when the token's permit was freed, 2 when only one
--         of the owner's acquisitions was dropped, 3 when the token (or one acquisition) was waiting
--         and left the queue, 0 when there was nothing to give back (already released or expired:
--         never another owner's permit, G3); grants = the message published for the permits handed
--         on ('' for none), so the releasing process can wake its own waiters without waiting for
--         the pub/sub round trip.
local op = ARGV[3] ~= '' and ARGV[3] or nil
local tokens = { unpack(ARGV, 4) }
local out = { '' }

-- A lone holder in F (lib/permits.lua): nothing else is held or queued, so only it has anything to
-- give back (a reentrant owner's acquisition never holds this way).
local lone_fence, lone_exp, lone_tok = parse_lone(redis.call('GET', F))
if lone_fence then
  local freed = false
  for i, tok in ipairs(tokens) do
    local mine = not op and tok == lone_tok and lone_exp > NOW
    out[i + 1] = mine and 1 or 0
    freed = freed or mine
  end
  if freed then drop_lone(lone_fence) end
  return out
end

if op then
  local tok = tokens[1]
  local held = redis.call('ZSCORE', H, tok)
  if held and tonumber(held) > NOW then
    local fields = redis.call('HMGET', M, 'a:' .. tok, 'c:' .. tok, 'g:' .. tok)
    local first = fields[1]
    -- (No bookkeeping: a hold without it is freed as a whole.)
    if first then
      local more = tonumber(fields[2] or '0')
      if first == op then
        if more > 0 then
          redis.call('HSET', M, 'a:' .. tok, '')
          return { '', 2 }
        end
      elseif fields[3] and redis.call('ZREM', A, op .. ' ' .. fields[3] .. ' ' .. tok) == 1 then
        if more > 1 then
          redis.call('HINCRBY', M, 'c:' .. tok, -1)
          return { '', 2 }
        end
        redis.call('HDEL', M, 'c:' .. tok)
        if first ~= '' then return { '', 2 } end
      else
        return { '', 0 }
      end
    end
  else
    purge_waiters()
    local spec = redis.call('ZSCORE', Q, tok) and redis.call('HGET', M, 't:' .. tok)
    if spec then
      local ttl, ops = parse_spec(spec)
      if ops then
        if not has_op(ops, op) then return { '', 0 } end
        local left = drop_op(ops, op)
        if left ~= '' then
          -- One of several acquisitions of the owner gives up; the token keeps its place for the others.
          redis.call('HSET', M, 't:' .. tok, int(ttl) .. ' ' .. left)
          return { '', 3 }
        end
      end
    end
  end
  -- The owner's last acquisition: free the permit or leave the queue, below.
end

local freed, others, members = {}, {}, {}
local held = redis.call('ZMSCORE', H, unpack(tokens))
for i, tok in ipairs(tokens) do
  if held[i] and tonumber(held[i]) > NOW then
    freed[#freed + 1] = tok
    add_members(members, tok) -- a weighted hold's w members
    out[i + 1] = 1
  else
    others[#others + 1] = i
    out[i + 1] = 0
  end
end
if #members > 0 then redis.call('ZREM', H, unpack(members)) end

local has_q, has_m, has_h, has_a = presence()
local has_k = false
if D then
  has_k = redis.call('EXISTS', K) == 1
  -- Capped flows' holds go down (and their parked waiters come back) whether or not any is parked.
  if #freed > 0 then fq.released(freed) end
  if has_k and not has_h then fq.heal() end
  if fq.moved() > 0 then has_q = true end
end
if has_a then sweep_acquisitions() end
if has_k and #others > 0 then
  -- Parked waiters that give up leave K (their counts, and their flow's refund: lib/fair.lua).
  local fields = {}
  for j, i in ipairs(others) do fields[j] = 'k:' .. tokens[i] end
  local parked = redis.call('HMGET', M, unpack(fields))
  local gone, specs = {}, {}
  for j, i in ipairs(others) do
    if parked[j] then
      gone[#gone + 1] = tokens[i]
      specs[#specs + 1] = 't:' .. tokens[i]
      out[i + 1] = 3
    end
  end
  if #gone > 0 then
    fq.departed(gone)
    redis.call('ZREM', W, unpack(gone))
    redis.call('HDEL', M, unpack(specs))
  end
end
if has_q and #others > 0 then
  -- A waiter whose heartbeat lapsed is not waiting any more: nothing to dequeue (as in memory).
  purge_waiters()
  local names = {}
  for j, i in ipairs(others) do names[j] = tokens[i] end
  local waiting = redis.call('ZMSCORE', Q, unpack(names))
  local gone, fields = {}, {}
  for j, i in ipairs(others) do
    local tok = tokens[i]
    if waiting[j] then
      gone[#gone + 1] = tok
      fields[#fields + 1] = 't:' .. tok
      out[i + 1] = 3
    end
  end
  if D and #gone > 0 then fq.departed(gone) end
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
  local count = live_holders(redis.call('ZCARD', H))
  out[1] = admit(permits, count)
  if D then fq.flush() end
  -- While waiters remain, their heartbeats keep every key alive: settling only matters once none do.
  if redis.call('EXISTS', Q) == 1 then return out end
  settle(nil)
  return out
end
settle(freed, has_m, has_h, has_a)
if D then fq.flush() end
return out
