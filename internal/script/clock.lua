-- clock.lua: the server's time in ms, read once per script run, for the
-- scripts that include it (release.lua and setlimit.lua, ahead of wake.lua and tomb.lua; bury.lua),
-- whose wake-ups take it as a function.
local now = false -- server ms, read when needed
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
