"""``osken-manager`` for os-ken 4: run os-ken (Ryu API) apps the way Ryu's manager does.

    python -m controller.manager controller/app.py --ofp-listen-host 127.0.0.1 \\
        --fabriclab-topo fattree,4 --fabriclab-ready-file /tmp/ready
    python -m controller.manager --config-file fabriclab.conf controller/app.py

os-ken 4.2.2, which fabriclab pins, ships no command-line programs (no ``osken-manager``, no
``os_ken.cmd``). This module is the manager program for it, with Ryu's manager's
options (apps as positional module names or ``.py`` files, ``--app-lists``, ``--config-file``,
``--config-dir``, ``--pid-file``, ``--user-flags``, os-ken's ``--ofp-*`` and logging options), the
same configuration files, and os-ken's ``AppManager`` running the apps. Also on the command line:
fabriclab's own app options (group ``[fabriclab]``, :mod:`controller.options`), registered before
the arguments are parsed (under Ryu's or an older os-ken's manager, give them in a configuration
file or through ``--user-flags controller/options.py``). SIGTERM ends it with status 0
(:func:`controller.main.exit_on_sigterm`).
"""
from __future__ import annotations

import importlib.util
import os
import sys

from controller import options
from controller.main import exit_on_sigterm
from controller.ofp import PROJECT, ArgsAlreadyParsedError, app_manager, cfg, log

#: Where os-ken's manager looked for a configuration file when none is named.
DEFAULT_CONFIG_FILES = ["/usr/local/etc/os_ken/os_ken.conf"]

MANAGER_OPTS = [
    cfg.ListOpt("app-lists", default=[], help="application module name to run"),
    cfg.MultiStrOpt("app", positional=True, default=[], help="application module name to run"),
    cfg.StrOpt("pid-file", default=None, help="pid file name"),
    cfg.StrOpt("user-flags", default=None, help="Additional flags file for user applications"),
]


def _register(conf) -> None:
    try:
        conf.register_cli_opts(MANAGER_OPTS)
    except ArgsAlreadyParsedError:   # a second main() in one process: already there
        pass
    options.register(conf)


def _load_user_flags(argv: list[str]) -> None:
    """Import the ``--user-flags FILE`` module before parsing, as Ryu's manager does, so that the
    command-line options it registers are known."""
    if "--user-flags" in argv[:-1]:
        path = argv[argv.index("--user-flags") + 1]
        if os.path.isfile(path):
            name = os.path.splitext(os.path.basename(path))[0]
            spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(name, module)
            spec.loader.exec_module(module)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) with os-ken's configuration and run the apps it
    names until they stop or SIGTERM (exit 0). With no app: os-ken's OpenFlow handler alone.

    Raises:
        SystemExit: oslo.config's exit on an unknown option (2) or a bad value (1), its message on stderr.
        common.errors.SetupError (from the fabriclab app): neither or both of its ``topo`` and
            ``fabric-map``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    conf = cfg.CONF
    _register(conf)
    _load_user_flags(argv)
    version = f"{PROJECT}-manager (fabriclab)"
    try:
        conf(args=argv, prog="osken-manager", project=PROJECT, version=version,
             default_config_files=[p for p in DEFAULT_CONFIG_FILES if os.path.exists(p)])
    except cfg.ConfigFilesNotFoundError:
        conf(args=argv, prog="osken-manager", project=PROJECT, version=version)
    log.init_log()
    exit_on_sigterm()
    if conf.pid_file:
        with open(conf.pid_file, "w") as f:
            f.write(str(os.getpid()))
    apps = list(conf.app_lists) + list(conf.app) or ["os_ken.controller.ofp_handler"]
    app_manager.AppManager.run_apps(apps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
