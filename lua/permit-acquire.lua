-- lua/permit-acquire.lua: for each token, in order, take a permit now or join the FIFO queue. One
-- call carries the acquires a process made on the name in one event-loop turn (same options). It
-- ends in the state one call per token, in that order, would leave (same holders, queue order and
-- fencing order); a token may be granted at once where separate calls would queue it and admit it a
-- moment later (the batch drops expired holders before serving the queue).
-- Idempotent (G12): a token that already holds or waits is a resent call (ioredis resends after a
-- reconnect) and gets its own grant or queue place back: the same permit and expiry, and the same
-- fence where the name keeps one for the token (an admitted waiter's, a reentrant owner's). A
-- permit granted at once keeps its fence in the reply only, so its resend gets a fresh, larger one
-- (kept from then on, see holder_fence): the first reply never reached anybody, and strictly
-- increasing fences (G7) are all a fence promises. With an acquisition id, the one token is a
-- reentrant owner's: a new id re-enters the owner's hold or joins its wait (and is handed the permit
-- with it); an id already there is a resent call.
-- KEYS  H Q W M P F A (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] lease ttl ms  ARGV[3] permits
-- ARGV[4] mode: 0 = try (never queue, never join a wait), 1 = queue when no permit is free
-- ARGV[5] waiter heartbeat ttl ms  ARGV[6] acquisition id of a reentrant owner's call ('' = none:
-- each token is its own acquisition)  ARGV[7..] distinct tokens (exactly one with an acquisition id)
-- A fair queue's call (lib/fair.lua): KEYS H Q W M P F A D T K X, ARGV[7] maxQueued (0 = no bound),
-- tokens from ARGV[8]; a disciplined token is ordered by class, flow tag and arrival, a capped flow
-- takes at once only within its cap, and a full queue evicts its tail for an arrival that would be
-- served before it, or refuses.
-- Cost: O(1) for a plain acquire of a name nobody holds or waits for (3 commands: TIME, EXISTS, SET:
-- a lone holder, lib/permits.lua). Else O(t log n) for t tokens (n = held permits + waiters + a reentrant hold's acquisitions; a
-- token of weight w counts w; a re-entry is O(log n) however many the owner holds), plus O(k) for a
-- reentrant owner's k acquisitions waiting together on its token, plus the queue work of lib/permit-queue.lua: at
-- most 100 expired holders and 1000 dead waiters purged, 1000 more dead waiters skipped at the head
-- of the queue, 1000 grants made: the rest is left to the next call, and a reply's nextExpiry is
-- then `now` (look again at once).
-- Returns {now, then per token: {1, fence, expiresAt, holders} when it holds a permit (holders =
--         permits held of the name right after, for RateLimit headers and metrics) | {0, position,
--         nextExpiry} when queued (0-based) | {0, -1, nextExpiry} when not queued (try mode)
--         | fair only: {0, -2, nextExpiry} shed (the token was evicted: a resent call, or a later
--         token of this call evicted it), {0, -3, nextExpiry} refused (the queue holds maxQueued
--         waiters of its class or higher)}
-- Fair cost: as above, plus per token enqueued ZSCORE T, ZADD T, ZRANK Q and at most one eviction
-- (ZRANGE Q -1 -1, ZREM Q W, ZADD X): O(log n); an uncapped weight-1 token of a name nobody holds or
-- waits for and without shed marks is a lone holder (the same 3 commands); see lib/fair.lua.
local ttl, mode, waiter_ttl = tonumber(ARGV[2]), ARGV[4], tonumber(ARGV[5])
local op = ARGV[6] ~= '' and ARGV[6] or nil
local max_queued = D and tonumber(ARGV[7]) or 0
local tokens = { unpack(ARGV, D and 8 or 7) }
local n = #tokens
local out = { NOW }

