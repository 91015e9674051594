"""The ``autotune`` command line (click).

Every command prints a table for people or JSON for machines (``--json``), exits 0 on success, 1
when a check it ran says no, and 2 for bad usage or bad input, which always gets exactly one line
on stderr and never a traceback. The group lives here; each command is one module of this package
(shared options and helpers in ``common``) and registers itself on ``cli`` when imported.

``--backend NAME`` (or ``$AUTOTUNE_BACKEND``) picks the compiler backend and ``--target NAME`` (or
``$AUTOTUNE_TARGET``) the machine the module runs on; both are accepted by every command and by the
group itself (``autotune --target h100 run ...`` = ``autotune run --target h100 ...``): they are
added here to every registered command, so no command can forget them. Their values travel in the
click context (``common.engine_choices``), never through the environment.
"""

from __future__ import annotations

import os
import sys

import click

from autotune.cli.common import backend_option, die, gpu_target_option
from autotune.errors import AutotuneError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    """``autotune --version``: the distribution (``xla-autotune``, not the index's unrelated ``autotune``),
    its version, and the jax/jaxlib and XLA it runs on, so a bug report names all of them. Eager: it
    answers before the supported-range check, and says there whether this jax is supported."""
    if not value or ctx.resilient_parsing:
        return
    from autotune.pipelines.xla.versions import describe_installed
    from autotune.version import DISTRIBUTION, __version__

    click.echo(f"{DISTRIBUTION} {__version__} (Python package and command: autotune)")
    click.echo(describe_installed())
    ctx.exit()


@click.group(context_settings=CONTEXT)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version, the jax/jaxlib and XLA it runs on, and exit.")
@backend_option
@gpu_target_option
def cli() -> None:
    """Autotune XLA's HLO pass ordering: search for the pass sequence that gives the best module."""
    from autotune.pipelines.xla.versions import check_supported

    check_supported()  # a jax outside the supported range: one line naming the range, exit 2


def _register_commands() -> None:
    """Import every command module of this package; each adds its command(s) to ``cli``."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("common", "__main__"):
            importlib.import_module(f"{__name__}.{info.name}")


def _add_engine_options(group: click.Group) -> None:
    """``--backend`` and ``--target`` on every command of ``group`` (and of its sub-groups)."""
    for command in group.commands.values():
        if not any(p.name == "backend" for p in command.params):
            backend_option(command)
        if not any(p.name == "target" for p in command.params):
            gpu_target_option(command)
        if isinstance(command, click.Group):
            _add_engine_options(command)


_register_commands()
_add_engine_options(cli)


#: ``JAX_PLATFORMS`` as the user set it (None: unset), before ``main`` pins this process to the CPU.
USER_JAX_PLATFORMS: str | None = None


def main(argv=None) -> None:
    """Entry point: click in non-standalone mode so every error becomes one line and a code."""
    # The command line never runs a program on a device itself (compiles and runs happen in workers,
    # which choose their own platform): jax in this process stays on the CPU, so an installed CUDA
    # plugin (xla-autotune[gpu], for --target) does not probe for a GPU and print its failure here.
    global USER_JAX_PLATFORMS
    USER_JAX_PLATFORMS = os.environ.get("JAX_PLATFORMS")  # a program run by `autotune exec` gets the user's
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        rv = cli.main(args=argv, prog_name="autotune", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "autotune --help")
        sys.exit(0)
    except click.UsageError as exc:
        die(exc.format_message().splitlines()[0] if exc.format_message() else "bad usage", 2)
    except click.exceptions.Abort:
        die("aborted", 130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        die(exc.format_message().splitlines()[0], exc.exit_code or 2)
    except AutotuneError as exc:
        die(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, exc.exit_code)
    except KeyboardInterrupt:
        die("interrupted", 130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)
