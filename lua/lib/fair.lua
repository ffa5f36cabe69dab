-- lua/lib/fair.lua: last prelude of the permit scripts (after lib/common.lua and lib/permit*.lua):
-- the discipline of a fair queue, a semaphore with `overload` (src/core/fair.ts; its memory twin is
-- src/core/memory/fair-queue.ts, the same integer arithmetic). Only fair calls run it: they pass 11
-- KEYS, and begin() sets D T K X; a plain call (7 KEYS) leaves them nil and never comes here.
--
-- The discipline travels in the token: `<id>*<w>.<p>.<f>.<fw>.<max>` (weight, priority 0..7, flow id
-- or '-', flow weight 1..100, flow cap; 0 = none). A token that does not parse is plain.
--
-- Order. One ZSET Q still orders the queue; a disciplined waiter's score is
--   (4 - p) * 2^50 + S - (S mod 32) + (ticket mod 32)
-- so ZRANGE Q is: higher class first (strict priority), then the smallest start tag S (start-time fair
-- queuing between the flows of a class, by flow weight) in steps of 32 units, then arrival. A plain
-- waiter's score is its ticket: the standard class (p = 4 sits at offset 0). Every score is an exact
-- integer below 2^53, written with int(). S is rounded down to its step because V (below) carries the
-- admitted waiter's ticket part, so two flows' S + j could be equal, and equal scores fall back to the
-- tokens' random bytes (another order in each store, a bias for one replica): now two waiters tie only
-- in one step with tickets 32 apart. FIFO inside a flow holds: a flow's start tags are at least one
-- cost (>= 40 units) apart, so they are in different steps.
--
-- Tags (per class p). A request of w permits in a flow of weight fw costs c = floor(w * 4096 / fw).
-- V = D v<p>, the largest score admitted from the class, less its offset. A flow's last finish tag F
-- is T "<p>:<f>" (score (4 - p) * 2^50 + F). On enqueue S = max(V, F), then F = S + c: a newly
-- active flow starts at V, a backlogged one after its own earlier requests. A flow whose last waiter
-- of the class leaves without service (gives up, dies, is evicted) loses its T entry: the refund (its
-- flood's charge is forgiven once it has nobody waiting). After an admission F is kept (a flow that
-- keeps exactly one waiter never re-enters at V ahead of backlogged flows). T entries at or below the
-- V a call started from are dead weight (max(V, F) = V): each call that grants from a class removes at
-- most 16 of them, so T holds the flows with waiters and the recently served, and no call's cost
-- depends on how many flows were ever seen.
--
-- Per-flow cap (max > 0). D h<g>:<f> counts the permits flow f holds (g = D hg, the generation: when a
-- fair call finds H gone, every lease ran out, so every count is stale: hg moves on and the old fields
-- read as 0). A capped waiter that reaches the head at its cap is parked: out of Q into K, member
-- "<f> <score + 3 * 2^50, 16 digits> <tok>" (score 0: K orders by bytes, so ZRANGEBYLEX is a flow's
-- oldest in O(log n)), M k:<tok> = its score. A holder of f that leaves (release, expiry purge) unparks
-- up to what it freed back into Q with the original score. Nothing scans K.
--
-- Eviction (maxQueued > 0, ARGV[7] of permit-acquire). A full queue keeps the waiters that would be
-- served first: a fresh disciplined token that finds ZCARD Q >= maxQueued evicts Q's tail (the last
-- to be served) if it is disciplined and the token's own score would be lower (a lower class, or in
-- the same class a flow further over its share; never the token's own flow), else it is refused
-- ({0, -3, nextExpiry}). The evicted token goes to X (score: NOW + 2 * waiter ttl), one line "<tok> x"
-- is published, a re-check of it answers {-2} and a resent acquire {0, -2, nextExpiry}, never queued:
-- a token in X is in none of Q, W, K, so no grant names it (exactly once, G12).
--
-- D HASH: v<p> V of class p; n<p> waiters of class p (Q and K); q<p>:<f> waiters of flow f in class
-- p; h<g>:<f> permits held by capped flow f; k:<f> parked waiters of f; x<p> evictions of class p;
-- hg the generation of the h fields. A count that reaches 0 is deleted. settle() deletes D, T, K
-- with M once nothing is held or queued (X stays: a shed mark outlives an idle bucket).
--
-- Left out of this version: the rebase and saturation of tags (design 2.2). V only grows; the 2^50
-- range of a class holds 2^38 weight-1 permits admitted from its queue (31 days at 10^5 queued
-- permits/s without the class ever emptying: settle() starts every tag again from 0 when the bucket
-- goes idle).
--
-- Cost (fair calls, on top of the plain path's): per token enqueued ZSCORE T + ZADD T + ZRANK Q, and at
-- most one eviction (O(log n)); per waiter that leaves unserved one HGET of its flow's count (once a
-- flow a call) and at most one ZREM T (the refund); per call that grants: one HGET and at most one
-- HSET of V per class, one HINCRBY per count changed, at most 16 T entries pruned; per capped grant
-- or release a count and at most w unparks (ZRANGEBYLEX, ZREM, ZADD); at most 1000 parkings, 100 shed
-- marks pruned and 100 waiters unparked after H ran out, per call. Nothing scans flows, T, K or X.
local SPAN = 1125899906842624 -- 2^50
local UNIT = 4096
local TIES = 32
local FAIR_TOKEN = '^.-%*(%d+)%.(%d)%.([%w_-]+)%.(%d+)%.(%d+)$'