-- The tokens at `picked` (indexes into tokens) take their permits (one each, w for a weight of w:
-- see lib/permits.lua). `count` = ZCARD H before, so H is new exactly when it is 0. `alone`:
-- nothing is held or queued, so M guards nothing else either.
-- Only a reentrant owner's hold writes M (its acquisitions, and its fence for re-entries): a plain
-- grant is one ZADD, so a batch of n grants costs no hash writes (a field per grant in M cost ~1/3
-- of an acquire and release on a name with 50 holders, npm run bench -- gateway).
local function take(picked, count, alone)
  local exp = NOW + ttl
  local exp_s = exp
  local holds = {}
  local fence
  local used = count
  for _, i in ipairs(picked) do
    -- One SET ... GET reads and writes the fence for a single grant; a batch reads once, writes once.
    fence = #picked == 1 and take_fence(exp) or next_fence(exp)
    local w = add_hold(holds, exp_s, tokens[i])
    used = used + w
    if D then
      local d = fq.disc(tokens[i])
      if d then fq.take(d, exp) end
    end
    out[i + 1] = { 1, fence, exp, used }
  end
  save_fence()
  redis.call('ZADD', H, unpack(holds))
  if count == 0 then
    redis.call('PEXPIREAT', H, exp_s)
  else
    redis.call('PEXPIREAT', H, exp_s, 'GT')
  end
  if op then
    redis.call('HSET', M, 'g:' .. tokens[1], fence, 'a:' .. tokens[1], op)
    redis.call('HDEL', M, 'c:' .. tokens[1]) -- a count an earlier hold of the token may have left
    if alone then redis.call('PEXPIREAT', M, exp_s) else expire_at_least(M, exp) end
  end
  first_expiry = nil
end

-- Fast paths: nobody waits and nobody holds in H, so any limit (always >= 1) has room for one
-- permit, and no token can be a resend, unless F keeps a lone holder (lib/permits.lua).
local state, has_x, has_k
if not D then
  state = redis.call('EXISTS', Q, Q, H)
else
  -- A fair call counts X (shed marks: a resend must find its mark, never a permit) and K (parked
  -- waiters) too: either sends the call down the general path.
  state = redis.call('EXISTS', Q, Q, H, X, X, X, X, K, K, K, K, K, K, K, K)
  has_x, has_k = state % 8 >= 4, state >= 8
  state = state % 4
