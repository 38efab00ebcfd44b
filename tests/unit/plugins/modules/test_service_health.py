# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""service_health: a healthy service ends its wait, a dead one ends it at once, a slow one times out."""

from __future__ import annotations

import typing as t

from ansible_collections.inferops.blackwell.plugins.modules import service_health

ACTIVE = {"ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": "0"}


class FakeWaiter:
    """Unit states and health answers per round; the clock advances by each sleep."""

    def __init__(self, states: t.List[t.Dict[str, str]], answers: t.List[bool]) -> None:
        self.states, self.answers_seq, self.now, self.reads = states, answers, 0.0, 0

    def state(self, name: str) -> t.Dict[str, str]:
        state = self.states[min(self.reads, len(self.states) - 1)]
        self.reads += 1
        return state

    def answers(self, url: str, timeout: float) -> bool:
        return self.answers_seq.pop(0) if self.answers_seq else False

    def journal(self, name: str, lines: int) -> str:
        return "journal of %s" % name

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run(waiter: FakeWaiter, timeout: float = 60) -> t.List[t.Dict[str, t.Any]]:
    return service_health.wait(waiter, [{"name": "sglang-ar", "health_url": "http://127.0.0.1:30000/health"}],  # type: ignore[arg-type]
                               timeout=timeout, delay=5, journal_lines=10, clock=waiter.clock, sleep=waiter.sleep)


def test_a_service_that_answers_is_healthy_without_journal() -> None:
    result = run(FakeWaiter([ACTIVE], [False, False, True]))[0]
    assert result["healthy"] and result["reason"] == "" and result["journal"] == "" and result["seconds"] == 10.0


def test_a_failed_unit_ends_the_wait_at_once_with_its_journal() -> None:
    failed = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code", "NRestarts": "0"}
    waiter = FakeWaiter([ACTIVE, failed], [])
    result = run(waiter, timeout=1800)[0]
    assert not result["healthy"]
    assert result["reason"].startswith("the unit is failed (exit-code)")
    assert result["journal"] == "journal of sglang-ar"
    assert waiter.now == 0.0


def test_a_unit_waiting_for_its_automatic_restart_has_died() -> None:
    restarting = {"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code", "NRestarts": "0"}
    result = run(FakeWaiter([ACTIVE, ACTIVE, restarting], []), timeout=1800)[0]
    assert "about to restart it" in result["reason"] and result["seconds"] == 5.0


def test_a_unit_that_restarted_since_the_wait_began_crashed() -> None:
    restarted = dict(ACTIVE, NRestarts="1")
    result = run(FakeWaiter([ACTIVE, restarted], []), timeout=1800)[0]
    assert "restarted 1 time(s)" in result["reason"]


def test_a_service_that_never_answers_times_out() -> None:
    result = run(FakeWaiter([ACTIVE], []), timeout=20)[0]
    assert result["reason"] == "no healthy answer from http://127.0.0.1:30000/health within 20 s"
    assert result["seconds"] == 20.0


def test_parse_show() -> None:
    assert service_health.parse_show("ActiveState=active\nSubState=running\nNRestarts=0\n") == {
        "ActiveState": "active", "SubState": "running", "NRestarts": "0"}


def test_a_unit_already_waiting_for_its_restart_gets_that_restart() -> None:
    # a start request does not cut systemd's RestartSec short: the pending restart may succeed (the cause was fixed)
    waiting = {"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code", "NRestarts": "2"}
    restarted = dict(ACTIVE, NRestarts="3")
    assert run(FakeWaiter([waiting, waiting, waiting, restarted], [True]), timeout=1800)[0]["healthy"]


def test_a_unit_waiting_again_after_its_pending_restart_has_died() -> None:
    waiting = {"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code", "NRestarts": "2"}
    again = dict(waiting, NRestarts="3")
    result = run(FakeWaiter([waiting, waiting, dict(ACTIVE, NRestarts="3"), again], []), timeout=1800)[0]
    assert not result["healthy"] and result["reason"].startswith("the unit exited (exit-code)")
    result = run(FakeWaiter([waiting, dict(ACTIVE, NRestarts="4")], []), timeout=1800)[0]
    assert "restarted 1 time(s)" in result["reason"]
