-- Headless Neovim (0.7+) driving continual-lsp through plain LSP only: diagnostics, code
-- actions, workspace/executeCommand, window/showDocument (correction and edit files,
-- saved with :write) and window/showMessageRequest (overridden: the default calls
-- inputlist() and blocks). Run as:
--   nvim --headless -u NONE -i NONE -c 'luafile nvim_flow.lua'
-- with CONTINUAL_WS (workspace), CONTINUAL_CMD (JSON argv of the server), CONTINUAL_OUT
-- (JSON report). Exits with :cquit 1 on any failure.
local ws = os.getenv('CONTINUAL_WS')
local out = os.getenv('CONTINUAL_OUT')
local cmd = vim.fn.json_decode(os.getenv('CONTINUAL_CMD'))
local report = { steps = {}, requests = {}, choices = {} }

local function finish(ok, msg)
  report.ok = ok
  report.error = msg
  local f = io.open(out, 'w')
  f:write(vim.fn.json_encode(report))
  f:close()
  if ok then
    vim.cmd('qa!')
  else
    io.stderr:write('nvim flow failed: ' .. tostring(msg) .. '\n')
    vim.cmd('cquit 1')
  end
end

local client_id
local function client()
  return vim.lsp.get_client_by_id(client_id)
end

local function sync(method, params, bufnr)
  local c = client()
  local resp, err
  if vim.fn.has('nvim-0.11') == 1 then
    resp, err = c:request_sync(method, params, 120000, bufnr or 0)
  else
    resp, err = c.request_sync(method, params, 120000, bufnr or 0)
  end
  if not resp then
    error(method .. ': no response: ' .. tostring(err))
  end
  if resp.err then
    error(method .. ': ' .. (resp.err.message or vim.inspect(resp.err)))
  end
  return resp.result
end

local function wait(what, cond, ms)
  if not vim.wait(ms or 60000, cond, 50) then
    error('timed out waiting for ' .. what)
  end
end

local function open(path)
  vim.cmd('edit ' .. vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  vim.lsp.buf_attach_client(buf, client_id)
  return buf
end

local shown = {}
local handlers = {
  ['window/showMessageRequest'] = function(_, params)
    table.insert(report.requests, params.message)
    local titles = {}
    for _, a in ipairs(params.actions or {}) do
      table.insert(titles, a.title)
    end
    table.insert(report.choices, titles)
    -- the bash proposal: approve it; the agent's done: finish the task
    return { title = titles[1] }
  end,
  ['continual/taskDone'] = function(_, params)
    report.task_done = params.summary
  end,
  ['window/showDocument'] = function(_, params)
    table.insert(shown, vim.uri_to_fname(params.uri))
    return { success = true }
  end,
}

local function continual_diags(buf)
  local found = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    if d.source == 'continual' then
      table.insert(found, d)
    end
  end
  return found
end

local function actions_at(buf, line)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    range = { start = { line = line, character = 0 }, ['end'] = { line = line, character = 0 } },
    context = { diagnostics = {} },
  }
  local result = sync('textDocument/codeAction', params, buf) or {}
  local by_title = {}
  for _, a in ipairs(result) do
    by_title[a.title:match('^[^:…]+')] = a
  end
  return by_title
end

-- What vim.lsp.buf.code_action() does with a chosen action: edit first, then command.
local function run_action(action)
  if action.edit then
    vim.lsp.util.apply_workspace_edit(action.edit, client().offset_encoding)
  end
  if action.command then
    return sync('workspace/executeCommand', action.command)
  end
end

local function wait_for_proposal_on(buf)
  wait('a continual diagnostic', function()
    return #continual_diags(buf) > 0
  end)
  return continual_diags(buf)[1]
end

local function flow()
  client_id = vim.lsp.start_client({
    name = 'continual',
    cmd = cmd,
    root_dir = ws,
    handlers = handlers,
  })
  assert(client_id, 'the server did not start')
  local ops = open(ws .. '/src/calc/ops.py')
  wait('initialize', function()
    return client() and client().initialized
  end)

  local started = sync('continual/startTask', { text = 'fix mean() so test_mean passes' }, ops)
  table.insert(report.steps, 'started ' .. started.taskId)

  -- 1. approve through the code action (the command: the server applies the edit)
  local diag = wait_for_proposal_on(ops)
  local actions = actions_at(ops, diag.lnum)
  assert(actions['Approve'] and actions['Approve'].command, 'no Approve action')
  assert(not actions['Approve'].edit, 'the Approve action carries an edit: it would race didChange')
  assert(actions['Deny with correction'] and actions['Edit proposal'] and actions['Show diff'])
  local approved = run_action(actions['Approve'])
  report.approve_buffer = vim.api.nvim_buf_get_lines(ops, 6, 7, false)[1]
  table.insert(report.steps, 'approved, next ' .. tostring(approved.nextProposalId))

  -- 2. deny with a comment: continual.deny opens a correction file; :write sends it
  local tests = open(ws .. '/tests/test_ops.py')
  diag = wait_for_proposal_on(tests)
  actions = actions_at(tests, diag.lnum)
  local before = #shown
  run_action(actions['Deny with correction'])
  wait('the correction file', function()
    return #shown > before
  end)
  local correction = open(shown[#shown])
  vim.api.nvim_buf_set_lines(correction, -1, -1, false, { 'Never weaken a test; fix the code instead.' })
  vim.cmd('write')
  table.insert(report.steps, 'denied with a correction file')

  -- 3. edit: continual.edit opens the proposed content; change it and :write
  vim.cmd('buffer ' .. ops)
  wait('the next proposal on ops.py', function()
    return #continual_diags(ops) > 0
  end)
  diag = continual_diags(ops)[1]
  actions = actions_at(ops, diag.lnum)
  before = #shown
  run_action(actions['Edit proposal'])
  wait('the edit file', function()
    return #shown > before
  end)
  local edit = open(shown[#shown])
  local lines = vim.api.nvim_buf_get_lines(edit, 0, -1, false)
  for i, line in ipairs(lines) do
    lines[i] = line:gsub('Sum of a and b%.', 'Return a + b.')
  end
  vim.api.nvim_buf_set_lines(edit, 0, -1, false, lines)
  vim.cmd('write')
  table.insert(report.steps, 'edited')

  -- 4. the bash proposal arrives through window/showMessageRequest (approved above)
  wait('the bash proposal', function()
    return #report.requests > 0
  end)
  wait('the ops.py buffer to show the edit', function()
    return vim.api.nvim_buf_get_lines(ops, 0, 2, false)[2] == '    """Return a + b."""'
  end)
  report.ops_buffer = vim.api.nvim_buf_get_lines(ops, 0, -1, false)
  report.tests_buffer = vim.api.nvim_buf_get_lines(tests, 0, -1, false)
  -- 5. the agent says it is done (showMessageRequest, Finish task): the task ends
  wait('continual/taskDone', function()
    return report.task_done ~= nil
  end)
  table.insert(report.steps, 'finished')
  client().stop()
  vim.wait(5000, function()
    return client() == nil or client().is_stopped()
  end)
end

local ok, err = pcall(flow)
finish(ok, err and tostring(err) or nil)
