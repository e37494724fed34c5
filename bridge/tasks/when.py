"""When a scheduled task fires: schedule_task's `when` read into a Schedule, and its next firing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from typing import Final, Literal
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

__all__ = ["ACCEPTED_FORMS", "Schedule", "WhenError", "next_fire", "parse_when", "shortest_gap"]

# Every error ends with this, because the model reads the error and must be able to fix its call.
ACCEPTED_FORMS: Final = (
    "Accepted forms: a 5-field cron expression for a repeating task "
    '("minute hour day-of-month month day-of-week", e.g. "0 9 * * 1" for Mondays at 09:00, or '
    "@hourly, @daily, @weekly, @monthly, @yearly); an ISO date and time "
    '("2026-11-26 09:00", "2026-11-26T09:00:00+01:00"); or a relative time ("in 20 minutes", '
    '"in 2 hours", "in 1 day", "tomorrow 9:00", "today 17:30", "at 18:00", "monday 9am", '
    '"next friday at 5:30 pm"). Any of them may end with an IANA time zone ("tomorrow 9:00 '
    'Europe/London", or "TZ=Europe/London 0 9 * * *"); without one the agent\'s time zone is used.'
)

# A time given explicitly ("today 17:30", an ISO instant) this little in the past still counts, and fires at
# once: the model computing "now" and the call arriving take a moment.
PAST_GRACE: Final = timedelta(minutes=1)
# One-shot times further out than this are taken for a typo; the cap also keeps a huge "in N weeks" from
# overflowing datetime.
MAX_AHEAD: Final = timedelta(days=3660)

_ALIASES: Final = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
# Minute and hour fields never hold letters, which tells "0 9 * * 1" from "9 am monday" at a glance; the
# library then validates the whole expression.
_CRON_NUMERIC_FIELD: Final = re.compile(r"[\d*/,\-]+")
_CRON_FIELDS: Final = "minute hour day-of-month month day-of-week"
_ZONE_PREFIX: Final = re.compile(r"(?:cron_)?tz=(\S+)\s*(.*)", re.IGNORECASE | re.DOTALL)
# Shaped like an Area/Location zone name, so a miss is reported as an unknown zone rather than as bad syntax.
# The letter required after each slash keeps a day-of-week field such as "MON/2" out.
_ZONE_SHAPED: Final = re.compile(r"[A-Za-z][\w+\-]*(?:/[\w+\-]*[A-Za-z][\w+\-]*)+")
_ISO_DATE_START: Final = re.compile(r"\d{4}-\d{1,2}-\d{1,2}")
_ISO_DATE_AND_REST: Final = re.compile(r"(\d{4}-\d{2}-\d{2})(?:t|\s+(?:at\s+)?)(.+)")

_UNIT: Final = r"seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|wks?|w"
# A word amount must be followed by a space, so the "an" of "and" is never read as one; nine digits are
# far past MAX_AHEAD in any unit and keep int() away from its limit on digits.
_AMOUNT: Final = r"\d{1,9}|(?:an?|one)(?=\s)"
_PART: Final = re.compile(rf"(?P<amount>{_AMOUNT})\s*(?P<unit>{_UNIT})(?![a-z])")
_RELATIVE: Final = re.compile(
    rf"in\s+(?:{_AMOUNT})\s*(?:{_UNIT})(?:(?:\s*,\s*|\s+and\s+|\s*)(?:{_AMOUNT})\s*(?:{_UNIT}))*"
)
_TIME: Final = (
    r"(?:(?P<hour>\d{1,2})(?::(?P<minute>\d{2})(?::(?P<second>\d{2}))?)?\s*(?P<meridiem>[ap]\.?m\.?)?"
    r"|(?P<word>noon|midnight))"
)
_WEEKDAY_NAMES: Final = (
    r"mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:r(?:s(?:day)?)?)?|fri(?:day)?|sat(?:urday)?"
    r"|sun(?:day)?"
)
_DAY: Final = (
    rf"(?P<day>today|tonight|tomorrow|(?:(?P<qualifier>next|this|on)\s+)?(?P<weekday>{_WEEKDAY_NAMES}))"
)
# "tomorrow at 9am" and "9am tomorrow"; the day is optional only in the first.
_DAY_THEN_TIME: Final = re.compile(rf"(?:{_DAY}\s+)?(?P<at>at\s+)?{_TIME}")
_TIME_THEN_DAY: Final = re.compile(rf"(?P<at>at\s+)?{_TIME}\s+(?:on\s+)?{_DAY}")
_DAY_ALONE: Final = re.compile(_DAY)
_WEEKDAYS: Final = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class WhenError(ValueError):
    """A `when` that cannot be scheduled; the message says why and which forms are accepted."""


@dataclass(frozen=True)
class Schedule:
    """When a task fires: a cron expression evaluated in `zone`, or one ISO instant (with its offset)."""

    kind: Literal["cron", "once"]
    expression: str
    zone: str

    def __post_init__(self) -> None:
        # Schedules are stored and read back, so an invalid one is refused here rather than at firing time.
        # The exact name, not any case of it: ZoneInfo itself is case-sensitive on most systems.
        if _zone(self.zone) != self.zone:
            raise WhenError(f"{self.zone!r} is not an IANA time zone such as 'Europe/Berlin'.")
        if self.kind == "cron":
            _cron(self.expression, ZoneInfo(self.zone))
        elif self.kind == "once":
            _instant(self.expression)
        else:
            raise WhenError(f"unknown schedule kind {self.kind!r}")

    def describe(self) -> str:
        """Human text such as "at 09:00 on Monday (cron `0 9 * * 1`, Europe/Berlin)"."""
        zone = ZoneInfo(self.zone)
        if self.kind == "cron":
            try:
                text = CronSim(self.expression, datetime(2000, 1, 1, tzinfo=zone)).explain()
            # The library's explanation is a nicety; the expression itself is always shown.
            except Exception:
                return f"cron `{self.expression}` ({self.zone})"
            return f"{text[:1].lower()}{text[1:]} (cron `{self.expression}`, {self.zone})"
        local = _instant(self.expression).astimezone(zone)
        shown = local.strftime("%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M")
        # In the repeated hour of a fall-back day the wall-clock time alone names two instants.
        if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
            shown += f" {local.isoformat()[-6:]}"
        return f"once at {shown} ({self.zone})"


def parse_when(text: str, *, now: datetime, default_zone: str) -> Schedule:
    """The Schedule that `text` describes, read at `now` (an aware datetime) in `default_zone`
    unless the text names a zone; raises WhenError, whose message lists the accepted forms.

    Wall-clock times resolve as _wall_clock says across DST; weekdays as _parse_relative says."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be a timezone-aware datetime")
    body = " ".join(text.split())
    if not body:
        raise WhenError(f"`when` is empty. {ACCEPTED_FORMS}")
    body, zone_name = _split_zone(body)
    if zone_name is None:
        zone_name = _zone(default_zone)
        if zone_name is None:
            raise ValueError(f"default_zone {default_zone!r} is not an IANA time zone")
    zone = ZoneInfo(zone_name)

    fields = body.split()
    if fields[0].startswith("@"):
        return _parse_alias(body, zone_name, now)
    if _ISO_DATE_START.match(body):
        return _once(_parse_iso(body, zone, now), zone_name, body, now, grace=True)
    if len(fields) >= 2 and all(_CRON_NUMERIC_FIELD.fullmatch(field) for field in fields[:2]):
        return _parse_cron(body, zone_name, now)
    return _parse_relative(body.lower(), zone, zone_name, now)


