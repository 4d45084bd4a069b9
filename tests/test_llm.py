"""The LLM client: spec parsing, retries, timeouts, concurrency, key/endpoint checks, model
choice and the replay provider. Everything runs on loopback: the real openai and anthropic SDKs
talk to `ReplayServer`, and a fake transport exercises the seam; no test needs the network."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter

import pytest

from warpforge.errors import ConfigError, WarpforgeError
from warpforge.propose import llm
from warpforge.propose.llm import (
    PRICES,
    Completion,
    LLMClient,
    LLMError,
    ModelSpec,
    OpenAITransport,
    Reply,
    TransientError,
    parse_model_specs,
)
from warpforge.propose.replay import RecordedReplies, ReplayServer

MESSAGES = [{"role": "system", "content": "You write CUDA kernels."},
            {"role": "user", "content": "Write a softmax kernel."}]


@pytest.fixture(autouse=True)
def _no_real_endpoints(monkeypatch):
    """No key or endpoint of the machine running the tests may leak in, and no proxy may catch loopback."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
                 "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def openai_client(server: ReplayServer, model: str = "served-model", **kwargs) -> LLMClient:
    spec = ModelSpec("openai", model, base_url=server.base_url, price_in_per_mtok=2.0, price_out_per_mtok=10.0)
    kwargs.setdefault("backoff_s", 0.01)
    return LLMClient([spec], **kwargs)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- parse_model_specs ---------------------------------------------------------------------------

def test_parse_single_model_with_table_price():
    [spec] = parse_model_specs(["openai:gpt-4o"])
    assert (spec.provider, spec.model, spec.base_url, spec.weight) == ("openai", "gpt-4o", None, 1.0)
    assert spec.name == "openai:gpt-4o"
    assert (spec.price_in_per_mtok, spec.price_out_per_mtok) == PRICES["gpt-4o"]


def test_parse_dated_snapshot_costs_its_base_model():
    [spec] = parse_model_specs(["anthropic:claude-sonnet-4-20250514"])
    assert (spec.price_in_per_mtok, spec.price_out_per_mtok) == PRICES["claude-sonnet-4"]
    [mini] = parse_model_specs(["openai:gpt-4o-mini-2024-07-18"])
    assert (mini.price_in_per_mtok, mini.price_out_per_mtok) == PRICES["gpt-4o-mini"]


def test_parse_ensemble_weights_colons_and_base_url():
    specs = parse_model_specs(["openai:gpt-4o@2", "openai:qwen2.5-coder:32b@0.5"], base_url="http://localhost:11434/v1")
    assert [(s.model, s.weight) for s in specs] == [("gpt-4o", 2.0), ("qwen2.5-coder:32b", 0.5)]
    assert all(s.base_url == "http://localhost:11434/v1" for s in specs)
    # a local endpoint is free unless told otherwise
    assert all(s.price_in_per_mtok == s.price_out_per_mtok == 0.0 for s in specs)


def test_parse_explicit_prices_and_unknown_models():
    specs = parse_model_specs(["openai:my-model", "openai:gpt-4o", "replay:r.jsonl"],
                              prices={"openai:my-model": (1.0, 3.0), "gpt-4o": (0.5, 0.5)})
    assert [(s.price_in_per_mtok, s.price_out_per_mtok) for s in specs] == [(1.0, 3.0), (0.5, 0.5), (0.0, 0.0)]
    assert parse_model_specs(["anthropic:some-future-model"])[0].price_in_per_mtok == 0.0
    assert parse_model_specs(["replay:r.jsonl"], base_url="http://x/v1")[0].base_url is None


@pytest.mark.parametrize("text", ["gpt-4o", "ollama:llama3", "openai:", "openai:gpt-4o@", "openai:gpt-4o@fast",
                                  "openai:gpt-4o@0", "openai:gpt-4o@-1", "openai:gpt-4o@nan", ":gpt-4o"])
def test_parse_bad_syntax_says_the_accepted_forms(text):
    with pytest.raises(ConfigError) as info:
        parse_model_specs([text])
    message = str(info.value)
    assert "\n" not in message
    assert "PROVIDER:MODEL" in message or "positive number" in message


