-- load.lua: a turn's header and messages, read atomically. Read-only. Uses _lib.lua.
--
-- KEYS[1]  ns:{T}:h:<id>   header
-- KEYS[2]  ns:{T}:m:<id>   messages
--
-- ARGV[1]  turn id
-- ARGV[2]  how many messages the caller already has (not sent again)
--
-- Returns {'OK', header fields (flat), messages after ARGV[2]} | {'NOT_FOUND', id} |
--         {'CORRUPT', id, why}
local f, err = read(KEYS[1], ARGV[1])
if not f then return err end
return {'OK', redis.call('HGETALL', KEYS[1]),
        redis.call('LRANGE', KEYS[2], tonumber(ARGV[2]), -1)}
