"""Platform-neutral text handling: splitting long messages to fit a platform's limit, scrubbing bad text."""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["MIN_LIMIT", "scrub", "split_message", "utf16_len"]

# The smallest limit split_message accepts. A chunk cut inside a code block needs a reopening fence
# line and a closing one: "```\n" + ... + "\n```" is 8 units of overhead, and fence overhead may take
# at most half of a chunk (see _Splitter._reopenable) so that every chunk makes real progress.
MIN_LIMIT = 16

Measure = Callable[[str], int]

# A fence line as CommonMark sees it: up to three spaces, a run of 3+ backticks or tildes, the rest.
_FENCE_LINE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_SURROGATE_PAIR = re.compile(r"[\ud800-\udbff][\udc00-\udfff]")
_HIGH_SURROGATES = ("\ud800", "\udbff")
_LOW_SURROGATES = ("\udc00", "\udfff")


def utf16_len(text: str) -> int:
    """The length in UTF-16 code units, as Telegram counts it: a character outside the BMP counts 2."""
    # surrogatepass so that text which already holds surrogate code units is measured, not rejected.
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def scrub(text: str) -> str:
    """The text with every unpaired UTF-16 surrogate replaced by U+FFFD, and split pairs joined.

    JSON from a platform or a model may hold "\\ud800" escapes that decode to lone surrogates: no
    UTF-8 encoder (SQLite, httpx, a terminal) accepts them, so one would cost the whole message.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def split_message(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Split text into chunks with measure(chunk) <= limit, keeping ``` code fences balanced.

    Text that fits is returned unchanged as [text] (or [] when it is blank). Otherwise each cut is
    made at the last blank line, else line break, else whitespace, else between two code points
    that fits; a higher-priority cut is only taken when its chunk fills at least half the limit, so
    an early blank line does not produce a tiny first message. A chunk that ends inside a fenced
    code block gets a closing fence line, and the next chunk reopens it with the same opening line
    (or the bare fence marker when that line is too long); these lines count toward the limit.
    Whitespace at cut points is dropped, and so are chunks that would be blank.

    measure must be monotone: appending text never makes it smaller (len, utf16_len and byte
    counts are). Raises ValueError when limit < MIN_LIMIT or one character cannot fit between a
    reopened fence and its close.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    # The widest indivisible unit: a code point, or a surrogate pair held as two code units.
    atoms = set(text) | set(_SURROGATE_PAIR.findall(text))
    widest = max((measure(atom) for atom in atoms), default=0)
    if measure("```\n") + widest + measure("\n```") > limit:
        raise ValueError(f"limit {limit} cannot hold a reopened code fence plus one character")
    if measure(text) <= limit:
        return [text] if text.strip() else []
    return _Splitter(text, limit, measure, widest).run()


@dataclass(frozen=True, slots=True)
class _Fence:
    """An open fenced code block: the fence character and length, and its opening line."""

    char: str
    size: int
    opener: str

    @property
    def marker(self) -> str:
        return self.char * self.size


def _next_state(state: _Fence | None, line: str) -> _Fence | None:
    """The fence state after one line (without its newline), following CommonMark's fence rules."""
    match = _FENCE_LINE.fullmatch(line)
    if state is None:
        # A backtick fence's info string may not contain backticks (that is inline code instead).
        if match is None or (match[1][0] == "`" and "`" in match[2]):
            return None
        return _Fence(match[1][0], len(match[1]), line.strip())
    # Only a bare run of the same character, at least as long as the opener, closes the block;
    # any other line (including a fence of the other character) is content.
    if match is None or match[2].strip() or match[1][0] != state.char or len(match[1]) < state.size:
        return state
    return None


def _fence_like(line: str) -> bool:
    return _FENCE_LINE.match(line) is not None


def _joins_previous(char: str) -> bool:
    """Whether a cut before char would split what a reader sees as one character."""
    return (
        unicodedata.category(char).startswith("M")  # combining accents and marks
        or char == "\u200d"  # zero-width joiner inside an emoji sequence
        or "\ufe00" <= char <= "\ufe0f"  # variation selectors (emoji vs text presentation)
        or "\U0001f3fb" <= char <= "\U0001f3ff"  # skin-tone modifiers
        or "\U000e0020" <= char <= "\U000e007f"  # tag characters of subdivision flags
    )


