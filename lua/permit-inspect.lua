-- lua/permit-inspect.lua: live holders and queue length of one name, without a scan.
-- KEYS  H Q W M P F A (see lib/permits.lua)
-- ARGV[1] channel
-- A fair queue's call (lib/fair.lua): KEYS H Q W M P F A D T K X, ARGV[2..] flow ids to read.
-- Cost: O(log n); a fair call O(log n + f) for f flows asked (one HMGET).
-- Returns {holders, queued, permits override (0 = none), now, adaptive limit (0 = none)}; a fair call
--         then: waiters of class 0..7 (8 numbers), parked waiters, evictions of class 0..7 (8
--         numbers), saturated classes (bits: 0, tags are not rebased yet), 1 when a plain token is
--         among the first or last 4 waiters (some process uses the name without `overload`), then per
--         flow asked: its waiters (every class), permits held (capped flows), parked waiters
local holders = redis.call('ZCOUNT', H, '(' .. NOW, '+inf')
if holders == 0 then
  local _, lone_exp = parse_lone(redis.call('GET', F)) -- a lone holder (lib/permits.lua)
  if lone_exp and lone_exp > NOW then holders = 1 end
end
local permits, adaptive = parse_limit(redis.call('GET', P))
local out = {
  holders,
  redis.call('ZCOUNT', W, '(' .. NOW, '+inf'),
  (permits and not adaptive) and permits or 0,
  NOW,
  adaptive and permits or 0,
}
if not D then return out end
local fields = { 'hg' }
for p = 0, 7 do
  fields[#fields + 1] = 'n' .. p
  fields[#fields + 1] = 'x' .. p
end
for i = 2, #ARGV do
  for p = 0, 7 do fields[#fields + 1] = 'q' .. p .. ':' .. ARGV[i] end
  fields[#fields + 1] = 'k:' .. ARGV[i]
end
local values = redis.call('HMGET', D, unpack(fields))
local function at(i)
  return tonumber(values[i] or '0')
end
for p = 0, 7 do out[#out + 1] = at(2 + 2 * p) end
out[#out + 1] = redis.call('ZCARD', K)
for p = 0, 7 do out[#out + 1] = at(3 + 2 * p) end
out[#out + 1] = 0
local mixed = 0
local sample = redis.call('ZRANGE', Q, 0, 3)
for _, tok in ipairs(redis.call('ZRANGE', Q, -4, -1)) do sample[#sample + 1] = tok end
for _, tok in ipairs(sample) do
  if not fq.disc(tok) then mixed = 1 end
end
out[#out + 1] = mixed
local held = {}
if #ARGV >= 2 then
  local names = {}
  for i = 2, #ARGV do names[#names + 1] = 'h' .. (values[1] or '0') .. ':' .. ARGV[i] end
  held = redis.call('HMGET', D, unpack(names))
end
for i = 2, #ARGV do
  local base = 17 + (i - 2) * 9
  local waiting = 0
  for p = 1, 8 do waiting = waiting + at(base + p) end
  out[#out + 1] = waiting
  out[#out + 1] = tonumber(held[i - 1] or '0')
  out[#out + 1] = at(base + 9)
end
return out
