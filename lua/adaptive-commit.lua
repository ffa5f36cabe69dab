-- lua/adaptive-commit.lua: save the controller's step of one window, exactly once per window, and only
-- over the state it was computed from: a step of a window already stepped (or older than the last
-- one) is refused, and so is a step computed from a state that another step replaced since it was
-- read (two replicas that both believe they lead, one paused past its lease: neither steps a window
-- twice, nor loses the other's step by saving over it). A window that has not ended on the server's
-- clock, or ended more than 3 windows ago, is not stepped (a caller whose clock is off).
-- KEYS  S R C V (see lib/adaptive.lua; only S is touched)
-- Windows are named by their start (ms, server clock), so a change of the window's length (a reload,
-- a rolling deploy) orders the new windows after the last one stepped.
-- ARGV[1] channel  ARGV[2] the window stepped  ARGV[3] the state after it (JSON)  ARGV[4] state ttl ms
-- ARGV[5] the last window stepped when the caller read the state it stepped from (-1: none)
-- ARGV[6] window ms
-- Cost: O(1).
-- Returns 1 when saved (also when this very step was saved already: the call sent again after its
-- reply was lost), 0 when refused.
local window, based, window_ms = tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[6])
local current = math.floor(NOW / window_ms) * window_ms
if window >= current or window < current - 3 * window_ms then return 0 end
local f = redis.call('HMGET', S, 'w', 's')
local stepped = tonumber(f[1] or '-1')
if stepped == window and f[2] == ARGV[3] then return 1 end
if stepped ~= based or stepped >= window then return 0 end
redis.call('HSET', S, 'w', window, 's', ARGV[3])
redis.call('PEXPIREAT', S, NOW + tonumber(ARGV[4]))
return 1
