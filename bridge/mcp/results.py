"""An MCP tool's result as the model reads it: text and JSON as they are, images and files described."""

from __future__ import annotations

import json

import mcp.types as mt

from bridge.tools.base import ToolResult


def tool_result(server: str, result: mt.CallToolResult) -> ToolResult:
    """The result as a ToolResult; the runner truncates it like any other tool's.

    Images come back as a short description: no model profile takes image parts yet, and base64
    would cost thousands of tokens of noise.
    """
    parts = [_block(block) for block in result.content]
    text = "\n".join(p for p in parts if p)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    if result.is_error:
        return ToolResult.error("tool_error", f"MCP server '{server}': {text or 'the tool failed'}")
    return ToolResult.success(text or "(the tool returned nothing)")


def _block(block: object) -> str:
    if isinstance(block, mt.TextContent):
        return block.text
    if isinstance(block, mt.ImageContent):
        return f"[image: {block.mime_type}, {_size(block.data)}]"
    if isinstance(block, mt.AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)}]"
    if isinstance(block, mt.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mt.TextResourceContents):
            return resource.text
        if isinstance(resource, mt.BlobResourceContents):
            mime = resource.mime_type or "application/octet-stream"
            return f"[file {resource.uri}: {mime}, {_size(resource.blob)}]"
    if isinstance(block, mt.ResourceLink):
        return f"[resource: {block.name} {block.uri}]"
    return f"[{type(block).__name__}]"


def _size(b64: str) -> str:
    count = len(b64) * 3 // 4 - b64[-2:].count("=")
    return f"{count:,} bytes"
