"""Tests for bridge.tasks.when: reading schedule_task's `when`, and next firings across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.tasks.when import ACCEPTED_FORMS, Schedule, WhenError, next_fire, parse_when

BERLIN = ZoneInfo("Europe/Berlin")
# Europe/Berlin in 2026: clocks jump 02:00 → 03:00 on 29 March (01:00Z) and fall back 03:00 → 02:00 on
# 25 October (01:00Z). Both are Sundays.
# Wednesday 2026-11-25, 14:00 in Berlin (UTC+1): a day with no DST change near it.
NOW = datetime(2026, 11, 25, 13, 0, tzinfo=UTC)


def utc(year: int, month: int, day: int, hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def when(text: str, now: datetime = NOW, zone: str = "Europe/Berlin") -> Schedule:
    return parse_when(text, now=now, default_zone=zone)


def fire_of(text: str, now: datetime = NOW, zone: str = "Europe/Berlin") -> datetime:
    """The single firing of a one-shot `when`, in UTC."""
    schedule = when(text, now, zone)
    assert schedule.kind == "once"
    fire = next_fire(schedule, now)
    assert fire is not None
    return fire


def firings(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    result: list[datetime] = []
    for _ in range(count):
        fire = next_fire(schedule, after)
        assert fire is not None
        result.append(fire)
        after = fire
    return result


def refusal(text: str, now: datetime = NOW) -> str:
    with pytest.raises(WhenError) as caught:
        when(text, now)
    return str(caught.value)


# Cron expressions


def test_a_five_field_cron_expression_is_a_cron_schedule_in_the_default_zone() -> None:
    schedule = when("0 9 * * 1")
    assert schedule == Schedule("cron", "0 9 * * 1", "Europe/Berlin")
    # Monday 2026-11-30 09:00 in Berlin is 08:00Z.
    assert next_fire(schedule, NOW) == utc(2026, 11, 30, 8, 0)


def test_extra_spaces_in_a_cron_expression_are_dropped() -> None:
    assert when("  0   9 *  * 1-5 ").expression == "0 9 * * 1-5"


@pytest.mark.parametrize(
    "text",
    [
        "0 9 * * 1 America/New_York",
        "America/New_York 0 9 * * 1",
        "TZ=America/New_York 0 9 * * 1",
        "CRON_TZ=America/New_York 0 9 * * 1",
        "cron_tz=america/new_york 0 9 * * 1",
        "0 9 * * 1 america/new_york",
    ],
)
def test_a_zone_before_or_after_a_cron_expression_is_the_schedules_zone(text: str) -> None:
    schedule = when(text)
    assert schedule == Schedule("cron", "0 9 * * 1", "America/New_York")
    assert next_fire(schedule, NOW) == utc(2026, 11, 30, 14, 0)


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_cron_shorthands_are_their_five_field_expressions(text: str, expression: str) -> None:
    assert when(text) == Schedule("cron", expression, "Europe/Berlin")


def test_a_shorthand_takes_a_zone_too() -> None:
    assert when("@daily UTC") == Schedule("cron", "0 0 * * *", "UTC")


def test_reboot_is_refused_because_a_task_fires_at_a_time() -> None:
    assert "@reboot cannot be scheduled" in refusal("@reboot")


def test_an_unknown_shorthand_is_refused() -> None:
    assert "not a cron shorthand" in refusal("@fortnightly")


@pytest.mark.parametrize(("text", "count"), [("0 0 9 * * *", 6), ("0 0 9 * * * 2027", 7), ("0 9 *", 3)])
def test_a_cron_expression_without_five_fields_is_refused_with_the_fields_named(
    text: str, count: int
) -> None:
    message = refusal(text)
    assert f"has {count}" in message
    assert "5 fields (minute hour day-of-month month day-of-week)" in message
    assert ACCEPTED_FORMS in message


def test_a_bad_cron_field_is_named_in_the_refusal() -> None:
    message = refusal("99 9 * * *")
    assert "'99 9 * * *' is not a valid cron expression (Bad minute" in message


def test_a_cron_expression_for_a_day_that_never_comes_is_refused() -> None:
    assert "not a valid cron expression (Bad day-of-month" in refusal("0 0 31 2 *")
    # Valid field by field, but day 1 or 21 is never the last Monday of a month.
    assert "never fires" in refusal("0 0 */20 * 1L")


def test_describe_reads_a_cron_expression_out_with_its_zone() -> None:
    assert when("0 9 * * *").describe() == "at 09:00 every day (cron `0 9 * * *`, Europe/Berlin)"
    assert when("0 9 * * 1").describe() == "at 09:00 on Monday (cron `0 9 * * 1`, Europe/Berlin)"


# ISO dates and times


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("2026-11-26T09:00", "2026-11-26T09:00:00+01:00"),
        ("2026-11-26 09:00", "2026-11-26T09:00:00+01:00"),
        ("2026-11-26t09:00", "2026-11-26T09:00:00+01:00"),
        ("2026-11-26 09:00:30", "2026-11-26T09:00:30+01:00"),
        ("2026-11-26 9am", "2026-11-26T09:00:00+01:00"),
        ("2026-11-26 at 5:30 pm", "2026-11-26T17:30:00+01:00"),
        # An offset fixes the instant; it is stored as the zone's wall-clock time.
        ("2026-11-26T09:00+01:00", "2026-11-26T09:00:00+01:00"),
        ("2026-11-26T09:00:00+03:00", "2026-11-26T07:00:00+01:00"),
        ("2026-11-26T09:00Z", "2026-11-26T10:00:00+01:00"),
        ("2026-11-26 09:00 Europe/London", "2026-11-26T09:00:00+00:00"),
    ],
)
def test_an_iso_date_and_time_is_a_one_shot_schedule(text: str, expression: str) -> None:
    schedule = when(text)
    assert schedule.kind == "once"
    assert schedule.expression == expression


def test_describe_gives_a_one_shot_time_in_its_zone() -> None:
    assert when("2026-11-26 09:00").describe() == "once at 2026-11-26 09:00 (Europe/Berlin)"
    assert when("2026-11-26 09:00:30").describe() == "once at 2026-11-26 09:00:30 (Europe/Berlin)"


def test_a_date_without_a_time_is_refused_with_an_example_of_one() -> None:
    message = refusal("2026-11-26")
    assert "'2026-11-26' is a date without a time; add the time, e.g. '2026-11-26 09:00'" in message


def test_a_date_that_does_not_exist_is_refused() -> None:
    assert "not an ISO date and time" in refusal("2026-13-45 09:00")


def test_a_time_in_the_past_is_refused_saying_what_time_it_is() -> None:
    message = refusal("2026-11-25 13:00")
    assert "which is in the past (it is now 2026-11-25 14:00 in Europe/Berlin)" in message


def test_a_time_less_than_a_minute_past_fires_at_once() -> None:
    schedule = when("2026-11-25 13:59:30")
    assert next_fire(schedule, NOW) == NOW + timedelta(seconds=1)


# Relative times


@pytest.mark.parametrize(
    ("text", "delay"),
    [
        ("in 20 minutes", timedelta(minutes=20)),
        ("in 20 mins", timedelta(minutes=20)),
        ("in 20 min", timedelta(minutes=20)),
        ("in 20m", timedelta(minutes=20)),
        ("in a minute", timedelta(minutes=1)),
        ("in 2 hours", timedelta(hours=2)),
        ("in 1 hour", timedelta(hours=1)),
        ("in 3 hrs", timedelta(hours=3)),
        ("in 2h", timedelta(hours=2)),
        ("in an hour", timedelta(hours=1)),
        ("in 90 seconds", timedelta(seconds=90)),
        ("in 45 secs", timedelta(seconds=45)),
        ("in 10s", timedelta(seconds=10)),
        ("in 1 day", timedelta(days=1)),
        ("in 3 days", timedelta(days=3)),
        ("in 2d", timedelta(days=2)),
        ("in 2 weeks", timedelta(weeks=2)),
        ("in one week", timedelta(weeks=1)),
        ("in 1h30m", timedelta(minutes=90)),
        ("in 1 hour 30 minutes", timedelta(minutes=90)),
        ("in 1 day and 2 hours", timedelta(hours=26)),
        ("in 2 hours, 15 minutes", timedelta(minutes=135)),
        ("  IN   20   MINUTES ", timedelta(minutes=20)),
    ],
)
def test_in_a_duration_fires_that_long_from_now(text: str, delay: timedelta) -> None:
    assert fire_of(text) == NOW + delay


def test_a_duration_is_counted_from_a_now_with_microseconds_rounded_up_to_the_second() -> None:
    now = NOW + timedelta(microseconds=250_000)
    assert fire_of("in 20 minutes", now) == NOW + timedelta(minutes=20, seconds=1)


def test_a_duration_of_nothing_is_refused() -> None:
    assert "give a duration above zero" in refusal("in 0 minutes")


def test_an_unsupported_unit_is_refused_with_the_units_there_are() -> None:
    assert "seconds, minutes, hours, days or weeks" in refusal("in 2 months")


def test_a_duration_beyond_ten_years_is_refused() -> None:
    assert "more than 10 years ahead" in refusal("in 999999999 weeks")
    assert "more than 10 years ahead" in refusal("2040-01-01 09:00")


@pytest.mark.parametrize(
    ("text", "fire"),
    [
        ("tomorrow 9:00", utc(2026, 11, 26, 8, 0)),
        ("tomorrow at 9am", utc(2026, 11, 26, 8, 0)),
        ("Tomorrow At 9AM", utc(2026, 11, 26, 8, 0)),
        ("9am tomorrow", utc(2026, 11, 26, 8, 0)),
        ("tomorrow noon", utc(2026, 11, 26, 11, 0)),
        ("today 17:30", utc(2026, 11, 25, 16, 30)),
        ("tonight at 8pm", utc(2026, 11, 25, 19, 0)),
        ("today 17:30:15", utc(2026, 11, 25, 16, 30, 15)),
        # Without a day: today if that time is still ahead, else tomorrow (it is 14:00 in Berlin).
        ("at 18:00", utc(2026, 11, 25, 17, 0)),
        ("at 9", utc(2026, 11, 26, 8, 0)),
        ("13:00", utc(2026, 11, 26, 12, 0)),
        ("midnight", utc(2026, 11, 25, 23, 0)),
        ("at noon", utc(2026, 11, 26, 11, 0)),
    ],
)
def test_a_day_and_a_time_of_day_fire_then(text: str, fire: datetime) -> None:
    assert fire_of(text) == fire


@pytest.mark.parametrize(
    ("text", "fire"),
    [
        ("9am", utc(2026, 11, 26, 8, 0)),
        ("9 am", utc(2026, 11, 26, 8, 0)),
        ("9 a.m.", utc(2026, 11, 26, 8, 0)),
        ("5:30 pm", utc(2026, 11, 25, 16, 30)),
        ("5:30PM", utc(2026, 11, 25, 16, 30)),
        ("12pm", utc(2026, 11, 26, 11, 0)),
        ("12am", utc(2026, 11, 25, 23, 0)),
        ("12:30 am", utc(2026, 11, 25, 23, 30)),
    ],
)
def test_twelve_hour_times_are_read_as_am_or_pm(text: str, fire: datetime) -> None:
    assert fire_of(text) == fire


@pytest.mark.parametrize("text", ["13pm", "0am", "25:00", "9:60", "tomorrow 24:00"])
def test_a_time_of_day_that_does_not_exist_is_refused(text: str) -> None:
    message = refusal(text)
    assert "hour is 1 to 12" in message or "not hold a valid time of day" in message


def test_today_at_a_time_already_past_is_refused() -> None:
    assert "in the past" in refusal("today 9:00")


@pytest.mark.parametrize(
    ("text", "fire"),
    [
        # It is Wednesday 14:00 in Berlin.
        ("monday 9:00", utc(2026, 11, 30, 8, 0)),
        ("on monday at 9", utc(2026, 11, 30, 8, 0)),
        ("mon 9am", utc(2026, 11, 30, 8, 0)),
        ("9am on monday", utc(2026, 11, 30, 8, 0)),
        ("next monday at 9", utc(2026, 11, 30, 8, 0)),
        ("thursday 9:00", utc(2026, 11, 26, 8, 0)),
        ("thurs 9:00", utc(2026, 11, 26, 8, 0)),
        ("tues 9:00", utc(2026, 12, 1, 8, 0)),
        ("sunday 9:00", utc(2026, 11, 29, 8, 0)),
        # Today's weekday: today while the time is still ahead, else a week on.
        ("wednesday 18:00", utc(2026, 11, 25, 17, 0)),
        ("this wednesday 18:00", utc(2026, 11, 25, 17, 0)),
        ("wednesday 9:00", utc(2026, 12, 2, 8, 0)),
        # "next" is the first such day after today, so never today.
        ("next wednesday 18:00", utc(2026, 12, 2, 17, 0)),
        ("next thursday 9:00", utc(2026, 11, 26, 8, 0)),
    ],
)
def test_a_weekday_is_its_next_occurrence(text: str, fire: datetime) -> None:
    assert fire_of(text) == fire


@pytest.mark.parametrize("text", ["tomorrow", "monday", "next friday"])
def test_a_day_without_a_time_is_refused_with_an_example(text: str) -> None:
    assert f"{text!r} has a day but no time; add one, e.g. '{text} 9:00'" in refusal(text)


def test_a_bare_number_is_refused_as_ambiguous() -> None:
    assert "'9' is ambiguous; write e.g. 'at 9:00' or 'in 9 minutes'" in refusal("9")


@pytest.mark.parametrize(
    ("text", "zone", "fire"),
    [
        ("tomorrow 9:00 Europe/London", "Europe/London", utc(2026, 11, 26, 9, 0)),
        ("Europe/London tomorrow 9:00", "Europe/London", utc(2026, 11, 26, 9, 0)),
        ("tomorrow 9:00 asia/tokyo", "Asia/Tokyo", utc(2026, 11, 26, 0, 0)),
        ("at 18:00 UTC", "UTC", utc(2026, 11, 25, 18, 0)),
        ("in 20 minutes America/New_York", "America/New_York", NOW + timedelta(minutes=20)),
    ],
)
def test_a_zone_at_either_end_of_a_relative_time_is_its_zone(text: str, zone: str, fire: datetime) -> None:
    schedule = when(text)
    assert schedule.zone == zone
    assert next_fire(schedule, NOW) == fire


def test_a_one_shot_schedule_stores_its_instant_with_the_zones_offset() -> None:
    assert when("tomorrow 9:00") == Schedule("once", "2026-11-26T09:00:00+01:00", "Europe/Berlin")
    assert when("tomorrow 9:00 Asia/Tokyo") == Schedule("once", "2026-11-26T09:00:00+09:00", "Asia/Tokyo")


def test_the_default_zone_decides_today_and_tomorrow() -> None:
    # 13:00Z on 25 November is already the 26th in Kiritimati (UTC+14).
    assert fire_of("tomorrow 9:00", zone="Pacific/Kiritimati") == utc(2026, 11, 26, 19, 0)


@pytest.mark.parametrize(
    "text", ["0 9 * * 1 Europe/Berln", "tomorrow 9:00 Mars/Olympus", "TZ=Nowhere 0 9 * * *"]
)
def test_an_unknown_zone_is_refused_with_examples_of_real_ones(text: str) -> None:
    message = refusal(text)
    assert "is not an IANA time zone; use a name such as 'Europe/Berlin'" in message


@pytest.mark.parametrize("text", ["gibberish", "whenever you like", "every monday", "", "   "])
def test_text_that_is_no_time_is_refused_with_the_accepted_forms(text: str) -> None:
    message = refusal(text)
    assert message.endswith(ACCEPTED_FORMS)
    for example in ('"0 9 * * 1"', "@daily", '"2026-11-26 09:00"', '"in 20 minutes"', '"tomorrow 9:00"'):
        assert example in message


def test_now_and_after_must_be_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_when("in 1 hour", now=datetime(2026, 11, 25, 13, 0), default_zone="UTC")
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire(Schedule("cron", "0 9 * * *", "UTC"), datetime(2026, 11, 25, 13, 0))


def test_an_unknown_default_zone_is_the_callers_error() -> None:
    with pytest.raises(ValueError, match="default_zone 'Mars/Olympus'"):
        parse_when("in 1 hour", now=NOW, default_zone="Mars/Olympus")


# Schedules built directly (as when read back from storage)


@pytest.mark.parametrize(
    ("kind", "expression", "zone", "message"),
    [
        ("cron", "0 9 * * *", "europe/berlin", "not an IANA time zone"),
        ("cron", "0 9 * * *", "Mars/Olympus", "not an IANA time zone"),
        ("cron", "0 9 * * * *", "UTC", "5 fields"),
        ("cron", "0 25 * * *", "UTC", "Bad hour"),
        ("once", "2026-11-26T09:00:00", "UTC", "no UTC offset"),
        ("once", "tomorrow", "UTC", "not an ISO date and time"),
        ("weekly", "0 9 * * *", "UTC", "unknown schedule kind"),
    ],
)
def test_an_invalid_schedule_cannot_be_built(kind: str, expression: str, zone: str, message: str) -> None:
    with pytest.raises(WhenError, match=message):
        Schedule(kind, expression, zone)  # type: ignore[arg-type]


# next_fire


def test_a_one_shot_schedule_fires_only_strictly_before_its_instant() -> None:
    schedule = Schedule("once", "2026-11-26T09:00:00+01:00", "Europe/Berlin")
    fire = next_fire(schedule, NOW)
    assert fire == utc(2026, 11, 26, 8, 0)
    assert fire is not None and fire.tzinfo is UTC
    assert next_fire(schedule, utc(2026, 11, 26, 8, 0)) is None
    assert next_fire(schedule, utc(2026, 11, 27, 0, 0)) is None


def test_a_cron_schedule_fires_strictly_after_the_given_time_in_utc() -> None:
    schedule = Schedule("cron", "0 9 * * *", "Europe/Berlin")
    assert next_fire(schedule, utc(2026, 11, 26, 7, 59, 59)) == utc(2026, 11, 26, 8, 0)
    assert next_fire(schedule, utc(2026, 11, 26, 8, 0)) == utc(2026, 11, 27, 8, 0)
    assert next_fire(schedule, utc(2026, 11, 26, 8, 0) - timedelta(microseconds=1)) == utc(2026, 11, 26, 8, 0)
    fire = next_fire(schedule, datetime(2026, 11, 26, 3, 0, tzinfo=ZoneInfo("Asia/Tokyo")))
    assert fire == utc(2026, 11, 26, 8, 0)
    assert fire is not None and fire.tzinfo is UTC


# DST changes in Europe/Berlin


def test_a_daily_cron_stays_at_nine_local_across_spring_forward() -> None:
    schedule = when("0 9 * * *")
    assert firings(schedule, utc(2026, 3, 27, 12, 0), 3) == [
        utc(2026, 3, 28, 8, 0),  # 09:00 CET
        utc(2026, 3, 29, 7, 0),  # 09:00 CEST
        utc(2026, 3, 30, 7, 0),
    ]


def test_a_daily_cron_stays_at_nine_local_across_fall_back() -> None:
    schedule = when("0 9 * * *")
    assert firings(schedule, utc(2026, 10, 24, 12, 0), 2) == [
        utc(2026, 10, 25, 8, 0),
        utc(2026, 10, 26, 8, 0),
    ]


def test_a_cron_time_skipped_by_spring_forward_fires_at_the_first_minute_after_the_gap() -> None:
    # cronsim follows Debian's cron: 02:30 does not exist on 29 March, so the job runs at 03:00 CEST.
    schedule = when("30 2 * * *")
    assert firings(schedule, utc(2026, 3, 28, 12, 0), 3) == [
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]


def test_a_cron_time_repeated_by_fall_back_fires_once_at_its_first_occurrence() -> None:
    schedule = when("30 2 * * *")
    assert firings(schedule, utc(2026, 10, 24, 12, 0), 2) == [
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST; 02:30 CET (01:30Z) is skipped
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
    ]
    # Asked from inside the repeated hour's second pass, it is not fired again either.
    assert next_fire(schedule, utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 26, 1, 30)


def test_an_hourly_cron_fires_in_both_passes_of_the_repeated_hour() -> None:
    schedule = when("0 * * * *")
    fires = firings(schedule, utc(2026, 10, 24, 22, 30), 4)
    assert fires == [
        utc(2026, 10, 24, 23, 0),
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 1, 0),
        utc(2026, 10, 25, 2, 0),
    ]
    assert [fire.astimezone(BERLIN).strftime("%H:%M%z") for fire in fires] == [
        "01:00+0200",
        "02:00+0200",
        "02:00+0100",
        "03:00+0100",
    ]


def test_an_hourly_cron_has_no_firing_in_the_skipped_hour() -> None:
    fires = firings(when("0 * * * *"), utc(2026, 3, 28, 23, 30), 3)
    assert fires == [utc(2026, 3, 29, 0, 0), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 2, 0)]
    assert [fire.astimezone(BERLIN).strftime("%H:%M") for fire in fires] == ["01:00", "03:00", "04:00"]


@pytest.mark.parametrize(
    ("now", "fire"),
    [
        # Saturday 28 March, 20:00 CET: tomorrow 09:00 is already CEST.
        (utc(2026, 3, 28, 19, 0), utc(2026, 3, 29, 7, 0)),
        # Saturday 24 October, 20:00 CEST: tomorrow 09:00 is already CET.
        (utc(2026, 10, 24, 18, 0), utc(2026, 10, 25, 8, 0)),
    ],
)
def test_tomorrow_at_nine_the_evening_before_a_change_is_nine_in_the_new_offset(
    now: datetime, fire: datetime
) -> None:
    assert fire_of("tomorrow 9:00", now) == fire


def test_a_one_shot_time_in_the_spring_forward_gap_moves_forward_by_the_gap() -> None:
    now = utc(2026, 3, 28, 19, 0)
    assert when("tomorrow 2:30", now).expression == "2026-03-29T03:30:00+02:00"
    assert when("2026-03-29 02:30", now).expression == "2026-03-29T03:30:00+02:00"


def test_a_one_shot_time_in_the_repeated_hour_is_its_first_occurrence() -> None:
    schedule = when("tomorrow 2:30", utc(2026, 10, 24, 18, 0))
    assert schedule.expression == "2026-10-25T02:30:00+02:00"
    assert next_fire(schedule, utc(2026, 10, 24, 18, 0)) == utc(2026, 10, 25, 0, 30)
    # Its wall-clock time alone would name two instants, so the offset is shown.
    assert schedule.describe() == "once at 2026-10-25 02:30 +02:00 (Europe/Berlin)"


def test_in_a_day_keeps_the_wall_clock_time_but_in_hours_is_elapsed_time() -> None:
    now = utc(2026, 3, 28, 19, 0)  # 20:00 CET
    assert when("in 1 day", now).expression == "2026-03-29T20:00:00+02:00"
    assert when("in 24 hours", now).expression == "2026-03-29T21:00:00+02:00"


# Properties of next_fire

_EXPRESSIONS = [
    "0 9 * * *",
    "30 2 * * *",
    "0 * * * *",
    "*/7 * * * *",
    "15 1,2,3 * * 0",
    "0 0 1 * *",
    "45 23 * * 1-5",
]
# Berlin and New York move by an hour at different dates; Lord Howe moves by half an hour.
_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]


@settings(max_examples=300, deadline=None)
@given(
    expression=st.sampled_from(_EXPRESSIONS),
    zone=st.sampled_from(_ZONES),
    start=st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
    ),
    step=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
)
def test_next_fire_is_after_its_argument_and_skips_no_firing(
    expression: str, zone: str, start: datetime, step: timedelta
) -> None:
    schedule = Schedule("cron", expression, zone)
    first = next_fire(schedule, start)
    later = next_fire(schedule, start + step)
    assert first is not None and later is not None
    assert first > start
    assert later > start + step
    # Monotone, and no firing is skipped: any time before `first` leads to `first` itself.
    if start + step < first:
        assert later == first
    else:
        assert later > first
