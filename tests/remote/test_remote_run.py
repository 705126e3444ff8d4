"""Box.run: results, typed failures, time-outs that kill the whole process group, big output."""

import time

import pytest

from remote import CommandFailed, CommandTimedOut, Result
from remote.errors import RemoteError, RemoteFileNotFound


def test_run_shell_text_returns_result(box):
    res = box.run("echo out; echo err >&2; exit 0")
    assert isinstance(res, Result)
    assert res.stdout == "out\n" and res.stderr == "err\n"
    assert res.exit_code == 0 and res.ok and not res.failed
    assert res.command == "echo out; echo err >&2; exit 0"
    assert 0 <= res.duration_s < 5
    assert res.box == box.name


def test_run_argv_is_shlex_joined_without_expansion(box):
    res = box.run(["printf", "%s|", "a b", "it's", '"q"', "$HOME", "*"])
    assert res.stdout == "a b|it's|\"q\"|$HOME|*|"
    assert res.command.startswith("printf ")


def test_nonzero_exit_raises_command_failed_carrying_result(box):
    with pytest.raises(CommandFailed) as info:
        box.run("echo partial; echo boom >&2; exit 7")
    err = info.value
    assert isinstance(err, RemoteError)
    assert err.result.exit_code == 7
    assert err.result.stdout == "partial\n"
    assert "boom" in str(err) and "exit 7" in str(err) and "status 7" in str(err)


def test_check_false_returns_the_failed_result(box):
    res = box.run("exit 3", check=False)
    assert res.exit_code == 3 and res.failed


def test_cwd_env_and_stdin(box, tmp_path):
    d = tmp_path / "a dir with 'quotes'"
    d.mkdir()
    res = box.run('pwd; echo "$EWB_TEST_VAR"; cat', cwd=d, env={"EWB_TEST_VAR": "v 1"}, stdin="from stdin")
    assert res.stdout.splitlines() == [str(d), "v 1", "from stdin"]


def test_missing_cwd_is_a_typed_error(box, tmp_path):
    with pytest.raises(RemoteFileNotFound) as info:
        box.run("true", cwd=tmp_path / "nope")
    assert str(tmp_path / "nope") in str(info.value)


def test_timeout_must_be_positive(box):
    with pytest.raises(ValueError):
        box.run("true", timeout=0)


def test_timeout_kills_the_whole_process_group(box):
    start = time.monotonic()
    with pytest.raises(CommandTimedOut) as info:
        box.run("sleep 60 & echo child=$!; echo shell=$$; sleep 60", timeout=1)
    assert time.monotonic() - start < 10
    err = info.value
    assert err.timeout == 1 and "timed out" in str(err)
    fields = dict(line.split("=") for line in err.result.stdout.split())
    child, shell = int(fields["child"]), int(fields["shell"])
    deadline = time.monotonic() + 5
    while (box.is_alive(child) or box.is_alive(shell)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not box.is_alive(child), "the background child survived the time-out"
    assert not box.is_alive(shell)


def test_large_output_does_not_deadlock(box):
    cmd = "head -c 30000000 /dev/zero | tr '\\0' x; head -c 5000000 /dev/zero | tr '\\0' y >&2"
    res = box.run(cmd, timeout=60)
    assert len(res.stdout) == 30_000_000 and set(res.stdout) == {"x"}
    assert len(res.stderr) == 5_000_000


def test_result_str_is_short(box):
    res = box.run("echo hi")
    assert "exit_code=0" in str(res) and "echo hi" in str(res)
