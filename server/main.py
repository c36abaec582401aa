"""`continual-lsp serve`: stdio (default) or TCP.

stdio: fd 1 belongs to the protocol. At startup the real stdout is duplicated for the
protocol and fd 1 (and `sys.stdout`) is pointed at stderr, so a stray print, a library
warning or a child process cannot corrupt the framing.

TCP (`--tcp [HOST:]PORT`, loopback by default): one process serves connection after
connection, each with a fresh pygls server. A token is required: the first request must
be `initialize` with `initializationOptions.token`; anything else is answered with an
error and the connection is closed. Tokens map to users, and a user's connection reads
and writes only that user's store and adapters.

Tokens come from, in order: the `token` argument (a token, or the path of a file),
the `token_file` argument (`--token-file`), `$CONTINUAL_LSP_TOKEN`,
`$CONTINUAL_LSP_TOKENS_FILE`. A file holds one token or a JSON object `{token: user}`;
a bare token belongs to the configured `settings.user`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import stat
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from pygls.exceptions import JsonRpcException
from pygls.io_ import StdinAsyncReader

from continual_lsp.config import Settings, default_store_path

from .agents import AgentFactory, AgentPool, default_agent_factory
from .app import ContinualServer, build_server
from .delivery import deliver
from .malloc_tuning import tune_allocators
from .session import Session
from .transport import AsyncReader, serve_connection

log = logging.getLogger("continual_lsp.server")

_USER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
AGENT_THREADS = 8  # enough that status/ledger never queue behind a training wait
# Open connections one peer address may hold (authenticated or not): a loop opening
# sockets meets this before it meets the file-descriptor limit.
MAX_CONNECTIONS_PER_ADDRESS = 16


class ServeError(Exception):
    """The server cannot start; the message says why."""


def _configure_logging() -> None:
    level = os.environ.get("CONTINUAL_LSP_LOG", "WARNING").upper()
    logging.basicConfig(
        stream=sys.stderr, level=level, format="continual-lsp %(levelname)s %(name)s: %(message)s"
    )
    # pygls logs every message body at INFO; keep stderr readable unless asked.
    if level != "DEBUG":
        logging.getLogger("pygls").setLevel(logging.WARNING)
    # Bad params are answered with InvalidParams by our loop; pygls' own traceback of
    # the same failure would only bury real errors.
    logging.getLogger("pygls.protocol.json_rpc").addFilter(_expected_errors)


def _expected_errors(record: logging.LogRecord) -> bool:
    """Drop pygls' tracebacks for errors that are answered to the client as they should
    be (bad params, unknown proposal): they are not server faults."""
    if str(record.msg).startswith("Unable to deserialize message"):
        return False
    exc = record.exc_info[1] if record.exc_info else None
    return not (isinstance(exc, JsonRpcException) and exc.code in (-32602, -32803, -32601))


def protect_stdout() -> BinaryIO:
    """Keep fd 1 for the protocol only; return a binary stream on the real stdout."""
    sys.stdout.flush()
    proto = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto, "wb", buffering=0)


def tokens_path(token: str | None, token_file: str | None = None) -> Path | None:
    """The file tokens are read from (see module doc), or None when they come inline."""
    source = token or token_file or os.environ.get("CONTINUAL_LSP_TOKEN")
    if source and Path(source).is_file():
        return Path(source)
    if not source and os.environ.get("CONTINUAL_LSP_TOKENS_FILE"):
        return Path(os.environ["CONTINUAL_LSP_TOKENS_FILE"])
    return None


def load_tokens(
    token: str | None, settings: Settings, token_file: str | None = None
) -> dict[str, str]:
    """{token: user} from the arguments, else the environment (see module doc)."""
    if token_file is not None and not Path(token_file).is_file():
        # The value is not echoed: it may be a token typed where a file was expected.
        raise ServeError(
            "the tokens file given to --token-file does not exist (a token itself is not "
            "accepted on the command line, where every local user can read it: put it in "
            "a file or in $CONTINUAL_LSP_TOKEN)"
        )
    source = token or token_file or os.environ.get("CONTINUAL_LSP_TOKEN")
    from_file = tokens_path(token, token_file)
    if from_file is not None:
        try:
            text = from_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ServeError(f"cannot read the tokens file {from_file}: {exc}") from exc
        if text.startswith("{"):
            try:
                mapping = json.loads(text)
            except ValueError as exc:
                raise ServeError(f"{from_file} is not valid JSON: {exc}") from exc
            if not isinstance(mapping, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
            ):
                raise ServeError(f"{from_file} must map token strings to user names")
            tokens = dict(mapping)
        else:
            tokens = {text: settings.user}
    elif source:
        tokens = {source: settings.user}
    else:
        raise ServeError(
            "TCP needs a token: give a tokens file (--token-file), "
            "or set CONTINUAL_LSP_TOKEN or CONTINUAL_LSP_TOKENS_FILE"
        )
    for tok, user in tokens.items():
        if len(tok) < 8:
            raise ServeError("tokens must be at least 8 characters long")
        if not _USER.match(user):
            raise ServeError(f"user name {user!r} may use letters, digits, _ . @ - only")
    return tokens


def shared_server_settings(base: Settings, tokens_file: Path | None) -> Settings:
    """`base` for a server many users share: their bash sandboxes hide what no user's
    command may see, derived from this server's own configuration: the tokens file,
    the directory of every user's store and adapters, and every workspace root (each
    user's own workspace is bound back on top).

    Training is shared unless the configuration says otherwise: one team worker (one
    model, jobs in turn) instead of a worker process and a model per user, which on
    a small machine is the difference between one model and 20 (issue 20).

    Sampling stays float32 unless the configuration says otherwise: measured on a
    20-user server (bench/team.py), bf16 held 905 MB against the issue's bound of one
    model + adapters + 500 MB (897 MB at bf16's model size; float32: 1120 of 1154), and
    the proof that each user got their own adapter re-scores proposals to 1e-3 a token,
    which bf16 arithmetic does not reproduce between decode and re-score (Δ up to 0.17
    under the user's own adapter)."""
    store = base.store_file()
    hidden = [*base.sandbox_hidden_paths, str(store.parent), *base.workspace_roots]
    if base.adapters_dir:
        hidden.append(base.adapters_dir)
    if tokens_file is not None:
        hidden.append(str(tokens_file))
    update: dict[str, Any] = {"sandbox_hidden_paths": hidden}
    for name, value in (("shared_training", True), ("sample_dtype", "float32")):
        if name not in base.model_fields_set:
            update[name] = value
    return base.model_copy(update=update)


def user_settings(base: Settings, user: str) -> Settings:
    """The same settings with the store, adapters and workspace roots of `user` (TCP, one
    user per token): under each configured root, only the folder named after the user,
    so a token never opens the roots folder itself or another user's folder (issue 32)."""
    if base.store_path:
        store = Path(base.store_path)
        store_path = store.parent / "users" / user / store.name
    else:
        store_path = default_store_path(user)
    adapters = str(Path(base.adapters_dir) / user) if base.adapters_dir else None
    roots = [str(Path(root).expanduser() / user) for root in base.workspace_roots]
    return base.model_copy(
        update={
            "user": user,
            "store_path": str(store_path),
            "adapters_dir": adapters,
            "workspace_roots": roots,
        }
    )


def parse_address(tcp: str) -> tuple[str, int]:
    host, _, port = tcp.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError as exc:
        raise ServeError(f"--tcp expects [HOST:]PORT, got {tcp!r}") from exc
    if not 0 <= number <= 65535:
        raise ServeError(f"port {number} is out of range")
    return host, number


class Server:
    """What outlives connections: the thread pool, the agents."""

    def __init__(self, settings: Settings, agent_factory: AgentFactory | None = None) -> None:
        self.settings = settings
        self.executor = ThreadPoolExecutor(AGENT_THREADS, thread_name_prefix="agent")
        self.pool = AgentPool(
            agent_factory or default_agent_factory, self.executor, max_users=settings.max_users
        )
        if agent_factory is None:  # the real agents: their model loads while none is here
            self.pool.preload(settings)

    def make_server(self, settings: Settings, default_workspace: Path | None) -> ContinualServer:
        ls = build_server()
        ls.session = Session(
            ls, settings, self.pool, self.executor, deliver, default_workspace=default_workspace
        )
        return ls

    def close(self) -> None:
        self.pool.close_all()
        self.executor.shutdown(wait=False, cancel_futures=True)


async def _stdin_reader(stdin: BinaryIO) -> AsyncReader:
    """stdin read on the event loop itself where it is a pipe, socket or terminal.

    pygls' reader hands every line and body to a thread and back: three or four GIL
    hand-offs a message, each waiting behind the sampler's thread while a turn runs
    (measured with bench/lsp_latency.py on 2 busy cores: p99 ~140 ms while sampling,
    against ~15 ms while training in the worker process). Only a pipe or a socket (what
    an editor gives): the loop makes the descriptor non-blocking, which a terminal shares
    with the shell that started the server; a terminal or a regular file keeps the thread."""
    mode = os.fstat(stdin.fileno()).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, OSError):
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
            return reader
    return StdinAsyncReader(stdin, ThreadPoolExecutor(1, thread_name_prefix="stdin"))


async def _serve_stdio(server: Server, stdin: BinaryIO, stdout: BinaryIO) -> int:
    reader = await _stdin_reader(stdin)

    def write(data: bytes) -> None:
        stdout.write(data)
        stdout.flush()

    def make(_: str | None) -> ContinualServer:
        ls = server.make_server(server.settings, Path.cwd())
        ls.protocol.set_writer(_Writer(write))
        return ls

    ls = await serve_connection(reader, write, make)
    if ls is None:
        return 1
    ls.session.close()
    return 0 if ls.protocol._shutdown else 1


class _Writer:
    def __init__(self, write: object) -> None:
        self.write = write

    def close(self) -> None:
        pass


async def _serve_tcp(server: Server, host: str, port: int, tokens: dict[str, str]) -> None:
    settings_by_user: dict[str, Settings] = {}
    open_by_address: collections.Counter[str] = collections.Counter()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if open_by_address[address] >= MAX_CONNECTIONS_PER_ADDRESS:
            log.warning(
                "refused a connection from %s: %d already open",
                address,
                MAX_CONNECTIONS_PER_ADDRESS,
            )
            writer.close()
            return
        open_by_address[address] += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # An editor may sit idle for hours; keepalive still ends a connection
            # whose peer vanished (laptop closed) instead of keeping its session.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

        def write(data: bytes) -> None:
            if not writer.is_closing():
                writer.write(data)

        def make(user: str | None) -> ContinualServer:
            assert user is not None
            settings = settings_by_user.setdefault(user, user_settings(server.settings, user))
            ls = server.make_server(settings, None)
            ls.protocol.set_writer(_Writer(write))
            log.info("connection from %s as %s", peer, user)
            return ls

        ls = None
        try:
            ls = await serve_connection(reader, write, make, tokens=tokens)
        except Exception:
            log.exception("connection from %s failed", peer)
        finally:
            open_by_address[address] -= 1
            if ls is not None:
                ls.session.close()
            with contextlib.suppress(Exception):
                await writer.drain()
                writer.close()
                await writer.wait_closed()

    tcp = await asyncio.start_server(connection, host, port)
    addresses = ", ".join(f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in tcp.sockets)
    # Tests and wrappers read the bound port from this line (port 0 picks a free one).
    print(f"continual-lsp: listening on {addresses}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with tcp:
        await stop.wait()


def serve(
    settings: Settings,
    tcp: str | None = None,
    token: str | None = None,
    *,
    token_file: str | None = None,
    agent_factory: AgentFactory | None = None,
) -> int:
    """Run the language server until the client exits (stdio) or a signal (TCP).

    `token` is a token or the path of a tokens file; `token_file` names a file only.

    Ends the process with `os._exit`: the stdin reader thread cannot be interrupted, and
    training workers must not outlive the server. Returns an exit code only when the
    server could not start (2).
    """
    _configure_logging()
    try:
        if tcp is not None:
            host, port = parse_address(tcp)
            tokens = load_tokens(token, settings, token_file)
            settings = shared_server_settings(settings, tokens_path(token, token_file))
            with contextlib.suppress(ValueError):
                if not ipaddress.ip_address(host).is_loopback:
                    log.warning("listening on %s: reachable beyond this machine", host)
            if not settings.workspace_roots:
                log.warning(
                    "no workspace_roots: a client with a token may open any directory this "
                    "process can write to (set CONTINUAL_LSP_WORKSPACE_ROOTS)"
                )
    except ServeError as exc:
        print(f"continual-lsp serve: {exc}", file=sys.stderr)
        return 2
    # The model samples in a thread of this process; a shorter GIL switch interval (5 ms
    # by default) lets the event loop answer between the sampler's Python steps.
    sys.setswitchinterval(0.001)
    tune_allocators()  # before the agent threads exist and torch loads (allocator.py)
    server = Server(settings, agent_factory)
    code = 0
    try:
        if tcp is None:
            stdout = protect_stdout()
            code = asyncio.run(_serve_stdio(server, sys.stdin.buffer, stdout))
        else:
            asyncio.run(_serve_tcp(server, host, port, tokens))
    except OSError as exc:
        print(f"continual-lsp serve: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    finally:
        with contextlib.suppress(Exception):
            server.close()
        sys.stderr.flush()
    os._exit(code)
