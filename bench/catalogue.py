"""A reference catalogue of realistic third-party tools, only measured (never run) by the benchmarks."""

from __future__ import annotations

from typing import Any

from bridge.tools.base import Tool, ToolContext, ToolGroup, ToolResult, params

# ---------------------------------------------------------------------------- schema fragments


def _str(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _int(description: str, low: int | None = None, high: int | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "description": description}
    if low is not None:
        schema["minimum"] = low
    if high is not None:
        schema["maximum"] = high
    return schema | extra


def _num(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "number", "description": description, **extra}


def _bool(description: str, default: bool | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "boolean", "description": description}
    if default is not None:
        schema["default"] = default
    return schema


def _enum(description: str, *values: str, default: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": description, "enum": list(values)}
    if default is not None:
        schema["default"] = default
    return schema


def _arr(description: str, items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "array", "description": description, "items": items, **extra}


def _strs(description: str, **item: Any) -> dict[str, Any]:
    """An array of strings; item carries a format or enum the strings must follow."""
    return _arr(description, {"type": "string", **item})


def _obj(description: str, properties: dict[str, Any], *required: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _id(what: str) -> dict[str, Any]:
    return _str(f"ID of the {what}")


def _date(description: str) -> dict[str, Any]:
    return _str(description, format="date")


def _when(description: str) -> dict[str, Any]:
    return _str(description, format="date-time")


def _emails(description: str) -> dict[str, Any]:
    return _strs(description, format="email")


def _page_size(default: int = 25, high: int = 100) -> dict[str, Any]:
    return _int(f"Maximum number of results to return (default {default})", 1, high, default=default)


_PAGE_TOKEN = _str("Token from a previous response's next_page_token to fetch the next page")
_CELLS = _arr(
    "Rows of cell values, outer array = rows, inner array = cells in column order",
    {"type": "array", "items": {"type": ["string", "number", "boolean", "null"]}},
)
_START_END = _obj(
    "When the event starts or ends: date_time for timed events, date for all-day events",
    {
        "date_time": _when("RFC 3339 timestamp, e.g. 2025-03-14T09:30:00+01:00"),
        "date": _date("All-day date, YYYY-MM-DD"),
        "time_zone": _str("IANA time zone, e.g. Europe/Berlin"),
    },
)
_ATTENDEES = _arr(
    "People invited to the event",
    _obj(
        "One attendee",
        {
            "email": _str("Attendee's email address", format="email"),
            "display_name": _str("Name shown in the invitation"),
            "optional": _bool("Whether attendance is optional", default=False),
            "response_status": _enum("Initial RSVP", "needsAction", "accepted", "declined", "tentative"),
        },
        "email",
    ),
)
_RECURRENCE = _obj(
    "Repeat rule for a recurring event; omit for a single event",
    {
        "frequency": _enum("How often the event repeats", "daily", "weekly", "monthly", "yearly"),
        "interval": _int("Repeat every N periods (default 1)", 1, 99),
        "by_day": _strs("Weekdays for weekly rules", enum=["MO", "TU", "WE", "TH", "FR", "SA", "SU"]),
        "count": _int("Stop after this many occurrences", 1, 730),
        "until": _date("Last date an occurrence may fall on"),
    },
    "frequency",
)
_REMINDERS = _obj(
    "Reminders sent before the event",
    {
        "use_default": _bool("Use the calendar's default reminders", default=True),
        "overrides": _arr(
            "Custom reminders, replacing the defaults",
            _obj(
                "One reminder",
                {
                    "method": _enum("How to remind", "email", "popup"),
                    "minutes": _int("Minutes before the start", 0, 40320),
                },
                "method",
                "minutes",
            ),
            maxItems=5,
        ),
    },
)
_EVENT_FIELDS: dict[str, Any] = {
    "calendar_id": _str("Calendar ID; 'primary' for the user's main calendar", default="primary"),
    "summary": _str("Event title"),
    "description": _str("Event notes; basic HTML is allowed"),
    "location": _str("Free-form location or address"),
    "start": _START_END,
    "end": _START_END,
    "attendees": _ATTENDEES,
    "recurrence": _RECURRENCE,
    "reminders": _REMINDERS,
    "conference": _enum("Video conference to attach", "none", "meet", "zoom", "teams", default="none"),
    "visibility": _enum("Who can see the details", "default", "public", "private", "confidential"),
    "send_updates": _enum("Whom to email about the change", "all", "external_only", "none", default="all"),
}
_CONTACT_FIELDS: dict[str, Any] = {
    "given_name": _str("First name"),
    "family_name": _str("Last name"),
    "emails": _arr(
        "Email addresses",
        _obj(
            "One address",
            {
                "address": _str("Email address", format="email"),
                "type": _enum("Kind", "home", "work", "other"),
            },
            "address",
        ),
    ),
    "phones": _arr(
        "Phone numbers",
        _obj(
            "One number",
            {
                "number": _str("Phone number in E.164 form, e.g. +4930123456"),
                "type": _enum("Kind", "mobile", "home", "work", "other"),
            },
            "number",
        ),
    ),
    "organization": _obj(
        "Employer",
        {"name": _str("Company name"), "title": _str("Job title"), "department": _str("Department")},
    ),
    "addresses": _arr(
        "Postal addresses",
        _obj(
            "One address",
            {
                "street": _str("Street and number"),
                "city": _str("City"),
                "region": _str("State or region"),
                "postal_code": _str("Postal code"),
                "country": _str("ISO 3166-1 alpha-2 country code", pattern="^[A-Z]{2}$"),
            },
        ),
    ),
    "birthday": _date("Birthday, YYYY-MM-DD"),
    "notes": _str("Free-form notes"),
    "labels": _strs("Contact group names to put the contact in"),
}
_TASK_FIELDS: dict[str, Any] = {
    "title": _str("Task title", maxLength=1024),
    "notes": _str("Details, in Markdown"),
    "due": _date("Due date, YYYY-MM-DD"),
    "priority": _enum("Priority", "none", "low", "medium", "high", "urgent"),
    "assignee": _str("Email of the person the task is assigned to", format="email"),
    "tags": _strs("Tags to attach"),
}
_CRM_OBJECT = _enum("Kind of CRM record", "contact", "company", "deal", "ticket")


# ---------------------------------------------------------------------------- building blocks


async def _never_run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    # The catalogue exists to be measured; if a benchmark ever runs a tool, it should still succeed.
    return ToolResult.success({"ok": True})


def _tool(name: str, description: str, properties: dict[str, Any], *required: str) -> Tool:
    return Tool(name, description, params(properties, list(required)), _never_run)


# ---------------------------------------------------------------------------- groups

_MAIL = (
    _tool(
        "mail_search",
        "Search the mailbox with Gmail-style queries. Returns message IDs, senders, subjects and snippets.",
        {
            "query": _str("Search query, e.g. 'from:anna@example.com has:attachment newer_than:7d'"),
            "label": _str("Only messages with this label, e.g. INBOX or a user label"),
            "after": _date("Only messages received on or after this date"),
            "before": _date("Only messages received before this date"),
            "max_results": _page_size(20, 100),
            "page_token": _PAGE_TOKEN,
            "include_spam_trash": _bool("Also search Spam and Trash", default=False),
        },
        "query",
    ),
    _tool(
        "mail_read",
        "Read one email message: headers, body and attachment list.",
        {
            "message_id": _id("message"),
            "format": _enum("How much to return", "full", "metadata", "minimal", default="full"),
            "mark_as_read": _bool("Mark the message as read", default=False),
        },
        "message_id",
    ),
    _tool(
        "mail_read_thread",
        "Read every message of an email conversation in chronological order.",
        {"thread_id": _id("thread"), "max_messages": _int("Read at most this many messages", 1, 100)},
        "thread_id",
    ),
    _tool(
        "mail_send",
        "Send a new email. Attachments are referenced by Drive file ID.",
        {
            "to": _emails("Recipients"),
            "cc": _emails("Carbon-copy recipients"),
            "bcc": _emails("Blind carbon-copy recipients"),
            "subject": _str("Subject line"),
            "body": _str("Message body"),
            "body_format": _enum("Format of body", "text", "html", default="text"),
            "attachments": _arr(
                "Files to attach",
                _obj(
                    "One attachment",
                    {"file_id": _id("Drive file"), "filename": _str("Name shown")},
                    "file_id",
                ),
            ),
            "send_at": _when("Schedule the message for this time instead of sending now"),
        },
        "to",
        "subject",
        "body",
    ),
    _tool(
        "mail_reply",
        "Reply to a message in its thread, quoting it.",
        {
            "message_id": _id("message to reply to"),
            "body": _str("Reply text"),
            "reply_all": _bool("Reply to every recipient, not just the sender", default=False),
            "body_format": _enum("Format of body", "text", "html", default="text"),
            "attachment_file_ids": _strs("Drive file IDs to attach"),
        },
        "message_id",
        "body",
    ),
    _tool(
        "mail_forward",
        "Forward a message, with its attachments, to new recipients.",
        {
            "message_id": _id("message to forward"),
            "to": _emails("Recipients"),
            "comment": _str("Text added above the forwarded message"),
            "include_attachments": _bool("Forward the attachments too", default=True),
        },
        "message_id",
        "to",
    ),
    _tool(
        "mail_draft",
        "Create or update a draft without sending it.",
        {
            "draft_id": _str("ID of an existing draft to replace; omit to create a new one"),
            "to": _emails("Recipients"),
            "cc": _emails("Carbon-copy recipients"),
            "subject": _str("Subject line"),
            "body": _str("Message body"),
            "reply_to_message_id": _str("Make the draft a reply to this message"),
        },
        "subject",
        "body",
    ),
    _tool("mail_send_draft", "Send a saved draft.", {"draft_id": _id("draft")}, "draft_id"),
    _tool(
        "mail_label",
        "Add or remove labels on one or more messages.",
        {
            "message_ids": _strs("Messages to change", minItems=1),
            "add_labels": _strs("Label names to add"),
            "remove_labels": _strs("Label names to remove, e.g. UNREAD or INBOX"),
        },
        "message_ids",
    ),
    _tool(
        "mail_archive",
        "Archive messages: remove them from the inbox without deleting them.",
        {"message_ids": _strs("Messages to archive", minItems=1)},
        "message_ids",
    ),
    _tool(
        "mail_trash",
        "Move messages to Trash, or delete them permanently.",
        {
            "message_ids": _strs("Messages to delete", minItems=1),
            "permanent": _bool("Delete permanently instead of moving to Trash", default=False),
        },
        "message_ids",
    ),
    _tool(
        "mail_list_labels",
        "List the mailbox's system and user labels.",
        {"include_counts": _bool("Include total and unread message counts", default=False)},
    ),
    _tool(
        "mail_get_attachment",
        "Download an attachment, returning its text or saving it to Drive.",
        {
            "message_id": _id("message"),
            "attachment_id": _id("attachment"),
            "save_to_drive": _bool("Save the file to Drive instead of returning its content", default=False),
            "folder_id": _str("Drive folder to save into (default: root)"),
        },
        "message_id",
        "attachment_id",
    ),
    _tool(
        "mail_set_vacation",
        "Turn the automatic out-of-office reply on or off.",
        {
            "enabled": _bool("Whether the auto-reply is active"),
            "subject": _str("Subject of the auto-reply"),
            "body": _str("Text of the auto-reply"),
            "start": _when("When replies start"),
            "end": _when("When replies stop"),
            "contacts_only": _bool("Only reply to people in the user's contacts", default=False),
        },
        "enabled",
    ),
)

_DRIVE = (
    _tool(
        "drive_search",
        "Search files and folders in Drive by name, content, type, owner or date.",
        {
            "query": _str("Text to match in file names and content"),
            "mime_type": _enum(
                "Only files of this kind", "document", "spreadsheet", "presentation", "pdf", "image", "folder"
            ),
            "folder_id": _str("Only look inside this folder"),
            "owner": _str("Only files owned by this email address", format="email"),
            "modified_after": _when("Only files changed after this time"),
            "order_by": _enum(
                "Sort order", "relevance", "modified_desc", "name", "size_desc", default="relevance"
            ),
            "page_size": _page_size(),
            "page_token": _PAGE_TOKEN,
            "include_trashed": _bool("Include files in the trash", default=False),
        },
    ),
    _tool(
        "drive_get_metadata",
        "Get a file's metadata: name, type, size, owners, parents and sharing link.",
        {
            "file_id": _id("file"),
            "fields": _strs("Only return these fields, e.g. ['name', 'size', 'owners']"),
        },
        "file_id",
    ),
    _tool(
        "drive_download",
        "Download a file's content; Google-native documents are exported to the given format.",
        {
            "file_id": _id("file"),
            "export_format": _enum("Export format for native documents", "pdf", "docx", "xlsx", "csv", "txt"),
            "max_bytes": _int("Truncate the content after this many bytes", 1, 10_000_000),
        },
        "file_id",
    ),
    _tool(
        "drive_upload",
        "Upload a file to Drive from base64 content or a public URL.",
        {
            "name": _str("File name including extension"),
            "content_base64": _str("File content, base64-encoded", contentEncoding="base64"),
            "source_url": _str("Fetch the content from this URL instead", format="uri"),
            "mime_type": _str("MIME type, e.g. application/pdf"),
            "folder_id": _str("Destination folder (default: root)"),
            "description": _str("File description"),
            "convert": _bool("Convert Office files to the native format", default=False),
        },
        "name",
    ),
    _tool(
        "drive_create_folder",
        "Create a folder.",
        {
            "name": _str("Folder name"),
            "parent_id": _str("Parent folder (default: root)"),
            "color": _str("Folder colour as hex, e.g. #4285F4", pattern="^#[0-9A-Fa-f]{6}$"),
        },
        "name",
    ),
    _tool(
        "drive_move",
        "Move a file or folder to another folder.",
        {
            "file_id": _id("file or folder"),
            "destination_folder_id": _id("destination folder"),
            "keep_in_source": _bool("Add the new parent without removing the old one", default=False),
        },
        "file_id",
        "destination_folder_id",
    ),
    _tool(
        "drive_copy",
        "Copy a file, optionally under a new name or into another folder.",
        {"file_id": _id("file"), "name": _str("Name of the copy"), "destination_folder_id": _str("Folder")},
        "file_id",
    ),
    _tool(
        "drive_rename",
        "Rename a file or folder.",
        {"file_id": _id("file or folder"), "new_name": _str("New name")},
        "file_id",
        "new_name",
    ),
    _tool(
        "drive_share",
        "Share a file with people, groups or anyone with the link.",
        {
            "file_id": _id("file"),
            "recipients": _arr(
                "Who gets access",
                _obj(
                    "One grant",
                    {
                        "type": _enum("Kind of grantee", "user", "group", "domain", "anyone"),
                        "email": _str("Email for user or group grants", format="email"),
                        "domain": _str("Domain for domain grants, e.g. example.com"),
                        "role": _enum("Access level", "reader", "commenter", "writer", "owner"),
                    },
                    "type",
                    "role",
                ),
                minItems=1,
            ),
            "message": _str("Note included in the notification email"),
            "notify": _bool("Email the recipients", default=True),
            "expires_at": _when("Remove access at this time"),
        },
        "file_id",
        "recipients",
    ),
    _tool(
        "drive_list_permissions",
        "List who has access to a file and at what level.",
        {"file_id": _id("file")},
        "file_id",
    ),
    _tool(
        "drive_revoke_access",
        "Remove one permission from a file.",
        {"file_id": _id("file"), "permission_id": _id("permission, from drive_list_permissions")},
        "file_id",
        "permission_id",
    ),
    _tool(
        "drive_delete",
        "Move a file to the trash, or delete it permanently.",
        {"file_id": _id("file"), "permanent": _bool("Skip the trash", default=False)},
        "file_id",
    ),
    _tool(
        "drive_list_revisions",
        "List a file's earlier versions with author and time.",
        {"file_id": _id("file"), "page_size": _page_size(20, 200)},
        "file_id",
    ),
)

_CALENDAR = (
    _tool(
        "calendar_list_calendars",
        "List the calendars the user can see.",
        {
            "show_hidden": _bool("Include calendars hidden from the list", default=False),
            "min_access_role": _enum("Only calendars with at least this role", "reader", "writer", "owner"),
        },
    ),
    _tool(
        "calendar_list_events",
        "List events in a time range, expanding recurring events into single occurrences.",
        {
            "calendar_id": _EVENT_FIELDS["calendar_id"],
            "time_min": _when("Start of the range (inclusive)"),
            "time_max": _when("End of the range (exclusive)"),
            "query": _str("Free text to match in title, description, location and attendees"),
            "order_by": _enum("Sort order", "start_time", "updated", default="start_time"),
            "max_results": _page_size(50, 250),
            "time_zone": _str("IANA time zone for the response"),
        },
        "time_min",
    ),
    _tool(
        "calendar_get_event",
        "Get one event with attendees, conference link and recurrence.",
        {"calendar_id": _EVENT_FIELDS["calendar_id"], "event_id": _id("event")},
        "event_id",
    ),
    _tool(
        "calendar_create_event",
        "Create an event, optionally recurring, with attendees, reminders and a video conference.",
        _EVENT_FIELDS,
        "summary",
        "start",
        "end",
    ),
    _tool(
        "calendar_update_event",
        "Change an event; only the given fields change.",
        {"event_id": _id("event"), **_EVENT_FIELDS},
        "event_id",
    ),
    _tool(
        "calendar_delete_event",
        "Delete or cancel an event.",
        {
            "calendar_id": _EVENT_FIELDS["calendar_id"],
            "event_id": _id("event"),
            "send_updates": _EVENT_FIELDS["send_updates"],
        },
        "event_id",
    ),
    _tool(
        "calendar_respond",
        "Accept, decline or tentatively accept an invitation.",
        {
            "calendar_id": _EVENT_FIELDS["calendar_id"],
            "event_id": _id("event"),
            "response": _enum("RSVP", "accepted", "declined", "tentative"),
            "comment": _str("Note to the organiser"),
        },
        "event_id",
        "response",
    ),
    _tool(
        "calendar_find_free_time",
        "Find slots when all given people are free.",
        {
            "attendees": _emails("People who must be free"),
            "time_min": _when("Start of the search window"),
            "time_max": _when("End of the search window"),
            "duration_minutes": _int("Length of the meeting", 5, 480),
            "working_hours_only": _bool("Only propose slots within working hours", default=True),
            "time_zone": _str("IANA time zone for the results"),
        },
        "attendees",
        "time_min",
        "time_max",
        "duration_minutes",
    ),
    _tool(
        "calendar_quick_add",
        "Create an event from a natural-language sentence such as 'Lunch with Sam Friday 1pm'.",
        {"text": _str("Sentence describing the event"), "calendar_id": _EVENT_FIELDS["calendar_id"]},
        "text",
    ),
    _tool(
        "calendar_move_event",
        "Move an event to another calendar, changing its organiser.",
        {
            "event_id": _id("event"),
            "source_calendar_id": _id("calendar it is in"),
            "destination_calendar_id": _id("calendar to move it to"),
        },
        "event_id",
        "source_calendar_id",
        "destination_calendar_id",
    ),
)

_SHEETS = (
    _tool(
        "sheets_create",
        "Create a spreadsheet.",
        {
            "title": _str("Spreadsheet title"),
            "sheet_names": _strs("Names of the tabs to create (default: one 'Sheet1')"),
            "folder_id": _str("Drive folder to create it in"),
        },
        "title",
    ),
    _tool(
        "sheets_get_info",
        "Get a spreadsheet's title, tabs, their sizes and named ranges.",
        {"spreadsheet_id": _id("spreadsheet")},
        "spreadsheet_id",
    ),
    _tool(
        "sheets_read_range",
        "Read cell values from a range in A1 notation.",
        {
            "spreadsheet_id": _id("spreadsheet"),
            "range": _str("A1 range, e.g. 'Budget!A1:F50'"),
            "value_render": _enum(
                "How values are rendered", "formatted", "unformatted", "formula", default="formatted"
            ),
            "major_dimension": _enum("Return rows or columns", "rows", "columns", default="rows"),
        },
        "spreadsheet_id",
        "range",
    ),
    _tool(
        "sheets_write_range",
        "Write values into a range, overwriting what is there.",
        {
            "spreadsheet_id": _id("spreadsheet"),
            "range": _str("A1 range of the top-left cell or the whole area"),
            "values": _CELLS,
            "value_input": _enum(
                "'user_entered' parses formulas and dates like typing; 'raw' stores as-is",
                "user_entered",
                "raw",
                default="user_entered",
            ),
        },
        "spreadsheet_id",
        "range",
        "values",
    ),
    _tool(
        "sheets_append_rows",
        "Append rows after the last row of a table.",
        {
            "spreadsheet_id": _id("spreadsheet"),
            "range": _str("A1 range identifying the table, e.g. 'Log!A:D'"),
            "values": _CELLS,
            "insert_rows": _bool("Insert new rows rather than overwrite empty ones", default=True),
        },
        "spreadsheet_id",
        "range",
        "values",
    ),
    _tool(
        "sheets_clear_range",
        "Clear values (not formatting) from a range.",
        {"spreadsheet_id": _id("spreadsheet"), "range": _str("A1 range")},
        "spreadsheet_id",
        "range",
    ),
    _tool(
        "sheets_add_sheet",
        "Add a tab to a spreadsheet.",
        {
            "spreadsheet_id": _id("spreadsheet"),
            "title": _str("Tab name"),
            "rows": _int("Number of rows", 1, 10_000_000, default=1000),
            "columns": _int("Number of columns", 1, 18_278, default=26),
            "index": _int("Position among the tabs, 0-based", 0),
        },
        "spreadsheet_id",
        "title",
    ),
    _tool(
        "sheets_delete_sheet",
        "Delete a tab and everything on it.",
        {"spreadsheet_id": _id("spreadsheet"), "sheet_id": _int("Numeric tab ID from sheets_get_info", 0)},
        "spreadsheet_id",
        "sheet_id",
    ),
    _tool(
        "sheets_format_range",
        "Apply text, number and colour formatting to a range.",
        {
            "spreadsheet_id": _id("spreadsheet"),
            "range": _str("A1 range"),
            "format": _obj(
                "Formatting to apply; omitted fields stay unchanged",
                {
                    "bold": _bool("Bold text"),
                    "italic": _bool("Italic text"),
                    "font_size": _int("Font size in points", 6, 72),
                    "text_color": _str("Hex colour, e.g. #202124"),
                    "background_color": _str("Hex colour, e.g. #FFF2CC"),
                    "number_format": _str("Pattern, e.g. '#,##0.00' or 'yyyy-mm-dd'"),
                    "horizontal_alignment": _enum("Alignment", "left", "center", "right"),
                    "wrap": _bool("Wrap long text"),
                },
            ),
        },
        "spreadsheet_id",
        "range",
        "format",
    ),
    _tool(
        "sheets_sort_range",
        "Sort the rows of a range by one or more columns.",
        {
            "spreadsheet_id": _id("spreadsheet"),
            "range": _str("A1 range, without the header row"),
            "sort_specs": _arr(
                "Sort keys, most significant first",
                _obj(
                    "One key",
                    {"column": _str("Column letter, e.g. C"), "order": _enum("Direction", "asc", "desc")},
                    "column",
                ),
                minItems=1,
            ),
        },
        "spreadsheet_id",
        "range",
        "sort_specs",
    ),
    _tool(
        "sheets_find_replace",
        "Find and replace text across a tab or the whole spreadsheet.",
        {
            "spreadsheet_id": _id("spreadsheet"),
            "find": _str("Text or pattern to find"),
            "replacement": _str("Replacement text"),
            "sheet_id": _int("Limit to this tab (default: all tabs)", 0),
            "match_case": _bool("Case-sensitive", default=False),
            "whole_cell": _bool("Only match entire cell contents", default=False),
            "regex": _bool("Treat find as a regular expression", default=False),
        },
        "spreadsheet_id",
        "find",
        "replacement",
    ),
)

_TASKS = (
    _tool("tasks_list_lists", "List the user's task lists.", {"page_size": _page_size(20)}),
    _tool("tasks_create_list", "Create a task list.", {"title": _str("List name")}, "title"),
    _tool(
        "tasks_list",
        "List tasks in a list, filtered by status, due date or assignee.",
        {
            "list_id": _str("Task list ID (default: the user's default list)"),
            "status": _enum("Which tasks", "open", "completed", "all", default="open"),
            "due_after": _date("Only tasks due on or after this date"),
            "due_before": _date("Only tasks due on or before this date"),
            "assignee": _str("Only tasks assigned to this email", format="email"),
            "include_subtasks": _bool("Include subtasks", default=True),
            "max_results": _page_size(50),
        },
    ),
    _tool("tasks_get", "Get one task with its subtasks and comments.", {"task_id": _id("task")}, "task_id"),
    _tool(
        "tasks_create",
        "Create a task, optionally as a subtask, with a due date and a reminder.",
        {
            "list_id": _str("Task list ID (default: the user's default list)"),
            **_TASK_FIELDS,
            "parent_task_id": _str("Make this a subtask of that task"),
            "reminder_at": _when("When to remind the assignee"),
        },
        "title",
    ),
    _tool(
        "tasks_update",
        "Change a task; only the given fields change.",
        {
            "task_id": _id("task"),
            **_TASK_FIELDS,
            "status": _enum("Status", "open", "in_progress", "completed"),
        },
        "task_id",
    ),
    _tool(
        "tasks_complete",
        "Mark a task as completed.",
        {"task_id": _id("task"), "completed_at": _when("Completion time (default: now)")},
        "task_id",
    ),
    _tool("tasks_delete", "Delete a task and its subtasks.", {"task_id": _id("task")}, "task_id"),
    _tool(
        "tasks_move",
        "Move a task to another list or position, or under another parent.",
        {
            "task_id": _id("task"),
            "list_id": _str("Destination list"),
            "parent_task_id": _str("New parent task; empty string to make it top-level"),
            "previous_task_id": _str("Place it right after this sibling"),
        },
        "task_id",
    ),
    _tool(
        "tasks_add_comment",
        "Add a comment to a task.",
        {"task_id": _id("task"), "text": _str("Comment text; @email mentions notify people")},
        "task_id",
        "text",
    ),
)

_PDF = (
    _tool(
        "pdf_extract_text",
        "Extract the text of a PDF, using OCR for scanned pages if asked.",
        {
            "file_id": _str("Drive file ID of the PDF"),
            "url": _str("Public URL of the PDF, instead of file_id", format="uri"),
            "pages": _str("Page ranges, e.g. '1-3,7' (default: all)"),
            "ocr": _bool("Run OCR on pages without a text layer", default=False),
            "language": _str("OCR language as ISO 639-1, e.g. 'de'"),
        },
    ),
    _tool(
        "pdf_get_info",
        "Get a PDF's page count, page sizes, metadata and whether it is encrypted or has forms.",
        {"file_id": _id("PDF")},
        "file_id",
    ),
    _tool(
        "pdf_merge",
        "Merge several PDFs into one, in the given order.",
        {
            "file_ids": _strs("PDFs to merge, in order", minItems=2),
            "output_name": _str("Name of the merged file"),
            "folder_id": _str("Drive folder for the result"),
        },
        "file_ids",
        "output_name",
    ),
    _tool(
        "pdf_split",
        "Split a PDF into several files by page range.",
        {
            "file_id": _id("PDF"),
            "ranges": _strs("One page range per output file, e.g. ['1-4', '5-9']", minItems=1),
            "output_prefix": _str("Prefix for the output file names"),
        },
        "file_id",
        "ranges",
    ),
    _tool(
        "pdf_convert",
        "Convert a PDF to an office document, images or text.",
        {
            "file_id": _id("PDF"),
            "target_format": _enum("Output format", "docx", "xlsx", "pptx", "png", "jpg", "txt", "html"),
            "dpi": _int("Resolution for image output", 72, 600, default=150),
        },
        "file_id",
        "target_format",
    ),
    _tool(
        "pdf_create_from_html",
        "Render HTML (or Markdown) to a PDF.",
        {
            "html": _str("HTML or Markdown source"),
            "page_size": _enum("Paper size", "A4", "A5", "letter", "legal", default="A4"),
            "orientation": _enum("Orientation", "portrait", "landscape", default="portrait"),
            "margins_mm": _obj(
                "Page margins in millimetres",
                {
                    side: _num(f"{side.title()} margin", minimum=0)
                    for side in ("top", "right", "bottom", "left")
                },
            ),
            "output_name": _str("File name of the PDF"),
        },
        "html",
        "output_name",
    ),
    _tool(
        "pdf_list_form_fields",
        "List a PDF form's fields with their names, types and options.",
        {"file_id": _id("PDF form")},
        "file_id",
    ),
    _tool(
        "pdf_fill_form",
        "Fill in a PDF form's fields and save a new file.",
        {
            "file_id": _id("PDF form"),
            "fields": {
                "type": "object",
                "description": "Field name to value, names as given by pdf_list_form_fields",
                "additionalProperties": {"type": "string"},
            },
            "flatten": _bool("Make the filled fields non-editable", default=False),
        },
        "file_id",
        "fields",
    ),
    _tool(
        "pdf_compress",
        "Reduce a PDF's file size by recompressing images.",
        {"file_id": _id("PDF"), "quality": _enum("Trade-off", "low", "medium", "high", default="medium")},
        "file_id",
    ),
    _tool(
        "pdf_rotate_pages",
        "Rotate pages of a PDF.",
        {
            "file_id": _id("PDF"),
            "pages": _str("Page ranges, e.g. '2,4-6' (default: all)"),
            "angle": {
                "type": "integer",
                "description": "Clockwise rotation in degrees",
                "enum": [90, 180, 270],
            },
        },
        "file_id",
        "angle",
    ),
    _tool(
        "pdf_watermark",
        "Stamp a text watermark on every page.",
        {
            "file_id": _id("PDF"),
            "text": _str("Watermark text, e.g. CONFIDENTIAL"),
            "opacity": _num("Opacity from 0 (invisible) to 1", minimum=0, maximum=1, default=0.3),
            "position": _enum("Placement", "center", "diagonal", "header", "footer", default="diagonal"),
        },
        "file_id",
        "text",
    ),
    _tool(
        "pdf_protect",
        "Encrypt a PDF with a password and restrict what readers may do.",
        {
            "file_id": _id("PDF"),
            "password": _str("Password needed to open the file", minLength=6),
            "permissions": _strs(
                "What readers may still do", enum=["print", "copy", "annotate", "fill_forms"]
            ),
        },
        "file_id",
        "password",
    ),
)

_CONFIG = (
    _tool(
        "config_get",
        "Read a setting's effective value and the scope it comes from.",
        {"key": _str("Dotted setting key, e.g. 'billing.invoice_prefix'")},
        "key",
    ),
    _tool(
        "config_set",
        "Change a setting at user, workspace or global scope.",
        {
            "key": _str("Dotted setting key"),
            "value": _str("New value as JSON, e.g. 'true', '30' or '\"EUR\"'"),
            "scope": _enum("Where the value applies", "user", "workspace", "global", default="workspace"),
            "reason": _str("Why, recorded in the audit log"),
        },
        "key",
        "value",
    ),
    _tool(
        "config_list",
        "List settings, optionally under a key prefix.",
        {
            "prefix": _str("Only keys starting with this, e.g. 'notifications.'"),
            "scope": _enum("Only this scope", "user", "workspace", "global"),
            "include_defaults": _bool("Include settings still at their default", default=False),
        },
    ),
    _tool(
        "config_reset",
        "Reset a setting to its default at the given scope.",
        {"key": _str("Dotted setting key"), "scope": _enum("Scope", "user", "workspace", "global")},
        "key",
        "scope",
    ),
    _tool(
        "config_flag_list",
        "List feature flags with their state per environment.",
        {
            "environment": _enum("Environment", "development", "staging", "production"),
            "tag": _str("Only flags with this tag"),
            "enabled_only": _bool("Only flags that are on", default=False),
        },
    ),
    _tool(
        "config_flag_get",
        "Get a feature flag's rules, variants and rollout in one environment.",
        {
            "flag_key": _str("Flag key"),
            "environment": _enum("Environment", "development", "staging", "production"),
        },
        "flag_key",
        "environment",
    ),
    _tool(
        "config_flag_create",
        "Create a feature flag, off in every environment.",
        {
            "flag_key": _str("Flag key", pattern="^[a-z0-9][a-z0-9_.-]{1,63}$"),
            "description": _str("What the flag controls"),
            "variants": _arr(
                "Variants for multivariate flags (default: on/off)",
                _obj(
                    "One variant",
                    {
                        "key": _str("Variant key"),
                        "value": _str("Variant value as JSON"),
                        "weight": _int("Share of traffic in percent", 0, 100),
                    },
                    "key",
                    "value",
                ),
            ),
            "default_variant": _str("Variant served when no rule matches"),
            "tags": _strs("Tags"),
        },
        "flag_key",
        "description",
    ),
    _tool(
        "config_flag_enable",
        "Turn a flag on in an environment, for everyone or a percentage rollout.",
        {
            "flag_key": _str("Flag key"),
            "environment": _enum("Environment", "development", "staging", "production"),
            "rollout_percentage": _int("Share of users who get it", 0, 100, default=100),
            "segments": _strs("Only users in these segments"),
        },
        "flag_key",
        "environment",
    ),
    _tool(
        "config_flag_disable",
        "Turn a flag off in an environment.",
        {
            "flag_key": _str("Flag key"),
            "environment": _enum("Environment", "development", "staging", "production"),
            "reason": _str("Why, recorded in the audit log"),
        },
        "flag_key",
        "environment",
    ),
    _tool(
        "config_audit_log",
        "List recent changes to settings and flags: who, what, when and why.",
        {
            "key": _str("Only changes to this setting or flag"),
            "actor": _str("Only changes by this email", format="email"),
            "since": _when("Only changes after this time"),
            "limit": _page_size(50, 500),
        },
    ),
)

_CONTACTS = (
    _tool(
        "contacts_search",
        "Search contacts by name, email, phone or company.",
        {
            "query": _str("Text to match"),
            "fields": _strs(
                "Fields to return", enum=["names", "emails", "phones", "organization", "addresses"]
            ),
            "page_size": _page_size(10, 50),
        },
        "query",
    ),
    _tool(
        "contacts_get",
        "Get one contact with all its fields.",
        {"contact_id": _id("contact")},
        "contact_id",
    ),
    _tool("contacts_create", "Create a contact.", _CONTACT_FIELDS, "given_name"),
    _tool(
        "contacts_update",
        "Change a contact; given list fields replace the existing lists.",
        {"contact_id": _id("contact"), **_CONTACT_FIELDS},
        "contact_id",
    ),
    _tool("contacts_delete", "Delete a contact.", {"contact_id": _id("contact")}, "contact_id"),
    _tool(
        "contacts_list_groups",
        "List contact groups (labels) with member counts.",
        {"include_system": _bool("Include system groups such as 'starred'", default=False)},
    ),
    _tool("contacts_create_group", "Create a contact group.", {"name": _str("Group name")}, "name"),
    _tool(
        "contacts_add_to_group",
        "Add contacts to a group.",
        {"group_id": _id("group"), "contact_ids": _strs("Contacts to add", minItems=1)},
        "group_id",
        "contact_ids",
    ),
    _tool(
        "contacts_remove_from_group",
        "Remove contacts from a group without deleting them.",
        {"group_id": _id("group"), "contact_ids": _strs("Contacts to remove", minItems=1)},
        "group_id",
        "contact_ids",
    ),
    _tool(
        "contacts_find_duplicates",
        "Find contacts that are probably the same person.",
        {
            "match_on": _strs("Fields that must match", enum=["name", "email", "phone"]),
            "limit": _page_size(20),
        },
    ),
    _tool(
        "contacts_merge",
        "Merge duplicate contacts into one, keeping every email and phone number.",
        {"primary_contact_id": _id("contact to keep"), "duplicate_ids": _strs("Contacts merged into it")},
        "primary_contact_id",
        "duplicate_ids",
    ),
)

_DOCS = (
    _tool(
        "docs_create",
        "Create a document from Markdown or a template.",
        {
            "title": _str("Document title"),
            "content": _str("Initial content in Markdown"),
            "template_id": _str("Copy this template document instead"),
            "folder_id": _str("Drive folder to create it in"),
        },
        "title",
    ),
    _tool(
        "docs_get",
        "Read a document's content.",
        {
            "document_id": _id("document"),
            "format": _enum("Output format", "markdown", "plain_text", "html", default="markdown"),
            "include_suggestions": _bool("Include pending suggested edits", default=False),
        },
        "document_id",
    ),
    _tool(
        "docs_append_text",
        "Append text to the end of a document.",
        {
            "document_id": _id("document"),
            "text": _str("Text to append; Markdown is converted"),
            "style": _enum(
                "Paragraph style", "normal", "title", "heading_1", "heading_2", "heading_3", "quote"
            ),
        },
        "document_id",
        "text",
    ),
    _tool(
        "docs_insert_text",
        "Insert text at a character index.",
        {
            "document_id": _id("document"),
            "text": _str("Text to insert"),
            "index": _int("Character index to insert at, 1 = start of body", 1),
        },
        "document_id",
        "text",
        "index",
    ),
    _tool(
        "docs_replace_text",
        "Replace every occurrence of a text.",
        {
            "document_id": _id("document"),
            "find": _str("Text to find"),
            "replace": _str("Replacement"),
            "match_case": _bool("Case-sensitive", default=True),
        },
        "document_id",
        "find",
        "replace",
    ),
    _tool(
        "docs_insert_table",
        "Insert a table, optionally filled with data.",
        {
            "document_id": _id("document"),
            "rows": _int("Rows", 1, 100),
            "columns": _int("Columns", 1, 20),
            "index": _int("Character index (default: end)", 1),
            "data": _CELLS,
        },
        "document_id",
        "rows",
        "columns",
    ),
    _tool(
        "docs_insert_image",
        "Insert an image from a URL.",
        {
            "document_id": _id("document"),
            "image_url": _str("Public image URL (PNG, JPEG or GIF)", format="uri"),
            "index": _int("Character index (default: end)", 1),
            "width_pt": _num("Width in points", minimum=1),
            "height_pt": _num("Height in points", minimum=1),
        },
        "document_id",
        "image_url",
    ),
    _tool(
        "docs_add_comment",
        "Comment on a document, optionally anchored to a quoted passage.",
        {
            "document_id": _id("document"),
            "text": _str("Comment text"),
            "quoted_text": _str("Exact passage the comment refers to"),
            "mentions": _emails("People to notify"),
        },
        "document_id",
        "text",
    ),
    _tool(
        "docs_list_comments",
        "List a document's comments and replies.",
        {
            "document_id": _id("document"),
            "include_resolved": _bool("Include resolved threads", default=False),
        },
        "document_id",
    ),
    _tool(
        "docs_resolve_comment",
        "Resolve a comment thread, optionally replying first.",
        {"document_id": _id("document"), "comment_id": _id("comment"), "reply": _str("Closing reply")},
        "document_id",
        "comment_id",
    ),
    _tool(
        "docs_export",
        "Export a document to another format and save it to Drive.",
        {
            "document_id": _id("document"),
            "format": _enum("Export format", "pdf", "docx", "odt", "rtf", "epub", "txt", "html"),
            "folder_id": _str("Drive folder for the export"),
        },
        "document_id",
        "format",
    ),
)

_CRM = (
    _tool(
        "crm_search",
        "Search CRM records of one kind by text and filters.",
        {
            "object_type": _CRM_OBJECT,
            "query": _str("Text to match in names, emails and domains"),
            "owner_id": _str("Only records owned by this user"),
            "lifecycle_stage": _enum(
                "Contacts only", "subscriber", "lead", "mql", "sql", "opportunity", "customer"
            ),
            "created_after": _when("Only records created after this time"),
            "limit": _page_size(20),
            "after": _str("Paging cursor from the previous response"),
        },
        "object_type",
    ),
    _tool(
        "crm_get_record",
        "Get one record with the chosen properties and associated records.",
        {
            "object_type": _CRM_OBJECT,
            "record_id": _id("record"),
            "properties": _strs("Property names to return (default: the standard set)"),
            "associations": _strs(
                "Associated kinds to include", enum=["contact", "company", "deal", "ticket"]
            ),
        },
        "object_type",
        "record_id",
    ),
    _tool(
        "crm_create_contact",
        "Create a CRM contact.",
        {
            "email": _str("Email address, unique per contact", format="email"),
            "first_name": _str("First name"),
            "last_name": _str("Last name"),
            "phone": _str("Phone number"),
            "company_id": _str("Associate with this company"),
            "lifecycle_stage": _enum("Stage", "subscriber", "lead", "mql", "sql", "opportunity", "customer"),
            "owner_id": _str("User who owns the contact"),
            "properties": {
                "type": "object",
                "description": "Custom properties by internal name",
                "additionalProperties": {"type": "string"},
            },
        },
        "email",
    ),
    _tool(
        "crm_create_company",
        "Create a CRM company.",
        {
            "name": _str("Company name"),
            "domain": _str("Website domain, e.g. example.com", format="hostname"),
            "industry": _str("Industry"),
            "employee_count": _int("Number of employees", 0),
            "annual_revenue": _num("Annual revenue in the account currency", minimum=0),
            "country": _str("ISO 3166-1 alpha-2 country code", pattern="^[A-Z]{2}$"),
        },
        "name",
    ),
    _tool(
        "crm_create_deal",
        "Create a deal in a pipeline stage, linked to contacts and a company.",
        {
            "name": _str("Deal name"),
            "pipeline_id": _id("pipeline"),
            "stage_id": _id("stage within the pipeline"),
            "amount": _num("Deal value", minimum=0),
            "currency": _str("ISO 4217 code, e.g. EUR", pattern="^[A-Z]{3}$"),
            "close_date": _date("Expected close date"),
            "owner_id": _str("User who owns the deal"),
            "contact_ids": _strs("Contacts to associate"),
            "company_id": _str("Company to associate"),
        },
        "name",
        "pipeline_id",
        "stage_id",
    ),
    _tool(
        "crm_update_deal",
        "Change a deal's stage, amount or close date, or mark it won or lost.",
        {
            "deal_id": _id("deal"),
            "stage_id": _str("New stage"),
            "amount": _num("New value", minimum=0),
            "close_date": _date("New expected close date"),
            "probability": _num("Win probability from 0 to 1", minimum=0, maximum=1),
            "lost_reason": _str("Required when moving to a lost stage"),
        },
        "deal_id",
    ),
    _tool(
        "crm_list_deals",
        "List deals filtered by pipeline, stage, owner, amount or close date.",
        {
            "pipeline_id": _str("Pipeline"),
            "stage_id": _str("Stage"),
            "owner_id": _str("Owner"),
            "close_date_before": _date("Expected to close on or before"),
            "min_amount": _num("Minimum value", minimum=0),
            "sort": _enum("Sort order", "close_date", "amount_desc", "updated_desc", default="close_date"),
            "limit": _page_size(20),
        },
    ),
    _tool(
        "crm_list_pipelines",
        "List pipelines and their stages.",
        {"object_type": _enum("Pipelines for", "deal", "ticket", default="deal")},
    ),
    _tool(
        "crm_log_activity",
        "Log a call, email, meeting or note on a record's timeline.",
        {
            "object_type": _CRM_OBJECT,
            "record_id": _id("record"),
            "activity_type": _enum("Kind", "call", "email", "meeting", "note"),
            "subject": _str("Short title"),
            "body": _str("Details"),
            "occurred_at": _when("When it happened (default: now)"),
            "duration_minutes": _int("Length of a call or meeting", 0, 1440),
            "outcome": _enum(
                "Call outcome", "connected", "left_voicemail", "no_answer", "busy", "wrong_number"
            ),
        },
        "object_type",
        "record_id",
        "activity_type",
    ),
    _tool(
        "crm_create_ticket",
        "Open a support ticket.",
        {
            "subject": _str("Ticket subject"),
            "description": _str("Problem description"),
            "priority": _enum("Priority", "low", "medium", "high", "urgent", default="medium"),
            "pipeline_id": _str("Ticket pipeline (default: support)"),
            "contact_id": _str("Customer who raised it"),
            "company_id": _str("Company of the customer"),
        },
        "subject",
    ),
    _tool(
        "crm_associate",
        "Link two records, e.g. a contact to a deal.",
        {
            "from_type": _CRM_OBJECT,
            "from_id": _id("first record"),
            "to_type": _CRM_OBJECT,
            "to_id": _id("second record"),
            "label": _str("Association label, e.g. 'decision maker'"),
        },
        "from_type",
        "from_id",
        "to_type",
        "to_id",
    ),
    _tool(
        "crm_pipeline_report",
        "Summarise a pipeline: deal count and value per stage, win rate and forecast.",
        {
            "pipeline_id": _id("pipeline"),
            "period": _enum("Close-date window", "this_month", "this_quarter", "next_quarter", "this_year"),
            "group_by": _enum("Break down by", "stage", "owner", "month", default="stage"),
        },
        "pipeline_id",
    ),
)

_CHAT = (
    _tool(
        "chat_list_channels",
        "List channels and conversations the user belongs to.",
        {
            "types": _strs("Kinds to include (default: public)", enum=["public", "private", "im", "mpim"]),
            "exclude_archived": _bool("Leave out archived channels", default=True),
            "limit": _page_size(100, 1000),
            "cursor": _str("Paging cursor from the previous response"),
        },
    ),
    _tool(
        "chat_read_channel",
        "Read recent messages of a channel, newest first.",
        {
            "channel_id": _id("channel, e.g. C024BE91L"),
            "oldest": _str("Only messages after this timestamp (e.g. '1712345678.000200')"),
            "latest": _str("Only messages before this timestamp"),
            "limit": _page_size(50, 1000),
            "include_thread_replies": _bool("Inline thread replies", default=False),
        },
        "channel_id",
    ),
    _tool(
        "chat_read_thread",
        "Read a thread: the parent message and its replies.",
        {
            "channel_id": _id("channel"),
            "thread_ts": _str("Timestamp of the parent message"),
            "limit": _page_size(100, 1000),
        },
        "channel_id",
        "thread_ts",
    ),
    _tool(
        "chat_post_message",
        "Post a message to a channel or thread, in mrkdwn or with layout blocks.",
        {
            "channel_id": _id("channel or DM"),
            "text": _str("Message text in mrkdwn; also the notification fallback for blocks"),
            "thread_ts": _str("Reply in this thread"),
            "reply_broadcast": _bool("Also show a thread reply in the channel", default=False),
            "blocks": _arr(
                "Layout blocks",
                _obj(
                    "One block",
                    {
                        "type": _enum("Block type", "section", "header", "divider", "context"),
                        "text": _str("Block text in mrkdwn"),
                    },
                    "type",
                ),
                maxItems=50,
            ),
            "unfurl_links": _bool("Show link previews", default=True),
        },
        "channel_id",
        "text",
    ),
    _tool(
        "chat_update_message",
        "Edit a message the user posted.",
        {"channel_id": _id("channel"), "ts": _str("Timestamp of the message"), "text": _str("New text")},
        "channel_id",
        "ts",
        "text",
    ),
    _tool(
        "chat_delete_message",
        "Delete a message the user posted.",
        {"channel_id": _id("channel"), "ts": _str("Timestamp of the message")},
        "channel_id",
        "ts",
    ),
    _tool(
        "chat_add_reaction",
        "Add an emoji reaction to a message.",
        {
            "channel_id": _id("channel"),
            "ts": _str("Timestamp of the message"),
            "emoji": _str("Emoji name without colons, e.g. thumbsup"),
        },
        "channel_id",
        "ts",
        "emoji",
    ),
    _tool(
        "chat_search_messages",
        "Search messages across the workspace.",
        {
            "query": _str("Search text; supports in:#channel, from:@user, has:link"),
            "after": _date("Only messages after this date"),
            "before": _date("Only messages before this date"),
            "sort": _enum("Sort order", "relevance", "timestamp", default="relevance"),
            "count": _page_size(20),
        },
        "query",
    ),
    _tool(
        "chat_create_channel",
        "Create a channel and invite people to it.",
        {
            "name": _str("Channel name: lowercase, no spaces", pattern="^[a-z0-9_-]{1,80}$"),
            "is_private": _bool("Create a private channel", default=False),
            "topic": _str("Channel topic"),
            "purpose": _str("Channel purpose"),
            "invite_user_ids": _strs("Users to invite"),
        },
        "name",
    ),
    _tool(
        "chat_invite",
        "Invite users to a channel.",
        {"channel_id": _id("channel"), "user_ids": _strs("Users to invite", minItems=1, maxItems=1000)},
        "channel_id",
        "user_ids",
    ),
    _tool(
        "chat_set_status",
        "Set the user's status text and emoji, optionally until a time.",
        {
            "text": _str("Status text, up to 100 characters; empty to clear", maxLength=100),
            "emoji": _str("Emoji name, e.g. palm_tree"),
            "expires_at": _when("Clear the status at this time"),
        },
        "text",
    ),
    _tool(
        "chat_schedule_message",
        "Schedule a message to be posted later.",
        {
            "channel_id": _id("channel"),
            "text": _str("Message text in mrkdwn"),
            "post_at": _when("When to post it, up to 120 days ahead"),
            "thread_ts": _str("Reply in this thread"),
        },
        "channel_id",
        "text",
        "post_at",
    ),
    _tool(
        "chat_lookup_user",
        "Find a workspace member by email or user ID, with profile and local time.",
        {"email": _str("Email address", format="email"), "user_id": _str("User ID, e.g. U012AB3CD")},
    ),
    _tool(
        "chat_upload_file",
        "Share a Drive file in one or more channels.",
        {
            "file_id": _id("Drive file"),
            "channel_ids": _strs("Channels to share it in", minItems=1),
            "initial_comment": _str("Message posted with the file"),
            "thread_ts": _str("Share it in this thread"),
        },
        "file_id",
        "channel_ids",
    ),
)

_GROUPS: tuple[tuple[str, str, tuple[Tool, ...]], ...] = (
    ("mail", "Search, read, send and organise email", _MAIL),
    ("drive", "Find, upload, move and share files in cloud storage", _DRIVE),
    ("calendar", "View, create and change events and find free time", _CALENDAR),
    ("sheets", "Read, write and format spreadsheets", _SHEETS),
    ("tasks", "Manage to-do lists, tasks, due dates and assignees", _TASKS),
    ("pdf", "Extract text from, convert, merge, split and fill PDF files", _PDF),
    ("config", "Read and change settings and feature flags", _CONFIG),
    ("contacts", "Find, add and organise contacts in the address book", _CONTACTS),
    ("docs", "Create, read, edit and comment on documents", _DOCS),
    ("crm", "Manage CRM contacts, companies, deals and support tickets", _CRM),
    ("chat", "Read and post messages in team chat channels", _CHAT),
)


# Acronyms the default title (name.title()) would spell wrongly.
_TITLES = {"pdf": "PDF", "crm": "CRM"}


def catalogue_groups() -> tuple[ToolGroup, ...]:
    """The catalogue as tool groups, ready for build_registry(settings, catalogue_groups())."""
    return tuple(
        ToolGroup(name, description, tools, _TITLES.get(name, "")) for name, description, tools in _GROUPS
    )
