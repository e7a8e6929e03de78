"""The typed messages of a study's Dask runs and the unpacking of a worker's results folder,
without a scheduler."""
import io
import tarfile

import pytest
from pydantic import ValidationError

from experiments.studydask import RemoteResult, RemoteRun, unpack


def _tar(members: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind in members.items():
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = "/etc/passwd"
                tar.addfile(info)
            else:
                data = kind.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _result(archive: bytes, folder="run1") -> RemoteResult:
    return RemoteResult(folder=folder, archive=archive, exit_code=0, stderr_tail="", host="h")


def test_a_results_folder_unpacks_into_the_runs_folder(tmp_path):
    got = unpack(_result(_tar({"run1": "dir", "run1/rounds": "dir", "run1/rounds/x.json": "{}"})), tmp_path)
    assert got == tmp_path.resolve() / "run1"
    assert (got / "rounds" / "x.json").read_text() == "{}"


@pytest.mark.parametrize("members", [
    {"run1": "dir", "run1/../../evil": "x"},
    {"/abs": "x"},
    {"run1": "dir", "run1/link": "link"},
    {"other/x": "x"},
])
def test_an_archive_that_would_write_elsewhere_is_refused(tmp_path, members):
    with pytest.raises(ValueError):
        unpack(_result(_tar(members)), tmp_path / "runs")
    assert not (tmp_path / "evil").exists()


def test_no_archive_is_no_folder(tmp_path):
    assert unpack(_result(b"", folder=""), tmp_path) is None


def test_the_messages_are_strict():
    with pytest.raises(ValidationError):
        RemoteRun.model_validate({"name": "r", "scenario": {}, "cells": ["a"], "extra": 1})
    r = RemoteRun(name="r", scenario={"name": "x"}, cells=("a", "b"))
    assert RemoteRun.model_validate(r.model_dump()) == r
