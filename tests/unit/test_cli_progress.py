"""Progress goes to stderr only when stderr is a terminal, one line rewritten in place, cleared at the end."""

from __future__ import annotations

import io

from hyperpod_debugger.cli.main import _Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_each_step_rewrites_one_line_and_done_clears_it(monkeypatch):
    monkeypatch.delenv("TERM", raising=False)
    stream = Terminal()
    progress = _Progress(stream)
    progress("reading cluster ml-eks-prod in us-west-2")
    progress("probing nodes through Session Manager: 3 of 25 done")
    progress.done()
    written = stream.getvalue()
    assert written.count("\r\x1b[K") == 3 and "\n" not in written
    assert written.index("reading cluster") < written.index("3 of 25 done")


def test_in_a_pipe_or_a_dumb_terminal_nothing_is_written(monkeypatch):
    piped = io.StringIO()
    _Progress(piped)("reading cluster x")
    assert piped.getvalue() == ""
    monkeypatch.setenv("TERM", "dumb")
    dumb = Terminal()
    progress = _Progress(dumb)
    progress("reading cluster x")
    progress.done()
    assert dumb.getvalue() == "" and not progress.live
