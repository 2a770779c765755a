-- The bench transition in Redis (benches/peers/README.md): look up the definition's
-- transition for (state, event), move the state, merge the payload into the context, append a
-- history item (the newest 100 kept, as smdb keeps per instance).
-- KEYS[1]: the instance hash (state, ctx as JSON, events); its history is the list KEYS[1]..':h'.
-- ARGV[1]: the event; ARGV[2]: the payload, a JSON object.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return redis.error_reply('INSTANCE_NOT_FOUND') end
local to = redis.call('HGET', 'def:bench', state .. '|' .. ARGV[1])
if not to then return redis.error_reply('INVALID_TRANSITION') end
local ctx = cjson.decode(redis.call('HGET', KEYS[1], 'ctx'))
local payload = cjson.decode(ARGV[2])
for k, v in pairs(payload) do ctx[k] = v end
local n = redis.call('HINCRBY', KEYS[1], 'events', 1)
redis.call('HSET', KEYS[1], 'state', to, 'ctx', cjson.encode(ctx))
local item = cjson.encode({seq = n, event = ARGV[1], from_state = state, to_state = to, payload = payload})
redis.call('RPUSH', KEYS[1] .. ':h', item)
redis.call('LTRIM', KEYS[1] .. ':h', -100, -1)
return {to, n}
