-- save.lua: compare-and-set update of one turn; appends only the new messages. Uses _lib.lua.
--
-- KEYS[1..6]  the tag's runnable, live, ended, waits, leases and conv keys (see create.lua)
-- KEYS[7]     ns:{T}:h:<id>    header
-- KEYS[8]     ns:{T}:m:<id>    messages
--
-- ARGV[1]      request id, kept in the header: a replay (version already expected + 1
--              with this id) answers OK without writing
-- ARGV[2..19]  the turn block (see create.lua): expected version, the stored count and
--              last stored message id the caller believes, the new messages' count k
-- ARGV[20..]   the k new message documents
-- then, optionally, a worker id and lease id: the lease is given back in the same write
--
-- Returns {'OK', version, cancel flag, '1' if the named lease was given back} | {'NOT_FOUND', id} | {'CONFLICT', id, expected,
--         actual} | {'MISMATCH', id, stored count, last id} (the caller's count is off:
--         it may retry) | {'REWRITTEN', id, stored count, last id} | {'CORRUPT', id, why}
local T = tag_keys()
local b = block(2)
local prev, err, replay = check_update(KEYS[7], b, ARGV[1])
if not prev then return err end
if replay then
  local asked = ARGV[b.next] and ARGV[b.next] ~= ''
  return {'OK', prev.v, prev.cx, asked and '1' or '0'}
end
local now = clock()
local v, cx = write(T, {KEYS[7], KEYS[8], KEYS[8]}, b, prev, ARGV[1], now)
return {'OK', v, cx, release_after(T, KEYS[7], b, prev, cx, b.next, now)}
