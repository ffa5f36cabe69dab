-- lua/lib/permit-queue.lua: a permit set's queue: live holders, dead waiters, admit() (who gets the
-- free permits, in FIFO order, G5), settle() (the keys' expiry once the queue is empty), and begin(),
-- where every permit script starts. A prelude of every permit-*.lua script, after
-- lib/permit-holds.lua and before lib/fair.lua. Each call's work is bounded (DEAD_PER_CALL, `most`).

-- A waiter's spec (M t:<tok>) -> lease ttl to hand over, and the acquisitions waiting (nil for a
-- fresh token). A missing spec (the hash was lost) hands over a short lease that renewal stretches.
local function parse_spec(spec)
  if not spec then return 1000, nil end
  local space = string.find(spec, ' ', 1, true)
  if not space then return tonumber(spec), nil end
  return tonumber(string.sub(spec, 1, space - 1)), string.sub(spec, space + 1)
end

-- Work a call may leave undone: dead waiters beyond its budget, expired holders beyond `most`. The
-- reply's nextExpiry is then `now` (`backlog and NOW or next_expiry()`), so the waiters' processes
-- call again at once instead of at their next heartbeat: each call stays bounded, and the crowd is
-- gone within a few round trips, however large (G2, G5).
local backlog = false

-- Live holders, given `count` = ZCARD H: drops those whose lease ran out (G2), at most `most`
-- (default 100); when more are left, counts the live ones directly (ZCOUNT, O(log n)), so a crowd of
-- expired holders never blocks admission, whatever its size.
local function live_holders(count, most)
  if count == 0 then return 0 end
  most = most or 100
  local first = next_expiry()
  if first == 0 or first > NOW then return count end
  local expired = redis.call('ZRANGEBYSCORE', H, '-inf', NOW, 'LIMIT', 0, most)
  first_expiry = nil
  if #expired == 0 then return count end
  redis.call('ZREM', H, unpack(expired))
  drop_holder_fields(expired)
  if D then fq.released(expired) end
  if #expired < most then return count - #expired end
  local live = redis.call('ZCOUNT', H, '(' .. int(NOW), '+inf')
  if count - #expired > live then backlog = true end
  return live
end

-- Dead waiters one call purges at most, and admit() skips at most (a budget of its own: the purge's
-- never keeps it from serving a live head): ~1 ms of Redis time each.
local DEAD_PER_CALL = 1000
local dead_left = DEAD_PER_CALL

-- Drop waiters whose heartbeat stopped (G5): they never block the queue. With `dead`, those waiters
-- (lapsed ones admit() found at the head of the queue); else up to the call's budget of them.
local function purge_waiters(dead)
  if not dead then
    if dead_left <= 0 then return end
    dead = redis.call('ZRANGEBYSCORE', W, '-inf', NOW, 'LIMIT', 0, dead_left)
    if #dead == 0 then return end
    dead_left = dead_left - #dead
    if dead_left <= 0 and redis.call('ZCOUNT', W, '-inf', NOW) > #dead then backlog = true end
  end
  if D then fq.departed(dead) end
  redis.call('ZREM', Q, unpack(dead))
  redis.call('ZREM', W, unpack(dead))
  local fields = {}
  for i, tok in ipairs(dead) do fields[i] = 't:' .. tok end
  redis.call('HDEL', M, unpack(fields))
end

