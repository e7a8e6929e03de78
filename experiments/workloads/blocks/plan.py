"""An incast in barrier-synchronised blocks: the agents' roles and their JSON jobs (pure; the
agents are traffic.blocks)."""
from __future__ import annotations

from pathlib import Path


#: The agents' role names in a round's agents/ folder: ``<host>.srv.json``, ``<host>.cli.json``.
SERVER_ROLE, CLIENT_ROLE = "srv", "cli"


def server_job(port: int, deadline_unix_s: float, out: Path, dscp: int) -> dict:
    """A ``blocks-server`` job (traffic.blocks): one client connection on ``port``, ending at
    ``deadline_unix_s`` at the latest, its record written to ``out``."""
    return {"role": "blocks-server", "port": port, "expect_connections": 1, "deadline_unix_s": deadline_unix_s,
            "dscp": dscp, "out": str(out)}


def client_job(servers: list[dict], traffic, deadline_unix_s: float, out: Path) -> dict:
    """A ``blocks-client`` job (traffic.blocks) for a round's resolved ``traffic`` section
    (experiments.model.Round.traffic: ``block_bytes``, ``blocks``, ``duration_s``, ``dscp``).

    Args:
        servers: ``[{"host", "ip", "port"}, ...]``, one per sender.
        deadline_unix_s: the client stops there, a block in flight or not.
    """
    return {"role": "blocks-client", "servers": servers, "block_bytes": traffic.block_bytes,
            "blocks": traffic.blocks, "duration_s": traffic.duration_s, "deadline_unix_s": deadline_unix_s,
            "dscp": traffic.dscp, "out": str(out)}
