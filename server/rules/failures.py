"""How a failed run is told, as pure functions of the harness's message and the run's log.

The harness's message for a crash is a headline and, for an exception, its traceback
("importing train.py failed:\\nTraceback ...\\nModuleNotFoundError: No module named 'x'"), and the
sandbox printed the same traceback into the log. So the cause is the message's last line (what a
decision's reason quotes), and an answer that carries the log and the message shows the
traceback once: the log has it, the message then says its headline and cause.
"""

from __future__ import annotations

CAUSE_MAX_CHARS = 300  # a cause is one line; an exception whose text is longer is cut


def cause(message: str | None) -> str | None:
    """The last line of the harness's message (an exception's type and text), or None for none."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    return last if len(last) <= CAUSE_MAX_CHARS else last[: CAUSE_MAX_CHARS - 3] + "..."


def _body(message: str) -> str:
    """The message's lines after its headline (a traceback), stripped; "" for a one-line message."""
    return message.partition("\n")[2].strip()


def in_short(message: str) -> str:
    """The headline and the cause of a message on one line (the whole message when one line)."""
    head = message.partition("\n")[0].rstrip(":").strip()
    last = cause(message)
    return head if not _body(message) or last is None or last == head else f"{head}: {last}"


def shown_once(message: str | None, log: str) -> str | None:
    """The message as an answer that also carries `log` shows it: in short when the log holds its
    traceback already."""
    if message is None:
        return None
    body = _body(message)
    return in_short(message) if body and body in log else message


def log_with_message(log: str, status: str, error_class: str | None, message: str | None) -> str:
    """A run's log with the harness's verdict added at its end: `[status: class] message`, its
    traceback left out when the log shows it already."""
    if not message:
        return log
    shown = shown_once(message, log)
    return f"{log}\n[{status}: {error_class}] {shown}\n"
