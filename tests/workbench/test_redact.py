"""workbench.redact: every kind of secret in every form, and the look-alikes it must leave alone."""

from __future__ import annotations

import io
import json

import pytest

from workbench.engine.flags import FLAGS
from workbench.engine.launch import LaunchCommand
from workbench.redact import (
    PLACEHOLDER, Redactor, RedactingStream, is_secret_env, is_secret_flag, is_secret_key,
)

KEY = "sk-planted0123456789abcdefXYZ"
HF = "hf_PlantedTokenABCDEFGHIJ0123456789"
MINE = "my-very-private-value"


# -- kinds ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--api-key", "--admin-api-key", "--hf-token", "--ssl-keyfile-password",
                                  "--apikey", "--client-secret", "--db-passwd", "--token", "--openai-api-keys",
                                  "--api_key", "-api-key"])
def test_secret_flags_by_kind(flag):
    assert is_secret_flag(flag) is True


@pytest.mark.parametrize("flag", ["--speculative-eagle-topk", "--kv-cache-dtype", "--max-total-tokens",
                                  "--speculative-token-map", "--ssl-keyfile", "--tokenizer-path",
                                  "--speculative-num-draft-tokens", "--kt-max-deferred-experts-per-token",
                                  "--bucket-time-to-first-token", "--skip-tokenizer-init", "--port",
                                  "--model-path", "--speculative-draft-model-path"])
def test_flags_that_only_mention_tokens_or_keys_are_not_secrets(flag):
    assert is_secret_flag(flag) is False


def test_of_sglang_0_5_23s_flag_table_exactly_the_three_credentials_are_secret():
    """The whole shipped table (about 30 flags mention token/key): only the credentials."""
    mentioning = [f for f in FLAGS if any(w in f for w in ("token", "key", "secret", "passw"))]
    assert len(mentioning) > 25
    assert sorted(f for f in FLAGS if is_secret_flag(f)) == ["--admin-api-key", "--api-key", "--ssl-keyfile-password"]


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY",
                                  "MY_SECRET", "DB_PASSWORD", "PGPASSWORD", "GITHUB_TOKEN", "AWS_SESSION_TOKEN",
                                  "SECRET", "ANTHROPIC_API_KEY", "hf_token", "GOOGLE_APPLICATION_CREDENTIALS",
                                  # issue 13's trial: the kinds it missed
                                  "DB_PASS", "REDIS_PASS", "MYSQL_PWD", "DB_PWD", "PGPASS", "SENTRY_DSN", "APP_DSN",
                                  "SESSION_COOKIE", "COOKIE_JAR", "PRIVATE_KEY_PEM", "SSH_PRIVATE_KEY", "AWS_CREDENTIAL",
                                  "BASIC_AUTH", "PROXY_AUTH", "AUTH_HEADER", "mysql_pwd"])
def test_secret_variables_by_kind(name):
    assert is_secret_env(name) is True


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "SSH_AUTH_SOCK", "HF_HOME", "PYTHONHASHSEED", "PATH",
                                  "CUDA_VISIBLE_DEVICES", "SGLANG_LOG_MS", "KEYBOARD", "HF_TOKEN_PATH", "MONKEY",
                                  # the shell's directories, XDG locations, paths and modes beside the kinds above
                                  "PWD", "OLDPWD", "HOME", "XDG_RUNTIME_DIR", "XDG_SESSION_TYPE", "PGPASSFILE",
                                  "SKIP_BYPASS", "AUTH_URL", "OS_AUTH_TYPE", "AUTH", "DATABASE_URL", "PASS"])
def test_ordinary_variables_are_not_secrets(name):
    assert is_secret_env(name) is False


@pytest.mark.parametrize("key, secret", [("api_key", True), ("admin_api_key", True), ("hf_token", True),
                                         ("Authorization", True), ("password", True), ("ssl_keyfile_password", True),
                                         ("key", False), ("token", False), ("new_token", True),
                                         ("speculative_token_map", False), ("max_total_tokens", False),
                                         ("tokenizer_path", False)])
def test_json_keys(key, secret):
    assert is_secret_key(key) is secret


