"""BrowserFailure: why a browser tool could not do what was asked, as the code its result carries."""

from __future__ import annotations

from bridge.errors import ToolError
from bridge.tools.base import ToolResult


class BrowserFailure(ToolError):
    """A browser action failed; `code` is the ToolResult's error code.

    Codes: `unavailable` (Playwright or Chromium missing, or Chromium would not start), `invalid_url`,
    `blocked_address` (the SSRF guard refused the page), `navigation_failed`, `timeout`, `not_found` (an
    element number the last snapshot did not give, or one that left the page), `no_page`, `not_typeable`.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def result(self) -> ToolResult:
        return ToolResult.error(self.code, str(self))