-- This call's state (reset by begin() on a fair call): V per class (now, and as the call found it),
-- count deltas for D in order, flow counts as D held them at the last flush, cached cap counts, the
-- h generation, shed lines, and how long D and T must live at least.
local vals, vold, deltas, order, stored, held, hgen, shed, keep, moved, parks

function fq.reset()
  vals, vold, deltas, order, stored, held = {}, {}, {}, {}, {}, {}
  hgen = nil
  shed = {}
  keep = 0
  moved = 0
  parks = 0
end

-- How many parked waiters this call put back into Q.
function fq.moved()
  return moved
end

-- How many waiters this call parked.
function fq.parks()
  return parks
end

-- A token's discipline {w, p, f, fw, max, off}, or nil for a plain token.
function fq.disc(tok)
  local w, p, f, fw, max = string.match(tok, FAIR_TOKEN)
  if not w then return nil end
  w, p, fw, max = tonumber(w), tonumber(p), tonumber(fw), tonumber(max)
  if w < 1 or w > 1000 or p > 7 or fw < 1 or fw > 100 then return nil end
  return { w = w, p = p, f = f, fw = fw, max = max, off = (4 - p) * SPAN }
end

function fq.keep(at)
  if at > keep then keep = at end
end

local function bump(field, by)
  local d = deltas[field]
  if d == nil then
    order[#order + 1] = field
    d = 0
  end
  deltas[field] = d + by
end

local function vget(p)
  local v = vals[p]
  if v == nil then
    v = tonumber(redis.call('HGET', D, 'v' .. p) or '0')
    vals[p], vold[p] = v, v
  end
  return v
end

local function gen()
  if hgen == nil then hgen = redis.call('HGET', D, 'hg') or '0' end
  return hgen
end

-- Permits capped flow f holds (this call's changes included).
function fq.held(f)
  local h = held[f]
  if h == nil then
    h = tonumber(redis.call('HGET', D, 'h' .. gen() .. ':' .. f) or '0')
    held[f] = h
  end
  return h
end

local function hold(d, by)
  held[d.f] = fq.held(d.f) + by
  bump('h' .. gen() .. ':' .. d.f, by)
end

-- A waiter of discipline d leaves without service: the counts, and the refund of its flow's tag at
-- once when it was the flow's last waiter of the class (this call's changes counted: a waiter this
-- call queued and evicted, or a flow that enqueues after its last waiter left in the same call, sees
-- the tag as one call per step would).
local function depart(d)
  bump('n' .. d.p, -1)
  local q = 'q' .. d.p .. ':' .. d.f
  bump(q, -1)
  local before = stored[q]
  if before == nil then
    before = tonumber(redis.call('HGET', D, q) or '0')
    stored[q] = before
  end
  if before + deltas[q] <= 0 then redis.call('ZREM', T, d.p .. ':' .. d.f) end
end

-- Flow d's start tag in its class: S = max(V, the flow's last finish F). One ZSCORE.
local function start_of(d, member)
  local last = redis.call('ZSCORE', T, member)
  local s = vget(d.p)
  if last then s = math.max(s, tonumber(last) - d.off) end
  return s
end

-- The score of start tag s: its class, its step of TIES units, then arrival (ticket mod TIES).
local function score_at(d, s, ticket)
  return d.off + s - s % TIES + ticket % TIES
end

