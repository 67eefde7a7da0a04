"""bench/webhook_bench.py reads what `wrk --latency` prints (wrk 4.x, src/wrk.c): the latency
lines of `print_stats_latency` are "%7.0f%%" and then `print_units(n, format_time_us, 10)`,
which right-aligns the value and pads it to the width with spaces *after* it when its unit has
fewer than two letters, so a value in seconds ("1.02s") ends the line with a blank. A p99 of a
second or more once stopped a run with `KeyError: '99'`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.webhook_bench import parse_wrk

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "wrk"


def wrk_output(p50: str, p99: str) -> str:
    """wrk's report for one thread, its values formatted as `print_units` prints them."""

    def units(value: str) -> str:
        letters = sum(1 for ch in value[-2:] if ch.isalpha())
        pad = 2 - letters
        return f"{value:>{10 - pad}}" + " " * pad

    lines = [
        "Running 5s test @ http://127.0.0.1:8443/mutate",
        "  1 threads and 32 connections",
        "  Thread Stats   Avg      Stdev     Max   +/- Stdev",
        f"    Latency   {units('3.21ms')}{units('9.87ms')}{units('1.30s')}   91.20%",
        "    Req/Sec     9.31k   412.00     9.90k    80.00%",
        "  Latency Distribution",
        f"{50:7.0f}%{units(p50)}",
        f"{75:7.0f}%{units('3.40ms')}",
        f"{90:7.0f}%{units('5.10ms')}",
        f"{99:7.0f}%{units(p99)}",
        "  46312 requests in 5.00s, 62.10MB read",
        "  Non-2xx or 3xx responses: 3",
        "Requests/sec:   9262.40",
        "Transfer/sec:     12.42MB",
    ]
    return "\n".join(lines) + "\n"


def test_milliseconds_and_microseconds_are_read() -> None:
    parsed = parse_wrk(wrk_output("351.00us", "12.60ms"))
    assert parsed == {
        "requests": 46312,
        "requests_per_second": 9262.4,
        "p50_ms": pytest.approx(0.351),
        "p99_ms": pytest.approx(12.6),
        "non_2xx": 3,
        "socket_errors": "",
    }


def test_a_p99_in_seconds_padded_with_a_blank_is_read() -> None:
    out = wrk_output("2.10ms", "1.02s")
    assert "  99%    1.02s \n" in out  # as wrk prints it: the blank after the value
    parsed = parse_wrk(out)
    assert parsed["p99_ms"] == pytest.approx(1020.0)
    assert parsed["p50_ms"] == pytest.approx(2.1)


def test_an_output_without_the_latency_distribution_names_what_is_missing() -> None:
    out = "\n".join(line for line in wrk_output("2.10ms", "9.00ms").splitlines() if "%" not in line)
    with pytest.raises(SystemExit, match="wrk printed no the 50% latency, the 99% latency"):
        parse_wrk(out)


def test_wrks_own_report_of_a_one_second_server_is_read() -> None:
    """tests/fixtures/wrk/latency-in-seconds.txt: what `wrk -t1 -c2 -d4s --latency` (Debian's
    wrk 4.1.0) printed against a local server that answers after 1.05 s, kept as printed (each
    latency line ends in a blank)."""
    out = (FIXTURES / "latency-in-seconds.txt").read_text()
    assert "     99%    1.05s \n" in out
    parsed = parse_wrk(out)
    assert parsed["p50_ms"] == pytest.approx(1050.0)
    assert parsed["p99_ms"] == pytest.approx(1050.0)
    assert (parsed["requests"], parsed["requests_per_second"]) == (6, 1.5)
