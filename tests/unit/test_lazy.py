"""common.lazy: a feature's live half is imported at its first use, so the pure sub-commands import
every feature without the live stack; a test's monkeypatch through the stand-in reaches the module."""
from __future__ import annotations

import subprocess
import sys

import pytest

from common.lazy import _Deferred, lazy_module


def test_nothing_is_imported_until_first_use_and_then_the_module_answers():
    code = ("import sys; from common.lazy import lazy_module; m = lazy_module('json.tool'); "
            "assert 'json.tool' not in sys.modules and 'json' not in sys.modules; "
            "assert m.main.__module__ == 'json.tool' and 'json.tool' in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_a_module_imported_already_is_returned_itself():
    import json
    assert lazy_module("json") is json


def test_a_missing_module_fails_at_first_use_not_before():
    m = lazy_module("fabriclab_no_such_module.inner")
    with pytest.raises(ModuleNotFoundError):
        m.anything


def test_a_monkeypatch_through_the_stand_in_is_undone_on_the_module(monkeypatch):
    import email.quoprimime as real
    stand_in = _Deferred("email.quoprimime")      # what lazy_module gives before the first import
    before = real.quote
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stand_in, "quote", "patched")
        assert real.quote == "patched" and stand_in.quote == "patched"
    assert real.quote is before
