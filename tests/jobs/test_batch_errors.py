"""A foreachBatch function's failure as Spark gets it (jobs.common.batch_errors); the Java cases, which need
a driver being stopped, are in tests/jobs/test_stopping.py."""

from __future__ import annotations

from jobs.common.batch_errors import batch_error_message


def failing_with(message: str) -> BaseException:
    try:
        raise ValueError(message)
    except ValueError as error:
        return error


def test_a_python_failure_keeps_its_traceback() -> None:
    message = batch_error_message(failing_with("bad row 7"))
    assert message.startswith("Traceback (most recent call last):")
    assert "in failing_with" in message
    assert message.endswith("ValueError: bad row 7")


def test_py4js_words_are_reworded_so_sparks_stop_check_never_reads_the_whole_text() -> None:
    error = failing_with(
        "py4j.protocol.Py4JJavaError: An error occurred while calling o42.save.\n" + "x" * 5000
    )
    message = batch_error_message(error)
    assert "Py4JJavaError: An error occurred while calling" not in message
    assert "Py4JJavaError: an error occurred while calling o42.save." in message
    assert message.endswith("x" * 5000)
