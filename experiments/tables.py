"""The results folder's tables: the flow columns every workload fills, CSV writing, the sampler's
CSV read back, percentiles. Pure file code (no root); every results module imports it, it imports none.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

#: The columns of flows.csv (TCP and UDP flows, and one row per RoCE flow). ``path``: the switches
#: a TCP or UDP flow crossed (``h2>l2>s1>l1>h1``; experiments.workloads.flows.trace_paths).
#: ``start_s``: when the flow started, seconds after the common start ``start_at_unix_s`` (0 unless
#: its plan has arrival times); ``first_byte_s``, ``fct_s`` and ``sender_done_s`` count from it.
#: ``ideal_fct_s``: the flow alone on the empty fabric, ``slowdown``: ``fct_s / ideal_fct_s``
#: (experiments.slowdown; TCP flows of sized plans, ``slowdown`` only when complete).
FLOW_COLUMNS = ("flow_id", "src", "dst", "src_ip", "src_port", "bytes_planned", "bytes_sent",
                "bytes_received", "start_at_unix_s", "start_s", "first_byte_s", "fct_s", "ideal_fct_s", "slowdown",
                "sender_done_s",
                "congestion_control", "ecn_negotiated", "total_retrans", "rtt_us",
                "ce_received", "ect_received", "not_ect_received", "transport", "datagrams_sent",
                "datagrams_received", "datagrams_lost", "blocked_sends", "host_queue_full", "complete", "error",
                "path")


#: The columns every table of a round's folder starts with: the round's name, its variant (the
#: scenario's ``variant`` key: a study's variant, or the round's name) and its seed.
LABEL_COLUMNS = ("round", "variant", "seed")


def percentile(values, q: float) -> float | None:
    """The ``q``-th percentile (0-100, numpy's linear interpolation) of ``values``; None when empty."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def load_queue_samples(path: Path, t0_unix_s: float) -> dict[str, dict[str, np.ndarray]]:
    """Read a sampler CSV into ``{intf: {column: array}}`` with ``t_s`` relative to ``t0_unix_s``
    (seconds; ``t_unix_s`` in a raw file, already relative ``t_s`` in queues.csv), each port's rows
    in file order. The arrays are read-only: a round reads the same file four or five times (its
    tables, its figures, its plots), and the last few reads are kept, keyed by the file's path,
    size and modification time, and by ``t0_unix_s``.

    Raises:
        OSError: the file cannot be read; ValueError: a cell that should be a number is not.
    """
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, t0_unix_s)
    if key in _SAMPLES_CACHE:
        return dict(_SAMPLES_CACHE[key])
    with open(path, newline="") as f:
        header = next(csv.reader([f.readline()]))
        empty = not f.readline().strip()
    relative = "t_unix_s" not in header
    ti = header.index("t_s") if relative else header.index("t_unix_s")
    cols = [c for c in header if c not in ("t_unix_s", "t_s", "intf") + LABEL_COLUMNS]
    out: dict[str, dict[str, np.ndarray]] = {}
    if not empty:           # numpy's own parser: about half the time of csv.reader and float()
        numbers = np.loadtxt(path, delimiter=",", skiprows=1, usecols=[ti] + [header.index(c) for c in cols],
                             dtype=float, ndmin=2)
        intf = np.loadtxt(path, delimiter=",", skiprows=1, usecols=[header.index("intf")], dtype=str, ndmin=1)
        t = numbers[:, 0] if relative else numbers[:, 0] - t0_unix_s
        names, first, inverse = np.unique(intf, return_index=True, return_inverse=True)
        for k in np.argsort(first, kind="stable"):       # ports in the order the file first names them
            rows = np.flatnonzero(inverse == k)
            d = {"t_s": t[rows]}
            d.update((c, numbers[rows, j + 1]) for j, c in enumerate(cols))
            for a in d.values():
                a.flags.writeable = False
            out[str(names[k])] = d
    _SAMPLES_CACHE[key] = out
    while len(_SAMPLES_CACHE) > _SAMPLES_KEPT:
        _SAMPLES_CACHE.pop(next(iter(_SAMPLES_CACHE)))
    return dict(out)


#: How many sampler files :func:`load_queue_samples` keeps read (a round's raw file and its queues.csv).
_SAMPLES_KEPT = 4
_SAMPLES_CACHE: dict[tuple, dict[str, dict[str, np.ndarray]]] = {}


def write_csv(path: Path, columns, rows) -> None:
    """Write ``rows`` (dicts) to ``path`` with a header of ``columns``; keys outside them are left out."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def label_csvs(folder: Path, labels: dict) -> list[Path]:
    """Put ``labels`` (:data:`LABEL_COLUMNS` -> value) first in every row of every ``*.csv`` in
    ``folder`` (not its sub-folders; not a recorder's raw ``*_raw.csv``), replacing a column of the same name, so that a round's
    tables concatenate across rounds, variants and seeds. Each file is rewritten through a
    temporary file and renamed into place. Returns the files labelled.

    Raises:
        OSError: a file cannot be read or written.
    """
    names = list(labels)
    done = []
    for path in sorted(Path(folder).glob("*.csv")):
        if path.name.endswith("_raw.csv"):
            continue
        tmp = path.with_name(f".{path.name}.labelling")
        with open(path, newline="") as src, open(tmp, "w", newline="") as dst:
            r, w = csv.reader(src), csv.writer(dst)
            header = next(r, None)
            if header is None:
                os.unlink(tmp)
                continue
            keep = [i for i, c in enumerate(header) if c not in labels]
            w.writerow(names + [header[i] for i in keep])
            values = [labels[k] for k in names]
            for row in r:
                w.writerow(values + [row[i] for i in keep if i < len(row)])
        os.replace(tmp, path)
        done.append(path)
    return done
