-- Headless check of the shipped module server/nvim/continual.lua: setup() starts the
-- server, and the :Continual* commands drive a task. Env: CONTINUAL_WS, CONTINUAL_CMD,
-- CONTINUAL_OUT, CONTINUAL_MODULE (the path of continual.lua).
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':h') .. '/nvim_harness.lua')
local ws, report, wait, read = H.ws, H.report, H.wait, H.read

local function flow()
  local state = H.start('src/calc/ops.py').state
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

H.run(flow)
