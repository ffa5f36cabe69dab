-- lua/lib/permit-holds.lua: a permit set's holders: the earliest lease, a holder's bookkeeping in M,
-- and the acquisitions of a reentrant owner's hold in A. A prelude of every permit-*.lua script, after
-- lib/permit-fence.lua. Each helper is O(log n) in the holders, or bounded (sweep_acquisitions).

-- Earliest lease expiry among holders (0 when none), cached: the waiters' fallback re-check time.
local first_expiry = nil
local function next_expiry()
  if first_expiry == nil then
    local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
    first_expiry = first[2] and tonumber(first[2]) or 0
  end
  return first_expiry
end

-- Forget the fence and acquisitions (g:, a: in M) of holders that left.
local function drop_holder_fields(tokens)
  local fields = {}
  for _, tok in ipairs(tokens) do
    fields[#fields + 1] = 'g:' .. tok
    fields[#fields + 1] = 'a:' .. tok
    fields[#fields + 1] = 'c:' .. tok
  end
  redis.call('HDEL', M, unpack(fields))
end

-- Whether acquisition `op` of a reentrant owner holds through `tok`'s live hold: 1 when it is the
-- hold's first (a:), 2 when it is one of the others (a member of A), false when it is not there.
-- A member names its hold's fence, so a member left by an earlier hold of the same token (one that
-- ran out) never counts for a later one. O(log n): the owner's other acquisitions are never read.
-- `fields`: the hold's a: and g: fields, when the caller has read them (a renewal of many leases of
-- one hold reads them once, not once a lease).
local function hold_fields(tok)
  return redis.call('HMGET', M, 'a:' .. tok, 'g:' .. tok)
end
local function holds_op(tok, op, fields)
  fields = fields or hold_fields(tok)
  if fields[1] == op then return 1 end
  if fields[1] and fields[2] and redis.call('ZSCORE', A, op .. ' ' .. fields[2] .. ' ' .. tok) then return 2 end
  return false
end

-- One more acquisition `op` holds through `tok`'s hold (fence `fence`, lease until `exp`), where
-- `first` is the hold's a: field (nil: the hold keeps no acquisitions yet; this one is its first).
local function add_op(tok, op, first, fence, exp)
  if not first then
    redis.call('HSET', M, 'a:' .. tok, op)
    return
  end
  redis.call('ZADD', A, exp, op .. ' ' .. int(fence) .. ' ' .. tok)
  redis.call('HINCRBY', M, 'c:' .. tok, 1)
  expire_at_least(A, exp)
end

-- Members of A whose hold is gone (its lease ran out, or the hash was lost) go, at most 100 a call;
-- a due member whose hold lives (an acquisition nobody renews while others do) gets the hold's
-- expiry. O(log n) when none is due: renewals keep a live hold's renewed members ahead of the clock.
local function sweep_acquisitions()
  local due = redis.call('ZRANGEBYSCORE', A, '-inf', NOW, 'LIMIT', 0, 100)
  for _, member in ipairs(due) do
    local at = string.find(member, ' ', 1, true) or 0
    local after = string.find(member, ' ', at + 1, true) or at
    local fence, tok = string.sub(member, at + 1, after - 1), string.sub(member, after + 1)
    local held = redis.call('ZSCORE', H, tok)
    if held and tonumber(held) > NOW and redis.call('HGET', M, 'g:' .. tok) == fence then
      redis.call('ZADD', A, held, member)
    else
      redis.call('ZREM', A, member)
    end
  end
end
