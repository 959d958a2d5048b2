-- claim.lua: lease one turn if the claim rule allows it; bumps the version (the fencing
-- token) and writes a fresh lease id. Uses _lib.lua.
--
-- KEYS[1]  ns:{T}:h:<id>      header
-- KEYS[2]  ns:{T}:m:<id>      messages
-- KEYS[3]  ns:{T}:runnable    runnable index of the tag
-- KEYS[4]  ns:{T}:leases      lease expiries of the tag (the parent's is read here)
--
-- ARGV[1]  turn id
-- ARGV[2]  worker id
-- ARGV[3]  the new lease id (random, made by the caller; a replay with it answers OK)
-- ARGV[4]  now (the caller's reading of the store clock)
-- ARGV[5]  lease until (now + lease length)
-- ARGV[6]  how many messages the caller already has (they are not sent again)
--
-- Rule: not quarantined (a CORRUPT reply); not terminal; no live lease; the parent holds no live lease; then cancellation
-- requested, READY, RUNNING, RETRY_SCHEDULED with next_runnable_at <= now, or
-- WAITING_FOR_CHILD with every awaited child reported (open = 0).
-- Returns {'OK', header fields (flat), messages after ARGV[6]} | {'NO'} |
--         {'NOT_FOUND', id} | {'CORRUPT', id, why}
local id, worker, lease_id = ARGV[1], ARGV[2], ARGV[3]
local f, err = writable(KEYS[1], id)
if not f then return err end
local now = tonumber(ARGV[4])

local function reply()
  return {'OK', redis.call('HGETALL', KEYS[1]),
          redis.call('LRANGE', KEYS[2], tonumber(ARGV[6]), -1)}
end

if f.lo == worker and f.lid == lease_id then return reply() end
if TERMINAL[f.st] then return {'NO'} end
if f.lu ~= '' and tonumber(f.lu) > now then return {'NO'} end
if f.par ~= '' then
  local parent_until = redis.call('HGET', KEYS[4], f.par)
  if parent_until and tonumber(parent_until) > now then return {'NO'} end
end
local due = f.st == 'RETRY_SCHEDULED' and (f.nra == '' or tonumber(f.nra) <= now)
local woken = f.st == 'WAITING_FOR_CHILD' and f.open == '0'
if not (f.cx == '1' or f.st == 'READY' or f.st == 'RUNNING' or due or woken) then
  return {'NO'}
end
-- A quick look, not a parse (a full decode here cost more than the rest of the claim, and
-- grew with the turn): the worker parses the body and quarantines what fails there
local body = redis.call('HGET', KEYS[1], 'body') or ''
local function readable_body()
  if string.sub(body, 1, 1) ~= '{' then return false end
  for sv in pairs(READABLE) do
    local mark = '"schema_version":' .. sv
    if string.find(body, mark .. ',', 1, true) or string.find(body, mark .. '}', 1, true) then
      return true
    end
  end
  return false
end
if not readable_body() then
  return {'CORRUPT', id, 'body is not a snapshot of a readable schema'}
end
-- the caller may hold the messages in its cache and not read them: the list must still
-- be the one the header describes (its length and last document)
local why = spoiled(KEYS[2], f, false)
if why then return {'CORRUPT', id, why} end

redis.call('HSET', KEYS[1], 'lo', worker, 'lid', lease_id, 'lu', ARGV[5], 'v', f.version + 1)
redis.call('HDEL', KEYS[1], 'q')  -- the wake-up that was queued has been served
redis.call('HSET', KEYS[4], id, ARGV[5])
place(KEYS[3], id, f.st, f.cx, f.nra, ARGV[5], clock(), f.open, '')
return reply()