def test_parse_refuses_empty_duplicates_and_one_url_for_two_providers():
    with pytest.raises(ConfigError, match="PROVIDER:MODEL"):
        parse_model_specs([])
    with pytest.raises(ConfigError, match="twice"):
        parse_model_specs(["openai:gpt-4o", "openai:gpt-4o@2"])
    with pytest.raises(ConfigError, match="base-url"):
        parse_model_specs(["openai:a", "anthropic:b"], base_url="http://localhost:8000/v1")


def test_llm_error_is_a_warpforge_error():
    assert issubclass(LLMError, WarpforgeError)


# -- complete() through the real openai SDK --------------------------------------------------------

def test_complete_returns_text_tokens_and_cost():
    with ReplayServer([{"reply": "```python\nclass ModelNew: ...\n```", "prompt_tokens": 1000,
                        "completion_tokens": 500}]) as server:
        client = openai_client(server)
        completion = client.complete(MESSAGES, max_tokens=1234, temperature=0.2)
    assert isinstance(completion, Completion)
    assert completion.text == "```python\nclass ModelNew: ...\n```"
    assert completion.model == "openai:served-model"
    assert (completion.prompt_tokens, completion.completion_tokens) == (1000, 500)
    assert completion.cost_usd == pytest.approx(1000 * 2.0 / 1e6 + 500 * 10.0 / 1e6)
    assert completion.finish_reason == "stop"
    assert completion.seconds > 0
    [body] = server.requests
    assert body["model"] == "served-model" and body["messages"] == MESSAGES
    assert body["max_tokens"] == 1234 and body["temperature"] == 0.2  # a local server gets max_tokens
    usage = client.usage["openai:served-model"]
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens, usage.errors) == (1, 1000, 500, 0)
    assert usage.cost_usd == pytest.approx(completion.cost_usd)


def test_tokens_are_estimated_when_the_server_does_not_say_and_length_is_reported():
    with ReplayServer([{"reply": "x" * 400, "finish_reason": "length"}]) as server:
        completion = openai_client(server).complete(MESSAGES)
    assert completion.completion_tokens == 100
    assert completion.prompt_tokens == len("You write CUDA kernels.\nWrite a softmax kernel.") // 4
    assert completion.finish_reason == "length"


def test_openai_base_url_from_the_environment(monkeypatch):
    with ReplayServer([{"reply": "from env"}]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        client = LLMClient(parse_model_specs(["openai:served-model"]))
        client.check()
        assert client.complete(MESSAGES).text == "from env"
    assert "max_tokens" in server.requests[0]


def test_hosted_openai_gets_max_completion_tokens(monkeypatch):
    """The request shape for api.openai.com (which deprecated max_tokens), sent to the loopback server instead."""
    import openai

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ReplayServer([{"reply": "a"}]) as server:
        transport = OpenAITransport(ModelSpec("openai", "gpt-4o"), 5.0)
        transport._client = openai.OpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0)
        LLMClient([transport.spec], transport=lambda spec, timeout: transport).complete(MESSAGES, max_tokens=77)
    [body] = server.requests
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body and body["temperature"] == 0.7


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_model_that_refuses_temperature_is_asked_without_it(provider):
    refusal = {"status": 400, "reply": "`temperature` is deprecated for this model."}
    with ReplayServer([refusal, {"reply": "one"}, {"reply": "two"}]) as server:
        client = LLMClient([ModelSpec(provider, "reasoner", base_url=server.base_url)], max_retries=0)
        assert client.complete(MESSAGES, temperature=0.3).text == "one"
        assert client.complete(MESSAGES, temperature=0.3).text == "two"  # remembered: no second refusal
    first, second, third = server.requests
    assert first["temperature"] == 0.3 and "temperature" not in second and "temperature" not in third
    assert client.usage[f"{provider}:reasoner"].errors == 0


# -- retries ----------------------------------------------------------------------------------------

