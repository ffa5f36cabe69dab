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
-- Cost: O(1) for a plain acquire of a name nobody holds or waits for (3 commands: TIME, EXISTS, SET:
-- a lone holder, lib/permits.lua). Else O(t log n) for t tokens (n = held permits + waiters + a reentrant hold's acquisitions; a
-- token of weight w counts w; a re-entry is O(log n) however many the owner holds), plus O(k) for a
-- reentrant owner's k acquisitions waiting together on its token, plus the queue work of lib/permits.lua: at
-- most 100 expired holders and 1000 dead waiters purged, 1000 more dead waiters skipped at the head
-- of the queue, 1000 grants made: the rest is left to the next call, and a reply's nextExpiry is
-- then `now` (look again at once).
-- Returns {now, then per token: {1, fence, expiresAt, holders} when it holds a permit (holders =
--         permits held of the name right after, for RateLimit headers and metrics) | {0, position,
--         nextExpiry} when queued (0-based) | {0, -1, nextExpiry} when not queued (try mode)}
local ttl, mode, waiter_ttl = tonumber(ARGV[2]), ARGV[4], tonumber(ARGV[5])
local op = ARGV[6] ~= '' and ARGV[6] or nil
local tokens = { unpack(ARGV, 7) }
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
    used = used + add_hold(holds, exp_s, tokens[i])
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
local state = redis.call('EXISTS', Q, Q, H)
if state == 0 then
  local single = n == 1 and weight(tokens[1]) == 1
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
if queued then
  -- Drop the dead, hand free permits to the head of the queue (a token of this call may be among them).
  purge_waiters()
  local _, _, admitted = admit(permits, count)
  count = count + admitted
  queued = redis.call('EXISTS', Q) == 1
end

-- Tokens that already hold or wait (a resent call, or another acquisition of a reentrant owner);
-- the others are fresh.
local held = count > 0 and redis.call('ZMSCORE', H, unpack(tokens)) or {}
local waiting = queued and redis.call('ZMSCORE', Q, unpack(tokens)) or {}
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
  else
    fresh[#fresh + 1] = i
  end
end
if #fresh == 0 then return out end

local first = 1
if not queued and count < permits then
  -- In order, as many as their weights fit. Queueing, the first that does not fit queues, and so do the
  -- rest behind it (FIFO); trying, each is on its own, as one call per token would be.
  local room, picked, rest = permits - count, {}, {}
  for k = 1, #fresh do
    local w = weight(tokens[fresh[k]])
    if w <= room and (mode ~= '1' or #rest == 0) then
      picked[#picked + 1] = fresh[k]
      room = room - w
    else
      rest[#rest + 1] = fresh[k]
    end
  end
  if #picked > 0 then take(picked, count, false) end
  if #rest == 0 then return out end
  fresh = rest
end

-- fresh[first..] found no free permit.
if mode ~= '1' then
  for k = first, #fresh do out[fresh[k] + 1] = { 0, -1, backlog and NOW or next_expiry() } end
  return out
end
local joining = #fresh - first + 1
local ticket = redis.call('HINCRBY', M, 'n', joining) - joining
local ahead = queued and redis.call('ZCARD', Q) or 0
-- A permit handed to a waiter later starts with at most its heartbeat ttl: a live waiter renews it
-- to the full ttl; a waiter that died in the queue gives it back within waiter_ttl, not ttl.
local spec = int(math.min(ttl, waiter_ttl)) .. (op and (' ' .. op) or '')
local tickets, beats, specs = {}, {}, {}
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
