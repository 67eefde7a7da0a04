-- wrk script for bench/webhook_bench.py: POST one AdmissionReview body on every request.
-- Usage: STEER_BENCH_BODY=review.json wrk -s bench/webhook_post.lua https://HOST:PORT/mutate
-- (Set at load time, in every thread; wrk's own init then builds the request once.)
-- STEER_BENCH_DISTINCT='"00000000"': that quoted string of the body (a label value) is
-- replaced by a number counting up, so no two requests carry the same pod (same length).
local path = assert(os.getenv("STEER_BENCH_BODY"), "set STEER_BENCH_BODY to an AdmissionReview file")
local file = assert(io.open(path, "rb"), "cannot open " .. path)
wrk.body = file:read("*a")
file:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local marker = os.getenv("STEER_BENCH_DISTINCT")
if marker then
  local at = assert(wrk.body:find(marker, 1, true), "the body lacks " .. marker)
  local head, tail = wrk.body:sub(1, at), wrk.body:sub(at + #marker - 1)
  local digits = #marker - 2
  math.randomseed(os.time())
  local n = math.random(0, 10 ^ digits - 1)  -- not where the last round began
  request = function()
    n = (n + 1) % (10 ^ digits)
    return wrk.format(nil, nil, nil, head .. string.format("%0" .. digits .. "d", n) .. tail)
  end
end
