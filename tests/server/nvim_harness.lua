-- Shared by the headless Neovim scripts that drive the shipped module: the environment
-- (CONTINUAL_WS, CONTINUAL_OUT, CONTINUAL_CMD, CONTINUAL_MODULE), waits, and the JSON
-- report written at the end (`:cquit 1` on failure).
local H = {
  ws = os.getenv('CONTINUAL_WS'),
  report = { steps = {} },
}

function H.wait(what, cond, ms)
  if not vim.wait(ms or 60000, cond, 50) then
    error('timed out waiting for ' .. what)
  end
end

function H.read(path)
  local f = io.open(path)
  if not f then
    return nil
  end
  local text = f:read('*a')
  f:close()
  return text
end

-- Open `file`, start the module's client, wait until it is initialized; the module.
function H.start(file)
  vim.cmd('edit ' .. H.ws .. '/' .. file)
  local continual = dofile(os.getenv('CONTINUAL_MODULE'))
  continual.setup({ cmd = vim.fn.json_decode(os.getenv('CONTINUAL_CMD')), root = H.ws })
  H.wait('the client', function()
    local c = vim.lsp.get_client_by_id(continual.state.client_id)
    return c and c.initialized
  end, 240000) -- the server loads the model first: slow on a busy machine
  return continual
end

-- Run `flow`, write the report, quit (1 on failure).
function H.run(flow)
  local ok, err = pcall(flow)
  H.report.ok, H.report.error = ok, err and tostring(err) or nil
  local f = io.open(os.getenv('CONTINUAL_OUT'), 'w')
  f:write(vim.fn.json_encode(H.report))
  f:close()
  vim.cmd(ok and 'qa!' or 'cquit 1')
end

return H
