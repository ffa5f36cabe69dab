-- lua/adaptive-report.lua: one replica's report of one window, once per window: what its admitted
-- requests did, that it is alive, and (leadership) whether it steps the controller; the fleet's
-- state back. Leadership is a lease kept in S: the leader renews it with every report, and any
-- replica takes it over once it ran out (a leader that died is replaced within the lease's ttl).
-- KEYS  S R C V (see lib/adaptive.lua)
-- ARGV[1] channel  ARGV[2] replica id  ARGV[3] the window reported (its start, ms on the server clock)
-- ARGV[4] requests  ARGV[5] drops  ARGV[6] latency sum µs  ARGV[7] most in flight at once
-- ARGV[8] window ms  ARGV[9] leadership ttl ms  ARGV[10] state ttl ms
-- ARGV[11] '1': the replica leaves (close()): it is no longer counted, and gives up leadership if it
--          leads, so that another leads from its next report instead of after the lease;
--          '2': the replica joins (its construction): it is counted from now on and reads the fleet's
--          state, and reports nothing (ARGV[3..] unused): it starts from the saved state, not `initial`
-- ARGV[12] clients (units of enough requests: src/primitives/adaptive/clients.ts)
-- ARGV[13] of them, those over the drop share
-- ARGV[14..] the latency histogram's non-empty buckets (src/primitives/adaptive/latency.ts), three
--          numbers each: bucket (0 to 99), count, sum of latencies µs; at most 100 buckets
-- The window reported is the caller's estimate of the server's clock: a report of a window that is
-- not the one just ended (or the one running, or the one before: a late report) is a clock the
-- caller has not corrected yet (its first report, a jump): its sums go nowhere and it does not lead
-- (nor step a window on its wrong count); the reply's `now` corrects it.
-- A report sent again (its reply lost, the call resent after a reconnect) adds nothing twice: C keeps
-- the replicas that reported into it, and counts them (k), an idle replica's empty report included.
-- A window is complete once every replica alive reported it: the report that completes it gets its
-- sums back and its replica steps it at once (adaptive-commit.lua saves one step per window, whoever
-- sends it). A window left incomplete (a replica silent, or joined after it ended) is stepped by the
-- leader from its report of the next window, as the window before.
-- Cost: O(log r + b) for r replicas and b buckets reported (at most 100), plus O(k) for k replicas
-- silent for 3 windows, at most 100 a call; a reply with a window to step adds O(r + B) for the B
-- buckets of that window (at most 100). A join: O(log r).
-- Returns {now, leads (1 | 0), replicas alive, last window stepped (-1: none), state ('' none),
--          then, when there is a window to step: 1 (the window before the reported one: the caller
--          leads and it was not stepped yet) or 0 (the reported one: this report completed it and it
--          was not stepped yet), then that window's n, d, l, m, u, o, then its buckets: bucket, count,
--          sum µs, ...}
local replica, window = ARGV[2], tonumber(ARGV[3])
local requests, drops, latency, most = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local window_ms, leader_ttl, state_ttl = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local current = math.floor(NOW / window_ms) * window_ms

if ARGV[11] == '1' then
  redis.call('ZREM', R, replica)
  local f = redis.call('HMGET', S, 'w', 'l', 's')
  if f[2] == replica then redis.call('HDEL', S, 'l', 'lu') end
  return { NOW, 0, redis.call('ZCARD', R), tonumber(f[1] or '-1'), f[3] or '' }
end
if ARGV[11] == '2' then
  redis.call('ZADD', R, NOW, replica)
  redis.call('PEXPIREAT', R, NOW + state_ttl)
  local f = redis.call('HMGET', S, 'w', 's')
  return { NOW, 0, redis.call('ZCARD', R), tonumber(f[1] or '-1'), f[2] or '' }
end
local timely = window >= current - 2 * window_ms and window <= current

-- How many replicas reported this window, with this report (0: it counted before, or not at all).
local reporters = 0
if timely and redis.call('HSETNX', C, 'r:' .. replica, 1) == 1 then
  reporters = redis.call('HINCRBY', C, 'k', 1)
  if requests > 0 then
    redis.call('HINCRBY', C, 'n', requests)
    if drops > 0 then redis.call('HINCRBY', C, 'd', drops) end
    redis.call('HINCRBY', C, 'l', latency)
    local clients, over = tonumber(ARGV[12]) or 0, tonumber(ARGV[13]) or 0
    if clients > 0 then redis.call('HINCRBY', C, 'u', clients) end
    if over > 0 then redis.call('HINCRBY', C, 'o', over) end
    for i = 14, math.min(#ARGV, 13 + 3 * 100) - 2, 3 do
      local bucket, count, sum = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
      if bucket and count and sum and bucket >= 0 and bucket < 100 and count > 0 then
        redis.call('HINCRBY', C, 'c' .. bucket, count)
        redis.call('HINCRBY', C, 's' .. bucket, sum)
      end
    end
  end
  if most > 0 then redis.call('HINCRBY', C, 'm', most) end
  redis.call('PEXPIREAT', C, NOW + window_ms * 4)
end

redis.call('ZADD', R, NOW, replica)
local silent = redis.call('ZRANGEBYSCORE', R, '-inf', NOW - 3 * window_ms, 'LIMIT', 0, 100)
if #silent > 0 then redis.call('ZREM', R, unpack(silent)) end
redis.call('PEXPIREAT', R, NOW + state_ttl)
local replicas = redis.call('ZCARD', R)

local f = redis.call('HMGET', S, 'w', 'l', 'lu', 's')
local leads = timely and (f[2] == replica or not f[3] or tonumber(f[3]) <= NOW)
if leads then redis.call('HSET', S, 'l', replica, 'lu', NOW + leader_ttl) end
redis.call('PEXPIREAT', S, NOW + state_ttl)
local stepped = tonumber(f[1] or '-1')
local out = { NOW, leads and 1 or 0, replicas, stepped, f[4] or '' }
-- The window to step, if any: the one reported if this report completed it (lag 0), else the one
-- before it if the caller leads (lag 1).
local lag, sums_key = nil, nil
if reporters > 0 and reporters >= replicas and stepped < window then
  lag, sums_key = 0, C
elseif leads and stepped < window - window_ms then
  lag, sums_key = 1, V
end
if lag then
  out[6] = lag
  local before = redis.call('HMGET', sums_key, 'n', 'd', 'l', 'm', 'u', 'o')
  for i = 1, 6 do out[6 + i] = tonumber(before[i] or '0') end
  -- The buckets, in order: c<bucket> = count, s<bucket> = sum µs.
  local counts, sums = {}, {}
  local fields = redis.call('HGETALL', sums_key)
  for i = 1, #fields, 2 do
    local kind, bucket = string.sub(fields[i], 1, 1), tonumber(string.sub(fields[i], 2))
    if bucket and kind == 'c' then counts[bucket] = tonumber(fields[i + 1]) end
    if bucket and kind == 's' then sums[bucket] = tonumber(fields[i + 1]) end
  end
  for bucket = 0, 99 do
    if counts[bucket] then
      out[#out + 1] = bucket
      out[#out + 1] = counts[bucket]
      out[#out + 1] = sums[bucket] or 0
    end
  end
end
return out
