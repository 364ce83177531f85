"""PgBouncer in transaction pooling in front of ``DATABASE_DIRECT_URL``: its ini and auth file
written from that URL's credentials, then PgBouncer itself (this process becomes it).

The cluster shape (``scripts/cluster.py``) and ``deploy/`` run the same command; the application's
``DATABASE_URL`` then names PgBouncer with the same user, password and database, and
``DATABASE_POOLED=1`` (docs/deploy.md, "Connection pooling").

    DATABASE_DIRECT_URL=postgresql://user:pass@host:5432/db \\
        python -m scripts.pgbouncer --listen 0.0.0.0:6432 --pool-size 20 --dir /run/pgbouncer
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"  # Debian's (`make pgbouncer`)


def pgbouncer_config(
    *, listen: str, server_url: str, pool_size: int, auth_file: Path
) -> tuple[str, str]:
    """PgBouncer's ini and auth file for ``server_url``'s database, in transaction pooling.

    Clients log in with the server's user and password (SCRAM against the auth file); PgBouncer
    logs in to PostgreSQL with the same. ``pool_size`` server connections per user and database
    are shared by every client."""
    server = urlsplit(server_url)
    user = unquote(server.username or "postgres")
    password = unquote(server.password or "")
    database = unquote(server.path.lstrip("/")) or "postgres"
    host, _, port = listen.rpartition(":")
    target = f"host={server.hostname or '127.0.0.1'} port={server.port or 5432} dbname={database}"
    ini = f"""\
[databases]
{database} = {target}

[pgbouncer]
listen_addr = {host or "127.0.0.1"}
listen_port = {port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {auth_file}
pool_mode = transaction
default_pool_size = {pool_size}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 1000
; a client waits this long for a server connection, then gets an error (PostgreSQL down)
query_wait_timeout = 30
; PostgreSQL restarted: logins are tried again after a second, not fifteen
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
"""
    users = f'"{user}" "{password}"\n'
    return ini, users


def pooled_url(server_url: str, listen: str) -> str:
    """``server_url``'s user, password and database, at PgBouncer's ``listen`` address."""
    server = urlsplit(server_url)
    credentials = quote(unquote(server.username or "postgres"), safe="")
    if server.password:
        credentials += ":" + quote(unquote(server.password), safe="")
    return f"postgresql://{credentials}@{listen}{server.path or '/postgres'}"


def write_config(folder: Path, *, listen: str, server_url: str, pool_size: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    auth_file = folder / "userlist.txt"
    ini, users = pgbouncer_config(
        listen=listen, server_url=server_url, pool_size=pool_size, auth_file=auth_file
    )
    auth_file.write_text(users)
    auth_file.chmod(0o600)
    (folder / "pgbouncer.ini").write_text(ini)
    return folder / "pgbouncer.ini"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--listen", default="127.0.0.1:6432", help="HOST:PORT")
    parser.add_argument("--pool-size", type=int, default=20, help="server connections")
    parser.add_argument("--dir", type=Path, default=Path("var/pgbouncer"), help="its files")
    options = parser.parse_args(argv)
    server_url = os.environ.get("DATABASE_DIRECT_URL", "").strip()
    if not server_url:
        sys.exit("DATABASE_DIRECT_URL names the PostgreSQL server PgBouncer pools")
    ini = write_config(
        options.dir, listen=options.listen, server_url=server_url, pool_size=options.pool_size
    )
    os.execv(PGBOUNCER, [PGBOUNCER, str(ini)])


if __name__ == "__main__":
    main()