def next_fire(schedule: Schedule, after: datetime) -> datetime | None:
    """The schedule's next firing strictly after `after` (aware), in UTC; None if it never fires again."""
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("after must be a timezone-aware datetime")
    if schedule.kind == "once":
        instant = _instant(schedule.expression).astimezone(UTC)
        return instant if instant > after else None
    # The library walks the zone's wall clock, so "0 9 * * *" stays at 09:00 local across DST. For jobs
    # at a fixed hour and minute it follows Debian's cron: a time skipped by spring-forward fires at the
    # first minute after the gap (02:30 → 03:00 in Europe/Berlin), and a time repeated by fall-back fires
    # once, at its first occurrence. Jobs with `*` in the minute or hour field fire at every matching
    # instant, so an hourly job fires in both passes of a repeated hour and skips the missing one.
    zone = ZoneInfo(schedule.zone)
    for candidate in CronSim(schedule.expression, after.astimezone(zone)):
        fire = candidate.astimezone(UTC)
        # For those fixed-time jobs the library walks naive wall time; started inside the second pass of a
        # repeated hour it can yield that hour's first pass, which lies before `after`.
        if fire > after:
            return fire
    return None


# How far ahead shortest_gap looks: enough firings to meet every gap of a cron expression's minute,
# hour and day fields, few enough to take about 20 ms (measured) when a member makes a task.
GAP_FIRINGS: Final = 400


