"""``openhood kernels``: the compiled kernel sets, where each loads from, and building them at install time.

Without options it lists every ahead-of-time kernel set (``openhood.aot``) with where a process
would load it from now: ``installed`` (built at installation), ``cached`` (built by an earlier
process) or ``missing`` (the next process that needs it builds it, several seconds).
``--build`` builds the missing ones into the install folder, which ``make`` does once, so that
no command or server start ever compiles them; ``--cache`` builds into the per-user cache
instead (an installation folder that is not writable). The trade-off: the list of sets is
written here, one line each, since the low-level ``openhood.aot`` may not import the layers
that define them.
"""

from __future__ import annotations

import argparse

# Every kernel set, as "module:attribute" (imported only when the command runs).
KERNEL_SETS = (
    "openhood.tokenizer.wordpiece_kernels:WORDPIECE",
    "openhood.tokenizer.bpe_tables:BPE",
    "openhood.engine.kernels.rows:ROWS",
    "openhood.engine.kernels.conv_kernels:CONV",
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "kernels", help="list the ahead-of-time compiled kernel sets; --build compiles the missing ones"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--build", action="store_true", help="build missing sets into the install folder")
    where.add_argument("--cache", action="store_true", help="build missing sets into the per-user cache instead")
    p.set_defaults(func=cmd_kernels)


def cmd_kernels(args: argparse.Namespace) -> int:
    import logging

    from openhood import aot

    logging.getLogger("openhood.aot").setLevel(logging.WARNING)  # this command prints its own lines
    root = aot.install_dir() if args.build else aot.cache_dir() if args.cache else None
    failed = 0
    for kset in map(aot.resolve, KERNEL_SETS):
        if root is None:
            where, path = kset.status()
            print(f"{kset.name:<10} {where:<9} {path or '(built by the first process that needs it)'}")
            continue
        try:
            outcome, seconds = kset.build_into(root)
        except Exception as exc:  # no C compiler, a read-only folder: the JIT fallback still works
            failed += 1
            print(f"{kset.name:<10} not built ({aot.build_failure(exc)})")
            continue
        print(f"{kset.name:<10} {outcome:<8} {seconds:5.1f} s  {root}")
    return 1 if failed else 0
