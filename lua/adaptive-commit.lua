-- lua/adaptive-commit.lua: save the controller's step of one window, exactly once per window: a step
-- of a window already stepped (or older than the last one) is refused, so two replicas that both
-- believe they lead (a leader paused past its lease) never step one window twice.
-- KEYS  S R C V (see lib/adaptive.lua; only S is touched)
-- ARGV[1] channel  ARGV[2] the window stepped  ARGV[3] the state after it (JSON)  ARGV[4] state ttl ms
-- Cost: O(1).
-- Returns 1 when saved, 0 when that window (or a later one) was stepped already.
local window = tonumber(ARGV[2])
if tonumber(redis.call('HGET', S, 'w') or '-1') >= window then return 0 end
redis.call('HSET', S, 'w', window, 's', ARGV[3])
redis.call('PEXPIREAT', S, NOW + tonumber(ARGV[4]))
return 1
