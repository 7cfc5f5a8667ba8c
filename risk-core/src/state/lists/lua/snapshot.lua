-- KEYS base chg ver mark: `{ver, mark, base pairs, chg pairs}` (atomic).
return {tonumber(redis.call('GET', KEYS[3]) or '0'), redis.call('GET', KEYS[4]),
  redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
