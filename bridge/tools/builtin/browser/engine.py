"""Playwright's side of the browser group: the one Chromium process (Chromium) and each session's
browser context (Tab), with every Playwright error turned into a BrowserFailure here.

Only this module imports Playwright, and only session.py imports this module, inside a function: a
Bridge without the `browser` extra loads the group and answers `unavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from pathlib import Path
from typing import Any

from playwright.async_api import (
    Browser,
    BrowserContext,
    Frame,
    Locator,
    Page,
    Playwright,
    Request,
    Route,
    WebSocketRoute,
    async_playwright,
)
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from bridge.errors import first_line
from bridge.tools.builtin.browser.failure import BrowserFailure
from bridge.tools.builtin.browser.guard import BLANK, Policy, Refusal, parse
from bridge.tools.builtin.browser.proxy import REFUSED_HEADER, GuardProxy
from bridge.tools.builtin.browser.snapshot import (
    MAX_ELEMENTS,
    MAX_FRAMES,
    MAX_LABEL,
    REF_ATTRIBUTE,
    SNAPSHOT_JS,
    Element,
    Snapshot,
)

# Starting Chromium takes 0.5-2 s here; a box under load gets far more before it is called broken.
LAUNCH_TIMEOUT_S = 60.0
# How long an action waits for the navigation it may have started (a link, a submit button) to begin.
# A click that navigates starts its request within a few milliseconds; one that does not costs this.
NAVIGATION_START_S = 0.5
# After the DOM is ready, how long to give the rest of the page (images, late scripts) to load.
LOAD_GRACE_S = 3.0
# Pages a context keeps open (popups included); the oldest is closed past this.
MAX_PAGES = 5
VIEWPORT = {"width": 1280, "height": 800}
# Input types that cannot be typed into: click them instead. A file input is never filled (that would
# hand a file of the bot's machine to the page).
UNTYPEABLE = frozenset(
    {"checkbox", "radio", "submit", "button", "reset", "image", "file", "range", "color", "hidden"}
)

# Chromium in a container, driven headless, reaching nothing on its own:
# - no name resolution at all (each context's GuardProxy resolves and vets; 127.0.0.1 is the proxy);
# - WebRTC only through the proxy, so no UDP to any address;
# - no QUIC, no background connections (updates, sync, field trials), no GPU, /tmp for shared memory.
# Playwright adds --no-sandbox unless chromium_sandbox=True: the renderer sandbox needs user
# namespaces, which containers rarely have.
CHROMIUM_ARGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
]


class Chromium:
    """One Chromium process, driven by one Playwright driver; every session's Tab lives in it."""

    def __init__(self, playwright: Playwright, browser: Browser) -> None:
        self._playwright = playwright
        self._browser = browser

    @classmethod
    async def launch(cls, executable: Path) -> Chromium:
        """Start Chromium, or raise BrowserFailure("unavailable") saying why and what to do."""
        if not await asyncio.to_thread(executable.is_file):
            raise BrowserFailure(
                "unavailable",
                f"Chromium is not installed at {executable} ([tools.browser] executable); install it "
                "(apt-get install chromium) or set executable to its path.",
            )
        try:
            playwright = await async_playwright().start()
        except Exception as exc:
            reason = f"Playwright's driver would not start: {first_line(exc)}"
            raise BrowserFailure("unavailable", reason) from None
        try:
            browser = await playwright.chromium.launch(
                executable_path=executable,
                args=CHROMIUM_ARGS,
                timeout=LAUNCH_TIMEOUT_S * 1000,
                # Bridge handles its own signals and closes the browser on shutdown.
                handle_sigint=False,
                handle_sigterm=False,
                handle_sighup=False,
            )
        except Exception as exc:
            with contextlib.suppress(Exception):
                await playwright.stop()
            raise BrowserFailure(
                "unavailable", f"Chromium ({executable}) would not start: {first_line(exc)}"
            ) from None
        return cls(playwright, browser)

    @property
    def connected(self) -> bool:
        return self._browser.is_connected()

    async def new_tab(self, policy: Policy, timeout_s: float) -> Tab:
        tab = Tab(policy, timeout_s)
        try:
            await tab.start(self._browser)
        except PlaywrightError as exc:
            await tab.close()
            reason = f"Chromium could not open a context: {first_line(exc)}"
            raise BrowserFailure("unavailable", reason) from None
        return tab

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._browser.close()
        with contextlib.suppress(Exception):
            await self._playwright.stop()


