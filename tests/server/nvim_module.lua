-- Headless check of the shipped module server/nvim/continual.lua: setup() starts the
-- server, and the :Continual* commands drive a task. Env: CONTINUAL_WS, CONTINUAL_CMD,
-- CONTINUAL_OUT, CONTINUAL_MODULE (the path of continual.lua).
local ws = os.getenv('CONTINUAL_WS')
local out = os.getenv('CONTINUAL_OUT')
local report = { steps = {} }

local function finish(ok, msg)
  report.ok, report.error = ok, msg
  local f = io.open(out, 'w')
  f:write(vim.fn.json_encode(report))
  f:close()
  vim.cmd(ok and 'qa!' or 'cquit 1')
end

local function wait(what, cond)
  if not vim.wait(60000, cond, 50) then
    error('timed out waiting for ' .. what)
  end
end

local function read(path)
  local f = io.open(path)
  local text = f:read('*a')
  f:close()
  return text
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
  for _, name in ipairs({ 'ContinualStart', 'ContinualApprove', 'ContinualDeny', 'ContinualEdit',
    'ContinualDiff', 'ContinualLedger', 'ContinualStatus' }) do
    assert(vim.fn.exists(':' .. name) == 2, name .. ' is not defined')
  end

  vim.cmd('ContinualStart fix mean()')
  wait('a proposal', function()
    return state.last ~= nil
  end)
  local first = state.last
  vim.cmd('ContinualDiff')
  wait('the diff', function()
    return vim.api.nvim_buf_get_name(0):match('%.diff$') ~= nil
  end)
  table.insert(report.steps, 'diff')
  vim.cmd('ContinualApprove ' .. first)
  wait('the approved file', function()
    return read(ws .. '/src/calc/ops.py'):find('/ len%(values%)') ~= nil
  end)
  wait('the next proposal', function()
    return state.last ~= first
  end)
  table.insert(report.steps, 'approved')
  local second = state.last
  vim.ui.input = function(_, on_confirm)
    on_confirm('Never weaken a test; fix the code instead.')
  end
  vim.cmd('ContinualDeny')
  wait('the retry', function()
    return state.last ~= second and state.last ~= nil
  end)
  table.insert(report.steps, 'denied')
  vim.cmd('ContinualLedger')
  vim.cmd('ContinualStatus')
  vim.wait(300, function()
    return false
  end)
  vim.lsp.stop_client(state.client_id)
end

local ok, err = pcall(flow)
finish(ok, err and tostring(err) or nil)
