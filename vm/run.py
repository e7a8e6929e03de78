"""Run fabriclab inside the stock-kernel VM (the VM lane).

    python vm/run.py test [--junitxml F] [-- PYTEST_ARGS...]   # sudo make vm-test
    python vm/run.py experiment [--scenario FILE]    # sudo make vm-experiment
    python vm/run.py shell -- COMMAND...             # any command in the checkout, in the guest

Boots the cached image of vm/build-image.sh under qemu with the current
checkout on a second disk (the cloud kernel has no 9p), runs the job, and
brings back its output by reading that disk after power-off (debugfs
rdump). KVM is used only if a probe boot under it succeeds (on some hosts
it hangs); otherwise TCG. The whole VM run has a timeout; qemu dies with
this process (PR_SET_PDEATHSIG) and in every exit path, so a killed host
side leaves no guest running. Exits with the job's status (2 for usage or
set-up errors). Standard library only.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUEST_PY = "/opt/fabriclab/venv/bin/python"
KVM_CACHE = Path("/run/fabriclab/kvm-probe.json")
PR_SET_PDEATHSIG = 1
#: Per-run work folders (job disk); a folder whose runner died is removed by the next run.
WORK_ROOT = Path("/var/tmp/fabriclab-vm")
#: Terminal control sequences the firmware writes to the serial console (reset, clear, no-wrap).
_CONTROL = re.compile(r"\x1b(?:\[[0-9;?]*[A-Za-z]|[A-Za-z])|[\x00-\x08\x0b-\x1f\x7f]")


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL when this process dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setpgrp()


def build_image() -> Path:
    """Build or reuse the cached image; returns its directory."""
    p = subprocess.run(["bash", str(ROOT / "vm" / "build-image.sh")], stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(p.returncode)
    return Path(p.stdout.strip().splitlines()[-1])


def checkout_files() -> list[str]:
    """Files of the working tree to copy: tracked and untracked-but-not-ignored (git), else all but junk;
    plus the compiled BPF objects (build/*.bpf.o: the guest has no clang)."""
    built = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "build").glob("*.bpf.o"))]
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                             capture_output=True, check=True).stdout
        return [f for f in out.decode().split("\0") if f and (ROOT / f).is_file()] + built
    except (OSError, subprocess.CalledProcessError):
        skip = {".venv", "results", ".git", "__pycache__", ".pytest_cache"}
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]


def make_job_disk(work: Path, script: str, size: str = "2G") -> Path:
    """ext4 image holding src/ (the checkout) and run.sh, for /dev/vdb in the guest."""
    stage = work / "stage"
    src = stage / "src"
    for f in checkout_files():
        dst = src / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dst)
    (stage / "out").mkdir(parents=True)
    run = stage / "run.sh"
    run.write_text(script)
    run.chmod(0o755)
    img = work / "job.img"
    subprocess.run(["mkfs.ext4", "-q", "-L", "fabriclab-job", "-d", str(stage), "-F", str(img), size], check=True,
                   stdout=subprocess.DEVNULL)
    return img


def qemu_argv(image: Path, accel: str, job_img: Path | None, memory_mb: int = 2048) -> list[str]:
    """qemu-system-x86_64 command line for the image (root disk copy-on-write: the cache is never written)."""
    argv = ["qemu-system-x86_64", "-accel", accel, "-m", str(memory_mb), "-smp", "2", "-nographic", "-no-reboot",
            "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"),
            "-drive", f"file={image / 'rootfs.img'},if=virtio,format=raw,snapshot=on",
            "-append", "root=/dev/vda rw console=ttyS0 init=/usr/local/sbin/fabriclab-vm-init panic=-1 quiet"]
    # TCG's default CPU model (qemu64) lacks SSE4.2/POPCNT, which numpy 2 wheels require
    argv[1:1] = ["-cpu", "host" if accel == "kvm" else "max"]
    if job_img is not None:
        argv += ["-drive", f"file={job_img},if=virtio,format=raw"]
    return argv


def boot(argv: list[str], timeout_s: float, log, echo: bool) -> tuple[int | None, bool, list[str]]:
    """Run qemu until it exits or ``timeout_s`` passes (then kill it).

    Returns (qemu exit code or None if killed, timed_out, console lines).
    """
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent)
    lines = []
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        buf = b""
        while True:
            chunk = proc.stdout.read()
            if chunk:
                buf += chunk
                *done, buf = buf.split(b"\n")
                for raw in done:
                    line = _CONTROL.sub("", raw.decode(errors="replace").rstrip("\r"))
                    lines.append(line)
                    log.write(line + "\n")
                    if echo:
                        print(line, flush=True)
            elif proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
            if time.monotonic() > deadline:
                timed_out = True
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return (None if timed_out else proc.returncode), timed_out, lines


def choose_accel(image: Path, log) -> str:
    """``kvm`` if /dev/kvm exists and a probe boot under it reaches our init within 60 s, else ``tcg``.

    The probe result is cached in /run (per host boot).
    """
    if not os.path.exists("/dev/kvm"):
        return "tcg"
    try:
        cached = json.loads(KVM_CACHE.read_text())
        return cached["accel"]
    except (OSError, ValueError, KeyError):
        pass
    _, _, lines = boot(qemu_argv(image, "kvm", None), 60, log, echo=False)
    accel = "kvm" if any("FABRICLAB-VM-BOOTED" in l for l in lines) else "tcg"
    KVM_CACHE.parent.mkdir(parents=True, exist_ok=True)
    KVM_CACHE.write_text(json.dumps({"accel": accel, "t_unix_s": time.time()}))
    return accel


def work_dir() -> Path:
    """A fresh work folder for this run; folders of runners that no longer exist are removed first."""
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    for d in WORK_ROOT.glob("run-*"):
        try:
            pid = int(d.name.split("-")[1])
            os.kill(pid, 0)
            continue            # its runner is alive
        except (ValueError, IndexError, ProcessLookupError):
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            continue
    d = WORK_ROOT / f"run-{os.getpid()}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    return d


def extract_out(job_img: Path, dest: Path) -> None:
    """Copy /out of the job disk to ``dest`` (debugfs rdump; no mount needed)."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debugfs", "-R", f"rdump /out {dest}", str(job_img)], capture_output=True, check=True)


PROBE_SNIPPET = (
    "import json; from experiments.probe import probe; "
    "open('/job/out/probe.json','w').write(json.dumps(probe(), indent=2))"
)


def job_script(kind: str, args) -> str:
    """The guest's /job/run.sh for a test or experiment job."""
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    head = ["#!/bin/sh", "cd /job/src",
            f"export FABRICLAB_LANE=vm PYTHONDONTWRITEBYTECODE=1 FABRICLAB_GIT_REVISION={shlex.quote(rev or 'unknown')}",
            f"{GUEST_PY} -c {shlex.quote(PROBE_SNIPPET)}"]
    if kind == "test":
        cmd = [GUEST_PY, "-m", "pytest", "tests", "-v", "-ra", "--junitxml=/job/out/junit.xml",
               "-p", "no:cacheprovider"] + list(args.rest)
    elif kind == "shell":
        cmd = list(args.rest) or ["true"]
    else:
        scen = f"/job/src/{args.scenario}" if args.scenario else "experiments/scenarios/incast.yaml"
        cmd = [GUEST_PY, "-m", "experiments", "run", scen, "--results", "/job/out/results"]
    return "\n".join(head + [" ".join(shlex.quote(c) for c in cmd), "echo $? > /job/out/status", ""])


def main(argv=None) -> int:
    """CLI entry point; see the module docstring."""
    ap = argparse.ArgumentParser(description="run fabriclab inside the stock-kernel VM")
    ap.add_argument("kind", choices=("test", "experiment", "shell"))
    ap.add_argument("--scenario", default=None, help="scenario path relative to the checkout (experiment)")
    ap.add_argument("--results", default=str(ROOT / "results"))
    ap.add_argument("--timeout-s", type=float, default=None, help="whole VM run (default: 65 min test, 15 min experiment)")
    ap.add_argument("--quiet", action="store_true", help="do not echo the guest console")
    ap.add_argument("--junitxml", default=None, help="test: also copy the guest's JUnit XML report to this path")
    argv = sys.argv[1:] if argv is None else list(argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    head = argv[:argv.index("--")] if "--" in argv else argv
    args = ap.parse_args(head)
    args.rest = rest      # after --: pytest arguments (test) or the command (shell)
    if os.geteuid() != 0:
        print("fabriclab: the VM lane needs root (qemu, images): run it with sudo", file=sys.stderr)
        return 2
    if args.scenario and not (ROOT / args.scenario).is_file():
        print(f"fabriclab: scenario {args.scenario} not found in the checkout", file=sys.stderr)
        return 2
    timeout_s = args.timeout_s or {"test": 3900, "experiment": 900, "shell": 600}[args.kind]
    image = build_image()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    report_dir = Path(args.results) / f"{stamp}-vm-{args.kind}"
    report_dir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    work = work_dir()
    try:
        return _run_vm(args, image, work, report_dir, timeout_s, t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_vm(args, image: Path, work: Path, report_dir: Path, timeout_s: float, t0: float) -> int:
    """Boot, run the job, bring its output back; returns the exit status for main()."""
    with open(report_dir / "vm-console.log", "w", buffering=1) as log:
        accel = choose_accel(image, log)
        print(f"fabriclab: VM lane: image {image.name}, kernel {(image / 'kernel-version').read_text().strip()}, "
              f"accel {accel}, timeout {timeout_s:.0f} s", flush=True)
        job = make_job_disk(work, job_script(args.kind, args))
        code, timed_out, lines = boot(qemu_argv(image, accel, job), timeout_s, log, echo=not args.quiet)
        out = work / "out"
        try:
            extract_out(job, work)
        except subprocess.CalledProcessError as e:
            print(f"fabriclab: could not read the job disk: {e.stderr}", file=sys.stderr)
        wall = time.monotonic() - t0
        if out.exists():
            for item in out.iterdir():
                if item.name == "results":
                    for r in item.iterdir():
                        shutil.copytree(r, Path(args.results) / r.name, dirs_exist_ok=True)
                        print(f"fabriclab: results copied to {Path(args.results) / r.name}")
                elif item.is_file():
                    shutil.copy2(item, report_dir / item.name)
    status_file = report_dir / "status"
    if timed_out:
        print(f"fabriclab: VM run timed out after {timeout_s:.0f} s; the guest was killed "
              f"(console: {report_dir / 'vm-console.log'})", file=sys.stderr)
        return 1
    if not status_file.exists():
        print(f"fabriclab: the guest wrote no status (qemu exit {code}); console: {report_dir / 'vm-console.log'}",
              file=sys.stderr)
        return 1
    status = int(status_file.read_text().strip() or 1)
    if args.kind == "test" and args.junitxml and (report_dir / "junit.xml").exists():
        Path(args.junitxml).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(report_dir / "junit.xml", args.junitxml)
    summary = {}
    try:
        p = json.loads((report_dir / "probe.json").read_text())
    except (OSError, ValueError):
        p = None
    if p:
        summary = {"kernel": p["kernel"], "datapath": p["datapath"],
                   "qdiscs": sorted(k for k, v in p["qdiscs"].items() if v),
                   "tcp_congestion_control": sorted(set(p["tcp_congestion_control"]["available"]
                                                        + p["tcp_congestion_control"].get("loadable", [])))}
    print(f"fabriclab: VM lane {args.kind}: status {status} in {wall:.0f} s ({accel}); inside: "
          + json.dumps(summary))
    print(f"fabriclab: VM lane report: {report_dir}")
    return status


if __name__ == "__main__":
    sys.exit(main())
