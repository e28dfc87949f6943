-- GCRA in Redis, deciding as rl_take does, for the Redis row of bench/run.
-- KEYS[1]: the bucket; ARGV: rate (per second), burst, cost.
-- Returns {allowed (1/0), remaining, retry_after in microseconds}.
-- Times are whole microseconds from the server's clock (TIME), as doubles:
-- exact below 2^53, which holds for centuries.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local T = math.max(1, math.floor(1e6 / rate + 0.5))
local tau = T * burst
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- a passed or absent bucket is a full one
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
	tat = now
end
local new_tat = tat + cost * T
if cost > burst or new_tat - now > tau then
	return {0, 0, new_tat - now - tau}
end
-- the key expires when its bucket has passed, so memory holds live keys only
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX',
		   math.max(1, math.ceil((new_tat - now) / 1000)))
return {1, math.floor((now + tau - new_tat) / T), 0}
