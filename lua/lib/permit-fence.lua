-- lua/lib/permit-fence.lua: a permit set's fencing tokens and its lone holder. A prelude of every
-- permit-*.lua script, after lib/permits.lua (which says what F holds). Each helper is O(1).

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
