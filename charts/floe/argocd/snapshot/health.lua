-- Argo CD health check for streaming.floe.dev/StreamingAppSnapshot.
--
-- A snapshot is a one-shot action (docs/snapshots.md): its phase says where it is, and the
-- Floe operator's Ready and Failed conditions say why. Pending and Running are Progressing,
-- Succeeded is Healthy and Failed is Degraded, for good: a finished snapshot never runs again.
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
  if c == nil or c.message == nil or c.message == "" then
    return fallback
  end
  if c.reason ~= nil and c.reason ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.message
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Floe operator to start the snapshot"
  return hs
end

local conditions = status.conditions
if status.phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = describe(condition(conditions, "Ready"), "Snapshot written")
elseif status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = describe(condition(conditions, "Failed"), "The snapshot failed")
else
  hs.status = "Progressing"
  hs.message = describe(condition(conditions, "Ready"), "The snapshot is " .. status.phase)
end
return hs
