-- Headless check through the shipped module: the only call the agent proposes is blocked by
-- a guard. The reviewer sees it with the guard's reason (never a silent task end, never a
-- plain Approve): :ContinualApprove is refused naming override, the server's code actions
-- offer "Override guard", and :ContinualOverride runs it; the ledger counts the override.
-- Env: CONTINUAL_WS, CONTINUAL_CMD, CONTINUAL_OUT, CONTINUAL_MODULE.
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
  local client
  wait('the client', function()
    client = vim.lsp.get_client_by_id(state.client_id)
    return client and client.initialized
  end)
  vim.cmd('ContinualStart Fix mean() in src/calc/ops.py')
  wait('a proposal or the end of the task', function()
    return state.last ~= nil or said('task done')
  end)
  local p = state.last and state.proposals[state.last] or {}
  report.tool, report.arguments, report.note, report.blocked_by = p.tool, p.arguments, p.note, p.blockedBy
  -- The server's code actions on the changed line: Override guard, not Approve.
  local actions = client.request_sync('textDocument/codeAction', {
    textDocument = { uri = vim.uri_from_fname(ws .. '/src/calc/ops.py') },
    range = { start = { line = 6, character = 0 }, ['end'] = { line = 6, character = 0 } },
    context = { diagnostics = {} },
  }, 20000)
  report.actions = {}
  for _, a in ipairs(actions and actions.result or {}) do
    table.insert(report.actions, a.title)
  end
  vim.cmd('ContinualApprove')
  wait('the refusal', function()
    return said(':ContinualOverride runs it anyway')
  end)
  report.refused_disk = read(ws .. '/src/calc/ops.py')
  vim.cmd('ContinualOverride')
  wait('the override', function()
    return said('overrode the guard')
  end)
  report.disk = read(ws .. '/src/calc/ops.py')
  local ledger = client.request_sync('continual/ledger', vim.empty_dict(), 20000)
  report.ledger = {}
  for _, item in ipairs(ledger and ledger.result and ledger.result.items or {}) do
    table.insert(report.ledger, { item.id, item.lane, item.overridden or vim.NIL })
  end
  report.task_done = said('task done')
  vim.lsp.stop_client(state.client_id)
end

local ok, err = pcall(flow)
finish(ok, err and tostring(err) or nil)
