-- quarantine.lua: move a turn that cannot be read aside: out of the runnable, live, lease
-- and waits indexes, its queued mark and lease dropped, into the tag's quarantine with the
-- reason (qr in the header: every script that would change or index the turn refuses it
-- from now on). Works on a header whose control fields are unreadable too. Running it
-- again cleans the indexes again and keeps the first reason. Plain (no _lib.lua).
--
-- KEYS[1]  ns:{T}:h:<id>        header
-- KEYS[2]  ns:{T}:runnable      runnable index of the tag
-- KEYS[3]  ns:{T}:live          non-terminal turns of the tag
-- KEYS[4]  ns:{T}:leases        lease expiries of the tag
-- KEYS[5]  ns:{T}:quarantine    quarantined turns of the tag (id -> when)
-- KEYS[6]  ns:{T}:waits         parents waiting for children (its children report to nobody)
--
-- ARGV[1]  turn id
-- ARGV[2]  the reason (text)
--
-- Returns {'OK'} (quarantined now) | {'NO'} (already quarantined)
local again = redis.call('ZSCORE', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
local hash = redis.call('TYPE', KEYS[1])['ok'] == 'hash'
if hash then redis.call('HDEL', KEYS[1], 'q', 'lo', 'lid', 'lu') end
if again then return {'NO'} end
local t = redis.call('TIME')
local now = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
if hash then redis.call('HSET', KEYS[1], 'qr', ARGV[2], 'qat', now) end
redis.call('ZADD', KEYS[5], now, ARGV[1])
return {'OK'}
