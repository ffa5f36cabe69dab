-- lua/permit-inspect.lua: live holders and queue length of one name, without a scan.
-- KEYS  H Q W M (see lib/permits.lua)
-- ARGV[1] channel
-- Returns {holders, queued, now}
return { redis.call('ZCOUNT', H, '(' .. NOW, '+inf'), redis.call('ZCOUNT', W, '(' .. NOW, '+inf'), NOW }
