"""Log flags and log output shared by the scorer and the webhook.

Both services take the same `--log-level` (any case) and `--log-format`. `json` writes one
object per line, which log collectors (Fluent Bit, Vector, Loki's promtail) read without a
parser per service; a traceback stays inside its object instead of spanning lines.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    """`--log-level` and `--log-format`, parsed to lower-case names from LOG_LEVELS/LOG_FORMATS."""
    parser.add_argument(
        "--log-level",
        type=str.lower,
        default="info",
        choices=LOG_LEVELS,
        help="least severe level logged: debug, info, warning or error, in any case "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--log-format",
        type=str.lower,
        default="text",
        choices=LOG_FORMATS,
        help="text: one line per record; json: one JSON object per line with time, level, "
        "logger, message and, for a failure, exception (default: %(default)s)",
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, RFC 3339), level, logger, message[, exception]."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """One line per record: control characters in the message (a newline in a request's uid,
    say) are escaped, so no input can forge a log line. A traceback still follows on its own
    lines, as Python writes it."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        if any(c in line for c in _CONTROL):
            line = line.translate(_ESCAPES)
        return line


_CONTROL = "".join(chr(c) for c in range(32) if chr(c) != "\t") + "\x7f"
_ESCAPES = {ord(c): repr(c)[1:-1] for c in _CONTROL}


def formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return TextFormatter(TEXT_FORMAT)
    raise ValueError(f"log format: expected one of {', '.join(LOG_FORMATS)}, got {log_format!r}")


def configure_logging(level: str, log_format: str) -> None:
    """Send every record at `level` or above to stderr in `log_format` (replaces root handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.captureWarnings(True)  # a warning is a record too, not a stray line on stderr


def logging_dict_config(level: str, log_format: str) -> dict[str, Any]:
    """The same output as a `logging.config.dictConfig` document, for servers configured that
    way (gunicorn's `logconfig_dict`): its own loggers hand their records to the root one."""
    factory = f"{__name__}.{JsonFormatter.__name__}" if log_format == "json" else None
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "steer": {"()": factory}
            if factory
            else {"()": f"{__name__}.{TextFormatter.__name__}", "format": TEXT_FORMAT},
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "steer",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {
            name: {"level": level.upper(), "handlers": [], "propagate": True}
            for name in ("gunicorn.error", "gunicorn.access")
        },
    }