# -- forms ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    (f"python -m sglang.launch_server --api-key {KEY} --port 30000",
     "python -m sglang.launch_server --api-key *** --port 30000"),
    (f"python -m sglang.launch_server --api-key={KEY} --port 30000",
     "python -m sglang.launch_server --api-key=*** --port 30000"),
    ("sglang serve m --hf-token abc --ssl-keyfile-password 'two words' --ssl-keyfile /k.pem",
     "sglang serve m --hf-token *** --ssl-keyfile-password '***' --ssl-keyfile /k.pem"),
    ("HF_TOKEN=abcdef MY_SECRET=\"x y\" CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server",
     "HF_TOKEN=*** MY_SECRET=\"***\" CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server"),
    ("clone https://bob:pa55word@huggingface.co/org/model.git", "clone https://bob:***@huggingface.co/org/model.git"),
    ("Authorization: Bearer abc.def-ghi_jkl", "Authorization: Bearer ***"),
    ("headers={'Authorization': 'Basic dXNlcjpwYXNz'}", "headers={'Authorization': '***'}"),
    ("curl -H 'authorization: bearer Zm9vYmFyYmF6cXV4' http://x", "curl -H 'authorization: bearer ***' http://x"),
    ("ValueError: bad argv ['python', '--api-key', 'short', '--port', '1']",
     "ValueError: bad argv ['python', '--api-key', '***', '--port', '1']"),
    ("env {'HF_TOKEN': 'abc', 'HOME': '/root'}", "env {'HF_TOKEN': '***', 'HOME': '/root'}"),
    ('{"api_key": "abc", "port": 1}', '{"api_key": "***", "port": 1}'),
    ("OpenAI(api_key=sk-abc, password=hunter2)", "OpenAI(api_key=***, password=***)"),
    (f"token {HF} in a log line", "token *** in a log line"),
    ("openai sk-proj-AbCdEfGhIjKlMnOpQrSt, github ghp_0123456789abcdefghijABCDEFGHIJ012345",
     "openai ***, github ***"),
    ("aws AKIAIOSFODNN7EXAMPLE done", "aws *** done"),
    # issue 13's trial: the forms it missed
    ("DB_PASS=t13pw MYSQL_PWD=t13pwd SENTRY_DSN=https://k@s.io/1 python -m sglang.launch_server",
     "DB_PASS=*** MYSQL_PWD=*** SENTRY_DSN=*** python -m sglang.launch_server"),
    ("redis://:t13pw@cache:6379/0 and postgres://u:t13pw@db/x", "redis://:***@cache:6379/0 and postgres://u:***@db/x"),
    ("dsn https://t13dsnkey0123@o1.ingest.sentry.io/42", "dsn https://***@o1.ingest.sentry.io/42"),
    ("curl -H 'X-Api-Key: t13hdr' -H 'X-Auth-Token: t13tok' -H 'x-goog-api-key: t13g'",
     "curl -H 'X-Api-Key: ***' -H 'X-Auth-Token: ***' -H 'x-goog-api-key: ***'"),
    ("X-Auth: Bearer t13bearer0123", "X-Auth: Bearer ***"),
    ("Cookie: session=t13c; csrftoken=t13d", "Cookie: ***"),
    ("password: t13yaml\n  hf_token: hf-t13x", "password: ***\n  hf_token: ***"),
    ("password=t13kw, secret: 't13 q'", "password=***, secret: '***'"),
    ('{"token": "t13json", "secret": "t13s", "password": "t13p", "n": 1}',
     '{"token": "***", "secret": "***", "password": "***", "n": 1}'),
    ("{'secret': 't13repr', 'db_pass': 't13r2'}", "{'secret': '***', 'db_pass': '***'}"),
    ("f(token=t13abc1, auth=t13abc2)", "f(token=***, auth=***)"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0MTMifQ.c2lnbmF0dXJl_-x ok", "jwt *** ok"),
    ("key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEt13\nt13b64==\n-----END RSA PRIVATE KEY-----\nafter",
     "key:\n-----BEGIN RSA PRIVATE KEY-----\n***\n-----END RSA PRIVATE KEY-----\nafter"),
    ('"pem": "-----BEGIN PRIVATE KEY-----\\nMIIEt13\\n-----END PRIVATE KEY-----"',
     '"pem": "-----BEGIN PRIVATE KEY-----***-----END PRIVATE KEY-----"'),
    ("cut: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU", "cut: -----BEGIN OPENSSH PRIVATE KEY-----\n***"),
    # a secret flag after an unbalanced quote (an error message quoting a command that does not parse)
    ("got \"python -m x --model-path '/m --api-key t13quoteERR999\": unbalanced quote",
     "got \"python -m x --model-path '/m --api-key ***\": unbalanced quote"),
    ("...\"server --api-key=t13quoteERR888' --model-path\"", "...\"server --api-key=***' --model-path\""),
    ("--api-key 't13open --port 1", "--api-key '*** --port 1"),
])
def test_text_forms_without_learning(text, want):
    assert Redactor().text(text) == want