@dataclass(frozen=True, slots=True)
class _Line:
    start: int
    end: int  # index of the "\n" ending the line, or len(text)
    before: _Fence | None  # fence state at the start of the line
    after: _Fence | None  # fence state after the whole line


@dataclass(frozen=True, slots=True)
class _Cut:
    end: int  # the body is text[pos:end]
    chunk: str
    after: _Fence | None
    size: int


class _Splitter:
    """Greedy chunking; fence state is tracked on the emitted chunks so each one is self-consistent."""

    def __init__(self, text: str, limit: int, measure: Measure, widest: int) -> None:
        self.text = text
        self.limit = limit
        self.measure = measure
        self.widest = widest

    def run(self) -> list[str]:
        """Cut chunks until the text is used up; each chunk consumes at least one character."""
        text, chunks = self.text, []
        pos, state = self._next_start(0), None
        while pos < len(text):
            cut = self._choose(pos, state)
            if cut is None:
                # Only indentation kept at the start of the body can crowd out all content; without
                # it a single character always fits (the checks in split_message guarantee it).
                pos = self._skip_blank(pos)
                cut = self._choose(pos, state)
                if cut is None:  # pragma: no cover - a non-monotone measure
                    raise ValueError("measure is not monotone; cannot split")
            chunks.append(cut.chunk)
            pos, state = self._next_start(cut.end), cut.after
        return chunks

    # --- positions -------------------------------------------------------------------------

    def _skip_blank(self, pos: int) -> int:
        text = self.text
        while pos < len(text) and text[pos].isspace():
            pos += 1
        return pos

    def _next_start(self, pos: int) -> int:
        """Where the next body starts: past the whitespace at a cut, keeping a line's indentation."""
        stop = self._skip_blank(pos)
        if stop == len(self.text):
            return stop
        newline = self.text.rfind("\n", pos, stop)
        if newline == -1:
            return stop
        # Indentation is meaningful (code, nested lists); keep it unless it alone is huge.
        start = newline + 1
        if self.measure(self.text[start:stop]) > self.limit // 4:
            return stop
        return start

    # --- fence bookkeeping -------------------------------------------------------------------

    def _reopenable(self, fence: _Fence) -> bool:
        """Whether a chunk may end inside this fence: reopening and closing it take at most half the
        limit, so the next chunk still has room for real progress (a fence of 2000 backticks would
        otherwise leave a few characters per chunk)."""
        overhead = self.measure(fence.marker + "\n" + "\n" + fence.marker)
        return overhead + self.widest <= self.limit and overhead <= self.limit // 2

    def _prefix(self, state: _Fence | None) -> str:
        if state is None:
            return ""
        close = "\n" + state.marker
        full = self.measure(state.opener + "\n" + close)
        # Reopen with the full line ("```python") so highlighting survives, unless fence overhead
        # would eat more than half of every chunk.
        if full + self.widest <= self.limit and full <= self.limit // 2:
            return state.opener + "\n"
        return state.marker + "\n"

    def _lines(self, pos: int, stop: int, state: _Fence | None) -> list[_Line]:
        """The lines of text[pos:] that start at or before stop, with fence state, body-relative."""
        text, lines = self.text, []
        start = pos
        while start <= stop:
            end = text.find("\n", start)
            if end == -1:
                end = len(text)
            after = _next_state(state, text[start:end])
            lines.append(_Line(start, end, state, after))
            state = after
            if end == len(text):
                break
            start = end + 1
        return lines

    # --- choosing a cut ----------------------------------------------------------------------

    def _window_end(self, pos: int, prefix: str) -> int:
        """The largest end with measure(prefix + text[pos:end]) <= limit (exponential then binary)."""
        text, limit, measure = self.text, self.limit, self.measure
        n = len(text)
        low, step = pos, max(1, limit)
        while low + step < n and measure(prefix + text[pos : low + step]) <= limit:
            low += step
            step *= 2
        high = min(n, low + step)
        if measure(prefix + text[pos:high]) <= limit:
            return high
        while high - low > 1:
            middle = (low + high) // 2
            if measure(prefix + text[pos:middle]) <= limit:
                low = middle
            else:
                high = middle
        return low

    def _choose(self, pos: int, state: _Fence | None) -> _Cut | None:
        """The next chunk for a body starting at pos inside fence state (None: outside a fence)."""
        text, limit = self.text, self.limit
        n = len(text)
        prefix = self._prefix(state)
        end = self._window_end(pos, prefix)
        first = self._skip_blank(pos)  # the body must hold at least this character
        lines = self._lines(pos, end, state)
        starts = [line.start for line in lines]

        def line_of(cut: int) -> _Line:
            return lines[bisect_right(starts, cut) - 1]

        def evaluate(cut: int) -> _Cut | None:
            """The chunk for body text[pos:cut], if it fits and leaves a fence the next can reopen."""
            if cut <= first or cut > end:
                return None
            line = line_of(cut)
            after = line.after if cut >= line.end else _next_state(line.before, text[line.start : cut])
            if after is not None and self._skip_blank(cut) < n and not self._reopenable(after):
                return None
            chunk = prefix + text[pos:cut].rstrip()
            if after is not None:
                chunk += "\n" + after.marker
            size = self.measure(chunk)
            return _Cut(cut, chunk, after, size) if size <= limit else None

        if end == n and (whole := evaluate(n)) is not None:
            return whole

        def first_fit(candidates: Iterable[int]) -> _Cut | None:
            for cut in candidates:
                if (found := evaluate(cut)) is not None:
                    return found
            return None

        paragraphs, breaks, unclean = [], [], []
        for index, line in enumerate(lines):
            if line.end > end or not text[line.start : line.end].strip():
                continue
            # Cutting right after an opening fence line leaves an empty block behind; avoid it.
            if line.before is None and line.after is not None:
                unclean.append(line.end)
            elif index + 1 < len(lines) and not text[lines[index + 1].start : lines[index + 1].end].strip():
                paragraphs.append(line.end)
            else:
                breaks.append(line.end)
        breaks = sorted(breaks + paragraphs)
        # Cuts inside lines, latest first; generated lazily since the latest usually fits.
        inner = range(min(end, n - 1), first, -1)
        spaces = (
            cut
            for cut in inner
            if text[cut].isspace() and not text[cut - 1].isspace() and self._clean(cut, line_of(cut))
        )

        best: _Cut | None = None
        for candidates in (reversed(paragraphs), reversed(breaks), spaces):
            found = first_fit(candidates)
            if found is not None and found.size * 2 >= limit:
                return found
            if found is not None and (best is None or found.end > best.end):
                best = found
        if best is not None:
            return best
        hard = (
            cut
            for cut in inner
            if self._splittable(cut) and not _joins_previous(text[cut]) and self._clean(cut, line_of(cut))
        )
        if (found := first_fit(hard)) is not None:
            return found
        # Last resort: anywhere that fits, even if a fence-looking fragment ends up at a line start
        # (each chunk is still balanced, since its fence state is tracked on what is emitted).
        anywhere = sorted(set(unclean) | {cut for cut in inner if self._splittable(cut)}, reverse=True)
        return first_fit(anywhere)

    def _splittable(self, cut: int) -> bool:
        """Never separate the two halves of a surrogate pair held as code units."""
        text = self.text
        return not (
            _HIGH_SURROGATES[0] <= text[cut - 1] <= _HIGH_SURROGATES[1]
            and _LOW_SURROGATES[0] <= text[cut] <= _LOW_SURROGATES[1]
        )

    def _clean(self, cut: int, line: _Line) -> bool:
        """A mid-line cut is clean unless a half, now starting a line of its own, looks like a fence."""
        text = self.text
        if cut >= line.end:
            return True
        # A fence marker sits in a line's first 6 characters, so short slices are enough.
        if _fence_like(text[line.start : min(cut, line.start + 8)]):
            return False
        tail = self._skip_blank(cut)
        return tail >= line.end or not _fence_like(text[tail : min(line.end, tail + 8)])
