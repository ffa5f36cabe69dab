-- lua/rwlock-inspect.lua: live readers, writer and queue length of one lock, without a scan.
-- KEYS  R X Q W M A (see lib/rwlock.lua)
-- ARGV[1] channel
-- Cost: O(log n).
-- Returns {readers, writers (0 or 1), queued, now}
return { live_count(R), live_count(X), live_count(W), NOW }