def test_429_then_success_is_retried():
    with ReplayServer([{"status": 429}, {"reply": "ok"}]) as server:
        client = openai_client(server)
        assert client.complete(MESSAGES).text == "ok"
    assert len(server.requests) == 2
    assert client.usage["openai:served-model"].retries == 1


def test_retry_after_is_honoured():
    with ReplayServer([{"status": 429, "retry_after_s": 0.4}, {"reply": "ok"}]) as server:
        started = time.monotonic()
        assert openai_client(server, backoff_s=0.001).complete(MESSAGES).text == "ok"
    assert time.monotonic() - started >= 0.4


def test_500_every_time_gives_llm_error_after_max_retries():
    with ReplayServer([{"status": 500}] * 3 + [{"reply": "never served"}]) as server:
        client = openai_client(server, max_retries=2)
        with pytest.raises(LLMError, match="HTTP 500") as info:
            client.complete(MESSAGES)
    assert len(server.requests) == 3
    assert "\n" not in str(info.value) and "3 times" in str(info.value)
    usage = client.usage["openai:served-model"]
    assert (usage.calls, usage.errors, usage.retries) == (0, 1, 2)


def test_400_is_not_retried():
    with ReplayServer([{"status": 400, "reply": "max_tokens is too large"}, {"reply": "ok"}]) as server:
        with pytest.raises(LLMError, match="HTTP 400.*max_tokens is too large"):
            openai_client(server).complete(MESSAGES)
    assert len(server.requests) == 1


def test_a_slow_reply_times_out_and_is_retried():
    # "fast" can only come from the second request: the first was given up (a duration here would
    # pass or fail with the machine's load)
    with ReplayServer([{"delay_s": 2.0, "reply": "late"}, {"reply": "fast"}]) as server:
        assert openai_client(server, timeout_s=0.3).complete(MESSAGES).text == "fast"
    assert len(server.requests) == 2


def test_timeouts_every_time_give_llm_error():
    with ReplayServer([{"delay_s": 2.0, "reply": "late"}] * 2) as server:
        with pytest.raises(LLMError, match="no reply within 0.3 s"):
            openai_client(server, timeout_s=0.3, max_retries=1).complete(MESSAGES)
    assert len(server.requests) == 2


def test_backoff_is_exponential_with_jitter(monkeypatch):
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        def chat(self, messages, *, max_tokens, temperature):
            self.calls += 1
            if self.calls <= 4:
                raise TransientError("HTTP 503: busy")
            return Reply("done", 3, 4, "stop")

        def ping(self):
            pass

    sleeps: list[float] = []
    monkeypatch.setattr(llm.time, "sleep", sleeps.append)
    flaky = Flaky()
    client = LLMClient([ModelSpec("openai", "m")], backoff_s=1.0, transport=lambda spec, timeout: flaky)
    assert client.complete(MESSAGES).text == "done"
    assert len(sleeps) == 4
    for attempt, delay in enumerate(sleeps):
        assert 0.5 * 2 ** attempt <= delay <= 1.5 * 2 ** attempt


