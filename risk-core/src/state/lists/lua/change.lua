-- KEYS base chg ver mark; ARGV channel tag marker op key [expiry]. `{ver, had}`.
local m = redis.call('GET', KEYS[4])
if not m then return redis.error_reply('RISKLISTS uninit') end
if m ~= ARGV[3] then return redis.error_reply('RISKLISTS keys ' .. m) end
local f = ARGV[5]
local inbase = redis.call('HEXISTS', KEYS[1], f) == 1
local c = redis.call('HGET', KEYS[2], f)
local had = inbase
if c then had = c ~= '-' end
local msg
if ARGV[4] == 'a' then
  redis.call('HSET', KEYS[2], f, ARGV[6])
  msg = ' a ' .. f .. ' ' .. ARGV[6]
else
  if inbase then redis.call('HSET', KEYS[2], f, '-') else redis.call('HDEL', KEYS[2], f) end
  msg = ' r ' .. f
end
local v = redis.call('INCR', KEYS[3])
redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' ' .. v .. msg)
if had then return {v, 1} end
return {v, 0}
