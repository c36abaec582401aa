-- continual.lua: Neovim client for continual-lsp. Works on Neovim 0.7 and later with the
-- built-in LSP client; no plugin manager needed:
--
--   vim.opt.runtimepath:append('/path/to/continual-lsp/server/nvim')   -- or dofile()
--   require('continual').setup({ cmd = { 'continual-lsp', 'serve' } })
--
-- Commands: :ContinualStart {task}, :ContinualApprove, :ContinualDeny, :ContinualEdit,
-- :ContinualDiff (these four take an optional proposal id; the default is the latest
-- proposal), :ContinualPending (show what waits, e.g. after a reconnect),
-- :ContinualAllow [id] ("always allow calls like this one", then approve it),
-- :ContinualUndo [reason] (put back the last applied change; the agent learns from it),
-- :ContinualLedger, :ContinualStatus. A change of several hunks shows a diagnostic per
-- hunk with code actions "Accept hunk n" / "Reject hunk n…" (a reason is asked for).
-- A proposal a guard blocks is never approved: :ContinualOverride [id] runs it anyway (the
-- override counts against the guard; its code action is "Override guard").
-- :ContinualPromote {itemId} keeps a task-scoped correction (ledger) as a standing rule.
local M = {}

M.config = {
  cmd = { 'continual-lsp', 'serve' },
  root_markers = { '.git', 'pyproject.toml', 'package.json', 'AGENTS.md' },
  init_options = {},
}

M.state = { client_id = nil, root = nil, proposals = {}, last = nil }

local function notify(msg, level)
  vim.schedule(function()
    vim.notify('continual: ' .. msg, level or vim.log.levels.INFO)
  end)
end

local function find_root(path)
  local dir = vim.fn.fnamemodify(path ~= '' and path or vim.fn.getcwd(), ':p:h')
  while dir and dir ~= '' do
    for _, marker in ipairs(M.config.root_markers) do
      if vim.loop.fs_stat(dir .. '/' .. marker) then
        return dir
      end
    end
    local parent = vim.fn.fnamemodify(dir, ':h')
    if parent == dir then
      break
    end
    dir = parent
  end
  return vim.fn.getcwd()
end

local function client()
  return M.state.client_id and vim.lsp.get_client_by_id(M.state.client_id) or nil
end

