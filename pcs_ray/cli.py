"""``pcs-ray``: the command line's entry point — the app, its error handling, and the command groups it registers.

Every user error (a bad trace, config, cluster spec or option) ends the
program with one ``error: <message>`` line on stderr and exit status 2, never
a traceback. Results go to stdout; progress goes to stderr, so
``pcs-ray simulate --json > out.json`` stays clean.

Each command group is a module of ``pcs_ray.commands`` with a
``register(app)`` function; ``COMMAND_GROUPS`` lists them in the order
``pcs-ray --help`` shows their commands. No command module imports this one.
The groups are imported when the app is built: a call to a running
coordinator (``CLIENT_GROUPS``) builds an app of its own group only, so it
starts without importing the scheduler, the simulator or the solver.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys

import typer

GROUP_NAMES = ("simulate", "up", "live", "logs", "dashboard", "calibrate", "replay", "report", "config", "tenants", "demo", "solve",
               "power", "slowruns", "data")
# Commands whose group alone serves them (their first argument -> the group's module).
CLIENT_GROUPS = {"submit": "live", "status": "live", "predict": "live", "cancel": "live", "config": "config",
                 "tenants": "tenants", "logs": "logs", "dashboard": "dashboard"}

# Errors a user can fix; anything else is a bug and keeps its traceback. Every typed user error
# (WorkloadError, ConfigError, ClusterSpecError, the coordinator's refusals) is a ValueError.
USER_ERRORS = (ValueError, FileNotFoundError, OSError)


# Recent Typer vendors click (``typer.TyperException`` is its ClickException's base); older
# versions raise click's own classes. Catch whichever exist.
try:
    import click as _click
except ImportError:  # pragma: no cover - typer without click
    _click = None
_EXIT = tuple({typer.Exit} | ({_click.exceptions.Exit} if _click else set()))
_ABORT = tuple({typer.Abort} | ({_click.exceptions.Abort} if _click else set()))
_CLICK_ERRORS = tuple(
    {t for t in (getattr(typer, "TyperException", None), _click.ClickException if _click else None) if t is not None}
)


def _root() -> None:
    """pcs-ray: predictable, variability- and topology-aware GPU cluster scheduling."""


def build_app(groups: tuple[str, ...] = GROUP_NAMES, calls_only: bool = False) -> typer.Typer:
    """The app with the commands of ``groups`` (modules of ``pcs_ray.commands``), in that order
    (``calls_only``: a group's calls to a running coordinator, where it registers them apart)."""
    built = typer.Typer(
        name="pcs-ray",
        help=(
            "pcs-ray: predictable, variability- and topology-aware GPU cluster scheduling.\n\n"
            "Run `pcs-ray COMMAND --help` for a command's options. Errors are reported as one "
            "'error: ...' line on stderr with exit status 2."
        ),
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
    )
    built.callback()(_root)
    for name in groups:
        module = importlib.import_module(f"pcs_ray.commands.{name}")
        (getattr(module, "register_calls", module.register) if calls_only else module.register)(built)
    return built


def _app_for(args: list[str]) -> typer.Typer:
    group = CLIENT_GROUPS.get(args[0]) if args else None
    return build_app((group,), calls_only=True) if group is not None else __getattr__("app")


def __getattr__(name: str):
    """``app`` (every command) and ``COMMAND_GROUPS`` (their modules), built on first use."""
    if name == "app":
        globals()["app"] = build_app()
        return globals()["app"]
    if name == "COMMAND_GROUPS":
        return tuple(importlib.import_module(f"pcs_ray.commands.{g}") for g in GROUP_NAMES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _one_line(message: str) -> str:
    return " ".join(message.split()) or "unknown error"


def _error(message: str) -> None:
    print(f"error: {_one_line(message)}", file=sys.stderr, flush=True)


def run(argv: list[str] | None = None) -> int:
    """Run the app on ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rv = _app_for(args)(args=args or ["--help"], prog_name="pcs-ray", standalone_mode=False)
    except _EXIT as e:
        return e.exit_code
    except _ABORT:
        _error("aborted")
        return 130
    except _CLICK_ERRORS as e:
        hint = ""
        ctx = getattr(e, "ctx", None)
        if ctx is not None:
            hint = f" (see '{ctx.command_path} --help')"
        _error(e.format_message() + hint)
        return 2
    except OSError as e:
        if e.errno == errno.EPIPE:  # stdout closed early (`pcs-ray ... | head`): not an error worth a line
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        if e.strerror and e.filename is not None:
            _error(f"{e.strerror}: {e.filename}")
        else:
            _error(str(e) or type(e).__name__)
        return 2
    except USER_ERRORS as e:
        _error(str(e) or type(e).__name__)
        return 2
    return rv if isinstance(rv, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``pcs-ray``)."""
    sys.exit(run(argv))


if __name__ == "__main__":
    main()
