-- KEYS base chg ver; ARGV channel tag marker now. Drops what expired by `now` (an
-- expired change over a base entry becomes a removal); the new version or 0.
local now = tonumber(ARGV[4])
local n = 0
local b = redis.call('HGETALL', KEYS[1])
for k = 1, #b, 2 do
  if tonumber(b[k + 1]) <= now then redis.call('HDEL', KEYS[1], b[k]); n = n + 1 end
end
local c = redis.call('HGETALL', KEYS[2])
for k = 1, #c, 2 do
  local f, e = c[k], c[k + 1]
  local inbase = redis.call('HEXISTS', KEYS[1], f) == 1
  if e == '-' then
    if not inbase then redis.call('HDEL', KEYS[2], f); n = n + 1 end
  elseif tonumber(e) <= now then
    if inbase then redis.call('HSET', KEYS[2], f, '-') else redis.call('HDEL', KEYS[2], f) end
    n = n + 1
  end
end
if n == 0 then return 0 end
local v = redis.call('INCR', KEYS[3])
redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' ' .. v .. ' p ' .. ARGV[4])
return v
