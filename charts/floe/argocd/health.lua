-- Argo CD health check for streaming.floe.dev/StreamingApp.
--
-- Argo CD does not derive a custom resource's health from its children, so the Floe operator
-- summarises them in status.conditions and this check reads them as kstatus (Flux) does:
-- Stalled=True is Degraded, Reconciling=True is Progressing, Ready=True is Healthy. A status
-- written by an operator older than the Reconciling and Stalled conditions is read from
-- Degraded and Progressing instead. A status written for an older generation says nothing
-- about the current spec, so it counts as Progressing until the operator catches up.
local hs = {}

local function condition(conditions, type_)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c == nil then
    return fallback
  end
  if c.message ~= nil and c.message ~= "" then
    if c.reason ~= nil and c.reason ~= "" then
      return c.reason .. ": " .. c.message
    end
    return c.message
  end
  if c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return fallback
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Floe operator to report the app's status"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the Floe operator to observe generation " .. string.format("%d", generation)
  return hs
end

local ready = condition(status.conditions, "Ready")
local progressing = condition(status.conditions, "Progressing")
local degraded = condition(status.conditions, "Degraded")
local stalled = condition(status.conditions, "Stalled")
local reconciling = condition(status.conditions, "Reconciling")

if stalled ~= nil then
  if stalled.status == "True" then
    hs.status = "Degraded"
    hs.message = describe(stalled, "The app is stalled")
    return hs
  end
elseif degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded, "The app is degraded")
  return hs
end

if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling, "Reconciling")
  return hs
end

if ready ~= nil and ready.status == "True" then
  if ready.reason == "ScaledToZero" or ready.reason == "Suspended" then
    hs.status = "Suspended"
    hs.message = describe(ready, "Scaled to zero replicas")
    return hs
  end
  hs.status = "Healthy"
  hs.message = describe(ready, "All replicas are ready")
  local within = condition(status.conditions, "ReplicasWithinPartitions")
  if within ~= nil and within.status == "False" then
    hs.message = hs.message .. "; " .. describe(within, "more replicas than input partitions")
  end
  return hs
end

if progressing ~= nil and progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(progressing, "Rolling out")
  return hs
end

-- Not ready, not rolling out and no fault reported: pods are starting or restarting. The
-- Deployment's progress deadline turns a rollout that never finishes into Degraded.
hs.status = "Progressing"
hs.message = describe(ready, "Waiting for the app to become ready")
return hs
