-- commit.lua: the one write of a turn (DESIGN.md, invariant 8). Creates a turn (expected
-- version -1) or updates it compare-and-set, creates its new children, appends the commit's
-- events to the tree's stream, reports an ended child to its waiting parent, and gives the
-- writer's lease back if asked, all in one atomic script. Uses _lib.lua.
--
-- The keys by role (KEYS holds the roles ARGV[14] lists, in that order, then the children's):
-- 1..6  the tag's runnable, live, ended, waits, leases and conv keys
-- 7     ns:{T}:h:<id>       header of the turn
-- 8     ns:{T}:m:<id>       its messages
-- 9     ns:{T}:k:<x>        children list: the parent's for a new child, else its own
-- 10    ns:{T}:ev:<root>    the tree's event stream
-- 11    ns:{T}:ev:<root>:end  the stream's end marker
-- 12    ns:{T}:h:<parent>   the parent's header (its own header for a root)
-- 13..  per new child: header, messages, and the committed turn's children list
-- A commit leaves out the keys it will not use (1, 7 and 8 are always sent). Before it
-- writes, the script checks that it has every key this write uses, else it answers
-- NEED_KEYS and the writer sends them all.
--
-- ARGV[1]   request id, kept in the header: a replay (version already expected + 1 with
--           this id) answers as the first run did and writes nothing
-- ARGV[2]   number of new children c
-- ARGV[3]   writer's worker id ('' = the writer holds no lease)
-- ARGV[4]   writer's lease id
-- ARGV[5]   '1': give that lease back in the same write (with ARGV[12]: unless the
--           written turn can run at once, in which case it is kept and renewed)
-- ARGV[6]   number of events e
-- ARGV[7]   stream length bound (approximate MAXLEN; '0': number the events, stream none)
-- ARGV[8]   seconds the stream and its end marker live once the root ended
-- ARGV[9]   '1': this commit ends the root (mark the stream's end)
-- ARGV[10]  the child's result (JSON) when an ended child reports to its parent, else ''
-- ARGV[11]  seconds a queued wake-up is trusted: the writer sends one for every turn this
--           commit makes runnable (the turn, its new children, a woken parent), which are
--           marked queued; '' = no wake-up follows
-- ARGV[12]  seconds to renew a kept lease by, from the server clock, if it has not
--           expired ('' = keep it as it is)
-- ARGV[13]  '1': refuse the write (CANCELLED) if the stored turn has a cancel request the
--           written snapshot does not carry
-- ARGV[14]  the roles of the keys sent, comma-separated ('1,7,8,10')
-- ARGV[15..18]  what the events share (entries.py): the prefixes their ids, times and data
--           have in common, and the fields naming the turn (JSON members, no braces)
-- ARGV[19..18+4e]  per event: the rest of its id, its type, the rest of its time and of
--           its data; a type '' means the data entry is the whole document. The stream
--           entries hold the documents joined here, numbered from the turn's counter
-- then the turn block (see _lib.lua: id, expected version, body, ..., k) and k messages,
-- then c child blocks likewise
--
-- Returns {'OK', version, cancel flag, lease given back '1'/'0', first event number,
--          parent woken '1'/'0', the writer's lease expiry after the write ('' = none)} |
--         {'NOT_FOUND', id} | {'CONFLICT', id, expected, actual} | {'CANCELLED', id} |
--         {'LEASED', id, owner, lease until, now} | {'LEASE_LOST', id, lease id, worker,
--         owner} | {'BUSY', turn id, status} | {'MISMATCH', id, stored count, last id} |
--         {'REWRITTEN', id, stored count, last id} | {'CORRUPT', id, why} |
--         {'NEED_KEYS', id, the role of a key the write uses and was not sent}
local K, sent = {}, 0
for role in string.gmatch(ARGV[14], '%d+') do
  sent = sent + 1
  K[tonumber(role)] = KEYS[sent]
end
for i = sent + 1, #KEYS do K[12 + i - sent] = KEYS[i] end
local T = {runnable = K[1], live = K[2], ended = K[3], waits = K[4], leases = K[5],
           conv = K[6]}
local rid, worker, lid = ARGV[1], ARGV[3], ARGV[4]
local nevents = tonumber(ARGV[6])
local b = block(19 + 4 * nevents)
local creating = b.exp == '-1'

local function missing(i) return K[i] == nil end
-- the conversation's marker is read by the busy check of a creation, before anything else
if b.conv ~= '' and missing(6) then return {'NEED_KEYS', b.id, 6} end

local prev, err, replay
if creating then
  prev, err, replay = check_create(T, K[7], b, rid)
else
  prev, err, replay = check_update(K[7], K[8], b, rid)
end
if not prev then return err end
if replay then
  local kept = (prev.rel ~= '1' and worker ~= '' and prev.lo == worker and prev.lid == lid)
  return {'OK', prev.v, prev.cx, prev.rel, prev.evf, prev.cw, kept and prev.lu or ''}
end

local now = clock()
if not creating then
  local refused = check_writer(prev, b.id, worker, lid, now)
  if refused then return refused end
  if ARGV[13] == '1' and prev.cx == '1' and b.cx ~= '1' then return {'CANCELLED', b.id} end
end

-- the keys this write uses must have been sent
local nchildren = tonumber(ARGV[2])
local listed = TERMINAL[b.st] or nchildren > 0  -- it ends, or creates turns
local used = {
  [2] = creating or listed, [3] = listed, [5] = worker ~= '',
  [4] = nchildren > 0 or ARGV[10] ~= '' or b.wait ~= ''
    or ((not creating) and (prev.wait ~= '' or prev.open ~= '')),
  [9] = creating and b.par ~= '', [10] = nevents > 0 and ARGV[7] ~= '0',
  [11] = ARGV[9] == '1', [12] = ARGV[10] ~= '',
}
for i, uses in pairs(used) do
  if uses and missing(i) then return {'NEED_KEYS', b.id, i} end
end

-- every check before the first write: a refused commit writes nothing
local children = {}
local at = b.next
for i = 1, nchildren do
  local child = block(at)
  local base = 10 + 3 * i
  local ok, cerr, again = check_create(T, K[base], child, rid)
  if not ok then return cerr end
  if again then return {'CONFLICT', child.id, '-1', ok.v} end
  children[i] = {child, {K[base], K[base + 1], K[base + 2]}}
  at = child.next
end

-- the writer's lease: kept (and renewed while live) when asked, or given back below
local ours = (not creating) and worker ~= '' and prev.lo == worker and prev.lid == lid
local renew = ARGV[12] ~= '' and ours
local at_once = not TERMINAL[b.st] and (b.cx == '1' or ((not creating) and prev.cx == '1')
  or b.st == 'READY' or b.st == 'RUNNING')
local give_back = ARGV[5] == '1' and worker ~= '' and not (renew and at_once)
local lease_until = ours and prev.lu or ''
if renew and not give_back and tonumber(prev.lu) > tonumber(now) then
  lease_until = string.format('%.6f', tonumber(now) + tonumber(ARGV[12]))
  prev.lu = lease_until
  redis.call('HSET', K[7], 'lu', lease_until)
  redis.call('HSET', T.leases, b.id, lease_until)
end

local v, cx = write(T, {K[7], K[8], K[9]}, b, (not creating) and prev or nil, rid, now)
-- a cancel request that reached the parent before this write covers its new children too
-- (the request's cascade listed the tree's turns before they existed)
local reason = (cx == '1' and #children > 0) and redis.call('HGET', K[7], 'cr') or nil
for _, c in ipairs(children) do
  if reason then
    c[1].cx = '1'
    if falsy(c[1].cr) then c[1].cr = reason end
  end
  write(T, c[2], c[1], nil, rid, now)
end

local released = '0'
if give_back then
  released, lease_until = '1', ''
  if ours then
    redis.call('HDEL', K[7], 'lo', 'lid', 'lu')
    redis.call('HDEL', T.leases, b.id)
    local open = redis.call('HGET', K[7], 'open') or ''
    place(T.runnable, b.id, b.st, cx, b.nra, '', now, open, prev.q)
  end
end

-- the event documents, joined from what they share and what each adds
local docs = {}
local id_from, at_from, data_from, turn = ARGV[15], ARGV[16], ARGV[17], ARGV[18]
for i = 1, nevents do
  local at = 15 + 4 * i
  if ARGV[at + 1] == '' then
    docs[i] = ARGV[at + 3]
  else
    docs[i] = '{"event_id":"' .. id_from .. ARGV[at] .. '","type":"' .. ARGV[at + 1] .. '",'
      .. turn .. ',"occurred_at":' .. at_from .. ARGV[at + 2] .. ',"data":' .. data_from
      .. ARGV[at + 3] .. '}'
  end
end
local first = append_events(K[7], K[10], K[11], docs, ARGV[7], ARGV[8], ARGV[9],
                            creating and '0' or prev.ev)

local woke = '0'
local was_terminal = (not creating) and TERMINAL[prev.st]
if ARGV[10] ~= '' and b.par ~= '' and TERMINAL[b.st] and not was_terminal then
  woke = fan_in(T, K[12], b.par, b.id, ARGV[10], now)
end

if ARGV[11] ~= '' then
  local till = tostring(tonumber(now) + tonumber(ARGV[11]))
  mark_queued(T.runnable, K[7], b.id, till, now)
  for _, c in ipairs(children) do mark_queued(T.runnable, c[2][1], c[1].id, till, now) end
  if woke == '1' then mark_queued(T.runnable, K[12], b.par, till, now) end
end
redis.call('HSET', K[7], 'rel', released, 'cw', woke)
return {'OK', v, cx, released, first, woke, lease_until}