class Tab:
    """One session's browser context: its own cookies and storage, its own vetting proxy, its pages, and
    the numbered elements of its last snapshot."""

    def __init__(self, policy: Policy, timeout_s: float) -> None:
        self._policy = policy
        self._timeout_s = timeout_s
        self._proxy = GuardProxy(policy, self._refuse, timeout_s)
        self._context: BrowserContext | None = None
        self._pages: list[Page] = []
        # What the guard refused lately, and how many ever: an action reports those after its mark.
        self._refusals: deque[Refusal] = deque(maxlen=20)
        self._refused = 0
        # The last snapshot: its nonce, its page, and the frame each number lives in.
        self._nonce = ""
        self._ref_page: Page | None = None
        self._refs: dict[int, Frame] = {}
        self._chores: set[asyncio.Task[Any]] = set()

    async def start(self, browser: Browser) -> None:
        proxy = await self._proxy.start()
        context = await browser.new_context(
            # Every request, loopback included (`<-loopback>`), goes through this context's proxy.
            proxy={"server": proxy, "bypass": "<-loopback>"},
            # A service worker's fetches bypass the context's routes; none may be installed.
            service_workers="block",
            accept_downloads=False,
            viewport={"width": VIEWPORT["width"], "height": VIEWPORT["height"]},
        )
        self._context = context
        context.set_default_timeout(self._timeout_s * 1000)
        context.set_default_navigation_timeout(self._timeout_s * 1000)
        # Each request is vetted before Chromium sends it (a clear error for a refused page, and
        # schemes no proxy sees); redirects and anything the routes miss meet the proxy.
        await context.route("**/*", self._route)
        await context.route_web_socket("**/*", self._route_websocket)
        context.on("page", self._adopt)

    async def close(self) -> None:
        context, self._context = self._context, None
        if context is not None:
            with contextlib.suppress(Exception):
                await context.close()
        await self._proxy.aclose()
        for chore in list(self._chores):
            chore.cancel()

    # -- the guard ----------------------------------------------------------------------------------

    def _refuse(self, refusal: Refusal) -> None:
        self._refusals.append(refusal)
        self._refused += 1

    def _refusals_since(self, mark: int) -> list[Refusal]:
        count = min(self._refused - mark, len(self._refusals))
        return list(self._refusals)[len(self._refusals) - count :] if count > 0 else []

    async def _route(self, route: Route) -> None:
        request = route.request
        try:
            refusal = await self._policy.vet_url(request.url, page=request.is_navigation_request())
        except Exception:
            refusal = Refusal("blocked_address", f"{request.url} could not be vetted; refused.")
        try:
            if refusal is None:
                await route.continue_()
                return
            if refusal.code == "unresolvable":
                # Not the guard's doing: the page fails as it would anywhere.
                await route.abort("namenotresolved")
                return
            self._refuse(refusal)
            await route.abort("blockedbyclient")
        except PlaywrightError:
            # The page or the context went away while the request waited.
            pass

    async def _route_websocket(self, socket: WebSocketRoute) -> None:
        try:
            refusal = await self._policy.vet_url(socket.url, page=False)
        except Exception:
            refusal = Refusal("blocked_address", f"{socket.url} could not be vetted; refused.")
        try:
            if refusal is None:
                socket.connect_to_server()
                return
            self._refuse(refusal)
            # 1008: policy violation.
            await socket.close(code=1008, reason="refused by Bridge's browser guard")
        except PlaywrightError:
            pass

    # -- pages ----------------------------------------------------------------------------------------

    def _adopt(self, page: Page) -> None:
        """A new page (ours, or a popup the page opened) becomes the one the tools act on."""
        self._pages.append(page)
        page.on("close", self._forget)
        while len(self._pages) > MAX_PAGES:
            oldest = self._pages.pop(0)
            self._chore(oldest.close())

    def _forget(self, page: Page) -> None:
        if page in self._pages:
            self._pages.remove(page)

    def _chore(self, work: Any) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(work)
        self._chores.add(task)
        task.add_done_callback(self._chore_done)

    def _chore_done(self, task: asyncio.Task[Any]) -> None:
        self._chores.discard(task)
        if not task.cancelled():
            task.exception()

    def _current(self) -> Page:
        if not self._pages or self._pages[-1].url == BLANK:
            raise BrowserFailure("no_page", "No page is open; call open(url) first.")
        return self._pages[-1]

    async def _page(self) -> Page:
        if self._pages:
            return self._pages[-1]
        assert self._context is not None
        page = await self._context.new_page()
        if page not in self._pages:
            self._adopt(page)
        return page

    # -- the actions ------------------------------------------------------------------------------

    async def open(self, url: str) -> tuple[str, str, int | None, list[Refusal]]:
        """Navigate the current page to url: (final URL, title, HTTP status, requests refused)."""
        page = await self._page()
        mark = self._refused
        try:
            response = await page.goto(url, wait_until="domcontentloaded")
        except PlaywrightTimeoutError:
            raise BrowserFailure("timeout", f"{url} did not load within {self._timeout_s:g} s.") from None
        except PlaywrightError as exc:
            await self._navigation_failed(page, mark, f"Could not open {url}: {first_line(exc)}")
            raise AssertionError("unreachable") from None
        if response is not None and REFUSED_HEADER in response.headers:
            # A redirect the proxy refused: what shows is the proxy's own answer.
            await self._navigation_failed(page, mark, f"Could not open {url}.", only_if_refused=True)
        await self._settle(page)
        status = None if response is None else response.status
        return page.url, await self._title(page), status, self._refusals_since(mark)

    async def snapshot(self, max_chars: int) -> Snapshot:
        page = self._current()
        nonce = secrets.token_hex(6)
        frames = [page.main_frame, *[f for f in page.frames if f is not page.main_frame][:MAX_FRAMES]]
        refs: dict[int, Frame] = {}
        elements: list[Element] = []
        texts: list[str] = []
        total = 0
        more = False
        try:
            async with asyncio.timeout(self._timeout_s):
                for frame in frames:
                    if frame.is_detached():
                        continue
                    budget = max(0, max_chars - sum(len(t) for t in texts))
                    left = MAX_ELEMENTS - len(elements)
                    try:
                        raw = await frame.evaluate(
                            SNAPSHOT_JS, [nonce, len(elements), budget, left, MAX_LABEL, REF_ATTRIBUTE]
                        )
                    except PlaywrightError:
                        if frame is page.main_frame:
                            raise
                        # A frame that navigated away or was removed meanwhile.
                        continue
                    for item in raw["elements"]:
                        element = Element.of(item)
                        elements.append(element)
                        refs[element.n] = frame
                    more = more or bool(raw["more"])
                    text = str(raw["text"]).strip()
                    total += int(raw["length"])
                    if frame is not page.main_frame and text:
                        text = f"--- frame {frame.url[:200]} ---\n{text}"
                    if text:
                        texts.append(text)
        except TimeoutError:
            reason = f"Reading the page took longer than {self._timeout_s:g} s."
            raise BrowserFailure("timeout", reason) from None
        except PlaywrightError as exc:
            reason = f"Could not read the page: {first_line(exc)}"
            raise BrowserFailure("navigation_failed", reason) from None
        self._nonce, self._ref_page, self._refs = nonce, page, refs
        return Snapshot(
            url=page.url,
            title=await self._title(page),
            text="\n\n".join(texts),
            elements=tuple(elements),
            text_total=total,
            more_elements=more,
        )

    async def click(self, n: int) -> tuple[str, str, list[Refusal]]:
        """Click element n of the last snapshot: (URL, title, requests refused) once the page settled."""
        page, target = await self._element(n)
        mark = self._refused
        navigations: list[Request] = []
        started = asyncio.Event()

        def navigating(request: Request) -> None:
            # Every hop of a redirect is a request of its own; the last one is the page's.
            if request.is_navigation_request() and request.frame.parent_frame is None:
                navigations.append(request)
                started.set()

        context = self._context
        assert context is not None
        context.on("request", navigating)
        try:
            await target.click()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(NAVIGATION_START_S):
                    await started.wait()
        except PlaywrightTimeoutError:
            raise BrowserFailure(
                "timeout",
                f"Clicking [{n}] did not finish within {self._timeout_s:g} s (covered, disabled or "
                "moving?); call snapshot() to look again.",
            ) from None
        except PlaywrightError as exc:
            raise BrowserFailure("action_failed", f"Could not click [{n}]: {first_line(exc)}") from None
        finally:
            context.remove_listener("request", navigating)
        current = self._pages[-1] if self._pages else page
        if navigations or current is not page:
            failed = False
            try:
                await current.wait_for_load_state("domcontentloaded")
            except PlaywrightTimeoutError:
                raise BrowserFailure(
                    "timeout", f"The page [{n}] led to did not load within {self._timeout_s:g} s."
                ) from None
            except PlaywrightError:
                failed = True
            what = f"The page [{n}] led to could not be loaded."
            if failed or current.url.startswith("chrome-error:"):
                await self._navigation_failed(current, mark, what)
            if navigations and await self._served_by_guard(navigations[-1]):
                await self._navigation_failed(current, mark, what, only_if_refused=True)
        await self._settle(current)
        return current.url, await self._title(current), self._refusals_since(mark)

    async def type(self, n: int, text: str) -> tuple[str, str]:
        """Put text into element n (replacing what it held; a select picks the option): (kind, label)."""
        _page, target = await self._element(n)
        try:
            tag, kind, editable = await target.evaluate(
                "el => [el.tagName.toLowerCase(), (el.type || '').toLowerCase(), el.isContentEditable]"
            )
            if tag == "select":
                try:
                    await target.select_option(label=text)
                except PlaywrightError:
                    await target.select_option(value=text)
                return "select", kind
            if (tag == "input" and kind in UNTYPEABLE) or (tag not in ("input", "textarea") and not editable):
                shown = f"{tag}[{kind}]" if kind else tag
                raise BrowserFailure("not_typeable", f"[{n}] ({shown}) takes no text; use click({n}).")
            await target.fill(text)
        except PlaywrightTimeoutError:
            raise BrowserFailure(
                "timeout", f"Typing into [{n}] did not finish within {self._timeout_s:g} s."
            ) from None
        except PlaywrightError as exc:
            raise BrowserFailure("action_failed", f"Could not type into [{n}]: {first_line(exc)}") from None
        return tag, kind

    async def screenshot(self, path: Path) -> tuple[str, str]:
        """Save what the current page shows (the viewport) as a PNG at path: (URL, title)."""
        page = self._current()
        try:
            await page.screenshot(path=path, type="png")
        except PlaywrightTimeoutError:
            reason = f"The screenshot took longer than {self._timeout_s:g} s."
            raise BrowserFailure("timeout", reason) from None
        except PlaywrightError as exc:
            reason = f"Could not take a screenshot: {first_line(exc)}"
            raise BrowserFailure("action_failed", reason) from None
        return page.url, await self._title(page)

    # -- helpers ----------------------------------------------------------------------------------

    async def _element(self, n: int) -> tuple[Page, Locator]:
        page = self._current()
        frame = self._refs.get(n)
        if frame is None:
            raise BrowserFailure(
                "not_found",
                f"No element [{n}] in the last snapshot; call snapshot() to number the page's elements.",
            )
        stale = BrowserFailure(
            "not_found", f"Element [{n}] is no longer on the page (it changed); call snapshot() again."
        )
        if self._ref_page is not page or frame.is_detached():
            raise stale
        target = frame.locator(f'[{REF_ATTRIBUTE}="{self._nonce}-{n}"]').first
        try:
            if await target.count() == 0:
                raise stale
        except PlaywrightError:
            raise stale from None
        return page, target

    async def _navigation_failed(
        self, page: Page, mark: int, message: str, *, only_if_refused: bool = False
    ) -> None:
        """A navigation failed: leave the page blank and raise why, the guard's refusal if it refused a
        request since mark (a redirect to a private address), else navigation_failed with message.
        With only_if_refused, a page nothing was refused for is left as it is."""
        refused = self._refusals_since(mark)
        if not refused and only_if_refused:
            return
        await self._blank(page)
        if refused and refused[0].code != "unresolvable":
            raise BrowserFailure(refused[0].code, refused[0].message)
        raise BrowserFailure("navigation_failed", refused[0].message if refused else message)

    @staticmethod
    async def _served_by_guard(request: Request) -> bool:
        """Whether the answer to request was the proxy's own refusal (a redirect to a refused address)."""
        try:
            response = await request.response()
        except PlaywrightError:
            return False
        return response is not None and REFUSED_HEADER in response.headers

    async def _settle(self, page: Page) -> None:
        """Give the page a moment to finish loading, and never leave it on a URL that is not a web page."""
        with contextlib.suppress(PlaywrightError):
            await page.wait_for_load_state("load", timeout=min(LOAD_GRACE_S, self._timeout_s) * 1000)
        if page.url != BLANK and isinstance(parse(page.url, page=True), Refusal):
            shown = page.url[:100]
            await self._blank(page)
            reason = f"The page went to {shown}, which is not a web page; left it."
            raise BrowserFailure("invalid_url", reason)

    async def _blank(self, page: Page) -> None:
        with contextlib.suppress(PlaywrightError):
            await page.goto(BLANK)

    @staticmethod
    async def _title(page: Page) -> str:
        try:
            return (await page.title()).strip()[:200]
        except PlaywrightError:
            return ""
