"""Argument checking shared by the ``data_pipeline`` command lines (``prepare``, ``show``, ``splits``).

Every bad input ends the same way, before any work starts: one line on stderr naming the argument
and what to give instead, and exit code 2 (argparse's own code for usage errors). No traceback.
"""

from __future__ import annotations

import argparse
import os


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that shows an option's default where it has one worth saying: not for flags
    (False), options without a default (None), or a help text that already says its default in
    words. The description and epilog keep their own line breaks."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) pointing at ``--help``."""

    def error(self, message: str):
        message = " ".join(str(message).split())  # one line, whatever the message held
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def fail(self, argument: str, message: str):
        """Exit 2 with ``argument <argument>: <message>``."""
        self.error(f"argument {argument}: {message}")


def whole_number(minimum: int, what: str = "a whole number"):
    """An argparse ``type`` for an integer ≥ ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} ≥ {minimum}; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what} ≥ {minimum}; got {value}")
        return value

    parse.__name__ = f"whole number ≥ {minimum}"
    return parse


def dataset_name(text: str) -> str:
    """An argparse ``type``: a dataset name or alias, made canonical."""
    from data_pipeline.spaces import canonical_name

    try:
        return canonical_name(text)
    except KeyError as error:
        raise argparse.ArgumentTypeError(error.args[0]) from None


def reason(error: BaseException) -> str:
    """An exception's message on one line (a KeyError's without its quotes)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(str(text).split()) or type(error).__name__


def writable_file(parser: Parser, argument: str, path: str) -> None:
    """Refuse an output file whose folder does not exist or that names a folder."""
    if not path:
        parser.fail(argument, "expected a file name; got an empty string")
    if os.path.isdir(path):
        parser.fail(argument, f"{path} is a folder; give a file name inside it, e.g. {path}/split.png")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        parser.fail(argument, f"no folder {folder}; create it first or write elsewhere")