def test_concurrency_limit_holds():
    def run(concurrency: int) -> int:
        with ReplayServer([{"delay_s": 0.2, "reply": "ok"}] * 6) as server:
            client = openai_client(server, concurrency=concurrency)
            threads = [threading.Thread(target=client.complete, args=(MESSAGES,)) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(server.requests) == 6 and client.usage["openai:served-model"].calls == 6
            return server.max_in_flight

    assert run(2) == 2
    assert run(6) > 2  # the measurement can see more when the client allows it


# -- anthropic through the real SDK -----------------------------------------------------------------

def test_anthropic_puts_the_system_message_in_system_and_reads_usage():
    with ReplayServer([{"status": 529}, {"reply": "kernel", "prompt_tokens": 11, "completion_tokens": 7,
                                          "finish_reason": "length"}]) as server:
        spec = ModelSpec("anthropic", "claude-test", base_url=server.base_url, price_in_per_mtok=3.0,
                         price_out_per_mtok=15.0)
        client = LLMClient([spec], backoff_s=0.01)
        client.check()
        completion = client.complete(MESSAGES, max_tokens=99)
    assert (completion.text, completion.prompt_tokens, completion.completion_tokens) == ("kernel", 11, 7)
    assert completion.finish_reason == "length"
    assert completion.cost_usd == pytest.approx((11 * 3.0 + 7 * 15.0) / 1e6)
    body = server.requests[-1]
    assert body["system"] == "You write CUDA kernels."
    assert body["messages"] == [{"role": "user", "content": "Write a softmax kernel."}]
    assert body["max_tokens"] == 99 and body["temperature"] == 0.7
    assert [p for p in server.paths if p.startswith("POST")] == ["POST /v1/messages"] * 2


# -- check() ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("provider, env", [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")])
def test_check_names_the_missing_key(provider, env):
    client = LLMClient([ModelSpec(provider, "some-model")])
    with pytest.raises(ConfigError, match=env):
        client.check()
    with pytest.raises(LLMError, match=env):  # and a run that skipped check() fails per call, not by crashing
        client.complete(MESSAGES)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_check_says_cannot_reach_a_closed_port(provider):
    url = f"http://127.0.0.1:{closed_port()}"
    client = LLMClient([ModelSpec(provider, "m", base_url=url + ("/v1" if provider == "openai" else ""))])
    with pytest.raises(ConfigError, match=f"cannot reach {url}.*start the server or fix --base-url"):
        client.check()


def test_check_passes_against_a_running_server_with_no_key():
    with ReplayServer([]) as server:
        LLMClient([ModelSpec("openai", "m", base_url=server.base_url)]).check()
    assert server.paths == ["GET /v1/models"]


@pytest.mark.parametrize("provider, env", [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")])
def test_the_key_is_sent_and_a_wrong_one_is_reported(monkeypatch, provider, env):
    with ReplayServer([{"reply": "ok"}], api_key="sk-right") as server:
        monkeypatch.setenv(env, "sk-wrong")
        with pytest.raises(ConfigError, match=f"refused the key.*{env}"):
            LLMClient([ModelSpec(provider, "m", base_url=server.base_url)]).check()
        with pytest.raises(LLMError, match="HTTP 401"):  # not retried: one request
            LLMClient([ModelSpec(provider, "m", base_url=server.base_url)]).complete(MESSAGES)
        assert len(server.requests) == 1
        monkeypatch.setenv(env, "sk-right")
        client = LLMClient([ModelSpec(provider, "m", base_url=server.base_url)])
        client.check()
        assert client.complete(MESSAGES).text == "ok"


# -- choosing models --------------------------------------------------------------------------------

def specs_abc(*weights: float) -> list[ModelSpec]:
    return [ModelSpec("openai", name, base_url="http://127.0.0.1:9/v1", weight=w) for name, w in zip("abc", weights)]


def test_weighted_choice_follows_weights_and_the_seed():
    client = LLMClient(specs_abc(3, 1), seed=1)
    picks = Counter(client.choose().model for _ in range(4000))
    assert 0.72 < picks["a"] / 4000 < 0.78

    def sequence(seed: int) -> list[str]:
        client = LLMClient(specs_abc(1, 1), seed=seed)
        return [client.choose().model for _ in range(30)]

    assert sequence(7) == sequence(7)
    assert sequence(7) != sequence(8)


def test_bandit_tries_every_model_then_favours_the_one_that_improves():
    client = LLMClient(specs_abc(1, 1, 1), selection="bandit", seed=0)
    assert {client.choose().model for _ in range(3)} == {"a", "b", "c"}  # before any result is back
    for _ in range(300):
        spec = client.choose()
        client.record(spec.name, improved=spec.model == "b")
    usage = client.usage
    assert usage["openai:b"].chosen > 0.6 * 303
    assert usage["openai:b"].improved == usage["openai:b"].recorded > 0
    client.record("b", improved=True)  # the bare model name works too
    client.record("openai:not-in-the-ensemble", improved=True)  # ignored
    assert client.usage["openai:b"].recorded == usage["openai:b"].recorded + 1


def test_bandit_without_feedback_spreads_evenly():
    client = LLMClient(specs_abc(1, 1), selection="bandit")
    picks = Counter(client.choose().model for _ in range(100))
    assert abs(picks["a"] - picks["b"]) <= 2


def test_bad_client_settings_are_config_errors():
    with pytest.raises(ConfigError, match="weight or bandit"):
        LLMClient(specs_abc(1), selection="greedy")
    with pytest.raises(ConfigError):
        LLMClient([])
    with pytest.raises(ConfigError):
        LLMClient(specs_abc(1), concurrency=0)


# -- the replay provider ----------------------------------------------------------------------------

def write_replies(tmp_path, entries) -> str:
    path = tmp_path / "replies.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return str(path)


def ask(client: LLMClient, prompt: str) -> str:
    return client.complete([{"role": "user", "content": prompt}]).text


def test_replay_serves_matches_and_then_entries_in_order(tmp_path):
    path = write_replies(tmp_path, [{"match": "soft(max|plus)", "reply": "S"}, {"reply": "first"},
                                    {"reply": "second", "finish_reason": "length", "completion_tokens": 9}])
    client = LLMClient(parse_model_specs([f"replay:{path}"]))
    assert ask(client, "a gemm kernel") == "first"
    assert ask(client, "a softmax kernel") == "S"
    completion = client.complete([{"role": "user", "content": "anything"}])
    assert (completion.text, completion.finish_reason, completion.completion_tokens) == ("second", "length", 9)
    assert completion.prompt_tokens == len("anything") // 4 and completion.cost_usd == 0.0
    with pytest.raises(LLMError, match=f"the recorded replies in {path} are used up"):
        ask(client, "more")


def test_replay_match_looks_at_the_last_user_message_only(tmp_path):
    path = write_replies(tmp_path, [{"match": "gemm", "reply": "G"}])
    client = LLMClient(parse_model_specs([f"replay:{path}"]))
    with pytest.raises(LLMError, match="none of the 1 unused"):
        client.complete([{"role": "user", "content": "gemm"}, {"role": "assistant", "content": "gemm"},
                         {"role": "user", "content": "now softmax"}])
    assert ask(client, "now gemm") == "G"


def test_replay_is_deterministic(tmp_path):
    path = write_replies(tmp_path, [{"reply": str(i)} for i in range(5)] + [{"match": "x", "reply": "X"}])
    prompts = ["p", "x", "q", "x", "r", "x"]

    def replay() -> list[str]:
        client = LLMClient(parse_model_specs([f"replay:{path}"]))
        return [ask(client, p) for p in prompts]

    assert replay() == replay() == ["0", "1", "2", "3", "4", "X"]


def test_replay_injected_errors_are_retried(tmp_path):
    path = write_replies(tmp_path, [{"status": 503}, {"reply": "ok"}])
    client = LLMClient(parse_model_specs([f"replay:{path}"]), backoff_s=0.001)
    assert ask(client, "go") == "ok"
    assert client.usage[f"replay:{path}"].retries == 1


def test_replay_file_problems_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        LLMClient(parse_model_specs([f"replay:{tmp_path}/missing.jsonl"]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"reply": "ok"}\nnot json\n')
    with pytest.raises(ConfigError, match="line 2"):
        LLMClient(parse_model_specs([f"replay:{bad}"]))
    bad.write_text('{"match": "(", "reply": "x"}\n')
    with pytest.raises(ConfigError, match="regular expression"):
        LLMClient(parse_model_specs([f"replay:{bad}"]))
    bad.write_text('{"prompt": "no reply here"}\n')
    with pytest.raises(ConfigError, match="reply"):
        LLMClient(parse_model_specs([f"replay:{bad}"]))


def test_recorded_replies_are_taken_once_across_threads():
    replies = RecordedReplies([{"reply": str(i)} for i in range(200)])
    got: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(50):
            entry = replies.take("")
            assert entry is not None
            with lock:
                got.append(entry.reply)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=int) == [str(i) for i in range(200)]
    assert replies.take("") is None