-- The score disciplined waiter d would get if it joined now with `ticket` (fq.enqueue() without its
-- effects): what a full queue compares with its tail. One ZSCORE.
function fq.would_score(d, ticket)
  return score_at(d, start_of(d, d.p .. ':' .. d.f), ticket)
end

-- Enqueue: the tag of a disciplined fresh token with ticket `ticket`; returns its Q score.
function fq.enqueue(d, ticket)
  local member = d.p .. ':' .. d.f
  local s = start_of(d, member)
  redis.call('ZADD', T, int(d.off + s + math.floor(d.w * UNIT / d.fw)), member)
  bump('n' .. d.p, 1)
  bump('q' .. d.p .. ':' .. d.f, 1)
  return score_at(d, s, ticket)
end

-- admit() picks disciplined waiter d of w permits: a capped flow's count goes up at once, so the
-- call's later heads see it.
function fq.hold_ahead(d, w)
  if d.max > 0 then hold(d, w) end
end

-- admit() grants disciplined waiter d (score `score`, lease until `exp`): V and the counts.
function fq.grant(d, score, exp)
  local v = vget(d.p)
  if score - d.off > v then vals[d.p] = score - d.off end
  bump('n' .. d.p, -1)
  bump('q' .. d.p .. ':' .. d.f, -1)
  if d.max > 0 then fq.keep(exp) end
end

-- take(): a fresh disciplined token granted at once (a capped flow's count went up as it was picked).
function fq.take(d, exp)
  if d.max > 0 then fq.keep(exp) end
end

-- Whether waiter d may hold w more permits: uncapped, or within its flow's cap (a request heavier
-- than the cap runs once its flow holds nothing, never parked for ever).
function fq.over(d, w)
  if d.max == 0 then return false end
  local h = fq.held(d.f)
  return h > 0 and h + w > d.max
end

-- Whether a fresh capped token may take w permits at once: its flow has room and nobody parked.
function fq.may_take(d, w)
  if d.max == 0 then return true end
  if fq.over(d, w) then return false end
  return tonumber(redis.call('HGET', D, 'k:' .. d.f) or '0') == 0
end

local function park_member(f, score, tok)
  return f .. ' ' .. string.format('%016.0f', score + 3 * SPAN) .. ' ' .. tok
end

