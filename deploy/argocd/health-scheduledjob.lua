-- Argo CD health check for pgsched.dev/ScheduledJob (docs/argocd.md: what each outcome
-- means, and the argocd-cm key that installs it). It reads only what the operator writes
-- (operator/pgsched/k8s/reporting/status.py): status.observedGeneration, the conditions Ready,
-- Suspended, PoolReady, UpstreamsFound and Completed, and status.lastRun.
--
-- A valid job is Healthy whether or not it has run, and while a run is going: `argocd app
-- wait` must not wait for a schedule. One failed run is Healthy with a message (the next
-- occurrence is a fresh attempt); failures become Degraded when they auto-suspend the job
-- (spec.failureSuspendThreshold), because then nothing runs until someone resumes it.
-- Runs in Argo CD's Lua 5.1 (gopher-lua) and in Lua 5.4 (the tests).
local hs = {}

local function condition(kind)
  for _, item in ipairs(obj.status.conditions) do
    if item.type == kind then
      return item
    end
  end
  return nil
end

local function said(item)
  return item.message or item.reason or ""
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the pgsched operator to validate the spec"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the pgsched operator to validate generation " .. tostring(generation)
  return hs
end

local ready = condition("Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the pgsched operator to validate the spec"
  return hs
end
if ready.status ~= "True" then
  hs.status = "Degraded"
  hs.message = said(ready)
  return hs
end

local suspended = condition("Suspended")
if suspended ~= nil and suspended.status == "True" then
  if suspended.reason == "TooManyFailures" then
    hs.status = "Degraded"
    hs.message = "Suspended automatically: " .. said(suspended)
  else
    hs.status = "Suspended"
    hs.message = said(suspended)
  end
  return hs
end

for _, kind in ipairs({ "PoolReady", "UpstreamsFound" }) do
  local item = condition(kind)
  if item ~= nil and item.status == "False" then
    hs.status = "Degraded"
    hs.message = said(item)
    return hs
  end
end

local completed = condition("Completed")
if completed ~= nil and completed.status == "True" then
  hs.status = completed.reason == "Failed" and "Degraded" or "Healthy"
  hs.message = "One-shot done: " .. said(completed)
  return hs
end

hs.status = "Healthy"
local last = obj.status.lastRun
if last ~= nil and last.status == "FAILED" then
  hs.message = "Last run " .. tostring(last.id) .. " failed"
  if last.reason ~= nil then
    hs.message = hs.message .. " (" .. last.reason .. ")"
  end
elseif last == nil then
  hs.message = "Scheduled; no run yet"
else
  hs.message = "Scheduled; last run " .. tostring(last.id) .. " " .. tostring(last.status)
end
if obj.status.nextRunAt ~= nil then
  hs.message = hs.message .. "; next run at " .. obj.status.nextRunAt
else
  hs.message = hs.message .. "; " .. said(ready)
end
return hs
