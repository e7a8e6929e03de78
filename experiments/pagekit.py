"""What every self-contained HTML page of fabriclab shares (a study's report, a run's report,
a comparison's report): the Jinja2 environment the pages are rendered with (templates in
``experiments/templates/``: the page itself with its CSS and Content-Security-Policy in
``page.html.j2``, the pieces the pages share in ``macros.html.j2``), escaping, PNGs embedded as
``data:`` URIs, and plot captions that travel inside the PNG files themselves.

A plot's caption is declared by whoever draws it: a :class:`Caption` (a title and a "how to
read this" paragraph) passed to matplotlib's ``savefig`` as PNG text metadata
(:meth:`Caption.metadata`: the standard PNG keywords ``Title`` and ``Description``). A report
reads it back with :func:`read_caption` from the file alone, so the code that writes reports
names no plot, no workload and no feature, and a redrawn plot carries its new caption with it.

Imports the standard library, Jinja2 and MarkupSafe only (the reports' contracts forbid the run
loop and the live fabric).
"""
from __future__ import annotations

import base64
import functools
import html
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The PNG text keywords a caption is stored under (standard keywords: image viewers show them).
TITLE_KEY, HOW_KEY = "Title", "Description"

#: Where the pages' templates are (shipped in the wheel: pyproject.toml's package-data).
TEMPLATES = Path(__file__).resolve().parent / "templates"


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
    """``str(s)`` HTML-escaped, quotes included (safe in text and in attribute values): the
    standard library's :func:`html.escape`, the escaping every page's template applies to each
    value it prints (:func:`environment`)."""
    return html.escape(str(s), quote=True)


def _escaped(value) -> Markup:
    """Jinja2's ``finalize``: a printed value as :func:`esc` spells it, marked safe so that the
    autoescape after it leaves it as is; a value that is already :class:`markupsafe.Markup` (a
    macro's output) is kept."""
    return value if hasattr(value, "__html__") else Markup(esc(value))


@functools.cache
def environment() -> jinja2.Environment:
    """The Jinja2 environment of the pages: templates from :data:`TEMPLATES`, autoescape on for
    every template, an undefined name an error (``jinja2.StrictUndefined``), block tags take
    their line's indentation and newline with them.

    Every value a template prints goes through :func:`_escaped` (the ``finalize`` hook) before
    the autoescape: the characters MarkupSafe escapes, spelt as :func:`html.escape` spells them
    (``&quot;`` and ``&#x27;`` where MarkupSafe writes ``&#34;`` and ``&#39;``), so a value reads
    in a page as :func:`esc` of it. Nothing is marked safe but the output of the templates' own
    macros and blocks. A filter that escapes by itself (``|e``, ``|join``) spells quotes
    MarkupSafe's way: the templates print values as they are given."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=True, default=True),
        finalize=_escaped, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True)


def render(template: str, **context) -> str:
    """The page ``template`` (a file name in :data:`TEMPLATES`, e.g. ``"run.html.j2"``) rendered
    with ``context``.

    Raises:
        jinja2.TemplateNotFound: no such template (an install without the templates).
        jinja2.UndefinedError: the template names a value ``context`` does not give.
    """
    return environment().get_template(template).render(**context)


def png_data_uri(path: Path) -> str:
    """The PNG at ``path`` as a ``data:image/png;base64,...`` URI (only base64 characters after
    the comma: nothing in it for an escape to change). Raises OSError when the file cannot be read."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")