@pytest.mark.parametrize("text", [
    "python -m sglang.launch_server --speculative-eagle-topk 1 --kv-cache-dtype fp8_e5m2 --max-total-tokens 4096",
    "--speculative-token-map /models/draft/token_map.pt --ssl-keyfile /etc/key.pem --tokenizer-path /m",
    "Decode batch. #running-req: 1, #token: 4096, token usage: 0.01, accept len: 1.00, gen throughput (token/s): 9",
    "https://huggingface.co/org/model and http://localhost:30000/generate",
    "the mask-attention-something and task-0123456789abcdefgh stay",  # sk- inside a word is no key
    "TOKENIZERS_PARALLELISM=false HF_HOME=/data/hf python -m x",
    "fc.weight torch.Size([160, 480]) model.embed_tokens.weight",
    # engine source shown by `workbench source show`: code, not settings
    "        add_api_key_middleware(app, api_key=server_args.api_key)",
    "    client = OpenAI(api_key=api_key, base_url=url); x = f(api_key=None); y = g(hf_token=get_token())",
    '    parser.add_argument("--api-key", type=str, default=ServerArgs.api_key)',
    '    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None; k(api_key=key if key else None)',
    "dict(kind='prefill', new_token=512, cached_token=0, token_usage=0.01)",
    'f"the draft is below the {ctx}-token context the server"',
    "raise LaunchCommandError(msg, token=i); DecodeState(last_token=tok)",
    # issue 13: the look-alikes of the new kinds and forms
    "PWD=/root OLDPWD=/tmp PATH=/usr/bin:/bin HOME=/root SSH_AUTH_SOCK=/tmp/ssh-x/agent.1 XDG_RUNTIME_DIR=/run/user/0",
    "sampling_params max_new_tokens=8, new_token=512",
    "    api_key: Optional[str] = None\n    hf_token: str | None = None\n    def f(password: str, token: int):",
    '{"token": 12, "password": "", "secret": null}',
    "ssh://root@gpu-box:22 and git+ssh://git@github.com/org/repo",
    "Decode batch. #token: 4096, token usage: 0.01",
    "python -m sglang.launch_server --speculative-eagle-topk 1 --model-path '/m --port 1",
])
def test_look_alikes_are_left_alone(text):
    assert Redactor().text(text) == text


def test_learned_values_are_redacted_wherever_they_appear():
    r = Redactor()
    r.learn_argv(["HF_TOKEN=" + HF, "python", "-m", "sglang.launch_server", "--api-key", KEY,
                  "--admin-api-key=admin-secret-42"])
    r.learn_env({"MY_SECRET": MINE, "HOME": "/root", "SHORT_KEY": "1"})
    log = f"server_args=ServerArgs(api_key='{KEY}', admin_api_key='admin-secret-42') env {MINE}; {HF}"
    out = r.text(log)
    for value in (KEY, "admin-secret-42", MINE, HF):
        assert value not in out
    assert out.count(PLACEHOLDER) == 4
    # a short value is redacted in its own slot only: "1" stays "1" in ordinary text
    assert r.text("took 1 s") == "took 1 s"
    assert r.env({"SHORT_KEY": "1"}) == {"SHORT_KEY": PLACEHOLDER}
    assert r.learned == 4


def test_learned_value_containing_another_is_replaced_whole():
    r = Redactor(["abcdef", "abcdefghij"])
    assert r.text("x abcdefghij y abcdef") == "x *** y ***"


def test_argv_env_and_nested_json():
    r = Redactor()
    argv = ["python", "-m", "sglang.launch_server", "--api-key", KEY, "--hf-token=xyz", "--port", "30000"]
    assert r.argv(argv) == ["python", "-m", "sglang.launch_server", "--api-key", PLACEHOLDER, "--hf-token=***",
                            "--port", "30000"]
    assert argv[4] == KEY  # a copy: the caller's argv is untouched
    assert r.env({"HF_TOKEN": "a", "PATH": "/bin", "PROXY": "http://u:p@h/"}) == {
        "HF_TOKEN": PLACEHOLDER, "PATH": "/bin", "PROXY": "http://u:***@h/"}
    doc = {"server_info": {"api_key": KEY, "admin_api_key": None, "new_token": 12, "port": 30000},
           "launches": [{"launch_command": f"python -m x --api-key {KEY}"}],
           "env": {"HF_TOKEN": "abc", "HOME": "/root"}, "tuple": ("a", f"{KEY}")}
    out = r.obj(doc)
    assert out == {"server_info": {"api_key": PLACEHOLDER, "admin_api_key": None, "new_token": 12, "port": 30000},
                   "launches": [{"launch_command": "python -m x --api-key ***"}],
                   "env": {"HF_TOKEN": PLACEHOLDER, "HOME": "/root"}, "tuple": ("a", PLACEHOLDER)}
    assert doc["server_info"]["api_key"] == KEY


