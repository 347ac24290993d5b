-- Argo CD health check for pgsched.dev/ConcurrencyPool (docs/argocd.md). The operator
-- writes status.running, status.queued and status.jobs every few seconds
-- (operator/pgsched/k8s/kinds/pool_status.py); a pool is Healthy once it has, full or not: runs
-- waiting for room is what a pool is for. Until the operator has seen it, Progressing.
-- Runs in Argo CD's Lua 5.1 (gopher-lua) and in Lua 5.4 (the tests).
local hs = {}

if obj.status == nil or obj.status.running == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the pgsched operator to report the pool"
  return hs
end

local running = obj.status.running
local queued = obj.status.queued or 0
local limit = obj.spec.limit
hs.status = "Healthy"
hs.message = tostring(running) .. " of " .. tostring(limit) .. " running, "
  .. tostring(queued) .. " queued, " .. tostring(obj.status.jobs or 0) .. " ScheduledJobs"
if limit ~= nil and running >= limit and queued > 0 then
  hs.message = hs.message .. " (full: queued runs wait for room)"
end
return hs
