-- lua/lib/rwlock.lua: shared prelude of every rwlock-*.lua script, after lib/common.lua.
--
-- One writer-preferring read/write lock per name. Every key shares the hash tag of
-- keySpace(prefix, 'rw', name), e.g. tollgate:{rw:orders%2F42}:r (G8).
--   KEYS[1] R  ZSET  reader token -> lease expiry (ms, server clock, G9). One entry per reader, each
--                    renewed and expiring on its own: one reader's release or death never touches
--                    another's lease (one shared `read` field would let them).
--   KEYS[2] X  ZSET  writer token -> lease expiry; never more than one member.
--   KEYS[3] Q  ZSET  waiter token -> ticket: ONE FIFO queue for both modes (G5).
--   KEYS[4] W  ZSET  waiter token -> heartbeat deadline; a dead waiter falls out when it passes.
--   KEYS[5] M  HASH  f = last fencing token (shared by both modes, G7); n = last ticket;
--                    q:<tok> = a waiter's spec: mode, handed-off lease ttl and the acquisitions
--                    waiting on the token, "r:<ms> <acquisition> ..." or "w:<ms> <acquisition> ...";
--                    gr:<tok> / gw:<tok> = fencing token of a read / write hold;
--                    ar:<tok> / aw:<tok> = the first acquisition holding through a read / write
--                    hold (after a space once released while others hold: see hold_id); cr:<tok> / cw:<tok> = how many
--                    more hold, each a member of A (see holds_op: the hold is freed when its last
--                    acquisition is released).
--   KEYS[6] A  ZSET  "<acquisition> <first acquisition of the hold> <mode><tok>" -> at least the
--                    hold's expiry when the acquisition was last taken or renewed, at most one ttl
--                    past it (a renewal re-scores it only when behind: rwlock-renew.lua):
--                    a hold's acquisitions after its first, so that one more, one fewer, or asking
--                    whether one holds costs O(log n) however many the owner holds. A member is due
--                    at most one ttl after its lease ran out: those of a hold that ran out are swept,
--                    at most 100 a call (sweep_acquisitions).
-- ARGV[1] is always the wake-up channel; grants are published there as lines
-- "<tok> <fence> <expiresAt> <acquisition> ...".
--
-- Admission (admit()): nothing while a writer holds. A writer at the head of the queue enters only
-- when no reader holds either. A run of readers at the head enters together, up to the first queued
-- writer. A newcomer skips the queue only when the queue is empty, so once a writer waits, new readers
-- queue behind it (writer preference, G6).
-- Reentrancy is per token: read in read, write in write, read in write (a downgrade, granted at once
-- with the write's fencing token); read -> write (an upgrade) is refused, never waited for. Every call
-- carries its own acquisition id, so a resent call (G12) finds its id in place and changes nothing.
-- Every key carries a PEXPIREAT no earlier than the last deadline it holds, and the lock's keys are
-- deleted when nothing is held or queued, so idle names leave no keys behind.
local R, X, Q, W, M, A -- this call's keys, set by begin()
local CHANNEL

-- mode letter -> the holders' key (of this call)
local HOLDS = {}

local function next_fence()
  return bump_fence(M)
end

-- A token's lease expiry in `key` when it is still live, else nil.
local function live_score(key, tok)
  local score = redis.call('ZSCORE', key, tok)
  if score and tonumber(score) > NOW then return tonumber(score) end
  return nil
end

local function live_count(key)
  return redis.call('ZCOUNT', key, '(' .. NOW, '+inf')
end

-- Record a fresh hold of `mode` for `tok` until `exp` with fencing token `fence`, held by the
-- acquisitions `ops`. It replaces whatever an earlier hold whose key expired before purge() saw it
-- (a fixed owner's token comes back) left behind.
local function hold(mode, tok, exp, fence, ops)
  local key = HOLDS[mode]
  redis.call('ZADD', key, exp, tok)
  if ops ~= '' then
    -- The first acquisition in a<mode>:, any others (acquisitions that waited together on the
    -- token) in A: O(k) for the k granted here, once.
    local first, more = nil, {}
    for id in string.gmatch(ops, '%S+') do
      if not first then
        first = id
      else
        more[#more + 1] = exp
        more[#more + 1] = id .. ' ' .. first .. ' ' .. mode .. tok
      end
    end
    redis.call('HSET', M, 'g' .. mode .. ':' .. tok, fence, 'a' .. mode .. ':' .. tok, first)
    if #more > 0 then
      redis.call('ZADD', A, unpack(more))
      redis.call('HSET', M, 'c' .. mode .. ':' .. tok, #more / 2)
      expire_at_least(A, exp)
    else
      redis.call('HDEL', M, 'c' .. mode .. ':' .. tok)
    end
  else
    -- (Only when a waiter's spec was lost: without a list, the hold is released as a whole.)
    redis.call('HSET', M, 'g' .. mode .. ':' .. tok, fence)
    redis.call('HDEL', M, 'a' .. mode .. ':' .. tok, 'c' .. mode .. ':' .. tok)
  end
  expire_at_least(key, exp)
  expire_at_least(M, exp)
end

-- A hold is named by its first acquisition (unique: every acquire call has its own id). `a<mode>:`
-- keeps that id, with a space in front once that acquisition was released while others still hold
-- (ids have no spaces); hold_id() reads the name back either way.
local function hold_id(first)
  if first and string.sub(first, 1, 1) == ' ' then return string.sub(first, 2) end
  return first
end

-- Whether acquisition `op` holds through `tok`'s live hold of `mode`: 1 when it is the hold's first
-- (a<mode>:), 2 when one of the others (a member of A), false when not. A member names its hold, so
-- one left by an earlier hold of the same token (one that ran out; a read hold inside a write hold
-- shares the write's fence, so a fence would not tell them apart) never counts for a later one.
-- O(log n): the owner's other acquisitions are never read.
-- `first`: the hold's a<mode>: field, when the caller has read it (nil: read here).
local function holds_op(mode, tok, op, first)
  if first == nil then first = redis.call('HGET', M, 'a' .. mode .. ':' .. tok) end
  if first == op then return 1 end
  if first and redis.call('ZSCORE', A, op .. ' ' .. hold_id(first) .. ' ' .. mode .. tok) then return 2 end
  return false
end

-- Members of A whose hold is gone go, at most 100 a call; a due member whose hold lives (an
-- acquisition nobody renews while others do) gets the hold's expiry. O(log n) when none is due:
-- renewals keep a live hold's renewed members ahead of the clock.
local function sweep_acquisitions()
  local due = redis.call('ZRANGEBYSCORE', A, '-inf', NOW, 'LIMIT', 0, 100)
  for _, member in ipairs(due) do
    local at = string.find(member, ' ', 1, true) or 0
    local after = string.find(member, ' ', at + 1, true) or at
    local fence = string.sub(member, at + 1, after - 1) -- the hold's name
    local mode, tok = string.sub(member, after + 1, after + 1), string.sub(member, after + 2)
    local held = HOLDS[mode] and redis.call('ZSCORE', HOLDS[mode], tok)
    if held and tonumber(held) > NOW and hold_id(redis.call('HGET', M, 'a' .. mode .. ':' .. tok)) == fence then
      redis.call('ZADD', A, held, member)
    else
      redis.call('ZREM', A, member)
    end
  end
end

-- A queued token's mode, handed-off ttl and waiting acquisitions, and the raw spec (nil when the
-- token does not wait). A spec can only be missing for a queued token if the hash was lost; the
-- waiter is then treated as a writer (the safe side) with a short lease its renewal stretches.
local function spec(tok)
  local s = redis.call('HGET', M, 'q:' .. tok)
  if not s then return 'w', 1000, '', nil end
  local space = string.find(s, ' ', 1, true) or (#s + 1)
  return string.sub(s, 1, 1), tonumber(string.sub(s, 3, space - 1)), string.sub(s, space + 1), s
end

-- The spec of a token that waits now, or nil. A spec whose queue entry is gone (every waiter's
-- heartbeat lapsed while no script ran, so Q and W expired as keys) is forgotten here: the owner
-- waits for nothing, and a later call of it must not join or be refused by a wait that is over.
local function waiting_spec(tok)
  local raw = redis.call('HGET', M, 'q:' .. tok)
  if not raw then return nil end
  if not redis.call('ZSCORE', Q, tok) then
    redis.call('HDEL', M, 'q:' .. tok)
    return nil
  end
  return spec(tok)
end

-- Work a call may leave undone: expired holders or dead waiters beyond its budget, readers beyond the
-- grants one call makes. The reply's nextExpiry is then `now` (`backlog and NOW or next_expiry()`),
-- so the waiters' processes call again at once instead of at their next heartbeat: each call stays
-- bounded, and the rest follows within a few round trips, however much there is (G2, G5).
local backlog = false
-- Dead waiters one call purges at most, and admit() skips at most (a budget of its own: the purge's
-- never keeps it from serving a live head), and grants it makes at most.
local DEAD_PER_CALL = 1000
local GRANTS_PER_CALL = 1000

-- Drop holders whose lease ran out and waiters whose heartbeat stopped (G2, G5); bounded work per
-- call. (Holders are counted live with ZCOUNT, so the expired ones left over block nothing.) With
-- `dead`, only those waiters (lapsed ones admit() found at the head of the queue).
local function purge(dead)
  if not dead then
    for mode, key in pairs(HOLDS) do
      local expired = redis.call('ZRANGEBYSCORE', key, '-inf', NOW, 'LIMIT', 0, 100)
      if #expired > 0 then
        redis.call('ZREM', key, unpack(expired))
        if #expired == 100 and redis.call('ZCOUNT', key, '-inf', NOW) > 0 then
          backlog = true
        end
        local fields = {}
        for _, tok in ipairs(expired) do
          fields[#fields + 1] = 'g' .. mode .. ':' .. tok
          fields[#fields + 1] = 'a' .. mode .. ':' .. tok
          fields[#fields + 1] = 'c' .. mode .. ':' .. tok
        end
        redis.call('HDEL', M, unpack(fields))
      end
    end
    dead = redis.call('ZRANGEBYSCORE', W, '-inf', NOW, 'LIMIT', 0, DEAD_PER_CALL)
    if #dead == 0 then return end
    if #dead == DEAD_PER_CALL and redis.call('ZCOUNT', W, '-inf', NOW) > #dead then
      backlog = true
    end
  end
  redis.call('ZREM', Q, unpack(dead))
  redis.call('ZREM', W, unpack(dead))
  local fields = {}
  for i, tok in ipairs(dead) do fields[i] = 'q:' .. tok end
  redis.call('HDEL', M, unpack(fields))
end

-- Admit the head of the queue if it may enter now (see the header), and tell the waiters' processes.
-- A waiter whose heartbeat has lapsed is not waiting any more (G5): one the purge did not reach is
-- dropped here, never handed the lock. Returns a table token -> { fence, expiresAt } of what it granted.
local function admit()
  local granted = {}
  if live_count(X) > 0 then return granted end
  local lines, taken, dead = {}, {}, {}
  local function give(tok, mode, ttl, ops)
    local exp = NOW + ttl
    local fence = next_fence()
    hold(mode, tok, exp, fence, ops)
    redis.call('HDEL', M, 'q:' .. tok)
    granted[tok] = { fence, exp }
    taken[#taken + 1] = tok
    lines[#lines + 1] = tok .. ' ' .. int(fence) .. ' ' .. int(exp) .. (ops ~= '' and (' ' .. ops) or '')
  end
  -- A writer first in line enters alone, when no reader holds; otherwise the run of readers first in
  -- line enters together, up to the first live writer; in batches of 100 queue entries.
  local from, stop = 0, false
  repeat
    if #dead >= DEAD_PER_CALL or #taken >= GRANTS_PER_CALL then
      backlog = true
      break
    end
    local batch = redis.call('ZRANGE', Q, from, from + 99)
    from = from + #batch
    local beats = #batch > 0 and redis.call('ZMSCORE', W, unpack(batch)) or {}
    for i, tok in ipairs(batch) do
      if not (beats[i] and tonumber(beats[i]) > NOW) then
        dead[#dead + 1] = tok
      else
        local mode, ttl, ops = spec(tok)
        if mode ~= 'r' then
          if #taken == 0 and live_count(R) == 0 then give(tok, 'w', ttl, ops) end
          stop = true
          break
        end
        give(tok, 'r', ttl, ops)
      end
    end
  until stop or #batch < 100
  if #dead > 0 then purge(dead) end
  if #taken == 0 then return granted end
  redis.call('ZREM', Q, unpack(taken))
  redis.call('ZREM', W, unpack(taken))
  redis.call('PUBLISH', CHANNEL, table.concat(lines, '\n'))
  return granted
end

-- Earliest lease expiry among holders of either mode (0 when none): the waiters' fallback re-check time.
local function next_expiry()
  local at = 0
  for _, key in pairs(HOLDS) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
    if first and (at == 0 or tonumber(first) < at) then at = tonumber(first) end
  end
  return at
end

-- Nothing is held or queued any more (R, X and Q are gone): drop W, M and A. A run of readers takes
-- fences NOW_US, NOW_US + 1, ... in one call, so the last one (`fence`, M's f as read) may run ahead
-- of the clock: it is kept until the clock has passed it, so that the clock-based fallback of an
-- idle lock never hands out a lower one (G7).
local function settle_idle(fence)
  redis.call('DEL', W, M, A)
  fence = tonumber(fence or '0')
  if fence >= NOW_US then
    redis.call('HSET', M, 'f', fence)
    redis.call('PEXPIREAT', M, NOW + math.ceil((fence - NOW_US) / 1000) + 1)
  end
end

-- After a release or dequeue: delete the metadata once nothing is held or queued (R, X, Q and W
-- delete themselves when empty), else pull every key's expiry in to the last deadline it still guards.
local function settle()
  if redis.call('EXISTS', R, X, Q) == 0 then
    settle_idle(redis.call('HGET', M, 'f'))
    return
  end
  local last = 0
  for _, key in ipairs({ R, X, W }) do
    local score = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
    if score then
      local at = tonumber(score)
      redis.call('PEXPIREAT', key, at)
      if key == W then redis.call('PEXPIREAT', Q, at) end
      if at > last then last = at end
    end
  end
  if last > 0 then redis.call('PEXPIREAT', M, last) end
end

-- Every rwlock script starts here: the call's keys, channel and clock, and the state above reset.
local function begin(keys, argv)
  read_clock()
  R, X, Q, W, M, A = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  CHANNEL = argv[1]
  HOLDS.r, HOLDS.w = R, X
  backlog = false
end
