-- create.lua: create one turn (expected version -1 -> version 0), atomically with the busy
-- check of a conversation root. Uses _lib.lua.
--
-- KEYS[1]  ns:{T}:runnable     runnable index of the tag
-- KEYS[2]  ns:{T}:live         non-terminal turns of the tag
-- KEYS[3]  ns:{T}:ended        terminal turns of the tag
-- KEYS[4]  ns:{T}:waits        parents waiting for children
-- KEYS[5]  ns:{T}:leases       lease expiries
-- KEYS[6]  ns:{T}:conv         the conversation marker (read for a conversation root)
-- KEYS[7]  ns:{T}:h:<id>       header of the new turn
-- KEYS[8]  ns:{T}:m:<id>       messages of the new turn
-- KEYS[9]  ns:{T}:k:<parent>   children list of the parent (own list for a root, unused)
--
-- ARGV[1]      request id (a replay of the same request answers OK)
-- ARGV[2..19]  the turn block: id, expected (-1), body, status, next_runnable_at, cancel
--              flag, cancel reason (JSON), stored count (0), last stored id (''), new last
--              id, waiting child ids (JSON or ''), updated_at, created_at, parent id,
--              root id, conversation id (roots only), agent id, k
-- ARGV[20..]   k message documents
--
-- Returns {'OK', version, cancel flag} | {'CONFLICT', id, -1, actual} |
--         {'BUSY', active turn id, its status} | {'CORRUPT', id, why}
local T = tag_keys()
local b = block(2)
local ok, err, replay = check_create(T, KEYS[7], b, ARGV[1])
if not ok then return err end
if replay then return {'OK', ok.v, ok.cx} end
local v, cx = write(T, {KEYS[7], KEYS[8], KEYS[9]}, b, nil, ARGV[1], clock())
return {'OK', v, cx}