-- Hand free permits to the head of the queue, in ticket order, and tell their processes. `count` is
-- ZCARD H (0 exactly when H does not exist). Returns the published message ('' for none), a table
-- token -> { fence, expiresAt } of the grants, and how many permits they took (their weights).
local function admit(permits, count)
  local room = permits - count
  if room <= 0 then return '', {}, 0 end
  -- At most 1000 grants per call keeps unpack() within Lua's limits; the rest follow on the next call.
  local most = math.min(room, 1000)
  -- Live waiters in ticket order, as many as their weights fit in `room`: the first live one that does
  -- not fit, and everyone behind it, waits (FIFO with weights, G5). A waiter whose heartbeat has
  -- lapsed is not waiting any more (G5): one that the purge did not reach is dropped here, never
  -- handed a permit (it would keep it min(ttl, waiter ttl) and then pass it on to the next dead one).
  -- Read in batches growing from 16, so that a heavy head that blocks costs O(1), not O(room).
  -- On a fair call (lib/fair.lua) the order is Q's scores as well: a capped waiter at its flow's cap is
  -- parked on the way, and a plain call stops at the first disciplined waiter (it would grant it
  -- without the fair bookkeeping; the fair waiters' own calls admit it).
  local head, dead = {}, {}
  local discs, scored, parked, park_scores, park_beats = {}, {}, {}, {}, {}
  local from, want = 0, math.min(most, 16)
  local stop = false
  while not stop and #head < most do
    if #dead >= DEAD_PER_CALL then
      backlog = true
      break
    end
    local batch, scores
    if D then
      local flat = redis.call('ZRANGE', Q, from, from + want - 1, 'WITHSCORES')
      batch, scores = {}, {}
      for k = 1, #flat, 2 do
        batch[#batch + 1] = flat[k]
        scores[#scores + 1] = tonumber(flat[k + 1])
      end
    else
      batch = redis.call('ZRANGE', Q, from, from + want - 1)
    end
    if #batch == 0 then break end
    from = from + #batch
    local beats = redis.call('ZMSCORE', W, unpack(batch))
    for i, tok in ipairs(batch) do
      if beats[i] and tonumber(beats[i]) > NOW then
        local w = weight(tok)
        local d = D and fq.disc(tok)
        local star = not D and string.find(tok, '*', 1, true)
        if star and string.find(tok, '.', star, true) then
          stop = true
          break
        end
        if d and fq.over(d, w) then
          if #parked >= 1000 then
            backlog = true
            stop = true
            break
          end
          parked[#parked + 1] = tok
          park_scores[#park_scores + 1] = scores[i]
          park_beats[#park_beats + 1] = tonumber(beats[i])
        elseif w > room then
          stop = true
          break
        else
          head[#head + 1] = tok
          if d then
            discs[#head] = d
            scored[#head] = scores[i]
            fq.hold_ahead(d, w)
          end
          room = room - w
          if room == 0 or #head >= most then
            stop = true
            break
          end
        end
      else
        dead[#dead + 1] = tok
      end
    end
    want = math.max(1, math.min(most - #head, want * 2))
  end
  if #dead > 0 then purge_waiters(dead) end
  if #parked > 0 then fq.park(parked, park_scores, park_beats) end
  if #head == 0 then
    if D then fq.flush() end
    return '', {}, 0
  end
  local spec_fields = {}
  for i, tok in ipairs(head) do spec_fields[i] = 't:' .. tok end
  local specs = redis.call('HMGET', M, unpack(spec_fields))
  local granted, lines, holds, fields = {}, {}, {}, {}
  local last_exp = 0
  local taken = 0
  for i, tok in ipairs(head) do
    local ttl, ops = parse_spec(specs[i])
    local exp = NOW + ttl
    local fence = next_fence(exp)
    taken = taken + add_hold(holds, exp, tok)
    if discs[i] then fq.grant(discs[i], scored[i], exp) end
    fields[#fields + 1] = 'g:' .. tok
    fields[#fields + 1] = int(fence)
    local line = tok .. ' ' .. int(fence) .. ' ' .. int(exp)
    if ops then
      -- A reentrant owner: every acquisition that waited on the token holds through it now (the
      -- first in a:, the others in A: O(k) for the k granted here, once).
      local first, more = nil, {}
      for id in string.gmatch(ops, '%S+') do
        if not first then
          first = id
        else
          more[#more + 1] = exp
          more[#more + 1] = id .. ' ' .. int(fence) .. ' ' .. tok
        end
      end
      fields[#fields + 1] = 'a:' .. tok
      fields[#fields + 1] = first
      if #more > 0 then
        redis.call('ZADD', A, unpack(more))
        expire_at_least(A, exp)
        fields[#fields + 1] = 'c:' .. tok
        fields[#fields + 1] = #more / 2
      else
        redis.call('HDEL', M, 'c:' .. tok) -- a count an earlier hold of the token left
      end
      line = line .. ' ' .. ops
    end
    last_exp = math.max(last_exp, exp)
    granted[tok] = { fence, exp }
    lines[#lines + 1] = line
  end
  redis.call('ZADD', H, unpack(holds))
  if count == 0 then
    redis.call('PEXPIREAT', H, last_exp)
  else
    redis.call('PEXPIREAT', H, last_exp, 'GT')
  end
  redis.call('HDEL', M, unpack(spec_fields))
  redis.call('HSET', M, unpack(fields))
  expire_at_least(M, last_exp)
  redis.call('ZREM', Q, unpack(head))
  redis.call('ZREM', W, unpack(head))
  first_expiry = nil
  save_fence()
  if D then fq.flush() end
  local message = table.concat(lines, '\n')
  redis.call('PUBLISH', CHANNEL, message)
  return message, granted, taken
end

-- Which of Q, M, H and A exist, in one call: EXISTS counts a key once per mention.
local function presence()
  local bits = redis.call('EXISTS', A, A, A, A, A, A, A, A, Q, Q, Q, Q, M, M, H)
  return bits % 8 >= 4, bits % 4 >= 2, bits % 2 == 1, bits >= 8
end

-- Once the queue is empty: delete the bookkeeping when nothing is held either, else pull the keys'
-- expiry in to the last lease they still guard, so a name whose remaining leases simply run out leaves
-- no key behind a moment later. `left`: holders that just left (their g:/a:/c: go), or nil. `has_m`,
-- `has_h`, `has_a`: whether M, H and A exist (nil = unknown).
local function settle(left, has_m, has_h, has_a)
  local last = has_h ~= false and redis.call('ZRANGE', H, -1, -1, 'WITHSCORES')[2]
  if not last then
    if has_m ~= false then redis.call('DEL', M) end
    if has_a ~= false then redis.call('DEL', A) end
    if D then
      -- A fair queue's state goes with it (X stays: a shed mark outlives an idle bucket).
      fq.discard()
      redis.call('DEL', D, T, K)
    end
    -- Keep the last fencing token only until the clock has passed it (G7 across idle periods).
    -- One GETDEL: the token is almost always behind the clock by now; one run ahead (many fences in
    -- one microsecond, or a clock stepped back) is put back until the clock passes it. A Redis user
    -- without +getdel (an ACL rule from before it was needed) gets GET and DEL instead: a refused
    -- command would fail the call after its writes above.
    local got = redis.pcall('GETDEL', F)
    if type(got) == 'table' and got.err then
      got = redis.call('GET', F)
      if got then redis.call('DEL', F) end
    end
    local lone_fence, lone_exp = parse_lone(got)
    if lone_fence then
      -- A lone holder (a re-check or a limit change on a name someone took since): it stays.
      if lone_exp > NOW then
        redis.call('SET', F, got, 'PXAT', lone_exp)
      elseif lone_fence >= NOW_US then
        redis.call('SET', F, lone_fence, 'PXAT', math.floor(lone_fence / 1000) + 2)
      end
      return
    end
    local fence = tonumber(got or '0')
    if fence >= NOW_US then redis.call('SET', F, fence, 'PXAT', math.floor(fence / 1000) + 2) end
    return
  end
  redis.call('PEXPIREAT', H, tonumber(last))
  if has_m ~= false then
    if left and #left > 0 then drop_holder_fields(left) end
    redis.call('PEXPIREAT', M, tonumber(last))
  end
  if D then
    fq.flush()
    redis.call('PEXPIREAT', D, tonumber(last))
    redis.call('PEXPIREAT', T, tonumber(last))
  end
end

-- Every permit script starts here: the call's keys, channel and clock, and the state above reset.
local function begin(keys, argv)
  read_clock()
  H, Q, W, M, P, F, A = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7]
  D, T, K, X = keys[8], keys[9], keys[10], keys[11]
  if D then fq.reset() end
  CHANNEL = argv[1]
  fence_last, fence_dirty, fence_until = nil, false, 0
  first_expiry = nil
  backlog = false
  dead_left = DEAD_PER_CALL
end
