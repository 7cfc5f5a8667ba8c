-- KEYS base chg ver mark digest; ARGV channel tag marker digest ('' no file) then
-- key/expiry pairs. Sets the mark; replaces the base when the digest differs.
local m = redis.call('GET', KEYS[4])
if not m then redis.call('SET', KEYS[4], ARGV[3])
elseif m ~= ARGV[3] then return redis.error_reply('RISKLISTS keys ' .. m) end
if ARGV[4] == '' or redis.call('GET', KEYS[5]) == ARGV[4] then return 0 end
redis.call('DEL', KEYS[1])
local n = #ARGV
local i = 5
while i < n do
  local t = {}
  while i < n and #t < 2000 do
    t[#t + 1] = ARGV[i]
    t[#t + 1] = ARGV[i + 1]
    i = i + 2
  end
  redis.call('HSET', KEYS[1], unpack(t))
end
local c = redis.call('HGETALL', KEYS[2])
for k = 1, #c, 2 do
  if c[k + 1] == '-' and redis.call('HEXISTS', KEYS[1], c[k]) == 0 then
    redis.call('HDEL', KEYS[2], c[k])
  end
end
redis.call('SET', KEYS[5], ARGV[4])
local v = redis.call('INCR', KEYS[3])
redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' ' .. v .. ' s')
return v
