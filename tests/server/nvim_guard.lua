-- Headless check through the shipped module: the only call the agent proposes is blocked by
-- a guard, and the reviewer still sees a proposal with a one-line reason (never a silent
-- task end); approving it is refused. Env: CONTINUAL_WS, CONTINUAL_CMD, CONTINUAL_OUT,
-- CONTINUAL_MODULE.
local ws = os.getenv('CONTINUAL_WS')
local out = os.getenv('CONTINUAL_OUT')
local report = { messages = {} }

local function finish(ok, msg)
  report.ok, report.error = ok, msg
  local f = io.open(out, 'w')
  f:write(vim.fn.json_encode(report))
  f:close()
  vim.cmd(ok and 'qa!' or 'cquit 1')
end

local function wait(what, cond)
  if not vim.wait(120000, cond, 50) then
    error('timed out waiting for ' .. what)
  end
end

-- What the reviewer reads: every message the module shows.
vim.notify = function(msg)
  table.insert(report.messages, msg)
end

local function said(pattern)
  for _, m in ipairs(report.messages) do
    if m:find(pattern, 1, true) then
      return true
    end
  end
  return false
end

local function flow()
  vim.cmd('edit ' .. ws .. '/src/calc/ops.py')
  local continual = dofile(os.getenv('CONTINUAL_MODULE'))
  continual.setup({ cmd = vim.fn.json_decode(os.getenv('CONTINUAL_CMD')), root = ws })
  local state = continual.state
  wait('the client', function()
    local c = vim.lsp.get_client_by_id(state.client_id)
    return c and c.initialized
  end)
  vim.cmd('ContinualStart Install the dependencies')
  wait('a proposal or the end of the task', function()
    return state.last ~= nil or said('task done')
  end)
  local p = state.last and state.proposals[state.last] or {}
  report.tool, report.arguments, report.note = p.tool, p.arguments, p.note
  vim.cmd('ContinualApprove')
  wait('the refusal', function()
    return said('a guard blocks this call')
  end)
  report.task_done = said('task done')
  vim.lsp.stop_client(state.client_id)
end

local ok, err = pcall(flow)
finish(ok, err and tostring(err) or nil)
