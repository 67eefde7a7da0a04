-- wrk script for bench/webhook_bench.py: POST one AdmissionReview body on every request.
-- Usage: STEER_BENCH_BODY=review.json wrk -s bench/webhook_post.lua https://HOST:PORT/mutate
-- (Set at load time, in every thread; wrk's own init then builds the request once.)
local path = assert(os.getenv("STEER_BENCH_BODY"), "set STEER_BENCH_BODY to an AdmissionReview file")
local file = assert(io.open(path, "rb"), "cannot open " .. path)
wrk.body = file:read("*a")
file:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
