-- lua/lib/permits.lua: shared prelude of every permit-*.lua script, after lib/common.lua (both are
-- prepended when the script is registered, so each registered script stays one self-contained EVALSHA).
--
-- One fair "permit set" backs the mutex (permits = 1), the reentrant mutex and the semaphore.
-- Every key shares the caller's hash tag, e.g. tollgate:{sem:api%2Fexport}:h (G8).
--   KEYS[1] H  ZSET  holder token -> lease expiry (ms, Redis server clock, G9)
--   KEYS[2] Q  ZSET  waiter token -> ticket (FIFO order across every process, G5)
--   KEYS[3] W  ZSET  waiter token -> heartbeat deadline (ms); a dead waiter falls out when it passes
--   KEYS[4] M  HASH  holder and queue bookkeeping, absent while nothing is held or queued:
--                    n = last ticket; g:<tok> = the fencing token of a holder admitted from the queue
--                    or of a reentrant owner's hold (what a re-check, a re-entry or a resent acquire
--                    reports to it; a permit granted at once has its fence in the reply only, until
--                    a caller that never saw it asks: see holder_fence);
--                    a:<tok> = the first acquisition of a reentrant owner's hold ('' once it was
--                    released while others still hold); c:<tok> = how many more hold, each a member
--                    of A (see holds_op); t:<tok> = a waiter's spec, "<lease ttl>" for a
--                    fresh token, "<lease ttl> <acquisition> ..." for a reentrant owner's token and
--                    the acquisitions waiting on it (handed over together when it is admitted)
--   KEYS[5] P  STRING permits set at run time for the name; overrides the caller's permits. "<n>": an
--                    override (setPermits, the admin API), the one key that persists while idle: it is
--                    configuration, not state. "<n>a<v>": the fleet's adaptive limit (lib/adaptive.lua),
--                    v the window of the step that set it, with an expiry its controller renews every
--                    window; an override is never replaced by one.
--   KEYS[6] F  STRING the last fencing token, kept at least while the lease that got it runs and
--                    until the server clock has passed it (see next_fence); or a lone holder (below)
--   KEYS[7] A  ZSET  "<acquisition> <fence of the hold> <tok>" -> at least the hold's expiry when
--                    the acquisition was last taken or renewed, at most one ttl past it (a renewal
--                    re-scores it only when behind: permit-renew.lua): the
--                    acquisitions of a reentrant owner's hold after its first, so that one more, one
--                    fewer, or asking whether one holds costs O(log n) however many the owner holds
--                    (a list in M cost O(k) per call and O(k^2) per renewal batch). A member is due
--                    at most one ttl after its lease ran out: those of a hold that ran out are swept
--                    a bounded number at a time (sweep_acquisitions).
-- ARGV[1] is always the wake-up channel; grants are published there as lines
-- "<tok> <fence> <expiresAt>[ <acquisition> ...]" (a fresh token is its own acquisition).
-- Every key carries a PEXPIREAT no earlier than the last deadline it holds (H: leases; Q, W, M: waiter
-- heartbeats and the g:/a: of live holders), and the set is deleted when nothing is held or queued, so
-- idle names leave no keys behind. A key that exists always has its expiry, so one PEXPIREAT ... GT
-- extends it; a key this call may have just created gets a plain PEXPIREAT instead.
--
-- A lone holder: a plain (unweighted, not reentrant) acquire of a name nobody holds or waits for
-- keeps its hold in F alone, as "<fence> <expiresAt> <token>" with PXAT expiresAt: one SET ... NX
-- takes it, one GET and one DEL give it back (a bare SET NX PX lock, with its fence). The moment
-- anything else happens on the name (a second acquire, a batch, a weighted or reentrant call),
-- expand() moves it into H, F keeps the fence alone, and the general paths below run as if it had
-- been granted there. So while F holds a lone holder, H, Q, W and A hold nothing live: every script
-- that would read or delete F checks for one first (acquire and release: their fast paths; renew;
-- settle(); inspect).
--
-- Weights (a semaphore's acquire({ weight })): a token `<id>*<w>` counts for w permits. Its hold is w
-- members of H, the token and `<token>#2` .. `<token>#w`, with one expiry, so that ZCARD H is the
-- permits in use, an expiry frees all w at once, and a token without '*' (every unweighted call)
-- pays one string.find and nothing more. A weighted waiter is one entry of Q: the head is admitted
-- only when its w permits are free, and nobody behind it is admitted before it (FIFO: a heavy head is
-- never overtaken by light ones, G5).
local H, Q, W, M, P, F, A -- this call's keys, set by begin()
-- A fair queue's call (11 KEYS, lib/fair.lua): D T K X; nil on a plain call, which never touches them.
local D, T, K, X
local CHANNEL
-- The fair queue's helpers, made by lib/fair.lua (the next prelude).
local fq = {}

-- The permits a token counts for: 1 to 1000 (src/core/weight.ts, MAX_WEIGHT); anything else is 1.
local function weight(tok)
  local star = string.find(tok, '*', 1, true)
  if not star then return 1 end
  local w = tonumber(string.sub(tok, star + 1))
  if not w then
    -- A fair token (lib/fair.lua): the digits up to its discipline.
    local dot = string.find(tok, '.', star + 1, true)
    w = dot and tonumber(string.sub(tok, star + 1, dot - 1))
  end
  if not w or w < 1 or w > 1000 or w ~= math.floor(w) then return 1 end
  return w
end

-- Append `tok`'s hold to a ZADD argument list (score, member, ...): w members for a weight of w.
local function add_hold(holds, score, tok)
  holds[#holds + 1] = score
  holds[#holds + 1] = tok
  local w = weight(tok)
  for k = 2, w do
    holds[#holds + 1] = score
    holds[#holds + 1] = tok .. '#' .. k
  end
  return w
end

-- Append the members of `tok`'s hold to a list (ZREM arguments).
local function add_members(list, tok)
  list[#list + 1] = tok
  for k = 2, weight(tok) do list[#list + 1] = tok .. '#' .. k end
end

-- P's value: the permits, whether they are the fleet's adaptive limit ("<n>a<version>") rather than an
-- override ("<n>"), and the adaptive limit's version; nil for none.
local function parse_limit(value)
  if not value then return nil end
  local n = tonumber(value)
  if n then return n, false end
  local permits, version = string.match(value, '^(%d+)a(%d+)$')
  return tonumber(permits), true, tonumber(version)
end

-- The permits in force: the run-time override or adaptive limit when one is set, else the caller's.
local function limit(requested)
  return parse_limit(redis.call('GET', P)) or tonumber(requested)
end

-- Fencing tokens (G7): one more than the last, and never below the server's microsecond clock, so a
-- name whose keys were deleted while idle still moves on. Read once and written once per call,
-- however many grants the call makes.
local fence_last, fence_dirty, fence_until = nil, false, 0

local function last_fence()
  if fence_last == nil then fence_last = tonumber(redis.call('GET', F) or '0') end
  return fence_last
end

-- `lease_end`: the grant's lease expiry; the token is kept at least that long.
local function next_fence(lease_end)
  fence_last = math.max(last_fence() + 1, NOW_US)
  fence_dirty = true
  fence_until = math.max(fence_until, lease_end)
  return fence_last
end

local function save_fence()
  if not fence_dirty then return end
  -- Until the clock has passed the token (a burst may run a few µs ahead of it), and while the lease runs.
  local keep = math.max(math.floor(fence_last / 1000) + 2, fence_until)
  redis.call('SET', F, fence_last, 'PXAT', keep)
  fence_dirty = false
end

-- The fast path's single grant: one SET ... GET both reads and writes the last token (a second SET only
-- when a burst left the last token at or ahead of the clock).
local function take_fence(lease_end)
  local old = redis.call('SET', F, NOW_US, 'PXAT', math.max(math.floor(NOW_US / 1000) + 2, lease_end), 'GET')
  if not old or tonumber(old) < NOW_US then
    fence_last = NOW_US
    return NOW_US
  end
  fence_last = tonumber(old)
  local fence = next_fence(lease_end)
  save_fence()
  return fence
end

-- A lone holder from F's value: its fence, lease expiry and token; nil for a bare fence or none.
local function parse_lone(value)
  if not value then return nil end
  local a = string.find(value, ' ', 1, true)
  if not a then return nil end
  local b = string.find(value, ' ', a + 1, true)
  return tonumber(string.sub(value, 1, a - 1)), tonumber(string.sub(value, a + 1, b - 1)), string.sub(value, b + 1)
end

-- F's value for a lone holder (`fence_s`: the fence as a string, see now_us_string()).
local function lone_value(fence_s, exp, tok)
  return fence_s .. ' ' .. exp .. ' ' .. tok
end

-- Move a lone holder (F's value `value`) into H, and keep only its fence in F. Returns whether there
-- was one. The next fence of this call follows it (fence_last).
local function expand(value)
  local fence, exp, tok = parse_lone(value)
  if not fence then return false end
  redis.call('ZADD', H, exp, tok)
  redis.call('PEXPIREAT', H, exp)
  redis.call('SET', F, fence, 'PXAT', math.max(math.floor(fence / 1000) + 2, exp))
  fence_last = fence
  return true
end

-- Give back the lone holder whose fence is `fence`: F keeps the fence only while the clock has not
-- passed it (G7 across idle periods), as settle() does.
local function drop_lone(fence)
  if fence >= NOW_US then
    redis.call('SET', F, fence, 'PXAT', math.floor(fence / 1000) + 2)
  else
    redis.call('DEL', F)
  end
end

-- The fence of live holder `tok` (lease until `lease_end`) for a caller that never saw it: a resent
-- acquire or a re-check. A waiter admitted from the queue and a reentrant owner's hold keep theirs in
-- M (g:). A permit granted at once has its fence in its reply only: the reply never reached this
-- caller, so the token gets a fresh, larger fence (G7), kept in M from then on so that every later
-- ask reports the same one.
local function holder_fence(tok, lease_end)
  local kept = redis.call('HGET', M, 'g:' .. tok)
  if kept then return tonumber(kept) end
  local fence = next_fence(lease_end)
  save_fence()
  redis.call('HSET', M, 'g:' .. tok, fence)
  expire_at_least(M, lease_end)
  return fence
end

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
