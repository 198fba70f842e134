"""The API rate limit (api/throttling.py): a sliding window over two fixed-window counters, on
the test settings' cache (Redis too with REDIS_URL), the throttle's clock set by the test."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import redis
from django.core.cache import cache

from api.throttling import TokenRateThrottle
from teams.models import ApiToken

START = 1_800_000_000.0  # the start of a minute, and of an hour
TOKEN = SimpleNamespace(auth=ApiToken(pk=7))  # what the throttle reads of a request
KEY = "throttle_token_token-7"


class Clock:
    def __init__(self, at: float):
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def clock():
    return Clock(START)


def ask(clock, request=TOKEN) -> TokenRateThrottle | None:
    """One request: None when allowed, else the throttle that refused it (DRF makes one each)."""
    throttle = TokenRateThrottle()
    throttle.timer = clock
    return None if throttle.allow_request(request, None) else throttle


def test_the_limit_holds_exactly_and_the_refusal_says_when_to_retry(clock, settings):
    settings.ACCELPLANE_API_RATE = "5/min"
    clock.at += 12
    assert [ask(clock) for _ in range(5)] == [None] * 5
    refused = ask(clock)
    assert refused is not None
    # The next minute counts these five at a weight falling from 1: one more fits once a
    # fifth of it has passed, 48 + 12 seconds from now.
    assert math.ceil(refused.wait()) == 60
    assert ask(clock, SimpleNamespace(auth=ApiToken(pk=8))) is None  # another token's own limit


def test_the_window_slides(clock, settings):
    settings.ACCELPLANE_API_RATE = "4/min"
    assert [ask(clock) for _ in range(4)] == [None] * 4
    clock.at += 60  # a new minute, the previous one still wholly inside the sliding window
    refused = ask(clock)
    assert refused is not None
    assert refused.wait() == pytest.approx(15)
    clock.at += 14.9
    assert ask(clock) is not None
    clock.at += 0.2
    assert ask(clock) is None
    clock.at += 120  # both minutes counted now are past
    assert [ask(clock) for _ in range(4)] == [None] * 4
    assert ask(clock) is not None


def test_refusals_do_not_count(clock, settings):
    settings.ACCELPLANE_API_RATE = "2/min"
    assert [ask(clock) is None for _ in range(10)] == [True, True] + [False] * 8
    assert cache.get(f"{KEY}:{int(START // 60)}") == 2
    clock.at += 120
    assert [ask(clock) is None for _ in range(3)] == [True, True, False]


def test_the_wait_while_the_previous_window_weighs(clock, settings):
    settings.ACCELPLANE_API_RATE = "10/min"
    assert [ask(clock) for _ in range(8)] == [None] * 8
    clock.at += 60 + 30  # half of the previous minute's 8 (4) and 6 more of this one
    assert [ask(clock) for _ in range(6)] == [None] * 6
    refused = ask(clock)
    assert refused is not None
    # Room for one more when the previous minute's 8 weigh 3: at 37.5 s into this one.
    assert refused.wait() == pytest.approx(7.5)


@pytest.mark.parametrize("rate", [10, 6000])
def test_the_state_is_two_counters_whatever_the_rate(clock, settings, rate):
    settings.ACCELPLANE_API_RATE = f"{rate}/h"
    for _ in range(rate):
        ask(clock)
    clock.at += 3600
    assert ask(clock) is not None
    hour = int(START // 3600)
    counters = cache.get_many([KEY, f"{KEY}:{hour - 1}", f"{KEY}:{hour}", f"{KEY}:{hour + 1}"])
    assert counters == {f"{KEY}:{hour}": rate, f"{KEY}:{hour + 1}": 0}


def test_sessions_and_anonymous_requests_have_their_own_keys(clock, settings):
    settings.ACCELPLANE_API_RATE = "1/min"
    user = SimpleNamespace(auth=None, user=SimpleNamespace(is_authenticated=True, pk=7))
    anonymous = SimpleNamespace(
        auth=None,
        user=SimpleNamespace(is_authenticated=False),
        headers={},
        META={"REMOTE_ADDR": "10.0.0.1"},
    )
    for request in (TOKEN, user, anonymous):
        assert ask(clock, request) is None
        assert ask(clock, request) is not None
    minute = int(START // 60)
    assert cache.get(f"throttle_token_user-7:{minute}") == 1
    assert cache.get(f"throttle_token_ip-10.0.0.1:{minute}") == 1


def test_on_redis_a_place_costs_one_round_trip_and_its_counter_expires(
    clock, settings, monkeypatch
):
    if not hasattr(cache, "incr_and_get"):
        pytest.skip("the test settings' cache is Redis only with REDIS_URL")
    settings.ACCELPLANE_API_RATE = "5/min"
    ask(clock)  # the window's first request makes its counter
    sent = []
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(connection, command, *args, **kwargs):
        sent.append(command)
        return send(connection, command, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    assert ask(clock) is None
    assert len(sent) == 1  # this window's count and the previous one's, together
    monkeypatch.undo()
    # Alive through the next window, where it weighs as the previous one, and no longer.
    key = cache.make_and_validate_key(f"{KEY}:{int(START // 60)}")
    assert 60 < redis.Redis.from_url(settings.REDIS_URL).ttl(key) <= 120