-- 0.11 made client methods colon calls; 0.7-0.10 only have the dot form.
local function request(method, params, on_result)
  local c = client()
  if not c then
    notify('the server is not running (:ContinualStart or setup())', vim.log.levels.ERROR)
    return
  end
  local function handler(err, result)
    if err then
      notify(method .. ': ' .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    elseif on_result then
      on_result(result)
    end
  end
  if vim.fn.has('nvim-0.11') == 1 then
    c:request(method, params, handler, 0)
  else
    c.request(method, params, handler, 0)
  end
end

local function command(name, args, on_result)
  request('workspace/executeCommand', { command = name, arguments = args }, on_result)
end

-- Code actions "Accept hunk n" / "Reject hunk n…" run here, not on the server, so a
-- rejection can carry a reason: vim.ui.input asks for it, then the server collects the
-- verdicts and decides once every hunk has one.
vim.lsp.commands['continual.hunk'] = function(cmd)
  local args = cmd.arguments or {}
  local function send(reason)
    command('continual.hunk', { args[1], args[2], args[3], reason }, function(r)
      if r and r.pending then
        notify(string.format('hunk %d noted; %d hunk(s) left', args[2] + 1, #r.pending))
      elseif r then
        notify('decided ' .. args[1] .. ' hunk by hunk')
        M.receive(r.nextProposal)
      end
    end)
  end
  if args[3] then
    send(nil)
  else
    vim.ui.input({ prompt = string.format('Why reject hunk %d? ', args[2] + 1) }, function(text)
      if text ~= nil then -- nil: cancelled
        send(text ~= '' and text or nil)
      end
    end)
  end
end

local function describe(p)
  local args = p.arguments or {}
  return string.format('%s %s', p.tool, args.path or args.cmd or args.pat or '')
end

-- A proposal comes in a response (startTask, decide, pending) and as a notification:
-- shown once, whichever is processed first.
local function receive(p)
  if type(p) ~= 'table' or not p.proposalId or M.state.proposals[p.proposalId] then
    return
  end
  M.state.proposals[p.proposalId] = p
  M.state.last = p.proposalId
  if p.tool == 'done' then
    -- The model says the task is finished, in its own words: no diff, the summary is it.
    notify(string.format('the agent says the task is done [%s]: %s  :ContinualApprove finishes the task / :ContinualDeny says what is left',
      p.proposalId, (p.arguments or {}).summary or ''))
    return
  end
  if p.blockedBy then
    notify(string.format('proposed %s [%s] is blocked by a guard: %s  :ContinualOverride / :ContinualEdit / :ContinualDeny',
      describe(p), p.proposalId, p.blockedBy), vim.log.levels.WARN)
    return
  end
  if p.checked then
    -- what the change was verified for: it parses, the failing test passes, or not
    p.note = p.note and (p.note .. '; ' .. p.checked) or p.checked
  end
  -- The note says why this call (a guard's rewrite, or no compliant retry: edit it).
  notify(string.format('proposed %s [%s]%s  :ContinualApprove / :ContinualDeny / :ContinualEdit / :ContinualDiff',
    describe(p), p.proposalId, p.note and ('  ' .. p.note) or ''))
end

M.receive = receive

local handlers = {
  ['continual/proposal'] = function(_, p)
    receive(p)
  end,
  ['continual/learned'] = function(_, n)
    notify(string.format('learned: step %d, loss %.4f, %.1fs', n.step, n.loss, n.seconds))
  end,
  ['continual/routed'] = function(_, n)
    notify(string.format('correction routed to %s: %s', n.lane, n.reason))
  end,
  ['continual/taskDone'] = function(_, n)
    M.state.last = nil
    notify('task done: ' .. (n.summary or ''))
  end,
}

-- Neovim 0.7 has no window/showDocument handler: open the file, which attaches it to
-- the client (BufEnter below), so saving a correction or edit file reaches the server.
local function show_document(_, params)
  local fname = vim.uri_to_fname(params.uri)
  vim.schedule(function()
    -- a split, not :edit, when the current buffer has unsaved changes (E37)
    local open = vim.bo.modified and 'split ' or 'edit '
    vim.cmd(open .. vim.fn.fnameescape(fname))
    if params.selection then
      local pos = params.selection.start
      pcall(vim.api.nvim_win_set_cursor, 0, { pos.line + 1, pos.character })
    end
  end)
  return { success = true }
end

local function client_config(root)
  local init_options = vim.tbl_extend('force', { continualProposals = true }, M.config.init_options)
  local all = vim.tbl_extend('force', {}, handlers)
  if not vim.lsp.handlers['window/showDocument'] then
    all['window/showDocument'] = show_document
  end
  return {
    name = 'continual',
    cmd = M.config.cmd,
    root_dir = root,
    workspace_folders = { { uri = vim.uri_from_fname(root), name = root } },
    init_options = init_options,
    handlers = all,
  }
end

local function attach(bufnr)
  if vim.bo[bufnr].buftype ~= '' or vim.api.nvim_buf_get_name(bufnr) == '' then
    return
  end
  if vim.lsp.start then -- 0.8+: reuses the running client with the same name and root
    M.state.client_id = vim.lsp.start(client_config(M.state.root), { bufnr = bufnr })
  else
    if not M.state.client_id then
      M.state.client_id = vim.lsp.start_client(client_config(M.state.root))
    end
    if M.state.client_id then
      vim.lsp.buf_attach_client(bufnr, M.state.client_id)
    end
  end
end

-- The current buffer's file, when it is under the root: the task starts with it in view
-- (read into the conversation first), so a small model edits it instead of hunting.
local function files_in_view()
  local name = vim.api.nvim_buf_get_name(0)
  local root = M.state.root and vim.fn.fnamemodify(M.state.root, ':p'):gsub('/$', '')
  if name == '' or not root or vim.fn.filereadable(name) == 0 then
    return nil
  end
  name = vim.fn.fnamemodify(name, ':p')
  if name:sub(1, #root + 1) ~= root .. '/' then
    return nil
  end
  return { name }
end

local function target(opts)
  local id = opts.args ~= '' and opts.args or M.state.last
  if not id then
    notify('no pending proposal', vim.log.levels.WARN)
  end
  return id
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', M.config, opts or {})
  M.state.root = M.config.root or find_root(vim.api.nvim_buf_get_name(0))
  local group = vim.api.nvim_create_augroup('continual', { clear = true })
  vim.api.nvim_create_autocmd({ 'BufEnter', 'BufNewFile' }, {
    group = group,
    callback = function(ev)
      attach(ev.buf)
    end,
  })
  attach(vim.api.nvim_get_current_buf())
  if not M.state.client_id then -- started from an empty buffer: start anyway
    if vim.fn.has('nvim-0.11') == 1 then -- start_client is deprecated there
      M.state.client_id = vim.lsp.start(client_config(M.state.root), { attach = false })
    else
      M.state.client_id = vim.lsp.start_client(client_config(M.state.root))
    end
  end

  local cmd = vim.api.nvim_create_user_command
  cmd('ContinualStart', function(o)
    request('continual/startTask', { text = o.args, files = files_in_view() }, function(r)
      notify('task ' .. r.taskId .. ' started')
      receive(r.proposal)
    end)
  end, { nargs = '+' })
  cmd('ContinualApprove', function(o)
    local id = target(o)
    local blocked = id and M.state.proposals[id] and M.state.proposals[id].blockedBy
    if blocked then
      notify(string.format('a guard blocks %s (%s); :ContinualOverride runs it anyway', id, blocked),
        vim.log.levels.WARN)
    elseif id then
      command('continual.approve', { id }, function(r)
        notify('approved ' .. id .. (r and r.nextProposalId and (', next ' .. r.nextProposalId) or ''))
        receive(r and r.nextProposal)
      end)
    end
  end, { nargs = '?' })
  cmd('ContinualOverride', function(o)
    local id = target(o)
    if id then
      command('continual.override', { id }, function(r)
        notify('overrode the guard: ran ' .. id .. (r and r.nextProposalId and (', next ' .. r.nextProposalId) or ''))
        receive(r and r.nextProposal)
      end)
    end
  end, { nargs = '?' })
  cmd('ContinualPromote', function(o)
    request('continual/promote', { itemId = o.args }, function(r)
      notify(string.format('promoted to %s (%s): %s', r.lane, r.itemId, r.reason))
    end)
  end, { nargs = 1 })
  cmd('ContinualDeny', function(o)
    local id = target(o)
    if not id then
      return
    end
    vim.ui.input({ prompt = 'Correction: ' }, function(text)
      if text and text ~= '' then
        command('continual.deny', { id, text }, function(r)
          notify('denied ' .. id)
          receive(r and r.nextProposal)
        end)
      else -- no text: the server opens a correction file; save it to send it
        command('continual.deny', { id })
      end
    end)
  end, { nargs = '?' })
  cmd('ContinualEdit', function(o)
    local id = target(o)
    if id then
      command('continual.edit', { id }) -- opens the proposed content; :w sends the edit
    end
  end, { nargs = '?' })
  cmd('ContinualDiff', function(o)
    local id = target(o)
    if id then
      command('continual.showDiff', { id })
    end
  end, { nargs = '?' })
  cmd('ContinualAllow', function(o)
    local id = target(o)
    if id then
      request('continual/allow', { proposalId = id }, function(r)
        notify('always allowed ' .. r.rule .. ' (' .. r.itemId .. '; revert it from the ledger)')
        command('continual.approve', { id }, function(a)
          receive(a and a.nextProposal)
        end)
      end)
    end
  end, { nargs = '?' })
  cmd('ContinualUndo', function(o)
    local params = o.args ~= '' and { reason = o.args } or vim.empty_dict() -- {} encodes as []
    request('continual/undo', params, function(r)
      notify(string.format('undid %s: restored %s', r.proposalId, table.concat(r.restored, ', ')))
      vim.schedule(function()
        vim.cmd('checktime') -- files the server restored that no buffer had open edits for
      end)
    end)
  end, { nargs = '?' })
  cmd('ContinualLedger', function()
    request('continual/ledger', vim.empty_dict(), function(r)
      local lines = { string.format('context tokens %d (notes-only %d)', r.contextTokens, r.notesOnlyTokens) }
      for _, item in ipairs(r.items or {}) do
        local evidence = string.format('fired %d, came back %d', item.fired or 0, item.recurredAfter or 0)
        if item.gate then
          evidence = evidence .. string.format(', held-out %.3f -> %.3f', item.gate.before, item.gate.after)
        end
        if item.approvals then
          evidence = evidence .. ', from approvals ' .. table.concat(item.approvals, ' ')
        end
        if item.overridden then
          evidence = evidence .. string.format(', overridden %d', item.overridden)
        end
        if item.taskScoped then
          evidence = evidence .. ', task-scoped (:ContinualPromote ' .. item.id .. ')'
        end
        table.insert(lines, string.format('%s %-8s %s%s  [%s]  (%s)', item.id, item.lane, item.text,
          item.active and '' or ' [reverted]', evidence, item.reason))
      end
      vim.schedule(function()
        vim.cmd('botright new')
        vim.bo.buftype, vim.bo.bufhidden = 'nofile', 'wipe'
        vim.api.nvim_buf_set_lines(0, 0, -1, false, lines)
        vim.bo.modifiable = false
      end)
    end)
  end, {})
  cmd('ContinualPending', function() -- resync after a reconnect or a lost message
    request('continual/pending', vim.empty_dict(), function(r)
      for _, p in ipairs(r.proposals or {}) do
        receive(p)
      end
      if #(r.proposals or {}) == 0 then
        notify('no proposal waits')
      end
    end)
  end, {})
  cmd('ContinualStatus', function()
    request('continual/status', vim.empty_dict(), function(r)
      notify(string.format('%s %s, starter %s, adapter %s, %d steps, queue %d, runs unasked: %s',
        r.backend, r.model, r.starter or 'off', r.adapterVersion or 'base', r.trainingSteps,
        r.queueDepth, r.autonomy or 'read_only'))
    end)
  end, {})
  return M
end

return M
