-- lua/lib/permits.lua: shared prelude of every permit-*.lua script, after lib/common.lua (both are
-- prepended when the script is registered, so each registered script stays one self-contained EVALSHA).
--
-- One fair "permit set" backs the mutex (permits = 1), the reentrant mutex and the semaphore.
-- Every key shares the caller's hash tag, e.g. tollgate:{sem:api%2Fexport}:h (design §2, G8).
--   KEYS[1] H  ZSET  holder token -> lease expiry (ms, Redis server clock, G9)
--   KEYS[2] Q  ZSET  waiter token -> ticket (FIFO order across every process, G5)
--   KEYS[3] W  ZSET  waiter token -> heartbeat deadline (ms); a dead waiter falls out when it passes
--   KEYS[4] M  HASH  f = last fencing token; n = last ticket; t:<tok> = waiter's lease ttl;
--                    g:<tok> = fencing token of a holder (reentrant or handed-off grants);
--                    c:<tok> = reentry count (absent = 1)
--                    k:<tok> = extra acquires by the same (reentrant) owner while its token waits;
--                    they become reentry counts when the token is admitted
--   KEYS[5] P  STRING permits set at run time for the name (setPermits); overrides the caller's
--                    permits. The one key that persists while idle: it is configuration, not state.
-- ARGV[1] is always the wake-up channel; grants are published there as lines "<tok> <fence> <expiresAt>".
-- Every key carries a PEXPIREAT no earlier than the last deadline it holds, and the set is deleted
-- when nothing is held or queued, so idle names leave no keys behind.
local H, Q, W, M, P = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local CHANNEL = ARGV[1]

-- The permits in force: the run-time override when one is set, else the caller's.
local function limit(requested)
  local stored = redis.call('GET', P)
  return stored and tonumber(stored) or tonumber(requested)
end

local function next_fence()
  return bump_fence(M)
end

-- Drop holders whose lease ran out and waiters whose heartbeat stopped (G2, G5).
local function purge()
  local expired = redis.call('ZRANGEBYSCORE', H, '-inf', NOW, 'LIMIT', 0, 100)
  if #expired > 0 then
    redis.call('ZREM', H, unpack(expired))
    for _, tok in ipairs(expired) do
      redis.call('HDEL', M, 'g:' .. tok, 'c:' .. tok)
    end
  end
  local dead = redis.call('ZRANGEBYSCORE', W, '-inf', NOW, 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', Q, unpack(dead))
    redis.call('ZREM', W, unpack(dead))
    for _, tok in ipairs(dead) do
      redis.call('HDEL', M, 't:' .. tok, 'k:' .. tok)
    end
  end
end

-- Hand free permits to the head of the queue, in ticket order, and tell their processes.
-- Returns a table token -> { fence, expiresAt } of what it granted, and the published message.
local function admit(permits)
  local granted = {}
  -- At most 1000 grants per call keeps unpack() within Lua's limits; the rest follow on the next call.
  local free = math.min(permits - redis.call('ZCARD', H), 1000)
  if free <= 0 then return granted end
  local head = redis.call('ZRANGE', Q, 0, free - 1)
  if #head == 0 then return granted end
  local lines = {}
  local last_exp = 0
  for _, tok in ipairs(head) do
    local ttl = tonumber(redis.call('HGET', M, 't:' .. tok) or '0')
    local exp = NOW + ttl
    local fence = next_fence()
    redis.call('ZADD', H, exp, tok)
    redis.call('HSET', M, 'g:' .. tok, int(fence))
    local extra = tonumber(redis.call('HGET', M, 'k:' .. tok) or '0')
    -- A fresh hold: drop a count an expired hold of this owner may have left behind.
    redis.call('HDEL', M, 't:' .. tok, 'k:' .. tok, 'c:' .. tok)
    if extra > 0 then redis.call('HSET', M, 'c:' .. tok, 1 + extra) end
    last_exp = math.max(last_exp, exp)
    granted[tok] = { fence, exp }
    lines[#lines + 1] = tok .. ' ' .. int(fence) .. ' ' .. int(exp)
  end
  expire_at_least(H, last_exp)
  expire_at_least(M, last_exp)
  redis.call('ZREM', Q, unpack(head))
  redis.call('ZREM', W, unpack(head))
  local message = table.concat(lines, '\n')
  redis.call('PUBLISH', CHANNEL, message)
  return granted, message
end

-- Earliest lease expiry among holders (0 when none): the waiters' fallback re-check time.
local function next_expiry()
  local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  return first[2] and tonumber(first[2]) or 0
end

-- After a release or dequeue: delete the metadata once nothing is held or queued (H, Q and W delete
-- themselves when empty), else pull every key's expiry in to the last deadline it still guards, so a
-- name whose remaining leases simply run out leaves no key behind a moment later.
local function settle()
  if redis.call('EXISTS', H, Q) == 0 then
    -- (W is empty whenever Q is.) Fences handed out in one burst may run a few µs ahead of the clock: keep the last one until the
    -- clock has passed it, so the time-based fallback of an idle name can never go below it (G7).
    local fence = tonumber(redis.call('HGET', M, 'f') or '0')
    if fence >= NOW_US then
      redis.call('HDEL', M, 'n')
      redis.call('PEXPIREAT', M, int(NOW + math.ceil((fence - NOW_US) / 1000) + 1))
    else
      redis.call('DEL', M)
    end
    return
  end
  local last_h = redis.call('ZRANGE', H, -1, -1, 'WITHSCORES')[2]
  local last_w = redis.call('ZRANGE', W, -1, -1, 'WITHSCORES')[2]
  local h_at = last_h and tonumber(last_h) or 0
  local w_at = last_w and tonumber(last_w) or 0
  if h_at > 0 then redis.call('PEXPIREAT', H, int(h_at)) end
  if w_at > 0 then
    redis.call('PEXPIREAT', Q, int(w_at))
    redis.call('PEXPIREAT', W, int(w_at))
  end
  redis.call('PEXPIREAT', M, int(math.max(h_at, w_at)))
end