def shortest_gap(schedule: Schedule, after: datetime) -> float | None:
    """The shortest time in seconds between two firings of a repeating schedule, looking at its next
    GAP_FIRINGS firings (None for a one-shot, or one that fires once more at most). How often a member
    may make the bot post is judged on it ([tasks] member_min_interval_s)."""
    if schedule.kind == "once":
        return None
    shortest: float | None = None
    previous = next_fire(schedule, after)
    for _ in range(GAP_FIRINGS):
        if previous is None:
            break
        following = next_fire(schedule, previous)
        if following is None:
            break
        gap = (following - previous).total_seconds()
        shortest = gap if shortest is None else min(shortest, gap)
        previous = following
    return shortest


@cache
def _zones_by_folded_name() -> dict[str, str]:
    # "localtime" is the host's own zone and "Factory" a placeholder: neither means the same thing
    # everywhere, so neither is offered.
    return {name.casefold(): name for name in available_timezones() if name not in {"localtime", "Factory"}}


def _zone(name: str) -> str | None:
    """The canonical IANA name for `name` (any case), or None if it is not one."""
    return _zones_by_folded_name().get(name.casefold())


def _known_zone(token: str) -> str:
    found = _zone(token)
    if found is None:
        raise WhenError(
            f"{token!r} is not an IANA time zone; use a name such as 'Europe/Berlin', "
            f"'America/New_York' or 'UTC'. {ACCEPTED_FORMS}"
        )
    return found


def _split_zone(body: str) -> tuple[str, str | None]:
    """The text without its zone (a TZ=/CRON_TZ= prefix, or a first or last word), and that zone."""
    prefix = _ZONE_PREFIX.fullmatch(body)
    if prefix:
        if not prefix[2]:
            raise WhenError(f"{body!r} names a time zone but no time. {ACCEPTED_FORMS}")
        return prefix[2], _known_zone(prefix[1])
    words = body.split(" ")
    if len(words) < 2:
        return body, None
    for index in (-1, 0):
        word = words[index]
        if _zone(word) is not None or _ZONE_SHAPED.fullmatch(word):
            rest = words[:-1] if index == -1 else words[1:]
            return " ".join(rest), _known_zone(word)
    return body, None


def _cron(expression: str, zone: ZoneInfo) -> None:
    """Refuses anything but a 5-field expression the library accepts."""
    fields = expression.split()
    if len(fields) != 5:
        raise WhenError(
            f"a cron expression has 5 fields ({_CRON_FIELDS}); {expression!r} has {len(fields)}. "
            f"Seconds and year fields are not supported. {ACCEPTED_FORMS}"
        )
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=zone))
    except CronSimError as error:
        raise WhenError(
            f"{expression!r} is not a valid cron expression ({error}; the fields are {_CRON_FIELDS}). "
            f"{ACCEPTED_FORMS}"
        ) from None


def _parse_cron(body: str, zone_name: str, now: datetime) -> Schedule:
    schedule = Schedule("cron", " ".join(body.split()), zone_name)
    if next_fire(schedule, now) is None:
        raise WhenError(f"the cron expression {schedule.expression!r} never fires. {ACCEPTED_FORMS}")
    return schedule


def _parse_alias(body: str, zone_name: str, now: datetime) -> Schedule:
    alias = body.lower()
    if alias == "@reboot":
        raise WhenError(f"@reboot cannot be scheduled: a task fires at a time. {ACCEPTED_FORMS}")
    expression = _ALIASES.get(alias)
    if expression is None:
        raise WhenError(f"{body!r} is not a cron shorthand. {ACCEPTED_FORMS}")
    return _parse_cron(expression, zone_name, now)


