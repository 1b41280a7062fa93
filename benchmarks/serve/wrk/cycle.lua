-- wrk script for benchmarks/serve_load.py: cycles through real request bodies instead of one fixed query, and
-- reports the run as one JSON line (so that the Python side parses numbers, not wrk's human-readable text).
--
--   wrk -t1 -c32 -d60s --latency -s benchmarks/wrk/cycle.lua http://127.0.0.1:8000/retrieve -- bodies.jsonl
--
-- The file after `--` holds one JSON request body per line (POSTed in turn, each thread starting at its own
-- offset); without it every request is wrk's default GET of the URL (the /health floor).

local bodies = {}
local next_body = 1
local headers = {["Content-Type"] = "application/json"}

local thread_count = 0
function setup(thread)
  thread:set("id", thread_count)
  thread_count = thread_count + 1
end

function init(args)
  if args[1] then
    for line in io.lines(args[1]) do
      if #line > 0 then bodies[#bodies + 1] = line end
    end
    -- Threads start at different offsets so that they do not send the same query at the same moment.
    next_body = ((id or 0) * 7919) % #bodies + 1
  end
end

function request()
  if #bodies == 0 then
    return wrk.format()
  end
  local body = bodies[next_body]
  next_body = next_body % #bodies + 1
  return wrk.format("POST", nil, headers, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "bytes": %d, "errors": {"connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d}, "latency_us": {"p50": %d, "p90": %d, "p99": %d, ' ..
    '"mean": %.1f, "max": %d, "stdev": %.1f}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max,
    latency.stdev))
end