-- admit() parks live capped heads at their cap (`toks`, their `scores` and heartbeats `beats`); they
-- left Q's ranks only now, so the ranks admit() read stay valid.
function fq.park(toks, scores, beats)
  local members, fields = {}, {}
  local last = 0
  for i, tok in ipairs(toks) do
    local d = fq.disc(tok)
    members[#members + 1] = 0
    members[#members + 1] = park_member(d.f, scores[i], tok)
    fields[#fields + 1] = 'k:' .. tok
    fields[#fields + 1] = int(scores[i])
    bump('k:' .. d.f, 1)
    last = math.max(last, beats[i])
  end
  parks = parks + #toks
  redis.call('ZREM', Q, unpack(toks))
  redis.call('ZADD', K, unpack(members))
  redis.call('HSET', M, unpack(fields))
  expire_at_least(K, last)
end

-- Parked waiters members (K members) back into Q with their scores.
local function unpark_members(members)
  if #members == 0 then return 0 end
  local adds, fields = {}, {}
  for i, member in ipairs(members) do
    local a = string.find(member, ' ', 1, true)
    local b = string.find(member, ' ', a + 1, true)
    local f, tok = string.sub(member, 1, a - 1), string.sub(member, b + 1)
    adds[#adds + 1] = int(tonumber(string.sub(member, a + 1, b - 1)) - 3 * SPAN)
    adds[#adds + 1] = tok
    fields[i] = 'k:' .. tok
    bump('k:' .. f, -1)
  end
  redis.call('ZREM', K, unpack(members))
  redis.call('ZADD', Q, unpack(adds))
  redis.call('HDEL', M, unpack(fields))
  expire_at_least(Q, NOW + 1000) -- W's beats push it further at once (their heartbeat ttl)
  moved = moved + #members
  return #members
end

-- A holder of capped flow d.f gave back w permits: its oldest parked waiters that now fit go back.
function fq.unpark(d, w)
  hold(d, -w)
  local room = math.min(w, d.max - fq.held(d.f))
  if room <= 0 then return 0 end
  if tonumber(redis.call('HGET', D, 'k:' .. d.f) or '0') <= 0 then return 0 end
  return unpark_members(redis.call('ZRANGEBYLEX', K, '[' .. d.f .. ' ', '(' .. d.f .. '!', 'LIMIT', 0, room))
end

-- Released or expired holder tokens (H members; `#k` members are not tokens): capped flows' counts go
-- down and their parked waiters come back. Returns how many came back.
function fq.released(toks)
  local back = 0
  for _, tok in ipairs(toks) do
    local d = fq.disc(tok)
    if d and d.max > 0 then back = back + fq.unpark(d, d.w) end
  end
  return back
end

-- Nothing is held (H is gone): every count of held permits is stale, and parked waiters wait for
-- nothing. A new generation of counts, and up to 100 parked waiters back into Q (admit() parks those
-- still over their cap). Returns how many came back.
function fq.heal()
  if redis.call('EXISTS', K) == 0 then return 0 end
  hgen = tostring(redis.call('HINCRBY', D, 'hg', 1))
  held = {}
  local members = redis.call('ZRANGE', K, 0, 99)
  local back = unpark_members(members)
  if #members == 100 then backlog = true end
  return back
end

-- Waiters that left without service (`toks`: dead, or giving up): their counts and refunds; parked
-- ones leave K. Plain tokens are skipped.
function fq.departed(toks)
  local fair, fields = {}, {}
  for _, tok in ipairs(toks) do
    local d = fq.disc(tok)
    if d then
      fair[#fair + 1] = { tok, d }
      fields[#fields + 1] = 'k:' .. tok
    end
  end
  if #fair == 0 then return end
  local parked = redis.call('HMGET', M, unpack(fields))
  local members = {}
  for i, entry in ipairs(fair) do
    depart(entry[2])
    if parked[i] then
      members[#members + 1] = park_member(entry[2].f, tonumber(parked[i]), entry[1])
      bump('k:' .. entry[2].f, -1)
    end
  end
  if #members > 0 then
    redis.call('ZREM', K, unpack(members))
    redis.call('HDEL', M, unpack(fields))
  end
end

-- Parked waiter `tok`'s score, or nil.
function fq.parked(tok)
  local score = redis.call('HGET', M, 'k:' .. tok)
  return score and tonumber(score)
end

-- Evict waiter `tok` (discipline d) for a higher class: out of Q and W, marked in X for two heartbeat
-- ttls, one "<tok> x" line.
function fq.evict(tok, d, waiter_ttl)
  redis.call('ZREM', Q, tok)
  redis.call('ZREM', W, tok)
  redis.call('HDEL', M, 't:' .. tok)
  depart(d)
  bump('x' .. d.p, 1)
  local until_ = NOW + 2 * waiter_ttl
  redis.call('ZADD', X, until_, tok)
  expire_at_least(X, until_)
  shed[#shed + 1] = tok .. ' x'
end

-- Shed marks that ran out go, at most 100 a call.
function fq.prune_marks()
  local gone = redis.call('ZRANGEBYSCORE', X, '-inf', NOW, 'LIMIT', 0, 100)
  if #gone > 0 then redis.call('ZREM', X, unpack(gone)) end
end

-- Publish this call's shed lines (one message).
function fq.publish()
  if #shed == 0 then return end
  redis.call('PUBLISH', CHANNEL, table.concat(shed, '\n'))
  shed = {}
end

-- Write this call's changes to D: V per class (and prune T below the V the call started from), the
-- counts (a count at 0 goes), and D's and T's expiry. Idempotent: a second flush writes only what
-- changed since.
function fq.flush()
  local vs = {}
  for p, v in pairs(vals) do
    if v ~= vold[p] then
      vs[#vs + 1] = 'v' .. p
      vs[#vs + 1] = int(v)
      local off = (4 - p) * SPAN
      local dead = redis.call('ZRANGEBYSCORE', T, int(off), int(off + vold[p]), 'LIMIT', 0, 16)
      if #dead > 0 then redis.call('ZREM', T, unpack(dead)) end
      vold[p] = v
    end
  end
  if #vs > 0 then redis.call('HSET', D, unpack(vs)) end
  for _, field in ipairs(order) do
    local by = deltas[field]
    if by ~= 0 then
      if redis.call('HINCRBY', D, field, by) <= 0 then redis.call('HDEL', D, field) end
    end
  end
  deltas, order, stored = {}, {}, {}
  if keep > 0 then
    expire_at_least(D, keep)
    expire_at_least(T, keep)
    keep = 0
  end
end

-- settle() deletes D: this call's pending changes go with it.
function fq.discard()
  deltas, order, stored = {}, {}, {}
  keep = 0
end