def test_env_prefix_and_environment_with_the_new_kinds():
    """A server started with ``DB_PASS=…`` (issue 13's trial): the launch command's display and
    the environment the executed notebooks show (``Redactor.env``) never carry the value."""
    c = LaunchCommand.parse("DB_PASS=t13envPW1 SENTRY_DSN=https://t13dsn99@s.io/1 python -m sglang.launch_server "
                            "--model-path /m")
    assert c.to_display(Redactor()) == "DB_PASS=*** SENTRY_DSN=*** python -m sglang.launch_server --model-path /m"
    env = {"MYSQL_PWD": "t13envPW2", "PGPASS": "t13envPW3", "SESSION_COOKIE": "t13c=1", "PWD": "/root",
           "OLDPWD": "/tmp", "DATABASE_URL": "postgres://app:t13envPW4@db/x", "SSH_AUTH_SOCK": "/tmp/agent.1"}
    assert Redactor().env(env) == {"MYSQL_PWD": PLACEHOLDER, "PGPASS": PLACEHOLDER, "SESSION_COOKIE": PLACEHOLDER,
                                   "PWD": "/root", "OLDPWD": "/tmp", "DATABASE_URL": "postgres://app:***@db/x",
                                   "SSH_AUTH_SOCK": "/tmp/agent.1"}
    r = Redactor()
    r.learn_launch(c)
    assert r.text("DB said: bad password t13envPW1") == "DB said: bad password ***"


def test_redacting_stream_holds_a_private_key_block_printed_line_by_line():
    sink = io.StringIO()
    stream = RedactingStream(sink, Redactor())
    for line in ("before", "-----BEGIN EC PRIVATE KEY-----", "MHcCAQEEIt13body", "t13body2==",
                 "-----END EC PRIVATE KEY-----", "after"):
        print(line, file=stream)
    stream.flush()
    out = sink.getvalue()
    assert "t13body" not in out
    assert out == "before\n-----BEGIN EC PRIVATE KEY-----\n***\n-----END EC PRIVATE KEY-----\nafter\n"


def test_launch_display_keeps_the_real_command_for_launching():
    c = LaunchCommand.parse(f"HF_TOKEN={HF} python -m sglang.launch_server --model-path /m --api-key {KEY} "
                            "--ssl-keyfile-password=pw --speculative-eagle-topk 1")
    assert c.to_display(Redactor()) == ("HF_TOKEN=*** python -m sglang.launch_server --model-path /m --api-key *** "
                                        "--ssl-keyfile-password=*** --speculative-eagle-topk 1")
    assert KEY in c.to_string() and KEY in c.exec_argv and c.launch_env() == {"HF_TOKEN": HF}


def test_redacting_stream_holds_partial_lines_until_complete():
    r = Redactor([KEY])
    sink = io.StringIO()
    stream = RedactingStream(sink, r)
    stream.write(f"corrected: --api-key {KEY[:10]}")
    assert sink.getvalue() == ""  # the line is not complete yet: half a key is never shown
    stream.write(f"{KEY[10:]} --port 1\nnext ")
    assert sink.getvalue() == "corrected: --api-key *** --port 1\n"
    stream.flush()
    assert sink.getvalue().endswith("next ")


def test_redactor_never_raises_on_odd_input():
    r = Redactor()
    assert r.text(None) is None and r.text(5) == 5 and r.obj({1: b"x", "k": 1.5}) == {1: b"x", "k": 1.5}
    r.learn_value(None)
    r.learn_env(None)
    assert r.argv([]) == [] and r.env(None) is None


def test_html_redaction_leaves_code_alone_and_cleans_the_text():
    """The export's redaction: plotly.js byte for byte (the text rules WOULD rewrite it:
    ``credentials=e.credentials`` looks like an assignment), other scripts only for learned values
    and token shapes, the text with every rule."""
    import plotly.offline

    from workbench.report.html import _redact_html

    js = plotly.offline.get_plotlyjs()
    r = Redactor([MINE])
    html = (f"<html><head><script>{js}</script><style>a{{b:c}}</style></head><body>"
            f"<pre>--api-key {KEY} HF_TOKEN=abc {MINE}</pre>"
            f"<script>o.credentials=e1; t='{HF}'; u='{MINE}';</script>"
            "</body></html>")
    assert r.text("o.credentials=e1;") != "o.credentials=e1;"  # what the text rules would do to code
    out = _redact_html(html, js, r)
    assert js in out and out.count(js) == 1
    assert "<pre>--api-key *** HF_TOKEN=*** ***</pre>" in out
    assert "<script>o.credentials=e1; t='***'; u='***';</script>" in out
    for value in (KEY, HF, MINE):
        assert value not in out


