"""What every self-contained HTML page of fabriclab shares (a study's report, a run's report):
the CSS, the Content-Security-Policy, escaping, PNGs embedded as ``data:`` URIs, and plot
captions that travel inside the PNG files themselves.

A plot's caption is declared by whoever draws it: a :class:`Caption` (a title and a "how to
read this" paragraph) passed to matplotlib's ``savefig`` as PNG text metadata
(:meth:`Caption.metadata`: the standard PNG keywords ``Title`` and ``Description``). A report
reads it back with :func:`read_caption` from the file alone, so the code that writes reports
names no plot, no workload and no feature, and a redrawn plot carries its new caption with it.

Imports nothing but the standard library (the study report's contract allows no more).
"""
from __future__ import annotations

import base64
import html
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The PNG text keywords a caption is stored under (standard keywords: image viewers show them).
TITLE_KEY, HOW_KEY = "Title", "Description"

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:1.5em auto;
max-width:1150px;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1.05em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.86em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
.ci{color:#555;font-size:.9em;white-space:nowrap}
figure{margin:1em 0 1.6em}figcaption{font-size:.85em;color:#555}img{max-width:100%;height:auto;border:1px solid #eee}
.read{color:#444;font-size:.92em;max-width:62em}.warn{color:#a00;font-weight:bold}.ok{color:#060;font-weight:bold}
.v-a{background:#e8f4e8}.v-b{background:#e8eef8}.v-none{color:#555}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:.9em}
dl.shape{display:grid;grid-template-columns:max-content auto;gap:.15em 1em}dl.shape dt{font-weight:bold}
dl.shape dd{margin:0}.muted{color:#666}
"""

#: No script, no load from anywhere: only inline styles and ``data:`` images.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@dataclass(frozen=True)
class Caption:
    """A plot's caption: ``title`` (a few words) and ``how`` ("how to read this": what the axes,
    lines and marks are and what to look for; a paragraph of plain text)."""
    title: str
    how: str

    def metadata(self) -> dict:
        """The caption as matplotlib ``savefig(..., metadata=...)`` PNG text entries."""
        return {TITLE_KEY: self.title, HOW_KEY: self.how}


def png_text(path: Path) -> dict[str, str]:
    """The text chunks (``tEXt``, ``zTXt``, ``iTXt``) of a PNG file as ``{keyword: text}``; the
    image data is skipped, not decoded.

    Raises:
        OSError: the file cannot be read.
        ValueError: the file is not a PNG (wrong signature) or a chunk is cut short.
    """
    data = Path(path).read_bytes()
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    out, pos = {}, len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) < length:
            raise ValueError(f"{path}: chunk {kind!r} cut short")
        pos += 12 + length
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            out[key.decode("latin-1")] = text.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            compressed, rest = rest[0], rest[2:]
            _lang, _, rest = rest.partition(b"\0")
            _tkey, _, text = rest.partition(b"\0")
            out[key.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode("utf-8")
        elif kind == b"IEND":
            break
    return out


def read_caption(path: Path) -> Caption | None:
    """The caption stored in a PNG by :meth:`Caption.metadata`, or None when the file has none
    (drawn by an older fabriclab, or by code that declares none) or is not a readable PNG."""
    try:
        text = png_text(path)
    except (OSError, ValueError, zlib.error, UnicodeDecodeError):
        return None
    how = text.get(HOW_KEY, "").strip()
    if not how:
        return None
    return Caption(text.get(TITLE_KEY, "").strip() or Path(path).stem.replace("_", " "), how)


def esc(s) -> str:
    """``str(s)`` HTML-escaped, quotes included (safe in text and in attribute values)."""
    return html.escape(str(s), quote=True)


def img_tag(path: Path, alt: str) -> str:
    """An ``<img>`` with the PNG at ``path`` inline as a ``data:image/png;base64`` URI.
    Raises OSError when the file cannot be read."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def figure(path: Path, caption: str) -> str:
    """A ``<figure>``: the PNG inline (:func:`img_tag`) and ``caption`` under it (escaped)."""
    return f"<figure>{img_tag(path, caption)}<figcaption>{esc(caption)}</figcaption></figure>"


def page(title: str, body: str) -> str:
    """A complete HTML document: ``title`` (escaped) and ``body`` (HTML, as given) with
    :data:`CSS` inline and :data:`CSP` as its Content-Security-Policy."""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n")