def _instant(expression: str) -> datetime:
    try:
        instant = datetime.fromisoformat(expression)
    except ValueError:
        raise WhenError(f"{expression!r} is not an ISO date and time") from None
    if instant.utcoffset() is None:
        raise WhenError(f"{expression!r} has no UTC offset")
    return instant


def _wall_clock(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The instant at which clocks in `zone` show `at` on `day`.

    fold=0 decides both DST cases: a time repeated by fall-back is its first occurrence, and a time
    skipped by spring-forward is read with the offset from before the change, which moves it forward by
    the gap (02:30 on Europe/Berlin's spring-forward day is 03:30).
    """
    return (
        datetime.combine(day, at.replace(tzinfo=None, fold=0), tzinfo=zone).astimezone(UTC).astimezone(zone)
    )


def _once(instant: datetime, zone_name: str, body: str, now: datetime, *, grace: bool) -> Schedule:
    """A one-shot Schedule, refusing an instant in the past (or, with grace, more than a minute past)."""
    if instant <= now - (PAST_GRACE if grace else timedelta(0)):
        local_now = now.astimezone(ZoneInfo(zone_name))
        raise WhenError(
            f"{body!r} is {instant.astimezone(ZoneInfo(zone_name)):%Y-%m-%d %H:%M}, which is in the past "
            f"(it is now {local_now:%Y-%m-%d %H:%M} in {zone_name}); give a time ahead. {ACCEPTED_FORMS}"
        )
    if instant - now > MAX_AHEAD:
        raise WhenError(f"{body!r} is more than 10 years ahead. {ACCEPTED_FORMS}")
    # Within the grace it fires at once: a stored instant that is not after `now` would never fire.
    instant = max(instant, now + timedelta(seconds=1))
    # Whole seconds keep the stored text short; rounding up never fires before the time asked for.
    if instant.microsecond:
        instant = instant.replace(microsecond=0) + timedelta(seconds=1)
    return Schedule("once", instant.astimezone(ZoneInfo(zone_name)).isoformat(), zone_name)


def _parse_iso(body: str, zone: ZoneInfo, now: datetime) -> datetime:
    if re.fullmatch(r"\d{4}-\d{1,2}-\d{1,2}", body):
        raise WhenError(
            f"{body!r} is a date without a time; add the time, e.g. '{body} 09:00'. {ACCEPTED_FORMS}"
        )
    try:
        # Upper case so that "t" and "z" parse as "T" and "Z".
        parsed = datetime.fromisoformat(body.upper())
    except ValueError:
        # Not strict ISO, but a date and one of the relative forms' times, e.g. "2026-11-26 9am".
        split = _ISO_DATE_AND_REST.fullmatch(body.lower())
        at = _parse_time(split[2]) if split else None
        try:
            day = date.fromisoformat(split[1]) if split else None
        except ValueError:
            day = None
        if day is None or at is None:
            raise WhenError(
                f"{body!r} is not an ISO date and time such as '2026-11-26 09:00' or "
                f"'2026-11-26T09:00:00+01:00'. {ACCEPTED_FORMS}"
            ) from None
        return _wall_clock(day, at, zone)
    if parsed.utcoffset() is None:
        return _wall_clock(parsed.date(), parsed.time(), zone)
    return parsed


def _parse_time(text: str) -> time | None:
    """A time alone ("9:00", "9am", "17:30:15", "noon"); None if `text` is not one."""
    match = re.fullmatch(rf"(?P<at>at\s+)?{_TIME}", text)
    return _time_of(match, text) if match else None


def _time_of(match: re.Match[str], body: str) -> time:
    if match["word"]:
        return time(12) if match["word"] == "noon" else time(0)
    hour = int(match["hour"])
    minute = int(match["minute"] or 0)
    second = int(match["second"] or 0)
    meridiem = match["meridiem"]
    if meridiem:
        if not 1 <= hour <= 12:
            raise WhenError(f"{body!r}: with am/pm the hour is 1 to 12. {ACCEPTED_FORMS}")
        hour = hour % 12 + (12 if meridiem.startswith("p") else 0)
    if hour > 23 or minute > 59 or second > 59:
        raise WhenError(f"{body!r} does not hold a valid time of day (00:00 to 23:59). {ACCEPTED_FORMS}")
    return time(hour, minute, second)


def _parse_relative(body: str, zone: ZoneInfo, zone_name: str, now: datetime) -> Schedule:
    if _RELATIVE.fullmatch(body):
        return _once(_after_duration(body, zone, now), zone_name, body, now, grace=False)
    match = _DAY_THEN_TIME.fullmatch(body) or _TIME_THEN_DAY.fullmatch(body)
    if match is None:
        if _DAY_ALONE.fullmatch(body):
            raise WhenError(f"{body!r} has a day but no time; add one, e.g. '{body} 9:00'. {ACCEPTED_FORMS}")
        if body.startswith("in "):
            raise WhenError(
                f"cannot read {body!r}: after 'in' give amounts of seconds, minutes, hours, days or weeks, "
                f"e.g. 'in 20 minutes' or 'in 1 day 2 hours'. {ACCEPTED_FORMS}"
            )
        raise WhenError(f"cannot read {body!r} as a time. {ACCEPTED_FORMS}")
    # A bare number such as "9" could as well be minutes as an hour; it needs a day, "at", ":" or am/pm.
    if not (match["day"] or match["at"] or match["minute"] or match["meridiem"] or match["word"]):
        raise WhenError(
            f"{body!r} is ambiguous; write e.g. 'at {body}:00' or 'in {body} minutes'. {ACCEPTED_FORMS}"
        )
    at = _time_of(match, body)
    local_now = now.astimezone(zone)
    today = local_now.date()
    day = match["day"]
    if day is None:
        # "at 18:00": today if that is still ahead, else tomorrow.
        instant = _wall_clock(today, at, zone)
        if instant <= now:
            instant = _wall_clock(today + timedelta(days=1), at, zone)
        return _once(instant, zone_name, body, now, grace=False)
    if day in ("today", "tonight"):
        return _once(_wall_clock(today, at, zone), zone_name, body, now, grace=True)
    if day == "tomorrow":
        return _once(_wall_clock(today + timedelta(days=1), at, zone), zone_name, body, now, grace=True)
    # A weekday: its next occurrence at that time, today included if the time is still ahead. "next
    # monday" is the first Monday after today, so on a Monday it means a week on, never today.
    weekday = _WEEKDAYS.index(match["weekday"][:3])
    days_ahead = (weekday - today.weekday()) % 7
    if days_ahead == 0 and (match["qualifier"] == "next" or _wall_clock(today, at, zone) <= now):
        days_ahead = 7
    return _once(_wall_clock(today + timedelta(days=days_ahead), at, zone), zone_name, body, now, grace=False)


def _after_duration(body: str, zone: ZoneInfo, now: datetime) -> datetime:
    """`now` plus the duration of "in 1 day 2 hours": days and weeks as calendar days that keep the
    wall-clock time ("in 1 day" at 20:00 is 20:00 tomorrow even across a DST change), then seconds,
    minutes and hours as elapsed time."""
    days = 0
    seconds = 0
    for part in _PART.finditer(body[len("in") :]):
        amount_text = part["amount"]
        amount = int(amount_text) if amount_text.isdigit() else 1
        unit = part["unit"]
        if unit.startswith("w"):
            days += 7 * amount
        elif unit.startswith("d"):
            days += amount
        elif unit.startswith("h"):
            seconds += 3600 * amount
        elif unit.startswith("m"):
            seconds += 60 * amount
        else:
            seconds += amount
        if days > MAX_AHEAD.days or seconds > MAX_AHEAD.total_seconds():
            raise WhenError(f"{body!r} is more than 10 years ahead. {ACCEPTED_FORMS}")
    if days == 0 and seconds == 0:
        raise WhenError(f"{body!r} is no time from now; give a duration above zero. {ACCEPTED_FORMS}")
    start = now
    if days:
        local = now.astimezone(zone)
        start = _wall_clock(local.date() + timedelta(days=days), local.time(), zone)
    return start + timedelta(seconds=seconds)


def when_text(stamp: float | None, zone: str) -> str:
    """A time as chats show it, in the zone given: `2026-12-01 09:00 CET`."""
    if stamp is None:
        return "never again"
    return datetime.fromtimestamp(stamp, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")