end
if state == 0 and (not D or not (has_x or has_k)) then
  local single = n == 1 and weight(tokens[1]) == 1
  if single and D then
    local d = fq.disc(tokens[1])
    single = not d or d.max == 0 -- a capped flow counts its holds (the general path)
  end
  if single and not op then
    -- A lone holder: F alone, one SET. It fails when F is there: a lone holder (another token's, or
    -- this one's, resent) or a fence ahead of the clock.
    local exp = NOW + ttl
    if redis.call('SET', F, lone_value(now_us_string(), exp, tokens[1]), 'NX', 'PXAT', exp) then
      out[2] = { 1, NOW_US, exp, 1 }
      return out
    end
  end
  if expand(redis.call('GET', F)) then
    state = 1 -- H holds the lone holder now: the general path below
  elseif single then
    take({ 1 }, 0, true)
    return out
  end
elseif state == 0 then
  if expand(redis.call('GET', F)) then state = 1 end
end
-- Re-entry while nobody waits: a reentrant owner that holds asks again. One more acquisition of its
-- hold (a member of A, O(log n) however many it holds), or its own acquisition once more (a resend):
-- nothing to purge or admit for it.
if state == 1 and op and n == 1 then
  local tok = tokens[1]
  local score = tonumber(redis.call('ZSCORE', H, tok) or '0')
  local fields = score > NOW and redis.call('HMGET', M, 'a:' .. tok, 'g:' .. tok)
  if fields and fields[1] and fields[2] then
    local fence = fields[2]
    local exp = score
    if fields[1] ~= op and redis.call('ZADD', A, 'NX', math.max(score, NOW + ttl), op .. ' ' .. fence .. ' ' .. tok) == 1 then
      exp = math.max(score, NOW + ttl)
      redis.call('HINCRBY', M, 'c:' .. tok, 1)
      if exp > score then
        redis.call('ZADD', H, exp, tok)
        redis.call('PEXPIREAT', H, exp, 'GT')
        redis.call('PEXPIREAT', M, exp, 'GT')
      end
      expire_at_least(A, exp)
    end
    out[2] = { 1, tonumber(fence), exp, redis.call('ZCOUNT', H, '(' .. NOW, '+inf') }
    return out
  end
end

local queued = state >= 2
local count = state % 2 == 1 and redis.call('ZCARD', H) or 0

local permits = limit(ARGV[3])
-- Expired holders go first (as in the memory store), so the queue is served and `holders` is reported
-- from live holders only; with none expired this costs one ZRANGE of the cached first expiry. One call
-- per token would purge up to 100; a batch may need n.
count = live_holders(count, math.max(100, n))
if D then
  if count == 0 and has_k then fq.heal() end
  if fq.moved() > 0 then queued = true end
  if has_x then fq.prune_marks() end
end
if queued then
  -- Drop the dead, hand free permits to the head of the queue (a token of this call may be among them).
  purge_waiters()
  local _, _, admitted = admit(permits, count)
  count = count + admitted
  queued = redis.call('EXISTS', Q) == 1
end

-- The answers of a fair call: its changes to D written, its shed lines published.
local function finish()
  if D then
    fq.flush()
    fq.publish()
  end
  return out
end

-- Tokens that already hold or wait (a resent call, or another acquisition of a reentrant owner);
-- the others are fresh.
local held = count > 0 and redis.call('ZMSCORE', H, unpack(tokens)) or {}
local waiting = queued and redis.call('ZMSCORE', Q, unpack(tokens)) or {}
-- A fair call's resends: parked waiters (M k:) and evicted tokens (X).
local parked, marks = {}, {}
if has_k or (D and fq.parks() > 0) then
  local fields = {}
  for i, tok in ipairs(tokens) do fields[i] = 'k:' .. tok end
  parked = redis.call('HMGET', M, unpack(fields))
end
if has_x then marks = redis.call('ZMSCORE', X, unpack(tokens)) end
local beat = NOW + waiter_ttl
local fresh = {}
for i, tok in ipairs(tokens) do
  local score = held[i] and tonumber(held[i])
  if score and score > NOW then
    local fence = holder_fence(tok, score)
    local exp = score
    if op then
      local first = redis.call('HGET', M, 'a:' .. tok)
      if first ~= op and not (first and redis.call('ZSCORE', A, op .. ' ' .. int(fence) .. ' ' .. tok)) then
        -- Re-entry by the same owner: one more acquisition, lease pushed out to now + ttl.
        exp = math.max(score, NOW + ttl)
        add_op(tok, op, first, fence, exp)
        redis.call('ZADD', H, exp, tok)
        redis.call('PEXPIREAT', H, exp, 'GT')
        expire_at_least(M, exp)
      end
    end
    out[i + 1] = { 1, fence, exp, count }
  elseif waiting[i] then
    local position = redis.call('ZRANK', Q, tok)
    if op then
      local spec = redis.call('HGET', M, 't:' .. tok)
      local _, ops = parse_spec(spec)
      if not has_op(ops, op) then
        if mode ~= '1' then
          position = -1 -- try mode: the owner waits, so nothing is free for it now
        else
          -- The same owner asks again while its token waits: this acquisition waits with it.
          local base = spec or int(math.min(ttl, waiter_ttl))
          redis.call('HSET', M, 't:' .. tok, base .. ' ' .. op)
          redis.call('ZADD', W, 'GT', beat, tok)
          redis.call('PEXPIREAT', W, beat, 'GT')
          redis.call('PEXPIREAT', Q, beat, 'GT')
          redis.call('PEXPIREAT', M, beat, 'GT')
        end
      end
    end
    out[i + 1] = { 0, position, backlog and NOW or next_expiry() }
  elseif parked[i] then
    out[i + 1] = { 0, redis.call('ZCOUNT', Q, '-inf', parked[i]), backlog and NOW or next_expiry() }
  elseif marks[i] and tonumber(marks[i]) > NOW then
    out[i + 1] = { 0, -2, backlog and NOW or next_expiry() }
  else
    fresh[#fresh + 1] = i
  end
end
if #fresh == 0 then return finish() end

local first = 1
if not queued and count < permits then
  -- In order, as many as their weights fit. Queueing, the first that does not fit queues, and so do the
  -- rest behind it (FIFO); trying, each is on its own, as one call per token would be.
  local room, picked, rest = permits - count, {}, {}
  local blocked = false
  for k = 1, #fresh do
    local tok = tokens[fresh[k]]
    local w = weight(tok)
    local d = D and fq.disc(tok)
    if d and d.max > 0 and w <= room and not fq.may_take(d, w) then
      -- At its flow's cap (or behind its flow's parked waiters): it queues, and parks at the head;
      -- other flows are not held up by it.
      rest[#rest + 1] = fresh[k]
    elseif w <= room and (mode ~= '1' or not blocked) then
      picked[#picked + 1] = fresh[k]
      room = room - w
      if d and d.max > 0 then fq.hold_ahead(d, w) end
    else
      rest[#rest + 1] = fresh[k]
      blocked = true
    end
  end
  if #picked > 0 then take(picked, count, false) end
  if #rest == 0 then return finish() end
  fresh = rest
end

-- fresh[first..] found no free permit.
if mode ~= '1' then
  for k = first, #fresh do out[fresh[k] + 1] = { 0, -1, backlog and NOW or next_expiry() } end
  return finish()
end
local joining = #fresh - first + 1
local ticket = redis.call('HINCRBY', M, 'n', joining) - joining
local ahead = queued and redis.call('ZCARD', Q) or 0
-- A permit handed to a waiter later starts with at most its heartbeat ttl: a live waiter renews it
-- to the full ttl; a waiter that died in the queue gives it back within waiter_ttl, not ttl.
local spec = int(math.min(ttl, waiter_ttl)) .. (op and (' ' .. op) or '')
local tickets, beats, specs = {}, {}, {}
if D then
  -- A fair queue: each token in order gets its score (lib/fair.lua), after at most one eviction when
  -- Q is full; its position is its rank once it joined. A token this call queued may be the tail a
  -- later token of the call evicts: its row then answers shed, and it gets no heartbeat or spec.
  local length = ahead
  local joined, row = {}, {}
  for k = first, #fresh do
    local i = fresh[k]
    local tok = tokens[i]
    local d = fq.disc(tok)
    local t = ticket + k - first + 1
    local refused = false
    if d and max_queued > 0 and length >= max_queued then
      local last = redis.call('ZRANGE', Q, -1, -1, 'WITHSCORES')
      local tail = last[1]
      local td = tail and fq.disc(tail)
      if td and length - 1 < max_queued and fq.would_score(d, t) < tonumber(last[2]) then
        fq.evict(tail, td, waiter_ttl)
        length = length - 1
        if row[tail] then
          out[row[tail] + 1] = { 0, -2, backlog and NOW or next_expiry() }
          row[tail] = nil
        end
      else
        refused = true
      end
    end
    if refused then
      out[i + 1] = { 0, -3, backlog and NOW or next_expiry() }
    else
      redis.call('ZADD', Q, int(d and fq.enqueue(d, t) or t), tok)
      length = length + 1
      joined[#joined + 1] = tok
      row[tok] = i
      out[i + 1] = { 0, redis.call('ZRANK', Q, tok), backlog and NOW or next_expiry() }
    end
  end
  for _, tok in ipairs(joined) do
    if row[tok] then
      beats[#beats + 1] = beat
      beats[#beats + 1] = tok
      specs[#specs + 1] = 't:' .. tok
      specs[#specs + 1] = spec
    end
  end
  if #beats > 0 then
    redis.call('ZADD', W, unpack(beats))
    redis.call('HSET', M, unpack(specs))
    if queued then
      redis.call('PEXPIREAT', Q, beat, 'GT')
      redis.call('PEXPIREAT', W, beat, 'GT')
      redis.call('PEXPIREAT', M, beat, 'GT')
    else
      redis.call('PEXPIREAT', Q, beat)
      redis.call('PEXPIREAT', W, beat)
      expire_at_least(M, beat)
    end
    fq.keep(beat)
  end
  return finish()
end
for k = first, #fresh do
  local i = fresh[k]
  local tok = tokens[i]
  tickets[#tickets + 1] = ticket + k - first + 1
  tickets[#tickets + 1] = tok
  beats[#beats + 1] = beat
  beats[#beats + 1] = tok
  specs[#specs + 1] = 't:' .. tok
  specs[#specs + 1] = spec
  out[i + 1] = { 0, ahead + k - first, backlog and NOW or next_expiry() }
end
redis.call('ZADD', Q, unpack(tickets))
redis.call('ZADD', W, unpack(beats))
redis.call('HSET', M, unpack(specs))
if queued then
  redis.call('PEXPIREAT', Q, beat, 'GT')
  redis.call('PEXPIREAT', W, beat, 'GT')
  redis.call('PEXPIREAT', M, beat, 'GT')
else
  redis.call('PEXPIREAT', Q, beat)
  redis.call('PEXPIREAT', W, beat)
  expire_at_least(M, beat)
end
return out
