-- Headless check of issue 19 in the shipped module (server/nvim/continual.lua): per-hunk
-- code actions (accept one, reject one with a reason), :ContinualAllow so the same command
-- later runs unasked, :ContinualUndo of an approved new file. Env: CONTINUAL_WS,
-- CONTINUAL_CMD, CONTINUAL_OUT, CONTINUAL_MODULE.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':h') .. '/nvim_harness.lua')
local ws, report, read = H.ws, H.report, H.read

local function wait(what, cond)
  H.wait(what, cond, 400000) -- a decision waits for its training step (up to 300 s)
end

local function step(name)
  table.insert(report.steps, name)
end

-- The code action titled `title` on 0-based `line`, run as Neovim runs a client command.
local function run_action(line, title)
  local params = {
    textDocument = vim.lsp.util.make_text_document_params(),
    range = { start = { line = line, character = 0 }, ['end'] = { line = line, character = 0 } },
    context = { diagnostics = {} },
  }
  local replies = vim.lsp.buf_request_sync(0, 'textDocument/codeAction', params, 30000) or {}
  for _, reply in pairs(replies) do
    for _, action in ipairs(reply.result or {}) do
      local cmd = action.command or action
      if action.title == title then
        vim.lsp.commands[cmd.command](cmd, {})
        return
      end
    end
  end
  error('no code action ' .. title .. ' on line ' .. line)
end

local function flow()
  local state = H.start('src/calc/ops.py').state
  for _, name in ipairs({ 'ContinualAllow', 'ContinualUndo' }) do
    assert(vim.fn.exists(':' .. name) == 2, name .. ' is not defined')
  end

  vim.cmd('ContinualStart document add and fix mean')
  wait('a proposal', function()
    return state.last ~= nil
  end)
  local first = state.last
  wait('a diagnostic per hunk', function()
    return #vim.diagnostic.get(0) == 3
  end)
  run_action(1, 'Accept hunk 1/2')
  vim.ui.input = function(_, on_confirm)
    on_confirm('Keep mean() as it is for now.')
  end
  run_action(6, 'Reject hunk 2/2…')
  wait('the next proposal', function()
    return state.last ~= first
  end)
  wait('the buffer with the accepted hunk', function()
    return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n'):find('Sum of a and b') ~= nil
  end)
  report.ops_buffer = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  step('hunks')

  local status = state.last -- git status
  vim.cmd('ContinualApprove ' .. status)
  wait('the write after it', function()
    return state.last ~= status
  end)
  local changes = state.last
  vim.cmd('ContinualStart status')
  wait('the same command in a new task', function()
    return state.last ~= changes
  end)
  local again = state.last
  vim.cmd('ContinualAllow ' .. again)
  wait('the next call after the allowed one', function()
    return state.last ~= again
  end)
  step('allowed')
  local before = state.last
  vim.cmd('ContinualStart status again')
  wait('a new task past its git status', function()
    return state.last ~= before
  end)
  report.after_allowed = state.proposals[state.last].arguments
  step('ran unasked')

  vim.cmd('ContinualApprove ' .. changes)
  wait('CHANGES.md', function()
    return read(ws .. '/CHANGES.md') ~= nil
  end)
  vim.cmd('ContinualUndo No changelog in this repo.')
  wait('CHANGES.md undone', function()
    return read(ws .. '/CHANGES.md') == nil
  end)
  step('undone')
  vim.cmd('ContinualLedger')
  wait('the ledger window', function()
    return (vim.api.nvim_buf_get_lines(0, 0, 1, false)[1] or ''):find('^context tokens') ~= nil
  end)
  report.ledger = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  vim.lsp.stop_client(state.client_id)
end

H.run(flow)
