"""The log flags both services share: any-case levels, text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Iterator

import pytest

from launcher.commands import build_parser
from steer.adapters.service_logs import (
    LOG_LEVELS,
    JsonFormatter,
    configure_logging,
    logging_dict_config,
)

SERVICES = (
    ["scorer", "run", "--policy", "p.yaml"],
    ["webhook", "serve", "--policy", "p.yaml", "--cert", "c", "--key", "k"],
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.mark.parametrize("command", SERVICES, ids=("scorer", "webhook"))
@pytest.mark.parametrize("given", ["debug", "DEBUG", "Debug"])
def test_both_services_take_the_level_in_any_case(command: list[str], given: str) -> None:
    args = build_parser().parse_args([*command, "--log-level", given, "--log-format", "JSON"])
    assert args.log_level == "debug" and args.log_format == "json"


@pytest.mark.parametrize("command", SERVICES, ids=("scorer", "webhook"))
def test_both_services_default_to_info_text_and_refuse_unknown_levels(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(command)
    assert (args.log_level, args.log_format) == ("info", "text")
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--log-level", "verbose"])
    assert "invalid choice: 'verbose'" in capsys.readouterr().err
    assert LOG_LEVELS == ("debug", "info", "warning", "error")


def test_json_record_is_one_line_with_the_exception() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        record = logging.getLogger("scorer.cycle.loop").makeRecord(
            "scorer.cycle.loop", logging.ERROR, __file__, 1, "cycle %d failed", (3,), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "ERROR" and entry["logger"] == "scorer.cycle.loop"
    assert entry["message"] == "cycle 3 failed"
    assert entry["time"].endswith("Z") and entry["time"][10] == "T"
    assert "Traceback" in entry["exception"] and "ValueError: bad\nvalue" in entry["exception"]


def test_configure_logging_json_writes_records_and_warnings_as_objects(
    capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    configure_logging("WARNING", "json")
    logging.getLogger("webhook.app").info("not at this level")
    logging.getLogger("webhook.app").warning("namespace %s unknown", "team-x")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("old flag", DeprecationWarning, stacklevel=1)
    lines = capsys.readouterr().err.splitlines()
    entries = [json.loads(line) for line in lines]
    assert [(e["logger"], e["level"]) for e in entries] == [
        ("webhook.app", "WARNING"),
        ("py.warnings", "WARNING"),
    ]
    assert entries[0]["message"] == "namespace team-x unknown"


def test_configure_logging_text(capsys: pytest.CaptureFixture[str], restore_logging: None) -> None:
    configure_logging("info", "text")
    logging.getLogger("scorer.serve").info("serving")
    assert capsys.readouterr().err.rstrip().endswith(" INFO scorer.serve: serving")


def test_gunicorn_dict_config_hands_its_loggers_to_the_json_handler() -> None:
    config = logging_dict_config("warning", "json")
    assert config["formatters"]["steer"] == {"()": "steer.adapters.service_logs.JsonFormatter"}
    assert config["root"] == {"level": "WARNING", "handlers": ["stderr"]}
    for name in ("gunicorn.error", "gunicorn.access"):
        assert config["loggers"][name]["propagate"] is True
        assert config["loggers"][name]["handlers"] == []


def test_text_lines_cannot_be_forged_by_a_newline_in_the_message() -> None:
    """A request uid like "x\\n2026-12-01 ... INFO ..." once wrote a second, forged line."""
    import io
    import logging

    from steer.adapters.service_logs import formatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter("text"))
    log = logging.getLogger("forge-test")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("uid %s refused", "abc\n2026-12-01 00:00:00,000 INFO webhook: allowed\r")
    finally:
        log.removeHandler(handler)
    out = stream.getvalue()
    assert out.count("\n") == 1 and "abc\\n2026-12-01" in out and "\\r refused" in out
