"""`lmsat` / `python -m lmsat`: commands outside the workflow.

    python -m lmsat init CHECKPOINTS ...   # a config for your own training run
    python -m lmsat analyse CHECKPOINT ... # one checkpoint's metrics, as the pipeline computes them
    python -m lmsat plan ...               # the plan's jobs, downloads, disk and compute
    python -m lmsat pin-revisions ...      # pin checkpoints that are commits (Pico), where the hub is reachable

Each command is a module of `lmsat.commands` with `add_arguments(parser)` and `run(args) -> int`;
it is imported only when named, so `lmsat plan` never loads torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> (module under lmsat.commands, one-line help)
COMMANDS = {
    "init": ("init", "write a config for a folder of training checkpoints"),
    "analyse": ("analyse", "one checkpoint's registered metrics, as the pipeline computes them (its --help names them)"),
    "plan": ("plan", "jobs, downloads, disk and GPU-hours of a config's plan"),
    "pin-revisions": ("pin", "write the pins files (step -> commit) of checkpoints that are commits, not branches"),
}


def _command_module(name: str):
    return importlib.import_module(f"lmsat.commands.{COMMANDS[name][0]}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="lmsat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (default: its message only)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (_, help_) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_)
        command_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                    help="show the traceback of an error (default: its message only)")
        if name == chosen:  # only the named command's module is imported
            _command_module(name).add_arguments(command_parser)
    args = parser.parse_args(argv)
    # A named error (a bad config, checkpoint or argument) is its message and exit code 2;
    # its traceback only with --debug (a command's own errors are caught in its run()).
    from lmsat.errors import ConfigError, CorpusError, FetchError, ModelLoadError, StagingMissing

    try:
        return int(_command_module(args.command).run(args) or 0)
    except (ConfigError, CorpusError, FetchError, ModelLoadError, StagingMissing) as error:
        if args.debug:
            raise
        print(f"lmsat {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