def test_verdict_writer_redacts(tmp_path):
    from workbench.report.verdict import write_verdict_json

    verdict = {"root_cause": {"rule": "r"}, "hypotheses": [], "acceptance": {"before": {"accept_length": 1.0},
               "after": {"accept_length": 2.0}}, "probe": {"observed_hidden_size": 1, "expected_hidden_size": 3},
               "fix": {"launch_command": f"python -m sglang.launch_server --api-key {KEY}"}, "restarts": 1,
               "duration_s": 1.0, "restore": {"actions": [f"relaunched: python -m x --api-key={KEY}"]}}
    path = write_verdict_json(tmp_path / "v.json", verdict, redactor=Redactor())
    text = path.read_text()
    assert KEY not in text
    doc = json.loads(text)
    assert doc["fix"]["launch_command"] == "python -m sglang.launch_server --api-key ***"
    assert doc["restore"]["actions"] == ["relaunched: python -m x --api-key=***"]


def test_cli_output_is_redacted_doctor_corrected_launch_command(cli, tmp_path):
    """``workbench doctor --launch`` with a key (the wrong algorithm, so a corrected launch
    command is printed): the key never appears, in text or JSON, and the flag does."""
    from workbench.sandbox_box import sandbox_launch_command

    command = sandbox_launch_command(port=31999) + f" --api-key {KEY} --ssl-keyfile-password=pw-{MINE}"
    code, out, err = cli("doctor", "--launch", command)
    assert code == 1, err  # algorithm-mismatch is an error finding
    assert "corrected launch command:" in out and "--api-key ***" in out and "--ssl-keyfile-password=***" in out
    assert KEY not in out + err and MINE not in out + err
    # the report's JSON (what --json prints) is redacted; what would be launched keeps the real key
    from remote import connect
    from workbench.doctor.run import run_doctor

    with connect("local") as box:
        report = run_doctor(box, LaunchCommand.parse(command))
    as_json = json.dumps(report.to_dict())
    assert "--api-key ***" in report.to_dict()["corrected_launch_command"] and KEY not in as_json
    assert KEY in report.corrected_launch()


def test_cli_unparseable_launch_commands_never_echo_the_key(cli):
    """Issue 13 item 3: a launch command with an unbalanced quote makes an error message that
    quotes the command (``runbook preflight -p launch_command``: the parameter check;
    ``doctor --launch``: the quote excerpt, cut from the redacted text). The planted keys never
    reach stdout or stderr; the errors still say what is wrong."""
    code, out, err = cli("runbook", "preflight", "-p", "launch_command",
                         "python -m sglang.launch_server --model-path '/m --api-key t13quoteERR999")
    assert code == 2, err
    assert "unbalanced quote" in err and "--api-key ***" in err
    assert "t13quoteERR999" not in out + err and "ERR999" not in out + err
    code, out, err = cli("doctor", "--launch", "python -m sglang.launch_server --api-key=t13quoteERR888 --model-path '/m")
    assert code == 2, err
    assert "unbalanced quote" in err and "--model-path '/m" in err
    assert "t13quoteERR888" not in out + err and "ERR888" not in out + err


def test_launch_error_excerpt_is_cut_from_the_redacted_command():
    from workbench.engine.launch import LaunchCommandError

    with pytest.raises(LaunchCommandError) as exc:
        LaunchCommand.parse("python -m sglang.launch_server --api-key=t13quoteERR777 --model-path '/m")
    assert "ERR777" not in str(exc.value) and "=*** --model-path '/m" in str(exc.value)


def test_cli_doctor_never_moves_a_secret_flags_value_into_another_flag(cli):
    """Issue 13 item 4: ``--hf-token`` (not an SGLang 0.5.23 flag) once got "did you mean
    --max-prefill-tokens?" with a fix carrying its value there. A secret flag gets only a secret
    flag as its replacement, or none; an ordinary typo still gets its suggestion."""
    code, out, err = cli("doctor", "--launch", "python -m sglang.launch_server --model-path /m "
                         "--hf-token=t13hfTOKEN777 --speculative-algoritm EAGLE3")
    assert "launch-flag-unknown" in out, out + err
    assert "did you mean --speculative-algorithm?" in out
    assert "--hf-token, --speculative-algoritm: not flags of sglang" in out  # the message reads as written
    assert "--max-prefill-tokens" not in out + err and "t13hfTOKEN777" not in out + err
